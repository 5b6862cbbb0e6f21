"""`verbspec check` on the gate protocol: the base protocol holds, every variant is refuted with
a replayable ITF trace, unsafe parameters are violations, malformed ones are input errors."""

from __future__ import annotations

import json

import pytest

from verbspec.proofs.traces import read_moves
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate.system import INVARIANTS, VARIANTS

# what each variant may break (the first invariant a reduced trace shows)
BREAKS = {
    "no-barrier": {"no_silent_drop"},
    "tag-every-chunk": {"watermark_sound"},
    "signal-last-only": {"send_accounting"},
    "stray-send-completion": {"send_accounting"},
    "stray-warm-receive": {"watermark_sound", "no_deadlock"},
    "no-seq-check": {"chunk_alignment", "watermark_sound", "gate_order"},
    "depth-mismatch": {"no_silent_drop", "no_deadlock"},
    "drain-without-rendezvous": {"no_silent_drop", "no_deadlock", "watermark_sound"},
    "untagged-in-big-window": {"watermark_sound"},
    "block-drain-without-rendezvous": {"no_silent_drop", "no_deadlock", "watermark_sound"},
    "unexchanged-config": {"chunk_alignment", "no_silent_drop"},
}
# what a variant needs beyond the defaults to act at all
NEEDS = {"block-drain-without-rendezvous": ("--param", "verify_blocks=1"),
         "unexchanged-config": ("--param", "rank1_max_msg=24576")}


def check(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", "--protocol", "gate", "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_every_variant_has_an_expectation():
    assert set(BREAKS) == {v.name for v in VARIANTS}


# the two whose runs go through a big gate of 65 chunks or a drain then a big gate take a
# minute or more each: the slow tier's
SLOW = {"depth-mismatch", "drain-without-rendezvous"}


@pytest.mark.parametrize("variant", [
    pytest.param(v, marks=[pytest.mark.slow] if v in SLOW else []) for v in sorted(BREAKS)])
def test_exploration_refutes_each_variant_with_a_replayable_trace(variant, tmp_path, capsys):
    code, doc = check(capsys, "--method", "explore", "--variant", variant,
                      *NEEDS.get(variant, ()), "--trace-dir", str(tmp_path))
    assert code == 1
    bad = [r for r in doc["results"] if r["verdict"] == "violated"]
    assert len(bad) == 1 and bad[0]["invariant"] in BREAKS[variant]
    meta, moves = read_moves(bad[0]["trace"])
    assert meta["violation"] == bad[0]["invariant"] and meta["variants"] == (variant,)
    assert f"trace of {len(moves)} steps" == bad[0]["bound"]
    # the trace replays against the spec to the same violation
    assert main(["replay", bad[0]["trace"]]) == 1
    assert f"{bad[0]['invariant']} violated" in capsys.readouterr().out


def test_no_barrier_shrinks_to_a_handful_of_steps(tmp_path, capsys):
    code, doc = check(capsys, "--method", "explore", "--variant", "no-barrier",
                      "--trace-dir", str(tmp_path))
    (bad,) = [r for r in doc["results"] if r["verdict"] == "violated"]
    _, moves = read_moves(bad["trace"])
    # setup, call_gate, arm_post, gate_send, transmit, deliver: the peer was never set up
    assert len(moves) <= 7


# points the envelope's proof covers (fault-free runs, another window, slot schedule, receive
# depth, one-chunk vectors: tests/cli/test_envelope.py) are not explored again here; RC and
# signalled completions are outside it
@pytest.mark.parametrize("params", [
    (), ("qp_type=rc",), ("unsignaled_completions=0",),
])
def test_base_protocol_holds_under_exploration(params, tmp_path, capsys):
    flags = [f for p in params for f in ("--param", p)]
    code, doc = check(capsys, "--method", "explore", "--examples", "30", *flags,
                      "--trace-dir", str(tmp_path))
    assert [r["invariant"] for r in doc["results"]] == list(INVARIANTS)
    assert code == 0, [r for r in doc["results"] if r["verdict"] != "held"]
    assert all(r["verdict"] == "held" and "examples" in r["bound"] for r in doc["results"])


# two of the envelope's conditions; each condition's shortest violation just outside it is a
# row of the envelope's table (tests/cli/test_envelope.py)
@pytest.mark.parametrize(("params", "invariant"), [
    (("rq_depth=31",), "queue_bounds"),                 # 16 two-chunk gates need 32 receives
    (("chain_max=1",), "queue_bounds"),
])
def test_unsafe_parameters_are_violations_not_input_errors(params, invariant, tmp_path, capsys):
    flags = [f for p in params for f in ("--param", p)]
    code, doc = check(capsys, "--method", "explore", *flags, "--trace-dir", str(tmp_path))
    assert code == 1
    assert [r["invariant"] for r in doc["results"] if r["verdict"] == "violated"] == [invariant]


@pytest.mark.parametrize(("param", "message"), [
    ("vec_bytes=40000", "gate vector 40000 bytes exceeds twice the driver's 16384 message limit"),
    # rank 1's own message cap is held to the vector as rank 0's is
    ("rank1_max_msg=8192", "parameter rank1_max_msg: gate vector 24576 bytes exceeds twice the "
                           "driver's 8192 message limit"),
    ("window=0", "parameter window: 0 is below the minimum 1"),
    ("timeout_ms=0", "parameter timeout_ms: 0 is below the minimum 1"),
    ("timeout_ms=60001", "parameter timeout_ms: 60001 is above the maximum 60000"),
    ("slot_mask=7", "parameter slot_mask: popcount 3 is not gates_per_token 86"),
    ("nope=1", "unknown parameter 'nope'"),
    ("window=many", "parameter window: 'many' is not an integer"),
    ("qp_type=ud", "parameter qp_type: 'ud' is not one of uc, rc"),
    ("window", "expected NAME=VALUE"),
])
def test_malformed_parameters_exit_3_naming_the_parameter(param, message, capsys):
    assert main(["check", "--protocol", "gate", "--param", param]) == 3
    assert message in capsys.readouterr().err


def test_mask_bits_must_fit_the_slab(capsys):
    args = ["check", "--protocol", "gate", "--param", "slot_mask=0x4000000000000000",
            "--param", "gates_per_token=1", "--param", "n_slots=40"]
    assert main(args) == 3
    assert "parameter slot_mask: bit 62 is at or above n_slots 40" in capsys.readouterr().err


def test_unknown_variant_exits_3(capsys):
    assert main(["check", "--protocol", "gate", "--variant", "no-such"]) == 3
    assert "unknown variant 'no-such'" in capsys.readouterr().err


def test_variants_lists_each_with_what_it_changes_and_breaks(capsys):
    assert main(["variants", "--protocol", "gate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(VARIANTS)
    for v, line in zip(VARIANTS, lines, strict=True):
        assert v.name in line and "changes:" in line and "breaks:" in line


@pytest.mark.parametrize("body", ["{", "[]", '{"#meta": {}, "states": []}',
                                  '{"#meta": {"protocol": "gate"}, "states": '
                                  '[{"#meta": {"index": 0}, "action": "init", "args": {}}, '
                                  '{"#meta": {"index": 1}, "action": "warp", "args": {}}]}'])
def test_malformed_traces_exit_3(body, tmp_path, capsys):
    f = tmp_path / "bad.itf.json"
    f.write_text(body)
    assert main(["replay", str(f)]) == 3
    assert capsys.readouterr().err.startswith("verbspec replay: ")
