"""The gate's vocabulary that implementations share with the spec: the rank's registered
buffers and how each is strided, and how many completions one poll takes per phase. Names and
numbers only; what a rank does with them is each implementation's own code."""

from __future__ import annotations

# the registered regions a work request addresses (the C engine's vs_gate_buf order)
IN, OUT, STAGE, BLK, BOUT = "in", "out", "stage", "blk", "bout"
BUFFERS = (IN, OUT, STAGE, BLK, BOUT)
# laid out a vector per slot (the others a chunk per slot): the decode in- and out-slots and
# the verify block's rows (ds4's batch-in and batch-out regions)
VECTOR_BUFFERS = frozenset({IN, OUT, BLK, BOUT})

# completions one poll takes, as ds4 sizes its ibv_wc arrays: 16 in a decode gate and a verify
# block (tp_rdma_drain_cq), 64 in a big-gate window; a drain polls 2*window+1
# (RECV_WINDOW*2+1, spec/gate/steps/common.py poll_batch)
POLL_BATCH = 16
BIG_POLL_BATCH = 64
