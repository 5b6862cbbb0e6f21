"""The lockstep core both protocols' conformance harnesses share: a spec's closed system is the
world, and an implementation is handed each of its steps and held to what the spec did.

A protocol's harness (``conformance.gate``, ``conformance.tagmatch``) says how it builds an
implementation (``Harness.fresh``), how one spec step reaches it and is compared
(``Harness.check``) and how far a run got (``Harness.reached``). Everything else is here: the
run and its first mismatch (``Run``, ``Mismatch``), the loop that takes the steps a chooser
picks (``lockstep``) or a trace recorded (``recorded``), the every-edge sweep and the
every-path walk, the report of a suite and what an exhaustive run adds to it, the driver of
an exhaustive run's configurations, and how an ``--impl`` name resolves to a factory.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verbspec.spec.lts import Action, Trace, TraceStep, start_trace

CONFORMANCE = "conformance"    # a trace's violation when an implementation differed
REACTION = "reaction"    # a mismatch's field: a reaction of the implementation's the spec lacks
SHRINK_SECONDS = 30.0    # the longest a mismatching random run is reduced for
VARIANT_PREFIX = "variant:"
REFERENCE = "refimpl"
NATIVE = "native"


@dataclass(frozen=True)
class Mismatch:
    step: int               # 1-based index of the step in the run
    action: str
    args: dict[str, Any]
    what: str               # the observation field or view that differs
    expected: Any
    actual: Any

    def __str__(self) -> str:
        """One line: lists longer than LONG_LIST summarised (``full`` has them whole)."""
        return self._text(summarise=True)

    def full(self) -> str:
        """Every item of both sides, as a trace's message keeps it."""
        return self._text(summarise=False)

    def _text(self, summarise: bool) -> str:
        call = ", ".join(f"{k}={v}" for k, v in self.args.items())
        if self.what.startswith(REACTION):
            return (f"step {self.step} {self.action}({call}): the implementation would "
                    f"{self.actual}; the spec offers no such step ({self.expected} is not "
                    f"enabled)")
        short = _long_lists(self.expected, self.actual) if summarise else None
        return (f"step {self.step} {self.action}({call}): {self.what}: "
                f"{short or f'the spec has {self.expected!r}, the implementation {self.actual!r}'}")


LONG_LIST = 8    # a mismatch's line summarises lists longer than this


def _long_lists(expected: Any, actual: Any) -> str | None:
    """Two lists of which one is long, said in one clause: their lengths and the first item
    that differs (None for anything else)."""
    if not (isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple))):
        return None
    if max(len(expected), len(actual)) <= LONG_LIST:
        return None
    both = min(len(expected), len(actual))
    k = next((i for i in range(both) if expected[i] != actual[i]), both)

    def item(seq: Sequence[Any]) -> str:
        return repr(seq[k]) if k < len(seq) else "nothing"

    return (f"the spec has {len(expected)} items, the implementation {len(actual)}; the first "
            f"to differ is item {k + 1}: the spec's {item(expected)}, the implementation's "
            f"{item(actual)} (both lists whole in the trace)")


@dataclass(frozen=True)
class Reaction:
    """What an implementation would do next by its own state, whatever the world does next
    (a completion it would report, a failure it would raise), named as the spec's step it
    would be: ``action`` with ``args``, or, where ``group`` is given, any action of the group
    with ``args`` (a TCP read, a step of a rank's own). ``how`` says it in words, for the
    mismatch; ``rank`` and ``phase`` name where (-1 and "" for a whole job's)."""

    action: str
    args: tuple
    how: str
    rank: int = -1
    phase: str = ""
    group: frozenset[str] = frozenset()

    def step(self, params: Sequence[str]) -> str:
        """The spec's step it would be, as a mismatch names it (a group's: the group's name
        and the rank)."""
        if self.group:
            return f"{self.action} of rank {self.rank}"
        call = ", ".join(f"{p}={v}" for p, v in zip(params, self.args, strict=False))
        return f"{self.action}({call})"


def _actions(system: Any) -> dict[str, Action]:
    """``system``'s actions by name, kept on the system while its action list is the same."""
    kept = getattr(system, "_actions_by_name", None)
    if kept is None or kept[0] is not system.actions:
        kept = (system.actions, {a.name: a for a in system.actions})
        system._actions_by_name = kept
    return kept[1]


def unoffered(system: Any, s: Any, reactions: Iterable[Reaction],
              taken: Callable[[Reaction], str | None]) -> tuple[str, Any, Any] | None:
    """The second direction of lockstep: of the ``reactions`` an implementation has in ``s``
    (its own reading of its state), the first the spec does not offer there, as a difference
    (``REACTION`` and the step, the spec's step that is not enabled, what the implementation
    would do). ``taken(reaction)`` tries a reaction the spec does not offer on a copy of the
    implementation: what it did in words, or None where it refused the step (then it is not
    one of its reactions after all)."""
    table = _actions(system)
    enabled: dict[str, list[tuple]] = {}

    def offers(name: str, args: tuple) -> bool:
        if name not in enabled:
            enabled[name] = list(table[name].enabled(s)) if name in table else []
        return args in enabled[name]

    for r in reactions:
        if any(offers(name, r.args) for name in (r.group or {r.action})):
            continue
        how = taken(r)
        if how is not None:
            a = table.get(r.action)
            step = r.step(a.params if a is not None else ())
            return f"{REACTION} {step}", step, how
    return None


@dataclass
class Run:
    steps: int = 0
    mismatch: Mismatch | None = None
    actions: Counter = field(default_factory=Counter)
    trace: Trace | None = None
    reached: dict[str, int] = field(default_factory=dict)   # the system's depth measures


@dataclass
class Sweep:
    """What an every-edge sweep covered, and its mismatch if one was found."""

    states: int = 0
    edges: int = 0
    depth: int = 0          # the longest of the shortest paths to a state (breadth first)
    actions: Counter = field(default_factory=Counter)
    mismatch: Mismatch | None = None
    trace: Trace | None = None


@dataclass
class PathSweep:
    """What an every-path walk covered: ``paths`` action sequences of 1 to ``depth`` steps
    from the initial state, each run in lockstep (a path's prefix is the path it extends, so
    each path costs one step on a copy of its prefix's implementation), the ``states`` they
    pass through, and its mismatch if one was found."""

    depth: int
    paths: int = 0
    states: int = 0
    actions: Counter = field(default_factory=Counter)
    mismatch: Mismatch | None = None
    trace: Trace | None = None


# one lockstep step: (implementation, pre state, action name, its arguments, post state,
# observation) -> the first difference (field, the spec's, the implementation's), or None
StepCheck = Callable[[Any, Any, str, tuple, Any, Any], "tuple[str, Any, Any] | None"]
Chooser = Callable[[Any, int], "tuple[Action, tuple] | None"]


def recorded(system: Any, moves: Sequence[tuple[str, dict[str, Any]]], lenient: bool = False
             ) -> Chooser:
    """A harness's step chooser that takes a trace's recorded moves in turn; ValueError
    naming the first move the spec does not have enabled, or with ``lenient`` that move
    skipped (a reduced run's moves, some of which no longer apply)."""
    table = {a.name: a for a in system.actions}
    left = iter(enumerate(moves, 1))

    def choose(s: Any, _: int) -> tuple[Action, tuple] | None:
        for i, (name, kwargs) in left:
            a = table.get(name)
            if a is None:
                raise ValueError(f"step {i}: unknown action {name!r}")
            args = tuple(kwargs.get(p) for p in a.params)
            if args in list(a.enabled(s)):
                return a, args
            if not lenient:
                raise ValueError(f"step {i}: action {name}{args} is not enabled")
        return None

    return choose


def path_trace(system: Any, path: Iterable[tuple[str, tuple, Any, Any]]) -> Trace:
    """The steps (action, arguments, post state, observation) of a path from the initial
    state, as a trace."""
    trace = start_trace(system, system.variants)
    table = {a.name: a for a in system.actions}
    for name, args, post, obs in path:
        trace.steps.append(TraceStep(name, dict(zip(table[name].params, args, strict=True)),
                                     post, obs))
    return trace


def first_path(system: Any, parent: dict, node: Any, last: tuple) -> Trace:
    """The first path to ``node`` in a sweep's ``parent`` map (node -> (parent node, action,
    args, post state, observation), None at the root), then the step ``last``, as a trace."""
    steps = [last]
    while parent[node] is not None:
        node, *step = parent[node]
        steps.append(tuple(step))
    return path_trace(system, reversed(steps))


def lockstep(system: Any, s0: Any, impl: Any, step: StepCheck, choose: Chooser,
             reached: Callable[[Any], dict[str, int]]) -> Run:
    """Steps chosen by ``choose(state, index)`` from ``s0``, each checked by ``step`` against
    the implementation, until ``choose`` returns None (the run's depths then ``reached`` of
    its last state) or the implementation differs from the spec."""
    out = Run(trace=start_trace(system, system.variants))
    s, i = s0, 1
    while (move := choose(s, i)) is not None:
        a, args = move
        post, obs = a.apply(s, *args)
        out.steps, out.actions[a.name] = i, out.actions[a.name] + 1
        named = dict(zip(a.params, args, strict=True))
        out.trace.steps.append(TraceStep(a.name, named, post, obs))
        diff = step(impl, s, a.name, args, post, obs)
        if diff is not None:
            out.mismatch = Mismatch(i, a.name, named, *diff)
            out.trace.violation, out.trace.message = CONFORMANCE, out.mismatch.full()
            return out
        s, i = post, i + 1
    out.reached = reached(s)
    return out


def every_edge(system: Any, s0: Any, impl0: Any, step: StepCheck,
               max_faults: int | None = None, max_states: int | None = None) -> Sweep:
    """Every edge (state, action, arguments) reachable from ``s0`` in runs of at most
    ``max_faults`` fault actions (None: any number), each executed once in lockstep, breadth
    first. Each state is entered with the implementation as the first (a shortest) path to
    it left it, copied with copy.deepcopy for each edge out of it (the engines copy only
    what a step can change); a mismatch ends the sweep with that shortest path as its trace.
    RuntimeError past ``max_states`` states."""
    root = (s0, 0)
    # node (state, faults so far) -> (parent node, action, args, post state, observation)
    # of its first path
    parent: dict[tuple[Any, int], tuple | None] = {root: None}
    frontier = deque([(root, impl0, 0)])
    out = Sweep()
    while frontier:
        node, impl, depth = frontier.popleft()
        s, faults = node
        out.states, out.depth = out.states + 1, max(out.depth, depth)
        if max_states is not None and out.states > max_states:
            raise RuntimeError(f"more than {max_states} states")
        for a in system.actions:
            if a.fault and max_faults is not None and faults >= max_faults:
                continue
            for args in a.enabled(s):
                mine = copy.deepcopy(impl)
                post, obs = a.apply(s, *args)
                out.edges += 1
                out.actions[a.name] += 1
                diff = step(mine, s, a.name, args, post, obs)
                nxt = (post, faults + a.fault)
                if diff is not None:
                    named = dict(zip(a.params, args, strict=True))
                    out.mismatch = Mismatch(depth + 1, a.name, named, *diff)
                    out.trace = first_path(system, parent, node, (a.name, args, post, obs))
                    out.trace.violation, out.trace.message = CONFORMANCE, out.mismatch.full()
                    return out
                if nxt not in parent:
                    parent[nxt] = (node, a.name, args, post, obs)
                    frontier.append((nxt, mine, depth + 1))
    return out


def every_path(system: Any, s0: Any, impl0: Any, step: StepCheck, depth: int,
               max_faults: int | None = None) -> PathSweep:
    """Every path of 1 to ``depth`` steps from ``s0`` through ``system``'s enabled actions
    (at most ``max_faults`` fault actions on a path; None: any number), depth first, each in
    lockstep with the implementation: at a branch point the implementation is copied with
    copy.deepcopy for each way out but the last. The first mismatch ends the walk, with its
    path as the trace."""
    if depth < 1:
        raise ValueError(f"a path depth must be at least 1, not {depth}")
    out = PathSweep(depth)
    seen: set[Any] = {s0}
    path: list[tuple[str, tuple, Any, Any]] = []

    def walk(s: Any, impl: Any, faults: int) -> bool:
        """The paths on from ``s``; whether one differed."""
        moves = [(a, args) for a in system.actions
                 if not (a.fault and max_faults is not None and faults >= max_faults)
                 for args in a.enabled(s)]
        for k, (a, args) in enumerate(moves):
            mine = impl if k == len(moves) - 1 else copy.deepcopy(impl)
            post, obs = a.apply(s, *args)
            out.paths += 1
            out.actions[a.name] += 1
            seen.add(post)
            path.append((a.name, args, post, obs))
            diff = step(mine, s, a.name, args, post, obs)
            if diff is not None:
                named = dict(zip(a.params, args, strict=True))
                out.mismatch = Mismatch(len(path), a.name, named, *diff)
                out.trace = path_trace(system, path)
                out.trace.violation, out.trace.message = CONFORMANCE, out.mismatch.full()
                return True
            if len(path) < depth and walk(post, mine, faults + a.fault):
                return True
            path.pop()
        return False

    walk(s0, impl0, 0)
    out.states = len(seen)
    return out


class Harness:
    """Lockstep runs of a spec's system with an implementation made by ``factory``. A
    protocol's harness says what an implementation is at the start (``fresh``), how a spec
    step reaches it and is compared (``check``, a ``StepCheck``) and how far a run got
    (``reached``); the runs, replays, sweeps and walks are the same for every protocol."""

    def __init__(self, system: Any, factory: Callable[..., Any]):
        self.system = system
        self.factory = factory

    def fresh(self) -> tuple[Any, Any]:
        """The system's initial state and the implementation as it is there."""
        raise NotImplementedError

    def check(self, impl: Any, pre: Any, name: str, args: tuple, post: Any, obs: Any
              ) -> tuple[str, Any, Any] | None:
        """One spec step handed to the implementation: the first difference, or None."""
        raise NotImplementedError

    def reached(self, s: Any) -> dict[str, int]:
        """How far a run that ended in ``s`` got, by the system's measures."""
        raise NotImplementedError

    def follow(self, moves: Sequence[tuple[str, dict[str, Any]]], lenient: bool = False
               ) -> Run:
        """The recorded moves of a trace, in lockstep; ValueError naming the first move that
        the spec does not have enabled (with ``lenient``: that move skipped)."""
        return self._lockstep(recorded(self.system, moves, lenient))

    def _lockstep(self, choose: Chooser) -> Run:
        """The steps ``choose`` picks, in lockstep from the start (see ``lockstep``)."""
        s0, impl = self.fresh()
        return lockstep(self.system, s0, impl, self.check, choose, self.reached)

    def every_edge(self, max_faults: int | None = None, max_states: int | None = None
                   ) -> Sweep:
        """Every edge (state, action, arguments) reachable in runs of at most ``max_faults``
        fault actions (None: any number), each executed once in lockstep (see
        ``every_edge``); RuntimeError past ``max_states`` states."""
        s0, impl0 = self.fresh()
        return every_edge(self.system, s0, impl0, self.check, max_faults, max_states)

    def every_path(self, depth: int, max_faults: int | None = None) -> PathSweep:
        """Every path of 1 to ``depth`` steps from the initial state with at most
        ``max_faults`` fault actions (None: any number), each in lockstep (see
        ``every_path``)."""
        s0, impl0 = self.fresh()
        return every_path(self.system, s0, impl0, self.check, depth, max_faults)


# ---------------------------------------------------------------------------- the suite
@dataclass
class ConformanceReport:
    impl: str
    protocol: str
    sequences: int = 0
    steps: int = 0
    actions: Counter = field(default_factory=Counter)
    actions_total: int = 0
    seconds: float = 0.0
    mismatch: Mismatch | None = None
    trace: Trace | None = None
    # exhaustive mode: configs, states, edges, bfs_depth (every edge); path_configs, paths,
    # path_states, depth (every path up to depth)
    sweep: dict[str, int] | None = None
    reached: dict[str, int] = field(default_factory=dict)   # random mode: deepest per measure
    # a partial implementation: what it does not show (-> why), and the configurations of a
    # sweep it cannot run (-> why)
    unobserved: dict[str, str] = field(default_factory=dict)
    declined: dict[str, str] = field(default_factory=dict)
    # every mismatch found, each with its trace (more than one only with keep_going)
    disagreements: list[tuple[Mismatch, Trace | None]] = field(default_factory=list)

    def record(self, mismatch: Mismatch, trace: Trace | None, keep_going: bool) -> bool:
        """Keep a run's or a configuration's mismatch (the first is ``mismatch``); whether
        to stop."""
        if self.mismatch is None:
            self.mismatch, self.trace = mismatch, trace
        self.disagreements.append((mismatch, trace))
        return not keep_going

    @property
    def disagreed(self) -> int:
        return len(self.disagreements) or int(self.mismatch is not None)

    def as_json(self) -> dict[str, Any]:
        edges = self.sweep["edges"] if self.sweep else None
        return {"impl": self.impl, "protocol": self.protocol, "sequences": self.sequences,
                "steps": self.steps, "mismatches": self.disagreed,
                "actions_covered": len(self.actions), "actions_total": self.actions_total,
                "actions": dict(sorted(self.actions.items())),
                "edges_covered": edges,
                "edges_total": edges if self.sweep and self.mismatch is None else None,
                "exhaustive": self.sweep, "reached": self.reached or None,
                "seconds": round(self.seconds, 3),
                "mismatch": str(self.mismatch) if self.mismatch else None,
                "unobserved": self.unobserved or None, "declined": self.declined or None,
                "disagreements": [str(m) for m, _ in self.disagreements] or None}


def new_sweep() -> dict[str, Any]:
    """An exhaustive run's totals, before its first configuration (``depth``: the deepest
    walk's bound; ``walk_depths``: each walk's)."""
    return {"configs": 0, "states": 0, "edges": 0, "bfs_depth": 0,
            "path_configs": 0, "paths": 0, "path_states": 0, "depth": 0, "walk_depths": []}


def add_edges(out: ConformanceReport, sw: Sweep) -> None:
    out.sweep["configs"] += 1
    out.sweep["states"] += sw.states
    out.sweep["edges"] += sw.edges
    out.sweep["bfs_depth"] = max(out.sweep["bfs_depth"], sw.depth)
    out.steps += sw.edges
    out.actions.update(sw.actions)


def add_paths(out: ConformanceReport, ps: PathSweep) -> None:
    out.sweep["path_configs"] += 1
    out.sweep["paths"] += ps.paths
    out.sweep["path_states"] += ps.states
    out.sweep["depth"] = max(out.sweep["depth"], ps.depth)
    out.sweep["walk_depths"].append(ps.depth)
    out.steps += ps.paths
    out.actions.update(ps.actions)


def tally(out: ConformanceReport, sw: Sweep | PathSweep, configs: int, keep_going: bool,
          progress: Callable[[str], None] | None) -> bool:
    """A configuration's sweep or walk added to the report (its mismatch recorded); True when
    that mismatch ends the run."""
    if isinstance(sw, PathSweep):
        add_paths(out, sw)
    else:
        add_edges(out, sw)
        if progress:
            progress(f"{out.sweep['configs']} of {configs} configurations, "
                     f"{out.sweep['edges']:,} edges")
    return sw.mismatch is not None and out.record(sw.mismatch, sw.trace, keep_going)


# one configuration of an exhaustive run: its harness, the depth of its walk (0: every edge
# instead) and the most fault actions a run of it takes (None: any number)
Planned = tuple[Harness, int, int | None]


def exhaustive(out: ConformanceReport, plan: Iterable[Planned], configs: int,
               progress: Callable[[str], None] | None = None, keep_going: bool = False
               ) -> ConformanceReport:
    """An exhaustive run: each configuration of ``plan`` (of which ``configs`` sweep every
    edge) swept or walked in turn and tallied into ``out``, until one has a mismatch (with
    ``keep_going``: all of them). ``plan`` is taken lazily, so that a configuration is built
    (and counted) only when its turn comes."""
    t0 = time.perf_counter()
    for harness, depth, faults in plan:
        if depth and progress:
            progress(f"every path up to {depth} steps")
        sw = harness.every_path(depth, faults) if depth else harness.every_edge(faults)
        if tally(out, sw, configs, keep_going, progress):
            break
    out.seconds = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------- --impl
def resolve(impl: str, reference: Callable[..., Any], native: Callable[[], Callable[..., Any]],
            variant_engine: Callable[[str], Callable[..., Any]],
            others: Mapping[str, Callable[[], Callable[..., Any]]] | None = None
            ) -> Callable[..., Any]:
    """The factory an ``--impl`` names: REFERENCE (``reference``), NATIVE (what ``native()``
    returns; ValueError where the C engine was not built), ``variant:NAME``
    (``variant_engine(NAME)``,
    the reference engine behaving as a variant), a name among ``others`` (what its function
    returns, or its ValueError) or ``MODULE:FACTORY`` (see ``resolve_module``)."""
    if impl == REFERENCE:
        return reference
    if impl == NATIVE:
        return native()
    if others and impl in others:
        return others[impl]()
    if impl.startswith(VARIANT_PREFIX):
        return variant_engine(impl[len(VARIANT_PREFIX):])
    return resolve_module(impl)


def resolve_module(impl: str) -> Callable[..., Any]:
    """``MODULE:FACTORY``: the named callable, imported as ``python -m`` would find it (any
    protocol's harness resolves a module this way); ValueError naming what is wrong."""
    module, sep, attr = impl.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"--impl {impl!r}: expected refimpl or MODULE:FACTORY")
    if os.getcwd() not in sys.path:     # as ``python -m`` finds modules: from here first
        sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise ValueError(f"--impl {impl!r}: cannot import {module}: {e}") from None
    except AttributeError:
        raise ValueError(f"--impl {impl!r}: {module} has no {attr}") from None
    if not callable(found):
        raise ValueError(f"--impl {impl!r}: {module}.{attr} is not callable")
    return found
