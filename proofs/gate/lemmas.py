"""Strengthening invariants of the gate model: facts of every reachable state that make the
properties inductive. Each is claimed of both ranks (``me`` the rank, ``peer`` the other); a
dead rank's facts hold with the phase it died in (see terms.eph)."""

from __future__ import annotations

from collections.abc import Callable

import z3

from verbspec.proofs.gate.properties import PROPERTIES, Invariant, both, sends_pending
from verbspec.proofs.gate.terms import (
    alive,
    armed,
    big_in_flight,
    bv,
    delivered,
    div_c,
    eph,
    eph_in,
    grant,
    mismatch_possible,
    own_window,
    recvs_reaped,
    sends_reaped,
    sq_total,
    times_c,
    transmitted,
    umax,
    umin,
    wc32,
    z64,
)
from verbspec.proofs.gate.vocabulary import (
    ARM_BAR_READ,
    ARM_BAR_SEND,
    ARMING,
    BIG_BAR_READ,
    BIG_BAR_SEND,
    BIG_BEGIN,
    BIG_HDR_READ,
    BIG_HDR_SEND,
    BIG_LIMIT,
    BIG_ONLY,
    BIG_OP,
    BIG_POST,
    BIG_WINDOW,
    BIG_XFER,
    CRASHED,
    DECODE_OP,
    DRAIN_WAIT,
    DRAINING,
    HOLD,
    IDLE,
    INIT,
    PRE_DRAIN,
    SEND,
    SEQ_LIMIT,
    TCP_BYTE,
    TCP_HEADER,
    WAIT,
    WINDOWS,
    Params,
    State,
)
from verbspec.spec.gate import state as gs


def _z(w: int = 32) -> z3.BitVecRef:
    return z3.BitVecVal(0, w)


def closed(s: State, r: int) -> z3.BoolRef:
    """The rank drained its window since it last armed one (its gate receives are all
    consumed): the window is inactive after at least one gate, and it has not re-armed."""
    me = s.rank[r]
    return z3.And(z3.Not(me.window_active), me.last_gate_seq != 0,
                  z3.Not(eph_in(s, r, ARM_BAR_SEND, ARM_BAR_READ)))


def dummies_posted(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return z3.If(z3.Or(eph(s, r) == DRAIN_WAIT, closed(s, r)), wc32(prm), _z())


def dummies_delivered(s: State, prm: Params, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    return dummies_posted(s, prm, r) - me.dummy_sends_queued - me.dummies_on_wire


def draining_window(s: State, r: int) -> z3.BoolRef:
    """The rank is in a big gate with its decode window still to drain (or draining)."""
    me = s.rank[r]
    return z3.And(eph_in(s, r, *PRE_DRAIN, *DRAINING), me.window_active)


def dummies_in(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """Gate receives of r's current window that the peer's dummies consumed."""
    return z3.If(draining_window(s, r), dummies_delivered(s, prm, 1 - r),
                 z3.If(closed(s, r), wc32(prm), _z()))


def _phase_shape(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Phase fixes seq, the window flag, the sends and the big-gate header: seq is
    last_gate_seq + 1 while a decode gate is open, else last_gate_seq; the window is active
    from arming until the drain."""
    me = s.rank[r]
    ph, last, seq, sent = eph(s, r), me.last_gate_seq, me.seq, me.gates_sent
    opening = eph_in(s, r, *ARMING, SEND, WAIT)
    between = z3.Or(ph == IDLE, eph_in(s, r, *PRE_DRAIN))
    live = z3.And(
        z3.If(opening, seq == last + 1, seq == last),
        z3.Implies(ph == INIT, z3.And(last == 0, me.ops_done == 0, me.big_no == 0,
                                      z3.Not(me.last_op_big))),
        z3.Implies(eph_in(s, r, *ARMING), z3.Or(last == 0, me.last_op_big)),
        z3.Implies(ph == HOLD, last != 0),
        me.window_active == z3.Or(eph_in(s, r, SEND, WAIT, HOLD, *DRAINING),
                                  z3.And(between, last != 0, z3.Not(me.last_op_big))),
        sent == z3.If(ph == WAIT, seq, last),
        z3.Implies(eph_in(s, r, *DRAINING, *WINDOWS), me.hdr_ok),
        z3.Implies(eph_in(s, r, *PRE_DRAIN), z3.Not(me.hdr_ok)),
        z3.Implies(eph_in(s, r, *DRAINING), z3.And(z3.Not(me.last_op_big), last != 0)),
        z3.Implies(eph_in(s, r, *PRE_DRAIN, *DRAINING), me.big_base == 0),
        z3.Implies(eph_in(s, r, *BIG_OP), z3.And(z3.UGE(me.big_chunks, 1),
                                                z3.ULT(me.big_base, me.big_chunks))))
    # a dead rank keeps these with the phase it died in
    return z3.And(z3.ULE(me.phase, CRASHED), z3.ULE(me.phase_at_death, BIG_XFER),
                  z3.If(alive(s, r), me.phase_at_death == 0, me.phase_at_death != INIT), live)


def _seq_headroom(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Sequence numbers and counters stay within the workload, below the tag bits, so no sum
    wraps."""
    me = s.rank[r]
    below = [z3.ULT(v, SEQ_LIMIT) for v in (me.seq, me.last_gate_seq, me.recv_done, me.arrived,
                                            me.gates_sent, me.partial_gate)]
    return z3.And(*below, z3.ULT(me.seq + prm.window, SEQ_LIMIT),
                  z3.ULT(me.recv_stream_head, 2 * SEQ_LIMIT), z3.ULE(me.last_gate_seq, me.seq),
                  z3.ULE(me.seq, prm.ops), z3.ULE(me.ops_done, prm.ops),
                  z3.ULE(me.last_gate_seq - z3.If(eph(s, r) == HOLD, z3.BitVecVal(1, 64),
                                            z3.BitVecVal(0, 64)), me.ops_done),
                  z3.ULE(me.big_no - z3.If(eph_in(s, r, *BIG_OP), z3.BitVecVal(1, 64),
                                              z3.BitVecVal(0, 64)), me.ops_done),
                  z3.ULE(me.big_no, me.ops_done + 1), z3.ULE(me.last_gate_seq, me.ops_done + 1),
                  z3.ULE(s.script.length, prm.ops),
                  z3.ULT(me.big_chunks, BIG_LIMIT), z3.ULE(me.big_base, me.big_chunks),
                  z3.ULE(me.big_depth, own_window(prm, r)),
                  z3.ULE(me.big_win, me.big_depth),
                  z3.ULE(me.big_posted, me.big_win), z3.ULE(me.big_sent, me.big_win),
                  z3.ULE(me.big_landed, me.big_posted), z3.ULE(me.big_recvd, me.big_landed),
                  z3.ULE(me.big_send_done, me.big_sent),
                  z3.ULT(s.script.last, BIG_LIMIT), z3.ULT(s.script.before_last, BIG_LIMIT))


def _script_kept(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The script holds each rank's current op (once called) and its last op's kind."""
    me = s.rank[r]
    op, slen = me.ops_done, s.script.length
    at = {0: s.script.last, 1: s.script.before_last}

    def entry_is(k: z3.BitVecRef, cond: Callable[[z3.BitVecRef], z3.BoolRef]) -> z3.BoolRef:
        return z3.And(*(z3.Implies(k + 1 + back == slen, cond(v)) for back, v in at.items()))

    called = eph_in(s, r, *DECODE_OP, *BIG_OP)
    return z3.And(z3.ULE(op, slen), z3.ULE(slen, op + 2),
                  z3.Implies(op == 0, z3.Not(me.last_op_big)),
                  z3.Implies(called, z3.ULT(op, slen)),
                  z3.Implies(eph_in(s, r, *BIG_OP), entry_is(op, lambda v: v == me.big_chunks)),
                  z3.Implies(eph_in(s, r, *DECODE_OP), entry_is(op, lambda v: v == 0)),
                  z3.Implies(op != 0, entry_is(op - 1, lambda v: (v != 0) == me.last_op_big)),
                  z3.Implies(z3.And(me.last_op_big, z3.Not(eph_in(s, r, *BIG_OP))),
                             entry_is(op - 1, lambda v: v == me.big_chunks)))


def _ops_in_step(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The ranks are at most one op apart; the script is as long as the furthest op called.
    Live ranks count the same big gates and decode gates, but for the op one is ahead by."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    op, pop = me.ops_done, peer.ops_done
    in_big = [z3.If(eph_in(s, x, *BIG_OP), z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
              for x in (0, 1)]
    in_hold = [z3.If(eph(s, x) == HOLD, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
               for x in (0, 1)]
    one, zero = z3.BitVecVal(1, 64), z3.BitVecVal(0, 64)
    ahead_big = z3.If(z3.And(op == pop + 1, me.last_op_big), one, zero) - z3.If(
        z3.And(pop == op + 1, peer.last_op_big), one, zero)
    ahead_dec = z3.If(z3.And(op == pop + 1, z3.Not(me.last_op_big)), one, zero) - z3.If(
        z3.And(pop == op + 1, z3.Not(peer.last_op_big)), one, zero)
    return z3.And(z3.ULE(op, pop + 1), z3.Or(s.script.length == umax(op, pop),
                                             s.script.length == umax(op, pop) + 1),
                  me.big_no - in_big[r] - (peer.big_no - in_big[p]) == ahead_big,
                  me.last_gate_seq - in_hold[r] - (peer.last_gate_seq - in_hold[p]) == ahead_dec)


def _window_posted(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The gate receives posted since arming cover gates 1 .. last_gate_seq + window (none
    before the first arming; after a drain, all consumed); staging receives are the window's
    posted and not landed."""
    me = s.rank[r]
    total = me.recv_stream_head + z64(me.gate_recvs_posted)
    full = total == times_c(prm, me.last_gate_seq + prm.window)
    none = z3.And(me.recv_stream_head == 0, me.gate_recvs_posted == 0)
    is_armed = armed(s, r)
    gate = z3.And(z3.If(z3.Or(is_armed, me.last_gate_seq != 0), full, none),
                  z3.Implies(z3.Not(is_armed), me.gate_recvs_posted == 0))
    staging = z3.And(me.staging_recvs_posted == me.big_posted - me.big_landed,
                     z3.Implies(z3.Not(eph_in(s, r, *BIG_WINDOW)), me.staging_recvs_posted == 0))
    return z3.And(gate, staging)


def _tcp_in_flight(s: State, prm: Params, r: int) -> z3.BoolRef:
    """What r wrote on TCP and the peer has not read: its window barrier byte (until the peer
    reads it), its big-gate header, its latest big-gate barrier byte; at most the header and
    one byte at once. Counted by the headers (big_no) and tags each side wrote and read."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    n = me.tcp_unread
    one8, zero8 = z3.BitVecVal(1, 8), z3.BitVecVal(0, 8)
    ph, pph = eph(s, r), eph(s, p)
    same_op = me.ops_done == peer.ops_done
    arm = z3.Or(z3.And(ph == ARM_BAR_READ,
                       z3.Or(z3.ULT(peer.ops_done, me.ops_done),
                             z3.And(same_op, eph_in(s, p, INIT, IDLE, *ARMING)))),
                z3.And(eph_in(s, r, SEND, WAIT), same_op, pph == ARM_BAR_READ))
    hdr_w = me.big_no - z3.If(ph == BIG_HDR_SEND, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
    hdr_r = peer.big_no - z3.If(eph_in(s, p, *PRE_DRAIN), z3.BitVecVal(1, 64),
                                 z3.BitVecVal(0, 64))
    hdr = hdr_w - hdr_r
    # r's big-gate byte is unread only while both ranks are in the same big-gate call (each
    # call counts its windows from the first; a rank outside a call keeps its last tag)
    same_call = z3.And(same_op, eph_in(s, r, *BIG_OP), eph_in(s, p, *BIG_OP))
    byte = z3.If(same_call,
                 me.barrier_tag - peer.barrier_tag + z3.If(pph == BIG_BAR_READ, one8, zero8),
                 zero8)
    items = z3.If(arm, one8, zero8) + z3.Extract(7, 0, hdr) + byte
    exact = z3.And(
        z3.Or(hdr == 0, hdr == 1), z3.Or(byte == 0, byte == 1), n == items,
        z3.Implies(arm, z3.And(hdr == 0, byte == 0, me.tcp1_kind == TCP_BYTE,
                               me.tcp1_value == gs.WINDOW_BARRIER)),
        z3.Implies(hdr == 1, z3.And(me.tcp1_kind == TCP_HEADER, me.tcp1_value == me.big_no,
                                    me.tcp1_chunks == me.big_chunks,
                                    me.tcp1_depth == grant(prm, r))),
        z3.Implies(z3.And(byte == 1, hdr == 0),
                   z3.And(me.tcp1_kind == TCP_BYTE, me.tcp1_value == z64(me.barrier_tag))),
        z3.Implies(z3.And(byte == 1, hdr == 1),
                   z3.And(me.tcp2_kind == TCP_BYTE, me.tcp2_value == z64(me.barrier_tag))))
    # what holds of r's items whoever is alive: a header names r's big gate and depth; a
    # second item is r's latest big-gate byte
    fields = z3.And(
        z3.Implies(me.tcp1_kind == TCP_HEADER,
                   z3.And(me.tcp1_value == me.big_no, me.tcp1_chunks == me.big_chunks,
                          me.tcp1_depth == grant(prm, r))),
        z3.Implies(n == 2, z3.And(me.tcp1_kind == TCP_HEADER, me.tcp2_kind == TCP_BYTE,
                                  me.tcp2_value == z64(me.barrier_tag))),
        z3.Implies(me.tcp1_kind == TCP_BYTE,
                   z3.Or(me.tcp1_value == gs.WINDOW_BARRIER,
                         me.tcp1_value == z64(me.barrier_tag))))
    empty_slots = z3.And(
        z3.Implies(n == 0, z3.And(me.tcp1_kind == 0, me.tcp1_value == 0, me.tcp1_chunks == 0,
                                  me.tcp1_depth == 0)),
        z3.Implies(z3.ULE(n, 1), z3.And(me.tcp2_kind == 0, me.tcp2_value == 0,
                                        me.tcp2_chunks == 0, me.tcp2_depth == 0)))
    return z3.And(z3.ULE(n, 2), empty_slots, fields, exact)


def _streams_conserved(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Every gate chunk r sent is in its send queue, on the wire, or landed at the peer, in
    order; the peer's gate receives of the current window took r's gate chunks and then r's
    dummies. Sends not reaped are what send_outstanding counts."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    sent = times_c(prm, me.gates_sent)
    # a dead peer's NIC takes nothing: what reaches it is gone
    took = delivered(s, prm, r) + z64(dummies_in(s, prm, p))
    head = peer.recv_stream_head
    landed = z3.If(alive(s, p), head == took, z3.ULE(head, took))
    return z3.And(z3.ULE(z64(me.gate_sends_queued) + z64(me.gate_chunks_on_wire), sent),
                  landed,
                  z3.ULE(z64(me.gate_send_cqes), transmitted(s, prm, r)),
                  z3.ULE(z64(me.gate_recv_cqes), me.recv_stream_head),
                  z3.Implies(alive(s, r), me.send_outstanding == sends_pending(s, r)))


def _watermark_counts_reaped(s: State, prm: Params, r: int) -> z3.BoolRef:
    """While the window is open, recv_done is the last gate whose last chunk's completion was
    reaped and arrived the last whose last chunk landed; from the drain on, both are
    last_gate_seq and no gate completion is left. A passed gate is below both."""
    me = s.rank[r]
    counted = div_c(prm, recvs_reaped(s, r))
    open_ = z3.And(z3.Not(draining_window(s, r)), z3.Not(closed(s, r)))
    live = z3.If(open_, z3.And(me.recv_done == counted,
                               me.arrived == div_c(prm, me.recv_stream_head)),
                 z3.And(me.recv_done == me.last_gate_seq, me.arrived == me.last_gate_seq,
                        me.gate_recv_cqes == 0, me.partial_gate == 0))
    # a rank failed by an error completion kept only what it polled before the error
    return z3.And(z3.If(alive(s, r), live, z3.ULE(me.recv_done, counted)),
                  z3.ULE(me.last_gate_seq, me.recv_done))


def _partial_gate(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A gate's first chunk landed without its last exactly while the receive stream stands
    between the two, at the next gate after those whole."""
    me = s.rank[r]
    odd = z3.Extract(0, 0, me.recv_stream_head) == 1
    return z3.If(
        z3.And(prm.chunks == 2, odd, z3.Not(draining_window(s, r)), z3.Not(closed(s, r))),
        me.partial_gate == me.arrived + 1, me.partial_gate == 0)


def _lockstep(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A rank sends gate g only after the peer's gate g-1 landed, so it is at most one gate
    ahead; while the peer holds its last gate unconsumed it cannot be ahead at all."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    dv_gates = div_c(prm, delivered(s, prm, p))
    return z3.And(z3.ULE(me.gates_sent, dv_gates + 1),
                  z3.ULE(me.last_gate_seq, peer.last_gate_seq + 1),
                  z3.ULE(me.gates_sent, peer.gates_sent + 1),
                  z3.Implies(eph(s, p) == HOLD, z3.ULE(me.gates_sent, peer.last_gate_seq + 1)))


def _completions_behind(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The CQ is FIFO and reaped whole: a reap that reached gate g's arrival also took the
    send completions of gate g-1, which preceded it. So at most 2C sends and 2C receives
    wait in the CQ and at most 2C sends in the send queue."""
    me = s.rank[r]
    c2 = times_c(prm, z3.BitVecVal(2, 64))
    return z3.And(z3.ULE(times_c(prm, me.recv_done), sends_reaped(s, prm, r) + times_c(
                      prm, z3.BitVecVal(1, 64))),
                  z3.ULE(z64(me.gate_send_cqes), c2), z3.ULE(z64(me.gate_recv_cqes), c2),
                  z3.ULE(z64(me.gate_sends_queued), c2),
                  z3.ULE(z64(me.gate_recvs_posted), times_c(prm, prm.window)),
                  # at most the leftovers the faults may hand a rank, one injected error
                  z3.ULE(me.warm_cqes, me.strays_used), z3.ULE(me.strays_used, prm.leftovers),
                  z3.ULE(me.error_cqes, z3.If(me.error_injected, z3.BitVecVal(1, 8),
                                            z3.BitVecVal(0, 8))))


def _drain_counts(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Dummies: posted once per drain, window*chunks of them; their send completions count
    for drain_sends, the peer's dummies landing here for drain_recvs. Dummies in flight
    consume exactly the peer's remaining gate receives, which ask for later gates than the
    sender's last; the peer is draining too, at the same last gate."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    ph = eph(s, r)
    flying = me.dummy_sends_queued + me.dummies_on_wire
    # (drain_sends and drain_recvs of a rank an error completion failed are partial)
    return z3.And(
        z3.If(ph == DRAIN_WAIT,
              z3.Implies(alive(s, r), me.drain_sends + me.dummy_send_cqes
                         + me.dummy_sends_queued == wc32(prm)),
              z3.And(me.dummy_sends_queued == 0, me.dummy_send_cqes == 0)),
        z3.Implies(me.dummies_on_wire != 0, z3.Or(ph == DRAIN_WAIT, closed(s, r))),
        # (the peer's dummies reach r whether or not the peer is still alive)
        z3.Implies(alive(s, r), z3.If(
            ph == DRAIN_WAIT, me.drain_recvs + me.dummy_recv_cqes == dummies_in(s, prm, r),
            z3.If(draining_window(s, r), me.dummy_recv_cqes == dummies_in(s, prm, r),
                  me.dummy_recv_cqes == 0))),
        z3.Implies(flying != 0,
                   z3.And(draining_window(s, p), me.last_gate_seq == peer.last_gate_seq,
                          me.ops_done == peer.ops_done, eph_in(s, p, BIG_HDR_READ, *DRAINING),
                          z3.Implies(alive(s, p), flying == peer.gate_recvs_posted))))


def _big_window_shape(s: State, prm: Params, r: int) -> z3.BoolRef:
    """After the header exchange the depth is the agreed one; a window is min(depth, chunks
    left) and not empty; all its receives are posted before its barrier; sends, completions
    and receives are counted against it."""
    me = s.rank[r]
    ph = eph(s, r)
    depth = own_window(prm, r)
    in_win = eph_in(s, r, *BIG_WINDOW)
    return z3.And(
        z3.Implies(eph_in(s, r, *DRAINING, *WINDOWS), me.big_depth == depth),
        z3.Implies(in_win, z3.And(
            me.big_win == umin(me.big_depth, me.big_chunks - me.big_base),
            z3.Implies(eph_in(s, r, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER),
                       me.big_posted == me.big_win),
            z3.Implies(ph != BIG_XFER, z3.And(me.big_sent == 0, me.big_recvd == 0,
                                              me.big_send_done == 0)),
            # nothing reaches the window before its barrier byte is written
            z3.Implies(eph_in(s, r, BIG_POST, BIG_BAR_SEND), me.big_landed == 0),
            # (partial for a rank an error completion failed)
            z3.Implies(alive(s, r), z3.And(
                me.big_recvd + me.big_recv_cqes == me.big_landed,
                me.big_sent == me.big_sends_queued + me.big_send_cqes + me.big_send_done)))),
        z3.Implies(z3.Not(in_win), z3.And(me.big_sends_queued == 0, me.big_send_cqes == 0,
                                          me.big_recv_cqes == 0)),
        # the window's sends in flight, as ds4 counts them (sent - completed), are those not
        # reaped yet (0 outside a window)
        z3.Implies(alive(s, r), me.big_sends_flying == me.big_sends_queued + me.big_send_cqes),
        # a window starts with everything before it completed
        z3.Implies(eph_in(s, r, *WINDOWS), z3.And(
            me.gate_sends_queued == 0, me.gate_send_cqes == 0, me.dummy_sends_queued == 0,
            me.dummy_send_cqes == 0, me.gate_recv_cqes == 0, me.dummy_recv_cqes == 0)),
        z3.Implies(z3.And(alive(s, r), eph_in(s, r, BIG_BEGIN, BIG_POST, BIG_BAR_SEND)),
                   me.send_outstanding == 0))


def _big_chunks_aligned(s: State, prm: Params, r: int) -> z3.BoolRef:
    """r's big chunks in flight belong to the window the peer has posted and waits in: the
    same big gate, the next chunk the peer's receives expect, no more than it posted. The
    ranks' windows are the same size (not claimed with depth-mismatch, where in a big gate
    larger than the smaller window the rank with the larger one sends past the peer's)."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    flying = big_in_flight(s, r)
    same_win = z3.And(peer.big_no == me.big_no, peer.big_base == me.big_base)
    room, fits = peer.big_win, z3.ULE(flying, peer.staging_recvs_posted)
    same_size = me.big_win == peer.big_win
    if mismatch_possible(prm):
        wider = z3.And(prm.depth_mismatch, z3.UGT(me.big_win, peer.big_win))
        room = z3.If(wider, me.big_win, room)
        fits = z3.Or(wider, fits)
        same_size = z3.Or(prm.depth_mismatch, same_size)
    # a dead peer's NIC takes nothing: the chunks reaching it are gone
    return z3.And(
        z3.Implies(flying != 0, z3.And(
            eph_in(s, p, BIG_BAR_READ, BIG_XFER), me.next_big_no == peer.big_no,
            # they are for the peer's window, dead or alive (a dead peer cannot finish it)
            z3.ULE(peer.big_base, me.next_big_chunk),
            z3.ULE(z64(me.next_big_chunk) + z64(flying), z64(peer.big_base) + z64(room)),
            z3.Implies(alive(s, p), z3.And(me.next_big_chunk == peer.big_base + peer.big_landed,
                                           fits)))),
        z3.Implies(flying == 0, z3.And(me.next_big_chunk == 0, me.next_big_no == 0)),
        # the chunks in flight are the last sent: of the current window, or of the window
        # just done (or, once the next big gate is called, of the last big gate)
        z3.Implies(z3.And(flying != 0, me.next_big_no == me.big_no), z3.And(
            me.next_big_chunk + flying == me.big_base + z3.If(eph(s, r) == BIG_XFER,
                                                        me.big_sent, bv(0)),
            z3.ULE(flying, z3.If(eph(s, r) == BIG_XFER, me.big_sent, me.big_depth)))),
        z3.Implies(z3.And(flying != 0, me.next_big_no != me.big_no),
                   z3.And(me.next_big_no + 1 == me.big_no, eph_in(s, r, *PRE_DRAIN))),
        # the peer's window gets nothing from r before r is in it too (or past it)
        z3.Implies(z3.And(eph_in(s, p, *BIG_WINDOW), alive(s, p),
                          z3.Not(z3.And(eph_in(s, r, *BIG_WINDOW), same_win)),
                          z3.Not(z3.Or(me.ops_done == peer.ops_done + 1,
                                       z3.And(me.ops_done == peer.ops_done,
                                              eph_in(s, r, *WINDOWS),
                                              z3.UGT(me.big_base, peer.big_base))))),
                   peer.big_landed == 0),
        # a rank past the peer's window sent all of it: what did not reach the peer is in
        # flight
        z3.Implies(z3.And(eph_in(s, p, *BIG_WINDOW), alive(s, p),
                          z3.Or(z3.And(me.ops_done == peer.ops_done + 1, me.last_op_big),
                                z3.And(me.ops_done == peer.ops_done, eph_in(s, r, *WINDOWS),
                                       z3.UGT(me.big_base, peer.big_base)))),
                   z64(peer.big_landed) + z64(flying) == z64(peer.big_win)),
        # in the same window, what reached the peer plus what is in flight is what r sent
        z3.Implies(z3.And(eph_in(s, r, *BIG_WINDOW), eph_in(s, p, *BIG_WINDOW), same_win),
                   z3.And(same_size,
                          z3.Implies(alive(s, p), z64(peer.big_landed) + z64(flying)
                                     == z64(me.big_sent)))),
        z3.Implies(eph(s, r) == BIG_XFER,
                   z3.Or(z3.And(same_win, eph_in(s, p, BIG_BAR_READ, BIG_XFER)),
                         z3.And(z3.Not(same_win), flying == 0, me.big_sent == me.big_win))))


def _cq_budget(s: State, prm: Params, r: int, room: bool = False) -> z3.BoolRef:
    """In a drain or a big-gate window, the completions in the CQ plus those the posted work
    requests can still bring, plus room for the leftovers and error completion still
    possible, never exceed the CQ: window*chunks dummies each way and the last gate's C
    sends in a drain, a big window's sends and receives after it."""
    me = s.rank[r]
    c = z3.Extract(31, 0, times_c(prm, z3.BitVecVal(1, 64)))
    core = (me.gate_send_cqes + me.gate_recv_cqes + me.dummy_send_cqes + me.dummy_recv_cqes
            + me.big_send_cqes + me.big_recv_cqes + sq_total(s, r) + me.gate_recvs_posted
            + me.staging_recvs_posted)
    reserve = z3.If(prm.faults, z3.ZeroExt(24, me.warm_cqes) + z3.ZeroExt(24, prm.leftovers)
                    - z3.ZeroExt(24, me.strays_used) + z3.ZeroExt(24, me.error_cqes)
                    + z3.If(me.error_injected, bv(0), bv(1)), bv(0))
    wins = eph_in(s, r, *WINDOWS)
    bound = z3.If(wins, 2 * me.big_win, 2 * wc32(prm) + c)
    # decode windows are bounded by completions_behind instead (at most 4C, by lockstep)
    when = z3.And(alive(s, r), z3.Or(wins, eph_in(s, r, *DRAINING), draining_window(s, r)))
    return z3.Implies(when, z3.If(room, z3.ULE(bound + reserve, prm.cq_depth),
                                  z3.ULE(core, bound)))


def _counts_small(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Dummy and big-chunk counts stay within a drain's and a window's size, so no 32-bit
    sum of them wraps."""
    me = s.rank[r]
    wc, cap = wc32(prm), prm.big_cap
    return z3.And(z3.ULE(me.dummy_sends_queued, wc), z3.ULE(me.dummies_on_wire, wc),
                  z3.ULE(me.dummy_sends_queued + me.dummies_on_wire, wc),
                  z3.ULE(me.dummy_send_cqes, wc), z3.ULE(me.dummy_recv_cqes, wc),
                  z3.ULE(me.drain_recvs, wc), z3.ULE(me.drain_sends, wc),
                  z3.ULE(me.big_sends_queued, cap), z3.ULE(me.big_chunks_on_wire, cap),
                  z3.ULE(me.big_sends_queued + me.big_chunks_on_wire, cap),
                  z3.ULE(me.big_send_cqes, cap),
                  z3.ULE(me.big_recv_cqes, cap), z3.ULE(me.staging_recvs_posted, cap),
                  z3.ULE(me.send_outstanding, wc + cap + 4), z3.ULE(me.gate_recvs_posted, wc))


def _big_progress(s: State, prm: Params, r: int) -> z3.BoolRef:
    """In a big gate the ranks are at most a window apart: a rank past a window (or past the
    whole big gate) leaves the peer in that window with all its sends posted. A rank's big
    chunks are in flight only from its window's sends until the peer has them, which is
    before either rank gets past the next barrier or the next decode gate's sends."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    same_op = me.ops_done == peer.ops_done
    p_last = z3.UGE(peer.big_base + peer.big_win, peer.big_chunks)
    p_sent_all = z3.And(eph(s, p) == BIG_XFER, peer.big_sent == peer.big_win)
    r_win, p_win = eph_in(s, r, *WINDOWS), eph_in(s, p, *WINDOWS)
    flying = big_in_flight(s, r)
    return z3.And(
        z3.Implies(z3.And(me.ops_done == peer.ops_done + 1, me.last_op_big),
                   z3.And(p_sent_all, p_last)),
        z3.Implies(z3.And(same_op, r_win, p_win, z3.UGT(me.big_base, peer.big_base)),
                   z3.And(p_sent_all, me.big_base == peer.big_base + peer.big_win)),
        z3.Implies(z3.And(same_op, r_win, eph_in(s, p, *PRE_DRAIN, *DRAINING)),
                   z3.And(me.big_base == 0, eph(s, r) != BIG_XFER)),
        z3.Implies(flying != 0, z3.Not(eph_in(s, r, SEND, WAIT, HOLD, *DRAINING))),
        z3.Implies(me.dummy_sends_queued + me.dummies_on_wire != 0,
                   z3.Not(eph_in(s, r, SEND, WAIT, HOLD))))


def _epochs_in_step(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A rank whose window is open has read the peer's barrier byte, so the peer's window is
    open too (or the peer is between writing and reading its own byte); a rank a decode gate
    ahead had the peer's gate, so the peer has sent it. After a drain nothing of the decode
    window is left in flight or in the CQ; while a window is open no big chunk is in flight;
    the send stream is gate chunks, then dummies, then big chunks, never two of those kinds
    but gate chunks and dummies."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    gate_dummy = (me.gate_sends_queued + me.gate_chunks_on_wire + me.dummy_sends_queued
                  + me.dummies_on_wire)
    posted = dummies_posted(s, prm, r)
    return z3.And(
        z3.Implies(z3.Or(eph_in(s, r, SEND, WAIT, HOLD),
                         z3.And(eph(s, r) == IDLE, me.window_active)),
                   z3.Or(peer.window_active, eph(s, p) == ARM_BAR_READ)),
        z3.Implies(z3.And(peer.ops_done == me.ops_done + 1, z3.Not(peer.last_op_big)),
                   eph_in(s, r, WAIT, HOLD)),
        z3.Implies(closed(s, r), z3.And(*(v == 0 for v in (
            me.gate_sends_queued, me.gate_send_cqes, me.dummy_sends_queued, me.dummy_send_cqes,
            me.gate_recv_cqes, me.dummy_recv_cqes)))),
        z3.Implies(me.window_active, big_in_flight(s, r) == 0),
        # the peer's drain ended only once this rank's dummies all reached it
        z3.Implies(closed(s, p), z3.And(
            z3.Not(z3.And(draining_window(s, r), eph(s, r) != DRAIN_WAIT)),
            z3.Implies(eph(s, r) == DRAIN_WAIT,
                       me.dummy_sends_queued + me.dummies_on_wire == 0))),
        z3.Or(gate_dummy == 0, big_in_flight(s, r) == 0),
        z3.Implies(me.gate_sends_queued != 0, me.dummy_sends_queued == posted),
        z3.Implies(me.gate_chunks_on_wire != 0,
                   me.dummy_sends_queued + me.dummies_on_wire == posted))


def _barrier_tags(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Each big-gate call counts its windows' barrier bytes from 1: until its first window's
    byte a rank's tag is 0, and while both ranks are in the same call the tags they have
    written before their current windows agree, but for the one window a rank may be ahead
    by (the tag wraps at 256 and stays in step)."""
    p = 1 - r
    me = s.rank[r]
    peer = s.rank[p]
    one8, zero8 = z3.BitVecVal(1, 8), z3.BitVecVal(0, 8)

    def before(x: int) -> z3.BitVecRef:
        return s.rank[x].barrier_tag - z3.If(eph_in(s, x, BIG_BAR_READ, BIG_XFER), one8, zero8)

    first = z3.Or(eph_in(s, r, *PRE_DRAIN, *DRAINING),
                  z3.And(eph_in(s, r, BIG_BEGIN, BIG_POST, BIG_BAR_SEND), me.big_base == 0))
    same_call = z3.And(me.ops_done == peer.ops_done, eph_in(s, r, *BIG_OP),
                       eph_in(s, p, *BIG_OP))
    r_win, p_win = eph_in(s, r, *WINDOWS), eph_in(s, p, *WINDOWS)
    r_ahead = z3.And(r_win, p_win, z3.UGT(me.big_base, peer.big_base))
    p_ahead = z3.And(r_win, p_win, z3.UGT(peer.big_base, me.big_base))
    in_step = before(r) == before(p) + z3.If(r_ahead, one8, zero8) - z3.If(p_ahead, one8, zero8)
    return z3.And(z3.Implies(first, me.barrier_tag == 0), z3.Implies(same_call, in_step))


def _faults_recorded(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A dead rank or an injected error completion means a fault was injected, and none is
    without faults explored."""
    me = s.rank[r]
    return z3.And(z3.Implies(z3.Or(z3.Not(alive(s, r)), me.error_injected), s.ghost.faulted),
                  z3.Implies(z3.Not(prm.faults),
                             z3.And(z3.Not(s.ghost.faulted), me.strays_used == 0)))


def _decode_only(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Without big gates in the workload no big-gate state is ever touched (this one is
    inductive on its own, so decode-only proofs may take these variables as zero)."""
    big = [getattr(s.rank[r], name) for name in BIG_ONLY]
    quiet = [z3.Not(x) if z3.is_bool(x) else x == 0 for x in big]
    return z3.Implies(z3.Not(prm.big_gates),
                      z3.And(*quiet, z3.Not(eph_in(s, r, *BIG_OP)), s.script.last == 0,
                             s.script.before_last == 0))


def quiet_pairs(*states: State) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
    """The substitution that sets every big-gate-only variable of these states to zero."""
    pairs = []
    for st in states:
        for r in (0, 1):
            for name in BIG_ONLY:
                x = getattr(st.rank[r], name)
                zero = z3.BoolVal(False) if z3.is_bool(x) else z3.BitVecVal(0, x.size())
                pairs.append((x, zero))
        pairs += [(x, z3.BitVecVal(0, x.size())) for x in (st.script.last,
                                                            st.script.before_last)]
    return pairs


LEMMAS: dict[str, Invariant] = {
    "phase_shape": both(_phase_shape),
    "seq_headroom": both(_seq_headroom),
    "script_kept": both(_script_kept),
    "ops_in_step": both(_ops_in_step),
    "window_posted": both(_window_posted),
    "tcp_in_flight": both(_tcp_in_flight),
    "streams_conserved": both(_streams_conserved),
    "watermark_counts_reaped": both(_watermark_counts_reaped),
    "partial_gate": both(_partial_gate),
    "lockstep": both(_lockstep),
    "completions_behind": both(_completions_behind),
    "drain_counts": both(_drain_counts),
    "big_window_shape": both(_big_window_shape),
    "big_chunks_aligned": both(_big_chunks_aligned),
    "counts_small": both(_counts_small),
    "epochs_in_step": both(_epochs_in_step),
    "barrier_tags": both(_barrier_tags),
    "big_progress": both(_big_progress),
    "cq_budget": both(_cq_budget),
    # ... and that budget fits the CQ with room for the faults (a condition on the parameters)
    "cq_room": both(lambda s, prm, r: _cq_budget(s, prm, r, room=True)),
    # queue_bounds' CQ part on its own, so that an undersized receive or send queue (which the
    # spec only flags) does not take the CQ facts the other proofs need down with it
    "cq_no_overflow": both(lambda s, prm, r: z3.Not(s.rank[r].cq_overflow)),
    "faults_recorded": both(_faults_recorded),
    "decode_only": both(_decode_only),
    # the model is exact: no step leaves what its counters describe
    "counters_exact": lambda s, prm: z3.Not(s.ghost.unmodelled),
}


# Every invariant the induction works with: the properties and the strengthening invariants.
ALL_INVARIANTS: dict[str, Invariant] = {**PROPERTIES, **LEMMAS}

# How an invariant's own queries are solved where the default (bit-blasting) is slow: the CQ
# budget bounds a sum of counters that a reap only lowers (proofs/solving.py, TACTICS).
TACTIC: dict[str, str] = {"cq_budget": "bounds"}
