"""``verbspec regions``: the gate invariants proved over a parameter region, and for each
condition of the region, the shortest violation just outside it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from verbspec.proofs.report import EXIT_INCONCLUSIVE, EXIT_OK, config_digest
from verbspec.proofs.traces import write_trace


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(part for part in keep.split("-") if part)


def regions_main(args: argparse.Namespace) -> int:
    from verbspec.proofs.gate import induction, lemmas, parameters, regions
    from verbspec.refimpl.progress import Progress

    if not 2 <= args.window_max <= 1 << 20:
        from verbspec.spec.params import ParamError

        raise ParamError("--window-max must be between 2 and 2^20")
    t0 = time.perf_counter()
    with Progress(enabled=not getattr(args, "quiet", False),
                  label="verbspec regions") as progress:
        progress.start("gate: regions")
        rows = regions.region_table(window_max=args.window_max, progress=progress.note)
        progress.done()
    out: list[dict[str, Any]] = []
    for row in rows:
        path = None
        if row.trace is not None:
            digest = config_digest(row.trace.params, row.trace.variants)
            name = f"gate-region-{_slug(row.condition)}-{row.invariant}-{digest}.itf.json"
            path = str(write_trace(row.trace, args.trace_dir / name))
        kind = ("limit" if row.limit else "just outside" if row.condition else
                "strengthening" if row.invariant in lemmas.LEMMAS else "property")
        out.append({"invariant": row.invariant, "kind": kind, "condition": row.condition,
                    "region": row.region, "verdict": row.verdict, "expected": row.want,
                    "seconds": round(row.seconds, 3), "counterexample": row.counterexample,
                    "trace": path})
    # a proof row must be proved, a condition row must show its violation just outside, a
    # limit its violation or its instance's fixpoint
    settled = all(row.settled for row in rows)
    code = EXIT_OK if settled else EXIT_INCONCLUSIVE
    if args.json:
        print(json.dumps({"region": regions.region_text(args.window_max),
                          "domain": parameters.DOMAIN, "scope": induction.SCOPE, "rows": out,
                          "seconds": round(time.perf_counter() - t0, 3)}, indent=1))
        return code
    console = Console(file=sys.stdout, width=max(Console().width, 140))
    console.print(f"[bold]region[/]: {regions.region_text(args.window_max)}\n"
                  f"[bold]domain[/]: {parameters.DOMAIN}\n[bold]scope[/]: {induction.SCOPE}")
    table = Table(title="verbspec regions (gate)")
    for col in ("invariant", "kind", "where", "verdict", "s", "counterexample / trace"):
        table.add_column(col, overflow="fold")
    for r in out:
        where = r["region"] if r["condition"] else "the region"
        note = r["counterexample"] + (f"\ntrace: {r['trace']}" if r["trace"] else "")
        table.add_row(r["invariant"], r["kind"], where, r["verdict"], f"{r['seconds']:.1f}",
                      note)
    console.print(table)
    console.print(f"exit {code}")
    return code
