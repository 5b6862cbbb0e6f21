/* The gate engine: one rank of ds4's gate window protocol as a sans-I/O state machine.
 *
 * The engine never touches a queue pair or a socket. Each call is one protocol step: an
 * application call (call_gate, call_big, call_block, consume), an input (tcp_read,
 * completions, timeout, peer_closed, post_failed, poll_failed) or a step of its own
 * (advance). What the rank does in that step (receive and send work requests to post, TCP
 * items to write, the call's result text, log lines) is left
 * in the engine's emitted record, read after the call and cleared at the start of the next.
 *
 * Every call returns VS_GATE_OK or VS_GATE_REFUSED: a refusal is a call the engine cannot take
 * in its phase (a driver bug, not a protocol verdict); vs_gate_refusal() says why. A protocol
 * failure (a bad barrier byte, an error completion, a timeout) is not a refusal: the call
 * succeeds, the rank enters VS_GATE_FAILED and the emitted result carries ds4's text.
 *
 * One engine is one allocation, made by vs_gate_create; no call after it allocates.
 */
#ifndef VS_GATE_ENGINE_H
#define VS_GATE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../generated/spec_constants.h"

/* Phases of a rank: the protocol step it takes next. */
typedef enum {
    VS_GATE_INIT,
    VS_GATE_IDLE,
    VS_GATE_HOLD,
    VS_GATE_ARM_POST,
    VS_GATE_ARM_BAR_SEND,
    VS_GATE_ARM_BAR_READ,
    VS_GATE_SEND,
    VS_GATE_WAIT,
    VS_GATE_DRAIN_POST,
    VS_GATE_DRAIN_WAIT,
    VS_GATE_BIG_HDR_SEND,
    VS_GATE_BIG_HDR_READ,
    VS_GATE_BIG_BEGIN,
    VS_GATE_BIG_POST,
    VS_GATE_BIG_BAR_SEND,
    VS_GATE_BIG_BAR_READ,
    VS_GATE_BIG_XFER,
    VS_GATE_BLOCK_HDR_SEND,
    VS_GATE_BLOCK_HDR_READ,
    VS_GATE_BLOCK_POST,
    VS_GATE_BLOCK_BAR_SEND,
    VS_GATE_BLOCK_BAR_READ,
    VS_GATE_BLOCK_SEND,
    VS_GATE_BLOCK_WAIT,
    VS_GATE_BLOCK_END,
    VS_GATE_BATCH_HDR_SEND,
    VS_GATE_BATCH_HDR_READ,
    VS_GATE_FAILED,
    VS_GATE_CRASHED,
    VS_GATE_N_PHASES
} vs_gate_phase;

/* What a driver does next (vs_gate_next_step). */
typedef enum {
    VS_GATE_STEP_SETUP,     /* call vs_gate_setup */
    VS_GATE_STEP_CALL,      /* the application's turn: a gate, a big gate, a verify block, or
                               consume */
    VS_GATE_STEP_ADVANCE,   /* the engine has a step of its own: vs_gate_advance */
    VS_GATE_STEP_READ,      /* read one TCP item: vs_gate_tcp_read (or peer_closed) */
    VS_GATE_STEP_POLL,      /* poll completions, watching the deadline and the peer */
    VS_GATE_STEP_DEAD       /* failed or crashed: vs_gate_error says why */
} vs_gate_step;

/* Registered regions a work request addresses. */
typedef enum {
    VS_GATE_BUF_IN,     /* gate in-slots: one vector stride per slot */
    VS_GATE_BUF_OUT,    /* gate out-slots: the same strides */
    VS_GATE_BUF_STAGE,  /* big-gate staging (and the drain's dummies): one message per chunk */
    VS_GATE_BUF_BLK,    /* verify-block rows received: one vector stride per row */
    VS_GATE_BUF_BOUT,   /* verify-block rows sent: the same strides */
    VS_GATE_N_BUFS
} vs_gate_buf;

/* Return codes. */
#define VS_GATE_OK 0
#define VS_GATE_REFUSED 1

/* The spec's constants (native/generated/spec_constants.h), by the names of this ABI. */
/* wr_id tag bits: gate receives and sends carry bare sequence numbers. */
#define VS_GATE_TAG_BULK VS_SPEC_GATE_TAG_BULK  /* drain dummies, big-gate chunks: BULK | i */
#define VS_GATE_TAG_WARM VS_SPEC_GATE_TAG_WARM  /* warm-up exchanges at setup */
#define VS_GATE_TAG_BLOCK VS_SPEC_GATE_TAG_BLOCK    /* verify-block rows: BLOCK | (row + 1)
                                                       received, BLOCK | 1 sent */
#define VS_GATE_TAG_MASK VS_SPEC_GATE_TAG_MASK  /* BULK | WARM */

#define VS_GATE_WINDOW_BARRIER VS_SPEC_GATE_WINDOW_BARRIER  /* the byte that arms the decode
                                                               window */
#define VS_GATE_BLOCK_BARRIER VS_SPEC_GATE_BLOCK_BARRIER    /* ... and a verify block's
                                                               receives */
#define VS_GATE_BIG_MAGIC VS_SPEC_GATE_BIG_MAGIC            /* a big-gate header's tag field */
#define VS_GATE_HEADER_MAGIC VS_SPEC_GATE_HEADER_MAGIC      /* "DS4B" */
#define VS_GATE_BIG_LAYER VS_SPEC_GATE_BIG_LAYER            /* big gates name no layer */
#define VS_GATE_WC_SUCCESS VS_SPEC_GATE_WC_SUCCESS          /* IBV_WC_SUCCESS */
#define VS_GATE_DECODE_POLL VS_SPEC_GATE_POLL_BATCH         /* ibv_wc entries per poll: a
                                                               decode or verify-block wait */
#define VS_GATE_BIG_POLL VS_SPEC_GATE_BIG_POLL_BATCH        /* ... a big-gate window's */
#define VS_GATE_DRAIN_POLL(window) VS_SPEC_GATE_DRAIN_POLL_BATCH(window) /* ... a drain's */
#define VS_GATE_MAX_BIG_DEPTH VS_SPEC_GATE_BIG_DEPTH_MAX    /* the cap on a big-gate window */
#define VS_GATE_MAX_WINDOW VS_SPEC_GATE_WINDOW_MAX          /* the deepest receive queue
                                                               targeted */

#define VS_GATE_TEXT 256                        /* bytes of a result, error or refusal text */

/* The protocol's parameters (ds4's constants by default); the engine derives the rest. */
typedef struct {
    uint64_t vec_bytes;         /* bytes of one gate vector (at most 2 * max_msg) */
    uint64_t max_msg;           /* driver message cap: a vector rides as 1 or 2 chunks */
    uint64_t window;            /* gates of receive lookahead */
    uint64_t gates_per_token;   /* 0: slots cycle through n_slots */
    uint64_t n_slots;           /* slots in the registered slab */
    uint64_t slot_start;        /* identity schedule: first slot */
    uint64_t slot_step;         /* identity schedule: slot stride */
    uint64_t slot_mask;         /* mask schedule: the ordinal-th set bit (0: identity) */
    uint64_t rq_depth;          /* granted receive queue depth */
    uint64_t sq_depth;          /* granted send queue depth */
    uint64_t big_depth;         /* cap on a big-gate window (1..256) */
    uint64_t chain_max;         /* longest chain of work requests posted at once */
    uint64_t staging_bytes;     /* big-gate staging area */
    uint64_t big_last_bytes;    /* a big gate's last chunk, its remainder (0: a whole message) */
    uint64_t block_layers;      /* layers of a verify block (both 0: no verify blocks) */
    uint64_t block_rows;        /* rows of a layer's batch gate, one vector each */
    uint64_t verify_window_off; /* 1: DS4_TP_DISABLE_VERIFY_WINDOW is set: a verify block's
                                   layers are batch gates (a header, the drain, a big-gate
                                   transfer of the layer's rows) */
} vs_gate_config;

typedef struct {
    uint64_t wr_id;
    uint64_t offset;            /* bytes into the region */
    uint64_t length;
    int32_t buf;                /* vs_gate_buf */
    int32_t signaled;
} vs_gate_wr;

#define VS_GATE_TCP_BYTE 0
#define VS_GATE_TCP_HEADER 1
#define VS_GATE_TCP_BLOCK 2
#define VS_GATE_TCP_BATCH 3

/* One write on the TCP side channel: a barrier byte, a big-gate, verify-block or batch
 * header. */
typedef struct {
    int32_t kind;               /* VS_GATE_TCP_BYTE | _HEADER | _BLOCK | _BATCH */
    uint64_t value;             /* the byte, the header's big-gate number, the block's layers,
                                   or the batch gate's layer */
    uint64_t chunks;            /* header: chunks of the big gate; block, batch: rows per layer */
    uint64_t depth;             /* header: the sender's granted receive depth; batch: its seq */
} vs_gate_tcp;

#define VS_GATE_OP_SEND 0
#define VS_GATE_OP_RECV 1

/* One entry a poll returned, as ibv_wc gives it. */
typedef struct {
    int32_t opcode;             /* VS_GATE_OP_SEND | VS_GATE_OP_RECV */
    int32_t status;             /* ibv_wc_status */
    uint64_t wr_id;
    uint64_t byte_len;
} vs_gate_completion;

/* What the last call emitted. */
typedef struct {
    const vs_gate_wr *recvs;
    size_t n_recvs;
    const vs_gate_wr *sends;
    size_t n_sends;
    vs_gate_tcp tcp_out[1];
    size_t n_tcp;
    char result[VS_GATE_TEXT];  /* ds4's text when the call failed the rank, else "" */
    char log[1][VS_GATE_TEXT];
    size_t n_log;
} vs_gate_emitted;

/* The rank's abstract state in the spec's vocabulary. */
typedef struct {
    int32_t phase;              /* vs_gate_phase */
    uint64_t recv_done;         /* the receive watermark */
    uint64_t last_gate_seq;
    int32_t window_active;
    int64_t send_outstanding;
    const char *error;          /* "" while live; the failure's text; "crashed" */
} vs_gate_view;

typedef struct vs_gate vs_gate;

/* A rank with configuration cfg, telling its peer the receive depth grant (0: cfg->rq_depth).
 * On VS_GATE_REFUSED (a configuration the protocol refuses, or no memory) *out is NULL and
 * err (if not NULL) holds why. */
int vs_gate_create(const vs_gate_config *cfg, uint64_t grant, vs_gate **out, char *err,
                   size_t err_len);
/* An independent copy of e in its current state (NULL when out of memory). */
vs_gate *vs_gate_clone(const vs_gate *e);
void vs_gate_destroy(vs_gate *e);

/* Application calls. */
int vs_gate_setup(vs_gate *e);
/* Setup with the peer's hello: a peer built with another window or max_msg is refused. */
int vs_gate_setup_hello(vs_gate *e, uint64_t peer_window, uint64_t peer_max_msg);
int vs_gate_call_gate(vs_gate *e, uint64_t layer, uint64_t gate, uint64_t seq);
int vs_gate_call_big(vs_gate *e, uint64_t chunks);
/* ds4_tp_batch_block_begin: a verify block of cfg.block_layers x cfg.block_rows. */
int vs_gate_call_block(vs_gate *e);
int vs_gate_consume(vs_gate *e);
/* The rank's next step of its own. */
int vs_gate_advance(vs_gate *e);
/* Inputs. */
int vs_gate_tcp_read(vs_gate *e, const vs_gate_tcp *item);
int vs_gate_poll_size(vs_gate *e, uint32_t *size);
int vs_gate_completions(vs_gate *e, const vs_gate_completion *polled, size_t n);
int vs_gate_timeout(vs_gate *e);
int vs_gate_peer_closed(vs_gate *e);
/* The driver's post of what the last vs_gate_advance emitted was refused (ibv_post_recv or
 * ibv_post_send failed) once posted of its work requests, receives first, were up: those stay
 * posted, the rest of that step is undone, and the rank fails with ds4's text for the refused
 * call. Refused when the engine's last step of its own posted nothing, or its post already
 * failed. */
int vs_gate_post_failed(vs_gate *e, uint64_t posted);
/* ibv_poll_cq returned an error in a wait (a phase vs_gate_poll_size takes). */
int vs_gate_poll_failed(vs_gate *e);
int vs_gate_crash(vs_gate *e);

/* Reading the engine. */
const vs_gate_emitted *vs_gate_out(const vs_gate *e);
void vs_gate_get_view(const vs_gate *e, vs_gate_view *view);
int32_t vs_gate_phase_of(const vs_gate *e);
vs_gate_step vs_gate_next_step(const vs_gate *e);
uint64_t vs_gate_recv_done(const vs_gate *e);
uint64_t vs_gate_last_gate_seq(const vs_gate *e);
int32_t vs_gate_window_active(const vs_gate *e);
int64_t vs_gate_send_outstanding(const vs_gate *e);
const char *vs_gate_error(const vs_gate *e);
const char *vs_gate_refusal(const vs_gate *e);
const char *vs_gate_phase_name(int32_t phase);

#endif
