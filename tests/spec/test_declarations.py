"""What the declarations give, pinned: the gate's actions in their order and the groups a
configuration leaves out (the order is the one every checker, trace and report enumerates, so
moving a step between modules must not change it), and the texts each wait ends with, which
one table in spec/gate/errors.py declares by phase; and the invariants, declared with
``@invariant`` in both protocols, in their report order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from verbspec.spec import fabric as fb
from verbspec.spec.actions import (
    action_names,
    bind_invariants,
    declared_invariants,
    invariant,
    invariant_names,
)
from verbspec.spec.gate import errors
from verbspec.spec.gate import system as gate_system
from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    BATCH_HDR_READ,
    BIG_BAR_READ,
    BIG_HDR_READ,
    BIG_XFER,
    BLOCK_BAR_READ,
    BLOCK_END,
    BLOCK_HDR_READ,
    BLOCK_WAIT,
    DRAIN_WAIT,
    REAP_PHASES,
    TCP_READ_PHASES,
    WAIT,
    Rank,
)
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import BATCH_ACTIONS, BLOCK_ACTIONS, POST_FAILURE_ACTIONS, build
from verbspec.spec.gate.wire import Payload
from verbspec.spec.tagmatch import system as tagmatch_system

GATE_ACTIONS = (
    "setup", "call_gate", "call_big", "arm_post", "barrier_write", "barrier_read", "gate_send",
    "reap", "gate_done", "consume", "big_header_write", "big_header_read", "drain_post",
    "drain_done", "big_begin", "big_post_recv", "big_barrier_write", "big_barrier_read",
    "big_send", "big_window_done", "call_block", "block_header_write", "block_header_read",
    "batch_header_write", "batch_header_read", "block_post", "block_barrier_write",
    "block_barrier_read", "block_send", "block_gate_done", "block_end", "transmit", "deliver",
    "crash", "error_completion", "stray_completion", "lose", "bad_call", "timeout", "post_fail",
    "poll_fail", "peer_gone")


def test_the_gate_actions_keep_their_order():
    assert action_names(GateSpec) == GATE_ACTIONS
    assert action_names(GateSpec, fault=True) == (
        "crash", "error_completion", "stray_completion", "lose", "bad_call", "timeout",
        "post_fail", "poll_fail", "peer_gone")


def test_the_gate_action_groups_keep_their_members():
    assert BLOCK_ACTIONS == (
        "call_block", "block_header_write", "block_header_read", "block_post",
        "block_barrier_write", "block_barrier_read", "block_send", "block_gate_done",
        "block_end")
    assert BATCH_ACTIONS == ("batch_header_write", "batch_header_read")
    assert POST_FAILURE_ACTIONS == ("post_fail", "poll_fail")


# ---------------------------------------------------------------- the waits' texts, by phase
# A rank whose every count differs, so a text that prints the wrong count shows it.
COUNTED = replace(Rank(), seq=5, recv_done=4, drain_recvs=2, big_no=7,
                  big_recvd=frozenset({0, 1, 2}), big_win=6, big_send_done=1, big_sent=8,
                  block_layer=1, block_recv_done=9, send_outstanding=11)
# (timeout, peer gone, error completion) in each phase a rank waits in, as the spec printed
# them when each was an if-chain of its own
WAIT_TEXTS = {
    WAIT: ("timeout waiting gate seq 5 (recv_done 4)", "peer disconnected during RDMA gate",
           "rdma completion error: wc status 1 (wr_id 13)"),
    DRAIN_WAIT: ("timeout draining RDMA receive window (2/6)",
                 "peer disconnected while draining RDMA receives",
                 "rdma receive-window drain: wc status 1"),
    BIG_XFER: ("timeout in big gate window (3/6 recvs, 1/6 sends, 8 sent)",
               "peer disconnected during big gate", "big gate completion error: wc status 1"),
    BLOCK_WAIT: ("timeout waiting verify-block gate layer 1 (9/6 rows)",
                 "peer disconnected during verify-block gate",
                 "rdma completion error: wc status 1 (wr_id 13)"),
    BLOCK_END: ("verify-block end: 9/12 rows received, 11 sends pending", None,
                "rdma completion error: wc status 1 (wr_id 13)"),
    ARM_BAR_READ: ("verbspec silent failure: the rdma window barrier read timed out",
                   "verbspec silent failure: peer closed the data socket during the rdma window "
                   "barrier", None),
    BIG_HDR_READ: ("big gate header exchange failed or peer closed (layer 0 seq 7): Resource "
                   "temporarily unavailable",
                   "big gate header exchange failed or peer closed (layer 0 seq 7): Connection "
                   "reset by peer", None),
    BIG_BAR_READ: ("big gate window barrier failed", "big gate window barrier failed", None),
    BLOCK_HDR_READ: ("verbspec safety rule: verify-block header exchange failed: Resource "
                     "temporarily unavailable",
                     "verbspec safety rule: verify-block header exchange failed: Connection "
                     "reset by peer", None),
    BATCH_HDR_READ: ("verbspec silent failure: batch gate header read failed: Resource "
                     "temporarily unavailable",
                     "verbspec silent failure: batch gate header read failed: Connection reset "
                     "by peer", None),
    BLOCK_BAR_READ: ("verbspec silent failure: the rdma window barrier read timed out",
                     "verbspec silent failure: peer closed the data socket during the rdma "
                     "window barrier", None),
}


def test_the_waits_table_covers_exactly_the_phases_a_rank_waits_in():
    assert set(errors.WAITS) == REAP_PHASES | TCP_READ_PHASES == set(WAIT_TEXTS)
    assert {p for p, w in errors.WAITS.items() if w.completion} == REAP_PHASES
    assert {p for p, w in errors.WAITS.items() if w.peer_gone is None} == {BLOCK_END}
    texts = [t for w in errors.WAITS.values() for t in (w.timeout, w.peer_gone, w.completion) if t]
    declared = list(errors.ERRORS.values())
    assert all(any(t.message is m for m in declared) for t in texts)


def test_each_wait_ends_with_its_text():
    spec = build({"verify_blocks": 1, "window": 3, "block_rows": 3, "block_layers": 4}).spec
    supplied = set(spec.wait_values(1, COUNTED))
    for phase, (timeout, peer_gone, completion) in WAIT_TEXTS.items():
        rk = replace(COUNTED, phase=phase)
        wait = errors.WAITS[phase]
        assert wait.timeout.value_names() <= supplied, phase
        assert spec.timed_out(1, rk) == timeout
        if peer_gone is None:
            with pytest.raises(AssertionError):
                spec.peer_gone_error(1, rk)
        else:
            assert spec.peer_gone_error(1, rk) == peer_gone
        if completion is not None:
            cqe = fb.CQE("recv", 13, fb.ST_LEN, 0, Payload("warm", 0, 0, 0))
            assert spec.completion_error(phase, cqe) == completion


def test_a_wait_text_names_only_its_messages_fields():
    with pytest.raises(ValueError):
        errors.Text(errors.GATE_TIMEOUT, {"sequence": "seq"})
    with pytest.raises(ValueError):
        errors.Text(errors.GATE_TIMEOUT, {"seq": "seq"}, {"seq": 1})


# ---------------------------------------------------------------- invariants
def test_the_invariants_keep_their_order():
    assert gate_system.INVARIANTS == (
        "no_silent_drop", "chunk_alignment", "watermark_sound", "slot_exclusive",
        "mode_exclusive", "send_accounting", "queue_bounds", "gate_order", "no_deadlock")
    assert tuple(gate_system.INVARIANT_DOCS) == gate_system.INVARIANTS
    assert tagmatch_system.INVARIANTS == (
        "mpi_order", "non_overtaking", "match_once", "offload_refines_software",
        "no_lost_message", "shadow_consistent", "eager_buffer_safety", "rndv_buffer_safety",
        "truncation_reported")
    built = tagmatch_system.build({})
    assert [(i.name, i.over) for i in built.invariants] == [
        (n, "step" if i < 4 else "state") for i, n in enumerate(tagmatch_system.INVARIANTS)]
    assert [i.doc for i in build({}).invariants] == list(gate_system.INVARIANT_DOCS.values())


class Toy:
    def __init__(self, limit: int):
        self.limit = limit

    @invariant
    def inv_below(self, s: int) -> str | None:
        """the counter stays below
        the limit

        (a second paragraph is not part of the doc)"""
        return None if s < self.limit else f"{s} reached {self.limit}"

    @invariant(over="step", doc="steps add one")
    def inv_adds_one(self, pre: int, name: str, args: tuple, post: int, obs: object):
        return None if post == pre + 1 else f"{name} went from {pre} to {post}"


class ToyOnTop(Toy):
    @invariant
    def inv_even(self, s: int) -> str | None:
        """the counter is even"""
        return None if s % 2 == 0 else f"{s} is odd"


def test_an_invariant_is_declared_on_its_check():
    assert [(d.name, d.doc, d.over) for d in declared_invariants(ToyOnTop)] == [
        ("below", "the counter stays below the limit", "state"),
        ("adds_one", "steps add one", "step"), ("even", "the counter is even", "state")]
    assert invariant_names(ToyOnTop) == ("below", "adds_one", "even")
    below, adds_one, even = bind_invariants(ToyOnTop(3))
    assert below.check(2) is None and below.check(3) == "3 reached 3"
    assert adds_one.check(1, "inc", (), 3, None) == "inc went from 1 to 3"
    assert even.check(1) == "1 is odd"
    with pytest.raises(TypeError):
        invariant(lambda self, s: None)
    with pytest.raises(ValueError):
        invariant(over="pair")(Toy.inv_below)

    def inv_mute(self, s):
        return None

    with pytest.raises(TypeError):
        invariant(inv_mute)
