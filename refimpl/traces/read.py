"""Reading device traces (refimpl/transport/device_trace.py writes them): each line parsed and its
keys
and types checked, every problem named by file, rank and line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verbspec.refimpl.transport.device_trace import ENGINES, EVENT_KEYS, PROTOCOLS, TRANSPORTS
from verbspec.spec.gate.params import RANK1_OWN


class TraceInputError(ValueError):
    """A device trace that cannot be read as one: unreadable, not JSON lines, a key missing or
    of the wrong type, ranks that do not pair up."""


@dataclass(frozen=True)
class Event:
    line: int               # 1-based line number in its file
    ev: str
    data: dict[str, Any]

    def text(self) -> str:
        return json.dumps(self.data, separators=(",", ":"))


@dataclass
class RankTrace:
    path: str
    rank: int
    protocol: str
    transport: str
    engine: str
    config: dict[str, Any]
    events: list[Event] = field(default_factory=list)   # after begin
    ended: bool = False                                   # the last line is ``end``
    # the spec's variants the run is held to (a raw recording's profile names them: the
    # program as written where the spec is stricter); a device trace's are none
    variants: tuple[str, ...] = ()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_list(v: Any, types: tuple[str, ...], what: str) -> str | None:
    """Whether ``v`` is a list of lists shaped as ``types`` ("int", "str", "bool")."""
    if not isinstance(v, list):
        return f"{what} is not a list"
    for i, item in enumerate(v):
        if not isinstance(item, list) or len(item) != len(types):
            return f"{what}[{i}] is not a list of {len(types)} values"
        for j, (x, t) in enumerate(zip(item, types, strict=True)):
            ok = (_is_int(x) if t == "int" else isinstance(x, str) if t == "str"
                  else isinstance(x, bool))
            if not ok:
                return f"{what}[{i}][{j}] is {x!r}, not an {t}"
    return None


_SHAPES = {"post_recv": ("wrs", ("int", "str", "int", "int")),
           "post_send": ("wrs", ("int", "str", "int", "int", "bool")),
           "poll": ("cqes", ("str", "int", "int", "int"))}


def _check_event(d: dict[str, Any]) -> str | None:
    ev = d.get("ev")
    if not isinstance(ev, str) or ev not in EVENT_KEYS:
        return f"unknown event {ev!r} (known: {', '.join(EVENT_KEYS)})"
    missing = [k for k in EVENT_KEYS[ev] if k not in d]
    if missing:
        return f"a {ev} line without {', '.join(missing)}"
    if ev in _SHAPES:
        key, types = _SHAPES[ev]
        bad = _check_list(d[key], types, key)
        if bad is None and not d[key]:
            bad = f"{key} is empty"
        return bad
    if ev == "call" and not (isinstance(d["name"], str) and isinstance(d["args"], dict)):
        return "a call's name must be a string and its args an object"
    if ev == "result":
        if not isinstance(d["ok"], bool):
            return "a result's ok must be true or false"
        if not d["ok"] and not isinstance(d.get("error"), str):
            return "a failed result must carry its error text"
    if ev in ("tcp_write", "tcp_read") and (
            not isinstance(d["kind"], str)
            or not all(_is_int(d[k]) for k in ("value", "chunks", "depth"))):
        return f"a {ev} needs a string kind and integer value, chunks and depth"
    if ev == "post_read":
        for k in ("wr_id", "offset", "remote_offset", "length"):
            if not _is_int(d[k]):
                return f"post_read's {k} is {d[k]!r}, not an integer"
    return None


def read_rank(path: str | Path) -> RankTrace:
    """One rank's device trace; TraceInputError naming the file and line of any problem."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise TraceInputError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TraceInputError(f"{p}: not UTF-8 text (byte {e.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise TraceInputError(f"{p}: empty: a device trace starts with a begin line")
    out: RankTrace | None = None
    for n, raw in enumerate(lines, start=1):
        where = f"{p}: line {n}" if out is None else f"{p}: rank {out.rank} line {n}"
        try:
            d = json.loads(raw)
        except (json.JSONDecodeError, RecursionError, ValueError) as e:
            raise TraceInputError(f"{where}: not a JSON line ({e}): {raw[:120]!r}") from None
        if not isinstance(d, dict):
            raise TraceInputError(f"{where}: not a JSON object: {raw[:120]!r}")
        bad = _check_event(d)
        if bad is not None:
            raise TraceInputError(f"{where}: {bad}")
        if n == 1:
            out = _begin(p, d, where)
            continue
        assert out is not None
        if d["ev"] == "begin":
            raise TraceInputError(f"{where}: a second begin line")
        if out.ended:
            raise TraceInputError(f"{where}: a line after end")
        if d["ev"] == "end":
            out.ended = True
        out.events.append(Event(n, d["ev"], d))
    assert out is not None
    return out


def _begin(p: Path, d: dict[str, Any], where: str) -> RankTrace:
    if d["ev"] != "begin":
        raise TraceInputError(f"{where}: the first line must be begin, not {d['ev']}")
    checks = (("protocol", PROTOCOLS), ("transport", TRANSPORTS), ("engine", ENGINES))
    for key, allowed in checks:
        if d[key] not in allowed:
            raise TraceInputError(f"{where}: {key} {d[key]!r} is not one of {allowed}")
    if not _is_int(d["rank"]) or d["rank"] not in (0, 1):
        raise TraceInputError(f"{where}: rank {d['rank']!r}: a run has ranks 0 and 1")
    if not isinstance(d["config"], dict):
        raise TraceInputError(f"{where}: config is not an object")
    return RankTrace(str(p), d["rank"], d["protocol"], d["transport"], d["engine"],
                     d["config"])


def read_pair(paths: list[str | Path]) -> tuple[RankTrace, RankTrace]:
    """The two ranks' traces of one run, from two files or a directory holding
    ``rank0.jsonl`` and ``rank1.jsonl``; rank 0 first."""
    files: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise TraceInputError(f"{path}: no such file or directory")
        if path.is_dir():
            found = sorted(path.glob("rank*.jsonl"))
            if not found:
                raise TraceInputError(f"{path}: no rank*.jsonl files in it")
            files += found
        else:
            files.append(path)
    if len(files) != 2:
        raise TraceInputError(f"a run's trace is two files, one per rank; got {len(files)}: "
                              f"{', '.join(map(str, files)) or 'none'}")
    ranks = sorted((read_rank(f) for f in files), key=lambda t: t.rank)
    if [t.rank for t in ranks] != [0, 1]:
        raise TraceInputError(f"{files[0]} and {files[1]} are both rank {ranks[0].rank}")
    a, b = ranks
    if a.protocol != b.protocol:
        raise TraceInputError(f"rank 0 ran {a.protocol}, rank 1 {b.protocol}: not one run")
    diff = sorted(k for k in a.config.keys() | b.config.keys()
                  if a.config.get(k) != b.config.get(k))
    # a gate rank's message cap, window, block rows and verify-window switch are its own: the
    # spec has rank 1's apart; anything else is one run's only if both ranks ran it
    shared = [k for k in diff if a.protocol != "gate" or k not in RANK1_OWN
              or k not in a.config or k not in b.config]
    if shared:
        raise TraceInputError(f"the ranks' configurations differ in {', '.join(shared)}")
    return a, b


def run_config(a: RankTrace, b: RankTrace) -> dict[str, Any]:
    """One gate run's configuration from its ranks' own (rank 0's, with rank 1's values
    that differ set apart, as the spec's ``rank1_*`` parameters)."""
    out = dict(a.config)
    out.update({RANK1_OWN[k]: b.config[k] for k in RANK1_OWN
                if k in a.config and a.config[k] != b.config.get(k)})
    return out
