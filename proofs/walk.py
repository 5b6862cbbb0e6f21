"""Seeded random walks: bmc's deep phase, for violations past what breadth-first search reaches.

Breadth-first search keeps every state of a level, and a protocol whose CQ interleavings
multiply the states each level (the gate protocol's doubles per level past 26 steps) runs out
of budget long before a violation that needs a 64-deep queue to fill. A walk keeps one state:
at each step it takes a uniformly drawn enabled move, fault actions excluded, until an
invariant breaks, nothing is enabled, or ``depth`` steps. What it finds is a real run of the
spec; proofs/shrink.py then deletes steps while the same invariant still breaks. Unlike a
breadth-first trace, the result is not shown to be a shortest run: the caller says what the
exhaustive phases ruled out.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from verbspec.proofs.shrink import delete_steps
from verbspec.spec.lts import InvariantViolation, System, enabled_moves, run_step, start_trace


@dataclass(frozen=True)
class WalkResult:
    walks: int              # walks taken (the last one broke an invariant, if any did)
    steps: int              # steps taken by all of them
    seconds: float
    violation: InvariantViolation | None    # shortened
    walked: int = 0         # length of the violating walk before shortening
    minimal: bool = False   # no single step of the shortened trace can be deleted


def random_walks(system: System, *, walks: int, depth: int, seed: int = 0,
                 variants: Sequence[str] = (), shrink_seconds: float = 60.0,
                 progress: Callable[[int, int], None] | None = None) -> WalkResult:
    """Up to ``walks`` fault-free walks of at most ``depth`` steps from the initial state, drawn
    from one generator seeded with ``seed`` (the same seed takes the same walks)."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    steps = 0
    for w in range(1, walks + 1):
        trace = start_trace(system, variants)
        try:
            for _ in range(depth):
                moves = list(enabled_moves(system, trace.steps[-1].state, faults=False))
                if not moves:
                    break
                act, args = moves[rng.randrange(len(moves))]
                steps += 1
                run_step(system, trace, act, args)
        except InvariantViolation as e:
            short, minimal = delete_steps(system, e, seconds=shrink_seconds, variants=variants)
            return WalkResult(w, steps, time.perf_counter() - t0, short, len(e.trace) - 1,
                              minimal)
        if progress:
            progress(w, steps)
    return WalkResult(walks, steps, time.perf_counter() - t0, None)
