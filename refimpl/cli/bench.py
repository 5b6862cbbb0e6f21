"""``verbspec bench match`` and ``verbspec bench gate``.

``match``: the tag-matching benchmark, a C harness (native/bench/) that times the native tag
engine, UCX's own tag matching and a textbook list walk side by side in one run.
``gate``: the gate engine's cost per decode gate, the reference engine and the native one.

The harness is compiled here with the system compiler into a temporary directory, with each
matcher whose sources and libraries are present: the native engine when
native/tagmatch/tagmatch_engine.c is there, UCX when libucx-dev is installed (Debian:
``apt install libucx-dev``). A matcher that cannot be built is named on stderr with the
reason, and its column is null.
"""

from __future__ import annotations

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
from verbspec.refimpl.engines.gate_engine import Completion
from verbspec.spec.gate.state import WINDOW_BARRIER
from verbspec.spec.gate.wire import TcpItem

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
    from verbspec.refimpl.progress import print_table

    result, left_out = run_match(min_messages, scenario)
    for name, why in left_out.items():
        print(f"verbspec bench match: {name}: {why}", file=sys.stderr)
    if as_json:
        print(json.dumps(result))
        return 0
    rows = [[r["scenario"], str(r["n"]),
             *(_ns(r[f"{m}_ns"]) for m in MATCHERS),
             _ratio(r["verbspec_ns"], r["ucx_ns"])] for r in result["rows"]]
    print_table("tag matching, ns per message (median of rounds)",
                  ["scenario", "n", *(f"{m} ns" for m in MATCHERS), "verbspec/ucx"], rows)
    return 0


def _ns(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


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
    from verbspec.refimpl.engines.gate_engine import GateEngine
    from verbspec.refimpl.library.gate_channel import gate_config
    from verbspec.refimpl.progress import print_table

    cfg = gate_config({})
    rows = [{"engine": "refimpl", "interface": "python",
             "ns_per_gate": round(_gate_through_python(GateEngine(cfg, cfg.rq_depth), gates))}]
    if native.load("gate") is None:
        print("verbspec bench gate: native: not built (pip install -e . needs a C compiler)",
              file=sys.stderr)
    else:
        from verbspec.refimpl.bindings.native_gate import NativeGateEngine

        rows.append({"engine": "native", "interface": "python", "ns_per_gate": round(
            _gate_through_python(NativeGateEngine(cfg, cfg.rq_depth), gates))})
        rows.append({"engine": "native", "interface": "c",
                     "ns_per_gate": round(_gate_in_c(100 * gates), 1)})
    ref = rows[0]["ns_per_gate"]
    result = {"gates": gates, "rows": rows,
              "refimpl_over_native_c": round(ref / rows[-1]["ns_per_gate"])
              if len(rows) == 3 else None}
    if as_json:
        print(json.dumps(result))
        return 0
    print_table("gate engine, ns per decode gate (window armed)",
                ["engine", "interface", "ns per gate"],
                [[r["engine"], r["interface"], f"{r['ns_per_gate']:,}"] for r in rows])
    if result["refimpl_over_native_c"]:
        print(f"refimpl / native (C): {result['refimpl_over_native_c']}x")
    return 0
