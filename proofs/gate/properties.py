"""The gate system's nine invariants over the model's states: eight properties, as the spec's
invariants of the same names judge them (spec/gate/system.py), and no_deadlock, a consequence of
the inductive invariant (not proved by consecution of its own)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import z3

from verbspec.proofs.gate.moves import action_move
from verbspec.proofs.gate.terms import alive, bv, cq_used, grant, ph_in, poll_batch, sq_total, umin
from verbspec.proofs.gate.vocabulary import (
    ACTIONS,
    BIG_WINDOW,
    FAILED,
    IDLE,
    PROGRESS_ACTIONS,
    Choice,
    Choices,
    Params,
    State,
)

Invariant = Callable[[State, Params], z3.BoolRef]


def both(f: Callable[[State, Params, int], z3.BoolRef]) -> Invariant:
    """A fact of one rank (and its peer), claimed of both ranks."""
    return lambda s, prm: z3.And(f(s, prm, 0), f(s, prm, 1))


def sends_pending(s: State, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    # what send_outstanding counts: the gate sends (a drain and a big-gate window count
    # their BULK sends themselves)
    return me.gate_sends_queued + me.gate_send_cqes


def _send_accounting(s: State, prm: Params, r: int) -> z3.BoolRef:
    # the spec judges only a live rank's QP in RTS; an overflowed CQ put it in error
    me = s.rank[r]
    return z3.Or(me.cq_overflow, z3.Not(alive(s, r)), me.send_outstanding == sends_pending(s, r))


def _queue_bounds(s: State, prm: Params, r: int) -> z3.BoolRef:
    me = s.rank[r]
    return z3.And(z3.ULE(me.gate_recvs_posted + me.staging_recvs_posted, grant(prm, r)),
                  z3.ULE(sq_total(s, r), prm.sq_depth),
                  z3.Not(me.cq_overflow), z3.Not(s.ghost.long_chain))


def _watermark_sound(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.Not(s.ghost.stale),
                  z3.Or(z3.Not(alive(s, r)), z3.ULE(s.rank[r].recv_done, s.rank[r].arrived)))


def _mode_exclusive(s: State, prm: Params, r: int) -> z3.BoolRef:
    me = s.rank[r]
    return z3.And(z3.Not(z3.And(me.window_active, ph_in(s, r, *BIG_WINDOW))),
                  z3.Or(me.gate_recvs_posted == 0, me.staging_recvs_posted == 0))


PROPERTIES: dict[str, Invariant] = {
    "no_silent_drop": lambda s, prm: z3.Not(s.ghost.dropped),
    "chunk_alignment": lambda s, prm: z3.Not(s.ghost.misaligned),
    "watermark_sound": both(_watermark_sound),
    "slot_exclusive": lambda s, prm: z3.Not(s.ghost.clobbered),
    "send_accounting": both(_send_accounting),
    "queue_bounds": both(_queue_bounds),
    "gate_order": lambda s, prm: z3.Not(s.ghost.out_of_order),
    "mode_exclusive": both(_mode_exclusive),
}


def done(s: State, prm: Params) -> z3.BoolRef:
    """Each rank idle with the workload called, or dead (the spec's GateSystem.done)."""
    return z3.And([z3.Or(z3.And(s.rank[r].phase == IDLE, z3.UGE(s.rank[r].ops_done, prm.ops)),
                         z3.Not(alive(s, r))) for r in (0, 1)])


def choice_witness(s: State, prm: Params, r: int) -> Choice:
    """Choices that always exist: a split of one poll between the kinds of completion (in
    the order of Choice's fields, as many of each as fit, none after an error), and the
    script's size for a big gate (1 if free)."""
    me = s.rank[r]
    left = umin(cq_used(s, r), poll_batch(s, prm, r))
    taken = []
    for count in (me.gate_send_cqes, me.gate_recv_cqes, me.dummy_send_cqes,
                  me.dummy_recv_cqes, me.big_send_cqes, me.big_recv_cqes):
        k = umin(count, left)
        taken.append(k)
        left = left - k
    warm = umin(z3.ZeroExt(24, me.warm_cqes), left)
    op = me.ops_done
    want = z3.If(op + 1 == s.script.length, s.script.last, s.script.before_last)
    gs_, gr, ds, dr, bs, br = taken
    return Choice(gate_sends=gs_, gate_recvs=gr, dummy_sends=ds, dummy_recvs=dr,
                  big_sends=bs, big_recvs=br, warm=warm, errors=left - warm,
                  gate_sends_before_error=gs_, gate_recvs_before_error=gr,
                  dummy_sends_before_error=ds, dummy_recvs_before_error=dr,
                  big_sends_before_error=bs, big_recvs_before_error=br,
                  big_size=z3.If(z3.ULT(op, s.script.length), want, bv(1)))


def can_run(s: State, prm: Params, actions: Iterable[str]) -> z3.BoolRef:
    """Some of these actions is enabled."""
    choice = Choices((choice_witness(s, prm, 0), choice_witness(s, prm, 1)))
    return z3.Or([action_move(a, r, s, prm, choice).guard for a in actions for r in (0, 1)])


def _no_deadlock(s: State, prm: Params) -> z3.BoolRef:
    """The spec's no_deadlock: without a fault no rank fails and a progress step stays enabled
    until done; after one, some step (a fault's consequence included) stays enabled until every
    rank is done or dead. The model's failures are all documented errors."""
    ok = z3.Or(done(s, prm), can_run(s, prm, PROGRESS_ACTIONS))
    return z3.If(s.ghost.faulted, z3.Or(done(s, prm), can_run(s, prm, ACTIONS)),
                 z3.And(ok, *(s.rank[r].phase != FAILED for r in (0, 1))))


CONSEQUENCES: dict[str, Invariant] = {"no_deadlock": _no_deadlock}
