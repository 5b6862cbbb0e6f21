"""Conformance in the second direction: after each lockstep step, a reaction an implementation
has by its own state (a completion it would report, a failure it would raise, a step of its own
it would take) that the spec does not offer there is a mismatch. A spec that stops offering a
behaviour the implementations have is caught so, where driving them with the spec's own steps
alone passes it. The spec's bugs are planted in the built system's actions, never in its
files."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from conftest import native_module

from verbspec.refimpl.conformance import gate as gh
from verbspec.refimpl.conformance import tagmatch as th
from verbspec.refimpl.conformance.lockstep import REACTION
from verbspec.spec.gate.state import REAP_PHASES
from verbspec.spec.gate.system import GateSystem
from verbspec.spec.gate.system import build as build_gate
from verbspec.spec.tagmatch.system import build as build_tagmatch

DECODE = {"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0,
          "faults": 1}
# rank 0 sends gate 1 and waits for it; rank 1 crashes
TO_THE_WAIT = [("setup", {"rank": 0}), ("setup", {"rank": 1}),
               ("call_gate", {"rank": 0, "layer": 0, "gate": 0, "seq": 1}),
               ("call_gate", {"rank": 1, "layer": 0, "gate": 0, "seq": 1}),
               ("arm_post", {"rank": 0}), ("arm_post", {"rank": 1}),
               ("barrier_write", {"rank": 0}), ("barrier_write", {"rank": 1}),
               ("barrier_read", {"rank": 0}), ("gate_send", {"rank": 0}),
               ("crash", {"rank": 1})]
PEER_GONE_IN_A_WAIT = (
    "step 11 crash(rank=1): the implementation would fail with peer gone while waiting for "
    "gate 1 (rank 0 in phase wait: 'peer disconnected during RDMA gate'); the spec offers no "
    "such step (peer_gone(rank=0) is not enabled)")


def planted(system: Any, name: str, keep: Callable[[Any, tuple], bool]) -> Any:
    """``system`` with its action ``name`` enabled only where ``keep(state, args)``: a spec
    that stops offering the rest."""
    def narrowed(a: Any) -> Any:
        def enabled(s: Any) -> Iterable[tuple]:
            return (args for args in a.enabled(s) if keep(s, args))
        return dataclasses.replace(a, enabled=enabled)

    system.actions = tuple(narrowed(a) if a.name == name else a for a in system.actions)
    return system


def no_peer_check_in_waits(system: GateSystem) -> GateSystem:
    """The spec bug: the peer-death check gone from the completion waits (``peer_gone``
    offered only in a TCP read)."""
    return planted(system, gh.PEER_GONE,
                   lambda s, args: s.ranks[args[0]].phase not in REAP_PHASES)


@pytest.fixture(params=["refimpl", "native"])
def gate_factory(request: pytest.FixtureRequest) -> gh.Factory:
    if request.param == "native":
        from verbspec.refimpl.bindings.native_gate import factory

        return factory(native_module("gate"))
    return gh.reference


def test_a_spec_that_stops_offering_peer_gone_in_a_wait_is_caught(gate_factory):
    harness = gh.GateHarness(no_peer_check_in_waits(build_gate(DECODE)), gate_factory)
    run = harness.follow(TO_THE_WAIT)
    assert str(run.mismatch) == PEER_GONE_IN_A_WAIT
    assert run.mismatch.what == f"{REACTION} peer_gone(rank=0)"
    assert run.trace.message == PEER_GONE_IN_A_WAIT


def test_the_first_direction_alone_passes_that_spec(gate_factory):
    """Each of the planted spec's steps handed to the engines agrees with them: only the
    reaction the spec no longer offers shows the bug."""
    harness = gh.GateHarness(no_peer_check_in_waits(build_gate(DECODE)), gate_factory)
    s, impls = harness.fresh()
    moves = gh.recorded(harness.system, TO_THE_WAIT)
    while (move := moves(s, 0)) is not None:
        a, args = move
        post, obs = a.apply(s, *args)
        assert harness._step(impls, s, a.name, args, obs) is None
        s = post


def test_the_spec_as_written_offers_every_reaction_on_that_path(gate_factory):
    run = gh.GateHarness(build_gate(DECODE), gate_factory).follow(TO_THE_WAIT)
    assert run.mismatch is None and run.steps == len(TO_THE_WAIT)


def test_random_runs_catch_the_planted_spec_bug(gate_factory):
    report = gh.conform(no_peer_check_in_waits(build_gate({})), gate_factory, "planted",
                        sequences=20, steps=1000, shrink_seconds=0)
    assert report.mismatch is not None
    assert report.mismatch.what.startswith(f"{REACTION} peer_gone(rank=")
    assert "the implementation would fail with peer gone while waiting" in str(report.mismatch)


def never(s: Any, args: tuple) -> bool:
    return False


# a reaction of each kind the spec stops offering, in a configuration that has it, and the
# text its mismatch shows
GATE_PLANTS = [
    (gh.TIMEOUT, DECODE, "time out while"),
    (gh.REAP, DECODE, "report the completions its CQ holds while"),
    (gh.POLL_FAIL, {**DECODE, "post_failures": 1}, "fail a poll of its CQ while"),
    (gh.POST_FAIL, {**DECODE, "post_failures": 1}, "have its step's first post refused"),
    ("gate_done", DECODE, "take a step of its own (rank"),
    ("barrier_read", DECODE, "read byte 0xd1 (rank 0 in phase arm_barrier_read)"),
]


@pytest.mark.parametrize("name,values,how", GATE_PLANTS, ids=[p[0] for p in GATE_PLANTS])
def test_each_kind_of_reaction_the_spec_stops_offering_is_caught(name, values, how,
                                                                  gate_factory):
    harness = gh.GateHarness(planted(build_gate(values), name, never), gate_factory)
    for seed in range(20):
        run = harness.run(random.Random(seed), 400, fault_rate=0.05)
        if run.mismatch is not None:
            break
    assert run.mismatch is not None and run.mismatch.what.startswith(REACTION)
    assert how in str(run.mismatch), str(run.mismatch)


# ---------------------------------------------------------------------------- tag matching
RENDEZVOUS_OFFLOADED = {"senders": 1, "messages": 1, "receives": 1, "capacity": 1,
                        "cancel": 1, "probe": 0, "max_bytes": 2, "eager_limit": 1}


@pytest.fixture(params=["refimpl", "native"])
def tag_factory(request: pytest.FixtureRequest) -> th.Factory:
    if request.param == "native":
        native_module("tagmatch")
        from verbspec.refimpl.bindings.native_tagmatch import native

        return native
    return th.reference


@pytest.mark.parametrize("name,message", [
    (th.READ_DONE, "step 5 rndv_read(mid=0): the implementation would complete the READ of "
                   "message 0; the spec offers no such step (rndv_read_done(mid=0) is not "
                   "enabled)"),
    (th.SW_COMPLETE, "step 2 deliver(sender=0): the implementation would handle the NIC's "
                     "oldest completion ('unexpected', None, 0, False); the spec offers no "
                     "such step (sw_complete() is not enabled)"),
], ids=["read_done", "sw_complete"])
def test_a_tagmatch_spec_that_stops_offering_a_step_of_the_receivers_is_caught(
        name, message, tag_factory):
    system = planted(build_tagmatch(RENDEZVOUS_OFFLOADED), name, never)
    sweep = th.TagmatchHarness(system, tag_factory).every_edge()
    assert str(sweep.mismatch) == message


def test_the_tagmatch_spec_as_written_offers_every_reaction(tag_factory):
    sweep = th.TagmatchHarness(build_tagmatch(RENDEZVOUS_OFFLOADED), tag_factory).every_edge()
    assert sweep.mismatch is None and sweep.edges > 0
