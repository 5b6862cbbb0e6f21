"""The reference tag-matching engine: the endpoints of one tag-matching job (its senders and
the receiver, with the receiver's NIC when tag matching is offloaded), sans I/O.

Each call is one protocol step and returns what the endpoints did in it as ``Emitted``:
messages put on a sender's wire (eager payload or rendezvous header), matches (receive id,
message id), receive completions (OK or TRUNCATED), RDMA READs started, FINs sent, sender
buffers released, cancels that took effect and a probe's answer. ``view()`` is the abstract
state in the spec's vocabulary (receive status and completion, rendezvous stage, released
buffers, the pending and unexpected lists, and with offload the NIC's list, the op and
completion channels and the unexpected counts), which the conformance harness compares after
every step.

Matching follows UCX's tag_match and Open MPI's ob1: entries carry a global sequence number,
and each structure is split into queues whose entries all match the same envelopes, so only
queue heads are ever candidates. A posted receive sits in one of four queues by the fields it
wildcards: (comm, src, tag), (comm, tag) for ANY_SOURCE, (comm, src) for ANY_TAG, (comm) for
both; an arriving message looks at the four heads its envelope selects and takes the one with
the smallest sequence number. An unexpected message is indexed four ways, one per kind of
receive that can select it, and a new receive takes the head of the one its envelope names.
A match or cancel marks an entry dead; the dead are dropped as they reach a head, so every
operation is amortised O(1) whatever the mix of wildcards.

It is written from the protocol, not from the spec's code: what it shares with the spec is
vocabulary (the parameters, read as values, and the status, stage and location constants);
matching, the rendezvous and the offload's shadow are its own, so lockstep conformance holds
the spec's reading of them against a second one (tests/layout/test_layers.py and
tests/conformance/test_conformance_tagmatch.py enforce that).
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass

from verbspec.refimpl.engines.common import EngineError
from verbspec.spec.tagmatch.lists import ANY
from verbspec.spec.tagmatch.offload import HW, HW_CANCEL, SW
from verbspec.spec.tagmatch.state import (
    CANCELLED,
    FIN_SENT,
    IDLE,
    NEED_READ,
    OK,
    PENDING,
    READ_DONE,
    READING,
    TRUNCATED,
    Params,
)

EAGER, RNDV = "eager", "rndv"


@dataclass(frozen=True)
class Packet:
    """What a sender puts on its wire: an eager payload or a rendezvous header."""

    mid: int
    comm: int
    src: int
    tag: int
    nbytes: int
    kind: str           # EAGER | RNDV


@dataclass(frozen=True)
class Read:
    """An RDMA READ of a rendezvous payload into the matched receive's buffer."""

    mid: int
    rid: int
    length: int


@dataclass(frozen=True)
class Emitted:
    sends: tuple[Packet, ...] = ()
    matches: tuple[tuple[int, int], ...] = ()      # (rid, mid)
    revoked: tuple[tuple[int, int], ...] = ()      # matches undone (offload without the hold)
    cancelled: tuple[int, ...] = ()
    completions: tuple[tuple[int, int], ...] = ()  # (rid, OK | TRUNCATED)
    reads: tuple[Read, ...] = ()
    fins: tuple[int, ...] = ()
    released: tuple[int, ...] = ()                 # mids whose sender buffer is free again
    probe: tuple[int | None, ...] = ()             # a probe's answer: (mid,) or (None,)


@dataclass(frozen=True)
class EngineView:
    status: tuple[int, ...]        # by rid: PENDING, CANCELLED or the matched mid
    completion: tuple[int, ...]    # by rid: 0, OK or TRUNCATED
    stage: tuple[int, ...]         # by mid: rendezvous stage
    released: tuple[bool, ...]     # by mid
    posted: tuple[int, ...]        # pending rids, posted order
    unexpected: tuple[int, ...]    # unexpected mids, arrival order
    where: tuple[int, ...]         # offload: each pending receive's location (SW, HW, HW_CANCEL)
    hw: tuple[int, ...]            # offload: rids the NIC holds, in its order
    claims: tuple[tuple[int, int, bool], ...]   # (rid, mid, cancelling)
    ops: tuple[tuple[str, int, int | None], ...]  # (kind, count, rid)
    cq: tuple[tuple[str, int | None, int | None, bool], ...]  # (kind, rid, mid, ok)
    counts: tuple[int, int, int, int]   # sw_count, sent_count, reported, synced


# ------------------------------------------------------------------ matching structures
class _Entry:
    __slots__ = ("seq", "key", "alive")

    def __init__(self, seq: int, key: int):
        self.seq, self.key, self.alive = seq, key, True

    def __deepcopy__(self, memo: dict) -> _Entry:
        e = memo[id(self)] = _Entry(self.seq, self.key)
        e.alive = self.alive
        return e


def _head(q: deque | None) -> _Entry | None:
    while q:
        if q[0].alive:
            return q[0]
        q.popleft()
    return None


def _tail(q: deque | None) -> _Entry | None:
    while q:
        if q[-1].alive:
            return q[-1]
        q.pop()
    return None


def _select(comm: int, src: int, tag: int) -> tuple:
    """The queue key of an envelope that may wildcard its source and tag."""
    return (comm, None if src == ANY else src, None if tag == ANY else tag)


def _copy_queues(queues: dict, by_id: dict, memo: dict) -> tuple[dict, dict]:
    """Copies of a structure's queues and id map, entries shared between them kept shared."""
    new: dict[int, _Entry] = {}

    def one(e: _Entry) -> _Entry:
        c = new.get(id(e))
        if c is None:
            c = new[id(e)] = copy.deepcopy(e, memo)
        return c

    return ({k: deque(map(one, q)) for k, q in queues.items()},
            {k: one(e) for k, e in by_id.items()})


class Posted:
    """Pending receives: one queue per envelope (wildcards included), a sequence per entry."""

    def __init__(self) -> None:
        self._seq = 0
        self._queues: dict[tuple, deque] = {}
        self._by_id: dict[int, _Entry] = {}   # insertion order is posted order

    def __deepcopy__(self, memo: dict) -> Posted:
        new = object.__new__(Posted)
        new._seq = self._seq
        new._queues, new._by_id = _copy_queues(self._queues, self._by_id, memo)
        return new

    def add(self, rid: int, comm: int, src: int, tag: int) -> None:
        self._seq += 1
        e = _Entry(self._seq, rid)
        self._queues.setdefault(_select(comm, src, tag), deque()).append(e)
        self._by_id[rid] = e

    def remove(self, rid: int) -> bool:
        e = self._by_id.pop(rid, None)
        if e is None:
            return False
        e.alive = False
        return True

    def __contains__(self, rid: int) -> bool:
        return rid in self._by_id

    def heads(self, comm: int, src: int, tag: int) -> list[_Entry]:
        """The live heads of the four queues a message (comm, src, tag) can match."""
        out = []
        for key in ((comm, src, tag), (comm, None, tag), (comm, src, None), (comm, None, None)):
            h = _head(self._queues.get(key))
            if h is not None:
                out.append(h)
        return out

    def earliest(self, comm: int, src: int, tag: int) -> int | None:
        """The earliest posted receive a message (comm, src, tag) matches."""
        heads = self.heads(comm, src, tag)
        return min(heads, key=lambda e: e.seq).key if heads else None

    def ids(self) -> tuple[int, ...]:
        return tuple(self._by_id)


class Unexpected:
    """Unexpected messages indexed four ways, ordered by an arrival key."""

    def __init__(self) -> None:
        self._queues: dict[tuple, deque] = {}
        self._by_id: dict[int, _Entry] = {}

    def __deepcopy__(self, memo: dict) -> Unexpected:
        new = object.__new__(Unexpected)
        new._queues, new._by_id = _copy_queues(self._queues, self._by_id, memo)
        return new

    def add(self, mid: int, order: int, comm: int, src: int, tag: int) -> None:
        e = _Entry(order, mid)
        for key in ((comm, src, tag), (comm, None, tag), (comm, src, None), (comm, None, None)):
            q = self._queues.setdefault(key, deque())
            if not q or q[-1].seq < order:
                q.append(e)
            else:   # an earlier message put back (only when a match is revoked)
                i = len(q)
                while i > 0 and q[i - 1].seq > order:
                    i -= 1
                q.insert(i, e)
        self._by_id[mid] = e

    def take(self, mid: int) -> None:
        self._by_id.pop(mid).alive = False

    def find(self, comm: int, src: int, tag: int, newest: bool = False) -> int | None:
        """The earliest (or newest) arrived message a receive (comm, src, tag) selects."""
        q = self._queues.get(_select(comm, src, tag))
        e = _tail(q) if newest else _head(q)
        return None if e is None else e.key

    def ids(self) -> tuple[int, ...]:
        return tuple(e.key for e in sorted(self._by_id.values(), key=lambda e: e.seq))


@dataclass(frozen=True)
class _Op:
    kind: str           # "add" | "remove" | "sync"
    count: int          # software's unexpected count when it sent the op
    rid: int | None = None


@dataclass(frozen=True)
class _Cqe:
    kind: str           # "match" | "unexpected" | "removed"
    rid: int | None = None
    mid: int | None = None
    seq: int = 0
    ok: bool = False


@dataclass
class _Claim:
    mid: int
    seq: int
    cancelling: bool


class Nic:
    """The receiver's NIC with tag matching: a bounded list of exact receives, matched in
    list order, and the two channels to software."""

    def __init__(self) -> None:
        self.buckets: dict[tuple[int, int, int], deque] = {}
        self.listed: dict[int, tuple[_Entry, tuple[int, int, int]]] = {}   # rid -> (entry, bucket)
        self.reported = 0
        self.synced = 0
        self.arrivals = 0
        self.ops: deque[_Op] = deque()
        self.cq: deque[_Cqe] = deque()

    def __deepcopy__(self, memo: dict) -> Nic:
        new = object.__new__(Nic)
        new.__dict__.update(vars(self))
        new.buckets, entries = _copy_queues(
            self.buckets, {k: e for k, (e, _) in self.listed.items()}, memo)
        new.listed = {k: (entries[k], key) for k, (_, key) in self.listed.items()}
        new.ops, new.cq = deque(self.ops), deque(self.cq)
        return new

    @property
    def held(self) -> bool:
        """Matching stops until an op carries the count of every reported message."""
        return self.synced != self.reported

    def arrive(self, p: Packet, handshake: bool) -> None:
        seq, self.arrivals = self.arrivals, self.arrivals + 1
        if not (handshake and self.held):
            h = _head(self.buckets.get((p.comm, p.src, p.tag)))
            if h is not None:
                h.alive = False
                del self.listed[h.key]
                self.cq.append(_Cqe("match", rid=h.key, mid=p.mid, seq=seq))
                return
        self.reported += 1
        self.cq.append(_Cqe("unexpected", mid=p.mid, seq=seq))

    def execute(self, recvs: list[tuple[int, int, int, int]]) -> None:
        op = self.ops.popleft()
        self.synced = op.count
        if op.kind == "add":
            comm, src, tag, _ = recvs[op.rid]
            e = _Entry(op.rid, op.rid)
            self.buckets.setdefault((comm, src, tag), deque()).append(e)
            self.listed[op.rid] = (e, (comm, src, tag))
        elif op.kind == "remove":
            found = self.listed.pop(op.rid, None)
            if found is not None:
                found[0].alive = False
            # a failed remove: the tag was consumed by a match whose completion is queued
            self.cq.append(_Cqe("removed", rid=op.rid, ok=found is not None))


# ------------------------------------------------------------------------------ engine
class TagMatchEngine:
    """The senders and the receiver of one job, configured by the spec's parameters."""

    handshake = True        # the NIC holds matching until software's count is current
    head_only = True        # the NIC holds only a head of the posted list

    def __init__(self, cfg: Params):
        self.cfg = cfg
        n = cfg.senders * cfg.messages
        self.sent = [0] * cfg.senders
        self.msgs: list[Packet | None] = [None] * n
        self.released = [False] * n
        self.stage = [IDLE] * n
        self.recvs: list[tuple[int, int, int, int]] = []   # by rid: comm, src, tag, bytes
        self.status: list[int] = []
        self.completion: list[int] = []
        self.arrived: set[int] = set()          # mids the receiver's NIC took in
        self.matched_to: dict[int, int] = {}    # mid -> the rid it matched
        self.fins_out: set[int] = set()         # FINs on their way to a sender
        self.posted = Posted()
        self.unexpected = Unexpected()
        self._order = 0
        self.offload = cfg.capacity > 0
        self.nic = Nic() if self.offload else None
        self.where: dict[int, int] = {}         # pending rid -> location (offload)
        self.in_sw = 0                          # pending receives kept in software
        self.claims: dict[int, _Claim] = {}
        self.sw_count = 0
        self.sent_count = 0

    def __deepcopy__(self, memo: dict) -> TagMatchEngine:
        memo[id(self.cfg)] = self.cfg       # the configuration is shared, never changed
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(vars(self))
        for k in ("sent", "released", "stage", "status", "completion"):
            setattr(new, k, list(getattr(self, k)))
        new.msgs, new.recvs = list(self.msgs), list(self.recvs)     # frozen items
        new.arrived, new.fins_out = set(self.arrived), set(self.fins_out)
        new.matched_to = dict(self.matched_to)
        new.where = dict(self.where)
        new.claims = {k: _Claim(c.mid, c.seq, c.cancelling) for k, c in self.claims.items()}
        new.posted = copy.deepcopy(self.posted, memo)
        new.unexpected = copy.deepcopy(self.unexpected, memo)
        new.nic = copy.deepcopy(self.nic, memo)
        return new

    # ------------------------------------------------------------------ the view
    def view(self) -> EngineView:
        nic = self.nic
        return EngineView(
            tuple(self.status), tuple(self.completion), tuple(self.stage),
            tuple(self.released), self.posted.ids(), self.unexpected.ids(),
            tuple(self.where[r] for r in self.posted.ids()) if self.offload else (),
            tuple(nic.listed) if nic else (),
            tuple((r, c.mid, c.cancelling) for r, c in self.claims.items()),
            tuple((o.kind, o.count, o.rid) for o in nic.ops) if nic else (),
            tuple((c.kind, c.rid, c.mid, c.ok) for c in nic.cq) if nic else (),
            (self.sw_count, self.sent_count, nic.reported, nic.synced) if nic else (0, 0, 0, 0))

    # ------------------------------------------------------------------ checks
    def _check(self, what: str, value: int, hi: int, wildcard: bool = False) -> None:
        if wildcard and value == ANY:
            return
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < hi:
            extra = " or ANY (-1)" if wildcard else ""
            raise EngineError(f"{what} {value!r} is outside 0..{hi - 1}{extra}")

    def _mid(self, mid: int) -> Packet:
        if not isinstance(mid, int) or not 0 <= mid < len(self.msgs) or self.msgs[mid] is None:
            raise EngineError(f"message {mid!r} was never sent")
        return self.msgs[mid]

    def _rid_of(self, mid: int) -> int:
        return self.matched_to[mid]

    # ------------------------------------------------------------------ senders
    def send(self, sender: int, comm: int, tag: int, nbytes: int) -> Emitted:
        """A sender posts its next message: eager up to eager_limit bytes, else a header."""
        self._check("sender", sender, self.cfg.senders)
        self._check("communicator", comm, self.cfg.comms)
        self._check("tag", tag, self.cfg.tags)
        if not isinstance(nbytes, int) or not 1 <= nbytes <= self.cfg.max_bytes:
            raise EngineError(f"length {nbytes!r} is outside 1..{self.cfg.max_bytes}")
        k = self.sent[sender]
        if k >= self.cfg.messages:
            raise EngineError(f"sender {sender} has sent all its {self.cfg.messages} messages")
        self.sent[sender] = k + 1
        mid = sender * self.cfg.messages + k
        p = Packet(mid, comm, sender, tag, nbytes,
                   EAGER if nbytes <= self.cfg.eager_limit else RNDV)
        self.msgs[mid] = p
        return Emitted(sends=(p,), released=self._on_post(p))

    def _on_post(self, p: Packet) -> tuple[int, ...]:
        """Buffers freed when the send is posted: none (an eager one waits for its ACK)."""
        return ()

    def fin(self, mid: int) -> Emitted:
        """A FIN reached the sender of rendezvous message ``mid``: its buffer is free."""
        self._mid(mid)
        if mid not in self.fins_out:
            raise EngineError(f"no FIN for message {mid} is on its way")
        self.fins_out.discard(mid)
        self.released[mid] = True
        return Emitted(released=(mid,))

    # ------------------------------------------------------------------ the receiver
    def delivered(self, p: Packet) -> Emitted:
        """Packet ``p`` reached the receiver; an eager payload's ACK completes its send."""
        sent = self._mid(p.mid)
        if p != sent:
            raise EngineError(f"packet {p} differs from what sender {sent.src} sent: {sent}")
        if p.mid in self.arrived:
            raise EngineError(f"message {p.mid} already arrived (each message arrives once)")
        self.arrived.add(p.mid)
        freed = ()
        if p.kind == EAGER and not self.released[p.mid]:
            self.released[p.mid] = True
            freed = (p.mid,)
        if self.offload:
            self.nic.arrive(p, self.handshake)
            return Emitted(released=freed)
        rid = self._arrival_pick(p)
        if rid is None:
            self._order += 1
            self.unexpected.add(p.mid, self._order, p.comm, p.src, p.tag)
            return Emitted(released=freed)
        self.posted.remove(rid)
        return self._matched(((rid, p.mid),), released=freed)

    def _arrival_pick(self, p: Packet) -> int | None:
        return self.posted.earliest(p.comm, p.src, p.tag)

    def _unexpected_pick(self, comm: int, src: int, tag: int) -> int | None:
        return self.unexpected.find(comm, src, tag)

    def post_recv(self, comm: int, src: int, tag: int, nbytes: int) -> Emitted:
        """The receiver posts a receive (rid: its posting index)."""
        self._check("communicator", comm, self.cfg.comms)
        self._check("source", src, self.cfg.senders, wildcard=True)
        self._check("tag", tag, self.cfg.tags, wildcard=True)
        if not isinstance(nbytes, int) or not 1 <= nbytes <= self.cfg.max_bytes:
            raise EngineError(f"buffer length {nbytes!r} is outside 1..{self.cfg.max_bytes}")
        rid = len(self.recvs)
        self.recvs.append((comm, src, tag, nbytes))
        self.status.append(PENDING)
        self.completion.append(0)
        mid = self._unexpected_pick(comm, src, tag)
        if mid is not None:
            self.unexpected.take(mid)
            return self._matched(((rid, mid),))
        self.posted.add(rid, comm, src, tag)
        if self.offload:
            if self._offloadable(src, tag):
                self.where[rid] = HW
                self._op(_Op("add", self.sw_count, rid))
            else:
                self.where[rid] = SW
                self.in_sw += 1
        return Emitted()

    def _offloadable(self, src: int, tag: int) -> bool:
        used = len(self.where) - self.in_sw + len(self.claims)
        return (src != ANY and tag != ANY and used < self.cfg.capacity
                and (not self.head_only or self.in_sw == 0))

    def _op(self, op: _Op) -> None:
        self.nic.ops.append(op)
        self.sent_count = op.count

    def _unpost(self, rid: int) -> int:
        """Remove a pending receive; its location (offload)."""
        self.posted.remove(rid)
        loc = self.where.pop(rid, SW)
        if self.offload and loc == SW:
            self.in_sw -= 1
        return loc

    def cancel(self, rid: int) -> Emitted:
        """MPI_Cancel: a pending receive is cancelled (for one the NIC holds, a remove is
        sent and the answer comes with its completion); a matched one completes normally."""
        if not isinstance(rid, int) or not 0 <= rid < len(self.recvs):
            raise EngineError(f"receive {rid!r} was never posted")
        if rid not in self.posted:
            return Emitted()
        loc = self.where.get(rid, SW)
        if loc == HW_CANCEL:
            raise EngineError(f"receive {rid} is already being cancelled")
        if loc == HW:
            self.where[rid] = HW_CANCEL
            self._op(_Op("remove", self.sw_count, rid))
            return Emitted()
        self._unpost(rid)
        self.status[rid] = CANCELLED
        return Emitted(cancelled=(rid,))

    def probe(self, comm: int, src: int, tag: int) -> Emitted:
        """MPI_Iprobe: the message a receive with this envelope would take now."""
        self._check("communicator", comm, self.cfg.comms)
        self._check("source", src, self.cfg.senders, wildcard=True)
        self._check("tag", tag, self.cfg.tags, wildcard=True)
        if self.offload and self.nic.cq:
            raise EngineError("probe with NIC completions unhandled: progress them first")
        return Emitted(probe=(self._unexpected_pick(comm, src, tag),))

    def _code(self, rid: int, mid: int) -> int:
        return TRUNCATED if self.msgs[mid].nbytes > self.recvs[rid][3] else OK

    def _matched(self, pairs: tuple[tuple[int, int], ...], *,
                 revoked: tuple[tuple[int, int], ...] = (), released: tuple[int, ...] = ()
                 ) -> Emitted:
        """Record matches: an eager one completes its receive, a rendezvous one needs a READ."""
        for rid, mid in revoked:
            self.status[rid], self.completion[rid], self.stage[mid] = PENDING, 0, IDLE
            del self.matched_to[mid]
        done = []
        for rid, mid in pairs:
            self.status[rid] = mid
            self.matched_to[mid] = rid
            if self.msgs[mid].kind == EAGER:
                self.completion[rid] = self._code(rid, mid)
                done.append((rid, self.completion[rid]))
            else:
                self.stage[mid] = NEED_READ
        return Emitted(matches=pairs, revoked=revoked, completions=tuple(done),
                       released=released)

    # ------------------------------------------------------------------ rendezvous
    def start_read(self, mid: int) -> Emitted:
        """RDMA READ of matched rendezvous message ``mid`` into its receive's buffer."""
        self._mid(mid)
        if self.stage[mid] != NEED_READ:
            raise EngineError(f"message {mid} has no READ to start (stage {self.stage[mid]})")
        rid = self._rid_of(mid)
        self.stage[mid] = READING
        read = Read(mid, rid, min(self.msgs[mid].nbytes, self.recvs[rid][3]))
        return Emitted(reads=(read,))

    def read_done(self, mid: int) -> Emitted:
        """The READ of ``mid`` completed: its receive completes."""
        self._mid(mid)
        if self.stage[mid] != READING:
            raise EngineError(f"message {mid} has no READ in flight")
        rid = self._rid_of(mid)
        self.stage[mid] = READ_DONE
        self.completion[rid] = self._code(rid, mid)
        return Emitted(completions=((rid, self.completion[rid]),))

    def send_fin(self, mid: int) -> Emitted:
        """FIN to the sender of ``mid``, once its payload is read."""
        self._mid(mid)
        if self.stage[mid] != READ_DONE:
            raise EngineError(f"message {mid}'s READ has not completed: no FIN yet")
        self.stage[mid] = FIN_SENT
        self.fins_out.add(mid)
        return Emitted(fins=(mid,))

    # ------------------------------------------------------------------ offload
    def _need_offload(self) -> Nic:
        if self.nic is None:
            raise EngineError("no tag-matching offload (capacity 0)")
        return self.nic

    def hw_op(self) -> Emitted:
        """The NIC executes the oldest op software sent it."""
        nic = self._need_offload()
        if not nic.ops:
            raise EngineError("the NIC has no op to execute")
        nic.execute(self.recvs)
        return Emitted()

    def sw_sync(self) -> Emitted:
        """Software sends the NIC its count of handled unexpected messages."""
        self._need_offload()
        if self.sent_count >= self.sw_count:
            raise EngineError("the NIC already has software's unexpected count")
        self._op(_Op("sync", self.sw_count))
        return Emitted()

    def sw_complete(self) -> Emitted:
        """Software handles the NIC's oldest completion."""
        nic = self._need_offload()
        if not nic.cq:
            raise EngineError("the NIC has no completion to handle")
        c = nic.cq.popleft()
        if c.kind == "match":
            if c.rid in self.posted:
                self._unpost(c.rid)
                return self._matched(((c.rid, c.mid),))
            # the NIC lists a receive only while software holds it pending or claimed (a
            # claim ends with the remove's answer, queued behind any match of it), so this
            # is a claim: the NIC filled a receive software had promised to an earlier
            # message, and that message goes back to the unexpected list
            cl = self.claims[c.rid]
            self.claims[c.rid] = _Claim(c.mid, c.seq, cl.cancelling)
            m = self.msgs[cl.mid]
            self.unexpected.add(cl.mid, cl.seq, m.comm, m.src, m.tag)
            return self._matched(((c.rid, c.mid),), revoked=((c.rid, cl.mid),))
        if c.kind == "unexpected":
            self.sw_count += 1
            m = self.msgs[c.mid]
            rid = self._shadow_pick(m)
            if rid is None:
                self.unexpected.add(c.mid, c.seq, m.comm, m.src, m.tag)
                return Emitted()
            loc = self._unpost(rid)
            if loc == HW:
                # claim it: the NIC is held, so this remove cannot lose to a NIC match
                self.claims[rid] = _Claim(c.mid, c.seq, False)
                self._op(_Op("remove", self.sw_count, rid))
            elif loc == HW_CANCEL:
                self.claims[rid] = _Claim(c.mid, c.seq, True)
            return self._matched(((rid, c.mid),))
        # "removed"
        if self.claims.pop(c.rid, None) is not None:
            return Emitted()            # a claim's slot is free; a cancel of it failed
        if c.rid in self.posted and self.where[c.rid] == HW_CANCEL and c.ok:
            self._unpost(c.rid)
            self.status[c.rid] = CANCELLED
            return Emitted(cancelled=(c.rid,))
        return Emitted()                # matched before the remove ran: the cancel failed

    def _shadow_pick(self, m: Packet) -> int | None:
        """The earliest pending receive, wherever it lives, that a reported message matches."""
        return self.posted.earliest(m.comm, m.src, m.tag)
