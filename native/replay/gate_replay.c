/* The gate engine's replay driver: runs a replay script (replay.h) against two ranks of
 * native/gate/gate_engine.c through its public header, the ABI a C transport links against.
 *
 *   gate_replay SCRIPT      (SCRIPT "-": standard input)
 *
 * The config line names both ranks' parameters; rank1_max_msg, rank1_window and
 * rank1_block_rows (0: rank 0's) and rank1_verify_window_off (0: rank 0's, 1: on, 2: off)
 * are rank 1's own, and setup hands each rank its peer's window and message cap.
 *
 * Calls, each naming its rank R first:
 *   setup R | call_gate R LAYER GATE SEQ | call_big R CHUNKS | call_block R | consume R
 *   advance R
 *   tcp_read R byte VALUE | tcp_read R header VALUE CHUNKS DEPTH | tcp_read R block LAYERS ROWS
 *   tcp_read R batch LAYER ROWS SEQ
 *   completions R CQ POLLED OP:STATUS:WR_ID:BYTE_LEN ...   (OP send | recv)
 *   timeout R | peer_closed R | poll_failed R | crash R
 *   post_failed R POSTED    (the step's advance, then its post refused with POSTED work
 *                            requests up: the fields are both calls' emission, as the
 *                            conformance harness joins them)
 *   none                    (a step of the fabric: no rank acts)
 * completions first checks that the rank asks to poll POLLED entries of the CQ's CQ (its
 * poll size, capped by what the CQ holds), then hands it the entries.
 *
 * Fields, in order: recvs, sends, tcp_out, result, log (a count, then log.I each) after a
 * call; then r0.* and r1.* (phase, recv_done, last_gate_seq, window_active,
 * send_outstanding, error) after every step. A work request is WR_ID:BUF:OFFSET:LENGTH:
 * SIGNALED, a TCP write byte:VALUE:0:0, header:VALUE:CHUNKS:DEPTH, block:LAYERS:ROWS:0 or
 * batch:LAYER:ROWS:SEQ.
 * After post_failed: the advance's receives and sends cut to the first POSTED (receives
 * first), no TCP writes, post_failed's result, and the advance's log lines then
 * post_failed's.
 *
 * Exit 0: every step agreed; 1: the first difference, printed; 2: a malformed script or one
 * the engine cannot start from; 3: out of memory.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gate_engine.h"
#include "replay.h"

static const char *const CONFIG_NAMES[] = {
    "vec_bytes", "max_msg", "window", "gates_per_token", "n_slots", "slot_start", "slot_step",
    "slot_mask", "rq_depth", "sq_depth", "big_depth", "chain_max", "staging_bytes",
    "big_last_bytes", "block_layers", "block_rows", "verify_window_off", "grant0", "grant1",
    "rank1_max_msg", "rank1_window", "rank1_block_rows", "rank1_verify_window_off",
};
#define N_CONFIG (sizeof CONFIG_NAMES / sizeof CONFIG_NAMES[0])

/* tcp_read's kinds of item: the words after the kind fill value, chunks and depth in turn */
typedef struct {
    const char *name;
    int32_t kind;
    size_t n;
    const char *what[3];
} tcp_kind;
static const tcp_kind TCP_KINDS[] = {
    {"byte", VS_GATE_TCP_BYTE, 1, {"byte value"}},
    {"header", VS_GATE_TCP_HEADER, 3, {"header value", "header chunks", "header depth"}},
    {"block", VS_GATE_TCP_BLOCK, 2, {"block layers", "block rows"}},
    {"batch", VS_GATE_TCP_BATCH, 3, {"batch layer", "batch rows", "batch seq"}},
};
/* the registered regions' names, the spec's (native/generated/spec_constants.h) */
static const char *const BUF_NAMES[VS_GATE_N_BUFS] = VS_SPEC_GATE_BUF_NAMES;

typedef struct {
    vs_gate *rank[2];
    vs_gate_config cfg[2];      /* each rank's own: rank 1's cap, window, rows may differ */
    vs_gate_completion *polled;
    size_t polled_cap;
    rp_fields got;
    /* a post_failed step: what its advance emitted (the WRs copied into step_wrs), and how
     * many of them stay posted */
    int post_failed;
    uint64_t posted;
    vs_gate_emitted step;
    vs_gate_wr *step_wrs;
    size_t step_cap;
} driver;

static void put_wrs(rp_fields *f, const char *name, const vs_gate_wr *w, size_t n)
{
    rp_field_begin(f, "", name);
    for (size_t i = 0; i < n; i++) {
        const char *buf = w[i].buf >= 0 && w[i].buf < VS_GATE_N_BUFS ? BUF_NAMES[w[i].buf]
                                                                      : "?";
        rp_putf(f, "%s%" PRIu64 ":%s:%" PRIu64 ":%" PRIu64 ":%d", i ? "," : "", w[i].wr_id,
                buf, w[i].offset, w[i].length, w[i].signaled != 0);
    }
    rp_field_end(f);
}

static void put_log(rp_fields *f, const vs_gate_emitted *first, const vs_gate_emitted *then)
{
    rp_field_begin(f, "", "log");
    rp_putf(f, "%zu", first->n_log + then->n_log);
    rp_field_end(f);
    for (size_t i = 0; i < first->n_log + then->n_log; i++) {
        char name[32];
        snprintf(name, sizeof name, "log.%zu", i);
        rp_text_field(f, "", name, i < first->n_log ? first->log[i]
                                                    : then->log[i - first->n_log]);
    }
}

static void put_emitted(rp_fields *f, const vs_gate_emitted *e)
{
    put_wrs(f, "recvs", e->recvs, e->n_recvs);
    put_wrs(f, "sends", e->sends, e->n_sends);
    rp_field_begin(f, "", "tcp_out");
    for (size_t i = 0; i < e->n_tcp; i++) {
        const vs_gate_tcp *t = &e->tcp_out[i];
        if (t->kind == VS_GATE_TCP_HEADER || t->kind == VS_GATE_TCP_BLOCK
            || t->kind == VS_GATE_TCP_BATCH)
            rp_putf(f, "%s%s:%" PRIu64 ":%" PRIu64 ":%" PRIu64, i ? "," : "",
                    t->kind == VS_GATE_TCP_BLOCK   ? "block"
                    : t->kind == VS_GATE_TCP_BATCH ? "batch"
                                                   : "header",
                    t->value, t->chunks, t->depth);
        else
            rp_putf(f, "%sbyte:%" PRIu64 ":0:0", i ? "," : "", t->value);
    }
    rp_field_end(f);
    rp_text_field(f, "", "result", e->result);
    static const vs_gate_emitted nothing;
    put_log(f, e, &nothing);
}

/* A post_failed step's emission as the harness joins it: the advance's receives and sends cut
 * to the posted that stay up (receives first), post_failed's result, both calls' log lines. */
static void put_post_failed(rp_fields *f, const vs_gate_emitted *step, uint64_t posted,
                            const vs_gate_emitted *failed)
{
    size_t recvs = posted < step->n_recvs ? (size_t)posted : step->n_recvs;
    uint64_t rest = posted - recvs;
    size_t sends = rest < step->n_sends ? (size_t)rest : step->n_sends;
    put_wrs(f, "recvs", step->recvs, recvs);
    put_wrs(f, "sends", step->sends, sends);
    rp_field_begin(f, "", "tcp_out");
    rp_field_end(f);
    rp_text_field(f, "", "result", failed->result);
    put_log(f, step, failed);
}

/* Keeps what the advance of a post_failed step emitted: the engine clears it at its next
 * call. Returns 0, or -1 out of memory. */
static int keep_step(driver *d, const vs_gate_emitted *e)
{
    size_t n = e->n_recvs + e->n_sends;
    if (n > d->step_cap) {
        vs_gate_wr *grown = realloc(d->step_wrs, n * sizeof *grown);
        if (grown == NULL)
            return -1;
        d->step_wrs = grown;
        d->step_cap = n;
    }
    d->step = *e;
    if (e->n_recvs)
        memcpy(d->step_wrs, e->recvs, e->n_recvs * sizeof *e->recvs);
    if (e->n_sends)
        memcpy(d->step_wrs + e->n_recvs, e->sends, e->n_sends * sizeof *e->sends);
    d->step.recvs = d->step_wrs;
    d->step.sends = d->step_wrs + e->n_recvs;
    return 0;
}

static void put_views(rp_fields *f, vs_gate *const rank[2])
{
    static const char *const PREFIX[2] = {"r0.", "r1."};
    for (int r = 0; r < 2; r++) {
        const char *p = PREFIX[r];
        vs_gate_view v;
        vs_gate_get_view(rank[r], &v);
        rp_text_field(f, p, "phase", vs_gate_phase_name(v.phase));
        rp_field_begin(f, p, "recv_done");
        rp_putf(f, "%" PRIu64, v.recv_done);
        rp_field_end(f);
        rp_field_begin(f, p, "last_gate_seq");
        rp_putf(f, "%" PRIu64, v.last_gate_seq);
        rp_field_end(f);
        rp_field_begin(f, p, "window_active");
        rp_putf(f, "%d", v.window_active != 0);
        rp_field_end(f);
        rp_field_begin(f, p, "send_outstanding");
        rp_putf(f, "%" PRId64, v.send_outstanding);
        rp_field_end(f);
        rp_text_field(f, p, "error", v.error);
    }
}

/* One completion item OP:STATUS:WR_ID:BYTE_LEN. */
static int parse_completion(rp_script *s, char *item, vs_gate_completion *c)
{
    char *part[4];
    size_t n = 0;
    for (char *p = item; n < 4; n++) {
        part[n] = p;
        char *colon = strchr(p, ':');
        if (colon == NULL) {
            n++;
            break;
        }
        *colon = '\0';
        p = colon + 1;
    }
    if (n != 4 || strchr(part[3], ':') != NULL)
        return rp_fail(s, "completion '%s...': expected OP:STATUS:WR_ID:BYTE_LEN", item);
    if (strcmp(part[0], "send") == 0)
        c->opcode = VS_GATE_OP_SEND;
    else if (strcmp(part[0], "recv") == 0)
        c->opcode = VS_GATE_OP_RECV;
    else
        return rp_fail(s, "completion opcode '%s': expected send or recv", part[0]);
    uint64_t status, wr_id, byte_len;
    if (rp_u64(s, part[1], "completion status", &status) != 0 ||
        rp_u64(s, part[2], "completion wr_id", &wr_id) != 0 ||
        rp_u64(s, part[3], "completion byte_len", &byte_len) != 0)
        return -1;
    if (status > INT32_MAX)
        return rp_fail(s, "completion status %" PRIu64 " is out of range", status);
    c->status = (int32_t)status;
    c->wr_id = wr_id;
    c->byte_len = byte_len;
    return 0;
}

/* Makes the step's call. Returns 0 (the call's status in *rc, whether it emitted in
 * *emitted), 1 when the poll size differs (printed), or -1 (malformed, or out of memory). */
static int call(driver *d, rp_script *s, int *rc, vs_gate **who, FILE *out)
{
    const char *name = s->tok[2];
    *who = NULL;
    d->post_failed = 0;
    if (strcmp(name, "none") == 0)
        return rp_expect_args(s, 3, 0, name);
    if (s->ntok < 4)
        return rp_fail(s, "%s: expected the rank", name);
    uint64_t r;
    if (rp_u64(s, s->tok[3], "rank", &r) != 0)
        return -1;
    if (r > 1)
        return rp_fail(s, "rank %" PRIu64 ": expected 0 or 1", r);
    vs_gate *e = *who = d->rank[r];
    uint64_t a[4];
    if (strcmp(name, "setup") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        /* the rank's hello reads what its peer was built with, as the harness hands it */
        const vs_gate_config *peer = &d->cfg[1 - r];
        *rc = vs_gate_setup_hello(e, peer->window, peer->max_msg);
    } else if (strcmp(name, "call_gate") == 0) {
        if (rp_expect_args(s, 4, 3, name) != 0 || rp_u64(s, s->tok[4], "layer", &a[0]) != 0 ||
            rp_u64(s, s->tok[5], "gate", &a[1]) != 0 || rp_u64(s, s->tok[6], "seq", &a[2]) != 0)
            return -1;
        *rc = vs_gate_call_gate(e, a[0], a[1], a[2]);
    } else if (strcmp(name, "call_big") == 0) {
        if (rp_expect_args(s, 4, 1, name) != 0 || rp_u64(s, s->tok[4], "chunks", &a[0]) != 0)
            return -1;
        *rc = vs_gate_call_big(e, a[0]);
    } else if (strcmp(name, "call_block") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_call_block(e);
    } else if (strcmp(name, "consume") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_consume(e);
    } else if (strcmp(name, "advance") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_advance(e);
    } else if (strcmp(name, "tcp_read") == 0) {
        vs_gate_tcp t = {0};
        if (s->ntok < 5)
            return rp_fail(s, "tcp_read: expected byte VALUE, header VALUE CHUNKS DEPTH, "
                           "block LAYERS ROWS or batch LAYER ROWS SEQ");
        const tcp_kind *k = NULL;
        for (size_t i = 0; i < sizeof TCP_KINDS / sizeof TCP_KINDS[0]; i++)
            if (strcmp(s->tok[4], TCP_KINDS[i].name) == 0)
                k = &TCP_KINDS[i];
        if (k == NULL)
            return rp_fail(s, "tcp_read kind '%s': expected byte, header, block or batch",
                           s->tok[4]);
        char label[32];
        snprintf(label, sizeof label, "tcp_read %s", k->name);
        uint64_t *field[3] = {&t.value, &t.chunks, &t.depth};
        if (rp_expect_args(s, 5, k->n, label) != 0)
            return -1;
        for (size_t i = 0; i < k->n; i++)
            if (rp_u64(s, s->tok[5 + i], k->what[i], field[i]) != 0)
                return -1;
        t.kind = k->kind;
        *rc = vs_gate_tcp_read(e, &t);
    } else if (strcmp(name, "completions") == 0) {
        if (s->ntok < 6)
            return rp_fail(s, "completions: expected R CQ POLLED then the entries");
        uint64_t cq, want;
        if (rp_u64(s, s->tok[4], "cq", &cq) != 0 || rp_u64(s, s->tok[5], "polled", &want) != 0)
            return -1;
        size_t n = s->ntok - 6;
        if (want != n)
            return rp_fail(s, "completions: POLLED is %" PRIu64 " but %zu entries follow",
                           want, n);
        if (n > d->polled_cap) {
            vs_gate_completion *grown = realloc(d->polled, n * sizeof *grown);
            if (grown == NULL)
                return rp_fail(s, "out of memory");
            d->polled = grown;
            d->polled_cap = n;
        }
        for (size_t i = 0; i < n; i++)
            if (parse_completion(s, s->tok[6 + i], &d->polled[i]) != 0)
                return -1;
        uint32_t size;
        if (vs_gate_poll_size(e, &size) != VS_GATE_OK) {
            *rc = VS_GATE_REFUSED;
            return 0;
        }
        uint64_t asked = size < cq ? size : cq;
        if (asked != want) {
            fprintf(out, "step %s %s: completions polled: expected %" PRIu64 ", got %" PRIu64
                    "\n", s->tok[0], s->tok[1], want, asked);
            return 1;
        }
        *rc = vs_gate_completions(e, d->polled, n);
    } else if (strcmp(name, "timeout") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_timeout(e);
    } else if (strcmp(name, "peer_closed") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_peer_closed(e);
    } else if (strcmp(name, "poll_failed") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_poll_failed(e);
    } else if (strcmp(name, "post_failed") == 0) {
        if (rp_expect_args(s, 4, 1, name) != 0 || rp_u64(s, s->tok[4], "posted", &a[0]) != 0)
            return -1;
        *rc = vs_gate_advance(e);
        if (*rc != VS_GATE_OK)
            return 0;
        if (keep_step(d, vs_gate_out(e)) != 0)
            return rp_fail(s, "out of memory");
        d->post_failed = 1;
        d->posted = a[0];
        *rc = vs_gate_post_failed(e, a[0]);
    } else if (strcmp(name, "crash") == 0) {
        if (rp_expect_args(s, 4, 0, name) != 0)
            return -1;
        *rc = vs_gate_crash(e);
    } else {
        return rp_fail(s, "unknown call '%s'", name);
    }
    return 0;
}

static int run(driver *d, rp_script *s, size_t *steps)
{
    uint64_t v[N_CONFIG];
    if (rp_header(s, "gate", CONFIG_NAMES, N_CONFIG, v) != 0)
        return RP_MALFORMED;
    vs_gate_config cfg = {
        .vec_bytes = v[0], .max_msg = v[1], .window = v[2], .gates_per_token = v[3],
        .n_slots = v[4], .slot_start = v[5], .slot_step = v[6], .slot_mask = v[7],
        .rq_depth = v[8], .sq_depth = v[9], .big_depth = v[10], .chain_max = v[11],
        .staging_bytes = v[12], .big_last_bytes = v[13], .block_layers = v[14],
        .block_rows = v[15], .verify_window_off = v[16],
    };
    d->cfg[0] = d->cfg[1] = cfg;
    if (v[19])
        d->cfg[1].max_msg = v[19];
    if (v[20])
        d->cfg[1].window = v[20];
    if (v[21])
        d->cfg[1].block_rows = v[21];
    if (v[22] > 2) {
        rp_fail(s, "rank1_verify_window_off %" PRIu64 ": expected 0, 1 or 2", v[22]);
        return RP_MALFORMED;
    }
    if (v[22])
        d->cfg[1].verify_window_off = v[22] == 2;
    for (int r = 0; r < 2; r++) {
        char err[VS_GATE_TEXT];
        if (vs_gate_create(&d->cfg[r], v[17 + r], &d->rank[r], err, sizeof err) != VS_GATE_OK) {
            rp_fail(s, "the engine refuses the configuration of rank %d: %s", r, err);
            return RP_MALFORMED;
        }
    }
    int r;
    while ((r = rp_next(s)) == 1) {
        if (s->ntok < 3)
            return rp_fail(s, "expected STEP ACTION CALL ..."), RP_MALFORMED;
        uint64_t step;
        if (rp_u64(s, s->tok[0], "step number", &step) != 0)
            return RP_MALFORMED;
        int rc = VS_GATE_OK;
        vs_gate *who;
        int c = call(d, s, &rc, &who, stdout);
        if (c < 0)
            return RP_MALFORMED;
        if (c > 0)
            return RP_DIFFERS;
        if (rc != VS_GATE_OK) {
            rp_refused(s, vs_gate_refusal(who), stdout);
            return RP_DIFFERS;
        }
        rp_fields_clear(&d->got);
        if (who != NULL) {
            if (strcmp(s->tok[2], "crash") == 0) {
                static const vs_gate_emitted nothing;
                put_emitted(&d->got, &nothing);
            } else if (d->post_failed) {
                put_post_failed(&d->got, &d->step, d->posted, vs_gate_out(who));
            } else {
                put_emitted(&d->got, vs_gate_out(who));
            }
        }
        put_views(&d->got, d->rank);
        if (d->got.nomem)
            return RP_NOMEM;
        if (rp_compare(s, &d->got, stdout) != 0)
            return RP_DIFFERS;
        (*steps)++;
    }
    return r < 0 ? RP_MALFORMED : RP_AGREED;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRIPT (a gate replay script; - reads standard input)\n",
                argv[0]);
        return RP_MALFORMED;
    }
    rp_script s;
    if (rp_open(&s, argv[1]) != 0) {
        fprintf(stderr, "%s\n", s.err);
        return RP_MALFORMED;
    }
    driver d = {0};
    size_t steps = 0;
    int code = run(&d, &s, &steps);
    rp_report(&s, code, steps);
    for (int r = 0; r < 2; r++)
        if (d.rank[r] != NULL)
            vs_gate_destroy(d.rank[r]);
    free(d.polled);
    free(d.step_wrs);
    rp_fields_free(&d.got);
    rp_close(&s);
    return code;
}
