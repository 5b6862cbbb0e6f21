"""``verbspec check`` stopped by a signal (a CI's SIGTERM, or Ctrl-C) still reports what it
finished: the rows done so far, marked incomplete, exit 2 (or 1 when a violation was among
them), and no prover left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_prints_the_rows_finished_marked_incomplete_and_exits_2(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # explore is short here; bmc after it runs far longer than the signal takes to come
    p = subprocess.Popen([sys.executable, "-m", "verbspec.refimpl.cli.main", "check",
                          "--protocol", "tagmatch", "--examples", "2", "--json",
                          "--trace-dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stderr is not None
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "explore: done in" in line:
            p.send_signal(sig)
            break
    out, err = p.communicate(timeout=600)
    assert p.returncode == 2, "".join(seen) + err
    doc = json.loads(out)
    assert doc["incomplete"].startswith(f"interrupted by {sig.name} after ")
    assert {r["method"] for r in doc["results"]} == {"explore"}
    assert all(r["verdict"] == "held" for r in doc["results"]) and doc["results"]
