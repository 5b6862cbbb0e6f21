"""Render an ITF trace as a message-sequence diagram (SVG, or SVG in a minimal HTML page).

Gate traces get six lanes: rank 0, rank 0's receive queue and CQ, the wire in each direction,
rank 1's receive queue and CQ, rank 1. Time flows downward, one row per step. RDMA messages are
arrows from the sender's ``transmit`` to the ``deliver`` (or ``lose``) that takes them off the
wire; the wire is FIFO per direction, so the k-th message put on wire r is the k-th taken off it.
TCP items (barrier bytes, big-gate headers) are dashed arrows between the rank lanes, matched the
same way. Tag-matching traces get one lane per sender and one for the receiver; any other shape
falls back to a table of steps, so a trace that replays can always be looked at.

Standard library only: the output is plain SVG 1.1 text.
"""

from __future__ import annotations

import sys
import textwrap
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from verbspec.proofs.traces import load_json
from verbspec.spec.actions import name_of
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.itf import TraceFormatError, decode_states
from verbspec.spec.tagmatch.system import TagMatchSystem

EXIT_OK, EXIT_INPUT = 0, 3

WIDTH = 1100
FONT = 10                   # px; monospace glyphs are ~0.6 em wide
CHAR_W = FONT * 0.6
LINE_H = 12
ROW_PAD = 4
TOP = 78                    # room for the title and lane headers
STEP_COL = 36               # the step-number column

# colours: one per wire direction so crossing arrows stay tellable apart
INK, MUTED, ERR = "#1a1a1a", "#6b6b6b", "#c0111f"
DIR_COLOUR = ("#1f5fa8", "#1d7a3a")
TCP_COLOUR = "#8a4fb0"
BAND, STRIPE = "#f6c9cc", "#f4f5f7"

# Rank fields whose changes are annotated, in the order they are shown.
KEY_FIELDS = ("phase", "recv_done", "window_active", "send_outstanding")
GHOST_FIELDS = ("misaligned", "clobbered", "stale", "long_chains", "order")


# ---------------------------------------------------------------- the drawing model
@dataclass
class Line:
    text: str
    cls: str = "act"        # act | note | err | q  (CSS classes in the SVG)


@dataclass
class Lane:
    key: str
    title: str
    x: float
    anchor: str             # start | middle | end: where text sits relative to the lane line
    chars: int              # wrap width in characters
    style: str = "rank"     # rank | queue | wire | plain


@dataclass
class Row:
    index: int
    action: str
    cells: dict[str, list[Line]] = field(default_factory=dict)

    def add(self, lane: str, text: str, cls: str = "act") -> None:
        self.cells.setdefault(lane, []).append(Line(text, cls))


@dataclass
class Arrow:
    src_lane: str
    src_row: int
    dst_lane: str
    dst_row: int | None         # None: still in flight when the trace ends
    colour: str
    dashed: bool = False
    end: str = "head"           # head | drop | lost
    label: str = ""


@dataclass
class Diagram:
    title: list[str]
    lanes: list[Lane]
    rows: list[Row]
    arrows: list[Arrow]
    footer: list[Line]
    violated: bool
    legend: str = ""


# ---------------------------------------------------------------- validation
def validate(doc: Any) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Check the ITF structure and decode it: a list of (action, args, state vars) per state.

    Raises TraceFormatError naming the JSON path of the first problem."""
    return decode_states(doc)[1]


# ---------------------------------------------------------------- small formatting helpers
def fmt_args(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={short(v, 24)}" for k, v in args.items())


def call(action: str, args: Mapping[str, Any]) -> str:
    return f"{action}({fmt_args(args)})"


def short(value: Any, limit: int = 80) -> str:
    """A compact one-line rendering of a decoded ITF value."""
    text = _compact(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_compact(x)}" for k, x in v.items()) + "}"
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(_compact(x) for x in v)) + "}"
    if isinstance(v, tuple):
        return "[" + ", ".join(_compact(x) for x in v) + "]"
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def wrap(text: str, chars: int) -> list[str]:
    return textwrap.wrap(text, max(chars, 8), break_long_words=True,
                         break_on_hyphens=False) or [""]


def _get(obj: Any, *path: Any) -> Any:
    """Follow keys/indexes; None when the shape differs (callers fall back, never crash)."""
    for p in path:
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def _len(obj: Any) -> int:
    return len(obj) if isinstance(obj, tuple | list) else 0


def _protocol_module(protocol: str) -> Any:
    try:
        from verbspec.spec import protocols
        return protocols.load(protocol)
    except Exception:       # an unknown or half-written protocol module: render without it
        return None


def _title(meta: Mapping[str, Any], nsteps: int) -> list[str]:
    protocol = str(meta.get("protocol", "?"))
    variants = meta.get("variants") or ()
    head = f"{protocol} trace, {nsteps} steps"
    head += f", variants: {', '.join(map(str, variants))}" if variants else ", base protocol"
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    module = _protocol_module(protocol)
    defaults = {p.name: p.default for p in getattr(module, "PARAMS", ())}
    # only what differs from the defaults: the full set is in the trace file
    changed = [f"{k}={v}" for k, v in params.items() if k in defaults and defaults[k] != v]
    tail = ("params: " + " ".join(changed) + " (others default)") if changed else \
        "params: defaults"
    return [head, tail]


def _footer(meta: Mapping[str, Any]) -> list[Line]:
    inv = meta.get("violation")
    if not inv:
        return [Line("no invariant violated in this trace", "note")]
    lines = [Line(f"violated invariant: {inv}", "errb")]
    lines += [Line(t, "err") for t in wrap(str(meta.get("message") or ""), 170)]
    docs = getattr(_protocol_module(str(meta.get("protocol"))), "INVARIANT_DOCS", {})
    if isinstance(docs, dict) and inv in docs:
        lines += [Line(t, "note") for t in wrap(f"{inv}: {docs[inv]}", 170)]
    return lines


# ---------------------------------------------------------------- gate traces
# Queue counts sit on the outer side of their line, so arrowheads landing on it stay visible.
GATE_LANES = (
    Lane("r0", "rank 0", 290, "end", 40, "rank"),
    Lane("q0", "rq/cq 0", 392, "end", 16, "queue"),
    Lane("w0", "wire 0→1", 471, "middle", 20, "wire"),
    Lane("w1", "wire 1→0", 629, "middle", 20, "wire"),
    Lane("q1", "rq/cq 1", 708, "start", 16, "queue"),
    Lane("r1", "rank 1", 810, "start", 46, "rank"),
)
TRANSMIT, DELIVER, LOSE = (name_of(GateSpec.do_transmit), name_of(GateSpec.do_deliver),
                           name_of(GateSpec.do_lose))
WIRE_ACTIONS = frozenset({TRANSMIT, DELIVER, LOSE})
# the steps a tag-matching sender takes itself: the rest are the receiver's
SENDER_ACTIONS = frozenset({name_of(TagMatchSystem.do_send), name_of(TagMatchSystem.do_fin_arrive)})


def payload_name(p: Any) -> str:
    kind = _get(p, "kind")
    seq, chunk = _get(p, "seq"), _get(p, "chunk")
    if kind == "gate":
        return f"gate {seq} ch {chunk}"
    if kind == "dummy":
        return f"dummy {chunk}"
    if kind == "big":
        return f"big {chunk} ch {seq}"
    return str(kind or "message")


def _rank_changes(old: Any, new: Any) -> list[str]:
    out = []
    for f in KEY_FIELDS:
        a, b = _get(old, f), _get(new, f)
        if a == b or b is None:
            continue
        if f == "phase":
            out.append(f"→ {b}")
        elif f == "window_active":
            out.append("window on" if b else "window off")
        else:
            out.append(f"{f} {a}→{b}")
    return out


def _tcp_item(item: Any) -> str:
    if _get(item, "kind") == "byte":
        v = _get(item, "value")
        return f"byte 0x{v:02x}" if isinstance(v, int) else "byte"
    return (f"header big {_get(item, 'value')}, {_get(item, 'chunks')} chunks, "
            f"depth {_get(item, 'depth')}")


def _queue_text(qp: Any) -> str:
    return f"rq {_len(_get(qp, 'rq'))} / cq {_len(_get(qp, 'cq'))}"


def _deliver_outcome(prev: Any, cur: Any, src: int) -> str:
    """What the fabric did with the wire head, read from the state change (the observation's
    log is not part of the trace)."""
    dst = 1 - src
    if _len(_get(cur, "ghost", "drops")) > _len(_get(prev, "ghost", "drops")):
        return "dropped"
    rq_before = _len(_get(prev, "fabric", "qps", dst, "rq"))
    rq_after = _len(_get(cur, "fabric", "qps", dst, "rq"))
    if rq_after < rq_before:
        cq = _get(cur, "fabric", "qps", dst, "cq") or ()
        status = _get(cq[-1], "status") if cq else None
        if status not in (None, "success"):
            return str(status)
        if _len(_get(cur, "ghost", "misaligned")) > _len(_get(prev, "ghost", "misaligned")):
            return "landed, misaligned"
        return "landed"
    if _get(cur, "fabric", "qps", src, "state") == "error" != \
            _get(prev, "fabric", "qps", src, "state"):
        return "RNR: sender QP to error"
    return "receiver dead"


def _actor_lane(action: str, args: Mapping[str, Any]) -> str | None:
    if action in WIRE_ACTIONS:
        r = args.get("src", args.get("rank"))
        return f"w{r}" if r in (0, 1) else None
    r = args.get("rank")
    return f"r{r}" if r in (0, 1) else None


class _GateBuilder:
    """Walks the states once, filling rows and matching FIFO traffic into arrows."""

    def __init__(self, steps: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]):
        self.steps = steps
        self.rows: list[Row] = []
        self.arrows: list[Arrow] = []
        # pending arrows per direction: the wire and TCP are FIFO channels
        self.wire: tuple[deque[Arrow], deque[Arrow]] = (deque(), deque())
        self.tcp: tuple[deque[Arrow], deque[Arrow]] = (deque(), deque())

    def build(self) -> tuple[list[Row], list[Arrow]]:
        prev: Any = None
        for i, (action, args, state) in enumerate(self.steps):
            row = Row(i, action)
            self._action(row, action, args, prev, state)
            if prev is not None:
                self._changes(row, args, prev, state)
            self._queues(row, prev, state)
            self.rows.append(row)
            prev = state
        for q in (*self.wire, *self.tcp):
            self.arrows.extend(q)       # still in flight at the end: dst_row stays None
        return self.rows, self.arrows

    def _action(self, row: Row, action: str, args: dict[str, Any], prev: Any, cur: Any) -> None:
        lane = _actor_lane(action, args)
        if prev is None:        # state 0 has no action of its own
            row.add("r0", "initial state", "note")
            row.add("r1", "initial state", "note")
            return
        if action == TRANSMIT and lane:
            self._transmit(row, lane, int(lane[1]), prev, cur)
        elif action in (DELIVER, LOSE) and lane:
            self._take(row, lane, int(lane[1]), action, prev, cur)
        else:
            # the lane already names the rank: leave it out of the arguments shown
            shown = {k: v for k, v in args.items() if not (lane and k == "rank")}
            row.add(lane or "r0", call(action, shown))
        self._tcp(row, prev, cur)

    def _transmit(self, row: Row, lane: str, r: int, prev: Any, cur: Any) -> None:
        wire = _get(cur, "fabric", "wire", r) or ()
        name = payload_name(_get(wire[-1], "payload")) if wire else "?"
        row.add(lane, f"transmit {name}")
        arrow = Arrow(f"r{r}", row.index, f"q{1 - r}", None, DIR_COLOUR[r])
        self.wire[r].append(arrow)

    def _take(self, row: Row, lane: str, src: int, action: str, prev: Any, cur: Any) -> None:
        head = _get(prev, "fabric", "wire", src, 0)
        name = payload_name(_get(head, "payload"))
        arrow = self.wire[src].popleft() if self.wire[src] else None
        if action == LOSE:
            row.add(lane, f"lost {name}", "err")
            outcome = "lost"
        else:
            outcome = _deliver_outcome(prev, cur, src)
            row.add(lane, f"deliver {name}")
            row.add(lane, outcome, "act" if outcome == "landed" else "err")
        if arrow is None:       # the message was on the wire before the trace began
            return
        arrow.dst_row = row.index
        if outcome == "lost":
            arrow.dst_lane, arrow.end = lane, "lost"
        elif outcome == "dropped":
            arrow.end = "drop"
        self.arrows.append(arrow)

    def _tcp(self, row: Row, prev: Any, cur: Any) -> None:
        for w in (0, 1):
            before = _get(prev, "fabric", "tcp", w) or ()
            after = _get(cur, "fabric", "tcp", w) or ()
            if len(after) > len(before):
                row.add(f"r{w}", f"TCP out: {_tcp_item(after[-1])}", "note")
                self.tcp[w].append(Arrow(f"r{w}", row.index, f"r{1 - w}", None, TCP_COLOUR,
                                         dashed=True))
            elif len(after) < len(before):
                row.add(f"r{1 - w}", f"TCP in: {_tcp_item(before[0])}", "note")
                if self.tcp[w]:
                    arrow = self.tcp[w].popleft()
                    arrow.dst_row = row.index
                    self.arrows.append(arrow)

    def _changes(self, row: Row, args: dict[str, Any], prev: Any, cur: Any) -> None:
        for r in (0, 1):
            old, new = _get(prev, "ranks", r), _get(cur, "ranks", r)
            changes = _rank_changes(old, new)
            if changes:
                row.add(f"r{r}", ", ".join(changes), "note")
            err = _get(new, "error")
            if err and err != _get(old, "error"):
                row.add(f"r{r}", f"error: {err}", "err")
        # new ghost records: the events invariants forbid, said where they happened
        who = args.get("rank")
        if "src" in args:
            who = 1 - args["src"] if args["src"] in (0, 1) else None
        for g in GHOST_FIELDS:
            old, new = _get(prev, "ghost", g) or (), _get(cur, "ghost", g) or ()
            for sentence in tuple(new)[len(old):]:
                row.add(f"r{who if who in (0, 1) else 0}", f"{g}: {sentence}", "err")

    def _queues(self, row: Row, prev: Any, cur: Any) -> None:
        for r in (0, 1):
            qp, old = _get(cur, "fabric", "qps", r), _get(prev, "fabric", "qps", r)
            text = _queue_text(qp)
            if prev is None or text != _queue_text(old):
                row.add(f"q{r}", text, "q")
            if _get(qp, "cq_overflow") and not _get(old, "cq_overflow"):
                row.add(f"q{r}", "CQ overflow", "err")
            elif _get(qp, "state") == "error" and _get(old, "state") != "error":
                row.add(f"q{r}", "QP error", "err")


def build_gate(meta: Mapping[str, Any], steps: Sequence[tuple[str, dict, dict]]) -> Diagram:
    for i, (_, _, state) in enumerate(steps):
        # the lanes need two ranks and two queue pairs; anything else renders as a table
        if _len(_get(state, "ranks")) != 2 or _len(_get(state, "fabric", "qps")) != 2:
            raise ValueError(f"state {i} does not have two ranks and two queue pairs")
    rows, arrows = _GateBuilder(steps).build()
    return Diagram(_title(meta, len(steps) - 1), list(GATE_LANES), rows, arrows, _footer(meta),
                   bool(meta.get("violation")),
                   legend="solid arrow: RDMA message (transmit → deliver); dashed: TCP byte or "
                          "header (write → read); ✕ dropped or lost")


# ---------------------------------------------------------------- tag-matching and tables
def _spread_lanes(titles: Sequence[tuple[str, str]]) -> list[Lane]:
    """Equal-width lanes for text; the line sits at each lane's left edge."""
    left, n = STEP_COL + 8, max(len(titles), 1)
    width = (WIDTH - left - 10) / n
    return [Lane(key, title, left + k * width, "start", int((width - 14) / CHAR_W), "plain")
            for k, (key, title) in enumerate(titles)]


def _state_changes(prev: Mapping[str, Any], cur: Mapping[str, Any]) -> list[str]:
    """Changed top-level variables, one level deeper for records (e.g. the engine)."""
    out = []
    for k, v in cur.items():
        old = prev.get(k)
        if old == v:
            continue
        if isinstance(v, dict) and isinstance(old, dict):
            out += [f"{k}.{sk}: {short(sv)}" for sk, sv in v.items() if old.get(sk) != sv]
        else:
            out.append(f"{k}: {short(v)}")
    return out


def _table_rows(steps: Sequence[tuple[str, dict, dict]], lane_of: Callable[[str, dict], str]
                ) -> list[Row]:
    rows, prev = [], None
    for i, (action, args, state) in enumerate(steps):
        row, lane = Row(i, action), lane_of(action, args)
        row.add(lane, call(action, args) if prev is not None else "initial state")
        if prev is not None:
            for change in _state_changes(prev, state):
                row.add(lane, change, "note")
        rows.append(row)
        prev = state
    return rows


def _fifo_arrows(steps: Sequence[tuple[str, dict, dict]], fifos: Callable[[dict], Any],
                 ends: Callable[[int], tuple[str, str]], colour: Callable[[int], str]
                 ) -> list[Arrow]:
    """Arrows for per-channel FIFOs read from each state by ``fifos`` (a tuple of tuples): an
    append is a send, a removal from the front is its arrival."""
    arrows: list[Arrow] = []
    pending: dict[int, deque[Arrow]] = {}
    for i in range(1, len(steps)):
        before, after = fifos(steps[i - 1][2]), fifos(steps[i][2])
        if not (isinstance(before, tuple) and isinstance(after, tuple)):
            continue
        for ch, (b, a) in enumerate(zip(before, after, strict=False)):
            q = pending.setdefault(ch, deque())
            src, dst = ends(ch)
            if _len(a) > _len(b):
                q.append(Arrow(src, i, dst, None, colour(ch)))
            elif _len(a) < _len(b) and q:
                arrow = q.popleft()
                arrow.dst_row = i
                arrows.append(arrow)
    return arrows + [a for q in pending.values() for a in q]


def build_tagmatch(meta: Mapping[str, Any], steps: Sequence[tuple[str, dict, dict]]) -> Diagram:
    # connection k joins sender k (QP 2k) and the receiver (QP 2k+1): wire 2k carries headers
    # and eager payloads to the receiver, wire 2k+1 FINs back
    senders = _len(_get(steps[0][2], "fabric", "wire")) // 2
    if senders == 0:
        raise ValueError("no sender connections in the initial state's fabric")
    titles = [(f"s{k}", f"sender {k}") for k in range(senders)] + [("rx", "receiver")]
    lanes = _spread_lanes(titles)

    def lane_of(action: str, args: dict) -> str:
        s = args.get("sender")
        # a sender acts only when it sends or its FIN comes back; the rest is the receiver's
        if action in SENDER_ACTIONS and isinstance(s, int) and 0 <= s < senders:
            return f"s{s}"
        return "rx"

    def ends(ch: int) -> tuple[str, str]:
        return (f"s{ch // 2}", "rx") if ch % 2 == 0 else ("rx", f"s{ch // 2}")

    rows = _table_rows(steps, lane_of)
    arrows = _fifo_arrows(steps, lambda st: _get(st, "fabric", "wire"), ends,
                          lambda ch: DIR_COLOUR[(ch // 2) % 2] if ch % 2 == 0 else TCP_COLOUR)
    for a in arrows:
        a.dashed = a.colour == TCP_COLOUR
    return Diagram(_title(meta, len(steps) - 1), lanes, rows, arrows, _footer(meta),
                   bool(meta.get("violation")),
                   legend="solid arrow: header or eager payload on a sender's wire; "
                          "dashed: FIN back to the sender")


def build_table(meta: Mapping[str, Any], steps: Sequence[tuple[str, dict, dict]],
                note: str = "") -> Diagram:
    lanes = _spread_lanes([("all", "step")])
    rows = _table_rows(steps, lambda a, b: "all")
    title = _title(meta, len(steps) - 1)
    if note:
        title[1] += f"; shown as a table: {note}"
    return Diagram(title, lanes, rows, [], _footer(meta), bool(meta.get("violation")))


BUILDERS: dict[str, Callable[..., Diagram]] = {"gate": build_gate, "tagmatch": build_tagmatch}


# ---------------------------------------------------------------- SVG output
STYLE = f"""
text {{ font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: {FONT}px;
  fill: {INK}; white-space: pre; }}
.title {{ font-size: 13px; font-weight: bold; }}
.sub, .note, .num {{ fill: {MUTED}; }}
.q {{ fill: #3a3a3a; }}
.err, .drop {{ fill: {ERR}; }}
.errb {{ fill: {ERR}; font-weight: bold; font-size: 12px; }}
.lane {{ font-weight: bold; }}
"""


def _wrapped(row: Row, lanes: Mapping[str, Lane]) -> dict[str, list[Line]]:
    """The row's cells wrapped to their lanes' widths (cells for unknown lanes are left out)."""
    return {key: [Line(t, ln.cls) for ln in lines for t in wrap(ln.text, lanes[key].chars)]
            for key, lines in row.cells.items() if key in lanes}


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "start") -> str:
    c = f' class="{cls}"' if cls else ""
    a = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{c}{a}>{escape(text)}</text>'


def _label(x: float, y: float, text: str, cls: str, anchor: str, fill: str) -> str:
    """Text on a backing box in the row's colour: arrows crossing a lane pass under it."""
    w = len(text) * CHAR_W + 4
    left = {"start": x - 2, "end": x - w + 2}.get(anchor, x - w / 2)
    box = (f'<rect x="{left:.1f}" y="{y - FONT + 1:.1f}" width="{w:.1f}" height="{FONT + 2}" '
           f'fill="{fill}" fill-opacity="0.9"/>')
    return box + _text(x, y, text, cls, anchor)


def _lane_text_x(lane: Lane) -> float:
    return {"end": lane.x - 6, "start": lane.x + 6}.get(lane.anchor, lane.x)


def _cross(x: float, y: float, colour: str) -> str:
    d = 4.5
    return (f'<path d="M{x - d:.1f},{y - d:.1f} L{x + d:.1f},{y + d:.1f} M{x - d:.1f},'
            f'{y + d:.1f} L{x + d:.1f},{y - d:.1f}" stroke="{colour}" stroke-width="2.2"/>')


def _arrow_svg(a: Arrow, lanes: Mapping[str, Lane], ys: Sequence[float], bottom: float
               ) -> tuple[str, str]:
    """The arrow's line, and the mark at its end (drawn over the text layer, so a lane
    label cannot hide a drop or a loss)."""
    x1, y1 = lanes[a.src_lane].x, ys[a.src_row]
    dash = ' stroke-dasharray="5,3"' if a.dashed else ""
    if a.dst_row is None:       # in flight at the end: a faded stub towards the receiver
        x2 = (x1 + lanes[a.dst_lane].x) / 2
        return (f'<line class="inflight" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" '
                f'y2="{bottom:.1f}" stroke="{a.colour}" stroke-opacity="0.4"{dash}/>', "")
    x2, y2 = lanes[a.dst_lane].x, ys[a.dst_row]
    line = f'x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
    if a.end == "head":
        return (f'<line class="msg" {line} stroke="{a.colour}" stroke-width="1.2"{dash} '
                f'marker-end="url(#head{a.colour[1:]})"/>', "")
    if a.end == "lost":         # the wire lane's own label already says "lost"
        return (f'<line class="lost" {line} stroke="{MUTED}" stroke-width="1.4"{dash}/>',
                _cross(x2, y2, MUTED))
    side = 8 if x2 >= x1 else -8
    mark = (f'<g class="dropped">{_cross(x2, y2, ERR)}'
            + _text(x2 + side, y2 + 3.5, "dropped", "drop", "start" if side > 0 else "end")
            + "</g>")
    return f'<line class="drop" {line} stroke="{ERR}" stroke-width="1.4"{dash}/>', mark


def _markers(colours: Iterable[str]) -> str:
    return "".join(
        f'<marker id="head{c[1:]}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f'fill="{c}"/></marker>' for c in sorted(set(colours)))


def draw(d: Diagram) -> str:
    lanes = {ln.key: ln for ln in d.lanes}
    cells = [_wrapped(r, lanes) for r in d.rows]
    heights = [max(map(len, c.values()), default=1) * LINE_H + ROW_PAD for c in cells]
    tops = [TOP + sum(heights[:i]) for i in range(len(heights))]
    bottom = TOP + sum(heights)
    # arrows leave and reach a row just under its first text line, so that line stays clear
    ys = [t + LINE_H + 1.5 for t in tops]
    height = int(bottom + 30 + (LINE_H + 1) * (len(d.footer) + 1))
    fills = [BAND if (k == len(d.rows) - 1 and d.violated) else
             (STRIPE if k % 2 else "#ffffff") for k in range(len(d.rows))]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="monospace">',
           f"<style>{STYLE}</style>",
           f"<defs>{_markers([a.colour for a in d.arrows] + [INK])}</defs>",
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    out += [_text(10, 18 + 15 * k, t, "title" if k == 0 else "sub")
            for k, t in enumerate(d.title)]
    # backgrounds first, then lane lines and arrows, then the text over them
    for k, (top, h) in enumerate(zip(tops, heights, strict=True)):
        cls = "band violation" if fills[k] == BAND else "band"
        out.append(f'<rect class="{cls}" x="0" y="{top}" width="{WIDTH}" height="{h}" '
                   f'fill="{fills[k]}"/>')
    for ln in d.lanes:
        head_x, anchor = (_lane_text_x(ln), ln.anchor) if ln.style == "rank" else (ln.x, "middle")
        out.append(_text(head_x, TOP - 8, ln.title, "lane", anchor))
        stroke = {"rank": f'stroke="{INK}" stroke-width="1.5"',
                  "wire": 'stroke="#9a9a9a" stroke-dasharray="2,3"',
                  "queue": 'stroke="#b0b0b0"'}.get(ln.style, 'stroke="#d0d0d0"')
        out.append(f'<line x1="{ln.x}" y1="{TOP - 4}" x2="{ln.x}" y2="{bottom}" {stroke}/>')
    drawn = [_arrow_svg(a, lanes, ys, bottom) for a in d.arrows
             if a.src_lane in lanes and a.dst_lane in lanes]
    out += [line for line, _ in drawn]
    for row, cell, top, fill in zip(d.rows, cells, tops, fills, strict=True):
        out.append(_row_svg(row, cell, top, fill, lanes))
    out += [mark for _, mark in drawn if mark]
    out.append(_footer_svg(d, bottom))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _row_svg(row: Row, cells: Mapping[str, list[Line]], top: float, fill: str,
             lanes: Mapping[str, Lane]) -> str:
    parts = [f'<g class="step" data-index="{row.index}" data-action={quoteattr(row.action)}>',
             _text(STEP_COL - 4, top + LINE_H - 1, str(row.index), "num", "end")]
    for key, lines in cells.items():
        lane = lanes[key]
        x = _lane_text_x(lane)
        for k, line in enumerate(lines):
            parts.append(_label(x, top + LINE_H * (k + 1) - 1, line.text, line.cls, lane.anchor,
                                fill))
    parts.append("</g>")
    return "".join(parts)


def _footer_svg(d: Diagram, bottom: float) -> str:
    parts = ['<g class="footer">',
             f'<line x1="0" y1="{bottom + 6}" x2="{WIDTH}" y2="{bottom + 6}" stroke="#999"/>']
    y = bottom + 6 + LINE_H + 6
    for line in d.footer:
        parts.append(_text(10, y, line.text, line.cls))
        y += LINE_H + 1
    if d.legend:
        parts.append(_text(10, y + 4, d.legend, "note"))
    parts.append("</g>")
    return "".join(parts)


# ---------------------------------------------------------------- entry points
def render_svg(doc: dict) -> str:
    """A standalone SVG message-sequence diagram of a decoded ITF trace document."""
    meta, steps = decode_states(doc)
    builder = BUILDERS.get(str(meta.get("protocol")))
    if builder is None:
        return draw(build_table(meta, steps, f"unknown protocol {meta.get('protocol')!r}"))
    try:
        diagram = builder(meta, steps)
    except Exception as e:      # an unexpected state shape must not hide the steps themselves
        diagram = build_table(meta, steps, f"unexpected state shape ({e})")
    return draw(diagram)


def render_html(doc: dict, title: str = "verbspec trace") -> str:
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}"
            f"</title></head>\n<body style=\"margin:0\">\n{render_svg(doc)}</body></html>\n")


def render_file(path: Path, out: Path, html: bool = False) -> None:
    doc = load_json(path)
    text = render_html(doc, Path(path).name) if html else render_svg(doc)
    Path(out).write_text(text)


def default_output(path: Path, html: bool = False) -> Path:
    suffix = ".html" if html else ".svg"
    name = Path(path).name
    stem = name[: -len(".itf.json")] if name.endswith(".itf.json") else Path(name).stem
    return Path(path).with_name(stem + suffix)


def trace_main(args: Any) -> int:
    """``verbspec trace FILE [--svg OUT] [--html]``: write the diagram, print its path."""
    html = bool(getattr(args, "html", False))
    out = getattr(args, "svg", None) or default_output(args.file, html)
    try:
        render_file(args.file, out, html)
    except TraceFormatError as e:
        print(f"verbspec trace: {e}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as e:
        print(f"verbspec trace: cannot write {out}: {e}", file=sys.stderr)
        return EXIT_INPUT
    print(out)
    return EXIT_OK
