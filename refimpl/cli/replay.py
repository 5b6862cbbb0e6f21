"""``verbspec replay``: re-run an ITF trace against the spec built from the trace's own params
and variants, checking every recorded state and the recorded violation; or (``--impl``) run the
trace's moves in lockstep with an implementation."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from verbspec.proofs.gate.refinement import first_divergence
from verbspec.proofs.report import DIVERGENCE, EXIT_OK, EXIT_VIOLATION
from verbspec.proofs.traces import read_trace
from verbspec.refimpl.cli import report
from verbspec.refimpl.cli.conform import harness_module
from verbspec.refimpl.cli.inputs import InputError
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.conformance.gate import CONFORMANCE
from verbspec.spec import protocols
from verbspec.spec.itf import TraceFormatError, first_difference, shown, state_body
from verbspec.spec.lts import InvariantViolation, Trace, replay

# an exit code and the line that says why
Verdict = tuple[int, str]


def arguments(r: Parser) -> None:
    r.add_argument("file", type=Path, help="an ITF trace written by verbspec")
    r.add_argument("--impl", default=None, metavar="refimpl|native|MODULE:FACTORY",
                   help="also run the trace's moves in lockstep with this implementation of "
                        "the trace's protocol, comparing it with the spec at every step "
                        "(native: the protocol's C engine)")


def cmd_replay(args: argparse.Namespace) -> int:
    code, verdict = replayed(args.file, args.impl)
    report.print_replay(verdict)
    return code


def replayed(file: Path, impl: str | None) -> Verdict:
    """Re-run a trace's moves on the spec built from the trace's own params and variants;
    compare every recorded state with the replayed one and the recorded violation with the
    replay's."""
    meta, moves, recorded = read_trace(file)
    proto = meta.get("protocol")
    if proto not in protocols.MODULES:
        raise TraceFormatError(f"$.#meta.protocol: unknown protocol {proto!r}")
    variants = tuple(meta.get("variants", ()))
    system = protocols.load(proto).build(meta.get("params", {}), variants)
    if impl is not None:
        return _replay_impl(impl, proto, system, moves)
    t0 = time.perf_counter()
    violation = None
    said = meta.get("violation")
    try:
        trace = replay(system, moves, variants)
    except ValueError as e:
        raise TraceFormatError(f"{file}: {e}") from None
    except InvariantViolation as e:
        trace, violation = e.trace, e
    if said == DIVERGENCE and proto == "gate":
        return _replay_divergence(trace, recorded, violation)
    if said == CONFORMANCE:
        problem = disagreement(trace, recorded, None, violation)
        if problem is not None:
            return EXIT_VIOLATION, f"replay disagrees with the trace: {problem}"
        return EXIT_VIOLATION, (
            f"replayed {len(trace) - 1} steps: the spec agrees with every recorded state; "
            f"the trace records an implementation differing at its last step (--impl "
            f"NAME re-runs an implementation on it)")
    problem = disagreement(trace, recorded, said, violation)
    if problem is not None:
        return EXIT_VIOLATION, f"replay disagrees with the trace: {problem}"
    if violation is not None:
        return EXIT_VIOLATION, (f"replayed {len(trace) - 1} steps: {violation.invariant} "
                                f"violated: {violation.message}")
    return EXIT_OK, (f"replayed {len(trace) - 1} steps in {time.perf_counter() - t0:.3f}s: "
                     f"every invariant held")


def _replay_divergence(trace: Trace, recorded: list[dict[str, Any]],
                       violation: InvariantViolation | None) -> Verdict:
    """A trace where the gate model and the spec parted ways: the spec's states replayed,
    then every step checked against the model as it is now."""
    problem = disagreement(trace, recorded, None, violation)
    if problem is not None:
        return EXIT_VIOLATION, f"replay disagrees with the trace: {problem}"
    found = first_divergence(trace)
    if found is None:
        return EXIT_VIOLATION, (f"replay disagrees with the trace: it records the model "
                                f"diverging from the spec at step {len(trace) - 1}; the model "
                                f"now takes every step")
    step, what = found
    return EXIT_VIOLATION, (f"replayed {len(trace) - 1} steps: the z3 model diverges from the "
                            f"spec at step {step}: {what}")


def disagreement(trace: Trace, recorded: list[dict[str, Any]], said: str | None,
                 violation: InvariantViolation | None) -> str | None:
    """Where a replay differs from the trace it replayed: the first state that differs (its
    first differing field), or a violation recorded but not reproduced at the recorded (last)
    step, or one the replay meets that the trace does not record there. None if they agree."""
    for i, step in enumerate(trace.steps):
        diff = first_difference(recorded[i], state_body(step.state), f"$.states[{i}]")
        if diff is not None:
            where, a, b = diff
            return f"{where}: trace says {shown(a)} at step {i}; replay gives {shown(b)}"
    last = len(recorded) - 1
    got_at = len(trace) - 1
    if violation is None:
        if said is None:
            return None
        return (f"trace says {said} violated at step {last}; replay gives every invariant "
                f"held through step {last}")
    if got_at == last and violation.invariant == said:
        return None
    if got_at < last:
        expected = f"no violation (it records {said} at step {last})" if said else \
            "no violation"
    else:
        expected = f"{said} violated" if said else "no violation"
    return (f"trace says {expected} at step {got_at}; replay gives {violation.invariant} "
            f"violated at step {got_at}: {violation.message}")


def _replay_impl(impl: str, proto: str, system: Any,
                 moves: list[tuple[str, dict[str, Any]]]) -> Verdict:
    """A trace's moves in lockstep with an implementation of the trace's protocol."""
    mod = harness_module(proto)
    harness = mod.GateHarness if proto == "gate" else mod.TagmatchHarness
    try:
        run = harness(system, mod.resolve(impl)).follow(moves)
    except ValueError as e:
        raise InputError(str(e)) from None
    if run.mismatch is not None:
        return EXIT_VIOLATION, f"{impl} differs from the spec: {run.mismatch}"
    return EXIT_OK, f"{impl} agreed with the spec on all {run.steps} steps"


COMMAND = Command("replay", "re-run an ITF trace against the spec, checking every recorded "
                            "state and the recorded violation", arguments, cmd_replay)
