"""The gate protocol's modes (spec/modes.py): its phases past decode gates, its queue pair
types, per-rank configurations and each fault."""

from __future__ import annotations

from verbspec.spec.gate.params import RANK1_SAME, GateConfig
from verbspec.spec.gate.steps import GateSpec as G
from verbspec.spec.modes import Mode, mode


def _per_rank(c: GateConfig) -> bool:
    return any(getattr(c, k) != v for k, v in RANK1_SAME.items())


def _big_above_chain(c: GateConfig) -> bool:
    return c.big_gates > 0 and c.big_window(c.rq_depth) > c.chain_max


def _faults(c: GateConfig) -> bool:
    return bool(c.faults)


def _failures(c: GateConfig) -> bool:
    return bool(c.faults and c.post_failures)


MODES: tuple[Mode, ...] = (
    mode("two-chunk vectors", lambda c: c.chunks > 1, G.do_gate_done),
    mode("drain and big gate", lambda c: c.big_gates > 0, G.do_big_window_done),
    mode("big-gate window above chain_max", _big_above_chain, G.do_big_post_recv),
    mode("verify blocks", lambda c: c.verify_blocks > 0, G.do_block_end),
    mode("UC queue pair", lambda c: c.qp_type == "uc", G.do_deliver),
    mode("RC queue pair", lambda c: c.qp_type == "rc", G.do_deliver),
    mode("per-rank configurations", _per_rank, G.do_setup),
    mode("fault: crash", _faults, G.do_crash),
    mode("fault: error completion", _faults, G.do_error_completion),
    mode("fault: warm-up leftover completion", lambda c: c.faults and c.warm_leftovers > 0,
         G.do_stray_completion),
    mode("fault: bad call", _faults, G.do_bad_call),
    mode("fault: timeout", _faults, G.do_timeout),
    mode("fault: peer gone", _faults, G.do_peer_gone),
    mode("fault: wire loss", lambda c: c.wire_loss > 0, G.do_lose),
    mode("fault: refused post", _failures, G.do_post_fail),
    mode("fault: failed poll", _failures, G.do_poll_fail),
)
