"""Hardware tag-matching offload: a bounded hardware list, its software shadow, and the
unexpected-count handshake that keeps the two from reordering matches.

Two agents share the work. *Hardware* (the NIC) holds the head of the posted-receive list, up to
``capacity`` fully specified receives, and matches arriving messages against it. *Software*
holds everything else: receives kept in software, the unexpected list, and a shadow entry for
every receive it handed to hardware. They talk over two FIFO channels:

- ``ops`` (software -> hardware): ``add`` a receive, ``remove`` a receive, ``sync``; each op
  carries the number of unexpected messages software has handled so far;
- ``cq`` (hardware -> software): ``match`` (hardware matched a receive), ``unexpected`` (no
  hardware receive matched; the message is software's now), ``removed`` (a remove's result: it
  fails when hardware already consumed the tag).

The race the handshake closes (m1 and m2 both match b1, b1 posted between their arrivals): m1
finds no hardware receive and is reported unexpected; before software handles that report, the
application posts b1 and software, seeing no unexpected match, adds b1 to hardware; m2 arrives
and hardware matches it to b1, so b1 takes m2 although m1 came first. The fix has two halves:

- hardware stops matching after reporting an unexpected message, until an op carries a count
  equal to the number of messages it reported (software has seen them all);
- software matches each reported message against its whole shadow list, hardware-held receives
  included, and claims a hardware receive by removing it (hardware is held, so the remove
  cannot lose to a hardware match).

Receives are kept in software when they are wildcards (hardware matches exact tags only), when
an earlier receive is kept in software (hardware must hold a *head* of the posted list, or a
hardware match could overtake an earlier software receive), or when the hardware list is full.
A receive that matches an unexpected message software already holds takes it at once, so it is
never handed to hardware.

Where each operation takes effect (its linearization point) in terms of the software engine of
:mod:`verbspec.spec.tagmatch.lists`: a post and a cancel of a software receive when software
performs them; an arrival when software handles its completion (``match`` or
``unexpected``); a cancel of a hardware receive when software handles the ``removed``
completion. Each software step returns that operation so a checker can run the software engine
alongside and compare.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from verbspec.spec.tagmatch.lists import (
    MPI_RULES,
    Match,
    Msg,
    Recv,
    Rules,
    TagMatchError,
    envelope_matches,
    find_msg,
    find_recv,
)
from verbspec.spec.values import evolve, hash_once, unpickled_hash

# where a pending receive lives, as software's shadow list records it
SW, HW, HW_CANCEL = 0, 1, 2
LOCATION = {SW: "software", HW: "hardware", HW_CANCEL: "hardware, cancel requested"}


@dataclass(frozen=True, slots=True)
class Op:
    """Software -> hardware: ``add`` (recv), ``remove`` (rid) or ``sync``; all carry ``count``."""

    kind: str
    count: int
    recv: Recv | None = None
    rid: Hashable = None


@dataclass(frozen=True, slots=True)
class Cqe:
    """Hardware -> software: ``match`` (recv, msg), ``unexpected`` (msg, seq) or ``removed``
    (rid, ok)."""

    kind: str
    recv: Recv | None = None
    msg: Msg | None = None
    seq: int = 0
    rid: Hashable = None
    ok: bool = False


@dataclass(frozen=True, slots=True)
class Claim:
    """A hardware receive software matched from its shadow list; its slot in hardware is freed
    by a remove whose result has not come back yet."""

    recv: Recv
    msg: Msg
    seq: int
    cancelling: bool   # the remove in flight was the application's cancel


@dataclass(frozen=True)
class Offload:
    capacity: int
    # software
    posted: tuple[tuple[Recv, int], ...] = ()      # pending receives, posted order, location
    unexpected: tuple[tuple[int, Msg], ...] = ()   # (arrival seq, message), arrival order
    claims: tuple[Claim, ...] = ()
    sw_count: int = 0      # unexpected reports software has handled
    sent_count: int = 0    # the count carried by software's latest op
    # hardware
    hw: tuple[Recv, ...] = ()
    reported: int = 0      # unexpected messages hardware has reported
    synced: int = 0        # the count carried by the latest op hardware executed
    arrivals: int = 0
    # channels
    ops: tuple[Op, ...] = ()
    cq: tuple[Cqe, ...] = ()

    # hashed once: a search state's engine is shared by most of its successors
    __hash__ = hash_once
    __getstate__ = unpickled_hash

    @property
    def held(self) -> bool:
        """Hardware does not match while software has not seen every reported message."""
        return self.synced != self.reported

    def pending_ids(self) -> tuple[Hashable, ...]:
        return tuple(r.id for r, _ in self.posted)

    def unexpected_ids(self) -> tuple[Hashable, ...]:
        return tuple(m.id for _, m in self.unexpected)

    def hw_slots_used(self) -> int:
        """Hardware slots as software accounts them: a slot is free again only once software
        knows hardware let go of it."""
        return sum(1 for _, loc in self.posted if loc != SW) + len(self.claims)

    def quiet(self) -> bool:
        return not self.ops and not self.cq


# A linearization: the software-engine operation a step amounts to, or None.
Lin = tuple[str, object] | None


@dataclass(frozen=True, slots=True)
class Outcome:
    matches: tuple[Match, ...] = ()
    revoked: tuple[Match, ...] = ()     # claims hardware overrode (only without the handshake)
    cancelled: tuple[Hashable, ...] = ()
    cancel_failed: tuple[Hashable, ...] = ()


NOTHING = Outcome()


def _op(st: Offload, op: Op) -> Offload:
    return evolve(st, ops=st.ops + (op,), sent_count=op.count)


def offloadable(st: Offload, r: Recv, *, head_only: bool = True) -> bool:
    return (not r.wildcard and st.hw_slots_used() < st.capacity
            and (not head_only or all(loc != SW for _, loc in st.posted)))


def sw_post(st: Offload, r: Recv, rules: Rules = MPI_RULES, *, head_only: bool = True
            ) -> tuple[Offload, Outcome, Lin]:
    """The application posts a receive: software's unexpected list first, then hardware if the
    receive may go there, else software's posted list."""
    if any(p.id == r.id for p, _ in st.posted):
        raise TagMatchError(f"receive {r.id!r} is already posted (a request is posted once)")
    lin = ("post", r)
    i = find_msg(tuple(m for _, m in st.unexpected), r, rules)
    if i is not None:
        m = st.unexpected[i][1]
        return (evolve(st, unexpected=st.unexpected[:i] + st.unexpected[i + 1:]),
                Outcome(matches=(Match(r, m),)), lin)
    if offloadable(st, r, head_only=head_only):
        return _op(evolve(st, posted=st.posted + ((r, HW),)),
                   Op("add", st.sw_count, recv=r)), NOTHING, lin
    return evolve(st, posted=st.posted + ((r, SW),)), NOTHING, lin


def sw_cancel(st: Offload, rid: Hashable) -> tuple[Offload, Outcome, Lin]:
    """MPI_Cancel: immediate for a software receive; for a hardware one a remove is sent and
    the result (cancelled, or matched after all) comes back with its completion."""
    for i, (r, loc) in enumerate(st.posted):
        if r.id != rid:
            continue
        if loc == SW:
            return (evolve(st, posted=st.posted[:i] + st.posted[i + 1:]),
                    Outcome(cancelled=(rid,)), ("cancel", rid))
        if loc == HW_CANCEL:
            raise TagMatchError(f"receive {rid!r} is already being cancelled")
        posted = st.posted[:i] + ((r, HW_CANCEL),) + st.posted[i + 1:]
        return _op(evolve(st, posted=posted), Op("remove", st.sw_count, rid=rid)), NOTHING, None
    return st, Outcome(cancel_failed=(rid,)), ("cancel", rid)


def sw_sync(st: Offload) -> Offload:
    """Tell hardware how many unexpected messages software has handled, so it resumes."""
    return _op(st, Op("sync", st.sw_count))


def hw_arrive(st: Offload, m: Msg, *, handshake: bool = True) -> Offload:
    """A message reaches the NIC: matched against the hardware list unless hardware is held,
    else reported to software as unexpected."""
    seq = st.arrivals
    if not (handshake and st.held):
        for i, r in enumerate(st.hw):
            if envelope_matches(r, m):
                return evolve(st, hw=st.hw[:i] + st.hw[i + 1:], arrivals=seq + 1,
                               cq=st.cq + (Cqe("match", recv=r, msg=m, seq=seq),))
    return evolve(st, reported=st.reported + 1, arrivals=seq + 1,
                   cq=st.cq + (Cqe("unexpected", msg=m, seq=seq),))


def hw_op(st: Offload) -> Offload:
    """Hardware executes the oldest op; any op carrying an up-to-date count releases a hold."""
    op, rest = st.ops[0], st.ops[1:]
    st = evolve(st, ops=rest, synced=op.count)
    if op.kind == "add":
        return evolve(st, hw=st.hw + (op.recv,))
    if op.kind == "remove":
        for i, r in enumerate(st.hw):
            if r.id == op.rid:
                return evolve(st, hw=st.hw[:i] + st.hw[i + 1:],
                               cq=st.cq + (Cqe("removed", rid=op.rid, ok=True),))
        # the tag was consumed by a hardware match whose completion is already queued
        return evolve(st, cq=st.cq + (Cqe("removed", rid=op.rid, ok=False),))
    return st


def _insert_unexpected(unexpected: tuple[tuple[int, Msg], ...], seq: int, m: Msg
                       ) -> tuple[tuple[int, Msg], ...]:
    i = len(unexpected)
    while i > 0 and unexpected[i - 1][0] > seq:
        i -= 1
    return unexpected[:i] + ((seq, m),) + unexpected[i:]


def sw_complete(st: Offload, rules: Rules = MPI_RULES, *, shadow_claims: bool = True
                ) -> tuple[Offload, Outcome, Lin]:
    """Software handles the oldest hardware completion. ``shadow_claims=False`` matches a
    reported message against software-held receives only (a weakened design)."""
    c, st = st.cq[0], evolve(st, cq=st.cq[1:])
    if c.kind == "match":
        r, m = c.recv, c.msg
        for i, (p, _) in enumerate(st.posted):
            if p.id == r.id:
                return (evolve(st, posted=st.posted[:i] + st.posted[i + 1:]),
                        Outcome(matches=(Match(r, m),)), ("arrive", m))
        for i, cl in enumerate(st.claims):
            if cl.recv.id == r.id:
                # Software promised this receive to an earlier message, but hardware has
                # already put m's data in its buffer: the claim is undone and the earlier
                # message goes back to the unexpected list. Only reachable without the hold.
                # The claim stays (now naming m) until the failed remove comes back.
                claim = Claim(r, m, c.seq, cl.cancelling)
                return (evolve(st, claims=st.claims[:i] + (claim,) + st.claims[i + 1:],
                                unexpected=_insert_unexpected(st.unexpected, cl.seq, cl.msg)),
                        Outcome(matches=(Match(r, m),), revoked=(Match(cl.recv, cl.msg),)),
                        ("arrive", m))
        raise TagMatchError(f"hardware matched receive {r.id!r} that software does not "
                            "shadow (the shadow list must cover every hardware receive)")
    if c.kind == "unexpected":
        m = c.msg
        st = evolve(st, sw_count=st.sw_count + 1)
        eligible = [k for k, (_, loc) in enumerate(st.posted) if shadow_claims or loc == SW]
        sub = find_recv(tuple(st.posted[k][0] for k in eligible), m, rules)
        i = None if sub is None else eligible[sub]
        if i is None:
            return (evolve(st, unexpected=_insert_unexpected(st.unexpected, c.seq, m)),
                    NOTHING, ("arrive", m))
        r, loc = st.posted[i]
        st = evolve(st, posted=st.posted[:i] + st.posted[i + 1:])
        if loc == HW:
            # claim it: hardware is held, so this remove cannot lose to a hardware match
            st = _op(evolve(st, claims=st.claims + (Claim(r, m, c.seq, False),)),
                     Op("remove", st.sw_count, rid=r.id))
        elif loc == HW_CANCEL:
            st = evolve(st, claims=st.claims + (Claim(r, m, c.seq, True),))
        return st, Outcome(matches=(Match(r, m),)), ("arrive", m)
    # "removed"
    for i, cl in enumerate(st.claims):
        if cl.recv.id == c.rid:
            st = evolve(st, claims=st.claims[:i] + st.claims[i + 1:])
            if cl.cancelling:
                return st, Outcome(cancel_failed=(c.rid,)), ("cancel", c.rid)
            return st, NOTHING, None
    for i, (p, loc) in enumerate(st.posted):
        if p.id == c.rid and loc == HW_CANCEL and c.ok:
            return (evolve(st, posted=st.posted[:i] + st.posted[i + 1:]),
                    Outcome(cancelled=(c.rid,)), ("cancel", c.rid))
    # hardware matched it before the remove ran; that match was handled already
    return st, Outcome(cancel_failed=(c.rid,)), ("cancel", c.rid)
