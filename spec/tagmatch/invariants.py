"""The tag-matching system's invariants, each named after the property it states and declared
with ``@invariant`` (spec/actions.py) on :class:`TagMatchInvariants`, in report order.

Step invariants see the step's observation (the matches, revocations and cancels it made, and
what the software engine made at the same linearization point); state invariants see one state.
"""

from __future__ import annotations

from typing import Protocol

from verbspec.spec.actions import bind_invariants, invariant, invariant_names
from verbspec.spec.lts import Invariant
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch import offload as off
from verbspec.spec.tagmatch.state import (
    CANCELLED,
    FIN_EARLY,
    NEED_READ,
    PENDING,
    READING,
    TRUNCATED,
    Params,
    State,
    StepObs,
    in_flight,
)


def _mpi_matches(r: tm.Recv, m: tm.Msg) -> bool:
    """MPI's matching rule, stated here apart from the list engine's ``envelope_matches``
    that the invariants judge (MPI 4.1, section 3.2.4): a receive matches a message of its own
    communicator whose source is the receive's or any (MPI_ANY_SOURCE), and whose tag is the
    receive's or any (MPI_ANY_TAG); the communicator is never a wildcard."""
    if r.comm != m.comm:
        return False
    source_fits = r.src == m.src or r.src == tm.ANY
    tag_fits = r.tag == m.tag or r.tag == tm.ANY
    return source_fits and tag_fits


class Judged(Protocol):
    """What the invariants read of the system they judge."""

    params: Params
    offload: bool

    def eager(self, m: tm.Msg) -> bool: ...


class TagMatchInvariants:
    """The named invariants of one built system, in report order (they read its parameters and
    variants)."""

    def __init__(self, system: Judged):
        self.system = system
        self.p = system.params

    @invariant(over="step")
    def inv_mpi_order(self, pre: State, name: str, args: tuple, post: State, obs: StepObs):
        """a message takes the earliest posted pending receive that matches it, a receive the
        earliest arrived unexpected message; a probe names that message"""
        if not isinstance(obs, StepObs) or not (obs.matches or obs.probe):
            return None
        taken = _matched(post)
        order = {mid: i for i, mid in enumerate(post.arrived)}
        for rid, mid in obs.matches:
            m, r = post.msgs[mid], post.recvs[rid]
            for rid2 in range(rid):
                if post.status[rid2] == PENDING and _mpi_matches(post.recvs[rid2], m):
                    return (f"message m{mid} went to receive r{rid} while the earlier posted "
                            f"receive r{rid2} that also matches it is still pending")
            for mid2 in post.arrived[:order.get(mid, len(post.arrived))]:
                if mid2 not in taken and _mpi_matches(r, post.msgs[mid2]):
                    return (f"receive r{rid} took message m{mid} while m{mid2}, which "
                            f"arrived earlier and matches it, is still unexpected")
        if obs.probe is not None:
            (comm, src, tag), got = obs.probe
            want = next((mid for mid in post.arrived if mid not in taken and
                         _mpi_matches(tm.Recv(None, comm, src, tag, 0),
                                             post.msgs[mid])), None)
            if got != want:
                return (f"probe({comm}, {src}, {tag}) named m{got} but a receive posted now "
                        f"must take m{want}, the earliest arrived match")
        return None

    @invariant(over="step")
    def inv_non_overtaking(self, pre: State, name: str, args: tuple, post: State, obs: StepObs):
        """no message is matched while an earlier message of the same sender that matches the same
        receive is left unmatched"""
        M = self.p.messages
        if not isinstance(obs, StepObs) or not obs.matches:
            return None
        taken = _matched(post)
        for rid, mid in obs.matches:
            r = post.recvs[rid]
            for mid2 in range(mid - mid % M, mid):
                m2 = post.msgs[mid2]
                if mid2 not in taken and _mpi_matches(r, m2):
                    return (f"sender {m2.src}'s message m{mid} overtook its earlier m{mid2}: "
                            f"both match receive r{rid}, which took m{mid}")
        return None

    @invariant(over="step")
    def inv_match_once(self, pre: State, name: str, args: tuple, post: State, obs: StepObs):
        """every receive and every message is matched at most once; a cancelled receive is never
        matched"""
        if not isinstance(obs, StepObs) or not (obs.matches or obs.cancelled):
            return None
        taken = _matched(pre)
        for rid, mid in obs.matches:
            was = pre.status[rid] if rid < len(pre.status) else PENDING  # posted this step
            if was == CANCELLED:
                return f"receive r{rid} was cancelled, then matched m{mid}"
            if was >= 0:
                return f"receive r{rid} matched twice: m{was}, then m{mid}"

            if mid in taken:
                return f"message m{mid} matched twice"
        for rid in obs.cancelled:
            if pre.status[rid] != PENDING:
                return f"receive r{rid} was cancelled after it matched"
        return None

    @invariant(over="step")
    def inv_offload_refines_software(self, pre: State, name: str, args: tuple, post: State,
                                     obs: StepObs):
        """every step of the offloaded engine produces the matches and cancels the software engine
        produces at its linearization point, leaving the same lists"""
        if post.ghost is None:
            return None   # no offload: the engine is the software engine
        if isinstance(obs, StepObs) and obs.ghost is not None:
            gm, gc = obs.ghost
            if obs.matches != gm or obs.cancelled != gc:
                return (f"{name}: offloaded engine matched {list(obs.matches)} cancelled "
                        f"{list(obs.cancelled)}, software engine matched {list(gm)} "
                        f"cancelled {list(gc)}")
        e, g = post.engine, post.ghost
        if e.pending_ids() != g.posted_ids():
            return (f"pending receives {list(e.pending_ids())} differ from the software "
                    f"engine's {list(g.posted_ids())}")
        if e.unexpected_ids() != g.unexpected_ids():
            return (f"unexpected messages {list(e.unexpected_ids())} differ from the "
                    f"software engine's {list(g.unexpected_ids())}")
        return None

    @invariant
    def inv_no_lost_message(self, s: State):
        """every sent message is in exactly one place (wire, completion queue, unexpected list, a
        matched receive); once nothing is in flight no pending receive matches an unexpected
        message"""
        p, system = self.p, self.system
        seen: dict[int, int] = {}
        places = [mid for snd in range(p.senders) for mid in in_flight(s, snd)]
        places += [st for st in s.status if st >= 0]
        if system.offload:
            places += [m.id for _, m in s.engine.unexpected]
            places += [c.msg.id for c in s.engine.cq if c.msg is not None]
        else:
            places += [m.id for m in s.engine.unexpected]
        for mid in places:
            seen[mid] = seen.get(mid, 0) + 1
        for mid, m in enumerate(s.msgs):
            if m is not None and seen.get(mid, 0) != 1:
                return f"message m{mid} is held in {seen.get(mid, 0)} places, not one"
        quiet = (not any(in_flight(s, snd) for snd in range(p.senders))
                 and (not system.offload or s.engine.quiet()))
        if quiet:
            unexp = (tuple(m for _, m in s.engine.unexpected) if system.offload
                     else s.engine.unexpected)
            for rid, st in enumerate(s.status):
                if st != PENDING:
                    continue
                for m in unexp:
                    if _mpi_matches(s.recvs[rid], m):
                        return (f"receive r{rid} and unexpected message m{m.id} match "
                                f"each other but nothing is left to bring them together")
        return None

    @invariant
    def inv_shadow_consistent(self, s: State):
        """software's shadow covers exactly the receives hardware holds or has completions in flight
        for; hardware holds a head of the posted list within its capacity; the unexpected counts
        agree"""
        p, system = self.p, self.system
        if not system.offload:
            return None
        e = s.engine
        if len(e.hw) > p.capacity:
            return f"hardware holds {len(e.hw)} receives, capacity {p.capacity}"
        shadow = {r.id for r, loc in e.posted if loc != off.SW} | {c.recv.id for c in e.claims}
        for r in e.hw:
            if r.id not in shadow:
                return f"hardware holds receive r{r.id} that software does not shadow"
        explained = ({r.id for r in e.hw} | {o.recv.id for o in e.ops if o.kind == "add"}
                     | {c.recv.id for c in e.cq if c.kind == "match"}
                     | {c.rid for c in e.cq if c.kind == "removed"})
        for rid in shadow:
            if rid not in explained:
                return (f"software shadows receive r{rid} in hardware, but hardware "
                        "neither holds it nor has a completion for it in flight")
        seen_sw = False
        for r, loc in e.posted:
            if loc == off.SW:
                seen_sw = True
            elif seen_sw:
                return (f"receive r{r.id} is in hardware behind a receive kept in "
                        "software: hardware must hold a head of the posted list")
        if e.sw_count + sum(c.kind == "unexpected" for c in e.cq) != e.reported:
            return "software's unexpected count does not account for hardware's reports"
        return None

    @invariant
    def inv_eager_buffer_safety(self, s: State):
        """an eager sender's buffer is released only after its payload left the wire"""
        p, system = self.p, self.system
        for snd in range(p.senders):
            for mid in in_flight(s, snd):
                if s.released[mid] and system.eager(s.msgs[mid]):
                    return (f"sender {snd} may reuse the buffer of eager message m{mid} "
                            "while its payload is still on the wire")
        return None

    @invariant
    def inv_rndv_buffer_safety(self, s: State):
        """a rendezvous sender's buffer is released only after the receiver's READ of it
        completed"""
        for mid, st in enumerate(s.stage):
            if s.released[mid] and st in (NEED_READ, READING, FIN_EARLY):
                return (f"the sender of rendezvous message m{mid} may reuse its buffer "
                        "while the receiver's RDMA READ has not finished reading it")
        return None

    @invariant
    def inv_truncation_reported(self, s: State):
        """a receive completes with a truncation error exactly when its message is longer than its
        buffer"""
        for rid, code in enumerate(s.completion):
            if not code:
                continue
            mid = s.status[rid]
            if mid < 0:
                return f"receive r{rid} completed without a message"
            long = s.msgs[mid].bytes > s.recvs[rid].bytes
            if long and code != TRUNCATED:
                return (f"receive r{rid} ({s.recvs[rid].bytes} bytes) got m{mid} "
                        f"({s.msgs[mid].bytes} bytes) and completed without a truncation "
                        "error")
            if not long and code == TRUNCATED:
                return f"receive r{rid} reported truncation of m{mid}, which fits"
        return None


INVARIANTS = invariant_names(TagMatchInvariants)


def invariants(system: Judged) -> tuple[Invariant, ...]:
    """The named invariants of a built system (they read its parameters and variants)."""
    return bind_invariants(TagMatchInvariants(system))


def _matched(s: State) -> set[int]:
    """The messages matched so far."""
    return {st for st in s.status if st >= 0}
