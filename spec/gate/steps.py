"""The gate protocol, one rank's steps and the fabric's, as pure functions over GateState.

Each ``do_*`` method is one protocol step: it takes a state (and the action's arguments) and
returns the next state with the Observation an implementation would show for that step. Its
``@action`` declaration names its parameters and its guard, an ``en_*`` method yielding the
argument tuples for which the step is enabled; ``GateSpec.actions`` binds them into the
system's action list.

Every failure's text comes from a declaration in ``errors.py``: ds4's own format where ds4
prints one, filled from the state as ds4 fills it; otherwise a text marked as the spec's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action, action_names, bind
from verbspec.spec.fabric import RecvWR, SendWR
from verbspec.spec.gate import errors
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
    BLOCK_OP,
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
    REAP_PHASES,
    SEND,
    TCP_READ_PHASES,
    WAIT,
    WINDOW_BARRIER,
    CQEView,
    GateState,
    Ghost,
    Held,
    Observation,
    Rank,
    WRView,
    phase_step_allowed,
    view,
)
from verbspec.spec.gate.variants import (
    BLOCK_DRAIN_WITHOUT_RENDEZVOUS,
    DEPTH_MISMATCH,
    DRAIN_WITHOUT_RENDEZVOUS,
    NO_BARRIER,
    NO_SEQ_CHECK,
    SIGNAL_LAST_ONLY,
    STRAY_SEND_COMPLETION,
    STRAY_WARM_RECEIVE,
    TAG_EVERY_CHUNK,
    UNEXCHANGED_CONFIG,
    UNTAGGED_IN_BIG_WINDOW,
)
from verbspec.spec.gate.wire import (
    TAG_BLOCK,
    TAG_BULK,
    TAG_MASK,
    TAG_WARM,
    Hello,
    Payload,
    TcpItem,
)
from verbspec.spec.lts import Action
from verbspec.spec.values import evolve, set_item

# completions one poll takes, as ds4 sizes its ibv_wc arrays: 16 in a decode gate and a verify
# block (tp_rdma_drain_cq), 2*window+1 in a drain (RECV_WINDOW*2+1), 64 in a big-gate window
POLL_BATCH = 16
BIG_POLL_BATCH = 64
RANKS = ((0,), (1,))
# buffers laid out a vector per slot (the others a chunk per slot): the decode in- and
# out-slots and the verify block's rows (ds4's batch-in and batch-out regions)
VECTOR_BUFFERS = frozenset({"in", "out", "blk", "bout"})
# the groups of actions a configuration has or lacks together (GateSpec.actions)
VERIFY_BLOCK, BATCH_GATE, POST_FAILURE = "verify block", "batch gate", "post failure"


def poll_batch(cfg: GateConfig, phase: str) -> int:
    """The completions one reap polls in ``phase``."""
    if phase == DRAIN_WAIT:
        return 2 * cfg.window + 1
    return BIG_POLL_BATCH if phase == BIG_XFER else POLL_BATCH


def hello_mismatch(ours: Hello, peer: Hello) -> tuple[str, int, int] | None:
    """The first value of the hello in which the peer differs: (what, the peer's, ours)."""
    if peer.window != ours.window:
        return "receive window", peer.window, ours.window
    if peer.max_msg != ours.max_msg:
        return "message cap", peer.max_msg, ours.max_msg
    return None


class GateSpec:
    """The gate protocol for one configuration and set of variants."""

    def __init__(self, cfg: GateConfig, variants: frozenset[str]):
        self.cfg = cfg
        self.v = variants
        c = cfg
        # each rank's own configuration (they differ only where rank 1's is set apart)
        self.cfgs = (c.of_rank(0), c.of_rank(1))
        self.rank_chunks = (self.cfgs[0].chunks, self.cfgs[1].chunks)
        # ds4 never negotiates depths; the depth-mismatch variant grants rank 1 a 64-deep queue
        self.rq_grant = (c.rq_depth, min(c.rq_depth, c.chain_max)
                         if DEPTH_MISMATCH.on(variants) else c.rq_depth)
        self.big_sizes = (tuple(sorted({1, c.chain_max + 1, c.big_window(c.rq_depth) + 1}))
                          if c.big_gates else ())
        self.free_ops = (0,) + self.big_sizes + ((BLOCK_OP,) if c.verify_blocks else ())

    @cached_property
    def actions(self) -> tuple[Action, ...]:
        """This configuration's actions: the verify block's only with verify_blocks=1, its
        batch gates only where a rank's verify window is switched off, the failing posts and
        polls only with post_failures=1 (elsewhere never enabled)."""
        batches = self.cfg.verify_blocks and any(c.batch_path for c in self.cfgs)
        absent = (BLOCK_ACTIONS * (not self.cfg.verify_blocks) + BATCH_ACTIONS * (not batches)
                  + POST_FAILURE_ACTIONS * (not self.cfg.post_failures))
        return tuple(a for a in bind(self) if a.name not in absent)

    @cached_property
    def progress_actions(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if not a.fault)

    def can_progress(self, s: GateState) -> bool:
        return any(a.is_enabled(s) for a in self.progress_actions)

    # ------------------------------------------------------------------ helpers
    def _obs(self, s: GateState, r: int, **kw) -> Observation:
        return Observation(r, views=(view(s.ranks[0]), view(s.ranks[1])), **kw)

    def _put(self, s: GateState, r: int, **changes) -> GateState:
        rk = s.ranks[r]
        if "phase" in changes and not phase_step_allowed(rk.phase, changes["phase"]):
            raise AssertionError(f"spec bug: rank {r} moved from phase {rk.phase} to "
                                 f"{changes['phase']}, not an edge of NEXT_PHASES")
        return evolve(s, ranks=set_item(s.ranks, r, evolve(rk, **changes)))

    def _fail(self, s: GateState, r: int, msg: str, **kw) -> tuple[GateState, Observation]:
        s = self._put(s, r, phase=FAILED, error=msg, died_in=s.ranks[r].phase)
        return s, self._obs(s, r, result=msg, **kw)

    def _ghost(self, s: GateState, **add: str) -> GateState:
        g = s.ghost
        return evolve(s, ghost=evolve(g, **{k: getattr(g, k) + (v,) for k, v in add.items()}))

    def _write(self, s: GateState, r: int, item: TcpItem, **changes
               ) -> tuple[GateState, Observation]:
        """Rank ``r`` writes ``item`` on its TCP stream, and its state takes ``changes``."""
        s = evolve(s, fabric=fb.tcp_write(s.fabric, r, item))
        s = self._put(s, r, **changes)
        return s, self._obs(s, r, tcp_out=(item,))

    def _faulted(self, s: GateState) -> GateState:
        return s if s.ghost.faulted else evolve(s, ghost=evolve(s.ghost, faulted=True))

    def _wr_view(self, r: int, w: RecvWR | SendWR) -> WRView:
        stride = self.cfgs[r].vec_bytes if w.buf in VECTOR_BUFFERS else self.cfgs[r].max_msg
        return WRView(w.wr_id, w.buf, w.slot * stride + w.offset, w.length,
                      getattr(w, "signaled", True))

    def drain_wrs(self, r: int) -> int:
        """The dummies rank ``r`` sends in a drain, and the receives it waits for: its window."""
        return self.cfgs[r].window * self.rank_chunks[r]

    def _chain_check(self, s: GateState, r: int, n: int, what: str) -> GateState:
        if n > self.cfg.chain_max:
            return self._ghost(s, long_chains=f"rank {r} posted a chain of {n} {what} work "
                                              f"requests, above chain_max {self.cfg.chain_max}")
        return s

    def ops_allowed(self, s: GateState, r: int) -> tuple[int, ...]:
        """The ops the rank's application may start next: the script's, or a free choice."""
        rk = s.ranks[r]
        if rk.op < len(s.script):
            return (s.script[rk.op],)
        if rk.op < self.cfg.ops:
            return self.free_ops
        return ()

    def gate_recv_chain(self, r: int, seq: int) -> tuple[RecvWR, ...]:
        """Receive WRs for gate ``seq``: only the last chunk carries the seq as wr_id, so the
        watermark moves when the slot is whole (every chunk in the tag-every-chunk variant)."""
        c, peer = self.cfgs[r], 1 - r
        last = self.rank_chunks[r] - 1
        every = TAG_EVERY_CHUNK.on(self.v)
        return tuple(
            RecvWR(seq if (k == last or every) else 0, "in", c.slot(seq), k * c.max_msg,
                   c.chunk_len(k), Payload("gate", peer, seq, k))
            for k in range(self.rank_chunks[r]))

    # ------------------------------------------------------------------ setup
    def en_setup(self, s: GateState) -> Iterator[tuple]:
        return ((r,) for r in (0, 1) if s.ranks[r].phase == INIT)

    @action("rank", guard=en_setup)
    def do_setup(self, s: GateState, r: int):
        """The rank's setup, its hello included: the spec's hello compares the receive window
        and the message cap, which ds4's does not carry (unexchanged-config)."""
        c = self.cfgs[r]
        differs = hello_mismatch(c.hello, self.cfgs[1 - r].hello)
        if differs and not UNEXCHANGED_CONFIG.on(self.v):
            # ranks built apart are a fault of their environment, refused with a documented text
            what, peer, ours = differs
            return self._fail(self._faulted(s), r,
                              errors.HELLO_MISMATCH(what=what, peer=peer, ours=ours))
        s = self._put(s, r, phase=IDLE)
        log = ((errors.CHUNKED_VECTORS(vec_bytes=c.vec_bytes, max_msg=c.max_msg),)
               if self.rank_chunks[r] == 2 else ())
        return s, self._obs(s, r, log=log)

    # ------------------------------------------------------------------ application calls
    def gate_call_args(self, s: GateState, r: int) -> tuple[int, int, int]:
        seq = s.ranks[r].last_gate_seq + 1
        slot = self.cfg.slot(seq)
        return slot // 2, slot % 2, seq

    def en_call_gate(self, s: GateState):
        for r in (0, 1):
            if s.ranks[r].phase == IDLE and 0 in self.ops_allowed(s, r):
                yield (r, *self.gate_call_args(s, r))

    @action("rank", "layer", "gate", "seq", guard=en_call_gate)
    def do_call_gate(self, s: GateState, r: int, layer: int, gate: int, seq: int):
        """gate(layer, gate, seq): the checks come before any state is touched."""
        rk = s.ranks[r]
        if layer * 2 + gate != self.cfg.slot(seq):
            return self._fail(s, r, errors.GATE_ORDER(layer=layer, gate=gate, seq=seq))
        if seq != rk.last_gate_seq + 1 and not NO_SEQ_CHECK.on(self.v):
            return self._fail(s, r, errors.GATE_SEQ_ORDER(seq=seq, last=rk.last_gate_seq))
        if rk.op == len(s.script):
            s = evolve(s, script=s.script + (0,))
        # the application has written its vector for `seq` into out-slot(seq)
        slot = self.cfg.slot(seq)
        busy = [w for w in s.fabric.qps[r].sq if w.buf == "out" and w.slot == slot
                and w.payload.seq != seq]
        if busy:
            s = self._ghost(s, clobbered=f"rank {r} rewrote out-slot {slot} for gate {seq} while "
                                         f"the send of gate {busy[0].payload.seq} still reads it")
        s = self._put(s, r, seq=seq, phase=SEND if rk.window_active else ARM_POST)
        return s, self._obs(s, r)

    def en_call_big(self, s: GateState):
        for r in (0, 1):
            if s.ranks[r].phase == IDLE:
                for n in self.ops_allowed(s, r):
                    if n > 0:
                        yield (r, n)

    @action("rank", "chunks", guard=en_call_big)
    def do_call_big(self, s: GateState, r: int, chunks: int):
        rk = s.ranks[r]
        if rk.op == len(s.script):
            s = evolve(s, script=s.script + (chunks,))
        # ds4 drains only after the header exchange, which is the rendezvous that brings both
        # ranks to the switch together; the variant drains first.
        early = DRAIN_WITHOUT_RENDEZVOUS.on(self.v) and rk.window_active
        # the big-gate barrier byte counts this call's windows from 1, as ds4's does
        s = self._put(s, r, big_no=rk.big_no + 1, big_chunks=chunks, big_base=0, hdr_ok=False,
                      barrier_tag=0, phase=DRAIN_POST if early else BIG_HDR_SEND)
        return s, self._obs(s, r)

    # ------------------------------------------------------------------ arming
    def _phase_is(self, s: GateState, phase: str):
        return ((r,) for r in (0, 1) if s.ranks[r].phase == phase)

    def en_arm_post(self, s):
        return self._phase_is(s, ARM_POST)

    @action("rank", guard=en_arm_post)
    def do_arm_post(self, s: GateState, r: int):
        """Post the window's receive chains: gates seq .. seq+window-1."""
        rk = s.ranks[r]
        wrs: tuple[RecvWR, ...] = ()
        for q in range(rk.seq, rk.seq + self.cfgs[r].window):
            wrs += self.gate_recv_chain(r, q)
        s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
        s = self._chain_check(s, r, self.rank_chunks[r], "receive")
        if NO_BARRIER.on(self.v):
            s = self._put(s, r, window_active=True, phase=SEND)
        else:
            s = self._put(s, r, phase=ARM_BAR_SEND)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in wrs))

    def en_barrier_write(self, s):
        return self._phase_is(s, ARM_BAR_SEND)

    @action("rank", guard=en_barrier_write)
    def do_barrier_write(self, s: GateState, r: int):
        item = TcpItem("byte", WINDOW_BARRIER)
        return self._write(s, r, item, phase=ARM_BAR_READ)

    def _tcp_ready(self, s: GateState, phase: str):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == phase and s.fabric.tcp[1 - r])

    def en_barrier_read(self, s):
        return self._tcp_ready(s, ARM_BAR_READ)

    @action("rank", guard=en_barrier_read)
    def do_barrier_read(self, s: GateState, r: int):
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        if item.kind != "byte" or item.value != WINDOW_BARRIER:
            # the posted receives stay posted; the window stays inactive
            return self._fail(s, r, errors.WINDOW_BARRIER_MISMATCH(
                got=_first_byte(item), want=WINDOW_BARRIER), tcp_in=(item,))
        s = self._put(s, r, window_active=True, phase=SEND)
        return s, self._obs(s, r, tcp_in=(item,))

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
        """An error completion ends each wait with its own text; ds4 names the status by its
        ibv_wc_status number and, in a decode gate only, the work request."""
        status = errors.WC_STATUS(status=fb.WC_STATUS_CODE[c.status])
        if phase == DRAIN_WAIT:
            return errors.DRAIN_COMPLETION(status=status)
        if phase == BIG_XFER:
            return errors.BIG_COMPLETION(status=status)
        # a decode gate and the verify block's waits poll through tp_rdma_drain_cq
        return errors.GATE_COMPLETION(status=status, wr_id=c.wr_id)

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
                got=_first_byte(item), want=BLOCK_BARRIER), tcp_in=(item,))
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

    # ------------------------------------------------------------------ faults
    def en_crash(self, s: GateState):
        if self.cfg.faults:
            for r in (0, 1):
                if s.ranks[r].alive and s.ranks[r].phase != INIT and not s.ghost.faulted:
                    yield (r,)

    @action("rank", guard=en_crash, fault=True)
    def do_crash(self, s: GateState, r: int):
        s = self._faulted(self._put(s, r, phase=CRASHED, error="crashed",
                                    died_in=s.ranks[r].phase))
        return s, self._obs(s, r)

    def en_error_completion(self, s: GateState):
        if self.cfg.faults:
            for r in (0, 1):
                rk = s.ranks[r]
                if rk.phase in REAP_PHASES and "cqe" not in rk.faults_used:
                    yield (r,)

    @action("rank", guard=en_error_completion, fault=True)
    def do_error_completion(self, s: GateState, r: int):
        qp = fb.push_cqe(s.fabric.qps[r], fb.CQE("send", 0, fb.ST_RETRY, 0,
                                                  Payload("warm", r, 0, 0)), self.cfg.cq_depth)
        s = evolve(s, fabric=fb.set_qp(s.fabric, r, qp))
        rk = s.ranks[r]
        s = self._faulted(self._put(s, r, faults_used=rk.faults_used | {"cqe"}))
        return s, self._obs(s, r)

    def en_stray_completion(self, s: GateState):
        """Warm-up leftovers: setup's warm-up exchange (wr_id 1<<62) completing late. Over UC
        up to ``warm_send_leftovers`` send completions (ds4 posts a send per attempt and stops
        polling at the first send completion it sees); over RC none (its warm-up reaps its
        one send). A receive completion only with ``warm_recv_leftover``: ds4's warm-up
        succeeds only after reaping its one warm receive."""
        c = self.cfg
        sends = (c.faults or STRAY_SEND_COMPLETION.on(self.v)) and c.qp_type == "uc"
        recvs = c.warm_recv_leftover and (c.faults or STRAY_WARM_RECEIVE.on(self.v)
                                          or UNTAGGED_IN_BIG_WINDOW.on(self.v))
        for r in (0, 1):
            rk = s.ranks[r]
            if rk.alive and rk.phase != INIT:
                if sends and rk.strays.count("send") < c.warm_send_leftovers:
                    yield (r, "send")
                if recvs and "recv" not in rk.strays:
                    yield (r, "recv")

    @action("rank", "kind", guard=en_stray_completion, fault=True)
    def do_stray_completion(self, s: GateState, r: int, kind: str):
        cqe = fb.CQE(kind, TAG_WARM, fb.ST_OK, 1, Payload("warm", r, 0, 0))
        qp = fb.push_cqe(s.fabric.qps[r], cqe, self.cfg.cq_depth)
        s = evolve(s, fabric=fb.set_qp(s.fabric, r, qp))
        s = self._put(s, r, strays=tuple(sorted(s.ranks[r].strays + (kind,))))
        return s, self._obs(s, r)

    def en_lose(self, s: GateState):
        if self.cfg.wire_loss:
            return ((r,) for r in (0, 1) if s.fabric.wire[r])
        return iter(())

    @action("src", guard=en_lose, fault=True)
    def do_lose(self, s: GateState, src: int):
        f = fb.lose(s.fabric, src, self.cfg.cq_depth)
        s = self._faulted(evolve(s, fabric=f))
        return s, self._obs(s, 1 - src)

    def en_bad_call(self, s: GateState):
        """Application misuse: a wrong layer, a repeated seq, a skipped seq."""
        if not self.cfg.faults:
            return
        for r in (0, 1):
            rk = s.ranks[r]
            if rk.phase == IDLE and 0 in self.ops_allowed(s, r):
                layer, gate, seq = self.gate_call_args(s, r)
                yield (r, layer + 1, gate, seq)
                if seq > 1:
                    yield (r, *self._layer_gate(seq - 1), seq - 1)
                yield (r, *self._layer_gate(seq + 1), seq + 1)

    @action("rank", "layer", "gate", "seq", guard=en_bad_call, fault=True)
    def do_bad_call(self, s: GateState, r: int, layer: int, gate: int, seq: int):
        # a bad call is the environment misbehaving: the protocol must refuse it
        return self.do_call_gate(self._faulted(s), r, layer, gate, seq)

    def _layer_gate(self, seq: int) -> tuple[int, int]:
        slot = self.cfg.slot(seq)
        return slot // 2, slot % 2

    def en_timeout(self, s: GateState):
        """Spurious timeouts only when faults are explored; otherwise only a stalled wait. A
        wait is a CQ poll, or a data-socket read with nothing from the peer to read (ds4 sets
        the socket's receive timeout to the gate timeout)."""
        waiting = [r for r in (0, 1) if s.ranks[r].phase in REAP_PHASES
                   or (s.ranks[r].phase in TCP_READ_PHASES and not s.fabric.tcp[1 - r])]
        if waiting and (self.cfg.faults or not self.can_progress(s)):
            yield from ((r,) for r in waiting)

    def timed_out(self, r: int, rk: Rank) -> str:
        """The text of a wait that timed out, with ds4's counts at that point."""
        if rk.phase == WAIT:
            return errors.GATE_TIMEOUT(seq=rk.seq, recv_done=rk.recv_done)
        if rk.phase == DRAIN_WAIT:
            return errors.DRAIN_TIMEOUT(recvs=rk.drain_recvs, want=self.drain_wrs(r))
        if rk.phase == ARM_BAR_READ:
            return errors.WINDOW_BARRIER_TIMEOUT()
        if rk.phase == BIG_HDR_READ:
            return errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=rk.big_no,
                                            reason=errors.READ_TIMEOUT_ERRNO)
        if rk.phase == BIG_BAR_READ:
            return errors.BIG_BARRIER()
        if rk.phase == BLOCK_HDR_READ:
            return errors.BLOCK_HEADER_FAILED(reason=errors.READ_TIMEOUT_ERRNO)
        if rk.phase == BATCH_HDR_READ:
            return errors.BATCH_HEADER_FAILED(reason=errors.READ_TIMEOUT_ERRNO)
        if rk.phase == BLOCK_BAR_READ:
            return errors.WINDOW_BARRIER_TIMEOUT()
        if rk.phase == BLOCK_WAIT:
            return errors.BLOCK_TIMEOUT(layer=rk.block_layer, rows=rk.block_recv_done,
                                        want=(rk.block_layer + 1) * self.cfgs[r].block_rows)
        if rk.phase == BLOCK_END:
            return errors.BLOCK_END_TIMEOUT(rows=rk.block_recv_done, want=self.block_total(r),
                                            pending=rk.send_outstanding)
        return errors.BIG_TIMEOUT(recvs=len(rk.big_recvd), chunks=rk.big_win,
                                  sends=rk.big_send_done, sent=rk.big_sent)

    @action("rank", guard=en_timeout, fault=True)
    def do_timeout(self, s: GateState, r: int):
        s = self._faulted(s)
        return self._fail(s, r, self.timed_out(r, s.ranks[r]))

    # ------------------------------------------------------------------ post and poll failures
    def post_calls(self, s: GateState, r: int) -> tuple[int, ...]:
        """Where the rank's next step may fail posting, as the number of work requests it has
        posted when its failing call is refused: an arming posts a chain per gate (the first
        gate's or the last gate's may fail; the gates before stay posted), a verify-block gate
        its next layer's receives, then its sends; every other posting step one chain, which
        fails whole (at its first WR, as a full queue refuses it)."""
        c, rk = self.cfgs[r], s.ranks[r]
        ph = rk.phase
        if ph == ARM_POST:
            return tuple(sorted({0, (c.window - 1) * self.rank_chunks[r]}))
        if ph in (SEND, DRAIN_POST, BIG_POST) or (ph == WAIT and rk.recv_done >= rk.seq):
            return (0,)
        if ph == BIG_XFER:
            return (0,) if self._send_room(rk) > 0 else ()
        if ph == BLOCK_POST:
            return (0,) if c.block_wrs <= self.rq_grant[r] else ()
        if ph == BLOCK_SEND:
            ahead = c.block_wrs if rk.block_layer + 1 < c.block_layers else 0
            if ahead and c.block_wrs > self.rq_grant[r]:
                return ()       # ds4 fails silently before it posts
            sends = c.block_wrs <= self.rq_grant[r] // 2 and c.block_wrs <= c.sq_depth
            return ((0,) if ahead else ()) + ((ahead,) if sends else ())
        return ()

    def en_post_fail(self, s: GateState):
        if self.cfg.faults and self.cfg.post_failures:
            for r in (0, 1):
                for posted in self.post_calls(s, r):
                    yield (r, posted)

    @action("rank", "posted", guard=en_post_fail, fault=True, group=POST_FAILURE)
    def do_post_fail(self, s: GateState, r: int, posted: int):
        """ibv_post_recv or ibv_post_send refuses the step's post call once ``posted`` work
        requests of the step are up: they stay posted, and the rank fails with ds4's text for
        that call (nothing else of the step happens)."""
        c, rk = self.cfgs[r], s.ranks[r]
        s = self._faulted(s)
        reason = errors.POST_ERRNO
        if rk.phase == ARM_POST:
            wrs: tuple[RecvWR, ...] = ()
            for q in range(rk.seq, rk.seq + posted // self.rank_chunks[r]):
                wrs += self.gate_recv_chain(r, q)
            s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
            return self._fail(s, r, errors.POST_RECV(seq=rk.seq + posted // self.rank_chunks[r],
                                                     reason=reason),
                              recvs=tuple(self._wr_view(r, w) for w in wrs))
        if rk.phase == SEND:
            return self._fail(s, r, errors.POST_SEND(reason=reason))
        if rk.phase == WAIT:
            return self._fail(s, r, errors.POST_RECV(seq=rk.seq + c.window, reason=reason))
        if rk.phase == DRAIN_POST:
            return self._fail(s, r, errors.DRAIN_POST_FAILED(reason=reason))
        if rk.phase == BIG_POST:
            return self._fail(s, r, errors.BIG_POST_RECV(first=rk.big_posted, chunks=rk.big_win,
                                                         reason=reason))
        if rk.phase == BIG_XFER:
            return self._fail(s, r, errors.BIG_POST_SEND(wrs=self._send_room(rk), reason=reason))
        if rk.phase == BLOCK_POST:
            return self._fail(s, r, errors.BLOCK_POST_RECV(layer=0, reason=reason))
        if posted < (c.block_wrs if rk.block_layer + 1 < c.block_layers else 0):
            return self._fail(s, r, errors.BLOCK_POST_RECV(layer=rk.block_layer + 1,
                                                           reason=reason))
        recvs = ()
        if rk.block_layer + 1 < c.block_layers:
            s, recvs = self._post_block_layer(s, r, rk.block_layer + 1)
        return self._fail(s, r, errors.BLOCK_POST_SEND(layer=rk.block_layer, reason=reason),
                          recvs=tuple(self._wr_view(r, w) for w in recvs))

    def en_poll_fail(self, s: GateState):
        if self.cfg.faults and self.cfg.post_failures:
            yield from ((r,) for r in (0, 1) if s.ranks[r].phase in REAP_PHASES)

    @action("rank", guard=en_poll_fail, fault=True, group=POST_FAILURE)
    def do_poll_fail(self, s: GateState, r: int):
        """ibv_poll_cq returns an error: the wait ends, silently but in a big-gate window."""
        rk, c = s.ranks[r], self.cfgs[r]
        s = self._faulted(s)
        if rk.phase == DRAIN_WAIT:
            return self._fail(s, r, errors.DRAIN_POLL())
        if rk.phase == BIG_XFER:
            total = (rk.big_chunks - 1) * c.max_msg + self.big_lens(s, r)(rk.big_chunks - 1)
            return self._fail(s, r, errors.BIG_POLL(offset=rk.big_base * c.max_msg, bytes=total,
                                                    reason=errors.POLL_ERRNO))
        return self._fail(s, r, errors.CQ_POLL())

    def en_peer_gone(self, s: GateState):
        for r in (0, 1):
            rk = s.ranks[r]
            if s.ranks[1 - r].alive or rk.phase == BLOCK_END:
                continue        # ds4_tp_batch_block_end never checks the peer
            if rk.phase in REAP_PHASES or (rk.phase in TCP_READ_PHASES
                                           and not s.fabric.tcp[1 - r]):
                yield (r,)

    @action("rank", guard=en_peer_gone, fault=True)
    def do_peer_gone(self, s: GateState, r: int):
        """The peer's TCP socket closed: the liveness check (every 16384 polls) or a read sees
        it."""
        return self._fail(s, r, self.peer_gone_error(s.ranks[r]))

    def peer_gone_error(self, rk: Rank) -> str:
        """The text of a wait or read that found the peer gone, by the phase it ended."""
        if rk.phase == WAIT:
            return errors.GATE_PEER()
        if rk.phase == DRAIN_WAIT:
            return errors.DRAIN_PEER()
        if rk.phase == BIG_XFER:
            return errors.BIG_PEER()
        if rk.phase == ARM_BAR_READ:
            return errors.WINDOW_BARRIER_CLOSED()
        if rk.phase == BIG_HDR_READ:
            return errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=rk.big_no,
                                            reason=errors.PEER_CLOSED_ERRNO)
        if rk.phase == BIG_BAR_READ:
            return errors.BIG_BARRIER()
        if rk.phase == BLOCK_HDR_READ:
            return errors.BLOCK_HEADER_FAILED(reason=errors.PEER_CLOSED_ERRNO)
        if rk.phase == BATCH_HDR_READ:
            return errors.BATCH_HEADER_FAILED(reason=errors.PEER_CLOSED_ERRNO)
        if rk.phase == BLOCK_BAR_READ:
            return errors.WINDOW_BARRIER_CLOSED()
        if rk.phase == BLOCK_WAIT:
            return errors.BLOCK_PEER()
        raise AssertionError(f"spec bug: peer_gone in phase {rk.phase}")


# the verify block's steps, with verify_blocks=1
BLOCK_ACTIONS = action_names(GateSpec, group=VERIFY_BLOCK)
# a verify block's batch gates, with the verify window switched off
BATCH_ACTIONS = action_names(GateSpec, group=BATCH_GATE)
# the failing posts and polls, with post_failures=1
POST_FAILURE_ACTIONS = action_names(GateSpec, group=POST_FAILURE)


def _first_byte(item: TcpItem) -> int:
    """The byte a one-byte barrier read takes: a barrier byte, or the first byte of a header,
    the low byte of its little-endian magic."""
    return item.value if item.kind == "byte" else HEADER_MAGIC & 0xFF


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


def ghost_clean(g: Ghost) -> bool:
    return not (g.drops or g.misaligned or g.clobbered or g.stale or g.long_chains or g.order)
