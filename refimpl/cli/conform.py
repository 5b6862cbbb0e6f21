"""``verbspec conform``: hold an implementation of a protocol to its spec. Runs of the spec
(random, or every edge of small configurations) drive the implementation in lockstep; with
``--impl native``, also the C drivers' replays (``--c-driver``), the mutants of the C engines
(``--mutants``) or their coverage (``--coverage``)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from verbspec import native
from verbspec.proofs.report import EXIT_OK, EXIT_VIOLATION
from verbspec.proofs.traces import save_counterexample
from verbspec.refimpl.bindings.cprogram import BuildError, compiler
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import (
    DEFAULTS,
    PROTOCOLS,
    InputError,
    check_dir,
    selected,
    split_params,
)
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.conformance import coverage, mutants
from verbspec.refimpl.conformance import gate as conformance_gate
from verbspec.refimpl.conformance import tagmatch as conformance_tagmatch
from verbspec.refimpl.conformance.c_replay import Drivers, Tally, recorder
from verbspec.refimpl.progress import Progress
from verbspec.spec import protocols
from verbspec.spec.params import ParamError, parse_assignments


def arguments(c: Parser) -> None:
    c.add_argument("--impl", default="refimpl", metavar="refimpl|native|ucx|MODULE:FACTORY",
                   help="the implementation: the reference engine, native (the C engine, "
                        "where pip install -e . built it), ucx (tagmatch: UCX's own tag "
                        "matching, where UCX is installed; a partial implementation, "
                        "docs/conformance.md), variant:NAME (the "
                        "reference engine behaving as a variant), or a callable: for gate "
                        "(config, rank, granted depth) -> an object with the GateImpl methods, "
                        "for tagmatch (parameters) -> one with the TagImpl methods")
    c.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="gate",
                   help="which protocol's spec and implementation (all: each in turn; exit 0 "
                        "only if none had a mismatch)")
    c.add_argument("--examples", type=int, default=200, help="random runs")
    c.add_argument("--exhaustive", action="store_true",
                   help="instead of random runs: every reachable edge of small base-protocol "
                        "configurations, each once, then every path up to a depth from the "
                        "initial state of larger ones (docs/conformance.md)")
    c.add_argument("--depth", type=int, default=None, metavar="N",
                   help="with --exhaustive: the longest path walked (default: gate "
                        f"{conformance_gate.PATH_DEPTH}; tagmatch each walk's own, "
                        f"{', '.join(str(d) for _, d in conformance_tagmatch.PATH_CONFIGS)})")
    c.add_argument("--steps", type=int, default=3000, help="steps per run at most")
    c.add_argument("--fault-rate", type=float, default=conformance_gate.FAULT_RATE,
                   help="probability of a fault at a step where one is enabled")
    c.add_argument("--seed", type=int, default=0,
                   help="seed of Hypothesis's generation of the random runs: the same seed, "
                        "the same runs")
    c.add_argument("--shrink-seconds", type=float, default=conformance_gate.SHRINK_SECONDS,
                   metavar="S",
                   help="reduce a mismatching random run for at most S seconds (0: keep it "
                        "as found)")
    c.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set a parameter (repeatable; see 'verbspec params')")
    c.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="directory for the trace of a mismatching run")
    c.add_argument("--keep-going", action="store_true",
                   help="go on after a mismatching run (or, with --exhaustive, after a "
                        "configuration's first mismatch): every mismatch is reported, each "
                        "with its trace; exit 1 if there was any")
    c.add_argument("--mutants", action="store_true",
                   help="with --impl native: build each single-point mutant of the selected "
                        "protocols' C engines and hold it to the spec (random runs and every "
                        "edge, the cheaper first); exit 0 only if every mutant is killed")
    c.add_argument("--c-driver", action="store_true",
                   help="with --impl native: also replay each run's trace through the C "
                        "replay driver of its protocol (native/replay/), which calls the "
                        "engine through its C header; --json adds c_driver: traces, steps, "
                        "mismatches")
    c.add_argument("--replay", type=Path, nargs="+", default=None, metavar="FILE",
                   help="with --c-driver: instead of random runs, replay these ITF traces "
                        "through the C drivers (each on its own protocol, params and "
                        "variants)")
    c.add_argument("--driver-cflags", default="", metavar="FLAGS",
                   help="with --c-driver: extra compiler flags for the drivers, e.g. "
                        "'-fsanitize=address,undefined'")
    c.add_argument("--coverage", action="store_true",
                   help="with --impl native: build the selected protocols' C engines with gcov "
                        "instrumentation, drive them (random runs with faults, every-edge "
                        "sweeps, every allocation failure and, in a source tree, the native "
                        "tests) and print each engine file's line and branch coverage")
    c.add_argument("--no-tests", action="store_true",
                   help="with --coverage: leave out the native tests of the source tree")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")


def harness_module(proto: str) -> ModuleType:
    """The conformance harness module of a protocol."""
    return conformance_gate if proto == "gate" else conformance_tagmatch


def cmd_conform(args: argparse.Namespace) -> int:
    """Lockstep runs of each selected protocol's spec with the implementation: random, or
    every edge of small configurations. Exit 0 only if no protocol had a mismatch."""
    for n in ("examples", "steps"):
        if getattr(args, n) < 1:
            raise ParamError(f"--{n} must be at least 1")
    if not 0 <= args.fault_rate <= 1:
        raise ParamError(f"--fault-rate must be between 0 and 1, not {args.fault_rate}")
    if not 0 <= args.shrink_seconds < float("inf"):
        raise ParamError(f"--shrink-seconds must be a finite number, 0 or more, not "
                         f"{args.shrink_seconds}")
    chosen = selected(args.protocol)
    _check_c_driver(args)
    if args.coverage and args.mutants:
        raise InputError("--coverage and --mutants are separate runs: choose one")
    if args.mutants:
        return _conform_mutants(args, chosen)
    if args.coverage:
        return _conform_coverage(args, chosen)
    if args.replay:
        return _conform_c_replay(args)
    if args.exhaustive and args.param:
        raise ParamError("--exhaustive runs its own configurations: no --param")
    if args.depth is not None and not args.exhaustive:
        raise ParamError("--depth bounds the paths of --exhaustive: it needs --exhaustive")
    if args.depth is not None and args.depth < 1:
        raise ParamError(f"--depth must be at least 1, not {args.depth}")
    params = split_params(chosen, args.param)
    jobs = []
    for proto in chosen:
        try:
            factory = harness_module(proto).resolve(args.impl)
        except ValueError as e:
            raise InputError(f"{e}" if len(chosen) == 1 else f"{proto}: {e}") from None
        mod = protocols.load(proto)
        system = mod.build(parse_assignments(mod.PARAMS, params[proto]))
        if proto == "tagmatch" and not args.exhaustive:
            why = conformance_tagmatch.observes(factory).declines(system.params)
            if why is not None:
                raise InputError(f"--impl {args.impl} cannot express this configuration: "
                                 f"{why}")
        jobs.append((proto, factory, system))
    check_dir(args.trace_dir, "--trace-dir")
    reports, tallies = [], []
    with Progress(enabled=not args.quiet, label="verbspec conform") as progress, \
            _drivers(args) as drivers:
        for proto, factory, system in jobs:
            progress.start(f"{args.impl} against the {proto} spec")
            each = None
            if drivers is not None:
                tallies.append(Tally())
                each = recorder(drivers, system, tallies[-1], args.trace_dir)
            reports.append(_conform_one(args, proto, factory, system, progress.note, each))
            progress.done()
    out = []
    for k, rep in enumerate(reports):
        # each mismatch's trace; a file name of its own for each after the first
        paths = [save_counterexample(t, args.trace_dir, "conform" if n == 0 else f"conform{n}")
                 if t is not None else None for n, (_, t) in enumerate(rep.disagreements)]
        out.append({**rep.as_json(), "trace": paths[0] if paths else None,
                    "traces": paths or None})
        if tallies:
            out[-1]["c_driver"] = tallies[k].as_json()
    report.print_conform(args.impl, reports, out, args.json)
    bad = any(r.mismatch is not None for r in reports) or any(t.mismatch for t in tallies)
    return EXIT_VIOLATION if bad else EXIT_OK


def _check_c_driver(args: argparse.Namespace) -> None:
    """--c-driver, --replay and --driver-cflags: what they need and what they exclude."""
    if args.replay and not args.c_driver:
        raise InputError("--replay replays traces through the C drivers: it needs --c-driver")
    if args.driver_cflags and not args.c_driver:
        raise InputError("--driver-cflags builds the C drivers: it needs --c-driver")
    if not args.c_driver:
        return
    if args.impl != "native":
        raise InputError(f"--c-driver replays through the native engines' C ABI: it needs "
                         f"--impl native, not {args.impl}")
    if args.mutants or args.exhaustive or args.coverage:
        raise InputError("--c-driver replays random runs or --replay files: no --mutants, "
                         "--exhaustive or --coverage")
    if args.replay and args.param:
        raise InputError("--replay runs each trace with its own params: no --param")
    try:
        compiler()
    except BuildError as e:
        raise InputError(f"--c-driver compiles the drivers: {e}") from None


class _NoDrivers:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _drivers(args: argparse.Namespace) -> Any:
    """The C drivers (built on first use) where --c-driver asks for them."""
    if not args.c_driver:
        return _NoDrivers()
    return Drivers(shlex.split(args.driver_cflags))


def _conform_c_replay(args: argparse.Namespace) -> int:
    """--c-driver --replay FILE ...: each ITF trace through the C driver of its protocol."""
    tally, files = Tally(), []
    t0 = time.perf_counter()
    with _drivers(args) as drivers:
        for path in args.replay:
            rep = drivers.replay_file(path)
            tally.add(rep, str(path))
            files.append({"file": str(path), "protocol": rep.protocol, "steps": rep.steps,
                          "mismatch": rep.mismatch})
    tally.seconds = time.perf_counter() - t0
    report.print_c_replay(args.impl, tally, files, args.json)
    return EXIT_VIOLATION if any(f["mismatch"] for f in files) else EXIT_OK


def _native_run(args: argparse.Namespace, chosen: Sequence[str], what: str,
                own: str) -> None:
    """What a run over the native engines' own builds needs: --impl native, no options that
    choose its configurations, and the selected engines built here."""
    if args.impl != "native":
        raise InputError(f"{what}: it needs --impl native, not {args.impl}")
    if args.exhaustive or args.param:
        raise InputError(f"{own}: no --exhaustive or --param")
    for proto in chosen:
        if native.load(proto) is None:
            raise InputError(f"the native {proto} engine is not built here (pip install -e . "
                             f"needs a C compiler)")


def _conform_mutants(args: argparse.Namespace, chosen: Sequence[str]) -> int:
    _native_run(args, chosen, "--mutants holds the native engines' mutants",
                "--mutants runs its own sweeps")
    if shutil.which(os.environ.get("CC") or "cc") is None:
        raise InputError("--mutants compiles each mutant: no C compiler (cc) found")
    t0 = time.perf_counter()
    with Progress(not args.quiet, "verbspec conform --mutants") as progress:
        results = mutants.run_mutants(chosen, progress.start)
    summary = mutants.summary(results, time.perf_counter() - t0)
    report.print_mutants(results, summary, args.json)
    return EXIT_OK if summary["killed"] == summary["mutants"] else EXIT_VIOLATION


def _conform_coverage(args: argparse.Namespace, chosen: Sequence[str]) -> int:
    _native_run(args, chosen, "--coverage measures the native engines",
                "--coverage runs its own drive")
    for tool, what in ((os.environ.get("CC") or "cc", "a C compiler (cc)"), ("gcov", "gcov")):
        if shutil.which(tool) is None:
            raise InputError(f"--coverage compiles the engines with gcov's instrumentation: "
                             f"no {what} found")
    tests = None if args.no_tests else coverage.tests_dir()
    with Progress(not args.quiet, "verbspec conform --coverage") as progress:
        try:
            measured = coverage.measure(chosen, tests, progress.start)
        except coverage.CoverageError as e:
            raise InputError(str(e)) from None
    report.print_coverage(measured, coverage.render, tests is not None, args.json)
    return EXIT_OK if measured.ok else EXIT_VIOLATION


def _conform_one(args: argparse.Namespace, proto: str, factory: Any, system: Any,
                 note: Any, each: Any = None) -> Any:
    mod = harness_module(proto)
    if args.exhaustive:
        return mod.conform_every_edge(factory, args.impl, progress=note,
                                      keep_going=args.keep_going,
                                      depth=args.depth)
    if proto == "gate":
        return mod.conform(system, factory, args.impl, sequences=args.examples,
                           steps=args.steps, seed=args.seed, fault_rate=args.fault_rate,
                           shrink_seconds=args.shrink_seconds, progress=note, each=each,
                           keep_going=args.keep_going)
    # the tag-matching spec has no fault actions: --fault-rate does not apply
    return mod.conform(system, factory, args.impl, sequences=args.examples, steps=args.steps,
                       seed=args.seed, shrink_seconds=args.shrink_seconds, progress=note,
                       each=each, keep_going=args.keep_going)


COMMAND = Command("conform", "hold an implementation of a protocol (the gate ranks, or a "
                             "tag-matching job's endpoints) to the spec: runs of the spec drive "
                             "it in lockstep", arguments, cmd_conform)
