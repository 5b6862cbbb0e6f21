"""The mutation run's tests (``mutmut run``, configured in pyproject's ``[tool.mutmut]``;
docs/conformance-internals.md, "Mutation run"): the reference engines in lockstep with the spec,
random
runs at fixed seeds and every edge of small configurations, each a second or two on an idle
core, so that each mutant's run takes seconds. The file name keeps it out of the default
suite's collection; ``pytest -n 0 tests/conformance/mutation_focus.py`` runs it against the
installed
engines."""

from __future__ import annotations

import random

import pytest
from configs import GATE_SMALL, TAGMATCH_CONFIGS

from verbspec.proofs.gate.refinement import CONFIGS as GATE_SWEEP
from verbspec.refimpl.conformance.gate import GateHarness
from verbspec.refimpl.conformance.tagmatch import SWEEP_CONFIGS, TagmatchHarness
from verbspec.spec.gate.system import build as build_gate
from verbspec.spec.tagmatch.system import build as build_tagmatch

# random gate runs: the defaults, a two-gate window with faults, big gates of several windows
# whose sends the send queue (2 deep, windows of 3) holds back, two-chunk vectors, RC; seeds
# fixed so a mutant's verdict is repeatable
GATE_RANDOM = [{}, {**GATE_SMALL, "ops": 10},
               {**GATE_SMALL, "ops": 6, "big_depth": 3, "sq_depth": 2},
               {"window": 2, "ops": 8, "vec_bytes": 100},
               {"window": 3, "ops": 8, "qp_type": "rc"}]


@pytest.mark.parametrize("values", GATE_RANDOM, ids=lambda v: ",".join(
    f"{k}={x}" for k, x in v.items()) or "defaults")
def test_gate_random_runs(values):
    h = GateHarness(build_gate(values))
    for seed in range(12):
        run = h.run(random.Random(seed), 3000, fault_rate=0.03)
        assert run.mismatch is None, str(run.mismatch)


# big gates without faults, so that each run carries several of them through every window: a
# send queue 2 deep holding back windows of 3, and a last chunk shorter than a message (the
# runs above mostly end at a fault before a big gate's second window)
GATE_BIG = {**GATE_SMALL, "ops": 6, "big_depth": 3, "sq_depth": 2, "big_last_bytes": 100}


def test_gate_big_gates_without_faults() -> None:
    h = GateHarness(build_gate(GATE_BIG))
    for seed in range(4):
        run = h.run(random.Random(seed), 3000, fault_rate=0)
        assert run.mismatch is None, str(run.mismatch)


def test_gate_every_edge():
    # the refinement check's first configuration: three decode gates through a window of two
    values, _, faults = GATE_SWEEP[0]
    sweep = GateHarness(build_gate(values)).every_edge(faults)
    assert sweep.mismatch is None, str(sweep.mismatch)


@pytest.mark.parametrize("values", TAGMATCH_CONFIGS, ids=lambda v: ",".join(
    f"{k}={x}" for k, x in v.items()) or "defaults")
def test_tagmatch_random_runs(values):
    h = TagmatchHarness(build_tagmatch(values))
    for seed in range(40):
        run = h.run(random.Random(seed), 400)
        assert run.mismatch is None, str(run.mismatch)


def test_tagmatch_every_edge():
    # the sweep's first configuration: offload with a two-entry NIC list, claims and sync
    sweep = TagmatchHarness(build_tagmatch(SWEEP_CONFIGS[0])).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)
