"""``verbspec replay`` checks the whole trace: every recorded state against the replayed one
(the first differing field named) and the recorded violation at the recorded step. Traces every
checker writes replay cleanly; doctored ones are refused, saying where they disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verbspec.proofs.report import EXIT_OK, EXIT_VIOLATION
from verbspec.proofs.traces import write_trace
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.cli.replay import disagreement
from verbspec.spec.itf import first_difference, state_body
from verbspec.spec.lts import InvariantViolation, replay
from verbspec.spec.tagmatch import system as ts

VARIANT = "silent-truncation"
INVARIANT = "truncation_reported"


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """The counterexample each tag-matching method writes for a variant."""
    out: dict[str, Path] = {}
    d = tmp_path_factory.mktemp("traces")
    for method in ("explore", "bmc", "prove"):
        assert main(["check", "--protocol", "tagmatch", "--method", method, "--variant",
                     VARIANT, "--trace-dir", str(d), "--quiet", "--examples", "200",
                     "--steps", "20"]) == EXIT_VIOLATION
        found = sorted(d.glob(f"tagmatch-{VARIANT}-{method}-{INVARIANT}-*.itf.json"))
        assert len(found) == 1, found
        out[method] = found[0]
    return out


@pytest.mark.parametrize("method", ["explore", "bmc", "prove"])
def test_each_checkers_trace_replays_to_its_violation(traces, method, capsys):
    capsys.readouterr()
    assert main(["replay", str(traces[method])]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert out.startswith("replayed ") and f"steps: {INVARIANT} violated: " in out
    assert "disagrees" not in out


def test_a_trace_without_violation_replays_clean(tmp_path, capsys):
    system = ts.build()
    state = system.initial()
    moves = []
    for _ in range(5):
        act, args = next((a, x) for a in system.actions for x in a.enabled(state))
        moves.append((act.name, dict(zip(act.params, args, strict=True))))
        state = act.apply(state, *args)[0]
    path = write_trace(replay(system, moves), tmp_path / "clean.itf.json")
    assert main(["replay", str(path)]) == EXIT_OK
    assert "5 steps" in capsys.readouterr().out


def doctor(src: Path, dst: Path, edit) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    dst.write_text(json.dumps(doc))
    return dst


def test_a_trace_whose_violating_step_was_removed_is_refused(traces, tmp_path, capsys):
    src = traces["bmc"]
    n = len(json.loads(src.read_text())["states"]) - 1
    cut = doctor(src, tmp_path / "cut.itf.json", lambda d: d["states"].pop())
    capsys.readouterr()
    assert main(["replay", str(cut)]) == EXIT_VIOLATION
    assert capsys.readouterr().out == (
        f"replay disagrees with the trace: trace says {INVARIANT} violated at step {n - 1}; "
        f"replay gives every invariant held through step {n - 1}\n")


def test_a_trace_with_an_edited_state_is_refused_naming_the_field(traces, tmp_path, capsys):
    src = traces["bmc"]

    def edit(doc):
        doc["states"][1]["released"][1] = True      # was false: nothing released yet

    bad = doctor(src, tmp_path / "edited.itf.json", edit)
    capsys.readouterr()
    assert main(["replay", str(bad)]) == EXIT_VIOLATION
    assert capsys.readouterr().out == (
        "replay disagrees with the trace: $.states[1].released[1]: trace says true at step 1; "
        "replay gives false\n")


def test_a_trace_naming_another_violation_is_refused(traces, tmp_path, capsys):
    src = traces["bmc"]
    n = len(json.loads(src.read_text())["states"]) - 1
    bad = doctor(src, tmp_path / "other.itf.json",
                 lambda d: d["#meta"].__setitem__("violation", "mpi_order"))
    capsys.readouterr()
    assert main(["replay", str(bad)]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert out.startswith(f"replay disagrees with the trace: trace says mpi_order violated at "
                          f"step {n}; replay gives {INVARIANT} violated at step {n}: ")


def test_a_trace_recording_no_violation_where_replay_finds_one_is_refused(traces, tmp_path,
                                                                          capsys):
    src = traces["explore"]
    n = len(json.loads(src.read_text())["states"]) - 1
    bad = doctor(src, tmp_path / "none.itf.json", lambda d: d["#meta"].pop("violation"))
    capsys.readouterr()
    assert main(["replay", str(bad)]) == EXIT_VIOLATION
    assert capsys.readouterr().out.startswith(
        f"replay disagrees with the trace: trace says no violation at step {n}; replay gives "
        f"{INVARIANT} violated at step {n}: ")


def test_a_violation_before_the_recorded_step_is_a_disagreement(traces):
    system = ts.build({}, (VARIANT,))
    doc = json.loads(traces["bmc"].read_text())
    from verbspec.proofs.traces import read_moves

    _, moves = read_moves(traces["bmc"])
    with pytest.raises(InvariantViolation) as err:
        replay(system, moves, (VARIANT,))
    trace = err.value.trace
    n = len(trace) - 1
    bodies = [state_body(s.state) for s in trace.steps]
    # as if the trace went on two more steps and recorded its violation there
    recorded = bodies + [bodies[-1], bodies[-1]]
    text = disagreement(trace, recorded, INVARIANT, err.value)
    assert text.startswith(f"trace says no violation (it records {INVARIANT} at step {n + 2}) "
                           f"at step {n}; replay gives {INVARIANT} violated at step {n}: ")
    assert disagreement(trace, bodies, INVARIANT, err.value) is None
    assert len(doc["states"]) == n + 1


def test_first_difference_names_the_path():
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ("$.a[1].b", 2, 3)
    assert first_difference([1, 2], [1]) == ("$[1]", 2, "(absent)")
    assert first_difference({"a": 1}, {"a": 1, "c": 2}) == ("$.c", "(absent)", 2)
    assert first_difference(1, True) == ("$", 1, True)
    # maps compare by key, in any order
    assert first_difference({"#map": [[1, "x"], [2, "y"]]},
                            {"#map": [[2, "y"], [1, "x"]]}) is None
    assert first_difference({"#map": [[1, "x"]]}, {"#map": [[1, "z"]]}) == ("$[1]", "x", "z")
