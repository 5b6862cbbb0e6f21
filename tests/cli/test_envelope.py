"""`verbspec envelope`: every invariant proved over the envelope, each condition refuted just
outside it with a trace that replays; `regions` is its alias."""

from __future__ import annotations

import json

import pytest

from verbspec.proofs.gate.envelope import CONDITIONS, LIMITS
from verbspec.proofs.gate.lemmas import LEMMAS
from verbspec.proofs.traces import read_moves
from verbspec.refimpl.cli.main import main, parser
from verbspec.spec.gate.system import INVARIANTS


def envelope(capsys, *args: str) -> tuple[int, dict]:
    code = main(["envelope", "--json", "--quiet", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.long
def test_every_invariant_is_proved_over_the_envelope(capsys):
    """The whole envelope at the command's window bound, so the defaults are in it
    (test_the_envelope_conditions_hold_at_the_defaults...): this is also the suite's proof of
    the base protocol at the defaults, big gates and faults in the workload."""
    code, doc = envelope(capsys, "--part", "proofs")
    assert code == 0 and doc["parts"] == ["proofs"]
    assert "2 <= window <= 256" in doc["envelope"]
    assert "drains and big gates" in doc["envelope"]
    assert {r["kind"] for r in doc["rows"]} == {"property", "strengthening"}
    assert {r["invariant"] for r in doc["rows"]} == set(INVARIANTS) | set(LEMMAS)
    assert all(r["verdict"] == "proved" for r in doc["rows"])


@pytest.mark.slow
@pytest.mark.long
def test_each_condition_is_refuted_just_outside_and_each_limit_shown(tmp_path, capsys):
    code, doc = envelope(capsys, "--part", "limits", "--part", "outside",
                         "--trace-dir", str(tmp_path))
    assert code == 0 and doc["parts"] == ["outside", "limits"]
    outside = [r for r in doc["rows"] if r["kind"] == "just outside"]
    limits = [r for r in doc["rows"] if r["kind"] == "limit"]
    assert len(outside) + len(limits) == len(doc["rows"])
    assert [r["condition"] for r in outside] == [c.name for c in CONDITIONS]
    for row, cond in zip(outside, CONDITIONS, strict=True):
        assert row["verdict"] == "violated" and row["invariant"] == cond.breaks
        assert "model admits every step: True" in row["counterexample"]
        # the model's own BMC: no shorter run, and a run it finds is one the spec takes
        assert "not confirmed" not in row["counterexample"]
        assert "model BMC: no answer" not in row["counterexample"]
        if cond.name.startswith("rq_depth"):
            assert "model BMC: run of " in row["counterexample"], row["counterexample"]
        _, moves = read_moves(row["trace"])
        if cond.example.get("big_gates"):
            # a condition the envelope adds for drains and big gates: the run goes through a
            # drain or a big-gate window
            assert {"call_big", "big_header_read"} <= {name for name, _ in moves}
        assert main(["replay", row["trace"]]) == 1
    assert [r["condition"] for r in limits] == [lim.name for lim in LIMITS]
    assert all(r["verdict"] == r["expected"] for r in limits)
    # UC has no recovery from a lost chunk: the trace loses one
    (uc,) = [r for r in limits if r["condition"] == "wire loss over UC"]
    assert uc["invariant"] == "chunk_alignment"
    assert "lose" in {name for name, _ in read_moves(uc["trace"])[1]}
    capsys.readouterr()


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


def test_a_window_bound_below_two_or_an_unknown_part_is_refused(capsys):
    assert main(["envelope", "--window-max", "1"]) == 3
    assert "--window-max" in capsys.readouterr().err
    assert main(["envelope", "--part", "everything"]) == 3
    assert "--part" in capsys.readouterr().err
    assert main(["envelope", "--solver-limit", "0"]) == 3
    assert capsys.readouterr().err == ("verbspec envelope: --solver-limit must be between 1 "
                                       "and 4,294,967,295 (z3 counts its resources in 32 "
                                       "bits)\n")
    assert main(["envelope", "--solver-limit", str(2**32)]) == 3
    assert "--solver-limit must be between 1" in capsys.readouterr().err


def test_regions_is_an_alias_of_envelope(capsys):
    assert main(["regions", "--window-max", "1"]) == 3
    assert capsys.readouterr().err == ("verbspec envelope: --window-max must be between 2 and "
                                       "2^20\n")
    assert "envelope (regions)" in parser().format_help()
