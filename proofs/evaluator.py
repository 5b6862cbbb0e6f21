"""z3 terms compiled to Python functions, to evaluate a few fixed terms on many concrete states.

Substituting values into a model's term and simplifying costs z3 milliseconds per call; a
function generated once from the term's DAG (a local per shared subterm, in topological
order) costs microseconds, which is what lets a refinement check visit every edge of its
configurations. Booleans evaluate to Python bools, bit-vectors to their unsigned value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import z3

Evaluator = Callable[[Sequence[Any]], list[Any]]


def _signed(name: str, width: int) -> str:
    return f"({name} - (1 << {width}) if {name} >> {width - 1} else {name})"


def _expr(t: z3.ExprRef, args: list[str], widths: list[int]) -> str:
    """The Python expression of one node over its children's locals."""
    k = t.decl().kind()
    width = t.size() if z3.is_bv(t) else 0
    mask = (1 << width) - 1
    a = args
    simple = {
        z3.Z3_OP_EQ: lambda: " == ".join(a) if len(a) == 2 else
        " and ".join(f"{a[0]} == {x}" for x in a[1:]),
        z3.Z3_OP_DISTINCT: lambda: f"len({{{', '.join(a)}}}) == {len(a)}",
        z3.Z3_OP_ITE: lambda: f"({a[1]} if {a[0]} else {a[2]})",
        z3.Z3_OP_AND: lambda: "(" + " and ".join(a) + ")" if a else "True",
        z3.Z3_OP_OR: lambda: "(" + " or ".join(a) + ")" if a else "False",
        z3.Z3_OP_NOT: lambda: f"(not {a[0]})",
        z3.Z3_OP_IMPLIES: lambda: f"((not {a[0]}) or {a[1]})",
        z3.Z3_OP_XOR: lambda: f"({a[0]} != {a[1]})",
        z3.Z3_OP_BADD: lambda: f"(({' + '.join(a)}) & {mask})",
        z3.Z3_OP_BSUB: lambda: f"(({a[0]} - {a[1]}) & {mask})",
        z3.Z3_OP_BMUL: lambda: f"(({' * '.join(a)}) & {mask})",
        z3.Z3_OP_BNEG: lambda: f"((-{a[0]}) & {mask})",
        z3.Z3_OP_BUDIV: lambda: f"({a[0]} // {a[1]} if {a[1]} else {mask})",
        z3.Z3_OP_BUDIV_I: lambda: f"({a[0]} // {a[1]} if {a[1]} else {mask})",
        z3.Z3_OP_BUREM: lambda: f"({a[0]} % {a[1]} if {a[1]} else {a[0]})",
        z3.Z3_OP_BUREM_I: lambda: f"({a[0]} % {a[1]} if {a[1]} else {a[0]})",
        z3.Z3_OP_BAND: lambda: "(" + " & ".join(a) + ")",
        z3.Z3_OP_BOR: lambda: "(" + " | ".join(a) + ")",
        z3.Z3_OP_BXOR: lambda: "(" + " ^ ".join(a) + ")",
        z3.Z3_OP_BNOT: lambda: f"({a[0]} ^ {mask})",
        z3.Z3_OP_BSHL: lambda: f"(({a[0]} << {a[1]}) & {mask} if {a[1]} < {width} else 0)",
        z3.Z3_OP_BLSHR: lambda: f"({a[0]} >> {a[1]} if {a[1]} < {width} else 0)",
        z3.Z3_OP_ULEQ: lambda: f"({a[0]} <= {a[1]})",
        z3.Z3_OP_ULT: lambda: f"({a[0]} < {a[1]})",
        z3.Z3_OP_UGEQ: lambda: f"({a[0]} >= {a[1]})",
        z3.Z3_OP_UGT: lambda: f"({a[0]} > {a[1]})",
        z3.Z3_OP_ZERO_EXT: lambda: a[0],
    }
    if k in simple:
        return simple[k]()
    if k in (z3.Z3_OP_SLEQ, z3.Z3_OP_SLT, z3.Z3_OP_SGEQ, z3.Z3_OP_SGT):
        op = {z3.Z3_OP_SLEQ: "<=", z3.Z3_OP_SLT: "<", z3.Z3_OP_SGEQ: ">=",
              z3.Z3_OP_SGT: ">"}[k]
        w = widths[0]
        return f"({_signed(a[0], w)} {op} {_signed(a[1], w)})"
    if k == z3.Z3_OP_EXTRACT:
        hi, lo = t.params()
        return f"(({a[0]} >> {lo}) & {(1 << (hi - lo + 1)) - 1})"
    if k == z3.Z3_OP_SIGN_EXT:
        return f"({_signed(a[0], widths[0])} & {mask})"
    if k == z3.Z3_OP_CONCAT:
        parts, shift = [], 0
        for name, w in zip(reversed(a), reversed(widths), strict=True):
            parts.append(f"({name} << {shift})" if shift else name)
            shift += w
        return "(" + " | ".join(parts) + ")"
    raise NotImplementedError(f"the evaluator has no rule for z3 operator "
                              f"{t.decl().name()!r} (kind {k})")


def compile_terms(terms: Sequence[z3.ExprRef], variables: Sequence[z3.ExprRef]) -> Evaluator:
    """A function of the variables' values (in the order given) returning the terms' values.
    Every uninterpreted constant of the terms must be among the variables."""
    index = {v.get_id(): i for i, v in enumerate(variables)}
    names: dict[int, str] = {}
    widths: dict[int, int] = {}
    lines = ["def evaluate(v):"]
    for root in terms:
        stack: list[tuple[z3.ExprRef, bool]] = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            tid = t.get_id()
            if tid in names:
                continue
            if z3.is_bv(t):
                widths[tid] = t.size()
            if z3.is_true(t) or z3.is_false(t):
                names[tid] = repr(z3.is_true(t))
                continue
            if z3.is_bv_value(t):
                names[tid] = str(t.as_long())
                continue
            if z3.is_const(t):
                if tid not in index:
                    raise ValueError(f"{t} is not among the evaluator's variables")
                names[tid] = f"v[{index[tid]}]"
                continue
            if not expanded:
                stack.append((t, True))
                stack.extend((c, False) for c in reversed(t.children()))
                continue
            kids = t.children()
            expr = _expr(t, [names[c.get_id()] for c in kids],
                         [widths.get(c.get_id(), 0) for c in kids])
            name = f"t{len(names)}"
            lines.append(f"    {name} = {expr}")
            names[tid] = name
    lines.append("    return [" + ", ".join(names[t.get_id()] for t in terms) + "]")
    scope: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<z3 terms>", "exec"), scope)  # noqa: S102
    return scope["evaluate"]
