"""``verbspec trace``: an ITF trace drawn as a message-sequence diagram (SVG, or an HTML page);
``verbspec trace validate``: device traces (one JSON-lines file per rank) checked against the
spec."""

from __future__ import annotations

import argparse
from pathlib import Path

from verbspec.proofs.report import EXIT_OK, EXIT_VIOLATION
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import DEFAULTS, InputError, check_dir, check_file
from verbspec.refimpl.cli.registry import EPILOG, Command, Parser
from verbspec.refimpl.traces import validate_gate as tv
from verbspec.refimpl.traces.inferred_calls import InferredCalls
from verbspec.refimpl.traces.profiles import PROFILES, raw_ranks
from verbspec.refimpl.traces.read import TraceInputError, read_pair
from verbspec.refimpl.traces.render import default_output, trace_main
from verbspec.refimpl.traces.validate_tagmatch import validate_tagged
from verbspec.spec.gate.params import PARAMS
from verbspec.spec.params import parse_assignments


def arguments(t: Parser) -> None:
    t.add_argument("file", type=Path, help="an ITF trace written by verbspec")
    t.add_argument("--svg", type=Path, default=None, metavar="OUT",
                   help="output file; None: FILE with .svg, or .html with --html. With "
                        "--html, OUT must not end in .svg (and without it, not in .html)")
    t.add_argument("--html", action="store_true", help="write the SVG inside an HTML page")


def cmd_trace(args: argparse.Namespace) -> int:
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


VALIDATE_EPILOG = EPILOG.replace(
    "  1  a violation: a counterexample trace was written (replay: the trace ends in a\n"
    "     violation, or disagrees with the spec)",
    "  1  a violation: a recorded step the spec does not take (the spec steps up to it\n"
    "     are written as an ITF trace)")


def validate_arguments(v: Parser) -> None:
    v.add_argument("paths", nargs="*", type=Path, metavar="DIR_OR_FILES",
                   help="a directory holding rank0.jsonl and rank1.jsonl, or the two ranks' "
                        "files")
    v.add_argument("--raw", type=Path, action="append", default=[], metavar="DIR_OR_FILE",
                   help="a raw recording ('verbspec trace record': one file per process) "
                        "instead of device traces; repeatable. The program's calls are "
                        "inferred; --profile says how the recording maps onto the spec")
    v.add_argument("--profile", choices=sorted(PROFILES), default=None,
                   help="with --raw: the program the recording is of")
    v.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="with --raw: a gate spec parameter the recording cannot show, "
                        "overriding the profile's value (e.g. timeout_ms=5000)")
    v.add_argument("--json", action="store_true",
                   help='print one JSON object: {"ok", "protocol", "recorded_steps", '
                        '"spec_steps", "gates", "big_gates", "drains", "rank", "line", '
                        '"event", "message", "allowed", "itf", "seconds", ...}')
    v.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="where a gate violation's ITF trace (the spec steps up to it) is "
                        "written")
    v.add_argument("--itf", type=Path, default=None, metavar="OUT",
                   help="for a valid gate run: write the spec's run that explains it to OUT "
                        "as an ITF trace (verbspec trace OUT draws it)")
    v.add_argument("--itf-max-steps", type=int, default=5_000, metavar="N",
                   help="write an ITF trace only when it has at most N spec steps")
    v.add_argument("--strict-completions", action="store_true",
                   help="compare each poll's completions in the spec's CQ order exactly; "
                        "without it a UC send's completion may come after receive "
                        "completions that its message's reply caused")


def cmd_trace_validate(args: argparse.Namespace) -> int:
    """Device traces of one run validated against the protocol's spec."""
    if args.itf_max_steps < 0:
        raise InputError(f"--itf-max-steps {args.itf_max_steps}: expected at least 0")
    if bool(args.raw) == bool(args.paths):
        raise InputError("give device traces (DIR_OR_FILES) or a raw recording (--raw), "
                         "one of the two")
    if bool(args.raw) != bool(args.profile):
        raise InputError("--raw and --profile go together: a raw recording is read through "
                         "the profile of the program recorded")
    if args.param and not args.raw:
        raise InputError("--param is for raw recordings (device traces carry their "
                         "configuration)")
    try:
        if args.raw:
            given = {a.partition("=")[0].strip() for a in args.param}
            values = parse_assignments(PARAMS, args.param)
            ranks = raw_ranks(args.raw, args.profile, {k: values[k] for k in given})
        else:
            ranks = read_pair(args.paths)
        if ranks[0].protocol == "gate":
            check_dir(args.trace_dir, "--trace-dir")
            if args.itf is not None:
                check_file(args.itf, "--itf", inputs=[*args.paths, *args.raw])
            rep = tv.validate_gate(ranks, args.trace_dir, args.itf_max_steps,
                                   late_sends=not args.strict_completions,
                                   validator=InferredCalls if args.raw else tv.GateValidator,
                                   run_itf=args.itf)
        else:
            rep = validate_tagged(ranks)
    except TraceInputError as e:
        raise InputError(str(e)) from None
    report.print_validation(rep, tv.render, args.json)
    return EXIT_OK if rep.ok else EXIT_VIOLATION


COMMAND = Command("trace", "render an ITF trace as a message-sequence diagram ('verbspec trace "
                           "validate' checks device traces against the spec: see its --help)",
                  arguments, cmd_trace)
VALIDATE = Command("trace validate",
                   "validate device traces (one JSON-lines file per rank, docs/verbs.md) against "
                   "the spec: the gate run's every recorded call, post, poll, TCP item and "
                   "result must be a spec step from the state reached; a tagged run's matches, "
                   "MPI order and rendezvous are checked",
                   validate_arguments, cmd_trace_validate, epilog=VALIDATE_EPILOG)
