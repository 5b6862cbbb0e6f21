"""A protocol's modes: the parts of its behaviour a configuration may or may not have (verify
blocks, an RC queue pair, two communicators, each fault), each with the steps that show a run
went through it. The main job reports, per mode, which of its methods reached it, so that a
mode no default configuration reaches is a warning rather than a silent gap."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from verbspec.spec.actions import name_of


@dataclass(frozen=True)
class Mode:
    """``has(params)``: the configuration has the mode; ``shown_by``: a run that takes any of
    these actions went through it."""

    name: str
    has: Callable[[Any], bool]
    shown_by: frozenset[str]

    def reached(self, params: Any, actions: Collection[str] | None) -> bool:
        """A check of a configuration reached the mode: the configuration has it and the check
        took one of its steps (``actions`` None: every reachable state was covered, as an
        induction does)."""
        return self.has(params) and (actions is None or not self.shown_by.isdisjoint(actions))


def mode(name: str, has: Callable[[Any], bool], *steps: Callable[..., Any]) -> Mode:
    """A mode shown by the actions these step functions declare."""
    return Mode(name, has, frozenset(map(name_of, steps)))
