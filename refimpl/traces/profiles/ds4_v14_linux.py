"""The profile ``ds4-v14-linux``: ds4's tensor-parallel transport as written (``ds4_tp.c`` of
zzyu17/ds4 at commit 1c45969407571694539fb5bca5b54795d411a4a2, protocol v14) built on Linux,
where it runs RC queue pairs, as a raw recording of it maps onto the gate spec held to the
variants of the spec's own profile ``ds4-v14`` (the spec as ds4 does it). Every rule cites the
lines of ds4_tp.c it comes from; nothing of ds4's is used here but what its wire and its verbs
calls show.

What the recording cannot show is a parameter: the gate timeout (``DS4_TP_GATE_TIMEOUT_MS`` is
read from the environment) and, where the run has no verify block, its layers and rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verbspec.refimpl.traces.profiles.common import (
    Device,
    Placement,
    Profile,
    ProfileError,
    Region,
    Rule,
    Stream,
    at,
    device_events,
    le,
    same_bytes,
)
from verbspec.refimpl.traces.profiles.tcp import Conn, connections
from verbspec.refimpl.traces.raw import Recording
from verbspec.refimpl.traces.read import Event, RankTrace
from verbspec.spec.gate.params import PARAMS
from verbspec.spec.gate.variants import DEPTH_MISMATCH, DS4_V14
from verbspec.spec.gate.wire import TAG_BLOCK, TAG_BULK, TAG_WARM

SRC = "ds4_tp.c"
MAGIC = 0x44533454              # "DS4T": the hello's and every control frame's
BATCH_MAGIC = 0x44533442        # "DS4B": big-gate and batch-gate headers on the data socket
VERSION = 14
MASK_WORDS = 3                  # the gate schedule's mask words (ds4.h)
HELLO_BYTES = 64 + 8 * MASK_WORDS
FRAME_BYTES = 12                # magic, type, payload bytes
INFO_BYTES = 48                 # ds4_tp_rdma_info with its padding
GATE_HEADER_BYTES = 16          # magic, layer (u16), gate (u16), seq
BIG_TAG = 0xB16                 # a big gate's header carries it as its gate
RDMA_INFO, RDMA_READY, RDMA_WARM, RDMA_POSTED = 7, 9, 19, 20
FRAME_TYPES = range(1, 23)      # DS4_TP_FRAME_SYNC .. DS4_TP_FRAME_SYNC_CHECKPOINT
POSTED_TAG = 0xFEED
MAX_MSG = 16384                 # DS4_TP_RDMA_MAX_MSG
WINDOW = 16                     # DS4_TP_RDMA_RECV_WINDOW
GATES_PER_LAYER = 2
BATCH_MAX_ROWS = 8              # DS4_TP_BATCH_MAX_ROWS: a verify-block layer's row stride
CQ_DEPTH = 512
BIG_DEPTH = 256                 # a big-gate window's cap
DEPTH_CAP = 4096                # the queue pair's granted depths, as ds4 clamps them
CHAIN = 64
ACCESS = 1 | 2 | 4              # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
WARM_POLL = 8                   # the warm-up polls 8 completions at a time
DEFAULT = {p.name: p.default for p in PARAMS}
# the spec as ds4 does it (its profile ds4-v14), but depth-mismatch: that variant gives rank 1 a
# receive depth of its own to explore; a recording shows each rank's, and the profile refuses
# ranks whose depths differ
VARIANTS = tuple(v for v in DS4_V14.variants if v != DEPTH_MISMATCH.name)
LINES = {   # ds4_tp.c's lines each rule cites
    "tp_accept": "2043-2057, 2066-2082", "tp_hello": "57-74, 1924-1946",
    "tp_hello_checks": "1950-1987", "tp_slots": "1990-1995", "tp_layout": "645-669",
    "tp_open": "945-949", "tp_depths": "952-973", "tp_register": "1151-1153",
    "tp_info": "76-86, 1161-1183", "tp_frames": "51-55, 447-460", "tp_modify": "1188-1239",
    "tp_ready": "1255-1263", "tp_posted": "1001-1010, 1034", "tp_warm": "1012-1099",
    "tp_header": "90-95", "tp_gate_recv": "1471-1510", "tp_arm": "1537-1544",
    "tp_gate_send": "1546-1570", "tp_reap": "1309-1333", "tp_repost": "1602",
    "tp_drain": "1620-1707", "tp_barrier": "1717-1722", "tp_big_header": "2300-2318",
    "tp_big": "1746-1800, 1804-1840", "tp_block_begin": "2186-2203", "tp_block_post": "1355-1392",
    "tp_block_gate": "1395-1440", "tp_block_end": "2214-2236", "tp_batch": "2241-2267",
    "tp_close": "1902-1916, 2123-2130", "tp_timeout": "2029-2033",
}


def cite(*keys: str) -> str:
    return f"{SRC} " + "; ".join(LINES[k] for k in keys)


RULES = (
    Rule("the processes that create a queue pair", "rank 0, the one whose first TCP "
         "connection was accepted (the leader), and rank 1, which connected", cite("tp_accept")),
    Rule("each rank's first TCP connection", "the control socket: setup, checked, then "
         "control frames, not spec steps", cite("tp_accept")),
    Rule("each rank's second TCP connection", "the data socket: the spec's side channel",
         cite("tp_accept")),
    Rule(f"the first {HELLO_BYTES} bytes each way on the control socket", "setup: the hello "
         "(magic DS4T, version 14, roles that differ, rdma_ok on both sides, one model); "
         "n_embd * 4 is the spec's vec_bytes, n_layer * 2 its n_slots, the gate schedule "
         "(start, step, gates per token, mask) its slot_start, slot_step, gates_per_token, "
         "slot_mask", cite("tp_hello", "tp_hello_checks", "tp_slots")),
    Rule("control frames", "12-byte header (magic DS4T, a known type, payload bytes) and "
         "payload; setup (RDMA_INFO, RDMA_READY, the warm-up's RDMA_POSTED and RDMA_WARM) is "
         "checked, later frames (the application's commands) are control traffic",
         cite("tp_frames")),
    Rule("RDMA_INFO (48 bytes)", "setup: slab base and rkey are the registration's, qpn the "
         "rank's own queue pair, which the peer's RTR names; reliable (RC) on both sides",
         cite("tp_info")),
    Rule("create_cq", "cq_depth: 512 entries", cite("tp_open")),
    Rule("create_qp", "an RC queue pair on that CQ; its granted depths (at most 4096) are the "
         "spec's rq_depth and sq_depth", cite("tp_open", "tp_depths")),
    Rule("the one reg_mr", "the slab, LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE, of the "
         "layout's length: out-slots, in-slots, flags, token, GPU flags, batch-out and "
         "batch-in regions", cite("tp_register", "tp_layout")),
    Rule("modify_qp INIT, RTR, RTS", "before the spec's setup step; RTR toward the peer's qpn",
         cite("tp_modify")),
    Rule("RDMA_READY each way, then the warm-up: one receive and one send tagged 1<<62 of "
         "16384 bytes (batch-in, batch-out), RDMA_POSTED 0xfeed between them, polls of 8 "
         "until both complete, RDMA_WARM 1 each way", "setup, checked and not spec steps: on "
         "RC the warm-up reaps both its completions, so none outlives it "
         "(warm_send_leftovers=0, warm_recv_leftover=0)", cite("tp_ready", "tp_posted", "tp_warm")),
    Rule("post_recv into an in-slot", "a decode gate's receive chain: slot * vec_bytes + the "
         "chunk's offset, only the last chunk tagged with the seq", cite("tp_gate_recv",
                                                                    "tp_repost")),
    Rule("consecutive post_recv calls of in-slot chains", "one spec step: the window's arming "
         "posts a chain per gate, 16 calls with nothing between them", cite("tp_arm")),
    Rule("post_send from an out-slot", "a decode gate's chunks, each wr_id seq, signaled",
         cite("tp_gate_send")),
    Rule("post_send of wr_id BULK|i from batch-out, before any big-gate window",
         "the drain's dummies (from the batch-out scratch at the chunk's offset: the spec's "
         "staging)", cite("tp_drain")),
    Rule("post_recv / post_send of wr_id BULK|i in batch-in / batch-out", "a big-gate "
         "window's staging receives and sends (chains of 64): the spec's staging region, "
         "offset as addressed; staging_bytes is n_layer * 8 * vec_bytes",
         cite("tp_big")),
    Rule("post_recv in batch-in tagged BLOCK|(layer*rows+row+1) (or 0 for a row's first "
         "chunk), post_send BLOCK|1 from batch-out", "a verify block's rows: the spec's "
         "block regions, row layer*rows+row (ds4 strides a layer by 8 rows)",
         cite("tp_block_post", "tp_block_gate")),
    Rule("poll_cq", "the spec's reap: max 16 in a gate or verify block, 33 in a drain, 64 in "
         "a big-gate window", cite("tp_reap", "tp_drain", "tp_big")),
    Rule("a data-socket byte", "a barrier byte item: 0xD1 arming the decode window, 0xB5 a "
         "verify block's, 1, 2, ... a big gate's windows",
         cite("tp_barrier", "tp_arm", "tp_block_begin", "tp_big")),
    Rule("16 bytes on the data socket starting with the magic DS4B, gate 0xB16",
         "a big-gate header item: the k-th of each rank (layer and seq as the peer's k-th, as "
         "ds4 checks) is big gate k; its size in chunks, which ds4's header does not carry, "
         "is the one the rank's own receives of that big gate show",
         cite("tp_header", "tp_big_header")),
    Rule("16 bytes starting with DS4B and another gate", "a batch gate's header "
         "(DS4_TP_DISABLE_VERIFY_WINDOW): refused, not in this profile", cite("tp_batch")),
    Rule("bytes read", "the items the peer wrote, byte for byte, each read where its last "
         "byte arrives", cite("tp_barrier")),
    Rule("the connections closed", "close: no spec step", cite("tp_close")),
    Rule("DS4_TP_GATE_TIMEOUT_MS (environment, not recorded)", "timeout_ms: 750 unless "
         "--param timeout_ms=N", cite("tp_timeout")),
)


@dataclass
class _Slab:
    """The slab's regions (ds4_tp.c's slab layout), by their offsets from its base."""

    base: int
    length: int
    lkey: int
    n_layer: int
    vec: int

    @property
    def slots(self) -> int:
        return self.n_layer * GATES_PER_LAYER

    @property
    def out(self) -> int:
        return self.base

    @property
    def inn(self) -> int:
        return self.base + self.slots * self.vec

    @property
    def batch_out(self) -> int:
        return self.base + 2 * self.slots * self.vec + 2 * self.slots * 8 + 16 + self.slots * 4

    @property
    def batch_bytes(self) -> int:
        return self.n_layer * BATCH_MAX_ROWS * self.vec

    @property
    def batch_in(self) -> int:
        return self.batch_out + self.batch_bytes

    @property
    def layout_bytes(self) -> int:
        return self.batch_in + self.batch_bytes - self.base


@dataclass
class _Rank:
    """One rank's process, read as ds4's."""

    rec: Recording
    rank: int
    qp: Event
    cq: Event
    mr: Event
    control: Conn
    data: Conn
    hello: bytes = b""
    slab: _Slab | None = None
    frames: list[tuple[int, int, bytes]] = field(default_factory=list)   # line, type, payload
    block_rows: int = 0
    block_layers: int = 0


def _one(rec: Recording, ev: str, what: str) -> Event:
    found = rec.of(ev)
    if len(found) != 1 or "errno" in found[0].data:
        raise at(rec, found[1] if len(found) > 1 else (found[0] if found else None),
                 f"{len(found)} {ev} lines (or it failed); ds4 makes one {what} on RC "
                 f"({cite('tp_open', 'tp_register')})")
    return found[0]


def _rank_of(rec: Recording) -> _Rank:
    cq, qp, mr = (_one(rec, "create_cq", "completion queue"), _one(rec, "create_qp", "queue "
                  "pair"), _one(rec, "reg_mr", "registration (the slab)"))
    if cq.data["cqe"] != CQ_DEPTH:
        raise at(rec, cq, f"a CQ of {cq.data['cqe']} entries; ds4 asks {CQ_DEPTH} "
                          f"({cite('tp_open')})")
    if qp.data["qp_type"] != "RC":
        raise at(rec, qp, f"a {qp.data['qp_type']} queue pair; ds4 on Linux makes RC ones "
                          f"({cite('tp_open')})")
    if not qp.data["send_cq"] == qp.data["recv_cq"] == cq.data["cq"]:
        raise at(rec, qp, "the queue pair's send and receive CQs are not its one CQ "
                          f"({cite('tp_open')})")
    if mr.data["access"] != ACCESS:
        raise at(rec, mr, f"the slab registered with access {mr.data['access']}; ds4 asks "
                          f"{ACCESS} ({cite('tp_register')})")
    conns = connections(rec)
    if len(conns) < 2:
        raise at(rec, None, f"{len(conns)} TCP connection(s); ds4 opens a control and a data "
                            f"connection ({cite('tp_accept')})")
    control, data = conns[0], conns[1]
    if control.opened.data["how"] != data.opened.data["how"]:
        raise at(rec, data.opened, "the control connection and the data connection were not "
                                   f"both accepted or both connected ({cite('tp_accept')})")
    rank = 0 if control.opened.data["how"] == "accept" else 1
    return _Rank(rec, rank, qp, cq, mr, control, data)


def _read_control(rk: _Rank) -> None:
    """The rank's hello and frames as it wrote them, framing checked."""
    rec, out = rk.rec, rk.control.out
    if len(out.data) < HELLO_BYTES:
        raise at(rec, None, f"wrote {len(out.data)} bytes on the control socket; the hello "
                            f"alone is {HELLO_BYTES} ({cite('tp_hello')})")
    rk.hello = bytes(out.data[:HELLO_BYTES])
    i = HELLO_BYTES
    while i < len(out.data):
        line = out.lines[i]
        if len(out.data) - i < FRAME_BYTES:
            raise at(rec, None, f"the control socket ends in part of a frame header (byte {i}, "
                                f"line {line}; {cite('tp_frames')})")
        magic, kind, n = le(out.data, i, 4), le(out.data, i + 4, 4), le(out.data, i + 8, 4)
        if magic != MAGIC or kind not in FRAME_TYPES:
            raise ProfileError(f"{rec.path} line {line}: a control frame with magic "
                               f"{magic:#010x} and type {kind}; ds4 writes magic {MAGIC:#010x} "
                               f"and types {FRAME_TYPES.start}..{FRAME_TYPES.stop - 1} "
                               f"({cite('tp_frames')})")
        if len(out.data) - i - FRAME_BYTES < n:
            raise at(rec, None, f"the control socket ends inside a frame of {n} bytes (line "
                                f"{line}; {cite('tp_frames')})")
        payload = bytes(out.data[i + FRAME_BYTES:i + FRAME_BYTES + n])
        rk.frames.append((line, kind, payload))
        i += FRAME_BYTES + n


def _hello_fields(h: bytes) -> dict[str, int]:
    names = ("magic", "version", "role", "rdma_ok")
    out = {n: le(h, 4 * k, 4) for k, n in enumerate(names)}
    out["gguf_bytes"] = le(h, 16, 8)
    for k, n in enumerate(("model_id", "n_layer", "n_embd", "n_vocab", "quant_bits", "ctx_size",
                           "slot_start", "slot_step", "gates_per_token")):
        out[n] = le(h, 24 + 4 * k, 4)
    out["slot_mask"] = le(h, 64, 8 * MASK_WORDS)
    return out


MODEL = ("gguf_bytes", "model_id", "n_layer", "n_embd", "n_vocab", "quant_bits", "slot_start",
         "slot_step", "gates_per_token", "slot_mask")


def _check_states(me: _Rank, peer: _Rank) -> None:
    """INIT, RTR toward the peer's queue pair, RTS, once and each successful: a rank whose
    queue pair did not get there wrote no further setup."""
    rec, states = me.rec, me.rec.of("modify_qp")
    if [e.data["state"] for e in states] != ["INIT", "RTR", "RTS"] or \
            any(e.data["rc"] for e in states):
        failed = next((e for e in states if e.data["rc"]), states[-1] if states else None)
        raise at(rec, failed, f"queue pair states {[e.data['state'] for e in states]} (return "
                              f"codes {[e.data['rc'] for e in states]}); ds4 moves it INIT, "
                              f"RTR, RTS once ({cite('tp_modify')})")
    if states[1].data.get("dest_qp_num") != peer.qp.data["qp_num"]:
        raise at(rec, states[1], f"RTR toward queue pair {states[1].data.get('dest_qp_num')}; "
                                 f"the peer's is {peer.qp.data['qp_num']} ({cite('tp_modify')})")


def _check_setup(a: _Rank, b: _Rank) -> None:
    """The hello, the queue pair exchange, the ready barrier and the warm-up's frames, each as
    ds4 writes and checks them."""
    for me, peer in ((a, b), (b, a)):
        rec, mine, theirs = me.rec, _hello_fields(me.hello), _hello_fields(peer.hello)
        if mine["magic"] != MAGIC or mine["version"] != VERSION:
            raise at(rec, None, f"its hello has magic {mine['magic']:#010x}, version "
                                f"{mine['version']}; ds4 v14 writes {MAGIC:#010x}, {VERSION} "
                                f"({cite('tp_hello')})")
        if mine["role"] == theirs["role"] or not mine["rdma_ok"]:
            raise at(rec, None, f"its hello has role {mine['role']} (the peer's "
                                f"{theirs['role']}), rdma_ok {mine['rdma_ok']}: ds4 refuses "
                                f"such a pair or runs over TCP ({cite('tp_hello_checks')})")
        differs = [n for n in MODEL if mine[n] != theirs[n]]
        if differs:
            raise at(rec, None, f"its hello has {differs[0]} {mine[differs[0]]}, the peer's "
                                f"{theirs[differs[0]]}: ds4 refuses the pair "
                                f"({cite('tp_hello_checks')})")
        slab = _Slab(me.mr.data["addr"], me.mr.data["length"], me.mr.data["lkey"],
                     mine["n_layer"], 4 * mine["n_embd"])
        if slab.length != slab.layout_bytes:
            raise at(rec, me.mr, f"the slab registration is {slab.length} bytes; ds4's layout "
                                 f"for {slab.n_layer} layers of {slab.vec}-byte vectors is "
                                 f"{slab.layout_bytes} ({cite('tp_layout')})")
        me.slab = slab
        kinds = [k for _, k, _ in me.frames]
        if kinds[:4] != [RDMA_INFO, RDMA_READY, RDMA_POSTED, RDMA_WARM]:
            raise at(rec, None, f"its first control frames are of types {kinds[:4]}; ds4's "
                                f"setup writes RDMA_INFO, RDMA_READY, RDMA_POSTED, RDMA_WARM "
                                f"({RDMA_INFO}, {RDMA_READY}, {RDMA_POSTED}, {RDMA_WARM}; "
                                f"{cite('tp_info', 'tp_ready', 'tp_posted', 'tp_warm')})")
        (iline, _, info), (rline, _, ready), (pline, _, posted), (wline, _, warm) = \
            me.frames[:4]
        if len(info) != INFO_BYTES or le(info, 0, 8) != slab.base or \
                le(info, 8, 4) != me.mr.data["rkey"] or le(info, 12, 4) != me.qp.data["qp_num"]:
            raise ProfileError(f"{rec.path} line {iline}: its RDMA_INFO does not name its slab "
                               f"{slab.base:#x}, rkey {me.mr.data['rkey']} and queue pair "
                               f"{me.qp.data['qp_num']} ({cite('tp_info')})")
        if info[43] != 1:
            raise ProfileError(f"{rec.path} line {iline}: its RDMA_INFO says reliable "
                               f"{info[43]}; ds4 on Linux runs RC ({cite('tp_info')})")
        bad = [line for line, got, want in ((rline, ready, b""),
                                            (pline, posted, POSTED_TAG.to_bytes(4, "little")),
                                            (wline, warm, (1).to_bytes(4, "little")))
               if got != want]
        if bad:
            raise ProfileError(f"{rec.path} line {bad[0]}: the ready "
                               f"barrier or the warm-up's frames are not ds4's (RDMA_READY "
                               f"empty, RDMA_POSTED 0xfeed, RDMA_WARM 1; "
                               f"{cite('tp_ready', 'tp_posted', 'tp_warm')})")
        for mine_c, peer_c in ((me.control, peer.control), (me.data, peer.data)):
            same_bytes(mine_c.out, peer_c.inn, me.rec, peer.rec)


def _is_warm(e: Event) -> bool:
    if e.ev == "poll_cq":
        return e.data["max"] == WARM_POLL
    return any(w["wr_id"] == TAG_WARM for w in e.data["wrs"])


def _check_warm(rk: _Rank) -> None:
    """ds4's warm-up on RC: one receive and one send of 16384 bytes tagged 1<<62, polled 8 at
    a time until both complete, before any other post."""
    rec, slab = rk.rec, rk.slab
    assert slab is not None
    warm = [e for e in rec.of("post_recv", "post_send", "poll_cq") if _is_warm(e)]
    first = next((e for e in rec.of("post_recv", "post_send", "poll_cq") if not _is_warm(e)),
                 None)
    why = f"ds4's warm-up on RC ({cite('tp_warm')})"
    posts = [e for e in warm if e.ev != "poll_cq"]
    want = [("post_recv", slab.batch_in), ("post_send", slab.batch_out)]
    got = [(e.ev, w["sge"][0][0] if w["sge"] else None) for e in posts for w in e.data["wrs"]]
    if got != want or any(w["sge"][0][1] != MAX_MSG for e in posts for w in e.data["wrs"]):
        raise at(rec, posts[0] if posts else first, f"warm-up posts {got}; {why} posts one "
                 f"receive into batch-in and one send from batch-out, each {MAX_MSG} bytes")
    seen = [(c["opcode"].startswith("RECV"), c["wr_id"], c["status"])
            for e in warm if e.ev == "poll_cq" for c in e.data["wcs"]]
    if sorted(seen) != [(False, TAG_WARM, 0), (True, TAG_WARM, 0)]:
        raise at(rec, warm[-1], f"the warm-up's polls showed {seen}; {why} reaps its one "
                                f"receive and its one send, successful, and nothing else")
    if first is not None and warm and warm[-1].line > first.line:
        raise at(rec, first, f"a post or poll of the protocol before the warm-up ended ({why})")


def _place(rk: _Rank) -> Placement:
    """Where a work request goes in the spec: by the slab region its SGE lies in and by its
    wr_id's tag (batch-in and batch-out hold both the big gate's staging and the verify
    block's rows)."""
    slab = rk.slab
    assert slab is not None
    rows = rk.block_rows

    def place(rec: Recording, e: Event, w: dict[str, Any]) -> tuple[str | None, int | None, int]:
        wr_id, sge = w["wr_id"], w["sge"]
        if not sge:
            return None, None, 0
        if len(sge) > 1:
            raise at(rec, e, f"wr_id {wr_id} has {len(sge)} scatter-gather entries; ds4 posts "
                             f"one per work request ({cite('tp_gate_recv', 'tp_gate_send')})")
        addr, length, lkey = sge[0]
        recv = e.ev == "post_recv"
        slots = (slab.inn, "in") if recv else (slab.out, "out")
        batch = slab.batch_in if recv else slab.batch_out
        if lkey == slab.lkey:
            if slots[0] <= addr and addr + length <= slots[0] + slab.slots * slab.vec:
                return slots[1], addr - slots[0], length
            if batch <= addr and addr + length <= batch + slab.batch_bytes:
                rel = addr - batch
                if wr_id & TAG_BULK:
                    return "stage", rel, length
                if rows and (wr_id & TAG_BLOCK or wr_id == 0):
                    layer, rest = divmod(rel, BATCH_MAX_ROWS * slab.vec)
                    row, off = divmod(rest, slab.vec)
                    if row < rows:
                        return ("blk" if recv else "bout"), (layer * rows + row) * slab.vec + \
                            off, length
        raise at(rec, e, f"wr_id {wr_id:#x} addresses {length} bytes at {addr:#x} (lkey "
                         f"{lkey}): not an in- or out-slot, a staging chunk (BULK tag) or a "
                         f"verify-block row of ds4's slab "
                         f"({cite('tp_layout', 'tp_big', 'tp_block_post')}); a big gate moved "
                         f"straight from the slab is outside this profile")
    return place


def _blocks(rk: _Rank) -> None:
    """A verify block's rows and layers, which ds4_tp_batch_block_begin takes as arguments and
    no wire carries: rows from the first block's first receive post (BLOCK tags 1..rows),
    layers from its receive posts (one per layer, the last layer's gate posts none)."""
    posts = [e for e in rk.rec.of("post_recv")
             if any(w["wr_id"] & TAG_BLOCK for w in e.data["wrs"])]
    if not posts:
        return
    tags = [w["wr_id"] & ~TAG_BLOCK for w in posts[0].data["wrs"] if w["wr_id"] & TAG_BLOCK]
    rk.block_rows = len(tags)
    layers = 0
    for e in posts:
        first = min(w["wr_id"] & ~TAG_BLOCK for w in e.data["wrs"] if w["wr_id"] & TAG_BLOCK)
        if first == 1 and layers:
            break
        layers += 1
    rk.block_layers = layers


def _data_items(rk: _Rank, s: Stream, sizes: list[int], depth: int, peer_headers: list[bytes]
                ) -> list[tuple[int, dict[str, Any]]]:
    """The data socket's items: DS4B headers and barrier bytes, each with the line its last
    byte came in. ``sizes`` are the writer's big gates in chunks and ``depth`` its receive
    depth (ds4's header carries neither; each rank windows by its own depth), ``peer_headers``
    the other rank's headers (a header that matches its counterpart is big gate k, as ds4
    checks)."""
    out, i, k, data, rec = [], 0, 0, s.data, rk.rec
    mine = [h for _, h in _headers(s)]
    while i < len(data):
        if le(data, i, 4) == BATCH_MAGIC and len(data) - i >= GATE_HEADER_BYTES:
            gate, seq = le(data, i + 6, 2), le(data, i + 8, 8)
            if gate != BIG_TAG:
                raise ProfileError(f"{rec.path} line {s.lines[i]}: a batch gate's header (rows "
                                   f"{gate}): the run set DS4_TP_DISABLE_VERIFY_WINDOW, which "
                                   f"this profile does not map ({cite('tp_batch')})")
            agree = k < len(peer_headers) and mine[k] == peer_headers[k]
            item = {"kind": "header", "value": k + 1 if agree else seq,
                    "chunks": sizes[k] if k < len(sizes) else 0, "depth": depth}
            k += 1
            i += GATE_HEADER_BYTES
        elif data[i] == BATCH_MAGIC & 0xFF and len(data) - i < GATE_HEADER_BYTES and \
                bytes(data[i:]) == BATCH_MAGIC.to_bytes(4, "little")[:len(data) - i]:
            raise ProfileError(f"{rec.path} line {s.lines[i]}: the data socket ends in part of "
                               f"a header ({cite('tp_header')})")
        else:
            item = {"kind": "byte", "value": data[i], "chunks": 0, "depth": 0}
            i += 1
        out.append((s.lines[i - 1], item))
    return out


def _headers(s: Stream) -> list[tuple[int, bytes]]:
    """Every DS4B header a data stream holds, whole, with the line its first byte came in
    (barrier bytes are single bytes that never begin one: 0x42 would be a big gate's 66th
    window, followed by 0x43)."""
    out, i, data = [], 0, s.data
    while i < len(data):
        if le(data, i, 4) == BATCH_MAGIC and len(data) - i >= GATE_HEADER_BYTES:
            out.append((s.lines[i], bytes(data[i:i + GATE_HEADER_BYTES])))
            i += GATE_HEADER_BYTES
        else:
            i += 1
    return out


def _big_sizes(rk: _Rank) -> list[int]:
    """Each big gate's size in chunks: the BULK-tagged receives the rank posted after its
    header, until its next header."""
    header_lines = [line for line, _ in _headers(rk.data.out)]
    sizes = []
    for k, line in enumerate(header_lines):
        end = header_lines[k + 1] if k + 1 < len(header_lines) else None
        sizes.append(sum(1 for e in rk.rec.of("post_recv")
                         if e.line > line and (end is None or e.line < end)
                         for w in e.data["wrs"] if w["wr_id"] & TAG_BULK))
    return sizes


def _merge_arming(events: list[Event]) -> list[Event]:
    """ds4 arms the decode window with one post_recv per gate, sixteen calls with nothing
    between them; the spec's arming is one step posting every chain: consecutive receive
    posts into the in-slots are one event (at the first's line)."""
    out: list[Event] = []
    for e in events:
        prev = out[-1] if out else None
        if (prev is not None and e.ev == prev.ev == "post_recv"
                and all(w[1] == "in" for w in e.data["wrs"] + prev.data["wrs"])):
            out[-1] = Event(prev.line, prev.ev, {**prev.data,
                                                 "wrs": prev.data["wrs"] + e.data["wrs"]})
        else:
            out.append(e)
    return out


def _rq(rk: _Rank) -> int:
    """The receive depth ds4 works with: the queue pair's granted depth, at most 4096."""
    return min(int(rk.qp.data["max_recv_wr"]), DEPTH_CAP)


def _config(rk: _Rank, peer: _Rank, params: Mapping[str, Any]) -> dict[str, Any]:
    h, slab = _hello_fields(rk.hello), rk.slab
    assert slab is not None
    recvs = [w["sge"][0][1] for e in rk.rec.of("post_recv") for w in e.data["wrs"]
             if w["wr_id"] & TAG_BULK and w["sge"]]
    last = recvs[-1] % MAX_MSG if recvs else 0
    rows = rk.block_rows or peer.block_rows
    layers = rk.block_layers or peer.block_layers
    cfg = {"vec_bytes": slab.vec, "max_msg": MAX_MSG, "window": WINDOW,
           "n_slots": slab.slots, "gates_per_token": h["gates_per_token"],
           "slot_start": h["slot_start"], "slot_step": h["slot_step"],
           "slot_mask": h["slot_mask"],
           "rq_depth": _rq(rk),
           "sq_depth": min(rk.qp.data["max_send_wr"], DEPTH_CAP),
           "cq_depth": rk.cq.data["cqe"], "big_depth": BIG_DEPTH, "chain_max": CHAIN,
           "staging_bytes": slab.batch_bytes, "big_last_bytes": last, "qp_type": "rc",
           "timeout_ms": DEFAULT["timeout_ms"], "unsignaled_completions": 0, "faults": 1,
           "wire_loss": 0, "warm_send_leftovers": 0, "warm_recv_leftover": 0,
           "verify_blocks": int(rows > 0), "block_layers": layers or DEFAULT["block_layers"],
           "block_rows": rows or DEFAULT["block_rows"]}
    cfg.update(params)
    return cfg


def _events(rk: _Rank, items: tuple[list[tuple[int, dict[str, Any]]],
                                    list[tuple[int, dict[str, Any]]]]) -> list[Event]:
    rec = rk.rec
    end = (rec.events[-1].line + 1 if rec.events else 1) if rec.ended else None
    dev = Device(rk.qp, rk.cq, [Region("slab", rk.mr.data["addr"], rk.mr.data["length"],
                                       rk.mr.data["lkey"])], cite("tp_gate_send"), _place(rk))
    return _merge_arming(device_events(rec, dev, items, end, lambda e: not _is_warm(e),
                                       program="ds4"))


def ranks(recs: list[Recording], params: Mapping[str, Any]) -> tuple[RankTrace, RankTrace]:
    procs = [r for r in recs if r.of("create_qp")]
    if len(procs) != 2:
        raise ProfileError(f"{len(procs)} of the {len(recs)} recorded processes created a "
                           f"queue pair ({', '.join(r.name for r in procs) or 'none'}); a "
                           f"ds4 tensor-parallel pair has two ranks")
    a, b = sorted((_rank_of(r) for r in procs), key=lambda rk: rk.rank)
    if a.rank == b.rank:
        raise ProfileError(f"both {a.rec.path} and {b.rec.path} "
                           f"{'accepted' if a.rank == 0 else 'connected'} their control "
                           f"connection; one rank listens, the other dials ({cite('tp_accept')})")
    _check_states(a, b)
    _check_states(b, a)
    for rk in (a, b):
        _read_control(rk)
    _check_setup(a, b)
    for rk in (a, b):
        _check_warm(rk)
        _blocks(rk)
    if _rq(a) != _rq(b):
        raise ProfileError(f"the ranks' queue pairs were granted {_rq(a)} and {_rq(b)} receives: "
                           f"ds4 windows a big gate by each rank's own depth, which the spec "
                           f"models (depth-mismatch) only for the explored case of rank 1's "
                           f"at chain_max; this profile maps equal depths ({cite('tp_depths')})")
    sizes = [_big_sizes(a), _big_sizes(b)]
    heads = [[h for _, h in _headers(rk.data.out)] for rk in (a, b)]
    out = []
    for r, rk in enumerate((a, b)):
        peer = (a, b)[1 - r]
        cfg = _config(rk, peer, params)
        items = (_data_items(rk, rk.data.out, sizes[r], _rq(rk), heads[1 - r]),
                 _data_items(rk, rk.data.inn, sizes[1 - r], _rq(peer), heads[r]))
        out.append(RankTrace(rk.rec.path, rk.rank, "gate", "verbs-raw", "unknown", cfg,
                             _events(rk, items), rk.rec.ended, VARIANTS))
    return out[0], out[1]


PROFILE = Profile("ds4-v14-linux", "ds4's ds4_tp.c (zzyu17/ds4 at 1c45969, protocol v14) "
                  "on Linux, RC", "gate", RULES, ranks)
