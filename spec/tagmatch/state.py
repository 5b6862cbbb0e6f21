"""The closed tag-matching system's state: a frozen value, so checkers can hash and share it."""

from __future__ import annotations

from dataclasses import dataclass

from verbspec.spec.fabric import Fabric
from verbspec.spec.tagmatch import lists as tm
from verbspec.spec.tagmatch import offload as off

PENDING, CANCELLED = -1, -2          # receive status; a status >= 0 is the matched message id
OK, TRUNCATED = 1, 2                 # receive completion (0: not complete)
# rendezvous stage of a message
IDLE, NEED_READ, READING, READ_DONE, FIN_SENT, FIN_EARLY = range(6)


@dataclass(frozen=True, slots=True)
class Params:
    senders: int
    messages: int
    receives: int
    tags: int
    comms: int
    max_bytes: int
    eager_limit: int
    capacity: int
    cancel: int
    probe: int


@dataclass(frozen=True, slots=True)
class State:
    msgs: tuple[tm.Msg | None, ...]       # by mid; None until sent
    fabric: Fabric                         # one RC connection per sender (see sender_qp)
    released: tuple[bool, ...]             # by mid: the send completed, its buffer is free
    stage: tuple[int, ...]                 # by mid: rendezvous stage
    recvs: tuple[tm.Recv, ...]             # by rid
    status: tuple[int, ...]                # by rid: PENDING, CANCELLED or matched mid
    completion: tuple[int, ...]            # by rid: 0, OK or TRUNCATED
    arrived: tuple[int, ...]               # mids in the order the matching engine took them in
    engine: tm.Engine | off.Offload
    ghost: tm.Engine | None                # the software engine run alongside an offload


def sender_qp(snd: int) -> int:
    """Sender ``snd``'s end of its RC connection to the receiver; the receiver's end is its
    peer (:func:`verbspec.spec.fabric.peer_of`)."""
    return 2 * snd


def in_flight(s: State, snd: int) -> tuple[int, ...]:
    """The mids whose eager payload or rendezvous header is on sender ``snd``'s wire, oldest
    first."""
    return tuple(m.payload for m in s.fabric.wire[sender_qp(snd)])


@dataclass(frozen=True, slots=True)
class StepObs:
    matches: tuple[tuple[int, int], ...] = ()
    revoked: tuple[tuple[int, int], ...] = ()
    cancelled: tuple[int, ...] = ()
    ghost: tuple[tuple[tuple[int, int], ...], tuple[int, ...]] | None = None
    probe: tuple[tuple[int, int, int], int | None] | None = None
