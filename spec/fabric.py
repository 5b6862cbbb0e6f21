"""The fabric model: queue pairs, completion queues, the wire and the TCP side channel.

Pure values and pure functions over any number of connections; nothing here knows about a
protocol: payloads and TCP items are the protocol's own values (e.g. spec/gate/wire.py), carried
unread. Queue pairs 2k and 2k+1 are the two ends of connection k, each with its TCP stream
beside it (:func:`peer_of`). The rules that matter:
- UC delivers in order and drops a SEND that finds no posted receive, while the sender's send
  already completed successfully (UC completes a send when it leaves the sender);
- RC completes a send when the responder acknowledges it; with no receive posted the responder
  answers RNR and, with rnr_retry 0, the sender's WR fails and its QP enters the error state;
  the responder accepts nothing past a failed packet, so the messages behind it on the wire
  never land and complete flushed;
- a message longer than the receive buffer completes the receive in error (local length error);
- a CQ holds at most its depth; one more completion is an overflow, a fatal error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verbspec.spec.values import evolve, hash_once, set_item, unpickled_hash

ST_OK = "success"
ST_LEN = "local length error"
ST_RNR = "RNR retry counter exceeded"
ST_FLUSH = "work request flushed"
ST_RETRY = "transport retry counter exceeded"
ST_REM_INV = "remote invalid request error"

# Each status's number in enum ibv_wc_status (<infiniband/verbs.h>), which ds4 prints.
WC_STATUS_CODE = {ST_OK: 0, ST_LEN: 1, ST_FLUSH: 5, ST_REM_INV: 9, ST_RETRY: 12, ST_RNR: 13}


@dataclass(frozen=True)
class RecvWR:
    wr_id: int
    buf: str            # the registered region the buffer lies in (the protocol names them)
    slot: int
    offset: int         # byte offset inside the slot
    length: int
    want: Any           # what the protocol posted this buffer for (ghost)

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class SendWR:
    wr_id: int
    buf: str            # the registered region it reads from
    slot: int
    offset: int
    length: int
    signaled: bool
    payload: Any        # ghost identity of the bytes it carries

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class CQE:
    opcode: str         # "send" | "recv"
    wr_id: int
    status: str
    byte_len: int
    payload: Any        # what landed (recv) or what left (send); ghost

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class Message:
    wr_id: int          # the sender's WR, for RC acknowledgement
    length: int
    payload: Any
    signaled: bool

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class QP:
    qp_type: str                    # "uc" | "rc"
    state: str = "rts"              # "rts" | "error"
    rq: tuple[RecvWR, ...] = ()
    sq: tuple[SendWR, ...] = ()
    cq: tuple[CQE, ...] = ()
    cq_overflow: bool = False

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class Fabric:
    qps: tuple[QP, ...]
    wire: tuple[tuple[Message, ...], ...] = ((), ())    # wire[r]: from QP r to its peer
    tcp: tuple[tuple[Any, ...], ...] = ((), ())         # tcp[r]: items written by r's end
    unsignaled_completions: bool = True    # provider quirk: unsignaled sends complete too

    __hash__ = hash_once
    __getstate__ = unpickled_hash


def new_fabric(qp_type: str, unsignaled_completions: bool, connections: int = 1) -> Fabric:
    """``connections`` connected QP pairs, all of one transport type, idle."""
    if connections < 1:
        raise ValueError(f"a fabric needs at least one connection, not {connections}")
    n = 2 * connections
    return Fabric(tuple(QP(qp_type) for _ in range(n)), wire=((),) * n, tcp=((),) * n,
                  unsignaled_completions=unsignaled_completions)


def peer_of(r: int) -> int:
    """The QP at the other end of QP ``r``'s connection."""
    return r ^ 1


def set_qp(fab: Fabric, r: int, qp: QP) -> Fabric:
    return evolve(fab, qps=set_item(fab.qps, r, qp))


def push_cqe(qp: QP, cqe: CQE, cq_depth: int) -> QP:
    if len(qp.cq) >= cq_depth:
        return evolve(qp, cq_overflow=True, state="error")
    return evolve(qp, cq=qp.cq + (cqe,))


def post_recv(fab: Fabric, r: int, wrs: tuple[RecvWR, ...]) -> Fabric:
    qp = fab.qps[r]
    return set_qp(fab, r, evolve(qp, rq=qp.rq + wrs))


def post_send(fab: Fabric, r: int, wrs: tuple[SendWR, ...]) -> Fabric:
    qp = fab.qps[r]
    return set_qp(fab, r, evolve(qp, sq=qp.sq + wrs))


def completes(fab: Fabric, wr_signaled: bool) -> bool:
    return wr_signaled or fab.unsignaled_completions


def transmit(fab: Fabric, r: int, cq_depth: int) -> Fabric:
    """The sender's NIC takes the head of its send queue onto the wire. UC completes the send
    here, whether or not anybody will receive it."""
    qp = fab.qps[r]
    wr, rest = qp.sq[0], qp.sq[1:]
    msg = Message(wr.wr_id, wr.length, wr.payload, wr.signaled)
    qp = evolve(qp, sq=rest)
    if qp.qp_type == "uc" and completes(fab, wr.signaled):
        qp = push_cqe(qp, CQE("send", wr.wr_id, ST_OK, wr.length, wr.payload), cq_depth)
    fab = set_qp(fab, r, qp)
    return evolve(fab, wire=set_item(fab.wire, r, fab.wire[r] + (msg,)))


def pop_wire(fab: Fabric, src: int) -> tuple[Message, Fabric]:
    msg = fab.wire[src][0]
    return msg, evolve(fab, wire=set_item(fab.wire, src, fab.wire[src][1:]))


@dataclass(frozen=True)
class Delivery:
    """What happened to a message at the receiver: landed (into ``wr``), dropped by UC, too
    long for its buffer, refused with RNR, or lost to a dead receiver."""

    outcome: str        # "landed" | "uc_drop" | "length" | "rnr" | "dead"
    msg: Message
    wr: RecvWR | None = None


def deliver(fab: Fabric, src: int, cq_depth: int, receiver_alive: bool
            ) -> tuple[Fabric, Delivery]:
    msg, fab = pop_wire(fab, src)
    dst = peer_of(src)
    rq_qp, sq_qp = fab.qps[dst], fab.qps[src]
    rc = sq_qp.qp_type == "rc"
    if not receiver_alive:
        # nobody acknowledges: RC retries, then fails the WR; UC never knows
        if rc:
            fab = _fail_rc(fab, src, msg, ST_RETRY, cq_depth)
        return fab, Delivery("dead", msg)
    if not rq_qp.rq or rq_qp.state != "rts":
        if not rc:
            return fab, Delivery("uc_drop", msg)
        # RC with rnr_retry 0: the sender's WR fails and its QP goes to error
        return _fail_rc(fab, src, msg, ST_RNR, cq_depth), Delivery("rnr", msg)
    wr = rq_qp.rq[0]
    rq_qp = evolve(rq_qp, rq=rq_qp.rq[1:])
    if msg.length > wr.length:
        rq_qp = push_cqe(rq_qp, CQE("recv", wr.wr_id, ST_LEN, 0, msg.payload), cq_depth)
        fab = set_qp(fab, dst, evolve(rq_qp, state="error"))
        if rc:
            fab = _fail_rc(fab, src, msg, ST_REM_INV, cq_depth)
        return fab, Delivery("length", msg, wr)
    rq_qp = push_cqe(rq_qp, CQE("recv", wr.wr_id, ST_OK, msg.length, msg.payload), cq_depth)
    fab = set_qp(fab, dst, rq_qp)
    if sq_qp.qp_type == "rc" and completes(fab, msg.signaled):
        sq_qp = push_cqe(sq_qp, CQE("send", msg.wr_id, ST_OK, msg.length, msg.payload),
                         cq_depth)
        fab = set_qp(fab, src, sq_qp)
    return fab, Delivery("landed", msg, wr)


def lose(fab: Fabric, src: int, cq_depth: int) -> Fabric:
    """The wire loses its head message. UC never knows. RC retransmits until its retry count
    runs out, then fails the send as it does toward a dead receiver."""
    msg, fab = pop_wire(fab, src)
    if fab.qps[src].qp_type == "rc":
        fab = _fail_rc(fab, src, msg, ST_RETRY, cq_depth)
    return fab


def _fail_rc(fab: Fabric, src: int, msg: Message, status: str, cq_depth: int) -> Fabric:
    """An RC send fails: its completion carries the error and the QP enters the error state.
    The responder accepts nothing past the failed packet sequence number, so the messages
    behind it on the wire never land: they complete flushed, in order, and so does what is
    still queued."""
    behind = fab.wire[src]
    fab = evolve(fab, wire=set_item(fab.wire, src, ()))
    qp = push_cqe(fab.qps[src], CQE("send", msg.wr_id, status, 0, msg.payload), cq_depth)
    for m in behind:
        qp = push_cqe(qp, CQE("send", m.wr_id, ST_FLUSH, 0, m.payload), cq_depth)
    return set_qp(fab, src, _flush(evolve(qp, state="error"), cq_depth))


def _flush(qp: QP, cq_depth: int) -> QP:
    for wr in qp.sq:
        qp = push_cqe(qp, CQE("send", wr.wr_id, ST_FLUSH, 0, wr.payload), cq_depth)
    return evolve(qp, sq=())


def poll(fab: Fabric, r: int, n: int) -> tuple[tuple[CQE, ...], Fabric]:
    qp = fab.qps[r]
    got, rest = qp.cq[:n], qp.cq[n:]
    return got, set_qp(fab, r, evolve(qp, cq=rest))


def tcp_write(fab: Fabric, r: int, item: Any) -> Fabric:
    return evolve(fab, tcp=set_item(fab.tcp, r, fab.tcp[r] + (item,)))


def tcp_read(fab: Fabric, r: int) -> tuple[Any, Fabric]:
    """Read the next item endpoint ``r`` receives (written by its peer)."""
    src = peer_of(r)
    item = fab.tcp[src][0]
    return item, evolve(fab, tcp=set_item(fab.tcp, src, fab.tcp[src][1:]))
