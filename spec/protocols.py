"""The registry of protocol specs the CLI and checkers know.

Each module named here exposes ``PROTOCOL`` (its name), ``PARAMS`` (ParamSpec tuple),
``VARIANTS`` (Variant tuple), ``PROFILES`` (Profile tuple: named sets of variants that are one
implementation as written), ``INVARIANTS`` (names, in report order) and
``build(values, variants) -> System``. It may expose ``prove(values, variants, *, progress)``
returning a list of proofs.report.Result for the ``prove`` method. Beside it, a module
``modes`` holds the protocol's ``MODES`` (spec/modes.py).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from verbspec.spec.modes import Mode

MODULES = {
    "gate": "verbspec.spec.gate.system",
    "tagmatch": "verbspec.spec.tagmatch.system",
}


def load(protocol: str) -> ModuleType:
    return importlib.import_module(MODULES[protocol])


def modes(protocol: str) -> tuple[Mode, ...]:
    """The protocol's modes (``verbspec.spec.PROTOCOL.modes.MODES``)."""
    return importlib.import_module(MODULES[protocol].rsplit(".", 1)[0] + ".modes").MODES
