"""The raw verbs recorder on real devices (native/record/recorder.c, refimpl/rxe/record.py): the
unmodified gate program's pair recorded in the soft-RoCE guest with its own trace off, and a
program that reaches libibverbs only through dlopen recorded through the recorder's dlopen
route (docs/verbs.md, "Recording a program without changing it")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import require

from verbspec.refimpl.rxe import native_programs as vn
from verbspec.refimpl.rxe import record as rr

PLAN = vn.GateRun(gates=40, more_gates=4, big_bytes=65_536, vector_bytes=24_576,
                  timeout_ms=10_000, port=18_720)


def _recorder() -> Path:
    require("rxe", vn.headers_missing())
    return rr.build_recorder()


@pytest.fixture(scope="module")
def gate_recording(rxe_guest, rxe_scratch):
    """Both ranks of a small gate run (44 gates, a 64 KiB big gate), each under the recorder."""
    library = _recorder()
    exe = vn.build_gate_program()
    out = rxe_scratch / "recorded-gate"
    res = rr.record_in_guest(rxe_guest.run, [PLAN.argv(exe, 0), PLAN.argv(exe, 1)], out,
                             timeout=600, library=library)
    print(f"\nrecorded gate pair: {res.seconds:.1f} s in the guest, "
          f"{sum(f.events for f in res.files)} events")
    return res


@pytest.mark.rxe
def test_the_recorded_gate_pair_runs_as_without_the_recorder(gate_recording):
    for c in gate_recording.commands:
        assert c.returncode == 0, c.stderr
        assert '"ok": true' in c.stdout
    assert len(gate_recording.files) == 2


@pytest.mark.rxe
def test_each_rank_s_recording_holds_its_setup_posts_polls_and_side_channel(gate_recording):
    gates = PLAN.gates + PLAN.more_gates
    for f in gate_recording.files:
        events = rr.read_events(f.path)
        kinds = Counter(e["ev"] for e in events)
        assert events[0]["ev"] == "process" and events[0]["format"] == 1
        assert events[-1]["ev"] == "end" and f.ended and f.bad_lines == 0
        assert "unsupported" not in kinds
        # the gate's four regions (in, out, stage, stage_out), more where the program has
        # more; each deregistered at the end
        assert kinds["open_device"] == 1 and kinds["reg_mr"] >= 4
        assert kinds["reg_mr"] == kinds["dereg_mr"]
        assert all("lkey" in e and e["length"] > 0 for e in events if e["ev"] == "reg_mr")
        qp = next(e for e in events if e["ev"] == "create_qp")
        assert qp["qp_type"] == "UC" and qp["max_recv_wr"] >= 16
        states = [e["state"] for e in events if e["ev"] == "modify_qp"]
        assert states[:3] == ["INIT", "RTR", "RTS"]
        assert all(e["rc"] == 0 for e in events if e["ev"] in ("modify_qp", "post_send",
                                                                  "post_recv"))
        signaled = [w for e in events if e["ev"] == "post_send" for w in e["wrs"]
                    if w["signaled"]]
        assert len(signaled) >= gates and all(w["opcode"] == "SEND" for w in signaled)
        assert kinds["post_recv"] >= gates
        wcs = [w for e in events if e["ev"] == "poll_cq" for w in e["wcs"]]
        assert all(e["rc"] > 0 for e in events if e["ev"] == "poll_cq")
        assert sum(w["opcode"] == "RECV" for w in wcs) >= 2 * gates
        assert all(w["status"] == 0 and w["qp_num"] == qp["qp_num"] for w in wcs)
        assert kinds["tcp_open"] == 1 and kinds["tcp"] > 0 and kinds["tcp_close"] >= 1


@pytest.mark.rxe
def test_the_side_channel_bytes_each_rank_sent_are_the_bytes_the_other_received(
        gate_recording):
    def stream(f: rr.RecordedFile, way: str) -> bytes:
        return b"".join(bytes.fromhex(e["data"]) for e in rr.read_events(f.path)
                        if e["ev"] == "tcp" and e["dir"] == way)

    a, b = gate_recording.files
    assert stream(a, "out") == stream(b, "in") and stream(b, "out") == stream(a, "in")
    assert len(stream(a, "out")) > 0


@pytest.mark.rxe
def test_a_program_that_dlopens_libibverbs_is_recorded_and_extended_verbs_are_refused(
        rxe_guest, rxe_scratch):
    library = _recorder()
    exe = rr.build_test_program("dlopen_verbs")
    out = rxe_scratch / "recorded-dlopen"
    res = rr.record_in_guest(rxe_guest.run, [[str(exe), "rxe0"]], out, timeout=120,
                             library=library)
    assert res.commands[0].returncode == 0, res.commands[0].stderr
    (f,) = res.files
    events = rr.read_events(f.path)
    kinds = Counter(e["ev"] for e in events)
    assert kinds["open_device"] == 1 and kinds["reg_mr"] == 1 and kinds["create_qp"] == 1
    assert kinds["create_cq"] == 1              # the extended CQ is not a create_cq line
    assert kinds["destroy_cq"] == 2 and kinds["destroy_qp"] == 1 and kinds["dereg_mr"] == 1
    (recv,) = [e for e in events if e["ev"] == "post_recv"]
    assert recv["wrs"][0]["wr_id"] == 7 and recv["wrs"][0]["sge"][0][1] == 64
    assert "poll_cq" not in kinds               # one empty poll: counted, not written
    refused = {e["call"] for e in events if e["ev"] == "unsupported"}
    assert refused == {"ibv_create_cq_ex", "ibv_qp_to_qp_ex", "ibv_rereg_mr"}
    assert events[-1]["ev"] == "end"
