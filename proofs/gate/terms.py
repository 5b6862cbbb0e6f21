"""Building blocks of the gate model's formulas: fresh variables, arithmetic helpers, the
stream positions derived from the counters, and the record of a move's effect."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import z3

from verbspec.proofs.gate.vocabulary import (
    ARM_BAR_READ,
    ARM_BAR_SEND,
    BIG_XFER,
    DRAIN_WAIT,
    HOLD,
    Choices,
    Params,
    State,
)
from verbspec.spec.gate.constants import BIG_POLL_BATCH, POLL_BATCH


def var(name: str, width: int) -> z3.ExprRef:
    return z3.Bool(name) if width == 0 else z3.BitVec(name, width)


def fresh_state(tag: str) -> State:
    return State.build(lambda name, w: var(f"{name}@{tag}", w))


def fresh_params(tag: str = "") -> Params:
    return Params.build(lambda name, w: var(f"{name}{tag}", w))


def fresh_choice(tag: str) -> Choices:
    return Choices.build(lambda name, w: var(f"{name}@{tag}", w))


def z64(x: z3.BitVecRef) -> z3.BitVecRef:
    return z3.ZeroExt(64 - x.size(), x) if x.size() < 64 else x


def bv(v: int, w: int = 32) -> z3.BitVecRef:
    return z3.BitVecVal(v, w)


def times_c(prm: Params, x: z3.BitVecRef) -> z3.BitVecRef:
    """x * chunks for chunks in {1, 2}, as a shift (cheaper to bit-blast than a multiply)."""
    return z3.If(prm.chunks == 1, x, x << 1)


def div_c(prm: Params, x: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(prm.chunks == 1, x, z3.LShR(x, 1))


def umax(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(z3.UGE(a, b), a, b)


def umin(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(z3.ULE(a, b), a, b)


def ph_in(s: State, r: int, *codes: int) -> z3.BoolRef:
    return z3.Or([s.rank[r].phase == c for c in codes])


def wc32(prm: Params) -> z3.BitVecRef:
    """window * chunks: a drain's dummies, the lookahead window's receives."""
    return z3.Extract(31, 0, times_c(prm, prm.window))


# derived stream positions (all in chunks)
def transmitted(s: State, prm: Params, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    return times_c(prm, me.gates_sent) - z64(me.gate_sends_queued)


def delivered(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """Gate chunks from r that left the wire (landed at the peer, absent drops)."""
    return transmitted(s, prm, r) - z64(s.rank[r].gate_chunks_on_wire)


def sends_reaped(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return transmitted(s, prm, r) - z64(s.rank[r].gate_send_cqes)


def recvs_reaped(s: State, r: int) -> z3.BitVecRef:
    return s.rank[r].recv_stream_head - z64(s.rank[r].gate_recv_cqes)


def alive(s: State, r: int) -> z3.BoolRef:
    return z3.ULE(s.rank[r].phase, BIG_XFER)


def eph(s: State, r: int) -> z3.BitVecRef:
    """The rank's phase, or for a dead rank the phase it died in: a dead rank's counters stay
    what they were, so the facts its phase implies about them still hold."""
    return z3.If(alive(s, r), s.rank[r].phase, s.rank[r].phase_at_death)


def eph_in(s: State, r: int, *codes: int) -> z3.BoolRef:
    e = eph(s, r)
    return z3.Or([e == c for c in codes])


def armed(s: State, r: int) -> z3.BoolRef:
    """The rank has posted its window's receives (a dead rank: had, when it died)."""
    return z3.Or(eph_in(s, r, ARM_BAR_SEND, ARM_BAR_READ), s.rank[r].window_active)


def consumed(s: State, r: int) -> z3.BitVecRef:
    """Gates the application has read: all up to last_gate_seq, but the held one in HOLD."""
    me = s.rank[r]
    return me.last_gate_seq - z3.If(me.phase == HOLD, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))


def poll_batch(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """The completions one reap polls in r's phase (the spec's poll_batch): 2*window+1 in a
    drain, 64 in a big-gate window, 16 otherwise."""
    ph = s.rank[r].phase
    drain = z3.Extract(31, 0, 2 * prm.window + 1)
    return z3.If(ph == DRAIN_WAIT, drain,
                 z3.If(ph == BIG_XFER, bv(BIG_POLL_BATCH), bv(POLL_BATCH)))


def cq_used(s: State, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    return (sum((me.gate_send_cqes, me.gate_recv_cqes, me.dummy_send_cqes, me.dummy_recv_cqes,
                 me.big_send_cqes, me.big_recv_cqes), bv(0))
            + z3.ZeroExt(24, me.warm_cqes) + z3.ZeroExt(24, me.error_cqes))


def sq_total(s: State, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    return me.gate_sends_queued + me.dummy_sends_queued + me.big_sends_queued


def big_in_flight(s: State, r: int) -> z3.BitVecRef:
    return s.rank[r].big_sends_queued + s.rank[r].big_chunks_on_wire


def big_window(prm: Params, depth: z3.BitVecRef) -> z3.BitVecRef:
    """The window for a granted receive depth: capped by big_depth and staging, at least 1."""
    return umax(umin(depth, prm.big_cap), bv(1))


def mismatch_possible(prm: Params) -> bool:
    """Whether depth-mismatch may hold (a concrete false keeps the base protocol's terms)."""
    return not z3.is_false(z3.simplify(prm.depth_mismatch))


def grant(prm: Params, r: int) -> z3.BitVecRef:
    """Rank r's granted receive depth: rq_depth, but depth-mismatch grants rank 1 only
    min(rq_depth, chain_max) (the spec's rq_grant)."""
    if r == 0 or not mismatch_possible(prm):
        return prm.rq_depth
    return z3.If(prm.depth_mismatch, umin(prm.rq_depth, prm.chain_max), prm.rq_depth)


def own_window(prm: Params, r: int) -> z3.BitVecRef:
    """The big-gate window rank r settles on after the header exchange: for the smaller of the
    two grants, or with depth-mismatch for its own."""
    if not mismatch_possible(prm):
        return big_window(prm, prm.rq_depth)
    return big_window(prm, z3.If(prm.depth_mismatch, grant(prm, r),
                                 umin(grant(prm, 0), grant(prm, 1))))


# ---------------------------------------------------------------------------- a move's effect
Updates = dict[str, z3.ExprRef]     # qualified variable name -> its value after the move


@dataclass(frozen=True)
class Move:
    """A move of one rank: when it is enabled, and the variables it sets (the others keep
    their values)."""

    guard: z3.BoolRef
    updates: Updates


class RecordEdit:
    """One record of an Edit: reading a field gives its value after the edits so far,
    assigning it records the update."""

    def __init__(self, edit: Edit, prefix: str, record: Any) -> None:
        object.__setattr__(self, "_edit", edit)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_record", record)
        object.__setattr__(self, "_names", {f.name for f in fields(record)})

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(name)
        return self._edit.updates.get(f"{self._prefix}.{name}", getattr(self._record, name))

    def __setattr__(self, name: str, value: z3.ExprRef) -> None:
        if name not in self._names:
            raise AttributeError(f"{self._prefix} has no variable {name}")
        key = f"{self._prefix}.{name}"
        self._edit.updates[key] = value

    def set(self, **values: z3.ExprRef) -> None:
        for name, value in values.items():
            setattr(self, name, value)


class Edit:
    """A move's effect under construction, over a pre-state: ``e.rank[r].phase = ...``."""

    def __init__(self, pre: State, updates: Mapping[str, z3.ExprRef] | None = None) -> None:
        self.pre = pre
        self.updates: Updates = dict(updates or {})
        self.rank = (RecordEdit(self, "rank0", pre.rank[0]),
                     RecordEdit(self, "rank1", pre.rank[1]))
        self.ghost = RecordEdit(self, "ghost", pre.ghost)
        self.script = RecordEdit(self, "script", pre.script)

    def move(self, guard: z3.BoolRef) -> Move:
        return Move(guard, self.updates)


# ---------------------------------------------------------------------------- formulas
def is_var(x: z3.ExprRef) -> bool:
    """A free constant: a state, choice or parameter variable."""
    return z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED


def consts(e: z3.ExprRef) -> set[str]:
    """Names of the free constants of a term."""
    seen: set[int] = set()
    out: set[str] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if is_var(x):
            out.add(x.decl().name())
        todo.extend(x.children())
    return out


def conjuncts(e: z3.BoolRef) -> list[z3.BoolRef]:
    if z3.is_and(e):
        return [x for c in e.children() for x in conjuncts(c)]
    return [e]
