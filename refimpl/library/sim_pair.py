"""The ``sim`` transport: two ranks in two OS processes, each with its own ``SimDevice`` (the
wire between them a Unix SEQPACKET socket pair) and a real TCP connection on loopback for the
side channel, as a deployment has.

``run_pair`` forks the two rank processes and runs a target in each with the pair they share;
``run_ranks`` runs ``work(channel, rank, arg)`` in each with a freshly set-up ``GateChannel``;
both return the two outcomes. A rank that raises returns the error
(its type and message) instead of a result; a rank that dies is reported with its exit code,
never waited on forever.

The transport is the pair's: ``SimPair`` (this module) or ``VerbsPair``
(refimpl/transport/verbs_pair.py: real RDMA devices through pyverbs); ``run_pair`` and
``run_ranks`` take
the pair's factory (default ``SimPair``). A pair opens each rank's link: its device and its side
channel. ``VERBSPEC_DEVICE_TRACE=DIR`` makes each rank's channel or endpoint record its device
trace in DIR (refimpl/transport/device_trace.py), on either transport.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import secrets
import signal
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from verbspec.refimpl.bindings import engine_choice as engines
from verbspec.refimpl.library.gate_channel import GateChannel, regions_for
from verbspec.refimpl.transport import device_trace
from verbspec.refimpl.transport.side_channel import SideChannel
from verbspec.refimpl.transport.sim_device import UC, Regions, SimDevice
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
    dropped: int | None = 0     # UC drops seen by this rank's device (None: not known)


class Pair(Protocol):
    """Where two rank processes meet: made in the parent, used in each rank after the fork."""

    transport: str

    def open_device(self, rank: int, regions: Regions, *, qp_type: str,
                    cq_depth: int, max_msg: int, rq_depth: int, sq_depth: int,
                    timeout_s: float) -> tuple[Any, socket.socket]: ...

    def close(self) -> None: ...


class SimPair:
    """Where a pair of rank processes meet: a listener for the wire (a Unix SEQPACKET socket in
    the abstract namespace) and one for the side channel (TCP on 127.0.0.1). Each setup
    connects a new wire and a new side channel, rank 1 to rank 0, so a channel can be set up
    again after a failure with nothing of the old one left in flight."""

    def __init__(self) -> None:
        self.wire_server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.wire_server.bind(f"\0verbspec-sim-{os.getpid()}-{secrets.token_hex(8)}")
        self.wire_server.listen(2)
        self.side_server = socket.create_server(("127.0.0.1", 0))

    transport = "sim"

    def open_device(self, rank: int, regions: Regions, *, qp_type: str,
                    cq_depth: int, max_msg: int, rq_depth: int, sq_depth: int,
                    timeout_s: float) -> tuple[SimDevice, socket.socket]:
        """This rank's device on a new wire, and its end of a new side channel."""
        wire, side = self.connect(rank)
        return SimDevice(wire, regions, cq_depth=cq_depth, max_msg=max_msg, rq_depth=rq_depth,
                         sq_depth=sq_depth, qp_type=qp_type), side

    def connect(self, rank: int) -> tuple[socket.socket, socket.socket]:
        """This rank's ends of a new wire and a new side channel."""
        if rank == 0:
            return self._accept(self.wire_server), self._accept(self.side_server)
        wire = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        wire.settimeout(SETUP_TIMEOUT_S)
        wire.connect(self.wire_server.getsockname())
        wire.settimeout(None)
        side = socket.create_connection(self.side_server.getsockname(), timeout=SETUP_TIMEOUT_S)
        side.settimeout(None)
        return wire, side

    @staticmethod
    def _accept(server: socket.socket) -> socket.socket:
        server.settimeout(SETUP_TIMEOUT_S)
        sock, _ = server.accept()
        sock.settimeout(None)
        return sock

    def close(self) -> None:
        self.wire_server.close()
        self.side_server.close()


def open_link(pair: Pair, rank: int, regions: Regions, *, timeout_s: float,
              **device: Any) -> tuple[Any, Any]:
    """Rank ``rank``'s device and side channel over ``pair`` (in the rank's own process)."""
    dev, sock = pair.open_device(rank, regions, timeout_s=timeout_s, **device)
    return dev, SideChannel(sock, timeout_s)


def open_channel(pair: Pair, rank: int, cfg: GateConfig, engine: str,
                 variant: str = "") -> GateChannel:
    """Set up rank ``rank``'s channel over the pair (in the rank's own process). ``variant``:
    the reference engine behaving as that spec variant (tests and demonstrations only). The
    channel runs the rank's own configuration (``GateConfig.of_rank``)."""
    cfg = cfg.of_rank(rank)
    used = engines.resolved(engine)
    device, side = open_link(pair, rank, regions_for(cfg), timeout_s=cfg.timeout_ms / 1000,
                             qp_type=UC, cq_depth=cfg.cq_depth, max_msg=cfg.max_msg,
                             rq_depth=cfg.rq_depth, sq_depth=cfg.sq_depth)
    trace = device_trace.from_env(device_trace.GATE, rank, pair.transport, used, cfg)
    return GateChannel(cfg, device, side,
                       engines.gate_engine(used, cfg, cfg.rq_depth, variant=variant, rank=rank),
                       trace=trace)


def close_channel(ch: GateChannel) -> None:
    """Take the channel's device and side channel down (the peer sees them close)."""
    ch.close()
    ch.device.close()
    ch.side.close()


def _rank_main(pair: Pair, rank: int, target: Callable[[Pair, int, Any], Any], arg: Any,
               out: Any) -> None:
    try:
        out.send(RankOutcome(rank, target(pair, rank, arg)))
    except BaseException as e:     # the parent reports it; the process ends either way
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        out.send(RankOutcome(rank, error=detail))
    finally:
        out.close()


def run_pair(target: Callable[[Any, int, Any], Any], args: tuple[Any, Any],
             timeout_s: float | None = None,
             on_start: Callable[[list[Any]], None] | None = None,
             tick: Callable[[], None] | None = None,
             pair: Callable[[], Pair] = SimPair) -> list[RankOutcome]:
    """Run ``target(pair, rank, arg)`` in two rank processes; their outcomes, rank 0 first.
    ``on_start`` gets the two processes once both run (e.g. to kill one as a fault); ``tick``
    is called about ten times a second while the parent waits (e.g. to show progress);
    ``pair`` makes the pair the ranks meet at (the transport)."""
    ctx = mp.get_context("fork")
    meet = pair()
    pipes = [ctx.Pipe(duplex=False) for _ in (0, 1)]
    procs = [ctx.Process(target=_rank_main, name=f"verbspec-rank{r}",
                         args=(meet, r, target, args[r], pipes[r][1]))
             for r in (0, 1)]
    try:
        for p in procs:
            p.start()
        for _, w in pipes:
            w.close()
        meet.close()
        if on_start is not None:
            on_start(procs)
        return [_collect(r, procs[r], pipes[r][0], timeout_s, tick) for r in (0, 1)]
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=EXIT_TIMEOUT_S)


def run_ranks(cfg: GateConfig, work: Callable[[GateChannel, int, Any], Any],
              args: tuple[Any, Any], engine: str = "auto", variant: str = "",
              **kw: Any) -> list[RankOutcome]:
    """Run ``work(channel, rank, arg)`` in two rank processes, each with a freshly set-up
    channel (closed after); their outcomes, with the UC drops each device saw. ``kw`` goes to
    ``run_pair`` (``pair=VerbsPair.factory(...)`` for real devices)."""
    engines.check_engine(engine)
    out = run_pair(functools.partial(_with_channel, cfg, engine, variant, work), args, **kw)
    return [replace(o, result=o.result[0], dropped=o.result[1]) if not o.error else o
            for o in out]


def _with_channel(cfg: GateConfig, engine: str, variant: str,
                  work: Callable[[GateChannel, int, Any], Any], pair: Pair, rank: int,
                  arg: Any) -> tuple[Any, int | None]:
    channel = open_channel(pair, rank, cfg, engine, variant)
    try:
        result = work(channel, rank, arg)
    finally:
        close_channel(channel)
    # a verbs device knows its drops once both devices closed
    return result, channel.device.dropped


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
