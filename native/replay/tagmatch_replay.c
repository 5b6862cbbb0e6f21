/* The tag-matching engine's replay driver: runs a replay script (replay.h) against
 * native/tagmatch/tagmatch_engine.c through its public header, the ABI a C transport links
 * against.
 *
 *   tagmatch_replay SCRIPT      (SCRIPT "-": standard input)
 *
 * Calls: send SENDER COMM TAG NBYTES | fin MID
 *        delivered MID COMM SRC TAG NBYTES KIND (KIND eager | rndv)
 *        post_recv COMM SRC TAG NBYTES | cancel RID | probe COMM SRC TAG
 *        start_read MID | read_done MID | send_fin MID | hw_op | sw_complete | sw_sync
 *
 * Fields, in order: what the call emitted (sends, matches, revoked, cancelled, completions,
 * reads, fins, released, probe), then the engine's view (view.status, view.completion,
 * view.stage, view.released, view.posted, view.unexpected, view.where, view.hw, view.claims,
 * view.ops, view.cq, view.counts). Completions and released buffers are a set: sorted. A
 * packet is MID:COMM:SRC:TAG:NBYTES:KIND; a probe's answer a mid or none (empty: no probe).
 *
 * Exit 0: every step agreed; 1: the first difference, printed; 2: a malformed script or one
 * the engine cannot start from; 3: out of memory.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "tagmatch_engine.h"

static const char *const CONFIG_NAMES[] = {
    "senders", "messages", "tags", "comms", "max_bytes", "eager_limit", "capacity",
};
#define N_CONFIG (sizeof CONFIG_NAMES / sizeof CONFIG_NAMES[0])
/* the names of the engine's enums, the spec's (native/generated/spec_constants.h) */
static const char *const KIND_NAMES[] = VS_SPEC_TAGMATCH_KIND_NAMES;
static const char *const OP_NAMES[] = VS_SPEC_TAGMATCH_OP_NAMES;
static const char *const CQE_NAMES[] = VS_SPEC_TAGMATCH_CQE_NAMES;
#define N_OF(names) (sizeof names / sizeof names[0])

static const char *name_of(const char *const *names, size_t n, int32_t k)
{
    return k >= 0 && (size_t)k < n ? names[k] : "?";
}

static void opt(rp_fields *f, int64_t v)
{
    if (v < 0)
        rp_putf(f, "none");
    else
        rp_putf(f, "%" PRId64, v);
}

static void ints(rp_fields *f, const char *prefix, const char *name, const int32_t *v,
                 int32_t n)
{
    rp_field_begin(f, prefix, name);
    for (int32_t i = 0; i < n; i++)
        rp_putf(f, "%s%" PRId32, i ? "," : "", v[i]);
    rp_field_end(f);
}

static int by_pair(const void *a, const void *b)
{
    const vs_tag_completion *x = a, *y = b;
    if (x->rid != y->rid)
        return x->rid < y->rid ? -1 : 1;
    return (x->code > y->code) - (x->code < y->code);
}

static int by_int(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void put_emitted(rp_fields *f, const vs_tag_out *o)
{
    rp_field_begin(f, "", "sends");
    for (int32_t i = 0; i < o->nsends; i++) {
        const vs_tag_packet *p = &o->sends[i];
        rp_putf(f, "%s%d:%d:%d:%d:%d:%s", i ? "," : "", p->mid, p->comm, p->src, p->tag,
                p->nbytes, name_of(KIND_NAMES, N_OF(KIND_NAMES), p->kind));
    }
    rp_field_end(f);
    const struct { const char *name; const vs_tag_pair *v; int32_t n; } pairs[] = {
        {"matches", o->matches, o->nmatches}, {"revoked", o->revoked, o->nrevoked}};
    for (size_t k = 0; k < 2; k++) {
        rp_field_begin(f, "", pairs[k].name);
        for (int32_t i = 0; i < pairs[k].n; i++)
            rp_putf(f, "%s%d:%d", i ? "," : "", pairs[k].v[i].rid, pairs[k].v[i].mid);
        rp_field_end(f);
    }
    ints(f, "", "cancelled", o->cancelled, o->ncancelled);
    vs_tag_completion done[VS_TAG_OUT_MAX];
    int32_t ndone = o->ncompletions < VS_TAG_OUT_MAX ? o->ncompletions : VS_TAG_OUT_MAX;
    memcpy(done, o->completions, (size_t)ndone * sizeof done[0]);
    qsort(done, (size_t)ndone, sizeof done[0], by_pair);
    rp_field_begin(f, "", "completions");
    for (int32_t i = 0; i < ndone; i++)
        rp_putf(f, "%s%d:%d", i ? "," : "", done[i].rid, done[i].code);
    rp_field_end(f);
    rp_field_begin(f, "", "reads");
    for (int32_t i = 0; i < o->nreads; i++)
        rp_putf(f, "%s%d:%d:%d", i ? "," : "", o->reads[i].mid, o->reads[i].rid,
                o->reads[i].length);
    rp_field_end(f);
    ints(f, "", "fins", o->fins, o->nfins);
    int32_t released[VS_TAG_OUT_MAX];
    int32_t nreleased = o->nreleased < VS_TAG_OUT_MAX ? o->nreleased : VS_TAG_OUT_MAX;
    memcpy(released, o->released, (size_t)nreleased * sizeof released[0]);
    qsort(released, (size_t)nreleased, sizeof released[0], by_int);
    ints(f, "", "released", released, nreleased);
    rp_field_begin(f, "", "probe");
    if (o->nprobe)
        opt(f, o->probe);
    rp_field_end(f);
}

static int put_view(rp_fields *f, vs_tag *e)
{
    vs_tag_view v;
    if (vs_tag_get_view(e, &v) != VS_TAG_OK)
        return -1;
    const char *p = "view.";
    ints(f, p, "status", v.status, v.nrecvs);
    ints(f, p, "completion", v.completion, v.nrecvs);
    ints(f, p, "stage", v.stage, v.nmsgs);
    rp_field_begin(f, p, "released");
    for (int32_t i = 0; i < v.nmsgs; i++)
        rp_putf(f, "%s%d", i ? "," : "", v.released[i] ? 1 : 0);
    rp_field_end(f);
    ints(f, p, "posted", v.posted, v.nposted);
    ints(f, p, "unexpected", v.unexpected, v.nunexpected);
    int32_t off = v.offload != 0;
    ints(f, p, "where", v.where, off ? v.nposted : 0);
    ints(f, p, "hw", v.hw, off ? v.nhw : 0);
    rp_field_begin(f, p, "claims");
    for (int32_t i = 0; off && i < v.nclaims; i++)
        rp_putf(f, "%s%d:%d:%d", i ? "," : "", v.claims[i].rid, v.claims[i].mid,
                v.claims[i].cancelling != 0);
    rp_field_end(f);
    rp_field_begin(f, p, "ops");
    for (int32_t i = 0; off && i < v.nops; i++) {
        rp_putf(f, "%s%s:%" PRId64 ":", i ? "," : "",
                name_of(OP_NAMES, N_OF(OP_NAMES), v.ops[i].kind), v.ops[i].count);
        opt(f, v.ops[i].rid);
    }
    rp_field_end(f);
    rp_field_begin(f, p, "cq");
    for (int32_t i = 0; off && i < v.ncq; i++) {
        rp_putf(f, "%s%s:", i ? "," : "", name_of(CQE_NAMES, N_OF(CQE_NAMES), v.cq[i].kind));
        opt(f, v.cq[i].rid);
        rp_putf(f, ":");
        opt(f, v.cq[i].mid);
        rp_putf(f, ":%d", v.cq[i].ok != 0);
    }
    rp_field_end(f);
    rp_field_begin(f, p, "counts");
    if (off)
        rp_putf(f, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64, v.sw_count, v.sent_count,
                v.reported, v.synced);
    else
        rp_putf(f, "0,0,0,0");
    rp_field_end(f);
    return 0;
}

/* The call's integer arguments: n of them after the call's name. */
static int args(rp_script *s, size_t n, const char *const *what, int64_t *a)
{
    if (rp_expect_args(s, 3, n, s->tok[2]) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (rp_i64(s, s->tok[3 + i], what[i], &a[i]) != 0)
            return -1;
    return 0;
}

/* Makes the step's call; -1: malformed (s->err says why). */
static int call(vs_tag *e, rp_script *s, int *rc)
{
    static const char *const SEND[] = {"sender", "comm", "tag", "nbytes"};
    static const char *const PACKET[] = {"mid", "comm", "src", "tag", "nbytes"};
    static const char *const RECV[] = {"comm", "src", "tag", "nbytes"};
    static const char *const MID[] = {"mid"};
    static const char *const RID[] = {"rid"};
    const char *name = s->tok[2];
    int64_t a[6];
    if (strcmp(name, "send") == 0) {
        if (args(s, 4, SEND, a) != 0)
            return -1;
        *rc = vs_tag_send(e, a[0], a[1], a[2], a[3]);
    } else if (strcmp(name, "fin") == 0) {
        if (args(s, 1, MID, a) != 0)
            return -1;
        *rc = vs_tag_fin(e, a[0]);
    } else if (strcmp(name, "delivered") == 0) {
        if (rp_expect_args(s, 3, 6, name) != 0)
            return -1;
        for (size_t i = 0; i < 5; i++)
            if (rp_i64(s, s->tok[3 + i], PACKET[i], &a[i]) != 0)
                return -1;
        a[5] = -1;                          /* the kind by its name (VS_TAG_EAGER, _RNDV) */
        for (size_t k = 0; k < N_OF(KIND_NAMES); k++)
            if (strcmp(s->tok[8], KIND_NAMES[k]) == 0)
                a[5] = (int64_t)k;
        if (a[5] < 0)
            return rp_fail(s, "packet kind '%s': expected %s or %s", s->tok[8],
                           KIND_NAMES[VS_TAG_EAGER], KIND_NAMES[VS_TAG_RNDV]);
        *rc = vs_tag_delivered(e, a[0], a[1], a[2], a[3], a[4], a[5]);
    } else if (strcmp(name, "post_recv") == 0) {
        if (args(s, 4, RECV, a) != 0)
            return -1;
        *rc = vs_tag_post_recv(e, a[0], a[1], a[2], a[3]);
    } else if (strcmp(name, "cancel") == 0) {
        if (args(s, 1, RID, a) != 0)
            return -1;
        *rc = vs_tag_cancel(e, a[0]);
    } else if (strcmp(name, "probe") == 0) {
        if (args(s, 3, RECV, a) != 0)
            return -1;
        *rc = vs_tag_probe(e, a[0], a[1], a[2]);
    } else if (strcmp(name, "start_read") == 0) {
        if (args(s, 1, MID, a) != 0)
            return -1;
        *rc = vs_tag_start_read(e, a[0]);
    } else if (strcmp(name, "read_done") == 0) {
        if (args(s, 1, MID, a) != 0)
            return -1;
        *rc = vs_tag_read_done(e, a[0]);
    } else if (strcmp(name, "send_fin") == 0) {
        if (args(s, 1, MID, a) != 0)
            return -1;
        *rc = vs_tag_send_fin(e, a[0]);
    } else if (strcmp(name, "hw_op") == 0) {
        if (args(s, 0, NULL, a) != 0)
            return -1;
        *rc = vs_tag_hw_op(e);
    } else if (strcmp(name, "sw_complete") == 0) {
        if (args(s, 0, NULL, a) != 0)
            return -1;
        *rc = vs_tag_sw_complete(e);
    } else if (strcmp(name, "sw_sync") == 0) {
        if (args(s, 0, NULL, a) != 0)
            return -1;
        *rc = vs_tag_sw_sync(e);
    } else {
        return rp_fail(s, "unknown call '%s'", name);
    }
    return 0;
}

static int run(vs_tag **e, rp_fields *got, rp_script *s, size_t *steps)
{
    uint64_t v[N_CONFIG];
    if (rp_header(s, "tag", CONFIG_NAMES, N_CONFIG, v) != 0)
        return RP_MALFORMED;
    vs_tag_config cfg;
    int32_t *field[N_CONFIG] = {&cfg.senders, &cfg.messages, &cfg.tags, &cfg.comms,
                                &cfg.max_bytes, &cfg.eager_limit, &cfg.capacity};
    for (size_t i = 0; i < N_CONFIG; i++) {
        if (v[i] > INT32_MAX)
            return rp_fail(s, "config %s: %" PRIu64 " is out of range", CONFIG_NAMES[i], v[i]),
                   RP_MALFORMED;
        *field[i] = (int32_t)v[i];
    }
    int rc = vs_tag_create(&cfg, e);
    if (rc == VS_TAG_NOMEM)
        return RP_NOMEM;
    if (rc != VS_TAG_OK)
        return rp_fail(s, "the engine refuses the configuration"), RP_MALFORMED;
    int r;
    while ((r = rp_next(s)) == 1) {
        uint64_t step;
        if (s->ntok < 3)
            return rp_fail(s, "expected STEP ACTION CALL ..."), RP_MALFORMED;
        if (rp_u64(s, s->tok[0], "step number", &step) != 0)
            return RP_MALFORMED;
        if (call(*e, s, &rc) != 0)
            return RP_MALFORMED;
        if (rc == VS_TAG_NOMEM)
            return RP_NOMEM;
        if (rc != VS_TAG_OK) {
            rp_refused(s, vs_tag_error(*e), stdout);
            return RP_DIFFERS;
        }
        rp_fields_clear(got);
        put_emitted(got, vs_tag_emitted(*e));
        if (put_view(got, *e) != 0 || got->nomem)
            return RP_NOMEM;
        if (rp_compare(s, got, stdout) != 0)
            return RP_DIFFERS;
        (*steps)++;
    }
    return r < 0 ? RP_MALFORMED : RP_AGREED;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRIPT (a tag-matching replay script; - reads standard "
                "input)\n", argv[0]);
        return RP_MALFORMED;
    }
    rp_script s;
    if (rp_open(&s, argv[1]) != 0) {
        fprintf(stderr, "%s\n", s.err);
        return RP_MALFORMED;
    }
    vs_tag *e = NULL;
    rp_fields got = {0};
    size_t steps = 0;
    int code = run(&e, &got, &s, &steps);
    rp_report(&s, code, steps);
    if (e != NULL)
        vs_tag_destroy(e);
    rp_fields_free(&got);
    rp_close(&s);
    return code;
}
