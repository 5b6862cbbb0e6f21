"""The native engines: the gate engine and the tag-matching engine in C (``native/*.c``), each
the same sans-I/O machine as its reference engine in ``refimpl/``, with a plain C ABI
(``native/*.h``) that a C transport links against; and the shim that drives UCX's tag matching
for the conformance suite (``native/ucx_tag_shim.c``, built where UCX is installed).

``pip install -e .`` compiles each engine with the system compiler into a cffi extension module
(``native/build_*.py``). The build is optional: without a compiler the package installs and runs
its Python engines; ``load`` says whether an engine was built.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

# engine name -> its compiled module
MODULES = {"gate": "_gate_engine", "tag": "_tag_engine", "ucx": "_ucx_shim"}
ENGINES = tuple(MODULES)


def load(engine: str) -> ModuleType | None:
    """The compiled module of ``engine`` (its ``ffi`` and ``lib``), or None where it was not
    built (no compiler when the package was installed; for ``ucx``, no UCX headers)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown native engine {engine!r}: expected one of {', '.join(ENGINES)}")
    try:
        return importlib.import_module(f"verbspec.native.{MODULES[engine]}")
    except ImportError:
        return None


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
