"""The gate conformance harness: the reference engine runs in lockstep with the spec without a
mismatch, every action reaches it, a planted bug in an engine is caught at its step, and the
engine imports nothing of the spec but its configuration and constants."""

from __future__ import annotations

import ast
import copy
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from verbspec.proofs.gate.refinement import CONFIGS as SWEEP_CONFIGS
from verbspec.refimpl.bindings import native_gate, native_tagmatch
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance.gate import (
    BLOCK_CONFIGS,
    CONFORMANCE,
    LOSS_CONFIGS,
    PATH_CONFIGS,
    PATH_DEPTH,
    PER_RANK_CONFIGS,
    POST_FAILURE_CONFIGS,
    GateHarness,
    conform,
    conform_every_edge,
    resolve,
)
from verbspec.refimpl.engines import gate_engine, tagmatch_engine
from verbspec.refimpl.engines.gate_engine import Completion, Emitted, EngineError, GateEngine
from verbspec.refimpl.engines.gate_variants import VARIANT_ENGINES
from verbspec.spec.actions import action_names
from verbspec.spec.gate import constants, errors
from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    ARM_POST,
    BIG_BAR_READ,
    BIG_BEGIN,
    BIG_HDR_READ,
    BIG_LAYER,
    BIG_MAGIC,
    BIG_XFER,
    CRASHED,
    DRAIN_WAIT,
    FAILED,
    HEADER_MAGIC,
    HOLD,
    IDLE,
    INIT,
    WAIT,
)
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import (
    BATCH_ACTIONS,
    BLOCK_ACTIONS,
    POST_FAILURE_ACTIONS,
    build,
)
from verbspec.spec.gate.variants import VARIANTS as GATE_VARIANTS
from verbspec.spec.gate.wire import TAG_BULK, TcpItem

CONFIGS = [{}, {"window": 2, "ops": 12}, {"window": 2, "ops": 10, "vec_bytes": 100},
           {"window": 3, "ops": 10, "qp_type": "rc"}, {"faults": 0, "ops": 20}]


def runs(system, factory=None, n=30, steps=3000, **kw):
    """Seeded random runs, one at a time."""
    h = GateHarness(system) if factory is None else GateHarness(system, factory)
    return (h.run(random.Random(seed), steps, **kw) for seed in range(n))


@pytest.mark.parametrize("values", CONFIGS, ids=lambda v: ",".join(f"{k}={x}" for k, x in
                                                                     v.items()) or "defaults")
def test_the_reference_engine_conforms(values):
    done = list(runs(build(values), n=10 if values.get("faults") == 0 else 30))
    bad = [r.mismatch for r in done if r.mismatch]
    assert not bad, str(bad[0])
    assert sum(r.steps for r in done) > 2_000


@pytest.mark.slow
def test_every_action_but_wire_loss_reaches_the_engines():
    seen = Counter()
    # and verify blocks (without faults, which would end most runs before a block's end),
    # then with failing posts and polls, then as batch gates: their actions only such
    # workloads have
    blocks = {"window": 2, "ops": 10, "vec_bytes": 100, "verify_blocks": 1}
    for values in (*CONFIGS, {**blocks, "faults": 0}, {**blocks, "post_failures": 1},
                   {**blocks, "faults": 0, "verify_window": "off"}):
        for r in runs(build(values), n=40, fault_rate=0.05):
            assert r.mismatch is None, str(r.mismatch)
            seen.update(r.actions)
    missing = set(action_names(GateSpec)) - set(seen)
    assert missing == {"lose"}


class RepostTooFar(GateEngine):
    def _gate_done(self) -> Emitted:
        super()._gate_done()
        shifted = self._gate_chain("in", self.seq + self.cfg.window + 1, last_only_tagged=True)
        return Emitted(recvs=shifted)


class DrainPollsSixteen(GateEngine):
    def poll_size(self) -> int:
        return 16


class SilentTimeout(GateEngine):
    def timeout(self) -> Emitted:
        self.phase, self.error = FAILED, errors.GATE_PEER()
        return Emitted(result=self.error)


@pytest.mark.parametrize("engine,values,what", [
    (RepostTooFar, {"window": 2, "ops": 6, "big_gates": 0}, "receives posted"),
    (DrainPollsSixteen, {"window": 8, "ops": 20, "faults": 0}, "completions polled"),
    (SilentTimeout, {"window": 2, "ops": 6}, "result"),
])
def test_a_planted_engine_bug_is_caught_at_its_step(engine, values, what):
    first = next((r for r in runs(build(values), lambda cfg, r, grant: engine(cfg, grant),
                                  n=60, fault_rate=0.05) if r.mismatch), None)
    assert first is not None, f"{engine.__name__} went unnoticed in 60 runs"
    assert first.mismatch.what == what
    assert first.trace.violation == CONFORMANCE and len(first.trace.steps) == first.steps + 1
    assert f"step {first.steps} " in str(first.mismatch)


ALLOWED = {"verbspec.spec.gate.params", "verbspec.spec.gate.errors",
           "verbspec.spec.gate.constants", "verbspec.spec.gate.wire", "verbspec.spec.gate.state"}
# the tag-matching engine: the parameters, status and stage constants, ANY, the location names
TAGMATCH_ALLOWED = {"verbspec.spec.tagmatch.state", "verbspec.spec.tagmatch.lists",
                    "verbspec.spec.tagmatch.offload"}
CONFIG_TYPES = {"Params"}


@pytest.mark.parametrize("module,allowed,package", [
    (gate_engine, ALLOWED, "verbspec.spec.gate"),
    (native_gate, ALLOWED, "verbspec.spec.gate"),
    (tagmatch_engine, TAGMATCH_ALLOWED, "verbspec.spec.tagmatch"),
    (native_tagmatch, TAGMATCH_ALLOWED, "verbspec.spec.tagmatch"),
], ids=["gate", "native-gate", "tagmatch", "native-tagmatch"])
def test_the_engine_imports_only_configuration_and_constants(module, allowed, package):
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("verbspec.spec") for a in node.names)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verbspec.spec"):
            modules = ({f"{node.module}.{a.name}" for a in node.names}
                       if node.module == package else {node.module})
            assert modules <= allowed, modules
            if node.module in ("verbspec.spec.gate.state", *(TAGMATCH_ALLOWED)):
                # names of phases and constants (and the parameters' type), never the spec's
                # types or steps
                assert all(a.name.isupper() or a.name in CONFIG_TYPES for a in node.names), [
                    a.name for a in node.names]


def test_conform_command_reports_the_reference_engine_clean(capsys, tmp_path):
    assert main(["conform", "--examples", "20", "--quiet", "--json",
                 "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["impl"], out["protocol"], out["sequences"], out["mismatches"]) == (
        "refimpl", "gate", 20, 0)
    assert out["steps"] == sum(out["actions"].values()) and out["steps"] > 1000
    # at the defaults the verify block's actions and the failing posts and polls are not the
    # system's (verify_blocks=0, post_failures=0)
    assert out["actions_covered"] == len(out["actions"]) and out["actions_total"] == 29
    assert not set(out["actions"]) & set(BLOCK_ACTIONS + POST_FAILURE_ACTIONS)
    assert out["trace"] is None and not list(tmp_path.iterdir())
    assert set(out["reached"]) == {"decode_gates_in_a_row", "gates_past_window", "drains",
                                   "big_gate_windows", "verify_blocks"}


def test_conform_runs_verify_blocks_where_the_workload_has_them(capsys, tmp_path):
    assert main(["conform", "--examples", "10", "--quiet", "--json", "--param",
                 "verify_blocks=1", "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mismatches"] == 0 and set(BLOCK_ACTIONS) <= set(out["actions"])
    assert out["reached"]["verify_blocks"] >= 1


def test_conform_runs_batch_gates_where_the_verify_window_is_switched_off(capsys, tmp_path):
    assert main(["conform", "--examples", "10", "--quiet", "--json", "--param",
                 "verify_blocks=1", "--param", "verify_window=off", "--trace-dir",
                 str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mismatches"] == 0 and set(BATCH_ACTIONS) <= set(out["actions"])
    assert not set(out["actions"]) & {"block_post", "block_send"}
    assert out["reached"]["verify_blocks"] >= 1


def test_random_runs_reach_past_the_window_and_through_drains():
    rep = conform(build({}), resolve("refimpl"), "refimpl", sequences=200, steps=3000)
    assert rep.mismatch is None, str(rep.mismatch)
    assert rep.reached["gates_past_window"] >= 8 and rep.reached["drains"] >= 1
    assert rep.reached["big_gate_windows"] >= 2



FAULTS = {a.name for a in build({}).actions if a.fault}


def test_random_runs_take_a_swarm_of_faults():
    """Hypothesis draws each run's faults: about half the runs take none, the others each a
    subset of their own, so some runs crash without ever timing out and others the reverse."""
    kinds: list[frozenset[str]] = []

    def each(run) -> bool:
        kinds.append(frozenset(run.actions) & FAULTS)
        return True

    rep = conform(build({}), resolve("refimpl"), "refimpl", sequences=100, steps=3000,
                  each=each)
    assert rep.mismatch is None and rep.sequences == len(kinds) == 100
    assert 30 <= sum(not k for k in kinds) <= 70
    assert any("crash" in k and "timeout" not in k for k in kinds)
    assert any("timeout" in k and "crash" not in k for k in kinds)
    assert len(set(kinds)) >= 8


def test_the_same_seed_draws_the_same_runs():
    def summary(seed: int) -> tuple:
        rep = conform(build({"window": 2, "ops": 12}), resolve("refimpl"), "refimpl",
                      sequences=12, steps=3000, seed=seed)
        return rep.steps, dict(rep.actions), rep.reached

    assert summary(5) == summary(5) != summary(6)


class DeepLate(GateEngine):
    """Reposts one gate too far ahead, but only once three windows of gates have passed."""

    def _gate_done(self):
        out = super()._gate_done()
        if self.seq < 3 * self.cfg.window:
            return out
        return Emitted(recvs=self._gate_chain("in", self.seq + self.cfg.window + 1, True))


def test_a_mismatch_deep_in_a_random_run_is_reduced():
    system = build({"window": 2, "ops": 12})
    found = conform(system, lambda cfg, r, g: DeepLate(cfg, g), "late", sequences=200,
                    steps=3000, shrink_seconds=0)
    reduced = conform(system, lambda cfg, r, g: DeepLate(cfg, g), "late", sequences=200,
                      steps=3000)
    assert found.sequences == reduced.sequences
    m, r = found.mismatch, reduced.mismatch
    assert (m.action, m.what) == (r.action, r.what) == ("gate_done", "receives posted")
    assert r.step < m.step and len(reduced.trace) - 1 == r.step
    # the reduced trace is a run of its own: replayed, it differs at its last step
    again = GateHarness(system, lambda cfg, rank, g: DeepLate(cfg, g)).follow(
        [(t.action, t.args) for t in reduced.trace.steps[1:]])
    assert again.mismatch == r

LATE = '''
from verbspec.refimpl.engines.gate_engine import Completion, Emitted, EngineError, GateEngine
from verbspec.refimpl.engines.gate_variants import VARIANT_ENGINES


class Late(GateEngine):
    def _gate_done(self):
        super()._gate_done()
        return Emitted(recvs=self._gate_chain("in", self.seq + self.cfg.window + 1, True))


def make(cfg, rank, grant):
    return Late(cfg, grant)
'''


def test_conform_command_catches_an_implementation_named_by_module(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "late_impl.py").write_text(LATE, encoding="utf-8")
    assert main(["conform", "--impl", "late_impl:make", "--param", "window=2", "--param",
                 "ops=6", "--quiet", "--json", "--trace-dir", "traces"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["mismatches"] == 1 and "gate_done(rank=" in out["mismatch"]
    assert "receives posted" in out["mismatch"]
    trace = out["trace"]
    assert main(["replay", "--impl", "late_impl:make", trace]) == 1
    assert capsys.readouterr().out.startswith("late_impl:make differs from the spec: step ")
    assert main(["replay", "--impl", "refimpl", trace]) == 0
    assert "refimpl agreed with the spec on all" in capsys.readouterr().out
    assert main(["replay", trace]) == 1
    assert "the spec agrees with every recorded state" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--impl", "nope"], "--impl 'nope': expected refimpl or MODULE:FACTORY"),
    (["--impl", "no_such_module_here:make"], "cannot import no_such_module_here"),
    (["--impl", "json:no_such_factory"], "json has no no_such_factory"),
    (["--fault-rate", "2"], "--fault-rate must be between 0 and 1, not 2.0"),
    (["--examples", "0"], "--examples must be at least 1"),
    (["--shrink-seconds", "-1"], "--shrink-seconds must be a finite number, 0 or more, not -1.0"),
    (["--shrink-seconds", "inf"], "--shrink-seconds must be a finite number, 0 or more, not inf"),
    (["--param", "window=0"], "window"),
    (["--depth", "3"], "--depth bounds the paths of --exhaustive: it needs --exhaustive"),
    (["--exhaustive", "--depth", "0"], "--depth must be at least 1, not 0"),
])
def test_conform_command_refuses_bad_input_by_name(argv, message, capsys, tmp_path):
    assert main(["conform", "--quiet", "--trace-dir", str(tmp_path), *argv]) == 3
    assert message in capsys.readouterr().err


def test_every_edge_of_a_small_configuration_conforms():
    sweep = GateHarness(build({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2,
                               "big_gates": 0, "faults": 1})).every_edge(1)
    assert sweep.mismatch is None, str(sweep.mismatch)
    # decode gates past the window, and a decode gate's faults (peer_gone needs a crash
    # first: two faults, in the slow sweep)
    assert (sweep.states, sweep.edges) == (13_129, 32_448)
    assert {"gate_done", "crash", "timeout", "bad_call", "error_completion",
            "stray_completion"} <= set(sweep.actions)


def test_every_edge_finds_a_planted_bug_on_a_shortest_path():
    sweep = GateHarness(build({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 3,
                               "big_gates": 0, "faults": 0}),
                        lambda cfg, r, grant: RepostTooFar(cfg, grant)).every_edge(0)
    assert sweep.mismatch is not None and sweep.mismatch.action == "gate_done"
    # breadth first: the first gate's repost is the earliest the bug shows
    steps = [s.action for s in sweep.trace.steps[1:]]
    assert steps[-1] == "gate_done" and steps.count("gate_done") == 1
    assert len(steps) == sweep.mismatch.step


@pytest.mark.slow
def test_conform_exhaustive_covers_every_action(capsys, tmp_path):
    assert main(["conform", "--exhaustive", "--quiet", "--json",
                 "--trace-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mismatches"] == 0 and out["exhaustive"]["configs"] == len(SWEPT) == 23
    assert out["edges_covered"] == out["edges_total"] == out["exhaustive"]["edges"] > 400_000
    assert out["exhaustive"]["depth"] == PATH_DEPTH and out["exhaustive"]["paths"] > 10_000
    assert set(out["actions"]) == set(action_names(GateSpec))
    assert out["actions_covered"] == out["actions_total"] == len(action_names(GateSpec)) == 42


# each variant's engine against the base spec: the action and step (breadth first, so on a
# shortest path) it is first caught at, and in which of the sweep's configurations (1-based)
CAUGHT = {"no-barrier": ("arm_post", 3, 1), "tag-every-chunk": ("arm_post", 3, 2),
          "signal-last-only": ("gate_send", 10, 2), "stray-send-completion": ("reap", 12, 4),
          "stray-warm-receive": ("reap", 12, 4), "no-seq-check": ("bad_call", 2, 4),
          "depth-mismatch": ("big_header_write", 3, 3),
          "drain-without-rendezvous": ("call_big", 18, 3),
          "untagged-in-big-window": ("reap", 17, 6),
          "block-drain-without-rendezvous": ("call_block", 2, 9),
          "unexchanged-config": ("setup", 1, 20)}
FAST = ("no-barrier", "tag-every-chunk", "signal-last-only")
# the configurations conform_every_edge sweeps, in its order
SWEPT = [(v, f) for v, w, f in SWEEP_CONFIGS if not w] + list(
    LOSS_CONFIGS + BLOCK_CONFIGS + POST_FAILURE_CONFIGS + PER_RANK_CONFIGS)


def test_every_variant_has_an_engine():
    assert set(VARIANT_ENGINES) == {v.name for v in GATE_VARIANTS} == set(CAUGHT)


@pytest.mark.parametrize("name", FAST)
def test_a_variant_as_an_implementation_is_caught(name):
    rep = conform_every_edge(resolve(f"variant:{name}"), name)
    assert rep.mismatch is not None, f"variant:{name} passed every edge"
    action, step, config = CAUGHT[name]
    assert (rep.mismatch.action, rep.mismatch.step) == (action, step), str(rep.mismatch)
    assert rep.sweep["configs"] == config
    assert rep.trace is not None and len(rep.trace.steps) == step + 1


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CAUGHT if n not in FAST])
def test_a_fault_or_big_gate_variant_as_an_implementation_is_caught(name):
    # the configuration that catches it, alone (the earlier ones pass whole: the suite's
    # every-edge run over all of them takes longer)
    action, step, config = CAUGHT[name]
    values, faults = SWEPT[config - 1]
    sweep = GateHarness(build(values), resolve(f"variant:{name}")).every_edge(faults)
    assert sweep.mismatch is not None, f"variant:{name} passed every edge"
    assert (sweep.mismatch.action, sweep.mismatch.step) == (action, step), str(sweep.mismatch)
    assert sweep.trace is not None and len(sweep.trace.steps) == step + 1


# each variant's engine held to the spec under its own variant: random runs with faults of
# the sweep configuration that catches it against the base spec, and of a longer workload.
# stray-warm-receive's engine takes a warm-up receive's completion in a big-gate window,
# where the variant's spec still fails the rank for it
DIFFERS_FROM_ITS_VARIANT = {"stray-warm-receive"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="the engine takes a warm-up "
                                            "receive in a big-gate window; its variant does not"))
    if n in DIFFERS_FROM_ITS_VARIANT else n for n in sorted(CAUGHT)])
def test_a_variant_engine_behaves_as_its_variant(name):
    values, _ = SWEPT[CAUGHT[name][2] - 1]
    for config in (values, {"window": 2, "ops": 12,
                            "verify_blocks": values.get("verify_blocks", 0)}):
        done = list(runs(build(config, (name,)), resolve(f"variant:{name}"), n=20,
                         fault_rate=0.05))
        bad = [r.mismatch for r in done if r.mismatch]
        assert not bad, str(bad[0])


# ---------------------------------------------------------------- every path up to a depth
def count_paths(system, s, depth, max_faults, faults=0):
    """The action sequences of 1 to ``depth`` steps from ``s``, counted on the spec alone."""
    n = 0
    for a in system.actions:
        if a.fault and faults >= max_faults:
            continue
        for args in a.enabled(s):
            n += 1
            if depth > 1:
                post, _ = a.apply(s, *args)
                n += count_paths(system, post, depth - 1, max_faults, faults + a.fault)
    return n


def test_every_path_up_to_a_depth_runs_in_lockstep():
    values, faults = PATH_CONFIGS[0]
    system = build(values)
    walk = GateHarness(system).every_path(6, faults)
    assert walk.mismatch is None, str(walk.mismatch)
    assert walk.paths == count_paths(system, system.initial(), 6, faults) > 100
    assert walk.depth == 6 and walk.states > 1


def test_every_path_finds_a_planted_bug_with_its_path():
    system = build({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 3,
                    "big_gates": 0, "faults": 0})
    walk = GateHarness(system, lambda cfg, r, grant: RepostTooFar(cfg, grant)).every_path(
        40, 0)
    assert walk.mismatch is not None and walk.mismatch.action == "gate_done"
    assert len(walk.trace.steps) == walk.mismatch.step + 1
    assert walk.trace.steps[-1].action == "gate_done"
    # the path replays to the same mismatch
    moves = [(t.action, t.args) for t in walk.trace.steps[1:]]
    again = GateHarness(system, lambda cfg, r, grant: RepostTooFar(cfg, grant)).follow(moves)
    assert str(again.mismatch) == str(walk.mismatch)
    with pytest.raises(ValueError, match="at least 1"):
        GateHarness(system).every_path(0, 0)


# ---------------------------------------------------------------- a misbehaving peer
# The base spec's two correct ranks never send a wrong barrier byte, header or completion, so
# the suite cannot reach these refusals; each is driven here directly, its text being the
# declaration the spec fails with.
CFG = build({}).params


def _engine(phase, **state):
    e = GateEngine(CFG)
    e.phase = phase
    for k, v in state.items():
        setattr(e, k, v)
    return e


@pytest.mark.parametrize("phase,state,item,text", [
    (ARM_BAR_READ, {}, TcpItem("byte", 0), errors.WINDOW_BARRIER_MISMATCH(got=0, want=0xD1)),
    (ARM_BAR_READ, {}, TcpItem("header", 1, 2, 64),
     errors.WINDOW_BARRIER_MISMATCH(got=HEADER_MAGIC & 0xFF, want=0xD1)),
    (BIG_BAR_READ, {"barrier_tag": 3}, TcpItem("byte", 4), errors.BIG_BARRIER()),
    (BIG_HDR_READ, {"big_no": 2, "big_chunks": 5}, TcpItem("byte", 0xD1),
     errors.BIG_HEADER_MISFRAMED(item="byte 0xd1")),
    (BIG_HDR_READ, {"big_no": 2, "big_chunks": 5}, TcpItem("header", 3, 5, 64),
     errors.BIG_DESYNC(got_layer=BIG_LAYER, got_tag=BIG_MAGIC, got_seq=3, layer=BIG_LAYER,
                       seq=2)),
    (BIG_HDR_READ, {"big_no": 2, "big_chunks": 5}, TcpItem("header", 2, 4, 64),
     errors.BIG_SIZE_MISMATCH(big=2, chunks=5, peer_chunks=4)),
])
def test_a_wrong_tcp_item_fails_the_rank_with_the_spec_text(phase, state, item, text):
    e = _engine(phase, **state)
    assert e.tcp_read(item).result == text
    assert (e.view().phase, e.view().error) == (FAILED, text)


def _recv(wr_id, byte_len=CFG.max_msg):
    return Completion("recv", wr_id, 0, byte_len)


@pytest.mark.parametrize("polled,text", [
    ((_recv(7),), errors.BIG_UNTAGGED(wr_id=7)),
    ((_recv(TAG_BULK | 0),), errors.BIG_INVALID(wr_id=TAG_BULK)),
    ((_recv(TAG_BULK | 3),), errors.BIG_INVALID(wr_id=TAG_BULK | 3)),
    ((_recv(TAG_BULK | 1), _recv(TAG_BULK | 1)), errors.BIG_INVALID(wr_id=TAG_BULK | 1)),
    ((_recv(TAG_BULK | 2, 100),), errors.BIG_LENGTH(chunk=1, got=100, want=CFG.max_msg)),
])
def test_a_wrong_big_gate_completion_fails_the_window(polled, text):
    e = _engine(BIG_XFER, big_win=2)
    assert e.completions(polled).result == text and e.view().phase == FAILED


def test_a_big_window_with_the_decode_window_armed_is_refused():
    e = _engine(BIG_BEGIN, window_active=True)
    assert e.advance().result == errors.BIG_UNAVAILABLE()


@pytest.mark.parametrize("engine,call", [
    (_engine(IDLE), lambda e: e.consume()), (_engine(HOLD), lambda e: e.call_big(2)),
    (_engine(HOLD), lambda e: e.poll_size()),
    (_engine(HOLD), lambda e: e.tcp_read(TcpItem("byte", 0xD1))),
    (_engine(HOLD), lambda e: e.timeout()), (_engine(HOLD), lambda e: e.peer_closed()),
    (_engine(INIT), lambda e: e.advance()),
    (_engine(WAIT, seq=3, recv_done=2), lambda e: e.advance()),
    (_engine(DRAIN_WAIT), lambda e: e.advance()),
    (_engine(BIG_XFER, big_win=2, big_sent=2, send_outstanding=2), lambda e: e.advance()),
    # every send completed but a receive missing: not complete either
    (_engine(BIG_XFER, big_win=2, big_sent=2, big_recvd={0}, big_send_done=2),
     lambda e: e.advance()),
])
def test_a_call_out_of_phase_is_refused_by_name(engine, call):
    with pytest.raises(EngineError, match=r"^(the engine (is in|has no step of its own in) "
                                          r"phase|gate \d+ is not complete|the drain is not "
                                          r"over|the big-gate window is neither)"):
        call(engine)


N_DRAIN = CFG.window * CFG.chunks


@pytest.mark.parametrize("phase,state,step", [
    (INIT, {}, gate_engine.SETUP), (IDLE, {}, gate_engine.CALL), (HOLD, {}, gate_engine.CALL),
    (FAILED, {}, gate_engine.DEAD), (CRASHED, {}, gate_engine.DEAD),
    (ARM_POST, {}, gate_engine.ADVANCE), (ARM_BAR_READ, {}, gate_engine.READ),
    (WAIT, {"seq": 3, "recv_done": 3}, gate_engine.ADVANCE),
    (WAIT, {"seq": 3, "recv_done": 2}, gate_engine.POLL),
    (DRAIN_WAIT, {"drain_recvs": N_DRAIN, "drain_sends": N_DRAIN}, gate_engine.ADVANCE),
    (DRAIN_WAIT, {"drain_recvs": N_DRAIN - 1, "drain_sends": N_DRAIN}, gate_engine.POLL),
    (DRAIN_WAIT, {"drain_recvs": N_DRAIN, "drain_sends": N_DRAIN - 1}, gate_engine.POLL),
    (DRAIN_WAIT, {"drain_recvs": N_DRAIN, "drain_sends": N_DRAIN, "send_outstanding": 1},
     gate_engine.POLL),
    (BIG_XFER, {"big_win": 2}, gate_engine.ADVANCE),
    (BIG_XFER, {"big_win": 2, "big_sent": 1}, gate_engine.ADVANCE),
    # the window's sends in flight (sent, none completed) fill the send depth
    (BIG_XFER, {"big_win": CFG.big_send_depth() + 1, "big_sent": CFG.big_send_depth()},
     gate_engine.POLL),
    (BIG_XFER, {"big_win": CFG.big_send_depth() + 1, "big_sent": CFG.big_send_depth(),
                "big_send_done": 1}, gate_engine.ADVANCE),
    (BIG_XFER, {"big_win": 2, "big_sent": 2, "big_recvd": {0, 1}, "big_send_done": 2},
     gate_engine.ADVANCE),
    (BIG_XFER, {"big_win": 2, "big_sent": 2, "big_recvd": {0}, "big_send_done": 2},
     gate_engine.POLL),
    (BIG_XFER, {"big_win": 2, "big_sent": 2, "big_recvd": {0, 1}, "big_send_done": 1},
     gate_engine.POLL),
])
def test_next_step_tells_a_driver_what_the_phase_waits_for(phase, state, step):
    assert _engine(phase, **state).next_step() == step


def test_a_late_bulk_send_completion_only_lowers_the_outstanding_count():
    # the suite never leaves one behind (a drain and each big-gate window wait for all their
    # sends); one polled in a decode gate counts toward neither
    e = _engine(WAIT, seq=1, send_outstanding=2)
    assert e.completions((Completion("send", TAG_BULK | 1, 0, 0),)) == Emitted()
    assert (e.send_outstanding, e.drain_sends, e.big_send_done, e.phase) == (1, 0, 0, WAIT)


@pytest.mark.parametrize("state", [
    {"drain_recvs": CFG.window, "drain_sends": CFG.window},     # a vector's worth short
    {"drain_recvs": N_DRAIN, "drain_sends": N_DRAIN - 1},
    {"drain_recvs": N_DRAIN - 1, "drain_sends": N_DRAIN},
    {"drain_recvs": N_DRAIN, "drain_sends": N_DRAIN, "send_outstanding": 1},
])
def test_a_drain_is_not_over_until_every_dummy_and_send_completed(state):
    # the lockstep advances only when the spec ends the drain; a driver that advances early
    # is refused, whichever count is short
    assert CFG.chunks == 2
    with pytest.raises(EngineError, match="the drain is not over"):
        _engine(DRAIN_WAIT, **state).advance()


def test_a_gate_out_of_order_fails_the_rank_with_the_spec_text():
    # bad_call is a fault the random runs take rarely; each refusal's text, exactly
    e = _engine(IDLE, last_gate_seq=2)
    slot = CFG.slot(3)
    wrong = slot + 1
    assert e.call_gate(wrong // 2, wrong % 2, 3).result == errors.GATE_ORDER(
        layer=wrong // 2, gate=wrong % 2, seq=3)
    e = _engine(IDLE, last_gate_seq=2)
    slot = CFG.slot(4)
    assert e.call_gate(slot // 2, slot % 2, 4).result == errors.GATE_SEQ_ORDER(seq=4, last=2)
    assert (e.view().phase, e.view().error) == (FAILED, errors.GATE_SEQ_ORDER(seq=4, last=2))
    e = _engine(IDLE, last_gate_seq=2)
    slot = CFG.slot(3)
    assert e.call_gate(slot // 2, slot % 2, 3) == Emitted() and e.seq == 3


def test_the_granted_depth_defaults_to_the_receive_queue():
    assert GateEngine(CFG).grant == CFG.rq_depth and GateEngine(CFG, 5).grant == 5


def test_poll_sizes_and_out_of_phase_texts_are_exact():
    sizes = {WAIT: 16, DRAIN_WAIT: 2 * CFG.window + 1, BIG_XFER: 64}
    assert {p: _engine(p).poll_size() for p in sizes} == sizes
    with pytest.raises(EngineError) as refused:
        _engine(HOLD).poll_size()
    assert str(refused.value) == (f"the engine is in phase {HOLD}, not {WAIT} or {DRAIN_WAIT} "
                                  f"or {BIG_XFER} or block_wait or block_end")


def _send(wr_id):
    return Completion("send", wr_id, 0, 0)


def test_each_completion_counts_once_toward_its_drain_or_window():
    # the view does not show these counts; next_step and the timeout texts do
    # a dummy's completion counts for the drain only, a decode gate's send for send_outstanding
    e = _engine(DRAIN_WAIT, drain_recvs=N_DRAIN - 2, drain_sends=N_DRAIN - 2, send_outstanding=3)
    e.completions((_recv(0), _send(TAG_BULK | 1), _send(3)))
    assert (e.drain_recvs, e.drain_sends, e.send_outstanding) == (N_DRAIN - 1, N_DRAIN - 1, 2)
    assert e.next_step() == gate_engine.POLL
    assert e.timeout().result == errors.DRAIN_TIMEOUT(recvs=N_DRAIN - 1, want=N_DRAIN)
    e = _engine(BIG_XFER, big_win=2, big_sent=2, big_recvd={0, 1})
    e.completions((_send(TAG_BULK | 1),))
    assert (e.big_send_done, e.send_outstanding, e.next_step()) == (1, 0, gate_engine.POLL)
    assert e.timeout().result == errors.BIG_TIMEOUT(recvs=2, chunks=2, sends=1, sent=2)


# the random runs take a timeout or a peer's close as a fault, rarely in the phases that read
# the side channel; each wait's text, exactly
@pytest.mark.parametrize("phase,state,end,text", [
    (WAIT, {"seq": 3, "recv_done": 2}, "timeout", errors.GATE_TIMEOUT(seq=3, recv_done=2)),
    (DRAIN_WAIT, {"drain_recvs": 1}, "timeout", errors.DRAIN_TIMEOUT(recvs=1, want=N_DRAIN)),
    (ARM_BAR_READ, {}, "timeout", errors.WINDOW_BARRIER_TIMEOUT()),
    (BIG_HDR_READ, {"big_no": 2}, "timeout",
     errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=2, reason=errors.READ_TIMEOUT_ERRNO)),
    (BIG_BAR_READ, {}, "timeout", errors.BIG_BARRIER()),
    (BIG_XFER, {"big_win": 3, "big_sent": 2, "big_recvd": {0}, "big_send_done": 1}, "timeout",
     errors.BIG_TIMEOUT(recvs=1, chunks=3, sends=1, sent=2)),
    (WAIT, {}, "peer_closed", errors.GATE_PEER()),
    (DRAIN_WAIT, {}, "peer_closed", errors.DRAIN_PEER()),
    (ARM_BAR_READ, {}, "peer_closed", errors.WINDOW_BARRIER_CLOSED()),
    (BIG_HDR_READ, {"big_no": 2}, "peer_closed",
     errors.BIG_HEADER_FAILED(layer=BIG_LAYER, seq=2, reason=errors.PEER_CLOSED_ERRNO)),
    (BIG_BAR_READ, {}, "peer_closed", errors.BIG_BARRIER()),
    (BIG_XFER, {}, "peer_closed", errors.BIG_PEER()),
])
def test_a_wait_that_times_out_or_loses_its_peer_fails_with_the_spec_text(
        phase: str, state: dict, end: str, text: str) -> None:
    e = _engine(phase, **state)
    assert getattr(e, end)().result == text
    assert (e.view().phase, e.view().error) == (FAILED, text)


def test_a_big_window_posts_no_more_sends_than_the_send_queue_has_room_for() -> None:
    # the lockstep posts a window's sends only when the spec has room for them; an advance
    # with the window's sends in flight (sent - completed) two short of the send depth posts
    # two, and with them at the depth is refused
    depth = CFG.big_send_depth()
    e = _engine(BIG_XFER, big_win=depth + 8, big_sent=depth - 1, big_send_done=1)
    sent = e.advance().sends
    assert [s.wr_id for s in sent] == [TAG_BULK | depth, TAG_BULK | (depth + 1)]
    assert (e.big_sent, e.send_outstanding, e.next_step()) == (depth + 1, 0, gate_engine.POLL)
    with pytest.raises(EngineError, match="the big-gate window is neither sendable nor complete"):
        e.advance()


def _state(e: GateEngine) -> dict:
    """Every field of an engine, its sets frozen: a snapshot a later step cannot change."""
    return {k: frozenset(v) if isinstance(v, set) else v for k, v in vars(e).items()}


class _CopiedAtEachCall:
    """A rank's engine that takes each call on a copy of itself, the copy then standing in for
    it; the original, left behind, must not have moved."""

    def __init__(self, engine: GateEngine) -> None:
        self.engine = engine

    def __getattr__(self, name: str) -> object:
        found = getattr(self.engine, name)
        if name in ("view", "poll_size") or not callable(found):
            return found

        def on_a_copy(*args: object) -> object:
            original, before = self.engine, _state(self.engine)
            self.engine = copy.deepcopy(original)
            out = getattr(self.engine, name)(*args)
            if _state(original) != before:
                raise AssertionError(f"{name} on a copy moved the original")
            return out

        return on_a_copy


COPY_CONFIGS = [*CONFIGS, {"window": 2, "ops": 4, "vec_bytes": 100, "verify_blocks": 1},
                {"window": 2, "ops": 4, "vec_bytes": 100, "verify_blocks": 1,
                 "verify_window": "off"},
                {"window": 2, "ops": 4, "vec_bytes": 100, "verify_blocks": 1,
                 "post_failures": 1}]


@pytest.mark.parametrize("values", COPY_CONFIGS, ids=lambda v: ",".join(
    f"{k}={x}" for k, x in v.items()) or "defaults")
def test_an_engine_copied_at_every_step_goes_on_as_the_original(values: dict) -> None:
    system = build(values)
    bad = [r.mismatch for r in runs(system, lambda cfg, r, grant: _CopiedAtEachCall(
        GateEngine(cfg, grant)), n=10, steps=1000, fault_rate=0.05) if r.mismatch]
    assert not bad, str(bad[0])


class _Keeping(GateEngine):
    """An engine with state of its own that a step changes: a list of the calls it took."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[str] = []

    def advance(self) -> Emitted:
        self.calls.append(self.phase)
        return super().advance()


def test_a_copy_shares_only_what_no_step_changes() -> None:
    e = _Keeping(CFG)
    e.phase, e.seq = ARM_POST, 1
    assert e.advance().recvs and e.before_post is not None      # a step that posted
    e.big_recvd = {0, 1}
    mine = copy.deepcopy(e)
    assert type(mine) is _Keeping and _state(mine) == _state(e)
    assert mine.cfg is e.cfg and mine.before_post is e.before_post
    assert mine.big_recvd is not e.big_recvd and mine.calls is not e.calls
    again = e.copy()
    assert type(again) is _Keeping and _state(again) == _state(e)
    assert again.big_recvd is not e.big_recvd and again.calls is not e.calls


def test_the_engine_takes_its_poll_sizes_and_buffer_names_from_the_spec_vocabulary() -> None:
    assert gate_engine.POLL_BATCH is constants.POLL_BATCH
    assert gate_engine.VECTOR_BUFFERS is constants.VECTOR_BUFFERS
    assert native_gate.BUFS is constants.BUFFERS
