"""The cffi builder (API mode) of the native tag-matching engine: ``verbspec.native._tag_engine``,
compiled from ``native/tag_engine.c`` by ``pip install -e .`` (setup.py). Paths are relative to
the project root, where setup.py runs.

The declarations cffi sees are read from ``native/tag_engine.h`` itself (preprocessor lines and
comments dropped, array lengths left to the compiler), so the header is the one statement of
the ABI; cffi checks every struct's layout against it when it compiles.
"""

from __future__ import annotations

import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "tag_engine.h"
MODULE = "verbspec.native._tag_engine"
SOURCES = ["native/tag_engine.c"]
INCLUDE_DIRS = ["native"]
COMPILE_ARGS = ["-std=c11", "-O2"]


def cdef_text(header: str) -> str:
    """The header as cffi declarations."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\[VS_TAG_OUT_MAX\]", "[...]", "\n".join(lines))
    return "#define VS_TAG_OUT_MAX ...\n" + text


def builder(module: str = MODULE, extra_compile_args: tuple[str, ...] = (),
            extra_link_args: tuple[str, ...] = (), root: Path | None = None) -> FFI:
    """A builder of the engine's module: ``module`` named, with extra compiler and linker flags
    (a sanitized or mutant build); ``root`` makes the source paths absolute."""
    ffi = FFI()
    ffi.cdef(cdef_text(HEADER.read_text(encoding="utf-8")))
    base = (lambda p: str(root / p)) if root is not None else (lambda p: p)
    ffi.set_source(module, '#include "tag_engine.h"',
                   sources=[base(s) for s in SOURCES],
                   include_dirs=[base(d) for d in INCLUDE_DIRS],
                   extra_compile_args=[*COMPILE_ARGS, *extra_compile_args],
                   extra_link_args=list(extra_link_args))
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
