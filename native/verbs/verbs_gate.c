/* verbs_gate: one rank of the gate protocol over a real UC (or, with --qp rc, RC) queue pair,
 * the C gate engine (native/gate/gate_engine.h) driven over libibverbs, with the TCP connection
 * as the protocol's side channel (barrier bytes and big-gate headers, as
 * refimpl/transport/side_channel.py writes them; verify-block and batch headers in a frame of
 * this program's own, write_item).
 *
 *   verbs_gate --rank R --device DEV (--listen PORT | --peer HOST:PORT) [options]
 *
 * The run: N decode gates (the first arms the window), a big gate of M bytes in windows of the
 * granted depth (it drains the window first), V verify blocks of L layers x R rows (each a
 * header exchange, the drain when the window is armed, then a batch gate per layer), then K more
 * gates (the first re-arms). Every gate vector, big-gate chunk and verify-block row is filled
 * with a pattern keyed by (rank, gate seq), (rank, big gate, chunk) or (rank, block, row) and
 * checked word by word on arrival against the peer's: a message lost on UC shifts the pairing
 * and fails the check, so no wrong payload is taken. With --trace FILE
 * every post, poll and side-channel item goes to FILE as JSON lines (docs/verbs.md). --json
 * prints the outcome as one JSON object. Exit 0: every payload verified; 1: the run failed (the
 * reason on stderr); 2: bad arguments; 3: the rank left on purpose (--exit-after).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "gate_engine.h"
#include "verbs_common.h"
#include "verbs_qp.h"

/* The protocol's parameters take the spec's defaults and bounds (native/generated/
 * spec_constants.h); vectors, messages and big gates are whole 8-byte words besides (the
 * payload pattern is written in words). */
#define SPEC(name) VS_SPEC_GATE_##name
#define WORD 8u

#define PEER_CHECK_EVERY 4096u      /* empty polls between liveness checks of the peer */
#define CLOCK_CHECK_EVERY 64u       /* empty polls between deadline checks */
#define HEADER_BYTES 32u            /* magic, layer, gate, number, chunks, depth */
#define BLOCK_MAGIC UINT32_C(0x4B425356)    /* "VSBK": a verify-block or batch header */
#define N_SETTINGS 11
#define MAX_BLOCKS 1000000u         /* verify blocks a run makes: the key holds 20 bits */
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_LEFT 3

/* The registered regions: the engine's in-slots, out-slots and staging (vs_gate_buf), the send
 * side's own staging (the engine addresses both stagings as VS_GATE_BUF_STAGE), and a verify
 * block's rows received and sent. Registered in this order (the raw profile reads them so). */
enum { R_IN, R_OUT, R_STAGE, R_STAGE_OUT, R_BLK, R_BOUT, N_REGIONS };
static const int32_t REGION_BUF[N_REGIONS] = {VS_GATE_BUF_IN, VS_GATE_BUF_OUT, VS_GATE_BUF_STAGE,
                                              VS_GATE_BUF_STAGE, VS_GATE_BUF_BLK,
                                              VS_GATE_BUF_BOUT};

/* A region's name in the trace: the spec's name of its buffer (native/generated/
 * spec_constants.h), the send side's staging apart. */
static const char *region_name(int reg)
{
    static const char *const BUF_NAMES[VS_GATE_N_BUFS] = VS_SPEC_GATE_BUF_NAMES;
    return reg == R_STAGE_OUT ? "stage_out" : BUF_NAMES[REGION_BUF[reg]];
}

typedef struct {
    vc_endpoint ep;
    uint64_t gates, more_gates, big_bytes, vec_bytes, max_msg, window, cq_depth;
    int timeout_ms;
    uint64_t exit_after;            /* 0: never */
    int rc;                         /* --qp rc: a reliable queue pair (else UC) */
    uint64_t verify_blocks, block_layers, block_rows;
} options;

typedef struct {
    options o;
    vs_gate_config cfg;
    vs_gate *e;
    vq_dev dev;
    int fd;
    uint8_t *mem[N_REGIONS];
    size_t len[N_REGIONS];
    struct ibv_mr *mr[N_REGIONS];
    size_t cap;                     /* work requests one emitted step may hold */
    struct ibv_recv_wr *rwr;
    struct ibv_send_wr *swr;
    struct ibv_sge *sge;
    struct ibv_wc *wc;
    vs_gate_completion *polled;
    size_t poll_cap;
    FILE *trace;
    /* the big gate in progress */
    int in_big, big_xfer;
    uint64_t big_no, big_base, big_win;
    uint64_t peer_window, peer_max_msg;     /* the peer's hello, from the plan exchange */
    uint64_t block_no;              /* the verify block in progress, from 1 */
    /* the outcome */
    uint64_t gates, big_gates, big_bytes, verify_blocks, verified, mismatches, drops;
    double *lat_us;
    size_t n_lat;
    double gate_seconds, big_seconds, wall_seconds;
    char error[VQ_ERR];
} rank_t;

static int fail(rank_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(rank_t *r, const char *fmt, ...)
{
    if (r->error[0])
        return -1;                  /* the first failure is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    return -1;
}

static int refused(rank_t *r, const char *call)
{
    return fail(r, "the gate engine refused %s: %s", call, vs_gate_refusal(r->e));
}

/* ------------------------------------------------------------------ payload patterns */
static uint64_t gate_key(int rank, uint64_t seq) { return (uint64_t)rank << 62 | seq; }

static uint64_t chunk_key(int rank, uint64_t big, uint64_t chunk)
{
    return (uint64_t)rank << 62 | UINT64_C(1) << 61 | big << 40 | chunk;
}

/* A verify-block row's key: bit 60 set (gate keys have bits 60-61 clear, chunk keys bit 61
 * set), the block below MAX_BLOCKS in bits 40-59, the row counted through the block below. */
static uint64_t block_key(int rank, uint64_t block, uint64_t row)
{
    return (uint64_t)rank << 62 | UINT64_C(1) << 60 | block << 40 | row;
}

/* The region a work request addresses: staging sends read the send side's staging. */
static int region_of(const vs_gate_wr *w, int sends)
{
    switch (w->buf) {
    case VS_GATE_BUF_IN: return R_IN;
    case VS_GATE_BUF_OUT: return R_OUT;
    case VS_GATE_BUF_BLK: return R_BLK;
    case VS_GATE_BUF_BOUT: return R_BOUT;
    default: return sends ? R_STAGE_OUT : R_STAGE;
    }
}

/* ------------------------------------------------------------------ the trace */
static void trace_wrs(rank_t *r, const char *ev, const vs_gate_wr *w, size_t n, int sends)
{
    fprintf(r->trace, "{\"ev\": \"%s\", \"wrs\": [", ev);
    for (size_t i = 0; i < n; i++) {
        int reg = region_of(&w[i], sends);
        fprintf(r->trace, "%s[%" PRIu64 ", \"%s\", %" PRIu64 ", %" PRIu64, i ? ", " : "",
                w[i].wr_id, region_name(reg), w[i].offset, w[i].length);
        if (sends)
            fprintf(r->trace, ", %s", w[i].signaled ? "true" : "false");
        fputc(']', r->trace);
    }
    fputs("]}\n", r->trace);
}

/* An item's kind as the spec names it (spec/gate/wire.py TcpItem). */
static const char *tcp_kind(int32_t kind)
{
    switch (kind) {
    case VS_GATE_TCP_HEADER: return "header";
    case VS_GATE_TCP_BLOCK: return "block";
    case VS_GATE_TCP_BATCH: return "batch";
    default: return "byte";
    }
}

static void trace_tcp(rank_t *r, const char *ev, const vs_gate_tcp *t)
{
    fprintf(r->trace, "{\"ev\": \"%s\", \"kind\": \"%s\", \"value\": %" PRIu64 ", \"chunks\": %"
            PRIu64 ", \"depth\": %" PRIu64 "}\n", ev, tcp_kind(t->kind), t->value, t->chunks,
            t->depth);
}

static void trace_result(rank_t *r, int ok)
{
    if (r->trace == NULL)
        return;
    if (ok) {
        fputs("{\"ev\": \"result\", \"ok\": true}\n", r->trace);
        return;
    }
    fputs("{\"ev\": \"result\", \"ok\": false, \"error\": ", r->trace);
    vc_json_text(r->trace, r->error);
    fputs("}\n", r->trace);
}

/* The begin line: the GateConfig fields. big_gates and verify_blocks are the spec's workload
 * switches (1: the run makes big gates, verify blocks), not counts. */
static void trace_begin(rank_t *r)
{
    const vs_gate_config *c = &r->cfg;
    uint64_t ops = r->o.gates + r->o.more_gates + (r->o.big_bytes ? 1 : 0) + r->o.verify_blocks;
    fprintf(r->trace, "{\"ev\": \"begin\", \"protocol\": \"gate\", \"rank\": %d, \"transport\": "
            "\"verbs-c\", \"engine\": \"native\", \"config\": {\"vec_bytes\": %" PRIu64
            ", \"max_msg\": %" PRIu64 ", \"window\": %" PRIu64 ", \"gates_per_token\": %" PRIu64
            ", \"n_slots\": %" PRIu64 ", \"slot_start\": %" PRIu64 ", \"slot_step\": %" PRIu64
            ", \"slot_mask\": %" PRIu64 ", \"rq_depth\": %" PRIu64 ", \"sq_depth\": %" PRIu64
            ", \"cq_depth\": %" PRIu64 ", \"big_depth\": %" PRIu64 ", \"chain_max\": %" PRIu64
            ", \"staging_bytes\": %" PRIu64 ", \"big_last_bytes\": %" PRIu64
            ", \"timeout_ms\": %d, \"qp_type\": \"%s\", "
            "\"unsignaled_completions\": 0, \"faults\": 1, \"wire_loss\": 0, \"ops\": %" PRIu64
            ", \"big_gates\": %d, \"verify_blocks\": %d, \"block_layers\": %" PRIu64
            ", \"block_rows\": %" PRIu64 "}}\n", r->o.ep.rank, c->vec_bytes, c->max_msg, c->window,
            c->gates_per_token, c->n_slots, c->slot_start, c->slot_step, c->slot_mask,
            c->rq_depth, c->sq_depth, r->o.cq_depth, c->big_depth, c->chain_max,
            c->staging_bytes, c->big_last_bytes, r->o.timeout_ms, r->o.rc ? "rc" : "uc", ops,
            r->o.big_bytes ? 1 : 0, r->o.verify_blocks ? 1 : 0, c->block_layers, c->block_rows);
}

/* ------------------------------------------------------------------ carrying out a step */
static int post_recvs(rank_t *r, const vs_gate_wr *w, size_t n)
{
    if (n > r->cap)
        return fail(r, "the engine emitted %zu receives, more than the %zu this driver holds",
                     n, r->cap);
    for (size_t i = 0; i < n; i++) {
        int reg = region_of(&w[i], 0);
        if (w[i].length && w[i].offset + w[i].length > r->len[reg])
            return fail(r, "receive wr_id %" PRIu64 " reaches past the %s region", w[i].wr_id,
                        region_name(reg));
        r->sge[i] = (struct ibv_sge){
            .addr = (uintptr_t)(r->mem[reg] + w[i].offset), .length = (uint32_t)w[i].length,
            .lkey = r->mr[reg] ? r->mr[reg]->lkey : 0};
        r->rwr[i] = (struct ibv_recv_wr){.wr_id = w[i].wr_id, .sg_list = &r->sge[i],
                                         .num_sge = w[i].length ? 1 : 0,
                                         .next = i + 1 < n ? &r->rwr[i + 1] : NULL};
    }
    if (r->trace)
        trace_wrs(r, "post_recv", w, n, 0);
    if (r->in_big && w[0].buf == VS_GATE_BUF_STAGE) {
        /* staging receives numbered from 1 begin a big-gate window */
        if ((w[0].wr_id & ~VS_GATE_TAG_MASK) == 1)
            r->big_win = 0;
        r->big_win += n;
    }
    struct ibv_recv_wr *bad = NULL;
    int rc = ibv_post_recv(r->dev.qp, r->rwr, &bad);
    if (rc)
        return fail(r, "ibv_post_recv failed: %s (errno %d) at wr_id %" PRIu64, strerror(rc),
                    rc, bad ? bad->wr_id : 0);
    return 0;
}

static int post_sends(rank_t *r, const vs_gate_wr *w, size_t n)
{
    if (n > r->cap)
        return fail(r, "the engine emitted %zu sends, more than the %zu this driver holds", n,
                    r->cap);
    for (size_t i = 0; i < n; i++) {
        int reg = region_of(&w[i], 1);
        if (w[i].length && w[i].offset + w[i].length > r->len[reg])
            return fail(r, "send wr_id %" PRIu64 " reaches past the %s region", w[i].wr_id,
                        region_name(reg));
        if (reg == R_STAGE_OUT && vs_gate_phase_of(r->e) != VS_GATE_DRAIN_WAIT) {
            /* stage this window's chunk (its 1-based index in the wr_id) for sending; a drain
             * dummy sends the scratch as it is */
            uint64_t k = r->big_base + (w[i].wr_id & ~VS_GATE_TAG_MASK) - 1;
            vc_fill(r->mem[R_STAGE_OUT] + w[i].offset, w[i].length,
                 chunk_key(r->o.ep.rank, r->big_no, k));
        }
        r->sge[i] = (struct ibv_sge){
            .addr = (uintptr_t)(r->mem[reg] + w[i].offset), .length = (uint32_t)w[i].length,
            .lkey = r->mr[reg] ? r->mr[reg]->lkey : 0};
        r->swr[i] = (struct ibv_send_wr){
            .wr_id = w[i].wr_id, .sg_list = &r->sge[i], .num_sge = w[i].length ? 1 : 0,
            .opcode = IBV_WR_SEND, .send_flags = w[i].signaled ? IBV_SEND_SIGNALED : 0,
            .next = i + 1 < n ? &r->swr[i + 1] : NULL};
    }
    if (r->trace)
        trace_wrs(r, "post_send", w, n, 1);
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(r->dev.qp, r->swr, &bad);
    if (rc)
        return fail(r, "ibv_post_send failed: %s (errno %d) at wr_id %" PRIu64, strerror(rc),
                    rc, bad ? bad->wr_id : 0);
    return 0;
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A verify-block or batch header as this program frames it, HEADER_BYTES little-endian bytes:
 * magic "VSBK" (0-3), kind VS_GATE_TCP_BLOCK or _BATCH (4-7), the value (8-15: a block's
 * layers, a batch gate's layer), rows per layer (16-23), the seq (24-31: a batch gate's, the
 * big-gate number it takes; 0 in a block header). The fields are those of ds4's gate header
 * (ds4_tp.c 90-95: magic, layer, gate, seq), which its batch gate fills with the layer, the
 * rows and the seq (ds4_tp_batch_gate_exchange, 2245-2246); ds4's block begin writes no header
 * and drains at once (ds4_tp_batch_block_begin, 2186-2202), so the block header is the spec's
 * rendezvous before the drain, framed here with a magic of its own and whole 8-byte fields. */
static void put_block_frame(uint8_t *buf, const vs_gate_tcp *t)
{
    vc_put_le(buf, BLOCK_MAGIC, 4);
    vc_put_le(buf + 4, (uint64_t)t->kind, 4);
    vc_put_le(buf + 8, t->value, 8);
    vc_put_le(buf + 16, t->chunks, 8);
    vc_put_le(buf + 24, t->depth, 8);
}

/* An item's bytes on the side channel: one barrier byte, or a 32-byte header; their count. */
static size_t frame_item(uint8_t *buf, const vs_gate_tcp *t)
{
    switch (t->kind) {
    case VS_GATE_TCP_HEADER:
        vc_put_le(buf, VS_GATE_HEADER_MAGIC, 4);
        vc_put_le(buf + 4, VS_GATE_BIG_LAYER, 4);
        vc_put_le(buf + 8, VS_GATE_BIG_MAGIC, 4);
        vc_put_le(buf + 12, t->value, 8);
        vc_put_le(buf + 20, t->chunks, 8);
        vc_put_le(buf + 28, t->depth, 4);
        return HEADER_BYTES;
    case VS_GATE_TCP_BLOCK:
    case VS_GATE_TCP_BATCH:
        put_block_frame(buf, t);
        return HEADER_BYTES;
    default:
        buf[0] = (uint8_t)t->value;
        return 1;
    }
}

static int write_item(rank_t *r, const vs_gate_tcp *t)
{
    uint8_t buf[HEADER_BYTES];
    size_t n = frame_item(buf, t);
    if (r->trace)
        trace_tcp(r, "tcp_write", t);
    vq_err err;
    if (vq_write_full(r->fd, buf, n, &err))
        return fail(r, "%s", err.text);
    return 0;
}

/* The window's chunks all landed: check each against the peer's pattern (the big gate's last
 * chunk holds its remainder). */
static int window_done(rank_t *r)
{
    const uint64_t m = r->cfg.max_msg, last = (r->o.big_bytes + m - 1) / m - 1;
    for (uint64_t i = 0; i < r->big_win; i++) {
        uint64_t k = r->big_base + i;
        uint64_t len = k == last && r->cfg.big_last_bytes ? r->cfg.big_last_bytes : m;
        long long at = vc_first_bad(r->mem[R_STAGE] + i * m, len, chunk_key(1 - r->o.ep.rank,
                                                                           r->big_no, k));
        if (at >= 0) {
            r->mismatches++;
            return fail(r, "big gate %" PRIu64 ": chunk %" PRIu64 " failed its check at byte %lld"
                        ": a message was lost or landed in another's receive", r->big_no, k, at);
        }
        r->verified++;
    }
    r->big_base += r->big_win;
    return 0;
}

/* Carries out what the last engine call emitted, in order: receives, sends, TCP writes. */
static int apply(rank_t *r)
{
    const vs_gate_emitted *em = vs_gate_out(r->e);
    if (em->n_recvs && post_recvs(r, em->recvs, em->n_recvs))
        return -1;
    if (em->n_sends && post_sends(r, em->sends, em->n_sends))
        return -1;
    for (size_t i = 0; i < em->n_tcp; i++)
        if (write_item(r, &em->tcp_out[i]))
            return -1;
    for (size_t i = 0; i < em->n_log; i++)
        fprintf(stderr, "verbs_gate rank %d: %s\n", r->o.ep.rank, em->log[i]);
    if (r->in_big) {
        int xfer = vs_gate_phase_of(r->e) == VS_GATE_BIG_XFER;
        if (r->big_xfer && !xfer && vs_gate_phase_of(r->e) != VS_GATE_FAILED
            && window_done(r))
            return -1;
        r->big_xfer = xfer;
    }
    if (em->result[0])
        return fail(r, "%s", em->result);
    return 0;
}

/* Whether the rank reads a header next (a big-gate, verify-block or batch header): only then
 * is a first byte that begins a header's magic read as a header's. */
static int reads_header(const rank_t *r)
{
    int32_t phase = vs_gate_phase_of(r->e);
    return phase == VS_GATE_BIG_HDR_READ || phase == VS_GATE_BLOCK_HDR_READ
           || phase == VS_GATE_BATCH_HDR_READ;
}

static int header_start(uint8_t b)
{
    return b == (VS_GATE_HEADER_MAGIC & 0xFF) || b == (BLOCK_MAGIC & 0xFF);
}

/* A header's HEADER_BYTES as the item they frame (write_item's framings), or its first byte
 * as a stray byte when its magic or kind is none of them. */
static vs_gate_tcp parse_header(const uint8_t *buf)
{
    uint64_t magic = get_le(buf, 4), kind = get_le(buf + 4, 4);
    if (magic == VS_GATE_HEADER_MAGIC)
        return (vs_gate_tcp){VS_GATE_TCP_HEADER, get_le(buf + 12, 8), get_le(buf + 20, 8),
                             get_le(buf + 28, 4)};
    if (magic == BLOCK_MAGIC && (kind == VS_GATE_TCP_BLOCK || kind == VS_GATE_TCP_BATCH))
        return (vs_gate_tcp){(int32_t)kind, get_le(buf + 8, 8), get_le(buf + 16, 8),
                             get_le(buf + 24, 8)};
    return (vs_gate_tcp){VS_GATE_TCP_BYTE, buf[0], 0, 0};
}

static int read_item(rank_t *r)
{
    int header = reads_header(r);
    uint8_t buf[HEADER_BYTES];
    vq_err err;
    int got = vq_read_full(r->fd, buf, 1, r->o.ep.side_timeout_ms, &err);
    int whole = got == 0 && header && header_start(buf[0]);
    if (whole)
        got = vq_read_full(r->fd, buf + 1, HEADER_BYTES - 1, r->o.ep.side_timeout_ms, &err);
    if (got < 0)
        return fail(r, "%s", err.text);
    if (got == 1) {
        if (vs_gate_peer_closed(r->e))
            return refused(r, "peer_closed");
        return apply(r);
    }
    vs_gate_tcp t = whole ? parse_header(buf) : (vs_gate_tcp){VS_GATE_TCP_BYTE, buf[0], 0, 0};
    if (r->trace)
        trace_tcp(r, "tcp_read", &t);
    if (vs_gate_tcp_read(r->e, &t))
        return refused(r, "tcp_read");
    return apply(r);
}

static const char *op_name(int32_t op) { return op == VS_GATE_OP_SEND ? "send" : "recv"; }

/* One poll of up to `size` entries; the count, or -1. */
static int poll_once(rank_t *r, uint32_t size)
{
    if (size > r->poll_cap)
        size = (uint32_t)r->poll_cap;
    int n = ibv_poll_cq(r->dev.cq, (int)size, r->wc);
    if (n < 0)
        return fail(r, "ibv_poll_cq failed (returned %d)", n);
    for (int i = 0; i < n; i++) {
        const struct ibv_wc *w = &r->wc[i];
        int32_t op = w->status == IBV_WC_SUCCESS
                         ? (w->opcode & IBV_WC_RECV ? VS_GATE_OP_RECV : VS_GATE_OP_SEND)
                         : (w->opcode == IBV_WC_RECV ? VS_GATE_OP_RECV : VS_GATE_OP_SEND);
        r->polled[i] = (vs_gate_completion){op, (int32_t)w->status, w->wr_id, w->byte_len};
    }
    if (n && r->trace) {
        fputs("{\"ev\": \"poll\", \"cqes\": [", r->trace);
        for (int i = 0; i < n; i++)
            fprintf(r->trace, "%s[\"%s\", %" PRIu64 ", %d, %" PRIu64 "]", i ? ", " : "",
                    op_name(r->polled[i].opcode), r->polled[i].wr_id, r->polled[i].status,
                    r->polled[i].byte_len);
        fputs("]}\n", r->trace);
    }
    return n;
}

/* Drives the engine until the application's turn comes back (0) or the rank fails (-1). */
static int drive(rank_t *r)
{
    double deadline = 0;
    unsigned empty = 0;
    for (;;) {
        switch (vs_gate_next_step(r->e)) {
        case VS_GATE_STEP_CALL:
            return 0;
        case VS_GATE_STEP_DEAD:
            return fail(r, "%s", vs_gate_error(r->e));
        case VS_GATE_STEP_SETUP:
            if (vs_gate_setup_hello(r->e, r->peer_window, r->peer_max_msg))
                return refused(r, "setup");
            if (apply(r))
                return -1;
            break;
        case VS_GATE_STEP_ADVANCE:
            deadline = 0;
            if (vs_gate_advance(r->e))
                return refused(r, "advance");
            if (apply(r))
                return -1;
            break;
        case VS_GATE_STEP_READ:
            if (read_item(r))
                return -1;
            break;
        case VS_GATE_STEP_POLL: {
            if (deadline == 0) {
                deadline = vc_now_s() + r->o.timeout_ms / 1000.0;
                empty = 0;
            }
            uint32_t size;
            if (vs_gate_poll_size(r->e, &size))
                return refused(r, "poll_size");
            int n = poll_once(r, size);
            if (n < 0)
                return -1;
            if (n > 0) {
                if (vs_gate_completions(r->e, r->polled, (size_t)n))
                    return refused(r, "completions");
                if (apply(r))
                    return -1;
                break;
            }
            empty++;
            if (empty % PEER_CHECK_EVERY == 0 && vq_peer_closed(r->fd)) {
                if (vs_gate_peer_closed(r->e))
                    return refused(r, "peer_closed");
                if (apply(r))
                    return -1;
            } else if (empty % CLOCK_CHECK_EVERY == 0 && vc_now_s() > deadline) {
                if (vs_gate_timeout(r->e))
                    return refused(r, "timeout");
                if (apply(r))
                    return -1;
            }
            break;
        }
        }
    }
}

/* ------------------------------------------------------------------ the application */
static int one_gate(rank_t *r, uint64_t seq)
{
    const vs_gate_config *c = &r->cfg;
    uint64_t slot = (seq - 1) % c->n_slots;
    uint64_t layer = slot / 2, gate = slot % 2;
    vc_fill(r->mem[R_OUT] + slot * c->vec_bytes, c->vec_bytes, gate_key(r->o.ep.rank, seq));
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"exchange\", \"args\": {\"layer\": %"
                PRIu64 ", \"gate\": %" PRIu64 ", \"seq\": %" PRIu64 "}}\n", layer, gate, seq);
    double t0 = vc_now_s();
    if (vs_gate_call_gate(r->e, layer, gate, seq))
        return refused(r, "call_gate");
    if (apply(r) || drive(r)) {
        if (strncmp(r->error, "timeout waiting gate", 20) == 0)
            r->drops++;             /* the gate's message never came: lost on the wire */
        trace_result(r, 0);
        return -1;
    }
    r->lat_us[r->n_lat++] = (vc_now_s() - t0) * 1e6;
    long long at = vc_first_bad(r->mem[R_IN] + slot * c->vec_bytes, c->vec_bytes,
                             gate_key(1 - r->o.ep.rank, seq));
    if (at >= 0) {
        r->mismatches++;
        fail(r, "gate %" PRIu64 ": the payload in slot %" PRIu64 " failed its check at byte %lld"
             ": a message was lost or landed in another's receive", seq, slot, at);
        trace_result(r, 0);
        return -1;
    }
    r->verified++;
    if (vs_gate_consume(r->e))
        return refused(r, "consume");
    r->gates++;
    trace_result(r, 1);
    return 0;
}

static int run_gates(rank_t *r, uint64_t first, uint64_t n)
{
    double t0 = vc_now_s();
    for (uint64_t seq = first; seq < first + n; seq++) {
        if (one_gate(r, seq))
            return -1;
        if (r->o.exit_after && seq == r->o.exit_after) {
            fprintf(stderr, "verbs_gate rank %d: leaving after gate %" PRIu64
                    " without a word (--exit-after)\n", r->o.ep.rank, seq);
            _exit(EXIT_LEFT);
        }
    }
    r->gate_seconds += vc_now_s() - t0;
    return 0;
}

static int big_gate(rank_t *r)
{
    uint64_t chunks = (r->o.big_bytes + r->cfg.max_msg - 1) / r->cfg.max_msg;
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"big_exchange\", \"args\": {\"bytes\": "
                "%" PRIu64 ", \"chunks\": %" PRIu64 "}}\n", r->o.big_bytes, chunks);
    double t0 = vc_now_s();
    r->in_big = 1;
    r->big_xfer = 0;
    r->big_no++;
    r->big_base = r->big_win = 0;
    if (vs_gate_call_big(r->e, chunks))
        return refused(r, "call_big");
    int rc = apply(r) || drive(r) ? -1 : 0;
    r->in_big = 0;
    if (rc == 0 && r->big_base != chunks)
        rc = fail(r, "big gate %" PRIu64 ": %" PRIu64 " of %" PRIu64 " chunks checked",
                  r->big_no, r->big_base, chunks);
    trace_result(r, rc == 0);
    if (rc)
        return -1;
    r->big_seconds += vc_now_s() - t0;
    r->big_gates++;
    r->big_bytes += r->o.big_bytes;
    return 0;
}

/* Every row of the verify block that landed against the peer's pattern. */
static int check_block(rank_t *r)
{
    const vs_gate_config *c = &r->cfg;
    for (uint64_t row = 0; row < c->block_layers * c->block_rows; row++) {
        long long at = vc_first_bad(r->mem[R_BLK] + row * c->vec_bytes, c->vec_bytes,
                                    block_key(1 - r->o.ep.rank, r->block_no, row));
        if (at >= 0) {
            r->mismatches++;
            return fail(r, "verify block %" PRIu64 ": row %" PRIu64 " (layer %" PRIu64 ") "
                        "failed its check at byte %lld: a message was lost or landed in "
                        "another's receive", r->block_no, row, row / c->block_rows, at);
        }
        r->verified++;
    }
    return 0;
}

/* One verify block (ds4_tp_batch_block_begin, a batch gate per layer, _end): every row this
 * rank sends filled with its pattern first, the engine driven until the block ends, then
 * every row received checked. */
static int verify_block(rank_t *r)
{
    const vs_gate_config *c = &r->cfg;
    r->block_no++;
    for (uint64_t row = 0; row < c->block_layers * c->block_rows; row++)
        vc_fill(r->mem[R_BOUT] + row * c->vec_bytes, c->vec_bytes,
                block_key(r->o.ep.rank, r->block_no, row));
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"verify_block\", \"args\": "
                "{\"layers\": %" PRIu64 ", \"rows\": %" PRIu64 "}}\n", c->block_layers,
                c->block_rows);
    if (vs_gate_call_block(r->e))
        return refused(r, "call_block");
    int rc = apply(r) || drive(r) || check_block(r) ? -1 : 0;
    trace_result(r, rc == 0);
    if (rc)
        return -1;
    r->verify_blocks++;
    return 0;
}

/* The end: each side closes its writing half and waits for the peer's, so neither tears its
 * queue pair down while the other may still be receiving. The peer closes only after its last
 * gate, which took every chunk this rank sent, so this rank's sends have all left its device;
 * the completions they left on the CQ go with it, unpolled (the protocol reaps only while it
 * waits, and the device trace records no step the spec does not take). */
static int finish(rank_t *r)
{
    if (r->trace)
        fputs("{\"ev\": \"call\", \"name\": \"close\", \"args\": {}}\n", r->trace);
    if (!r->error[0]) {
        shutdown(r->fd, SHUT_WR);
        uint8_t b;
        vq_err err;
        int got = vq_read_full(r->fd, &b, 1, r->o.ep.side_timeout_ms, &err);
        if (got < 0)
            fail(r, "close: %s", err.text);
        else if (got == 0)
            fail(r, "close: the peer sent byte 0x%02x after the last gate", b);
    }
    trace_result(r, !r->error[0]);
    return r->error[0] ? -1 : 0;
}

/* ------------------------------------------------------------------ setup */
/* The plan both ranks must share, in the order it travels (8 little-endian bytes each, after
 * the queue pair's address); the raw profile reads the same order. */
static const char *const SETTING_NAMES[N_SETTINGS] = {
    "rank", "vector bytes", "max_msg", "window", "gates", "more gates", "big-gate bytes",
    "queue pair type (0 uc, 1 rc)", "verify blocks", "block layers", "block rows"};

/* Both ranks write their queue pair's address and plan and read the peer's; a peer whose plan
 * differs is refused, naming the setting. */
static int exchange_plan(rank_t *r, vq_addr *remote)
{
    const options *o = &r->o;
    const vs_gate_config *c = &r->cfg;
    uint64_t mine[N_SETTINGS] = {(uint64_t)o->ep.rank, c->vec_bytes, c->max_msg, c->window,
                                 o->gates, o->more_gates, o->big_bytes, (uint64_t)o->rc,
                                 o->verify_blocks, c->block_layers, c->block_rows};
    uint8_t out[8 * N_SETTINGS], in[8 * N_SETTINGS];
    for (int i = 0; i < N_SETTINGS; i++)
        vc_put_le(out + 8 * i, mine[i], 8);
    vq_addr local;
    vq_err err;
    vq_local_addr(&r->dev, &local);
    if (vq_exchange(r->fd, &local, remote, out, in, sizeof out, o->ep.connect_timeout_ms, &err))
        return fail(r, "%s", err.text);
    if (get_le(in, 8) != (uint64_t)(1 - o->ep.rank))
        return fail(r, "the peer is rank %" PRIu64 ", and so is this rank", get_le(in, 8));
    for (int i = 1; i < N_SETTINGS; i++)
        if (get_le(in + 8 * i, 8) != mine[i])
            return fail(r, "the peer runs with %s %" PRIu64 ", this rank with %" PRIu64,
                        SETTING_NAMES[i], get_le(in + 8 * i, 8), mine[i]);
    r->peer_max_msg = get_le(in + 8 * 2, 8);
    r->peer_window = get_le(in + 8 * 3, 8);
    return 0;
}

static int setup(rank_t *r)
{
    options *o = &r->o;
    vq_err err;
    r->cfg = (vs_gate_config){
        .vec_bytes = o->vec_bytes, .max_msg = o->max_msg, .window = o->window,
        .gates_per_token = SPEC(GATES_PER_TOKEN_DEFAULT), .n_slots = SPEC(N_SLOTS_DEFAULT),
        .slot_start = SPEC(SLOT_START_DEFAULT), .slot_step = SPEC(SLOT_STEP_DEFAULT),
        .slot_mask = SPEC(SLOT_MASK_DEFAULT), .rq_depth = SPEC(RQ_DEPTH_DEFAULT),
        .sq_depth = SPEC(SQ_DEPTH_DEFAULT), .big_depth = SPEC(BIG_DEPTH_DEFAULT),
        .chain_max = SPEC(CHAIN_MAX_DEFAULT),
        .staging_bytes = SPEC(BIG_DEPTH_DEFAULT) * o->max_msg,   /* a window of whole chunks */
        .big_last_bytes = o->big_bytes % o->max_msg, .block_layers = o->block_layers,
        .block_rows = o->block_rows};
    char why[VS_GATE_TEXT];
    if (vs_gate_create(&r->cfg, 0, &r->e, why, sizeof why))
        return fail(r, "the gate configuration was refused: %s", why);
    const vs_gate_config *c = &r->cfg;
    r->len[R_IN] = r->len[R_OUT] = c->n_slots * c->vec_bytes;
    r->len[R_STAGE] = r->len[R_STAGE_OUT] = c->staging_bytes;
    /* a block's rows, a vector each, counted through its layers (the engine's row offsets) */
    r->len[R_BLK] = r->len[R_BOUT] = c->block_layers * c->block_rows * c->vec_bytes;
    for (int i = 0; i < N_REGIONS; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, r->len[i]))
            return fail(r, "no memory for the %s region (%zu bytes)", region_name(i),
                        r->len[i]);
        memset(p, 0, r->len[i]);
        r->mem[i] = p;
    }
    /* the longest chain: the arming window, a big-gate sub-batch, or a block layer's rows */
    uint64_t layer_wrs = c->block_rows * ((c->vec_bytes + c->max_msg - 1) / c->max_msg);
    r->cap = c->window * 2 + c->chain_max + 2;
    if (layer_wrs > r->cap)
        r->cap = layer_wrs;
    r->poll_cap = VS_GATE_DRAIN_POLL(c->window) > VS_GATE_BIG_POLL ? VS_GATE_DRAIN_POLL(c->window)
                                                                    : VS_GATE_BIG_POLL;
    r->rwr = calloc(r->cap, sizeof *r->rwr);
    r->swr = calloc(r->cap, sizeof *r->swr);
    r->sge = calloc(r->cap, sizeof *r->sge);
    r->wc = calloc(r->poll_cap, sizeof *r->wc);
    r->polled = calloc(r->poll_cap, sizeof *r->polled);
    r->lat_us = calloc(o->gates + o->more_gates + 1, sizeof *r->lat_us);
    if (!r->rwr || !r->swr || !r->sge || !r->wc || !r->polled || !r->lat_us)
        return fail(r, "out of memory");

    if (vq_open(&r->dev, o->ep.device, (uint8_t)o->ep.ib_port, o->ep.gid_index,
                o->rc ? IBV_QPT_RC : IBV_QPT_UC, (uint32_t)c->sq_depth, (uint32_t)c->rq_depth,
                (int)o->cq_depth, &err))
        return fail(r, "%s", err.text);
    for (int i = 0; i < N_REGIONS; i++)
        if (vq_reg(&r->dev, r->mem[i], r->len[i], IBV_ACCESS_LOCAL_WRITE, &r->mr[i],
                   region_name(i), &err))
            return fail(r, "%s", err.text);

    if (o->ep.listen_port) {
        if (vq_tcp_accept((uint16_t)atoi(o->ep.listen_port), o->ep.connect_timeout_ms, &r->fd, &err))
            return fail(r, "%s", err.text);
    } else {
        char host[256];
        const char *colon = strrchr(o->ep.peer, ':');
        size_t hl = (size_t)(colon - o->ep.peer);
        memcpy(host, o->ep.peer, hl);
        host[hl] = '\0';
        if (vq_tcp_connect(host, (uint16_t)atoi(colon + 1), o->ep.connect_timeout_ms, &r->fd,
                           &err))
            return fail(r, "%s", err.text);
    }
    vq_addr remote;
    if (exchange_plan(r, &remote))
        return -1;
    /* RC: rnr_retry 0, as the spec's fabric has it (and verbs_tagmatch): an RNR fails the run */
    if (vq_connect(&r->dev, &remote, 0, &err))
        return fail(r, "%s", err.text);
    if (o->ep.trace) {
        r->trace = fopen(o->ep.trace, "w");
        if (r->trace == NULL)
            return fail(r, "cannot write the trace %s: %s", o->ep.trace, strerror(errno));
        trace_begin(r);
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"connect\", \"args\": {\"peer_window\": %"
                PRIu64 ", \"peer_max_msg\": %" PRIu64 "}}\n", r->peer_window, r->peer_max_msg);
    }
    int rc = drive(r);              /* the engine's setup */
    trace_result(r, rc == 0);
    return rc;
}

static void teardown(rank_t *r)
{
    if (r->trace) {
        fputs("{\"ev\": \"end\"}\n", r->trace);
        fclose(r->trace);
    }
    /* teardown failures are reported; the run's outcome stands */
    for (int i = 0; i < N_REGIONS; i++) {
        int code = r->mr[i] ? ibv_dereg_mr(r->mr[i]) : 0;
        if (code)
            fprintf(stderr, "verbs_gate rank %d: ibv_dereg_mr failed for the %s region: %s "
                    "(errno %d)\n", r->o.ep.rank, region_name(i), strerror(code), code);
    }
    vq_err err;
    if (vq_close(&r->dev, &err))
        fprintf(stderr, "verbs_gate rank %d: %s\n", r->o.ep.rank, err.text);
    if (r->fd > 0)
        close(r->fd);
    for (int i = 0; i < N_REGIONS; i++)
        free(r->mem[i]);
    free(r->rwr);
    free(r->swr);
    free(r->sge);
    free(r->wc);
    free(r->polled);
    free(r->lat_us);
    vs_gate_destroy(r->e);
}

/* ------------------------------------------------------------------ output */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void print_json(rank_t *r)
{
    qsort(r->lat_us, r->n_lat, sizeof *r->lat_us, cmp_double);
    double mean = r->gates ? r->gate_seconds * 1e6 / (double)r->gates : 0;
    printf("{\"rank\": %d, \"device\": ", r->o.ep.rank);
    vc_json_text(stdout, r->o.ep.device);
    printf(", \"transport\": \"verbs-c\", \"qp_type\": \"%s\", \"gates\": %" PRIu64
           ", \"big_gates\": %" PRIu64 ", \"big_bytes\": %" PRIu64 ", \"verify_blocks\": %" PRIu64
           ", \"vector_bytes\": %" PRIu64 ", \"payloads_verified\": %"
           PRIu64 ", \"mismatches\": %" PRIu64 ", \"drops\": %" PRIu64
           ", \"round_trip_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f}"
           ", \"gates_per_s\": %.1f, \"big_mib_per_s\": %.2f, \"wall_s\": %.3f, \"ok\": %s"
           ", \"error\": ", r->o.rc ? "rc" : "uc", r->gates, r->big_gates, r->big_bytes,
           r->verify_blocks, r->cfg.vec_bytes, r->verified,
           r->mismatches, r->drops, pct(r->lat_us, r->n_lat, 0.5),
           pct(r->lat_us, r->n_lat, 0.99), mean,
           r->gate_seconds > 0 ? (double)r->gates / r->gate_seconds : 0,
           r->big_seconds > 0 ? (double)r->big_bytes / r->big_seconds / 1048576.0 : 0,
           r->wall_seconds, r->error[0] ? "false" : "true");
    vc_json_text(stdout, r->error);
    printf("}\n");
}

/* ------------------------------------------------------------------ arguments */
static char USAGE[2048];

static void usage_text(void)
{
    snprintf(USAGE, sizeof USAGE,
             "usage: verbs_gate --rank 0|1 --device DEV (--listen PORT | --peer HOST:PORT)\n"
             "  [--gid-index I (0)] [--ib-port P (1)] [--gates N (10000)] [--more-gates K "
             "(N/10)]\n"
             "  [--big-bytes M (12582912; 0: none)] [--vector-bytes B (%llu)] [--max-msg B "
             "(%llu)]\n"
             "  [--window W (%llu)] [--cq-depth C (%llu)] [--timeout-ms T (%llu)]\n"
             "  [--qp uc|rc (uc)] [--verify-blocks V (0)] [--block-layers L (%llu)] "
             "[--block-rows R (%llu)]\n"
             "  [--side-timeout-ms T (30000)] [--connect-timeout-ms T (60000)] "
             "[--exit-after SEQ]\n"
             "  [--json] [--trace FILE]\n",
             (unsigned long long)SPEC(VEC_BYTES_DEFAULT), (unsigned long long)SPEC(MAX_MSG_DEFAULT),
             (unsigned long long)SPEC(WINDOW_DEFAULT), (unsigned long long)SPEC(CQ_DEPTH_DEFAULT),
             (unsigned long long)SPEC(TIMEOUT_MS_DEFAULT),
             (unsigned long long)SPEC(BLOCK_LAYERS_DEFAULT),
             (unsigned long long)SPEC(BLOCK_ROWS_DEFAULT));
}

/* --qp: the queue pair's transport, uc or rc. */
static int parse_qp(const char *a, const char *v, options *o)
{
    if (strcmp(v, "uc") != 0 && strcmp(v, "rc") != 0) {
        fprintf(stderr, "verbs_gate: %s: expected uc or rc, got '%s'\n%s", a, v, USAGE);
        return -1;
    }
    o->rc = strcmp(v, "rc") == 0;
    return 0;
}

static int parse(int argc, char **argv, options *o)
{
    usage_text();
    *o = (options){.ep = vc_endpoint_defaults(), .gates = 10000, .more_gates = UINT64_MAX,
                   .big_bytes = 12u << 20, .vec_bytes = SPEC(VEC_BYTES_DEFAULT),
                   .max_msg = SPEC(MAX_MSG_DEFAULT), .window = SPEC(WINDOW_DEFAULT),
                   .cq_depth = SPEC(CQ_DEPTH_DEFAULT), .timeout_ms = SPEC(TIMEOUT_MS_DEFAULT),
                   .block_layers = SPEC(BLOCK_LAYERS_DEFAULT),
                   .block_rows = SPEC(BLOCK_ROWS_DEFAULT)};
    for (int i = 1; i < argc; i++) {
        const char *a, *v;
        int got = vc_option("verbs_gate", USAGE, argc, argv, &i, &a, &v, &o->ep);
        if (got < 0)
            return -1;
        if (got == 0)
            continue;
        uint64_t n;
        if (strcmp(a, "--gates") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, 1, UINT64_C(1) << 40, &o->gates))
                return -1;
        } else if (strcmp(a, "--more-gates") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, 0, UINT64_C(1) << 40, &o->more_gates))
                return -1;
        } else if (strcmp(a, "--big-bytes") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, 0, UINT64_C(1) << 36, &o->big_bytes))
                return -1;
        } else if (strcmp(a, "--vector-bytes") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, WORD, SPEC(VEC_BYTES_MAX), &o->vec_bytes))
                return -1;
        } else if (strcmp(a, "--max-msg") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, WORD, SPEC(MAX_MSG_MAX), &o->max_msg))
                return -1;
        } else if (strcmp(a, "--window") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, SPEC(WINDOW_MIN), SPEC(WINDOW_MAX),
                          &o->window))
                return -1;
        } else if (strcmp(a, "--cq-depth") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, SPEC(CQ_DEPTH_MIN), SPEC(CQ_DEPTH_MAX),
                          &o->cq_depth))
                return -1;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, SPEC(TIMEOUT_MS_MIN), SPEC(TIMEOUT_MS_MAX),
                          &n))
                return -1;
            o->timeout_ms = (int)n;
        } else if (strcmp(a, "--exit-after") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, 1, UINT64_C(1) << 40, &o->exit_after))
                return -1;
        } else if (strcmp(a, "--qp") == 0) {
            if (parse_qp(a, v, o))
                return -1;
        } else if (strcmp(a, "--verify-blocks") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, 0, MAX_BLOCKS, &o->verify_blocks))
                return -1;
        } else if (strcmp(a, "--block-layers") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, SPEC(BLOCK_LAYERS_MIN),
                          SPEC(BLOCK_LAYERS_MAX), &o->block_layers))
                return -1;
        } else if (strcmp(a, "--block-rows") == 0) {
            if (vc_number("verbs_gate", USAGE, a, v, SPEC(BLOCK_ROWS_MIN), SPEC(BLOCK_ROWS_MAX),
                          &o->block_rows))
                return -1;
        } else {
            fprintf(stderr, "verbs_gate: unknown option %s\n%s", a, USAGE);
            return -1;
        }
    }
    if (vc_endpoint_check("verbs_gate", USAGE, &o->ep))
        return -1;
    if (o->vec_bytes % WORD || o->max_msg % WORD || o->big_bytes % WORD) {
        fprintf(stderr, "verbs_gate: --vector-bytes, --max-msg and --big-bytes must be multiples "
                "of 8 (the payload pattern is written in 8-byte words)\n");
        return -1;
    }
    if (o->more_gates == UINT64_MAX)
        o->more_gates = o->gates / 10 ? o->gates / 10 : 1;
    return 0;
}

int main(int argc, char **argv)
{
    rank_t *r = calloc(1, sizeof *r);
    if (r == NULL) {
        fputs("verbs_gate: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    if (parse(argc, argv, &r->o)) {
        free(r);
        return EXIT_USAGE;
    }
    double t0 = vc_now_s();
    int rc = setup(r);
    if (rc == 0)
        rc = run_gates(r, 1, r->o.gates);
    if (rc == 0 && r->o.big_bytes)
        rc = big_gate(r);
    for (uint64_t k = 0; rc == 0 && k < r->o.verify_blocks; k++)
        rc = verify_block(r);
    if (rc == 0 && r->o.more_gates)
        rc = run_gates(r, r->o.gates + 1, r->o.more_gates);
    if (rc == 0)
        rc = finish(r);
    r->wall_seconds = vc_now_s() - t0;
    if (r->error[0])
        fprintf(stderr, "verbs_gate rank %d: %s\n", r->o.ep.rank, r->error);
    if (r->o.ep.json)
        print_json(r);
    teardown(r);
    free(r);
    return rc ? EXIT_FAILED : 0;
}
