"""The gate conformance harness: the reference engine runs in lockstep with the spec without a
mismatch, every action reaches it, a planted bug in an engine is caught at its step, and the
engine imports nothing of the spec but its configuration and constants."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from verbspec.refimpl import gate_engine
from verbspec.refimpl.conformance import GateHarness
from verbspec.refimpl.gate_engine import Emitted, GateEngine
from verbspec.spec.actions import action_names
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import FAILED
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import build

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [{}, {"window": 2, "ops": 12}, {"window": 2, "ops": 10, "vec_bytes": 100},
           {"window": 3, "ops": 10, "qp_type": "rc"}, {"faults": 0, "ops": 20}]


def runs(system, factory=None, n=30, steps=3000, **kw):
    """Seeded random runs, one at a time."""
    h = GateHarness(system) if factory is None else GateHarness(system, factory)
    return (h.run(random.Random(seed), steps, **kw) for seed in range(n))


@pytest.mark.parametrize("values", CONFIGS, ids=lambda v: ",".join(f"{k}={x}" for k, x in
                                                                     v.items()) or "defaults")
def test_the_reference_engine_conforms(values):
    done = list(runs(build(values), n=10 if values.get("faults") == 0 else 30))
    bad = [r.mismatch for r in done if r.mismatch]
    assert not bad, str(bad[0])
    assert sum(r.steps for r in done) > 2_000


def test_every_action_but_wire_loss_reaches_the_engines():
    seen = Counter()
    for values in CONFIGS:
        for r in runs(build(values), n=40, fault_rate=0.05):
            assert r.mismatch is None, str(r.mismatch)
            seen.update(r.actions)
    missing = set(action_names(GateSpec)) - set(seen)
    assert missing == {"lose"}


class RepostTooFar(GateEngine):
    def _gate_done(self) -> Emitted:
        super()._gate_done()
        shifted = self._gate_chain("in", self.seq + self.cfg.window + 1, last_only_tagged=True)
        return Emitted(recvs=shifted)


class DrainPollsSixteen(GateEngine):
    def poll_size(self) -> int:
        return 16


class SilentTimeout(GateEngine):
    def timeout(self) -> Emitted:
        self.phase, self.error = FAILED, errors.GATE_PEER()
        return Emitted(result=self.error)


@pytest.mark.parametrize("engine,values,what", [
    (RepostTooFar, {"window": 2, "ops": 6, "big_gates": 0}, "receives posted"),
    (DrainPollsSixteen, {"window": 8, "ops": 20, "faults": 0}, "completions polled"),
    (SilentTimeout, {"window": 2, "ops": 6}, "result"),
])
def test_a_planted_engine_bug_is_caught_at_its_step(engine, values, what):
    first = next((r for r in runs(build(values), lambda cfg, r, grant: engine(cfg, grant),
                                  n=60, fault_rate=0.05) if r.mismatch), None)
    assert first is not None, f"{engine.__name__} went unnoticed in 60 runs"
    assert first.mismatch.what == what
    assert first.trace.violation == "conformance" and len(first.trace.steps) == first.steps
    assert f"step {first.steps} " in str(first.mismatch)


ALLOWED = {"verbspec.spec.gate.params", "verbspec.spec.gate.errors",
           "verbspec.spec.gate.wire", "verbspec.spec.gate.state"}


def test_the_engine_imports_only_configuration_and_constants():
    tree = ast.parse(Path(gate_engine.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("verbspec.spec") for a in node.names)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verbspec.spec"):
            modules = ({f"{node.module}.{a.name}" for a in node.names}
                       if node.module == "verbspec.spec.gate" else {node.module})
            assert modules <= ALLOWED, modules
            if node.module == "verbspec.spec.gate.state":
                # names of phases and wire constants, never the spec's types or steps
                assert all(a.name.isupper() for a in node.names), [a.name for a in node.names]
