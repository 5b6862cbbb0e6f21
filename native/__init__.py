"""The native engines, a folder each: ``gate/`` (the gate engine) and ``tagmatch/`` (the
tag-matching engine), each the same sans-I/O machine as its reference engine in ``refimpl/``
with a plain C ABI (its header) that a C transport links against, and ``ucx/``, the shim that
drives UCX's tag matching for the conformance suite (built where UCX is installed). Beside
them: the C programs compiled at run time from the shipped sources (``replay/``, ``bench/``,
``verbs/``), the header of the spec's texts and constants they all include (``generated/``,
written by ``python -m verbspec.refimpl.bindings.gen_header``), and what only test builds use
(``testing/``: the allocation failure injector and the engines' mutants, as patches).

``pip install -e .`` compiles each engine with the system compiler into a cffi extension module
(each folder's ``build_*.py``). The build is optional: without a compiler the package installs
and runs its Python engines; ``load`` says whether an engine was built.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "generated"
SPEC_HEADER = GENERATED / "spec_constants.h"
TESTING = HERE / "testing"
ALLOC_FAULT = TESTING / "alloc_fault.c"
MUTANT_PATCHES = TESTING / "mutant_patches"


@dataclass(frozen=True)
class Engine:
    """One native engine: its folder, C source and header, the compiled module's name in this
    package, and the module of its cffi builder."""

    name: str
    stem: str                   # the source's and header's name, without the suffix
    module: str                 # the compiled module, in this package

    @property
    def folder(self) -> Path:
        return HERE / self.name

    @property
    def source(self) -> Path:
        return self.folder / f"{self.stem}.c"

    @property
    def header(self) -> Path:
        return self.folder / f"{self.stem}.h"

    @property
    def builder(self) -> str:
        return f"verbspec.native.{self.name}.build_{self.name}"


# by name: the gate and tag-matching engines by their protocol's name
ENGINES = {e.name: e for e in (Engine("gate", "gate_engine", "_gate_engine"),
                               Engine("tagmatch", "tagmatch_engine", "_tagmatch_engine"),
                               Engine("ucx", "ucx_tag_shim", "_ucx_shim"))}

def engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown native engine {name!r}: expected one of "
                         f"{', '.join(ENGINES)}")
    return ENGINES[name]


def load(name: str) -> ModuleType | None:
    """The compiled module of engine ``name`` (its ``ffi`` and ``lib``), or None where it was
    not built (no compiler when the package was installed; for ``ucx``, no UCX headers)."""
    try:
        return importlib.import_module(f"verbspec.native.{engine(name).module}")
    except ImportError:
        return None


def builder(name: str) -> ModuleType:
    """The cffi builder module of engine ``name``: its ``builder`` makes the engine's module
    with other flags or from another copy of its source (the sanitized, mutant and coverage
    builds)."""
    return importlib.import_module(engine(name).builder)


def load_build(path: str | Path, name: str | None = None) -> ModuleType:
    """A module built outside the package (a sanitized, mutant or coverage build of an
    engine), loaded from its file; ``name`` defaults to the file's stem."""
    path = Path(path)
    name = name or path.name.split(".")[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the build {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
