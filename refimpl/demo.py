"""``verbspec demo``: the gate protocol end to end on the ``sim`` transport. Two rank processes
arm the window, run N decode gates with two-chunk vectors, drain and run a big gate, re-arm and
run more gates; every payload is checked against what the peer must have sent. The summary
gives per-gate latency percentiles (rank 0's exchange calls) and throughput."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl import engines
from verbspec.refimpl.channel import TRAILER, GateChannel, gate_config
from verbspec.refimpl.sim import run_ranks

BIG_BYTES = 12 * 2**20
VEC_BYTES = 24 * 1024       # a caller's vector: two chunks under the 16 KiB message cap


def vector(rank: int, seq: int, nbytes: int) -> bytes:
    """What rank ``rank`` sends at gate ``seq``: a pattern no other gate or rank sends."""
    word = ((rank << 56) | seq).to_bytes(8, "little")
    return (word * (nbytes // 8 + 1))[:nbytes]


def big_data(rank: int, nbytes: int) -> bytes:
    block = bytes((rank * 131 + i) & 0xFF for i in range(4093))    # a prime period
    return (block * (nbytes // len(block) + 1))[:nbytes]


@dataclass(frozen=True)
class Plan:
    gates: int              # before the big gate
    more_gates: int         # after it (the window re-armed)
    big_bytes: int


def work(ch: GateChannel, rank: int, arg: tuple[Plan, Any]) -> dict[str, Any]:
    plan, done = arg
    cfg = ch.cfg
    wrong = 0
    lat: list[int] = []
    seq = 0

    def gates(n: int) -> None:
        nonlocal wrong, seq
        for _ in range(n):
            seq += 1
            slot = cfg.slot(seq)
            t = time.perf_counter_ns()
            got = ch.exchange(slot // 2, slot % 2, vector(rank, seq, ch.vector_bytes))
            lat.append(time.perf_counter_ns() - t)
            wrong += got != vector(1 - rank, seq, ch.vector_bytes)
            if rank == 0 and seq % 100 == 0:
                done.value = seq

    t0 = time.perf_counter()
    gates(plan.gates)
    t1 = time.perf_counter()
    got = ch.big_exchange(big_data(rank, plan.big_bytes))
    t2 = time.perf_counter()
    wrong += got != big_data(1 - rank, plan.big_bytes)
    gates(plan.more_gates)
    t3 = time.perf_counter()
    if rank == 0:
        done.value = seq
    return {"gates": seq, "wrong": wrong, "lat_ns": lat, "gate_s": (t1 - t0) + (t3 - t2),
            "big_s": t2 - t1, "stats": ch.stats}


def percentile(sorted_ns: list[int], q: float) -> float:
    k = min(len(sorted_ns) - 1, max(0, round(q * (len(sorted_ns) - 1))))
    return sorted_ns[k] / 1000


def demo_main(gates: int, engine: str, as_json: bool, quiet: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    cfg = gate_config({"vec_bytes": VEC_BYTES + TRAILER.size})
    in_use = engines.resolved(engine)
    plan = Plan(gates, max(1, gates // 10), BIG_BYTES)
    done = mp.get_context("fork").Value("q", 0, lock=False)
    total = plan.gates + plan.more_gates
    err = Console(file=sys.stderr)
    show = not quiet and err.is_terminal
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                  disable=not show) as bar:
        task = bar.add_task(f"gates ({in_use} engine, sim transport)", total=total)
        t = time.perf_counter()
        outcomes = run_ranks(cfg, work, ((plan, done), (plan, done)), engine=in_use,
                             tick=lambda: bar.update(task, completed=done.value))
        wall = time.perf_counter() - t
    errors = [f"rank {o.rank}: {o.error}" for o in outcomes if o.error]
    ok = [o.result for o in outcomes if not o.error]
    wrong = sum(r["wrong"] for r in ok)
    lat = sorted(outcomes[0].result["lat_ns"]) if not outcomes[0].error else []
    summary = {
        "gates": min((r["gates"] for r in ok), default=0) if len(ok) == 2 else 0,
        "big_gate_bytes": plan.big_bytes if len(ok) == 2 else 0,
        "tagged_messages": 0,
        "verified": not errors and wrong == 0,
        "errors": errors + ([f"{wrong} payloads differed from what the peer sent"]
                            if wrong else []),
        "gate_latency_us": {"p50": round(percentile(lat, 0.50), 1) if lat else None,
                            "p99": round(percentile(lat, 0.99), 1) if lat else None},
        "engine": in_use,
        "transport": "sim",
    }
    if ok:
        r0 = ok[0]
        summary["gates_per_s"] = round(r0["gates"] / r0["gate_s"]) if r0["gate_s"] else None
        summary["big_gate_mib_per_s"] = round(plan.big_bytes / 2**20 / r0["big_s"], 1)
        summary["drops"] = sum(o.dropped for o in outcomes)
    summary["seconds"] = round(wall, 2)
    if as_json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0 if summary["verified"] else 1


def _print_summary(s: dict[str, Any]) -> None:
    from verbspec.refimpl.progress import print_table

    lat = s["gate_latency_us"]
    rows = [["gates", f"{s['gates']:,}"], ["big gate", f"{s['big_gate_bytes']:,} bytes"],
            ["payloads verified", "yes" if s["verified"] else "NO"],
            ["gate latency p50 / p99", f"{lat['p50']} / {lat['p99']} us"],
            ["gates per second", f"{s.get('gates_per_s') or 0:,}"],
            ["big gate throughput", f"{s.get('big_gate_mib_per_s')} MiB/s"],
            ["UC drops", str(s.get("drops"))],
            ["engine, transport", f"{s['engine']}, {s['transport']}"],
            ["wall time", f"{s['seconds']} s"]]
    print_table("verbspec demo", ["measure", "value"], rows)
    for e in s["errors"]:
        print(f"error: {e}")
