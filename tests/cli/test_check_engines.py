"""``verbspec check`` holds the spec against the independent engines (refimpl/conformance/
engines_agree.py): a short lockstep run of each protocol's spec against its C engine and its
Python engine, each a reading of the protocol apart from the spec. A spec whose slot mapping
is off by one fails the main job here, naming the step, apart from its own invariant
(chunk_alignment judges slots by ds4's formula restated apart: tests/spec/test_gate_steps.py)."""

from __future__ import annotations

import json

from verbspec.refimpl.cli.main import main as cli
from verbspec.refimpl.conformance.engines_agree import ENGINES, METHOD, engine_rows, row_name
from verbspec.spec.gate.params import GateConfig


def test_the_spec_agrees_with_both_engines_of_both_protocols(tmp_path, capsys):
    code = cli(["check", "--method", METHOD, "--json", "--quiet", "--trace-dir",
                str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = {(r["protocol"], r["invariant"]): r for r in out["results"]}
    ran = {e for (_, inv) in rows for e in ENGINES if inv == row_name(e)}
    assert "refimpl" in ran
    for r in rows.values():
        assert r["method"] == METHOD and r["verdict"] == "held", r
        assert "lockstep runs" in r["bound"] and r["coverage"]["actions"]
    for s in out["skipped"]:     # only an engine that was not built is left out
        assert s["method"] == METHOD and "native" in s["reason"]


def test_a_spec_slot_mapping_off_by_one_is_a_violation_naming_the_step(tmp_path, monkeypatch):
    right = GateConfig.slot
    monkeypatch.setattr(GateConfig, "slot", lambda self, seq: right(self, seq + 1))
    rows, _ = engine_rows("gate", {}, (), tmp_path)
    assert rows and all(r.verdict == "violated" for r in rows)
    for r in rows:
        assert "the spec and the" in r.detail and "step" in r.detail, r.detail
        assert "gate order broke" in r.detail, r.detail
        assert r.trace is not None


def test_a_variant_leaves_the_engines_out_saying_why(tmp_path):
    rows, skipped = engine_rows("gate", {}, ("no-barrier",), tmp_path)
    assert rows == [] and [s["invariant"] for s in skipped] == [row_name(e) for e in ENGINES]
    for s in skipped:
        assert (s["protocol"], s["method"]) == ("gate", METHOD)
        assert "the engines implement the base protocol" in s["reason"]


def test_any_source_matching_across_communicators_is_met_by_the_two_communicator_mode(
        tmp_path, monkeypatch):
    """A spec whose wildcard source matches a message of another communicator: the defaults
    have one communicator, so only the mode with two meets it."""
    from verbspec.spec.tagmatch import lists

    def across(r, m):
        return ((r.comm == m.comm or r.src == lists.ANY) and (r.src == lists.ANY or
                r.src == m.src) and (r.tag == lists.ANY or r.tag == m.tag))

    monkeypatch.setattr(lists, "envelope_matches", across)
    rows, _ = engine_rows("tagmatch", {}, (), tmp_path)
    assert rows and all(r.verdict == "violated" for r in rows), [r.detail for r in rows]
    for r in rows:
        assert "comms=2, senders=2" in r.detail, r.detail
