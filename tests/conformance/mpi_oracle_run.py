"""Run random tag-matching cases under a real MPI and record what MPI matched.

Launch: ``mpiexec -n K python -m mpi4py tests/conformance/mpi_oracle_run.py --cases N --seed S
--out F``.
Rank 0 receives; ranks 1..K-1 send. Every case gets fresh communicators, so cases cannot see
each other's messages. Per case, either every receive is posted before any message is sent
("preposted"), or every message is already in the unexpected queue before the first receive is
posted ("unexpected": each sender follows its messages with a fence on every communicator, and
the receiver takes the fences first with receives naming the fence tag only).

Receives are Irecv; completion is by Testsome. Once every message is accounted for (completed
receives plus messages found by Improbe), the receives still pending are cancelled. In these two
modes a message found unexpected can no longer match any pending receive, so the Improbe never
steals a message a receive could take.

Which message a receive got: messages of one sender with one (communicator, tag) are matched in
send order to receives in posted order (MPI's non-overtaking rule within a class the receives
cannot tell apart), so the status's source and tag name the message. A receive that was not
truncated also carries the message's index in its first four bytes, checked against that;
MPICH delivers no data to a truncated receive.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from mpi4py import MPI

# the cases are shared with the tests in tests/ (tagmatch_cases.py)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tagmatch_cases import oracle_case  # noqa: E402

FENCE = 32000
NCOMMS = 2


def payload(m: dict) -> bytearray:
    buf = bytearray(m["bytes"])
    k = int(m["id"].rsplit("m", 1)[1])
    buf[:4] = k.to_bytes(4, "little")
    return buf


def sender(world: MPI.Comm, case: dict, comms: list[MPI.Comm]) -> None:
    msgs = case["senders"].get(world.Get_rank(), [])
    if case["mode"] == "preposted":
        world.Barrier()
    reqs = [comms[m["comm"]].Isend(payload(m), dest=0, tag=m["tag"]) for m in msgs]
    if case["mode"] == "unexpected":
        for c in comms:
            c.Send([bytearray(0), MPI.BYTE], dest=0, tag=FENCE)
    MPI.Request.Waitall(reqs)


def receiver(world: MPI.Comm, case: dict, comms: list[MPI.Comm]) -> dict:
    recvs = case["recvs"]
    total = sum(len(v) for v in case["senders"].values())
    if case["mode"] == "unexpected":
        for s in range(1, world.Get_size()):
            for c in comms:
                c.Recv([bytearray(0), MPI.BYTE], source=s, tag=FENCE)
    bufs = [bytearray(r["bytes"]) for r in recvs]
    reqs = [comms[r["comm"]].Irecv(
        bufs[i], source=MPI.ANY_SOURCE if r["src"] == "any" else r["src"],
        tag=MPI.ANY_TAG if r["tag"] == "any" else r["tag"]) for i, r in enumerate(recvs)]
    if case["mode"] == "preposted":
        world.Barrier()

    completed: dict[int, tuple[int, int, bool, int | None]] = {}   # rid -> src, tag, trunc, k
    leftovers: list[tuple[int, int, int, int]] = []                 # comm, src, tag, k
    status = MPI.Status()
    while len(completed) + len(leftovers) < total:
        live = [i for i, q in enumerate(reqs) if q != MPI.REQUEST_NULL]
        if live:
            statuses = [MPI.Status() for _ in reqs]
            try:
                idx = MPI.Request.Testsome(reqs, statuses)
                done = sorted(idx or [])
            except MPI.Exception as e:
                if e.Get_error_class() != MPI.ERR_IN_STATUS:
                    raise
                # statuses are compacted in index order; the handles show which completed
                done = [i for i in live if reqs[i] == MPI.REQUEST_NULL]
            for j, i in enumerate(done):
                st = statuses[j]
                trunc = st.Get_error() == MPI.ERR_TRUNCATE
                k = None if trunc else int.from_bytes(bufs[i][:4], "little")
                completed[i] = (st.Get_source(), st.Get_tag(), trunc, k)
        for ci, c in enumerate(comms):
            msg = c.Improbe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            if msg is None:
                continue
            buf = bytearray(status.Get_count(MPI.BYTE))
            src, tag = status.Get_source(), status.Get_tag()
            msg.Recv(buf)
            leftovers.append((ci, src, tag, int.from_bytes(buf[:4], "little")))

    pending = []
    for i, q in enumerate(reqs):
        if q != MPI.REQUEST_NULL:
            q.Cancel()
            q.Wait(status)
            if status.Is_cancelled():
                pending.append(recvs[i]["id"])
            else:   # every message is accounted for: nothing may still complete here
                completed[i] = (status.Get_source(), status.Get_tag(), False, None)

    # name each received message: within a (comm, source, tag) class, send order meets
    # posted order
    classes: dict[tuple[int, int, int], list[str]] = {}
    for s, lst in sorted(case["senders"].items()):
        for m in lst:
            classes.setdefault((m["comm"], s, m["tag"]), []).append(m["id"])
    taken: dict[tuple[int, int, int], int] = {}
    matches, notes = {}, []
    for i in sorted(completed):
        src, tag, trunc, k = completed[i]
        key = (recvs[i]["comm"], src, tag)
        n = taken.get(key, 0)
        taken[key] = n + 1
        ids = classes.get(key, [])
        mid = ids[n] if n < len(ids) else f"?{key}"
        if k is not None and mid != f"s{src}m{k}":
            notes.append(f"{recvs[i]['id']}: payload names s{src}m{k}, class order {mid}")
            mid = f"s{src}m{k}"
        matches[recvs[i]["id"]] = [mid, trunc]
    unexpected = sorted(f"s{src}m{k}" for _, src, _, k in leftovers)
    return {"matches": matches, "unexpected": unexpected, "pending": pending, "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    rng = random.Random(args.seed)
    out = open(args.out, "w") if rank == 0 else None   # noqa: SIM115
    t0 = time.perf_counter()
    for n in range(args.cases):
        case = oracle_case(rng, senders=tuple(range(1, size))) if rank == 0 else None
        case = world.bcast(case, root=0)
        comms = [world.Dup() for _ in range(NCOMMS)]
        if rank == 0:
            res = receiver(world, case, comms)
            out.write(json.dumps({"n": n, "case": {**case, "senders": {
                str(k): v for k, v in case["senders"].items()}}, "mpi": res}) + "\n")
        else:
            sender(world, case, comms)
        world.Barrier()
        for c in comms:
            c.Free()
    if rank == 0:
        out.write(json.dumps({"summary": {"cases": args.cases, "ranks": size,
                                          "seconds": time.perf_counter() - t0,
                                          "library": MPI.Get_library_version().splitlines()[0]}})
                  + "\n")
        out.close()


if __name__ == "__main__":
    main()
