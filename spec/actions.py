"""Actions and invariants declared once, on the function that performs or checks them.

A protocol's steps are methods of one class. ``@action`` marks a step with what the rest of the
tree needs to know about it (its parameter names, whether it is a fault, its guard), in the
manner of Hypothesis's ``@rule``/``@precondition`` markers; the action's name is the method's
name without the ``do_`` prefix, and a ``group`` names the actions a configuration has or
lacks together. :func:`declared` lists a class's actions in the order they are
written, and :func:`bind` turns them into the :class:`~verbspec.spec.lts.Action` list of a
system. Checkers, the z3 models, the docs' action tables and the tests read that list; no
action name or parameter list is written anywhere else.

``@invariant`` marks a check the same way (Hypothesis's ``@invariant``): the invariant's name
is the method's name without the ``inv_`` prefix, its doc the docstring's first paragraph;
:func:`declared_invariants` lists them in the order they are written and
:func:`bind_invariants` turns them into a system's :class:`~verbspec.spec.lts.Invariant` list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from verbspec.spec.lts import Action, Invariant

STEP_PREFIX = "do_"
INVARIANT_PREFIX = "inv_"
OVER = ("state", "step")        # what an invariant judges: one state, or one step


@dataclass(frozen=True)
class Declaration:
    """What ``@action`` records on a step function."""

    name: str
    params: tuple[str, ...]
    fault: bool
    guard: Callable[..., Iterable[tuple[Any, ...]]]     # (self, state) -> argument tuples
    step: Callable[..., tuple[Any, Any]]                # (self, state, *args) -> (state, obs)
    doc: str
    present: Callable[[Any], bool] | None = None        # (self) -> the action exists here
    group: str | None = None                            # the actions it comes and goes with


def action(*params: str, guard: Callable[..., Iterable[tuple[Any, ...]]], fault: bool = False,
           present: Callable[[Any], bool] | None = None, group: str | None = None
           ) -> Callable[[Callable], Callable]:
    """Mark ``do_<name>(self, state, *args)`` as the action ``<name>`` with parameters
    ``params``, enabled for the argument tuples ``guard(self, state)`` yields. ``fault``:
    an environment event a correct protocol must survive, not progress. ``present(self)``:
    whether a configuration has the action at all (e.g. offload steps). ``group``: the name
    of the actions a configuration has or lacks together (:func:`action_names` lists them)."""

    def mark(step: Callable) -> Callable:
        if not step.__name__.startswith(STEP_PREFIX):
            raise TypeError(f"step {step.__name__} must be named {STEP_PREFIX}<action>")
        doc = (step.__doc__ or "").strip().splitlines()
        step.__action__ = Declaration(step.__name__[len(STEP_PREFIX):], params, fault, guard,
                                      step, doc[0] if doc else step.__name__, present, group)
        return step

    return mark


def _declarations(cls: type, marker: str, kind: type) -> tuple[Any, ...]:
    """What ``cls`` (and its bases) declare with ``marker``, in the order it is written: the
    bases' first, from the last base to the first."""
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for member in vars(klass).values():
            decl = getattr(member, marker, None)
            if isinstance(decl, kind):
                seen[decl.name] = decl
    return tuple(seen.values())


def declared(cls: type) -> tuple[Declaration, ...]:
    """The actions of ``cls`` (and its bases), in the order they are written."""
    return _declarations(cls, "__action__", Declaration)


def bind(obj: Any) -> tuple[Action, ...]:
    """The system's action list: each declared action of ``obj``'s class bound to ``obj``."""
    out = []
    for d in declared(type(obj)):
        if d.present is not None and not d.present(obj):
            continue
        out.append(Action(d.name, d.doc, d.params, d.guard.__get__(obj), d.step.__get__(obj),
                          fault=d.fault))
    return tuple(out)


def action_names(cls: type, *, fault: bool | None = None, group: str | None = None
                 ) -> tuple[str, ...]:
    """Names of ``cls``'s actions, in their order (only faults, or only progress, when
    ``fault`` is given; only the group's when ``group`` is)."""
    return tuple(d.name for d in declared(cls) if (fault is None or d.fault == fault)
                 and (group is None or d.group == group))


def name_of(step: Callable) -> str:
    """The action a step function declares, for code that must recognise it by name."""
    decl = getattr(step, "__action__", None)
    if not isinstance(decl, Declaration):
        raise TypeError(f"{getattr(step, '__name__', step)!r} is not declared with @action")
    return decl.name


@dataclass(frozen=True)
class InvariantDeclaration:
    """What ``@invariant`` records on a check."""

    name: str
    doc: str
    over: str                                           # "state" or "step" (OVER)
    check: Callable[..., str | None]                    # (self, state) or (self, pre, ...)


def invariant(check: Callable | None = None, *, doc: str | None = None, over: str = "state"
              ) -> Any:
    """Mark ``inv_<name>(self, ...)`` as the invariant ``<name>``, used bare (``@invariant``)
    or with arguments. ``over``: "state", checked as ``check(state)``, or "step", checked as
    ``check(pre, action_name, args, post, obs)``; either returns None when the property holds
    and a message saying what broke otherwise. ``doc``: what the property states, by default
    the docstring's first paragraph, its lines joined."""

    def mark(check: Callable) -> Callable:
        if not check.__name__.startswith(INVARIANT_PREFIX):
            raise TypeError(f"check {check.__name__} must be named {INVARIANT_PREFIX}<invariant>")
        if over not in OVER:
            raise ValueError(f"invariant {check.__name__} is over {over!r}, not one of {OVER}")
        text = doc if doc is not None else first_paragraph(check.__doc__ or "")
        if not text:
            raise TypeError(f"invariant {check.__name__} states nothing: give it a docstring")
        check.__invariant__ = InvariantDeclaration(check.__name__[len(INVARIANT_PREFIX):], text,
                                                   over, check)
        return check

    return mark if check is None else mark(check)


def first_paragraph(docstring: str) -> str:
    """A docstring's first paragraph as one line: its lines stripped and joined by spaces."""
    lines = []
    for line in docstring.strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)


def declared_invariants(cls: type) -> tuple[InvariantDeclaration, ...]:
    """The invariants of ``cls`` (and its bases), in the order they are written."""
    return _declarations(cls, "__invariant__", InvariantDeclaration)


def bind_invariants(obj: Any) -> tuple[Invariant, ...]:
    """The system's invariants: each declared invariant of ``obj``'s class bound to ``obj``."""
    return tuple(Invariant(d.name, d.doc, d.over, d.check.__get__(obj))
                 for d in declared_invariants(type(obj)))


def invariant_names(cls: type) -> tuple[str, ...]:
    """Names of ``cls``'s invariants, in their order."""
    return tuple(d.name for d in declared_invariants(cls))
