"""verbspec bench soak, short: sessions with every fault kind in turn, recovery by setting up
again; no wrong payload accepted; a delay within the timeout and a fault-free session end
clean, every other fault in an error."""

from __future__ import annotations

import json

from verbspec.refimpl.cli import main
from verbspec.refimpl.soak import FAULTS


def test_a_short_soak_recovers_from_every_fault_and_accepts_nothing_wrong(capsys):
    assert main(["bench", "soak", "--gates", "12000", "--seed", "5", "--json",
                 "--engine", "python"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_errors"] == [] and out["wrong_payloads_accepted"] == 0
    assert out["gates"] >= 12000 and out["sessions"] >= len(FAULTS)
    assert set(out["faults"]) == set(FAULTS) - {"none"}
    ranks = out["session_outcomes"].values()
    for kind in ("none", "delay"):
        assert all(set(r[kind]) == {"clean"} for r in ranks), out["session_outcomes"]
    for kind in ("drop", "wc_error", "cq_overflow", "tcp_stall", "peer_death"):
        sessions = max(sum(r[kind].values()) for r in ranks)
        assert sum(r[kind].get("error", 0) for r in ranks) >= sessions, kind
    for rss in out["rss_kib"].values():
        assert rss["start"] > 0 and rss["end"] > 0


def test_soak_refuses_bad_arguments(capsys):
    assert main(["bench", "soak", "--gates", "0"]) == 3
    assert "--gates must be at least 1" in capsys.readouterr().err
