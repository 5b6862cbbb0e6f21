"""The ``pyverbs`` transport's pair: where two rank processes meet to run over real RDMA devices.
Rank 0 uses one device, rank 1 another (or the same one: ``rxe_lo`` to itself); each link is a
``VerbsDevice`` (refimpl/transport/verbs_device.py) and a TCP side channel. Made in the parent
before the
fork, as ``SimPair`` is: two TCP listeners on 127.0.0.1, one for the devices' own connection
(queue pair numbers, GIDs, region keys), one for the protocol's side channel. Every setup
connects new ones, rank 1 to rank 0.

``run_pair(target, args, pair=VerbsPair.factory(dev0, dev1))`` (refimpl/library/sim_pair.py) runs
two ranks
over it; pyverbs must be importable in the ranks (Debian's python3-pyverbs on PYTHONPATH).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable

from verbspec.refimpl.transport.sim_device import Regions
from verbspec.refimpl.transport.verbs_device import VerbsDevice

SETUP_TIMEOUT_S = 30.0      # connecting: a rank under emulation may start slowly


class VerbsPair:
    transport = "pyverbs"

    def __init__(self, devices: tuple[str, str]) -> None:
        if len(devices) != 2 or not all(isinstance(d, str) and d for d in devices):
            raise ValueError(f"devices {devices!r}: expected two device names (rank 0's, "
                             f"rank 1's)")
        self.devices = devices
        self.ctl_server = socket.create_server(("127.0.0.1", 0))
        self.side_server = socket.create_server(("127.0.0.1", 0))

    @classmethod
    def factory(cls, device: str, peer_device: str | None = None) -> Callable[[], VerbsPair]:
        """What ``run_pair(pair=...)`` takes: rank 0 on ``device``, rank 1 on ``peer_device``
        (default: the same device)."""
        return functools.partial(cls, (device, peer_device or device))

    def open_device(self, rank: int, regions: Regions, *, qp_type: str,
                    cq_depth: int, max_msg: int, rq_depth: int, sq_depth: int,
                    timeout_s: float) -> tuple[VerbsDevice, socket.socket]:
        """This rank's device, connected to the peer's, and its end of a new side channel."""
        ctl = self._connect(rank, self.ctl_server)
        try:
            side = self._connect(rank, self.side_server)
        except BaseException:
            ctl.close()
            raise
        try:
            # the connection exchange waits for a peer that may still be starting
            device = VerbsDevice(self.devices[rank], ctl, regions, cq_depth=cq_depth,
                                 max_msg=max_msg, rq_depth=rq_depth, sq_depth=sq_depth,
                                 qp_type=qp_type, timeout_s=max(timeout_s, SETUP_TIMEOUT_S))
        except BaseException:
            side.close()
            raise
        device.timeout_s = timeout_s
        return device, side

    @staticmethod
    def _connect(rank: int, server: socket.socket) -> socket.socket:
        if rank == 0:
            server.settimeout(SETUP_TIMEOUT_S)
            sock, _ = server.accept()
        else:
            sock = socket.create_connection(server.getsockname(), timeout=SETUP_TIMEOUT_S)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        self.ctl_server.close()
        self.side_server.close()
