"""The gate conformance harness: the spec's closed system is the world, and an implementation
of one rank is held to it, step by step, for both ranks at once.

Every spec action that belongs to a rank is delivered to that rank's implementation: an
application call (``call_gate``, ``call_big``, ``consume``, and the fault ``bad_call``), the
item a TCP read returned, the completions a poll returned (after checking that the
implementation asks for as many as the spec's poll takes), a timeout, a closed peer, a crash,
or, for a step the rank takes on its own, ``advance``. What the implementation emits (the work
requests it posts, with wr_id, region offset, length and signaled flag; its TCP writes; its
result and log) must equal the spec's ``Observation`` of that step, and after every step both
implementations' views must equal the spec's rank views. The fabric's own steps (transmit,
deliver, wire loss) and the faults that only touch a CQ (error and stray completions) reach an
implementation through what it later polls, exactly as the spec injects them.

An implementation fits ``GateImpl``; ``refimpl.gate_engine.GateEngine`` is the reference one,
``refimpl.native_gate.NativeGateEngine`` runs the C engine (``native/gate_engine.c``).
"""

from __future__ import annotations

import copy
import importlib
import os
import random
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from verbspec.refimpl.conformance.random_runs import Swarm, random_runs
from verbspec.refimpl.engines.gate_engine import Completion, Emitted, GateEngine
from verbspec.spec import fabric as fb
from verbspec.spec.actions import name_of
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import GateState, Observation, RankView
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import GateSystem
from verbspec.spec.gate.wire import Hello, TcpItem
from verbspec.spec.lts import Action, Trace, TraceStep, start_trace


class GateImpl(Protocol):
    """What an implementation of one gate rank offers the harness (the adapter)."""

    def setup(self, peer: Hello | None = None) -> Emitted: ...
    def call_gate(self, layer: int, gate: int, seq: int) -> Emitted: ...
    def call_big(self, chunks: int) -> Emitted: ...
    def call_block(self) -> Emitted: ...
    def consume(self) -> Emitted: ...
    def advance(self) -> Emitted: ...
    def tcp_read(self, item: TcpItem) -> Emitted: ...
    def poll_size(self) -> int: ...
    def completions(self, polled: tuple[Completion, ...]) -> Emitted: ...
    def timeout(self) -> Emitted: ...
    def peer_closed(self) -> Emitted: ...
    def post_failed(self, posted: int) -> Emitted: ...
    def poll_failed(self) -> Emitted: ...
    def crash(self) -> None: ...
    def view(self) -> Any: ...


# (configuration, rank, granted receive depth) -> an implementation of that rank
Factory = Callable[[GateConfig, int, int], GateImpl]


def reference(cfg: GateConfig, rank: int, grant: int) -> GateEngine:
    return GateEngine(cfg, grant)


CALLS = {name_of(GateSpec.do_call_gate), name_of(GateSpec.do_bad_call)}
READS = {name_of(f) for f in (GateSpec.do_barrier_read, GateSpec.do_big_header_read,
                              GateSpec.do_big_barrier_read, GateSpec.do_block_header_read,
                              GateSpec.do_block_barrier_read, GateSpec.do_batch_header_read)}
# steps of the fabric, and faults that only put an entry in a CQ: no rank acts
WORLD = {name_of(f) for f in (GateSpec.do_transmit, GateSpec.do_deliver, GateSpec.do_lose,
                              GateSpec.do_error_completion, GateSpec.do_stray_completion)}
SETUP, CALL_BIG, CALL_BLOCK, CONSUME, REAP, TIMEOUT, PEER_GONE, CRASH = (
    name_of(f) for f in (GateSpec.do_setup, GateSpec.do_call_big, GateSpec.do_call_block,
                         GateSpec.do_consume, GateSpec.do_reap, GateSpec.do_timeout,
                         GateSpec.do_peer_gone, GateSpec.do_crash))
POST_FAIL, POLL_FAIL = name_of(GateSpec.do_post_fail), name_of(GateSpec.do_poll_fail)
CONFORMANCE = "conformance"    # a trace's violation when an implementation differed
FAULT_RATE = 0.01        # a fault at about one step in a hundred where one can happen
SHRINK_SECONDS = 30.0    # the longest a mismatching random run is reduced for
VIEW_FIELDS = tuple(f.name for f in fields(RankView))


class Disagreement(Exception):
    def __init__(self, what: str, expected: Any, actual: Any):
        super().__init__(what)
        self.what, self.expected, self.actual = what, expected, actual


@dataclass(frozen=True)
class Mismatch:
    step: int               # 1-based index of the step in the run
    action: str
    args: dict[str, Any]
    what: str               # the observation field or view that differs
    expected: Any
    actual: Any

    def __str__(self) -> str:
        call = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return (f"step {self.step} {self.action}({call}): {self.what}: the spec has "
                f"{self.expected!r}, the implementation {self.actual!r}")


@dataclass
class Run:
    steps: int = 0
    mismatch: Mismatch | None = None
    actions: Counter = field(default_factory=Counter)
    trace: Trace | None = None
    reached: dict[str, int] = field(default_factory=dict)   # the system's depth measures


def _wr(w: Any) -> tuple:
    return (w.wr_id, w.buf, w.offset, w.length, w.signaled)


def _completion(c: Any) -> Completion:
    return Completion(c.opcode, c.wr_id, fb.WC_STATUS_CODE[c.status], c.byte_len)


@dataclass(frozen=True)
class Call:
    """The implementation call a spec step means: ``method`` of GateImpl on rank ``rank``
    with ``args``. A reap first checks the poll: ``poll`` is (entries the CQ holds, entries
    the spec's poll took)."""

    rank: int
    method: str
    args: tuple = ()
    poll: tuple[int, int] | None = None


def call_of(pre: GateState, name: str, args: tuple, obs: Observation) -> Call | None:
    """Which call of a rank's implementation the spec step ``name(args)`` from ``pre`` with
    observation ``obs`` is; None for a step no rank takes (the fabric's, or a fault that only
    puts an entry in a CQ)."""
    if name in WORLD:
        return None
    rank = args[0]
    if name == SETUP:
        return Call(rank, GateImpl.setup.__name__)
    if name in CALLS:
        return Call(rank, GateImpl.call_gate.__name__, tuple(args[1:]))
    if name == CALL_BIG:
        return Call(rank, GateImpl.call_big.__name__, (args[1],))
    if name == CALL_BLOCK:
        return Call(rank, GateImpl.call_block.__name__)
    if name == CONSUME:
        return Call(rank, GateImpl.consume.__name__)
    if name in READS:
        return Call(rank, GateImpl.tcp_read.__name__, (obs.tcp_in[0],))
    if name == REAP:
        polled = tuple(_completion(c) for c in obs.polled)
        return Call(rank, GateImpl.completions.__name__, (polled,),
                    (len(pre.fabric.qps[rank].cq), len(obs.polled)))
    if name == TIMEOUT:
        return Call(rank, GateImpl.timeout.__name__)
    if name == PEER_GONE:
        return Call(rank, GateImpl.peer_closed.__name__)
    if name == CRASH:
        return Call(rank, GateImpl.crash.__name__)
    if name == POST_FAIL:
        return Call(rank, GateImpl.post_failed.__name__, (args[1],))
    if name == POLL_FAIL:
        return Call(rank, GateImpl.poll_failed.__name__)
    return Call(rank, GateImpl.advance.__name__)


# what a step emits, compared field by field: (name in a mismatch, attribute of Observation
# and of Emitted)
EMISSION = (("receives posted", "recvs"), ("sends posted", "sends"), ("TCP writes", "tcp_out"),
            ("result", "result"), ("log", "log"))


def emission(e: Observation | Emitted) -> tuple[tuple[str, Any], ...]:
    """The emitted fields of a spec observation or an implementation's Emitted, in the one
    form both are compared in."""
    return tuple((what, tuple(map(_wr, getattr(e, attr))) if attr in ("recvs", "sends")
                  else getattr(e, attr)) for what, attr in EMISSION)


def recorded(system: Any, moves: Sequence[tuple[str, dict[str, Any]]], lenient: bool = False
             ) -> Callable[[Any, int], tuple[Action, tuple] | None]:
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


def first_path(system: Any, parent: dict, node: Any, last: tuple) -> Trace:
    """The first path to ``node`` in a sweep's ``parent`` map (node -> (parent node, action,
    args, post state, observation), None at the root), then the step ``last``, as a trace."""
    steps = [last]
    while parent[node] is not None:
        node, *step = parent[node]
        steps.append(tuple(step))
    trace = start_trace(system, system.variants)
    table = {a.name: a for a in system.actions}
    for name, args, post, obs in reversed(steps):
        named = dict(zip(table[name].params, args, strict=True))
        trace.steps.append(TraceStep(name, named, post, obs))
    return trace


class GateHarness:
    """Lockstep runs of the spec's gate system with an implementation on each rank."""

    def __init__(self, system: GateSystem, factory: Factory = reference):
        self.system = system
        self.factory = factory

    def fresh(self) -> tuple[GateState, list[GateImpl]]:
        grants = self.system.spec.rq_grant
        own = self.system.params.of_rank
        return self.system.initial(), [self.factory(own(r), r, grants[r]) for r in (0, 1)]

    def deliver(self, impls: Sequence[GateImpl], pre: GateState, name: str,
                args: tuple, obs: Observation) -> Emitted | None:
        """Hand one spec step to the implementation it belongs to; what it emitted (None when
        no rank acts). Raises Disagreement where it differs before it acts."""
        call = call_of(pre, name, args, obs)
        if call is None:
            return None
        impl = impls[call.rank]
        if call.poll is not None:
            # the implementation polls as many as it asks for, up to what the CQ holds
            held, polled = call.poll
            asked = min(impl.poll_size(), held)
            if asked != polled:
                raise Disagreement("completions polled", polled, asked)
        if call.method == GateImpl.setup.__name__:
            # the rank's hello reads what its peer was built with
            return impl.setup(self.system.params.of_rank(1 - call.rank).hello)
        if call.method == GateImpl.crash.__name__:
            impl.crash()
            return Emitted()
        if call.method == GateImpl.post_failed.__name__:
            # the rank takes its step, then its driver's post is refused part-way: what was
            # up before the refused call stays posted (receives are posted before sends)
            (posted,) = call.args
            step, failed = impl.advance(), impl.post_failed(posted)
            return Emitted(recvs=step.recvs[:posted],
                           sends=step.sends[:max(0, posted - len(step.recvs))],
                           result=failed.result, log=step.log + failed.log)
        return getattr(impl, call.method)(*call.args)

    @staticmethod
    def compare(obs: Observation, got: Emitted | None, impls: Sequence[GateImpl]
                ) -> tuple[str, Any, Any] | None:
        """The first field in which the implementation differs from the spec's observation."""
        if got is not None:
            for (what, want), (_, have) in zip(emission(obs), emission(got), strict=True):
                if want != have:
                    return what, want, have
        for r, impl in enumerate(impls):
            view = impl.view()
            for f in VIEW_FIELDS:
                want, have = getattr(obs.views[r], f), getattr(view, f)
                if want != have:
                    return f"rank {r} {f}", want, have
        return None

    def run(self, rng: random.Random, max_steps: int, fault_rate: float = FAULT_RATE,
            swarm: Swarm | None = None) -> Run:
        """One random run of at most ``max_steps``: at each step a fault with probability
        ``fault_rate`` where one is enabled, otherwise an enabled progress step, weighted as
        one of the system's workload profiles says (long runs of decode gates, or big gates
        between them), other steps equally likely. With a ``swarm``, the faults it leaves out
        are never taken and it names the profile; without, every fault may be taken and the
        profile is drawn from ``rng``."""
        k = rng.randrange(self.profiles()) if swarm is None else swarm.profile
        weight = {name: w[k] for name, w in self._progress_weights().items()}
        off = swarm.off if swarm is not None else frozenset()

        def choose(s: GateState, i: int) -> tuple[Action, tuple] | None:
            if i > max_steps:
                return None
            choices = [(a, args) for a in self.system.actions if a.name not in off
                       for args in a.enabled(s)]
            faults = [c for c in choices if c[0].fault]
            progress = [c for c in choices if not c[0].fault]
            if faults and (not progress or rng.random() < fault_rate):
                return rng.choice(faults)
            ws = [weight.get(a.name, 1) for a, _ in progress]
            if not any(ws):
                return None
            return rng.choices(progress, weights=ws)[0]

        return self._lockstep(choose)

    def _progress_weights(self) -> dict[str, tuple[int, ...]]:
        """The system's workload profiles for progress steps (faults come at the fault rate,
        whatever weight exploration gives them)."""
        faulty = {a.name for a in self.system.actions if a.fault}
        return {n: w for n, w in self.system.weights.items() if n not in faulty}

    def profiles(self) -> int:
        """How many workload profiles the system's weights give a run the choice of."""
        return min(map(len, self._progress_weights().values()), default=1)

    def follow(self, moves: Sequence[tuple[str, dict[str, Any]]], lenient: bool = False
               ) -> Run:
        """The recorded moves of a trace, in lockstep; ValueError naming the first move that
        the spec does not have enabled (with ``lenient``: that move skipped)."""
        return self._lockstep(recorded(self.system, moves, lenient))

    def _lockstep(self, choose: Callable[[GateState, int], tuple[Action, tuple] | None]) -> Run:
        """The steps ``choose`` picks, in lockstep with both ranks (see ``lockstep``)."""
        s0, impls = self.fresh()
        return lockstep(self.system, s0, impls, self._check, choose, self.system.depth)

    def every_edge(self, max_faults: int) -> Sweep:
        """Every edge (state, action, arguments) reachable in runs of at most ``max_faults``
        fault actions, each executed once in lockstep (see ``every_edge``)."""
        s0, impls0 = self.fresh()
        return every_edge(self.system, s0, impls0, self._check, max_faults)

    def every_path(self, depth: int, max_faults: int) -> PathSweep:
        """Every path of 1 to ``depth`` steps from the initial state with at most
        ``max_faults`` fault actions, each in lockstep (see ``every_path``)."""
        s0, impls0 = self.fresh()
        return every_path(self.system, s0, impls0, self._check, depth, max_faults)

    def _check(self, impls: Sequence[GateImpl], pre: GateState, name: str, args: tuple,
               post: GateState, obs: Observation) -> tuple[str, Any, Any] | None:
        """``_step`` as the sweeps call it (``StepCheck``)."""
        return self._step(impls, pre, name, args, obs)

    def _step(self, impls: Sequence[GateImpl], pre: GateState, name: str, args: tuple,
              obs: Observation) -> tuple[str, Any, Any] | None:
        """One spec step handed to the implementations: the first difference, or None."""
        try:
            return self.compare(obs, self.deliver(impls, pre, name, args, obs), impls)
        except Disagreement as d:
            return d.what, d.expected, d.actual
        except Exception as e:      # an implementation refusing the step is a mismatch
            return "the step", "taken", f"{type(e).__name__}: {e}"


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


def lockstep(system: Any, s0: Any, impl: Any, step: StepCheck,
             choose: Callable[[Any, int], tuple[Action, tuple] | None],
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
            out.trace.violation, out.trace.message = CONFORMANCE, str(out.mismatch)
            return out
        s, i = post, i + 1
    out.reached = reached(s)
    return out


def every_edge(system: Any, s0: Any, impl0: Any, step: StepCheck,
               max_faults: int | None = None, max_states: int | None = None) -> Sweep:
    """Every edge (state, action, arguments) reachable from ``s0`` in runs of at most
    ``max_faults`` fault actions (None: any number), each executed once in lockstep, breadth
    first. Each state is entered with the implementation as the first (a shortest) path to
    it left it, copied with copy.deepcopy for each edge out of it; a mismatch ends the sweep
    with that shortest path as its trace. RuntimeError past ``max_states`` states."""
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
                    out.trace.violation, out.trace.message = CONFORMANCE, str(out.mismatch)
                    return out
                if nxt not in parent:
                    parent[nxt] = (node, a.name, args, post, obs)
                    frontier.append((nxt, mine, depth + 1))
    return out


def every_path(system: Any, s0: Any, impl0: Any, step: StepCheck, depth: int,
               max_faults: int = 0) -> PathSweep:
    """Every path of 1 to ``depth`` steps from ``s0`` through ``system``'s enabled actions
    (at most ``max_faults`` fault actions on a path), depth first, each in lockstep with the
    implementation: at a branch point the implementation is copied with copy.deepcopy for
    each way out but the last. The first mismatch ends the walk, with its path as the
    trace."""
    if depth < 1:
        raise ValueError(f"a path depth must be at least 1, not {depth}")
    out = PathSweep(depth)
    seen: set[Any] = {s0}
    path: list[tuple[str, tuple, Any, Any]] = []

    def walk(s: Any, impl: Any, faults: int) -> bool:
        """The paths on from ``s``; whether one differed."""
        moves = [(a, args) for a in system.actions
                 if not (a.fault and faults >= max_faults) for args in a.enabled(s)]
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
                out.trace = _path_trace(system, path)
                out.trace.violation, out.trace.message = CONFORMANCE, str(out.mismatch)
                return True
            if len(path) < depth and walk(post, mine, faults + a.fault):
                return True
            path.pop()
        return False

    walk(s0, impl0, 0)
    out.states = len(seen)
    return out


def _path_trace(system: Any, path: Sequence[tuple[str, tuple, Any, Any]]) -> Trace:
    trace = start_trace(system, system.variants)
    table = {a.name: a for a in system.actions}
    for name, args, post, obs in path:
        trace.steps.append(TraceStep(name, dict(zip(table[name].params, args, strict=True)),
                                     post, obs))
    return trace


# ---------------------------------------------------------------------------- the suite
@dataclass
class Report:
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


HAZARD_PREFIX = "variant:"
NATIVE = "native"


def resolve(impl: str) -> Factory:
    """``refimpl`` (the reference engine), ``native`` (the C engine,
    refimpl/bindings/native_gate.py;
    ValueError where it was not built), ``variant:NAME`` (the reference engine behaving as the
    named variant, refimpl/engines/gate_variants.py) or ``MODULE:FACTORY``, a callable
    (configuration, rank,
    granted depth) -> implementation; ValueError naming what is wrong."""
    if impl == "refimpl":
        return reference
    if impl == NATIVE:
        from verbspec.refimpl.bindings.native_gate import module, native_engine

        module()        # ValueError: not built
        return native_engine
    if impl == "ucx":
        raise ValueError("--impl ucx is UCX's tag matching: it runs with --protocol tagmatch")
    if impl.startswith(HAZARD_PREFIX):
        from verbspec.refimpl.engines.gate_variants import hazard

        return hazard(impl[len(HAZARD_PREFIX):])
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


def conform(system: GateSystem, factory: Factory, impl: str, *, sequences: int, steps: int,
            seed: int = 0, fault_rate: float = FAULT_RATE, shrink_seconds: float = SHRINK_SECONDS,
            progress: Callable[[str], None] | None = None,
            each: Callable[[Run], bool] | None = None, keep_going: bool = False
            ) -> Report:
    """Random lockstep runs, generated by Hypothesis with a swarm of faults (see
    ``refimpl.random_runs``; ``seed`` seeds the generation), until ``sequences`` have run or
    one differs (with ``keep_going``: all of them); a mismatching run is reduced, for at most
    ``shrink_seconds``, and kept, ending at its first mismatching step. ``each``, where
    given, sees every run as it ends and ends the runs by returning False."""
    harness = GateHarness(system, factory)
    out = Report(impl, system.protocol, actions_total=len(system.actions))
    t0 = time.perf_counter()
    random_runs(out, harness, lambda rng, swarm: harness.run(rng, steps, fault_rate, swarm),
                optional=[a.name for a in system.actions if a.fault],
                profiles=harness.profiles(), sequences=sequences, seed=seed,
                shrink_seconds=shrink_seconds, progress=progress, every=1, each=each,
                keep_going=keep_going)
    out.seconds = time.perf_counter() - t0
    return out


# every path up to PATH_DEPTH steps, in a configuration at the size of the sweep's largest
# (windows of 4, two-chunk vectors, a drain and a big gate of up to 3 chunks, a fault):
# (parameters, fault actions per path)
PATH_CONFIGS: tuple[tuple[dict[str, int], int], ...] = (
    ({"window": 4, "vec_bytes": 24576, "chain_max": 2, "big_gates": 1, "big_depth": 2,
      "big_last_bytes": 4096, "ops": 3, "faults": 1}, 1),
)
PATH_DEPTH = 10

# a wire that loses messages (the `lose` action) is outside the model's scope, so not among the
# refinement check's configurations: swept after them, over UC with one fault per run (a loss,
# or any other fault) and over RC with two-chunk vectors and one loss per run
LOSS_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 1,
      "wire_loss": 1}, 1),
    ({"window": 2, "vec_bytes": 24576, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "wire_loss": 1, "qp_type": "rc"}, 1),
)

# verify blocks are outside the model's scope too: swept after the lossy wire, two-layer
# blocks beside decode gates (a drain before each block that follows one) and beside big
# gates, with every fault action, with two rows a layer, and alone with two-chunk vectors
BLOCK_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 3, "big_gates": 0, "faults": 0,
      "verify_blocks": 1}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 1,
      "big_depth": 2, "faults": 0, "verify_blocks": 1}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "verify_blocks": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "block_rows": 2}, 0),
    ({"window": 2, "vec_bytes": 24576, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 0,
      "verify_blocks": 1}, 0),
    # the verify window switched off (DS4_TP_DISABLE_VERIFY_WINDOW): a block's layers are
    # batch gates, beside decode gates, in two windows with a short last chunk, and faulted
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "verify_window": "off"}, 0),
    ({"window": 2, "vec_bytes": 100, "max_msg": 64, "chain_max": 2, "ops": 1, "big_gates": 0,
      "big_depth": 2, "faults": 0, "verify_blocks": 1, "block_rows": 2,
      "verify_window": "off"}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "verify_blocks": 1, "verify_window": "off"}, 1),
)

# failing posts and polls (post_failures=1), outside the model too: swept last, one fault a run,
# among decode gates, in a big gate (and its drain) and in a verify block
POST_FAILURE_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 1,
      "post_failures": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 1, "big_depth": 2,
      "faults": 1, "post_failures": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "post_failures": 1, "verify_blocks": 1}, 1),
)

# ranks built with another message cap or receive window (rank1_max_msg, rank1_window), also
# outside the model: their hellos refuse each other at setup; and verify blocks of other rows
# (rank1_block_rows), whose headers refuse each other, and a rank with its verify window
# switched off (rank1_verify_window), whose batch header its peer's block header refuses
PER_RANK_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 24576, "rank1_max_msg": 24576, "chain_max": 2, "ops": 1,
      "big_gates": 0, "faults": 0}, 0),
    ({"window": 2, "rank1_window": 3, "vec_bytes": 100, "chain_max": 2, "ops": 1,
      "big_gates": 0, "faults": 0}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "rank1_block_rows": 2}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "rank1_verify_window": "off"}, 0),
)


def new_sweep() -> dict[str, Any]:
    """An exhaustive run's totals, before its first configuration (``depth``: the deepest
    walk's bound; ``walk_depths``: each walk's)."""
    return {"configs": 0, "states": 0, "edges": 0, "bfs_depth": 0,
            "path_configs": 0, "paths": 0, "path_states": 0, "depth": 0, "walk_depths": []}


def add_edges(out: Report, sw: Sweep) -> None:
    out.sweep["configs"] += 1
    out.sweep["states"] += sw.states
    out.sweep["edges"] += sw.edges
    out.sweep["bfs_depth"] = max(out.sweep["bfs_depth"], sw.depth)
    out.steps += sw.edges
    out.actions.update(sw.actions)


def add_paths(out: Report, ps: PathSweep) -> None:
    out.sweep["path_configs"] += 1
    out.sweep["paths"] += ps.paths
    out.sweep["path_states"] += ps.states
    out.sweep["depth"] = max(out.sweep["depth"], ps.depth)
    out.sweep["walk_depths"].append(ps.depth)
    out.steps += ps.paths
    out.actions.update(ps.actions)


def tally(out: Report, sw: Sweep | PathSweep, configs: int, keep_going: bool,
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


def conform_every_edge(factory: Factory, impl: str,
                       progress: Callable[[str], None] | None = None,
                       keep_going: bool = False, depth: int | None = None) -> Report:
    """Every reachable edge of the small base-protocol configurations the model's refinement
    check uses (decode gates past a window of 2, a drain, big gates of up to 3 chunks, every
    fault action), of LOSS_CONFIGS (a lossy wire), BLOCK_CONFIGS (verify blocks),
    POST_FAILURE_CONFIGS (failing posts and polls) and PER_RANK_CONFIGS (ranks built apart),
    each executed once in lockstep, then
    every path of up to ``depth`` (default PATH_DEPTH) steps of PATH_CONFIGS; stops at the
    first mismatch (with ``keep_going``: a configuration's sweep or walk stops there, and the
    next one runs)."""
    from verbspec.proofs.gate.refinement import CONFIGS
    from verbspec.spec.gate.system import build

    t0 = time.perf_counter()
    base = [(values, faults) for values, variants, faults in CONFIGS if not variants]
    base += LOSS_CONFIGS + BLOCK_CONFIGS + POST_FAILURE_CONFIGS + PER_RANK_CONFIGS
    out = Report(impl, "gate", sweep=new_sweep())
    names: set[str] = set()     # the actions of the configurations swept, together
    for values, faults in base:
        system = build(values)
        names |= {a.name for a in system.actions}
        out.actions_total = len(names)
        if tally(out, GateHarness(system, factory).every_edge(faults), len(base), keep_going,
                 progress):
            break
    else:       # the paths, unless an edge's mismatch ended the run
        steps = depth or PATH_DEPTH
        for values, faults in PATH_CONFIGS:
            if progress:
                progress(f"every path up to {steps} steps")
            walk = GateHarness(build(values), factory).every_path(steps, faults)
            if tally(out, walk, len(base), keep_going, progress):
                break
    out.seconds = time.perf_counter() - t0
    return out
