"""Unmodified programs held to the gate spec on real devices: the gate program's pair recorded
in the soft-RoCE guest by the raw recorder (native/record/recorder.c) and its recording
explained as a run of the spec with the program's calls inferred (``verbspec trace validate
--raw``), agreeing with the program's own device trace of the same run; recordings edited and
the program's mutants (each a one-line change of its gate engine) rejected at the event where
they leave the spec (docs/verbs.md, "Holding your own program to the spec")."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import check_device_trace, require

from verbspec.refimpl.cli.main import main as cli
from verbspec.refimpl.conformance import mutants
from verbspec.refimpl.rxe import native_programs as vn
from verbspec.refimpl.rxe import record as rr
from verbspec.refimpl.traces.inferred_calls import InferredCalls
from verbspec.refimpl.traces.profiles import raw_ranks
from verbspec.refimpl.traces.profiles.common import ProfileError
from verbspec.refimpl.traces.profiles.verbs_gate import SETUP_BYTES
from verbspec.refimpl.traces.read import read_pair
from verbspec.refimpl.traces.validate_gate import validate_gate

PROFILE = "verbs-gate"
# two-chunk vectors, 400 gates, a drain and a 1 MiB big gate (64 chunks), two verify blocks,
# 40 more gates re-armed
PLAN = vn.GateRun(gates=400, more_gates=40, big_bytes=1 << 20, vector_bytes=24_576,
                  timeout_ms=10_000, port=18_740, verify_blocks=2)
SMALL = vn.GateRun(gates=40, more_gates=4, big_bytes=65_536, vector_bytes=24_576,
                   timeout_ms=2_000)
# the program's mutants (gate engine patches) and the event each must be rejected at
MUTANTS = {1: "post_recv",      # the repost one gate too far
           3: "post_send",      # the window armed without the barrier: a send, not the byte
           5: "post_send",      # one drain dummy short
           13: "post_recv"}     # the seq on every chunk's receive


def _raw(d: Path):
    return validate_gate(raw_ranks([d], PROFILE, {}), validator=InferredCalls)


def _record(guest, scratch: Path, qp: str) -> Path:
    """One run recorded both ways: raw (raw/) and by the program itself (builtin/)."""
    require("rxe", vn.headers_missing())
    exe, library = vn.build_gate_program(), rr.build_recorder()
    out = scratch / f"raw-gate-{qp}"
    (out / "builtin").mkdir(parents=True)
    run = vn.with_trace(replace(PLAN, qp=qp, port=PLAN.port + (qp == "rc")), str(out / "builtin"))
    res = rr.record_in_guest(guest.run, [run.argv(exe, 0), run.argv(exe, 1)], out / "raw",
                             timeout=600, library=library)
    assert res.ok, [c.stderr for c in res.commands]
    print(f"\nrecorded over {qp.upper()}: {res.seconds:.1f} s in the guest, "
          f"{[f.events for f in res.files]} events per rank")
    return out


@pytest.fixture(scope="module")
def recorded(rxe_guest, rxe_scratch) -> Path:
    return _record(rxe_guest, rxe_scratch, "uc")


@pytest.fixture(scope="module")
def recorded_rc(rxe_guest, rxe_scratch) -> Path:
    return _record(rxe_guest, rxe_scratch, "rc")


@pytest.mark.rxe
@pytest.mark.parametrize("run", ["recorded", "recorded_rc"])
def test_the_raw_recording_is_a_run_of_the_spec_and_agrees_with_the_program_s_own_trace(
        run, request):
    recorded = request.getfixturevalue(run)
    raw = _raw(recorded / "raw")
    check_device_trace(raw, "raw recording, calls inferred")
    own = validate_gate(read_pair([recorded / "builtin" / f"trace-rank{r}.jsonl"
                                   for r in (0, 1)]))
    check_device_trace(own, "the program's own trace")
    gates = PLAN.gates + PLAN.more_gates
    assert raw.gates == own.gates == [gates, gates] or not (raw.ok and own.ok)
    assert (raw.ok, raw.spec_steps, raw.gates, raw.big_gates, raw.blocks, raw.drains) == \
        (own.ok, own.spec_steps, own.gates, own.big_gates, own.blocks, own.drains)
    assert raw.blocks == [PLAN.verify_blocks] * 2 or not raw.ok
    if raw.ok:
        assert raw.actions == own.actions
    print(f"{run}: raw {raw.recorded_steps} recorded steps in {raw.seconds:.2f} s "
          f"({raw.recorded_steps / raw.seconds:,.0f} per second); own trace "
          f"{own.recorded_steps} in {own.seconds:.2f} s; {raw.spec_steps} spec steps")


@pytest.mark.rxe
def test_the_command_line_validates_the_recording(recorded, tmp_path, capsys):
    code = cli(["trace", "validate", "--raw", str(recorded / "raw"), "--profile", PROFILE,
                "--json", "--trace-dir", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["ok"] else 1)
    assert out["gates"][0] >= PLAN.gates


def _copy(recorded: Path, tmp: Path) -> tuple[Path, list[Path]]:
    d = tmp / "edited"
    shutil.copytree(recorded / "raw", d)
    files = sorted(d.glob("*.jsonl"), key=lambda p: '"--rank","1"' in p.read_text()[:2000])
    return d, files


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def _put(p: Path, lines: list[dict]) -> None:
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.rxe
@pytest.mark.parametrize("edit", ["remove", "swap"])
def test_an_event_removed_or_two_swapped_is_rejected_at_it(recorded, tmp_path, edit):
    d, (rank0, _) = _copy(recorded, tmp_path)
    lines = _lines(rank0)
    i = next(k for k, x in enumerate(lines) if x["ev"] == "post_send" and k > 200
             and lines[k + 1]["ev"] == "poll_cq")
    if edit == "remove":
        del lines[i]
    else:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    _put(rank0, lines)
    rep = _raw(d)
    print(f"\n{edit} line {i + 1}: {rep.message}")
    assert not rep.ok and rep.line is not None, rep.message


def _first_item(lines: list[dict], way: str) -> int:
    """The line of the first side-channel write or read past setup."""
    seen = 0
    for k, x in enumerate(lines):
        if x["ev"] == "tcp" and x["dir"] == way:
            if seen >= SETUP_BYTES:
                return k
            seen += len(x["data"]) // 2
    raise AssertionError("no side-channel item")


@pytest.mark.rxe
def test_a_byte_changed_on_the_side_channel_is_refused_or_rejected(recorded, tmp_path):
    d, (rank0, rank1) = _copy(recorded, tmp_path)
    a, b = _lines(rank0), _lines(rank1)
    i, j = _first_item(a, "out"), _first_item(b, "in")
    a[i]["data"] = f"{int(a[i]['data'][:2], 16) ^ 1:02x}" + a[i]["data"][2:]
    _put(rank0, a)
    # one side only: the bytes read are not the bytes written
    want = f"line {j + 1}: read byte {SETUP_BYTES} .* line {i + 1} wrote"
    with pytest.raises(ProfileError, match=want):
        raw_ranks([d], PROFILE, {})
    # both sides: a barrier byte the spec does not write
    b[j]["data"] = a[i]["data"][:2] + b[j]["data"][2:]
    _put(rank1, b)
    rep = _raw(d)
    assert not rep.ok and (rep.rank, rep.line) == (0, i + 1), rep.message
    assert json.loads(rep.event)["ev"] == "tcp_write"


@pytest.mark.rxe
@pytest.mark.parametrize("number", sorted(MUTANTS))
def test_a_mutant_of_the_program_is_rejected_where_it_leaves_the_spec(
        number, rxe_guest, rxe_scratch, tmp_path):
    require("rxe", vn.headers_missing())
    m = mutants.mutant("gate", number)
    exe = vn.build_gate_program(engine=mutants.write_patched(m, tmp_path))
    out = rxe_scratch / f"raw-mutant{number}"
    run = replace(SMALL, port=18_750 + number)
    res = rr.record_in_guest(rxe_guest.run, [run.argv(exe, 0), run.argv(exe, 1)], out,
                             timeout=120, library=rr.build_recorder())
    rep = _raw(out)
    print(f"\n{m.what}: exits {[c.returncode for c in res.commands]}; {rep.message}")
    assert not rep.ok, m.what
    assert json.loads(rep.event)["ev"] == MUTANTS[number], rep.message
