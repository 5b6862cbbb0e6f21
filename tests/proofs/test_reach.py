"""Per-mode coverage (proofs/reach.py, spec/modes.py): which methods of a run of checks reached
each mode of a protocol, and the warning ``check`` gives for a mode none reached."""

from __future__ import annotations

import json

from verbspec.proofs.reach import mode_reach, unreached
from verbspec.proofs.report import DRIFTED, Result
from verbspec.refimpl.cli.main import main
from verbspec.spec import protocols


def row(method: str, verdict: str = "held", coverage: dict | None = None,
        protocol: str = "gate") -> Result:
    return Result("no_silent_drop", protocol, method, verdict, "b", 1.0, coverage=coverage)


def reach(results, values=None, protocol="gate"):
    return {m.mode: m.methods for m in mode_reach(protocol, values or {}, (), results)}


def test_a_mode_is_reached_by_a_configuration_with_it_taking_a_step_that_shows_it():
    got = reach([row("explore", coverage={"actions": {"setup": 3, "gate_done": 9,
                                                      "crash": 1}})])
    assert got["two-chunk vectors"] == ("explore",)      # the defaults' vectors are two chunks
    assert got["fault: crash"] == ("explore",)
    assert got["fault: timeout"] == ()                    # the defaults have it; not taken
    assert got["verify blocks"] == ()                     # not in the defaults
    # a configuration without the mode does not reach it, whatever it took
    one_chunk = reach([row("bmc", coverage={"actions": {"gate_done": 1}})],
                      {"vec_bytes": 1024})
    assert one_chunk["two-chunk vectors"] == ()


def test_a_proof_covers_every_mode_its_configuration_has_and_a_drifted_one_none():
    proved = reach([row("prove", "proved")])
    params = protocols.load("gate").build({}).params
    has = {m.name for m in protocols.modes("gate") if m.has(params)}
    assert {name for name, methods in proved.items() if methods == ("prove",)} == has
    assert "verify blocks" not in has and "fault: timeout" in has
    assert all(not m for m in reach([row("prove", DRIFTED)]).values())
    assert all(not m for m in reach([row("prove", "inconclusive")]).values())


def test_conform_rows_reach_the_modes_of_each_configuration_they_ran():
    cov = {"actions": {}, "configs": [{"values": {}, "actions": {"deliver": 4}},
                                      {"values": {"qp_type": "rc"}, "actions": {"deliver": 2}},
                                      {"values": {"verify_blocks": 1}, "actions": {"setup": 1}}]}
    got = reach([row("conform", coverage=cov)])
    assert got["UC queue pair"] == got["RC queue pair"] == ("conform",)
    assert got["verify blocks"] == ()           # its configuration ran, but no block ended


def test_unreached_modes_are_warned_in_the_json_and_the_table(capsys, tmp_path):
    args = ["check", "--protocol", "tagmatch", "--method", "bmc", "--param", "messages=1",
            "--param", "receives=1", "--quiet", "--trace-dir", str(tmp_path)]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    modes = {m["mode"]: m["methods"] for m in doc["modes"]}
    assert modes["eager"] == ["bmc"] and modes["two senders"] == []
    assert "tagmatch: no method reached the mode 'two senders'" in doc["warnings"]
    assert len(doc["warnings"]) == len(unreached(mode_reach(
        "tagmatch", {"messages": 1, "receives": 1}, (), [Result(**{
            **r, "seconds": r["seconds"]}) for r in doc["results"]])))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "tagmatch: the modes the checks reached" in out
    assert "warning: tagmatch: no method reached the mode 'two senders'" in out
    assert out.rstrip().endswith("exit 0")
