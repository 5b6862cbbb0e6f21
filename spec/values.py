"""Updates of the frozen values that specs keep their state in: tuples (per rank, per sender,
per id) and frozen dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])
D = TypeVar("D")

# per dataclass, computed on first use: its init fields in constructor order, and its evolver
_INIT_FIELDS: dict[type, tuple[str, ...]] = {}
_EVOLVERS: dict[type, Callable[..., Any]] = {}
_HASHERS: dict[type, Callable[[dict[str, Any]], int]] = {}
_UNCHANGED = object()


def set_item(t: T, i: int, value: Any) -> T:
    """``t`` with item ``i`` replaced by ``value``."""
    return t[:i] + (value,) + t[i + 1:]  # type: ignore[return-value]


def evolve(obj: D, **changes: Any) -> D:
    """``obj``, a dataclass instance, with the named fields changed: ``dataclasses.replace``
    without its per-call introspection (the checkers spend much of their time building
    successor states). An unknown field name is a TypeError, as with ``replace``."""
    cls = type(obj)
    return (_EVOLVERS.get(cls) or _evolver(cls))(obj, **changes)


def _init_fields(cls: type) -> tuple[str, ...]:
    names = _INIT_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    return names


def _evolver(cls: type) -> Callable[..., Any]:
    """The evolver of ``cls``: a function ``(obj, *, a=_UNCHANGED, ...)`` returning
    ``cls(obj.a if a is _UNCHANGED else a, ...)`` over its init fields, so that Python itself
    binds the changed fields (and rejects unknown names)."""
    names = _INIT_FIELDS.get(cls) or _init_fields(cls)
    params = "".join(f", {n}=_UNCHANGED" for n in names)
    args = ", ".join(f"obj.{n} if {n} is _UNCHANGED else {n}" for n in names)
    scope: dict[str, Any] = {"_UNCHANGED": _UNCHANGED, "cls": cls}
    exec(f"def evolve(obj, *{params}):\n    return cls({args})\n", scope)
    _EVOLVERS[cls] = scope["evolve"]
    return scope["evolve"]


def hash_once(obj: Any) -> int:
    """A ``__hash__`` for frozen dataclasses without slots that are hashed far more often than
    built (a state's fabric is rehashed with every successor state that leaves it unchanged,
    a rank with every state it is part of): the hash of its init fields, computed on first use
    and kept on the instance. Assign it in the class body (``__hash__ = hash_once``) with
    :func:`unpickled_hash` as ``__getstate__``."""
    kept = obj.__dict__
    h = kept.get("_hash")
    if h is None:
        cls = type(obj)
        h = kept["_hash"] = (_HASHERS.get(cls) or _hasher(cls))(kept)
    return h


def _hasher(cls: type) -> Callable[[dict[str, Any]], int]:
    """The hash of an instance of ``cls`` from its ``__dict__``: a function
    ``(d) -> hash((d["a"], ...))`` over its init fields, written out once per class."""
    names = _INIT_FIELDS.get(cls) or _init_fields(cls)
    items = "".join(f"d[{n!r}], " for n in names)
    scope: dict[str, Any] = {}
    exec(f"def hasher(d):\n    return hash(({items}))\n", scope)
    _HASHERS[cls] = scope["hasher"]
    return scope["hasher"]


def unpickled_hash(obj: Any) -> dict[str, Any]:
    """The instance's state without its kept hash (string hashes differ between processes) or
    anything else kept on it once computed (a name with a leading underscore)."""
    return {k: v for k, v in obj.__dict__.items() if not k.startswith("_")}
