/* A verbs program that reaches libibverbs only through dlopen and dlsym, as ds4 does (not
 * linked against it): the recorder's test of its dlopen route (tests/rxe/test_rxe_record.py).
 * It opens the named device, registers a buffer, makes a CQ and an RC queue pair, moves it to
 * INIT and posts one receive, creates an extended CQ (which the recorder refuses to record,
 * saying so), asks for the queue pair's extended form, re-registers the buffer with the same
 * access, and tears everything down.
 *
 * Usage: dlopen_verbs DEVICE. Exit 0 when every step worked; 1 with the failed step on stderr;
 * 2 for bad arguments. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the entry points looked up from the handle */
struct verbs_api {
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    const char *(*get_device_name)(struct ibv_device *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
                                int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
    int (*rereg_mr)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);
};

static int fail(const char *step, int code)
{
    fprintf(stderr, "dlopen_verbs: %s failed: %s (errno %d)\n", step, strerror(code), code);
    return 1;
}

static int lookup(void *h, struct verbs_api *a)
{
    struct {
        const char *name;
        void **slot;
    } want[] = {
        {"ibv_get_device_list", (void **)&a->get_device_list},
        {"ibv_free_device_list", (void **)&a->free_device_list},
        {"ibv_get_device_name", (void **)&a->get_device_name},
        {"ibv_open_device", (void **)&a->open_device},
        {"ibv_close_device", (void **)&a->close_device},
        {"ibv_alloc_pd", (void **)&a->alloc_pd},
        {"ibv_dealloc_pd", (void **)&a->dealloc_pd},
        {"ibv_reg_mr", (void **)&a->reg_mr},
        {"ibv_dereg_mr", (void **)&a->dereg_mr},
        {"ibv_create_cq", (void **)&a->create_cq},
        {"ibv_destroy_cq", (void **)&a->destroy_cq},
        {"ibv_create_qp", (void **)&a->create_qp},
        {"ibv_modify_qp", (void **)&a->modify_qp},
        {"ibv_destroy_qp", (void **)&a->destroy_qp},
        {"ibv_qp_to_qp_ex", (void **)&a->qp_to_qp_ex},
        {"ibv_rereg_mr", (void **)&a->rereg_mr},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        *want[i].slot = dlsym(h, want[i].name);
        if (*want[i].slot == NULL) {
            fprintf(stderr, "dlopen_verbs: dlsym %s: %s\n", want[i].name, dlerror());
            return -1;
        }
    }
    return 0;
}

/* Everything after the device is open; returns the exit code. */
static int exercise(const struct verbs_api *a, struct ibv_context *ctx)
{
    static char buf[4096];
    struct ibv_pd *pd = a->alloc_pd(ctx);
    if (pd == NULL)
        return fail("ibv_alloc_pd", errno);
    int rc = 1;
    struct ibv_mr *mr = a->reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = mr ? a->create_cq(ctx, 16, NULL, NULL, 0) : NULL;
    struct ibv_qp *qp = NULL;
    if (mr == NULL) {
        fail("ibv_reg_mr", errno);
    } else if (cq == NULL) {
        fail("ibv_create_cq", errno);
    } else {
        struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                              .max_send_sge = 1, .max_recv_sge = 1}};
        qp = a->create_qp(pd, &qa);
        if (qp == NULL)
            fail("ibv_create_qp", errno);
    }
    if (qp) {
        struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                                   .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
        int m = a->modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                            IBV_QP_ACCESS_FLAGS);
        struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
        int p = m ? m : ibv_post_recv(qp, &wr, &bad);
        struct ibv_wc wc;
        int polled = ibv_poll_cq(cq, 1, &wc);
        /* the extended CQ: reached through the context, not an exported symbol */
        struct ibv_cq_init_attr_ex cx = {.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS};
        struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
        int code = errno;
        (void)a->qp_to_qp_ex(qp);
        /* the same access again: whether the provider supports it or not, nothing changes */
        (void)a->rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                          IBV_ACCESS_LOCAL_WRITE);
        if (m)
            fail("ibv_modify_qp to INIT", m);
        else if (p)
            fail("ibv_post_recv", p);
        else if (polled != 0)
            fprintf(stderr, "dlopen_verbs: a completion on an idle CQ (%d)\n", polled);
        else if (cqx == NULL)
            fail("ibv_create_cq_ex", code);
        else
            rc = 0;
        if (cqx)
            a->destroy_cq(ibv_cq_ex_to_cq(cqx));
        a->destroy_qp(qp);
    }
    if (cq)
        a->destroy_cq(cq);
    if (mr)
        a->dereg_mr(mr);
    a->dealloc_pd(pd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dlopen_verbs DEVICE\n");
        return 2;
    }
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen_verbs: dlopen libibverbs.so.1: %s\n", dlerror());
        return 1;
    }
    struct verbs_api a;
    if (lookup(h, &a))
        return 1;
    int n = 0;
    struct ibv_device **list = a.get_device_list(&n);
    if (list == NULL)
        return fail("ibv_get_device_list", errno);
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(a.get_device_name(list[i]), argv[1]) == 0)
            dev = list[i];
    if (dev == NULL) {
        fprintf(stderr, "dlopen_verbs: no RDMA device named '%s'\n", argv[1]);
        a.free_device_list(list);
        return 1;
    }
    struct ibv_context *ctx = a.open_device(dev);
    int code = errno;
    a.free_device_list(list);
    if (ctx == NULL)
        return fail("ibv_open_device", code);
    int rc = exercise(&a, ctx);
    a.close_device(ctx);
    dlclose(h);
    if (rc == 0)
        printf("dlopen_verbs: ok\n");
    return rc;
}
