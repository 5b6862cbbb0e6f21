"""How short a run that drops a message can be under depth-mismatch: a lower bound on its
length, proved on the z3 model by induction.

bmc finds depth-mismatch's violation at the defaults only by random walks: rank 0 must send a
whole window of chain_max + 1 big chunks into rank 1's chain_max receives, a run far past what
breadth-first search reaches. Whether the trace found is a shortest one is settled here
instead, by a potential over the model's state:

- it is 0 in the initial state and no step raises it by more than 1, so a run of n steps ends
  in a state whose potential is at most n;
- it is at least L in every state where a message was dropped, so every such run has at least
  L steps, and a trace of L steps is a shortest one.

The potential counts steps no dropping run can do without: each rank's own steps in its
current big gate (setup, call, header, window, receive chains, barrier, send sub-batches),
the big chunks each rank transmitted and those delivered into each rank's window, and the drop
itself. Strengthening invariants (the model's, and those below) make it step by at most 1.

Runs are fault-free, and end (no step is taken from their last state) at the first drop and at
the first window of a mismatched big gate (one larger than the smaller window) that a rank
completes: past that the windows no longer pair up, and the invariants would have to describe
a desynchronised pair. The potential must be at least L there too; a completed window took
all its receives and sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import z3

from verbspec.proofs.gate.induction import induction
from verbspec.proofs.gate.lemmas import LEMMAS as MODEL_LEMMAS
from verbspec.proofs.gate.moves import action_move, initial
from verbspec.proofs.gate.parameters import domain, param_terms, params_of
from verbspec.proofs.gate.properties import Invariant, both
from verbspec.proofs.gate.terms import (
    conjuncts,
    consts,
    eph_in,
    fresh_choice,
    fresh_state,
    own_window,
    ph_in,
    umin,
    z64,
)
from verbspec.proofs.gate.vocabulary import (
    ACTIONS,
    BIG_BAR_READ,
    BIG_BAR_SEND,
    BIG_BEGIN,
    BIG_HDR_READ,
    BIG_HDR_SEND,
    BIG_OP,
    BIG_POST,
    BIG_XFER,
    DRAIN_POST,
    DRAIN_WAIT,
    INIT,
    Params,
    State,
)
from verbspec.proofs.solving import Solvers, query
from verbspec.spec.gate.variants import DEPTH_MISMATCH


def mismatched(prm: Params, k: z3.BitVecRef) -> z3.BoolRef:
    """A big gate of k chunks whose first windows differ between the ranks."""
    w0, w1 = own_window(prm, 0), own_window(prm, 1)
    return z3.And(w0 != w1, z3.UGT(k, umin(w0, w1)))


def run_ends(s: State, prm: Params) -> z3.BoolRef:
    """The states the runs end in: a message dropped, or a mismatched window completed."""
    return z3.Or(s.ghost.dropped, *(z3.And(mismatched(prm, rk.big_chunks), rk.big_base != 0)
                                    for rk in s.rank))


# a rank's own steps in a big gate, by phase, before its receive chains and send sub-batches:
# the call, the header written, read, (the drain), the window begun, the barrier written, read
STAGE = {BIG_HDR_SEND: 1, BIG_HDR_READ: 2, DRAIN_POST: 3, DRAIN_WAIT: 3, BIG_BEGIN: 3,
         BIG_POST: 4, BIG_BAR_SEND: 4, BIG_BAR_READ: 5, BIG_XFER: 6}


def _chains(prm: Params, n: z3.BitVecRef) -> z3.BitVecRef:
    """Posts of at most chain_max work requests each that n work requests took (n < 2^24):
    a shift where chain_max is a power of two, as it is in ds4 (cheaper to bit-blast)."""
    cm = z3.simplify(prm.chain_max)
    up = n + (cm - 1)
    if z3.is_bv_value(cm) and cm.as_long() & (cm.as_long() - 1) == 0:
        return z64(z3.LShR(up, cm.as_long().bit_length() - 1))
    return z64(z3.UDiv(up, cm))


def own_steps(s: State, prm: Params, r: int) -> z3.BitVecRef:
    me = s.rank[r]
    ph = me.phase
    stage = z3.BitVecVal(0, 64)
    for code, k in STAGE.items():
        stage = z3.If(ph == code, z3.BitVecVal(k, 64), stage)
    posted = ph_in(s, r, BIG_POST, BIG_BAR_SEND, BIG_BAR_READ, BIG_XFER)
    zero = z3.BitVecVal(0, 64)
    return z3.If(ph == INIT, zero,
                 1 + stage + z3.If(posted, _chains(prm, me.big_posted), zero)
                 + z3.If(ph == BIG_XFER, _chains(prm, me.big_sent), zero))


def potential_terms(s: State, prm: Params) -> list[z3.BitVecRef]:
    """The potential's summands (64 bits, each below 2^33)."""
    terms = [z3.If(s.ghost.dropped, z3.BitVecVal(1, 64), z3.BitVecVal(0, 64))]
    for r, me in enumerate(s.rank):
        # the rank's own steps; the big chunks transmitted from its window's sends, and those
        # landed in its window
        terms += [own_steps(s, prm, r), z64(me.big_sent) - z64(me.big_sends_queued),
                  z64(me.big_landed)]
    return terms


def rise(before: Sequence[z3.BitVecRef], after: Sequence[z3.BitVecRef]) -> z3.BitVecRef:
    """How much a step raises the potential (signed), summing only the summands it changes:
    a solver does not have to see equal summands cancel out of two long sums."""
    return sum((b - a for a, b in zip(before, after, strict=True) if not z3.eq(a, b)),
               z3.BitVecVal(0, 64))


def _sends_counted(s: State, prm: Params, r: int) -> z3.BoolRef:
    """A window's sends still queued are among those it posted."""
    return z3.ULE(s.rank[r].big_sends_queued, s.rank[r].big_sent)


def _mismatch_unpassed(s: State, prm: Params, r: int) -> z3.BoolRef:
    """While a rank is in a mismatched big gate, the peer has not finished it (that would
    have completed a window of it: the run ends there)."""
    p = 1 - r
    return z3.Implies(z3.And(eph_in(s, r, *BIG_OP), mismatched(prm, s.rank[r].big_chunks)),
                      s.rank[p].ops_done != s.rank[r].ops_done + 1)


def _until_end(f: Invariant) -> Invariant:
    """A fact of every state before the run ends (the last state may break it)."""
    return lambda s, prm: z3.Or(run_ends(s, prm), f(s, prm))


# the model's strengthening invariants and this proof's own, each claimed of every state before
# the run ends (the model's properties are not needed: without them all are inductive still)
FACTS: dict[str, Invariant] = {
    **MODEL_LEMMAS,
    "sends_counted": both(_sends_counted),
    "mismatch_unpassed": both(_mismatch_unpassed),
}
LEMMAS = {n: _until_end(f) for n, f in FACTS.items()}


def fault_free(prm: Params) -> z3.BoolRef:
    return z3.And(domain(prm), z3.Not(prm.faults))


def _live(s: State, prm: Params) -> z3.BoolRef:
    return z3.Not(run_ends(s, prm))


def invariants(prm: Params, chunks: int, solvers: Solvers,
               progress: Callable[[str], None] | None = None) -> list[str]:
    """The largest subset of LEMMAS inductive on the runs up to their end (Houdini)."""
    keep = list(LEMMAS)
    while True:
        obs = induction(prm, fault_free, keep, (chunks,), (0, 1), False, solvers,
                           table=LEMMAS, live=_live)
        bad = [o for o in obs if o.verdict != "proved"]
        for o in bad:
            if progress:
                progress(f"{o.name}: not inductive here, dropped")
        if not bad:
            return keep
        keep = [n for n in keep if n not in {o.name for o in bad}]


def potential_steps(prm: Params, keep: Sequence[str], chunks: int, steps: int,
                    solvers: Solvers) -> list[str]:
    """The initial state's potential is 0; a step between states before the end raises it by
    at most 1; a step into a state the run ends in starts from potential >= steps - 1. What
    fails (the step and its counterexample)."""
    s, ch = fresh_state("s"), fresh_choice("s")
    sv = s.as_dict()
    q = replace(prm, chunks=z3.BitVecVal(chunks, 64))
    # the pre-state is before the end, where the facts hold as they are: each conjunct apart,
    # so that a query can take only those over the variables it asks about
    facts = [(c, consts(c)) for n in keep for c in conjuncts(FACTS[n](s, q))]
    terms = [z3.simplify(x) for x in potential_terms(s, q)]
    phi = sum(terms, z3.BitVecVal(0, 64))
    ends = run_ends(s, q)
    asks: dict[tuple, tuple[list[z3.BoolRef], z3.BoolRef]] = {
        ("initial",): ([initial(s)], phi != 0)}
    for a in ACTIONS:
        for r in (0, 1):
            m = action_move(a, r, s, q, ch)
            moved = [(sv[k], v) for k, v in m.updates.items() if not z3.eq(v, sv[k])]
            after = [z3.simplify(z3.substitute(x, *moved)) if moved else x for x in terms]
            ends_after = z3.substitute(ends, *moved) if moved else ends
            ok = z3.If(ends_after, z3.UGE(phi + 1, steps),
                       rise(terms, after) <= 1)
            asks[(a, r)] = ([z3.Not(ends), m.guard], z3.Not(ok))
    # first with the facts over the variables the step and the goal mention, then (for what
    # that did not settle) with all of them
    for narrow in (True, False):
        keys = list(asks)
        queries = []
        for k in keys:
            hyp, goal = asks[k]
            used = set().union(*(consts(x) for x in (*hyp, goal)))
            taken = [c for c, names in facts if not narrow or names & used]
            queries.append(query(k, fault_free(q), *taken, *hyp, goal))
        answers = solvers.run(queries)
        asks = {a.key: asks[a.key] for a in answers if a.result != "unsat"}
        if not asks:
            return []
    return [f"{'/'.join(map(str, a.key))}: {a.result} {_show(a.model)}" for a in answers
            if a.result != "unsat"]


def _show(model: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(model.items()) if "@s" in k)[:1500]


@dataclass(frozen=True)
class Bound:
    proved: tuple[int, ...]     # lengths L asked about with: no dropping run is shorter
    failed: dict[int, str]      # the others: the step that fails, with its counterexample
    invariants: int             # strengthening invariants the induction kept
    seconds: float


def model_params(values: Mapping[str, Any], variants: Sequence[str]) -> tuple[Params, int]:
    """The model's parameters for these values, fault-free and with the workload symbolic;
    and the chunks per gate."""
    from verbspec.spec.gate.system import build

    cfg = build(values, variants).params
    prm = replace(param_terms(params_of(cfg, variants)), ops=z3.BitVec("ops", 64),
                  faults=z3.BoolVal(False))
    return prm, cfg.chunks


def lower_bound(values: Mapping[str, Any], variants: Sequence[str], lengths: Sequence[int],
                progress: Callable[[str], None] | None = None) -> Bound:
    """For each length L, whether every fault-free run of the model that drops a message has
    at least L steps (at these parameters, for every workload)."""
    t0 = time.perf_counter()
    prm, chunks = model_params(values, variants)
    failed: dict[int, str] = {}
    with Solvers() as pool:
        keep = invariants(prm, chunks, pool, progress)
        for n in lengths:
            bad = potential_steps(prm, keep, chunks, n, pool)
            if bad:
                failed[n] = "; ".join(bad)
    return Bound(tuple(n for n in lengths if n not in failed), failed, len(keep),
                 time.perf_counter() - t0)


def shortest_run(values: Mapping[str, Any], variants: Sequence[str], invariant: str,
                 steps: int) -> str | None:
    """Why no fault-free run that breaks ``invariant`` has fewer than ``steps`` steps, where
    this proof applies (no_silent_drop under depth-mismatch, over UC without wire loss) and
    goes through; else None."""
    from verbspec.spec.gate.system import build

    cfg = build(values, variants).params
    if (invariant != "no_silent_drop" or not DEPTH_MISMATCH.on(variants)
            or cfg.qp_type != "uc" or cfg.wire_loss):
        return None
    b = lower_bound(values, variants, [steps])
    if not b.proved:
        return None
    return (f"no fault-free run that drops a message is shorter (z3 induction on the model, "
            f"proofs/gate/bound.py: a potential 0 initially, raised by at most 1 a step, is at "
            f"least {steps - 1} wherever the next step drops one; {b.invariants} strengthening "
            f"invariants, {b.seconds:.0f} s)")
