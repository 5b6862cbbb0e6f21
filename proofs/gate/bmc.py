"""Bounded model checking of the gate model, and replaying its runs on the executable spec."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from verbspec.proofs.gate.moves import action_move, initial
from verbspec.proofs.gate.properties import PROPERTIES
from verbspec.proofs.gate.terms import fresh_choice, fresh_state
from verbspec.proofs.gate.vocabulary import ACTIONS, Choices, Params, State
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


def step(s: State, t: State, prm: Params, ch: Choices, sel: z3.BitVecRef,
         options: list[tuple[str, int]]) -> list[z3.BoolRef]:
    """One step of an unrolling from s to t: option ``sel`` of ``options`` (an action and
    its rank), or a stutter at ``sel == len(options)``. Each variable of t is given as its
    value under each option (its update, else its value in s), so that z3's preprocessing
    solves the post-state away; the same relation as ``Or(move(a, r, s, t, ...) for each
    option, s == t)``, written with one equality per variable instead of a frame per
    option."""
    moves = [(j, action_move(a, r, s, prm, ch)) for j, (a, r) in enumerate(options)]
    live = [(j, m) for j, m in moves if not z3.is_false(m.guard)]
    facts = [z3.ULE(sel, len(options)),
             z3.Or(sel == len(options), *(z3.And(sel == j, m.guard) for j, m in live))]
    for (k, x), (_, y) in zip(s.items(), t.items(), strict=True):
        value = x
        for j, m in live:
            u = m.updates.get(k)
            if u is not None and not z3.eq(u, x):
                value = z3.If(sel == j, u, value)
        facts.append(y == value)
    return facts


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
            solver.add(*step(states[i], nxt, prm, ch, sel, options))
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
