"""The spec's vocabulary for the C code: ``native/generated/spec_constants.h``, written from the
spec's own tables, so that the native engines, drivers and programs print the spec's texts and
use its constants, poll sizes, parameter bounds and names without a copy of their own.

    python -m verbspec.refimpl.bindings.gen_header            # rewrite the header
    python -m verbspec.refimpl.bindings.gen_header --check    # exit 1 where it is not current

What it holds, each macro prefixed ``VS_SPEC_``:

- the gate's texts (``spec/gate/errors.py``): every failure text, the log line and the piece
  of a completion's status, as printf formats, by the name the spec declares them under; the
  errno texts ds4 prints; the error a crashed rank reads (as the spec's crash step writes it);
- the gate's names in the order of the C engine's enums (the adapter's order,
  ``refimpl/bindings/native_gate.py``): the phases and the registered regions;
- the gate's poll sizes (``spec/gate/constants.py``): a decode or verify-block wait's, a big-gate
  window's, and the drain's as a function of the window;
- the gate's wire constants (``spec/gate/wire.py``, ``spec/gate/state.py``) and the status of a
  successful completion (``spec/fabric.py``);
- every integer parameter's default and bounds, of both protocols (their ``PARAMS`` tables);
- tag matching's values (``spec/tagmatch/``): the wildcard, the receive statuses and
  completion codes, the rendezvous stages, where an offloaded receive lives; the names of
  message kinds, NIC ops and NIC completions in the C engine's order (the adapter's,
  ``refimpl/bindings/native_tagmatch.py``); and the texts the spec refuses a message that
  arrives twice and a second cancel with, as printf formats of the id.

A test regenerates the header and compares (tests/bindings/test_gen_header.py), so a change
to the spec that the header does not follow fails there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verbspec import native
from verbspec.refimpl.bindings import native_gate, native_tagmatch
from verbspec.spec import fabric
from verbspec.spec.actions import name_of
from verbspec.spec.gate import constants, errors, state, steps, wire
from verbspec.spec.gate import params as gate_params
from verbspec.spec.gate import system as gate_system
from verbspec.spec.params import ParamSpec, check_values
from verbspec.spec.tagmatch import lists, offload
from verbspec.spec.tagmatch import state as tag_state
from verbspec.spec.tagmatch import system as tag_system
from verbspec.spec.values import evolve

HEADER = native.SPEC_HEADER
COMMAND = "python -m verbspec.refimpl.bindings.gen_header"
WIDTH = 100                 # the longest line written, where a text allows
# an id no text of the spec writes otherwise: where it stands in a text, the id's conversion
_PROBE_ID = 918_273_645


@dataclass(frozen=True)
class Define:
    name: str
    value: str
    note: str = ""


def c_string(text: str) -> str:
    """``text`` as a C string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def c_unsigned(value: int) -> str:
    """An unsigned constant: ``Nu`` where it fits 32 bits, else ``UINT64_C(N)``."""
    if value < 0:
        raise ValueError(f"{value} is not unsigned")
    return f"{value}u" if value <= 0xFFFF_FFFF else f"UINT64_C({value})"


def c_int(value: int) -> str:
    """A signed constant of int range, negatives parenthesized."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{value} is outside int's range")
    return f"({value})" if value < 0 else str(value)


def _wrapped_strings(text: str, indent: str) -> list[str]:
    """``text`` as string literals to concatenate, each line within WIDTH where its words
    allow."""
    room = WIDTH - len(indent) - 4          # the quotes and a trailing " \"
    pieces, line = [], ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if line and len(c_string(candidate)) > room:
            pieces.append(line + " ")
            line = word
        else:
            line = candidate
    pieces.append(line)
    return [c_string(p) for p in pieces]


def comment(text: str) -> list[str]:
    """A C comment of ``text``, its lines within WIDTH."""
    lines, line = [], "/*"
    for word in text.split(" "):
        if len(line) + 1 + len(word) > WIDTH - 3 and line not in ("/*", " *"):
            lines.append(line)
            line = " *"
        line += " " + word
    lines.append(line + " */")
    return lines


def _render_define(d: Define) -> list[str]:
    out = comment(d.note) if d.note else []
    one = f"#define {d.name} {d.value}"
    if len(one) <= WIDTH:
        return [*out, one]
    if d.value.startswith('"'):
        text = eval_c_string(d.value)
        parts = _wrapped_strings(text, "    ")
        return [*out, f"#define {d.name} \\",
                *(f"    {p} \\" for p in parts[:-1]), f"    {parts[-1]}"]
    return [*out, f"#define {d.name} \\", f"    {d.value}"]


def eval_c_string(literal: str) -> str:
    """The text of a C string literal this module wrote (its escapes undone)."""
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            nxt = body[i + 1]
            if nxt == "n":
                out.append("\n")
                i += 2
            elif nxt.isdigit():
                out.append(chr(int(body[i + 1:i + 4], 8)))
                i += 4
            else:
                out.append(nxt)
                i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _initializer(name: str, items: Sequence[str], note: str) -> list[str]:
    """A brace initializer of string literals, wrapped."""
    lines, line = [], "   "
    for item in (c_string(s) + "," for s in items):
        if len(line) + 1 + len(item) > WIDTH - 2:
            lines.append(line)
            line = "   "
        line += " " + item
    lines.append(line)
    body = [f"{ln} \\" for ln in lines]
    return [*comment(note), f"#define {name} {{ \\", *body, "}"]


def _section(title: str) -> list[str]:
    return ["", f"/* {'-' * 8} {title} */"]


# ------------------------------------------------------------------------------ the gate
def _gate_texts() -> Iterator[Define]:
    for name, value in vars(errors).items():
        if isinstance(value, errors.Message):
            where = f"{value.ds4_function}, {errors.DS4_SOURCE}:{value.ds4_line}"
            origin = "ds4" if value.origin == errors.DS4 else f"the spec's own ({value.origin})"
            yield Define(f"VS_SPEC_GATE_{name}", c_string(value.fmt),
                         f"{name}: {origin}; {where}")
    for name, value in vars(errors).items():
        if name.endswith("_ERRNO") and isinstance(value, str):
            yield Define(f"VS_SPEC_GATE_{name}", c_string(value), f"{name}: strerror's text")
    yield Define("VS_SPEC_GATE_CRASHED_ERROR", c_string(_crash_error()),
                 "the error a crashed rank reads")


def _crash_error() -> str:
    """The error the spec's crash step leaves a rank with: its first rank set up, then
    crashed."""
    system = gate_system.build({})
    acts = {a.name: a for a in system.actions}
    setup, crash = (acts[name_of(f)] for f in (steps.GateSpec.do_setup,
                                               steps.GateSpec.do_crash))
    s = system.initial()
    for _ in range(4):
        crashing = next(iter(crash.enabled(s)), None)
        if crashing is not None:
            post, _ = crash.apply(s, *crashing)
            return post.ranks[crashing[0]].error
        s, _ = setup.apply(s, *next(iter(setup.enabled(s))))
    raise RuntimeError("the gate spec's crash step was never enabled after setup")


def _drain_poll() -> Define:
    """The drain's poll size, a linear function of the window in the spec: checked so at a
    few windows, written as a macro of the window."""
    def at(window: int) -> int:
        cfg = gate_params.make_config(check_values(gate_params.PARAMS, {"window": window}))
        return steps.poll_batch(cfg, state.DRAIN_WAIT)

    slope = at(2) - at(1)
    base = at(1) - slope
    for w in (3, 16, 1000):
        if at(w) != slope * w + base:
            raise RuntimeError(f"the drain's poll size is not linear in the window at {w}")
    return Define("VS_SPEC_GATE_DRAIN_POLL_BATCH(window)", f"({slope} * (window) + {base})",
                  "a drain's wait (RECV_WINDOW*2+1 in ds4)")


def _gate_lines() -> list[str]:
    out = _section("the gate: texts (spec/gate/errors.py, printf formats)")
    for d in _gate_texts():
        out += _render_define(d)
    out += _section("the gate: names, in the C engine's enum order")
    out += _initializer("VS_SPEC_GATE_PHASE_NAMES", native_gate.PHASES,
                        "the phases (spec/gate/state.py), in vs_gate_phase order")
    out += _render_define(Define("VS_SPEC_GATE_N_PHASES", str(len(native_gate.PHASES))))
    vector = sorted(constants.VECTOR_BUFFERS, key=native_gate.BUFS.index)
    out += _initializer("VS_SPEC_GATE_BUF_NAMES", native_gate.BUFS,
                        "the registered regions a work request addresses, in vs_gate_buf "
                        f"order; laid out a vector per slot: {', '.join(vector)} "
                        "(spec/gate/constants.py VECTOR_BUFFERS), the others a chunk per slot")
    out += _render_define(Define("VS_SPEC_GATE_N_BUFS", str(len(native_gate.BUFS))))
    out += _section("the gate: poll sizes (spec/gate/constants.py), ibv_wc entries per poll")
    for d in (Define("VS_SPEC_GATE_POLL_BATCH", c_unsigned(constants.POLL_BATCH),
                     "a decode gate's wait and a verify block's"),
              Define("VS_SPEC_GATE_BIG_POLL_BATCH", c_unsigned(constants.BIG_POLL_BATCH),
                     "a big-gate window's"),
              _drain_poll()):
        out += _render_define(d)
    out += _section("the gate: wire constants (spec/gate/wire.py, spec/gate/state.py)")
    wires = (("TAG_BULK", wire.TAG_BULK), ("TAG_WARM", wire.TAG_WARM),
             ("TAG_BLOCK", wire.TAG_BLOCK), ("TAG_MASK", wire.TAG_MASK))
    for name, value in wires:
        out += _render_define(Define(f"VS_SPEC_GATE_{name}", f"UINT64_C({value:#x})"))
    for name, value in (("WINDOW_BARRIER", state.WINDOW_BARRIER),
                        ("BLOCK_BARRIER", state.BLOCK_BARRIER), ("BIG_MAGIC", state.BIG_MAGIC)):
        out += _render_define(Define(f"VS_SPEC_GATE_{name}", f"{value:#X}u".replace("0X", "0x")))
    out += _render_define(Define("VS_SPEC_GATE_HEADER_MAGIC", f"UINT64_C({state.HEADER_MAGIC:#x})",
                                 "\"DS4B\""))
    out += _render_define(Define("VS_SPEC_GATE_BIG_LAYER", c_unsigned(state.BIG_LAYER)))
    out += _render_define(Define("VS_SPEC_GATE_WC_SUCCESS",
                                 c_int(fabric.WC_STATUS_CODE[fabric.ST_OK]),
                                 "ibv_wc_status of a successful completion"))
    out += _section("the gate: parameters (spec/gate/params.py PARAMS): default, bounds")
    out += _params("GATE", gate_params.PARAMS, c_unsigned)
    return out


def _params(proto: str, table: Iterable[ParamSpec], write: Any) -> list[str]:
    out: list[str] = []
    for p in table:
        if p.type is not int:
            continue
        stem = f"VS_SPEC_{proto}_{p.name.upper()}"
        out += _render_define(Define(f"{stem}_DEFAULT", write(p.default), p.doc))
        for suffix, bound in (("MIN", p.lo), ("MAX", p.hi)):
            if bound is not None:
                out += _render_define(Define(f"{stem}_{suffix}", write(bound)))
    return out


# ------------------------------------------------------------------------------ tag matching
def _probe_text(raise_it: Any) -> str:
    """The text of the spec's refusal ``raise_it`` makes for the id _PROBE_ID, with a %d where
    the id stands."""
    try:
        raise_it(_PROBE_ID)
    except lists.TagMatchError as e:
        text = str(e)
    else:
        raise RuntimeError(f"{raise_it.__name__} did not refuse")
    if text.count(str(_PROBE_ID)) != 1 or "%" in text:
        raise RuntimeError(f"cannot tell the id in the spec's text {text!r}")
    return text.replace(str(_PROBE_ID), "%d")


def _arrives_twice(mid: int) -> None:
    m = lists.Msg(mid, 0, 0, 0, 1)
    e, _ = lists.arrive(lists.Engine((), ()), m)
    lists.arrive(e, m)


def _cancelled_twice(rid: int) -> None:
    st = evolve(offload.Offload(1), posted=((lists.Recv(rid, 0, 0, 0, 1), offload.HW_CANCEL),))
    offload.sw_cancel(st, rid)


def _tagmatch_lines() -> list[str]:
    out = _section("tag matching: values (spec/tagmatch/)")
    values = (("ANY", lists.ANY, "ANY_SOURCE, ANY_TAG"),
              ("PENDING", tag_state.PENDING, "a receive's status: pending"),
              ("CANCELLED", tag_state.CANCELLED, "... cancelled (>= 0: the matched message)"),
              ("DONE_OK", tag_state.OK, "a receive's completion: whole"),
              ("TRUNCATED", tag_state.TRUNCATED, "... truncated"),
              ("STAGE_IDLE", tag_state.IDLE, "a message's rendezvous stage"),
              ("STAGE_NEED_READ", tag_state.NEED_READ, ""),
              ("STAGE_READING", tag_state.READING, ""),
              ("STAGE_READ_DONE", tag_state.READ_DONE, ""),
              ("STAGE_FIN_SENT", tag_state.FIN_SENT, ""),
              ("STAGE_FIN_EARLY", tag_state.FIN_EARLY, "(fin-before-read's stage)"),
              ("SW", offload.SW, "where a pending receive lives with offload: software"),
              ("HW", offload.HW, "... the NIC's list"),
              ("HW_CANCEL", offload.HW_CANCEL, "... the NIC's list, a cancel on its way"))
    for name, value, note in values:
        out += _render_define(Define(f"VS_SPEC_TAGMATCH_{name}", c_int(value), note))
    out += _section("tag matching: names, in the C engine's enum order")
    for name, items, note in (
            ("KIND_NAMES", native_tagmatch.KIND_NAMES, "message kinds"),
            ("OP_NAMES", native_tagmatch.OP_KINDS, "the ops software sends the NIC"),
            ("CQE_NAMES", native_tagmatch.CQE_KINDS, "the NIC's completions")):
        out += _initializer(f"VS_SPEC_TAGMATCH_{name}", items, note)
    out += _section("tag matching: texts (printf formats of the id)")
    for name, raise_it, note in (
            ("ALREADY_ARRIVED", _arrives_twice, "a message delivered twice (lists.arrive)"),
            ("ALREADY_CANCELLING", _cancelled_twice,
             "a second cancel of a receive the NIC is cancelling (offload.sw_cancel)")):
        out += _render_define(Define(f"VS_SPEC_TAGMATCH_{name}",
                                     c_string(_probe_text(raise_it)), note))
    out += _section("tag matching: parameters (spec/tagmatch/system.py PARAMS)")
    out += _params("TAGMATCH", tag_system.PARAMS, c_int)
    return out


# ------------------------------------------------------------------------------ the header
def render() -> str:
    """The header's text."""
    lines = [
        "/* The spec's texts and constants for the C code: GENERATED, do not edit.",
        " *",
        f" * Written by `{COMMAND}` from the spec's tables",
        " * (refimpl/bindings/gen_header.py says which); a test checks it is current. */",
        "#ifndef VS_SPEC_CONSTANTS_H",
        "#define VS_SPEC_CONSTANTS_H",
        "",
        "#include <stdint.h>",
        *_gate_lines(),
        *_tagmatch_lines(),
        "",
        "#endif",
    ]
    names = [ln.split()[1].split("(")[0] for ln in lines if ln.startswith("#define ")]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RuntimeError(f"macros defined twice: {', '.join(twice)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="compare instead of writing: exit 1 where the header is not current")
    p.add_argument("--output", type=Path, default=HEADER, help=f"default {HEADER}")
    args = p.parse_args(argv)
    text = render()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is not current: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
