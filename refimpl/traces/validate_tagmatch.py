"""Device traces of tagged runs (TaggedEndpoint over RC) checked against what the tag-matching
spec says.

The tag-matching spec's closed system (spec/tagmatch/system.py) models senders, a receiver and
its NIC at the level of messages and matches, not of one endpoint's work requests and credits,
so a recorded tagged run does not map onto its steps one for one. What is checked instead,
from both ranks' traces (each send's header is recorded with it, the optional ``hdrs`` key):

- the queue pair's order: each rank's receive completions take its posted receives in order
  (same wr_id, no longer than the buffer); its send and READ completions come in the order
  those were posted; every completion succeeded;
- the wire: the k-th receive completed at a rank is the k-th send its peer posted, of that
  send's length (RC delivers in order and whole);
- matching: each rank's receives (``irecv`` calls) and arriving messages (eager or RTS
  headers, in the order the rank polled them) are run through the spec's list engine
  (spec/tagmatch/lists.py: an arrival takes the earliest posted matching receive, a receive the
  earliest arrived matching message, which is MPI's order), and every completed receive's
  status (source, tag, count, truncation) must be the one its match gives;
- rendezvous: each RTS a rank receives is READ from the sender's ``rndv{mid}`` region in
  pieces of at most ``max_msg`` bytes covering the message exactly, every piece completes,
  and only then does the rank send the FIN for that message.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.read import Event, RankTrace, TraceInputError
from verbspec.refimpl.traces.validate_gate import Report, Violation
from verbspec.spec.tagmatch import lists

HDR_KEYS = ("kind", "src", "comm", "tag", "seq", "mid", "bytes")


@dataclass
class _Rank:
    rank: int
    posted_recvs: deque[tuple[int, int, Event]] = field(default_factory=deque)
    posted_sends: deque[tuple[int, int, Event]] = field(default_factory=deque)
    posted_reads: deque[tuple[int, int, Event]] = field(default_factory=deque)
    sends: list[tuple[int, dict[str, Any] | None]] = field(default_factory=list)
    received: int = 0       # receive completions so far
    engine: lists.Engine = field(default_factory=lists.Engine)
    recvs: dict[int, lists.Recv] = field(default_factory=dict)
    matched: dict[int, lists.Msg] = field(default_factory=dict)
    rts: dict[int, int] = field(default_factory=dict)           # mid -> bytes still to READ
    read_of: dict[int, tuple[int, int]] = field(default_factory=dict)  # READ wr -> (mid, n)
    read_done: set[int] = field(default_factory=set)            # mids fully READ


def _ints(t: RankTrace, e: Event, d: Any, keys: tuple[str, ...], what: str) -> None:
    """TraceInputError unless ``d`` is an object whose ``keys`` that it has are integers."""
    if not isinstance(d, dict) or any(
            k in d and (not isinstance(d[k], int) or isinstance(d[k], bool)) for k in keys):
        raise TraceInputError(f"{t.path}: rank {t.rank} line {e.line}: {what} must be an "
                              f"object whose {', '.join(keys)} are integers")


def _check_tagged(t: RankTrace) -> None:
    """The keys only tagged traces carry, typed."""
    for e in t.events:
        d = e.data
        if e.ev == "post_send" and "hdrs" in d:
            if not isinstance(d["hdrs"], list) or len(d["hdrs"]) != len(d["wrs"]):
                raise TraceInputError(f"{t.path}: rank {t.rank} line {e.line}: hdrs must be "
                                      f"a list of one header (or null) per work request")
            for h in d["hdrs"]:
                if h is not None:
                    _ints(t, e, h, HDR_KEYS[1:], "a header")
                    if h.get("kind") not in ("eager", "rts", "fin"):
                        raise TraceInputError(f"{t.path}: rank {t.rank} line {e.line}: a "
                                              f"header's kind is eager, rts or fin")
        elif e.ev == "call":
            _ints(t, e, d["args"], ("bytes", "source", "dest", "tag", "comm", "rid"),
                  "a call's args")
        elif e.ev == "result" and "status" in d:
            _ints(t, e, d["status"], ("source", "tag", "count"), "a result's status")
        elif e.ev == "post_read" and not isinstance(d["remote"], str):
            raise TraceInputError(f"{t.path}: rank {t.rank} line {e.line}: post_read's "
                                  f"remote must be a region name")


def validate_tagged(ranks: tuple[RankTrace, RankTrace]) -> Report:
    """Check a tagged run's two device traces (see the module's docstring)."""
    t0 = time.perf_counter()
    for t in ranks:
        _check_tagged(t)
    max_msg = ranks[0].config.get("max_msg")
    if not isinstance(max_msg, int) or max_msg < 1:
        raise TraceInputError(f"{ranks[0].path}: config has no max_msg")
    st = [_Rank(0), _Rank(1)]
    # the sends each rank posted, in order, with their headers: what its peer receives
    for t in ranks:
        for e in t.events:
            if e.ev == "post_send":
                hdrs = e.data.get("hdrs") or [None] * len(e.data["wrs"])
                st[t.rank].sends += [(w[3], h) for w, h in zip(e.data["wrs"], hdrs,
                                                                strict=False)]
    rep = Report(ok=False, protocol="tagged")
    counts = {"matches": 0, "eager": 0, "rendezvous": 0, "reads": 0, "fins": 0,
              "receives_completed": 0}
    steps = 0
    try:
        for t in ranks:
            rk, peer = st[t.rank], st[1 - t.rank]
            irecvs = 0
            call: Event | None = None
            for e in t.events:
                steps += 1
                if e.ev == "post_recv":
                    for w in e.data["wrs"]:
                        rk.posted_recvs.append((w[0], w[3], e))
                elif e.ev == "post_send":
                    for w in e.data["wrs"]:
                        rk.posted_sends.append((w[0], w[3], e))
                    for h in e.data.get("hdrs") or ():
                        if h and h.get("kind") == "fin":
                            mid = h.get("mid")
                            if mid not in rk.read_done:
                                raise Violation(t.rank, e, f"FIN for message {mid} before "
                                                           f"every READ of it completed")
                            counts["fins"] += 1
                elif e.ev == "post_read":
                    _post_read(rk, e, max_msg, counts)
                elif e.ev == "poll":
                    for c in e.data["cqes"]:
                        _completion(t.rank, rk, peer, e, c, counts)
                elif e.ev == "call":
                    call = e
                elif e.ev == "result" and call is not None and call.data["name"] == "irecv":
                    if e.data["ok"]:
                        irecvs += 1
                        a = call.data["args"]
                        r = lists.Recv(irecvs, a.get("comm", 0), a.get("source", lists.ANY),
                                       a.get("tag", lists.ANY), a.get("bytes", 0))
                        rk.recvs[irecvs] = r
                        rk.engine, m = lists.post_recv(rk.engine, r)
                        if m is not None:
                            rk.matched[r.id] = m.msg
                            counts["matches"] += 1
                    call = None
                elif e.ev == "result" and call is not None and "status" in e.data:
                    _status(t.rank, rk, e, call.data["args"], counts)
                    call = None
    except Violation as v:
        rep.rank, rep.message = v.rank, str(v)
        if v.event is not None:
            rep.line, rep.event = v.event.line, v.event.text()
        rep.recorded_steps = steps
        rep.seconds = round(time.perf_counter() - t0, 3)
        return rep
    rep.ok = True
    rep.recorded_steps = steps
    rep.detail = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep


def _post_read(rk: _Rank, e: Event, max_msg: int, counts: dict[str, int]) -> None:
    d = e.data
    remote = d["remote"]
    if not remote.startswith("rndv"):
        # a credit READ: the peer's count of reposted buffers
        rk.posted_reads.append((d["wr_id"], d["length"], e))
        return
    try:
        mid = int(remote[4:])
    except ValueError:
        raise Violation(rk.rank, e, f"a READ of region {remote!r}, which no message "
                                    f"names") from None
    if mid not in rk.rts:
        raise Violation(rk.rank, e, f"a READ of message {mid}'s payload, but no rendezvous "
                                    f"header (RTS) of it arrived or is still being READ")
    if d["length"] > max_msg or d["length"] < 1:
        raise Violation(rk.rank, e, f"a READ of {d['length']} bytes; pieces are 1.."
                                    f"{max_msg} bytes (max_msg)")
    rk.rts[mid] -= d["length"]
    if rk.rts[mid] < 0:
        raise Violation(rk.rank, e, f"the READs of message {mid} cover more than its length")
    rk.read_of[d["wr_id"]] = (mid, d["length"])
    rk.posted_reads.append((d["wr_id"], d["length"], e))
    counts["reads"] += 1


def _completion(r: int, rk: _Rank, peer: _Rank, e: Event, c: list[Any],
                counts: dict[str, int]) -> None:
    opcode, wr_id, status, byte_len = c
    if status != 0:
        raise Violation(r, e, f"a {opcode} completion (wr_id {wr_id:#x}) in error, status "
                              f"{status}")
    queue = {"recv": rk.posted_recvs, "send": rk.posted_sends, "read": rk.posted_reads}.get(
        opcode)
    if queue is None:
        raise Violation(r, e, f"a completion of opcode {opcode!r}")
    if not queue:
        raise Violation(r, e, f"a {opcode} completion (wr_id {wr_id:#x}) with no {opcode} "
                              f"posted and not yet complete")
    want_id, length, _ = queue.popleft()
    if want_id != wr_id or (byte_len > length if opcode == "recv" else byte_len != length):
        raise Violation(r, e, f"the next {opcode} to complete is wr_id {want_id:#x} of "
                              f"{length} bytes (RC completes in order), not wr_id {wr_id:#x} "
                              f"of {byte_len}")
    if opcode == "read":
        if wr_id not in rk.read_of:
            return
        mid, _ = rk.read_of.pop(wr_id)
        if rk.rts.get(mid) == 0 and not any(m == mid for m, _ in rk.read_of.values()):
            rk.read_done.add(mid)
            del rk.rts[mid]
        return
    if opcode != "recv":
        return
    k = rk.received
    rk.received += 1
    if k >= len(peer.sends):
        raise Violation(r, e, f"receive completion {k + 1} from rank {peer.rank}, which "
                              f"posted only {len(peer.sends)} sends")
    length, hdr = peer.sends[k]
    if byte_len != length:
        raise Violation(r, e, f"receive completion {k + 1} is {byte_len} bytes; rank "
                              f"{peer.rank}'s send {k + 1} was {length} (RC delivers whole)")
    if hdr is None or hdr.get("kind") == "fin":
        return
    if any(h not in hdr for h in HDR_KEYS):
        raise Violation(r, e, f"rank {peer.rank}'s send {k + 1} has a header without "
                              f"{', '.join(h for h in HDR_KEYS if h not in hdr)}")
    m = lists.Msg(hdr["mid"], hdr["comm"], hdr["src"], hdr["tag"], hdr["bytes"])
    if hdr["kind"] == "rts":
        rk.rts[m.id] = m.bytes
        counts["rendezvous"] += 1
    else:
        counts["eager"] += 1
    rk.engine, match = lists.arrive(rk.engine, m)
    if match is not None:
        rk.matched[match.recv.id] = m
        counts["matches"] += 1


def _status(r: int, rk: _Rank, e: Event, args: dict[str, Any],
            counts: dict[str, int]) -> None:
    """A completed request's status: a receive's must be what its match gives."""
    st = e.data["status"]
    rid = args.get("rid")
    if args.get("send") or not isinstance(rid, int) or rid == 0 or st.get("cancelled"):
        return                      # a send, or a cancelled receive
    if rid not in rk.recvs:
        raise Violation(r, e, f"a status for receive {rid}, which was never posted")
    m = rk.matched.get(rid)
    if m is None:
        raise Violation(r, e, f"receive {rid} completed, but under MPI matching (the spec's "
                              f"list engine) no message has matched it yet")
    rec = rk.recvs[rid]
    want = (m.src, m.tag, min(m.bytes, rec.bytes), m.bytes > rec.bytes)
    got = (st.get("source"), st.get("tag"), st.get("count"), bool(st.get("error")))
    if want != got:
        raise Violation(r, e, f"receive {rid} completed with (source, tag, count, truncated) "
                              f"{got}; its MPI match gives {want}")
    if m.id in rk.rts:
        raise Violation(r, e, f"receive {rid} completed before its rendezvous payload was "
                              f"READ")
    counts["receives_completed"] += 1
