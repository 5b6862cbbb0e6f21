"""Answering many independent z3 queries on every core.

z3 terms cannot cross processes, so each query travels as SMT-LIB2 text (its declarations and
assertions) to a worker, which parses it into a fresh solver and answers unsat, sat with the
model's values, or unknown with z3's reason. A fresh, non-incremental solver per query is also
what makes the proofs fast: z3 then preprocesses the whole query (solving equalities,
propagating values) before bit-blasting, which the incremental solver does not.

Workers are spawned (fresh interpreters), so a script that proves with more than one worker
needs Python's usual ``if __name__ == "__main__":`` guard around its entry point.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import z3

Value = int | bool

# A query's work is bounded by z3's resource count ("rlimit"): a deterministic count of the
# solver's steps, the same for the same query on any machine at any load, so a verdict never
# depends on the neighbours. RLIMIT is about five times the largest query measured (the model
# BMC's, just outside the envelope), ten times the envelope induction's largest and over forty
# times the defaults' (docs/benchmarks.md, "Solver limits"). The wall clock is only a safety
# net, far beyond.
RLIMIT = 3_000_000_000
RLIMIT_MAX = 2**32 - 1      # z3 keeps the limit in 32 bits (a larger one wraps, silently)
# the tag-matching proofs quantify over list positions: a query z3's instantiation does not
# settle soon is retried under another seed (proofs/tagmatch/lemma.py), so its limit is lower
QUANTIFIED_RLIMIT = 25_000_000
SAFETY_NET_MS = 3_600_000


@dataclass(frozen=True)
class Limit:
    """How much work one solver query may take: ``rlimit`` (z3's resource count, the bound a
    verdict rests on) and ``wall_ms``, a wall-clock safety net that is not a verdict."""

    rlimit: int = RLIMIT
    wall_ms: int = SAFETY_NET_MS

    def __post_init__(self) -> None:
        if not 1 <= self.rlimit <= RLIMIT_MAX or self.wall_ms < 1:
            raise ValueError(f"a solver limit must be positive, and rlimit at most "
                             f"{RLIMIT_MAX:,} (rlimit {self.rlimit}, wall-clock "
                             f"{self.wall_ms} ms)")

    def apply(self, solver: z3.Solver) -> None:
        solver.set("rlimit", self.rlimit)
        solver.set("timeout", self.wall_ms)

    def why(self, reason: str) -> str:
        """z3's reason for answering unknown, saying which limit ended the query."""
        if reason in ("timeout", "canceled"):
            return (f"wall-clock limit of {self.wall_ms / 1000:g} s reached: a safety net, not "
                    f"a verdict about the spec")
        if "resource limit" in reason:
            return (f"solver resource limit reached (rlimit {self.rlimit:,}; raise it with "
                    f"--solver-limit)")
        return f"z3: {reason}"


def limit_of(rlimit: int | None) -> Limit | None:
    """The limit a ``--solver-limit`` asks for (None: the default)."""
    return Limit(rlimit) if rlimit else None


def resources(solver: z3.Solver) -> int:
    """The resource count a query used (its context's, so a fresh context per query)."""
    stats = solver.statistics()
    names = stats.keys()    # z3's Statistics, not a dict
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in names else 0


@dataclass(frozen=True)
class Query:
    key: Hashable       # what the caller gets back with the answer
    text: str           # SMT-LIB2: declarations and assertions
    tactic: str = "blast"   # a name of TACTICS: how it is solved


@dataclass(frozen=True)
class Answer:
    key: Hashable
    result: str                     # "unsat" | "sat" | "unknown"
    seconds: float                  # solver time in the worker
    resources: int                  # z3's resource count for the query (see Limit)
    model: dict[str, Value] = field(default_factory=dict)    # sat: name -> value
    reason: str = ""                # unknown: why


def query(key: Hashable, *facts: z3.BoolRef, tactic: str = "blast") -> Query:
    """The satisfiability of the conjunction of ``facts``, as a query."""
    if tactic not in TACTICS:
        raise ValueError(f"unknown tactic {tactic!r} (known: {', '.join(TACTICS)})")
    solver = z3.Solver()
    solver.add(*facts)
    return Query(key, solver.to_smt2(), tactic)


def strategy(ctx: z3.Context, tactic: str = "blast") -> z3.Tactic:
    """How a query is solved. The queries are bit-vector formulas over counters, mostly sums
    under if-then-else: simplifying with sums normalised and if-then-else pushed into the
    bit-vector terms lets equal sums cancel, then the equalities are solved away and the rest
    bit-blasted to SAT ("blast"; measured at the defaults against z3's default strategy: see
    docs/benchmarks.md, "The gate prover"). "bounds" first propagates unsigned bounds through the
    bit-vector
    terms: a bound on a sum of counters that a step only lowers then follows from the bounds
    of its terms, which bit-blasting the adders finds slowly."""
    norm = z3.With("simplify", som=True, push_ite_bv=True, ctx=ctx)
    bounds = ("propagate-bv-bounds", norm) if tactic == "bounds" else ()
    return z3.Then(norm, "propagate-values", "solve-eqs", norm, *bounds, "reduce-bv-size",
                   norm, "bit-blast", "sat", ctx=ctx)


TACTICS = ("blast", "bounds")


def answer(q: Query, limit: Limit) -> Answer:
    # a context per query: z3's term order, hence its search, then does not depend on which
    # queries the worker answered before, so each answer takes the same time in any run
    ctx = z3.Context()
    solver = strategy(ctx, q.tactic).solver()
    solver.from_string(q.text)
    limit.apply(solver)
    t0 = time.perf_counter()
    res = solver.check()
    spent = time.perf_counter() - t0
    used = resources(solver)
    if res == z3.sat:
        m = solver.model()
        values = {d.name(): z3.is_true(m[d]) if z3.is_bool(m[d]) else m[d].as_long()
                  for d in m.decls() if d.arity() == 0}
        return Answer(q.key, "sat", spent, used, values)
    if res == z3.unknown:
        return Answer(q.key, "unknown", spent, used, reason=limit.why(solver.reason_unknown()))
    return Answer(q.key, "unsat", spent, used)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


class Solvers:
    """A pool of solver processes (or, with one worker, the calling process), for the
    lifetime of a ``with`` block."""

    def __init__(self, workers: int | None = None, limit: Limit | None = None) -> None:
        self.workers = workers or default_workers()
        self.limit = limit or Limit()
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Solvers:
        if self.workers > 1:
            # spawn: a fresh interpreter, not a fork of one that may hold z3 or test threads
            self._pool = ProcessPoolExecutor(self.workers,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def submit(self, queries: Iterable[Query]) -> Callable[[], list[Answer]]:
        """Start answering (in a pool, the largest queries first: size stands in for cost, so
        a long one does not start last and leave a core idle); the returned call waits for
        every answer and gives them in the order asked. Queries submitted earlier are
        answered first."""
        queries = list(queries)
        order = sorted(range(len(queries)), key=lambda i: -len(queries[i].text))
        if self._pool is None:
            return lambda: [answer(q, self.limit) for q in queries]
        futures = {i: self._pool.submit(answer, queries[i], self.limit) for i in order}
        return lambda: [futures[i].result() for i in range(len(queries))]

    def run(self, queries: Iterable[Query]) -> list[Answer]:
        """Every query's answer, in the order given."""
        return self.submit(queries)()
