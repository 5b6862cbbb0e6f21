/* UCX's tag matching one call at a time (see ucx_tag_shim.h): the conformance adapter posts,
 * sends, cancels and probes through these calls and reads what UCX completed with
 * vs_ucx_poll. Receives always return a request (UCP_OP_ATTR_FLAG_NO_IMM_CMPL), so every
 * completion, immediate or not, is read the same way: ucp_tag_recv_request_test. */

#include "ucx_tag_shim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define SRC_SHIFT VS_UCX_TAG_BITS
#define COMM_SHIFT (VS_UCX_TAG_BITS + VS_UCX_SRC_BITS)
#define FIELD(bits) ((UINT64_C(1) << (bits)) - 1)
#define MAX_LENGTH (1u << 20)
/* progress calls a step may take before UCX is taken to have stalled */
#define MAX_SPINS 1000000

struct recv_slot {
    void *req;
    unsigned char *buf;
    size_t length;
    int reported;
};

struct vs_ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;
    int senders;
    int fault;
    struct recv_slot *slots;
    int nslots, cap;
    unsigned char *scratch;     /* send buffers and dropped messages */
    size_t scratch_len;
    char err[256];
};

static int fail(vs_ucx *u, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(u->err, sizeof u->err, fmt, ap);
    va_end(ap);
    return rc;
}

const char *vs_ucx_error(const vs_ucx *u)
{
    return u->err;
}

static ucp_tag_t encode(int comm, int src, int tag)
{
    return ((ucp_tag_t)comm << COMM_SHIFT) | ((ucp_tag_t)(src < 0 ? 0 : src) << SRC_SHIFT)
           | (ucp_tag_t)(tag < 0 ? 0 : tag);
}

static ucp_tag_t mask_of(const vs_ucx *u, int src, int tag)
{
    ucp_tag_t mask = FIELD(VS_UCX_COMM_BITS) << COMM_SHIFT;

    if (src != VS_UCX_ANY) {
        mask |= FIELD(VS_UCX_SRC_BITS) << SRC_SHIFT;
        if (u->fault == VS_UCX_FAULT_SOURCE_BIT)
            mask &= ~((ucp_tag_t)1 << SRC_SHIFT);
    }
    if (tag != VS_UCX_ANY)
        mask |= FIELD(VS_UCX_TAG_BITS);
    return mask;
}

static void decode(ucp_tag_t t, vs_ucx_event *ev)
{
    ev->comm = (int)(t >> COMM_SHIFT & FIELD(VS_UCX_COMM_BITS));
    ev->src = (int)(t >> SRC_SHIFT & FIELD(VS_UCX_SRC_BITS));
    ev->tag = (int)(t & FIELD(VS_UCX_TAG_BITS));
}

static int check_envelope(vs_ucx *u, int comm, int src, int tag, int wildcards)
{
    if (comm < 0 || (uint64_t)comm > FIELD(VS_UCX_COMM_BITS))
        return fail(u, VS_UCX_INVALID, "communicator %d is outside 0..%llu (the UCX tag's "
                    "%d communicator bits)", comm,
                    (unsigned long long)FIELD(VS_UCX_COMM_BITS), VS_UCX_COMM_BITS);
    if (!(wildcards && src == VS_UCX_ANY) && (src < 0 || (uint64_t)src > FIELD(VS_UCX_SRC_BITS)))
        return fail(u, VS_UCX_INVALID, "source %d is outside 0..%llu%s", src,
                    (unsigned long long)FIELD(VS_UCX_SRC_BITS), wildcards ? " or ANY (-1)" : "");
    if (!(wildcards && tag == VS_UCX_ANY) && (tag < 0 || (uint64_t)tag > FIELD(VS_UCX_TAG_BITS)))
        return fail(u, VS_UCX_INVALID, "tag %d is outside 0..%llu%s", tag,
                    (unsigned long long)FIELD(VS_UCX_TAG_BITS), wildcards ? " or ANY (-1)" : "");
    return VS_UCX_OK;
}

static int check_length(vs_ucx *u, size_t length)
{
    if (length < 1 || length > MAX_LENGTH)
        return fail(u, VS_UCX_INVALID, "length %zu is outside 1..%u", length, MAX_LENGTH);
    return VS_UCX_OK;
}

/* progress until the worker has nothing left to do */
static int settle(vs_ucx *u)
{
    for (int spins = 0; spins < MAX_SPINS; spins++) {
        if (ucp_worker_progress(u->worker) == 0)
            return VS_UCX_OK;
    }
    return fail(u, VS_UCX_FAILED, "UCX: the worker still progressed after %d calls", MAX_SPINS);
}

/* progress until request `req` completes; its status */
static int wait_request(vs_ucx *u, void *req, const char *what, ucs_status_t *status)
{
    for (int spins = 0; spins < MAX_SPINS; spins++) {
        *status = ucp_request_check_status(req);
        if (*status != UCS_INPROGRESS)
            return VS_UCX_OK;
        ucp_worker_progress(u->worker);
    }
    return fail(u, VS_UCX_FAILED, "UCX: the %s did not complete in %d progress calls", what,
                MAX_SPINS);
}

static int scratch(vs_ucx *u, size_t length)
{
    unsigned char *p;

    if (length <= u->scratch_len)
        return VS_UCX_OK;
    p = realloc(u->scratch, length);
    if (p == NULL)
        return fail(u, VS_UCX_NOMEM, "out of memory for a %zu-byte buffer", length);
    u->scratch = p;
    u->scratch_len = length;
    return VS_UCX_OK;
}

int vs_ucx_open(const vs_ucx_config *config, vs_ucx **out, char *err, size_t len)
{
    vs_ucx *u;
    ucp_config_t *uc = NULL;
    ucp_params_t params = {0};
    ucp_worker_params_t wparams = {0};
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    ucs_status_t st;
    const char *what;

    *out = NULL;
    if (config->senders < 1 || (uint64_t)config->senders > FIELD(VS_UCX_SRC_BITS) + 1) {
        snprintf(err, len, "senders %d is outside 1..%llu (the UCX tag's %d source bits)",
                 config->senders, (unsigned long long)FIELD(VS_UCX_SRC_BITS) + 1,
                 VS_UCX_SRC_BITS);
        return VS_UCX_INVALID;
    }
    if (config->fault != VS_UCX_FAULT_NONE && config->fault != VS_UCX_FAULT_SOURCE_BIT) {
        snprintf(err, len, "unknown fault %d", config->fault);
        return VS_UCX_INVALID;
    }
    u = calloc(1, sizeof *u);
    if (u == NULL || (u->eps = calloc((size_t)config->senders, sizeof *u->eps)) == NULL) {
        free(u);
        snprintf(err, len, "out of memory");
        return VS_UCX_NOMEM;
    }
    u->senders = config->senders;
    u->fault = config->fault;
    st = ucp_config_read(NULL, NULL, &uc);
    what = "ucp_config_read";
    if (st == UCS_OK) {
        /* the self transport only: the endpoints are the worker's own */
        st = ucp_config_modify(uc, "TLS", "self");
        what = "ucp_config_modify TLS=self";
    }
    if (st == UCS_OK) {
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = UCP_FEATURE_TAG;
        st = ucp_init(&params, uc, &u->context);
        what = "ucp_init";
    }
    if (uc != NULL)
        ucp_config_release(uc);
    if (st != UCS_OK)
        goto failed;
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(u->context, &wparams, &u->worker);
    what = "ucp_worker_create";
    if (st != UCS_OK)
        goto failed;
    st = ucp_worker_get_address(u->worker, &addr, &addr_len);
    what = "ucp_worker_get_address";
    for (int i = 0; st == UCS_OK && i < u->senders; i++) {
        ucp_ep_params_t ep = {0};

        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = addr;
        st = ucp_ep_create(u->worker, &ep, &u->eps[i]);
        what = "ucp_ep_create";
    }
    if (addr != NULL)
        ucp_worker_release_address(u->worker, addr);
    if (st != UCS_OK)
        goto failed;
    *out = u;
    return VS_UCX_OK;
failed:
    snprintf(err, len, "UCX: %s: %s", what, ucs_status_string(st));
    vs_ucx_close(u);
    return VS_UCX_FAILED;
}

static int drop_slots(vs_ucx *u)
{
    int rc = VS_UCX_OK;

    for (int i = 0; i < u->nslots; i++) {
        struct recv_slot *s = &u->slots[i];
        ucs_status_t st;

        if (ucp_request_check_status(s->req) == UCS_INPROGRESS)
            ucp_request_cancel(u->worker, s->req);
        if (rc == VS_UCX_OK)
            rc = wait_request(u, s->req, "cancel of a receive", &st);
        if (rc == VS_UCX_OK || ucp_request_check_status(s->req) != UCS_INPROGRESS)
            ucp_request_free(s->req);
        free(s->buf);
    }
    u->nslots = 0;
    return rc;
}

int vs_ucx_reset(vs_ucx *u)
{
    int rc = drop_slots(u);

    while (rc == VS_UCX_OK) {
        ucp_tag_recv_info_t info;
        ucp_request_param_t p = {0};
        ucp_tag_message_h msg = ucp_tag_probe_nb(u->worker, 0, 0, 1, &info);
        ucs_status_t st;
        void *req;

        if (msg == NULL)
            break;
        rc = scratch(u, info.length);
        if (rc != VS_UCX_OK)
            break;
        req = ucp_tag_msg_recv_nbx(u->worker, u->scratch, info.length, msg, &p);
        if (UCS_PTR_IS_ERR(req))
            return fail(u, VS_UCX_FAILED, "UCX: ucp_tag_msg_recv_nbx: %s",
                        ucs_status_string(UCS_PTR_STATUS(req)));
        if (req != NULL) {
            rc = wait_request(u, req, "receive of an unexpected message", &st);
            ucp_request_free(req);
        }
    }
    return rc == VS_UCX_OK ? settle(u) : rc;
}

void vs_ucx_close(vs_ucx *u)
{
    if (u == NULL)
        return;
    if (u->worker != NULL) {
        vs_ucx_reset(u);       /* UCX warns of unexpected messages left at destroy */
        for (int i = 0; i < u->senders; i++) {
            ucp_request_param_t p = {0};
            void *req;
            ucs_status_t st;

            if (u->eps[i] == NULL)
                continue;
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags = UCP_EP_CLOSE_FLAG_FORCE;
            req = ucp_ep_close_nbx(u->eps[i], &p);
            if (UCS_PTR_IS_PTR(req)) {
                wait_request(u, req, "endpoint close", &st);
                ucp_request_free(req);
            }
        }
        ucp_worker_destroy(u->worker);
    }
    if (u->context != NULL)
        ucp_cleanup(u->context);
    for (int i = 0; i < u->nslots; i++)
        free(u->slots[i].buf);
    free(u->slots);
    free(u->scratch);
    free(u->eps);
    free(u);
}

int vs_ucx_post(vs_ucx *u, int comm, int src, int tag, size_t length, int *slot)
{
    ucp_request_param_t p = {0};
    struct recv_slot *s;
    void *req;
    int rc = check_envelope(u, comm, src, tag, 1);

    if (rc == VS_UCX_OK)
        rc = check_length(u, length);
    if (rc != VS_UCX_OK)
        return rc;
    if (u->nslots == u->cap) {
        int cap = u->cap ? 2 * u->cap : 8;
        struct recv_slot *more = realloc(u->slots, (size_t)cap * sizeof *more);

        if (more == NULL)
            return fail(u, VS_UCX_NOMEM, "out of memory for receive %d", u->nslots);
        u->slots = more;
        u->cap = cap;
    }
    s = &u->slots[u->nslots];
    s->buf = calloc(length, 1);
    if (s->buf == NULL)
        return fail(u, VS_UCX_NOMEM, "out of memory for a %zu-byte receive buffer", length);
    s->length = length;
    s->reported = 0;
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    req = ucp_tag_recv_nbx(u->worker, s->buf, length, encode(comm, src, tag),
                           mask_of(u, src, tag), &p);
    if (UCS_PTR_IS_ERR(req) || req == NULL) {
        free(s->buf);
        return fail(u, VS_UCX_FAILED, "UCX: ucp_tag_recv_nbx: %s",
                    req == NULL ? "no request despite UCP_OP_ATTR_FLAG_NO_IMM_CMPL"
                                : ucs_status_string(UCS_PTR_STATUS(req)));
    }
    s->req = req;
    *slot = u->nslots++;
    return settle(u);
}

int vs_ucx_send(vs_ucx *u, int comm, int src, int tag, size_t length, int fill, int *status)
{
    ucp_request_param_t p = {0};
    ucs_status_t st = UCS_OK;
    void *req;
    int rc = check_envelope(u, comm, src, tag, 0);

    if (rc == VS_UCX_OK && src >= u->senders)
        rc = fail(u, VS_UCX_INVALID, "sender %d is outside 0..%d", src, u->senders - 1);
    if (rc == VS_UCX_OK && (fill < 0 || fill > 255))
        rc = fail(u, VS_UCX_INVALID, "fill byte %d is outside 0..255", fill);
    if (rc == VS_UCX_OK)
        rc = check_length(u, length);
    if (rc == VS_UCX_OK)
        rc = scratch(u, length);
    if (rc != VS_UCX_OK)
        return rc;
    memset(u->scratch, fill, length);
    req = ucp_tag_send_nbx(u->eps[src], u->scratch, length, encode(comm, src, tag), &p);
    if (UCS_PTR_IS_ERR(req)) {
        st = UCS_PTR_STATUS(req);
    } else if (req != NULL) {
        rc = wait_request(u, req, "send", &st);
        ucp_request_free(req);
        if (rc != VS_UCX_OK)
            return rc;
    }
    *status = (int)st;
    return settle(u);
}

static int valid_slot(vs_ucx *u, int slot)
{
    if (slot < 0 || slot >= u->nslots)
        return fail(u, VS_UCX_INVALID, "receive %d was never posted (%d posted)", slot,
                    u->nslots);
    return VS_UCX_OK;
}

int vs_ucx_cancel(vs_ucx *u, int slot)
{
    int rc = valid_slot(u, slot);

    if (rc != VS_UCX_OK)
        return rc;
    ucp_request_cancel(u->worker, u->slots[slot].req);
    return settle(u);
}

int vs_ucx_probe(vs_ucx *u, int comm, int src, int tag, int *found, vs_ucx_event *msg)
{
    ucp_tag_recv_info_t info;
    int rc = check_envelope(u, comm, src, tag, 1);

    if (rc == VS_UCX_OK)
        rc = settle(u);
    if (rc != VS_UCX_OK)
        return rc;
    *found = ucp_tag_probe_nb(u->worker, encode(comm, src, tag), mask_of(u, src, tag), 0,
                              &info) != NULL;
    memset(msg, 0, sizeof *msg);
    msg->slot = -1;
    msg->fill = -1;
    if (*found) {
        decode(info.sender_tag, msg);
        msg->length = info.length;
    }
    return VS_UCX_OK;
}

static int fill_of(const unsigned char *buf, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (buf[i] != buf[0])
            return -1;
    }
    return n ? buf[0] : -1;
}

int vs_ucx_poll(vs_ucx *u, vs_ucx_event *events, int max, int *n)
{
    *n = 0;
    for (int i = 0; i < u->nslots && *n < max; i++) {
        struct recv_slot *s = &u->slots[i];
        vs_ucx_event *ev = &events[*n];
        ucp_tag_recv_info_t info;
        ucs_status_t st;

        if (s->reported)
            continue;
        st = ucp_tag_recv_request_test(s->req, &info);
        if (st == UCS_INPROGRESS)
            continue;
        memset(ev, 0, sizeof *ev);
        ev->slot = i;
        ev->fill = -1;
        if (st == UCS_ERR_CANCELED) {
            ev->status = VS_UCX_CANCELED;
            ev->comm = ev->src = ev->tag = -1;
        } else if (st == UCS_OK || st == UCS_ERR_MESSAGE_TRUNCATED) {
            ev->status = st == UCS_OK ? VS_UCX_DONE : VS_UCX_TRUNCATED;
            decode(info.sender_tag, ev);
            ev->length = info.length;
            if (st == UCS_OK && info.length <= s->length)
                ev->fill = fill_of(s->buf, info.length);
        } else {
            return fail(u, VS_UCX_FAILED, "UCX: receive %d completed with %s", i,
                        ucs_status_string(st));
        }
        s->reported = 1;
        (*n)++;
    }
    return VS_UCX_OK;
}
