"""Mutation run of the native gate engine: each single-point mutant of native/gate_engine.c
(``#if VS_MUTANT == N``) compiled in alone, as a cffi module in a temporary directory, and held
to the spec by the every-edge sweep (``conform --exhaustive``) until its first mismatch.

Not collected (the file name does not start with ``test_``). Run it as a script,
``python tests/mutants_gate.py [N ...]`` (default: every mutant in the source); it prints one
JSON line per mutant (killed, the action, step and field of the mismatch, seconds) and a summary
``{"mutants", "killed", "survivors", "seconds"}``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from verbspec.refimpl.conformance import conform_every_edge
from verbspec.refimpl.native_gate import factory

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "native" / "gate_engine.c"


def mutants() -> list[int]:
    return sorted({int(n) for n in re.findall(r"VS_MUTANT [!=]= (\d+)", SOURCE.read_text())})


def build(n: int, tmp: Path):
    sys.path.insert(0, str(ROOT / "native"))
    try:
        from build_gate import builder
    finally:
        sys.path.remove(str(ROOT / "native"))
    name = f"vs_gate_mutant_{n}"
    builder(name, ("-std=c11", "-O2", f"-DVS_MUTANT={n}"), absolute=True).compile(
        tmpdir=str(tmp))
    sys.path.insert(0, str(tmp))
    return importlib.import_module(name)


def run(n: int) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        mod = build(n, Path(tmp))
        rep = conform_every_edge(factory(mod), f"mutant {n}")
    m = rep.mismatch
    return {"mutant": n, "killed": m is not None, "action": m and m.action,
            "step": m and m.step, "what": m and m.what, "configs": rep.sweep["configs"],
            "edges": rep.sweep["edges"], "seconds": round(time.perf_counter() - t0, 1)}


def main(which: list[int]) -> dict:
    t0 = time.perf_counter()
    rows = []
    for n in which:
        rows.append(run(n))
        print(json.dumps(rows[-1]), flush=True)
    killed = sum(r["killed"] for r in rows)
    return {"mutants": len(rows), "killed": killed,
            "survivors": [r["mutant"] for r in rows if not r["killed"]],
            "seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":
    print(json.dumps(main([int(a) for a in sys.argv[1:]] or mutants())))
