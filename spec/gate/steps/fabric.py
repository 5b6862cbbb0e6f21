"""The fabric's steps: a send leaves its queue pair, and a message meets the receiver's queue."""

from __future__ import annotations

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import RecvWR
from verbspec.spec.gate.state import GateState, Held
from verbspec.spec.gate.steps.common import StepsBase
from verbspec.spec.gate.wire import Payload
from verbspec.spec.values import evolve


class FabricSteps(StepsBase):
    """Transmission and delivery."""

    # ------------------------------------------------------------------ the fabric
    def en_transmit(self, s: GateState):
        for r in (0, 1):
            qp = s.fabric.qps[r]
            if qp.sq and qp.state == "rts" and s.ranks[r].alive:
                yield (r,)

    @action("rank", guard=en_transmit)
    def do_transmit(self, s: GateState, r: int):
        wr = s.fabric.qps[r].sq[0]
        s = evolve(s, fabric=fb.transmit(s.fabric, r, self.cfg.cq_depth))
        return s, self._obs(s, r, sends=(self._wr_view(r, wr),))

    def en_deliver(self, s: GateState):
        return ((r,) for r in (0, 1) if s.fabric.wire[r])

    @action("src", guard=en_deliver)
    def do_deliver(self, s: GateState, src: int):
        """The head of the wire from ``src`` meets the head of the receiver's queue."""
        dst = 1 - src
        alive = s.ranks[dst].alive
        f, d = fb.deliver(s.fabric, src, self.cfg.cq_depth, alive)
        s = evolve(s, fabric=f)
        got = d.msg.payload
        if d.outcome == "uc_drop":
            s = self._ghost(s, drops=f"{_payload(got)} from rank {src} found no receive posted "
                                     f"at rank {dst}: UC dropped it, the sender completed")
        elif d.outcome == "landed" and d.wr is not None:
            s = self._land(s, dst, d.wr, got, d.msg.length)
        return s, self._obs(s, dst, log=(f"deliver: {d.outcome}",))

    def _land(self, s: GateState, r: int, wr: RecvWR, got: Payload, length: int
              ) -> GateState:
        want = wr.want
        aligned = got == want or (want.kind == "gate" and got.kind == "dummy"
                                  and got.seq < want.seq)
        if not aligned:
            return self._ghost(s, misaligned=f"{_payload(got)} landed in rank {r}'s receive for "
                                             f"{_payload(want)}")
        if got.kind != "dummy" and length != wr.length:
            # the ranks chunk by different message caps: the same chunk is another byte range
            return self._ghost(s, misaligned=f"{_payload(got)} ({length} bytes) landed in rank "
                                             f"{r}'s receive for {_payload(want)} "
                                             f"({wr.length} bytes)")
        rk = s.ranks[r]
        holder = next((h for h in rk.held if h.buf == wr.buf and h.slot == wr.slot), None)
        seq = want.seq
        if holder is not None and (holder.seq != seq or got.kind == "dummy"):
            return self._ghost(s, clobbered=f"{_payload(got)} landed in rank {r}'s {wr.buf}-slot "
                                            f"{wr.slot}, which still holds unconsumed "
                                            f"{'gate' if wr.buf == 'in' else 'chunk'} "
                                            f"{holder.seq}")
        if got.kind == "dummy":
            return s
        chunk = got.chunk if got.kind in ("gate", "block") else 0
        chunks = tuple(sorted(set(holder.chunks if holder else ()) | {chunk}))
        held = tuple(h for h in rk.held if h is not holder) + (
            Held(wr.buf, wr.slot, seq, chunks),)
        arrived = rk.arrived
        if got.kind == "gate" and len(chunks) == self.rank_chunks[r]:
            arrived = max(arrived, seq)
        return self._put(s, r, held=held, arrived=arrived)


def _payload(p: Payload) -> str:
    if p.kind == "gate":
        return f"gate {p.seq} chunk {p.chunk}"
    if p.kind == "dummy":
        return f"drain dummy {p.chunk} (after gate {p.seq})"
    if p.kind == "big":
        return f"big gate {p.chunk} chunk {p.seq}"
    if p.kind == "block":
        return f"verify-block row {p.seq} chunk {p.chunk}"
    return "warm-up message"
