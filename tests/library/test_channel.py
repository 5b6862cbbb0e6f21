"""GateChannel on the sim transport: two rank processes, real bytes, UC's silent drop, a real
TCP side channel. Each fault ends in the protocol's documented error within the timeout, the
channel then refuses further use, and no payload is ever accepted wrong."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
from conftest import native_module

from verbspec.refimpl.cli.demo import big_data, vector
from verbspec.refimpl.library.gate_channel import TRAILER, GateChannel, GateError, gate_config
from verbspec.refimpl.library.sim_pair import close_channel, run_ranks
from verbspec.spec.gate import errors
from verbspec.spec.params import ParamError

# a small window and big-gate window so that short runs go past both
SMALL = gate_config({"window": 4, "big_depth": 8, "staging_bytes": 8 * 16384,
                     "timeout_ms": 300})
LINGER_S = 1.0


def gates(ch: GateChannel, rank: int, first: int, n: int) -> int:
    """Exchange gates first..first+n-1; the number whose payload was wrong."""
    wrong = 0
    for seq in range(first, first + n):
        slot = ch.cfg.slot(seq)
        got = ch.exchange(slot // 2, slot % 2, vector(rank, seq, ch.vector_bytes))
        wrong += got != vector(1 - rank, seq, ch.vector_bytes)
    return wrong


def round_trip(ch: GateChannel, rank: int, big: int) -> dict:
    wrong = gates(ch, rank, 1, 20)
    ch.drain()
    ch.drain()                  # the window is down: nothing to do
    got = ch.big_exchange(big_data(rank, big))
    wrong += got != big_data(1 - rank, big)
    wrong += gates(ch, rank, 21, 20)
    return {"wrong": wrong, "gates": ch.stats.gates, "big": ch.stats.big_bytes,
            "drains": ch.stats.drains, "big_gates": ch.stats.big_gates}


@pytest.fixture(params=["python", "native"])
def engine(request):
    """Each gate engine a channel can run (native: skipped, saying why, where not built)."""
    if request.param == "native":
        native_module("gate")
    return request.param


@pytest.mark.parametrize("big", [1, 16384, 5 * 16384 + 77, 30 * 16384])
def test_gates_big_gate_and_rearm_verify_every_payload(big, engine):
    out = run_ranks(SMALL, round_trip, (big, big), engine=engine, timeout_s=60)
    for o in out:
        assert o.error == "", o.error
        assert o.result == {"wrong": 0, "gates": 40, "big": big, "drains": 1, "big_gates": 1}
        assert o.dropped == 0


def expect_failure(ch: GateChannel, rank: int, arg):
    """Run ``arg(ch, rank)``; report the GateError's text and whether the channel then
    refuses use. The process stays up a while after, so that its exit is not what the peer
    sees."""
    try:
        arg(ch, rank)
    except GateError as e:
        first = str(e)
    else:
        return {"error": None}
    try:
        ch.exchange(0, 0, bytes(ch.vector_bytes))
    except GateError as e:
        after = str(e)
    else:
        after = None
    time.sleep(LINGER_S)
    return {"error": first, "after": after}


def drop_one(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 5)
    if rank == 1:
        ch.device.drop_next_sends(2)        # both chunks of gate 6 vanish on the wire
    gates(ch, rank, 6, 5)


def test_a_dropped_message_is_caught_not_accepted(engine):
    """UC loses gate 6 from rank 1; gate 7's chunks then land in gate 6's receives and raise
    the watermark, as the protocol alone cannot tell. The payload check refuses them, and the
    peer, left without gate 7, times out."""
    t = time.monotonic()
    out = run_ranks(SMALL, expect_failure, (drop_one, drop_one), engine=engine, timeout_s=30)
    r0, r1 = out[0].result, out[1].result
    assert r0["error"] == (f"gate 6: the payload in slot {SMALL.slot(6)} failed its check (it "
                           f"carries seq 7): a message was lost or landed in another's receive")
    assert r0["after"].startswith("the channel failed")
    # the peer waits for gate 7 in vain: its timeout, or rank 0 leaving if that comes first
    assert r1["error"] in (errors.GATE_TIMEOUT(seq=7, recv_done=6), errors.GATE_PEER())
    assert time.monotonic() - t < 10


def error_completion(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 3)
    if rank == 0:
        ch.device.fail_next_work_requests(1)
    gates(ch, rank, 4, 3)


def test_an_error_completion_fails_the_gate_with_its_status():
    out = run_ranks(SMALL, expect_failure, (error_completion, error_completion),
                    engine="python", timeout_s=30)
    assert out[0].result["error"].startswith("rdma completion error: ")
    assert out[0].result["after"].startswith("the channel failed")


def crash_after(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 5)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    gates(ch, rank, 6, 5)


def test_a_dead_peer_is_seen_within_the_timeout():
    t = time.monotonic()
    out = run_ranks(SMALL, expect_failure, (crash_after, crash_after), engine="python",
                    timeout_s=30)
    assert out[1].exitcode == -signal.SIGKILL
    assert out[0].result["error"] in (errors.GATE_PEER(), errors.GATE_TIMEOUT(seq=6,
                                                                               recv_done=5))
    assert time.monotonic() - t < 10


def delay_some(ch: GateChannel, rank: int, _arg) -> int:
    """Rank 1's sends of gates 4..8 each wait a quarter of the timeout before leaving."""
    wrong = gates(ch, rank, 1, 3)
    if rank == 1:
        ch.device.delay_sends(ch.cfg.timeout_ms / 1000 / 4)
    wrong += gates(ch, rank, 4, 5)
    if rank == 1:
        ch.device.delay_sends(0.0)
    return wrong + gates(ch, rank, 9, 5)


def test_a_delay_within_the_timeout_is_not_a_failure(engine):
    out = run_ranks(SMALL, delay_some, (None, None), engine=engine, timeout_s=30)
    for o in out:
        assert o.error == "", o.error
        assert o.result == 0 and o.dropped == 0


def leave_silently(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 5)
    if rank == 1:
        close_channel(ch)       # the device and side channel go down without a word
        time.sleep(LINGER_S)
        return
    gates(ch, rank, 6, 5)


def test_a_peer_that_drops_its_channel_is_seen_within_the_timeout(engine):
    t = time.monotonic()
    out = run_ranks(SMALL, expect_failure, (leave_silently, leave_silently), engine=engine,
                    timeout_s=30)
    assert out[0].result["error"] in (errors.GATE_PEER(),
                                      errors.GATE_TIMEOUT(seq=6, recv_done=5))
    assert out[0].result["after"].startswith("the channel failed")
    assert time.monotonic() - t < 10


def write_to_a_closed_side_channel(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 2)
    if rank == 0:
        ch.side.sock.shutdown(socket.SHUT_WR)   # the drain's header cannot be written
    ch.drain()


def test_a_side_channel_that_cannot_be_written_is_a_gate_error_naming_it():
    """A write that fails on the side channel (the peer's end reset, ours shut down) ends the
    channel with a GateError naming the side channel, not an OSError out of the library."""
    cfg = gate_config({"window": 2, "timeout_ms": 2000})
    out = run_ranks(cfg, expect_failure, (write_to_a_closed_side_channel,) * 2,
                    engine="python", timeout_s=30)
    assert out[0].result["error"].startswith("TCP side channel: "), out[0]
    assert out[0].result["after"].startswith("the channel failed")


@pytest.mark.parametrize("apart, what, ours", [({"rank1_window": 8}, "receive window", 4),
                                              ({"rank1_max_msg": 32768}, "message cap", 16384)])
def test_ranks_built_apart_refuse_each_other_at_the_hello(engine, apart, what, ours):
    # each rank runs its own configuration; the hellos cross before any gate
    cfg = gate_config({"window": 4, "big_depth": 8, "staging_bytes": 8 * 32768,
                       "timeout_ms": 300, **apart})
    out = run_ranks(cfg, lambda ch, r, a: gates(ch, r, 1, 2), (None, None), engine=engine,
                    timeout_s=30)
    (theirs,) = apart.values()
    for o, (peer, mine) in zip(out, ((theirs, ours), (ours, theirs)), strict=True):
        assert o.error.endswith(f".GateError: verbspec safety rule: tp hello: peer's {what} "
                                f"{peer} != {mine}"), o


def overflow(ch: GateChannel, rank: int) -> None:
    gates(ch, rank, 1, 2)
    if rank == 0:
        ch.device.overflow_cq()
    gates(ch, rank, 3, 2)


def test_a_cq_overflow_is_fatal_and_named():
    out = run_ranks(SMALL, expect_failure, (overflow, overflow), engine="python", timeout_s=30)
    assert "completion queue overflow" in out[0].result["error"]


def stall_tcp(ch: GateChannel, rank: int) -> None:
    if rank == 1:
        time.sleep(2)           # never reaches its barrier in time
    gates(ch, rank, 1, 1)


def test_a_stalled_side_channel_times_out_by_name():
    out = run_ranks(SMALL, expect_failure, (stall_tcp, stall_tcp), engine="python",
                    timeout_s=30)
    assert out[0].result["error"].startswith("TCP side channel: nothing read from the peer")


def misuse(ch: GateChannel, rank: int, what: str) -> str:
    try:
        if what == "closed":
            ch.close()
            ch.exchange(0, 0, bytes(ch.vector_bytes))
        elif what == "order":
            ch.exchange(0, 1, bytes(ch.vector_bytes))      # seq 1 is layer 0 gate 0
        elif what == "size":
            ch.exchange(0, 0, bytes(ch.vector_bytes + 1))
        elif what == "empty big":
            ch.big_exchange(b"")
        elif what == "big while armed":
            ch.exchange(0, 0, vector(rank, 1, ch.vector_bytes))     # arms the window
            ch.big_exchange(b"x")
    except GateError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize("what, text", [
    ("closed", "the channel is closed: set it up again"),
    ("order", errors.GATE_ORDER(layer=0, gate=1, seq=1)),
    ("size", f"vector of {SMALL.vec_bytes - TRAILER.size + 1} bytes: the channel's vectors "
             f"are {SMALL.vec_bytes - TRAILER.size} bytes"),
    ("empty big", "big_exchange: no data (a big gate moves at least one byte)"),
    ("big while armed", "big_exchange: the decode receive window is armed: drain() it first, "
                        "on both ranks"),
])
def test_misuse_is_refused_by_name(what, text, engine):
    out = run_ranks(SMALL, lambda ch, r, a: misuse(ch, r, a), (what, what), engine=engine,
                    timeout_s=30)
    assert [o.result for o in out] == [text, text]


@pytest.mark.parametrize("values, name", [({"timeout_ms": 0}, "timeout_ms"),
                                          ({"timeout_ms": 60001}, "timeout_ms"),
                                          ({"vec_bytes": 40000}, "vec_bytes")])
def test_a_bad_configuration_names_the_parameter(values, name):
    with pytest.raises(ParamError, match=f"parameter {name}"):
        gate_config(values)


@pytest.mark.parametrize("text", ["0", "60001", "abc", ""])
def test_the_timeout_switch_out_of_range_is_an_error_naming_it(text):
    with pytest.raises(ParamError, match="VERBSPEC_GATE_TIMEOUT_MS"):
        gate_config({}, environ={"VERBSPEC_GATE_TIMEOUT_MS": text})


def test_the_timeout_switch_sets_the_timeout():
    assert gate_config({}, environ={"VERBSPEC_GATE_TIMEOUT_MS": "5"}).timeout_ms == 5


def traced(ch: GateChannel, rank: int, arg) -> list[str]:
    import io

    ch.log = io.StringIO()
    gates(ch, rank, 1, 2 * 430)
    return ch.log.getvalue().splitlines()


def test_profile_and_trace_switches_print_ds4s_lines(monkeypatch):
    monkeypatch.setenv("VERBSPEC_GATE_PROFILE", "1")
    monkeypatch.setenv("VERBSPEC_GATE_TRACE", "1")
    cfg = gate_config({"gates_per_token": 2, "n_slots": 2})
    lines = run_ranks(cfg, traced, (None, None), engine="python", timeout_s=60)[0].result
    trace = [x for x in lines if x.startswith("gate trace")]
    profile = [x for x in lines if x.startswith("rdma gate")]
    assert trace[:2] == ["gate trace l=0 g=0 seq=1 want_slot=0",
                         "gate trace l=0 g=1 seq=2 want_slot=1"]
    assert len(trace) == 860
    assert [x.split(":")[0] for x in profile] == ["rdma gate 0", "rdma gate 1"]
    assert all(x.endswith("(n=430)") for x in profile)
