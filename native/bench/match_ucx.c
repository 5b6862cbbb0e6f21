/* UCX's own tag matching as a bench_match matcher: one worker, an endpoint to itself over the
 * self transport, 8-byte eager messages. An MPI envelope maps to a UCX tag as MPI over UCX does
 * it: the source in the top byte, the tag below; an ANY_SOURCE receive masks the top byte out. */

#include "match_bench.h"

#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define SRC_SHIFT 56
#define FULL_MASK UINT64_MAX
#define ANY_SRC_MASK ((UINT64_C(1) << SRC_SHIFT) - 1)

struct ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h ep;
    size_t completed;          /* receives completed since the last reset */
    void **pending;            /* receive requests still in flight, for cancel at reset */
    size_t npending, cap;
    int64_t send_value;
};

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    (void)request; (void)status; (void)info;
    ((struct ucx *)user_data)->completed++;
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    (void)request; (void)status; (void)user_data;
}

static int ucx_fail(char *err, size_t len, const char *what, ucs_status_t st)
{
    snprintf(err, len, "UCX: %s: %s", what, ucs_status_string(st));
    return -1;
}

static void *ucx_open(char *err, size_t len)
{
    struct ucx *u = calloc(1, sizeof *u);
    ucp_config_t *config = NULL;
    ucp_params_t params = {0};
    ucp_worker_params_t wparams = {0};
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    ucp_ep_params_t eparams = {0};
    ucs_status_t st;

    if (u == NULL) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) { ucx_fail(err, len, "ucp_config_read", st); free(u); return NULL; }
    ucp_config_modify(config, "TLS", "self");
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    st = ucp_init(&params, config, &u->context);
    ucp_config_release(config);
    if (st != UCS_OK) { ucx_fail(err, len, "ucp_init", st); free(u); return NULL; }
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(u->context, &wparams, &u->worker);
    if (st != UCS_OK) goto fail_context;
    st = ucp_worker_get_address(u->worker, &addr, &addr_len);
    if (st != UCS_OK) goto fail_worker;
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address = addr;
    st = ucp_ep_create(u->worker, &eparams, &u->ep);
    ucp_worker_release_address(u->worker, addr);
    if (st != UCS_OK) goto fail_worker;
    return u;
fail_worker:
    ucx_fail(err, len, "worker or endpoint", st);
    ucp_worker_destroy(u->worker);
    ucp_cleanup(u->context);
    free(u);
    return NULL;
fail_context:
    ucx_fail(err, len, "ucp_worker_create", st);
    ucp_cleanup(u->context);
    free(u);
    return NULL;
}

static int track(struct ucx *u, void *req)
{
    if (u->npending == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 1024;
        void **p = realloc(u->pending, cap * sizeof *p);
        if (p == NULL)
            return -1;
        u->pending = p;
        u->cap = cap;
    }
    u->pending[u->npending++] = req;
    return 0;
}

static int ucx_recv(void *ctx, int src, int tag, int64_t *dst, char *err, size_t len)
{
    struct ucx *u = ctx;
    ucp_request_param_t p = {0};
    ucp_tag_t t = ((ucp_tag_t)(src == BENCH_ANY ? 0 : src) << SRC_SHIFT) | (uint32_t)tag;
    void *req;

    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = recv_done;
    p.user_data = u;
    req = ucp_tag_recv_nbx(u->worker, dst, sizeof *dst, t,
                           src == BENCH_ANY ? ANY_SRC_MASK : FULL_MASK, &p);
    if (UCS_PTR_IS_ERR(req))
        return ucx_fail(err, len, "ucp_tag_recv_nbx", UCS_PTR_STATUS(req));
    if (req == NULL) {
        u->completed++;
        return 0;
    }
    if (track(u, req) != 0) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    return 0;
}

static int ucx_send(void *ctx, int src, int tag, int64_t value, char *err, size_t len)
{
    struct ucx *u = ctx;
    ucp_request_param_t p = {0};
    ucp_tag_t t = ((ucp_tag_t)src << SRC_SHIFT) | (uint32_t)tag;
    void *req;

    /* an eager send to self copies the buffer before returning or completing */
    u->send_value = value;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send = send_done;
    req = ucp_tag_send_nbx(u->ep, &u->send_value, sizeof u->send_value, t, &p);
    if (UCS_PTR_IS_ERR(req))
        return ucx_fail(err, len, "ucp_tag_send_nbx", UCS_PTR_STATUS(req));
    if (req != NULL) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(req);
    }
    return 0;
}

static int ucx_wait(void *ctx, size_t expected, char *err, size_t len)
{
    struct ucx *u = ctx;
    size_t spins = 0;

    while (u->completed < expected) {
        if (ucp_worker_progress(u->worker) == 0 && ++spins > 100000000) {
            snprintf(err, len, "UCX: %zu of %zu receives completed", u->completed, expected);
            return -1;
        }
    }
    return 0;
}

static void ucx_reset(void *ctx)
{
    struct ucx *u = ctx;

    for (size_t i = 0; i < u->npending; i++) {
        if (ucp_request_check_status(u->pending[i]) == UCS_INPROGRESS)
            ucp_request_cancel(u->worker, u->pending[i]);
        while (ucp_request_check_status(u->pending[i]) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(u->pending[i]);
    }
    u->npending = 0;
    u->completed = 0;
}

static void ucx_close(void *ctx)
{
    struct ucx *u = ctx;
    ucp_request_param_t p = {0};
    void *req;

    ucx_reset(u);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(u->ep, &p);
    if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(req);
    }
    ucp_worker_destroy(u->worker);
    ucp_cleanup(u->context);
    free(u->pending);
    free(u);
}

const struct matcher bench_ucx = {
    "ucx", ucx_open, ucx_recv, ucx_send, ucx_wait, ucx_reset, ucx_close,
};
