"""The native engines driven through their C ABI: traces of random lockstep runs replayed by the
C drivers of native/replay/ agree with the spec step for step; a mutant engine linked into a
driver is caught at a named step; malformed scripts and traces are refused by name."""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from configs import GATE_SMALL, TAGMATCH_CONFIGS
from conftest import native_module, require

from verbspec import native as native_pkg
from verbspec.proofs.traces import write_trace
from verbspec.refimpl.bindings.cprogram import BuildError, compiler
from verbspec.refimpl.bindings.native_gate import native_engine
from verbspec.refimpl.bindings.native_tagmatch import native
from verbspec.refimpl.cli.main import main
from verbspec.refimpl.conformance import c_replay
from verbspec.refimpl.conformance.gate import GateHarness
from verbspec.refimpl.conformance.tagmatch import TagmatchHarness
from verbspec.spec.gate.system import build as gate_build
from verbspec.spec.tagmatch.system import build as tag_build

GATE_CONFIGS = [{**GATE_SMALL, "ops": 12}, {"window": 2, "ops": 12}, {}]
# failing posts and polls: decode gates and big gates, and verify blocks beside them
POST_FAILURE_CONFIGS = [{**GATE_SMALL, "ops": 12, "post_failures": 1},
                        {"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 8,
                         "post_failures": 1, "verify_blocks": 1}]
MISMATCH = re.compile(r"step (\d+) (\w+): (\S+): expected .*, got ")


def _compiler() -> None:
    try:
        compiler()
    except BuildError as e:
        require("native", f"the C drivers cannot be built: {e}")


@pytest.fixture(scope="module")
def drivers():
    _compiler()
    with c_replay.Drivers() as d:
        yield d


def gate_runs(values, n, seed=0, fault_rate=0.05, steps=3000):
    native_module("gate")
    system = gate_build(values)
    harness = GateHarness(system, native_engine)
    return system, [harness.run(random.Random(seed + k), steps, fault_rate) for k in range(n)]


def tag_runs(values, n, seed=0):
    native_module("tagmatch")
    system = tag_build(values)
    harness = TagmatchHarness(system, native)
    return system, [harness.run(random.Random(seed + k), 400) for k in range(n)]


def replay_runs(drivers, system, runs):
    """Each run's trace through the driver: (steps agreed on, the first mismatch)."""
    steps = 0
    for run in runs:
        assert run.mismatch is None, str(run.mismatch)
        rep = drivers.run(system.protocol, c_replay.script(
            system.protocol, system, c_replay.trace_steps(system, run.trace)))
        if rep.mismatch is not None:
            return steps, rep.mismatch
        assert rep.steps == run.steps
        steps += rep.steps
    return steps, None


# ---------------------------------------------------------------------------- agreement
def test_random_gate_runs_agree_through_the_c_driver(drivers):
    reached: Counter = Counter()
    taken: set[str] = set()
    for values in GATE_CONFIGS[:2]:
        system, runs = gate_runs(values, 15)
        steps, mismatch = replay_runs(drivers, system, runs)
        assert mismatch is None, mismatch
        assert steps == sum(r.steps for r in runs) > 500
        for r in runs:
            taken.update(r.actions)
            for m, v in r.reached.items():
                reached[m] = max(reached[m], v)
    # decode gates past the window, big-gate windows, and faults were among the steps
    assert reached["gates_past_window"] >= 1 and reached["big_gate_windows"] >= 1, reached
    faults = {a.name for a in system.actions if a.fault}
    assert len(faults & taken) >= 3, taken


@pytest.mark.parametrize("values", POST_FAILURE_CONFIGS, ids=("gates", "verify-blocks"))
def test_random_gate_runs_with_failing_posts_agree_through_the_c_driver(drivers, values):
    """A post_fail step is the rank's advance then its post_failed, replayed as one line."""
    system, runs = gate_runs(values, 30, fault_rate=0.1)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    assert steps == sum(r.steps for r in runs)
    taken = Counter(a for r in runs for a in r.actions.elements())
    assert taken["post_fail"] >= 3 and taken["poll_fail"] >= 3, taken


@pytest.mark.parametrize("values", [{**GATE_SMALL, "rank1_max_msg": 32768},
                                    {**GATE_SMALL, "rank1_window": 3}],
                         ids=("message-cap", "window"))
def test_ranks_built_apart_refuse_each_other_through_the_c_driver(drivers, values):
    """Each rank's setup is handed its peer's hello: both fail, with the spec's texts."""
    system, runs = gate_runs(values, 5, fault_rate=0.0)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    assert all(r.steps == 2 for r in runs) and steps == 10


def test_verify_blocks_of_other_rows_are_refused_through_the_c_driver(drivers):
    """Rank 1's block of two rows against rank 0's of one: each block header read fails."""
    system, runs = gate_runs({**GATE_SMALL, "ops": 1, "verify_blocks": 1, "big_gates": 0,
                              "faults": 0, "rank1_block_rows": 2}, 10)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    # where the one op is a block, the headers cross and both reads fail: no block gets to
    # post its receives
    blocks = [r for r in runs if r.actions["call_block"]]
    assert blocks and all(r.actions["block_header_read"] == 2 and not r.actions["block_post"]
                          for r in blocks), [r.actions for r in runs]


def test_verify_blocks_as_batch_gates_agree_through_the_c_driver(drivers):
    """The verify window switched off: each layer's batch header, drain and big-gate windows
    of the layer's rows, the last chunk short."""
    system, runs = gate_runs({"window": 2, "vec_bytes": 100, "max_msg": 64, "chain_max": 2,
                              "big_depth": 2, "ops": 3, "big_gates": 0, "verify_blocks": 1,
                              "block_rows": 2, "verify_window": "off"}, 20, fault_rate=0.01)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    assert steps == sum(r.steps for r in runs)
    taken = Counter(a for r in runs for a in r.actions.elements())
    assert taken["batch_header_read"] >= 10 and taken["big_window_done"] >= 10, taken


def test_a_rank_with_its_verify_window_off_is_refused_through_the_c_driver(drivers):
    """Rank 1's switch reaches its engine through the config line: its batch header meets
    rank 0's block header, and both reads fail."""
    system, runs = gate_runs({**GATE_SMALL, "ops": 1, "verify_blocks": 1, "big_gates": 0,
                              "faults": 0, "rank1_verify_window": "off"}, 10)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    blocks = [r for r in runs if r.actions["call_block"]]
    assert blocks and all(r.actions["block_header_read"] == 1
                          and r.actions["batch_header_read"] == 1 for r in blocks), [
        r.actions for r in runs]


@pytest.mark.parametrize("values", TAGMATCH_CONFIGS[:3], ids=("defaults", "no-offload",
                                                              "offload-small"))
def test_random_tag_matching_runs_agree_through_the_c_driver(drivers, values):
    system, runs = tag_runs(values, 15)
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    assert steps == sum(r.steps for r in runs) > 100


@pytest.mark.slow
@pytest.mark.parametrize("protocol, values", [("gate", v) for v in GATE_CONFIGS]
                         + [("gate", v) for v in POST_FAILURE_CONFIGS]
                         + [("tagmatch", v) for v in TAGMATCH_CONFIGS])
def test_many_random_runs_agree_through_the_c_driver(drivers, protocol, values):
    system, runs = (gate_runs(values, 200, seed=1000) if protocol == "gate"
                    else tag_runs(values, 300, seed=1000))
    steps, mismatch = replay_runs(drivers, system, runs)
    assert mismatch is None, mismatch
    assert steps == sum(r.steps for r in runs)


@pytest.mark.slow
def test_the_drivers_run_clean_under_asan_and_ubsan():
    _compiler()
    flags = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer")
    with c_replay.Drivers(flags) as sanitized:
        for system, runs in (gate_runs(GATE_CONFIGS[0], 20),
                             *(gate_runs(v, 20, fault_rate=0.1) for v in POST_FAILURE_CONFIGS),
                             gate_runs({**GATE_SMALL, "rank1_window": 3}, 2, fault_rate=0.0),
                             tag_runs(TAGMATCH_CONFIGS[2], 40)):
            assert replay_runs(sanitized, system, runs)[1] is None


# ---------------------------------------------------------------------------- catching
@pytest.mark.parametrize("protocol, mutant", [("gate", 2), ("gate", 6), ("tagmatch", 5),
                                              ("tagmatch", 7)])
def test_a_mutant_engine_is_caught_at_a_named_step(protocol, mutant):
    _compiler()
    system, runs = (gate_runs(GATE_CONFIGS[1], 5) if protocol == "gate"
                    else tag_runs(TAGMATCH_CONFIGS[2], 5))
    with c_replay.Drivers([f"-DVS_MUTANT={mutant}"]) as broken:
        _, mismatch = replay_runs(broken, system, runs)
    assert mismatch is not None, f"{protocol} mutant {mutant} survived"
    m = MISMATCH.match(mismatch)
    assert m, mismatch
    assert m.group(2) in {a.name for a in system.actions}


def test_a_mutant_the_engine_lacks_or_two_mutants_are_refused_by_name():
    _compiler()
    with c_replay.Drivers(["-DVS_MUTANT=99"]) as d, pytest.raises(
            c_replay.DriverError, match="the gate engine has no mutant 99"):
        d.driver("gate")
    with pytest.raises(c_replay.DriverError, match="more than one mutant asked for: 1, 2"):
        c_replay.Drivers(["-DVS_MUTANT=1", "-O0", "-DVS_MUTANT=2"])
    assert c_replay.split_flags(["-O0", "-DVS_MUTANT=3"]) == (3, ("-O0",))


def test_a_wrong_expectation_is_reported_with_its_step_field_and_values(drivers):
    system, runs = gate_runs(GATE_CONFIGS[0], 1)
    text = c_replay.script("gate", system, c_replay.trace_steps(system, runs[0].trace))
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines[2:], 2) if "\tr1.recv_done=0\t" in line
              and " advance " not in line)
    lines[at] = lines[at].replace("\tr1.recv_done=0\t", "\tr1.recv_done=7\t")
    rep = drivers.run("gate", "".join(lines))
    step, action = lines[at].split()[:2]
    assert rep.mismatch == f"step {step} {action}: r1.recv_done: expected 7, got 0"


# ---------------------------------------------------------------------------- the command
def test_conform_c_driver_replays_every_random_run(tmp_path, capsys):
    native_module("gate")
    native_module("tagmatch")
    assert main(["conform", "--impl", "native", "--c-driver", "--protocol", "all",
                 "--examples", "6", "--steps", "400", "--fault-rate", "0.05",
                 "--trace-dir", str(tmp_path), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    for res in out["results"]:
        c = res["c_driver"]
        assert c["traces"] == res["sequences"] == 6, res
        assert c["steps"] == res["steps"] > 0 and c["mismatches"] == 0, res
    assert not list(tmp_path.iterdir())


def test_replay_files_through_the_c_driver(tmp_path, capsys):
    _compiler()
    files, total = [], 0
    for system, runs in (gate_runs(GATE_CONFIGS[1], 2, steps=150),
                         tag_runs(TAGMATCH_CONFIGS[2], 1)):
        for k, run in enumerate(runs):
            files.append(str(write_trace(run.trace, tmp_path / f"{system.protocol}{k}.itf.json")))
            total += run.steps
    assert main(["conform", "--impl", "native", "--c-driver", "--replay", *files,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["c_driver"]["traces"] == 3 and out["c_driver"]["steps"] == total
    assert [f["protocol"] for f in out["files"]] == ["gate", "gate", "tagmatch"]
    # the gate files against a mutant gate engine: exit 1, the step named
    assert main(["conform", "--impl", "native", "--c-driver", "--replay", *files[:2],
                 "--driver-cflags=-DVS_MUTANT=2"]) == 1
    assert MISMATCH.search(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--impl", "refimpl", "--c-driver"], "it needs --impl native, not refimpl"),
    (["--impl", "native", "--replay", "x.itf.json"], "it needs --c-driver"),
    (["--impl", "native", "--driver-cflags=-O0"], "it needs --c-driver"),
    (["--impl", "native", "--c-driver", "--exhaustive"],
     "no --mutants, --exhaustive or --coverage"),
    (["--impl", "native", "--c-driver", "--replay", "x", "--param", "window=2"],
     "no --param"),
])
def test_c_driver_options_refuse_what_they_cannot_run(argv, message, capsys):
    assert main(["conform", *argv]) == 3
    assert message in capsys.readouterr().err


def test_a_malformed_trace_file_is_refused_by_name(tmp_path, capsys):
    _compiler()
    bad = tmp_path / "bad.itf.json"
    bad.write_text("{not json")
    assert main(["conform", "--impl", "native", "--c-driver", "--replay", str(bad)]) == 3
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
    # a well-formed trace whose move the spec does not have enabled
    system, runs = gate_runs(GATE_CONFIGS[0], 1)
    doc = json.loads(write_trace(runs[0].trace, tmp_path / "t.itf.json").read_text())
    doc["states"][2]["args"]["#map"][0][1] = 99
    (tmp_path / "t.itf.json").write_text(json.dumps(doc))
    assert main(["conform", "--impl", "native", "--c-driver", "--replay",
                 str(tmp_path / "t.itf.json")]) == 3
    err = capsys.readouterr().err
    assert f"{tmp_path / 't.itf.json'}: step 2: action" in err and "is not enabled" in err


GATE_CONFIG = ("config vec_bytes=16384 max_msg=16384 window=2 gates_per_token=0 n_slots=64 "
               "slot_start=0 slot_step=1 slot_mask=0 rq_depth=64 sq_depth=64 big_depth=16 "
               "chain_max=4 staging_bytes=1048576 big_last_bytes=0 grant0=64 grant1=4 "
               "block_layers=2 block_rows=1 verify_window_off=0 rank1_max_msg=0 rank1_window=0 "
               "rank1_block_rows=0 rank1_verify_window_off=0")


def _run_script(drivers, protocol: str, tmp_path: Path, script: str
                ) -> tuple[Path, subprocess.CompletedProcess]:
    path = tmp_path / "s.txt"
    path.write_text(script)
    return path, subprocess.run([str(drivers.driver(protocol)), str(path)],
                                capture_output=True, text=True)


@pytest.mark.parametrize("script, message", [
    ("", ": empty script: expected 'verbspec-replay gate'"),
    ("verbspec-replay tag\n", "line 1: a script for the tag engine, not gate"),
    ("verbspec-replay gate\nconfig window=2\n", "line 2: config is missing 'vec_bytes'"),
    ("verbspec-replay gate\n" + GATE_CONFIG + " colour=3\n",
     "line 2: unknown config name 'colour'"),
    ("verbspec-replay gate\n" + GATE_CONFIG.replace("window=2", "window=-2") + "\n",
     "line 2: window: expected an unsigned 64-bit integer, found '-2'"),
    ("verbspec-replay gate\n" + GATE_CONFIG.replace("window=2", "window=0") + "\n",
     "line 2: the engine refuses the configuration of rank 0"),
    ("verbspec-replay gate\n" + GATE_CONFIG.replace("rank1_max_msg=0", "rank1_max_msg=100")
     + "\n", "line 2: the engine refuses the configuration of rank 1"),
    ("verbspec-replay gate\n" + GATE_CONFIG.replace("rank1_verify_window_off=0",
                                                    "rank1_verify_window_off=3") + "\n",
     "line 2: rank1_verify_window_off 3: expected 0, 1 or 2"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 batch_header_read tcp_read 0 batch 0 1\n",
     "line 3: tcp_read batch takes 3 arguments, the line gives 2"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 setup warp 0\n",
     "line 3: unknown call 'warp'"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 setup setup 2\n",
     "line 3: rank 2: expected 0 or 1"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 call call_gate 0 1 0 x\n",
     "line 3: seq: expected an unsigned 64-bit integer, found 'x'"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 setup setup 0 9\n",
     "line 3: setup takes 0 arguments, the line gives 1"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 setup setup 0\tr0.phase\n",
     "line 3: expected field 1 is not NAME=VALUE: 'r0.phase'"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 reap completions 0 1 1 send:0:5\n",
     "line 3: completion 'send...': expected OP:STATUS:WR_ID:BYTE_LEN"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 post_fail post_failed 0\n",
     "line 3: post_failed takes 1 argument, the line gives 0"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 post_fail post_failed 0 x\n",
     "line 3: posted: expected an unsigned 64-bit integer, found 'x'"),
    ("verbspec-replay gate\n" + GATE_CONFIG + "\n1 poll_fail poll_failed 0 1\n",
     "line 3: poll_failed takes 0 arguments, the line gives 1"),
])
def test_a_malformed_gate_script_exits_2_naming_the_line(drivers, tmp_path, script, message):
    path, done = _run_script(drivers, "gate", tmp_path, script)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith(f"{path}{message}" if message[0] == ":"
                                          else f"{path} {message}"), done.stderr


@pytest.mark.parametrize("script, message", [
    ("verbspec-replay tag\nconfig senders=1\n", "line 2: config is missing 'messages'"),
    ("verbspec-replay tag\nconfig senders=1 messages=1 tags=1 comms=1 max_bytes=1 "
     "eager_limit=1 capacity=0\n1 deliver delivered 0 0 0 0 1 huge\n",
     "line 3: packet kind 'huge': expected eager or rndv"),
    ("verbspec-replay tag\nconfig senders=1 messages=1 tags=1 comms=1 max_bytes=1 "
     "eager_limit=1 capacity=0\n1 send send 0 0 0\n",
     "line 3: send takes 4 arguments, the line gives 3"),
])
def test_a_malformed_tag_script_exits_2_naming_the_line(drivers, tmp_path, script, message):
    path, done = _run_script(drivers, "tagmatch", tmp_path, script)
    assert done.returncode == 2 and done.stderr.strip() == f"{path} {message}", done.stderr


def test_a_refused_call_is_a_mismatch(drivers, tmp_path):
    """The spec took the step; the engine refusing it is a difference, not a malformed
    script."""
    text = ("verbspec-replay tag\nconfig senders=1 messages=1 tags=1 comms=1 max_bytes=1 "
            "eager_limit=1 capacity=0\n1 rndv_read start_read 0\n")
    rep = drivers.run("tagmatch", text)
    assert rep.mismatch is not None
    assert rep.mismatch.startswith("step 1 rndv_read: the step: expected taken, got refused: ")


def test_a_post_failed_with_nothing_to_fail_is_a_mismatch(drivers):
    """post_failed after an advance that posted nothing (a barrier byte's write) is refused,
    as is one whose advance the engine cannot take."""
    system, runs = gate_runs(GATE_CONFIGS[0], 1)
    text = c_replay.script("gate", system, c_replay.trace_steps(system, runs[0].trace))
    lines = text.splitlines(keepends=True)

    def as_post_failed(where: str) -> tuple[str, str]:
        """The script to the first line where ``where``, its call made post_failed R 0."""
        at = next(i for i, line in enumerate(lines[2:], 2) if where in line)
        step, action, _, rank, *_ = lines[at].split("\t")[0].split()
        fields = lines[at].split("\t", 1)[1]
        return "".join(lines[:at]) + f"{step} {action} post_failed {rank} 0\t{fields}", (
            f"step {step} {action}: the step: expected taken, got refused: ")

    script, refused = as_post_failed("\ttcp_out=byte:")
    assert drivers.run("gate", script).mismatch == (
        refused + "no step of the engine has posted anything to fail")
    script, refused = as_post_failed(" call_gate ")
    assert drivers.run("gate", script).mismatch == (
        refused + "the engine has no step of its own in phase idle")


def test_the_driver_sources_are_warning_free(tmp_path):
    """At every optimization level and with the sanitizers (some warnings come only from the
    optimizer's range analysis), pedantic."""
    _compiler()
    replay = Path(c_replay.REPLAY)
    for opt in (("-O1",), ("-O2",), ("-O3",), ("-O1", "-fsanitize=address,undefined")):
        for source in ("gate_replay.c", "tagmatch_replay.c", "replay.c"):
            done = subprocess.run([compiler(), *c_replay.CFLAGS, *opt, "-Wpedantic", "-c",
                                   *(f"-I{native_pkg.engine(p).folder}" for p in c_replay.ENGINES),
                                   "-o", str(tmp_path / "x.o"), str(replay / source)],
                                  capture_output=True, text=True)
            assert done.returncode == 0 and done.stderr == "", (opt, source, done.stderr)
