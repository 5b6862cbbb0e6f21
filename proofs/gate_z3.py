"""Induction proofs of the gate protocol for decode-only workloads, over parameter regions.

The scope: two ranks over UC running a workload of ``ops`` decode gates each (big_gates=0):
setup, arming (post the window, cross the 0xD1 barrier), then decode gates (gate_send,
transmit, deliver, reap, gate_done reposting seq + window, consume); with faults=1 also
crashes, injected error completions, warm-up leftovers, spurious timeouts, refused bad calls
and a rank giving up on a dead peer. Drain and big-gate windows only follow a big gate, so they
are outside; so are wire loss and RC. All nine invariants of the gate system are proved here,
no_deadlock as a consequence of the inductive invariant.

The model is a counter abstraction of :mod:`verbspec.spec.gate`. Per rank r (peer p) it keeps the
protocol's own variables at their real widths (``recv_done``, ``last_gate_seq``, the gate in
progress: 64 bits; ``send_outstanding``: 32 bits) and, for the fabric, counts instead of queues:
send WRs not yet transmitted (SQ), messages on the wire (WIRE), unreaped send and receive
completions (QS, QR), posted receives (RQ), barrier bytes in flight (TB), plus two stream
positions: gates sent (SENT; the send stream is C*SENT chunks long) and chunks landed (LANDED).
Because UC delivers in order and both ranks post and send strictly in seq order, the k-th chunk
of a stream is chunk (k-1) mod C of gate (k-1) div C + 1, so every identity the spec's ghosts
record (which gate lands in which slot, which wr_id a completion carries) is a function of these
positions. Ghost flags record the events the invariants forbid, as the spec's Ghost does.

The model is written separately from the spec; tests/test_gate_z3.py replays random runs of the
executable spec through :func:`alpha` and checks every step against :func:`move` and every
invariant verdict against the model's property of the same name (PROPERTIES, CONSEQUENCES).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from verbspec.proofs.report import Result, trace_name
from verbspec.spec import gate_state as gs
from verbspec.spec.fabric import ST_OK
from verbspec.spec.gate_params import GateConfig
from verbspec.spec.gate_state import GateState
from verbspec.spec.lts import Trace

POLL_BATCH = 16
SEQ_LIMIT = 1 << 62     # wr_id bits 62 and 63 are tags (TAG_WARM, TAG_BULK): seq stays below

# phase codes (8 bits): every phase of gate_state.py a decode-only workload reaches
PHASE_CODE: dict[str, int] = {gs.INIT: 0, gs.IDLE: 1, gs.ARM_POST: 2, gs.ARM_BAR_SEND: 3,
                              gs.ARM_BAR_READ: 4, gs.SEND: 5, gs.WAIT: 6, gs.HOLD: 7,
                              gs.FAILED: 8, gs.CRASHED: 9}
INIT, IDLE, ARM_POST, ARM_BAR_SEND, ARM_BAR_READ, SEND, WAIT, HOLD, FAILED, CRASHED = range(10)

# per-rank variables: name -> width in bits (0: Boolean)
RANK_VARS: dict[str, int] = {
    "ph": 8, "S": 64, "L": 64, "RD": 64, "WA": 0, "SO": 32, "SENT": 64, "SQ": 32, "WIRE": 32,
    "QS": 32, "QR": 32, "RQ": 32, "LANDED": 64, "ARR": 64, "TB": 8, "OVF": 0,
    # faults: warm-up leftovers and error completions in the CQ, leftovers used (at most one
    # per kind, send and receive), the one injected error completion used
    "QW": 8, "QE": 8, "STR": 8, "EU": 0,
}
# ghost flags of the whole system: one per forbidden event (the spec's Ghost records), and
# whether a fault was injected
FLAGS = ("dropped", "misaligned", "clobbered", "stale", "out_of_order", "long_chain", "faulted")
# parameters: W window, C chunks, P slot period (gates between two uses of a slot), OPS the
# workload (gates each rank calls)
PARAM_VARS: dict[str, int] = {"W": 64, "C": 64, "P": 64, "rq_depth": 32, "sq_depth": 32,
                              "cq_depth": 32, "chain_max": 32, "OPS": 64,
                              "no_barrier": 0, "tag_every_chunk": 0, "signal_last_only": 0,
                              "FAULTS": 0}
# the variants the model encodes, as Boolean parameters (false: the base protocol); no-seq-check
# changes nothing without faults, since out-of-order calls come only from bad_call (a fault)
MODEL_VARIANTS: dict[str, str | None] = {"no-barrier": "no_barrier",
                                         "tag-every-chunk": "tag_every_chunk",
                                         "signal-last-only": "signal_last_only",
                                         "no-seq-check": None}
OPS_LIMIT = 1 << 61     # workloads below this keep seq + window clear of the tag bits

PROGRESS_ACTIONS = ("setup", "call_gate", "arm_post", "barrier_write", "barrier_read",
                    "gate_send", "transmit", "deliver", "reap", "gate_done", "consume")
FAULT_ACTIONS = ("crash", "error_completion", "stray_completion", "timeout", "peer_gone",
                 "bad_call")
ACTIONS = PROGRESS_ACTIONS + FAULT_ACTIONS
CHOICES = ("ks", "kr", "kw", "ke", "ksb", "krb")     # how one reap splits (see _reap)

State = dict[str, z3.ExprRef]
Params = dict[str, z3.ExprRef]


# ---------------------------------------------------------------------------- terms
def _var(name: str, width: int) -> z3.ExprRef:
    return z3.Bool(name) if width == 0 else z3.BitVec(name, width)


def fresh_state(tag: str) -> State:
    s: State = {f"{v}{r}": _var(f"{v}{r}@{tag}", w) for r in (0, 1) for v, w in RANK_VARS.items()}
    s.update({f: z3.Bool(f"{f}@{tag}") for f in FLAGS})
    return s


def fresh_params(tag: str = "") -> Params:
    return {n: _var(f"{n}{tag}", w) for n, w in PARAM_VARS.items()}


def z64(x: z3.BitVecRef) -> z3.BitVecRef:
    return z3.ZeroExt(64 - x.size(), x) if x.size() < 64 else x


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


# derived stream positions (all in chunks)
def transmitted(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return times_c(prm, s[f"SENT{r}"]) - z64(s[f"SQ{r}"])


def delivered(s: State, prm: Params, r: int) -> z3.BitVecRef:
    """Chunks from r that left the wire (landed at the peer, absent drops)."""
    return transmitted(s, prm, r) - z64(s[f"WIRE{r}"])


def sends_reaped(s: State, prm: Params, r: int) -> z3.BitVecRef:
    return transmitted(s, prm, r) - z64(s[f"QS{r}"])


def recvs_reaped(s: State, r: int) -> z3.BitVecRef:
    return s[f"LANDED{r}"] - z64(s[f"QR{r}"])


def alive(s: State, r: int) -> z3.BoolRef:
    return z3.ULE(s[f"ph{r}"], HOLD)


def armed(s: State, r: int) -> z3.BoolRef:
    """The rank has posted its window's receives."""
    return z3.Or(ph_in(s, r, ARM_BAR_SEND, ARM_BAR_READ), s[f"WA{r}"])


def consumed(s: State, r: int) -> z3.BitVecRef:
    """Gates the application has read: all up to last_gate_seq, but the held one in HOLD."""
    return s[f"L{r}"] - z3.If(s[f"ph{r}"] == HOLD, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))


def cq_used(s: State, r: int) -> z3.BitVecRef:
    return (s[f"QS{r}"] + s[f"QR{r}"] + z3.ZeroExt(24, s[f"QW{r}"])
            + z3.ZeroExt(24, s[f"QE{r}"]))


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


def action_move(name: str, r: int, s: State, prm: Params, choice: Mapping[str, z3.ExprRef]
                ) -> Move:
    """Guard and effect of one action of rank r (for deliver: the source rank)."""
    p = 1 - r
    one8, one32 = z3.BitVecVal(1, 8), z3.BitVecVal(1, 32)
    c32 = z3.Extract(31, 0, prm["C"])
    if name == "setup":
        return Move(s[f"ph{r}"] == INIT, {f"ph{r}": z3.BitVecVal(IDLE, 8)})
    if name in FAULT_ACTIONS:
        return _fault_move(name, r, s, prm)
    if name == "call_gate":
        seq = s[f"L{r}"] + 1
        # the out-slot of seq is busy if a send of an earlier gate in the same slot has not
        # left the send queue yet; the oldest pending gate is the closest candidate
        first_pending = div_c(prm, transmitted(s, prm, r)) + 1
        busy = z3.And(s[f"SQ{r}"] != 0, z3.UGT(seq, prm["P"]),
                      z3.UGE(seq - prm["P"], first_pending))
        # in IDLE the rank has consumed L gates; the workload allows OPS
        return Move(z3.And(s[f"ph{r}"] == IDLE, z3.ULT(s[f"L{r}"], prm["OPS"])),
                    {f"S{r}": seq, "clobbered": z3.Or(s["clobbered"], busy),
                     f"ph{r}": z3.If(s[f"WA{r}"], z3.BitVecVal(SEND, 8),
                                     z3.BitVecVal(ARM_POST, 8))})
    if name == "arm_post":
        # no-barrier: the window counts as active at once and the gate's send follows
        return Move(s[f"ph{r}"] == ARM_POST,
                    {f"RQ{r}": s[f"RQ{r}"] + z3.Extract(31, 0, times_c(prm, prm["W"])),
                     "long_chain": _long_chain(s, prm),
                     f"WA{r}": z3.Or(s[f"WA{r}"], prm["no_barrier"]),
                     f"ph{r}": z3.If(prm["no_barrier"], z3.BitVecVal(SEND, 8),
                                     z3.BitVecVal(ARM_BAR_SEND, 8))})
    if name == "barrier_write":
        return Move(s[f"ph{r}"] == ARM_BAR_SEND,
                    {f"TB{r}": s[f"TB{r}"] + one8, f"ph{r}": z3.BitVecVal(ARM_BAR_READ, 8)})
    if name == "barrier_read":
        # only 0xD1 is ever written in the fragment, so the read always succeeds
        return Move(z3.And(s[f"ph{r}"] == ARM_BAR_READ, s[f"TB{p}"] != 0),
                    {f"TB{p}": s[f"TB{p}"] - one8, f"WA{r}": z3.BoolVal(True),
                     f"ph{r}": z3.BitVecVal(SEND, 8)})
    if name == "gate_send":
        # signal-last-only counts the chain once (the provider still completes every WR)
        counted = z3.If(prm["signal_last_only"], one32, c32)
        return Move(s[f"ph{r}"] == SEND,
                    {f"SQ{r}": s[f"SQ{r}"] + c32, f"SO{r}": s[f"SO{r}"] + counted,
                     f"SENT{r}": umax(s[f"SENT{r}"], s[f"S{r}"]),
                     "long_chain": _long_chain(s, prm), f"ph{r}": z3.BitVecVal(WAIT, 8)})
    if name == "transmit":
        upd = {f"SQ{r}": s[f"SQ{r}"] - one32, f"WIRE{r}": s[f"WIRE{r}"] + one32}
        _push_cqe(s, prm, r, "QS", upd)     # UC completes the send as it leaves
        return Move(z3.And(s[f"SQ{r}"] != 0, z3.Not(s[f"OVF{r}"]), alive(s, r)), upd)
    if name == "deliver":
        return _deliver(s, prm, r)
    if name == "reap":
        return _reap(s, prm, r, choice)
    if name == "gate_done":
        seq = s[f"S{r}"]
        whole = z3.UGE(s[f"LANDED{r}"], times_c(prm, seq))
        return Move(z3.And(s[f"ph{r}"] == WAIT, z3.UGE(s[f"RD{r}"], seq)),
                    {f"RQ{r}": s[f"RQ{r}"] + c32, f"L{r}": seq,
                     "stale": z3.Or(s["stale"], z3.Not(whole)),
                     "out_of_order": z3.Or(s["out_of_order"], seq != s[f"L{r}"] + 1),
                     f"ph{r}": z3.BitVecVal(HOLD, 8)})
    if name == "consume":
        return Move(s[f"ph{r}"] == HOLD, {f"ph{r}": z3.BitVecVal(IDLE, 8)})
    raise KeyError(name)


def _fault_move(name: str, r: int, s: State, prm: Params) -> Move:
    """The fault actions (only when faults are explored): each fails or kills a rank, or
    puts a completion nobody posted for into its CQ."""
    p = 1 - r
    ph = s[f"ph{r}"]
    failed = {f"ph{r}": z3.BitVecVal(FAILED, 8), "faulted": z3.BoolVal(True)}
    if name == "crash":         # the first fault only
        return Move(z3.And(prm["FAULTS"], alive(s, r), ph != INIT, z3.Not(s["faulted"])),
                    {f"ph{r}": z3.BitVecVal(CRASHED, 8), "faulted": z3.BoolVal(True)})
    if name == "error_completion":      # once per rank, while it polls
        upd: dict[str, z3.ExprRef] = {f"EU{r}": z3.BoolVal(True), "faulted": z3.BoolVal(True)}
        _push_cqe(s, prm, r, "QE", upd)
        return Move(z3.And(prm["FAULTS"], ph == WAIT, z3.Not(s[f"EU{r}"])), upd)
    if name == "stray_completion":      # a warm-up leftover: not a fault of the protocol's own
        upd = {f"STR{r}": s[f"STR{r}"] + 1}
        _push_cqe(s, prm, r, "QW", upd)
        return Move(z3.And(prm["FAULTS"], alive(s, r), ph != INIT, z3.ULT(s[f"STR{r}"], 2)),
                    upd)
    if name == "timeout":       # spurious: the wait gives up
        return Move(z3.And(prm["FAULTS"], ph == WAIT), failed)
    if name == "peer_gone":     # the peer is dead and the rank waits for it
        waits = z3.Or(ph == WAIT, z3.And(ph == ARM_BAR_READ, s[f"TB{p}"] == 0))
        return Move(z3.And(z3.Not(alive(s, p)), waits), {f"ph{r}": z3.BitVecVal(FAILED, 8)})
    if name == "bad_call":      # a wrong layer or seq: gate() refuses it
        return Move(z3.And(prm["FAULTS"], ph == IDLE, z3.ULT(s[f"L{r}"], prm["OPS"])), failed)
    raise KeyError(name)


def _deliver(s: State, prm: Params, src: int) -> Move:
    """The wire head from src meets the peer's receive-queue head (UC); a dead peer's NIC
    takes nothing."""
    dst = 1 - src
    upd: dict[str, z3.ExprRef] = {f"WIRE{src}": s[f"WIRE{src}"] - 1}
    no_recv = z3.Or(s[f"RQ{dst}"] == 0, s[f"OVF{dst}"])
    landed = s[f"LANDED{dst}"]
    land: dict[str, z3.ExprRef] = {f"RQ{dst}": s[f"RQ{dst}"] - 1, f"LANDED{dst}": landed + 1}
    _push_cqe(s, prm, dst, "QR", land)
    # the message is chunk DV+1 of src's stream; the receive is chunk LANDED+1 of dst's
    aligned = delivered(s, prm, src) == landed
    gate = div_c(prm, landed) + 1
    last_chunk = div_c(prm, landed + 1) == gate
    # the slot of `gate` still holds an unconsumed earlier gate (same slot: P gates back)
    clobber = z3.And(z3.UGT(gate, prm["P"]), z3.UGE(gate - prm["P"], consumed(s, dst) + 1))
    land["misaligned"] = z3.Or(s["misaligned"], z3.Not(aligned))
    land["clobbered"] = z3.Or(s["clobbered"], z3.And(aligned, clobber))
    land[f"ARR{dst}"] = z3.If(z3.And(aligned, z3.Not(clobber), last_chunk),
                              umax(s[f"ARR{dst}"], gate), s[f"ARR{dst}"])
    live = alive(s, dst)
    for k, v in land.items():
        upd[k] = z3.If(z3.Or(no_recv, z3.Not(live)), s[k], v)
    upd["dropped"] = z3.Or(s["dropped"], z3.And(live, no_recv))
    return Move(s[f"WIRE{src}"] != 0, upd)


def _reap(s: State, prm: Params, r: int, choice: Mapping[str, z3.ExprRef]) -> Move:
    """Poll min(16, CQ) completions: ks sends, kr receives, kw warm-up leftovers (ignored) and
    ke error completions. The split is free (the CQ's interleaving is not kept); where the CQ
    holds at most 16 entries, which the invariants bound, it is forced: everything is reaped.
    An error fails the rank, which keeps the accounting of the ksb sends and krb receives
    polled before it (all of them, without an error)."""
    ks, kr, kw, ke = (choice[f"{k}{r}"] for k in ("ks", "kr", "kw", "ke"))
    ksb, krb = choice[f"ksb{r}"], choice[f"krb{r}"]
    n = umin(cq_used(s, r), z3.BitVecVal(POLL_BATCH, 32))
    error = ke != 0
    split = z3.And(ks + kr + kw + ke == n, z3.ULE(ks, s[f"QS{r}"]), z3.ULE(kr, s[f"QR{r}"]),
                   z3.ULE(kw, z3.ZeroExt(24, s[f"QW{r}"])),
                   z3.ULE(ke, z3.ZeroExt(24, s[f"QE{r}"])),
                   z3.If(error, z3.And(z3.ULE(ksb, ks), z3.ULE(krb, kr)),
                         z3.And(ksb == ks, krb == kr)))
    rr = recvs_reaped(s, r)
    top = div_c(prm, rr + z64(krb))     # highest gate whose last chunk is among those taken
    rd = z3.If(z3.UGT(top, div_c(prm, rr)), umax(s[f"RD{r}"], top), s[f"RD{r}"])
    # tag-every-chunk: any chunk's completion names its gate, the last reaped chunk's included
    newest = div_c(prm, rr + z64(krb) + times_c(prm, z3.BitVecVal(1, 64)) - 1)
    rd = z3.If(z3.And(prm["tag_every_chunk"], krb != 0), umax(s[f"RD{r}"], newest), rd)
    so = s[f"SO{r}"]
    return Move(z3.And(s[f"ph{r}"] == WAIT, cq_used(s, r) != 0, split),
                {f"QS{r}": s[f"QS{r}"] - ks, f"QR{r}": s[f"QR{r}"] - kr,
                 f"QW{r}": s[f"QW{r}"] - z3.Extract(7, 0, kw),
                 f"QE{r}": s[f"QE{r}"] - z3.Extract(7, 0, ke), f"RD{r}": rd,
                 f"SO{r}": z3.If(z3.UGE(so, ksb), so - ksb, z3.BitVecVal(0, 32)),
                 f"ph{r}": z3.If(error, z3.BitVecVal(FAILED, 8), s[f"ph{r}"])})


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


def _send_accounting(s: State, prm: Params, r: int) -> z3.BoolRef:
    # the spec judges only a live rank's QP in RTS; an overflowed CQ put it in error
    return z3.Or(s[f"OVF{r}"], z3.Not(alive(s, r)), s[f"SO{r}"] == s[f"SQ{r}"] + s[f"QS{r}"])


def _queue_bounds(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.ULE(s[f"RQ{r}"], prm["rq_depth"]), z3.ULE(s[f"SQ{r}"], prm["sq_depth"]),
                  z3.Not(s[f"OVF{r}"]), z3.Not(s["long_chain"]))


def _watermark_sound(s: State, prm: Params, r: int) -> z3.BoolRef:
    return z3.And(z3.Not(s["stale"]),
                  z3.Or(z3.Not(alive(s, r)), z3.ULE(s[f"RD{r}"], s[f"ARR{r}"])))


# The properties, as the spec's invariants of the same names judge them (gate_system.py).
PROPERTIES: dict[str, Callable[[State, Params], z3.BoolRef]] = {
    "no_silent_drop": lambda s, prm: z3.Not(s["dropped"]),
    "chunk_alignment": lambda s, prm: z3.Not(s["misaligned"]),
    "watermark_sound": both(_watermark_sound),
    "slot_exclusive": lambda s, prm: z3.Not(s["clobbered"]),
    "send_accounting": both(_send_accounting),
    "queue_bounds": both(_queue_bounds),
    "gate_order": lambda s, prm: z3.Not(s["out_of_order"]),
    # no big-gate phase exists in the decode-only workload the model covers, and every posted
    # receive is a decode receive: the property is that every phase is a decode-window one
    # (or a dead rank's)
    "mode_exclusive": both(lambda s, prm, r: z3.ULE(s[f"ph{r}"], CRASHED)),
}


def done(s: State, prm: Params) -> z3.BoolRef:
    """Each rank idle with the workload called, or dead (the spec's GateSystem.done)."""
    return z3.And([z3.Or(z3.And(s[f"ph{r}"] == IDLE, z3.UGE(s[f"L{r}"], prm["OPS"])),
                         z3.Not(alive(s, r))) for r in (0, 1)])


def reap_witness(s: State, r: int) -> dict[str, z3.ExprRef]:
    """A split of one poll between the kinds of completion that always exists."""
    n = umin(cq_used(s, r), z3.BitVecVal(POLL_BATCH, 32))
    ks = umin(s[f"QS{r}"], n)
    kr = umin(s[f"QR{r}"], n - ks)
    kw = umin(z3.ZeroExt(24, s[f"QW{r}"]), n - ks - kr)
    ke = n - ks - kr - kw
    return {f"ks{r}": ks, f"kr{r}": kr, f"kw{r}": kw, f"ke{r}": ke,
            f"ksb{r}": ks, f"krb{r}": kr}


def can_run(s: State, prm: Params, actions: Iterable[str]) -> z3.BoolRef:
    """Some of these actions is enabled."""
    choice = {**reap_witness(s, 0), **reap_witness(s, 1)}
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
def _phase_shape(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Phase fixes seq, the window flag and the sends: S = L or L + 1, sends only in WAIT. A
    dead rank keeps what it had when it died."""
    ph, L, S, sent = s[f"ph{r}"], s[f"L{r}"], s[f"S{r}"], s[f"SENT{r}"]
    opening = ph_in(s, r, ARM_POST, ARM_BAR_SEND, ARM_BAR_READ, SEND, WAIT)
    live = z3.And(
        z3.If(opening, S == L + 1, S == L),
        z3.Implies(ph_in(s, r, INIT, ARM_POST, ARM_BAR_SEND, ARM_BAR_READ), L == 0),
        z3.Implies(ph == HOLD, L != 0),
        s[f"WA{r}"] == z3.Or(ph_in(s, r, SEND, WAIT, HOLD), z3.And(ph == IDLE, L != 0)),
        sent == z3.If(ph == WAIT, S, L))
    dead = z3.And(z3.ULE(L, S), z3.ULE(S, L + 1), z3.Or(sent == S, sent == L),
                  z3.Implies(L != 0, s[f"WA{r}"]))
    return z3.And(z3.ULE(ph, CRASHED), z3.If(alive(s, r), live, dead))


def _seq_headroom(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Sequence numbers stay within the workload, below the tag bits, so no 64-bit sum
    wraps."""
    below = [z3.ULT(s[f"{v}{r}"], SEQ_LIMIT) for v in ("S", "L", "RD", "ARR", "SENT")]
    return z3.And(*below, z3.ULT(s[f"S{r}"] + prm["W"], SEQ_LIMIT),
                  z3.ULT(s[f"LANDED{r}"], 2 * SEQ_LIMIT), z3.ULE(s[f"L{r}"], s[f"S{r}"]),
                  z3.ULE(s[f"S{r}"], prm["OPS"]))


def _window_posted(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Armed, the receives posted so far cover gates 1 .. last_gate_seq + window (a dead rank:
    either that or none)."""
    total = s[f"LANDED{r}"] + z64(s[f"RQ{r}"])
    full = total == times_c(prm, s[f"L{r}"] + prm["W"])
    none = z3.And(s[f"LANDED{r}"] == 0, s[f"RQ{r}"] == 0)
    return z3.If(alive(s, r), z3.If(armed(s, r), full, none),
                 z3.If(s[f"WA{r}"], full, z3.Or(full, none)))


def _barrier_bytes(s: State, prm: Params, r: int) -> z3.BoolRef:
    """r's barrier byte is in flight exactly from its write until the peer reads it; a rank
    whose window is active has read the peer's byte, so the peer has posted its window."""
    p = 1 - r
    wrote = z3.Or(s[f"ph{r}"] == ARM_BAR_READ, s[f"WA{r}"])
    in_flight = z3.If(z3.And(wrote, z3.Not(s[f"WA{p}"])), z3.BitVecVal(1, 8),
                      z3.BitVecVal(0, 8))
    return z3.And(z3.ULE(s[f"TB{r}"], 1),
                  z3.If(alive(s, r), z3.And(s[f"TB{r}"] == in_flight,
                                            z3.Implies(s[f"WA{p}"], wrote)),
                        z3.Implies(s[f"WA{p}"], s[f"TB{r}"] == 0)))


def _streams_conserved(s: State, prm: Params, r: int) -> z3.BoolRef:
    """Every chunk r sent is in its send queue, on the wire, or landed at the peer, in order."""
    p = 1 - r
    sent = times_c(prm, s[f"SENT{r}"])
    # a dead peer's NIC takes nothing: what reaches it is gone
    landed = z3.If(alive(s, p), s[f"LANDED{p}"] == delivered(s, prm, r),
                   z3.ULE(s[f"LANDED{p}"], delivered(s, prm, r)))
    return z3.And(z3.ULE(z64(s[f"SQ{r}"]) + z64(s[f"WIRE{r}"]), sent), landed,
                  z3.ULE(z64(s[f"QS{r}"]), transmitted(s, prm, r)),
                  z3.ULE(z64(s[f"QR{r}"]), s[f"LANDED{r}"]),
                  z3.Implies(alive(s, r), s[f"SO{r}"] == s[f"SQ{r}"] + s[f"QS{r}"]))


def _watermark_counts_reaped(s: State, prm: Params, r: int) -> z3.BoolRef:
    """recv_done is the last gate whose last chunk's completion was reaped; arrived is the
    last gate whose last chunk landed; a passed gate is below both."""
    counted = div_c(prm, recvs_reaped(s, r))
    # a rank failed by an error completion kept only what it polled before the error
    return z3.And(z3.If(alive(s, r), s[f"RD{r}"] == counted, z3.ULE(s[f"RD{r}"], counted)),
                  s[f"ARR{r}"] == div_c(prm, s[f"LANDED{r}"]),
                  z3.ULE(s[f"L{r}"], s[f"RD{r}"]))


def _lockstep(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A rank sends gate g only after the peer's gate g-1 landed, so it is at most one gate
    ahead; while the peer holds its last gate unconsumed it cannot be ahead at all."""
    p = 1 - r
    dv_gates = div_c(prm, delivered(s, prm, p))
    return z3.And(z3.ULE(s[f"SENT{r}"], dv_gates + 1),
                  z3.ULE(s[f"L{r}"], s[f"L{p}"] + 1),
                  z3.ULE(s[f"SENT{r}"], s[f"SENT{p}"] + 1),
                  z3.Implies(s[f"ph{p}"] == HOLD, z3.ULE(s[f"SENT{r}"], s[f"L{p}"] + 1)),
                  z3.Implies(s[f"SENT{r}"] != 0, s[f"WA{r}"]))


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


def _faults_recorded(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A dead rank or an injected error completion means a fault was injected, and none is
    without faults explored."""
    return z3.And(z3.Implies(z3.Or(z3.Not(alive(s, r)), s[f"EU{r}"]), s["faulted"]),
                  z3.Implies(z3.Not(prm["FAULTS"]),
                             z3.And(z3.Not(s["faulted"]), s[f"STR{r}"] == 0)))


LEMMAS: dict[str, Callable[[State, Params], z3.BoolRef]] = {
    "phase_shape": both(_phase_shape),
    "seq_headroom": both(_seq_headroom),
    "window_posted": both(_window_posted),
    "barrier_bytes": both(_barrier_bytes),
    "streams_conserved": both(_streams_conserved),
    "watermark_counts_reaped": both(_watermark_counts_reaped),
    "lockstep": both(_lockstep),
    "completions_behind": both(_completions_behind),
    # queue_bounds' CQ part on its own, so that an undersized receive or send queue (which the
    # spec only flags) does not take the CQ facts the other proofs need down with it
    "cq_no_overflow": both(lambda s, prm, r: z3.Not(s[f"OVF{r}"])),
    "faults_recorded": both(_faults_recorded),
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
                    for k in ("rq_depth", "sq_depth", "cq_depth", "chain_max")))


def region(prm: Params, *, window_max: int | None = 256, skip: str | None = None
           ) -> z3.BoolRef:
    conds = [c.holds(prm) for c in CONDITIONS if c.name != skip]
    conds += [z3.Not(prm[f]) for f in MODEL_VARIANTS.values() if f]     # the base protocol
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
            "OPS": cfg.ops, "FAULTS": cfg.faults,
            **{f: int(f in flags) for f in set(MODEL_VARIANTS.values()) - {None}}}


def param_terms(values: Mapping[str, int]) -> Params:
    return {k: z3.BoolVal(bool(values[k])) if w == 0 else z3.BitVecVal(values[k], w)
            for k, w in PARAM_VARS.items()}


# ---------------------------------------------------------------------------- abstraction
def _chunk_index(cfg: GateConfig, seq: int, chunk: int) -> int:
    return cfg.chunks * (seq - 1) + chunk + 1


def alpha(cfg: GateConfig, st: GateState) -> dict[str, Any]:
    """The abstract values of a concrete state of the fragment (no drain, big gate or fault;
    defined up to and including the first state an invariant rejects)."""
    c = cfg.chunks
    out: dict[str, Any] = {}
    f = st.fabric
    for r, rk in enumerate(st.ranks):
        if rk.phase not in PHASE_CODE:
            raise ValueError(f"rank {r} in {rk.phase}, outside the decode window fragment")
        qp = f.qps[r]
        is_armed = rk.window_active or rk.phase in (gs.ARM_BAR_SEND, gs.ARM_BAR_READ)
        if qp.rq:
            w = qp.rq[0].want
            landed = _chunk_index(cfg, w.seq, w.chunk) - 1
        else:
            landed = c * (rk.last_gate_seq + cfg.window) if is_armed else 0
        out.update({
            f"ph{r}": PHASE_CODE[rk.phase], f"S{r}": rk.seq, f"L{r}": rk.last_gate_seq,
            f"RD{r}": rk.recv_done, f"WA{r}": rk.window_active, f"SO{r}": rk.send_outstanding,
            f"SENT{r}": rk.sent_seq, f"SQ{r}": len(qp.sq), f"WIRE{r}": len(f.wire[r]),
            f"QS{r}": sum(1 for e in qp.cq if _cqe_kind(e) == "ks"),
            f"QR{r}": sum(1 for e in qp.cq if _cqe_kind(e) == "kr"),
            f"QW{r}": sum(1 for e in qp.cq if _cqe_kind(e) == "kw"),
            f"QE{r}": sum(1 for e in qp.cq if _cqe_kind(e) == "ke"),
            f"STR{r}": len(rk.strays), f"EU{r}": "cqe" in rk.faults_used,
            f"RQ{r}": len(qp.rq), f"LANDED{r}": landed, f"ARR{r}": rk.arrived,
            f"TB{r}": len(f.tcp[r]), f"OVF{r}": qp.cq_overflow})
    g = st.ghost
    out.update({"dropped": bool(g.drops), "misaligned": bool(g.misaligned),
                "clobbered": bool(g.clobbered), "stale": bool(g.stale),
                "out_of_order": bool(g.order), "long_chain": bool(g.long_chains),
                "faulted": g.faulted})
    return out


def _cqe_kind(e: Any) -> str:
    """Which of the model's CQ counts a completion belongs to (its reap choice name)."""
    if e.status != ST_OK:
        return "ke"
    if e.payload.kind == "warm":
        return "kw"
    return "ks" if e.opcode == "send" else "kr"


def reap_choice(st: GateState, r: int) -> dict[str, int]:
    """How the spec's reap splits the first 16 completions, and how many sends and receives
    precede the first error among them."""
    got = [_cqe_kind(e) for e in st.fabric.qps[r].cq[:POLL_BATCH]]
    before = got[:got.index("ke")] if "ke" in got else got
    out = {f"{k}{r}": got.count(k) for k in ("ks", "kr", "kw", "ke")}
    out.update({f"ksb{r}": before.count("ks"), f"krb{r}": before.count("kr")})
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


def _model_text(model: z3.ModelRef, s: State, t: State | None = None) -> str:
    def show(st: State) -> str:
        parts = []
        for k, v in st.items():
            val = model.eval(v, model_completion=True)
            if z3.is_true(val) or (not z3.is_bool(val) and val.as_long() != 0):
                parts.append(f"{k}={val}")
        return " ".join(parts)

    text = f"pre: {show(s)}"
    if t is not None:
        text += f"; post: {show(t)}"
    return text


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


def induction(prm: Params, assume: Callable[[Params], z3.BoolRef],
              names: Iterable[str] | None = None, timeout_ms: int = 120_000,
              chunks: Iterable[int] = (1, 2), ranks: Iterable[int] = (0, 1)
              ) -> list[Obligation]:
    """Base and consecution of every named invariant, each relative to the named ones only
    (their conjunction is what is shown inductive).

    Consecution is split by chunk count (C is 1 or 2: fixing it turns x*C and x/C into shifts)
    and by action, one solver per (C, action, rank) queried once per invariant; ``ranks``
    limits the moving rank (see :func:`rank_symmetric`)."""
    names = list(names or ALL_INVARIANTS)
    spent = dict.fromkeys(names, 0.0)
    failed: dict[str, str] = {}
    s, t, ch = fresh_state("s"), fresh_state("t"), fresh_choice("s")
    for c in chunks:
        q = {**prm, "C": z3.BitVecVal(c, 64)}
        solvers = [("base", "initial", [assume(q), initial(s)])]
        inv_s = [ALL_INVARIANTS[n](s, q) for n in names]     # only the ones still kept
        for a in ACTIONS:
            for r in ranks:
                solvers.append(("consecution", f"{a}({r})",
                                [assume(q), *inv_s, move(a, r, s, t, q, ch)]))
        for label, via, facts in solvers:
            solver = z3.Solver()
            solver.set("timeout", timeout_ms)
            solver.add(*facts)
            post = s if label == "base" else t
            for name in names:
                if name in failed:
                    continue
                t0 = time.perf_counter()
                solver.push()
                solver.add(z3.Not(ALL_INVARIANTS[name](post, q)))
                res = solver.check()
                if res == z3.sat:
                    m = solver.model()
                    failed[name] = (f"{label} fails via {via}, chunks={c} (counterexample to "
                                    f"induction): "
                                    f"{_model_text(m, s, t if label != 'base' else None)}")
                elif res == z3.unknown:
                    failed[name] = f"{label} via {via}, chunks={c}: {solver.reason_unknown()}"
                solver.pop()
                spent[name] += time.perf_counter() - t0
    return [Obligation(n, "inconclusive" if n in failed else "proved", spent[n],
                       failed.get(n, "")) for n in names]


def implied(prm: Params, assume: Callable[[Params], z3.BoolRef], invariants: Iterable[str],
            chunks: Iterable[int] = (1, 2), timeout_ms: int = 120_000) -> list[Obligation]:
    """Each consequence holds in every state the (proved) inductive invariants admit."""
    out = []
    s = fresh_state("s")
    for name, prop in CONSEQUENCES.items():
        t0, detail = time.perf_counter(), ""
        for c in chunks:
            q = {**prm, "C": z3.BitVecVal(c, 64)}
            solver = z3.Solver()
            solver.set("timeout", timeout_ms)
            solver.add(assume(q), *(ALL_INVARIANTS[n](s, q) for n in invariants),
                       z3.Not(prop(s, q)))
            res = solver.check()
            if res == z3.sat:
                detail = (f"a state the invariants admit breaks it, chunks={c}: "
                          f"{_model_text(solver.model(), s)}")
            elif res == z3.unknown:
                detail = f"chunks={c}: {solver.reason_unknown()}"
            if detail:
                break
        out.append(Obligation(name, "inconclusive" if detail else "proved",
                              time.perf_counter() - t0, detail))
    return out


# ---------------------------------------------------------------------------- BMC
@dataclass(frozen=True)
class Counterexample:
    prop: str
    depth: int                      # moves in the run (stutters removed)
    bound: int                      # the unrolling that found it: no run is shorter than
    moves: list[tuple[str, int]]    # the previous rung; (action, rank or source)
    seconds: float


RUNGS = (4, 8, 16)     # deeper unrollings took minutes on this machine (see docs)
REGION_RUNGS = (4, 8)  # the region table's cross-check of short runs (16 costs about a minute)


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
            timeout_ms: int = 120_000, progress: Callable[[str], None] | None = None
            ) -> dict[str, Obligation]:
    """The largest subset of the named invariants that is inductive on its own: drop every
    invariant whose base or consecution fails, and repeat relative to those left. Then each
    consequence (no_deadlock) is checked against what is left."""
    keep = list(ALL_INVARIANTS)
    dropped: dict[str, Obligation] = {}
    spent = dict.fromkeys(keep, 0.0)
    ranks = (0,) if rank_symmetric(prm) else (0, 1)
    while True:
        obs = induction(prm, assume, keep, timeout_ms, tuple(chunks), ranks)
        for o in obs:
            spent[o.name] += o.seconds
        bad = [o for o in obs if o.verdict != "proved"]
        for o in bad:
            dropped[o.name] = Obligation(o.name, o.verdict, spent[o.name], o.detail)
            if progress:
                progress(f"{o.name}: not inductive here, dropped")
        if not bad:
            proved = {o.name: Obligation(o.name, "proved", spent[o.name]) for o in obs}
            after = {o.name: o for o in implied(prm, assume, keep, tuple(chunks), timeout_ms)}
            return {**proved, **dropped, **after}
        keep = [n for n in keep if n not in dropped]


SCOPE = ("decode gates only, over UC, with or without faults (crashes, error and warm-up "
         "completions, timeouts, bad calls; qp_type=uc, wire_loss=0, big_gates=0); the base "
         "protocol or the variants no-barrier, tag-every-chunk, signal-last-only (with "
         "unsignaled_completions=1) and no-seq-check (without faults)")


def out_of_scope(cfg: GateConfig, variants: Sequence[str] = ()) -> str | None:
    """Why the model does not cover a configuration (drain, big gates and faults are not in
    it yet), or None."""
    outside = [f"{k}={getattr(cfg, k)}" for k, want in
               (("qp_type", "uc"), ("wire_loss", 0), ("big_gates", 0))
               if getattr(cfg, k) != want]
    outside += [f"variant {v}" for v in variants if v not in MODEL_VARIANTS]
    if "no-seq-check" in variants and cfg.faults:
        outside.append("no-seq-check with faults=1 (bad calls)")
    if "signal-last-only" in variants and not cfg.unsignaled_completions:
        outside.append("signal-last-only with unsignaled_completions=0")
    if not outside:
        return None
    hint = ("; with --param big_gates=0 (a decode-only workload) it is covered"
            if outside == ["big_gates=1"] else "")
    return f"the z3 model covers {SCOPE}; this configuration has {', '.join(outside)}{hint}"


def prove(values: Mapping[str, Any], variants: Sequence[str] = (), *,
          progress: Callable[[str], None] | None = None, trace_dir: Path | None = None
          ) -> list[Result]:
    """Every invariant of the gate system for one configuration, by induction on the model
    with the parameters as given (unbounded in seq, for the configured workload).

    An invariant whose proof fails is searched for a shortest run of the executable spec that
    breaks it, every step checked against the model: 'violated' (with the ITF trace) when one
    exists, otherwise 'inconclusive' with the counterexample to induction. A configuration
    outside the model's scope is 'inconclusive' throughout, saying why."""
    from verbspec.spec.gate_system import INVARIANTS, build

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
            detail = (f"shortest fault-free run of the spec, {run.moves} moves, every step a "
                      f"step of the model: {run.trace.message}")
            if trace_dir is not None:
                from verbspec.spec.itf import write_trace

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
    """Shortest decode-only run of the executable spec breaking ``prop`` (breadth-first; with
    faults=1, among runs of at most ``max_faults`` fault actions, if given), and whether the
    model admits every step of it."""
    from verbspec.proofs.search import bounded_search
    from verbspec.spec.gate_system import build

    system = build({**values, "big_gates": 0}, variants)
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
    every step checked against the model; and, where the run is short enough for the model's
    own BMC rungs, the model's run replayed on the spec."""
    from verbspec.spec.gate_system import build

    prm = fresh_params()
    text = region_text(window_max)
    found = houdini(prm, lambda q: region(q, window_max=window_max), (1, 2),
                    progress=progress)
    rows = [RegionRow(n, text, found[n].verdict, found[n].seconds)
            for n in (*PROPERTIES, *CONSEQUENCES, *LEMMAS)]
    for cond in CONDITIONS:
        t0 = time.perf_counter()
        where = f"outside: not ({cond.name}), e.g. {cond.example}"
        values = {"faults": 0, **cond.example}
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
        ce = bmc(point, domain(point), cond.breaks, REGION_RUNGS)
        if ce is not None:
            hit = replay_on_spec(system, ce.moves)
            notes.append(f"model BMC: run of {ce.depth} moves (unrolling {ce.bound}), on the "
                         f"spec: {hit[1] if hit else 'not confirmed'}")
        else:
            notes.append(f"model BMC: no run of <= {REGION_RUNGS[-1]} steps")
        rows.append(RegionRow(cond.breaks, where, verdict, time.perf_counter() - t0,
                              "; ".join(notes), cond.name, run.trace if run else None))
        if progress:
            progress(f"{cond.name}: {verdict}")
    return rows
