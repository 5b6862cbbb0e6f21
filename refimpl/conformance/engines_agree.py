"""The spec held against the independent engines in the main job: ``verbspec check`` runs a
short lockstep conformance of each protocol's spec against its C engine and its Python engine,
each a second reading of the protocol written apart from the spec, and reports a disagreement
as a violation naming the step. A spec that changed behaviour (a slot mapping off by one, a
check removed) is caught here even where its own invariants and proofs, which read the same
spec, are blind to it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verbspec.proofs.report import Result
from verbspec.proofs.traces import save_counterexample
from verbspec.refimpl.conformance import gate as conformance_gate
from verbspec.refimpl.conformance import tagmatch as conformance_tagmatch
from verbspec.spec import protocols

METHOD = "conform"
# the engines, by the name the conform command gives them
ENGINES = ("native", "refimpl")


@dataclass(frozen=True)
class Budget:
    """Random lockstep runs per engine: enough to reach every phase of the defaults, small
    beside the proofs (docs/benchmarks.md, "The main job")."""

    runs: int
    steps: int


BUDGETS = {"gate": Budget(10, 2000), "tagmatch": Budget(20, 3000)}
HARNESS = {"gate": conformance_gate, "tagmatch": conformance_tagmatch}


def row_name(engine: str) -> str:
    """The summary row of one engine's agreement with the spec."""
    return f"{engine}_engine_agrees"


def engine_rows(protocol: str, values: dict[str, Any], variants: Sequence[str],
                trace_dir: Path, progress: Callable[[str], None] | None = None
                ) -> tuple[list[Result], list[dict[str, str]]]:
    """One row per engine (held, or violated with the first mismatching step and its trace),
    and the engines left out and why (not built; a variant, which the engines do not
    implement as the base protocol), each naming its row."""
    if variants:
        why = (f"variants {', '.join(variants)}: the engines implement the base protocol "
               f"(verbspec conform --impl variant:NAME holds the reference engine's variants)")
        return [], [{"protocol": protocol, "method": METHOD, "invariant": row_name(e),
                     "reason": why} for e in ENGINES]
    mod, budget = HARNESS[protocol], BUDGETS[protocol]
    rows: list[Result] = []
    skipped: list[dict[str, str]] = []
    for engine in ENGINES:
        try:
            factory = mod.resolve(engine)
        except ValueError as e:
            skipped.append({"protocol": protocol, "method": METHOD,
                            "invariant": row_name(engine), "reason": f"the {engine} engine: {e}"})
            continue
        system = protocols.load(protocol).build(values, ())
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"sequences": budget.runs, "steps": budget.steps, "seed": 0,
                              "shrink_seconds": 0.0, "progress": progress}
        rep = mod.conform(system, factory, engine, **kw)
        seconds = time.perf_counter() - t0
        bound = (f"{rep.sequences} lockstep runs, {rep.steps:,} steps, "
                 f"{len(rep.actions)} of {rep.actions_total} actions")
        coverage = {"actions": dict(sorted(rep.actions.items()))}
        if rep.mismatch is None:
            rows.append(Result(row_name(engine), protocol, METHOD, "held", bound, seconds,
                               coverage=coverage))
            continue
        path = (save_counterexample(rep.trace, trace_dir, METHOD)
                if rep.trace is not None and rep.trace.violation is not None else None)
        rows.append(Result(row_name(engine), protocol, METHOD, "violated", bound, seconds,
                           path, f"the spec and the {engine} engine disagree: {rep.mismatch}",
                           coverage))
    return rows, skipped
