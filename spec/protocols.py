"""The registry of protocol specs the CLI and checkers know.

Each module named here exposes ``PROTOCOL`` (its name), ``PARAMS`` (ParamSpec tuple),
``VARIANTS`` (Variant tuple), ``PROFILES`` (Profile tuple: named sets of variants that are one
implementation as written), ``INVARIANTS`` (names, in report order) and
``build(values, variants) -> System``. It may expose ``prove(values, variants, *, progress)``
returning a list of proofs.report.Result for the ``prove`` method.
"""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = {
    "gate": "verbspec.spec.gate.system",
    "tagmatch": "verbspec.spec.tagmatch.system",
}


def load(protocol: str) -> ModuleType:
    return importlib.import_module(MODULES[protocol])
