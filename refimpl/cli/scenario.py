"""``verbspec match FILE.json`` (``-`` reads standard input): run the tag-matching engine over
a receiver-side scenario.

Input::

    {"events": [...], "eager_limit": 8192, "offload": {"capacity": 0}}

Each event, in the order the receiver observes it, is one of::

    {"op": "post_recv", "id": STR, "comm": INT, "src": INT|"any", "tag": INT|"any", "bytes": INT}
    {"op": "arrive", "id": STR, "comm": INT, "src": INT, "tag": INT, "bytes": INT}
    {"op": "cancel", "id": STR}

Output (stdout)::

    {"matches": [{"recv": ID, "send": ID, "protocol": "eager" | "rndv", "truncated": BOOL}],
     "unexpected": [send ids], "pending": [recv ids], "cancelled": [recv ids]}

``matches`` are listed in the order they were made, ``unexpected`` in arrival order, ``pending``
in posted order, ``cancelled`` in the order of the cancel events.

Exit 0 on success, 3 on malformed input (the message names the JSON path of the problem).
With ``offload.capacity`` 0 the fast list-equivalent engine runs; with a capacity the hardware
offload model runs, hardware and software exchanging ops and completions with as much lag as the
observed order allows, and must give the same outcome.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.cli import report
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch import offload as off
from verbspec.spec.tagmatch.engine import FastEngine

EXIT_OK, EXIT_INPUT = 0, 3
DEFAULT_EAGER_LIMIT = 8192


class ScenarioError(ValueError):
    """Malformed scenario; the message starts with the JSON path of the problem."""


# An event as parsed: (op, id, comm, src, tag, bytes); a cancel has only op and id filled.
Event = tuple[str, str, int, int, int, int]


@dataclass(frozen=True)
class Scenario:
    events: list[Event]
    eager_limit: int
    capacity: int

    def spec_events(self) -> list[tuple[str, Any]]:
        """The events as spec values: ("post_recv", Recv) | ("arrive", Msg) | ("cancel", id)."""
        out: list[tuple[str, Any]] = []
        for op, eid, comm, src, tag, nbytes in self.events:
            if op == "post_recv":
                out.append((op, tm.Recv(eid, comm, src, tag, nbytes)))
            elif op == "arrive":
                out.append((op, tm.Msg(eid, comm, src, tag, nbytes)))
            else:
                out.append((op, eid))
        return out


def _int(v: Any, where: str, what: str = "a non-negative integer") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ScenarioError(f"{where}: expected {what}")
    return v


def _int_or_any(v: Any, where: str) -> int:
    if v == "any":
        return tm.ANY
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ScenarioError(f'{where}: expected an integer or "any"')
    return v


_FIELDS = {
    "post_recv": ("id", "comm", "src", "tag", "bytes"),
    "arrive": ("id", "comm", "src", "tag", "bytes"),
    "cancel": ("id",),
}


def parse(doc: Any) -> Scenario:
    """Validate a decoded scenario document; raise ScenarioError naming the first problem."""
    if not isinstance(doc, dict):
        raise ScenarioError("$: expected an object")
    for key in doc:
        if key not in ("events", "eager_limit", "offload"):
            raise ScenarioError(f"$.{key}: unknown key (expected events, eager_limit, offload)")
    if "events" not in doc:
        raise ScenarioError("$.events: missing")
    events = doc["events"]
    if not isinstance(events, list):
        raise ScenarioError("$.events: expected a list")
    eager_limit = _int(doc.get("eager_limit", DEFAULT_EAGER_LIMIT), "$.eager_limit")
    offload = doc.get("offload", {"capacity": 0})
    if not isinstance(offload, dict):
        raise ScenarioError("$.offload: expected an object")
    for key in offload:
        if key != "capacity":
            raise ScenarioError(f"$.offload.{key}: unknown key (expected capacity)")
    capacity = _int(offload.get("capacity", 0), "$.offload.capacity")
    parsed = _parse_events_fast(events)
    if parsed is None:
        parsed = _parse_events(events)   # raises, naming the problem
    return Scenario(parsed, eager_limit, capacity)


def _parse_events_fast(events: list) -> list[Event] | None:
    """The common case, without building a JSON path per event: None on any problem, and the
    careful parser below then names it."""
    out: list[Event] = []
    append = out.append
    ids: set[str] = set()
    posted: set[str] = set()
    cancelled: set[str] = set()
    ANY = tm.ANY
    for ev in events:
        if type(ev) is not dict:
            return None
        op = ev.get("op")
        if op == "cancel":
            eid = ev.get("id")
            if len(ev) != 2 or type(eid) is not str or eid not in posted or eid in cancelled:
                return None
            cancelled.add(eid)
            append(("cancel", eid, 0, 0, 0, 0))
            continue
        if len(ev) != 6 or (op != "arrive" and op != "post_recv"):
            return None
        eid, comm, src, tag, nbytes = (ev.get("id"), ev.get("comm"), ev.get("src"),
                                       ev.get("tag"), ev.get("bytes"))
        if (type(eid) is not str or eid in ids or type(comm) is not int or comm < 0
                or type(nbytes) is not int or nbytes < 0):
            return None
        if op == "post_recv":
            if src == "any":
                src = ANY
            elif type(src) is not int or src < 0:
                return None
            if tag == "any":
                tag = ANY
            elif type(tag) is not int or tag < 0:
                return None
            posted.add(eid)
        elif type(src) is not int or src < 0 or type(tag) is not int or tag < 0:
            return None
        ids.add(eid)
        append((op, eid, comm, src, tag, nbytes))
    return out


def _parse_events(events: list) -> list[Event]:
    out: list[Event] = []
    ids: dict[str, str] = {}          # id -> op that introduced it
    cancelled: set[str] = set()
    for i, ev in enumerate(events):
        where = f"$.events[{i}]"
        if not isinstance(ev, dict):
            raise ScenarioError(f"{where}: expected an object")
        op = ev.get("op")
        if not isinstance(op, str) or op not in _FIELDS:
            raise ScenarioError(f'{where}.op: expected "post_recv", "arrive" or "cancel"')
        fields = _FIELDS[op]
        for key in ev:
            if key != "op" and key not in fields:
                raise ScenarioError(f"{where}.{key}: unknown key for {op}")
        for key in fields:
            if key not in ev:
                raise ScenarioError(f"{where}.{key}: missing")
        eid = ev["id"]
        if not isinstance(eid, str):
            raise ScenarioError(f"{where}.id: expected a string")
        if op == "cancel":
            if ids.get(eid) != "post_recv":
                raise ScenarioError(f"{where}.id: {eid!r} names no receive posted before")
            if eid in cancelled:
                raise ScenarioError(f"{where}.id: receive {eid!r} is cancelled twice")
            cancelled.add(eid)
            out.append(("cancel", eid, 0, 0, 0, 0))
            continue
        if eid in ids:
            raise ScenarioError(f"{where}.id: duplicate id {eid!r}")
        ids[eid] = op
        comm = _int(ev["comm"], f"{where}.comm")
        if op == "post_recv":
            src = _int_or_any(ev["src"], f"{where}.src")
            tag = _int_or_any(ev["tag"], f"{where}.tag")
        else:
            src = _int(ev["src"], f"{where}.src")
            tag = _int(ev["tag"], f"{where}.tag")
        nbytes = _int(ev["bytes"], f"{where}.bytes")
        out.append((op, eid, comm, src, tag, nbytes))
    return out


@dataclass
class Outcome:
    # matches as (recv id, send id, message bytes, receive bytes)
    matches: list[tuple[str, str, int, int]]
    unexpected: list[str]
    pending: list[str]
    cancelled: list[str]
    stats: dict[str, int] = field(default_factory=dict)   # what the offload did, not printed

    def as_json(self, eager_limit: int) -> dict[str, Any]:
        return {
            "matches": [{"recv": r, "send": m, "protocol": "eager" if mb <= eager_limit
                         else "rndv", "truncated": mb > rb} for r, m, mb, rb in self.matches],
            "unexpected": self.unexpected,
            "pending": self.pending,
            "cancelled": self.cancelled,
        }


def run_software(sc: Scenario) -> Outcome:
    """The fast engine over the raw events: receives and messages stay plain tuples."""
    eng = FastEngine()
    post, arrive, cancel = eng.post, eng.arrive, eng.cancel
    matches: list[tuple[str, str, int, int]] = []
    cancelled: list[str] = []
    for ev in sc.events:
        op, eid, comm, src, tag, _ = ev
        if op == "arrive":
            r = arrive(eid, comm, src, tag, ev)
            if r is not None:
                matches.append((r[1], eid, ev[5], r[5]))
        elif op == "post_recv":
            m = post(eid, comm, src, tag, ev)
            if m is not None:
                matches.append((eid, m[1], m[5], ev[5]))
        elif cancel(eid):
            cancelled.append(eid)
    return Outcome(matches, [m[1] for m in eng.unexpected()], [r[1] for r in eng.posted()],
                   cancelled)


def run_offload(sc: Scenario) -> Outcome:
    """The offload model under the laziest schedule that keeps the observed order: software
    handles hardware's completions only when the application next calls in (progress), and
    hardware executes software's ops only when the next message reaches it."""
    st = off.Offload(sc.capacity)
    matches: list[tuple[str, str, int, int]] = []
    cancelled: list[str] = []

    def record(outcome: off.Outcome) -> None:
        matches.extend((mt.recv.id, mt.msg.id, mt.msg.bytes, mt.recv.bytes)
                       for mt in outcome.matches)
        cancelled.extend(outcome.cancelled)

    stats = {"hw_matches": 0, "claims": 0, "unexpected_reports": 0}

    def progress() -> None:
        nonlocal st
        while st.cq:
            kind, claims = st.cq[0].kind, len(st.claims)
            st, outcome, _ = off.sw_complete(st)
            record(outcome)
            stats["hw_matches"] += kind == "match"
            stats["unexpected_reports"] += kind == "unexpected"
            stats["claims"] += kind == "unexpected" and len(st.claims) > claims
        if st.sent_count < st.sw_count:
            st = off.sw_sync(st)

    def drain_ops() -> None:
        nonlocal st
        while st.ops:
            st = off.hw_op(st)

    for op, arg in sc.spec_events():
        if op == "arrive":
            drain_ops()
            st = off.hw_arrive(st, arg)
            continue
        progress()
        if op == "post_recv":
            st, outcome, _ = off.sw_post(st, arg)
        else:
            st, outcome, _ = off.sw_cancel(st, arg)
        record(outcome)
    while st.ops or st.cq:
        drain_ops()
        progress()
    # a hardware cancel resolves when its remove comes back; report cancels in event order
    order = {ev[1]: i for i, ev in enumerate(sc.events) if ev[0] == "cancel"}
    cancelled.sort(key=order.__getitem__)
    return Outcome(matches, list(st.unexpected_ids()), list(st.pending_ids()), cancelled, stats)


def run(sc: Scenario) -> Outcome:
    return run_offload(sc) if sc.capacity else run_software(sc)


def read_text(path: str) -> str:
    """The scenario's text: the file, or standard input for ``-``; ScenarioError when it cannot
    be read or is not UTF-8."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as e:
        raise ScenarioError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:     # e.g. a path with a NUL byte
        raise ScenarioError(f"cannot read {path!r}: {e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {e.start})") from None


def load(text: str) -> Any:
    """JSON text as Python values; ScenarioError naming what is wrong."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"$: not JSON ({e.msg} at line {e.lineno} column {e.colno})"
                            ) from None
    except RecursionError:
        raise ScenarioError("$: JSON nested too deeply") from None
    except ValueError as e:     # e.g. an integer of more digits than Python converts
        raise ScenarioError(f"$: not JSON ({e})") from None


def match_main(path: str) -> int:
    try:
        sc = parse(load(read_text(path)))
    except ScenarioError as e:
        print(f"verbspec match: {e}", file=sys.stderr)
        return EXIT_INPUT
    report.print_scenario(run(sc).as_json(sc.eager_limit))
    return EXIT_OK


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m verbspec.refimpl.cli.scenario FILE.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(match_main(sys.argv[1]))
