"""Bounded model checking of the gate model, and replaying its runs on the executable spec."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from verbspec.proofs.gate.moves import initial, move
from verbspec.proofs.gate.properties import PROPERTIES
from verbspec.proofs.gate.terms import fresh_choice, fresh_state
from verbspec.proofs.gate.vocabulary import ACTIONS, Params
from verbspec.proofs.solving import Limit


@dataclass(frozen=True)
class Counterexample:
    prop: str
    depth: int                      # moves in the run (stutters removed)
    bound: int                      # the unrolling that found it: no run is shorter than
    moves: list[tuple[str, int]]    # the previous rung; (action, rank or source)
    seconds: float


@dataclass(frozen=True)
class NoAnswer:
    """z3 gave no answer at an unrolling (its resource limit, see proofs/solving.py): runs of
    up to the previous rung are ruled out, longer ones are not."""

    prop: str
    bound: int                      # the unrolling without an answer
    reason: str


RUNGS = (4, 8, 16)     # the unrollings searched, shallow first
# the envelope table's cross-check of short runs (see envelope.envelope_table): deep enough for
# the short runs just outside the envelope, shallow enough to stay cheap
ENVELOPE_RUNGS = (4, 8)


def bmc(prm: Params, assume: z3.BoolRef, prop: str, rungs: Iterable[int] = RUNGS,
        limit: Limit | None = None) -> Counterexample | NoAnswer | None:
    """A run of the abstract model that breaks ``prop`` while the other properties hold on the
    way, searched at increasing unrollings. Each step may stutter, so an unrolling of k finds
    every run of at most k moves and an unsat rung proves none is that short. Each rung is a
    fresh QF_BV query, so that z3 preprocesses the whole unrolling before bit-blasting it
    (its incremental mode does not). None: no run at any rung; NoAnswer: z3 gave none at a
    rung."""
    t0 = time.perf_counter()
    options = [(a, r) for a in ACTIONS for r in (0, 1)]
    limit = limit or Limit()
    for k in rungs:
        solver = z3.SolverFor("QF_BV")
        limit.apply(solver)
        states = [fresh_state("b0")]
        solver.add(assume, initial(states[0]))
        sels = []
        for i in range(k):
            nxt, ch = fresh_state(f"b{i + 1}"), fresh_choice(f"b{i}")
            sel = z3.BitVec(f"act@{i}", 8)
            stutter = z3.And([y == x for (_, y), (_, x) in zip(nxt.items(), states[i].items(),
                                                                strict=True)])
            solver.add(z3.ULE(sel, len(options)), z3.Implies(sel == len(options), stutter))
            for j, (a, r) in enumerate(options):
                solver.add(z3.Implies(sel == j, move(a, r, states[i], nxt, prm, ch)))
            for name, inv in PROPERTIES.items():
                if name != prop:
                    solver.add(inv(states[i], prm))
            states.append(nxt)
            sels.append(sel)
        solver.add(z3.Not(PROPERTIES[prop](states[k], prm)))
        res = solver.check()
        if res == z3.sat:
            m = solver.model()
            picks = [m.eval(sel, model_completion=True).as_long() for sel in sels]
            moves = [options[j] for j in picks if j < len(options)]
            return Counterexample(prop, len(moves), k, moves, time.perf_counter() - t0)
        if res == z3.unknown:
            return NoAnswer(prop, k, limit.why(solver.reason_unknown()))
    return None


def replay_on_spec(system: Any, moves: list[tuple[str, int]]) -> tuple[str, str] | None:
    """Run the abstract counterexample's moves on the executable spec; return the invariant it
    breaks there and the spec's message, or None if the run does not break one."""
    from verbspec.spec.lts import InvariantViolation, action_table, run_step, start_trace

    table = action_table(system)
    trace = start_trace(system)
    try:
        for name, r in moves:
            act = table[name]
            args = next((a for a in act.enabled(trace.steps[-1].state) if a[0] == r), None)
            if args is None:
                return None
            run_step(system, trace, act, args)
    except InvariantViolation as e:
        return e.invariant, e.message
    return None
