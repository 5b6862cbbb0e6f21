"""The native gate engine (``native/gate/gate_engine.c``) as an implementation of one gate
rank: the same calls as the reference engine, the same ``Emitted``, ``EngineView`` and
``EngineError``, so the conformance harness holds it to the spec exactly as it holds
``GateEngine``.

The adapter only converts: the configuration into the C engine's parameter struct, inputs into
C structs, and what the engine emitted back into the reference engine's values. The protocol is
all in C. Like the reference engine it imports nothing of the spec but the configuration, the
phase names and the wire constants.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import Any

from verbspec import native
from verbspec.refimpl.engines.gate_engine import (
    ADVANCE,
    CALL,
    DEAD,
    POLL,
    READ,
    SETUP,
    Completion,
    Emitted,
    EngineError,
    EngineView,
    WorkRequest,
)
from verbspec.spec.gate.constants import BUFFERS
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import PHASES
from verbspec.spec.gate.wire import Hello, TcpItem

# the C engine's vs_gate_phase and vs_gate_buf are numbered in the order of the spec's PHASES
# and BUFFERS (native/generated/spec_constants.h is written from them)
BUFS = BUFFERS
STEPS = (SETUP, CALL, ADVANCE, READ, POLL, DEAD)      # by vs_gate_step
BYTE, HEADER, BLOCK, BATCH = "byte", "header", "block", "batch"     # TcpItem kinds
CONFIG_FIELDS = ("vec_bytes", "max_msg", "window", "gates_per_token", "n_slots", "slot_start",
                 "slot_step", "slot_mask", "rq_depth", "sq_depth", "big_depth", "chain_max",
                 "staging_bytes", "big_last_bytes", "block_layers", "block_rows")


def config_values(cfg: GateConfig) -> dict[str, int]:
    """A rank's vs_gate_config, field by field: CONFIG_FIELDS, then the verify-window
    switch."""
    out = {f: getattr(cfg, f) for f in CONFIG_FIELDS}
    out["verify_window_off"] = int(cfg.verify_window == "off")
    return out
# vs_gate_wr: wr_id, offset, length (uint64), buf, signaled (int32), native byte order
WR_LAYOUT = struct.Struct("=QQQii")
NUL = b"\0"
NOTHING = Emitted()
NOT_BUILT = "the native gate engine is not built: reinstall with a C compiler (pip install -e .)"


def module() -> ModuleType:
    """The compiled engine; ValueError where it was not built."""
    mod = native.load("gate")
    if mod is None:
        raise ValueError(NOT_BUILT)
    return mod


class NativeGateEngine:
    """One rank, run by the C engine. ``mod`` is the compiled module (by default the one
    ``pip install -e .`` built; a test may pass another build of the same source)."""

    def __init__(self, cfg: GateConfig, grant: int = 0, mod: ModuleType | None = None,
                 _handle: Any = None):
        self.cfg, self.mod = cfg, mod or module()
        self.ffi, self.lib = self.mod.ffi, self.mod.lib
        if _handle is None:
            c = self.ffi.new("vs_gate_config *", config_values(cfg))
            out = self.ffi.new("vs_gate **")
            err = self.ffi.new("char[]", self.lib.VS_GATE_TEXT)
            if self.lib.vs_gate_create(c, grant, out, err, len(err)):
                raise ValueError(self.ffi.string(err).decode())
            _handle = out[0]
        self.handle = self.ffi.gc(_handle, self.lib.vs_gate_destroy)
        self.emitted = self.lib.vs_gate_out(self.handle)
        self._view = self.ffi.new("vs_gate_view *")
        self._size = self.ffi.new("uint32_t *")
        self._key: tuple = ()
        self._last = EngineView(PHASES[0], 0, 0, False, 0, "")
        if self.ffi.sizeof("vs_gate_wr") != WR_LAYOUT.size:
            raise ValueError(f"vs_gate_wr is {self.ffi.sizeof('vs_gate_wr')} bytes, not "
                             f"{WR_LAYOUT.size}")

    def __deepcopy__(self, memo: dict) -> NativeGateEngine:
        twin = self.lib.vs_gate_clone(self.handle)
        if twin == self.ffi.NULL:
            raise MemoryError("vs_gate_clone")
        return NativeGateEngine(self.cfg, 0, self.mod, twin)

    # ------------------------------------------------------------------ conversions
    def _check(self, status: int) -> None:
        if status:
            raise EngineError(self.ffi.string(self.lib.vs_gate_refusal(self.handle)).decode())

    def _out(self, status: int) -> Emitted:
        self._check(status)
        e = self.emitted
        n_recvs, n_sends, n_tcp, n_log = e.n_recvs, e.n_sends, e.n_tcp, e.n_log
        failed = e.result[0] != NUL
        if not (n_recvs or n_sends or n_tcp or n_log or failed):
            return NOTHING      # most steps: one shared value (Emitted is frozen)
        return Emitted(self._wrs(e.recvs, n_recvs) if n_recvs else (),
                       self._wrs(e.sends, n_sends) if n_sends else (),
                       tuple(self._tcp(e.tcp_out[i]) for i in range(n_tcp)) if n_tcp else (),
                       self.ffi.string(e.result).decode() if failed else "",
                       tuple(self.ffi.string(e.log[i]).decode() for i in range(n_log))
                       if n_log else ())

    def _wrs(self, wrs: Any, n: int) -> tuple[WorkRequest, ...]:
        """n vs_gate_wr read in one go from the engine's array (their layout is WR_LAYOUT)."""
        raw = self.ffi.buffer(wrs, n * WR_LAYOUT.size)
        return tuple(WorkRequest(wr_id, BUFS[buf], offset, length, bool(signaled))
                     for wr_id, offset, length, buf, signaled in WR_LAYOUT.iter_unpack(raw))

    def _tcp(self, t: Any) -> TcpItem:
        if t.kind == self.lib.VS_GATE_TCP_HEADER:
            return TcpItem(HEADER, t.value, t.chunks, t.depth)
        if t.kind == self.lib.VS_GATE_TCP_BLOCK:
            return TcpItem(BLOCK, t.value, t.chunks)
        if t.kind == self.lib.VS_GATE_TCP_BATCH:
            return TcpItem(BATCH, t.value, t.chunks, t.depth)
        return TcpItem(BYTE, t.value)

    # ------------------------------------------------------------------ the view
    def view(self) -> EngineView:
        v = self._view
        self.lib.vs_gate_get_view(self.handle, v)
        error = self.ffi.string(v.error).decode() if v.error[0] != NUL else ""
        key = (v.phase, v.recv_done, v.last_gate_seq, v.window_active, v.send_outstanding,
               error)
        if key != self._key:    # the harness asks after every step; most steps change little
            self._key = key
            self._last = EngineView(PHASES[key[0]], key[1], key[2], bool(key[3]), key[4], error)
        return self._last

    # ------------------------------------------------------------------ the calls
    def setup(self, peer: Hello | None = None) -> Emitted:
        if peer is None:
            return self._out(self.lib.vs_gate_setup(self.handle))
        return self._out(self.lib.vs_gate_setup_hello(self.handle, peer.window, peer.max_msg))

    def call_gate(self, layer: int, gate: int, seq: int) -> Emitted:
        return self._out(self.lib.vs_gate_call_gate(self.handle, layer, gate, seq))

    def call_big(self, chunks: int) -> Emitted:
        return self._out(self.lib.vs_gate_call_big(self.handle, chunks))

    def call_block(self) -> Emitted:
        return self._out(self.lib.vs_gate_call_block(self.handle))

    def consume(self) -> Emitted:
        return self._out(self.lib.vs_gate_consume(self.handle))

    def advance(self) -> Emitted:
        return self._out(self.lib.vs_gate_advance(self.handle))

    def tcp_read(self, item: TcpItem) -> Emitted:
        kind = {HEADER: self.lib.VS_GATE_TCP_HEADER, BLOCK: self.lib.VS_GATE_TCP_BLOCK,
                BATCH: self.lib.VS_GATE_TCP_BATCH}.get(item.kind, self.lib.VS_GATE_TCP_BYTE)
        t = self.ffi.new("vs_gate_tcp *", (kind, item.value, item.chunks, item.depth))
        return self._out(self.lib.vs_gate_tcp_read(self.handle, t))

    def next_step(self) -> str:
        """What a driver does next (the reference engine's names)."""
        return STEPS[self.lib.vs_gate_next_step(self.handle)]

    def poll_size(self) -> int:
        self._check(self.lib.vs_gate_poll_size(self.handle, self._size))
        return self._size[0]

    def completions(self, polled: tuple[Completion, ...]) -> Emitted:
        send, recv = self.lib.VS_GATE_OP_SEND, self.lib.VS_GATE_OP_RECV
        cs = self.ffi.new("vs_gate_completion[]", [
            (send if c.opcode == "send" else recv, c.status, c.wr_id, c.byte_len)
            for c in polled])
        return self._out(self.lib.vs_gate_completions(self.handle, cs, len(polled)))

    def timeout(self) -> Emitted:
        return self._out(self.lib.vs_gate_timeout(self.handle))

    def peer_closed(self) -> Emitted:
        return self._out(self.lib.vs_gate_peer_closed(self.handle))

    def post_failed(self, posted: int) -> Emitted:
        return self._out(self.lib.vs_gate_post_failed(self.handle, posted))

    def poll_failed(self) -> Emitted:
        return self._out(self.lib.vs_gate_poll_failed(self.handle))

    def crash(self) -> None:
        self._check(self.lib.vs_gate_crash(self.handle))


def factory(mod: ModuleType | None = None):
    """An implementation factory (configuration, rank, granted depth) -> NativeGateEngine of
    the compiled module ``mod`` (by default the installed build)."""
    mod = mod or module()

    def make(cfg: GateConfig, rank: int, grant: int) -> NativeGateEngine:
        return NativeGateEngine(cfg, grant, mod)

    return make


def native_engine(cfg: GateConfig, rank: int, grant: int) -> NativeGateEngine:
    """The factory ``--impl native`` resolves to: the installed build on each rank."""
    return NativeGateEngine(cfg, grant)
