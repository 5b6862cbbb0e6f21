"""The native tag-matching engine (native/tagmatch/tagmatch_engine.c) through its cffi module:
it runs in lockstep with the spec without a mismatch (random runs, every edge of the sweep's
configurations), refuses what the reference engine refuses with the same text, copies
independently, compiles warning-free, runs clean under ASan and UBSan, and each of its
deliberate mutants is caught by the conformance harness.

Each test skips, saying why, where the engine was not built (no C compiler at install), and
fails instead under VERBSPEC_REQUIRE_NATIVE=1."""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from configs import TAGMATCH_CONFIGS
from conftest import native_module, require

from verbspec import native
from verbspec.refimpl.bindings.native_tagmatch import _FIELDS, NOT_BUILT, NativeTagEngine
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import mutants
from verbspec.refimpl.conformance.tagmatch import (
    EMITTED_FIELDS,
    SWEEP_CONFIGS,
    TagmatchHarness,
    conform_every_edge,
    resolve,
)
from verbspec.refimpl.engines.tagmatch_engine import (
    EAGER,
    RNDV,
    EngineError,
    Packet,
    TagMatchEngine,
)
from verbspec.spec.tagmatch import offload, state
from verbspec.spec.tagmatch.lists import ANY
from verbspec.spec.tagmatch.system import build

ROOT = Path(__file__).resolve().parents[2]
SOURCE = native.engine("tagmatch").source
WARNINGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wpedantic"]

CONFIGS = TAGMATCH_CONFIGS


@pytest.fixture(scope="module")
def tag_module():
    return native_module("tagmatch")


def compiler() -> str:
    """The C compiler, or a skip (a failure under VERBSPEC_REQUIRE_NATIVE=1) saying none."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    require("native", None if cc else "no C compiler on PATH")
    return cc


# ------------------------------------------------------------------------ conformance
@pytest.mark.parametrize("values", CONFIGS, ids=lambda v: ",".join(f"{k}={x}" for k, x in
                                                                     v.items()) or "defaults")
def test_random_runs_of_the_native_engine_conform(tag_module, values):
    h = TagmatchHarness(build(values), resolve("native"))
    done = [h.run(random.Random(seed), 400) for seed in range(80)]
    bad = [r.mismatch for r in done if r.mismatch]
    assert not bad, str(bad[0])
    assert sum(r.steps for r in done) > 1_000


def test_every_edge_of_the_offload_configuration_conforms(tag_module):
    sweep = TagmatchHarness(build(SWEEP_CONFIGS[0]), resolve("native")).every_edge()
    assert sweep.mismatch is None, str(sweep.mismatch)
    assert (sweep.states, sweep.edges) == (4_130, 9_718)


# every edge of every sweep configuration against the native engine: the coverage run
# (tests/conformance/test_native_coverage.py) takes them all and checks the edge count


def test_conform_command_runs_the_native_engine(tag_module, capsys, tmp_path):
    assert main(["conform", "--impl", "native", "--protocol", "tagmatch", "--examples", "40",
                 "--quiet", "--json", "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["impl"], out["protocol"], out["sequences"], out["mismatches"]) == (
        "native", "tagmatch", 40, 0)


def test_a_missing_build_is_named(monkeypatch):
    from verbspec import native

    monkeypatch.setattr(native, "load", lambda engine: None)
    with pytest.raises(ValueError, match="native tag-matching engine is not built"):
        resolve("native")
    assert "pip install -e ." in NOT_BUILT


# ------------------------------------------------------------------------ the engine itself
def test_the_constants_are_the_specs(tag_module):
    lib = tag_module.lib
    assert (lib.VS_TAG_ANY, lib.VS_TAG_PENDING, lib.VS_TAG_CANCELLED) == (
        ANY, state.PENDING, state.CANCELLED)
    assert (lib.VS_TAG_DONE_OK, lib.VS_TAG_TRUNCATED) == (state.OK, state.TRUNCATED)
    assert (lib.VS_TAG_IDLE, lib.VS_TAG_NEED_READ, lib.VS_TAG_READING, lib.VS_TAG_READ_DONE,
            lib.VS_TAG_FIN_SENT, lib.VS_TAG_FIN_EARLY) == (
        state.IDLE, state.NEED_READ, state.READING, state.READ_DONE, state.FIN_SENT,
        state.FIN_EARLY)
    assert (lib.VS_TAG_SW, lib.VS_TAG_HW, lib.VS_TAG_HW_CANCEL) == (
        offload.SW, offload.HW, offload.HW_CANCEL)
    # the adapter reads the output record by these bits, in Emitted's field order
    assert [bit for bit, _, _ in _FIELDS] == [
        getattr(lib, f"VS_TAG_OUT_{name.upper()}") for _, name, _ in _FIELDS]
    assert [name for _, name, _ in _FIELDS] == list(EMITTED_FIELDS)


def _both(values: dict) -> tuple[TagMatchEngine, NativeTagEngine]:
    """Both engines on the spec's defaults changed by ``values`` (beyond the spec's bounds
    where asked: the engines take any sizes)."""
    cfg = replace(build({}).params, **values)
    return TagMatchEngine(cfg), NativeTagEngine(cfg)


def _same(calls, values=None):
    """The same calls on both engines: the same emissions, refusals and views."""
    ref, nat = _both(values or {"senders": 2, "messages": 1, "capacity": 1, "max_bytes": 2,
                                "eager_limit": 1})
    for name, *args in calls:
        outcomes = []
        for eng in (ref, nat):
            try:
                outcomes.append(getattr(eng, name)(*args))
            except EngineError as e:
                outcomes.append(f"refused: {e}")
        assert outcomes[0] == outcomes[1], (name, args)
        assert ref.view() == nat.view(), (name, args)
    return ref, nat


BAD = [("send", 2, 0, 0, 1), ("send", -1, 0, 0, 1), ("send", 0, 1, 0, 1), ("send", 0, 0, 5, 1),
       ("send", 0, 0, 0, 0), ("send", 0, 0, 0, 3), ("send", True, 0, 0, 1),
       ("send", "0", 0, 0, 1), ("send", 0, 0, 0, 2 ** 70), ("send", 0, 0, 0, 1.0),
       ("post_recv", 0, ANY, ANY, 0), ("post_recv", 0, -2, 0, 1), ("post_recv", 0, 0, None, 1),
       ("probe", 1, 0, 0), ("probe", 0, 2, ANY), ("cancel", 0), ("cancel", -1),
       ("cancel", "x"), ("fin", 0), ("start_read", 0), ("read_done", 7), ("send_fin", None),
       ("sw_sync",), ("hw_op",), ("sw_complete",)]


def test_refusals_read_as_the_reference_engines(tag_module):
    _same(BAD)


def test_refusals_after_sends_read_as_the_reference_engines(tag_module):
    p = Packet(0, 0, 0, 0, 1, EAGER)
    _same([("send", 0, 0, 0, 1), ("send", 0, 0, 0, 1), ("fin", 0), ("start_read", 0),
           ("read_done", 0), ("send_fin", 0),
           ("delivered", Packet(0, 0, 0, 0, 2, EAGER)),
           ("delivered", Packet(0, 0, 1, 0, 1, "eager-ish")),
           ("delivered", Packet(0, "0", 0, 0, 1, EAGER)),
           ("delivered", Packet(True, 0, 0, 0, 1, EAGER)),
           ("delivered", p), ("delivered", p), ("sw_complete",), ("probe", 0, ANY, ANY),
           ("sw_complete",), ("sw_sync",), ("sw_sync",)])
    _same([("send", 0, 0, 0, 1), ("cancel", 0)], {"capacity": 0})
    _same([("send", 0, 0, 0, 1), ("hw_op",), ("sw_sync",)], {"capacity": 0})


def test_a_copy_goes_its_own_way(tag_module):
    cfg = build({"senders": 2, "messages": 2, "capacity": 1}).params
    eng = NativeTagEngine(cfg)
    eng.send(0, 0, 0, 1)
    eng.post_recv(0, 0, 0, 1)
    before = eng.view()
    twin = copy.deepcopy(eng)
    assert twin.view() == before
    twin.delivered(Packet(0, 0, 0, 0, 1, EAGER))
    twin.hw_op()
    twin.send(1, 0, 0, 1)
    assert eng.view() == before != twin.view()
    del eng
    assert twin.view().released[0]


def test_queues_keep_mpi_order_under_many_wildcards(tag_module):
    # many receives of every wildcard kind, then messages: both engines match the same way
    values = {"senders": 4, "messages": 40, "tags": 5, "comms": 2, "capacity": 0,
              "max_bytes": 3, "eager_limit": 2}
    rng = random.Random(7)
    calls: list[tuple] = []
    for _ in range(300):
        if rng.random() < 0.5:
            calls.append(("post_recv", rng.randrange(2), rng.choice([ANY, *range(4)]),
                          rng.choice([ANY, *range(5)]), rng.randrange(1, 4)))
        else:
            calls.append(("send", rng.randrange(4), rng.randrange(2), rng.randrange(5),
                          rng.randrange(1, 4)))
    ref, nat = _both(values)
    for name, *args in calls:
        try:
            got = getattr(ref, name)(*args)
        except EngineError:
            continue
        assert getattr(nat, name)(*args) == got
        for p in got.sends:
            assert nat.delivered(p) == ref.delivered(p)
        if rng.random() < 0.2:
            rid = rng.randrange(len(ref.recvs)) if ref.recvs else 0
            if ref.recvs:
                assert nat.cancel(rid) == ref.cancel(rid)
    assert nat.view() == ref.view()
    assert any(s >= 0 for s in ref.view().status) and ref.view().unexpected


STRESS = {"senders": 6, "messages": 30, "tags": 7, "comms": 3, "capacity": 5, "max_bytes": 4,
          "eager_limit": 2}


def differential(make, values: dict, seed: int, calls: int) -> int:
    """Random calls of every kind, in any order the engines take (deliveries out of order
    too), on the reference engine and ``make(cfg)``: the same emissions or refusal texts and
    the same views after every call. Beyond the spec's bounds, so that every table, record
    array and ring grows. The number of calls taken."""
    cfg = replace(build({}).params, **values)
    ref, nat = TagMatchEngine(cfg), make(cfg)
    rng = random.Random(seed)
    wire: list[Packet] = []
    mids = range(cfg.senders * cfg.messages)
    taken = 0

    def draw() -> tuple:
        k = rng.random()
        if k < 0.2:
            return ("send", rng.randrange(cfg.senders), rng.randrange(cfg.comms),
                    rng.randrange(cfg.tags), rng.randrange(1, cfg.max_bytes + 1))
        if k < 0.4 and wire:
            return ("delivered", wire.pop(rng.randrange(len(wire))))
        if k < 0.55:
            return ("post_recv", rng.randrange(cfg.comms),
                    rng.choice([ANY, *range(cfg.senders)]), rng.choice([ANY, *range(cfg.tags)]),
                    rng.randrange(1, cfg.max_bytes + 1))
        if k < 0.6:
            return ("cancel", rng.randrange(len(ref.recvs) + 1))
        if k < 0.65:
            return ("probe", rng.randrange(cfg.comms), rng.choice([ANY, 0]), ANY)
        if k < 0.8:
            return (rng.choice(["start_read", "read_done", "send_fin", "fin"]),
                    rng.choice(mids))
        return (rng.choice(["hw_op", "sw_complete", "sw_complete", "sw_sync"]),)

    for _ in range(calls):
        name, *args = draw()
        outcomes = []
        for eng in (ref, nat):
            try:
                outcomes.append(getattr(eng, name)(*args))
            except EngineError as e:
                outcomes.append(f"refused: {e}")
        assert outcomes[0] == outcomes[1], (name, args, outcomes)
        assert ref.view() == nat.view(), (name, args)
        if not isinstance(outcomes[0], str):
            taken += 1
            wire += outcomes[0].sends
    return taken


def test_random_calls_beyond_the_specs_bounds_agree_with_the_reference_engine(tag_module):
    taken = sum(differential(NativeTagEngine, STRESS, seed, 1_500) for seed in range(4))
    assert taken > 3_000


def test_a_reset_engine_behaves_as_a_new_one(tag_module):
    def reused(cfg):
        nat = NativeTagEngine(cfg)
        differential(lambda _: nat, STRESS, 9, 800)     # a job that grows every table
        nat.reset()
        return nat

    assert differential(reused, STRESS, 11, 1_500) > 700


def test_a_packet_differing_in_each_field_is_refused_as_the_reference_engine_refuses(
        tag_module):
    # message 0 goes by rendezvous (2 bytes > eager_limit 1): each field of it changed in turn
    sent = Packet(0, 0, 0, 0, 2, RNDV)
    _same([("send", 0, 0, 0, 2),
           *(("delivered", replace(sent, **{f: v})) for f, v in (
               ("comm", 1), ("src", 1), ("tag", 1), ("nbytes", 1), ("kind", EAGER))),
           ("delivered", Packet(1, 0, 1, 0, 1, EAGER)), ("read_done", 0), ("send_fin", 0),
           ("delivered", sent), ("read_done", 0), ("delivered", sent), ("post_recv", 5, 0, 0, 1),
           ("probe", 0, 0, 7), ("sw_complete",)],
          {"senders": 2, "messages": 1, "comms": 2, "tags": 2, "capacity": 0, "max_bytes": 2,
           "eager_limit": 1})


def test_a_probe_waits_for_the_nics_completions(tag_module):
    _same([("send", 0, 0, 0, 1), ("delivered", Packet(0, 0, 0, 0, 1, EAGER)),
           ("probe", 0, ANY, ANY), ("sw_complete",), ("probe", 0, ANY, ANY)])


@pytest.mark.parametrize("field", ["senders", "messages", "tags", "comms", "max_bytes",
                                   "eager_limit", "capacity"])
def test_a_negative_configuration_value_is_refused(tag_module, field):
    with pytest.raises(EngineError, match="refuses the configuration"):
        NativeTagEngine(replace(build({}).params, **{field: -1}))


def test_a_job_of_more_messages_than_records_can_index_is_refused(tag_module):
    with pytest.raises(EngineError, match="refuses the configuration"):
        NativeTagEngine(replace(build({}).params, senders=100_000, messages=100_000))


def test_a_job_without_senders_or_messages_takes_receives_only(tag_module):
    for values in ({"senders": 0}, {"messages": 0}):
        _, nat = _same([("send", 0, 0, 0, 1), ("post_recv", 0, ANY, ANY, 1), ("hw_op",),
                         ("cancel", 0), ("sw_complete",), ("post_recv", 0, ANY, 0, 1)],
                        {**values, "capacity": 2})
        twin = copy.deepcopy(nat)
        nat.reset()
        assert nat.view() == NativeTagEngine(nat.cfg).view() != twin.view()


def test_a_nic_larger_than_the_job_is_sized_by_the_job(tag_module):
    assert differential(NativeTagEngine, {**STRESS, "capacity": 100}, 5, 800) > 300


def test_random_calls_with_buckets_shared_by_many_envelopes_agree(tag_module):
    """More tags and sources than a table has buckets: envelopes share buckets, and matching,
    probing, cancelling and the NIC step over the entries of other envelopes."""
    taken = 0
    for values in ({"senders": 4, "messages": 16, "tags": 64, "comms": 2, "capacity": 3,
                    "max_bytes": 3, "eager_limit": 1},
                   {"senders": 4, "messages": 2, "tags": 8, "comms": 2, "capacity": 0,
                    "max_bytes": 3, "eager_limit": 1},
                   # far more tags than buckets: receives of one source and communicator
                   # share buckets across tags
                   {"senders": 1, "messages": 16, "tags": 256, "comms": 1, "capacity": 0,
                    "max_bytes": 3, "eager_limit": 1}):
        taken += sum(differential(NativeTagEngine, values, seed, 1_500) for seed in range(3))
    assert taken > 4_000


@pytest.mark.parametrize("field", ["comm", "src", "tag"])
def test_the_nic_finds_a_receive_behind_one_of_another_envelope_in_its_bucket(tag_module,
                                                                              field):
    """A NIC of two receives has a table of two buckets: of three envelopes that differ only
    in ``field``, two share a bucket, so among every ordered pair the NIC lists, one has the
    arriving message's receive behind a receive that differs from it in that field alone."""
    values = {"senders": 3, "messages": 1, "tags": 3, "comms": 3, "capacity": 2,
              "max_bytes": 2, "eager_limit": 1}
    for first, second in itertools.permutations(range(3), 2):
        env = [{"comm": 1, "src": 1, "tag": 1} for _ in range(2)]
        env[0][field], env[1][field] = first, second
        m = env[1]
        _same([*(("post_recv", x["comm"], x["src"], x["tag"], 1) for x in env),
               ("hw_op",), ("hw_op",), ("send", m["src"], m["comm"], m["tag"], 1),
               ("delivered", Packet(m["src"], m["comm"], m["src"], m["tag"], 1, EAGER)),
               ("sw_complete",)], values)


def test_a_job_of_more_messages_than_a_table_has_buckets_is_taken(tag_module):
    """More than 2^20 messages of as many envelopes: a table's buckets stop at their bound
    and are shared; matching still keeps MPI order."""
    values = {"senders": 1025, "messages": 1024, "tags": 1024, "comms": 1, "capacity": 0,
              "max_bytes": 2, "eager_limit": 1}
    ref, nat = _both(values)
    calls = [("post_recv", 0, 1024, 1023, 1), ("post_recv", 0, 0, 1023, 1),
             ("post_recv", 0, 1024, 1023, 1), ("send", 1024, 0, 1023, 1),
             ("send", 0, 0, 1023, 1), ("send", 0, 0, 5, 1), ("post_recv", 0, ANY, 5, 1),
             ("send", 1024, 0, 1023, 1), ("send", 1024, 0, 7, 1), ("probe", 0, 1024, ANY)]
    for name, *args in calls:
        got = getattr(ref, name)(*args)
        assert getattr(nat, name)(*args) == got, (name, args)
        for p in got.sends:
            assert nat.delivered(p) == ref.delivered(p), p
    assert nat.view() == ref.view()
    view = ref.view()
    assert all(s >= 0 for s in view.status) and len(view.unexpected) == 1


def test_a_reset_engine_holding_nic_receives_and_unexpected_messages_is_new(tag_module):
    cfg = replace(build({}).params, **STRESS)
    nat = NativeTagEngine(cfg)
    differential(lambda _: nat, STRESS, 4, 600)     # every table grown
    nat.reset()
    # a receive the NIC lists, one kept in software, an unexpected message indexed for the
    # (comm, ANY, tag) receives a probe then looked for
    tail = [("post_recv", 0, 0, 0, 2), ("hw_op",), ("post_recv", 1, ANY, 0, 2),
            ("send", 1, 2, 1, 1), ("delivered", Packet(30, 2, 1, 1, 1, EAGER)),
            ("sw_complete",), ("probe", 2, ANY, 1)]
    _same(tail, STRESS)
    for name, *args in tail:
        getattr(nat, name)(*args)
    held = nat.view()
    assert held.hw and held.unexpected and len(held.posted) == 2
    nat.reset()
    assert nat.view() == NativeTagEngine(cfg).view()
    assert differential(lambda _: nat, STRESS, 12, 600) > 200


def test_a_reset_engine_holding_messages_no_receive_looked_for_is_new(tag_module):
    # unexpected messages that no receive or probe looked for: no wildcard kind indexes them
    values = {**STRESS, "capacity": 0}
    cfg = replace(build({}).params, **values)
    nat = NativeTagEngine(cfg)
    for s, tag in ((0, 1), (2, 3), (0, 1)):
        for p in nat.send(s, 0, tag, 1).sends:
            nat.delivered(p)
    assert len(nat.view().unexpected) == 3
    nat.reset()
    assert nat.view() == NativeTagEngine(cfg).view()
    assert differential(lambda _: nat, values, 13, 600) > 200


def test_a_call_after_a_refusal_leaves_no_error(tag_module):
    nat = NativeTagEngine(build({}).params)
    ffi, lib = nat.mod.ffi, nat.mod.lib
    assert ffi.string(lib.vs_tag_error(nat._e)) == b"" and lib.vs_tag_error_arg(nat._e) == -1
    with pytest.raises(EngineError, match="was never posted"):
        nat.cancel(0)
    assert ffi.string(lib.vs_tag_error(nat._e)) != b"" and lib.vs_tag_error_arg(nat._e) == 0
    nat.send(0, 0, 0, 1)
    assert ffi.string(lib.vs_tag_error(nat._e)) == b"" and lib.vs_tag_error_arg(nat._e) == -1


def test_destroying_no_engine_is_allowed(tag_module):
    tag_module.lib.vs_tag_destroy(tag_module.ffi.NULL)


# ------------------------------------------------------------------------ the C itself
def test_the_engine_compiles_warning_free():
    cc = compiler()
    run = subprocess.run([cc, *WARNINGS, "-fsyntax-only", str(SOURCE)], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0 and not run.stderr, run.stderr


def _load_built(tmp: Path, name: str, defines: tuple[str, ...] = (),
                link: tuple[str, ...] = ()):
    """The engine compiled into ``tmp`` as module ``name`` with extra flags; its path."""
    from verbspec.native.tagmatch.build_tagmatch import FLAGS, builder

    ffi = builder(name, (*FLAGS, *defines), link=link, absolute=True)
    return Path(ffi.compile(tmpdir=str(tmp), verbose=False))


# -fno-wrapv: Python's own flags (which extensions inherit) make signed overflow wrap, which
# would hide it from UBSan
SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined", "-fno-wrapv", "-O1", "-g")

DRIVER = """
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from verbspec.refimpl.conformance.tagmatch import SWEEP_CONFIGS, TagmatchHarness
from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
from verbspec.spec.tagmatch.system import build
CONFIGS = {configs!r}
steps = 0
for values in CONFIGS:
    h = TagmatchHarness(build(values), lambda cfg: NativeTagEngine(cfg, mod))
    for seed in range(25):
        run = h.run(random.Random(seed), 400)
        steps += run.steps
        if run.mismatch:
            sys.exit(f"mismatch: {{run.mismatch}}")
for values in SWEEP_CONFIGS[:2]:
    sw = TagmatchHarness(build(values), lambda cfg: NativeTagEngine(cfg, mod)).every_edge()
    steps += sw.edges
    if sw.mismatch:
        sys.exit(f"mismatch: {{sw.mismatch}}")
sys.path[:0] = {tests!r}
from test_native_tag import STRESS, differential
for seed in range(2):
    steps += differential(lambda cfg: NativeTagEngine(cfg, mod), STRESS, seed, 1500)
print("clean", steps)
"""


def sanitized_run(tmp: Path) -> subprocess.CompletedProcess:
    """A conformance run of the engine built with ASan and UBSan, in a fresh interpreter."""
    cc = compiler()
    path = _load_built(tmp, "_tagmatch_engine_sanitized", SANITIZE)
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    require("native", None if os.path.isabs(asan) else "the compiler has no libasan")
    driver = tmp / "driver.py"
    here = Path(__file__).resolve().parent         # this module, and the tests' own modules
    driver.write_text(DRIVER.format(configs=CONFIGS, tests=[str(here), str(ROOT / "tests")]))
    env = dict(os.environ, LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    return subprocess.run([sys.executable, str(driver), str(path), "_tagmatch_engine_sanitized"],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=600)


def test_the_engine_runs_clean_under_asan_and_ubsan(tmp_path):
    run = sanitized_run(tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "runtime error" not in run.stderr and "AddressSanitizer" not in run.stderr, (
        run.stderr[-3000:])
    assert run.stdout.startswith("clean")


# ------------------------------------------------------------------------ mutants
# Each mutant is one deliberate fault: a patch to the engine's source
# (native/testing/mutant_patches/tagmatch_NN.diff, whose first line says this too).
MUTANTS = {1: "wildcard queues lose to the exact one whatever the order",
           2: "the newest unexpected message is taken first",
           3: "a claim is never sent to the NIC as a remove",
           4: "a message one byte too long is not flagged truncated",
           5: "a message of exactly eager_limit bytes goes by rendezvous",
           6: "the NIC matches while software's count is behind (no shadow sync)",
           7: "a FIN reaching its sender does not keep its buffer released",
           8: "a probe answers with the newest message",
           9: "a receive being cancelled that the NIC matched reads as cancelled",
           10: "only a sync op brings the NIC software's count"}


def killed_by(mod) -> str | None:
    """The first mismatch the harness finds in a build, or None: every edge of the sweep's
    configurations, then random runs."""
    def factory(cfg):
        return NativeTagEngine(cfg, mod)

    rep = conform_every_edge(factory, "mutant")
    if rep.mismatch is not None:
        return str(rep.mismatch)
    for values in CONFIGS:
        h = TagmatchHarness(build(values), factory)
        for seed in range(200):
            run = h.run(random.Random(seed), 400)
            if run.mismatch is not None:
                return str(run.mismatch)
    return None


def test_the_engine_conforms_when_every_bucket_is_shared(tmp_path):
    """Built with two buckets per table, each bucket holds entries of many envelopes, which
    matching, probing, cancelling and the NIC must step over."""
    compiler()
    mod = native.load_build(_load_built(tmp_path, "_tagmatch_engine_b2",
                                        ("-DVS_TAG_MAX_BUCKETS=2",)), "_tagmatch_engine_b2")

    def factory(cfg):
        return NativeTagEngine(cfg, mod)

    for values in CONFIGS:
        h = TagmatchHarness(build(values), factory)
        bad = [r.mismatch for r in (h.run(random.Random(seed), 400) for seed in range(30))
               if r.mismatch]
        assert not bad, str(bad[0])
    assert sum(differential(factory, STRESS, seed, 1_500) for seed in range(3)) > 2_000


def test_the_mutants_are_the_patches_and_say_what_they_break():
    found = mutants.mutants("tagmatch")
    assert {m.number: m.what for m in found} == {
        n: f"tagmatch mutant {n}: {what}" for n, what in MUTANTS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("n", sorted(MUTANTS), ids=lambda n: f"mutant{n}")
def test_each_mutant_is_caught(n, tmp_path):
    compiler()
    t0 = time.perf_counter()
    mod = mutants.build_mutant(mutants.mutant("tagmatch", n), tmp_path)
    found = killed_by(mod)
    assert found is not None, f"mutant {n} ({MUTANTS[n]}) survived"
    print(f"mutant {n}: killed in {time.perf_counter() - t0:.1f} s: {found}")
