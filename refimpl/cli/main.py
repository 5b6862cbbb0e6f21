"""The ``verbspec`` command: check the executable specs of two RDMA receive-side protocols (the
gate window and MPI tag matching), replay and draw their traces, run tag-matching scenarios.

Exit codes (a contract for scripts and CI): 0 every invariant proved or held to the stated
bound, 1 a violation (a counterexample trace was written; for ``replay``, the trace ends in a
violation or disagrees with the spec), 2 inconclusive, 3 invalid input, 4 an internal error (a
bug in verbspec, never a verdict about the protocol).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from verbspec.proofs.protocols import CHECKS
from verbspec.proofs.report import (
    DIVERGENCE,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_VIOLATION,
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
from verbspec.proofs.traces import read_trace
from verbspec.spec import protocols
from verbspec.spec.itf import (
    TraceFormatError,
    first_difference,
    shown,
    state_body,
)
from verbspec.spec.lts import InvariantViolation, Trace, replay
from verbspec.spec.params import (
    ParamError,
    Profile,
    check_variants,
    describe,
    parse_assignments,
)

PROTOCOLS = tuple(protocols.MODULES)
DEFAULTS = Options()     # every check option's default, kept with the checkers


def _budget_help(name: str) -> str:
    """A bounded check's default budget, and the one beside a proof."""
    return (f"None: {getattr(DEFAULTS, name):,}, or {BESIDE_A_PROOF[name]:,} beside a proof "
            f"(--method all) unless --thorough")


DESCRIPTION = ("Check executable specs of RDMA receive-side protocols (gate window, MPI tag "
               "matching): prove, bounded-check or explore their invariants; replay and draw "
               "counterexample traces; run tag-matching scenarios.")

EPILOG = """exit codes:
  0  every invariant proved or held to the stated bound (other commands: success)
  1  a violation: a counterexample trace was written (replay: the trace ends in a
     violation, or disagrees with the spec)
  2  inconclusive: a method could not decide
  3  invalid input: bad arguments, parameters, files or output paths
  4  internal error: a bug in verbspec (--debug shows the traceback)"""

REPORT = ("this is a bug in verbspec, not a finding about the protocol or a problem with the "
          "input; please report it with the command line and this message to the verbspec "
          "issue tracker")


class InputError(Exception):
    """An invalid argument found by the CLI's own checks (e.g. an unusable output path)."""


class UsageError(Exception):
    """An argument the parser refuses; carries the parser, whose usage line is printed."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit 3 (invalid input), not argparse's 2, which
    is the code for an inconclusive check."""

    def error(self, message: str) -> Any:
        raise UsageError(self, message)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help; the epilog's layout kept."""


# ------------------------------------------------------------------------------ the parser
def _version() -> str:
    try:
        return metadata.version("verbspec")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> Parser:
    p = Parser(prog="verbspec", description=DESCRIPTION, epilog=EPILOG,
               formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("--debug", action="store_true",
                   help="on an internal error, print the Python traceback")
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on an internal error, print the Python traceback "
                             "(default: False)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                           parser_class=Parser)

    def add(name: str, text: str, **kw: Any) -> Parser:
        return sub.add_parser(name, help=text, description=text, epilog=EPILOG,
                              formatter_class=HelpFormatter, parents=[common], **kw)

    _check_parser(add("check", "prove, bounded-check or explore the protocols' invariants"))
    for name, text in (("variants", "list the named protocol variants"),
                       ("profiles", "list the named profiles: implementations as written, "
                                    "each a set of variants"),
                       ("invariants", "list the named invariants")):
        q = add(name, text)
        q.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all",
                       help="which protocol's")
        q.add_argument("--json", action="store_true", help="print one JSON object")
    d = add("demo", "the gate protocol end to end: two processes arm, exchange gates, drain, "
                    "run a big gate, re-arm and exchange more; then tagged messages, eager and "
                    "rendezvous, with wildcards; every payload verified")
    d.add_argument("--transport", choices=("sim", "verbs"), default="sim",
                   help="sim: two processes over the simulated fabric and a loopback TCP "
                        "socket; verbs: over RDMA devices through pyverbs (--device)")
    d.add_argument("--device", metavar="NAME",
                   help="--transport verbs: rank 0's RDMA device (ibv_devices lists them)")
    d.add_argument("--peer-device", metavar="NAME",
                   help="--transport verbs: rank 1's RDMA device (unset: --device)")
    d.add_argument("--variant", choices=demo_variants(), default="",
                   help="tests and demonstrations only: one gate per rank on the reference "
                        "engine behaving as this spec variant, rank 1 late (the UC drop and "
                        "its gate timeout)")
    d.add_argument("--gates", type=int, default=10_000, metavar="N",
                   help="decode gates before the big gate (N/10 more after it)")
    d.add_argument("--engine", choices=("auto", "native", "python"), default="auto",
                   help="the gate engine: native (C) where built, else python; auto: native "
                        "if built")
    d.add_argument("--json", action="store_true",
                   help='print {"gates", "big_gate_bytes", "tagged_messages", "verified", '
                        '"errors", "gate_latency_us": {"p50", "p99"}, "engine", "transport", '
                        '...}')
    d.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    _bench_parser(add("bench", "benchmarks: tag matching against UCX and a list walk (C), the gate "
                               "channel soak with faults, the native verbs transport against "
                               "ibv_uc_pingpong"))
    pa = add("params", "list a protocol's parameters: defaults, ranges and choices")
    pa.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="gate",
                    help="which protocol's")
    pa.add_argument("--json", action="store_true", help="print one JSON object")

    r = add("replay", "re-run an ITF trace against the spec, checking every recorded state and "
                      "the recorded violation")
    r.add_argument("file", type=Path, help="an ITF trace written by verbspec")
    r.add_argument("--impl", default=None, metavar="refimpl|native|MODULE:FACTORY",
                   help="also run the trace's moves in lockstep with this implementation of "
                        "the trace's protocol, comparing it with the spec at every step "
                        "(native: the protocol's C engine)")
    _conform_parser(add("conform", "hold an implementation of a protocol (the gate ranks, or "
                                   "a tag-matching job's endpoints) to the spec: runs of the "
                                   "spec drive it in lockstep"))
    m = add("match", "run the tag-matching engine on a scenario file")
    m.add_argument("file", help="a scenario JSON file; - reads standard input")
    _regions_parser(add("regions", "prove the gate invariants over a parameter region and "
                                   "refute each condition just outside it"))
    t = add("trace", "render an ITF trace as a message-sequence diagram ('verbspec trace "
                     "validate' checks device traces against the spec: see its --help)")
    t.add_argument("file", type=Path, help="an ITF trace written by verbspec")
    t.add_argument("--svg", type=Path, default=None, metavar="OUT",
                   help="output file; None: FILE with .svg, or .html with --html. With "
                        "--html, OUT must not end in .svg (and without it, not in .html)")
    t.add_argument("--html", action="store_true", help="write the SVG inside an HTML page")
    return p


VALIDATE_EPILOG = EPILOG.replace(
    "  1  a violation: a counterexample trace was written (replay: the trace ends in a\n"
    "     violation, or disagrees with the spec)",
    "  1  a violation: a recorded step the spec does not take (the spec steps up to it\n"
    "     are written as an ITF trace)")


def _validate_parser() -> Parser:
    """``verbspec trace validate``: a parser of its own, since ``verbspec trace FILE`` takes
    any file name as its first argument."""
    text = ("validate device traces (one JSON-lines file per rank, docs/verbs.md) against "
            "the spec: the gate run's every recorded call, post, poll, TCP item and result "
            "must be a spec step from the state reached; a tagged run's matches, MPI order "
            "and rendezvous are checked")
    v = Parser(prog="verbspec trace validate", description=text, epilog=VALIDATE_EPILOG,
               formatter_class=HelpFormatter)
    v.add_argument("paths", nargs="+", type=Path, metavar="DIR_OR_FILES",
                   help="a directory holding rank0.jsonl and rank1.jsonl, or the two ranks' "
                        "files")
    v.add_argument("--json", action="store_true",
                   help='print one JSON object: {"ok", "protocol", "recorded_steps", '
                        '"spec_steps", "gates", "big_gates", "drains", "rank", "line", '
                        '"event", "message", "allowed", "itf", "seconds", ...}')
    v.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="where a gate violation's ITF trace (the spec steps up to it) is "
                        "written")
    v.add_argument("--itf-max-steps", type=int, default=5_000, metavar="N",
                   help="write the ITF trace only when it has at most N spec steps")
    v.add_argument("--strict-completions", action="store_true",
                   help="compare each poll's completions in the spec's CQ order exactly; "
                        "without it a UC send's completion may come after receive "
                        "completions that its message's reply caused")
    v.add_argument("--debug", action="store_true",
                   help="on an internal error, print the Python traceback")
    v.set_defaults(cmd="trace validate")
    return v


def _check_parser(c: Parser) -> None:
    c.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all",
                   help="which protocol to check")
    c.add_argument("--method", choices=(*METHODS, "all"), default="all",
                   help="all: every method that can decide the configuration")
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


def _conform_parser(c: Parser) -> None:
    from verbspec.refimpl.conformance.gate import FAULT_RATE, SHRINK_SECONDS
    from verbspec.refimpl.conformance.gate import PATH_DEPTH as PATH_DEPTH_GATE
    from verbspec.refimpl.conformance.tagmatch import PATH_CONFIGS as PATH_CONFIGS_TAG

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
                        f"{PATH_DEPTH_GATE}; tagmatch each walk's own, "
                        f"{', '.join(str(d) for _, d in PATH_CONFIGS_TAG)})")
    c.add_argument("--steps", type=int, default=3000, help="steps per run at most")
    c.add_argument("--fault-rate", type=float, default=FAULT_RATE,
                   help="probability of a fault at a step where one is enabled")
    c.add_argument("--seed", type=int, default=0,
                   help="seed of Hypothesis's generation of the random runs: the same seed, "
                        "the same runs")
    c.add_argument("--shrink-seconds", type=float, default=SHRINK_SECONDS, metavar="S",
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


def _bench_parser(b: Parser) -> None:
    kinds = b.add_subparsers(dest="bench", required=True, metavar="BENCH", parser_class=Parser,
                             help="match (tag matching), gate (the gate engine per gate), "
                                  "soak (the gate channel with faults) or verbs (the native "
                                  "gate transport against ibv_uc_pingpong on soft-RoCE)")
    m = kinds.add_parser("match", formatter_class=HelpFormatter, epilog=EPILOG,
                         help="tag matching, ns per message: the native tag engine, UCX's "
                              "own matching and a list walk (docs/conformance.md)",
                         description="tag matching, ns per message: the native tag engine, "
                                     "UCX's own matching and a list walk")
    m.add_argument("--min-messages", type=int, default=1_000_000, metavar="M",
                   help="messages per matcher and row at least (rounds of the row's N, at "
                        "least 5; the figure is their median)")
    m.add_argument("--scenario", default=None, metavar="NAME",
                   help="only the rows of this scenario (e.g. unexpected-masked-reversed)")
    m.add_argument("--json", action="store_true",
                   help='print {"rows": [{"scenario", "n", "verbspec_ns", "ucx_ns", '
                        '"listwalk_ns"}]} (null where a matcher was not built)')


    g = kinds.add_parser("gate", formatter_class=HelpFormatter, epilog=EPILOG,
                         help="the gate engine's cost per decode gate: reference, native "
                              "through Python, native from C (docs/benchmarks.md)",
                         description="the gate engine's cost per decode gate: reference, "
                                     "native through Python, native from C")
    g.add_argument("--gates", type=int, default=100_000, metavar="N",
                   help="gates through each Python interface (the C loop runs 100 N)")
    g.add_argument("--json", action="store_true",
                   help='print {"gates", "rows": [{"engine", "interface", "ns_per_gate"}], '
                        '"refimpl_over_native_c"}')
    so = kinds.add_parser("soak", formatter_class=HelpFormatter, epilog=EPILOG,
                          help="the gate channel on the sim transport for a long run with "
                               "random faults and recovery (docs/library.md)",
                          description="the gate channel on the sim transport for a long run "
                                      "with random faults and recovery")
    so.add_argument("--gates", type=int, default=1_000_000, metavar="N",
                    help="gates to exchange at least (the session that reaches N ends the run)")
    so.add_argument("--seed", type=int, default=0, help="the plan of sessions and faults")
    so.add_argument("--engine", choices=("auto", "native", "python"), default="auto",
                    help="the gate engine (auto: native if built)")
    so.add_argument("--json", action="store_true", help="print one JSON object")
    v = kinds.add_parser("verbs", formatter_class=HelpFormatter, epilog=EPILOG,
                         help="in the soft-RoCE guest: the gate round trip of the native verbs "
                              "transport against ibv_uc_pingpong moving the same bytes "
                              "(docs/verbs.md)",
                         description="in the soft-RoCE guest (rxe0 <-> rxe1): the gate round "
                                     "trip of the native verbs transport and ibv_uc_pingpong "
                                     "moving the same bytes each way, alternating, in one run; "
                                     "both medians and their ratio")
    v.add_argument("--gates", type=int, default=3_000, metavar="N",
                   help="gates per repetition (ibv_uc_pingpong runs as many iterations)")
    v.add_argument("--reps", type=int, default=5, metavar="R",
                   help="repetitions, each a gate run then a pingpong run")
    v.add_argument("--vector-bytes", type=int, default=24_576, metavar="B",
                   help="bytes of a gate vector (a multiple of 8, at most 32768: two chunks "
                        "above 16384), and ibv_uc_pingpong's -s")
    v.add_argument("--json", action="store_true",
                   help='print {"gates", "reps", "bytes_each_way", "rows", "gate_us", '
                        '"gate_p50_us", "pingpong_us", "ratio", "seconds", "boot_s"}')


def _regions_parser(g: Parser) -> None:
    g.add_argument("--window-max", type=int, default=256, metavar="N",
                   help="largest window of the region (symbolic in 2..N)")
    g.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="directory for the traces just outside the region")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")


# ------------------------------------------------------------------------------ entry point
def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # paths given as bytes that are not UTF-8 are printed escaped, not raised on
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    validate = argv[:2] == ["trace", "validate"]
    parser = _validate_parser() if validate else _parser()
    try:
        args = parser.parse_args(argv[2:] if validate else argv)
    except UsageError as e:
        e.parser.print_usage(sys.stderr)
        print(f"{e.parser.prog}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as e:         # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return COMMANDS[args.cmd](args)
    except (ParamError, TraceFormatError, InputError) as e:
        print(f"verbspec {args.cmd}: {e}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return _reader_gone(EXIT_OK)
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(f"verbspec {args.cmd}: internal error: {type(e).__name__}: {e}\n"
              f"verbspec {args.cmd}: {REPORT}"
              + ("" if args.debug else " (--debug adds the traceback)"), file=sys.stderr)
        return EXIT_INTERNAL


def _reader_gone(code: int) -> int:
    """Standard output's reader stopped reading (e.g. ``| head``): what it read is what it
    wanted; the rest of the output goes nowhere and the exit code stands."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):   # no file descriptor (e.g. captured in-process)
        pass
    return code


# ------------------------------------------------------------------------------ output paths
def _missing_dirs(path: Path) -> list[Path]:
    """The directories ``mkdir -p path`` would create, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing[::-1]


def check_dir(path: Path, what: str) -> None:
    """Refuse a directory verbspec cannot write files into: tried by creating it (and removing
    what was created) and a temporary file in it, so the answer holds for any user."""
    try:
        made = []
        try:
            for d in _missing_dirs(path):
                d.mkdir()
                made.append(d)
            if not path.is_dir():
                raise InputError(f"{what} {path}: exists and is not a directory")
            with tempfile.TemporaryFile(dir=path):
                pass
        finally:
            for d in reversed(made):
                d.rmdir()
    except OSError as e:
        raise InputError(f"{what} {path}: cannot write there: {e.strerror or e}") from None
    except ValueError as e:     # e.g. a NUL byte in the path
        raise InputError(f"{what} {path!r}: not a usable path: {e}") from None


def check_file(path: Path, what: str, inputs: Sequence[Path] = ()) -> None:
    """Refuse an output file that cannot be written or that is one of the inputs."""
    try:
        for src in inputs:
            if _same_file(path, src):
                raise InputError(f"{what} {path}: is the input {src}; refusing to overwrite it")
        if path.is_dir():
            raise InputError(f"{what} {path}: is a directory")
        if path.exists():
            with open(path, "ab"):     # opened for writing, nothing written
                pass
            return
    except OSError as e:
        raise InputError(f"{what} {path}: cannot write there: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"{what} {path!r}: not a usable path: {e}") from None
    check_dir(path.parent, f"{what}'s directory")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


# ------------------------------------------------------------------------------ check
def _selected(name: str) -> tuple[str, ...]:
    return PROTOCOLS if name == "all" else (name,)


def _split_params(selected: Sequence[str], assignments: Sequence[str]) -> dict[str, list[str]]:
    """Route each NAME=VALUE to the protocol that has NAME; refuse names none has."""
    out: dict[str, list[str]] = {p: [] for p in selected}
    for a in assignments:
        name = a.partition("=")[0].strip()
        owners = [p for p in selected
                  if any(s.name == name for s in protocols.load(p).PARAMS)]
        if not owners:
            raise ParamError(f"unknown parameter {name!r} for protocol "
                             f"{', '.join(selected)}")
        for p in owners:
            out[p].append(a)
    return out


def _route_variants(selected: Sequence[str], names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    known = {p: {v.name for v in protocols.load(p).VARIANTS} for p in selected}
    for n in names:
        if not any(n in k for k in known.values()):
            every = sorted(set().union(*known.values()))
            raise ParamError(f"unknown variant {n!r} (known: {', '.join(every)})")
    for p in selected:
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


def _profile(name: str, selected: Sequence[str]) -> tuple[str, Profile]:
    """The protocol that has the named profile, and the profile."""
    found = [(p, f) for p in selected for f in protocols.load(p).PROFILES if f.name == name]
    if not found:
        every = sorted(f.name for p in selected for f in protocols.load(p).PROFILES)
        raise ParamError(f"unknown profile {name!r} (known: {', '.join(every) or 'none'})")
    return found[0]


def cmd_check(args: argparse.Namespace) -> int:
    selected = _selected(args.protocol)
    if args.profile is not None:
        owner, profile = _profile(args.profile, selected)
        selected = (owner,)
        args.variant = [*profile.variants, *args.variant]
        args.param = [*profile.params, *args.param]
    else:
        profile = None
    params = _split_params(selected, args.param)
    variants = _route_variants(selected, args.variant)
    if args.variant and len(selected) > 1:
        # a variant changes one protocol; check only the protocols it belongs to
        selected = tuple(p for p in selected if variants[p])
    values = {p: parse_assignments(protocols.load(p).PARAMS, params[p]) for p in selected}
    for p in selected:       # validate before any long run
        protocols.load(p).build(values[p], variants[p])
    _check_budgets(args)
    check_dir(args.trace_dir, "--trace-dir")
    if args.junit is not None:
        check_file(args.junit, "--junit")
    if args.hypothesis_dir is not None:
        check_dir(args.hypothesis_dir, "--hypothesis-dir")

    from verbspec.refimpl.progress import Progress

    with Progress(enabled=not args.quiet, label="verbspec check") as progress:
        # the budgets the main job sizes, as given on the command line
        budgets = {k: getattr(args, k) for k in BESIDE_A_PROOF if getattr(args, k) is not None}
        opts = Options(steps=args.steps, seed=args.seed, depth=args.depth,
                       max_states=args.max_states, trace_dir=args.trace_dir,
                       progress=progress.note, hypothesis_dir=args.hypothesis_dir,
                       profile=profile, **budgets)
        # the main job: bounded checks beside a proof take the smaller budgets (but for those
        # given); --thorough, or a method asked for by name, keeps the full ones
        beside = ({} if args.thorough or args.method != "all" else
                  {k: v for k, v in BESIDE_A_PROOF.items() if k not in budgets})
        with shared_fixpoints():
            run = _run_checks(args.method, selected, values, variants, opts, progress, beside)
        if run is None:
            return EXIT_INPUT
        results, skipped = run
        code = exit_code(results)
        progress.summary(results, code)
    try:
        _report(args, results, skipped, values, variants, selected, code)
    except BrokenPipeError:
        return _reader_gone(code)
    return code


CheckRun = tuple[list[Result], list[dict[str, str]]]


def _run_checks(method_arg: str, selected: Sequence[str], values: dict[str, dict[str, Any]],
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
    scope = {(p, m): CHECKS[p].scope(m, values[p], variants[p]) for p in selected
             for m in methods}
    apart: dict[str, ProverApart] = {}
    if method_arg == "all" and default_workers() > 1:
        for p in selected:
            if CHECKS[p].proves_apart and CHECKS[p].prove and not scope[(p, "prove")]:
                progress.note(f"{p}: prove started beside the other checks")
                apart[p] = ProverApart(p, values[p], variants[p], opts)
    try:
        for p in selected:
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
    finally:
        for prover in apart.values():    # nothing left running after an error or interrupt
            prover.stop()


def _report(args: argparse.Namespace, results: list[Result], skipped: list[dict[str, str]],
            values: dict[str, dict[str, Any]], variants: dict[str, tuple[str, ...]],
            selected: Sequence[str], code: int) -> None:
    if args.junit is not None:
        args.junit.parent.mkdir(parents=True, exist_ok=True)
        args.junit.write_text(junit_xml(results, _not_run(skipped, values, variants)),
                              encoding="utf-8")
    if args.json:
        shown_params: Any = values[selected[0]] if len(selected) == 1 else values
        print(json.dumps({"results": [r.as_json() for r in results], "params": shown_params,
                          "variants": {p: list(variants[p]) for p in selected},
                          "profile": args.profile, "skipped": skipped}, indent=1))
        return
    from verbspec.refimpl.progress import print_results

    print_results(results, code)
    for s in skipped:
        print(f"{s['protocol']}: {s['method']} skipped: {s['reason']}")


def _not_run(skipped: list[dict[str, str]], values: dict[str, dict[str, Any]],
             variants: dict[str, tuple[str, ...]]) -> list[NotRun]:
    """The skipped methods as one entry per invariant, for the JUnit report."""
    out = []
    for s in skipped:
        p = s["protocol"]
        system = protocols.load(p).build(values[p], variants[p])
        out += [NotRun(p, s["method"], inv.name, s["reason"]) for inv in system.invariants]
    return out


# ------------------------------------------------------------------------------ listings
def _listing(args: argparse.Namespace, rows: list[dict[str, Any]],
             line: Callable[[dict[str, Any]], str]) -> int:
    if args.json:
        print(json.dumps({args.cmd: rows}, indent=1))
    else:
        for row in rows:
            print(line(row))
    return EXIT_OK


def cmd_variants(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": v.name, "changes": v.changes, "breaks": v.breaks}
            for p in _selected(args.protocol) for v in protocols.load(p).VARIANTS]
    return _listing(args, rows, lambda r: f"{r['protocol']:9} {r['name']:26} changes: "
                                          f"{r['changes']}; breaks: {r['breaks']}")


def cmd_profiles(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": f.name, "describes": f.describes,
             "variants": [{"name": v, "where": w} for v, w in f.members],
             "params": list(f.params)}
            for p in _selected(args.protocol) for f in protocols.load(p).PROFILES]
    return _listing(args, rows, lambda r: f"{r['protocol']:9} {r['name']}: {r['describes']}\n"
                    + "\n".join(f"{'':10}{v['name']:26} {v['where']}" for v in r["variants"])
                    + "".join(f"\n{'':10}--param {a}" for a in r["params"]))


def cmd_params(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, **describe(s)}
            for p in _selected(args.protocol) for s in protocols.load(p).PARAMS]
    return _listing(args, rows, lambda r: f"{r['protocol']:9} {r['name']:24} "
                                          f"{r['default']!s:>10}  {r['range']:>14}  {r['doc']}")


def cmd_invariants(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": inv.name, "over": inv.over, "doc": inv.doc}
            for p in _selected(args.protocol) for inv in protocols.load(p).build({}, ()).invariants]
    return _listing(args, rows, lambda r: f"{r['protocol']:9} {r['name']:26} {r['doc']}")


# ------------------------------------------------------------------------------ replay
def cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a trace's moves on the spec built from the trace's own params and variants;
    compare every recorded state with the replayed one and the recorded violation with the
    replay's."""
    meta, moves, recorded = read_trace(args.file)
    proto = meta.get("protocol")
    if proto not in protocols.MODULES:
        raise TraceFormatError(f"$.#meta.protocol: unknown protocol {proto!r}")
    variants = tuple(meta.get("variants", ()))
    system = protocols.load(proto).build(meta.get("params", {}), variants)
    if args.impl is not None:
        return _replay_impl(args.impl, proto, system, moves)
    t0 = time.perf_counter()
    violation = None
    said = meta.get("violation")
    try:
        trace = replay(system, moves, variants)
    except ValueError as e:
        raise TraceFormatError(f"{args.file}: {e}") from None
    except InvariantViolation as e:
        trace, violation = e.trace, e
    if said == DIVERGENCE and proto == "gate":
        return _replay_divergence(trace, recorded, violation)
    from verbspec.refimpl.conformance.gate import CONFORMANCE

    if said == CONFORMANCE:
        problem = disagreement(trace, recorded, None, violation)
        if problem is not None:
            print(f"replay disagrees with the trace: {problem}")
        else:
            print(f"replayed {len(trace) - 1} steps: the spec agrees with every recorded state; "
                  f"the trace records an implementation differing at its last step (--impl "
                  f"NAME re-runs an implementation on it)")
        return EXIT_VIOLATION
    problem = disagreement(trace, recorded, said, violation)
    if problem is not None:
        print(f"replay disagrees with the trace: {problem}")
        return EXIT_VIOLATION
    if violation is not None:
        print(f"replayed {len(trace) - 1} steps: {violation.invariant} violated: "
              f"{violation.message}")
        return EXIT_VIOLATION
    print(f"replayed {len(trace) - 1} steps in {time.perf_counter() - t0:.3f}s: "
          f"every invariant held")
    return EXIT_OK


def _replay_divergence(trace: Trace, recorded: list[dict[str, Any]],
                       violation: InvariantViolation | None) -> int:
    """A trace where the gate model and the spec parted ways: the spec's states replayed,
    then every step checked against the model as it is now."""
    from verbspec.proofs.gate.refinement import first_divergence

    problem = disagreement(trace, recorded, None, violation)
    if problem is not None:
        print(f"replay disagrees with the trace: {problem}")
        return EXIT_VIOLATION
    found = first_divergence(trace)
    if found is None:
        print(f"replay disagrees with the trace: it records the model diverging from the "
              f"spec at step {len(trace) - 1}; the model now takes every step")
        return EXIT_VIOLATION
    step, what = found
    print(f"replayed {len(trace) - 1} steps: the z3 model diverges from the spec at step "
          f"{step}: {what}")
    return EXIT_VIOLATION


def disagreement(trace: Trace, recorded: list[dict[str, Any]], said: str | None,
                 violation: InvariantViolation | None) -> str | None:
    """Where a replay differs from the trace it replayed: the first state that differs (its
    first differing field), or a violation recorded but not reproduced at the recorded (last)
    step, or one the replay meets that the trace does not record there. None if they agree."""
    for i, step in enumerate(trace.steps):
        diff = first_difference(recorded[i], state_body(step.state), f"$.states[{i}]")
        if diff is not None:
            where, a, b = diff
            return f"{where}: trace says {shown(a)} at step {i}; replay gives {shown(b)}"
    last = len(recorded) - 1
    got_at = len(trace) - 1
    if violation is None:
        if said is None:
            return None
        return (f"trace says {said} violated at step {last}; replay gives every invariant "
                f"held through step {last}")
    if got_at == last and violation.invariant == said:
        return None
    if got_at < last:
        expected = f"no violation (it records {said} at step {last})" if said else \
            "no violation"
    else:
        expected = f"{said} violated" if said else "no violation"
    return (f"trace says {expected} at step {got_at}; replay gives {violation.invariant} "
            f"violated at step {got_at}: {violation.message}")


# ------------------------------------------------------------------------------ the others
def cmd_match(args: argparse.Namespace) -> int:
    from verbspec.refimpl.cli.scenario import match_main

    return match_main(args.file)


def _gate_run(args: argparse.Namespace) -> None:
    """The checks shared by the commands that run gate channels: --gates and --engine."""
    from verbspec.refimpl.bindings import engine_choice as engines

    if args.gates < 1:
        raise ParamError("--gates must be at least 1")
    try:
        engines.check_engine(args.engine)
    except engines.EngineUnavailable as e:
        raise InputError(str(e)) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from verbspec.refimpl.cli.demo import demo_main

    _gate_run(args)
    if args.transport == "verbs":
        _verbs_devices(args.device, args.peer_device)
    elif args.device or args.peer_device:
        raise InputError("--device and --peer-device are for --transport verbs")
    if args.variant and args.engine == "native":
        raise InputError(f"--variant {args.variant}: the variant engines are the Python "
                         f"reference engine changed; use --engine python (or auto)")
    return demo_main(args.gates, args.engine, args.json, args.quiet, args.transport,
                     args.device, args.peer_device, args.variant)


def demo_variants() -> tuple[str, ...]:
    from verbspec.refimpl.cli.demo import VARIANTS

    return VARIANTS


def _verbs_devices(device: str | None, peer: str | None) -> None:
    """--transport verbs: pyverbs importable, --device given, both devices present."""
    if not device:
        raise InputError("--transport verbs needs --device NAME (an RDMA device; ibv_devices "
                         "lists them)")
    try:
        from pyverbs.device import get_device_list
    except ImportError as e:
        raise InputError(f"--transport verbs needs pyverbs, which cannot be imported ({e}): "
                         f"install python3-pyverbs and put its directory "
                         f"(/usr/lib/python3/dist-packages) on PYTHONPATH") from None
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name)
             for d in get_device_list()]
    for opt, name in (("--device", device), ("--peer-device", peer)):
        if name and name not in names:
            raise InputError(f"{opt} {name}: no such RDMA device here (devices: "
                             f"{', '.join(names) or 'none'})")


def cmd_bench(args: argparse.Namespace) -> int:
    from verbspec.refimpl.cli import bench

    if args.bench == "soak":
        return _soak(args)
    if args.bench == "verbs":
        return _bench_verbs(args)
    if args.bench == "gate":
        if args.gates < 1:
            raise ParamError("--gates must be at least 1")
        try:
            return bench.gate_main(args.gates, args.json)
        except bench.BenchError as e:
            raise InputError(str(e)) from None
    if args.min_messages < 1:
        raise ParamError("--min-messages must be at least 1")
    try:
        return bench.match_main(args.min_messages, args.scenario, args.json)
    except bench.BenchError as e:
        raise InputError(str(e)) from None


def _bench_verbs(args: argparse.Namespace) -> int:
    from verbspec.refimpl.rxe import guest as rxe_guest
    from verbspec.refimpl.rxe import native_programs as verbs_native

    if args.gates < 1 or args.reps < 1:
        raise ParamError("--gates and --reps must be at least 1")
    if not 8 <= args.vector_bytes <= 32768 or args.vector_bytes % 8:
        raise ParamError(f"--vector-bytes {args.vector_bytes}: expected a multiple of 8 in "
                         f"8..32768")
    plan = verbs_native.BenchPlan(args.gates, args.reps, args.vector_bytes)
    try:
        return verbs_native.bench_main(plan, args.json, Path.cwd())
    except (verbs_native.BuildError, verbs_native.VerbsRunError,
            rxe_guest.RxeGuestError) as e:
        raise InputError(f"bench verbs: {e}") from None


def _soak(args: argparse.Namespace) -> int:
    from verbspec.refimpl.cli.soak import soak_main

    _gate_run(args)
    return soak_main(args.gates, args.seed, args.engine, args.json)


def cmd_regions(args: argparse.Namespace) -> int:
    from verbspec.refimpl.cli.regions import regions_main

    check_dir(args.trace_dir, "--trace-dir")
    return regions_main(args)


def cmd_trace(args: argparse.Namespace) -> int:
    from verbspec.refimpl.traces.render import default_output, trace_main

    try:
        out = args.svg or default_output(args.file, args.html)
    except ValueError:      # e.g. an empty name: nothing to put the extension on
        raise InputError(f"{str(args.file)!r}: no output name follows from it; give --svg OUT"
                         ) from None
    suffix = out.suffix.lower()
    if args.html and suffix == ".svg":
        raise InputError(f"--svg {out}: --html writes an HTML page; give an output ending in "
                         f".html, or drop --html for an SVG")
    if not args.html and suffix in (".html", ".htm"):
        raise InputError(f"--svg {out}: writes an SVG; add --html for an HTML page")
    check_file(out, "output", inputs=[args.file])
    args.svg = out
    return trace_main(args)


def cmd_trace_validate(args: argparse.Namespace) -> int:
    """Device traces of one run validated against the protocol's spec."""
    from verbspec.refimpl.traces import validate_gate as tv
    from verbspec.refimpl.traces.read import TraceInputError, read_pair

    if args.itf_max_steps < 0:
        raise InputError(f"--itf-max-steps {args.itf_max_steps}: expected at least 0")
    try:
        ranks = read_pair(args.paths)
        if ranks[0].protocol == "gate":
            check_dir(args.trace_dir, "--trace-dir")
            rep = tv.validate_gate(ranks, args.trace_dir, args.itf_max_steps,
                                   late_sends=not args.strict_completions)
        else:
            from verbspec.refimpl.traces.validate_tagmatch import validate_tagged

            rep = validate_tagged(ranks)
    except TraceInputError as e:
        raise InputError(str(e)) from None
    if args.json:
        print(json.dumps(rep.as_json()))
    else:
        print(tv.render(rep))
    return EXIT_OK if rep.ok else EXIT_VIOLATION


def cmd_conform(args: argparse.Namespace) -> int:
    """Lockstep runs of each selected protocol's spec with the implementation: random, or
    every edge of small configurations. Exit 0 only if no protocol had a mismatch."""
    from verbspec.proofs.traces import save_counterexample
    from verbspec.refimpl.progress import Progress

    for n in ("examples", "steps"):
        if getattr(args, n) < 1:
            raise ParamError(f"--{n} must be at least 1")
    if not 0 <= args.fault_rate <= 1:
        raise ParamError(f"--fault-rate must be between 0 and 1, not {args.fault_rate}")
    if not 0 <= args.shrink_seconds < float("inf"):
        raise ParamError(f"--shrink-seconds must be a finite number, 0 or more, not "
                         f"{args.shrink_seconds}")
    selected = _selected(args.protocol)
    _check_c_driver(args)
    if args.coverage and args.mutants:
        raise InputError("--coverage and --mutants are separate runs: choose one")
    if args.mutants:
        return _conform_mutants(args, selected)
    if args.coverage:
        return _conform_coverage(args, selected)
    if args.replay:
        return _conform_c_replay(args)
    if args.exhaustive and args.param:
        raise ParamError("--exhaustive runs its own configurations: no --param")
    if args.depth is not None and not args.exhaustive:
        raise ParamError("--depth bounds the paths of --exhaustive: it needs --exhaustive")
    if args.depth is not None and args.depth < 1:
        raise ParamError(f"--depth must be at least 1, not {args.depth}")
    params = _split_params(selected, args.param)
    jobs = []
    for proto in selected:
        try:
            factory = _conform_module(proto).resolve(args.impl)
        except ValueError as e:
            raise InputError(f"{e}" if len(selected) == 1 else f"{proto}: {e}") from None
        mod = protocols.load(proto)
        system = mod.build(parse_assignments(mod.PARAMS, params[proto]))
        if proto == "tagmatch" and not args.exhaustive:
            from verbspec.refimpl.conformance.tagmatch import observes

            why = observes(factory).declines(system.params)
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
                from verbspec.refimpl.conformance.c_replay import Tally, recorder

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
    if args.json:
        print(json.dumps(out[0] if len(out) == 1 else
                         {"results": out, "mismatches": sum(o["mismatches"] for o in out)},
                         indent=1))
    else:
        for rep, o in zip(reports, out, strict=True):
            sw = rep.sweep
            what = (f"every edge of {sw['configs']} configurations: {sw['states']:,} states, "
                    f"{sw['edges']:,} edges, breadth-first depth {sw['bfs_depth']}; every path "
                    f"of {sw['path_configs']} up to {'/'.join(map(str, sw['walk_depths']))} "
                    f"steps: {sw['paths']:,} paths through {sw['path_states']:,} states" if sw
                    else f"{rep.sequences} runs, {rep.steps:,} steps")
            print(f"{args.impl} against the {rep.protocol} spec: {what}, {len(rep.actions)} "
                  f"of {rep.actions_total} actions, {rep.seconds:.1f}s")
            _print_partial(rep)
            for (m, _), path in zip(rep.disagreements, o["traces"] or (), strict=True):
                print(f"mismatch: {m}\n  trace: {path}")
            if rep.mismatch is None:
                print("no mismatch")
            if "c_driver" in o:
                _print_c_driver(rep.protocol, o["c_driver"])
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
    from verbspec.refimpl.bindings.cprogram import BuildError, compiler

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
    import shlex

    from verbspec.refimpl.conformance.c_replay import Drivers

    return Drivers(shlex.split(args.driver_cflags))


def _print_c_driver(protocol: str, c: dict[str, Any]) -> None:
    print(f"C driver, {protocol}: {c['traces']} traces replayed, {c['steps']:,} steps, "
          f"{c['seconds']:.1f}s")
    if c["mismatch"]:
        print(f"C driver mismatch: {c['mismatch']}\n  trace: {c['trace']}")
    else:
        print("C driver: no mismatch")


def _conform_c_replay(args: argparse.Namespace) -> int:
    """--c-driver --replay FILE ...: each ITF trace through the C driver of its protocol."""
    from verbspec.refimpl.conformance.c_replay import Tally

    tally, files = Tally(), []
    t0 = time.perf_counter()
    with _drivers(args) as drivers:
        for path in args.replay:
            rep = drivers.replay_file(path)
            tally.add(rep, str(path))
            files.append({"file": str(path), "protocol": rep.protocol, "steps": rep.steps,
                          "mismatch": rep.mismatch})
    tally.seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"impl": args.impl, "c_driver": tally.as_json(), "files": files},
                         indent=1))
    else:
        for f in files:
            what = f"mismatch: {f['mismatch']}" if f["mismatch"] else \
                f"agreed on {f['steps']:,} steps"
            print(f"{f['file']} ({f['protocol']}): {what}")
        print(f"C driver: {tally.traces} traces, {tally.steps:,} steps, "
              f"{int(tally.mismatch is not None)} with a mismatch, {tally.seconds:.1f}s")
    return EXIT_VIOLATION if any(f["mismatch"] for f in files) else EXIT_OK


def _print_partial(rep: Any) -> None:
    """What a partial implementation does not show, the configurations it could not run, and
    its agreement: the cases (runs, or configurations swept) that ran to the end without a
    mismatch."""
    if not rep.unobserved and not rep.declined:
        return
    for what, why in rep.unobserved.items():
        print(f"not compared: {what}: {why}")
    for config, why in rep.declined.items():
        print(f"declined: {config}: {why}")
    cases = rep.sweep["configs"] if rep.sweep else rep.sequences
    kind = "configurations" if rep.sweep else "runs"
    print(f"agreement: {cases - rep.disagreed} of {cases} {kind}; disagreements: "
          f"{rep.disagreed}")


def _conform_module(proto: str) -> Any:
    """The conformance harness module of a protocol."""
    if proto == "gate":
        from verbspec.refimpl.conformance import gate as conformance
        return conformance
    from verbspec.refimpl.conformance import tagmatch as conformance_tagmatch
    return conformance_tagmatch


def _native_run(args: argparse.Namespace, selected: Sequence[str], what: str,
                own: str) -> None:
    """What a run over the native engines' own builds needs: --impl native, no options that
    choose its configurations, and the selected engines built here."""
    from verbspec import native

    if args.impl != "native":
        raise InputError(f"{what}: it needs --impl native, not {args.impl}")
    if args.exhaustive or args.param:
        raise InputError(f"{own}: no --exhaustive or --param")
    for proto in selected:
        if native.load("gate" if proto == "gate" else "tag") is None:
            raise InputError(f"the native {proto} engine is not built here (pip install -e . "
                             f"needs a C compiler)")


def _conform_mutants(args: argparse.Namespace, selected: Sequence[str]) -> int:
    from verbspec.refimpl.conformance import mutants
    from verbspec.refimpl.progress import Progress

    _native_run(args, selected, "--mutants holds the native engines' mutants",
                "--mutants runs its own sweeps")
    if shutil.which(os.environ.get("CC") or "cc") is None:
        raise InputError("--mutants compiles each mutant: no C compiler (cc) found")
    t0 = time.perf_counter()
    with Progress(not args.quiet, "verbspec conform --mutants") as progress:
        results = mutants.run_mutants(selected, progress.start)
    report = mutants.summary(results, time.perf_counter() - t0)
    if args.json:
        print(json.dumps(report))
    else:
        for r in results:
            how = f"killed ({r.by}): {r.mismatch}" if r.killed else "SURVIVED"
            print(f"{r.protocol} mutant {r.mutant}: {how} [{r.seconds} s]")
        print(f"{report['killed']} of {report['mutants']} mutants killed in "
              f"{report['seconds']} s")
    return EXIT_OK if report["killed"] == report["mutants"] else EXIT_VIOLATION


def _conform_coverage(args: argparse.Namespace, selected: Sequence[str]) -> int:
    from verbspec.refimpl.conformance import coverage
    from verbspec.refimpl.progress import Progress

    _native_run(args, selected, "--coverage measures the native engines",
                "--coverage runs its own drive")
    for tool, what in ((os.environ.get("CC") or "cc", "a C compiler (cc)"), ("gcov", "gcov")):
        if shutil.which(tool) is None:
            raise InputError(f"--coverage compiles the engines with gcov's instrumentation: "
                             f"no {what} found")
    tests = None if args.no_tests else coverage.tests_dir()
    with Progress(not args.quiet, "verbspec conform --coverage") as progress:
        try:
            report = coverage.measure(selected, tests, progress.start)
        except coverage.CoverageError as e:
            raise InputError(str(e)) from None
    if args.json:
        print(json.dumps(report.as_json()))
    else:
        print(coverage.render(report))
        ran = ", ".join(f"{k} {v}" for k, v in report.drive.items())
        print(f"\ndrive: {ran or 'nothing'}"
              + ("" if tests is not None else " (no native tests: not a source tree, or "
                 "--no-tests)") + f"; {report.seconds:.0f} s")
        if not report.ok:
            print(f"the drive failed: {report.failure}")
    return EXIT_OK if report.ok else EXIT_VIOLATION


def _conform_one(args: argparse.Namespace, proto: str, factory: Any, system: Any,
                 note: Any, each: Any = None) -> Any:
    mod = _conform_module(proto)
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


def _replay_impl(impl: str, proto: str, system: Any,
                 moves: list[tuple[str, dict[str, Any]]]) -> int:
    """A trace's moves in lockstep with an implementation of the trace's protocol."""
    mod = _conform_module(proto)
    harness = mod.GateHarness if proto == "gate" else mod.TagmatchHarness
    try:
        run = harness(system, mod.resolve(impl)).follow(moves)
    except ValueError as e:
        raise InputError(str(e)) from None
    if run.mismatch is not None:
        print(f"{impl} differs from the spec: {run.mismatch}")
        return EXIT_VIOLATION
    print(f"{impl} agreed with the spec on all {run.steps} steps")
    return EXIT_OK


COMMANDS = {"check": cmd_check, "conform": cmd_conform, "variants": cmd_variants,
            "profiles": cmd_profiles, "params": cmd_params, "invariants": cmd_invariants,
            "replay": cmd_replay, "bench": cmd_bench, "demo": cmd_demo,
            "match": cmd_match, "regions": cmd_regions, "trace": cmd_trace,
            "trace validate": cmd_trace_validate}

if __name__ == "__main__":
    sys.exit(main())
