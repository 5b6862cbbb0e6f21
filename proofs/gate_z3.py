"""Induction proofs of the gate protocol: decode gates, drains and big gates, over parameter
regions.

The scope: two ranks over UC running a workload of ``ops`` ops each, every op a decode gate or
(big_gates=1) a big gate of any size: setup, arming (post the window, cross the 0xD1 barrier),
decode gates (gate_send, transmit, deliver, reap, gate_done reposting seq + window, consume),
the drain before a big gate (header exchange, window*chunks dummies each way), and big-gate
windows (staging receives in chains, a barrier byte whose 8-bit tag wraps, sub-batches of
sends, window done); with faults=1 also crashes, injected error completions, warm-up
leftovers, spurious timeouts, refused bad calls and a rank giving up on a dead peer. Wire loss
and RC are outside. All nine invariants of the gate system are proved, no_deadlock as a
consequence of the inductive invariant.

The model is a counter abstraction of :mod:`verbspec.spec.gate.steps`. Per rank r (peer p) it
keeps the protocol's own variables at their real widths (``recv_done``, ``last_gate_seq``, the
gate in progress, big_no: 64 bits; ``send_outstanding`` and the big-gate and drain counters:
32 bits;
the barrier tag: 8 bits) and, for the fabric, counts instead of queues: per kind of message
(gate chunk, dummy, big chunk) the send WRs not yet transmitted, the messages on the wire, the
unreaped send and receive completions; the posted gate and staging receives; the TCP items in
flight (at most two, kept as fields); plus stream positions: gates sent (SENT; the gate stream
is C*SENT chunks long), the gate-receive stream's head (LANDED, restarting at each arming), and
the next big chunk in flight (big_no, chunk index). UC delivers in order and each rank posts
and sends in order (gate chunks, then dummies, then big chunks; a step that would break that
order sets the flag ``unmodelled``, proved never set), so every identity the spec's ghosts
record (which gate lands in which slot, which dummy or big chunk meets which receive, which
wr_id a completion carries) is a function of these positions. Ghost flags record the events the
invariants forbid, as the spec's Ghost does; a dead rank keeps the phase it died in (DPH), so
what its phase says of its counters stays true.

The model is written separately from the spec; tests/test_gate_z3.py replays random runs of the
executable spec through :func:`alpha` and checks every step against :func:`move`, every
invariant verdict against the model's property of the same name (PROPERTIES, CONSEQUENCES),
and every strengthening invariant (LEMMAS) on every state the runs reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from verbspec.proofs.report import Result, trace_name
from verbspec.proofs.solving import Solvers, query
from verbspec.spec.fabric import ST_OK
from verbspec.spec.gate import state as gs
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import GateState
from verbspec.spec.lts import Trace

POLL_BATCH = 16
SEQ_LIMIT = 1 << 62     # wr_id bits 62 and 63 are tags (TAG_WARM, TAG_BULK): seq stays below

# phase codes (8 bits): every phase of gate_state.py; the live ones first, so a rank is alive
# exactly when its code is at most BIG_XFER
PHASES = (gs.INIT, gs.IDLE, gs.ARM_POST, gs.ARM_BAR_SEND, gs.ARM_BAR_READ, gs.SEND, gs.WAIT,
          gs.HOLD, gs.DRAIN_POST, gs.DRAIN_WAIT, gs.BIG_HDR_SEND, gs.BIG_HDR_READ, gs.BIG_BEGIN,
          gs.BIG_POST, gs.BIG_BAR_SEND, gs.BIG_BAR_READ, gs.BIG_XFER, gs.FAILED, gs.CRASHED)
PHASE_CODE: dict[str, int] = {p: i for i, p in enumerate(PHASES)}
(INIT, IDLE, ARM_POST, ARM_BAR_SEND, ARM_BAR_READ, SEND, WAIT, HOLD, DRAIN_POST, DRAIN_WAIT,
 BIG_HDR_SEND, BIG_HDR_READ, BIG_BEGIN, BIG_POST, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER, FAILED,
 CRASHED) = range(len(PHASES))
REAP = (WAIT, DRAIN_WAIT, BIG_XFER)                     # phases that poll the CQ
TCP_READS = (ARM_BAR_READ, BIG_HDR_READ, BIG_BAR_READ)  # phases that read the peer's TCP items
BIG_WINDOW = (BIG_POST, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER)   # a big-gate window is open

# TCP items: kind codes; a queue per direction holds at most two (more is outside the model)
TCP_NONE, TCP_BYTE, TCP_HEADER = 0, 1, 2
TCP_FIELDS = {"K": 8, "V": 64, "C": 32, "D": 32}    # kind, value (byte or big no), chunks, depth

# per-rank variables: name -> width in bits (0: Boolean)
RANK_VARS: dict[str, int] = {
    "ph": 8, "S": 64, "L": 64, "RD": 64, "WA": 0, "SO": 32, "SENT": 64, "SQ": 32, "WIRE": 32,
    "QS": 32, "QR": 32, "RQ": 32, "LANDED": 64, "ARR": 64, "OVF": 0,
    # the gate whose first chunk landed without its last one (0: none); the phase a dead rank
    # died in (a ghost: what it had done stays what its counters say)
    "PG": 64, "DPH": 8,
    # faults: warm-up leftovers and error completions in the CQ, leftovers used (at most one
    # per kind, send and receive), the one injected error completion used
    "QW": 8, "QE": 8, "STR": 8, "EU": 0,
    # the workload: ops done, the size of this rank's last big gate, whether its last op done
    # was a big gate
    "OP": 64, "K": 32, "LB": 0,
    # drain: dummies in the send queue, on the wire, their send and receive completions;
    # drain_recvs and drain_sends
    "SQD": 32, "WD": 32, "QSD": 32, "QRD": 32, "DR": 32, "DS": 32,
    # big gates: big_no, header exchanged, agreed depth, window base, size, posted, sent, sends
    # done, receives reaped, receives landed, barrier tag; big chunks in the send queue, on the
    # wire, their completions, staging receives posted; the next big chunk to leave (big no,
    # chunk index; 0 when none is in flight)
    "BNO": 64, "HDR": 0, "BD": 32, "BB": 32, "BW": 32, "BP": 32, "BS": 32, "BSD": 32,
    "BR": 32, "BL": 32, "BT": 8, "SQB": 32, "WB": 32, "QSB": 32, "QRB": 32, "RQB": 32,
    "FNO": 64, "FX": 32,
    # the TCP items this rank wrote that the peer has not read: count, then two slots
    "TN": 8, **{f"T{i}{f}": w for i in (1, 2) for f, w in TCP_FIELDS.items()},
}
# ghost flags of the whole system: one per forbidden event (the spec's Ghost records), whether
# a fault was injected, and "unmodelled": the run left what the counters describe exactly
# (proved never to happen, so the model is exact on every reachable state)
FLAGS = ("dropped", "misaligned", "clobbered", "stale", "out_of_order", "long_chain", "faulted",
         "unmodelled")
# the workload script as far as it matters: its length and last two entries (0: a decode gate,
# n: a big gate of n chunks); the ranks are never more than one op apart
SCRIPT_VARS: dict[str, int] = {"SLEN": 64, "SCA": 32, "SCB": 32}
# parameters: W window, C chunks, P slot period (gates between two uses of a slot), OPS the
# workload (ops each rank calls), BIG whether big gates are in it, BCAP the big-gate window cap
# (big_depth and staging), SDEPTH the big-gate send depth
PARAM_VARS: dict[str, int] = {"W": 64, "C": 64, "P": 64, "rq_depth": 32, "sq_depth": 32,
                              "cq_depth": 32, "chain_max": 32, "OPS": 64, "BIG": 0,
                              "BCAP": 32, "SDEPTH": 32,
                              "no_barrier": 0, "tag_every_chunk": 0, "signal_last_only": 0,
                              "depth_mismatch": 0, "FAULTS": 0}
# the variants the model encodes, as Boolean parameters (false: the base protocol); no-seq-check
# changes nothing without faults, since out-of-order calls come only from bad_call (a fault)
MODEL_VARIANTS: dict[str, str | None] = {"no-barrier": "no_barrier",
                                         "tag-every-chunk": "tag_every_chunk",
                                         "signal-last-only": "signal_last_only",
                                         "no-seq-check": None,
                                         "depth-mismatch": "depth_mismatch"}
OPS_LIMIT = 1 << 61     # workloads below this keep seq + window clear of the tag bits
BIG_LIMIT = 1 << 24     # big-gate sizes the model admits (the spec's are at most 257)

PROGRESS_ACTIONS = ("setup", "call_gate", "call_big", "arm_post", "barrier_write",
                    "barrier_read", "gate_send", "transmit", "deliver", "reap", "gate_done",
                    "consume", "big_header_write", "big_header_read", "drain_post",
                    "drain_done", "big_begin", "big_post_recv", "big_barrier_write",
                    "big_barrier_read", "big_send", "big_window_done")
FAULT_ACTIONS = ("crash", "error_completion", "stray_completion", "timeout", "peer_gone",
                 "bad_call")
ACTIONS = PROGRESS_ACTIONS + FAULT_ACTIONS
# how one reap splits between the kinds of completion, and how many of each came before the
# first error among them (see _reap); the size of a big gate a call chooses
KINDS = ("ks", "kr", "kds", "kdr", "kbs", "kbr")
CHOICES = (*KINDS, "kw", "ke", *(f"{k}b" for k in KINDS), "kn")
QUEUE_OF = {"ks": "QS", "kr": "QR", "kds": "QSD", "kdr": "QRD", "kbs": "QSB", "kbr": "QRB"}

State = dict[str, z3.ExprRef]
Params = dict[str, z3.ExprRef]


# ---------------------------------------------------------------------------- terms
def _var(name: str, width: int) -> z3.ExprRef:
    return z3.Bool(name) if width == 0 else z3.BitVec(name, width)


def fresh_state(tag: str) -> State:
    s: State = {f"{v}{r}": _var(f"{v}{r}@{tag}", w) for r in (0, 1) for v, w in RANK_VARS.items()}
    s.update({f: z3.Bool(f"{f}@{tag}") for f in FLAGS})
    s.update({v: z3.BitVec(f"{v}@{tag}", w) for v, w in SCRIPT_VARS.items()})
    return s


def fresh_params(tag: str = "") -> Params:
    return {n: _var(f"{n}{tag}", w) for n, w in PARAM_VARS.items()}


def z64(x: z3.BitVecRef) -> z3.BitVecRef:
    return z3.ZeroExt(64 - x.size(), x) if x.size() < 64 else x


def bv(v: int, w: int = 32) -> z3.BitVecRef:
    return z3.BitVecVal(v, w)


def times_c(prm: Params, x: z3.BitVecRef) -> z3.BitVecRef:
    """x * C for C in {1, 2}, without a multiplier (cheaper to bit-blast)."""
    return z3.If(prm["C"] == 1, x, x << 1)


def div_c(prm: Params, x: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(prm["C"] == 1, x, z3.LShR(x, 1))


def umax(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(z3.UGE(a, b), a, b)


def umin(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return z3.If(z3.ULE(a, b), a, b)


def ph_in(s: State, r: int, *codes: int) -> z3.BoolRef:
    return z3.Or([s[f"ph{r}"] == c for c in codes])


def wc32(prm: Params) -> z3.BitVecRef:
    """window * chunks: a drain's dummies, the lookahead window's receives."""
    return z3.Extract(31, 0, times_c(prm, prm["W"]))


# derived stream positions (all in chunks)
def transmitted(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return times_c(prm, s[f"SENT{r}"]) - z64(s[f"SQ{r}"])


def delivered(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """Gate chunks from r that left the wire (landed at the peer, absent drops)."""
    return transmitted(s, prm, r) - z64(s[f"WIRE{r}"])


def sends_reaped(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return transmitted(s, prm, r) - z64(s[f"QS{r}"])


def recvs_reaped(s: State, r: int) -> z3.BitVecRef:
    return s[f"LANDED{r}"] - z64(s[f"QR{r}"])


def alive(s: State, r: int) -> z3.BoolRef:
    return z3.ULE(s[f"ph{r}"], BIG_XFER)


def armed(s: State, r: int) -> z3.BoolRef:
    """The rank has posted its window's receives (a dead rank: had, when it died)."""
    return z3.Or(eph_in(s, r, ARM_BAR_SEND, ARM_BAR_READ), s[f"WA{r}"])


def consumed(s: State, r: int) -> z3.BitVecRef:
    """Gates the application has read: all up to last_gate_seq, but the held one in HOLD."""
    return s[f"L{r}"] - z3.If(s[f"ph{r}"] == HOLD, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))


def cq_used(s: State, r: int) -> z3.BitVecRef:
    return (sum((s[f"{q}{r}"] for q in QUEUE_OF.values()), bv(0))
            + z3.ZeroExt(24, s[f"QW{r}"]) + z3.ZeroExt(24, s[f"QE{r}"]))


def sq_total(s: State, r: int) -> z3.BitVecRef:
    return s[f"SQ{r}"] + s[f"SQD{r}"] + s[f"SQB{r}"]


def big_in_flight(s: State, r: int) -> z3.BitVecRef:
    return s[f"SQB{r}"] + s[f"WB{r}"]


def big_window(prm: Params, depth: z3.BitVecRef) -> z3.BitVecRef:
    """The window for a granted receive depth: capped by big_depth and staging, at least 1."""
    return umax(umin(depth, prm["BCAP"]), bv(1))


def _mismatch(prm: Params) -> bool:
    """Whether depth-mismatch may hold (a concrete false keeps the base protocol's terms)."""
    return not z3.is_false(z3.simplify(prm["depth_mismatch"]))


def grant(prm: Params, r: int) -> z3.BitVecRef:
    """Rank r's granted receive depth: rq_depth, but depth-mismatch grants rank 1 only
    min(rq_depth, chain_max) (the spec's rq_grant)."""
    if r == 0 or not _mismatch(prm):
        return prm["rq_depth"]
    return z3.If(prm["depth_mismatch"], umin(prm["rq_depth"], prm["chain_max"]),
                 prm["rq_depth"])


def own_window(prm: Params, r: int) -> z3.BitVecRef:
    """The big-gate window rank r settles on after the header exchange: for the smaller of the
    two grants, or with depth-mismatch for its own."""
    if not _mismatch(prm):
        return big_window(prm, prm["rq_depth"])
    return big_window(prm, z3.If(prm["depth_mismatch"], grant(prm, r),
                                 umin(grant(prm, 0), grant(prm, 1))))


# ---------------------------------------------------------------------------- transitions
@dataclass(frozen=True)
class Move:
    guard: z3.BoolRef
    updates: dict[str, z3.ExprRef]


def _push_cqe(s: State, prm: Params, r: int, queue: str, upd: dict) -> None:
    """A completion for rank r's CQ: one more entry, or an overflow (the QP enters error)."""
    full = z3.UGE(cq_used(s, r), prm["cq_depth"])
    upd[f"{queue}{r}"] = z3.If(full, s[f"{queue}{r}"], s[f"{queue}{r}"] + 1)
    upd[f"OVF{r}"] = z3.Or(s[f"OVF{r}"], full)


def _long_chain(s: State, prm: Params) -> z3.BoolRef:
    """A gate's chain is C work requests; the spec flags chains above chain_max."""
    return z3.Or(s["long_chain"], z3.UGT(prm["C"], z64(prm["chain_max"])))


def _unmodelled(s: State, upd: dict, *when: z3.BoolRef) -> None:
    upd["unmodelled"] = z3.Or(upd.get("unmodelled", s["unmodelled"]), *when)


def _tcp_push(s: State, r: int, upd: dict, kind: int, value: z3.BitVecRef,
              chunks: z3.BitVecRef | None = None, depth: z3.BitVecRef | None = None) -> None:
    """Rank r writes one item to its TCP stream (the model keeps at most two unread)."""
    n = s[f"TN{r}"]
    item = {"K": bv(kind, 8), "V": z64(value), "C": chunks if chunks is not None else bv(0),
            "D": depth if depth is not None else bv(0)}
    for f in TCP_FIELDS:
        upd[f"T1{f}{r}"] = z3.If(n == 0, item[f], s[f"T1{f}{r}"])
        upd[f"T2{f}{r}"] = z3.If(n == 1, item[f], s[f"T2{f}{r}"])
    upd[f"TN{r}"] = n + 1
    _unmodelled(s, upd, z3.UGE(n, 2))


def _tcp_pop(s: State, src: int, upd: dict) -> None:
    """The peer reads the head of src's TCP stream."""
    for f, w in TCP_FIELDS.items():
        upd[f"T1{f}{src}"] = s[f"T2{f}{src}"]
        upd[f"T2{f}{src}"] = bv(0, w)
    upd[f"TN{src}"] = s[f"TN{src}"] - 1


def _script_ok(s: State, r: int, n: z3.BitVecRef, upd: dict) -> z3.BoolRef:
    """The op the rank calls next is the script's if either rank recorded it; else it records
    it (the ranks are at most one op apart, so the last two entries are all that matter)."""
    op, slen = s[f"OP{r}"], s["SLEN"]
    recorded = z3.ULT(op, slen)
    upd["SLEN"] = z3.If(recorded, slen, slen + 1)
    upd["SCA"] = z3.If(recorded, s["SCA"], n)
    upd["SCB"] = z3.If(recorded, s["SCB"], s["SCA"])
    _unmodelled(s, upd, z3.UGT(op, slen), z3.ULT(op + 2, slen))
    want = z3.If(op + 1 == slen, s["SCA"], s["SCB"])
    return z3.Or(z3.Not(recorded), want == n)


def _op_done(s: State, r: int, upd: dict) -> None:
    upd[f"OP{r}"] = s[f"OP{r}"] + 1
    upd[f"ph{r}"] = bv(IDLE, 8)


def action_move(name: str, r: int, s: State, prm: Params, choice: Mapping[str, z3.ExprRef]
                ) -> Move:
    """Guard and effect of one action of rank r (for deliver: the source rank); a rank that
    dies in it keeps the phase it died in as DPH."""
    m = _action_move(name, r, s, prm, choice)
    upd = dict(m.updates)
    for x in (0, 1):
        if f"ph{x}" in upd:
            dies = z3.And(alive(s, x), z3.UGT(upd[f"ph{x}"], BIG_XFER))
            upd[f"DPH{x}"] = z3.If(dies, s[f"ph{x}"], s[f"DPH{x}"])
    return Move(m.guard, upd)


def _action_move(name: str, r: int, s: State, prm: Params, choice: Mapping[str, z3.ExprRef]
                 ) -> Move:
    p = 1 - r
    one32 = z3.BitVecVal(1, 32)
    c32 = z3.Extract(31, 0, prm["C"])
    ph = s[f"ph{r}"]
    if name == "setup":
        return Move(ph == INIT, {f"ph{r}": bv(IDLE, 8)})
    if name in FAULT_ACTIONS:
        return _fault_move(name, r, s, prm)
    if name in BIG_ACTIONS:
        return BIG_ACTIONS[name](r, s, prm, choice)
    if name == "call_gate":
        seq = s[f"L{r}"] + 1
        # the out-slot of seq is busy if a send of an earlier gate in the same slot has not
        # left the send queue yet; the oldest pending gate is the closest candidate
        first_pending = div_c(prm, transmitted(s, prm, r)) + 1
        busy = z3.And(s[f"SQ{r}"] != 0, z3.UGT(seq, prm["P"]),
                      z3.UGE(seq - prm["P"], first_pending))
        upd = {f"S{r}": seq, "clobbered": z3.Or(s["clobbered"], busy),
               f"ph{r}": z3.If(s[f"WA{r}"], bv(SEND, 8), bv(ARM_POST, 8))}
        ok = _script_ok(s, r, bv(0), upd)
        # in IDLE the rank has done OP ops; the workload allows OPS
        return Move(z3.And(ph == IDLE, z3.ULT(s[f"OP{r}"], prm["OPS"]), ok), upd)
    if name == "arm_post":
        # the receive stream restarts at the gate after the last one done; no-barrier: the
        # window counts as active at once and the gate's send follows
        upd = {f"RQ{r}": s[f"RQ{r}"] + wc32(prm), f"LANDED{r}": times_c(prm, s[f"L{r}"]),
               "long_chain": _long_chain(s, prm),
               f"WA{r}": z3.Or(s[f"WA{r}"], prm["no_barrier"]),
               f"ph{r}": z3.If(prm["no_barrier"], bv(SEND, 8), bv(ARM_BAR_SEND, 8))}
        _unmodelled(s, upd, s[f"RQ{r}"] != 0, s[f"RQB{r}"] != 0)
        return Move(ph == ARM_POST, upd)
    if name == "barrier_write":
        upd = {f"ph{r}": bv(ARM_BAR_READ, 8)}
        _tcp_push(s, r, upd, TCP_BYTE, bv(gs.WINDOW_BARRIER, 64))
        return Move(ph == ARM_BAR_SEND, upd)
    if name == "barrier_read":
        ok = z3.And(s[f"T1K{p}"] == TCP_BYTE, s[f"T1V{p}"] == gs.WINDOW_BARRIER)
        upd = {f"WA{r}": ok, f"ph{r}": z3.If(ok, bv(SEND, 8), bv(FAILED, 8))}
        _tcp_pop(s, p, upd)
        return Move(z3.And(ph == ARM_BAR_READ, s[f"TN{p}"] != 0), upd)
    if name == "gate_send":
        # signal-last-only counts the chain once (the provider still completes every WR)
        counted = z3.If(prm["signal_last_only"], one32, c32)
        upd = {f"SQ{r}": s[f"SQ{r}"] + c32, f"SO{r}": s[f"SO{r}"] + counted,
               f"SENT{r}": umax(s[f"SENT{r}"], s[f"S{r}"]),
               "long_chain": _long_chain(s, prm), f"ph{r}": bv(WAIT, 8)}
        # gate chunks queue behind dummies or big chunks still in flight
        _unmodelled(s, upd, s[f"SQD{r}"] + s[f"WD{r}"] + big_in_flight(s, r) != 0)
        return Move(ph == SEND, upd)
    if name == "transmit":
        return _transmit(s, prm, r)
    if name == "deliver":
        return _deliver(s, prm, r)
    if name == "reap":
        return _reap(s, prm, r, choice)
    if name == "gate_done":
        seq = s[f"S{r}"]
        whole = z3.UGE(s[f"LANDED{r}"], times_c(prm, seq))
        return Move(z3.And(ph == WAIT, z3.UGE(s[f"RD{r}"], seq)),
                    {f"RQ{r}": s[f"RQ{r}"] + c32, f"L{r}": seq,
                     "stale": z3.Or(s["stale"], z3.Not(whole)),
                     "out_of_order": z3.Or(s["out_of_order"], seq != s[f"L{r}"] + 1),
                     f"ph{r}": bv(HOLD, 8)})
    if name == "consume":
        upd: dict[str, z3.ExprRef] = {f"LB{r}": z3.BoolVal(False)}
        _op_done(s, r, upd)
        return Move(ph == HOLD, upd)
    raise KeyError(name)


def _transmit(s: State, prm: Params, r: int) -> Move:
    """The send queue's head leaves: gate chunks first, then dummies, then big chunks (the
    order they were posted in; gate_send and big_send flag any other order)."""
    gate, dummy = s[f"SQ{r}"] != 0, s[f"SQD{r}"] != 0
    upd: dict[str, z3.ExprRef] = {}
    for cond, sq, wire, q in ((gate, "SQ", "WIRE", "QS"),
                              (z3.And(z3.Not(gate), dummy), "SQD", "WD", "QSD"),
                              (z3.And(z3.Not(gate), z3.Not(dummy)), "SQB", "WB", "QSB")):
        one: dict[str, z3.ExprRef] = {f"{sq}{r}": s[f"{sq}{r}"] - 1,
                                      f"{wire}{r}": s[f"{wire}{r}"] + 1}
        _push_cqe(s, prm, r, q, one)     # UC completes the send as it leaves
        for k, v in one.items():
            upd[k] = z3.If(cond, v, upd.get(k, s[k]))
    return Move(z3.And(sq_total(s, r) != 0, z3.Not(s[f"OVF{r}"]), alive(s, r)), upd)


def _fault_move(name: str, r: int, s: State, prm: Params) -> Move:
    """The fault actions (only when faults are explored): each fails or kills a rank, or
    puts a completion nobody posted for into its CQ."""
    p = 1 - r
    ph = s[f"ph{r}"]
    failed = {f"ph{r}": bv(FAILED, 8), "faulted": z3.BoolVal(True)}
    if name == "crash":         # the first fault only
        return Move(z3.And(prm["FAULTS"], alive(s, r), ph != INIT, z3.Not(s["faulted"])),
                    {f"ph{r}": bv(CRASHED, 8), "faulted": z3.BoolVal(True)})
    if name == "error_completion":      # once per rank, while it polls
        upd: dict[str, z3.ExprRef] = {f"EU{r}": z3.BoolVal(True), "faulted": z3.BoolVal(True)}
        _push_cqe(s, prm, r, "QE", upd)
        return Move(z3.And(prm["FAULTS"], ph_in(s, r, *REAP), z3.Not(s[f"EU{r}"])), upd)
    if name == "stray_completion":      # a warm-up leftover: not a fault of the protocol's own
        upd = {f"STR{r}": s[f"STR{r}"] + 1}
        _push_cqe(s, prm, r, "QW", upd)
        return Move(z3.And(prm["FAULTS"], alive(s, r), ph != INIT, z3.ULT(s[f"STR{r}"], 2)),
                    upd)
    if name == "timeout":       # spurious: the wait gives up
        return Move(z3.And(prm["FAULTS"], ph_in(s, r, *REAP)), failed)
    if name == "peer_gone":     # the peer is dead and the rank waits for it
        waits = z3.Or(ph_in(s, r, *REAP), z3.And(ph_in(s, r, *TCP_READS), s[f"TN{p}"] == 0))
        return Move(z3.And(z3.Not(alive(s, p)), waits), {f"ph{r}": bv(FAILED, 8)})
    if name == "bad_call":      # a wrong layer or seq: gate() refuses it before recording it
        ok = _script_ok(s, r, bv(0), {})
        return Move(z3.And(prm["FAULTS"], ph == IDLE, z3.ULT(s[f"OP{r}"], prm["OPS"]), ok),
                    failed)
    raise KeyError(name)


def _deliver(s: State, prm: Params, src: int) -> Move:
    """The wire head from src (gate chunks first, then dummies, then big chunks) meets the
    head of the peer's receive queue (gate receives, or staging receives) over UC; a dead
    peer's NIC takes nothing."""
    dst = 1 - src
    gate_msg, dummy_msg = s[f"WIRE{src}"] != 0, s[f"WD{src}"] != 0
    big_msg = z3.And(z3.Not(gate_msg), z3.Not(dummy_msg))
    upd: dict[str, z3.ExprRef] = {
        f"WIRE{src}": z3.If(gate_msg, s[f"WIRE{src}"] - 1, s[f"WIRE{src}"]),
        f"WD{src}": z3.If(z3.And(z3.Not(gate_msg), dummy_msg), s[f"WD{src}"] - 1,
                          s[f"WD{src}"]),
        f"WB{src}": z3.If(big_msg, s[f"WB{src}"] - 1, s[f"WB{src}"])}
    # the next big chunk in flight from src (none left: back to 0)
    last_big = z3.And(big_msg, big_in_flight(s, src) == 1)
    upd[f"FX{src}"] = z3.If(big_msg, z3.If(last_big, bv(0), s[f"FX{src}"] + 1), s[f"FX{src}"])
    upd[f"FNO{src}"] = z3.If(last_big, z3.BitVecVal(0, 64), s[f"FNO{src}"])
    gate_rq, big_rq = s[f"RQ{dst}"] != 0, s[f"RQB{dst}"] != 0
    no_recv = z3.Or(z3.And(z3.Not(gate_rq), z3.Not(big_rq)), s[f"OVF{dst}"])
    landed = s[f"LANDED{dst}"]
    gate = div_c(prm, landed) + 1       # the gate of the receive at the head
    land: dict[str, z3.ExprRef] = {}
    mis = z3.BoolVal(False)
    # into a gate receive: chunk LANDED+1 of dst's receive stream
    into_gate = {f"RQ{dst}": s[f"RQ{dst}"] - 1, f"LANDED{dst}": landed + 1}
    # a gate chunk: chunk DV+1 of src's stream
    aligned = delivered(s, prm, src) == landed
    last_chunk = div_c(prm, landed + 1) == gate
    # the slot of `gate` still holds an unconsumed earlier gate (same slot: P gates back)
    clobber = z3.And(z3.UGT(gate, prm["P"]), z3.UGE(gate - prm["P"], consumed(s, dst) + 1))
    g_ok = z3.And(aligned, z3.Not(clobber))
    g_land = {**into_gate,
              f"ARR{dst}": z3.If(z3.And(g_ok, last_chunk), umax(s[f"ARR{dst}"], gate),
                                 s[f"ARR{dst}"]),
              f"PG{dst}": z3.If(g_ok, z3.If(last_chunk, z3.BitVecVal(0, 64), gate),
                                s[f"PG{dst}"])}
    _push_cqe(s, prm, dst, "QR", g_land)
    # a drain dummy: fits any lookahead receive of a later gate than the sender's last; the
    # slot must not hold data (an unconsumed earlier gate that landed, or part of this one)
    held_top = umax(s[f"ARR{dst}"], s[f"PG{dst}"])
    d_aligned = z3.ULT(s[f"SENT{src}"], gate)
    d_clobber = z3.Or(z3.And(z3.UGT(gate, prm["P"]), z3.UGE(gate - prm["P"],
                                                             consumed(s, dst) + 1),
                             z3.ULE(gate - prm["P"], held_top)),
                      s[f"PG{dst}"] == gate)
    d_land = dict(into_gate)
    _push_cqe(s, prm, dst, "QRD", d_land)
    # a big chunk into a staging receive: the same big gate and chunk index
    b_land = {f"RQB{dst}": s[f"RQB{dst}"] - 1, f"BL{dst}": s[f"BL{dst}"] + 1}
    _push_cqe(s, prm, dst, "QRB", b_land)
    b_aligned = z3.And(s[f"FNO{src}"] == s[f"BNO{dst}"],
                       s[f"FX{src}"] == s[f"BB{dst}"] + s[f"BL{dst}"])
    cases = ((z3.And(gate_rq, gate_msg), g_land, z3.Not(aligned), z3.And(aligned, clobber)),
             (z3.And(gate_rq, z3.Not(gate_msg), dummy_msg), d_land, z3.Not(d_aligned),
              z3.And(d_aligned, d_clobber)),
             (z3.And(gate_rq, big_msg), d_land, z3.BoolVal(True), z3.BoolVal(False)),
             (z3.And(z3.Not(gate_rq), z3.Not(big_msg)), b_land, z3.BoolVal(True),
              z3.BoolVal(False)),
             (z3.And(z3.Not(gate_rq), big_msg), b_land, z3.Not(b_aligned), z3.BoolVal(False)))
    clob = z3.BoolVal(False)
    for cond, eff, m, c in cases:
        for k, v in eff.items():
            land[k] = z3.If(cond, v, land.get(k, s[k]))
        mis = z3.Or(mis, z3.And(cond, m))
        clob = z3.Or(clob, z3.And(cond, c))
    land["misaligned"] = z3.Or(s["misaligned"], mis)
    land["clobbered"] = z3.Or(s["clobbered"], clob)
    live = alive(s, dst)
    # a mismatched landing is a violation already; the length errors it may cause are not
    # modelled (the run ends there)
    for k, v in land.items():
        upd[k] = z3.If(z3.Or(no_recv, z3.Not(live)), s[k], v)
    upd["dropped"] = z3.Or(s["dropped"], z3.And(live, no_recv))
    return Move(s[f"WIRE{src}"] + s[f"WD{src}"] + s[f"WB{src}"] != 0, upd)


def _reap(s: State, prm: Params, r: int, choice: Mapping[str, z3.ExprRef]) -> Move:
    """Poll min(16, CQ) completions: k<kind> of each kind, kw warm-up leftovers (ignored) and
    ke error completions. The split is free (the CQ's interleaving is not kept); where the CQ
    holds at most 16 entries it is forced: everything is reaped. An error fails the rank,
    which keeps the accounting of the k<kind>b completions polled before it (all of them,
    without an error).

    What each completion counts for depends on the phase: a gate receive raises recv_done
    in WAIT; in DRAIN_WAIT every receive counts for drain_recvs and every BULK-tagged send
    (dummies, big chunks) for drain_sends; in BIG_XFER a staging receive counts for the window
    and a BULK send for its sends. Completions the protocol would refuse (a gate or dummy
    receive in a big-gate window, an index past the window) never occur: unmodelled."""
    k = {n: choice[f"{n}{r}"] for n in KINDS}
    kb = {n: choice[f"{n}b{r}"] for n in KINDS}
    kw, ke = choice[f"kw{r}"], choice[f"ke{r}"]
    ph = s[f"ph{r}"]
    n = umin(cq_used(s, r), bv(POLL_BATCH))
    error = ke != 0
    split = z3.And(sum(k.values(), bv(0)) + kw + ke == n,
                   *(z3.ULE(k[x], s[f"{QUEUE_OF[x]}{r}"]) for x in KINDS),
                   z3.ULE(kw, z3.ZeroExt(24, s[f"QW{r}"])),
                   z3.ULE(ke, z3.ZeroExt(24, s[f"QE{r}"])),
                   z3.If(error, z3.And(*(z3.ULE(kb[x], k[x]) for x in KINDS)),
                         z3.And(*(kb[x] == k[x] for x in KINDS))))
    upd: dict[str, z3.ExprRef] = {f"{QUEUE_OF[x]}{r}": s[f"{QUEUE_OF[x]}{r}"] - k[x]
                                  for x in KINDS}
    upd[f"QW{r}"] = s[f"QW{r}"] - z3.Extract(7, 0, kw)
    upd[f"QE{r}"] = s[f"QE{r}"] - z3.Extract(7, 0, ke)
    in_wait, in_drain, in_big = ph == WAIT, ph == DRAIN_WAIT, ph == BIG_XFER
    # recv_done: in WAIT, the highest gate whose last chunk is among the receives taken
    krb = kb["kr"]
    rr = recvs_reaped(s, r)
    top = div_c(prm, rr + z64(krb))
    rd = z3.If(z3.UGT(top, div_c(prm, rr)), umax(s[f"RD{r}"], top), s[f"RD{r}"])
    # tag-every-chunk: any chunk's completion names its gate, the last reaped chunk's included
    newest = div_c(prm, rr + z64(krb) + times_c(prm, z3.BitVecVal(1, 64)) - 1)
    rd = z3.If(z3.And(prm["tag_every_chunk"], krb != 0), umax(s[f"RD{r}"], newest), rd)
    upd[f"RD{r}"] = z3.If(in_wait, rd, s[f"RD{r}"])
    sends = kb["ks"] + kb["kds"] + kb["kbs"]
    bulk_sends = kb["kds"] + kb["kbs"]
    so = s[f"SO{r}"]
    upd[f"SO{r}"] = z3.If(z3.UGE(so, sends), so - sends, bv(0))
    upd[f"DR{r}"] = z3.If(in_drain, s[f"DR{r}"] + kb["kr"] + kb["kdr"] + kb["kbr"],
                          s[f"DR{r}"])
    upd[f"DS{r}"] = z3.If(in_drain, s[f"DS{r}"] + bulk_sends, s[f"DS{r}"])
    upd[f"BSD{r}"] = z3.If(in_big, s[f"BSD{r}"] + bulk_sends, s[f"BSD{r}"])
    upd[f"BR{r}"] = z3.If(in_big, s[f"BR{r}"] + kb["kbr"], s[f"BR{r}"])
    upd[f"ph{r}"] = z3.If(error, bv(FAILED, 8), ph)
    _unmodelled(s, upd,
                # dummy or big receives reaped as gate arrivals
                z3.And(in_wait, k["kdr"] + k["kbr"] != 0),
                # the window refuses anything but its own staging receives
                z3.And(in_big, k["kr"] + k["kdr"] != 0),
                z3.And(in_big, z3.UGT(s[f"BR{r}"] + k["kbr"], s[f"BW{r}"])))
    return Move(z3.And(ph_in(s, r, *REAP), cq_used(s, r) != 0, split), upd)


# ---------------------------------------------------------------------------- drain, big gates
def _call_big(r: int, s: State, prm: Params, choice: Mapping[str, z3.ExprRef]) -> Move:
    n = choice[f"kn{r}"]
    upd = {f"K{r}": n, f"BNO{r}": s[f"BNO{r}"] + 1, f"BB{r}": bv(0),
           f"HDR{r}": z3.BoolVal(False), f"ph{r}": bv(BIG_HDR_SEND, 8)}
    ok = _script_ok(s, r, n, upd)
    return Move(z3.And(prm["BIG"], s[f"ph{r}"] == IDLE, z3.ULT(s[f"OP{r}"], prm["OPS"]),
                       z3.UGE(n, 1), z3.ULT(n, BIG_LIMIT), ok), upd)


def _big_header_write(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    upd = {f"ph{r}": bv(BIG_HDR_READ, 8)}
    _tcp_push(s, r, upd, TCP_HEADER, s[f"BNO{r}"], s[f"K{r}"], grant(prm, r))
    return Move(s[f"ph{r}"] == BIG_HDR_SEND, upd)


def _big_header_read(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    """The peer's header must name the same big gate; the window is the smaller depth (with
    depth-mismatch: the rank's own)."""
    p = 1 - r
    ok = z3.And(s[f"T1K{p}"] == TCP_HEADER, s[f"T1V{p}"] == s[f"BNO{r}"],
                s[f"T1C{p}"] == s[f"K{r}"])
    depth = umin(grant(prm, r), s[f"T1D{p}"])
    if _mismatch(prm):
        depth = z3.If(prm["depth_mismatch"], grant(prm, r), depth)
    upd = {f"HDR{r}": ok, f"BD{r}": z3.If(ok, big_window(prm, depth), s[f"BD{r}"]),
           f"ph{r}": z3.If(ok, z3.If(s[f"WA{r}"], bv(DRAIN_POST, 8), bv(BIG_BEGIN, 8)),
                           bv(FAILED, 8))}
    _tcp_pop(s, p, upd)
    return Move(z3.And(s[f"ph{r}"] == BIG_HDR_READ, s[f"TN{p}"] != 0), upd)


def _drain_post(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    """window*chunks signaled dummies, queued behind the last gate's chunks."""
    n = wc32(prm)
    upd = {f"SQD{r}": s[f"SQD{r}"] + n, f"SO{r}": s[f"SO{r}"] + n, f"DR{r}": bv(0),
           f"DS{r}": bv(0), f"ph{r}": bv(DRAIN_WAIT, 8)}
    _unmodelled(s, upd, s[f"SQD{r}"] + s[f"WD{r}"] + big_in_flight(s, r) != 0)
    return Move(s[f"ph{r}"] == DRAIN_POST, upd)


def _drain_done(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    n = wc32(prm)
    return Move(z3.And(s[f"ph{r}"] == DRAIN_WAIT, z3.UGE(s[f"DR{r}"], n),
                       z3.UGE(s[f"DS{r}"], n), s[f"SO{r}"] == 0),
                {f"RD{r}": s[f"L{r}"], f"WA{r}": z3.BoolVal(False),
                 f"ph{r}": z3.If(s[f"HDR{r}"], bv(BIG_BEGIN, 8), bv(BIG_HDR_SEND, 8))})


def _big_begin(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    active = s[f"WA{r}"]
    return Move(s[f"ph{r}"] == BIG_BEGIN,
                {f"BW{r}": z3.If(active, s[f"BW{r}"],
                                 umin(s[f"BD{r}"], s[f"K{r}"] - s[f"BB{r}"])),
                 **{f"{v}{r}": z3.If(active, s[f"{v}{r}"], bv(0))
                    for v in ("BP", "BS", "BSD", "BR", "BL")},
                 f"ph{r}": z3.If(active, bv(FAILED, 8), bv(BIG_POST, 8))})


def _big_post_recv(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    n = umin(prm["chain_max"], s[f"BW{r}"] - s[f"BP{r}"])
    posted = s[f"BP{r}"] + n
    return Move(s[f"ph{r}"] == BIG_POST,
                {f"RQB{r}": s[f"RQB{r}"] + n, f"BP{r}": posted,
                 f"ph{r}": z3.If(posted == s[f"BW{r}"], bv(BIG_BAR_SEND, 8), bv(BIG_POST, 8))})


def _big_barrier_write(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    tag = s[f"BT{r}"] + 1       # uint8: wraps after 255
    upd = {f"BT{r}": tag, f"ph{r}": bv(BIG_BAR_READ, 8)}
    _tcp_push(s, r, upd, TCP_BYTE, tag)
    return Move(s[f"ph{r}"] == BIG_BAR_SEND, upd)


def _big_barrier_read(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    p = 1 - r
    ok = z3.And(s[f"T1K{p}"] == TCP_BYTE, s[f"T1V{p}"] == z64(s[f"BT{r}"]))
    upd = {f"ph{r}": z3.If(ok, bv(BIG_XFER, 8), bv(FAILED, 8))}
    _tcp_pop(s, p, upd)
    return Move(z3.And(s[f"ph{r}"] == BIG_BAR_READ, s[f"TN{p}"] != 0), upd)


def send_room(s: State, prm: Params, r: int) -> z3.BitVecRef:
    so, depth = s[f"SO{r}"], prm["SDEPTH"]
    return umin(umin(prm["chain_max"], s[f"BW{r}"] - s[f"BS{r}"]),
                z3.If(z3.UGE(so, depth), bv(0), depth - so))


def _big_send(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    """The next sub-batch: staged and posted behind nothing else in flight."""
    n = send_room(s, prm, r)
    idle = big_in_flight(s, r) == 0
    upd = {f"SQB{r}": s[f"SQB{r}"] + n, f"BS{r}": s[f"BS{r}"] + n, f"SO{r}": s[f"SO{r}"] + n,
           f"FX{r}": z3.If(idle, s[f"BB{r}"] + s[f"BS{r}"], s[f"FX{r}"]),
           f"FNO{r}": z3.If(idle, s[f"BNO{r}"], s[f"FNO{r}"])}
    _unmodelled(s, upd, s[f"SQ{r}"] + s[f"WIRE{r}"] + s[f"SQD{r}"] + s[f"WD{r}"] != 0,
                z3.And(s[f"BS{r}"] == 0, z3.Not(idle)))
    return Move(z3.And(s[f"ph{r}"] == BIG_XFER, n != 0), upd)


def _big_window_done(r: int, s: State, prm: Params, choice: Mapping) -> Move:
    bw = s[f"BW{r}"]
    base = s[f"BB{r}"] + bw
    last = z3.UGE(base, s[f"K{r}"])
    upd: dict[str, z3.ExprRef] = {f"BB{r}": base, f"LB{r}": z3.Or(s[f"LB{r}"], last)}
    _op_done(s, r, upd)
    upd[f"ph{r}"] = z3.If(last, bv(IDLE, 8), bv(BIG_BEGIN, 8))
    upd[f"OP{r}"] = z3.If(last, upd[f"OP{r}"], s[f"OP{r}"])
    return Move(z3.And(s[f"ph{r}"] == BIG_XFER, s[f"BS{r}"] == bw, s[f"BR{r}"] == bw,
                       z3.UGE(s[f"BSD{r}"], bw)), upd)


BIG_ACTIONS: dict[str, Callable[..., Move]] = {
    "call_big": _call_big, "big_header_write": _big_header_write,
    "big_header_read": _big_header_read, "drain_post": _drain_post, "drain_done": _drain_done,
    "big_begin": _big_begin, "big_post_recv": _big_post_recv,
    "big_barrier_write": _big_barrier_write, "big_barrier_read": _big_barrier_read,
    "big_send": _big_send, "big_window_done": _big_window_done}


def frame(s: State, t: State, upd: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And([t[k] == upd.get(k, s[k]) for k in s])


def fresh_choice(tag: str) -> dict[str, z3.ExprRef]:
    return {f"{k}{r}": z3.BitVec(f"{k}{r}@{tag}", 32) for r in (0, 1) for k in CHOICES}


def move(name: str, r: int, s: State, t: State, prm: Params,
         choice: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    m = action_move(name, r, s, prm, choice)
    return z3.And(m.guard, frame(s, t, m.updates))


def transition(s: State, t: State, prm: Params, choice: Mapping[str, z3.ExprRef]
               ) -> z3.BoolRef:
    return z3.Or([move(a, r, s, t, prm, choice) for a in ACTIONS for r in (0, 1)])


def initial(s: State) -> z3.BoolRef:
    eqs = [s[f"ph{r}"] == INIT for r in (0, 1)]
    for k, v in s.items():
        if k.startswith("ph"):
            continue
        eqs.append(v == (z3.BoolVal(False) if z3.is_bool(v) else z3.BitVecVal(0, v.size())))
    return z3.And(eqs)


# ---------------------------------------------------------------------------- invariants
def both(f: Callable[[State, Params, int], z3.BoolRef]) -> Callable[[State, Params], z3.BoolRef]:
    return lambda s, prm: z3.And(f(s, prm, 0), f(s, prm, 1))


def sends_pending(s: State, r: int) -> z3.BitVecRef:
    return sq_total(s, r) + s[f"QS{r}"] + s[f"QSD{r}"] + s[f"QSB{r}"]


def _send_accounting(s: State, prm: Params, r: int) -> z3.BoolRef:
    # the spec judges only a live rank's QP in RTS; an overflowed CQ put it in error
    return z3.Or(s[f"OVF{r}"], z3.Not(alive(s, r)), s[f"SO{r}"] == sends_pending(s, r))


def _queue_bounds(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.ULE(s[f"RQ{r}"] + s[f"RQB{r}"], grant(prm, r)),
                  z3.ULE(sq_total(s, r), prm["sq_depth"]),
                  z3.Not(s[f"OVF{r}"]), z3.Not(s["long_chain"]))


def _watermark_sound(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.Not(s["stale"]),
                  z3.Or(z3.Not(alive(s, r)), z3.ULE(s[f"RD{r}"], s[f"ARR{r}"])))


def _mode_exclusive(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.Not(z3.And(s[f"WA{r}"], ph_in(s, r, *BIG_WINDOW))),
                  z3.Or(s[f"RQ{r}"] == 0, s[f"RQB{r}"] == 0))


# The properties, as the spec's invariants of the same names judge them (gate_system.py).
PROPERTIES: dict[str, Callable[[State, Params], z3.BoolRef]] = {
    "no_silent_drop": lambda s, prm: z3.Not(s["dropped"]),
    "chunk_alignment": lambda s, prm: z3.Not(s["misaligned"]),
    "watermark_sound": both(_watermark_sound),
    "slot_exclusive": lambda s, prm: z3.Not(s["clobbered"]),
    "send_accounting": both(_send_accounting),
    "queue_bounds": both(_queue_bounds),
    "gate_order": lambda s, prm: z3.Not(s["out_of_order"]),
    "mode_exclusive": both(_mode_exclusive),
}


def done(s: State, prm: Params) -> z3.BoolRef:
    """Each rank idle with the workload called, or dead (the spec's GateSystem.done)."""
    return z3.And([z3.Or(z3.And(s[f"ph{r}"] == IDLE, z3.UGE(s[f"OP{r}"], prm["OPS"])),
                         z3.Not(alive(s, r))) for r in (0, 1)])


def choice_witness(s: State, r: int) -> dict[str, z3.ExprRef]:
    """Choices that always exist: a split of one poll between the kinds of completion (in
    CHOICES order, as many of each as fit), and the script's size for a big gate (1 if free)."""
    n = umin(cq_used(s, r), bv(POLL_BATCH))
    out: dict[str, z3.ExprRef] = {}
    left = n
    for x in KINDS:
        out[f"{x}{r}"] = umin(s[f"{QUEUE_OF[x]}{r}"], left)
        out[f"{x}b{r}"] = out[f"{x}{r}"]
        left = left - out[f"{x}{r}"]
    out[f"kw{r}"] = umin(z3.ZeroExt(24, s[f"QW{r}"]), left)
    out[f"ke{r}"] = left - out[f"kw{r}"]
    op = s[f"OP{r}"]
    want = z3.If(op + 1 == s["SLEN"], s["SCA"], s["SCB"])
    out[f"kn{r}"] = z3.If(z3.ULT(op, s["SLEN"]), want, bv(1))
    return out


def can_run(s: State, prm: Params, actions: Iterable[str]) -> z3.BoolRef:
    """Some of these actions is enabled."""
    choice = {**choice_witness(s, 0), **choice_witness(s, 1)}
    return z3.Or([action_move(a, r, s, prm, choice).guard for a in actions for r in (0, 1)])


def _no_deadlock(s: State, prm: Params) -> z3.BoolRef:
    """The spec's no_deadlock: without a fault no rank fails and a progress step stays enabled
    until done; after one, some step (a fault's consequence included) stays enabled until every
    rank is done or dead. The model's failures are all documented errors."""
    ok = z3.Or(done(s, prm), can_run(s, prm, PROGRESS_ACTIONS))
    return z3.If(s["faulted"], z3.Or(done(s, prm), can_run(s, prm, ACTIONS)),
                 z3.And(ok, *(s[f"ph{r}"] != FAILED for r in (0, 1))))


# Properties that follow from the inductive invariant in every state it admits (not proved by
# consecution of their own).
CONSEQUENCES: dict[str, Callable[[State, Params], z3.BoolRef]] = {"no_deadlock": _no_deadlock}


# Strengthening invariants: facts of every reachable state that make the properties inductive.
# Phase groups they use:
ARMING = (ARM_POST, ARM_BAR_SEND, ARM_BAR_READ)
DECODE_OP = (*ARMING, SEND, WAIT, HOLD)                 # inside a decode gate call
PRE_DRAIN = (BIG_HDR_SEND, BIG_HDR_READ)
DRAINING = (DRAIN_POST, DRAIN_WAIT)
WINDOWS = (BIG_BEGIN, *BIG_WINDOW)                      # after the drain (if any)
BIG_OP = (*PRE_DRAIN, *DRAINING, *WINDOWS)              # inside a big gate call


def eph(s: State, r: int) -> z3.BitVecRef:
    """The rank's phase, or for a dead rank the phase it died in: a dead rank's counters stay
    what they were, so the facts its phase implies about them still hold."""
    return z3.If(alive(s, r), s[f"ph{r}"], s[f"DPH{r}"])


def eph_in(s: State, r: int, *codes: int) -> z3.BoolRef:
    e = eph(s, r)
    return z3.Or([e == c for c in codes])


def _z(w: int = 32) -> z3.BitVecRef:
    return z3.BitVecVal(0, w)


def closed(s: State, r: int) -> z3.BoolRef:
    """The rank drained its window since it last armed one (its gate receives are all
    consumed): the window is inactive after at least one gate, and it has not re-armed."""
    return z3.And(z3.Not(s[f"WA{r}"]), s[f"L{r}"] != 0,
                  z3.Not(eph_in(s, r, ARM_BAR_SEND, ARM_BAR_READ)))


def dummies_posted(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return z3.If(z3.Or(eph(s, r) == DRAIN_WAIT, closed(s, r)), wc32(prm), _z())


def dummies_delivered(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return dummies_posted(s, prm, r) - s[f"SQD{r}"] - s[f"WD{r}"]


def draining_window(s: State, r: int) -> z3.BoolRef:
    """The rank is in a big gate with its decode window still to drain (or draining)."""
    return z3.And(eph_in(s, r, *PRE_DRAIN, *DRAINING), s[f"WA{r}"])


def dummies_in(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """Gate receives of r's current window that the peer's dummies consumed."""
    return z3.If(draining_window(s, r), dummies_delivered(s, prm, 1 - r),
                 z3.If(closed(s, r), wc32(prm), _z()))


def _phase_shape(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Phase fixes seq, the window flag, the sends and the big-gate header: S = L + 1 while a
    decode gate is open, else L; the window is active from arming until the drain."""
    ph, L, S, sent = eph(s, r), s[f"L{r}"], s[f"S{r}"], s[f"SENT{r}"]
    opening = eph_in(s, r, *ARMING, SEND, WAIT)
    between = z3.Or(ph == IDLE, eph_in(s, r, *PRE_DRAIN))
    live = z3.And(
        z3.If(opening, S == L + 1, S == L),
        z3.Implies(ph == INIT, z3.And(L == 0, s[f"OP{r}"] == 0, s[f"BNO{r}"] == 0,
                                      z3.Not(s[f"LB{r}"]))),
        z3.Implies(eph_in(s, r, *ARMING), z3.Or(L == 0, s[f"LB{r}"])),
        z3.Implies(ph == HOLD, L != 0),
        s[f"WA{r}"] == z3.Or(eph_in(s, r, SEND, WAIT, HOLD, *DRAINING),
                             z3.And(between, L != 0, z3.Not(s[f"LB{r}"]))),
        sent == z3.If(ph == WAIT, S, L),
        z3.Implies(eph_in(s, r, *DRAINING, *WINDOWS), s[f"HDR{r}"]),
        z3.Implies(eph_in(s, r, *PRE_DRAIN), z3.Not(s[f"HDR{r}"])),
        z3.Implies(eph_in(s, r, *DRAINING), z3.And(z3.Not(s[f"LB{r}"]), L != 0)),
        z3.Implies(eph_in(s, r, *PRE_DRAIN, *DRAINING), s[f"BB{r}"] == 0),
        z3.Implies(eph_in(s, r, *BIG_OP), z3.And(z3.UGE(s[f"K{r}"], 1),
                                                z3.ULT(s[f"BB{r}"], s[f"K{r}"]))))
    # a dead rank keeps these with the phase it died in
    return z3.And(z3.ULE(s[f"ph{r}"], CRASHED), z3.ULE(s[f"DPH{r}"], BIG_XFER),
                  z3.If(alive(s, r), s[f"DPH{r}"] == 0, s[f"DPH{r}"] != INIT), live)


def _seq_headroom(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Sequence numbers and counters stay within the workload, below the tag bits, so no sum
    wraps."""
    below = [z3.ULT(s[f"{v}{r}"], SEQ_LIMIT) for v in ("S", "L", "RD", "ARR", "SENT", "PG")]
    return z3.And(*below, z3.ULT(s[f"S{r}"] + prm["W"], SEQ_LIMIT),
                  z3.ULT(s[f"LANDED{r}"], 2 * SEQ_LIMIT), z3.ULE(s[f"L{r}"], s[f"S{r}"]),
                  z3.ULE(s[f"S{r}"], prm["OPS"]), z3.ULE(s[f"OP{r}"], prm["OPS"]),
                  z3.ULE(s[f"L{r}"] - z3.If(eph(s, r) == HOLD, z3.BitVecVal(1, 64),
                                            z3.BitVecVal(0, 64)), s[f"OP{r}"]),
                  z3.ULE(s[f"BNO{r}"] - z3.If(eph_in(s, r, *BIG_OP), z3.BitVecVal(1, 64),
                                              z3.BitVecVal(0, 64)), s[f"OP{r}"]),
                  z3.ULE(s[f"BNO{r}"], s[f"OP{r}"] + 1), z3.ULE(s[f"L{r}"], s[f"OP{r}"] + 1),
                  z3.ULE(s["SLEN"], prm["OPS"]),
                  z3.ULT(s[f"K{r}"], BIG_LIMIT), z3.ULE(s[f"BB{r}"], s[f"K{r}"]),
                  z3.ULE(s[f"BD{r}"], own_window(prm, r)),
                  z3.ULE(s[f"BW{r}"], s[f"BD{r}"]),
                  z3.ULE(s[f"BP{r}"], s[f"BW{r}"]), z3.ULE(s[f"BS{r}"], s[f"BW{r}"]),
                  z3.ULE(s[f"BL{r}"], s[f"BP{r}"]), z3.ULE(s[f"BR{r}"], s[f"BL{r}"]),
                  z3.ULE(s[f"BSD{r}"], s[f"BS{r}"]),
                  z3.ULT(s["SCA"], BIG_LIMIT), z3.ULT(s["SCB"], BIG_LIMIT))


def _script_kept(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The script holds each rank's current op (once called) and its last op's kind."""
    op, slen = s[f"OP{r}"], s["SLEN"]
    at = {0: s["SCA"], 1: s["SCB"]}

    def entry_is(k: z3.BitVecRef, cond: Callable[[z3.BitVecRef], z3.BoolRef]) -> z3.BoolRef:
        return z3.And(*(z3.Implies(k + 1 + back == slen, cond(v)) for back, v in at.items()))

    called = eph_in(s, r, *DECODE_OP, *BIG_OP)
    return z3.And(z3.ULE(op, slen), z3.ULE(slen, op + 2),
                  z3.Implies(op == 0, z3.Not(s[f"LB{r}"])),
                  z3.Implies(called, z3.ULT(op, slen)),
                  z3.Implies(eph_in(s, r, *BIG_OP), entry_is(op, lambda v: v == s[f"K{r}"])),
                  z3.Implies(eph_in(s, r, *DECODE_OP), entry_is(op, lambda v: v == 0)),
                  z3.Implies(op != 0, entry_is(op - 1, lambda v: (v != 0) == s[f"LB{r}"])),
                  z3.Implies(z3.And(s[f"LB{r}"], z3.Not(eph_in(s, r, *BIG_OP))),
                             entry_is(op - 1, lambda v: v == s[f"K{r}"])))


def _ops_in_step(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The ranks are at most one op apart; the script is as long as the furthest op called.
    Live ranks count the same big gates and decode gates, but for the op one is ahead by."""
    p = 1 - r
    op, pop = s[f"OP{r}"], s[f"OP{p}"]
    in_big = [z3.If(eph_in(s, x, *BIG_OP), z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
              for x in (0, 1)]
    in_hold = [z3.If(eph(s, x) == HOLD, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
               for x in (0, 1)]
    one, zero = z3.BitVecVal(1, 64), z3.BitVecVal(0, 64)
    ahead_big = z3.If(z3.And(op == pop + 1, s[f"LB{r}"]), one, zero) - z3.If(
        z3.And(pop == op + 1, s[f"LB{p}"]), one, zero)
    ahead_dec = z3.If(z3.And(op == pop + 1, z3.Not(s[f"LB{r}"])), one, zero) - z3.If(
        z3.And(pop == op + 1, z3.Not(s[f"LB{p}"])), one, zero)
    return z3.And(z3.ULE(op, pop + 1), z3.Or(s["SLEN"] == umax(op, pop),
                                             s["SLEN"] == umax(op, pop) + 1),
                  s[f"BNO{r}"] - in_big[r] - (s[f"BNO{p}"] - in_big[p]) == ahead_big,
                  s[f"L{r}"] - in_hold[r] - (s[f"L{p}"] - in_hold[p]) == ahead_dec)


def _window_posted(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The gate receives posted since arming cover gates 1 .. last_gate_seq + window (none
    before the first arming; after a drain, all consumed); staging receives are the window's
    posted and not landed."""
    total = s[f"LANDED{r}"] + z64(s[f"RQ{r}"])
    full = total == times_c(prm, s[f"L{r}"] + prm["W"])
    none = z3.And(s[f"LANDED{r}"] == 0, s[f"RQ{r}"] == 0)
    is_armed = armed(s, r)
    gate = z3.And(z3.If(z3.Or(is_armed, s[f"L{r}"] != 0), full, none),
                  z3.Implies(z3.Not(is_armed), s[f"RQ{r}"] == 0))
    staging = z3.And(s[f"RQB{r}"] == s[f"BP{r}"] - s[f"BL{r}"],
                     z3.Implies(z3.Not(eph_in(s, r, *BIG_WINDOW)), s[f"RQB{r}"] == 0))
    return z3.And(gate, staging)


def _tcp_in_flight(s: State, prm: Params, r: int) -> z3.BoolRef:
    """What r wrote on TCP and the peer has not read: its window barrier byte (until the peer
    reads it), its big-gate header, its latest big-gate barrier byte; at most the header and
    one byte at once. Counted by the headers (big_no) and tags each side wrote and read."""
    p = 1 - r
    n = s[f"TN{r}"]
    one8, zero8 = z3.BitVecVal(1, 8), z3.BitVecVal(0, 8)
    ph, pph = eph(s, r), eph(s, p)
    same_op = s[f"OP{r}"] == s[f"OP{p}"]
    arm = z3.Or(z3.And(ph == ARM_BAR_READ,
                       z3.Or(z3.ULT(s[f"OP{p}"], s[f"OP{r}"]),
                             z3.And(same_op, eph_in(s, p, INIT, IDLE, *ARMING)))),
                z3.And(eph_in(s, r, SEND, WAIT), same_op, pph == ARM_BAR_READ))
    hdr_w = s[f"BNO{r}"] - z3.If(ph == BIG_HDR_SEND, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))
    hdr_r = s[f"BNO{p}"] - z3.If(eph_in(s, p, *PRE_DRAIN), z3.BitVecVal(1, 64),
                                 z3.BitVecVal(0, 64))
    hdr = hdr_w - hdr_r
    byte = s[f"BT{r}"] - s[f"BT{p}"] + z3.If(pph == BIG_BAR_READ, one8, zero8)
    items = z3.If(arm, one8, zero8) + z3.Extract(7, 0, hdr) + byte
    exact = z3.And(
        z3.Or(hdr == 0, hdr == 1), z3.Or(byte == 0, byte == 1), n == items,
        z3.Implies(arm, z3.And(hdr == 0, byte == 0, s[f"T1K{r}"] == TCP_BYTE,
                               s[f"T1V{r}"] == gs.WINDOW_BARRIER)),
        z3.Implies(hdr == 1, z3.And(s[f"T1K{r}"] == TCP_HEADER, s[f"T1V{r}"] == s[f"BNO{r}"],
                                    s[f"T1C{r}"] == s[f"K{r}"],
                                    s[f"T1D{r}"] == grant(prm, r))),
        z3.Implies(z3.And(byte == 1, hdr == 0),
                   z3.And(s[f"T1K{r}"] == TCP_BYTE, s[f"T1V{r}"] == z64(s[f"BT{r}"]))),
        z3.Implies(z3.And(byte == 1, hdr == 1),
                   z3.And(s[f"T2K{r}"] == TCP_BYTE, s[f"T2V{r}"] == z64(s[f"BT{r}"]))))
    # what holds of r's items whoever is alive: a header names r's big gate and depth; a
    # second item is r's latest big-gate byte
    fields = z3.And(
        z3.Implies(s[f"T1K{r}"] == TCP_HEADER,
                   z3.And(s[f"T1V{r}"] == s[f"BNO{r}"], s[f"T1C{r}"] == s[f"K{r}"],
                          s[f"T1D{r}"] == grant(prm, r))),
        z3.Implies(n == 2, z3.And(s[f"T1K{r}"] == TCP_HEADER, s[f"T2K{r}"] == TCP_BYTE,
                                  s[f"T2V{r}"] == z64(s[f"BT{r}"]))),
        z3.Implies(s[f"T1K{r}"] == TCP_BYTE,
                   z3.Or(s[f"T1V{r}"] == gs.WINDOW_BARRIER, s[f"T1V{r}"] == z64(s[f"BT{r}"]))))
    empty_slots = z3.And(
        z3.Implies(n == 0, z3.And(*(s[f"T1{f}{r}"] == 0 for f in TCP_FIELDS))),
        z3.Implies(z3.ULE(n, 1), z3.And(*(s[f"T2{f}{r}"] == 0 for f in TCP_FIELDS))))
    return z3.And(z3.ULE(n, 2), empty_slots, fields, exact)


def _streams_conserved(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Every gate chunk r sent is in its send queue, on the wire, or landed at the peer, in
    order; the peer's gate receives of the current window took r's gate chunks and then r's
    dummies. Sends not reaped are what send_outstanding counts."""
    p = 1 - r
    sent = times_c(prm, s[f"SENT{r}"])
    # a dead peer's NIC takes nothing: what reaches it is gone
    took = delivered(s, prm, r) + z64(dummies_in(s, prm, p))
    landed = z3.If(alive(s, p), s[f"LANDED{p}"] == took, z3.ULE(s[f"LANDED{p}"], took))
    return z3.And(z3.ULE(z64(s[f"SQ{r}"]) + z64(s[f"WIRE{r}"]), sent), landed,
                  z3.ULE(z64(s[f"QS{r}"]), transmitted(s, prm, r)),
                  z3.ULE(z64(s[f"QR{r}"]), s[f"LANDED{r}"]),
                  z3.Implies(alive(s, r), s[f"SO{r}"] == sends_pending(s, r)))


def _watermark_counts_reaped(s: State, prm: Params, r: int) -> z3.BoolRef:
    """While the window is open, recv_done is the last gate whose last chunk's completion was
    reaped and arrived the last whose last chunk landed; from the drain on, both are
    last_gate_seq and no gate completion is left. A passed gate is below both."""
    counted = div_c(prm, recvs_reaped(s, r))
    open_ = z3.And(z3.Not(draining_window(s, r)), z3.Not(closed(s, r)))
    live = z3.If(open_, z3.And(s[f"RD{r}"] == counted,
                               s[f"ARR{r}"] == div_c(prm, s[f"LANDED{r}"])),
                 z3.And(s[f"RD{r}"] == s[f"L{r}"], s[f"ARR{r}"] == s[f"L{r}"],
                        s[f"QR{r}"] == 0, s[f"PG{r}"] == 0))
    # a rank failed by an error completion kept only what it polled before the error
    return z3.And(z3.If(alive(s, r), live, z3.ULE(s[f"RD{r}"], counted)),
                  z3.ULE(s[f"L{r}"], s[f"RD{r}"]))


def _partial_gate(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A gate's first chunk landed without its last exactly while the receive stream stands
    between the two, at the next gate after those whole."""
    odd = z3.Extract(0, 0, s[f"LANDED{r}"]) == 1
    return z3.If(
        z3.And(prm["C"] == 2, odd, z3.Not(draining_window(s, r)), z3.Not(closed(s, r))),
        s[f"PG{r}"] == s[f"ARR{r}"] + 1, s[f"PG{r}"] == 0)


def _lockstep(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A rank sends gate g only after the peer's gate g-1 landed, so it is at most one gate
    ahead; while the peer holds its last gate unconsumed it cannot be ahead at all."""
    p = 1 - r
    dv_gates = div_c(prm, delivered(s, prm, p))
    return z3.And(z3.ULE(s[f"SENT{r}"], dv_gates + 1),
                  z3.ULE(s[f"L{r}"], s[f"L{p}"] + 1),
                  z3.ULE(s[f"SENT{r}"], s[f"SENT{p}"] + 1),
                  z3.Implies(eph(s, p) == HOLD, z3.ULE(s[f"SENT{r}"], s[f"L{p}"] + 1)))


def _completions_behind(s: State, prm: Params, r: int) -> z3.BoolRef:
    """The CQ is FIFO and reaped whole: a reap that reached gate g's arrival also took the
    send completions of gate g-1, which preceded it. So at most 2C sends and 2C receives
    wait in the CQ and at most 2C sends in the send queue."""
    c2 = times_c(prm, z3.BitVecVal(2, 64))
    return z3.And(z3.ULE(times_c(prm, s[f"RD{r}"]), sends_reaped(s, prm, r) + times_c(
                      prm, z3.BitVecVal(1, 64))),
                  z3.ULE(z64(s[f"QS{r}"]), c2), z3.ULE(z64(s[f"QR{r}"]), c2),
                  z3.ULE(z64(s[f"SQ{r}"]), c2),
                  z3.ULE(z64(s[f"RQ{r}"]), times_c(prm, prm["W"])),
                  # at most one leftover of each kind and one injected error completion
                  z3.ULE(s[f"QW{r}"], s[f"STR{r}"]), z3.ULE(s[f"STR{r}"], 2),
                  z3.ULE(s[f"QE{r}"], z3.If(s[f"EU{r}"], z3.BitVecVal(1, 8),
                                            z3.BitVecVal(0, 8))))


def _drain_counts(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Dummies: posted once per drain, window*chunks of them; their send completions count
    for drain_sends, the peer's dummies landing here for drain_recvs. Dummies in flight
    consume exactly the peer's remaining gate receives, which ask for later gates than the
    sender's last; the peer is draining too, at the same last gate."""
    p = 1 - r
    ph = eph(s, r)
    flying = s[f"SQD{r}"] + s[f"WD{r}"]
    # (drain_sends and drain_recvs of a rank an error completion failed are partial)
    return z3.And(
        z3.If(ph == DRAIN_WAIT,
              z3.Implies(alive(s, r), s[f"DS{r}"] + s[f"QSD{r}"] + s[f"SQD{r}"] == wc32(prm)),
              z3.And(s[f"SQD{r}"] == 0, s[f"QSD{r}"] == 0)),
        z3.Implies(s[f"WD{r}"] != 0, z3.Or(ph == DRAIN_WAIT, closed(s, r))),
        # (the peer's dummies reach r whether or not the peer is still alive)
        z3.Implies(alive(s, r), z3.If(
            ph == DRAIN_WAIT, s[f"DR{r}"] + s[f"QRD{r}"] == dummies_in(s, prm, r),
            z3.If(draining_window(s, r), s[f"QRD{r}"] == dummies_in(s, prm, r),
                  s[f"QRD{r}"] == 0))),
        z3.Implies(flying != 0,
                   z3.And(draining_window(s, p), s[f"L{r}"] == s[f"L{p}"],
                          s[f"OP{r}"] == s[f"OP{p}"], eph_in(s, p, BIG_HDR_READ, *DRAINING),
                          z3.Implies(alive(s, p), flying == s[f"RQ{p}"]))))


def _big_window_shape(s: State, prm: Params, r: int) -> z3.BoolRef:
    """After the header exchange the depth is the agreed one; a window is min(depth, chunks
    left) and not empty; all its receives are posted before its barrier; sends, completions
    and receives are counted against it."""
    ph = eph(s, r)
    depth = own_window(prm, r)
    in_win = eph_in(s, r, *BIG_WINDOW)
    return z3.And(
        z3.Implies(eph_in(s, r, *DRAINING, *WINDOWS), s[f"BD{r}"] == depth),
        z3.Implies(in_win, z3.And(
            s[f"BW{r}"] == umin(s[f"BD{r}"], s[f"K{r}"] - s[f"BB{r}"]),
            z3.Implies(eph_in(s, r, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER),
                       s[f"BP{r}"] == s[f"BW{r}"]),
            z3.Implies(ph != BIG_XFER, z3.And(s[f"BS{r}"] == 0, s[f"BR{r}"] == 0,
                                              s[f"BSD{r}"] == 0)),
            # nothing reaches the window before its barrier byte is written
            z3.Implies(eph_in(s, r, BIG_POST, BIG_BAR_SEND), s[f"BL{r}"] == 0),
            # (partial for a rank an error completion failed)
            z3.Implies(alive(s, r), z3.And(
                s[f"BR{r}"] + s[f"QRB{r}"] == s[f"BL{r}"],
                s[f"BS{r}"] == s[f"SQB{r}"] + s[f"QSB{r}"] + s[f"BSD{r}"])))),
        z3.Implies(z3.Not(in_win), z3.And(s[f"SQB{r}"] == 0, s[f"QSB{r}"] == 0,
                                          s[f"QRB{r}"] == 0)),
        # a window starts with everything before it completed
        z3.Implies(eph_in(s, r, *WINDOWS), z3.And(
            s[f"SQ{r}"] == 0, s[f"QS{r}"] == 0, s[f"SQD{r}"] == 0, s[f"QSD{r}"] == 0,
            s[f"QR{r}"] == 0, s[f"QRD{r}"] == 0)),
        z3.Implies(z3.And(alive(s, r), eph_in(s, r, BIG_BEGIN, BIG_POST, BIG_BAR_SEND)),
                   s[f"SO{r}"] == 0))


def _big_chunks_aligned(s: State, prm: Params, r: int) -> z3.BoolRef:
    """r's big chunks in flight belong to the window the peer has posted and waits in: the
    same big gate, the next chunk the peer's receives expect, no more than it posted. The
    ranks' windows are the same size (not claimed with depth-mismatch, where in a big gate
    larger than the smaller window the rank with the larger one sends past the peer's)."""
    p = 1 - r
    flying = big_in_flight(s, r)
    same_win = z3.And(s[f"BNO{p}"] == s[f"BNO{r}"], s[f"BB{p}"] == s[f"BB{r}"])
    room, fits, same_size = s[f"BW{p}"], z3.ULE(flying, s[f"RQB{p}"]), s[f"BW{r}"] == s[f"BW{p}"]
    if _mismatch(prm):
        wider = z3.And(prm["depth_mismatch"], z3.UGT(s[f"BW{r}"], s[f"BW{p}"]))
        room = z3.If(wider, s[f"BW{r}"], room)
        fits = z3.Or(wider, fits)
        same_size = z3.Or(prm["depth_mismatch"], same_size)
    # a dead peer's NIC takes nothing: the chunks reaching it are gone
    return z3.And(
        z3.Implies(flying != 0, z3.And(
            eph_in(s, p, BIG_BAR_READ, BIG_XFER), s[f"FNO{r}"] == s[f"BNO{p}"],
            # they are for the peer's window, dead or alive (a dead peer cannot finish it)
            z3.ULE(s[f"BB{p}"], s[f"FX{r}"]),
            z3.ULE(z64(s[f"FX{r}"]) + z64(flying), z64(s[f"BB{p}"]) + z64(room)),
            z3.Implies(alive(s, p), z3.And(s[f"FX{r}"] == s[f"BB{p}"] + s[f"BL{p}"],
                                           fits)))),
        z3.Implies(flying == 0, z3.And(s[f"FX{r}"] == 0, s[f"FNO{r}"] == 0)),
        # the chunks in flight are the last sent: of the current window, or of the window
        # just done (or, once the next big gate is called, of the last big gate)
        z3.Implies(z3.And(flying != 0, s[f"FNO{r}"] == s[f"BNO{r}"]), z3.And(
            s[f"FX{r}"] + flying == s[f"BB{r}"] + z3.If(eph(s, r) == BIG_XFER,
                                                        s[f"BS{r}"], bv(0)),
            z3.ULE(flying, z3.If(eph(s, r) == BIG_XFER, s[f"BS{r}"], s[f"BD{r}"])))),
        z3.Implies(z3.And(flying != 0, s[f"FNO{r}"] != s[f"BNO{r}"]),
                   z3.And(s[f"FNO{r}"] + 1 == s[f"BNO{r}"], eph_in(s, r, *PRE_DRAIN))),
        # the peer's window gets nothing from r before r is in it too (or past it)
        z3.Implies(z3.And(eph_in(s, p, *BIG_WINDOW), alive(s, p),
                          z3.Not(z3.And(eph_in(s, r, *BIG_WINDOW), same_win)),
                          z3.Not(z3.Or(s[f"OP{r}"] == s[f"OP{p}"] + 1,
                                       z3.And(s[f"OP{r}"] == s[f"OP{p}"],
                                              eph_in(s, r, *WINDOWS),
                                              z3.UGT(s[f"BB{r}"], s[f"BB{p}"]))))),
                   s[f"BL{p}"] == 0),
        # a rank past the peer's window sent all of it: what did not reach the peer is in
        # flight
        z3.Implies(z3.And(eph_in(s, p, *BIG_WINDOW), alive(s, p),
                          z3.Or(z3.And(s[f"OP{r}"] == s[f"OP{p}"] + 1, s[f"LB{r}"]),
                                z3.And(s[f"OP{r}"] == s[f"OP{p}"], eph_in(s, r, *WINDOWS),
                                       z3.UGT(s[f"BB{r}"], s[f"BB{p}"])))),
                   z64(s[f"BL{p}"]) + z64(flying) == z64(s[f"BW{p}"])),
        # in the same window, what reached the peer plus what is in flight is what r sent
        z3.Implies(z3.And(eph_in(s, r, *BIG_WINDOW), eph_in(s, p, *BIG_WINDOW), same_win),
                   z3.And(same_size,
                          z3.Implies(alive(s, p), z64(s[f"BL{p}"]) + z64(flying)
                                     == z64(s[f"BS{r}"])))),
        z3.Implies(eph(s, r) == BIG_XFER,
                   z3.Or(z3.And(same_win, eph_in(s, p, BIG_BAR_READ, BIG_XFER)),
                         z3.And(z3.Not(same_win), flying == 0, s[f"BS{r}"] == s[f"BW{r}"]))))


def _cq_budget(s: State, prm: Params, r: int, room: bool = False) -> z3.BoolRef:
    """In a drain or a big-gate window, the completions in the CQ plus those the posted work
    requests can still bring, plus room for the leftovers and error completion still
    possible, never exceed the CQ: window*chunks dummies each way and the last gates' 2C
    sends in a drain, a big window's sends and receives after it."""
    c2 = z3.Extract(31, 0, times_c(prm, z3.BitVecVal(2, 64)))
    core = (s[f"QS{r}"] + s[f"QR{r}"] + s[f"QSD{r}"] + s[f"QRD{r}"] + s[f"QSB{r}"]
            + s[f"QRB{r}"] + sq_total(s, r) + s[f"RQ{r}"] + s[f"RQB{r}"])
    reserve = z3.If(prm["FAULTS"], z3.ZeroExt(24, s[f"QW{r}"]) + 2 - z3.ZeroExt(24, s[f"STR{r}"])
                    + z3.ZeroExt(24, s[f"QE{r}"]) + z3.If(s[f"EU{r}"], bv(0), bv(1)), bv(0))
    wins = eph_in(s, r, *WINDOWS)
    bound = z3.If(wins, 2 * s[f"BW{r}"], 2 * wc32(prm) + c2)
    # decode windows are bounded by completions_behind instead (at most 4C, by lockstep)
    when = z3.And(alive(s, r), z3.Or(wins, eph_in(s, r, *DRAINING), draining_window(s, r)))
    return z3.Implies(when, z3.If(room, z3.ULE(bound + reserve, prm["cq_depth"]),
                                  z3.ULE(core, bound)))


def _counts_small(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Dummy and big-chunk counts stay within a drain's and a window's size, so no 32-bit
    sum of them wraps."""
    wc, cap = wc32(prm), prm["BCAP"]
    return z3.And(z3.ULE(s[f"SQD{r}"], wc), z3.ULE(s[f"WD{r}"], wc),
                  z3.ULE(s[f"SQD{r}"] + s[f"WD{r}"], wc), z3.ULE(s[f"QSD{r}"], wc),
                  z3.ULE(s[f"QRD{r}"], wc), z3.ULE(s[f"DR{r}"], wc), z3.ULE(s[f"DS{r}"], wc),
                  z3.ULE(s[f"SQB{r}"], cap), z3.ULE(s[f"WB{r}"], cap),
                  z3.ULE(s[f"SQB{r}"] + s[f"WB{r}"], cap), z3.ULE(s[f"QSB{r}"], cap),
                  z3.ULE(s[f"QRB{r}"], cap), z3.ULE(s[f"RQB{r}"], cap),
                  z3.ULE(s[f"SO{r}"], wc + cap + 4), z3.ULE(s[f"RQ{r}"], wc))


def _big_progress(s: State, prm: Params, r: int) -> z3.BoolRef:
    """In a big gate the ranks are at most a window apart: a rank past a window (or past the
    whole big gate) leaves the peer in that window with all its sends posted. A rank's big
    chunks are in flight only from its window's sends until the peer has them, which is
    before either rank gets past the next barrier or the next decode gate's sends."""
    p = 1 - r
    same_op = s[f"OP{r}"] == s[f"OP{p}"]
    p_last = z3.UGE(s[f"BB{p}"] + s[f"BW{p}"], s[f"K{p}"])
    p_sent_all = z3.And(eph(s, p) == BIG_XFER, s[f"BS{p}"] == s[f"BW{p}"])
    r_win, p_win = eph_in(s, r, *WINDOWS), eph_in(s, p, *WINDOWS)
    flying = big_in_flight(s, r)
    return z3.And(
        z3.Implies(z3.And(s[f"OP{r}"] == s[f"OP{p}"] + 1, s[f"LB{r}"]),
                   z3.And(p_sent_all, p_last)),
        z3.Implies(z3.And(same_op, r_win, p_win, z3.UGT(s[f"BB{r}"], s[f"BB{p}"])),
                   z3.And(p_sent_all, s[f"BB{r}"] == s[f"BB{p}"] + s[f"BW{p}"])),
        z3.Implies(z3.And(same_op, r_win, eph_in(s, p, *PRE_DRAIN, *DRAINING)),
                   z3.And(s[f"BB{r}"] == 0, eph(s, r) != BIG_XFER)),
        z3.Implies(flying != 0, z3.Not(eph_in(s, r, SEND, WAIT, HOLD, *DRAINING))),
        z3.Implies(s[f"SQD{r}"] + s[f"WD{r}"] != 0, z3.Not(eph_in(s, r, SEND, WAIT, HOLD))))


def _epochs_in_step(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A rank whose window is open has read the peer's barrier byte, so the peer's window is
    open too (or the peer is between writing and reading its own byte); a rank a decode gate
    ahead had the peer's gate, so the peer has sent it. After a drain nothing of the decode
    window is left in flight or in the CQ; while a window is open no big chunk is in flight;
    the send stream is gate chunks, then dummies, then big chunks, never two of those kinds
    but gate chunks and dummies."""
    p = 1 - r
    gate_dummy = s[f"SQ{r}"] + s[f"WIRE{r}"] + s[f"SQD{r}"] + s[f"WD{r}"]
    posted = dummies_posted(s, prm, r)
    return z3.And(
        z3.Implies(z3.Or(eph_in(s, r, SEND, WAIT, HOLD),
                         z3.And(eph(s, r) == IDLE, s[f"WA{r}"])),
                   z3.Or(s[f"WA{p}"], eph(s, p) == ARM_BAR_READ)),
        z3.Implies(z3.And(s[f"OP{p}"] == s[f"OP{r}"] + 1, z3.Not(s[f"LB{p}"])),
                   eph_in(s, r, WAIT, HOLD)),
        z3.Implies(closed(s, r), z3.And(*(s[f"{v}{r}"] == 0 for v in (
            "SQ", "QS", "SQD", "QSD", "QR", "QRD")))),
        z3.Implies(s[f"WA{r}"], big_in_flight(s, r) == 0),
        # the peer's drain ended only once this rank's dummies all reached it
        z3.Implies(closed(s, p), z3.And(
            z3.Not(z3.And(draining_window(s, r), eph(s, r) != DRAIN_WAIT)),
            z3.Implies(eph(s, r) == DRAIN_WAIT, s[f"SQD{r}"] + s[f"WD{r}"] == 0))),
        z3.Or(gate_dummy == 0, big_in_flight(s, r) == 0),
        z3.Implies(s[f"SQ{r}"] != 0, s[f"SQD{r}"] == posted),
        z3.Implies(s[f"WIRE{r}"] != 0, s[f"SQD{r}"] + s[f"WD{r}"] == posted))


def _barrier_tags(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Both ranks write one big-gate barrier byte per window, so the tags they have written
    before their current windows agree, but for the one window a rank may be ahead by (its
    tag wraps at 256 and stays in step)."""
    p = 1 - r
    one8, zero8 = z3.BitVecVal(1, 8), z3.BitVecVal(0, 8)

    def before(x: int) -> z3.BitVecRef:
        return s[f"BT{x}"] - z3.If(eph_in(s, x, BIG_BAR_READ, BIG_XFER), one8, zero8)

    same_op = s[f"OP{r}"] == s[f"OP{p}"]
    r_win, p_win = eph_in(s, r, *WINDOWS), eph_in(s, p, *WINDOWS)
    r_ahead = z3.Or(z3.And(same_op, r_win, p_win, z3.UGT(s[f"BB{r}"], s[f"BB{p}"])),
                    z3.And(s[f"OP{r}"] == s[f"OP{p}"] + 1, s[f"LB{r}"]))
    p_ahead = z3.Or(z3.And(same_op, r_win, p_win, z3.UGT(s[f"BB{p}"], s[f"BB{r}"])),
                    z3.And(s[f"OP{p}"] == s[f"OP{r}"] + 1, s[f"LB{p}"]))
    return before(r) == before(p) + z3.If(r_ahead, one8, zero8) - z3.If(p_ahead, one8, zero8)


def _faults_recorded(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A dead rank or an injected error completion means a fault was injected, and none is
    without faults explored."""
    return z3.And(z3.Implies(z3.Or(z3.Not(alive(s, r)), s[f"EU{r}"]), s["faulted"]),
                  z3.Implies(z3.Not(prm["FAULTS"]),
                             z3.And(z3.Not(s["faulted"]), s[f"STR{r}"] == 0)))


# what only drains and big gates touch: zero (false) throughout a decode-only workload
BIG_ONLY = ("K", "SQD", "WD", "QSD", "QRD", "DR", "DS", "BNO", "BD", "BB", "BW", "BP", "BS",
            "BSD", "BR", "BL", "SQB", "WB", "QSB", "QRB", "RQB", "FNO", "FX", "BT", "LB", "HDR")


def _decode_only(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Without big gates in the workload no big-gate state is ever touched (this one is
    inductive on its own, so decode-only proofs may take these variables as zero)."""
    quiet = [z3.Not(s[f"{v}{r}"]) if z3.is_bool(s[f"{v}{r}"]) else s[f"{v}{r}"] == 0
             for v in BIG_ONLY]
    return z3.Implies(z3.Not(prm["BIG"]),
                      z3.And(*quiet, z3.Not(eph_in(s, r, *BIG_OP)), s["SCA"] == 0,
                             s["SCB"] == 0))


def quiet_pairs(*states: State) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
    """The substitution that sets every big-gate-only variable of these states to zero."""
    pairs = []
    for st in states:
        for r in (0, 1):
            for v in BIG_ONLY:
                x = st[f"{v}{r}"]
                zero = z3.BoolVal(False) if z3.is_bool(x) else z3.BitVecVal(0, x.size())
                pairs.append((x, zero))
        pairs += [(st[v], z3.BitVecVal(0, st[v].size())) for v in ("SCA", "SCB")]
    return pairs


LEMMAS: dict[str, Callable[[State, Params], z3.BoolRef]] = {
    "phase_shape": both(_phase_shape),
    "seq_headroom": both(_seq_headroom),
    "script_kept": both(_script_kept),
    "ops_in_step": both(_ops_in_step),
    "window_posted": both(_window_posted),
    "tcp_in_flight": both(_tcp_in_flight),
    "streams_conserved": both(_streams_conserved),
    "watermark_counts_reaped": both(_watermark_counts_reaped),
    "partial_gate": both(_partial_gate),
    "lockstep": both(_lockstep),
    "completions_behind": both(_completions_behind),
    "drain_counts": both(_drain_counts),
    "big_window_shape": both(_big_window_shape),
    "big_chunks_aligned": both(_big_chunks_aligned),
    "counts_small": both(_counts_small),
    "epochs_in_step": both(_epochs_in_step),
    "barrier_tags": both(_barrier_tags),
    "big_progress": both(_big_progress),
    "cq_budget": both(_cq_budget),
    # ... and that budget fits the CQ with room for the faults (a condition on the parameters)
    "cq_room": both(lambda s, prm, r: _cq_budget(s, prm, r, room=True)),
    # queue_bounds' CQ part on its own, so that an undersized receive or send queue (which the
    # spec only flags) does not take the CQ facts the other proofs need down with it
    "cq_no_overflow": both(lambda s, prm, r: z3.Not(s[f"OVF{r}"])),
    "faults_recorded": both(_faults_recorded),
    "decode_only": both(_decode_only),
    # the model is exact: no step leaves what its counters describe
    "counters_exact": lambda s, prm: z3.Not(s["unmodelled"]),
}


# ---------------------------------------------------------------------------- regions
@dataclass(frozen=True)
class Condition:
    """One assumption of a region, with the property that fails just outside it."""

    name: str
    holds: Callable[[Params], z3.BoolRef]
    outside: Callable[[Params], z3.BoolRef]     # the boundary point just outside
    breaks: str
    example: dict[str, int]     # executable-spec parameters just outside, for replay
    max_faults: int = 0         # fault actions the shortest run just outside may take
    max_states: int = 600_000   # breadth-first budget for that run


def _c(prm: Params, k: int) -> z3.BitVecRef:
    return z3.Extract(31, 0, times_c(prm, z3.BitVecVal(k, 64)))


CONDITIONS: tuple[Condition, ...] = (
    Condition("window >= 2", lambda q: z3.UGE(q["W"], 2), lambda q: q["W"] == 1,
              "no_silent_drop", {"window": 1}),
    Condition("rq_depth >= window*chunks",
              lambda q: z3.UGE(z64(q["rq_depth"]), times_c(q, q["W"])),
              lambda q: z64(q["rq_depth"]) + 1 == times_c(q, q["W"]),
              "queue_bounds", {"rq_depth": 31}),
    Condition("sq_depth >= 2*chunks", lambda q: z3.UGE(q["sq_depth"], _c(q, 2)),
              lambda q: q["sq_depth"] + 1 == _c(q, 2), "queue_bounds", {"sq_depth": 3}),
    Condition("cq_depth >= 4*chunks", lambda q: z3.UGE(q["cq_depth"], _c(q, 4)),
              lambda q: q["cq_depth"] + 1 == _c(q, 4), "queue_bounds",
              {"window": 2, "cq_depth": 7}),
    # two warm-up leftovers and an injected error completion on top of a full decode CQ; the
    # shortest run needs all three faults (about 980k states at this point)
    Condition("cq_depth >= 4*chunks + 3 with faults",
              lambda q: z3.Implies(q["FAULTS"], z3.UGE(q["cq_depth"], _c(q, 4) + 3)),
              lambda q: z3.And(q["FAULTS"], q["cq_depth"] + 1 == _c(q, 4) + 3),
              "queue_bounds", {"window": 2, "vec_bytes": 16384, "cq_depth": 6, "faults": 1},
              max_faults=3, max_states=1_200_000),
    Condition("chain_max >= chunks", lambda q: z3.UGE(z64(q["chain_max"]), q["C"]),
              lambda q: z64(q["chain_max"]) + 1 == q["C"], "queue_bounds", {"chain_max": 1}),
    Condition("slot period >= 2 (gates_per_token >= 2, or 0 with n_slots >= 2)",
              lambda q: z3.UGE(q["P"], 2), lambda q: q["P"] == 1, "slot_exclusive",
              {"gates_per_token": 1}),
)

DOMAIN = "1 <= chunks <= 2, 1 <= window <= 2^20, depths < 2^24, 1 <= ops < 2^61"


def domain(prm: Params) -> z3.BoolRef:
    """What every parameter value satisfies (the spec's own validation, plus sizes)."""
    lim = 1 << 24
    return z3.And(z3.Or(prm["C"] == 1, prm["C"] == 2), z3.UGE(prm["W"], 1),
                  z3.ULE(prm["W"], 1 << 20), z3.UGE(prm["P"], 1), z3.ULE(prm["P"], 1 << 32),
                  z3.UGE(prm["OPS"], 1), z3.ULT(prm["OPS"], OPS_LIMIT),
                  *(z3.And(z3.UGE(prm[k], 1), z3.ULT(prm[k], lim))
                    for k in ("rq_depth", "sq_depth", "cq_depth", "chain_max", "BCAP",
                              "SDEPTH")),
                  z3.ULE(prm["SDEPTH"], prm["sq_depth"]))


def region(prm: Params, *, window_max: int | None = 256, skip: str | None = None
           ) -> z3.BoolRef:
    conds = [c.holds(prm) for c in CONDITIONS if c.name != skip]
    conds += [z3.Not(prm[f]) for f in MODEL_VARIANTS.values() if f]     # the base protocol
    conds.append(z3.Not(prm["BIG"]))                                    # decode gates only
    if window_max is not None:
        conds.append(z3.ULE(prm["W"], window_max))
    return z3.And(domain(prm), *conds)


def region_text(window_max: int | None = 256) -> str:
    w = f"2 <= window <= {window_max}" if window_max else "window >= 2"
    rest = ", ".join(c.name for c in CONDITIONS[1:])
    return (f"{w}, chunks in {{1, 2}}, {rest}, any workload (ops < 2^61), faults 0 or 1 "
            f"(decode gates, the base protocol)")


# ---------------------------------------------------------------------------- parameters
def slot_period(cfg: GateConfig) -> int:
    """Gates between two uses of one slot (the schedule is periodic with this period)."""
    n = cfg.gates_per_token or cfg.n_slots
    first = [cfg.slot(s) for s in range(1, n + 1)]
    for period in range(1, n + 1):
        if all(first[i] == first[i % period] for i in range(n)) and \
                len(set(first[:period])) == period:
            return period
    return n


def params_of(cfg: GateConfig, variants: Iterable[str] = ()) -> dict[str, int]:
    flags = {MODEL_VARIANTS[v] for v in variants if MODEL_VARIANTS.get(v)}
    return {"W": cfg.window, "C": cfg.chunks, "P": slot_period(cfg), "rq_depth": cfg.rq_depth,
            "sq_depth": cfg.sq_depth, "cq_depth": cfg.cq_depth, "chain_max": cfg.chain_max,
            "OPS": cfg.ops, "FAULTS": cfg.faults, "BIG": cfg.big_gates,
            "BCAP": min(cfg.big_depth, max(1, cfg.staging_bytes // cfg.max_msg)),
            "SDEPTH": cfg.big_send_depth(),
            **{f: int(f in flags) for f in set(MODEL_VARIANTS.values()) - {None}}}


def param_terms(values: Mapping[str, int]) -> Params:
    return {k: z3.BoolVal(bool(values[k])) if w == 0 else z3.BitVecVal(values[k], w)
            for k, w in PARAM_VARS.items()}


# ---------------------------------------------------------------------------- abstraction
def _chunk_index(cfg: GateConfig, seq: int, chunk: int) -> int:
    return cfg.chunks * (seq - 1) + chunk + 1


def _tcp_item(item: Any) -> dict[str, int]:
    if item is None:
        return dict.fromkeys(TCP_FIELDS, 0)
    if item.kind == "byte":
        return {"K": TCP_BYTE, "V": item.value, "C": 0, "D": 0}
    return {"K": TCP_HEADER, "V": item.value, "C": item.chunks, "D": item.depth}


def alpha(cfg: GateConfig, st: GateState) -> dict[str, Any]:
    """The abstract values of a concrete state over UC without wire loss (defined up to and
    including the first state an invariant rejects)."""
    c = cfg.chunks
    out: dict[str, Any] = {}
    f = st.fabric
    script = st.script
    out.update({"SLEN": len(script), "SCA": script[-1] if script else 0,
                "SCB": script[-2] if len(script) > 1 else 0})
    for r, rk in enumerate(st.ranks):
        qp = f.qps[r]
        is_armed = rk.window_active or rk.phase in (gs.ARM_BAR_SEND, gs.ARM_BAR_READ)
        gate_rq = [w for w in qp.rq if w.buf == "in"]
        stage_rq = [w for w in qp.rq if w.buf == "stage"]
        if gate_rq:
            w = gate_rq[0].want
            landed = _chunk_index(cfg, w.seq, w.chunk) - 1
        else:
            armed_ever = is_armed or rk.last_gate_seq != 0
            landed = c * (rk.last_gate_seq + cfg.window) if armed_ever else 0
        sq_kinds = [w.payload.kind for w in qp.sq]
        wire_kinds = [m.payload.kind for m in f.wire[r]]
        cq_kinds = [_cqe_kind(e) for e in qp.cq]
        big_flight = [m.payload for m in f.wire[r] if m.payload.kind == "big"] + [
            w.payload for w in qp.sq if w.payload.kind == "big"]
        partial = [h.seq for h in rk.held if h.buf == "in" and len(h.chunks) < c]
        tcp = f.tcp[r]
        if len(tcp) > 2:
            raise ValueError(f"rank {r} has {len(tcp)} TCP items unread, outside the model")
        items = [_tcp_item(tcp[i] if i < len(tcp) else None) for i in (0, 1)]
        op = rk.op
        out.update({
            f"ph{r}": PHASE_CODE[rk.phase], f"S{r}": rk.seq, f"L{r}": rk.last_gate_seq,
            f"RD{r}": rk.recv_done, f"WA{r}": rk.window_active, f"SO{r}": rk.send_outstanding,
            f"SENT{r}": rk.sent_seq, f"SQ{r}": sq_kinds.count("gate"),
            f"WIRE{r}": wire_kinds.count("gate"),
            **{f"{QUEUE_OF[k]}{r}": cq_kinds.count(k) for k in KINDS},
            f"QW{r}": cq_kinds.count("kw"), f"QE{r}": cq_kinds.count("ke"),
            f"STR{r}": len(rk.strays), f"EU{r}": "cqe" in rk.faults_used,
            f"RQ{r}": len(gate_rq), f"LANDED{r}": landed, f"ARR{r}": rk.arrived,
            f"PG{r}": partial[0] if partial else 0, f"OVF{r}": qp.cq_overflow,
            f"DPH{r}": PHASE_CODE[rk.died_in] if rk.died_in else 0,
            f"OP{r}": op, f"K{r}": rk.big_chunks,
            f"LB{r}": op >= 1 and script[op - 1] != 0,
            f"SQD{r}": sq_kinds.count("dummy"), f"WD{r}": wire_kinds.count("dummy"),
            f"DR{r}": rk.drain_recvs, f"DS{r}": rk.drain_sends,
            f"BNO{r}": rk.big_no, f"HDR{r}": rk.hdr_ok, f"BD{r}": rk.big_depth,
            f"BB{r}": rk.big_base, f"BW{r}": rk.big_win, f"BP{r}": rk.big_posted,
            f"BS{r}": rk.big_sent, f"BSD{r}": rk.big_send_done, f"BR{r}": len(rk.big_recvd),
            f"BL{r}": rk.big_posted - len(stage_rq), f"BT{r}": rk.barrier_tag,
            f"SQB{r}": sq_kinds.count("big"), f"WB{r}": wire_kinds.count("big"),
            f"RQB{r}": len(stage_rq),
            f"FNO{r}": big_flight[0].chunk if big_flight else 0,
            f"FX{r}": big_flight[0].seq if big_flight else 0,
            f"TN{r}": len(tcp),
            **{f"T{i + 1}{k}{r}": v for i, it in enumerate(items) for k, v in it.items()}})
    g = st.ghost
    out.update({"dropped": bool(g.drops), "misaligned": bool(g.misaligned),
                "clobbered": bool(g.clobbered), "stale": bool(g.stale),
                "out_of_order": bool(g.order), "long_chain": bool(g.long_chains),
                "faulted": g.faulted, "unmodelled": False})
    return out


def _cqe_kind(e: Any) -> str:
    """Which of the model's CQ counts a completion belongs to (its reap choice name)."""
    if e.status != ST_OK:
        return "ke"
    kind = e.payload.kind
    if kind == "warm":
        return "kw"
    if e.opcode == "send":
        return {"gate": "ks", "dummy": "kds", "big": "kbs"}[kind]
    return {"gate": "kr", "dummy": "kdr", "big": "kbr"}[kind]


def reap_choice(st: GateState, r: int) -> dict[str, int]:
    """How the spec's reap splits the first 16 completions, and how many of each kind
    precede the first error among them."""
    got = [_cqe_kind(e) for e in st.fabric.qps[r].cq[:POLL_BATCH]]
    before = got[:got.index("ke")] if "ke" in got else got
    out = {f"{k}{r}": got.count(k) for k in (*KINDS, "kw", "ke")}
    out.update({f"{k}b{r}": before.count(k) for k in KINDS})
    return out


def value_terms(values: Mapping[str, Any], like: Mapping[str, z3.ExprRef]
                ) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
    pairs = []
    for k, v in values.items():
        sym = like[k]
        val = z3.BoolVal(bool(v)) if z3.is_bool(sym) else z3.BitVecVal(v, sym.size())
        pairs.append((sym, val))
    return pairs


def evaluate(term: z3.ExprRef, pairs: list[tuple[z3.ExprRef, z3.ExprRef]]) -> bool:
    """Truth of a term once every variable is replaced by a value."""
    val = z3.simplify(z3.substitute(term, *pairs))
    if z3.is_true(val):
        return True
    if z3.is_false(val):
        return False
    solver = z3.Solver()
    solver.add(val)
    return solver.check() == z3.sat


# ---------------------------------------------------------------------------- induction
@dataclass(frozen=True)
class Obligation:
    name: str
    verdict: str        # "proved" | "inconclusive"
    seconds: float
    detail: str = ""


ALL_INVARIANTS: dict[str, Callable[[State, Params], z3.BoolRef]] = {**PROPERTIES, **LEMMAS}


def swap_ranks(s: Mapping[str, z3.ExprRef]) -> dict[str, z3.ExprRef]:
    """The same state (or choice) with ranks 0 and 1 exchanged."""
    out = {}
    for k, v in s.items():
        base, last = k[:-1], k[-1:]
        if last in ("0", "1") and (base in RANK_VARS or base in CHOICES):
            k = f"{base}{1 - int(last)}"
        out[k] = v
    return out


def _valid(claim: z3.BoolRef, timeout_ms: int) -> bool:
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(z3.Not(claim))
    return solver.check() == z3.unsat


def rank_symmetric(prm: Params, timeout_ms: int = 20_000) -> bool:
    """The model is symmetric in the ranks: every invariant gives the same verdict on a state
    and on its mirror, and rank 1's moves are rank 0's on mirrored states. Then consecution
    needs checking for rank 0's moves only (a rank-1 step is a mirrored rank-0 step)."""
    s, t, ch = fresh_state("s"), fresh_state("t"), fresh_choice("s")
    ms, mt, mch = swap_ranks(s), swap_ranks(t), swap_ranks(ch)
    for inv in (*ALL_INVARIANTS.values(), *CONSEQUENCES.values()):
        if not _valid(inv(s, prm) == inv(ms, prm), timeout_ms):
            return False
    return all(_valid(move(a, 1, s, t, prm, ch) == move(a, 0, ms, mt, prm, mch), timeout_ms)
               for a in ACTIONS)


def _is_var(x: z3.ExprRef) -> bool:
    """A free constant: a state, choice or parameter variable."""
    return z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED


def _consts(e: z3.ExprRef) -> set[str]:
    """Names of the free constants of a term."""
    seen: set[int] = set()
    out: set[str] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if _is_var(x):
            out.add(x.decl().name())
        todo.extend(x.children())
    return out


def _conjuncts(e: z3.BoolRef) -> list[z3.BoolRef]:
    if z3.is_and(e):
        return [x for c in e.children() for x in _conjuncts(c)]
    return [e]


def _values_text(values: Mapping[str, Any], known: Iterable[z3.ExprRef], s: State,
                 t: Mapping[str, z3.ExprRef] | None = None) -> str:
    """A counterexample's states, from a model's values (constants it leaves free are 0)."""
    pairs = []
    for c in known:
        v = values.get(c.decl().name(), False if z3.is_bool(c) else 0)
        pairs.append((c, z3.BoolVal(v) if z3.is_bool(c) else z3.BitVecVal(v, c.size())))

    def show(st: Mapping[str, z3.ExprRef]) -> str:
        parts = []
        for k, v in st.items():
            val = z3.simplify(z3.substitute(v, *pairs))
            if z3.is_true(val) or (not z3.is_bool(val) and val.as_long() != 0):
                parts.append(f"{k}={val}")
        return " ".join(parts)

    text = f"pre: {show(s)}"
    if t is not None:
        text += f"; post: {show(t)}"
    return text


def _free(*terms: Mapping[str, z3.ExprRef]) -> list[z3.ExprRef]:
    return [v for m in terms for v in m.values() if _is_var(v)]


# Consecution asks one query per (C, action) for all the strengthening invariants the action
# touches together: cheaper than one each, except for these actions, whose moves are case
# splits over kinds of message and completion (measured at the defaults: per-lemma queries
# took less solver time there).
SPLIT_ACTIONS = ("reap", "deliver", "call_big")


@contextmanager
def _pool(solvers: Solvers | None) -> Iterator[Solvers]:
    """The caller's worker pool, or one of our own (one worker per core) while in use."""
    if solvers is not None:
        yield solvers
        return
    with Solvers() as pool:
        yield pool


def _quiet_sub(s: State, quiet: bool, names: Iterable[str]
               ) -> Callable[[z3.ExprRef], z3.ExprRef]:
    """With decode_only among the invariants (proved on its own first, see houdini()), a
    decode-only workload's big-gate variables are zero: substituting them shrinks every
    query."""
    zero = quiet_pairs(s) if quiet and "decode_only" in names else []
    if not zero:
        return lambda x: x
    return lambda x: z3.substitute(x, *zero)


# ---------------------------------------------------------------------------- post-states
# A 32-bit counter enters sums zero-extended, and z64(x - 1) is not z64(x) - 1 to the
# simplifier (x may be 0), so a step that moves one count from a counter to another (transmit:
# send queue to wire) leaves two adders for the SAT solver to show equal. Written as z64(x)
# plus the step, with "the step does not wrap" among what the query shows, the two steps
# cancel before bit-blasting (at the defaults: transmit's shared query 13.4 s to 5.5 s).

def _steps(x: z3.BitVecRef, v: z3.ExprRef, path: tuple = ()
           ) -> list[tuple[z3.BitVecRef, tuple]] | None:
    """v as x plus 64-bit steps, each under the path of conditions it is taken on, where v
    is x, v-like plus or minus a term free of x, or an If of v-likes; None otherwise."""
    if z3.eq(v, x):
        return []
    kind = v.decl().kind() if z3.is_app(v) else None
    if kind in (z3.Z3_OP_BADD, z3.Z3_OP_BSUB) and v.num_args() == 2:
        rest, y = _steps(x, v.arg(0), path), v.arg(1)
        # x + (w - x) cancels in 32 bits already (big_send's sent + its sub-batch)
        if rest is None or x.decl().name() in _consts(y):
            return None
        k = z3.simplify(y)      # a constant may come as a term (send queue + C: Extract of C)
        sign = 1 if kind == z3.Z3_OP_BADD else -1
        if z3.is_bv_value(k):
            return [*rest, (z3.BitVecVal(sign * k.as_long(), 64), path)]
        return [*rest, (z64(y) if sign > 0 else -z64(y), path)]
    if kind == z3.Z3_OP_ITE:
        c = v.arg(0)
        a, b = _steps(x, v.arg(1), (*path, c)), _steps(x, v.arg(2), (*path, z3.Not(c)))
        if a is not None and b is not None:
            return a + b
    return None


def _delta(steps: list[tuple[z3.BitVecRef, tuple]]) -> z3.BitVecRef:
    """The sum of the steps taken. A constant step on a path is the constant times the
    path's 0/1 indicator, so two counters stepped on the same path cancel in a sum."""
    one, zero = z3.BitVecVal(1, 64), z3.BitVecVal(0, 64)
    terms = []
    for step, path in steps:
        if not path:
            terms.append(step)
            continue
        on = z3.And(*path) if len(path) > 1 else path[0]
        terms.append(step * z3.If(on, one, zero) if z3.is_bv_value(step)
                     else z3.If(on, step, zero))
    return sum(terms[1:], terms[0])


Widened = tuple[z3.BitVecRef, z3.BitVecRef, z3.BoolRef]


def _widened(moved: list[tuple[z3.ExprRef, z3.ExprRef]]) -> list[Widened]:
    """For each 32-bit counter a move steps: its zero-extension, the post-state's written as
    that plus the steps, and the claim that they do not wrap (a query that fails to show it
    is inconclusive, never wrong). 8-bit tags wrap by design and are left alone, and so is
    a step by a constant on every path (measured: gate_send's send queue + C only slows)."""
    out = []
    for x, v in moved:
        if not z3.is_bv(x) or x.size() != 32:
            continue
        steps = _steps(x, v)
        if not steps or all(not path and z3.is_bv_value(step) for step, path in steps):
            continue
        lifted = z64(x) + _delta(steps)
        out.append((z64(x), lifted, z64(v) == lifted))
    return out


def _post(p: z3.BoolRef, moved: list[tuple[z3.ExprRef, z3.ExprRef]],
          wide: list[Widened]) -> z3.BoolRef:
    """Conjunct p in the post-state: each widened counter p mentions stands as its lifted
    term, whose no-wrap claim joins p. One substitution, so a lifted term keeps its
    pre-state x."""
    used = [w for w in wide if not z3.eq(z3.substitute(p, (w[0], w[1])), p)]
    post = z3.substitute(p, *[(ext, lifted) for ext, lifted, _ in used], *moved)
    return z3.And(*[side for _, _, side in used], post)


def induction(prm: Params, assume: Callable[[Params], z3.BoolRef],
              names: Iterable[str] | None = None, chunks: Iterable[int] = (1, 2),
              ranks: Iterable[int] = (0, 1), quiet: bool = False,
              solvers: Solvers | None = None,
              table: Mapping[str, Callable[[State, Params], z3.BoolRef]] | None = None,
              live: Callable[[State, Params], z3.BoolRef] | None = None) -> list[Obligation]:
    """Base and consecution of every named invariant, each relative to the named ones only
    (their conjunction is what is shown inductive). With ``quiet`` (for a decode-only
    workload whose decode_only lemma is proved on its own) the big-gate variables are taken
    as zero. ``table`` names the invariants instead of ALL_INVARIANTS (all of them
    strengthening invariants); with ``live``, steps are taken only from the states it admits
    (the runs end in the others).

    Consecution is asked per (C, action, moving rank): C is 1 or 2 (fixing it turns x*C and
    x/C into shifts); ``ranks`` limits the moving rank (see :func:`rank_symmetric`). The
    post-state is the move's effect substituted into the invariant's conjuncts; a conjunct
    over variables the move leaves alone is unchanged, so it is its own hypothesis and stays
    out of the goal (an invariant the move leaves alone needs no query at all). A 32-bit
    counter the move steps is widened there (see :func:`_post`). Each property gets a query
    of its own; the strengthening invariants share one (but for SPLIT_ACTIONS), asked again
    one by one if it fails, to find which."""
    table = table or ALL_INVARIANTS
    shared = LEMMAS if table is ALL_INVARIANTS else table
    names = list(names or table)
    s, ch = fresh_state("s"), fresh_choice("s")
    sub = _quiet_sub(s, quiet, names)

    # a query: (invariants, "base" | "consecution", via, C) -> hypotheses, goal per invariant
    todo: dict[tuple, tuple[list[z3.BoolRef], dict[str, z3.BoolRef]]] = {}
    posts: dict[tuple[int, str], Mapping[str, z3.ExprRef] | None] = {}
    for c in chunks:
        q = {**prm, "C": z3.BitVecVal(c, 64)}
        inv_s = {n: sub(table[n](s, q)) for n in names}
        parts = {n: [(p, _consts(p)) for p in _conjuncts(inv_s[n])] for n in names}
        posts[(c, "initial")] = None
        for n in names:
            todo[((n,), "base", "initial", c)] = ([assume(q), initial(s)], {n: inv_s[n]})
        for a in ACTIONS:
            for r in ranks:
                m = action_move(a, r, s, q, ch)
                moved = [(s[k], sub(v)) for k, v in m.updates.items() if not z3.eq(v, s[k])]
                changed = {x.decl().name() for x, _ in moved}
                via = f"{a}({r})"
                posts[(c, via)] = {k: m.updates.get(k, v) for k, v in s.items()}
                hyp = [assume(q), *inv_s.values(), sub(m.guard)]
                if live is not None:
                    hyp.append(sub(live(s, q)))
                wide = _widened(moved)
                # a conjunct over variables the move leaves alone is its own hypothesis
                goal = {n: z3.And([_post(p, moved, wide) for p, used in parts[n]
                                   if used & changed]) for n in names}
                goal = {n: g for n, g in goal.items() if g.num_args()}
                together = [n for n in goal if n in shared and a not in SPLIT_ACTIONS]
                groups = [tuple(together)] if together else []
                groups += [(n,) for n in goal if n not in together]
                for g in groups:
                    todo[(g, "consecution", via, c)] = (hyp, {n: goal[n] for n in g})
    spent = dict.fromkeys(names, 0.0)
    failed: dict[str, str] = {}
    known = _free(s, ch, prm)
    while todo:
        keys = list(todo)
        with _pool(solvers) as pool:
            answers = pool.run([query(k, *todo[k][0], z3.Not(z3.And(list(todo[k][1].values()))))
                                for k in keys])
        split = {}
        for ans in answers:
            group, label, via, c = ans.key
            for n in group:     # a query for several invariants counts evenly for each
                spent[n] += ans.seconds / len(group)
            if ans.result == "unsat":
                continue
            if len(group) > 1:  # which of them fail: ask for each
                hyp, goal = todo[ans.key]
                split.update({((n,), label, via, c): (hyp, {n: goal[n]}) for n in group})
                continue
            [n] = group
            if n in failed:
                continue
            if ans.result == "sat":
                failed[n] = (f"{label} fails via {via}, chunks={c} (counterexample to "
                             f"induction): {_values_text(ans.model, known, s, posts[(c, via)])}")
            else:
                failed[n] = f"{label} via {via}, chunks={c}: {ans.reason}"
        todo = split
    return [Obligation(n, "inconclusive" if n in failed else "proved", spent[n],
                       failed.get(n, "")) for n in names]


def implied(prm: Params, assume: Callable[[Params], z3.BoolRef], invariants: Iterable[str],
            chunks: Iterable[int] = (1, 2), quiet: bool = False,
            solvers: Solvers | None = None) -> list[Obligation]:
    """Each consequence holds in every state the (proved) inductive invariants admit."""
    with _pool(solvers) as pool:
        return implied_later(prm, assume, invariants, chunks, quiet, pool)()


def implied_later(prm: Params, assume: Callable[[Params], z3.BoolRef],
                  invariants: Iterable[str], chunks: Iterable[int], quiet: bool,
                  solvers: Solvers) -> Callable[[], list[Obligation]]:
    """:func:`implied`, its queries started now; the call returned waits for the verdicts."""
    s = fresh_state("s")
    invariants = list(invariants)
    sub = _quiet_sub(s, quiet, invariants)
    queries = []
    for c in chunks:
        q = {**prm, "C": z3.BitVecVal(c, 64)}
        hyp = [sub(ALL_INVARIANTS[n](s, q)) for n in invariants]
        queries += [query((name, c), assume(q), *hyp, z3.Not(sub(prop(s, q))))
                    for name, prop in CONSEQUENCES.items()]
    pending = solvers.submit(queries)
    known = _free(s, prm)

    def verdicts() -> list[Obligation]:
        spent = dict.fromkeys(CONSEQUENCES, 0.0)
        detail: dict[str, str] = {}
        for a in pending():
            name, c = a.key
            spent[name] += a.seconds
            if name in detail or a.result == "unsat":
                continue
            detail[name] = (f"a state the invariants admit breaks it, chunks={c}: "
                            f"{_values_text(a.model, known, s)}" if a.result == "sat"
                            else f"chunks={c}: {a.reason}")
        return [Obligation(n, "inconclusive" if n in detail else "proved", spent[n],
                           detail.get(n, "")) for n in CONSEQUENCES]

    return verdicts


# ---------------------------------------------------------------------------- BMC
@dataclass(frozen=True)
class Counterexample:
    prop: str
    depth: int                      # moves in the run (stutters removed)
    bound: int                      # the unrolling that found it: no run is shorter than
    moves: list[tuple[str, int]]    # the previous rung; (action, rank or source)
    seconds: float


RUNGS = (4, 8, 16)     # deeper unrollings took minutes on this machine (see docs)
# the region table's cross-check of short runs: the model's BMC unrolls to 8 steps (about 75 s
# a condition here; 16 took minutes) only where the spec's shortest run is that short, else to 4
REGION_RUNGS = (4, 8)


def bmc(prm: Params, assume: z3.BoolRef, prop: str, rungs: Iterable[int] = RUNGS,
        timeout_ms: int = 60_000) -> Counterexample | None:
    """A run of the abstract model that breaks ``prop`` while the other properties hold on the
    way, searched at increasing unrollings. Each step may stutter, so an unrolling of k finds
    every run of at most k moves and an unsat rung proves none is that short. Each rung is a
    fresh QF_BV query: bit-blasting the whole unrolling at once was an order of magnitude faster
    here than z3's incremental mode."""
    t0 = time.perf_counter()
    options = [(a, r) for a in ACTIONS for r in (0, 1)]
    for k in rungs:
        solver = z3.SolverFor("QF_BV")
        solver.set("timeout", timeout_ms)
        states = [fresh_state("b0")]
        solver.add(assume, initial(states[0]))
        sels = []
        for i in range(k):
            nxt, ch = fresh_state(f"b{i + 1}"), fresh_choice(f"b{i}")
            sel = z3.BitVec(f"act@{i}", 8)
            stutter = z3.And([nxt[v] == states[i][v] for v in nxt])
            solver.add(z3.ULE(sel, len(options)), z3.Implies(sel == len(options), stutter))
            for j, (a, r) in enumerate(options):
                solver.add(z3.Implies(sel == j, move(a, r, states[i], nxt, prm, ch)))
            for name, inv in PROPERTIES.items():
                if name != prop:
                    solver.add(inv(states[i], prm))
            states.append(nxt)
            sels.append(sel)
        solver.add(z3.Not(PROPERTIES[prop](states[k], prm)))
        res = solver.check()
        if res == z3.sat:
            m = solver.model()
            picks = [m.eval(sel, model_completion=True).as_long() for sel in sels]
            moves = [options[j] for j in picks if j < len(options)]
            return Counterexample(prop, len(moves), k, moves, time.perf_counter() - t0)
        if res == z3.unknown:
            return None
    return None


# ---------------------------------------------------------------------------- confirmation
def replay_on_spec(system: Any, moves: list[tuple[str, int]]) -> tuple[str, str] | None:
    """Run the abstract counterexample's moves on the executable spec; return the invariant it
    breaks there and the spec's message, or None if the run does not break one."""
    from verbspec.spec.lts import InvariantViolation, action_table, run_step, start_trace

    table = action_table(system)
    trace = start_trace(system)
    try:
        for name, r in moves:
            act = table[name]
            args = next((a for a in act.enabled(trace.steps[-1].state) if a[0] == r), None)
            if args is None:
                return None
            run_step(system, trace, act, args)
    except InvariantViolation as e:
        return e.invariant, e.message
    return None


def _moves_text(moves: list[tuple[str, int]]) -> str:
    return ", ".join(f"{a}({r})" for a, r in moves)


# ---------------------------------------------------------------------------- entry points
def houdini(prm: Params, assume: Callable[[Params], z3.BoolRef], chunks: Iterable[int],
            timeout_ms: int = 120_000, progress: Callable[[str], None] | None = None,
            workers: int | None = None) -> dict[str, Obligation]:
    """The largest subset of the named invariants that is inductive on its own: drop every
    invariant whose base or consecution fails, and repeat relative to those left. Then each
    consequence (no_deadlock) is checked against what is left. Queries run on ``workers``
    processes (default: one per core)."""
    keep = list(ALL_INVARIANTS)
    chunks = tuple(chunks)
    dropped: dict[str, Obligation] = {}
    spent = dict.fromkeys(keep, 0.0)
    ranks = (0,) if rank_symmetric(prm) else (0, 1)
    with Solvers(workers, timeout_ms) as pool:
        # a decode-only workload: once decode_only is inductive on its own, the big-gate
        # variables may be taken as zero everywhere else
        quiet = (z3.is_false(z3.simplify(prm["BIG"])) and all(
            o.verdict == "proved" for o in induction(prm, assume, ["decode_only"], chunks,
                                                     ranks, solvers=pool)))
        # the consequences, relative to every invariant: started first, so they run while
        # the induction does, and used if no invariant is dropped
        first = implied_later(prm, assume, keep, chunks, quiet, pool)
        while True:
            obs = induction(prm, assume, keep, chunks, ranks, quiet, pool)
            for o in obs:
                spent[o.name] += o.seconds
            bad = [o for o in obs if o.verdict != "proved"]
            for o in bad:
                dropped[o.name] = Obligation(o.name, o.verdict, spent[o.name], o.detail)
                if progress:
                    progress(f"{o.name}: not inductive here, dropped")
            if not bad:
                break
            keep = [n for n in keep if n not in dropped]
        proved = {o.name: Obligation(o.name, "proved", spent[o.name]) for o in obs}
        after = {o.name: o for o in (first() if not dropped else
                                     implied(prm, assume, keep, chunks, quiet, pool))}
    return {**proved, **dropped, **after}


SCOPE = ("over UC (qp_type=uc, wire_loss=0): decode gates, drains and big gates, with or "
         "without faults (crashes, error and warm-up completions, timeouts, bad calls, a dead "
         "peer); the base protocol, and for decode-only workloads (big_gates=0) the variants "
         "no-barrier, tag-every-chunk, signal-last-only (with unsignaled_completions=1), "
         "no-seq-check (without faults) and depth-mismatch")


def out_of_scope(cfg: GateConfig, variants: Sequence[str] = ()) -> str | None:
    """Why the model does not cover a configuration, or None."""
    outside = [f"{k}={getattr(cfg, k)}" for k, want in (("qp_type", "uc"), ("wire_loss", 0))
               if getattr(cfg, k) != want]
    outside += [f"variant {v}" for v in variants if v not in MODEL_VARIANTS]
    if cfg.big_gates:
        outside += [f"variant {v} with big_gates=1" for v in variants if v in MODEL_VARIANTS]
    if "no-seq-check" in variants and cfg.faults:
        outside.append("no-seq-check with faults=1 (bad calls)")
    if "signal-last-only" in variants and not cfg.unsignaled_completions:
        outside.append("signal-last-only with unsignaled_completions=0")
    if not outside:
        return None
    return f"the z3 model covers {SCOPE}; this configuration has {', '.join(outside)}"


def prove(values: Mapping[str, Any], variants: Sequence[str] = (), *,
          progress: Callable[[str], None] | None = None, trace_dir: Path | None = None
          ) -> list[Result]:
    """Every invariant of the gate system for one configuration, by induction on the model
    with the parameters as given (unbounded in seq, for the configured workload).

    An invariant whose proof fails is searched for a shortest run of the executable spec that
    breaks it, every step checked against the model: 'violated' (with the ITF trace) when one
    exists, otherwise 'inconclusive' with the counterexample to induction. A configuration
    outside the model's scope is 'inconclusive' throughout, saying why."""
    from verbspec.spec.gate.system import INVARIANTS, build

    system = build(values, variants)
    cfg = system.params
    why = out_of_scope(cfg, variants)
    if why:
        return [Result(n, "gate", "prove", "inconclusive", "not proved", 0.0, None, why)
                for n in INVARIANTS]
    # the workload stays symbolic: the proof covers every ops, hence every seq below the tags
    prm = {**param_terms(params_of(cfg, variants)), "OPS": z3.BitVec("OPS", 64)}
    found = houdini(prm, domain, (cfg.chunks,), progress=progress)
    lemmas = [n for n in LEMMAS if found[n].verdict == "proved"]
    lemma_s = sum(found[n].seconds for n in LEMMAS)
    bound = ("every reachable state, every workload of 1 <= ops < 2^61 gates per rank (z3 "
             "induction at these parameters)")
    out = []
    for name in INVARIANTS:
        ob = found[name]
        if ob.verdict == "proved":
            how = ("implied by the inductive invariant" if name in CONSEQUENCES
                   else "base and consecution")
            out.append(Result(name, "gate", "prove", "proved", bound, ob.seconds, None,
                              f"{how}; strengthening invariants ({lemma_s:.1f} s, shared): "
                              f"{', '.join(lemmas)}"))
            continue
        t0 = time.perf_counter()
        verdict, detail, path, cover = "inconclusive", ob.detail, None, "not proved"
        run = spec_counterexample(values, name, variants)
        if run is not None and run.admitted:
            verdict, cover = "violated", f"shortest trace: {run.moves} steps"
            kind = "shortest run" if cfg.faults else "shortest fault-free run"
            detail = (f"{kind} of the spec, {run.moves} moves, every step a step of the "
                      f"model: {run.trace.message}")
            if trace_dir is not None:
                from verbspec.proofs.traces import write_trace

                path = str(write_trace(run.trace, trace_dir / trace_name(
                    "gate", "prove", name, variants)))
        out.append(Result(name, "gate", "prove", verdict, cover,
                          ob.seconds + time.perf_counter() - t0, path, detail))
        if progress:
            progress(f"{name}: {verdict}")
    return out


def model_admits(cfg: GateConfig, states: list[GateState], moves: list[tuple[str, int]],
                 variants: Sequence[str] = ()) -> bool:
    """Each step of a spec run, seen through alpha, is a step of the model."""
    prm = fresh_params()
    ppairs = value_terms(params_of(cfg, variants), prm)
    s, t, ch = fresh_state("s"), fresh_state("t"), fresh_choice("s")
    for pre, post, (name, r) in zip(states[:-1], states[1:], moves, strict=True):
        choice = {k: 0 for k in ch}
        if name == "reap":
            choice.update(reap_choice(pre, r))
        pairs = (value_terms(alpha(cfg, pre), s) + value_terms(alpha(cfg, post), t)
                 + ppairs + value_terms(choice, ch))
        if not evaluate(move(name, r, s, t, prm, ch), pairs):
            return False
    return True


@dataclass(frozen=True)
class SpecRun:
    """A shortest fault-free run of the executable spec that breaks an invariant."""

    trace: Trace
    admitted: bool      # the model admits every step of it

    @property
    def moves(self) -> int:
        return len(self.trace) - 1


def spec_counterexample(values: Mapping[str, Any], prop: str, variants: Sequence[str] = (),
                        depth: int = 40, max_states: int = 300_000,
                        max_faults: int | None = None) -> SpecRun | None:
    """Shortest run of the executable spec breaking ``prop`` (breadth-first; with
    faults=1, among runs of at most ``max_faults`` fault actions, if given), and whether the
    model admits every step of it."""
    from verbspec.proofs.search import bounded_search
    from verbspec.spec.gate.system import build

    system = build(values, variants)
    res = bounded_search(system, depth=depth, target=prop, faults=bool(system.params.faults),
                         max_faults=max_faults if system.params.faults else None,
                         max_states=max_states, variants=variants)
    if res.trace is None:
        return None
    steps = res.trace.steps
    moves = [(st.action, next(iter(st.args.values()))) for st in steps[1:]]
    return SpecRun(res.trace, model_admits(system.params, [st.state for st in steps], moves,
                                           variants))


@dataclass(frozen=True)
class RegionRow:
    """A proof over the region, or, for a condition of it, the violation just outside."""

    invariant: str
    region: str
    verdict: str
    seconds: float
    counterexample: str = ""    # for a necessary condition: the run just outside it
    condition: str = ""         # the condition this row shows necessary ("" for a proof row)
    trace: Trace | None = None  # the executable spec's shortest run just outside


def region_table(*, window_max: int | None = 256,
                 progress: Callable[[str], None] | None = None) -> list[RegionRow]:
    """Every invariant over the whole region (symbolic window, chunks, depths, slot period),
    then, for each condition of the region, a counterexample just outside it: the shortest run
    of the executable spec (breadth-first) that breaks the property the condition guards, with
    every step checked against the model; and the model's own BMC, to the last rung where the
    spec's run is short enough for it (the model's run replayed on the spec), else to the first
    (the model has no shorter run either)."""
    from verbspec.spec.gate.system import build

    # the region is decode-only and the base protocol
    prm = {**fresh_params(), "BIG": z3.BoolVal(False), "depth_mismatch": z3.BoolVal(False)}
    text = region_text(window_max)
    found = houdini(prm, lambda q: region(q, window_max=window_max), (1, 2),
                    progress=progress)
    rows = [RegionRow(n, text, found[n].verdict, found[n].seconds)
            for n in (*PROPERTIES, *CONSEQUENCES, *LEMMAS)]
    for cond in CONDITIONS:
        t0 = time.perf_counter()
        where = f"outside: not ({cond.name}), e.g. {cond.example}"
        values = {"faults": 0, "big_gates": 0, **cond.example}
        run = spec_counterexample(values, cond.breaks, depth=60, max_states=cond.max_states,
                                  max_faults=cond.max_faults)
        notes, verdict = [], "inconclusive"
        if run is not None:
            kind = (f"shortest run with at most {cond.max_faults} faults"
                    if values["faults"] else "shortest fault-free run")
            notes.append(f"spec: {kind}, {run.moves} moves: {run.trace.message}; model "
                         f"admits every step: {run.admitted}")
            verdict = "violated" if run.admitted else "inconclusive"
        system = build({**values, "big_gates": 0})
        point = param_terms(params_of(system.params))
        # a run past the last rung cannot be found by the model's BMC: a shallow rung still
        # checks the model has no shorter run than the spec's
        rungs = (REGION_RUNGS if run is None or run.moves <= REGION_RUNGS[-1]
                 else REGION_RUNGS[:1])
        ce = bmc(point, domain(point), cond.breaks, rungs)
        if ce is not None:
            hit = replay_on_spec(system, ce.moves)
            notes.append(f"model BMC: run of {ce.depth} moves (unrolling {ce.bound}), on the "
                         f"spec: {hit[1] if hit else 'not confirmed'}")
        else:
            notes.append(f"model BMC: no run of <= {rungs[-1]} steps")
        rows.append(RegionRow(cond.breaks, where, verdict, time.perf_counter() - t0,
                              "; ".join(notes), cond.name, run.trace if run else None))
        if progress:
            progress(f"{cond.name}: {verdict}")
    return rows
