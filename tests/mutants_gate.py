"""Mutation run of the native gate engine: each single-point mutant of native/gate_engine.c
(``#if VS_MUTANT == N``) compiled in alone, as a cffi module in a temporary directory, and held
to the spec by the every-edge sweep (``conform --exhaustive``) until its first mismatch, then,
if it passed the sweep, by random runs at ds4's defaults (``conform``).

Not collected (the file name does not start with ``test_``). Run it as a script,
``python tests/mutants_gate.py [N ...]`` (default: every mutant in the source); it prints one
JSON line per mutant (killed, by which mode, the action, step and field of the mismatch,
seconds) and a summary ``{"mutants", "killed", "survivors", "seconds"}``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from verbspec.refimpl.conformance import conform, conform_every_edge
from verbspec.refimpl.native_gate import factory
from verbspec.spec.gate.system import build as build_system

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "native" / "gate_engine.c"
RANDOM = 200        # random runs after a sweep the mutant passed (conform's default)


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
        how = "exhaustive"
        if rep.mismatch is None:
            # the sweep's windows are small: random runs at ds4's defaults (window 16)
            rep = conform(build_system({}), factory(mod), f"mutant {n}", sequences=RANDOM,
                          steps=3000)
            how = "random"
    m = rep.mismatch
    return {"mutant": n, "killed": m is not None, "by": how if m else None,
            "action": m and m.action, "step": m and m.step, "what": m and m.what,
            "seconds": round(time.perf_counter() - t0, 1)}


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
