"""Verify blocks and RC queue pairs in the native gate program (native/verbs/verbs_gate.c,
docs/verbs.md "The native transport"): a pair over UC and a pair over RC, each with two-chunk
decode gates, a big gate, verify blocks and re-armed gates, every payload checked by the
ranks, and each run's device traces validated against the gate spec on the host."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import check_device_trace, require

from verbspec.refimpl.rxe import native_programs as vn

BLOCKS, LAYERS, ROWS = 2, 2, 2
# two-chunk vectors, 40 gates, a 64 KiB big gate (4 chunks), two verify blocks, 4 more gates
PLAN = vn.GateRun(gates=40, more_gates=4, big_bytes=65_536, vector_bytes=24_576,
                  timeout_ms=10_000, verify_blocks=BLOCKS, block_layers=LAYERS,
                  block_rows=ROWS)
PORTS = {"uc": 18_760, "rc": 18_762}


@pytest.fixture(scope="module", params=["uc", "rc"])
def block_run(request, rxe_guest, rxe_scratch):
    """Both ranks over a queue pair of the parameter's type, traced into the shared scratch
    directory."""
    require("rxe", vn.headers_missing())
    qp = request.param
    traces = rxe_scratch / f"native-blocks-{qp}"
    traces.mkdir()
    run = vn.with_trace(replace(PLAN, qp=qp, port=PORTS[qp]), str(traces))
    pair = vn.run_pair(rxe_guest.run, vn.build_gate_program(), run, timeout=600)
    return qp, pair, traces


def _trace(traces: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (traces / f"trace-rank{rank}.jsonl").read_text().splitlines()]


@pytest.mark.rxe
def test_gates_a_big_gate_and_verify_blocks_arrive_with_every_payload_verified(block_run):
    qp, pair, _ = block_run
    for r in pair.ranks:
        assert r.returncode == 0, f"rank {r.rank}: {r.stderr}"
        assert r.result is not None and r.result["verify_blocks"] == BLOCKS
    m = pair.merged
    assert m["ok"] and m["errors"] == [] and m["qp_type"] == qp
    assert (m["gates"], m["big_gates"], m["verify_blocks"]) == (44, 1, 2 * BLOCKS)
    # each rank checks every vector, big-gate chunk and verify-block row the peer sent
    assert m["payloads_verified"] == 2 * (44 + 4 + BLOCKS * LAYERS * ROWS)
    assert (m["mismatches"], m["drops"]) == (0, 0)


@pytest.mark.rxe
def test_the_trace_shows_the_verify_blocks_and_the_queue_pair_type(block_run):
    qp, _, traces = block_run
    for r in (0, 1):
        lines = _trace(traces, r)
        config = lines[0]["config"]
        assert (config["qp_type"], config["verify_blocks"], config["block_layers"],
                config["block_rows"]) == (qp, 1, LAYERS, ROWS)
        calls = [x for x in lines if x["ev"] == "call" and x["name"] == "verify_block"]
        assert [c["args"] for c in calls] == [{"layers": LAYERS, "rows": ROWS}] * BLOCKS
        items = [(x["ev"], x["kind"], x["value"], x["chunks"]) for x in lines
                 if x["ev"].startswith("tcp_") and x["kind"] == "block"]
        assert items == [("tcp_write", "block", LAYERS, ROWS),
                         ("tcp_read", "block", LAYERS, ROWS)] * BLOCKS
        rows = {w[1] for x in lines if x["ev"].startswith("post_") for w in x["wrs"]}
        assert {"blk", "bout"} <= rows


@pytest.mark.rxe
def test_the_device_trace_of_both_ranks_is_a_run_of_the_spec(block_run):
    """Every post, completion polled and side-channel item, both ranks, checked against the
    gate spec with its verify blocks; on RC its sends complete as their messages land."""
    from verbspec.refimpl.traces.read import read_pair
    from verbspec.refimpl.traces.validate_gate import validate_gate

    qp, _, traces = block_run
    rep = validate_gate(read_pair([traces / "trace-rank0.jsonl", traces / "trace-rank1.jsonl"]))
    check_device_trace(rep, f"native transport over {qp.upper()} with verify blocks")
    assert min(rep.gates) >= PLAN.gates
    if rep.ok:
        assert rep.blocks == [BLOCKS, BLOCKS] and rep.gates == [44, 44]
        assert rep.actions["call_block"] == 2 * BLOCKS


@pytest.mark.rxe
def test_ranks_that_differ_in_queue_pair_type_or_blocks_refuse_each_other(rxe_guest):
    """The queue pair type and the verify blocks are part of the plan both ranks exchange at
    setup: a pair that differs in one is refused on both sides, naming it."""
    require("rxe", vn.headers_missing())
    run = replace(PLAN, port=18_764, extra=((), ("--qp", "rc", "--verify-blocks", "1")))
    pair = vn.run_pair(rxe_guest.run, vn.build_gate_program(), run, timeout=300)
    r0, r1 = pair.ranks
    assert r0.returncode == 1 and r1.returncode == 1
    assert ("verbs_gate rank 0: the peer runs with queue pair type (0 uc, 1 rc) 1, this rank "
            "with 0") in r0.stderr
    assert ("verbs_gate rank 1: the peer runs with queue pair type (0 uc, 1 rc) 0, this rank "
            "with 1") in r1.stderr
