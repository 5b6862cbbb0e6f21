"""The native verbs transport (native/verbs/, refimpl/rxe/native_programs.py): the C gate engine
over a real UC queue pair, and tagged messaging matched by the C tag-matching engine over a real
RC queue pair, each between two processes in the soft-RoCE guest (docs/verbs.md).

The build tests run in the default tier where libibverbs' headers are installed (it skips,
naming them, elsewhere, and fails instead under VERBSPEC_REQUIRE_RXE=1); the runs need the guest
(``pytest -m rxe``). No time is asserted: the run's figures are printed by
``verbspec bench verbs``."""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import check_device_trace, require

from verbspec.refimpl.rxe import native_programs as vn

# 12 MiB and half a chunk: three windows of 256 chunks, then one of a short chunk (8 KiB)
BIG = (12 << 20) + 8192
GATES, MORE = 10_000, 1_000


def _program() -> Path:
    require("rxe", vn.headers_missing())
    return vn.build_gate_program()


def _tagmatch_program() -> Path:
    require("rxe", vn.headers_missing())
    return vn.build_tagmatch_program()


# ------------------------------------------------------------------ host side, default tier
BUILDERS = [pytest.param(vn.build_gate_program, id="gate"),
            pytest.param(vn.build_tagmatch_program, id="tagmatch")]


@pytest.mark.parametrize("build", BUILDERS)
def test_the_program_builds_warning_free(build, tmp_path):
    require("rxe", vn.headers_missing())
    exe = build(cache=tmp_path)             # -Wall -Wextra -Werror, from scratch
    assert exe.parent == tmp_path and os.access(exe, os.X_OK)
    assert build(cache=tmp_path) == exe     # the second call hits the cache


def test_the_programs_share_the_queue_pair_code_but_not_a_cache_entry(tmp_path):
    require("rxe", vn.headers_missing())
    gate = vn.build_gate_program(cache=tmp_path)
    tagmatch = vn.build_tagmatch_program(cache=tmp_path)
    assert gate.name.startswith("verbs_gate-") and tagmatch.name.startswith("verbs_tagmatch-")
    assert vn.VERBS / "verbs_qp.c" in vn.GATE_SOURCES and vn.VERBS / "verbs_qp.c" in \
        vn.TAGMATCH_SOURCES


@pytest.mark.parametrize("build", BUILDERS)
def test_without_the_headers_the_build_says_what_to_install(build, tmp_path, monkeypatch):
    require("rxe", vn.headers_missing())
    # a compiler that sees no system headers, as on a machine without libibverbs-dev
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\nexec {shlex.quote(vn.cprogram.compiler())} -nostdinc \"$@\"\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    assert vn.headers_missing() == vn.NOT_INSTALLED
    with pytest.raises(vn.VerbsUnavailable, match="libibverbs-dev is not installed: "
                                                  "infiniband/verbs.h not found"):
        build(cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("args", "message"), [
    ([], "--rank is required"),
    (["--rank", "0"], "--device is required"),
    (["--rank", "0", "--device", "rxe0"], "give exactly one of --listen PORT and --peer "
                                          "HOST:PORT"),
    (["--rank", "2", "--device", "rxe0"], "--rank: expected an integer in 0..1, got '2'"),
    (["--rank", "0", "--device", "rxe0", "--peer", "nohost"],
     "--peer: expected HOST:PORT, got 'nohost'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--vector-bytes", "24577"],
     "--vector-bytes, --max-msg and --big-bytes must be multiples of 8"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--gates"], "--gates: needs a value"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--bogus", "1"],
     "unknown option --bogus"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--qp", "ud"],
     "--qp: expected uc or rc, got 'ud'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--qp"], "--qp: needs a value"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--verify-blocks", "-1"],
     "--verify-blocks: expected an integer in 0..1000000, got '-1'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--block-layers", "0"],
     "--block-layers: expected an integer in 1..65536, got '0'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--block-rows", "32769"],
     "--block-rows: expected an integer in 1..32768, got '32769'"),
])
def test_bad_arguments_exit_2_naming_what_was_wrong(args, message):
    import subprocess

    done = subprocess.run([str(_program()), *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize(("args", "message"), [
    ([], "--rank is required"),
    (["--rank", "1"], "--device is required"),
    (["--rank", "0", "--device", "rxe0"], "give exactly one of --listen PORT and --peer "
                                          "HOST:PORT"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--peer", "h:2"],
     "give exactly one of --listen PORT and --peer HOST:PORT"),
    (["--rank", "-1", "--device", "rxe0"], "--rank: expected an integer in 0..1, got '-1'"),
    (["--rank", "0", "--device", "rxe0", "--peer", "h:0"],
     "--peer: expected an integer in 1..65535, got '0'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--sizes", "64,100"],
     "--sizes: 100 is not a multiple of 8"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--sizes", "64,,128"],
     "--sizes: expected 1 to 16 byte counts separated by commas, got '64,,128'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--sizes", "64,x"],
     "--sizes: expected an integer in 8..1073741824, got 'x'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--rounds", "0"],
     "--rounds: expected an integer in 1..1000, got '0'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--eager-limit", "65500"],
     "--eager-limit 65500: a 60-byte header and the eager payload must fit --max-msg 65536"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--bounces", "0"],
     "--bounces: expected an integer in 1..32768, got '0'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--timeout-ms"],
     "--timeout-ms: needs a value"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--exit-after", "-1"],
     "--exit-after: expected an integer in 0..100000, got '-1'"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--gates", "5"],
     "unknown option --gates"),
])
def test_the_tagged_program_refuses_bad_arguments_with_exit_2_naming_them(args, message):
    import subprocess

    done = subprocess.run([str(_tagmatch_program()), *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_pair_script_reports_each_rank_in_its_own_section():
    text = ("@@verbspec gate rank 0 exit 0\n{\"a\": 1}\n@@verbspec gate rank 0 stderr\nlog\n"
            "@@verbspec gate rank 1 exit 3\n\n@@verbspec gate rank 1 stderr\nleft\n")
    assert vn.split_sections(text) == {("gate", 0): (0, "{\"a\": 1}\n", "log\n"),
                                       ("gate", 1): (3, "\n", "left\n")}
    argv = vn.GateRun(gates=5, more_gates=1, big_bytes=0).argv(Path("/x/verbs_gate"), 1)
    assert argv[:5] == ["/x/verbs_gate", "--rank", "1", "--device", "rxe1"]
    assert "--peer" in argv and argv[argv.index("--peer") + 1] == "10.77.0.1:18515"
    run = vn.TagmatchRun(rounds=2, sizes=(64, 1 << 20), port=18_600, trace_dir="/t")
    argv = run.argv(Path("/x/verbs_tagmatch"), 0)
    assert argv[:5] == ["/x/verbs_tagmatch", "--rank", "0", "--device", "rxe0"]
    assert argv[argv.index("--listen") + 1] == "18600"
    assert argv[argv.index("--sizes") + 1] == "64,1048576" and run.messages == 12
    assert argv[-2:] == ["--trace", "/t/trace-rank0.jsonl"]


def test_the_gate_run_passes_queue_pair_and_verify_block_options_only_when_set():
    exe = Path("/x/verbs_gate")
    plain = vn.GateRun(gates=5, more_gates=1, big_bytes=0).argv(exe, 0)
    assert not {"--qp", "--verify-blocks", "--block-layers", "--block-rows"} & set(plain)
    argv = vn.GateRun(gates=5, qp="rc", verify_blocks=2, block_rows=3).argv(exe, 1)
    for option, value in (("--qp", "rc"), ("--verify-blocks", "2"), ("--block-rows", "3")):
        assert argv[argv.index(option) + 1] == value
    assert "--block-layers" not in argv


def test_a_gate_pair_outcome_sums_the_verify_blocks():
    def rank(r: int) -> dict:
        return {"rank": r, "device": f"rxe{r}", "qp_type": "rc", "gates": 44, "big_gates": 1,
                "big_bytes": 65_536, "verify_blocks": 2, "vector_bytes": 24_576,
                "payloads_verified": 60, "mismatches": 0, "drops": 0,
                "round_trip_us": {"p50": 1.0, "p99": 2.0, "mean": 1.5}, "gates_per_s": 9.0,
                "big_mib_per_s": 1.0, "wall_s": 1.0 + r, "ok": True, "error": ""}

    m = vn.merge(rank(0), rank(1))
    assert (m["verify_blocks"], m["gates"], m["qp_type"], m["payloads_verified"]) == \
        (4, 44, "rc", 120)


def test_a_tagged_pair_outcome_sums_both_ranks():
    def rank(r: int, ok: bool, error: str) -> str:
        return ("{" + f'"rank": {r}, "device": "rxe{r}", "messages": 12, "eager": 6, '
                f'"rendezvous": 6, "bytes": 100, "verified": 12 , "mismatches": {1 - r}, '
                f'"credit_reads": {r}, "mib_per_s": 2.5, "wall_s": {1 + r}, '
                f'"ok": {str(ok).lower()}, "error": "{error}"' + "}\n")

    sections = {("tagmatch", 0): (1, rank(0, False, "bad"), "x"),
                ("tagmatch", 1): (0, rank(1, True, ""), "")}
    pair = vn.pair_outcome(sections, "tagmatch", vn.merge_tagmatch)
    assert not pair.ok and pair.ranks[0].returncode == 1
    m = pair.merged
    assert (m["messages"], m["eager"], m["rendezvous"], m["bytes"], m["verified"],
            m["mismatches"], m["credit_reads"]) == (24, 12, 12, 200, 24, 1, 1)
    assert (m["wall_s"], m["errors"], m["ok"]) == (2, ["bad"], False)
    with pytest.raises(vn.VerbsRunError, match="rank 1's section 'tagmatch' is missing"):
        vn.pair_outcome({("tagmatch", 0): sections[("tagmatch", 0)]}, "tagmatch",
                        vn.merge_tagmatch)


# ------------------------------------------------------------------ in the guest
@pytest.fixture(scope="module")
def gate_run(rxe_guest, rxe_scratch):
    """Both ranks, rxe0 <-> rxe1: 10,000 gates, a big gate of 12 MiB and 8 KiB, 1,000 more
    gates, traced into the shared scratch directory."""
    exe = _program()
    traces = rxe_scratch / "native"
    traces.mkdir()
    run = vn.GateRun(gates=GATES, more_gates=MORE, big_bytes=BIG, timeout_ms=10_000,
                     trace_dir=str(traces))
    lines = list(vn.pair_lines(exe, run))
    for r in (0, 1):
        t = f"{traces}/trace-rank{r}.jsonl"
        lines += [f"echo '{vn.MARK} trace{r} rank {r} exit 0'", f"head -n 1 {t}",
                  f"grep -c '\"name\": \"exchange\"' {t}", f"grep -c '\"ev\": \"poll\"' {t}",
                  f"tail -n 1 {t}", f"echo '{vn.MARK} trace{r} rank {r} stderr'"]
    res = rxe_guest.run(vn.pair_script(lines), timeout=1800)
    sections = vn.split_sections(res.stdout)
    return vn.pair_outcome(sections), sections, traces


@pytest.mark.rxe
def test_gates_big_gate_and_rearm_over_uc_with_every_payload_verified(gate_run):
    pair, _, _ = gate_run
    for r in pair.ranks:
        assert r.returncode == 0, f"rank {r.rank}: {r.stderr}"
    m = pair.merged
    assert m["ok"] and m["errors"] == []
    assert (m["gates"], m["big_gates"], m["big_bytes"]) == (GATES + MORE, 1, BIG)
    assert m["vector_bytes"] > 16384                # two chunks per vector
    chunks = -(-BIG // 16384)
    # each rank checks every vector and every big-gate chunk the peer sent
    assert m["payloads_verified"] == 2 * (GATES + MORE + chunks)
    assert (m["mismatches"], m["drops"]) == (0, 0)


@pytest.mark.rxe
def test_each_rank_writes_its_device_trace(gate_run):
    import json

    _, sections, _ = gate_run
    for r in (0, 1):
        _, out, _ = sections[(f"trace{r}", r)]
        first, exchanges, polls, last = out.strip().splitlines()
        begin = json.loads(first)
        assert (begin["ev"], begin["protocol"], begin["rank"], begin["transport"],
                begin["engine"]) == ("begin", "gate", r, "verbs-c", "native")
        assert begin["config"]["qp_type"] == "uc" and begin["config"]["vec_bytes"] > 16384
        assert int(exchanges) == GATES + MORE and int(polls) > 0
        assert json.loads(last) == {"ev": "end"}


@pytest.mark.rxe
def test_the_device_trace_of_both_ranks_is_a_run_of_the_spec(gate_run):
    """Every work request posted and completion polled on the device, both ranks, checked on
    the host against the gate spec: each a spec step from the state reached."""
    from verbspec.refimpl.traces.read import read_pair
    from verbspec.refimpl.traces.validate_gate import validate_gate

    _, _, traces = gate_run
    rep = validate_gate(read_pair([traces / "trace-rank0.jsonl", traces / "trace-rank1.jsonl"]))
    check_device_trace(rep, "native transport, device trace")
    # every decode gate before the big gate was a run of the spec
    assert min(rep.gates) >= GATES


@pytest.mark.rxe
def test_a_bad_device_name_is_an_error_naming_it(rxe_guest):
    exe = _program()
    res = rxe_guest.run([str(exe), "--rank", "0", "--device", "nosuch", "--listen", "18700"],
                        timeout=120)
    assert res.returncode == 1
    assert "no RDMA device named 'nosuch' (devices here: " in res.stderr
    assert "rxe0" in res.stderr


@pytest.mark.rxe
def test_a_peer_that_dies_mid_run_ends_the_other_rank_with_the_protocol_error(rxe_guest):
    exe = _program()
    run = vn.GateRun(gates=400, more_gates=0, big_bytes=0, timeout_ms=10_000, port=18_701,
                     extra=((), ("--exit-after", "100")))
    pair = vn.run_pair(rxe_guest.run, exe, run, timeout=600)
    survivor, dead = pair.ranks
    assert dead.returncode == 3 and "leaving after gate 100" in dead.stderr
    assert survivor.returncode == 1
    assert survivor.result is not None and not survivor.result["ok"]
    assert survivor.result["error"] == "peer disconnected during RDMA gate"
    assert survivor.result["gates"] == 100
    assert "verbs_gate rank 0: peer disconnected during RDMA gate" in survivor.stderr


@pytest.mark.rxe
def test_no_peer_to_connect_to_is_an_error_naming_the_address(rxe_guest):
    exe = _program()
    res = rxe_guest.run([str(exe), "--rank", "1", "--device", "rxe1", "--peer",
                         "10.77.0.1:18702", "--connect-timeout-ms", "1000"], timeout=120)
    assert res.returncode == 1
    assert ("connecting to the peer at 10.77.0.1:18702: Connection refused (retried for "
            "1000 ms)") in res.stderr


# ------------------------------------------------------------------ tagged traffic in the guest
TAGGED = vn.TagmatchRun()     # the demo's tagged part: 3 rounds x 3 phases x 4 sizes per rank


def _trace_pair(where: Path):
    from verbspec.refimpl.traces.read import read_pair

    return read_pair([where / "trace-rank0.jsonl", where / "trace-rank1.jsonl"])


@pytest.fixture(scope="module")
def tagged_run(rxe_guest, rxe_scratch):
    """Both ranks of the tagged program, rxe0 <-> rxe1, traced into the shared scratch
    directory."""
    exe = _tagmatch_program()
    traces = rxe_scratch / "native-tagged"
    traces.mkdir()
    pair = vn.run_pair(rxe_guest.run, exe, replace(TAGGED, trace_dir=str(traces)), timeout=600)
    return pair, traces


@pytest.mark.rxe
def test_tagged_traffic_over_rc_arrives_with_every_payload_verified(tagged_run):
    pair, _ = tagged_run
    for r in pair.ranks:
        assert r.returncode == 0, f"rank {r.rank}: {r.stderr}"
        assert r.result is not None and r.result["messages"] == TAGGED.messages
    m = pair.merged
    assert m["ok"] and m["errors"] == [] and m["mismatches"] == 0
    per_size = 2 * TAGGED.rounds * 3         # messages of each size, both ranks
    eager = sum(per_size for s in TAGGED.sizes if s <= TAGGED.eager_limit)
    assert (m["messages"], m["verified"]) == (2 * TAGGED.messages, 2 * TAGGED.messages)
    assert m["eager"] == eager > 0 and m["rendezvous"] == 2 * TAGGED.messages - eager > 0
    assert m["bytes"] == per_size * sum(TAGGED.sizes)
    print(f"\nnative tagged run: {m['messages']} messages ({m['eager']} eager, "
          f"{m['rendezvous']} rendezvous), {m['bytes']:,} bytes verified, "
          f"{m['wall_s']:.1f} s per rank")


@pytest.mark.rxe
def test_the_tagged_run_used_wildcards_posted_before_and_after_arrival(tagged_run):
    """From the traces: receives naming source and tag, ANY_SOURCE with ANY_TAG, and ANY_TAG
    alone, on both ranks; the program's begin line says what ran."""
    _, traces = tagged_run
    for t in _trace_pair(traces):
        assert (t.protocol, t.transport, t.engine) == ("tagged", "verbs-c", "native")
        kinds = {(e.data["args"]["source"] == -1, e.data["args"]["tag"] == -1)
                 for e in t.events if e.ev == "call" and e.data["name"] == "irecv"}
        assert kinds == {(False, False), (True, True), (False, True)}
        assert t.ended


@pytest.mark.rxe
def test_the_tagged_program_speaks_the_wire_of_refimpl_tagged(tagged_run):
    """The C program's hello is tagged.HELLO, byte for byte; its bounce buffers hold a
    tagged.HEADER and an eager payload; every SEND is that header, an eager one with its
    payload after it."""
    from verbspec.refimpl.library import tagmatch_endpoint as tagged

    _, traces = tagged_run
    for t in _trace_pair(traces):
        hello = [bytes.fromhex(e.data["bytes"]) for e in t.events
                 if e.ev == "tcp_write" and e.data["kind"] == "hello"]
        assert [tagged.HELLO.unpack(h) for h in hello] == [
            (tagged.HELLO_MAGIC, tagged.VERSION, t.rank, TAGGED.eager_limit, 32,
             TAGGED.max_msg, 0)]
        bounce = {w[3] for e in t.events if e.ev == "post_recv" for w in e.data["wrs"]}
        assert bounce == {tagged.HEADER.size + TAGGED.eager_limit}
        sends = [(w[3], h) for e in t.events if e.ev == "post_send"
                 for w, h in zip(e.data["wrs"], e.data["hdrs"], strict=True)]
        assert {h["kind"] for _, h in sends} == {"eager", "rts", "fin"}
        for length, h in sends:
            assert length == tagged.HEADER.size + (h["bytes"] if h["kind"] == "eager" else 0)
            assert h["src"] == t.rank
        assert [h["seq"] for _, h in sends] == list(range(1, len(sends) + 1))


@pytest.mark.rxe
def test_the_tagged_device_traces_are_checked_by_the_tagged_validator(tagged_run):
    """Both ranks' device traces, checked on the host as a pyverbs run's are: queue-pair order,
    the wire, MPI matching through the spec's list engine, READ pieces and FIN after them."""
    from verbspec.refimpl.traces.validate_tagmatch import validate_tagged

    _, traces = tagged_run
    rep = validate_tagged(_trace_pair(traces))
    print(f"\nnative tagged device trace: {rep.recorded_steps} recorded steps validated in "
          f"{rep.seconds:.1f} s ({rep.detail})")
    assert rep.ok, f"{rep.message}\n  rank {rep.rank} line {rep.line}: {rep.event}"
    assert f"receives completed {2 * TAGGED.messages}" in rep.detail
    rendezvous = 2 * TAGGED.rounds * 3 * sum(s > TAGGED.eager_limit for s in TAGGED.sizes)
    assert f"rendezvous {rendezvous}, reads" in rep.detail and f"fins {rendezvous}" in rep.detail


@pytest.mark.rxe
def test_a_tampered_copy_of_the_tagged_trace_is_rejected_where_it_was_changed(tagged_run,
                                                                              tmp_path):
    """The validator reads the C program's trace for what it says: a receive's status with
    another tag than its MPI match's is rejected at that line."""
    import json
    import shutil

    from verbspec.refimpl.traces.validate_tagmatch import validate_tagged

    _, traces = tagged_run
    lines = (traces / "trace-rank0.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines)
              if '"status"' in line and json.loads(line)["status"]["source"] == 1)
    event = json.loads(lines[at])
    event["status"]["tag"] += 1
    lines[at] = json.dumps(event)
    (tmp_path / "trace-rank0.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(traces / "trace-rank1.jsonl", tmp_path / "trace-rank1.jsonl")
    rep = validate_tagged(_trace_pair(tmp_path))
    assert not rep.ok and (rep.rank, rep.line) == (0, at + 1)
    assert "its MPI match gives" in rep.message


@pytest.mark.rxe
def test_one_bounce_buffer_per_peer_is_flow_controlled_by_credit_reads(rxe_guest, rxe_scratch):
    """With one bounce buffer a sender is out of credits after each message: it READs the
    peer's count instead of meeting RNR (the queue pair has rnr_retry 0, so an RNR would fail
    the run); the trace still validates."""
    from verbspec.refimpl.traces.validate_tagmatch import validate_tagged

    traces = rxe_scratch / "native-tagged-credits"
    traces.mkdir()
    run = vn.TagmatchRun(rounds=1, port=18_531, trace_dir=str(traces),
                       extra=(("--bounces", "1"),) * 2)
    pair = vn.run_pair(rxe_guest.run, _tagmatch_program(), run, timeout=600)
    assert pair.ok, [r.stderr for r in pair.ranks]
    assert pair.merged["verified"] == 2 * run.messages and pair.merged["mismatches"] == 0
    # each rank's second send of the run finds no credit: no poll came between the two
    assert all(r.result["credit_reads"] > 0 for r in pair.ranks)
    rep = validate_tagged(_trace_pair(traces))
    assert rep.ok, rep.message


@pytest.mark.rxe
def test_ranks_with_different_plans_refuse_each_other_naming_the_setting(rxe_guest):
    run = vn.TagmatchRun(rounds=1, port=18_532, extra=((), ("--rounds", "2")))
    pair = vn.run_pair(rxe_guest.run, _tagmatch_program(), run, timeout=600)
    r0, r1 = pair.ranks
    assert r0.returncode == 1 and r1.returncode == 1
    assert "verbs_tagmatch rank 0: the peer runs with rounds 2, this rank with 1" in r0.stderr
    assert "verbs_tagmatch rank 1: the peer runs with rounds 1, this rank with 2" in r1.stderr
    assert r0.result is not None and r0.result["error"] == "the peer runs with rounds 2, this " \
                                                          "rank with 1"


@pytest.mark.rxe
def test_a_tagged_peer_that_dies_mid_run_ends_the_other_rank_with_an_error_naming_it(rxe_guest):
    """Rank 1 leaves without a word after 6 messages (mid-round): rank 0 fails, naming the
    peer's end as it met it (a wait that sees the connection close without BYE, a write to it,
    or the peer's queue pair gone), never a timeout and never a success."""
    import re

    run = vn.TagmatchRun(rounds=1, port=18_533, extra=((), ("--exit-after", "6")))
    pair = vn.run_pair(rxe_guest.run, _tagmatch_program(), run, timeout=600)
    survivor, dead = pair.ranks
    assert dead.returncode == 3
    assert "verbs_tagmatch rank 1: leaving after 6 messages without a word" in dead.stderr
    assert survivor.returncode == 1 and survivor.result is not None
    assert not survivor.result["ok"] and survivor.result["messages"] < run.messages
    error = survivor.result["error"]
    assert re.match(r"peer rank 1 is gone \(its TCP connection closed without BYE: the process "
                    r"died\) while a .* waited$|TCP side channel: send: .* \(writing |the peer "
                    r"closed the TCP connection before it sent |rdma completion error: ", error), \
        error
    assert f"verbs_tagmatch rank 0: {error}" in survivor.stderr
