"""The pyverbs transport on soft-RoCE in the qemu guest (docs/verbs.md): ``verbspec demo
--transport verbs`` between rxe0 and rxe1 (two devices whose traffic crosses the veth link),
run in the guest with Debian's pyverbs, its JSON checked here.

- the gate protocol over a UC queue pair between two processes, with the native engine: arm,
  3,000 decode gates of two-chunk vectors, drain, a 12 MiB big gate in windows of 256, re-arm,
  300 more gates; zero drops, every payload verified; the same with the Python engine over
  1,000 gates (its engine runs interpreted under emulation); the native transport's 10,000
  gates are tests/rxe/test_rxe_native.py's;
- every run's device trace (work requests posted, completions polled, side-channel items),
  recorded in the guest and validated on the host: the gate run against the gate spec, the
  tagged run against what the tag-matching spec says;
- tagged traffic over RC: eager and rendezvous (RDMA READ, then FIN) messages, receives naming
  source and tag and receives with ANY_SOURCE and ANY_TAG, every payload verified;
- the no-barrier variant forced: rank 0's first gate reaches rank 1 before it posted its
  window; the device completes the send and never the receive, and rank 1's gate ends in ds4's
  gate timeout.

Run with ``pytest -m rxe``; each run skips naming what is missing (and fails instead under
VERBSPEC_REQUIRE_RXE=1, or VERBSPEC_REQUIRE_NATIVE=1 for the native engine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import check_device_trace, native_module, require

from verbspec.refimpl.cli.demo import BIG_BYTES, TAGGED_ROUNDS, TAGGED_SIZES
from verbspec.refimpl.library.gate_channel import TIMEOUT_ENV
from verbspec.refimpl.rxe import guest as rg
from verbspec.refimpl.transport import device_trace
from verbspec.spec.gate import errors

pytestmark = pytest.mark.rxe

DEVICES = ("rxe0", "rxe1")
#: decode gates of each engine's run (then a tenth as many after the big gate)
GATES = {"native": 3_000, "python": 1_000}
VERBSPEC = str(Path(sys.executable).with_name("verbspec"))
#: under emulation on a loaded machine a rank can stay descheduled past the 750 ms default
GATE_TIMEOUT_MS = "20000"
#: the bound on one run in the guest (a hung run ends there; a run's speed is never asserted)
RUN_TIMEOUT_S = 1800


def run_demo(guest, *args: str, expect_rc: int = 0, traces: Path | None = None) -> dict:
    """``verbspec demo --transport verbs`` across the veth pair in the guest; its JSON. With
    ``traces``, each rank records its device traces there."""
    try:
        pyverbs = rg.pyverbs_path()
    except rg.MissingPrerequisite as exc:
        require("rxe", str(exc))
    argv = [VERBSPEC, "demo", "--transport", "verbs", "--device", DEVICES[0],
            "--peer-device", DEVICES[1], "--json", "--quiet", *args]
    env = {"PYTHONPATH": str(pyverbs), TIMEOUT_ENV: GATE_TIMEOUT_MS}
    if traces is not None:
        env[device_trace.TRACE_ENV] = str(traces)
    res = guest.run(argv, env=env, timeout=RUN_TIMEOUT_S)
    assert res.returncode == expect_rc, (f"{' '.join(argv)} exited {res.returncode}:\n"
                                         f"{res.stdout}\n{res.stderr}")
    out = json.loads(res.stdout)
    print(f"\n{' '.join(args)}: {res.seconds:.1f} s in the guest: {res.stdout.strip()}")
    return out


@pytest.fixture(scope="module", params=["native", "python"])
def demo(request, rxe_guest, rxe_scratch) -> dict:
    """The demo with one engine: gates, the big gate and tagged traffic, traced (the traces'
    directory is the result's "traces")."""
    if request.param == "native":
        native_module("gate")
    traces = rxe_scratch / f"pyverbs-{request.param}"
    out = run_demo(rxe_guest, "--engine", request.param, "--gates", str(GATES[request.param]),
                   traces=traces)
    return {**out, "traces": traces}


@pytest.fixture(scope="module")
def no_barrier(rxe_guest) -> dict:
    from verbspec.spec.gate.variants import NO_BARRIER

    return run_demo(rxe_guest, "--variant", NO_BARRIER.name, expect_rc=1)


def test_gates_and_a_big_gate_over_uc_arrive_verified_with_no_drop(demo, request):
    engine = request.node.callspec.params["demo"]
    assert (demo["engine"], demo["transport"], demo["devices"]) == \
        (engine, "pyverbs", list(DEVICES))
    assert demo["errors"] == [] and demo["verified"] is True
    assert demo["gates"] == GATES[engine] + GATES[engine] // 10
    assert demo["big_gate_bytes"] == BIG_BYTES >= 12 * 2**20
    assert demo["big_gate_window"] == 256
    assert demo["drops"] == 0
    checked = demo["checked"]
    assert checked["gate_vectors"] == 2 * demo["gates"]
    assert checked["big_gates"] == 2 and checked["wrong"] == 0


def test_tagged_rc_traffic_eager_and_rendezvous_with_wildcards_arrives_verified(demo):
    # per rank and round: three phases (source and tag named; ANY_SOURCE and ANY_TAG after
    # arrival; ANY_TAG posted before), each one message of every size
    per_rank = TAGGED_ROUNDS * 3 * len(TAGGED_SIZES)
    eager = sum(size <= 8192 for size in TAGGED_SIZES)
    assert demo["tagged_messages"] == 2 * per_rank == demo["checked"]["tagged"]
    assert demo["tagged"]["eager"] == 2 * TAGGED_ROUNDS * 3 * eager > 0
    assert demo["tagged"]["rendezvous"] == 2 * per_rank - demo["tagged"]["eager"] > 0
    assert demo["tagged"]["bytes"] == 2 * TAGGED_ROUNDS * 3 * sum(TAGGED_SIZES)
    assert demo["verified"] is True and demo["checked"]["wrong"] == 0


def test_the_device_traces_of_both_ranks_are_runs_of_the_spec(demo):
    """The gate run's work requests and completions, both ranks, each a step of the gate spec
    from the state reached; the tagged run's checked against what the tag-matching spec says
    (matching, MPI order, READ before FIN)."""
    from verbspec.refimpl.traces.read import read_pair
    from verbspec.refimpl.traces.validate_gate import validate_gate
    from verbspec.refimpl.traces.validate_tagmatch import validate_tagged

    gate = validate_gate(read_pair([demo["traces"] / device_trace.GATE]))
    check_device_trace(gate, f"{demo['engine']} engine over pyverbs, gate device trace")
    # every decode gate before the big gate was a run of the spec
    assert min(gate.gates) >= demo["gates"] * 10 // 11
    tagged = validate_tagged(read_pair([demo["traces"] / device_trace.TAGGED]))
    assert tagged.ok, tagged.message
    print(f"tagged device trace: {tagged.recorded_steps} recorded steps validated")


def test_without_the_barrier_the_first_gate_is_dropped_and_the_peer_times_out(no_barrier):
    early, late = no_barrier["ranks"]
    # rank 0 (not late) sent its gate, two chunks, both completing successfully, and got
    # rank 1's gate
    assert early["error"] == "" and early["verified"] is True
    assert early["completions"]["send"] == 2 and early["completions"]["error"] == 0
    # rank 1 posted its window after rank 0's chunks had arrived: its device completed none
    assert late["completions"]["recv"] == 0 and late["completions"]["error"] == 0
    assert late["error"] == errors.GATE_TIMEOUT(seq=1, recv_done=0)
    assert late["dropped"] == 2 and no_barrier["drops"] == 2
    assert no_barrier["verified"] is False
