"""Benchmark: `verbspec match` on a 100,000-event scenario.

Not collected by default (the file name does not start with ``test_``). Run it as a script,
``python tests/bindings/bench_match.py [EVENTS]``, which prints the in-process time of the runner
and the
wall time of ``python -m verbspec.refimpl.cli.scenario`` on the file, or explicitly under pytest
(``pytest tests/bindings/bench_match.py``), where it is also marked slow. It measures, it does not
assert
a time.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from verbspec.refimpl.cli import scenario as sc


def make_scenario(n: int, seed: int = 1) -> dict:
    """Traffic with depth: 64 peers, 32 tags, 4 communicators, 10% wildcard receives; bursts
    of arrivals build long unexpected lists and bursts of posts long posted lists."""
    rng = random.Random(seed)
    events = []
    posted: list[str] = []
    i = 0
    while i < n:
        burst = rng.randint(1, 200)
        kind = rng.random()
        for _ in range(min(burst, n - i)):
            if kind < 0.05 and posted:
                events.append({"op": "cancel", "id": posted.pop(rng.randrange(len(posted)))})
            elif kind < 0.5:
                rid = f"r{i}"
                posted.append(rid)
                if len(posted) > 4096:
                    posted.pop(0)
                wild = rng.random() < 0.1
                events.append({"op": "post_recv", "id": rid, "comm": rng.randrange(4),
                               "src": "any" if wild and rng.random() < 0.5 else rng.randrange(64),
                               "tag": "any" if wild else rng.randrange(32),
                               "bytes": rng.choice((64, 4096, 65536))})
            else:
                events.append({"op": "arrive", "id": f"m{i}", "comm": rng.randrange(4),
                               "src": rng.randrange(64), "tag": rng.randrange(32),
                               "bytes": rng.choice((8, 1024, 8192, 100000))})
            i += 1
    return {"events": events, "eager_limit": 8192, "offload": {"capacity": 0}}


def run(n: int = 100_000) -> dict:
    doc = make_scenario(n)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "scenario.json"
        path.write_text(json.dumps(doc))
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = sc.match_main(str(path))
        inproc = time.perf_counter() - t0
        assert code == 0
        result = json.loads(out.getvalue())
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "verbspec.refimpl.cli.scenario", str(path)],
                       check=True, capture_output=True)
        wall = time.perf_counter() - t0
    return {"events": n, "match_main_seconds": round(inproc, 3),
            "process_wall_seconds": round(wall, 3), "matches": len(result["matches"]),
            "unexpected": len(result["unexpected"]), "pending": len(result["pending"])}


@pytest.mark.slow
def test_bench_100k_events():
    print("\n", run())


if __name__ == "__main__":
    print(run(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
