"""The model's parameters for a configuration of the spec, and the domain every parameter
value lies in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields

import z3

from verbspec.proofs.gate.vocabulary import ENCODED_VARIANTS, OPS_LIMIT, VARIANT_FLAGS, Params
from verbspec.spec.gate.params import MAX_CQ, MAX_QUEUE, PARAMS, GateConfig


def _upper(name: str) -> int:
    """The spec's upper bound on parameter ``name``."""
    return next(p.hi for p in PARAMS if p.name == name)


BIG_DEPTH_MAX = _upper("big_depth")
LEFTOVERS_MAX = _upper("warm_send_leftovers") + _upper("warm_recv_leftover")

DOMAIN = ("1 <= chunks <= 2, 1 <= window <= 2^20, receive and send depths and chain_max "
          "<= 2^15, cq_depth <= 2^22, big-gate window cap and send depth <= 256, "
          f"1 <= ops < 2^61, warm-up leftovers <= {LEFTOVERS_MAX}")


def domain(prm: Params) -> z3.BoolRef:
    """What every parameter value satisfies: the spec's own bounds (spec/gate/params.py:
    MAX_QUEUE, MAX_CQ, big_depth <= 256, the warm-up leftovers), and sizes the model
    assumes."""
    bounds = ((prm.rq_depth, MAX_QUEUE), (prm.sq_depth, MAX_QUEUE), (prm.chain_max, MAX_QUEUE),
              (prm.cq_depth, MAX_CQ), (prm.big_cap, BIG_DEPTH_MAX),
              (prm.big_send_depth, BIG_DEPTH_MAX))
    return z3.And(z3.Or(prm.chunks == 1, prm.chunks == 2), z3.UGE(prm.window, 1),
                  z3.ULE(prm.window, 1 << 20), z3.UGE(prm.slot_period, 1),
                  z3.ULE(prm.slot_period, 1 << 32),
                  z3.UGE(prm.ops, 1), z3.ULT(prm.ops, OPS_LIMIT),
                  *(z3.And(z3.UGE(d, 1), z3.ULE(d, hi)) for d, hi in bounds),
                  z3.ULE(prm.big_send_depth, prm.sq_depth),
                  z3.ULE(prm.leftovers, LEFTOVERS_MAX))


def slot_period(cfg: GateConfig) -> int:
    """Gates between two uses of one slot (the schedule is periodic with this period)."""
    n = cfg.gates_per_token or cfg.n_slots
    first = [cfg.slot(s) for s in range(1, n + 1)]
    for period in range(1, n + 1):
        if all(first[i] == first[i % period] for i in range(n)) and \
                len(set(first[:period])) == period:
            return period
    return n


def params_of(cfg: GateConfig, variants: Iterable[str] = ()) -> Params:
    """The parameter values of a configuration (with these variants)."""
    flags = {ENCODED_VARIANTS[v] for v in variants if ENCODED_VARIANTS.get(v)}
    return Params(window=cfg.window, chunks=cfg.chunks, slot_period=slot_period(cfg),
                  rq_depth=cfg.rq_depth, sq_depth=cfg.sq_depth, cq_depth=cfg.cq_depth,
                  chain_max=cfg.chain_max, ops=cfg.ops, big_gates=cfg.big_gates,
                  big_cap=min(cfg.big_depth, max(1, cfg.staging_bytes // cfg.max_msg)),
                  big_send_depth=cfg.big_send_depth(), faults=cfg.faults,
                  leftovers=cfg.warm_leftovers,
                  **{f: int(f in flags) for f in VARIANT_FLAGS})


def param_terms(values: Params) -> Params:
    """Parameter values as z3 constants."""
    return Params(**{f.name: z3.BoolVal(bool(getattr(values, f.name))) if f.metadata["width"] == 0
                     else z3.BitVecVal(getattr(values, f.name), f.metadata["width"])
                     for f in fields(Params)})
