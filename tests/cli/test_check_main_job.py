"""`verbspec check`, the main job: bounded checks beside a proof take the smaller budgets
(``--thorough``, a method asked for by name, or a budget given keeps the full ones), a prover
whose work runs in worker processes proves in a process of its own while the other checks
run, and a fixpoint bmc reached is not searched again by the prover."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from verbspec.proofs import search
from verbspec.proofs.report import Result
from verbspec.proofs.run import BESIDE_A_PROOF, Options, ProverApart, run_method
from verbspec.proofs.tagmatch.prove import prove as tagmatch_prove
from verbspec.refimpl.cli import check as cli
from verbspec.refimpl.cli.inputs import DEFAULTS
from verbspec.refimpl.cli.main import main
from verbspec.spec import protocols
from verbspec.spec.tagmatch.system import build as build_tagmatch

# a tagmatch instance small enough to prove in a second, and used by no other test here
SMALL_TAG = {"messages": 1, "receives": 1, "max_bytes": 1, "capacity": 0, "probe": 0}


@pytest.fixture
def recorded(monkeypatch):
    """Every method run by the CLI, with the options it got, each reporting 'held'; a prover
    started apart is recorded as such."""
    calls: list[tuple[str, str, Options, bool]] = []

    def rows(protocol, method, values, variants):
        system = protocols.load(protocol).build(values, variants)
        return [Result(inv.name, protocol, method, "held", "test bound", 0.0)
                for inv in system.invariants]

    def run(protocol, method, values, variants, opts):
        calls.append((protocol, method, opts, False))
        return rows(protocol, method, values, variants)

    class Apart(ProverApart):
        def __init__(self, protocol, values, variants, opts):
            calls.append((protocol, "prove", opts, True))
            self.protocol, self.rows = protocol, rows(protocol, "prove", values, variants)

        def result(self):
            return self.rows

        def stop(self):
            calls.append((self.protocol, "stopped", None, True))

    def agree(protocol, values, variants, trace_dir, progress=None):
        calls.append((protocol, "conform", None, False))
        return [Result("refimpl_engine_agrees", protocol, "conform", "held", "test bound",
                       0.0)], []

    monkeypatch.setattr(cli, "run_method", run)
    monkeypatch.setattr(cli.engines_agree, "engine_rows", agree)
    monkeypatch.setattr(cli, "ProverApart", Apart)
    monkeypatch.setattr(cli, "default_workers", lambda: 2)
    return calls


def _budgets(calls, protocol, method):
    [opts] = [o for p, m, o, _ in calls if (p, m) == (protocol, method)]
    return {k: getattr(opts, k) for k in BESIDE_A_PROOF}


def test_the_main_job_sizes_the_bounded_checks_beside_a_proof(recorded, tmp_path, capsys):
    assert main(["check", "--quiet", "--json", "--trace-dir", str(tmp_path)]) == 0
    for p in ("gate", "tagmatch"):
        assert _budgets(recorded, p, "explore") == BESIDE_A_PROOF
        assert _budgets(recorded, p, "bmc") == BESIDE_A_PROOF
    # the gate's prover starts first, apart; the table keeps the usual order
    assert [(p, m, apart) for p, m, _, apart in recorded] == [
        ("gate", "prove", True), ("gate", "explore", False), ("gate", "bmc", False),
        ("tagmatch", "explore", False), ("tagmatch", "bmc", False),
        ("tagmatch", "prove", False), ("gate", "stopped", True), ("gate", "conform", False),
        ("tagmatch", "conform", False)]
    rows = json.loads(capsys.readouterr().out)["results"]
    order = list(dict.fromkeys((r["protocol"], r["method"]) for r in rows))
    assert order == [(p, m) for p in ("gate", "tagmatch")
                     for m in ("explore", "bmc", "prove", "conform")]


@pytest.mark.parametrize("argv, gate_explore, gate_bmc", [
    # --thorough: the full budgets everywhere
    (["--thorough"], DEFAULTS.examples, DEFAULTS.walks),
    # a budget given is kept; the others still beside a proof
    (["--examples", "7"], 7, BESIDE_A_PROOF["walks"]),
    (["--walks", "0"], BESIDE_A_PROOF["examples"], 0),
])
def test_thorough_or_a_budget_given_overrides_the_main_jobs_budgets(recorded, tmp_path, argv,
                                                                    gate_explore, gate_bmc):
    assert main(["check", "--quiet", "--json", "--trace-dir", str(tmp_path), *argv]) == 0
    assert _budgets(recorded, "gate", "explore")["examples"] == gate_explore
    assert _budgets(recorded, "gate", "bmc")["walks"] == gate_bmc


def test_a_method_asked_for_by_name_keeps_the_full_budgets(recorded, tmp_path):
    assert main(["check", "--quiet", "--json", "--method", "explore", "--trace-dir",
                 str(tmp_path)]) == 0
    assert {p: _budgets(recorded, p, "explore")["examples"] for p in ("gate", "tagmatch")} == {
        "gate": DEFAULTS.examples, "tagmatch": DEFAULTS.examples}
    assert not any(apart for *_, apart in recorded)


def test_without_a_proof_the_bounded_checks_keep_the_full_budgets(recorded, tmp_path):
    # RC is outside the gate model: prove is skipped, explore and bmc are the verdict
    assert main(["check", "--quiet", "--json", "--protocol", "gate", "--param", "qp_type=rc",
                 "--trace-dir", str(tmp_path)]) == 0
    assert _budgets(recorded, "gate", "explore")["examples"] == DEFAULTS.examples
    assert _budgets(recorded, "gate", "bmc")["walks"] == DEFAULTS.walks
    assert [m for _, m, _, _ in recorded] == ["explore", "bmc", "conform"]


def test_a_prover_apart_is_stopped_when_a_check_beside_it_fails(recorded, monkeypatch,
                                                                 tmp_path, capsys):
    def broken(protocol, method, values, variants, opts):
        raise RuntimeError("a bug in a checker")

    monkeypatch.setattr(cli, "run_method", broken)
    assert main(["check", "--quiet", "--trace-dir", str(tmp_path)]) == 4
    assert "a bug in a checker" in capsys.readouterr().err
    assert [(p, m) for p, m, _, _ in recorded] == [("gate", "prove"), ("gate", "stopped")]


def test_one_core_proves_in_turn(recorded, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "default_workers", lambda: 1)
    assert main(["check", "--quiet", "--json", "--protocol", "gate", "--trace-dir",
                 str(tmp_path)]) == 0
    assert [(m, apart) for _, m, _, apart in recorded] == [
        ("explore", False), ("bmc", False), ("prove", False), ("conform", False)]


def test_a_prover_apart_gives_what_it_gives_here_and_relays_its_notes(tmp_path):
    notes: list[str] = []
    opts = Options(trace_dir=tmp_path, progress=notes.append)
    values = {**SMALL_TAG, "tags": 2}
    apart = ProverApart("tagmatch", values, (), opts).result()
    here = run_method("tagmatch", "prove", values, (), replace(opts, progress=None))

    def shown(rows):
        return [(r.invariant, r.verdict, r.bound.replace(", reached earlier in this run", ""))
                for r in rows]

    assert shown(apart) == shown(here)
    assert {r.verdict for r in apart} == {"proved"}
    assert notes and all(n.startswith("tagmatch prove: ") for n in notes), notes


def test_a_prover_apart_that_fails_says_so(tmp_path):
    # messages=9 is refused when the prover builds the system, in its own process
    prover = ProverApart("tagmatch", {"messages": 9}, (), Options(trace_dir=tmp_path))
    with pytest.raises(RuntimeError, match=r"the tagmatch prover failed: .*messages"):
        prover.result()


def test_a_prover_apart_is_stopped_when_the_job_gives_up(tmp_path):
    # the default instance takes seconds: stopped at once, it leaves no process behind
    prover = ProverApart("tagmatch", {}, (), Options(trace_dir=tmp_path))
    prover.stop()
    assert not prover._child.is_alive() and prover._child.exitcode != 0


def test_the_prover_does_not_search_a_fixpoint_already_reached_again():
    values = {**SMALL_TAG, "comms": 2}
    system = build_tagmatch(values)
    # outside a run of checks nothing is remembered (a test may change the spec's code)
    tagmatch_prove(values)
    assert search.known_fixpoint(system, system.variants) is None
    with search.shared_fixpoints():
        first = tagmatch_prove(values)
        assert search.known_fixpoint(system, system.variants) is not None
        again = tagmatch_prove(values)
        # a search cut short, or under a fault limit, is no fixpoint
        other = build_tagmatch({**SMALL_TAG, "comms": 3})
        search.bounded_search(other, depth=3, variants=other.variants)
        search.bounded_search(other, depth=100, variants=other.variants, max_faults=0)
        assert search.known_fixpoint(other, other.variants) is None
    assert search.known_fixpoint(system, system.variants) is None
    assert [r.verdict for r in again] == [r.verdict for r in first]
    assert "reached earlier in this run" not in first[0].bound
    assert "reached earlier in this run" in again[0].bound
    assert first[0].bound.split(" (")[0] == again[0].bound.split(" (")[0]   # the same states
