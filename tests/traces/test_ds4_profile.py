"""ds4's transport as written, held to the gate spec through the profile ``ds4-v14-linux``
(refimpl/traces/profiles/ds4_v14_linux.py): a raw recording of an unmodified ds4 pair in the
soft-RoCE guest (``ds4_tp.c`` at zzyu17/ds4 1c45969, two ranks over its public API: 40
decode gates of two-chunk vectors, a verify block of 8 layers of 3 rows, 30 gates, a big gate
of 64 chunks, 20 gates, a big gate of 192 chunks in two windows, 10 gates; docs/verbs.md,
"The profile ds4-v14-linux") is explained as a run of the spec, and the same recording edited
is refused at setup or rejected at the event that leaves it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from verbspec.refimpl.cli.main import main as cli
from verbspec.refimpl.traces.inferred_calls import InferredCalls
from verbspec.refimpl.traces.profiles import raw_ranks
from verbspec.refimpl.traces.profiles.common import ProfileError
from verbspec.refimpl.traces.profiles.ds4_v14_linux import (
    BATCH_MAGIC,
    HELLO_BYTES,
    PROFILE,
)
from verbspec.refimpl.traces.validate_gate import validate_gate
from verbspec.spec.gate.wire import TAG_BULK

DATA = Path(__file__).parent / "data" / "ds4-v14-linux"
RANK0, RANK1 = "drive2.153.jsonl", "drive2.154.jsonl"   # the leader accepted, the worker dialled


def _lines() -> dict[str, list[dict]]:
    return {p.name[:-3]: [json.loads(x) for x in gzip.open(p, "rt").read().splitlines()]
            for p in sorted(DATA.glob("*.jsonl.gz"))}


def _write(tmp: Path, recs: dict[str, list[dict]]) -> Path:
    d = tmp / "rec"
    d.mkdir(parents=True)
    for name, lines in recs.items():
        (d / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def _validate(d: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli(["trace", "validate", "--raw", str(d), "--profile", PROFILE.name, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _index(lines: list[dict], pred, nth: int = 0) -> int:
    return [i for i, x in enumerate(lines) if pred(x)][nth]


def test_the_recording_of_ds4_is_a_run_of_the_spec(capsys):
    code, out = _validate(DATA, capsys)
    assert (code, out["ok"]) == (0, True), out["message"]
    assert out["gates"] == [100, 100]
    assert (out["big_gates"], out["blocks"], out["drains"]) == ([2, 2], [1, 1], [3, 3])
    ranks = raw_ranks([DATA], PROFILE.name, {})
    cfg = ranks[0].config
    assert (cfg["vec_bytes"], cfg["n_slots"], cfg["qp_type"], cfg["cq_depth"]) == \
        (24_576, 16, "rc", 512)
    assert (cfg["verify_blocks"], cfg["block_layers"], cfg["block_rows"]) == (1, 8, 3)
    # the window's sixteen arming posts are one spec step: 32 work requests
    arm = next(e for e in ranks[0].events if e.ev == "post_recv")
    assert len(arm.data["wrs"]) == 32 and {w[1] for w in arm.data["wrs"]} == {"in"}
    rep = validate_gate(ranks, validator=InferredCalls)
    assert rep.ok and rep.spec_steps > rep.recorded_steps


def test_a_removed_or_swapped_event_is_rejected_at_its_rank(tmp_path, capsys):
    recs = _lines()
    r0 = recs[RANK0]
    k = _index(r0, lambda x: x["ev"] == "post_send" and x["wrs"][0]["wr_id"] == 30)
    del r0[k]
    code, out = _validate(_write(tmp_path, recs), capsys)
    assert (code, out["rank"]) == (1, 0)
    recs = _lines()
    r1 = recs[RANK1]
    k = _index(r1, lambda x: x["ev"] == "post_recv" and x["wrs"][-1]["wr_id"] == 40)
    r1[k], r1[k + 1] = r1[k + 1], r1[k]
    code, out = _validate(_write(tmp_path / "b", recs), capsys)
    assert (code, out["rank"]) == (1, 1)


def test_a_repost_one_gate_too_far_is_rejected_at_that_post(tmp_path, capsys):
    """ds4 reposts seq + 16 after each gate (ds4_tp.c 1602); a repost at seq + 17 is what
    gate mutant 1 does to the project's own engine."""
    recs = _lines()
    r0 = recs[RANK0]
    k = _index(r0, lambda x: x["ev"] == "post_recv" and x["wrs"][-1]["wr_id"] == 20)
    r0[k]["wrs"][-1]["wr_id"] = 21
    code, out = _validate(_write(tmp_path, recs), capsys)
    assert (code, out["rank"], out["line"]) == (1, 0, k + 1)
    assert out["event"].startswith('{"ev":"post_recv"')


def test_a_drain_one_dummy_short_is_rejected_at_the_drain(tmp_path, capsys):
    recs = _lines()
    r1 = recs[RANK1]
    k = _index(r1, lambda x: x["ev"] == "post_send" and len(x["wrs"]) == 32
               and x["wrs"][0]["wr_id"] & TAG_BULK)
    del r1[k]["wrs"][-1]
    code, out = _validate(_write(tmp_path, recs), capsys)
    assert (code, out["rank"], out["line"]) == (1, 1, k + 1)


def test_a_barrier_byte_changed_on_both_sides_is_rejected_and_on_one_side_refused(tmp_path,
                                                                                    capsys):
    recs = _lines()
    data_fd = {n: [x for x in lines if x["ev"] == "tcp_open"][1]["fd"]
               for n, lines in recs.items()}
    for name, d in ((RANK0, "out"), (RANK1, "in")):
        k = _index(recs[name], lambda x, n=name, d=d: x["ev"] == "tcp" and x["dir"] == d
                   and x["fd"] == data_fd[n] and x["data"] == "d1")
        recs[name][k]["data"] = "d2"
    code, out = _validate(_write(tmp_path, recs), capsys)
    assert (code, out["rank"]) == (1, 0)
    recs = _lines()
    k = _index(recs[RANK0], lambda x: x["ev"] == "tcp" and x["dir"] == "out"
               and x["fd"] == data_fd[RANK0] and x["data"] == "d1")
    recs[RANK0][k]["data"] = "d2"
    code = cli(["trace", "validate", "--raw", str(_write(tmp_path / "b", recs)), "--profile",
                PROFILE.name])
    assert code == 3
    assert "read byte 0 of the side channel as 0xd1" in capsys.readouterr().err


def _edit_hello(recs: dict[str, list[dict]], name: str, d: str, at: int, value: bytes) -> None:
    """Change the hello's bytes as rank ``name`` wrote (``d`` out) or read (in) them."""
    k = _index(recs[name], lambda x: x["ev"] == "tcp" and x["dir"] == d)
    data = bytearray.fromhex(recs[name][k]["data"])
    assert len(data) >= HELLO_BYTES
    data[at:at + len(value)] = value
    recs[name][k]["data"] = data.hex()


@pytest.mark.parametrize("edit, message", [
    (lambda recs: recs[RANK0][_index(recs[RANK0], lambda x: x["ev"] == "reg_mr")].update(
        length=4096), r"the slab registration is 4096 bytes; ds4's layout for 8 layers of "
                      r"24576-byte vectors is \d+ \(ds4_tp.c 645-669\)"),
    (lambda recs: recs[RANK1][_index(recs[RANK1], lambda x: x["ev"] == "create_qp")].update(
        qp_type="UC"), r"a UC queue pair; ds4 on Linux makes RC ones"),
    (lambda recs: recs[RANK1][_index(recs[RANK1], lambda x: x["ev"] == "modify_qp"
                                     and x["state"] == "RTR")].update(rc=110),
     r"queue pair states \['INIT', 'RTR', 'RTS'\] \(return codes \[0, 110, 0\]\)"),
    (lambda recs: recs[RANK0][_index(recs[RANK0], lambda x: x["ev"] == "create_cq")].update(
        cqe=256), r"a CQ of 256 entries; ds4 asks 512"),
])
def test_setup_that_is_not_ds4_s_is_refused_naming_line_and_rule(tmp_path, capsys, edit,
                                                                  message):
    recs = _lines()
    edit(recs)
    with pytest.raises(ProfileError, match=message):
        raw_ranks([_write(tmp_path, recs)], PROFILE.name, {})


def test_hellos_of_two_models_and_a_batch_header_are_refused(tmp_path):
    recs = _lines()
    nine = (9).to_bytes(4, "little")        # n_layer, at byte 28 of the hello
    _edit_hello(recs, RANK0, "out", 28, nine)
    _edit_hello(recs, RANK1, "in", 28, nine)
    with pytest.raises(ProfileError, match=r"its hello has n_layer 9, the peer's 8: ds4 "
                                           r"refuses the pair"):
        raw_ranks([_write(tmp_path, recs)], PROFILE.name, {})
    recs = _lines()
    for name, d in ((RANK0, "out"), (RANK1, "in")):
        k = _index(recs[name], lambda x, d=d: x["ev"] == "tcp" and x["dir"] == d
                   and bytes.fromhex(x["data"])[:4] == BATCH_MAGIC.to_bytes(4, "little"))
        data = bytearray.fromhex(recs[name][k]["data"])
        data[6:8] = (5).to_bytes(2, "little")
        recs[name][k]["data"] = data.hex()
    with pytest.raises(ProfileError, match="DS4_TP_DISABLE_VERIFY_WINDOW"):
        raw_ranks([_write(tmp_path / "b", recs)], PROFILE.name, {})
