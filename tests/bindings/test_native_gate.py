"""The native gate engine (native/gate/gate_engine.c through refimpl/bindings/native_gate.py): it
runs in lockstep with the spec without a mismatch (random runs and every edge), answers a
misbehaving peer, an out-of-phase call and a failing post or poll as the reference engine does,
writes the spec's texts (from the generated header: tests/bindings/test_gen_header.py),
compiles warning-free, and runs clean under AddressSanitizer and UBSan."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest
from conftest import native_module, require

from verbspec import native
from verbspec.refimpl.bindings.native_gate import (
    BUFS,
    NOT_BUILT,
    PHASES,
    NativeGateEngine,
    config_values,
    factory,
)
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import mutants
from verbspec.refimpl.conformance.gate import (
    BLOCK_CONFIGS,
    LOSS_CONFIGS,
    PER_RANK_CONFIGS,
    POST_FAILURE_CONFIGS,
    GateHarness,
    conform,
    conform_every_edge,
    resolve,
)
from verbspec.refimpl.engines.gate_engine import (
    CALL,
    DEAD,
    Completion,
    Emitted,
    EngineError,
    GateEngine,
)
from verbspec.spec import fabric as fb
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import ARM_POST, IDLE
from verbspec.spec.gate.system import build
from verbspec.spec.gate.wire import TAG_BLOCK, TAG_BULK, TAG_WARM, Hello, TcpItem

ROOT = Path(__file__).resolve().parents[2]
SOURCE = native.engine("gate").source
WARNINGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wpedantic")
# -fno-wrapv: Python's own flags make signed overflow defined (-fwrapv), hiding it from UBSan
SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined", "-fno-wrapv")


@pytest.fixture(scope="module")
def gate_lib() -> ModuleType:
    return native_module("gate")


def compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    require("native", None if cc else "no C compiler (cc) on PATH")
    return cc


def build_module(tmp: Path, name: str, flags: Sequence[str]) -> Path:
    """The gate engine compiled with ``flags`` as extension module ``name`` in ``tmp``."""
    compiler()
    from verbspec.native.gate.build_gate import builder

    return Path(builder(name, ("-std=c11", "-O1", *flags), absolute=True).compile(
        tmpdir=str(tmp)))


# ---------------------------------------------------------------- lockstep with the spec
RANDOM = [({}, 60), ({"window": 2, "ops": 12}, 100),
          ({"window": 2, "ops": 10, "vec_bytes": 100}, 100),
          ({"window": 3, "ops": 10, "qp_type": "rc", "chain_max": 2}, 100),
          ({"window": 4, "gates_per_token": 0, "n_slots": 5, "big_depth": 3, "rq_depth": 2,
            "sq_depth": 2}, 100),
          ({"window": 2, "ops": 10, "gates_per_token": 3, "n_slots": 8, "slot_mask": 0b10110,
            "staging_bytes": 1000}, 60),
          ({"window": 2, "ops": 10, "sq_depth": 1, "big_depth": 3}, 60)]


@pytest.mark.parametrize("values,n", RANDOM, ids=lambda v: ",".join(
    f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v))
def test_the_native_engine_conforms_in_random_runs(gate_lib, values, n):
    rep = conform(build(values), factory(gate_lib), "native", sequences=n, steps=2000)
    assert rep.mismatch is None, str(rep.mismatch)
    assert rep.sequences == n and rep.steps > 1000


def test_every_edge_of_a_small_configuration_conforms(gate_lib):
    sweep = GateHarness(build({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2,
                               "big_gates": 0, "faults": 1}), factory(gate_lib)).every_edge(1)
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert (sweep.states, sweep.edges) == (13_129, 32_448)


# the big gate's sweep (160k edges) is the slow tier's, as part of the whole sweep's too
@pytest.mark.parametrize("values,faults", [
    pytest.param(*c, id=name, marks=[pytest.mark.slow] if name == "big-gate" else [])
    for c, name in zip(POST_FAILURE_CONFIGS, ("decode", "big-gate", "verify-block"),
                       strict=True)])
def test_every_edge_with_failing_posts_and_polls_conforms(gate_lib, values, faults):
    sweep = GateHarness(build(values), factory(gate_lib)).every_edge(faults)
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert sweep.actions["post_fail"] and sweep.actions["poll_fail"], sweep.actions


@pytest.mark.slow
def test_every_edge_of_the_sweep_conforms(gate_lib):
    from verbspec.proofs.gate.refinement import CONFIGS

    rep = conform_every_edge(factory(gate_lib), "native")
    assert rep.mismatch is None, str(rep.mismatch)
    base = [c for c in CONFIGS if not c[1]]
    assert rep.sweep["configs"] == len(base) + len(LOSS_CONFIGS) + len(BLOCK_CONFIGS) + len(
        POST_FAILURE_CONFIGS) + len(PER_RANK_CONFIGS)
    assert rep.sweep["edges"] > 400_000
    assert "lose" in rep.actions


def test_conform_command_runs_the_native_engine(gate_lib, capsys, tmp_path):
    assert main(["conform", "--impl", "native", "--examples", "10", "--quiet", "--json",
                 "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["impl"], out["sequences"], out["mismatches"]) == ("native", 10, 0)


def test_native_is_refused_by_name_where_it_was_not_built(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(native, "load", lambda engine: None)
    with pytest.raises(ValueError, match=re.escape(NOT_BUILT)):
        resolve("native")
    assert main(["conform", "--impl", "native", "--quiet", "--trace-dir", str(tmp_path)]) == 3
    assert NOT_BUILT in capsys.readouterr().err


def test_the_tag_matching_harness_is_not_handed_the_gate_engine():
    from verbspec.refimpl.bindings.native_gate import native_engine
    from verbspec.refimpl.conformance import tagmatch as conformance_tagmatch

    try:
        made = conformance_tagmatch.resolve("native")
    except ValueError:
        return
    assert made is not native_engine


def test_a_mutant_engine_is_caught_at_its_step(tmp_path):
    """The harness sees the C engine itself: reposting one gate too far (mutant 1) is caught
    at the first gate_done, on a shortest path."""
    compiler()
    mod = mutants.build_mutant(mutants.mutant("gate", 1), tmp_path)
    sweep = GateHarness(build({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 3,
                               "big_gates": 0, "faults": 0}), factory(mod)).every_edge(0)
    assert sweep.mismatch is not None and sweep.mismatch.action == "gate_done"
    assert sweep.mismatch.what == "receives posted"


# ---------------------------------------------------------------- beside the reference engine
CFG = build({"window": 2, "ops": 6}).params


def twins(gate_lib: ModuleType, steps: Callable, cfg: GateConfig = CFG,
          grant: int = 3) -> list[tuple[tuple[str, object], str]]:
    """Drives the reference and the native engine through the same calls, comparing what each
    call emits (or refuses) and the view and next step after it; each call's outcome (ok and
    its value, or refused and the text) and next step, as both engines had them."""
    ref, nat = GateEngine(cfg, grant), NativeGateEngine(cfg, grant, gate_lib)
    trail = []
    for call in steps:
        got = []
        for e in (ref, nat):
            try:
                got.append(("ok", call(e)))
            except EngineError as err:
                got.append(("refused", str(err)))
        assert got[0] == got[1], call
        assert ref.view() == nat.view()
        assert ref.next_step() == nat.next_step(), call
        trail.append((got[1], nat.next_step()))
    return trail


@pytest.mark.parametrize("tail", [
    [lambda e: e.tcp_read(TcpItem("byte", 0xD1))],
    [lambda e: e.tcp_read(TcpItem("header", 2, 3, 9))],
    [lambda e: e.tcp_read(TcpItem("header", 1, 4, 9))],
    [lambda e: e.peer_closed()],
    [lambda e: e.tcp_read(TcpItem("header", 1, 3, 9)), lambda e: e.advance(),
     lambda e: e.advance(), lambda e: e.advance(), lambda e: e.tcp_read(TcpItem("byte", 7))],
    *([lambda e: e.tcp_read(TcpItem("header", 1, 3, 9)), lambda e: e.advance(),
       lambda e: e.advance(), lambda e: e.advance(), lambda e: e.tcp_read(TcpItem("byte", 1)),
       lambda e, p=polled: e.completions(p)] for polled in [
        (Completion("recv", 7, 0, CFG.max_msg),),
        (Completion("recv", TAG_BULK, 0, CFG.max_msg),),
        (Completion("recv", TAG_BULK | 4, 0, CFG.max_msg),),
        (Completion("recv", TAG_BULK | 1, 0, CFG.max_msg),) * 2,
        (Completion("recv", TAG_BULK | 2, 0, 100),),
        (Completion("send", TAG_WARM | 1, 0, 0), Completion("recv", TAG_BULK | 3, 0, CFG.max_msg),
         Completion("send", TAG_BULK | 1, 0, 0)),
        (Completion("send", TAG_BULK | 1, 12, 0),),
    ]),
], ids=["barrier-byte-for-header", "header-desync", "header-size", "peer-closed",
        "big-barrier", "untagged", "index-0", "index-past", "duplicate", "length", "warm",
        "error-status"])
def test_a_misbehaving_peer_is_answered_as_the_reference_engine_does(gate_lib, tail):
    twins(gate_lib, [lambda e: e.setup(), lambda e: e.call_big(3), lambda e: e.advance(),
                     *tail, lambda e: e.view()])


def test_the_decode_window_barrier_and_refusals_match_the_reference_engine(gate_lib):
    twins(gate_lib, [
        lambda e: e.consume(), lambda e: e.advance(), lambda e: e.setup(),
        lambda e: e.setup(), lambda e: e.call_gate(0, 0, 1), lambda e: e.advance(),
        lambda e: e.advance(), lambda e: e.poll_size(), lambda e: e.timeout(),
        lambda e: e.tcp_read(TcpItem("header", 1, 2, 3)), lambda e: e.call_gate(0, 0, 1)])
    twins(gate_lib, [
        lambda e: e.setup(), lambda e: e.call_gate(0, 0, 1), lambda e: e.advance(),
        lambda e: e.advance(), lambda e: e.tcp_read(TcpItem("byte", 0xD1)),
        lambda e: e.advance(), lambda e: e.poll_size(), lambda e: e.advance(),
        lambda e: e.completions((Completion("recv", 1, 0, 8),)), lambda e: e.advance(),
        lambda e: e.consume(), lambda e: e.call_gate(0, 1, 2), lambda e: e.call_gate(0, 1, 3)])


# a gate through the window (CFG: two-chunk vectors), then a big gate of 3 chunks that must
# first drain that window: the drain and the window are held at each refusal on the way
BYTE_D1 = TcpItem("byte", 0xD1)
GATE_ONE = [lambda e: e.setup(), lambda e: e.call_gate(0, 0, 1), lambda e: e.advance(),
            lambda e: e.advance(), lambda e: e.tcp_read(BYTE_D1), lambda e: e.advance()]
TO_DRAIN = [*GATE_ONE, lambda e: e.completions((Completion("recv", 1, 0, 8),)),
            lambda e: e.advance(), lambda e: e.consume(), lambda e: e.call_big(3),
            lambda e: e.advance(), lambda e: e.tcp_read(TcpItem("header", 1, 3, 9)),
            lambda e: e.advance()]
DRAINED = [*TO_DRAIN, lambda e: e.completions((Completion("recv", 0, 0, 0),) * 4),
           lambda e: e.completions(tuple(Completion("send", TAG_BULK | i, 0, 0)
                                         for i in range(1, 5))),
           lambda e: e.completions((Completion("send", 1, 0, 0),) * 2), lambda e: e.advance(),
           lambda e: e.advance(), lambda e: e.advance(), lambda e: e.advance()]
IN_XFER = [*DRAINED, lambda e: e.tcp_read(TcpItem("byte", 1)), lambda e: e.advance()]


@pytest.mark.parametrize("peer,text", [
    (Hello(CFG.window + 1, CFG.max_msg), f"receive window {CFG.window + 1} != {CFG.window}"),
    (Hello(CFG.window, CFG.max_msg * 2), f"message cap {CFG.max_msg * 2} != {CFG.max_msg}"),
    (CFG.hello, None),
])
def test_the_hello_refuses_a_peer_built_apart(gate_lib, peer, text):
    # setup reads the peer's hello; a refused one fails the rank, and no later call is taken;
    # setup again is refused either way
    trail = twins(gate_lib, [lambda e: e.setup(peer), lambda e: e.call_gate(0, 0, 1),
                             lambda e: e.setup(peer)])
    (first, step), (second, _), (third, _) = trail
    assert third[0] == "refused"
    if text is None:
        assert first[0] == "ok" and not first[1].result and step == CALL and second[0] == "ok"
    else:
        assert first[1].result == f"verbspec safety rule: tp hello: peer's {text}"
        assert step == DEAD and second[0] == "refused"


@pytest.mark.parametrize("steps", [
    # calls out of phase: a peer's close, a read and a poll where none is awaited, a big gate
    # while a gate is held
    [lambda e: e.setup(), lambda e: e.peer_closed(), lambda e: e.tcp_read(BYTE_D1),
     lambda e: e.completions(()), lambda e: e.timeout(), lambda e: e.poll_size()],
    [*GATE_ONE, lambda e: e.completions((Completion("recv", 1, 0, 8),)), lambda e: e.advance(),
     lambda e: e.call_big(2), lambda e: e.call_gate(0, 1, 2)],
    # gate 0 is no gate: the schedule counts from 1
    [lambda e: e.setup(), lambda e: e.call_gate(0, 0, 0)],
    # a header, or another byte, where the window barrier's byte belongs
    [*GATE_ONE[:4], lambda e: e.tcp_read(TcpItem("header", 1, 3, 9))],
    [*GATE_ONE[:4], lambda e: e.tcp_read(TcpItem("byte", 7))],
    # a BULK send completing in a decode wait (a drain dummy's leftover) moves no count
    [*GATE_ONE, lambda e: e.completions((Completion("send", TAG_BULK | 1, 0, 0),)),
     lambda e: e.poll_size(), lambda e: e.advance()],
    # a drain is over only when every receive, every send and the gate's own send are done
    [*TO_DRAIN, lambda e: e.poll_size(), lambda e: e.advance(),
     lambda e: e.completions((Completion("recv", 0, 0, 0),) * 4), lambda e: e.advance(),
     lambda e: e.completions(tuple(Completion("send", TAG_BULK | i, 0, 0)
                                   for i in range(1, 5))), lambda e: e.advance(),
     lambda e: e.completions((Completion("send", 1, 0, 0),) * 2), lambda e: e.advance()],
    # a header where the big-gate barrier's byte belongs
    [*DRAINED, lambda e: e.tcp_read(TcpItem("header", 1, 3, 9))],
    # a window with every send posted and receives outstanding has no step of its own; a
    # failing entry ends the poll's batch
    [*IN_XFER, lambda e: e.advance(), lambda e: e.poll_size(),
     lambda e: e.completions((Completion("recv", TAG_BULK | 1, 0, CFG.max_msg),
                              Completion("recv", TAG_BULK | 1, 0, CFG.max_msg),
                              Completion("recv", TAG_BULK | 2, 0, CFG.max_msg)))],
    # the window completes: receives, then sends, and the big gate is over
    [*IN_XFER, lambda e: e.completions(tuple(Completion("recv", TAG_BULK | i, 0, CFG.max_msg)
                                             for i in range(1, 4))),
     lambda e: e.advance(), lambda e: e.completions(tuple(
         Completion("send", TAG_BULK | i, 0, 0) for i in range(1, 4))),
     lambda e: e.advance(), lambda e: e.call_gate(0, 1, 2)],
], ids=["out-of-phase", "big-while-held", "seq-0", "header-for-barrier", "byte-for-barrier",
        "bulk-send-in-wait",
        "drain", "header-for-big-barrier", "xfer-batch", "xfer-done"])
def test_refusals_drains_and_windows_match_the_reference_engine(gate_lib, steps):
    twins(gate_lib, [*steps, lambda e: e.view()])


# a post refused part-way through each step that posts, and a poll failing in each wait
NOTHING_POSTED = "no step of the engine has posted anything to fail"


@pytest.mark.parametrize("steps", [
    # nothing to fail: no step yet, a step that wrote a byte, a post that already failed
    [lambda e: e.setup(), lambda e: e.post_failed(0), lambda e: e.poll_failed()],
    [*GATE_ONE[:4], lambda e: e.post_failed(0)],
    [*GATE_ONE[:3], lambda e: e.post_failed(2), lambda e: e.post_failed(0),
     lambda e: e.advance(), lambda e: e.poll_failed()],
    # the arming: the first gate's chain refused, or the second's with the first's up
    [*GATE_ONE[:3], lambda e: e.post_failed(0)],
    [*GATE_ONE[:3], lambda e: e.post_failed(3)],
    # the gate's send, with completions taken between the step and its failed post; on a copy
    [*GATE_ONE, lambda e: e.completions((Completion("recv", 1, 0, 8),)),
     lambda e: e.post_failed(0)],
    [*GATE_ONE, lambda e: copy.deepcopy(e).post_failed(0), lambda e: e.poll_failed()],
    # the repost of a done gate's slot
    [*GATE_ONE, lambda e: e.completions((Completion("recv", 1, 0, 8),)),
     lambda e: e.advance(), lambda e: e.post_failed(0)],
    # the drain's dummies, and its wait
    [*TO_DRAIN, lambda e: e.post_failed(0)],
    [*TO_DRAIN, lambda e: e.poll_failed()],
    # a big-gate window's staging receives, its sends, and its wait
    [*DRAINED[:-1], lambda e: e.post_failed(1)],
    [*IN_XFER, lambda e: e.post_failed(2)],
    [*IN_XFER, lambda e: e.poll_failed()],
], ids=["nothing-yet", "a-byte-written", "failed-already", "arm-first", "arm-second",
        "send-after-completions", "send-on-a-copy", "repost", "drain-post", "drain-poll",
        "big-post", "big-send", "big-poll"])
def test_failing_posts_and_polls_match_the_reference_engine(gate_lib, steps):
    twins(gate_lib, [*steps, lambda e: e.view()])


def test_a_post_failed_with_nothing_to_fail_is_refused(gate_lib):
    e = NativeGateEngine(CFG, 0, gate_lib)
    e.setup()
    with pytest.raises(EngineError, match=NOTHING_POSTED):
        e.post_failed(0)


# ---------------------------------------------------------------- verify blocks, beside it
# a verify block of 2 layers x 1 row of one-chunk vectors, on a rank with no window armed
BLK = build({"window": 2, "ops": 6, "verify_blocks": 1, "vec_bytes": 100}).params
BLK_HDR = TcpItem("block", BLK.block_layers, BLK.block_rows)
B5 = TcpItem("byte", 0xB5)
HEADER = TcpItem("header", 1, 3, 9)
# the block's header written, the peer's awaited
TO_BLOCK_READ = [lambda e: e.setup(), lambda e: e.call_block(), lambda e: e.advance()]
# the peer's header read, layer 0's receives posted, the barrier byte written
TO_BLOCK_BARRIER = [*TO_BLOCK_READ, lambda e: e.tcp_read(BLK_HDR), lambda e: e.advance(),
                    lambda e: e.advance()]
# the barrier read, layer 1's receives and layer 0's send posted: layer 0's row is awaited
IN_BLOCK_WAIT = [*TO_BLOCK_BARRIER, lambda e: e.tcp_read(B5), lambda e: e.advance()]
ROW = TAG_BLOCK | 1


def block_cfg(**values: int) -> GateConfig:
    return build({"window": 2, "ops": 6, "verify_blocks": 1, "vec_bytes": 100,
                  **values}).params


def test_a_verify_block_runs_as_the_reference_engine_runs_it(gate_lib):
    """Through both layers: each wait polls until its rows (and, at the end, its sends) are
    in, an advance before then is refused, and so is a call out of phase."""
    trail = twins(gate_lib, [
        lambda e: e.call_block(), *IN_BLOCK_WAIT,
        lambda e: e.advance(), lambda e: e.poll_size(),
        lambda e: e.completions((Completion("send", ROW, 0, 0),)), lambda e: e.advance(),
        lambda e: e.completions((Completion("recv", ROW, 0, 100),)), lambda e: e.call_block(),
        lambda e: e.advance(), lambda e: e.advance(),
        lambda e: e.completions((Completion("recv", TAG_BLOCK | 2, 0, 100),)),
        lambda e: e.advance(), lambda e: e.peer_closed(), lambda e: e.advance(),
        lambda e: e.poll_size(), lambda e: e.completions((Completion("send", ROW, 0, 0),)),
        lambda e: e.advance(), lambda e: e.call_block()], cfg=BLK, grant=0)
    assert trail[0] == (("refused", "the engine is in phase init, not idle"), "set up")
    wait = len(IN_BLOCK_WAIT) + 1
    sent = trail[wait - 1][0][1]
    assert [(w.wr_id, w.buf) for w in sent.recvs] == [(TAG_BLOCK | 2, "blk")]
    assert [(w.wr_id, w.buf) for w in sent.sends] == [(ROW, "bout")]
    assert trail[wait - 1][1] == "poll"
    assert trail[wait:] == [
        (("refused", "verify-block layer 0 has not arrived (0 rows)"), "poll"),
        (("ok", 16), "poll"),
        (("ok", Emitted()), "poll"),
        (("refused", "verify-block layer 0 has not arrived (0 rows)"), "poll"),
        (("ok", Emitted()), "advance"),
        (("refused", "the engine is in phase block_wait, not idle"), "advance"),
        (("ok", Emitted()), "advance"),                 # layer 1: block_send
        (trail[wait + 7][0], "poll"),                   # its send (no receives ahead)
        (("ok", Emitted()), "advance"),
        (("ok", Emitted()), "poll"),                    # block_end, a send outstanding
        (("refused", "the engine is in phase block_end, not big_header_read"), "poll"),
        (("refused", "the verify block is not over (2 rows, 1 sends outstanding)"), "poll"),
        (("ok", 16), "poll"),
        (("ok", Emitted()), "advance"),
        (("ok", Emitted()), "call"),
        (("ok", Emitted()), "advance")]
    assert [(w.wr_id, w.buf) for w in trail[wait + 7][0][1].sends] == [(ROW, "bout")]
    assert trail[wait + 7][0][1].recvs == ()


def test_a_layer_wider_than_the_longest_chain_is_posted_whole(gate_lib):
    """A layer of 2 rows where the arming and a sub-batch are one WR each: the engine holds
    the layer's chain when the receive depth takes it, and fails silently when it does not."""
    wide = block_cfg(window=1, chain_max=1, block_rows=2)
    hdr = TcpItem("block", 2, 2)
    trail = twins(gate_lib, [*TO_BLOCK_READ, lambda e: e.tcp_read(hdr), lambda e: e.advance(),
                             lambda e: e.advance(), lambda e: e.tcp_read(B5),
                             lambda e: e.advance()], cfg=wide, grant=0)
    armed, gate = trail[4][0][1], trail[-1][0][1]
    assert [w.wr_id for w in armed.recvs] == [TAG_BLOCK | 1, TAG_BLOCK | 2]
    assert [w.wr_id for w in gate.recvs] == [TAG_BLOCK | 3, TAG_BLOCK | 4]
    assert [w.offset for w in gate.sends] == [0, 100]
    trail = twins(gate_lib, [*TO_BLOCK_READ, lambda e: e.tcp_read(hdr), lambda e: e.advance()],
                  cfg=wide, grant=1)
    assert trail[-1][0][1].result == ("verbspec silent failure: verify-block layer 0 needs 2 "
                                      "receives, above the receive depth 1")
    assert trail[-1][0][1].recvs == () and trail[-1][1] == "dead"


@pytest.mark.parametrize("steps,cfg,grant,text", [
    # the peer's header misframed or for another block
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(HEADER)], BLK, 0,
     "verbspec safety rule: verify-block header read found header big 1 (3 chunks)"),
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(B5)], BLK, 0,
     "verbspec safety rule: verify-block header read found byte 0xb5"),
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(TcpItem("block", 3, 1))], BLK, 0,
     "verbspec safety rule: verify block of 2 layers x 1 rows vs the peer's 3 x 1"),
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(TcpItem("block", 2, 4))], BLK, 0,
     "verbspec safety rule: verify block of 2 layers x 1 rows vs the peer's 2 x 4"),
    # a verify-block header where a big gate's belongs
    ([lambda e: e.setup(), lambda e: e.call_big(3), lambda e: e.advance(),
      lambda e: e.tcp_read(BLK_HDR)], CFG, 3,
     "verbspec safety rule: big gate header read found verify-block header (2 layers x 1 rows)"),
    # a header, or the decode window's byte, where the block barrier's 0xB5 belongs
    ([*TO_BLOCK_BARRIER, lambda e: e.tcp_read(HEADER)], BLK, 0,
     "verbspec silent failure: rdma window barrier read byte 0x42, expected 0xb5"),
    ([*TO_BLOCK_BARRIER, lambda e: e.tcp_read(BYTE_D1)], BLK, 0,
     "verbspec silent failure: rdma window barrier read byte 0xd1, expected 0xb5"),
    # a row of 0 bytes; a verify-block row in a big-gate window has no BULK tag
    ([*IN_BLOCK_WAIT, lambda e: e.completions((Completion("recv", ROW, 0, 0),))], BLK, 0,
     "rdma verify-block receive of 0 bytes"),
    ([*IN_XFER, lambda e: e.completions((Completion("recv", ROW, 0, CFG.max_msg),))], CFG, 3,
     f"verbspec safety rule: receive completion wr_id {ROW} without the BULK tag in a big "
     "gate window"),
    # the peer closes in each of the block's reads and its wait; a poll fails in the wait
    ([*TO_BLOCK_READ, lambda e: e.peer_closed()], BLK, 0,
     "verbspec safety rule: verify-block header exchange failed: Connection reset by peer"),
    ([*TO_BLOCK_BARRIER, lambda e: e.peer_closed()], BLK, 0,
     "verbspec silent failure: peer closed the data socket during the rdma window barrier"),
    ([*IN_BLOCK_WAIT, lambda e: e.peer_closed()], BLK, 0,
     "peer disconnected during verify-block gate"),
    ([*IN_BLOCK_WAIT, lambda e: e.poll_failed()], BLK, 0,
     "verbspec silent failure: ibv_poll_cq failed in a gate or verify-block wait"),
    ([*IN_BLOCK_WAIT, lambda e: e.timeout()], BLK, 0,
     "timeout waiting verify-block gate layer 0 (0/1 rows)"),
    # a layer's chain deeper than the receive depth (posting nothing), than half of it or
    # than the send queue (after the next layer's receives)
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(TcpItem("block", 2, 2)), lambda e: e.advance()],
     block_cfg(block_rows=2), 1,
     "verbspec silent failure: verify-block layer 0 needs 2 receives, above the receive "
     "depth 1"),
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(TcpItem("block", 2, 2)), lambda e: e.advance(),
      lambda e: e.advance(), lambda e: e.tcp_read(B5), lambda e: e.advance()],
     block_cfg(block_rows=2), 3,
     "verbspec silent failure: verify-block layer 0 sends 2 work requests, above 1 (half the "
     "receive depth) or the send depth 1024"),
    ([*TO_BLOCK_READ, lambda e: e.tcp_read(TcpItem("block", 2, 2)), lambda e: e.advance(),
      lambda e: e.advance(), lambda e: e.tcp_read(B5), lambda e: e.advance()],
     block_cfg(block_rows=2, sq_depth=1), 0,
     "verbspec silent failure: verify-block layer 0 sends 2 work requests, above 512 (half "
     "the receive depth) or the send depth 1"),
    # a post refused: layer 0's receives, layer 1's ahead of layer 0's sends, those sends
    ([*TO_BLOCK_BARRIER[:-1], lambda e: e.post_failed(0)], BLK, 0,
     "rdma verify-block post_recv(layer 0): Cannot allocate memory"),
    ([*IN_BLOCK_WAIT, lambda e: e.post_failed(0)], BLK, 0,
     "rdma verify-block post_recv(layer 1): Cannot allocate memory"),
    ([*IN_BLOCK_WAIT, lambda e: e.post_failed(1)], BLK, 0,
     "rdma verify-block post_send(layer 0): Cannot allocate memory"),
], ids=["header-for-block-header", "byte-for-block-header", "layers-mismatch",
        "rows-mismatch", "block-header-for-big-header", "header-for-block-barrier",
        "decode-byte-for-block-barrier", "empty-row", "block-row-in-big-window",
        "peer-closed-at-header", "peer-closed-at-barrier", "peer-closed-in-wait",
        "poll-failed-in-wait", "timeout-in-wait", "recv-depth", "send-depth-half-rq",
        "send-depth-sq", "post-layer-0", "post-recv-ahead", "post-send"])
def test_a_verify_block_fails_with_ds4s_text_as_the_reference_engine_does(gate_lib, steps,
                                                                         cfg, grant, text):
    trail = twins(gate_lib, steps, cfg=cfg, grant=grant)
    (kind, out), step = trail[-1]
    assert (kind, out.result, step) == ("ok", text, "dead")


def test_a_big_window_with_a_full_send_queue_has_no_step_of_its_own(gate_lib):
    """One send in flight fills a send queue of 1: the window polls, and an advance is
    refused, until the send completes."""
    tight = build({"window": 2, "ops": 6, "sq_depth": 1}).params
    trail = twins(gate_lib, [
        lambda e: e.setup(), lambda e: e.call_big(3), lambda e: e.advance(),
        lambda e: e.tcp_read(HEADER), lambda e: e.advance(), lambda e: e.advance(),
        lambda e: e.advance(), lambda e: e.tcp_read(TcpItem("byte", 1)), lambda e: e.advance(),
        lambda e: e.advance(), lambda e: e.completions((Completion("send", TAG_BULK | 1, 0, 0),)),
        lambda e: e.advance()], cfg=tight)
    assert [w.wr_id for w in trail[8][0][1].sends] == [TAG_BULK | 1]
    assert trail[8][1] == "poll"
    assert trail[9] == (("refused", "the big-gate window is neither sendable nor complete"),
                        "poll")
    assert trail[10][1] == "advance"
    assert [w.wr_id for w in trail[11][0][1].sends] == [TAG_BULK | 2]


def test_a_configuration_without_verify_blocks_refuses_a_verify_block(gate_lib):
    """The C engine takes block_layers and block_rows 0 as no verify blocks (the reference
    engine, whose configurations always have them, has no such refusal)."""
    from dataclasses import replace

    e = NativeGateEngine(replace(BLK, block_layers=0, block_rows=0), 0, gate_lib)
    e.setup()
    with pytest.raises(EngineError, match=re.escape(
            "the configuration has no verify blocks (block_layers 0)")):
        e.call_block()
    assert e.view().phase == IDLE and e.next_step() == "call"
    assert e.call_gate(0, 0, 1).result == ""


BAD_CONFIGS = [({"max_msg": 0}, "max_msg"), ({"max_msg": 2 ** 31 + 1}, "max_msg"),
               ({"vec_bytes": 0}, "vec_bytes"), ({"window": 32769}, "window"),
               ({"n_slots": 0}, "n_slots"), ({"n_slots": 65537}, "n_slots"),
               ({"gates_per_token": 65537}, "gates_per_token"),
               ({"gates_per_token": 2, "slot_mask": 0b111}, "gates_per_token bits"),
               ({"gates_per_token": 2, "n_slots": 8, "slot_mask": 0b100000001},
                "at or above n_slots"),
               ({"gates_per_token": 2, "slot_start": 65537}, "slot schedule"),
               ({"gates_per_token": 2, "slot_step": 65537}, "slot schedule"),
               ({"gates_per_token": 2, "n_slots": 4, "slot_start": 2, "slot_step": 2},
                "slot schedule"),
               ({"rq_depth": 0}, "rq_depth"), ({"sq_depth": 0}, "sq_depth"),
               ({"chain_max": 0}, "chain_max"), ({"staging_bytes": 0}, "staging_bytes"),
               ({"big_depth": 0}, "big_depth"), ({"big_depth": 257}, "big_depth"),
               ({"big_last_bytes": 16385}, "big_last_bytes"),
               ({"block_layers": 0}, "block_layers and block_rows must be"),
               ({"block_rows": 0}, "block_layers and block_rows must be"),
               ({"block_layers": 65537}, "block_layers and block_rows must be"),
               ({"block_rows": 32769}, "block_layers and block_rows must be")]


@pytest.mark.parametrize("values,named", BAD_CONFIGS,
                         ids=[",".join(f"{k}={v}" for k, v in c.items()) for c, _ in BAD_CONFIGS])
def test_each_configuration_check_of_the_c_engine_names_what_it_refuses(gate_lib, values, named):
    from dataclasses import replace

    with pytest.raises(ValueError, match=f"gate engine configuration: .*{re.escape(named)}"):
        NativeGateEngine(replace(CFG, **values), 0, gate_lib)


def test_a_refused_configuration_needs_no_error_buffer(gate_lib):
    ffi, lib = gate_lib.ffi, gate_lib.lib
    out = ffi.new("vs_gate **")
    cfg = ffi.new("vs_gate_config *", {"max_msg": 0})
    assert lib.vs_gate_create(cfg, 0, out, ffi.NULL, 0) == lib.VS_GATE_REFUSED
    assert out[0] == ffi.NULL
    err = ffi.new("char[]", b"untouched")
    assert lib.vs_gate_create(cfg, 0, out, err, 0) == lib.VS_GATE_REFUSED
    assert ffi.string(err) == b"untouched" and out[0] == ffi.NULL


@pytest.mark.parametrize("item", [TcpItem("header", 1, 2, 1024), TcpItem("batch", 1, 1, 1),
                                  TcpItem("batch", 0, 2, 1), TcpItem("batch", 0, 1, 2),
                                  TcpItem("byte", 0xB5)],
                         ids=("big-header", "layer", "rows", "seq", "byte"))
@pytest.mark.parametrize("impl", ["refimpl", "native"])
def test_a_batch_header_read_fails_as_the_spec_does(gate_lib, impl, item):
    """What a batch gate's header read may meet beyond what the sweeps reach: a big-gate
    header (its tag read as rows), another layer, rows or seq, a barrier byte; each engine
    fails as the spec's step does, with its text."""
    system = build({"verify_blocks": 1, "verify_window": "off"})
    state = system.initial()
    for name, args in (("setup", (0,)), ("setup", (1,)), ("call_block", (0,)),
                       ("batch_header_write", (0,))):
        state, _ = next(a for a in system.actions if a.name == name).apply(state, *args)
    state = dataclasses.replace(state, fabric=fb.tcp_write(state.fabric, 1, item))
    _, obs = system.spec.do_batch_header_read(state, 0)
    cfg, grant = system.spec.cfgs[0], system.spec.rq_grant[0]
    engine = (GateEngine(cfg, grant) if impl == "refimpl"
              else NativeGateEngine(cfg, grant, gate_lib))
    engine.setup()
    engine.call_block()
    assert engine.advance().tcp_out == (TcpItem("batch", 0, 1, 1),)
    assert engine.tcp_read(item).result == obs.result != ""


def test_the_verify_window_switch_is_0_or_1(gate_lib):
    ffi, lib = gate_lib.ffi, gate_lib.lib
    out = ffi.new("vs_gate **")
    err = ffi.new("char[]", lib.VS_GATE_TEXT)
    values = {**config_values(BLK), "verify_window_off": 2}
    assert lib.vs_gate_create(ffi.new("vs_gate_config *", values), 0, out, err,
                              len(err)) == lib.VS_GATE_REFUSED
    assert "verify_window_off must be 0 or 1" in ffi.string(err).decode()


def test_a_mask_schedule_over_64_slots_or_more_is_taken(gate_lib):
    from dataclasses import replace

    e = NativeGateEngine(replace(CFG, gates_per_token=2, n_slots=86, slot_mask=0b1010), 0,
                         gate_lib)
    e.setup()
    assert e.call_gate(0, 1, 1).result == ""        # gate 1: the first set bit, slot 1


def test_the_readers_agree_with_the_view(gate_lib):
    lib, ffi = gate_lib.lib, gate_lib.ffi
    e = NativeGateEngine(CFG, 0, gate_lib)
    for call in GATE_ONE:
        call(e)
        v, h = e.view(), e.handle
        assert (PHASES[lib.vs_gate_phase_of(h)], lib.vs_gate_recv_done(h),
                lib.vs_gate_last_gate_seq(h), bool(lib.vs_gate_window_active(h)),
                lib.vs_gate_send_outstanding(h), ffi.string(lib.vs_gate_error(h)).decode()) == (
            v.phase, v.recv_done, v.last_gate_seq, v.window_active, v.send_outstanding, v.error)
    assert [ffi.string(lib.vs_gate_phase_name(p)) for p in (-1, len(PHASES))] == [b"", b""]


def test_a_copy_is_independent_of_its_original(gate_lib):
    e = NativeGateEngine(CFG, 0, gate_lib)
    e.setup()
    twin = copy.deepcopy(e)
    e.call_gate(0, 0, 1)
    assert (e.view().phase, twin.view().phase) == (ARM_POST, IDLE)
    assert twin.call_gate(0, 0, 1).result == "" and twin.advance().recvs == e.advance().recvs


def test_a_configuration_the_protocol_refuses_is_refused_by_the_c_engine(gate_lib):
    from dataclasses import replace

    with pytest.raises(ValueError, match="vec_bytes"):
        NativeGateEngine(replace(CFG, vec_bytes=3 * CFG.max_msg), 0, gate_lib)
    with pytest.raises(ValueError, match="window"):
        NativeGateEngine(replace(CFG, window=0), 0, gate_lib)


# ---------------------------------------------------------------- the C source
def test_the_c_enums_are_the_adapters_names(gate_lib):
    lib, ffi = gate_lib.lib, gate_lib.ffi
    assert len(PHASES) == lib.VS_GATE_N_PHASES and len(BUFS) == lib.VS_GATE_N_BUFS
    assert [ffi.string(lib.vs_gate_phase_name(p)).decode() for p in range(len(PHASES))] == list(
        PHASES)


def test_the_engine_compiles_warning_free():
    cc = compiler()
    done = subprocess.run([cc, *WARNINGS, "-fsyntax-only", str(SOURCE)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_the_engine_has_no_globals_and_exports_only_its_prefix(tmp_path):
    """No state outside an engine's allocation (no writable data or bss symbols), and every
    exported symbol is vs_gate_*."""
    cc, nm = compiler(), shutil.which("nm")
    require("native", None if nm else "no nm (binutils) on PATH")
    obj = tmp_path / "gate_engine.o"
    subprocess.run([cc, "-std=c11", "-O2", "-c", str(SOURCE), "-o", str(obj)], check=True)
    symbols = [line.split() for line in subprocess.run(
        [nm, str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()]
    defined = [(s[1], s[2]) for s in symbols if len(s) == 3]
    assert [d for d in defined if d[0] in "dDbBcC"] == []
    exported = [name for kind, name in defined if kind.isupper()]
    assert exported and all(name.startswith("vs_gate_") for name in exported), exported


# ---------------------------------------------------------------- sanitizers
DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import {name} as mod
    from verbspec.refimpl.conformance.gate import POST_FAILURE_CONFIGS, GateHarness, conform
    from verbspec.refimpl.bindings.native_gate import factory
    from verbspec.spec.gate.system import build

    make = factory(mod)
    for values in ({{}}, {{"window": 2, "ops": 10, "vec_bytes": 100}},
                   {{"window": 3, "ops": 10, "chain_max": 2, "big_depth": 3}}):
        rep = conform(build(values), make, "native", sequences=30, steps=1500)
        assert rep.mismatch is None, str(rep.mismatch)
    # every edge of big gates through windows of two: copies (vs_gate_clone) at every state
    sweep = GateHarness(build({{"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1,
                                "big_gates": 1, "big_depth": 2, "faults": 0}}),
                        make).every_edge(0)
    assert sweep.mismatch is None, str(sweep.mismatch)
    # failing posts (each undoing its step from the engine's copy of itself) and polls
    for values, faults in (POST_FAILURE_CONFIGS[0], POST_FAILURE_CONFIGS[2]):
        failing = GateHarness(build(values), make).every_edge(faults)
        assert failing.mismatch is None, str(failing.mismatch)
    print("clean", sweep.edges)
""")


def sanitized_run(tmp: Path, flags: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """A conformance run in a subprocess against the engine built with ASan and UBSan."""
    cc = compiler()
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    require("native", None if os.path.isabs(asan) and os.path.exists(asan) else
            f"{cc} has no AddressSanitizer runtime (libasan.so)")
    name = "vs_gate_sanitized"
    build_module(tmp, name, [*SANITIZE, *flags])
    script = tmp / "driver.py"
    script.write_text(DRIVER.format(name=name), encoding="utf-8")
    env = {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "print_stacktrace=1"}
    return subprocess.run([sys.executable, str(script), str(tmp)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


def test_the_engine_runs_clean_under_asan_and_ubsan(tmp_path):
    done = sanitized_run(tmp_path)
    assert "AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr, (
        done.stderr[-3000:])
    assert done.returncode == 0 and done.stdout.startswith("clean"), done.stderr[-3000:]
