"""``verbspec bench``: ``match``, ``gate``, ``soak`` and ``verbs``.

``match``: the tag-matching benchmark, a C harness (native/bench/) that times the native tag
engine, UCX's own tag matching and a textbook list walk side by side in one run.
``gate``: the gate engine's cost per decode gate, the reference engine and the native one.
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


# ------------------------------------------------------------------------------ the command
def arguments(b: Parser) -> None:
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
    v.add_argument("--record", action="store_true",
                   help="instead: the gate pair without and with the raw verbs recorder "
                        "(verbspec trace record), alternating; the ratio of their medians")
    v.add_argument("--json", action="store_true",
                   help='print {"gates", "reps", "bytes_each_way", "rows", "gate_us", '
                        '"gate_p50_us", "pingpong_us", "ratio", "seconds", "boot_s"} (with '
                        '--record: "unrecorded_us", "recorded_us", "ratio_per_rep_median" '
                        'in place of the gate and pingpong figures)')


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "soak":
        gate_run(args)
        return soak_main(args.gates, args.seed, args.engine, args.json)
    if args.bench == "verbs":
        return _bench_verbs(args)
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


COMMAND = Command("bench", "benchmarks: tag matching against UCX and a list walk (C), the gate "
                           "channel soak with faults, the native verbs transport against "
                           "ibv_uc_pingpong", arguments, cmd_bench)
