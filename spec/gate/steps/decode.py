"""A decode gate's send, and the completion reaping every wait shares."""

from __future__ import annotations

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import SendWR
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import (
    BIG_XFER,
    DRAIN_WAIT,
    HOLD,
    IDLE,
    REAP_PHASES,
    SEND,
    WAIT,
    CQEView,
    GateState,
)
from verbspec.spec.gate.steps.common import StepsBase, poll_batch
from verbspec.spec.gate.variants import (
    SIGNAL_LAST_ONLY,
    STRAY_SEND_COMPLETION,
    STRAY_WARM_RECEIVE,
    UNTAGGED_IN_BIG_WINDOW,
)
from verbspec.spec.gate.wire import TAG_BLOCK, TAG_BULK, TAG_MASK, TAG_WARM, Payload
from verbspec.spec.values import evolve, set_item


class DecodeSteps(StepsBase):
    """A decode gate, and reaping completions."""

    # ------------------------------------------------------------------ decode gate
    def en_gate_send(self, s):
        return self._phase_is(s, SEND)

    @action("rank", guard=en_gate_send)
    def do_gate_send(self, s: GateState, r: int):
        """Post the gate's send chain from its out-slot: one WR per chunk, wr_id = seq."""
        c, rk = self.cfgs[r], s.ranks[r]
        last_only = SIGNAL_LAST_ONLY.on(self.v)
        wrs = tuple(
            SendWR(rk.seq, "out", c.slot(rk.seq), k * c.max_msg, c.chunk_len(k),
                   (k == self.rank_chunks[r] - 1) or not last_only, Payload("gate", r, rk.seq, k))
            for k in range(self.rank_chunks[r]))
        counted = 1 if last_only else self.rank_chunks[r]
        s = evolve(s, fabric=fb.post_send(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "send")
        s = self._put(s, r, send_outstanding=rk.send_outstanding + counted, phase=WAIT,
                      sent_seq=max(rk.sent_seq, rk.seq))
        return s, self._obs(s, r, sends=tuple(self._wr_view(r, w) for w in wrs))

    # ------------------------------------------------------------------ completion reaping
    def en_reap(self, s: GateState):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase in REAP_PHASES and s.fabric.qps[r].cq)

    @action("rank", guard=en_reap)
    def do_reap(self, s: GateState, r: int):
        """Poll up to a batch of completions (16, 2*window+1 in a drain, 64 in a big-gate
        window) and account for each; any error status fails the wait."""
        got, f = fb.poll(s.fabric, r, poll_batch(self.cfgs[r], s.ranks[r].phase))
        s = evolve(s, fabric=f)
        rk = s.ranks[r]
        polled = tuple(CQEView(c.opcode, c.wr_id, c.status, c.byte_len) for c in got)
        for c in got:
            if c.status != fb.ST_OK:
                s = evolve(s, ranks=set_item(s.ranks, r, rk))     # keep what was reaped
                return self._fail(s, r, self.completion_error(rk.phase, c), polled=polled)
            if c.opcode == "send":
                if c.wr_id & TAG_WARM and not STRAY_SEND_COMPLETION.on(self.v):
                    continue    # a warm-up leftover is not one of ours
                # ds4's accounting: the drain and a big-gate window count their own BULK
                # sends; any other send, and any send a gate or block wait reaps, leaves
                # send_outstanding
                if c.wr_id & TAG_BULK and rk.phase == DRAIN_WAIT:
                    rk = evolve(rk, drain_sends=rk.drain_sends + 1)
                elif c.wr_id & TAG_BULK and rk.phase == BIG_XFER:
                    rk = evolve(rk, big_send_done=rk.big_send_done + 1)
                else:
                    rk = evolve(rk, send_outstanding=max(0, rk.send_outstanding - 1))
                continue
            if c.wr_id & TAG_WARM and not (
                    STRAY_WARM_RECEIVE.on(self.v)
                    or (rk.phase == BIG_XFER and UNTAGGED_IN_BIG_WINDOW.on(self.v))):
                continue
            if c.wr_id & TAG_BLOCK and rk.phase not in (DRAIN_WAIT, BIG_XFER):
                # tp_rdma_drain_cq: a verify-block row, whichever wait polls it
                if c.byte_len == 0:
                    s = evolve(s, ranks=set_item(s.ranks, r, rk))     # keep what was reaped
                    return self._fail(s, r, errors.BLOCK_EMPTY(), polled=polled)
                rk = evolve(rk, block_recv_done=rk.block_recv_done + 1)
                continue
            if rk.phase == BIG_XFER:
                # ds4's order: the tag, then the index (range, duplicate), then the length;
                # BULK indices are 1-based (a 0 index wraps to an invalid one in ds4)
                idx = (c.wr_id & ~TAG_MASK) - 1
                untagged = not c.wr_id & TAG_BULK
                if untagged and UNTAGGED_IN_BIG_WINDOW.on(self.v):
                    rk = evolve(rk, recv_done=max(rk.recv_done, c.wr_id))
                    continue
                invalid = not 0 <= idx < rk.big_win or idx in rk.big_recvd
                want = self.big_lens(s, r)(rk.big_base + idx)
                if untagged or invalid or c.byte_len != want:
                    s = evolve(s, ranks=set_item(s.ranks, r, rk))     # keep what was reaped
                    if untagged:
                        return self._fail(s, r, errors.BIG_UNTAGGED(wr_id=c.wr_id),
                                          polled=polled)
                    if invalid:
                        return self._fail(s, r, errors.BIG_INVALID(wr_id=c.wr_id),
                                          polled=polled)
                    return self._fail(s, r, errors.BIG_LENGTH(
                        chunk=idx, got=c.byte_len, want=want), polled=polled)
                rk = evolve(rk, big_recvd=rk.big_recvd | {idx})
                continue
            if rk.phase == DRAIN_WAIT:
                # dummies are not arrivals: counted, never raising the watermark, as in ds4,
                # which sets it to last_gate_seq when the drain ends
                rk = evolve(rk, drain_recvs=rk.drain_recvs + 1)
                continue
            rk = evolve(rk, recv_done=max(rk.recv_done, c.wr_id))
        s = evolve(s, ranks=set_item(s.ranks, r, rk))
        return s, self._obs(s, r, polled=polled)

    def completion_error(self, phase: str, c: fb.CQE) -> str:
        """An error completion ends each wait with its own text (errors.WAITS); ds4 names the
        status by its ibv_wc_status number and, in a decode gate only, the work request."""
        status = errors.WC_STATUS(status=fb.WC_STATUS_CODE[c.status])
        return errors.WAITS[phase].completion({"status": status, "wr_id": c.wr_id})

    def en_gate_done(self, s: GateState):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == WAIT and s.ranks[r].recv_done >= s.ranks[r].seq)

    @action("rank", guard=en_gate_done)
    def do_gate_done(self, s: GateState, r: int):
        """The watermark reached the gate: repost one receive for seq+window, close the gate."""
        rk = s.ranks[r]
        slot = self.cfg.slot(rk.seq)
        whole = any(h.buf == "in" and h.slot == slot and h.seq == rk.seq
                    and len(h.chunks) == self.rank_chunks[r] for h in rk.held)
        if not whole:
            s = self._ghost(s, stale=f"rank {r} passed gate {rk.seq} (recv_done {rk.recv_done}) "
                                     f"but slot {slot} does not hold that gate's whole vector")
        if rk.seq != rk.last_gate_seq + 1:
            s = self._ghost(s, order=f"rank {r} completed gate {rk.seq} after gate "
                                     f"{rk.last_gate_seq}")
        wrs = self.gate_recv_chain(r, rk.seq + self.cfgs[r].window)
        s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "receive")
        s = self._put(s, r, last_gate_seq=rk.seq, phase=HOLD)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in wrs))

    def en_consume(self, s: GateState):
        return ((r,) for r in (0, 1) if s.ranks[r].phase == HOLD)

    @action("rank", guard=en_consume)
    def do_consume(self, s: GateState, r: int):
        """The application reads the gate's in-slot; the slot is free for later arrivals."""
        rk = s.ranks[r]
        slot = self.cfg.slot(rk.seq)
        held = tuple(h for h in rk.held if not (h.buf == "in" and h.slot == slot
                                                 and h.seq == rk.seq))
        s = self._put(s, r, held=held, phase=IDLE, op=rk.op + 1)
        return s, self._obs(s, r)
