"""The z3 model checked against the executable spec before it proves anything: every edge of
small configurations, the compiled evaluator that makes that affordable, the cache, and a
planted bug in the spec that must turn every `proved` into `drifted`."""

from __future__ import annotations

import random

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from verbspec.proofs.evaluator import compile_terms
from verbspec.proofs.gate import induction, moves, refinement
from verbspec.proofs.gate.abstraction import alpha, evaluate, step_choices, value_terms
from verbspec.proofs.gate.parameters import params_of
from verbspec.proofs.gate.terms import fresh_choice, fresh_params, fresh_state
from verbspec.proofs.gate.vocabulary import ACTIONS
from verbspec.proofs.report import DIVERGENCE, DRIFTED
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate.system import (
    BATCH_ACTIONS,
    BLOCK_ACTIONS,
    INVARIANTS,
    POST_FAILURE_ACTIONS,
    build,
)

X, Y = z3.BitVec("x", 8), z3.BitVec("y", 8)
P, Q = z3.Bool("p"), z3.Bool("q")
# one term per operator the evaluator knows, over two bytes and two Booleans
TERMS = (
    X + Y, X - Y, X * Y, -X, z3.UDiv(X, Y), z3.URem(X, Y), X & Y, X | Y, X ^ Y, ~X,
    X << (Y & 15), z3.LShR(X, Y & 15), z3.Extract(6, 2, X), z3.Concat(X, Y),
    z3.ZeroExt(8, X), z3.SignExt(8, X),
    z3.ULE(X, Y), z3.ULT(X, Y), z3.UGE(X, Y), z3.UGT(X, Y), X <= Y, X < Y, X >= Y, X > Y,
    X == Y, z3.Distinct(X, Y, X + 1), z3.If(P, X, Y), z3.And(P, Q), z3.Or(P, Q), z3.Not(P),
    z3.Implies(P, Q), z3.Xor(P, Q), z3.And(P, z3.ULE(X + Y, 7)) == Q,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 255), st.integers(0, 255), st.booleans(), st.booleans())
def test_compiled_terms_agree_with_z3(x, y, p, q):
    run = compile_terms(TERMS, [X, Y, P, Q])
    got = run([x, y, p, q])
    pairs = [(X, z3.BitVecVal(x, 8)), (Y, z3.BitVecVal(y, 8)), (P, z3.BoolVal(p)),
             (Q, z3.BoolVal(q))]
    for term, value in zip(TERMS, got, strict=True):
        want = z3.simplify(z3.substitute(term, *pairs))
        expect = z3.is_true(want) if z3.is_bool(want) else want.as_long()
        assert value == expect, term


def test_the_evaluator_names_what_it_cannot_compile():
    with pytest.raises(NotImplementedError, match="bvsrem"):
        compile_terms([z3.SRem(X, Y)], [X, Y])
    with pytest.raises(ValueError, match="y is not among"):
        compile_terms([X + Y], [X])


def test_compiled_moves_agree_with_z3_on_random_spec_steps():
    """The compiled model and z3's own evaluation judge the same spec steps alike, including
    steps the model refuses (a pre-state paired with a different step's post-state)."""
    rng = random.Random(7)
    s, t, ch, prm = fresh_state("s"), fresh_state("t"), fresh_choice("s"), fresh_params()
    for values in ({"window": 2, "vec_bytes": 100, "big_gates": 1, "big_depth": 2,
                    "chain_max": 2}, {"window": 2, "faults": 1, "big_gates": 0}):
        model = refinement.CompiledModel(values, ())
        system, cfg = model.system, model.cfg
        ppairs = value_terms(params_of(cfg, ()), prm)
        state, checked, refused = system.initial(), 0, 0
        for _ in range(150):
            options = [(a, args) for a in system.actions for args in a.enabled(state)
                       if not a.fault or rng.random() < 0.05]
            if not options:
                state = system.initial()
                continue
            act, args = rng.choice(options)
            post, _ = act.apply(state, *args)
            other = post if rng.random() < 0.8 else system.initial()
            pairs = (value_terms(alpha(cfg, state), s) + value_terms(alpha(cfg, other), t)
                     + ppairs + value_terms(step_choices(cfg, state, act.name, args), ch))
            want = evaluate(moves.move(act.name, args[0], s, t, prm, ch), pairs)
            got = model.edge(state, act.name, args, model.view(state).values,
                             model.view(other))
            assert (got is None or "not a step" not in got) == want, (act.name, args)
            checked += 1
            refused += not want
            state = post
        assert checked > 100 and refused > 0


def test_the_model_takes_every_spec_step_of_its_configurations():
    ref = refinement.check(cache=refinement.cache_dir())
    assert ref.divergence is None, ref.divergence
    # every action but lose, the verify block's (its batch gates too) and the failing posts
    # and polls, which only wire_loss=1, verify_blocks=1 and post_failures=1 (outside the
    # model's scope) enable
    assert set(ACTIONS) - set(ref.actions) == {"lose", *BLOCK_ACTIONS, *BATCH_ACTIONS,
                                               *POST_FAILURE_ACTIONS}
    assert ref.states > 100_000 and ref.edges > 400_000
    assert "11 configurations" in ref.coverage


def test_the_digest_covers_what_the_check_imports_and_nothing_else():
    names = {f"{p.parent.name}/{p.stem}" for p in refinement.source_files()}
    # the executable spec and the model's moves and properties, found through the imports
    assert {"steps/__init__", "steps/common", "steps/setup", "steps/decode", "steps/big_gate",
            "steps/block", "steps/fabric", "steps/faults", "gate/system", "spec/lts",
            "gate/moves", "gate/properties", "gate/abstraction", "proofs/evaluator"} <= names
    # the induction and its lemmas are checked against the model, not part of the check
    assert not {"gate/induction", "gate/lemmas", "gate/bmc", "tagmatch/system"} & names


def test_a_pass_is_cached_under_the_source_digest(tmp_path):
    small = refinement.CONFIGS[:1]
    first = refinement.check(small, cache=tmp_path, workers=1)
    again = refinement.check(small, cache=tmp_path, workers=1)
    assert not first.cached and again.cached and again.edges == first.edges
    assert "cached" in again.coverage
    [entry] = tmp_path.iterdir()
    entry.write_text("{not json")       # a damaged entry is checked again and rewritten
    third = refinement.check(small, cache=tmp_path, workers=1)
    assert not third.cached and third.edges == first.edges


def test_a_planted_repost_bug_leaves_nothing_proved(repost_one_too_far, tmp_path, capsys):
    monkeypatch = repost_one_too_far
    # in this process (the plant is not in the source a worker would import), uncached; the
    # divergence stops prove before any induction
    check = refinement.check
    monkeypatch.setattr(refinement, "check",
                        lambda **kw: check(refinement.CONFIGS[:1], workers=1, cache=None))

    def no_induction(*args, **kwargs):
        raise AssertionError("the induction ran on a model that drifted from the spec")

    monkeypatch.setattr(induction, "houdini", no_induction)
    results = induction.prove({}, trace_dir=tmp_path)
    assert [r.invariant for r in results] == list(INVARIANTS)
    assert all(r.verdict == DRIFTED for r in results)
    assert "no longer matches the executable spec" in results[0].detail
    assert "deliver(1,) is not a step of the model" in results[0].detail
    assert results[0].trace and DIVERGENCE in results[0].trace
    capsys.readouterr()
    assert main(["replay", results[0].trace]) == 1
    assert "the z3 model diverges from the spec at step" in capsys.readouterr().out
    # once the spec is repaired, the same trace no longer replays
    monkeypatch.undo()
    assert main(["replay", results[0].trace]) == 1
    assert "replay disagrees with the trace" in capsys.readouterr().out


def test_a_spec_that_stops_offering_a_step_the_model_has_is_caught(monkeypatch):
    """The converse direction: the peer-death check removed from the completion waits (the
    spec no longer offers peer_gone while a rank reaps), which no spec step shows."""
    from dataclasses import replace

    from verbspec.spec.gate.state import REAP_PHASES
    from verbspec.spec.gate.steps import GateSpec

    real = GateSpec.do_peer_gone
    guard = real.__action__.guard

    def no_wait(self, s):
        return ((r,) for (r,) in guard(self, s) if s.ranks[r].phase not in REAP_PHASES)

    def planted(self, s, r):
        return real(self, s, r)

    planted.__action__ = replace(real.__action__, step=planted, guard=no_wait)
    monkeypatch.setattr(GateSpec, "do_peer_gone", planted)
    # a crash, then the peer waiting on its completions: two faults in one decode gate
    config = ({**refinement.TWO, "ops": 1, "big_gates": 0, "faults": 1}, (), 2)
    ref = refinement.check([config], workers=1)
    assert ref.divergence is not None, "the converse check missed a step the spec dropped"
    assert "the model allows peer_gone (rank" in ref.divergence
    assert "where the spec no longer does" in ref.divergence
    assert ref.trace is not None and ref.trace.violation == DIVERGENCE


def test_a_model_that_forgets_uc_drops_diverges(forgetful_deliver):
    ref = refinement.check([({"window": 1, "vec_bytes": 100, "big_gates": 0, "faults": 0,
                              "ops": 3}, (), 0)], workers=1)
    assert ref.divergence is not None and "deliver" in ref.divergence
    assert ref.trace is not None and ref.trace.violation == DIVERGENCE


def test_the_refinement_configurations_are_valid_and_distinct():
    seen = set()
    for values, variants, _ in refinement.CONFIGS:
        build(values, variants)         # raises on a bad value or variant name
        key = (tuple(sorted(values.items())), tuple(variants))
        assert key not in seen
        seen.add(key)
