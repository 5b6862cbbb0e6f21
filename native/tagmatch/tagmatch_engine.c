/* The tag-matching engine in C (tagmatch_engine.h): refimpl/engines/tagmatch_engine.py's machine, call for
 * call.
 *
 * Data layout. Messages (by mid, a fixed number) and receives (by rid, growing by doubling)
 * are records in arrays. Every ordered structure is an intrusive doubly linked list threaded
 * through those records by id, so an entry is unlinked in O(1) the moment it is matched or
 * cancelled and no list ever holds a dead entry. The lists that matching searches hang from
 * bucket tables: fixed arrays of list heads, one table per structure and wildcard kind, sized
 * when the engine is created and never grown.
 *   - posted receives: one table per kind (exact (comm, src, tag), (comm, ANY, tag),
 *     (comm, src, ANY), (comm, ANY, ANY)); a receive is appended to the bucket of its envelope
 *     in its kind. Receive ids are given in posting order, so within a bucket and across
 *     kinds the lower rid is the earlier receive. An arriving message looks, in each kind that
 *     has a pending receive, at the first entry of its bucket that it matches (entries of
 *     other envelopes that share the bucket are skipped) and takes the lowest rid;
 *   - unexpected messages: one list of all of them in arrival-key order and, for each receive
 *     kind in use, that kind's table, each bucket in the same order (with one communicator the
 *     list itself is the (comm, ANY, ANY) bucket); a receive or probe takes the first message
 *     it selects in the one bucket its envelope names;
 *   - the NIC: one table of exact envelopes holding the receives it lists, FIFO per bucket,
 *     and the list of those receives in its order; the op and completion channels are ring
 *     buffers.
 * A table has a bucket for every key of its kind where the configuration's ranges allow it,
 * and is then a direct index; otherwise buckets are found by the key's low bits offset by a
 * multiplicative hash of the rest. Nothing on the matching path allocates; receives outgrow
 * their array only when more are posted than ever before, before any state changes. */
#include "tagmatch_engine.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Superword vectorization would gather a record's fields, which arrive in separate registers,
 * through a vector register before storing them; on these short paths that costs more
 * instructions than the scalar stores it replaces. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-slp-vectorize")
#endif

/* The most buckets a table has: the bound on the tables' memory. Tests build the engine with
 * a tiny bound to make every bucket shared by many envelopes. */
#ifndef VS_TAG_MAX_BUCKETS
#define VS_TAG_MAX_BUCKETS (1 << 20)
#endif

/* The matching path's helpers are inlined into every call that uses them; refusals are kept
 * out of the way (COLD), and so are the paths a call takes only when it must do more than its
 * usual work (APART: growing, offload), so that the usual path's code stays small and keeps
 * its values in registers. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((cold, noinline))
#define APART static __attribute__((noinline))
#else
#define HOT static inline
#define COLD static
#define APART static
#endif

/* Wildcard kinds: bit 0, any source; bit 1, any tag. */
enum { K_EXACT = 0, K_ANY_SRC = 1, K_ANY_TAG = 2, K_ANY_BOTH = 3, NKINDS = 4 };
/* A message's lists: one per kind, then the arrival-order list. */
enum { ML_ARRIVAL = NKINDS, ML_SETS = NKINDS + 1 };

typedef struct { int32_t prev, next; } vs_link;
typedef struct { int32_t head, tail; } vs_list;

typedef struct {
    vs_list *b;
    uint64_t mask;                  /* buckets - 1 (a power of two) */
    int bits;                       /* log2(buckets) */
    uint64_t mult;                  /* slot_of: the high part's multiplier, */
    int spread;                     /* and the shift of the product */
} vs_table;

/* A message: one small record holds all that a match reads and writes (32 bytes, so that
 * no record straddles two cache lines). */
typedef struct {
    int32_t comm, src, tag, nbytes;
    int32_t matched_to;             /* the rid it matched, or -1 */
    uint8_t kind, stage;
    bool sent, arrived, fin_out, released;
    uint8_t unused[6];
} vs_msg;

/* A message's unexpected lists (its four buckets, then the arrival list), its key there and
 * its buckets' indices: one cache line. */
typedef struct {
    vs_link link[ML_SETS];
    int64_t useq;                   /* arrival key while unexpected */
    uint32_t bucket[NKINDS];
} vs_mlink;

/* A receive: likewise one small record. Its status is the matched mid, PENDING or CANCELLED. */
typedef struct {
    int32_t comm, src, tag, nbytes;
    vs_link q;                      /* its posted bucket, while pending */
    int32_t status;
    uint8_t kind, pending, where;   /* where: offload, while pending: SW, HW or HW_CANCEL */
    uint8_t completion;
} vs_recv;

/* A receive's offload state (kept only with offload). */
typedef struct {
    vs_link bucket, listed, claim;  /* NIC bucket, the NIC's list, the claims */
    uint32_t nic_bucket;
    bool listed_now, claimed, claim_cancelling;
    int32_t claim_mid;              /* a claim: the message software promised the receive */
    int64_t claim_seq;
} vs_recv_nic;

typedef struct { int32_t kind, rid, mid; int64_t seq; bool ok; } vs_cqe_rec;

struct vs_tag {
    vs_tag_config cfg;
    int32_t nmsgs;
    bool offload;

    int32_t *sent;                  /* by sender: messages sent */
    vs_msg *msg;                    /* by mid */
    vs_mlink *mlink;                /* by mid */

    int32_t nrecvs, rcap;
    vs_recv *recv;                  /* by rid */
    vs_recv_nic *rnic;              /* by rid, with offload */

    vs_table posted[NKINDS], unx[NKINDS], nic;
    int32_t npost[NKINDS];          /* pending receives of each kind */
    unsigned post_on;               /* the kinds with a pending receive */
    int32_t npending;
    vs_list arrival;                /* unexpected messages in arrival-key order */
    bool one_comm;                  /* one communicator: arrival is (comm, ANY, ANY)'s bucket */
    unsigned unx_on, unx_used;      /* kinds whose unexpected tables are in use; looked in */
    int src_bits, tag_bits;         /* key layout (env_key) */
    int32_t nunexpected;
    int64_t order;                  /* arrival key of unexpected messages without offload */

    /* software's side of the offload */
    int32_t in_sw;                  /* pending receives kept in software */
    int32_t nclaims;
    vs_list claims;
    int64_t sw_count, sent_count;

    /* the NIC */
    vs_list hw;
    int32_t nhw;
    int64_t reported, synced, arrivals;
    vs_tag_op *ops;                 /* ring: software -> NIC */
    int32_t ops_head, nops, ops_cap;
    vs_cqe_rec *cq;                 /* ring: NIC -> software */
    int32_t cq_head, ncq, cq_cap;

    vs_tag_out out;

    /* the view's arrays, refilled by vs_tag_get_view */
    int32_t *x_posted, *x_where, *x_unexpected, *x_hw, *x_status, *x_completion, *x_stage;
    int32_t x_posted_cap, x_where_cap, x_unexpected_cap, x_hw_cap, x_recv_cap;
    bool *x_released;
    vs_tag_claim *x_claims;
    int32_t x_claims_cap;
    vs_tag_op *x_ops;
    int32_t x_ops_cap;
    vs_tag_cqe *x_cq;
    int32_t x_cq_cap;

    bool refused;                   /* the last call was refused: err and err_arg hold why */
    char err[256];
    int err_arg;
};

/* ------------------------------------------------------------------ errors and output */
#if defined(__GNUC__)
COLD int refuse(vs_tag *e, int arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif

COLD int refuse(vs_tag *e, int arg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof e->err, fmt, ap);
    va_end(ap);
    e->err_arg = arg;
    e->refused = true;
    return VS_TAG_REFUSED;
}

COLD int nomem(vs_tag *e)
{
    snprintf(e->err, sizeof e->err, "out of memory");
    e->err_arg = -1;
    e->refused = true;
    return VS_TAG_NOMEM;
}

/* Every call starts with nothing emitted and no error (the error's text and argument are
 * read through e->refused, so they need not be cleared). */
HOT void begin(vs_tag *e)
{
    memset(&e->out, 0, offsetof(vs_tag_out, probe));  /* kinds and the counts */
    e->out.probe = -1;
    e->refused = false;
}

/* Python's repr of a refimpl Packet, so refusals read the same in both engines. */
static void packet_text(char *buf, size_t n, int64_t mid, int64_t comm, int64_t src,
                        int64_t tag, int64_t nbytes, int64_t kind)
{
    static const char KINDS[][8] = VS_SPEC_TAGMATCH_KIND_NAMES;
    const char *k = kind == VS_TAG_EAGER || kind == VS_TAG_RNDV ? KINDS[kind] : "?";
    snprintf(buf, n, "Packet(mid=%" PRId64 ", comm=%" PRId64 ", src=%" PRId64 ", tag=%" PRId64
             ", nbytes=%" PRId64 ", kind='%s')", mid, comm, src, tag, nbytes, k);
}

/* A delivered packet that is not the one its sender sent. */
COLD int refuse_packet(vs_tag *e, int64_t mid, int64_t comm, int64_t src, int64_t tag,
                       int64_t nbytes, int64_t kind)
{
    const vs_msg *m = &e->msg[mid];
    char got[160], sent[160];
    packet_text(got, sizeof got, mid, comm, src, tag, nbytes, kind);
    packet_text(sent, sizeof sent, mid, m->comm, m->src, m->tag, m->nbytes, m->kind);
    return refuse(e, VS_TAG_ARG_PACKET, "packet %s differs from what sender %" PRId32
                  " sent: %s", got, m->src, sent);
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

/* n >= 1 records of `size` bytes in memory aligned to a cache line, so that no record of 32
 * or 64 bytes straddles two lines (NULL: out of memory). */
static void *lines(size_t n, size_t size)
{
    return aligned_alloc(64, (n * size + 63) & ~(size_t)63);
}

/* An array of `old` records moved to lines of room for `n` (NULL: out of memory, the array
 * unchanged). */
static void *lines_grow(void *p, size_t old, size_t n, size_t size)
{
    void *q = lines(n, size);
    if (q != NULL && p != NULL) {
        memcpy(q, p, old * size);
        free(p);
    }
    return q;
}

/* The receive arrays grown to hold need > rcap records. */
static int ensure_recvs(vs_tag *e, int32_t need)
{
    int32_t c = doubled(e->rcap, need);
    if (c < 0)
        return -1;
    vs_recv *r = lines_grow(e->recv, (size_t)e->rcap, (size_t)c, sizeof *r);
    if (r == NULL)
        return -1;
    e->recv = r;
    if (e->offload) {
        vs_recv_nic *n = lines_grow(e->rnic, (size_t)e->rcap, (size_t)c, sizeof *n);
        if (n == NULL)
            return -1;
        e->rnic = n;
    }
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

/* ------------------------------------------------------------------ bucket tables */
/* The key an envelope of kind k is found by: its fields (wildcards left out) packed in as
 * many bits as the configuration's ranges need, tag lowest. */
HOT uint64_t env_key(const vs_tag *e, int k, int32_t comm, int32_t src, int32_t tag)
{
    uint64_t key = (uint32_t)comm;
    if (!(k & K_ANY_SRC))
        key = key << e->src_bits | (uint32_t)src;
    if (!(k & K_ANY_TAG))
        key = key << e->tag_bits | (uint32_t)tag;
    return key;
}

/* The bits that hold 0..n-1. */
static int bits_for(int64_t n)
{
    int b = 0;
    while (b < 62 && ((int64_t)1 << b) < n)
        b++;
    return b;
}

/* A key's bucket: its low bits, offset by its high bits (those above the table's). When the
 * high bits are fewer than the table's, the offset is the high part scaled to the table's size,
 * so keys that differ only there (one tag, several sources) are spread evenly; otherwise it is
 * a multiplicative hash of them. A table with a bucket for every key of its kind is thus a
 * direct index, and in a larger key space neighbouring envelopes (consecutive tags) still land
 * in neighbouring buckets. */
HOT uint64_t slot_of(const vs_table *t, uint64_t key)
{
    return (key + (((key >> t->bits) * t->mult) >> t->spread)) & t->mask;
}

HOT vs_list *bucket_of(const vs_tag *e, const vs_table *t, int k, int32_t comm,
                                 int32_t src, int32_t tag)
{
    return &t->b[slot_of(t, env_key(e, k, comm, src, tag))];
}

static inline int kind_of(int64_t src, int64_t tag)
{
    return (src == VS_TAG_ANY ? K_ANY_SRC : 0) | (tag == VS_TAG_ANY ? K_ANY_TAG : 0);
}

/* A table of kind k for up to `live` entries at a time: a bucket for every key of the kind
 * where there are at most that many, else as many as `live` (a power of two, 2 to
 * VS_TAG_MAX_BUCKETS). Every bucket starts empty. */
static int table_init(vs_table *t, const vs_tag *e, int k, int64_t live)
{
    int key_bits = bits_for(e->cfg.comms) + ((k & K_ANY_SRC) ? 0 : e->src_bits)
                   + ((k & K_ANY_TAG) ? 0 : e->tag_bits);
    int bits = bits_for(live);
    if (key_bits < bits)
        bits = key_bits;
    if (bits < 1)
        bits = 1;
    while (bits > 1 && ((uint64_t)1 << bits) > (uint64_t)VS_TAG_MAX_BUCKETS)
        bits--;
    uint64_t n = (uint64_t)1 << bits;
    t->mask = n - 1;
    t->bits = bits;
    if (key_bits <= 2 * bits) {
        t->mult = (uint64_t)1 << (2 * bits - key_bits);
        t->spread = 0;
    } else {
        t->mult = 0x9E3779B97F4A7C15ULL;
        t->spread = 64 - bits;
    }
    t->b = lines((size_t)n, sizeof *t->b);
    if (t->b == NULL)
        return -1;
    memset(t->b, 0xff, (size_t)n * sizeof *t->b);   /* head = tail = -1 */
    return 0;
}

static int table_copy(vs_table *dst, const vs_table *src)
{
    *dst = *src;
    if (src->b == NULL)
        return 0;
    size_t n = (size_t)(src->mask + 1);
    dst->b = lines(n, sizeof *src->b);
    if (dst->b == NULL)
        return -1;
    memcpy(dst->b, src->b, n * sizeof *src->b);
    return 0;
}

/* ------------------------------------------------------------------ intrusive lists */
/* A list is threaded through the records of an array (records of `size` bytes, the link at
 * byte `off` of each); inlined, the stride and offset are constants. */
HOT vs_link *lk(void *base, size_t size, size_t off, int32_t id)
{
    return (vs_link *)((char *)base + (size_t)id * size + off);
}

HOT void l_append(void *base, size_t size, size_t off, vs_list *l, int32_t id)
{
    vs_link *x = lk(base, size, off, id);
    x->prev = l->tail;
    x->next = -1;
    if (l->tail >= 0)
        lk(base, size, off, l->tail)->next = id;
    else
        l->head = id;
    l->tail = id;
}

HOT void l_unlink(void *base, size_t size, size_t off, vs_list *l, int32_t id)
{
    vs_link *x = lk(base, size, off, id);
    if (x->prev >= 0)
        lk(base, size, off, x->prev)->next = x->next;
    else
        l->head = x->next;
    if (x->next >= 0)
        lk(base, size, off, x->next)->prev = x->prev;
    else
        l->tail = x->prev;
}

#define RECV_Q e->recv, sizeof(vs_recv), offsetof(vs_recv, q)
#define NIC_SET(f) e->rnic, sizeof(vs_recv_nic), offsetof(vs_recv_nic, f)
#define MSG_SET(s) \
    e->mlink, sizeof(vs_mlink), offsetof(vs_mlink, link) + (size_t)(s) * sizeof(vs_link)

/* Message ``mid`` into an unexpected list kept in arrival-key order: appended, or walked back
 * from the tail when it is older (a message put back after a revoked match). `offload` is
 * e->offload, a constant where the caller knows it. */
HOT void unx_insert(vs_tag *e, bool offload, int set, vs_list *l, int32_t mid)
{
    /* without offload every message is newer than those before it */
    vs_mlink *ml = e->mlink;
    int64_t key = ml[mid].useq;
    if (!offload || l->tail < 0 || ml[l->tail].useq < key) {
        l_append(MSG_SET(set), l, mid);
        return;
    }
    int32_t before = l->tail;
    while (ml[before].link[set].prev >= 0 && ml[ml[before].link[set].prev].useq > key)
        before = ml[before].link[set].prev;
    vs_link *b = &ml[before].link[set];
    vs_link *x = &ml[mid].link[set];
    x->next = before;
    x->prev = b->prev;
    if (b->prev >= 0)
        ml[b->prev].link[set].next = mid;
    else
        l->head = mid;
    b->prev = mid;
}

/* ------------------------------------------------------------------ posted receives */
HOT vs_list *posted_bucket(const vs_tag *e, const vs_recv *r)
{
    return bucket_of(e, &e->posted[r->kind], r->kind, r->comm, r->src, r->tag);
}

/* Receive rid, of kind k and envelope (comm, src, tag), joins its posted bucket. */
HOT void posted_add(vs_tag *e, int32_t rid, int k, int32_t comm, int32_t src, int32_t tag)
{
    e->recv[rid].pending = 1;
    l_append(RECV_Q, bucket_of(e, &e->posted[k], k, comm, src, tag), rid);
    if (e->npost[k]++ == 0)
        e->post_on |= 1u << k;
    e->npending++;
}

/* Receive rid leaves bucket b, its posted bucket. */
HOT void posted_unlink(vs_tag *e, int32_t rid, vs_list *b)
{
    vs_recv *r = &e->recv[rid];
    r->pending = 0;
    l_unlink(RECV_Q, b, rid);
    if (--e->npost[r->kind] == 0)
        e->post_on &= ~(1u << r->kind);
    e->npending--;
}

static void posted_remove(vs_tag *e, int32_t rid)
{
    posted_unlink(e, rid, posted_bucket(e, &e->recv[rid]));
}

/* The first receive of kind k's bucket for a message (comm, src, tag) that it matches; *b,
 * that bucket. */
HOT int32_t posted_first(const vs_tag *e, int k, int32_t comm, int32_t src, int32_t tag,
                         vs_list **b)
{
    *b = bucket_of(e, &e->posted[k], k, comm, src, tag);
    int32_t h = (*b)->head;
    while (h >= 0) {
        const vs_recv *r = &e->recv[h];
        if (r->comm == comm && ((k & K_ANY_SRC) || r->src == src)
            && ((k & K_ANY_TAG) || r->tag == tag))
            return h;
        h = r->q.next;
    }
    return -1;
}

/* Whether candidate h (>= 0) of a later kind is taken over best. */
HOT bool earlier(int32_t h, int32_t best)
{
    return best < 0 || h < best;
}

/* The earliest pending receive a message (comm, src, tag) matches, or -1, and its bucket in
 * *bucket: in each kind with a pending receive, the first of its bucket that matches; of
 * those, the lowest rid (the kinds are written out so that each lookup is compiled for its
 * kind). */
HOT int32_t posted_earliest(const vs_tag *e, int32_t comm, int32_t src, int32_t tag,
                            vs_list **bucket)
{
    int32_t best = -1, h;
    vs_list *b;
    *bucket = NULL;
    unsigned on = e->post_on;
    if (on == 0)
        return -1;
    if (on == 1u << K_EXACT)        /* receives without wildcards only */
        return posted_first(e, K_EXACT, comm, src, tag, bucket);
    if (on & (1u << K_EXACT))
        best = posted_first(e, K_EXACT, comm, src, tag, bucket);
    if ((on & (1u << K_ANY_SRC)) && (h = posted_first(e, K_ANY_SRC, comm, src, tag, &b)) >= 0
        && earlier(h, best)) {
        best = h;
        *bucket = b;
    }
    if ((on & (1u << K_ANY_TAG)) && (h = posted_first(e, K_ANY_TAG, comm, src, tag, &b)) >= 0
        && earlier(h, best)) {
        best = h;
        *bucket = b;
    }
    if ((on & (1u << K_ANY_BOTH)) && (h = posted_first(e, K_ANY_BOTH, comm, src, tag, &b)) >= 0
        && earlier(h, best)) {
        best = h;
        *bucket = b;
    }
    return best;
}

/* ------------------------------------------------------------------ unexpected messages */
/* A kind's table indexes the unexpected messages (its bit in e->unx_on) once a receive or
 * probe looks in it, by a walk of the arrival list, and from then on as messages come; it stops
 * when the list is next empty unless it was looked in again meanwhile (e->unx_used). Traffic
 * that uses one kind thus pays for one table. vs_tag_reset keeps these bits as it keeps the
 * memory. With one communicator the arrival list is the (comm, ANY, ANY) bucket itself. */
HOT void unx_index(vs_tag *e, bool offload, int k, int32_t mid)
{
    const vs_msg *m = &e->msg[mid];
    vs_mlink *ml = &e->mlink[mid];
    ml->bucket[k] = (uint32_t)slot_of(&e->unx[k], env_key(e, k, m->comm, m->src, m->tag));
    unx_insert(e, offload, k, &e->unx[k].b[ml->bucket[k]], mid);
}

HOT void unexpected_add(vs_tag *e, bool offload, int32_t mid, int64_t key)
{
    e->mlink[mid].useq = key;
    unsigned on = e->unx_on;        /* each kind written out, to be compiled for it */
    if (on & (1u << K_EXACT))
        unx_index(e, offload, K_EXACT, mid);
    if (on & (1u << K_ANY_SRC))
        unx_index(e, offload, K_ANY_SRC, mid);
    if (on & (1u << K_ANY_TAG))
        unx_index(e, offload, K_ANY_TAG, mid);
    if (on & (1u << K_ANY_BOTH))
        unx_index(e, offload, K_ANY_BOTH, mid);
    unx_insert(e, offload, ML_ARRIVAL, &e->arrival, mid);
    e->nunexpected++;
}

HOT void unexpected_take(vs_tag *e, int32_t mid)
{
    const vs_mlink *ml = &e->mlink[mid];
    unsigned on = e->unx_on;
    if (on & (1u << K_EXACT))
        l_unlink(MSG_SET(K_EXACT), &e->unx[K_EXACT].b[ml->bucket[K_EXACT]], mid);
    if (on & (1u << K_ANY_SRC))
        l_unlink(MSG_SET(K_ANY_SRC), &e->unx[K_ANY_SRC].b[ml->bucket[K_ANY_SRC]], mid);
    if (on & (1u << K_ANY_TAG))
        l_unlink(MSG_SET(K_ANY_TAG), &e->unx[K_ANY_TAG].b[ml->bucket[K_ANY_TAG]], mid);
    if (on & (1u << K_ANY_BOTH))
        l_unlink(MSG_SET(K_ANY_BOTH), &e->unx[K_ANY_BOTH].b[ml->bucket[K_ANY_BOTH]], mid);
    l_unlink(MSG_SET(ML_ARRIVAL), &e->arrival, mid);
    if (--e->nunexpected == 0) {
        /* every table is empty: from now on index the kinds looked in since the last time */
        e->unx_on = e->unx_used;
        e->unx_used = 0;
    }
}

/* The arrival list walked to index kind k's table (the kind's first use). */
static void unx_index_all(vs_tag *e, int k)
{
    for (int32_t m = e->arrival.head; m >= 0; m = e->mlink[m].link[ML_ARRIVAL].next)
        unx_index(e, e->offload, k, m);
    e->unx_on |= 1u << k;
}

/* The unexpected messages a receive (comm, src, tag) of kind k looks in, in arrival-key
 * order, and in *set the links they are threaded by: the bucket its envelope names in kind
 * k's table (indexed at the kind's first use), or with one communicator and both wildcards
 * the arrival list itself. */
HOT const vs_list *unexpected_bucket(vs_tag *e, int k, int32_t comm, int32_t src, int32_t tag,
                                     int *set)
{
    if (k == K_ANY_BOTH && e->one_comm) {
        *set = ML_ARRIVAL;
        return &e->arrival;
    }
    if (!(e->unx_on & (1u << k)))
        unx_index_all(e, k);
    e->unx_used |= 1u << k;
    *set = k;
    return bucket_of(e, &e->unx[k], k, comm, src, tag);
}

/* The earliest arrived message a receive (comm, src, tag) selects, or -1: the first that it
 * selects in the bucket its envelope names. */
HOT int32_t unexpected_find(vs_tag *e, int k, int32_t comm, int32_t src, int32_t tag)
{
    if (e->nunexpected == 0)
        return -1;
    int set;
    const vs_list *b = unexpected_bucket(e, k, comm, src, tag, &set);
    for (int32_t at = b->head; at >= 0; at = e->mlink[at].link[set].next) {
        const vs_msg *m = &e->msg[at];
        if (m->comm == comm && ((k & K_ANY_SRC) || m->src == src)
            && ((k & K_ANY_TAG) || m->tag == tag))
            return at;
    }
    return -1;
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
    e->one_comm = cfg->comms <= 1;
    e->src_bits = bits_for(cfg->senders);
    e->tag_bits = bits_for(cfg->tags);
    size_t nm = n > 0 ? (size_t)n : 1;
    size_t ns = cfg->senders > 0 ? (size_t)cfg->senders : 1;
    e->sent = calloc(ns, sizeof *e->sent);
    e->msg = lines(nm, sizeof *e->msg);
    e->mlink = lines(nm, sizeof *e->mlink);
    if (!e->sent || !e->msg || !e->mlink) {
        vs_tag_destroy(e);
        return VS_TAG_NOMEM;
    }
    memset(e->msg, 0, nm * sizeof *e->msg);
    memset(e->mlink, 0, nm * sizeof *e->mlink);
    /* the tables are sized for as many live entries as the job has messages (the NIC's for
     * its capacity) */
    int64_t live = n > 16 ? n : 16;
    for (int k = 0; k < NKINDS; k++) {
        if (table_init(&e->posted[k], e, k, live) || table_init(&e->unx[k], e, k, live)) {
            vs_tag_destroy(e);
            return VS_TAG_NOMEM;
        }
    }
    if (e->offload && table_init(&e->nic, e, K_EXACT, cfg->capacity < live ? cfg->capacity
                                                                              : live)) {
        vs_tag_destroy(e);
        return VS_TAG_NOMEM;
    }
    for (int32_t i = 0; i < e->nmsgs; i++)
        e->msg[i].matched_to = -1;
    e->arrival = e->claims = e->hw = (vs_list){-1, -1};
    begin(e);
    *out = e;
    return VS_TAG_OK;
}

static void *dup_array(const void *p, size_t n, size_t size, bool *ok)
{
    if (p == NULL || n == 0)
        return NULL;
    void *q = lines(n, size);
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
    c->mlink = dup_array(e->mlink, nm, sizeof *e->mlink, &ok);
    c->recv = dup_array(e->recv, rc, sizeof *e->recv, &ok);
    c->rnic = dup_array(e->rnic, rc, sizeof *e->rnic, &ok);
    c->ops = dup_array(e->ops, (size_t)e->ops_cap, sizeof *e->ops, &ok);
    c->cq = dup_array(e->cq, (size_t)e->cq_cap, sizeof *e->cq, &ok);
    for (int k = 0; k < NKINDS; k++) {
        c->posted[k].b = c->unx[k].b = NULL;
        if (table_copy(&c->posted[k], &e->posted[k]) || table_copy(&c->unx[k], &e->unx[k]))
            ok = false;
    }
    c->nic.b = NULL;
    if (table_copy(&c->nic, &e->nic))
        ok = false;
    /* the copy refills its own view arrays */
    c->x_posted = c->x_where = c->x_unexpected = c->x_hw = NULL;
    c->x_status = c->x_completion = c->x_stage = NULL;
    c->x_released = NULL;
    c->x_posted_cap = c->x_where_cap = c->x_unexpected_cap = c->x_hw_cap = c->x_recv_cap = 0;
    c->x_claims = NULL;
    c->x_ops = NULL;
    c->x_cq = NULL;
    c->x_claims_cap = c->x_ops_cap = c->x_cq_cap = 0;
    if (c->recv == NULL || (c->offload && c->rnic == NULL))
        c->rcap = 0;
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
    size_t ns = e->cfg.senders > 0 ? (size_t)e->cfg.senders : 1;

    /* empty the buckets that hold something: those of the live entries */
    for (int32_t r = 0; r < e->nrecvs; r++) {
        const vs_recv *x = &e->recv[r];
        if (x->pending)
            *posted_bucket(e, x) = (vs_list){-1, -1};
    }
    for (int32_t r = e->hw.head; r >= 0; r = e->rnic[r].listed.next)
        e->nic.b[e->rnic[r].nic_bucket] = (vs_list){-1, -1};
    for (int32_t m = e->arrival.head; m >= 0; m = e->mlink[m].link[ML_ARRIVAL].next)
        for (int k = 0; k < NKINDS; k++)
            if (e->unx_on & (1u << k))
                e->unx[k].b[e->mlink[m].bucket[k]] = (vs_list){-1, -1};
    e->unx_used = 0;
    /* only the messages sent are cleared: a short job's reset touches little memory */
    for (int32_t s = 0; s < e->cfg.senders; s++) {
        size_t first = (size_t)s * (size_t)e->cfg.messages, k = (size_t)e->sent[s];
        memset(e->msg + first, 0, k * sizeof *e->msg);
        for (size_t i = first; i < first + k; i++)
            e->msg[i].matched_to = -1;
    }
    memset(e->sent, 0, ns * sizeof *e->sent);
    /* receives are set whole when posted: forgetting how many there were is enough */
    e->nrecvs = 0;
    memset(e->npost, 0, sizeof e->npost);
    e->post_on = 0;
    e->npending = e->nunexpected = 0;
    e->arrival = e->claims = e->hw = (vs_list){-1, -1};
    e->order = 0;
    e->in_sw = e->nclaims = 0;
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
    free(e->mlink);
    free(e->recv);
    free(e->rnic);
    for (int k = 0; k < NKINDS; k++) {
        free(e->posted[k].b);
        free(e->unx[k].b);
    }
    free(e->nic.b);
    free(e->ops);
    free(e->cq);
    free(e->x_posted);
    free(e->x_where);
    free(e->x_unexpected);
    free(e->x_hw);
    free(e->x_status);
    free(e->x_completion);
    free(e->x_stage);
    free(e->x_released);
    free(e->x_claims);
    free(e->x_ops);
    free(e->x_cq);
    free(e);
}

const char *vs_tag_error(const vs_tag *e) { return e->refused ? e->err : ""; }
int vs_tag_error_arg(const vs_tag *e) { return e->refused ? e->err_arg : -1; }
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

/* The per-message arrays of the view: made once, at the first view. */
static int x_messages(vs_tag *e)
{
    if (e->x_stage != NULL)
        return 0;
    size_t nm = e->nmsgs > 0 ? (size_t)e->nmsgs : 1;
    int32_t *st = malloc(nm * sizeof *st);
    bool *rel = malloc(nm * sizeof *rel);
    if (st == NULL || rel == NULL) {
        free(st);
        free(rel);
        return -1;
    }
    e->x_stage = st;
    e->x_released = rel;
    return 0;
}

int vs_tag_get_view(vs_tag *e, vs_tag_view *v)
{
    void *p;
    int32_t cap;
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
    cap = e->x_recv_cap;
    if ((p = x_room(e->x_status, &cap, e->nrecvs, sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_status = p;
    cap = e->x_recv_cap;
    if ((p = x_room(e->x_completion, &cap, e->nrecvs, sizeof(int32_t))) == NULL)
        return nomem(e);
    e->x_completion = p;
    e->x_recv_cap = cap;
    if (x_messages(e))
        return nomem(e);
    if ((p = x_room(e->x_claims, &e->x_claims_cap, e->nclaims, sizeof(vs_tag_claim))) == NULL)
        return nomem(e);
    e->x_claims = p;
    if ((p = x_room(e->x_ops, &e->x_ops_cap, e->nops, sizeof(vs_tag_op))) == NULL)
        return nomem(e);
    e->x_ops = p;
    if ((p = x_room(e->x_cq, &e->x_cq_cap, e->ncq, sizeof(vs_tag_cqe))) == NULL)
        return nomem(e);
    e->x_cq = p;

    /* every receive's status; the pending ones in posted order, which is rid order */
    int32_t i = 0;
    for (int32_t r = 0; r < e->nrecvs; r++) {
        const vs_recv *x = &e->recv[r];
        e->x_status[r] = x->status;
        e->x_completion[r] = x->completion;
        if (x->pending) {
            e->x_posted[i] = r;
            e->x_where[i++] = x->where;
        }
    }
    for (int32_t m = 0; m < e->nmsgs; m++) {
        e->x_stage[m] = e->msg[m].stage;
        e->x_released[m] = e->msg[m].released;
    }
    i = 0;
    for (int32_t m = e->arrival.head; m >= 0; m = e->mlink[m].link[ML_ARRIVAL].next)
        e->x_unexpected[i++] = m;
    i = 0;
    for (int32_t r = e->hw.head; r >= 0; r = e->rnic[r].listed.next)
        e->x_hw[i++] = r;
    i = 0;
    for (int32_t r = e->claims.head; r >= 0; r = e->rnic[r].claim.next, i++) {
        e->x_claims[i].rid = r;
        e->x_claims[i].mid = e->rnic[r].claim_mid;
        e->x_claims[i].cancelling = e->rnic[r].claim_cancelling;
    }
    for (i = 0; i < e->nops; i++)
        e->x_ops[i] = e->ops[(e->ops_head + i) % e->ops_cap];
    for (i = 0; i < e->ncq; i++) {
        const vs_cqe_rec *c = &e->cq[(e->cq_head + i) % e->cq_cap];
        e->x_cq[i] = (vs_tag_cqe){c->kind, c->rid, c->mid, c->ok};
    }
    v->nrecvs = e->nrecvs;
    v->status = e->x_status;
    v->completion = e->x_completion;
    v->nmsgs = e->nmsgs;
    v->stage = e->x_stage;
    v->released = e->x_released;
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
HOT bool in_range(int64_t v, int64_t lo, int64_t hi) { return lo <= v && v <= hi; }

/* v in 0..n-1. */
HOT bool in_id_range(int64_t v, int32_t n) { return (uint64_t)v < (uint64_t)(uint32_t)n; }

/* value in 0..hi-1 (or ANY where a wildcard is allowed), else a refusal naming it. */
COLD int refuse_range(vs_tag *e, int arg, const char *what, int64_t value, int32_t hi,
                      bool wildcard)
{
    return refuse(e, arg, "%s %" PRId64 " is outside 0..%" PRId32 "%s", what, value, hi - 1,
                  wildcard ? " or ANY (-1)" : "");
}

HOT int check(vs_tag *e, int arg, const char *what, int64_t value, int32_t hi, bool wildcard)
{
    if (in_id_range(value, hi) || (wildcard && value == VS_TAG_ANY))
        return VS_TAG_OK;
    return refuse_range(e, arg, what, value, hi, wildcard);
}

HOT int check_sent(vs_tag *e, int64_t mid)
{
    if (!in_range(mid, 0, (int64_t)e->nmsgs - 1) || !e->msg[mid].sent)
        return refuse(e, 0, "message %" PRId64 " was never sent", mid);
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ emitting */
HOT void emit_released(vs_tag *e, int32_t mid)
{
    e->out.kinds |= VS_TAG_OUT_RELEASED;
    e->out.nreleased = 1;
    e->out.released[0] = mid;
}

HOT int32_t code_of(const vs_tag *e, int32_t rid, int32_t mid)
{
    return e->msg[mid].nbytes > e->recv[rid].nbytes ? VS_TAG_TRUNCATED : VS_TAG_DONE_OK;
}

/* A match (rid, mid), after undoing a revoked one (revoked_rid >= 0): an eager message
 * completes its receive, a rendezvous one needs a READ. */
HOT void matched(vs_tag *e, int32_t rid, int32_t mid, int32_t revoked_rid,
                    int32_t revoked_mid)
{
    if (revoked_rid >= 0) {
        e->recv[revoked_rid].status = VS_TAG_PENDING;
        e->recv[revoked_rid].completion = 0;
        e->msg[revoked_mid].stage = VS_TAG_IDLE;
        e->msg[revoked_mid].matched_to = -1;
        e->out.kinds |= VS_TAG_OUT_REVOKED;
        e->out.nrevoked = 1;
        e->out.revoked[0] = (vs_tag_pair){revoked_rid, revoked_mid};
    }
    e->recv[rid].status = mid;
    e->msg[mid].matched_to = rid;
    e->out.nmatches = 1;
    e->out.matches[0] = (vs_tag_pair){rid, mid};
    if (e->msg[mid].kind == VS_TAG_EAGER) {
        int32_t code = code_of(e, rid, mid);
        e->recv[rid].completion = (uint8_t)code;
        e->out.kinds |= VS_TAG_OUT_MATCHES | VS_TAG_OUT_COMPLETIONS;
        e->out.ncompletions = 1;
        e->out.completions[0] = (vs_tag_completion){rid, code};
    } else {
        e->out.kinds |= VS_TAG_OUT_MATCHES;
        e->msg[mid].stage = VS_TAG_NEED_READ;
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
    vs_recv_nic *r = &e->rnic[rid];
    if (!r->claimed) {
        r->claimed = true;
        l_append(NIC_SET(claim), &e->claims, rid);
        e->nclaims++;
    }
    r->claim_mid = mid;
    r->claim_seq = seq;
    r->claim_cancelling = cancelling;
}

static void claim_drop(vs_tag *e, int32_t rid)
{
    e->rnic[rid].claimed = false;
    l_unlink(NIC_SET(claim), &e->claims, rid);
    e->nclaims--;
}

/* The NIC drops receive rid from its list. */
static void nic_unlist(vs_tag *e, int32_t rid)
{
    vs_recv_nic *r = &e->rnic[rid];
    r->listed_now = false;
    l_unlink(NIC_SET(bucket), &e->nic.b[r->nic_bucket], rid);
    l_unlink(NIC_SET(listed), &e->hw, rid);
    e->nhw--;
}

/* ------------------------------------------------------------------ senders */
/* A send refused: the first of vs_tag_send's checks that fails. */
COLD int send_refused(vs_tag *e, int64_t sender, int64_t comm, int64_t tag, int64_t nbytes)
{
    int rc;
    if ((rc = check(e, 0, "sender", sender, e->cfg.senders, false))
        || (rc = check(e, 1, "communicator", comm, e->cfg.comms, false))
        || (rc = check(e, 2, "tag", tag, e->cfg.tags, false)))
        return rc;
    if (!in_range(nbytes, 1, e->cfg.max_bytes))
        return refuse(e, 3, "length %" PRId64 " is outside 1..%" PRId32, nbytes,
                      e->cfg.max_bytes);
    return refuse(e, 0, "sender %" PRId64 " has sent all its %" PRId32 " messages", sender,
                  e->cfg.messages);
}

int vs_tag_send(vs_tag *e, int64_t sender, int64_t comm, int64_t tag, int64_t nbytes)
{
    begin(e);
    /* every check at once; which one failed is worked out only for a refusal */
    if (!(in_id_range(sender, e->cfg.senders) && in_id_range(comm, e->cfg.comms)
          && in_id_range(tag, e->cfg.tags) && in_range(nbytes, 1, e->cfg.max_bytes)
          && e->sent[sender] < e->cfg.messages))
        return send_refused(e, sender, comm, tag, nbytes);
    int32_t k = e->sent[sender];
    int32_t mid = (int32_t)sender * e->cfg.messages + k;
    vs_msg *m = &e->msg[mid];
    e->sent[sender] = k + 1;
    m->sent = true;
    m->comm = (int32_t)comm;
    m->src = (int32_t)sender;
    m->tag = (int32_t)tag;
    m->nbytes = (int32_t)nbytes;
    m->kind = nbytes <= e->cfg.eager_limit ? VS_TAG_EAGER : VS_TAG_RNDV;
    e->out.kinds |= VS_TAG_OUT_SENDS;
    e->out.nsends = 1;
    e->out.sends[0] = (vs_tag_packet){mid, (int32_t)comm, (int32_t)sender, (int32_t)tag,
                                      (int32_t)nbytes, m->kind};
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
    e->msg[mid].released = true;
    emit_released(e, (int32_t)mid);
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ the receiver */
/* A delivery refused: the first of vs_tag_delivered's checks that fails. */
COLD int delivered_refused(vs_tag *e, int64_t mid, int64_t comm, int64_t src, int64_t tag,
                           int64_t nbytes, int64_t kind)
{
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    const vs_msg *m = &e->msg[mid];
    if (comm != m->comm || src != m->src || tag != m->tag || nbytes != m->nbytes
        || kind != m->kind)
        return refuse_packet(e, mid, comm, src, tag, nbytes, kind);
    return refuse(e, 0, VS_SPEC_TAGMATCH_ALREADY_ARRIVED, (int)mid);   /* mid < messages */
}

/* A message arrives: its eager payload's ACK completes the send. */
HOT void arrive(vs_tag *e, int32_t mid)
{
    vs_msg *m = &e->msg[mid];
    m->arrived = true;
    if (m->kind == VS_TAG_EAGER && !m->released) {
        m->released = true;
        emit_released(e, mid);
    }
}

/* A message reaches the NIC: matching is held until software's count covers every reported
 * message. */
APART int delivered_offload(vs_tag *e, int32_t mid)
{
    if (reserve_cqe(e))
        return nomem(e);
    arrive(e, mid);
    const vs_msg *m = &e->msg[mid];
    int64_t seq = e->arrivals++;
    bool held = e->synced != e->reported;
    if (!held) {
        int32_t h = bucket_of(e, &e->nic, K_EXACT, m->comm, m->src, m->tag)->head;
        while (h >= 0) {
            const vs_recv *r = &e->recv[h];
            if (r->comm == m->comm && r->src == m->src && r->tag == m->tag)
                break;
            h = e->rnic[h].bucket.next;
        }
        if (h >= 0) {
            nic_unlist(e, h);
            push_cqe(e, VS_TAG_CQE_MATCH, h, mid, seq, false);
            return VS_TAG_OK;
        }
    }
    e->reported++;
    push_cqe(e, VS_TAG_CQE_UNEXPECTED, -1, mid, seq, false);
    return VS_TAG_OK;
}

/* A message that arrived (without offload) takes the earliest pending receive it matches
 * (delivered_any: any kind may match, none yet found), or joins the unexpected messages
 * (delivered_unexpected). */
APART int delivered_unexpected(vs_tag *e, int32_t mid)
{
    unexpected_add(e, false, mid, ++e->order);
    return VS_TAG_OK;
}

APART int delivered_any(vs_tag *e, int32_t mid)
{
    const vs_msg *m = &e->msg[mid];
    vs_list *bucket;
    int32_t rid = posted_earliest(e, m->comm, m->src, m->tag, &bucket);
    if (rid < 0)
        return delivered_unexpected(e, mid);
    posted_unlink(e, rid, bucket);
    matched(e, rid, mid, -1, -1);
    return VS_TAG_OK;
}

/* A message arrives (without offload). The usual case, receives without wildcards pending and
 * one of them matching, is written out here; any other goes on to delivered_any. Kept apart
 * from vs_tag_delivered's checks, so that each keeps few values live. */
APART int delivered_sw(vs_tag *e, int32_t mid)
{
    arrive(e, mid);
    if (e->post_on == 0)
        return delivered_unexpected(e, mid);
    if (e->post_on != 1u << K_EXACT)
        return delivered_any(e, mid);
    const vs_msg *m = &e->msg[mid];
    vs_list *bucket;
    int32_t rid = posted_first(e, K_EXACT, m->comm, m->src, m->tag, &bucket);
    if (rid < 0)
        return delivered_any(e, mid);
    posted_unlink(e, rid, bucket);
    matched(e, rid, mid, -1, -1);
    return VS_TAG_OK;
}

int vs_tag_delivered(vs_tag *e, int64_t mid, int64_t comm, int64_t src, int64_t tag,
                     int64_t nbytes, int64_t kind)
{
    begin(e);
    /* every check at once; which one failed is worked out only for a refusal */
    if (!in_id_range(mid, e->nmsgs))
        return delivered_refused(e, mid, comm, src, tag, nbytes, kind);
    const vs_msg *m = &e->msg[mid];
    if (!(m->sent && comm == m->comm && src == m->src && tag == m->tag
          && nbytes == m->nbytes && kind == m->kind && !m->arrived))
        return delivered_refused(e, mid, comm, src, tag, nbytes, kind);
    if (e->offload)
        return delivered_offload(e, (int32_t)mid);
    return delivered_sw(e, (int32_t)mid);
}

/* A receive of kind k is posted, everything it may need at hand. */
HOT int post_recv_as(vs_tag *e, int k, bool offload, int32_t comm, int32_t src, int32_t tag, int32_t nbytes)
{
    int32_t rid = e->nrecvs++;
    vs_recv *r = &e->recv[rid];
    *r = (vs_recv){comm, src, tag, nbytes, {-1, -1}, VS_TAG_PENDING, (uint8_t)k, 0, VS_TAG_SW, 0};
    if (offload)
        e->rnic[rid] = (vs_recv_nic){{-1, -1}, {-1, -1}, {-1, -1}, 0, false, false, false, -1, 0};
    int32_t mid = e->nunexpected > 0 ? unexpected_find(e, k, comm, src, tag) : -1;
    if (mid >= 0) {
        unexpected_take(e, mid);
        matched(e, rid, mid, -1, -1);
        return VS_TAG_OK;
    }
    if (!offload) {
        posted_add(e, rid, k, comm, src, tag);
        return VS_TAG_OK;
    }
    bool to_nic = offloadable(e, src, tag);     /* judged before it is counted */
    posted_add(e, rid, k, comm, src, tag);
    if (to_nic) {
        r->where = VS_TAG_HW;
        push_op(e, VS_TAG_OP_ADD, e->sw_count, rid);
    } else {
        r->where = VS_TAG_SW;
        e->in_sw++;
    }
    return VS_TAG_OK;
}

/* The body of post_recv_as compiled for each kind: its key and its comparisons hold only the
 * fields the kind names. */
HOT int post_recv_body(vs_tag *e, bool offload, int32_t comm, int32_t src, int32_t tag,
                       int32_t nbytes)
{
    switch (kind_of(src, tag)) {
    case K_EXACT:
        return post_recv_as(e, K_EXACT, offload, comm, src, tag, nbytes);
    case K_ANY_SRC:
        return post_recv_as(e, K_ANY_SRC, offload, comm, src, tag, nbytes);
    case K_ANY_TAG:
        return post_recv_as(e, K_ANY_TAG, offload, comm, src, tag, nbytes);
    default:
        return post_recv_as(e, K_ANY_BOTH, offload, comm, src, tag, nbytes);
    }
}

/* vs_tag_post_recv's checks one by one, then what the call may need made ready before
 * anything changes (room for one more receive; with offload, for an op). */
APART int post_recv_slow(vs_tag *e, int64_t comm, int64_t src, int64_t tag, int64_t nbytes)
{
    int rc;
    if ((rc = check(e, 0, "communicator", comm, e->cfg.comms, false))
        || (rc = check(e, 1, "source", src, e->cfg.senders, true))
        || (rc = check(e, 2, "tag", tag, e->cfg.tags, true)))
        return rc;
    if (!in_range(nbytes, 1, e->cfg.max_bytes))
        return refuse(e, 3, "buffer length %" PRId64 " is outside 1..%" PRId32, nbytes,
                      e->cfg.max_bytes);
    int32_t rid = e->nrecvs;
    if (rid >= e->rcap && (rid == INT32_MAX || ensure_recvs(e, rid + 1)))
        return nomem(e);
    if (e->offload && reserve_op(e))
        return nomem(e);
    return post_recv_body(e, e->offload, (int32_t)comm, (int32_t)src, (int32_t)tag,
                          (int32_t)nbytes);
}

/* A receive posted (without offload) while messages are unexpected: it may take one. */
APART int post_recv_sw(vs_tag *e, int32_t comm, int32_t src, int32_t tag, int32_t nbytes)
{
    return post_recv_body(e, false, comm, src, tag, nbytes);
}

/* A receive of kind k posted (without offload) while no message is unexpected: it joins its
 * posted bucket. */
HOT int post_recv_pending_as(vs_tag *e, int k, int32_t comm, int32_t src, int32_t tag,
                             int32_t nbytes)
{
    int32_t rid = e->nrecvs++;
    e->recv[rid] = (vs_recv){comm, src, tag, nbytes, {-1, -1}, VS_TAG_PENDING, (uint8_t)k, 0,
                             VS_TAG_SW, 0};
    posted_add(e, rid, k, comm, src, tag);
    return VS_TAG_OK;
}

int vs_tag_post_recv(vs_tag *e, int64_t comm, int64_t src, int64_t tag, int64_t nbytes)
{
    begin(e);
    if (!(in_id_range(comm, e->cfg.comms)
          && (in_id_range(src, e->cfg.senders) || src == VS_TAG_ANY)
          && (in_id_range(tag, e->cfg.tags) || tag == VS_TAG_ANY)
          && in_range(nbytes, 1, e->cfg.max_bytes) && e->nrecvs < e->rcap && !e->offload))
        return post_recv_slow(e, comm, src, tag, nbytes);
    /* the usual paths, each compiled on its own: nothing unexpected to search, or a search */
    if (e->nunexpected > 0)
        return post_recv_sw(e, (int32_t)comm, (int32_t)src, (int32_t)tag, (int32_t)nbytes);
    switch (kind_of(src, tag)) {
    case K_EXACT:
        return post_recv_pending_as(e, K_EXACT, (int32_t)comm, (int32_t)src, (int32_t)tag,
                                    (int32_t)nbytes);
    case K_ANY_SRC:
        return post_recv_pending_as(e, K_ANY_SRC, (int32_t)comm, (int32_t)src, (int32_t)tag,
                                    (int32_t)nbytes);
    case K_ANY_TAG:
        return post_recv_pending_as(e, K_ANY_TAG, (int32_t)comm, (int32_t)src, (int32_t)tag,
                                    (int32_t)nbytes);
    default:
        return post_recv_pending_as(e, K_ANY_BOTH, (int32_t)comm, (int32_t)src, (int32_t)tag,
                                    (int32_t)nbytes);
    }
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
        return refuse(e, 0, VS_SPEC_TAGMATCH_ALREADY_CANCELLING, (int)rid);   /* a posted rid */
    if (loc == VS_TAG_HW) {
        /* the NIC holds it: ask for it back; the answer comes as a completion */
        if (reserve_op(e))
            return nomem(e);
        r->where = VS_TAG_HW_CANCEL;
        push_op(e, VS_TAG_OP_REMOVE, e->sw_count, (int32_t)rid);
        return VS_TAG_OK;
    }
    unpost(e, (int32_t)rid);
    e->recv[rid].status = VS_TAG_CANCELLED;
    e->out.kinds |= VS_TAG_OUT_CANCELLED;
    e->out.ncancelled = 1;
    e->out.cancelled[0] = (int32_t)rid;
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
    e->out.probe = unexpected_find(e, kind_of(src, tag), (int32_t)comm, (int32_t)src,
                                   (int32_t)tag);
    return VS_TAG_OK;
}

/* ------------------------------------------------------------------ rendezvous */
int vs_tag_start_read(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->msg[mid].stage != VS_TAG_NEED_READ)
        return refuse(e, 0, "message %" PRId64 " has no READ to start (stage %" PRId32 ")",
                      mid, (int32_t)e->msg[mid].stage);
    int32_t rid = e->msg[mid].matched_to;
    e->msg[mid].stage = VS_TAG_READING;
    int32_t len = e->msg[mid].nbytes < e->recv[rid].nbytes ? e->msg[mid].nbytes
                                                           : e->recv[rid].nbytes;
    e->out.kinds |= VS_TAG_OUT_READS;
    e->out.nreads = 1;
    e->out.reads[0] = (vs_tag_read){(int32_t)mid, rid, len};
    return VS_TAG_OK;
}

int vs_tag_read_done(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->msg[mid].stage != VS_TAG_READING)
        return refuse(e, 0, "message %" PRId64 " has no READ in flight", mid);
    int32_t rid = e->msg[mid].matched_to;
    e->msg[mid].stage = VS_TAG_READ_DONE;
    e->recv[rid].completion = code_of(e, rid, (int32_t)mid);
    e->out.kinds |= VS_TAG_OUT_COMPLETIONS;
    e->out.ncompletions = 1;
    e->out.completions[0] =
        (vs_tag_completion){rid, e->recv[rid].completion};
    return VS_TAG_OK;
}

int vs_tag_send_fin(vs_tag *e, int64_t mid)
{
    begin(e);
    int rc = check_sent(e, mid);
    if (rc)
        return rc;
    if (e->msg[mid].stage != VS_TAG_READ_DONE)
        return refuse(e, 0, "message %" PRId64 "'s READ has not completed: no FIN yet", mid);
    e->msg[mid].stage = VS_TAG_FIN_SENT;
    e->msg[mid].fin_out = true;
    e->out.kinds |= VS_TAG_OUT_FINS;
    e->out.nfins = 1;
    e->out.fins[0] = (int32_t)mid;
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
    e->synced = o.count;
    if (o.kind == VS_TAG_OP_ADD) {
        const vs_recv *r = &e->recv[o.rid];
        vs_recv_nic *x = &e->rnic[o.rid];
        x->listed_now = true;
        x->nic_bucket = slot_of(&e->nic, env_key(e, K_EXACT, r->comm, r->src, r->tag));
        l_append(NIC_SET(bucket), &e->nic.b[x->nic_bucket], o.rid);
        l_append(NIC_SET(listed), &e->hw, o.rid);
        e->nhw++;
    } else if (o.kind == VS_TAG_OP_REMOVE) {
        /* a failed remove: the tag was consumed by a match whose completion is queued */
        bool found = e->rnic[o.rid].listed_now;
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
    if (c.kind == VS_TAG_CQE_MATCH && !e->recv[c.rid].pending && !e->rnic[c.rid].claimed)
        return refuse(e, -1, "the NIC matched receive %" PRId32 ", which software does not "
                      "shadow", c.rid);
    if (c.kind == VS_TAG_CQE_UNEXPECTED && reserve_op(e))
        return nomem(e);
    e->cq_head = (e->cq_head + 1) % e->cq_cap;
    e->ncq--;
    if (c.kind == VS_TAG_CQE_MATCH) {
        vs_recv *r = &e->recv[c.rid];
        if (r->pending) {
            unpost(e, c.rid);
            matched(e, c.rid, c.mid, -1, -1);
            return VS_TAG_OK;
        }
        /* the NIC filled a receive software had promised to an earlier message: that
         * message goes back to the unexpected list */
        const vs_recv_nic *x = &e->rnic[c.rid];
        int32_t old = x->claim_mid;
        int64_t old_seq = x->claim_seq;
        claim_set(e, c.rid, c.mid, c.seq, x->claim_cancelling);
        unexpected_add(e, true, old, old_seq);
        matched(e, c.rid, c.mid, c.rid, old);
        return VS_TAG_OK;
    }
    if (c.kind == VS_TAG_CQE_UNEXPECTED) {
        e->sw_count++;
        const vs_msg *m = &e->msg[c.mid];
        vs_list *bucket;
        int32_t rid = posted_earliest(e, m->comm, m->src, m->tag, &bucket);
        if (rid < 0) {
            unexpected_add(e, true, c.mid, c.seq);
            return VS_TAG_OK;
        }
        int32_t loc = unpost(e, rid);
        if (loc == VS_TAG_HW) {
            /* claim it: the NIC is held, so this remove cannot lose to a NIC match */
            claim_set(e, rid, c.mid, c.seq, false);
            push_op(e, VS_TAG_OP_REMOVE, e->sw_count, rid);
        } else if (loc == VS_TAG_HW_CANCEL) {
            claim_set(e, rid, c.mid, c.seq, true);
        }
        matched(e, rid, c.mid, -1, -1);
        return VS_TAG_OK;
    }
    /* a remove's answer */
    if (e->rnic[c.rid].claimed) {
        claim_drop(e, c.rid);       /* a claim's slot is free; a cancel of it failed */
        return VS_TAG_OK;
    }
    vs_recv *r = &e->recv[c.rid];
    if (r->pending && r->where == VS_TAG_HW_CANCEL && c.ok) {
        unpost(e, c.rid);
        e->recv[c.rid].status = VS_TAG_CANCELLED;
        e->out.kinds |= VS_TAG_OUT_CANCELLED;
        e->out.ncancelled = 1;
        e->out.cancelled[0] = c.rid;
    }
    return VS_TAG_OK;              /* otherwise matched before the remove ran: it failed */
}
