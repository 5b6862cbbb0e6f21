"""UCX's own tag matching through the tag-matching adapter (refimpl/bindings/ucx_tagmatch.py over
the shim native/ucx/ucx_tag_shim.c): random runs and every edge of the configurations it can express
agree with the spec in what it shows; each spec feature it cannot express is declined or left
uncompared with its reason; a planted wrong mask is caught. Where UCX or the shim is missing
the tests skip, saying so (VERBSPEC_REQUIRE_UCX=1 turns the skip into a failure)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import require

from verbspec import native
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance.gate import CONFORMANCE
from verbspec.refimpl.conformance.tagmatch import (
    PATH_CONFIGS,
    SWEEP_CONFIGS,
    Declined,
    TagmatchHarness,
    conform,
    conform_every_edge,
    resolve,
)
from verbspec.refimpl.engines.observes import EMITTED_FIELDS, Limit, Observes
from verbspec.refimpl.engines.tagmatch_engine import Emitted, EngineError, Read
from verbspec.spec.tagmatch.lists import ANY
from verbspec.spec.tagmatch.state import OK, TRUNCATED
from verbspec.spec.tagmatch.system import TagMatchSystem, build

HEADER = Path("/usr/include/ucp/api/ucp.h")
UCX = native.engine("ucx")
# the actions a configuration without offload has
ACTIONS = {"send", "deliver", "post_recv", "cancel", "probe", "rndv_read", "rndv_read_done",
           "send_fin", "fin_arrive"}
# two senders, one receive, eager (1 byte) and rendezvous (2), truncation, cancel, probe
SMALL = {"senders": 2, "messages": 1, "receives": 1, "capacity": 0, "probe": 1,
         "max_bytes": 2, "eager_limit": 1}
RANDOM = [{"capacity": 0},
          {"senders": 2, "messages": 2, "receives": 3, "tags": 2, "capacity": 0,
           "max_bytes": 3, "eager_limit": 1},
          {"senders": 3, "messages": 3, "receives": 4, "tags": 2, "comms": 2, "capacity": 0,
           "max_bytes": 3, "eager_limit": 2}]


@pytest.fixture
def ucx():
    """The ``--impl ucx`` factory; a skip (a failure under VERBSPEC_REQUIRE_UCX=1) saying
    what is missing."""
    from verbspec.refimpl.bindings.ucx_tagmatch import NOT_BUILT

    require("ucx", None if native.load("ucx") is not None else NOT_BUILT)
    return resolve("ucx")


def _ids(v: dict) -> str:
    return ",".join(f"{k}={x}" for k, x in v.items())


# ---------------------------------------------------------------------------- agreement
@pytest.mark.parametrize("values", RANDOM, ids=_ids)
def test_random_runs_agree(ucx, values):
    rep = conform(build(values), ucx, "ucx", sequences=60, steps=400)
    assert rep.mismatch is None, str(rep.mismatch)
    assert set(rep.actions) == ACTIONS
    assert rep.steps > 600


def test_every_edge_of_a_small_configuration_agrees(ucx):
    sweep = TagmatchHarness(build(SMALL), ucx).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert (sweep.states, sweep.edges) == (1_109, 8_798)
    assert set(sweep.actions) == ACTIONS


@pytest.mark.slow
def test_every_expressible_sweep_configuration_agrees(ucx):
    rep = conform_every_edge(ucx, "ucx")
    assert rep.mismatch is None, str(rep.mismatch)
    offload = [c for c in SWEEP_CONFIGS if c["capacity"] > 0]
    assert rep.sweep["configs"] == len(SWEEP_CONFIGS) - len(offload)
    walks = [c for c, _ in PATH_CONFIGS if c["capacity"] == 0]
    assert rep.sweep["path_configs"] == len(walks)
    assert len(rep.declined) == len(offload) + len(PATH_CONFIGS) - len(walks)
    # and the offload configurations as UCX can run them, without offload
    plain = [replace_capacity(c) for c in offload]
    rep = conform_every_edge(ucx, "ucx", plain)
    assert rep.mismatch is None, str(rep.mismatch)
    assert rep.sweep["configs"] == len(plain) and not rep.declined


def replace_capacity(values: dict) -> dict:
    return {**values, "capacity": 0}


def test_truncation_and_a_rendezvous_completion_come_from_ucx(ucx):
    # one sender, a 2-byte (rendezvous) message into a 1-byte receive: UCX truncates at the
    # match; the completion is given at the spec's rndv_read_done
    impl = ucx(build({"capacity": 0, "max_bytes": 2, "eager_limit": 1}).params)
    assert impl.send(0, 0, 0, 2) == Emitted()
    assert impl.delivered(_packet(impl, 0)) == Emitted()          # unexpected
    assert impl.probe(0, ANY, ANY) == Emitted(probe=(0,))
    assert impl.post_recv(0, 0, 0, 1) == Emitted(matches=((0, 0),))
    assert impl.start_read(0) == Emitted()
    assert impl.read_done(0) == Emitted(completions=((0, TRUNCATED),))
    assert impl.send_fin(0) == Emitted()
    assert impl.fin(0) == Emitted(released=(0,))
    # an eager message into a receive long enough: matched and complete at arrival
    assert impl.post_recv(0, ANY, 0, 2) == Emitted()
    impl.send(0, 0, 0, 1)
    assert impl.delivered(_packet(impl, 1)) == Emitted(
        matches=((1, 1),), completions=((1, OK),), released=(1,))
    assert impl.cancel(1) == Emitted()                              # matched: cancel fails
    assert impl.probe(0, ANY, ANY) == Emitted(probe=(None,))


def _packet(impl, mid):
    return impl.msgs[mid]


def test_a_copy_replays_its_calls_on_the_shared_worker(ucx):
    import copy

    impl = ucx(build({"capacity": 0}).params)
    impl.post_recv(0, 0, 0, 1)
    twin = copy.deepcopy(impl)
    assert impl.cancel(0) == Emitted(cancelled=(0,))
    # the copy still has receive 0 posted: the worker is reset and its calls replayed
    twin.send(0, 0, 0, 1)
    assert twin.delivered(_packet(twin, 0)) == Emitted(
        matches=((0, 0),), completions=((0, OK),), released=(0,))
    assert impl.probe(0, ANY, ANY) == Emitted(probe=(None,))


# ---------------------------------------------------------------- what UCX cannot express
def test_offload_is_declined(ucx):
    from verbspec.refimpl.bindings.ucx_tagmatch import OFFLOAD

    with pytest.raises(Declined, match="capacity=1 .*without tag-matching offload"):
        TagmatchHarness(build({}), ucx)
    rep = conform_every_edge(ucx, "ucx", [SWEEP_CONFIGS[0]])
    assert rep.sweep["configs"] == 0
    assert list(rep.declined.values()) == [f"capacity=2 (at most 0): {OFFLOAD}"]
    impl = ucx(build({"capacity": 0}).params)
    for step in (impl.hw_op, impl.sw_complete, impl.sw_sync):
        with pytest.raises(EngineError, match="without tag-matching offload"):
            step()


def test_rendezvous_steps_are_not_observed(ucx):
    unobserved = dict(ucx.observes.unobserved)
    assert "no separate READ step" in unobserved["reads"]
    assert "no separate FIN step" in unobserved["fins"]
    h = TagmatchHarness(build({"capacity": 0}), ucx)
    s = h.system.initial()
    # a READ or FIN the implementation leaves out is not a difference; a completion is
    assert h.compare(Emitted(reads=(Read(0, 0, 1),), fins=(0,)), Emitted(), None, s) is None
    assert h.compare(Emitted(completions=((0, OK),)), Emitted(), None, s) == (
        "completions", ((0, OK),), ())


def test_the_wire_is_not_observed(ucx):
    assert "shows no wire" in dict(ucx.observes.unobserved)["sends"]
    impl = ucx(build({"capacity": 0}).params)
    assert impl.send(0, 0, 0, 1) == Emitted()      # recorded; UCX sends at delivery


def test_the_engine_view_is_not_compared(ucx):
    assert ucx.observes.view is False
    assert "queues to itself" in dict(ucx.observes.unobserved)["view"]
    impl = ucx(build({"capacity": 0}).params)
    with pytest.raises(EngineError, match="queues to itself"):
        impl.view()
    # a whole run compares without asking for it
    run = TagmatchHarness(build({"capacity": 0}), ucx).run(random.Random(1), 100)
    assert run.mismatch is None and run.steps > 5


def test_envelopes_beyond_the_tag_bits_are_declined(ucx):
    base = build({"capacity": 0}).params
    for field, value, bits in (("comms", (1 << 20) + 1, "20 bits"),
                               ("senders", (1 << 20) + 1, "20 bits"),
                               ("tags", (1 << 24) + 1, "24 bits")):
        with pytest.raises(Declined, match=f"{field}={value} .*{bits}"):
            TagmatchHarness(TagMatchSystem(replace(base, **{field: value})), ucx)
    impl = ucx(base)
    with pytest.raises(EngineError, match=r"communicator 1048576 is outside 0\.\.1048575"):
        impl.post_recv(1 << 20, 0, 0, 1)


# ---------------------------------------------------------------------- it can fail
def test_a_planted_wrong_mask_is_caught(ucx):
    from verbspec.refimpl.bindings.ucx_tagmatch import UcxFactory

    wrong = UcxFactory(fault="source-bit")
    rep = conform(build(RANDOM[1]), wrong, "ucx", sequences=200, steps=400)
    # a receive or probe for source 1 (or 0) takes or sees the other source's message
    assert rep.mismatch is not None
    assert rep.mismatch.what in ("matches", "probe"), str(rep.mismatch)
    assert rep.mismatch.action in ("post_recv", "deliver", "probe"), str(rep.mismatch)
    assert rep.trace is not None and rep.trace.violation == CONFORMANCE
    # the same runs through the faithful shim agree
    assert conform(build(RANDOM[1]), ucx, "ucx", sequences=rep.sequences,
                   steps=400).mismatch is None


def test_the_partial_comparison_still_fails_on_an_observed_field(ucx):
    h = TagmatchHarness(build({"capacity": 0}), ucx)
    s = h.system.initial()
    assert h.compare(Emitted(matches=((0, 0),)), Emitted(matches=((0, 1),)), None, s) == (
        "matches", ((0, 0),), ((0, 1),))
    assert h.compare(Emitted(probe=(0,)), Emitted(probe=(None,)), None, s) == (
        "probe", (0,), (None,))


def test_observes_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="unknown emitted fields"):
        Observes(emitted=("matchs",))
    with pytest.raises(ValueError, match="unknown parameter 'capcity'"):
        Observes(limits=(Limit("capcity", 0, "no"),))
    assert Observes().emitted == EMITTED_FIELDS


def test_bad_input_is_refused_by_name(ucx):
    from verbspec.refimpl.bindings.ucx_tagmatch import Shim, UcxFactory

    impl = ucx(build({"capacity": 0}).params)
    with pytest.raises(EngineError, match="receive 3 was never posted"):
        impl.cancel(3)
    with pytest.raises(EngineError, match="sender 5 has no message left"):
        impl.send(5, 0, 0, 1)
    with pytest.raises(EngineError, match=r"tag -3 is outside 0\.\.16777215 or ANY"):
        impl.probe(0, 0, -3)
    with pytest.raises(EngineError, match=r"senders 0 is outside 1\.\."):
        Shim(0)
    with pytest.raises(ValueError, match="unknown fault 'flip'"):
        UcxFactory(fault="flip")


def test_a_missing_build_is_named(monkeypatch):
    from verbspec.refimpl.bindings.ucx_tagmatch import NOT_BUILT

    monkeypatch.setattr(native, "load", lambda engine: None)
    with pytest.raises(ValueError, match="apt install libucx-dev"):
        resolve("ucx")
    assert "pip install -e ." in NOT_BUILT


# ----------------------------------------------------------------------- CLI and build
def test_the_cli_reports_agreement_and_what_is_not_compared(ucx, capsys, tmp_path):
    rc = main(["conform", "--impl", "ucx", "--protocol", "tagmatch", "--param", "capacity=0",
               "--examples", "20", "--quiet", "--trace-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "agreement: 20 of 20 runs; disagreements: 0" in out
    assert "not compared: view: UCX keeps its expected and unexpected queues" in out
    rc = main(["conform", "--impl", "ucx", "--protocol", "tagmatch", "--param", "capacity=0",
               "--examples", "20", "--quiet", "--json", "--trace-dir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["mismatches"] == 0 and doc["sequences"] == 20
    assert set(doc["unobserved"]) == {"sends", "revoked", "reads", "fins", "view", "offload"}
    rc = main(["conform", "--impl", "ucx", "--protocol", "tagmatch", "--quiet"])
    assert rc == 3
    assert "cannot express this configuration: capacity=1" in capsys.readouterr().err
    assert main(["conform", "--impl", "ucx", "--quiet"]) == 3       # the gate protocol
    assert "runs with --protocol tagmatch" in capsys.readouterr().err


def test_the_shim_compiles_without_warnings(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    require("ucx", None if cc and HEADER.exists() else
            "no C compiler or no UCX headers (Debian: apt install libucx-dev)")
    done = subprocess.run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra",
                           "-Werror", "-Wpedantic", f"-I{UCX.folder}", "-c",
                           str(UCX.source), "-o", str(tmp_path / "shim.o")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    syms = subprocess.run(["nm", "-g", "--defined-only", str(tmp_path / "shim.o")],
                          capture_output=True, text=True).stdout.split()
    exported = {s for s in syms if s.startswith("vs_")}
    assert exported and all(s.startswith("vs_ucx_") for s in exported)
    data = subprocess.run(["nm", str(tmp_path / "shim.o")], capture_output=True,
                          text=True).stdout
    assert not any(line.split()[-2] in "BbDd" for line in data.splitlines()
                   if len(line.split()) == 3), "the shim has writable globals"


def test_keep_going_reports_every_disagreement_with_its_trace(ucx, capsys, tmp_path,
                                                              monkeypatch):
    (tmp_path / "wrong_ucx.py").write_text(
        "from verbspec.refimpl.bindings.ucx_tagmatch import UcxFactory\n"
        "make = UcxFactory(fault='source-bit')\n")
    monkeypatch.chdir(tmp_path)
    params = [a for k, v in RANDOM[1].items() for a in ("--param", f"{k}={v}")]
    args = ["conform", "--impl", "wrong_ucx:make", "--protocol", "tagmatch", *params,
            "--examples", "40", "--quiet", "--keep-going", "--trace-dir", "traces"]
    assert main([*args, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["sequences"] == 40 and doc["mismatches"] == len(doc["disagreements"]) > 1
    assert len(set(doc["traces"])) == doc["mismatches"]
    assert all(Path(t).is_file() for t in doc["traces"])
    assert main(args) == 1
    out = capsys.readouterr().out
    assert f"agreement: {40 - doc['mismatches']} of 40 runs; disagreements: " \
           f"{doc['mismatches']}" in out
    assert out.count("mismatch: step ") == doc["mismatches"]
    # without --keep-going the first disagreement ends it
    assert main([*args[:-3], "--json", "--trace-dir", "traces"]) == 1
    assert json.loads(capsys.readouterr().out)["mismatches"] == 1
