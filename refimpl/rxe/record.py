"""The raw verbs recorder (native/record/recorder.c): built at run time as a shared library and
preloaded into unmodified programs, on this host or in the soft-RoCE guest, each process
writing its own JSON-lines file into a directory (docs/verbs.md, "Recording a program without
changing it").

Several commands run at once, as the ranks of one job (``record_on_host``,
``record_in_guest``); each command's exit status and output come back, and every recording
file the run left, with its event counts (``summarize``). The library builds only where
libibverbs' headers are installed; elsewhere ``build_recorder`` raises ``VerbsUnavailable``
saying what to install, as the verbs programs do.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verbspec import native
from verbspec.refimpl.rxe import native_programs as vn
from verbspec.refimpl.rxe.native_programs import Runner

RECORD = native.HERE / "record"
SOURCES = (RECORD / "recorder.c",)
# -fvisibility=hidden: only the wrappers are exported, so a dlsym on the library's handle finds
# them first and libibverbs' other symbols through its dependencies; no fortify, whose inline
# read/recv wrappers would clash with the definitions here
CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-U_FORTIFY_SOURCE",
          "-Wall", "-Wextra", "-Werror")
# libibverbs stays a dependency though no call names it (the real functions are found with
# dlsym): a dlsym on the handle the recorder gives for a dlopen of libibverbs searches it
LIBS = ("-Wl,--no-as-needed", "-libverbs", "-ldl", "-lpthread")
#: the C helper programs only tests build (native/testing/), and what each links
TEST_PROGRAMS = {"dlopen_verbs": ("-ldl",)}
DIR_ENV = "VERBSPEC_RECORD_DIR"
SUFFIX = ".jsonl"
#: the exit status a command gets when its time runs out (as ``timeout`` reports)
TIMED_OUT = 124


def build_recorder(cache: Path | None = None) -> Path:
    """The recorder library, compiled (warnings are errors) or taken from the build cache;
    VerbsUnavailable where libibverbs' headers are missing."""
    return vn._build("librecorder", SOURCES, (), cache, CFLAGS, LIBS, ".so")


def build_test_program(name: str, cache: Path | None = None) -> Path:
    """One of native/testing/'s recorder test programs (``TEST_PROGRAMS``), compiled."""
    libs = TEST_PROGRAMS[name]
    return vn._build(name, (native.TESTING / f"{name}.c",), (), cache,
                     ("-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror"), libs)


def recorder_env(library: Path, out_dir: Path | str) -> dict[str, str]:
    """The environment entries that record a command: the preload and the directory."""
    return {"LD_PRELOAD": str(library), DIR_ENV: str(out_dir)}


# ------------------------------------------------------------------ what a run leaves
@dataclass(frozen=True)
class RecordedFile:
    """One process's recording file as the run left it: what it holds, counted (a lenient
    reading for the report of a run; refimpl/traces/raw.py reads a recording strictly, to
    validate it)."""

    path: Path
    pid: int | None
    argv: tuple[str, ...]
    events: int                     # lines, the process line included
    kinds: dict[str, int]           # events by "ev"
    ended: bool                     # its last line is `end`
    bad_lines: int = 0              # lines that are not JSON objects (must be 0)

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "pid": self.pid, "argv": list(self.argv),
                "events": self.events, "kinds": self.kinds, "ended": self.ended,
                "bad_lines": self.bad_lines}


def read_events(path: Path) -> list[dict[str, Any]]:
    """A recording's events (a line that does not parse raises ValueError naming it)."""
    out = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not JSON: {e}") from None
        out.append(ev)
    return out


def summarize(path: Path) -> RecordedFile:
    kinds: Counter[str] = Counter()
    pid, argv, last, bad, n = None, (), None, 0, 0
    for line in path.read_text(errors="replace").splitlines():
        n += 1
        try:
            ev = json.loads(line)
            kind = ev["ev"]
        except (json.JSONDecodeError, TypeError, KeyError):
            bad += 1
            continue
        kinds[kind] += 1
        last = kind
        if kind == "process":
            pid, argv = ev.get("pid"), tuple(ev.get("argv", ()))
    return RecordedFile(path, pid, argv, n, dict(kinds), last == "end", bad)


def recordings(out_dir: Path, before: set[str] = frozenset()) -> tuple[RecordedFile, ...]:
    """The recording files in ``out_dir`` not named in ``before``, by name."""
    return tuple(summarize(p) for p in sorted(out_dir.glob(f"*{SUFFIX}"))
                 if p.name not in before)


@dataclass(frozen=True)
class CommandOutcome:
    argv: tuple[str, ...]
    returncode: int                 # TIMED_OUT when its time ran out
    stdout: str
    stderr: str


@dataclass(frozen=True)
class RecordOutcome:
    commands: tuple[CommandOutcome, ...]
    files: tuple[RecordedFile, ...]
    seconds: float
    where: str                      # "host" or "guest"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every command exited 0."""
        return all(c.returncode == 0 for c in self.commands)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "where": self.where, "seconds": round(self.seconds, 2),
                "commands": [{"argv": list(c.argv), "exit": c.returncode, "stdout": c.stdout,
                              "stderr": c.stderr} for c in self.commands],
                "files": [f.as_json() for f in self.files], **self.extra}


def _names(out_dir: Path) -> set[str]:
    return {p.name for p in out_dir.glob(f"*{SUFFIX}")}


# ------------------------------------------------------------------ on this host
def record_on_host(commands: Sequence[Sequence[str]], out_dir: Path, timeout: float = 600.0,
                   library: Path | None = None, env: Mapping[str, str] | None = None
                   ) -> RecordOutcome:
    """Every command at once under the recorder, each in a session of its own (a command that
    outlives ``timeout`` is ended with its whole process group, exit TIMED_OUT)."""
    library = library or build_recorder()
    out_dir.mkdir(parents=True, exist_ok=True)
    before = _names(out_dir)
    full = {**os.environ, **(env or {}), **recorder_env(library, out_dir)}
    t0 = time.monotonic()
    procs = [subprocess.Popen(list(c), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, errors="replace",
                              start_new_session=True) for c in commands]
    outcomes = []
    for c, p in zip(commands, procs, strict=True):
        left = max(0.1, t0 + timeout - time.monotonic())
        try:
            out, err = p.communicate(timeout=left)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = TIMED_OUT
        outcomes.append(CommandOutcome(tuple(c), rc, out, err))
    return RecordOutcome(tuple(outcomes), recordings(out_dir, before),
                         time.monotonic() - t0, "host")


# ------------------------------------------------------------------ in the guest
def command_lines(commands: Sequence[Sequence[str]], out_dir: str, library: Path,
                  timeout: float, tag: str = "cmd") -> list[str]:
    """Shell lines (for ``pair_script``) running every command at once under the recorder,
    each reported in a marked section ``{tag}{i}`` (rank 0). A command is started by ``sh -c
    'export VAR=..; exec "$@"'`` so that only the command itself is preloaded, not a wrapper."""
    preload = "; ".join(f"export {k}={shlex.quote(v)}"
                        for k, v in recorder_env(library, out_dir).items())
    lines = []
    for i, c in enumerate(commands):
        inner = shlex.join(["sh", "-c", f"{preload}; exec \"$@\"", "sh", *c])
        lines.append(f"timeout -k 5 {timeout:g} {inner} > \"$d/{tag}{i}.out\" "
                     f"2> \"$d/{tag}{i}.err\" & q{i}=$!")
    for i in range(len(commands)):
        lines += [f"wait $q{i}; echo \"{vn.MARK} {tag}{i} rank 0 exit $?\"",
                  f"cat \"$d/{tag}{i}.out\"", f"echo \"{vn.MARK} {tag}{i} rank 0 stderr\"",
                  f"cat \"$d/{tag}{i}.err\""]
    return lines


def outcomes_from(sections: Mapping[tuple[str, int], tuple[int, str, str]],
                  commands: Sequence[Sequence[str]], tag: str = "cmd"
                  ) -> tuple[CommandOutcome, ...]:
    out = []
    for i, c in enumerate(commands):
        if (f"{tag}{i}", 0) not in sections:
            raise vn.VerbsRunError(f"command {i + 1}'s section is missing from the guest's "
                                   f"output")
        rc, so, se = sections[(f"{tag}{i}", 0)]
        out.append(CommandOutcome(tuple(c), rc, so, se))
    return tuple(out)


def record_in_guest(guest_run: Runner, commands: Sequence[Sequence[str]], out_dir: Path,
                    timeout: float = 600.0, library: Path | None = None,
                    env: Mapping[str, str] | None = None) -> RecordOutcome:
    """Every command at once in the guest under the recorder (one guest command); ``out_dir``
    must be a host directory the guest shares read-write at its own path. ``env``: more
    environment for the guest command (e.g. PYTHONPATH for Debian's pyverbs)."""
    library = library or build_recorder()
    out_dir.mkdir(parents=True, exist_ok=True)
    before = _names(out_dir)
    lines = command_lines(commands, str(out_dir), library, timeout)
    # the guest's runner takes env as a keyword; without one it is called as before
    extra = {"env": dict(env)} if env else {}
    res = guest_run(vn.pair_script(lines), timeout=timeout + 60, **extra)
    try:
        outcomes = outcomes_from(vn.split_sections(res.stdout), commands)
    except vn.VerbsRunError as e:
        raise vn.VerbsRunError(f"{e} (exit {res.returncode}; stderr: {res.stderr.strip()})"
                               ) from None
    return RecordOutcome(outcomes, recordings(out_dir, before), res.seconds, "guest")


# ------------------------------------------------------------------ the recorder's cost
@dataclass(frozen=True)
class RecordBench:
    """``verbspec bench verbs --record``: repetitions of the gate pair without and with the
    recorder (each recorded rank writing into the guest's own /tmp), as BenchPlan's gate runs
    (no big gate). The order alternates (ABBA): an even repetition runs the unrecorded pair
    first, an odd one the recorded pair, so a load that drifts over the run favours neither."""

    gates: int = 3_000
    reps: int = 5
    vector_bytes: int = 24_576
    port: int = 18_650

    def run(self, i: int) -> vn.GateRun:
        return vn.GateRun(gates=self.gates, more_gates=0, big_bytes=0,
                          vector_bytes=self.vector_bytes, timeout_ms=5000,
                          port=self.port + 2 * i)

    def lines(self, binary: Path, library: Path) -> list[str]:
        preload = (f"export LD_PRELOAD={shlex.quote(str(library))}; "
                   f"export {DIR_ENV}=\"$R\"; exec \"$@\"")
        out: list[str] = []
        for i in range(self.reps):
            plain = vn.pair_lines(binary, self.run(i), f"plain{i}")
            recorded = replace(self.run(i), port=self.port + 2 * i + 1)
            rec = [f"R=\"$d/rec{i}\"; mkdir -p \"$R\"; export R"]
            for r in (0, 1):
                rec += vn._rank_lines(["sh", "-c", preload, "sh", *recorded.argv(binary, r)],
                                      r, f"rec{i}")
            rec += vn._report_lines(f"rec{i}")
            rec += [f"echo \"{vn.MARK} lines{i} rank 0 exit 0\"", "cat \"$R\"/*.jsonl | wc -l",
                    f"echo \"{vn.MARK} lines{i} rank 0 stderr\""]
            out += plain + rec if i % 2 == 0 else rec + plain
        return out


def bench_record(guest_run: Runner, binary: Path, library: Path, plan: RecordBench
                 ) -> dict[str, Any]:
    """Per repetition rank 0's mean gate round trip without and with the recorder, and the
    lines both recorded ranks wrote; the medians and their ratio (recorded / unrecorded)."""
    import statistics

    res = guest_run(vn.pair_script(plan.lines(binary, library)), timeout=3600)
    sections = vn.split_sections(res.stdout)
    rows = []
    for i in range(plan.reps):
        plain, rec = vn.pair_outcome(sections, f"plain{i}"), vn.pair_outcome(sections, f"rec{i}")
        for what, pair in (("unrecorded", plain), ("recorded", rec)):
            if not pair.ok:
                raise vn.VerbsRunError(f"repetition {i + 1}: the {what} gate pair failed: "
                                       f"{vn._why(pair.ranks)}")
        lines = sections.get((f"lines{i}", 0), (0, "0", ""))[1].strip()
        rows.append({"unrecorded_us": plain.merged["round_trip_us"]["mean"],
                     "recorded_us": rec.merged["round_trip_us"]["mean"],
                     "unrecorded_p50_us": plain.merged["round_trip_us"]["p50"],
                     "recorded_p50_us": rec.merged["round_trip_us"]["p50"],
                     "lines": int(lines) if lines.isdigit() else None})

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def per_rep(key: str) -> float:
        # each repetition's pair of runs are neighbours in time: their ratio is less exposed
        # to a load that drifts over the run
        return round(statistics.median(r[f"recorded{key}"] / r[f"unrecorded{key}"]
                                       for r in rows), 3)

    return {"gates": plan.gates, "reps": plan.reps, "bytes_each_way": plan.vector_bytes,
            "rows": rows, "unrecorded_us": round(med("unrecorded_us"), 1),
            "recorded_us": round(med("recorded_us"), 1),
            "ratio": round(med("recorded_us") / med("unrecorded_us"), 3),
            "ratio_per_rep_median": per_rep("_us"),
            # the median gate is not moved by the guest's rare stalls, which the mean carries
            "unrecorded_p50_us": round(med("unrecorded_p50_us"), 1),
            "recorded_p50_us": round(med("recorded_p50_us"), 1),
            "p50_ratio": round(med("recorded_p50_us") / med("unrecorded_p50_us"), 3),
            "p50_ratio_per_rep_median": per_rep("_p50_us"),
            "seconds": round(res.seconds, 1)}


def bench_record_main(plan: RecordBench, as_json: bool, work_dir: Path) -> int:
    """``verbspec bench verbs --record``: boots a guest, runs the plan, prints a table or JSON."""
    import sys

    from verbspec.refimpl.progress import print_table
    from verbspec.refimpl.rxe import guest as rg

    binary, library = vn.build_gate_program(), build_recorder()
    image = rg.prepare(log=lambda m: print(m, file=sys.stderr))
    with rg.RxeGuest.start(work_dir, image=image) as guest:
        print(f"verbspec bench verbs --record: guest ready in {guest.boot_seconds:.1f} s",
              file=sys.stderr)
        result = bench_record(guest.run, binary, library, plan)
    if as_json:
        print(json.dumps(result))
        return 0
    rows = [[str(i + 1), "unrecorded first" if i % 2 == 0 else "recorded first",
             f"{r['unrecorded_us']:,.1f}", f"{r['recorded_us']:,.1f}",
             f"{r['recorded_us'] / r['unrecorded_us']:.3f}",
             f"{r['unrecorded_p50_us']:,.1f}", f"{r['recorded_p50_us']:,.1f}",
             f"{r['recorded_p50_us'] / r['unrecorded_p50_us']:.3f}", str(r["lines"])]
            for i, r in enumerate(result["rows"])]
    print_table(f"gate round trip without and with the raw recorder, us ({plan.vector_bytes} "
                f"bytes each way, {plan.gates} gates per repetition, rank 0's mean and p50)",
                ["rep", "order", "unrecorded", "recorded", "ratio", "unrecorded p50",
                 "recorded p50", "p50 ratio", "lines recorded"], rows)
    print(f"medians of the means: unrecorded {result['unrecorded_us']:,.1f} us, recorded "
          f"{result['recorded_us']:,.1f} us; ratio {result['ratio']:.3f} (median of the "
          f"repetitions' ratios {result['ratio_per_rep_median']:.3f})")
    print(f"medians of the p50s: unrecorded {result['unrecorded_p50_us']:,.1f} us, recorded "
          f"{result['recorded_p50_us']:,.1f} us; ratio {result['p50_ratio']:.3f} (median of "
          f"the repetitions' ratios {result['p50_ratio_per_rep_median']:.3f})")
    return 0
