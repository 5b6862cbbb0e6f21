"""The reference gate engine: one rank of the gate window protocol as an implementation, sans
I/O in the manner of h11.

The engine never touches a queue pair or a socket. Each call is one protocol step: it takes an
application call (``call_gate``, ``call_big``, ``call_block``, ``consume``), an input
(``tcp_read`` with the item a read returned, ``completions`` with what a poll returned,
``timeout``, ``peer_closed``) or, for a step of its own, ``advance``; it returns what the rank
does in that step as ``Emitted``: receive and send work requests to post (wr_id, region,
offset, length, signaled), TCP items to write, the result of the call (ds4's error text, or
"") and log lines. ``view()`` is its abstract state in the spec's vocabulary (phase,
watermark, window flag, outstanding sends, error), which is what the conformance harness
compares after every step.

It is written from the protocol, not from the spec's code. What it shares with the spec is
vocabulary: the configuration's parameters (read as values, never through the spec's methods),
the wire constants, the phase names and ds4's error formats. What the protocol derives from the
parameters (a vector's chunks and their lengths, the slot of a gate, a big-gate window and its
send depth, a verify-block layer's work requests) it computes itself (``Geometry``), so that
lockstep conformance holds the spec's reading of the protocol against a second one rather than
against itself (tests/layout/test_layers.py enforces that).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from verbspec.refimpl.engines.common import EngineError
from verbspec.spec.gate import errors
from verbspec.spec.gate.constants import BIG_POLL_BATCH, POLL_BATCH, VECTOR_BUFFERS
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    ARM_BAR_SEND,
    ARM_POST,
    BATCH_HDR_READ,
    BATCH_HDR_SEND,
    BIG_BAR_READ,
    BIG_BAR_SEND,
    BIG_BEGIN,
    BIG_HDR_READ,
    BIG_HDR_SEND,
    BIG_LAYER,
    BIG_MAGIC,
    BIG_POST,
    BIG_XFER,
    BLOCK_BAR_READ,
    BLOCK_BAR_SEND,
    BLOCK_BARRIER,
    BLOCK_END,
    BLOCK_HDR_READ,
    BLOCK_HDR_SEND,
    BLOCK_POST,
    BLOCK_SEND,
    BLOCK_WAIT,
    CRASHED,
    DRAIN_POST,
    DRAIN_WAIT,
    FAILED,
    HEADER_MAGIC,
    HOLD,
    IDLE,
    INIT,
    SEND,
    WAIT,
    WINDOW_BARRIER,
)
from verbspec.spec.gate.wire import TAG_BLOCK, TAG_BULK, TAG_MASK, TAG_WARM, Hello, TcpItem

WC_SUCCESS = 0          # ibv_wc_status IBV_WC_SUCCESS


# what a driver does next (GateEngine.next_step)
SETUP, CALL, ADVANCE, READ, POLL, DEAD = "set up", "call", "advance", "read", "poll", "dead"
_DRIVER_STEP = {
    INIT: SETUP, IDLE: CALL, HOLD: CALL, FAILED: DEAD, CRASHED: DEAD,
    ARM_POST: ADVANCE, ARM_BAR_SEND: ADVANCE, SEND: ADVANCE, BIG_HDR_SEND: ADVANCE,
    DRAIN_POST: ADVANCE, BIG_BEGIN: ADVANCE, BIG_POST: ADVANCE, BIG_BAR_SEND: ADVANCE,
    BLOCK_HDR_SEND: ADVANCE, BLOCK_POST: ADVANCE, BLOCK_BAR_SEND: ADVANCE, BLOCK_SEND: ADVANCE,
    BATCH_HDR_SEND: ADVANCE,
    ARM_BAR_READ: READ, BIG_HDR_READ: READ, BIG_BAR_READ: READ, BLOCK_HDR_READ: READ,
    BLOCK_BAR_READ: READ, BATCH_HDR_READ: READ,
}
CQ_WAITS = (WAIT, DRAIN_WAIT, BIG_XFER, BLOCK_WAIT, BLOCK_END)
# the phases whose step posts work requests (WAIT's: the repost when the gate is done)
POSTING = frozenset({ARM_POST, SEND, WAIT, DRAIN_POST, BIG_POST, BIG_XFER, BLOCK_POST,
                     BLOCK_SEND})


@dataclass(frozen=True)
class WorkRequest:
    wr_id: int
    buf: str            # "in" | "out" | "stage" | "blk" | "bout"
    offset: int         # bytes into the region
    length: int
    signaled: bool = True


@dataclass(frozen=True)
class Completion:
    """One entry a poll returned, as ibv_wc gives it."""

    opcode: str         # "send" | "recv"
    wr_id: int
    status: int         # ibv_wc_status
    byte_len: int


@dataclass(frozen=True)
class Emitted:
    recvs: tuple[WorkRequest, ...] = ()
    sends: tuple[WorkRequest, ...] = ()
    tcp_out: tuple[TcpItem, ...] = ()
    result: str = ""
    log: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineView:
    phase: str
    recv_done: int
    last_gate_seq: int
    window_active: bool
    send_outstanding: int
    error: str


@dataclass(frozen=True)
class BeforePost:
    """The engine's fields as they were before a step that posted: what a refused post puts
    back, and what its text names."""

    phase: str
    seq: int
    recv_done: int
    last_gate_seq: int
    window_active: bool
    send_outstanding: int
    big_posted: int
    big_sent: int
    big_win: int
    block_layer: int
    block_posted: int
    block_active: bool


@dataclass(frozen=True)
class Geometry:
    """What the protocol derives from a rank's parameters, computed here from docs/gate.md (ds4's
    tp_gate_slot and its chunking), not taken from the spec."""

    cfg: GateConfig

    @property
    def chunks(self) -> int:
        """Messages one vector rides as: the message cap cuts it (ds4 allows two at most)."""
        c = self.cfg
        return (c.vec_bytes + c.max_msg - 1) // c.max_msg

    def chunk_bytes(self, k: int) -> int:
        """Bytes of a vector's chunk k: a whole message, but for the last, which holds what the
        whole messages before it leave."""
        c = self.cfg
        last = self.chunks - 1
        return c.vec_bytes - last * c.max_msg if k == last else c.max_msg

    def slot(self, seq: int) -> int:
        """The in-slot (and out-slot) of gate ``seq``. Gates count from 1; with no gates per
        token the slab is cycled through; else the gate's ordinal in its token picks the slot:
        the mask's ordinal-th set bit (lowest first), or start + ordinal * step."""
        c = self.cfg
        if not c.gates_per_token:
            return (seq - 1) % c.n_slots
        ordinal = (seq - 1) % c.gates_per_token
        if not c.slot_mask:
            return c.slot_start + ordinal * c.slot_step
        mask = c.slot_mask
        for _ in range(ordinal):
            mask &= mask - 1            # drop the lowest set bit
        return (mask & -mask).bit_length() - 1

    def big_window(self, depth: int) -> int:
        """A big-gate window for a receive depth: no deeper than big_depth or than the staging
        area holds messages, and at least one chunk."""
        c = self.cfg
        held = c.staging_bytes // c.max_msg
        return max(1, min(depth, c.big_depth, held))

    @property
    def big_send_depth(self) -> int:
        """Sends a big-gate window keeps in flight at most: the send queue, or big_depth."""
        return min(self.cfg.sq_depth, self.cfg.big_depth)

    def big_room(self, win: int, sent: int, done: int) -> int:
        """A big-gate window's next sub-batch: at most chain_max, the window's sends left, and
        what keeps its sends in flight (sent - completed) under the send depth."""
        return min(self.cfg.chain_max, win - sent, self.big_send_depth - (sent - done))

    @property
    def block_wrs(self) -> int:
        """Work requests of one verify-block layer, posted as one chain: each row's chunks."""
        return self.cfg.block_rows * self.chunks


@dataclass
class GateEngine:
    """One rank. ``grant`` is the receive depth it tells its peer (ds4: its own rq_depth)."""

    cfg: GateConfig
    grant: int = 0
    phase: str = INIT
    seq: int = 0
    recv_done: int = 0
    last_gate_seq: int = 0
    window_active: bool = False
    send_outstanding: int = 0
    error: str = ""
    drain_recvs: int = 0
    drain_sends: int = 0
    big_no: int = 0
    big_chunks: int = 0
    big_depth: int = 0
    big_base: int = 0
    big_win: int = 0
    big_posted: int = 0
    big_sent: int = 0
    big_recvd: set[int] = field(default_factory=set)
    big_send_done: int = 0
    barrier_tag: int = 0
    in_block: bool = False          # the application's verify block is in progress
    batching: bool = False          # ... as batch gates (DS4_TP_DISABLE_VERIFY_WINDOW)
    block_active: bool = False      # its receives are armed (after the drain)
    block_layer: int = 0
    block_posted: int = 0
    block_recv_done: int = 0
    # the engine as it was before its last step that posted, for a post that then failed
    before_post: BeforePost | None = field(default=None, repr=False, compare=False)
    # what the protocol derives from the parameters, as this engine computes it
    geo: Geometry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.grant = self.grant or self.cfg.rq_depth
        self.geo = Geometry(self.cfg)

    def copy(self) -> GateEngine:
        """An engine that goes on from here as this one would, sharing nothing that a step
        changes (see ``__deepcopy__``)."""
        return self.__deepcopy__({})

    def __deepcopy__(self, memo: dict[int, Any]) -> GateEngine:
        """A copy of the engine's state alone: of its fields only the big-gate window's
        receive set changes in place, so it alone is copied, and the rest (numbers, texts,
        flags, the configuration and its geometry, ``before_post``: all immutable) shared;
        what a subclass keeps of its own is deep-copied."""
        new = memo[id(self)] = object.__new__(type(self))
        state = new.__dict__
        state.update(self.__dict__)
        state["big_recvd"] = set(self.big_recvd)
        if len(state) > len(_FIELDS):
            for k in state.keys() - _FIELDS:
                state[k] = copy.deepcopy(state[k], memo)
        return new

    # ------------------------------------------------------------------ the view
    def view(self) -> EngineView:
        return EngineView(self.phase, self.recv_done, self.last_gate_seq, self.window_active,
                          self.send_outstanding, self.error)

    def next_step(self) -> str:
        """What a driver does next: SETUP, CALL (the application's turn), ADVANCE (the engine
        has a step of its own), READ (a TCP item), POLL (completions, watching the deadline
        and the peer) or DEAD (failed or crashed: the error says why)."""
        if self.phase in _DRIVER_STEP:
            return _DRIVER_STEP[self.phase]
        if self.phase == WAIT:
            return ADVANCE if self.recv_done >= self.seq else POLL
        if self.phase == DRAIN_WAIT:
            n = self.cfg.window * self.chunks
            done = (self.drain_recvs >= n and self.drain_sends >= n
                    and not self.send_outstanding)
            return ADVANCE if done else POLL
        if self.phase == BLOCK_WAIT:
            return ADVANCE if self._layer_arrived() else POLL
        if self.phase == BLOCK_END:
            return ADVANCE if self._block_complete() else POLL
        # BIG_XFER: sends to post, or the window complete
        room = self._big_room()
        complete = (self.big_sent == self.big_win and len(self.big_recvd) == self.big_win
                    and self.big_send_done >= self.big_win)
        return ADVANCE if room > 0 or complete else POLL

    @property
    def chunks(self) -> int:
        return self.geo.chunks

    def _need(self, *phases: str) -> None:
        if self.phase not in phases:
            raise EngineError(f"the engine is in phase {self.phase}, not {' or '.join(phases)}")

    def _fail(self, text: str) -> Emitted:
        self.phase, self.error = FAILED, text
        return Emitted(result=text)

    def _wr(self, wr_id: int, buf: str, slot: int, offset: int, length: int) -> WorkRequest:
        """A signaled work request (the protocol signals every one)."""
        stride = self.cfg.vec_bytes if buf in VECTOR_BUFFERS else self.cfg.max_msg
        return WorkRequest(wr_id, buf, slot * stride + offset, length)

    def _gate_chain(self, buf: str, seq: int, last_only_tagged: bool) -> tuple[WorkRequest, ...]:
        """One WR per chunk of gate ``seq``'s vector; a receive chain tags only its last chunk
        with the seq, so the watermark moves when the slot is whole."""
        g, last = self.geo, self.chunks - 1
        return tuple(self._wr(seq if (k == last or not last_only_tagged) else 0, buf,
                              g.slot(seq), k * self.cfg.max_msg, g.chunk_bytes(k))
                     for k in range(self.chunks))

    # ------------------------------------------------------------------ application calls
    def setup(self, peer: Hello | None = None) -> Emitted:
        """Setup, with the peer's hello where the driver has one: a peer built with another
        receive window or message cap is refused."""
        self._need(INIT)
        c = self.cfg
        if peer is not None:
            for what, theirs, ours in (("receive window", peer.window, c.window),
                                       ("message cap", peer.max_msg, c.max_msg)):
                if theirs != ours:
                    return self._fail(errors.HELLO_MISMATCH(what=what, peer=theirs, ours=ours))
        self.phase = IDLE
        log = ((errors.CHUNKED_VECTORS(vec_bytes=c.vec_bytes, max_msg=c.max_msg),)
               if self.chunks == 2 else ())
        return Emitted(log=log)

    def call_gate(self, layer: int, gate: int, seq: int) -> Emitted:
        """gate(layer, gate, seq): checked before anything is posted."""
        self._need(IDLE)
        if layer * 2 + gate != self.geo.slot(seq):
            return self._fail(errors.GATE_ORDER(layer=layer, gate=gate, seq=seq))
        if seq != self.last_gate_seq + 1:
            return self._fail(errors.GATE_SEQ_ORDER(seq=seq, last=self.last_gate_seq))
        self.seq = seq
        self.phase = SEND if self.window_active else ARM_POST
        return Emitted()

    def call_big(self, chunks: int) -> Emitted:
        self._need(IDLE)
        self.big_no += 1
        self.big_chunks, self.big_base = chunks, 0
        self.barrier_tag = 0        # each call's windows write barrier bytes 1, 2, ...
        self.phase = BIG_HDR_SEND
        return Emitted()

    def call_block(self) -> Emitted:
        """ds4_tp_batch_block_begin(rows, layers), with the header exchange that brings both
        ranks to the drain together (ds4 drains at once)."""
        self._need(IDLE)
        self.in_block = True
        self.block_layer = self.block_posted = self.block_recv_done = 0
        if self.cfg.verify_window == "off":
            # the begin returns at once: each layer is a batch gate
            self.batching = True
            self._begin_batch(0)
        else:
            self.phase = BLOCK_HDR_SEND
        return Emitted()

    def _begin_batch(self, layer: int) -> None:
        """ds4_tp_batch_gate_exchange outside a verify window: the layer's rows as one
        big-gate transfer, its seq the next big-gate number, its barrier bytes from 1."""
        c = self.cfg
        self.block_layer = layer
        self.big_no += 1
        self.big_chunks = -(-(c.block_rows * c.vec_bytes) // c.max_msg)
        self.big_base = self.barrier_tag = 0
        self.phase = BATCH_HDR_SEND

    def consume(self) -> Emitted:
        """The application has read the gate's in-slot."""
        self._need(HOLD)
        self.phase = IDLE
        return Emitted()

    # ------------------------------------------------------------------ the engine's own steps
    def advance(self) -> Emitted:
        """The rank's next step of its own: what it posts or writes next."""
        step = {ARM_POST: self._arm, ARM_BAR_SEND: self._window_barrier, SEND: self._send_gate,
                WAIT: self._gate_done, BIG_HDR_SEND: self._write_header,
                DRAIN_POST: self._post_dummies, DRAIN_WAIT: self._drain_done,
                BIG_BEGIN: self._begin_window, BIG_POST: self._post_staging,
                BIG_BAR_SEND: self._big_barrier, BIG_XFER: self._big_progress,
                BLOCK_HDR_SEND: self._write_block_header, BLOCK_POST: self._arm_block,
                BLOCK_BAR_SEND: self._block_barrier, BLOCK_SEND: self._block_gate,
                BLOCK_WAIT: self._block_layer_done, BLOCK_END: self._end_block,
                BATCH_HDR_SEND: self._write_batch_header,
                }.get(self.phase)
        if step is None:
            raise EngineError(f"the engine has no step of its own in phase {self.phase}")
        before = (BeforePost(*(getattr(self, f.name) for f in fields(BeforePost)))
                  if self.phase in POSTING else None)
        out = step()
        self.before_post = before if out.recvs or out.sends else None
        return out

    def _arm(self) -> Emitted:
        recvs: tuple[WorkRequest, ...] = ()
        for q in range(self.seq, self.seq + self.cfg.window):
            recvs += self._gate_chain("in", q, last_only_tagged=True)
        self.phase = ARM_BAR_SEND
        return Emitted(recvs=recvs)

    def _window_barrier(self) -> Emitted:
        self.phase = ARM_BAR_READ
        return Emitted(tcp_out=(TcpItem("byte", WINDOW_BARRIER),))

    def _send_gate(self) -> Emitted:
        sends = self._gate_chain("out", self.seq, last_only_tagged=False)
        self.send_outstanding += len(sends)
        self.phase = WAIT
        return Emitted(sends=sends)

    def _gate_done(self) -> Emitted:
        if self.recv_done < self.seq:
            raise EngineError(f"gate {self.seq} is not complete (recv_done {self.recv_done})")
        recvs = self._gate_chain("in", self.seq + self.cfg.window, last_only_tagged=True)
        self.last_gate_seq = self.seq
        self.phase = HOLD
        return Emitted(recvs=recvs)

    def _write_header(self) -> Emitted:
        self.phase = BIG_HDR_READ
        return Emitted(tcp_out=(TcpItem("header", self.big_no, self.big_chunks, self.grant),))

    def _big_room(self) -> int:
        return self.geo.big_room(self.big_win, self.big_sent, self.big_send_done)

    def _post_dummies(self) -> Emitted:
        # one dummy per armed receive, each as long as the chunk it stands for (dummy i:
        # chunk i mod chunks), read from the staging scratch at that chunk's offset
        n = self.cfg.window * self.chunks
        sends = tuple(self._wr(TAG_BULK | (i + 1), "stage", i % self.chunks, 0,
                               self.geo.chunk_bytes(i % self.chunks)) for i in range(n))
        self.drain_recvs = self.drain_sends = 0
        self.phase = DRAIN_WAIT
        return Emitted(sends=sends)

    def _drain_done(self) -> Emitted:
        n = self.cfg.window * self.chunks
        if self.drain_recvs < n or self.drain_sends < n or self.send_outstanding:
            raise EngineError(f"the drain is not over ({self.drain_recvs}/{n} receives, "
                              f"{self.drain_sends}/{n} sends, {self.send_outstanding} "
                              f"outstanding)")
        self.recv_done, self.window_active = self.last_gate_seq, False
        # a drain starts only once the big-gate, verify-block or batch header is read
        self.phase = BLOCK_POST if self.in_block and not self.batching else BIG_BEGIN
        return Emitted()

    def _begin_window(self) -> Emitted:
        if self.window_active:
            return self._fail(errors.BIG_UNAVAILABLE())
        self.big_win = min(self.big_depth, self.big_chunks - self.big_base)
        self.big_posted = self.big_sent = self.big_send_done = 0
        self.big_recvd = set()
        self.phase = BIG_POST
        return Emitted()

    def _post_staging(self) -> Emitted:
        c = self.cfg
        n = min(c.chain_max, self.big_win - self.big_posted)
        first = self.big_posted
        recvs = tuple(self._wr(TAG_BULK | (i + 1), "stage", i, 0, self._big_len(i))
                      for i in range(first, first + n))
        self.big_posted += n
        if self.big_posted == self.big_win:
            self.phase = BIG_BAR_SEND
        return Emitted(recvs=recvs)

    def _big_len(self, i: int) -> int:
        """Bytes of the window's chunk i: whole messages but for the big gate's last chunk."""
        return self._big_len_of(self.big_base + i)

    def _big_len_of(self, k: int) -> int:
        """Bytes of the transfer's chunk k: a big gate's, or a batch gate's rows."""
        c = self.cfg
        if k != self.big_chunks - 1:
            return c.max_msg
        if self.batching:
            return c.block_rows * c.vec_bytes - k * c.max_msg
        return c.big_last_bytes or c.max_msg

    def _big_barrier(self) -> Emitted:
        self.barrier_tag = (self.barrier_tag + 1) & 0xFF
        self.phase = BIG_BAR_READ
        return Emitted(tcp_out=(TcpItem("byte", self.barrier_tag),))

    def _big_progress(self) -> Emitted:
        """Post the next sub-batch of sends from staging, or, with the window's every receive and
        send complete, move to the next window."""
        room = self._big_room()
        if room > 0:
            first = self.big_sent
            sends = tuple(self._wr(TAG_BULK | (i + 1), "stage", i, 0, self._big_len(i))
                          for i in range(first, first + room))
            self.big_sent += room
            return Emitted(sends=sends)
        if not (self.big_sent == self.big_win and len(self.big_recvd) == self.big_win
                and self.big_send_done >= self.big_win):
            raise EngineError("the big-gate window is neither sendable nor complete")
        self.big_base += self.big_win
        if self.big_base < self.big_chunks:
            self.phase = BIG_BEGIN
        elif self.batching and self.block_layer + 1 < self.cfg.block_layers:
            self._begin_batch(self.block_layer + 1)
        else:
            # a big gate is over, or a block's last batch gate (its end returns at once)
            self.in_block = self.batching = False
            self.phase = IDLE
        return Emitted()

    def _write_batch_header(self) -> Emitted:
        self.phase = BATCH_HDR_READ
        return Emitted(tcp_out=(TcpItem("batch", self.block_layer, self.cfg.block_rows,
                                        self.big_no),))

    def _read_batch_header(self, item: TcpItem) -> Emitted:
        """The peer's batch header: its layer, rows and seq must be this rank's. ds4 reads a
        big-gate header's tag as its rows; a shorter write it never reads whole."""
        want = (self.block_layer, self.cfg.block_rows, self.big_no)
        if item.kind == "header":
            got = (BIG_LAYER, BIG_MAGIC, item.value)
        elif item.kind == "batch":
            got = (item.value, item.chunks, item.depth)
        else:
            return self._fail(errors.BATCH_HEADER_MISFRAMED(item=item.describe()))
        if got != want:
            return self._fail(errors.BATCH_DESYNC(got_layer=got[0], got_rows=got[1],
                                                  got_seq=got[2], layer=want[0],
                                                  rows=want[1], seq=want[2]))
        # no depth in the header: each rank windows by its own
        self.big_depth = self.geo.big_window(self.grant)
        self.phase = DRAIN_POST if self.window_active else BIG_BEGIN
        return Emitted()

    # ------------------------------------------------------------------ verify block
    def _write_block_header(self) -> Emitted:
        self.phase = BLOCK_HDR_READ
        c = self.cfg
        return Emitted(tcp_out=(TcpItem("block", c.block_layers, c.block_rows),))

    def _block_rows(self, region: str, layer: int, receive: bool) -> tuple[WorkRequest, ...]:
        """A layer's rows, one WR per chunk. A receive tags a row's last chunk with
        BLOCK | (row + 1), row counted through the block, and its other chunks 0; every send
        carries BLOCK | 1."""
        c, last = self.cfg, self.chunks - 1
        out = []
        for row in range(layer * c.block_rows, (layer + 1) * c.block_rows):
            tag = TAG_BLOCK | (row + 1) if receive else TAG_BLOCK | 1
            for k in range(self.chunks):
                wr_id = tag if k == last or not receive else 0
                out.append(self._wr(wr_id, region, row, k * c.max_msg,
                                    self.geo.chunk_bytes(k)))
        return tuple(out)

    def _post_layer(self, layer: int) -> tuple[tuple[WorkRequest, ...], str]:
        """A layer's receives, or, when they outnumber the receive depth, none and ds4's
        silent failure."""
        if self.geo.block_wrs > self.grant:
            return (), errors.BLOCK_RECV_DEPTH(layer=layer, wrs=self.geo.block_wrs,
                                               depth=self.grant)
        self.block_posted = layer + 1
        return self._block_rows("blk", layer, receive=True), ""

    def _arm_block(self) -> Emitted:
        recvs, failure = self._post_layer(0)
        if failure:
            return self._fail(failure)
        self.block_active = True
        self.phase = BLOCK_BAR_SEND
        return Emitted(recvs=recvs)

    def _block_barrier(self) -> Emitted:
        self.phase = BLOCK_BAR_READ
        return Emitted(tcp_out=(TcpItem("byte", BLOCK_BARRIER),))

    def _block_gate(self) -> Emitted:
        """A layer's batch gate: the next layer's receives first, then this layer's sends."""
        c, layer = self.cfg, self.block_layer
        recvs: tuple[WorkRequest, ...] = ()
        if layer + 1 < c.block_layers:
            recvs, failure = self._post_layer(layer + 1)
            if failure:
                return self._fail(failure)
        wrs = self.geo.block_wrs
        if wrs > self.grant // 2 or wrs > c.sq_depth:
            self.phase, self.error = FAILED, errors.BLOCK_SEND_DEPTH(
                layer=layer, wrs=wrs, half=self.grant // 2, sq_depth=c.sq_depth)
            return Emitted(recvs=recvs, result=self.error)
        sends = self._block_rows("bout", layer, receive=False)
        self.send_outstanding += len(sends)
        self.phase = BLOCK_WAIT
        return Emitted(recvs=recvs, sends=sends)

    def _layer_arrived(self) -> bool:
        return self.block_recv_done >= (self.block_layer + 1) * self.cfg.block_rows

    def _block_complete(self) -> bool:
        c = self.cfg
        return (self.block_recv_done >= c.block_layers * c.block_rows
                and not self.send_outstanding)

    def _block_layer_done(self) -> Emitted:
        if not self._layer_arrived():
            raise EngineError(f"verify-block layer {self.block_layer} has not arrived "
                              f"({self.block_recv_done} rows)")
        if self.block_layer + 1 < self.cfg.block_layers:
            self.block_layer += 1
            self.phase = BLOCK_SEND
        else:
            self.phase = BLOCK_END
        return Emitted()

    def _end_block(self) -> Emitted:
        if not self._block_complete():
            raise EngineError(f"the verify block is not over ({self.block_recv_done} rows, "
                              f"{self.send_outstanding} sends outstanding)")
        self.in_block = self.block_active = False
        self.phase = IDLE
        return Emitted()

    # ------------------------------------------------------------------ inputs
    def tcp_read(self, item: TcpItem) -> Emitted:
        """What a read of the TCP side channel returned, in a phase that reads it."""
        self._need(ARM_BAR_READ, BIG_HDR_READ, BIG_BAR_READ, BLOCK_HDR_READ, BLOCK_BAR_READ,
                   BATCH_HDR_READ)
        first = item.value if item.kind == "byte" else HEADER_MAGIC & 0xFF
        if self.phase == BLOCK_BAR_READ:
            if item.kind != "byte" or item.value != BLOCK_BARRIER:
                return self._fail(errors.WINDOW_BARRIER_MISMATCH(got=first, want=BLOCK_BARRIER))
            self.phase = BLOCK_SEND
            return Emitted()
        if self.phase == BLOCK_HDR_READ:
            return self._read_block_header(item)
        if self.phase == BATCH_HDR_READ:
            return self._read_batch_header(item)
        if self.phase == ARM_BAR_READ:
            if item.kind != "byte" or item.value != WINDOW_BARRIER:
                return self._fail(errors.WINDOW_BARRIER_MISMATCH(got=first, want=WINDOW_BARRIER))
            self.window_active, self.phase = True, SEND
            return Emitted()
        if self.phase == BIG_BAR_READ:
            if item.kind != "byte" or item.value != self.barrier_tag:
                return self._fail(errors.BIG_BARRIER())
            self.phase = BIG_XFER
            return Emitted()
        return self._read_header(item)

    def _read_block_header(self, item: TcpItem) -> Emitted:
        c = self.cfg
        if item.kind != "block":
            return self._fail(errors.BLOCK_HEADER_MISFRAMED(item=item.describe()))
        if (item.value, item.chunks) != (c.block_layers, c.block_rows):
            return self._fail(errors.BLOCK_HEADER_MISMATCH(
                layers=c.block_layers, rows=c.block_rows, peer_layers=item.value,
                peer_rows=item.chunks))
        self.phase = DRAIN_POST if self.window_active else BLOCK_POST
        return Emitted()

    def _read_header(self, item: TcpItem) -> Emitted:
        if item.kind != "header":
            return self._fail(errors.BIG_HEADER_MISFRAMED(item=item.describe()))
        if item.value != self.big_no:
            return self._fail(errors.BIG_DESYNC(got_layer=BIG_LAYER, got_tag=BIG_MAGIC,
                                                got_seq=item.value, layer=BIG_LAYER,
                                                seq=self.big_no))
        if item.chunks != self.big_chunks:
            return self._fail(errors.BIG_SIZE_MISMATCH(big=self.big_no, chunks=self.big_chunks,
                                                       peer_chunks=item.chunks))
        self.big_depth = self.geo.big_window(min(self.grant, item.depth))
        self.phase = DRAIN_POST if self.window_active else BIG_BEGIN
        return Emitted()

    def poll_size(self) -> int:
        """How many completions the next poll asks for (ds4's ibv_wc array in this wait)."""
        self._need(*CQ_WAITS)
        if self.phase == DRAIN_WAIT:
            return 2 * self.cfg.window + 1
        return BIG_POLL_BATCH if self.phase == BIG_XFER else POLL_BATCH

    def completions(self, polled: tuple[Completion, ...]) -> Emitted:
        """Account for what one poll returned, in order; an error status ends the wait."""
        self._need(*CQ_WAITS)
        for c in polled:
            if c.status != WC_SUCCESS:
                return self._fail(self._completion_error(c))
            if c.wr_id & TAG_WARM:
                continue        # a warm-up leftover from setup, not one of ours
            if c.opcode == "send":
                self._send_completed(c)
                continue
            failure = self._received(c)
            if failure:
                return self._fail(failure)
        return Emitted()

    def _send_completed(self, c: Completion) -> None:
        # the drain and a big-gate window count their own BULK sends; any other send
        # completion leaves send_outstanding
        if c.wr_id & TAG_BULK and self.phase == DRAIN_WAIT:
            self.drain_sends += 1
        elif c.wr_id & TAG_BULK and self.phase == BIG_XFER:
            self.big_send_done += 1
        else:
            self.send_outstanding = max(0, self.send_outstanding - 1)

    def _received(self, c: Completion) -> str:
        """Account for one receive completion; the error text if the window refuses it."""
        if self.phase == DRAIN_WAIT:
            self.drain_recvs += 1
        elif c.wr_id & TAG_BLOCK and self.phase != BIG_XFER:
            # a verify-block row, whichever of the decode-style waits polls it
            if c.byte_len == 0:
                return errors.BLOCK_EMPTY()
            self.block_recv_done += 1
        elif self.phase == BIG_XFER:
            # the tag, then the 1-based index (range, duplicate), then the length
            if not c.wr_id & TAG_BULK:
                return errors.BIG_UNTAGGED(wr_id=c.wr_id)
            idx = (c.wr_id & ~TAG_MASK) - 1
            if not 0 <= idx < self.big_win or idx in self.big_recvd:
                return errors.BIG_INVALID(wr_id=c.wr_id)
            if c.byte_len != self._big_len(idx):
                return errors.BIG_LENGTH(chunk=idx, got=c.byte_len, want=self._big_len(idx))
            self.big_recvd.add(idx)
        else:
            self.recv_done = max(self.recv_done, c.wr_id)
        return ""

    def _completion_error(self, c: Completion) -> str:
        status = errors.WC_STATUS(status=c.status)
        if self.phase == DRAIN_WAIT:
            return errors.DRAIN_COMPLETION(status=status)
        if self.phase == BIG_XFER:
            return errors.BIG_COMPLETION(status=status)
        return errors.GATE_COMPLETION(status=status, wr_id=c.wr_id)

    # ------------------------------------------------------------------ the environment
    def timeout(self) -> Emitted:
        """The wait's deadline passed: a CQ wait's, or a data-socket read's (its receive
        timeout is the gate timeout)."""
        self._need(ARM_BAR_READ, BIG_HDR_READ, BIG_BAR_READ, BLOCK_HDR_READ, BLOCK_BAR_READ,
                   BATCH_HDR_READ, *CQ_WAITS)
        c = self.cfg
        if self.phase == BLOCK_WAIT:
            want = (self.block_layer + 1) * c.block_rows
            return self._fail(errors.BLOCK_TIMEOUT(layer=self.block_layer,
                                                   rows=self.block_recv_done, want=want))
        if self.phase == BLOCK_END:
            return self._fail(errors.BLOCK_END_TIMEOUT(
                rows=self.block_recv_done, want=c.block_layers * c.block_rows,
                pending=self.send_outstanding))
        if self.phase == BLOCK_HDR_READ:
            return self._fail(errors.BLOCK_HEADER_FAILED(reason=errors.READ_TIMEOUT_ERRNO))
        if self.phase == BATCH_HDR_READ:
            return self._fail(errors.BATCH_HEADER_FAILED(reason=errors.READ_TIMEOUT_ERRNO))
        if self.phase == BLOCK_BAR_READ:
            return self._fail(errors.WINDOW_BARRIER_TIMEOUT())
        if self.phase == WAIT:
            return self._fail(errors.GATE_TIMEOUT(seq=self.seq, recv_done=self.recv_done))
        if self.phase == DRAIN_WAIT:
            return self._fail(errors.DRAIN_TIMEOUT(recvs=self.drain_recvs,
                                                   want=self.cfg.window * self.chunks))
        if self.phase == ARM_BAR_READ:
            return self._fail(errors.WINDOW_BARRIER_TIMEOUT())
        if self.phase == BIG_HDR_READ:
            return self._fail(errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=self.big_no,
                                                       reason=errors.READ_TIMEOUT_ERRNO))
        if self.phase == BIG_BAR_READ:
            return self._fail(errors.BIG_BARRIER())
        return self._fail(errors.BIG_TIMEOUT(recvs=len(self.big_recvd), chunks=self.big_win,
                                             sends=self.big_send_done, sent=self.big_sent))

    def peer_closed(self) -> Emitted:
        """The peer's TCP socket closed, seen by a wait's liveness check or by a read."""
        text = {WAIT: errors.GATE_PEER, DRAIN_WAIT: errors.DRAIN_PEER, BIG_XFER: errors.BIG_PEER,
                ARM_BAR_READ: errors.WINDOW_BARRIER_CLOSED,
                BIG_BAR_READ: errors.BIG_BARRIER, BLOCK_WAIT: errors.BLOCK_PEER,
                BLOCK_BAR_READ: errors.WINDOW_BARRIER_CLOSED}.get(self.phase)
        if text is not None:
            return self._fail(text())
        if self.phase == BLOCK_HDR_READ:
            return self._fail(errors.BLOCK_HEADER_FAILED(reason=errors.PEER_CLOSED_ERRNO))
        if self.phase == BATCH_HDR_READ:
            return self._fail(errors.BATCH_HEADER_FAILED(reason=errors.PEER_CLOSED_ERRNO))
        self._need(BIG_HDR_READ)
        return self._fail(errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=self.big_no,
                                                   reason=errors.PEER_CLOSED_ERRNO))

    def post_failed(self, posted: int) -> Emitted:
        """The driver's post of what the last step emitted was refused once ``posted`` of its
        work requests (receives first, then sends) were up: they stay posted, the rest of the
        step never happened, and the rank fails with ds4's text for the refused call."""
        b = self.before_post
        if b is None:
            raise EngineError("no step of the engine has posted anything to fail")
        text = self._post_failure(b, posted)
        for f in fields(BeforePost):
            setattr(self, f.name, getattr(b, f.name))
        self.before_post = None
        return self._fail(text)

    def _post_failure(self, b: BeforePost, posted: int) -> str:
        """ds4's text for a post refused after ``posted`` WRs of the step ``b`` was to take."""
        reason, c = errors.POST_ERRNO, self.cfg
        if b.phase == ARM_POST:     # a chain per gate: the gates before the refused one stay
            return errors.POST_RECV(seq=b.seq + posted // self.chunks, reason=reason)
        if b.phase == SEND:
            return errors.POST_SEND(reason=reason)
        if b.phase == WAIT:
            return errors.POST_RECV(seq=b.seq + c.window, reason=reason)
        if b.phase == DRAIN_POST:
            return errors.DRAIN_POST_FAILED(reason=reason)
        if b.phase == BIG_POST:
            return errors.BIG_POST_RECV(first=b.big_posted, chunks=b.big_win, reason=reason)
        if b.phase == BIG_XFER:
            # completions are not reaped by a post: big_send_done is as it was before it
            room = self.geo.big_room(b.big_win, b.big_sent, self.big_send_done)
            return errors.BIG_POST_SEND(wrs=room, reason=reason)
        if b.phase == BLOCK_POST:
            return errors.BLOCK_POST_RECV(layer=0, reason=reason)
        ahead = self.geo.block_wrs if b.block_layer + 1 < c.block_layers else 0
        if posted < ahead:
            return errors.BLOCK_POST_RECV(layer=b.block_layer + 1, reason=reason)
        return errors.BLOCK_POST_SEND(layer=b.block_layer, reason=reason)

    def poll_failed(self) -> Emitted:
        """ibv_poll_cq returned an error in a wait: silent but in a big-gate window."""
        self._need(*CQ_WAITS)
        if self.phase == DRAIN_WAIT:
            return self._fail(errors.DRAIN_POLL())
        if self.phase == BIG_XFER:
            c = self.cfg
            total = (self.big_chunks - 1) * c.max_msg + self._big_len_of(self.big_chunks - 1)
            return self._fail(errors.BIG_POLL(offset=self.big_base * c.max_msg, bytes=total,
                                              reason=errors.POLL_ERRNO))
        return self._fail(errors.CQ_POLL())

    def crash(self) -> None:
        """The process died: nothing more comes from this rank."""
        self.phase, self.error = CRASHED, "crashed"


# the engine's own fields (a subclass may keep more)
_FIELDS = frozenset(f.name for f in fields(GateEngine))
