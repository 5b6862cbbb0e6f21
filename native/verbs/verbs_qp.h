/* Device, queue pair and memory setup over libibverbs, and the TCP connection that carries a
 * queue pair's address to its peer: what every C program of native/verbs/ shares.
 *
 * Every call returns 0 or -1; on -1 the caller's error buffer holds a sentence naming what
 * failed, with the verbs call and errno where a verbs call failed.
 */
#ifndef VS_VERBS_QP_H
#define VS_VERBS_QP_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define VQ_ERR 512                  /* bytes of an error text */

typedef struct {
    char text[VQ_ERR];
} vq_err;

/* One opened device with one queue pair on one completion queue. */
typedef struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    enum ibv_qp_type type;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu active_mtu;
    uint32_t psn;
} vq_dev;

/* What a queue pair tells its peer: enough to reach it (RoCE: the GID). */
typedef struct {
    uint32_t qpn;
    uint32_t psn;
    uint32_t mtu;                   /* enum ibv_mtu */
    uint8_t gid[16];
} vq_addr;

/* Opens device `name` (an error lists the devices there are), its port's GID at gid_index, a
 * protection domain, a CQ of cqe entries and a queue pair of `type` (IBV_QPT_UC or IBV_QPT_RC)
 * with the given send and receive depths, every send signaled only when asked. */
int vq_open(vq_dev *d, const char *name, uint8_t port, int gid_index, enum ibv_qp_type type,
            uint32_t sq_depth, uint32_t rq_depth, int cqe, vq_err *err);
/* Registers len bytes at addr (len 0: NULL, no region). */
int vq_reg(vq_dev *d, void *addr, size_t len, int access, struct ibv_mr **mr, const char *what,
           vq_err *err);
void vq_local_addr(const vq_dev *d, vq_addr *a);
/* INIT, RTR towards the peer at `remote`, RTS (RC: with retries, rnr_retry as given). */
int vq_connect(vq_dev *d, const vq_addr *remote, int rnr_retry, vq_err *err);
/* Destroys what vq_open made; the first failure is reported, the rest still destroyed. */
int vq_close(vq_dev *d, vq_err *err);

/* TCP: accept one connection on `port` (any address), or connect to host:port, retrying
 * until timeout_ms has passed; the socket, with TCP_NODELAY. */
int vq_tcp_accept(uint16_t port, int timeout_ms, int *fd, vq_err *err);
int vq_tcp_connect(const char *host, uint16_t port, int timeout_ms, int *fd, vq_err *err);
/* Exactly n bytes; 1 when the peer closed first, -1 on an error or past timeout_ms. */
int vq_read_full(int fd, void *buf, size_t n, int timeout_ms, vq_err *err);
int vq_write_full(int fd, const void *buf, size_t n, vq_err *err);
/* Both ends write their address and extra_len bytes of `extra` (settings the caller compares),
 * then read the peer's into remote and peer_extra. */
int vq_exchange(int fd, const vq_addr *local, vq_addr *remote, const void *extra,
                void *peer_extra, size_t extra_len, int timeout_ms, vq_err *err);
/* Whether the peer closed its end (a peek that does not consume). */
int vq_peer_closed(int fd);

#endif
