/* bench_gate: the C gate engine's cost per steady-state decode gate, driven by a C loop at ds4's
 * defaults, the spec's (native/generated/spec_constants.h: window 16, 24,576-byte vectors in two
 * chunks): call_gate, post the send chain, one poll's completions (both sends, both receive
 * chunks), repost seq + window, consume. Prints nanoseconds per gate. Usage: bench_gate GATES */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 199309L   /* clock_gettime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gate_engine.h"

/* parameter NAME's default */
#define SPEC(name) VS_SPEC_GATE_##name##_DEFAULT

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_gate GATES\n");
        return 1;
    }
    unsigned long long n = strtoull(argv[1], NULL, 10);
    vs_gate_config c = {
        .vec_bytes = SPEC(VEC_BYTES), .max_msg = SPEC(MAX_MSG), .window = SPEC(WINDOW),
        .gates_per_token = SPEC(GATES_PER_TOKEN), .n_slots = SPEC(N_SLOTS),
        .slot_start = SPEC(SLOT_START), .slot_step = SPEC(SLOT_STEP), .slot_mask = SPEC(SLOT_MASK),
        .rq_depth = SPEC(RQ_DEPTH), .sq_depth = SPEC(SQ_DEPTH), .big_depth = SPEC(BIG_DEPTH),
        .chain_max = SPEC(CHAIN_MAX), .staging_bytes = SPEC(STAGING_BYTES)};
    /* a vector's two chunks, and the slot schedule's length (identity: gates_per_token) */
    const uint64_t first = c.max_msg, second = c.vec_bytes - c.max_msg;
    const unsigned long long slots = c.gates_per_token;
    if (c.vec_bytes <= c.max_msg || second > c.max_msg || c.slot_mask || c.slot_start
        || c.slot_step != 1) return 2;
    vs_gate *e;
    if (vs_gate_create(&c, 0, &e, NULL, 0)) return 2;
    vs_gate_tcp barrier = {VS_GATE_TCP_BYTE, VS_GATE_WINDOW_BARRIER, 0, 0};
    if (vs_gate_setup(e) || vs_gate_call_gate(e, 0, 0, 1) || vs_gate_advance(e)
        || vs_gate_advance(e) || vs_gate_tcp_read(e, &barrier)) return 3;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long long seq = 1; seq <= n; seq++) {
        unsigned long long slot = (seq - 1) % slots;
        if (seq > 1 && vs_gate_call_gate(e, slot / 2, slot % 2, seq)) return 4;
        vs_gate_completion polled[4] = {{VS_GATE_OP_SEND, VS_GATE_WC_SUCCESS, seq, first},
                                        {VS_GATE_OP_SEND, VS_GATE_WC_SUCCESS, seq, second},
                                        {VS_GATE_OP_RECV, VS_GATE_WC_SUCCESS, 0, first},
                                        {VS_GATE_OP_RECV, VS_GATE_WC_SUCCESS, seq, second}};
        uint32_t size;
        if (vs_gate_advance(e) || vs_gate_poll_size(e, &size)
            || vs_gate_completions(e, polled, 4) || vs_gate_advance(e) || vs_gate_consume(e))
            return 5;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (vs_gate_out(e)->result[0] || vs_gate_last_gate_seq(e) != n) return 6;
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.1f\n", ns / (double)n);
    vs_gate_destroy(e);
    return 0;
}
