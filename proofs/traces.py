"""ITF trace files: a trace written compactly to disk, and read back with every problem named
by its JSON path. The encoding itself is :mod:`verbspec.spec.itf`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verbspec.proofs.report import trace_name
from verbspec.spec.itf import TraceFormatError, decode_states, trace_to_itf
from verbspec.spec.lts import Trace


def write_trace(trace: Trace, path: Path) -> Path:
    """Write the trace compactly, one state per line: long traces of full queues run to
    hundreds of kilobytes per state, and line tools still find a step by its index."""
    doc = trace_to_itf(trace)
    head = {k: v for k, v in doc.items() if k != "states"}
    tight = {"separators": (",", ":")}
    lines = ",\n".join(json.dumps(st, **tight) for st in doc["states"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(head, **tight)[:-1] + ',"states":[\n' + lines + "\n]}\n")
    return path


def save_counterexample(trace: Trace, trace_dir: Path, method: str) -> str:
    """Write a trace that ends in a violation where the checkers keep them, named after its
    protocol, variants, the method that found it and the invariant it breaks; its path."""
    if trace.violation is None:
        raise ValueError("a counterexample trace must end in a violation")
    name = trace_name(trace.protocol, method, trace.violation, trace.variants, trace.params)
    return str(write_trace(trace, Path(trace_dir) / name))


def load_json(path: Path) -> Any:
    """A trace file's JSON; TraceFormatError when it cannot be read or parsed."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except ValueError as e:     # e.g. a NUL byte in the path
        raise TraceFormatError(f"{str(path)!r}: cannot read: {e}") from None
    return parse_json(text, str(path))


def parse_json(text: str, where: str) -> Any:
    """JSON text as Python values; TraceFormatError on malformed, too deeply nested, or
    out-of-range numbers."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"{where}: not JSON: {e}") from None
    except RecursionError:
        raise TraceFormatError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:     # e.g. an integer of more digits than Python converts
        raise TraceFormatError(f"{where}: not JSON: {e}") from None


def read_moves(path: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Read an ITF trace written by verbspec: its ``#meta`` and its (action, args) moves after
    the initial state. Raises TraceFormatError naming the JSON path of any problem."""
    meta, states = decode_states(load_json(path))
    return meta, [(action, args) for action, args, _ in states[1:]]


def read_trace(path: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]],
                                     list[dict[str, Any]]]:
    """Like :func:`read_moves`, plus each state's variables as recorded (encoded, without
    ``#meta``, ``action`` and ``args``), for comparison with a replay."""
    doc = load_json(path)
    meta, states = decode_states(doc)
    recorded = [{k: v for k, v in st.items() if k not in ("#meta", "action", "args")}
                for st in doc["states"]]
    return meta, [(action, args) for action, args, _ in states[1:]], recorded
