"""The gate protocol step by step: exact observations on scripted runs, and the error paths."""

from __future__ import annotations

import pytest

from verbspec.spec.actions import declared
from verbspec.spec.gate.state import WRView
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import build
from verbspec.spec.gate.wire import TAG_BULK, TAG_WARM
from verbspec.spec.lts import InvariantViolation, replay
from verbspec.spec.params import ParamError

PARAMS = {d.name: d.params for d in declared(GateSpec)}


def moves(*steps: tuple) -> list[tuple[str, dict]]:
    """("reap", 1) -> ("reap", {"rank": 1}): arguments named as the action declares them."""
    return [(name, dict(zip(PARAMS[name], args, strict=True))) for name, *args in steps]


ARMED = (("setup", 0), ("setup", 1), ("call_gate", 0, 0, 0, 1), ("call_gate", 1, 0, 0, 1),
         ("arm_post", 0), ("arm_post", 1), ("barrier_write", 0), ("barrier_write", 1),
         ("barrier_read", 0), ("barrier_read", 1))


def gate_exchange(seq: int) -> tuple:
    """Both ranks send gate `seq`, the wire carries both chunks each way, both close the gate."""
    return (("gate_send", 0), ("gate_send", 1),
            ("transmit", 0), ("transmit", 0), ("transmit", 1), ("transmit", 1),
            ("deliver", 0), ("deliver", 0), ("deliver", 1), ("deliver", 1),
            ("reap", 0), ("reap", 1), ("gate_done", 0), ("gate_done", 1),
            ("consume", 0), ("consume", 1))


def run(system, *steps):
    return replay(system, moves(*steps))


def test_arming_posts_the_window_with_the_seq_on_the_last_chunk_only(gate_system):
    t = run(gate_system, *ARMED[:5])
    obs = t.steps[-1].obs
    assert len(obs.recvs) == 16 * 2
    # gate 1 in slot 0, gate 2 in slot 1 (24576-byte slots); chunks of 16384 + 8192 bytes
    assert obs.recvs[:4] == (WRView(0, "in", 0, 16384), WRView(1, "in", 16384, 8192),
                             WRView(0, "in", 24576, 16384), WRView(2, "in", 40960, 8192))
    assert [w.wr_id for w in obs.recvs[1::2]] == list(range(1, 17))
    assert t.steps[1].obs.log == (
        "rdma gate vectors ride as 2 chunked messages (24576 bytes > 16384 limit)",)


def test_one_gate_each_way_then_repost_of_seq_plus_window(gate_system):
    t = run(gate_system, *ARMED, *gate_exchange(1))
    by_action = {(s.action, tuple(s.args.values())): s.obs for s in t.steps[1:]}
    send = by_action[("gate_send", (0,))]
    assert send.sends == (WRView(1, "out", 0, 16384, True), WRView(1, "out", 16384, 8192, True))
    reap = by_action[("reap", (1,))]
    assert [(c.opcode, c.wr_id, c.byte_len) for c in reap.polled] == [
        ("send", 1, 16384), ("send", 1, 8192), ("recv", 0, 16384), ("recv", 1, 8192)]
    done = by_action[("gate_done", (0,))]
    assert done.recvs == (WRView(0, "in", 16 * 24576, 16384), WRView(17, "in", 16 * 24576 + 16384,
                                                                       8192))
    final = t.steps[-1].state
    for rk in final.ranks:
        assert (rk.recv_done, rk.last_gate_seq, rk.window_active, rk.send_outstanding) == (
            1, 1, True, 0)
    assert final.ranks[0].held == () and final.ranks[1].held == ()


def test_barrier_is_crossed_once_per_arming_not_per_gate(gate_system):
    t = run(gate_system, *ARMED, *gate_exchange(1), ("call_gate", 0, 0, 1, 2),
            ("call_gate", 1, 0, 1, 2), *gate_exchange(2))
    assert [s.action for s in t.steps].count("barrier_write") == 2
    assert t.steps[-1].state.ranks[0].recv_done == 2


def test_drain_then_big_gate_then_rearm():
    sys_ = build({"chain_max": 4})
    steps = [*ARMED, *gate_exchange(1), ("call_big", 0, 5), ("call_big", 1, 5),
             ("big_header_write", 0), ("big_header_write", 1),
             ("big_header_read", 0), ("big_header_read", 1), ("drain_post", 0), ("drain_post", 1)]
    t = run(sys_, *steps)
    dummies = t.steps[-2].obs.sends
    assert len(dummies) == 32 and dummies[0].wr_id == TAG_BULK | 1 and dummies[-1].wr_id == (
        TAG_BULK | 32)
    # as in ds4, each dummy is as long as the chunk it stands for, read from the staging scratch
    c = sys_.spec.cfg
    assert [(d.buf, d.offset, d.length) for d in dummies[:2]] == [
        ("stage", 0, c.max_msg), ("stage", c.max_msg, c.vec_bytes - c.max_msg)]
    assert all(d.length == dummies[i % 2].length for i, d in enumerate(dummies))
    # drive the fabric and reaping until both drains finish
    t = _drive(sys_, t, stop=lambda s: all(
        not r.window_active and r.phase not in ("drain_wait", "drain_post") for r in s.ranks))
    for rk in t.steps[-1].state.ranks:
        assert not rk.window_active and rk.recv_done == 1 and rk.send_outstanding == 0
        assert t.steps[-1].state.fabric.qps[0].rq == ()
    t = _drive(sys_, t, stop=lambda s: all(r.phase == "idle" for r in s.ranks))
    posts = [s.obs.recvs for s in t.steps if s.action == "big_post_recv" and s.args["rank"] == 0]
    assert [len(p) for p in posts] == [4, 1]        # chains of chain_max=4, one window of 5
    assert [s.obs.tcp_out[0].value for s in t.steps
            if s.action == "big_barrier_write" and s.args["rank"] == 0] == [1]


def test_a_big_gates_last_chunk_is_its_remainder_posted_sent_and_checked_exactly():
    """As ds4 posts a transfer's last chunk: its receive and send are its remainder, and its
    arrival is that long (a receive of another length fails: tests/spec/test_ds4_texts.py)."""
    sys_ = build({"chain_max": 4, "big_last_bytes": 100})
    t = run(sys_, ("setup", 0), ("setup", 1), ("call_big", 0, 5), ("call_big", 1, 5),
            ("big_header_write", 0), ("big_header_write", 1), ("big_header_read", 0),
            ("big_header_read", 1))
    t = _drive(sys_, t, stop=lambda s: all(r.phase == "idle" for r in s.ranks))
    recvs = [w for s in t.steps if s.action == "big_post_recv" and s.args["rank"] == 0
             for w in s.obs.recvs]
    sends = [w for s in t.steps if s.action == "big_send" and s.args["rank"] == 0
             for w in s.obs.sends]
    assert [w.length for w in recvs] == [w.length for w in sends] == [16384] * 4 + [100]
    assert sum(c.byte_len for s in t.steps if s.action == "reap" and s.args["rank"] == 0
               for c in s.obs.polled if c.opcode == "recv") == 4 * 16384 + 100
    assert sys_.spec.cfg.big_chunk_len(4, 5) == 100


def test_big_windows_are_capped_by_the_negotiated_depth():
    sys_ = build({"rq_depth": 3, "window": 1, "vec_bytes": 100})
    # big-gate sizes explored: 1, chain_max + 1 and one past the window (here 3 + 1 = 4)
    steps = [("setup", 0), ("setup", 1), ("call_big", 0, 4), ("call_big", 1, 4)]
    t = run(sys_, *steps)
    t = _drive(sys_, t, stop=lambda s: all(r.phase == "idle" for r in s.ranks))
    tags = [s.obs.tcp_out[0].value for s in t.steps
            if s.action == "big_barrier_write" and s.args["rank"] == 1]
    assert tags == [1, 2]                           # windows of 3 and 1


def _drive(system, trace, stop):
    """Run enabled non-fault steps in action-list order until `stop(state)`."""
    from verbspec.spec.lts import run_step

    for _ in range(5000):
        state = trace.steps[-1].state
        if stop(state):
            return trace
        for act in system.actions:
            if act.fault or act.name in ("call_gate", "call_big", "call_block"):
                continue
            args = next(iter(act.enabled(state)), None)
            if args is not None:
                run_step(system, trace, act, args)
                break
        else:
            raise AssertionError(f"stuck: {[r.phase for r in state.ranks]}")
    raise AssertionError("did not stop")


def test_a_verify_block_with_its_window_switched_off_runs_as_batch_gates():
    """DS4_TP_DISABLE_VERIFY_WINDOW: the block's begin returns at once and each layer is a
    batch gate: its header (layer, rows, seq), then big-gate windows of the layer's rows, the
    last chunk their remainder; after the last layer the block is over, no window armed."""
    sys_ = build({"verify_blocks": 1, "verify_window": "off", "block_rows": 3,
                  "vec_bytes": 10000, "big_depth": 1, "chain_max": 4})
    t = run(sys_, ("setup", 0), ("setup", 1), ("call_block", 0), ("call_block", 1))
    t = _drive(sys_, t, stop=lambda s: all(r.phase == "idle" for r in s.ranks))
    headers = [s.obs.tcp_out[0] for s in t.steps
               if s.action == "batch_header_write" and s.args["rank"] == 0]
    assert [(h.kind, h.value, h.chunks, h.depth) for h in headers] == [
        ("batch", 0, 3, 1), ("batch", 1, 3, 2)]
    recvs = [w.length for s in t.steps if s.action == "big_post_recv" and s.args["rank"] == 0
             for w in s.obs.recvs]
    # two layers of 3 x 10000 bytes: 16384 + 13616 each, one chunk a window (big_depth 1)
    assert recvs == [16384, 13616] * 2
    end = t.steps[-1].state
    assert all(r.op == 1 and not r.block_active and not r.window_active for r in end.ranks)
    assert not any(s.action in ("block_post", "block_send") for s in t.steps)
    assert sys_.spec.cfgs[0].big_chunk_len(1, 2, batch=True) == 13616


def test_each_rank_reads_its_own_verify_window_switch():
    cfg = build({"verify_blocks": 1, "rank1_verify_window": "off"}).params
    assert (cfg.of_rank(0).verify_window, cfg.of_rank(1).verify_window) == ("on", "off")
    assert cfg.of_rank(1).rank1_verify_window == "same"
    cfg = build({"verify_window": "off", "rank1_verify_window": "on"}).params
    assert (cfg.of_rank(0).verify_window, cfg.of_rank(1).verify_window) == ("off", "on")
    with pytest.raises(ParamError, match="rank1_verify_window: 'maybe' is not one of"):
        build({"rank1_verify_window": "maybe"})


def test_gate_order_broke_is_refused_before_any_state_changes(gate_system):
    t = run(gate_system, ("setup", 0), ("bad_call", 0, 1, 0, 1))
    rk = t.steps[-1].state.ranks[0]
    assert rk.error == "gate order broke: layer 1 gate 0 vs seq 1"
    assert rk.last_gate_seq == 0 and t.steps[-1].state.fabric.qps[0].rq == ()


def test_out_of_order_seq_is_refused(gate_system):
    t = run(gate_system, ("setup", 0), ("bad_call", 0, 0, 1, 2))
    assert t.steps[-1].state.ranks[0].error == (
        "verbspec safety rule: gate seq 2 out of order after gate 0")


def test_no_seq_check_lets_a_skipped_seq_misalign_the_pairing():
    with pytest.raises(InvariantViolation) as e:
        run(build({}, ["no-seq-check"]), ("setup", 0), ("setup", 1),
            ("bad_call", 0, 0, 1, 2), ("call_gate", 1, 0, 0, 1), ("arm_post", 0), ("arm_post", 1),
            ("barrier_write", 0), ("barrier_write", 1), ("barrier_read", 0),
            ("barrier_read", 1), ("gate_send", 0), ("transmit", 0), ("deliver", 0))
    assert e.value.invariant == "chunk_alignment"
    assert "gate 2 chunk 0 landed in rank 1's receive for gate 1 chunk 0" in e.value.message


def test_uc_drop_is_silent_for_the_sender():
    with pytest.raises(InvariantViolation) as e:
        run(build({}, ["no-barrier"]), ("setup", 0), ("setup", 1), ("call_gate", 0, 0, 0, 1),
            ("arm_post", 0), ("gate_send", 0), ("transmit", 0), ("deliver", 0))
    assert e.value.invariant == "no_silent_drop"
    sender = e.value.trace.steps[-1].state.fabric.qps[0]
    assert [(c.opcode, c.status) for c in sender.cq] == [("send", "success")]


def test_rc_answers_rnr_instead_of_dropping():
    # RC without the barrier: the receiver has nothing posted, the sender's WR fails with RNR
    with pytest.raises(InvariantViolation) as e:
        run(build({"qp_type": "rc"}, ["no-barrier"]), ("setup", 0), ("setup", 1),
            ("call_gate", 0, 0, 0, 1), ("arm_post", 0), ("gate_send", 0), ("transmit", 0),
            ("deliver", 0), ("reap", 0))
    assert e.value.invariant == "no_deadlock"
    # ibv_wc_status 13: IBV_WC_RNR_RETRY_EXC_ERR, on the send of gate 1
    assert "rdma completion error: wc status 13 (wr_id 1)" in e.value.message


def test_error_completion_fails_the_wait():
    sys_ = build({"faults": 1})
    t = run(sys_, *ARMED, ("gate_send", 0), ("gate_send", 1), ("transmit", 0),
            ("error_completion", 1), ("reap", 1))
    # ibv_wc_status 12: IBV_WC_RETRY_EXC_ERR, on the injected completion (wr_id 0)
    assert t.steps[-1].state.ranks[1].error == "rdma completion error: wc status 12 (wr_id 0)"


def test_timeouts_and_dead_peers_end_waits_with_documented_errors(gate_system):
    t = run(gate_system, *ARMED, ("gate_send", 0), ("timeout", 0))
    assert t.steps[-1].state.ranks[0].error == "timeout waiting gate seq 1 (recv_done 0)"
    t = run(gate_system, *ARMED, ("gate_send", 0), ("crash", 1), ("peer_gone", 0))
    assert t.steps[-1].state.ranks[0].error == "peer disconnected during RDMA gate"
    t = run(gate_system, ("setup", 0), ("setup", 1), ("call_gate", 0, 0, 0, 1), ("arm_post", 0),
            ("barrier_write", 0), ("crash", 1), ("peer_gone", 0))
    assert t.steps[-1].state.ranks[0].error == (
        "verbspec silent failure: peer closed the data socket during the rdma window barrier")


def test_warm_up_leftovers_are_ignored_by_the_base_protocol(gate_system):
    t = run(gate_system, *ARMED, ("stray_completion", 0, "recv"), ("stray_completion", 0, "send"),
            *gate_exchange(1))
    rk = t.steps[-1].state.ranks[0]
    assert rk.recv_done == 1 and rk.send_outstanding == 0


def test_stray_warm_receive_variant_lifts_the_watermark_to_2_62():
    with pytest.raises(InvariantViolation) as e:
        run(build({}, ["stray-warm-receive"]), *ARMED, ("stray_completion", 0, "recv"),
            ("gate_send", 0), ("reap", 0))
    assert e.value.invariant == "watermark_sound"
    assert str(TAG_WARM) in e.value.message


def test_without_warm_recv_leftover_only_a_warm_up_send_completion_outlives_warm_up():
    # ds4's warm-up succeeds only after reaping its one warm receive; a send completion
    # can be left behind (the attempt stops polling at the first one it sees)
    for variants in ((), ("stray-warm-receive", "untagged-in-big-window")):
        sys_ = build({"warm_recv_leftover": 0}, variants)
        state = replay(sys_, moves(*ARMED), variants).steps[-1].state
        offered = {args for a in sys_.actions if a.name == "stray_completion"
                   for args in a.enabled(state)}
        assert offered == {(0, "send"), (1, "send")}, variants
        with pytest.raises(ValueError, match="stray_completion"):
            run(sys_, *ARMED, ("stray_completion", 0, "recv"))


def test_warm_up_send_leftovers_are_counted_per_rank_over_uc_and_absent_over_rc():
    def offered(values, steps):
        sys_ = build(values)
        state = replay(sys_, moves(*steps)).steps[-1].state
        return {args for a in sys_.actions if a.name == "stray_completion"
                for args in a.enabled(state)}

    three = {"warm_send_leftovers": 3, "warm_recv_leftover": 0}
    strays = [("stray_completion", 0, "send")] * 3
    assert offered(three, ARMED) == {(0, "send"), (1, "send")}
    assert offered(three, (*ARMED, *strays[:2])) == {(0, "send"), (1, "send")}
    assert offered(three, (*ARMED, *strays)) == {(1, "send")}
    # RC's warm-up reaps its one send completion before it succeeds
    assert offered({**three, "qp_type": "rc"}, ARMED) == set()
    assert offered({"qp_type": "rc"}, ARMED) == {(0, "recv"), (1, "recv")}


def test_one_gate_per_token_lets_a_gate_land_on_unconsumed_data():
    # gates_per_token=1: every gate uses slot 0; the peer's next gate can land before the
    # application consumed this one
    sys_ = build({"gates_per_token": 1, "n_slots": 1})
    with pytest.raises(InvariantViolation) as e:
        run(sys_, *ARMED, *gate_exchange(1)[:-1],          # rank 1 has not consumed gate 1
            ("call_gate", 0, 0, 0, 2), ("gate_send", 0), ("transmit", 0), ("deliver", 0))
    assert e.value.invariant == "slot_exclusive"


def test_every_step_observes_both_ranks_abstract_state_after_it():
    """The conformance contract: each observation ends with the views an implementation must
    agree on, taken from the state the step produced. A seeded fault-free walk of the base
    protocol at the defaults, through decode gates, the drain and a big gate."""
    import random

    from verbspec.spec.gate.state import view
    from verbspec.spec.lts import enabled_moves, run_step, start_trace

    system, rng = build({}), random.Random(7)
    trace = start_trace(system)
    while len(trace.steps) < 1500:
        moves = list(enabled_moves(system, trace.steps[-1].state, faults=False))
        if not moves:
            break
        run_step(system, trace, *moves[rng.randrange(len(moves))])
    for step in trace.steps[1:]:
        assert step.obs.views == tuple(view(rk) for rk in step.state.ranks)
        assert step.obs.rank in (0, 1)
    kinds = {s.action for s in trace.steps if s.obs and (s.obs.recvs or s.obs.sends)}
    assert {"big_post_recv", "big_send", "transmit"} <= kinds, kinds


@pytest.mark.parametrize("kind", ["receive", "send"])
def test_a_big_gate_chain_above_chain_max_breaks_queue_bounds(kind):
    """The chain bound holds for the big-gate posts too: a spec whose big-gate windows post
    past chain_max breaks queue_bounds at the first such post. Planted: receive chains sized
    by ranks whose own chain_max is not the configuration's; send sub-batches not capped."""
    from dataclasses import replace

    sys_ = build({"chain_max": 4})
    if kind == "receive":
        sys_.spec.cfgs = tuple(replace(c, chain_max=64) for c in sys_.spec.cfgs)
    else:
        sys_.spec._send_room = lambda rk: rk.big_win - rk.big_sent
    t = run(sys_, ("setup", 0), ("setup", 1), ("call_big", 0, 5), ("call_big", 1, 5),
            ("big_header_write", 0), ("big_header_write", 1), ("big_header_read", 0),
            ("big_header_read", 1))
    with pytest.raises(InvariantViolation) as broke:
        _drive(sys_, t, stop=lambda s: False)
    assert broke.value.invariant == "queue_bounds"
    assert (f"posted a chain of 5 big-gate {kind} work requests, above chain_max 4"
            in broke.value.message)


def test_a_slot_mapping_off_by_one_breaks_chunk_alignment_at_the_first_post(monkeypatch):
    """The slot check restates ds4's tp_gate_slot apart from GateConfig.slot, which places the
    work requests: a spec whose mapping is off by one is caught by its own invariant."""
    from verbspec.spec.gate.params import GateConfig
    from verbspec.spec.gate.system import ds4_slot

    sys_ = build({})
    assert [ds4_slot(sys_.params, q) for q in (1, 2, 86, 87)] == [0, 1, 85, 0]
    real = GateConfig.slot
    monkeypatch.setattr(GateConfig, "slot", lambda self, seq: (real(self, seq) + 1) % 86)
    # the application's call names the layer and gate of seq 1's (planted) slot
    t = run(sys_, ("setup", 0), ("setup", 1))
    [call] = [a for a in sys_.actions if a.name == "call_gate"]
    (args,) = [a for a in call.enabled(t.steps[-1].state) if a[0] == 0]
    with pytest.raises(InvariantViolation) as broke:
        run(sys_, ("setup", 0), ("setup", 1), ("call_gate", *args), ("arm_post", 0))
    assert broke.value.invariant == "chunk_alignment"
    assert ("rank 0 posted the receive of gate 1 chunk 0 at slot 1 offset 0; ds4 places it at "
            "slot 0 offset 0") in broke.value.message
    assert broke.value.trace.steps[-1].action == "arm_post"
