/* The spec's texts and constants for the C code: GENERATED, do not edit.
 *
 * Written by `python -m verbspec.refimpl.bindings.gen_header` from the spec's tables
 * (refimpl/bindings/gen_header.py says which); a test checks it is current. */
#ifndef VS_SPEC_CONSTANTS_H
#define VS_SPEC_CONSTANTS_H

#include <stdint.h>

/* -------- the gate: texts (spec/gate/errors.py, printf formats) */
/* WC_STATUS: ds4; tp_wc_status_str, ds4_tp.c:1274 */
#define VS_SPEC_GATE_WC_STATUS "wc status %d"
/* HELLO_MISMATCH: the spec's own (safety rule); tp_hello_exchange, ds4_tp.c:1963 */
#define VS_SPEC_GATE_HELLO_MISMATCH "verbspec safety rule: tp hello: peer's %s %llu != %llu"
/* CHUNKED_VECTORS: ds4; tp_rdma_register_and_exchange, ds4_tp.c:1249 */
#define VS_SPEC_GATE_CHUNKED_VECTORS \
    "rdma gate vectors ride as 2 chunked messages (%llu bytes > %u limit)"
/* GATE_ORDER: ds4; tp_rdma_gate_exchange, ds4_tp.c:1529 */
#define VS_SPEC_GATE_GATE_ORDER "gate order broke: layer %u gate %u vs seq %llu"
/* GATE_SEQ_ORDER: the spec's own (safety rule); tp_rdma_gate_exchange, ds4_tp.c:1528 */
#define VS_SPEC_GATE_GATE_SEQ_ORDER \
    "verbspec safety rule: gate seq %llu out of order after gate %llu"
/* WINDOW_BARRIER_MISMATCH: the spec's own (silent); tp_rdma_window_barrier, ds4_tp.c:1720 */
#define VS_SPEC_GATE_WINDOW_BARRIER_MISMATCH \
    "verbspec silent failure: rdma window barrier read byte 0x%02x, expected 0x%02x"
/* WINDOW_BARRIER_CLOSED: the spec's own (silent); tp_rdma_window_barrier, ds4_tp.c:1719 */
#define VS_SPEC_GATE_WINDOW_BARRIER_CLOSED \
    "verbspec silent failure: peer closed the data socket during the rdma window barrier"
/* WINDOW_BARRIER_TIMEOUT: the spec's own (silent); tp_rdma_window_barrier, ds4_tp.c:1719 */
#define VS_SPEC_GATE_WINDOW_BARRIER_TIMEOUT \
    "verbspec silent failure: the rdma window barrier read timed out"
/* GATE_COMPLETION: ds4; tp_rdma_drain_cq, ds4_tp.c:1316 */
#define VS_SPEC_GATE_GATE_COMPLETION "rdma completion error: %s (wr_id %llu)"
/* GATE_PEER: ds4; tp_rdma_gate_exchange, ds4_tp.c:1579 */
#define VS_SPEC_GATE_GATE_PEER "peer disconnected during RDMA gate"
/* GATE_TIMEOUT: ds4; tp_rdma_gate_exchange, ds4_tp.c:1586 */
#define VS_SPEC_GATE_GATE_TIMEOUT "timeout waiting gate seq %llu (recv_done %llu)"
/* DRAIN_COMPLETION: ds4; tp_rdma_drain_decode_window, ds4_tp.c:1677 */
#define VS_SPEC_GATE_DRAIN_COMPLETION "rdma receive-window drain: %s"
/* DRAIN_PEER: ds4; tp_rdma_drain_decode_window, ds4_tp.c:1692 */
#define VS_SPEC_GATE_DRAIN_PEER "peer disconnected while draining RDMA receives"
/* DRAIN_TIMEOUT: ds4; tp_rdma_drain_decode_window, ds4_tp.c:1698 */
#define VS_SPEC_GATE_DRAIN_TIMEOUT "timeout draining RDMA receive window (%u/%u)"
/* BIG_HEADER_FAILED: ds4; ds4_tp_big_gate_exchange, ds4_tp.c:2305 */
#define VS_SPEC_GATE_BIG_HEADER_FAILED \
    "big gate header exchange failed or peer closed (layer %u seq %llu): %s"
/* BIG_DESYNC: ds4; ds4_tp_big_gate_exchange, ds4_tp.c:2315 */
#define VS_SPEC_GATE_BIG_DESYNC "big gate desync: got l=%u tag=%x seq=%llu, want l=%u seq=%llu"
/* BIG_SIZE_MISMATCH: the spec's own (safety rule); ds4_tp_big_gate_exchange, ds4_tp.c:2312 */
#define VS_SPEC_GATE_BIG_SIZE_MISMATCH \
    "verbspec safety rule: big gate %llu of %llu chunks vs the peer's %llu chunks"
/* BIG_HEADER_MISFRAMED: the spec's own (safety rule); ds4_tp_big_gate_exchange, ds4_tp.c:2303 */
#define VS_SPEC_GATE_BIG_HEADER_MISFRAMED "verbspec safety rule: big gate header read found %s"
/* BIG_UNAVAILABLE: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1734 */
#define VS_SPEC_GATE_BIG_UNAVAILABLE "big gate unavailable or decode window still active"
/* BIG_BARRIER: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1805 */
#define VS_SPEC_GATE_BIG_BARRIER "big gate window barrier failed"
/* BIG_COMPLETION: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1848 */
#define VS_SPEC_GATE_BIG_COMPLETION "big gate completion error: %s"
/* BIG_UNTAGGED: the spec's own (safety rule); tp_rdma_big_gate_exchange, ds4_tp.c:1854 */
#define VS_SPEC_GATE_BIG_UNTAGGED \
    "verbspec safety rule: receive completion wr_id %llu without the BULK tag in a big gate " \
    "window"
/* BIG_INVALID: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1865 */
#define VS_SPEC_GATE_BIG_INVALID "duplicate or invalid big gate completion %llu"
/* BIG_LENGTH: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1874 */
#define VS_SPEC_GATE_BIG_LENGTH "big gate chunk %llu received %u bytes, expected %u"
/* BIG_PEER: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1884 */
#define VS_SPEC_GATE_BIG_PEER "peer disconnected during big gate"
/* BIG_TIMEOUT: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1888 */
#define VS_SPEC_GATE_BIG_TIMEOUT "timeout in big gate window (%u/%u recvs, %u/%u sends, %u sent)"
/* BLOCK_HEADER_FAILED: the spec's own (safety rule); ds4_tp_batch_block_begin, ds4_tp.c:2192 */
#define VS_SPEC_GATE_BLOCK_HEADER_FAILED \
    "verbspec safety rule: verify-block header exchange failed: %s"
/* BLOCK_HEADER_MISFRAMED: the spec's own (safety rule); ds4_tp_batch_block_begin, ds4_tp.c:2192 */
#define VS_SPEC_GATE_BLOCK_HEADER_MISFRAMED \
    "verbspec safety rule: verify-block header read found %s"
/* BLOCK_HEADER_MISMATCH: the spec's own (safety rule); ds4_tp_batch_block_begin, ds4_tp.c:2191 */
#define VS_SPEC_GATE_BLOCK_HEADER_MISMATCH \
    "verbspec safety rule: verify block of %u layers x %u rows vs the peer's %u x %u"
/* BLOCK_RECV_DEPTH: the spec's own (silent); tp_rdma_block_post_layer, ds4_tp.c:1361 */
#define VS_SPEC_GATE_BLOCK_RECV_DEPTH \
    "verbspec silent failure: verify-block layer %u needs %u receives, above the receive depth " \
    "%u"
/* BLOCK_SEND_DEPTH: the spec's own (silent); tp_rdma_block_gate_exchange, ds4_tp.c:1415 */
#define VS_SPEC_GATE_BLOCK_SEND_DEPTH \
    "verbspec silent failure: verify-block layer %u sends %u work requests, above %u (half the " \
    "receive depth) or the send depth %u"
/* BLOCK_EMPTY: ds4; tp_rdma_drain_cq, ds4_tp.c:1324 */
#define VS_SPEC_GATE_BLOCK_EMPTY "rdma verify-block receive of 0 bytes"
/* BLOCK_PEER: ds4; tp_rdma_block_gate_exchange, ds4_tp.c:1455 */
#define VS_SPEC_GATE_BLOCK_PEER "peer disconnected during verify-block gate"
/* BLOCK_TIMEOUT: ds4; tp_rdma_block_gate_exchange, ds4_tp.c:1460 */
#define VS_SPEC_GATE_BLOCK_TIMEOUT "timeout waiting verify-block gate layer %u (%llu/%llu rows)"
/* BLOCK_END_TIMEOUT: ds4; ds4_tp_batch_block_end, ds4_tp.c:2224 */
#define VS_SPEC_GATE_BLOCK_END_TIMEOUT "verify-block end: %llu/%llu rows received, %u sends pending"
/* BATCH_DESYNC: ds4; ds4_tp_batch_gate_exchange, ds4_tp.c:2257 */
#define VS_SPEC_GATE_BATCH_DESYNC \
    "batch gate desync: got l=%u rows=%u seq=%llu, want l=%u rows=%u seq=%llu"
/* BATCH_HEADER_FAILED: the spec's own (silent); ds4_tp_batch_gate_exchange, ds4_tp.c:2253 */
#define VS_SPEC_GATE_BATCH_HEADER_FAILED \
    "verbspec silent failure: batch gate header read failed: %s"
/* BATCH_HEADER_MISFRAMED: the spec's own (silent); ds4_tp_batch_gate_exchange, ds4_tp.c:2253 */
#define VS_SPEC_GATE_BATCH_HEADER_MISFRAMED \
    "verbspec silent failure: batch gate header read found %s"
/* POST_RECV: ds4; tp_rdma_post_gate_recv, ds4_tp.c:1500 */
#define VS_SPEC_GATE_POST_RECV "rdma post_recv(seq %llu): %s"
/* POST_SEND: ds4; tp_rdma_gate_exchange, ds4_tp.c:1567 */
#define VS_SPEC_GATE_POST_SEND "rdma post_send: %s"
/* CQ_POLL: the spec's own (silent); tp_rdma_drain_cq, ds4_tp.c:1313 */
#define VS_SPEC_GATE_CQ_POLL \
    "verbspec silent failure: ibv_poll_cq failed in a gate or verify-block wait"
/* DRAIN_POST_FAILED: ds4; tp_rdma_drain_decode_window, ds4_tp.c:1656 */
#define VS_SPEC_GATE_DRAIN_POST_FAILED "rdma receive-window drain post failed: %s"
/* DRAIN_POLL: the spec's own (silent); tp_rdma_drain_decode_window, ds4_tp.c:1671 */
#define VS_SPEC_GATE_DRAIN_POLL \
    "verbspec silent failure: ibv_poll_cq failed in the receive-window drain"
/* BIG_POST_RECV: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1799 */
#define VS_SPEC_GATE_BIG_POST_RECV "big gate post_recv(%u of %u): %s"
/* BIG_POST_SEND: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1834 */
#define VS_SPEC_GATE_BIG_POST_SEND "big gate post_send(%u): %s"
/* BIG_POLL: ds4; tp_rdma_big_gate_exchange, ds4_tp.c:1842 */
#define VS_SPEC_GATE_BIG_POLL "big gate poll_cq failed at %llu/%llu bytes: %s"
/* BLOCK_POST_RECV: ds4; tp_rdma_block_post_layer, ds4_tp.c:1387 */
#define VS_SPEC_GATE_BLOCK_POST_RECV "rdma verify-block post_recv(layer %u): %s"
/* BLOCK_POST_SEND: ds4; tp_rdma_block_gate_exchange, ds4_tp.c:1440 */
#define VS_SPEC_GATE_BLOCK_POST_SEND "rdma verify-block post_send(layer %u): %s"
/* PEER_CLOSED_ERRNO: strerror's text */
#define VS_SPEC_GATE_PEER_CLOSED_ERRNO "Connection reset by peer"
/* READ_TIMEOUT_ERRNO: strerror's text */
#define VS_SPEC_GATE_READ_TIMEOUT_ERRNO "Resource temporarily unavailable"
/* POST_ERRNO: strerror's text */
#define VS_SPEC_GATE_POST_ERRNO "Cannot allocate memory"
/* POLL_ERRNO: strerror's text */
#define VS_SPEC_GATE_POLL_ERRNO "Input/output error"
/* the error a crashed rank reads */
#define VS_SPEC_GATE_CRASHED_ERROR "crashed"

/* -------- the gate: names, in the C engine's enum order */
/* the phases (spec/gate/state.py), in vs_gate_phase order */
#define VS_SPEC_GATE_PHASE_NAMES { \
    "init", "idle", "hold", "arm_post", "arm_barrier_write", "arm_barrier_read", "send", "wait", \
    "drain_post", "drain_wait", "big_header_write", "big_header_read", "big_begin", "big_post", \
    "big_barrier_write", "big_barrier_read", "big_xfer", "block_header_write", \
    "block_header_read", "block_post", "block_barrier_write", "block_barrier_read", "block_send", \
    "block_wait", "block_end", "batch_header_write", "batch_header_read", "failed", "crashed", \
}
#define VS_SPEC_GATE_N_PHASES 29
/* the registered regions a work request addresses, in vs_gate_buf order; laid out a vector per
 * slot: in, out, blk, bout (spec/gate/constants.py VECTOR_BUFFERS), the others a chunk per slot */
#define VS_SPEC_GATE_BUF_NAMES { \
    "in", "out", "stage", "blk", "bout", \
}
#define VS_SPEC_GATE_N_BUFS 5

/* -------- the gate: poll sizes (spec/gate/constants.py), ibv_wc entries per poll */
/* a decode gate's wait and a verify block's */
#define VS_SPEC_GATE_POLL_BATCH 16u
/* a big-gate window's */
#define VS_SPEC_GATE_BIG_POLL_BATCH 64u
/* a drain's wait (RECV_WINDOW*2+1 in ds4) */
#define VS_SPEC_GATE_DRAIN_POLL_BATCH(window) (2 * (window) + 1)

/* -------- the gate: wire constants (spec/gate/wire.py, spec/gate/state.py) */
#define VS_SPEC_GATE_TAG_BULK UINT64_C(0x8000000000000000)
#define VS_SPEC_GATE_TAG_WARM UINT64_C(0x4000000000000000)
#define VS_SPEC_GATE_TAG_BLOCK UINT64_C(0x2000000000000000)
#define VS_SPEC_GATE_TAG_MASK UINT64_C(0xc000000000000000)
#define VS_SPEC_GATE_WINDOW_BARRIER 0xD1u
#define VS_SPEC_GATE_BLOCK_BARRIER 0xB5u
#define VS_SPEC_GATE_BIG_MAGIC 0xB16u
/* "DS4B" */
#define VS_SPEC_GATE_HEADER_MAGIC UINT64_C(0x44533442)
#define VS_SPEC_GATE_BIG_LAYER 0u
/* ibv_wc_status of a successful completion */
#define VS_SPEC_GATE_WC_SUCCESS 0

/* -------- the gate: parameters (spec/gate/params.py PARAMS): default, bounds */
/* bytes of one gate vector */
#define VS_SPEC_GATE_VEC_BYTES_DEFAULT 24576u
#define VS_SPEC_GATE_VEC_BYTES_MIN 1u
#define VS_SPEC_GATE_VEC_BYTES_MAX UINT64_C(4294967296)
/* driver message cap; a vector rides as ceil(vec/max) chunks */
#define VS_SPEC_GATE_MAX_MSG_DEFAULT 16384u
#define VS_SPEC_GATE_MAX_MSG_MIN 1u
#define VS_SPEC_GATE_MAX_MSG_MAX 2147483648u
/* gates of receive lookahead */
#define VS_SPEC_GATE_WINDOW_DEFAULT 16u
#define VS_SPEC_GATE_WINDOW_MIN 1u
#define VS_SPEC_GATE_WINDOW_MAX 32768u
/* rank 1's own message cap (0: max_msg); the ranks' hello compares them */
#define VS_SPEC_GATE_RANK1_MAX_MSG_DEFAULT 0u
#define VS_SPEC_GATE_RANK1_MAX_MSG_MIN 0u
#define VS_SPEC_GATE_RANK1_MAX_MSG_MAX 2147483648u
/* rank 1's own receive lookahead (0: window); the ranks' hello compares them */
#define VS_SPEC_GATE_RANK1_WINDOW_DEFAULT 0u
#define VS_SPEC_GATE_RANK1_WINDOW_MIN 0u
#define VS_SPEC_GATE_RANK1_WINDOW_MAX 32768u
/* gates per token (0: cycle through n_slots) */
#define VS_SPEC_GATE_GATES_PER_TOKEN_DEFAULT 86u
#define VS_SPEC_GATE_GATES_PER_TOKEN_MIN 0u
#define VS_SPEC_GATE_GATES_PER_TOKEN_MAX 65536u
/* slots in the registered slab */
#define VS_SPEC_GATE_N_SLOTS_DEFAULT 86u
#define VS_SPEC_GATE_N_SLOTS_MIN 1u
#define VS_SPEC_GATE_N_SLOTS_MAX 65536u
/* identity schedule: first slot */
#define VS_SPEC_GATE_SLOT_START_DEFAULT 0u
#define VS_SPEC_GATE_SLOT_START_MIN 0u
#define VS_SPEC_GATE_SLOT_START_MAX 65536u
/* identity schedule: slot stride */
#define VS_SPEC_GATE_SLOT_STEP_DEFAULT 1u
#define VS_SPEC_GATE_SLOT_STEP_MIN 0u
#define VS_SPEC_GATE_SLOT_STEP_MAX 65536u
/* mask schedule: the ordinal-th set bit is the slot (0: identity schedule) */
#define VS_SPEC_GATE_SLOT_MASK_DEFAULT 0u
#define VS_SPEC_GATE_SLOT_MASK_MIN 0u
#define VS_SPEC_GATE_SLOT_MASK_MAX UINT64_C(18446744073709551615)
/* granted receive queue depth */
#define VS_SPEC_GATE_RQ_DEPTH_DEFAULT 1024u
#define VS_SPEC_GATE_RQ_DEPTH_MIN 1u
#define VS_SPEC_GATE_RQ_DEPTH_MAX 32768u
/* granted send queue depth */
#define VS_SPEC_GATE_SQ_DEPTH_DEFAULT 1024u
#define VS_SPEC_GATE_SQ_DEPTH_MIN 1u
#define VS_SPEC_GATE_SQ_DEPTH_MAX 32768u
/* shared completion queue entries (ds4: 512, which one warm-up leftover overflows in a full
 * big-gate window) */
#define VS_SPEC_GATE_CQ_DEPTH_DEFAULT 515u
#define VS_SPEC_GATE_CQ_DEPTH_MIN 1u
#define VS_SPEC_GATE_CQ_DEPTH_MAX 4194304u
/* cap on a big-gate window (receives in flight) */
#define VS_SPEC_GATE_BIG_DEPTH_DEFAULT 256u
#define VS_SPEC_GATE_BIG_DEPTH_MIN 1u
#define VS_SPEC_GATE_BIG_DEPTH_MAX 256u
/* longest chain of work requests posted at once */
#define VS_SPEC_GATE_CHAIN_MAX_DEFAULT 64u
#define VS_SPEC_GATE_CHAIN_MAX_MIN 1u
#define VS_SPEC_GATE_CHAIN_MAX_MAX 32768u
/* bytes of a big gate's last chunk, its transfer's remainder (0: a whole chunk) */
#define VS_SPEC_GATE_BIG_LAST_BYTES_DEFAULT 0u
#define VS_SPEC_GATE_BIG_LAST_BYTES_MIN 0u
#define VS_SPEC_GATE_BIG_LAST_BYTES_MAX 2147483648u
/* big-gate staging area; caps the window at staging_bytes / max_msg */
#define VS_SPEC_GATE_STAGING_BYTES_DEFAULT 4194304u
#define VS_SPEC_GATE_STAGING_BYTES_MIN 1u
#define VS_SPEC_GATE_STAGING_BYTES_MAX UINT64_C(1099511627776)
/* gate and drain timeout */
#define VS_SPEC_GATE_TIMEOUT_MS_DEFAULT 750u
#define VS_SPEC_GATE_TIMEOUT_MS_MIN 1u
#define VS_SPEC_GATE_TIMEOUT_MS_MAX 60000u
/* 1: the provider completes unsignaled sends too (as Apple's does) */
#define VS_SPEC_GATE_UNSIGNALED_COMPLETIONS_DEFAULT 1u
#define VS_SPEC_GATE_UNSIGNALED_COMPLETIONS_MIN 0u
#define VS_SPEC_GATE_UNSIGNALED_COMPLETIONS_MAX 1u
/* 1: crashes, error completions, timeouts, bad gate calls and warm-up leftovers are explored */
#define VS_SPEC_GATE_FAULTS_DEFAULT 1u
#define VS_SPEC_GATE_FAULTS_MIN 0u
#define VS_SPEC_GATE_FAULTS_MAX 1u
/* with faults, over UC: warm-up send completions (wr_id 1<<62) that may outlive warm-up, per
 * rank (ds4's warm-up posts a send per attempt, up to 20, and stops polling at the first send
 * completion it sees; over RC it reaps its one send, so none) */
#define VS_SPEC_GATE_WARM_SEND_LEFTOVERS_DEFAULT 1u
#define VS_SPEC_GATE_WARM_SEND_LEFTOVERS_MIN 0u
#define VS_SPEC_GATE_WARM_SEND_LEFTOVERS_MAX 20u
/* 1: with faults, a warm-up receive completion (wr_id 1<<62) may outlive warm-up, beside a
 * warm-up send completion; 0: only a send completion may, as in ds4, whose warm-up succeeds only
 * after reaping its one warm receive */
#define VS_SPEC_GATE_WARM_RECV_LEFTOVER_DEFAULT 1u
#define VS_SPEC_GATE_WARM_RECV_LEFTOVER_MIN 0u
#define VS_SPEC_GATE_WARM_RECV_LEFTOVER_MAX 1u
/* 1: the wire may lose messages (UC has no recovery) */
#define VS_SPEC_GATE_WIRE_LOSS_DEFAULT 0u
#define VS_SPEC_GATE_WIRE_LOSS_MIN 0u
#define VS_SPEC_GATE_WIRE_LOSS_MAX 1u
/* 1: with faults, ibv_post_recv, ibv_post_send and ibv_poll_cq may fail, and the rank fails as
 * ds4 does (what an arming posted before the failing gate stays posted); the z3 model does not
 * cover them */
#define VS_SPEC_GATE_POST_FAILURES_DEFAULT 0u
#define VS_SPEC_GATE_POST_FAILURES_MIN 0u
#define VS_SPEC_GATE_POST_FAILURES_MAX 1u
/* workload: gate calls and big gates each rank makes */
#define VS_SPEC_GATE_OPS_DEFAULT 48u
#define VS_SPEC_GATE_OPS_MIN 1u
#define VS_SPEC_GATE_OPS_MAX UINT64_C(2305843009213693951)
/* workload: 1: big gates (prefill) mix with decode gates; 0: decode gates only */
#define VS_SPEC_GATE_BIG_GATES_DEFAULT 1u
#define VS_SPEC_GATE_BIG_GATES_MIN 0u
#define VS_SPEC_GATE_BIG_GATES_MAX 1u
/* workload: with big gates, one more size the application may give a big gate, in chunks (0:
 * only the sizes the workload draws: 1, chain_max + 1 and a window and one); a validated
 * recording's own size */
#define VS_SPEC_GATE_BIG_CHUNKS_DEFAULT 0u
#define VS_SPEC_GATE_BIG_CHUNKS_MIN 0u
#define VS_SPEC_GATE_BIG_CHUNKS_MAX UINT64_C(2305843009213693951)
/* workload: 1: verify blocks (ds4_tp_batch_block_begin, a batch gate per layer,
 * ds4_tp_batch_block_end) mix with the other calls; the z3 model does not cover them */
#define VS_SPEC_GATE_VERIFY_BLOCKS_DEFAULT 0u
#define VS_SPEC_GATE_VERIFY_BLOCKS_MIN 0u
#define VS_SPEC_GATE_VERIFY_BLOCKS_MAX 1u
/* layers of a verify block, one batch gate each */
#define VS_SPEC_GATE_BLOCK_LAYERS_DEFAULT 2u
#define VS_SPEC_GATE_BLOCK_LAYERS_MIN 1u
#define VS_SPEC_GATE_BLOCK_LAYERS_MAX 65536u
/* rows of a verify block's batch gates, one vector each */
#define VS_SPEC_GATE_BLOCK_ROWS_DEFAULT 1u
#define VS_SPEC_GATE_BLOCK_ROWS_MIN 1u
#define VS_SPEC_GATE_BLOCK_ROWS_MAX 32768u
/* rank 1's own rows of a verify block (0: block_rows); the spec's block header compares them */
#define VS_SPEC_GATE_RANK1_BLOCK_ROWS_DEFAULT 0u
#define VS_SPEC_GATE_RANK1_BLOCK_ROWS_MIN 0u
#define VS_SPEC_GATE_RANK1_BLOCK_ROWS_MAX 32768u

/* -------- tag matching: values (spec/tagmatch/) */
/* ANY_SOURCE, ANY_TAG */
#define VS_SPEC_TAGMATCH_ANY (-1)
/* a receive's status: pending */
#define VS_SPEC_TAGMATCH_PENDING (-1)
/* ... cancelled (>= 0: the matched message) */
#define VS_SPEC_TAGMATCH_CANCELLED (-2)
/* a receive's completion: whole */
#define VS_SPEC_TAGMATCH_DONE_OK 1
/* ... truncated */
#define VS_SPEC_TAGMATCH_TRUNCATED 2
/* a message's rendezvous stage */
#define VS_SPEC_TAGMATCH_STAGE_IDLE 0
#define VS_SPEC_TAGMATCH_STAGE_NEED_READ 1
#define VS_SPEC_TAGMATCH_STAGE_READING 2
#define VS_SPEC_TAGMATCH_STAGE_READ_DONE 3
#define VS_SPEC_TAGMATCH_STAGE_FIN_SENT 4
/* (fin-before-read's stage) */
#define VS_SPEC_TAGMATCH_STAGE_FIN_EARLY 5
/* where a pending receive lives with offload: software */
#define VS_SPEC_TAGMATCH_SW 0
/* ... the NIC's list */
#define VS_SPEC_TAGMATCH_HW 1
/* ... the NIC's list, a cancel on its way */
#define VS_SPEC_TAGMATCH_HW_CANCEL 2

/* -------- tag matching: names, in the C engine's enum order */
/* message kinds */
#define VS_SPEC_TAGMATCH_KIND_NAMES { \
    "eager", "rndv", \
}
/* the ops software sends the NIC */
#define VS_SPEC_TAGMATCH_OP_NAMES { \
    "add", "remove", "sync", \
}
/* the NIC's completions */
#define VS_SPEC_TAGMATCH_CQE_NAMES { \
    "match", "unexpected", "removed", \
}

/* -------- tag matching: texts (printf formats of the id) */
/* a message delivered twice (lists.arrive) */
#define VS_SPEC_TAGMATCH_ALREADY_ARRIVED "message %d already arrived (each message arrives once)"
/* a second cancel of a receive the NIC is cancelling (offload.sw_cancel) */
#define VS_SPEC_TAGMATCH_ALREADY_CANCELLING "receive %d is already being cancelled"

/* -------- tag matching: parameters (spec/tagmatch/system.py PARAMS) */
/* sending ranks */
#define VS_SPEC_TAGMATCH_SENDERS_DEFAULT 1
#define VS_SPEC_TAGMATCH_SENDERS_MIN 1
#define VS_SPEC_TAGMATCH_SENDERS_MAX 4
/* messages each sender sends */
#define VS_SPEC_TAGMATCH_MESSAGES_DEFAULT 2
#define VS_SPEC_TAGMATCH_MESSAGES_MIN 0
#define VS_SPEC_TAGMATCH_MESSAGES_MAX 4
/* receives the receiver posts */
#define VS_SPEC_TAGMATCH_RECEIVES_DEFAULT 2
#define VS_SPEC_TAGMATCH_RECEIVES_MIN 0
#define VS_SPEC_TAGMATCH_RECEIVES_MAX 4
/* tag values 0..tags-1 (receives may also use ANY_TAG) */
#define VS_SPEC_TAGMATCH_TAGS_DEFAULT 1
#define VS_SPEC_TAGMATCH_TAGS_MIN 1
#define VS_SPEC_TAGMATCH_TAGS_MAX 4
/* communicators 0..comms-1 */
#define VS_SPEC_TAGMATCH_COMMS_DEFAULT 1
#define VS_SPEC_TAGMATCH_COMMS_MIN 1
#define VS_SPEC_TAGMATCH_COMMS_MAX 3
/* message and buffer lengths range over 1..max_bytes */
#define VS_SPEC_TAGMATCH_MAX_BYTES_DEFAULT 2
#define VS_SPEC_TAGMATCH_MAX_BYTES_MIN 1
#define VS_SPEC_TAGMATCH_MAX_BYTES_MAX 4
/* longest eager message; longer ones use rendezvous */
#define VS_SPEC_TAGMATCH_EAGER_LIMIT_DEFAULT 1
#define VS_SPEC_TAGMATCH_EAGER_LIMIT_MIN 0
#define VS_SPEC_TAGMATCH_EAGER_LIMIT_MAX 4
/* hardware tag-list capacity (0: no offload) */
#define VS_SPEC_TAGMATCH_CAPACITY_DEFAULT 1
#define VS_SPEC_TAGMATCH_CAPACITY_MIN 0
#define VS_SPEC_TAGMATCH_CAPACITY_MAX 4
/* 1: the receiver may cancel receives */
#define VS_SPEC_TAGMATCH_CANCEL_DEFAULT 1
#define VS_SPEC_TAGMATCH_CANCEL_MIN 0
#define VS_SPEC_TAGMATCH_CANCEL_MAX 1
/* 1: the receiver may probe */
#define VS_SPEC_TAGMATCH_PROBE_DEFAULT 1
#define VS_SPEC_TAGMATCH_PROBE_MIN 0
#define VS_SPEC_TAGMATCH_PROBE_MAX 1

#endif
