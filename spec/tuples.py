"""Updates of the frozen tuples that specs keep their state in (per rank, per sender, per id)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])


def set_item(t: T, i: int, value: Any) -> T:
    """``t`` with item ``i`` replaced by ``value``."""
    return t[:i] + (value,) + t[i + 1:]  # type: ignore[return-value]
