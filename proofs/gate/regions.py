"""Proofs over a parameter region (symbolic window, chunks, depths, slot period) and, for each
condition of the region, the violation just outside it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import z3

from verbspec.proofs.gate.abstraction import spec_counterexample
from verbspec.proofs.gate.bmc import REGION_RUNGS, bmc, replay_on_spec
from verbspec.proofs.gate.induction import houdini
from verbspec.proofs.gate.lemmas import LEMMAS
from verbspec.proofs.gate.parameters import domain, param_terms, params_of
from verbspec.proofs.gate.properties import CONSEQUENCES, PROPERTIES
from verbspec.proofs.gate.terms import fresh_params, times_c, z64
from verbspec.proofs.gate.vocabulary import VARIANT_FLAGS, Params
from verbspec.spec.lts import Trace


@dataclass(frozen=True)
class Condition:
    """One assumption of a region, with the property that fails just outside it."""

    name: str
    holds: Callable[[Params], z3.BoolRef]
    outside: Callable[[Params], z3.BoolRef]     # the boundary point just outside
    breaks: str
    example: dict[str, int]     # executable-spec parameters just outside, for replay
    max_faults: int = 0         # fault actions the shortest run just outside may take
    max_states: int = 600_000   # breadth-first budget for that run


def _c(prm: Params, k: int) -> z3.BitVecRef:
    return z3.Extract(31, 0, times_c(prm, z3.BitVecVal(k, 64)))


CONDITIONS: tuple[Condition, ...] = (
    Condition("window >= 2", lambda q: z3.UGE(q.window, 2), lambda q: q.window == 1,
              "no_silent_drop", {"window": 1}),
    Condition("rq_depth >= window*chunks",
              lambda q: z3.UGE(z64(q.rq_depth), times_c(q, q.window)),
              lambda q: z64(q.rq_depth) + 1 == times_c(q, q.window),
              "queue_bounds", {"rq_depth": 31}),
    Condition("sq_depth >= 2*chunks", lambda q: z3.UGE(q.sq_depth, _c(q, 2)),
              lambda q: q.sq_depth + 1 == _c(q, 2), "queue_bounds", {"sq_depth": 3}),
    Condition("cq_depth >= 4*chunks", lambda q: z3.UGE(q.cq_depth, _c(q, 4)),
              lambda q: q.cq_depth + 1 == _c(q, 4), "queue_bounds",
              {"window": 2, "cq_depth": 7}),
    # two warm-up leftovers and an injected error completion on top of a full decode CQ; the
    # shortest run needs all three faults, hence the larger breadth-first budget
    Condition("cq_depth >= 4*chunks + 3 with faults",
              lambda q: z3.Implies(q.faults, z3.UGE(q.cq_depth, _c(q, 4) + 3)),
              lambda q: z3.And(q.faults, q.cq_depth + 1 == _c(q, 4) + 3),
              "queue_bounds", {"window": 2, "vec_bytes": 16384, "cq_depth": 6, "faults": 1},
              max_faults=3, max_states=1_200_000),
    Condition("chain_max >= chunks", lambda q: z3.UGE(z64(q.chain_max), q.chunks),
              lambda q: z64(q.chain_max) + 1 == q.chunks, "queue_bounds", {"chain_max": 1}),
    Condition("slot period >= 2 (gates_per_token >= 2, or 0 with n_slots >= 2)",
              lambda q: z3.UGE(q.slot_period, 2), lambda q: q.slot_period == 1, "slot_exclusive",
              {"gates_per_token": 1}),
)

def region(prm: Params, *, window_max: int | None = 256, skip: str | None = None
           ) -> z3.BoolRef:
    conds = [c.holds(prm) for c in CONDITIONS if c.name != skip]
    conds += [z3.Not(getattr(prm, f)) for f in VARIANT_FLAGS]          # the base protocol
    conds.append(z3.Not(prm.big_gates))                                    # decode gates only
    if window_max is not None:
        conds.append(z3.ULE(prm.window, window_max))
    return z3.And(domain(prm), *conds)


def region_text(window_max: int | None = 256) -> str:
    w = f"2 <= window <= {window_max}" if window_max else "window >= 2"
    rest = ", ".join(c.name for c in CONDITIONS[1:])
    return (f"{w}, chunks in {{1, 2}}, {rest}, any workload (ops < 2^61), faults 0 or 1 "
            f"(decode gates, the base protocol)")


@dataclass(frozen=True)
class RegionRow:
    """A proof over the region, or, for a condition of it, the violation just outside."""

    invariant: str
    region: str
    verdict: str
    seconds: float
    counterexample: str = ""    # for a necessary condition: the run just outside it
    condition: str = ""         # the condition this row shows necessary ("" for a proof row)
    trace: Trace | None = None  # the executable spec's shortest run just outside


def region_table(*, window_max: int | None = 256,
                 progress: Callable[[str], None] | None = None) -> list[RegionRow]:
    """Every invariant over the whole region (symbolic window, chunks, depths, slot period),
    then, for each condition of the region, a counterexample just outside it: the shortest run
    of the executable spec (breadth-first) that breaks the property the condition guards, with
    every step checked against the model; and the model's own BMC, to the last rung where the
    spec's run is short enough for it (the model's run replayed on the spec), else to the first
    (the model has no shorter run either)."""
    from verbspec.spec.gate.system import build

    # the region is decode-only and the base protocol
    prm = replace(fresh_params(), big_gates=z3.BoolVal(False),
                  depth_mismatch=z3.BoolVal(False))
    text = region_text(window_max)
    found = houdini(prm, lambda q: region(q, window_max=window_max), (1, 2),
                    progress=progress)
    rows = [RegionRow(n, text, found[n].verdict, found[n].seconds)
            for n in (*PROPERTIES, *CONSEQUENCES, *LEMMAS)]
    for cond in CONDITIONS:
        t0 = time.perf_counter()
        where = f"outside: not ({cond.name}), e.g. {cond.example}"
        values = {"faults": 0, "big_gates": 0, **cond.example}
        run = spec_counterexample(values, cond.breaks, depth=60, max_states=cond.max_states,
                                  max_faults=cond.max_faults)
        notes, verdict = [], "inconclusive"
        if run is not None:
            kind = (f"shortest run with at most {cond.max_faults} faults"
                    if values["faults"] else "shortest fault-free run")
            notes.append(f"spec: {kind}, {run.moves} moves: {run.trace.message}; model "
                         f"admits every step: {run.admitted}")
            verdict = "violated" if run.admitted else "inconclusive"
        system = build({**values, "big_gates": 0})
        point = param_terms(params_of(system.params))
        # a run past the last rung cannot be found by the model's BMC: a shallow rung still
        # checks the model has no shorter run than the spec's
        rungs = (REGION_RUNGS if run is None or run.moves <= REGION_RUNGS[-1]
                 else REGION_RUNGS[:1])
        ce = bmc(point, domain(point), cond.breaks, rungs)
        if ce is not None:
            hit = replay_on_spec(system, ce.moves)
            notes.append(f"model BMC: run of {ce.depth} moves (unrolling {ce.bound}), on the "
                         f"spec: {hit[1] if hit else 'not confirmed'}")
        else:
            notes.append(f"model BMC: no run of <= {rungs[-1]} steps")
        rows.append(RegionRow(cond.breaks, where, verdict, time.perf_counter() - t0,
                              "; ".join(notes), cond.name, run.trace if run else None))
        if progress:
            progress(f"{cond.name}: {verdict}")
    return rows
