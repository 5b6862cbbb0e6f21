"""The cffi builder (API mode) of the UCX tag-matching shim: ``native/ucx/ucx_tag_shim.c``
linked with UCX (``-lucp -lucs``) into ``verbspec.native._ucx_shim``, for the conformance
adapter ``refimpl/bindings/ucx_tagmatch.py``. Like the engines it is optional: where UCX's
headers are missing (Debian: ``apt install libucx-dev``) its compile fails and
``pip install -e .`` goes on without it (setup.py). Paths are relative to the project root,
where setup.py runs.

The declarations cffi sees are read from ``ucx_tag_shim.h`` itself: comments and
preprocessor lines dropped, each constant left to the compiler.
"""

from __future__ import annotations

import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "ucx_tag_shim.h"
SOURCE = HERE / "ucx_tag_shim.c"
MODULE = "verbspec.native._ucx_shim"
FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-D_POSIX_C_SOURCE=200809L")


def cdef_text(header: str) -> str:
    """The header as cffi declarations."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    out = []
    for line in text.splitlines():
        define = re.match(r"#define (VS_UCX_\w+) \S", line)
        if define:
            out.append(f"#define {define.group(1)} ...")
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


def builder(module: str = MODULE, *, absolute: bool = False) -> FFI:
    """A builder of the shim as extension ``module``; with ``absolute``, the paths are
    absolute (a build elsewhere than the project root)."""
    root = HERE if absolute else Path("native/ucx")
    ffi = FFI()
    ffi.cdef(cdef_text(HEADER.read_text(encoding="utf-8")))
    ffi.set_source(module, '#include "ucx_tag_shim.h"',
                   sources=[(root / SOURCE.name).as_posix()],
                   include_dirs=[root.as_posix()], libraries=["ucp", "ucs"],
                   extra_compile_args=list(FLAGS))
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
