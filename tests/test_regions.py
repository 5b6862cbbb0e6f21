"""`verbspec regions`: every invariant proved over the region, each condition refuted just
outside it with a trace that replays."""

from __future__ import annotations

import json

import pytest

from verbspec.proofs.gate.lemmas import LEMMAS
from verbspec.proofs.gate.regions import CONDITIONS
from verbspec.refimpl.cli import main
from verbspec.spec.gate.system import INVARIANTS


@pytest.mark.slow
@pytest.mark.long
def test_the_region_table_proves_the_region_and_refutes_each_condition(tmp_path, capsys):
    code = main(["regions", "--window-max", "8", "--json", "--trace-dir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert "2 <= window <= 8" in doc["region"]
    proofs = [r for r in doc["rows"] if not r["condition"]]
    outside = [r for r in doc["rows"] if r["condition"]]
    assert {r["invariant"] for r in proofs} == set(INVARIANTS) | set(LEMMAS)
    assert all(r["verdict"] == "proved" for r in proofs)
    assert [r["condition"] for r in outside] == [c.name for c in CONDITIONS]
    for row, cond in zip(outside, CONDITIONS, strict=True):
        assert row["verdict"] == "violated" and row["invariant"] == cond.breaks
        assert "model admits every step: True" in row["counterexample"]
        assert main(["replay", row["trace"]]) == 1
    capsys.readouterr()


def test_a_window_bound_below_two_is_refused(capsys):
    assert main(["regions", "--window-max", "1"]) == 3
    assert "--window-max" in capsys.readouterr().err
