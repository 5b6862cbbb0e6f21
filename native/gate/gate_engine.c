/* The gate engine: one rank of ds4's gate window protocol, sans I/O (see gate_engine.h).
 *
 * The same machine as the reference engine refimpl/engines/gate_engine.py, written from the
 * protocol: the conformance harness holds both to the spec step by step. Error texts are the
 * spec's (spec/gate/errors.py, ds4's formats but where marked), taken by name from the header
 * generated from it (native/generated/spec_constants.h) and filled with snprintf into the
 * engine's own buffers.
 */
#include "gate_engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define VS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define VS_PRINTF(f, a)
#endif

/* The spec's text or constant NAME (native/generated/spec_constants.h): a text by the name of
 * its declaration in spec/gate/errors.py, a parameter's bounds as PARAM_MIN and PARAM_MAX. */
#define SPEC(name) VS_SPEC_GATE_##name

typedef unsigned long long ull;

_Static_assert(VS_GATE_N_PHASES == SPEC(N_PHASES), "vs_gate_phase is the spec's phases");
_Static_assert(VS_GATE_N_BUFS == SPEC(N_BUFS), "vs_gate_buf is the spec's regions");

/* a char array, not pointers: read-only data with no relocations */
static const char PHASE_NAMES[VS_GATE_N_PHASES][24] = SPEC(PHASE_NAMES);

/* The fields a step that posts may change, and those ds4's text for its post names, as they
 * were before the engine's last such step: a post that then fails undoes the step. */
typedef struct {
    int32_t valid;              /* 1: its last step of its own posted, and no post failed */
    int32_t phase;
    uint64_t seq;
    uint64_t recv_done;
    uint64_t last_gate_seq;
    int32_t window_active;
    int64_t send_outstanding;
    uint64_t big_win, big_posted, big_sent;
    int32_t block_active;
    uint64_t block_layer, block_posted;
} before_post;

struct vs_gate {
    size_t size;                /* bytes of this engine's one allocation */
    size_t cap;                 /* work requests each emitted array holds */
    vs_gate_config cfg;
    uint64_t chunks;            /* messages per gate vector: 1 or 2 */
    uint64_t grant;             /* the receive depth told to the peer */

    int32_t phase;
    uint64_t seq;               /* the gate being exchanged */
    uint64_t recv_done;
    uint64_t last_gate_seq;
    int32_t window_active;
    int64_t send_outstanding;
    char error[VS_GATE_TEXT];

    uint64_t drain_recvs, drain_sends;

    uint64_t big_no;            /* big gates begun so far (the header's number) */
    uint64_t big_chunks;
    int32_t big_header_done;
    uint64_t big_depth;         /* the window both ranks can hold */
    uint64_t big_base;          /* chunks done by earlier windows */
    uint64_t big_win;           /* chunks in this window */
    uint64_t big_posted, big_sent, big_send_done;
    uint64_t big_recvd[VS_GATE_MAX_BIG_DEPTH / 64];    /* bitmap of the window's receives */
    uint64_t big_n_recvd;
    uint32_t barrier_tag;

    int32_t in_block;           /* the application's verify block is in progress */
    int32_t batching;           /* ... as batch gates (its verify window switched off) */
    int32_t block_active;       /* its receives are armed (after the drain) */
    uint64_t block_layer;       /* the layer whose batch gate is in progress */
    uint64_t block_posted;      /* layers whose receives are posted */
    uint64_t block_recv_done;   /* rows received in this block */

    before_post before;         /* the engine before its last step that posted */

    char refusal[VS_GATE_TEXT];
    vs_gate_emitted out;
    vs_gate_wr wrs[];           /* receives [0, cap), then sends [cap, 2 cap) */
};

/* ------------------------------------------------------------------ derived sizes */
static uint64_t min_u(uint64_t a, uint64_t b) { return a < b ? a : b; }

static uint64_t chunk_len(const vs_gate *e, uint64_t k)
{
    return min_u(e->cfg.max_msg, e->cfg.vec_bytes - k * e->cfg.max_msg);
}

/* Bytes of the transfer's chunk k: whole messages but for its last chunk, a big gate's
 * remainder or a batch gate's (its rows' bytes past the whole messages). */
static uint64_t big_len_of(const vs_gate *e, uint64_t k)
{
    if (k != e->big_chunks - 1)
        return e->cfg.max_msg;
    if (e->batching)
        return e->cfg.block_rows * e->cfg.vec_bytes - k * e->cfg.max_msg;
    return e->cfg.big_last_bytes ? e->cfg.big_last_bytes : e->cfg.max_msg;
}

/* Bytes of the window's chunk i. */
static uint64_t big_len(const vs_gate *e, uint64_t i) { return big_len_of(e, e->big_base + i); }

/* (seq - 1) mod m, as the schedule counts gates from 1 */
static uint64_t ordinal(uint64_t seq, uint64_t m) { return seq == 0 ? m - 1 : (seq - 1) % m; }

static uint64_t nth_set_bit(uint64_t mask, uint64_t n)
{
    for (unsigned bit = 0; bit < 64; bit++)
        if ((mask >> bit) & 1u) {
            if (n == 0)
                return bit;
            n--;
        }
    return 64;      /* unreachable: create checks the mask has gates_per_token bits */
}

/* In-slot (and out-slot) of gate seq. */
static uint64_t slot_of(const vs_gate *e, uint64_t seq)
{
    const vs_gate_config *c = &e->cfg;
    if (c->gates_per_token == 0)
        return ordinal(seq, c->n_slots);
    uint64_t k = ordinal(seq, c->gates_per_token);
    if (c->slot_mask)
        return nth_set_bit(c->slot_mask, k);
    return c->slot_start + k * c->slot_step;
}

/* The big-gate window for a granted receive depth: capped by big_depth and the staging area. */
static uint64_t big_window(const vs_gate *e, uint64_t depth)
{
    uint64_t w = min_u(min_u(depth, e->cfg.big_depth), e->cfg.staging_bytes / e->cfg.max_msg);
    return w > 0 ? w : 1;
}

static int64_t big_send_depth(const vs_gate *e)
{
    return (int64_t)min_u(e->cfg.sq_depth, e->cfg.big_depth);
}

/* Sends a big-gate window of win chunks, sent of them posted and done of those completed, may
 * post next: a chain, capped by what is left and by keeping the window's sends in flight
 * (sent - done) under the send depth (<= 0: none). */
static int64_t send_room(const vs_gate *e, uint64_t win, uint64_t sent, uint64_t done)
{
    int64_t room = (int64_t)min_u(e->cfg.chain_max, win - sent);
    int64_t free_sq = big_send_depth(e) - (int64_t)(sent - done);
    return free_sq < room ? free_sq : room;
}

/* Work requests of one verify-block layer: every row's chunks. */
static uint64_t block_wrs(const vs_gate *e) { return e->cfg.block_rows * e->chunks; }

/* ------------------------------------------------------------------ emitting */
static void begin(vs_gate *e)
{
    e->out.n_recvs = e->out.n_sends = e->out.n_tcp = e->out.n_log = 0;
    e->out.result[0] = '\0';
    e->refusal[0] = '\0';
}

static VS_PRINTF(2, 3) int refuse(vs_gate *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->refusal, sizeof e->refusal, fmt, ap);
    va_end(ap);
    return VS_GATE_REFUSED;
}

/* The rank fails with ds4's text: the call's result and the view's error. */
static VS_PRINTF(2, 3) int fail(vs_gate *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
    memcpy(e->out.result, e->error, sizeof e->out.result);
    e->phase = VS_GATE_FAILED;
    return VS_GATE_OK;
}

#define BIT(p) (UINT32_C(1) << (p))

/* Refuses a call the engine cannot take in its phase, one of two sets of BIT(phase); the
 * refusal names first's phases, then then's, each set in enum order. */
static int need_of(vs_gate *e, uint32_t first, uint32_t then)
{
    if ((first | then) & BIT(e->phase))
        return VS_GATE_OK;
    size_t at = (size_t)snprintf(e->refusal, sizeof e->refusal, "the engine is in phase %s, not ",
                                 PHASE_NAMES[e->phase]);
    const char *sep = "";
    for (int set = 0; set < 2; set++)
        for (int p = 0; p < VS_GATE_N_PHASES && at < sizeof e->refusal; p++)
            if ((set ? then : first) & BIT(p)) {
                at += (size_t)snprintf(e->refusal + at, sizeof e->refusal - at, "%s%s", sep,
                                       PHASE_NAMES[p]);
                sep = " or ";
            }
    return VS_GATE_REFUSED;
}

static int need(vs_gate *e, uint32_t phases) { return need_of(e, phases, 0); }

/* Appends a work request on region buf, at slot * stride + offset. */
static void put_wr(vs_gate *e, vs_gate_wr *to, size_t *n, uint64_t wr_id, int32_t buf,
                   uint64_t slot, uint64_t offset, uint64_t length)
{
    uint64_t stride = buf == VS_GATE_BUF_STAGE ? e->cfg.max_msg : e->cfg.vec_bytes;
    vs_gate_wr *w = &to[(*n)++];
    w->wr_id = wr_id;
    w->buf = buf;
    w->offset = slot * stride + offset;
    w->length = length;
    w->signaled = 1;
}

static void put_recv(vs_gate *e, uint64_t wr_id, int32_t buf, uint64_t slot, uint64_t offset,
                     uint64_t length)
{
    put_wr(e, e->wrs, &e->out.n_recvs, wr_id, buf, slot, offset, length);
}

static void put_send(vs_gate *e, uint64_t wr_id, int32_t buf, uint64_t slot, uint64_t offset,
                     uint64_t length)
{
    put_wr(e, e->wrs + e->cap, &e->out.n_sends, wr_id, buf, slot, offset, length);
}

/* One receive WR per chunk of gate seq's vector into its in-slot. Only the last chunk carries
 * the seq, so the watermark moves when the slot is whole. */
static void recv_chain(vs_gate *e, uint64_t seq)
{
    uint64_t last = e->chunks - 1, slot = slot_of(e, seq);
    for (uint64_t k = 0; k < e->chunks; k++) {
        uint64_t tag = k == last ? seq : 0;
        put_recv(e, tag, VS_GATE_BUF_IN, slot, k * e->cfg.max_msg, chunk_len(e, k));
    }
}

/* One send WR per chunk of gate seq's vector from its out-slot, each carrying the seq. */
static void send_chain(vs_gate *e, uint64_t seq)
{
    uint64_t slot = slot_of(e, seq);
    for (uint64_t k = 0; k < e->chunks; k++)
        put_send(e, seq, VS_GATE_BUF_OUT, slot, k * e->cfg.max_msg, chunk_len(e, k));
}

static void put_tcp(vs_gate *e, int32_t kind, uint64_t value, uint64_t chunks, uint64_t depth)
{
    vs_gate_tcp *t = &e->out.tcp_out[e->out.n_tcp++];
    t->kind = kind;
    t->value = value;
    t->chunks = chunks;
    t->depth = depth;
}

/* ------------------------------------------------------------------ life cycle */
static int bad_config(char *err, size_t err_len, const char *fmt, ...) VS_PRINTF(3, 4);

static int bad_config(char *err, size_t err_len, const char *fmt, ...)
{
    if (err && err_len) {
        char what[VS_GATE_TEXT];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(err, err_len, "gate engine configuration: %s", what);
    }
    return VS_GATE_REFUSED;
}

static int popcount64(uint64_t x)
{
    int n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
}

static int in_bounds(uint64_t v, uint64_t lo, uint64_t hi) { return v >= lo && v <= hi; }

/* Whether v is within the spec's bounds of parameter NAME. */
#define IN_BOUNDS(v, name) in_bounds(v, SPEC(name##_MIN), SPEC(name##_MAX))
/* Its bounds, for a refusal's text (%llu..%llu). */
#define BOUNDS(name) (ull)SPEC(name##_MIN), (ull)SPEC(name##_MAX)

int vs_gate_create(const vs_gate_config *cfg, uint64_t grant, vs_gate **out, char *err,
                   size_t err_len)
{
    *out = NULL;
    if (!IN_BOUNDS(cfg->max_msg, MAX_MSG))
        return bad_config(err, err_len, "max_msg must be %llu..%llu", BOUNDS(MAX_MSG));
    if (cfg->vec_bytes < SPEC(VEC_BYTES_MIN) || cfg->vec_bytes > 2 * cfg->max_msg)
        return bad_config(err, err_len, "vec_bytes must be %llu..2 * max_msg",
                          (ull)SPEC(VEC_BYTES_MIN));
    if (!IN_BOUNDS(cfg->window, WINDOW))
        return bad_config(err, err_len, "window must be %llu..%llu", BOUNDS(WINDOW));
    if (!IN_BOUNDS(cfg->n_slots, N_SLOTS))
        return bad_config(err, err_len, "n_slots must be %llu..%llu", BOUNDS(N_SLOTS));
    if (!IN_BOUNDS(cfg->gates_per_token, GATES_PER_TOKEN))
        return bad_config(err, err_len, "gates_per_token must be %llu..%llu",
                          BOUNDS(GATES_PER_TOKEN));
    if (cfg->slot_mask) {
        if ((uint64_t)popcount64(cfg->slot_mask) != cfg->gates_per_token)
            return bad_config(err, err_len, "slot_mask must have gates_per_token bits set");
        if (cfg->n_slots < 64 && cfg->slot_mask >> cfg->n_slots)
            return bad_config(err, err_len, "slot_mask reaches at or above n_slots");
    } else if (cfg->gates_per_token) {
        if (!IN_BOUNDS(cfg->slot_start, SLOT_START) || !IN_BOUNDS(cfg->slot_step, SLOT_STEP)
            || cfg->slot_start + (cfg->gates_per_token - 1) * cfg->slot_step >= cfg->n_slots)
            return bad_config(err, err_len, "the slot schedule reaches at or above n_slots");
    }
    if (cfg->rq_depth < SPEC(RQ_DEPTH_MIN) || cfg->sq_depth < SPEC(SQ_DEPTH_MIN)
        || cfg->chain_max < SPEC(CHAIN_MAX_MIN) || cfg->staging_bytes < SPEC(STAGING_BYTES_MIN))
        return bad_config(err, err_len, "rq_depth, sq_depth, chain_max, staging_bytes >= 1");
    if (!IN_BOUNDS(cfg->big_depth, BIG_DEPTH))
        return bad_config(err, err_len, "big_depth must be %llu..%llu", BOUNDS(BIG_DEPTH));
    if (cfg->big_last_bytes > cfg->max_msg)
        return bad_config(err, err_len, "big_last_bytes must be 0..max_msg");
    if ((cfg->block_layers == 0) != (cfg->block_rows == 0)
        || (cfg->block_layers && (!IN_BOUNDS(cfg->block_layers, BLOCK_LAYERS)
                                  || !IN_BOUNDS(cfg->block_rows, BLOCK_ROWS))))
        return bad_config(err, err_len, "block_layers and block_rows must be %llu..%llu and "
                          "%llu..%llu, or both 0", BOUNDS(BLOCK_LAYERS), BOUNDS(BLOCK_ROWS));
    if (cfg->verify_window_off > 1)
        return bad_config(err, err_len, "verify_window_off must be 0 or 1");

    uint64_t chunks = (cfg->vec_bytes + cfg->max_msg - 1) / cfg->max_msg;
    /* the longest chain one step posts: the arming window, a big-gate sub-batch, or a
     * verify-block layer (posted only within the receive depth) */
    size_t cap = (size_t)(cfg->window * chunks);
    size_t batch = (size_t)min_u(cfg->chain_max, VS_GATE_MAX_BIG_DEPTH);
    if (batch > cap)
        cap = batch;
    uint64_t layer = cfg->block_rows * chunks;
    if (layer > cap && layer <= (grant ? grant : cfg->rq_depth))
        cap = (size_t)layer;
    size_t size = sizeof(vs_gate) + 2 * cap * sizeof(vs_gate_wr);
    vs_gate *e = calloc(1, size);
    if (!e)
        return bad_config(err, err_len, "out of memory");
    e->size = size;
    e->cap = cap;
    e->cfg = *cfg;
    e->chunks = chunks;
    e->grant = grant ? grant : cfg->rq_depth;
    e->phase = VS_GATE_INIT;
    e->out.recvs = e->wrs;
    e->out.sends = e->wrs + cap;
    *out = e;
    return VS_GATE_OK;
}

vs_gate *vs_gate_clone(const vs_gate *e)
{
    vs_gate *c = malloc(e->size);
    if (!c)
        return NULL;
    memcpy(c, e, e->size);
    c->out.recvs = c->wrs;
    c->out.sends = c->wrs + c->cap;
    return c;
}

void vs_gate_destroy(vs_gate *e) { free(e); }

/* ------------------------------------------------------------------ application calls */
int vs_gate_setup(vs_gate *e)
{
    begin(e);
    if (need(e, BIT(VS_GATE_INIT)))
        return VS_GATE_REFUSED;
    e->phase = VS_GATE_IDLE;
    if (e->chunks == 2) {
        snprintf(e->out.log[0], sizeof e->out.log[0], SPEC(CHUNKED_VECTORS), (ull)e->cfg.vec_bytes,
                 (unsigned)e->cfg.max_msg);
        e->out.n_log = 1;
    }
    return VS_GATE_OK;
}

int vs_gate_setup_hello(vs_gate *e, uint64_t peer_window, uint64_t peer_max_msg)
{
    begin(e);
    if (need(e, BIT(VS_GATE_INIT)))
        return VS_GATE_REFUSED;
    if (peer_window != e->cfg.window)
        return fail(e, SPEC(HELLO_MISMATCH), "receive window", (ull)peer_window,
                    (ull)e->cfg.window);
    if (peer_max_msg != e->cfg.max_msg)
        return fail(e, SPEC(HELLO_MISMATCH), "message cap", (ull)peer_max_msg, (ull)e->cfg.max_msg);
    return vs_gate_setup(e);
}

/* gate(layer, gate, seq): checked before anything is posted. */
int vs_gate_call_gate(vs_gate *e, uint64_t layer, uint64_t gate, uint64_t seq)
{
    begin(e);
    if (need(e, BIT(VS_GATE_IDLE)))
        return VS_GATE_REFUSED;
    if (layer * 2 + gate != slot_of(e, seq))
        return fail(e, SPEC(GATE_ORDER), (unsigned)layer, (unsigned)gate, (ull)seq);
    if (seq != e->last_gate_seq + 1)
        return fail(e, SPEC(GATE_SEQ_ORDER), (ull)seq, (ull)e->last_gate_seq);
    e->seq = seq;
    e->phase = e->window_active ? VS_GATE_SEND : VS_GATE_ARM_POST;
    return VS_GATE_OK;
}

int vs_gate_call_big(vs_gate *e, uint64_t chunks)
{
    begin(e);
    if (need(e, BIT(VS_GATE_IDLE)))
        return VS_GATE_REFUSED;
    e->big_no++;
    e->big_chunks = chunks;
    e->big_base = 0;
    e->big_header_done = 0;
    e->barrier_tag = 0;             /* each call's windows write barrier bytes 1, 2, ... */
    e->phase = VS_GATE_BIG_HDR_SEND;
    return VS_GATE_OK;
}

/* ds4_tp_batch_gate_exchange outside a verify window: the layer's rows as one big-gate
 * transfer, its seq the next big-gate number, its barrier bytes counted from 1 again. */
static void begin_batch(vs_gate *e, uint64_t layer)
{
    uint64_t bytes = e->cfg.block_rows * e->cfg.vec_bytes;
    e->block_layer = layer;
    e->big_no++;
    e->big_chunks = (bytes + e->cfg.max_msg - 1) / e->cfg.max_msg;
    e->big_base = 0;
    e->big_header_done = 0;
    e->barrier_tag = 0;
    e->phase = VS_GATE_BATCH_HDR_SEND;
}

/* ds4_tp_batch_block_begin, with the header exchange that brings both ranks to the drain
 * together (ds4 drains at once). */
int vs_gate_call_block(vs_gate *e)
{
    begin(e);
    if (need(e, BIT(VS_GATE_IDLE)))
        return VS_GATE_REFUSED;
    if (e->cfg.block_layers == 0)
        return refuse(e, "the configuration has no verify blocks (block_layers 0)");
    e->in_block = 1;
    e->block_layer = e->block_posted = e->block_recv_done = 0;
    if (e->cfg.verify_window_off) {
        /* the begin returns at once: each layer is a batch gate */
        e->batching = 1;
        begin_batch(e, 0);
    } else {
        e->phase = VS_GATE_BLOCK_HDR_SEND;
    }
    return VS_GATE_OK;
}

/* The application has read the gate's in-slot. */
int vs_gate_consume(vs_gate *e)
{
    begin(e);
    if (need(e, BIT(VS_GATE_HOLD)))
        return VS_GATE_REFUSED;
    e->phase = VS_GATE_IDLE;
    return VS_GATE_OK;
}

/* ------------------------------------------------------------------ the engine's own steps */
/* Arms the lookahead: receive chains for gates seq .. seq + window - 1. */
static int arm(vs_gate *e)
{
    for (uint64_t q = e->seq; q < e->seq + e->cfg.window; q++)
        recv_chain(e, q);
    e->phase = VS_GATE_ARM_BAR_SEND;
    return VS_GATE_OK;
}

static int window_barrier(vs_gate *e)
{
    put_tcp(e, VS_GATE_TCP_BYTE, VS_GATE_WINDOW_BARRIER, 0, 0);
    e->phase = VS_GATE_ARM_BAR_READ;
    return VS_GATE_OK;
}

static int send_gate(vs_gate *e)
{
    send_chain(e, e->seq);
    e->send_outstanding += (int64_t)e->chunks;
    e->phase = VS_GATE_WAIT;
    return VS_GATE_OK;
}

/* The watermark reached seq: repost the slot for gate seq + window and hand it over. */
static int gate_done(vs_gate *e)
{
    if (e->recv_done < e->seq)
        return refuse(e, "gate %llu is not complete (recv_done %llu)", (ull)e->seq,
                      (ull)e->recv_done);
    recv_chain(e, e->seq + e->cfg.window);
    e->last_gate_seq = e->seq;
    e->phase = VS_GATE_HOLD;
    return VS_GATE_OK;
}

static int write_header(vs_gate *e)
{
    put_tcp(e, VS_GATE_TCP_HEADER, e->big_no, e->big_chunks, e->grant);
    e->phase = VS_GATE_BIG_HDR_READ;
    return VS_GATE_OK;
}

/* One send per armed receive, so the peer's window drains as this one does: dummy i is as
 * long as the chunk it stands for (chunk i mod chunks) and reads the staging scratch at that
 * chunk's offset. */
static int post_dummies(vs_gate *e)
{
    uint64_t n = e->cfg.window * e->chunks;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = i % e->chunks;
        uint64_t tag = VS_GATE_TAG_BULK;
        put_send(e, tag | (i + 1), VS_GATE_BUF_STAGE, k, 0, chunk_len(e, k));
    }
    e->drain_recvs = e->drain_sends = 0;
    e->phase = VS_GATE_DRAIN_WAIT;
    return VS_GATE_OK;
}

static int drain_done(vs_gate *e)
{
    uint64_t n = e->cfg.window * e->chunks;
    if (e->drain_recvs < n || e->drain_sends < n || e->send_outstanding)
        return refuse(e, "the drain is not over (%llu/%llu receives, %llu/%llu sends, %lld "
                      "outstanding)", (ull)e->drain_recvs, (ull)n, (ull)e->drain_sends, (ull)n,
                      (long long)e->send_outstanding);
    e->recv_done = e->last_gate_seq;
    e->window_active = 0;
    /* a drain starts only once the big-gate, verify-block or batch header is read */
    if (e->in_block && !e->batching)
        e->phase = VS_GATE_BLOCK_POST;
    else
        e->phase = e->big_header_done ? VS_GATE_BIG_BEGIN : VS_GATE_BIG_HDR_SEND;
    return VS_GATE_OK;
}

static int begin_window(vs_gate *e)
{
    if (e->window_active)
        return fail(e, SPEC(BIG_UNAVAILABLE));
    e->big_win = min_u(e->big_depth, e->big_chunks - e->big_base);
    e->big_posted = e->big_sent = e->big_send_done = 0;
    memset(e->big_recvd, 0, sizeof e->big_recvd);
    e->big_n_recvd = 0;
    e->phase = VS_GATE_BIG_POST;
    return VS_GATE_OK;
}

/* Posts the next chain of staging receives, one per chunk of the window. */
static int post_staging(vs_gate *e)
{
    uint64_t n = min_u(e->cfg.chain_max, e->big_win - e->big_posted);
    for (uint64_t i = e->big_posted; i < e->big_posted + n; i++)
        put_recv(e, VS_GATE_TAG_BULK | (i + 1), VS_GATE_BUF_STAGE, i, 0, big_len(e, i));
    e->big_posted += n;
    if (e->big_posted == e->big_win)
        e->phase = VS_GATE_BIG_BAR_SEND;
    return VS_GATE_OK;
}

static int big_barrier(vs_gate *e)
{
    e->barrier_tag = (e->barrier_tag + 1) & 0xFFu;
    put_tcp(e, VS_GATE_TCP_BYTE, e->barrier_tag, 0, 0);
    e->phase = VS_GATE_BIG_BAR_READ;
    return VS_GATE_OK;
}

/* Post the next sub-batch of sends from staging, or, with every receive and send of the window
 * complete, move to the next window. */
static int big_progress(vs_gate *e)
{
    int64_t room = send_room(e, e->big_win, e->big_sent, e->big_send_done);
    if (room > 0) {
        for (uint64_t i = e->big_sent; i < e->big_sent + (uint64_t)room; i++)
            put_send(e, VS_GATE_TAG_BULK | (i + 1), VS_GATE_BUF_STAGE, i, 0, big_len(e, i));
        e->big_sent += (uint64_t)room;
        return VS_GATE_OK;
    }
    if (!(e->big_sent == e->big_win && e->big_n_recvd == e->big_win
          && e->big_send_done >= e->big_win))
        return refuse(e, "the big-gate window is neither sendable nor complete");
    e->big_base += e->big_win;
    if (e->big_base < e->big_chunks) {
        e->phase = VS_GATE_BIG_BEGIN;
    } else if (e->batching && e->block_layer + 1 < e->cfg.block_layers) {
        begin_batch(e, e->block_layer + 1);
    } else {
        /* a big gate is over, or a block's last batch gate (its end returns at once) */
        e->in_block = e->batching = 0;
        e->phase = VS_GATE_IDLE;
    }
    return VS_GATE_OK;
}

static int write_batch_header(vs_gate *e)
{
    put_tcp(e, VS_GATE_TCP_BATCH, e->block_layer, e->cfg.block_rows, e->big_no);
    e->phase = VS_GATE_BATCH_HDR_READ;
    return VS_GATE_OK;
}

/* ------------------------------------------------------------------ verify block */
static int write_block_header(vs_gate *e)
{
    put_tcp(e, VS_GATE_TCP_BLOCK, e->cfg.block_layers, e->cfg.block_rows, 0);
    e->phase = VS_GATE_BLOCK_HDR_READ;
    return VS_GATE_OK;
}

/* A layer's rows, one WR per chunk. A receive tags a row's last chunk with BLOCK | (row + 1),
 * row counted through the block, and its other chunks 0; every send carries BLOCK | 1. */
static void block_rows(vs_gate *e, uint64_t layer, int receive)
{
    uint64_t rows = e->cfg.block_rows, last = e->chunks - 1;
    for (uint64_t row = layer * rows; row < (layer + 1) * rows; row++) {
        uint64_t tag = VS_GATE_TAG_BLOCK | (receive ? row + 1 : 1);
        for (uint64_t k = 0; k < e->chunks; k++) {
            if (receive)
                put_recv(e, k == last ? tag : 0, VS_GATE_BUF_BLK, row, k * e->cfg.max_msg,
                         chunk_len(e, k));
            else
                put_send(e, tag, VS_GATE_BUF_BOUT, row, k * e->cfg.max_msg, chunk_len(e, k));
        }
    }
}

/* A layer's receives, or, when they outnumber the receive depth, none and ds4's silent
 * failure. */
static int post_layer(vs_gate *e, uint64_t layer)
{
    if (block_wrs(e) > e->grant)
        return fail(e, SPEC(BLOCK_RECV_DEPTH), (unsigned)layer, (unsigned)block_wrs(e),
                    (unsigned)e->grant);
    e->block_posted = layer + 1;
    block_rows(e, layer, 1);
    return VS_GATE_OK;
}

static int arm_block(vs_gate *e)
{
    post_layer(e, 0);
    if (e->phase == VS_GATE_FAILED)         /* the layer needs more than the depth */
        return VS_GATE_OK;
    e->block_active = 1;
    e->phase = VS_GATE_BLOCK_BAR_SEND;
    return VS_GATE_OK;
}

static int block_barrier(vs_gate *e)
{
    put_tcp(e, VS_GATE_TCP_BYTE, VS_GATE_BLOCK_BARRIER, 0, 0);
    e->phase = VS_GATE_BLOCK_BAR_READ;
    return VS_GATE_OK;
}

/* A layer's batch gate: the next layer's receives first, then this layer's sends. */
static int block_gate(vs_gate *e)
{
    uint64_t layer = e->block_layer, n = block_wrs(e);
    if (layer + 1 < e->cfg.block_layers) {
        post_layer(e, layer + 1);
        if (e->phase == VS_GATE_FAILED)
            return VS_GATE_OK;
    }
    if (n > e->grant / 2 || n > e->cfg.sq_depth)
        return fail(e, SPEC(BLOCK_SEND_DEPTH), (unsigned)layer, (unsigned)n,
                    (unsigned)(e->grant / 2), (unsigned)e->cfg.sq_depth);
    block_rows(e, layer, 0);
    e->send_outstanding += (int64_t)n;
    e->phase = VS_GATE_BLOCK_WAIT;
    return VS_GATE_OK;
}

static int layer_arrived(const vs_gate *e)
{
    return e->block_recv_done >= (e->block_layer + 1) * e->cfg.block_rows;
}

static int block_complete(const vs_gate *e)
{
    return e->block_recv_done >= e->cfg.block_layers * e->cfg.block_rows
           && !e->send_outstanding;
}

static int block_layer_done(vs_gate *e)
{
    if (!layer_arrived(e))
        return refuse(e, "verify-block layer %llu has not arrived (%llu rows)",
                      (ull)e->block_layer, (ull)e->block_recv_done);
    if (e->block_layer + 1 < e->cfg.block_layers) {
        e->block_layer++;
        e->phase = VS_GATE_BLOCK_SEND;
    } else {
        e->phase = VS_GATE_BLOCK_END;
    }
    return VS_GATE_OK;
}

static int end_block(vs_gate *e)
{
    if (!block_complete(e))
        return refuse(e, "the verify block is not over (%llu rows, %lld sends outstanding)",
                      (ull)e->block_recv_done, (long long)e->send_outstanding);
    e->in_block = e->block_active = 0;
    e->phase = VS_GATE_IDLE;
    return VS_GATE_OK;
}

/* What a driver does next: in a wait, ADVANCE once the engine has a step of its own (the
 * gate arrived, the drain is over, a window has sends to post or is complete), else POLL. */
vs_gate_step vs_gate_next_step(const vs_gate *e)
{
    switch (e->phase) {
    case VS_GATE_INIT: return VS_GATE_STEP_SETUP;
    case VS_GATE_IDLE:
    case VS_GATE_HOLD: return VS_GATE_STEP_CALL;
    case VS_GATE_FAILED:
    case VS_GATE_CRASHED: return VS_GATE_STEP_DEAD;
    case VS_GATE_ARM_BAR_READ:
    case VS_GATE_BIG_HDR_READ:
    case VS_GATE_BIG_BAR_READ:
    case VS_GATE_BLOCK_HDR_READ:
    case VS_GATE_BLOCK_BAR_READ:
    case VS_GATE_BATCH_HDR_READ: return VS_GATE_STEP_READ;
    case VS_GATE_BLOCK_WAIT: return layer_arrived(e) ? VS_GATE_STEP_ADVANCE : VS_GATE_STEP_POLL;
    case VS_GATE_BLOCK_END: return block_complete(e) ? VS_GATE_STEP_ADVANCE : VS_GATE_STEP_POLL;
    case VS_GATE_WAIT:
        return e->recv_done >= e->seq ? VS_GATE_STEP_ADVANCE : VS_GATE_STEP_POLL;
    case VS_GATE_DRAIN_WAIT: {
        uint64_t n = e->cfg.window * e->chunks;
        return e->drain_recvs >= n && e->drain_sends >= n && !e->send_outstanding
               ? VS_GATE_STEP_ADVANCE : VS_GATE_STEP_POLL;
    }
    case VS_GATE_BIG_XFER: {
        int complete = e->big_sent == e->big_win && e->big_n_recvd == e->big_win
                        && e->big_send_done >= e->big_win;
        return send_room(e, e->big_win, e->big_sent, e->big_send_done) > 0 || complete
               ? VS_GATE_STEP_ADVANCE : VS_GATE_STEP_POLL;
    }
    default: return VS_GATE_STEP_ADVANCE;
    }
}

/* The rank's next step of its own. */
static int step(vs_gate *e)
{
    switch (e->phase) {
    case VS_GATE_ARM_POST: return arm(e);
    case VS_GATE_ARM_BAR_SEND: return window_barrier(e);
    case VS_GATE_SEND: return send_gate(e);
    case VS_GATE_WAIT: return gate_done(e);
    case VS_GATE_BIG_HDR_SEND: return write_header(e);
    case VS_GATE_DRAIN_POST: return post_dummies(e);
    case VS_GATE_DRAIN_WAIT: return drain_done(e);
    case VS_GATE_BIG_BEGIN: return begin_window(e);
    case VS_GATE_BIG_POST: return post_staging(e);
    case VS_GATE_BIG_BAR_SEND: return big_barrier(e);
    case VS_GATE_BIG_XFER: return big_progress(e);
    case VS_GATE_BLOCK_HDR_SEND: return write_block_header(e);
    case VS_GATE_BLOCK_POST: return arm_block(e);
    case VS_GATE_BLOCK_BAR_SEND: return block_barrier(e);
    case VS_GATE_BLOCK_SEND: return block_gate(e);
    case VS_GATE_BLOCK_WAIT: return block_layer_done(e);
    case VS_GATE_BLOCK_END: return end_block(e);
    case VS_GATE_BATCH_HDR_SEND: return write_batch_header(e);
    default:
        return refuse(e, "the engine has no step of its own in phase %s", PHASE_NAMES[e->phase]);
    }
}

static void snapshot(const vs_gate *e, before_post *b)
{
    b->valid = 1;
    b->phase = e->phase;
    b->seq = e->seq;
    b->recv_done = e->recv_done;
    b->last_gate_seq = e->last_gate_seq;
    b->window_active = e->window_active;
    b->send_outstanding = e->send_outstanding;
    b->big_win = e->big_win;
    b->big_posted = e->big_posted;
    b->big_sent = e->big_sent;
    b->block_active = e->block_active;
    b->block_layer = e->block_layer;
    b->block_posted = e->block_posted;
}

/* The rank's next step of its own: what it posts or writes next. A step that posts keeps the
 * engine as it was before it, for vs_gate_post_failed; a refused step leaves that as it was. */
int vs_gate_advance(vs_gate *e)
{
    begin(e);
    before_post b;
    snapshot(e, &b);
    if (step(e) != VS_GATE_OK)
        return VS_GATE_REFUSED;
    if (e->out.n_recvs || e->out.n_sends)
        e->before = b;
    else
        e->before.valid = 0;
    return VS_GATE_OK;
}

/* ------------------------------------------------------------------ inputs */
/* A TCP item as a header read that did not expect it names it. */
static void described(const vs_gate_tcp *item, char *what, size_t len)
{
    if (item->kind == VS_GATE_TCP_BYTE)
        snprintf(what, len, "byte 0x%02llx", (ull)item->value);
    else if (item->kind == VS_GATE_TCP_BLOCK)
        snprintf(what, len, "verify-block header (%llu layers x %llu rows)", (ull)item->value,
                 (ull)item->chunks);
    else if (item->kind == VS_GATE_TCP_BATCH)
        snprintf(what, len, "batch header (layer %llu, %llu rows, seq %llu)", (ull)item->value,
                 (ull)item->chunks, (ull)item->depth);
    else
        snprintf(what, len, "header big %llu (%llu chunks)", (ull)item->value,
                 (ull)item->chunks);
}

static int read_header(vs_gate *e, const vs_gate_tcp *item)
{
    if (item->kind != VS_GATE_TCP_HEADER) {
        char what[96];
        described(item, what, sizeof what);
        return fail(e, SPEC(BIG_HEADER_MISFRAMED), what);
    }
    if (item->value != e->big_no)
        return fail(e, SPEC(BIG_DESYNC), VS_GATE_BIG_LAYER, VS_GATE_BIG_MAGIC, (ull)item->value,
                    VS_GATE_BIG_LAYER, (ull)e->big_no);
    if (item->chunks != e->big_chunks)
        return fail(e, SPEC(BIG_SIZE_MISMATCH), (ull)e->big_no, (ull)e->big_chunks,
                    (ull)item->chunks);
    e->big_header_done = 1;
    e->big_depth = big_window(e, min_u(e->grant, item->depth));
    e->phase = e->window_active ? VS_GATE_DRAIN_POST : VS_GATE_BIG_BEGIN;
    return VS_GATE_OK;
}

static int read_block_header(vs_gate *e, const vs_gate_tcp *item)
{
    if (item->kind != VS_GATE_TCP_BLOCK) {
        char what[96];
        described(item, what, sizeof what);
        return fail(e, SPEC(BLOCK_HEADER_MISFRAMED), what);
    }
    if (item->value != e->cfg.block_layers || item->chunks != e->cfg.block_rows)
        return fail(e, SPEC(BLOCK_HEADER_MISMATCH), (unsigned)e->cfg.block_layers,
                    (unsigned)e->cfg.block_rows, (unsigned)item->value, (unsigned)item->chunks);
    e->phase = e->window_active ? VS_GATE_DRAIN_POST : VS_GATE_BLOCK_POST;
    return VS_GATE_OK;
}

/* The peer's batch header: its layer, rows and seq must be this rank's (ds4 reads a big-gate
 * header's tag as its rows; a shorter write it never reads whole). No depth rides in it:
 * each rank windows by its own. */
static int read_batch_header(vs_gate *e, const vs_gate_tcp *item)
{
    uint64_t got[3];
    if (item->kind == VS_GATE_TCP_HEADER) {
        got[0] = VS_GATE_BIG_LAYER;
        got[1] = VS_GATE_BIG_MAGIC;
        got[2] = item->value;
    } else if (item->kind == VS_GATE_TCP_BATCH) {
        got[0] = item->value;
        got[1] = item->chunks;
        got[2] = item->depth;
    } else {
        char what[96];
        described(item, what, sizeof what);
        return fail(e, SPEC(BATCH_HEADER_MISFRAMED), what);
    }
    if (got[0] != e->block_layer || got[1] != e->cfg.block_rows || got[2] != e->big_no)
        return fail(e, SPEC(BATCH_DESYNC), (unsigned)got[0], (unsigned)got[1], (ull)got[2],
                    (unsigned)e->block_layer, (unsigned)e->cfg.block_rows, (ull)e->big_no);
    e->big_header_done = 1;
    e->big_depth = big_window(e, e->grant);
    e->phase = e->window_active ? VS_GATE_DRAIN_POST : VS_GATE_BIG_BEGIN;
    return VS_GATE_OK;
}

#define TCP_READ_PHASES \
    (BIT(VS_GATE_ARM_BAR_READ) | BIT(VS_GATE_BIG_HDR_READ) | BIT(VS_GATE_BIG_BAR_READ) \
     | BIT(VS_GATE_BLOCK_HDR_READ) | BIT(VS_GATE_BLOCK_BAR_READ) | BIT(VS_GATE_BATCH_HDR_READ))
#define REAP_PHASES \
    (BIT(VS_GATE_WAIT) | BIT(VS_GATE_DRAIN_WAIT) | BIT(VS_GATE_BIG_XFER) \
     | BIT(VS_GATE_BLOCK_WAIT) | BIT(VS_GATE_BLOCK_END))

/* What a read of the TCP side channel returned, in a phase that reads it. */
int vs_gate_tcp_read(vs_gate *e, const vs_gate_tcp *item)
{
    begin(e);
    if (need(e, TCP_READ_PHASES))
        return VS_GATE_REFUSED;
    /* a barrier byte's read names a header by its magic's low byte */
    unsigned got = item->kind == VS_GATE_TCP_BYTE ? (unsigned)item->value
                                                  : (unsigned)(VS_GATE_HEADER_MAGIC & 0xFF);
    if (e->phase == VS_GATE_BLOCK_BAR_READ) {
        if (item->kind != VS_GATE_TCP_BYTE || item->value != VS_GATE_BLOCK_BARRIER)
            return fail(e, SPEC(WINDOW_BARRIER_MISMATCH), got, VS_GATE_BLOCK_BARRIER);
        e->phase = VS_GATE_BLOCK_SEND;
        return VS_GATE_OK;
    }
    if (e->phase == VS_GATE_BLOCK_HDR_READ)
        return read_block_header(e, item);
    if (e->phase == VS_GATE_BATCH_HDR_READ)
        return read_batch_header(e, item);
    if (e->phase == VS_GATE_ARM_BAR_READ) {
        if (item->kind != VS_GATE_TCP_BYTE || item->value != VS_GATE_WINDOW_BARRIER)
            return fail(e, SPEC(WINDOW_BARRIER_MISMATCH), got, VS_GATE_WINDOW_BARRIER);
        e->window_active = 1;
        e->phase = VS_GATE_SEND;
        return VS_GATE_OK;
    }
    if (e->phase == VS_GATE_BIG_BAR_READ) {
        if (item->kind != VS_GATE_TCP_BYTE || item->value != e->barrier_tag)
            return fail(e, SPEC(BIG_BARRIER));
        e->phase = VS_GATE_BIG_XFER;
        return VS_GATE_OK;
    }
    return read_header(e, item);
}

/* How many completions the next poll asks for (ds4's ibv_wc array in this wait). */
int vs_gate_poll_size(vs_gate *e, uint32_t *size)
{
    begin(e);
    if (need(e, REAP_PHASES))
        return VS_GATE_REFUSED;
    if (e->phase == VS_GATE_DRAIN_WAIT)
        *size = (uint32_t)VS_GATE_DRAIN_POLL(e->cfg.window);
    else
        *size = e->phase == VS_GATE_BIG_XFER ? VS_GATE_BIG_POLL : VS_GATE_DECODE_POLL;
    return VS_GATE_OK;
}

/* The drain and a big-gate window count their own BULK sends; any other send completion
 * leaves send_outstanding (ds4's accounting). */
static void send_completed(vs_gate *e, const vs_gate_completion *c)
{
    int bulk = (c->wr_id & VS_GATE_TAG_BULK) != 0;
    if (bulk && e->phase == VS_GATE_DRAIN_WAIT)
        e->drain_sends++;
    else if (bulk && e->phase == VS_GATE_BIG_XFER)
        e->big_send_done++;
    else
        e->send_outstanding = e->send_outstanding > 1 ? e->send_outstanding - 1 : 0;
}

/* Accounts for one receive completion; fails the rank where the window refuses it. */
static int received(vs_gate *e, const vs_gate_completion *c)
{
    if (e->phase == VS_GATE_DRAIN_WAIT) {
        e->drain_recvs++;
    } else if ((c->wr_id & VS_GATE_TAG_BLOCK) && e->phase != VS_GATE_BIG_XFER) {
        /* a verify-block row, whichever of the decode-style waits polls it */
        if (c->byte_len == 0)
            return fail(e, SPEC(BLOCK_EMPTY));
        e->block_recv_done++;
    } else if (e->phase == VS_GATE_BIG_XFER) {
        /* the tag, then the 1-based index (range, duplicate), then the length */
        if (!(c->wr_id & VS_GATE_TAG_BULK))
            return fail(e, SPEC(BIG_UNTAGGED), (ull)c->wr_id);
        uint64_t index = c->wr_id & ~VS_GATE_TAG_MASK;
        if (index == 0 || index - 1 >= e->big_win
            || (e->big_recvd[(index - 1) / 64] >> ((index - 1) % 64) & 1u))
            return fail(e, SPEC(BIG_INVALID), (ull)c->wr_id);
        uint64_t idx = index - 1;
        if (c->byte_len != big_len(e, idx))
            return fail(e, SPEC(BIG_LENGTH), (ull)idx, (unsigned)c->byte_len,
                        (unsigned)big_len(e, idx));
        e->big_recvd[idx / 64] |= UINT64_C(1) << (idx % 64);
        e->big_n_recvd++;
    } else if (c->wr_id > e->recv_done) {
        e->recv_done = c->wr_id;
    }
    return VS_GATE_OK;
}

static int completion_error(vs_gate *e, const vs_gate_completion *c)
{
    char status[32];
    snprintf(status, sizeof status, SPEC(WC_STATUS), (int)c->status);
    if (e->phase == VS_GATE_DRAIN_WAIT)
        return fail(e, SPEC(DRAIN_COMPLETION), status);
    if (e->phase == VS_GATE_BIG_XFER)
        return fail(e, SPEC(BIG_COMPLETION), status);
    return fail(e, SPEC(GATE_COMPLETION), status, (ull)c->wr_id);
}

/* Accounts for what one poll returned, in order; an error status ends the wait. */
int vs_gate_completions(vs_gate *e, const vs_gate_completion *polled, size_t n)
{
    begin(e);
    if (need(e, REAP_PHASES))
        return VS_GATE_REFUSED;
    for (size_t i = 0; i < n && e->phase != VS_GATE_FAILED; i++) {
        const vs_gate_completion *c = &polled[i];
        if (c->status != VS_GATE_WC_SUCCESS)
            return completion_error(e, c);
        if (c->wr_id & VS_GATE_TAG_WARM)
            continue;           /* a warm-up leftover from setup, not one of ours */
        if (c->opcode == VS_GATE_OP_SEND)
            send_completed(e, c);
        else
            received(e, c);
    }
    return VS_GATE_OK;
}

/* ------------------------------------------------------------------ the environment */
/* The wait's deadline passed. */
int vs_gate_timeout(vs_gate *e)
{
    begin(e);
    if (need_of(e, TCP_READ_PHASES, REAP_PHASES))
        return VS_GATE_REFUSED;
    switch (e->phase) {
    case VS_GATE_BLOCK_WAIT:
        return fail(e, SPEC(BLOCK_TIMEOUT), (unsigned)e->block_layer, (ull)e->block_recv_done,
                    (ull)((e->block_layer + 1) * e->cfg.block_rows));
    case VS_GATE_BLOCK_END:
        return fail(e, SPEC(BLOCK_END_TIMEOUT), (ull)e->block_recv_done,
                    (ull)(e->cfg.block_layers * e->cfg.block_rows), (unsigned)e->send_outstanding);
    case VS_GATE_BLOCK_HDR_READ:
        return fail(e, SPEC(BLOCK_HEADER_FAILED), SPEC(READ_TIMEOUT_ERRNO));
    case VS_GATE_BATCH_HDR_READ:
        return fail(e, SPEC(BATCH_HEADER_FAILED), SPEC(READ_TIMEOUT_ERRNO));
    case VS_GATE_BLOCK_BAR_READ: return fail(e, SPEC(WINDOW_BARRIER_TIMEOUT));
    case VS_GATE_WAIT: return fail(e, SPEC(GATE_TIMEOUT), (ull)e->seq, (ull)e->recv_done);
    case VS_GATE_DRAIN_WAIT:
        return fail(e, SPEC(DRAIN_TIMEOUT), (unsigned)e->drain_recvs,
                    (unsigned)(e->cfg.window * e->chunks));
    case VS_GATE_ARM_BAR_READ: return fail(e, SPEC(WINDOW_BARRIER_TIMEOUT));
    case VS_GATE_BIG_HDR_READ:
        return fail(e, SPEC(BIG_HEADER_FAILED), VS_GATE_BIG_LAYER, (ull)e->big_no,
                    SPEC(READ_TIMEOUT_ERRNO));
    case VS_GATE_BIG_BAR_READ: return fail(e, SPEC(BIG_BARRIER));
    default: break;
    }
    return fail(e, SPEC(BIG_TIMEOUT), (unsigned)e->big_n_recvd, (unsigned)e->big_win,
                (unsigned)e->big_send_done, (unsigned)e->big_win, (unsigned)e->big_sent);
}

/* The peer's TCP socket closed, seen by a wait's liveness check or by a read. */
int vs_gate_peer_closed(vs_gate *e)
{
    begin(e);
    switch (e->phase) {
    case VS_GATE_WAIT: return fail(e, SPEC(GATE_PEER));
    case VS_GATE_DRAIN_WAIT: return fail(e, SPEC(DRAIN_PEER));
    case VS_GATE_BIG_XFER: return fail(e, SPEC(BIG_PEER));
    case VS_GATE_ARM_BAR_READ: return fail(e, SPEC(WINDOW_BARRIER_CLOSED));
    case VS_GATE_BIG_BAR_READ: return fail(e, SPEC(BIG_BARRIER));
    case VS_GATE_BLOCK_WAIT: return fail(e, SPEC(BLOCK_PEER));
    case VS_GATE_BLOCK_BAR_READ: return fail(e, SPEC(WINDOW_BARRIER_CLOSED));
    case VS_GATE_BLOCK_HDR_READ: return fail(e, SPEC(BLOCK_HEADER_FAILED), SPEC(PEER_CLOSED_ERRNO));
    case VS_GATE_BATCH_HDR_READ: return fail(e, SPEC(BATCH_HEADER_FAILED), SPEC(PEER_CLOSED_ERRNO));
    default: break;
    }
    /* ds4_tp_batch_block_end never checks the peer: no close is seen in BLOCK_END */
    if (need(e, BIT(VS_GATE_BIG_HDR_READ)))
        return VS_GATE_REFUSED;
    return fail(e, SPEC(BIG_HEADER_FAILED), VS_GATE_BIG_LAYER, (ull)e->big_no,
                SPEC(PEER_CLOSED_ERRNO));
}

/* ds4's text for a post refused once posted work requests of the step b was to take were
 * up. */
static int post_failure(vs_gate *e, const before_post *b, uint64_t posted)
{
    const vs_gate_config *c = &e->cfg;
    switch (b->phase) {
    case VS_GATE_ARM_POST:      /* a chain per gate: the gates before the refused one stay */
        return fail(e, SPEC(POST_RECV), (ull)(b->seq + posted / e->chunks), SPEC(POST_ERRNO));
    case VS_GATE_SEND: return fail(e, SPEC(POST_SEND), SPEC(POST_ERRNO));
    case VS_GATE_WAIT: return fail(e, SPEC(POST_RECV), (ull)(b->seq + c->window), SPEC(POST_ERRNO));
    case VS_GATE_DRAIN_POST: return fail(e, SPEC(DRAIN_POST_FAILED), SPEC(POST_ERRNO));
    case VS_GATE_BIG_POST:
        return fail(e, SPEC(BIG_POST_RECV), (unsigned)b->big_posted, (unsigned)b->big_win,
                    SPEC(POST_ERRNO));
    case VS_GATE_BIG_XFER:
        return fail(e, SPEC(BIG_POST_SEND),
                    /* a post reaps nothing: big_send_done is as it was before it */
                    (unsigned)send_room(e, b->big_win, b->big_sent, e->big_send_done),
                    SPEC(POST_ERRNO));
    case VS_GATE_BLOCK_POST: return fail(e, SPEC(BLOCK_POST_RECV), 0u, SPEC(POST_ERRNO));
    default: break;
    }
    /* a verify-block gate: the next layer's receives, then this layer's sends */
    uint64_t ahead = b->block_layer + 1 < c->block_layers ? block_wrs(e) : 0;
    if (posted < ahead)
        return fail(e, SPEC(BLOCK_POST_RECV), (unsigned)(b->block_layer + 1), SPEC(POST_ERRNO));
    return fail(e, SPEC(BLOCK_POST_SEND), (unsigned)b->block_layer, SPEC(POST_ERRNO));
}

/* The driver's post of what the last step emitted was refused once posted of its work
 * requests (receives first, then sends) were up: they stay posted, the rest of the step never
 * happened, and the rank fails with ds4's text for the refused call. */
int vs_gate_post_failed(vs_gate *e, uint64_t posted)
{
    begin(e);
    if (!e->before.valid)
        return refuse(e, "no step of the engine has posted anything to fail");
    before_post b = e->before;
    e->phase = b.phase;
    e->seq = b.seq;
    e->recv_done = b.recv_done;
    e->last_gate_seq = b.last_gate_seq;
    e->window_active = b.window_active;
    e->send_outstanding = b.send_outstanding;
    e->big_posted = b.big_posted;
    e->big_sent = b.big_sent;
    e->block_posted = b.block_posted;
    e->block_active = b.block_active;
    e->before.valid = 0;
    return post_failure(e, &b, posted);
}

/* ibv_poll_cq returned an error in a wait: silent but in a big-gate window. */
int vs_gate_poll_failed(vs_gate *e)
{
    begin(e);
    if (need(e, REAP_PHASES))
        return VS_GATE_REFUSED;
    if (e->phase == VS_GATE_DRAIN_WAIT)
        return fail(e, SPEC(DRAIN_POLL));
    if (e->phase == VS_GATE_BIG_XFER) {
        uint64_t last = e->big_chunks - 1;
        return fail(e, SPEC(BIG_POLL), (ull)(e->big_base * e->cfg.max_msg),
                    (ull)(last * e->cfg.max_msg + big_len_of(e, last)), SPEC(POLL_ERRNO));
    }
    return fail(e, SPEC(CQ_POLL));
}

/* The process died: nothing more comes from this rank. */
int vs_gate_crash(vs_gate *e)
{
    begin(e);
    e->phase = VS_GATE_CRASHED;
    snprintf(e->error, sizeof e->error, "%s", SPEC(CRASHED_ERROR));
    return VS_GATE_OK;
}

/* ------------------------------------------------------------------ reading the engine */
const vs_gate_emitted *vs_gate_out(const vs_gate *e) { return &e->out; }

void vs_gate_get_view(const vs_gate *e, vs_gate_view *view)
{
    view->phase = e->phase;
    view->recv_done = e->recv_done;
    view->last_gate_seq = e->last_gate_seq;
    view->window_active = e->window_active;
    view->send_outstanding = e->send_outstanding;
    view->error = e->error;
}

int32_t vs_gate_phase_of(const vs_gate *e) { return e->phase; }
uint64_t vs_gate_recv_done(const vs_gate *e) { return e->recv_done; }
uint64_t vs_gate_last_gate_seq(const vs_gate *e) { return e->last_gate_seq; }
int32_t vs_gate_window_active(const vs_gate *e) { return e->window_active; }
int64_t vs_gate_send_outstanding(const vs_gate *e) { return e->send_outstanding; }
const char *vs_gate_error(const vs_gate *e) { return e->error; }
const char *vs_gate_refusal(const vs_gate *e) { return e->refusal; }

const char *vs_gate_phase_name(int32_t phase)
{
    return phase >= 0 && phase < VS_GATE_N_PHASES ? PHASE_NAMES[phase] : "";
}
