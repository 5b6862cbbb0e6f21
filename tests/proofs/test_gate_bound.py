"""The lower bound on dropping runs under depth-mismatch (proofs/gate/bound.py): at a point small
enough for breadth-first search, the bound it proves is exactly the length of the shortest run
the search finds (test_gate_bmc.py: 18 + 2 * (chain_max + 1) steps), and one step more fails; a
potential that a step raises by more than one is caught."""

from __future__ import annotations

from dataclasses import replace

import pytest
from configs import GATE_SMALL

from verbspec.proofs.gate import bound as gb
from verbspec.proofs.gate.abstraction import evaluate, value_terms, zero_values
from verbspec.proofs.gate.terms import fresh_state
from verbspec.proofs.gate.vocabulary import BIG_XFER, Ghost, Rank, Script, State
from verbspec.proofs.solving import Solvers

SMALL = GATE_SMALL
SHORTEST = 18 + 2 * (4 + 1)     # breadth-first search's shortest dropping run at SMALL


@pytest.mark.slow
@pytest.mark.long
def test_the_bound_is_the_shortest_run_breadth_first_search_finds():
    b = gb.lower_bound(SMALL, ["depth-mismatch"], [SHORTEST, SHORTEST + 1])
    assert b.invariants == len(gb.LEMMAS)      # every strengthening invariant is inductive
    assert b.proved == (SHORTEST,)
    # one step more fails where the shortest run drops its message: rank 0's delivery
    assert b.failed[SHORTEST + 1].startswith("deliver/0: sat ")


def test_a_potential_that_a_step_raises_by_two_is_caught(monkeypatch):
    # reading the barrier byte counted as two steps: the induction must refuse it
    monkeypatch.setitem(gb.STAGE, BIG_XFER, gb.STAGE[BIG_XFER] + 1)
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
    s = fresh_state("s")
    ends = gb.run_ends(s, prm)
    rank = zero_values(Rank)
    quiet = State((rank, rank), zero_values(Ghost), zero_values(Script))

    def at(r: int = 0, dropped: bool = False, **values: int) -> bool:
        ranks = [rank, rank]
        ranks[r] = replace(rank, **values)
        state = replace(quiet, rank=tuple(ranks), ghost=replace(quiet.ghost, dropped=dropped))
        return evaluate(ends, value_terms(state, s))

    assert at(dropped=True)
    # rank 1's windows hold 64 chunks, rank 0's 256: a 65-chunk big gate is mismatched
    assert at(1, big_chunks=65, big_base=64) and at(0, big_chunks=65, big_base=65)
    assert not at(1, big_chunks=65, big_base=0) and not at(1, big_chunks=64, big_base=64)
