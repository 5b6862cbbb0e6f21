/* The tag-matching engine in C (tag_engine.h): refimpl/tagmatch_engine.py's machine, call for
 * call.
 *
 * Data layout. Messages (by mid, a fixed number) and receives (by rid, growing by doubling)
 * are records in arrays. Every ordered structure is an intrusive doubly linked list threaded
 * through those records by id, so an entry is unlinked in O(1) the moment it is matched or
 * cancelled and no queue ever holds a dead entry:
 *   - posted receives: one FIFO queue per envelope as posted, wildcards included ((comm, src,
 *     tag), (comm, ANY, tag), (comm, src, ANY), (comm, ANY, ANY)); an arriving message looks
 *     at the heads of the four queues its envelope selects and takes the lowest sequence
 *     number; plus one list of all pending receives in posted order (the view);
 *   - unexpected messages: each in the four queues of the receive kinds that can select it,
 *     ordered by arrival key, so a new receive takes the head of the one queue its envelope
 *     names; plus one list of all of them in arrival order (the view);
 *   - the NIC: one FIFO bucket per exact envelope and the list of receives it holds in its
 *     order; the op and completion channels are ring buffers.
 * The queues live in one open-addressing hash table keyed by (space, comm, src, tag). Queues
 * are created when a message is sent or a receive posted, before any state changes, so the
 * matching itself never allocates and a failed allocation leaves the engine as it was. */
#include "tag_engine.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* VS_MUTANT N compiles in a single deliberate fault (tests/test_native_tag.py's mutants). */
#ifndef VS_MUTANT
#define VS_MUTANT 0
#endif

enum { SPACE_POSTED = 0, SPACE_UNEXPECTED = 1, SPACE_NIC = 2 };

/* The lists a receive is linked into, and those of a message (four selection queues, then
 * the arrival-order list). */
enum { RL_QUEUE, RL_PENDING, RL_BUCKET, RL_LISTED, RL_CLAIM, RL_SETS };
enum { ML_ARRIVAL = 4, ML_SETS = 5 };

typedef struct { int32_t prev, next; } vs_link;
typedef struct { int32_t head, tail; } vs_queue;
typedef struct { int32_t space, comm, src, tag, queue; } vs_slot;   /* queue -1: empty slot */

typedef struct {
    int32_t comm, src, tag, nbytes, kind;
    int32_t matched_to;             /* the rid it matched, or -1 */
    bool sent, arrived, fin_out, unexpected;
    int64_t useq;                   /* arrival key while unexpected */
    int32_t uq[4];                  /* its four unexpected queues (made when it is sent) */
} vs_msg;

typedef struct {
    int32_t comm, src, tag, nbytes;
    int32_t where;                  /* offload, while pending: SW, HW or HW_CANCEL */
    bool pending, listed, claimed, claim_cancelling;
    int64_t seq;                    /* posted sequence number */
    int32_t rq;                     /* its posted queue */
    int32_t rb;                     /* its NIC bucket (exact envelopes under offload), or -1 */
    int32_t claim_mid;              /* a claim: the message software promised the receive */
    int64_t claim_seq;
} vs_recv;

typedef struct { int32_t kind, rid, mid; int64_t seq; bool ok; } vs_cqe_rec;

struct vs_tag {
    vs_tag_config cfg;
    int32_t nmsgs;
    bool offload;

    int32_t *sent;                  /* by sender: messages sent */
    vs_msg *msg;                    /* by mid */
    int32_t *stage;                 /* by mid */
    bool *released;                 /* by mid */
    vs_link *mlink;                 /* by mid * ML_SETS + list */

    int32_t nrecvs, rcap;
    vs_recv *recv;                  /* by rid */
    int32_t *status, *completion;   /* by rid */
    vs_link *rlink;                 /* by rid * RL_SETS + list */

    int32_t pend_head, pend_tail, npending;
    int64_t post_seq;
    int32_t unx_head, unx_tail, nunexpected;
    int64_t order;                  /* arrival key of unexpected messages without offload */

    vs_slot *slots;                 /* hash table: (space, comm, src, tag) -> queue */
    int32_t slot_cap;
    vs_queue *queues;
    int32_t nqueues, qcap;

    /* software's side of the offload */
    int32_t in_sw;                  /* pending receives kept in software */
    int32_t nclaims, claim_head, claim_tail;
    int64_t sw_count, sent_count;

    /* the NIC */
    int32_t hw_head, hw_tail, nhw;
    int64_t reported, synced, arrivals;
    vs_tag_op *ops;                 /* ring: software -> NIC */
    int32_t ops_head, nops, ops_cap;
    vs_cqe_rec *cq;                 /* ring: NIC -> software */
    int32_t cq_head, ncq, cq_cap;

    vs_tag_out out;

    /* the view's arrays, refilled by vs_tag_get_view */
    int32_t *x_posted, *x_where, *x_unexpected, *x_hw;
    int32_t x_posted_cap, x_where_cap, x_unexpected_cap, x_hw_cap;
    vs_tag_claim *x_claims;
    int32_t x_claims_cap;
    vs_tag_op *x_ops;
    int32_t x_ops_cap;
    vs_tag_cqe *x_cq;
    int32_t x_cq_cap;

    char err[256];
    int err_arg;
};

/* ------------------------------------------------------------------ errors and output */
static int refuse(vs_tag *e, int arg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    e->err_arg = arg;
    return VS_TAG_REFUSED;
}

static int nomem(vs_tag *e)
{
    snprintf(e->err, sizeof e->err, "out of memory");
    e->err_arg = -1;
    return VS_TAG_NOMEM;
}

/* Every call starts with nothing emitted and no error. */
static void begin(vs_tag *e)
{
    e->out.kinds = 0;
    e->out.nsends = e->out.nmatches = e->out.nrevoked = e->out.ncancelled = 0;
    e->out.ncompletions = e->out.nreads = e->out.nfins = e->out.nreleased = 0;
    e->out.nprobe = 0;
    e->out.probe = -1;
    e->err[0] = '\0';
    e->err_arg = -1;
}

/* Python's repr of a refimpl Packet, so refusals read the same in both engines. */
static void packet_text(char *buf, size_t n, int64_t mid, int64_t comm, int64_t src,
                        int64_t tag, int64_t nbytes, int64_t kind)
{
    const char *k = kind == VS_TAG_EAGER ? "eager" : kind == VS_TAG_RNDV ? "rndv" : "?";
    snprintf(buf, n, "Packet(mid=%" PRId64 ", comm=%" PRId64 ", src=%" PRId64 ", tag=%" PRId64
             ", nbytes=%" PRId64 ", kind='%s')", mid, comm, src, tag, nbytes, k);
}

/* ------------------------------------------------------------------ memory */
/* The capacity after doubling from cap until it holds need (-1: too large). */
static int32_t doubled(int32_t cap, int32_t need)
{
    int64_t c = cap > 0 ? cap : 8;
    while (c < need)
        c *= 2;
    return c > INT32_MAX / 2 ? -1 : (int32_t)c;
}

static int ensure_recvs(vs_tag *e, int32_t need)
{
    if (need <= e->rcap)
        return 0;
    int32_t c = doubled(e->rcap, need);
    if (c < 0)
        return -1;
    vs_recv *r = realloc(e->recv, (size_t)c * sizeof *r);
    if (r == NULL)
        return -1;
    e->recv = r;
    int32_t *s = realloc(e->status, (size_t)c * sizeof *s);
    if (s == NULL)
        return -1;
    e->status = s;
    int32_t *d = realloc(e->completion, (size_t)c * sizeof *d);
    if (d == NULL)
        return -1;
    e->completion = d;
    vs_link *l = realloc(e->rlink, (size_t)c * RL_SETS * sizeof *l);
    if (l == NULL)
        return -1;
    e->rlink = l;
    e->rcap = c;
    return 0;
}

/* A ring buffer's storage, made linear from its head when it grows. */
static void *ring_grow(void *buf, int32_t *head, int32_t count, int32_t *cap, size_t size)
{
    int32_t c = doubled(*cap, count + 1);
    if (c < 0)
        return NULL;
    char *nb = malloc((size_t)c * size);
    if (nb == NULL)
        return NULL;
    for (int32_t i = 0; i < count; i++)
        memcpy(nb + (size_t)i * size, (char *)buf + (size_t)((*head + i) % *cap) * size, size);
    free(buf);
    *head = 0;
    *cap = c;
    return nb;
}

static int reserve_op(vs_tag *e)
{
    if (e->nops < e->ops_cap)
        return 0;
    vs_tag_op *b = ring_grow(e->ops, &e->ops_head, e->nops, &e->ops_cap, sizeof *b);
    if (b == NULL)
        return -1;
    e->ops = b;
    return 0;
}

static int reserve_cqe(vs_tag *e)
{
    if (e->ncq < e->cq_cap)
        return 0;
    vs_cqe_rec *b = ring_grow(e->cq, &e->cq_head, e->ncq, &e->cq_cap, sizeof *b);
    if (b == NULL)
        return -1;
    e->cq = b;
    return 0;
}

/* ------------------------------------------------------------------ the queue table */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t key_hash(int32_t space, int32_t comm, int32_t src, int32_t tag)
{
    uint64_t a = ((uint64_t)(uint32_t)comm << 32) | (uint32_t)src;
    uint64_t b = ((uint64_t)(uint32_t)tag << 2) | (uint64_t)(uint32_t)space;
    return mix(a ^ mix(b));
}

/* The queue of a key, or -1 where none was made. */
static int32_t queue_find(const vs_tag *e, int32_t space, int32_t comm, int32_t src,
                          int32_t tag)
{
    uint64_t mask = (uint64_t)e->slot_cap - 1;
    for (uint64_t i = key_hash(space, comm, src, tag) & mask;; i = (i + 1) & mask) {
        const vs_slot *s = &e->slots[i];
        if (s->queue < 0)
            return -1;
        if (s->space == space && s->comm == comm && s->src == src && s->tag == tag)
            return s->queue;
    }
}

static void slot_put(vs_slot *slots, int32_t cap, vs_slot v)
{
    uint64_t mask = (uint64_t)cap - 1;
    uint64_t i = key_hash(v.space, v.comm, v.src, v.tag) & mask;
    while (slots[i].queue >= 0)
        i = (i + 1) & mask;
    slots[i] = v;
}

/* The queue of a key, made empty if there was none (-1: out of memory). The table stays at
 * most half full. */
static int32_t queue_get(vs_tag *e, int32_t space, int32_t comm, int32_t src, int32_t tag)
{
    int32_t q = queue_find(e, space, comm, src, tag);
    if (q >= 0)
        return q;
    if (e->nqueues == e->qcap) {
        int32_t c = doubled(e->qcap, e->nqueues + 1);
        if (c < 0)
            return -1;
        vs_queue *nq = realloc(e->queues, (size_t)c * sizeof *nq);
        if (nq == NULL)
            return -1;
        e->queues = nq;
        e->qcap = c;
    }
    if (2 * (int64_t)(e->nqueues + 1) > e->slot_cap) {
        if (e->slot_cap > INT32_MAX / 2)
            return -1;
        int32_t c = e->slot_cap * 2;
        vs_slot *ns = malloc((size_t)c * sizeof *ns);
        if (ns == NULL)
            return -1;
        for (int32_t i = 0; i < c; i++)
            ns[i].queue = -1;
        for (int32_t i = 0; i < e->slot_cap; i++)
            if (e->slots[i].queue >= 0)
                slot_put(ns, c, e->slots[i]);
        free(e->slots);
        e->slots = ns;
        e->slot_cap = c;
    }
    q = e->nqueues++;
    e->queues[q].head = e->queues[q].tail = -1;
    slot_put(e->slots, e->slot_cap, (vs_slot){space, comm, src, tag, q});
    return q;
}

/* ------------------------------------------------------------------ intrusive lists */
static vs_link *lk(vs_link *links, int stride, int32_t id, int set)
{
    return &links[(size_t)id * (size_t)stride + (size_t)set];
}

static void l_append(vs_link *L, int stride, int set, int32_t *head, int32_t *tail, int32_t id)
{
    vs_link *l = lk(L, stride, id, set);
    l->prev = *tail;
    l->next = -1;
    if (*tail >= 0)
        lk(L, stride, *tail, set)->next = id;
    else
        *head = id;
    *tail = id;
}

static void l_unlink(vs_link *L, int stride, int set, int32_t *head, int32_t *tail, int32_t id)
{
    vs_link *l = lk(L, stride, id, set);
    if (l->prev >= 0)
        lk(L, stride, l->prev, set)->next = l->next;
    else
        *head = l->next;
    if (l->next >= 0)
        lk(L, stride, l->next, set)->prev = l->prev;
    else
        *tail = l->prev;
    l->prev = l->next = -1;
}

/* Message ``mid`` into an unexpected list kept in arrival-key order: appended, or walked back
 * from the tail when it is older (a message put back after a revoked match). */
static void unx_insert(vs_tag *e, int set, int32_t *head, int32_t *tail, int32_t mid)
{
    int64_t key = e->msg[mid].useq;
    int32_t before = -1;
    for (int32_t at = *tail; at >= 0 && e->msg[at].useq > key;
         at = lk(e->mlink, ML_SETS, at, set)->prev)
        before = at;
    if (before < 0) {
        l_append(e->mlink, ML_SETS, set, head, tail, mid);
        return;
    }
    vs_link *b = lk(e->mlink, ML_SETS, before, set);
    vs_link *l = lk(e->mlink, ML_SETS, mid, set);
    l->next = before;
    l->prev = b->prev;
    if (b->prev >= 0)
        lk(e->mlink, ML_SETS, b->prev, set)->next = mid;
    else
        *head = mid;
    b->prev = mid;
}

/* ------------------------------------------------------------------ posted receives */
/* The four envelopes of receives that a message (comm, src, tag) can match: exact, any
 * source, any tag, both. */
static int32_t sel_src(int k, int32_t src) { return (k & 1) ? VS_TAG_ANY : src; }
static int32_t sel_tag(int k, int32_t tag) { return (k & 2) ? VS_TAG_ANY : tag; }

static void posted_add(vs_tag *e, int32_t rid)
{
    vs_recv *r = &e->recv[rid];
    vs_queue *q = &e->queues[r->rq];
    r->seq = ++e->post_seq;
    r->pending = true;
    l_append(e->rlink, RL_SETS, RL_QUEUE, &q->head, &q->tail, rid);
    l_append(e->rlink, RL_SETS, RL_PENDING, &e->pend_head, &e->pend_tail, rid);
    e->npending++;
}

static void posted_remove(vs_tag *e, int32_t rid)
{
    vs_recv *r = &e->recv[rid];
    vs_queue *q = &e->queues[r->rq];
    r->pending = false;
    l_unlink(e->rlink, RL_SETS, RL_QUEUE, &q->head, &q->tail, rid);
    l_unlink(e->rlink, RL_SETS, RL_PENDING, &e->pend_head, &e->pend_tail, rid);
    e->npending--;
}

/* The earliest pending receive a message (comm, src, tag) matches, or -1. */
static int32_t posted_earliest(const vs_tag *e, int32_t comm, int32_t src, int32_t tag)
{
    int32_t best = -1;
    for (int k = 0; k < 4; k++) {
        int32_t q = queue_find(e, SPACE_POSTED, comm, sel_src(k, src), sel_tag(k, tag));
        if (q < 0)
            continue;
        int32_t h = e->queues[q].head;
#if VS_MUTANT == 1
        /* mutant: a wildcard queue loses to the exact one whatever the order */
        if (h >= 0 && best < 0)
#else
        if (h >= 0 && (best < 0 || e->recv[h].seq < e->recv[best].seq))
#endif
            best = h;
    }
    return best;
}

/* ------------------------------------------------------------------ unexpected messages */
static void unexpected_add(vs_tag *e, int32_t mid, int64_t key)
{
    vs_msg *m = &e->msg[mid];
    m->useq = key;
    m->unexpected = true;
    for (int k = 0; k < 4; k++) {
        vs_queue *q = &e->queues[m->uq[k]];
        unx_insert(e, k, &q->head, &q->tail, mid);
    }
    unx_insert(e, ML_ARRIVAL, &e->unx_head, &e->unx_tail, mid);
    e->nunexpected++;
}

static void unexpected_take(vs_tag *e, int32_t mid)
{
    vs_msg *m = &e->msg[mid];
    m->unexpected = false;
    for (int k = 0; k < 4; k++) {
        vs_queue *q = &e->queues[m->uq[k]];
        l_unlink(e->mlink, ML_SETS, k, &q->head, &q->tail, mid);
    }
    l_unlink(e->mlink, ML_SETS, ML_ARRIVAL, &e->unx_head, &e->unx_tail, mid);
    e->nunexpected--;
}

/* The earliest arrived message a receive (comm, src, tag) selects, or -1. */
static int32_t unexpected_find(const vs_tag *e, int32_t comm, int32_t src, int32_t tag)
{
    int32_t q = queue_find(e, SPACE_UNEXPECTED, comm, src, tag);
    if (q < 0)
        return -1;
#if VS_MUTANT == 2
    /* mutant: the newest unexpected message first */
    return e->queues[q].tail;
#else
    return e->queues[q].head;
#endif
}

/* ------------------------------------------------------------------ lifecycle */
int vs_tag_create(const vs_tag_config *cfg, vs_tag **out)
{
    *out = NULL;
    if (cfg->senders < 0 || cfg->messages < 0 || cfg->tags < 0 || cfg->comms < 0
        || cfg->max_bytes < 0 || cfg->eager_limit < 0 || cfg->capacity < 0)
        return VS_TAG_REFUSED;
    int64_t n = (int64_t)cfg->senders * cfg->messages;
    if (n > INT32_MAX / (2 * ML_SETS))
        return VS_TAG_REFUSED;
    vs_tag *e = calloc(1, sizeof *e);
    if (e == NULL)
        return VS_TAG_NOMEM;
    e->cfg = *cfg;
    e->nmsgs = (int32_t)n;
    e->offload = cfg->capacity > 0;
    size_t nm = n > 0 ? (size_t)n : 1;
    size_t ns = cfg->senders > 0 ? (size_t)cfg->senders : 1;
    e->sent = calloc(ns, sizeof *e->sent);
    e->msg = calloc(nm, sizeof *e->msg);
    e->stage = calloc(nm, sizeof *e->stage);
    e->released = calloc(nm, sizeof *e->released);
    e->mlink = calloc(nm * ML_SETS, sizeof *e->mlink);
    e->slot_cap = 64;
    e->slots = malloc((size_t)e->slot_cap * sizeof *e->slots);
    if (!e->sent || !e->msg || !e->stage || !e->released || !e->mlink || !e->slots) {
        vs_tag_destroy(e);
        return VS_TAG_NOMEM;
    }
    for (int32_t i = 0; i < e->slot_cap; i++)
        e->slots[i].queue = -1;
    for (int32_t i = 0; i < e->nmsgs; i++)
        e->msg[i].matched_to = -1;
    e->pend_head = e->pend_tail = e->unx_head = e->unx_tail = -1;
    e->claim_head = e->claim_tail = e->hw_head = e->hw_tail = -1;
    begin(e);
    *out = e;
    return VS_TAG_OK;
}

static void *dup_array(const void *p, size_t n, size_t size, bool *ok)
{
    if (p == NULL || n == 0)
        return NULL;
    void *q = malloc(n * size);
    if (q == NULL)
        *ok = false;
    else
        memcpy(q, p, n * size);
    return q;
}

int vs_tag_clone(const vs_tag *e, vs_tag **out)
{
    *out = NULL;
    vs_tag *c = malloc(sizeof *c);
    if (c == NULL)
        return VS_TAG_NOMEM;
    *c = *e;
    bool ok = true;
    size_t nm = e->nmsgs > 0 ? (size_t)e->nmsgs : 1;
    size_t ns = e->cfg.senders > 0 ? (size_t)e->cfg.senders : 1;
    size_t rc = (size_t)e->rcap;
    c->sent = dup_array(e->sent, ns, sizeof *e->sent, &ok);
    c->msg = dup_array(e->msg, nm, sizeof *e->msg, &ok);
    c->stage = dup_array(e->stage, nm, sizeof *e->stage, &ok);
    c->released = dup_array(e->released, nm, sizeof *e->released, &ok);
    c->mlink = dup_array(e->mlink, nm * ML_SETS, sizeof *e->mlink, &ok);
    c->recv = dup_array(e->recv, rc, sizeof *e->recv, &ok);
    c->status = dup_array(e->status, rc, sizeof *e->status, &ok);
    c->completion = dup_array(e->completion, rc, sizeof *e->completion, &ok);
    c->rlink = dup_array(e->rlink, rc * RL_SETS, sizeof *e->rlink, &ok);
    c->slots = dup_array(e->slots, (size_t)e->slot_cap, sizeof *e->slots, &ok);
    c->queues = dup_array(e->queues, (size_t)e->qcap, sizeof *e->queues, &ok);
    c->ops = dup_array(e->ops, (size_t)e->ops_cap, sizeof *e->ops, &ok);
    c->cq = dup_array(e->cq, (size_t)e->cq_cap, sizeof *e->cq, &ok);
    /* the copy refills its own view arrays */
    c->x_posted = c->x_where = c->x_unexpected = c->x_hw = NULL;
    c->x_posted_cap = c->x_where_cap = c->x_unexpected_cap = c->x_hw_cap = 0;
    c->x_claims = NULL;
    c->x_ops = NULL;
    c->x_cq = NULL;
    c->x_claims_cap = c->x_ops_cap = c->x_cq_cap = 0;
    if (c->recv == NULL || c->status == NULL || c->completion == NULL || c->rlink == NULL)
        c->rcap = 0;
    if (c->queues == NULL)
        c->qcap = 0;
    if (c->ops == NULL)
        c->ops_cap = 0;
    if (c->cq == NULL)
        c->cq_cap = 0;
    if (!ok) {
        vs_tag_destroy(c);
        return VS_TAG_NOMEM;
    }
    *out = c;
    return VS_TAG_OK;
}

void vs_tag_reset(vs_tag *e)
{
    size_t nm = e->nmsgs > 0 ? (size_t)e->nmsgs : 1;
    size_t ns = e->cfg.senders > 0 ? (size_t)e->cfg.senders : 1;

    memset(e->sent, 0, ns * sizeof *e->sent);
    memset(e->msg, 0, nm * sizeof *e->msg);
    memset(e->stage, 0, nm * sizeof *e->stage);
    memset(e->released, 0, nm * sizeof *e->released);
    memset(e->mlink, 0, nm * ML_SETS * sizeof *e->mlink);
    for (int32_t i = 0; i < e->nmsgs; i++)
        e->msg[i].matched_to = -1;
    /* receives are set whole when posted: forgetting how many there were is enough */
    e->nrecvs = 0;
    e->pend_head = e->pend_tail = e->unx_head = e->unx_tail = -1;
    e->npending = e->nunexpected = 0;
    e->post_seq = e->order = 0;
    for (int32_t i = 0; i < e->slot_cap; i++)
        e->slots[i].queue = -1;
    e->nqueues = 0;
    e->in_sw = e->nclaims = 0;
    e->claim_head = e->claim_tail = e->hw_head = e->hw_tail = -1;
    e->sw_count = e->sent_count = 0;
    e->nhw = 0;
    e->reported = e->synced = e->arrivals = 0;
    e->ops_head = e->nops = e->cq_head = e->ncq = 0;
    begin(e);
}

void vs_tag_destroy(vs_tag *e)
{
    if (e == NULL)
        return;
    free(e->sent);
    free(e->msg);
    free(e->stage);
    free(e->released);
    free(e->mlink);
    free(e->recv);
    free(e->status);
    free(e->completion);
    free(e->rlink);
    free(e->slots);
    free(e->queues);
    free(e->ops);
    free(e->cq);
    free(e->x_posted);
    free(e->x_where);
    free(e->x_unexpected);
    free(e->x_hw);
    free(e->x_claims);
    free(e->x_ops);
    free(e->x_cq);
    free(e);
}

const char *vs_tag_error(const vs_tag *e) { return e->err; }
int vs_tag_error_arg(const vs_tag *e) { return e->err_arg; }
const vs_tag_out *vs_tag_emitted(const vs_tag *e) { return &e->out; }

/* ------------------------------------------------------------------ the view */
/* buf grown to hold need items (at least one); NULL when out of memory, buf still valid. */
static void *x_room(void *buf, int32_t *cap, int32_t need, size_t size)
{
    if (need < 1)
        need = 1;
    if (buf != NULL && need <= *cap)
        return buf;
    int32_t c = doubled(*cap, need);
    if (c < 0)
        return NULL;
    void *nb = realloc(buf, (size_t)c * size);
    if (nb != NULL)
        *cap = c;
    return nb;
}

int vs_tag_get_view(vs_tag *e, vs_tag_view *v)
{
    void *p;
    if ((p = x_room(e->x_posted, &e->x_posted_cap, e->npending, sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_posted = p;
    if ((p = x_room(e->x_where, &e->x_where_cap, e->npending, sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_where = p;
    if ((p = x_room(e->x_unexpected, &e->x_unexpected_cap, e->nunexpected,
                    sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_unexpected = p;
    if ((p = x_room(e->x_hw, &e->x_hw_cap, e->nhw, sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_hw = p;
    if ((p = x_room(e->x_claims, &e->x_claims_cap, e->nclaims, sizeof(vs_tag_claim))) == NULL)
        return nomem(e);
    e->x_claims = p;
    if ((p = x_room(e->x_ops, &e->x_ops_cap, e->nops, sizeof(vs_tag_op))) == NULL)
        return nomem(e);
    e->x_ops = p;
    if ((p = x_room(e->x_cq, &e->x_cq_cap, e->ncq, sizeof(vs_tag_cqe))) == NULL)
        return nomem(e);
    e->x_cq = p;

    int32_t i = 0;
    for (int32_t r = e->pend_head; r >= 0; r = lk(e->rlink, RL_SETS, r, RL_PENDING)->next, i++) {
        e->x_posted[i] = r;
        e->x_where[i] = e->recv[r].where;
    }
    i = 0;
    for (int32_t m = e->unx_head; m >= 0; m = lk(e->mlink, ML_SETS, m, ML_ARRIVAL)->next)
        e->x_unexpected[i++] = m;
    i = 0;
    for (int32_t r = e->hw_head; r >= 0; r = lk(e->rlink, RL_SETS, r, RL_LISTED)->next)
        e->x_hw[i++] = r;
    i = 0;
    for (int32_t r = e->claim_head; r >= 0; r = lk(e->rlink, RL_SETS, r, RL_CLAIM)->next, i++) {
        e->x_claims[i].rid = r;
        e->x_claims[i].mid = e->recv[r].claim_mid;
        e->x_claims[i].cancelling = e->recv[r].claim_cancelling;
    }
    for (i = 0; i < e->nops; i++)
        e->x_ops[i] = e->ops[(e->ops_head + i) % e->ops_cap];
    for (i = 0; i < e->ncq; i++) {
        const vs_cqe_rec *c = &e->cq[(e->cq_head + i) % e->cq_cap];
        e->x_cq[i] = (vs_tag_cqe){c->kind, c->rid, c->mid, c->ok};
    }
    v->nrecvs = e->nrecvs;
    v->status = e->status;
    v->completion = e->completion;
    v->nmsgs = e->nmsgs;
    v->stage = e->stage;
    v->released = e->released;
    v->nposted = e->npending;
    v->posted = e->x_posted;
    v->where = e->x_where;
    v->nunexpected = e->nunexpected;
    v->unexpected = e->x_unexpected;
    v->offload = e->offload;
    v->nhw = e->nhw;
    v->hw = e->x_hw;
    v->nclaims = e->nclaims;
    v->claims = e->x_claims;
    v->nops = e->nops;
    v->ops = e->x_ops;
    v->ncq = e->ncq;
    v->cq = e->x_cq;
    v->sw_count = e->sw_count;
    v->sent_count = e->sent_count;
    v->reported = e->reported;
    v->synced = e->synced;
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ checks */
static bool in_range(int64_t v, int64_t lo, int64_t hi) { return lo <= v && v <= hi; }

/* value in 0..hi-1 (or ANY where a wildcard is allowed), else a refusal naming it. */
static int check(vs_tag *e, int arg, const char *what, int64_t value, int32_t hi, bool wildcard)
{
    if (wildcard && value == VS_TAG_ANY)
        return VS_TAG_OK;
    if (in_range(value, 0, (int64_t)hi - 1))
        return VS_TAG_OK;
    return refuse(e, arg, "%s %" PRId64 " is outside 0..%" PRId32 "%s", what, value, hi - 1,
                  wildcard ? " or ANY (-1)" : "");
}

static int check_sent(vs_tag *e, int64_t mid)
{
    if (!in_range(mid, 0, (int64_t)e->nmsgs - 1) || !e->msg[mid].sent)
        return refuse(e, 0, "message %" PRId64 " was never sent", mid);
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ emitting */
static void emit_released(vs_tag *e, int32_t mid)
{
    e->out.kinds |= VS_TAG_OUT_RELEASED;
    e->out.released[e->out.nreleased++] = mid;
}

static int32_t code_of(const vs_tag *e, int32_t rid, int32_t mid)
{
#if VS_MUTANT == 4
    /* mutant: a message one byte longer than the buffer is not flagged truncated */
    return e->msg[mid].nbytes > e->recv[rid].nbytes + 1 ? VS_TAG_TRUNCATED : VS_TAG_DONE_OK;
#else
    return e->msg[mid].nbytes > e->recv[rid].nbytes ? VS_TAG_TRUNCATED : VS_TAG_DONE_OK;
#endif
}

/* A match (rid, mid), after undoing a revoked one (revoked_rid >= 0): an eager message
 * completes its receive, a rendezvous one needs a READ. */
static void matched(vs_tag *e, int32_t rid, int32_t mid, int32_t revoked_rid,
                    int32_t revoked_mid)
{
    if (revoked_rid >= 0) {
        e->status[revoked_rid] = VS_TAG_PENDING;
        e->completion[revoked_rid] = 0;
        e->stage[revoked_mid] = VS_TAG_IDLE;
        e->msg[revoked_mid].matched_to = -1;
        e->out.kinds |= VS_TAG_OUT_REVOKED;
        e->out.revoked[e->out.nrevoked++] = (vs_tag_pair){revoked_rid, revoked_mid};
    }
    e->status[rid] = mid;
    e->msg[mid].matched_to = rid;
    e->out.kinds |= VS_TAG_OUT_MATCHES;
    e->out.matches[e->out.nmatches++] = (vs_tag_pair){rid, mid};
    if (e->msg[mid].kind == VS_TAG_EAGER) {
        e->completion[rid] = code_of(e, rid, mid);
        e->out.kinds |= VS_TAG_OUT_COMPLETIONS;
        e->out.completions[e->out.ncompletions++] = (vs_tag_completion){rid, e->completion[rid]};
    } else {
        e->stage[mid] = VS_TAG_NEED_READ;
    }
}

/* ------------------------------------------------------------------ offload helpers */
static void push_op(vs_tag *e, int32_t kind, int64_t count, int32_t rid)
{
    e->ops[(e->ops_head + e->nops) % e->ops_cap] = (vs_tag_op){kind, count, rid};
    e->nops++;
    e->sent_count = count;
}

static void push_cqe(vs_tag *e, int32_t kind, int32_t rid, int32_t mid, int64_t seq, bool ok)
{
    e->cq[(e->cq_head + e->ncq) % e->cq_cap] = (vs_cqe_rec){kind, rid, mid, seq, ok};
    e->ncq++;
}

/* Remove a pending receive; its location (SW without offload). */
static int32_t unpost(vs_tag *e, int32_t rid)
{
    posted_remove(e, rid);
    if (!e->offload)
        return VS_TAG_SW;
    int32_t loc = e->recv[rid].where;
    if (loc == VS_TAG_SW)
        e->in_sw--;
    return loc;
}

static bool offloadable(const vs_tag *e, int64_t src, int64_t tag)
{
    int64_t used = (int64_t)e->npending - e->in_sw + e->nclaims;
    /* the NIC holds only a head of the posted list: nothing may wait in software before it */
    return src != VS_TAG_ANY && tag != VS_TAG_ANY && used < e->cfg.capacity && e->in_sw == 0;
}

static void claim_set(vs_tag *e, int32_t rid, int32_t mid, int64_t seq, bool cancelling)
{
    vs_recv *r = &e->recv[rid];
    if (!r->claimed) {
        r->claimed = true;
        l_append(e->rlink, RL_SETS, RL_CLAIM, &e->claim_head, &e->claim_tail, rid);
        e->nclaims++;
    }
    r->claim_mid = mid;
    r->claim_seq = seq;
    r->claim_cancelling = cancelling;
}

static void claim_drop(vs_tag *e, int32_t rid)
{
    e->recv[rid].claimed = false;
    l_unlink(e->rlink, RL_SETS, RL_CLAIM, &e->claim_head, &e->claim_tail, rid);
    e->nclaims--;
}

/* The NIC drops receive rid from its list. */
static void nic_unlist(vs_tag *e, int32_t rid)
{
    vs_recv *r = &e->recv[rid];
    vs_queue *b = &e->queues[r->rb];
    r->listed = false;
    l_unlink(e->rlink, RL_SETS, RL_BUCKET, &b->head, &b->tail, rid);
    l_unlink(e->rlink, RL_SETS, RL_LISTED, &e->hw_head, &e->hw_tail, rid);
    e->nhw--;
}

/* ------------------------------------------------------------------ senders */
int vs_tag_send(vs_tag *e, int64_t sender, int64_t comm, int64_t tag, int64_t nbytes)
{
    begin(e);
    int rc;
    if ((rc = check(e, 0, "sender", sender, e->cfg.senders, false))
        || (rc = check(e, 1, "communicator", comm, e->cfg.comms, false))
        || (rc = check(e, 2, "tag", tag, e->cfg.tags, false)))
        return rc;
    if (!in_range(nbytes, 1, e->cfg.max_bytes))
        return refuse(e, 3, "length %" PRId64 " is outside 1..%" PRId32, nbytes,
                      e->cfg.max_bytes);
    int32_t k = e->sent[sender];
    if (k >= e->cfg.messages)
        return refuse(e, 0, "sender %" PRId64 " has sent all its %" PRId32 " messages", sender,
                      e->cfg.messages);
    int32_t mid = (int32_t)sender * e->cfg.messages + k;
    vs_msg *m = &e->msg[mid];
    /* the message's unexpected queues, made now so that matching never allocates */
    for (int j = 0; j < 4; j++) {
        int32_t q = queue_get(e, SPACE_UNEXPECTED, (int32_t)comm, sel_src(j, (int32_t)sender),
                              sel_tag(j, (int32_t)tag));
        if (q < 0)
            return nomem(e);
        m->uq[j] = q;
    }
    e->sent[sender] = k + 1;
    m->sent = true;
    m->comm = (int32_t)comm;
    m->src = (int32_t)sender;
    m->tag = (int32_t)tag;
    m->nbytes = (int32_t)nbytes;
#if VS_MUTANT == 5
    /* mutant: a message of exactly eager_limit bytes goes by rendezvous */
    m->kind = nbytes < e->cfg.eager_limit ? VS_TAG_EAGER : VS_TAG_RNDV;
#else
    m->kind = nbytes <= e->cfg.eager_limit ? VS_TAG_EAGER : VS_TAG_RNDV;
#endif
    e->out.kinds |= VS_TAG_OUT_SENDS;
    e->out.sends[e->out.nsends++] = (vs_tag_packet){mid, m->comm, m->src, m->tag, m->nbytes,
                                                    m->kind};
    return VS_TAG_OK;
}

int vs_tag_fin(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (!e->msg[mid].fin_out)
        return refuse(e, 0, "no FIN for message %" PRId64 " is on its way", mid);
    e->msg[mid].fin_out = false;
#if VS_MUTANT != 7
    /* (mutant 7: the FIN's release is announced but not kept) */
    e->released[mid] = true;
#endif
    emit_released(e, (int32_t)mid);
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ the receiver */
int vs_tag_delivered(vs_tag *e, int64_t mid, int64_t comm, int64_t src, int64_t tag,
                     int64_t nbytes, int64_t kind)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    vs_msg *m = &e->msg[mid];
    if (comm != m->comm || src != m->src || tag != m->tag || nbytes != m->nbytes
        || kind != m->kind) {
        char got[160], sent[160];
        packet_text(got, sizeof got, mid, comm, src, tag, nbytes, kind);
        packet_text(sent, sizeof sent, mid, m->comm, m->src, m->tag, m->nbytes, m->kind);
        return refuse(e, VS_TAG_ARG_PACKET, "packet %s differs from what sender %" PRId32
                      " sent: %s", got, m->src, sent);
    }
    if (m->arrived)
        return refuse(e, 0, "message %" PRId64 " already arrived (each message arrives once)",
                      mid);
    if (e->offload && reserve_cqe(e))
        return nomem(e);
    m->arrived = true;
    if (m->kind == VS_TAG_EAGER && !e->released[mid]) {
        /* the eager payload's ACK completes the send */
        e->released[mid] = true;
        emit_released(e, (int32_t)mid);
    }
    if (e->offload) {
        /* the NIC: matching is held until software's count covers every reported message */
        int64_t seq = e->arrivals++;
#if VS_MUTANT == 6
        /* mutant: the NIC matches while software's count is behind */
        bool held = false;
#else
        bool held = e->synced != e->reported;
#endif
        if (!held) {
            int32_t b = queue_find(e, SPACE_NIC, m->comm, m->src, m->tag);
            int32_t h = b >= 0 ? e->queues[b].head : -1;
            if (h >= 0) {
                nic_unlist(e, h);
                push_cqe(e, VS_TAG_CQE_MATCH, h, (int32_t)mid, seq, false);
                return VS_TAG_OK;
            }
        }
        e->reported++;
        push_cqe(e, VS_TAG_CQE_UNEXPECTED, -1, (int32_t)mid, seq, false);
        return VS_TAG_OK;
    }
    int32_t rid = posted_earliest(e, m->comm, m->src, m->tag);
    if (rid < 0) {
        unexpected_add(e, (int32_t)mid, ++e->order);
        return VS_TAG_OK;
    }
    posted_remove(e, rid);
    matched(e, rid, (int32_t)mid, -1, -1);
    return VS_TAG_OK;
}

int vs_tag_post_recv(vs_tag *e, int64_t comm, int64_t src, int64_t tag, int64_t nbytes)
{
    begin(e);
    int rc;
    if ((rc = check(e, 0, "communicator", comm, e->cfg.comms, false))
        || (rc = check(e, 1, "source", src, e->cfg.senders, true))
        || (rc = check(e, 2, "tag", tag, e->cfg.tags, true)))
        return rc;
    if (!in_range(nbytes, 1, e->cfg.max_bytes))
        return refuse(e, 3, "buffer length %" PRId64 " is outside 1..%" PRId32, nbytes,
                      e->cfg.max_bytes);
    /* everything this call may need, before anything changes */
    int32_t rid = e->nrecvs;
    if (rid >= INT32_MAX / (2 * RL_SETS) || ensure_recvs(e, rid + 1))
        return nomem(e);
    int32_t rq = queue_get(e, SPACE_POSTED, (int32_t)comm, (int32_t)src, (int32_t)tag);
    if (rq < 0)
        return nomem(e);
    int32_t rb = -1;
    if (e->offload) {
        if (reserve_op(e))
            return nomem(e);
        if (src != VS_TAG_ANY && tag != VS_TAG_ANY
            && (rb = queue_get(e, SPACE_NIC, (int32_t)comm, (int32_t)src, (int32_t)tag)) < 0)
            return nomem(e);
    }
    e->nrecvs++;
    vs_recv *r = &e->recv[rid];
    memset(r, 0, sizeof *r);
    r->comm = (int32_t)comm;
    r->src = (int32_t)src;
    r->tag = (int32_t)tag;
    r->nbytes = (int32_t)nbytes;
    r->rq = rq;
    r->rb = rb;
    r->claim_mid = -1;
    for (int s = 0; s < RL_SETS; s++)
        *lk(e->rlink, RL_SETS, rid, s) = (vs_link){-1, -1};
    e->status[rid] = VS_TAG_PENDING;
    e->completion[rid] = 0;
    int32_t mid = unexpected_find(e, r->comm, r->src, r->tag);
    if (mid >= 0) {
        unexpected_take(e, mid);
        matched(e, rid, mid, -1, -1);
        return VS_TAG_OK;
    }
    bool to_nic = e->offload && offloadable(e, src, tag);   /* judged before it is counted */
    posted_add(e, rid);
    if (e->offload) {
        if (to_nic) {
            r->where = VS_TAG_HW;
            push_op(e, VS_TAG_OP_ADD, e->sw_count, rid);
        } else {
            r->where = VS_TAG_SW;
            e->in_sw++;
        }
    }
    return VS_TAG_OK;
}

int vs_tag_cancel(vs_tag *e, int64_t rid)
{
    begin(e);
    if (!in_range(rid, 0, (int64_t)e->nrecvs - 1))
        return refuse(e, 0, "receive %" PRId64 " was never posted", rid);
    vs_recv *r = &e->recv[rid];
    if (!r->pending)
        return VS_TAG_OK;
    int32_t loc = e->offload ? r->where : VS_TAG_SW;
    if (loc == VS_TAG_HW_CANCEL)
        return refuse(e, 0, "receive %" PRId64 " is already being cancelled", rid);
    if (loc == VS_TAG_HW) {
        /* the NIC holds it: ask for it back; the answer comes as a completion */
        if (reserve_op(e))
            return nomem(e);
        r->where = VS_TAG_HW_CANCEL;
        push_op(e, VS_TAG_OP_REMOVE, e->sw_count, (int32_t)rid);
        return VS_TAG_OK;
    }
    unpost(e, (int32_t)rid);
    e->status[rid] = VS_TAG_CANCELLED;
    e->out.kinds |= VS_TAG_OUT_CANCELLED;
    e->out.cancelled[e->out.ncancelled++] = (int32_t)rid;
    return VS_TAG_OK;
}

int vs_tag_probe(vs_tag *e, int64_t comm, int64_t src, int64_t tag)
{
    begin(e);
    int rc;
    if ((rc = check(e, 0, "communicator", comm, e->cfg.comms, false))
        || (rc = check(e, 1, "source", src, e->cfg.senders, true))
        || (rc = check(e, 2, "tag", tag, e->cfg.tags, true)))
        return rc;
    if (e->offload && e->ncq > 0)
        return refuse(e, -1, "probe with NIC completions unhandled: progress them first");
    e->out.kinds |= VS_TAG_OUT_PROBE;
    e->out.nprobe = 1;
#if VS_MUTANT == 8
    /* mutant: a probe answers with the newest message it selects */
    int32_t q = queue_find(e, SPACE_UNEXPECTED, (int32_t)comm, (int32_t)src, (int32_t)tag);
    e->out.probe = q < 0 ? -1 : e->queues[q].tail;
#else
    e->out.probe = unexpected_find(e, (int32_t)comm, (int32_t)src, (int32_t)tag);
#endif
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ rendezvous */
int vs_tag_start_read(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->stage[mid] != VS_TAG_NEED_READ)
        return refuse(e, 0, "message %" PRId64 " has no READ to start (stage %" PRId32 ")",
                      mid, e->stage[mid]);
    int32_t rid = e->msg[mid].matched_to;
    e->stage[mid] = VS_TAG_READING;
    int32_t len = e->msg[mid].nbytes < e->recv[rid].nbytes ? e->msg[mid].nbytes
                                                           : e->recv[rid].nbytes;
    e->out.kinds |= VS_TAG_OUT_READS;
    e->out.reads[e->out.nreads++] = (vs_tag_read){(int32_t)mid, rid, len};
    return VS_TAG_OK;
}

int vs_tag_read_done(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->stage[mid] != VS_TAG_READING && e->stage[mid] != VS_TAG_FIN_EARLY)
        return refuse(e, 0, "message %" PRId64 " has no READ in flight", mid);
    int32_t rid = e->msg[mid].matched_to;
    e->stage[mid] = e->stage[mid] == VS_TAG_FIN_EARLY ? VS_TAG_FIN_SENT : VS_TAG_READ_DONE;
    e->completion[rid] = code_of(e, rid, (int32_t)mid);
    e->out.kinds |= VS_TAG_OUT_COMPLETIONS;
    e->out.completions[e->out.ncompletions++] = (vs_tag_completion){rid, e->completion[rid]};
    return VS_TAG_OK;
}

int vs_tag_send_fin(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->stage[mid] != VS_TAG_READ_DONE)
        return refuse(e, 0, "message %" PRId64 "'s READ has not completed: no FIN yet", mid);
    e->stage[mid] = VS_TAG_FIN_SENT;
    e->msg[mid].fin_out = true;
    e->out.kinds |= VS_TAG_OUT_FINS;
    e->out.fins[e->out.nfins++] = (int32_t)mid;
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ offload */
static int need_offload(vs_tag *e)
{
    if (!e->offload)
        return refuse(e, -1, "no tag-matching offload (capacity 0)");
    return VS_TAG_OK;
}

int vs_tag_hw_op(vs_tag *e)
{
    begin(e);
    int rc = need_offload(e);
    if (rc)
        return rc;
    if (e->nops == 0)
        return refuse(e, -1, "the NIC has no op to execute");
    const vs_tag_op *op = &e->ops[e->ops_head];
    if (op->kind == VS_TAG_OP_REMOVE && reserve_cqe(e))
        return nomem(e);
    vs_tag_op o = *op;
    e->ops_head = (e->ops_head + 1) % e->ops_cap;
    e->nops--;
#if VS_MUTANT == 10
    /* mutant: only a sync op brings the NIC software's count */
    if (o.kind == VS_TAG_OP_SYNC)
#endif
    e->synced = o.count;
    if (o.kind == VS_TAG_OP_ADD) {
        vs_recv *r = &e->recv[o.rid];
        vs_queue *b = &e->queues[r->rb];
        r->listed = true;
        l_append(e->rlink, RL_SETS, RL_BUCKET, &b->head, &b->tail, o.rid);
        l_append(e->rlink, RL_SETS, RL_LISTED, &e->hw_head, &e->hw_tail, o.rid);
        e->nhw++;
    } else if (o.kind == VS_TAG_OP_REMOVE) {
        /* a failed remove: the tag was consumed by a match whose completion is queued */
        bool found = e->recv[o.rid].listed;
        if (found)
            nic_unlist(e, o.rid);
        push_cqe(e, VS_TAG_CQE_REMOVED, o.rid, -1, 0, found);
    }
    return VS_TAG_OK;
}

int vs_tag_sw_sync(vs_tag *e)
{
    begin(e);
    int rc = need_offload(e);
    if (rc)
        return rc;
    if (e->sent_count >= e->sw_count)
        return refuse(e, -1, "the NIC already has software's unexpected count");
    if (reserve_op(e))
        return nomem(e);
    push_op(e, VS_TAG_OP_SYNC, e->sw_count, -1);
    return VS_TAG_OK;
}

int vs_tag_sw_complete(vs_tag *e)
{
    begin(e);
    int rc = need_offload(e);
    if (rc)
        return rc;
    if (e->ncq == 0)
        return refuse(e, -1, "the NIC has no completion to handle");
    vs_cqe_rec c = e->cq[e->cq_head];
    if (c.kind == VS_TAG_CQE_MATCH && !e->recv[c.rid].pending && !e->recv[c.rid].claimed)
        return refuse(e, -1, "the NIC matched receive %" PRId32 ", which software does not "
                      "shadow", c.rid);
    if (c.kind == VS_TAG_CQE_UNEXPECTED && reserve_op(e))
        return nomem(e);
    e->cq_head = (e->cq_head + 1) % e->cq_cap;
    e->ncq--;
    if (c.kind == VS_TAG_CQE_MATCH) {
        vs_recv *r = &e->recv[c.rid];
        if (r->pending) {
#if VS_MUTANT == 9
            /* mutant: a receive being cancelled that the NIC matched reads as cancelled */
            if (r->where == VS_TAG_HW_CANCEL) {
                unpost(e, c.rid);
                e->status[c.rid] = VS_TAG_CANCELLED;
                e->out.kinds |= VS_TAG_OUT_CANCELLED;
                e->out.cancelled[e->out.ncancelled++] = c.rid;
                return VS_TAG_OK;
            }
#endif
            unpost(e, c.rid);
            matched(e, c.rid, c.mid, -1, -1);
            return VS_TAG_OK;
        }
        /* the NIC filled a receive software had promised to an earlier message: that
         * message goes back to the unexpected list */
        int32_t old = r->claim_mid;
        int64_t old_seq = r->claim_seq;
        claim_set(e, c.rid, c.mid, c.seq, r->claim_cancelling);
        unexpected_add(e, old, old_seq);
        matched(e, c.rid, c.mid, c.rid, old);
        return VS_TAG_OK;
    }
    if (c.kind == VS_TAG_CQE_UNEXPECTED) {
        e->sw_count++;
        const vs_msg *m = &e->msg[c.mid];
        int32_t rid = posted_earliest(e, m->comm, m->src, m->tag);
        if (rid < 0) {
            unexpected_add(e, c.mid, c.seq);
            return VS_TAG_OK;
        }
        int32_t loc = unpost(e, rid);
        if (loc == VS_TAG_HW) {
            /* claim it: the NIC is held, so this remove cannot lose to a NIC match */
            claim_set(e, rid, c.mid, c.seq, false);
#if VS_MUTANT != 3
            /* (mutant 3: the claim is never sent to the NIC) */
            push_op(e, VS_TAG_OP_REMOVE, e->sw_count, rid);
#endif
        } else if (loc == VS_TAG_HW_CANCEL) {
            claim_set(e, rid, c.mid, c.seq, true);
        }
        matched(e, rid, c.mid, -1, -1);
        return VS_TAG_OK;
    }
    /* a remove's answer */
    if (e->recv[c.rid].claimed) {
        claim_drop(e, c.rid);       /* a claim's slot is free; a cancel of it failed */
        return VS_TAG_OK;
    }
    vs_recv *r = &e->recv[c.rid];
    if (r->pending && r->where == VS_TAG_HW_CANCEL && c.ok) {
        unpost(e, c.rid);
        e->status[c.rid] = VS_TAG_CANCELLED;
        e->out.kinds |= VS_TAG_OUT_CANCELLED;
        e->out.cancelled[e->out.ncancelled++] = c.rid;
    }
    return VS_TAG_OK;              /* otherwise matched before the remove ran: it failed */
}
