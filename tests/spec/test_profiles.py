"""Profiles: named sets of variants that are one implementation as written. ``check
--profile`` runs their variants together, and bmc then looks for a shortest violation of each
invariant on its own and names the variants each trace needs."""

from __future__ import annotations

import json

import pytest

from verbspec.proofs.traces import read_moves
from verbspec.refimpl.cli.main import main
from verbspec.spec import protocols
from verbspec.spec.gate.system import INVARIANTS, PROFILES, VARIANTS, build
from verbspec.spec.lts import InvariantViolation, replay

# small budgets: the findings are shallow; what holds is reported to the bound searched
SMALL = ("--depth", "12", "--fault-free-max-states", "3000", "--one-fault-max-states", "3000")

# invariant -> (trace length, the variant the trace needs): ds4 v14's shallow findings
DS4_FINDINGS = {
    "chunk_alignment": (12, "no-seq-check"),
    "send_accounting": (12, "stray-send-completion"),
}


def test_every_member_of_a_profile_is_a_variant_of_its_protocol():
    for p in protocols.MODULES:
        mod = protocols.load(p)
        known = {v.name for v in mod.VARIANTS}
        for prof in mod.PROFILES:
            assert prof.variants and set(prof.variants) <= known, prof.name
            assert all(where for _, where in prof.members)
    assert {f.name for f in PROFILES} == {"ds4-v14"}


def test_ds4_v14_reports_each_invariant_with_the_variant_each_trace_needs(tmp_path, capsys):
    code = main(["check", "--profile", "ds4-v14", "--method", "bmc", "--json", "--quiet",
                 "--trace-dir", str(tmp_path), *SMALL])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["profile"] == "ds4-v14"
    assert doc["variants"] == {"gate": list(PROFILES[0].variants)}
    assert doc["params"]["cq_depth"] == 512           # ds4's CQ, the profile's parameter
    assert doc["params"]["warm_recv_leftover"] == 0   # ds4's warm-up reaps its receive
    assert doc["params"]["warm_send_leftovers"] == 20  # but maybe none of its 20 sends
    rows = {r["invariant"]: r for r in doc["results"]}
    assert list(rows) == list(INVARIANTS)
    violated = {n for n, r in rows.items() if r["verdict"] == "violated"}
    assert violated == set(DS4_FINDINGS)
    for inv, (length, needs) in DS4_FINDINGS.items():
        r = rows[inv]
        assert r["bound"].startswith(f"trace of {length} steps, a shortest run: no run of "
                                     f"<= {length - 1} steps breaks {inv} (")
        assert r["detail"].endswith(f"; needs {needs} ({PROFILES[0].source(needs)})")
        meta, moves = read_moves(r["trace"])
        assert len(moves) == length and meta["violation"] == inv
        assert meta["variants"] == PROFILES[0].variants
        # the variant it needs is the one that breaks this invariant
        assert inv in next(v.breaks for v in VARIANTS if v.name == needs)
        assert main(["replay", r["trace"]]) == 1
        capsys.readouterr()
        # without that variant the same moves do not reach the violation
        rest = [v for v in PROFILES[0].variants if v != needs]
        try:
            replay(build(meta["params"], rest), moves, rest)
            reached = None
        except InvariantViolation as e:
            reached = e.invariant
        except ValueError:      # a move the spec without the variant does not enable
            reached = None
        assert reached != inv
    for inv in set(rows) - violated:
        assert rows[inv]["verdict"] == "held"
        assert rows[inv]["bound"].startswith("all runs of <= 12 steps (")


def test_other_methods_run_the_profile_as_its_variants(tmp_path, capsys):
    code = main(["check", "--profile", "ds4-v14", "--method", "explore", "--json", "--quiet",
                 "--examples", "50", "--trace-dir", str(tmp_path), "--param", "cq_depth=600"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert doc["params"]["cq_depth"] == 600           # a --param overrides the profile's
    (bad,) = [r for r in doc["results"] if r["verdict"] == "violated"]
    # exploration stops at its first violation: one a variant the trace needs says it breaks
    prof = PROFILES[0]
    needs = [v for v in VARIANTS
             if v.name in prof.variants and f"{v.name} ({prof.source(v.name)})" in bad["detail"]]
    assert needs and all(bad["invariant"] in v.breaks for v in needs)


@pytest.mark.parametrize("args, message", [
    (("--profile", "ds4-v99"), "unknown profile 'ds4-v99' (known: ds4-v14)"),
    (("--profile", "ds4-v14", "--protocol", "tagmatch"), "unknown profile 'ds4-v14' (known: "
                                                         "none)"),
])
def test_an_unknown_profile_exits_3_naming_it(args, message, capsys):
    assert main(["check", *args]) == 3
    assert message in capsys.readouterr().err


def test_profiles_lists_each_member_with_where_the_implementation_does_it(capsys):
    assert main(["profiles", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["profiles"]
    assert row["name"] == "ds4-v14" and row["protocol"] == "gate"
    assert [v["name"] for v in row["variants"]] == list(PROFILES[0].variants)
    assert all("ds4_tp.c" in v["where"] for v in row["variants"])
    assert row["params"] == ["cq_depth=512", "warm_send_leftovers=20", "warm_recv_leftover=0",
                             "verify_blocks=1"]
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "--param cq_depth=512" in out and "--param warm_recv_leftover=0" in out
