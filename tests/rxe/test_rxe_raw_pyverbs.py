"""The project's Python gate library held to the gate spec from a raw recording: ``GateChannel``
over the pyverbs transport, two forked rank processes (``verbspec demo --transport verbs
--no-tagged``), recorded in the soft-RoCE guest by the raw recorder with the library's own
device trace off, and explained as a run of the spec by the profile ``pyverbs-gate``
(``verbspec trace validate --raw``); an edited copy rejected (docs/verbs.md, "The profile
`pyverbs-gate`")."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import check_device_trace, require

from verbspec.refimpl.cli.main import main as cli
from verbspec.refimpl.library.gate_channel import TIMEOUT_ENV
from verbspec.refimpl.rxe import guest as rg
from verbspec.refimpl.rxe import record as rr
from verbspec.refimpl.traces.inferred_calls import InferredCalls
from verbspec.refimpl.traces.profiles import raw_ranks
from verbspec.refimpl.traces.profiles.pyverbs_gate import HELLO_BYTES
from verbspec.refimpl.traces.validate_gate import validate_gate

pytestmark = pytest.mark.rxe

PROFILE = "pyverbs-gate"
DEVICES = ("rxe0", "rxe1")
# decode gates of two-chunk vectors (24 KiB), a drain, a 12 MiB big gate, a tenth as many more
GATES = 100
#: under emulation a rank can stay descheduled past the 750 ms default
GATE_TIMEOUT_MS = "20000"


@pytest.fixture(scope="module")
def recorded(rxe_guest, rxe_scratch) -> Path:
    """One run of the demo's gate part, recorded in the guest (the parent's file and each
    rank's)."""
    try:
        pyverbs = rg.pyverbs_path()
    except rg.MissingPrerequisite as exc:
        require("rxe", str(exc))
    out = rxe_scratch / "raw-pyverbs"
    argv = [sys.executable, "-m", "verbspec.refimpl.cli", "demo", "--transport", "verbs",
            "--device", DEVICES[0], "--peer-device", DEVICES[1], "--no-tagged", "--engine",
            "python", "--gates", str(GATES), "--json", "--quiet"]
    res = rr.record_in_guest(rxe_guest.run, [argv], out, timeout=600,
                             env={"PYTHONPATH": str(pyverbs), TIMEOUT_ENV: GATE_TIMEOUT_MS})
    assert res.ok, [c.stderr for c in res.commands]
    demo = json.loads(res.commands[0].stdout)
    assert demo["verified"] and demo["gates"] == GATES + GATES // 10, demo
    print(f"\nrecorded: {res.seconds:.1f} s in the guest, "
          f"{[f.events for f in res.files]} lines per process")
    return out


def _raw(d: Path):
    return validate_gate(raw_ranks([d], PROFILE, {}), validator=InferredCalls)


def test_the_recording_validates_as_a_run_of_the_gate_spec(recorded, tmp_path, capsys):
    code = cli(["trace", "validate", "--raw", str(recorded), "--profile", PROFILE,
                "--trace-dir", str(tmp_path)])
    line = capsys.readouterr().out.strip()
    print(f"\n{line}")
    assert code == 0, line
    rep = _raw(recorded)
    check_device_trace(rep, "pyverbs library, raw recording, calls inferred")
    gates = GATES + GATES // 10
    # the drain and the big gate are both the spec's big gates (a drain is a one-chunk one)
    assert (rep.gates, rep.big_gates, rep.drains) == ([gates] * 2, [2, 2], [1, 1])


def _ranks(d: Path) -> list[Path]:
    """The two ranks' files, rank 0 (it accepted its connections) first."""
    files = [p for p in d.glob("*.jsonl") if '"create_qp"' in p.read_text()]
    return sorted(files, key=lambda p: '"how":"accept"' not in p.read_text())


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines()]


def _put(p: Path, lines: list[dict]) -> None:
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _first_item(lines: list[dict], way: str) -> int:
    """The line holding the first side-channel byte past the hello, written or read: the
    side channel is the connection whose first bytes are the hello."""
    magic = "56534748"      # "VSGH"
    fd = next(x["fd"] for x in lines if x["ev"] == "tcp" and x["data"].startswith(magic))
    seen = 0
    for k, x in enumerate(lines):
        if x["ev"] == "tcp" and x["fd"] == fd and x["dir"] == way:
            if seen + len(x["data"]) // 2 > HELLO_BYTES:
                assert seen >= HELLO_BYTES, "the hello and an item in one line"
                return k
            seen += len(x["data"]) // 2
    raise AssertionError("no side-channel item")


def test_a_side_channel_byte_changed_on_both_sides_is_rejected(recorded, tmp_path):
    d = tmp_path / "edited"
    shutil.copytree(recorded, d)
    rank0, rank1 = _ranks(d)
    a, b = _lines(rank0), _lines(rank1)
    i, j = _first_item(a, "out"), _first_item(b, "in")
    changed = f"{int(a[i]['data'][:2], 16) ^ 1:02x}"
    a[i]["data"] = changed + a[i]["data"][2:]
    b[j]["data"] = changed + b[j]["data"][2:]
    _put(rank0, a)
    _put(rank1, b)
    rep = _raw(d)
    print(f"\nbyte changed at rank 0 line {i + 1}: {rep.message}")
    assert not rep.ok and (rep.rank, rep.line) == (0, i + 1), rep.message
    assert json.loads(rep.event)["ev"] == "tcp_write"
