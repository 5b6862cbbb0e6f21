"""The ``pyverbs`` transport's device: one rank's queue pair on a real RDMA device, through
Debian's python3-pyverbs, with the calls GateChannel and TaggedEndpoint make of a ``SimDevice``.

- **Memory**: each region (name -> bytearray) is registered as an MR over the bytearray's own
  bytes, so the libraries read and write the very memory the NIC reads and writes. A region of
  no bytes is not registered (a zero-length SEND's SGE carries another region's key).
- **Queue pair**: UC (the gate) or RC (tagged messaging) on one shared CQ of ``cq_depth``
  entries, set up by refimpl/transport/verbs_setup.py. RC uses rnr_retry 0, as the sim device and
  the
  spec's fabric do: a SEND that finds no receive fails at once with RNR retry exceeded.
- **Connection data** travels on a TCP connection of the device's own, opened beside the
  protocol's side channel (which carries only the protocol's items): JSON lines, first this
  QP's number, PSN, GID and path MTU and the regions (address, rkey, length), then, on RC, each
  region registered or deregistered later (a rendezvous payload the peer will READ). A READ
  of a region the peer announced but this side has not read yet waits for the announcement
  (written before the message that names the region was posted, so it comes).
- **Posting**: a chain of work requests is one ibv_post_recv or ibv_post_send call, each WR one
  SGE (region address + offset, length, the region's lkey); sends above the message cap (the
  configuration's, never above the port's max_msg_sz) are refused at post time, as the sim
  device refuses them.
- **Completions**: ``poll`` returns the sim device's ``Cqe`` values: opcode "send", "recv" or
  "read", the wr_id posted, enum ibv_wc_status's number, the byte count.
- **The peer's end**: a real device never says that its peer went away. The device's TCP
  connection does: the peer's device closes it when it closes (or its process dies).
  ``peer_gone`` is that connection ended with nothing left in the CQ; ``settle`` waits for it.
- **Drops**: UC loses a message without a word at either end. Closing, each device tells the
  other how many sends it posted; ``dropped`` is then the peer's sends that never completed a
  receive here (None when the peer's count did not come).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import secrets
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl.transport import verbs_setup as vs
from verbspec.refimpl.transport.sim_device import Cqe, DeviceError, Regions, check_range, check_read

UC, RC = vs.UC, vs.RC
CLOSE_WAIT_S = 10.0         # closing waits this long at most for the peer's counts
POLL_NAP_S = 0.00005        # an empty poll that may wait naps this long between looks
PEER_CHECK_EVERY = 64       # polls between looks at the device's TCP connection (RC)


@dataclass(frozen=True)
class _Region:
    addr: int
    length: int
    lkey: int
    rkey: int


@dataclass(frozen=True)
class _Remote:
    addr: int
    length: int
    rkey: int


class VerbsDevice:
    """One rank's NIC: a UC or RC queue pair on RDMA device ``name``, connected to the peer's
    over ``ctl`` (a TCP socket to the peer's device), over the rank's memory regions."""

    def __init__(self, name: str, ctl: socket.socket, regions: Regions, *,
                 cq_depth: int, max_msg: int, rq_depth: int, sq_depth: int,
                 qp_type: str = UC, timeout_s: float = 10.0) -> None:
        import pyverbs.enums as e

        self.e = e
        self.name, self.ctl, self.qp_type = name, ctl, qp_type
        self.timeout_s = timeout_s
        self.regions: Regions = {}
        self.sent = 0                   # send work requests posted
        self.received = 0               # receives completed successfully
        self.completions = {"send": 0, "recv": 0, "read": 0, "error": 0}
        self.peer_sent: int | None = None
        self._mrs: dict[str, tuple[Any, Any, _Region]] = {}
        self._remote: dict[str, _Remote] = {}
        self._ctl_buf = b""
        self._ctl_ended = False
        self._closed = False
        self._cq_empty = True
        self._polls = 0
        self._opcodes = {e.IBV_WC_SEND: "send", e.IBV_WC_RECV: "recv",
                         e.IBV_WC_RDMA_READ: "read"}
        self.res = vs.open_qp(name, qp_type, cq_depth=cq_depth, send_wr=sq_depth,
                              recv_wr=rq_depth)
        try:
            if max_msg > self.res.max_msg:
                raise DeviceError(f"{name}: the message cap {max_msg} exceeds the port's "
                                  f"max_msg_sz {self.res.max_msg}")
            self.max_msg = max_msg
            access = e.IBV_ACCESS_LOCAL_WRITE
            if qp_type == RC:
                access |= e.IBV_ACCESS_REMOTE_READ
            self._access = access
            for region, mem in regions.items():
                self._register(region, mem)
            psn = secrets.randbelow(1 << 24)
            self._send_ctl({"qp": vars(self.res.info(psn)),
                            "regions": {n: self._announce(n) for n in self._mrs}})
            hello = self._ctl_wait(lambda m: "qp" in m, "its queue pair")
            vs.connect(self.res, vs.QpInfo(**hello["qp"]), psn, rnr_retry=0, access=access)
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------------------ verbs
    def post_recv(self, wrs: list[tuple[int, str, int, int]]) -> None:
        """Post receives (wr_id, region, offset, length) as one chain."""
        from pyverbs.wr import SGE, RecvWR

        chain = []
        for wr_id, region, offset, length in wrs:
            r = self._range(region, offset, length, "post_recv")
            chain.append(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(r.addr + offset, length,
                                                                 r.lkey)]))
        self._post(self.res.qp.post_recv, chain, "post_recv")

    def post_send(self, wrs: list[tuple[int, str, int, int, bool]]) -> None:
        """Post SENDs (wr_id, region, offset, length, signaled) as one chain."""
        from pyverbs.wr import SGE, SendWR

        e = self.e
        chain = []
        for wr_id, region, offset, length, signaled in wrs:
            if length > self.max_msg:
                raise DeviceError(f"post_send: wr_id {wr_id:#x}: {length} bytes exceed the "
                                  f"{self.max_msg}-byte message cap")
            r = self._range(region, offset, length, "post_send")
            chain.append(SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(r.addr + offset, length, r.lkey)],
                                send_flags=e.IBV_SEND_SIGNALED if signaled else 0))
        self._post(self.res.qp.post_send, chain, "post_send")
        self.sent += len(chain)

    def post_read(self, wr_id: int, local_region: str, local_offset: int, remote_region: str,
                  remote_offset: int, length: int) -> None:
        """RDMA READ ``length`` bytes at ``remote_offset`` of the peer's region
        ``remote_region`` into ``local_region`` at ``local_offset`` (RC only)."""
        from pyverbs.wr import SGE, SendWR

        check_read(self.qp_type, self.max_msg, wr_id, length)
        r = self._range(local_region, local_offset, length, "post_read")
        remote = self._remote_region(remote_region)
        if remote_offset < 0 or remote_offset + length > remote.length:
            raise DeviceError(f"post_read: bytes {remote_offset}..{remote_offset + length} lie "
                              f"outside the peer's region {remote_region!r} of "
                              f"{remote.length} bytes")
        wr = SendWR(wr_id=wr_id, opcode=self.e.IBV_WR_RDMA_READ, num_sge=1,
                    sg=[SGE(r.addr + local_offset, length, r.lkey)],
                    send_flags=self.e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(remote.rkey, remote.addr + remote_offset)
        self._post(self.res.qp.post_send, [wr], "post_read")

    def register(self, name: str, mem: bytearray) -> None:
        """Register ``mem`` as region ``name``; on RC the peer is told, so it may READ it."""
        self._register(name, mem)
        if self.qp_type == RC:
            self._send_ctl({"mr": name, **self._announce(name)})

    def deregister(self, name: str) -> None:
        found = self._mrs.pop(name, None)
        self.regions.pop(name, None)
        if found is not None:
            found[0].close()
            if self.qp_type == RC:
                self._send_ctl({"unmr": name})

    def poll(self, n: int, wait_s: float = 0.0) -> tuple[Cqe, ...]:
        """Up to ``n`` completions, oldest first; waits up to ``wait_s`` for the first."""
        from pyverbs.pyverbs_error import PyverbsError

        deadline = None
        while True:
            try:
                got, wcs = self.res.cq.poll(num_entries=n)
            except PyverbsError as exc:
                raise DeviceError(f"{self.name}: polling the CQ: {exc}") from None
            self._cq_empty = got < n
            if got or wait_s <= 0:
                break
            if deadline is None:
                deadline = time.monotonic() + wait_s
            elif time.monotonic() >= deadline:
                break
            time.sleep(POLL_NAP_S)
        self._polls += 1
        if self.qp_type == RC and self._polls % PEER_CHECK_EVERY == 0:
            self._ctl_read(0.0)
        return tuple(self._cqe(wc) for wc in wcs[:got])

    @property
    def peer_gone(self) -> bool:
        """Whether the peer's device has closed (its TCP connection ended) and the CQ holds
        nothing more from it."""
        if not self._ctl_ended:
            self._ctl_read(0.0)
        return self._ctl_ended and self._cq_empty

    def settle(self, timeout_s: float) -> bool:
        """Wait until the peer's device has closed (at most ``timeout_s``): nothing it sent is
        still to land after that. Whether it has."""
        deadline = time.monotonic() + timeout_s
        while not self._ctl_ended and time.monotonic() < deadline:
            self._ctl_read(min(0.05, max(0.0, deadline - time.monotonic())))
        return self._ctl_ended

    @property
    def dropped(self) -> int | None:
        """UC: the peer's sends that never completed a receive here, known once both devices
        closed; None before, or when the peer's count never came."""
        return None if self.peer_sent is None else self.peer_sent - self.received

    def close(self) -> None:
        """Count what is left in the CQ, tell the peer this side's sends, take the queue pair
        down, and learn the peer's sends (at most CLOSE_WAIT_S)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._drain()
            with contextlib.suppress(OSError):
                self._send_ctl({"sent": self.sent})
                self.ctl.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + CLOSE_WAIT_S
            while self.peer_sent is None and not self._ctl_ended \
                    and time.monotonic() < deadline:
                self._ctl_read(0.05)
            self._drain()
        finally:
            self._release()

    # ------------------------------------------------------------------ helpers
    def _cqe(self, wc: Any) -> Cqe:
        status = wc.status
        op = self._opcodes.get(wc.opcode)
        if op is None:      # an error completion's opcode need not be valid
            op = "recv" if wc.opcode & self.e.IBV_WC_RECV else "send"
        if status != self.e.IBV_WC_SUCCESS:
            self.completions["error"] += 1
        else:
            self.completions[op] += 1
            if op == "recv":
                self.received += 1
        return Cqe(op, wc.wr_id, status, wc.byte_len)

    def _drain(self) -> None:
        from pyverbs.pyverbs_error import PyverbsError

        with contextlib.suppress(PyverbsError):
            while True:
                got, wcs = self.res.cq.poll(num_entries=64)
                for wc in wcs[:got]:
                    self._cqe(wc)
                if got < 64:
                    return

    def _post(self, post: Any, chain: list[Any], what: str) -> None:
        from pyverbs.pyverbs_error import PyverbsError

        if not chain:
            return
        for a, b in zip(chain, chain[1:], strict=False):
            a.next_wr = b
        try:
            post(chain[0])
        except PyverbsError as exc:
            raise DeviceError(f"{what}: {self.name} refused a chain of {len(chain)} work "
                              f"requests (first wr_id {chain[0].wr_id:#x}): {exc}") from None

    def _register(self, name: str, mem: bytearray) -> None:
        from pyverbs.mr import MR
        from pyverbs.pyverbs_error import PyverbsError

        if name in self._mrs:
            raise DeviceError(f"register: region {name!r} is registered already")
        self.regions[name] = mem
        if not mem:
            return
        view = (ctypes.c_char * len(mem)).from_buffer(mem)    # holds mem: it cannot resize
        addr = ctypes.addressof(view)
        try:
            mr = MR(self.res.pd, len(mem), self._access, address=addr)
        except PyverbsError as exc:
            raise DeviceError(f"register: {self.name} refused region {name!r} of {len(mem)} "
                              f"bytes: {exc}") from None
        self._mrs[name] = (mr, view, _Region(addr, len(mem), mr.lkey, mr.rkey))

    def _announce(self, name: str) -> dict[str, int]:
        r = self._mrs[name][2]
        return {"addr": r.addr, "length": r.length, "rkey": r.rkey}

    def _range(self, region: str, offset: int, length: int, what: str) -> _Region:
        check_range(self.regions, region, offset, length, what)
        found = self._mrs.get(region)
        if found is not None:
            return found[2]
        # a region of no bytes: pyverbs builds no WR without an SGE, so a zero-length one
        # carries any registered region's key
        for _mr, _view, r in self._mrs.values():
            return _Region(r.addr - offset, 0, r.lkey, r.rkey)
        raise DeviceError(f"{what}: no region is registered to carry a zero-length SGE")

    def _remote_region(self, name: str) -> _Remote:
        if name not in self._remote:
            self._ctl_wait(lambda m: m.get("mr") == name, f"region {name!r}")
        return self._remote[name]

    # ------------------------------------------------------------------ the TCP connection
    def _send_ctl(self, msg: dict[str, Any]) -> None:
        try:
            self.ctl.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        except OSError as exc:
            raise DeviceError(f"{self.name}: the connection to the peer's device failed: "
                              f"{exc}") from None

    def _ctl_wait(self, want: Any, what: str) -> dict[str, Any]:
        """Read the peer's messages until one ``want`` accepts; DeviceError when the
        connection ends or nothing comes within the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            found = None
            for msg in self._ctl_lines():
                self._take(msg)
                if found is None and want(msg):
                    found = msg
            if found is not None:
                return found
            if self._ctl_ended:
                raise DeviceError(f"{self.name}: the peer's device closed before it sent "
                                  f"{what}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceError(f"{self.name}: the peer's device did not send {what} within "
                                  f"{self.timeout_s * 1000:.0f} ms")
            self._ctl_fill(left)

    def _ctl_read(self, wait_s: float) -> None:
        """Take in what the peer's device sent, waiting up to ``wait_s`` for something."""
        if self._ctl_ended and not self._ctl_buf:
            return
        self._ctl_fill(wait_s)
        for msg in self._ctl_lines():
            self._take(msg)

    def _ctl_fill(self, wait_s: float) -> None:
        if self._ctl_ended:
            return
        try:
            ready, _, _ = select.select([self.ctl], [], [], wait_s)
            if not ready:
                return
            data = self.ctl.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._ctl_ended = True
        self._ctl_buf += data

    def _ctl_lines(self) -> list[dict[str, Any]]:
        *lines, self._ctl_buf = self._ctl_buf.split(b"\n")
        try:
            return [json.loads(line) for line in lines if line]
        except ValueError as exc:
            raise DeviceError(f"{self.name}: the peer's device sent something that is not "
                              f"its connection data: {exc}") from None

    def _take(self, msg: dict[str, Any]) -> None:
        for name, r in msg.get("regions", {}).items():
            self._remote[name] = _Remote(r["addr"], r["length"], r["rkey"])
        if "mr" in msg:
            self._remote[msg["mr"]] = _Remote(msg["addr"], msg["length"], msg["rkey"])
        if "unmr" in msg:
            self._remote.pop(msg["unmr"], None)
        if "sent" in msg:
            self.peer_sent = msg["sent"]

    def _release(self) -> None:
        for mr, _view, _r in self._mrs.values():
            with contextlib.suppress(Exception):
                mr.close()
        self._mrs.clear()
        with contextlib.suppress(Exception):
            self.res.close()
        with contextlib.suppress(OSError):
            self.ctl.close()
