"""The cffi builder (API mode) of the native tag-matching engine:
``verbspec.native._tagmatch_engine``, compiled from ``native/tagmatch/tagmatch_engine.c`` by
``pip install -e .`` (setup.py, which runs it from the project root, where the paths below are
relative to); ``builder`` makes the same module with other flags, or from another copy of the
source (the sanitized, mutant and coverage builds of the tests).

The declarations cffi sees are read from ``tagmatch_engine.h`` itself (preprocessor lines and
comments dropped, array lengths left to the compiler, the spec's constants it names written
out from ``native/generated/spec_constants.h``), so the header is the one statement of the ABI;
cffi checks every struct's layout against it when it compiles.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from cffi import FFI

MODULE = "verbspec.native._tagmatch_engine"
HERE = Path(__file__).resolve().parent
FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra")

HEADER = HERE / "tagmatch_engine.h"
SOURCE = HERE / "tagmatch_engine.c"
SPEC_HEADER = HERE.parent / "generated" / "spec_constants.h"


def spec_integers(text: str) -> dict[str, str]:
    """The integer constants of the spec's header, by name."""
    return dict(re.findall(r"^#define (VS_SPEC_\w+) \(?(-?\d+)\)?$", text, flags=re.M))


def cdef_text(header: str, spec: str) -> str:
    """The header as cffi declarations."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\[VS_TAG_OUT_MAX\]", "[...]", "\n".join(lines))
    values = spec_integers(spec)
    text = re.sub(r"\bVS_SPEC_\w+\b", lambda m: values[m.group(0)], text)
    return "#define VS_TAG_OUT_MAX ...\n" + text


def builder(module: str = MODULE, flags: Sequence[str] = FLAGS, *, link: Sequence[str] = (),
            source: Path | None = None, absolute: bool = False) -> FFI:
    """A builder of the engine as extension ``module`` compiled with ``flags`` (the sanitizer
    and coverage ones linked with too, and ``link``); ``source``, another copy of the engine's
    source to compile in its place (it includes the header from here); with ``absolute``, the
    paths are absolute (a build elsewhere than the project root)."""
    root = HERE if absolute or source is not None else Path("native/tagmatch")
    ffi = FFI()
    ffi.cdef(cdef_text(HEADER.read_text(encoding="utf-8"),
                       SPEC_HEADER.read_text(encoding="utf-8")))
    ffi.set_source(module, '#include "tagmatch_engine.h"',
                   sources=[(source or root / SOURCE.name).as_posix()],
                   include_dirs=[root.as_posix()], extra_compile_args=list(flags),
                   extra_link_args=[*(f for f in flags if f.startswith("-fsanitize")
                                      or f == "--coverage"), *link])
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
