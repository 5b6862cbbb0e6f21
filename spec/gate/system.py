"""The closed two-rank gate system: its action list, named invariants and named variants.

Two ranks run the same workload (a script of decode gates and big gates that the first rank to
reach each op chooses) over one UC queue pair each side of the fabric model. Checkers see only
the System interface of spec/lts.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from verbspec.spec.actions import (
    action_names,
    bind_invariants,
    declared_invariants,
    invariant,
    name_of,
)
from verbspec.spec.fabric import CQE, Message, SendWR, completes, new_fabric
from verbspec.spec.gate import errors
from verbspec.spec.gate.params import PARAMS, GateConfig, make_config
from verbspec.spec.gate.state import (
    BIG_BEGIN,
    BIG_PHASES,
    BLOCK_OP,
    BLOCK_PHASES,
    FAILED,
    IDLE,
    GateState,
    Rank,
)
from verbspec.spec.gate.steps import BATCH_ACTIONS, BLOCK_ACTIONS, POST_FAILURE_ACTIONS, GateSpec
from verbspec.spec.gate.variants import PROFILES, VARIANTS
from verbspec.spec.gate.wire import TAG_BULK, Payload
from verbspec.spec.params import check_values, check_variants

PROTOCOL = "gate"


# The mode of the queue pair a posted receive belongs to, by its buffer.
MODE_OF_BUFFER = {"in": "decode", "stage": "big-gate", "blk": "verify-block"}

# Actions that inject a fault, or end a wait because of one; not progress.
FAULT_ACTIONS = frozenset(action_names(GateSpec, fault=True))


CALL_GATE, CALL_BIG = name_of(GateSpec.do_call_gate), name_of(GateSpec.do_call_big)
CALL_BLOCK = name_of(GateSpec.do_call_block)
TIMEOUT = name_of(GateSpec.do_timeout)
BAD_CALL = name_of(GateSpec.do_bad_call)


def ds4_slot(c: GateConfig, seq: int) -> int:
    """The slab slot of gate ``seq`` as ds4's tp_gate_slot computes it (ds4_tp.c 1281-1304):
    with a slot mask, its ordinal-th set bit (the ordinal (seq-1) mod gates_per_token; past
    the mask's bits, n_slots); with no gates per token, (seq-1) mod n_slots; else start +
    ordinal * step. Restated here, apart from ``GateConfig.slot`` that the steps place work
    requests with, so that the invariant judging the places does not read the helper it
    judges."""
    if c.slot_mask:
        ordinal = (seq - 1) % c.gates_per_token
        bits = c.slot_mask
        if ordinal >= bits.bit_count():
            return c.n_slots
        for _ in range(ordinal):
            bits &= bits - 1
        return (bits & -bits).bit_length() - 1
    if c.gates_per_token == 0:
        return (seq - 1) % c.n_slots
    return c.slot_start + (seq - 1) % c.gates_per_token * c.slot_step


class GateSystem:
    """The two-rank gate system for one configuration and set of variants."""

    protocol = PROTOCOL

    def __init__(self, cfg: GateConfig, variants: Sequence[str] = ()):
        self.params = cfg
        self.variants = tuple(variants)
        self.spec = GateSpec(cfg, frozenset(variants))
        self.actions = self.spec.actions
        if cfg.verify_blocks:
            self.weights = {**GateSystem.weights, CALL_BLOCK: self.block_weights}
        self.invariants = bind_invariants(self)

    # -------------------------------------------------------------- System interface
    def initial(self) -> GateState:
        cfg = self.params
        return GateState((Rank(), Rank()),
                         new_fabric(cfg.qp_type, bool(cfg.unsignaled_completions)))

    def finished(self, s: GateState, r: int) -> bool:
        rk = s.ranks[r]
        return rk.phase == IDLE and rk.op >= self.params.ops

    def done(self, s: GateState) -> bool:
        return all(self.finished(s, r) or not s.ranks[r].alive for r in (0, 1))

    def param_dict(self) -> dict[str, Any]:
        return asdict(self.params)

    def can_progress(self, s: GateState) -> bool:
        return self.spec.can_progress(s)

    # -------------------------------------------------------------- exploration depth
    # Per example, how much the leading rank prefers each workload call: some examples make
    # decode gates only (48 in a row at the defaults, three windows), others a big gate about
    # every 64, 16 or 4 decode gates (drains after full windows), others mostly big gates.
    # Application misuse, where an example allows it, is likelier than the other faults: a
    # wrong call is refused at once unless the rank misses it, so it must come up often. Some
    # examples take a timeout only where nothing else can happen: every wait and TCP read may
    # time out, and one taken early ends the run before the fault it was allowed with.
    # (Hypothesis draws the first weight most.)
    # Verify blocks, where the workload has them, come about as often as big gates.
    weights = {CALL_GATE: (1, 16, 64), CALL_BIG: (4, 1, 0), BAD_CALL: (8, 1), TIMEOUT: (1, 0)}
    block_weights = (2, 1, 0)

    def depth(self, s: GateState) -> dict[str, int]:
        """How deep into the protocol a run has got, counting the ops both ranks finished:
        the longest run of decode gates in a row and how far it went past the window, the
        drains (a big gate or verify block after a decode gate), the big-gate windows and the
        verify blocks."""
        done = s.script[:min(rk.op for rk in s.ranks)]
        run = longest = drains = windows = 0
        size = self.params.big_window(self.params.rq_depth)
        for i, op in enumerate(done):
            run = run + 1 if op == 0 else 0
            longest = max(longest, run)
            if op:
                drains += i > 0 and done[i - 1] == 0
            if op > 0:
                windows += -(-op // size)
        return {"decode_gates_in_a_row": longest,
                "gates_past_window": max(0, longest - self.params.window),
                "drains": drains, "big_gate_windows": windows,
                "verify_blocks": done.count(BLOCK_OP)}

    # -------------------------------------------------------------- invariants
    @invariant
    def inv_no_silent_drop(self, s: GateState) -> str | None:
        """no SEND ever reaches a UC queue pair with no receive posted"""
        return s.ghost.drops[0] if s.ghost.drops else None

    @invariant
    def inv_chunk_alignment(self, s: GateState) -> str | None:
        """the k-th chunk sent for gate s lands in the receive posted for gate s, chunk k (drain
        dummies only in lookahead receives, big-gate chunks only in their own staging receive);
        every decode receive and send posted for gate s sits in ds4's slot for s, chunk k at
        k * max_msg"""
        if s.ghost.misaligned:
            return s.ghost.misaligned[0]
        for r in (0, 1):
            c, qp = self.spec.cfgs[r], s.fabric.qps[r]
            posted = [(w, w.want, "receive") for w in qp.rq] + [(w, w.payload, "send")
                                                                 for w in qp.sq]
            for w, of, kind in posted:
                if not (isinstance(of, Payload) and of.kind == "gate"):
                    continue
                want = (ds4_slot(c, of.seq), of.chunk * c.max_msg)
                if (w.slot, w.offset) != want:
                    return (f"rank {r} posted the {kind} of gate {of.seq} chunk {of.chunk} at "
                            f"slot {w.slot} offset {w.offset}; ds4 places it at slot "
                            f"{want[0]} offset {want[1]}")
        return None

    @invariant
    def inv_watermark_sound(self, s: GateState) -> str | None:
        """recv_done never exceeds the last gate whose whole vector landed, and a gate passes only
        with its whole vector in its slot (a verify-block layer only with every row so far landed
        whole)"""
        if s.ghost.stale:
            return s.ghost.stale[0]
        for r, rk in enumerate(s.ranks):
            if rk.alive and rk.recv_done > rk.arrived:
                return (f"rank {r}: recv_done {rk.recv_done} is past gate {rk.arrived}, the last "
                        f"whose whole vector landed")
        return None

    @invariant
    def inv_slot_exclusive(self, s: GateState) -> str | None:
        """no arrival into a slot whose data is not consumed yet; no out-slot or staging slot
        rewritten while a send still reads it"""
        return s.ghost.clobbered[0] if s.ghost.clobbered else None

    @invariant
    def inv_mode_exclusive(self, s: GateState) -> str | None:
        """the decode window, big-gate windows and the verify block never coexist on the queue
        pair"""
        for r, rk in enumerate(s.ranks):
            if rk.window_active and rk.phase in BIG_PHASES - {BIG_BEGIN}:
                return f"rank {r} runs a big-gate window while its decode window is active"
            if rk.window_active and (rk.block_active or rk.phase in BLOCK_PHASES):
                return f"rank {r} runs a verify block while its decode window is active"
            modes = sorted({MODE_OF_BUFFER[w.buf] for w in s.fabric.qps[r].rq})
            if len(modes) > 1:
                return f"rank {r} has {' and '.join(modes)} receives posted together"
        return None

    @invariant
    def inv_send_accounting(self, s: GateState) -> str | None:
        """send_outstanding equals the gate and verify-block sends posted whose completions are not
        reaped yet (a drain and a big-gate window count their BULK sends themselves)"""
        def counted(x: SendWR | CQE | Message) -> bool:
            # what send_outstanding counts: not a drain's or a big gate's (BULK) send
            return not x.wr_id & TAG_BULK

        f = s.fabric
        for r, rk in enumerate(s.ranks):
            qp = f.qps[r]
            if not rk.alive or qp.state != "rts":
                continue
            pending = sum(1 for w in qp.sq if counted(w) and completes(f, w.signaled))
            pending += sum(1 for c in qp.cq if c.opcode == "send" and c.payload.kind != "warm"
                           and counted(c))
            if qp.qp_type == "rc":
                pending += sum(1 for m in f.wire[r] if counted(m) and completes(f, m.signaled))
            if rk.send_outstanding != pending:
                return (f"rank {r}: send_outstanding is {rk.send_outstanding} but {pending} "
                        f"send completions are still to come or to reap")
        return None

    @invariant
    def inv_queue_bounds(self, s: GateState) -> str | None:
        """posted receives, in-flight sends and CQ entries stay within their depths; no chain is
        longer than chain_max (every post's but the drain's, one chain of window * chunks
        dummies as ds4 posts it)"""
        cfg = self.params
        if s.ghost.long_chains:
            return s.ghost.long_chains[0]
        for r in (0, 1):
            qp = s.fabric.qps[r]
            depth = self.spec.rq_grant[r]
            if len(qp.rq) > depth:
                return (f"rank {r} has {len(qp.rq)} receives posted, above its receive depth "
                        f"{depth}")
            if len(qp.sq) > cfg.sq_depth:
                return f"rank {r} has {len(qp.sq)} sends in flight, above sq_depth {cfg.sq_depth}"
            if qp.cq_overflow:
                return f"rank {r}'s completion queue overflowed its {cfg.cq_depth} entries"
        return None

    @invariant
    def inv_gate_order(self, s: GateState) -> str | None:
        """each rank completes gates 1, 2, 3, ... in order"""
        return s.ghost.order[0] if s.ghost.order else None

    @invariant
    def inv_no_deadlock(self, s: GateState) -> str | None:
        """without faults some step stays enabled until the workload is done and no rank fails; with
        faults every rank ends done or in a documented error"""
        if not s.ghost.faulted:
            for r, rk in enumerate(s.ranks):
                if rk.phase == FAILED:
                    return f"rank {r} failed with no fault injected: {rk.error}"
            if not self.done(s) and not self.can_progress(s):
                return (f"no step can run before the workload is done: rank 0 in "
                        f"{s.ranks[0].phase}, rank 1 in {s.ranks[1].phase}, "
                        f"{sum(map(len, s.fabric.wire))} messages on the wire")
            return None
        for r, rk in enumerate(s.ranks):
            if rk.phase == FAILED and errors.documented(rk.error) is None:
                return f"rank {r} failed with an undocumented error: {rk.error}"
        if not self.done(s) and not any(a.is_enabled(s) for a in self.actions):
            stuck = [r for r in (0, 1) if s.ranks[r].alive and not self.finished(s, r)]
            return f"rank {stuck[0]} is stuck in {s.ranks[stuck[0]].phase} with no way out"
        return None


# the invariants' names, in report order, and what each states
INVARIANT_DOCS: dict[str, str] = {d.name: d.doc for d in declared_invariants(GateSystem)}
INVARIANTS = tuple(INVARIANT_DOCS)


def build(values: Mapping[str, Any], variants: Sequence[str] = ()) -> GateSystem:
    """Validate parameter values (typed) and variant names; build the system."""
    cfg = make_config(check_values(PARAMS, values))
    return GateSystem(cfg, check_variants(VARIANTS, variants))


__all__ = ["BATCH_ACTIONS", "BLOCK_ACTIONS", "PARAMS", "POST_FAILURE_ACTIONS", "PROFILES",
           "VARIANTS", "INVARIANTS", "INVARIANT_DOCS", "PROTOCOL", "GateSystem", "build"]
