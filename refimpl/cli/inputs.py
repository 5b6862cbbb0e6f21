"""What several commands share of their inputs: the protocols a ``--protocol`` selects, the
check options' defaults, the routing of ``--param`` to the protocols, and the checks made before
any work starts (output paths writable, a gate run's ``--gates`` and ``--engine`` usable)."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from verbspec.proofs.run import Options
from verbspec.proofs.solving import QUANTIFIED_RLIMIT, RLIMIT, RLIMIT_MAX
from verbspec.refimpl.bindings import engine_choice as engines
from verbspec.spec import protocols
from verbspec.spec.params import ParamError

PROTOCOLS = tuple(protocols.MODULES)
DEFAULTS = Options()     # every check option's default, kept with the checkers


class InputError(Exception):
    """An invalid argument found by the CLI's own checks (e.g. an unusable output path)."""


def selected(name: str) -> tuple[str, ...]:
    """The protocols ``--protocol NAME`` selects."""
    return PROTOCOLS if name == "all" else (name,)


def split_params(chosen: Sequence[str], assignments: Sequence[str]) -> dict[str, list[str]]:
    """Route each NAME=VALUE to the protocol that has NAME; refuse names none has."""
    out: dict[str, list[str]] = {p: [] for p in chosen}
    for a in assignments:
        name = a.partition("=")[0].strip()
        owners = [p for p in chosen
                  if any(s.name == name for s in protocols.load(p).PARAMS)]
        if not owners:
            raise ParamError(f"unknown parameter {name!r} for protocol "
                             f"{', '.join(chosen)}")
        for p in owners:
            out[p].append(a)
    return out


def gate_run(args: argparse.Namespace) -> None:
    """The checks shared by the commands that run gate channels: --gates and --engine."""
    if args.gates < 1:
        raise ParamError("--gates must be at least 1")
    try:
        engines.check_engine(args.engine)
    except engines.EngineUnavailable as e:
        raise InputError(str(e)) from None


# ------------------------------------------------------------------------------ output paths
def _missing_dirs(path: Path) -> list[Path]:
    """The directories ``mkdir -p path`` would create, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing[::-1]


def solver_limit_argument(g: argparse.ArgumentParser) -> None:
    """``--solver-limit``: z3's resource limit per query, for the commands that prove."""
    g.add_argument("--solver-limit", type=int, default=None, metavar="N",
                   help=f"prove: z3's resource limit (rlimit) per solver query, the same work "
                        f"on any machine at any load (None: {RLIMIT:,}, or {QUANTIFIED_RLIMIT:,} "
                        f"per seed for tag matching's quantified queries)")


def solver_limit(args: argparse.Namespace) -> int | None:
    """The ``--solver-limit`` given, checked."""
    n = getattr(args, "solver_limit", None)
    if n is not None and not 1 <= n <= RLIMIT_MAX:
        raise ParamError(f"--solver-limit must be between 1 and {RLIMIT_MAX:,} (z3 counts "
                         f"its resources in 32 bits)")
    return n


def check_dir(path: Path, what: str) -> None:
    """Refuse a directory verbspec cannot write files into: tried by creating it (and removing
    what was created) and a temporary file in it, so the answer holds for any user."""
    try:
        made = []
        try:
            for d in _missing_dirs(path):
                d.mkdir()
                made.append(d)
            if not path.is_dir():
                raise InputError(f"{what} {path}: exists and is not a directory")
            with tempfile.TemporaryFile(dir=path):
                pass
        finally:
            for d in reversed(made):
                d.rmdir()
    except OSError as e:
        raise InputError(f"{what} {path}: cannot write there: {e.strerror or e}") from None
    except ValueError as e:     # e.g. a NUL byte in the path
        raise InputError(f"{what} {path!r}: not a usable path: {e}") from None


def check_file(path: Path, what: str, inputs: Sequence[Path] = ()) -> None:
    """Refuse an output file that cannot be written or that is one of the inputs."""
    try:
        for src in inputs:
            if _same_file(path, src):
                raise InputError(f"{what} {path}: is the input {src}; refusing to overwrite it")
        if path.is_dir():
            raise InputError(f"{what} {path}: is a directory")
        if path.exists():
            with open(path, "ab"):     # opened for writing, nothing written
                pass
            return
    except OSError as e:
        raise InputError(f"{what} {path}: cannot write there: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"{what} {path!r}: not a usable path: {e}") from None
    check_dir(path.parent, f"{what}'s directory")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()
