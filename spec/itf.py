"""Traces in the ITF format (Apalache's Informal Trace Format), and back.

Encoding of values: dataclasses become records (JSON objects), tuples and lists become sequences
(JSON arrays), dicts become ``{"#map": [[k, v], ...]}``, frozensets ``{"#set": [...]}``, integers
JSON numbers inside the exactly-representable range and ``{"#bigint": "..."}`` outside it.
Every state also carries the variables ``action`` (its name) and ``args`` (a record), so a trace
replays against the spec or an implementation.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from verbspec.spec.lts import Trace

_SAFE = 2**53 - 1


class TraceFormatError(ValueError):
    """A trace file that is not a verbspec ITF trace; the message names where it is wrong."""


def encode(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -_SAFE <= value <= _SAFE else {"#bigint": str(value)}
    if isinstance(value, str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, frozenset | set):
        return {"#set": [encode(v) for v in sorted(value, key=repr)]}
    if isinstance(value, dict):
        return {"#map": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"cannot encode {type(value).__name__} in ITF")


def decode(value: Any, path: str = "$") -> Any:
    """Inverse of :func:`encode`, with records as dicts and sequences as tuples."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, list):
        return tuple(decode(v, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict):
        if "#bigint" in value:
            try:
                return int(value["#bigint"])
            except (TypeError, ValueError):
                raise TraceFormatError(f"{path}: #bigint is not an integer") from None
        if "#tup" in value:
            return tuple(decode(v, f"{path}.#tup[{i}]")
                         for i, v in enumerate(_items(value, "#tup", path)))
        if "#set" in value:
            items = [decode(v, f"{path}.#set[{i}]")
                     for i, v in enumerate(_items(value, "#set", path))]
            return _hashed(frozenset, items, f"{path}.#set")
        if "#map" in value:
            pairs = value["#map"]
            if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in pairs
            ):
                raise TraceFormatError(f"{path}: #map must be a list of [key, value] pairs")
            keys = [decode(k, f"{path}.#map[{i}][0]") for i, (k, _) in enumerate(pairs)]
            return _hashed(dict, [(k, decode(v, f"{path}[{k!r}]"))
                                  for k, (_, v) in zip(keys, pairs, strict=True)],
                           f"{path}.#map")
        return {k: decode(v, f"{path}.{k}") for k, v in value.items()}
    raise TraceFormatError(f"{path}: unsupported JSON value {_brief(value)}")


def _items(value: dict, key: str, path: str) -> list:
    items = value[key]
    if not isinstance(items, list):
        raise TraceFormatError(f"{path}.{key}: expected a list")
    return items


def _hashed(kind: Any, items: list, path: str) -> Any:
    """A set or map of decoded values; records and maps cannot be set members or map keys."""
    try:
        return kind(items)
    except TypeError:
        raise TraceFormatError(f"{path}: a member or key is a record or map") from None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def trace_to_itf(trace: Trace) -> dict[str, Any]:
    states = []
    vars_: list[str] = ["action", "args"]
    for i, step in enumerate(trace.steps):
        body = state_body(step.state)
        if i == 0:
            vars_ += list(body)
        entry: dict[str, Any] = {"#meta": {"index": i}, "action": step.action,
                                 "args": encode(step.args)}
        entry.update(body)
        states.append(entry)
    meta: dict[str, Any] = {
        "format": "ITF",
        "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
        "source": "verbspec",
        "protocol": trace.protocol,
        "params": encode(trace.params),
        "variants": list(trace.variants),
    }
    if trace.violation:
        meta["violation"] = trace.violation
        meta["message"] = trace.message
    return {"#meta": meta, "vars": vars_, "states": states}


def decode_states(doc: Any) -> tuple[dict[str, Any], list[tuple[str, dict, dict]]]:
    """Check a decoded JSON document is an ITF trace as verbspec writes it and decode it: its
    ``#meta`` and, per state, (action, args, other variables). Raises TraceFormatError naming
    the JSON path of the first problem."""
    try:
        return _decode_states(doc)
    except RecursionError:
        raise TraceFormatError("$: nested too deeply") from None


def _decode_states(doc: Any) -> tuple[dict[str, Any], list[tuple[str, dict, dict]]]:
    if not isinstance(doc, dict):
        raise TraceFormatError("$: an ITF trace is a JSON object")
    meta = doc.get("#meta")
    if not isinstance(meta, dict):
        raise TraceFormatError("$.#meta: missing or not an object")
    states = doc.get("states")
    if not isinstance(states, list) or not states:
        raise TraceFormatError("$.states: missing, not a list, or empty")
    out = []
    for i, st in enumerate(states):
        where = f"$.states[{i}]"
        if not isinstance(st, dict):
            raise TraceFormatError(f"{where}: a state is a JSON object")
        idx = st["#meta"].get("index") if isinstance(st.get("#meta"), dict) else None
        if idx != i:
            raise TraceFormatError(f"{where}.#meta.index: expected {i}, found {idx!r}")
        if "action" not in st:
            raise TraceFormatError(f"{where}.action: missing")
        if not isinstance(st["action"], str):
            raise TraceFormatError(f"{where}.action: not a string")
        if "args" not in st:
            raise TraceFormatError(f"{where}.args: missing")
        args = decode(st["args"], f"{where}.args")
        if not isinstance(args, dict):
            raise TraceFormatError(f"{where}.args: not an object")
        body = {k: decode(v, f"{where}.{k}") for k, v in st.items()
                if k not in ("#meta", "action", "args")}
        out.append((st["action"], args, body))
    decoded = decode(meta, "$.#meta")
    if not isinstance(decoded, dict):   # e.g. {"#set": [...]}, which decodes to a set
        raise TraceFormatError("$.#meta: not a record")
    return check_meta(decoded), out


def check_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The ``#meta`` fields verbspec reads, checked for their types: ``variants`` a list of
    names, ``params`` an object, ``protocol`` and ``violation`` strings."""
    variants = meta.get("variants", ())
    if not isinstance(variants, tuple) or not all(isinstance(v, str) for v in variants):
        raise TraceFormatError(f"$.#meta.variants: expected a list of variant names, found "
                               f"{_brief(variants)}")
    if not isinstance(meta.get("params", {}), dict):
        raise TraceFormatError("$.#meta.params: not an object")
    for key in ("protocol", "violation", "message"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise TraceFormatError(f"$.#meta.{key}: not a string")
    return meta


def state_body(state: Any) -> dict[str, Any]:
    """A state's variables as an ITF trace records them (encoded)."""
    body = encode(state)
    return body if isinstance(body, dict) else {"state": body}


_ABSENT = "(absent)"


def first_difference(said: Any, got: Any, path: str = "$") -> tuple[str, Any, Any] | None:
    """The first place two encoded ITF values differ: (JSON path, recorded value, replayed
    value), or None when they are equal. Maps compare by key, whatever their order."""
    if isinstance(said, dict) and isinstance(got, dict):
        if "#map" in said and "#map" in got:
            return _map_difference(said["#map"], got["#map"], path)
        for k in [*said, *(k for k in got if k not in said)]:
            if k not in said or k not in got:
                return (f"{path}.{k}", said.get(k, _ABSENT), got.get(k, _ABSENT))
            diff = first_difference(said[k], got[k], f"{path}.{k}")
            if diff:
                return diff
        return None
    if isinstance(said, list) and isinstance(got, list):
        for i in range(max(len(said), len(got))):
            if i >= len(said) or i >= len(got):
                return (f"{path}[{i}]", said[i] if i < len(said) else _ABSENT,
                        got[i] if i < len(got) else _ABSENT)
            diff = first_difference(said[i], got[i], f"{path}[{i}]")
            if diff:
                return diff
        return None
    if type(said) is not type(got) or said != got:
        return (path, said, got)
    return None


def _map_difference(said: Any, got: Any, path: str) -> tuple[str, Any, Any] | None:
    if not (isinstance(said, list) and isinstance(got, list)):
        return first_difference(said, got, f"{path}.#map")

    def keyed(pairs: list) -> dict[str, Any]:
        return {json.dumps(p[0], sort_keys=True): p[1] for p in pairs
                if isinstance(p, list) and len(p) == 2}

    a, b = keyed(said), keyed(got)
    for k in [*a, *(k for k in b if k not in a)]:
        where = f"{path}[{k}]"
        if k not in a or k not in b:
            return (where, a.get(k, _ABSENT), b.get(k, _ABSENT))
        diff = first_difference(a[k], b[k], where)
        if diff:
            return diff
    return None


def shown(value: Any, limit: int = 80) -> str:
    """An encoded ITF value as compact JSON text, cut to ``limit`` characters."""
    text = value if value == _ABSENT else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"
