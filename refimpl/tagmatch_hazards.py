"""Tag-matching engines with a known hazard: the reference engine changed to behave as each of
the spec's named tag-matching variants does, as a transport with that weakness would. Held to
the base spec by the conformance suite, each must be caught.
"""

from __future__ import annotations

from collections.abc import Callable

from verbspec.refimpl.tagmatch_engine import EAGER, Emitted, Packet, TagMatchEngine
from verbspec.spec.tagmatch import variants as tv
from verbspec.spec.tagmatch.offload import SW
from verbspec.spec.tagmatch.state import OK, Params


class OffloadNoSync(TagMatchEngine):
    """The NIC keeps matching after it reported an unexpected message."""

    handshake = False


class WildcardLast(TagMatchEngine):
    """An arriving message tries fully specified receives before wildcard ones."""

    def _arrival_pick(self, p: Packet) -> int | None:
        heads = self.posted.heads(p.comm, p.src, p.tag)
        pool = [h for h in heads if not self._wild(h.key)] or heads
        return min(pool, key=lambda e: e.seq).key if pool else None

    def _shadow_pick(self, m: Packet) -> int | None:
        return self._arrival_pick(m)

    def _wild(self, rid: int) -> bool:
        _, src, tag, _ = self.recvs[rid]
        return src < 0 or tag < 0


class UnexpectedNewestFirst(TagMatchEngine):
    """A new receive (and a probe) takes the newest matching unexpected message."""

    def _unexpected_pick(self, comm: int, src: int, tag: int) -> int | None:
        return self.unexpected.find(comm, src, tag, newest=True)


class NoShadowClaim(TagMatchEngine):
    """A message the NIC reported unexpected is matched against software's own receives
    only, not against its shadow of the NIC's list."""

    def _shadow_pick(self, m: Packet) -> int | None:
        for rid in self.posted.ids():
            comm, src, tag, _ = self.recvs[rid]
            if (self.where[rid] == SW and comm == m.comm and src in (-1, m.src)
                    and tag in (-1, m.tag)):
                return rid
        return None


class OffloadBehindSoftware(TagMatchEngine):
    """A receive goes to the NIC even behind a receive kept in software."""

    head_only = False


class FinBeforeRead(TagMatchEngine):
    """FIN goes out with the READ, not after it completed."""

    def start_read(self, mid: int) -> Emitted:
        out = super().start_read(mid)
        self.fins_out.add(mid)
        return Emitted(reads=out.reads, fins=(mid,))


class EagerCompleteOnPost(TagMatchEngine):
    """An eager send's buffer is released when the send is posted."""

    def _on_post(self, p: Packet) -> tuple[int, ...]:
        if p.kind != EAGER:
            return ()
        self.released[p.mid] = True
        return (p.mid,)


class SilentTruncation(TagMatchEngine):
    """A message longer than its buffer completes the receive as a success."""

    def _code(self, rid: int, mid: int) -> int:
        return OK


HAZARDS: dict[str, type[TagMatchEngine]] = {
    tv.OFFLOAD_NO_SYNC.name: OffloadNoSync, tv.WILDCARD_LAST.name: WildcardLast,
    tv.UNEXPECTED_NEWEST_FIRST.name: UnexpectedNewestFirst,
    tv.NO_SHADOW_CLAIM.name: NoShadowClaim,
    tv.OFFLOAD_BEHIND_SOFTWARE.name: OffloadBehindSoftware,
    tv.FIN_BEFORE_READ.name: FinBeforeRead,
    tv.EAGER_COMPLETE_ON_POST.name: EagerCompleteOnPost,
    tv.SILENT_TRUNCATION.name: SilentTruncation,
}


def hazard(name: str) -> Callable[[Params], TagMatchEngine]:
    """The factory of the engine that behaves as variant ``name``; ValueError if none."""
    if name not in HAZARDS:
        raise ValueError(f"no tag-matching engine behaves as variant {name!r} (known: "
                         f"{', '.join(sorted(HAZARDS))})")
    return HAZARDS[name]
