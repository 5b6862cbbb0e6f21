"""``verbspec demo``: the gate protocol and tagged messaging end to end, on the ``sim``
transport or on real RDMA devices through pyverbs (``--transport verbs``). Two rank processes
arm the window, run N decode gates with two-chunk vectors, drain and run a big gate, re-arm and
run more gates; then each sets up a tagged endpoint (a new wire, RC this time, and a new side
channel) and exchanges tagged messages of eager and rendezvous sizes with the other, receives
posted before and after the messages arrive, some with ANY_SOURCE and ANY_TAG. Every payload is
checked against what the peer must have sent. The summary gives per-gate latency percentiles
(rank 0's exchange calls), throughput and the tagged messages verified.

``--variant no-barrier`` (tests and demonstrations only) runs instead the UC drop the 0xD1
barrier prevents: both ranks run the reference engine without the barrier, rank 1 starts its
first gate ``LAG_S`` late, rank 0's first gate reaches rank 1 before it posted its window and
is dropped (rank 0's send completes successfully), and rank 1's gate ends in ds4's gate
timeout."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from verbspec.refimpl.bindings import engine_choice as engines
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.inputs import InputError, gate_run
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.library.gate_channel import TRAILER, GateChannel, GateError, gate_config
from verbspec.refimpl.library.sim_pair import Pair, SimPair, close_channel, open_channel, run_pair
from verbspec.refimpl.library.tagmatch_endpoint import (
    ANY_SOURCE,
    ANY_TAG,
    TaggedConfig,
    TaggedEndpoint,
    open_endpoint,
)
from verbspec.refimpl.transport.verbs_pair import VerbsPair
from verbspec.spec.gate import variants as gv

BIG_BYTES = 12 * 2**20
VEC_BYTES = 24 * 1024       # a caller's vector: two chunks under the 16 KiB message cap
TAGGED = TaggedConfig()     # eager up to 8 KiB, rendezvous above
TAGGED_SIZES = (64, 4096, 256 * 1024, 2**20)
TAGGED_ROUNDS = 3
VARIANTS = (gv.NO_BARRIER.name,)    # the variants --variant runs
LAG_S = 1.5                 # --variant: rank 1 starts its first gate this late
VARIANT_TIMEOUT_MS = 5000   # --variant: the gate timeout (rank 0 waits out rank 1's lag);
                            # VERBSPEC_GATE_TIMEOUT_MS overrides it, as every gate timeout


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
    tagged: bool = True     # the tagged part after the gates (--no-tagged: the gates only)


# a rank's tagged part when the plan leaves it out
NO_TAGGED: dict[str, Any] = {"received": 0, "wrong": 0, "bytes": 0, "seconds": 0.0,
                             "eager": 0, "rendezvous": 0}


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
    ch.drain()
    got = ch.big_exchange(big_data(rank, plan.big_bytes))
    t2 = time.perf_counter()
    wrong += got != big_data(1 - rank, plan.big_bytes)
    gates(plan.more_gates)
    t3 = time.perf_counter()
    if rank == 0:
        done.value = seq
    return {"gates": seq, "wrong": wrong, "lat_ns": lat, "gate_s": (t1 - t0) + (t3 - t2),
            "big_s": t2 - t1, "stats": ch.stats,
            # both ranks grant the same receive depth: the window the big gate moved in
            "big_window": cfg.big_window(cfg.rq_depth)}


def tagged_work(ep: TaggedEndpoint, rank: int) -> dict[str, Any]:
    """Tagged traffic with the peer, in rounds of three phases, each message of every size in
    ``TAGGED_SIZES`` (eager and rendezvous): receives posted before the messages are sent
    (source and tag named); receives posted after every message arrived, with ANY_SOURCE and
    ANY_TAG (they must take the messages in the order sent); receives posted before with
    ANY_TAG. Every payload and envelope is compared with what the peer sent."""
    peer, n = 1 - rank, len(TAGGED_SIZES)
    wrong = received = nbytes = 0
    msg = 0

    def data(r: int, k: int, size: int) -> bytes:
        return vector(r, 1 << 40 | k, size)     # no gate's vector

    def check(st: Any, k: int, size: int, tag: int) -> None:
        nonlocal wrong, received, nbytes
        received += 1
        nbytes += st.count
        wrong += (st.source, st.tag, st.error) != (peer, tag, "") \
            or st.data != data(peer, k, size)

    t = time.perf_counter()
    for _ in range(TAGGED_ROUNDS):
        first = msg
        # posted before: each receive names its source and tag
        recvs = [ep.irecv(size, peer, i) for i, size in enumerate(TAGGED_SIZES)]
        sends = [ep.isend(data(rank, first + i, size), peer, i)
                 for i, size in enumerate(TAGGED_SIZES)]
        for i, r in enumerate(recvs):
            check(r.wait(), first + i, TAGGED_SIZES[i], i)
        msg += n
        # posted after arrival: wildcards take the messages in the order they were sent
        first = msg
        sends += [ep.isend(data(rank, first + i, size), peer, 100 + i)
                  for i, size in enumerate(TAGGED_SIZES)]
        ep.probe(peer, 100 + n - 1)     # the last sent has arrived, so all have
        for i, size in enumerate(TAGGED_SIZES):
            check(ep.irecv(size, ANY_SOURCE, ANY_TAG).wait(), first + i, size, 100 + i)
        msg += n
        # posted before, ANY_TAG from the peer
        first = msg
        recvs = [ep.irecv(size, peer, ANY_TAG) for size in TAGGED_SIZES]
        sends += [ep.isend(data(rank, first + i, size), peer, 200 + i)
                  for i, size in enumerate(TAGGED_SIZES)]
        for i, r in enumerate(recvs):
            check(r.wait(), first + i, TAGGED_SIZES[i], 200 + i)
        msg += n
        for s in sends:
            s.wait()
    return {"received": received, "wrong": wrong, "bytes": nbytes,
            "seconds": time.perf_counter() - t, "eager": ep.counts["eager"],
            "rendezvous": ep.counts["rendezvous"]}


def rank_main(pair: Pair, rank: int, arg: tuple[Plan, Any, Any]) -> dict[str, Any]:
    """One rank: the gate part on a gate channel, then (unless the plan leaves it out) the
    tagged part on a tagged endpoint."""
    plan, done, engine = arg
    ch = open_channel(pair, rank, gate_config({"vec_bytes": VEC_BYTES + TRAILER.size}), engine)
    try:
        out = work(ch, rank, (plan, done))
    finally:
        close_channel(ch)
    out["dropped"] = ch.device.dropped      # a verbs device knows it once both closed
    if not plan.tagged:
        out["tagged"] = NO_TAGGED
        return out
    with open_endpoint(pair, rank, TAGGED) as ep:
        out["tagged"] = tagged_work(ep, rank)
    return out


def percentile(sorted_ns: list[int], q: float) -> float:
    k = min(len(sorted_ns) - 1, max(0, round(q * (len(sorted_ns) - 1))))
    return sorted_ns[k] / 1000


def variant_rank(pair: Pair, rank: int, arg: tuple[str, Any]) -> dict[str, Any]:
    """One rank of the --variant run: one gate on the variant's engine, rank 1 late; rank 0
    keeps its channel up until rank 1's gate has ended (so rank 1 meets the timeout, not a
    peer that left). What each rank's device completed, and the drops, are reported."""
    variant, finished = arg
    cfg = gate_config({"vec_bytes": VEC_BYTES + TRAILER.size,
                       "timeout_ms": VARIANT_TIMEOUT_MS})
    ch = open_channel(pair, rank, cfg, "python", variant)
    error, verified = "", False
    try:
        if rank == 1:
            time.sleep(LAG_S)
        got = ch.exchange(0, 0, vector(rank, 1, ch.vector_bytes))
        verified = got == vector(1 - rank, 1, ch.vector_bytes)
    except GateError as e:
        error = str(e)
    finally:
        if rank == 1:
            finished.set()
        else:
            finished.wait(2 * cfg.timeout_ms / 1000 + LAG_S)
        close_channel(ch)
    return {"rank": rank, "error": error, "verified": verified,
            "completions": dict(ch.device.completions), "dropped": ch.device.dropped}


def pair_factory(transport: str, device: str | None,
                 peer_device: str | None) -> Callable[[], Pair]:
    """The pair the ranks meet at: sim, or verbs devices (rank 0 on ``device``, rank 1 on
    ``peer_device``, default the same)."""
    if transport == "sim":
        return SimPair
    return VerbsPair.factory(device or "", peer_device)


def variant_main(variant: str, transport: str, device: str | None, peer_device: str | None,
                 as_json: bool) -> int:
    """The --variant run; exit 0 only when both ranks' gates verified (which the variant is
    there to break)."""
    finished = mp.get_context("fork").Event()
    t = time.perf_counter()
    outcomes = run_pair(variant_rank, ((variant, finished), (variant, finished)),
                        pair=pair_factory(transport, device, peer_device))
    wall = time.perf_counter() - t
    ranks = [o.result if not o.error else {"rank": o.rank, "error": o.error, "verified": False}
             for o in outcomes]
    drops = [r.get("dropped") for r in ranks]
    summary = {"variant": variant, "engine": "python", "transport": _transport(transport),
               "devices": _devices(transport, device, peer_device), "ranks": ranks,
               "errors": [f"rank {r['rank']}: {r['error']}" for r in ranks if r["error"]],
               "drops": None if None in drops else sum(drops),
               "verified": all(r["verified"] for r in ranks), "seconds": round(wall, 2)}
    report.print_demo_variant(summary, as_json)
    return 0 if summary["verified"] else 1


def _transport(transport: str) -> str:
    return "sim" if transport == "sim" else "pyverbs"


def _devices(transport: str, device: str | None, peer_device: str | None) -> list[str]:
    return [] if transport == "sim" else [device or "", peer_device or device or ""]


def demo_main(gates: int, engine: str, as_json: bool, quiet: bool, transport: str = "sim",
              device: str | None = None, peer_device: str | None = None,
              variant: str = "", tagged: bool = True) -> int:
    if variant:
        return variant_main(variant, transport, device, peer_device, as_json)
    in_use = engines.resolved(engine)
    plan = Plan(gates, max(1, gates // 10), BIG_BYTES, tagged)
    done = mp.get_context("fork").Value("q", 0, lock=False)
    total = plan.gates + plan.more_gates
    err = Console(file=sys.stderr)
    show = not quiet and err.is_terminal
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                  disable=not show) as bar:
        task = bar.add_task(f"gates ({in_use} engine, {_transport(transport)} transport)",
                            total=total)
        t = time.perf_counter()
        outcomes = run_pair(rank_main, ((plan, done, in_use), (plan, done, in_use)),
                            tick=lambda: bar.update(task, completed=done.value),
                            pair=pair_factory(transport, device, peer_device))
        wall = time.perf_counter() - t
    errors = [f"rank {o.rank}: {o.error}" for o in outcomes if o.error]
    ok = [o.result for o in outcomes if not o.error]
    wrong = sum(r["wrong"] + r["tagged"]["wrong"] for r in ok)
    lat = sorted(outcomes[0].result["lat_ns"]) if not outcomes[0].error else []
    summary = {
        "gates": min((r["gates"] for r in ok), default=0) if len(ok) == 2 else 0,
        "big_gate_bytes": plan.big_bytes if len(ok) == 2 else 0,
        "tagged_messages": sum(r["tagged"]["received"] for r in ok) if len(ok) == 2 else 0,
        "verified": not errors and wrong == 0,
        "errors": errors + ([f"{wrong} payloads differed from what the peer sent"]
                            if wrong else []),
        "gate_latency_us": {"p50": round(percentile(lat, 0.50), 1) if lat else None,
                            "p99": round(percentile(lat, 0.99), 1) if lat else None},
        "engine": in_use,
        "transport": _transport(transport),
        "devices": _devices(transport, device, peer_device),
    }
    if ok:
        r0 = ok[0]
        summary["gates_per_s"] = round(r0["gates"] / r0["gate_s"]) if r0["gate_s"] else None
        summary["big_gate_mib_per_s"] = round(plan.big_bytes / 2**20 / r0["big_s"], 1)
        summary["big_gate_window"] = r0["big_window"]
        drops = [r["dropped"] for r in ok]
        summary["drops"] = None if None in drops else sum(drops)
        # payloads compared with what the peer must have sent, both ranks together
        summary["checked"] = {"gate_vectors": sum(r["gates"] for r in ok),
                              "big_gates": len(ok),
                              "tagged": sum(r["tagged"]["received"] for r in ok),
                              "wrong": wrong}
        t0 = r0["tagged"]
        summary["tagged"] = {"eager": sum(r["tagged"]["eager"] for r in ok),
                             "rendezvous": sum(r["tagged"]["rendezvous"] for r in ok),
                             "bytes": sum(r["tagged"]["bytes"] for r in ok),
                             "mib_per_s": round(t0["bytes"] / 2**20 / t0["seconds"], 1)
                             if t0["seconds"] else None}
    summary["seconds"] = round(wall, 2)
    report.print_demo(summary, as_json)
    return 0 if summary["verified"] else 1


# ------------------------------------------------------------------------------ the command
def arguments(d: Parser) -> None:
    d.add_argument("--transport", choices=("sim", "verbs"), default="sim",
                   help="sim: two processes over the simulated fabric and a loopback TCP "
                        "socket; verbs: over RDMA devices through pyverbs (--device)")
    d.add_argument("--device", metavar="NAME",
                   help="--transport verbs: rank 0's RDMA device (ibv_devices lists them)")
    d.add_argument("--peer-device", metavar="NAME",
                   help="--transport verbs: rank 1's RDMA device (unset: --device)")
    d.add_argument("--variant", choices=VARIANTS, default="",
                   help="tests and demonstrations only: one gate per rank on the reference "
                        "engine behaving as this spec variant, rank 1 late (the UC drop and "
                        "its gate timeout)")
    d.add_argument("--gates", type=int, default=10_000, metavar="N",
                   help="decode gates before the big gate (N/10 more after it)")
    d.add_argument("--engine", choices=("auto", "native", "python"), default="auto",
                   help="the gate engine: native (C) where built, else python; auto: native "
                        "if built")
    d.add_argument("--json", action="store_true",
                   help='print {"gates", "big_gate_bytes", "tagged_messages", "verified", '
                        '"errors", "gate_latency_us": {"p50", "p99"}, "engine", "transport", '
                        '...}')
    d.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    d.add_argument("--no-tagged", action="store_true",
                   help="the gate part only: no tagged endpoint after the gates (one queue "
                        "pair per rank, as a recording held to the gate spec wants)")


def cmd_demo(args: argparse.Namespace) -> int:
    gate_run(args)
    if args.transport == "verbs":
        _verbs_devices(args.device, args.peer_device)
    elif args.device or args.peer_device:
        raise InputError("--device and --peer-device are for --transport verbs")
    if args.variant and args.engine == "native":
        raise InputError(f"--variant {args.variant}: the variant engines are the Python "
                         f"reference engine changed; use --engine python (or auto)")
    if args.variant and args.no_tagged:
        raise InputError(f"--variant {args.variant} runs one gate per rank and no tagged "
                         f"traffic; --no-tagged is for the gate run")
    return demo_main(args.gates, args.engine, args.json, args.quiet, args.transport,
                     args.device, args.peer_device, args.variant, not args.no_tagged)


def _verbs_devices(device: str | None, peer: str | None) -> None:
    """--transport verbs: pyverbs importable, --device given, both devices present."""
    if not device:
        raise InputError("--transport verbs needs --device NAME (an RDMA device; ibv_devices "
                         "lists them)")
    try:
        # imported here: pyverbs is an optional system package (python3-pyverbs), missing
        # where there is no RDMA stack; its absence is an input error of --transport verbs
        from pyverbs.device import get_device_list
    except ImportError as e:
        raise InputError(f"--transport verbs needs pyverbs, which cannot be imported ({e}): "
                         f"install python3-pyverbs and put its directory "
                         f"(/usr/lib/python3/dist-packages) on PYTHONPATH") from None
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name)
             for d in get_device_list()]
    for opt, name in (("--device", device), ("--peer-device", peer)):
        if name and name not in names:
            raise InputError(f"{opt} {name}: no such RDMA device here (devices: "
                             f"{', '.join(names) or 'none'})")


COMMAND = Command("demo", "the gate protocol end to end: two processes arm, exchange gates, "
                          "drain, run a big gate, re-arm and exchange more; then tagged "
                          "messages, eager and rendezvous, with wildcards; every payload "
                          "verified", arguments, cmd_demo)
