"""Verify blocks in device traces (refimpl/traces/validate_gate.py): a ``verify_block`` call is
the spec's call_block step, and a batch gate's one step that posts the next layer's receives
and this layer's sends is recorded as two posts, receives first. The traces here are a run of
the spec itself written as each rank would record it (decode gates, a verify block, more
gates), over UC and RC, the fabric moving last or first; edited copies are rejected where they
were edited."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from verbspec.refimpl.traces.inferred_calls import InferredCalls, strip_calls
from verbspec.refimpl.traces.read import Event, RankTrace
from verbspec.refimpl.traces.validate_gate import (
    CALL_BLOCK,
    CALL_GATE,
    CALLS,
    WORLD,
    _as_event,
    render,
    validate_gate,
)
from verbspec.spec.gate.params import PARAMS, make_config
from verbspec.spec.gate.state import IDLE, Observation
from verbspec.spec.gate.steps import poll_batch
from verbspec.spec.gate.system import GateSystem
from verbspec.spec.params import check_values

GATES, MORE = 20, 3
# two-chunk vectors, two layers of two rows, the spec's defaults otherwise
VALUES = {"vec_bytes": 24_576, "block_layers": 2, "block_rows": 2, "unsignaled_completions": 0,
          "faults": 1, "wire_loss": 0}


def _script(cfg: Any) -> list[tuple[str, Any]]:
    """Each rank's calls: decode gates, a verify block, more gates."""
    gates = [("exchange", seq) for seq in range(1, GATES + MORE + 1)]
    return [*gates[:GATES], ("verify_block", None), *gates[GATES:]]


def _events(obs: Observation, cfg: Any, phase: str) -> list[dict[str, Any]]:
    """A step's observation as the device-trace lines a rank writes: a step that posts
    receives and sends is two posts, receives first; a poll says how many it asked for."""
    if obs.recvs and obs.sends:
        recv = {"ev": "post_recv", "wrs": [[w.wr_id, w.buf, w.offset, w.length]
                                           for w in obs.recvs]}
        return [recv, {"ev": "post_send", "wrs": [[w.wr_id, w.buf, w.offset, w.length,
                                                   w.signaled] for w in obs.sends]}]
    line = _as_event(obs)
    if line["ev"] == "poll":
        line["max"] = poll_batch(cfg, phase)
    return [] if line["ev"] in ("(nothing recorded)", "result") else [line]


class _Run:
    """The spec's closed system driven through the script: each rank's own steps first, the
    fabric when neither rank can step (with ``fabric_first``, the fabric first: a poll then
    takes what has arrived meanwhile); every rank step written as its trace lines."""

    def __init__(self, qp_type: str, fabric_first: bool = False) -> None:
        self.fabric_first = fabric_first
        values = {**VALUES, "qp_type": qp_type, "verify_blocks": 1,
                  "ops": GATES + MORE + 1, "big_gates": 0}
        self.cfg = make_config(check_values(PARAMS, values))
        self.system = GateSystem(self.cfg)
        self.table = {a.name: a for a in self.system.actions}
        self.own = [a for a in self.system.actions
                    if not a.fault and a.name not in WORLD | CALLS]
        self.s = self.system.initial()
        self.lines: list[list[dict[str, Any]]] = [[], []]
        self.next_op = [0, 0]
        self.in_call = [False, False]
        self.script = _script(self.cfg)

    def _call(self, r: int) -> bool:
        """The rank's next call, when it is back in idle with calls left."""
        if self.s.ranks[r].phase != IDLE or self.next_op[r] >= len(self.script):
            return False
        if self.in_call[r]:
            self.lines[r].append({"ev": "result", "ok": True})
            self.in_call[r] = False
        name, seq = self.script[self.next_op[r]]
        self.next_op[r] += 1
        self.in_call[r] = True
        if name == "verify_block":
            args: dict[str, int] = {"layers": self.cfg.block_layers,
                                    "rows": self.cfg.block_rows}
            self.s = self.table[CALL_BLOCK].apply(self.s, r)[0]
        else:
            slot = self.cfg.slot(seq)
            args = {"layer": slot // 2, "gate": slot % 2, "seq": seq}
            self.s = self.table[CALL_GATE].apply(self.s, r, slot // 2, slot % 2, seq)[0]
        self.lines[r].append({"ev": "call", "name": name, "args": args})
        return True

    def _own_step(self, r: int) -> bool:
        for a in self.own:
            if (r,) in list(a.enabled(self.s)):
                phase = self.s.ranks[r].phase
                self.s, obs = a.apply(self.s, r)
                assert not obs.result, obs.result
                self.lines[r] += _events(obs, self.cfg, phase)
                return True
        return False

    def _fabric_step(self) -> bool:
        for a in sorted(self.system.actions, key=lambda a: a.name):
            if a.name in WORLD and not a.fault:
                for args in a.enabled(self.s):
                    self.s = a.apply(self.s, *args)[0]
                    return True
        return False

    def _progress(self) -> bool:
        if self.fabric_first and self._fabric_step():
            return True
        return any(self._call(r) or self._own_step(r) for r in (0, 1)) or self._fabric_step()

    def run(self) -> tuple[RankTrace, RankTrace]:
        while self._progress():
            pass
        for r in (0, 1):
            assert self.next_op[r] == len(self.script) and self.s.ranks[r].phase == IDLE
            self.lines[r] += [{"ev": "result", "ok": True}, {"ev": "end"}]
        config = {p.name: getattr(self.cfg, p.name) for p in PARAMS}
        return tuple(RankTrace(f"rank{r}.jsonl", r, "gate", "sim", "python", config,
                               [Event(i + 2, x["ev"], x) for i, x in enumerate(self.lines[r])],
                               True) for r in (0, 1))


@pytest.fixture(scope="module", params=[("uc", False), ("rc", False), ("rc", True)],
                ids=["uc", "rc", "rc-fabric-first"])
def block_run(request) -> tuple[RankTrace, RankTrace]:
    return _Run(*request.param).run()


def test_a_run_with_a_verify_block_is_validated_and_counted(block_run):
    rep = validate_gate(block_run)
    assert rep.ok, rep.message
    assert rep.blocks == [1, 1] and rep.gates == [GATES + MORE] * 2
    assert rep.actions["call_block"] == 2 and rep.actions["block_end"] == 2
    assert "verify blocks 1/1" in render(rep)
    # layer 0's receives, then layer 1's receives and layer 0's sends, then layer 1's sends
    posts = [e.data["wrs"][0][1] for e in block_run[0].events if e.ev.startswith("post")
             and e.data["wrs"][0][1] in ("blk", "bout")]
    assert posts == ["blk", "blk", "bout", "bout"]


def test_the_calls_inferred_find_the_verify_block(block_run):
    rep = validate_gate(tuple(strip_calls(t) for t in block_run), validator=InferredCalls)
    assert rep.ok, rep.message
    assert rep.blocks == [1, 1] and rep.gates == [GATES + MORE] * 2


def _edited(ranks, rank: int, edit) -> tuple[RankTrace, RankTrace]:
    events = list(ranks[rank].events)
    edit(events)
    out = list(ranks)
    out[rank] = replace(ranks[rank], events=events)
    return out[0], out[1]


def _batch_posts(events: list[Event]) -> int:
    """The index of the first post_send of a verify block's rows."""
    return next(i for i, e in enumerate(events)
                if e.ev == "post_send" and e.data["wrs"][0][1] == "bout")


def test_the_sends_of_a_batch_gate_missing_after_its_receives_are_rejected(block_run):
    ranks = _edited(block_run, 0, lambda ev: ev.pop(_batch_posts(ev)))
    rep = validate_gate(ranks)
    assert not rep.ok and rep.rank == 0
    assert "also posted" in rep.message and "bout" in rep.message


def test_a_row_sent_from_the_wrong_offset_is_rejected(block_run):
    def edit(ev: list[Event]) -> None:
        i = _batch_posts(ev)
        wrs = [list(w) for w in ev[i].data["wrs"]]
        wrs[0][2] += 8
        ev[i] = Event(ev[i].line, ev[i].ev, {**ev[i].data, "wrs": wrs})

    rep = validate_gate(_edited(block_run, 1, edit))
    assert not rep.ok and (rep.rank, rep.line) == (1, next(
        e.line for e in block_run[1].events if e.ev == "post_send"
        and e.data["wrs"][0][1] == "bout"))


def test_a_verify_block_of_another_size_than_the_configuration_s_is_rejected(block_run):
    def edit(ev: list[Event]) -> None:
        i = next(i for i, e in enumerate(ev) if e.ev == "call"
                 and e.data["name"] == "verify_block")
        ev[i] = Event(ev[i].line, "call", {**ev[i].data, "args": {"layers": 3, "rows": 2}})

    rep = validate_gate(_edited(block_run, 0, edit))
    assert not rep.ok and rep.rank == 0
    assert "a verify block of 3 layers x 2 rows; the spec's rank 0 makes blocks of 2 x 2" \
        in rep.message

