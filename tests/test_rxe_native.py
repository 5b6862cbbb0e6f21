"""The native verbs transport (native/verbs/, refimpl/verbs_native.py): the C gate engine over a
real UC queue pair between two processes in the soft-RoCE guest (docs/verbs.md).

The build test runs in the default tier where libibverbs' headers are installed (it skips,
naming them, elsewhere, and fails instead under VERBSPEC_REQUIRE_RXE=1); the runs need the guest
(``pytest -m rxe``). No time is asserted: the run's figures are printed by
``verbspec bench verbs``."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest
from conftest import check_device_trace, require

from verbspec.refimpl import verbs_native as vn

BIG = 12 << 20
GATES, MORE = 10_000, 1_000


def _program() -> Path:
    require("rxe", vn.headers_missing())
    return vn.build_gate_program()


# ------------------------------------------------------------------ host side, default tier
def test_the_gate_program_builds_warning_free(tmp_path):
    require("rxe", vn.headers_missing())
    exe = vn.build_gate_program(cache=tmp_path)     # -Wall -Wextra -Werror, from scratch
    assert exe.parent == tmp_path and os.access(exe, os.X_OK)
    assert vn.build_gate_program(cache=tmp_path) == exe     # the second call hits the cache


def test_without_the_headers_the_build_says_what_to_install(tmp_path, monkeypatch):
    require("rxe", vn.headers_missing())
    # a compiler that sees no system headers, as on a machine without libibverbs-dev
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\nexec {shlex.quote(vn.cprogram.compiler())} -nostdinc \"$@\"\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(cc))
    assert vn.headers_missing() == vn.NOT_INSTALLED
    with pytest.raises(vn.VerbsUnavailable, match="libibverbs-dev is not installed: "
                                                  "infiniband/verbs.h not found"):
        vn.build_gate_program(cache=tmp_path / "cache")
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
     "--vector-bytes and --max-msg must be multiples of 8"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--gates"], "--gates: needs a value"),
    (["--rank", "0", "--device", "rxe0", "--listen", "1", "--bogus", "1"],
     "unknown option --bogus"),
])
def test_bad_arguments_exit_2_naming_what_was_wrong(args, message):
    import subprocess

    done = subprocess.run([str(_program()), *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_the_pair_script_reports_each_rank_in_its_own_section():
    text = ("@@verbspec gate rank 0 exit 0\n{\"a\": 1}\n@@verbspec gate rank 0 stderr\nlog\n"
            "@@verbspec gate rank 1 exit 3\n\n@@verbspec gate rank 1 stderr\nleft\n")
    assert vn.split_sections(text) == {("gate", 0): (0, "{\"a\": 1}\n", "log\n"),
                                       ("gate", 1): (3, "\n", "left\n")}
    argv = vn.GateRun(gates=5, more_gates=1, big_bytes=0).argv(Path("/x/verbs_gate"), 1)
    assert argv[:5] == ["/x/verbs_gate", "--rank", "1", "--device", "rxe1"]
    assert "--peer" in argv and argv[argv.index("--peer") + 1] == "10.77.0.1:18515"


# ------------------------------------------------------------------ in the guest
@pytest.fixture(scope="module")
def gate_run(rxe_guest, rxe_scratch):
    """Both ranks, rxe0 <-> rxe1: 10,000 gates, a 12 MiB big gate, 1,000 more gates, traced
    into the shared scratch directory."""
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
    from verbspec.refimpl.trace_read import read_pair
    from verbspec.refimpl.trace_validate import validate_gate

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
