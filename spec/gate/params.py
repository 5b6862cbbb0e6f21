"""Parameters of the gate protocol (ds4's constants as defaults) and the values derived from them.

Only what the protocol itself refuses is an input error (ParamError, exit 3): e.g. a vector above
twice the message cap, a zero window, a timeout outside 1..60000 ms, a slot schedule that does not
fit the slab. Well-formed but unsafe choices (a receive queue smaller than the window, one gate
per token) are accepted and left for the checkers to refute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from verbspec.spec.gate.wire import Hello
from verbspec.spec.params import ParamError, ParamSpec

# Upper bounds, so that no value makes a check run away: the largest RDMA message (2^31 bytes);
# the deepest queue and CQ of the devices targeted (mlx5: 32768 work requests, 2^22 CQ
# entries; rxe allows less); slab slots in 16 bits; a gate's seq below the wr_id tag bits.
MAX_MESSAGE = 2**31
MAX_QUEUE = 2**15
MAX_CQ = 2**22
MAX_SLOTS = 2**16
MAX_SEQ = 2**61 - 1

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("vec_bytes", int, 24576, "bytes of one gate vector", lo=1, hi=2 * MAX_MESSAGE),
    ParamSpec("max_msg", int, 16384, "driver message cap; a vector rides as ceil(vec/max) chunks",
              lo=1, hi=MAX_MESSAGE),
    ParamSpec("window", int, 16, "gates of receive lookahead", lo=1, hi=MAX_QUEUE),
    # ds4 builds MAX_MSG and RECV_WINDOW in as constants and its hello carries neither, so two
    # builds can disagree: rank 1's own values (0: rank 0's)
    ParamSpec("rank1_max_msg", int, 0,
              "rank 1's own message cap (0: max_msg); the ranks' hello compares them",
              lo=0, hi=MAX_MESSAGE),
    ParamSpec("rank1_window", int, 0,
              "rank 1's own receive lookahead (0: window); the ranks' hello compares them",
              lo=0, hi=MAX_QUEUE),
    ParamSpec("gates_per_token", int, 86, "gates per token (0: cycle through n_slots)", lo=0,
              hi=MAX_SLOTS),
    ParamSpec("n_slots", int, 86, "slots in the registered slab", lo=1, hi=MAX_SLOTS),
    ParamSpec("slot_start", int, 0, "identity schedule: first slot", lo=0, hi=MAX_SLOTS),
    ParamSpec("slot_step", int, 1, "identity schedule: slot stride", lo=0, hi=MAX_SLOTS),
    ParamSpec("slot_mask", int, 0,
              "mask schedule: the ordinal-th set bit is the slot (0: identity schedule)", lo=0,
              hi=2**64 - 1),
    ParamSpec("rq_depth", int, 1024, "granted receive queue depth", lo=1, hi=MAX_QUEUE),
    ParamSpec("sq_depth", int, 1024, "granted send queue depth", lo=1, hi=MAX_QUEUE),
    # ds4 sizes the CQ at 512 = one full big-gate window (256 receives + 256 sends), with no
    # room for the two warm-up leftovers and the one error completion the fault model adds
    ParamSpec("cq_depth", int, 515,
              "shared completion queue entries (ds4: 512, which one warm-up leftover overflows "
              "in a full big-gate window)", lo=1, hi=MAX_CQ),
    ParamSpec("big_depth", int, 256, "cap on a big-gate window (receives in flight)", lo=1, hi=256),
    ParamSpec("chain_max", int, 64, "longest chain of work requests posted at once", lo=1,
              hi=MAX_QUEUE),
    ParamSpec("big_last_bytes", int, 0,
              "bytes of a big gate's last chunk, its transfer's remainder (0: a whole chunk)",
              lo=0, hi=MAX_MESSAGE),
    ParamSpec("staging_bytes", int, 256 * 16384,
              "big-gate staging area; caps the window at staging_bytes / max_msg", lo=1,
              hi=2**40),
    ParamSpec("timeout_ms", int, 750, "gate and drain timeout", lo=1, hi=60000),
    ParamSpec("qp_type", str, "uc", "queue pair transport", choices=("uc", "rc")),
    ParamSpec("unsignaled_completions", int, 1,
              "1: the provider completes unsignaled sends too (as Apple's does)", lo=0, hi=1),
    ParamSpec("faults", int, 1,
              "1: crashes, error completions, timeouts, bad gate calls and warm-up leftovers "
              "are explored", lo=0, hi=1),
    ParamSpec("warm_send_leftovers", int, 1,
              "with faults, over UC: warm-up send completions (wr_id 1<<62) that may outlive "
              "warm-up, per rank (ds4's warm-up posts a send per attempt, up to 20, and stops "
              "polling at the first send completion it sees; over RC it reaps its one send, "
              "so none)", lo=0, hi=20),
    ParamSpec("warm_recv_leftover", int, 1,
              "1: with faults, a warm-up receive completion (wr_id 1<<62) may outlive warm-up, "
              "beside a warm-up send completion; 0: only a send completion may, as in ds4, whose "
              "warm-up succeeds only after reaping its one warm receive", lo=0, hi=1),
    ParamSpec("wire_loss", int, 0, "1: the wire may lose messages (UC has no recovery)",
              lo=0, hi=1),
    ParamSpec("post_failures", int, 0,
              "1: with faults, ibv_post_recv, ibv_post_send and ibv_poll_cq may fail, and the "
              "rank fails as ds4 does (what an arming posted before the failing gate stays "
              "posted); the z3 model does not cover them", lo=0, hi=1),
    ParamSpec("ops", int, 48, "workload: gate calls and big gates each rank makes", lo=1,
              hi=MAX_SEQ),
    ParamSpec("big_gates", int, 1,
              "workload: 1: big gates (prefill) mix with decode gates; 0: decode gates only",
              lo=0, hi=1),
    ParamSpec("big_chunks", int, 0,
              "workload: with big gates, one more size the application may give a big gate, "
              "in chunks (0: only the sizes the workload draws: 1, chain_max + 1 and a window "
              "and one); a validated recording's own size", lo=0, hi=MAX_SEQ),
    ParamSpec("verify_blocks", int, 0,
              "workload: 1: verify blocks (ds4_tp_batch_block_begin, a batch gate per layer, "
              "ds4_tp_batch_block_end) mix with the other calls; the z3 model does not cover "
              "them", lo=0, hi=1),
    ParamSpec("block_layers", int, 2, "layers of a verify block, one batch gate each", lo=1,
              hi=MAX_SLOTS),
    ParamSpec("block_rows", int, 1, "rows of a verify block's batch gates, one vector each",
              lo=1, hi=MAX_QUEUE),
    # a block's rows are the application's arguments on each rank, which ds4 never compares
    ParamSpec("rank1_block_rows", int, 0,
              "rank 1's own rows of a verify block (0: block_rows); the spec's block header "
              "compares them", lo=0, hi=MAX_QUEUE),
    ParamSpec("verify_window", str, "on",
              "on: a verify block arms its own window (ds4_tp_batch_block_begin); off: "
              "DS4_TP_DISABLE_VERIFY_WINDOW is set, the block's begin returns at once and each "
              "layer's batch gate exchanges a batch header, drains the decode window and moves "
              "its rows as a big-gate transfer (ds4_tp_batch_gate_exchange)",
              choices=("on", "off")),
    # each rank reads the switch from its own environment, and ds4 never compares them
    ParamSpec("rank1_verify_window", str, "same",
              "rank 1's own DS4_TP_DISABLE_VERIFY_WINDOW (same: verify_window)",
              choices=("same", "on", "off")),
)


# the values each rank has of its own: a parameter, and the parameter that sets rank 1's apart
RANK1_OWN = {"max_msg": "rank1_max_msg", "window": "rank1_window",
             "block_rows": "rank1_block_rows", "verify_window": "rank1_verify_window"}
# a rank 1 value that stands for "rank 0's": each such parameter's default
RANK1_SAME = {p.name: p.default for p in PARAMS if p.name in RANK1_OWN.values()}


@dataclass(frozen=True)
class GateConfig:
    """Validated parameters plus derived values; the spec reads only this."""

    vec_bytes: int
    max_msg: int
    window: int
    rank1_max_msg: int
    rank1_window: int
    gates_per_token: int
    n_slots: int
    slot_start: int
    slot_step: int
    slot_mask: int
    rq_depth: int
    sq_depth: int
    cq_depth: int
    big_depth: int
    chain_max: int
    big_last_bytes: int
    staging_bytes: int
    timeout_ms: int
    qp_type: str
    unsignaled_completions: int
    faults: int
    warm_send_leftovers: int
    warm_recv_leftover: int
    wire_loss: int
    post_failures: int
    ops: int
    big_gates: int
    big_chunks: int
    verify_blocks: int
    block_layers: int
    block_rows: int
    rank1_block_rows: int
    verify_window: str
    rank1_verify_window: str

    def of_rank(self, r: int) -> GateConfig:
        """Rank ``r``'s own configuration: rank 1's message cap, window, block rows and
        verify-window switch where set."""
        own = replace(self, **RANK1_SAME)
        if r == 0:
            return own
        return replace(own, **{name: getattr(self, name) if getattr(self, apart)
                               == RANK1_SAME[apart] else getattr(self, apart)
                               for name, apart in RANK1_OWN.items()})

    @property
    def hello(self) -> Hello:
        """What this configuration's rank tells its peer in the hello."""
        return Hello(self.window, self.max_msg)

    @property
    def warm_leftovers(self) -> int:
        """Warm-up leftover completions the fault model may hand one rank."""
        return self.warm_send_leftovers * (self.qp_type == "uc") + self.warm_recv_leftover

    @property
    def chunks(self) -> int:
        return -(-self.vec_bytes // self.max_msg)

    def chunk_len(self, k: int) -> int:
        return min(self.max_msg, self.vec_bytes - k * self.max_msg)

    def slot(self, seq: int) -> int:
        """In-slot (and out-slot) of gate ``seq`` (seq >= 1)."""
        if self.gates_per_token == 0:
            return (seq - 1) % self.n_slots
        ordinal = (seq - 1) % self.gates_per_token
        if self.slot_mask:
            return _nth_set_bit(self.slot_mask, ordinal)
        return self.slot_start + ordinal * self.slot_step

    def big_window(self, rq_depth: int) -> int:
        """Big-gate window for a granted receive depth: capped by big_depth and staging."""
        return max(1, min(rq_depth, self.big_depth, self.staging_bytes // self.max_msg))

    def big_chunk_len(self, k: int, chunks: int, batch: bool = False) -> int:
        """Bytes of chunk k of a big-gate transfer of ``chunks`` chunks (a big gate's, or with
        ``batch`` a batch gate's): whole chunks, the last one short by the transfer's
        remainder, as ds4 posts and checks them."""
        if k != chunks - 1:
            return self.max_msg
        if batch:
            return self.batch_bytes - (self.batch_chunks - 1) * self.max_msg
        return self.big_last_bytes or self.max_msg

    @property
    def batch_bytes(self) -> int:
        """Bytes a batch gate moves outside a verify window: every row's vector."""
        return self.block_rows * self.vec_bytes

    @property
    def batch_chunks(self) -> int:
        """Chunks of a batch gate's transfer, each at most one message."""
        return -(-self.batch_bytes // self.max_msg)

    @property
    def batch_path(self) -> bool:
        """A verify block runs as batch gates (DS4_TP_DISABLE_VERIFY_WINDOW set)."""
        return self.verify_window == "off"

    @property
    def block_wrs(self) -> int:
        """Work requests of one verify-block layer: a chain of every row's chunks."""
        return self.block_rows * self.chunks

    def big_send_depth(self) -> int:
        return min(self.sq_depth, self.big_depth)


def _nth_set_bit(mask: int, n: int) -> int:
    bit = 0
    while True:
        if mask >> bit & 1:
            if n == 0:
                return bit
            n -= 1
        bit += 1


def make_config(values: Mapping[str, Any]) -> GateConfig:
    """Build a GateConfig from typed values, refusing what the protocol refuses."""
    cfg = GateConfig(**values)
    for r, name, cap in ((0, "vec_bytes", "max_msg"), (1, "rank1_max_msg", "rank1_max_msg")):
        own = cfg.of_rank(r).max_msg
        if cfg.vec_bytes > 2 * own:
            raise ParamError(f"parameter {name}: gate vector {cfg.vec_bytes} bytes exceeds twice "
                             f"the driver's {own} message limit")
        if cfg.big_last_bytes > own:
            raise ParamError(f"parameter big_last_bytes: {cfg.big_last_bytes} is above {cap} "
                             f"{own}: a big gate's last chunk is at most one message")
    if cfg.slot_mask:
        if cfg.slot_mask.bit_count() != cfg.gates_per_token:
            raise ParamError(f"parameter slot_mask: popcount {cfg.slot_mask.bit_count()} is not "
                             f"gates_per_token {cfg.gates_per_token}")
        if cfg.slot_mask.bit_length() > cfg.n_slots:
            raise ParamError(f"parameter slot_mask: bit {cfg.slot_mask.bit_length() - 1} is at "
                             f"or above n_slots {cfg.n_slots}")
    elif cfg.gates_per_token:
        last = cfg.slot_start + (cfg.gates_per_token - 1) * cfg.slot_step
        if last >= cfg.n_slots:
            raise ParamError(f"parameter slot_start/slot_step: the schedule reaches slot {last}, "
                             f"at or above n_slots {cfg.n_slots}")
    return cfg
