"""The z3 model of the gate protocol: cross-checked against the executable spec on random runs
(one source of truth), its strengthening invariants checked on every state those runs reach,
proved for decode workloads (over the whole envelope, the defaults in it, in
tests/cli/test_envelope.py, where the model's BMC also runs just outside each condition)."""

from __future__ import annotations

import random

import pytest
import z3

from verbspec.proofs.gate import bmc, induction, lemmas, moves, widening
from verbspec.proofs.gate.abstraction import alpha, evaluate, step_choices, value_terms
from verbspec.proofs.gate.parameters import domain, param_terms, params_of
from verbspec.proofs.gate.properties import CONSEQUENCES, PROPERTIES
from verbspec.proofs.gate.terms import Move, fresh_choice, fresh_params, fresh_state, z64
from verbspec.proofs.gate.vocabulary import (
    ACTIONS,
    ENCODED_VARIANTS,
    spec_actions,
    spec_variants,
)
from verbspec.proofs.solving import Limit
from verbspec.spec.gate.system import INVARIANTS, build

# parameter points the random runs draw from: the defaults, one-chunk vectors, small windows,
# and points outside the envelope whose runs end in a violation the model must agree on
POINTS: tuple[dict, ...] = (
    {}, {"vec_bytes": 16384}, {"window": 2}, {"window": 3, "vec_bytes": 100},
    {"window": 1}, {"window": 1, "vec_bytes": 100}, {"rq_depth": 31}, {"sq_depth": 3},
    {"window": 2, "cq_depth": 7}, {"window": 2, "vec_bytes": 100, "cq_depth": 3},
    {"gates_per_token": 1}, {"gates_per_token": 2, "n_slots": 4}, {"gates_per_token": 0,
                                                                   "n_slots": 2},
    {"chain_max": 1},
)
# the variants the model encodes, each at points where it matters
VARIANT_POINTS: tuple[tuple[dict, tuple[str, ...]], ...] = (
    ({}, ("no-barrier",)), ({"window": 2}, ("no-barrier",)), ({}, ("tag-every-chunk",)),
    ({"window": 3}, ("tag-every-chunk",)), ({}, ("signal-last-only",)),
    ({"vec_bytes": 100}, ("signal-last-only",)), ({}, ("no-seq-check",)),
)
# with faults: crashes, error completions, warm-up leftovers, timeouts, bad calls, a dead peer
FAULT_POINTS: tuple[tuple[dict, tuple[str, ...]], ...] = (
    ({"faults": 1}, ()), ({"faults": 1, "vec_bytes": 16384}, ()),
    ({"faults": 1, "window": 2}, ()), ({"faults": 1, "window": 3, "vec_bytes": 100}, ()),
    ({"faults": 1, "window": 2, "cq_depth": 9}, ()), ({"faults": 1}, ("no-barrier",)),
)
# drains and big gates: small windows and depths so that runs get through several big gates,
# and points whose runs end in a violation (a short send queue, ds4's CQ sizing)
BIG = {"big_gates": 1, "window": 2, "chain_max": 2}
BIG_POINTS: tuple[tuple[dict, tuple[str, ...]], ...] = (
    ({**BIG, "vec_bytes": 16384, "big_depth": 3, "cq_depth": 40}, ()),
    ({**BIG, "big_depth": 4, "chain_max": 3, "cq_depth": 40}, ()),
    ({**BIG, "window": 3, "vec_bytes": 100, "big_depth": 2, "chain_max": 1, "sq_depth": 3}, ()),
    ({**BIG, "big_depth": 3, "cq_depth": 6}, ()),
    ({"big_gates": 1}, ()),
    ({**BIG, "faults": 1, "big_depth": 3, "cq_depth": 40}, ()),
    ({**BIG, "faults": 1, "vec_bytes": 16384, "big_depth": 2}, ()),
    # rank 1 granted 2 receives, rank 0 windows of 4: big gates of 3 and 5 chunks overrun it
    ({**BIG, "big_depth": 4, "cq_depth": 40}, ("depth-mismatch",)),
    ({**BIG, "faults": 1, "big_depth": 3, "cq_depth": 40}, ("depth-mismatch",)),
)
PAIRS_WANTED = 4_000
LEMMA_PAIRS_WANTED = 1_000


class Checker:
    """The model's relations and properties over symbolic states, built once per action."""

    def __init__(self) -> None:
        self.s, self.t = fresh_state("s"), fresh_state("t")
        self.ch, self.prm = fresh_choice("s"), fresh_params()
        self.moves: dict[tuple[str, int], z3.BoolRef] = {}
        # every property's verdict in one term: bit i is property i
        props = {**PROPERTIES, **CONSEQUENCES}
        names = list(props)
        bits = [z3.If(props[n](self.t, self.prm), z3.BitVecVal(1, 1),
                      z3.BitVecVal(0, 1)) for n in names]
        self.names, self.verdicts = names, z3.Concat(*bits) if len(bits) > 1 else bits[0]

    def move(self, name: str, r: int) -> z3.BoolRef:
        key = (name, r)
        if key not in self.moves:
            self.moves[key] = moves.move(name, r, self.s, self.t, self.prm, self.ch)
        return self.moves[key]

    def properties(self, pairs) -> dict[str, bool]:
        val = z3.simplify(z3.substitute(self.verdicts, *pairs)).as_long()
        n = len(self.names)
        return {name: bool(val >> (n - 1 - i) & 1) for i, name in enumerate(self.names)}


def _walk(chk: Checker, values: dict, rng: random.Random, steps: int,
          variants: tuple[str, ...] = (), claims: dict | None = None) -> tuple[int, list]:
    """One random run (decode-only and fault-free unless the point says otherwise); every step
    checked, and with ``claims`` every state all invariants hold in checked against them."""
    system = build({"faults": 0, "big_gates": 0, **values,
                    "ops": rng.choice((3, 6, 10**6))}, variants)
    cfg = system.params
    ppairs = value_terms(params_of(cfg, variants), chk.prm)
    acts = [a for a in system.actions if not a.fault or cfg.faults]
    state = system.initial()
    pre_vals = alpha(cfg, state)
    checked, bad = 0, []
    for _ in range(steps):
        options = [(a, args) for a in acts for args in a.enabled(state)]
        if not options:
            break
        # faults are rare, so that walks reach deep states before one strikes
        steady = [o for o in options if not o[0].fault]
        if steady and (len(steady) == len(options) or rng.random() > 0.04):
            options = steady
        act, args = rng.choice(options)
        post, _ = act.apply(state, *args)
        post_vals = alpha(cfg, post)
        r = args[0]
        choice = step_choices(cfg, state, act.name, args)
        pairs = (value_terms(pre_vals, chk.s) + value_terms(post_vals, chk.t) + ppairs
                 + value_terms(choice, chk.ch))
        checked += 1
        if not evaluate(chk.move(act.name, r), pairs):
            bad.append(f"{values}: {act.name}{args} is not a step of the model")
            break
        concrete = {inv.name: inv.check(post) is None for inv in system.invariants}
        model = chk.properties(pairs)
        for name, ok in model.items():
            if ok != concrete[name]:
                bad.append(f"{values}: after {act.name}{args} the spec says {name} "
                           f"{'holds' if concrete[name] else 'fails'}, the model disagrees")
        if bad or not all(concrete.values()):
            break       # the abstraction is defined up to the first violation
        here = value_terms(post_vals, chk.s) + ppairs
        for name, term in (claims or {}).items():
            if not evaluate(term, here):
                bad.append(f"{values}: after {act.name}{args} the strengthening invariant "
                           f"{name} is false in a reachable state")
        if bad:
            break
        state, pre_vals = post, post_vals
    return checked, bad


@pytest.mark.slow
def test_model_matches_the_spec_on_random_runs():
    rng = random.Random(20261129)
    chk = Checker()
    pairs, walks = 0, 0
    points = ([(p, ()) for p in POINTS] + list(VARIANT_POINTS) + list(FAULT_POINTS)
              + list(BIG_POINTS))
    while pairs < PAIRS_WANTED or walks < len(points):
        values, variants = points[walks % len(points)]
        n, bad = _walk(chk, values, rng, rng.choice((60, 200, 400)), variants)
        assert not bad, bad
        pairs += n
        walks += 1
    assert pairs >= PAIRS_WANTED


@pytest.mark.slow
def test_strengthening_invariants_hold_on_every_state_of_random_runs():
    """The lemmas are claims about every reachable state; random runs through drains, big
    gates and faults must not find a state that breaks one (before any invariant breaks)."""
    rng = random.Random(1129)
    chk = Checker()
    claims = {n: f(chk.s, chk.prm) for n, f in lemmas.LEMMAS.items()
              if n != "cq_room"}    # a condition on the parameters, false at small-CQ points
    pairs, walks = 0, 0
    points = [p for p in BIG_POINTS if not p[1]] + list(FAULT_POINTS[:3])
    while pairs < LEMMA_PAIRS_WANTED or walks < len(points):
        values, variants = points[walks % len(points)]
        n, bad = _walk(chk, values, rng, rng.choice((100, 300)), variants, claims)
        assert not bad, bad
        pairs += n
        walks += 1


def test_alpha_of_the_initial_state_is_the_models_initial_state():
    system = build({"faults": 0})
    s = fresh_state("s")
    pairs = value_terms(alpha(system.params, system.initial()), s)
    assert evaluate(moves.initial(s), pairs)


DECODE = {"faults": 0, "big_gates": 0}


def test_every_invariant_is_proved_for_decode_workloads_with_faults():
    results = induction.prove({"big_gates": 0})
    assert [r.invariant for r in results] == list(INVARIANTS)
    assert all(r.verdict == "proved" for r in results), [(r.invariant, r.detail) for r in
                                                       results if r.verdict != "proved"]
    assert all(r.protocol == "gate" and r.method == "prove" for r in results)
    assert "implied by the inductive invariant" in results[-1].detail


# prove's own violations (a run found, shortest, replayed) are in test_method_agreement.py;
# window 1's drop, found by the spec's search and the model's BMC alike, is a row just outside
# the envelope (tests/cli/test_envelope.py)


def test_configurations_outside_the_model_are_inconclusive_and_say_why():
    for values in ({"qp_type": "rc"}, {**DECODE, "wire_loss": 1}):
        results = induction.prove(values)
        assert all(r.verdict == "inconclusive" for r in results)
        assert "the z3 model covers" in results[0].detail
    # the variants are modelled for decode-only workloads
    results = induction.prove({}, ["no-barrier"])
    assert all(r.verdict == "inconclusive" for r in results)
    assert "variant no-barrier with big_gates=1" in results[0].detail
    # the model's ranks share one configuration: rank 1 built apart is outside it, a rank 1
    # value equal to rank 0's is not
    results = induction.prove({**DECODE, "rank1_window": 8})
    assert all(r.verdict == "inconclusive" for r in results)
    assert "rank1_window=8" in results[0].detail
    assert induction.out_of_scope(build({"rank1_max_msg": 16384}).params) is None
    # depth-mismatch only matters with big gates, where prove leaves it to proofs/gate/bound.py
    assert "variant depth-mismatch with big_gates=1" in induction.out_of_scope(
        build({}, ["depth-mismatch"]).params, ["depth-mismatch"])
    results = induction.prove(DECODE, ["stray-warm-receive"])
    assert all(r.verdict == "inconclusive" for r in results)
    assert "variant stray-warm-receive" in results[0].detail
    # no-seq-check is harmless only without bad calls
    results = induction.prove({"big_gates": 0}, ["no-seq-check"])
    assert all(r.verdict == "inconclusive" for r in results)
    assert "no-seq-check with faults=1" in results[0].detail


@pytest.mark.slow
def test_a_proof_out_of_solver_resources_is_inconclusive_and_says_which_limit():
    """Every query is bounded by z3's resource count, not the clock: too small a limit proves
    nothing, and each obligation says the limit ended it (never a violation); with every
    invariant dropped, Houdini ends (with nothing left to prove)."""
    prm = param_terms(params_of(build(DECODE).params))
    found = induction.houdini(prm, domain, (2,), Limit(rlimit=1000), workers=1)
    assert set(found) == {*lemmas.ALL_INVARIANTS, *CONSEQUENCES}
    assert {o.verdict for o in found.values()} == {"inconclusive"}
    assert all("solver resource limit reached (rlimit 1,000; raise it with --solver-limit)"
               in o.detail for o in found.values()), found


def test_the_deadlock_check_can_fail(monkeypatch):
    # a model whose gate_done waits for one gate more than arrived can never finish
    real = moves.MOVES["gate_done"]

    def late(s, prm, r, choice):
        m = real(s, prm, r, choice)
        return Move(z3.And(m.guard, z3.UGT(s.rank[r].recv_done, s.rank[r].seq)), m.updates)

    monkeypatch.setitem(moves.MOVES, "gate_done", late)
    prm = param_terms(params_of(build(DECODE).params))
    [ob] = induction.implied(prm, domain, list(lemmas.ALL_INVARIANTS), chunks=(2,))
    assert ob.verdict == "inconclusive" and "breaks it" in ob.detail


def test_a_model_that_forgets_uc_drops_is_caught(forgetful_deliver):
    # the cross-check must notice a drifted model: here deliver no longer records a drop
    chk, rng = Checker(), random.Random(5)
    found = []
    for _ in range(40):
        found += _walk(chk, {"window": 1}, rng, 300)[1]
        if found:
            break
    assert found and "deliver" in found[0]


def _valid(claim: z3.BoolRef) -> bool:
    solver = z3.Solver()
    solver.add(z3.Not(claim))
    return solver.check() == z3.unsat


def test_widened_post_states_imply_the_real_ones_and_cancel_a_moved_count():
    # one count moves from x to y on path c (transmit: send queue to wire); z drops by k
    x, y, z, k = (z3.BitVec(n, 32) for n in "xyzk")
    c, total = z3.Bool("c"), z3.BitVec("total", 64)
    moved = [(x, z3.If(c, x - 1, x)), (y, z3.If(c, y + 1, y)), (z, z - k)]
    wide = widening.widened(moved)
    assert [str(w[0]) for w in wide] == [str(z64(v)) for v in (x, y, z)]
    # what the guard and invariants would give: no step wraps
    no_wrap = z3.And(z3.Implies(c, x != 0), z3.Implies(c, y != 0xFFFFFFFF), z3.ULE(k, z))
    conserved = z64(x) + z64(y) == total
    for claim in (conserved, z3.ULE(z64(z), z64(x)), z64(y) != 0):
        widened, real = widening.post_state(claim, moved, wide), z3.substitute(claim, *moved)
        assert _valid(z3.Implies(widened, real))      # never shows a false post-state
        assert _valid(z3.Implies(z3.And(no_wrap, real), widened))    # loses nothing
    # where x wraps the widened post-state fails (inconclusive), though the real one holds
    widened = widening.post_state(conserved, moved, wide)
    assert not _valid(z3.Implies(z3.substitute(conserved, *moved), widened))
    # the two steps cancel: what is left to show is the pre-state's sum
    post = widened.arg(widened.num_args() - 1)
    assert z3.eq(z3.simplify(post, som=True), z3.simplify(conserved, som=True))


def test_wrapping_tags_self_cancelling_and_constant_steps_stay_narrow():
    tag, x, w = z3.BitVec("tag", 8), z3.BitVec("x", 32), z3.BitVec("w", 32)
    c = z3.Bool("c")
    assert widening.widened([(tag, z3.If(c, tag + 1, tag))]) == []     # 8-bit tags wrap by design
    assert widening.widened([(x, x + (w - x))]) == []                   # cancels in 32 bits
    assert widening.widened([(x, x + 2)]) == []                         # every path, one constant
    assert len(widening.widened([(x, z3.If(c, x + 2, x))])) == 1


def test_case_splits_cover_their_moves(monkeypatch):
    # a consecution query asked case by case proves the action's only if, wherever the move
    # is enabled, one of the cases holds
    s, ch, prm = fresh_state("s"), fresh_choice("s"), fresh_params()
    for action, split in induction.CASES.items():
        for r in (0, 1):
            guard = moves.action_move(action, r, s, prm, ch).guard
            cases = induction._cases(action, s, r, guard)
            assert len(cases) > 1 and _valid(z3.Implies(guard, z3.Or([c for _, c in cases])))
            assert split.invariants <= set(lemmas.ALL_INVARIANTS)
    # a case left out is refused
    reap = induction.CASES["reap"]
    monkeypatch.setitem(induction.CASES, "reap", induction.CaseSplit(
        lambda s, r: reap.cases(s, r)[1:], reap.invariants))
    with pytest.raises(AssertionError, match="do not cover"):
        induction._cases("reap", s, 0, moves.action_move("reap", 0, s, prm, ch).guard)


def test_a_bmc_step_is_one_move_or_a_stutter():
    # the unrolling's step (one equality per post-state variable) is, for each value of its
    # selector, the framed move of that option, or the stutter; other values are refused
    s, t, ch, prm = fresh_state("s"), fresh_state("t"), fresh_choice("s"), fresh_params()
    sel = z3.BitVec("sel", 8)
    options = [(a, r) for a in ACTIONS for r in (0, 1)]
    step = z3.And(bmc.step(s, t, prm, ch, sel, options))
    stutter = z3.And([y == x for (_, x), (_, y) in zip(s.items(), t.items(), strict=True)])
    for j in range(256):
        want = (moves.move(*options[j], s, t, prm, ch) if j < len(options) else
                stutter if j == len(options) else z3.BoolVal(False))
        assert _valid(z3.substitute(step, (sel, z3.BitVecVal(j, 8))) == want), j


def test_the_moves_are_the_specs_actions():
    names = [a.name for a in spec_actions()]
    assert len(moves.MOVES) == len(names) and set(moves.MOVES) == set(names)


def test_every_spec_variant_is_encoded_or_outside_the_model():
    for variant in spec_variants():
        if variant in ENCODED_VARIANTS:
            continue
        why = induction.out_of_scope(build(DECODE, [variant]).params, [variant])
        assert why is not None and f"variant {variant}" in why, variant
