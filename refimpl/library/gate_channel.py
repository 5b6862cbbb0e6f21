"""``GateChannel``: one rank's end of the gate window protocol, as a library.

The channel owns a gate engine (sans I/O: it says what to post, write and wait for) and runs it
on a transport: a device that posts work requests and polls completions (``SimDevice``, or a
real verbs device) and the TCP side channel. ``exchange`` sends this rank's vector for one gate
and returns the peer's; ``drain`` takes the armed decode window down (both ranks call it at the
same point); ``big_exchange`` moves a bulk buffer both ways in big-gate windows, once the window
is drained. Every failure ends in ``GateError`` carrying the protocol's message, and the channel
then refuses further use until it is set up again (a new channel).

Every payload is checked: a vector travels with a 16-byte trailer (its gate's seq, a CRC-32 of
the vector, a magic) and a big-gate chunk with one of its own (the big gate's number, the chunk's
index, a CRC-32), checked on arrival. UC loses a message without a word and the next one then
lands in the lost one's receive; the watermark cannot see that, the trailer does, so a wrong
payload is an error, never a result. ``vector_bytes`` is what a caller's vector holds (the
configuration's ``vec_bytes`` less the trailer).

Memory, as ds4 lays out its slab: the ``in`` and ``out`` regions hold one vector per slot;
``stage`` receives a big-gate window's chunks and ``stage_out`` holds the chunks it sends (the
engine names both "stage"; their roles differ by direction).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from verbspec.refimpl.engines import gate_engine as ge
from verbspec.refimpl.transport.side_channel import BYTE, HEADER_KIND, SideChannelTimeout
from verbspec.refimpl.transport.sim_device import DeviceError, Regions
from verbspec.spec.gate.params import PARAMS, GateConfig, make_config
from verbspec.spec.gate.state import BIG_HDR_READ, BIG_XFER, DRAIN_WAIT
from verbspec.spec.gate.wire import TAG_MASK, Hello, TcpItem
from verbspec.spec.params import ParamError, check_values

TRAILER = struct.Struct("<QII")     # seq (or big-gate number, chunk index), CRC-32, magic
GATE_MAGIC, BIG_MAGIC = 0x54475356, 0x42475356      # "VSGT", "VSGB"
HELLO = struct.Struct("<III")       # magic, receive window, message cap
HELLO_MAGIC = 0x48475356            # "VSGH"
TIMEOUT_ENV = "VERBSPEC_GATE_TIMEOUT_MS"
PROFILE_ENV = "VERBSPEC_GATE_PROFILE"   # post and peer-wait means, gates 0 and 1
TRACE_ENV = "VERBSPEC_GATE_TRACE"       # every gate's layer, gate, seq and slot
PROFILE_EVERY = 430
POLL_WAIT_S = 0.001         # a poll that finds nothing sleeps on the CQ this long at most
PEER_CHECK_EVERY = 64       # empty polls between liveness checks of the peer


class GateError(RuntimeError):
    """The protocol failed; the message is the protocol's (ds4's text where ds4 has one)."""


class Device(Protocol):
    regions: Regions

    def post_recv(self, wrs: list[tuple[int, str, int, int]]) -> None: ...
    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None: ...
    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Any, ...]: ...


class Side(Protocol):
    def write(self, item: TcpItem) -> None: ...
    def read(self, kind: str) -> TcpItem | None: ...
    def write_bytes(self, data: bytes) -> None: ...
    def read_bytes(self, n: int) -> bytes | None: ...
    def peer_closed(self) -> bool: ...


def gate_config(values: dict[str, Any] | None = None,
                environ: Mapping[str, str] = os.environ) -> GateConfig:
    """The protocol's configuration, validated exactly as the spec validates it (ParamError
    naming the parameter). ``VERBSPEC_GATE_TIMEOUT_MS`` in the environment sets timeout_ms
    (an error naming it when it is not an integer in 1..60000)."""
    values = dict(values or {})
    text = environ.get(TIMEOUT_ENV)
    if text is not None:
        try:
            values["timeout_ms"] = int(text)
            return make_config(check_values(PARAMS, values))
        except (ValueError, ParamError):
            raise ParamError(f"{TIMEOUT_ENV}={text!r}: expected an integer number of "
                             f"milliseconds in 1..60000") from None
    return make_config(check_values(PARAMS, values))


def region(n: int) -> bytearray | mmap.mmap:
    """``n`` zeroed bytes of memory for a region, in pages of their own (an anonymous
    mapping), as registered memory is. A channel's regions are megabytes (the staging areas)
    and a process sets channels up again and again: a mapping goes back to the system when
    its channel is dropped, where megabytes from the C heap would stay with the process as a
    free hole that other allocations split, so that the next channel's regions may not fit
    and the heap grows. A page counts as resident only once it is touched."""
    return mmap.mmap(-1, n) if n else bytearray()


def regions_for(cfg: GateConfig) -> Regions:
    """The rank's registered memory for a configuration."""
    # the big-gate window's chunks; the drain's dummies read a vector's worth of it
    stage = max(cfg.big_window(cfg.rq_depth) * cfg.max_msg, cfg.vec_bytes)
    return {"in": region(cfg.n_slots * cfg.vec_bytes),
            "out": region(cfg.n_slots * cfg.vec_bytes),
            "stage": region(stage), "stage_out": region(stage)}


@dataclass
class _BigGate:
    """The big gate in progress: the caller's data, what arrived, the window's place."""

    number: int
    data: bytes
    out: bytearray
    base: int = 0           # chunks of earlier windows
    win: int = 0            # staging receives of the current window
    xfer: bool = False      # the engine was moving the current window at its last step


@dataclass
class Stats:
    gates: int = 0
    big_gates: int = 0
    big_bytes: int = 0
    drains: int = 0
    polls: int = 0


@dataclass
class GateChannel:
    """One rank of a gate channel. ``engine`` is any object with the gate engine's methods
    (``GateEngine``, or the native engine's adapter)."""

    cfg: GateConfig
    device: Device
    side: Side
    engine: Any
    timeout_s: float = 0.0          # 0: the configuration's timeout_ms
    stats: Stats = field(default_factory=Stats)
    log: Any = None                 # where profile and trace lines go (default stderr)
    trace: Any = None               # a device_trace.Recorder: calls, posts, polls, TCP items
    _seq: int = field(default=0, init=False)
    _closed: str = field(default="", init=False)
    _big: _BigGate | None = field(default=None, init=False)
    _big_no: int = field(default=0, init=False)    # big gates moved, drains' included
    _posted_at: float = field(default=0.0, init=False)
    _profile: list[list[float]] | None = field(default=None, init=False)
    _trace: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.cfg.vec_bytes <= TRAILER.size or self.cfg.max_msg <= TRAILER.size:
            raise GateError(f"vec_bytes {self.cfg.vec_bytes} and max_msg {self.cfg.max_msg} "
                            f"must exceed the {TRAILER.size}-byte payload trailer")
        self.timeout_s = self.timeout_s or self.cfg.timeout_ms / 1000
        self.log = self.log or sys.stderr
        self._profile = [[0.0, 0.0, 0], [0.0, 0.0, 0]] if os.environ.get(PROFILE_ENV) else None
        self._trace = bool(os.environ.get(TRACE_ENV))
        # the hello's bytes are the connection's, as the queue pair's address is: not traced
        # items; the engine's setup, which compares the peer's hello, is the traced call
        # "connect", so a refused hello shows as that call's failed result
        peer = self._hello()
        if self.trace is None:
            self._apply(self.engine.setup(peer))
            return
        self.device, self.side = self.trace.device(self.device), self.trace.side(self.side)
        try:
            self.trace.call("connect", {"peer_window": peer.window,
                                      "peer_max_msg": peer.max_msg},
                            lambda: self._apply(self.engine.setup(peer)))
        except GateError:
            self.trace.end()        # the caller gets no channel to close
            raise

    def _hello(self) -> Hello:
        """Send this rank's receive window and message cap, and return the peer's (the engine
        compares them at setup)."""
        c = self.cfg
        try:
            self.side.write_bytes(HELLO.pack(HELLO_MAGIC, c.window, c.max_msg))
            got = self.side.read_bytes(HELLO.size)
        except (SideChannelTimeout, OSError) as e:
            self._fail(f"hello: {e}")
        if got is None:
            self._fail("hello: the peer closed the side channel")
        magic, window, max_msg = HELLO.unpack(got)
        if magic != HELLO_MAGIC:
            self._fail(f"hello: not a gate channel's hello (magic {magic:#x})")
        return Hello(window, max_msg)

    @property
    def vector_bytes(self) -> int:
        """Bytes of a caller's vector."""
        return self.cfg.vec_bytes - TRAILER.size

    @property
    def big_chunk_bytes(self) -> int:
        """Bytes of the caller's data in one big-gate chunk."""
        return self.cfg.max_msg - TRAILER.size

    # ------------------------------------------------------------------ the API
    def exchange(self, layer: int, gate: int, vector: bytes) -> bytes:
        """Send this rank's vector for gate (layer, gate), the next in sequence; the peer's."""
        if self.trace is not None:
            return self.trace.call("exchange", {"layer": layer, "gate": gate,
                                                "seq": self._seq + 1},
                                   self._exchange, layer, gate, vector)
        return self._exchange(layer, gate, vector)

    def _exchange(self, layer: int, gate: int, vector: bytes) -> bytes:
        self._usable()
        c, n = self.cfg, self.vector_bytes
        if len(vector) != n:
            raise GateError(f"vector of {len(vector)} bytes: the channel's vectors are "
                            f"{n} bytes")
        seq = self._seq + 1
        slot = c.slot(seq)
        at = slot * c.vec_bytes
        if self._trace:
            print(f"gate trace l={layer} g={gate} seq={seq} want_slot={slot}", file=self.log)
        t0 = time.perf_counter()
        if 0 <= layer * 2 + gate < c.n_slots and layer * 2 + gate == slot:
            out = self.device.regions["out"]
            out[at:at + n] = vector
            TRAILER.pack_into(out, at + n, seq, zlib.crc32(vector), GATE_MAGIC)
        self._apply(self.engine.call_gate(layer, gate, seq))
        self._posted_at = 0.0
        self._run()
        if self._profile is not None and gate in (0, 1):
            self._note_profile(gate, t0)
        self._seq = seq
        got = bytes(self.device.regions["in"][at:at + c.vec_bytes])
        self._apply(self.engine.consume())
        got_seq, crc, magic = TRAILER.unpack_from(got, n)
        if magic != GATE_MAGIC or got_seq != seq or crc != zlib.crc32(memoryview(got)[:n]):
            self._fail(f"gate {seq}: the payload in slot {slot} failed its check (it carries "
                       f"seq {got_seq if magic == GATE_MAGIC else 'none'}): a message was lost "
                       f"or landed in another's receive")
        self.stats.gates += 1
        return got[:n]

    def drain(self) -> None:
        """Take the armed decode window down: post dummy sends into the peer's receives and
        reap the window, as ds4 does before a big gate; both ranks call it at the same point
        of their gate sequence. A drain needs a rendezvous (dummies that reach a peer still
        in its decode window are lost on UC), and the protocol's one is the big-gate header
        exchange, so the drain travels in a one-chunk big gate. No window armed: nothing to
        do, on both ranks alike."""
        if self.trace is not None:
            self.trace.call("drain", {}, self._drain)
        else:
            self._drain()

    def _drain(self) -> None:
        self._usable()
        if not self.engine.view().window_active:
            return
        self._big_gate(b"\0")
        self.stats.drains += 1

    def big_exchange(self, data: bytes) -> bytes:
        """Send ``data`` to the peer in big-gate windows and return the peer's, which must be
        the same size (the header's chunk counts are compared). The decode window must be
        drained first (``drain``)."""
        if self.trace is not None:
            return self.trace.call("big_exchange", {
                "bytes": len(data), "chunks": -(-len(data) // self.big_chunk_bytes)},
                self._big_exchange, data)
        return self._big_exchange(data)

    def _big_exchange(self, data: bytes) -> bytes:
        self._usable()
        if not data:
            raise GateError("big_exchange: no data (a big gate moves at least one byte)")
        if self.engine.view().window_active:
            raise GateError("big_exchange: the decode receive window is armed: drain() it "
                            "first, on both ranks")
        got = self._big_gate(data)
        self.stats.big_gates += 1
        self.stats.big_bytes += len(data)
        return got

    def _big_gate(self, data: bytes) -> bytes:
        m = self.big_chunk_bytes
        chunks = -(-len(data) // m)
        # the protocol moves whole chunks: the last one is padded
        self._big_no += 1
        big = self._big = _BigGate(self._big_no, data, bytearray(chunks * m))
        try:
            self._apply(self.engine.call_big(chunks))
            self._run()
        finally:
            self._big = None
        return bytes(big.out[:len(data)])

    def _note_profile(self, gate: int, t0: float) -> None:
        """ds4's DS4_TP_GATE_PROFILE: the mean post cost and peer wait of gates 0 and 1."""
        t1 = self._posted_at or t0
        acc = self._profile[gate]
        acc[0] += (t1 - t0) * 1e6
        acc[1] += (time.perf_counter() - t1) * 1e6
        acc[2] += 1
        if acc[2] % PROFILE_EVERY == 0:
            print(f"rdma gate {gate}: post {acc[0] / acc[2]:.1f} us, peer wait "
                  f"{acc[1] / acc[2]:.1f} us (n={acc[2]})", file=self.log)

    def close(self) -> None:
        if self.trace is not None and not self.trace.ended:
            self.trace.call("close", {}, lambda: None)
            self.trace.end()
        self._closed = self._closed or "the channel is closed"

    def __enter__(self) -> GateChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the driver
    def _usable(self) -> None:
        if self._closed:
            raise GateError(f"{self._closed}: set it up again")

    def _fail(self, text: str) -> NoReturn:
        self._closed = f"the channel failed ({text})"
        raise GateError(text)

    def _run(self) -> None:
        """Drive the engine until the application's turn comes back."""
        try:
            self._drive()
        except DeviceError as e:
            self._fail(f"device: {e}")

    def _drive(self) -> None:
        deadline = None
        empty = 0
        peer_gone = False
        while True:
            step = self.engine.next_step()
            if step == ge.CALL:
                return
            if step == ge.DEAD:
                self._fail(self.engine.view().error)
            if step == ge.ADVANCE:
                deadline = None
                self._apply(self.engine.advance())
            elif step == ge.READ:
                self._read()
            elif step == ge.POLL:
                if deadline is None:
                    deadline = time.monotonic() + self.timeout_s
                    empty = 0
                polled = self.device.poll(self.engine.poll_size(), POLL_WAIT_S)
                self.stats.polls += 1
                if polled:
                    self._apply(self.engine.completions(tuple(
                        ge.Completion(c.opcode, c.wr_id, c.status, c.byte_len)
                        for c in polled)))
                    continue
                empty += 1
                if empty % PEER_CHECK_EVERY == 0 and self.side.peer_closed():
                    if not peer_gone:
                        # what the peer sent before it left may still be landing: let the
                        # device take it in, and look again before calling the peer gone
                        peer_gone = True
                        settle = getattr(self.device, "settle", None)
                        if settle is not None:
                            settle(max(0.0, deadline - time.monotonic()))
                        continue
                    self._apply(self.engine.peer_closed())
                elif time.monotonic() > deadline:
                    self._apply(self.engine.timeout())
            else:
                raise GateError(f"the engine asked for {step!r}, which no driver step takes")

    def _read(self) -> None:
        kind = HEADER_KIND if self.engine.view().phase == BIG_HDR_READ else BYTE
        try:
            item = self.side.read(kind)
        except OSError as e:        # a timeout (SideChannelTimeout) or a reset connection
            self._fail(f"TCP side channel: {e}")
        if item is None:
            self._apply(self.engine.peer_closed())
        else:
            self._apply(self.engine.tcp_read(item))

    def _apply(self, em: Any) -> None:
        """Carry out what one engine step emitted, in order: receives, sends, TCP writes."""
        if em.recvs:
            self.device.post_recv([(w.wr_id, w.buf, w.offset, w.length) for w in em.recvs])
            self._note_window(em.recvs)
        if em.sends:
            # staging sends outside a big-gate window are the drain's dummies
            dummies = self._big is None or self.engine.view().phase == DRAIN_WAIT
            self.device.post_send([(w.wr_id, self._send_region(w, dummies), w.offset,
                                    w.length, w.signaled) for w in em.sends])
            self._posted_at = time.perf_counter()
        for item in em.tcp_out:
            try:
                self.side.write(item)
            except OSError as e:    # the peer's end reset, or ours shut down: a gone peer
                self._fail(f"TCP side channel: {e}")
        if self._big is not None:
            in_xfer = self.engine.view().phase == BIG_XFER
            if self._big.xfer and not in_xfer:
                self._window_done(self._big)
            self._big.xfer = in_xfer
        if em.result:
            self._fail(em.result)

    # ------------------------------------------------------------------ big-gate staging
    def _note_window(self, recvs: Any) -> None:
        """Staging receives numbered from 1 start a new big-gate window."""
        staged = [w for w in recvs if w.buf == "stage"]
        if not staged or self._big is None:
            return
        if staged[0].wr_id & ~TAG_MASK == 1:
            self._big.win = 0
        self._big.win += len(staged)

    def _send_region(self, w: Any, dummies: bool) -> str:
        if w.buf != "stage":
            return w.buf
        if dummies:
            return "stage_out"      # a drain dummy: the scratch's bytes, whatever they hold
        # stage the window's chunk (index 1-based) from the caller's data
        b, m = self._big, self.big_chunk_bytes
        k = b.base + (w.wr_id & ~TAG_MASK) - 1
        chunk = b.data[k * m:(k + 1) * m].ljust(m, b"\0")
        stage = self.device.regions["stage_out"]
        stage[w.offset:w.offset + m] = chunk
        TRAILER.pack_into(stage, w.offset + m, b.number << 32 | k, zlib.crc32(chunk),
                          BIG_MAGIC)
        return "stage_out"

    def _window_done(self, b: _BigGate) -> None:
        """The window's chunks all landed: check each, copy it out, move the base on."""
        m, step = self.big_chunk_bytes, self.cfg.max_msg
        stage = memoryview(self.device.regions["stage"])
        for i in range(b.win):
            k = b.base + i
            chunk = stage[i * step:i * step + m]
            tag, crc, magic = TRAILER.unpack_from(stage, i * step + m)
            if magic != BIG_MAGIC or tag != b.number << 32 | k or crc != zlib.crc32(chunk):
                self._fail(f"big gate {b.number}: chunk {k} failed its check: a message "
                           f"was lost or landed in another's receive")
            b.out[k * m:(k + 1) * m] = chunk
        b.base += b.win
