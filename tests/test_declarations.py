"""What the declarations give, pinned: the gate's actions in their order and the groups a
configuration leaves out. The order is the one every checker, trace and report enumerates, so
moving a step between modules must not change it."""

from __future__ import annotations

from verbspec.spec.actions import action_names
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import BATCH_ACTIONS, BLOCK_ACTIONS, POST_FAILURE_ACTIONS

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
