"""``verbspec conform --impl native --coverage``: gcov line and branch coverage of the native
engines under the conformance suite.

Both engines are compiled again, instrumented (``--coverage -O0``), into a temporary
directory. A fresh interpreter then loads those builds in place of the installed ones and
drives them: random lockstep runs with faults and every-edge sweeps of both protocols, then,
where the source tree's ``tests/`` is at hand, the native engines' own tests (refusals, error
completions, copies, resets, allocation failures). The counts gcov writes when that
interpreter exits are read back with ``gcov --json-format`` and summed per engine file:
lines executed, and branch outcomes taken (each outcome of each condition is one branch).

The tag engine inlines its matching path's helpers into every caller (``always_inline``);
the coverage build compiles each of them once instead (``-Dalways_inline=unused``), so that
a source branch is counted once, not once per call site it was copied into.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from verbspec import native

ROOT = native.HERE.parent
FLAGS = ("-O0", "--coverage")
# the tag engine's inlined helpers compiled once each (see the module's text)
TAG_FLAGS = (*FLAGS, "-Dalways_inline=unused")
# the engines' allocations, sent to native/testing/alloc_fault.c's injector
WRAP = "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc"
# the protocols whose engines are measured (native.ENGINES names each engine's files)
ENGINES = ("gate", "tagmatch")
# the native tests that drive the installed build; the rest build engines of their own
TEST_FILES = ("bindings/test_native_gate.py", "bindings/test_native_tag.py")
OWN_BUILDS = ("not asan and not mutant and not every_bucket_is_shared and not warning_free "
              "and not globals")
# the drive: random runs per configuration, steps per run, the rate of faults (gate)
GATE_RANDOM = ({}, {"window": 2, "ops": 12}, {"window": 2, "ops": 10, "vec_bytes": 100},
               {"window": 3, "ops": 10, "qp_type": "rc", "chain_max": 2},
               {"window": 4, "gates_per_token": 0, "n_slots": 5, "big_depth": 3,
                "rq_depth": 2, "sq_depth": 2, "big_last_bytes": 8},
               # verify blocks with failing posts and polls, and with receive queues too
               # shallow for a layer (ds4's silent failures)
               {"window": 2, "ops": 10, "vec_bytes": 100, "verify_blocks": 1,
                "post_failures": 1},
               {"window": 2, "ops": 4, "verify_blocks": 1, "rq_depth": 3},
               {"window": 2, "ops": 4, "verify_blocks": 1, "rq_depth": 1},
               # verify blocks as batch gates (the window switched off), and a rank apart
               {"window": 2, "ops": 6, "vec_bytes": 100, "max_msg": 64, "big_depth": 2,
                "block_rows": 2, "verify_blocks": 1, "verify_window": "off"},
               {"window": 2, "ops": 4, "vec_bytes": 100, "verify_blocks": 1,
                "rank1_verify_window": "off"})
GATE_RUNS, GATE_STEPS, GATE_FAULT_RATE = 40, 2000, 0.02
TAG_RUNS, TAG_STEPS = 60, 400
# the allocation failure sweep's tag-matching jobs: a configuration (beyond the spec's
# bounds) and the share of NIC steps in a random job of it (low: ops and completions pile
# up), or the job's calls
TAG_FAULT_JOBS: tuple[tuple[dict[str, int], Any], ...] = (
    ({"senders": 3, "messages": 12, "tags": 2, "capacity": 3, "max_bytes": 2,
      "eager_limit": 1}, 0.4),
    ({"senders": 3, "messages": 12, "tags": 2, "capacity": 40, "max_bytes": 2,
      "eager_limit": 1}, 0.1),
    ({"senders": 3, "messages": 12, "tags": 2, "capacity": 0}, 0.0))


@dataclass(frozen=True)
class Miss:
    """A source line with branch outcomes never taken."""
    line: int
    missed: int
    branches: int
    text: str


@dataclass(frozen=True)
class FileCoverage:
    file: str
    lines: int
    lines_hit: int
    branches: int
    branches_hit: int
    misses: tuple[Miss, ...]

    @property
    def line_pct(self) -> float:
        return 100.0 * self.lines_hit / self.lines if self.lines else 100.0

    @property
    def branch_pct(self) -> float:
        return 100.0 * self.branches_hit / self.branches if self.branches else 100.0

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "lines": self.lines, "lines_hit": self.lines_hit,
                "line_pct": round(self.line_pct, 1), "branches": self.branches,
                "branches_hit": self.branches_hit, "branch_pct": round(self.branch_pct, 1),
                "misses": [asdict(m) for m in self.misses]}


@dataclass
class CoverageReport:
    files: list[FileCoverage] = field(default_factory=list)
    drive: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    failure: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"files": [f.as_json() for f in self.files], "drive": self.drive,
                "ok": self.ok, "failure": self.failure, "seconds": round(self.seconds, 1)}


class CoverageError(Exception):
    """The coverage run could not be made (no compiler, no gcov, a failed build)."""


# ------------------------------------------------------------------------------ building
def build(protocols: Sequence[str], tmp: Path, instrument: bool = True) -> dict[str, Path]:
    """Each protocol's engine compiled into ``tmp`` with gcov instrumentation (without it,
    ``instrument`` False) and linked with the allocation failure injector
    (``native/testing/alloc_fault.c``): the path of each built module."""
    fault = tmp / "alloc_fault.o"
    cc = os.environ.get("CC") or "cc"
    done = subprocess.run([cc, "-std=c11", "-O1", "-fPIC", "-Wall", "-Wextra", "-Werror", "-c",
                           str(native.ALLOC_FAULT), "-o", str(fault)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise CoverageError(f"native/testing/alloc_fault.c did not compile: "
                            f"{done.stderr.strip()}")
    link = (str(fault), WRAP)
    out = {}
    for proto in protocols:
        b = native.builder(proto)
        name = f"{native.engine(proto).module}_coverage" + ("" if instrument else "_faults")
        extra = (TAG_FLAGS if proto == "tagmatch" else FLAGS) if instrument else ()
        ffi = b.builder(name, (*b.FLAGS, *extra), absolute=True, link=link)
        try:
            out[proto] = Path(ffi.compile(tmpdir=str(tmp), verbose=False))
        except Exception as e:      # distutils' CompileError, LinkError: say which engine
            raise CoverageError(f"the coverage build of the {proto} engine failed: {e}") from e
    return out


# ------------------------------------------------------------------------------ the drive
def drive(mods: dict[str, ModuleType], tests: Path | None,
          note: Callable[[str], None]) -> dict[str, Any]:
    """The suite against the given builds (in this interpreter, which must exit for gcov to
    write its counts); what it ran. Raises AssertionError at a mismatch or a failed test."""
    done: dict[str, Any] = {}
    if "gate" in mods:
        from verbspec.refimpl.bindings.native_gate import factory
        from verbspec.refimpl.conformance.gate import GateHarness
        from verbspec.spec.gate.system import build as gate_system

        make = factory(mods["gate"])
        steps = 0
        for values in GATE_RANDOM:
            note(f"gate: random runs {values}")
            # seeded runs that may each take every fault (the suite's swarm leaves faults out
            # of half its runs; coverage wants them in every one)
            h = GateHarness(gate_system(values), make)
            for seed in range(GATE_RUNS):
                run = h.run(random.Random(seed), GATE_STEPS, GATE_FAULT_RATE)
                assert run.mismatch is None, f"gate {values}: {run.mismatch}"
                steps += run.steps
        done["gate_random_steps"] = steps
        # every edge of two-gate windows, one- and two-chunk vectors, big gates and every fault
        edges = 0
        for values, faults in GATE_EDGES:
            note(f"gate: every edge {values}")
            sw = GateHarness(gate_system(values), make).every_edge(faults)
            assert sw.mismatch is None, f"gate {values}: {sw.mismatch}"
            edges += sw.edges
        done["gate_edges"] = edges
    if "tagmatch" in mods:
        from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
        from verbspec.refimpl.conformance.tagmatch import (
            SWEEP_CONFIGS,
            TagmatchHarness,
        )
        from verbspec.spec.tagmatch.system import build as tag_system

        tag = mods["tagmatch"]

        def make_tag(cfg: Any) -> NativeTagEngine:
            return NativeTagEngine(cfg, tag)

        steps = 0
        for values in ({}, {"capacity": 0}, *SWEEP_CONFIGS):
            note(f"tagmatch: random runs {values}")
            h = TagmatchHarness(tag_system(values), make_tag)
            for seed in range(TAG_RUNS):
                run = h.run(random.Random(seed), TAG_STEPS)
                assert run.mismatch is None, f"tagmatch {values}: {run.mismatch}"
                steps += run.steps
        done["tagmatch_random_steps"] = steps
        edges = 0
        for values in SWEEP_CONFIGS:
            note(f"tagmatch: every edge {values}")
            sw = TagmatchHarness(tag_system(values), make_tag).every_edge()
            assert sw.mismatch is None, f"tagmatch {values}: {sw.mismatch}"
            edges += sw.edges
        done["tagmatch_edges"] = edges
    note("allocation failures")
    done["allocation_failures"] = alloc_failures(mods)
    if tests is not None:
        done["tests"] = _tests(mods, tests, note)
    return done


# every edge of small gate configurations (those of the refinement check that a sweep covers
# in seconds): two-gate windows with one- and two-chunk vectors, a drain and a big gate, faults
GATE_EDGES = (({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0,
                "faults": 1}, 1),
              ({"window": 2, "vec_bytes": 24576, "chain_max": 2, "ops": 3, "big_gates": 0,
                "faults": 0}, 0),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 1,
                "big_depth": 2, "faults": 0}, 0),
              # verify blocks with a fault a run; failing posts and polls in decode gates and
              # in verify blocks
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0,
                "faults": 1, "verify_blocks": 1}, 1),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0,
                "faults": 1, "post_failures": 1}, 1),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0,
                "faults": 1, "post_failures": 1, "verify_blocks": 1}, 1),
              # verify blocks as batch gates: after a decode gate, with a fault a run, and
              # ranks apart in their rows or in the switch
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0,
                "faults": 0, "verify_blocks": 1, "verify_window": "off"}, 0),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0,
                "faults": 1, "verify_blocks": 1, "verify_window": "off"}, 1),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0,
                "faults": 0, "verify_blocks": 1, "verify_window": "off",
                "rank1_block_rows": 2}, 0),
              ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0,
                "faults": 0, "verify_blocks": 1, "rank1_verify_window": "off"}, 0))


def _tests(mods: dict[str, ModuleType], tests: Path, note: Callable[[str], None]) -> int:
    """The native tests with the coverage builds in place of the installed ones: pytest's
    exit code (0: every test passed)."""
    import pytest

    real = native.load

    def load_coverage(engine: str) -> ModuleType | None:
        name = native.engine(engine).name
        return mods[name] if name in mods else real(engine)

    native.load = load_coverage
    files = [str(tests / f) for f, proto in zip(TEST_FILES, ENGINES, strict=True)
             if proto in mods]
    note("the native engines' tests")
    code = int(pytest.main([*files, "-q", "-n", "0", "-m", "not slow", "-k", OWN_BUILDS,
                            "-p", "no:cacheprovider"]))
    assert code == 0, f"the native tests failed under the coverage build (pytest exit {code})"
    return code


# ------------------------------------------------------------------------------ allocation
class Injector:
    """native/testing/alloc_fault.c in a built module: fail the allocation after the next n."""

    def __init__(self, mod: ModuleType):
        lib = ctypes.CDLL(mod.__file__)     # the module already loaded: the same library
        try:
            self._after, self._left = lib.vs_fault_alloc_after, lib.vs_fault_alloc_left
        except AttributeError:
            raise CoverageError(f"{mod.__file__} has no allocation failure injector") from None
        self._after.argtypes, self._after.restype = [ctypes.c_long], None
        self._left.argtypes, self._left.restype = [], ctypes.c_long

    def fail_after(self, n: int) -> None:
        self._after(n)

    def fired(self) -> bool:
        """Whether the armed failure happened (and disarms it if it did not)."""
        fired = self._left() < 0
        self._after(-1)
        return fired


def _each_failure(inject: Injector, call: Callable[[Any], Any],
                  setup: Callable[[], Any] = lambda: None) -> int:
    """``call(setup())`` with the allocation after the first n of the call failing, for
    n = 0, 1, ... until a call makes no more than n allocations: how many of its allocations
    were failed. ``setup`` (not armed) gives each attempt a fresh subject, so that no attempt
    starts with memory an earlier one grew."""
    n = 0
    while True:
        subject = setup()
        inject.fail_after(n)
        call(subject)
        if not inject.fired():
            return n
        n += 1


def _tag_script(cfg: Any, seed: int, calls: int, nic: float) -> list[tuple[Any, ...]]:
    """Calls the reference tag engine takes, at random: a job that grows every record array
    and ring of the native engine (receives past its first allocation, ops and completions
    queued past theirs, matches, cancels, syncs). ``nic``: the share of the NIC's steps and
    software's handling of its completions (low: ops and completions pile up)."""
    from verbspec.refimpl.engines.tagmatch_engine import EngineError, TagMatchEngine

    ref, rng = TagMatchEngine(cfg), random.Random(seed)
    # the calls by the reference engine's method names
    e = TagMatchEngine
    nic_steps = (e.hw_op.__name__, e.sw_complete.__name__)
    wire: list[Any] = []
    out: list[tuple[Any, ...]] = []
    while len(out) < calls:
        if rng.random() < nic:
            call: tuple[Any, ...] = (rng.choice(nic_steps),)
        else:
            k = rng.random()
            if k < 0.25:
                call = (e.post_recv.__name__, 0, rng.randrange(cfg.senders),
                        rng.randrange(cfg.tags), cfg.max_bytes)
            elif k < 0.45:
                call = (e.send.__name__, rng.randrange(cfg.senders), 0,
                        rng.randrange(cfg.tags), 1)
            elif k < 0.6 and wire:
                call = (e.delivered.__name__, wire.pop(0))
            elif k < 0.8:
                call = (e.cancel.__name__, rng.randrange(len(ref.recvs) + 1))
            else:
                call = (e.sw_sync.__name__,)
        try:
            got = getattr(ref, call[0])(*call[1:])
        except EngineError:
            continue
        wire += got.sends
        out.append(call)
    return out


def _ring_jobs() -> tuple[tuple[dict[str, int], tuple[tuple[Any, ...], ...]], ...]:
    """Jobs whose NIC steps find a ring full: a remove the NIC executes before any
    completion was queued (``hw_op`` makes the completion ring), and an unexpected message
    software handles before any op was queued (``sw_complete`` makes the op ring)."""
    from verbspec.refimpl.engines.tagmatch_engine import EAGER, Packet, TagMatchEngine

    e = TagMatchEngine
    nic = {"senders": 1, "messages": 2, "tags": 2, "capacity": 2, "max_bytes": 2,
           "eager_limit": 1}
    return ((nic, ((e.post_recv.__name__, 0, 0, 0, 2), (e.hw_op.__name__,),
                   (e.cancel.__name__, 0), (e.hw_op.__name__,), (e.sw_complete.__name__,))),
            (nic, ((e.send.__name__, 0, 0, 1, 1),
                   (e.delivered.__name__, Packet(0, 0, 0, 1, 1, EAGER)),
                   (e.sw_complete.__name__,), (e.sw_sync.__name__,), (e.hw_op.__name__,))))


def alloc_failures(mods: dict[str, ModuleType]) -> dict[str, int]:
    """Every allocation of the engines' calls failed in turn, in builds linked with the
    injector: creating, copying, reading the view, and each call of a job that grows every
    array. Each failed call must refuse as out of memory and leave its engine as it was, so
    that the same call then succeeds as it would have. How many failures were injected.
    Raises AssertionError where a failure is mishandled."""
    import copy

    out: dict[str, int] = {}
    if "gate" in mods:
        from verbspec.refimpl.bindings.native_gate import NativeGateEngine
        from verbspec.spec.gate.system import build as gate_system

        mod, inject = mods["gate"], Injector(mods["gate"])
        cfg = gate_system({}).params

        def gate_create(_: Any) -> None:
            try:
                NativeGateEngine(cfg, 0, mod)
            except ValueError as e:
                assert "out of memory" in str(e), e

        eng = NativeGateEngine(cfg, 0, mod)
        eng.setup()

        def gate_clone(_: Any) -> None:
            with contextlib.suppress(MemoryError):
                assert copy.deepcopy(eng).view() == eng.view()

        out["gate"] = _each_failure(inject, gate_create) + _each_failure(inject, gate_clone)
    if "tagmatch" in mods:
        from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
        from verbspec.spec.tagmatch.system import build as tag_system

        mod, inject = mods["tagmatch"], Injector(mods["tagmatch"])
        injected = 0
        for values, nic in (*TAG_FAULT_JOBS, *_ring_jobs()):
            cfg = replace(tag_system({}).params, **values)     # beyond the spec's bounds

            def tag_create(_: Any, cfg: Any = cfg) -> None:
                with contextlib.suppress(MemoryError):
                    NativeTagEngine(cfg, mod)

            injected += _each_failure(inject, tag_create)
            eng = NativeTagEngine(cfg, mod)
            script = _tag_script(cfg, 3, 200, nic) if isinstance(nic, float) else nic
            for name, *args in script:
                before = eng.view()
                got: list[Any] = []

                def copied(eng: Any = eng) -> Any:
                    twin = copy.deepcopy(eng)
                    twin.view()             # the copy's view arrays made before it is armed
                    return twin

                def step(twin: Any, name: str = name, args: Any = args, before: Any = before,
                         got: list[Any] = got) -> None:
                    try:
                        got.append((getattr(twin, name)(*args), twin))
                    except MemoryError:
                        assert twin.view() == before, f"{name}{tuple(args)} failed half-done"
                        # and it copies as what it was (an array grown before the failure
                        # included)
                        assert copy.deepcopy(twin).view() == before, f"{name}{tuple(args)}"

                injected += _each_failure(inject, step, copied)
                # the attempt that succeeded did what the untouched engine does
                (emitted, twin), = got
                assert emitted == getattr(eng, name)(*args), f"{name}{tuple(args)}"
                assert twin.view() == eng.view(), f"{name}{tuple(args)}"

                def view(fresh: Any) -> None:
                    with contextlib.suppress(MemoryError):
                        fresh.view()

                def clone(_: Any, eng: Any = eng) -> None:
                    with contextlib.suppress(MemoryError):
                        copy.deepcopy(eng)

                # the view's own allocations, on a copy that has made none yet, and a copy's
                injected += _each_failure(inject, view, lambda eng=eng: copy.deepcopy(eng))
                injected += _each_failure(inject, clone)
        out["tagmatch"] = injected
    return out


# ------------------------------------------------------------------------------ gcov
def gcov(tmp: Path, protocol: str) -> FileCoverage:
    """The counts of the protocol's engine file the drive left in ``tmp``, read by gcov."""
    path = native.engine(protocol).source
    source = path.name
    found = sorted(tmp.rglob(path.with_suffix(".gcda").name))
    if not found:
        raise CoverageError(f"no gcov counts for {source} under {tmp}: the drive wrote none")
    gcda = found[0]
    run = subprocess.run(["gcov", "--json-format", "--stdout", "--branch-probabilities",
                          "--object-directory", str(gcda.parent), str(gcda)],
                         capture_output=True, text=True, cwd=tmp)
    if run.returncode != 0 or not run.stdout.strip():
        raise CoverageError(f"gcov failed on {gcda}: {run.stderr.strip()}")
    data = json.loads(run.stdout)
    entry = next((f for f in data["files"] if Path(f["file"]).name == source), None)
    if entry is None:
        raise CoverageError(f"gcov's report of {gcda} has no {source}")
    text = path.read_text(encoding="utf-8").splitlines()
    lines = entry["lines"]
    misses = []
    branches = hit = 0
    for ln in lines:
        outcomes = ln["branches"]
        taken = sum(1 for b in outcomes if b["count"] > 0)
        branches += len(outcomes)
        hit += taken
        if taken < len(outcomes):
            misses.append(Miss(ln["line_number"], len(outcomes) - taken, len(outcomes),
                               text[ln["line_number"] - 1].strip()))
    return FileCoverage(path.relative_to(ROOT).as_posix(), len(lines),
                        sum(1 for ln in lines if ln["count"]),
                        branches, hit, tuple(misses))


# ------------------------------------------------------------------------------ the run
def tests_dir() -> Path | None:
    """The source tree's tests, where the package runs from one (an editable install)."""
    tests = ROOT / "tests"
    return tests if all((tests / f).is_file() for f in TEST_FILES) else None


def measure(protocols: Sequence[str] = tuple(ENGINES), tests: Path | None = None,
            progress: Callable[[str], None] | None = None,
            timeout: float = 1800) -> CoverageReport:
    """Builds, drives (in a fresh interpreter) and reads back the coverage of each selected
    protocol's engine."""
    for proto in protocols:
        if proto not in ENGINES:
            raise ValueError(f"unknown protocol {proto!r}: expected one of "
                             f"{', '.join(ENGINES)}")
    t0 = time.perf_counter()
    out = CoverageReport()
    with tempfile.TemporaryDirectory(prefix="verbspec-coverage-") as name:
        tmp = Path(name)
        if progress:
            progress("building the instrumented engines")
        built = build(protocols, tmp)
        cmd = [sys.executable, "-m", "verbspec.refimpl.conformance.coverage", "--drive", str(tmp),
               *(f"{p}={built[p]}" for p in protocols)]
        if tests is not None:
            cmd += ["--tests", str(tests)]
        if progress:
            progress("driving them: random runs, every-edge sweeps"
                     + (", the native tests" if tests is not None else ""))
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=tests.parent if tests
                             else tmp, timeout=timeout)
        result = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        try:
            out.drive = json.loads(result)
        except json.JSONDecodeError:
            out.drive = {}
        if run.returncode != 0:
            out.ok = False
            out.failure = "\n".join(x for x in (out.drive.get("failure", ""),
                                                  run.stdout.strip()[-3000:],
                                                  run.stderr.strip()[-2000:]) if x)
        out.files = [gcov(tmp, p) for p in protocols]
    out.seconds = time.perf_counter() - t0
    return out


def render(report: CoverageReport) -> str:
    """The report as text: a table per file, then the lines with branches never taken."""
    w = max([24, *(len(f.file) for f in report.files)])
    rows = [f"{'file':<{w}} {'lines':>13} {'%':>6} {'branches':>13} {'%':>6}"]
    for f in report.files:
        rows.append(f"{f.file:<{w}} {f.lines_hit:>6}/{f.lines:<6} {f.line_pct:>6.1f} "
                    f"{f.branches_hit:>6}/{f.branches:<6} {f.branch_pct:>6.1f}")
    for f in report.files:
        if f.misses:
            rows.append(f"\n{f.file}: branches never taken")
            rows += [f"  {m.line:>5}  {m.missed}/{m.branches}  {m.text}" for m in f.misses]
    return "\n".join(rows)


def _main(argv: Sequence[str]) -> int:
    """The drive's interpreter: ``--drive TMP PROTO=MODULE_PATH ... [--tests DIR]``; prints
    one JSON line of what ran (or the failure) and exits, writing gcov's counts."""
    p = argparse.ArgumentParser(prog="verbspec.refimpl.conformance.coverage")
    p.add_argument("--drive", type=Path, required=True)
    p.add_argument("builds", nargs="+")
    p.add_argument("--tests", type=Path)
    args = p.parse_args(argv)
    mods = {}
    for item in args.builds:
        proto, _, path = item.partition("=")
        mods[proto] = native.load_build(path)
    try:
        done = drive(mods, args.tests, lambda s: print(s, file=sys.stderr, flush=True))
    except AssertionError as e:
        print(json.dumps({"failure": str(e)}))
        return 1
    print(json.dumps(done))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(_main(sys.argv[1:]))
