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

Faults are injected here: drop the next messages this device sends, delay them, complete the
next work request in error, stall, or die (the wire closes, so the peer's NIC sees it).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

from verbspec.spec import fabric as fb

WC_SUCCESS = fb.WC_STATUS_CODE[fb.ST_OK]
WC_LOC_LEN_ERR = fb.WC_STATUS_CODE[fb.ST_LEN]
WC_REM_INV_REQ_ERR = fb.WC_STATUS_CODE[fb.ST_REM_INV]

_FRAME = struct.Struct("<B")      # frame kind, then the message's bytes
_SEND = 1


class DeviceError(RuntimeError):
    """The device is unusable: CQ overflow, a dead wire, a work request it refuses."""


@dataclass(frozen=True)
class Cqe:
    """A work completion as ibv_wc reports it."""

    opcode: str             # "send" | "recv"
    wr_id: int
    status: int             # enum ibv_wc_status
    byte_len: int


@dataclass(frozen=True)
class _Recv:
    wr_id: int
    region: str
    offset: int
    length: int


class SimDevice:
    """One rank's NIC: a UC queue pair on ``wire`` and a CQ, over the rank's memory regions
    (name -> bytearray; work requests address them by name and byte offset)."""

    def __init__(self, wire: socket.socket, regions: dict[str, bytearray], *, cq_depth: int,
                 max_msg: int, rq_depth: int, sq_depth: int) -> None:
        self.wire, self.regions = wire, regions
        self.cq_depth, self.max_msg = cq_depth, max_msg
        self.rq_depth, self.sq_depth = rq_depth, sq_depth
        self.dropped = 0                # messages that arrived to an empty receive queue
        self.delivered = 0
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
        self._nic = threading.Thread(target=self._receive_loop, name="sim-nic", daemon=True)
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
                if self._fail_next:
                    self._fail_next -= 1
                    self._push(Cqe("recv", wr_id, WC_REM_INV_REQ_ERR, 0))
                    continue
                self._rq.append(_Recv(wr_id, region, offset, length))

    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None:
        """Post sends (wr_id, region, offset, length, signaled): each leaves on the wire at
        once and, signaled, completes successfully, as a UC send completes when it leaves."""
        for wr_id, region, offset, length, signaled in wrs:
            with self._lock:
                self._check_usable()
                if length > self.max_msg:
                    raise DeviceError(f"post_send: wr_id {wr_id:#x}: {length} bytes exceed the "
                                      f"{self.max_msg}-byte message cap")
                self._check_range(region, offset, length, "post_send")
                data = bytes(memoryview(self.regions[region])[offset:offset + length]) \
                    if length else b""
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

    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Cqe, ...]:
        """Up to ``n`` completions, oldest first; waits up to ``wait_s`` for the first."""
        with self._lock:
            if not self._cq and wait_s > 0 and self._fatal is None:
                self._arrived.wait(wait_s)
            if self._fatal is not None:
                raise DeviceError(self._fatal)
            out = []
            while self._cq and len(out) < n:
                out.append(self._cq.popleft())
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
        with contextlib.suppress(OSError):
            self.wire.shutdown(socket.SHUT_RDWR)
        self.wire.close()
        self._nic.join(timeout=5)

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

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise DeviceError(self._fatal)

    def _check_range(self, region: str, offset: int, length: int, what: str) -> None:
        mem = self.regions.get(region)
        if mem is None:
            raise DeviceError(f"{what}: no registered region {region!r}")
        if offset < 0 or offset + length > len(mem):
            raise DeviceError(f"{what}: bytes {offset}..{offset + length} lie outside region "
                              f"{region!r} of {len(mem)} bytes")
