"""The list engine's steps as z3 transition relations, and an unbounded induction proof.

The explicit-state checks cover one instance at a time. Here the software engine of
:mod:`verbspec.spec.tagmatch.lists` is encoded over unbounded lists (z3 arrays with a length) and
unbounded integer envelopes, and one property is proved by induction for every list length and
every envelope value:

    no_matching_pair: no posted receive matches an unexpected message.

It is the engine's half of ``no_lost_message`` (once nothing is in flight, nothing is left that
could be brought together): it holds initially (both lists empty) and every step (post_recv,
arrive, cancel) preserves it. The relations are written separately from the Python engine, so
the test suite cross-checks them against it on random concrete states: for each, the relation
admits the state the engine computes and no other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from verbspec.proofs.report import Obligation
from verbspec.proofs.solving import QUANTIFIED_RLIMIT, Limit
from verbspec.spec.tagmatch import lists as tm

ANY = tm.ANY


@dataclass(frozen=True)
class Lists:
    """One list as three integer arrays (comm, src, tag) and a length."""

    comm: z3.ArrayRef
    src: z3.ArrayRef
    tag: z3.ArrayRef
    n: z3.ArithRef

    @staticmethod
    def fresh(name: str) -> Lists:
        a = z3.ArraySort(z3.IntSort(), z3.IntSort())
        return Lists(z3.Const(f"{name}_comm", a), z3.Const(f"{name}_src", a),
                     z3.Const(f"{name}_tag", a), z3.Int(f"{name}_n"))

    def at(self, i: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
        return self.comm[i], self.src[i], self.tag[i]

    def append(self, env: tuple) -> Lists:
        c, s, t = env
        return Lists(z3.Store(self.comm, self.n, c), z3.Store(self.src, self.n, s),
                     z3.Store(self.tag, self.n, t), self.n + 1)

    def remove(self, j: z3.ArithRef) -> Lists:
        k = z3.Int("k")

        def shift(a: z3.ArrayRef) -> z3.ArrayRef:
            return z3.Lambda([k], z3.If(k < j, a[k], a[k + 1]))

        return Lists(shift(self.comm), shift(self.src), shift(self.tag), self.n - 1)

    def same(self, other: Lists) -> z3.BoolRef:
        i = z3.Int("i_same")
        rng = z3.And(i >= 0, i < self.n)
        return z3.And(self.n == other.n, z3.ForAll([i], z3.Implies(rng, z3.And(
            self.comm[i] == other.comm[i], self.src[i] == other.src[i],
            self.tag[i] == other.tag[i]))))


def matches(r: tuple, m: tuple) -> z3.BoolRef:
    """``envelope_matches`` over terms: a receive (c, s, t) and a message (c, s, t)."""
    rc, rs, rt = r
    mc, ms, mt = m
    return z3.And(rc == mc, z3.Or(rs == ANY, rs == ms), z3.Or(rt == ANY, rt == mt))


def _first(lst: Lists, j: z3.ArithRef, pred) -> z3.BoolRef:
    """j is the first index of ``lst`` whose element satisfies pred."""
    k = z3.Int("k_first")
    return z3.And(j >= 0, j < lst.n, pred(lst.at(j)),
                  z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < j), z3.Not(pred(lst.at(k))))))


def _none(lst: Lists, pred) -> z3.BoolRef:
    k = z3.Int("k_none")
    return z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < lst.n), z3.Not(pred(lst.at(k)))))


def well_formed(posted: Lists, unexp: Lists) -> z3.BoolRef:
    return z3.And(posted.n >= 0, unexp.n >= 0)


def post_recv(posted: Lists, unexp: Lists, r: tuple, posted2: Lists, unexp2: Lists,
              j: z3.ArithRef) -> z3.BoolRef:
    """A receive is posted: it takes the earliest matching unexpected message (index j), or,
    when none matches, joins the end of the posted list."""
    def pred(m):
        return matches(r, m)
    take = z3.And(_first(unexp, j, pred), posted2.same(posted), unexp2.same(unexp.remove(j)))
    wait = z3.And(_none(unexp, pred), posted2.same(posted.append(r)), unexp2.same(unexp))
    return z3.Or(take, wait)


def arrive(posted: Lists, unexp: Lists, m: tuple, posted2: Lists, unexp2: Lists,
           j: z3.ArithRef) -> z3.BoolRef:
    """A message arrives: it takes the earliest matching posted receive (index j), or joins
    the end of the unexpected list."""
    def pred(r):
        return matches(r, m)
    take = z3.And(_first(posted, j, pred), unexp2.same(unexp), posted2.same(posted.remove(j)))
    wait = z3.And(_none(posted, pred), unexp2.same(unexp.append(m)), posted2.same(posted))
    return z3.Or(take, wait)


def cancel(posted: Lists, unexp: Lists, posted2: Lists, unexp2: Lists, j: z3.ArithRef,
           found: z3.BoolRef) -> z3.BoolRef:
    """A cancel removes the posted receive at index j when it is still posted (``found``);
    a cancel of a receive that already matched changes nothing."""
    hit = z3.And(found, j >= 0, j < posted.n, posted2.same(posted.remove(j)),
                 unexp2.same(unexp))
    miss = z3.And(z3.Not(found), posted2.same(posted), unexp2.same(unexp))
    return z3.Or(hit, miss)


STEPS = {
    "post_recv": lambda p, u, p2, u2, j, env: post_recv(p, u, env, p2, u2, j),
    "arrive": lambda p, u, p2, u2, j, env: arrive(p, u, env, p2, u2, j),
    "cancel": lambda p, u, p2, u2, j, env: cancel(p, u, p2, u2, j, z3.Bool("found")),
}


def no_matching_pair(posted: Lists, unexp: Lists) -> z3.BoolRef:
    i, j = z3.Ints("i_inv j_inv")
    return z3.ForAll([i, j], z3.Implies(
        z3.And(i >= 0, i < posted.n, j >= 0, j < unexp.n),
        z3.Not(matches(posted.at(i), unexp.at(j)))))


# The queries quantify over list positions, where z3's instantiation is heuristic: an answer
# "unknown" is retried under other random seeds before it is reported, each seed within its
# own resource limit (calibrated in docs/benchmarks.md, "Solver limits").
SEEDS = (0, 1, 2, 3)
QUANTIFIED = Limit(rlimit=QUANTIFIED_RLIMIT)


def solve(formula: z3.BoolRef, limit: Limit | None = None) -> tuple[z3.CheckSatResult, str]:
    """z3's answer for ``formula`` and, when it has none, why (each seed within ``limit``,
    by default QUANTIFIED)."""
    limit = limit or QUANTIFIED
    why = ""
    for seed in SEEDS:
        s = z3.Solver()
        limit.apply(s)
        s.set("random_seed", seed)
        s.add(formula)
        res = s.check()
        if res != z3.unknown:
            return res, ""
        why = limit.why(s.reason_unknown())
    return z3.unknown, f"{why} (seeds {SEEDS})"


def obligation(name: str, hyp: z3.BoolRef, limit: Limit | None = None) -> Obligation:
    """``hyp`` (a negated claim) as an obligation: proved when z3 finds it unsatisfiable."""
    t0 = time.perf_counter()
    res, why = solve(hyp, limit)
    verdict = "proved" if res == z3.unsat else "violated" if res == z3.sat else "unknown"
    return Obligation(name, verdict, time.perf_counter() - t0, why)


def prove_no_matching_pair(limit: Limit | None = None, steps: dict | None = None
                           ) -> list[Obligation]:
    """Base case and one consecution obligation per step; each is a negated implication
    that z3 must find unsatisfiable. ``steps`` replaces the step relations (name -> function
    of (p, u, p2, u2, j, env)), so a test can show a wrong step is caught."""
    p, u, p2, u2 = (Lists.fresh(n) for n in ("p", "u", "p2", "u2"))
    j = z3.Int("j")
    env = z3.Ints("c s t")
    inv, inv2 = no_matching_pair(p, u), no_matching_pair(p2, u2)
    pre = z3.And(well_formed(p, u), inv)
    relations = steps or STEPS
    steps = {name: f(p, u, p2, u2, j, tuple(env)) for name, f in relations.items()}
    empty = z3.And(p.n == 0, u.n == 0)
    out = [obligation("base", z3.And(empty, z3.Not(inv)), limit)]
    for name, rel in steps.items():
        # a step no state can take would make its obligation hold vacuously
        res, why = solve(z3.And(pre, rel), limit)
        if res != z3.sat:
            out.append(Obligation(f"consecution {name}", "unknown", 0.0,
                                  why or "no state satisfying the invariant can take the step"))
            continue
        out.append(obligation(f"consecution {name}", z3.And(pre, rel, z3.Not(inv2)), limit))
    return out


# ---- concrete values, for the cross-check against the Python engine ---------------------------

def concrete(lst: Lists, items: tuple) -> z3.BoolRef:
    """Pin a list to concrete receives or messages."""
    cs = [lst.n == len(items)]
    for i, x in enumerate(items):
        cs += [lst.comm[i] == x.comm, lst.src[i] == x.src, lst.tag[i] == x.tag]
    return z3.And(cs)
