"""The induction prover of the gate model: base and consecution of every invariant as
independent z3 queries (run on every core, see proofs/solving.py), Houdini's largest inductive
subset, and ``prove``, the entry point for one configuration of the spec."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import z3

from verbspec.proofs.gate import refinement
from verbspec.proofs.gate.abstraction import spec_counterexample
from verbspec.proofs.gate.lemmas import ALL_INVARIANTS, LEMMAS, TACTIC, quiet_pairs
from verbspec.proofs.gate.moves import (
    action_move,
    initial,
    last_window,
    move,
    script_recorded,
)
from verbspec.proofs.gate.parameters import domain, param_terms, params_of
from verbspec.proofs.gate.properties import CONSEQUENCES, Invariant
from verbspec.proofs.gate.terms import (
    conjuncts,
    consts,
    fresh_choice,
    fresh_state,
    is_var,
)
from verbspec.proofs.gate.vocabulary import (
    ACTIONS,
    BIG_SEND_STEP,
    BIG_WINDOW_DONE_STEP,
    CALL_BIG_STEP,
    CALL_GATE_STEP,
    DELIVER_STEP,
    ENCODED_VARIANTS,
    GATE_SEND_STEP,
    PHASES,
    REAP,
    REAP_STEP,
    Params,
    State,
)
from verbspec.proofs.gate.widening import post_state, widened
from verbspec.proofs.report import DRIFTED, Obligation, Result
from verbspec.proofs.solving import Answer, Limit, Solvers, limit_of, query
from verbspec.proofs.traces import save_counterexample
from verbspec.spec.gate.params import RANK1_OWN, GateConfig
from verbspec.spec.gate.variants import NO_SEQ_CHECK, SIGNAL_LAST_ONLY


def _valid(claim: z3.BoolRef, limit: Limit) -> bool:
    solver = z3.Solver()
    limit.apply(solver)
    solver.add(z3.Not(claim))
    return solver.check() == z3.unsat


def rank_symmetric(prm: Params, limit: Limit | None = None) -> bool:
    """The model is symmetric in the ranks: every invariant gives the same verdict on a state
    and on its mirror, and rank 1's moves are rank 0's on mirrored states. Then consecution
    needs checking for rank 0's moves only (a rank-1 step is a mirrored rank-0 step)."""
    s, t, ch = fresh_state("s"), fresh_state("t"), fresh_choice("s")
    ms, mt, mch = s.swapped(), t.swapped(), ch.swapped()
    limit = limit or Limit()
    for inv in (*ALL_INVARIANTS.values(), *CONSEQUENCES.values()):
        if not _valid(inv(s, prm) == inv(ms, prm), limit):
            return False
    return all(_valid(move(a, 1, s, t, prm, ch) == move(a, 0, ms, mt, prm, mch), limit)
               for a in ACTIONS)


def _values_text(values: Mapping[str, Any], known: Iterable[z3.ExprRef],
                 s: Mapping[str, z3.ExprRef], t: Mapping[str, z3.ExprRef] | None = None) -> str:
    """A counterexample's states, from a model's values (constants it leaves free are 0)."""
    pairs = []
    for c in known:
        v = values.get(c.decl().name(), False if z3.is_bool(c) else 0)
        pairs.append((c, z3.BoolVal(v) if z3.is_bool(c) else z3.BitVecVal(v, c.size())))

    def show(st: Mapping[str, z3.ExprRef]) -> str:
        parts = []
        for k, v in st.items():
            val = z3.simplify(z3.substitute(v, *pairs))
            if z3.is_true(val) or (not z3.is_bool(val) and val.as_long() != 0):
                parts.append(f"{k}={val}")
        return " ".join(parts)

    text = f"pre: {show(s)}"
    if t is not None:
        text += f"; post: {show(t)}"
    return text


def _free(*records: Any) -> list[z3.ExprRef]:
    """The variables of these records (State, Choices, Params)."""
    return [v for rec in records for _, v in rec.items() if is_var(v)]


# Consecution asks one query per (C, action) for all the strengthening invariants the action
# touches together: cheaper than one each, except for these actions, where a query per lemma
# is cheaper: reap, deliver and call_big split over kinds of message and completion, and the
# two send moves touch most of the lemmas at once (see docs/benchmarks.md, "Per query").
SPLIT_ACTIONS = (REAP_STEP, DELIVER_STEP, CALL_BIG_STEP, GATE_SEND_STEP, BIG_SEND_STEP)

Case = tuple[str, z3.BoolRef]


@dataclass(frozen=True)
class CaseSplit:
    """Consecution of an action asked case by case for some invariants: one query per case,
    with the case's guard among its hypotheses. The move's guard implies that one of the
    cases holds (checked before any query is asked, see :func:`_cases`), so together the
    cases' queries are the action's."""

    cases: Callable[[State, int], list[Case]]
    invariants: frozenset[str]      # a query about any of these is split


def _reap_cases(s: State, r: int) -> list[Case]:
    """By the phase polled in: each has its own poll batch (a constant) and accounting."""
    return [(f"in {PHASES[p]}", s.rank[r].phase == p) for p in REAP]


def _call_gate_cases(s: State, r: int) -> list[Case]:
    """The gate's op already in the script (the peer called it first), or recorded now."""
    known = script_recorded(s, r)
    return [("recorded", known), ("recording", z3.Not(known))]


def _window_done_cases(s: State, r: int) -> list[Case]:
    """The big gate's last window (the op is done) or an earlier one."""
    last = last_window(s, r)
    return [("last window", last), ("earlier window", z3.Not(last))]


# The queries that cost less case by case than whole (docs/benchmarks.md, "Per query"):
# reap's big_window_shape, counters_exact and completions_behind (its other invariants cost
# more so), call_gate's, and big_window_done's strengthening invariants (its shared query).
CASES: dict[str, CaseSplit] = {
    REAP_STEP: CaseSplit(_reap_cases, frozenset({"big_window_shape", "counters_exact",
                                                 "completions_behind"})),
    CALL_GATE_STEP: CaseSplit(_call_gate_cases, frozenset(ALL_INVARIANTS)),
    BIG_WINDOW_DONE_STEP: CaseSplit(_window_done_cases, frozenset(LEMMAS)),
}


def _cases(a: str, s: State, r: int, guard: z3.BoolRef) -> list[Case]:
    """The cases consecution of action a by rank r is asked in; raises if the move's guard
    does not imply that one of them holds."""
    cases = CASES[a].cases(s, r)
    if not _valid(z3.Implies(guard, z3.Or([c for _, c in cases])), Limit()):
        raise AssertionError(f"the cases of {a}({r}) do not cover its guard")
    return cases


@contextmanager
def _pool(solvers: Solvers | None) -> Iterator[Solvers]:
    """The caller's worker pool, or one of our own (one worker per core) while in use."""
    if solvers is not None:
        yield solvers
        return
    with Solvers() as pool:
        yield pool


def _quiet_sub(s: State, quiet: bool, names: Iterable[str]
               ) -> Callable[[z3.ExprRef], z3.ExprRef]:
    """With decode_only among the invariants (proved on its own first, see houdini()), a
    decode-only workload's big-gate variables are zero: substituting them shrinks every
    query."""
    zero = quiet_pairs(s) if quiet and "decode_only" in names else []
    if not zero:
        return lambda x: x
    return lambda x: z3.substitute(x, *zero)


def _tactic(group: tuple[str, ...]) -> str:
    """How a query about these invariants is solved: an invariant's own tactic when it is
    asked alone."""
    return TACTIC.get(group[0], "blast") if len(group) == 1 else "blast"


def induction(prm: Params, assume: Callable[[Params], z3.BoolRef],
              names: Iterable[str] | None = None, chunks: Iterable[int] = (1, 2),
              ranks: Iterable[int] = (0, 1), quiet: bool = False,
              solvers: Solvers | None = None,
              table: Mapping[str, Invariant] | None = None,
              live: Invariant | None = None) -> list[Obligation]:
    """Base and consecution of every named invariant, each relative to the named ones only
    (their conjunction is what is shown inductive). With ``quiet`` (for a decode-only
    workload whose decode_only lemma is proved on its own) the big-gate variables are taken
    as zero. ``table`` names the invariants instead of ALL_INVARIANTS (all of them
    strengthening invariants); with ``live``, steps are taken only from the states it admits
    (the runs end in the others).

    Consecution is asked per (C, action, moving rank): C is 1 or 2 (fixing it turns x*C and
    x/C into shifts); ``ranks`` limits the moving rank (see :func:`rank_symmetric`). The
    post-state is the move's effect substituted into the invariant's conjuncts; a conjunct
    over variables the move leaves alone is unchanged, so it is its own hypothesis and stays
    out of the goal (an invariant the move leaves alone needs no query at all). A 32-bit
    counter the move steps is widened there (see widening.post_state). Each property gets a query
    of its own; the strengthening invariants share one (but for SPLIT_ACTIONS), asked again
    one by one if it fails, to find which. The queries CASES names are asked once per case of
    the move."""
    table = table or ALL_INVARIANTS
    shared = LEMMAS if table is ALL_INVARIANTS else table
    names = list(table if names is None else names)
    s, ch = fresh_state("s"), fresh_choice("s")
    sv = s.as_dict()
    sub = _quiet_sub(s, quiet, names)

    # a query: (invariants, "base" | "consecution", via, C) -> hypotheses, goal per invariant
    Batch = dict[tuple, tuple[list[z3.BoolRef], dict[str, z3.BoolRef]]]
    posts: dict[tuple[int, str], Mapping[str, z3.ExprRef] | None] = {}

    def batches() -> Iterator[Batch]:
        """The queries, a move's at a time."""
        for c in chunks:
            q = replace(prm, chunks=z3.BitVecVal(c, 64))
            inv_s = {n: sub(table[n](s, q)) for n in names}
            parts = {n: [(p, consts(p)) for p in conjuncts(inv_s[n])] for n in names}
            posts[(c, "initial")] = None
            yield {((n,), "base", "initial", c): ([assume(q), initial(s)], {n: inv_s[n]})
                   for n in names}
            for a in ACTIONS:
                for r in ranks:
                    todo: Batch = {}
                    m = action_move(a, r, s, q, ch)
                    moved = [(sv[k], sub(v)) for k, v in m.updates.items()
                             if not z3.eq(v, sv[k])]
                    changed = {x.decl().name() for x, _ in moved}
                    post = {k: m.updates.get(k, v) for k, v in sv.items()}
                    hyp = [assume(q), *inv_s.values(), sub(m.guard)]
                    if live is not None:
                        hyp.append(sub(live(s, q)))
                    wide = widened(moved)
                    # a conjunct over variables the move leaves alone is its own hypothesis
                    goal = {n: z3.And([post_state(p, moved, wide) for p, used in parts[n]
                                       if used & changed]) for n in names}
                    goal = {n: g for n, g in goal.items() if g.num_args()}
                    together = [n for n in goal if n in shared and a not in SPLIT_ACTIONS]
                    groups = [tuple(together)] if together else []
                    groups += [(n,) for n in goal if n not in together]
                    via = f"{a}({r})"
                    posts[(c, via)] = post
                    by_case = CASES[a].invariants if a in CASES else frozenset()
                    cases = _cases(a, s, r, m.guard) if by_case & set(goal) else []
                    for g in groups:
                        if not by_case & set(g):
                            todo[(g, "consecution", via, c)] = (hyp, {n: goal[n] for n in g})
                            continue
                        for case, when in cases:
                            posts[(c, f"{via} {case}")] = post
                            todo[(g, "consecution", f"{via} {case}", c)] = (
                                [*hyp, sub(when)], {n: goal[n] for n in g})
                    yield todo

    def ask(pool: Solvers, batch: Batch) -> Callable[[], list[Answer]]:
        return pool.submit([query(k, *hyp, z3.Not(z3.And(list(goal.values()))),
                                  tactic=_tactic(k[0])) for k, (hyp, goal) in batch.items()])

    spent = dict.fromkeys(names, 0.0)
    failed: dict[str, str] = {}
    known = _free(s, ch, prm)
    with _pool(solvers) as pool:
        # each move's queries go to the workers as soon as they are built: the solving of the
        # first overlaps the building of the rest
        asked: Batch = {}
        waits = []
        for batch in batches():
            asked.update(batch)
            waits.append(ask(pool, batch))
        answers = [ans for wait in waits for ans in wait()]
        while answers:
            split: Batch = {}
            for ans in answers:
                group, label, via, c = ans.key
                for n in group:     # a query for several invariants counts evenly for each
                    spent[n] += ans.seconds / len(group)
                if ans.result == "unsat":
                    continue
                if len(group) > 1:  # which of them fail: ask for each
                    hyp, goal = asked[ans.key]
                    split.update({((n,), label, via, c): (hyp, {n: goal[n]}) for n in group})
                    continue
                [n] = group
                if n in failed:
                    continue
                if ans.result == "sat":
                    failed[n] = (f"{label} fails via {via}, chunks={c} (counterexample to "
                                 f"induction): "
                                 f"{_values_text(ans.model, known, sv, posts[(c, via)])}")
                else:
                    failed[n] = f"{label} via {via}, chunks={c}: {ans.reason}"
            asked = split
            answers = ask(pool, split)() if split else []
    return [Obligation(n, "inconclusive" if n in failed else "proved", spent[n],
                       failed.get(n, "")) for n in names]


def implied(prm: Params, assume: Callable[[Params], z3.BoolRef], invariants: Iterable[str],
            chunks: Iterable[int] = (1, 2), quiet: bool = False,
            solvers: Solvers | None = None) -> list[Obligation]:
    """Each consequence holds in every state the (proved) inductive invariants admit."""
    with _pool(solvers) as pool:
        return implied_later(prm, assume, invariants, chunks, quiet, pool)()


def implied_later(prm: Params, assume: Callable[[Params], z3.BoolRef],
                  invariants: Iterable[str], chunks: Iterable[int], quiet: bool,
                  solvers: Solvers) -> Callable[[], list[Obligation]]:
    """:func:`implied`, its queries started now; the call returned waits for the verdicts."""
    s = fresh_state("s")
    invariants = list(invariants)
    sub = _quiet_sub(s, quiet, invariants)
    queries = []
    for c in chunks:
        q = replace(prm, chunks=z3.BitVecVal(c, 64))
        hyp = [sub(ALL_INVARIANTS[n](s, q)) for n in invariants]
        queries += [query((name, c), assume(q), *hyp, z3.Not(sub(prop(s, q))))
                    for name, prop in CONSEQUENCES.items()]
    pending = solvers.submit(queries)
    known = _free(s, prm)

    def verdicts() -> list[Obligation]:
        spent = dict.fromkeys(CONSEQUENCES, 0.0)
        detail: dict[str, str] = {}
        for a in pending():
            name, c = a.key
            spent[name] += a.seconds
            if name in detail or a.result == "unsat":
                continue
            detail[name] = (f"a state the invariants admit breaks it, chunks={c}: "
                            f"{_values_text(a.model, known, s.as_dict())}" if a.result == "sat"
                            else f"chunks={c}: {a.reason}")
        return [Obligation(n, "inconclusive" if n in detail else "proved", spent[n],
                           detail.get(n, "")) for n in CONSEQUENCES]

    return verdicts

# ---------------------------------------------------------------------------- entry points
def houdini(prm: Params, assume: Callable[[Params], z3.BoolRef], chunks: Iterable[int],
            limit: Limit | None = None, progress: Callable[[str], None] | None = None,
            workers: int | None = None) -> dict[str, Obligation]:
    """The largest subset of the named invariants that is inductive on its own: drop every
    invariant whose base or consecution fails, and repeat relative to those left. Then each
    consequence (no_deadlock) is checked against what is left. Queries run on ``workers``
    processes (default: one per core)."""
    keep = list(ALL_INVARIANTS)
    chunks = tuple(chunks)
    dropped: dict[str, Obligation] = {}
    spent = dict.fromkeys(keep, 0.0)
    ranks = (0,) if rank_symmetric(prm, limit) else (0, 1)
    with Solvers(workers, limit) as pool:
        # a decode-only workload: once decode_only is inductive on its own, the big-gate
        # variables may be taken as zero everywhere else
        quiet = (z3.is_false(z3.simplify(prm.big_gates)) and all(
            o.verdict == "proved" for o in induction(prm, assume, ["decode_only"], chunks,
                                                     ranks, solvers=pool)))
        # the consequences, relative to every invariant: started first, so they run while
        # the induction does, and used if no invariant is dropped
        first = implied_later(prm, assume, keep, chunks, quiet, pool)
        while True:
            obs = induction(prm, assume, keep, chunks, ranks, quiet, pool)
            for o in obs:
                spent[o.name] += o.seconds
            bad = [o for o in obs if o.verdict != "proved"]
            for o in bad:
                dropped[o.name] = Obligation(o.name, o.verdict, spent[o.name], o.detail)
                if progress:
                    progress(f"{o.name}: not inductive here, dropped")
            if not bad:
                break
            keep = [n for n in keep if n not in dropped]
        proved = {o.name: Obligation(o.name, "proved", spent[o.name]) for o in obs}
        after = {o.name: o for o in (first() if not dropped else
                                     implied(prm, assume, keep, chunks, quiet, pool))}
    return {**proved, **dropped, **after}


SCOPE = ("over UC (qp_type=uc, wire_loss=0) with one configuration for both ranks (no "
         "rank1_max_msg or rank1_window of rank 1's own): decode gates, drains and big gates (no "
         "verify blocks: verify_blocks=0), with or "
         "without faults (crashes, error and warm-up completions, timeouts, bad calls, a dead "
         "peer; no failing posts or polls: post_failures=0); the base protocol, and for "
         "decode-only workloads (big_gates=0) the variants "
         "no-barrier, tag-every-chunk, signal-last-only (with unsignaled_completions=1), "
         "no-seq-check (without faults) and depth-mismatch")


def out_of_scope(cfg: GateConfig, variants: Sequence[str] = ()) -> str | None:
    """Why the model does not cover a configuration, or None."""
    outside = [f"{k}={getattr(cfg, k)}" for k, want in (("qp_type", "uc"), ("wire_loss", 0),
                                                         ("verify_blocks", 0),
                                                         ("post_failures", 0))
               if getattr(cfg, k) != want]
    ranks = cfg.of_rank(0), cfg.of_rank(1)
    outside += [f"{RANK1_OWN[k]}={getattr(ranks[1], k)}" for k in ("max_msg", "window")
                if getattr(ranks[0], k) != getattr(ranks[1], k)]
    outside += [f"variant {v}" for v in variants if v not in ENCODED_VARIANTS]
    if cfg.big_gates:
        outside += [f"variant {v} with big_gates=1" for v in variants if v in ENCODED_VARIANTS]
    if NO_SEQ_CHECK.on(variants) and cfg.faults:
        outside.append(f"{NO_SEQ_CHECK.name} with faults=1 (bad calls)")
    if SIGNAL_LAST_ONLY.on(variants) and not cfg.unsignaled_completions:
        outside.append(f"{SIGNAL_LAST_ONLY.name} with unsignaled_completions=0")
    if not outside:
        return None
    return f"the z3 model covers {SCOPE}; this configuration has {', '.join(outside)}"


def prove(values: Mapping[str, Any], variants: Sequence[str] = (), *,
          progress: Callable[[str], None] | None = None, trace_dir: Path | None = None,
          solver_limit: int | None = None) -> list[Result]:
    """Every invariant of the gate system for one configuration, by induction on the model
    with the parameters as given (unbounded in seq, for the configured workload).

    An invariant whose proof fails is searched for a shortest run of the executable spec that
    breaks it, every step checked against the model: 'violated' (with the ITF trace) when one
    exists, otherwise 'inconclusive' with the counterexample to induction. A configuration
    outside the model's scope is 'inconclusive' throughout, saying why. ``solver_limit`` is
    z3's resource limit per query (None: RLIMIT)."""
    from verbspec.spec.gate.system import INVARIANTS, build

    system = build(values, variants)
    cfg = system.params
    why = out_of_scope(cfg, variants)
    if why:
        return [Result(n, "gate", "prove", "inconclusive", "not proved", 0.0, None, why)
                for n in INVARIANTS]
    # a proof about the model says something of the spec only while the model matches it:
    # the check comes first, and a model that drifted stops the proof before any induction
    if progress:
        progress("checking the model against the spec")
    ref = refinement.check(cache=refinement.cache_dir())
    if ref.divergence is not None:
        path = (save_counterexample(ref.trace, trace_dir, "prove")
                if ref.trace is not None and trace_dir is not None else None)
        detail = (f"the z3 model no longer matches the executable spec, so nothing is proved "
                  f"until it does (the proof is void: the spec or the model changed): "
                  f"{ref.divergence}")
        return [Result(n, "gate", "prove", DRIFTED, "not proved", ref.seconds, path,
                       detail) for n in INVARIANTS]
    if progress:
        progress("the model matches the spec; proving")
    # the workload stays symbolic: the proof covers every ops, hence every seq below the tags
    prm = replace(param_terms(params_of(cfg, variants)), ops=z3.BitVec("ops", 64))
    found = houdini(prm, domain, (cfg.chunks,), limit_of(solver_limit), progress=progress)
    lemmas = [n for n in LEMMAS if found[n].verdict == "proved"]
    lemma_s = sum(found[n].seconds for n in LEMMAS)
    bound = ("every reachable state, every workload of 1 <= ops < 2^61 gates per rank (z3 "
             "induction at these parameters)")
    out = []
    for name in INVARIANTS:
        ob = found[name]
        if ob.verdict == "proved":
            how = ("implied by the inductive invariant" if name in CONSEQUENCES
                   else "base and consecution")
            out.append(Result(name, "gate", "prove", "proved", bound, ob.seconds, None,
                              f"{how}; strengthening invariants ({lemma_s:.1f} s, shared): "
                              f"{', '.join(lemmas)}; {ref.coverage}"))
            continue
        t0 = time.perf_counter()
        verdict, detail, path, cover = "inconclusive", ob.detail, None, "not proved"
        run = spec_counterexample(values, name, variants)
        if run is not None and run.admitted:
            verdict, cover = "violated", f"shortest trace: {run.moves} steps"
            kind = "shortest run" if cfg.faults else "shortest fault-free run"
            detail = (f"{kind} of the spec, {run.moves} moves, every step a step of the "
                      f"model: {run.trace.message}")
            if trace_dir is not None:
                path = save_counterexample(run.trace, trace_dir, "prove")
        out.append(Result(name, "gate", "prove", verdict, cover,
                          ob.seconds + time.perf_counter() - t0, path, detail))
        if progress:
            progress(f"{name}: {verdict}")
    return out

