"""The closed tag-matching system: senders, one receiver, and an RC fabric between them.

Each sender posts its messages in order, each with an envelope (communicator, tag) and a length
chosen freely; the RC wire from a sender delivers in order, never drops, and interleaves freely
with the other senders' wires. The receiver posts receives with any envelope (a source or
ANY_SOURCE, a tag or ANY_TAG) and buffer length, cancels and probes. Messages up to
``eager_limit`` bytes are eager (payload with the header; the RC ACK completes the send once the
payload reached the receiver). Longer ones are rendezvous: the header is matched, the receiver
RDMA-READs the payload into the matched buffer and then sends FIN; the sender's buffer is free
only after FIN. With ``capacity`` > 0 the receiver's matching runs through the hardware offload
of :mod:`verbspec.spec.tagmatch.offload`, and the software engine of
:mod:`verbspec.spec.tagmatch.lists` runs alongside as a ghost, stepped at each linearization
point, so ``offload_refines_software`` can compare the two after every step.

Ids in the system are integers: message ``mid = sender * messages + k`` for a sender's k-th
message (so a sender's order is the id order), receive ``rid`` = its posting index.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any

from verbspec.spec.lts import Action
from verbspec.spec.params import ParamSpec, Variant, check_values, check_variants
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch import offload as off
from verbspec.spec.tagmatch.invariants import INVARIANTS, invariants
from verbspec.spec.tagmatch.state import (  # noqa: F401  (re-exported for users)
    CANCELLED,
    FIN_EARLY,
    FIN_SENT,
    IDLE,
    NEED_READ,
    OK,
    PENDING,
    READ_DONE,
    READING,
    TRUNCATED,
    Params,
    State,
    StepObs,
)

PROTOCOL = "tagmatch"

PARAMS = (
    ParamSpec("senders", int, 1, "sending ranks", lo=1, hi=4),
    ParamSpec("messages", int, 2, "messages each sender sends", lo=0, hi=4),
    ParamSpec("receives", int, 2, "receives the receiver posts", lo=0, hi=4),
    ParamSpec("tags", int, 1, "tag values 0..tags-1 (receives may also use ANY_TAG)", lo=1, hi=4),
    ParamSpec("comms", int, 1, "communicators 0..comms-1", lo=1, hi=3),
    ParamSpec("max_bytes", int, 2, "message and buffer lengths range over 1..max_bytes",
              lo=1, hi=4),
    ParamSpec("eager_limit", int, 1, "longest eager message; longer ones use rendezvous",
              lo=0, hi=4),
    ParamSpec("capacity", int, 1, "hardware tag-list capacity (0: no offload)", lo=0, hi=4),
    ParamSpec("cancel", int, 1, "1: the receiver may cancel receives", lo=0, hi=1),
    ParamSpec("probe", int, 1, "1: the receiver may probe", lo=0, hi=1),
)

VARIANTS = (
    Variant("offload-no-sync",
            "hardware keeps matching after it reports an unexpected message, without waiting "
            "for an op carrying software's unexpected count",
            "mpi_order: m1 is reported unexpected, b1 is handed to hardware, m2 matches b1 in "
            "hardware, and m1 (earlier, also matching b1) is left unexpected"),
    Variant("wildcard-last",
            "an arriving message is checked against fully specified receives before wildcard ones",
            "mpi_order: a message takes a later specific receive while an earlier matching "
            "wildcard receive is still posted"),
    Variant("unexpected-newest-first",
            "a newly posted receive searches the unexpected list from its newest end",
            "mpi_order: a receive takes a later message while an earlier matching one waits"),
    Variant("no-shadow-claim",
            "software matches a message hardware reported unexpected against the receives it "
            "keeps itself only, not against its shadow of the hardware list",
            "offload_refines_software: a message reported unexpected while its receive was "
            "being handed to hardware waits forever beside that receive (no_lost_message)"),
    Variant("offload-behind-software",
            "a receive is handed to hardware even when an earlier receive is kept in software",
            "shadow_consistent: hardware no longer holds a head of the posted list, so a "
            "hardware match can overtake an earlier software receive (mpi_order)"),
    Variant("fin-before-read",
            "the receiver sends FIN when it starts the RDMA READ instead of when it completes",
            "rndv_buffer_safety: the sender reuses its buffer while the READ still reads it"),
    Variant("eager-complete-on-post",
            "the eager send completes when posted, before the payload left the sender",
            "eager_buffer_safety: the buffer is reusable while its payload is still on the wire"),
    Variant("silent-truncation",
            "a message longer than its receive buffer completes the receive without an error",
            "truncation_reported: a truncated receive reports success"),
)


# bmc's default depth: past the defaults' fixpoint (depth 25), so bmc exhausts them
BMC_DEPTH = 40


def _set(t: tuple, i: int, v: Any) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


class TagMatchSystem:
    protocol = PROTOCOL

    def __init__(self, params: Params, variants: tuple[str, ...] = ()):
        self.params = params
        self.variants = variants
        self.rules = tm.Rules(wildcard_last="wildcard-last" in variants,
                              newest_first="unexpected-newest-first" in variants)
        self.handshake = "offload-no-sync" not in variants
        self.shadow_claims = "no-shadow-claim" not in variants
        self.head_only = "offload-behind-software" not in variants
        self.fin_early = "fin-before-read" in variants
        self.eager_on_post = "eager-complete-on-post" in variants
        self.silent_trunc = "silent-truncation" in variants
        self.offload = params.capacity > 0
        self.actions = self._actions()
        self.invariants = invariants(self)

    def param_dict(self) -> dict[str, Any]:
        return asdict(self.params)

    def initial(self) -> State:
        p = self.params
        n = p.senders * p.messages
        engine = off.Offload(p.capacity) if self.offload else tm.Engine()
        return State((None,) * n, ((),) * p.senders, ((),) * p.senders, (False,) * n,
                     (IDLE,) * n, (), (), (), (), engine, tm.Engine() if self.offload else None)

    def done(self, s: State) -> bool:
        """Everything sent and posted, nothing in flight, every matched rendezvous finished."""
        p = self.params
        return (all(m is not None for m in s.msgs) and len(s.recvs) == p.receives
                and not any(s.wire) and not any(s.fins)
                and (not self.offload or s.engine.quiet())
                and all(st in (IDLE, FIN_SENT) for st in s.stage))

    # ---- helpers -------------------------------------------------------------------------

    def eager(self, m: tm.Msg) -> bool:
        return tm.protocol_for(m.bytes, self.params.eager_limit) == "eager"

    def _apply(self, s: State, outcome: off.Outcome, lin: off.Lin, arrived: int | None = None
               ) -> tuple[State, StepObs]:
        """Record an engine step's outcome in the receiver's state, and step the ghost."""
        status, completion, stage = s.status, s.completion, s.stage
        for mt in outcome.revoked:
            status = _set(status, mt.recv.id, PENDING)
            completion = _set(completion, mt.recv.id, 0)
            stage = _set(stage, mt.msg.id, IDLE)
        for mt in outcome.matches:
            status = _set(status, mt.recv.id, mt.msg.id)
            if self.eager(mt.msg):
                completion = _set(completion, mt.recv.id, self._code(mt))
            else:
                stage = _set(stage, mt.msg.id, NEED_READ)
        for rid in outcome.cancelled:
            status = _set(status, rid, CANCELLED)
        ghost, gobs = s.ghost, None
        if ghost is not None and lin is not None:
            kind, arg = lin
            gm: tuple[tuple[int, int], ...] = ()
            gc: tuple[int, ...] = ()
            if kind == "post":
                ghost, mt = tm.post_recv(ghost, arg, self.rules)
            elif kind == "arrive":
                ghost, mt = tm.arrive(ghost, arg, self.rules)
            else:
                ghost, ok = tm.cancel(ghost, arg)
                mt = None
                gc = (arg,) if ok else ()
            if mt is not None:
                gm = ((mt.recv.id, mt.msg.id),)
            gobs = (gm, gc)
        arr = s.arrived if arrived is None else s.arrived + (arrived,)
        s = replace(s, status=status, completion=completion, stage=stage, ghost=ghost,
                    arrived=arr)
        obs = StepObs(tuple((mt.recv.id, mt.msg.id) for mt in outcome.matches),
                      tuple((mt.recv.id, mt.msg.id) for mt in outcome.revoked),
                      outcome.cancelled, gobs)
        return s, obs

    def _code(self, mt: tm.Match) -> int:
        return TRUNCATED if mt.truncated and not self.silent_trunc else OK

    # ---- actions ---------------------------------------------------------------------------

    def _actions(self) -> tuple[Action, ...]:
        p = self.params
        sizes = range(1, p.max_bytes + 1)
        srcs = (*range(p.senders), tm.ANY)
        tags = (*range(p.tags), tm.ANY)

        def send_en(s: State) -> Iterable[tuple]:
            for snd in range(p.senders):
                base = snd * p.messages
                if any(s.msgs[base + k] is None for k in range(p.messages)):
                    yield from ((snd, c, t, b) for c in range(p.comms)
                                for t in range(p.tags) for b in sizes)

        def send(s: State, snd: int, comm: int, tag: int, nbytes: int):
            base = snd * p.messages
            k = next(k for k in range(p.messages) if s.msgs[base + k] is None)
            m = tm.Msg(base + k, comm, snd, tag, nbytes)
            released = s.released
            if self.eager_on_post and self.eager(m):
                released = _set(released, m.id, True)
            return replace(s, msgs=_set(s.msgs, m.id, m), released=released,
                           wire=_set(s.wire, snd, s.wire[snd] + (m.id,))), None

        def deliver_en(s: State) -> Iterable[tuple]:
            return ((snd,) for snd in range(p.senders) if s.wire[snd])

        def deliver(s: State, snd: int):
            mid, wire = s.wire[snd][0], _set(s.wire, snd, s.wire[snd][1:])
            m = s.msgs[mid]
            released = s.released
            if self.eager(m):
                # the RC ACK: the payload is at the receiver, the sender may reuse its buffer
                released = _set(released, mid, True)
            s = replace(s, wire=wire, released=released)
            if self.offload:
                return replace(s, engine=off.hw_arrive(s.engine, m, handshake=self.handshake)
                               ), StepObs()
            engine, mt = tm.arrive(s.engine, m, self.rules)
            outcome = off.Outcome(matches=(mt,) if mt else ())
            return self._apply(replace(s, engine=engine), outcome, None, arrived=mid)

        def post_en(s: State) -> Iterable[tuple]:
            if len(s.recvs) < p.receives:
                yield from itertools.product(range(p.comms), srcs, tags, sizes)

        def post_recv(s: State, comm: int, src: int, tag: int, nbytes: int):
            r = tm.Recv(len(s.recvs), comm, src, tag, nbytes)
            s = replace(s, recvs=s.recvs + (r,), status=s.status + (PENDING,),
                        completion=s.completion + (0,))
            if self.offload:
                engine, outcome, lin = off.sw_post(s.engine, r, self.rules,
                                                   head_only=self.head_only)
            else:
                engine, mt = tm.post_recv(s.engine, r, self.rules)
                outcome, lin = off.Outcome(matches=(mt,) if mt else ()), None
            return self._apply(replace(s, engine=engine), outcome, lin)

        def cancel_en(s: State) -> Iterable[tuple]:
            if not p.cancel:
                return
            cancelling = ({r.id for r, loc in s.engine.posted if loc == off.HW_CANCEL}
                          if self.offload else set())
            for rid, st in enumerate(s.status):
                if st == PENDING and rid not in cancelling:
                    yield (rid,)

        def cancel(s: State, rid: int):
            if self.offload:
                engine, outcome, lin = off.sw_cancel(s.engine, rid)
            else:
                engine, ok = tm.cancel(s.engine, rid)
                outcome, lin = off.Outcome(cancelled=(rid,) if ok else ()), None
            return self._apply(replace(s, engine=engine), outcome, lin)

        def probe_en(s: State) -> Iterable[tuple]:
            # a probe first drives progress: it sees every completion hardware has queued
            if p.probe and (not self.offload or not s.engine.cq):
                yield from itertools.product(range(p.comms), srcs, tags)

        def probe(s: State, comm: int, src: int, tag: int):
            msgs = (tuple(m for _, m in s.engine.unexpected) if self.offload
                    else s.engine.unexpected)
            m = tm.probe(tm.Engine((), msgs), comm, src, tag, self.rules)
            return s, StepObs(probe=((comm, src, tag), None if m is None else m.id))

        def hw_op_en(s: State) -> Iterable[tuple]:
            return ((),) if s.engine.ops else ()

        def hw_op(s: State):
            return replace(s, engine=off.hw_op(s.engine)), StepObs()

        def sw_complete_en(s: State) -> Iterable[tuple]:
            return ((),) if s.engine.cq else ()

        def sw_complete(s: State):
            c = s.engine.cq[0]
            engine, outcome, lin = off.sw_complete(s.engine, self.rules,
                                                   shadow_claims=self.shadow_claims)
            arrived = c.msg.id if c.kind in ("match", "unexpected") else None
            return self._apply(replace(s, engine=engine), outcome, lin, arrived=arrived)

        def sw_sync_en(s: State) -> Iterable[tuple]:
            e = s.engine
            return ((),) if self.handshake and e.sent_count < e.sw_count else ()

        def sw_sync(s: State):
            return replace(s, engine=off.sw_sync(s.engine)), StepObs()

        def read_en(s: State) -> Iterable[tuple]:
            return ((mid,) for mid, st in enumerate(s.stage) if st == NEED_READ)

        def rndv_read(s: State, mid: int):
            return replace(s, stage=_set(s.stage, mid, READING)), None

        def read_done_en(s: State) -> Iterable[tuple]:
            return ((mid,) for mid, st in enumerate(s.stage) if st in (READING, FIN_EARLY))

        def rndv_read_done(s: State, mid: int):
            rid = s.status.index(mid)
            mt = tm.Match(s.recvs[rid], s.msgs[mid])
            nxt = FIN_SENT if s.stage[mid] == FIN_EARLY else READ_DONE
            return replace(s, stage=_set(s.stage, mid, nxt),
                           completion=_set(s.completion, rid, self._code(mt))), None

        def fin_en(s: State) -> Iterable[tuple]:
            ok = (READ_DONE, READING) if self.fin_early else (READ_DONE,)
            return ((mid,) for mid, st in enumerate(s.stage) if st in ok)

        def send_fin(s: State, mid: int):
            snd = s.msgs[mid].src
            nxt = FIN_SENT if s.stage[mid] == READ_DONE else FIN_EARLY
            return replace(s, stage=_set(s.stage, mid, nxt),
                           fins=_set(s.fins, snd, s.fins[snd] + (mid,))), None

        def fin_arrive_en(s: State) -> Iterable[tuple]:
            return ((snd,) for snd in range(p.senders) if s.fins[snd])

        def fin_arrive(s: State, snd: int):
            mid = s.fins[snd][0]
            return replace(s, fins=_set(s.fins, snd, s.fins[snd][1:]),
                           released=_set(s.released, mid, True)), None

        acts = [
            Action("send", "a sender posts its next message (eager payload or rendezvous "
                   "header) on its RC wire", ("sender", "comm", "tag", "nbytes"), send_en, send),
            Action("deliver", "the oldest message on a sender's wire reaches the receiver's NIC",
                   ("sender",), deliver_en, deliver),
            Action("post_recv", "the receiver posts a receive", ("comm", "src", "tag", "nbytes"),
                   post_en, post_recv),
            Action("cancel", "the receiver cancels a pending receive", ("rid",),
                   cancel_en, cancel),
            Action("probe", "the receiver probes for a message without receiving it",
                   ("comm", "src", "tag"), probe_en, probe),
            Action("rndv_read", "the receiver starts the RDMA READ of a matched rendezvous "
                   "message into the receive buffer", ("mid",), read_en, rndv_read),
            Action("rndv_read_done", "the READ completes: the receive completes",
                   ("mid",), read_done_en, rndv_read_done),
            Action("send_fin", "the receiver sends FIN to the sender", ("mid",), fin_en,
                   send_fin),
            Action("fin_arrive", "a FIN reaches its sender: the send completes and its buffer "
                   "is free", ("sender",), fin_arrive_en, fin_arrive),
        ]
        if self.offload:
            acts += [
                Action("hw_op", "hardware executes the oldest add/remove/sync op", (),
                       hw_op_en, hw_op),
                Action("sw_complete", "software handles the oldest hardware completion", (),
                       sw_complete_en, sw_complete),
                Action("sw_sync", "software sends its unexpected count to hardware", (),
                       sw_sync_en, sw_sync),
            ]
        return tuple(acts)


def build(values: Mapping[str, Any] | None = None, variants: Iterable[str] = ()
          ) -> TagMatchSystem:
    vals = check_values(PARAMS, values or {})
    return TagMatchSystem(Params(**vals), check_variants(VARIANTS, variants))


def prove(values: Mapping[str, Any] | None = None, variants: Iterable[str] = (), *,
          progress: Any = None, max_states: int = 3_000_000, trace_dir: Any = None) -> list:
    """Explicit-state proof: breadth-first search to a fixpoint over every reachable state of
    this instance. When the reachable set is exhausted without a violation, every invariant is
    proved for this instance at every depth (not for other parameter values). A violation
    makes that invariant "violated" (its trace written to ``trace_dir``, if given) and leaves
    the rest "inconclusive"; a state budget cut leaves all "inconclusive"."""
    from verbspec.proofs.report import Result, trace_name
    from verbspec.proofs.search import bounded_search

    system = build(values, variants)

    def tick(level: int, states: int) -> None:
        if progress:
            progress(f"prove: depth {level}, {states} states")

    res = bounded_search(system, depth=1 << 30, max_states=max_states,
                         variants=system.variants, progress=tick)
    inst = ", ".join(f"{k}={v}" for k, v in system.param_dict().items())
    path = None
    if res.violation is not None and trace_dir is not None:
        from verbspec.spec.itf import write_trace

        path = str(write_trace(res.violation.trace, trace_dir / trace_name(
            PROTOCOL, "prove", res.violation.invariant, system.variants)))
    out = []
    for name in INVARIANTS:
        if res.violation is not None:
            bad = res.violation.invariant == name
            verdict = "violated" if bad else "inconclusive"
            bound = (f"shortest trace: {res.depth} steps" if bad
                     else f"search stopped at depth {res.depth}")
            detail = (res.violation.message if bad
                      else f"search stopped at a violation of {res.violation.invariant}")
        elif res.exhausted:
            verdict = "proved"
            bound = (f"all {res.states} reachable states (fixpoint at depth {res.depth}) "
                     f"of the instance {inst}")
            detail = "explicit-state fixpoint: every depth, this instance only"
        else:
            verdict = "inconclusive"
            bound = f"depth {res.depth}, {res.states} states (state budget reached)"
            detail = "state budget reached before the fixpoint"
        trace = path if res.violation is not None and res.violation.invariant == name else None
        out.append(Result(name, PROTOCOL, "prove", verdict, bound, res.seconds, trace, detail))
    if not (system.rules.wildcard_last or system.rules.newest_first):
        out.append(_prove_engine_progress())
    return out


def _prove_engine_progress():
    """The software engine's half of no_lost_message, by induction in z3, for every list
    length and envelope value (the encoding is of MPI's order, so not under the order
    variants)."""
    from verbspec.proofs.report import Result
    from verbspec.proofs.tagmatch.lemma import prove_no_matching_pair

    obligations = prove_no_matching_pair()
    ok = all(o.verdict == "proved" for o in obligations)
    failed = [f"{o.name}: {o.verdict}" for o in obligations if o.verdict != "proved"]
    return Result("no_lost_message", PROTOCOL, "prove", "proved" if ok else "inconclusive",
                  "unbounded: software engine, any list lengths and envelope values",
                  sum(o.seconds for o in obligations), None,
                  "induction (base + consecution of post_recv, arrive, cancel): no posted "
                  "receive matches an unexpected message" if ok else "; ".join(failed))
