"""``TaggedEndpoint``: MPI-style tagged messaging between ranks, as a library: one process's
endpoint in a job, joined to each peer rank by an RC queue pair (a ``SimDevice`` with
``qp_type="rc"``, or a ``VerbsDevice``: refimpl/transport/verbs_device.py) and a TCP side channel.

Matching follows MPI (spec/tagmatch/lists.py): an arriving message takes the earliest posted
receive whose envelope (communicator, source, tag; ANY_SOURCE and ANY_TAG allowed in the
receive) matches it, and a new receive takes the earliest arrived unexpected message it
matches, so two messages with the same envelope are received in the order they were sent. The
structures are the reference engine's ``Posted`` and ``Unexpected`` (O(1) amortised).

The wire protocol, per peer:

- every message is a SEND of a ``HEADER`` (kind, source, communicator, tag, per-peer sequence
  number, message id, length, the sender's credit count, the payload's CRC-32, the header's own
  CRC-32) into one of the ``bounces`` receive buffers the peer keeps posted;
- eager (length up to ``eager_limit``, as spec/tagmatch/lists.py's ``protocol_for`` says): the
  payload follows the header; the send request completes when the RC ACK comes back;
- rendezvous (longer): the header is an RTS and the payload stays in a region the sender
  registers; the receiver, once a receive matches, RDMA-READs it (in pieces of at most
  ``max_msg`` bytes), checks its CRC, and sends FIN; the send request completes on FIN;
- credits: a sender sends only while the peer has a bounce buffer posted for it (``bounces``
  plus the peer's reposts, less the messages sent), so RC never meets RNR in normal operation.
  Each header carries the sender's count of reposted buffers; a sender out of credits READs the
  peer's count from its ``credit`` region, which costs the peer no receive buffer.

Nothing is ever accepted wrong: a header whose CRC, magic, source or sequence number is off, an
eager payload or a READ payload whose CRC differs, fails the endpoint.

Progress happens inside ``test``, ``wait``, ``iprobe``, ``probe`` and ``close``: they poll the
devices and handle what completed; there is no thread besides the devices' NICs. A fault (an error
completion, an RNR or any other failed work request, a lost message, a dead peer, a wait beyond
its timeout) raises ``TaggedError`` with a message naming it, and the endpoint then refuses
every call until a new one is set up.
"""

from __future__ import annotations

import functools
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.engines.tagmatch_engine import EAGER, Posted, Unexpected
from verbspec.refimpl.library.sim_pair import Pair, RankOutcome, open_link, run_pair
from verbspec.refimpl.transport import device_trace
from verbspec.refimpl.transport.side_channel import SideChannelTimeout
from verbspec.refimpl.transport.sim_device import RC, STATUS_TEXT, WC_SUCCESS, DeviceError, Regions
from verbspec.spec.tagmatch.lists import ANY, protocol_for

ANY_SOURCE = ANY
ANY_TAG = ANY
TAG_UB = 2**31 - 1          # MPI_TAG_UB: tags are 0..TAG_UB
COMM_UB = 2**31 - 1

# magic, kind, source, comm, tag, seq, message id, length, credit, payload CRC, header CRC
HEADER = struct.Struct("<IB3xiiiQQQQII")
HELLO = struct.Struct("<IIiIIII")       # magic, version, rank, eager_limit, bounces, max_msg, _
MSG_MAGIC, HELLO_MAGIC, VERSION = 0x4D545356, 0x48545356, 1    # "VSTM", "VSTH"
K_EAGER, K_RTS, K_FIN = 1, 2, 3
KIND_TEXT = {K_EAGER: "eager message", K_RTS: "rendezvous header (RTS)", K_FIN: "FIN"}
KIND_NAME = {K_EAGER: "eager", K_RTS: "rts", K_FIN: "fin"}     # as a device trace names them
CREDIT = struct.Struct("<Q")

# work request ids: the kind in the top bits, an index below
_WR_SEND, _WR_READ, _WR_CREDIT = 1 << 60, 2 << 60, 3 << 60
_WR_INDEX = (1 << 60) - 1
POLL_BATCH = 64
POLL_WAIT_S = 0.001
CREDIT_READ_EVERY_S = 0.001     # a sender out of credits READs the peer's count this often


class TaggedError(RuntimeError):
    """A tagged-messaging call failed; the message names what went wrong."""


class TaggedTimeout(TaggedError):
    """A wait did not complete within its timeout (the endpoint then refuses further use)."""


@dataclass(frozen=True)
class TaggedConfig:
    """An endpoint's configuration; every rank of a job must use the same one (checked when the
    endpoints meet)."""

    eager_limit: int = 8192         # longest eager message; longer ones use rendezvous
    bounces: int = 32               # receive buffers kept posted per peer (the peer's credits)
    max_msg: int = 64 * 1024        # the device's message cap (and the largest READ piece)
    sq_depth: int = 64              # work requests on the wire per peer
    timeout_ms: int = 5000          # a wait's default timeout; also the hello's

    def __post_init__(self) -> None:
        # the upper bounds: a device's message cap (2^31 bytes), a queue pair's depth as
        # devices allow it, and the gate channel's timeout range
        for name, low, high in (("eager_limit", 0, 2**31), ("bounces", 1, 32768),
                                ("max_msg", HEADER.size, 2**31), ("sq_depth", 2, 32768),
                                ("timeout_ms", 1, 60000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise TaggedError(f"{name}={value!r}: expected an integer in {low}..{high}")
        if self.bounce_bytes > self.max_msg:
            raise TaggedError(f"eager_limit={self.eager_limit}: a {HEADER.size}-byte header "
                              f"and the eager payload must fit max_msg={self.max_msg}")

    @property
    def bounce_bytes(self) -> int:
        return HEADER.size + self.eager_limit

    @property
    def cq_depth(self) -> int:
        # every bounce and every send-queue entry can complete at once, flushed ones included
        return 2 * (self.bounces + self.sq_depth)


def endpoint_regions(cfg: TaggedConfig) -> Regions:
    """The registered memory an endpoint needs on each peer's device."""
    return {"bounce": bytearray(cfg.bounces * cfg.bounce_bytes),
            "out": bytearray(cfg.sq_depth * cfg.bounce_bytes),
            "credit": bytearray(CREDIT.size), "peer_credit": bytearray(CREDIT.size)}


@dataclass
class Status:
    """What a completed request reports, as MPI_Status does, with the received bytes."""

    source: int
    tag: int
    count: int                  # bytes received (a send: bytes sent)
    error: str = ""             # "MPI_ERR_TRUNCATE: ..." when the message was longer
    cancelled: bool = False
    data: bytes = b""

    @property
    def truncated(self) -> bool:
        return self.error.startswith("MPI_ERR_TRUNCATE")


class Request:
    """A nonblocking send or receive. ``test`` makes progress and says whether it completed;
    ``wait`` makes progress until it does (or the timeout passes) and returns its status."""

    def __init__(self, endpoint: TaggedEndpoint, is_send: bool, peers: tuple[int, ...],
                 what: str) -> None:
        self.endpoint, self.is_send, self.peers, self.what = endpoint, is_send, peers, what
        self.status: Status | None = None
        self._rid = 0           # a receive's id
        self._tag = self._nbytes = 0    # a send's tag and length, for its status

    @property
    def done(self) -> bool:
        return self.status is not None

    def test(self) -> bool:
        if self.status is None:
            self.endpoint._progress(0.0)
        return self.status is not None

    def wait(self, timeout: float | None = None) -> Status:
        """The status once complete. ``timeout`` (seconds; default the configuration's
        timeout_ms): past it, TaggedTimeout, and the endpoint refuses further use."""
        trace = self.endpoint.trace
        if trace is not None:
            return trace.call("request.wait", {"request": self.what, "rid": self._rid,
                                               "send": self.is_send},
                              self.endpoint._wait, self, timeout, detail=_status_detail)
        return self.endpoint._wait(self, timeout)


@dataclass
class _Arrival:
    """A message header that arrived (eager: with its payload)."""

    src: int
    comm: int
    tag: int
    kind: int
    mid: int            # the sender's message id
    nbytes: int
    crc: int
    data: bytes | None  # eager payload


@dataclass
class _Recv:
    request: Request
    comm: int
    src: int
    tag: int
    nbytes: int


@dataclass
class _Get:
    """A rendezvous receive being READ."""

    recv: _Recv
    arrival: _Arrival
    region: str
    left: int           # READ pieces not yet complete


@dataclass
class _Out:
    """A message waiting to go out: a credit, a staging slot and send-queue room."""

    kind: int
    comm: int
    tag: int
    mid: int
    nbytes: int
    crc: int
    payload: bytes = b""
    request: Request | None = None      # an eager send: completes on its ACK


@dataclass
class _Peer:
    rank: int
    device: Any
    side: Any
    bounces: int                        # the peer's posted buffers at the start: credits
    sent: int = 0                       # messages sent (each took one of the peer's buffers)
    recv_seq: int = 0                   # the last message's sequence number from the peer
    peer_reposted: int = 0              # buffers the peer reposted, as far as known
    reposted: int = 0                   # buffers this rank reposted for the peer
    inflight: int = 0                   # work requests on the wire
    backlog: deque[_Out] = field(default_factory=deque)
    reads: deque[tuple[int, str, int, str, int, int]] = field(default_factory=deque)
    free_slots: list[int] = field(default_factory=list)
    slot_request: dict[int, Request | None] = field(default_factory=dict)
    credit_read: bool = False
    credit_read_at: float = 0.0

    @property
    def credits(self) -> int:
        return self.bounces + self.peer_reposted - self.sent


class TaggedEndpoint:
    """Rank ``rank``'s endpoint; ``links`` maps each peer rank to its (device, side channel).
    Setting up posts the receive buffers and exchanges a hello with each peer over the side
    channel (both must have the same configuration)."""

    def __init__(self, rank: int, links: dict[int, tuple[Any, Any]],
                 cfg: TaggedConfig | None = None, trace: Any = None) -> None:
        self.cfg = cfg or TaggedConfig()
        self.trace = trace              # a device_trace.Recorder, or None
        if trace is not None:
            trace.send_detail = _header_detail
            links = {r: (trace.device(d), trace.side(s)) for r, (d, s) in links.items()}
        self.rank = rank
        self.timeout_s = self.cfg.timeout_ms / 1000
        self._failed = ""
        self._closed = False
        self._posted = Posted()
        self._unexpected = Unexpected()
        self._recvs: dict[int, _Recv] = {}
        self._arrivals: dict[int, _Arrival] = {}
        self._gets: dict[int, _Get] = {}
        self._sends: dict[int, tuple[int, Request]] = {}     # rendezvous mid -> (dest, request)
        self._next_rid = self._next_mid = self._next_aid = self._next_read = 0
        self.counts = {"eager": 0, "rendezvous": 0, "received": 0, "credit_reads": 0}
        self.peers: dict[int, _Peer] = {}
        try:
            for r, (device, side) in sorted(links.items()):
                if r == rank:
                    raise TaggedError(f"rank {rank} cannot be its own peer")
                self.peers[r] = self._set_up(r, device, side)
        except DeviceError as e:
            self._fail(f"device: {e}")

    # ------------------------------------------------------------------ setting up
    def _set_up(self, r: int, device: Any, side: Any) -> _Peer:
        c = self.cfg
        device.post_recv([(i, "bounce", i * c.bounce_bytes, c.bounce_bytes)
                          for i in range(c.bounces)])
        try:
            side.write_bytes(HELLO.pack(HELLO_MAGIC, VERSION, self.rank, c.eager_limit,
                                        c.bounces, c.max_msg, 0))
            got = side.read_bytes(HELLO.size)
        except (SideChannelTimeout, OSError) as e:
            self._fail(f"hello with rank {r}: {e}")
        if got is None:
            self._fail(f"hello from rank {r}: the peer closed the side channel")
        magic, version, peer_rank, eager, bounces, max_msg, _ = HELLO.unpack(got)
        if magic != HELLO_MAGIC or version != VERSION:
            self._fail(f"hello from rank {r}: not a tagged endpoint's hello (magic {magic:#x}, "
                       f"version {version})")
        if peer_rank != r:
            self._fail(f"hello from rank {r}: the peer says it is rank {peer_rank}")
        if (eager, bounces, max_msg) != (c.eager_limit, c.bounces, c.max_msg):
            self._fail(f"rank {r} has eager_limit={eager}, bounces={bounces}, max_msg={max_msg};"
                       f" this rank has {c.eager_limit}, {c.bounces}, {c.max_msg}: a job's "
                       f"ranks must agree")
        return _Peer(r, device, side, bounces, free_slots=list(range(c.sq_depth - 1, -1, -1)))

    # ------------------------------------------------------------------ the API
    def isend(self, buf: bytes | bytearray | memoryview, dest: int, tag: int,
              comm: int = 0) -> Request:
        """Send ``buf`` to rank ``dest`` with ``tag`` on communicator ``comm``. Eager up to
        ``eager_limit`` bytes (complete once the peer's NIC acknowledged it), rendezvous
        above (complete when the receiver's FIN says it has READ the payload)."""
        if self.trace is not None:
            return self.trace.call("isend", {"bytes": len(buf), "dest": dest, "tag": tag,
                                             "comm": comm}, self._isend, buf, dest, tag, comm)
        return self._isend(buf, dest, tag, comm)

    def _isend(self, buf: bytes | bytearray | memoryview, dest: int, tag: int,
               comm: int) -> Request:
        self._usable()
        peer = self._peer(dest, "isend")
        self._check_tag(tag, "isend", wildcard=False)
        self._check_comm(comm, "isend")
        data = bytes(buf)
        self._next_mid += 1
        mid = self._next_mid
        req = Request(self, True, (dest,), f"send of {len(data)} bytes to rank {dest} "
                                           f"(tag {tag}, comm {comm})")
        crc = zlib.crc32(data)
        if protocol_for(len(data), self.cfg.eager_limit) == EAGER:
            peer.backlog.append(_Out(K_EAGER, comm, tag, mid, len(data), crc, data, req))
            self.counts["eager"] += 1
        else:
            peer.device.register(_rndv_region(mid), bytearray(data))
            self._sends[mid] = (dest, req)
            peer.backlog.append(_Out(K_RTS, comm, tag, mid, len(data), crc))
            self.counts["rendezvous"] += 1
        req._tag, req._nbytes = tag, len(data)
        self._guard(self._pump, peer)
        return req

    def irecv(self, nbytes: int, source: int = ANY_SOURCE, tag: int = ANY_TAG,
              comm: int = 0) -> Request:
        """Receive up to ``nbytes`` bytes from ``source`` (or ANY_SOURCE) with ``tag`` (or
        ANY_TAG) on ``comm``. A longer message completes it with MPI_ERR_TRUNCATE in the
        status and its first ``nbytes`` bytes."""
        if self.trace is not None:
            return self.trace.call("irecv", {"bytes": nbytes, "source": source, "tag": tag,
                                             "comm": comm}, self._irecv, nbytes, source, tag,
                                   comm)
        return self._irecv(nbytes, source, tag, comm)

    def _irecv(self, nbytes: int, source: int, tag: int, comm: int) -> Request:
        self._usable()
        if not isinstance(nbytes, int) or nbytes < 0:
            raise TaggedError(f"irecv: nbytes={nbytes!r}: expected a byte count of at least 0")
        if source != ANY_SOURCE:
            self._peer(source, "irecv")
        self._check_tag(tag, "irecv", wildcard=True)
        self._check_comm(comm, "irecv")
        self._next_rid += 1
        rid = self._next_rid
        peers = tuple(self.peers) if source == ANY_SOURCE else (source,)
        src_text = "any source" if source == ANY_SOURCE else f"rank {source}"
        tag_text = "any tag" if tag == ANY_TAG else f"tag {tag}"
        req = Request(self, False, peers, f"receive from {src_text} ({tag_text}, comm {comm})")
        rec = self._recvs[rid] = _Recv(req, comm, source, tag, nbytes)
        req._rid = rid
        aid = self._unexpected.find(comm, source, tag)
        if aid is None:
            self._posted.add(rid, comm, source, tag)
        else:
            self._unexpected.take(aid)
            self._guard(self._deliver, rid, rec, self._arrivals.pop(aid))
        return req

    def cancel(self, request: Request) -> bool:
        """MPI_Cancel: a receive not yet matched is cancelled (it completes with
        ``cancelled``); a matched receive, or a send, is not. Whether it was cancelled."""
        self._usable()
        if request.endpoint is not self:
            raise TaggedError("cancel: the request belongs to another endpoint")
        if request.is_send or request.done:
            return False
        rid = request._rid
        if not self._posted.remove(rid):
            return False            # matched: its data is on its way
        rec = self._recvs.pop(rid)
        request.status = Status(rec.src, rec.tag, 0, cancelled=True)
        return True

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
               comm: int = 0) -> Status | None:
        """MPI_Iprobe: the status of the message a receive with this envelope would take now
        (its source, tag and length; no data), or None; the message stays where it is."""
        self._usable()
        if source != ANY_SOURCE:
            self._peer(source, "iprobe")
        self._check_tag(tag, "iprobe", wildcard=True)
        self._check_comm(comm, "iprobe")
        self._progress(0.0)
        aid = self._unexpected.find(comm, source, tag)
        if aid is None:
            return None
        a = self._arrivals[aid]
        return Status(a.src, a.tag, a.nbytes)

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, comm: int = 0,
              timeout: float | None = None) -> Status:
        """MPI_Probe: wait until a message a receive with this envelope would take has arrived;
        its status (no data). Faults and the timeout end it as they end ``Request.wait``."""
        found: list[Status] = []

        def arrived() -> bool:
            if not found:
                st = self.iprobe(source, tag, comm)
                if st is not None:
                    found.append(st)
            return bool(found)

        src_text = "any source" if source == ANY_SOURCE else f"rank {source}"
        tag_text = "any tag" if tag == ANY_TAG else f"tag {tag}"
        peers = tuple(self.peers) if source == ANY_SOURCE else (source,)
        self._until(arrived, peers, f"probe for {src_text} ({tag_text}, comm {comm})", timeout)
        return found[0]

    def close(self) -> None:
        """Let what this rank still owes its peers leave (FINs, queued messages; at most the
        timeout), then take the devices and side channels down."""
        if self._closed:
            return
        if self.trace is not None and not self.trace.ended:
            self.trace.call("close", {}, lambda: None)
        if not self._failed:
            deadline = time.monotonic() + self.timeout_s
            try:
                while any(p.backlog or p.reads or p.inflight for p in self.peers.values()) \
                        and time.monotonic() < deadline and not self._failed:
                    self._progress(POLL_WAIT_S)
            except TaggedError:
                pass
        self._closed = True
        self._failed = self._failed or "the endpoint is closed"
        for p in self.peers.values():
            p.device.close()
            p.side.close()
        if self.trace is not None:
            self.trace.end()

    def __enter__(self) -> TaggedEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ checks
    def _usable(self) -> None:
        if self._failed:
            raise TaggedError(f"{self._failed}: set the endpoint up again")

    def _fail(self, text: str) -> None:
        self._failed = self._failed or f"the endpoint failed ({text})"
        raise TaggedError(text)

    def _peer(self, rank: Any, call: str) -> _Peer:
        peer = self.peers.get(rank) if isinstance(rank, int) else None
        if peer is None:
            raise TaggedError(f"MPI_ERR_RANK: {call}: invalid rank {rank!r}: this endpoint "
                              f"(rank {self.rank}) reaches ranks {sorted(self.peers)}")
        return peer

    @staticmethod
    def _check_tag(tag: Any, call: str, wildcard: bool) -> None:
        if wildcard and tag == ANY_TAG:
            return
        if not isinstance(tag, int) or not 0 <= tag <= TAG_UB:
            raise TaggedError(f"MPI_ERR_TAG: {call}: invalid tag {tag!r}: tags are 0.."
                              f"{TAG_UB} (MPI_TAG_UB)" + (" or ANY_TAG" if wildcard else ""))

    @staticmethod
    def _check_comm(comm: Any, call: str) -> None:
        if not isinstance(comm, int) or not 0 <= comm <= COMM_UB:
            raise TaggedError(f"MPI_ERR_COMM: {call}: invalid communicator {comm!r}: "
                              f"communicators are 0..{COMM_UB}")

    # ------------------------------------------------------------------ progress
    def _guard(self, step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except DeviceError as e:
            self._fail(f"device: {e}")

    def _progress(self, wait_s: float) -> int:
        """Post what can go out, handle what completed (waiting up to ``wait_s`` for the first
        completion); the number of completions handled."""
        self._usable()
        handled = 0
        try:
            for peer in self.peers.values():
                self._pump(peer)
                cqes = peer.device.poll(POLL_BATCH, wait_s if len(self.peers) == 1 else 0.0)
                for c in cqes:
                    self._complete(peer, c)
                handled += len(cqes)
                if cqes:
                    self._pump(peer)
        except DeviceError as e:
            self._fail(f"device: {e}")
        return handled

    def _wait(self, req: Request, timeout: float | None) -> Status:
        self._until(lambda: req.status is not None, req.peers, req.what, timeout)
        assert req.status is not None
        return req.status

    def _until(self, done: Callable[[], bool], peers: tuple[int, ...], what: str,
               timeout: float | None) -> None:
        """Make progress until ``done()``; a TaggedError when every peer that could make it
        happen is gone, TaggedTimeout past the timeout (both fail the endpoint)."""
        limit = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not done():
            if self._progress(POLL_WAIT_S) and done():
                return
            gone = [r for r in peers if self.peers[r].device.peer_gone]
            if gone and len(gone) == len(peers) and not done():
                self._fail(f"peer rank {gone[0]} is gone (its wire closed: the process died or "
                           f"closed its endpoint) while a {what} waited")
            if time.monotonic() > deadline:
                self._failed = self._failed or (f"the endpoint failed (timeout: the "
                                                f"{what} did not complete)")
                raise TaggedTimeout(f"timeout: the {what} did not complete within "
                                    f"{limit * 1000:.0f} ms")

    def _pump(self, peer: _Peer) -> None:
        """Post queued messages while the peer has credits, a staging slot is free and the
        send queue has room; then queued READs; READ the peer's credit count when out."""
        c = self.cfg
        while peer.backlog and peer.inflight < c.sq_depth and peer.free_slots:
            if peer.credits <= 0:
                now = time.monotonic()
                if not peer.credit_read and now - peer.credit_read_at >= CREDIT_READ_EVERY_S:
                    peer.credit_read, peer.credit_read_at = True, now
                    peer.inflight += 1
                    self.counts["credit_reads"] += 1
                    peer.device.post_read(_WR_CREDIT, "peer_credit", 0, "credit", 0,
                                          CREDIT.size)
                break
            out = peer.backlog.popleft()
            slot = peer.free_slots.pop()
            at = slot * c.bounce_bytes
            peer.sent += 1
            fields = (MSG_MAGIC, out.kind, self.rank, out.comm, out.tag, peer.sent, out.mid,
                      out.nbytes, peer.reposted, out.crc)
            head = HEADER.pack(*fields, 0)
            region = peer.device.regions["out"]
            HEADER.pack_into(region, at, *fields, zlib.crc32(head[:-4]))
            region[at + HEADER.size:at + HEADER.size + len(out.payload)] = out.payload
            peer.slot_request[slot] = out.request
            peer.inflight += 1
            peer.device.post_send([(_WR_SEND | slot, "out", at, HEADER.size + len(out.payload),
                                    True)])
        while peer.reads and peer.inflight < c.sq_depth:
            peer.inflight += 1
            peer.device.post_read(*peer.reads.popleft())

    def _complete(self, peer: _Peer, c: Any) -> None:
        if c.status != WC_SUCCESS:
            self._fail(f"rdma completion error: {STATUS_TEXT.get(c.status, 'unknown')} "
                       f"({c.status}) on a {c.opcode} to or from rank {peer.rank} "
                       f"(wr_id {c.wr_id:#x})")
        if c.opcode == "recv":
            self._arrive(peer, c.wr_id, c.byte_len)
            return
        peer.inflight -= 1
        kind, index = c.wr_id & ~_WR_INDEX, c.wr_id & _WR_INDEX
        if kind == _WR_SEND:
            peer.free_slots.append(index)
            req = peer.slot_request.pop(index, None)
            if req is not None:
                req.status = Status(self.rank, req._tag, req._nbytes)
        elif kind == _WR_CREDIT:
            peer.credit_read = False
            (count,) = CREDIT.unpack_from(peer.device.regions["peer_credit"])
            peer.peer_reposted = max(peer.peer_reposted, count)
        else:
            rid = index >> 20
            get = self._gets[rid]
            get.left -= 1
            if get.left == 0:
                self._got(peer, rid, get)

    def _arrive(self, peer: _Peer, slot: int, byte_len: int) -> None:
        """A message landed in bounce buffer ``slot``: check it, act on it, repost the
        buffer."""
        c = self.cfg
        bounce = peer.device.regions["bounce"]
        at = slot * c.bounce_bytes
        where = f"a message from rank {peer.rank}"
        if byte_len < HEADER.size:
            self._fail(f"{where} of {byte_len} bytes is shorter than a header")
        fields = HEADER.unpack_from(bounce, at)
        (magic, kind, src, comm, tag, seq, mid, nbytes, credit, crc, hcrc) = fields
        if magic != MSG_MAGIC or hcrc != zlib.crc32(bounce[at:at + HEADER.size - 4]) \
                or kind not in KIND_TEXT or src != peer.rank:
            self._fail(f"{where} failed its header check (magic {magic:#x}, kind {kind}, "
                       f"source {src})")
        if seq != peer.recv_seq + 1:
            self._fail(f"{where}: expected message {peer.recv_seq + 1}, got {seq}: a message "
                       f"was lost or reordered")
        peer.recv_seq = seq
        peer.peer_reposted = max(peer.peer_reposted, credit)
        data = None
        if kind == K_EAGER:
            if byte_len != HEADER.size + nbytes:
                self._fail(f"{where}: an eager message of {nbytes} bytes arrived as "
                           f"{byte_len - HEADER.size}")
            data = bytes(bounce[at + HEADER.size:at + HEADER.size + nbytes])
            if zlib.crc32(data) != crc:
                self._fail(f"{where}: eager message {seq} (tag {tag}) failed its payload "
                           f"check")
        # the buffer is free again: repost it and publish the count (the peer's credits)
        peer.device.post_recv([(slot, "bounce", at, c.bounce_bytes)])
        peer.reposted += 1
        CREDIT.pack_into(peer.device.regions["credit"], 0, peer.reposted)
        if kind == K_FIN:
            found = self._sends.pop(mid, None)
            if found is None or found[0] != peer.rank:
                self._fail(f"{where}: FIN for message {mid}, which is no rendezvous send "
                           f"waiting")
            peer.device.deregister(_rndv_region(mid))
            req = found[1]
            req.status = Status(self.rank, req._tag, req._nbytes)
            return
        self._next_aid += 1
        aid = self._next_aid
        a = _Arrival(src, comm, tag, kind, mid, nbytes, crc, data)
        rid = self._posted.earliest(comm, src, tag)
        if rid is None:
            self._unexpected.add(aid, aid, comm, src, tag)
            self._arrivals[aid] = a
        else:
            self._posted.remove(rid)
            self._deliver(rid, self._recvs[rid], a)

    def _deliver(self, rid: int, rec: _Recv, a: _Arrival) -> None:
        """Receive ``rid`` took message ``a``: finish it (eager) or start READing it."""
        if a.kind == K_EAGER:
            self._finish(rid, rec, a, a.data)
            return
        peer = self.peers[a.src]
        region = f"get{rid}"
        peer.device.register(region, bytearray(a.nbytes))
        piece = self.cfg.max_msg
        pieces = range(0, a.nbytes, piece)
        self._gets[rid] = _Get(rec, a, region, len(pieces))
        for k, off in enumerate(pieces):
            peer.reads.append((_WR_READ | rid << 20 | k, region, off, _rndv_region(a.mid), off,
                               min(piece, a.nbytes - off)))
        self._pump(peer)

    def _got(self, peer: _Peer, rid: int, get: _Get) -> None:
        """Every piece of a rendezvous payload landed: check it, send FIN, finish."""
        a = get.arrival
        data = bytes(peer.device.regions[get.region])
        peer.device.deregister(get.region)
        del self._gets[rid]
        if zlib.crc32(data) != a.crc:
            self._fail(f"rendezvous message {a.mid} from rank {a.src} (tag {a.tag}) failed its "
                       f"payload check after the READ")
        peer.backlog.append(_Out(K_FIN, a.comm, a.tag, a.mid, 0, 0))
        self._finish(rid, get.recv, a, data)

    def _finish(self, rid: int, rec: _Recv, a: _Arrival, data: bytes) -> None:
        self._recvs.pop(rid, None)
        n = min(a.nbytes, rec.nbytes)
        error = ""
        if a.nbytes > rec.nbytes:
            error = (f"MPI_ERR_TRUNCATE: a message of {a.nbytes} bytes from rank {a.src} "
                     f"(tag {a.tag}) is longer than the receive's {rec.nbytes} bytes")
        self.counts["received"] += 1
        rec.request.status = Status(a.src, a.tag, n, error, data=data[:n])


def _header_detail(device: Any, wr: tuple) -> dict[str, Any] | None:
    """The message header a send carries, read from its buffer, for a device trace."""
    _, region, offset, length, _ = wr
    if length < HEADER.size:
        return None
    (_, kind, src, comm, tag, seq, mid, nbytes, _, _, _) = HEADER.unpack_from(
        device.regions[region], offset)
    return {"kind": KIND_NAME.get(kind, str(kind)), "src": src, "comm": comm, "tag": tag,
            "seq": seq, "mid": mid, "bytes": nbytes}


def _status_detail(st: Status) -> dict[str, Any]:
    """A completed request's status, as a device trace's result carries it."""
    return {"status": {"source": st.source, "tag": st.tag, "count": st.count,
                       "error": st.error, "cancelled": st.cancelled}}


def _rndv_region(mid: int) -> str:
    return f"rndv{mid}"


# ---------------------------------------------------------------------- the sim transport
def open_endpoint(pair: Pair, rank: int, cfg: TaggedConfig | None = None) -> TaggedEndpoint:
    """Set up rank ``rank``'s endpoint of a two-rank job over ``pair``: a new RC queue pair (on
    the pair's transport: the sim device, or a verbs device) and a new side channel (in the
    rank's own process)."""
    cfg = cfg or TaggedConfig()
    device, side = open_link(pair, rank, endpoint_regions(cfg),
                             timeout_s=cfg.timeout_ms / 1000, qp_type=RC, cq_depth=cfg.cq_depth,
                             max_msg=cfg.max_msg, rq_depth=cfg.bounces, sq_depth=cfg.sq_depth)
    trace = device_trace.from_env(device_trace.TAGGED, rank, pair.transport, "python", cfg)
    try:
        return TaggedEndpoint(rank, {1 - rank: (device, side)}, cfg, trace)
    except BaseException:
        device.close()
        side.close()
        raise


def run_tagged(work: Callable[[TaggedEndpoint, int, Any], Any], args: tuple[Any, Any],
               cfg: TaggedConfig | None = None, **kw: Any) -> list[RankOutcome]:
    """Run ``work(endpoint, rank, arg)`` in two rank processes, each with a freshly set-up
    endpoint (closed after); their outcomes, rank 0 first."""
    return run_pair(functools.partial(_with_endpoint, cfg, work), args, **kw)


def _with_endpoint(cfg: TaggedConfig | None, work: Callable[[TaggedEndpoint, int, Any], Any],
                   pair: Pair, rank: int, arg: Any) -> Any:
    with open_endpoint(pair, rank, cfg) as ep:
        return work(ep, rank, arg)


def wait_all(requests: Iterable[Request], timeout: float | None = None) -> list[Status]:
    """Wait for each request in turn; their statuses."""
    return [r.wait(timeout) for r in requests]
