"""The ``sim`` transport's device: one rank's RDMA NIC and queue pair, emulated in the rank's own
process, with the fabric's semantics (spec/fabric.py) executed on real bytes.

Two ranks run in two OS processes joined by a wire: a Unix SEQPACKET socket pair, which keeps
messages in order and whole, as a queue pair's wire does. A NIC thread in each process takes
messages off the wire as they arrive and lands each in the receive at the head of the receive
queue, as the hardware would, whatever the application is doing at that moment:

- UC: a message that finds the receive queue empty is dropped without a word, and the sender's
  send has already completed successfully (``dropped`` counts these at the receiver);
- a message longer than its receive buffer completes that receive with a local length error;
- messages longer than the device's message cap are refused at post time, as the driver does;
- the completion queue holds ``cq_depth`` entries; one more is an overflow, fatal to the device
  (every later poll raises it).

RC (``qp_type="rc"``) adds what a reliable connection does, as spec/fabric.py says:

- a send completes only when the peer's NIC acknowledges it (an ACK frame back on the wire, sent
  when the message lands), so completions follow acknowledgement;
- a send that finds no receive posted is answered RNR (a NAK frame); with rnr_retry 0 the send
  completes with "RNR retry counter exceeded" (13) and the queue pair enters the error state:
  its outstanding and later work requests, and its posted receives, complete flushed (5);
- a message longer than its receive fails the receive with a local length error and puts the
  receiver's queue pair in error; the sender's send fails with "remote invalid request error";
- a frame that reaches a queue pair in error, or a peer whose wire closed, fails the sender's
  work request with "transport retry counter exceeded" (12), which is where a device's retries
  end when nobody answers;
- RDMA READ (``post_read``): the request names a region the peer registered; the peer's NIC
  answers with the bytes, in frames of at most ``READ_SEGMENT`` bytes, and the reader's NIC lands
  them and completes the READ (opcode "read"). A UC device refuses a READ at post time.

In RC mode the NIC thread also sends (ACKs, NAKs, READ responses); nothing on the wire ever
blocks it: frames that do not fit the socket's buffer wait in a queue that the NIC thread sends
as the wire drains, so two NICs answering each other cannot wait on each other.

Faults are injected here: drop the next messages this device sends, delay them, complete the
next work request in error, stall, or die (the wire closes, so the peer's NIC sees it).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

from verbspec.spec import fabric as fb

# a rank's registered memory by name: bytearrays, or anonymous mappings (channel.region)
Regions = dict[str, bytearray | mmap.mmap]

WC_SUCCESS = fb.WC_STATUS_CODE[fb.ST_OK]
WC_LOC_LEN_ERR = fb.WC_STATUS_CODE[fb.ST_LEN]
WC_REM_INV_REQ_ERR = fb.WC_STATUS_CODE[fb.ST_REM_INV]
WC_RNR_RETRY_EXC_ERR = fb.WC_STATUS_CODE[fb.ST_RNR]
WC_WR_FLUSH_ERR = fb.WC_STATUS_CODE[fb.ST_FLUSH]
WC_RETRY_EXC_ERR = fb.WC_STATUS_CODE[fb.ST_RETRY]
STATUS_TEXT = {code: text for text, code in fb.WC_STATUS_CODE.items()}
UC, RC = "uc", "rc"
READ_SEGMENT = 64 * 1024        # the largest READ response frame (a path MTU of sorts)
CLOSE_FLUSH_S = 1.0             # how long closing waits for queued frames to leave

_FRAME = struct.Struct("<B")      # frame kind, then the kind's fields and bytes
_SEND = 1                         # UC: the message; RC: psn, the message
_ACK = 2                          # psn
_NAK = 3                          # psn, ibv_wc_status the sender's work request completes with
_READ_REQ = 4                     # psn, remote offset, length, region name
_READ_RESP = 5                    # psn, offset in the READ, bytes
_PSN = struct.Struct("<Q")
_NAK_FIELDS = struct.Struct("<QB")
_READ_FIELDS = struct.Struct("<QQQ")
_RESP_FIELDS = struct.Struct("<QQ")


class DeviceError(RuntimeError):
    """The device is unusable: CQ overflow, a dead wire, a work request it refuses."""


def check_range(regions: Regions, region: str, offset: int, length: int,
                what: str) -> None:
    """A work request's bytes must lie inside a registered region, as a device checks them
    against the memory region's bounds."""
    mem = regions.get(region)
    if mem is None:
        raise DeviceError(f"{what}: no registered region {region!r}")
    if offset < 0 or offset + length > len(mem):
        raise DeviceError(f"{what}: bytes {offset}..{offset + length} lie outside region "
                          f"{region!r} of {len(mem)} bytes")


def check_read(qp_type: str, max_msg: int, wr_id: int, length: int) -> None:
    """An RDMA READ needs RC and fits the message cap, as a driver refuses it at post time."""
    if qp_type != RC:
        raise DeviceError(f"post_read: wr_id {wr_id:#x}: RDMA READ needs a reliable "
                          f"connection (RC); this queue pair is {qp_type.upper()}")
    if length > max_msg:
        raise DeviceError(f"post_read: wr_id {wr_id:#x}: {length} bytes exceed the "
                          f"{max_msg}-byte message cap")


@dataclass(frozen=True)
class Cqe:
    """A work completion as ibv_wc reports it."""

    opcode: str             # "send" | "recv" | "read"
    wr_id: int
    status: int             # enum ibv_wc_status
    byte_len: int


@dataclass(frozen=True)
class _Recv:
    wr_id: int
    region: str
    offset: int
    length: int


@dataclass
class _Op:
    """An RC work request on the wire, waiting for its ACK, NAK or READ response."""

    opcode: str
    wr_id: int
    length: int
    signaled: bool
    region: str = ""        # a READ: where its bytes land
    offset: int = 0
    got: int = 0            # a READ: bytes landed so far


class SimDevice:
    """One rank's NIC: a queue pair (UC, or RC with ``qp_type="rc"``) on ``wire`` and a CQ, over
    the rank's memory regions (name -> bytearray; work requests address them by name and byte
    offset)."""

    def __init__(self, wire: socket.socket, regions: Regions, *, cq_depth: int,
                 max_msg: int, rq_depth: int, sq_depth: int, qp_type: str = UC) -> None:
        if qp_type not in (UC, RC):
            raise DeviceError(f"qp_type {qp_type!r}: the sim device has {UC!r} and {RC!r}")
        self.qp_type = qp_type
        self.wire, self.regions = wire, regions
        self.cq_depth, self.max_msg = cq_depth, max_msg
        self.rq_depth, self.sq_depth = rq_depth, sq_depth
        self.dropped = 0                # messages that arrived to an empty receive queue
        self.delivered = 0
        # completions polled: successful ones by opcode, and the failed ones
        self.completions = {"send": 0, "recv": 0, "read": 0, "error": 0}
        self._rq: deque[_Recv] = deque()
        self._cq: deque[Cqe] = deque()
        self._fatal: str | None = None
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        # faults
        self._drop_sends = 0            # the next n sends vanish on the wire
        self._delay_s = 0.0             # each send waits this long before leaving
        self._fail_next = 0             # the next n posted work requests complete in error
        self._alive = True
        self._wire_ended = threading.Event()   # the NIC has taken in all the peer sent
        # RC: the queue pair's state, its work requests on the wire by psn (posted order), the
        # frames waiting for room on the wire, and a pipe that wakes the NIC when one is queued
        self.state = "rts"
        self._ended = False             # the NIC has seen the wire end
        self.rnr_naks = 0               # sends this device answered RNR (no receive posted)
        self._psn = 0
        self._ops: dict[int, _Op] = {}
        self._tx: deque[bytes] = deque()
        self._tx_lock = threading.Lock()
        loop = self._receive_loop
        if qp_type == RC:
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            loop = self._rc_loop
        self._nic = threading.Thread(target=loop, name="sim-nic", daemon=True)
        self._nic.start()

    # ------------------------------------------------------------------ verbs
    def post_recv(self, wrs: list[tuple[int, str, int, int]]) -> None:
        """Post receives (wr_id, region, offset, length) at the tail of the receive queue."""
        with self._lock:
            self._check_usable()
            if len(self._rq) + len(wrs) > self.rq_depth:
                raise DeviceError(f"post_recv: the receive queue holds {len(self._rq)} of "
                                  f"{self.rq_depth}; {len(wrs)} more do not fit")
            for wr_id, region, offset, length in wrs:
                self._check_range(region, offset, length, "post_recv")
                if self.state != "rts":
                    self._push(Cqe("recv", wr_id, WC_WR_FLUSH_ERR, 0))
                    continue
                if self._fail_next:
                    self._fail_next -= 1
                    self._push(Cqe("recv", wr_id, WC_REM_INV_REQ_ERR, 0))
                    continue
                self._rq.append(_Recv(wr_id, region, offset, length))

    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None:
        """Post sends (wr_id, region, offset, length, signaled): each leaves on the wire at
        once. UC: a signaled send completes successfully as it leaves. RC: it completes when
        the peer acknowledges it, or in error when the peer refuses it."""
        if self.qp_type == RC:
            self._rc_post_send(wrs)
            return
        for wr_id, region, offset, length, signaled in wrs:
            with self._lock:
                data = self._send_bytes(wr_id, region, offset, length)
                if self._fail_next:
                    self._fail_next -= 1
                    self._push(Cqe("send", wr_id, WC_REM_INV_REQ_ERR, 0))
                    continue
                drop = self._drop_sends > 0
                if drop:
                    self._drop_sends -= 1
                delay = self._delay_s
            if delay:
                time.sleep(delay)
            if not drop:
                try:
                    self.wire.sendall(_FRAME.pack(_SEND) + data)
                except OSError as e:
                    # the peer's NIC is gone; UC does not notice: the send still completes
                    if not isinstance(e, (BrokenPipeError, ConnectionResetError)):
                        raise DeviceError(f"the wire failed: {e}") from e
            if signaled:
                with self._lock:
                    self._push(Cqe("send", wr_id, WC_SUCCESS, length))

    def post_read(self, wr_id: int, local_region: str, local_offset: int, remote_region: str,
                  remote_offset: int, length: int) -> None:
        """RDMA READ ``length`` bytes at ``remote_offset`` of the peer's registered region
        ``remote_region`` into ``local_region`` at ``local_offset`` (RC only); completes with
        opcode "read" once every byte has landed."""
        with self._lock:
            self._check_usable()
            check_read(self.qp_type, self.max_msg, wr_id, length)
            self._check_range(local_region, local_offset, length, "post_read")
            frame = self._rc_post(_Op("read", wr_id, length, True, local_region, local_offset),
                                  _READ_REQ, _READ_FIELDS.pack(0, remote_offset, length)
                                  + remote_region.encode())
        if frame is not None:
            self._transmit(frame)

    def register(self, name: str, mem: bytearray) -> None:
        """Register ``mem`` as region ``name`` (the peer may READ it)."""
        with self._lock:
            self.regions[name] = mem

    def deregister(self, name: str) -> None:
        with self._lock:
            self.regions.pop(name, None)

    @property
    def peer_gone(self) -> bool:
        """Whether the wire has ended: the peer's device is down and all it sent has landed."""
        return self._wire_ended.is_set()

    @property
    def outstanding(self) -> int:
        """RC work requests on the wire, not yet acknowledged or answered."""
        with self._lock:
            return len(self._ops)

    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Cqe, ...]:
        """Up to ``n`` completions, oldest first; waits up to ``wait_s`` for the first."""
        with self._lock:
            if not self._cq and wait_s > 0 and self._fatal is None:
                self._arrived.wait(wait_s)
            if self._fatal is not None:
                raise DeviceError(self._fatal)
            out = []
            while self._cq and len(out) < n:
                c = self._cq.popleft()
                self.completions["error" if c.status != WC_SUCCESS else c.opcode] += 1
                out.append(c)
            return tuple(out)

    @property
    def posted_receives(self) -> int:
        with self._lock:
            return len(self._rq)

    def settle(self, timeout_s: float) -> bool:
        """Wait until every message the peer sent before its device went down has landed
        (at most ``timeout_s``); whether it has."""
        return self._wire_ended.wait(timeout_s)

    # ------------------------------------------------------------------ faults
    def drop_next_sends(self, n: int = 1) -> None:
        with self._lock:
            self._drop_sends += n

    def delay_sends(self, seconds: float) -> None:
        with self._lock:
            self._delay_s = seconds

    def fail_next_work_requests(self, n: int = 1) -> None:
        with self._lock:
            self._fail_next += n

    def overflow_cq(self) -> None:
        """Fill the CQ past its depth with stray completions: the device's fatal error."""
        with self._lock:
            while self._fatal is None:
                self._push(Cqe("recv", 0, WC_SUCCESS, 0))

    def close(self) -> None:
        """Take the device down: the wire closes, so the peer's NIC sees the end."""
        self._alive = False
        if self.qp_type == RC:
            # what the NIC still has to send (answers the peer waits for) leaves first
            deadline = time.monotonic() + CLOSE_FLUSH_S
            while self._tx and time.monotonic() < deadline:
                self._flush_tx()
                time.sleep(0.001)
        with contextlib.suppress(OSError):
            self.wire.shutdown(socket.SHUT_RDWR)
        if self.qp_type == RC:
            self._wake()
        self._nic.join(timeout=5)
        self.wire.close()
        if self.qp_type == RC:
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # ------------------------------------------------------------------ RC: the sender
    def _rc_post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None:
        for wr_id, region, offset, length, signaled in wrs:
            with self._lock:
                data = self._send_bytes(wr_id, region, offset, length)
                frame = self._rc_post(_Op("send", wr_id, length, signaled), _SEND, data)
                drop = frame is not None and self._drop_sends > 0
                if drop:
                    self._drop_sends -= 1
                delay = self._delay_s
            if frame is None or drop:
                continue            # completed at post (flushed or failed), or lost on the wire
            if delay:
                time.sleep(delay)
            self._transmit(frame)

    def _rc_post(self, op: _Op, kind: int, body: bytes) -> bytes | None:
        """Put ``op`` on the send queue (lock held); the frame to transmit, or None when the
        work request completed at once (the queue pair in error, or an injected failure)."""
        if self.state != "rts":
            self._push(Cqe(op.opcode, op.wr_id, WC_WR_FLUSH_ERR, 0))
            return None
        if self._ended:
            self._push(Cqe(op.opcode, op.wr_id, WC_RETRY_EXC_ERR, 0))
            self._enter_error()
            return None
        if self._fail_next:
            self._fail_next -= 1
            self._push(Cqe(op.opcode, op.wr_id, WC_REM_INV_REQ_ERR, 0))
            self._enter_error()
            return None
        if len(self._ops) >= self.sq_depth:
            raise DeviceError(f"post: wr_id {op.wr_id:#x}: the send queue holds "
                              f"{len(self._ops)} of {self.sq_depth} work requests")
        self._psn += 1
        self._ops[self._psn] = op
        if kind == _READ_REQ:
            body = _PSN.pack(self._psn) + body[_PSN.size:]
        else:
            body = _PSN.pack(self._psn) + body
        return _FRAME.pack(kind) + body

    def _enter_error(self) -> None:
        """The queue pair enters the error state (lock held): every outstanding work request
        and every posted receive completes flushed."""
        self.state = "error"
        for op in self._ops.values():
            self._push(Cqe(op.opcode, op.wr_id, WC_WR_FLUSH_ERR, 0))
        self._ops.clear()
        while self._rq:
            self._push(Cqe("recv", self._rq.popleft().wr_id, WC_WR_FLUSH_ERR, 0))

    def _fail_op(self, psn: int, status: int) -> None:
        """The work request ``psn`` fails with ``status``; the queue pair enters error (lock
        held)."""
        op = self._ops.pop(psn, None)
        if op is None:
            return
        self._push(Cqe(op.opcode, op.wr_id, status, 0))
        self._enter_error()

    def _transmit(self, frame: bytes) -> None:
        """Send a frame without ever blocking: what the socket cannot take now waits for the
        NIC thread to send it in order."""
        with self._tx_lock:
            if not self._tx:
                try:
                    self.wire.send(frame, socket.MSG_DONTWAIT)
                    return
                except BlockingIOError:
                    pass
                except OSError as e:
                    if e.errno == errno.EMSGSIZE:
                        raise DeviceError(f"a frame of {len(frame)} bytes does not fit the "
                                          f"wire (max_msg {self.max_msg} is too large for "
                                          f"it)") from None
                    return      # the peer is gone; its end shows at the NIC as the wire's end
            self._tx.append(frame)
        self._wake()

    def _flush_tx(self) -> None:
        with self._tx_lock:
            while self._tx:
                try:
                    self.wire.send(self._tx[0], socket.MSG_DONTWAIT)
                except BlockingIOError:
                    return
                except OSError:
                    self._tx.clear()
                    return
                self._tx.popleft()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    # ------------------------------------------------------------------ RC: the NIC
    def _rc_loop(self) -> None:
        cap = _FRAME.size + _READ_FIELDS.size + max(self.max_msg, READ_SEGMENT) + 4096
        while self._alive:
            with self._tx_lock:
                want_write = [self.wire] if self._tx else []
            try:
                readable, writable, _ = select.select([self.wire, self._wake_r], want_write, [])
            except (OSError, ValueError):
                break
            if self._wake_r in readable:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            if writable:
                self._flush_tx()
            if self.wire not in readable:
                continue
            try:
                frame = self.wire.recv(cap, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                frame = b""
            if not frame:
                break
            self._rc_frame(frame)
        with self._lock:
            # nobody answers any more: what waits for the peer ends as a device's retries do
            self._ended = True
            if self._ops:
                self._fail_op(next(iter(self._ops)), WC_RETRY_EXC_ERR)
        self._wire_ended.set()

    def _rc_frame(self, frame: bytes) -> None:
        """Take one frame in and send what answers it. The answer goes on the wire before the
        lock is let go, so an ACK leaves before the application can see the receive's
        completion (and perhaps close the device)."""
        with self._lock:
            for reply in self._rc_answer(frame):
                self._transmit(reply)

    def _rc_answer(self, frame: bytes) -> list[bytes]:
        """Take one frame in (lock held); the frames to send back."""
        kind = frame[0]
        body = memoryview(frame)[_FRAME.size:]
        if kind == _SEND:
            (psn,) = _PSN.unpack_from(body)
            return [self._rc_land(psn, body[_PSN.size:])]
        if kind == _ACK:
            (psn,) = _PSN.unpack_from(body)
            op = self._ops.pop(psn, None)
            if op is not None and op.signaled:
                self._push(Cqe(op.opcode, op.wr_id, WC_SUCCESS, op.length))
            return []
        if kind == _NAK:
            psn, status = _NAK_FIELDS.unpack_from(body)
            self._fail_op(psn, status)
            return []
        if kind == _READ_REQ:
            psn, offset, length = _READ_FIELDS.unpack_from(body)
            return self._rc_answer_read(psn, bytes(body[_READ_FIELDS.size:]).decode(),
                                        offset, length)
        if kind == _READ_RESP:
            psn, at = _RESP_FIELDS.unpack_from(body)
            self._rc_read_landed(psn, at, body[_RESP_FIELDS.size:])
            return []
        self._fatal = f"the wire carried a frame of unknown kind {kind}"
        self._arrived.notify_all()
        return []

    def _rc_land(self, psn: int, payload: memoryview) -> bytes:
        if self.state != "rts":
            return _FRAME.pack(_NAK) + _NAK_FIELDS.pack(psn, WC_RETRY_EXC_ERR)
        if not self._rq:
            self.rnr_naks += 1
            return _FRAME.pack(_NAK) + _NAK_FIELDS.pack(psn, WC_RNR_RETRY_EXC_ERR)
        wr = self._rq.popleft()
        if len(payload) > wr.length:
            self._push(Cqe("recv", wr.wr_id, WC_LOC_LEN_ERR, len(payload)))
            self._enter_error()
            return _FRAME.pack(_NAK) + _NAK_FIELDS.pack(psn, WC_REM_INV_REQ_ERR)
        self.regions[wr.region][wr.offset:wr.offset + len(payload)] = payload
        self.delivered += 1
        self._push(Cqe("recv", wr.wr_id, WC_SUCCESS, len(payload)))
        return _FRAME.pack(_ACK) + _PSN.pack(psn)

    def _rc_answer_read(self, psn: int, region: str, offset: int, length: int) -> list[bytes]:
        mem = self.regions.get(region)
        if self.state != "rts":
            return [_FRAME.pack(_NAK) + _NAK_FIELDS.pack(psn, WC_RETRY_EXC_ERR)]
        if mem is None or offset + length > len(mem):
            return [_FRAME.pack(_NAK) + _NAK_FIELDS.pack(psn, WC_REM_INV_REQ_ERR)]
        head = _FRAME.pack(_READ_RESP)
        return [head + _RESP_FIELDS.pack(psn, at) + bytes(mem[offset + at:offset + min(
                    length, at + READ_SEGMENT)])
                for at in range(0, max(length, 1), READ_SEGMENT)]

    def _rc_read_landed(self, psn: int, at: int, data: memoryview) -> None:
        op = self._ops.get(psn)
        if op is None:
            return          # flushed meanwhile
        self.regions[op.region][op.offset + at:op.offset + at + len(data)] = data
        op.got += len(data)
        if op.got >= op.length:
            del self._ops[psn]
            self._push(Cqe("read", op.wr_id, WC_SUCCESS, op.length))

    # ------------------------------------------------------------------ the NIC
    def _receive_loop(self) -> None:
        cap = _FRAME.size + self.max_msg
        while self._alive:
            try:
                frame = self.wire.recv(cap)
            except OSError:
                frame = b""
            if not frame:
                self._wire_ended.set()      # the peer's device is gone: nothing more arrives
                return
            payload = memoryview(frame)[_FRAME.size:]
            with self._lock:
                if not self._rq:
                    self.dropped += 1       # UC: no receive posted, the message is lost
                    continue
                wr = self._rq.popleft()
                if len(payload) > wr.length:
                    self._push(Cqe("recv", wr.wr_id, WC_LOC_LEN_ERR, len(payload)))
                    continue
                self.regions[wr.region][wr.offset:wr.offset + len(payload)] = payload
                self.delivered += 1
                self._push(Cqe("recv", wr.wr_id, WC_SUCCESS, len(payload)))

    # ------------------------------------------------------------------ helpers (lock held)
    def _push(self, cqe: Cqe) -> None:
        if self._fatal is not None:
            return
        if len(self._cq) >= self.cq_depth:
            self._fatal = (f"completion queue overflow: {self.cq_depth} entries held and "
                           f"one more arrived (the device is in error)")
        else:
            self._cq.append(cqe)
        self._arrived.notify_all()

    def _send_bytes(self, wr_id: int, region: str, offset: int, length: int) -> bytes:
        """The bytes a send work request carries, after the checks the driver makes at post
        time (the device usable, the message cap, the region's bounds)."""
        self._check_usable()
        if length > self.max_msg:
            raise DeviceError(f"post_send: wr_id {wr_id:#x}: {length} bytes exceed the "
                              f"{self.max_msg}-byte message cap")
        self._check_range(region, offset, length, "post_send")
        return bytes(memoryview(self.regions[region])[offset:offset + length])

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise DeviceError(self._fatal)

    def _check_range(self, region: str, offset: int, length: int, what: str) -> None:
        check_range(self.regions, region, offset, length, what)
