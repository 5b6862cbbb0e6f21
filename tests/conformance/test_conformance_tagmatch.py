"""The tag-matching conformance harness: the reference engine runs in lockstep with the spec
without a mismatch (random runs and every edge of small configurations), each variant's
engine is caught at a named step, and the engine refuses bad input by name. (The engine's
import rule is tested with the gate engine's, in test_conformance.py.)"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable

import pytest
from configs import TAGMATCH_CONFIGS

from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance.lockstep import CONFORMANCE
from verbspec.refimpl.conformance.tagmatch import (
    CANCEL,
    DELIVER,
    HW_OP,
    PATH_CONFIGS,
    POST,
    SEND,
    SW_COMPLETE,
    SWEEP_CONFIGS,
    TagmatchHarness,
    conform,
    conform_every_edge,
    resolve,
    spec_view,
)
from verbspec.refimpl.engines.tagmatch_engine import (
    EAGER,
    RNDV,
    Emitted,
    EngineError,
    Packet,
    Posted,
    Read,
    TagMatchEngine,
)
from verbspec.refimpl.engines.tagmatch_variants import VARIANT_ENGINES
from verbspec.spec.actions import action_names
from verbspec.spec.tagmatch.lists import ANY
from verbspec.spec.tagmatch.state import FIN_SENT, OK, TRUNCATED, Params
from verbspec.spec.tagmatch.system import TagMatchSystem, build
from verbspec.spec.tagmatch.variants import VARIANTS

CONFIGS = TAGMATCH_CONFIGS


@pytest.mark.parametrize("values", CONFIGS, ids=lambda v: ",".join(f"{k}={x}" for k, x in
                                                                     v.items()) or "defaults")
def test_random_runs_of_the_reference_engine_conform(values):
    h = TagmatchHarness(build(values))
    done = [h.run(random.Random(seed), 400) for seed in range(150)]
    bad = [r.mismatch for r in done if r.mismatch]
    assert not bad, str(bad[0])
    assert sum(r.steps for r in done) > 2_000


def test_random_runs_reach_every_action():
    rep = conform(build({}), resolve("refimpl"), "refimpl", sequences=300, steps=400)
    assert rep.mismatch is None, str(rep.mismatch)
    assert set(rep.actions) == set(action_names(TagMatchSystem))
    assert rep.reached == {"messages_sent": 2, "receives_posted": 2}


def test_random_runs_leave_out_cancel_or_probe_by_swarm():
    seen: list[frozenset[str]] = []

    def each(run) -> bool:
        seen.append(frozenset(run.actions) & {"cancel", "probe"})
        return True

    conform(build({}), resolve("refimpl"), "refimpl", sequences=200, steps=400, each=each)
    # about half the runs leave out both; of the others, some cancel and never probe
    assert 60 <= sum(not k for k in seen) <= 140
    both = frozenset({"cancel", "probe"})
    assert {frozenset({"cancel"}), frozenset({"probe"}), both} <= set(seen)


def test_every_edge_of_the_offload_configuration_conforms():
    sweep = TagmatchHarness(build(SWEEP_CONFIGS[0])).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert (sweep.states, sweep.edges) == (4_130, 9_718)
    assert set(sweep.actions) == set(action_names(TagMatchSystem)) - {
        "probe", "rndv_read", "rndv_read_done", "send_fin", "fin_arrive"}


@pytest.mark.slow
def test_every_edge_of_every_sweep_configuration_conforms():
    rep = conform_every_edge(resolve("refimpl"), "refimpl")
    assert rep.mismatch is None, str(rep.mismatch)
    assert rep.sweep["configs"] == len(SWEEP_CONFIGS)
    assert set(rep.actions) == set(action_names(TagMatchSystem))


@pytest.mark.slow
@pytest.mark.long
def test_every_edge_of_the_default_parameters_conforms():
    # one sender, two messages, two receives, capacity 1, eager and rendezvous, probe
    sweep = TagmatchHarness(build({})).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert (sweep.states, sweep.edges) == (135_547, 714_796)
    assert set(sweep.actions) == set(action_names(TagMatchSystem))


# each variant's engine against the base spec, breadth first: the action and step (on a
# shortest path) it is first caught at, the configuration (1-based) and the field that differs
CAUGHT = {"offload-no-sync": ("sw_complete", 3, 1, "own steps ready"),
          "wildcard-last": ("sw_complete", 5, 1, "matches"),
          "unexpected-newest-first": ("post_recv", 7, 1, "matches"),
          "no-shadow-claim": ("sw_complete", 4, 1, "matches"),
          "offload-behind-software": ("post_recv", 2, 1, "view where"),
          "fin-before-read": ("rndv_read", 4, 2, "own steps ready"),
          "eager-complete-on-post": ("send", 1, 1, "released"),
          "silent-truncation": ("rndv_read_done", 5, 2, "completions")}


def test_every_variant_has_an_engine():
    assert set(VARIANT_ENGINES) == {v.name for v in VARIANTS} == set(CAUGHT)


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_a_variant_as_an_implementation_is_caught(name):
    rep = conform_every_edge(resolve(f"variant:{name}"), name, path_configs=())
    assert rep.mismatch is not None, f"variant:{name} passed every edge"
    action, step, config, what = CAUGHT[name]
    assert (rep.mismatch.action, rep.mismatch.step, rep.mismatch.what) == (
        action, step, what), str(rep.mismatch)
    assert rep.sweep["configs"] == config
    assert rep.trace is not None and len(rep.trace.steps) == step + 1
    assert rep.trace.violation == CONFORMANCE


def test_fin_before_read_sends_its_fin_while_the_read_runs():
    # the READ starts alone; the FIN is a step of its own, taken before the READ completes
    e = resolve("variant:fin-before-read")(CFG)
    e.post_recv(0, 0, 0, 2)
    e.delivered(e.send(0, 0, 0, 2).sends[0])
    assert e.start_read(0) == Emitted(reads=(Read(0, 0, 2),))
    assert ("send_fin", (0,)) in e.ready()
    assert e.send_fin(0) == Emitted(fins=(0,))
    assert e.fin(0).released == (0,)            # the sender reuses its buffer mid-READ
    assert e.read_done(0).completions == ((0, OK),)
    assert e.view().stage[0] == FIN_SENT and not e.ready()


# each variant's engine held to the spec under its own variant: random runs of a job larger
# than the sweep's, and (slow tier) every edge of the configuration that catches it against
# the base spec
@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_a_variant_engine_behaves_as_its_variant(name):
    values = {"senders": 2, "messages": 2, "receives": 3, "tags": 2, "capacity": 2,
              "max_bytes": 2, "eager_limit": 1}
    h = TagmatchHarness(build(values, (name,)), resolve(f"variant:{name}"))
    bad = [r.mismatch for r in (h.run(random.Random(seed), 400) for seed in range(100))
           if r.mismatch]
    assert not bad, str(bad[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_every_edge_of_a_variant_engine_agrees_with_its_variant(name):
    config = SWEEP_CONFIGS[CAUGHT[name][2] - 1]
    sweep = TagmatchHarness(build(config, (name,)), resolve(f"variant:{name}")).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)


def count_paths(system, s, depth):
    """The action sequences of 1 to ``depth`` steps from ``s``, counted on the spec alone."""
    n = 0
    for a in system.actions:
        for args in a.enabled(s):
            n += 1
            if depth > 1:
                n += count_paths(system, a.apply(s, *args)[0], depth - 1)
    return n


def test_every_path_of_the_asked_size_runs_in_lockstep():
    system = build(PATH_CONFIGS[0][0])
    walk = TagmatchHarness(system).every_path(2)
    assert walk.mismatch is None, str(walk.mismatch)
    assert walk.paths == count_paths(system, system.initial(), 2) > 500
    assert {"send", "post_recv", "deliver", "hw_op", "cancel"} <= set(walk.actions)


def test_the_deep_walk_takes_a_whole_offloaded_exchange_in_every_order():
    values, depth = PATH_CONFIGS[1]
    system = build(values)
    walk = TagmatchHarness(system).every_path(depth)
    assert walk.mismatch is None, str(walk.mismatch)
    assert walk.paths == count_paths(system, system.initial(), depth) > 20_000
    # the NIC's list, cancel, and a rendezvous from its READ to the FIN at the sender
    assert set(walk.actions) == set(action_names(TagMatchSystem)) - {"probe"}


@pytest.mark.slow
def test_the_deep_software_walk_takes_two_rendezvous_in_every_order():
    values, depth = PATH_CONFIGS[2]
    system = build(values)
    walk = TagmatchHarness(system).every_path(depth)
    assert walk.mismatch is None, str(walk.mismatch)
    assert walk.paths > 500_000
    assert {"rndv_read", "rndv_read_done", "send_fin", "fin_arrive", "cancel"} <= set(
        walk.actions)


def test_every_path_catches_a_variant_with_its_path():
    walk = TagmatchHarness(build(PATH_CONFIGS[0][0]),
                           resolve("variant:eager-complete-on-post")).every_path(3)
    assert walk.mismatch is not None and walk.mismatch.what == "released"
    assert walk.mismatch.step == 1 and len(walk.trace.steps) == 2
    assert walk.trace.violation == CONFORMANCE


def test_a_mismatch_replays_against_both_engines():
    rep = conform_every_edge(resolve("variant:no-shadow-claim"), "no-shadow-claim")
    moves = [(s.action, s.args) for s in rep.trace.steps[1:]]
    system = build(SWEEP_CONFIGS[0])
    assert TagmatchHarness(system).follow(moves).mismatch is None
    again = TagmatchHarness(system, resolve("variant:no-shadow-claim")).follow(moves)
    assert str(again.mismatch) == str(rep.mismatch)
    with pytest.raises(ValueError, match="step 1: action fin_arrive"):
        TagmatchHarness(system).follow([("fin_arrive", {"sender": 0})])


# ------------------------------------------------------------------------------ the CLI
def test_conform_command_runs_the_tagmatch_engine(capsys, tmp_path):
    assert main(["conform", "--protocol", "tagmatch", "--examples", "30", "--quiet", "--json",
                 "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["impl"], out["protocol"], out["sequences"], out["mismatches"]) == (
        "refimpl", "tagmatch", 30, 0)
    assert out["actions_total"] == 12 and out["steps"] == sum(out["actions"].values())


def test_conform_all_runs_both_and_fails_if_either_differs(capsys, tmp_path):
    assert main(["conform", "--protocol", "all", "--examples", "5", "--quiet", "--json",
                 "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["protocol"] for r in out["results"]] == ["gate", "tagmatch"]
    assert out["mismatches"] == 0
    # a variant name belongs to one protocol: the other cannot resolve it
    assert main(["conform", "--protocol", "all", "--impl", "variant:wildcard-last",
                 "--quiet", "--trace-dir", str(tmp_path)]) == 3
    assert "gate: no engine behaves as variant 'wildcard-last'" in capsys.readouterr().err


BOTH = '''
from verbspec.refimpl.engines.gate_engine import GateEngine
from verbspec.refimpl.engines.tagmatch_engine import TagMatchEngine


class Eager(TagMatchEngine):
    def _on_post(self, p):
        self.released[p.mid] = p.kind == "eager"
        return (p.mid,) if p.kind == "eager" else ()


def make(*args):
    # gate: (config, rank, granted depth); tagmatch: (parameters)
    return GateEngine(args[0], args[2]) if len(args) == 3 else Eager(args[0])
'''


def test_conform_all_exits_1_when_one_protocol_differs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "both_impl.py").write_text(BOTH, encoding="utf-8")
    assert main(["conform", "--protocol", "all", "--impl", "both_impl:make", "--examples",
                 "5", "--quiet", "--json", "--trace-dir", "traces"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [r["mismatches"] for r in out["results"]] == [0, 1] and out["mismatches"] == 1
    assert "send(sender=0" in out["results"][1]["mismatch"]


def test_conform_command_catches_a_variant_and_replays_it(capsys, tmp_path):
    assert main(["conform", "--protocol", "tagmatch", "--impl", "variant:silent-truncation",
                 "--exhaustive", "--quiet", "--json", "--trace-dir", str(tmp_path)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["mismatches"] == 1 and "rndv_read_done(mid=0): completions" in out["mismatch"]
    assert main(["replay", "--impl", "variant:silent-truncation", out["trace"]]) == 1
    assert capsys.readouterr().out.startswith("variant:silent-truncation differs from the spec")
    assert main(["replay", "--impl", "refimpl", out["trace"]]) == 0


# ------------------------------------------------------------------- the engine's refusals
CFG = build({"senders": 2, "messages": 1, "receives": 2, "capacity": 0, "max_bytes": 2,
             "eager_limit": 1}).params
OFFLOAD = build({"capacity": 1}).params


@pytest.mark.parametrize("call,message", [
    (lambda e: e.send(2, 0, 0, 1), "sender 2 is outside 0..1"),
    (lambda e: e.send(0, 1, 0, 1), "communicator 1 is outside 0..0"),
    (lambda e: e.send(0, 0, ANY, 1), "tag -1 is outside 0..0"),
    (lambda e: e.send(0, 0, 0, 3), "length 3 is outside 1..2"),
    (lambda e: e.send(0, 0, 0, 0), "length 0 is outside 1..2"),
    (lambda e: (e.send(0, 0, 0, 1), e.send(0, 0, 0, 1)), "sender 0 has sent all its 1"),
    (lambda e: e.post_recv(0, 5, 0, 1), "source 5 is outside 0..1 or ANY"),
    (lambda e: e.post_recv(0, 0, 7, 1), "tag 7 is outside 0..0 or ANY"),
    (lambda e: e.post_recv(0, 0, 0, 9), "buffer length 9 is outside 1..2"),
    (lambda e: e.probe(0, -2, 0), "source -2 is outside"),
    (lambda e: e.probe(1, 0, 0), "communicator 1 is outside 0..0"),
    (lambda e: e.probe(0, 0, 7), "tag 7 is outside 0..0 or ANY"),
    (lambda e: e.cancel(0), "receive 0 was never posted"),
    (lambda e: e.delivered(Packet(0, 0, 0, 0, 1, EAGER)), "message 0 was never sent"),
    (lambda e: (e.send(0, 0, 0, 1), e.delivered(Packet(0, 0, 0, 0, 2, EAGER))),
     "packet Packet(mid=0, comm=0, src=0, tag=0, nbytes=2, kind='eager') differs from what "
     "sender 0 sent"),
    (lambda e: (e.send(0, 0, 0, 1), e.delivered(Packet(0, 0, 0, 0, 1, EAGER)),
                e.delivered(Packet(0, 0, 0, 0, 1, EAGER))), "message 0 already arrived"),
    (lambda e: (e.send(0, 0, 0, 1), e.start_read(0)), "message 0 has no READ to start"),
    (lambda e: (e.send(0, 0, 0, 2), e.read_done(0)), "message 0 has no READ in flight"),
    (lambda e: (e.send(0, 0, 0, 2), e.send_fin(0)),
     "message 0's READ has not completed: no FIN yet"),
    (lambda e: (e.send(0, 0, 0, 2), e.fin(0)), "no FIN for message 0 is on its way"),
    (lambda e: e.hw_op(), "no tag-matching offload"),
    (lambda e: e.sw_complete(), "no tag-matching offload"),
])
def test_the_engine_refuses_bad_input_by_name(call, message):
    with pytest.raises(EngineError) as refused:
        call(TagMatchEngine(CFG))
    assert str(refused.value).startswith(message)


# each refusal in full: the name of what is out of range, the range, and "or ANY" only where
# a wildcard is allowed; a bool or a float is no number here, and a message id past the last
# is refused like one never sent
@pytest.mark.parametrize("call,message", [
    (lambda e: e.post_recv(1, 0, 0, 1), "communicator 1 is outside 0..0"),
    (lambda e: e.send(0, 0, 1, 1), "tag 1 is outside 0..0"),
    (lambda e: e.post_recv(0, 2, 0, 1), "source 2 is outside 0..1 or ANY (-1)"),
    (lambda e: e.send(True, 0, 0, 1), "sender True is outside 0..1"),
    (lambda e: e.probe(0, 0.0, 0), "source 0.0 is outside 0..1 or ANY (-1)"),
    (lambda e: e.start_read(2), "message 2 was never sent"),
    (lambda e: e.read_done(-1), "message -1 was never sent"),
])
def test_a_refusal_says_exactly_what_is_outside_its_range(
        call: Callable[[TagMatchEngine], object], message: str) -> None:
    with pytest.raises(EngineError) as refused:
        call(TagMatchEngine(CFG))
    assert str(refused.value) == message


@pytest.mark.parametrize("call,message", [
    (lambda e: e.hw_op(), "the NIC has no op to execute"),
    (lambda e: e.sw_complete(), "the NIC has no completion to handle"),
    (lambda e: e.sw_sync(), "the NIC already has software's unexpected count"),
    (lambda e: (e.post_recv(0, 0, 0, 1), e.cancel(0), e.cancel(0)),
     "receive 0 is already being cancelled"),
    (lambda e: (e.send(0, 0, 0, 1), e.delivered(Packet(0, 0, 0, 0, 1, EAGER)),
                e.probe(0, 0, 0)), "probe with NIC completions unhandled"),
])
def test_the_offload_refuses_a_step_it_has_nothing_for(call, message):
    with pytest.raises(EngineError) as refused:
        call(TagMatchEngine(OFFLOAD))
    assert str(refused.value).startswith(message)


def test_a_rendezvous_reads_then_fins_and_a_long_message_truncates():
    e = TagMatchEngine(CFG)
    assert e.post_recv(0, ANY, ANY, 1) == Emitted()
    sent = e.send(1, 0, 0, 2)
    assert sent.sends == (Packet(1, 0, 1, 0, 2, RNDV),) and sent.released == ()
    assert e.delivered(sent.sends[0]).matches == ((0, 1),)
    assert e.start_read(1).reads == (Read(1, 0, 1),)
    assert e.read_done(1).completions == ((0, TRUNCATED),)
    assert e.send_fin(1).fins == (1,)
    assert e.fin(1).released == (1,)
    with pytest.raises(EngineError, match="no FIN for message 1 is on its way"):
        e.fin(1)
    eager = e.send(0, 0, 0, 1).sends[0]
    assert e.delivered(eager).released == (0,)
    assert e.post_recv(0, 0, 0, 2).completions == ((1, OK),)


def test_matching_work_per_operation_is_constant_under_wildcards(monkeypatch):
    # queue heads examined plus dead entries dropped, over a run with thousands of
    # never-matching wildcard receives posted first and cancels in between: a list walk
    # would cost thousands per operation
    from verbspec.refimpl.engines import tagmatch_engine as te

    work = {"n": 0}
    head, tail = te._head, te._tail

    def counted(f):
        def run(q):
            before = len(q) if q else 0
            out = f(q)
            work["n"] += 1 + before - (len(q) if q else 0)
            return out
        return run

    monkeypatch.setattr(te, "_head", counted(head))
    monkeypatch.setattr(te, "_tail", counted(tail))
    n = 3000
    cfg = Params(senders=2, messages=n, receives=3 * n, tags=2, comms=2, max_bytes=1,
                 eager_limit=1, capacity=0, cancel=1, probe=1)
    e = TagMatchEngine(cfg)
    ops = 0
    for _ in range(n):                       # wildcards on communicator 1: never matched
        e.post_recv(1, ANY, ANY, 1)
        ops += 1
    for k in range(n):
        e.post_recv(0, k % 2, ANY if k % 3 else 1, 1)
        if k % 5 == 0:
            e.cancel(n + k)
        e.delivered(e.send(k % 2, 0, 1, 1).sends[0])
        e.delivered(e.send(k % 2, 0, 0, 1).sends[0])
        e.probe(0, ANY, ANY)
        ops += 5
    assert work["n"] <= 6 * ops, (work["n"], ops)


def test_removing_a_receive_not_posted_says_so():
    # TaggedEndpoint.cancel reads the answer: False is a receive already matched
    posted = Posted()
    posted.add(0, 0, 0, 0)
    assert posted.remove(1) is False and posted.ids() == (0,)
    assert posted.remove(0) is True and posted.ids() == ()


# A NIC that matches while software's count is behind (offload-no-sync) revokes a shadow
# claim: receive 0 goes to the NIC, messages 0 and 1 arrive before the add is executed and are
# reported unexpected; software claims receive 0 for message 0, and message 1 stays
# unexpected; the add runs, message 2 arrives and the NIC matches it to receive 0; software
# revokes the claim and puts message 0 back, ahead of message 1 (which arrived after it)
REVOKED = {"senders": 1, "messages": 3, "receives": 1, "capacity": 1, "probe": 0,
           "max_bytes": 1}
S0 = {"sender": 0, "comm": 0, "tag": 0, "nbytes": 1}
REVOKE_MOVES = [(POST, {"comm": 0, "src": 0, "tag": 0, "nbytes": 1}),
                (SEND, S0), (DELIVER, {"sender": 0}), (SEND, S0), (DELIVER, {"sender": 0}),
                (SW_COMPLETE, {}), (SW_COMPLETE, {}), (HW_OP, {}),
                (SEND, S0), (DELIVER, {"sender": 0}), (SW_COMPLETE, {})]


def test_a_revoked_claim_puts_its_message_back_in_arrival_order():
    name = "offload-no-sync"
    system = build(REVOKED, (name,))
    run = TagmatchHarness(system, resolve(f"variant:{name}")).follow(REVOKE_MOVES)
    assert run.mismatch is None, str(run.mismatch)
    # the engine's view and emissions equalled the spec's at each step; the last step is the
    # revoke, and the message put back is listed before the later one
    last = run.trace.steps[-1]
    assert (last.obs.matches, last.obs.revoked) == (((0, 2),), ((0, 0),))
    assert spec_view(system, last.state).unexpected == (0, 1)


# A revoked claim's message goes back among the unexpected messages by its arrival, wherever
# that falls in each of its four queues: ahead of two later messages (a receive naming it
# takes it, not the first of them); between an earlier message of another tag and a later one
# (a receive with ANY_TAG takes the earlier, then it); and a claim on a receive being
# cancelled (the NIC matches the receive before it runs the remove, which then fails). The
# message the NIC matched is a rendezvous one: its receive waits for the READ, uncompleted.
def _send_moves(sender: int, tag: int, nbytes: int = 1) -> list[tuple[str, dict]]:
    return [(SEND, {"sender": sender, "comm": 0, "tag": tag, "nbytes": nbytes}),
            (DELIVER, {"sender": sender})]


def _post_move(src: int, tag: int) -> tuple[str, dict]:
    return (POST, {"comm": 0, "src": src, "tag": tag, "nbytes": 2})


_COMPLETE = (SW_COMPLETE, {})
# case: (parameters, moves, the message put back, the matches of the last receives)
PUT_BACK = {
    "ahead of two later": (
        {"senders": 1, "messages": 4, "receives": 2},
        [_post_move(0, 0), *_send_moves(0, 0), *_send_moves(0, 0), *_send_moves(0, 0),
         _COMPLETE, _COMPLETE, _COMPLETE, (HW_OP, {}), *_send_moves(0, 0, 2), _COMPLETE,
         _post_move(0, 0)],
        0, [(1, 0)]),
    "between an earlier and a later": (
        {"senders": 2, "messages": 4, "receives": 3, "tags": 2},
        [_post_move(0, 0), *_send_moves(0, 1), *_send_moves(0, 0), *_send_moves(1, 0),
         *_send_moves(0, 0), _COMPLETE, _COMPLETE, _COMPLETE, _COMPLETE, (HW_OP, {}),
         *_send_moves(0, 0, 2), _COMPLETE, _post_move(0, ANY), _post_move(0, ANY)],
        1, [(1, 0), (2, 1)]),
    "claimed while being cancelled": (
        {"senders": 1, "messages": 3, "receives": 2},
        [_post_move(0, 0), (CANCEL, {"rid": 0}), *_send_moves(0, 0), *_send_moves(0, 0),
         _COMPLETE, _COMPLETE, (HW_OP, {}), *_send_moves(0, 0, 2), _COMPLETE, (HW_OP, {}),
         _COMPLETE, _post_move(0, 0)],
        0, [(1, 0)]),
}


@pytest.mark.parametrize("case", sorted(PUT_BACK))
def test_a_revoked_claim_puts_its_message_back_between_earlier_and_later_ones(
        case: str) -> None:
    values, moves, put_back, last_matches = PUT_BACK[case]
    name = "offload-no-sync"
    system = build({"capacity": 1, "probe": 0, "max_bytes": 2, "eager_limit": 1, **values},
                   (name,))
    run = TagmatchHarness(system, resolve(f"variant:{name}")).follow(moves)
    assert run.mismatch is None, str(run.mismatch)
    revoke = next(s for s in run.trace.steps[1:] if s.obs is not None and s.obs.revoked)
    assert revoke.obs.revoked == ((0, put_back),)
    assert spec_view(system, revoke.state).completion[0] == 0
    got = [m for s in run.trace.steps[-len(last_matches):] for m in s.obs.matches]
    assert got == last_matches


# every_edge copies an engine (copy.deepcopy) for each edge out of a state: a copy must go on
# exactly as the original would, and leave the original where it was
class _CopiedAtEachCall:
    """An engine that takes each call on a copy of itself, the copy then standing in for it;
    the original, left behind, must not have moved."""

    def __init__(self, engine: TagMatchEngine) -> None:
        self.engine = engine

    def __getattr__(self, name: str) -> object:
        found = getattr(self.engine, name)
        if name in ("view", "ready") or not callable(found):
            return found

        def on_a_copy(*args: object) -> object:
            original, before = self.engine, self.engine.view()
            self.engine = copy.deepcopy(original)
            out = getattr(self.engine, name)(*args)
            if original.view() != before:
                raise AssertionError(f"{name} on a copy moved the original")
            return out

        return on_a_copy


@pytest.mark.parametrize("values", CONFIGS, ids=lambda v: ",".join(f"{k}={x}" for k, x in
                                                                  v.items()) or "defaults")
def test_an_engine_copied_at_every_step_goes_on_as_the_original(values: dict) -> None:
    h = TagmatchHarness(build(values), lambda cfg: _CopiedAtEachCall(TagMatchEngine(cfg)))
    bad = [r.mismatch for r in (h.run(random.Random(seed), 400) for seed in range(10))
           if r.mismatch]
    assert not bad, str(bad[0])


@pytest.mark.parametrize("case", sorted(PUT_BACK))
def test_a_claim_copied_before_its_revoke_puts_its_message_back_the_same(case: str) -> None:
    values, moves, _, _ = PUT_BACK[case]
    name = "offload-no-sync"
    system = build({"capacity": 1, "probe": 0, "max_bytes": 2, "eager_limit": 1, **values},
                   (name,))
    variant = resolve(f"variant:{name}")
    run = TagmatchHarness(system, lambda cfg: _CopiedAtEachCall(variant(cfg))).follow(moves)
    assert run.mismatch is None, str(run.mismatch)


def test_what_an_engine_shares_with_whatever_is_copied_along_stays_shared() -> None:
    # copy.deepcopy's memo: the configuration (never changed) is not copied, and the engine's
    # structures and a receive its NIC lists, copied together with it, are copied once
    e = TagMatchEngine(OFFLOAD)
    e.post_recv(0, 0, 0, 1)
    e.hw_op()
    entry = e.nic.listed[0][0]
    mine, cfg, posted, unexpected, nic, listed = copy.deepcopy(
        (e, e.cfg, e.posted, e.unexpected, e.nic, entry))
    assert mine.cfg is cfg is e.cfg and mine.view() == e.view()
    assert all(m is c for m, c in ((mine.posted, posted), (mine.unexpected, unexpected),
                                   (mine.nic, nic), (mine.nic.listed[0][0], listed)))
    assert listed is not entry and nic is not e.nic
