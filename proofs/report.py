"""Check results in the shape of the CLI's JSON contract, and the exit code they add up to."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# 0 held or proved, 1 a violation (trace written), 2 inconclusive, 3 invalid input, 4 an
# internal error (a bug in verbspec, never a verdict about the protocol)
EXIT_OK, EXIT_VIOLATION, EXIT_INCONCLUSIVE, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3, 4

# the violation a trace records where a protocol's separate model and its executable spec part
# ways (the model does not take a spec step, or judges a property otherwise)
DIVERGENCE = "model_refines_spec"

# a proof about a separate model that no longer matches its executable spec: void, not
# inconclusive (no budget ran out; the spec changed), and failed like a violation
DRIFTED = "drifted"

# verdicts, and the exit code each forces (the worst one wins)
VERDICT_EXIT = {
    "proved": EXIT_OK,
    "held": EXIT_OK,
    "violated": EXIT_VIOLATION,
    DRIFTED: EXIT_VIOLATION,
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
    # what the run reached (explore: steps per action, the protocol's depth measures)
    coverage: dict[str, Any] | None = None

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


def config_digest(params: Mapping[str, Any], variants: Sequence[str]) -> str:
    """A short digest of a configuration (parameter values and variants), so that traces of
    runs with different parameters get different names."""
    text = json.dumps({"params": {k: repr(v) for k, v in sorted(params.items())},
                       "variants": sorted(variants)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def trace_name(protocol: str, method: str, invariant: str, variants: Sequence[str],
               params: Mapping[str, Any] | None = None) -> str:
    """File name of a counterexample trace: which protocol, variants, method and invariant,
    and, given the parameters, a digest of parameters and variants."""
    tag = "-".join(variants) if variants else "base"
    digest = f"-{config_digest(params, variants)}" if params is not None else ""
    return f"{protocol}-{tag}-{method}-{invariant}{digest}.itf.json"


def exit_code(results: list[Result]) -> int:
    code = EXIT_OK
    for r in results:
        c = VERDICT_EXIT[r.verdict]
        if c == EXIT_VIOLATION or (c == EXIT_INCONCLUSIVE and code == EXIT_OK):
            code = c
    return code


@dataclass(frozen=True)
class NotRun:
    """A (protocol, method, invariant) that ``check`` left out, and why (e.g. outside the
    method's model): a skipped test case in a JUnit report."""

    protocol: str
    method: str
    invariant: str
    reason: str


def junit_xml(results: Sequence[Result], not_run: Sequence[NotRun] = (),
              name: str = "verbspec check") -> str:
    """A JUnit XML report, one test case per (protocol, method, invariant): classname
    ``verbspec.PROTOCOL.METHOD``, name the invariant. A violation is a failure (its message the
    violation, its text the trace path); a proof void because its model drifted from the spec
    is an error (the check could not be made); an inconclusive verdict, or a method not run, is
    skipped with the reason, since nothing was decided either way; held and proved pass."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name=name)
    counts = Counter()
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"verbspec.{r.protocol}.{r.method}",
                             name=r.invariant, time=f"{r.seconds:.3f}")
        ET.SubElement(case, "properties")
        _prop(case, "verdict", r.verdict)
        _prop(case, "bound", r.bound)
        if r.verdict == "violated":
            counts["failures"] += 1
            fail = ET.SubElement(case, "failure", message=r.detail or "violated",
                                 type="violation")
            fail.text = f"trace: {r.trace}" if r.trace else None
        elif r.verdict == DRIFTED:
            counts["errors"] += 1
            err = ET.SubElement(case, "error", message=r.detail or DRIFTED, type=DRIFTED)
            err.text = f"trace: {r.trace}" if r.trace else None
        elif VERDICT_EXIT[r.verdict] == EXIT_INCONCLUSIVE:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=f"{r.verdict}: {r.detail or r.bound}")
    for n in not_run:
        case = ET.SubElement(suite, "testcase", classname=f"verbspec.{n.protocol}.{n.method}",
                             name=n.invariant, time="0.000")
        counts["skipped"] += 1
        ET.SubElement(case, "skipped", message=f"not run: {n.reason}")
    suite.set("tests", str(len(results) + len(not_run)))
    suite.set("failures", str(counts["failures"]))
    suite.set("errors", str(counts["errors"]))
    suite.set("skipped", str(counts["skipped"]))
    # a method's results share its running time: count it once per (protocol, method)
    runs: dict[tuple[str, str], float] = {}
    for r in results:
        runs[r.protocol, r.method] = max(runs.get((r.protocol, r.method), 0.0), r.seconds)
    suite.set("time", f"{sum(runs.values()):.3f}")
    root = ET.Element("testsuites", name=name)
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _prop(case: Any, name: str, value: str) -> None:
    import xml.etree.ElementTree as ET

    props = case.find("properties")
    ET.SubElement(props, "property", name=name, value=value)
