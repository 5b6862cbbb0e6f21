"""The breadth-first search's figures on small fixed configurations of both protocols: the states
and transitions it counts, the depth it reaches, whether it exhausted or was cut, the fault
level and the violation it reports are what the search gave before its nodes were stored as
indices, its observations computed again only for a trace, and the state classes hashed once
(the counts of each configuration below, as measured on commit 39b7020, before that change).
A trace it reports is the run the spec replays, observations included."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from verbspec.proofs.search import bounded_search
from verbspec.spec.gate import system as gate_system
from verbspec.spec.lts import InvariantViolation, System, replay
from verbspec.spec.tagmatch import system as tagmatch_system


@dataclass(frozen=True)
class Case:
    build: Callable[[], System]
    search: dict[str, Any]
    # (depth, states, transitions, exhausted, cut, fault_level)
    figures: tuple[int, int, int, bool, bool, int | None]
    # (invariant, message, trace length) or None
    violation: tuple[str, str, int] | None = None
    variants: tuple[str, ...] = field(default=())


def gate(values: dict[str, Any] | None = None, variants: tuple[str, ...] = ()
         ) -> Callable[[], System]:
    return lambda: gate_system.build(values or {}, variants)


def tagmatch(values: dict[str, Any] | None = None, variants: tuple[str, ...] = ()
             ) -> Callable[[], System]:
    return lambda: tagmatch_system.build(values or {}, variants)


CASES = {
    "gate, every run, cut": Case(gate(), {"depth": 14, "max_states": 4000},
                                 (7, 4000, 8544, False, True, None)),
    "gate, fault-free, cut": Case(gate(), {"depth": 40, "max_states": 3000, "max_faults": 0},
                                  (23, 3000, 7259, False, True, 1)),
    "gate, one fault, cut": Case(gate(), {"depth": 40, "max_states": 3000, "max_faults": 1},
                                 (16, 3000, 6248, False, True, 2)),
    "gate, verify blocks, fault-free, cut": Case(
        gate({"verify_blocks": 1}), {"depth": 40, "max_states": 3000, "max_faults": 0},
        (22, 3000, 7027, False, True, 1)),
    "gate, decode only, target": Case(gate({"big_gates": 0}),
                                      {"depth": 10, "target": "no_deadlock"},
                                      (10, 2534, 5442, False, False, None)),
    "gate, no-barrier": Case(
        gate(variants=("no-barrier",)), {"depth": 8}, (6, 1597, 3190, False, False, None),
        ("no_silent_drop", "gate 1 chunk 0 from rank 0 found no receive posted at rank 1: UC "
                           "dropped it, the sender completed", 6), ("no-barrier",)),
    "tagmatch, no offload, fixpoint": Case(tagmatch({"capacity": 0}), {"depth": 200},
                                           (15, 10241, 62776, True, False, None)),
    "tagmatch, offload-no-sync": Case(
        tagmatch(variants=("offload-no-sync",)), {"depth": 10},
        (8, 11157, 42936, False, False, None),
        ("mpi_order", "receive r0 took message m1 while m0, which arrived earlier and matches "
                      "it, is still unexpected", 8), ("offload-no-sync",)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_search_figures_are_unchanged(name):
    case = CASES[name]
    system = case.build()
    res = bounded_search(system, variants=case.variants, **case.search)
    assert (res.depth, res.states, res.transitions, res.exhausted, res.cut,
            res.fault_level) == case.figures
    if case.violation is None:
        assert res.violation is None
        return
    assert res.violation is not None
    trace = res.violation.trace
    assert (res.violation.invariant, res.violation.message, len(trace) - 1) == case.violation
    # the trace, its observations computed again, is the run the spec replays
    with pytest.raises(InvariantViolation) as replayed:
        replay(system, [(s.action, s.args) for s in trace.steps[1:]], case.variants)
    assert replayed.value.trace.steps == trace.steps
    assert (replayed.value.invariant, replayed.value.message) == (trace.violation, trace.message)
