"""The profile ``pyverbs-gate``: the project's Python library ``GateChannel`` over the pyverbs
transport (refimpl/transport/verbs_device.py, verbs_pair.py, verbs_setup.py), two forked rank
processes, as a raw recording of it maps onto the gate spec. Each rule cites the Python source
lines it comes from; the library's own device trace is not used.

A rank process holds two TCP connections of the gate's: the device's control connection (JSON
lines: its queue pair and regions, and at close the sends it posted) and the protocol's side
channel (the channel's hello, then barrier bytes and big-gate headers). It may run other
traffic too (a tagged endpoint after its gate channel: an RC queue pair on a CQ and
connections of its own); the gate's queue pair, CQ and connections are told apart from it,
and what cannot be told apart is refused, named."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verbspec.refimpl.traces.profiles.common import (
    Device,
    Profile,
    ProfileError,
    Region,
    Rule,
    at,
    device_events,
    le,
    registrations,
    same_bytes,
    side_items,
)
from verbspec.refimpl.traces.profiles.tcp import Conn, connections, first_json, json_lines
from verbspec.refimpl.traces.raw import Recording
from verbspec.refimpl.traces.read import Event, RankTrace
from verbspec.spec.gate.constants import BIG_POLL_BATCH, POLL_BATCH
from verbspec.spec.gate.params import PARAMS, make_config
from verbspec.spec.params import ParamError, check_values

DEV = "refimpl/transport/verbs_device.py"
PAIR = "refimpl/transport/verbs_pair.py"
SETUP = "refimpl/transport/verbs_setup.py"
SIDE = "refimpl/transport/side_channel.py"
LIB = "refimpl/library/gate_channel.py"
RANKS = "refimpl/library/sim_pair.py"
ENGINE = "refimpl/engines/gate_engine.py"
# the registrations in order (regions_for's), by the spec's names of the buffers (the send
# side's staging apart, which validate_gate reads as the spec's "stage")
REGIONS = ("in", "out", "stage", "stage_out")
HELLO_MAGIC = 0x48475356        # "VSGH": the channel's hello (magic, window, max_msg)
HELLO_BYTES = 12
GATE_QP = "UC"                  # the gate channel's queue pair (open_channel: qp_type=UC)
ACCESS_LOCAL_WRITE = 1          # a UC device's regions (the peer may not READ them)
SHUT_WR, SHUT_RDWR = 1, 2
DEFAULT = {p.name: p.default for p in PARAMS}

RULES = (
    Rule("the processes that create a UC queue pair", "the two ranks (the parent that forked "
         "them records only its process line); another queue pair of a rank (a tagged "
         "endpoint's RC one) is other traffic, on a CQ of its own",
         f"{RANKS} 123-127, 164-169; {DEV} 93-94"),
    Rule("`tcp_open` how", "rank 0 accepts both connections, rank 1 connects both; each "
         "connection's two ends are the ranks' (local and peer addresses crosswise)",
         f"{PAIR} 47-49, 65-70"),
    Rule("create_qp", "a UC queue pair (qp_type `uc`) on one CQ, of at least the spec's "
         "sq_depth and rq_depth", f"{SETUP} 166-170; {RANKS} 125-127"),
    Rule("create_cq `cqe`", "cq_depth", f"{SETUP} 167; {RANKS} 126"),
    Rule("the four reg_mr after create_qp, in order", "the in-slots, out-slots, receive "
         "staging and send staging (`in`, `out`, `stage`, `stage`), LOCAL_WRITE",
         f"{LIB} 102-108; {DEV} 100-105, 279-295"),
    Rule("reg_mr lengths", "n_slots * vec_bytes (slots: vec_bytes is the in-slots' length over "
         "n_slots), max(big_window(rq_depth) * max_msg, vec_bytes) (staging)",
         f"{LIB} 105-108"),
    Rule("the control connection: the one whose first line written names the rank's queue "
         "pair", "setup: a JSON line {qp: {qpn, psn, gid, mtu}, regions: {name: {addr, length, "
         "rkey}}}; qpn is the rank's own create_qp's, the regions its four registrations by "
         "name, in order; the qpn read is the peer's RTR destination", f"{DEV} 106-110, "
         "297-299, 318-320; {SETUP} 238-250"),
    Rule("the control connection at close", "a JSON line {sent: N}, N the send work requests "
         "the rank posted, then SHUT_WR; no other message (`mr` and `unmr` are an RC "
         "device's)", f"{DEV} 142, 163-175, 228-232"),
    Rule("control lines read", "the lines the peer wrote, byte for byte", f"{DEV} 354-374"),
    Rule("modify_qp INIT, RTR, RTS", "before the spec's setup step; RTR once the peer's queue "
         "pair was read; every post after RTS", f"{DEV} 109-110; {SETUP} 231-262"),
    Rule("the side channel: the connection opened next after the control connection",
         "its first 12 bytes each way: the hello (magic VSGH, window, max_msg), setup; window "
         "and max_msg become the spec's configuration and the hello", f"{PAIR} 47-49; "
         f"{LIB} 177-191"),
    Rule("post_recv / post_send work requests", "the spec's WRs: wr_id as posted, region and "
         "offset from the one SGE's address, length; sends are SEND, signaled as flagged",
         f"{DEV} 116-142"),
    Rule("poll_cq, each for one completion (pyverbs' CQ.poll(n) calls ibv_poll_cq for one at "
         "a time until one comes back empty or n came), in runs that end at an empty poll "
         "(`empty_before`) or at another event", "the library's polls of n each, back to back, "
         "the last short when it holds fewer; each the spec's reap with `max` n: 16 after a "
         "gate's sends, 2 * window + 1 after the drain's dummies (sends from the send staging "
         "with no staging receive posted since the big-gate header), 64 after a big-gate "
         "window's sends; each completion [recv|send, wr_id, status, byte_len], recv when the "
         "opcode is a receive's", f"{DEV} 177-198; {LIB} 356-361, 396-399, 421-425; "
         f"{ENGINE} 620-625"),
    Rule("a 32-byte write starting with the magic DS4B", "a big-gate header item (number, "
         "chunks, depth)", f"{SIDE} 314-320"),
    Rule("any other byte written", "a barrier byte item", f"{SIDE} 314-316"),
    Rule("side-channel bytes read", "the items the peer wrote, byte for byte, each read where "
         "its last byte arrives", f"{SIDE} 322-336"),
    Rule("the side channel shut down (SHUT_RDWR) and closed, after the device's close",
         "close: no spec step; the rank's end (its process leaves by os._exit, so the "
         "recorder writes no end line)", f"{RANKS} 134-138; {SIDE} 361-364"),
    Rule("everything else (timeout_ms and the spec's other parameters)", "the library's "
         "defaults, which are the spec's own (gate_config validates the spec's PARAMS); "
         "`--param` sets what differs (VERBSPEC_GATE_TIMEOUT_MS is not in the recording)",
         f"{LIB} 75-89"),
)


@dataclass
class _Rank:
    """One rank's process, read as the library's over pyverbs."""

    rec: Recording
    rank: int
    dev: Device
    ctl: Conn
    side: Conn
    said: list[tuple[int, dict[str, Any]]]      # control lines written
    hello: tuple[int, int]                       # window, max_msg

    @property
    def qpn(self) -> int:
        return self.dev.qpn


def _gate_qp(rec: Recording) -> Event:
    qps = [e for e in rec.of("create_qp") if e.data["qp_type"] == GATE_QP]
    failed = [e for e in qps if "errno" in e.data]
    if failed:
        raise at(rec, failed[0], f"the create_qp failed (errno {failed[0].data['errno']}): the "
                                 f"library did not get as far as a run")
    if len(qps) != 1:
        raise at(rec, qps[1], f"{len(qps)} UC queue pairs in one process; a rank's gate "
                              f"channel has one ({RANKS} 125-127) and two cannot be told apart")
    return qps[0]


def _gate_cq(rec: Recording, qp: Event) -> Event:
    if qp.data["send_cq"] != qp.data["recv_cq"]:
        raise at(rec, qp, f"the queue pair's send and receive CQs differ; the library's share "
                          f"one ({SETUP} 167-170)")
    cqs = [e for e in rec.of("create_cq") if e.line < qp.line and e.data.get("cq")
           == qp.data["send_cq"]]
    if not cqs:
        raise at(rec, qp, "the queue pair's CQ was never created in this process")
    cq = cqs[-1]
    for e in rec.of("create_qp"):
        if e is not qp and cq.data["cq"] in (e.data.get("send_cq"), e.data.get("recv_cq")) \
                and e.line > cq.line and _alive(rec, "destroy_cq", "cq", cq, e.line):
            raise at(rec, e, f"another queue pair (qpn {e.data.get('qp_num')}) on the gate's "
                             f"CQ: their completions cannot be told apart")
    return cq


def _alive(rec: Recording, ev: str, key: str, made: Event, line: int) -> bool:
    """Whether the object ``made`` created is not destroyed before ``line``."""
    return not any(made.line < e.line < line and e.data[key] == made.data[key]
                   for e in rec.of(ev))


def _regions(rec: Recording, qp: Event, announced: Event) -> list[Region]:
    mrs = [e for e in rec.of("reg_mr") if qp.line < e.line < announced.line]
    return registrations(
        rec, mrs, REGIONS, qp,
        f" between the queue pair and its announcement; the library registers "
        f"{len(REGIONS)}: {', '.join(REGIONS)} ({LIB} 102-108; {DEV} 104-105)",
        ACCESS_LOCAL_WRITE, f"a UC device's regions are LOCAL_WRITE only ({DEV} 100-103)")


def _rank_of(rec: Recording) -> _Rank:
    qp = _gate_qp(rec)
    cq = _gate_cq(rec, qp)
    conns = connections(rec)
    # a device's first line names its queue pair (a later queue pair may reuse the number)
    ctl = [c for c in conns if _qpn_of(first_json(c)) == qp.data["qp_num"]
           and qp.line < c.out.lines[0] and _alive(rec, "destroy_qp", "qp_num", qp,
                                                    c.out.lines[0])]
    if len(ctl) != 1:
        raise at(rec, qp, f"{len(ctl)} control connections announce the queue pair "
                          f"{qp.data['qp_num']}; the device has one ({DEV} 106-108)")
    c = ctl[0]
    later = [k for k in conns if k.opened.line > c.opened.line]
    if not later:
        raise at(rec, c.opened, f"no side channel opened after the control connection "
                                f"({PAIR} 47-49)")
    side = later[0]
    hows = {c.opened.data["how"], side.opened.data["how"]}
    if len(hows) != 1 or not hows <= {"accept", "connect"}:
        raise at(rec, side.opened, f"the connections were opened {sorted(hows)}; a rank "
                                   f"accepts both (rank 0) or connects both ({PAIR} 65-70)")
    first = next(e for e in rec.events if e.ev == "tcp" and e.data["fd"] == c.fd
                 and e.data["dir"] == "out" and e.line >= c.opened.line)
    regions = _regions(rec, qp, first)
    out = side.out.data
    if len(out) < HELLO_BYTES or le(out, 0, 4) != HELLO_MAGIC:
        raise at(rec, side.opened, f"the side channel does not begin with the channel's hello "
                                   f"(magic {HELLO_MAGIC:#010x}; {LIB} 182)")
    return _Rank(rec, 0 if "accept" in hows else 1, Device(qp, cq, regions, f"{DEV} 138"),
                 c, side, json_lines(c.out, rec, f"{DEV} 318-320"), (le(out, 4, 4), le(out, 8, 4)))


def _qpn_of(msg: dict[str, Any] | None) -> Any:
    qp = msg.get("qp") if msg is not None else None
    return qp.get("qpn") if isinstance(qp, dict) else None


def _check_control(me: _Rank, peer: _Rank) -> None:
    """The device's JSON lines: its queue pair and regions first, at close its sends, and
    nothing else; what it read is what the peer wrote, and RTR goes to the peer's pair."""
    rec, said = me.rec, me.said
    line, hello = said[0]
    ann = hello.get("regions")
    if not isinstance(ann, dict) or list(ann) != list(REGIONS):
        raise ProfileError(f"{rec.path} line {line}: the device announced regions "
                           f"{list(ann) if isinstance(ann, dict) else ann!r}; the library's "
                           f"are {', '.join(REGIONS)} in order ({LIB} 106-108; {DEV} 108)")
    mrs = {g.name: e for g, e in zip(me.dev.regions, [e for e in rec.of("reg_mr")
                                                       if e.line > me.dev.qp.line], strict=False)}
    for name, r in ann.items():
        e = mrs[name]
        if (r.get("addr"), r.get("length"), r.get("rkey")) != \
                (e.data["addr"], e.data["length"], e.data.get("rkey")):
            raise ProfileError(f"{rec.path} line {line}: region {name} announced as {r}; "
                               f"line {e.line} registered it at {e.data['addr']}, "
                               f"{e.data['length']} bytes, rkey {e.data.get('rkey')} "
                               f"({DEV} 297-299)")
    posted = sum(len(e.data["wrs"]) for e in rec.of("post_send")
                 if e.data["qp_num"] == me.qpn and e.data["rc"] == 0
                 and me.dev.qp.line < e.line
                 and _alive(rec, "destroy_qp", "qp_num", me.dev.qp, e.line))
    for k, (line, msg) in enumerate(said[1:], 1):
        if set(msg) != {"sent"}:
            kind = "an RC device's region message" if {"mr", "unmr"} & set(msg) \
                else "a control message of an unknown kind"
            raise ProfileError(f"{rec.path} line {line}: {kind} ({json.dumps(msg)[:80]}); "
                               f"the gate's UC device writes its queue pair and regions, then "
                               f"at close its sends ({DEV} 106-108, 166-175, 231)")
        if k != len(said) - 1 or msg["sent"] != posted:
            raise ProfileError(f"{rec.path} line {line}: the device said it sent "
                               f"{msg['sent']} as its message {k + 1} of {len(said)}; it "
                               f"posted {posted} sends, and says so once, last ({DEV} 142, "
                               f"231)")
    same_bytes(me.ctl.out, peer.ctl.inn, me.rec, peer.rec)
    states = [e for e in rec.of("modify_qp") if e.data["qp_num"] == me.qpn]
    if [e.data["state"] for e in states] != ["INIT", "RTR", "RTS"] or \
            any(e.data["rc"] for e in states):
        raise at(rec, states[-1] if states else me.dev.qp, f"queue pair states "
                 f"{[e.data['state'] for e in states]}; the device moves it INIT, RTR, RTS "
                 f"once ({SETUP} 231-262)")
    rtr = states[1]
    if rtr.data.get("dest_qp_num") != peer.qpn:
        raise at(rec, rtr, f"RTR toward queue pair {rtr.data.get('dest_qp_num')}; the peer's "
                           f"is {peer.qpn} ({SETUP} 240)")
    got = me.ctl.inn.data.find(b"\n")
    if got < 0 or me.ctl.inn.lines[got] > rtr.line:
        raise at(rec, rtr, f"RTR before the peer's queue pair was read ({DEV} 109-110)")
    shut = me.ctl.shutdowns
    if said[-1][1].keys() == {"sent"} and (
            [e.data["how"] for e in shut] != [SHUT_WR] or shut[0].line < said[-1][0]):
        raise at(rec, shut[0] if shut else None, f"the control connection is not shut down "
                                                 f"(SHUT_WR) once after the device's sends "
                                                 f"({DEV} 231-232)")


def _check_pairing(a: _Rank, b: _Rank) -> None:
    """Each connection's two ends are the two ranks'."""
    for what, x, y in (("control connection", a.ctl, b.ctl), ("side channel", a.side, b.side)):
        if (x.opened.data["local"], x.opened.data["peer"]) != \
                (y.opened.data["peer"], y.opened.data["local"]):
            raise at(a.rec, x.opened, f"its {what} ({x.opened.data['local']} to "
                                      f"{x.opened.data['peer']}) is not {b.rec.path}'s "
                                      f"({y.opened.data['local']} to {y.opened.data['peer']}; "
                                      f"{PAIR} 47-49)")


def _end(rk: _Rank) -> int | None:
    """The rank's close: its side channel shut down both ways and closed, after the device's
    close (sim_pair.close_channel). None when it never closed (it stopped early: where, the
    validator judges)."""
    s = rk.side
    if s.closed is None:
        return None
    shut = [e.data["how"] for e in s.shutdowns]
    if shut not in ([], [SHUT_RDWR]) or (s.out.lines and s.out.lines[-1] > s.closed.line):
        raise at(rk.rec, s.closed, f"a side channel closed other than by one SHUT_RDWR after "
                                   f"its last write ({SIDE} 361-364)")
    return s.closed.line


def _select(rk: _Rank) -> Any:
    """The gate device's posts and polls: its queue pair's from create to destroy, its CQ's;
    another queue pair's or CQ's of the process are skipped, anything else refused."""
    rec, qp, cq = rk.rec, rk.dev.qp, rk.dev.cq
    others_qp = {e.data["qp_num"] for e in rec.of("create_qp") if e is not qp and "qp" in e.data}
    others_cq = {e.data["cq"] for e in rec.of("create_cq") if e is not cq and "cq" in e.data}

    def select(e: Event) -> bool:
        if e.ev == "poll_cq":
            if e.data["cq"] == cq.data["cq"] and _alive(rec, "destroy_cq", "cq", cq, e.line) \
                    and e.line > cq.line:
                return True
            known = e.data["cq"] in others_cq
        else:
            if e.data["qp_num"] == rk.qpn and _alive(rec, "destroy_qp", "qp_num", qp, e.line) \
                    and e.line > qp.line:
                return True
            known = e.data["qp_num"] in others_qp
        if not known:
            raise at(rec, e, f"a {e.ev} on a queue pair or CQ the process never created: it "
                             f"cannot be told apart from the gate's")
        return False

    return select


def _poll_size(e: Event, staged: bool, window: int) -> int | None:
    """The library's poll size in the wait a post begins (gate_engine.py's poll_size): a drain
    after its dummies (sends from the send staging with no staging receive posted since the
    last big-gate header), a big-gate window after its chunks, a decode gate after its
    vector; None for a post that begins no wait."""
    if e.ev != "post_send":
        return None
    if e.data["wrs"][0][1] != "stage_out":
        return POLL_BATCH
    return BIG_POLL_BATCH if staged else 2 * window + 1


def _merge_polls(events: list[Event], rec: Recording, window: int) -> list[Event]:
    """pyverbs' CQ.poll(n) calls ibv_poll_cq for one completion at a time until one comes back
    empty or n came: the library's one poll is part of a run of one-entry polls, which ends at
    an empty poll (the next written poll's ``empty_before``) or at any other event of the
    rank. A run is the library's polls of n each, back to back, the last one short when it
    holds fewer: n the engine's poll size in the wait the last post began (``_poll_size``),
    recorded as each poll's ``max``, which the validator checks against the spec's."""
    empty = {e.line: e.data["empty_before"] for e in rec.of("poll_cq")}
    out: list[Event] = []
    run: list[tuple[int, list[Any]]] = []
    n, staged = POLL_BATCH, False

    def flush() -> None:
        for i in range(0, len(run), n):
            piece = run[i:i + n]
            out.append(Event(piece[0][0], "poll", {"ev": "poll", "max": n,
                                                   "cqes": [c for _, c in piece]}))
        run.clear()

    for e in events:
        if e.ev != "poll":
            flush()
            out.append(e)
            if e.ev in ("tcp_write", "tcp_read") and e.data["kind"] == "header":
                staged = False
            elif e.ev == "post_recv" and any(w[1] == "stage" for w in e.data["wrs"]):
                staged = True
            n = _poll_size(e, staged, window) or n
            continue
        if e.data["max"] != 1 or len(e.data["cqes"]) != 1:
            raise at(rec, next(x for x in rec.events if x.line == e.line),
                     f"a poll for {e.data['max']} returning {len(e.data['cqes'])}; pyverbs "
                     f"polls one completion at a time ({DEV} 184)")
        if empty[e.line]:
            flush()
        run.append((e.line, e.data["cqes"][0]))
    flush()
    return out


def _config(rk: _Rank, params: Mapping[str, Any]) -> dict[str, Any]:
    window, max_msg = rk.hello
    slots = params.get("n_slots", DEFAULT["n_slots"])
    inn = rk.dev.regions[0].length
    cfg: dict[str, Any] = {"vec_bytes": inn // slots, "max_msg": max_msg, "window": window,
                           "cq_depth": rk.dev.cq.data["cqe"], "qp_type": GATE_QP.lower()}
    cfg.update(params)
    if inn % slots:
        raise at(rk.rec, rk.rec.of("reg_mr")[0], f"the in-slots are {inn} bytes, not a whole "
                                                 f"number of the spec's {slots} slots "
                                                 f"({LIB} 106)")
    return cfg


def _check_layout(rk: _Rank, cfg: Mapping[str, Any]) -> None:
    try:
        c = make_config(check_values(PARAMS, dict(cfg)))
    except ParamError as exc:
        raise at(rk.rec, rk.dev.qp, f"a configuration the spec cannot express: {exc}") from None
    stage = max(c.big_window(c.rq_depth) * c.max_msg, c.vec_bytes)
    want = (c.n_slots * c.vec_bytes,) * 2 + (stage,) * 2
    for g, n in zip(rk.dev.regions, want, strict=True):
        if g.length != n:
            raise at(rk.rec, rk.dev.qp, f"the {g.name} registration is {g.length} bytes; the "
                                        f"library's layout of it is {n} ({LIB} 105-108)")
    for key, got in (("sq_depth", rk.dev.qp.data["max_send_wr"]),
                     ("rq_depth", rk.dev.qp.data["max_recv_wr"])):
        if got < getattr(c, key):
            raise at(rk.rec, rk.dev.qp, f"the queue pair holds {got} work requests where the "
                                        f"spec's {key} is {getattr(c, key)}")


def ranks(recs: list[Recording], params: Mapping[str, Any]) -> tuple[RankTrace, RankTrace]:
    procs = [r for r in recs if any(e.data["qp_type"] == GATE_QP for e in r.of("create_qp"))]
    if len(procs) != 2:
        raise ProfileError(f"{len(procs)} of the {len(recs)} recorded processes created a UC "
                           f"queue pair ({', '.join(r.name for r in procs) or 'none'}); a "
                           f"gate channel's run has two ranks")
    a, b = sorted((_rank_of(r) for r in procs), key=lambda rk: rk.rank)
    if a.rank == b.rank:
        how = "accepted" if a.rank == 0 else "connected"
        raise ProfileError(f"both {a.rec.path} and {b.rec.path} {how} their connections: "
                           f"both are rank {a.rank} ({PAIR} 65-70)")
    _check_pairing(a, b)
    for me, peer in ((a, b), (b, a)):
        _check_control(me, peer)
        same_bytes(me.side.out, peer.side.inn, me.rec, peer.rec)
    out = []
    for rk in (a, b):
        cfg = _config(rk, params)
        _check_layout(rk, cfg)
        end = _end(rk)
        items = tuple(side_items(s, rk.rec, HELLO_BYTES) for s in (rk.side.out, rk.side.inn))
        events = _merge_polls(device_events(rk.rec, rk.dev, (items[0], items[1]), end,
                                            _select(rk), "the gate channel"), rk.rec,
                              rk.hello[0])
        out.append(RankTrace(rk.rec.path, rk.rank, "gate", "pyverbs-raw", "unknown", cfg,
                             events, end is not None))
    return out[0], out[1]


PROFILE = Profile("pyverbs-gate", "verbspec's GateChannel over the pyverbs transport "
                  "(refimpl/library, refimpl/transport; UC, two forked rank processes)", "gate",
                  RULES, ranks)
