"""Setting up a verbs queue pair with pyverbs: the device's resources, the GID a QP sources
from, and the RESET -> INIT -> RTR -> RTS walk towards a peer. Shared by the fabric facts
(refimpl/rxe/facts.py) and the pyverbs transport's device (refimpl/transport/verbs_device.py).

pyverbs is imported inside the functions: this module is importable where it is not installed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PORT = 1
IFF_LOOPBACK = 0x8
UC, RC = "uc", "rc"
RD_ATOMIC = 16              # RDMA READs in flight per QP, at most (capped by the device)
RC_TIMEOUT = 14             # 4.096 us * 2^14: about 67 ms before a retry
RC_RETRY = 7


class VerbsSetupError(RuntimeError):
    """A device could not be opened or a queue pair set up; the message names which."""


@dataclass(frozen=True)
class QpInfo:
    """What a peer needs to connect to a QP: its number, first PSN, source GID, path MTU."""

    qpn: int
    psn: int
    gid: str
    mtu: int                # enum ibv_mtu


@dataclass
class QpResources:
    """One device's context, protection domain, completion queue and queue pair."""

    device: str
    qp_type: str
    ctx: Any
    pd: Any
    cq: Any
    qp: Any
    gid_index: int
    gid: str
    mtu: int
    max_msg: int            # the port's max_msg_sz
    rd_atomic: int          # RDMA READs in flight this QP may have (and answer)

    def info(self, psn: int) -> QpInfo:
        return QpInfo(self.qp.qp_num, psn, self.gid, self.mtu)

    def close(self) -> None:
        for res in (self.qp, self.cq, self.pd, self.ctx):
            res.close()


def open_qp(device: str, qp_type: str, *, cq_depth: int, send_wr: int,
            recv_wr: int) -> QpResources:
    """Open ``device`` and create a UC or RC queue pair on one shared CQ of ``cq_depth``
    entries, with room for ``send_wr`` sends and ``recv_wr`` receives of one SGE each."""
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsError
    from pyverbs.qp import QP, QPCap, QPInitAttr

    if qp_type not in (UC, RC):
        raise VerbsSetupError(f"qp_type {qp_type!r}: expected {UC!r} or {RC!r}")
    try:
        ctx = Context(name=device)
    except PyverbsError as exc:
        raise VerbsSetupError(f"cannot open RDMA device {device!r}: {exc}") from None
    try:
        attr = ctx.query_device()
        port = ctx.query_port(PORT)
        if port.state != e.IBV_PORT_ACTIVE:
            raise VerbsSetupError(f"{device} port {PORT} is not active (state {port.state})")
        for what, want, cap in (("CQ entries", cq_depth, attr.max_cqe),
                                ("send work requests", send_wr, attr.max_qp_wr),
                                ("receive work requests", recv_wr, attr.max_qp_wr)):
            if want > cap:
                raise VerbsSetupError(f"{device}: {want} {what} asked for; the device allows "
                                      f"{cap}")
        pd = PD(ctx)
        cq = CQ(ctx, cq_depth, None, None, 0)
        kind = e.IBV_QPT_UC if qp_type == UC else e.IBV_QPT_RC
        cap = QPCap(max_send_wr=send_wr, max_recv_wr=recv_wr, max_send_sge=1, max_recv_sge=1)
        qp = QP(pd, QPInitAttr(qp_type=kind, scq=cq, rcq=cq, cap=cap))
        index, gid = pick_gid(ctx, device)
        rd = max(1, min(RD_ATOMIC, attr.max_qp_rd_atom, attr.max_qp_init_rd_atom))
        return QpResources(device, qp_type, ctx, pd, cq, qp, index, gid, port.active_mtu,
                           port.max_msg_sz, rd)
    except PyverbsError as exc:
        ctx.close()
        raise VerbsSetupError(f"{device}: setting up a {qp_type.upper()} queue pair: "
                              f"{exc}") from None


def pick_gid(ctx: Any, device: str) -> tuple[int, str]:
    """The GID a QP sources from: the port's IPv6 link-local GID (on a veth end the route is
    that link), but the IPv4-mapped one on a loopback netdev (there index 0 is a link-local GID
    lo does not route: RTR fails with "Network is unreachable")."""
    from pyverbs.pyverbs_error import PyverbsRDMAError

    found: dict[str, tuple[int, str]] = {}
    for index in range(ctx.query_port(PORT).gid_tbl_len):
        try:
            gid = str(ctx.query_gid(PORT, index))
        except PyverbsRDMAError:
            continue
        addr = ipaddress.IPv6Address(gid)
        if addr.is_unspecified:
            continue
        if addr.is_link_local:
            found.setdefault("link-local", (index, gid))
        elif addr.ipv4_mapped is not None:
            found.setdefault("ipv4", (index, gid))
    kinds = ("ipv4",) if on_loopback(device) else ("link-local", "ipv4")
    for kind in kinds:
        if kind in found:
            return found[kind]
    raise VerbsSetupError(f"{device} port {PORT} has neither a link-local nor an IPv4-mapped "
                          "GID")


def on_loopback(device: str) -> bool:
    """Whether the device's netdev is a loopback one (sysfs: the netdev of GID 0, its
    IFF_LOOPBACK flag); False where sysfs does not say (a device that is not RoCE)."""
    ndev = Path(f"/sys/class/infiniband/{device}/ports/{PORT}/gid_attrs/ndevs/0")
    try:
        name = ndev.read_text().strip()
        flags = int(Path(f"/sys/class/net/{name}/flags").read_text(), 16)
    except (OSError, ValueError):
        return False
    return bool(flags & IFF_LOOPBACK)


def connect(res: QpResources, peer: QpInfo, psn: int, *, rnr_retry: int = 7,
            access: int | None = None) -> None:
    """Bring ``res``'s QP from RESET to RTS towards ``peer``, sending from ``psn``. ``access``:
    what the peer may do to this side's memory (default: nothing but local writes)."""
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.pyverbs_error import PyverbsError
    from pyverbs.qp import QPAttr

    rc = res.qp_type == RC
    try:
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.pkey_index = 0
        attr.port_num = PORT
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE if access is None else access
        res.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                      | e.IBV_QP_ACCESS_FLAGS)

        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.path_mtu = min(res.mtu, peer.mtu)
        attr.dest_qp_num = peer.qpn
        attr.rq_psn = peer.psn
        gr = GlobalRoute(dgid=_gid(peer.gid), sgid_index=res.gid_index, hop_limit=64)
        attr.ah_attr = AHAttr(is_global=1, port_num=PORT, gr=gr)
        mask = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                | e.IBV_QP_RQ_PSN)
        if rc:
            attr.max_dest_rd_atomic = res.rd_atomic
            attr.min_rnr_timer = 1
            mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
        res.qp.modify(attr, mask)

        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn = psn
        mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
        if rc:
            attr.timeout = RC_TIMEOUT
            attr.retry_cnt = RC_RETRY
            attr.rnr_retry = rnr_retry
            attr.max_rd_atomic = res.rd_atomic
            mask |= (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                     | e.IBV_QP_MAX_QP_RD_ATOMIC)
        res.qp.modify(attr, mask)
    except PyverbsError as exc:
        raise VerbsSetupError(f"{res.device}: connecting the {res.qp_type.upper()} queue pair "
                              f"to QP {peer.qpn} at {peer.gid}: {exc}") from None


def _gid(text: str) -> Any:
    from pyverbs.addr import GID

    return GID(text)
