"""Labelled transition systems: the shape every protocol spec in verbspec takes.

A system is a set of named actions (each a guard, given as the argument tuples enabled in a
state, and an effect) plus named invariants. Checkers (Hypothesis exploration, bounded search,
z3) and the conformance harness consume only this interface, so a new action or invariant
needs no new checker code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Args = tuple[Any, ...]


@dataclass(frozen=True)
class Action:
    """One protocol step.

    ``enabled(state)`` yields the argument tuples for which the guard holds; ``apply(state,
    *args)`` returns ``(next_state, observation)``. ``fault`` marks environment events that a
    correct protocol must survive (crash, error completion, timeout) rather than ordinary steps.
    """

    name: str
    doc: str
    params: tuple[str, ...]
    enabled: Callable[[Any], Iterable[Args]]
    apply: Callable[..., tuple[Any, Any]]
    fault: bool = False

    def is_enabled(self, state: Any) -> bool:
        return next(iter(self.enabled(state)), None) is not None


@dataclass(frozen=True)
class Invariant:
    """A named property. ``over`` is "state" (``check(state)``) or "step"
    (``check(pre, action_name, args, post, obs)``); ``check`` returns None when the property
    holds and a message saying what broke otherwise."""

    name: str
    doc: str
    over: str
    check: Callable[..., str | None]


class System(Protocol):
    protocol: str
    params: Any
    actions: tuple[Action, ...]
    invariants: tuple[Invariant, ...]

    def initial(self) -> Any: ...

    def done(self, state: Any) -> bool: ...

    def param_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TraceStep:
    """A state of a trace, with the action (and its arguments) that produced it."""

    action: str
    args: dict[str, Any]
    state: Any
    obs: Any = None


@dataclass
class Trace:
    protocol: str
    params: dict[str, Any]
    variants: tuple[str, ...]
    steps: list[TraceStep] = field(default_factory=list)
    violation: str | None = None
    message: str | None = None

    def __len__(self) -> int:
        return len(self.steps)


class InvariantViolation(AssertionError):
    """Raised by :func:`run_step` when an invariant fails; carries the trace that shows it."""

    def __init__(self, invariant: str, message: str, trace: Trace):
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message
        self.trace = trace


def action_table(system: System) -> dict[str, Action]:
    return {a.name: a for a in system.actions}


def enabled_moves(system: System, state: Any, *, faults: bool = True
                  ) -> Iterator[tuple[Action, Args]]:
    for act in system.actions:
        if act.fault and not faults:
            continue
        for args in act.enabled(state):
            yield act, args


def check_state(system: System, state: Any) -> tuple[str, str] | None:
    for inv in system.invariants:
        if inv.over == "state":
            msg = inv.check(state)
            if msg is not None:
                return inv.name, msg
    return None


def check_step(system: System, pre: Any, action: str, args: Args, post: Any, obs: Any
               ) -> tuple[str, str] | None:
    for inv in system.invariants:
        if inv.over == "step":
            msg = inv.check(pre, action, args, post, obs)
            if msg is not None:
                return inv.name, msg
    return None


def start_trace(system: System, variants: Sequence[str] = ()) -> Trace:
    """A trace holding only the initial state, whose state invariants are checked."""
    init = system.initial()
    trace = Trace(system.protocol, system.param_dict(), tuple(variants),
                  [TraceStep("init", {}, init)])
    bad = check_state(system, init)
    if bad:
        _fail(trace, *bad)
    return trace


def run_step(system: System, trace: Trace, action: Action, args: Args) -> Any:
    """Apply one action to the trace's last state, check every invariant, extend the trace."""
    pre = trace.steps[-1].state
    post, obs = action.apply(pre, *args)
    trace.steps.append(TraceStep(action.name, dict(zip(action.params, args, strict=True)),
                                 post, obs))
    bad = check_step(system, pre, action.name, args, post, obs) or check_state(system, post)
    if bad:
        _fail(trace, *bad)
    return post


def replay(system: System, moves: Iterable[tuple[str, dict[str, Any]]],
           variants: Sequence[str] = ()) -> Trace:
    """Re-run named actions with their arguments; raise ValueError naming the first move that
    is unknown or not enabled, InvariantViolation if an invariant breaks."""
    table = action_table(system)
    trace = start_trace(system, variants)
    for i, (name, kwargs) in enumerate(moves, start=1):
        act = table.get(name)
        if act is None:
            raise ValueError(f"step {i}: unknown action {name!r}")
        try:
            args = tuple(kwargs[p] for p in act.params)
        except KeyError as e:
            raise ValueError(f"step {i}: action {name} lacks argument {e.args[0]!r}") from None
        # compared by equality, not hashing: a trace's arguments may be unhashable records
        if args not in list(act.enabled(trace.steps[-1].state)):
            raise ValueError(f"step {i}: action {name}{args} is not enabled")
        run_step(system, trace, act, args)
    return trace


def _fail(trace: Trace, invariant: str, message: str) -> None:
    trace.violation, trace.message = invariant, message
    raise InvariantViolation(invariant, message, trace)
