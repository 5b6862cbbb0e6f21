"""Engines with a known weakness: the reference engine changed to behave as each of the spec's
named gate variants does, as a transport with that weakness would. Held to the base spec by the
conformance suite, each must be caught; the step it is caught at tells a user which variant
their own transport has when it differs there.
"""

from __future__ import annotations

from collections.abc import Callable

from verbspec.refimpl.engines.gate_engine import (
    WC_SUCCESS,
    Completion,
    Emitted,
    GateEngine,
    WorkRequest,
)
from verbspec.spec.gate import variants as gv
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import BIG_HDR_SEND, BIG_XFER, BLOCK_POST, DRAIN_POST, SEND
from verbspec.spec.gate.wire import TAG_BULK, TAG_WARM, Hello


class NoBarrier(GateEngine):
    """Arms the window without the TCP barrier."""

    def _arm(self) -> Emitted:
        out = super()._arm()
        self.window_active, self.phase = True, SEND
        return out


class TagEveryChunk(GateEngine):
    """Tags every chunk's receive with the seq."""

    def _gate_chain(self, buf: str, seq: int, last_only_tagged: bool
                    ) -> tuple[WorkRequest, ...]:
        return super()._gate_chain(buf, seq, last_only_tagged=False)


class SignalLastOnly(GateEngine):
    """Signals only a send chain's last WR and counts the chain once."""

    def _send_gate(self) -> Emitted:
        out = super()._send_gate()
        self.send_outstanding -= len(out.sends) - 1
        last = len(out.sends) - 1
        sends = tuple(WorkRequest(w.wr_id, w.buf, w.offset, w.length, k == last)
                      for k, w in enumerate(out.sends))
        return Emitted(sends=sends)


class StraySendCompletion(GateEngine):
    """Counts every send completion against send_outstanding, a warm-up leftover's too."""

    def completions(self, polled: tuple[Completion, ...]) -> Emitted:
        for c in polled:
            if c.opcode == "send" and c.wr_id & TAG_WARM and c.status == WC_SUCCESS:
                self.send_outstanding = max(0, self.send_outstanding - 1)
        return super().completions(polled)


class StrayWarmReceive(GateEngine):
    """Raises recv_done to any receive's wr_id, tag bits included."""

    def completions(self, polled: tuple[Completion, ...]) -> Emitted:
        for c in polled:
            if c.opcode == "recv" and c.wr_id & TAG_WARM and c.status == WC_SUCCESS:
                self.recv_done = max(self.recv_done, c.wr_id)
        return super().completions(polled)


class NoSeqCheck(GateEngine):
    """Accepts any seq in gate(), not only the next one."""

    def call_gate(self, layer: int, gate: int, seq: int) -> Emitted:
        self.last_gate_seq, saved = seq - 1, self.last_gate_seq
        out = super().call_gate(layer, gate, seq)
        self.last_gate_seq = saved
        return out


class DepthMismatch(GateEngine):
    """Uses its own receive depth for big-gate windows, whatever the peer grants."""

    def _read_header(self, item) -> Emitted:
        out = super()._read_header(item)
        if not out.result:
            self.big_depth = self.geo.big_window(self.grant)
        return out


class DrainWithoutRendezvous(GateEngine):
    """Drains its decode window as soon as a big gate is called, before the header."""

    early: bool = False     # this big gate's drain came before its header

    def call_big(self, chunks: int) -> Emitted:
        out = super().call_big(chunks)
        self.early = self.window_active
        if self.early:
            self.phase = DRAIN_POST
        return out

    def _drain_done(self) -> Emitted:
        out = super()._drain_done()
        if self.early:
            # the header exchange is still to come
            self.early, self.phase = False, BIG_HDR_SEND
        return out


class UntaggedInBigWindow(GateEngine):
    """In a big-gate window, takes a receive without the BULK tag as decode traffic."""

    def completions(self, polled: tuple[Completion, ...]) -> Emitted:
        if self.phase != BIG_XFER:
            return super().completions(polled)
        kept = []
        for c in polled:
            if c.opcode == "recv" and c.status == WC_SUCCESS and not c.wr_id & TAG_BULK:
                self.recv_done = max(self.recv_done, c.wr_id)
                continue
            kept.append(c)
        return super().completions(tuple(kept))


class BlockDrainWithoutRendezvous(GateEngine):
    """Begins a verify block as ds4 does: drains at once, with no header exchange."""

    def call_block(self) -> Emitted:
        out = super().call_block()
        if not self.batching:       # a batch gate's header comes before its drain in ds4 too
            self.phase = DRAIN_POST if self.window_active else BLOCK_POST
        return out


class UnexchangedConfig(GateEngine):
    """Starts whatever receive window and message cap its peer was built with."""

    def setup(self, peer: Hello | None = None) -> Emitted:
        return super().setup(None)


VARIANT_ENGINES: dict[str, type[GateEngine]] = {
    gv.NO_BARRIER.name: NoBarrier, gv.TAG_EVERY_CHUNK.name: TagEveryChunk,
    gv.SIGNAL_LAST_ONLY.name: SignalLastOnly,
    gv.STRAY_SEND_COMPLETION.name: StraySendCompletion,
    gv.STRAY_WARM_RECEIVE.name: StrayWarmReceive, gv.NO_SEQ_CHECK.name: NoSeqCheck,
    gv.DEPTH_MISMATCH.name: DepthMismatch,
    gv.DRAIN_WITHOUT_RENDEZVOUS.name: DrainWithoutRendezvous,
    gv.UNTAGGED_IN_BIG_WINDOW.name: UntaggedInBigWindow,
    gv.BLOCK_DRAIN_WITHOUT_RENDEZVOUS.name: BlockDrainWithoutRendezvous,
    gv.UNEXCHANGED_CONFIG.name: UnexchangedConfig,
}


def variant_engine(name: str) -> Callable[[GateConfig, int, int], GateEngine]:
    """The factory of the engine that behaves as variant ``name``; ValueError if none."""
    if name not in VARIANT_ENGINES:
        raise ValueError(f"no engine behaves as variant {name!r} (known: "
                         f"{', '.join(sorted(VARIANT_ENGINES))})")
    engine = VARIANT_ENGINES[name]
    if engine is DepthMismatch:
        # the variant grants rank 1 a chain_max-deep queue
        return lambda cfg, rank, grant: engine(cfg, min(cfg.rq_depth, cfg.chain_max)
                                               if rank == 1 else grant)
    return lambda cfg, rank, grant: engine(cfg, grant)
