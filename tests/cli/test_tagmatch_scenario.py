"""`verbspec match`: the scenario format, its errors, and offload giving the software outcome."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tagmatch_cases import random_events

from verbspec.refimpl.cli import scenario as sc


def post(rid, src="any", tag="any", comm=0, nbytes=8):
    return {"op": "post_recv", "id": rid, "comm": comm, "src": src, "tag": tag, "bytes": nbytes}


def arrive(mid, src, tag, comm=0, nbytes=8):
    return {"op": "arrive", "id": mid, "comm": comm, "src": src, "tag": tag, "bytes": nbytes}


def outcome(doc):
    s = sc.parse(doc)
    return sc.run(s).as_json(s.eager_limit)


def run_main(tmp_path, doc, capsys):
    p = tmp_path / "s.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    code = sc.match_main(str(p))
    out, err = capsys.readouterr()
    return code, out, err


def test_output_format_protocol_and_truncation(tmp_path, capsys):
    doc = {"events": [post("r1", nbytes=100), post("r2", src=1, tag=7, nbytes=4),
                      arrive("m1", 0, 3, nbytes=100), arrive("m2", 1, 7, nbytes=9000),
                      arrive("m3", 1, 7), post("r3", src=2), {"op": "cancel", "id": "r3"}],
           "eager_limit": 8192}
    code, out, err = run_main(tmp_path, doc, capsys)
    assert code == 0 and err == ""
    assert json.loads(out) == {
        "matches": [{"recv": "r1", "send": "m1", "protocol": "eager", "truncated": False},
                    {"recv": "r2", "send": "m2", "protocol": "rndv", "truncated": True}],
        "unexpected": ["m3"], "pending": [], "cancelled": ["r3"]}


def test_cancel_after_match_fails_and_receive_stays_matched():
    out = outcome({"events": [post("r"), arrive("m", 0, 0), {"op": "cancel", "id": "r"}]})
    assert out["cancelled"] == [] and out["matches"][0]["recv"] == "r"


@pytest.mark.parametrize("doc, where", [
    ("[1,", "$: not JSON"),
    ([], "$: expected an object"),
    ({}, "$.events: missing"),
    ({"events": {}}, "$.events: expected a list"),
    ({"events": [], "extra": 1}, "$.extra: unknown key"),
    ({"events": [], "eager_limit": -1}, "$.eager_limit: expected a non-negative integer"),
    ({"events": [], "offload": {"capacity": "2"}}, "$.offload.capacity: expected"),
    ({"events": [], "offload": {"size": 2}}, "$.offload.size: unknown key"),
    ({"events": [7]}, "$.events[0]: expected an object"),
    ({"events": [{"op": "send"}]}, "$.events[0].op: expected"),
    ({"events": [post("r"), post("s", tag=1.5)]},
     '$.events[1].tag: expected an integer or "any"'),
    ({"events": [post("r", src=-1)]}, '$.events[0].src: expected an integer or "any"'),
    ({"events": [arrive("m", "any", 0)]}, "$.events[0].src: expected a non-negative integer"),
    ({"events": [arrive("m", 0, 0, nbytes=-3)]},
     "$.events[0].bytes: expected a non-negative integer"),
    ({"events": [arrive("m", 0, True)]}, "$.events[0].tag: expected a non-negative integer"),
    ({"events": [post("x"), arrive("x", 0, 0)]}, "$.events[1].id: duplicate id 'x'"),
    ({"events": [post("x"), post("x")]}, "$.events[1].id: duplicate id 'x'"),
    ({"events": [{"op": "cancel", "id": "nope"}]},
     "$.events[0].id: 'nope' names no receive posted before"),
    ({"events": [arrive("m", 0, 0), {"op": "cancel", "id": "m"}]},
     "$.events[1].id: 'm' names no receive"),
    ({"events": [post("r"), {"op": "cancel", "id": "r"}, {"op": "cancel", "id": "r"}]},
     "$.events[2].id: receive 'r' is cancelled twice"),
    ({"events": [{"op": "post_recv", "id": "r", "comm": 0, "src": 0, "tag": 0}]},
     "$.events[0].bytes: missing"),
    ({"events": [{"op": "cancel", "id": 3}]}, "$.events[0].id: expected a string"),
    ({"events": [{**arrive("m", 0, 0), "size": 1}]}, "$.events[0].size: unknown key"),
])
def test_malformed_input_exits_3_naming_the_json_path(tmp_path, capsys, doc, where):
    code, out, err = run_main(tmp_path, doc, capsys)
    assert code == 3 and out == ""
    assert err.startswith("verbspec match: ") and where in err, err


def test_unreadable_file_exits_3(tmp_path, capsys):
    assert sc.match_main(str(tmp_path / "missing.json")) == 3
    assert "cannot read" in capsys.readouterr().err


def test_module_entry_point(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"events": [post("r"), arrive("m", 0, 0)]}))
    res = subprocess.run([sys.executable, "-m", "verbspec.refimpl.cli.scenario", str(p)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["matches"][0] == {"recv": "r", "send": "m",
                                                    "protocol": "eager", "truncated": False}


def test_offload_race_shape_gives_the_software_outcome():
    # m1 and m2 both match b1, b1 posted between them; a hardware receive ahead of b1 keeps
    # hardware busy. The offload must still give b1 <- m1.
    events = [post("h", src=5, tag=5), arrive("m1", 0, 1), post("b1", src=0, tag=1),
              arrive("m2", 0, 1), post("b2", src=0, tag=1)]
    want = outcome({"events": events})
    assert want["matches"][0]["send"] == "m1"
    for cap in (1, 2, 3):
        assert outcome({"events": events, "offload": {"capacity": cap}}) == want


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80), cap=st.integers(1, 6))
def test_offload_capacity_does_not_change_the_outcome(seed, n, cap):
    events = random_events(random.Random(seed), n)
    assert (outcome({"events": events, "offload": {"capacity": cap}})
            == outcome({"events": events}))


def test_random_scenarios_exercise_hardware_matches_and_claims():
    # the property above is only worth something if the offload really matches in hardware
    # and software really claims hardware receives from its shadow list
    total = {"hw_matches": 0, "claims": 0}
    for seed in range(100):
        events = random_events(random.Random(seed), 60)
        got = sc.run_offload(sc.parse({"events": events, "offload": {"capacity": 3}}))
        for k in total:
            total[k] += got.stats[k]
    assert total["hw_matches"] > 20 and total["claims"] > 20, total


def test_fast_runner_agrees_with_list_engine_on_random_scenarios():
    from verbspec.spec.tagmatch import lists as tm
    rng = random.Random(11)
    for _ in range(200):
        s = sc.parse({"events": random_events(rng, rng.randint(0, 120))})
        e, matches, cancelled = tm.Engine(), [], []
        for op, arg in s.spec_events():
            if op == "post_recv":
                e, mt = tm.post_recv(e, arg)
            elif op == "arrive":
                e, mt = tm.arrive(e, arg)
            else:
                e, ok = tm.cancel(e, arg)
                cancelled += [arg] if ok else []
                mt = None
            matches += [(mt.recv.id, mt.msg.id, mt.msg.bytes, mt.recv.bytes)] if mt else []
        got = sc.run_software(s)
        assert got.matches == matches and got.cancelled == cancelled
        assert got.unexpected == list(e.unexpected_ids())
        assert got.pending == list(e.posted_ids())


def test_fast_and_careful_parsers_agree():
    rng = random.Random(5)
    for _ in range(100):
        events = random_events(rng, rng.randint(0, 60))
        assert sc._parse_events_fast(events) == sc._parse_events(events)
