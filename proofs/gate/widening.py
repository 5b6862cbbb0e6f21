"""Post-states with their 32-bit counters widened, so that a count moved between counters
cancels before bit-blasting.

A 32-bit counter enters sums zero-extended, and z64(x - 1) is not z64(x) - 1 to the
simplifier (x may be 0), so a step that moves one count from a counter to another (transmit:
send queue to wire) would leave two adders for the SAT solver to show equal. Written as
z64(x) plus the step, with "the step does not wrap" among what the query shows, the two steps
cancel in the simplifier instead.
"""

from __future__ import annotations

import z3

from verbspec.proofs.gate.terms import consts, z64


def steps_of(x: z3.BitVecRef, v: z3.ExprRef, path: tuple = ()
           ) -> list[tuple[z3.BitVecRef, tuple]] | None:
    """v as x plus 64-bit steps, each under the path of conditions it is taken on, where v
    is x, v-like plus or minus a term free of x, or an If of v-likes; None otherwise."""
    if z3.eq(v, x):
        return []
    kind = v.decl().kind() if z3.is_app(v) else None
    if kind in (z3.Z3_OP_BADD, z3.Z3_OP_BSUB) and v.num_args() == 2:
        rest, y = steps_of(x, v.arg(0), path), v.arg(1)
        # x + (w - x) cancels in 32 bits already (big_send's sent + its sub-batch)
        if rest is None or x.decl().name() in consts(y):
            return None
        k = z3.simplify(y)      # a constant may come as a term (send queue + C: Extract of C)
        sign = 1 if kind == z3.Z3_OP_BADD else -1
        if z3.is_bv_value(k):
            return [*rest, (z3.BitVecVal(sign * k.as_long(), 64), path)]
        return [*rest, (z64(y) if sign > 0 else -z64(y), path)]
    if kind == z3.Z3_OP_ITE:
        c = v.arg(0)
        a, b = steps_of(x, v.arg(1), (*path, c)), steps_of(x, v.arg(2), (*path, z3.Not(c)))
        if a is not None and b is not None:
            return a + b
    return None


def delta(steps: list[tuple[z3.BitVecRef, tuple]]) -> z3.BitVecRef:
    """The sum of the steps taken. A constant step on a path is the constant times the
    path's 0/1 indicator, so two counters stepped on the same path cancel in a sum."""
    one, zero = z3.BitVecVal(1, 64), z3.BitVecVal(0, 64)
    terms = []
    for step, path in steps:
        if not path:
            terms.append(step)
            continue
        on = z3.And(*path) if len(path) > 1 else path[0]
        terms.append(step * z3.If(on, one, zero) if z3.is_bv_value(step)
                     else z3.If(on, step, zero))
    return sum(terms[1:], terms[0])


Widened = tuple[z3.BitVecRef, z3.BitVecRef, z3.BoolRef]


def widened(moved: list[tuple[z3.ExprRef, z3.ExprRef]]) -> list[Widened]:
    """For each 32-bit counter a move steps: its zero-extension, the post-state's written as
    that plus the steps, and the claim that they do not wrap (a query that fails to show it
    is inconclusive, never wrong). 8-bit tags wrap by design and are left alone, and so is
    a step by a constant on every path (the simplifier already lines that one up)."""
    out = []
    for x, v in moved:
        if not z3.is_bv(x) or x.size() != 32:
            continue
        steps = steps_of(x, v)
        if not steps or all(not path and z3.is_bv_value(step) for step, path in steps):
            continue
        lifted = z64(x) + delta(steps)
        out.append((z64(x), lifted, z64(v) == lifted))
    return out


def post_state(p: z3.BoolRef, moved: list[tuple[z3.ExprRef, z3.ExprRef]],
          wide: list[Widened]) -> z3.BoolRef:
    """Conjunct p in the post-state: each widened counter p mentions stands as its lifted
    term, whose no-wrap claim joins p. One substitution, so a lifted term keeps its
    pre-state x."""
    used = [w for w in wide if not z3.eq(z3.substitute(p, (w[0], w[1])), p)]
    post = z3.substitute(p, *[(ext, lifted) for ext, lifted, _ in used], *moved)
    return z3.And(*[side for _, _, side in used], post)

