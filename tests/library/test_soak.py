"""verbspec bench soak, short: sessions with every fault kind in turn, recovery by setting up
again; no wrong payload accepted; a delay within the timeout and a fault-free session end
clean, every other fault in an error."""

from __future__ import annotations

import gc
import json
import os
import threading

import pytest
from conftest import native_module

from verbspec.refimpl.cli.main import main
from verbspec.refimpl.cli.soak import FAULTS


def test_a_short_soak_recovers_from_every_fault_and_accepts_nothing_wrong(capsys):
    assert main(["bench", "soak", "--gates", "12000", "--seed", "5", "--json",
                 "--engine", "python"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_errors"] == [] and out["wrong_payloads_accepted"] == 0
    assert out["gates"] >= 12000 and out["sessions"] >= len(FAULTS)
    assert set(out["faults"]) == set(FAULTS) - {"none"}
    ranks = out["session_outcomes"].values()
    for kind in ("none", "delay"):
        assert all(set(r[kind]) == {"clean"} for r in ranks), out["session_outcomes"]
    for kind in ("drop", "wc_error", "cq_overflow", "tcp_stall", "peer_death"):
        sessions = max(sum(r[kind].values()) for r in ranks)
        assert sum(r[kind].get("error", 0) for r in ranks) >= sessions, kind
    for rss in out["rss_kib"].values():
        assert rss["start"] > 0 and rss["end"] > 0


def test_soak_refuses_bad_arguments(capsys):
    assert main(["bench", "soak", "--gates", "0"]) == 3
    assert "--gates must be at least 1" in capsys.readouterr().err


def live(kinds: tuple[type, ...]) -> dict[str, int]:
    """Objects of each kind still alive, with the rank's threads and open descriptors."""
    gc.collect()
    counts = {k.__name__: 0 for k in kinds}
    for o in gc.get_objects():
        if type(o) in kinds:
            counts[type(o).__name__] += 1
    return {**counts, "threads": threading.active_count(),
            "fds": len(os.listdir("/proc/self/fd"))}


def sessions(pair, rank: int, arg) -> list[dict[str, int]]:
    """Sessions of a few gates, every other one ended by a CQ overflow on rank 0; what is
    alive before the first, after the first and after the last."""
    from verbspec.refimpl.bindings import engine_choice as engines
    from verbspec.refimpl.cli.demo import vector
    from verbspec.refimpl.library.gate_channel import GateChannel, GateError
    from verbspec.refimpl.library.sim_pair import close_channel, open_channel
    from verbspec.refimpl.transport.side_channel import SideChannel
    from verbspec.refimpl.transport.sim_device import SimDevice

    cfg, engine, n = arg
    # the rank is forked from a test process, which may hold objects of these kinds itself:
    # the baseline is what is alive before the first session
    kinds = (GateChannel, SimDevice,
             type(engines.gate_engine(engines.resolved(engine), cfg, cfg.rq_depth, rank=rank)),
             SideChannel)
    after = [live(kinds)]
    for i in range(n):
        ch = open_channel(pair, rank, cfg, engine)
        assert (type(ch), type(ch.engine), type(ch.side)) == (kinds[0], kinds[2], kinds[3])
        try:
            for seq in range(1, 6):
                if i % 2 and rank == 0 and seq == 3:
                    ch.device.overflow_cq()
                slot = cfg.slot(seq)
                ch.exchange(slot // 2, slot % 2, vector(rank, seq, ch.vector_bytes))
        except GateError:
            pass
        finally:
            close_channel(ch)
        del ch
        if i in (0, n - 1):
            after.append(live(kinds))
    return after


@pytest.mark.parametrize("engine", ["python", "native"])
def test_sessions_leave_nothing_behind(engine):
    """Each session's channel, device, engine (a native engine's handle with it), NIC thread
    and sockets are gone once it is closed: what is alive after the last of many sessions is
    what was alive after the first."""
    from verbspec.refimpl.library.gate_channel import gate_config
    from verbspec.refimpl.library.sim_pair import run_pair

    if engine == "native":
        native_module("gate")
    cfg = gate_config({"window": 4, "timeout_ms": 300})
    out = run_pair(sessions, ((cfg, engine, 12),) * 2, timeout_s=120)
    for o in out:
        assert o.error == "", o.error
        before, first, last = o.result
        assert first == last
        assert ({k: v for k, v in last.items() if k not in ("threads", "fds")}
                == {k: v for k, v in before.items() if k not in ("threads", "fds")})
        assert last["threads"] == 1
