"""`verbspec trace`: message-sequence diagrams of real counterexample traces."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from verbspec.proofs.explore import explore
from verbspec.proofs.traces import write_trace
from verbspec.refimpl.traces.render import (
    build_gate,
    default_output,
    render_file,
    render_svg,
    trace_main,
    validate,
)
from verbspec.spec.gate import system as gate_system
from verbspec.spec.itf import TraceFormatError, decode
from verbspec.spec.tagmatch import system as tagmatch_system

SVG = "{http://www.w3.org/2000/svg}"


def _trace_doc(tmp: Path, module, variant: str) -> dict:
    result = explore(module.build({}, [variant]), examples=100, steps=200, variants=[variant])
    assert result.trace is not None, f"{variant} should be refuted"
    path = write_trace(result.trace, tmp / f"{module.PROTOCOL}-{variant}.itf.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("traces")
    return {
        "no-barrier": _trace_doc(tmp, gate_system, "no-barrier"),
        "tag-every-chunk": _trace_doc(tmp, gate_system, "tag-every-chunk"),
        "fin-before-read": _trace_doc(tmp, tagmatch_system, "fin-before-read"),
    }


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)   # raises on malformed XML
    assert root.tag == f"{SVG}svg"
    return root


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _with_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if cls in (e.get("class") or "").split()]


@pytest.mark.parametrize("name", ["no-barrier", "tag-every-chunk", "fin-before-read"])
def test_diagram_is_svg_with_a_row_per_step_and_the_violation(traces, name):
    doc = traces[name]
    root = _parse(render_svg(doc))
    steps = _with_class(root, "step")
    assert [int(g.get("data-index")) for g in steps] == list(range(len(doc["states"])))
    assert [g.get("data-action") for g in steps] == [s["action"] for s in doc["states"]]
    texts = _texts(root)
    violation = doc["#meta"]["violation"]
    assert f"violated invariant: {violation}" in texts
    footer = _with_class(root, "footer")[0]
    said = " ".join(t.text or "" for t in footer.iter(f"{SVG}text") if t.get("class") == "err")
    assert said == doc["#meta"]["message"]
    # the violating step, and only it, sits on the red band
    assert len(_with_class(root, "violation")) == 1


def test_no_barrier_shows_the_uc_drop(traces):
    doc = traces["no-barrier"]
    root = _parse(render_svg(doc))
    dropped = _with_class(root, "dropped")
    assert len(dropped) == 1
    assert "dropped" in _texts(dropped[0])
    assert doc["states"][-1]["action"] == "deliver"


def test_messages_pair_transmit_with_its_delivery_in_fifo_order(traces):
    doc = traces["tag-every-chunk"]
    steps = validate(doc)
    diagram = build_gate(decode(doc["#meta"]), steps)
    msgs = [a for a in diagram.arrows if not a.dashed]
    transmits = [i for i, s in enumerate(steps) if s[0] == "transmit"]
    assert sorted(a.src_row for a in msgs) == transmits
    for a in msgs:
        if a.dst_row is None:
            continue
        src = steps[a.src_row][1]["rank"]
        assert steps[a.dst_row][0] == "deliver" and steps[a.dst_row][1]["src"] == src
        sent = steps[a.src_row][2]["fabric"]["wire"][src][-1]
        taken = steps[a.dst_row - 1][2]["fabric"]["wire"][src][0]
        assert sent == taken
    # both 0xD1 barrier bytes are written and read: two dashed TCP arrows, each write -> read
    tcp = [a for a in diagram.arrows if a.dashed]
    assert len(tcp) == 2
    for a in tcp:
        assert steps[a.src_row][0] == "barrier_write"
        assert steps[a.dst_row][0] == "barrier_read"
        assert a.src_lane != a.dst_lane


def test_tagmatch_has_sender_and_receiver_lanes(traces):
    texts = _texts(_parse(render_svg(traces["fin-before-read"])))
    assert "sender 0" in texts and "receiver" in texts
    assert any(t.startswith("fin_arrive(") for t in texts)


def test_unexpected_shape_falls_back_to_a_table(traces):
    doc = copy.deepcopy(traces["no-barrier"])
    for st in doc["states"]:
        del st["ranks"]
    root = _parse(render_svg(doc))
    assert len(_with_class(root, "step")) == len(doc["states"])
    assert any("shown as a table" in t for t in _texts(root))


def test_text_is_escaped():
    doc = {"#meta": {"protocol": "other<&>", "violation": "a<b", "message": "x & y"},
           "states": [{"#meta": {"index": 0}, "action": "init", "args": {}},
                      {"#meta": {"index": 1}, "action": "go<&\"'>", "args": {"k": "<v>"}}]}
    texts = _texts(_parse(render_svg(doc)))
    assert "go<&\"'>(k=<v>)" in texts


@pytest.mark.parametrize(("mutate", "where"), [
    (lambda d: d["states"][3].pop("action"), r"$.states[3].action: missing"),
    (lambda d: d["states"][2].__setitem__("action", 7), r"$.states[2].action: not a string"),
    (lambda d: d["states"][1].pop("args"), r"$.states[1].args: missing"),
    (lambda d: d["states"][1]["ranks"][0].__setitem__("op", {"#bigint": "x"}),
     r"$.states[1].ranks[0].op: #bigint"),
    (lambda d: d.pop("states"), r"$.states: missing"),
    (lambda d: d.pop("#meta"), r"$.#meta: missing"),
])
def test_malformed_traces_name_the_json_path(traces, mutate, where):
    doc = copy.deepcopy(traces["no-barrier"])
    mutate(doc)
    with pytest.raises(TraceFormatError) as err:
        render_svg(doc)
    assert str(err.value).startswith(where)


def test_trace_main_writes_svg_or_html_and_reports_bad_input(traces, tmp_path, capsys):
    path = tmp_path / "t.itf.json"
    path.write_text(json.dumps(traces["no-barrier"]))
    assert default_output(path) == tmp_path / "t.svg"

    assert trace_main(SimpleNamespace(file=path, svg=None, html=False)) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "t.svg")
    _parse((tmp_path / "t.svg").read_text())

    assert trace_main(SimpleNamespace(file=path, svg=None, html=True)) == 0
    html = (tmp_path / "t.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html

    out = tmp_path / "other.svg"
    render_file(path, out)
    assert out.read_text() == (tmp_path / "t.svg").read_text()

    bad = tmp_path / "bad.itf.json"
    bad.write_text("{not json")
    assert trace_main(SimpleNamespace(file=bad, svg=None, html=False)) == 3
    assert capsys.readouterr().err.startswith("verbspec trace: ")
    assert not (tmp_path / "bad.svg").exists()
