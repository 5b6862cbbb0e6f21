"""Device traces: what one rank did on its device and side channel, written as it runs.

A device trace is one JSON-lines file per rank (docs/verbs.md, "Device traces", is the format's
reference). Line 1 is ``begin`` (protocol, rank, transport, engine, the configuration); then,
in the order the rank did them, library calls (``call`` ... ``result``), work requests posted
(``post_recv``, ``post_send``, ``post_read``), polls that returned completions (``poll``), and
side-channel traffic (``tcp_write``, ``tcp_read``); the last line is ``end``. The pyverbs and C
transports write the same format; ``refimpl/traces/validate_gate.py`` checks a pair of them against
the spec.

``Recorder`` writes one rank's file. ``RecordingDevice`` and ``RecordingSide`` wrap any device
(``post_recv``, ``post_send``, ``poll``; ``post_read`` on RC) and side channel and record what
passes through; everything else is forwarded untouched. A channel or endpoint given a recorder
(its ``trace`` argument) wraps its own device and side channel and records its calls; given
none, nothing is wrapped and recording costs one ``is None`` test per call.
``VERBSPEC_DEVICE_TRACE=DIR`` makes the sim transport give each rank a recorder writing
``DIR/PROTOCOL/rank{R}.jsonl`` (``from_env``; PROTOCOL is ``gate`` or ``tagged``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

TRACE_ENV = "VERBSPEC_DEVICE_TRACE"
GATE, TAGGED = "gate", "tagged"
PROTOCOLS = (GATE, TAGGED)
TRANSPORTS = ("sim", "pyverbs", "verbs-c")
ENGINES = ("python", "native")
# the keys each event carries (more may be added; none of these may be left out)
EVENT_KEYS: dict[str, tuple[str, ...]] = {
    "begin": ("protocol", "rank", "transport", "engine", "config"),
    "call": ("name", "args"),
    "post_recv": ("wrs",),
    "post_send": ("wrs",),
    "post_read": ("wr_id", "region", "offset", "remote", "remote_offset", "length"),
    "poll": ("cqes",),
    "tcp_write": ("kind", "value", "chunks", "depth"),
    "tcp_read": ("kind", "value", "chunks", "depth"),
    "result": ("ok",),
    "end": (),
}


def config_dict(cfg: Any) -> dict[str, Any]:
    """A configuration dataclass's fields, as the ``begin`` line carries them."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


class Recorder:
    """One rank's device trace, written to ``out`` (a path or an open text file) line by line
    as the rank runs; the ``begin`` line is written at once."""

    def __init__(self, out: str | os.PathLike[str] | IO[str], *, protocol: str, rank: int,
                 transport: str, engine: str, config: Mapping[str, Any]) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol {protocol!r}: a device trace is of {PROTOCOLS}")
        self._own = not hasattr(out, "write")
        self._f: IO[str] = (open(out, "w", encoding="utf-8")     # noqa: SIM115
                            if self._own else out)               # type: ignore[assignment]
        self.ended = False
        # what a send carries, read from its buffer by the protocol (a tagged message's
        # header): ``send_detail(device, wr)`` -> a dict for the optional "hdrs" key
        self.send_detail: Callable[[Any, tuple], dict[str, Any] | None] | None = None
        self.write({"ev": "begin", "protocol": protocol, "rank": rank, "transport": transport,
                    "engine": engine, "config": dict(config)})

    def write(self, event: dict[str, Any]) -> None:
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")

    # ------------------------------------------------------------------ library calls
    def call(self, name: str, args: Mapping[str, Any], fn: Callable[..., Any], *a: Any,
             detail: Callable[[Any], dict[str, Any]] | None = None) -> Any:
        """Run ``fn(*a)`` as the library call ``name``: its ``call`` line, then its
        ``result`` (the exception's text when it raised, the exception raised again).
        ``detail(returned)`` adds keys to a successful result (a receive's status)."""
        self.write({"ev": "call", "name": name, "args": dict(args)})
        try:
            out = fn(*a)
        except Exception as e:
            self.write({"ev": "result", "ok": False, "error": str(e)})
            raise
        self.write({"ev": "result", "ok": True, **(detail(out) if detail else {})})
        return out

    def end(self) -> None:
        """The ``end`` line; the file is closed (when the recorder opened it)."""
        if self.ended:
            return
        self.ended = True
        self.write({"ev": "end"})
        self._f.flush()
        if self._own:
            self._f.close()

    # ------------------------------------------------------------------ wrapping
    def device(self, device: Any) -> RecordingDevice:
        return RecordingDevice(device, self)

    def side(self, side: Any) -> RecordingSide:
        return RecordingSide(side, self)


class RecordingDevice:
    """A device whose posts and non-empty polls are recorded; the rest passes through."""

    def __init__(self, inner: Any, rec: Recorder) -> None:
        self._inner, self._rec = inner, rec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def post_recv(self, wrs: list[tuple[int, str, int, int]]) -> None:
        self._rec.write({"ev": "post_recv", "wrs": [list(w) for w in wrs]})
        self._inner.post_recv(wrs)

    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None:
        event: dict[str, Any] = {"ev": "post_send", "wrs": [list(w) for w in wrs]}
        if self._rec.send_detail is not None:
            event["hdrs"] = [self._rec.send_detail(self._inner, w) for w in wrs]
        self._rec.write(event)
        self._inner.post_send(wrs)

    def post_read(self, wr_id: int, local_region: str, local_offset: int, remote_region: str,
                  remote_offset: int, length: int) -> None:
        self._rec.write({"ev": "post_read", "wr_id": wr_id, "region": local_region,
                         "offset": local_offset, "remote": remote_region,
                         "remote_offset": remote_offset, "length": length})
        self._inner.post_read(wr_id, local_region, local_offset, remote_region, remote_offset,
                              length)

    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Any, ...]:
        got = self._inner.poll(n, wait_s)
        if got:
            # "max": the completions the poll asked for (an optional key of the format)
            self._rec.write({"ev": "poll", "max": n, "cqes": [
                [c.opcode, c.wr_id, c.status, c.byte_len] for c in got]})
        return got


class RecordingSide:
    """A side channel whose item writes and reads are recorded (a tagged endpoint's hello,
    raw bytes, as kind "hello" with the bytes in hex)."""

    def __init__(self, inner: Any, rec: Recorder) -> None:
        self._inner, self._rec = inner, rec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _item(self, ev: str, item: Any) -> None:
        self._rec.write({"ev": ev, "kind": item.kind, "value": item.value,
                         "chunks": item.chunks, "depth": item.depth})

    def write(self, item: Any) -> None:
        self._item("tcp_write", item)
        self._inner.write(item)

    def read(self, kind: str) -> Any:
        item = self._inner.read(kind)
        if item is not None:
            self._item("tcp_read", item)
        return item

    def write_bytes(self, data: bytes) -> None:
        self._rec.write({"ev": "tcp_write", "kind": "hello", "value": 0, "chunks": 0,
                         "depth": 0, "bytes": data.hex()})
        self._inner.write_bytes(data)

    def read_bytes(self, n: int) -> bytes | None:
        data = self._inner.read_bytes(n)
        if data is not None:
            self._rec.write({"ev": "tcp_read", "kind": "hello", "value": 0, "chunks": 0,
                             "depth": 0, "bytes": data.hex()})
        return data


def from_env(protocol: str, rank: int, transport: str, engine: str, config: Any,
             environ: Mapping[str, str] = os.environ) -> Recorder | None:
    """A recorder writing ``DIR/PROTOCOL/rank{rank}.jsonl`` when ``VERBSPEC_DEVICE_TRACE=DIR``
    is set (the directory is created), else None: a process that runs a gate channel and then
    a tagged endpoint keeps both runs."""
    where = environ.get(TRACE_ENV)
    if not where:
        return None
    d = Path(where) / protocol
    d.mkdir(parents=True, exist_ok=True)
    return Recorder(d / f"rank{rank}.jsonl", protocol=protocol, rank=rank,
                    transport=transport, engine=engine, config=config_dict(config))
