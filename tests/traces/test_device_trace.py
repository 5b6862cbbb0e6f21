"""Device traces: gate and tagged runs on the sim transport recorded, validated against the
spec, and rejected where a recorded step is tampered with."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from verbspec.refimpl.cli import main as cli
from verbspec.refimpl.cli import registry, trace
from verbspec.refimpl.engines.gate_variants import NoBarrier
from verbspec.refimpl.library.gate_channel import GateChannel, gate_config, regions_for
from verbspec.refimpl.library.sim_pair import close_channel, run_pair, run_ranks
from verbspec.refimpl.library.tagmatch_endpoint import (
    ANY_SOURCE,
    ANY_TAG,
    TaggedConfig,
    _rndv_region,
    run_tagged,
)
from verbspec.refimpl.traces.read import TraceInputError, read_pair
from verbspec.refimpl.traces.validate_gate import validate_gate
from verbspec.refimpl.traces.validate_tagmatch import validate_tagged
from verbspec.refimpl.transport import device_trace
from verbspec.refimpl.transport.side_channel import SideChannel
from verbspec.refimpl.transport.sim_device import SimDevice
from verbspec.spec.gate.wire import TAG_BULK

# windows of 64 chunks: a big gate of 200 chunks crosses four of them
SMALL = {"big_depth": 64}


def _gate(ch: GateChannel, seq: int, rank: int) -> None:
    slot = ch.cfg.slot(seq)
    got = ch.exchange(slot // 2, slot % 2, bytes([rank, seq % 256]) * (ch.vector_bytes // 2))
    assert got[:2] == bytes([1 - rank, seq % 256])


def _gates_big_gates(ch: GateChannel, rank: int, n: int) -> str:
    """n decode gates, a drain, a big gate, n // 4 more gates (re-armed)."""
    for seq in range(1, n + 1):
        _gate(ch, seq, rank)
    ch.drain()
    data = bytes(range(256)) * (200 * ch.big_chunk_bytes // 256)
    assert ch.big_exchange(data) == data
    for seq in range(n + 1, n + n // 4 + 1):
        _gate(ch, seq, rank)
    return "ok"


def _record(tmp: Path, work, args, cfg, **kw) -> list:
    old = os.environ.get(device_trace.TRACE_ENV)
    os.environ[device_trace.TRACE_ENV] = str(tmp)
    try:
        return run_ranks(cfg, work, args, **kw)
    finally:
        if old is None:
            del os.environ[device_trace.TRACE_ENV]
        else:
            os.environ[device_trace.TRACE_ENV] = old


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gate-run")
    out = _record(d, _gates_big_gates, (300, 300), gate_config(SMALL))
    assert [o.error for o in out] == ["", ""]
    return d / device_trace.GATE


def _lines(d: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (d / f"rank{rank}.jsonl").read_text().splitlines()]


def _write(d: Path, rank: int, lines: list, other: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rank{rank}.jsonl").write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    (d / f"rank{1 - rank}.jsonl").write_text((other / f"rank{1 - rank}.jsonl").read_text())
    return d


# ---------------------------------------------------------------------- valid runs
def test_gate_run_is_recorded_and_validated(gate_run):
    r0 = _lines(gate_run, 0)
    assert r0[0]["ev"] == "begin" and r0[0]["protocol"] == "gate" and r0[-1] == {"ev": "end"}
    assert r0[0]["config"]["big_depth"] == 64 and r0[0]["transport"] == "sim"
    evs = {x["ev"] for x in r0}
    assert {"call", "post_recv", "post_send", "poll", "tcp_write", "tcp_read",
            "result"} <= evs
    rep = validate_gate(read_pair([gate_run]))
    assert rep.ok, rep.message
    assert rep.gates == [375, 375] and rep.big_gates == [1, 1] and rep.drains == [1, 1]
    # a rank's drain (a one-chunk big gate) and four big-gate windows; two armings
    assert rep.actions["big_window_done"] == 10 and rep.actions["arm_post"] == 4
    assert rep.recorded_steps == sum(len(_lines(gate_run, r)) - 1 for r in (0, 1))
    assert rep.spec_steps > rep.recorded_steps


def test_python_engine_run_is_validated(tmp_path):
    out = _record(tmp_path, _gates_big_gates, (40, 40), gate_config(SMALL), engine="python")
    assert [o.error for o in out] == ["", ""]
    assert _lines(tmp_path / device_trace.GATE, 0)[0]["engine"] == "python"
    rep = validate_gate(read_pair([tmp_path / device_trace.GATE]))
    assert rep.ok, rep.message
    assert rep.gates == [50, 50] and rep.drains == [1, 1]


def test_cli_validates_a_run(gate_run, capsys):
    assert cli.main(["trace", "validate", str(gate_run / "rank1.jsonl"),
                     str(gate_run / "rank0.jsonl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["gates"] == [375, 375] and out["rank"] is None


def _tagged_work(ep, rank, n):
    if rank == 0:
        reqs = [ep.isend(bytes([i % 256]) * (100 if i % 3 else 20000), 1, tag=i % 4)
                for i in range(n)]
        return [r.wait().count for r in reqs]
    early = [ep.irecv(50000, 0, 1) for _ in range(3)]
    got = [ep.irecv(50000, ANY_SOURCE, ANY_TAG).wait().tag for _ in range(n - 3)]
    return got + [q.wait().tag for q in early]


@pytest.fixture(scope="module")
def tagged_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tagged-run")
    old = os.environ.get(device_trace.TRACE_ENV)
    os.environ[device_trace.TRACE_ENV] = str(d)
    try:
        out = run_tagged(_tagged_work, (40, 40), TaggedConfig(eager_limit=8192))
    finally:
        if old is None:
            del os.environ[device_trace.TRACE_ENV]
        else:
            os.environ[device_trace.TRACE_ENV] = old
    assert [o.error for o in out] == ["", ""]
    return d / device_trace.TAGGED


def test_tagged_run_is_recorded_and_validated(tagged_run):
    rep = validate_tagged(read_pair([tagged_run]))
    assert rep.ok, rep.message
    assert "rendezvous 14" in rep.detail and "receives completed 40" in rep.detail
    sends = [x for x in _lines(tagged_run, 0) if x["ev"] == "post_send"]
    assert all("hdrs" in x for x in sends)


def test_tagged_status_tampered_is_rejected(tagged_run, tmp_path):
    lines = _lines(tagged_run, 1)
    # the first receive's wait: its tag changed to one its match does not have
    i = next(i for i, x in enumerate(lines) if x["ev"] == "result" and "status" in x)
    lines[i]["status"]["tag"] += 100
    rep = validate_tagged(read_pair([_write(tmp_path / "t", 1, lines, tagged_run)]))
    assert not rep.ok and rep.rank == 1 and rep.line == i + 1
    assert "its MPI match gives" in rep.message


def test_tagged_receive_of_the_wrong_length_is_rejected(tagged_run, tmp_path):
    lines = _lines(tagged_run, 1)
    i = _first(lines, lambda x: x["ev"] == "poll" and any(c[0] == "recv" for c in x["cqes"]))
    next(c for c in lines[i]["cqes"] if c[0] == "recv")[3] -= 1
    rep = validate_tagged(read_pair([_write(tmp_path / "t", 1, lines, tagged_run)]))
    assert not rep.ok and rep.rank == 1 and rep.line == i + 1
    assert "RC delivers whole" in rep.message


def test_tagged_fin_before_read_is_rejected(tagged_run, tmp_path):
    lines = _lines(tagged_run, 1)
    fin, mid = next((i, h["mid"]) for i, x in enumerate(lines) if x["ev"] == "post_send"
                    for h in x["hdrs"] if h and h["kind"] == "fin")
    # the last READ of the FIN's own message (other messages' READs may come between)
    read = max(i for i, x in enumerate(lines[:fin])
               if x["ev"] == "post_read" and x["remote"] == _rndv_region(mid))
    lines.insert(read, lines.pop(fin))      # the FIN posted before the READ it follows
    rep = validate_tagged(read_pair([_write(tmp_path / "t", 1, lines, tagged_run)]))
    assert not rep.ok and rep.rank == 1 and rep.line == read + 1
    assert "before every READ" in rep.message


# ---------------------------------------------------------------------- tampered gate runs
def _first(lines: list[dict], pred) -> int:
    return next(i for i, x in enumerate(lines) if pred(x))


def _reject(gate_run: Path, tmp: Path, rank: int, lines: list, line: int,
            itf: bool = False) -> object:
    d = _write(tmp / "tampered", rank, lines, gate_run)
    rep = validate_gate(read_pair([d]), trace_dir=tmp / "itf" if itf else None)
    assert not rep.ok
    assert (rep.rank, rep.line) == (rank, line), rep.message
    assert rep.message.startswith(f"rank {rank} line {line}:")
    return rep


def test_changed_wr_id_is_rejected(gate_run, tmp_path):
    lines = _lines(gate_run, 1)
    i = _first(lines, lambda x: x["ev"] == "post_send" and x["wrs"][0][0] == 12)
    lines[i]["wrs"][0][0] = 13
    rep = _reject(gate_run, tmp_path, 1, lines, i + 1, itf=True)
    assert "gate_send" in rep.message and rep.itf is not None
    # the ITF prefix replays on the spec
    assert cli.main(["replay", rep.itf]) == 1


def test_removed_completion_is_rejected(gate_run, tmp_path):
    lines = _lines(gate_run, 0)
    i = _first(lines, lambda x: x["ev"] == "poll"
               and sum(c[0] == "recv" for c in x["cqes"]) >= 2)
    first_recv = next(k for k, c in enumerate(lines[i]["cqes"]) if c[0] == "recv")
    del lines[i]["cqes"][first_recv]
    _reject(gate_run, tmp_path, 0, lines, i + 1)


def test_changed_length_is_rejected(gate_run, tmp_path):
    lines = _lines(gate_run, 0)
    i = _first(lines, lambda x: x["ev"] == "poll" and any(c[0] == "recv" for c in x["cqes"]))
    c = next(c for c in lines[i]["cqes"] if c[0] == "recv")
    c[3] -= 1
    _reject(gate_run, tmp_path, 0, lines, i + 1)


def test_watermark_violating_order_is_rejected(gate_run, tmp_path):
    """A gate's tagged last chunk completing before its untagged first chunk: the watermark
    would pass a gate whose slot is not whole."""
    lines = _lines(gate_run, 1)

    def pair(x):
        recvs = [c for c in x["cqes"] if c[0] == "recv"]
        return x["ev"] == "poll" and len(recvs) >= 2 and recvs[0][1] == 0 and recvs[1][1] > 0

    i = _first(lines, lambda x: "cqes" in x and pair(x))
    cq = lines[i]["cqes"]
    a, b = [k for k, c in enumerate(cq) if c[0] == "recv"][:2]
    cq[a], cq[b] = cq[b], cq[a]
    _reject(gate_run, tmp_path, 1, lines, i + 1)


def test_completion_of_a_big_gate_chunk_changed_is_rejected(gate_run, tmp_path):
    lines = _lines(gate_run, 0)
    i = _first(lines, lambda x: x["ev"] == "poll"
               and any(c[0] == "recv" and c[1] & TAG_BULK for c in x["cqes"])
               and len(x["cqes"]) > 4)
    c = next(c for c in lines[i]["cqes"] if c[0] == "recv" and c[1] & TAG_BULK)
    c[1] += 1
    _reject(gate_run, tmp_path, 0, lines, i + 1)


def test_truncated_line_names_rank_and_line(gate_run, tmp_path, capsys):
    lines = (gate_run / "rank1.jsonl").read_text().splitlines()
    lines[9] = lines[9][:len(lines[9]) // 2]
    d = _write(tmp_path / "t", 1, lines, gate_run)
    with pytest.raises(TraceInputError, match="rank 1 line 10: not a JSON line"):
        read_pair([d])
    assert cli.main(["trace", "validate", str(d)]) == 3
    assert "rank 1 line 10" in capsys.readouterr().err


def test_missing_key_and_bad_begin_are_refused(gate_run, tmp_path):
    lines = _lines(gate_run, 0)
    at = next(i for i, x in enumerate(lines) if x["ev"] == "post_recv")
    del lines[at]["wrs"]
    with pytest.raises(TraceInputError,
                       match=f"rank 0 line {at + 1}: a post_recv line without wrs"):
        read_pair([_write(tmp_path / "a", 0, lines, gate_run)])
    lines = _lines(gate_run, 0)
    lines[0]["config"]["window"] = 0
    lines1 = _lines(gate_run, 1)
    lines1[0]["config"]["window"] = 0
    d = _write(tmp_path / "b", 0, lines, gate_run)
    (d / "rank1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines1))
    with pytest.raises(TraceInputError, match="outside what the gate spec can express.*window"):
        validate_gate(read_pair([d]))


# ---------------------------------------------------------------------- errors
def _bad_call(ch: GateChannel, rank: int, n: int) -> str:
    for seq in range(1, n):
        _gate(ch, seq, rank)
    slot = ch.cfg.slot(n)
    layer = slot // 2 + (1 if rank == 0 else 0)     # rank 0 names the wrong layer
    try:
        ch.exchange(layer, slot % 2, bytes(ch.vector_bytes))
    except Exception as e:      # the protocol's refusal, or the peer found gone
        return str(e)
    return "no error"


@pytest.fixture(scope="module")
def error_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("error-run")
    out = _record(d, _bad_call, (20, 20), gate_config({"timeout_ms": 3000}))
    assert out[0].result.startswith("gate order broke"), out
    assert "peer disconnected" in out[1].result, out
    return d / device_trace.GATE


def test_errors_are_spec_steps(error_run):
    rep = validate_gate(read_pair([error_run]))
    assert rep.ok, rep.message
    assert rep.actions["bad_call"] == 1 and rep.actions["peer_gone"] == 1


@pytest.mark.parametrize("rank", [0, 1])
def test_changed_error_text_is_rejected(error_run, tmp_path, rank):
    lines = _lines(error_run, rank)
    i = max(k for k, x in enumerate(lines) if x["ev"] == "result" and not x["ok"])
    lines[i]["error"] = lines[i]["error"].replace("gate", "gates")
    rep = _reject(error_run, tmp_path, rank, lines, i + 1)
    assert "error" in rep.message


# ---------------------------------------------------------------------- a missing barrier
def _no_barrier(pair, rank: int, n: int) -> str:
    cfg = gate_config({})
    wire, sock = pair.connect(rank)
    device = SimDevice(wire, regions_for(cfg), cq_depth=cfg.cq_depth, max_msg=cfg.max_msg,
                       rq_depth=cfg.rq_depth, sq_depth=cfg.sq_depth)
    trace = device_trace.from_env(device_trace.GATE, rank, "sim", "python", cfg)
    ch = GateChannel(cfg, device, SideChannel(sock, 1.0), NoBarrier(cfg, cfg.rq_depth),
                     trace=trace)
    try:
        for seq in range(1, n + 1):
            _gate(ch, seq, rank)
        return "ok"
    except Exception as e:      # a send lost before the peer posted: either outcome is fine
        return str(e)
    finally:
        close_channel(ch)


def test_no_barrier_engine_is_rejected_at_its_first_send(tmp_path):
    """The base spec crosses the barrier after arming: a send right after the window's
    receives is not a spec step, whether or not this run lost a message."""
    old = os.environ.get(device_trace.TRACE_ENV)
    os.environ[device_trace.TRACE_ENV] = str(tmp_path / "nb")
    try:
        run_pair(_no_barrier, (5, 5))
    finally:
        if old is None:
            del os.environ[device_trace.TRACE_ENV]
        else:
            os.environ[device_trace.TRACE_ENV] = old
    rep = validate_gate(read_pair([tmp_path / "nb" / device_trace.GATE]))
    # begin, connect and its result, the gate's call, its receives, then its send
    assert not rep.ok and rep.line == 6
    assert json.loads(rep.event)["ev"] == "post_send"
    assert "barrier_write" in rep.allowed and "tcp_write" in rep.allowed


# ---------------------------------------------------------------------- the CLI
def test_validate_help_documents_every_option():
    text = registry.own_parser(trace.VALIDATE).format_help()
    assert "exit codes:" in text and "4  internal error" in text
    for opt in ("--json", "--trace-dir", "--itf-max-steps", "--strict-completions",
                "--debug"):
        block = text[text.index("\n  " + opt):].split("\n  -")[1]
        assert "(default:" in block, opt


def test_validate_refuses_bad_input(tmp_path, gate_run, capsys):
    assert cli.main(["trace", "validate", str(tmp_path / "none")]) == 3
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["trace", "validate", str(gate_run / "rank0.jsonl")]) == 3
    assert cli.main(["trace", "validate"]) == 3
    assert cli.main(["trace", "validate", str(gate_run), "--itf-max-steps", "-1"]) == 3


@pytest.mark.slow
def test_ten_thousand_gates_validate(tmp_path):
    """10,000 decode gates, a drain, a 12 MiB big gate in windows of 256 chunks, 100 more
    gates."""
    def work(ch, rank, n):
        for seq in range(1, n + 1):
            _gate(ch, seq, rank)
        ch.drain()
        data = bytes(12 * 2**20)
        assert ch.big_exchange(data) == data
        for seq in range(n + 1, n + 101):
            _gate(ch, seq, rank)
        return "ok"

    out = _record(tmp_path, work, (10_000, 10_000), gate_config({}))
    assert [o.error for o in out] == ["", ""]
    rep = validate_gate(read_pair([tmp_path / device_trace.GATE]))
    assert rep.ok, rep.message
    assert rep.gates == [10_100, 10_100] and rep.big_gates == [1, 1] and rep.drains == [1, 1]
    print(f"10,100 gates, 12 MiB big gate: {rep.recorded_steps} recorded steps, "
          f"{rep.spec_steps} spec steps, validated in {rep.seconds:.1f} s")


def _mutate(rng, value):
    """One value replaced by another of a different shape or size."""
    return rng.choice([None, -1, 0, 2**64, 10**30, 1.5, "", "x", "stage", [], {}, True,
                       [[1, "in", 0, 1]], value if not isinstance(value, int) else value + 1])


@pytest.mark.parametrize("run", ["error_run", "tagged_run"])
def test_malformed_traces_are_verdicts_or_refusals(run, request, tmp_path, capsys):
    """Random damage to a valid trace: every answer is valid (0), a violation (1) or refused
    input (3), never an internal error."""
    import random

    error_run = request.getfixturevalue(run)
    rng = random.Random(7)
    base = [_lines(error_run, r) for r in (0, 1)]
    codes = set()
    for n in range(120):
        rank = rng.randrange(2)
        lines = json.loads(json.dumps(base[rank]))
        for _ in range(rng.randrange(1, 3)):
            x = rng.choice(lines)
            key = rng.choice(sorted(x))
            if isinstance(x[key], dict) and x[key] and rng.random() < 0.7:
                sub = rng.choice(sorted(x[key]))
                x[key][sub] = _mutate(rng, x[key][sub])
            elif isinstance(x[key], list) and x[key] and isinstance(x[key][0], list):
                item = rng.choice(x[key])
                j = rng.randrange(len(item))
                item[j] = _mutate(rng, item[j])
            else:
                x[key] = _mutate(rng, x[key])
        d = _write(tmp_path / f"m{n}", rank, lines, error_run)
        code = cli.main(["trace", "validate", str(d), "--trace-dir", str(tmp_path / "itf"),
                         "--itf-max-steps", "0"])
        err = capsys.readouterr().err
        assert code in (0, 1, 3), err
        assert "internal error" not in err
        codes.add(code)
    assert {1, 3} <= codes


def test_no_changed_step_is_accepted(error_run, tmp_path):
    """Soundness, sampled: one number of one recorded step changed by one (a wr_id, an
    offset, a length, a status, a poll's size, a TCP item, a call's argument) is never a
    valid run."""
    import random

    rng = random.Random(11)
    base = [_lines(error_run, r) for r in (0, 1)]
    for n in range(60):
        rank = rng.randrange(2)
        lines = json.loads(json.dumps(base[rank]))
        i = rng.choice([k for k, x in enumerate(lines)
                        if x["ev"] in ("post_recv", "post_send", "poll", "tcp_write",
                                       "tcp_read", "call") and x.get("name") != "close"])
        x = lines[i]
        if x["ev"] in ("post_recv", "post_send", "poll"):
            item = rng.choice(x["wrs" if "wrs" in x else "cqes"])
            j = rng.choice([k for k, v in enumerate(item) if _is_number(v)])
            item[j] += 1
            what = item
        else:
            fields = x["args"] if x["ev"] == "call" else x
            key = rng.choice(sorted(k for k, v in fields.items() if _is_number(v)))
            fields[key] += 1
            what = key
        rep = validate_gate(read_pair([_write(tmp_path / f"c{n}", rank, lines, error_run)]))
        assert not rep.ok, (n, i + 1, what)
        assert rep.rank is not None


def _is_number(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def test_a_run_of_ranks_with_their_own_block_rows_is_validated(tmp_path):
    # each rank records its own configuration; the spec takes rank 1's values apart (here
    # its verify-block rows, which no hello compares) and replays the run against them
    cfg = gate_config({**SMALL, "block_rows": 2, "rank1_block_rows": 3})
    out = _record(tmp_path, _gates_big_gates, (40, 40), cfg)
    assert [o.error for o in out] == ["", ""]
    a, b = read_pair([tmp_path / device_trace.GATE])
    assert (a.config["block_rows"], b.config["block_rows"]) == (2, 3)
    rep = validate_gate((a, b))
    assert rep.ok, rep.message
    assert rep.gates == [50, 50] and rep.drains == [1, 1]


@pytest.fixture(scope="module")
def apart_run(tmp_path_factory) -> Path:
    """Ranks built with different receive windows: each refuses the other's hello."""
    d = tmp_path_factory.mktemp("apart-run")
    out = _record(d, _gates_big_gates, (4, 4), gate_config({**SMALL, "rank1_window": 8}))
    assert all("tp hello: peer's receive window" in o.error for o in out), out
    return d / device_trace.GATE


def test_a_refused_hello_is_a_recorded_setup_that_validates(apart_run):
    setup = [[x for x in _lines(apart_run, r) if x["ev"] in ("call", "result")]
             for r in (0, 1)]
    assert setup[0][0] == {"ev": "call", "name": "connect",
                           "args": {"peer_window": 8, "peer_max_msg": 16384}}
    assert setup[0][1]["error"] == ("verbspec safety rule: tp hello: peer's receive window "
                                    "8 != 16")
    assert setup[1][0]["args"]["peer_window"] == 16 and not setup[1][1]["ok"]
    rep = validate_gate(read_pair([apart_run]))
    assert rep.ok, rep.message
    assert rep.actions == {"setup": 2} and rep.recorded_steps == 6


@pytest.mark.parametrize("change", ["hello", "error"])
def test_a_changed_setup_is_rejected(apart_run, tmp_path, change):
    lines = _lines(apart_run, 0)
    i = next(k for k, x in enumerate(lines) if x["ev"] == "call")
    if change == "hello":
        lines[i]["args"]["peer_window"] = 16
        rep = _reject(apart_run, tmp_path, 0, lines, i + 1)
        assert "rank 1 began with window 8" in rep.message
    else:
        lines[i + 1]["error"] = lines[i + 1]["error"].replace("8 != 16", "4 != 16")
        rep = _reject(apart_run, tmp_path, 0, lines, i + 2)
        assert "receive window 8 != 16" in rep.message


def test_ranks_that_differ_in_a_shared_value_are_refused(gate_run, tmp_path):
    lines = _lines(gate_run, 1)
    lines[0]["config"]["chain_max"] = lines[0]["config"]["chain_max"] + 1
    path = _write(tmp_path, 1, lines, gate_run)
    with pytest.raises(TraceInputError, match="configurations differ in chain_max$"):
        read_pair([path])
