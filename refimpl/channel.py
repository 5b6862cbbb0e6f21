"""``GateChannel``: one rank's end of the gate window protocol, as a library.

The channel owns a gate engine (sans I/O: it says what to post, write and wait for) and runs it
on a transport: a device that posts work requests and polls completions (``SimDevice``, or a
real verbs device) and the TCP side channel. ``exchange`` sends this rank's vector for one gate
and returns the peer's; ``big_exchange`` moves a bulk buffer both ways in big-gate windows,
draining the decode window first when it is armed, as the protocol does. Every failure ends in
``GateError`` carrying the protocol's message, and the channel then refuses further use until it
is set up again (a new channel).

Memory, as ds4 lays out its slab: the ``in`` and ``out`` regions hold one vector per slot;
``stage`` receives a big-gate window's chunks and ``stage_out`` holds the chunks it sends (the
engine names both "stage"; their roles differ by direction).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from verbspec.refimpl import gate_engine as ge
from verbspec.refimpl.side_channel import BYTE, HEADER_KIND, SideChannelTimeout
from verbspec.spec.gate.params import PARAMS, GateConfig, make_config
from verbspec.spec.gate.state import BIG_HDR_READ, BIG_XFER
from verbspec.spec.gate.wire import TAG_MASK, TcpItem
from verbspec.spec.params import check_values

POLL_WAIT_S = 0.001         # a poll that finds nothing sleeps on the CQ this long at most
PEER_CHECK_EVERY = 64       # empty polls between liveness checks of the peer


class GateError(RuntimeError):
    """The protocol failed; the message is the protocol's (ds4's text where ds4 has one)."""


class Device(Protocol):
    regions: dict[str, bytearray]

    def post_recv(self, wrs: list[tuple[int, str, int, int]]) -> None: ...
    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None: ...
    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Any, ...]: ...


class Side(Protocol):
    def write(self, item: TcpItem) -> None: ...
    def read(self, kind: str) -> TcpItem | None: ...
    def peer_closed(self) -> bool: ...


def gate_config(values: dict[str, Any] | None = None) -> GateConfig:
    """The protocol's configuration, validated exactly as the spec validates it (ParamError
    naming the parameter)."""
    return make_config(check_values(PARAMS, values or {}))


def regions_for(cfg: GateConfig) -> dict[str, bytearray]:
    """The rank's registered memory for a configuration."""
    stage = cfg.big_window(cfg.rq_depth) * cfg.max_msg
    return {"in": bytearray(cfg.n_slots * cfg.vec_bytes),
            "out": bytearray(cfg.n_slots * cfg.vec_bytes),
            "stage": bytearray(stage), "stage_out": bytearray(stage), "none": bytearray()}


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
    _seq: int = 0
    _closed: str = ""
    _big: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.timeout_s = self.timeout_s or self.cfg.timeout_ms / 1000
        self._apply(self.engine.setup())

    # ------------------------------------------------------------------ the API
    def exchange(self, layer: int, gate: int, vector: bytes) -> bytes:
        """Send this rank's vector for gate (layer, gate), the next in sequence; the peer's."""
        self._usable()
        c = self.cfg
        if len(vector) != c.vec_bytes:
            raise GateError(f"vector of {len(vector)} bytes: the channel's vectors are "
                            f"{c.vec_bytes} bytes")
        seq = self._seq + 1
        slot = c.slot(seq)
        if 0 <= layer * 2 + gate < c.n_slots and layer * 2 + gate == slot:
            self.device.regions["out"][slot * c.vec_bytes:(slot + 1) * c.vec_bytes] = vector
        self._apply(self.engine.call_gate(layer, gate, seq))
        self._run()
        self._seq = seq
        self.stats.gates += 1
        got = bytes(self.device.regions["in"][slot * c.vec_bytes:(slot + 1) * c.vec_bytes])
        self._apply(self.engine.consume())
        return got

    def big_exchange(self, data: bytes) -> bytes:
        """Send ``data`` to the peer in big-gate windows and return the peer's, which must be
        the same size (the header's chunk counts are compared)."""
        self._usable()
        if not data:
            raise GateError("big_exchange: no data (a big gate moves at least one byte)")
        m = self.cfg.max_msg
        chunks = -(-len(data) // m)
        # the protocol moves whole chunks: the last one is padded
        self._big = {"data": data, "out": bytearray(chunks * m), "base": 0, "win": 0,
                     "xfer": False}
        self._apply(self.engine.call_big(chunks))
        self._run()
        self.stats.big_gates += 1
        self.stats.big_bytes += len(data)
        return bytes(self._big.pop("out")[:len(data)])

    def close(self) -> None:
        self._closed = self._closed or "the channel is closed"

    def __enter__(self) -> GateChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the driver
    def _usable(self) -> None:
        if self._closed:
            raise GateError(f"{self._closed}: set it up again")

    def _fail(self, text: str) -> None:
        self._closed = f"the channel failed ({text})"
        raise GateError(text)

    def _run(self) -> None:
        """Drive the engine until the application's turn comes back."""
        deadline = None
        empty = 0
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
                    self._apply(self.engine.peer_closed())
                elif time.monotonic() > deadline:
                    self._apply(self.engine.timeout())
            else:
                raise GateError(f"the engine asked for {step!r}, which no driver step takes")

    def _read(self) -> None:
        kind = HEADER_KIND if self.engine.view().phase == BIG_HDR_READ else BYTE
        try:
            item = self.side.read(kind)
        except SideChannelTimeout as e:
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
            self.device.post_send([(w.wr_id, self._send_region(w), w.offset, w.length,
                                    w.signaled) for w in em.sends])
        for item in em.tcp_out:
            self.side.write(item)
        if self._big:
            in_xfer = self.engine.view().phase == BIG_XFER
            if self._big["xfer"] and not in_xfer:
                self._window_done()
            self._big["xfer"] = in_xfer
        if em.result:
            self._fail(em.result)

    # ------------------------------------------------------------------ big-gate staging
    def _note_window(self, recvs: Any) -> None:
        """Staging receives numbered from 1 start a new big-gate window."""
        staged = [w for w in recvs if w.buf == "stage"]
        if not staged or not self._big:
            return
        if staged[0].wr_id & ~TAG_MASK == 1:
            self._big["win"] = 0
        self._big["win"] += len(staged)

    def _send_region(self, w: Any) -> str:
        if w.buf != "stage":
            return w.buf
        # stage the window's chunk (index 1-based) from the caller's data
        b, m = self._big, self.cfg.max_msg
        k = b["base"] + (w.wr_id & ~TAG_MASK) - 1
        chunk = b["data"][k * m:(k + 1) * m]
        self.device.regions["stage_out"][w.offset:w.offset + len(chunk)] = chunk
        return "stage_out"

    def _window_done(self) -> None:
        """The window's chunks all landed: copy them out and move the base on."""
        b, m = self._big, self.cfg.max_msg
        n = b["win"]
        b["out"][b["base"] * m:(b["base"] + n) * m] = self.device.regions["stage"][:n * m]
        b["base"] += n
