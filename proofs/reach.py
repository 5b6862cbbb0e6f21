"""Which of a run of checks' methods reached each of a protocol's modes (spec/modes.py): the
per-mode coverage ``verbspec check`` reports, so that a mode the configurations leave out, or
that no check got to, is named rather than silently unchecked."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verbspec.proofs.report import DRIFTED, Result
from verbspec.spec import protocols

# a row of these verdicts covered its configuration's reachable states (a proof, or a
# violation a proof's search found), whatever actions it names
DECIDED = ("proved", "violated")


@dataclass(frozen=True)
class ModeReach:
    protocol: str
    mode: str
    methods: tuple[str, ...]      # the methods that reached it, in the run's order

    def as_json(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "mode": self.mode, "methods": list(self.methods)}


Run = tuple[Any, "Collection[str] | None"]     # (parameters, actions taken; None: every one)


def _runs(row: Result, build: Any, values: Mapping[str, Any], variants: Sequence[str]
          ) -> list[Run]:
    """The configurations a row's check ran and the actions it took in each."""
    cov = row.coverage or {}
    if "configs" in cov:
        return [(build({**values, **c["values"]}, variants).params, set(c["actions"]))
                for c in cov["configs"]]
    if "actions" in cov:
        return [(build(values, variants).params, set(cov["actions"]))]
    if row.method == "prove" and row.verdict in DECIDED:
        # an induction: every reachable state of the configuration
        return [(build(values, variants).params, None)]
    return []


def mode_reach(protocol: str, values: Mapping[str, Any], variants: Sequence[str],
               results: Sequence[Result]) -> list[ModeReach]:
    """Each of ``protocol``'s modes and the methods among ``results`` that reached it: a
    method reached a mode where one of its rows ran a configuration with the mode and took a
    step that shows it (a proof, every step its configuration has). A row that drifted or was
    not decided reached nothing."""
    build = protocols.load(protocol).build
    mine = [r for r in results if r.protocol == protocol and r.verdict != DRIFTED]
    methods = list(dict.fromkeys(r.method for r in mine))
    runs: dict[str, list[Run]] = {m: [] for m in methods}
    seen: set[tuple[str, str]] = set()
    for r in mine:
        key = (r.method, repr(r.coverage) if r.coverage else r.verdict)
        if key in seen:       # a method's rows mostly share one coverage
            continue
        seen.add(key)
        runs[r.method] += _runs(r, build, values, variants)
    return [ModeReach(protocol, mode.name,
                      tuple(m for m in methods
                            if any(mode.reached(p, acts) for p, acts in runs[m])))
            for mode in protocols.modes(protocol)]


def unreached(reach: Sequence[ModeReach]) -> list[ModeReach]:
    return [m for m in reach if not m.methods]
