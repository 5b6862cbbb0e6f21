"""Counterexample reduction: a nearby shortest trace by bounded search, else chunk deletion.

Hypothesis's own shrinker handles long stateful runs slowly (a 300-step run can take minutes), so
exploration only generates and this reducer, working on the spec's moves directly, shrinks. A
candidate is replayed leniently: moves whose guard no longer holds are skipped, so deleting a
step does not force deleting everything that depended on it by hand.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from verbspec.proofs.search import bounded_search
from verbspec.spec.lts import (
    InvariantViolation,
    System,
    Trace,
    action_table,
    run_step,
    start_trace,
)

Move = tuple[str, tuple[Any, ...]]


def _moves(trace: Trace, system: System) -> list[Move]:
    table = action_table(system)
    return [(s.action, tuple(s.args[p] for p in table[s.action].params))
            for s in trace.steps[1:]]


def _attempt(system: System, moves: Sequence[Move], invariant: str,
             variants: Sequence[str]) -> InvariantViolation | None:
    table = action_table(system)
    try:
        trace = start_trace(system, variants)
        for name, args in moves:
            act = table[name]
            if args in set(act.enabled(trace.steps[-1].state)):
                run_step(system, trace, act, args)
    except InvariantViolation as e:
        return e if e.invariant == invariant else None
    return None


def shrink(system: System, violation: InvariantViolation, *, seconds: float = 60.0,
           variants: Sequence[str] = (), search_states: int = 60_000) -> InvariantViolation:
    """A violation of the same invariant with as few steps as we can find in time: first a
    breadth-first search with a small state budget (a shortest trace, when one is that near),
    then chunk deletion on the found run."""
    near = bounded_search(system, depth=len(violation.trace) - 1, max_states=search_states,
                          variants=variants, target=violation.invariant)
    if near.violation is not None:
        return near.violation
    return delete_steps(system, violation, seconds=seconds, variants=variants)[0]


def delete_steps(system: System, violation: InvariantViolation, *, seconds: float = 60.0,
                 variants: Sequence[str] = ()) -> tuple[InvariantViolation, bool]:
    """Delete chunks of moves, halving the chunk size, while the same invariant still breaks
    in fewer steps. The flag says the last pass (one move at a time) ended within ``seconds``:
    no single move of the result can be deleted."""
    best = violation
    moves = _moves(best.trace, system)
    deadline = time.monotonic() + seconds
    size = max(1, len(moves) // 2)
    while size >= 1 and time.monotonic() < deadline:
        i, progressed = 0, False
        while i < len(moves) and time.monotonic() < deadline:
            found = _attempt(system, moves[:i] + moves[i + size:], best.invariant, variants)
            if found is not None and len(found.trace) < len(best.trace):
                best, moves, progressed = found, _moves(found.trace, system), True
            else:
                i += size
        if not progressed:
            if size == 1 and i >= len(moves):
                return best, True
            size //= 2
    return best, False
