"""A process's TCP connections in a raw recording: each from its tcp_open to its tcp_close,
with the bytes moved each way (a descriptor is reused after a close), and a connection's bytes
read as JSON lines (a control connection's framing)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.profiles.common import ProfileError, Stream, at
from verbspec.refimpl.traces.raw import Recording
from verbspec.refimpl.traces.read import Event


@dataclass
class Conn:
    """One TCP connection of a process: from its tcp_open to its tcp_close."""

    opened: Event
    fd: int
    out: Stream = field(default_factory=Stream)
    inn: Stream = field(default_factory=Stream)
    shutdowns: list[Event] = field(default_factory=list)
    closed: Event | None = None


def connections(rec: Recording) -> list[Conn]:
    """The process's TCP connections in the order opened; bytes on a descriptor belong to the
    connection open on it then. Bytes on a descriptor with no connection open are refused:
    they cannot be told apart."""
    out: list[Conn] = []
    live: dict[int, Conn] = {}
    for e in rec.of("tcp_open", "tcp", "tcp_shutdown", "tcp_close"):
        fd = e.data["fd"]
        if e.ev == "tcp_open":
            live[fd] = Conn(e, fd)
            out.append(live[fd])
            continue
        c = live.get(fd)
        if c is None:
            if e.ev == "tcp":
                raise at(rec, e, f"bytes on descriptor {fd}, which no connection the process "
                                 f"opened holds: they cannot be told apart from the program's")
            continue
        if e.ev == "tcp":
            (c.out if e.data["dir"] == "out" else c.inn).add(e)
        elif e.ev == "tcp_shutdown":
            c.shutdowns.append(e)
        else:
            c.closed = e
            del live[fd]
    return out


def json_lines(s: Stream, rec: Recording, source: str) -> list[tuple[int, dict[str, Any]]]:
    """A connection's JSON lines (one object each), each with the recording line its newline
    came in; anything else is refused, citing ``source`` (where the program writes them)."""
    out, start = [], 0
    while start < len(s.data):
        nl = s.data.find(b"\n", start)
        if nl < 0:
            raise at(rec, None, f"the control connection ends in part of a line (byte "
                                f"{start} on, from line {s.lines[start]})")
        try:
            msg = json.loads(bytes(s.data[start:nl]))
        except ValueError as exc:
            raise ProfileError(f"{rec.path} line {s.lines[nl]}: a control line that is not "
                               f"JSON ({exc}); the program writes JSON lines ({source})"
                               ) from None
        if not isinstance(msg, dict):
            raise ProfileError(f"{rec.path} line {s.lines[nl]}: a control line that is not a "
                               f"JSON object ({source})")
        out.append((s.lines[nl], msg))
        start = nl + 1
    return out


def first_json(c: Conn) -> dict[str, Any] | None:
    """The first line a connection wrote, when it is a JSON object; else None."""
    nl = c.out.data.find(b"\n")
    if not c.out.data.startswith(b"{") or nl < 0:
        return None
    try:
        msg = json.loads(bytes(c.out.data[:nl]))
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None
