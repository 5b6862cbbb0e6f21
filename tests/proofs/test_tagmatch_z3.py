"""The z3 encoding of the list engine: the induction proof, a wrong step caught by it, and the
relations cross-checked against the executable engine on random concrete states."""

from __future__ import annotations

import random

import z3

from verbspec.proofs.solving import Limit
from verbspec.proofs.tagmatch import lemma as tz
from verbspec.spec.tagmatch import lists as tm


def test_no_matching_pair_is_inductive():
    obligations = tz.prove_no_matching_pair()
    assert [o.name for o in obligations] == ["base", "consecution post_recv",
                                             "consecution arrive", "consecution cancel"]
    assert all(o.verdict == "proved" for o in obligations), obligations


def test_a_step_that_skips_the_unexpected_search_is_caught():
    # posting without searching the unexpected list can leave a matching pair behind
    def post_blind(p, u, p2, u2, j, env):
        return z3.And(p2.same(p.append(env)), u2.same(u))

    # z3 may answer sat or give up on the quantified lists; either way it must not prove it
    res = tz.prove_no_matching_pair(limit=Limit(rlimit=5_000_000), steps={"post_blind": post_blind})
    assert res[-1].verdict != "proved"


def _env(rng, wild):
    return (rng.randrange(2), tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3),
            tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3))


def test_relations_admit_exactly_what_the_engine_computes():
    rng = random.Random(3)
    p, u, p2, u2 = (tz.Lists.fresh(n) for n in ("p", "u", "p2", "u2"))
    j, found = z3.Int("j"), z3.Bool("found")
    for trial in range(120):
        posted = tuple(tm.Recv(i, *_env(rng, True), 1) for i in range(rng.randrange(5)))
        unexp = tuple(tm.Msg(i, *_env(rng, False), 1) for i in range(rng.randrange(5)))
        e = tm.Engine(posted, unexp)
        kind = trial % 3
        if kind == 0:
            r = tm.Recv("new", *_env(rng, True), 1)
            post, _ = tm.post_recv(e, r)
            rel = tz.post_recv(p, u, (r.comm, r.src, r.tag), p2, u2, j)
        elif kind == 1:
            m = tm.Msg("new", *_env(rng, False), 1)
            post, _ = tm.arrive(e, m)
            rel = tz.arrive(p, u, (m.comm, m.src, m.tag), p2, u2, j)
        else:
            rid = rng.randrange(6)
            post, ok = tm.cancel(e, rid)
            idx = next((i for i, r in enumerate(posted) if r.id == rid), -1)
            rel = z3.And(tz.cancel(p, u, p2, u2, j, found), found == ok,
                         z3.Implies(found, j == idx))
        pre = z3.And(tz.concrete(p, posted), tz.concrete(u, unexp))
        want = z3.And(tz.concrete(p2, post.posted), tz.concrete(u2, post.unexpected))
        s = z3.Solver()
        s.add(pre, rel, want)
        assert s.check() == z3.sat, (trial, posted, unexp)
        s = z3.Solver()
        s.add(pre, rel, z3.Not(want))
        assert s.check() == z3.unsat, (trial, posted, unexp)
