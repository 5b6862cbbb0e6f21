"""C programs this package compiles at run time from its shipped sources with the system
compiler (``$CC``, else ``cc`` or ``gcc``): the benchmark harnesses and the replay drivers."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path


class BuildError(RuntimeError):
    """A program could not be built: the message says why."""


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise BuildError("no C compiler found (set CC, or install gcc)")
    return cc


def compile_c(out: Path, sources: Sequence[Path], flags: Sequence[str] = (),
              includes: Sequence[Path] = (), libs: Sequence[str] = ()
              ) -> subprocess.CompletedProcess:
    """Compile and link ``sources`` into the program ``out``; the compiler's result (its
    stderr says why where it failed)."""
    cmd = [compiler(), *flags, *(f"-I{d}" for d in includes), "-o", str(out),
           *map(str, sources), *libs]
    return subprocess.run(cmd, capture_output=True, text=True)
