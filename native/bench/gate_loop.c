/* bench_gate: the C gate engine's cost per steady-state decode gate, driven by a C loop at ds4's
 * defaults (window 16, 24,576-byte vectors in two chunks): call_gate, post the send chain, one
 * poll's completions (both sends, both receive chunks), repost seq + window, consume. Prints
 * nanoseconds per gate. Usage: bench_gate GATES */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gate_engine.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_gate GATES\n");
        return 1;
    }
    unsigned long long n = strtoull(argv[1], NULL, 10);
    vs_gate_config c = {24576, 16384, 16, 86, 86, 0, 1, 0, 1024, 1024, 256, 64, 256 * 16384};
    vs_gate *e;
    if (vs_gate_create(&c, 0, &e, NULL, 0)) return 2;
    vs_gate_tcp barrier = {VS_GATE_TCP_BYTE, 0xD1, 0, 0};
    if (vs_gate_setup(e) || vs_gate_call_gate(e, 0, 0, 1) || vs_gate_advance(e)
        || vs_gate_advance(e) || vs_gate_tcp_read(e, &barrier)) return 3;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long long seq = 1; seq <= n; seq++) {
        unsigned long long slot = (seq - 1) % 86;
        if (seq > 1 && vs_gate_call_gate(e, slot / 2, slot % 2, seq)) return 4;
        vs_gate_completion polled[4] = {{VS_GATE_OP_SEND, 0, seq, 16384},
                                        {VS_GATE_OP_SEND, 0, seq, 8192},
                                        {VS_GATE_OP_RECV, 0, 0, 16384},
                                        {VS_GATE_OP_RECV, 0, seq, 8192}};
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
