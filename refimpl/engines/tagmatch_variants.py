"""Tag-matching engines with a known weakness: the reference engine changed to behave as each of
the spec's named tag-matching variants does, as a transport with that weakness would. Held to
the base spec by the conformance suite, each must be caught; held to the spec under its own
variant, each must agree with it.

Each also says which steps of its own progress it would take now (``ready``: the READs it
would start, the READs it waits on, the FINs it would send, the NIC's ops, completions and
software's sync), which the harness compares with the steps the spec has enabled. A variant
that only lets the receiver do more (``fin-before-read``: a FIN while the READ still runs)
shows in nothing else: the spec never asks the base protocol for that step.
"""

from __future__ import annotations

from collections.abc import Callable

from verbspec.refimpl.engines.tagmatch_engine import EAGER, Emitted, Packet, TagMatchEngine
from verbspec.spec.tagmatch import variants as tv
from verbspec.spec.tagmatch.offload import SW
from verbspec.spec.tagmatch.state import (
    FIN_EARLY,
    FIN_SENT,
    NEED_READ,
    OK,
    READ_DONE,
    READING,
    Params,
)

Ready = frozenset[tuple[str, tuple[int, ...]]]


class VariantEngine(TagMatchEngine):
    """The reference engine, saying which steps of its own progress it would take now."""

    fin_stages: tuple[int, ...] = (READ_DONE,)    # the stages a FIN may go out at

    def ready(self) -> Ready:
        """(method, arguments) of every step of its own this engine would take now."""
        out: set[tuple[str, tuple[int, ...]]] = set()
        for mid, st in enumerate(self.stage):
            if st == NEED_READ:
                out.add((self.start_read.__name__, (mid,)))
            if st in (READING, FIN_EARLY):
                out.add((self.read_done.__name__, (mid,)))
            if st in self.fin_stages:
                out.add((self.send_fin.__name__, (mid,)))
        nic = self.nic
        if nic is not None:
            for method, now in ((self.hw_op, nic.ops), (self.sw_complete, nic.cq),
                                (self.sw_sync,
                                 self.handshake and self.sent_count < self.sw_count)):
                if now:
                    out.add((method.__name__, ()))
        return frozenset(out)


class OffloadNoSync(VariantEngine):
    """The NIC keeps matching after it reported an unexpected message."""

    handshake = False


class WildcardLast(VariantEngine):
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


class UnexpectedNewestFirst(VariantEngine):
    """A new receive (and a probe) takes the newest matching unexpected message."""

    def _unexpected_pick(self, comm: int, src: int, tag: int) -> int | None:
        return self.unexpected.find(comm, src, tag, newest=True)


class NoShadowClaim(VariantEngine):
    """A message the NIC reported unexpected is matched against software's own receives
    only, not against its shadow of the NIC's list."""

    def _shadow_pick(self, m: Packet) -> int | None:
        for rid in self.posted.ids():
            comm, src, tag, _ = self.recvs[rid]
            if (self.where[rid] == SW and comm == m.comm and src in (-1, m.src)
                    and tag in (-1, m.tag)):
                return rid
        return None


class OffloadBehindSoftware(VariantEngine):
    """A receive goes to the NIC even behind a receive kept in software."""

    head_only = False


class FinBeforeRead(VariantEngine):
    """FIN may go out as soon as the READ has started, while it still reads the sender's
    buffer; the READ's completion then finds its FIN already sent."""

    fin_stages = (READING, READ_DONE)

    def send_fin(self, mid: int) -> Emitted:
        self._mid(mid)
        if self.stage[mid] != READING:
            return super().send_fin(mid)
        self.stage[mid] = FIN_EARLY
        self.fins_out.add(mid)
        return Emitted(fins=(mid,))

    def read_done(self, mid: int) -> Emitted:
        """A READ whose FIN already went out completes its receive all the same."""
        self._mid(mid)
        if self.stage[mid] != FIN_EARLY:
            return super().read_done(mid)
        rid = self._rid_of(mid)
        self.stage[mid] = FIN_SENT
        self.completion[rid] = self._code(rid, mid)
        return Emitted(completions=((rid, self.completion[rid]),))


class EagerCompleteOnPost(VariantEngine):
    """An eager send's buffer is released when the send is posted."""

    def _on_post(self, p: Packet) -> tuple[int, ...]:
        if p.kind != EAGER:
            return ()
        self.released[p.mid] = True
        return (p.mid,)


class SilentTruncation(VariantEngine):
    """A message longer than its buffer completes the receive as a success."""

    def _code(self, rid: int, mid: int) -> int:
        return OK


VARIANT_ENGINES: dict[str, type[VariantEngine]] = {
    tv.OFFLOAD_NO_SYNC.name: OffloadNoSync, tv.WILDCARD_LAST.name: WildcardLast,
    tv.UNEXPECTED_NEWEST_FIRST.name: UnexpectedNewestFirst,
    tv.NO_SHADOW_CLAIM.name: NoShadowClaim,
    tv.OFFLOAD_BEHIND_SOFTWARE.name: OffloadBehindSoftware,
    tv.FIN_BEFORE_READ.name: FinBeforeRead,
    tv.EAGER_COMPLETE_ON_POST.name: EagerCompleteOnPost,
    tv.SILENT_TRUNCATION.name: SilentTruncation,
}


def variant_engine(name: str) -> Callable[[Params], VariantEngine]:
    """The factory of the engine that behaves as variant ``name``; ValueError if none."""
    if name not in VARIANT_ENGINES:
        raise ValueError(f"no tag-matching engine behaves as variant {name!r} (known: "
                         f"{', '.join(sorted(VARIANT_ENGINES))})")
    return VARIANT_ENGINES[name]
