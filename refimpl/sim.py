"""The ``sim`` transport: two ranks in two OS processes, each with its own ``SimDevice`` (the
wire between them a Unix SEQPACKET socket pair) and a real TCP connection on loopback for the
side channel, as a deployment has.

``run_ranks`` forks the two rank processes, runs ``work(channel, rank, arg)`` in each with a
freshly set-up ``GateChannel`` and returns both results. A rank that raises returns the error
(its type and message) instead of a result; a rank that dies is reported with its exit code,
never waited on forever.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl import engines
from verbspec.refimpl.channel import GateChannel, regions_for
from verbspec.refimpl.side_channel import SideChannel
from verbspec.refimpl.sim_device import SimDevice
from verbspec.spec.gate.params import GateConfig

SETUP_TIMEOUT_S = 10.0      # connecting the side channel
EXIT_TIMEOUT_S = 30.0       # a rank's process after its work returned
TICK_S = 0.1


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    result: Any = None
    error: str = ""             # "Type: message" when the work raised
    exitcode: int | None = 0
    dropped: int = 0            # UC drops seen by this rank's device


class SimPair:
    """The wire and side-channel listener shared by a pair of rank processes."""

    def __init__(self) -> None:
        self.wires = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server = socket.create_server(("127.0.0.1", 0))

    def side_socket(self, rank: int) -> socket.socket:
        if rank == 0:
            self.server.settimeout(SETUP_TIMEOUT_S)
            sock, _ = self.server.accept()
            sock.settimeout(None)
            return sock
        return socket.create_connection(self.server.getsockname(), timeout=SETUP_TIMEOUT_S)

    def close(self) -> None:
        for s in (*self.wires, self.server):
            s.close()


def open_channel(pair: SimPair, rank: int, cfg: GateConfig, engine: str) -> GateChannel:
    """Rank ``rank``'s channel over the pair (in the rank's own process)."""
    pair.wires[1 - rank].close()
    device = SimDevice(pair.wires[rank], regions_for(cfg), cq_depth=cfg.cq_depth,
                       max_msg=cfg.max_msg, rq_depth=cfg.rq_depth, sq_depth=cfg.sq_depth)
    side = SideChannel(pair.side_socket(rank), cfg.timeout_ms / 1000)
    return GateChannel(cfg, device, side, engines.gate_engine(engine, cfg, cfg.rq_depth))


def _rank_main(pair: SimPair, rank: int, cfg: GateConfig, engine: str,
               work: Callable[[GateChannel, int, Any], Any], arg: Any, out: Any) -> None:
    dropped = 0
    try:
        channel = open_channel(pair, rank, cfg, engine)
        try:
            result = work(channel, rank, arg)
        finally:
            dropped = channel.device.dropped
        out.send(RankOutcome(rank, result, dropped=dropped))
    except BaseException as e:     # the parent reports it; the process ends either way
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        out.send(RankOutcome(rank, error=detail, dropped=dropped))
    finally:
        out.close()


def run_ranks(cfg: GateConfig, work: Callable[[GateChannel, int, Any], Any], args: tuple[Any, Any],
              engine: str = "auto", timeout_s: float | None = None,
              on_start: Callable[[list[Any]], None] | None = None,
              tick: Callable[[], None] | None = None) -> list[RankOutcome]:
    """Run ``work`` in two rank processes; their outcomes, rank 0 first. ``on_start`` gets the
    two processes once both run (e.g. to kill one as a fault); ``tick`` is called about ten
    times a second while the parent waits (e.g. to show progress)."""
    engines.check_engine(engine)
    ctx = mp.get_context("fork")
    pair = SimPair()
    pipes = [ctx.Pipe(duplex=False) for _ in (0, 1)]
    procs = [ctx.Process(target=_rank_main, name=f"verbspec-rank{r}",
                         args=(pair, r, cfg, engine, work, args[r], pipes[r][1]))
             for r in (0, 1)]
    try:
        for p in procs:
            p.start()
        for _, w in pipes:
            w.close()
        pair.close()
        if on_start is not None:
            on_start(procs)
        return [_collect(r, procs[r], pipes[r][0], timeout_s, tick) for r in (0, 1)]
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=EXIT_TIMEOUT_S)


def _collect(rank: int, proc: Any, pipe: Any, timeout_s: float | None,
             tick: Callable[[], None] | None) -> RankOutcome:
    outcome = None
    waited = 0.0
    while not pipe.poll(TICK_S) and (timeout_s is None or waited < timeout_s):
        waited += TICK_S
        if tick is not None:
            tick()
    if pipe.poll():
        try:
            outcome = pipe.recv()
        except EOFError:        # the process died before it reported
            outcome = None
    proc.join(timeout=EXIT_TIMEOUT_S)
    if outcome is None:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            return RankOutcome(rank, error="no result within the time allowed: killed",
                               exitcode=proc.exitcode)
        return RankOutcome(rank, error=f"the rank's process died (exit code {proc.exitcode})",
                           exitcode=proc.exitcode)
    return RankOutcome(rank, outcome.result, outcome.error, proc.exitcode, outcome.dropped)
