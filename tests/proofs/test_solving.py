"""The query pool: answers in the order asked, the same from worker processes as in-process."""

from __future__ import annotations

import multiprocessing

import pytest
import z3

from verbspec.proofs.solving import TACTICS, Limit, Solvers, query

X, Y = z3.BitVecs("x y", 64)


def _queries():
    return [
        query("sat", X + Y == 5, z3.ULT(X, 3)),
        query("unsat", z3.ULT(X, 3), z3.UGT(X, 7)),
        # factoring a 64-bit semiprime: far more than a millisecond of search
        query("hard", X * Y == 0xFFFFFFFB * 0xFFFFFFBF, z3.UGT(X, 1), z3.UGT(Y, 1),
              z3.ULT(X, 1 << 32), z3.ULT(Y, 1 << 32)),
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_answers_come_back_in_order_with_models_and_reasons(workers):
    with Solvers(workers) as pool:
        sat, unsat, hard = pool.run(_queries())
    assert (sat.key, unsat.key, hard.key) == ("sat", "unsat", "hard")
    assert sat.result == "sat" and (sat.model["x"] + sat.model["y"]) % 2**64 == 5
    assert sat.model["x"] < 3
    assert unsat.result == "unsat" and not unsat.model
    assert hard.result == "sat"
    assert hard.model["x"] * hard.model["y"] == 0xFFFFFFFB * 0xFFFFFFBF


@pytest.mark.parametrize(("limit", "reason"), [
    (Limit(rlimit=1000), "solver resource limit reached (rlimit 1,000; raise it with "
                         "--solver-limit)"),
    (Limit(wall_ms=1), "wall-clock limit of 0.001 s reached: a safety net, not a verdict about "
                       "the spec"),
], ids=["resources", "wall-clock"])
def test_a_query_past_a_limit_is_unknown_and_says_which_limit(limit, reason):
    with Solvers(1, limit) as pool:
        [hard] = pool.run(_queries()[2:])
    assert (hard.result, hard.reason) == ("unknown", reason)
    if limit.rlimit == 1000:
        assert 1000 <= hard.resources < 2000


def _hog(stop) -> None:
    while not stop.is_set():
        pass


def test_a_query_takes_the_same_resources_in_any_process_at_any_load():
    """The count a verdict rests on is z3's own: the same query counts the same in this
    process, and in workers answering beside each other and beside two CPU hogs."""
    here = Solvers(1).run(_queries())
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    hogs = [ctx.Process(target=_hog, args=(stop,)) for _ in range(2)]
    for h in hogs:
        h.start()
    try:
        with Solvers(2) as pool:
            loaded = pool.run(_queries() * 2)
    finally:
        stop.set()
        for h in hogs:
            h.join()
    assert [a.resources for a in loaded] == [a.resources for a in here] * 2
    assert [a.result for a in loaded] == [a.result for a in here] * 2
    assert all(a.resources > 0 for a in here)


def test_a_limit_below_one_or_past_z3s_32_bits_is_refused():
    for bad in (0, 2**32):
        with pytest.raises(ValueError, match="a solver limit must be positive"):
            Limit(rlimit=bad)


@pytest.mark.parametrize("workers", [1, 2])
def test_every_tactic_gives_the_same_answers(workers):
    a, b, c = z3.BitVecs("a b c", 32)
    # a sum under bounds that a step only lowers: the kind of query "bounds" is for
    kept = [z3.ULE(a, 100), z3.ULE(b, 100), z3.ULE(a + b, 150), z3.ULE(c, a)]
    asked = [query(("lowered", t), *kept, z3.Not(z3.ULE(a - c + b, 150)), tactic=t)
             for t in TACTICS]
    asked += [query(("raised", t), *kept, z3.Not(z3.ULE(a + c + b, 150)), tactic=t)
              for t in TACTICS]
    with Solvers(workers) as pool:
        answers = {ans.key: ans.result for ans in pool.run(asked)}
    assert answers == {**{("lowered", t): "unsat" for t in TACTICS},
                       **{("raised", t): "sat" for t in TACTICS}}


def test_an_unknown_tactic_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown tactic 'fast' \\(known: blast, bounds\\)"):
        query("q", X == 1, tactic="fast")
