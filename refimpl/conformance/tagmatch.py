"""The tag-matching conformance harness: the spec's closed tag-matching system is the world, and
an implementation of the job's endpoints (senders, receiver, and the receiver's NIC when
matching is offloaded) is held to it step by step.

Every spec action is handed to the implementation as one call: a sender's ``send``, the
packet a ``deliver`` brought (``delivered``), the receiver's ``post_recv``, ``cancel`` and
``probe``, the rendezvous steps (``start_read``, ``read_done``, ``send_fin``, and ``fin`` when
a FIN reaches its sender), and with offload the NIC's ``hw_op`` and software's ``sw_complete``
and ``sw_sync``. What the implementation emits (packets sent, matches, revoked matches,
cancels, receive completions, READs, FINs, released buffers, a probe's answer) must equal what
the spec's step did, and after every step its view must equal the spec's state read the same
way, and, where the implementation has ``ready()``, the steps of its own progress it would take
now must be those the spec has enabled. The wire is the spec's: the packet handed to
``delivered`` is the spec's message.

An implementation fits ``TagImpl``; ``refimpl.engines.tagmatch_engine.TagMatchEngine`` is the
reference one, ``refimpl.bindings.native_tagmatch.NativeTagEngine`` the C engine behind the same
calls.

A partial implementation, one that cannot show everything (a third-party matcher that keeps
its lists to itself, has no NIC offload, runs rendezvous inside its own progress), says so
with an ``observes`` attribute on its factory (``Observes``): the ``Emitted`` fields it
reports, whether its view is compared, and the limits of the configurations it can express.
The harness then compares only those fields, and declines a configuration beyond the limits,
saying why. ``refimpl.bindings.ucx_tagmatch`` is one: UCX's own tag matching.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from typing import Any, Protocol

from verbspec.refimpl.conformance import lockstep
from verbspec.refimpl.conformance.lockstep import (
    SHRINK_SECONDS,
    ConformanceReport,
    Harness,
    Planned,
    Reaction,
    Run,
    unoffered,
)
from verbspec.refimpl.conformance.random_runs import Swarm, conform_runs
from verbspec.refimpl.engines.observes import EMITTED_FIELDS, Observes
from verbspec.refimpl.engines.tagmatch_engine import (
    EAGER,
    RNDV,
    Emitted,
    EngineView,
    Packet,
    Read,
    TagMatchEngine,
)
from verbspec.spec import fabric as fb
from verbspec.spec.actions import name_of
from verbspec.spec.lts import Action
from verbspec.spec.tagmatch import offload as off
from verbspec.spec.tagmatch import state as stages
from verbspec.spec.tagmatch.state import Params, State, StepObs, sender_qp
from verbspec.spec.tagmatch.system import TagMatchSystem, build


class TagImpl(Protocol):
    """What an implementation of a tag-matching job's endpoints offers the harness."""

    def send(self, sender: int, comm: int, tag: int, nbytes: int) -> Emitted: ...
    def delivered(self, packet: Packet) -> Emitted: ...
    def post_recv(self, comm: int, src: int, tag: int, nbytes: int) -> Emitted: ...
    def cancel(self, rid: int) -> Emitted: ...
    def probe(self, comm: int, src: int, tag: int) -> Emitted: ...
    def start_read(self, mid: int) -> Emitted: ...
    def read_done(self, mid: int) -> Emitted: ...
    def send_fin(self, mid: int) -> Emitted: ...
    def fin(self, mid: int) -> Emitted: ...
    def hw_op(self) -> Emitted: ...
    def sw_complete(self) -> Emitted: ...
    def sw_sync(self) -> Emitted: ...
    def view(self) -> Any: ...


Factory = Callable[[Params], TagImpl]


def reference(cfg: Params) -> TagMatchEngine:
    return TagMatchEngine(cfg)


S = TagMatchSystem
SEND, DELIVER, POST, CANCEL, PROBE, READ, READ_DONE, FIN, FIN_ARRIVE, HW_OP, SW_COMPLETE, \
    SW_SYNC = (name_of(f) for f in (S.do_send, S.do_deliver, S.do_post_recv, S.do_cancel,
                                    S.do_probe, S.do_rndv_read, S.do_rndv_read_done,
                                    S.do_send_fin, S.do_fin_arrive, S.do_hw_op,
                                    S.do_sw_complete, S.do_sw_sync))
OPTIONAL = (CANCEL, PROBE)      # the calls a random run's swarm may leave out
VIEW_FIELDS = tuple(f.name for f in fields(EngineView))


FULL = Observes()


def observes(factory: Factory) -> Observes:
    """What implementations made by ``factory`` show: its ``observes`` attribute, else all."""
    found = getattr(factory, "observes", FULL)
    if not isinstance(found, Observes):
        raise ValueError(f"{factory!r}.observes is {found!r}, not an Observes")
    return found


class Declined(ValueError):
    """A configuration the implementation cannot express; the message says why."""


def _packet(system: TagMatchSystem, s: State, mid: int) -> Packet:
    m = s.msgs[mid]
    return Packet(mid, m.comm, m.src, m.tag, m.bytes, EAGER if system.eager(m) else RNDV)


def _wire_head(s: State, qp: int) -> int:
    return s.fabric.wire[qp][0].payload


def expected(system: TagMatchSystem, pre: State, name: str, args: tuple, post: State,
             obs: Any) -> Emitted:
    """What the endpoints emit in a spec step, read off the step's states and observation."""
    sends: tuple[Packet, ...] = ()
    reads: tuple[Read, ...] = ()
    fins: tuple[int, ...] = ()
    if name == SEND:
        mid = next(i for i, m in enumerate(post.msgs) if m is not None and pre.msgs[i] is None)
        sends = (_packet(system, post, mid),)
    elif name == READ:
        mid = args[0]
        rid = post.status.index(mid)
        reads = (Read(mid, rid, min(post.msgs[mid].bytes, post.recvs[rid].bytes)),)
    elif name == FIN:
        fins = (args[0],)
    step = obs if isinstance(obs, StepObs) else StepObs()
    old = len(pre.completion)
    # a receive completes when its code changes, or when a match (re)fills it: a revoked
    # eager receive matched again completes again, perhaps with the same code
    rematched = {rid for rid, _ in step.matches}
    completions = tuple((rid, code) for rid, code in enumerate(post.completion)
                        if code and (rid >= old or pre.completion[rid] != code
                                     or rid in rematched))
    released = tuple(mid for mid, r in enumerate(post.released) if r and not pre.released[mid])
    probe = (step.probe[1],) if step.probe is not None else ()
    return Emitted(sends, step.matches, step.revoked, step.cancelled, completions, reads, fins,
                   released, probe)


def spec_view(system: TagMatchSystem, s: State) -> EngineView:
    """The spec's state in the vocabulary of ``EngineView``."""
    e = s.engine
    if not system.offload:
        return EngineView(s.status, s.completion, s.stage, s.released, e.posted_ids(),
                          e.unexpected_ids(), (), (), (), (), (), (0, 0, 0, 0))

    def op(o: off.Op) -> tuple:
        return (o.kind, o.count, o.recv.id if o.kind == "add" else
                (o.rid if o.kind == "remove" else None))

    def cqe(c: off.Cqe) -> tuple:
        rid = c.recv.id if c.kind == "match" else (c.rid if c.kind == "removed" else None)
        return (c.kind, rid, c.msg.id if c.msg is not None else None, c.ok)

    return EngineView(s.status, s.completion, s.stage, s.released, e.pending_ids(),
                      e.unexpected_ids(), tuple(loc for _, loc in e.posted),
                      tuple(r.id for r in e.hw),
                      tuple((c.recv.id, c.msg.id, c.cancelling) for c in e.claims),
                      tuple(map(op, e.ops)), tuple(map(cqe, e.cq)),
                      (e.sw_count, e.sent_count, e.reported, e.synced))


# emissions compared as sets: one step may emit several in any order
UNORDERED = ("completions", "released")


def _norm(em: Emitted) -> Emitted:
    """Emissions compared as sets where one step may emit several in any order."""
    return Emitted(*(tuple(sorted(v, key=repr)) if f in UNORDERED else v
                     for f, v in zip(EMITTED_FIELDS, (getattr(em, f) for f in EMITTED_FIELDS),
                                     strict=True)))


# one spec action per implementation call: action -> (TagImpl method, how many of the
# step's arguments it takes, from the first)
_CALLS = {action: (method.__name__, n) for action, method, n in (
    (SEND, TagImpl.send, 4), (POST, TagImpl.post_recv, 4), (CANCEL, TagImpl.cancel, 1),
    (PROBE, TagImpl.probe, 3), (READ, TagImpl.start_read, 1), (READ_DONE, TagImpl.read_done, 1),
    (FIN, TagImpl.send_fin, 1), (HW_OP, TagImpl.hw_op, 0), (SW_COMPLETE, TagImpl.sw_complete, 0),
    (SW_SYNC, TagImpl.sw_sync, 0))}
# the receiver's own progress: steps an implementation takes when it is ready to, whatever the
# application does (an implementation with ``ready()`` says which it would take now)
OWN = (READ, READ_DONE, FIN, HW_OP, SW_COMPLETE, SW_SYNC)


def call_of(system: TagMatchSystem, pre: State, name: str, args: tuple
            ) -> tuple[str, tuple]:
    """Which call of the implementation the spec step ``name(args)`` from ``pre`` is: (the
    TagImpl method, its arguments). A delivery hands over the packet at the head of the
    sender's wire, a FIN's arrival the mid at the head of the wire back to the sender."""
    if name == DELIVER:
        packet = _packet(system, pre, _wire_head(pre, sender_qp(args[0])))
        return TagImpl.delivered.__name__, (packet,)
    if name == FIN_ARRIVE:
        return TagImpl.fin.__name__, (_wire_head(pre, fb.peer_of(sender_qp(args[0]))),)
    if name not in _CALLS:
        raise ValueError(f"no call of the implementation takes the spec's {name!r} step")
    method, n = _CALLS[name]
    return method, tuple(args[:n])


class TagmatchHarness(Harness):
    """Lockstep runs of the spec's tag-matching system with one implementation of its
    endpoints."""

    system: TagMatchSystem

    def __init__(self, system: TagMatchSystem, factory: Factory = reference):
        super().__init__(system, factory)
        self.observes = observes(factory)
        why = self.observes.declines(system.params)
        if why is not None:
            raise Declined(f"the implementation cannot express this configuration: {why}")

    def fresh(self) -> tuple[State, TagImpl]:
        return self.system.initial(), self.factory(self.system.params)

    def deliver(self, impl: TagImpl, pre: State, name: str, args: tuple) -> Emitted:
        """Hand one spec step to the implementation; what it emitted."""
        method, call_args = call_of(self.system, pre, name, args)
        return getattr(impl, method)(*call_args)

    def compare(self, want: Emitted, got: Emitted, impl: TagImpl, post: State
                ) -> tuple[str, Any, Any] | None:
        """The first observed emission or view field in which the implementation differs."""
        if not isinstance(got, Emitted):
            return "emitted", "an Emitted", got
        if want != got:
            want, got = _norm(want), _norm(got)
            for f in self.observes.emitted:
                if getattr(want, f) != getattr(got, f):
                    return f, getattr(want, f), getattr(got, f)
        if not self.observes.view:
            return None
        spec, view = spec_view(self.system, post), impl.view()
        if spec != view:
            for f in VIEW_FIELDS:
                if getattr(spec, f) != getattr(view, f, None):
                    return f"view {f}", getattr(spec, f), getattr(view, f, None)
        ready = getattr(impl, "ready", None)
        if ready is not None:
            want, have = self.own_steps(post), frozenset(ready())
            if want != have:
                return "own steps ready", sorted(want), sorted(have)
            return None
        return unoffered(self.system, post, self.reactions(view),
                         lambda r: self.taken(impl, r))

    def reactions(self, view: Any) -> Iterator[Reaction]:
        """The steps of its own progress an implementation without ``ready()`` would take
        now, read off its own view: the READ of each rendezvous message it matched
        (``stage`` NEED_READ), the completion of each READ it runs (READING, FIN_EARLY), the
        FIN of each READ done (READ_DONE), and with offload the NIC's oldest op (``ops``),
        software's handling of the NIC's oldest completion (``cq``) and its unexpected count
        sent to the NIC when the count it last sent is behind (``counts``)."""
        for mid, st in enumerate(view.stage):
            if st == stages.NEED_READ:
                yield Reaction(READ, (mid,), f"start the READ of rendezvous message {mid}")
            if st in (stages.READING, stages.FIN_EARLY):
                yield Reaction(READ_DONE, (mid,), f"complete the READ of message {mid}")
            if st == stages.READ_DONE:
                yield Reaction(FIN, (mid,), f"send the FIN of message {mid}")
        if view.ops:
            yield Reaction(HW_OP, (), f"have the NIC execute its oldest op {view.ops[0]}")
        if view.cq:
            yield Reaction(SW_COMPLETE, (), f"handle the NIC's oldest completion {view.cq[0]}")
        sw_count, sent_count = view.counts[:2]
        if sent_count < sw_count:
            yield Reaction(SW_SYNC, (), f"send the NIC its unexpected count {sw_count} "
                                        f"(last sent {sent_count})")

    @staticmethod
    def taken(impl: TagImpl, r: Reaction) -> str | None:
        """The reaction ``r`` tried on a copy of the implementation: what it did, in words, or
        None where it refused the step."""
        try:
            getattr(copy.deepcopy(impl), _CALLS[r.action][0])(*r.args)
        except Exception:   # the implementation does not take this step now
            return None
        return r.how

    def own_steps(self, s: State) -> frozenset[tuple[str, tuple]]:
        """The steps of the receiver's own progress the spec has enabled in ``s``, as the
        implementation calls they are: (TagImpl method, its arguments)."""
        return frozenset((_CALLS[a.name][0], tuple(args[:_CALLS[a.name][1]]))
                         for a in self.system.actions if a.name in OWN
                         for args in a.enabled(s))

    def check(self, impl: TagImpl, pre: State, name: str, args: tuple, post: State,
              obs: Any) -> tuple[str, Any, Any] | None:
        """One spec step handed to the implementation: the first difference, or None."""
        want = expected(self.system, pre, name, args, post, obs)
        try:
            got = self.deliver(impl, pre, name, args)
        except Exception as e:      # an implementation refusing the step is a mismatch
            return "the step", "taken", f"{type(e).__name__}: {e}"
        return self.compare(want, got, impl, post)

    def run(self, rng: random.Random, max_steps: int, swarm: Swarm | None = None) -> Run:
        """One random run of at most ``max_steps``: at each step an enabled action drawn
        uniformly, then its arguments uniformly (so an action with many argument tuples,
        such as a send, is not favoured), until only probes are left; never an action the
        ``swarm`` leaves out. The spec has no fault actions."""
        off = swarm.off if swarm is not None else frozenset()

        def choose(s: State, i: int) -> tuple[Action, tuple] | None:
            if i > max_steps:
                return None
            enabled = [(a, args) for a in self.system.actions
                       if a.name not in off and (args := list(a.enabled(s)))]
            if all(a.name == PROBE for a, _ in enabled):
                return None
            a, options = rng.choice(enabled)
            return a, rng.choice(options)

        return self._lockstep(choose)

    def reached(self, s: State) -> dict[str, int]:
        """How far a run got: the messages sent and the receives posted."""
        return {"messages_sent": sum(m is not None for m in s.msgs),
                "receives_posted": len(s.recvs)}


# ---------------------------------------------------------------------------- the suite
def _native() -> Factory:
    from verbspec.refimpl.bindings.native_tagmatch import module, native

    module()
    return native


def _variant_engine(name: str) -> Factory:
    from verbspec.refimpl.engines.tagmatch_variants import variant_engine

    return variant_engine(name)


def _ucx() -> Factory:
    from verbspec.refimpl.bindings.ucx_tagmatch import UcxFactory

    return UcxFactory()


def resolve(impl: str) -> Factory:
    """``refimpl``, ``native`` (the C engine, refimpl/bindings/native_tagmatch.py), ``ucx``
    (UCX's own tag matching, refimpl/bindings/ucx_tagmatch.py), ``variant:NAME``
    (refimpl/engines/tagmatch_variants.py) or ``MODULE:FACTORY``, a callable (parameters) ->
    implementation; ValueError naming what is wrong (for ``native`` and ``ucx``: that it is
    not built). See ``lockstep.resolve``."""
    return lockstep.resolve(impl, reference, _native, _variant_engine, {"ucx": _ucx})


def conform(system: TagMatchSystem, factory: Factory, impl: str, *, sequences: int,
            steps: int, seed: int = 0, shrink_seconds: float = SHRINK_SECONDS,
            progress: Callable[[str], None] | None = None,
            each: Callable[[Run], bool] | None = None, keep_going: bool = False
            ) -> ConformanceReport:
    """Random lockstep runs, generated by Hypothesis with a swarm of the optional calls,
    cancel and probe (see ``refimpl.random_runs``; ``seed`` seeds the generation), until
    ``sequences`` have run or one differs (with ``keep_going``: all of them); a mismatching
    run is reduced, for at most ``shrink_seconds``, and kept, ending at its first
    mismatching step. ``each``, where given, sees every run as it ends and ends the runs by
    returning False."""
    harness = TagmatchHarness(system, factory)
    return conform_runs(harness, impl, lambda rng, swarm: harness.run(rng, steps, swarm),
                        optional=OPTIONAL, profiles=1, sequences=sequences, seed=seed,
                        shrink_seconds=shrink_seconds, progress=progress, every=100,
                        each=each, keep_going=keep_going,
                        unobserved=harness.observes.unobserved)


# The every-edge configurations, cheapest first: each small enough to sweep whole (about a
# minute together on one core), together covering one and two senders, wildcard sources and
# tags, eager and rendezvous messages, truncation, cancel, probe, and the offload with a
# two-entry NIC list, its shadow, claims and sync. Parameters left out take their defaults
# (one tag, one communicator, cancel on).
EAGER_ONLY = {"max_bytes": 1}
BOTH = {"max_bytes": 2, "eager_limit": 1}          # eager 1 byte, rendezvous 2; truncation
SWEEP_CONFIGS: tuple[dict[str, int], ...] = (
    {"senders": 1, "messages": 2, "receives": 2, "capacity": 2, "probe": 0, **EAGER_ONLY},
    {"senders": 1, "messages": 2, "receives": 2, "capacity": 0, "probe": 1, **BOTH},
    {"senders": 2, "messages": 1, "receives": 2, "capacity": 2, "probe": 0, **EAGER_ONLY},
    {"senders": 2, "messages": 1, "receives": 1, "capacity": 1, "probe": 1, **BOTH},
    {"senders": 2, "messages": 1, "receives": 2, "capacity": 0, "probe": 0, **BOTH},
)
# every path up to a depth from the initial state, (parameters, depth): at the size asked of
# the suite (two senders of three messages each, three receives with wildcard sources and tags
# among their choices, two tags, eager and rendezvous messages, a two-entry NIC list, cancel)
# the paths branch some 20 ways a step, so that walk is short; two smaller ones go deep enough
# to take every interleaving of whole exchanges: one message through a one-entry NIC list,
# from its send to its FIN; two messages of one sender in software, through their
# rendezvous READs
PATH_DEPTH = 3
PATH_CONFIGS: tuple[tuple[dict[str, int], int], ...] = (
    ({"senders": 2, "messages": 3, "receives": 3, "tags": 2, "capacity": 2, "cancel": 1,
      "probe": 0, **BOTH}, PATH_DEPTH),
    ({"senders": 1, "messages": 1, "receives": 1, "capacity": 1, "cancel": 1, "probe": 0,
      **BOTH}, 12),
    ({"senders": 1, "messages": 2, "receives": 2, "capacity": 0, "cancel": 1, "probe": 0,
      **BOTH}, 9),
)


def conform_every_edge(factory: Factory, impl: str,
                       configs: Sequence[dict[str, int]] | None = None,
                       progress: Callable[[str], None] | None = None,
                       keep_going: bool = False, depth: int | None = None,
                       path_configs: Sequence[tuple[dict[str, int], int]] | None = None
                       ) -> ConformanceReport:
    """Every reachable edge of the sweep's configurations, each executed once in lockstep,
    then every path of the path configurations up to each one's depth, or ``depth`` where
    given (given ``configs`` and no ``path_configs``: none); stops at the first
    mismatch (with ``keep_going``: a configuration's sweep or walk stops there, and the next
    one runs). Configurations the implementation cannot express are left out, each named in
    the report's ``declined`` with why."""
    if path_configs is None:      # named sweep configurations alone walk no paths
        path_configs = PATH_CONFIGS if configs is None else ()
    configs = SWEEP_CONFIGS if configs is None else configs
    out = ConformanceReport(impl, "tagmatch", sweep=lockstep.new_sweep(),
                            unobserved=dict(observes(factory).unobserved))
    plan = [(values, 0) for values in configs]
    plan += [(values, depth or own) for values, own in path_configs]
    return lockstep.exhaustive(out, _plan(out, factory, plan), len(configs), progress,
                               keep_going)


def _plan(out: ConformanceReport, factory: Factory,
          plan: Sequence[tuple[dict[str, int], int]]) -> Iterator[Planned]:
    """The configurations of ``conform_every_edge`` as their turns come, each (parameters,
    the depth of its walk, 0 for every edge): one the implementation cannot express is named
    in the report's ``declined`` and left out; the report's ``actions_total`` is the most
    actions of one configuration taken so far."""
    seen_by = observes(factory)
    for values, depth in plan:
        system = build(values)
        why = seen_by.declines(system.params)
        if why is not None:
            out.declined[",".join(f"{k}={v}" for k, v in values.items())] = why
            continue
        out.actions_total = max(out.actions_total, len(system.actions))
        yield TagmatchHarness(system, factory), depth, None
