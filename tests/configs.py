"""Small configurations the tests share: each keeps a search or a proof short while still
reaching the protocol step the test is about."""

from __future__ import annotations

# two-gate window, one-chunk vectors, four-deep chains: drains and several big-gate windows
# within a few dozen steps
GATE_SMALL = {"window": 2, "vec_bytes": 16384, "chain_max": 4}
