"""Proofs of the tag-matching protocol: an explicit-state fixpoint of one instance, and the
software engine's half of ``no_lost_message`` by induction in z3 for every list length."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from verbspec.proofs.report import Result
from verbspec.proofs.search import bounded_search
from verbspec.proofs.tagmatch.lemma import prove_no_matching_pair
from verbspec.proofs.traces import save_counterexample
from verbspec.spec.tagmatch.system import INVARIANTS, PROTOCOL, build


def prove(values: Mapping[str, Any] | None = None, variants: Iterable[str] = (), *,
          progress: Any = None, max_states: int = 3_000_000, trace_dir: Any = None) -> list[Result]:
    """Explicit-state proof: breadth-first search to a fixpoint over every reachable state of
    this instance. When the reachable set is exhausted without a violation, every invariant is
    proved for this instance at every depth (not for other parameter values). A violation
    makes that invariant "violated" (its trace written to ``trace_dir``, if given) and leaves
    the rest "inconclusive"; a state budget cut leaves all "inconclusive"."""
    system = build(values, variants)

    def tick(level: int, states: int) -> None:
        if progress:
            progress(f"prove: depth {level}, {states} states")

    res = bounded_search(system, depth=1 << 30, max_states=max_states,
                         variants=system.variants, progress=tick)
    inst = ", ".join(f"{k}={v}" for k, v in system.param_dict().items())
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
            bound = (f"all {res.states} reachable states (fixpoint at depth {res.depth}) "
                     f"of the instance {inst}")
            detail = "explicit-state fixpoint: every depth, this instance only"
        else:
            verdict = "inconclusive"
            bound = f"depth {res.depth}, {res.states} states (state budget reached)"
            detail = "state budget reached before the fixpoint"
        trace = path if res.violation is not None and res.violation.invariant == name else None
        out.append(Result(name, PROTOCOL, "prove", verdict, bound, res.seconds, trace, detail))
    if not (system.rules.wildcard_last or system.rules.newest_first):
        out.append(_prove_engine_progress())
    return out


def _prove_engine_progress() -> Result:
    """The software engine's half of no_lost_message, by induction in z3, for every list
    length and envelope value (the encoding is of MPI's order, so not under the order
    variants)."""
    obligations = prove_no_matching_pair()
    ok = all(o.verdict == "proved" for o in obligations)
    failed = [f"{o.name}: {o.verdict}" for o in obligations if o.verdict != "proved"]
    return Result("no_lost_message", PROTOCOL, "prove", "proved" if ok else "inconclusive",
                  "unbounded: software engine, any list lengths and envelope values",
                  sum(o.seconds for o in obligations), None,
                  "induction (base + consecution of post_recv, arrive, cancel): no posted "
                  "receive matches an unexpected message" if ok else "; ".join(failed))
