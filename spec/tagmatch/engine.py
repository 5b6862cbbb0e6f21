"""A fast matching engine with the list semantics of :mod:`verbspec.spec.tagmatch.lists`.

Walking whole lists costs O(n) per operation; a long run of never-matching wildcards or a deep
unexpected list makes that quadratic. Here every receive sits in exactly one of four queues,
chosen by which fields it wildcards, and every unexpected message in four queues, one per way a
receive may select it. Every entry of a queue matches the same envelopes, so only queue heads are
ever candidates; posted and arrival sequence numbers pick the earliest among the heads, which
restores the single-list order exactly. Removal (a match, a cancel) marks the entry dead and the
dead are dropped when they reach a head, so each operation is amortized O(1).

The engine is a mutable object for speed; tests cross-check it against the list engine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from verbspec.spec.tagmatch.lists import ANY, Match, Msg, Recv

# An entry is [seq, item, alive, id]; a list so a match or cancel can mark it dead in place.
_Entry = list


def _head(q: deque | None) -> _Entry | None:
    while q:
        if q[0][2]:
            return q[0]
        q.popleft()
    return None


class FastEngine:
    def __init__(self) -> None:
        self._seq = 0
        # posted receives, by which fields they fix
        self._exact: dict[tuple[int, int, int], deque] = {}
        self._anysrc: dict[tuple[int, int], deque] = {}
        self._anytag: dict[tuple[int, int], deque] = {}
        self._anyall: dict[int, deque] = {}
        self._posted: dict[Hashable, _Entry] = {}
        # unexpected messages, by how a receive may select them
        self._u_exact: dict[tuple[int, int, int], deque] = {}
        self._u_src: dict[tuple[int, int], deque] = {}
        self._u_tag: dict[tuple[int, int], deque] = {}
        self._u_all: dict[int, deque] = {}
        self._unexpected: dict[Hashable, _Entry] = {}

    def post(self, rid: Hashable, comm: int, src: int, tag: int, item: Any) -> Any:
        """Post a receive given by its fields; ``item`` is what the engine stores and hands
        back. Returns the item of the unexpected message it takes, or None."""
        c = comm
        if src == ANY:
            q = self._u_all.get(c) if tag == ANY else self._u_tag.get((c, tag))
        elif tag == ANY:
            q = self._u_src.get((c, src))
        else:
            q = self._u_exact.get((c, src, tag))
        head = _head(q) if q else None
        if head is not None:
            head[2] = False
            del self._unexpected[head[3]]
            return head[1]
        self._seq += 1
        entry = [self._seq, item, True, rid]
        if src == ANY:
            if tag == ANY:
                self._anyall.setdefault(c, deque()).append(entry)
            else:
                self._anysrc.setdefault((c, tag), deque()).append(entry)
        elif tag == ANY:
            self._anytag.setdefault((c, src), deque()).append(entry)
        else:
            self._exact.setdefault((c, src, tag), deque()).append(entry)
        self._posted[rid] = entry
        return None

    def arrive(self, mid: Hashable, comm: int, src: int, tag: int, item: Any) -> Any:
        """A message given by its fields arrives. Returns the item of the receive it takes,
        or None (it joins the unexpected queues)."""
        c = comm
        best = None
        for q in (self._exact.get((c, src, tag)), self._anysrc.get((c, tag)),
                  self._anytag.get((c, src)), self._anyall.get(c)):
            if q:
                h = _head(q)
                if h is not None and (best is None or h[0] < best[0]):
                    best = h
        if best is not None:
            best[2] = False
            del self._posted[best[3]]
            return best[1]
        self._seq += 1
        entry = [self._seq, item, True, mid]
        self._u_exact.setdefault((c, src, tag), deque()).append(entry)
        self._u_src.setdefault((c, src), deque()).append(entry)
        self._u_tag.setdefault((c, tag), deque()).append(entry)
        self._u_all.setdefault(c, deque()).append(entry)
        self._unexpected[mid] = entry
        return None

    def post_recv(self, r: Recv) -> Match | None:
        m = self.post(r.id, r.comm, r.src, r.tag, r)
        return None if m is None else Match(r, m)

    def arrive_msg(self, m: Msg) -> Match | None:
        r = self.arrive(m.id, m.comm, m.src, m.tag, m)
        return None if r is None else Match(r, m)

    def cancel(self, rid: Hashable) -> bool:
        entry = self._posted.pop(rid, None)
        if entry is None:
            return False
        entry[2] = False
        return True

    def probe(self, comm: int, src: int, tag: int) -> Msg | None:
        if src == ANY and tag == ANY:
            q = self._u_all.get(comm)
        elif src == ANY:
            q = self._u_tag.get((comm, tag))
        elif tag == ANY:
            q = self._u_src.get((comm, src))
        else:
            q = self._u_exact.get((comm, src, tag))
        h = _head(q) if q else None
        return None if h is None else h[1]

    def posted(self) -> list[Any]:
        # dicts keep insertion order, which is posted order
        return [e[1] for e in self._posted.values()]

    def unexpected(self) -> list[Any]:
        return [e[1] for e in self._unexpected.values()]
