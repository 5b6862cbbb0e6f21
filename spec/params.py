"""Typed, validated parameters and named variants, shared by every protocol spec.

Malformed parameters (unknown name, wrong type, a value the protocol itself refuses) raise
ParamError, which the CLI turns into exit code 3. Well-formed but unsafe values are accepted:
checking them is the checker's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ParamError(ValueError):
    """An invalid parameter or variant; the message names it."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: type
    default: Any
    doc: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()

    def parse(self, text: str) -> Any:
        if self.type is int:
            try:
                value = int(text, 0)
            except ValueError:
                raise ParamError(f"parameter {self.name}: {text!r} is not an integer") from None
        else:
            value = text
        self.validate(value)
        return value

    def validate(self, value: Any) -> None:
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ParamError(f"parameter {self.name}: {value!r} is not an integer")
        if self.type is str and not isinstance(value, str):
            raise ParamError(f"parameter {self.name}: {value!r} is not a string")
        if self.lo is not None and value < self.lo:
            raise ParamError(f"parameter {self.name}: {value} is below the minimum {self.lo}")
        if self.hi is not None and value > self.hi:
            raise ParamError(f"parameter {self.name}: {value} is above the maximum {self.hi}")
        if self.choices and value not in self.choices:
            raise ParamError(f"parameter {self.name}: {value!r} is not one of "
                             f"{', '.join(self.choices)}")


def parse_assignments(specs: Sequence[ParamSpec], assignments: Iterable[str]) -> dict[str, Any]:
    """Turn ``NAME=VALUE`` strings into a dict of typed values over the defaults."""
    table = {s.name: s for s in specs}
    values = {s.name: s.default for s in specs}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep:
            raise ParamError(f"parameter {item!r}: expected NAME=VALUE")
        if name not in table:
            raise ParamError(f"unknown parameter {name!r} (known: {', '.join(table)})")
        values[name] = table[name].parse(text.strip())
    return values


def check_values(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a mapping of already-typed values (e.g. from a test) over the defaults."""
    table = {s.name: s for s in specs}
    out = {s.name: s.default for s in specs}
    for name, value in values.items():
        if name not in table:
            raise ParamError(f"unknown parameter {name!r} (known: {', '.join(table)})")
        table[name].validate(value)
        out[name] = value
    return out


@dataclass(frozen=True)
class Variant:
    """A named, documented protocol switch that reproduces a known weakness."""

    name: str
    changes: str
    breaks: str

    def on(self, variants: Iterable[str]) -> bool:
        """Whether this variant is among the names switched on."""
        return self.name in variants


@dataclass(frozen=True)
class Profile:
    """A named set of variants that together are one real implementation as written: each
    member is a variant and where that implementation does what the variant does."""

    name: str
    describes: str
    members: tuple[tuple[str, str], ...]    # (variant name, where the implementation does it)
    # NAME=VALUE for the parameters where the implementation's own value is not the default;
    # a --param given with the profile overrides them
    params: tuple[str, ...] = ()

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.members)

    def source(self, variant: str) -> str:
        return dict(self.members)[variant]


def check_variants(known: Sequence[Variant], names: Iterable[str]) -> tuple[str, ...]:
    table = {v.name for v in known}
    out = []
    for n in names:
        if n not in table:
            raise ParamError(f"unknown variant {n!r} (known: {', '.join(sorted(table))})")
        if n not in out:
            out.append(n)
    return tuple(out)




def value_range(spec: ParamSpec) -> str:
    """The values a parameter accepts, as text: its choices, or its integer range."""
    if spec.choices:
        return " | ".join(spec.choices)
    if spec.lo is not None and spec.hi is not None:
        return f"{spec.lo}..{spec.hi}"
    if spec.lo is not None:
        return f">= {spec.lo}"
    if spec.hi is not None:
        return f"<= {spec.hi}"
    return "any integer" if spec.type is int else f"any {spec.type.__name__}"


def describe(spec: ParamSpec) -> dict[str, Any]:
    """A parameter as JSON: name, type, default, range (lo, hi: null when unbounded), choices,
    and its documentation."""
    return {"name": spec.name, "type": spec.type.__name__, "default": spec.default,
            "lo": spec.lo, "hi": spec.hi, "choices": list(spec.choices),
            "range": value_range(spec), "doc": spec.doc}
