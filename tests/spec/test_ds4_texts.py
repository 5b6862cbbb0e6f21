"""The gate spec's error texts against ds4's: every failure the spec can end a rank with is
driven here and its text matched against the printf format of its declaration in
spec/gate/errors.py, which is ds4's own format (ds4_tp.c, protocol v14) unless the text is
marked as the spec's own; and every ``_fail`` in spec/gate/steps/ must build its text from
such a declaration."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

import pytest

from verbspec.spec import fabric as fb
from verbspec.spec.actions import declared
from verbspec.spec.gate import errors
from verbspec.spec.gate import steps as steps_module
from verbspec.spec.gate.state import FAILED, GateState
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import GateSystem, build
from verbspec.spec.gate.wire import TAG_BLOCK, TAG_BULK, TAG_WARM, Payload, TcpItem
from verbspec.spec.lts import InvariantViolation, replay
from verbspec.spec.values import set_item

PARAMS = {d.name: d.params for d in declared(GateSpec)}
ROOT = Path(__file__).resolve().parents[2]

# enum ibv_wc_status of <infiniband/verbs.h>, in order: ds4 prints a status by its number
IBV_WC_STATUS = ("IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR",
                 "IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR",
                 "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR",
                 "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
                 "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR")
FABRIC_STATUS = {fb.ST_OK: "IBV_WC_SUCCESS", fb.ST_LEN: "IBV_WC_LOC_LEN_ERR",
                 fb.ST_FLUSH: "IBV_WC_WR_FLUSH_ERR", fb.ST_REM_INV: "IBV_WC_REM_INV_REQ_ERR",
                 fb.ST_RETRY: "IBV_WC_RETRY_EXC_ERR", fb.ST_RNR: "IBV_WC_RNR_RETRY_EXC_ERR"}

# the functions of ds4_tp.c a text may come from
DS4_FUNCTIONS = frozenset({"tp_wc_status_str", "tp_rdma_register_and_exchange",
                           "tp_rdma_gate_exchange", "tp_rdma_window_barrier", "tp_rdma_drain_cq",
                           "tp_rdma_drain_decode_window", "tp_rdma_big_gate_exchange",
                           "ds4_tp_big_gate_exchange", "ds4_tp_batch_block_begin",
                           "tp_rdma_block_post_layer", "tp_rdma_block_gate_exchange",
                           "tp_rdma_post_gate_recv", "ds4_tp_batch_gate_exchange",
                           "ds4_tp_batch_block_end", "tp_hello_exchange"})

_PRINTF = re.compile(r"(%[-+ #0]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|z|j|t)?[diuxXs%])")


def printf_regex(fmt: str) -> re.Pattern[str]:
    """What a printf format prints: integers for %d %u %llu %zu, hex digits for %x (0x first
    with %#x), any text for %s."""
    out = []
    for i, part in enumerate(_PRINTF.split(fmt)):
        if i % 2 == 0:
            out.append(re.escape(part))
            continue
        conv = part[-1]
        if conv == "%":
            out.append("%")
        elif conv == "s":
            out.append(".*")
        elif conv in "di":
            out.append("-?[0-9]+")
        elif conv == "u":
            out.append("[0-9]+")
        else:
            out.append(("0x" if "#" in part else "") + "[0-9a-fA-F]+")
    return re.compile("".join(out), re.DOTALL)


# ---------------------------------------------------------------- driving the spec
def run(system: GateSystem, *steps: tuple):
    return replay(system, [(name, dict(zip(PARAMS[name], args, strict=True)))
                           for name, *args in steps])


SETUP = (("setup", 0), ("setup", 1))
ARMED = (*SETUP, ("call_gate", 0, 0, 0, 1), ("call_gate", 1, 0, 0, 1), ("arm_post", 0),
         ("arm_post", 1), ("barrier_write", 0), ("barrier_write", 1), ("barrier_read", 0),
         ("barrier_read", 1))
GATE_1 = (("gate_send", 0), ("gate_send", 1), ("transmit", 0), ("transmit", 0), ("transmit", 1),
          ("transmit", 1), ("deliver", 0), ("deliver", 0), ("deliver", 1), ("deliver", 1),
          ("reap", 0), ("reap", 1), ("gate_done", 0), ("gate_done", 1), ("consume", 0),
          ("consume", 1))
# rank 0 waits in its drain: gate 1 done, then a one-chunk big gate
DRAINING = (*ARMED, *GATE_1, ("call_big", 0, 1), ("call_big", 1, 1), ("big_header_write", 0),
            ("big_header_write", 1), ("big_header_read", 0), ("big_header_read", 1),
            ("drain_post", 0))
# a one-chunk big gate with no decode window: both ranks reach the window's transfer
BIG_OPEN = (*SETUP, ("call_big", 0, 1), ("call_big", 1, 1), ("big_header_write", 0),
            ("big_header_write", 1), ("big_header_read", 0), ("big_header_read", 1),
            ("big_begin", 0), ("big_begin", 1), ("big_post_recv", 0), ("big_post_recv", 1))
BIG_XFER = (*BIG_OPEN, ("big_barrier_write", 0), ("big_barrier_write", 1),
            ("big_barrier_read", 0), ("big_barrier_read", 1))


def error_of(system: GateSystem, *steps: tuple) -> str:
    """The error rank 0 (else rank 1) ends with after the steps (an invariant the failure
    breaks, as no_deadlock does where no fault was injected, is no concern here)."""
    try:
        state = run(system, *steps).steps[-1].state
    except InvariantViolation as e:
        state = e.trace.steps[-1].state
    failed = [rk.error for rk in state.ranks if rk.phase == FAILED]
    assert failed, [rk.phase for rk in state.ranks]
    return failed[0]


def last_state(system: GateSystem, *steps: tuple) -> GateState:
    return run(system, *steps).steps[-1].state


def peer_writes(state: GateState, item: TcpItem) -> GateState:
    """Rank 1 has written ``item`` on its TCP stream to rank 0."""
    return replace(state, fabric=fb.tcp_write(state.fabric, 1, item))


def cqe_for_rank_0(system: GateSystem, state: GateState, cqe: fb.CQE) -> GateState:
    qp = fb.push_cqe(state.fabric.qps[0], cqe, system.params.cq_depth)
    return replace(state, fabric=fb.set_qp(state.fabric, 0, qp))


def failed_with(state: GateState, r: int = 0) -> str:
    assert state.ranks[r].phase == FAILED
    return state.ranks[r].error


def _big_receive(system: GateSystem, wr_id: int, byte_len: int) -> str:
    state = cqe_for_rank_0(system, last_state(system, *BIG_XFER),
                           fb.CQE("recv", wr_id, fb.ST_OK, byte_len, Payload("big", 1, 0, 1)))
    return failed_with(system.spec.do_reap(state, 0)[0])


def _big_header(system: GateSystem, item: TcpItem) -> str:
    state = peer_writes(last_state(system, *SETUP, ("call_big", 0, 1), ("big_header_write", 0)),
                        item)
    return failed_with(system.spec.do_big_header_read(state, 0)[0])


def _window_barrier(system: GateSystem, item: TcpItem) -> str:
    state = peer_writes(last_state(system, *SETUP, ("call_gate", 0, 0, 0, 1), ("arm_post", 0),
                                   ("barrier_write", 0)), item)
    return failed_with(system.spec.do_barrier_read(state, 0)[0])


def _big_unavailable(system: GateSystem) -> str:
    state = last_state(system, *SETUP, ("call_big", 0, 1), ("call_big", 1, 1),
                       ("big_header_write", 0), ("big_header_write", 1), ("big_header_read", 0))
    rk = replace(state.ranks[0], window_active=True)
    return failed_with(system.spec.do_big_begin(replace(state, ranks=set_item(
        state.ranks, 0, rk)), 0)[0])


def _big_barrier_mismatch(system: GateSystem) -> str:
    state = peer_writes(last_state(system, *BIG_OPEN, ("big_barrier_write", 0)),
                        TcpItem("byte", 7))
    return failed_with(system.spec.do_big_barrier_read(state, 0)[0])


# verify blocks (of the default two layers of one row, unless said): both ranks armed, then
# rank 0 waiting for layer 0's row
BLOCKS = {"verify_blocks": 1}
FAILS = {"post_failures": 1}
BLOCK_ARMED = (*SETUP, ("call_block", 0), ("call_block", 1), ("block_header_write", 0),
               ("block_header_write", 1), ("block_header_read", 0), ("block_header_read", 1),
               ("block_post", 0), ("block_post", 1), ("block_barrier_write", 0),
               ("block_barrier_write", 1), ("block_barrier_read", 0), ("block_barrier_read", 1))
BLOCK_WAITING = (*BLOCK_ARMED, ("block_send", 0))
# one layer: rank 1's row (two chunks) arrived at rank 0 and was reaped; rank 0's own two
# sends have not left
BLOCK_ENDING = (*BLOCK_WAITING, ("block_send", 1), ("transmit", 1), ("transmit", 1),
                ("deliver", 1), ("deliver", 1), ("reap", 0), ("block_gate_done", 0))


def _block_header(item: TcpItem) -> str:
    system = build(BLOCKS)
    state = peer_writes(last_state(system, *SETUP, ("call_block", 0),
                                   ("block_header_write", 0)), item)
    return failed_with(system.spec.do_block_header_read(state, 0)[0])


def _block_receive(byte_len: int) -> str:
    system = build(BLOCKS)
    state = cqe_for_rank_0(system, last_state(system, *BLOCK_WAITING),
                           fb.CQE("recv", TAG_BLOCK | 1, fb.ST_OK, byte_len,
                                  Payload("block", 1, 0, 0)))
    return failed_with(system.spec.do_reap(state, 0)[0])


# verify blocks run as batch gates (DS4_TP_DISABLE_VERIFY_WINDOW): rank 0 waits for rank 1's
# batch header of layer 0
BATCHES = {**BLOCKS, "verify_window": "off"}
BATCH_READING = (*SETUP, ("call_block", 0), ("batch_header_write", 0))


def _batch_header(item: TcpItem) -> str:
    system = build(BATCHES)
    state = peer_writes(last_state(system, *BATCH_READING), item)
    return failed_with(system.spec.do_batch_header_read(state, 0)[0])


# Each declared error, driven: (the spec's texts, each with the system it ran on).
Scenario = Callable[[GateSystem], list[str]]
SCENARIOS: dict[str, Scenario] = {
    "GATE_ORDER": lambda g: [error_of(g, ("setup", 0), ("bad_call", 0, 1, 0, 1))],
    "GATE_SEQ_ORDER": lambda g: [error_of(g, ("setup", 0), ("bad_call", 0, 0, 1, 2)),
                                 error_of(g, *ARMED, *GATE_1, ("bad_call", 0, 0, 0, 1))],
    "WINDOW_BARRIER_MISMATCH": lambda g: [_window_barrier(g, TcpItem("byte", 0x01)),
                                          _window_barrier(g, TcpItem("header", 1, 1, 1024))],
    "WINDOW_BARRIER_CLOSED": lambda g: [error_of(
        g, *SETUP, ("call_gate", 0, 0, 0, 1), ("arm_post", 0), ("barrier_write", 0),
        ("crash", 1), ("peer_gone", 0))],
    # the data socket's receive timeout is the gate timeout
    "WINDOW_BARRIER_TIMEOUT": lambda g: [error_of(
        g, *SETUP, ("call_gate", 0, 0, 0, 1), ("arm_post", 0), ("barrier_write", 0),
        ("timeout", 0))],
    "GATE_COMPLETION": lambda g: [error_of(
        g, *ARMED, ("gate_send", 0), ("gate_send", 1), ("transmit", 0), ("error_completion", 1),
        ("reap", 1))],
    "GATE_PEER": lambda g: [error_of(g, *ARMED, ("gate_send", 0), ("crash", 1),
                                     ("peer_gone", 0))],
    "GATE_TIMEOUT": lambda g: [error_of(g, *ARMED, ("gate_send", 0), ("timeout", 0))],
    "DRAIN_COMPLETION": lambda g: [error_of(g, *DRAINING, ("error_completion", 0), ("reap", 0))],
    "DRAIN_PEER": lambda g: [error_of(g, *DRAINING, ("crash", 1), ("peer_gone", 0))],
    "DRAIN_TIMEOUT": lambda g: [error_of(g, *DRAINING, ("timeout", 0))],
    "BIG_HEADER_FAILED": lambda g: [error_of(g, *SETUP, ("call_big", 0, 1),
                                             ("big_header_write", 0), ("crash", 1),
                                             ("peer_gone", 0)),
                                    error_of(g, *SETUP, ("call_big", 0, 1),
                                             ("big_header_write", 0), ("timeout", 0))],
    "BIG_DESYNC": lambda g: [_big_header(g, TcpItem("header", 2, 1, 1024))],
    "BIG_SIZE_MISMATCH": lambda g: [_big_header(g, TcpItem("header", 1, 65, 1024))],
    "BIG_HEADER_MISFRAMED": lambda g: [_big_header(g, TcpItem("byte", 0xD1))],
    "BIG_UNAVAILABLE": lambda g: [_big_unavailable(g)],
    "BIG_BARRIER": lambda g: [error_of(g, *BIG_OPEN, ("big_barrier_write", 0), ("crash", 1),
                                       ("peer_gone", 0)),
                              _big_barrier_mismatch(g),
                              error_of(g, *BIG_OPEN, ("big_barrier_write", 0), ("timeout", 0))],
    "BIG_COMPLETION": lambda g: [error_of(g, *BIG_XFER, ("error_completion", 0), ("reap", 0))],
    "BIG_UNTAGGED": lambda g: [_big_receive(g, 3, 16384),
                               error_of(build({}, ["stray-warm-receive"]), *BIG_XFER,
                                        ("stray_completion", 0, "recv"), ("reap", 0))],
    "BIG_INVALID": lambda g: [_big_receive(g, TAG_BULK | 6, 16384),
                              _big_receive(g, TAG_BULK | 0, 16384)],
    "BIG_LENGTH": lambda g: [_big_receive(g, TAG_BULK | 1, 100),
                             # a big gate's last chunk must hold exactly its remainder
                             _big_receive(build({"big_last_bytes": 100}), TAG_BULK | 1, 16384)],
    "BIG_PEER": lambda g: [error_of(g, *BIG_XFER, ("crash", 1), ("peer_gone", 0))],
    "BIG_TIMEOUT": lambda g: [error_of(g, *BIG_XFER, ("big_send", 0), ("timeout", 0))],
    "BLOCK_HEADER_FAILED": lambda g: [
        error_of(build(BLOCKS), *SETUP, ("call_block", 0), ("block_header_write", 0),
                 ("crash", 1), ("peer_gone", 0)),
        error_of(build(BLOCKS), *SETUP, ("call_block", 0), ("block_header_write", 0),
                 ("timeout", 0))],
    "BLOCK_HEADER_MISFRAMED": lambda g: [_block_header(TcpItem("byte", 0xD1)),
                                         _block_header(TcpItem("header", 1, 1, 1024))],
    # a planted header, and rank 1's own block of two rows
    "BLOCK_HEADER_MISMATCH": lambda g: [_block_header(TcpItem("block", 3, 1)), error_of(
        build({**BLOCKS, "rank1_block_rows": 2}), *SETUP, ("call_block", 0), ("call_block", 1),
        ("block_header_write", 0), ("block_header_write", 1), ("block_header_read", 0))],
    # a two-chunk row: a layer is two receives
    "BLOCK_RECV_DEPTH": lambda g: [error_of(
        build({**BLOCKS, "rq_depth": 1}), *SETUP, ("call_block", 0), ("call_block", 1),
        ("block_header_write", 0), ("block_header_write", 1), ("block_header_read", 0),
        ("block_post", 0))],
    "BLOCK_SEND_DEPTH": lambda g: [error_of(build({**BLOCKS, "rq_depth": 3}), *BLOCK_WAITING)],
    "BLOCK_EMPTY": lambda g: [_block_receive(0)],
    "BLOCK_PEER": lambda g: [error_of(build(BLOCKS), *BLOCK_WAITING, ("crash", 1),
                                      ("peer_gone", 0))],
    "BLOCK_TIMEOUT": lambda g: [error_of(build(BLOCKS), *BLOCK_WAITING, ("timeout", 0))],
    "BLOCK_END_TIMEOUT": lambda g: [error_of(build({**BLOCKS, "block_layers": 1}),
                                             *BLOCK_ENDING, ("timeout", 0))],
    # failing posts and polls: arming refused at its first gate and at its last (15 gates of
    # two chunks up), the repost after gate 1, and each other posting step and wait
    "POST_RECV": lambda g: [error_of(build(FAILS), *SETUP, ("call_gate", 0, 0, 0, 1),
                                     ("post_fail", 0, posted)) for posted in (0, 30)] + [
        error_of(build(FAILS), *ARMED, *GATE_1[:11], ("post_fail", 0, 0))],
    "POST_SEND": lambda g: [error_of(build(FAILS), *ARMED, ("post_fail", 0, 0))],
    # rank 1 built with another window, or another message cap
    "HELLO_MISMATCH": lambda g: [error_of(build(apart), ("setup", 0)) for apart in (
        {"rank1_window": 8}, {"rank1_max_msg": 32768})],
    "CQ_POLL": lambda g: [error_of(build(FAILS), *ARMED, ("gate_send", 0), ("poll_fail", 0)),
                          error_of(build({**BLOCKS, **FAILS}), *BLOCK_WAITING,
                                   ("poll_fail", 0))],
    "DRAIN_POST_FAILED": lambda g: [error_of(build(FAILS), *DRAINING[:-1], ("post_fail", 0, 0))],
    "DRAIN_POLL": lambda g: [error_of(build(FAILS), *DRAINING, ("poll_fail", 0))],
    "BIG_POST_RECV": lambda g: [error_of(build(FAILS), *BIG_OPEN[:-2], ("post_fail", 0, 0))],
    "BIG_POST_SEND": lambda g: [error_of(build(FAILS), *BIG_XFER, ("post_fail", 0, 0))],
    "BIG_POLL": lambda g: [error_of(build(FAILS), *BIG_XFER, ("poll_fail", 0))],
    "BLOCK_POST_RECV": lambda g: [
        error_of(build({**BLOCKS, **FAILS}), *BLOCK_ARMED[:8], ("post_fail", 0, 0)),
        error_of(build({**BLOCKS, **FAILS}), *BLOCK_ARMED, ("post_fail", 0, 0))],
    "BLOCK_POST_SEND": lambda g: [error_of(build({**BLOCKS, **FAILS}), *BLOCK_ARMED,
                                           ("post_fail", 0, 2))],
    # another layer, rows or seq; a big-gate header, whose tag ds4 reads as the rows
    "BATCH_DESYNC": lambda g: [_batch_header(TcpItem("batch", 1, 1, 1)),
                               _batch_header(TcpItem("batch", 0, 2, 1)),
                               _batch_header(TcpItem("batch", 0, 1, 2)),
                               _batch_header(TcpItem("header", 1, 2, 1024))],
    "BATCH_HEADER_FAILED": lambda g: [
        error_of(build(BATCHES), *BATCH_READING, ("crash", 1), ("peer_gone", 0)),
        error_of(build(BATCHES), *BATCH_READING, ("timeout", 0))],
    # the peer armed its verify window: its barrier byte, or the spec's block header
    "BATCH_HEADER_MISFRAMED": lambda g: [
        _batch_header(TcpItem("byte", 0xB5)), error_of(
            build({**BLOCKS, "rank1_verify_window": "off"}), *SETUP, ("call_block", 0),
            ("call_block", 1), ("block_header_write", 0), ("batch_header_write", 1),
            ("batch_header_read", 1))],
}

# What some scenarios must print, as ds4 would for the same state.
EXPECTED = {
    "GATE_COMPLETION": ["rdma completion error: wc status 12 (wr_id 0)"],
    "DRAIN_TIMEOUT": ["timeout draining RDMA receive window (0/32)"],
    "DRAIN_COMPLETION": ["rdma receive-window drain: wc status 12"],
    "WINDOW_BARRIER_MISMATCH": [
        "verbspec silent failure: rdma window barrier read byte 0x01, expected 0xd1",
        # ds4 reads one byte of a header: the low byte of its magic "DS4B"
        "verbspec silent failure: rdma window barrier read byte 0x42, expected 0xd1"],
    "BIG_HEADER_FAILED": [f"big gate header exchange failed or peer closed (layer 0 seq 1): "
                          f"{reason}" for reason in ("Connection reset by peer",
                                                     "Resource temporarily unavailable")],
    "BIG_DESYNC": ["big gate desync: got l=0 tag=b16 seq=2, want l=0 seq=1"],
    "BIG_SIZE_MISMATCH": ["verbspec safety rule: big gate 1 of 1 chunks vs the peer's 65 chunks"],
    "BIG_BARRIER": ["big gate window barrier failed"] * 3,
    "BIG_COMPLETION": ["big gate completion error: wc status 12"],
    "BIG_UNTAGGED": [f"verbspec safety rule: receive completion wr_id {wr_id} without the BULK "
                     f"tag in a big gate window" for wr_id in (3, TAG_WARM)],
    "BIG_INVALID": [f"duplicate or invalid big gate completion {TAG_BULK | 6}",
                    f"duplicate or invalid big gate completion {TAG_BULK | 0}"],
    "BIG_LENGTH": ["big gate chunk 0 received 100 bytes, expected 16384",
                   "big gate chunk 0 received 16384 bytes, expected 100"],
    "BIG_TIMEOUT": ["timeout in big gate window (0/1 recvs, 0/1 sends, 1 sent)"],
    "BLOCK_HEADER_FAILED": [f"verbspec safety rule: verify-block header exchange failed: "
                            f"{reason}" for reason in ("Connection reset by peer",
                                                       "Resource temporarily unavailable")],
    "BLOCK_HEADER_MISMATCH": ["verbspec safety rule: verify block of 2 layers x 1 rows vs the "
                              "peer's 3 x 1",
                              "verbspec safety rule: verify block of 2 layers x 1 rows vs the "
                              "peer's 2 x 2"],
    "BLOCK_RECV_DEPTH": ["verbspec silent failure: verify-block layer 0 needs 2 receives, above "
                         "the receive depth 1"],
    "BLOCK_SEND_DEPTH": ["verbspec silent failure: verify-block layer 0 sends 2 work requests, "
                         "above 1 (half the receive depth) or the send depth 1024"],
    "BLOCK_EMPTY": ["rdma verify-block receive of 0 bytes"],
    "BLOCK_TIMEOUT": ["timeout waiting verify-block gate layer 0 (0/1 rows)"],
    "BLOCK_END_TIMEOUT": ["verify-block end: 1/1 rows received, 2 sends pending"],
    "HELLO_MISMATCH": ["verbspec safety rule: tp hello: peer's receive window 8 != 16",
                       "verbspec safety rule: tp hello: peer's message cap 32768 != 16384"],
    "POST_RECV": [f"rdma post_recv(seq {seq}): Cannot allocate memory" for seq in (1, 16, 17)],
    "BIG_POST_RECV": ["big gate post_recv(0 of 1): Cannot allocate memory"],
    "BIG_POST_SEND": ["big gate post_send(1): Cannot allocate memory"],
    "BIG_POLL": ["big gate poll_cq failed at 0/16384 bytes: Input/output error"],
    "BLOCK_POST_RECV": [f"rdma verify-block post_recv(layer {layer}): Cannot allocate memory"
                        for layer in (0, 1)],
    "BLOCK_POST_SEND": ["rdma verify-block post_send(layer 0): Cannot allocate memory"],
    "BATCH_DESYNC": [f"batch gate desync: got l={layer} rows={rows} seq={seq}, want l=0 rows=1 "
                     f"seq=1" for layer, rows, seq in ((1, 1, 1), (0, 2, 1), (0, 1, 2),
                                                       (0, 0xB16, 1))],
    "BATCH_HEADER_FAILED": [f"verbspec silent failure: batch gate header read failed: {reason}"
                            for reason in ("Connection reset by peer",
                                           "Resource temporarily unavailable")],
    "BATCH_HEADER_MISFRAMED": [
        "verbspec silent failure: batch gate header read found byte 0xb5",
        "verbspec silent failure: batch gate header read found verify-block header (2 layers x "
        "1 rows)"],
}


@pytest.fixture(scope="module")
def produced() -> dict[str, list[str]]:
    system = build({}, ())
    return {name: scenario(system) for name, scenario in SCENARIOS.items()}


# ---------------------------------------------------------------- the table
def test_every_declared_error_has_a_scenario():
    assert set(SCENARIOS) == set(errors.ERRORS)


def test_the_table_pairs_each_text_with_ds4():
    for name, msg in errors.ERRORS.items():
        assert msg.ds4_function in DS4_FUNCTIONS, name
        assert msg.ds4_line > 0, name
        assert not msg.fmt.startswith(errors.DS4_PREFIX) and not msg.fmt.endswith("\n"), name
        if msg.origin == errors.DS4:
            assert msg.ds4_format == msg.fmt, name
            assert "verbspec" not in msg.fmt, name
        else:
            assert msg.ds4_format is None, name
            assert msg.fmt.startswith(errors.OWN_PREFIX[msg.origin]), name


def test_spec_texts_match_their_ds4_format(produced):
    for name, texts in produced.items():
        msg = errors.ERRORS[name]
        assert texts, name
        for text in texts:
            assert printf_regex(msg.fmt).fullmatch(text), (name, text, msg.fmt)
            if msg.origin == errors.DS4:
                assert not text.startswith("verbspec"), (name, text)
            # one declaration only explains each text, and the invariants find it
            matching = [n for n, m in errors.ERRORS.items() if printf_regex(m.fmt).fullmatch(text)]
            assert matching == [name], (text, matching)
            assert errors.documented(text) is msg


def test_spec_texts_fill_ds4s_numbers(produced):
    for name, texts in EXPECTED.items():
        assert produced[name] == texts, name


def test_spec_own_texts_are_no_ds4_text(produced):
    ds4 = [printf_regex(m.fmt) for m in errors.ERRORS.values() if m.origin == errors.DS4]
    for name, msg in errors.ERRORS.items():
        if msg.origin != errors.DS4:
            for text in produced[name]:
                assert text.startswith(errors.OWN_PREFIX[msg.origin])
                assert not any(p.fullmatch(text) for p in ds4), text


def test_the_docs_list_every_text_with_its_ds4_line():
    doc = (ROOT / "docs" / "gate.md").read_text()
    for name, msg in errors.ERRORS.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{name}` |")), "")
        assert f"| `{msg.fmt}` |" in row, name
        assert row.endswith(f"| `{msg.ds4_function}` {msg.ds4_line} |"), name
        assert ("| ds4 |" in row) == (msg.origin == errors.DS4), name


def test_status_numbers_are_ibv_wc_status():
    assert set(fb.WC_STATUS_CODE) == set(FABRIC_STATUS)
    for status, code in fb.WC_STATUS_CODE.items():
        assert IBV_WC_STATUS[code] == FABRIC_STATUS[status]


def test_the_chunking_log_is_ds4s(gate_system):
    log = run(gate_system, ("setup", 0)).steps[-1].obs.log
    assert log == ("rdma gate vectors ride as 2 chunked messages (24576 bytes > 16384 limit)",)
    assert printf_regex(errors.CHUNKED_VECTORS.fmt).fullmatch(log[0])


def test_a_text_takes_exactly_its_fields_with_printf_types():
    assert errors.GATE_ORDER(layer=1, gate=0, seq=3) == "gate order broke: layer 1 gate 0 vs seq 3"
    with pytest.raises(TypeError):
        errors.GATE_ORDER(layer=1, gate=0)
    with pytest.raises(TypeError):
        errors.GATE_TIMEOUT(seq="1", recv_done=0)
    with pytest.raises(ValueError):
        errors.GATE_TIMEOUT(seq=-1, recv_done=0)
    with pytest.raises(ValueError):
        errors.Message("timeout waiting gate seq %llu", (), "tp_rdma_gate_exchange", 1586)
    with pytest.raises(ValueError):
        errors.Message("gate seq %llu", ("seq",), "tp_rdma_gate_exchange", 1528,
                       errors.SAFETY_RULE)


# ---------------------------------------------------------------- the source of the steps
def ad_hoc_failures(source: str) -> list[str]:
    """Places in ``source`` (the steps' modules) that end a rank with a text not built from a
    declared one: a ``_fail`` whose message is neither ``errors.NAME(...)`` (or a text of the
    waits' table, ``errors.WAITS[phase].column(...)``) nor a call of a GateSpec method whose
    every return is one; a rank put in FAILED, or given an error, outside ``_fail``
    (``do_crash`` records "crashed" for a crashed rank, which is no failure)."""
    tree = ast.parse(source)
    methods = {f.name: f for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
               for f in node.body if isinstance(f, ast.FunctionDef)}

    def declared_text(node: ast.expr | None) -> bool:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return False
        func = node.func
        if isinstance(func.value, ast.Subscript) and func.attr in WAIT_COLUMNS:
            func = func.value.value     # errors.WAITS[phase].column(values)
            return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id == "errors" and func.attr == "WAITS")
        return (isinstance(func.value, ast.Name) and func.value.id == "errors"
                and func.attr in errors.ERRORS)

    def declared_helper(node: ast.expr) -> bool:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
            return False
        helper = methods.get(node.func.attr)
        returns = [n for n in ast.walk(helper)] if helper else []
        returns = [n for n in returns if isinstance(n, ast.Return)]
        return bool(returns) and all(declared_text(n.value) for n in returns)

    bad = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_fail"):
            msg = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "msg"), None)
            if msg is None or not (declared_text(msg) or declared_helper(msg)):
                bad.append(f"line {node.lineno}: _fail with {ast.unparse(msg) if msg else '?'}")
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if func.name == "_fail":
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Name) and node.id == "FAILED":
                bad.append(f"line {node.lineno}: {func.name} names FAILED")
            if (isinstance(node, ast.keyword) and node.arg == "error"
                    and func.name != "do_crash"):
                bad.append(f"line {node.lineno}: {func.name} sets an error")
    return bad


WAIT_COLUMNS = frozenset(f.name for f in fields(errors.Wait))
# the steps package's modules, read as one source
STEPS_SOURCE = "".join(f.read_text()
                       for f in sorted(Path(steps_module.__file__).parent.glob("*.py")))


def test_every_failure_in_steps_uses_a_declared_text():
    assert ad_hoc_failures(STEPS_SOURCE) == []


@pytest.mark.parametrize("old, new", [
    ("errors.GATE_ORDER(layer=layer, gate=gate, seq=seq)",
     'f"gate order broke: layer {layer} gate {gate} vs seq {seq}"'),
    ("errors.WAITS[rk.phase].peer_gone(self.wait_values(r, rk))",
     '"peer disconnected during RDMA gate"'),
    ("errors.BIG_UNAVAILABLE()", "errors.PEER_CLOSED_ERRNO"),
    ("phase=IDLE)\n", "phase=FAILED)\n"),
])
def test_the_source_check_finds_a_planted_ad_hoc_text(old, new):
    assert old in STEPS_SOURCE
    assert ad_hoc_failures(STEPS_SOURCE.replace(old, new, 1))
