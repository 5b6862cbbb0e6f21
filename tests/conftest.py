"""Fixtures shared by the suite: a system per protocol at its defaults, and the rule for tiers
that need something this machine may lack (MPICH, a device): they skip, saying why, unless
``VERBSPEC_REQUIRE_<TIER>=1`` is set (as CI sets it), which turns the skip into a failure."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from verbspec.spec import protocols


def require(tier: str, missing: str | None) -> None:
    """Skip the calling test or fixture with the reason ``missing`` (None: nothing is missing),
    or fail instead where the environment requires the tier to run."""
    if missing is None:
        return
    if os.environ.get(f"VERBSPEC_REQUIRE_{tier.upper()}") == "1":
        pytest.fail(f"the {tier} tier is required here but cannot run: {missing}")
    pytest.skip(missing)


def computed_once(tmp_path_factory: pytest.TempPathFactory, name: str,
                  compute: Callable[[Path], object]) -> object:
    """``compute(directory)``'s JSON result, computed by one pytest-xdist worker of the run and
    read back by the others: a module fixture is otherwise built once per worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent          # the run's directory, shared by its workers
    where = root / f"once-{name}"
    where.mkdir(exist_ok=True)
    with open(where / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = where / "result.json"
        if not result.exists():
            value = compute(where)
            tmp = where / "result.json.tmp"
            tmp.write_text(json.dumps(value))
            tmp.replace(result)
        return json.loads(result.read_text())


def native_module(engine: str):
    """The compiled native engine ``engine`` (``gate`` or ``tagmatch``); the test skips, saying
    so, where it was not built (no C compiler at install), unless VERBSPEC_REQUIRE_NATIVE=1."""
    from verbspec import native

    mod = native.load(engine)
    require("native", None if mod is not None else
            f"the native {engine} engine is not built (pip install -e . needs a C compiler)")
    return mod


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` first (otherwise in their order): pytest-xdist hands tests out in
    this order, so the longest start at once instead of leaving one worker busy at the end.
    Only slow-tier tests are marked: the default tier's proofs share the refinement check's
    cache, which the first of them fills, so they are better not started together."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with the rxe tier selected (``-m rxe``): one worker. Its tests share one guest
    per process, and a second guest on two cores would boot both slower; pytest 9 ignores
    xdist_group (its node ids can no longer be suffixed), so grouping cannot do this."""
    expr = config.getoption("markexpr") or ""
    return 1 if "rxe" in expr.replace("not rxe", "") else None


@pytest.fixture(scope="session")
def rxe_scratch(tmp_path_factory) -> Path:
    """A host directory the rxe guest sees at its own path, read-write: where runs in the guest
    leave their device traces for the host to validate."""
    return tmp_path_factory.mktemp("rxe-scratch")


@pytest.fixture(scope="session")
def rxe_guest(rxe_scratch):
    """One qemu guest with soft-RoCE devices for the whole session, the checkout and
    ``rxe_scratch`` shared at their own paths (docs/verbs.md). Skips, naming what is missing,
    unless VERBSPEC_REQUIRE_RXE=1; a guest that does not boot is an error, not a skip."""
    from verbspec.refimpl.rxe import guest as rg

    try:
        image = rg.prepare()
    except rg.MissingPrerequisite as exc:
        require("rxe", str(exc))
    with rg.RxeGuest.start(Path(__file__).resolve().parents[1], shares=[rxe_scratch],
                           image=image) as guest:
        yield guest


@pytest.fixture(params=sorted(protocols.MODULES))
def protocol_system(request):
    """Each protocol's system at its defaults."""
    return protocols.load(request.param).build({}, ())


@pytest.fixture
def gate_system():
    return protocols.load("gate").build({}, ())


@pytest.fixture
def tagmatch_system():
    return protocols.load("tagmatch").build({}, ())


@pytest.fixture
def repost_one_too_far(monkeypatch):
    """A planted spec bug: gate_done reposts the receive for seq+window+1, not seq+window."""
    from verbspec.spec.gate.steps import GateSpec

    real = GateSpec.do_gate_done

    def planted(self, s, r):
        chain = self.gate_recv_chain
        self.gate_recv_chain = lambda rank, seq: chain(rank, seq + 1)
        try:
            return real(self, s, r)
        finally:
            del self.gate_recv_chain

    planted.__action__ = replace(real.__action__, step=planted)
    monkeypatch.setattr(GateSpec, "do_gate_done", planted)
    return monkeypatch


@pytest.fixture
def forgetful_deliver(monkeypatch):
    """A drifted model: the deliver move no longer records a UC drop."""
    from verbspec.proofs.gate import moves
    from verbspec.proofs.gate.terms import Edit

    real = moves.MOVES["deliver"]

    def forgetful(s, prm, src, choice):
        m = real(s, prm, src, choice)
        upd = Edit(s, m.updates)
        upd.ghost.dropped = s.ghost.dropped
        return upd.move(m.guard)

    monkeypatch.setitem(moves.MOVES, "deliver", forgetful)


# the phases where a real device's completion order can outrun the validator's lazy fabric:
# the drain before a big gate and the big-gate window (docs/verbs.md, "Device traces")
SHORT_PHASES = ("phase drain_wait", "phase big_xfer")


def check_device_trace(rep, what: str) -> None:
    """A real device's gate trace, validated against the spec. The validator accepts only
    what the spec explains, but it cannot yet explain every completion order a real device
    produces once the decode gates are over: on rxe a UC send's completion can reach the
    sender's CQ after the peer has polled the message (the spec completes a UC send as its
    message leaves). In a drain or a big-gate window, and only there, a poll it cannot place
    ends the validation short and the steps before it count (the callers then require every
    decode gate validated); anywhere else a step the spec does not take fails the test."""
    print(f"\n{what}: {rep.recorded_steps} recorded steps validated by {rep.spec_steps} spec "
          f"steps in {rep.seconds:.1f} s; gates {rep.gates}, big gates {rep.big_gates}"
          + ("" if rep.ok else f"; stopped short: {rep.message}"))
    if rep.ok:
        return
    assert ("poll cannot be explained" in rep.message
            and any(phase in rep.allowed for phase in SHORT_PHASES)), (
        f"{what}: {rep.message}\n  recorded: {rep.event}\n  the spec instead: {rep.allowed}")
