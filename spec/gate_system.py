"""The closed two-rank gate system: its action list, named invariants and named variants.

Two ranks run the same workload (a script of decode gates and big gates that the first rank to
reach each op chooses) over one UC queue pair each side of the fabric model. Checkers see only
the System interface of spec/lts.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from verbspec.spec.fabric import completes, new_fabric
from verbspec.spec.gate import DOCUMENTED_ERRORS, GateSpec
from verbspec.spec.gate_params import PARAMS, GateConfig, make_config
from verbspec.spec.gate_state import (
    BIG_PHASES,
    FAILED,
    IDLE,
    REAP_PHASES,
    GateState,
    Rank,
)
from verbspec.spec.lts import Action, Invariant
from verbspec.spec.params import Variant, check_values, check_variants

PROTOCOL = "gate"
BMC_DEPTH = 14      # default bound of breadth-first search (about 12k states at the defaults)
# bmc's second phase searches fault-free runs deeper: fault-free states roughly double per
# level past 26 (about 86k at depth 31), so at the defaults its state budget ends it first
BMC_FAULT_FREE_DEPTH = 40
# ... and a third, runs with at most one fault (e.g. one warm-up leftover in a full CQ)
BMC_ONE_FAULT_DEPTH = 40
# ... and last, fault-free random walks: depth-mismatch at the defaults needs a 65-chunk big
# gate, at least 148 steps, far past what either budget reaches
BMC_WALK_DEPTH = 1000

VARIANTS: tuple[Variant, ...] = (
    Variant("no-barrier",
            "arming posts the window's receives and sends at once, without the 0xD1 TCP barrier",
            "no_silent_drop: a first gate reaches a peer that has not posted its window yet; "
            "UC drops it while the sender completes"),
    Variant("tag-every-chunk",
            "every chunk's receive carries wr_id = seq, not only the last chunk's",
            "watermark_sound: recv_done passes a gate when its first chunk lands"),
    Variant("signal-last-only",
            "a gate's send chain signals only its last WR and counts the chain once, while the "
            "provider completes every WR",
            "send_accounting: send_outstanding under-counts, so a drain can end while a send "
            "still reads its buffer"),
    Variant("stray-send-completion",
            "every send completion decrements send_outstanding, whatever its tag",
            "send_accounting: a warm-up leftover completion makes send_outstanding under-count"),
    Variant("stray-warm-receive",
            "every receive completion raises recv_done to its wr_id, tag bits included",
            "watermark_sound: a warm-up leftover (wr_id 1<<62) lifts recv_done to 2^62 and every "
            "later gate passes without waiting (in a big-gate window it fails the window "
            "instead: no_deadlock)"),
    Variant("no-seq-check",
            "gate() accepts any seq, not only last_gate_seq + 1",
            "chunk_alignment: a skipped seq pairs one gate's send with another's receive; a "
            "repeated seq returns at once with stale data (watermark_sound, gate_order)"),
    Variant("depth-mismatch",
            "rank 1 is granted a chain_max-deep receive queue and big-gate windows are not "
            "negotiated: each rank uses its own depth",
            "no_silent_drop: rank 0's big-gate window overruns rank 1's receives while the "
            "barrier tags still agree (or the ranks deadlock on the next barrier)"),
    Variant("drain-without-rendezvous",
            "a rank drains its window as soon as its application starts a big gate, before the "
            "big-gate header exchange",
            "no_silent_drop, watermark_sound or no_deadlock: a dummy reaches a peer still "
            "closing its last gate; it is dropped (no receive reposted yet) or reaped as a gate "
            "arrival (raising recv_done past what landed), and the peer's drain never counts "
            "its window"),
)

INVARIANT_DOCS: dict[str, str] = {
    "no_silent_drop": "no SEND ever reaches a UC queue pair with no receive posted",
    "chunk_alignment": "the k-th chunk sent for gate s lands in the receive posted for gate s, "
                       "chunk k (drain dummies only in lookahead receives, big-gate chunks only "
                       "in their own staging receive)",
    "watermark_sound": "recv_done never exceeds the last gate whose whole vector landed, and a "
                       "gate passes only with its whole vector in its slot",
    "slot_exclusive": "no arrival into a slot whose data is not consumed yet; no out-slot or "
                      "staging slot rewritten while a send still reads it",
    "mode_exclusive": "the decode window and big-gate windows never coexist on the queue pair",
    "send_accounting": "send_outstanding equals the sends posted whose completions are not "
                       "reaped yet",
    "queue_bounds": "posted receives, in-flight sends and CQ entries stay within their depths; "
                    "no chain is longer than chain_max",
    "gate_order": "each rank completes gates 1, 2, 3, ... in order",
    "no_deadlock": "without faults some step stays enabled until the workload is done and no "
                   "rank fails; with faults every rank ends done or in a documented error",
}
INVARIANTS = tuple(INVARIANT_DOCS)

# Actions that inject a fault, or end a wait because of one; not progress.
FAULT_ACTIONS = frozenset({"crash", "error_completion", "lose", "bad_call", "stray_completion",
                           "timeout", "peer_gone"})

_ACTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("setup", ("rank",)),
    ("call_gate", ("rank", "layer", "gate", "seq")),
    ("call_big", ("rank", "chunks")),
    ("arm_post", ("rank",)),
    ("barrier_write", ("rank",)),
    ("barrier_read", ("rank",)),
    ("gate_send", ("rank",)),
    ("reap", ("rank",)),
    ("gate_done", ("rank",)),
    ("consume", ("rank",)),
    ("big_header_write", ("rank",)),
    ("big_header_read", ("rank",)),
    ("drain_post", ("rank",)),
    ("drain_done", ("rank",)),
    ("big_begin", ("rank",)),
    ("big_post_recv", ("rank",)),
    ("big_barrier_write", ("rank",)),
    ("big_barrier_read", ("rank",)),
    ("big_send", ("rank",)),
    ("big_window_done", ("rank",)),
    ("transmit", ("rank",)),
    ("deliver", ("src",)),
    ("crash", ("rank",)),
    ("error_completion", ("rank",)),
    ("stray_completion", ("rank", "kind")),
    ("lose", ("src",)),
    ("bad_call", ("rank", "layer", "gate", "seq")),
    ("timeout", ("rank",)),
    ("peer_gone", ("rank",)),
)


class GateSystem:
    """The two-rank gate system for one configuration and set of variants."""

    protocol = PROTOCOL

    def __init__(self, cfg: GateConfig, variants: Sequence[str] = ()):
        self.params = cfg
        self.variants = tuple(variants)
        self.spec = GateSpec(cfg, frozenset(variants))
        acts = []
        for name, params in _ACTIONS:
            do = getattr(self.spec, f"do_{name}")
            en = getattr(self, f"_en_{name}", None) or getattr(self.spec, f"en_{name}", None)
            acts.append(Action(name, (do.__doc__ or name).strip().splitlines()[0], params, en,
                               do, fault=name in FAULT_ACTIONS))
        self.actions = tuple(acts)
        self.progress_actions = tuple(a for a in self.actions if not a.fault)
        self.invariants = tuple(
            Invariant(name, doc, "state", getattr(self, f"inv_{name}"))
            for name, doc in INVARIANT_DOCS.items())

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
        return any(a.is_enabled(s) for a in self.progress_actions)

    # timeouts: spurious ones only when faults are explored; otherwise only a stalled wait
    def _en_timeout(self, s: GateState):
        waiting = [r for r in (0, 1) if s.ranks[r].phase in REAP_PHASES]
        if waiting and (self.params.faults or not self.can_progress(s)):
            yield from ((r,) for r in waiting)

    # -------------------------------------------------------------- invariants
    def inv_no_silent_drop(self, s: GateState) -> str | None:
        return s.ghost.drops[0] if s.ghost.drops else None

    def inv_chunk_alignment(self, s: GateState) -> str | None:
        return s.ghost.misaligned[0] if s.ghost.misaligned else None

    def inv_watermark_sound(self, s: GateState) -> str | None:
        if s.ghost.stale:
            return s.ghost.stale[0]
        for r, rk in enumerate(s.ranks):
            if rk.alive and rk.recv_done > rk.arrived:
                return (f"rank {r}: recv_done {rk.recv_done} is past gate {rk.arrived}, the last "
                        f"whose whole vector landed")
        return None

    def inv_slot_exclusive(self, s: GateState) -> str | None:
        return s.ghost.clobbered[0] if s.ghost.clobbered else None

    def inv_mode_exclusive(self, s: GateState) -> str | None:
        for r, rk in enumerate(s.ranks):
            if rk.window_active and rk.phase in BIG_PHASES - {"big_begin"}:
                return f"rank {r} runs a big-gate window while its decode window is active"
            rq = s.fabric.qps[r].rq
            if any(w.buf == "stage" for w in rq) and any(w.buf == "in" for w in rq):
                return f"rank {r} has decode and big-gate receives posted together"
        return None

    def inv_send_accounting(self, s: GateState) -> str | None:
        f = s.fabric
        for r, rk in enumerate(s.ranks):
            qp = f.qps[r]
            if not rk.alive or qp.state != "rts":
                continue
            pending = sum(1 for w in qp.sq if completes(f, w.signaled))
            pending += sum(1 for c in qp.cq if c.opcode == "send" and c.payload.kind != "warm")
            if qp.qp_type == "rc":
                pending += sum(1 for m in f.wire[r] if completes(f, m.signaled))
            if rk.send_outstanding != pending:
                return (f"rank {r}: send_outstanding is {rk.send_outstanding} but {pending} "
                        f"send completions are still to come or to reap")
        return None

    def inv_queue_bounds(self, s: GateState) -> str | None:
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

    def inv_gate_order(self, s: GateState) -> str | None:
        return s.ghost.order[0] if s.ghost.order else None

    def inv_no_deadlock(self, s: GateState) -> str | None:
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
            if rk.phase == FAILED and not rk.error.startswith(DOCUMENTED_ERRORS):
                return f"rank {r} failed with an undocumented error: {rk.error}"
        if not self.done(s) and not any(a.is_enabled(s) for a in self.actions):
            stuck = [r for r in (0, 1) if s.ranks[r].alive and not self.finished(s, r)]
            return f"rank {stuck[0]} is stuck in {s.ranks[stuck[0]].phase} with no way out"
        return None


def prove(values: Mapping[str, Any], variants: Sequence[str] = (), *, progress: Any = None,
          trace_dir: Any = None) -> list:
    """z3 induction over the model of proofs/gate/ (decode-only workloads, faults too)."""
    from verbspec.proofs.gate import induction

    return induction.prove(values, variants, progress=progress, trace_dir=trace_dir)


def prove_scope(values: Mapping[str, Any], variants: Sequence[str] = ()) -> str | None:
    """Why ``prove`` cannot decide this configuration (it is outside the model), or None."""
    from verbspec.proofs.gate import induction

    return induction.out_of_scope(build(values, variants).params, variants)


def shortest_run(values: Mapping[str, Any], variants: Sequence[str], invariant: str,
                 steps: int) -> str | None:
    """bmc's hook for a random walk's trace: why no fault-free run breaking ``invariant`` is
    shorter than ``steps`` (proofs/gate/bound.py: no_silent_drop under depth-mismatch), or
    None."""
    from verbspec.proofs.gate import bound

    return bound.shortest_run(values, variants, invariant, steps)


def build(values: Mapping[str, Any], variants: Sequence[str] = ()) -> GateSystem:
    """Validate parameter values (typed) and variant names; build the system."""
    cfg = make_config(check_values(PARAMS, values))
    return GateSystem(cfg, check_variants(VARIANTS, variants))


__all__ = ["PARAMS", "VARIANTS", "INVARIANTS", "INVARIANT_DOCS", "PROTOCOL", "GateSystem",
           "build"]
