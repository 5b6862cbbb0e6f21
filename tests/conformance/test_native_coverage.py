"""The native engines under gcov (refimpl/conformance/coverage.py): every allocation failure of
both engines is refused with the engine left as it was, and (slow tier) the conformance suite
and the native tests together take at least the measured share of each engine's branches."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import native_module, require

from verbspec import native
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import coverage

# the measured figures (docs/conformance.md, "Coverage"), rounded down: a regression fails
BRANCH_FLOOR = {"native/gate/gate_engine.c": 98.0, "native/tagmatch/tagmatch_engine.c": 95.9}
LINE_FLOOR = {"native/gate/gate_engine.c": 99.0, "native/tagmatch/tagmatch_engine.c": 96.9}


def _compiler() -> None:
    cc = shutil.which(os.environ.get("CC", "cc"))
    require("native", None if cc else "no C compiler (cc) on PATH")


@pytest.fixture(scope="module")
def fault_builds(tmp_path_factory) -> dict:
    """Both engines built with the allocation failure injector (no instrumentation)."""
    _compiler()
    built = coverage.build(coverage.ENGINES, tmp_path_factory.mktemp("faults"),
                           instrument=False)
    return {proto: native.load_build(path) for proto, path in built.items()}


def test_every_allocation_failure_leaves_the_engine_as_it_was(fault_builds):
    injected = coverage.alloc_failures(fault_builds)
    # the gate engine allocates once to be made and once to be copied; the tag engine at
    # every growth of the job's arrays, rings and view
    assert injected["gate"] == 2 and injected["tagmatch"] > 1_000


def test_the_injector_fails_the_allocation_it_is_armed_for(fault_builds):
    mod = fault_builds["tagmatch"]
    inject = coverage.Injector(mod)
    from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
    from verbspec.spec.tagmatch.system import build

    cfg = build({}).params
    inject.fail_after(0)
    with pytest.raises(MemoryError):
        NativeTagEngine(cfg, mod)
    assert inject.fired()
    inject.fail_after(10_000)
    NativeTagEngine(cfg, mod)
    assert not inject.fired()
    NativeTagEngine(cfg, mod)       # disarmed


def test_coverage_refuses_other_implementations(capsys):
    assert main(["conform", "--impl", "refimpl", "--coverage", "--quiet"]) == 3
    assert "--coverage measures the native engines" in capsys.readouterr().err


@pytest.mark.slow
def test_the_suite_covers_the_engines_branches(capsys):
    """One coverage run, through the command as a user makes it: both engines under the
    conformance suite and the native tests, reported as JSON; each file at least its floor."""
    _compiler()
    require("native", None if shutil.which("gcov") else "no gcov on PATH")
    for engine in coverage.ENGINES:
        native_module(engine)
    assert coverage.tests_dir() is not None
    assert main(["conform", "--impl", "native", "--protocol", "all", "--coverage", "--quiet",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"], out["failure"]
    got = {f["file"]: f for f in out["files"]}
    assert set(got) == set(BRANCH_FLOOR)
    for name, f in got.items():
        assert 0 < f["branches_hit"] <= f["branches"]
        assert f["branch_pct"] >= BRANCH_FLOOR[name], (name, f["branch_pct"])
        assert f["line_pct"] >= LINE_FLOOR[name], (name, f["line_pct"])
    assert out["drive"]["allocation_failures"]["tagmatch"] > 1_000
    # every edge of every tag-matching sweep configuration conformed
    assert out["drive"]["tagmatch_edges"] == 291_428
    assert out["drive"]["tests"] == 0
