"""The unbounded proofs of the matching invariants (proofs/tagmatch/matching.py): each proved,
each caught when a planted wrong step breaks it, and the step relations cross-checked against
the executable list engine on random concrete states."""

from __future__ import annotations

import dataclasses

import pytest
import z3

from verbspec.proofs.report import DRIFTED
from verbspec.proofs.solving import Limit
from verbspec.proofs.tagmatch import matching as mz
from verbspec.proofs.tagmatch import relations
from verbspec.proofs.tagmatch.prove import prove as tagmatch_prove
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch.invariants import INVARIANTS

# a tag-matching instance that proves in a second
SMALL = {"messages": 1, "receives": 1, "max_bytes": 1, "capacity": 0, "probe": 0}


def test_the_proved_properties_are_invariants_of_the_spec():
    assert set(mz.PROPERTIES) <= set(INVARIANTS)


@pytest.mark.parametrize("name", sorted(mz.PROPERTIES))
def test_property_is_proved_for_every_list_length(name):
    obligations = mz.prove_property(name)
    assert [o.name for o in obligations] == ["base", *(f"step {s}" for s in mz.STEPS)]
    assert all(o.verdict == "proved" for o in obligations), obligations


# ---- planted wrong steps -------------------------------------------------------------------

def _row(id_, src=tm.ANY, tag=tm.ANY, nbytes=1, ord_=0, comm=0):
    return {"comm": comm, "src": src, "tag": tag, "bytes": nbytes, "id": id_, "ord": ord_}


def _two_wildcards(s):
    # two posted ANY/ANY receives, ids 0 and 1
    return mz.concrete_state(s, (_row(0), _row(1)), (), 2, {0: mz.WAITING, 1: mz.WAITING},
                             {}, {0: 1, 1: 1}, {})


def _two_from_sender_0(s):
    # two unexpected messages of sender 0 (its 0th and 1st), same envelope
    return mz.concrete_state(s, (), (_row(0, 0, 0, 1, 0), _row(1, 0, 0, 1, 1)), 2, {},
                             {0: mz.WAITING, 1: mz.WAITING}, {0: 1, 1: 1}, {0: 2})


def _one_unexpected(s):
    return mz.concrete_state(s, (), (_row(0, 0, 0, 1, 0),), 1, {}, {0: mz.WAITING}, {0: 1},
                             {0: 1})


def arrive_takes_newest(s, a):
    return mz.arrive(s, a, pick=mz.last)


def post_takes_newest(s, a):
    return mz.post_recv(s, a, pick=mz.last)


def arrive_keeps_matched_receive(s, a):
    enabled, post, obs = mz.arrive(s, a)
    return enabled, dataclasses.replace(post, posted=s.posted), obs


def post_truncates_equal_lengths(s, a):
    enabled, post, obs = mz.post_recv(s, a)
    return enabled, post, dataclasses.replace(obs, trunc=s.unexp.get("bytes", a.j) >= a.nbytes)


PLANTED = [
    ("mpi_order", "arrive", arrive_takes_newest, _two_wildcards),
    ("non_overtaking", "post_recv", post_takes_newest, _two_from_sender_0),
    ("match_once", "arrive", arrive_keeps_matched_receive, _two_wildcards),
    ("truncation_reported", "post_recv", post_truncates_equal_lengths, _one_unexpected),
]


@pytest.mark.parametrize(("name", "step", "wrong", "pin"), PLANTED,
                         ids=[p[0] for p in PLANTED])
def test_a_wrong_step_is_not_proved(name, step, wrong, pin):
    # over all states z3 may find the counterexample or give up on the quantified lists;
    # either way it must not prove the obligation
    res = mz.prove_property(name, Limit(rlimit=5_000_000), steps={step: wrong})
    assert res[-1].name == f"step {step}" and res[-1].verdict != "proved"
    # from one concrete state the wrong step's counterexample is found
    res = mz.prove_property(name, steps={step: wrong}, assume=pin)
    assert res[-1].verdict == "violated", res
    # and the right step from that state keeps the property
    res = mz.prove_property(name, steps={step: mz.STEPS[step]}, assume=pin)
    assert res[-1].verdict == "proved", res


# ---- the relations against the executable engine ---------------------------------------------

def test_relations_admit_exactly_what_the_engine_computes(tmp_path):
    done = relations.check(cache=tmp_path)
    assert done.disagreement is None and done.trials == relations.TRIALS and not done.cached
    again = relations.check(cache=tmp_path)     # remembered under the sources' digest
    assert again.cached and again.disagreement is None


def _newest(right):
    return lambda s, a, pick=mz.first: right(s, a, pick=mz.last)


def _equal_lengths_truncate(right):
    def wrong(s, a, pick=mz.first):
        enabled, post, obs = right(s, a, pick)
        return enabled, post, dataclasses.replace(obs,
                                                  trunc=s.unexp.get("bytes", a.j) >= a.nbytes)
    return wrong


@pytest.mark.parametrize(("step", "wrong"), [("arrive", _newest),
                                             ("post_recv", _equal_lengths_truncate)])
def test_a_relation_that_drifted_from_the_engine_voids_the_proof(monkeypatch, tmp_path, step,
                                                                 wrong):
    monkeypatch.setattr(mz, step, wrong(getattr(mz, step)))
    # a pass remembered for the unplanted sources (same digest) must not stand in for it
    monkeypatch.setenv("VERBSPEC_CACHE", str(tmp_path / "cache"))
    done = relations.check(cache=tmp_path)
    assert done.disagreement is not None and step in done.disagreement
    assert not [p for p in tmp_path.iterdir() if p.name != "cache"]   # never remembered
    rows = tagmatch_prove(SMALL, solver_limit=5_000_000)
    drifted = {r.invariant for r in rows if r.verdict == DRIFTED}
    assert drifted == {*mz.PROPERTIES, "no_lost_message"}, [(r.invariant, r.verdict) for r in rows]
    assert all("no longer match the executable list engine" in r.detail for r in rows
               if r.verdict == DRIFTED)


def test_a_step_no_state_can_take_is_not_proved():
    def never(s, a):
        enabled, post, obs = mz.post_recv(s, a)
        return z3.BoolVal(False), post, obs

    res = mz.prove_property("mpi_order", Limit(rlimit=5_000_000), steps={"never": never})
    assert res[-1].verdict == "unknown"
