"""Gate runs whose application calls were not recorded, validated against the gate spec.

A recording made without the program's help (refimpl/traces/raw.py) shows what the device and
the side channel saw: posts, completions polled, TCP items. It does not show the application's
calls (``gate(layer, gate, seq)``, a big gate of n chunks, a verify block) nor their results.
``InferredCalls`` walks such a run as ``GateValidator`` walks a device trace, with the calls
existential, as TLA+ trace validation treats variables the recording does not hold: whenever a
rank's spec state is back at ``idle`` (its last call has ended), the next recorded event must
be shown by some call the spec may make there followed by the rank's own steps. Each call the
spec enables for the rank is tried in turn (the workload's gate, its big gates and verify
blocks, a big gate of the size the recorded header announces when the rank leads the
workload, then the bad calls), and the first one after which the recorded event is the
observation of a spec step is taken; one whose explanation needs the peer to act first is
tried again once the peer has moved. A call's end is where its rank is back at ``idle``.
Accepting stays sound (every step is enabled and every recorded event equals its step's
observation); the search looks one recorded event past each call, so a call that explains that
event and fails later is not revisited.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl.traces.read import Event, RankTrace
from verbspec.refimpl.traces.validate_gate import (
    BAD_CALL,
    CALL_BIG,
    CALL_GATE,
    GateValidator,
    Violation,
    _Wait,
)
from verbspec.spec.actions import name_of
from verbspec.spec.gate.state import IDLE, GateState
from verbspec.spec.gate.steps import GateSpec

CALL_BLOCK = name_of(GateSpec.do_call_block)
# the calls in the order they are tried: the workload's, then the application's misuse
TRIED = (CALL_GATE, CALL_BIG, CALL_BLOCK, BAD_CALL)
# what each call counts as in the report
COUNTED = {CALL_GATE: "gates", CALL_BIG: "big_gates", CALL_BLOCK: "blocks"}


@dataclass(frozen=True)
class _Saved:
    """What a tried call may change, to undo it."""

    s: GateState
    moves: int
    counts: Counter[str]
    reaped: tuple[Counter[str], Counter[str]]
    polls_done: tuple[int, int]
    reordered: int
    in_call: tuple[bool, bool]
    call_name: tuple[str, str]
    expect_error: tuple[str | None, str | None]
    outside: int


class InferredCalls(GateValidator):
    """One pass over a pair of gate recordings without ``call`` and ``result`` lines."""

    @staticmethod
    def workload(ranks: tuple[RankTrace, RankTrace]) -> tuple[int, bool, bool]:
        """At most one call per recorded event (each call shows at least one), big gates when
        a rank wrote a header on the side channel (a big gate's, or a drain's), and verify
        blocks when a rank wrote a verify-block or batch header, or when the profile found
        them otherwise (a program whose verify block has no header of its own)."""
        calls = max(len(t.events) for t in ranks)
        written = {e.data["kind"] for t in ranks for e in t.events if e.ev == "tcp_write"}
        blocks = bool(written & {"block", "batch"}) or any(t.config.get("verify_blocks")
                                                           for t in ranks)
        return max(1, calls), "header" in written, blocks

    @staticmethod
    def big_sizes(ranks: tuple[RankTrace, RankTrace]) -> frozenset[int]:
        """The chunk counts the ranks' big-gate headers announce."""
        return frozenset(e.data["chunks"] for t in ranks for e in t.events
                         if e.ev == "tcp_write" and e.data["kind"] == "header")

    # ------------------------------------------------------------------ the walk
    def _advance(self, r: int) -> None:
        e = self.ranks[r].events[self.cursor[r]]
        if self._shown_pending(r, e):
            return
        if e.ev in ("call", "result"):
            raise Violation(r, e, f"a {e.ev} line: this run records its calls; validate it "
                                  f"without inferring them")
        if e.ev == "end":
            self._end(r, e)
            return
        if not self.s.ranks[r].alive:
            raise Violation(r, e, f"the rank failed ({self.s.ranks[r].error}); the spec takes "
                                  f"no step of it after that, but it recorded {e.ev}",
                            self._allowed(r))
        self._silent(r, e.ev)
        if self.s.ranks[r].phase == IDLE:
            self._call_ended(r, e)
            self._infer_call(r, e)
        else:
            self._explain(r, e)

    def _end(self, r: int, e: Event) -> None:
        """The rank's recording ends: its last call must have ended there (a rank that failed
        ends where it failed)."""
        if not self.s.ranks[r].alive:
            return
        self._silent(r, "result")
        if self.s.ranks[r].phase != IDLE:
            raise Violation(r, e, f"the recording ends inside a call: the spec's rank is in "
                                  f"phase {self.s.ranks[r].phase}, with steps left before the "
                                  f"call ends", self._allowed(r))
        self._call_ended(r, e)

    def _call_ended(self, r: int, e: Event) -> None:
        if not self.in_call[r]:
            return
        what = COUNTED.get(self.call_name[r])
        if what is not None and self.expect_error[r] is None:
            getattr(self.report, what)[r] += 1
        self.in_call[r] = False
        self.expect_error[r] = None
        self._invariants(r, e)

    # ------------------------------------------------------------------ calls, inferred
    def _candidates(self, r: int, e: Event) -> list[tuple[str, tuple[Any, ...]]]:
        out = [(name, args) for name in TRIED if name in self.table
               for args in self.table[name].enabled(self.s) if args[0] == r]
        rk = self.s.ranks[r]
        if e.ev == "tcp_write" and e.data["kind"] == "header" and rk.op >= len(self.s.script) \
                and rk.op < self.cfg.ops and (CALL_BIG, (r, e.data["chunks"])) not in out \
                and e.data["chunks"] > 0:
            # a size of the application's own beyond those the workload draws
            out.insert(0, (CALL_BIG, (r, e.data["chunks"])))
        return out

    def _infer_call(self, r: int, e: Event) -> None:
        """The call that makes ``e`` the rank's next observation, taken with it."""
        saved = self._save()
        waited: _Wait | None = None
        tried = []
        for name, args in self._candidates(r, e):
            drawn = self._drawn(name, args)
            try:
                obs = self._step(name, *args)
                self.in_call[r], self.call_name[r] = True, name
                self.expect_error[r] = obs.result or None
                if not drawn:
                    self.report.outside_workload += 1
                self._silent(r, e.ev)
                self._explain(r, e)
                return
            except Violation as v:
                tried.append(f"{name}{args[1:]}: {v.what}")
            except _Wait as w:
                waited = waited or w
            self._restore(saved)
        if waited is not None:
            raise waited
        raise Violation(r, e, f"no call the spec's rank may make here shows {e.ev}"
                              + (" (tried " + "; ".join(tried) + ")" if tried
                                 else ": it may make none"), self._calls(r))

    def _drawn(self, name: str, args: tuple[Any, ...]) -> bool:
        return args in list(self.table[name].enabled(self.s))

    def _save(self) -> _Saved:
        return _Saved(self.s, len(self.moves), self.counts.copy(),
                      (self.reaped[0].copy(), self.reaped[1].copy()),
                      (self.polls_done[0], self.polls_done[1]), self.reordered,
                      (self.in_call[0], self.in_call[1]),
                      (self.call_name[0], self.call_name[1]),
                      (self.expect_error[0], self.expect_error[1]),
                      self.report.outside_workload)

    def _restore(self, k: _Saved) -> None:
        self.s = k.s
        del self.moves[k.moves:]
        self.counts = k.counts.copy()
        self.reaped = [k.reaped[0].copy(), k.reaped[1].copy()]
        self.polls_done = list(k.polls_done)
        self.reordered = k.reordered
        self.in_call = list(k.in_call)
        self.call_name = list(k.call_name)
        self.expect_error = list(k.expect_error)
        self.report.outside_workload = k.outside


def strip_calls(t: RankTrace) -> RankTrace:
    """A device trace as a recording without the program's help would show it: no ``call``
    or ``result`` lines."""
    return RankTrace(t.path, t.rank, t.protocol, t.transport, t.engine, t.config,
                     [e for e in t.events if e.ev not in ("call", "result")], t.ended)

