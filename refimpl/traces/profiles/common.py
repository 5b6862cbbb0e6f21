"""What every profile is made of: its rules (each citing where in the program it comes from),
the side channel as two byte streams with the recording line each byte came from, memory
registrations looked up by address, and the checks every profile makes of a pair of ranks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.raw import RawEvent, Recording
from verbspec.refimpl.traces.read import RankTrace, TraceInputError


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


def at(rec: Recording, e: RawEvent | None, what: str) -> ProfileError:
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


def locate(regions: list[Region], sge: list[list[int]], rec: Recording, e: RawEvent,
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

    def add(self, e: RawEvent) -> None:
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


def rules_table(p: Profile) -> str:
    """A profile's rules as the markdown table docs/verbs.md carries."""
    rows = ["| the recording shows | in the spec | from |", "|---|---|---|"]
    rows += [f"| {r.observed} | {r.spec} | {r.source} |" for r in p.rules]
    return "\n".join(rows)
