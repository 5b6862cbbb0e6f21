"""conform --impl native --mutants: every single-point mutant of the native engines is built
alone and killed by the conformance suite. The mutants are patches kept apart from the shipped
engines (native/testing/mutant_patches/): each still applies to its engine's current source
and builds, and the engines themselves carry no mutant code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import native_module, require

from verbspec import native
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import mutants

# the mutants each engine has had since they were written into its source, by number
NUMBERS = {"gate": list(range(1, 14)), "tagmatch": list(range(1, 11))}


def test_each_engine_has_its_mutants():
    assert {proto: mutants.numbers(proto) for proto in NUMBERS} == NUMBERS
    assert len(mutants.mutants()) == sum(map(len, NUMBERS.values()))
    for m in mutants.mutants():
        assert m.what.startswith(f"{m.protocol} mutant {m.number}: "), m.patch


@pytest.mark.parametrize("m", mutants.mutants(), ids=lambda m: m.name)
def test_every_patch_applies_to_the_current_source_and_compiles(m, tmp_path):
    """An edit of an engine that moves a mutant's lines (or changes them) fails here, naming
    the patch and its hunk; the patched source must also still compile."""
    source = native.engine(m.protocol).source
    mutated = mutants.patched(m)
    assert mutated != source.read_text(encoding="utf-8")
    cc = shutil.which(os.environ.get("CC", "cc"))
    require("native", None if cc else "no C compiler (cc) on PATH")
    path = mutants.write_patched(m, tmp_path)
    done = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                           f"-I{source.parent}", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_shipped_engines_carry_no_mutant_code():
    for proto in NUMBERS:
        text = native.engine(proto).source.read_text(encoding="utf-8")
        assert "VS_MUTANT" not in text and "mutant" not in text.lower(), proto


def test_a_patch_that_no_longer_applies_says_which_hunk_and_why():
    m = mutants.mutant("gate", 1)
    patch = m.patch.read_text(encoding="utf-8")
    source = native.engine("gate").source.read_text(encoding="utf-8")
    removed = next(ln[1:] for ln in patch.splitlines()
                   if ln.startswith("-") and not ln.startswith("---"))
    with pytest.raises(mutants.PatchError, match=r"hunk 1's lines \(line \d+ when it was made\) "
                                                 r"are not in the source"):
        mutants.apply(patch, source.replace(removed, removed + " /* edited */"))
    twice = source + "\n".join(ln[1:] for ln in patch.splitlines()
                               if ln[:1] in " -" and not ln.startswith("---")) + "\n"
    with pytest.raises(mutants.PatchError, match="are in it 2 times"):
        mutants.apply(patch, twice)
    with pytest.raises(mutants.PatchError, match="has no mutant 14"):
        mutants.mutant("gate", 14)


def test_a_malformed_patch_is_refused_by_name():
    with pytest.raises(mutants.PatchError, match="expected one file's unified diff"):
        mutants.apply("gate mutant 0: nothing\n", "int x;\n", "x.diff")
    with pytest.raises(mutants.PatchError, match="expected a hunk"):
        mutants.apply("--- a/f.c\n+++ b/f.c\nnot a hunk\n", "int x;\n", "x.diff")
    done = mutants.apply("--- a/f.c\n+++ b/f.c\n@@ -1,2 +1,2 @@\n int x;\n-int y;\n+int z;\n",
                         "int w;\nint x;\nint y;\n")
    assert done == "int w;\nint x;\nint z;\n"


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
