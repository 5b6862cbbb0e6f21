"""The generic machinery: exploration generated from an action list, bounded search, reduction,
ITF traces."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from verbspec.proofs.explore import explore
from verbspec.proofs.search import bounded_search
from verbspec.proofs.traces import read_moves, write_trace
from verbspec.spec.gate.system import build
from verbspec.spec.itf import decode, encode, trace_to_itf
from verbspec.spec.lts import Action, Invariant, InvariantViolation, replay


@dataclass(frozen=True)
class Counter2:
    a: int = 0
    b: int = 0


class TwoCounters:
    """A toy system: two counters; the invariant forbids a == b == limit."""

    protocol = "toy"
    params = None

    def __init__(self, limit: int, extra_action: bool = False):
        self.limit = limit
        acts = [
            Action("inc_a", "a += 1", ("by",), lambda s: [(1,)] if s.a < limit else [],
                   lambda s, by: (replace(s, a=s.a + by), None)),
            Action("inc_b", "b += 1", ("by",), lambda s: [(1,)] if s.b < limit else [],
                   lambda s, by: (replace(s, b=s.b + by), None)),
        ]
        if extra_action:
            acts.append(Action("reset", "a = 0", (), lambda s: [()] if s.a else [],
                               lambda s: (replace(s, a=0), None)))
        self.actions = tuple(acts)
        self.invariants = (Invariant("not_both_full", "a and b never both reach the limit",
                                     "state", lambda s: "both full" if s.a == s.b == limit
                                     else None),)

    def initial(self) -> Counter2:
        return Counter2()

    def done(self, s: Counter2) -> bool:
        return False

    def param_dict(self) -> dict:
        return {"limit": self.limit}


def test_exploration_runs_a_new_action_without_new_test_code():
    res = explore(TwoCounters(50, extra_action=True), examples=30, steps=60)
    assert res.violation is None
    assert set(res.stats.actions) == {"inc_a", "inc_b", "reset"}


def test_exploration_finds_and_reduces_a_violation():
    res = explore(TwoCounters(3), examples=100, steps=50)
    assert res.violation is not None and res.violation.invariant == "not_both_full"
    assert len(res.trace) - 1 == 6          # three increments of each, nothing else


def test_bounded_search_gives_a_shortest_trace_and_knows_when_it_is_exhaustive():
    res = bounded_search(TwoCounters(3), depth=20)
    assert res.violation is not None and len(res.trace) - 1 == 6
    safe = TwoCounters(3)
    safe.invariants = ()
    full = bounded_search(safe, depth=20)
    assert full.exhausted and full.states == 16 and full.violation is None


def test_seeded_exploration_is_reproducible():
    a = explore(build({}), examples=10, steps=100, seed=7)
    b = explore(build({}), examples=10, steps=100, seed=7)
    assert a.stats.steps == b.stats.steps and a.stats.actions == b.stats.actions


def test_base_exploration_exercises_every_protocol_step():
    system = build({"chain_max": 2, "big_depth": 3, "window": 2, "verify_blocks": 1})
    res = explore(system, examples=200, steps=300)
    assert res.violation is None
    progress = {a.name for a in system.actions if not a.fault}
    assert progress <= set(res.stats.actions), progress - set(res.stats.actions)


def test_itf_encoding_round_trips_and_uses_bigint_past_2_53():
    assert encode(2**62) == {"#bigint": str(2**62)}
    assert encode(5) == 5
    value = (1, "x", frozenset({2, 3}), {"k": (True, 2**64)})
    assert decode(encode(value)) == value


def test_written_trace_replays_to_the_same_states(tmp_path):
    res = explore(build({}, ["no-barrier"]), examples=50, steps=100, variants=["no-barrier"])
    path = write_trace(res.trace, tmp_path / "t.itf.json")
    meta, moves = read_moves(path)
    assert meta["violation"] == "no_silent_drop"
    with pytest.raises(InvariantViolation) as e:
        replay(build(meta["params"], meta["variants"]), moves, meta["variants"])
    assert trace_to_itf(e.value.trace)["states"] == trace_to_itf(res.trace)["states"]
    doc = trace_to_itf(res.trace)
    assert doc["vars"][:2] == ["action", "args"]
    assert [s["#meta"]["index"] for s in doc["states"]] == list(range(len(doc["states"])))
