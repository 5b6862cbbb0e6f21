"""explore, bmc and prove agree: no method proves an invariant another refutes, and where
methods decide they name the same broken invariant, bmc and prove with shortest runs of one
length.

Each method's verdicts are held on their own elsewhere: every variant refuted by exploration
(test_gate_check.py) and by bmc with its exact invariant and shortest length (test_gate_bmc.py),
the base protocol holding under both at the defaults, the decode scope proved
(test_gate_z3.py), and the whole envelope, the defaults in it (tests/cli/test_envelope.py).
Here one variant is run by all three methods in the decode scope, where prove's model
reaches, and prove, outside its model, says so for every variant instead of guessing."""

from __future__ import annotations

from pathlib import Path

import pytest

from verbspec.proofs.run import METHODS, Options, run_method
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate import system as gate_system
from verbspec.spec.gate.system import VARIANTS

DECODE = {"faults": 0, "big_gates": 0, "window": 4, "ops": 6}
# the variant all three methods refute in the decode scope, and the invariant it breaks
AGREED = ("signal-last-only", "send_accounting")
# what a variant needs beyond the defaults to act at all
NEEDS = {"block-drain-without-rendezvous": {"verify_blocks": 1},
         "unexchanged-config": {"rank1_max_msg": 24576}}


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


@pytest.mark.slow
def test_the_three_methods_agree_on_a_variant_in_the_decode_scope(tmp_path):
    variant, broken = AGREED
    by_method = {m: _run(m, DECODE, (variant,), tmp_path) for m in METHODS}
    _no_contradiction(by_method)
    for m, results in by_method.items():
        assert broken in _violated(results), (m, results)
    # bmc and prove both report a shortest run, so their lengths agree
    bmc = next(r for r in by_method["bmc"] if r.verdict == "violated")
    prove = next(r for r in by_method["prove"] if r.invariant == broken)
    assert prove.bound == f"shortest trace: {bmc.bound.split()[2]} steps"
    assert main(["replay", prove.trace]) == 1
    # the invariant a variant breaks is not assumed while proving the others: those that
    # need it are not proved (mode_exclusive needs none of them)
    assert all(r.verdict != "proved" for r in by_method["prove"]
               if r.invariant != "mode_exclusive"), by_method["prove"]


@pytest.mark.parametrize("variant", [v.name for v in VARIANTS])
def test_outside_its_model_prove_says_so_for_every_variant(variant, tmp_path):
    # variants with big gates (or verify blocks) are outside prove's model: it must say so,
    # not guess
    results = run_method("gate", "prove", NEEDS.get(variant, {}), (variant,),
                         Options(trace_dir=tmp_path))
    assert [r.invariant for r in results] == list(gate_system.INVARIANTS)
    assert all(r.verdict == "inconclusive" and "the z3 model covers" in r.detail
               for r in results)
