"""Small configurations the tests share: each keeps a search or a proof short while still
reaching the protocol step the test is about."""

from __future__ import annotations

# two-gate window, one-chunk vectors, four-deep chains: drains and several big-gate windows
# within a few dozen steps
GATE_SMALL = {"window": 2, "vec_bytes": 16384, "chain_max": 4}

# tag-matching configurations the random lockstep runs cover: the defaults, no offload, and
# small jobs with offload, two communicators, or more senders than receives
TAGMATCH_CONFIGS = [{}, {"capacity": 0},
                    {"senders": 2, "messages": 2, "receives": 3, "tags": 2, "capacity": 2,
                     "max_bytes": 3, "eager_limit": 1},
                    {"senders": 3, "messages": 3, "receives": 4, "tags": 2, "comms": 2,
                     "capacity": 2, "max_bytes": 3, "eager_limit": 2},
                    {"senders": 3, "messages": 3, "receives": 4, "tags": 2, "capacity": 0,
                     "max_bytes": 2, "eager_limit": 1}]
