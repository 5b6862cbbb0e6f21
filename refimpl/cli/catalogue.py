"""The listings: ``verbspec variants``, ``profiles``, ``invariants`` and ``params``, each a line
(or lines) per entry, or one JSON object."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from verbspec.proofs.report import EXIT_OK
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import PROTOCOLS, selected
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.spec import protocols
from verbspec.spec.params import describe


def _arguments(default: str) -> Callable[[Parser], None]:
    """--protocol (its default: ``default``) and --json."""
    def arguments(q: Parser) -> None:
        q.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default=default,
                       help="which protocol's")
        q.add_argument("--json", action="store_true", help="print one JSON object")

    return arguments


def cmd_variants(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": v.name, "changes": v.changes, "breaks": v.breaks}
            for p in selected(args.protocol) for v in protocols.load(p).VARIANTS]
    report.print_listing(args.cmd, rows, args.json, report.variant_line)
    return EXIT_OK


def cmd_profiles(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": f.name, "describes": f.describes,
             "variants": [{"name": v, "where": w} for v, w in f.members],
             "params": list(f.params)}
            for p in selected(args.protocol) for f in protocols.load(p).PROFILES]
    report.print_listing(args.cmd, rows, args.json, report.profile_lines)
    return EXIT_OK


def cmd_params(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, **describe(s)}
            for p in selected(args.protocol) for s in protocols.load(p).PARAMS]
    report.print_listing(args.cmd, rows, args.json, report.param_line)
    return EXIT_OK


def cmd_invariants(args: argparse.Namespace) -> int:
    rows = [{"protocol": p, "name": inv.name, "over": inv.over, "doc": inv.doc}
            for p in selected(args.protocol) for inv in protocols.load(p).build({}, ()).invariants]
    report.print_listing(args.cmd, rows, args.json, report.invariant_line)
    return EXIT_OK


LIST_VARIANTS = Command("variants", "list the named protocol variants", _arguments("all"),
                        cmd_variants)
LIST_PROFILES = Command("profiles", "list the named profiles: implementations as written, "
                                    "each a set of variants", _arguments("all"), cmd_profiles)
LIST_INVARIANTS = Command("invariants", "list the named invariants", _arguments("all"),
                          cmd_invariants)
LIST_PARAMS = Command("params", "list a protocol's parameters: defaults, ranges and choices",
                      _arguments("gate"), cmd_params)
