"""The ``verbspec`` command.

Exit codes (design contract): 0 every invariant proved or held to the stated bound, 1 a violation
(a counterexample trace was written), 2 inconclusive, 3 invalid input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verbspec.proofs.protocols import CHECKS
from verbspec.proofs.report import EXIT_INPUT, EXIT_OK, Result, exit_code
from verbspec.proofs.run import METHODS, MethodUnavailable, Options, run_method
from verbspec.proofs.traces import read_moves
from verbspec.spec import protocols
from verbspec.spec.itf import TraceFormatError
from verbspec.spec.lts import InvariantViolation, replay
from verbspec.spec.params import ParamError, check_variants, parse_assignments

PROTOCOLS = tuple(protocols.MODULES)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verbspec", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("check", help="prove, bounded-check or explore the protocols' invariants")
    c.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all")
    c.add_argument("--method", choices=(*METHODS, "all"), default="all",
                   help="all: every method the protocol has")
    c.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    c.add_argument("--variant", action="append", default=[], metavar="NAME")
    c.add_argument("--examples", type=int, default=300, help="explore: Hypothesis examples")
    c.add_argument("--steps", type=int, default=400, help="explore: steps per example")
    c.add_argument("--seed", type=int, default=None,
                   help="explore: random seed (default: derandomized, reproducible); bmc: "
                        "seed of its random walks (default 0)")
    c.add_argument("--depth", type=int, default=None, help="bmc: trace length bound")
    c.add_argument("--max-states", type=int, default=400_000, help="bmc: state budget")
    c.add_argument("--fault-free-max-states", type=int, default=100_000,
                   help="bmc: state budget of the fault-free phase (protocols that have one)")
    c.add_argument("--one-fault-max-states", type=int, default=100_000,
                   help="bmc: state budget of the one-fault phase (protocols that have one)")
    c.add_argument("--walks", type=int, default=100,
                   help="bmc: fault-free random walks of the last phase, after the searches "
                        "(protocols that have one; 0: none)")
    c.add_argument("--trace-dir", type=Path, default=Path("verbspec-traces"))
    c.add_argument("--json", action="store_true", help="print one JSON object")

    v = sub.add_parser("variants", help="list the named protocol variants")
    v.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all")

    pa = sub.add_parser("params", help="list a protocol's parameters and defaults")
    pa.add_argument("--protocol", choices=PROTOCOLS, default="gate")

    inv = sub.add_parser("invariants", help="list the named invariants")
    inv.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all")

    r = sub.add_parser("replay", help="re-run an ITF trace against the spec")
    r.add_argument("file", type=Path)

    m = sub.add_parser("match", help="run the tag-matching engine on a scenario file")
    m.add_argument("file")

    g = sub.add_parser("regions", help="prove the gate invariants over a parameter region and "
                                       "refute each condition just outside it")
    g.add_argument("--window-max", type=int, default=256, metavar="N",
                   help="largest window of the region (symbolic in 2..N)")
    g.add_argument("--trace-dir", type=Path, default=Path("verbspec-traces"))
    g.add_argument("--json", action="store_true", help="print one JSON object")

    t = sub.add_parser("trace", help="render an ITF trace as a message-sequence diagram")
    t.add_argument("file", type=Path)
    t.add_argument("--svg", type=Path, default=None, metavar="OUT",
                   help="output file (default: FILE with .svg, or .html with --html)")
    t.add_argument("--html", action="store_true", help="write the SVG inside an HTML page")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except (ParamError, TraceFormatError) as e:
        print(f"verbspec {args.cmd}: {e}", file=sys.stderr)
        return EXIT_INPUT


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


def cmd_check(args: argparse.Namespace) -> int:
    selected = _selected(args.protocol)
    params = _split_params(selected, args.param)
    variants = _route_variants(selected, args.variant)
    if args.variant and len(selected) > 1:
        # a variant changes one protocol; check only the protocols it belongs to
        selected = tuple(p for p in selected if variants[p])
    values = {p: parse_assignments(protocols.load(p).PARAMS, params[p]) for p in selected}
    for p in selected:       # validate before any long run
        protocols.load(p).build(values[p], variants[p])
    for n, lo in (("examples", 1), ("steps", 1), ("max_states", 1),
                  ("fault_free_max_states", 1), ("one_fault_max_states", 1), ("walks", 0)):
        if getattr(args, n) < lo:
            raise ParamError(f"--{n.replace('_', '-')} must be at least {lo}")
    if args.depth is not None and args.depth < 1:
        raise ParamError("--depth must be at least 1")

    from verbspec.refimpl.progress import Progress

    results: list[Result] = []
    skipped: list[dict[str, str]] = []
    with Progress(enabled=not args.json) as progress:
        opts = Options(examples=args.examples, steps=args.steps, seed=args.seed,
                       depth=args.depth, max_states=args.max_states,
                       fault_free_max_states=args.fault_free_max_states,
                       one_fault_max_states=args.one_fault_max_states, walks=args.walks,
                       trace_dir=args.trace_dir,
                       progress=progress.note)
        for p in selected:
            methods = METHODS if args.method == "all" else (args.method,)
            for method in methods:
                why = CHECKS[p].scope(method, values[p], variants[p])
                if why and args.method == "all":
                    # "all" runs what can decide this configuration; asked for by name, the
                    # method runs and reports inconclusive, saying why
                    skipped.append({"protocol": p, "method": method, "reason": why})
                    progress.note(f"{p}: {method} skipped: {why}")
                    continue
                progress.start(f"{p}: {method}")
                try:
                    results += run_method(p, method, values[p], variants[p], opts)
                except MethodUnavailable as e:
                    if args.method != "all":
                        progress.stop()
                        print(f"verbspec check: {e}", file=sys.stderr)
                        return EXIT_INPUT
                    progress.note(str(e))
                progress.done()
    code = exit_code(results)
    if args.json:
        shown: Any = values[selected[0]] if len(selected) == 1 else values
        print(json.dumps({"results": [r.as_json() for r in results], "params": shown,
                          "variants": {p: list(variants[p]) for p in selected},
                          "skipped": skipped}, indent=1))
    else:
        from verbspec.refimpl.progress import print_results

        print_results(results, code)
        for s in skipped:
            print(f"{s['protocol']}: {s['method']} skipped: {s['reason']}")
    return code


def cmd_variants(args: argparse.Namespace) -> int:
    for p in _selected(args.protocol):
        for v in protocols.load(p).VARIANTS:
            print(f"{p:9} {v.name:26} changes: {v.changes}; breaks: {v.breaks}")
    return EXIT_OK


def cmd_params(args: argparse.Namespace) -> int:
    for s in protocols.load(args.protocol).PARAMS:
        print(f"{s.name:24} {s.default!s:>10}  {s.doc}")
    return EXIT_OK


def cmd_invariants(args: argparse.Namespace) -> int:
    for p in _selected(args.protocol):
        system = protocols.load(p).build({}, ())
        for inv in system.invariants:
            print(f"{p:9} {inv.name:26} {inv.doc}")
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a trace's moves on the spec built from the trace's own params and variants."""
    meta, moves = read_moves(args.file)
    proto = meta.get("protocol")
    if proto not in protocols.MODULES:
        raise TraceFormatError(f"$.#meta.protocol: unknown protocol {proto!r}")
    params = meta.get("params", {})
    if not isinstance(params, dict):
        raise TraceFormatError("$.#meta.params: not an object")
    variants = tuple(meta.get("variants", ()))
    system = protocols.load(proto).build(params, variants)
    t0 = time.perf_counter()
    try:
        trace = replay(system, moves, variants)
    except ValueError as e:
        raise TraceFormatError(f"{args.file}: {e}") from None
    except InvariantViolation as e:
        print(f"replayed {len(e.trace) - 1} steps: {e.invariant} violated: {e.message}")
        return 1
    print(f"replayed {len(trace) - 1} steps in {time.perf_counter() - t0:.3f}s: "
          f"every invariant held")
    return EXIT_OK


def cmd_match(args: argparse.Namespace) -> int:
    from verbspec.refimpl.scenario import match_main

    return match_main(args.file)


def cmd_regions(args: argparse.Namespace) -> int:
    from verbspec.refimpl.regions import regions_main

    return regions_main(args)


def cmd_trace(args: argparse.Namespace) -> int:
    from verbspec.refimpl.render import trace_main

    return trace_main(args)


COMMANDS = {"check": cmd_check, "variants": cmd_variants, "params": cmd_params,
            "invariants": cmd_invariants, "replay": cmd_replay, "match": cmd_match,
            "regions": cmd_regions, "trace": cmd_trace}

if __name__ == "__main__":
    sys.exit(main())
