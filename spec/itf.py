"""Traces in the ITF format (Apalache's Informal Trace Format), and back.

Encoding of values: dataclasses become records (JSON objects), tuples and lists become sequences
(JSON arrays), dicts become ``{"#map": [[k, v], ...]}``, frozensets ``{"#set": [...]}``, integers
JSON numbers inside the exactly-representable range and ``{"#bigint": "..."}`` outside it.
Every state also carries the variables ``action`` (its name) and ``args`` (a record), so a trace
replays against the spec or an implementation.
"""

from __future__ import annotations

import dataclasses
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
            return tuple(decode(v, f"{path}.#tup[{i}]") for i, v in enumerate(value["#tup"]))
        if "#set" in value:
            return frozenset(decode(v, f"{path}.#set[{i}]") for i, v in enumerate(value["#set"]))
        if "#map" in value:
            pairs = value["#map"]
            if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in pairs
            ):
                raise TraceFormatError(f"{path}: #map must be a list of [key, value] pairs")
            return {decode(k, path): decode(v, f"{path}[{decode(k, path)!r}]") for k, v in pairs}
        return {k: decode(v, f"{path}.{k}") for k, v in value.items()}
    raise TraceFormatError(f"{path}: unsupported JSON value {value!r}")


def trace_to_itf(trace: Trace) -> dict[str, Any]:
    states = []
    vars_: list[str] = ["action", "args"]
    for i, step in enumerate(trace.steps):
        body = encode(step.state)
        if not isinstance(body, dict):
            body = {"state": body}
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
    return decode(meta, "$.#meta"), out
