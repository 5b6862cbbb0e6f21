"""ds4's completion queue has no margin: a full big-gate window (B receives and B sends) exactly
fills a 2B-entry CQ, so one warm-up leftover completion sitting in it overflows it. The spec's
default CQ (515 entries) adds room for what the fault model can add: two warm-up leftovers and
one injected error completion.

At ds4's sizing (big_depth 256, cq_depth 512) the shortest such run is about a thousand steps,
out of reach of breadth-first search; a guided schedule shows it. The same sizing at a small
point (big_depth 3, cq_depth 6, one-chunk vectors, a 2-gate window whose drain fills 5
entries) is within reach of bmc's one-fault phase, which finds a shortest run with one fault
that overflows the CQ, and none once the CQ has one spare entry.
"""

from __future__ import annotations

import re

import pytest

from verbspec.proofs.protocols import CHECKS
from verbspec.proofs.run import Options, run_bmc, run_method
from verbspec.proofs.traces import read_moves, write_trace
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate.system import FAULT_ACTIONS, build
from verbspec.spec.lts import InvariantViolation, replay

BMC_DEPTH = CHECKS["gate"].bmc_depth
BMC_FAULT_FREE_DEPTH = CHECKS["gate"].bmc_fault_free_depth

# the defaults' sizing scaled down: cq_depth = 2 * big_depth; one-chunk gate vectors and a 2-gate
# window keep the decode window and its drain (at most 5 entries) within the CQ; chain_max =
# big_depth posts a window in one chain
SMALL = {"window": 2, "vec_bytes": 16384, "big_depth": 3, "chain_max": 3, "cq_depth": 6}
SHORTEST = 28       # both ranks through a 4-chunk big gate's first window, plus one fault
OVERFLOW = "completion queue overflowed its {} entries"
# budgets above what each search needs (about 107k and 152k states), below the default's reach
FIND_BUDGET = 150_000
HOLD_BUDGET = 200_000


def _faults(moves: list) -> list:
    return [(i, m) for i, m in enumerate(moves) if m[0] in FAULT_ACTIONS]


def _rank(message: str) -> int:
    return int(re.match(r"rank (\d)'s completion queue", message).group(1))


@pytest.fixture(scope="module")
def small_overflow(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cq")
    opts = Options(trace_dir=tmp, one_fault_max_states=FIND_BUDGET)
    return run_method("gate", "bmc", SMALL, (), opts), tmp


def test_one_fault_overflows_a_cq_sized_for_exactly_one_big_gate_window(small_overflow, capsys):
    results, _ = small_overflow
    (bad,) = [r for r in results if r.verdict != "held"]
    assert (bad.invariant, bad.verdict) == ("queue_bounds", "violated")
    assert OVERFLOW.format(6) in bad.detail
    # phases 1 and 2 found nothing: no run of any kind within BMC_DEPTH and no fault-free run
    # within BMC_FAULT_FREE_DEPTH overflows; the overflow needs the one fault
    assert bad.bound.startswith(
        f"trace of {SHORTEST} steps, a shortest run with at most one fault: no run of any kind "
        f"of <= {BMC_DEPTH} steps (")
    assert f", no fault-free run of <= {BMC_FAULT_FREE_DEPTH} steps (" in bad.bound
    assert f" and no run with at most one fault of <= {SHORTEST - 1} steps (" in bad.bound
    meta, moves = read_moves(bad.trace)
    assert len(moves) == SHORTEST and meta["params"] == build(SMALL).param_dict()
    assert main(["replay", bad.trace]) == 1
    assert f"replayed {SHORTEST} steps: queue_bounds violated" in capsys.readouterr().out
    # the one fault is a completion pushed into the CQ that overflows: a stray (warm-up
    # leftover) or an error completion, which tie for shortest
    rank = _rank(bad.detail)
    ((_, (name, args)),) = _faults(moves)
    assert name in ("stray_completion", "error_completion") and args["rank"] == rank
    # the full window: both ranks' big gates are 4 chunks, their first window 3 chunks
    assert [a["chunks"] for n, a in moves if n == "call_big"] == [4, 4]


def test_a_stray_completion_alone_overflows_it_in_a_shortest_run(small_overflow, tmp_path,
                                                                  capsys):
    """The stray leftover of the warm-up exchange, pushed right after setup, overflows the CQ in
    a run as short as bmc's (which bmc showed is a shortest run with at most one fault)."""
    results, _ = small_overflow
    (bad,) = [r for r in results if r.verdict != "held"]
    _, moves = read_moves(bad.trace)
    rank = _rank(bad.detail)
    ((at, _),) = _faults(moves)
    rest = moves[:at] + moves[at + 1:]
    setup = rest.index(("setup", {"rank": rank}))
    stray = rest[:setup + 1] + [("stray_completion", {"rank": rank, "kind": "send"})] \
        + rest[setup + 1:]
    system = build(SMALL)
    with pytest.raises(InvariantViolation) as err:
        replay(system, stray)
    assert err.value.invariant == "queue_bounds" and OVERFLOW.format(6) in err.value.message
    assert len(err.value.trace) - 1 == SHORTEST
    path = write_trace(err.value.trace, tmp_path / "stray.itf.json")
    assert main(["replay", str(path)]) == 1
    assert f"replayed {SHORTEST} steps: queue_bounds violated" in capsys.readouterr().out
    # without the fault the same schedule fills the CQ exactly and holds
    trace = replay(system, rest)
    assert trace.violation is None
    assert max(len(q.cq) for q in trace.steps[-1].state.fabric.qps) == 6


@pytest.mark.slow
def test_one_spare_entry_absorbs_any_single_fault(tmp_path):
    # the one-fault phase searched to the length of the overflow at cq_depth 6
    results = run_bmc(build({**SMALL, "cq_depth": 7}), (),
                      Options(trace_dir=tmp_path, one_fault_max_states=HOLD_BUDGET),
                      BMC_DEPTH, BMC_FAULT_FREE_DEPTH, SHORTEST)
    assert all(r.verdict == "held" for r in results), [r for r in results if r.verdict != "held"]
    first, second, third = results[0].bound.split("; ")
    assert first.startswith(f"all runs of <= {BMC_DEPTH} steps (")
    assert second.startswith(f"fault-free runs of <= {BMC_FAULT_FREE_DEPTH} steps (")
    assert third.startswith(f"runs with at most one fault of <= {SHORTEST} steps (")
    assert "cut" not in third
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------- the defaults, guided

# the schedule at the defaults: both ranks set up, rank 0's warm-up send completes late, both
# start a 257-chunk big gate (a full 256-chunk window first), exchange headers, post the
# window's receives, pass the barrier and post its sends; every send is transmitted and
# delivered; nobody reaps
PRIORITY = (
    ("setup", None), ("stray_completion", (0, "send")), ("call_big", None),
    ("big_header_write", None), ("big_header_read", None), ("big_begin", None),
    ("big_post_recv", None), ("big_barrier_write", None), ("big_barrier_read", None),
    ("big_send", None), ("transmit", None), ("deliver", None),
)


def guided(system, priority=PRIORITY, chunks: int = 257) -> list:
    """Moves chosen by priority (the first enabled in the list) until none is enabled. Only
    the spec's guards and effects run here; ``replay`` then checks every invariant."""
    table = {a.name: a for a in system.actions}
    s, moves = system.initial(), []
    while True:
        for name, want in priority:
            act = table[name]
            ok = [a for a in act.enabled(s)
                  if (want is None or a == want) and (name != "call_big" or a[1] == chunks)]
            if ok:
                break
        else:
            return moves
        s, _ = act.apply(s, *ok[0])
        moves.append((name, dict(zip(act.params, ok[0], strict=True))))
        if s.fabric.qps[0].cq_overflow or s.fabric.qps[1].cq_overflow:
            return moves


DS4 = {"cq_depth": 512}     # ds4's CQ, otherwise the defaults


def test_at_ds4s_sizing_one_stray_overflows_the_512_entry_cq():
    system = build(DS4)
    assert system.params.cq_depth == 2 * system.params.big_depth == 512
    moves = guided(system)
    assert len(moves) == 1055
    assert _faults(moves) == [(2, ("stray_completion", {"rank": 0, "kind": "send"}))]
    with pytest.raises(InvariantViolation) as err:
        replay(system, moves)
    assert err.value.invariant == "queue_bounds"
    assert err.value.message == "rank 0's completion queue overflowed its 512 entries"
    # the overflow is the window's last completion: 1 stray + 256 sends + 256 receives
    assert len(err.value.trace) - 1 == 1055 and moves[-1][0] == "deliver"
    before = err.value.trace.steps[-2].state.fabric.qps[0]
    assert len(before.cq) == 512 and not before.cq_overflow


def test_at_ds4s_sizing_the_window_alone_fills_the_cq_exactly():
    system = build(DS4)
    no_stray = tuple(p for p in PRIORITY if p[0] != "stray_completion")
    moves = guided(system, no_stray)
    trace = replay(system, moves)
    assert trace.violation is None and len(moves) == 1054
    assert [len(q.cq) for q in trace.steps[-1].state.fabric.qps] == [512, 512]


def test_two_spare_entries_absorb_the_stray():
    system = build({"cq_depth": 514})
    moves = guided(system)
    trace = replay(system, moves)
    assert trace.violation is None and len(moves) == 1055
    assert _faults(moves) == [(2, ("stray_completion", {"rank": 0, "kind": "send"}))]
    cqs = [q.cq for q in trace.steps[-1].state.fabric.qps]
    assert [len(c) for c in cqs] == [513, 512]
    assert sum(c.payload.kind == "warm" for c in cqs[0]) == 1


def test_the_guided_schedule_is_the_one_described():
    # guard against a driver that stops early or runs a different gate
    moves = guided(build({"cq_depth": 514}))
    counts = {}
    for name, _ in moves:
        counts[name] = counts.get(name, 0) + 1
    assert counts == {"setup": 2, "stray_completion": 1, "call_big": 2, "big_header_write": 2,
                      "big_header_read": 2, "big_begin": 2, "big_post_recv": 8,
                      "big_barrier_write": 2, "big_barrier_read": 2, "big_send": 8,
                      "transmit": 512, "deliver": 512}


# every completion the fault model can add, each as early as it can come: rank 0's two warm-up
# leftovers right after setup, then, once the window's sends and receives have all completed
# and nothing is left to do but reap, an injected error completion
WORST = (("setup", None), ("stray_completion", (0, "send")), ("stray_completion", (0, "recv")),
         *PRIORITY[2:], ("error_completion", (0,)))


def test_the_default_cq_holds_a_full_window_and_every_fault_completion():
    system = build({})
    assert system.params.cq_depth == 2 * system.params.big_depth + 3 == 515
    moves = guided(system, WORST)
    trace = replay(system, moves)
    assert trace.violation is None and len(moves) == 1057
    assert [m for m in _faults(moves)] == [
        (2, ("stray_completion", {"rank": 0, "kind": "send"})),
        (3, ("stray_completion", {"rank": 0, "kind": "recv"})),
        (1056, ("error_completion", {"rank": 0}))]
    assert [len(q.cq) for q in trace.steps[-1].state.fabric.qps] == [515, 512]
    # one entry fewer and the same schedule overflows with the last completion
    with pytest.raises(InvariantViolation) as err:
        replay(build({"cq_depth": 514}), moves)
    assert err.value.message == "rank 0's completion queue overflowed its 514 entries"
    assert len(err.value.trace) - 1 == 1057
