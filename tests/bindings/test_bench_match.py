"""The benchmarks: the tag-matching harness builds, runs every scenario with every matcher built
here and checks every payload (a wrong match fails the run); the gate bench runs each engine.
No time is asserted."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import native_module, require

from verbspec.refimpl.cli import bench
from verbspec.refimpl.cli.main import main

SCENARIOS = {"posted-full-inorder": (16, 256, 4096, 16384),
             "posted-full-reversed": (16, 256, 4096, 16384),
             "unexpected-full-inorder": (256, 4096), "unexpected-full-reversed": (256, 4096),
             "unexpected-masked-inorder": (256, 4096), "unexpected-masked-reversed": (256, 4096),
             "wildcards-0": (4096,), "wildcards-1": (4096,), "wildcards-16": (4096,),
             "wildcards-256": (4096,)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    require("native", None if shutil.which("cc") else "no C compiler (cc) on this machine")
    return bench.build(tmp_path_factory.mktemp("bench"))


def test_ucx_is_linked_where_installed(built):
    _, left_out = built
    require("ucx", left_out.get("ucx"))


def test_every_scenario_runs_and_checks_payloads(capsys, built):
    assert main(["bench", "match", "--json", "--min-messages", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {(r["scenario"], r["n"]) for r in rows} == {
        (s, n) for s, ns in SCENARIOS.items() for n in ns}
    for r in rows:
        assert r["listwalk_ns"] > 0
        assert set(r) == {"scenario", "n", "verbspec_ns", "ucx_ns", "listwalk_ns"}


def test_one_scenario_and_bad_arguments(capsys, built):
    assert main(["bench", "match", "--json", "--min-messages", "1",
                 "--scenario", "wildcards-256"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["scenario"], r["n"]) for r in rows] == [("wildcards-256", 4096)]
    assert main(["bench", "match", "--min-messages", "0"]) == 3
    assert "--min-messages must be at least 1" in capsys.readouterr().err


def test_bench_gate_reports_every_engine(capsys):
    native_module("gate")
    assert main(["bench", "gate", "--gates", "300", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["engine"], r["interface"]) for r in out["rows"]] == [
        ("refimpl", "python"), ("native", "python"), ("native", "c")]
    assert all(r["ns_per_gate"] > 0 for r in out["rows"]) and out["refimpl_over_native_c"] > 0
    assert main(["bench", "gate", "--gates", "0"]) == 3
