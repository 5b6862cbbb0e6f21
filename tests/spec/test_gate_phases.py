"""The gate phase graph (spec/gate/state.py: NEXT_PHASES) is the one the steps follow: every
move a rank makes is an edge of it (steps.py refuses any other), and random runs take every
edge."""

from __future__ import annotations

import random

import pytest
from configs import GATE_SMALL

from verbspec.spec.gate.state import DEAD_PHASES, NEXT_PHASES, phase_step_allowed
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import build
from verbspec.spec.gate.variants import (
    BLOCK_DRAIN_WITHOUT_RENDEZVOUS,
    DRAIN_WITHOUT_RENDEZVOUS,
    NO_BARRIER,
)
from verbspec.spec.lts import enabled_moves

SMALL = GATE_SMALL


def walk_edges(values: dict, variants: tuple[str, ...], walks: int, seed: int) -> set:
    system = build(values, variants)
    rng = random.Random(seed)
    seen = set()
    for _ in range(walks):
        s = system.initial()
        for _ in range(300):
            moves = list(enabled_moves(system, s))
            if not moves:
                break
            act, args = rng.choice(moves)
            t, _ = act.apply(s, *args)
            seen |= {(a.phase, b.phase) for a, b in zip(s.ranks, t.ranks, strict=True)
                     if a.phase != b.phase}
            s = t
    return seen


def test_random_runs_take_every_edge_of_the_phase_graph():
    seen = set()
    for values, variants in (({**SMALL, "faults": 0}, ()),
                             ({**SMALL, "faults": 0}, (NO_BARRIER.name,)),
                             ({**SMALL, "faults": 0}, (DRAIN_WITHOUT_RENDEZVOUS.name,)),
                             # verify blocks, with and without their rendezvous
                             ({**SMALL, "faults": 0, "verify_blocks": 1}, ()),
                             ({**SMALL, "faults": 0, "verify_blocks": 1},
                              (BLOCK_DRAIN_WITHOUT_RENDEZVOUS.name,)),
                             # verify blocks as batch gates (the verify window switched off)
                             ({**SMALL, "faults": 0, "verify_blocks": 1,
                               "verify_window": "off"}, ()),
                             # big gates of several windows
                             ({**SMALL, "chain_max": 2, "rq_depth": 4, "faults": 0}, ())):
        seen |= walk_edges(values, variants, 40, seed=7)
    edges = {(a, b) for a, nxt in NEXT_PHASES.items() for b in nxt}
    assert edges - seen == set()
    assert {(a, b) for a, b in seen if b not in DEAD_PHASES} <= edges


def test_a_move_off_the_graph_is_refused_as_a_spec_bug():
    assert phase_step_allowed("wait", "hold") and phase_step_allowed("wait", "failed")
    assert not phase_step_allowed("wait", "idle")
    assert not phase_step_allowed("failed", "crashed")
    spec = GateSpec(build({}).params, frozenset())
    s = build({}).initial()
    with pytest.raises(AssertionError, match="not an edge of NEXT_PHASES"):
        spec._put(s, 0, phase="big_xfer")


def test_the_phase_list_names_each_phase_of_the_graph_once():
    from verbspec.spec.gate.state import PHASES

    assert len(set(PHASES)) == len(PHASES)
    assert set(PHASES) == set(NEXT_PHASES) | {p for nxt in NEXT_PHASES.values() for p in nxt}
