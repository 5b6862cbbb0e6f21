"""The spec held against the independent engines in the main job: ``verbspec check`` runs a
short lockstep conformance of each protocol's spec against its C engine and its Python engine,
each a second reading of the protocol written apart from the spec, and reports a disagreement
as a violation naming the step. A spec that changed behaviour (a slot mapping off by one, a
check removed) is caught here even where its own invariants and proofs, which read the same
spec, are blind to it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verbspec.proofs.report import Result
from verbspec.proofs.traces import save_counterexample
from verbspec.refimpl.conformance import gate as conformance_gate
from verbspec.refimpl.conformance import tagmatch as conformance_tagmatch
from verbspec.spec import protocols
from verbspec.spec.params import parse_assignments

METHOD = "conform"
# the engines, by the name the conform command gives them
ENGINES = ("native", "refimpl")


@dataclass(frozen=True)
class Budget:
    """Random lockstep runs per engine: enough to reach every phase of the defaults, small
    beside the proofs (docs/benchmarks.md, "The main job")."""

    runs: int
    steps: int
    fault_rate: float | None = None     # None: the harness's own


BUDGETS = {"gate": Budget(5, 3000), "tagmatch": Budget(20, 3000)}
HARNESS = {"gate": conformance_gate, "tagmatch": conformance_tagmatch}
# at the defaults, the modes the defaults leave out (spec/gate/modes.py,
# spec/tagmatch/modes.py) are run too, so that a spec changed only there is met: verify
# blocks, an RC queue pair, refused posts and failed polls, wire loss, rank 1 built with
# another window; two communicators, senders and tags
MODES: dict[str, tuple[dict[str, Any], ...]] = {
    "gate": ({}, {"verify_blocks": 1}, {"qp_type": "rc"}, {"post_failures": 1},
             {"wire_loss": 1}, {"rank1_window": 8}),
    "tagmatch": ({}, {"comms": 2, "senders": 2, "tags": 2}),
}
# a mode whose faults end a run where they strike is run as more, shorter runs: a refused post
# is one fault among nine, and a run's swarm of faults often leaves it out (by the parameter
# that turns the mode on)
MODE_BUDGETS: dict[str, Budget] = {"post_failures": Budget(30, 300, fault_rate=0.05)}


def _label(mode: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mode.items()) or "as given"


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
    defaults = parse_assignments(protocols.load(protocol).PARAMS, [])
    at_defaults = {k: v for k, v in values.items() if defaults.get(k) != v} == {}
    modes = MODES[protocol] if at_defaults else ({},)
    for engine in ENGINES:
        try:
            factory = mod.resolve(engine)
        except ValueError as e:
            skipped.append({"protocol": protocol, "method": METHOD,
                            "invariant": row_name(engine), "reason": f"the {engine} engine: {e}"})
            continue
        t0, runs, steps, actions = time.perf_counter(), 0, 0, Counter()
        names: set[str] = set()
        configs: list[dict[str, Any]] = []
        found = None
        for mode in modes:
            system = protocols.load(protocol).build({**values, **mode}, ())
            runs_of = next((MODE_BUDGETS[k] for k in mode if k in MODE_BUDGETS), budget)
            rate = {} if runs_of.fault_rate is None else {"fault_rate": runs_of.fault_rate}
            rep = mod.conform(system, factory, engine, sequences=runs_of.runs,
                              steps=runs_of.steps, seed=0, shrink_seconds=0.0,
                              progress=progress, **rate)
            runs, steps = runs + rep.sequences, steps + rep.steps
            names |= {a.name for a in system.actions}
            actions.update(rep.actions)
            configs.append({"values": mode, "actions": dict(sorted(rep.actions.items()))})
            if rep.mismatch is not None:
                found = (mode, rep)
                break
        seconds = time.perf_counter() - t0
        bound = (f"{runs} lockstep runs ({'; '.join(_label(m) for m in modes)}), {steps:,} "
                 f"steps, "
                 f"{len(actions)} of {len(names)} actions")
        # each configuration's actions: a mode is reached by a run of a configuration with it
        coverage = {"actions": dict(sorted(actions.items())), "configs": configs}
        if found is None:
            rows.append(Result(row_name(engine), protocol, METHOD, "held", bound, seconds,
                               coverage=coverage))
            continue
        mode, rep = found
        path = (save_counterexample(rep.trace, trace_dir, METHOD)
                if rep.trace is not None and rep.trace.violation is not None else None)
        rows.append(Result(row_name(engine), protocol, METHOD, "violated", bound, seconds,
                           path, f"the spec and the {engine} engine disagree at "
                                 f"{_label(mode)}: {rep.mismatch}", coverage))
    return rows, skipped
