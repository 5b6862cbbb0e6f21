"""The raw verbs recorder on this host (native/record/recorder.c, refimpl/rxe/record.py,
``verbspec trace record``): no RDMA device is needed for its side channel, its process lines,
forks, threads and its own failures. Skips, naming what is missing, where libibverbs' headers
are not installed (unless VERBSPEC_REQUIRE_RXE=1); the verbs calls themselves are recorded in
the rxe tier (tests/rxe/test_rxe_record.py)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import require

from verbspec.refimpl.cli.main import main
from verbspec.refimpl.rxe import native_programs as vn
from verbspec.refimpl.rxe import record as rr

PY = sys.executable


@pytest.fixture(scope="module")
def library() -> Path:
    require("rxe", vn.headers_missing())
    return rr.build_recorder()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(f: rr.RecordedFile) -> list[dict]:
    return rr.read_events(f.path)


def _of(res: rr.RecordOutcome, word: str) -> rr.RecordedFile:
    (f,) = [f for f in res.files if word in f.argv]
    return f


# a server that peeks before it reads, answers, and reads to the client's end; a client that
# sends, shuts down its side, reads the answer to the end; both also talk over a Unix pair
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
c, _ = s.accept()
assert c.recv(4, socket.MSG_PEEK) == b"ping"
got = b""
while len(got) < 6:
    got += c.recv(6 - len(got))
c.sendall(b"pong:" + got)
assert c.recv(10) == b""
u1, u2 = socket.socketpair(); u1.sendall(b"unix"); u2.recv(4)
c.close(); s.close()
"""
CLIENT = """
import socket, sys, time
for _ in range(200):
    try:
        c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); break
    except ConnectionRefusedError:
        time.sleep(0.02)
c.sendall(b"ping\\x00\\xff"); c.shutdown(socket.SHUT_WR)
got = b""
while chunk := c.recv(100):
    got += chunk
assert got == b"pong:ping\\x00\\xff", got
c.close()
"""


@pytest.fixture(scope="module")
def tcp_pair(library, tmp_path_factory) -> rr.RecordOutcome:
    port = str(_free_port())
    out = tmp_path_factory.mktemp("rec-tcp")
    return rr.record_on_host([[PY, "-c", SERVER, port, "server"],
                              [PY, "-c", CLIENT, port, "client"]], out, timeout=60,
                             library=library)


def test_the_recorder_builds_warning_free_and_is_cached(tmp_path):
    require("rxe", vn.headers_missing())
    lib = rr.build_recorder(cache=tmp_path)     # -Wall -Wextra -Werror, from scratch
    assert lib.parent == tmp_path and lib.name.startswith("librecorder-")
    assert lib.suffix == ".so" and rr.build_recorder(cache=tmp_path) == lib
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                              text=True).stdout
    for name in ("ibv_open_device", "ibv_reg_mr", "ibv_reg_mr_iova2", "dlopen", "recv"):
        assert f" T {name}\n" in exported


def test_a_tcp_pair_s_bytes_are_recorded_exactly_in_each_direction(tcp_pair):
    assert [c.returncode for c in tcp_pair.commands] == [0, 0], [c.stderr for c in
                                                                 tcp_pair.commands]
    server, client = _of(tcp_pair, "server"), _of(tcp_pair, "client")

    def data(f: rr.RecordedFile, way: str) -> bytes:
        return b"".join(bytes.fromhex(e["data"]) for e in _events(f)
                        if e["ev"] == "tcp" and e["dir"] == way)

    assert data(client, "out") == b"ping\x00\xff" == data(server, "in")      # not the peek
    assert data(server, "out") == b"pong:ping\x00\xff" == data(client, "in")
    sv, cl = _events(server), _events(client)
    (so,) = [e for e in sv if e["ev"] == "tcp_open"]
    (co,) = [e for e in cl if e["ev"] == "tcp_open"]
    assert (so["how"], co["how"]) == ("accept", "connect")
    assert so["local"] == co["peer"] and so["peer"] == co["local"]
    assert so["local"].startswith("127.0.0.1:")
    assert [e["ev"] for e in sv if e["ev"].startswith("tcp_")] == ["tcp_open", "tcp_eof",
                                                                   "tcp_close"]
    assert [(e["ev"], e.get("how")) for e in cl if e["ev"].startswith("tcp_")] == [
        ("tcp_open", "connect"), ("tcp_shutdown", socket.SHUT_WR), ("tcp_eof", None),
        ("tcp_close", None)]
    # the Unix pair and the listening socket are not TCP connections: only fd so["fd"]
    assert {e["fd"] for e in sv if e["ev"].startswith("tcp")} == {so["fd"]}


def test_every_line_has_its_head_and_the_file_its_process_and_end_lines(tcp_pair):
    for f in tcp_pair.files:
        events = _events(f)
        assert f.path.name == f"{Path(PY).name}.{f.pid}.jsonl"
        first = events[0]
        assert first["ev"] == "process" and first["format"] == 1
        assert first["pid"] == f.pid and first["ppid"] == os.getpid()
        assert first["argv"][:2] == [PY, "-c"]
        assert events[-1]["ev"] == "end" and f.ended
        assert all(isinstance(e["t"], int) and isinstance(e["tid"], int) for e in events)
        ts = [e["t"] for e in events]
        assert ts == sorted(ts)


FORK = """
import os, sys
pid = os.fork()
if pid == 0:
    print(os.getpid(), flush=True); sys.exit(0)
os.waitpid(pid, 0)
"""


def test_a_forked_child_writes_a_file_of_its_own(library, tmp_path):
    res = rr.record_on_host([[PY, "-c", FORK]], tmp_path, timeout=60, library=library)
    assert res.commands[0].returncode == 0
    child = int(res.commands[0].stdout)
    by_pid = {f.pid: f for f in res.files}
    assert len(by_pid) == 2 and child in by_pid
    parent = next(p for p in by_pid if p != child)
    first = _events(by_pid[child])[0]
    assert (first["ev"], first["pid"], first["ppid"]) == ("process", child, parent)
    assert by_pid[child].ended and by_pid[parent].ended


THREADS = """
import socket, threading
N = 200
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4)
conns = [socket.create_connection(srv.getsockname()) for _ in range(4)]
peers = [srv.accept()[0] for _ in range(4)]
def talk(i):
    for k in range(N):
        conns[i].sendall(b"%d:%03d;" % (i, k))
ts = [threading.Thread(target=talk, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
for i in range(4):
    conns[i].close()
    while peers[i].recv(65536):
        pass
"""


def test_four_threads_writing_at_once_leave_only_whole_lines(library, tmp_path):
    res = rr.record_on_host([[PY, "-c", THREADS]], tmp_path, timeout=60, library=library)
    assert res.commands[0].returncode == 0, res.commands[0].stderr
    (f,) = res.files
    assert f.bad_lines == 0
    events = _events(f)
    sent = [e for e in events if e["ev"] == "tcp" and e["dir"] == "out"]
    assert len(sent) == 4 * 200 and len({e["tid"] for e in sent}) == 4
    by_fd: dict[int, bytes] = {}
    for e in sent:
        by_fd[e["fd"]] = by_fd.get(e["fd"], b"") + bytes.fromhex(e["data"])
    assert sorted(by_fd.values()) == [b"".join(b"%d:%03d;" % (i, k) for k in range(200))
                                      for i in range(4)]
    received = b"".join(bytes.fromhex(e["data"]) for e in events
                        if e["ev"] == "tcp" and e["dir"] == "in")
    assert len(received) == sum(map(len, by_fd.values()))
    kinds = Counter(e["ev"] for e in events)
    assert kinds["tcp_open"] == 8 and kinds["tcp_eof"] == 4 and events[-1]["ev"] == "end"


@pytest.mark.parametrize("where", [None, "missing"])
def test_without_a_usable_directory_it_says_so_in_one_line_and_the_program_runs(
        library, tmp_path, where):
    env = {k: v for k, v in os.environ.items() if k != rr.DIR_ENV}
    env["LD_PRELOAD"] = str(library)
    if where:
        env[rr.DIR_ENV] = str(tmp_path / where)
    done = subprocess.run([PY, "-c", "import sys; print('ran'); sys.exit(7)"], env=env,
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (7, "ran\n")
    (line,) = done.stderr.splitlines()
    assert line.startswith("verbspec recorder (pid ")
    if where:
        assert f"cannot write a recording into VERBSPEC_RECORD_DIR={tmp_path / where}: " \
               f"No such file or directory; recording nothing" in line
    else:
        assert "VERBSPEC_RECORD_DIR is not set; recording nothing" in line
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ verbspec trace record
def test_trace_record_runs_the_commands_and_lists_their_files(library, tmp_path, capsys):
    out = tmp_path / "rec"
    rc = main(["trace", "record", "--out", str(out), "--json", "--", PY, "-c", "print(1)",
               ":::", PY, "-c", "import sys; sys.exit(5)"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 1 and not got["ok"] and got["where"] == "host"
    assert [c["exit"] for c in got["commands"]] == [0, 5]
    assert got["commands"][0]["stdout"] == "1\n"
    assert len(got["files"]) == 2 and all(f["ended"] for f in got["files"])
    assert all(f["kinds"] == {"process": 1, "end": 1} for f in got["files"])
    rc = main(["trace", "record", "--out", str(out), "--", PY, "-c", "pass"])
    text = capsys.readouterr().out
    assert rc == 0 and f"command 1 (host): exit 0: {PY} -c pass" in text
    assert "1 recording file(s)" in text and "2 events (end 1, process 1)" in text


@pytest.mark.parametrize(("args", "message"), [
    ([], "no command given: put it after --"),
    (["--", PY, ":::"], "command 2 is empty: ':::' must stand between two commands"),
    (["--timeout", "0", "--", PY], "--timeout 0: expected a positive number of seconds"),
    (["--out", "FILE", "--", PY], "FILE: exists and is not a directory"),
    (["--out", "FILE/sub", "--", PY], "FILE/sub: cannot write there: Not a directory"),
])
def test_trace_record_refuses_bad_input_with_exit_3_naming_it(library, tmp_path, capsys,
                                                               args, message):
    (tmp_path / "FILE").write_text("")
    args = [str(tmp_path / a) if a.startswith("FILE") else a for a in args]
    rc = main(["trace", "record", "--out", str(tmp_path / "rec"), *args])
    assert rc == 3 and message in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()


def test_trace_record_without_the_headers_says_what_to_install(library, tmp_path, capsys,
                                                               monkeypatch):
    cc = tmp_path / "cc"        # a compiler that sees no system headers
    cc.write_text(f"#!/bin/sh\nexec {shlex.quote(vn.cprogram.compiler())} -nostdinc \"$@\"\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    rc = main(["trace", "record", "--out", str(tmp_path / "rec"), "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3 and "the recorder cannot be built here: libibverbs-dev is not installed: " \
                       "infiniband/verbs.h not found (Debian: apt install libibverbs-dev)" in err


def test_the_guest_s_script_runs_each_command_preloaded_and_reports_each(library, tmp_path):
    """record_in_guest's shell script, run here by sh in place of the guest: every command
    at once, only the command itself preloaded (not the sh that starts it), each command's
    exit status and output in its own section."""
    from verbspec.refimpl.rxe.guest import GuestResult

    def here(argv, timeout):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return GuestResult(tuple(argv), done.returncode, done.stdout, done.stderr, 0.5)

    res = rr.record_in_guest(here, [[PY, "-c", "print('a b')"],
                                    [PY, "-c", "import sys; sys.exit(4)"]], tmp_path,
                             timeout=60, library=library)
    assert [(c.returncode, c.stdout) for c in res.commands] == [(0, "a b\n"), (4, "")]
    assert res.where == "guest" and not res.ok
    assert sorted(f.argv[1:] for f in res.files) == [("-c", "import sys; sys.exit(4)"),
                                                     ("-c", "print('a b')")]
    assert all(Path(f.argv[0]).name == Path(PY).name for f in res.files)


NONBLOCKING = """
import errno, select, socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.socket(); c.setblocking(False)
assert c.connect_ex(srv.getsockname()) in (0, errno.EINPROGRESS)
try:
    c.recv(1)
except BlockingIOError:
    pass
select.select([], [c], [], 5)
a, _ = srv.accept()
c.send(b"hi")
a.recv(2)
"""


def test_a_non_blocking_connect_is_written_as_opened_at_its_first_data(library, tmp_path):
    res = rr.record_on_host([[PY, "-c", NONBLOCKING]], tmp_path, timeout=60, library=library)
    assert res.commands[0].returncode == 0, res.commands[0].stderr
    (f,) = res.files
    events = [e for e in _events(f) if e["ev"].startswith("tcp")]
    opens = [e for e in events if e["ev"] == "tcp_open"]
    assert sorted(e["how"] for e in opens) == ["accept", "connect"]
    (conn,) = [e for e in opens if e["how"] == "connect"]
    first = next(e for e in events if e.get("fd") == conn["fd"])
    assert first is conn and conn["peer"] != "?"
    (sent,) = [e for e in events if e["ev"] == "tcp" and e["fd"] == conn["fd"]]
    assert (sent["dir"], sent["data"]) == ("out", b"hi".hex())


# a process that sends, then leaves by _exit (no `end`); one that sends, then blocks reading
# until it is killed: the recorder writes its lines in batches, and each of these is a point
# where the batch so far must already be on disk
LEAVE = """
import os, socket, sys
a, b = socket.socket(), socket.socket()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
a.connect(srv.getsockname()); b, _ = srv.accept()
a.sendall(b"before")
if sys.argv[1] == "exit":
    os._exit(7)
print("blocked", flush=True)
a.recv(1)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_lines_batched_are_on_disk_when_the_process_leaves_without_an_end(library, tmp_path,
                                                                          how):
    argv = [PY, "-c", LEAVE, how]
    if how == "exit":
        res = rr.record_on_host([argv], tmp_path, timeout=60, library=library)
        assert res.commands[0].returncode == 7
        (f,) = res.files
    else:
        env = {**os.environ, **rr.recorder_env(library, tmp_path)}
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "blocked\n"      # about to block in its read
        # the process writes nothing more and never exits by itself: only the flush before
        # its read can put the line on disk
        deadline = time.monotonic() + 20
        while b"before".hex().encode() not in b"".join(
                f.read_bytes() for f in tmp_path.glob("*.jsonl")):
            assert time.monotonic() < deadline, "the batch never reached the disk"
            time.sleep(0.05)
        p.kill()
        p.wait()
        (f,) = rr.recordings(tmp_path)
    events = _events(f)
    assert not f.ended and events[-1]["ev"] != "end"
    sent = [e for e in events if e["ev"] == "tcp" and e["dir"] == "out"]
    assert bytes.fromhex(sent[0]["data"]) == b"before"


def test_the_cost_bench_alternates_which_run_of_a_repetition_goes_first():
    """``bench verbs --record`` runs its pairs ABBA: a load that drifts over the guest command
    favours neither the recorded nor the unrecorded runs."""
    lines = rr.RecordBench(gates=10, reps=4).lines(Path("/g/verbs_gate"), Path("/g/rec.so"))

    def first(tag: str) -> int:
        return next(i for i, line in enumerate(lines) if tag in line)

    assert [first(f"plain{i}") < first(f"rec{i}") for i in range(4)] == [True, False,
                                                                          True, False]
    assert sum("LD_PRELOAD" in line for line in lines) == 8   # both ranks of each recorded pair
