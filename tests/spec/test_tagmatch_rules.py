"""The matching rules of the list engine, and the fast engine held to them."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch.engine import FastEngine
from verbspec.spec.tagmatch.lists import ANY, Engine, Msg, Recv


def R(rid, src=ANY, tag=ANY, comm=0, nbytes=8):
    return Recv(rid, comm, src, tag, nbytes)


def M(mid, src, tag, comm=0, nbytes=8):
    return Msg(mid, comm, src, tag, nbytes)


def run(ops, rules=tm.MPI_RULES):
    e, matches = Engine(), []
    for op in ops:
        if isinstance(op, Recv):
            e, mt = tm.post_recv(e, op, rules)
        else:
            e, mt = tm.arrive(e, op, rules)
        if mt:
            matches.append((mt.recv.id, mt.msg.id))
    return e, matches


def test_arrival_takes_earliest_posted_matching_receive():
    e, matches = run([R("r1", src=1), R("r2", tag=5), R("r3"), M("m", 0, 5)])
    assert matches == [("r2", "m")]
    assert e.posted_ids() == ("r1", "r3")


def test_receive_takes_earliest_matching_unexpected_message():
    e, matches = run([M("m1", 0, 1), M("m2", 1, 2), M("m3", 1, 2), R("r", tag=2)])
    assert matches == [("r", "m2")]
    assert e.unexpected_ids() == ("m1", "m3")


def test_later_message_consumed_first_when_earlier_cannot_match():
    # the seed text: a later tag may be consumed when earlier ones cannot satisfy the rules
    _, matches = run([M("m1", 0, 1), M("m2", 0, 2), R("r", src=0, tag=2)])
    assert matches == [("r", "m2")]


def test_communicator_is_part_of_the_envelope():
    e, matches = run([M("m", 0, 0, comm=1), R("r", comm=0)])
    assert matches == [] and e.unexpected_ids() == ("m",) and e.posted_ids() == ("r",)


def test_wildcard_last_rule_breaks_receive_order():
    ops = [R("wild"), R("spec", src=0, tag=0), M("m", 0, 0)]
    assert run(ops)[1] == [("wild", "m")]
    assert run(ops, tm.Rules(wildcard_last=True))[1] == [("spec", "m")]


def test_newest_first_rule_breaks_message_order():
    ops = [M("m1", 0, 0), M("m2", 0, 0), R("r")]
    assert run(ops)[1] == [("r", "m1")]
    assert run(ops, tm.Rules(newest_first=True))[1] == [("r", "m2")]


def test_cancel_succeeds_only_while_posted():
    e, _ = run([R("r1"), R("r2")])
    e, ok = tm.cancel(e, "r1")
    assert ok and e.posted_ids() == ("r2",)
    e, mt = tm.arrive(e, M("m", 0, 0))
    assert mt.recv.id == "r2"
    e, ok = tm.cancel(e, "r2")
    assert not ok     # matched: the cancel fails, the receive completes normally


def test_probe_names_the_message_a_receive_would_take_without_taking_it():
    e, _ = run([M("m1", 0, 1), M("m2", 1, 1)])
    assert tm.probe(e, 0, 1, ANY).id == "m2"
    assert tm.probe(e, 0, ANY, 1).id == "m1"
    assert tm.probe(e, 0, 2, ANY) is None
    assert e.unexpected_ids() == ("m1", "m2")


def test_truncation_and_protocol():
    mt = tm.Match(R("r", nbytes=4), M("m", 0, 0, nbytes=5))
    assert mt.truncated
    assert not tm.Match(R("r", nbytes=5), M("m", 0, 0, nbytes=5)).truncated
    assert tm.protocol_for(8192, 8192) == "eager"
    assert tm.protocol_for(8193, 8192) == "rndv"


def test_reposting_an_id_is_refused_naming_the_rule():
    e, _ = run([R("r")])
    with pytest.raises(tm.TagMatchError, match="posted once"):
        tm.post_recv(e, R("r"))


def test_notes_example_outcomes_of_every_arrival_order():
    """Sender a sends a1 (tag 1), a2 (tag 2); sender b sends b1 (tag 2), b2 (tag 1);
    r1 = (ANY, 1), r2 = (ANY, 2) are pre-posted. Over every arrival order that keeps each
    sender's order, the engine yields three outcomes, never r1<-b2 with r2<-a2 (MPI-legal, and
    produced by per-peer engines, but by no single arrival order)."""
    a = [M("a1", 0, 1), M("a2", 0, 2)]
    b = [M("b1", 1, 2), M("b2", 1, 1)]
    outcomes = set()
    for picks in set(itertools.permutations("aabb")):
        queues = {"a": list(a), "b": list(b)}
        order = [queues[p].pop(0) for p in picks]
        _, matches = run([R("r1", tag=1), R("r2", tag=2), *order])
        outcomes.add(frozenset(matches))
    assert outcomes == {
        frozenset({("r1", "a1"), ("r2", "a2")}),
        frozenset({("r1", "a1"), ("r2", "b1")}),
        frozenset({("r1", "b2"), ("r2", "b1")}),
    }
    assert frozenset({("r1", "b2"), ("r2", "a2")}) not in outcomes


envelopes = st.tuples(st.integers(0, 1), st.one_of(st.just(ANY), st.integers(0, 2)),
                      st.one_of(st.just(ANY), st.integers(0, 2)))
ops = st.lists(st.one_of(
    st.tuples(st.just("post"), envelopes),
    st.tuples(st.just("arrive"), st.tuples(st.integers(0, 1), st.integers(0, 2),
                                           st.integers(0, 2))),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(st.just("probe"), envelopes),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_fast_engine_agrees_with_list_engine_step_by_step(seq):
    spec, fast = Engine(), FastEngine()
    for i, (kind, arg) in enumerate(seq):
        if kind == "post":
            r = Recv(i, *arg, 8)
            spec, want = tm.post_recv(spec, r)
            got = fast.post_recv(r)
        elif kind == "arrive":
            m = Msg(i, *arg, 8)
            spec, want = tm.arrive(spec, m)
            got = fast.arrive_msg(m)
        elif kind == "cancel":
            spec, want = tm.cancel(spec, arg)
            got = fast.cancel(arg)
        else:
            want, got = tm.probe(spec, *arg), fast.probe(*arg)
        assert got == want, f"step {i} {kind}{arg}"
    assert [r.id for r in fast.posted()] == list(spec.posted_ids())
    assert [m.id for m in fast.unexpected()] == list(spec.unexpected_ids())


def test_fast_engine_agrees_on_long_random_runs():
    rng = random.Random(7)
    spec, fast = Engine(), FastEngine()
    for i in range(4000):
        c, s, t = rng.randrange(2), rng.randrange(4), rng.randrange(4)
        if rng.random() < 0.5:
            r = Recv(i, c, ANY if rng.random() < 0.2 else s, ANY if rng.random() < 0.2 else t, 1)
            spec, want = tm.post_recv(spec, r)
            assert fast.post_recv(r) == want
        else:
            m = Msg(i, c, s, t, 1)
            spec, want = tm.arrive(spec, m)
            assert fast.arrive_msg(m) == want
    assert [m.id for m in fast.unexpected()] == list(spec.unexpected_ids())
