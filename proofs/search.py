"""Exhaustive bounded search: breadth-first over every interleaving up to a depth.

Breadth-first order makes the first violation found a shortest one. States are deduplicated by
value (spec states are frozen and hashable), so the bound is on trace length, not on the number
of interleavings. The search reports whether the bound was exhausted or a state budget cut it.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from verbspec.spec.lts import (
    InvariantViolation,
    System,
    Trace,
    TraceStep,
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
    # with a fault limit (faults=False, or max_faults): the shallowest level at which an
    # expanded state that had used up the limit had a fault action enabled (None if none had),
    # so every run of <= fault_level steps keeps within the limit
    fault_level: int | None = None
    # the transitions of each action the search took (one that reached no new state too)
    actions: dict[str, int] = field(default_factory=dict)

    @property
    def trace(self) -> Trace | None:
        return self.violation.trace if self.violation else None


def bounded_search(system: System, *, depth: int, max_states: int = 2_000_000,
                   variants: Sequence[str] = (), faults: bool = True,
                   max_faults: int | None = None,
                   target: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """Search every interleaving up to ``depth`` steps. With ``target``, violations of other
    invariants are dead ends and the search looks for a shortest violation of ``target``.

    With ``faults=False`` fault actions are not taken (the same as ``max_faults=0``); with
    ``max_faults=n`` a run takes at most n fault actions, and the number it has taken is part
    of each search node (a state reached with fewer faults is a different node), so the first
    violation found is a shortest run with at most n faults. The result's ``fault_level`` says
    from which depth the runs within the limit stop being all the runs (None: never within
    the levels expanded).

    The nodes are numbered in the order they are reached: node i is ``states[i]`` (with
    ``spent[i]`` fault actions under a limit), reached from node ``via[i]`` by action
    ``acts[i]`` with arguments ``args[i]``; ``index`` maps a node's key (its state, or its
    state and fault count) to its number. Observations are not kept: a trace's are computed
    again, by applying its actions once more, when a violation's trace is rebuilt."""
    t0 = time.perf_counter()
    limit = 0 if not faults else max_faults
    root = start_trace(system, variants)
    actions = tuple(enumerate(system.actions))
    step_checks = tuple((inv.name, inv.check) for inv in system.invariants
                        if inv.over == "step")
    state_checks = tuple((inv.name, inv.check) for inv in system.invariants
                         if inv.over == "state")
    init = root.steps[0].state
    states: list[Any] = [init]
    spent_of = array("l", [0])
    via = array("l", [-1])
    acts = array("l", [-1])
    args_of: list[tuple] = [()]
    index: dict[Any, int] = {init if limit is None else (init, 0): 0}
    frontier = [0]
    transitions = 0
    level = 0
    fault_actions = () if limit is None else tuple(a for a in system.actions if a.fault)
    fault_level: int | None = None
    fired = [0] * len(actions)      # transitions by action

    def result(depth: int, exhausted: bool, cut: bool,
               violation: InvariantViolation | None = None) -> SearchResult:
        return SearchResult(depth, len(states), transitions, exhausted, cut,
                            time.perf_counter() - t0, violation, fault_level,
                            {act.name: n for (_, act), n in zip(actions, fired, strict=True)
                             if n})

    while frontier and level < depth:
        nxt = []
        for node in frontier:
            pre = states[node]
            pf = spent_of[node]
            spent = limit is not None and pf >= limit
            if (fault_level is None and spent
                    and any(a.is_enabled(pre) for a in fault_actions)):
                fault_level = level
            for ai, act in actions:
                if spent and act.fault:
                    continue
                for args in act.enabled(pre):
                    post, obs = act.apply(pre, *args)
                    transitions += 1
                    fired[ai] += 1
                    if limit is None:
                        key: Any = post
                        f = 0
                    else:
                        f = pf + 1 if act.fault and limit else pf
                        key = (post, f)
                    n = len(states)
                    seen = index.setdefault(key, n) != n
                    if not seen:
                        states.append(post)
                        spent_of.append(f)
                        via.append(node)
                        acts.append(ai)
                        args_of.append(args)
                    bad = None
                    for name, check in step_checks:
                        msg = check(pre, act.name, args, post, obs)
                        if msg is not None:
                            bad = name, msg
                            break
                    if bad is None and not seen:
                        for name, check in state_checks:
                            msg = check(post)
                            if msg is not None:
                                bad = name, msg
                                break
                    if bad is None:
                        if not seen:
                            nxt.append(n)
                            if n + 1 >= max_states:
                                return result(level, False, True)
                        continue
                    if target is not None and bad[0] != target:
                        continue
                    trace = _rebuild(system, states, via, acts, args_of, node, variants)
                    trace.steps.append(TraceStep(
                        act.name, dict(zip(act.params, args, strict=True)), post, obs))
                    trace.violation, trace.message = bad
                    return result(level + 1, False, False,
                                  InvariantViolation(bad[0], bad[1], trace))
        frontier = nxt
        level += 1
        if progress:
            progress(level, len(states))
    done = result(level, not frontier, False)
    shared = _shared.get()
    if shared is not None and done.exhausted and limit is None and target is None:
        shared[_system_key(system, variants)] = done
    return done


FixpointKey = tuple[str, str, tuple[str, ...]]
# inside shared_fixpoints(): every search that reached a fixpoint with every action (faults
# included) and broke nothing, by system; a prover's fixpoint of an instance that bmc already
# exhausted is that search, not to be done twice
_shared: ContextVar[dict[FixpointKey, SearchResult] | None] = ContextVar(
    "verbspec_shared_fixpoints", default=None)


def _system_key(system: System, variants: Sequence[str]) -> FixpointKey:
    return (system.protocol, repr(sorted(system.param_dict().items())), tuple(sorted(variants)))


@contextmanager
def shared_fixpoints() -> Iterator[None]:
    """A run of checks (one ``verbspec check``) in which a fixpoint reached once is not
    searched again. Only within one: a system is known by its protocol, parameters and
    variants, not by its code, which a test may change between searches."""
    outer = _shared.get()
    token = _shared.set({} if outer is None else outer)
    try:
        yield
    finally:
        _shared.reset(token)


def known_fixpoint(system: System, variants: Sequence[str] = ()) -> SearchResult | None:
    """The fixpoint already reached for this system in this run of checks (every reachable
    state, faults included, no violation), or None."""
    shared = _shared.get()
    return None if shared is None else shared.get(_system_key(system, variants))


def _rebuild(system: System, states: Sequence[Any], via: Sequence[int], acts: Sequence[int],
             args_of: Sequence[tuple], last: int, variants: Sequence[str]) -> Trace:
    """The trace from the initial state to node ``last``: each step's observation computed
    again by applying its action to the state before it (actions are functions of the state,
    so it is the observation the search saw)."""
    path = []
    node = last
    while node > 0:
        path.append(node)
        node = via[node]
    table = system.actions
    steps = [TraceStep("init", {}, states[0])]
    for node in reversed(path):
        act, args = table[acts[node]], args_of[node]
        _, obs = act.apply(states[via[node]], *args)
        steps.append(TraceStep(act.name, dict(zip(act.params, args, strict=True)),
                               states[node], obs))
    return Trace(system.protocol, system.param_dict(), tuple(variants), steps)
