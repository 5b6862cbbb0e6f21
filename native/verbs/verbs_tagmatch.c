/* verbs_tagmatch: one rank of tagged messaging over a real RC queue pair, matched by the C
 * tag-matching engine (native/tagmatch/tagmatch_engine.h) and driven over libibverbs, with the
 * TCP connection for the queue pair's address, the hello and the rendezvous regions' announcements.
 *
 *   verbs_tagmatch --rank R --device DEV (--listen PORT | --peer HOST:PORT) [options]
 *
 * The wire is refimpl/library/tagmatch_endpoint.py's, byte for byte (docs/verbs.md, "The tagged program"): every
 * message is a SEND of a 60-byte header (magic "VSTM", kind, source, communicator, tag, per-peer
 * sequence number, message id, length, the sender's count of reposted buffers, the payload's
 * CRC-32, the header's own CRC-32) into one of the bounce buffers the peer keeps posted. Eager
 * messages (up to eager_limit bytes) carry their payload after the header; a longer message's
 * header is an RTS, the receiver RDMA-READs the payload from the sender's registered region in
 * pieces of at most max_msg bytes and then sends FIN, and the send completes on FIN. A sender
 * sends only while the peer has a bounce buffer for it (credits: the peer's bounces plus its
 * reposts, learnt from headers or by READing the peer's count), so RC never meets RNR.
 *
 * Matching: the tag engine is a whole job's engine (senders, receiver); this rank runs one as
 * the receiver of its peer's messages. A header that arrives is first the peer's send step
 * (vs_tag_send, which must give the header's message id, sender * messages + k, and its kind),
 * then its delivery; receives, the rendezvous stages (start_read, read_done, send_fin) and the
 * FIN's arrival at the sender (vs_tag_fin, once the FIN's SEND is acknowledged) are the
 * engine's steps. This rank's own sends take the ids sender * messages + k the peer's engine
 * expects.
 *
 * The run is the demo's tagged part (refimpl/cli/demo.py): rounds of three phases over every size,
 * both ranks sending and receiving: receives naming source and tag posted before the sends;
 * receives with ANY_SOURCE and ANY_TAG posted after every message arrived (a probe); receives
 * with ANY_TAG posted before. Every payload is a pattern keyed by (rank, message) and is
 * checked word by word. --trace FILE writes the device trace in the format TaggedEndpoint
 * writes (refimpl/transport/device_trace.py); --json prints the outcome. Exit 0: every payload
 * verified; 1: the run failed (the reason on stderr); 2: bad arguments; 3: the rank left on
 * purpose (--exit-after, how the tests kill a peer mid-run). */
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

#include "tagmatch_engine.h"
#include "verbs_common.h"
#include "verbs_qp.h"

#define HDR_BYTES 60u               /* refimpl/library/tagmatch_endpoint.py's HEADER: "<IB3xiiiQQQQII" */
#define HELLO_BYTES 28u             /* HELLO: "<IIiIIII" */
#define REGION_BYTES 32u            /* a rendezvous region's announcement */
#define MSG_MAGIC UINT32_C(0x4D545356)      /* "VSTM" */
#define HELLO_MAGIC UINT32_C(0x48545356)    /* "VSTH" */
#define REGION_MAGIC UINT32_C(0x47525356)   /* "VSRG" */
#define VERSION 1u
#define BYE 0xB7                    /* a rank's last byte on the TCP connection: it finished */
#define MAX_SIZES 16
#define N_SETTINGS (7 + MAX_SIZES)
#define POLL_BATCH 64
#define PEER_CHECK_EVERY 4096u      /* empty polls between liveness checks of the peer */
#define CLOCK_CHECK_EVERY 64u       /* empty polls between deadline checks */
#define CREDIT_READ_EVERY_S 0.001   /* a sender out of credits READs the peer's count this often */
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_LEFT 3

enum { K_EAGER = 1, K_RTS = 2, K_FIN = 3 };
static const char *const KIND_NAME[4] = {"?", "eager", "rts", "fin"};

/* work request ids, as refimpl/library/tagmatch_endpoint.py numbers them: the kind in the top bits, an index
 * below (a bounce buffer's receive is its slot number) */
#define WR_SEND (UINT64_C(1) << 60)
#define WR_READ (UINT64_C(2) << 60)
#define WR_CREDIT (UINT64_C(3) << 60)
#define WR_INDEX ((UINT64_C(1) << 60) - 1)

typedef struct {
    vc_endpoint ep;
    uint64_t rounds, nsizes, sizes[MAX_SIZES];
    uint64_t eager_limit, bounces, max_msg, sq_depth;
    int timeout_ms;
    int64_t exit_after;             /* leave after this many messages verified; -1: never */
} options;

/* A message waiting for a credit, a staging slot and send-queue room. */
typedef struct {
    int kind;
    int32_t comm, tag;
    int64_t mid;
    uint64_t nbytes;
    uint32_t crc;
    const uint8_t *payload;         /* eager: copied after the header */
    int64_t send;                   /* an eager send completing on this SEND's ACK, or -1 */
    int64_t fin_mid;                /* a FIN: the peer's message it finishes, or -1 */
} out_item;

/* One of this rank's sends (k-th: message id rank * messages + k). */
typedef struct {
    int32_t tag;
    uint64_t nbytes;
    int kind;
    uint8_t *buf;
    struct ibv_mr *mr;              /* rendezvous: the region the peer READs */
    int done;
} send_t;

/* One receive, by the engine's rid (the trace numbers it rid + 1, as TaggedEndpoint does). */
typedef struct {
    int32_t src, tag;
    uint64_t nbytes;
    uint8_t *buf;
    struct ibv_mr *mr;              /* while its rendezvous payload is READ */
    int64_t mid;                    /* the message it took, or -1 */
    uint64_t pieces_left;
    int done, truncated;
    int32_t st_source, st_tag;
    uint64_t st_count;
} recv_t;

/* One of the peer's messages that arrived (k-th: its id peer * messages + k). */
typedef struct {
    int kind;
    int32_t comm, tag;
    uint64_t nbytes;
    uint32_t crc;
    uint8_t *data;                  /* an eager payload kept while no receive took it */
    int announced;                  /* rendezvous: the peer's region is known */
    uint64_t addr, length;
    uint32_t rkey;
} arrival_t;

typedef struct {
    uint64_t wr_id;
    int64_t rid, mid;
    uint64_t offset, length;
} read_t;

typedef struct {
    options o;
    int peer;
    uint64_t messages;              /* per rank */
    uint64_t bounce_bytes;
    vs_tag *e;
    vq_dev dev;
    int fd;
    uint32_t crc_table[256];
    uint8_t *bounce, *out, *credit, *peer_credit;
    struct ibv_mr *bounce_mr, *out_mr, *credit_mr, *peer_credit_mr;
    uint64_t peer_credit_addr;
    uint32_t peer_credit_rkey;
    /* credits and the send queue */
    uint64_t sent, recv_seq, peer_reposted, reposted, inflight;
    int credit_read;
    double credit_read_at;
    out_item *backlog;
    size_t bl_head, bl_tail, bl_cap;
    read_t *reads;
    size_t rd_head, rd_tail, rd_cap;
    uint64_t *free_slots;
    size_t nfree;
    out_item *slot_item;
    /* the application's side */
    send_t *sends;
    uint64_t nsends;
    recv_t *recvs;
    uint64_t nrecvs;
    arrival_t *arrivals;
    uint64_t narrivals;
    struct ibv_wc wc[POLL_BATCH];
    FILE *trace;
    /* the outcome */
    uint64_t received, eager, rendezvous, bytes, verified, mismatches, credit_reads;
    double wall_seconds, tagged_seconds;
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
    return fail(r, "the tag engine refused %s: %s", call, vs_tag_error(r->e));
}

/* --exit-after: the rank leaves without a word once it has verified that many messages. */
static void leave_if_asked(const rank_t *r)
{
    if (r->o.exit_after >= 0 && r->verified == (uint64_t)r->o.exit_after) {
        fprintf(stderr, "verbs_tagmatch rank %d: leaving after %" PRIu64 " messages without a "
                "word (--exit-after)\n", r->o.ep.rank, r->verified);
        _exit(EXIT_LEFT);
    }
}

/* ------------------------------------------------------------------ bytes */
static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* CRC-32 as zlib computes it (reflected, polynomial 0xEDB88320), so headers and payload checks
 * agree with refimpl/library/tagmatch_endpoint.py's. */
static void crc_init(uint32_t *table)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc32_of(const uint32_t *table, const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------------ payload patterns */
/* the pattern of rank's k-th message (bit 40: no gate's key) */
static uint64_t msg_key(int rank, uint64_t k)
{
    return (uint64_t)rank << 62 | UINT64_C(1) << 40 | k;
}

/* ------------------------------------------------------------------ the trace */
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

static void trace_hex(rank_t *r, const char *ev, const uint8_t *p, size_t n)
{
    fprintf(r->trace, "{\"ev\": \"%s\", \"kind\": \"hello\", \"value\": 0, \"chunks\": 0, "
            "\"depth\": 0, \"bytes\": \"", ev);
    for (size_t i = 0; i < n; i++)
        fprintf(r->trace, "%02x", p[i]);
    fputs("\"}\n", r->trace);
}

/* "receive from rank 1 (tag 0, comm 0)", as TaggedEndpoint names a request */
static void request_text(char *buf, size_t n, int32_t src, int32_t tag)
{
    char s[32], t[32];
    if (src == VS_TAG_ANY)
        snprintf(s, sizeof s, "any source");
    else
        snprintf(s, sizeof s, "rank %d", (int)src);
    if (tag == VS_TAG_ANY)
        snprintf(t, sizeof t, "any tag");
    else
        snprintf(t, sizeof t, "tag %d", (int)tag);
    snprintf(buf, n, "receive from %s (%s, comm 0)", s, t);
}

/* The peer's message mid (the peer's k-th: mid = peer * messages + k, checked on arrival). */
static arrival_t *arrival_of(rank_t *r, int64_t mid)
{
    return &r->arrivals[(uint64_t)mid - (uint64_t)r->peer * r->messages];
}

/* ------------------------------------------------------------------ the side channel */
static int read_side(rank_t *r, void *buf, size_t n, const char *what)
{
    vq_err err;
    int got = vq_read_full(r->fd, buf, n, r->o.ep.side_timeout_ms, &err);
    if (got == 1)
        return fail(r, "the peer closed the TCP connection before it sent %s", what);
    if (got)
        return fail(r, "%s (waiting for %s)", err.text, what);
    return 0;
}

static int write_side(rank_t *r, const void *buf, size_t n, const char *what)
{
    vq_err err;
    if (vq_write_full(r->fd, buf, n, &err))
        return fail(r, "%s (writing %s)", err.text, what);
    return 0;
}

/* The peer's next region announcement: the rendezvous payload of one of its messages. */
static int read_region(rank_t *r)
{
    uint8_t b[REGION_BYTES];
    if (read_side(r, b, sizeof b, "a rendezvous region's announcement"))
        return -1;
    uint64_t mid = get_le(b + 8, 8), base = (uint64_t)r->peer * r->messages;
    if (get_le(b, 4) != REGION_MAGIC || mid < base || mid >= base + r->messages)
        return fail(r, "the peer's region announcement is malformed (magic 0x%08" PRIx64
                    ", message %" PRIu64 ")", get_le(b, 4), mid);
    arrival_t *a = &r->arrivals[mid - base];
    a->announced = 1;
    a->rkey = (uint32_t)get_le(b + 4, 4);
    a->addr = get_le(b + 16, 8);
    a->length = get_le(b + 24, 8);
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"tcp_read\", \"kind\": \"region\", \"value\": %" PRIu64
                ", \"chunks\": 0, \"depth\": 0, \"length\": %" PRIu64 "}\n", mid, a->length);
    return 0;
}

/* Whether the peer died: its connection ended without BYE (1), or not (0), or -1 on a failure.
 * Region announcements waiting on the connection are taken in first (they would hide its
 * end); BYE, or anything else, is left for the reader it belongs to. */
static int peer_gone(rank_t *r)
{
    for (;;) {
        uint8_t c;
        ssize_t k = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0)
            return 1;
        if (k < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
        if (c != (REGION_MAGIC & 0xFF))
            return 0;
        if (read_region(r))
            return -1;
    }
}

/* ------------------------------------------------------------------ posting */
static int post_bounce(rank_t *r, uint64_t slot, int trace)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(r->bounce + slot * r->bounce_bytes),
                          .length = (uint32_t)r->bounce_bytes, .lkey = r->bounce_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    if (trace && r->trace)
        fprintf(r->trace, "{\"ev\": \"post_recv\", \"wrs\": [[%" PRIu64 ", \"bounce\", %" PRIu64
                ", %" PRIu64 "]]}\n", slot, slot * r->bounce_bytes, r->bounce_bytes);
    int rc = ibv_post_recv(r->dev.qp, &wr, &bad);
    if (rc)
        return fail(r, "ibv_post_recv failed: %s (errno %d) at wr_id %" PRIu64, strerror(rc),
                    rc, slot);
    return 0;
}

/* The peer's bounce buffers this rank may still fill. */
static int64_t credits_left(const rank_t *r)
{
    return (int64_t)(r->o.bounces + r->peer_reposted) - (int64_t)r->sent;
}

static int post_one_send(rank_t *r, const out_item *it)
{
    uint64_t slot = r->free_slots[--r->nfree];
    uint8_t *h = r->out + slot * r->bounce_bytes;
    r->sent++;
    memset(h, 0, HDR_BYTES);
    vc_put_le(h, MSG_MAGIC, 4);
    h[4] = (uint8_t)it->kind;
    vc_put_le(h + 8, (uint64_t)(uint32_t)r->o.ep.rank, 4);
    vc_put_le(h + 12, (uint64_t)(uint32_t)it->comm, 4);
    vc_put_le(h + 16, (uint64_t)(uint32_t)it->tag, 4);
    vc_put_le(h + 20, r->sent, 8);
    vc_put_le(h + 28, (uint64_t)it->mid, 8);
    vc_put_le(h + 36, it->nbytes, 8);
    vc_put_le(h + 44, r->reposted, 8);
    vc_put_le(h + 52, it->crc, 4);
    vc_put_le(h + 56, crc32_of(r->crc_table, h, HDR_BYTES - 4), 4);
    uint64_t len = HDR_BYTES;
    if (it->kind == K_EAGER) {
        memcpy(h + HDR_BYTES, it->payload, it->nbytes);
        len += it->nbytes;
    }
    r->slot_item[slot] = *it;
    r->inflight++;
    uint64_t wr_id = WR_SEND | slot;
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"post_send\", \"wrs\": [[%" PRIu64 ", \"out\", %" PRIu64
                ", %" PRIu64 ", true]], \"hdrs\": [{\"kind\": \"%s\", \"src\": %d, \"comm\": %d, "
                "\"tag\": %d, \"seq\": %" PRIu64 ", \"mid\": %" PRId64 ", \"bytes\": %" PRIu64
                "}]}\n", wr_id, slot * r->bounce_bytes, len, KIND_NAME[it->kind], r->o.ep.rank,
                (int)it->comm, (int)it->tag, r->sent, it->mid, it->nbytes);
    struct ibv_sge sge = {.addr = (uintptr_t)h, .length = (uint32_t)len,
                          .lkey = r->out_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(r->dev.qp, &wr, &bad);
    if (rc)
        return fail(r, "ibv_post_send failed: %s (errno %d) at wr_id 0x%" PRIx64, strerror(rc),
                    rc, wr_id);
    return 0;
}

/* An RDMA READ of len bytes at remote addr/rkey into local (lkey); traced as region/remote. */
static int post_read(rank_t *r, uint64_t wr_id, uint8_t *local, uint32_t lkey, uint64_t addr,
                     uint32_t rkey, uint64_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = addr, .rkey = rkey}};
    struct ibv_send_wr *bad = NULL;
    r->inflight++;
    int rc = ibv_post_send(r->dev.qp, &wr, &bad);
    if (rc)
        return fail(r, "ibv_post_send (RDMA READ) failed: %s (errno %d) at wr_id 0x%" PRIx64,
                    strerror(rc), rc, wr_id);
    return 0;
}

/* Posts queued messages while the peer has credits, a staging slot is free and the send queue
 * has room; then queued READs; READs the peer's credit count when out of credits. */
static int pump(rank_t *r)
{
    while (r->bl_head < r->bl_tail && r->inflight < r->o.sq_depth && r->nfree) {
        if (credits_left(r) <= 0) {
            double now = vc_now_s();
            if (!r->credit_read && now - r->credit_read_at >= CREDIT_READ_EVERY_S) {
                r->credit_read = 1;
                r->credit_read_at = now;
                r->credit_reads++;
                if (r->trace)
                    fprintf(r->trace, "{\"ev\": \"post_read\", \"wr_id\": %" PRIu64 ", "
                            "\"region\": \"peer_credit\", \"offset\": 0, \"remote\": "
                            "\"credit\", \"remote_offset\": 0, \"length\": 8}\n", WR_CREDIT);
                if (post_read(r, WR_CREDIT, r->peer_credit, r->peer_credit_mr->lkey,
                              r->peer_credit_addr, r->peer_credit_rkey, 8))
                    return -1;
            }
            break;
        }
        if (post_one_send(r, &r->backlog[r->bl_head++]))
            return -1;
    }
    while (r->rd_head < r->rd_tail && r->inflight < r->o.sq_depth) {
        const read_t *rd = &r->reads[r->rd_head++];
        recv_t *rv = &r->recvs[rd->rid];
        const arrival_t *a = arrival_of(r, rd->mid);
        if (r->trace)
            fprintf(r->trace, "{\"ev\": \"post_read\", \"wr_id\": %" PRIu64 ", \"region\": "
                    "\"get%" PRId64 "\", \"offset\": %" PRIu64 ", \"remote\": \"rndv%" PRId64
                    "\", \"remote_offset\": %" PRIu64 ", \"length\": %" PRIu64 "}\n", rd->wr_id,
                    rd->rid + 1, rd->offset, rd->mid, rd->offset, rd->length);
        if (post_read(r, rd->wr_id, rv->buf + rd->offset, rv->mr->lkey, a->addr + rd->offset,
                      a->rkey, rd->length))
            return -1;
    }
    return 0;
}

static int queue_out(rank_t *r, out_item it)
{
    if (r->bl_tail == r->bl_cap)
        return fail(r, "more messages queued than the run has (%zu)", r->bl_cap);
    r->backlog[r->bl_tail++] = it;
    return 0;
}

/* ------------------------------------------------------------------ the receiver */
/* Receive rid took message mid: its status, and (eager) its payload copied in. */
static void finish_recv(rank_t *r, int64_t rid, int64_t mid, int32_t code, const uint8_t *data)
{
    recv_t *rv = &r->recvs[rid];
    const arrival_t *a = arrival_of(r, mid);
    uint64_t n = a->nbytes < rv->nbytes ? a->nbytes : rv->nbytes;
    if (data)
        memcpy(rv->buf, data, n);
    rv->done = 1;
    rv->mid = mid;
    rv->truncated = code == VS_TAG_TRUNCATED;
    rv->st_source = r->peer;
    rv->st_tag = a->tag;
    rv->st_count = n;
}

/* Receive rid took the peer's rendezvous message mid: READ its payload in pieces. */
static int start_rndv(rank_t *r, int64_t rid, int64_t mid)
{
    if (vs_tag_start_read(r->e, mid))
        return refused(r, "start_read");
    const vs_tag_out *out = vs_tag_emitted(r->e);
    uint64_t len = (uint64_t)out->reads[0].length;
    arrival_t *a = arrival_of(r, mid);
    while (!a->announced)
        if (read_region(r))
            return -1;
    if (len > a->length)
        return fail(r, "message %" PRId64 "'s region holds %" PRIu64 " bytes, not %" PRIu64,
                    mid, a->length, len);
    recv_t *rv = &r->recvs[rid];
    rv->mid = mid;
    vq_err err;
    if (vq_reg(&r->dev, rv->buf, len, IBV_ACCESS_LOCAL_WRITE, &rv->mr, "rendezvous receive",
               &err))
        return fail(r, "%s", err.text);
    uint64_t pieces = (len + r->o.max_msg - 1) / r->o.max_msg;
    if (r->rd_tail + pieces > r->rd_cap)
        return fail(r, "more READ pieces than the run has room for");
    rv->pieces_left = pieces;
    for (uint64_t k = 0; k < pieces; k++) {
        uint64_t off = k * r->o.max_msg;
        r->reads[r->rd_tail++] = (read_t){WR_READ | (uint64_t)(rid + 1) << 20 | k, rid, mid,
                                          off, len - off < r->o.max_msg ? len - off
                                                                          : r->o.max_msg};
    }
    return pump(r);
}

/* Every piece of receive rid's payload landed: check it, queue the FIN, complete it. */
static int got_rndv(rank_t *r, int64_t rid)
{
    recv_t *rv = &r->recvs[rid];
    int64_t mid = rv->mid;
    const arrival_t *a = arrival_of(r, mid);
    int code = ibv_dereg_mr(rv->mr);
    rv->mr = NULL;
    if (code)
        return fail(r, "ibv_dereg_mr failed for a rendezvous receive: %s (errno %d)",
                    strerror(code), code);
    if (vs_tag_read_done(r->e, mid))
        return refused(r, "read_done");
    int32_t done = vs_tag_emitted(r->e)->completions[0].code;
    uint64_t n = a->nbytes < rv->nbytes ? a->nbytes : rv->nbytes;
    if (n == a->nbytes && crc32_of(r->crc_table, rv->buf, n) != a->crc)
        return fail(r, "rendezvous message %" PRId64 " from rank %d (tag %d) failed its payload "
                    "check after the READ", mid, r->peer, (int)a->tag);
    if (vs_tag_send_fin(r->e, mid))
        return refused(r, "send_fin");
    if (queue_out(r, (out_item){K_FIN, a->comm, a->tag, vs_tag_emitted(r->e)->fins[0], 0, 0,
                                NULL, -1, mid}))
        return -1;
    finish_recv(r, rid, mid, done, NULL);
    return pump(r);
}

/* What a new receive matched among the unexpected messages: an eager one completes (its kept
 * payload copied in), a rendezvous one is READ. */
static int on_match(rank_t *r)
{
    const vs_tag_out *out = vs_tag_emitted(r->e);
    if (!(out->kinds & VS_TAG_OUT_MATCHES))
        return 0;
    int64_t rid = out->matches[0].rid, mid = out->matches[0].mid;
    if (out->kinds & VS_TAG_OUT_COMPLETIONS) {
        arrival_t *a = arrival_of(r, mid);
        finish_recv(r, rid, mid, out->completions[0].code, a->data);
        free(a->data);
        a->data = NULL;
        return 0;
    }
    return start_rndv(r, rid, mid);
}

/* A message landed in bounce buffer slot: check it, repost the buffer, act on it. */
static int arrive(rank_t *r, uint64_t slot, uint32_t byte_len)
{
    if (slot >= r->o.bounces)
        return fail(r, "a receive completed with wr_id %" PRIu64 ", which is no bounce buffer",
                    slot);
    const uint8_t *h = r->bounce + slot * r->bounce_bytes;
    if (byte_len < HDR_BYTES)
        return fail(r, "a message from rank %d of %u bytes is shorter than a header", r->peer,
                    byte_len);
    uint64_t magic = get_le(h, 4), kind = h[4], seq = get_le(h + 20, 8);
    int32_t src = (int32_t)get_le(h + 8, 4), comm = (int32_t)get_le(h + 12, 4);
    int32_t tag = (int32_t)get_le(h + 16, 4);
    int64_t mid = (int64_t)get_le(h + 28, 8);
    uint64_t nbytes = get_le(h + 36, 8), credit = get_le(h + 44, 8);
    uint32_t crc = (uint32_t)get_le(h + 52, 4);
    if (magic != MSG_MAGIC || get_le(h + 56, 4) != crc32_of(r->crc_table, h, HDR_BYTES - 4)
        || kind < K_EAGER || kind > K_FIN || src != r->peer)
        return fail(r, "a message from rank %d failed its header check (magic 0x%" PRIx64
                    ", kind %" PRIu64 ", source %d)", r->peer, magic, kind, (int)src);
    if (seq != r->recv_seq + 1)
        return fail(r, "a message from rank %d: expected message %" PRIu64 ", got %" PRIu64
                    ": a message was lost or reordered", r->peer, r->recv_seq + 1, seq);
    r->recv_seq = seq;
    if (credit > r->peer_reposted)
        r->peer_reposted = credit;
    if (kind == K_EAGER) {
        if (byte_len != HDR_BYTES + nbytes)
            return fail(r, "a message from rank %d: an eager message of %" PRIu64 " bytes "
                        "arrived as %u", r->peer, nbytes, byte_len - HDR_BYTES);
        if (crc32_of(r->crc_table, h + HDR_BYTES, nbytes) != crc)
            return fail(r, "a message from rank %d: eager message %" PRIu64 " (tag %d) failed "
                        "its payload check", r->peer, seq, (int)tag);
    }
    int64_t rndv_rid = -1;          /* a rendezvous message a receive took at once */
    if (kind == K_FIN) {
        uint64_t k = (uint64_t)mid - (uint64_t)r->o.ep.rank * r->messages;
        if (mid < 0 || k >= r->nsends || r->sends[k].kind != K_RTS || r->sends[k].done)
            return fail(r, "a message from rank %d: FIN for message %" PRId64 ", which is no "
                        "rendezvous send waiting", r->peer, mid);
        send_t *s = &r->sends[k];
        int code = ibv_dereg_mr(s->mr);
        s->mr = NULL;
        if (code)
            return fail(r, "ibv_dereg_mr failed for a rendezvous send: %s (errno %d)",
                        strerror(code), code);
        s->done = 1;
    } else {
        /* the peer's send step, then the delivery: the engine must agree on the id and kind */
        if (vs_tag_send(r->e, r->peer, comm, tag, (int64_t)nbytes))
            return refused(r, "the peer's send");
        const vs_tag_packet *p = &vs_tag_emitted(r->e)->sends[0];
        int want = p->kind == VS_TAG_EAGER ? K_EAGER : K_RTS;
        if (p->mid != mid || want != (int)kind)
            return fail(r, "a message from rank %d is %s message %" PRId64 "; the tag engine "
                        "expects %s message %d", r->peer, KIND_NAME[kind], mid,
                        KIND_NAME[want], (int)p->mid);
        /* (its region's announcement may have been read already: those fields stay) */
        arrival_t *a = &r->arrivals[r->narrivals++];
        a->kind = (int)kind;
        a->comm = comm;
        a->tag = tag;
        a->nbytes = nbytes;
        a->crc = crc;
        if (vs_tag_delivered(r->e, mid, comm, src, tag, (int64_t)nbytes,
                             kind == K_EAGER ? VS_TAG_EAGER : VS_TAG_RNDV))
            return refused(r, "delivered");
        const vs_tag_out *out = vs_tag_emitted(r->e);
        int matched = (out->kinds & VS_TAG_OUT_MATCHES) != 0;
        if (kind == K_EAGER && matched) {
            finish_recv(r, out->completions[0].rid, mid, out->completions[0].code,
                        h + HDR_BYTES);
        } else if (kind == K_EAGER) {
            /* unexpected: keep the payload, the buffer goes back to the peer */
            a->data = malloc(nbytes ? nbytes : 1);
            if (a->data == NULL)
                return fail(r, "out of memory keeping an unexpected message");
            memcpy(a->data, h + HDR_BYTES, nbytes);
        } else if (matched) {
            rndv_rid = out->matches[0].rid;
        }
    }
    /* the buffer is free again: repost it and publish the count (the peer's credits) */
    if (post_bounce(r, slot, 1))
        return -1;
    r->reposted++;
    vc_put_le(r->credit, r->reposted, 8);
    return rndv_rid >= 0 ? start_rndv(r, rndv_rid, mid) : 0;
}

/* ------------------------------------------------------------------ completions */
static const char *op_of(uint64_t wr_id)
{
    uint64_t kind = wr_id & ~WR_INDEX;
    return kind == WR_SEND ? "send" : kind == WR_READ || kind == WR_CREDIT ? "read" : "recv";
}

static int complete(rank_t *r, const struct ibv_wc *w)
{
    if (w->status != IBV_WC_SUCCESS)
        return fail(r, "rdma completion error: %s (%d) on a %s to or from rank %d (wr_id 0x%"
                    PRIx64 ")", ibv_wc_status_str(w->status), (int)w->status, op_of(w->wr_id),
                    r->peer, (uint64_t)w->wr_id);
    uint64_t kind = w->wr_id & ~WR_INDEX, index = w->wr_id & WR_INDEX;
    if (kind == 0)
        return arrive(r, w->wr_id, w->byte_len);
    r->inflight--;
    if (kind == WR_SEND) {
        const out_item *it = &r->slot_item[index];
        r->free_slots[r->nfree++] = index;
        if (it->send >= 0)
            r->sends[it->send].done = 1;        /* eager: the peer's NIC has it */
        if (it->fin_mid >= 0 && vs_tag_fin(r->e, it->fin_mid))
            return refused(r, "fin");           /* the FIN reached the sender */
        return 0;
    }
    if (kind == WR_CREDIT) {
        r->credit_read = 0;
        uint64_t count = get_le(r->peer_credit, 8);
        if (count > r->peer_reposted)
            r->peer_reposted = count;
        return 0;
    }
    int64_t rid = (int64_t)(index >> 20) - 1;
    if (rid < 0 || (uint64_t)rid >= r->nrecvs || r->recvs[rid].pieces_left == 0)
        return fail(r, "a READ completed with wr_id 0x%" PRIx64 ", which no receive posted",
                    (uint64_t)w->wr_id);
    if (--r->recvs[rid].pieces_left == 0)
        return got_rndv(r, rid);
    return 0;
}

/* One poll of the CQ; the completions handled, or -1. */
static int poll_once(rank_t *r)
{
    if (pump(r))
        return -1;
    int n = ibv_poll_cq(r->dev.cq, POLL_BATCH, r->wc);
    if (n < 0)
        return fail(r, "ibv_poll_cq failed (returned %d)", n);
    if (n && r->trace) {
        fprintf(r->trace, "{\"ev\": \"poll\", \"max\": %d, \"cqes\": [", POLL_BATCH);
        for (int i = 0; i < n; i++)
            fprintf(r->trace, "%s[\"%s\", %" PRIu64 ", %d, %u]", i ? ", " : "",
                    op_of(r->wc[i].wr_id), (uint64_t)r->wc[i].wr_id, (int)r->wc[i].status,
                    r->wc[i].byte_len);
        fputs("]}\n", r->trace);
    }
    for (int i = 0; i < n; i++)
        if (complete(r, &r->wc[i]))
            return -1;
    if (n && pump(r))
        return -1;
    return n;
}

/* What a wait waits for. */
enum { W_RECV, W_SEND, W_PROBE, W_DRAINED };

static int satisfied(rank_t *r, int what, int64_t arg)
{
    switch (what) {
    case W_RECV:
        return r->recvs[arg].done;
    case W_SEND:
        return r->sends[arg].done;
    case W_PROBE:
        if (vs_tag_probe(r->e, 0, r->peer, arg))
            return refused(r, "probe");
        return vs_tag_emitted(r->e)->probe >= 0;
    default:
        return r->bl_head == r->bl_tail && r->rd_head == r->rd_tail && r->inflight == 0;
    }
}

/* Makes progress until the wait is satisfied (0) or fails (-1): a timeout when nothing
 * completes for timeout_ms, or a peer that closed its end. */
static int progress_until(rank_t *r, int what, int64_t arg, const char *text)
{
    double deadline = vc_now_s() + r->o.timeout_ms / 1000.0;
    unsigned empty = 0;
    for (;;) {
        int ok = satisfied(r, what, arg);
        if (ok < 0)
            return -1;
        if (ok)
            return 0;
        int n = poll_once(r);
        if (n < 0)
            return -1;
        if (n > 0) {
            deadline = vc_now_s() + r->o.timeout_ms / 1000.0;
            empty = 0;
            continue;
        }
        empty++;
        /* a peer that finished left BYE unread: only one that died shows a bare close */
        int gone = empty % PEER_CHECK_EVERY == 0 ? peer_gone(r) : 0;
        if (gone < 0)
            return -1;
        if (gone)
            return fail(r, "peer rank %d is gone (its TCP connection closed without BYE: the "
                        "process died) while a %s waited", r->peer, text);
        if (empty % CLOCK_CHECK_EVERY == 0 && vc_now_s() > deadline)
            return fail(r, "timeout: the %s did not complete within %d ms", text,
                        r->o.timeout_ms);
    }
}

/* ------------------------------------------------------------------ the API */
static int do_isend(rank_t *r, uint64_t nbytes, int32_t tag, uint64_t *index)
{
    uint64_t k = r->nsends;
    if (k >= r->messages)
        return fail(r, "isend: the run has only %" PRIu64 " messages per rank", r->messages);
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"isend\", \"args\": {\"bytes\": %"
                PRIu64 ", \"dest\": %d, \"tag\": %d, \"comm\": 0}}\n", nbytes, r->peer,
                (int)tag);
    send_t *s = &r->sends[r->nsends++];
    *s = (send_t){.tag = tag, .nbytes = nbytes};
    s->buf = malloc(nbytes);
    if (s->buf == NULL) {
        fail(r, "no memory for a message of %" PRIu64 " bytes", nbytes);
        trace_result(r, 0);
        return -1;
    }
    vc_fill(s->buf, nbytes, msg_key(r->o.ep.rank, k));
    int64_t mid = (int64_t)((uint64_t)r->o.ep.rank * r->messages + k);
    uint32_t crc = crc32_of(r->crc_table, s->buf, nbytes);
    int rc;
    if (nbytes <= r->o.eager_limit) {
        s->kind = K_EAGER;
        r->eager++;
        rc = queue_out(r, (out_item){K_EAGER, 0, tag, mid, nbytes, crc, s->buf, (int64_t)k, -1});
    } else {
        s->kind = K_RTS;
        r->rendezvous++;
        vq_err err;
        rc = vq_reg(&r->dev, s->buf, nbytes, IBV_ACCESS_REMOTE_READ, &s->mr, "rendezvous send",
                    &err) ? fail(r, "%s", err.text) : 0;
        if (rc == 0) {
            /* the region goes to the peer before the RTS that names it */
            uint8_t b[REGION_BYTES];
            vc_put_le(b, REGION_MAGIC, 4);
            vc_put_le(b + 4, s->mr->rkey, 4);
            vc_put_le(b + 8, (uint64_t)mid, 8);
            vc_put_le(b + 16, (uintptr_t)s->buf, 8);
            vc_put_le(b + 24, nbytes, 8);
            if (r->trace)
                fprintf(r->trace, "{\"ev\": \"tcp_write\", \"kind\": \"region\", \"value\": %"
                        PRId64 ", \"chunks\": 0, \"depth\": 0, \"length\": %" PRIu64 "}\n", mid,
                        nbytes);
            rc = write_side(r, b, sizeof b, "a rendezvous region's announcement");
        }
        if (rc == 0)
            rc = queue_out(r, (out_item){K_RTS, 0, tag, mid, nbytes, crc, NULL, -1, -1});
    }
    if (rc == 0)
        rc = pump(r);
    trace_result(r, rc == 0);
    *index = k;
    return rc;
}

static int do_irecv(rank_t *r, uint64_t nbytes, int32_t src, int32_t tag, int64_t *rid)
{
    if (r->trace)
        fprintf(r->trace, "{\"ev\": \"call\", \"name\": \"irecv\", \"args\": {\"bytes\": %"
                PRIu64 ", \"source\": %d, \"tag\": %d, \"comm\": 0}}\n", nbytes, (int)src,
                (int)tag);
    if (r->nrecvs >= r->messages) {
        fail(r, "irecv: the run has only %" PRIu64 " messages per rank", r->messages);
        trace_result(r, 0);
        return -1;
    }
    *rid = (int64_t)r->nrecvs;
    recv_t *rv = &r->recvs[r->nrecvs];
    *rv = (recv_t){.src = src, .tag = tag, .nbytes = nbytes, .mid = -1};
    rv->buf = malloc(nbytes);
    int rc = rv->buf == NULL ? fail(r, "no memory for a receive of %" PRIu64 " bytes", nbytes)
                             : 0;
    if (rc == 0 && vs_tag_post_recv(r->e, 0, src, tag, (int64_t)nbytes)) {
        rc = refused(r, "post_recv");
        free(rv->buf);
        rv->buf = NULL;
    }
    if (rc == 0) {
        r->nrecvs++;
        const vs_tag_out *out = vs_tag_emitted(r->e);
        if ((out->kinds & VS_TAG_OUT_MATCHES) && out->matches[0].rid != *rid)
            rc = fail(r, "the tag engine gave receive %d, not %" PRId64,
                      (int)out->matches[0].rid, *rid);
        else
            rc = on_match(r);
    }
    trace_result(r, rc == 0);
    return rc;
}

static void trace_wait(rank_t *r, const char *text, int64_t rid, int send)
{
    fputs("{\"ev\": \"call\", \"name\": \"request.wait\", \"args\": {\"request\": ", r->trace);
    vc_json_text(r->trace, text);
    fprintf(r->trace, ", \"rid\": %" PRId64 ", \"send\": %s}}\n", rid, send ? "true" : "false");
}

static void trace_status(rank_t *r, int32_t source, int32_t tag, uint64_t count,
                         const char *error)
{
    fprintf(r->trace, "{\"ev\": \"result\", \"ok\": true, \"status\": {\"source\": %d, "
            "\"tag\": %d, \"count\": %" PRIu64 ", \"error\": ", (int)source, (int)tag, count);
    vc_json_text(r->trace, error);
    fputs(", \"cancelled\": false}}\n", r->trace);
}

/* Waits for receive rid, then checks it is the peer's k-th message of nbytes with tag. */
static int wait_recv(rank_t *r, int64_t rid, uint64_t k, uint64_t nbytes, int32_t tag)
{
    recv_t *rv = &r->recvs[rid];
    char text[96];
    request_text(text, sizeof text, rv->src, rv->tag);
    if (r->trace)
        trace_wait(r, text, rid + 1, 0);
    if (progress_until(r, W_RECV, rid, text)) {
        trace_result(r, 0);
        return -1;
    }
    char error[160] = "";
    if (rv->truncated)
        snprintf(error, sizeof error, "MPI_ERR_TRUNCATE: a message of %" PRIu64 " bytes from "
                 "rank %d (tag %d) is longer than the receive's %" PRIu64 " bytes",
                 arrival_of(r, rv->mid)->nbytes,
                 (int)rv->st_source, (int)rv->st_tag, rv->nbytes);
    if (r->trace)
        trace_status(r, rv->st_source, rv->st_tag, rv->st_count, error);
    r->received++;
    r->bytes += rv->st_count;
    if (rv->st_source != r->peer || rv->st_tag != tag || rv->truncated || rv->st_count != nbytes) {
        r->mismatches++;
        return fail(r, "receive %" PRId64 " (%s) completed with source %d, tag %d, %" PRIu64
                    " bytes%s; the peer's message %" PRIu64 " has source %d, tag %d, %" PRIu64
                    " bytes", rid + 1, text, (int)rv->st_source, (int)rv->st_tag, rv->st_count,
                    rv->truncated ? " (truncated)" : "", k, r->peer, (int)tag, nbytes);
    }
    long long at = vc_first_bad(rv->buf, nbytes, msg_key(r->peer, k));
    if (at >= 0) {
        r->mismatches++;
        return fail(r, "receive %" PRId64 " (%s, tag %d): the payload is not the peer's message %"
                    PRIu64 ": it differs at byte %lld", rid + 1, text, (int)tag, k, at);
    }
    r->verified++;
    free(rv->buf);
    rv->buf = NULL;
    leave_if_asked(r);
    return 0;
}

static int wait_send(rank_t *r, uint64_t k)
{
    send_t *s = &r->sends[k];
    char text[96];
    snprintf(text, sizeof text, "send of %" PRIu64 " bytes to rank %d (tag %d, comm 0)",
             s->nbytes, r->peer, (int)s->tag);
    if (r->trace)
        trace_wait(r, text, 0, 1);
    if (progress_until(r, W_SEND, (int64_t)k, text)) {
        trace_result(r, 0);
        return -1;
    }
    if (r->trace)
        trace_status(r, r->o.ep.rank, s->tag, s->nbytes, "");
    return 0;
}

/* ------------------------------------------------------------------ the workload */
/* The demo's tagged part: per round, three phases over every size (tags i, 100 + i, 200 + i):
 * receives naming source and tag posted before the sends; every message sent, a probe until
 * the last has arrived, then ANY_SOURCE and ANY_TAG receives (they take the messages in the
 * order sent); receives with ANY_TAG posted before. Each send is waited for at the round's
 * end. */
static int workload(rank_t *r)
{
    const uint64_t n = r->o.nsizes;
    const uint64_t *size = r->o.sizes;
    uint64_t msg = 0;
    int64_t rids[MAX_SIZES];
    uint64_t sends[3 * MAX_SIZES], k;
    double t0 = vc_now_s();
    for (uint64_t round = 0; round < r->o.rounds; round++) {
        size_t ns = 0;
        for (uint64_t i = 0; i < n; i++)
            if (do_irecv(r, size[i], r->peer, (int32_t)i, &rids[i]))
                return -1;
        for (uint64_t i = 0; i < n; i++) {
            if (do_isend(r, size[i], (int32_t)i, &k))
                return -1;
            sends[ns++] = k;
        }
        for (uint64_t i = 0; i < n; i++)
            if (wait_recv(r, rids[i], msg + i, size[i], (int32_t)i))
                return -1;
        msg += n;
        for (uint64_t i = 0; i < n; i++) {
            if (do_isend(r, size[i], (int32_t)(100 + i), &k))
                return -1;
            sends[ns++] = k;
        }
        char text[64];
        snprintf(text, sizeof text, "probe for rank %d (tag %d, comm 0)", r->peer,
                 (int)(100 + n - 1));
        if (progress_until(r, W_PROBE, (int64_t)(100 + n - 1), text))
            return -1;
        for (uint64_t i = 0; i < n; i++) {
            int64_t rid;
            if (do_irecv(r, size[i], VS_TAG_ANY, VS_TAG_ANY, &rid)
                || wait_recv(r, rid, msg + i, size[i], (int32_t)(100 + i)))
                return -1;
        }
        msg += n;
        for (uint64_t i = 0; i < n; i++)
            if (do_irecv(r, size[i], r->peer, VS_TAG_ANY, &rids[i]))
                return -1;
        for (uint64_t i = 0; i < n; i++) {
            if (do_isend(r, size[i], (int32_t)(200 + i), &k))
                return -1;
            sends[ns++] = k;
        }
        for (uint64_t i = 0; i < n; i++)
            if (wait_recv(r, rids[i], msg + i, size[i], (int32_t)(200 + i)))
                return -1;
        msg += n;
        for (size_t i = 0; i < ns; i++)
            if (wait_send(r, sends[i]))
                return -1;
    }
    r->tagged_seconds = vc_now_s() - t0;
    return 0;
}

/* The end: what this rank still owes the peer (FINs) leaves and is acknowledged; then each side
 * writes BYE, closes its writing half and waits for the peer's BYE and end, so neither tears
 * its queue pair down while the other may still READ from it or wait for an acknowledgement.
 * A peer that finished leaves BYE unread before its end, so a wait that peeks for a closed
 * connection tells a finished peer from one that died. */
static int finish(rank_t *r)
{
    if (r->trace)
        fputs("{\"ev\": \"call\", \"name\": \"close\", \"args\": {}}\n", r->trace);
    int rc = progress_until(r, W_DRAINED, 0, "close");
    uint8_t b = BYE;
    if (rc == 0) {
        if (r->trace)
            fprintf(r->trace, "{\"ev\": \"tcp_write\", \"kind\": \"bye\", \"value\": %d, "
                    "\"chunks\": 0, \"depth\": 0}\n", BYE);
        rc = write_side(r, &b, 1, "BYE");
    }
    if (rc == 0) {
        shutdown(r->fd, SHUT_WR);
        rc = read_side(r, &b, 1, "its last byte (BYE)");
    }
    if (rc == 0 && b != BYE)
        rc = fail(r, "close: the peer sent byte 0x%02x, not BYE (0x%02x), after its last "
                  "message", b, BYE);
    if (rc == 0) {
        if (r->trace)
            fprintf(r->trace, "{\"ev\": \"tcp_read\", \"kind\": \"bye\", \"value\": %d, "
                    "\"chunks\": 0, \"depth\": 0}\n", b);
        vq_err err;
        int got = vq_read_full(r->fd, &b, 1, r->o.ep.side_timeout_ms, &err);
        if (got < 0)
            rc = fail(r, "close: %s", err.text);
        else if (got == 0)
            rc = fail(r, "close: the peer sent byte 0x%02x after BYE", b);
    }
    trace_result(r, rc == 0);
    return rc;
}

/* ------------------------------------------------------------------ setup */
static int alloc_region(rank_t *r, uint8_t **p, size_t n, const char *what)
{
    void *m = NULL;
    if (posix_memalign(&m, 4096, n))
        return fail(r, "no memory for the %s region (%zu bytes)", what, n);
    memset(m, 0, n);
    *p = m;
    return 0;
}

static int setup(rank_t *r)
{
    options *o = &r->o;
    vq_err err;
    r->peer = 1 - o->ep.rank;
    r->messages = o->rounds * 3 * o->nsizes;
    r->bounce_bytes = HDR_BYTES + o->eager_limit;
    crc_init(r->crc_table);
    uint64_t largest = 0, pieces = 0;
    for (uint64_t i = 0; i < o->nsizes; i++) {
        largest = o->sizes[i] > largest ? o->sizes[i] : largest;
        pieces += (o->sizes[i] + o->max_msg - 1) / o->max_msg;
    }
    vs_tag_config tc = {.senders = 2, .messages = (int32_t)r->messages,
                        .tags = (int32_t)(200 + o->nsizes), .comms = 1,
                        .max_bytes = (int32_t)largest, .eager_limit = (int32_t)o->eager_limit,
                        .capacity = 0};
    int rc = vs_tag_create(&tc, &r->e);
    if (rc)
        return fail(r, "the tag engine could not be created (%s)",
                    rc == VS_TAG_NOMEM ? "out of memory" : "configuration refused");
    r->bl_cap = 2 * r->messages;     /* every send and every FIN */
    r->rd_cap = o->rounds * 3 * pieces;
    r->backlog = calloc(r->bl_cap, sizeof *r->backlog);
    r->reads = calloc(r->rd_cap ? r->rd_cap : 1, sizeof *r->reads);
    r->free_slots = calloc(o->sq_depth, sizeof *r->free_slots);
    r->slot_item = calloc(o->sq_depth, sizeof *r->slot_item);
    r->sends = calloc(r->messages, sizeof *r->sends);
    r->recvs = calloc(r->messages, sizeof *r->recvs);
    r->arrivals = calloc(r->messages, sizeof *r->arrivals);
    if (!r->backlog || !r->reads || !r->free_slots || !r->slot_item || !r->sends || !r->recvs
        || !r->arrivals)
        return fail(r, "out of memory");
    for (uint64_t i = 0; i < o->sq_depth; i++)
        r->free_slots[r->nfree++] = o->sq_depth - 1 - i;
    if (alloc_region(r, &r->bounce, o->bounces * r->bounce_bytes, "bounce")
        || alloc_region(r, &r->out, o->sq_depth * r->bounce_bytes, "out")
        || alloc_region(r, &r->credit, 8, "credit")
        || alloc_region(r, &r->peer_credit, 8, "peer_credit"))
        return -1;

    /* every bounce and every send-queue entry can complete at once */
    int cqe = (int)(2 * (o->bounces + o->sq_depth));
    if (vq_open(&r->dev, o->ep.device, (uint8_t)o->ep.ib_port, o->ep.gid_index, IBV_QPT_RC,
                (uint32_t)o->sq_depth, (uint32_t)o->bounces, cqe, &err)
        || vq_reg(&r->dev, r->bounce, o->bounces * r->bounce_bytes, IBV_ACCESS_LOCAL_WRITE,
                  &r->bounce_mr, "bounce", &err)
        || vq_reg(&r->dev, r->out, o->sq_depth * r->bounce_bytes, 0, &r->out_mr, "out", &err)
        || vq_reg(&r->dev, r->credit, 8, IBV_ACCESS_REMOTE_READ, &r->credit_mr, "credit", &err)
        || vq_reg(&r->dev, r->peer_credit, 8, IBV_ACCESS_LOCAL_WRITE, &r->peer_credit_mr,
                  "peer_credit", &err))
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
    /* both ranks must run the same plan: the settings travel with the queue pair's address,
     * and so does the credit region the peer READs when it runs out of credits */
    static const char *const NAMES[7] = {"rank", "eager_limit", "bounces", "max_msg",
                                         "sq_depth", "rounds", "sizes"};
    uint64_t mine[N_SETTINGS] = {(uint64_t)o->ep.rank, o->eager_limit, o->bounces, o->max_msg,
                                 o->sq_depth, o->rounds, o->nsizes};
    for (uint64_t i = 0; i < o->nsizes; i++)
        mine[7 + i] = o->sizes[i];
    uint8_t out[8 * N_SETTINGS + 16], in[8 * N_SETTINGS + 16];
    for (int i = 0; i < N_SETTINGS; i++)
        vc_put_le(out + 8 * i, mine[i], 8);
    vc_put_le(out + 8 * N_SETTINGS, (uintptr_t)r->credit, 8);
    vc_put_le(out + 8 * N_SETTINGS + 8, r->credit_mr->rkey, 8);
    vq_addr local, remote;
    vq_local_addr(&r->dev, &local);
    if (vq_exchange(r->fd, &local, &remote, out, in, sizeof out, o->ep.connect_timeout_ms, &err))
        return fail(r, "%s", err.text);
    if (get_le(in, 8) != (uint64_t)r->peer)
        return fail(r, "the peer is rank %" PRIu64 ", and so is this rank", get_le(in, 8));
    for (int i = 1; i < N_SETTINGS; i++)
        if (get_le(in + 8 * i, 8) != mine[i]) {
            if (i < 7)
                return fail(r, "the peer runs with %s %" PRIu64 ", this rank with %" PRIu64,
                            NAMES[i], get_le(in + 8 * i, 8), mine[i]);
            return fail(r, "the peer runs with size %d = %" PRIu64 ", this rank with %" PRIu64,
                        i - 7 + 1, get_le(in + 8 * i, 8), mine[i]);
        }
    r->peer_credit_addr = get_le(in + 8 * N_SETTINGS, 8);
    r->peer_credit_rkey = (uint32_t)get_le(in + 8 * N_SETTINGS + 8, 8);
    if (vq_connect(&r->dev, &remote, 0, &err))
        return fail(r, "%s", err.text);
    if (o->ep.trace) {
        r->trace = fopen(o->ep.trace, "w");
        if (r->trace == NULL)
            return fail(r, "cannot write the trace %s: %s", o->ep.trace, strerror(errno));
        fprintf(r->trace, "{\"ev\": \"begin\", \"protocol\": \"tagged\", \"rank\": %d, "
                "\"transport\": \"verbs-c\", \"engine\": \"native\", \"config\": "
                "{\"eager_limit\": %" PRIu64 ", \"bounces\": %" PRIu64 ", \"max_msg\": %" PRIu64
                ", \"sq_depth\": %" PRIu64 ", \"timeout_ms\": %d}}\n", o->ep.rank, o->eager_limit,
                o->bounces, o->max_msg, o->sq_depth, o->timeout_ms);
    }
    /* the bounce buffers, then the hello: once the peer's hello is read, its buffers are
     * posted and this rank may send */
    if (r->trace) {
        fputs("{\"ev\": \"post_recv\", \"wrs\": [", r->trace);
        for (uint64_t i = 0; i < o->bounces; i++)
            fprintf(r->trace, "%s[%" PRIu64 ", \"bounce\", %" PRIu64 ", %" PRIu64 "]",
                    i ? ", " : "", i, i * r->bounce_bytes, r->bounce_bytes);
        fputs("]}\n", r->trace);
    }
    for (uint64_t i = 0; i < o->bounces; i++)
        if (post_bounce(r, i, 0))
            return -1;
    uint8_t hello[HELLO_BYTES] = {0}, theirs[HELLO_BYTES];
    vc_put_le(hello, HELLO_MAGIC, 4);
    vc_put_le(hello + 4, VERSION, 4);
    vc_put_le(hello + 8, (uint64_t)o->ep.rank, 4);
    vc_put_le(hello + 12, o->eager_limit, 4);
    vc_put_le(hello + 16, o->bounces, 4);
    vc_put_le(hello + 20, o->max_msg, 4);
    if (r->trace)
        trace_hex(r, "tcp_write", hello, sizeof hello);
    if (write_side(r, hello, sizeof hello, "the hello")
        || read_side(r, theirs, sizeof theirs, "its hello"))
        return -1;
    if (r->trace)
        trace_hex(r, "tcp_read", theirs, sizeof theirs);
    if (get_le(theirs, 4) != HELLO_MAGIC || get_le(theirs + 4, 4) != VERSION
        || get_le(theirs + 8, 4) != (uint64_t)r->peer)
        return fail(r, "hello from rank %d: not a tagged endpoint's hello (magic 0x%08" PRIx64
                    ", version %" PRIu64 ", rank %" PRIu64 ")", r->peer, get_le(theirs, 4),
                    get_le(theirs + 4, 4), get_le(theirs + 8, 4));
    return 0;
}

static void teardown(rank_t *r)
{
    if (r->trace) {
        fputs("{\"ev\": \"end\"}\n", r->trace);
        fclose(r->trace);
    }
    /* teardown failures are reported; the run's outcome stands */
    struct ibv_mr *mrs[4] = {r->bounce_mr, r->out_mr, r->credit_mr, r->peer_credit_mr};
    for (int i = 0; i < 4; i++) {
        int code = mrs[i] ? ibv_dereg_mr(mrs[i]) : 0;
        if (code)
            fprintf(stderr, "verbs_tagmatch rank %d: ibv_dereg_mr failed: %s (errno %d)\n",
                    r->o.ep.rank, strerror(code), code);
    }
    for (uint64_t i = 0; i < r->nsends; i++) {
        if (r->sends[i].mr)
            ibv_dereg_mr(r->sends[i].mr);
        free(r->sends[i].buf);
    }
    for (uint64_t i = 0; i < r->nrecvs; i++) {
        if (r->recvs[i].mr)
            ibv_dereg_mr(r->recvs[i].mr);
        free(r->recvs[i].buf);
    }
    for (uint64_t i = 0; i < r->narrivals; i++)
        free(r->arrivals[i].data);
    vq_err err;
    if (vq_close(&r->dev, &err))
        fprintf(stderr, "verbs_tagmatch rank %d: %s\n", r->o.ep.rank, err.text);
    if (r->fd > 0)
        close(r->fd);
    free(r->bounce);
    free(r->out);
    free(r->credit);
    free(r->peer_credit);
    free(r->backlog);
    free(r->reads);
    free(r->free_slots);
    free(r->slot_item);
    free(r->sends);
    free(r->recvs);
    free(r->arrivals);
    if (r->e)
        vs_tag_destroy(r->e);
}

/* ------------------------------------------------------------------ output */
static void print_json(rank_t *r)
{
    printf("{\"rank\": %d, \"device\": ", r->o.ep.rank);
    vc_json_text(stdout, r->o.ep.device);
    printf(", \"transport\": \"verbs-c\", \"messages\": %" PRIu64 ", \"eager\": %" PRIu64
           ", \"rendezvous\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"verified\": %" PRIu64
           ", \"mismatches\": %" PRIu64 ", \"credit_reads\": %" PRIu64 ", \"mib_per_s\": %.2f"
           ", \"wall_s\": %.3f, \"ok\": %s, \"error\": ", r->received, r->eager, r->rendezvous,
           r->bytes, r->verified, r->mismatches, r->credit_reads,
           r->tagged_seconds > 0 ? (double)r->bytes / r->tagged_seconds / 1048576.0 : 0,
           r->wall_seconds, r->error[0] ? "false" : "true");
    vc_json_text(stdout, r->error);
    printf("}\n");
}

/* ------------------------------------------------------------------ arguments */
static const char USAGE[] =
    "usage: verbs_tagmatch --rank 0|1 --device DEV (--listen PORT | --peer HOST:PORT)\n"
    "  [--gid-index I (0)] [--ib-port P (1)] [--rounds N (3)]\n"
    "  [--sizes B,B,... (64,4096,262144,1048576)] [--eager-limit B (8192)] [--bounces N (32)]\n"
    "  [--max-msg B (65536)] [--sq-depth N (64)] [--timeout-ms T (5000)]\n"
    "  [--side-timeout-ms T (30000)] [--connect-timeout-ms T (60000)] [--exit-after N]\n"
    "  [--json] [--trace FILE]\n";

static int parse_sizes(const char *text, options *o)
{
    char item[32];
    o->nsizes = 0;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (o->nsizes == MAX_SIZES || len == 0 || len >= sizeof item) {
            fprintf(stderr, "verbs_tagmatch: --sizes: expected 1 to %d byte counts separated by "
                    "commas, got '%s'\n%s", MAX_SIZES, text, USAGE);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (vc_number("verbs_tagmatch", USAGE, "--sizes", item, 8, UINT64_C(1) << 30,
                      &o->sizes[o->nsizes]))
            return -1;
        if (o->sizes[o->nsizes++] % 8) {
            fprintf(stderr, "verbs_tagmatch: --sizes: %s is not a multiple of 8 (the payload "
                    "pattern is written in 8-byte words)\n", item);
            return -1;
        }
        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){.ep = vc_endpoint_defaults(), .rounds = 3, .nsizes = 4,
                   .sizes = {64, 4096, 262144, 1048576}, .eager_limit = 8192, .bounces = 32,
                   .max_msg = 65536, .sq_depth = 64, .timeout_ms = 5000, .exit_after = -1};
    for (int i = 1; i < argc; i++) {
        const char *a, *v;
        int got = vc_option("verbs_tagmatch", USAGE, argc, argv, &i, &a, &v, &o->ep);
        if (got < 0)
            return -1;
        if (got == 0)
            continue;
        uint64_t n;
        if (strcmp(a, "--rounds") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 1, 1000, &o->rounds))
                return -1;
        } else if (strcmp(a, "--sizes") == 0) {
            if (parse_sizes(v, o))
                return -1;
        } else if (strcmp(a, "--eager-limit") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 0, UINT64_C(1) << 30, &o->eager_limit))
                return -1;
        } else if (strcmp(a, "--bounces") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 1, 32768, &o->bounces))
                return -1;
        } else if (strcmp(a, "--max-msg") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 64, UINT64_C(1) << 30, &o->max_msg))
                return -1;
        } else if (strcmp(a, "--sq-depth") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 2, 32768, &o->sq_depth))
                return -1;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 1, 600000, &n))
                return -1;
            o->timeout_ms = (int)n;
        } else if (strcmp(a, "--exit-after") == 0) {
            if (vc_number("verbs_tagmatch", USAGE, a, v, 0, 100000, &n))
                return -1;
            o->exit_after = (int64_t)n;
        } else {
            fprintf(stderr, "verbs_tagmatch: unknown option %s\n%s", a, USAGE);
            return -1;
        }
    }
    if (vc_endpoint_check("verbs_tagmatch", USAGE, &o->ep))
        return -1;
    if (HDR_BYTES + o->eager_limit > o->max_msg) {
        fprintf(stderr, "verbs_tagmatch: --eager-limit %" PRIu64 ": a %u-byte header and the "
                "eager payload must fit --max-msg %" PRIu64 "\n", o->eager_limit, HDR_BYTES,
                o->max_msg);
        return -1;
    }
    /* the tag engine numbers messages in int32: rounds * 3 * sizes per rank, two ranks */
    if (o->rounds * 3 * o->nsizes > 100000) {
        fprintf(stderr, "verbs_tagmatch: --rounds %" PRIu64 " with %" PRIu64 " sizes is more "
                "than 100000 messages per rank\n", o->rounds, o->nsizes);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    rank_t *r = calloc(1, sizeof *r);
    if (r == NULL) {
        fputs("verbs_tagmatch: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    if (parse(argc, argv, &r->o)) {
        free(r);
        return EXIT_USAGE;
    }
    double t0 = vc_now_s();
    int rc = setup(r);
    if (rc == 0)
        leave_if_asked(r);
    if (rc == 0)
        rc = workload(r);
    if (rc == 0)
        rc = finish(r);
    r->wall_seconds = vc_now_s() - t0;
    if (r->error[0])
        fprintf(stderr, "verbs_tagmatch rank %d: %s\n", r->o.ep.rank, r->error);
    if (r->o.ep.json)
        print_json(r);
    teardown(r);
    free(r);
    return rc ? EXIT_FAILED : 0;
}
