"""The gate model's transitions: one move function per action of the spec, in MOVES.

A move function takes the pre-state, the parameters, the moving rank (for deliver: the source
rank) and the free choices, and gives the move's guard and the variables it sets. A step that
would leave what the counters describe exactly (a queue order the model does not keep, a third
unread TCP item) sets ``ghost.unmodelled``, which a lemma proves never set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import z3

from verbspec.proofs.gate.terms import (
    Edit,
    Move,
    Updates,
    alive,
    big_in_flight,
    big_window,
    bv,
    consumed,
    cq_used,
    delivered,
    div_c,
    grant,
    mismatch_possible,
    ph_in,
    poll_batch,
    recvs_reaped,
    sq_total,
    times_c,
    transmitted,
    umax,
    umin,
    wc32,
    z64,
)
from verbspec.proofs.gate.vocabulary import (
    ACTIONS,
    ARM_BAR_READ,
    ARM_BAR_SEND,
    ARM_POST,
    BIG_BAR_READ,
    BIG_BAR_SEND,
    BIG_BEGIN,
    BIG_HDR_READ,
    BIG_HDR_SEND,
    BIG_LIMIT,
    BIG_POST,
    BIG_XFER,
    CRASHED,
    DRAIN_POST,
    DRAIN_WAIT,
    FAILED,
    HOLD,
    IDLE,
    INIT,
    REAP,
    SEND,
    TCP_BYTE,
    TCP_HEADER,
    TCP_READS,
    WAIT,
    Choices,
    Params,
    State,
)
from verbspec.spec.gate import state as gs
from verbspec.spec.gate.system import BATCH_ACTIONS, BLOCK_ACTIONS, POST_FAILURE_ACTIONS

MoveFn = Callable[[State, Params, int, Choices], Move]


# ---------------------------------------------------------------------------- helpers
def push_cqe(s: State, prm: Params, r: int, count: z3.BitVecRef
             ) -> tuple[z3.BitVecRef, z3.BoolRef]:
    """A completion for rank r's CQ, counted in ``count``: the count after it (one more, or
    unchanged where the CQ is full) and the overflow flag after it (the QP enters error)."""
    full = z3.UGE(cq_used(s, r), prm.cq_depth)
    return z3.If(full, count, count + 1), z3.Or(s.rank[r].cq_overflow, full)


def _long_chain(s: State, prm: Params) -> z3.BoolRef:
    """A gate's chain is C work requests; the spec flags chains above chain_max."""
    return z3.Or(s.ghost.long_chain, z3.UGT(prm.chunks, z64(prm.chain_max)))


def _unmodelled(upd: Edit, *when: z3.BoolRef) -> None:
    upd.ghost.unmodelled = z3.Or(upd.ghost.unmodelled, *when)


def _tcp_push(s: State, r: int, upd: Edit, kind: int, value: z3.BitVecRef,
              chunks: z3.BitVecRef | None = None, depth: z3.BitVecRef | None = None) -> None:
    """Rank r writes one item to its TCP stream, into the first free of the two slots."""
    me, new = s.rank[r], upd.rank[r]
    n = me.tcp_unread
    item = (bv(kind, 8), z64(value), chunks if chunks is not None else bv(0),
            depth if depth is not None else bv(0))
    first = (me.tcp1_kind, me.tcp1_value, me.tcp1_chunks, me.tcp1_depth)
    second = (me.tcp2_kind, me.tcp2_value, me.tcp2_chunks, me.tcp2_depth)
    at1 = [z3.If(n == 0, x, old) for x, old in zip(item, first, strict=True)]
    at2 = [z3.If(n == 1, x, old) for x, old in zip(item, second, strict=True)]
    new.tcp1_kind, new.tcp2_kind = at1[0], at2[0]
    new.tcp1_value, new.tcp2_value = at1[1], at2[1]
    new.tcp1_chunks, new.tcp2_chunks = at1[2], at2[2]
    new.tcp1_depth, new.tcp2_depth = at1[3], at2[3]
    new.tcp_unread = n + 1
    _unmodelled(upd, z3.UGE(n, 2))


def _tcp_pop(s: State, src: int, upd: Edit) -> None:
    """The peer reads the head of src's TCP stream: the second slot moves up."""
    me, new = s.rank[src], upd.rank[src]
    new.tcp1_kind, new.tcp2_kind = me.tcp2_kind, bv(0, 8)
    new.tcp1_value, new.tcp2_value = me.tcp2_value, bv(0, 64)
    new.tcp1_chunks, new.tcp2_chunks = me.tcp2_chunks, bv(0)
    new.tcp1_depth, new.tcp2_depth = me.tcp2_depth, bv(0)
    new.tcp_unread = me.tcp_unread - 1


def script_recorded(s: State, r: int) -> z3.BoolRef:
    """The script already holds the op rank r calls next (the peer called it first)."""
    return z3.ULT(s.rank[r].ops_done, s.script.length)


def _script_ok(s: State, r: int, n: z3.BitVecRef, upd: Edit) -> z3.BoolRef:
    """The op the rank calls next is the script's if either rank recorded it; else it records
    it (the ranks are at most one op apart, so the last two entries are all that matter)."""
    op, slen = s.rank[r].ops_done, s.script.length
    recorded = script_recorded(s, r)
    upd.script.length = z3.If(recorded, slen, slen + 1)
    upd.script.last = z3.If(recorded, s.script.last, n)
    upd.script.before_last = z3.If(recorded, s.script.before_last, s.script.last)
    _unmodelled(upd, z3.UGT(op, slen), z3.ULT(op + 2, slen))
    want = z3.If(op + 1 == slen, s.script.last, s.script.before_last)
    return z3.Or(z3.Not(recorded), want == n)


def _op_done(s: State, r: int, upd: Edit) -> None:
    upd.rank[r].ops_done = s.rank[r].ops_done + 1
    upd.rank[r].phase = bv(IDLE, 8)


def _merge(target: Updates, pre: Mapping[str, z3.ExprRef], cond: z3.BoolRef,
           case: Updates) -> None:
    """Where ``cond`` holds, the variables ``case`` sets take its values."""
    for k, v in case.items():
        target[k] = z3.If(cond, v, target.get(k, pre[k]))


# ---------------------------------------------------------------------------- decode gates
def setup(s: State, prm: Params, r: int, choice: Choices) -> Move:
    upd = Edit(s)
    upd.rank[r].phase = bv(IDLE, 8)
    return upd.move(s.rank[r].phase == INIT)


def call_gate(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    seq = me.last_gate_seq + 1
    # the out-slot of seq is busy if a send of an earlier gate in the same slot has not
    # left the send queue yet; the oldest pending gate is the closest candidate
    first_pending = div_c(prm, transmitted(s, prm, r)) + 1
    busy = z3.And(me.gate_sends_queued != 0, z3.UGT(seq, prm.slot_period),
                  z3.UGE(seq - prm.slot_period, first_pending))
    upd = Edit(s)
    upd.rank[r].seq = seq
    upd.ghost.clobbered = z3.Or(s.ghost.clobbered, busy)
    upd.rank[r].phase = z3.If(me.window_active, bv(SEND, 8), bv(ARM_POST, 8))
    ok = _script_ok(s, r, bv(0), upd)
    # in IDLE the rank has done ops_done ops; the workload allows ops
    return upd.move(z3.And(me.phase == IDLE, z3.ULT(me.ops_done, prm.ops), ok))


def arm_post(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The receive stream restarts at the gate after the last one done; with no-barrier the
    window counts as active at once and the gate's send follows."""
    me = s.rank[r]
    upd = Edit(s)
    upd.rank[r].gate_recvs_posted = me.gate_recvs_posted + wc32(prm)
    upd.rank[r].recv_stream_head = times_c(prm, me.last_gate_seq)
    upd.ghost.long_chain = _long_chain(s, prm)
    upd.rank[r].window_active = z3.Or(me.window_active, prm.no_barrier)
    upd.rank[r].phase = z3.If(prm.no_barrier, bv(SEND, 8), bv(ARM_BAR_SEND, 8))
    _unmodelled(upd, me.gate_recvs_posted != 0, me.staging_recvs_posted != 0)
    return upd.move(me.phase == ARM_POST)


def barrier_write(s: State, prm: Params, r: int, choice: Choices) -> Move:
    upd = Edit(s)
    upd.rank[r].phase = bv(ARM_BAR_READ, 8)
    _tcp_push(s, r, upd, TCP_BYTE, bv(gs.WINDOW_BARRIER, 64))
    return upd.move(s.rank[r].phase == ARM_BAR_SEND)


def barrier_read(s: State, prm: Params, r: int, choice: Choices) -> Move:
    peer = s.rank[1 - r]
    ok = z3.And(peer.tcp1_kind == TCP_BYTE, peer.tcp1_value == gs.WINDOW_BARRIER)
    upd = Edit(s)
    upd.rank[r].window_active = ok
    upd.rank[r].phase = z3.If(ok, bv(SEND, 8), bv(FAILED, 8))
    _tcp_pop(s, 1 - r, upd)
    return upd.move(z3.And(s.rank[r].phase == ARM_BAR_READ, peer.tcp_unread != 0))


def gate_send(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    c32 = z3.Extract(31, 0, prm.chunks)
    # signal-last-only counts the chain once (the provider still completes every WR)
    counted = z3.If(prm.signal_last_only, z3.BitVecVal(1, 32), c32)
    upd = Edit(s)
    upd.rank[r].gate_sends_queued = me.gate_sends_queued + c32
    upd.rank[r].send_outstanding = me.send_outstanding + counted
    upd.rank[r].gates_sent = umax(me.gates_sent, me.seq)
    upd.ghost.long_chain = _long_chain(s, prm)
    upd.rank[r].phase = bv(WAIT, 8)
    # gate chunks queue behind dummies or big chunks still in flight
    _unmodelled(upd, me.dummy_sends_queued + me.dummies_on_wire + big_in_flight(s, r) != 0)
    return upd.move(me.phase == SEND)


def transmit(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The send queue's head leaves: gate chunks first, then dummies, then big chunks (the
    order they were posted in; gate_send and big_send flag any other order). UC completes a
    send as it leaves."""
    me = s.rank[r]
    gate, dummy = me.gate_sends_queued != 0, me.dummy_sends_queued != 0
    g, d, b = Edit(s), Edit(s), Edit(s)
    g.rank[r].gate_sends_queued = me.gate_sends_queued - 1
    g.rank[r].gate_chunks_on_wire = me.gate_chunks_on_wire + 1
    g.rank[r].gate_send_cqes, g.rank[r].cq_overflow = push_cqe(s, prm, r, me.gate_send_cqes)
    d.rank[r].dummy_sends_queued = me.dummy_sends_queued - 1
    d.rank[r].dummies_on_wire = me.dummies_on_wire + 1
    d.rank[r].dummy_send_cqes, d.rank[r].cq_overflow = push_cqe(s, prm, r, me.dummy_send_cqes)
    b.rank[r].big_sends_queued = me.big_sends_queued - 1
    b.rank[r].big_chunks_on_wire = me.big_chunks_on_wire + 1
    b.rank[r].big_send_cqes, b.rank[r].cq_overflow = push_cqe(s, prm, r, me.big_send_cqes)
    pre, upd = s.as_dict(), Edit(s)
    for cond, case in ((gate, g), (z3.And(z3.Not(gate), dummy), d),
                       (z3.And(z3.Not(gate), z3.Not(dummy)), b)):
        _merge(upd.updates, pre, cond, case.updates)
    return upd.move(z3.And(sq_total(s, r) != 0, z3.Not(me.cq_overflow), alive(s, r)))


def deliver(s: State, prm: Params, src: int, choice: Choices) -> Move:
    """The wire head from src (gate chunks first, then dummies, then big chunks) meets the
    head of the peer's receive queue (gate receives, or staging receives) over UC; a dead
    peer's NIC takes nothing."""
    dst = 1 - src
    sender, receiver = s.rank[src], s.rank[dst]
    gate_msg, dummy_msg = sender.gate_chunks_on_wire != 0, sender.dummies_on_wire != 0
    big_msg = z3.And(z3.Not(gate_msg), z3.Not(dummy_msg))
    upd = Edit(s)
    out = upd.rank[src]
    out.gate_chunks_on_wire = z3.If(gate_msg, sender.gate_chunks_on_wire - 1,
                                    sender.gate_chunks_on_wire)
    out.dummies_on_wire = z3.If(z3.And(z3.Not(gate_msg), dummy_msg),
                                sender.dummies_on_wire - 1, sender.dummies_on_wire)
    out.big_chunks_on_wire = z3.If(big_msg, sender.big_chunks_on_wire - 1,
                                   sender.big_chunks_on_wire)
    # the next big chunk in flight from src (none left: back to 0)
    last_big = z3.And(big_msg, big_in_flight(s, src) == 1)
    out.next_big_chunk = z3.If(big_msg, z3.If(last_big, bv(0), sender.next_big_chunk + 1),
                               sender.next_big_chunk)
    out.next_big_no = z3.If(last_big, z3.BitVecVal(0, 64), sender.next_big_no)
    gate_rq, big_rq = receiver.gate_recvs_posted != 0, receiver.staging_recvs_posted != 0
    no_recv = z3.Or(z3.And(z3.Not(gate_rq), z3.Not(big_rq)), receiver.cq_overflow)
    landed = receiver.recv_stream_head
    gate = div_c(prm, landed) + 1       # the gate of the receive at the head
    # into a gate receive: chunk landed + 1 of dst's receive stream
    into_gate = Edit(s)
    into_gate.rank[dst].gate_recvs_posted = receiver.gate_recvs_posted - 1
    into_gate.rank[dst].recv_stream_head = landed + 1
    # a gate chunk: the next of src's stream
    aligned = delivered(s, prm, src) == landed
    last_chunk = div_c(prm, landed + 1) == gate
    # the slot of `gate` still holds an unconsumed earlier gate (same slot: a period back)
    period = prm.slot_period
    clobber = z3.And(z3.UGT(gate, period), z3.UGE(gate - period, consumed(s, dst) + 1))
    g_ok = z3.And(aligned, z3.Not(clobber))
    g_land = Edit(s, into_gate.updates)
    g_land.rank[dst].arrived = z3.If(z3.And(g_ok, last_chunk), umax(receiver.arrived, gate),
                                     receiver.arrived)
    g_land.rank[dst].partial_gate = z3.If(g_ok, z3.If(last_chunk, z3.BitVecVal(0, 64), gate),
                                          receiver.partial_gate)
    g_land.rank[dst].gate_recv_cqes, g_land.rank[dst].cq_overflow = push_cqe(
        s, prm, dst, receiver.gate_recv_cqes)
    # a drain dummy: fits any lookahead receive of a later gate than the sender's last; the
    # slot must not hold data (an unconsumed earlier gate that landed, or part of this one)
    held_top = umax(receiver.arrived, receiver.partial_gate)
    d_aligned = z3.ULT(sender.gates_sent, gate)
    d_clobber = z3.Or(z3.And(z3.UGT(gate, period), z3.UGE(gate - period,
                                                          consumed(s, dst) + 1),
                             z3.ULE(gate - period, held_top)),
                      receiver.partial_gate == gate)
    d_land = Edit(s, into_gate.updates)
    d_land.rank[dst].dummy_recv_cqes, d_land.rank[dst].cq_overflow = push_cqe(
        s, prm, dst, receiver.dummy_recv_cqes)
    # a big chunk into a staging receive: the same big gate and chunk index
    b_land = Edit(s)
    b_land.rank[dst].staging_recvs_posted = receiver.staging_recvs_posted - 1
    b_land.rank[dst].big_landed = receiver.big_landed + 1
    b_land.rank[dst].big_recv_cqes, b_land.rank[dst].cq_overflow = push_cqe(
        s, prm, dst, receiver.big_recv_cqes)
    b_aligned = z3.And(sender.next_big_no == receiver.big_no,
                       sender.next_big_chunk == receiver.big_base + receiver.big_landed)
    # (when, effect, misaligned, clobbered)
    cases = ((z3.And(gate_rq, gate_msg), g_land, z3.Not(aligned), z3.And(aligned, clobber)),
             (z3.And(gate_rq, z3.Not(gate_msg), dummy_msg), d_land, z3.Not(d_aligned),
              z3.And(d_aligned, d_clobber)),
             (z3.And(gate_rq, big_msg), d_land, z3.BoolVal(True), z3.BoolVal(False)),
             (z3.And(z3.Not(gate_rq), z3.Not(big_msg)), b_land, z3.BoolVal(True),
              z3.BoolVal(False)),
             (z3.And(z3.Not(gate_rq), big_msg), b_land, z3.Not(b_aligned), z3.BoolVal(False)))
    pre = s.as_dict()
    land = Edit(s)
    mis, clob = z3.BoolVal(False), z3.BoolVal(False)
    for cond, eff, m, c in cases:
        _merge(land.updates, pre, cond, eff.updates)
        mis = z3.Or(mis, z3.And(cond, m))
        clob = z3.Or(clob, z3.And(cond, c))
    land.ghost.misaligned = z3.Or(s.ghost.misaligned, mis)
    land.ghost.clobbered = z3.Or(s.ghost.clobbered, clob)
    live = alive(s, dst)
    # a mismatched landing is a violation already; the length errors it may cause are not
    # modelled (the run ends there)
    for k, v in land.updates.items():
        upd.updates[k] = z3.If(z3.Or(no_recv, z3.Not(live)), pre[k], v)
    upd.ghost.dropped = z3.Or(s.ghost.dropped, z3.And(live, no_recv))
    return upd.move(sender.gate_chunks_on_wire + sender.dummies_on_wire
                    + sender.big_chunks_on_wire != 0)


def reap(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """Poll min(16, CQ) completions, split between the kinds as the choice says, with its
    warm-up leftovers (ignored) and error completions. The split is free (the CQ's
    interleaving is not kept); where the CQ holds at most 16 entries it is forced: everything
    is reaped. An error fails the rank, which keeps the accounting of the completions polled
    before it (all of them, without an error).

    What each completion counts for depends on the phase: a gate receive raises recv_done
    in WAIT; in DRAIN_WAIT every receive counts for drain_recvs and every BULK-tagged send
    (dummies, big chunks) for drain_sends; in BIG_XFER a staging receive counts for the window
    and a BULK send for its sends. Completions the protocol would refuse (a gate or dummy
    receive in a big-gate window, an index past the window) never occur: unmodelled."""
    me, c = s.rank[r], choice.rank[r]
    # (reaped, reaped before the first error, the CQ's count) per kind of completion
    kinds = ((c.gate_sends, c.gate_sends_before_error, me.gate_send_cqes),
             (c.gate_recvs, c.gate_recvs_before_error, me.gate_recv_cqes),
             (c.dummy_sends, c.dummy_sends_before_error, me.dummy_send_cqes),
             (c.dummy_recvs, c.dummy_recvs_before_error, me.dummy_recv_cqes),
             (c.big_sends, c.big_sends_before_error, me.big_send_cqes),
             (c.big_recvs, c.big_recvs_before_error, me.big_recv_cqes))
    ph = me.phase
    n = umin(cq_used(s, r), poll_batch(s, prm, r))
    error = c.errors != 0
    split = z3.And(sum((k for k, _, _ in kinds), bv(0)) + c.warm + c.errors == n,
                   *(z3.ULE(k, count) for k, _, count in kinds),
                   z3.ULE(c.warm, z3.ZeroExt(24, me.warm_cqes)),
                   z3.ULE(c.errors, z3.ZeroExt(24, me.error_cqes)),
                   z3.If(error, z3.And(*(z3.ULE(kb, k) for k, kb, _ in kinds)),
                         z3.And(*(kb == k for k, kb, _ in kinds))))
    upd = Edit(s)
    new = upd.rank[r]
    new.gate_send_cqes = me.gate_send_cqes - c.gate_sends
    new.gate_recv_cqes = me.gate_recv_cqes - c.gate_recvs
    new.dummy_send_cqes = me.dummy_send_cqes - c.dummy_sends
    new.dummy_recv_cqes = me.dummy_recv_cqes - c.dummy_recvs
    new.big_send_cqes = me.big_send_cqes - c.big_sends
    new.big_recv_cqes = me.big_recv_cqes - c.big_recvs
    new.warm_cqes = me.warm_cqes - z3.Extract(7, 0, c.warm)
    new.error_cqes = me.error_cqes - z3.Extract(7, 0, c.errors)
    in_wait, in_drain, in_big = ph == WAIT, ph == DRAIN_WAIT, ph == BIG_XFER
    # recv_done: in WAIT, the highest gate whose last chunk is among the receives taken
    krb = c.gate_recvs_before_error
    rr = recvs_reaped(s, r)
    top = div_c(prm, rr + z64(krb))
    rd = z3.If(z3.UGT(top, div_c(prm, rr)), umax(me.recv_done, top), me.recv_done)
    # tag-every-chunk: any chunk's completion names its gate, the last reaped chunk's included
    newest = div_c(prm, rr + z64(krb) + times_c(prm, z3.BitVecVal(1, 64)) - 1)
    rd = z3.If(z3.And(prm.tag_every_chunk, krb != 0), umax(me.recv_done, newest), rd)
    new.recv_done = z3.If(in_wait, rd, me.recv_done)
    bulk_sends = c.dummy_sends_before_error + c.big_sends_before_error
    # ds4's accounting: the drain and a big-gate window count their BULK sends themselves;
    # every other send completion reaped leaves send_outstanding
    sends = c.gate_sends_before_error + z3.If(z3.Or(in_drain, in_big), bv(0), bulk_sends)
    so = me.send_outstanding
    new.send_outstanding = z3.If(z3.UGE(so, sends), so - sends, bv(0))
    new.drain_recvs = z3.If(in_drain, me.drain_recvs + c.gate_recvs_before_error
                            + c.dummy_recvs_before_error + c.big_recvs_before_error,
                            me.drain_recvs)
    new.drain_sends = z3.If(in_drain, me.drain_sends + bulk_sends, me.drain_sends)
    new.big_send_done = z3.If(in_big, me.big_send_done + bulk_sends, me.big_send_done)
    new.big_sends_flying = z3.If(in_big, me.big_sends_flying - bulk_sends, me.big_sends_flying)
    new.big_recvd = z3.If(in_big, me.big_recvd + c.big_recvs_before_error, me.big_recvd)
    new.phase = z3.If(error, bv(FAILED, 8), ph)
    _unmodelled(upd,
                # dummy or big receives reaped as gate arrivals
                z3.And(in_wait, c.dummy_recvs + c.big_recvs != 0),
                # the window refuses anything but its own staging receives
                z3.And(in_big, c.gate_recvs + c.dummy_recvs != 0),
                z3.And(in_big, z3.UGT(me.big_recvd + c.big_recvs, me.big_win)))
    return upd.move(z3.And(ph_in(s, r, *REAP), cq_used(s, r) != 0, split))


def gate_done(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    seq = me.seq
    whole = z3.UGE(me.recv_stream_head, times_c(prm, seq))
    upd = Edit(s)
    upd.rank[r].gate_recvs_posted = me.gate_recvs_posted + z3.Extract(31, 0, prm.chunks)
    upd.rank[r].last_gate_seq = seq
    upd.ghost.stale = z3.Or(s.ghost.stale, z3.Not(whole))
    upd.ghost.out_of_order = z3.Or(s.ghost.out_of_order, seq != me.last_gate_seq + 1)
    upd.rank[r].phase = bv(HOLD, 8)
    return upd.move(z3.And(me.phase == WAIT, z3.UGE(me.recv_done, seq)))


def consume(s: State, prm: Params, r: int, choice: Choices) -> Move:
    upd = Edit(s)
    upd.rank[r].last_op_big = z3.BoolVal(False)
    _op_done(s, r, upd)
    return upd.move(s.rank[r].phase == HOLD)


# ---------------------------------------------------------------------------- drain, big gates
def call_big(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    n = choice.rank[r].big_size
    upd = Edit(s)
    upd.rank[r].set(big_chunks=n, big_no=me.big_no + 1, big_base=bv(0),
                    hdr_ok=z3.BoolVal(False), barrier_tag=bv(0, 8), phase=bv(BIG_HDR_SEND, 8))
    ok = _script_ok(s, r, n, upd)
    return upd.move(z3.And(prm.big_gates, me.phase == IDLE, z3.ULT(me.ops_done, prm.ops),
                           z3.UGE(n, 1), z3.ULT(n, BIG_LIMIT), ok))


def big_header_write(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    upd = Edit(s)
    upd.rank[r].phase = bv(BIG_HDR_READ, 8)
    _tcp_push(s, r, upd, TCP_HEADER, me.big_no, me.big_chunks, grant(prm, r))
    return upd.move(me.phase == BIG_HDR_SEND)


def big_header_read(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The peer's header must name the same big gate; the window is the smaller depth (with
    depth-mismatch: the rank's own)."""
    me, peer = s.rank[r], s.rank[1 - r]
    ok = z3.And(peer.tcp1_kind == TCP_HEADER, peer.tcp1_value == me.big_no,
                peer.tcp1_chunks == me.big_chunks)
    depth = umin(grant(prm, r), peer.tcp1_depth)
    if mismatch_possible(prm):
        depth = z3.If(prm.depth_mismatch, grant(prm, r), depth)
    upd = Edit(s)
    upd.rank[r].set(hdr_ok=ok, big_depth=z3.If(ok, big_window(prm, depth), me.big_depth),
                    phase=z3.If(ok, z3.If(me.window_active, bv(DRAIN_POST, 8),
                                          bv(BIG_BEGIN, 8)), bv(FAILED, 8)))
    _tcp_pop(s, 1 - r, upd)
    return upd.move(z3.And(me.phase == BIG_HDR_READ, peer.tcp_unread != 0))


def drain_post(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """window*chunks signaled dummies, queued behind the last gate's chunks."""
    me = s.rank[r]
    n = wc32(prm)
    upd = Edit(s)
    upd.rank[r].set(dummy_sends_queued=me.dummy_sends_queued + n, drain_recvs=bv(0),
                    drain_sends=bv(0), phase=bv(DRAIN_WAIT, 8))
    _unmodelled(upd, me.dummy_sends_queued + me.dummies_on_wire + big_in_flight(s, r) != 0)
    return upd.move(me.phase == DRAIN_POST)


def drain_done(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    n = wc32(prm)
    upd = Edit(s)
    upd.rank[r].set(recv_done=me.last_gate_seq, window_active=z3.BoolVal(False),
                    phase=z3.If(me.hdr_ok, bv(BIG_BEGIN, 8), bv(BIG_HDR_SEND, 8)))
    return upd.move(z3.And(me.phase == DRAIN_WAIT, z3.UGE(me.drain_recvs, n),
                           z3.UGE(me.drain_sends, n), me.send_outstanding == 0))


def big_begin(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """A window of min(depth, chunks left); a decode window still active is an error."""
    me = s.rank[r]
    active = me.window_active
    upd = Edit(s)
    new = upd.rank[r]
    new.big_win = z3.If(active, me.big_win, umin(me.big_depth, me.big_chunks - me.big_base))
    new.big_posted = z3.If(active, me.big_posted, bv(0))
    new.big_sent = z3.If(active, me.big_sent, bv(0))
    new.big_send_done = z3.If(active, me.big_send_done, bv(0))
    new.big_sends_flying = z3.If(active, me.big_sends_flying, bv(0))
    new.big_recvd = z3.If(active, me.big_recvd, bv(0))
    new.big_landed = z3.If(active, me.big_landed, bv(0))
    new.phase = z3.If(active, bv(FAILED, 8), bv(BIG_POST, 8))
    return upd.move(me.phase == BIG_BEGIN)


def big_post_recv(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    n = umin(prm.chain_max, me.big_win - me.big_posted)
    posted = me.big_posted + n
    upd = Edit(s)
    upd.rank[r].set(staging_recvs_posted=me.staging_recvs_posted + n, big_posted=posted,
                    phase=z3.If(posted == me.big_win, bv(BIG_BAR_SEND, 8), bv(BIG_POST, 8)))
    return upd.move(me.phase == BIG_POST)


def big_barrier_write(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    tag = me.barrier_tag + 1       # uint8: wraps after 255
    upd = Edit(s)
    upd.rank[r].set(barrier_tag=tag, phase=bv(BIG_BAR_READ, 8))
    _tcp_push(s, r, upd, TCP_BYTE, tag)
    return upd.move(me.phase == BIG_BAR_SEND)


def big_barrier_read(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me, peer = s.rank[r], s.rank[1 - r]
    ok = z3.And(peer.tcp1_kind == TCP_BYTE, peer.tcp1_value == z64(me.barrier_tag))
    upd = Edit(s)
    upd.rank[r].phase = z3.If(ok, bv(BIG_XFER, 8), bv(FAILED, 8))
    _tcp_pop(s, 1 - r, upd)
    return upd.move(z3.And(me.phase == BIG_BAR_READ, peer.tcp_unread != 0))


def send_room(s: State, prm: Params, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    # the window's sends in flight (sent - completed) stay under the send depth
    flying, depth = me.big_sends_flying, prm.big_send_depth
    return umin(umin(prm.chain_max, me.big_win - me.big_sent),
                z3.If(z3.UGE(flying, depth), bv(0), depth - flying))


def big_send(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The next sub-batch: staged and posted behind nothing else in flight."""
    me = s.rank[r]
    n = send_room(s, prm, r)
    idle = big_in_flight(s, r) == 0
    upd = Edit(s)
    upd.rank[r].set(big_sends_queued=me.big_sends_queued + n, big_sent=me.big_sent + n,
                    big_sends_flying=me.big_sends_flying + n,
                    next_big_chunk=z3.If(idle, me.big_base + me.big_sent, me.next_big_chunk),
                    next_big_no=z3.If(idle, me.big_no, me.next_big_no))
    _unmodelled(upd, me.gate_sends_queued + me.gate_chunks_on_wire + me.dummy_sends_queued
                + me.dummies_on_wire != 0,
                z3.And(me.big_sent == 0, z3.Not(idle)))
    return upd.move(z3.And(me.phase == BIG_XFER, n != 0))


def last_window(s: State, r: int) -> z3.BoolRef:
    """Rank r's current big-gate window is its big gate's last."""
    me = s.rank[r]
    return z3.UGE(me.big_base + me.big_win, me.big_chunks)


def big_window_done(s: State, prm: Params, r: int, choice: Choices) -> Move:
    me = s.rank[r]
    bw = me.big_win
    base = me.big_base + bw
    last = last_window(s, r)
    upd = Edit(s)
    upd.rank[r].set(big_base=base, last_op_big=z3.Or(me.last_op_big, last))
    _op_done(s, r, upd)
    upd.rank[r].phase = z3.If(last, bv(IDLE, 8), bv(BIG_BEGIN, 8))
    upd.rank[r].ops_done = z3.If(last, upd.rank[r].ops_done, me.ops_done)
    return upd.move(z3.And(me.phase == BIG_XFER, me.big_sent == bw, me.big_recvd == bw,
                           z3.UGE(me.big_send_done, bw)))


# ---------------------------------------------------------------------------- faults
def _failed(s: State, r: int) -> Edit:
    upd = Edit(s)
    upd.rank[r].phase = bv(FAILED, 8)
    upd.ghost.faulted = z3.BoolVal(True)
    return upd


def crash(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The first fault only."""
    upd = Edit(s)
    upd.rank[r].phase = bv(CRASHED, 8)
    upd.ghost.faulted = z3.BoolVal(True)
    return upd.move(z3.And(prm.faults, alive(s, r), s.rank[r].phase != INIT,
                           z3.Not(s.ghost.faulted)))


def error_completion(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """Once per rank, while it polls."""
    me = s.rank[r]
    upd = Edit(s)
    upd.rank[r].error_injected = z3.BoolVal(True)
    upd.ghost.faulted = z3.BoolVal(True)
    upd.rank[r].error_cqes, upd.rank[r].cq_overflow = push_cqe(s, prm, r, me.error_cqes)
    return upd.move(z3.And(prm.faults, ph_in(s, r, *REAP), z3.Not(me.error_injected)))


def stray_completion(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """A warm-up leftover: not a fault of the protocol's own."""
    me = s.rank[r]
    upd = Edit(s)
    upd.rank[r].strays_used = me.strays_used + 1
    upd.rank[r].warm_cqes, upd.rank[r].cq_overflow = push_cqe(s, prm, r, me.warm_cqes)
    return upd.move(z3.And(prm.faults, alive(s, r), me.phase != INIT,
                           z3.ULT(me.strays_used, prm.leftovers)))


def lose(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """Wire loss: outside the model (out_of_scope requires wire_loss=0), never enabled."""
    return Move(z3.BoolVal(False), {})


def bad_call(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """A wrong layer or seq: gate() refuses it before recording it."""
    me = s.rank[r]
    ok = _script_ok(s, r, bv(0), Edit(s))
    return _failed(s, r).move(z3.And(prm.faults, me.phase == IDLE,
                                     z3.ULT(me.ops_done, prm.ops), ok))


def timeout(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """Spurious: a CQ wait, or a TCP read with nothing from the peer to read, gives up."""
    waits = z3.Or(ph_in(s, r, *REAP),
                  z3.And(ph_in(s, r, *TCP_READS), s.rank[1 - r].tcp_unread == 0))
    return _failed(s, r).move(z3.And(prm.faults, waits))


def peer_gone(s: State, prm: Params, r: int, choice: Choices) -> Move:
    """The peer is dead and the rank waits for it."""
    p = 1 - r
    waits = z3.Or(ph_in(s, r, *REAP),
                  z3.And(ph_in(s, r, *TCP_READS), s.rank[p].tcp_unread == 0))
    upd = Edit(s)
    upd.rank[r].phase = bv(FAILED, 8)
    return upd.move(z3.And(z3.Not(alive(s, p)), waits))


def _outside_the_model(name: str) -> MoveFn:
    """A verify-block step, or a failing post or poll: outside the model (out_of_scope
    requires verify_blocks=0 and post_failures=0, where none is enabled), never enabled."""
    def never(s: State, prm: Params, r: int, choice: Choices) -> Move:
        return Move(z3.BoolVal(False), {})
    never.__name__ = name
    never.__doc__ = _outside_the_model.__doc__
    return never


OUTSIDE_THE_MODEL = tuple(_outside_the_model(name)
                          for name in BLOCK_ACTIONS + BATCH_ACTIONS + POST_FAILURE_ACTIONS)


# ---------------------------------------------------------------------------- the table
# each move is named after the spec action it models; the check below holds them to the spec
MOVES: dict[str, MoveFn] = {f.__name__: f for f in (
    setup, call_gate, call_big, arm_post, barrier_write, barrier_read, gate_send, reap,
    gate_done, consume, big_header_write, big_header_read, drain_post, drain_done,
    big_begin, big_post_recv, big_barrier_write, big_barrier_read, big_send,
    big_window_done, transmit, deliver, crash, error_completion, stray_completion, lose,
    bad_call, timeout, peer_gone, *OUTSIDE_THE_MODEL,
)}
if set(MOVES) != set(ACTIONS):
    raise ImportError(f"the model's moves {sorted(MOVES)} are not the spec's actions "
                      f"{sorted(ACTIONS)}")


def action_move(name: str, r: int, s: State, prm: Params, choice: Choices) -> Move:
    """Guard and effect of one action of rank r (for deliver: the source rank); a rank that
    dies in it keeps the phase it died in as phase_at_death."""
    m = MOVES[name](s, prm, r, choice)
    upd = Edit(s, m.updates)
    for x in (0, 1):
        phase = upd.rank[x].phase
        if not z3.eq(phase, s.rank[x].phase):
            dies = z3.And(alive(s, x), z3.UGT(phase, BIG_XFER))
            upd.rank[x].phase_at_death = z3.If(dies, s.rank[x].phase,
                                               s.rank[x].phase_at_death)
    return Move(m.guard, upd.updates)


def frame(s: State, t: State, updates: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """The post-state t: the updated variables as given, the others unchanged."""
    return z3.And([y == updates.get(k, x)
                   for (k, x), (_, y) in zip(s.items(), t.items(), strict=True)])


def move(name: str, r: int, s: State, t: State, prm: Params, choice: Choices) -> z3.BoolRef:
    m = action_move(name, r, s, prm, choice)
    return z3.And(m.guard, frame(s, t, m.updates))


def transition(s: State, t: State, prm: Params, choice: Choices) -> z3.BoolRef:
    return z3.Or([move(a, r, s, t, prm, choice) for a in ACTIONS for r in (0, 1)])


def initial(s: State) -> z3.BoolRef:
    """Both ranks in INIT, every other variable 0 (false)."""
    eqs = [s.rank[r].phase == INIT for r in (0, 1)]
    phases = [s.rank[0].phase, s.rank[1].phase]
    for _, v in s.items():
        if any(z3.eq(v, ph) for ph in phases):
            continue
        eqs.append(v == (z3.BoolVal(False) if z3.is_bool(v) else z3.BitVecVal(0, v.size())))
    return z3.And(eqs)
