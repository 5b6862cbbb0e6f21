"""Raw recordings read (refimpl/traces/raw.py) and mapped by profiles
(refimpl/traces/profiles/): bad input refused naming the file, line and what was wrong, a call
the recorder could not record refusing the recording, and the profile's rules as docs/verbs.md
shows them. (Real recordings are validated in the rxe tier, tests/rxe/test_rxe_raw.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verbspec.refimpl.cli.main import main as cli
from verbspec.refimpl.traces.profiles import PROFILES, raw_ranks
from verbspec.refimpl.traces.profiles.common import ProfileError, rules_table
from verbspec.refimpl.traces.raw import read_recordings
from verbspec.refimpl.traces.read import TraceInputError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "verbs.md"
PROCESS = {"ev": "process", "t": 1, "tid": 7, "format": 1, "pid": 7, "ppid": 1,
           "argv": ["./prog", "--rank", "0"]}
QP = {"ev": "create_qp", "t": 3, "tid": 7, "qp": 1, "qp_num": 17, "qp_type": "UC",
      "send_cq": 2, "recv_cq": 2, "max_send_wr": 1024, "max_recv_wr": 1024}


def _write(d: Path, name: str, lines: list) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


@pytest.mark.parametrize("lines, message", [
    ([PROCESS, "{not json"], r"line 2: not JSON"),
    ([PROCESS, {"ev": "post_fancy", "t": 2}], r"line 2: unknown event 'post_fancy'"),
    ([PROCESS, {"ev": "reg_mr", "t": 2, "addr": 1}], r"line 2: a reg_mr line without length"),
    ([{"ev": "end", "t": 1}], r"line 1: a recording begins with a process line"),
    ([{**PROCESS, "format": 2}], r"line 1: recording format 2"),
    ([PROCESS, {"ev": "poll_cq", "t": 2, "cq": 1, "max": 4, "rc": 2, "wcs": []}],
     r"line 2: a poll that returned 2 with 0 completions"),
    ([PROCESS, {"ev": "tcp", "t": 2, "fd": 3, "dir": "out", "data": "zz"}],
     r"line 2: a tcp line whose data is not hex"),
    ([PROCESS, {"ev": "end", "t": 2}, {"ev": "end", "t": 3}], r"line 3: a line after the end"),
    ([PROCESS, {"ev": "unsupported", "t": 2, "call": "ibv_create_qp_ex",
                "detail": "an extended queue pair"}],
     r"line 2: the program called ibv_create_qp_ex, which the recorder cannot record "
     r"\(an extended queue pair\)"),
])
def test_a_bad_recording_is_refused_naming_its_line(tmp_path, lines, message):
    _write(tmp_path, "prog.7.jsonl", lines)
    with pytest.raises(TraceInputError, match=message):
        read_recordings([tmp_path])


def test_a_directory_without_recordings_is_refused(tmp_path):
    with pytest.raises(TraceInputError, match="no recordings"):
        read_recordings([tmp_path])
    with pytest.raises(TraceInputError, match="no such file"):
        read_recordings([tmp_path / "missing"])


def test_the_profile_needs_two_ranks(tmp_path):
    _write(tmp_path, "prog.7.jsonl", [PROCESS, QP, {"ev": "end", "t": 9}])
    _write(tmp_path, "sh.6.jsonl", [{**PROCESS, "pid": 6, "argv": ["sh"]}])
    with pytest.raises(ProfileError, match=r"1 of the 2 recorded processes created a queue "
                                           r"pair \(prog.7.jsonl"):
        raw_ranks([tmp_path], "verbs-gate", {})


def test_a_failed_queue_pair_creation_is_read_and_refused_by_the_profile(tmp_path):
    failed = {k: v for k, v in QP.items() if k not in ("qp", "qp_num", "max_send_wr")}
    for pid in (7, 8):
        _write(tmp_path, f"prog.{pid}.jsonl",
               [{**PROCESS, "pid": pid}, {"ev": "create_cq", "t": 2, "cq": 2, "cqe": 515},
                {**failed, "errno": 12}])
    with pytest.raises(ProfileError, match=r"line 3: the create_qp failed \(errno 12\)"):
        raw_ranks([tmp_path], "verbs-gate", {})


def test_a_queue_pair_of_another_type_is_refused_naming_the_line(tmp_path):
    for pid in (7, 8):
        _write(tmp_path, f"prog.{pid}.jsonl",
               [{**PROCESS, "pid": pid}, {"ev": "create_cq", "t": 2, "cq": 2, "cqe": 515},
                {**QP, "qp_type": "UD"}])
    with pytest.raises(ProfileError, match=r"line 3: a UD queue pair; verbs_gate's is UC or "
                                           r"RC"):
        raw_ranks([tmp_path], "verbs-gate", {})


@pytest.mark.parametrize("argv, message", [
    (["--raw", "X"], "--raw and --profile go together"),
    (["D", "--raw", "X", "--profile", "verbs-gate"], "one of the two"),
    ([], "one of the two"),
    (["D", "--param", "timeout_ms=5"], "--param is for raw recordings"),
    (["--raw", "X", "--profile", "nope"], "invalid choice: 'nope'"),
    (["--raw", "X", "--profile", "verbs-gate", "--param", "windoww=3"],
     "unknown parameter 'windoww'"),
])
def test_the_command_refuses_bad_arguments_with_exit_3(tmp_path, capsys, argv, message):
    (tmp_path / "X").mkdir()
    (tmp_path / "D").mkdir()
    argv = [str(tmp_path / a) if a in ("X", "D") else a for a in argv]
    assert cli(["trace", "validate", *argv]) == 3
    assert message in capsys.readouterr().err


def test_each_profile_s_rules_are_in_the_docs_as_the_code_has_them():
    docs = DOCS.read_text()
    for p in PROFILES.values():
        assert f"### The profile `{p.name}`" in docs
        assert rules_table(p) in docs, f"docs/verbs.md: the {p.name} table differs from its " \
                                       f"RULES; regenerate it with rules_table()"


def _pyverbs_rank(rank: int, extra: list[dict]) -> list[dict]:
    """A pyverbs-gate rank's setup as the library records it (refimpl/transport/verbs_pair.py,
    verbs_device.py): its two connections, CQ, UC queue pair, four regions, the control line
    announcing them, the queue pair's states and the channel's hello; then ``extra`` control
    lines written (each also read by the peer)."""
    ports = ("127.0.0.1:5000", "127.0.0.1:6000"), ("127.0.0.1:5001", "127.0.0.1:6001")
    how = "accept" if rank == 0 else "connect"
    qpn, peer_qpn = 17 + rank, 18 - rank
    lines: list[dict] = [{**PROCESS, "pid": 10 + rank, "ppid": 9}]
    for fd, (a, b) in zip((5, 6), ports, strict=True):
        local, peer = (a, b) if rank == 0 else (b, a)
        lines.append({"ev": "tcp_open", "fd": fd, "how": how, "local": local, "peer": peer})
    lines += [{"ev": "create_cq", "cq": 2, "cqe": 515},
              {**QP, "qp_num": qpn}]
    sizes = (86 * 24592, 86 * 24592, 256 * 16384, 256 * 16384)
    regions = {}
    for k, (name, n) in enumerate(zip(("in", "out", "stage", "stage_out"), sizes, strict=True)):
        addr = (k + 1) << 32
        lines.append({"ev": "reg_mr", "addr": addr, "length": n, "access": 1, "lkey": k + 1,
                      "rkey": 0})
        regions[name] = {"addr": addr, "length": n, "rkey": 0}

    def ctl(msg: dict) -> str:
        return (json.dumps(msg, separators=(",", ":")) + "\n").encode().hex()

    mine = {"qp": {"qpn": qpn, "psn": 1, "gid": "fe80::1", "mtu": 3}, "regions": regions}
    theirs = {**mine, "qp": {**mine["qp"], "qpn": peer_qpn}}
    lines += [{"ev": "tcp", "fd": 5, "dir": "out", "data": ctl(mine)},
              {"ev": "tcp", "fd": 5, "dir": "in", "data": ctl(theirs)}]
    lines += [{"ev": "modify_qp", "qp_num": qpn, "mask": 1, "state": s, "rc": 0,
               "dest_qp_num": peer_qpn if s == "RTR" else None} for s in ("INIT", "RTR", "RTS")]
    hello = (0x48475356).to_bytes(4, "little") + (16).to_bytes(4, "little") + \
        (16384).to_bytes(4, "little")
    lines += [{"ev": "tcp", "fd": 6, "dir": d, "data": hello.hex()} for d in ("out", "in")]
    for msg in extra:
        lines += [{"ev": "tcp", "fd": 5, "dir": d, "data": ctl(msg)} for d in ("out", "in")]
    return [{**x, "t": i + 1, "tid": 10 + rank} if x["ev"] != "process" else x
            for i, x in enumerate(lines)]


def test_a_pyverbs_gate_control_message_of_an_unknown_kind_is_refused_naming_its_line(
        tmp_path):
    # the parent that forked the ranks records only its process line
    _write(tmp_path, "python.9.jsonl", [{**PROCESS, "pid": 9}])
    _write(tmp_path, "python.10.jsonl", _pyverbs_rank(0, []))
    _write(tmp_path, "python.11.jsonl", _pyverbs_rank(1, []))
    a, b = raw_ranks([tmp_path], "pyverbs-gate", {})
    assert (a.rank, b.rank, a.config["vec_bytes"], a.config["window"]) == (0, 1, 24592, 16)
    assert a.events == [] and not a.ended
    bad = _pyverbs_rank(0, [{"rekey": 3}])
    _write(tmp_path, "python.10.jsonl", bad)
    line = len(bad) - 1         # the unknown message written (its read follows)
    with pytest.raises(ProfileError, match=rf"python.10.jsonl line {line}: a control message "
                                           rf"of an unknown kind \(\{{\"rekey\": 3\}}\)"):
        raw_ranks([tmp_path], "pyverbs-gate", {})
