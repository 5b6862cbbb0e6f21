"""The cffi builder (API mode) of the native gate engine: ``native/gate/gate_engine.c`` compiled
into the extension module ``verbspec.native._gate_engine``. setup.py runs it from the project
root, where the paths below are relative to; ``builder`` makes the same module with other flags,
or from another copy of the source (the sanitized, mutant and coverage builds of the tests).

The declarations cffi sees are read from ``gate_engine.h`` itself: comments and the
preprocessor's other lines dropped, each constant left to the compiler (``#define NAME ...``),
array lengths written out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from cffi import FFI

MODULE = "verbspec.native._gate_engine"
HERE = Path(__file__).resolve().parent
FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra")

HEADER = HERE / "gate_engine.h"
SOURCE = HERE / "gate_engine.c"


def cdef_text(header: str) -> str:
    """The header as cffi declarations."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    text_len = re.search(r"#define VS_GATE_TEXT (\d+)", text).group(1)
    out = []
    for line in text.splitlines():
        define = re.match(r"#define (VS_GATE_\w+) \S", line)
        if define:
            out.append(f"#define {define.group(1)} ...")
        elif not line.lstrip().startswith("#"):
            out.append(line.replace("[VS_GATE_TEXT]", f"[{text_len}]"))
    return "\n".join(out)


def builder(module: str = MODULE, flags: Sequence[str] = FLAGS, *, link: Sequence[str] = (),
            source: Path | None = None, absolute: bool = False) -> FFI:
    """A builder of the engine as extension ``module`` compiled with ``flags`` (the sanitizer
    and coverage ones linked with too, and ``link``); ``source``, another copy of the engine's
    source to compile in its place (it includes the header from here); with ``absolute``, the
    paths are absolute (a build elsewhere than the project root)."""
    root = HERE if absolute or source is not None else Path("native/gate")
    ffi = FFI()
    ffi.cdef(cdef_text(HEADER.read_text(encoding="utf-8")))
    ffi.set_source(module, '#include "gate_engine.h"',
                   sources=[(source or root / SOURCE.name).as_posix()],
                   include_dirs=[root.as_posix()], extra_compile_args=list(flags),
                   extra_link_args=[*(f for f in flags if f.startswith("-fsanitize")
                                      or f == "--coverage"), *link])
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
