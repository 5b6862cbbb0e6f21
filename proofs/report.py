"""Check results in the shape of the CLI's JSON contract, and the exit code they add up to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

EXIT_OK, EXIT_VIOLATION, EXIT_INCONCLUSIVE, EXIT_INPUT = 0, 1, 2, 3

# verdicts, and the exit code each forces (the worst one wins)
VERDICT_EXIT = {
    "proved": EXIT_OK,
    "held": EXIT_OK,
    "violated": EXIT_VIOLATION,
    "inconclusive": EXIT_INCONCLUSIVE,
    "unknown": EXIT_INCONCLUSIVE,
    "timeout": EXIT_INCONCLUSIVE,
}


@dataclass(frozen=True)
class Result:
    invariant: str
    protocol: str
    method: str
    verdict: str
    bound: str          # what the verdict covers: "unbounded", "depth 12", "1000 examples, ..."
    seconds: float
    trace: str | None = None    # path of the counterexample trace, if one was written
    detail: str | None = None   # the violation message, or the CTI, or notes

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        return d


@dataclass(frozen=True)
class Obligation:
    """One proof obligation a prover discharged or not: its name, verdict, time and notes."""

    name: str
    verdict: str        # "proved", or why not: "inconclusive", "violated", "unknown"
    seconds: float
    detail: str = ""


def trace_name(protocol: str, method: str, invariant: str, variants: Sequence[str]) -> str:
    """File name of a counterexample trace: which protocol, variants, method and invariant."""
    tag = "-".join(variants) if variants else "base"
    return f"{protocol}-{tag}-{method}-{invariant}.itf.json"


def exit_code(results: list[Result]) -> int:
    code = EXIT_OK
    for r in results:
        c = VERDICT_EXIT[r.verdict]
        if c == EXIT_VIOLATION or (c == EXIT_INCONCLUSIVE and code == EXIT_OK):
            code = c
    return code
