"""A big gate: its header exchange, the decode window's drain, and its windows."""

from __future__ import annotations

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import RecvWR, SendWR
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import (
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
    BLOCK_OP,
    BLOCK_POST,
    DRAIN_POST,
    DRAIN_WAIT,
    IDLE,
    GateState,
    Rank,
)
from verbspec.spec.gate.steps.common import StepsBase
from verbspec.spec.gate.variants import DEPTH_MISMATCH
from verbspec.spec.gate.wire import TAG_BULK, Payload, TcpItem
from verbspec.spec.values import evolve


class BigGateSteps(StepsBase):
    """A big gate's header, the drain, and the big-gate windows."""

    # ------------------------------------------------------------------ big gate
    def en_big_header_write(self, s):
        return self._phase_is(s, BIG_HDR_SEND)

    @action("rank", guard=en_big_header_write)
    def do_big_header_write(self, s: GateState, r: int):
        rk = s.ranks[r]
        item = TcpItem("header", rk.big_no, rk.big_chunks, self.rq_grant[r])
        return self._write(s, r, item, phase=BIG_HDR_READ)

    def en_big_header_read(self, s):
        return self._tcp_ready(s, BIG_HDR_READ)

    @action("rank", guard=en_big_header_read)
    def do_big_header_read(self, s: GateState, r: int):
        rk = s.ranks[r]
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        if item.kind != "header":
            return self._fail(s, r, errors.BIG_HEADER_MISFRAMED(item=item.describe()),
                              tcp_in=(item,))
        if item.value != rk.big_no:
            # ds4 compares magic, layer, tag and seq; the spec's header always carries the
            # magic and tag, and the big-gate number stands for the seq
            return self._fail(s, r, errors.BIG_DESYNC(
                got_layer=BIG_LAYER, got_tag=BIG_MAGIC, got_seq=item.value, layer=BIG_LAYER,
                seq=rk.big_no), tcp_in=(item,))
        if item.chunks != rk.big_chunks:
            return self._fail(s, r, errors.BIG_SIZE_MISMATCH(
                big=rk.big_no, chunks=rk.big_chunks, peer_chunks=item.chunks), tcp_in=(item,))
        own = self.rq_grant[r]
        depth = own if DEPTH_MISMATCH.on(self.v) else min(own, item.depth)
        s = self._put(s, r, hdr_ok=True, big_depth=self.cfgs[r].big_window(depth),
                      phase=DRAIN_POST if rk.window_active else BIG_BEGIN)
        return s, self._obs(s, r, tcp_in=(item,))

    # ------------------------------------------------------------------ drain
    def en_drain_post(self, s):
        return self._phase_is(s, DRAIN_POST)

    @action("rank", guard=en_drain_post)
    def do_drain_post(self, s: GateState, r: int):
        """Post window*chunks signaled dummy sends (BULK|i, 1-based as in ds4); each consumes
        one of the peer's outstanding lookahead receives. As in ds4, a dummy is as long as the
        gate chunk it stands for (dummy i: chunk i mod chunks) and is read from the staging
        scratch at that chunk's offset, so a dummy that meets a shorter receive fails it with a
        length error. The drain counts its dummies' completions itself (drain_sends); they are
        not in send_outstanding."""
        rk, c = s.ranks[r], self.cfgs[r]
        n = self.drain_wrs(r)
        wrs = tuple(SendWR(TAG_BULK | (i + 1), "stage", i % self.rank_chunks[r], 0,
                           c.chunk_len(i % self.rank_chunks[r]), True,
                           Payload("dummy", r, rk.sent_seq, i)) for i in range(n))
        s = evolve(s, fabric=fb.post_send(s.fabric, r, wrs))
        s = self._put(s, r, drain_recvs=0, drain_sends=0, phase=DRAIN_WAIT)
        return s, self._obs(s, r, sends=tuple(self._wr_view(r, w) for w in wrs))

    def en_drain_done(self, s: GateState):
        for r in (0, 1):
            rk, n = s.ranks[r], self.drain_wrs(r)
            if (rk.phase == DRAIN_WAIT and rk.drain_recvs >= n and rk.drain_sends >= n
                    and rk.send_outstanding == 0):
                yield (r,)

    @action("rank", guard=en_drain_done)
    def do_drain_done(self, s: GateState, r: int):
        rk = s.ranks[r]
        if s.script[rk.op] == BLOCK_OP and not self.cfgs[r].batch_path:
            after = BLOCK_POST
        else:
            # a big gate's or a batch gate's header comes before the drain, but a big gate's
            # after it under the drain-without-rendezvous variant
            after = BIG_BEGIN if rk.hdr_ok else BIG_HDR_SEND
        s = self._put(s, r, recv_done=rk.last_gate_seq, window_active=False, phase=after)
        return s, self._obs(s, r)

    # ------------------------------------------------------------------ big-gate windows
    def en_big_begin(self, s):
        return self._phase_is(s, BIG_BEGIN)

    @action("rank", guard=en_big_begin)
    def do_big_begin(self, s: GateState, r: int):
        """Size the next window and, as ds4 does before posting its receives, copy the
        window's payload into staging: a staging slot an earlier send still reads would be
        overwritten."""
        rk = s.ranks[r]
        if rk.window_active:
            return self._fail(s, r, errors.BIG_UNAVAILABLE())
        win = min(rk.big_depth, rk.big_chunks - rk.big_base)
        busy = sorted({w.slot for w in s.fabric.qps[r].sq if w.buf == "stage"} & set(range(win)))
        if busy:
            s = self._ghost(s, clobbered=f"rank {r} staged a big-gate window over staging slot "
                                         f"{busy[0]} while an earlier send still reads it")
        s = self._put(s, r, big_win=win, big_posted=0, big_sent=0, big_send_done=0,
                      big_recvd=frozenset(), phase=BIG_POST)
        return s, self._obs(s, r)

    def en_big_post_recv(self, s):
        return self._phase_is(s, BIG_POST)

    @action("rank", guard=en_big_post_recv)
    def do_big_post_recv(self, s: GateState, r: int):
        """Post the next chain (at most chain_max) of the window's staging receives."""
        c, rk = self.cfgs[r], s.ranks[r]
        n = min(c.chain_max, rk.big_win - rk.big_posted)
        length = self.big_lens(s, r)
        wrs = tuple(RecvWR(TAG_BULK | (i + 1), "stage", i, 0, length(rk.big_base + i),
                           Payload("big", 1 - r, rk.big_base + i, rk.big_no))
                    for i in range(rk.big_posted, rk.big_posted + n))
        s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "big-gate receive")
        posted = rk.big_posted + n
        s = self._put(s, r, big_posted=posted,
                      phase=BIG_BAR_SEND if posted == rk.big_win else BIG_POST)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in wrs))

    def en_big_barrier_write(self, s):
        return self._phase_is(s, BIG_BAR_SEND)

    @action("rank", guard=en_big_barrier_write)
    def do_big_barrier_write(self, s: GateState, r: int):
        rk = s.ranks[r]
        tag = (rk.barrier_tag + 1) & 0xFF
        item = TcpItem("byte", tag)
        return self._write(s, r, item, barrier_tag=tag, phase=BIG_BAR_READ)

    def en_big_barrier_read(self, s):
        return self._tcp_ready(s, BIG_BAR_READ)

    @action("rank", guard=en_big_barrier_read)
    def do_big_barrier_read(self, s: GateState, r: int):
        rk = s.ranks[r]
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        if item.kind != "byte" or item.value != rk.barrier_tag:
            return self._fail(s, r, errors.BIG_BARRIER(), tcp_in=(item,))
        s = self._put(s, r, phase=BIG_XFER)
        return s, self._obs(s, r, tcp_in=(item,))

    def _send_room(self, rk: Rank) -> int:
        """The next sub-batch's size: ds4 keeps the window's sends in flight
        (sent - completed) under the send depth."""
        return min(self.cfg.chain_max, rk.big_win - rk.big_sent,
                   self.cfg.big_send_depth() - (rk.big_sent - rk.big_send_done))

    def en_big_send(self, s: GateState):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == BIG_XFER and self._send_room(s.ranks[r]) > 0)

    @action("rank", guard=en_big_send)
    def do_big_send(self, s: GateState, r: int):
        """Post the next sub-batch of the window's sends from staging."""
        rk = s.ranks[r]
        n = self._send_room(rk)
        idx = range(rk.big_sent, rk.big_sent + n)
        length = self.big_lens(s, r)
        wrs = tuple(SendWR(TAG_BULK | (i + 1), "stage", i, 0, length(rk.big_base + i), True,
                           Payload("big", r, rk.big_base + i, rk.big_no)) for i in idx)
        s = evolve(s, fabric=fb.post_send(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "big-gate send")
        s = self._put(s, r, big_sent=rk.big_sent + n)
        return s, self._obs(s, r, sends=tuple(self._wr_view(r, w) for w in wrs))

    def en_big_window_done(self, s: GateState):
        for r in (0, 1):
            rk = s.ranks[r]
            if (rk.phase == BIG_XFER and rk.big_sent == rk.big_win
                    and len(rk.big_recvd) == rk.big_win and rk.big_send_done >= rk.big_win):
                yield (r,)

    @action("rank", guard=en_big_window_done)
    def do_big_window_done(self, s: GateState, r: int):
        """Every receive and send of the window completed: copy out of staging, next window."""
        rk = s.ranks[r]
        held = tuple(h for h in rk.held if h.buf != "stage")
        base = rk.big_base + rk.big_win
        if base >= rk.big_chunks and self._batching(s, r):
            # a batch gate is over: the next layer's, or the block's end, which returns at
            # once with no verify window armed
            if rk.block_layer + 1 < self.cfgs[r].block_layers:
                s = self._put(s, r, held=held, phase=BATCH_HDR_SEND,
                              **self._batch_begun(r, rk, rk.block_layer + 1))
            else:
                s = self._put(s, r, held=held, big_base=base, phase=IDLE, op=rk.op + 1)
        elif base >= rk.big_chunks:
            s = self._put(s, r, held=held, big_base=base, phase=IDLE, op=rk.op + 1)
        else:
            s = self._put(s, r, held=held, big_base=base, phase=BIG_BEGIN)
        return s, self._obs(s, r)
