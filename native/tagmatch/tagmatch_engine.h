/* The tag-matching engine in C: the endpoints of one tag-matching job (its senders and the
 * receiver, with the receiver's NIC when tag matching is offloaded), sans I/O.
 *
 * The same machine as refimpl/engines/tagmatch_engine.py's TagMatchEngine: each call is one
 * protocol step. It returns VS_TAG_OK, or VS_TAG_REFUSED with the engine unchanged and the reason
 * readable by vs_tag_error (the reference engine's EngineError text), or VS_TAG_NOMEM with the
 * engine unchanged. What the step emitted is in vs_tag_emitted(engine), valid until the next
 * call; vs_tag_get_view fills the abstract state the conformance harness compares.
 *
 * Matching keeps MPI order in O(1) expected time per operation under any mix of wildcards:
 * posted receives and unexpected messages hang from fixed bucket tables, one per structure and
 * wildcard kind, sized when the engine is created; an arriving message looks at the first
 * entry it matches in at most four buckets, a receive or probe in one. Only the array of
 * receive records grows (by doubling, when a job posts more receives than ever before); once
 * it has grown, no call allocates, and vs_tag_reset keeps it.
 *
 * One engine holds no global state: engines on different threads are independent. */
#ifndef VS_TAGMATCH_ENGINE_H
#define VS_TAGMATCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "../generated/spec_constants.h"

enum { VS_TAG_OK = 0, VS_TAG_REFUSED = 1, VS_TAG_NOMEM = 2 };

/* The spec's values (native/generated/spec_constants.h), by the names of this ABI. */
/* A wildcard source or tag in a receive or probe (MPI_ANY_SOURCE, MPI_ANY_TAG). */
enum { VS_TAG_ANY = VS_SPEC_TAGMATCH_ANY };

/* Receive status (a status >= 0 is the matched message id) and completion codes. */
enum { VS_TAG_PENDING = VS_SPEC_TAGMATCH_PENDING, VS_TAG_CANCELLED = VS_SPEC_TAGMATCH_CANCELLED };
enum { VS_TAG_DONE_OK = VS_SPEC_TAGMATCH_DONE_OK, VS_TAG_TRUNCATED = VS_SPEC_TAGMATCH_TRUNCATED };

/* Message kinds (named by VS_SPEC_TAGMATCH_KIND_NAMES), and the rendezvous stage of a message
 * (FIN_EARLY is the stage of the spec's fin-before-read variant, which no step of this engine
 * enters). */
enum { VS_TAG_EAGER = 0, VS_TAG_RNDV = 1 };
enum {
    VS_TAG_IDLE = VS_SPEC_TAGMATCH_STAGE_IDLE, VS_TAG_NEED_READ = VS_SPEC_TAGMATCH_STAGE_NEED_READ,
    VS_TAG_READING = VS_SPEC_TAGMATCH_STAGE_READING,
    VS_TAG_READ_DONE = VS_SPEC_TAGMATCH_STAGE_READ_DONE,
    VS_TAG_FIN_SENT = VS_SPEC_TAGMATCH_STAGE_FIN_SENT,
    VS_TAG_FIN_EARLY = VS_SPEC_TAGMATCH_STAGE_FIN_EARLY
};

/* Offload: where a pending receive lives; the ops software sends the NIC and the NIC's
 * completions (named by VS_SPEC_TAGMATCH_OP_NAMES and _CQE_NAMES). */
enum { VS_TAG_SW = VS_SPEC_TAGMATCH_SW, VS_TAG_HW = VS_SPEC_TAGMATCH_HW,
       VS_TAG_HW_CANCEL = VS_SPEC_TAGMATCH_HW_CANCEL };
enum { VS_TAG_OP_ADD = 0, VS_TAG_OP_REMOVE = 1, VS_TAG_OP_SYNC = 2 };
enum { VS_TAG_CQE_MATCH = 0, VS_TAG_CQE_UNEXPECTED = 1, VS_TAG_CQE_REMOVED = 2 };

/* The argument index vs_tag_error_arg reports when the refused value is a whole packet. */
enum { VS_TAG_ARG_PACKET = -2 };

typedef struct {
    int32_t senders, messages;      /* message id = sender * messages + k */
    int32_t tags, comms;            /* tags and communicators are 0..n-1 */
    int32_t max_bytes, eager_limit; /* lengths 1..max_bytes; eager up to eager_limit */
    int32_t capacity;               /* the NIC's list of receives; 0: no offload */
} vs_tag_config;

typedef struct { int32_t mid, comm, src, tag, nbytes, kind; } vs_tag_packet;
typedef struct { int32_t rid, mid; } vs_tag_pair;
typedef struct { int32_t rid, code; } vs_tag_completion;
typedef struct { int32_t mid, rid, length; } vs_tag_read;

/* What one call emitted. A step emits at most one item of each kind; the arrays leave room.
 * Every field is an int32_t, so a binding can read the whole record as one int32 array. */
#define VS_TAG_OUT_MAX 4
enum {
    VS_TAG_OUT_SENDS = 1, VS_TAG_OUT_MATCHES = 2, VS_TAG_OUT_REVOKED = 4,
    VS_TAG_OUT_CANCELLED = 8, VS_TAG_OUT_COMPLETIONS = 16, VS_TAG_OUT_READS = 32,
    VS_TAG_OUT_FINS = 64, VS_TAG_OUT_RELEASED = 128, VS_TAG_OUT_PROBE = 256
};
typedef struct {
    int32_t kinds;                  /* VS_TAG_OUT_* bits: the fields that are not empty */
    /* the counts, together (a call starts by zeroing them at once) */
    int32_t nsends, nmatches;
    int32_t nrevoked;               /* matches undone by a NIC match of a claimed receive */
    int32_t ncancelled, ncompletions, nreads, nfins;
    int32_t nreleased;              /* mids whose sender buffer is free again */
    int32_t nprobe;                 /* 1 after a probe */
    int32_t probe;                  /* the probe's answer: a mid, or -1 for none */
    vs_tag_packet sends[VS_TAG_OUT_MAX];
    vs_tag_pair matches[VS_TAG_OUT_MAX];
    vs_tag_pair revoked[VS_TAG_OUT_MAX];
    int32_t cancelled[VS_TAG_OUT_MAX];
    vs_tag_completion completions[VS_TAG_OUT_MAX];
    vs_tag_read reads[VS_TAG_OUT_MAX];
    int32_t fins[VS_TAG_OUT_MAX];
    int32_t released[VS_TAG_OUT_MAX];
} vs_tag_out;

typedef struct { int32_t rid, mid, cancelling; } vs_tag_claim;
typedef struct { int32_t kind; int64_t count; int32_t rid; } vs_tag_op;      /* rid -1: none */
typedef struct { int32_t kind, rid, mid, ok; } vs_tag_cqe;                   /* -1: none */

/* The abstract state: pointers into engine-owned arrays, valid until the next call. */
typedef struct {
    int32_t nrecvs;
    const int32_t *status;          /* by rid */
    const int32_t *completion;      /* by rid */
    int32_t nmsgs;
    const int32_t *stage;           /* by mid */
    const bool *released;           /* by mid */
    int32_t nposted;
    const int32_t *posted;          /* pending rids, posted order */
    const int32_t *where;           /* offload: each pending receive's location */
    int32_t nunexpected;
    const int32_t *unexpected;      /* unexpected mids, arrival order */
    int32_t offload;
    int32_t nhw;
    const int32_t *hw;              /* rids the NIC lists, in its order */
    int32_t nclaims;
    const vs_tag_claim *claims;     /* in the order they were made */
    int32_t nops;
    const vs_tag_op *ops;           /* oldest first */
    int32_t ncq;
    const vs_tag_cqe *cq;           /* oldest first */
    int64_t sw_count, sent_count, reported, synced;
} vs_tag_view;

typedef struct vs_tag vs_tag;

/* A new engine (VS_TAG_REFUSED: a configuration value out of range). */
int vs_tag_create(const vs_tag_config *cfg, vs_tag **out);
/* An independent copy of an engine in its current state. */
int vs_tag_clone(const vs_tag *e, vs_tag **out);
void vs_tag_destroy(vs_tag *e);
/* Empty the engine as vs_tag_create left it, keeping the memory it has grown: a job that
 * starts again on a reset engine allocates nothing until it outgrows the last one. */
void vs_tag_reset(vs_tag *e);

/* The last refusal's message ("" after a call that was not refused), and the index of the
 * argument it refused (-1: none; VS_TAG_ARG_PACKET: the delivered packet as a whole). */
const char *vs_tag_error(const vs_tag *e);
int vs_tag_error_arg(const vs_tag *e);

/* The engine's output record: one address for the engine's life, holding what the last call
 * emitted. */
const vs_tag_out *vs_tag_emitted(const vs_tag *e);
int vs_tag_get_view(vs_tag *e, vs_tag_view *out);

/* The senders. */
int vs_tag_send(vs_tag *e, int64_t sender, int64_t comm, int64_t tag, int64_t nbytes);
int vs_tag_fin(vs_tag *e, int64_t mid);

/* The receiver: a packet from the wire, receives, cancels, probes. */
int vs_tag_delivered(vs_tag *e, int64_t mid, int64_t comm, int64_t src, int64_t tag,
                     int64_t nbytes, int64_t kind);
int vs_tag_post_recv(vs_tag *e, int64_t comm, int64_t src, int64_t tag, int64_t nbytes);
int vs_tag_cancel(vs_tag *e, int64_t rid);
int vs_tag_probe(vs_tag *e, int64_t comm, int64_t src, int64_t tag);

/* Rendezvous. */
int vs_tag_start_read(vs_tag *e, int64_t mid);
int vs_tag_read_done(vs_tag *e, int64_t mid);
int vs_tag_send_fin(vs_tag *e, int64_t mid);

/* Offload: the NIC executes an op; software handles a completion; software syncs its count. */
int vs_tag_hw_op(vs_tag *e);
int vs_tag_sw_complete(vs_tag *e);
int vs_tag_sw_sync(vs_tag *e);

#endif
