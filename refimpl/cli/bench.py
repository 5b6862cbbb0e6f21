"""``verbspec bench``: ``match``, ``gate``, ``search``, ``soak`` and ``verbs``.

``match``: the tag-matching benchmark, a C harness (native/bench/) that times the native tag
engine, UCX's own tag matching and a textbook list walk side by side in one run.
``gate``: the gate engine's cost per decode gate, the reference engine and the native one.
``search``: the explicit-state search's speed (proofs/search.py) on fixed searches of both
protocols, and with ``--against REV`` the same searches at a git revision, alternating.
``soak`` (soak.py): the gate channel on the sim transport with faults and recovery.
``verbs`` (refimpl/rxe/native_programs.py): in a soft-RoCE guest, the native verbs transport's
gate round trip against ibv_uc_pingpong.

The harness is compiled here with the system compiler into a temporary directory, with each
matcher whose sources and libraries are present: the native engine when
native/tagmatch/tagmatch_engine.c is there, UCX when libucx-dev is installed (Debian:
``apt install libucx-dev``). A matcher that cannot be built is named on stderr with the
reason, and its column is null.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verbspec import native
from verbspec.refimpl.bindings import cprogram
from verbspec.refimpl.bindings.cprogram import BuildError
from verbspec.refimpl.bindings.native_gate import NativeGateEngine
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import InputError, gate_run
from verbspec.refimpl.cli.registry import EPILOG, Command, HelpFormatter, Parser
from verbspec.refimpl.cli.soak import soak_main
from verbspec.refimpl.engines.gate_engine import Completion, GateEngine
from verbspec.refimpl.library.gate_channel import gate_config
from verbspec.refimpl.progress import print_table
from verbspec.refimpl.rxe import guest as rxe_guest
from verbspec.refimpl.rxe import native_programs as verbs_native
from verbspec.spec.gate.state import WINDOW_BARRIER
from verbspec.spec.gate.wire import TcpItem
from verbspec.spec.params import ParamError

BENCH = native.HERE / "bench"
GATE, TAGMATCH = native.engine("gate"), native.engine("tagmatch")
CFLAGS = ("-std=c11", "-O2", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra")
MATCHERS = ("verbspec", "ucx", "listwalk")


class BenchError(BuildError):
    """The harness could not be built or run: the message says why."""


@dataclass(frozen=True)
class Optional:
    """A matcher the harness links in only where its sources and libraries are present."""

    name: str
    define: str
    sources: tuple[Path, ...]
    libs: tuple[str, ...]
    missing: str            # what to install when it does not build


OPTIONAL = (
    Optional("verbspec", "BENCH_WITH_VERBSPEC",
             (BENCH / "match_verbspec.c", TAGMATCH.source), (),
             "the native tag-matching engine's sources (native/tagmatch/tagmatch_engine.c)"),
    Optional("ucx", "BENCH_WITH_UCX", (BENCH / "match_ucx.c",), ("-lucp", "-lucs"),
             "UCX's headers and libraries (Debian: apt install libucx-dev)"),
)


def compiler() -> str:
    try:
        return cprogram.compiler()
    except BuildError as e:
        raise BenchError(str(e)) from None


def _compile(out: Path, matchers: list[Optional]) -> subprocess.CompletedProcess:
    sources = [BENCH / "match_bench.c", BENCH / "match_listwalk.c"]
    for m in matchers:
        sources.extend(m.sources)
    return cprogram.compile_c(out, sources, (*CFLAGS, *(f"-D{m.define}" for m in matchers)),
                              (TAGMATCH.folder, BENCH),
                              tuple(lib for m in matchers for lib in m.libs))


def build(workdir: Path) -> tuple[Path, dict[str, str]]:
    """Compile the harness with every optional matcher that builds here; (binary, reasons the
    others were left out)."""
    compiler()
    out = workdir / "bench_match"
    left_out: dict[str, str] = {}
    chosen = []
    for m in OPTIONAL:
        if not all(s.exists() for s in m.sources):
            left_out[m.name] = f"not built: {m.missing} missing"
            continue
        trial = _compile(workdir / f"probe_{m.name}", [m])
        if trial.returncode != 0:
            first = (trial.stderr.strip().splitlines() or ["(no message)"])[0]
            left_out[m.name] = f"not built: needs {m.missing}: {first}"
            continue
        chosen.append(m)
    done = _compile(out, chosen)
    if done.returncode != 0:
        raise BenchError(f"the harness did not compile:\n{done.stderr.strip()}")
    return out, left_out


def run_match(min_messages: int, scenario: str | None) -> tuple[dict, dict[str, str]]:
    """Build and run the harness; its JSON (rows, every matcher's column, null where left
    out) and the reasons matchers were left out."""
    with tempfile.TemporaryDirectory(prefix="verbspec-bench-") as tmp:
        binary, left_out = build(Path(tmp))
        cmd = [str(binary), "--min-messages", str(min_messages)]
        if scenario is not None:
            cmd += ["--scenario", scenario]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"the harness failed (exit {done.returncode}): {done.stderr.strip()}")
    result = json.loads(done.stdout)
    for row in result["rows"]:
        for name in MATCHERS:
            row.setdefault(f"{name}_ns", None)
    return result, left_out


def match_main(min_messages: int, scenario: str | None, as_json: bool) -> int:
    result, left_out = run_match(min_messages, scenario)
    for name, why in left_out.items():
        print(f"verbspec bench match: {name}: {why}", file=sys.stderr)
    report.print_bench_match(result, MATCHERS, as_json)
    return 0


# ------------------------------------------------------------------ verbspec bench gate
def _gate_through_python(engine: Any, n: int) -> float:
    """ns per steady-state decode gate through the Python interface of ``engine`` (the
    reference engine or the native engine's adapter), at ds4's defaults."""
    e = engine
    e.setup()
    e.call_gate(0, 0, 1)
    e.advance()                     # the window's receives
    e.advance()                     # the barrier byte
    e.tcp_read(TcpItem("byte", WINDOW_BARRIER))
    t0 = time.perf_counter_ns()
    for seq in range(1, n + 1):
        slot = (seq - 1) % 86
        if seq > 1:
            e.call_gate(slot // 2, slot % 2, seq)
        e.advance()
        e.poll_size()
        e.completions((Completion("send", seq, 0, 16384), Completion("send", seq, 0, 8192),
                       Completion("recv", 0, 0, 16384), Completion("recv", seq, 0, 8192)))
        e.advance()
        e.consume()
    ns = (time.perf_counter_ns() - t0) / n
    v = e.view()
    if v.last_gate_seq != n or v.error:
        raise BenchError(f"the gate loop ended at gate {v.last_gate_seq}: {v.error}")
    return ns


def _gate_in_c(n: int) -> float:
    """ns per gate of the C engine driven by the C loop of native/bench/gate_loop.c."""
    compiler()
    with tempfile.TemporaryDirectory(prefix="verbspec-bench-") as tmp:
        exe = Path(tmp) / "bench_gate"
        done = cprogram.compile_c(exe, (BENCH / "gate_loop.c", GATE.source), CFLAGS,
                                  (GATE.folder,))
        if done.returncode != 0:
            raise BenchError(f"the gate loop did not compile:\n{done.stderr.strip()}")
        run = subprocess.run([str(exe), str(n)], capture_output=True, text=True)
    if run.returncode != 0:
        raise BenchError(f"the gate loop failed (exit {run.returncode})")
    return float(run.stdout)


def gate_main(gates: int, as_json: bool) -> int:
    """Per-gate engine cost: the reference engine, the native engine through its adapter, and
    the native engine alone (a C loop, 100 times as many gates)."""
    cfg = gate_config({})
    rows = [{"engine": "refimpl", "interface": "python",
             "ns_per_gate": round(_gate_through_python(GateEngine(cfg, cfg.rq_depth), gates))}]
    if native.load("gate") is None:
        print("verbspec bench gate: native: not built (pip install -e . needs a C compiler)",
              file=sys.stderr)
    else:
        rows.append({"engine": "native", "interface": "python", "ns_per_gate": round(
            _gate_through_python(NativeGateEngine(cfg, cfg.rq_depth), gates))})
        rows.append({"engine": "native", "interface": "c",
                     "ns_per_gate": round(_gate_in_c(100 * gates), 1)})
    ref = rows[0]["ns_per_gate"]
    result = {"gates": gates, "rows": rows,
              "refimpl_over_native_c": round(ref / rows[-1]["ns_per_gate"])
              if len(rows) == 3 else None}
    report.print_bench_gate(result, as_json)
    return 0


# ------------------------------------------------------------------------ verbspec bench search
@dataclass(frozen=True)
class SearchCase:
    """One fixed breadth-first search: a protocol's configuration and bounded_search's
    arguments (``max_states`` is the cut unless ``--max-states`` gives another)."""

    name: str
    protocol: str
    params: dict[str, Any]
    depth: int
    max_states: int
    max_faults: int | None = None


SEARCH_CASES = (
    SearchCase("gate, every run, depth 14", "gate", {}, 14, 10_000),
    SearchCase("gate, fault-free runs, depth 40", "gate", {}, 40, 20_000, 0),
    SearchCase("tagmatch, the defaults, depth 40", "tagmatch", {}, 40, 40_000),
)

# Run in a fresh interpreter whose import path is the tree measured (the current one, or a
# revision's worktree), so it may use only what every revision has: bounded_search and the
# protocols' build. Prints one JSON object: the search's figures and its CPU seconds.
_SEARCH_CHILD = """
import json, resource, sys, time
from verbspec.proofs.search import bounded_search
from verbspec.spec import protocols
case = json.loads(sys.argv[1])
system = protocols.load(case["protocol"]).build(case["params"], ())
kw = {"max_faults": case["max_faults"]} if case["max_faults"] is not None else {}
t0 = time.process_time()
res = bounded_search(system, depth=case["depth"], max_states=case["max_states"], **kw)
cpu = time.process_time() - t0
print(json.dumps({"states": res.states, "transitions": res.transitions, "depth": res.depth,
                  "exhausted": res.exhausted, "cut": res.cut,
                  "violation": res.violation.invariant if res.violation else None,
                  "cpu_s": cpu,
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

# what must be the same in every run of a search, at every revision
SEARCH_COUNTS = ("states", "transitions", "depth", "exhausted", "cut", "violation")


def tree_root() -> Path:
    """The source tree this verbspec is imported from."""
    return Path(__file__).resolve().parents[2]


def run_search(root: Path, case: SearchCase, max_states: int | None) -> dict[str, Any]:
    """One run of ``case`` by the tree at ``root``, in a process of its own."""
    spec = {"protocol": case.protocol, "params": case.params, "depth": case.depth,
            "max_states": max_states or case.max_states, "max_faults": case.max_faults}
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", _SEARCH_CHILD, json.dumps(spec)], cwd=root,
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise BenchError(f"the search {case.name!r} failed in {root} (exit "
                         f"{done.returncode}):\n{tail}")
    return json.loads(done.stdout)


def _worktree(rev: str, where: Path) -> Path:
    """A checkout of ``rev`` (git worktree, detached) in ``where``."""
    root = tree_root()
    path = where / "tree"
    done = subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(path),
                           rev], capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"--against {rev}: git worktree add failed: {done.stderr.strip()}")
    return path


def _drop_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(tree_root()), "worktree", "remove", "--force", str(path)],
                   capture_output=True, text=True)


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A search's runs in one row: its counts (the same in every run, or a BenchError) and
    the median CPU seconds."""
    first = runs[0]
    for r in runs[1:]:
        if any(r[k] != first[k] for k in SEARCH_COUNTS):
            raise BenchError(f"the same search gave different results: {first} and {r}")
    cpu = statistics.median(r["cpu_s"] for r in runs)
    return {**{k: first[k] for k in SEARCH_COUNTS}, "cpu_s": round(cpu, 3),
            "states_per_cpu_s": round(first["states"] / max(cpu, 1e-9)),
            "max_rss_mib": round(max(r["max_rss_mib"] for r in runs), 1)}


def search_bench(reps: int, against: str | None, max_states: int | None,
                 progress: Any = None) -> dict[str, Any]:
    """Each search ``reps`` times by the current tree; with ``against``, by that revision's
    tree too, the two alternating (the revision first in even repetitions), so that both see
    the same load. The ratio is the current tree's states per CPU-second over the
    revision's."""
    cases = SEARCH_CASES
    with tempfile.TemporaryDirectory(prefix="verbspec-bench-search-") as tmp:
        other = _worktree(against, Path(tmp)) if against else None
        try:
            runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for rep in range(reps):
                for case in cases:
                    sides = [("current", tree_root())]
                    if other is not None:
                        sides.append(("against", other))
                        if rep % 2 == 0:
                            sides.reverse()
                    for side, root in sides:
                        if progress:
                            progress(f"{case.name}, {side}, repetition {rep + 1}/{reps}")
                        runs.setdefault((case.name, side), []).append(
                            run_search(root, case, max_states))
        finally:
            if other is not None:
                _drop_worktree(other)
    rows = []
    for case in cases:
        row: dict[str, Any] = {"search": case.name, "protocol": case.protocol,
                               "current": _summary(runs[case.name, "current"])}
        if against:
            row["against"] = _summary(runs[case.name, "against"])
            row["same_counts"] = all(row["current"][k] == row["against"][k]
                                     for k in SEARCH_COUNTS)
            row["ratio"] = round(row["current"]["states_per_cpu_s"]
                                 / max(row["against"]["states_per_cpu_s"], 1), 3)
        rows.append(row)
    return {"reps": reps, "against": against, "max_states": max_states, "rows": rows}


def print_search_bench(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    rev = result["against"]
    columns = ["search", "tree", "states", "transitions", "CPU s", "states / CPU-s",
               "max RSS MiB"] + (["ratio"] if rev else [])
    rows = []
    for r in result["rows"]:
        sides = [("current", "current")] + ([("against", rev)] if rev else [])
        for i, (side, label) in enumerate(sides):
            f = r[side]
            row = [r["search"] if i == 0 else "", label, f"{f['states']:,}",
                   f"{f['transitions']:,}", f"{f['cpu_s']:.2f}", f"{f['states_per_cpu_s']:,}",
                   f"{f['max_rss_mib']:,.0f}"]
            if rev:
                row.append(f"{r['ratio']:.2f}x" if i == 0 else
                           ("same counts" if r["same_counts"] else "COUNTS DIFFER"))
            rows.append(row)
    title = (f"explicit-state search, median CPU of {result['reps']} "
             f"run{'s' if result['reps'] > 1 else ''} each")
    print_table(title, columns, rows)
    if rev:
        print(f"ratio: states per CPU-second of the current tree over {rev}'s, each search's "
              f"runs alternating with {rev}'s")


def search_main(reps: int, against: str | None, max_states: int | None, as_json: bool) -> int:
    def tell(what: str) -> None:
        if not as_json:
            print(f"verbspec bench search: {what}", file=sys.stderr)

    result = search_bench(reps, against, max_states, tell)
    print_search_bench(result, as_json)
    return 0 if all(r.get("same_counts", True) for r in result["rows"]) else 1


# ------------------------------------------------------------------------------ the command
def arguments(b: Parser) -> None:
    kinds = b.add_subparsers(dest="bench", required=True, metavar="BENCH", parser_class=Parser,
                             help="match (tag matching), gate (the gate engine per gate), "
                                  "search (the explicit-state search), soak (the gate "
                                  "channel with faults) or verbs (the native gate transport "
                                  "against ibv_uc_pingpong on soft-RoCE)")
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
    se = kinds.add_parser("search", formatter_class=HelpFormatter, epilog=EPILOG,
                          help="the explicit-state search's states per CPU-second on fixed "
                               "searches of both protocols, optionally against a git "
                               "revision (docs/benchmarks.md)",
                          description="the explicit-state search (proofs/search.py) on fixed "
                                      "searches of the gate protocol and of tag matching: "
                                      "states, transitions, CPU seconds and states per "
                                      "CPU-second; with --against REV the same searches at "
                                      "that revision (a git worktree), alternating with the "
                                      "current tree, and the ratio; exit 1 if the two differ "
                                      "in any count")
    se.add_argument("--against", default=None, metavar="REV",
                    help="a git revision to measure beside the current tree")
    se.add_argument("--reps", type=int, default=None, metavar="R",
                    help="runs of each search by each tree, the figure their median "
                         "(default: 3 with --against, else 1)")
    se.add_argument("--max-states", type=int, default=None, metavar="N",
                    help="cut every search at N states (default: each search's own cut)")
    se.add_argument("--json", action="store_true",
                    help='print {"reps", "against", "max_states", "rows": [{"search", '
                         '"protocol", "current", "against", "ratio", "same_counts"}]}')
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
    v.add_argument("--record", action="store_true",
                   help="instead: the gate pair without and with the raw verbs recorder "
                        "(verbspec trace record), in alternating order (ABBA); the ratio of "
                        "their medians")
    v.add_argument("--json", action="store_true",
                   help='print {"gates", "reps", "bytes_each_way", "rows", "gate_us", '
                        '"gate_p50_us", "pingpong_us", "ratio", "seconds", "boot_s"} (with '
                        '--record: "unrecorded_us", "recorded_us", "ratio_per_rep_median", '
                        '"unrecorded_p50_us", "recorded_p50_us", "p50_ratio", '
                        '"p50_ratio_per_rep_median" in place of the gate and pingpong figures)')


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "soak":
        gate_run(args)
        return soak_main(args.gates, args.seed, args.engine, args.json)
    if args.bench == "verbs":
        return _bench_verbs(args)
    if args.bench == "search":
        reps = args.reps if args.reps is not None else (3 if args.against else 1)
        if reps < 1:
            raise ParamError("--reps must be at least 1")
        if args.max_states is not None and args.max_states < 1:
            raise ParamError("--max-states must be at least 1")
        try:
            return search_main(reps, args.against, args.max_states, args.json)
        except BenchError as e:
            raise InputError(str(e)) from None
    if args.bench == "gate":
        if args.gates < 1:
            raise ParamError("--gates must be at least 1")
        try:
            return gate_main(args.gates, args.json)
        except BenchError as e:
            raise InputError(str(e)) from None
    if args.min_messages < 1:
        raise ParamError("--min-messages must be at least 1")
    try:
        return match_main(args.min_messages, args.scenario, args.json)
    except BenchError as e:
        raise InputError(str(e)) from None


def _bench_verbs(args: argparse.Namespace) -> int:
    if args.gates < 1 or args.reps < 1:
        raise ParamError("--gates and --reps must be at least 1")
    if not 8 <= args.vector_bytes <= 32768 or args.vector_bytes % 8:
        raise ParamError(f"--vector-bytes {args.vector_bytes}: expected a multiple of 8 in "
                         f"8..32768")
    plan = verbs_native.BenchPlan(args.gates, args.reps, args.vector_bytes)
    try:
        if args.record:
            from verbspec.refimpl.rxe import record

            return record.bench_record_main(
                record.RecordBench(args.gates, args.reps, args.vector_bytes), args.json,
                Path.cwd())
        return verbs_native.bench_main(plan, args.json, Path.cwd())
    except (verbs_native.BuildError, verbs_native.VerbsRunError,
            rxe_guest.RxeGuestError) as e:
        raise InputError(f"bench verbs: {e}") from None


COMMAND = Command("bench", "benchmarks: tag matching against UCX and a list walk (C), the "
                           "explicit-state search, the gate channel soak with faults, the "
                           "native verbs transport against ibv_uc_pingpong", arguments,
                  cmd_bench)
