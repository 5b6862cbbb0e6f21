"""What the transports share without a device: the pair a run takes (sim by default, the verbs
pair's refusals), the variant engines a channel can be given, and the device-trace hook that is
ignored where the recorder is not there. The pyverbs transport itself runs on a device in
tests/rxe/test_rxe_pyverbs.py."""

from __future__ import annotations

import pytest

from verbspec.refimpl.bindings import engine_choice as engines
from verbspec.refimpl.cli.demo import vector
from verbspec.refimpl.engines.gate_variants import NoBarrier
from verbspec.refimpl.library.gate_channel import GateChannel, gate_config
from verbspec.refimpl.library.sim_pair import SimPair, run_ranks
from verbspec.refimpl.transport.device_trace import TRACE_ENV
from verbspec.refimpl.transport.verbs_pair import VerbsPair
from verbspec.spec.gate.variants import NO_BARRIER

CFG = gate_config({"window": 4, "timeout_ms": 2000})


def three_gates(ch: GateChannel, rank: int, _arg: object) -> tuple[int, str]:
    """Three gates; the wrong payloads and the engine's class."""
    wrong = 0
    for seq in (1, 2, 3):
        slot = ch.cfg.slot(seq)
        got = ch.exchange(slot // 2, slot % 2, vector(rank, seq, ch.vector_bytes))
        wrong += got != vector(1 - rank, seq, ch.vector_bytes)
    return wrong, type(ch.engine).__name__


def test_the_pair_is_a_parameter_and_the_trace_variable_records_each_rank(
        monkeypatch, tmp_path):
    monkeypatch.setenv(TRACE_ENV, str(tmp_path))
    out = run_ranks(CFG, three_gates, (None, None), engine="python", pair=SimPair,
                    timeout_s=60)
    assert [o.error for o in out] == ["", ""]
    assert [o.result[0] for o in out] == [0, 0] and [o.dropped for o in out] == [0, 0]
    assert sorted(f.name for f in (tmp_path / "gate").iterdir()) == ["rank0.jsonl",
                                                                      "rank1.jsonl"]


def engine_name(ch: GateChannel, rank: int, _arg: object) -> str:
    return type(ch.engine).__name__


def test_a_channel_runs_the_variant_engine_it_is_given():
    out = run_ranks(CFG, engine_name, (None, None), engine="python", variant=NO_BARRIER.name,
                    timeout_s=60)
    assert [o.result for o in out] == [NoBarrier.__name__] * 2
    out = run_ranks(CFG, engine_name, (None, None), engine="python", timeout_s=60)
    assert [o.result for o in out] == ["GateEngine"] * 2


def test_variant_engines_are_python_only_and_named():
    with pytest.raises(engines.EngineUnavailable, match="the variant engines are the Python"):
        engines.gate_engine("native", CFG, CFG.rq_depth, variant=NO_BARRIER.name)
    with pytest.raises(engines.EngineUnavailable, match="no engine behaves as variant 'nope'"):
        engines.gate_engine("python", CFG, CFG.rq_depth, variant="nope")


@pytest.mark.parametrize("devices", [("rxe0",), ("rxe0", ""), ("rxe0", None)])
def test_the_verbs_pair_refuses_anything_but_two_device_names(devices):
    with pytest.raises(ValueError, match="expected two device names"):
        VerbsPair(devices)


def test_the_verbs_pair_factory_puts_both_ranks_on_one_device_by_default():
    pair = VerbsPair.factory("rxe_lo")()
    try:
        assert pair.devices == ("rxe_lo", "rxe_lo") and pair.transport == "pyverbs"
    finally:
        pair.close()
