/* UCX's tag matching driven one call at a time, for the tag-matching conformance adapter
 * (refimpl/bindings/ucx_tagmatch.py). One vs_ucx is one UCX context and worker with an endpoint to
 * itself per sender over the self transport: a send on sender k's endpoint reaches the same
 * worker's tag matching within the call, so the order of sends is the order of arrivals.
 *
 * An MPI envelope maps to a 64-bit UCX tag as MPI libraries over UCX do it: the communicator
 * in the top bits, the source below, the tag at the bottom; ANY_SOURCE (-1) and ANY_TAG (-1)
 * clear the field's bits in the receive's mask. Every call returns VS_UCX_OK or an error
 * (VS_UCX_INVALID: bad input; VS_UCX_FAILED: UCX refused or misbehaved; VS_UCX_NOMEM) with
 * its text in vs_ucx_error. */

#ifndef VS_UCX_TAG_SHIM_H
#define VS_UCX_TAG_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define VS_UCX_OK 0
#define VS_UCX_INVALID 1
#define VS_UCX_FAILED 2
#define VS_UCX_NOMEM 3

#define VS_UCX_ANY -1
#define VS_UCX_COMM_BITS 20
#define VS_UCX_SRC_BITS 20
#define VS_UCX_TAG_BITS 24

/* how a receive ended (vs_ucx_event.status) */
#define VS_UCX_DONE 0          /* the message fit in the buffer */
#define VS_UCX_TRUNCATED 1     /* UCS_ERR_MESSAGE_TRUNCATED */
#define VS_UCX_CANCELED 2      /* UCS_ERR_CANCELED */

/* planted faults, for the tests that show a wrong matcher is caught */
#define VS_UCX_FAULT_NONE 0
#define VS_UCX_FAULT_SOURCE_BIT 1   /* a receive's mask ignores the source's lowest bit */

typedef struct vs_ucx vs_ucx;

typedef struct {
    int senders;          /* endpoints to self, one per sender */
    int fault;            /* VS_UCX_FAULT_*: VS_UCX_FAULT_NONE but in tests */
} vs_ucx_config;

/* a receive that completed, or the message a probe found */
typedef struct {
    int slot;             /* the receive's index in posting order (a probe: -1) */
    int status;           /* VS_UCX_DONE, VS_UCX_TRUNCATED or VS_UCX_CANCELED */
    int comm, src, tag;   /* the message's envelope, decoded from its UCX tag */
    size_t length;        /* the message's length in bytes */
    int fill;             /* the byte every received byte equals; -1 if they differ or
                             none arrived */
} vs_ucx_event;

int vs_ucx_open(const vs_ucx_config *config, vs_ucx **out, char *err, size_t len);
void vs_ucx_close(vs_ucx *u);
const char *vs_ucx_error(const vs_ucx *u);

/* back to a worker with nothing posted and nothing unexpected: every pending receive is
 * cancelled, every unexpected message received and dropped; slots start again at 0 */
int vs_ucx_reset(vs_ucx *u);

/* post a receive of `length` bytes (src, tag: VS_UCX_ANY for a wildcard); its slot is the
 * number of receives posted before it since the last reset */
int vs_ucx_post(vs_ucx *u, int comm, int src, int tag, size_t length, int *slot);

/* send `length` bytes, each equal to `fill`, on sender `src`'s endpoint, and progress the
 * worker until UCX has completed the send; *status is its UCS status (0: UCS_OK) */
int vs_ucx_send(vs_ucx *u, int comm, int src, int tag, size_t length, int fill,
                int *status);

/* ucp_request_cancel of receive `slot`; a completed receive is left as it is */
int vs_ucx_cancel(vs_ucx *u, int slot);

/* ucp_tag_probe_nb without removing: *found 1 and the message in *msg, or *found 0 */
int vs_ucx_probe(vs_ucx *u, int comm, int src, int tag, int *found, vs_ucx_event *msg);

/* the receives that completed since the last call, in slot order, at most `max` */
int vs_ucx_poll(vs_ucx *u, vs_ucx_event *events, int max, int *n);

#endif
