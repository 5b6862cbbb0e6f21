"""Exhaustive bounded search: breadth-first over every interleaving up to a depth.

Breadth-first order makes the first violation found a shortest one. States are deduplicated by
value (spec states are frozen and hashable), so the bound is on trace length, not on the number
of interleavings. The search reports whether the bound was exhausted or a state budget cut it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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
    # with a fault limit (faults=False, or max_faults): the shallowest level at which an
    # expanded state that had used up the limit had a fault action enabled (None if none had),
    # so every run of <= fault_level steps keeps within the limit
    fault_level: int | None = None

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
    the levels expanded)."""
    t0 = time.perf_counter()
    limit = 0 if not faults else max_faults
    root = start_trace(system, variants)
    init = _Key(root.steps[0].state)
    # parent links rebuild the shortest trace once a violation is found
    parent: dict[_Key, tuple[_Key, str, tuple, Any] | None] = {init: None}
    frontier = [init]
    transitions = 0
    level = 0
    fault_actions = () if limit is None else tuple(a for a in system.actions if a.fault)
    fault_level: int | None = None
    while frontier and level < depth:
        nxt = []
        for pk in frontier:
            pre = pk.state
            spent = limit is not None and pk.faults >= limit
            if (fault_level is None and spent
                    and any(a.is_enabled(pre) for a in fault_actions)):
                fault_level = level
            for act, args in enabled_moves(system, pre, faults=not spent):
                post, obs = act.apply(pre, *args)
                transitions += 1
                key = _Key(post, pk.faults + 1 if act.fault and limit else pk.faults)
                seen = key in parent
                bad = check_step(system, pre, act.name, args, post, obs)
                if bad is None and not seen:
                    bad = check_state(system, post)
                if bad is not None and target is not None and bad[0] != target:
                    parent.setdefault(key, (pk, act.name, args, obs))
                    continue
                if bad is not None:
                    parent.setdefault(key, (pk, act.name, args, obs))
                    trace = _rebuild(system, parent, key, act.name, args, obs, pk, variants)
                    trace.violation, trace.message = bad
                    return SearchResult(level + 1, len(parent), transitions, False, False,
                                        time.perf_counter() - t0,
                                        InvariantViolation(bad[0], bad[1], trace), fault_level)
                if not seen:
                    parent[key] = (pk, act.name, args, obs)
                    nxt.append(key)
                    if len(parent) >= max_states:
                        return SearchResult(level, len(parent), transitions, False, True,
                                            time.perf_counter() - t0, None, fault_level)
        frontier = nxt
        level += 1
        if progress:
            progress(level, len(parent))
    done = SearchResult(level, len(parent), transitions, not frontier, False,
                        time.perf_counter() - t0, None, fault_level)
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


class _Key:
    """A search node as a dict key: a state and, under a fault limit, the number of fault
    actions taken to reach it. The state's (deep, costly) hash is computed once, not at every
    lookup."""

    __slots__ = ("state", "faults", "_hash")

    def __init__(self, state: Any, faults: int = 0):
        self.state = state
        self.faults = faults
        self._hash = hash((hash(state), faults))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Key) and self._hash == other._hash
                and self.faults == other.faults and self.state == other.state)


def _rebuild(system: System, parent: dict, last: Any, name: str, args: tuple, obs: Any,
             pre: Any, variants: Sequence[str]) -> Trace:
    table = {a.name: a for a in system.actions}
    steps = [TraceStep(name, dict(zip(table[name].params, args, strict=True)), last.state, obs)]
    cur = pre
    while parent[cur] is not None:
        p, n, a, o = parent[cur]
        steps.append(TraceStep(n, dict(zip(table[n].params, a, strict=True)), cur.state, o))
        cur = p
    steps.append(TraceStep("init", {}, cur.state))
    steps.reverse()
    return Trace(system.protocol, system.param_dict(), tuple(variants), steps)
