"""What every phase's steps share: the poll sizes, the hello's comparison, and the base class
that holds a configuration's derived values, its action list and the helpers that move a
rank (``_put`` along the phase graph only, ``_fail`` with a declared text)."""

from __future__ import annotations

from functools import cached_property

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action_names, bind
from verbspec.spec.fabric import RecvWR, SendWR
from verbspec.spec.gate.constants import BIG_POLL_BATCH, POLL_BATCH, VECTOR_BUFFERS
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import (
    BIG_XFER,
    BLOCK_OP,
    DRAIN_WAIT,
    FAILED,
    HEADER_MAGIC,
    GateState,
    Ghost,
    Observation,
    WRView,
    phase_step_allowed,
    view,
)
from verbspec.spec.gate.variants import DEPTH_MISMATCH, TAG_EVERY_CHUNK
from verbspec.spec.gate.wire import Hello, Payload, TcpItem
from verbspec.spec.lts import Action
from verbspec.spec.values import evolve, set_item

RANKS = ((0,), (1,))
# the groups of actions a configuration has or lacks together (GateSpec.actions)
VERIFY_BLOCK, BATCH_GATE, POST_FAILURE = "verify block", "batch gate", "post failure"


def poll_batch(cfg: GateConfig, phase: str) -> int:
    """The completions one reap polls in ``phase``."""
    if phase == DRAIN_WAIT:
        return 2 * cfg.window + 1
    return BIG_POLL_BATCH if phase == BIG_XFER else POLL_BATCH


def hello_mismatch(ours: Hello, peer: Hello) -> tuple[str, int, int] | None:
    """The first value of the hello in which the peer differs: (what, the peer's, ours)."""
    if peer.window != ours.window:
        return "receive window", peer.window, ours.window
    if peer.max_msg != ours.max_msg:
        return "message cap", peer.max_msg, ours.max_msg
    return None


def first_byte(item: TcpItem) -> int:
    """The byte a one-byte barrier read takes: a barrier byte, or the first byte of a header,
    the low byte of its little-endian magic."""
    return item.value if item.kind == "byte" else HEADER_MAGIC & 0xFF


def ghost_clean(g: Ghost) -> bool:
    return not (g.drops or g.misaligned or g.clobbered or g.stale or g.long_chains or g.order)


class StepsBase:
    """The gate protocol for one configuration and set of variants: its state and helpers;
    the phases' steps are mixed in by :class:`~verbspec.spec.gate.steps.GateSpec`."""

    def __init__(self, cfg: GateConfig, variants: frozenset[str]):
        self.cfg = cfg
        self.v = variants
        c = cfg
        # each rank's own configuration (they differ only where rank 1's is set apart)
        self.cfgs = (c.of_rank(0), c.of_rank(1))
        self.rank_chunks = (self.cfgs[0].chunks, self.cfgs[1].chunks)
        # ds4 never negotiates depths; the depth-mismatch variant grants rank 1 a 64-deep queue
        self.rq_grant = (c.rq_depth, min(c.rq_depth, c.chain_max)
                         if DEPTH_MISMATCH.on(variants) else c.rq_depth)
        drawn = {1, c.chain_max + 1, c.big_window(c.rq_depth) + 1, c.big_chunks} - {0}
        self.big_sizes = tuple(sorted(drawn)) if c.big_gates else ()
        self.free_ops = (0,) + self.big_sizes + ((BLOCK_OP,) if c.verify_blocks else ())

    @cached_property
    def actions(self) -> tuple[Action, ...]:
        """This configuration's actions: the verify block's only with verify_blocks=1, its
        batch gates only where a rank's verify window is switched off, the failing posts and
        polls only with post_failures=1 (elsewhere never enabled)."""
        batches = self.cfg.verify_blocks and any(c.batch_path for c in self.cfgs)
        lacks = {VERIFY_BLOCK: not self.cfg.verify_blocks, BATCH_GATE: not batches,
                 POST_FAILURE: not self.cfg.post_failures}
        absent = {name for group, lacked in lacks.items() if lacked
                  for name in action_names(type(self), group=group)}
        return tuple(a for a in bind(self) if a.name not in absent)

    @cached_property
    def progress_actions(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if not a.fault)

    def can_progress(self, s: GateState) -> bool:
        return any(a.is_enabled(s) for a in self.progress_actions)

    # ------------------------------------------------------------------ helpers
    def _obs(self, s: GateState, r: int, **kw) -> Observation:
        return Observation(r, views=(view(s.ranks[0]), view(s.ranks[1])), **kw)

    def _put(self, s: GateState, r: int, **changes) -> GateState:
        rk = s.ranks[r]
        if "phase" in changes and not phase_step_allowed(rk.phase, changes["phase"]):
            raise AssertionError(f"spec bug: rank {r} moved from phase {rk.phase} to "
                                 f"{changes['phase']}, not an edge of NEXT_PHASES")
        return evolve(s, ranks=set_item(s.ranks, r, evolve(rk, **changes)))

    def _fail(self, s: GateState, r: int, msg: str, **kw) -> tuple[GateState, Observation]:
        s = self._put(s, r, phase=FAILED, error=msg, died_in=s.ranks[r].phase)
        return s, self._obs(s, r, result=msg, **kw)

    def _ghost(self, s: GateState, **add: str) -> GateState:
        g = s.ghost
        return evolve(s, ghost=evolve(g, **{k: getattr(g, k) + (v,) for k, v in add.items()}))

    def _write(self, s: GateState, r: int, item: TcpItem, **changes
               ) -> tuple[GateState, Observation]:
        """Rank ``r`` writes ``item`` on its TCP stream, and its state takes ``changes``."""
        s = evolve(s, fabric=fb.tcp_write(s.fabric, r, item))
        s = self._put(s, r, **changes)
        return s, self._obs(s, r, tcp_out=(item,))

    def _faulted(self, s: GateState) -> GateState:
        return s if s.ghost.faulted else evolve(s, ghost=evolve(s.ghost, faulted=True))

    def _wr_view(self, r: int, w: RecvWR | SendWR) -> WRView:
        stride = self.cfgs[r].vec_bytes if w.buf in VECTOR_BUFFERS else self.cfgs[r].max_msg
        return WRView(w.wr_id, w.buf, w.slot * stride + w.offset, w.length,
                      getattr(w, "signaled", True))

    def drain_wrs(self, r: int) -> int:
        """The dummies rank ``r`` sends in a drain, and the receives it waits for: its window."""
        return self.cfgs[r].window * self.rank_chunks[r]

    def _chain_check(self, s: GateState, r: int, n: int, what: str) -> GateState:
        if n > self.cfg.chain_max:
            return self._ghost(s, long_chains=f"rank {r} posted a chain of {n} {what} work "
                                              f"requests, above chain_max {self.cfg.chain_max}")
        return s

    def ops_allowed(self, s: GateState, r: int) -> tuple[int, ...]:
        """The ops the rank's application may start next: the script's, or a free choice."""
        rk = s.ranks[r]
        if rk.op < len(s.script):
            return (s.script[rk.op],)
        if rk.op < self.cfg.ops:
            return self.free_ops
        return ()

    def gate_recv_chain(self, r: int, seq: int) -> tuple[RecvWR, ...]:
        """Receive WRs for gate ``seq``: only the last chunk carries the seq as wr_id, so the
        watermark moves when the slot is whole (every chunk in the tag-every-chunk variant)."""
        c, peer = self.cfgs[r], 1 - r
        last = self.rank_chunks[r] - 1
        every = TAG_EVERY_CHUNK.on(self.v)
        return tuple(
            RecvWR(seq if (k == last or every) else 0, "in", c.slot(seq), k * c.max_msg,
                   c.chunk_len(k), Payload("gate", peer, seq, k))
            for k in range(self.rank_chunks[r]))

    def _phase_is(self, s: GateState, phase: str):
        return ((r,) for r in (0, 1) if s.ranks[r].phase == phase)

    def _tcp_ready(self, s: GateState, phase: str):
        return ((r,) for r in (0, 1)
                if s.ranks[r].phase == phase and s.fabric.tcp[1 - r])
