"""The lower bound on dropping runs under depth-mismatch (proofs/gate_bound.py): at a point small
enough for breadth-first search, the bound it proves is exactly the length of the shortest run
the search finds (test_gate_bmc.py: 18 + 2 * (chain_max + 1) steps), and one step more fails; a
potential that a step raises by more than one is caught."""

from __future__ import annotations

import z3
from configs import GATE_SMALL

from verbspec.proofs import gate_bound as gb
from verbspec.proofs import gate_z3 as gz
from verbspec.proofs.solving import Solvers

SMALL = GATE_SMALL
SHORTEST = 18 + 2 * (4 + 1)     # breadth-first search's shortest dropping run at SMALL


def test_the_bound_is_the_shortest_run_breadth_first_search_finds():
    b = gb.lower_bound(SMALL, ["depth-mismatch"], [SHORTEST, SHORTEST + 1])
    assert b.invariants == len(gb.LEMMAS)      # every strengthening invariant is inductive
    assert b.proved == (SHORTEST,)
    # one step more fails where the shortest run drops its message: rank 0's delivery
    assert b.failed[SHORTEST + 1].startswith("deliver/0: sat ")


def test_a_potential_that_a_step_raises_by_two_is_caught(monkeypatch):
    # reading the barrier byte counted as two steps: the induction must refuse it
    monkeypatch.setitem(gb.STAGE, gz.BIG_XFER, gb.STAGE[gz.BIG_XFER] + 1)
    prm, chunks = gb.model_params(SMALL, ["depth-mismatch"])
    with Solvers() as pool:
        bad = gb.potential_steps(prm, list(gb.LEMMAS), chunks, SHORTEST, pool)
    assert bad and all(b.startswith("big_barrier_read/") for b in bad), bad


def test_the_proof_applies_only_to_drops_under_depth_mismatch():
    assert gb.shortest_run({}, ["no-barrier"], "no_silent_drop", 6) is None
    assert gb.shortest_run({}, ["depth-mismatch"], "watermark_sound", 148) is None
    assert gb.shortest_run({"qp_type": "rc"}, ["depth-mismatch"], "no_silent_drop", 148) is None


def test_runs_end_at_a_drop_or_at_a_completed_mismatched_window():
    prm, _ = gb.model_params({}, ["depth-mismatch"])
    s = gz.fresh_state("s")
    ends = gb.run_ends(s, prm)
    quiet = [(v, z3.BoolVal(False) if z3.is_bool(v) else z3.BitVecVal(0, v.size()))
             for v in s.values()]

    def at(**values: int | bool) -> bool:
        pairs = gz.value_terms(values, s)
        named = {str(a) for a, _ in pairs}
        return gz.evaluate(ends, pairs + [p for p in quiet if str(p[0]) not in named])

    assert at(dropped=True)
    # rank 1's windows hold 64 chunks, rank 0's 256: a 65-chunk big gate is mismatched
    assert at(K1=65, BB1=64) and at(K0=65, BB0=65)
    assert not at(K1=65, BB1=0) and not at(K1=64, BB1=64)
