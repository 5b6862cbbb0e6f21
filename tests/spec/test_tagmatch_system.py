"""The closed tag-matching system under the checkers: defaults hold, each variant breaks its
invariant with a shortest trace, traces round-trip through ITF and replay."""

from __future__ import annotations

import pytest

from verbspec.proofs.explore import explore
from verbspec.proofs.report import Obligation, Result
from verbspec.proofs.search import bounded_search
from verbspec.proofs.tagmatch import matching as tagmatch_matching
from verbspec.proofs.tagmatch import prove as tm_prove
from verbspec.proofs.tagmatch.prove import prove as tagmatch_prove
from verbspec.proofs.traces import read_moves, write_trace
from verbspec.spec import protocols
from verbspec.spec.lts import InvariantViolation, replay
from verbspec.spec.params import ParamError
from verbspec.spec.tagmatch import system as ts

# variant -> (invariant it breaks, shortest trace length under the default parameters)
BREAKS = {
    "offload-no-sync": ("mpi_order", 8),
    "wildcard-last": ("mpi_order", 5),
    "unexpected-newest-first": ("mpi_order", 7),
    "no-shadow-claim": ("offload_refines_software", 4),
    "offload-behind-software": ("shadow_consistent", 2),
    "fin-before-read": ("rndv_buffer_safety", 7),
    "eager-complete-on-post": ("eager_buffer_safety", 1),
    "silent-truncation": ("truncation_reported", 6),
}


def test_registry_interface():
    mod = protocols.load("tagmatch")
    assert mod is ts and mod.PROTOCOL == "tagmatch"
    assert {v.name for v in mod.VARIANTS} == set(BREAKS)
    assert all(v.changes and v.breaks for v in mod.VARIANTS)
    system = mod.build({}, ())
    assert [i.name for i in system.invariants] == list(mod.INVARIANTS)
    assert system.param_dict() == {p.name: p.default for p in mod.PARAMS}
    hash(system.initial())


def test_invalid_parameters_and_variants_are_refused():
    with pytest.raises(ParamError, match="capacity"):
        ts.build({"capacity": -1})
    with pytest.raises(ParamError, match="unknown parameter"):
        ts.build({"bogus": 1})
    with pytest.raises(ParamError, match="unknown variant"):
        ts.build({}, ("no-such-variant",))


def test_defaults_hold_over_every_reachable_state():
    res = bounded_search(ts.build(), depth=200)
    assert res.violation is None
    assert res.exhausted and not res.cut   # fixpoint: no new state past res.depth
    assert res.depth >= 20 and res.states > 100_000


def test_offload_off_holds_over_every_reachable_state():
    res = bounded_search(ts.build({"capacity": 0}), depth=200)
    assert res.violation is None and res.exhausted


@pytest.mark.parametrize("variant", sorted(BREAKS))
def test_variant_found_by_bounded_search_with_shortest_trace(variant, tmp_path):
    invariant, length = BREAKS[variant]
    system = ts.build({}, (variant,))
    res = bounded_search(system, depth=length + 2, variants=(variant,))
    assert res.violation is not None, variant
    assert res.violation.invariant == invariant, res.violation.message
    assert len(res.trace) - 1 == length
    # nothing shorter: the search one level shallower finds no violation
    assert bounded_search(system, depth=length - 1, variants=(variant,)).violation is None
    # the trace round-trips through ITF and replays to the same violation
    path = write_trace(res.trace, tmp_path / f"{variant}.itf.json")
    meta, moves = read_moves(path)
    assert meta["protocol"] == "tagmatch" and meta["violation"] == invariant
    assert meta["variants"] == (variant,)
    with pytest.raises(InvariantViolation) as e:
        replay(ts.build(meta["params"], meta["variants"]), moves, meta["variants"])
    assert e.value.invariant == invariant
    assert len(e.value.trace) == len(res.trace)


@pytest.mark.parametrize("variant", sorted(BREAKS))
def test_variant_found_by_exploration(variant):
    invariant, _ = BREAKS[variant]
    res = explore(ts.build({}, (variant,)), examples=600, steps=40, seed=3,
                  variants=(variant,))
    assert res.violation is not None, f"{variant}: {res.stats}"
    assert res.violation.invariant == invariant


def test_offload_no_sync_trace_is_the_m1_m2_b1_race():
    system = ts.build({}, ("offload-no-sync",))
    trace = bounded_search(system, depth=10, variants=("offload-no-sync",)).trace
    acts = [s.action for s in trace.steps[1:]]
    # m1 reaches the NIC, b1 is posted and added to hardware, then m2 reaches the NIC
    assert acts == ["send", "send", "deliver", "post_recv", "hw_op", "deliver",
                    "sw_complete", "sw_complete"]
    assert trace.steps[-1].state.status == (1,)        # b1 holds m2 ...
    assert "m0" in trace.message                        # ... while m1 waits unexpected
    # the same moves with the hold in place: hardware leaves m2 alone and b1 gets m1
    final = replay(ts.build(), [(s.action, s.args) for s in trace.steps[1:]]).steps[-1].state
    assert final.status == (0,)
    assert final.engine.unexpected_ids() == (1,)


def _step(system, state, name, *args):
    act = {a.name: a for a in system.actions}[name]
    assert args in set(act.enabled(state)), (name, args)
    return act.apply(state, *args)


def _broken(system, pre, name, args, post, obs):
    out = set()
    for inv in system.invariants:
        bad = (inv.check(post) if inv.over == "state"
               else inv.check(pre, name, args, post, obs))
        if bad:
            out.add(inv.name)
    return out


def test_the_race_breaks_every_ordering_invariant_at_once():
    system = ts.build({}, ("offload-no-sync",))
    trace = bounded_search(system, depth=10, variants=("offload-no-sync",)).trace
    pre, last = trace.steps[-2].state, trace.steps[-1]
    broken = _broken(system, pre, last.action, tuple(last.args.values()), last.state, last.obs)
    # and software's shadow still claims b1, which hardware already consumed
    assert broken == {"mpi_order", "non_overtaking", "match_once", "offload_refines_software",
                      "shadow_consistent"}


def test_without_shadow_claims_a_message_is_stranded():
    system = ts.build({}, ("no-shadow-claim",))
    trace = bounded_search(system, depth=6, variants=("no-shadow-claim",)).trace
    # let hardware take the add: nothing is in flight, and m0 waits beside r0 forever
    post, obs = _step(system, trace.steps[-1].state, "hw_op")
    assert "no_lost_message" in _broken(system, trace.steps[-1].state, "hw_op", (), post, obs)


def test_offload_behind_software_overtakes_the_earlier_wildcard():
    system = ts.build({"cancel": 0}, ("offload-behind-software",))
    s = system.initial()
    for name, args in [("post_recv", (0, 0, -1, 1)), ("post_recv", (0, 0, 0, 1)),
                       ("hw_op", ()), ("send", (0, 0, 0, 1)), ("deliver", (0,))]:
        s, _ = _step(system, s, name, *args)
    post, obs = _step(system, s, "sw_complete")
    assert obs.matches == ((1, 0),)           # hardware gave m0 to r1 ...
    assert "mpi_order" in _broken(system, s, "sw_complete", (), post, obs)   # ... not r0


def test_clean_run_replays_from_itf(tmp_path):
    res = explore(ts.build(), examples=20, steps=30, seed=5)
    assert res.violation is None
    system = ts.build()
    search = bounded_search(system, depth=6)
    assert search.violation is None
    # a hand-written run: post, send, deliver, complete, then rendezvous READ and FIN
    moves = [("post_recv", {"comm": 0, "src": -1, "tag": -1, "nbytes": 2}),
             ("send", {"sender": 0, "comm": 0, "tag": 0, "nbytes": 2}),
             ("deliver", {"sender": 0}), ("sw_complete", {}),
             ("rndv_read", {"mid": 0}), ("rndv_read_done", {"mid": 0}),
             ("send_fin", {"mid": 0}), ("fin_arrive", {"sender": 0})]
    trace = replay(system, moves)
    final = trace.steps[-1].state
    assert final.status == (0,) and final.completion == (ts.OK,) and final.released[0]
    path = write_trace(trace, tmp_path / "clean.itf.json")
    meta, back = read_moves(path)
    assert back == [(a, dict(kw)) for a, kw in moves]
    assert replay(system, back).steps[-1].state == final


def test_prove_reports_each_invariant_with_its_bound():
    results = tagmatch_prove({"receives": 1})
    assert [r.invariant for r in results] == list(ts.INVARIANTS)
    assert all(r.verdict == "proved" for r in results)
    assert all("reachable states" in r.bound for r in results)
    # the invariants proved by induction for every list length say so in their one row
    unbounded = {r.invariant for r in results if r.bound.startswith("unbounded")}
    assert unbounded == {*tagmatch_matching.PROPERTIES, "no_lost_message"}
    bad = tagmatch_prove({}, ("wildcard-last",))
    assert not any(r.bound.startswith("unbounded") for r in bad)   # the encoding is MPI's order
    verdicts = {r.invariant: r.verdict for r in bad}
    assert verdicts["mpi_order"] == "violated"
    assert set(verdicts.values()) == {"violated", "inconclusive"}



def test_a_row_is_proved_only_when_both_its_proofs_are():
    row = Result("mpi_order", "tagmatch", "prove", "proved", "all 9 reachable states", 1.0,
                 None, "fixpoint")
    good = tm_prove.Induction([Obligation("base", "proved", 0.5)], "it holds")
    stuck = tm_prove.Induction([Obligation("base", "proved", 0.5),
                                Obligation("step arrive", "unknown", 2.0, "z3: timeout")], "")
    both = tm_prove._combine(row, good)
    assert (both.verdict, both.seconds) == ("proved", 1.5)
    assert both.bound.startswith("unbounded") and "all 9 reachable states" in both.bound
    half = tm_prove._combine(row, stuck)
    assert half.verdict == "inconclusive" and "step arrive: unknown" in half.detail
    assert not half.bound.startswith("unbounded")
    broken = Result("mpi_order", "tagmatch", "prove", "violated", "shortest trace: 5 steps",
                    1.0, "t.itf.json", "m0 went to r1")
    assert tm_prove._combine(broken, good).verdict == "violated"
    assert tm_prove._combine(broken, stuck).verdict == "violated"

@pytest.mark.slow
@pytest.mark.long
def test_two_senders_hold_over_every_reachable_state():
    res = bounded_search(ts.build({"senders": 2, "messages": 1, "receives": 2}), depth=200)
    assert res.violation is None and res.exhausted


@pytest.mark.slow
def test_larger_instance_explored():
    values = {"senders": 2, "messages": 2, "receives": 3, "tags": 2}
    res = explore(ts.build(values), examples=1500, steps=60, seed=9)
    assert res.violation is None, res.violation
