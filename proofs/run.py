"""Run a protocol's checks by method and turn what they found into Results.

Each method is a function (system, options) -> list[Result]; the CLI calls ``run_method`` and
stays free of checker details.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from verbspec.proofs.explore import explore
from verbspec.proofs.protocols import CHECKS, Checks
from verbspec.proofs.report import Result
from verbspec.proofs.search import SearchResult, bounded_search
from verbspec.proofs.traces import read_moves, save_counterexample
from verbspec.proofs.walk import WalkResult, random_walks
from verbspec.spec import protocols
from verbspec.spec.lts import InvariantViolation, System, replay
from verbspec.spec.params import Profile

METHODS = ("explore", "bmc", "prove")

# bmc's deeper phases are opt-in: a protocol's Checks (proofs/protocols.py) set the depth of the
# fault-free phase and of the one-fault phase; without them bmc is one phase. A walk depth adds a
# last phase of fault-free random walks (proofs/walk.py) for violations deeper than any state
# budget reaches; the protocol's ``shortest_run`` may then prove the trace a walk found a
# shortest fault-free one.

# (invariant, steps) -> why no fault-free run breaking it is shorter, or None
ShortestProof = Callable[[str, int], "str | None"]


@dataclass(frozen=True)
class Options:
    examples: int = 300
    steps: int | None = None                 # explore (None: the protocol's explore_steps)
    seed: int | None = None
    depth: int | None = None
    max_states: int = 400_000
    fault_free_max_states: int = 100_000     # bmc: state budget of the fault-free phase
    one_fault_max_states: int = 100_000      # bmc: state budget of the one-fault phase
    walks: int = 100                         # bmc: random walks of the walk phase (0: none)
    shortest_proof: bool = True              # bmc: try to prove a walk's trace a shortest one
    trace_dir: Path = Path("verbspec-traces")
    progress: Callable[[str], None] | None = None
    hypothesis_dir: Path | None = None       # explore: Hypothesis's storage (None: temporary)
    profile: Profile | None = None           # bmc per invariant; violations name variants
    solver_limit: int | None = None          # prove: z3's rlimit per query (None: calibrated)


# `verbspec check`'s bounded checks of a protocol whose proof runs beside them: a cross-check
# of what the proof covers, sized so that the whole job on the defaults fits in two minutes on
# two cores (docs/benchmarks.md, "The main job"); `--thorough` keeps the Options defaults
BESIDE_A_PROOF: dict[str, int] = {"examples": 30, "fault_free_max_states": 10_000,
                                  "one_fault_max_states": 10_000, "walks": 10}


class MethodUnavailable(Exception):
    """The protocol has no checker for this method (yet); the message says so."""


def _results(system: System, method: str, bound: str, seconds: float,
             violation: InvariantViolation | None, opts: Options,
             variants: Sequence[str], violated_bound: str | None = None,
             coverage: dict[str, Any] | None = None) -> list[Result]:
    out = []
    path = None
    if violation is not None:
        path = save_counterexample(violation.trace, opts.trace_dir, method)
    for inv in system.invariants:
        if violation is not None and inv.name == violation.invariant:
            out.append(Result(inv.name, system.protocol, method, "violated",
                              violated_bound or f"trace of {len(violation.trace) - 1} steps",
                              seconds, str(path), violation.message, coverage))
        else:
            out.append(Result(inv.name, system.protocol, method, "held", bound, seconds,
                              coverage=coverage))
    return out


def run_explore(system: System, variants: Sequence[str], opts: Options) -> list[Result]:
    def tick(st: Any) -> None:
        if opts.progress:
            opts.progress(f"example {st.examples}/{opts.examples}, {st.steps} steps")

    res = explore(system, examples=opts.examples, steps=opts.steps, seed=opts.seed,
                  variants=variants, storage=opts.hypothesis_dir, progress=tick)
    st = res.stats
    reached = "".join(f", {k.replace('_', ' ')} <= {v}" for k, v in st.reached.items())
    bound = (f"{st.examples} examples, {st.steps} steps, depth <= {st.max_depth}{reached} "
             f"({st.steps / max(res.seconds, 1e-9):.0f} steps/s)")
    coverage = {"actions": dict(sorted(st.actions.items())), "reached": dict(st.reached)}
    return _results(system, "explore", bound, res.seconds, res.violation, opts, variants,
                    coverage=coverage)


def run_bmc(system: System, variants: Sequence[str], opts: Options, default_depth: int,
            fault_free_depth: int | None = None,
            one_fault_depth: int | None = None,
            walk_depth: int | None = None,
            shortest: ShortestProof | None = None,
            target: str | None = None) -> list[Result]:
    """Breadth-first bounded search. With ``fault_free_depth``, a second phase searches the
    fault-free runs (fault actions excluded) deeper, from the initial state again, when the
    first phase neither found a violation nor exhausted the state space; with
    ``one_fault_depth``, a third phase then searches the runs with at most one fault action;
    with ``walk_depth``, a last phase takes ``opts.walks`` fault-free random walks, whose
    trace ``shortest`` may prove a shortest fault-free run."""
    depth = opts.depth if opts.depth is not None else default_depth

    def tick(level: int, states: int) -> None:
        if opts.progress:
            opts.progress(f"bmc depth {level}: {states} states")

    res = bounded_search(system, depth=depth, max_states=opts.max_states, variants=variants,
                         target=target, progress=tick)
    return _layered_bmc(system, variants, opts, res, fault_free_depth, one_fault_depth,
                        None if target else walk_depth, shortest, target)


def _covered(res: SearchResult) -> int:
    """Runs of at most this many steps were all checked (a violation ends its level early)."""
    return res.depth - 1 if res.violation is not None else res.depth


def _proved(results: list[Result]) -> list[Result]:
    return [replace(r, verdict="proved") for r in results]


@dataclass(frozen=True)
class _Limited:
    """A deeper phase over the runs with at most ``faults`` fault actions: what it covered."""

    res: SearchResult
    faults: int
    budget: str

    @property
    def covered(self) -> int:
        return _covered(self.res)

    @property
    def every(self) -> bool:
        """No run within the covered depth goes past the fault limit: they are all the runs."""
        lvl = self.res.fault_level
        return lvl is None or lvl >= self.covered

    @property
    def runs(self) -> str:
        return "fault-free runs" if self.faults == 0 else "runs with at most one fault"

    @property
    def run(self) -> str:
        return self.runs.replace("runs", "run", 1)

    @property
    def past_limit(self) -> str:
        return "no fault action" if self.faults == 0 else "no second fault action"

    def bound(self) -> str:
        r, n = self.res, self.covered
        if r.exhausted:
            if self.every:
                return (f"every reachable state ({r.states:,} states, depth {r.depth}; "
                        f"{self.past_limit} is ever enabled)")
            return f"every state {self.runs} reach ({r.states:,} states, depth {r.depth})"
        kind = "all runs" if self.every else self.runs
        if r.cut:
            text = f"{kind} of <= {n} steps, then cut at {r.states:,} states ({self.budget})"
        else:
            text = f"{kind} of <= {n} steps ({r.states:,} states)"
        return text + (f"; {self.past_limit} is enabled within them" if self.every else "")

    def clause(self) -> str:
        """What this phase rules out, for a deeper phase's violation."""
        return f"no {self.run} of <= {self.covered} steps ({self.res.states:,} states)"


def _layered_bmc(system: System, variants: Sequence[str], opts: Options, res: SearchResult,
                 fault_free_depth: int | None, one_fault_depth: int | None,
                 walk_depth: int | None = None,
                 shortest: ShortestProof | None = None,
                 target: str | None = None) -> list[Result]:
    """Phase 1 (every run, faults included) is ``res``; phase 2 (if ``fault_free_depth`` is
    given) searches fault-free runs up to ``fault_free_depth`` steps and phase 3 (if
    ``one_fault_depth`` is given) runs with at most one fault action up to
    ``one_fault_depth`` steps, each with its own budget and from the initial state again. A
    violation of phase 1 is a shortest one of all runs; one of phase 2 a shortest fault-free
    one, one of phase 3 a shortest one with at most one fault; each comes with what the phases
    before it ruled out. Only an exhausted search of all runs proves. A violation the random
    walks find (``walk_depth``) is shown a shortest fault-free one only by ``shortest``;
    otherwise its bound says what the searches ruled out."""
    n1 = _covered(res)
    breaks = f"breaks {target}" if target else "breaks an invariant"
    taken = Counter(res.actions)

    def results(bound: str, seconds: float, violation: InvariantViolation | None,
                violated_bound: str | None = None) -> list[Result]:
        # every phase's rows carry the actions the searches so far took
        return _results(system, "bmc", bound, seconds, violation, opts, variants,
                        violated_bound, {"actions": dict(sorted(taken.items()))})

    if res.exhausted:
        bound1 = f"every reachable state ({res.states:,} states, depth {res.depth})"
    elif res.cut:
        bound1 = (f"all runs of <= {n1} steps, then cut at {res.states:,} states "
                  f"(max_states)")
    else:
        bound1 = f"all runs of <= {n1} steps ({res.states:,} states)"
    if res.violation is not None:
        steps = len(res.violation.trace) - 1
        return results(bound1, res.seconds, res.violation,
                       f"trace of {steps} steps, a shortest run: no run of <= {n1} steps "
                       f"{breaks} ({res.states:,} states)")
    if res.exhausted:
        return _proved(results(bound1, res.seconds, None))

    bounds = [bound1]
    seconds = res.seconds
    # (clause, depth, fault limit) of each phase so far
    ruled_out: list[tuple[str, int, int | None]] = [
        (f"no run of any kind of <= {n1} steps ({res.states:,} states)", n1, None)]
    every_to = n1        # all runs of <= every_to steps are covered
    phases = ((fault_free_depth, 0, opts.fault_free_max_states, "fault-free budget",
               "fault-free"),
              (one_fault_depth, 1, opts.one_fault_max_states, "one-fault budget", "one-fault"))
    for depth, faults, budget, budget_name, label in phases:
        if depth is None or depth <= every_to:
            continue

        def tick(level: int, states: int, label: str = label) -> None:
            if opts.progress:
                opts.progress(f"bmc {label} depth {level}: {states} states")

        ph = _Limited(bounded_search(system, depth=depth, max_states=budget, variants=variants,
                                     max_faults=faults, target=target, progress=tick),
                      faults, budget_name)
        seconds += ph.res.seconds
        taken.update(ph.res.actions)
        bounds.append(ph.bound())
        bound = "; ".join(bounds)
        n = ph.covered
        if ph.res.violation is not None:
            steps = len(ph.res.violation.trace) - 1
            if ph.every:
                shortest = (f"trace of {steps} steps, a shortest run: no run of <= {n} steps "
                            f"{breaks} ({ph.res.states:,} states; {ph.past_limit} "
                            f"is enabled within them)")
            else:
                # a fault-free phase's clause says more only where it went deeper
                earlier = [c for c, k, lim in ruled_out if lim is None or k > n]
                shortest = (f"trace of {steps} steps, a shortest {ph.run}: "
                            f"{_join(earlier + [ph.clause()])} {breaks}")
            return results(bound, seconds, ph.res.violation, shortest)
        if ph.res.exhausted and ph.every:
            return _proved(results(bound, seconds, None))
        if ph.every:
            every_to = max(every_to, n)
        ruled_out.append((ph.clause(), n, faults))
    if walk_depth is None or opts.walks < 1:
        return results("; ".join(bounds), seconds, None)

    seed = opts.seed if opts.seed is not None else 0

    def walked(w: int, steps: int) -> None:
        if opts.progress:
            opts.progress(f"bmc random walk {w}/{opts.walks}: {steps} steps")

    wr = random_walks(system, walks=opts.walks, depth=walk_depth, seed=seed, variants=variants,
                      progress=walked)
    seconds += wr.seconds
    if wr.violation is None:
        bounds.append(f"{wr.walks} fault-free random walks of <= {walk_depth} steps (seed "
                      f"{seed}, {wr.steps:,} steps) broke nothing")
        return results("; ".join(bounds), seconds, None)
    bounds.append(f"fault-free random walks (seed {seed}): walk {wr.walks} broke "
                  f"{wr.violation.invariant} after {wr.walked} steps")
    steps = len(wr.violation.trace) - 1
    proof = None
    if shortest is not None and opts.shortest_proof:
        if opts.progress:
            opts.progress(f"bmc: is the {steps}-step trace a shortest fault-free run?")
        t0 = time.perf_counter()
        proof = shortest(wr.violation.invariant, steps)
        seconds += time.perf_counter() - t0
    return results("; ".join(bounds), seconds, wr.violation,
                   _walk_found(wr, walk_depth, [c for c, _, _ in ruled_out], proof))


def _walk_found(wr: WalkResult, depth: int, ruled_out: list[str], proof: str | None) -> str:
    assert wr.violation is not None
    steps = len(wr.violation.trace) - 1
    cut = ("until no single step could be deleted" if wr.minimal
           else "within the time allowed")
    found = (f"found by fault-free random walk {wr.walks} ({wr.walked} steps, of at most "
             f"{depth}) and shortened by deleting steps {cut}")
    if proof is not None:
        return f"trace of {steps} steps, a shortest fault-free run: {proof}; {found}"
    return (f"trace of {steps} steps, not shown to be a shortest run: {found}; "
            f"{_join(ruled_out)} breaks an invariant")


def _join(clauses: list[str]) -> str:
    if len(clauses) <= 2:
        return " and ".join(clauses)
    return ", ".join(clauses[:-1]) + " and " + clauses[-1]


def _shortest_proof(checks: Checks, values: dict[str, Any], variants: Sequence[str]
                    ) -> ShortestProof | None:
    proof = checks.shortest_run
    if proof is None:
        return None
    return lambda invariant, steps: proof(values, variants, invariant, steps)


def run_method(protocol: str, method: str, values: dict[str, Any],
               variants: Sequence[str], opts: Options) -> list[Result]:
    """Run one method of ``protocol``'s checks on a configuration."""
    checks = CHECKS[protocol]
    system = protocols.load(protocol).build(values, variants)
    if method == "explore":
        rows = run_explore(system, variants, replace(opts, steps=opts.steps
                                                     or checks.explore_steps))
    elif method == "bmc" and opts.profile is not None:
        rows = run_each_bmc(system, variants, opts)
    elif method == "bmc":
        rows = run_bmc(system, variants, opts, checks.bmc_depth, checks.bmc_fault_free_depth,
                       checks.bmc_one_fault_depth, checks.bmc_walk_depth,
                       _shortest_proof(checks, values, variants))
    elif method == "prove":
        if checks.prove is None:
            raise MethodUnavailable(f"method prove is not available for protocol "
                                    f"{protocol} yet")
        return checks.prove(values, variants, progress=opts.progress,
                            trace_dir=opts.trace_dir, solver_limit=opts.solver_limit)
    else:
        raise MethodUnavailable(f"unknown method {method!r}")
    if opts.profile is None:
        return rows
    return [_with_needs(r, protocol, values, variants, opts.profile) for r in rows]


def run_each_bmc(system: System, variants: Sequence[str], opts: Options) -> list[Result]:
    """bmc once per invariant, each search after a shortest violation of that invariant alone:
    a state where another invariant broke is a dead end, so each row says whether the
    configuration keeps its invariant in every run that keeps the others up to then."""
    checks = CHECKS[system.protocol]
    out = []
    for inv in system.invariants:
        if opts.progress:
            opts.progress(f"bmc for {inv.name}")
        out += [r for r in run_bmc(system, variants, opts, checks.bmc_depth,
                                   checks.bmc_fault_free_depth, checks.bmc_one_fault_depth,
                                   target=inv.name)
                if r.invariant == inv.name]
    return out


def _with_needs(row: Result, protocol: str, values: dict[str, Any], variants: Sequence[str],
                profile: Profile) -> Result:
    """A violation found under a profile, its detail ending with the variants its trace needs
    and where the profiled implementation does each."""
    if row.verdict != "violated" or row.trace is None:
        return row
    needs = [f"{v} ({profile.source(v)})" if v in profile.variants else v
             for v in needed_variants(protocol, values, variants, Path(row.trace), row.invariant)]
    return replace(row, detail=f"{row.detail}; needs {'; '.join(needs) or 'no variant'}")


def needed_variants(protocol: str, values: dict[str, Any], variants: Sequence[str],
                    trace_path: Path, invariant: str) -> list[str]:
    """The variants a saved counterexample needs: dropping any one of them, its moves no
    longer replay to a violation of ``invariant``."""
    _, moves = read_moves(trace_path)
    need = []
    for v in variants:
        rest = [w for w in variants if w != v]
        try:
            replay(protocols.load(protocol).build(values, rest), moves, rest)
        except InvariantViolation as e:
            if e.invariant == invariant:
                continue
        except ValueError:
            pass
        need.append(v)
    return need


def _prove_in_child(protocol: str, values: dict[str, Any], variants: tuple[str, ...],
                    trace_dir: Path, solver_limit: int | None, out: Any) -> None:
    """A spawned process's work: the prover's results (or what stopped it) on ``out``, after
    its progress notes."""
    try:
        opts = Options(trace_dir=trace_dir, progress=lambda text: out.put(("note", text)),
                       solver_limit=solver_limit)
        out.put(("results", run_method(protocol, "prove", values, variants, opts)))
    except BaseException as e:      # the parent says what failed; this process just ends
        out.put(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class ProverApart:
    """A protocol's prover started in a process of its own (its solvers and the refinement
    check then run in worker processes of that one), so that the calling process's checks
    run beside it; its notes reach ``opts.progress``."""

    def __init__(self, protocol: str, values: dict[str, Any], variants: Sequence[str],
                 opts: Options) -> None:
        self.protocol = protocol
        ctx = multiprocessing.get_context("spawn")
        self._out = ctx.Queue()
        self._child = ctx.Process(target=_prove_in_child, name=f"verbspec-{protocol}-prove",
                                  args=(protocol, dict(values), tuple(variants),
                                        opts.trace_dir, opts.solver_limit, self._out))
        self._child.start()
        self._final: list[tuple[str, Any]] = []
        self._reader = threading.Thread(target=self._relay, args=(opts.progress,),
                                        name=f"verbspec-{protocol}-prove-notes", daemon=True)
        self._reader.start()

    def _relay(self, progress: Callable[[str], None] | None) -> None:
        while True:
            kind, item = self._out.get()
            if kind != "note":
                self._final.append((kind, item))
                return
            if progress:
                progress(f"{self.protocol} prove: {item}")

    def result(self) -> list[Result]:
        """Wait for the prover's results (RuntimeError, with its traceback, if it failed)."""
        while self._reader.is_alive():
            self._reader.join(0.5)
            if not self._child.is_alive() and self._out.empty():
                self._reader.join(1.0)
                if self._reader.is_alive():
                    raise RuntimeError(f"the {self.protocol} prover's process ended with "
                                       f"exit code {self._child.exitcode} and no results")
        self._child.join()
        kind, item = self._final[0]
        if kind == "error":
            raise RuntimeError(f"the {self.protocol} prover failed: {item}")
        return item

    def stop(self) -> None:
        """End the prover unfinished (the caller gave up on it)."""
        if self._child.is_alive():
            self._child.terminate()
        self._child.join()
