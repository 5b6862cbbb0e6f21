"""verbspec demo: two processes, gates, a 12 MiB big gate, re-arm, more gates, then tagged
traffic; the JSON contract and the refusals."""

from __future__ import annotations

import json

from verbspec.refimpl.cli.demo import TAGGED_ROUNDS, TAGGED_SIZES
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate import errors
from verbspec.spec.gate.variants import NO_BARRIER


def test_demo_json_reports_verified_gates_and_the_big_gate(capsys):
    assert main(["demo", "--gates", "300", "--json", "--engine", "python"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"gates", "big_gate_bytes", "tagged_messages", "verified", "errors",
            "gate_latency_us", "engine", "transport"} <= set(out)
    assert out["gates"] == 330 and out["big_gate_bytes"] == 12 * 2**20
    assert out["verified"] is True and out["errors"] == [] and out["drops"] == 0
    assert 0 < out["gate_latency_us"]["p50"] <= out["gate_latency_us"]["p99"]
    assert (out["engine"], out["transport"]) == ("python", "sim")
    # three phases a round, each size once a phase, both ranks
    assert out["tagged_messages"] > 0
    assert out["tagged_messages"] == 2 * TAGGED_ROUNDS * 3 * len(TAGGED_SIZES)
    assert out["tagged"]["eager"] > 0 and out["tagged"]["rendezvous"] > 0


def test_demo_table(capsys):
    assert main(["demo", "--gates", "50", "--quiet", "--engine", "python"]) == 0
    out = capsys.readouterr().out
    assert "payloads verified" in out and "yes" in out and "python, sim" in out
    assert "tagged messages verified" in out and "eager" in out and "rendezvous" in out


def test_demo_refuses_bad_arguments(capsys):
    assert main(["demo", "--gates", "0"]) == 3
    assert "--gates must be at least 1" in capsys.readouterr().err
    assert main(["demo", "--engine", "fortran"]) == 3


def test_demo_refuses_transport_arguments_naming_them(capsys):
    assert main(["demo", "--transport", "verbs"]) == 3
    assert "--transport verbs needs --device NAME" in capsys.readouterr().err
    assert main(["demo", "--device", "rxe0"]) == 3
    assert "--device and --peer-device are for --transport verbs" in capsys.readouterr().err
    assert main(["demo", "--variant", NO_BARRIER.name, "--engine", "native"]) == 3
    assert "the variant engines are the Python reference engine" in capsys.readouterr().err


def test_demo_no_barrier_variant_drops_the_first_gate_and_the_peer_times_out(capsys):
    # the sim transport: the forced run as tests/rxe/test_rxe_pyverbs.py runs it on a device
    assert main(["demo", "--variant", NO_BARRIER.name, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    early, late = out["ranks"]
    assert early["error"] == "" and early["verified"] is True
    assert early["completions"]["send"] == 2
    assert late["completions"]["recv"] == 0
    assert late["error"] == errors.GATE_TIMEOUT(seq=1, recv_done=0)
    assert out["drops"] == 2 and out["verified"] is False


def test_demo_without_tagged_traffic_runs_the_gate_part_only(capsys):
    assert main(["demo", "--gates", "50", "--no-tagged", "--json", "--engine", "python"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gates"] == 55 and out["verified"] is True and out["drops"] == 0
    assert out["checked"] == {"gate_vectors": 110, "big_gates": 2, "tagged": 0, "wrong": 0}
    assert out["tagged_messages"] == 0 and out["tagged"]["mib_per_s"] is None
    assert main(["demo", "--variant", NO_BARRIER.name, "--no-tagged"]) == 3
    assert "--no-tagged is for the gate run" in capsys.readouterr().err
