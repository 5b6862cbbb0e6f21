"""MPI tag matching, list semantics: the executable definition every other engine is held to.

One matching engine per receiver (communicators are part of the envelope, so one engine serves
them all). It holds two lists in the order things happened:

- ``posted``: receives waiting for a message, in posted order;
- ``unexpected``: messages that found no receive, in arrival order.

The MPI ordering rule, as the receiver sees it:

- an arriving message takes the *earliest posted* receive whose envelope matches it;
- a newly posted receive takes the *earliest arrived* unexpected message its envelope matches.

State is a frozen value; each protocol step is a function returning the next state and what it
produced, so checkers can branch on states freely. The engine never does I/O and knows no clock.
Ids are any hashable (strings in scenarios, integers in the closed system).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from verbspec.spec.values import hash_once, unpickled_hash

ANY = -1  # ANY_SOURCE / ANY_TAG: sources and tags are never negative, so -1 cannot collide


class TagMatchError(ValueError):
    """A step the matching rules forbid; the message names the rule."""


@dataclass(frozen=True, slots=True)
class Recv:
    """A posted receive: its envelope (``src``/``tag`` may be ANY) and its buffer length."""

    id: Hashable
    comm: int
    src: int
    tag: int
    bytes: int

    @property
    def wildcard(self) -> bool:
        return self.src == ANY or self.tag == ANY


@dataclass(frozen=True, slots=True)
class Msg:
    """An arriving message (eager payload or rendezvous header): envelope and length."""

    id: Hashable
    comm: int
    src: int
    tag: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Match:
    recv: Recv
    msg: Msg

    @property
    def truncated(self) -> bool:
        # MPI: a message longer than the receive buffer is an error (MPI_ERR_TRUNCATE)
        return self.msg.bytes > self.recv.bytes


@dataclass(frozen=True, slots=True)
class Rules:
    """Which matching order the engine follows. The defaults are MPI's; the switches reproduce
    orders real engines have been tempted by, each named by a variant of the closed system."""

    wildcard_last: bool = False   # search fully specified receives before wildcard ones
    newest_first: bool = False    # search the unexpected list from its newest end


MPI_RULES = Rules()


def envelope_matches(r: Recv, m: Msg) -> bool:
    return (r.comm == m.comm and (r.src == ANY or r.src == m.src)
            and (r.tag == ANY or r.tag == m.tag))


def find_recv(posted: tuple[Recv, ...], m: Msg, rules: Rules = MPI_RULES) -> int | None:
    """Index in ``posted`` of the receive an arriving message takes, or None."""
    if rules.wildcard_last:
        for i, r in enumerate(posted):
            if not r.wildcard and envelope_matches(r, m):
                return i
        for i, r in enumerate(posted):
            if r.wildcard and envelope_matches(r, m):
                return i
        return None
    for i, r in enumerate(posted):
        if envelope_matches(r, m):
            return i
    return None


def find_msg(unexpected: tuple[Msg, ...], r: Recv, rules: Rules = MPI_RULES) -> int | None:
    """Index in ``unexpected`` of the message a newly posted receive takes, or None."""
    order = range(len(unexpected) - 1, -1, -1) if rules.newest_first else range(len(unexpected))
    for i in order:
        if envelope_matches(r, unexpected[i]):
            return i
    return None


@dataclass(frozen=True)
class Engine:
    posted: tuple[Recv, ...] = ()
    unexpected: tuple[Msg, ...] = ()

    # hashed once: a search state's engine is shared by most of its successors
    __hash__ = hash_once
    __getstate__ = unpickled_hash

    def posted_ids(self) -> tuple[Hashable, ...]:
        return tuple(r.id for r in self.posted)

    def unexpected_ids(self) -> tuple[Hashable, ...]:
        return tuple(m.id for m in self.unexpected)


def post_recv(e: Engine, r: Recv, rules: Rules = MPI_RULES) -> tuple[Engine, Match | None]:
    """A receive is posted: it takes the earliest matching unexpected message, else waits."""
    if any(p.id == r.id for p in e.posted):
        raise TagMatchError(f"receive {r.id!r} is already posted (a request is posted once)")
    i = find_msg(e.unexpected, r, rules)
    if i is None:
        return Engine(e.posted + (r,), e.unexpected), None
    m = e.unexpected[i]
    return Engine(e.posted, e.unexpected[:i] + e.unexpected[i + 1:]), Match(r, m)


def arrive(e: Engine, m: Msg, rules: Rules = MPI_RULES) -> tuple[Engine, Match | None]:
    """A message arrives: it takes the earliest posted matching receive, else is unexpected."""
    if any(u.id == m.id for u in e.unexpected):
        raise TagMatchError(f"message {m.id!r} already arrived (each message arrives once)")
    i = find_recv(e.posted, m, rules)
    if i is None:
        return Engine(e.posted, e.unexpected + (m,)), None
    r = e.posted[i]
    return Engine(e.posted[:i] + e.posted[i + 1:], e.unexpected), Match(r, m)


def cancel(e: Engine, rid: Hashable) -> tuple[Engine, bool]:
    """MPI_Cancel of a receive: succeeds (True) while it is posted; once matched it fails and
    the receive completes normally (False)."""
    for i, r in enumerate(e.posted):
        if r.id == rid:
            return Engine(e.posted[:i] + e.posted[i + 1:], e.unexpected), True
    return e, False


def probe(e: Engine, comm: int, src: int, tag: int, rules: Rules = MPI_RULES) -> Msg | None:
    """MPI_Iprobe: the message a receive with this envelope would take now, without taking it."""
    i = find_msg(e.unexpected, Recv(None, comm, src, tag, 0), rules)
    return None if i is None else e.unexpected[i]


def protocol_for(nbytes: int, eager_limit: int) -> str:
    """Eager up to and including the limit, rendezvous above it."""
    return "eager" if nbytes <= eager_limit else "rndv"
