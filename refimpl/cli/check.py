"""``verbspec check``: prove, bounded-check or explore the protocols' invariants; the summary
table or JSON, a JUnit report, a counterexample trace for each violation."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from verbspec.proofs.protocols import CHECKS
from verbspec.proofs.reach import mode_reach
from verbspec.proofs.report import (
    EXIT_INCONCLUSIVE,
    EXIT_INPUT,
    EXIT_OK,
    NotRun,
    Result,
    exit_code,
    junit_xml,
)
from verbspec.proofs.run import (
    BESIDE_A_PROOF,
    METHODS,
    MethodUnavailable,
    Options,
    ProverApart,
    run_method,
)
from verbspec.proofs.search import shared_fixpoints
from verbspec.proofs.solving import default_workers
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import (
    DEFAULTS,
    PROTOCOLS,
    check_dir,
    check_file,
    selected,
    solver_limit,
    solver_limit_argument,
    split_params,
)
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.conformance import engines_agree
from verbspec.refimpl.progress import Progress
from verbspec.spec import protocols
from verbspec.spec.params import ParamError, Profile, check_variants, parse_assignments


def _budget_help(name: str) -> str:
    """A bounded check's default budget, and the one beside a proof."""
    return (f"None: {getattr(DEFAULTS, name):,}, or {BESIDE_A_PROOF[name]:,} beside a proof "
            f"(--method all) unless --thorough")


def arguments(c: Parser) -> None:
    c.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all",
                   help="which protocol to check")
    c.add_argument("--method", choices=(*METHODS, engines_agree.METHOD, "all"), default="all",
                   help="all: every method that can decide the configuration, then conform: "
                        "a short lockstep run of the spec against the C and the Python "
                        "engines, which read the protocol apart from it")
    c.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a parameter (repeatable; see 'verbspec params')")
    c.add_argument("--variant", action="append", default=[], metavar="NAME",
                   help="check a named variant (repeatable; see 'verbspec variants')")
    c.add_argument("--profile", default=None, metavar="NAME",
                   help="check a named implementation as written: its variants together "
                        "(see 'verbspec profiles'); bmc then looks for a shortest violation "
                        "of each invariant on its own")
    c.add_argument("--examples", type=int, default=None,
                   help=f"explore: Hypothesis examples ({_budget_help('examples')})")
    c.add_argument("--steps", type=int, default=DEFAULTS.steps,
                   help="explore: steps per example; None: the protocol's own (gate "
                        f"{CHECKS['gate'].explore_steps}, tagmatch "
                        f"{CHECKS['tagmatch'].explore_steps})")
    c.add_argument("--seed", type=int, default=None,
                   help="explore: random seed (None: derandomized, reproducible); bmc: "
                        "seed of its random walks (None: 0)")
    c.add_argument("--depth", type=int, default=None,
                   help="bmc: trace length bound (None: the protocol's own)")
    c.add_argument("--max-states", type=int, default=DEFAULTS.max_states, help="bmc: state budget")
    c.add_argument("--fault-free-max-states", type=int, default=None,
                   help="bmc: state budget of the fault-free phase (protocols that have one; "
                        f"{_budget_help('fault_free_max_states')})")
    c.add_argument("--one-fault-max-states", type=int, default=None,
                   help="bmc: state budget of the one-fault phase (protocols that have one; "
                        f"{_budget_help('one_fault_max_states')})")
    c.add_argument("--walks", type=int, default=None,
                   help="bmc: fault-free random walks of the last phase, after the searches "
                        f"(protocols that have one; 0: none; {_budget_help('walks')})")
    c.add_argument("--thorough", action="store_true",
                   help="the bounded checks' full budgets even beside a proof (the main job "
                        "then takes minutes, not two)")
    solver_limit_argument(c)
    c.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="directory for counterexample traces (created when a trace is "
                        "written); names carry a digest of the parameters and variants")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--junit", type=Path, default=None, metavar="FILE",
                   help="also write a JUnit XML report: one test case per (protocol, method, "
                        "invariant); violated: failure; inconclusive or not run: skipped")
    c.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (no spinner, no heartbeat lines)")
    c.add_argument("--hypothesis-dir", type=Path,
                   default=os.environ.get("VERBSPEC_HYPOTHESIS_DIR") or None, metavar="DIR",
                   help="explore: keep Hypothesis's storage (its caches) in DIR; None (or "
                        "VERBSPEC_HYPOTHESIS_DIR unset): a temporary directory, removed after")


def _route_variants(chosen: Sequence[str], names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    known = {p: {v.name for v in protocols.load(p).VARIANTS} for p in chosen}
    for n in names:
        if not any(n in k for k in known.values()):
            every = sorted(set().union(*known.values()))
            raise ParamError(f"unknown variant {n!r} (known: {', '.join(every)})")
    for p in chosen:
        mine = [n for n in names if n in known[p]]
        out[p] = check_variants(protocols.load(p).VARIANTS, mine)
    return out


def _check_budgets(args: argparse.Namespace) -> None:
    for n, lo in (("examples", 1), ("steps", 1), ("max_states", 1),
                  ("fault_free_max_states", 1), ("one_fault_max_states", 1), ("walks", 0)):
        if getattr(args, n) is not None and getattr(args, n) < lo:
            raise ParamError(f"--{n.replace('_', '-')} must be at least {lo}")
    if args.depth is not None and args.depth < 1:
        raise ParamError("--depth must be at least 1")


def _profile(name: str, chosen: Sequence[str]) -> tuple[str, Profile]:
    """The protocol that has the named profile, and the profile."""
    found = [(p, f) for p in chosen for f in protocols.load(p).PROFILES if f.name == name]
    if not found:
        every = sorted(f.name for p in chosen for f in protocols.load(p).PROFILES)
        raise ParamError(f"unknown profile {name!r} (known: {', '.join(every) or 'none'})")
    return found[0]


def cmd_check(args: argparse.Namespace) -> int:
    chosen = selected(args.protocol)
    if args.profile is not None:
        owner, profile = _profile(args.profile, chosen)
        chosen = (owner,)
        args.variant = [*profile.variants, *args.variant]
        args.param = [*profile.params, *args.param]
    else:
        profile = None
    params = split_params(chosen, args.param)
    variants = _route_variants(chosen, args.variant)
    if args.variant and len(chosen) > 1:
        # a variant changes one protocol; check only the protocols it belongs to
        chosen = tuple(p for p in chosen if variants[p])
    values = {p: parse_assignments(protocols.load(p).PARAMS, params[p]) for p in chosen}
    for p in chosen:       # validate before any long run
        protocols.load(p).build(values[p], variants[p])
    _check_budgets(args)
    check_dir(args.trace_dir, "--trace-dir")
    if args.junit is not None:
        check_file(args.junit, "--junit")
    if args.hypothesis_dir is not None:
        check_dir(args.hypothesis_dir, "--hypothesis-dir")

    t0 = time.perf_counter()
    incomplete = None
    with Progress(enabled=not args.quiet, label="verbspec check") as progress, \
            _terminate_interrupts() as came:
        try:
            results, skipped = _check_all(args, chosen, values, variants, profile, progress)
        except Interrupted as stop:
            results, skipped = stop.results, stop.skipped
            incomplete = (f"interrupted by {came[0] if came else 'SIGINT'} after "
                          f"{time.perf_counter() - t0:.0f} s: only the rows finished before it "
                          f"are shown; the other checks did not run")
        except _InputGone:
            return EXIT_INPUT
        code = exit_code(results)
        if incomplete is not None and code == EXIT_OK:
            code = EXIT_INCONCLUSIVE    # nothing false found, but not everything checked
        progress.summary(results, code)
    try:
        if args.junit is not None:
            args.junit.parent.mkdir(parents=True, exist_ok=True)
            args.junit.write_text(junit_xml(results, _not_run(skipped, values, variants)),
                                  encoding="utf-8")
        modes = [m for p in chosen for m in mode_reach(p, values[p], variants[p], results)]
        report.print_check(results, skipped, values, variants, chosen, args.profile,
                           args.json, code, incomplete, modes)
    except BrokenPipeError:
        return report.reader_gone(code)
    return code


CheckRun = tuple[list[Result], list[dict[str, str]]]


class _InputGone(Exception):
    """A method asked for by name is unavailable (its message printed): exit 3."""


def _check_all(args: argparse.Namespace, chosen: Sequence[str],
               values: dict[str, dict[str, Any]], variants: dict[str, tuple[str, ...]],
               profile: Profile | None, progress: Progress) -> CheckRun:
    """Every method asked for, then the engines held against the spec (Interrupted: what
    finished before a signal)."""
    # the budgets the main job sizes, as given on the command line
    budgets = {k: getattr(args, k) for k in BESIDE_A_PROOF if getattr(args, k) is not None}
    opts = Options(steps=args.steps, seed=args.seed, depth=args.depth,
                   max_states=args.max_states, trace_dir=args.trace_dir,
                   progress=progress.note, hypothesis_dir=args.hypothesis_dir,
                   profile=profile, solver_limit=solver_limit(args), **budgets)
    # the main job: bounded checks beside a proof take the smaller budgets (but for those
    # given); --thorough, or a method asked for by name, keeps the full ones
    beside = ({} if args.thorough or args.method != "all" else
              {k: v for k, v in BESIDE_A_PROOF.items() if k not in budgets})
    with shared_fixpoints():
        run = (([], []) if args.method == engines_agree.METHOD else
               _run_checks(args.method, chosen, values, variants, opts, progress, beside))
    if run is None:
        raise _InputGone
    results, skipped = run
    if args.method in ("all", engines_agree.METHOD):
        # each protocol's rows, then its engines' agreement with its spec
        agree: dict[str, list[Result]] = {p: [] for p in chosen}

        def ordered() -> list[Result]:
            return [r for p in chosen for r in [x for x in results if x.protocol == p] + agree[p]]

        try:
            for p in chosen:
                progress.start(f"{p}: conform (the spec against its engines)")
                agree[p], left = engines_agree.engine_rows(p, values[p], variants[p],
                                                           args.trace_dir, progress.note)
                skipped = skipped + left
                progress.done()
        except KeyboardInterrupt:
            raise Interrupted(ordered(), skipped) from None
        results = ordered()
    return results, skipped


class Interrupted(Exception):
    """SIGINT or SIGTERM while the checks ran: the rows finished before it."""

    def __init__(self, results: list[Result], skipped: list[dict[str, str]]) -> None:
        super().__init__("interrupted")
        self.results, self.skipped = results, skipped


@contextmanager
def _terminate_interrupts() -> Iterator[list[str]]:
    """SIGTERM raises KeyboardInterrupt as SIGINT does, so that a run a CI stops still reports
    what it finished; yields the name of the signal that came, once one has."""
    came: list[str] = []
    previous = {}

    def on_signal(signum: int, frame: Any) -> None:
        came.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        yield came
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_checks(method_arg: str, chosen: Sequence[str], values: dict[str, dict[str, Any]],
                variants: dict[str, tuple[str, ...]], opts: Options, progress: Any,
                beside: dict[str, int]) -> CheckRun | None:
    """Every selected (protocol, method): its results, and the methods "all" left out and
    why. None when a method asked for by name is unavailable (the message printed).

    With "all", a protocol whose prover can decide the configuration gets the ``beside``
    budgets for its bounded checks; a prover whose work runs in worker processes anyway
    (Checks.proves_apart) starts first, in a process of its own, and proves while the other
    checks run here (its rows keep their place in the table)."""
    # each method's rows, or the prover started apart that will give them
    slots: list[list[Result] | ProverApart] = []
    skipped: list[dict[str, str]] = []
    methods = METHODS if method_arg == "all" else (method_arg,)
    scope = {(p, m): CHECKS[p].scope(m, values[p], variants[p]) for p in chosen
             for m in methods}
    apart: dict[str, ProverApart] = {}
    if method_arg == "all" and default_workers() > 1:
        for p in chosen:
            if CHECKS[p].proves_apart and CHECKS[p].prove and not scope[(p, "prove")]:
                progress.note(f"{p}: prove started beside the other checks")
                apart[p] = ProverApart(p, values[p], variants[p], opts)
    try:
        for p in chosen:
            provable = beside and CHECKS[p].prove and not scope[(p, "prove")]
            p_opts = replace(opts, **beside) if provable else opts
            for method in methods:
                why = scope[(p, method)]
                if why and method_arg == "all":
                    # "all" runs what can decide this configuration; asked for by name, the
                    # method runs and reports inconclusive, saying why
                    skipped.append({"protocol": p, "method": method, "reason": why})
                    progress.note(f"{p}: {method} skipped: {why}")
                    continue
                if method == "prove" and p in apart:
                    slots.append(apart[p])
                    continue
                progress.start(f"{p}: {method}")
                try:
                    slots.append(run_method(p, method, values[p], variants[p], p_opts))
                except MethodUnavailable as e:
                    if method_arg != "all":
                        progress.stop()
                        print(f"verbspec check: {e}", file=sys.stderr)
                        return None
                    progress.note(str(e))
                progress.done()
        results: list[Result] = []
        for slot in slots:
            if isinstance(slot, ProverApart):
                progress.start(f"{slot.protocol}: prove (started beside the checks before)")
                slot = slot.result()
                progress.done()
            results += slot
        return results, skipped
    except KeyboardInterrupt:
        # the rows finished so far (a prover apart that had not answered is stopped below)
        done = [r for slot in slots if not isinstance(slot, ProverApart) for r in slot]
        raise Interrupted(done, skipped) from None
    finally:
        for prover in apart.values():    # nothing left running after an error or interrupt
            prover.stop()


def _not_run(skipped: list[dict[str, str]], values: dict[str, dict[str, Any]],
             variants: dict[str, tuple[str, ...]]) -> list[NotRun]:
    """The skipped methods as one entry per invariant (or per row a skip names: an engine's),
    for the JUnit report."""
    out = []
    for s in skipped:
        p = s["protocol"]
        if "invariant" in s:
            out.append(NotRun(p, s["method"], s["invariant"], s["reason"]))
            continue
        system = protocols.load(p).build(values[p], variants[p])
        out += [NotRun(p, s["method"], inv.name, s["reason"]) for inv in system.invariants]
    return out


COMMAND = Command("check", "prove, bounded-check or explore the protocols' invariants",
                  arguments, cmd_check)
