"""`verbspec bench search`: the fixed searches of both protocols, their figures as a table or
JSON, and the same searches at a git revision beside the current tree (no time asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from verbspec.proofs.report import EXIT_INPUT, EXIT_OK
from verbspec.refimpl.cli import bench
from verbspec.refimpl.cli.main import main


def test_each_search_reports_its_counts_and_speed(capsys):
    assert main(["bench", "search", "--max-states", "150", "--json"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["reps"] == 1 and out["against"] is None and out["max_states"] == 150
    assert [r["search"] for r in out["rows"]] == [c.name for c in bench.SEARCH_CASES]
    assert {r["protocol"] for r in out["rows"]} == {"gate", "tagmatch"}
    for row in out["rows"]:
        cur = row["current"]
        assert cur["states"] == 150 and cur["cut"] and not cur["exhausted"]
        assert cur["transitions"] >= cur["states"] - 1
        assert cur["cpu_s"] >= 0 and cur["states_per_cpu_s"] > 0
        assert "against" not in row and "ratio" not in row


def test_the_table_names_the_figures(capsys):
    assert main(["bench", "search", "--max-states", "50"]) == EXIT_OK
    out = capsys.readouterr().out
    for column in ("states", "transitions", "CPU s", "states / CPU-s"):
        assert column in out
    assert "tagmatch" in out and "gate" in out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_against_a_revision_runs_both_trees_alternating(capsys):
    root = bench.tree_root()
    if subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("the tree is not a git checkout")
    before = subprocess.run(["git", "-C", str(root), "worktree", "list"], capture_output=True,
                            text=True).stdout
    code = main(["bench", "search", "--max-states", "100", "--reps", "2", "--against", "HEAD",
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK, out
    assert out["reps"] == 2 and out["against"] == "HEAD"
    for row in out["rows"]:
        assert row["same_counts"] and row["ratio"] > 0
        assert row["current"]["states"] == row["against"]["states"] == 100
    # the revision's worktree is gone again
    after = subprocess.run(["git", "-C", str(root), "worktree", "list"], capture_output=True,
                           text=True).stdout
    assert after == before


def test_bad_arguments_are_invalid_input(capsys):
    assert main(["bench", "search", "--reps", "0"]) == EXIT_INPUT
    assert main(["bench", "search", "--max-states", "0"]) == EXIT_INPUT
    assert main(["bench", "search", "--max-states", "10", "--against",
                 "no-such-revision-of-verbspec"]) == EXIT_INPUT
    assert "git worktree add failed" in capsys.readouterr().err
