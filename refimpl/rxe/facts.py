"""The fabric facts the spec's UC and RC rules rest on, observed on a real verbs device.

Run where pyverbs and an RDMA device are (the rxe guest: docs/verbs.md):
``python -m verbspec.refimpl.rxe.facts [--sender rxe0] [--receiver rxe1]``. It prints one
JSON object; tests/rxe/test_rxe.py asserts on it. Two facts, two queue pairs each, in one process:

- ``uc``: a SEND that finds no posted receive completes successfully at the sender and is never
  delivered; the next SEND, sent after a receive is posted, is delivered with its own payload
  (the spec's fabric: UC drops a SEND that finds no posted receive).
- ``rc``: the same unreceived SEND on RC with rnr_retry 0 ends in an error completion at the
  sender (RNR retry counter exceeded) and the sender's QP goes to the error state.

pyverbs is imported inside the functions: this module is importable where it is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from verbspec.refimpl.transport import verbs_setup

#: queue depths: the experiment never has more than two WRs outstanding on a queue
DEPTH = 8
BUF = 256
#: how long a receiver watches for a completion that must not come, seconds
QUIET = 1.0
#: how long a completion that must come may take (software emulation is slow), seconds
PATIENCE = 20.0
FIRST = b"first: sent with no receive posted"
SECOND = b"second: sent after a receive was posted"
#: written over the receive buffer before posting it, so an untouched buffer shows
SENTINEL = b"\xa5"


@dataclass(frozen=True)
class ObservedCompletion:
    """One work completion, with names instead of numbers."""

    wr_id: int
    status: str
    opcode: str
    byte_len: int


@dataclass(frozen=True)
class UcFact:
    unreceived_send: ObservedCompletion | None
    delivered_while_unposted: list[ObservedCompletion]
    next_send: ObservedCompletion | None
    next_recv: ObservedCompletion | None
    next_payload: str
    later_completions: list[ObservedCompletion]


@dataclass(frozen=True)
class RcFact:
    unreceived_send: ObservedCompletion | None
    receiver_completions: list[ObservedCompletion]
    sender_qp_state: str


class FactQP:
    """One end of a fact's pair: a queue pair of the given type on its own CQ
    (refimpl/transport/verbs_setup.py) and one buffer, brought to RTS against a peer by
    ``connect``."""

    def __init__(self, device: str, qp_type: str) -> None:
        import pyverbs.enums as e
        from pyverbs.mr import MR

        self.e = e
        self.device = device
        self.qp_type = qp_type
        self.res = verbs_setup.open_qp(device, qp_type.lower(), cq_depth=DEPTH * 2,
                                       send_wr=DEPTH, recv_wr=DEPTH)
        self.qp, self.cq = self.res.qp, self.res.cq
        self.mr = MR(self.res.pd, BUF, e.IBV_ACCESS_LOCAL_WRITE)

    def connect(self, peer: FactQP, rnr_retry: int = 7) -> None:
        """RESET -> INIT -> RTR -> RTS towards ``peer``'s QP (both start at PSN 0)."""
        verbs_setup.connect(self.res, peer.res.info(0), 0, rnr_retry=rnr_retry)

    def post_send(self, wr_id: int, payload: bytes) -> None:
        from pyverbs.wr import SGE, SendWR

        self.mr.write(payload, len(payload), 0)
        sge = SGE(self.mr.buf, len(payload), self.mr.lkey)
        self.qp.post_send(SendWR(wr_id=wr_id, opcode=self.e.IBV_WR_SEND, num_sge=1, sg=[sge],
                                 send_flags=self.e.IBV_SEND_SIGNALED))

    def post_recv(self, wr_id: int) -> None:
        from pyverbs.wr import SGE, RecvWR

        self.mr.write(SENTINEL * BUF, BUF, 0)
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(self.mr.buf, BUF,
                                                                  self.mr.lkey)]))

    def completions(self, seconds: float, want: int | None = None) -> list[ObservedCompletion]:
        """What the CQ yields within ``seconds`` (sooner once ``want`` have come)."""
        e = self.e
        got: list[ObservedCompletion] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (want is None or len(got) < want):
            n, wcs = self.cq.poll(num_entries=1)
            if n == 0:
                time.sleep(0.001)
                continue
            for wc in wcs[:n]:
                got.append(ObservedCompletion(wc.wr_id, e.ibv_wc_status(wc.status).name,
                                      e.ibv_wc_opcode(wc.opcode).name, wc.byte_len))
        return got

    def qp_state(self) -> str:
        attr, _ = self.qp.query(self.e.IBV_QP_STATE)
        return self.e.ibv_qp_state(attr.qp_state).name


def _one(cs: list[ObservedCompletion]) -> ObservedCompletion | None:
    return cs[0] if len(cs) == 1 else None


def uc_fact(sender: str, receiver: str) -> UcFact:
    a, b = FactQP(sender, "UC"), FactQP(receiver, "UC")
    a.connect(b)
    b.connect(a)
    a.post_send(1, FIRST)
    first = a.completions(PATIENCE, want=1)
    dropped = b.completions(QUIET)
    b.post_recv(2)
    a.post_send(3, SECOND)
    second = a.completions(PATIENCE, want=1)
    recv = b.completions(PATIENCE, want=1)
    later = a.completions(QUIET) + b.completions(QUIET)
    payload = b.mr.read(recv[0].byte_len, 0) if len(recv) == 1 else b""
    return UcFact(_one(first), dropped, _one(second), _one(recv),
                  bytes(payload).decode(errors="replace"), later)


def rc_fact(sender: str, receiver: str) -> RcFact:
    a, b = FactQP(sender, "RC"), FactQP(receiver, "RC")
    a.connect(b, rnr_retry=0)
    b.connect(a)
    a.post_send(1, FIRST)
    sent = a.completions(PATIENCE, want=1)
    return RcFact(_one(sent), b.completions(QUIET), a.qp_state())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verbspec.refimpl.rxe.facts",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sender", default="rxe0", help="device of the sending QPs")
    parser.add_argument("--receiver", default="rxe1", help="device of the receiving QPs")
    args = parser.parse_args(argv)
    try:
        import pyverbs  # noqa: F401
    except ImportError as exc:
        print(f"verbs_facts: pyverbs cannot be imported ({exc}); install python3-pyverbs and "
              "put its package directory on PYTHONPATH", file=sys.stderr)
        return 2
    result = {"sender": args.sender, "receiver": args.receiver,
              "uc": asdict(uc_fact(args.sender, args.receiver)),
              "rc": asdict(rc_fact(args.sender, args.receiver))}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
