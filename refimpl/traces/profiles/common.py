"""What every profile is made of: its rules (each citing where in the program it comes from),
the side channel as two byte streams with the recording line each byte came from, memory
registrations looked up by address, and the checks every profile makes of a pair of ranks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.raw import Recording
from verbspec.refimpl.traces.read import Event, RankTrace, TraceInputError
from verbspec.refimpl.transport.side_channel import HEADER
from verbspec.spec.gate.state import HEADER_MAGIC


@dataclass(frozen=True)
class Rule:
    """One mapping rule: what the recording shows, what it is in the spec, and where in the
    program that comes from."""

    observed: str
    spec: str
    source: str


@dataclass(frozen=True)
class Profile:
    """How one program's observable behaviour maps onto one spec."""

    name: str
    program: str            # what program, at what version
    protocol: str           # the spec it is held to
    rules: tuple[Rule, ...]
    ranks: Callable[[list[Recording], Mapping[str, Any]], tuple[RankTrace, RankTrace]]


class ProfileError(TraceInputError):
    """A recording that is not a run of the profile's program, or breaks one of its setup
    rules: the message names the file, the line and the rule."""


def at(rec: Recording, e: Event | None, what: str) -> ProfileError:
    where = f"line {e.line}" if e is not None else "end of recording"
    return ProfileError(f"{rec.path} {where}: {what}")


@dataclass(frozen=True)
class Region:
    """A memory registration, by the spec's name for it."""

    name: str
    addr: int
    length: int
    lkey: int

    def holds(self, addr: int, length: int, lkey: int) -> bool:
        return lkey == self.lkey and self.addr <= addr and addr + length <= self.addr + self.length


def registrations(rec: Recording, mrs: list[Event], names: tuple[str, ...], anchor: Event | None,
                  count_why: str, access: int, access_why: str) -> list[Region]:
    """The program's memory registrations, one per spec buffer of ``names`` in order, each
    with the access the program gives them; refused, naming the line and the rule
    (``count_why``, ``access_why``), where the recording has others."""
    if len(mrs) != len(names) or any("lkey" not in e.data for e in mrs):
        raise at(rec, mrs[-1] if mrs else anchor,
                 f"{len(mrs)} memory registrations (or one failed){count_why}")
    for e in mrs:
        if e.data["access"] != access:
            raise at(rec, e, f"registered with access {e.data['access']}; {access_why}")
    return [Region(n, e.data["addr"], e.data["length"], e.data["lkey"])
            for n, e in zip(names, mrs, strict=True)]


def locate(regions: list[Region], sge: list[list[int]], rec: Recording, e: Event,
           wr_id: int) -> tuple[str | None, int | None, int]:
    """A work request's (region, offset, length): one scatter-gather entry inside one
    registration; none (a zero-length request) leaves region and offset unobserved."""
    if not sge:
        return None, None, 0
    if len(sge) > 1:
        raise at(rec, e, f"wr_id {wr_id} has {len(sge)} scatter-gather entries; the program "
                         f"posts one per work request")
    addr, length, lkey = sge[0]
    for g in regions:
        if g.holds(addr, length, lkey):
            return g.name, addr - g.addr, length
    raise at(rec, e, f"wr_id {wr_id} addresses {length} bytes at {addr:#x} with lkey {lkey}, "
                     f"inside no registration of the program's")


@dataclass
class Stream:
    """One direction of a TCP connection: its bytes, and for each the recording line it came
    in."""

    data: bytearray = field(default_factory=bytearray)
    lines: list[int] = field(default_factory=list)

    def add(self, e: Event) -> None:
        chunk = bytes.fromhex(e.data["data"])
        self.data += chunk
        self.lines += [e.line] * len(chunk)


def same_bytes(wrote: Stream, read: Stream, w: Recording, r: Recording) -> None:
    """What one rank read on the side channel is what the other wrote, byte for byte; the
    reader may stop early (it closed or failed), never read more or other bytes."""
    n = len(read.data)
    if n > len(wrote.data):
        raise ProfileError(f"{r.path} line {read.lines[len(wrote.data)]}: read byte "
                           f"{len(wrote.data)} of the side channel, which {w.path} never wrote")
    for i in range(n):
        if read.data[i] != wrote.data[i]:
            raise ProfileError(
                f"{r.path} line {read.lines[i]}: read byte {i} of the side channel as "
                f"{read.data[i]:#04x}; {w.path} line {wrote.lines[i]} wrote {wrote.data[i]:#04x}")


def le(b: bytes | bytearray, at_: int, n: int) -> int:
    return int.from_bytes(b[at_:at_ + n], "little")


# a program's own framing of side-channel items beside the gate protocol's (verbs_gate's
# verify-block and batch headers): the item at a byte, or None; and whether the bytes left
# begin such a frame (the channel then ends in part of one)
Framing = Callable[[bytearray, int], "dict[str, Any] | None"]
Partial = Callable[[bytearray, int], bool]


def side_items(s: Stream, rec: Recording, start: int, framing: Framing | None = None,
               partial: Partial | None = None) -> list[tuple[int, dict[str, Any]]]:
    """The gate protocol's side-channel items from byte ``start`` (past the program's setup):
    big-gate headers (refimpl/transport/side_channel.py's frame: the magic DS4B first),
    the program's own frames, and barrier bytes; each with the line its last byte came in."""
    out, i, data = [], start, s.data
    while i < len(data):
        own = framing(data, i) if framing is not None else None
        if len(data) - i >= HEADER.size and le(data, i, 4) == HEADER_MAGIC:
            _, _, _, number, chunks, depth = HEADER.unpack_from(bytes(data), i)
            item = {"kind": "header", "value": number, "chunks": chunks, "depth": depth}
            i += HEADER.size
        elif own is not None:
            item, i = own[0], i + own[1]
        elif (data[i] == HEADER_MAGIC & 0xFF and len(data) - i < HEADER.size) or (
                partial is not None and partial(data, i)):
            raise ProfileError(f"{rec.path} line {s.lines[i]}: the side channel ends in part "
                               f"of a header")
        else:
            item = {"kind": "byte", "value": data[i], "chunks": 0, "depth": 0}
            i += 1
        out.append((s.lines[i - 1], item))
    return out


# where a work request goes in the spec, for a program whose registrations alone do not say
# (one registration holding several of the spec's buffers): (recording, post, work request)
# -> (region, offset, length)
Placement = Callable[[Recording, Event, dict[str, Any]], tuple[str | None, int | None, int]]


def work_requests(regions: list[Region], rec: Recording, e: Event, sends_from: str,
                  place: Placement | None = None) -> list[list[Any]]:
    """A post's work requests as the device-trace form has them: [wr_id, region, offset,
    length] (and signaled, for a send); every send a SEND (``sends_from`` cites where). The
    region and offset are the registration's that holds the request's one SGE, or what
    ``place`` says."""
    out: list[list[Any]] = []
    for w in e.data["wrs"]:
        region, offset, length = (place(rec, e, w) if place is not None
                                  else locate(regions, w["sge"], rec, e, w["wr_id"]))
        wr: list[Any] = [w["wr_id"], region, offset, length]
        if e.ev == "post_send":
            if w["opcode"] != "SEND":
                raise at(rec, e, f"wr_id {w['wr_id']} is a {w['opcode']}; the gate "
                                 f"protocol posts SENDs ({sends_from})")
            wr.append(bool(w["signaled"]))
        out.append(wr)
    return out


@dataclass(frozen=True)
class Device:
    """The one queue pair (and its CQ) of a process that runs the gate protocol."""

    qp: Event
    cq: Event
    regions: list[Region]
    sends_from: str         # where the program posts its SENDs (cited when one is not)
    place: Placement | None = None      # where a work request goes, when regions do not say

    @property
    def qpn(self) -> int:
        return int(self.qp.data["qp_num"])


def device_events(rec: Recording, dev: Device, items: tuple[list[tuple[int, dict[str, Any]]],
                                                          list[tuple[int, dict[str, Any]]]],
                  end: int | None, select: Callable[[Event], bool] | None = None,
                  program: str = "verbs_gate") -> list[Event]:
    """A rank's posts, polls and side-channel items (written, read), in the order it made them,
    as the device-trace events the validator reads; ``end`` the line of its ``end`` event (None:
    the rank never closed). ``select`` tells the device's posts and polls from the process's
    other traffic (False: not the device's; it raises what cannot be told apart); without it
    every post and poll must be the device's."""
    qpn, cq = dev.qpn, dev.cq.data["cq"]
    rts = next(e.line for e in rec.of("modify_qp")
               if e.data["state"] == "RTS" and e.data["qp_num"] == qpn)
    found: list[tuple[int, int, Event]] = []
    for e in rec.of("post_send", "post_recv", "poll_cq"):
        if select is not None and not select(e):
            continue
        if e.data.get("qp_num", qpn) != qpn or e.data.get("cq", cq) != cq:
            raise at(rec, e, f"a post or poll on another queue pair or CQ than {program}'s one")
        if e.data["rc"] < 0 or (e.ev != "poll_cq" and e.data["rc"]):
            raise at(rec, e, f"the {e.ev} failed (returned {e.data['rc']}); the profile's spec "
                             f"configuration has no failing posts or polls")
        if e.line < rts:
            raise at(rec, e, f"a {e.ev} before the queue pair is ready to send (RTS)")
        if e.ev == "poll_cq":
            cqes = [["recv" if c["opcode"].startswith("RECV") else "send", c["wr_id"],
                     c["status"], c["byte_len"]] for c in e.data["wcs"]]
            data = {"ev": "poll", "max": e.data["max"], "cqes": cqes}
        else:
            data = {"ev": e.ev, "wrs": work_requests(dev.regions, rec, e, dev.sends_from,
                                                       dev.place)}
        found.append((e.line, 0, Event(e.line, data["ev"], data)))
    for ev, its in zip(("tcp_write", "tcp_read"), items, strict=True):
        for k, (line, item) in enumerate(its):
            found.append((line, k, Event(line, ev, {"ev": ev, **item})))
    ends = [Event(end, "end", {"ev": "end"})] if end is not None else []
    return [e for _, _, e in sorted(found, key=lambda x: (x[0], x[1]))] + ends


def rules_table(p: Profile) -> str:
    """A profile's rules as the markdown table docs/verbs.md carries."""
    rows = ["| the recording shows | in the spec | from |", "|---|---|---|"]
    rows += [f"| {r.observed} | {r.spec} | {r.source} |" for r in p.rules]
    return "\n".join(rows)
