"""`verbspec envelope`: every invariant proved over the envelope, each condition refuted just
outside it with a trace that replays; `regions` is its alias."""

from __future__ import annotations

import json

import pytest

from verbspec.proofs.gate.abstraction import spec_counterexample
from verbspec.proofs.gate.envelope import CONDITIONS, LIMITS, limit_rows
from verbspec.proofs.gate.lemmas import LEMMAS
from verbspec.refimpl.cli.main import main, parser
from verbspec.spec.gate.system import INVARIANTS


@pytest.mark.slow
@pytest.mark.long
def test_the_envelope_table_proves_the_envelope_and_refutes_each_condition(tmp_path, capsys):
    code = main(["envelope", "--window-max", "8", "--json", "--trace-dir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert "2 <= window <= 8" in doc["envelope"]
    assert "drains and big gates" in doc["envelope"]
    proofs = [r for r in doc["rows"] if not r["condition"]]
    outside = [r for r in doc["rows"] if r["kind"] == "just outside"]
    limits = [r for r in doc["rows"] if r["kind"] == "limit"]
    assert {r["invariant"] for r in proofs} == set(INVARIANTS) | set(LEMMAS)
    assert all(r["verdict"] == "proved" for r in proofs)
    assert [r["condition"] for r in outside] == [c.name for c in CONDITIONS]
    for row, cond in zip(outside, CONDITIONS, strict=True):
        assert row["verdict"] == "violated" and row["invariant"] == cond.breaks
        assert "model admits every step: True" in row["counterexample"]
        assert main(["replay", row["trace"]]) == 1
    assert [r["condition"] for r in limits] == [lim.name for lim in LIMITS]
    assert all(r["verdict"] == r["expected"] for r in limits)
    capsys.readouterr()


BIG = [c for c in CONDITIONS if c.example.get("big_gates")]


@pytest.mark.parametrize("cond", BIG, ids=[c.name.split(" with")[0] for c in BIG])
def test_just_outside_each_big_gate_condition_the_spec_breaks_it_in_steps_the_model_admits(
        cond):
    # each condition the envelope adds for drains and big gates is necessary: the executable
    # spec's shortest run just outside it breaks the property, through a drain or a big-gate
    # window, and every step of it (call_big's size among the choices) is a step of the model
    run = spec_counterexample({"faults": 0, **cond.example}, cond.breaks, depth=60,
                              max_states=cond.max_states)
    assert run is not None and run.trace.violation == cond.breaks
    actions = {st.action for st in run.trace.steps}
    assert {"call_big", "big_header_read"} <= actions
    assert run.admitted


def test_the_envelope_conditions_hold_at_the_defaults_and_ds4s_cq_is_outside():
    # the defaults (cq_depth 515) are inside every condition; ds4's 512-entry CQ is outside
    # the faults condition only: a full big window (512) leaves no room for three faults
    import z3

    from verbspec.proofs.gate.envelope import envelope
    from verbspec.proofs.gate.parameters import param_terms, params_of
    from verbspec.spec.gate.system import build

    def inside(values, skip=None):
        prm = param_terms(params_of(build(values).params))
        return z3.is_true(z3.simplify(envelope(prm, skip=skip)))

    assert inside({})
    assert not inside({"cq_depth": 512})
    faults = next(c.name for c in CONDITIONS if c.name.endswith("with faults"))
    assert inside({"cq_depth": 512}, skip=faults)


def test_wire_loss_over_uc_is_a_limit_of_the_envelope_shown_by_a_trace():
    (uc,) = limit_rows(limits=[lim for lim in LIMITS if lim.breaks])
    assert uc.verdict == "violated" and uc.invariant == "chunk_alignment"
    assert uc.trace is not None and "lose" in {st.action for st in uc.trace.steps}


def test_a_window_bound_below_two_is_refused(capsys):
    assert main(["envelope", "--window-max", "1"]) == 3
    assert "--window-max" in capsys.readouterr().err


def test_regions_is_an_alias_of_envelope(capsys):
    assert main(["regions", "--window-max", "1"]) == 3
    assert capsys.readouterr().err == ("verbspec envelope: --window-max must be between 2 and "
                                       "2^20\n")
    assert "envelope (regions)" in parser().format_help()
