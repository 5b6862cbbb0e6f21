"""The profile ``verbs-gate``: native/verbs/verbs_gate.c, the project's C gate program over a UC
or RC queue pair (one process per rank), as a raw recording of it maps onto the gate spec. Each
rule cites the program's lines; the program's own device trace (``--trace``) is not used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.profiles.common import (
    Device,
    Profile,
    ProfileError,
    Region,
    Rule,
    Stream,
    at,
    device_events,
    le,
    registrations,
    same_bytes,
    side_items,
)
from verbspec.refimpl.traces.raw import Recording
from verbspec.refimpl.traces.read import Event, RankTrace
from verbspec.spec.gate.params import PARAMS

SRC = "native/verbs/verbs_gate.c"
QP_SRC = "native/verbs/verbs_qp.c"
# the registrations in order, by the spec's names of the buffers (the send side's staging
# apart, which validate_gate reads as the spec's "stage")
REGIONS = ("in", "out", "stage", "stage_out", "blk", "bout")
ADDR_MAGIC = 0x50515356         # "VSQP"
ADDR_BYTES = 32                 # magic, qpn, psn, mtu, gid
SETTINGS = ("rank", "vector bytes", "max_msg", "window", "gates", "more gates",
            "big-gate bytes", "queue pair type (0 uc, 1 rc)", "verify blocks", "block layers",
            "block rows")
SETUP_BYTES = ADDR_BYTES + 8 * len(SETTINGS)
QP_TYPES = ("UC", "RC")         # the recorder's names, by the queue pair type setting
BLOCK_MAGIC = 0x4B425356        # "VSBK": a verify-block or batch header
BLOCK_KINDS = {2: "block", 3: "batch"}  # the frame's kind field (VS_GATE_TCP_BLOCK, _BATCH)
BLOCK_FRAME = 32
ACCESS_LOCAL_WRITE = 1
SHUT_WR = 1
DEFAULT = {p.name: p.default for p in PARAMS}

RULES = (
    Rule("the processes that create a queue pair", "rank 0 and rank 1, by the rank each "
         "writes in its settings", f"{SRC} 697 (settings), 708 (the peer is the other rank)"),
    Rule("create_qp", "a UC or RC queue pair (qp_type `uc`, `rc`, as its settings say) of at "
         "least the spec's sq_depth and rq_depth", f"{SRC} 765-767, 727-728 (SPEC depths)"),
    Rule("create_cq `cqe`", "cq_depth", f"{SRC} 765-767; {QP_SRC} 107"),
    Rule("the six reg_mr, in order", "the in-slots, out-slots, receive staging, send staging, "
         "verify-block rows received and sent (`in`, `out`, `stage`, `stage`, `blk`, "
         "`bout`), LOCAL_WRITE", f"{SRC} 55-58, 769-772"),
    Rule("reg_mr lengths", "n_slots * vec_bytes (slots), big_depth * max_msg (staging), "
         "block_layers * block_rows * vec_bytes (block rows)", f"{SRC} 730, 737-740"),
    Rule("the first 32 bytes each way on the TCP connection", "setup: the queue pair address "
         "(magic VSQP, qpn, psn, mtu, gid); the qpn written is the rank's own, the one read is "
         "the peer's RTR destination", f"{QP_SRC} 345-349, 361; 157-160"),
    Rule("the next 88 bytes each way", "setup: the plan (rank, vec_bytes, max_msg, window, "
         "gates, more gates, big-gate bytes, queue pair type 0 uc / 1 rc, verify blocks, block "
         "layers, block rows), the same on both sides but the rank; vec_bytes, max_msg and "
         "window become the spec's configuration and the hello, the queue pair type its "
         "qp_type, block layers and rows its block_layers and block_rows, verify blocks above "
         "0 its verify_blocks", f"{SRC} 687-716"),
    Rule("modify_qp INIT, RTR, RTS", "before the spec's setup step; every post after RTS",
         f"{QP_SRC} 149, 157, 177"),
    Rule("post_recv / post_send work requests", "the spec's WRs: wr_id as posted, region and "
         "offset from the one SGE's address, length; no SGE: a zero-length WR (region and "
         "offset unobserved); sends are SEND, signaled as flagged",
         f"{SRC} 232-237, 272-278"),
    Rule("poll_cq", "the spec's reap: `max` is the spec's poll size; each completion "
         "[recv|send, wr_id, status, byte_len], recv when the opcode is a receive's",
         f"{SRC} 450-464"),
    Rule("a 32-byte write starting with the magic DS4B", "a big-gate header item (number, "
         "chunks, depth)", f"{SRC} 319-326"),
    Rule("a 32-byte write starting with the magic VSBK", "a verify-block header item (kind 2: "
         "layers, rows) or a batch header item (kind 3: layer, rows, seq)",
         f"{SRC} 298-313, 327-330"),
    Rule("any other byte written", "a barrier byte item", f"{SRC} 331-333"),
    Rule("bytes read", "the items the peer wrote, byte for byte, each read where its last "
         "byte arrives", f"{SRC} 397-445"),
    Rule("shutdown(SHUT_WR), then end of file read", "close: no spec step", f"{SRC} 666-680"),
    Rule("argv --timeout-ms", "timeout_ms (not observable on the wire)", f"{SRC} 948-952"),
)


@dataclass
class _Rank:
    """One rank's process, read as verbs_gate's."""

    rec: Recording
    qp: Event
    cq: Event
    regions: list[Region]
    fd: int
    out: Stream = field(default_factory=Stream)
    inn: Stream = field(default_factory=Stream)
    settings: list[int] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.settings[0]


def _one(rec: Recording, ev: str, what: str) -> Event:
    found = rec.of(ev)
    if len(found) != 1:
        raise at(rec, found[1] if found else None,
                 f"{len(found)} {ev} lines; verbs_gate makes one {what}")
    return found[0]


def _rank_of(rec: Recording) -> _Rank:
    qp, cq = _one(rec, "create_qp", "queue pair"), _one(rec, "create_cq", "completion queue")
    for e in (cq, qp):
        if "errno" in e.data:
            raise at(rec, e, f"the {e.ev} failed (errno {e.data['errno']}): the program did "
                             f"not get as far as a run")
    if qp.data["qp_type"] not in QP_TYPES:
        raise at(rec, qp, f"a {qp.data['qp_type']} queue pair; verbs_gate's is UC or RC "
                          f"({SRC} 765-767)")
    if not qp.data["send_cq"] == qp.data["recv_cq"] == cq.data["cq"]:
        raise at(rec, qp, "the queue pair's send and receive CQs are not its one CQ")
    regions = registrations(
        rec, rec.of("reg_mr"), REGIONS, None,
        f"; verbs_gate registers {len(REGIONS)}: {', '.join(REGIONS)} ({SRC} 769-772)",
        ACCESS_LOCAL_WRITE, f"verbs_gate's regions are LOCAL_WRITE only ({SRC} 770)")
    fds = sorted({e.data["fd"] for e in rec.of("tcp")})
    if len(fds) != 1:
        raise at(rec, None, f"bytes on {len(fds)} TCP connections; verbs_gate has one")
    rk = _Rank(rec, qp, cq, regions, fds[0])
    for e in rec.of("tcp"):
        (rk.out if e.data["dir"] == "out" else rk.inn).add(e)
    if len(rk.out.data) < SETUP_BYTES:
        raise at(rec, None, f"wrote {len(rk.out.data)} bytes on the side channel; its setup "
                            f"alone is {SETUP_BYTES} ({QP_SRC} 341-356)")
    rk.settings = [le(rk.out.data, ADDR_BYTES + 8 * i, 8) for i in range(len(SETTINGS))]
    if rk.rank not in (0, 1):
        raise at(rec, None, f"wrote rank {rk.rank} in its settings")
    qp_setting = rk.settings[SETTINGS.index("queue pair type (0 uc, 1 rc)")]
    if qp_setting >= len(QP_TYPES) or QP_TYPES[qp_setting] != qp.data["qp_type"]:
        raise at(rec, qp, f"a {qp.data['qp_type']} queue pair, where its settings say queue "
                          f"pair type {qp_setting} (0 UC, 1 RC; {SRC} 697-699, 765-767)")
    return rk


def _check_setup(a: _Rank, b: _Rank) -> None:
    """The queue pair exchange and the plan, each as the program writes and checks them."""
    for me, peer in ((a, b), (b, a)):
        rec, addr = me.rec, me.out.data
        if le(addr, 0, 4) != ADDR_MAGIC:
            raise at(rec, None, f"its queue pair address begins {le(addr, 0, 4):#010x}, not "
                                f"the magic {ADDR_MAGIC:#010x} ({QP_SRC} 345)")
        if le(addr, 4, 4) != me.qp.data["qp_num"]:
            raise at(rec, me.qp, f"wrote qpn {le(addr, 4, 4)}; its queue pair is "
                                 f"{me.qp.data['qp_num']} ({QP_SRC} 346)")
        rtr = [e for e in rec.of("modify_qp") if e.data["state"] == "RTR"]
        if not rtr or rtr[0].data.get("dest_qp_num") != peer.qp.data["qp_num"]:
            raise at(rec, rtr[0] if rtr else None,
                     f"no move to RTR toward the peer's queue pair {peer.qp.data['qp_num']} "
                     f"({QP_SRC} 157-160)")
        if me.settings[1:] != peer.settings[1:] or me.rank != 1 - peer.rank:
            diff = next((i for i in range(len(SETTINGS))
                         if i and me.settings[i] != peer.settings[i]), 0)
            raise at(rec, None, f"its plan has {SETTINGS[diff]} {me.settings[diff]}, the "
                                f"peer's {peer.settings[diff]}: the program refuses such a "
                                f"pair ({SRC} 708-713)")
        states = [e for e in rec.of("modify_qp")]
        if [e.data["state"] for e in states] != ["INIT", "RTR", "RTS"] or \
                any(e.data["rc"] for e in states):
            raise at(rec, states[-1] if states else None, f"queue pair states "
                     f"{[e.data['state'] for e in states]}; verbs_gate moves it INIT, RTR, "
                     f"RTS once ({QP_SRC} 149-177)")
        same_bytes(me.out, peer.inn, me.rec, peer.rec)


def _config(rk: _Rank, params: Mapping[str, Any]) -> dict[str, Any]:
    _, vec, max_msg, window, _, _, big, qp, blocks, layers, rows = rk.settings
    timeout = DEFAULT["timeout_ms"]
    argv = rk.rec.argv
    if "--timeout-ms" in argv[:-1]:
        timeout = int(argv[argv.index("--timeout-ms") + 1])
    cfg = {"vec_bytes": vec, "max_msg": max_msg, "window": window,
           "cq_depth": rk.cq.data["cqe"], "timeout_ms": timeout,
           "qp_type": QP_TYPES[qp].lower(), "staging_bytes": DEFAULT["big_depth"] * max_msg,
           "big_last_bytes": big % max_msg, "verify_blocks": int(blocks > 0),
           "block_layers": layers, "block_rows": rows, "unsignaled_completions": 0,
           "faults": 1, "wire_loss": 0}
    cfg.update(params)
    return cfg


def _check_layout(rk: _Rank, cfg: Mapping[str, Any]) -> None:
    slots = cfg.get("n_slots", DEFAULT["n_slots"]) * cfg["vec_bytes"]
    rows = cfg["block_layers"] * cfg["block_rows"] * cfg["vec_bytes"]
    want = (slots, slots, cfg["staging_bytes"], cfg["staging_bytes"], rows, rows)
    for g, n, e in zip(rk.regions, want, rk.rec.of("reg_mr"), strict=True):
        if g.length != n:
            raise at(rk.rec, e, f"the {g.name} registration is {g.length} bytes; the spec's "
                                f"layout of it is {n} ({SRC} 737-740)")
    for key, got in (("sq_depth", rk.qp.data["max_send_wr"]),
                     ("rq_depth", rk.qp.data["max_recv_wr"])):
        need = cfg.get(key, DEFAULT[key])
        if got < need:
            raise at(rk.rec, rk.qp, f"the queue pair holds {got} work requests where the "
                                    f"spec's {key} is {need}")


def _block_item(data: bytearray, i: int) -> tuple[dict[str, Any], int] | None:
    """The verify-block or batch header at byte i (verbs_gate.c 298-313) and its length, or
    None."""
    if len(data) - i < BLOCK_FRAME or le(data, i, 4) != BLOCK_MAGIC:
        return None
    kind = BLOCK_KINDS.get(le(data, i + 4, 4))
    if kind is None:
        return None
    return {"kind": kind, "value": le(data, i + 8, 8), "chunks": le(data, i + 16, 8),
            "depth": le(data, i + 24, 8)}, BLOCK_FRAME


def _block_part(data: bytearray, i: int) -> bool:
    """The side channel's last bytes begin a verify-block or batch header."""
    magic = BLOCK_MAGIC.to_bytes(4, "little")
    return len(data) - i < BLOCK_FRAME and bytes(data[i:i + 4]) == magic[:len(data) - i]


def _events(rk: _Rank) -> list[Event]:
    """The rank's posts, polls and side-channel items, in the order it made them."""
    rec = rk.rec
    items = tuple(side_items(s, rec, SETUP_BYTES, _block_item, _block_part)
                  for s in (rk.out, rk.inn))
    end = (rec.events[-1].line + 1 if rec.events else 1) if rec.ended else None
    dev = Device(rk.qp, rk.cq, rk.regions, f"{SRC} 277")
    return device_events(rec, dev, (items[0], items[1]), end)


def _check_close(rk: _Rank) -> None:
    """A close shuts down the writing half once, after the rank's last write. A rank that
    never closed stopped early (it failed, or was killed): where it stopped is the
    validator's to judge."""
    shut = [e for e in rk.rec.of("tcp_shutdown") if e.data["fd"] == rk.fd]
    if len(shut) > 1 or (shut and shut[0].data["how"] != SHUT_WR):
        raise at(rk.rec, shut[-1], f"a shutdown of the side channel other than one SHUT_WR "
                                   f"({SRC} 671)")
    if shut and rk.out.lines and rk.out.lines[-1] > shut[0].line:
        raise at(rk.rec, shut[0], "bytes written after the side channel was shut down")


def ranks(recs: list[Recording], params: Mapping[str, Any]) -> tuple[RankTrace, RankTrace]:
    procs = [r for r in recs if r.of("create_qp")]
    if len(procs) != 2:
        raise ProfileError(f"{len(procs)} of the {len(recs)} recorded processes created a "
                           f"queue pair ({', '.join(r.name for r in procs) or 'none'}); a "
                           f"verbs_gate run has two ranks")
    a, b = sorted((_rank_of(r) for r in procs), key=lambda rk: rk.rank)
    if a.rank == b.rank:
        raise ProfileError(f"both {a.rec.path} and {b.rec.path} are rank {a.rank}")
    _check_setup(a, b)
    out = []
    for rk in (a, b):
        cfg = _config(rk, params)
        _check_layout(rk, cfg)
        _check_close(rk)
        out.append(RankTrace(rk.rec.path, rk.rank, "gate", "verbs-raw", "unknown", cfg,
                             _events(rk), rk.rec.ended))
    return out[0], out[1]


PROFILE = Profile("verbs-gate", "verbspec's native/verbs/verbs_gate.c (UC or RC)", "gate",
                  RULES, ranks)
