/* Device, queue pair and memory setup over libibverbs, and the TCP connection that carries the
 * queue pair's address (verbs_qp.h). */
#include "verbs_qp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ADDR_MAGIC UINT32_C(0x50515356)     /* "VSQP" */
#define ADDR_BYTES 32u
#define CONNECT_RETRY_MS 50

static int set_err(vq_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int set_err(vq_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return -1;
}

/* A verbs call failed: its name, errno's text and number. ibv_* calls that return an int
 * return the errno value itself; those that return a pointer set errno. */
static int verbs_err(vq_err *err, const char *call, int code)
{
    return set_err(err, "%s failed: %s (errno %d)", call, strerror(code), code);
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ the device */
static int open_by_name(vq_dev *d, const char *name, vq_err *err)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL)
        return verbs_err(err, "ibv_get_device_list", errno);
    char names[256] = "";
    size_t used = 0;
    struct ibv_device *found = NULL;
    for (int i = 0; i < n; i++) {
        const char *dn = ibv_get_device_name(list[i]);
        if (strcmp(dn, name) == 0)
            found = list[i];
        int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", dn);
        if (w > 0 && (size_t)w < sizeof names - used)
            used += (size_t)w;
    }
    if (found == NULL) {
        set_err(err, "no RDMA device named '%s' (devices here: %s)", name,
                n ? names : "none");
        ibv_free_device_list(list);
        return -1;
    }
    d->ctx = ibv_open_device(found);
    int code = errno;
    ibv_free_device_list(list);
    if (d->ctx == NULL)
        return verbs_err(err, "ibv_open_device", code);
    return 0;
}

int vq_open(vq_dev *d, const char *name, uint8_t port, int gid_index, enum ibv_qp_type type,
            uint32_t sq_depth, uint32_t rq_depth, int cqe, vq_err *err)
{
    memset(d, 0, sizeof *d);
    d->port = port;
    d->gid_index = gid_index;
    d->type = type;
    if (open_by_name(d, name, err))
        return -1;
    struct ibv_port_attr pa;
    int rc = ibv_query_port(d->ctx, port, &pa);
    if (rc)
        return verbs_err(err, "ibv_query_port", rc);
    if (pa.state != IBV_PORT_ACTIVE)
        return set_err(err, "device %s port %u is not active (state %s)", name, port,
                       ibv_port_state_str(pa.state));
    d->active_mtu = pa.active_mtu;
    if (gid_index < 0 || gid_index >= pa.gid_tbl_len)
        return set_err(err, "GID index %d is outside device %s's table (0..%d)", gid_index,
                       name, pa.gid_tbl_len - 1);
    if (ibv_query_gid(d->ctx, port, gid_index, &d->gid))
        return verbs_err(err, "ibv_query_gid", errno);
    static const uint8_t zero[16];
    if (memcmp(d->gid.raw, zero, sizeof zero) == 0)
        return set_err(err, "device %s has no GID at index %d", name, gid_index);
    d->pd = ibv_alloc_pd(d->ctx);
    if (d->pd == NULL)
        return verbs_err(err, "ibv_alloc_pd", errno);
    d->cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
    if (d->cq == NULL)
        return verbs_err(err, "ibv_create_cq", errno);
    struct ibv_qp_init_attr qa = {
        .send_cq = d->cq, .recv_cq = d->cq, .qp_type = type, .sq_sig_all = 0,
        .cap = {.max_send_wr = sq_depth, .max_recv_wr = rq_depth, .max_send_sge = 1,
                .max_recv_sge = 1},
    };
    d->qp = ibv_create_qp(d->pd, &qa);
    if (d->qp == NULL)
        return verbs_err(err, "ibv_create_qp", errno);
    d->psn = (uint32_t)(getpid() * 2654435761u) & 0xFFFFFFu;
    return 0;
}

int vq_reg(vq_dev *d, void *addr, size_t len, int access, struct ibv_mr **mr, const char *what,
           vq_err *err)
{
    *mr = NULL;
    if (len == 0)
        return 0;
    *mr = ibv_reg_mr(d->pd, addr, len, access);
    if (*mr == NULL) {
        int code = errno;
        return set_err(err, "ibv_reg_mr failed for the %s region (%zu bytes): %s (errno %d)",
                       what, len, strerror(code), code);
    }
    return 0;
}

void vq_local_addr(const vq_dev *d, vq_addr *a)
{
    a->qpn = d->qp->qp_num;
    a->psn = d->psn;
    a->mtu = (uint32_t)d->active_mtu;
    memcpy(a->gid, d->gid.raw, sizeof a->gid);
}

int vq_connect(vq_dev *d, const vq_addr *remote, int rnr_retry, vq_err *err)
{
    int rc_qp = d->type == IBV_QPT_RC;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = d->port,
        .qp_access_flags = rc_qp ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE : 0,
    };
    int rc = ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
                                          | IBV_QP_ACCESS_FLAGS);
    if (rc)
        return verbs_err(err, "ibv_modify_qp (to INIT)", rc);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = remote->mtu < (uint32_t)d->active_mtu ? (enum ibv_mtu)remote->mtu
                                                       : d->active_mtu;
    a.dest_qp_num = remote->qpn;
    a.rq_psn = remote->psn;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, remote->gid, sizeof remote->gid);
    a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = d->port;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc_qp) {
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    rc = ibv_modify_qp(d->qp, &a, mask);
    if (rc)
        return verbs_err(err, "ibv_modify_qp (to RTR)", rc);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = d->psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc_qp) {
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = (uint8_t)rnr_retry;
        a.max_rd_atomic = 16;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    rc = ibv_modify_qp(d->qp, &a, mask);
    if (rc)
        return verbs_err(err, "ibv_modify_qp (to RTS)", rc);
    return 0;
}

int vq_close(vq_dev *d, vq_err *err)
{
    int rc = 0, code;
    err->text[0] = '\0';
    if (d->qp && (code = ibv_destroy_qp(d->qp)) != 0)
        rc = verbs_err(err, "ibv_destroy_qp", code);
    if (d->cq && (code = ibv_destroy_cq(d->cq)) != 0 && rc == 0)
        rc = verbs_err(err, "ibv_destroy_cq", code);
    if (d->pd && (code = ibv_dealloc_pd(d->pd)) != 0 && rc == 0)
        rc = verbs_err(err, "ibv_dealloc_pd", code);
    if (d->ctx && ibv_close_device(d->ctx) != 0 && rc == 0)
        rc = verbs_err(err, "ibv_close_device", errno);
    memset(d, 0, sizeof *d);
    return rc;
}

/* ------------------------------------------------------------------ TCP */
static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int vq_tcp_accept(uint16_t port, int timeout_ms, int *fd, vq_err *err)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        return set_err(err, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) || listen(s, 1)) {
        int code = errno;
        close(s);
        return set_err(err, "listening on TCP port %u: %s", port, strerror(code));
    }
    struct pollfd p = {.fd = s, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r <= 0) {
        int code = errno;
        close(s);
        return r == 0 ? set_err(err, "no peer connected to TCP port %u within %d ms", port,
                                timeout_ms)
                      : set_err(err, "waiting for a peer on TCP port %u: %s", port,
                                strerror(code));
    }
    *fd = accept(s, NULL, NULL);
    int code = errno;
    close(s);
    if (*fd < 0)
        return set_err(err, "accepting on TCP port %u: %s", port, strerror(code));
    nodelay(*fd);
    return 0;
}

int vq_tcp_connect(const char *host, uint16_t port, int timeout_ms, int *fd, vq_err *err)
{
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(host, service, &hints, &ai);
    if (g)
        return set_err(err, "peer %s:%u: %s", host, port, gai_strerror(g));
    long long deadline = now_ms() + timeout_ms;
    int code = 0;
    for (;;) {
        int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (s < 0) {
            code = errno;
            break;
        }
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(ai);
            nodelay(s);
            *fd = s;
            return 0;
        }
        code = errno;
        close(s);
        if (now_ms() >= deadline)
            break;
        struct timespec pause = {0, CONNECT_RETRY_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
    freeaddrinfo(ai);
    return set_err(err, "connecting to the peer at %s:%u: %s (retried for %d ms)", host, port,
                   strerror(code), timeout_ms);
}

int vq_read_full(int fd, void *buf, size_t n, int timeout_ms, vq_err *err)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, timeout_ms);
        if (r == 0)
            return set_err(err, "TCP side channel: nothing read from the peer within %d ms",
                           timeout_ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return set_err(err, "TCP side channel: poll: %s", strerror(errno));
        }
        ssize_t k = recv(fd, p + got, n - got, 0);
        if (k == 0)
            return 1;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNRESET)
                return 1;
            return set_err(err, "TCP side channel: recv: %s", strerror(errno));
        }
        got += (size_t)k;
    }
    return 0;
}

int vq_write_full(int fd, const void *buf, size_t n, vq_err *err)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return set_err(err, "TCP side channel: send: %s", strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int vq_exchange(int fd, const vq_addr *local, vq_addr *remote, const void *extra,
                void *peer_extra, size_t extra_len, int timeout_ms, vq_err *err)
{
    uint8_t mine[ADDR_BYTES], theirs[ADDR_BYTES];
    put32(mine, ADDR_MAGIC);
    put32(mine + 4, local->qpn);
    put32(mine + 8, local->psn);
    put32(mine + 12, local->mtu);
    memcpy(mine + 16, local->gid, 16);
    if (vq_write_full(fd, mine, sizeof mine, err)
        || (extra_len && vq_write_full(fd, extra, extra_len, err)))
        return -1;
    int r = vq_read_full(fd, theirs, sizeof theirs, timeout_ms, err);
    if (r == 0 && extra_len)
        r = vq_read_full(fd, peer_extra, extra_len, timeout_ms, err);
    if (r == 1)
        return set_err(err, "the peer closed the TCP connection during the queue pair "
                       "exchange");
    if (r)
        return -1;
    if (get32(theirs) != ADDR_MAGIC)
        return set_err(err, "the peer's queue pair exchange has magic 0x%08x, expected "
                       "0x%08x: not a verbspec verbs program", get32(theirs), ADDR_MAGIC);
    remote->qpn = get32(theirs + 4);
    remote->psn = get32(theirs + 8);
    remote->mtu = get32(theirs + 12);
    memcpy(remote->gid, theirs + 16, 16);
    return 0;
}

int vq_peer_closed(int fd)
{
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0)
        return 1;
    return k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}
