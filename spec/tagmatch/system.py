"""The closed tag-matching system: senders, one receiver, and an RC fabric between them.

Each sender posts its messages in order, each with an envelope (communicator, tag) and a length
chosen freely, on its own RC connection to the receiver (:mod:`verbspec.spec.fabric`): a wire
that delivers in order, never drops, and interleaves freely with the other senders' wires. Each
end of a connection keeps one bounce buffer posted for incoming headers, payloads and FINs; its
progress engine takes each completion and reposts the buffer within the step that delivers the
message, so RC never answers RNR here. The receiver posts receives with any envelope (a source or
ANY_SOURCE, a tag or ANY_TAG) and buffer length, cancels and probes. Messages up to
``eager_limit`` bytes are eager (payload with the header; the RC ACK completes the send once the
payload reached the receiver). Longer ones are rendezvous: the header is matched, the receiver
RDMA-READs the payload into the matched buffer and then sends FIN back on the same connection;
the sender's buffer is free only after FIN. The READ is modelled by the message's rendezvous
stage (:data:`NEED_READ` to :data:`READ_DONE`), not as wire messages; a FIN that overtakes it is
the ``fin-before-read`` variant. With ``capacity`` > 0 the receiver's matching runs through
the hardware offload of :mod:`verbspec.spec.tagmatch.offload`, and the software engine of
:mod:`verbspec.spec.tagmatch.lists` runs alongside as a ghost, stepped at each linearization
point, so ``offload_refines_software`` can compare the two after every step.

Ids in the system are integers: message ``mid = sender * messages + k`` for a sender's k-th
message (so a sender's order is the id order), receive ``rid`` = its posting index.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from verbspec.spec import fabric as fab
from verbspec.spec.actions import action, bind
from verbspec.spec.params import ParamSpec, Profile, check_values, check_variants
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
    sender_qp,
)
from verbspec.spec.tagmatch.variants import (
    EAGER_COMPLETE_ON_POST,
    FIN_BEFORE_READ,
    NO_SHADOW_CLAIM,
    OFFLOAD_BEHIND_SOFTWARE,
    OFFLOAD_NO_SYNC,
    SILENT_TRUNCATION,
    UNEXPECTED_NEWEST_FIRST,
    VARIANTS,
    WILDCARD_LAST,
)
from verbspec.spec.values import evolve, set_item

PROTOCOL = "tagmatch"
PROFILES: tuple[Profile, ...] = ()     # no implementation of tag matching is profiled yet

# The fabric's CQs: a step polls each completion it causes, so two never wait at once.
CQ_DEPTH = 2
BOUNCE = "bounce"     # the registered region of each connection end's posted receive buffer
SEND_BUF = "send"     # a sender's message buffers, one slot per message


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



class TagMatchSystem:
    protocol = PROTOCOL

    def __init__(self, params: Params, variants: tuple[str, ...] = ()):
        self.params = params
        self.variants = variants
        self.rules = tm.Rules(wildcard_last=WILDCARD_LAST.on(variants),
                              newest_first=UNEXPECTED_NEWEST_FIRST.on(variants))
        self.handshake = not OFFLOAD_NO_SYNC.on(variants)
        self.shadow_claims = not NO_SHADOW_CLAIM.on(variants)
        self.head_only = not OFFLOAD_BEHIND_SOFTWARE.on(variants)
        self.fin_early = FIN_BEFORE_READ.on(variants)
        self.eager_on_post = EAGER_COMPLETE_ON_POST.on(variants)
        self.silent_trunc = SILENT_TRUNCATION.on(variants)
        self.offload = params.capacity > 0
        self.actions = bind(self)
        self.invariants = invariants(self)

    def param_dict(self) -> dict[str, Any]:
        return asdict(self.params)

    def initial(self) -> State:
        p = self.params
        n = p.senders * p.messages
        engine = off.Offload(p.capacity) if self.offload else tm.Engine()
        net = fab.new_fabric("rc", unsignaled_completions=False, connections=p.senders)
        for qp in range(len(net.qps)):
            net = fab.post_recv(net, qp, (self._bounce(),))
        return State((None,) * n, net, (False,) * n, (IDLE,) * n, (), (), (), (), engine,
                     tm.Engine() if self.offload else None)

    def done(self, s: State) -> bool:
        """Everything sent and posted, nothing in flight, every matched rendezvous finished."""
        p = self.params
        return (all(m is not None for m in s.msgs) and len(s.recvs) == p.receives
                and not any(s.fabric.wire)
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
            status = set_item(status, mt.recv.id, PENDING)
            completion = set_item(completion, mt.recv.id, 0)
            stage = set_item(stage, mt.msg.id, IDLE)
        for mt in outcome.matches:
            status = set_item(status, mt.recv.id, mt.msg.id)
            if self.eager(mt.msg):
                completion = set_item(completion, mt.recv.id, self._code(mt))
            else:
                stage = set_item(stage, mt.msg.id, NEED_READ)
        for rid in outcome.cancelled:
            status = set_item(status, rid, CANCELLED)
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
        s = evolve(s, status=status, completion=completion, stage=stage, ghost=ghost,
                    arrived=arr)
        obs = StepObs(tuple((mt.recv.id, mt.msg.id) for mt in outcome.matches),
                      tuple((mt.recv.id, mt.msg.id) for mt in outcome.revoked),
                      outcome.cancelled, gobs)
        return s, obs

    def _bounce(self) -> fab.RecvWR:
        """A connection end's receive buffer: room for an eager payload, a header or a FIN."""
        return fab.RecvWR(0, BOUNCE, 0, 0, self.params.eager_limit, None)

    def _transmit(self, s: State, qp: int, mid: int, nbytes: int, signaled: bool) -> State:
        """Post one SEND carrying message ``mid``'s bytes (or its header, or its FIN) on
        ``qp`` and let the NIC put it on the wire."""
        net = fab.post_send(s.fabric, qp, (fab.SendWR(mid, SEND_BUF, mid, 0, nbytes, signaled,
                                                       mid),))
        return evolve(s, fabric=fab.transmit(net, qp, CQ_DEPTH))

    def _take(self, s: State, src: int) -> tuple[State, int, bool]:
        """The oldest message on QP ``src``'s wire lands in the peer's bounce buffer; both ends
        poll what that completed and the receiving end reposts its buffer. Returns the mid the
        message carried and whether the sender saw its SEND complete (RC's acknowledgement)."""
        net, got = fab.deliver(s.fabric, src, CQ_DEPTH, receiver_alive=True)
        if got.outcome != "landed":
            raise AssertionError(f"spec bug: RC message {got.msg} was not delivered "
                                 f"({got.outcome})")
        dst = fab.peer_of(src)
        _, net = fab.poll(net, dst, CQ_DEPTH)
        acked, net = fab.poll(net, src, CQ_DEPTH)
        net = fab.post_recv(net, dst, (self._bounce(),))
        return evolve(s, fabric=net), got.msg.payload, any(c.opcode == "send" for c in acked)

    def _code(self, mt: tm.Match) -> int:
        return TRUNCATED if mt.truncated and not self.silent_trunc else OK

    # ---- actions ---------------------------------------------------------------------------

    @property
    def _sizes(self) -> range:
        return range(1, self.params.max_bytes + 1)

    def en_send(self, s: State) -> Iterable[tuple]:
        p = self.params
        for snd in range(p.senders):
            base = snd * p.messages
            if any(s.msgs[base + k] is None for k in range(p.messages)):
                yield from ((snd, c, t, b) for c in range(p.comms)
                            for t in range(p.tags) for b in self._sizes)

    @action("sender", "comm", "tag", "nbytes", guard=en_send)
    def do_send(self, s: State, snd: int, comm: int, tag: int, nbytes: int):
        """a sender posts its next message (eager payload or rendezvous header) on its RC wire"""
        p = self.params
        base = snd * p.messages
        k = next(k for k in range(p.messages) if s.msgs[base + k] is None)
        m = tm.Msg(base + k, comm, snd, tag, nbytes)
        released = s.released
        if self.eager_on_post and self.eager(m):
            released = set_item(released, m.id, True)
        s = evolve(s, msgs=set_item(s.msgs, m.id, m), released=released)
        eager = self.eager(m)
        # an eager SEND carries the payload and is signaled: its completion frees the buffer;
        # a rendezvous header carries no payload and its buffer waits for FIN
        return self._transmit(s, sender_qp(snd), m.id, nbytes if eager else 0, eager), None

    def en_deliver(self, s: State) -> Iterable[tuple]:
        return ((snd,) for snd in range(self.params.senders) if s.fabric.wire[sender_qp(snd)])

    @action("sender", guard=en_deliver)
    def do_deliver(self, s: State, snd: int):
        """the oldest message on a sender's wire reaches the receiver's NIC"""
        s, mid, acked = self._take(s, sender_qp(snd))
        m = s.msgs[mid]
        if acked:
            # the RC ACK: the payload is at the receiver, the sender may reuse its buffer
            s = evolve(s, released=set_item(s.released, mid, True))
        if self.offload:
            return evolve(s, engine=off.hw_arrive(s.engine, m, handshake=self.handshake)
                           ), StepObs()
        engine, mt = tm.arrive(s.engine, m, self.rules)
        outcome = off.Outcome(matches=(mt,) if mt else ())
        return self._apply(evolve(s, engine=engine), outcome, None, arrived=mid)

    def en_post_recv(self, s: State) -> Iterable[tuple]:
        p = self.params
        if len(s.recvs) < p.receives:
            yield from itertools.product(range(p.comms), (*range(p.senders), tm.ANY),
                                         (*range(p.tags), tm.ANY), self._sizes)

    @action("comm", "src", "tag", "nbytes", guard=en_post_recv)
    def do_post_recv(self, s: State, comm: int, src: int, tag: int, nbytes: int):
        """the receiver posts a receive"""
        r = tm.Recv(len(s.recvs), comm, src, tag, nbytes)
        s = evolve(s, recvs=s.recvs + (r,), status=s.status + (PENDING,),
                    completion=s.completion + (0,))
        if self.offload:
            engine, outcome, lin = off.sw_post(s.engine, r, self.rules,
                                               head_only=self.head_only)
        else:
            engine, mt = tm.post_recv(s.engine, r, self.rules)
            outcome, lin = off.Outcome(matches=(mt,) if mt else ()), None
        return self._apply(evolve(s, engine=engine), outcome, lin)

    def en_cancel(self, s: State) -> Iterable[tuple]:
        if not self.params.cancel:
            return
        cancelling = ({r.id for r, loc in s.engine.posted if loc == off.HW_CANCEL}
                      if self.offload else set())
        for rid, st in enumerate(s.status):
            if st == PENDING and rid not in cancelling:
                yield (rid,)

    @action("rid", guard=en_cancel)
    def do_cancel(self, s: State, rid: int):
        """the receiver cancels a pending receive"""
        if self.offload:
            engine, outcome, lin = off.sw_cancel(s.engine, rid)
        else:
            engine, ok = tm.cancel(s.engine, rid)
            outcome, lin = off.Outcome(cancelled=(rid,) if ok else ()), None
        return self._apply(evolve(s, engine=engine), outcome, lin)

    def en_probe(self, s: State) -> Iterable[tuple]:
        # a probe first drives progress: it sees every completion hardware has queued
        p = self.params
        if p.probe and (not self.offload or not s.engine.cq):
            yield from itertools.product(range(p.comms), (*range(p.senders), tm.ANY),
                                         (*range(p.tags), tm.ANY))

    @action("comm", "src", "tag", guard=en_probe)
    def do_probe(self, s: State, comm: int, src: int, tag: int):
        """the receiver probes for a message without receiving it"""
        msgs = (tuple(m for _, m in s.engine.unexpected) if self.offload
                else s.engine.unexpected)
        m = tm.probe(tm.Engine((), msgs), comm, src, tag, self.rules)
        return s, StepObs(probe=((comm, src, tag), None if m is None else m.id))

    def en_rndv_read(self, s: State) -> Iterable[tuple]:
        return ((mid,) for mid, st in enumerate(s.stage) if st == NEED_READ)

    @action("mid", guard=en_rndv_read)
    def do_rndv_read(self, s: State, mid: int):
        """the receiver starts the RDMA READ of a matched rendezvous message into the receive
        buffer"""
        return evolve(s, stage=set_item(s.stage, mid, READING)), None

    def en_rndv_read_done(self, s: State) -> Iterable[tuple]:
        return ((mid,) for mid, st in enumerate(s.stage) if st in (READING, FIN_EARLY))

    @action("mid", guard=en_rndv_read_done)
    def do_rndv_read_done(self, s: State, mid: int):
        """the READ completes: the receive completes"""
        rid = s.status.index(mid)
        mt = tm.Match(s.recvs[rid], s.msgs[mid])
        nxt = FIN_SENT if s.stage[mid] == FIN_EARLY else READ_DONE
        return evolve(s, stage=set_item(s.stage, mid, nxt),
                       completion=set_item(s.completion, rid, self._code(mt))), None

    def en_send_fin(self, s: State) -> Iterable[tuple]:
        ok = (READ_DONE, READING) if self.fin_early else (READ_DONE,)
        return ((mid,) for mid, st in enumerate(s.stage) if st in ok)

    @action("mid", guard=en_send_fin)
    def do_send_fin(self, s: State, mid: int):
        """the receiver sends FIN to the sender"""
        snd = s.msgs[mid].src
        nxt = FIN_SENT if s.stage[mid] == READ_DONE else FIN_EARLY
        s = evolve(s, stage=set_item(s.stage, mid, nxt))
        return self._transmit(s, fab.peer_of(sender_qp(snd)), mid, 0, False), None

    def en_fin_arrive(self, s: State) -> Iterable[tuple]:
        return ((snd,) for snd in range(self.params.senders)
                if s.fabric.wire[fab.peer_of(sender_qp(snd))])

    @action("sender", guard=en_fin_arrive)
    def do_fin_arrive(self, s: State, snd: int):
        """a FIN reaches its sender: the send completes and its buffer is free"""
        s, mid, _ = self._take(s, fab.peer_of(sender_qp(snd)))
        return evolve(s, released=set_item(s.released, mid, True)), None

    # ---- the offload's own steps (only with capacity > 0) -----------------------------------

    def _offloaded(self) -> bool:
        return self.offload

    def en_hw_op(self, s: State) -> Iterable[tuple]:
        return ((),) if s.engine.ops else ()

    @action(guard=en_hw_op, present=_offloaded)
    def do_hw_op(self, s: State):
        """hardware executes the oldest add/remove/sync op"""
        return evolve(s, engine=off.hw_op(s.engine)), StepObs()

    def en_sw_complete(self, s: State) -> Iterable[tuple]:
        return ((),) if s.engine.cq else ()

    @action(guard=en_sw_complete, present=_offloaded)
    def do_sw_complete(self, s: State):
        """software handles the oldest hardware completion"""
        c = s.engine.cq[0]
        engine, outcome, lin = off.sw_complete(s.engine, self.rules,
                                               shadow_claims=self.shadow_claims)
        arrived = c.msg.id if c.kind in ("match", "unexpected") else None
        return self._apply(evolve(s, engine=engine), outcome, lin, arrived=arrived)

    def en_sw_sync(self, s: State) -> Iterable[tuple]:
        e = s.engine
        return ((),) if self.handshake and e.sent_count < e.sw_count else ()

    @action(guard=en_sw_sync, present=_offloaded)
    def do_sw_sync(self, s: State):
        """software sends its unexpected count to hardware"""
        return evolve(s, engine=off.sw_sync(s.engine)), StepObs()


def build(values: Mapping[str, Any] | None = None, variants: Iterable[str] = ()
          ) -> TagMatchSystem:
    vals = check_values(PARAMS, values or {})
    return TagMatchSystem(Params(**vals), check_variants(VARIANTS, variants))


# the protocol module's interface (spec/protocols.py)
__all__ = ["PROTOCOL", "PARAMS", "PROFILES", "VARIANTS", "INVARIANTS", "TagMatchSystem", "build"]
