"""explore, bmc and prove agree: on every gate variant and on the base protocol, no method proves
an invariant another refutes, and where methods decide they name the same broken invariant.

prove's model covers the base protocol at the defaults (big gates and faults) and the variants
on decode-only workloads, so all three methods decide there; for a variant with big gates prove
says inconclusive and why, and explore and bmc must agree with each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from verbspec.proofs.run import METHODS, Options, run_method
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate import system as gate_system
from verbspec.spec.gate.system import VARIANTS

DECODE = {"faults": 0, "big_gates": 0, "window": 4, "ops": 6}
# (variants, the invariant each method must find broken, or None for "nothing broken")
DECODE_CASES = (
    ((), None),
    (("no-barrier",), "no_silent_drop"),
    (("tag-every-chunk",), "watermark_sound"),
    (("signal-last-only",), "send_accounting"),
    # out-of-order calls are faults (bad_call), so without faults the variant is harmless
    (("no-seq-check",), None),
)


def _run(method: str, values: dict, variants: tuple[str, ...], trace_dir: Path,
         examples: int = 60, steps: int | None = 300):
    # verdicts are what must agree; test_gate_bmc.py checks bmc's proof that a random walk's
    # trace is a shortest run
    opts = Options(examples=examples, steps=steps, max_states=60_000,
                   fault_free_max_states=30_000, one_fault_max_states=30_000,
                   trace_dir=trace_dir, shortest_proof=False)
    return run_method("gate", method, values, variants, opts)


def _violated(results) -> set[str]:
    return {r.invariant for r in results if r.verdict == "violated"}


def _no_contradiction(by_method: dict) -> None:
    for m, results in by_method.items():
        proved = {r.invariant for r in results if r.verdict == "proved"}
        for other, rs in by_method.items():
            assert not proved & _violated(rs), f"{m} proves what {other} refutes"


# the default suite keeps the base protocol and no-seq-check; the slow tier adds the three
# variants that take two to four minutes each
SLOW_DECODE = {"no-barrier", "tag-every-chunk", "signal-last-only"}
LONG_DECODE = {"no-barrier", "tag-every-chunk"}
# variants whose explore and bmc runs take about two minutes (a 65-chunk big gate, a drain
# then a big gate): test_gate_check.py's exploration of them stays in the default suite
SLOW_VARIANTS = {"depth-mismatch", "drain-without-rendezvous"}
# what a variant needs beyond the defaults to act at all
NEEDS = {"block-drain-without-rendezvous": {"verify_blocks": 1},
         "unexchanged-config": {"rank1_max_msg": 24576}}


@pytest.mark.parametrize(("variants", "broken"), [
    pytest.param(v, b, id=v[0] if v else "base",
                 marks=([pytest.mark.slow] if set(v) & SLOW_DECODE else [])
                 + ([pytest.mark.long] if set(v) & LONG_DECODE else []))
    for v, b in DECODE_CASES])
def test_the_three_methods_agree_in_the_decode_scope(variants, broken, tmp_path):
    by_method = {m: _run(m, DECODE, variants, tmp_path) for m in METHODS}
    _no_contradiction(by_method)
    for m, results in by_method.items():
        if broken is None:
            assert all(r.verdict in ("held", "proved") for r in results), (m, results)
        else:
            assert broken in _violated(results), (m, results)
    if broken is None:
        assert all(r.verdict == "proved" for r in by_method["prove"])
    else:
        # bmc and prove both report a shortest run, so their lengths agree
        bmc = next(r for r in by_method["bmc"] if r.verdict == "violated")
        prove = next(r for r in by_method["prove"] if r.invariant == broken)
        assert prove.bound == f"shortest trace: {bmc.bound.split()[2]} steps"
        assert main(["replay", prove.trace]) == 1
        # the invariant a variant breaks is not assumed while proving the others: those that
        # need it are not proved (mode_exclusive needs none of them)
        assert all(r.verdict != "proved" for r in by_method["prove"]
                   if r.invariant != "mode_exclusive"), by_method["prove"]


@pytest.mark.parametrize("variant", [
    pytest.param(v.name, marks=[pytest.mark.slow] if v.name in SLOW_VARIANTS else [])
    for v in VARIANTS])
def test_explore_and_bmc_agree_on_every_variant_and_prove_does_not_contradict(variant,
                                                                             tmp_path):
    # exploration stops at the first violation; it needs the CLI's default example and step
    # counts to get there (depth-mismatch needs a 65-chunk big gate, at least 148 steps: bmc's
    # random walks find it, its searches do not)
    by_method = {m: _run(m, NEEDS.get(variant, {}), (variant,), tmp_path, examples=300,
                         steps=None)
                 for m in METHODS}
    _no_contradiction(by_method)
    documented = next(v.breaks for v in VARIANTS if v.name == variant)
    for m in ("explore", "bmc"):
        found = _violated(by_method[m])
        assert len(found) == 1 and found <= {r.invariant for r in by_method[m]}, (m, found)
        assert next(iter(found)) in documented, (m, found, documented)
    # variants with big gates (or verify blocks) are outside prove's model: it must say so,
    # not guess
    assert all(r.verdict == "inconclusive" and "the z3 model covers" in r.detail
               for r in by_method["prove"])


def test_the_methods_agree_on_the_base_protocol_at_the_defaults(tmp_path):
    """ds4's constants, big gates in the workload (every size) and faults. This is also the
    suite's proof at the defaults (a full prove run is about a minute): the drain, the header
    exchange, staging windows, the wrapping barrier tag, crashes, error completions and dead
    peers are all in it."""
    by_method = {m: _run(m, {}, (), tmp_path) for m in METHODS}
    _no_contradiction(by_method)
    assert all(r.verdict == "held" for m in ("explore", "bmc") for r in by_method[m])
    prove = by_method["prove"]
    assert [r.invariant for r in prove] == list(gate_system.INVARIANTS)
    assert all(r.verdict == "proved" for r in prove), [(r.invariant, r.detail) for r in prove
                                                        if r.verdict != "proved"]
    assert all(name in prove[0].detail for name in ("big_chunks_aligned", "barrier_tags",
                                                    "drain_counts", "counters_exact",
                                                    "faults_recorded"))
