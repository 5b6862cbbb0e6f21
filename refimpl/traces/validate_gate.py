"""Device traces of gate runs validated against the gate spec.

Given both ranks' device traces of one run (refimpl/transport/device_trace.py), ``validate_gate``
looks
for one execution of the spec's closed two-rank system (spec/gate/system.py) whose rank steps
show exactly what the ranks recorded, in each rank's recorded order: every recorded call,
post, completion polled, TCP item written or read, and result (with its exact error text) is
the observation of a spec step taken from the state reached, and the spec's own fabric steps
(``transmit``, ``deliver``) and the rank's silent steps (``consume``, ``drain_done``,
``big_begin``, ``big_window_done``; ``setup`` too in a trace without a ``connect`` call) are
inserted between them. A ``connect`` call is the spec's setup step, whose hello comparison
the call's recorded peer values must agree with; a run whose hello failed on the side
channel itself records no call. It is the conformance harness read backwards: there the spec
chooses the steps and an implementation is asked; here the implementation's record chooses
them and the spec is asked.

How the interleaving is found. Each rank's own steps are fixed by its phase and its next
recorded event; what is left to choose is when the other rank steps and when the fabric
moves. The ranks take turns one recorded event at a time. A poll of k completions is prepared
by fabric steps producing exactly its completions in order: a send completion by transmitting
the head of the rank's own send queue, a receive completion by delivering the head of the
peer's wire (transmitting the peer's next send first when the wire is empty). Fabric steps
happen as late as a poll needs them, so a message is never delivered before a poll needs it
and never dropped (a delivery only lands); a push into a CQ must be the entry that CQ's rank
polls next (its recorded polls, concatenated, are the order its CQ filled in), and may not
overfill a poll that came back short. A rank whose next event needs the peer first (a TCP
read of an item not yet written, a completion for a send not yet posted, a push its peer must
poll before) waits; when both ranks wait, the trace is rejected at the first waiting rank's
event. Accepting is sound by construction: every step taken is enabled in the spec and every
recorded event equals its step's observation. Rejecting is not complete: a run whose
explanation needs a message dropped on UC (which breaks the spec's ``no_silent_drop``
invariant anyway) or a CQ order the lazy fabric cannot produce is rejected.

The spec's invariants (all but ``no_deadlock``, which judges whole runs) are checked after
every call's result and at the end.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from verbspec.proofs.traces import save_counterexample, write_trace
from verbspec.refimpl.conformance.gate import CONFORMANCE
from verbspec.refimpl.traces.read import Event, RankTrace, TraceInputError, run_config
from verbspec.spec import fabric as fb
from verbspec.spec.actions import name_of
from verbspec.spec.gate.params import PARAMS, make_config
from verbspec.spec.gate.state import (
    IDLE,
    INIT,
    REAP_PHASES,
    TCP_READ_PHASES,
    CQEView,
    GateState,
    Observation,
)
from verbspec.spec.gate.steps import GateSpec, poll_batch
from verbspec.spec.gate.system import GateSystem
from verbspec.spec.gate.wire import TcpItem
from verbspec.spec.lts import Trace, TraceStep, start_trace
from verbspec.spec.params import ParamError, check_values
from verbspec.spec.values import evolve

# the spec's steps the validator names
TRANSMIT, DELIVER, REAP, CALL_GATE, BAD_CALL, CALL_BIG = (
    name_of(f) for f in (GateSpec.do_transmit, GateSpec.do_deliver, GateSpec.do_reap,
                         GateSpec.do_call_gate, GateSpec.do_bad_call, GateSpec.do_call_big))
DRAIN_DONE, TIMEOUT, PEER_GONE, CRASH, SETUP = (
    name_of(f) for f in (GateSpec.do_drain_done, GateSpec.do_timeout, GateSpec.do_peer_gone,
                         GateSpec.do_crash, GateSpec.do_setup))
# a verify block: an action of the system only where its configuration has verify_blocks=1
CALL_BLOCK = name_of(GateSpec.do_call_block)
# a batch gate of a verify block posts the next layer's receives and this layer's sends in one
# step, which a device records as two posts (receives first); its last layer's, sends only
BLOCK_SEND = name_of(GateSpec.do_block_send)
WORLD = {TRANSMIT, DELIVER, name_of(GateSpec.do_lose)}
CALLS = {CALL_GATE, BAD_CALL, CALL_BIG, CALL_BLOCK}
# what the workload parameters become: the run's own calls are the workload
WORKLOAD = ("ops", "big_gates", "verify_blocks", "faults")
SEND_REGIONS = {"stage_out": "stage"}   # the channel's send-side staging region, as the spec
STATUS_CODE = fb.WC_STATUS_CODE          # names it ("stage" both ways)
# the calls that may be spec ops
LIBRARY_OPS = ("exchange", "big_exchange", "drain", "verify_block")
ITF_MAX_STEPS = 5_000     # an ITF state holds both queue pairs: long prefixes are slow


class Violation(Exception):
    """A recorded step the spec does not take from the state reached."""

    def __init__(self, rank: int, event: Event | None, what: str, allowed: str = ""):
        line = f"line {event.line}" if event is not None else "end of trace"
        super().__init__(f"rank {rank} {line}: {what}")
        self.rank, self.event, self.what, self.allowed = rank, event, what, allowed


class _Wait(Exception):
    """The rank's next event needs the peer to act first."""


@dataclass
class Report:
    ok: bool
    protocol: str = "gate"
    recorded_steps: int = 0
    spec_steps: int = 0
    gates: list[int] = field(default_factory=lambda: [0, 0])
    big_gates: list[int] = field(default_factory=lambda: [0, 0])
    blocks: list[int] = field(default_factory=lambda: [0, 0])       # verify blocks
    drains: list[int] = field(default_factory=lambda: [0, 0])
    actions: dict[str, int] = field(default_factory=dict)
    outside_workload: int = 0      # big gates of sizes the closed system does not draw
    late_sends: int = 0            # polls whose send completions came after later receives
    detail: str = ""               # what a tagged run's validation counted
    seconds: float = 0.0
    rank: int | None = None
    line: int | None = None
    event: str | None = None
    message: str = ""
    allowed: str = ""
    itf: str | None = None
    itf_skipped: str = ""          # why no ITF trace was written

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def spec_config(ranks: tuple[RankTrace, RankTrace], calls: int, bigs: bool,
                blocks: bool = False, sizes: frozenset[int] = frozenset()) -> Any:
    """The spec's configuration for the run: the ``begin`` lines' (rank 1's own values apart),
    with the workload parameters set to the run's own (its calls, its big gates and, where
    they have one size beyond a drain's, that size, its verify blocks, faults allowed so a
    timeout or a gone peer is a step); TraceInputError when the spec cannot express it."""
    trace, config = ranks[0], run_config(*ranks)
    values = {k: v for k, v in config.items() if k in {p.name for p in PARAMS}}
    unknown = sorted(set(config) - set(values))
    if unknown:
        raise TraceInputError(f"{trace.path}: config has {', '.join(unknown)}, which the gate "
                              f"spec has no parameter for")
    values.update(ops=max(1, calls), big_gates=int(bigs), verify_blocks=int(blocks), faults=1)
    if len(sizes - {1}) == 1:
        values.update(big_chunks=max(sizes))
    try:
        return make_config(check_values(PARAMS, values))
    except ParamError as e:
        raise TraceInputError(f"{trace.path}: the run's configuration is outside what the "
                              f"gate spec can express: {e}") from None


def _event_kind(obs: Observation) -> str:
    if obs.recvs:
        return "post_recv"
    if obs.sends:
        return "post_send"
    if obs.tcp_out:
        return "tcp_write"
    if obs.tcp_in:
        return "tcp_read"
    if obs.polled:
        return "poll"
    return "result" if obs.result else ""


def _as_event(obs: Observation) -> dict[str, Any]:
    """A spec step's observation as the device-trace line it would be."""
    kind = _event_kind(obs)
    if kind == "post_recv":
        return {"ev": kind, "wrs": [[w.wr_id, w.buf, w.offset, w.length] for w in obs.recvs]}
    if kind == "post_send":
        return {"ev": kind, "wrs": [[w.wr_id, w.buf, w.offset, w.length, w.signaled]
                                    for w in obs.sends]}
    if kind in ("tcp_write", "tcp_read"):
        item = (obs.tcp_out or obs.tcp_in)[0]
        return {"ev": kind, "kind": item.kind, "value": item.value, "chunks": item.chunks,
                "depth": item.depth}
    if kind == "poll":
        return {"ev": kind, "cqes": [_cqe(c) for c in obs.polled]}
    if kind == "result":
        return {"ev": "result", "ok": False, "error": obs.result}
    return {"ev": "(nothing recorded)"}


def _cqe(c: CQEView | fb.CQE) -> list[Any]:
    return [c.opcode, c.wr_id, STATUS_CODE[c.status], c.byte_len]


def _matches(e: Event, obs: Observation) -> bool:
    d = e.data
    if e.ev == "post_recv":
        return _same_wrs(d["wrs"], [[w.wr_id, w.buf, w.offset, w.length] for w in obs.recvs])
    if e.ev == "post_send":
        got = [[w[0], SEND_REGIONS.get(w[1], w[1]), *w[2:]] for w in d["wrs"]]
        return _same_wrs(got, [[w.wr_id, w.buf, w.offset, w.length, w.signaled]
                               for w in obs.sends])
    if e.ev in ("tcp_write", "tcp_read"):
        item = TcpItem(d["kind"], d["value"], d["chunks"], d["depth"])
        return (obs.tcp_out if e.ev == "tcp_write" else obs.tcp_in) == (item,)
    if e.ev == "poll":
        return [list(c) for c in d["cqes"]] == [_cqe(c) for c in obs.polled]
    return False


def _difference(e: Event, obs: Observation) -> str:
    """How a recorded post differs from the spec's: the counts and the first work request
    that differs, rather than every work request of a long chain; any other event whole."""
    want = _as_event(obs)
    if e.ev not in ("post_recv", "post_send"):
        return f"shows {json.dumps(want, separators=(',', ':'))}"
    got, spec = e.data["wrs"], want["wrs"]
    if e.ev == "post_send":
        got = [[w[0], SEND_REGIONS.get(w[1], w[1]), *w[2:]] for w in got]
    k = next((i for i, (g, w) in enumerate(zip(got, spec, strict=False))
              if not _same_wrs([g], [w])), min(len(got), len(spec)))
    first = (f"; the first that differs, #{k + 1}: recorded {json.dumps(got[k])}, the spec's "
             f"{json.dumps(spec[k])}" if k < min(len(got), len(spec)) else "")
    return f"posts {len(spec)} work requests; the rank posted {len(got)}{first}"


def _same_wrs(got: list[list[Any]], want: list[list[Any]]) -> bool:
    """Recorded work requests against the spec's; a region and offset recorded as None (a
    zero-length request with no memory to address) are unobserved and match any."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(x is None and i in (1, 2) or x == y
                                 for i, (x, y) in enumerate(zip(g, w, strict=True)))
        for g, w in zip(got, want, strict=True))


@dataclass
class _Stream:
    """A rank's completions in the order its polls returned them, by opcode (the order of
    its sends' completions and, apart, of its receives'), each with the poll it came in."""

    by_op: dict[str, list[tuple[tuple[Any, ...], int]]]
    polls: list[tuple[list[tuple[Any, ...]], int | None]]     # (entries, max asked or None)

    @classmethod
    def of(cls, events: list[Event]) -> _Stream:
        s = cls({}, [])
        for e in events:
            if e.ev == "poll":
                for c in e.data["cqes"]:
                    s.by_op.setdefault(c[0], []).append((tuple(c), len(s.polls)))
                s.polls.append(([tuple(c) for c in e.data["cqes"]], e.data.get("max")))
        return s

    def full(self, k: int) -> bool:
        got, asked = self.polls[k]
        return asked is not None and len(got) == asked


def _by_op(cqes: list[tuple[Any, ...]]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for c in cqes:
        out.setdefault(c[0], []).append(c)
    return out


class GateValidator:
    """One pass over a pair of gate device traces."""

    def __init__(self, ranks: tuple[RankTrace, RankTrace], late_sends: bool = True) -> None:
        self.ranks = ranks
        self.late_sends = late_sends
        self.reordered = 0
        self.kinds: dict[str, str] = {}
        self.seen: dict[str, list[Any]] = {}    # phase -> own steps found enabled in it
        self.cq_counts: list[tuple[Any, Counter[str]]] = [((), Counter()), ((), Counter())]
        self.cfg = spec_config(ranks, *self.workload(ranks), sizes=self.big_sizes(ranks))
        self.system = GateSystem(self.cfg, ranks[0].variants)
        self.spec = self.system.spec
        self.table = {a.name: a for a in self.system.actions}
        self.own = [a for a in self.system.actions
                    if not a.fault and a.name not in WORLD | CALLS]
        self.s: GateState = self.system.initial()
        self.moves: list[tuple[str, tuple]] = []
        self.counts: Counter[str] = Counter()
        self.cursor = [0, 0]
        self.streams = [_Stream.of(t.events) for t in ranks]
        self.reaped: list[Counter[str]] = [Counter(), Counter()]   # polled, by opcode
        self.polls_done = [0, 0]
        self.in_call = [False, False]
        self.call_name = ["", ""]
        self.expect_error: list[str | None] = [None, None]
        self.report = Report(ok=False)
        # the sends of a step that posted receives and sends, not yet shown by the rank's trace
        self.pending: list[Observation | None] = [None, None]

    @staticmethod
    def workload(ranks: tuple[RankTrace, RankTrace]) -> tuple[int, bool, bool]:
        """The run's calls per rank (the most either made), whether any was a big gate or a
        drain, and whether any was a verify block: the recorded calls."""
        names = [[e.data["name"] for e in t.events
                  if e.ev == "call" and e.data["name"] in LIBRARY_OPS] for t in ranks]
        every = names[0] + names[1]
        return (max(len(names[0]), len(names[1])),
                any(n in ("big_exchange", "drain") for n in every), "verify_block" in every)

    @staticmethod
    def big_sizes(ranks: tuple[RankTrace, RankTrace]) -> frozenset[int]:
        """The chunk counts of the run's big gates, as its calls give them."""
        return frozenset(e.data["args"].get("chunks") for t in ranks for e in t.events
                         if e.ev == "call" and e.data["name"] == "big_exchange"
                         and isinstance(e.data["args"].get("chunks"), int))

    # ------------------------------------------------------------------ spec steps
    def _step(self, name: str, *args: Any) -> Observation:
        post, obs = self.table[name].apply(self.s, *args)
        self.s = post
        self.moves.append((name, args))
        self.counts[name] += 1
        return obs

    def _enabled(self, name: str, args: tuple) -> bool:
        return args in list(self.table[name].enabled(self.s))

    def _own_options(self, r: int) -> list[tuple[str, Observation]]:
        """The rank's own enabled steps with what each would show, without taking them."""
        out = []
        for a in self.own:
            if (r,) in list(a.enabled(self.s)):
                out.append((a.name, a.apply(self.s, r)[1]))
        return out

    def _own_enabled(self, r: int, seen_only: bool = False) -> list[str]:
        """The rank's own enabled steps, by name; with ``seen_only``, only among the steps
        found enabled in the rank's phase before (fast, and possibly incomplete)."""
        phase = self.s.ranks[r].phase
        seen = self.seen.setdefault(phase, [])
        if seen_only:
            return [a.name for a in seen if (r,) in list(a.enabled(self.s))]
        out = [a for a in self.own if (r,) in list(a.enabled(self.s))]
        seen += [a for a in out if a not in seen]
        return [a.name for a in out]

    def _kind(self, name: str, r: int) -> str:
        """What the step ``name`` records (a post, a TCP item, a poll, or nothing): each own
        step records one kind whatever its arguments (a block's batch gate apart: receives
        and sends, or sends only); learnt from its first application."""
        if name == BLOCK_SEND:
            return "?"
        kind = self.kinds.get(name)
        if kind is None:
            obs = self.table[name].apply(self.s, r)[1]
            kind = _event_kind(obs) if not obs.result else "?"
            if kind != "?":
                self.kinds[name] = kind
        return kind

    def _allowed(self, r: int) -> str:
        opts = self._own_options(r)
        phase = self.s.ranks[r].phase
        if not opts:
            return f"rank {r} is in phase {phase}; no step of its own is enabled"
        return f"rank {r} in phase {phase} may: " + "; ".join(
            f"{n} -> {json.dumps(_as_event(o), separators=(',', ':'))}" for n, o in opts)

    # ------------------------------------------------------------------ the walk
    def run(self) -> Report:
        t0 = time.perf_counter()
        rep = self.report
        try:
            self._walk()
            self._invariants(0, None)
            rep.ok = True
        except Violation as v:
            rep.rank, rep.message, rep.allowed = v.rank, str(v), v.allowed
            if v.event is not None:
                rep.line, rep.event = v.event.line, v.event.text()
        rep.recorded_steps = sum(self.cursor)
        rep.spec_steps = len(self.moves)
        rep.actions = dict(sorted(self.counts.items()))
        rep.seconds = round(time.perf_counter() - t0, 3)
        return rep

    def _walk(self) -> None:
        waits: list[str | None] = [None, None]
        while any(self.cursor[r] < len(self.ranks[r].events) for r in (0, 1)):
            moved = False
            for r in (0, 1):
                if self.cursor[r] >= len(self.ranks[r].events):
                    waits[r] = None
                    continue
                try:
                    self._advance(r)
                except _Wait as w:
                    waits[r] = str(w)
                    continue
                waits[r] = None
                self.cursor[r] += 1
                moved = True
            if not moved:
                r = 0 if waits[0] is not None else 1
                e = self.ranks[r].events[self.cursor[r]]
                other = waits[1 - r]
                raise Violation(r, e, f"{e.ev} cannot be explained: {waits[r]}"
                                + (f"; and rank {1 - r} waits too: {other}" if other else ""),
                                self._allowed(r))

    def _advance(self, r: int) -> None:
        e = self.ranks[r].events[self.cursor[r]]
        if self._shown_pending(r, e):
            return
        rk = self.s.ranks[r]
        if e.ev == "end":
            return
        if not rk.alive and e.ev not in ("call", "result"):
            raise Violation(r, e, f"the rank failed ({rk.error}); the spec takes no step of it "
                                  f"after that, but it recorded {e.ev}", self._allowed(r))
        if e.ev == "call":
            self._call(r, e)
        elif e.ev == "result":
            self._result(r, e)
        else:
            self._explain(r, e)

    def _explain(self, r: int, e: Event) -> None:
        """A post, a poll or a TCP item: the rank's own step that shows it."""
        if e.ev == "poll":
            self._poll(r, e)
        elif e.ev == "post_read":
            raise Violation(r, e, "the gate protocol posts no RDMA READ", self._allowed(r))
        else:
            self._visible(r, e)

    # ------------------------------------------------------------------ calls and results
    def _call(self, r: int, e: Event) -> None:
        if self.in_call[r]:
            raise Violation(r, e, "a call began before the previous one ended",
                            self._allowed(r))
        self.in_call[r] = True
        name, args = e.data["name"], e.data["args"]
        self.call_name[r] = name
        if name == "connect":
            self._connect(r, e, args)
            return
        if not self.s.ranks[r].alive or name == "close":
            # a failed channel refuses every call, and close takes no protocol step
            self.expect_error[r] = None
            return
        self._silent(r, "call")
        rk = self.s.ranks[r]
        if name == "exchange":
            try:
                step = (r, int(args["layer"]), int(args["gate"]), int(args["seq"]))
            except (KeyError, TypeError, ValueError):
                raise Violation(r, e, "an exchange call without integer layer, gate and seq"
                                ) from None
            for act in (CALL_GATE, BAD_CALL):
                if self._enabled(act, step):
                    obs = self._step(act, *step)
                    break
            else:
                raise Violation(r, e, f"the spec takes no gate call {step[1:]} here",
                                self._calls(r))
        elif name == "verify_block":
            obs = self._block_call(r, e, args)
        elif name == "drain" and not rk.window_active:
            obs = Observation(r)        # nothing armed: nothing to do
        elif name in ("big_exchange", "drain"):
            # a drain travels in a one-chunk big gate (its header is the rendezvous)
            chunks = args.get("chunks") if name == "big_exchange" else 1
            if not isinstance(chunks, int) or chunks < 1:
                raise Violation(r, e, "a big_exchange call without a chunk count")
            if self._enabled(CALL_BIG, (r, chunks)):
                obs = self._step(CALL_BIG, r, chunks)
            elif (rk.phase == IDLE and rk.op >= len(self.s.script)
                  and rk.op < self.cfg.ops):
                # the application chooses a big gate's size; the closed system draws three
                self.report.outside_workload += 1
                obs = self._step(CALL_BIG, r, chunks)
            else:
                raise Violation(r, e, f"the spec takes no big gate of {chunks} chunks here",
                                self._calls(r))
        else:
            raise Violation(r, e, f"the gate library has no call {name!r}")
        self.expect_error[r] = obs.result or None

    def _block_call(self, r: int, e: Event, args: dict[str, Any]) -> Observation:
        """A verify block: the spec's call_block, of the rank's own configured layers and
        rows (the spec's block takes its size from the configuration)."""
        c = self.spec.cfgs[r]
        got = (args.get("layers"), args.get("rows"))
        if got != (c.block_layers, c.block_rows):
            raise Violation(r, e, f"a verify block of {got[0]} layers x {got[1]} rows; the "
                                  f"spec's rank {r} makes blocks of {c.block_layers} x "
                                  f"{c.block_rows} (its begin line's block_layers, block_rows)")
        if CALL_BLOCK not in self.table or not self._enabled(CALL_BLOCK, (r,)):
            raise Violation(r, e, "the spec takes no verify block here", self._calls(r))
        return self._step(CALL_BLOCK, r)

    def _connect(self, r: int, e: Event, args: dict[str, Any]) -> None:
        """The channel's connect call: the spec's setup step, which compares the peer's hello (the
        one the rank recorded receiving must be the peer's configuration)."""
        if self.s.ranks[r].phase != INIT:
            raise Violation(r, e, "a connect call after the rank was set up", self._allowed(r))
        peer = self.spec.cfgs[1 - r].hello
        got = (args.get("peer_window"), args.get("peer_max_msg"))
        if got != (peer.window, peer.max_msg):
            raise Violation(r, e, f"the rank recorded its peer's hello as window {got[0]}, "
                                  f"message cap {got[1]}; rank {1 - r} began with window "
                                  f"{peer.window}, message cap {peer.max_msg}")
        self.expect_error[r] = self._step(SETUP, r).result or None

    def _calls(self, r: int) -> str:
        found = [f"{n}{args[1:]}" for n in (CALL_GATE, CALL_BIG, CALL_BLOCK, BAD_CALL)
                 if n in self.table
                 for args in self.table[n].enabled(self.s) if args[0] == r]
        return (f"rank {r} in phase {self.s.ranks[r].phase} may: {', '.join(found)}"
                if found else self._allowed(r))

    def _result(self, r: int, e: Event) -> None:
        if not self.in_call[r]:
            raise Violation(r, e, "a result with no call in progress", self._allowed(r))
        ok, text = e.data["ok"], e.data.get("error", "")
        want = self.expect_error[r]
        rk = self.s.ranks[r]
        if self.call_name[r] == "close":
            pass        # closing takes no protocol step, failed channel or not
        elif want is not None or not rk.alive:
            # the call failed in a spec step (or the channel had already failed)
            if ok or (want is not None and text != want):
                raise Violation(r, e, f"the spec's result is the error {want!r}" if want
                                else f"the rank had failed ({rk.error}): a call must fail",
                                "")
        elif ok:
            self._silent(r, "result")
            rk = self.s.ranks[r]
            if rk.phase != IDLE:
                raise Violation(r, e, f"the call ended, but the spec's rank is in phase "
                                      f"{rk.phase}: it has steps left before the call ends",
                                self._allowed(r))
            if self.call_name[r] == "exchange":
                self.report.gates[r] += 1
            elif self.call_name[r] == "big_exchange":
                self.report.big_gates[r] += 1
            elif self.call_name[r] == "verify_block":
                self.report.blocks[r] += 1
        else:
            self._fault_result(r, e, text)
        self.in_call[r] = False
        self.expect_error[r] = None
        self._invariants(r, e)

    def _fault_result(self, r: int, e: Event, text: str) -> None:
        """A failed result no step of the rank's own produced: a wait that timed out or
        found the peer gone."""
        self._silent(r, "result")
        for name in self._own_enabled(r):
            if self.table[name].apply(self.s, r)[1].result == text:
                self._step(name, r)
                return
        peer_done = self.cursor[1 - r] >= len(self.ranks[1 - r].events)
        if peer_done and self.s.ranks[1 - r].alive and self._enabled(CRASH, (1 - r,)):
            trial = self.table[CRASH].apply(self.s, 1 - r)[0]
            if (r,) in list(self.table[PEER_GONE].enabled(trial)) and \
                    self.table[PEER_GONE].apply(trial, r)[1].result == text:
                self._step(CRASH, 1 - r)
                self._step(PEER_GONE, r)
                return
        for act in (TIMEOUT, PEER_GONE):
            if self._enabled(act, (r,)):
                post, obs = self.table[act].apply(self.s, r)
                if obs.result == text:
                    self._step(act, r)
                    return
        if self.s.ranks[1 - r].alive and not peer_done:
            # the peer may yet fail or leave (a gone peer is what a wait sees)
            raise _Wait(f"no spec step ends the call with the error {text!r} while rank "
                        f"{1 - r} is still running")
        raise Violation(r, e, f"no spec step ends the call with the error {text!r}",
                        self._allowed(r))

    def _invariants(self, r: int, e: Event | None) -> None:
        for inv in self.system.invariants:
            if inv.name == "no_deadlock":
                continue
            msg = inv.check(self.s)
            if msg is not None:
                raise Violation(r, e, f"the spec's invariant {inv.name} broke: {msg}")

    # ------------------------------------------------------------------ the rank's own steps
    def _silent(self, r: int, kind: str) -> None:
        """Take the rank's steps that record nothing (setup, consume, drain_done, big_begin,
        big_window_done) while the recorded event ``kind`` is not one of its options."""
        while self.s.ranks[r].alive:
            if any(self._kind(n, r) in (kind, "?") for n in self._own_enabled(r, True)):
                return
            names = self._own_enabled(r)
            kinds = [self._kind(n, r) for n in names]
            if kind in kinds or "?" in kinds:
                return
            quiet = [n for n, k in zip(names, kinds, strict=True) if not k]
            if not quiet:
                return
            obs = self._step(quiet[0], r)
            if obs.result:
                self.expect_error[r] = obs.result
                return

    def _visible(self, r: int, e: Event) -> None:
        """A post or a TCP item: the rank's own step that shows exactly it."""
        self._silent(r, e.ev)
        if e.ev == "tcp_read" and self.s.ranks[r].phase in TCP_READ_PHASES \
                and not self.s.fabric.tcp[1 - r]:
            raise _Wait(f"rank {r} reads an item its peer has not written yet")
        quick = self._own_enabled(r, True)
        rest = (n for n in self._own_enabled(r) if n not in quick)
        for name in chain(quick, rest):
            if self._kind(name, r) not in (e.ev, "?"):
                continue
            obs = self.table[name].apply(self.s, r)[1]
            if _event_kind(obs) == e.ev:
                if not _matches(e, obs):
                    raise Violation(r, e, f"the spec's {name} {_difference(e, obs)}",
                                    self._allowed(r))
                obs = self._step(name, r)
                self.expect_error[r] = obs.result or self.expect_error[r]
                if e.ev == "post_recv" and obs.sends:
                    self.pending[r] = obs
                return
        raise Violation(r, e, f"the spec's rank does not {e.ev} here", self._allowed(r))

    def _shown_pending(self, r: int, e: Event) -> bool:
        """Whether ``e`` is the post of the sends the rank's last step posted after its
        receives (a verify block's batch gate); a rank with such sends pending must record
        them next."""
        obs = self.pending[r]
        if obs is None:
            return False
        if e.ev != "post_send" or not _matches(e, obs):
            shown = {"ev": "post_send", "wrs": [[w.wr_id, w.buf, w.offset, w.length,
                                                  w.signaled] for w in obs.sends]}
            raise Violation(r, e, f"the spec's step that posted the receives before it also "
                                  f"posted {json.dumps(shown, separators=(',', ':'))}, which "
                                  f"the rank must record next")
        self.pending[r] = None
        return True

    # ------------------------------------------------------------------ polls and the fabric
    def _poll(self, r: int, e: Event) -> None:
        self._silent(r, "poll")
        rk = self.s.ranks[r]
        if rk.phase not in REAP_PHASES:
            raise Violation(r, e, f"the spec's rank polls only while it waits; it is in "
                                  f"phase {rk.phase}", self._allowed(r))
        n = poll_batch(self.cfg, rk.phase)
        asked = e.data.get("max")
        if asked is not None and asked != n:
            raise Violation(r, e, f"the rank polled for {asked} completions; the spec's poll "
                                  f"in phase {rk.phase} takes {n}", self._allowed(r))
        want = [tuple(c) for c in e.data["cqes"]]
        k = len(want)
        needed: Counter[str] = Counter()
        for c in want:
            needed[c[0]] += 1
            while self._pushed(r, c[0]) < self.reaped[r][c[0]] + needed[c[0]]:
                self._produce(r, e, c)
        cq = [tuple(_cqe(c)) for c in self.s.fabric.qps[r].cq]
        if cq[:k] != want:
            mine = _by_op(cq)
            if not self.late_sends or any(mine.get(op, [])[:len(got)] != got
                                          for op, got in _by_op(want).items()):
                raise Violation(r, e, f"the spec's completion queue holds "
                                      f"{[list(c) for c in cq[:k]]}", self._allowed(r))
            self._reorder(r, want)
            cq = [tuple(_cqe(c)) for c in self.s.fabric.qps[r].cq]
        later: tuple[fb.CQE, ...] = ()
        if k < n and len(cq) > k:
            later = self._acked_later(r, k)
            if not later:
                raise Violation(r, e, f"the poll returned {k} completions, but the spec's "
                                      f"completion queue holds {len(cq)}: {list(cq[k])} was "
                                      f"there too", self._allowed(r))
        obs = self._step(REAP, r)
        if later:
            self._put_back(r, later)
        for c in want:
            self.reaped[r][c[0]] += 1
        self.polls_done[r] += 1
        self.expect_error[r] = obs.result or self.expect_error[r]

    def _produce(self, r: int, e: Event, want: tuple[Any, ...]) -> None:
        """Fabric steps that put ``want`` next in rank r's completion queue."""
        f = self.s.fabric
        opcode = want[0]
        if opcode == "send" and f.qps[r].qp_type == "uc":
            sq = f.qps[r].sq
            if not sq:
                raise Violation(r, e, f"a send completion {list(want)}, but every send posted "
                                      f"has completed", self._allowed(r))
            head = sq[0]
            if fb.completes(f, head.signaled):
                got = ("send", head.wr_id, STATUS_CODE[fb.ST_OK], head.length)
                if got != want:
                    raise Violation(r, e, f"the next send to complete is {list(got)} (UC "
                                          f"completes sends in the order posted), not "
                                          f"{list(want)}", self._allowed(r))
            self._transmit(r, e, check=False)
            return
        if opcode not in ("recv", "send"):
            raise Violation(r, e, f"a {opcode} completion: the gate protocol has sends and "
                                  f"receives only")
        # a receive (or, on RC, a send acknowledged): the head of the wire lands
        src = 1 - r if opcode == "recv" else r
        if not f.wire[src]:
            if not f.qps[src].sq:
                raise _Wait(f"rank {r}'s completion {list(want)} needs a send rank {src} has "
                            f"not posted yet")
            self._transmit(src, e, check=src != r)
            if not self.s.fabric.wire[src]:
                return
        self._deliver(src, e, want, r)

    def _reorder(self, r: int, want: list[tuple[Any, ...]]) -> None:
        """The CQ as the poll saw it: send completions that entered after the receive
        completions polled with them (a UC send completes after its message left, and a
        reply can land first), each kind kept in its own order."""
        qp = self.s.fabric.qps[r]
        left = list(qp.cq)
        head = []
        for c in want:
            i = next(i for i, x in enumerate(left) if tuple(_cqe(x)) == c)
            head.append(left.pop(i))
        fabric = fb.set_qp(self.s.fabric, r, evolve(qp, cq=tuple(head + left)))
        self.s = evolve(self.s, fabric=fabric)
        self.reordered += 1

    def _acked_later(self, r: int, k: int) -> tuple[fb.CQE, ...]:
        """A short poll on RC that left out send completions the spec's CQ holds past its k
        entries: the spec completes an RC send as its message lands, the device once the
        acknowledgement is back, after the peer may have polled the message (the late-sends
        relaxation). Those completions, taken out of the CQ until the reap is done; none
        where the relaxation does not apply."""
        qp = self.s.fabric.qps[r]
        rest = qp.cq[k:]
        if not (self.late_sends and qp.qp_type == "rc"
                and all(c.opcode == "send" and c.status == fb.ST_OK for c in rest)):
            return ()
        fabric = fb.set_qp(self.s.fabric, r, evolve(qp, cq=qp.cq[:k]))
        self.s = evolve(self.s, fabric=fabric)
        self.reordered += 1
        return rest

    def _put_back(self, r: int, later: tuple[fb.CQE, ...]) -> None:
        """The send completions ``_acked_later`` took out, back at the head of the CQ: the
        next polls show them."""
        qp = self.s.fabric.qps[r]
        fabric = fb.set_qp(self.s.fabric, r, evolve(qp, cq=later + qp.cq))
        self.s = evolve(self.s, fabric=fabric)

    def _pushed(self, q: int, opcode: str) -> int:
        """Completions of ``opcode`` that have entered rank q's CQ so far."""
        cq = self.s.fabric.qps[q].cq
        held, counted = self.cq_counts[q]
        if held is not cq:
            counted = Counter(c.opcode for c in cq)
            self.cq_counts[q] = (cq, counted)
        return self.reaped[q][opcode] + counted[opcode]

    def _may_push(self, q: int, got: tuple[Any, ...]) -> str | None:
        """Why a completion cannot enter rank q's CQ now, or None: it must be the next of its
        opcode that q polls, and may not land beyond a poll of q's that came back short."""
        lst = self.streams[q].by_op.get(got[0], [])
        i = self._pushed(q, got[0])
        if i >= len(lst):
            return None     # q never polls it
        cqe, poll = lst[i]
        if cqe != got:
            return f"rank {q} polls {list(cqe)} next, not {list(got)}"
        for k in range(self.polls_done[q], poll):
            if not self.streams[q].full(k):
                return f"rank {q} must poll first (its poll {k + 1} came back short)"
        return None

    def _transmit(self, src: int, e: Event, check: bool) -> None:
        f = self.s.fabric
        head = f.qps[src].sq[0]
        if f.qps[src].qp_type == "uc" and fb.completes(f, head.signaled) and check:
            got = ("send", head.wr_id, STATUS_CODE[fb.ST_OK], head.length)
            why = self._may_push(src, got)
            if why is not None:
                raise _Wait(why)

        if not self._enabled(TRANSMIT, (src,)):
            raise Violation(src, e, f"rank {src}'s send queue cannot transmit (its queue pair "
                                    f"is {f.qps[src].state})")
        self._step(TRANSMIT, src)

    def _deliver(self, src: int, e: Event, want: tuple[Any, ...], r: int) -> None:
        f = self.s.fabric
        dst = 1 - src
        msg = f.wire[src][0]
        rq = f.qps[dst].rq
        if not rq:
            raise Violation(r, e, f"{list(want)}: rank {dst} has no receive posted when the "
                                  f"next message from rank {src} arrives; the spec drops it "
                                  f"(UC) and completes no receive", self._allowed(r))
        wr = rq[0]
        status = fb.ST_LEN if msg.length > wr.length else fb.ST_OK
        got = ("recv", wr.wr_id, STATUS_CODE[status], 0 if status != fb.ST_OK else msg.length)
        if dst == r and got != want:
            raise Violation(r, e, f"the next message from rank {src} lands as {list(got)}, "
                                  f"not {list(want)}", self._allowed(r))
        if dst != r:
            why = self._may_push(dst, got)
            if why is not None:
                raise _Wait(why)

        self._step(DELIVER, src)

    # ------------------------------------------------------------------ the ITF prefix
    def spec_run(self, message: str | None = None) -> Trace:
        """The spec steps taken, as an ITF trace: the run that explains a valid recording, or
        (with the ``message`` of a violation) the steps up to the rejected one."""
        trace = start_trace(self.system)
        s = self.system.initial()
        for name, args in self.moves:
            a = self.table[name]
            s, obs = a.apply(s, *args)
            trace.steps.append(TraceStep(name, dict(zip(a.params, args, strict=True)), s, obs))
        if message is not None:
            trace.violation, trace.message = CONFORMANCE, message
        return trace


def validate_gate(ranks: tuple[RankTrace, RankTrace], trace_dir: Path | None = None,
                  itf_max_steps: int = ITF_MAX_STEPS, late_sends: bool = True,
                  validator: type[GateValidator] = GateValidator,
                  run_itf: Path | None = None) -> Report:
    """Validate a gate run's two device traces; on a violation with ``trace_dir``, the spec
    steps up to it written there as an ITF trace, and for a valid run with ``run_itf``, the
    spec's run that explains it written there (each when at most ``itf_max_steps``).
    ``late_sends``: a poll may show a UC send's completion after receive completions that
    the spec's fabric would have put behind it. ``validator``: how the traces are walked (a
    subclass infers calls a recording does not hold)."""
    v = validator(ranks, late_sends)
    rep = v.run()
    rep.late_sends = v.reordered
    rep.drains = [sum(1 for n, a in v.moves if n == DRAIN_DONE and a[0] == r) for r in (0, 1)]
    wanted = trace_dir if not rep.ok else run_itf
    if wanted is None:
        return rep
    if len(v.moves) > itf_max_steps:
        rep.itf_skipped = (f"{len(v.moves)} spec steps, above the {itf_max_steps} an ITF "
                           f"trace is written for")
    elif rep.ok:
        rep.itf = str(write_trace(v.spec_run(), Path(wanted)))
    else:
        rep.itf = save_counterexample(v.spec_run(rep.message), wanted, "devtrace")
    return rep


def _valid(rep: Report) -> str:
    """A valid run's line: its counts, and how fast it was validated."""
    per = lambda xs: "/".join(map(str, xs))     # noqa: E731
    if rep.protocol != "gate":
        return f"valid: {rep.recorded_steps} recorded steps checked; {rep.detail}; " \
               f"{rep.seconds:.2f} s"
    extra = (f"; {rep.late_sends} polls showed a send's completion after later receives"
             if rep.late_sends else "")
    counts = (f"gates {per(rep.gates)}, big gates {per(rep.big_gates)}, verify blocks "
              f"{per(rep.blocks)}, drains {per(rep.drains)} (rank 0/rank 1)")
    rate = (f" ({rep.recorded_steps / rep.seconds:,.0f} recorded steps/s)"
            if rep.seconds > 0 else "")
    return (f"valid: {rep.recorded_steps} recorded steps explained by {rep.spec_steps} spec "
            f"steps; {counts}{extra}; {rep.seconds:.2f} s{rate}")


def render(rep: Report) -> str:
    """A report as the command line prints it."""
    if rep.ok:
        out = [_valid(rep)]
        if rep.itf:
            out.append(f"  the spec's run: {rep.itf} (verbspec trace draws it)")
        elif rep.itf_skipped:
            out.append(f"  no ITF trace: {rep.itf_skipped} (--itf-max-steps)")
        return "\n".join(out)
    out = [f"invalid: {rep.message}"]
    if rep.event:
        out.append(f"  recorded: {rep.event}")
    if rep.allowed:
        out.append(f"  the spec instead: {rep.allowed}")
    if rep.itf:
        out.append(f"  spec steps up to it: {rep.itf} (verbspec replay / verbspec trace show "
                   f"it)")
    elif rep.itf_skipped:
        out.append(f"  no ITF trace: {rep.itf_skipped} (--itf-max-steps)")
    out.append(f"  {rep.recorded_steps} recorded steps validated before it, "
               f"{rep.spec_steps} spec steps")
    return "\n".join(out)
