"""Progress for pipelines (heartbeat lines on stderr when it is not a terminal, a closing
summary, ``--quiet``) and the JUnit report, read back with a JUnit parser."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from verbspec.proofs.explore import explore
from verbspec.proofs.report import (
    DRIFTED,
    EXIT_VIOLATION,
    NotRun,
    Result,
    exit_code,
    junit_xml,
)
from verbspec.refimpl import progress
from verbspec.refimpl.cli import check, report
from verbspec.refimpl.cli.main import main
from verbspec.spec import protocols

LINE = re.compile(r"^\d\d:\d\d:\d\d verbspec check: ")


def slow_run(seconds: float, verdict: str = "held"):
    """A stand-in for run_method that takes ``seconds`` and reports every invariant."""
    def run(protocol, method, values, variants, opts):
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            opts.progress(f"depth {int(time.perf_counter() * 100) % 7}")
            time.sleep(0.01)
        system = protocols.load(protocol).build(values, variants)
        return [Result(inv.name, protocol, method, verdict, "test bound", seconds)
                for inv in system.invariants]
    return run


def test_heartbeat_lines_name_the_phase_without_a_terminal(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.1)
    monkeypatch.setattr(check, "run_method", slow_run(0.6))
    assert main(["check", "--protocol", "tagmatch", "--method", "bmc",
                 "--trace-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert all(LINE.match(ln) for ln in err), err
    beats = [ln for ln in err if "tagmatch: bmc: depth" in ln and "(running" in ln]
    assert len(beats) >= 3, err
    assert err[0].endswith("tagmatch: bmc: started")
    assert "tagmatch: bmc: done in" in err[-2]
    assert re.search(r"verbspec check: 9 results \(9 held\) in [\d.]+s; exit 0$", err[-1])


def test_heartbeat_interval_is_at_most_ten_seconds():
    assert 0 < progress.HEARTBEAT_SECONDS <= 10
    assert progress.Progress(terminal=False).interval == progress.HEARTBEAT_SECONDS


def test_quiet_prints_no_progress(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.05)
    monkeypatch.setattr(check, "run_method", slow_run(0.3))
    assert main(["check", "--protocol", "tagmatch", "--method", "bmc", "--quiet",
                 "--trace-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert out.err == "" and "exit 0" in out.out


def test_a_real_check_piped_logs_start_done_and_summary(tmp_path):
    """The installed command, its stderr a pipe: every line timestamped, a closing summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "verbspec.refimpl.cli.main", "check", "--protocol", "tagmatch",
         "--method", "explore", "--examples", "5", "--steps", "10", "--trace-dir",
         str(tmp_path / "t")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert err and all(LINE.match(ln) for ln in err), err
    assert err[0].endswith("tagmatch: explore: started")
    assert err[-1].endswith("exit 0")
    # Hypothesis's storage stays out of the working directory
    assert not (tmp_path / ".hypothesis").exists()


def test_hypothesis_dir_keeps_its_storage_where_asked(tmp_path):
    store = tmp_path / "hyp"
    proc = subprocess.run(
        [sys.executable, "-m", "verbspec.refimpl.cli.main", "check", "--protocol", "tagmatch",
         "--method", "explore", "--examples", "5", "--steps", "10", "--quiet",
         "--hypothesis-dir", str(store)], capture_output=True, text=True, cwd=tmp_path,
        timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / ".hypothesis").exists()


def test_exploration_points_hypothesis_at_the_storage_it_was_given_and_restores_it(tmp_path):
    from hypothesis.configuration import storage_directory

    def home() -> Path:
        return storage_directory(intent_to_write=False).home_directory

    before = home()
    seen = []
    explore(protocols.load("tagmatch").build({}), examples=2, steps=5, storage=tmp_path,
            progress=lambda st: seen.append(home()))
    assert seen and set(seen) == {tmp_path}
    assert home() == before


# ------------------------------------------------------------------------------ JUnit
def test_junit_report_reads_back_one_case_per_protocol_method_invariant(tmp_path, capsys):
    report = tmp_path / "reports" / "verbspec.xml"
    code = main(["check", "--protocol", "tagmatch", "--method", "bmc", "--quiet",
                 "--variant", "silent-truncation", "--trace-dir", str(tmp_path / "t"),
                 "--junit", str(report)])
    assert code == 1
    xml = JUnitXml.fromfile(str(report))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    cases = {(c.classname, c.name): c for c in suite}
    assert len(cases) == suite.tests == 9
    assert all(k[0] == "verbspec.tagmatch.bmc" for k in cases)
    bad = cases["verbspec.tagmatch.bmc", "truncation_reported"]
    assert [type(r) for r in bad.result] == [Failure]
    assert "completed without a truncation error" in bad.result[0].message
    assert "tagmatch-silent-truncation-bmc-truncation_reported-" in bad.result[0].text
    assert suite.failures == 1 and suite.skipped == 0 and suite.errors == 0
    assert sum(1 for c in suite if c.is_passed) == 8


def test_junit_inconclusive_and_not_run_are_skipped(tmp_path):
    results = [Result("a", "gate", "prove", "proved", "unbounded", 1.0),
               Result("b", "gate", "prove", "inconclusive", "not proved", 1.0, None,
                      "outside the model"),
               Result("c", "gate", "prove", "violated", "trace of 3 steps", 1.0, "t.itf.json",
                      "broke")]
    path = tmp_path / "j.xml"
    path.write_text(junit_xml(results, [NotRun("gate", "bmc", "a", "too big")]))
    suite = next(iter(JUnitXml.fromfile(str(path))))
    kinds = {(c.classname, c.name): [type(r) for r in c.result] for c in suite}
    assert kinds == {("verbspec.gate.prove", "a"): [],
                     ("verbspec.gate.prove", "b"): [Skipped],
                     ("verbspec.gate.prove", "c"): [Failure],
                     ("verbspec.gate.bmc", "a"): [Skipped]}
    assert not any(Error in k for k in kinds.values())
    assert (suite.tests, suite.failures, suite.skipped) == (4, 1, 2)
    # a method's time counts once, not once per invariant
    assert suite.time == pytest.approx(1.0)


def test_junit_a_proof_void_by_drift_is_an_error_and_fails_the_run(tmp_path):
    results = [Result("a", "tagmatch", "prove", "proved", "unbounded", 1.0),
               Result("b", "tagmatch", "prove", DRIFTED, "not proved", 1.0, None,
                      "the z3 step relations no longer match the executable list engine")]
    path = tmp_path / "j.xml"
    path.write_text(junit_xml(results))
    suite = next(iter(JUnitXml.fromfile(str(path))))
    kinds = {c.name: [type(r) for r in c.result] for c in suite}
    assert kinds == {"a": [], "b": [Error]}
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (2, 0, 1, 0)
    assert exit_code(results) == EXIT_VIOLATION


def test_summary_has_a_row_per_invariant_and_a_column_per_method(capsys):
    results = [Result("no_silent_drop", "gate", "prove", "proved", "every reachable state", 1.25),
               Result("gate_order", "gate", "prove", "proved", "every reachable state", 0.5),
               Result("no_silent_drop", "gate", "bmc", "held", "depth 12", 3.0),
               Result("gate_order", "gate", "bmc", "violated", "shortest trace: 7 steps", 0.75,
                      "t.itf.json", "gate 2 before gate 1"),
               Result("match_once", "tagmatch", "bmc", "held", "depth 9", 2.0)]
    report.print_results(results, 1)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "invariant" in line)
    cells = [re.split(r"\s*│\s*", line.strip("│ ")) for line in out.splitlines()
             if line.startswith("│")]
    assert [c[:2] for c in cells] == [["gate", "no_silent_drop"], ["gate", "gate_order"],
                                      ["tagmatch", "match_once"]]
    assert cells[0][2:] == ["proved 1.2s", "held 3.0s"]
    assert cells[1][2:] == ["proved 0.5s", "violated 0.8s"]
    assert cells[2][2:] == ["", "held 2.0s"]
    assert [h.strip() for h in re.split(r"┃", header)[1:-1]] == ["protocol", "invariant",
                                                                 "prove", "bmc"]
    # the bounds once per (protocol, method), an invariant's own after its group
    footer = out[out.index("gate prove:"):].splitlines()
    assert footer[:4] == ["gate prove: every reachable state", "gate bmc: depth 12",
                          "  gate_order: shortest trace: 7 steps", "tagmatch bmc: depth 9"]
    assert "gate gate_order violated (bmc): gate 2 before gate 1" in out


def test_the_footer_names_a_shared_other_bound_once():
    results = [Result(n, "tagmatch", "prove", "proved", b, 0.1) for n, b in (
        ("mpi_order", "unbounded; instance"), ("match_once", "unbounded; instance"),
        ("no_lost_message", "instance"), ("shadow_consistent", "instance"),
        ("eager_buffer_safety", "instance"), ("truncation_reported", "unbounded; instance"),
        ("rndv_buffer_safety", "shortest trace: 4 steps"))]
    assert report.bound_lines(results) == [
        "tagmatch prove: unbounded; instance",
        "  no_lost_message, shadow_consistent, eager_buffer_safety: instance",
        "  rndv_buffer_safety: shortest trace: 4 steps"]
