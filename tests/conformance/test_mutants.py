"""conform --impl native --mutants: every single-point mutant of the native engines is built
alone and killed by the conformance suite."""

from __future__ import annotations

import json

import pytest
from conftest import native_module

from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import mutants


def test_each_engine_declares_its_mutants():
    for proto, (source, _, _) in mutants.ENGINES.items():
        assert len(mutants.numbers(source)) >= 10, proto
    assert sum(len(mutants.numbers(s)) for s, _, _ in mutants.ENGINES.values()) >= 16


@pytest.mark.parametrize("argv, message", [
    (["--impl", "refimpl"], "it needs --impl native, not refimpl"),
    (["--impl", "native", "--exhaustive"], "no --exhaustive or --param"),
])
def test_mutants_refuse_what_they_cannot_run(argv, message, capsys):
    assert main(["conform", "--mutants", *argv]) == 3
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_every_gate_mutant_is_killed(capsys):
    """(The tag engine's mutants are killed one by one in test_native_tag.py.)"""
    native_module("gate")
    assert main(["conform", "--impl", "native", "--protocol", "gate", "--mutants",
                 "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["killed"] == out["mutants"] >= 10 and out["survivors"] == []
