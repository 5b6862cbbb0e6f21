"""What the commands print on standard output: the check's summary table and JSON, the
listings, the conformance runs' reports, the replay's verdict, the envelope table, the device
traces' validation, the demo's and the benchmarks' tables, and the scenario runner's outcome.
The commands compute; this module writes. (Diagnostics on stderr stay with the code that finds
them.)"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from verbspec.proofs.reach import ModeReach, unreached
from verbspec.proofs.report import DRIFTED, Result
from verbspec.refimpl.progress import print_table

VERDICT_STYLE = {"proved": "bold green", "held": "green", "violated": "bold red",
                 DRIFTED: "bold magenta",
                 "inconclusive": "yellow", "unknown": "yellow", "timeout": "yellow"}


def reader_gone(code: int) -> int:
    """Standard output's reader stopped reading (e.g. ``| head``): what it read is what it
    wanted; the rest of the output goes nowhere and the exit code stands."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):   # no file descriptor (e.g. captured in-process)
        pass
    return code


# ------------------------------------------------------------------------------ check
def print_check(results: list[Result], skipped: list[dict[str, str]],
                values: dict[str, dict[str, Any]], variants: dict[str, tuple[str, ...]],
                selected: Sequence[str], profile: str | None, as_json: bool,
                code: int, incomplete: str | None = None,
                modes: Sequence[ModeReach] = ()) -> None:
    """``verbspec check``'s report: one JSON object, or the summary table, the methods left
    out and the modes each method reached (a mode none reached is a warning);
    ``incomplete`` says why the run stopped before every check (a signal)."""
    if as_json:
        warnings = [_unreached_text(m) for m in unreached(modes)]
        shown_params: Any = values[selected[0]] if len(selected) == 1 else values
        print(json.dumps({"results": [r.as_json() for r in results], "params": shown_params,
                          "variants": {p: list(variants[p]) for p in selected},
                          "profile": profile, "skipped": skipped, "incomplete": incomplete,
                          "modes": [m.as_json() for m in modes], "warnings": warnings},
                         indent=1))
        return
    print_results(results, code, modes)
    for s in skipped:
        print(f"{s['protocol']}: {s['method']} skipped: {s['reason']}")
    if incomplete is not None:
        print(f"incomplete: {incomplete}")


def _unreached_text(m: ModeReach) -> str:
    return f"{m.protocol}: no method reached the mode {m.mode!r}"


def print_modes(modes: Sequence[ModeReach], console: Console) -> None:
    """Per protocol, the modes and the methods that reached each; a warning for each mode
    none reached."""
    for protocol in dict.fromkeys(m.protocol for m in modes):
        table = Table(title=f"{protocol}: the modes the checks reached")
        table.add_column("mode")
        table.add_column("reached by")
        for m in modes:
            if m.protocol == protocol:
                table.add_row(m.mode, ", ".join(m.methods) or "[yellow]none[/]")
        console.print(table)
    for m in unreached(modes):
        console.print(f"[yellow]warning:[/] {_unreached_text(m)}", highlight=False)


def print_results(results: list[Result], code: int, modes: Sequence[ModeReach] = ()) -> None:
    """The summary: one row per invariant with a column per method (verdict and seconds), the
    bound each method reached in a footer (once per protocol and method, and per invariant
    where one differs), then what was violated or left undecided and why, then the modes each
    method reached."""
    console = Console(file=sys.stdout, width=max(Console().width, 120))
    methods = list(dict.fromkeys(r.method for r in results))
    rows: dict[tuple[str, str], dict[str, Result]] = {}
    for r in results:
        rows.setdefault((r.protocol, r.invariant), {})[r.method] = r
    table = Table(title="verbspec check")
    table.add_column("protocol")
    table.add_column("invariant")
    for m in methods:
        table.add_column(m, no_wrap=True)
    for (protocol, invariant), by_method in rows.items():
        cells = [f"[{VERDICT_STYLE[r.verdict]}]{r.verdict}[/] {r.seconds:.1f}s"
                 if (r := by_method.get(m)) else "" for m in methods]
        table.add_row(protocol, invariant, *cells)
    console.print(table)
    for line in bound_lines(results):
        console.print(line, highlight=False)
    undecided: dict[tuple[str, str, str, str | None], list[str]] = {}
    for r in results:
        if r.verdict in ("violated", DRIFTED):
            console.print(f"[bold red]{r.protocol} {r.invariant} {r.verdict}[/] ({r.method}): "
                          f"{r.detail}\n  trace: {r.trace}")
        elif r.verdict in ("inconclusive", "unknown", "timeout"):
            # one line per reason: a method out of its scope says the same of every invariant
            undecided.setdefault((r.protocol, r.method, r.verdict, r.detail),
                                 []).append(r.invariant)
    for (protocol, method, verdict, detail), names in undecided.items():
        console.print(f"[yellow]{protocol} {', '.join(names)} {verdict}[/] ({method}): {detail}")
    print_modes(modes, console)
    console.print(f"exit {code}")


def bound_lines(results: list[Result]) -> list[str]:
    """The footer: what each (protocol, method) covered, the common bound once and any
    other bound (a violation's trace length, a method out of scope) after it, once for the
    invariants that share it."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.protocol, r.method), []).append(r)
    out = []
    for (protocol, method), rs in groups.items():
        common = Counter(r.bound for r in rs).most_common(1)[0][0]
        out.append(f"{protocol} {method}: {common}")
        others: dict[str, list[str]] = {}
        for r in rs:
            if r.bound != common:
                others.setdefault(r.bound, []).append(r.invariant)
        out += [f"  {', '.join(names)}: {bound}" for bound, names in others.items()]
    return out


# ------------------------------------------------------------------------------ listings
Row = dict[str, Any]


def print_listing(name: str, rows: list[Row], as_json: bool, line: Callable[[Row], str]) -> None:
    """A listing: ``{name: rows}`` as one JSON object, or a line (or lines) per row."""
    if as_json:
        print(json.dumps({name: rows}, indent=1))
    else:
        for row in rows:
            print(line(row))


def variant_line(r: Row) -> str:
    return f"{r['protocol']:9} {r['name']:26} changes: {r['changes']}; breaks: {r['breaks']}"


def profile_lines(r: Row) -> str:
    return (f"{r['protocol']:9} {r['name']}: {r['describes']}\n"
            + "\n".join(f"{'':10}{v['name']:26} {v['where']}" for v in r["variants"])
            + "".join(f"\n{'':10}--param {a}" for a in r["params"]))


def param_line(r: Row) -> str:
    return f"{r['protocol']:9} {r['name']:24} {r['default']!s:>10}  {r['range']:>14}  {r['doc']}"


def invariant_line(r: Row) -> str:
    return f"{r['protocol']:9} {r['name']:26} {r['doc']}"


# ------------------------------------------------------------------------------ conform
def print_conform(impl: str, reports: Sequence[Any], out: list[dict[str, Any]],
                  as_json: bool) -> None:
    """Each protocol's lockstep runs: what ran, what a partial implementation did not show,
    each mismatch with its trace, and the C drivers' replays."""
    if as_json:
        print(json.dumps(out[0] if len(out) == 1 else
                         {"results": out, "mismatches": sum(o["mismatches"] for o in out)},
                         indent=1))
        return
    for rep, o in zip(reports, out, strict=True):
        sw = rep.sweep
        what = (f"every edge of {sw['configs']} configurations: {sw['states']:,} states, "
                f"{sw['edges']:,} edges, breadth-first depth {sw['bfs_depth']}; every path "
                f"of {sw['path_configs']} up to {'/'.join(map(str, sw['walk_depths']))} "
                f"steps: {sw['paths']:,} paths through {sw['path_states']:,} states" if sw
                else f"{rep.sequences} runs, {rep.steps:,} steps")
        print(f"{impl} against the {rep.protocol} spec: {what}, {len(rep.actions)} "
              f"of {rep.actions_total} actions, {rep.seconds:.1f}s")
        print_partial(rep)
        for (m, _), path in zip(rep.disagreements, o["traces"] or (), strict=True):
            print(f"mismatch: {m}\n  trace: {path}")
        if rep.mismatch is None:
            print("no mismatch")
        if "c_driver" in o:
            print_c_driver(rep.protocol, o["c_driver"])


def print_partial(rep: Any) -> None:
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


def print_c_driver(protocol: str, c: dict[str, Any]) -> None:
    print(f"C driver, {protocol}: {c['traces']} traces replayed, {c['steps']:,} steps, "
          f"{c['seconds']:.1f}s")
    if c["mismatch"]:
        print(f"C driver mismatch: {c['mismatch']}\n  trace: {c['trace']}")
    else:
        print("C driver: no mismatch")


def print_c_replay(impl: str, tally: Any, files: list[dict[str, Any]], as_json: bool) -> None:
    """``conform --c-driver --replay``: each file's verdict and the tally."""
    if as_json:
        print(json.dumps({"impl": impl, "c_driver": tally.as_json(), "files": files},
                         indent=1))
        return
    for f in files:
        what = f"mismatch: {f['mismatch']}" if f["mismatch"] else \
            f"agreed on {f['steps']:,} steps"
        print(f"{f['file']} ({f['protocol']}): {what}")
    print(f"C driver: {tally.traces} traces, {tally.steps:,} steps, "
          f"{int(tally.mismatch is not None)} with a mismatch, {tally.seconds:.1f}s")


def print_mutants(results: Sequence[Any], summary: dict[str, Any], as_json: bool) -> None:
    """``conform --mutants``: each mutant killed (and by what) or survived, and the count."""
    if as_json:
        print(json.dumps(summary))
        return
    for r in results:
        how = f"killed ({r.by}): {r.mismatch}" if r.killed else "SURVIVED"
        print(f"{r.protocol} mutant {r.mutant}: {how} [{r.seconds} s]")
    print(f"{summary['killed']} of {summary['mutants']} mutants killed in "
          f"{summary['seconds']} s")


def print_coverage(rep: Any, render: Callable[[Any], str], with_tests: bool,
                   as_json: bool) -> None:
    """``conform --coverage``: each engine file's coverage (as ``render`` shows it) and what
    drove it."""
    if as_json:
        print(json.dumps(rep.as_json()))
        return
    print(render(rep))
    ran = ", ".join(f"{k} {v}" for k, v in rep.drive.items())
    print(f"\ndrive: {ran or 'nothing'}"
          + ("" if with_tests else " (no native tests: not a source tree, or "
             "--no-tests)") + f"; {rep.seconds:.0f} s")
    if not rep.ok:
        print(f"the drive failed: {rep.failure}")


# ------------------------------------------------------------------------------ replay
def print_replay(verdict: str) -> None:
    """A replay's verdict: one line."""
    print(verdict)


# ------------------------------------------------------------------------------ envelope
def print_envelope(rows: list[dict[str, Any]], parts: list[str], envelope: str, domain: str,
                   scope: str, seconds: float, code: int, as_json: bool) -> None:
    """The envelope table (the ``parts`` asked for): each invariant's proof over the envelope,
    each condition's violation just outside it, the limits."""
    if as_json:
        print(json.dumps({"envelope": envelope, "domain": domain, "scope": scope,
                          "parts": parts, "rows": rows, "seconds": round(seconds, 3)},
                         indent=1))
        return
    console = Console(file=sys.stdout, width=max(Console().width, 140))
    console.print(f"[bold]envelope[/]: {envelope}\n"
                  f"[bold]domain[/]: {domain}\n[bold]scope[/]: {scope}")
    table = Table(title=f"verbspec envelope (gate): {', '.join(parts)}")
    for col in ("invariant", "kind", "where", "verdict", "s", "counterexample / trace"):
        table.add_column(col, overflow="fold")
    for r in rows:
        where = r["envelope"] if r["condition"] else "the envelope"
        note = r["counterexample"] + (f"\ntrace: {r['trace']}" if r["trace"] else "")
        table.add_row(r["invariant"], r["kind"], where, r["verdict"], f"{r['seconds']:.1f}",
                      note)
    console.print(table)
    console.print(f"exit {code}")


# ------------------------------------------------------------------------------ trace validate
def print_validation(rep: Any, render: Callable[[Any], str], as_json: bool) -> None:
    """Device traces validated against the spec: one JSON object, or the report as ``render``
    shows it."""
    if as_json:
        print(json.dumps(rep.as_json()))
    else:
        print(render(rep))


# ------------------------------------------------------------------------------ demo
def print_demo(s: dict[str, Any], as_json: bool) -> None:
    """The demo's summary: one JSON object, or a table of its measures and its errors."""
    if as_json:
        print(json.dumps(s))
        return
    lat = s["gate_latency_us"]
    rows = [["gates", f"{s['gates']:,}"], ["big gate", f"{s['big_gate_bytes']:,} bytes"],
            ["payloads verified", "yes" if s["verified"] else "NO"],
            ["gate latency p50 / p99", f"{lat['p50']} / {lat['p99']} us"],
            ["gates per second", f"{s.get('gates_per_s') or 0:,}"],
            ["big gate throughput", f"{s.get('big_gate_mib_per_s')} MiB/s"],
            ["UC drops", str(s.get("drops"))],
            ["tagged messages verified", _tagged_text(s)],
            ["tagged throughput (rank 0 received)",
             f"{s.get('tagged', {}).get('mib_per_s')} MiB/s"],
            ["engine, transport", f"{s['engine']}, {s['transport']}"],
            ["wall time", f"{s['seconds']} s"]]
    print_table("verbspec demo", ["measure", "value"], rows)
    for e in s["errors"]:
        print(f"error: {e}")


def _tagged_text(s: dict[str, Any]) -> str:
    t = s.get("tagged")
    if not t:
        return f"{s['tagged_messages']:,}"
    return (f"{s['tagged_messages']:,} ({t['eager']:,} eager, {t['rendezvous']:,} rendezvous; "
            f"{t['bytes']:,} bytes)")


def print_demo_variant(summary: dict[str, Any], as_json: bool) -> None:
    """The demo's --variant run: each rank's gate and completions, and the UC drops."""
    if as_json:
        print(json.dumps(summary))
        return
    rows = [[f"rank {r['rank']}", "verified" if r["verified"] else r["error"],
             json.dumps(r.get("completions"))] for r in summary["ranks"]]
    print_table(f"verbspec demo --variant {summary['variant']}",
                ["rank", "gate 1", "completions"], rows)
    print(f"UC drops: {summary['drops']}")


# ------------------------------------------------------------------------------ bench
def print_bench_match(result: dict[str, Any], matchers: Sequence[str], as_json: bool) -> None:
    """The tag-matching benchmark: ns per message of each matcher, by scenario and size."""
    if as_json:
        print(json.dumps(result))
        return
    rows = [[r["scenario"], str(r["n"]),
             *(_ns(r[f"{m}_ns"]) for m in matchers),
             _ratio(r["verbspec_ns"], r["ucx_ns"])] for r in result["rows"]]
    print_table("tag matching, ns per message (median of rounds)",
                ["scenario", "n", *(f"{m} ns" for m in matchers), "verbspec/ucx"], rows)


def _ns(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def print_bench_gate(result: dict[str, Any], as_json: bool) -> None:
    """The gate engine's cost per gate, by engine and interface."""
    if as_json:
        print(json.dumps(result))
        return
    print_table("gate engine, ns per decode gate (window armed)",
                ["engine", "interface", "ns per gate"],
                [[r["engine"], r["interface"], f"{r['ns_per_gate']:,}"] for r in result["rows"]])
    if result["refimpl_over_native_c"]:
        print(f"refimpl / native (C): {result['refimpl_over_native_c']}x")


def print_soak(report: dict[str, Any], wall: float, as_json: bool) -> None:
    """The soak's report: gates, sessions, faults and errors by kind, memory."""
    if as_json:
        print(json.dumps(report))
        return
    rows = [["gates", f"{report['gates']:,}"], ["big gates", str(report["big_gates"])],
            ["sessions (set up again after each)", str(report["sessions"])],
            ["wrong payloads accepted", str(report["wrong_payloads_accepted"])],
            *[[f"fault injected: {k}", str(v)] for k, v in report["faults"].items()],
            *[[f"raised: {k}", str(v)] for k, v in report["errors_by_kind"].items()],
            *[[f"RSS {k} first / last session (max)",
               f"{v['start']:,} / {v['end']:,} ({v['max']:,}) KiB"]
              for k, v in report["rss_kib"].items()],
            ["engine, transport", f"{report['engine']}, {report['transport']}"],
            ["wall time", f"{wall:.1f} s"]]
    print_table("verbspec bench soak", ["measure", "value"], rows)
    for e in report["run_errors"]:
        print(f"error: {e}")


# ------------------------------------------------------------------------------ match
def print_scenario(out: dict[str, Any]) -> None:
    """A scenario's outcome: one compact JSON line."""
    sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
