"""``verbspec conform --impl native --mutants``: the conformance suite against deliberately broken
builds of the native engines.

Each engine's source carries single-point mutants, each a small change behind
``#if VS_MUTANT == N``. A mutant is compiled in alone (a cffi build in a temporary directory)
and held to the spec by two checks, the cheaper first: for the gate, random runs at ds4's
defaults (whose window of 16 the sweep's small windows do not reach), then the every-edge sweep
of the protocol's small configurations; for tag matching, the sweep, then random runs of each of
its configurations. A mutant is killed by its first mismatch; one that passes both survives.
"""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from verbspec import native

NATIVE = Path(native.__file__).resolve().parent
GATE_RANDOM_RUNS = 200
TAG_RANDOM_RUNS = 200       # per configuration of the sweep
TAG_RANDOM_STEPS = 400


@dataclass(frozen=True)
class MutantResult:
    protocol: str
    mutant: int
    killed: bool
    by: str | None              # "exhaustive" | "random"
    mismatch: str | None
    seconds: float


def numbers(source: Path) -> list[int]:
    """The mutants a source declares."""
    return sorted({int(n) for n in re.findall(r"VS_MUTANT [!=]= (\d+)",
                                              source.read_text(encoding="utf-8"))})


def _build_gate(n: int, tmp: Path) -> ModuleType:
    from verbspec.native.build_gate import FLAGS, builder

    name = f"_gate_engine_mutant{n}"
    path = builder(name, (*FLAGS, f"-DVS_MUTANT={n}"), absolute=True).compile(
        tmpdir=str(tmp), verbose=False)
    return native.load_build(path, name)


def _build_tag(n: int, tmp: Path) -> ModuleType:
    from verbspec.native.build_tag import builder

    name = f"_tag_engine_mutant{n}"
    path = builder(name, extra_compile_args=(f"-DVS_MUTANT={n}",),
                   root=NATIVE.parent).compile(tmpdir=str(tmp), verbose=False)
    return native.load_build(path, name)


def _kill_gate(mod: ModuleType) -> tuple[str, Any] | None:
    from verbspec.refimpl.bindings.native_gate import factory
    from verbspec.refimpl.conformance.gate import conform, conform_every_edge
    from verbspec.spec.gate.system import build

    rep = conform(build({}), factory(mod), "mutant", sequences=GATE_RANDOM_RUNS, steps=3000)
    if rep.mismatch is not None:
        return "random", rep.mismatch
    rep = conform_every_edge(factory(mod), "mutant")
    return ("exhaustive", rep.mismatch) if rep.mismatch is not None else None


def _kill_tag(mod: ModuleType) -> tuple[str, Any] | None:
    from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
    from verbspec.refimpl.conformance.tagmatch import (
        SWEEP_CONFIGS,
        TagmatchHarness,
        conform_every_edge,
    )
    from verbspec.spec.tagmatch.system import build

    def factory(cfg: Any) -> NativeTagEngine:
        return NativeTagEngine(cfg, mod)

    rep = conform_every_edge(factory, "mutant")
    if rep.mismatch is not None:
        return "exhaustive", rep.mismatch
    for values in SWEEP_CONFIGS:
        h = TagmatchHarness(build(values), factory)
        for seed in range(TAG_RANDOM_RUNS):
            run = h.run(random.Random(seed), TAG_RANDOM_STEPS)
            if run.mismatch is not None:
                return "random", run.mismatch
    return None


ENGINES: dict[str, tuple[Path, Callable[[int, Path], ModuleType],
                         Callable[[ModuleType], tuple[str, Any] | None]]] = {
    "gate": (NATIVE / "gate_engine.c", _build_gate, _kill_gate),
    "tagmatch": (NATIVE / "tag_engine.c", _build_tag, _kill_tag),
}


def run_mutants(protocols: Sequence[str],
                progress: Callable[[str], None] | None = None) -> list[MutantResult]:
    """Every mutant of each protocol's native engine, in turn."""
    out = []
    for proto in protocols:
        source, build, kill = ENGINES[proto]
        for n in numbers(source):
            if progress is not None:
                progress(f"{proto} mutant {n}")
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="verbspec-mutant-") as tmp:
                found = kill(build(n, Path(tmp)))
            out.append(MutantResult(proto, n, found is not None, found and found[0],
                                    found and str(found[1]),
                                    round(time.perf_counter() - t0, 1)))
    return out


def summary(results: list[MutantResult], seconds: float) -> dict[str, Any]:
    return {"mutants": len(results), "killed": sum(r.killed for r in results),
            "survivors": [f"{r.protocol}:{r.mutant}" for r in results if not r.killed],
            "seconds": round(seconds, 1), "results": [asdict(r) for r in results]}
