"""The query pool: answers in the order asked, the same from worker processes as in-process."""

from __future__ import annotations

import pytest
import z3

from verbspec.proofs.solving import TACTICS, Solvers, query

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
    with Solvers(workers, timeout_ms=30_000) as pool:
        sat, unsat, hard = pool.run(_queries())
    assert (sat.key, unsat.key, hard.key) == ("sat", "unsat", "hard")
    assert sat.result == "sat" and (sat.model["x"] + sat.model["y"]) % 2**64 == 5
    assert sat.model["x"] < 3
    assert unsat.result == "unsat" and not unsat.model
    assert hard.result == "sat"
    assert hard.model["x"] * hard.model["y"] == 0xFFFFFFFB * 0xFFFFFFBF


def test_a_query_out_of_time_is_unknown_with_the_reason():
    with Solvers(1, timeout_ms=1) as pool:
        [hard] = pool.run(_queries()[2:])
    assert hard.result == "unknown" and hard.reason


@pytest.mark.parametrize("workers", [1, 2])
def test_every_tactic_gives_the_same_answers(workers):
    a, b, c = z3.BitVecs("a b c", 32)
    # a sum under bounds that a step only lowers: the kind of query "bounds" is for
    kept = [z3.ULE(a, 100), z3.ULE(b, 100), z3.ULE(a + b, 150), z3.ULE(c, a)]
    asked = [query(("lowered", t), *kept, z3.Not(z3.ULE(a - c + b, 150)), tactic=t)
             for t in TACTICS]
    asked += [query(("raised", t), *kept, z3.Not(z3.ULE(a + c + b, 150)), tactic=t)
              for t in TACTICS]
    with Solvers(workers, timeout_ms=30_000) as pool:
        answers = {ans.key: ans.result for ans in pool.run(asked)}
    assert answers == {**{("lowered", t): "unsat" for t in TACTICS},
                       **{("raised", t): "sat" for t in TACTICS}}


def test_an_unknown_tactic_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown tactic 'fast' \\(known: blast, bounds\\)"):
        query("q", X == 1, tactic="fast")
