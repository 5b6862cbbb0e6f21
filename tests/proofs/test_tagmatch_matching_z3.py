"""The unbounded proofs of the matching invariants (proofs/tagmatch/matching.py): each proved,
each caught when a planted wrong step breaks it, and the step relations cross-checked against
the executable list engine on random concrete states."""

from __future__ import annotations

import dataclasses
import random

import pytest
import z3

from verbspec.proofs.solving import Limit
from verbspec.proofs.tagmatch import matching as mz
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch.invariants import INVARIANTS


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

def _env(rng, wild):
    return (rng.randrange(2), tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3),
            tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3))


def _lists(rng):
    """A random reachable-looking engine state: ids from one clock, each list in id order;
    message sender indexes increasing per sender."""
    t = rng.randrange(9)
    ids = list(range(t))
    rng.shuffle(ids)
    cut = rng.randrange(t + 1)
    posted = tuple(tm.Recv(i, *_env(rng, True), rng.randrange(1, 4)) for i in sorted(ids[:cut]))
    unexp = tuple(tm.Msg(i, *_env(rng, False), rng.randrange(1, 4)) for i in sorted(ids[cut:]))
    ords: dict[int, int] = {}
    nxt: dict[int, int] = {}
    for m in unexp:
        ords[m.id] = nxt.get(m.src, 0) + rng.randrange(2)
        nxt[m.src] = ords[m.id] + 1
    return t, posted, unexp, ords, nxt


def _rows(items, ords):
    return tuple({"comm": x.comm, "src": x.src, "tag": x.tag, "bytes": x.bytes, "id": x.id,
                  "ord": ords.get(x.id, 0)} for x in items)


def _holds(*fs):
    s = z3.Solver()
    s.add(*fs)
    return s.check()


def test_relations_admit_exactly_what_the_engine_computes():
    rng = random.Random(5)
    s, a = mz.St.fresh("s"), mz.Args.fresh()
    for trial in range(160):
        t, posted, unexp, ords, nxt = _lists(rng)
        e = tm.Engine(posted, unexp)
        kind = trial % 4
        lengths = {x.id: x.bytes for x in (*posted, *unexp)}
        pre = mz.concrete_state(s, _rows(posted, ords), _rows(unexp, ords), t,
                                {r.id: mz.WAITING for r in posted},
                                {m.id: mz.WAITING for m in unexp}, lengths, nxt)
        nb = rng.randrange(1, 4)
        match = None
        found = None
        if kind == 0:
            env = _env(rng, True)
            post, match = tm.post_recv(e, tm.Recv(t, *env, nb))
            enabled, st, obs = mz.post_recv(s, a)
        elif kind == 1:
            env = _env(rng, False)
            ords[t] = nxt.get(env[1], 0)
            post, match = tm.arrive(e, tm.Msg(t, *env, nb))
            enabled, st, obs = mz.arrive(s, a)
            pre = z3.And(pre, a.ord == ords[t])
        elif kind == 2:
            env = (0, 0, 0)
            rid = rng.randrange(t + 1)
            post, ok = tm.cancel(e, rid)
            enabled, st, obs = mz.cancel(s, a)
            pre = z3.And(pre, a.rid == rid)
        else:
            env = _env(rng, True)
            post, found = e, tm.probe(e, *env)
            enabled, st, obs = mz.probe(s, a)
        pre = z3.And(pre, *(x == v for x, v in zip(a.env, env, strict=True)), a.nbytes == nb)
        want = [mz.concrete(st.posted, _rows(post.posted, ords)),
                mz.concrete(st.unexp, _rows(post.unexpected, ords))]
        if kind in (0, 1):
            # the histories record what the closed system records in its status tuples
            stat = st.rstat if kind == 0 else st.mstat
            want += [st.t == t + 1, obs.matched == (match is not None), st.length[t] == nb]
            if match is not None:
                want += [obs.rid == match.recv.id, obs.mid == match.msg.id,
                         obs.trunc == match.truncated, st.rstat[match.recv.id] == mz.MATCHED,
                         st.mstat[match.msg.id] == mz.MATCHED]
            else:
                want += [stat[t] == mz.WAITING]
            if kind == 1:
                want += [st.nxt[env[1]] == ords[t] + 1]
        elif kind == 2:
            want += [obs.cancelled == ok, st.t == t]
            if ok:
                want += [st.rstat[rid] == mz.CANCELLED]
        else:
            want += [obs.found == (found is not None)]
            if found is not None:
                want += [obs.mid == found.id]
        assert _holds(pre, enabled, *want) == z3.sat, (trial, posted, unexp, env)
        assert _holds(pre, enabled, z3.Not(z3.And(want))) == z3.unsat, (trial, posted, unexp)


def test_a_step_no_state_can_take_is_not_proved():
    def never(s, a):
        enabled, post, obs = mz.post_recv(s, a)
        return z3.BoolVal(False), post, obs

    res = mz.prove_property("mpi_order", Limit(rlimit=5_000_000), steps={"never": never})
    assert res[-1].verdict == "unknown"
