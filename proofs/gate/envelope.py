"""Proofs over the envelope, the parameters over which the invariants are proved (symbolic
window, chunks, depths, slot period, workloads with drains and big gates); for each condition of
the envelope, the violation just outside it; and the limits of the model's transport (wire
loss, RC) as the executable spec shows them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import z3

from verbspec.proofs.gate.abstraction import spec_counterexample
from verbspec.proofs.gate.bmc import ENVELOPE_RUNGS, NoAnswer, bmc, replay_on_spec
from verbspec.proofs.gate.induction import houdini
from verbspec.proofs.gate.lemmas import LEMMAS
from verbspec.proofs.gate.parameters import domain, param_terms, params_of
from verbspec.proofs.gate.properties import CONSEQUENCES, PROPERTIES
from verbspec.proofs.gate.terms import big_window, fresh_params, times_c, umax, wc32, z64
from verbspec.proofs.gate.vocabulary import VARIANT_FLAGS, Params
from verbspec.proofs.solving import Limit as SolverLimit
from verbspec.proofs.solving import limit_of
from verbspec.spec.lts import Trace


@dataclass(frozen=True)
class Condition:
    """One assumption of the envelope, with the property that fails just outside it."""

    name: str
    holds: Callable[[Params], z3.BoolRef]
    outside: Callable[[Params], z3.BoolRef]     # the boundary point just outside
    breaks: str
    example: dict[str, int]     # executable-spec parameters just outside, for replay
    max_faults: int = 0         # fault actions the shortest run just outside may take
    max_states: int = 600_000   # breadth-first budget for that run


def _c(prm: Params, k: int) -> z3.BitVecRef:
    return z3.Extract(31, 0, times_c(prm, z3.BitVecVal(k, 64)))


def _drain_cq(q: Params) -> z3.BitVecRef:
    """A drain's completions: window*chunks dummies each way, and the last gate's sends."""
    return 2 * wc32(q) + _c(q, 1)


def _big_cq(q: Params) -> z3.BitVecRef:
    """A full big-gate window's completions: its receives and its sends."""
    return 2 * big_window(q, q.rq_depth)


def _cq_need(q: Params) -> z3.BitVecRef:
    """The CQ entries a fault-free run can fill: 4*chunks with decode gates only (the sends
    of two gates and the arrivals of two more); with big gates, also a drain and a window."""
    return z3.If(q.big_gates, umax(_c(q, 4), umax(_drain_cq(q), _big_cq(q))), _c(q, 4))


LEFTOVERS = 2


def _spare(q: Params) -> z3.BitVecRef:
    """What faults can add to a full CQ: the warm-up leftovers and one error completion."""
    return z3.ZeroExt(24, q.leftovers) + 1


def _with_big(q: Params, claim: z3.BoolRef) -> z3.BoolRef:
    return z3.Implies(q.big_gates, claim)


def _outside_big(q: Params, claim: z3.BoolRef) -> z3.BoolRef:
    return z3.And(q.big_gates, claim)


# the big-gate examples keep big-gate windows small (big_depth 2 or 4), so their runs are short
CONDITIONS: tuple[Condition, ...] = (
    Condition("window >= 2", lambda q: z3.UGE(q.window, 2), lambda q: q.window == 1,
              "no_silent_drop", {"window": 1}),
    Condition("rq_depth >= window*chunks",
              lambda q: z3.UGE(z64(q.rq_depth), times_c(q, q.window)),
              lambda q: z64(q.rq_depth) + 1 == times_c(q, q.window),
              "queue_bounds", {"rq_depth": 31}),
    Condition("sq_depth >= 2*chunks", lambda q: z3.UGE(q.sq_depth, _c(q, 2)),
              lambda q: q.sq_depth + 1 == _c(q, 2), "queue_bounds", {"sq_depth": 3}),
    # a drain posts its dummies behind nothing: the header exchange before it means the
    # peer has the last gate, so its sends left the send queue
    Condition("sq_depth >= window*chunks with big gates",
              lambda q: _with_big(q, z3.UGE(q.sq_depth, wc32(q))),
              lambda q: _outside_big(q, q.sq_depth + 1 == wc32(q)), "queue_bounds",
              {"window": 3, "vec_bytes": 16384, "sq_depth": 2, "big_gates": 1,
               "big_depth": 2}),
    Condition("cq_depth >= 4*chunks", lambda q: z3.UGE(q.cq_depth, _c(q, 4)),
              lambda q: q.cq_depth + 1 == _c(q, 4), "queue_bounds",
              {"window": 2, "cq_depth": 7}),
    Condition("cq_depth >= 2*window*chunks + chunks with big gates (a drain)",
              lambda q: _with_big(q, z3.UGE(q.cq_depth, _drain_cq(q))),
              lambda q: _outside_big(q, q.cq_depth + 1 == _drain_cq(q)), "queue_bounds",
              {"window": 3, "vec_bytes": 16384, "cq_depth": 6, "big_gates": 1,
               "big_depth": 2}),
    Condition("cq_depth >= 2*big window with big gates (big window = min(rq_depth, big_depth, "
              "staging_bytes/max_msg))",
              lambda q: _with_big(q, z3.UGE(q.cq_depth, _big_cq(q))),
              lambda q: _outside_big(q, q.cq_depth + 1 == _big_cq(q)), "queue_bounds",
              {"window": 2, "vec_bytes": 16384, "cq_depth": 7, "big_gates": 1,
               "big_depth": 4}),
    # the warm-up leftovers (warm_send_leftovers over UC, plus warm_recv_leftover) and an
    # injected error completion on top of a full CQ; at the example's two leftovers the
    # shortest run needs three faults, hence the larger breadth-first budget
    Condition("cq_depth >= leftovers + 1 + the largest of the three above with faults",
              lambda q: z3.Implies(q.faults, z3.UGE(q.cq_depth, _cq_need(q) + _spare(q))),
              lambda q: z3.And(q.faults, q.cq_depth + 1 == _cq_need(q) + _spare(q)),
              "queue_bounds", {"window": 2, "vec_bytes": 16384, "cq_depth": 6, "faults": 1},
              max_faults=3, max_states=1_200_000),
    Condition("chain_max >= chunks", lambda q: z3.UGE(z64(q.chain_max), q.chunks),
              lambda q: z64(q.chain_max) + 1 == q.chunks, "queue_bounds", {"chain_max": 1}),
    Condition("slot period >= 2 (gates_per_token >= 2, or 0 with n_slots >= 2)",
              lambda q: z3.UGE(q.slot_period, 2), lambda q: q.slot_period == 1, "slot_exclusive",
              {"gates_per_token": 1}),
)


def envelope(prm: Params, *, window_max: int | None = 256, skip: str | None = None
           ) -> z3.BoolRef:
    conds = [c.holds(prm) for c in CONDITIONS if c.name != skip]
    conds += [z3.Not(getattr(prm, f)) for f in VARIANT_FLAGS]          # the base protocol
    # the default fault model's leftovers: with their number symbolic too, the induction's
    # queries over the CQ's room outgrow the solver's time limit
    conds.append(prm.leftovers == LEFTOVERS)
    if window_max is not None:
        conds.append(z3.ULE(prm.window, window_max))
    return z3.And(domain(prm), *conds)


def envelope_text(window_max: int | None = 256) -> str:
    w = f"2 <= window <= {window_max}" if window_max else "window >= 2"
    rest = ", ".join(c.name for c in CONDITIONS[1:])
    return (f"{w}, chunks in {{1, 2}}, {rest}, any workload of decode gates, drains and big "
            f"gates (ops < 2^61), faults 0 or 1 with {LEFTOVERS} warm-up leftovers (one send, "
            f"one receive: the defaults) (UC without wire loss, the base protocol)")


@dataclass(frozen=True)
class EnvelopeRow:
    """A proof over the envelope, or, for a condition of it, the violation just outside."""

    invariant: str
    envelope: str
    verdict: str
    seconds: float
    counterexample: str = ""    # for a necessary condition: the run just outside it
    condition: str = ""         # the condition this row shows necessary ("" for a proof row)
    trace: Trace | None = None  # the executable spec's shortest run just outside
    limit: bool = False         # a row of LIMITS: a transport outside the model
    want: str = "proved"        # the verdict that settles the row ("violated" outside)

    @property
    def settled(self) -> bool:
        return self.verdict == self.want


@dataclass(frozen=True)
class Limit:
    """A transport outside the model's scope (wire loss, RC), checked on the executable spec
    alone: a shortest run to the invariant it breaks, or, where it breaks none, the fixpoint
    of one small instance (every reachable state, runs of at most ``max_faults`` faults)."""

    name: str
    example: dict[str, int | str]
    breaks: str | None
    max_faults: int = 1
    max_states: int = 1_000_000


LIMITS: tuple[Limit, ...] = (
    # UC has no recovery: a lost chunk shifts the pairing of every later chunk
    Limit("wire loss over UC", {"wire_loss": 1, "faults": 1, "window": 2, "big_gates": 0},
          "chunk_alignment"),
    # RC retransmits, and when its retries run out fails the send, flushes what follows and
    # the rank fails with a completion error: nothing lands out of place
    Limit("wire loss over RC (decode gates, drains and big gates)",
          {"qp_type": "rc", "wire_loss": 1, "faults": 1, "window": 2, "vec_bytes": 16384,
           "ops": 2, "big_gates": 1, "big_depth": 2, "chain_max": 2}, None),
)


def limit_rows(progress: Callable[[str], None] | None = None,
               limits: Sequence[Limit] = LIMITS) -> list[EnvelopeRow]:
    """Each limit: the spec's shortest run to the invariant it breaks (with its trace), or
    the fixpoint of its instance (proved for that instance, or the first violation)."""
    from verbspec.proofs.search import bounded_search
    from verbspec.spec.gate.system import build

    rows = []
    for lim in limits:
        system = build(lim.example)
        where = f"{lim.name}: {lim.example}"
        res = bounded_search(system, depth=1 << 30, target=lim.breaks, faults=True,
                             max_faults=lim.max_faults, max_states=lim.max_states)
        if res.violation is not None:
            bad = res.violation
            verdict = "violated"
            note = (f"spec: shortest run with at most {lim.max_faults} fault, "
                    f"{len(bad.trace) - 1} moves: {bad.message} (outside the model)")
            invariant = bad.invariant
        else:
            verdict = "proved" if res.exhausted else "inconclusive"
            note = (f"spec: every invariant in all {res.states} reachable states of the "
                    f"instance (fixpoint at depth {res.depth}, runs of at most "
                    f"{lim.max_faults} fault)" if res.exhausted else
                    f"spec: no violation to depth {res.depth} ({res.states} states, budget "
                    f"reached)")
            invariant = "every invariant"
        rows.append(EnvelopeRow(invariant, where, verdict, res.seconds, note, lim.name,
                              res.trace, limit=True,
                              want="violated" if lim.breaks else "proved"))
        if progress:
            progress(f"{lim.name}: {verdict}")
    return rows


PARTS = ("proofs", "outside", "limits")


def envelope_table(*, window_max: int | None = 256, parts: Sequence[str] = PARTS,
                   progress: Callable[[str], None] | None = None,
                   solver_limit: int | None = None) -> list[EnvelopeRow]:
    """The table's rows, in the order of ``parts``: ``proofs``, every invariant over the whole
    envelope (proof_rows); ``outside``, each condition shown necessary just outside it
    (outside_rows); ``limits``, the rows of LIMITS (limit_rows). ``solver_limit`` is z3's
    resource limit per query (None: RLIMIT)."""
    limit = limit_of(solver_limit)
    make = {"proofs": lambda: proof_rows(window_max, progress, limit),
            "outside": lambda: outside_rows(progress, limit=limit),
            "limits": lambda: limit_rows(progress)}
    return [row for part in parts for row in make[part]()]


def proof_rows(window_max: int | None = 256, progress: Callable[[str], None] | None = None,
               limit: SolverLimit | None = None) -> list[EnvelopeRow]:
    """Every invariant over the whole envelope (symbolic window, chunks, depths, slot period,
    workloads with or without big gates)."""
    # the envelope is the base protocol (big gates or not)
    prm = replace(fresh_params(), depth_mismatch=z3.BoolVal(False))
    text = envelope_text(window_max)
    found = houdini(prm, lambda q: envelope(q, window_max=window_max), (1, 2), limit,
                    progress=progress)
    return [EnvelopeRow(n, text, found[n].verdict, found[n].seconds)
            for n in (*PROPERTIES, *CONSEQUENCES, *LEMMAS)]


def outside_rows(progress: Callable[[str], None] | None = None,
                 conditions: Sequence[Condition] = CONDITIONS, limit: SolverLimit | None = None
                 ) -> list[EnvelopeRow]:
    """For each condition of the envelope, a counterexample just outside it: the shortest run
    of the executable spec (breadth-first) that breaks the property the condition guards,
    with every step checked against the model; and the model's own BMC, to the last rung
    where the spec's run is short enough for it (the model's run replayed on the spec), else
    to the first (the model has no shorter run either)."""
    from verbspec.spec.gate.system import build

    rows = []
    for cond in conditions:
        t0 = time.perf_counter()
        where = f"outside: not ({cond.name}), e.g. {cond.example}"
        values = {"faults": 0, "big_gates": 0, **cond.example}
        run = spec_counterexample(values, cond.breaks, depth=60, max_states=cond.max_states,
                                  max_faults=cond.max_faults)
        notes, verdict = [], "inconclusive"
        if run is not None:
            kind = (f"shortest run with at most {cond.max_faults} faults"
                    if values["faults"] else "shortest fault-free run")
            notes.append(f"spec: {kind}, {run.moves} moves: {run.trace.message}; model "
                         f"admits every step: {run.admitted}")
            verdict = "violated" if run.admitted else "inconclusive"
        system = build(values)
        point = param_terms(params_of(system.params))
        # a run past the last rung cannot be found by the model's BMC: a shallow rung still
        # checks the model has no shorter run than the spec's
        rungs = (ENVELOPE_RUNGS if run is None or run.moves <= ENVELOPE_RUNGS[-1]
                 else ENVELOPE_RUNGS[:1])
        ce = bmc(point, domain(point), cond.breaks, rungs, limit)
        if isinstance(ce, NoAnswer):
            notes.append(f"model BMC: no answer at unrolling {ce.bound} ({ce.reason})")
        elif ce is not None:
            hit = replay_on_spec(system, ce.moves)
            notes.append(f"model BMC: run of {ce.depth} moves (unrolling {ce.bound}), on the "
                         f"spec: {hit[1] if hit else 'not confirmed'}")
        else:
            notes.append(f"model BMC: no run of <= {rungs[-1]} steps")
        rows.append(EnvelopeRow(cond.breaks, where, verdict, time.perf_counter() - t0,
                              "; ".join(notes), cond.name, run.trace if run else None,
                              want="violated"))
        if progress:
            progress(f"{cond.name}: {verdict}")
    return rows
