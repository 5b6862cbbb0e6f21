/* The native tag-matching engine (native/tagmatch/tagmatch_engine.c) as a bench_match matcher,
 * through its C ABI.
 *
 * The engine holds a whole job: a message is sent by its sender (vs_tag_send emits the
 * packet) and then arrives (vs_tag_delivered matches it); a receive is vs_tag_post_recv. A
 * match names (receive id, message id); the payload is the bench's, kept by message id. The
 * engine is sized for the largest round and reset between rounds (untimed), keeping the memory
 * it grew. */

#include "match_bench.h"

#include <stdlib.h>

#include "tagmatch_engine.h"

#define SOURCES 8
#define MAX_N 16384
#define LEN 8

struct verbspec {
    vs_tag *engine;
    const vs_tag_out *out;     /* the engine's output record (one address for its life) */
    vs_tag_config cfg;
    int64_t *value;            /* by message id */
    int64_t **dst;             /* by receive id */
    int32_t nrecvs;
    size_t completed;
};

static int fail(struct verbspec *v, char *err, size_t len, int rc)
{
    snprintf(err, len, "verbspec: %s", rc == VS_TAG_NOMEM ? "out of memory"
                                                          : vs_tag_error(v->engine));
    return -1;
}

static void *vs_open(char *err, size_t len)
{
    struct verbspec *v = calloc(1, sizeof *v);

    if (v == NULL)
        goto nomem;
    /* every tag a round uses (0..N-1, and N for the never-matching wildcards) */
    v->cfg = (vs_tag_config){SOURCES, MAX_N / SOURCES, MAX_N + 1, 1, LEN, LEN, 0};
    v->value = calloc((size_t)MAX_N, sizeof *v->value);
    v->dst = calloc((size_t)(MAX_N + 512), sizeof *v->dst);
    if (v->value == NULL || v->dst == NULL || vs_tag_create(&v->cfg, &v->engine) != VS_TAG_OK)
        goto nomem;
    v->out = vs_tag_emitted(v->engine);
    return v;
nomem:
    if (v != NULL) {
        free(v->value);
        free(v->dst);
        free(v);
    }
    snprintf(err, len, "verbspec: cannot create the engine");
    return NULL;
}

/* store the payload of the match the last call made, if it made one (a call makes at most
 * one) */
static inline void deliver_match(struct verbspec *v)
{
    const vs_tag_out *out = v->out;

    if (out->kinds & VS_TAG_OUT_MATCHES) {
        *v->dst[out->matches[0].rid] = v->value[out->matches[0].mid];
        v->completed++;
    }
}

static int vs_recv(void *ctx, int src, int tag, int64_t *dst, char *err, size_t len)
{
    struct verbspec *v = ctx;
    int rc;

    if (v->nrecvs >= MAX_N + 512) {
        snprintf(err, len, "verbspec: more receives than the bench sized for");
        return -1;
    }
    v->dst[v->nrecvs++] = dst;
    rc = vs_tag_post_recv(v->engine, 0, src == BENCH_ANY ? VS_TAG_ANY : src, tag, LEN);
    if (rc != VS_TAG_OK)
        return fail(v, err, len, rc);
    deliver_match(v);
    return 0;
}

static int vs_send(void *ctx, int src, int tag, int64_t value, char *err, size_t len)
{
    struct verbspec *v = ctx;
    const vs_tag_packet *p;
    int rc = vs_tag_send(v->engine, src, 0, tag, LEN);

    if (rc != VS_TAG_OK)
        return fail(v, err, len, rc);
    p = &v->out->sends[0];
    v->value[p->mid] = value;
    rc = vs_tag_delivered(v->engine, p->mid, p->comm, p->src, p->tag, p->nbytes, p->kind);
    if (rc != VS_TAG_OK)
        return fail(v, err, len, rc);
    deliver_match(v);
    return 0;
}

static int vs_wait(void *ctx, size_t expected, char *err, size_t len)
{
    struct verbspec *v = ctx;

    if (v->completed < expected) {
        snprintf(err, len, "verbspec: %zu of %zu receives completed", v->completed, expected);
        return -1;
    }
    return 0;
}

static void vs_reset(void *ctx)
{
    struct verbspec *v = ctx;

    vs_tag_reset(v->engine);
    v->nrecvs = 0;
    v->completed = 0;
}

static void vs_close(void *ctx)
{
    struct verbspec *v = ctx;

    vs_tag_destroy(v->engine);
    free(v->value);
    free(v->dst);
    free(v);
}

const struct matcher bench_verbspec = {
    "verbspec", vs_open, vs_recv, vs_send, vs_wait, vs_reset, vs_close,
};
