"""What the gate model talks about: phases, the variables of a state and their widths, the
parameters, the reap choices, and the action and variant names it takes from the spec.

Every variable is declared once, as a field of a record with its width in bits (0: Boolean)
and what it holds; code addresses it by name (``s.rank[r].dummy_send_cqes``) and generic code
(fresh states, frame conditions, the rank swap, substitutions) iterates over the fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any, Generic, TypeVar

from verbspec.spec.actions import declared, name_of
from verbspec.spec.gate import state as gs
from verbspec.spec.gate import variants as gv
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.wire import TAG_WARM

V = TypeVar("V")

SEQ_LIMIT = TAG_WARM    # wr_id bits 62 and 63 are tags (TAG_WARM, TAG_BULK): seq stays below
OPS_LIMIT = 1 << 61     # workloads below this keep seq + window clear of the tag bits
BIG_LIMIT = 1 << 24     # big-gate sizes the model admits (the spec's are at most 257)

# phase codes (8 bits): every phase of spec/gate/state.py; the live ones first, so a rank is alive
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
ARMING = (ARM_POST, ARM_BAR_SEND, ARM_BAR_READ)
DECODE_OP = (*ARMING, SEND, WAIT, HOLD)                 # inside a decode gate call
PRE_DRAIN = (BIG_HDR_SEND, BIG_HDR_READ)
DRAINING = (DRAIN_POST, DRAIN_WAIT)
WINDOWS = (BIG_BEGIN, *BIG_WINDOW)                      # after the drain (if any)
BIG_OP = (*PRE_DRAIN, *DRAINING, *WINDOWS)              # inside a big gate call

# TCP item kinds; a rank's stream holds at most two unread items (more is outside the model)
TCP_NONE, TCP_BYTE, TCP_HEADER = 0, 1, 2


def bits(width: int, doc: str) -> Any:
    """A record field holding a variable of ``width`` bits (0: a Boolean)."""
    return field(metadata={"width": width, "doc": doc})


def width(f: Any) -> int:
    return f.metadata["width"]


def record_items(prefix: str, record: Any) -> Iterator[tuple[str, Any]]:
    """(qualified name, value) of each field of a record, in declaration order."""
    for f in fields(record):
        yield f"{prefix}.{f.name}", getattr(record, f.name)


def make_record(cls: type, prefix: str, make: Callable[[str, int], Any]) -> Any:
    """A record whose every field is ``make(qualified name, width)``."""
    return cls(**{f.name: make(f"{prefix}.{f.name}", width(f)) for f in fields(cls)})


@dataclass(frozen=True, eq=False)
class Rank(Generic[V]):
    """One rank's variables: the protocol's own at their real widths, and for the fabric counts
    instead of queues (per kind of message: gate chunk, dummy, big chunk) and stream
    positions. UC delivers in order and each rank posts and sends in order, so every identity
    the spec's ghosts record is a function of these positions."""

    phase: V = bits(8, "the phase code (PHASES)")
    seq: V = bits(64, "the gate in progress")
    last_gate_seq: V = bits(64, "the last gate done")
    recv_done: V = bits(64, "the highest gate whose last chunk's completion was reaped")
    window_active: V = bits(0, "the decode window is armed")
    send_outstanding: V = bits(32, "signaled sends not yet completed, as the rank counts them")
    gates_sent: V = bits(64, "gates sent: the gate stream is chunks * gates_sent long")
    gate_sends_queued: V = bits(32, "gate-chunk send WRs not yet transmitted")
    gate_chunks_on_wire: V = bits(32, "gate chunks transmitted, not yet delivered")
    gate_send_cqes: V = bits(32, "unreaped send completions of gate chunks")
    gate_recv_cqes: V = bits(32, "unreaped receive completions of gate receives")
    gate_recvs_posted: V = bits(32, "gate receives posted and not yet taken")
    recv_stream_head: V = bits(64, "chunks of the gate-receive stream taken (reset on arming)")
    arrived: V = bits(64, "the highest gate whose last chunk landed")
    cq_overflow: V = bits(0, "the CQ overflowed (the QP is in error)")
    partial_gate: V = bits(64, "the gate whose first chunk landed without its last (0: none)")
    phase_at_death: V = bits(8, "the phase a dead rank died in (0 while alive)")
    warm_cqes: V = bits(8, "warm-up leftovers in the CQ")
    error_cqes: V = bits(8, "injected error completions in the CQ")
    strays_used: V = bits(8, "warm-up leftovers injected (at most the leftovers parameter)")
    error_injected: V = bits(0, "the one injected error completion was used")
    ops_done: V = bits(64, "ops of the workload done")
    big_chunks: V = bits(32, "the size of the rank's current or last big gate")
    last_op_big: V = bits(0, "the last op done was a big gate")
    dummy_sends_queued: V = bits(32, "drain dummies in the send queue")
    dummies_on_wire: V = bits(32, "drain dummies transmitted, not yet delivered")
    dummy_send_cqes: V = bits(32, "unreaped send completions of dummies")
    dummy_recv_cqes: V = bits(32, "unreaped completions of gate receives a dummy took")
    drain_recvs: V = bits(32, "the drain's receive completions counted")
    drain_sends: V = bits(32, "the drain's send completions counted")
    big_no: V = bits(64, "big gates called")
    hdr_ok: V = bits(0, "the big-gate headers were exchanged")
    big_depth: V = bits(32, "the agreed big-gate window")
    big_base: V = bits(32, "the current window's first chunk")
    big_win: V = bits(32, "the current window's size")
    big_posted: V = bits(32, "staging receives the window posted")
    big_sent: V = bits(32, "big chunks the window sent")
    big_send_done: V = bits(32, "the window's send completions counted")
    big_sends_flying: V = bits(32, "the window's sends in flight as ds4 counts them: sent - "
                                   "completions counted")
    big_recvd: V = bits(32, "the window's receive completions counted")
    big_landed: V = bits(32, "big chunks landed in the window's staging receives")
    barrier_tag: V = bits(8, "the last big-gate barrier byte written (wraps)")
    big_sends_queued: V = bits(32, "big-chunk send WRs not yet transmitted")
    big_chunks_on_wire: V = bits(32, "big chunks transmitted, not yet delivered")
    big_send_cqes: V = bits(32, "unreaped send completions of big chunks")
    big_recv_cqes: V = bits(32, "unreaped receive completions of staging receives")
    staging_recvs_posted: V = bits(32, "staging receives posted and not yet taken")
    next_big_no: V = bits(64, "the big gate of the next big chunk in flight (0: none)")
    next_big_chunk: V = bits(32, "the chunk index of the next big chunk in flight (0: none)")
    tcp_unread: V = bits(8, "TCP items this rank wrote that the peer has not read")
    tcp1_kind: V = bits(8, "the first unread item: TCP_NONE, TCP_BYTE or TCP_HEADER")
    tcp1_value: V = bits(64, "the first unread item: the byte, or the header's big gate")
    tcp1_chunks: V = bits(32, "the first unread item: the header's size")
    tcp1_depth: V = bits(32, "the first unread item: the header's receive depth")
    tcp2_kind: V = bits(8, "the second unread item: its kind")
    tcp2_value: V = bits(64, "the second unread item: its value")
    tcp2_chunks: V = bits(32, "the second unread item: its size")
    tcp2_depth: V = bits(32, "the second unread item: its depth")


@dataclass(frozen=True, eq=False)
class Ghost(Generic[V]):
    """Flags of the whole system, each recording an event the invariants forbid (the spec's
    Ghost records), whether a fault was injected, and whether a step left what the counters
    describe exactly (proved never to happen, so the model is exact on every reachable
    state)."""

    dropped: V = bits(0, "UC dropped a message for want of a receive")
    misaligned: V = bits(0, "a message landed in a receive meant for another")
    clobbered: V = bits(0, "a slot was overwritten before its gate was consumed")
    stale: V = bits(0, "a gate was done before all of it landed")
    out_of_order: V = bits(0, "a gate was done out of order")
    long_chain: V = bits(0, "a chain longer than chain_max was posted")
    faulted: V = bits(0, "a fault was injected")
    unmodelled: V = bits(0, "a step left what the counters describe")


@dataclass(frozen=True, eq=False)
class Script(Generic[V]):
    """The workload script as far as it matters: the ranks are never more than one op apart,
    so its length and last two entries (0: a decode gate, n: a big gate of n chunks)."""

    length: V = bits(64, "ops recorded")
    last: V = bits(32, "the last entry")
    before_last: V = bits(32, "the entry before it")


@dataclass(frozen=True, eq=False)
class State(Generic[V]):
    """A state of the model (z3 terms), or a state's values."""

    rank: tuple[Rank[V], Rank[V]]
    ghost: Ghost[V]
    script: Script[V]

    @staticmethod
    def build(make: Callable[[str, int], Any]) -> State:
        return State((make_record(Rank, "rank0", make), make_record(Rank, "rank1", make)),
                     make_record(Ghost, "ghost", make), make_record(Script, "script", make))

    def items(self) -> Iterator[tuple[str, V]]:
        """(qualified name, value) of every variable: rank 0's, rank 1's, ghost, script."""
        yield from record_items("rank0", self.rank[0])
        yield from record_items("rank1", self.rank[1])
        yield from record_items("ghost", self.ghost)
        yield from record_items("script", self.script)

    def as_dict(self) -> dict[str, V]:
        return dict(self.items())

    def swapped(self) -> State[V]:
        """The same state with ranks 0 and 1 exchanged."""
        return replace(self, rank=(self.rank[1], self.rank[0]))


@dataclass(frozen=True, eq=False)
class Choice(Generic[V]):
    """A move's free choices for one rank: how one reap splits between the kinds of completion
    (and how many of each came before the first error among them), and the size of a big
    gate a call chooses."""

    gate_sends: V = bits(32, "gate-chunk send completions reaped")
    gate_recvs: V = bits(32, "gate receive completions reaped")
    dummy_sends: V = bits(32, "dummy send completions reaped")
    dummy_recvs: V = bits(32, "completions of gate receives a dummy took, reaped")
    big_sends: V = bits(32, "big-chunk send completions reaped")
    big_recvs: V = bits(32, "staging receive completions reaped")
    warm: V = bits(32, "warm-up leftovers reaped (ignored)")
    errors: V = bits(32, "error completions reaped")
    gate_sends_before_error: V = bits(32, "of gate_sends, those before the first error")
    gate_recvs_before_error: V = bits(32, "of gate_recvs, those before the first error")
    dummy_sends_before_error: V = bits(32, "of dummy_sends, those before the first error")
    dummy_recvs_before_error: V = bits(32, "of dummy_recvs, those before the first error")
    big_sends_before_error: V = bits(32, "of big_sends, those before the first error")
    big_recvs_before_error: V = bits(32, "of big_recvs, those before the first error")
    big_size: V = bits(32, "the size of the big gate called")


@dataclass(frozen=True, eq=False)
class Choices(Generic[V]):
    rank: tuple[Choice[V], Choice[V]]

    @staticmethod
    def build(make: Callable[[str, int], Any]) -> Choices:
        return Choices((make_record(Choice, "choice0", make),
                        make_record(Choice, "choice1", make)))

    def items(self) -> Iterator[tuple[str, V]]:
        yield from record_items("choice0", self.rank[0])
        yield from record_items("choice1", self.rank[1])

    def swapped(self) -> Choices[V]:
        return Choices((self.rank[1], self.rank[0]))

    def with_rank(self, r: int, c: Choice[V]) -> Choices[V]:
        return Choices((c, self.rank[1]) if r == 0 else (self.rank[0], c))


@dataclass(frozen=True, eq=False)
class Params(Generic[V]):
    """The model's parameters (the variant flags false: the base protocol)."""

    window: V = bits(64, "the decode window")
    chunks: V = bits(64, "chunks per gate (1 or 2)")
    slot_period: V = bits(64, "gates between two uses of a slot")
    rq_depth: V = bits(32, "the receive queue's depth")
    sq_depth: V = bits(32, "the send queue's depth")
    cq_depth: V = bits(32, "the CQ's depth")
    chain_max: V = bits(32, "the longest chain of work requests")
    ops: V = bits(64, "ops each rank calls")
    big_gates: V = bits(0, "big gates are in the workload")
    big_cap: V = bits(32, "the big-gate window cap: big_depth and staging")
    big_send_depth: V = bits(32, "the big-gate send depth")
    no_barrier: V = bits(0, "variant no-barrier")
    tag_every_chunk: V = bits(0, "variant tag-every-chunk")
    signal_last_only: V = bits(0, "variant signal-last-only")
    depth_mismatch: V = bits(0, "variant depth-mismatch")
    faults: V = bits(0, "fault actions are explored")
    leftovers: V = bits(8, "warm-up leftover completions the faults may hand a rank")

    @staticmethod
    def build(make: Callable[[str, int], Any]) -> Params:
        return Params(**{f.name: make(f.name, width(f)) for f in fields(Params)})

    def items(self) -> Iterator[tuple[str, V]]:
        for f in fields(self):
            yield f.name, getattr(self, f.name)


# Big-gate-only variables: zero (false) throughout a decode-only workload.
BIG_ONLY = ("big_chunks", "dummy_sends_queued", "dummies_on_wire", "dummy_send_cqes",
            "dummy_recv_cqes", "drain_recvs", "drain_sends", "big_no", "big_depth", "big_base",
            "big_win", "big_posted", "big_sent", "big_send_done", "big_sends_flying",
            "big_recvd", "big_landed",
            "big_sends_queued", "big_chunks_on_wire", "big_send_cqes", "big_recv_cqes",
            "staging_recvs_posted", "next_big_no", "next_big_chunk", "barrier_tag",
            "last_op_big", "hdr_ok")


@dataclass(frozen=True)
class SpecAction:
    name: str
    fault: bool


def spec_actions() -> tuple[SpecAction, ...]:
    """The gate system's actions as the spec declares them: the model has a move for each."""
    return tuple(SpecAction(d.name, d.fault) for d in declared(GateSpec))


def spec_variants() -> tuple[str, ...]:
    """The gate system's variant names as the spec declares them."""
    return tuple(v.name for v in gv.VARIANTS)


_DECLARED = spec_actions()
ACTIONS = tuple(a.name for a in _DECLARED)
PROGRESS_ACTIONS = tuple(a.name for a in _DECLARED if not a.fault)
FAULT_ACTIONS = tuple(a.name for a in _DECLARED if a.fault)
# the actions whose moves take choices (reap's split, call_big's size), split by kind, or
# touch most of the lemmas (the two sends), and those whose consecution is asked by cases
REAP_STEP, DELIVER_STEP, CALL_BIG_STEP, GATE_SEND_STEP, BIG_SEND_STEP = (
    name_of(f) for f in (GateSpec.do_reap, GateSpec.do_deliver, GateSpec.do_call_big,
                         GateSpec.do_gate_send, GateSpec.do_big_send))
CALL_GATE_STEP, BIG_WINDOW_DONE_STEP = (
    name_of(f) for f in (GateSpec.do_call_gate, GateSpec.do_big_window_done))

# The variants the model encodes, each as the Params flag it sets (None: the variant changes
# nothing the model sees: no-seq-check matters only with bad calls, which are faults). The
# spec's other variants are outside the model (see induction.out_of_scope).
ENCODED_VARIANTS: dict[str, str | None] = {gv.NO_BARRIER.name: "no_barrier",
                                           gv.TAG_EVERY_CHUNK.name: "tag_every_chunk",
                                           gv.SIGNAL_LAST_ONLY.name: "signal_last_only",
                                           gv.NO_SEQ_CHECK.name: None,
                                           gv.DEPTH_MISMATCH.name: "depth_mismatch"}
VARIANT_FLAGS = tuple(f for f in ENCODED_VARIANTS.values() if f)
