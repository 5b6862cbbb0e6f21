"""Reading raw recordings: what the recorder (native/record/recorder.c) wrote for each process
it ran in, one JSON-lines file per process (docs/verbs.md, "Recording a program without
changing it"). Every line's event and keys are checked, every problem named by file and
line; a call the recorder could not record (the extended verbs) refuses the recording, since
what it did is not in it."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verbspec.refimpl.traces.read import Event, TraceInputError

FORMAT = 1
# each event's keys beyond "ev" and "t"
RAW_KEYS: dict[str, tuple[str, ...]] = {
    "process": ("format", "pid", "ppid", "argv"),
    "open_device": ("ctx", "device"),
    "reg_mr": ("addr", "length", "access"),
    "dereg_mr": ("lkey", "rc"),
    "create_cq": ("cq", "cqe"),
    "create_qp": ("qp", "qp_num", "qp_type", "send_cq", "recv_cq", "max_send_wr",
                  "max_recv_wr"),
    "modify_qp": ("qp_num", "mask", "state", "rc"),
    "destroy_qp": ("qp_num", "rc"),
    "destroy_cq": ("cq", "rc"),
    "post_send": ("qp_num", "rc", "wrs"),
    "post_recv": ("qp_num", "rc", "wrs"),
    "poll_cq": ("cq", "max", "rc", "wcs"),
    "tcp_open": ("fd", "how", "local", "peer"),
    "tcp": ("fd", "dir", "data"),
    "tcp_eof": ("fd",),
    "tcp_shutdown": ("fd", "how"),
    "tcp_close": ("fd",),
    "unsupported": ("call",),
    "end": (),
}
# a creation that failed (the line has "errno") has no object to name
FAILED_KEYS = {"create_cq": ("cqe",), "create_qp": ("qp_type", "send_cq", "recv_cq")}
_WR_KEYS = {"post_send": ("wr_id", "opcode", "flags", "signaled", "sge"),
            "post_recv": ("wr_id", "sge")}
_WC_KEYS = ("wr_id", "status", "opcode", "byte_len", "qp_num")


@dataclass
class Recording:
    """One process's recording."""

    path: str
    pid: int
    ppid: int
    argv: list[str]
    events: list[Event] = field(default_factory=list)     # after the process line
    ended: bool = False                                        # the last line is ``end``

    def of(self, *evs: str) -> list[Event]:
        return [e for e in self.events if e.ev in evs]

    @property
    def name(self) -> str:
        return f"{Path(self.path).name} ({' '.join(self.argv[:1])}, pid {self.pid})"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad_entries(d: dict[str, Any]) -> str | None:
    """What is wrong with a post's work requests or a poll's completions, or None."""
    ev = d["ev"]
    key, keys = ("wcs", _WC_KEYS) if ev == "poll_cq" else ("wrs", _WR_KEYS.get(ev, ()))
    items = d.get(key)
    if not isinstance(items, list):
        return f"{key} is not a list"
    for i, x in enumerate(items):
        if not isinstance(x, dict):
            return f"{key}[{i}] is not an object"
        missing = [k for k in keys if k not in x]
        if missing:
            return f"{key}[{i}] has no {', '.join(missing)}"
        sge = x.get("sge", [])
        if not isinstance(sge, list) or not all(
                isinstance(s, list) and len(s) == 3 and all(map(_is_int, s)) for s in sge):
            return f"{key}[{i}].sge is not a list of [addr, length, lkey]"
    if ev == "poll_cq" and _is_int(d["rc"]) and d["rc"] > 0 and len(items) != d["rc"]:
        return f"a poll that returned {d['rc']} with {len(items)} completions"
    return None


def _check(d: Any) -> str | None:
    if not isinstance(d, dict):
        return "not a JSON object"
    ev = d.get("ev")
    if ev not in RAW_KEYS:
        return f"unknown event {ev!r} (known: {', '.join(RAW_KEYS)})"
    keys = FAILED_KEYS.get(ev, RAW_KEYS[ev]) if "errno" in d else RAW_KEYS[ev]
    missing = [k for k in ("t", *keys) if k not in d]
    if missing:
        return f"a {ev} line without {', '.join(missing)}"
    if ev in ("post_send", "post_recv", "poll_cq"):
        return _bad_entries(d)
    if ev == "tcp":
        if d["dir"] not in ("in", "out"):
            return f"a tcp line with dir {d['dir']!r} (expected in or out)"
        try:
            bytes.fromhex(d["data"])
        except (TypeError, ValueError):
            return "a tcp line whose data is not hex"
    return None


def read_recording(path: Path) -> Recording:
    """One process's recording, from its ``.jsonl`` file (or that file gzipped, as a
    recording kept for later is)."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt") as f:
                lines = f.read().splitlines()
        else:
            lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise TraceInputError(f"{path}: cannot read it: {e}") from None
    rec: Recording | None = None
    for n, text in enumerate(lines, 1):
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceInputError(f"{path} line {n}: not JSON ({e.msg})") from None
        bad = _check(d)
        if bad is not None:
            raise TraceInputError(f"{path} line {n}: {bad}")
        if rec is None:
            if d["ev"] != "process":
                raise TraceInputError(f"{path} line {n}: a recording begins with a process "
                                      f"line, not {d['ev']}")
            if d["format"] != FORMAT:
                raise TraceInputError(f"{path} line {n}: recording format {d['format']!r}; "
                                      f"this verbspec reads format {FORMAT}")
            rec = Recording(str(path), d["pid"], d["ppid"], list(d["argv"]))
            continue
        if rec.ended:
            raise TraceInputError(f"{path} line {n}: a line after the end line")
        if d["ev"] == "unsupported":
            raise TraceInputError(
                f"{path} line {n}: the program called {d['call']}, which the recorder cannot "
                f"record ({d.get('detail', 'not through the verbs context operations')}): "
                f"what it did is not in the recording, so it cannot be validated")
        rec.events.append(Event(n, d["ev"], d))
        rec.ended = d["ev"] == "end"
    if rec is None:
        raise TraceInputError(f"{path}: empty: no process line")
    return rec


def read_recordings(paths: list[Path]) -> list[Recording]:
    """Every process's recording: from files, or from directories holding ``*.jsonl`` (or
    ``*.jsonl.gz``)."""
    files: list[Path] = []
    for p in paths:
        if not p.exists():
            raise TraceInputError(f"{p}: no such file or directory")
        found = sorted([*p.glob("*.jsonl"), *p.glob("*.jsonl.gz")]) if p.is_dir() else [p]
        if not found:
            raise TraceInputError(f"{p}: no recordings (*.jsonl, *.jsonl.gz) in it")
        files += found
    return [read_recording(f) for f in files]
