"""Gate runs validated with their calls inferred: device traces of the simulated fabric with
their ``call`` and ``result`` lines removed, as a recording made without the program's help
shows a run (refimpl/traces/inferred_calls.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from traces.test_device_trace import SMALL, _gates_big_gates, _no_barrier, _record

from verbspec.refimpl.cli import main as cli
from verbspec.refimpl.library.gate_channel import gate_config
from verbspec.refimpl.library.sim_pair import run_pair
from verbspec.refimpl.traces.inferred_calls import InferredCalls, strip_calls
from verbspec.refimpl.traces.read import RankTrace, read_pair
from verbspec.refimpl.traces.validate_gate import validate_gate
from verbspec.refimpl.transport import device_trace


def _stripped(d: Path) -> tuple[RankTrace, RankTrace]:
    a, b = read_pair([d])
    return strip_calls(a), strip_calls(b)


def _inferred(ranks: tuple[RankTrace, RankTrace]):
    return validate_gate(ranks, validator=InferredCalls)


@pytest.fixture(scope="module")
def run40(tmp_path_factory) -> Path:
    """40 decode gates, a drain, a big gate of 200 chunks (four windows), 10 more gates."""
    d = tmp_path_factory.mktemp("run40")
    out = _record(d, _gates_big_gates, (40, 40), gate_config(SMALL))
    assert [o.error for o in out] == ["", ""]
    return d / device_trace.GATE


def test_the_calls_inferred_explain_the_run_as_its_recorded_calls_do(run40):
    recorded = validate_gate(read_pair([run40]))
    inferred = _inferred(_stripped(run40))
    assert recorded.ok and inferred.ok, inferred.message
    # the same spec steps: every call found is the one the program made
    assert inferred.spec_steps == recorded.spec_steps
    assert inferred.actions == recorded.actions
    assert inferred.gates == recorded.gates == [50, 50]
    # a drain call is a one-chunk big gate to an observer: both count as big gates
    assert recorded.big_gates == [1, 1] and inferred.big_gates == [2, 2]
    assert inferred.drains == [1, 1]


def test_a_run_without_its_barrier_is_rejected_at_its_first_send(tmp_path, monkeypatch):
    monkeypatch.setenv(device_trace.TRACE_ENV, str(tmp_path / "nb"))
    run_pair(_no_barrier, (5, 5))
    rep = _inferred(_stripped(tmp_path / "nb" / device_trace.GATE))
    assert not rep.ok
    assert json.loads(rep.event)["ev"] == "post_send"
    assert "barrier_write" in rep.allowed


def _edited(run: Path, rank: int, edit) -> tuple[RankTrace, RankTrace]:
    ranks = list(_stripped(run))
    events = list(ranks[rank].events)
    edit(events)
    t = ranks[rank]
    ranks[rank] = RankTrace(t.path, t.rank, t.protocol, t.transport, t.engine, t.config,
                            events, t.ended)
    return ranks[0], ranks[1]


def test_an_event_removed_or_two_swapped_is_rejected_where_the_run_breaks(run40):
    def remove_send(events):
        i = next(k for k, e in enumerate(events) if e.ev == "post_send" and k > 20)
        del events[i]

    def swap(events):
        i = next(k for k, e in enumerate(events)
                 if e.ev == "post_recv" and k > 20 and events[k + 1].ev == "post_send")
        events[i], events[i + 1] = events[i + 1], events[i]

    def drop_barrier(events):
        i = next(k for k, e in enumerate(events) if e.ev == "tcp_write")
        del events[i]

    for edit in (remove_send, swap, drop_barrier):
        rep = _inferred(_edited(run40, 1, edit))
        assert not rep.ok, edit.__name__
        assert rep.rank is not None and rep.line is not None, edit.__name__


def test_no_number_changed_by_one_is_accepted(run40):
    """Soundness, sampled: one number of one observed step (a wr_id, an offset, a length, a
    status, a poll's size, a side-channel item) changed by one is never a valid run, calls
    inferred or not."""
    rng = random.Random(5)
    base = _stripped(run40)
    for n in range(40):
        rank = rng.randrange(2)
        ranks = json.loads(json.dumps([[e.data for e in t.events] for t in base]))
        lines = ranks[rank]
        i = rng.choice([k for k, x in enumerate(lines) if x["ev"] != "end"])
        x = lines[i]
        if "wrs" in x or "cqes" in x:
            item = rng.choice(x["wrs" if "wrs" in x else "cqes"])
            j = rng.choice([k for k, v in enumerate(item)
                            if isinstance(v, int) and not isinstance(v, bool)])
            item[j] += 1
        else:
            key = rng.choice(sorted(k for k, v in x.items()
                                    if isinstance(v, int) and not isinstance(v, bool)))
            x[key] += 1
        rep = _inferred(_edited(run40, rank, lambda ev, x=x, i=i: ev.__setitem__(
            i, type(ev[i])(ev[i].line, ev[i].ev, x))))
        assert not rep.ok, (n, rank, i, x)


def test_the_run_that_explains_a_recording_is_written_and_replays_on_the_spec(run40, tmp_path,
                                                                              capsys):
    """The explanation is a run of the closed system itself: the recording's own big-gate
    size joins the workload (``big_chunks``), so every step, the calls inferred included, is
    enabled where it is taken."""
    out = tmp_path / "run.itf.json"
    rep = validate_gate(_stripped(run40), validator=InferredCalls, run_itf=out)
    assert rep.ok and rep.outside_workload == 0 and rep.itf == str(out)
    assert cli.main(["replay", str(out)]) == 0
    assert f"replayed {rep.spec_steps} steps" in capsys.readouterr().out
