"""Randomized exploration with Hypothesis stateful testing.

The RuleBasedStateMachine is generated from a system's action list: each step picks one of the
actions whose guard holds and arguments among those the guard enables. A new action therefore
needs no new test code. Every invariant is checked after every step; a failure is reduced by
proofs/shrink.py and the reduced run's trace is returned.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, settings, target
from hypothesis import seed as hyp_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from verbspec.proofs.shrink import shrink
from verbspec.spec.lts import Action, InvariantViolation, System, Trace, run_step, start_trace


@dataclass
class ExploreStats:
    examples: int = 0
    steps: int = 0
    max_depth: int = 0
    actions: Counter[str] = field(default_factory=Counter)   # steps taken, per action
    reached: dict[str, int] = field(default_factory=dict)    # deepest value of each measure


@dataclass(frozen=True)
class ExploreResult:
    stats: ExploreStats
    seconds: float
    violation: InvariantViolation | None

    @property
    def trace(self) -> Trace | None:
        return self.violation.trace if self.violation else None


def machine_for(system: System, stats: ExploreStats, variants: Sequence[str] = (),
                progress: Callable[[ExploreStats], None] | None = None):
    """A RuleBasedStateMachine that runs the system's actions.

    Each step draws one of the enabled (action, arguments) pairs. (Hypothesis's own per-rule
    selection with swarm flags would end most runs early: a protocol state usually enables
    only two or three actions.) Fault actions follow a swarm of our own: half the examples
    allow no fault, so that they run as deep as the workload goes; the others allow each
    fault action or not, evenly (a list of allowed faults would be drawn short, and almost
    no example would allow a given fault). Shrinking removes faults a counterexample does
    not need.

    A system may steer runs toward its protocol's depth with two optional attributes:
    ``weights`` (action name -> the weights an example may give it; each example draws one,
    and each step then draws an action by weight, its arguments evenly; weight 0 is taken
    only when nothing else is enabled) and ``depth(state)`` (measure name -> value; each
    example's deepest value is a Hypothesis target and is reported).
    """
    fault_names = sorted(a.name for a in system.actions if a.fault)
    weights: dict[str, tuple[int, ...]] = dict(getattr(system, "weights", {}))
    depth = getattr(system, "depth", None)

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            stats.examples += 1
            if progress is not None:
                progress(stats)
            self.trace = start_trace(system, variants)
            self.allowed: frozenset[str] = frozenset()
            self.weight: dict[str, int] = {}
            self.rng = random.Random(0)
            self.deepest: dict[str, int] = {}

        @initialize(faulty=st.booleans(),
                    faults=st.fixed_dictionaries({f: st.booleans() for f in fault_names}),
                    weight=st.fixed_dictionaries({a: st.sampled_from(w)
                                                  for a, w in sorted(weights.items())}),
                    rng=st.randoms(use_true_random=True))
        def choose_swarm(self, faulty: bool, faults: dict[str, bool], weight: dict[str, int],
                         rng: random.Random) -> None:
            self.allowed = frozenset(f for f, on in faults.items() if on and faulty)
            self.weight = weight
            self.rng = rng

        def moves(self) -> list[tuple[Action, tuple]]:
            state = self.trace.steps[-1].state
            return [(a, args) for a in system.actions
                    if not a.fault or a.name in self.allowed
                    for args in a.enabled(state)]

        # One rule, always runnable: where no allowed action is enabled (finished, or stuck,
        # which the no_deadlock invariant judges) the step does nothing. Action and arguments
        # are drawn together, one choice per step.
        @rule(data=st.data())
        def step(self, data) -> None:
            moves = self.moves()
            if not moves:
                return
            if self.weight:
                moves = self.weighted(moves)
            act, args = moves[0] if len(moves) == 1 else data.draw(st.sampled_from(moves))
            stats.steps += 1
            stats.actions[act.name] += 1
            run_step(system, self.trace, act, args)
            if depth is not None:
                for k, v in depth(self.trace.steps[-1].state).items():
                    self.deepest[k] = max(self.deepest.get(k, 0), v)

        def weighted(self, moves: list[tuple[Action, tuple]]) -> list[tuple[Action, tuple]]:
            """The moves of one action, drawn by this example's weights."""
            names = list(dict.fromkeys(a.name for a, _ in moves))
            w = [self.weight.get(n, 1) for n in names]
            if not any(w):
                w = [1] * len(names)
            # drawn from the example's own generator: Hypothesis draws numbers biased toward
            # small and boundary values, which would all but always pick the first action
            name = self.rng.choices(names, weights=w)[0] if len(names) > 1 else names[0]
            return [(a, x) for a, x in moves if a.name == name]

        def teardown(self) -> None:
            stats.max_depth = max(stats.max_depth, len(self.trace) - 1)
            for k, v in self.deepest.items():
                target(float(v), label=k)
                stats.reached[k] = max(stats.reached.get(k, 0), v)

    Machine.__name__ = f"{system.protocol.title()}Machine"
    return Machine


@contextmanager
def hypothesis_storage(directory: Path | None) -> Iterator[None]:
    """Point Hypothesis's storage (its constants cache; an example database, were one used)
    at ``directory``, or at a temporary directory removed afterwards, instead of
    ``.hypothesis/`` in the working directory; the previous location is restored after."""
    from hypothesis import configuration

    saved = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="verbspec-hypothesis-") as tmp:
        configuration.set_hypothesis_home_dir(directory if directory is not None else tmp)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(saved)


@contextmanager
def without_local_constants() -> Iterator[None]:
    """Keep Hypothesis from drawing values out of the constants in whichever local modules
    the process has imported so far. It does so now and then to find edge cases in code
    under test, but here it makes a derandomized run depend on what was imported before it
    (a test run's order, a CLI run's command), not only on the seed and the system. Nothing
    to do with Hypothesis versions that do not mine constants."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - versions without constants mining
        yield
        return
    found = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if found is None or cache is None:  # pragma: no cover
        yield
        return
    empty = Constants()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = found
        cache.cache.clear()


def explore(system: System, *, examples: int, steps: int, seed: int | None = None,
            variants: Sequence[str] = (), shrink_seconds: float = 60.0,
            storage: Path | None = None,
            progress: Callable[[ExploreStats], None] | None = None) -> ExploreResult:
    """Run the Hypothesis exploration; ``storage`` is where Hypothesis may keep files (see
    :func:`hypothesis_storage`); ``progress`` is called with the statistics at the start of
    each example."""
    with hypothesis_storage(storage), without_local_constants():
        return _explore(system, examples, steps, seed, variants, shrink_seconds, progress)


def _explore(system: System, examples: int, steps: int, seed: int | None,
             variants: Sequence[str], shrink_seconds: float,
             progress: Callable[[ExploreStats], None] | None) -> ExploreResult:
    stats = ExploreStats()
    machine = machine_for(system, stats, variants, progress)
    if seed is not None:
        machine = hyp_seed(seed)(machine)
    conf = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
        # proofs/shrink.py reduces what this finds; targeting drives runs deeper
        phases=[Phase.generate, Phase.target],
        print_blob=False,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
    )
    t0 = time.perf_counter()
    violation = None
    try:
        run_state_machine_as_test(machine, settings=conf)
    except InvariantViolation as e:
        violation = shrink(system, e, seconds=shrink_seconds, variants=variants)
    return ExploreResult(stats, time.perf_counter() - t0, violation)
