"""Proofs of the tag-matching protocol: an explicit-state fixpoint of one instance, and, by
induction in z3 for every list length and envelope value, the software engine's
``mpi_order``, ``non_overtaking``, ``match_once``, ``truncation_reported`` and its half of
``no_lost_message``. Each invariant gets one row saying both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from verbspec.proofs.report import DRIFTED, Obligation, Result
from verbspec.proofs.search import bounded_search, known_fixpoint
from verbspec.proofs.solving import Limit, limit_of
from verbspec.proofs.tagmatch import matching, relations
from verbspec.proofs.tagmatch.lemma import prove_no_matching_pair
from verbspec.proofs.traces import save_counterexample
from verbspec.spec.tagmatch.system import INVARIANTS, PROTOCOL, build


def prove(values: Mapping[str, Any] | None = None, variants: Iterable[str] = (), *,
          progress: Any = None, max_states: int = 3_000_000, trace_dir: Any = None,
          solver_limit: int | None = None) -> list[Result]:
    """Explicit-state proof: breadth-first search to a fixpoint over every reachable state of
    this instance. When the reachable set is exhausted without a violation, every invariant is
    proved for this instance at every depth (not for other parameter values). A violation
    makes that invariant "violated" (its trace written to ``trace_dir``, if given) and leaves
    the rest "inconclusive"; a state budget cut leaves all "inconclusive". Under MPI's order
    (no order variant), the invariants proved for the software engine by induction say so in
    their rows too; a row is "proved" only when both its proofs are."""
    system = build(values, variants)

    def tick(level: int, states: int) -> None:
        if progress:
            progress(f"prove: depth {level}, {states} states")

    reused = known_fixpoint(system, system.variants)
    res = reused or bounded_search(system, depth=1 << 30, max_states=max_states,
                                   variants=system.variants, progress=tick)
    inst = ", ".join(f"{k}={v}" for k, v in system.param_dict().items())
    # the same search, done before in this process (by bmc, or an earlier proof): its
    # states, not its time again
    seconds, shared = (0.0, ", reached earlier in this run") if reused else (res.seconds, "")
    path = None
    if res.violation is not None and trace_dir is not None:
        path = save_counterexample(res.violation.trace, trace_dir, "prove")
    out = []
    for name in INVARIANTS:
        if res.violation is not None:
            bad = res.violation.invariant == name
            verdict = "violated" if bad else "inconclusive"
            bound = (f"shortest trace: {res.depth} steps" if bad
                     else f"search stopped at depth {res.depth}")
            detail = (res.violation.message if bad
                      else f"search stopped at a violation of {res.violation.invariant}")
        elif res.exhausted:
            verdict = "proved"
            bound = (f"all {res.states} reachable states (fixpoint at depth {res.depth}"
                     f"{shared}) of the instance {inst}")
            detail = "explicit-state fixpoint: every depth, this instance only"
        else:
            verdict = "inconclusive"
            bound = f"depth {res.depth}, {res.states} states (state budget reached)"
            detail = "state budget reached before the fixpoint"
        trace = path if res.violation is not None and res.violation.invariant == name else None
        out.append(Result(name, PROTOCOL, "prove", verdict, bound, seconds, trace, detail,
                          {"actions": res.actions}))
    if system.rules.wildcard_last or system.rules.newest_first:
        return out
    # the inductions are about the z3 relations: only once they were just shown to match the
    # list engine do they say anything of the spec
    agreed = relations.check(cache=relations.cache_dir())
    if agreed.disagreement is not None:
        return [_drifted(r, agreed) if r.invariant in matching.PROPERTIES or r.invariant == NO_LOST
                else r for r in out]
    unbounded = _unbounded(limit_of(solver_limit))
    return [replace(c := _combine(r, unbounded[r.invariant]),
                    detail=f"{c.detail}; {agreed.coverage}") if r.invariant in unbounded else r
            for r in out]


UNBOUNDED = "unbounded: software engine, any list lengths and envelope values"
NO_LOST = "no_lost_message"     # its engine half is the lemma's no_matching_pair


@dataclass(frozen=True)
class Induction:
    """One invariant's induction over the software engine: its obligations and what it
    states."""

    obligations: list[Obligation]
    states: str
    bound: str = UNBOUNDED

    @property
    def proved(self) -> bool:
        return all(o.verdict == "proved" for o in self.obligations)

    @property
    def seconds(self) -> float:
        return sum(o.seconds for o in self.obligations)

    @property
    def steps(self) -> str:
        """The steps the consecution obligations cover (each named "<kind> <step>")."""
        return ", ".join(o.name.split(" ", 1)[-1] for o in self.obligations
                         if o.name != "base")


def _unbounded(limit: Limit | None = None) -> dict[str, Induction]:
    """Each invariant's induction over the software engine (the encoding is of MPI's order,
    so not under the order variants)."""
    out = {name: Induction(matching.prove_property(name, limit), text)
           for name, (_, _, text) in matching.PROPERTIES.items()}
    out[NO_LOST] = Induction(prove_no_matching_pair(limit), "no posted receive matches an "
                             "unexpected message", "unbounded, the engine's half only: "
                             "software engine, any list lengths and envelope values")
    return out


def _drifted(row: Result, agreed: relations.Agreement) -> Result:
    """An invariant whose induction is void: the relations it is about no longer match the
    list engine, so the row says so instead of any verdict of the instance's search."""
    return Result(row.invariant, row.protocol, row.method, DRIFTED, "not proved",
                  row.seconds + agreed.seconds, None,
                  f"the z3 step relations no longer match the executable list engine "
                  f"(spec/tagmatch/lists.py), so the induction proves nothing of the spec "
                  f"until they do: {agreed.disagreement}")


def _combine(row: Result, ind: Induction) -> Result:
    """One row for both proofs of an invariant: the instance's fixpoint (which covers the
    offload, the wire and rendezvous) and the software engine's induction. The worse
    verdict wins: a counterexample to induction or a solver without an answer is
    inconclusive, like a cut search."""
    if ind.proved:
        what = f"induction (base + {ind.steps}): {ind.states}"
        bound = (row.bound if row.verdict == "violated"
                 else f"{ind.bound}; instance: {row.bound}")
        verdict = row.verdict
    else:
        what = "induction not proved: " + "; ".join(
            f"{o.name}: {o.verdict} {o.detail}".strip() for o in ind.obligations
            if o.verdict != "proved")
        bound = f"instance: {row.bound}"
        verdict = "violated" if row.verdict == "violated" else "inconclusive"
    detail = f"{row.detail}; {what}" if row.detail else what
    return replace(row, verdict=verdict, bound=bound, seconds=row.seconds + ind.seconds,
                   detail=detail)
