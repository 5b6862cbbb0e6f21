"""``verbspec bench soak``: a long run of the gate channel on the sim transport with random faults
and recovery by setting the channel up again.

Two long-lived rank processes run sessions. A session sets a channel up (a new wire and side
channel), exchanges a random number of gates, in some sessions with a big gate in the middle
(drain, windows, re-arm), and in most sessions one rank injects one fault at a random gate:
a dropped gate, a delayed send (within the timeout: it must not fail), an error completion, a
crash (the rank drops its channel without a word, as a dead process would), a CQ overflow or a
stalled side channel. Whatever ends the session, both ranks close and set up the next one. Every
payload is compared with what the peer sent; a wrong payload accepted is the one outcome the run
must never see. Both ranks draw the same plan from the seed, so they agree on every session.

The report: gates exchanged, sessions, faults injected by kind, errors raised by kind (each
message with its numbers blanked), wrong payloads accepted, each rank's resident memory after
its first session and after its last (each with the session's channel dropped) and the most
after any session.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl.bindings import engine_choice as engines
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.demo import big_data, vector
from verbspec.refimpl.library.gate_channel import TRAILER, GateChannel, GateError, gate_config
from verbspec.refimpl.library.sim_pair import (
    SETUP_TIMEOUT_S,
    SimPair,
    close_channel,
    open_channel,
    run_pair,
)

FAULTS = ("none", "drop", "delay", "wc_error", "peer_death", "cq_overflow", "tcp_stall")
TIMEOUT_MS = 200
SESSION_GATES = (200, 3000)
BIG_BYTES = 2**20           # the big gate of a session that has one
BIG_EVERY = 3               # about one session in this many has a big gate


@dataclass(frozen=True)
class Session:
    gates: int
    big_at: int             # the gate after which the big gate runs (0: none)
    fault: str
    at: int                 # the gate at which the fault is injected
    rank: int               # the rank that injects it


def plan(seed: int, index: int) -> Session:
    rng = random.Random(seed * 1_000_003 + index)
    n = rng.randint(*SESSION_GATES)
    big_at = rng.randint(1, n) if rng.randrange(BIG_EVERY) == 0 else 0
    fault = FAULTS[index % len(FAULTS)]     # every kind in turn
    at = 1 if fault == "tcp_stall" else rng.randint(1, n)
    return Session(n, big_at, fault, at, rng.randrange(2))


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def error_kind(text: str) -> str:
    """An error message with its numbers blanked, so that errors count by kind."""
    return re.sub(r"\d+", "N", text)


def _go_on(ch: GateChannel, rank: int, mine: bool) -> bool:
    """Rank 0's decision, sent on the new side channel before the protocol uses it."""
    sock = ch.side.sock
    if rank == 0:
        sock.sendall(b"\x01" if mine else b"\x00")
        return mine
    sock.settimeout(SETUP_TIMEOUT_S)
    try:
        return sock.recv(1) == b"\x01"
    finally:
        sock.settimeout(None)


def _inject(ch: GateChannel, s: Session) -> bool:
    """Inject the session's fault; False when this rank is gone (a crash)."""
    if s.fault == "drop":
        ch.device.drop_next_sends(ch.cfg.chunks)
    elif s.fault == "delay":
        ch.device.delay_sends(ch.cfg.timeout_ms / 1000 / 4)
    elif s.fault == "wc_error":
        ch.device.fail_next_work_requests(1)
    elif s.fault == "cq_overflow":
        ch.device.overflow_cq()
    elif s.fault == "tcp_stall":
        time.sleep(2 * ch.cfg.timeout_ms / 1000)
    elif s.fault == "peer_death":
        close_channel(ch)
        return False
    return True


def _session(ch: GateChannel, rank: int, s: Session, tally: dict[str, Any]) -> None:
    for seq in range(1, s.gates + 1):
        if seq == s.at and rank == s.rank and s.fault != "none":
            tally["faults"][s.fault] += 1
            if not _inject(ch, s):
                return
        slot = ch.cfg.slot(seq)
        got = ch.exchange(slot // 2, slot % 2, vector(rank, seq, ch.vector_bytes))
        tally["gates"] += 1
        tally["wrong"] += got != vector(1 - rank, seq, ch.vector_bytes)
        if s.fault == "delay" and rank == s.rank and seq == s.at:
            ch.device.delay_sends(0.0)          # one delayed gate
        if seq == s.big_at:
            ch.drain()
            got = ch.big_exchange(big_data(rank, BIG_BYTES))
            tally["big_gates"] += 1
            tally["wrong"] += got != big_data(1 - rank, BIG_BYTES)


def soak_rank(pair: SimPair, rank: int, arg: tuple[Any, ...]) -> dict[str, Any]:
    cfg, engine, seed, target = arg
    tally: dict[str, Any] = {"gates": 0, "big_gates": 0, "wrong": 0, "sessions": 0,
                             "faults": Counter(), "errors": Counter(), "clean_sessions": 0,
                             "outcomes": defaultdict(Counter)}
    rss: list[int] = []         # resident memory after each session, its channel dropped
    index = 0
    while True:
        s = plan(seed, index)
        index += 1
        ch = open_channel(pair, rank, cfg, engine)
        # rank 0 says, before the session's first gate, whether the run goes on
        if not _go_on(ch, rank, tally["gates"] < target):
            close_channel(ch)
            break
        outcome = "clean"
        try:
            _session(ch, rank, s, tally)
            tally["clean_sessions"] += 1
        except GateError as e:
            tally["errors"][error_kind(str(e))] += 1
            outcome = "error"
        finally:
            close_channel(ch)
        tally["outcomes"][s.fault][outcome] += 1
        tally["sessions"] += 1
        del ch
        rss.append(rss_kib())
    tally["rss_kib"] = (rss[0], rss[-1], max(rss)) if rss else (0, 0, 0)
    tally["outcomes"] = {k: dict(v) for k, v in tally["outcomes"].items()}
    return tally


def soak_main(gates: int, seed: int, engine: str, as_json: bool) -> int:
    cfg = gate_config({"vec_bytes": 2048 + TRAILER.size, "timeout_ms": TIMEOUT_MS,
                       "cq_depth": 1024})
    in_use = engines.resolved(engine)
    t = time.perf_counter()
    arg = (cfg, in_use, seed, gates)
    outcomes = run_pair(soak_rank, (arg, arg))
    wall = time.perf_counter() - t
    errors = [f"rank {o.rank}: {o.error}" for o in outcomes if o.error]
    ranks = [o.result for o in outcomes if not o.error]
    faults: Counter = Counter()
    raised: Counter = Counter()
    for r in ranks:
        faults.update(r["faults"])
        raised.update(r["errors"])
    result = {
        "gates": min((r["gates"] for r in ranks), default=0),
        "big_gates": min((r["big_gates"] for r in ranks), default=0),
        "sessions": ranks[0]["sessions"] if ranks else 0,
        "clean_sessions": [r["clean_sessions"] for r in ranks],
        "faults": dict(sorted(faults.items())),
        "errors_by_kind": dict(raised.most_common()),
        "wrong_payloads_accepted": sum(r["wrong"] for r in ranks),
        # per fault kind, how each rank's sessions ended
        "session_outcomes": {f"rank{i}": r["outcomes"] for i, r in enumerate(ranks)},
        # after the first session and after the last, each with its channel dropped
        "rss_kib": {f"rank{i}": {"start": r["rss_kib"][0], "end": r["rss_kib"][1],
                                 "max": r["rss_kib"][2]} for i, r in enumerate(ranks)},
        "engine": in_use, "transport": "sim", "seconds": round(wall, 1),
        "run_errors": errors,
    }
    report.print_soak(result, wall, as_json)
    ok = not errors and result["wrong_payloads_accepted"] == 0
    return 0 if ok else 1
