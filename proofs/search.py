"""Exhaustive bounded search: breadth-first over every interleaving up to a depth.

Breadth-first order makes the first violation found a shortest one. States are deduplicated by
value (spec states are frozen and hashable), so the bound is on trace length, not on the number
of interleavings. The search reports whether the bound was exhausted or a state budget cut it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verbspec.spec.lts import (
    InvariantViolation,
    System,
    Trace,
    TraceStep,
    check_state,
    check_step,
    enabled_moves,
    start_trace,
)


@dataclass(frozen=True)
class SearchResult:
    depth: int            # deepest level fully explored
    states: int           # distinct states visited
    transitions: int
    exhausted: bool       # True when no new state exists past `depth` (a full proof)
    cut: bool             # True when max_states stopped the search early
    seconds: float
    violation: InvariantViolation | None

    @property
    def trace(self) -> Trace | None:
        return self.violation.trace if self.violation else None


def bounded_search(system: System, *, depth: int, max_states: int = 2_000_000,
                   variants: Sequence[str] = (), faults: bool = True,
                   target: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """Search every interleaving up to ``depth`` steps. With ``target``, violations of other
    invariants are dead ends and the search looks for a shortest violation of ``target``."""
    t0 = time.perf_counter()
    root = start_trace(system, variants)
    init = root.steps[0].state
    # parent links rebuild the shortest trace once a violation is found
    parent: dict[Any, tuple[Any, str, tuple, Any] | None] = {init: None}
    frontier = [init]
    transitions = 0
    level = 0
    while frontier and level < depth:
        nxt = []
        for pre in frontier:
            for act, args in enabled_moves(system, pre, faults=faults):
                post, obs = act.apply(pre, *args)
                transitions += 1
                bad = check_step(system, pre, act.name, args, post, obs)
                if bad is None and post not in parent:
                    bad = check_state(system, post)
                if bad is not None and target is not None and bad[0] != target:
                    parent.setdefault(post, (pre, act.name, args, obs))
                    continue
                if bad is not None:
                    parent.setdefault(post, (pre, act.name, args, obs))
                    trace = _rebuild(system, parent, post, act.name, args, obs, pre, variants)
                    trace.violation, trace.message = bad
                    return SearchResult(level + 1, len(parent), transitions, False, False,
                                        time.perf_counter() - t0,
                                        InvariantViolation(bad[0], bad[1], trace))
                if post not in parent:
                    parent[post] = (pre, act.name, args, obs)
                    nxt.append(post)
                    if len(parent) >= max_states:
                        return SearchResult(level, len(parent), transitions, False, True,
                                            time.perf_counter() - t0, None)
        frontier = nxt
        level += 1
        if progress:
            progress(level, len(parent))
    return SearchResult(level, len(parent), transitions, not frontier, False,
                        time.perf_counter() - t0, None)


def _rebuild(system: System, parent: dict, last: Any, name: str, args: tuple, obs: Any,
             pre: Any, variants: Sequence[str]) -> Trace:
    table = {a.name: a for a in system.actions}
    steps = [TraceStep(name, dict(zip(table[name].params, args, strict=True)), last, obs)]
    cur = pre
    while parent[cur] is not None:
        p, n, a, o = parent[cur]
        steps.append(TraceStep(n, dict(zip(table[n].params, a, strict=True)), cur, o))
        cur = p
    steps.append(TraceStep("init", {}, cur))
    steps.reverse()
    return Trace(system.protocol, system.param_dict(), tuple(variants), steps)
