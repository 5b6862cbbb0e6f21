"""Which engine runs a channel: the native C engine where it was built, else the Python
reference engine. ``auto`` picks the native one when it is there; the name of the engine in
use is shown by every command that runs one."""

from __future__ import annotations

from typing import Any

from verbspec import native
from verbspec.refimpl.engines.gate_engine import GateEngine
from verbspec.spec.gate.params import GateConfig

CHOICES = ("auto", "native", "python")


class EngineUnavailable(ValueError):
    """The engine asked for is not built here."""


def check_engine(name: str) -> None:
    if name not in CHOICES:
        raise EngineUnavailable(f"engine {name!r}: expected one of {', '.join(CHOICES)}")
    if name == "native" and not native_gate_available():
        raise EngineUnavailable("the native gate engine is not built here (pip install -e . "
                                "needs a C compiler); use --engine python")


def native_gate_available() -> bool:
    return native.load("gate") is not None


def resolved(name: str) -> str:
    """The engine that ``name`` runs: native or python."""
    check_engine(name)
    return "native" if name == "native" or (name == "auto" and native_gate_available()) \
        else "python"


def gate_engine(name: str, cfg: GateConfig, grant: int, variant: str = "",
                rank: int = 0) -> Any:
    """A gate engine of rank ``rank``. ``variant`` (tests and demonstrations only): the
    reference engine changed to behave as that spec variant (refimpl/engines/gate_variants.py)."""
    if variant:
        from verbspec.refimpl.engines.gate_variants import variant_engine

        if resolved(name) == "native":
            raise EngineUnavailable(f"variant {variant!r}: the variant engines are the Python "
                                    f"reference engine changed; use --engine python")
        try:
            return variant_engine(variant)(cfg, rank, grant)
        except ValueError as e:
            raise EngineUnavailable(str(e)) from None
    if resolved(name) == "native":
        from verbspec.refimpl.bindings.native_gate import NativeGateEngine

        return NativeGateEngine(cfg, grant)
    return GateEngine(cfg, grant)
