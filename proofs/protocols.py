"""What the checkers know of each protocol beyond its spec: bmc's phase depths, the prover, the
prover's scope, and a proof that a trace is a shortest run.

The spec registry (:mod:`verbspec.spec.protocols`) names each protocol's spec module; this one
adds the checkers that sit above it. Provers load lazily: z3 models are large, and explore and
bmc need none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verbspec.proofs.report import Result

Values = Mapping[str, Any]
# (values, variants, *, progress, trace_dir, solver_limit) -> one Result per invariant
Prover = Callable[..., list[Result]]
# (values, variants) -> why the prover cannot decide this configuration, or None
Scope = Callable[[Values, Sequence[str]], "str | None"]
# (values, variants, invariant, steps) -> why no fault-free run breaking it is shorter, or None
ShortestRun = Callable[[Values, Sequence[str], str, int], "str | None"]


@dataclass(frozen=True)
class Checks:
    """One protocol's checkers. bmc searches every run to ``bmc_depth``; then, where set,
    fault-free runs to ``bmc_fault_free_depth``, runs with at most one fault to
    ``bmc_one_fault_depth``, and last fault-free random walks of ``bmc_walk_depth`` steps
    (proofs/run.py)."""

    protocol: str
    bmc_depth: int
    explore_steps: int = 400        # explore's steps per example unless --steps says
    bmc_fault_free_depth: int | None = None
    bmc_one_fault_depth: int | None = None
    bmc_walk_depth: int | None = None
    prove: Prover | None = None
    # the prover's work runs in worker processes: `verbspec check` starts it first, in a
    # process of its own, so that it proves while the bounded checks run
    proves_apart: bool = False
    prove_scope: Scope | None = None
    shortest_run: ShortestRun | None = None

    def scope(self, method: str, values: Values, variants: Sequence[str]) -> str | None:
        """Why ``method`` cannot decide this configuration (outside a prover's model), or
        None."""
        if method == "prove" and self.prove_scope is not None:
            return self.prove_scope(values, variants)
        return None


def _gate_prove(values: Values, variants: Sequence[str] = (), **kw: Any) -> list[Result]:
    from verbspec.proofs.gate import induction

    return induction.prove(values, variants, **kw)


def _gate_scope(values: Values, variants: Sequence[str] = ()) -> str | None:
    from verbspec.proofs.gate import induction
    from verbspec.spec.gate.system import build

    return induction.out_of_scope(build(values, variants).params, variants)


def _gate_shortest_run(values: Values, variants: Sequence[str], invariant: str,
                       steps: int) -> str | None:
    from verbspec.proofs.gate import bound

    return bound.shortest_run(values, variants, invariant, steps)


def _tagmatch_prove(values: Values, variants: Sequence[str] = (), **kw: Any) -> list[Result]:
    from verbspec.proofs.tagmatch.prove import prove

    return prove(values, variants, **kw)


CHECKS: dict[str, Checks] = {
    "gate": Checks(
        "gate",
        # 48 decode gates in a row (three windows at the defaults) take about 1000 steps
        explore_steps=1000,
        # every run: about 12k states at the defaults
        bmc_depth=14,
        # fault-free runs double per level past 26, so the state budget ends this phase first
        bmc_fault_free_depth=40,
        # runs with one fault (e.g. one warm-up leftover in a full CQ)
        bmc_one_fault_depth=40,
        # depth-mismatch at the defaults needs a 65-chunk big gate: at least 148 steps
        bmc_walk_depth=1000,
        prove=_gate_prove, proves_apart=True, prove_scope=_gate_scope,
        shortest_run=_gate_shortest_run),
    # past the defaults' fixpoint (depth 25), so bmc exhausts them
    "tagmatch": Checks("tagmatch", bmc_depth=40, prove=_tagmatch_prove),
}
