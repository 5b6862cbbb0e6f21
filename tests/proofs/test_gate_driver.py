"""A driver runs a gate engine by asking it what to do next (``next_step``). Held against the
spec: in every state of random runs (faults included), a rank's engine says ADVANCE exactly
when the spec has a step of the rank's own enabled, and READ whenever the spec has a TCP read of the
rank's enabled (the driver blocks on the socket otherwise)."""

from __future__ import annotations

import random

import pytest
from conftest import native_module

from verbspec.refimpl.conformance.gate import (
    CALL_BIG,
    CALLS,
    CONSUME,
    CRASH,
    PEER_GONE,
    READS,
    REAP,
    SETUP,
    TIMEOUT,
    WORLD,
    GateHarness,
    reference,
)
from verbspec.refimpl.engines import gate_engine as ge
from verbspec.spec.gate.system import build

NOT_OWN = WORLD | CALLS | READS | {SETUP, CALL_BIG, CONSUME, REAP, TIMEOUT, PEER_GONE, CRASH}


class Watching(GateHarness):
    """The harness, also checking each engine's next_step against the spec after each step."""

    def __init__(self, system, factory):
        super().__init__(system, factory)
        self.checked = {ge.ADVANCE: 0, ge.READ: 0, ge.POLL: 0}

    def _step(self, impls, pre, name, args, obs):
        diff = super()._step(impls, pre, name, args, obs)
        if diff is None:
            post, _ = {a.name: a for a in self.system.actions}[name].apply(pre, *args)
            diff = self.driver_diff(impls, post)
        return diff

    def driver_diff(self, impls, s):
        for r, impl in enumerate(impls):
            want = impl.next_step()
            enabled = {a.name for a in self.system.actions if not a.fault
                       for args in a.enabled(s) if args[:1] == (r,)}
            own = bool(enabled - NOT_OWN)
            if want == ge.ADVANCE and not own:
                return f"rank {r} next_step", "no step of its own", want
            if want != ge.ADVANCE and own:
                return f"rank {r} next_step", ge.ADVANCE, want
            if enabled & READS and want != ge.READ:
                return f"rank {r} next_step", ge.READ, want
            if want in self.checked:
                self.checked[want] += 1
        return None


# the reference engine, and the native one (skipped, saying why, where not built)
ENGINES = [pytest.param(reference, id="python"), pytest.param("native", id="native")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("values", [{}, {"window": 2, "vec_bytes": 100, "max_msg": 64,
                                         "big_depth": 2, "staging_bytes": 128}])
def test_next_step_agrees_with_the_spec(values, engine):
    if engine == "native":
        native_module("gate")
        from verbspec.refimpl.bindings.native_gate import native_engine as engine
    h = Watching(build(values), engine)
    for seed in range(12):
        run = h.run(random.Random(seed), 1500, fault_rate=0.02)
        assert run.mismatch is None, str(run.mismatch)
    assert min(h.checked.values()) > 50, h.checked
