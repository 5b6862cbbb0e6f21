"""A verify block (ds4_tp_batch_block_begin .. _end), and its layers as batch gates where the
verify window is switched off."""

from __future__ import annotations

from collections.abc import Callable

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import RecvWR, SendWR
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import (
    BATCH_HDR_READ,
    BATCH_HDR_SEND,
    BIG_BEGIN,
    BIG_LAYER,
    BIG_MAGIC,
    BLOCK_BAR_READ,
    BLOCK_BAR_SEND,
    BLOCK_BARRIER,
    BLOCK_END,
    BLOCK_HDR_READ,
    BLOCK_HDR_SEND,
    BLOCK_OP,
    BLOCK_POST,
    BLOCK_SEND,
    BLOCK_WAIT,
    DRAIN_POST,
    IDLE,
    GateState,
    Rank,
)
from verbspec.spec.gate.steps.common import BATCH_GATE, VERIFY_BLOCK, StepsBase, first_byte
from verbspec.spec.gate.variants import BLOCK_DRAIN_WITHOUT_RENDEZVOUS
from verbspec.spec.gate.wire import TAG_BLOCK, Payload, TcpItem
from verbspec.spec.values import evolve


class BlockSteps(StepsBase):
    """The verify block and its batch gates."""

    # ------------------------------------------------------------------ verify block
    def block_total(self, r: int) -> int:
        """Rows one verify block of rank ``r`` receives: every layer's."""
        return self.cfgs[r].block_layers * self.cfgs[r].block_rows

    def block_recv_chain(self, r: int, layer: int) -> tuple[RecvWR, ...]:
        """A layer's receives: every row's chunks in the batch-in region, only a row's last
        chunk tagged, BLOCK | (layer*rows + row + 1), the others 0."""
        c = self.cfgs[r]
        out: list[RecvWR] = []
        for row in range(layer * c.block_rows, (layer + 1) * c.block_rows):
            for k in range(self.rank_chunks[r]):
                tag = TAG_BLOCK | (row + 1) if k == self.rank_chunks[r] - 1 else 0
                out.append(RecvWR(tag, "blk", row, k * c.max_msg, c.chunk_len(k),
                                  Payload("block", 1 - r, row, k)))
        return tuple(out)

    def en_call_block(self, s: GateState):
        for r in (0, 1):
            if s.ranks[r].phase == IDLE and BLOCK_OP in self.ops_allowed(s, r):
                yield (r,)

    @action("rank", guard=en_call_block, group=VERIFY_BLOCK)
    def do_call_block(self, s: GateState, r: int):
        """ds4_tp_batch_block_begin(rows, layers). The spec exchanges a header first, the
        rendezvous that brings both ranks to the drain together; ds4 drains at once (the
        block-drain-without-rendezvous variant)."""
        rk = s.ranks[r]
        if rk.op == len(s.script):
            s = evolve(s, script=s.script + (BLOCK_OP,))
        if self.cfgs[r].batch_path:
            # DS4_TP_DISABLE_VERIFY_WINDOW: the begin returns at once; each layer is a batch
            # gate (ds4_tp_batch_gate_exchange)
            s = self._put(s, r, block_posted=0, block_recv_done=0, phase=BATCH_HDR_SEND,
                          **self._batch_begun(r, rk, 0))
            return s, self._obs(s, r)
        if not BLOCK_DRAIN_WITHOUT_RENDEZVOUS.on(self.v):
            phase = BLOCK_HDR_SEND
        else:
            phase = DRAIN_POST if rk.window_active else BLOCK_POST
        s = self._put(s, r, block_layer=0, block_posted=0, block_recv_done=0, phase=phase)
        return s, self._obs(s, r)

    def en_block_header_write(self, s):
        return self._phase_is(s, BLOCK_HDR_SEND)

    @action("rank", guard=en_block_header_write, group=VERIFY_BLOCK)
    def do_block_header_write(self, s: GateState, r: int):
        item = TcpItem("block", self.cfgs[r].block_layers, self.cfgs[r].block_rows)
        return self._write(s, r, item, phase=BLOCK_HDR_READ)

    def en_block_header_read(self, s):
        return self._tcp_ready(s, BLOCK_HDR_READ)

    @action("rank", guard=en_block_header_read, group=VERIFY_BLOCK)
    def do_block_header_read(self, s: GateState, r: int):
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        c = self.cfgs[r]
        if item.kind != "block":
            # a batch header: the peer's verify window is switched off, a fault of the ranks'
            # environment, as ranks built apart are
            bad = self._faulted(s) if item.kind == "batch" else s
            return self._fail(bad, r, errors.BLOCK_HEADER_MISFRAMED(item=item.describe()),
                              tcp_in=(item,))
        if (item.value, item.chunks) != (c.block_layers, c.block_rows):
            return self._fail(s, r, errors.BLOCK_HEADER_MISMATCH(
                layers=c.block_layers, rows=c.block_rows, peer_layers=item.value,
                peer_rows=item.chunks), tcp_in=(item,))
        s = self._put(s, r, phase=DRAIN_POST if s.ranks[r].window_active else BLOCK_POST)
        return s, self._obs(s, r, tcp_in=(item,))

    # ------------------------------------------------------------------ batch gates
    def _batching(self, s: GateState, r: int) -> bool:
        """Rank ``r`` runs a verify block as batch gates (its verify window switched off)."""
        return self.cfgs[r].batch_path and s.script[s.ranks[r].op] == BLOCK_OP

    def big_lens(self, s: GateState, r: int) -> Callable[[int], int]:
        """Bytes of each chunk k of rank ``r``'s big-gate transfer: a big gate's, or a batch
        gate's rows."""
        c, chunks, batch = self.cfgs[r], s.ranks[r].big_chunks, self._batching(s, r)
        return lambda k: c.big_chunk_len(k, chunks, batch)

    def _batch_begun(self, r: int, rk: Rank, layer: int) -> dict[str, int | bool]:
        """A batch gate of ``layer`` begins: a big-gate transfer of the layer's rows, its seq
        the next big-gate number, its barrier bytes counted from 1 again (ds4's per call)."""
        return {"block_layer": layer, "big_no": rk.big_no + 1,
                "big_chunks": self.cfgs[r].batch_chunks, "big_base": 0, "hdr_ok": False,
                "barrier_tag": 0}

    def en_batch_header_write(self, s):
        return self._phase_is(s, BATCH_HDR_SEND)

    @action("rank", guard=en_batch_header_write, group=BATCH_GATE)
    def do_batch_header_write(self, s: GateState, r: int):
        """ds4_tp_batch_gate_exchange outside a verify window: the header {magic, layer, rows,
        seq} on the data socket."""
        rk, c = s.ranks[r], self.cfgs[r]
        item = TcpItem("batch", rk.block_layer, c.block_rows, rk.big_no)
        return self._write(s, r, item, phase=BATCH_HDR_READ)

    def en_batch_header_read(self, s):
        return self._tcp_ready(s, BATCH_HDR_READ)

    @action("rank", guard=en_batch_header_read, group=BATCH_GATE)
    def do_batch_header_read(self, s: GateState, r: int):
        """The peer's batch header: magic, layer, rows and seq must be this rank's; then the
        drain, and big-gate windows each rank sizes by its own receive depth (the header
        carries none)."""
        rk, c = s.ranks[r], self.cfgs[r]
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        want = (rk.block_layer, c.block_rows, rk.big_no)
        if item.kind == "header":
            # a big-gate header: ds4 reads its layer, its tag as the rows, its seq
            got = (BIG_LAYER, BIG_MAGIC, item.value)
        elif item.kind == "batch":
            got = (item.value, item.chunks, item.depth)
        else:
            # the spec's block header: the peer armed its verify window (a fault of the ranks'
            # environment, as above); or a barrier byte
            bad = self._faulted(s) if item.kind == "block" else s
            return self._fail(bad, r, errors.BATCH_HEADER_MISFRAMED(item=item.describe()),
                              tcp_in=(item,))
        if got != want:
            return self._fail(s, r, errors.BATCH_DESYNC(
                got_layer=got[0], got_rows=got[1], got_seq=got[2], layer=want[0], rows=want[1],
                seq=want[2]), tcp_in=(item,))
        s = self._put(s, r, hdr_ok=True, big_depth=c.big_window(self.rq_grant[r]),
                      phase=DRAIN_POST if rk.window_active else BIG_BEGIN)
        return s, self._obs(s, r, tcp_in=(item,))

    def _post_block_layer(self, s: GateState, r: int, layer: int
                          ) -> tuple[GateState, tuple[RecvWR, ...]]:
        """tp_rdma_block_post_layer: the layer's receives in one chain (the caller has checked
        that they fit the receive depth)."""
        wrs = self.block_recv_chain(r, layer)
        s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "receive")
        return self._put(s, r, block_posted=layer + 1), wrs

    def _block_recv_depth(self, s: GateState, r: int, layer: int):
        """ds4 posts nothing and fails silently when a layer's receives outnumber the receive
        depth."""
        return self._fail(s, r, errors.BLOCK_RECV_DEPTH(
            layer=layer, wrs=self.cfgs[r].block_wrs, depth=self.rq_grant[r]))

    def en_block_post(self, s):
        return self._phase_is(s, BLOCK_POST)

    @action("rank", guard=en_block_post, group=VERIFY_BLOCK)
    def do_block_post(self, s: GateState, r: int):
        """The decode window is drained: the block is active and layer 0's receives go up
        before the barrier."""
        if self.cfgs[r].block_wrs > self.rq_grant[r]:
            return self._block_recv_depth(s, r, 0)
        s, wrs = self._post_block_layer(s, r, 0)
        s = self._put(s, r, block_active=True, phase=BLOCK_BAR_SEND)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in wrs))

    def en_block_barrier_write(self, s):
        return self._phase_is(s, BLOCK_BAR_SEND)

    @action("rank", guard=en_block_barrier_write, group=VERIFY_BLOCK)
    def do_block_barrier_write(self, s: GateState, r: int):
        item = TcpItem("byte", BLOCK_BARRIER)
        return self._write(s, r, item, phase=BLOCK_BAR_READ)

    def en_block_barrier_read(self, s):
        return self._tcp_ready(s, BLOCK_BAR_READ)

    @action("rank", guard=en_block_barrier_read, group=VERIFY_BLOCK)
    def do_block_barrier_read(self, s: GateState, r: int):
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        if item.kind != "byte" or item.value != BLOCK_BARRIER:
            return self._fail(s, r, errors.WINDOW_BARRIER_MISMATCH(
                got=first_byte(item), want=BLOCK_BARRIER), tcp_in=(item,))
        s = self._put(s, r, phase=BLOCK_SEND)
        return s, self._obs(s, r, tcp_in=(item,))

    def en_block_send(self, s):
        return self._phase_is(s, BLOCK_SEND)

    @action("rank", guard=en_block_send, group=VERIFY_BLOCK)
    def do_block_send(self, s: GateState, r: int):
        """tp_rdma_block_gate_exchange(layer): the next layer's receives before this layer's
        sends (the peer sends layer+1 only after this layer's rows reached it), then every
        row's chunks from the batch-out region, all BLOCK | 1, signaled and counted in
        send_outstanding; more than half the receive depth or the send depth fails silently."""
        c, rk = self.cfgs[r], s.ranks[r]
        layer = rk.block_layer
        recvs: tuple[RecvWR, ...] = ()
        if layer + 1 < c.block_layers:
            if c.block_wrs > self.rq_grant[r]:
                return self._block_recv_depth(s, r, layer + 1)
            s, recvs = self._post_block_layer(s, r, layer + 1)
        n = c.block_wrs
        if n > self.rq_grant[r] // 2 or n > c.sq_depth:
            return self._fail(s, r, errors.BLOCK_SEND_DEPTH(
                layer=layer, wrs=n, half=self.rq_grant[r] // 2, sq_depth=c.sq_depth),
                recvs=tuple(self._wr_view(r, w) for w in recvs))
        wrs = tuple(SendWR(TAG_BLOCK | 1, "bout", row, k * c.max_msg, c.chunk_len(k), True,
                           Payload("block", r, row, k))
                    for row in range(layer * c.block_rows, (layer + 1) * c.block_rows)
                    for k in range(self.rank_chunks[r]))
        s = evolve(s, fabric=fb.post_send(s.fabric, r, wrs))
        s = self._chain_check(s, r, len(wrs), "send")
        s = self._put(s, r, send_outstanding=s.ranks[r].send_outstanding + n, phase=BLOCK_WAIT)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in recvs),
                            sends=tuple(self._wr_view(r, w) for w in wrs))

    def en_block_gate_done(self, s: GateState):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == BLOCK_WAIT and s.ranks[r].block_recv_done
                >= (s.ranks[r].block_layer + 1) * self.cfgs[r].block_rows)

    @action("rank", guard=en_block_gate_done, group=VERIFY_BLOCK)
    def do_block_gate_done(self, s: GateState, r: int):
        """The layer's rows arrived (as counted): the application reads them and calls the
        next layer's batch gate, or the block's end."""
        c, rk = self.cfgs[r], s.ranks[r]
        whole = {h.slot for h in rk.held if h.buf == "blk" and len(h.chunks) == self.rank_chunks[r]}
        first = (rk.block_layer + 1) * c.block_rows
        missing = [row for row in range(first) if row not in whole]
        if missing:
            s = self._ghost(s, stale=f"rank {r} passed verify-block layer {rk.block_layer} "
                                     f"({rk.block_recv_done} rows counted) but row "
                                     f"{missing[0]} has not landed whole")
        if rk.block_layer + 1 < c.block_layers:
            s = self._put(s, r, block_layer=rk.block_layer + 1, phase=BLOCK_SEND)
        else:
            s = self._put(s, r, phase=BLOCK_END)
        return s, self._obs(s, r)

    def en_block_end(self, s: GateState):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == BLOCK_END
                and s.ranks[r].block_recv_done >= self.block_total(r)
                and s.ranks[r].send_outstanding == 0)

    @action("rank", guard=en_block_end, group=VERIFY_BLOCK)
    def do_block_end(self, s: GateState, r: int):
        """ds4_tp_batch_block_end: every row arrived and every send completed; the block's
        rows are consumed and the queue pair is free for the other modes."""
        rk = s.ranks[r]
        held = tuple(h for h in rk.held if h.buf != "blk")
        s = self._put(s, r, held=held, block_active=False, phase=IDLE, op=rk.op + 1)
        return s, self._obs(s, r)
