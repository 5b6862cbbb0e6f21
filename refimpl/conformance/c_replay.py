"""The native engines held to the spec through their C ABI: ITF traces replayed by the C
drivers of ``native/replay/`` (``verbspec conform --impl native --c-driver``).

A trace's moves are re-run on the spec as the conformance harness runs them (its
``recorded`` step chooser); for each step the harness's own ``call_of`` names the engine call
and its expected emission and views (``emission`` and the spec's rank views for the gate,
``expected`` and ``spec_view`` for tag matching) are written in canonical text, one script
line per step (native/replay/replay.h describes the format). A driver, compiled here from the
shipped sources with ``-Wall -Wextra -Werror``, makes each call through the engine's header,
formats what the engine emitted in the same text and stops at the first difference, naming
the step, the action and the field. Among a driver's extra flags, ``-DVS_MUTANT=N`` links
mutant N of the engine instead (its patch applied to a copy of the engine's source:
``refimpl/conformance/mutants.py``).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verbspec import native
from verbspec.refimpl.bindings.cprogram import BuildError, compile_c
from verbspec.refimpl.bindings.native_gate import config_values as gate_config_values
from verbspec.refimpl.conformance import gate as gate_conf
from verbspec.refimpl.conformance import mutants
from verbspec.refimpl.conformance import tagmatch as tag_conf
from verbspec.refimpl.conformance.gate import CONFORMANCE, Run, recorded
from verbspec.spec import protocols
from verbspec.spec.itf import TraceFormatError
from verbspec.spec.lts import Trace

# one spec step: (index, action, arguments, state before, state after, observation)
Step = tuple[int, str, tuple, Any, Any, Any]

REPLAY = native.HERE / "replay"
CFLAGS = ("-std=c11", "-O1", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror")
# the protocols with a driver: native/replay/PROTOCOL_replay.c, over the protocol's engine
ENGINES = ("gate", "tagmatch")
# a driver flag that links a mutant of the engine
MUTANT_FLAG = re.compile(r"-DVS_MUTANT=(\d+)")
# rank 1's own verify-window switch in a replay's config line: 0 rank 0's, 1 on, 2 off
RANK1_SWITCH = {"same": 0, "on": 1, "off": 2}
TAG_CONFIG = ("senders", "messages", "tags", "comms", "max_bytes", "eager_limit", "capacity")
AGREED, DIFFERS, MALFORMED = 0, 1, 2       # a driver's exit codes (replay.h)


class DriverError(RuntimeError):
    """A driver could not be built, or failed other than by agreeing or differing."""


@dataclass(frozen=True)
class Replayed:
    """One trace replayed through a driver."""

    protocol: str
    steps: int                  # steps of the trace the driver ran and agreed on
    mismatch: str | None        # the driver's report of the first difference


# ---------------------------------------------------------------------- canonical text
def escaped(s: str) -> str:
    """Free text as the drivers write it: '\\' and control bytes as \\xHH."""
    return "".join(f"\\x{b:02x}" if b == 0x5C or b < 0x20 or b == 0x7F else chr(b)
                   for b in s.encode()).encode("latin-1").decode()


def _scalar(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return escaped(v)
    raise TypeError(f"no canonical text for {type(v).__name__} {v!r}")


def _item(v: Any) -> str:
    """One item of a list: a scalar, or a record's or tuple's parts joined by ':'."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = tuple(getattr(v, f.name) for f in dataclasses.fields(v))
    if isinstance(v, tuple):
        return ":".join(map(_scalar, v))
    return _scalar(v)


def _list(vs: Sequence[Any]) -> str:
    return ",".join(map(_item, vs))


def _line(step: int, action: str, call: Sequence[Any], fields: Sequence[tuple[str, str]]
          ) -> str:
    head = " ".join(map(str, (step, action, *call)))
    return "\t".join((head, *(f"{name}={value}" for name, value in fields))) + "\n"


# ---------------------------------------------------------------------- the gate
def _gate_call(call: gate_conf.Call | None) -> list[Any]:
    """The call's words. ``post_failed R POSTED`` is two engine calls, as the harness makes
    them (advance, then post_failed): the driver compares what they emitted together, the
    step's receives and sends cut to the POSTED that stay up (receives first) and
    post_failed's result, against the spec's observation."""
    if call is None:
        return ["none"]
    words: list[Any] = [call.method, call.rank]
    if call.method == "tcp_read":
        item = call.args[0]
        words += [item.kind, item.value]
        if item.kind in ("header", "batch"):
            words += [item.chunks, item.depth]
        elif item.kind == "block":
            words += [item.chunks]
    elif call.method == "completions":
        assert call.poll is not None
        words += [*call.poll, *(f"{c.opcode}:{c.status}:{c.wr_id}:{c.byte_len}"
                                for c in call.args[0])]
    else:
        words += call.args
    return words


def _gate_fields(obs: Any, acted: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if acted:
        for (_, attr), (_, value) in zip(gate_conf.EMISSION, gate_conf.emission(obs),
                                         strict=True):
            if attr == "result":
                out.append((attr, escaped(value)))
            elif attr == "log":
                out.append((attr, str(len(value))))
                out += [(f"log.{i}", escaped(t)) for i, t in enumerate(value)]
            else:
                out.append((attr, _list(value)))
    for r, view in enumerate(obs.views):
        out += [(f"r{r}.{f}", _scalar(getattr(view, f))) for f in gate_conf.VIEW_FIELDS]
    return out


def _gate_script(system: Any, steps: Iterator[Step]) -> Iterator[str]:
    cfg = system.params
    grants = system.spec.rq_grant
    yield "verbspec-replay gate\n"
    yield " ".join(["config", *(f"{f}={v}" for f, v in gate_config_values(cfg).items()),
                    f"grant0={grants[0]}", f"grant1={grants[1]}",
                    f"rank1_max_msg={cfg.rank1_max_msg}",
                    f"rank1_window={cfg.rank1_window}",
                    f"rank1_block_rows={cfg.rank1_block_rows}",
                    f"rank1_verify_window_off={RANK1_SWITCH[cfg.rank1_verify_window]}"]) + "\n"
    for i, name, args, pre, _, obs in steps:
        call = gate_conf.call_of(pre, name, args, obs)
        yield _line(i, name, _gate_call(call), _gate_fields(obs, call is not None))


# ---------------------------------------------------------------------- tag matching
def _tag_script(system: Any, steps: Iterator[Step]) -> Iterator[str]:
    p = system.params
    yield "verbspec-replay tag\n"
    yield " ".join(["config", *(f"{f}={getattr(p, f)}" for f in TAG_CONFIG)]) + "\n"
    for i, name, args, pre, post, obs in steps:
        method, call_args = tag_conf.call_of(system, pre, name, args)
        words: list[Any] = [method]
        for a in call_args:
            words += list(_item(a).split(":")) if dataclasses.is_dataclass(a) else [a]
        want = tag_conf.expected(system, pre, name, args, post, obs)
        fields = [(f, _list(sorted(getattr(want, f)) if f in tag_conf.UNORDERED
                            else getattr(want, f))) for f in tag_conf.EMITTED_FIELDS]
        view = tag_conf.spec_view(system, post)
        fields += [(f"view.{f}", _list(getattr(view, f))) for f in tag_conf.VIEW_FIELDS]
        yield _line(i, name, words, fields)


# ---------------------------------------------------------------------- scripts
def spec_steps(system: Any, moves: Sequence[tuple[str, dict[str, Any]]]) -> Iterator[Step]:
    """The moves re-run on the spec with the harness's step chooser: (index, action, args,
    state before, state after, observation); ValueError naming the first move that the spec
    does not have enabled."""
    choose = recorded(system, moves)
    s, i = system.initial(), 1
    while (move := choose(s, i)) is not None:
        a, args = move
        post, obs = a.apply(s, *args)
        yield i, a.name, args, s, post, obs
        s, i = post, i + 1


def trace_steps(system: Any, trace: Trace) -> Iterator[Step]:
    """The steps of a trace that a harness's run recorded, as :func:`spec_steps` gives them
    (each step's state before is the one the step before recorded)."""
    params = {a.name: a.params for a in system.actions}
    for i in range(1, len(trace.steps)):
        step = trace.steps[i]
        args = tuple(step.args[p] for p in params[step.action])
        yield i, step.action, args, trace.steps[i - 1].state, step.state, step.obs


def script(protocol: str, system: Any, steps: Iterator[Step]) -> str:
    """The replay script of spec steps on ``system`` (of ``protocol``); ValueError naming
    the first step the spec does not take."""
    if protocol not in ENGINES:
        raise ValueError(f"no C driver for protocol {protocol!r}: expected one of "
                         f"{', '.join(ENGINES)}")
    lines = _gate_script(system, steps) if protocol == "gate" else _tag_script(system, steps)
    return "".join(lines)


# ---------------------------------------------------------------------- drivers
def split_flags(flags: Sequence[str]) -> tuple[int | None, tuple[str, ...]]:
    """The mutant a driver's flags ask for (``-DVS_MUTANT=N``; None: the engine as shipped)
    and the compiler's flags besides."""
    found = [int(m[1]) for f in flags if (m := MUTANT_FLAG.fullmatch(f))]
    if len(found) > 1:
        raise DriverError(f"more than one mutant asked for: {', '.join(map(str, found))}")
    return (found[0] if found else None,
            tuple(f for f in flags if not MUTANT_FLAG.fullmatch(f)))


def build_driver(protocol: str, out: Path, flags: Sequence[str] = (),
                 mutant: int | None = None) -> Path:
    """Compile the replay driver of ``protocol`` (gate | tagmatch) into ``out`` with CFLAGS
    and ``flags`` (e.g. sanitizers), over the protocol's engine or, with ``mutant``, over that
    mutant of it; DriverError with the compiler's message where it does not build."""
    eng = native.engine(protocol)
    engine_source = eng.source
    if mutant is not None:
        try:
            engine_source = mutants.write_patched(mutants.mutant(protocol, mutant), out.parent)
        except mutants.PatchError as e:
            raise DriverError(str(e)) from None
    sources = (REPLAY / f"{protocol}_replay.c", REPLAY / "replay.c", engine_source)
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        raise DriverError(f"the {protocol} replay driver's sources are missing: "
                          f"{', '.join(missing)}")
    try:
        done = compile_c(out, sources, (*CFLAGS, *flags), (eng.folder, REPLAY))
    except BuildError as e:
        raise DriverError(str(e)) from None
    if done.returncode != 0:
        raise DriverError(f"the {protocol} replay driver did not compile:\n"
                          f"{done.stderr.strip()}")
    return out


class Drivers:
    """Replay drivers built on first use into a temporary directory, removed by close()
    (or on leaving a with block); ``flags`` are the compiler's, ``-DVS_MUTANT=N`` among them
    linking that mutant of each protocol's engine."""

    def __init__(self, flags: Sequence[str] = ()):
        self.mutant, self.flags = split_flags(flags)
        self._tmp = tempfile.TemporaryDirectory(prefix="verbspec-replay-")
        self.dir = Path(self._tmp.name)
        self._built: dict[str, Path] = {}
        self._scripts = 0

    def __enter__(self) -> Drivers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._tmp.cleanup()

    def driver(self, protocol: str) -> Path:
        if protocol not in self._built:
            out = self.dir / protocol / f"{protocol}_replay"
            out.parent.mkdir(exist_ok=True)
            self._built[protocol] = build_driver(protocol, out, self.flags, self.mutant)
        return self._built[protocol]

    def run(self, protocol: str, text: str) -> Replayed:
        """A script through the protocol's driver."""
        driver = self.driver(protocol)
        self._scripts += 1
        path = self.dir / f"script{self._scripts}.txt"
        path.write_text(text, encoding="utf-8")
        try:
            done = subprocess.run([str(driver), str(path)], capture_output=True, text=True)
        finally:
            path.unlink()
        out = done.stdout.strip()
        if done.returncode == AGREED and out.startswith("agreed on "):
            return Replayed(protocol, int(out.split()[2]), None)
        if done.returncode == DIFFERS and out.startswith("step "):
            return Replayed(protocol, int(out.split()[1]) - 1, out)
        raise DriverError(f"the {protocol} replay driver failed (exit "
                          f"{done.returncode}): {done.stderr.strip() or out}")

    def replay(self, protocol: str, system: Any,
               moves: Sequence[tuple[str, dict[str, Any]]]) -> Replayed:
        """A trace's moves re-run on the spec, through the protocol's driver; ValueError
        naming the first move the spec does not have enabled."""
        return self.run(protocol, script(protocol, system, spec_steps(system, moves)))

    def replay_file(self, path: Path) -> Replayed:
        """An ITF trace file through the driver of its protocol, on the spec built from its
        own params and variants; TraceFormatError naming what is wrong with the file."""
        from verbspec.proofs.traces import read_moves

        try:
            meta, moves = read_moves(path)
        except TraceFormatError as e:
            raise TraceFormatError(e if str(e).startswith(str(path)) else f"{path}: {e}"
                                   ) from None
        proto = meta.get("protocol")
        if proto not in protocols.MODULES:
            raise TraceFormatError(f"{path}: $.#meta.protocol: unknown protocol {proto!r}")
        system = protocols.load(proto).build(meta.get("params", {}),
                                             tuple(meta.get("variants", ())))
        try:
            text = script(proto, system, spec_steps(system, moves))
        except ValueError as e:
            raise TraceFormatError(f"{path}: {e}") from None
        return self.run(proto, text)


# ---------------------------------------------------------------------- random runs
@dataclass
class Tally:
    """Traces replayed through the drivers: the ``c_driver`` part of conform's report."""

    traces: int = 0
    steps: int = 0
    seconds: float = 0.0
    mismatch: str | None = None
    trace: str | None = None            # the mismatching trace's file, where one was kept
    protocols: dict[str, int] = field(default_factory=dict)

    def add(self, rep: Replayed, path: str | None = None) -> None:
        self.traces += 1
        self.steps += rep.steps
        self.protocols[rep.protocol] = self.protocols.get(rep.protocol, 0) + 1
        if rep.mismatch is not None and self.mismatch is None:
            self.mismatch, self.trace = rep.mismatch, path

    def as_json(self) -> dict[str, Any]:
        return {"traces": self.traces, "steps": self.steps,
                "mismatches": int(self.mismatch is not None),
                "seconds": round(self.seconds, 3), "mismatch": self.mismatch,
                "trace": self.trace}


def recorder(drivers: Drivers, system: Any, tally: Tally, keep: Path | None = None
             ) -> Callable[[Run], bool]:
    """A callback for conform's runs: each run's recorded trace replayed through the driver
    (its steps as the run took them on the spec, not taken again), and where the driver
    differs, the trace written as an ITF file in ``keep``. It returns False once the driver
    differed, to end the runs."""
    from verbspec.proofs.traces import trace_name, write_trace

    protocol = system.protocol

    def each(run: Run) -> bool:
        assert run.trace is not None
        t0 = time.perf_counter()
        rep = drivers.run(protocol, script(protocol, system, trace_steps(system, run.trace)))
        kept = None
        if rep.mismatch is not None and keep is not None:
            name = trace_name(protocol, "c-driver", CONFORMANCE, run.trace.variants,
                              run.trace.params)
            kept = str(write_trace(run.trace, Path(keep) / name))
        tally.add(rep, kept)
        tally.seconds += time.perf_counter() - t0
        return rep.mismatch is None

    return each
