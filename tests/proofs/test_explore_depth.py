"""Exploration judged by the protocol depth it reaches: the gate system's workload weights
drive runs of decode gates past the window, drains and big-gate windows; what a run reached
is reported; and bugs that only show past the window are caught at the default budget."""

from __future__ import annotations

from dataclasses import replace

from verbspec.proofs.explore import explore, without_local_constants
from verbspec.proofs.run import Options, run_method
from verbspec.spec.gate.state import GateState
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import BAD_CALL, CALL_BIG, CALL_GATE, TIMEOUT, build


def _state(script: tuple[int, ...], ops: tuple[int, int]) -> GateState:
    system = build({})
    s = system.initial()
    return replace(s, script=script, ranks=tuple(replace(rk, op=n)
                                                 for rk, n in zip(s.ranks, ops, strict=True)))


def test_depth_counts_what_both_ranks_finished():
    system = build({"window": 2, "big_depth": 2})
    s = _state((0, 0, 0, 3, 0, 5, 0), (7, 6))
    # rank 1 finished six ops: three decode gates in a row, then a 3-chunk big gate (a drain,
    # two windows of 2), a decode gate, a 5-chunk big gate (a drain, three windows)
    assert system.depth(s) == {"decode_gates_in_a_row": 3, "gates_past_window": 1,
                               "drains": 2, "big_gate_windows": 5, "verify_blocks": 0}
    # a verify block (-1) after a decode gate drains too, and opens no big-gate window
    s = _state((0, -1, 0, -1), (4, 4))
    assert system.depth(s) == {"decode_gates_in_a_row": 1, "gates_past_window": 0,
                               "drains": 2, "big_gate_windows": 0, "verify_blocks": 2}
    assert system.depth(system.initial())["decode_gates_in_a_row"] == 0


def test_workload_weights_name_the_calls():
    system = build({})
    assert set(system.weights) == {CALL_GATE, CALL_BIG, BAD_CALL, TIMEOUT}
    # verify blocks are weighed only where the workload has them
    assert set(build({"verify_blocks": 1}).weights) == {*system.weights, "call_block"}
    assert 0 in system.weights[TIMEOUT]         # some examples time out only when stuck
    assert 0 in system.weights[CALL_BIG]        # some examples make decode gates only
    assert {a.name for a in system.actions} >= set(system.weights)


def test_a_small_budget_gets_past_the_window_and_through_drains_and_big_gates():
    # windows of 2 (big gates of 1 or 3 chunks): the depth a small budget can reach
    small = build({"window": 2, "big_depth": 2, "chain_max": 2, "vec_bytes": 100})
    res = explore(small, examples=20, steps=400, seed=1)
    assert res.violation is None
    reached = res.stats.reached
    assert reached["gates_past_window"] > 0, reached
    assert reached["drains"] > 0 and reached["big_gate_windows"] > 0, reached
    assert res.stats.actions["drain_done"] > 0 and res.stats.actions["big_window_done"] > 0


def test_explore_reports_steps_per_action_and_depth(tmp_path):
    opts = Options(examples=5, steps=200, seed=3, trace_dir=tmp_path)
    rows = run_method("gate", "explore", {}, (), opts)
    cov = rows[0].coverage
    assert cov is not None and sum(cov["actions"].values()) > 0
    assert set(cov["reached"]) == {"decode_gates_in_a_row", "gates_past_window", "drains",
                                   "big_gate_windows", "verify_blocks"}
    assert "decode gates in a row <=" in rows[0].bound
    assert rows[0].as_json()["coverage"] == cov


def test_the_default_budget_catches_a_repost_one_gate_too_far(repost_one_too_far, tmp_path):
    rows = run_method("gate", "explore", {}, (), Options(trace_dir=tmp_path))
    bad = [r for r in rows if r.verdict == "violated"]
    assert [r.invariant for r in bad] == ["chunk_alignment"], [(r.invariant, r.detail)
                                                               for r in bad]
    assert "landed in rank" in bad[0].detail


def test_the_default_budget_catches_a_watermark_moved_by_the_first_chunk(monkeypatch, tmp_path):
    real = GateSpec.gate_recv_chain

    def first_chunk_tagged(self, r, seq):
        wrs = real(self, r, seq)
        return tuple(replace(w, wr_id=seq if k == 0 else 0) for k, w in enumerate(wrs))

    monkeypatch.setattr(GateSpec, "gate_recv_chain", first_chunk_tagged)
    rows = run_method("gate", "explore", {}, (), Options(trace_dir=tmp_path))
    bad = {r.invariant for r in rows if r.verdict == "violated"}
    assert bad == {"watermark_sound"}, bad


def test_a_derandomized_run_does_not_depend_on_what_the_process_imported_before():
    # Hypothesis would otherwise draw now and then from the constants of every local module
    # imported so far: the same run in a different test order could go elsewhere
    from hypothesis.internal.conjecture import providers

    assert len(providers._get_local_constants()) > 0     # this project's modules are local
    with without_local_constants():
        assert len(providers._get_local_constants()) == 0
    assert len(providers._get_local_constants()) > 0
    small = build({"window": 2, "big_depth": 2, "chain_max": 2, "vec_bytes": 100})
    first = explore(small, examples=5, steps=100).stats
    import verbspec.proofs.gate.induction  # noqa: F401  (more local modules, more constants)
    again = explore(small, examples=5, steps=100).stats
    assert (first.steps, first.actions) == (again.steps, again.actions)
