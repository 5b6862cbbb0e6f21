"""``verbspec envelope`` (alias ``regions``): the gate invariants proved over the envelope, the
parameters over which they are proved, and for each condition of the envelope, the shortest
violation just outside it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from verbspec.proofs.gate import envelope, induction, lemmas, parameters
from verbspec.proofs.report import EXIT_INCONCLUSIVE, EXIT_OK, config_digest
from verbspec.proofs.traces import write_trace
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import (
    DEFAULTS,
    check_dir,
    solver_limit,
    solver_limit_argument,
)
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.progress import Progress
from verbspec.spec.params import ParamError


def arguments(g: Parser) -> None:
    g.add_argument("--window-max", type=int, default=256, metavar="N",
                   help="largest window of the envelope (symbolic in 2..N)")
    g.add_argument("--part", action="append", choices=envelope.PARTS, metavar="PART",
                   help="only this part of the table (repeatable): proofs (every invariant "
                        "over the envelope), outside (each condition's run just outside it), "
                        "limits (transports outside the model); default: all three")
    solver_limit_argument(g)
    g.add_argument("--trace-dir", type=Path, default=DEFAULTS.trace_dir,
                   help="directory for the traces just outside the envelope")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")


def cmd_envelope(args: argparse.Namespace) -> int:
    check_dir(args.trace_dir, "--trace-dir")
    return envelope_main(args)


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(part for part in keep.split("-") if part)


def envelope_main(args: argparse.Namespace) -> int:
    if not 2 <= args.window_max <= 1 << 20:
        raise ParamError("--window-max must be between 2 and 2^20")
    limit = solver_limit(args)
    t0 = time.perf_counter()
    with Progress(enabled=not getattr(args, "quiet", False),
                  label="verbspec envelope") as progress:
        progress.start("gate: envelope")
        parts = [p for p in envelope.PARTS if p in (args.part or envelope.PARTS)]
        rows = envelope.envelope_table(window_max=args.window_max, parts=parts,
                                       progress=progress.note, solver_limit=limit)
        progress.done()
    out: list[dict[str, Any]] = []
    for row in rows:
        path = None
        if row.trace is not None:
            digest = config_digest(row.trace.params, row.trace.variants)
            name = f"gate-envelope-{_slug(row.condition)}-{row.invariant}-{digest}.itf.json"
            path = str(write_trace(row.trace, args.trace_dir / name))
        kind = ("limit" if row.limit else "just outside" if row.condition else
                "strengthening" if row.invariant in lemmas.LEMMAS else "property")
        out.append({"invariant": row.invariant, "kind": kind, "condition": row.condition,
                    "envelope": row.envelope, "verdict": row.verdict, "expected": row.want,
                    "seconds": round(row.seconds, 3), "counterexample": row.counterexample,
                    "trace": path})
    # a proof row must be proved, a condition row must show its violation just outside, a
    # limit its violation or its instance's fixpoint
    settled = all(row.settled for row in rows)
    code = EXIT_OK if settled else EXIT_INCONCLUSIVE
    report.print_envelope(out, parts, envelope.envelope_text(args.window_max), parameters.DOMAIN,
                          induction.SCOPE, time.perf_counter() - t0, code, args.json)
    return code


# ``regions``: the command's former name, kept so that scripts that call it still run
COMMAND = Command("envelope", "prove the gate invariants over the parameter envelope and refute "
                              "each condition just outside it", arguments, cmd_envelope,
                  aliases=("regions",))
