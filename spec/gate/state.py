"""State of the two-rank gate system: per-rank protocol state, the fabric, the workload script,
and ghost variables that record what the checkers judge (drops, misaligned or clobbered data).

Theory of operation. Each rank is a state machine whose phase names the protocol step it takes
next (``NEXT_PHASES`` is the whole graph). A rank starts in ``init`` and after setup sits in
``idle`` between application calls. A decode gate arms the lookahead window once (``arm_post``,
then the 0xD1 barrier over TCP), then posts its send chain (``send``), waits for the watermark
(``wait``, reaping completions) and hands the in-slot to the application (``hold``). A big gate
first exchanges a header over TCP, drains the decode window if one is armed (``drain_post``,
``drain_wait``), then runs windows of staging receives behind a barrier byte (``big_begin`` ..
``big_xfer``) until every chunk is through. A verify block (``ds4_tp_batch_block_begin``) is
the third mode of the queue pair: a header exchange over TCP (the spec's rendezvous; ds4 has
none), the drain, layer 0's receives behind the 0xB5 barrier, then per layer the next layer's
receives and this layer's sends (``block_send``) and a wait for its rows (``block_wait``), and
at the end a wait for every row and send (``block_end``). With the verify window switched
off (``DS4_TP_DISABLE_VERIFY_WINDOW``) a block's layers are batch gates instead: each a batch
header over TCP (``batch_header_write``, ``batch_header_read``), the drain, and big-gate windows
of the layer's rows. Any live phase may end in ``failed``
(a check or a fault the protocol detects) or ``crashed`` (a fault); neither is left again.

Every value is frozen and hashable, so states can be deduplicated and written as ITF traces.
A state's parts keep their hash once computed (``hash_once``): a successor state shares most of
them (a rank, the ghost, the held buffers, the work requests on a queue) with the state it came
from, and the search hashes every state it reaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verbspec.spec.fabric import Fabric
from verbspec.spec.gate.wire import TcpItem
from verbspec.spec.values import hash_once, unpickled_hash

# Phases of a rank. A phase names the protocol step the rank will take next.
INIT, IDLE, HOLD = "init", "idle", "hold"
ARM_POST, ARM_BAR_SEND, ARM_BAR_READ = "arm_post", "arm_barrier_write", "arm_barrier_read"
SEND, WAIT = "send", "wait"
DRAIN_POST, DRAIN_WAIT = "drain_post", "drain_wait"
BIG_HDR_SEND, BIG_HDR_READ, BIG_BEGIN = "big_header_write", "big_header_read", "big_begin"
BIG_POST, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER = (
    "big_post", "big_barrier_write", "big_barrier_read", "big_xfer")
BLOCK_HDR_SEND, BLOCK_HDR_READ, BLOCK_POST = (
    "block_header_write", "block_header_read", "block_post")
BLOCK_BAR_SEND, BLOCK_BAR_READ = "block_barrier_write", "block_barrier_read"
BLOCK_SEND, BLOCK_WAIT, BLOCK_END = "block_send", "block_wait", "block_end"
BATCH_HDR_SEND, BATCH_HDR_READ = "batch_header_write", "batch_header_read"
FAILED, CRASHED = "failed", "crashed"
# every phase once, in the order the native engines number them (native/generated/
# spec_constants.h's VS_SPEC_GATE_PHASE_NAMES is written from it)
PHASES = (INIT, IDLE, HOLD, ARM_POST, ARM_BAR_SEND, ARM_BAR_READ, SEND, WAIT, DRAIN_POST,
          DRAIN_WAIT, BIG_HDR_SEND, BIG_HDR_READ, BIG_BEGIN, BIG_POST, BIG_BAR_SEND,
          BIG_BAR_READ, BIG_XFER, BLOCK_HDR_SEND, BLOCK_HDR_READ, BLOCK_POST, BLOCK_BAR_SEND,
          BLOCK_BAR_READ, BLOCK_SEND, BLOCK_WAIT, BLOCK_END, BATCH_HDR_SEND, BATCH_HDR_READ,
          FAILED, CRASHED)

# phases that poll the CQ
REAP_PHASES = frozenset({WAIT, DRAIN_WAIT, BIG_XFER, BLOCK_WAIT, BLOCK_END})
# phases that read TCP
TCP_READ_PHASES = frozenset({ARM_BAR_READ, BIG_HDR_READ, BIG_BAR_READ, BLOCK_HDR_READ,
                             BLOCK_BAR_READ, BATCH_HDR_READ})
BIG_PHASES = frozenset({BIG_BEGIN, BIG_POST, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER})
# the phases of an armed verify block (after its drain)
BLOCK_PHASES = frozenset({BLOCK_POST, BLOCK_BAR_SEND, BLOCK_BAR_READ, BLOCK_SEND, BLOCK_WAIT,
                          BLOCK_END})

# The phase graph: the phases a live rank may enter from each phase (FAILED and CRASHED, the
# dead ends, are reachable from every live phase). steps/ moves a rank only along it.
NEXT_PHASES: dict[str, frozenset[str]] = {
    INIT: frozenset({IDLE}),
    IDLE: frozenset({ARM_POST, SEND, DRAIN_POST, BIG_HDR_SEND, BLOCK_HDR_SEND, BLOCK_POST,
                     BATCH_HDR_SEND}),
    ARM_POST: frozenset({ARM_BAR_SEND, SEND}),
    ARM_BAR_SEND: frozenset({ARM_BAR_READ}),
    ARM_BAR_READ: frozenset({SEND}),
    SEND: frozenset({WAIT}),
    WAIT: frozenset({HOLD}),
    HOLD: frozenset({IDLE}),
    BIG_HDR_SEND: frozenset({BIG_HDR_READ}),
    BIG_HDR_READ: frozenset({DRAIN_POST, BIG_BEGIN}),
    DRAIN_POST: frozenset({DRAIN_WAIT}),
    DRAIN_WAIT: frozenset({BIG_BEGIN, BIG_HDR_SEND, BLOCK_POST}),
    BIG_BEGIN: frozenset({BIG_POST}),
    BIG_POST: frozenset({BIG_BAR_SEND}),
    BIG_BAR_SEND: frozenset({BIG_BAR_READ}),
    BIG_BAR_READ: frozenset({BIG_XFER}),
    BIG_XFER: frozenset({BIG_BEGIN, IDLE, BATCH_HDR_SEND}),
    BLOCK_HDR_SEND: frozenset({BLOCK_HDR_READ}),
    BLOCK_HDR_READ: frozenset({DRAIN_POST, BLOCK_POST}),
    BLOCK_POST: frozenset({BLOCK_BAR_SEND}),
    BLOCK_BAR_SEND: frozenset({BLOCK_BAR_READ}),
    BLOCK_BAR_READ: frozenset({BLOCK_SEND}),
    BLOCK_SEND: frozenset({BLOCK_WAIT}),
    BLOCK_WAIT: frozenset({BLOCK_SEND, BLOCK_END}),
    BLOCK_END: frozenset({IDLE}),
    BATCH_HDR_SEND: frozenset({BATCH_HDR_READ}),
    BATCH_HDR_READ: frozenset({DRAIN_POST, BIG_BEGIN}),
    FAILED: frozenset(),
    CRASHED: frozenset(),
}
DEAD_PHASES = frozenset({FAILED, CRASHED})


def phase_step_allowed(old: str, new: str) -> bool:
    """Whether a rank may move from phase ``old`` to ``new`` in one step."""
    return new == old or new in NEXT_PHASES[old] or (new in DEAD_PHASES
                                                      and old not in DEAD_PHASES)


WINDOW_BARRIER = 0xD1
BLOCK_BARRIER = 0xB5        # the verify block's barrier byte
BLOCK_OP = -1               # a verify block in the workload script
BIG_MAGIC = 0xB16           # the tag field of a big-gate header (ds4's header.gate)
HEADER_MAGIC = 0x44533442   # "DS4B", the magic of ds4's big-gate header
BIG_LAYER = 0               # the spec's big gates name no layer: their headers carry layer 0


@dataclass(frozen=True)
class Held:
    """Ghost: a buffer holding data the application has not consumed yet."""

    buf: str            # "in" | "stage" | "blk" (a verify-block row)
    slot: int
    seq: int            # gate seq, big-gate chunk index, or verify-block row
    chunks: tuple[int, ...]

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class Rank:
    phase: str = INIT
    op: int = 0                     # index of this rank's current (or next) op in the script
    seq: int = 0                    # gate in progress
    # the protocol's own variables (ds4 names)
    recv_done: int = 0
    last_gate_seq: int = 0
    window_active: bool = False
    send_outstanding: int = 0       # gate and verify-block sends not reaped (not BULK ones)
    # drain progress
    drain_recvs: int = 0
    drain_sends: int = 0
    # big gate progress
    big_no: int = 0                 # big gates begun
    big_chunks: int = 0
    hdr_ok: bool = False            # the big-gate header exchange of this big gate is done
    big_depth: int = 0              # window depth agreed with the peer
    big_base: int = 0               # first chunk of the current window
    big_win: int = 0                # chunks in the current window
    big_posted: int = 0
    big_sent: int = 0
    big_recvd: frozenset[int] = frozenset()
    big_send_done: int = 0
    barrier_tag: int = 0            # this big-gate call's last barrier byte (uint8, wraps)
    # verify-block progress (ds4 names)
    block_active: bool = False
    block_layer: int = 0            # the layer whose batch gate is in progress
    block_posted: int = 0           # layers whose receives are posted
    block_recv_done: int = 0        # row messages received in this block
    error: str = ""
    # ghosts
    held: tuple[Held, ...] = ()
    arrived: int = 0                # highest gate whose whole vector landed here, aligned
    sent_seq: int = 0               # highest gate this rank has posted a send for
    strays: tuple[str, ...] = ()    # warm-up leftovers handed to this rank, sorted by kind
    faults_used: frozenset[str] = frozenset()
    died_in: str = ""               # the phase the rank failed or crashed in

    __hash__ = hash_once
    __getstate__ = unpickled_hash

    @property
    def alive(self) -> bool:
        return self.phase not in DEAD_PHASES


@dataclass(frozen=True)
class Ghost:
    """Records of events the invariants forbid; each is a human-readable sentence."""

    faulted: bool = False
    drops: tuple[str, ...] = ()
    misaligned: tuple[str, ...] = ()
    clobbered: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    long_chains: tuple[str, ...] = ()
    order: tuple[str, ...] = ()

    __hash__ = hash_once
    __getstate__ = unpickled_hash


@dataclass(frozen=True)
class GateState:
    ranks: tuple[Rank, Rank]
    fabric: Fabric
    # 0: a decode gate; n > 0: a big gate of n chunks; -1: a verify block
    script: tuple[int, ...] = ()
    ghost: Ghost = field(default_factory=Ghost)
    # not hashed once: a search hashes each state it builds once (its parts, shared with
    # other states, keep theirs)


@dataclass(frozen=True)
class WRView:
    """A posted work request as an implementation would show it."""

    wr_id: int
    buf: str
    offset: int         # byte offset in its region (slab or staging)
    length: int
    signaled: bool = True


@dataclass(frozen=True)
class CQEView:
    opcode: str
    wr_id: int
    status: str
    byte_len: int


@dataclass(frozen=True)
class RankView:
    """The abstract state an implementation must agree on after every step."""

    phase: str
    recv_done: int
    last_gate_seq: int
    window_active: bool
    send_outstanding: int
    error: str


@dataclass(frozen=True)
class Observation:
    """What one action visibly does: posts, completions consumed, TCP traffic, result, logs,
    and the abstract state of both ranks afterwards."""

    rank: int
    recvs: tuple[WRView, ...] = ()
    sends: tuple[WRView, ...] = ()
    polled: tuple[CQEView, ...] = ()
    tcp_out: tuple[TcpItem, ...] = ()
    tcp_in: tuple[TcpItem, ...] = ()
    result: str = ""                # "" when the step succeeded, else the error message
    log: tuple[str, ...] = ()
    views: tuple[RankView, ...] = ()


def view(rk: Rank) -> RankView:
    """The rank as an implementation shows it; built once per rank and kept on it (every step
    observes both ranks, and most steps leave one of them as it was)."""
    kept = rk.__dict__
    v = kept.get("_view")
    if v is None:
        v = kept["_view"] = RankView(rk.phase, rk.recv_done, rk.last_gate_seq, rk.window_active,
                                     rk.send_outstanding, rk.error)
    return v
