"""Run a protocol's checks by method and turn what they found into Results.

Each method is a function (system, options) -> list[Result]; the CLI calls ``run_method`` and
stays free of checker details.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from verbspec.proofs.explore import explore
from verbspec.proofs.report import Result, trace_name
from verbspec.proofs.search import SearchResult, bounded_search
from verbspec.spec.itf import write_trace
from verbspec.spec.lts import InvariantViolation, System

METHODS = ("explore", "bmc", "prove")

# bmc's second phase: how deep to search fault-free runs, for protocols whose module does not
# set BMC_FAULT_FREE_DEPTH itself (a protocol with neither gets no second phase). Fault-free
# gate states roughly double per level past 26 (about 86k at depth 31), so at the defaults the
# fault-free budget, not this depth, ends the search.
BMC_FAULT_FREE_DEPTHS: dict[str, int] = {"gate": 40}


@dataclass(frozen=True)
class Options:
    examples: int = 300
    steps: int = 400
    seed: int | None = None
    depth: int | None = None
    max_states: int = 400_000
    fault_free_max_states: int = 100_000     # bmc: state budget of the fault-free phase
    trace_dir: Path = Path("verbspec-traces")
    progress: Callable[[str], None] | None = None


class MethodUnavailable(Exception):
    """The protocol has no checker for this method (yet); the message says so."""


def trace_path(opts: Options, protocol: str, method: str, invariant: str,
               variants: Sequence[str]) -> Path:
    return opts.trace_dir / trace_name(protocol, method, invariant, variants)


def _results(system: System, method: str, bound: str, seconds: float,
             violation: InvariantViolation | None, opts: Options,
             variants: Sequence[str], violated_bound: str | None = None) -> list[Result]:
    out = []
    path = None
    if violation is not None:
        path = write_trace(violation.trace,
                           trace_path(opts, system.protocol, method, violation.invariant,
                                      variants))
    for inv in system.invariants:
        if violation is not None and inv.name == violation.invariant:
            out.append(Result(inv.name, system.protocol, method, "violated",
                              violated_bound or f"trace of {len(violation.trace) - 1} steps",
                              seconds, str(path),
                              violation.message))
        else:
            out.append(Result(inv.name, system.protocol, method, "held", bound, seconds))
    return out


def run_explore(system: System, variants: Sequence[str], opts: Options) -> list[Result]:
    res = explore(system, examples=opts.examples, steps=opts.steps, seed=opts.seed,
                  variants=variants)
    st = res.stats
    bound = (f"{st.examples} examples, {st.steps} steps, depth <= {st.max_depth} "
             f"({st.steps / max(res.seconds, 1e-9):.0f} steps/s)")
    return _results(system, "explore", bound, res.seconds, res.violation, opts, variants)


def run_bmc(system: System, variants: Sequence[str], opts: Options, default_depth: int,
            fault_free_depth: int | None = None) -> list[Result]:
    """Breadth-first bounded search. With ``fault_free_depth``, a second phase searches the
    fault-free runs (fault actions excluded) deeper, from the initial state again, when the
    first phase neither found a violation nor exhausted the state space."""
    depth = opts.depth if opts.depth is not None else default_depth

    def tick(level: int, states: int) -> None:
        if opts.progress:
            opts.progress(f"bmc depth {level}: {states} states")

    res = bounded_search(system, depth=depth, max_states=opts.max_states, variants=variants,
                         progress=tick)
    if fault_free_depth is not None:
        return _layered_bmc(system, variants, opts, res, fault_free_depth)
    if res.exhausted:
        bound = f"every reachable state ({res.states} states, depth {res.depth})"
    elif res.cut:
        bound = (f"all traces of <= {res.depth} steps, then cut at {res.states} states "
                 f"(max_states)")
    else:
        bound = f"all traces of <= {res.depth} steps ({res.states} states)"
    results = _results(system, "bmc", bound, res.seconds, res.violation, opts, variants)
    if res.exhausted and res.violation is None:
        results = [Result(r.invariant, r.protocol, r.method, "proved", r.bound, r.seconds)
                   for r in results]
    return results


def _covered(res: SearchResult) -> int:
    """Runs of at most this many steps were all checked (a violation ends its level early)."""
    return res.depth - 1 if res.violation is not None else res.depth


def _layered_bmc(system: System, variants: Sequence[str], opts: Options, res: SearchResult,
                 fault_free_depth: int) -> list[Result]:
    """Phase 1 (every run, faults included) is ``res``; phase 2 searches fault-free runs up to
    ``fault_free_depth`` steps with its own budget. A violation of phase 1 is a shortest one of
    all runs; one of phase 2 is a shortest fault-free one, and no run of any kind within
    phase 1's bound breaks an invariant. Only an exhausted search of all runs proves."""
    n1 = _covered(res)
    if res.exhausted:
        bound1 = f"every reachable state ({res.states:,} states, depth {res.depth})"
    elif res.cut:
        bound1 = (f"all runs of <= {n1} steps, then cut at {res.states:,} states "
                  f"(max_states)")
    else:
        bound1 = f"all runs of <= {n1} steps ({res.states:,} states)"
    if res.violation is not None:
        steps = len(res.violation.trace) - 1
        return _results(system, "bmc", bound1, res.seconds, res.violation, opts, variants,
                        f"trace of {steps} steps, a shortest run: no run of <= {n1} steps "
                        f"breaks an invariant ({res.states:,} states)")
    if res.exhausted:
        return [Result(r.invariant, r.protocol, r.method, "proved", r.bound, r.seconds)
                for r in _results(system, "bmc", bound1, res.seconds, None, opts, variants)]
    if fault_free_depth <= n1:
        return _results(system, "bmc", bound1, res.seconds, None, opts, variants)

    def tick(level: int, states: int) -> None:
        if opts.progress:
            opts.progress(f"bmc fault-free depth {level}: {states} states")

    ff = bounded_search(system, depth=fault_free_depth, max_states=opts.fault_free_max_states,
                        variants=variants, faults=False, progress=tick)
    n2 = _covered(ff)
    seconds = res.seconds + ff.seconds
    # no fault action enabled in any state the fault-free runs reach: they are all the runs
    every = ff.fault_level is None or ff.fault_level >= n2
    kind = "all" if every else "fault-free"
    if ff.exhausted:
        bound2 = (f"every reachable state ({ff.states:,} states, depth {ff.depth}; no fault "
                  f"action is ever enabled)" if every else
                  f"every state fault-free runs reach ({ff.states:,} states, depth {ff.depth})")
    elif ff.cut:
        bound2 = (f"{kind} runs of <= {n2} steps, then cut at {ff.states:,} states "
                  f"(fault-free budget)")
    else:
        bound2 = f"{kind} runs of <= {n2} steps ({ff.states:,} states)"
    if every:
        bound2 += "" if ff.exhausted else "; no fault action is enabled within them"
    bound = f"{bound1}; {bound2}"
    if ff.violation is not None:
        steps = len(ff.violation.trace) - 1
        if every:
            shortest = (f"trace of {steps} steps, a shortest run: no run of <= {n2} steps "
                        f"breaks an invariant ({ff.states:,} states; no fault action is "
                        f"enabled within them)")
        else:
            shortest = (f"trace of {steps} steps, a shortest fault-free run: no run of any "
                        f"kind of <= {n1} steps ({res.states:,} states) and no fault-free run "
                        f"of <= {n2} steps ({ff.states:,} states) breaks an invariant")
        return _results(system, "bmc", bound, seconds, ff.violation, opts, variants, shortest)
    results = _results(system, "bmc", bound, seconds, None, opts, variants)
    if ff.exhausted and every:
        results = [Result(r.invariant, r.protocol, r.method, "proved", r.bound, r.seconds)
                   for r in results]
    return results


def run_method(module: ModuleType, method: str, values: dict[str, Any],
               variants: Sequence[str], opts: Options) -> list[Result]:
    system = module.build(values, variants)
    if method == "explore":
        return run_explore(system, variants, opts)
    if method == "bmc":
        return run_bmc(system, variants, opts, getattr(module, "BMC_DEPTH", 12),
                       getattr(module, "BMC_FAULT_FREE_DEPTH",
                               BMC_FAULT_FREE_DEPTHS.get(module.PROTOCOL)))
    if method == "prove":
        prove = getattr(module, "prove", None)
        if prove is None:
            raise MethodUnavailable(f"method prove is not available for protocol "
                                    f"{module.PROTOCOL} yet")
        return prove(values, variants, progress=opts.progress, trace_dir=opts.trace_dir)
    raise MethodUnavailable(f"unknown method {method!r}")
