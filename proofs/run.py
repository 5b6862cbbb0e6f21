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
from verbspec.proofs.report import Result
from verbspec.proofs.search import bounded_search
from verbspec.spec.itf import write_trace
from verbspec.spec.lts import InvariantViolation, System

METHODS = ("explore", "bmc", "prove")


@dataclass(frozen=True)
class Options:
    examples: int = 300
    steps: int = 400
    seed: int | None = None
    depth: int | None = None
    max_states: int = 400_000
    trace_dir: Path = Path("verbspec-traces")
    progress: Callable[[str], None] | None = None


class MethodUnavailable(Exception):
    """The protocol has no checker for this method (yet); the message says so."""


def trace_path(opts: Options, protocol: str, method: str, invariant: str,
               variants: Sequence[str]) -> Path:
    tag = "-".join(variants) if variants else "base"
    return opts.trace_dir / f"{protocol}-{tag}-{method}-{invariant}.itf.json"


def _results(system: System, method: str, bound: str, seconds: float,
             violation: InvariantViolation | None, opts: Options,
             variants: Sequence[str]) -> list[Result]:
    out = []
    path = None
    if violation is not None:
        path = write_trace(violation.trace,
                           trace_path(opts, system.protocol, method, violation.invariant,
                                      variants))
    for inv in system.invariants:
        if violation is not None and inv.name == violation.invariant:
            out.append(Result(inv.name, system.protocol, method, "violated",
                              f"trace of {len(violation.trace) - 1} steps", seconds, str(path),
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


def run_bmc(system: System, variants: Sequence[str], opts: Options, default_depth: int
            ) -> list[Result]:
    depth = opts.depth if opts.depth is not None else default_depth

    def tick(level: int, states: int) -> None:
        if opts.progress:
            opts.progress(f"bmc depth {level}: {states} states")

    res = bounded_search(system, depth=depth, max_states=opts.max_states, variants=variants,
                         progress=tick)
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


def run_method(module: ModuleType, method: str, values: dict[str, Any],
               variants: Sequence[str], opts: Options) -> list[Result]:
    system = module.build(values, variants)
    if method == "explore":
        return run_explore(system, variants, opts)
    if method == "bmc":
        return run_bmc(system, variants, opts, getattr(module, "BMC_DEPTH", 12))
    if method == "prove":
        prove = getattr(module, "prove", None)
        if prove is None:
            raise MethodUnavailable(f"method prove is not available for protocol "
                                    f"{module.PROTOCOL} yet")
        return prove(values, variants, progress=opts.progress)
    raise MethodUnavailable(f"unknown method {method!r}")
