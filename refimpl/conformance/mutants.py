"""``verbspec conform --impl native --mutants``: the conformance suite against deliberately broken
builds of the native engines.

Each engine's mutants are patches kept apart from it, in ``native/testing/mutant_patches/``:
one unified diff per mutant (``PROTOCOL_NN.diff``, its first line saying what it breaks), each
a small change to the engine's source, so that the shipped engines carry no mutant code. A
mutant is built alone: the patch applied to a copy of the engine's source (every hunk's lines
must be found in the source exactly once, or the patch no longer applies, and says so), the
copy compiled by the engine's own cffi builder in a temporary directory. It is then held to
the spec by two checks, the cheaper first: for the gate, random runs at ds4's defaults (whose
window of 16 the sweep's small windows do not reach), then the every-edge sweep of the
protocol's small configurations; for tag matching, the sweep, then random runs of each of its
configurations. A mutant is killed by its first mismatch; one that passes both survives.
"""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from verbspec import native

GATE_RANDOM_RUNS = 200
TAG_RANDOM_RUNS = 200       # per configuration of the sweep
TAG_RANDOM_STEPS = 400
_PATCH_NAME = re.compile(r"(?P<protocol>[a-z]+)_(?P<number>\d+)\.diff")
_HUNK = re.compile(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchError(ValueError):
    """A mutant's patch is malformed, or no longer applies to its engine's source."""


@dataclass(frozen=True)
class Mutant:
    """One mutant of a protocol's native engine: its number, what it breaks, its patch."""

    protocol: str
    number: int
    what: str
    patch: Path

    @property
    def name(self) -> str:
        return f"{self.protocol}:{self.number}"


@dataclass(frozen=True)
class MutantResult:
    protocol: str
    mutant: int
    killed: bool
    by: str | None              # "exhaustive" | "random"
    mismatch: str | None
    seconds: float


def mutants(protocol: str | None = None) -> list[Mutant]:
    """The mutants whose patches ``native/testing/mutant_patches/`` holds (of ``protocol``
    only, if given), by protocol and number."""
    out = []
    for path in sorted(native.MUTANT_PATCHES.glob("*.diff")):
        m = _PATCH_NAME.fullmatch(path.name)
        if m is None:
            raise PatchError(f"{path}: not a mutant's patch (PROTOCOL_NN.diff)")
        if protocol is None or m["protocol"] == protocol:
            what = path.read_text(encoding="utf-8").partition("\n")[0]
            out.append(Mutant(m["protocol"], int(m["number"]), what, path))
    return sorted(out, key=lambda x: (x.protocol, x.number))


def numbers(protocol: str) -> list[int]:
    """The numbers of a protocol's mutants."""
    return [m.number for m in mutants(protocol)]


def mutant(protocol: str, number: int) -> Mutant:
    found = [m for m in mutants(protocol) if m.number == number]
    if not found:
        raise PatchError(f"the {protocol} engine has no mutant {number} (its mutants: "
                         f"{', '.join(map(str, numbers(protocol))) or 'none'})")
    return found[0]


# ------------------------------------------------------------------------------ patches
@dataclass(frozen=True)
class _Hunk:
    line: int                   # where the diff says the lines are (1-based)
    old: tuple[str, ...]        # the lines it expects (context and removed)
    new: tuple[str, ...]        # the lines in their place (context and added)


def _parse(text: str, where: str) -> tuple[str, list[_Hunk]]:
    """The file a unified diff changes (its path, ``a/`` dropped) and its hunks."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("--- ")]
    if len(starts) != 1 or starts[0] + 1 >= len(lines) or not lines[starts[0] + 1].startswith(
            "+++ "):
        raise PatchError(f"{where}: expected one file's unified diff (--- a/PATH, +++ b/PATH)")
    target = lines[starts[0]].split()[1].removeprefix("a/")
    hunks: list[_Hunk] = []
    body = lines[starts[0] + 2:]
    i = 0
    while i < len(body):
        head = _HUNK.match(body[i])
        if head is None:
            raise PatchError(f"{where}: expected a hunk (@@ -L,N +L,N @@), found {body[i]!r}")
        old, new = [], []
        i += 1
        while i < len(body) and not body[i].startswith("@@"):
            ln = body[i]
            kind, rest = (ln[:1], ln[1:]) if ln else (" ", "")
            if kind in " -":
                old.append(rest)
            if kind in " +":
                new.append(rest)
            elif kind not in " -\\":
                raise PatchError(f"{where}: a hunk's line starts with {kind!r}: {ln!r}")
            i += 1
        hunks.append(_Hunk(int(head[1]), tuple(old), tuple(new)))
    if not hunks:
        raise PatchError(f"{where}: the diff has no hunk")
    return target, hunks


def apply(patch: str, source: str, where: str = "the patch") -> str:
    """``source`` with the unified diff ``patch`` applied. Each hunk's lines must be found in
    the source exactly once (wherever they now are): anything else is a PatchError saying
    which hunk and why."""
    _, hunks = _parse(patch, where)
    lines = source.splitlines()
    for k, h in enumerate(hunks, 1):
        n = len(h.old)
        at = [i for i in range(len(lines) - n + 1) if tuple(lines[i:i + n]) == h.old]
        if len(at) != 1:
            found = "are not in the source" if not at else f"are in it {len(at)} times"
            raise PatchError(f"{where}: hunk {k}'s lines (line {h.line} when it was made) "
                             f"{found}: the patch no longer applies")
        lines[at[0]:at[0] + n] = h.new
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def source_of(m: Mutant) -> Path:
    """The engine source a mutant's patch changes; PatchError where it names another file."""
    eng = native.engine(m.protocol)
    target, _ = _parse(m.patch.read_text(encoding="utf-8"), str(m.patch))
    want = f"native/{eng.name}/{eng.source.name}"
    if target != want:
        raise PatchError(f"{m.patch}: it changes {target}, not the {m.protocol} engine ({want})")
    return eng.source


def patched(m: Mutant) -> str:
    """The engine's source with the mutant's patch applied."""
    source = source_of(m)
    return apply(m.patch.read_text(encoding="utf-8"), source.read_text(encoding="utf-8"),
                 f"{m.name} ({m.patch.name})")


def write_patched(m: Mutant, out: Path) -> Path:
    """The mutant's source written into directory ``out`` under the engine's file name (it
    includes the engine's header from the engine's folder); its path."""
    path = Path(out) / source_of(m).name
    path.write_text(patched(m), encoding="utf-8")
    return path


def build_mutant(m: Mutant, tmp: Path) -> ModuleType:
    """The mutant compiled by its engine's cffi builder into ``tmp``, loaded."""
    b = native.builder(m.protocol)
    name = f"_{m.protocol}_mutant{m.number}"
    src = tmp / "src"
    src.mkdir(parents=True, exist_ok=True)
    path = b.builder(name, b.FLAGS, source=write_patched(m, src)).compile(
        tmpdir=str(tmp), verbose=False)
    return native.load_build(path, name)


# ------------------------------------------------------------------------------ the run
def _kill_gate(mod: ModuleType) -> tuple[str, Any] | None:
    from verbspec.refimpl.bindings.native_gate import factory
    from verbspec.refimpl.conformance.gate import conform, conform_every_edge
    from verbspec.spec.gate.system import build

    rep = conform(build({}), factory(mod), "mutant", sequences=GATE_RANDOM_RUNS, steps=3000)
    if rep.mismatch is not None:
        return "random", rep.mismatch
    rep = conform_every_edge(factory(mod), "mutant")
    return ("exhaustive", rep.mismatch) if rep.mismatch is not None else None


def _kill_tag(mod: ModuleType) -> tuple[str, Any] | None:
    from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
    from verbspec.refimpl.conformance.tagmatch import (
        SWEEP_CONFIGS,
        TagmatchHarness,
        conform_every_edge,
    )
    from verbspec.spec.tagmatch.system import build

    def factory(cfg: Any) -> NativeTagEngine:
        return NativeTagEngine(cfg, mod)

    rep = conform_every_edge(factory, "mutant")
    if rep.mismatch is not None:
        return "exhaustive", rep.mismatch
    for values in SWEEP_CONFIGS:
        h = TagmatchHarness(build(values), factory)
        for seed in range(TAG_RANDOM_RUNS):
            run = h.run(random.Random(seed), TAG_RANDOM_STEPS)
            if run.mismatch is not None:
                return "random", run.mismatch
    return None


KILLERS: dict[str, Callable[[ModuleType], tuple[str, Any] | None]] = {
    "gate": _kill_gate,
    "tagmatch": _kill_tag,
}


def run_mutants(protocols: Sequence[str],
                progress: Callable[[str], None] | None = None) -> list[MutantResult]:
    """Every mutant of each protocol's native engine, in turn."""
    out = []
    for proto in protocols:
        kill = KILLERS[proto]
        for m in mutants(proto):
            if progress is not None:
                progress(f"{proto} mutant {m.number}")
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="verbspec-mutant-") as tmp:
                found = kill(build_mutant(m, Path(tmp)))
            out.append(MutantResult(proto, m.number, found is not None, found and found[0],
                                    found and str(found[1]),
                                    round(time.perf_counter() - t0, 1)))
    return out


def summary(results: list[MutantResult], seconds: float) -> dict[str, Any]:
    return {"mutants": len(results), "killed": sum(r.killed for r in results),
            "survivors": [f"{r.protocol}:{r.mutant}" for r in results if not r.killed],
            "seconds": round(seconds, 1), "results": [asdict(r) for r in results]}
