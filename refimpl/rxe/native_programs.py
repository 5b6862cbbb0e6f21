"""The native verbs transport: native/verbs/verbs_gate.c (the C gate engine over a UC queue pair)
and native/verbs/verbs_tagmatch.c (tagged messaging over an RC queue pair, matched by the C
tag-matching engine), one rank per process, built at run time, run as two ranks on two rxe
devices in the soft-RoCE guest, their outcomes merged; and ``verbspec bench verbs``, the gate
round trip against ``ibv_uc_pingpong`` moving the same bytes, side by side in one guest
command.

The programs build only where libibverbs' headers are installed (Debian: libibverbs-dev); where
they are not, ``build_gate_program`` and ``build_tagmatch_program`` raise ``VerbsUnavailable``
saying so, and nothing else in the package needs them. Builds are cached by a hash of the
sources, flags and compiler, under ``$VERBSPEC_BUILD_CACHE`` or ``~/.cache/verbspec/build``, a
host path the guest sees (it shares the host root). A guest runs one command at a time, so both
ranks start from one shell command and their outputs come back in marked sections
(``pair_script``, ``split_sections``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verbspec import native
from verbspec.refimpl.bindings import cprogram
from verbspec.refimpl.bindings.cprogram import BuildError

GATE, TAGMATCH = native.engine("gate"), native.engine("tagmatch")
VERBS = native.HERE / "verbs"
SHARED_SOURCES = (VERBS / "verbs_qp.c", VERBS / "verbs_common.c")
SHARED_HEADERS = (VERBS / "verbs_qp.h", VERBS / "verbs_common.h", native.SPEC_HEADER)
GATE_SOURCES = (VERBS / "verbs_gate.c", *SHARED_SOURCES, GATE.source)
GATE_HEADERS = (*SHARED_HEADERS, GATE.header)
TAGMATCH_SOURCES = (VERBS / "verbs_tagmatch.c", *SHARED_SOURCES, TAGMATCH.source)
TAGMATCH_HEADERS = (*SHARED_HEADERS, TAGMATCH.header)
CFLAGS = ("-std=c11", "-O2", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror")
LIBS = ("-libverbs",)
CACHE_ENV = "VERBSPEC_BUILD_CACHE"
NOT_INSTALLED = "libibverbs-dev is not installed: infiniband/verbs.h not found"
#: the two devices across the guest's veth pair and the address rank 0 listens on
DEVICES = ("rxe0", "rxe1")
LISTEN_ADDR = "10.77.0.1"
MARK = "@@verbspec"
PINGPONG = "ibv_uc_pingpong"


class VerbsUnavailable(BuildError):
    """The verbs programs cannot be built here (no libibverbs headers, no compiler)."""


class VerbsRunError(RuntimeError):
    """A run in the guest did not produce what it must: the message says what came back."""


# ------------------------------------------------------------------ building
def headers_missing() -> str | None:
    """Why the verbs programs cannot be built here, or None when infiniband/verbs.h is found."""
    try:
        cc = cprogram.compiler()
    except BuildError as e:
        return str(e)
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input="#include <infiniband/verbs.h>\n",
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else NOT_INSTALLED


def build_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "verbspec" / "build")


def _digest(sources: Sequence[Path], flags: Sequence[str], cc: str) -> str:
    h = hashlib.sha256()
    for part in (cc, *flags):
        h.update(part.encode() + b"\0")
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _build(name: str, sources: Sequence[Path], headers: Sequence[Path],
           cache: Path | None, cflags: Sequence[str] = CFLAGS, libs: Sequence[str] = LIBS,
           suffix: str = "") -> Path:
    """Program ``name`` compiled from ``sources`` (warnings are errors), or taken from the
    cache; VerbsUnavailable where libibverbs' headers (or a compiler) are missing. ``cflags``
    with ``-shared`` and a ``suffix`` of ``.so`` build a shared library the same way."""
    missing = headers_missing()
    if missing:
        raise VerbsUnavailable(missing)
    cc = cprogram.compiler()
    out_dir = cache or build_cache()
    exe = out_dir / f"{name}-{_digest((*sources, *headers), (*cflags, *libs), cc)}{suffix}"
    if exe.exists():
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        trial = Path(tmp) / exe.name
        done = cprogram.compile_c(trial, sources, cflags,
                                  sorted({h.parent for h in headers}), libs)
        if done.returncode != 0:
            raise BuildError(f"native/{sources[0].relative_to(native.HERE)} did not compile:\n"
                             f"{done.stderr.strip()}")
        trial.replace(exe)      # whole or not at all: a concurrent build writes the same file
    return exe


def build_gate_program(cache: Path | None = None, engine: Path | None = None) -> Path:
    """The verbs_gate program, compiled (warnings are errors) or taken from the cache; with
    ``engine``, over that gate engine source instead of the shipped one (a mutant's)."""
    sources = GATE_SOURCES if engine is None else (
        *(s for s in GATE_SOURCES if s != GATE.source), engine)
    return _build("verbs_gate", sources, GATE_HEADERS, cache)


def build_tagmatch_program(cache: Path | None = None) -> Path:
    """The verbs_tagmatch program, compiled (warnings are errors) or taken from the cache."""
    return _build("verbs_tagmatch", TAGMATCH_SOURCES, TAGMATCH_HEADERS, cache)


# ------------------------------------------------------------------ a pair of ranks
@dataclass(frozen=True)
class GateRun:
    """What both ranks run (both get the same plan; the programs check that they agree)."""

    gates: int = 10_000
    more_gates: int = 1_000
    big_bytes: int = 12 << 20
    vector_bytes: int = 24_576
    timeout_ms: int = 750
    port: int = 18_515
    devices: tuple[str, str] = DEVICES
    gid_index: int = 0
    trace_dir: str | None = None            # a guest path: rank R writes trace-rankR.jsonl
    extra: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())   # more options per rank
    qp: str = "uc"                          # the queue pair's transport: uc or rc
    verify_blocks: int = 0                  # verify blocks after the big gate
    block_layers: int | None = None         # a block's layers and rows (None: the program's
    block_rows: int | None = None           # defaults, the spec's)

    def argv(self, binary: Path, rank: int) -> list[str]:
        args = [str(binary), "--rank", str(rank), "--device", self.devices[rank],
                "--gid-index", str(self.gid_index), *_where(rank, self.port),
                "--gates", str(self.gates), "--more-gates", str(self.more_gates),
                "--big-bytes", str(self.big_bytes), "--vector-bytes", str(self.vector_bytes),
                "--timeout-ms", str(self.timeout_ms), "--json", *self._block_args()]
        if self.trace_dir:
            args += ["--trace", f"{self.trace_dir}/trace-rank{rank}.jsonl"]
        return args + list(self.extra[rank])

    def _block_args(self) -> list[str]:
        """The queue pair and verify-block options, each only when not the program's
        default."""
        out = ["--qp", self.qp] if self.qp != "uc" else []
        for option, value in (("--verify-blocks", self.verify_blocks or None),
                              ("--block-layers", self.block_layers),
                              ("--block-rows", self.block_rows)):
            if value is not None:
                out += [option, str(value)]
        return out


def _where(rank: int, port: int) -> list[str]:
    """Rank 0 listens on the guest's first veth address; rank 1 connects to it."""
    return ["--listen", str(port)] if rank == 0 else ["--peer", f"{LISTEN_ADDR}:{port}"]


@dataclass(frozen=True)
class TagmatchRun:
    """The tag-matching program's plan for both ranks (they check that they agree): ``rounds`` of
    the demo's three phases over ``sizes`` (eager up to ``eager_limit``, rendezvous above)."""

    rounds: int = 3
    sizes: tuple[int, ...] = (64, 4096, 256 * 1024, 1 << 20)
    eager_limit: int = 8192
    max_msg: int = 65_536
    timeout_ms: int = 20_000
    port: int = 18_530
    devices: tuple[str, str] = DEVICES
    gid_index: int = 0
    trace_dir: str | None = None            # a guest path: rank R writes trace-rankR.jsonl
    extra: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())   # more options per rank

    @property
    def messages(self) -> int:
        """Messages each rank sends (and receives)."""
        return self.rounds * 3 * len(self.sizes)

    def argv(self, binary: Path, rank: int) -> list[str]:
        args = [str(binary), "--rank", str(rank), "--device", self.devices[rank],
                "--gid-index", str(self.gid_index), *_where(rank, self.port),
                "--rounds", str(self.rounds), "--sizes", ",".join(map(str, self.sizes)),
                "--eager-limit", str(self.eager_limit), "--max-msg", str(self.max_msg),
                "--timeout-ms", str(self.timeout_ms), "--json"]
        if self.trace_dir:
            args += ["--trace", f"{self.trace_dir}/trace-rank{rank}.jsonl"]
        return args + list(self.extra[rank])


@dataclass(frozen=True)
class ProgramOutcome:
    """One rank's C program as it ended (the library's forked ranks end as a RankOutcome)."""

    rank: int
    returncode: int
    result: dict[str, Any] | None       # the rank's JSON (None: it printed none)
    stderr: str


@dataclass(frozen=True)
class PairOutcome:
    ranks: tuple[ProgramOutcome, ProgramOutcome]
    merged: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.returncode == 0 for r in self.ranks) and bool(self.merged.get("ok"))


def _rank_lines(argv: Sequence[str], rank: int, tag: str) -> list[str]:
    """Shell lines that run one rank in the background, its output into files under $d."""
    return [f"{shlex.join(argv)} > \"$d/{tag}{rank}.out\" 2> \"$d/{tag}{rank}.err\" & "
            f"p{rank}=$!"]


def _report_lines(tag: str) -> list[str]:
    lines = []
    for r in (0, 1):
        lines += [f"wait $p{r}; echo \"{MARK} {tag} rank {r} exit $?\"",
                  f"cat \"$d/{tag}{r}.out\"", f"echo \"{MARK} {tag} rank {r} stderr\"",
                  f"cat \"$d/{tag}{r}.err\""]
    return lines


def pair_lines(binary: Path, run: GateRun | TagmatchRun, tag: str = "gate") -> list[str]:
    """Shell lines running both ranks of ``run`` and reporting each in a marked section."""
    return [*_rank_lines(run.argv(binary, 0), 0, tag), *_rank_lines(run.argv(binary, 1), 1, tag),
            *_report_lines(tag)]


def pair_script(lines: Sequence[str]) -> list[str]:
    """An argv for the guest: a shell running ``lines`` in a scratch directory."""
    body = "\n".join(["d=$(mktemp -d)", *lines, "rm -rf \"$d\""])
    return ["sh", "-c", body]


def split_sections(text: str) -> dict[tuple[str, int], tuple[int, str, str]]:
    """The marked sections of a script's output: (tag, rank) -> (exit code, stdout, stderr)."""
    found: dict[tuple[str, int], tuple[int, str, str]] = {}
    pat = re.compile(rf"^{MARK} (\S+) rank (\d) (exit (-?\d+)|stderr)$", re.M)
    marks = list(pat.finditer(text))
    for i, m in enumerate(marks):
        body = text[m.end() + 1: marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        key = (m.group(1), int(m.group(2)))
        if m.group(4) is not None:
            found[key] = (int(m.group(4)), body, "")
        elif key in found:
            rc, out, _ = found[key]
            found[key] = (rc, out, body)
    return found


def _json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both ranks' outcomes as one: counts summed, timings from rank 0 (each rank times the
    same lockstep gates), ok when both are."""
    return {
        "gates": min(a["gates"], b["gates"]), "big_gates": min(a["big_gates"], b["big_gates"]),
        "big_bytes": min(a["big_bytes"], b["big_bytes"]), "vector_bytes": a["vector_bytes"],
        "verify_blocks": a.get("verify_blocks", 0) + b.get("verify_blocks", 0),
        "qp_type": a.get("qp_type", "uc"),
        "payloads_verified": a["payloads_verified"] + b["payloads_verified"],
        "mismatches": a["mismatches"] + b["mismatches"], "drops": a["drops"] + b["drops"],
        "round_trip_us": a["round_trip_us"], "gates_per_s": a["gates_per_s"],
        "big_mib_per_s": a["big_mib_per_s"], "wall_s": max(a["wall_s"], b["wall_s"]),
        "ok": bool(a["ok"] and b["ok"]), "errors": [e for e in (a["error"], b["error"]) if e],
        "transport": "verbs-c", "devices": [a["device"], b["device"]]}


def merge_tagmatch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both ranks of a tag-matching run as one: counts summed (each rank counts the messages it
    received and the eager and rendezvous messages it sent), ok when both are."""
    out: dict[str, Any] = {k: a[k] + b[k] for k in ("messages", "eager", "rendezvous", "bytes",
                                                    "verified", "mismatches", "credit_reads")}
    out.update({"mib_per_s": a["mib_per_s"], "wall_s": max(a["wall_s"], b["wall_s"]),
                "ok": bool(a["ok"] and b["ok"]),
                "errors": [e for e in (a["error"], b["error"]) if e],
                "transport": "verbs-c", "devices": [a["device"], b["device"]]})
    return out


def pair_outcome(sections: dict[tuple[str, int], tuple[int, str, str]], tag: str = "gate",
                 merger: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] = merge
                 ) -> PairOutcome:
    ranks = []
    for r in (0, 1):
        if (tag, r) not in sections:
            raise VerbsRunError(f"rank {r}'s section '{tag}' is missing from the guest's output")
        rc, out, err = sections[(tag, r)]
        ranks.append(ProgramOutcome(r, rc, _json_line(out), err))
    a, b = ranks[0].result, ranks[1].result
    return PairOutcome((ranks[0], ranks[1]), merger(a, b) if a and b else {})


Runner = Callable[..., Any]     # RxeGuest.run: (argv, timeout=...) -> GuestResult


def run_pair(guest_run: Runner, binary: Path, run: GateRun | TagmatchRun, timeout: float = 600.0
             ) -> PairOutcome:
    """Both ranks of ``run`` (the gate program's or the tag-matching program's) in the guest,
    in one command; their outcomes, merged."""
    tag = TAGMATCH.name if isinstance(run, TagmatchRun) else GATE.name
    res = guest_run(pair_script(pair_lines(binary, run, tag)), timeout=timeout)
    try:
        return pair_outcome(split_sections(res.stdout), tag,
                            merge_tagmatch if tag == TAGMATCH.name else merge)
    except VerbsRunError as e:
        raise VerbsRunError(f"{e} (exit {res.returncode}; stderr: {res.stderr.strip()})") from None


# ------------------------------------------------------------------ the benchmark
PINGPONG_LINE = re.compile(r"(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter")


@dataclass(frozen=True)
class BenchPlan:
    gates: int = 3_000
    reps: int = 5
    vector_bytes: int = 24_576
    port: int = 18_600

    def lines(self, binary: Path) -> list[str]:
        """The script: repetitions alternating the gate pair and ibv_uc_pingpong's, each
        pingpong moving ``vector_bytes`` each way per iteration (what a gate moves)."""
        out: list[str] = []
        for i in range(self.reps):
            run = GateRun(gates=self.gates, more_gates=0, big_bytes=0,
                          vector_bytes=self.vector_bytes, timeout_ms=5000,
                          port=self.port + 2 * i)
            out += pair_lines(binary, run, f"gate{i}")
            port = str(self.port + 2 * i + 1)
            common = ["-g", "0", "-s", str(self.vector_bytes), "-n", str(self.gates), "-p", port]
            server = [PINGPONG, "-d", DEVICES[0], *common]
            client = [PINGPONG, "-d", DEVICES[1], *common, LISTEN_ADDR]
            out += _rank_lines(server, 0, f"pingpong{i}")
            # the client retries until the server listens
            out.append(f"( for t in $(seq 100); do {shlex.join(client)} && exit 0; "
                       f"sleep 0.2; done; exit 1 ) > \"$d/pingpong{i}1.out\" "
                       f"2> \"$d/pingpong{i}1.err\" & p1=$!")
            out += _report_lines(f"pingpong{i}")
        return out


def pingpong_usec(text: str) -> float | None:
    m = PINGPONG_LINE.search(text)
    return float(m.group(3)) if m else None


def bench_verbs(guest_run: Runner, binary: Path, plan: BenchPlan) -> dict[str, Any]:
    """Runs the plan in one guest command; per repetition the gate round trip (rank 0's mean
    and p50 per gate) and ibv_uc_pingpong's usec/iter (its server's), their medians, the
    ratio of the medians."""
    res = guest_run(pair_script(plan.lines(binary)), timeout=3600)
    sections = split_sections(res.stdout)
    reps = []
    for i in range(plan.reps):
        gate = pair_outcome(sections, f"gate{i}")
        if not gate.ok:
            raise VerbsRunError(f"repetition {i + 1}: the gate pair failed: "
                                f"{_why(gate.ranks)}")
        pp = [sections.get((f"pingpong{i}", r)) for r in (0, 1)]
        if any(s is None or s[0] != 0 for s in pp):
            raise VerbsRunError(f"repetition {i + 1}: {PINGPONG} failed: "
                                + "; ".join(f"rank {r}: {s}" for r, s in enumerate(pp)))
        usec = pingpong_usec(pp[0][1] + pp[0][2])
        if usec is None:
            raise VerbsRunError(f"repetition {i + 1}: no 'usec/iter' in {PINGPONG}'s output: "
                                f"{pp[0][1]!r}")
        reps.append({"gate_mean_us": gate.merged["round_trip_us"]["mean"],
                     "gate_p50_us": gate.merged["round_trip_us"]["p50"],
                     "gate_p99_us": gate.merged["round_trip_us"]["p99"],
                     "pingpong_us": usec, "verified": gate.merged["payloads_verified"]})
    gate_med = statistics.median(r["gate_mean_us"] for r in reps)
    pp_med = statistics.median(r["pingpong_us"] for r in reps)
    return {"gates": plan.gates, "reps": plan.reps, "bytes_each_way": plan.vector_bytes,
            "rows": reps, "gate_us": round(gate_med, 1),
            "gate_p50_us": round(statistics.median(r["gate_p50_us"] for r in reps), 1),
            "pingpong_us": round(pp_med, 1), "ratio": round(gate_med / pp_med, 3),
            "seconds": round(res.seconds, 1)}


def _why(ranks: Sequence[ProgramOutcome]) -> str:
    return "; ".join(f"rank {r.rank} exit {r.returncode}: "
                     f"{(r.result or {}).get('error') or r.stderr.strip()[-300:]}" for r in ranks)


def bench_main(plan: BenchPlan, as_json: bool, work_dir: Path) -> int:
    """``verbspec bench verbs``: boots a guest, runs the plan, prints the table or JSON."""
    from verbspec.refimpl.progress import print_table
    from verbspec.refimpl.rxe import guest as rg

    binary = build_gate_program()
    image = rg.prepare(log=lambda m: print(m, file=sys.stderr))
    with rg.RxeGuest.start(work_dir, image=image) as guest:
        print(f"verbspec bench verbs: guest ready in {guest.boot_seconds:.1f} s",
              file=sys.stderr)
        result = bench_verbs(guest.run, binary, plan)
    result["boot_s"] = round(guest.boot_seconds, 1)
    if as_json:
        print(json.dumps(result))
        return 0
    rows = [[str(i + 1), f"{r['gate_mean_us']:,.1f}", f"{r['gate_p50_us']:,.1f}",
             f"{r['pingpong_us']:,.1f}", f"{r['gate_mean_us'] / r['pingpong_us']:.2f}"]
            for i, r in enumerate(result["rows"])]
    print_table(f"gate round trip vs {PINGPONG}, us ({plan.vector_bytes} bytes each way, "
                f"{plan.gates} per repetition, {DEVICES[0]} <-> {DEVICES[1]})",
                ["rep", "gate mean", "gate p50", "pingpong", "gate / pingpong"], rows)
    print(f"medians: gate {result['gate_us']:,.1f} us, {PINGPONG} {result['pingpong_us']:,.1f}"
          f" us; ratio {result['ratio']:.3f}")
    return 0


def with_trace(run: GateRun, trace_dir: str) -> GateRun:
    return replace(run, trace_dir=trace_dir)
