"""Every subcommand under malformed input: JSON values of every type in every place of a trace
or scenario, bad encodings, deep nesting, huge numbers, unusable paths and garbage arguments.
Each run must end with a verdict or a refusal (exit 0, 1, 2 or 3), never an internal error and
never a traceback. The number of inputs tried per subcommand is printed."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verbspec.refimpl.cli.main import main
from verbspec.spec.itf import trace_to_itf
from verbspec.spec.lts import run_step, start_trace
from verbspec.spec.tagmatch import system as ts

OK_CODES = {0, 1, 2, 3}

# ------------------------------------------------------------------------------ strategies
scalars = (st.none() | st.booleans() | st.integers()
           | st.integers(min_value=10**20, max_value=10**60) | st.floats()
           | st.text(max_size=12) | st.sampled_from(["any", "cancel", "arrive", "post_recv",
                                                     "#bigint", "#set", "#map", "#tup"]))
json_values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4)
                   | st.dictionaries(st.text(max_size=6) | st.sampled_from(
                       ["#bigint", "#set", "#map", "#tup", "op", "id"]), inner, max_size=4)),
    max_leaves=12)


def deep(n: int) -> str:
    return "[" * n + "]" * n


# raw file contents that are not (good) JSON
raw_bytes = st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=16).map(lambda b: b'{"events": [' + b + b"\xff\xfe]}"),
    st.integers(min_value=1, max_value=200_000).map(lambda n: deep(n).encode()),
    st.integers(min_value=1, max_value=200_000).map(
        lambda n: ('{"a":' * n + "1" + "}" * n).encode()),
    st.integers(min_value=4000, max_value=20_000).map(lambda n: ("9" * n).encode()),
    st.sampled_from([b"NaN", b"-Infinity", b"1e999999", b"", b"\xef\xbb\xbf{}", b"[1,]"]),
)


def bad_paths(tmp: Path) -> st.SearchStrategy[str]:
    """Paths an output or input cannot use, and a few it can."""
    (tmp / "afile").write_text("")
    return st.sampled_from([
        str(tmp / "afile" / "x"), str(tmp / "afile"), "/proc/verbspec/x", str(tmp),
        str(tmp / ("x" * 300)), str(tmp / "nul\x00byte"), str(tmp / "\udcff\udcfe"),
        str(tmp / "new" / "deeper"), "", str(tmp / "-"), str(tmp / "ok.out"),
    ])


def paths_of(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths_of(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths_of(v, (*prefix, i))


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    node = copy
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return copy


def mutations(doc: Any, focus: Sequence[tuple] = ()) -> st.SearchStrategy[bytes]:
    """The document with one place replaced by any JSON value, one key dropped, or its text
    replaced by raw bytes. Places in ``focus`` (those the reader interprets rather than
    passes along) are drawn as often as the shallow ones, and those as often as the rest."""
    places = list(paths_of(doc))

    def drop(path: tuple) -> Any:
        copy = json.loads(json.dumps(doc))
        node = copy
        for p in path[:-1]:
            node = node[p]
        if path:
            del node[path[-1]]
        return copy

    # places near the root (a trace's #meta, a state's variables, an event's fields) are
    # drawn as often as all the others together: a trace has hundreds of deep places
    shallow = [p for p in places if len(p) <= 3]
    place = st.sampled_from(shallow) | st.sampled_from(places)
    if focus:
        place = st.sampled_from(list(focus)) | place
    replace = st.tuples(place, json_values).map(lambda pv: replaced(doc, *pv))
    as_text = st.one_of(replace, replace, replace, place.filter(bool).map(drop)).map(
        lambda d: json.dumps(d).encode())
    return as_text | as_text | raw_bytes


# ------------------------------------------------------------------------------ harness
def run(argv: Sequence[str], stdin: bytes = b"") -> tuple[int, str]:
    """``main(argv)`` in this process: its exit code and stderr (stdout discarded)."""
    err = io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        sys.stdin = old_stdin
    return code, err.getvalue()


def fuzz(name: str, strategy: st.SearchStrategy, call: Callable[[Any], tuple[int, str]],
         examples: int, capsys, record_property) -> None:
    tried = 0

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def case(value: Any) -> None:
        nonlocal tried
        tried += 1
        code, err = call(value)
        assert code in OK_CODES, (value, code, err)
        assert "Traceback" not in err and "internal error" not in err, (value, err)

    case()
    record_property(f"inputs_{name}", tried)
    with capsys.disabled():
        print(f"\nfuzz {name}: {tried} inputs, exit codes all in 0..3, tracebacks: 0")
    assert tried >= min(examples, 10)


def clean_trace_doc() -> dict:
    system = ts.build()
    trace = start_trace(system)
    for _ in range(3):
        act, args = next((a, x) for a in system.actions for x in a.enabled(trace.steps[-1].state))
        run_step(system, trace, act, args)
    return trace_to_itf(trace)


SCENARIO = {"events": [
    {"op": "post_recv", "id": "r", "comm": 0, "src": "any", "tag": 1, "bytes": 4},
    {"op": "arrive", "id": "m", "comm": 0, "src": 2, "tag": 1, "bytes": 8},
    {"op": "post_recv", "id": "s", "comm": 1, "src": 0, "tag": "any", "bytes": 4},
    {"op": "cancel", "id": "s"}], "eager_limit": 4, "offload": {"capacity": 1}}

# a larger run for CI's slow tier; the default keeps the suite fast
SCALE = 1


@pytest.fixture(autouse=True)
def _outputs_in_tmp(tmp_path, monkeypatch):
    """Relative output paths the fuzzer draws ("-", "") land in a temporary directory, never in
    the working tree."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(params=[pytest.param(1, id="fast"),
                        pytest.param(5, id="slow", marks=pytest.mark.slow)])
def scale(request) -> int:
    return request.param


# ------------------------------------------------------------------------------ subcommands
def test_fuzz_match(tmp_path, scale, capsys, record_property):
    f = tmp_path / "s.json"

    def call(case: tuple[bytes, bool]) -> tuple[int, str]:
        data, use_stdin = case
        if use_stdin:
            return run(["match", "-"], stdin=data)
        f.write_bytes(data)
        return run(["match", str(f)])

    focus = [("events", i, k) for i in range(4) for k in ("op", "id")] + [
        ("events",), ("offload",), ("eager_limit",)]
    fuzz("match", st.tuples(mutations(SCENARIO, focus), st.booleans()), call, 300 * scale,
         capsys, record_property)


@pytest.mark.parametrize("command", ["replay", "trace"])
def test_fuzz_trace_files(command, tmp_path, scale, capsys, record_property):
    f = tmp_path / "t.itf.json"
    doc = clean_trace_doc()
    doc["#meta"]["violation"] = "truncation_reported"    # recorded, never reproduced
    out = st.just([]) if command == "replay" else st.lists(
        st.sampled_from(["--html"]) | bad_paths(tmp_path).map(lambda p: f"--svg={p}"),
        max_size=2)

    def call(case: tuple[bytes, list[str]]) -> tuple[int, str]:
        data, extra = case
        f.write_bytes(data)
        return run([command, str(f), *extra])

    focus = [("#meta", k) for k in ("variants", "params", "protocol", "violation")] + [
        ("states", 1, k) for k in ("args", "action", "#meta")] + [("states",), ("#meta",)]
    fuzz(command, st.tuples(mutations(doc, focus), out), call, 300 * scale, capsys,
         record_property)


def test_fuzz_trace_input_paths(tmp_path, capsys, record_property):
    fuzz("replay/trace paths", st.tuples(st.sampled_from(["replay", "trace"]),
                                         bad_paths(tmp_path)),
         lambda c: run(list(c)), 40, capsys, record_property)


TOKENS = st.sampled_from(["--protocol", "gate", "tagmatch", "all", "--json", "--method",
                          "explore", "bmc", "--param", "--variant", "no-barrier", "-x", "--",
                          "--examples", "0", "-1", "1e9", "\udcff", "", "=", "--help"])


@pytest.mark.parametrize("command", ["params", "variants", "invariants"])
def test_fuzz_listings(command, scale, capsys, record_property):
    fuzz(command, st.lists(TOKENS | st.text(max_size=8), max_size=4),
         lambda argv: run([command, *argv]), 60 * scale, capsys, record_property)


def param_args() -> st.SearchStrategy[list[str]]:
    """``--param`` and ``--variant`` arguments: known and unknown names, values of every
    shape (numbers too large, text, JSON), for a protocol whose parameters are bounded."""
    names = st.sampled_from([p.name for p in ts.PARAMS]) | st.text(max_size=6)
    values = (st.integers(min_value=-5, max_value=6).map(str)
              | st.integers(min_value=10**30, max_value=10**400).map(str)
              | json_values.map(json.dumps) | st.text(max_size=8)
              | st.sampled_from(["0x3", "0b1", "1_0", " 2 ", "", "9" * 5000]))
    param = st.tuples(names, st.sampled_from(["=", "", "=="]), values).map(
        lambda t: ["--param", "".join(t)])
    variant = (st.sampled_from([v.name for v in ts.VARIANTS]) | st.text(max_size=8)).map(
        lambda v: ["--variant", v])
    return st.lists(param | variant, max_size=3).map(lambda xs: [a for x in xs for a in x])


def test_fuzz_check(tmp_path, scale, capsys, record_property):
    budgets = st.lists(st.sampled_from([
        ["--examples", "0"], ["--steps", "-3"], ["--max-states", "0"], ["--depth", "0"],
        ["--walks", "-1"], ["--examples", "9" * 5000], ["--seed", "x"],
        ["--solver-limit", "0"], ["--solver-limit", "1e9"],
        ["--solver-limit", str(2**32)],
        ["--trace-dir", "/proc/verbspec/t"], ["--trace-dir", str(tmp_path / "file")],
        ["--junit", str(tmp_path)], ["--junit", "/proc/verbspec/j.xml"],
        ["--hypothesis-dir", str(tmp_path / "file" / "h")], ["--protocol", "nope"],
    ]), max_size=2).map(lambda xs: [a for x in xs for a in x])
    (tmp_path / "file").write_text("")

    def call(case: tuple[list[str], list[str]]) -> tuple[int, str]:
        params, extra = case
        # tiny budgets: a well-formed configuration runs a few steps of exploration
        return run(["check", "--protocol", "tagmatch", "--method", "explore", "--examples",
                    "1", "--steps", "5", "--quiet", "--trace-dir", str(tmp_path / "t"),
                    *params, *extra])

    fuzz("check", st.tuples(param_args(), budgets), call, 80 * scale, capsys,
         record_property)


def test_fuzz_check_gate_params_refused(scale, capsys, record_property):
    """Gate parameters that are refused before any run (not integers, or below a minimum)."""
    from verbspec.spec.gate import system as gs

    names = st.sampled_from([p.name for p in gs.PARAMS])
    values = (st.text(max_size=8).filter(lambda t: not t.strip().lstrip("-").isdigit())
              | st.integers(min_value=-10**40, max_value=-1).map(str)
              | json_values.map(json.dumps).filter(lambda t: not t.lstrip("-").isdigit()))
    argv = st.tuples(names, values).map(lambda t: ["--param", f"{t[0]}={t[1]}"])

    def call(args: list[str]) -> tuple[int, str]:
        code, err = run(["check", "--protocol", "gate", "--quiet", *args])
        assert code == 3, (args, err)
        return code, err

    fuzz("check (gate params)", argv, call, 60 * scale, capsys, record_property)


def test_fuzz_envelope(tmp_path, scale, capsys, record_property):
    """Window bounds outside 2..2^20 and unusable trace directories (never a full run)."""
    windows = (st.integers(max_value=1) | st.integers(min_value=2**20 + 1)).map(str) | \
        st.text(max_size=6).filter(lambda t: not t.strip().lstrip("-+").isdigit())
    argv = st.one_of(
        windows.map(lambda w: ["--window-max", w, "--trace-dir", str(tmp_path / "t")]),
        st.tuples(windows | st.just("8"), bad_paths(tmp_path).filter(
            lambda p: p.startswith("/proc") or "afile" in p or "\x00" in p)).map(
            lambda t: ["--window-max", t[0], "--trace-dir", t[1]]),
    )

    def call(args: list[str]) -> tuple[int, str]:
        code, err = run(["envelope", "--quiet", *args])
        assert code == 3, (args, err)
        return code, err

    fuzz("envelope", argv, call, 60 * scale, capsys, record_property)
