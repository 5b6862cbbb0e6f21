/* The raw verbs recorder: an LD_PRELOAD library that writes what an unmodified verbs program
 * does on its devices and its TCP side channel, one JSON-lines file per process
 * ($VERBSPEC_RECORD_DIR/<basename of argv[0]>.<pid>.jsonl; docs/verbs.md, "Recording a program
 * without changing it").
 *
 * How it sees the calls: ibv_post_send, ibv_post_recv and ibv_poll_cq are static inlines in
 * <infiniband/verbs.h> that call through ctx->ops, so the wrapper of the exported
 * ibv_open_device swaps those pointers in each context it returns for recording wrappers (the
 * originals kept per context). The exported setup calls (registration, CQ and QP creation,
 * modify, destroy) are interposed by name. A program that dlopens libibverbs and dlsyms from
 * the handle is given a handle to this library instead, whose own symbols come first and whose
 * dependencies (libibverbs) supply the rest. The side channel is every AF_INET/AF_INET6 stream
 * socket's bytes, through the libc calls that move them.
 *
 * Every line is written by one write(2) on an O_APPEND descriptor under the process mutex, so
 * lines never interleave; a forked child opens its own file. The hot calls (posts and polls
 * that return completions) are copied and queued with their time under the mutex, in the order
 * of every other event, and turned into text later: when the program next polls an empty CQ
 * (it is waiting then), before any other event, and before a batch is written. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* verbs.h makes these macros that reach the exported functions of the same names */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))
#define FORMAT_VERSION 1
/* Lines are written in batches: when a batch would pass OUT_CAP, when FLUSH_NS have passed since
 * the last, before the program may block on a read (so a rank stopped while it waits has its
 * lines on disk), before fork, exec and _exit, and at `end`. One write(2) per line cost the gate
 * round trip about a sixth under the guest's emulation (docs/benchmarks.md). */
#define OUT_CAP (64u << 10)
#define FLUSH_NS 50000000u
#define HEAD 112                /* room before an event's body for {"ev":..,"t":..,"tid":.. */
#define FD_CACHE 65536          /* descriptors whose socket kind is remembered */
#define MAX_CTX 64              /* contexts open at once whose ops are swapped */
#define MAP_CAP 4096            /* CQs and QPs remembered (a power of two) */
#define MAP_TOMB ((uintptr_t)1) /* a removed key: lookups probe past it */
#define PEND_MAX 1024           /* queued hot events turned into text at once past this many */

/* ================================================================== state
 * A preload library has no caller to hand it a context: everything the wrappers share lives in
 * this one process-wide record (and the few thread-locals below). Its fields are set up by the
 * constructor and after fork, and guarded by `lock` where noted. */

/* what is known of a descriptor: a TCP socket is "live" once its open or a byte of it has been
 * written (only a live socket's close is written: a listening socket's is not) */
enum fd_kind { FD_UNKNOWN = 0, FD_OTHER, FD_TCP, FD_TCP_CONNECTING, FD_TCP_LIVE };

/* a context whose ops point at the recording wrappers, and the ops it had */
struct ctx_slot {
    _Atomic(struct ibv_context *) ctx;
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
    int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
    int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    int (*bind_mw)(struct ibv_qp *, struct ibv_mw *, struct ibv_mw_bind *);
    struct ibv_qp *(*create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
    struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *, struct ibv_cq_init_attr_ex *);
};

/* pointer -> value, open addressing; lookups lock-free, inserts and removals under `lock` */
struct map_slot {
    _Atomic uintptr_t key;
    _Atomic uint64_t val;
};

/* the functions the wrappers stand in front of, found with dlsym(RTLD_NEXT) */
struct reals {
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*send)(int, const void *, size_t, int);
    ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    ssize_t (*sendmsg)(int, const struct msghdr *, int);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*recv)(int, void *, size_t, int);
    ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
    ssize_t (*recvmsg)(int, struct msghdr *, int);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*read_chk)(int, void *, size_t, size_t);
    ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
    ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
    int (*socket)(int, int, int);
    int (*connect)(int, const struct sockaddr *, socklen_t);
    int (*accept)(int, struct sockaddr *, socklen_t *);
    int (*accept4)(int, struct sockaddr *, socklen_t *, int);
    int (*close)(int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*shutdown)(int, int);
    int (*fclose)(FILE *);
    void *(*dlopen)(const char *, int);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    struct ibv_mr *(*reg_mr_iova)(struct ibv_pd *, void *, size_t, uint64_t, int);
    struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
                                int);
    int (*destroy_cq)(struct ibv_cq *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
    int (*rereg_mr)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
};

static struct recorder {
    pthread_mutex_t lock;           /* one line at a time; table inserts and removals */
    _Atomic int fd;                 /* the recording file; -1: recording nothing */
    int ended;                      /* `end` written: later events are dropped */
    char dir[PATH_MAX];             /* $VERBSPEC_RECORD_DIR, "" when unset */
    struct reals real;
    struct ctx_slot ctx[MAX_CTX];
    struct map_slot cqs[MAP_CAP];   /* cq -> empty polls since its last written poll */
    struct map_slot qps[MAP_CAP];   /* qp -> 1 + sq_sig_all */
    _Atomic unsigned char fds[FD_CACHE];    /* enum fd_kind by descriptor */
    char out[OUT_CAP];              /* lines not yet written: one write per batch, not per line */
    _Atomic size_t out_len;
    uint64_t out_at;                /* when the last batch was written */
    struct pend *pend, **pend_tail; /* hot events queued, not yet text (oldest first) */
    _Atomic unsigned pend_n;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .pend_tail = &R.pend};

static pthread_once_t reals_once = PTHREAD_ONCE_INIT;
/* the calling thread's id (a syscall saved per event), reset in a forked child */
static __thread pid_t tl_tid;
/* inside a verbs wrapper: a nested call (libibverbs calling its own exported symbols) is
 * passed through unrecorded */
static __thread int tl_depth;

static void resolve_reals(void)
{
#define REAL(field, name) R.real.field = (__typeof__(R.real.field))dlsym(RTLD_NEXT, name)
    REAL(write, "write");
    REAL(read, "read");
    REAL(send, "send");
    REAL(sendto, "sendto");
    REAL(sendmsg, "sendmsg");
    REAL(writev, "writev");
    REAL(recv, "recv");
    REAL(recvfrom, "recvfrom");
    REAL(recvmsg, "recvmsg");
    REAL(readv, "readv");
    REAL(read_chk, "__read_chk");
    REAL(recv_chk, "__recv_chk");
    REAL(recvfrom_chk, "__recvfrom_chk");
    REAL(socket, "socket");
    REAL(connect, "connect");
    REAL(accept, "accept");
    REAL(accept4, "accept4");
    REAL(close, "close");
    REAL(dup, "dup");
    REAL(dup2, "dup2");
    REAL(dup3, "dup3");
    REAL(shutdown, "shutdown");
    REAL(fclose, "fclose");
    REAL(dlopen, "dlopen");
    REAL(open_device, "ibv_open_device");
    REAL(close_device, "ibv_close_device");
    REAL(reg_mr, "ibv_reg_mr");
    REAL(reg_mr_iova, "ibv_reg_mr_iova");
    REAL(reg_mr_iova2, "ibv_reg_mr_iova2");
    REAL(dereg_mr, "ibv_dereg_mr");
    REAL(create_cq, "ibv_create_cq");
    REAL(destroy_cq, "ibv_destroy_cq");
    REAL(create_qp, "ibv_create_qp");
    REAL(modify_qp, "ibv_modify_qp");
    REAL(destroy_qp, "ibv_destroy_qp");
    REAL(qp_to_qp_ex, "ibv_qp_to_qp_ex");
    REAL(rereg_mr, "ibv_rereg_mr");
    REAL(reg_dmabuf_mr, "ibv_reg_dmabuf_mr");
#undef REAL
}

static struct reals *real(void)
{
    pthread_once(&reals_once, resolve_reals);
    return &R.real;
}

static pid_t current_tid(void)
{
    if (tl_tid == 0)
        tl_tid = (pid_t)syscall(SYS_gettid);
    return tl_tid;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One line to stderr about the recorder itself (never through the wrappers). */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char text[PATH_MAX + 256];
    int n = snprintf(text, sizeof text, "verbspec recorder (pid %d): ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(text + n, sizeof text - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof text - 2)
        len = sizeof text - 2;
    text[len++] = '\n';
    if (real()->write)
        (void)!real()->write(2, text, len);
}

/* ================================================================== JSON text */
/* An event's line under construction: HEAD bytes left free at the front for the head
 * (`{"ev":..,"t":..,"tid":..`), written under the lock; the body (",key":value...) after. */
struct jbuf {
    char *p;
    size_t len, cap;
    int failed;                     /* out of memory: the event is not written */
};

static void jb_init(struct jbuf *b)
{
    b->cap = 1024;
    b->p = malloc(b->cap);
    b->len = HEAD;
    b->failed = b->p == NULL;
}

static int jb_need(struct jbuf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap;
    while (cap < b->len + n)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void jb_raw(struct jbuf *b, const char *s, size_t n)
{
    if (jb_need(b, n) == 0) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

static void jb_lit(struct jbuf *b, const char *s)
{
    jb_raw(b, s, strlen(s));
}

/* ,"key": */
static void jb_key(struct jbuf *b, const char *key)
{
    size_t n = strlen(key);
    if (jb_need(b, n + 4) == 0) {
        char *o = b->p + b->len;
        o[0] = ',';
        o[1] = '"';
        memcpy(o + 2, key, n);
        o[n + 2] = '"';
        o[n + 3] = ':';
        b->len += n + 4;
    }
}

static size_t fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static void jb_u64(struct jbuf *b, uint64_t v)
{
    if (jb_need(b, 24) == 0)
        b->len += fmt_u64(b->p + b->len, v);
}

static void jb_i64(struct jbuf *b, int64_t v)
{
    if (v < 0) {
        jb_raw(b, "-", 1);
        jb_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        jb_u64(b, (uint64_t)v);
    }
}

static void jb_kint(struct jbuf *b, const char *key, int64_t v)
{
    jb_key(b, key);
    jb_i64(b, v);
}

static void jb_kuint(struct jbuf *b, const char *key, uint64_t v)
{
    jb_key(b, key);
    jb_u64(b, v);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* A JSON string of n bytes: control characters, quotes and backslashes escaped; a byte that
 * is not part of valid UTF-8 is written as \u00XX (its Latin-1 reading). */
static void jb_str(struct jbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (jb_need(b, n * 6 + 2))
        return;
    char *o = b->p + b->len;
    *o++ = '"';
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
            i++;
        } else if (c >= 0x20 && c < 0x80) {
            *o++ = (char)c;
            i++;
        } else {
            size_t k = c >= 0x80 ? utf8_len(u + i, n - i) : 0;
            if (k) {
                memcpy(o, u + i, k);
                o += k;
                i += k;
            } else {
                memcpy(o, "\\u00", 4);
                o[4] = hex[c >> 4];
                o[5] = hex[c & 15];
                o += 6;
                i++;
            }
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

static void jb_kstr(struct jbuf *b, const char *key, const char *s)
{
    jb_key(b, key);
    jb_str(b, s, strlen(s));
}

static void jb_hex(struct jbuf *b, const unsigned char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (jb_need(b, 2 * n))
        return;
    char *o = b->p + b->len;
    for (size_t i = 0; i < n; i++) {
        o[2 * i] = hex[p[i] >> 4];
        o[2 * i + 1] = hex[p[i] & 15];
    }
    b->len += 2 * n;
}

/* ================================================================== writing an event */
static int recording(void)
{
    return atomic_load_explicit(&R.fd, memory_order_relaxed) >= 0;
}

/* The line `{"ev":EV,"t":..,"tid":..` + body + `}`, one write(2) under the lock; frees b. The
 * `end` line closes the file to later events in the same hold of the lock. */
/* Bytes onto the recording file, whole; a failure stops the recording, saying why. */
static void write_all(const char *p, size_t len)
{
    while (R.fd >= 0 && len > 0) {
        ssize_t w = real()->write(R.fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            say("writing into %s: %s; recording stops here", R.dir,
                w < 0 ? strerror(errno) : "nothing written");
            real()->close(R.fd);
            R.fd = -1;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
}

/* The batch written as it is (R.lock held). */
static void write_batch_locked(void)
{
    write_all(R.out, R.out_len);
    R.out_len = 0;
    R.out_at = now_ns();
}

static void drain_locked(void);

/* The queued events turned into lines, and the batch written (R.lock held). */
static void flush_locked(void)
{
    drain_locked();
    write_batch_locked();
}

/* The batch written, if there is one. */
static void flush_pending(void)
{
    if (R.out_len == 0 && atomic_load(&R.pend_n) == 0)
        return;
    pthread_mutex_lock(&R.lock);
    flush_locked();
    pthread_mutex_unlock(&R.lock);
}

/* The line of an event of thread ``tid`` at time ``t`` appended to the batch (R.lock held);
 * frees b. */
static void emit_locked(const char *ev, struct jbuf *b, uint64_t t, pid_t tid)
{
    jb_raw(b, "}\n", 2);
    if (!b->failed && R.fd >= 0 && !R.ended) {
        char head[HEAD];
        size_t n = 0;
        memcpy(head, "{\"ev\":\"", 7);
        n = 7;
        size_t el = strlen(ev);
        memcpy(head + n, ev, el);
        n += el;
        memcpy(head + n, "\",\"t\":", 6);
        n += 6;
        n += fmt_u64(head + n, t);
        memcpy(head + n, ",\"tid\":", 7);
        n += 7;
        n += fmt_u64(head + n, (uint64_t)tid);
        char *start = b->p + HEAD - n;
        memcpy(start, head, n);
        size_t len = b->len - HEAD + n;
        if (R.out_len + len > OUT_CAP)
            write_batch_locked();
        if (len > OUT_CAP) {
            write_all(start, len);
        } else {
            memcpy(R.out + R.out_len, start, len);
            R.out_len += len;
        }
        R.ended = strcmp(ev, "end") == 0;
        /* a queued event's time may precede the last batch's */
        if (R.ended || (t > R.out_at && t - R.out_at >= FLUSH_NS))
            write_batch_locked();
    }
    free(b->p);
}

/* An event's line, after every queued one; frees b. */
static void emit(const char *ev, struct jbuf *b)
{
    pid_t tid = current_tid();
    pthread_mutex_lock(&R.lock);
    drain_locked();
    emit_locked(ev, b, now_ns(), tid);
    pthread_mutex_unlock(&R.lock);
}

/* An event with no body. */
static void emit_bare(const char *ev)
{
    struct jbuf b;
    jb_init(&b);
    emit(ev, &b);
}

static void unsupported(const char *call, const char *detail)
{
    if (!recording())
        return;
    struct jbuf b;
    jb_init(&b);
    jb_kstr(&b, "call", call);
    jb_kstr(&b, "detail", detail);
    emit("unsupported", &b);
}

/* ================================================================== the process */
/* This process's argv, from /proc/self/cmdline, as a JSON array; argv[0]'s basename in base. */
static void argv_json(struct jbuf *b, char *base, size_t base_size)
{
    /* on the heap: a forked child runs this on the forking thread's stack, maybe a small one */
    const size_t size = 65536;
    char *buf = malloc(size);
    size_t got = 0;
    int fd = buf ? open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        ssize_t k;
        while (got < size && (k = real()->read(fd, buf + got, size - got)) > 0)
            got += (size_t)k;
        real()->close(fd);
    }
    jb_raw(b, "[", 1);
    size_t i = 0;
    int first = 1;
    while (i < got) {
        size_t n = strnlen(buf + i, got - i);
        if (!first)
            jb_raw(b, ",", 1);
        if (first) {
            const char *slash = memrchr(buf, '/', n);
            const char *name = slash ? slash + 1 : buf;
            size_t nl = n - (size_t)(name - buf);
            if (nl >= base_size)
                nl = base_size - 1;
            memcpy(base, name, nl);
            base[nl] = '\0';
        }
        jb_str(b, buf + i, n);
        first = 0;
        i += n + 1;
    }
    jb_raw(b, "]", 1);
    free(buf);
}

/* Opens this process's file and writes its `process` line; says why on stderr when it
 * cannot. Called from the constructor and in a forked child (one thread, lock held). */
static void start_file(void)
{
    if (R.dir[0] == '\0')
        return;
    struct jbuf b;
    jb_init(&b);
    char base[128] = "";
    jb_kint(&b, "format", FORMAT_VERSION);
    jb_kint(&b, "pid", getpid());
    jb_kint(&b, "ppid", getppid());
    jb_key(&b, "argv");
    argv_json(&b, base, sizeof base);
    if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        strcpy(base, "process");
    /* the same name again means an exec kept the pid: the next free .N before .jsonl */
    char path[PATH_MAX + 192];
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) {
        if (k == 0)
            snprintf(path, sizeof path, "%s/%s.%d.jsonl", R.dir, base, (int)getpid());
        else
            snprintf(path, sizeof path, "%s/%s.%d.%d.jsonl", R.dir, base, (int)getpid(), k);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        say("cannot write a recording into VERBSPEC_RECORD_DIR=%s: %s; recording nothing",
            R.dir, strerror(errno));
        free(b.p);
        return;
    }
    R.fd = fd;
    R.ended = 0;
    emit("process", &b);
}

static void before_fork(void)
{
    pthread_mutex_lock(&R.lock);
    flush_locked();                 /* the child starts with no lines of the parent's */
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&R.lock);
}

/* The child has the parent's descriptor: it closes it, forgets the parent's empty polls and
 * thread id, and opens a file of its own. */
static void after_fork_child(void)
{
    pthread_mutex_init(&R.lock, NULL);
    tl_tid = 0;
    R.out_len = 0;
    if (R.fd >= 0)
        real()->close(R.fd);
    R.fd = -1;
    for (size_t i = 0; i < MAP_CAP; i++)
        atomic_store(&R.cqs[i].val, 0);
    start_file();
}

__attribute__((constructor)) static void recorder_start(void)
{
    real();
    const char *dir = getenv("VERBSPEC_RECORD_DIR");
    if (dir == NULL || dir[0] == '\0') {
        say("VERBSPEC_RECORD_DIR is not set; recording nothing");
    } else if (strlen(dir) >= sizeof R.dir) {
        say("VERBSPEC_RECORD_DIR is longer than %d bytes; recording nothing", PATH_MAX - 1);
    } else {
        strcpy(R.dir, dir);
        start_file();
    }
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* A process that leaves by _exit or replaces itself by exec writes no `end`, but its lines so
 * far are on disk. (glibc's own exec variants reach execve internally, so each is wrapped.) */
EXPORT void _exit(int status)
{
    void (*f)(int) = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
    flush_pending();
    f(status);
    __builtin_unreachable();
}

EXPORT void _Exit(int status)
{
    void (*f)(int) = (void (*)(int))dlsym(RTLD_NEXT, "_Exit");
    flush_pending();
    f(status);
    __builtin_unreachable();
}

typedef int exec_fn(const char *, char *const[], char *const[]);
typedef int execv_fn(const char *, char *const[]);

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    exec_fn *f = (exec_fn *)dlsym(RTLD_NEXT, "execve");
    flush_pending();
    return f(path, argv, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    exec_fn *f = (exec_fn *)dlsym(RTLD_NEXT, "execvpe");
    flush_pending();
    return f(file, argv, envp);
}

EXPORT int execv(const char *path, char *const argv[])
{
    execv_fn *f = (execv_fn *)dlsym(RTLD_NEXT, "execv");
    flush_pending();
    return f(path, argv);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    execv_fn *f = (execv_fn *)dlsym(RTLD_NEXT, "execvp");
    flush_pending();
    return f(file, argv);
}

/* `end` is the last line: written as the library is unloaded at exit, after the program's own
 * atexit handlers; events of threads still running after it are dropped. */
__attribute__((destructor)) static void recorder_end(void)
{
    if (!recording())
        return;
    emit_bare("end");
}

/* ================================================================== the TCP side channel */
static void fd_forget(int fd)
{
    if (fd >= 0 && fd < FD_CACHE)
        atomic_store_explicit(&R.fds[fd], FD_UNKNOWN, memory_order_relaxed);
}

static void fd_set_kind(int fd, enum fd_kind k)
{
    if (fd >= 0 && fd < FD_CACHE)
        atomic_store_explicit(&R.fds[fd], (unsigned char)k, memory_order_relaxed);
}

/* An AF_INET or AF_INET6 stream socket? (Netlink and Unix sockets, pipes and files are not.) */
static enum fd_kind fd_probe(int fd)
{
    int type = 0, domain = 0;
    socklen_t tl = sizeof type, dl = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) != 0)
        return FD_OTHER;
    return type == SOCK_STREAM && (domain == AF_INET || domain == AF_INET6) ? FD_TCP : FD_OTHER;
}

static enum fd_kind fd_kind(int fd)
{
    if (fd < 0)
        return FD_OTHER;
    if (fd >= FD_CACHE)
        return fd_probe(fd);
    enum fd_kind k = atomic_load_explicit(&R.fds[fd], memory_order_relaxed);
    if (k == FD_UNKNOWN) {
        k = fd_probe(fd);
        fd_set_kind(fd, k);
    }
    return k;
}

/* "ip:port" of a socket address ("[ip6]:port" for IPv6). */
static void addr_text(const struct sockaddr_storage *ss, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(out, size, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(out, size, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    } else {
        snprintf(out, size, "?");
    }
}

static void tcp_open(int fd, const char *how)
{
    struct sockaddr_storage local, peer;
    socklen_t ll = sizeof local, pl = sizeof peer;
    memset(&local, 0, sizeof local);
    memset(&peer, 0, sizeof peer);
    getsockname(fd, (struct sockaddr *)&local, &ll);
    getpeername(fd, (struct sockaddr *)&peer, &pl);
    char lt[80], pt[80];
    addr_text(&local, lt, sizeof lt);
    addr_text(&peer, pt, sizeof pt);
    struct jbuf b;
    jb_init(&b);
    jb_kint(&b, "fd", fd);
    jb_kstr(&b, "how", how);
    jb_kstr(&b, "local", lt);
    jb_kstr(&b, "peer", pt);
    emit("tcp_open", &b);
    fd_set_kind(fd, FD_TCP_LIVE);
}

/* Is fd a TCP socket whose bytes are recorded? A connect that was in progress is written as
 * opened at its first data. */
static int tcp_fd(int fd)
{
    if (!recording())
        return 0;
    enum fd_kind k = fd_kind(fd);
    if (k == FD_TCP_CONNECTING) {
        tcp_open(fd, "connect");
        return 1;
    }
    if (k == FD_TCP)
        fd_set_kind(fd, FD_TCP_LIVE);
    return k == FD_TCP || k == FD_TCP_LIVE;
}

static void tcp_fd_event(const char *ev, int fd)
{
    struct jbuf b;
    jb_init(&b);
    jb_kint(&b, "fd", fd);
    emit(ev, &b);
}

/* The n bytes moved through iov, as one `tcp` line. */
static void tcp_data(int fd, const char *dir, const struct iovec *iov, size_t cnt, size_t n)
{
    struct jbuf b;
    jb_init(&b);
    jb_kint(&b, "fd", fd);
    jb_kstr(&b, "dir", dir);
    jb_key(&b, "data");
    jb_raw(&b, "\"", 1);
    for (size_t i = 0; i < cnt && n > 0; i++) {
        size_t k = iov[i].iov_len < n ? iov[i].iov_len : n;
        jb_hex(&b, iov[i].iov_base, k);
        n -= k;
    }
    jb_raw(&b, "\"", 1);
    emit("tcp", &b);
}

/* After a transfer of r bytes (r < 0: failed; 0 on a read: the peer's end). */
static void after_io(int fd, const char *dir, const struct iovec *iov, size_t cnt, ssize_t r,
                     int asked, int peek)
{
    int eof = r == 0 && asked && dir[0] == 'i';
    /* a failed or empty transfer says nothing (and a connect in progress stays so) */
    if (peek || (r <= 0 && !eof) || !tcp_fd(fd))
        return;
    if (r > 0)
        tcp_data(fd, dir, iov, cnt, (size_t)r);
    else
        tcp_fd_event("tcp_eof", fd);
}

static void after_io1(int fd, const char *dir, const void *buf, size_t len, ssize_t r,
                      int peek)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    after_io(fd, dir, &v, 1, r, len > 0, peek);
}

static size_t iov_total(const struct iovec *iov, size_t cnt)
{
    size_t n = 0;
    for (size_t i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    ssize_t r = real()->write(fd, buf, len);
    int e = errno;
    after_io1(fd, "out", buf, len, r, 0);
    errno = e;
    return r;
}

EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    ssize_t r = real()->send(fd, buf, len, flags);
    int e = errno;
    after_io1(fd, "out", buf, len, r, 0);
    errno = e;
    return r;
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                      const struct sockaddr *to, socklen_t tolen)
{
    ssize_t r = real()->sendto(fd, buf, len, flags, to, tolen);
    int e = errno;
    after_io1(fd, "out", buf, len, r, 0);
    errno = e;
    return r;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    ssize_t r = real()->sendmsg(fd, msg, flags);
    int e = errno;
    if (msg)
        after_io(fd, "out", msg->msg_iov, msg->msg_iovlen, r, 0, 0);
    errno = e;
    return r;
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    ssize_t r = real()->writev(fd, iov, cnt);
    int e = errno;
    after_io(fd, "out", iov, cnt < 0 ? 0 : (size_t)cnt, r, 0, 0);
    errno = e;
    return r;
}

EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    flush_pending();
    ssize_t r = real()->read(fd, buf, len);
    int e = errno;
    after_io1(fd, "in", buf, len, r, 0);
    errno = e;
    return r;
}

EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    flush_pending();
    ssize_t r = real()->read_chk(fd, buf, len, buflen);
    int e = errno;
    after_io1(fd, "in", buf, len, r, 0);
    errno = e;
    return r;
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    if (!(flags & MSG_DONTWAIT))
        flush_pending();
    ssize_t r = real()->recv(fd, buf, len, flags);
    int e = errno;
    after_io1(fd, "in", buf, len, r, flags & MSG_PEEK);
    errno = e;
    return r;
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    ssize_t r = real()->recv_chk(fd, buf, len, buflen, flags);
    int e = errno;
    after_io1(fd, "in", buf, len, r, flags & MSG_PEEK);
    errno = e;
    return r;
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                        socklen_t *fromlen)
{
    if (!(flags & MSG_DONTWAIT))
        flush_pending();
    ssize_t r = real()->recvfrom(fd, buf, len, flags, from, fromlen);
    int e = errno;
    after_io1(fd, "in", buf, len, r, flags & MSG_PEEK);
    errno = e;
    return r;
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                              struct sockaddr *from, socklen_t *fromlen)
{
    ssize_t r = real()->recvfrom_chk(fd, buf, len, buflen, flags, from, fromlen);
    int e = errno;
    after_io1(fd, "in", buf, len, r, flags & MSG_PEEK);
    errno = e;
    return r;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (!(flags & MSG_DONTWAIT))
        flush_pending();
    ssize_t r = real()->recvmsg(fd, msg, flags);
    int e = errno;
    if (msg)
        after_io(fd, "in", msg->msg_iov, msg->msg_iovlen, r,
                 iov_total(msg->msg_iov, msg->msg_iovlen) > 0, flags & MSG_PEEK);
    errno = e;
    return r;
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    flush_pending();
    ssize_t r = real()->readv(fd, iov, cnt);
    int e = errno;
    size_t c = cnt < 0 ? 0 : (size_t)cnt;
    after_io(fd, "in", iov, c, r, iov_total(iov, c) > 0, 0);
    errno = e;
    return r;
}

EXPORT int socket(int domain, int type, int protocol)
{
    int fd = real()->socket(domain, type, protocol);
    fd_forget(fd);
    return fd;
}

EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    int r = real()->connect(fd, addr, len);
    int e = errno;
    fd_forget(fd);
    if (recording() && fd_kind(fd) == FD_TCP) {
        if (r == 0)
            tcp_open(fd, "connect");
        else if (e == EINPROGRESS || e == EINTR)
            fd_set_kind(fd, FD_TCP_CONNECTING);
    }
    errno = e;
    return r;
}

static int after_accept(int fd)
{
    int e = errno;
    fd_forget(fd);
    if (fd >= 0 && recording() && fd_kind(fd) == FD_TCP)
        tcp_open(fd, "accept");
    errno = e;
    return fd;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    return after_accept(real()->accept(fd, addr, len));
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    return after_accept(real()->accept4(fd, addr, len, flags));
}

/* fd is about to stop naming what it named: a TCP socket's close is written. */
static void fd_closing(int fd)
{
    if (fd < 0)
        return;
    enum fd_kind k = fd < FD_CACHE ? atomic_load(&R.fds[fd]) : FD_OTHER;
    if (k == FD_TCP_LIVE && recording())
        tcp_fd_event("tcp_close", fd);
    fd_forget(fd);
}

EXPORT int close(int fd)
{
    int r = real()->close(fd);
    int e = errno;
    if (r == 0 || e != EBADF)
        fd_closing(fd);
    errno = e;
    return r;
}

EXPORT int fclose(FILE *f)
{
    int fd = f ? fileno(f) : -1;
    int r = real()->fclose(f);
    int e = errno;
    fd_closing(fd);
    errno = e;
    return r;
}

EXPORT int dup(int fd)
{
    int r = real()->dup(fd);
    fd_forget(r);
    return r;
}

EXPORT int dup2(int old, int fd)
{
    int r = real()->dup2(old, fd);
    int e = errno;
    if (r >= 0 && old != fd)
        fd_closing(fd);
    errno = e;
    return r;
}

EXPORT int dup3(int old, int fd, int flags)
{
    int r = real()->dup3(old, fd, flags);
    int e = errno;
    if (r >= 0)
        fd_closing(fd);
    errno = e;
    return r;
}

EXPORT int shutdown(int fd, int how)
{
    int r = real()->shutdown(fd, how);
    int e = errno;
    if (r == 0 && tcp_fd(fd)) {
        struct jbuf b;
        jb_init(&b);
        jb_kint(&b, "fd", fd);
        jb_kint(&b, "how", how);
        emit("tcp_shutdown", &b);
    }
    errno = e;
    return r;
}

/* ================================================================== pointer maps */
static size_t map_hash(uintptr_t key)
{
    return (size_t)(((uint64_t)key >> 4) * UINT64_C(0x9E3779B97F4A7C15) >> 40) & (MAP_CAP - 1);
}

static struct map_slot *map_find(struct map_slot *m, const void *ptr)
{
    uintptr_t key = (uintptr_t)ptr;
    size_t h = map_hash(key);
    for (size_t i = 0; i < MAP_CAP; i++) {
        struct map_slot *s = &m[(h + i) & (MAP_CAP - 1)];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s;
        if (k == 0)
            return NULL;
    }
    return NULL;
}

/* The slot of ptr, made with val when new; NULL when the map is full. */
static struct map_slot *map_put(struct map_slot *m, const void *ptr, uint64_t val)
{
    pthread_mutex_lock(&R.lock);
    struct map_slot *s = map_find(m, ptr);
    if (s == NULL) {
        size_t h = map_hash((uintptr_t)ptr);
        for (size_t i = 0; i < MAP_CAP && s == NULL; i++) {
            struct map_slot *c = &m[(h + i) & (MAP_CAP - 1)];
            uintptr_t k = atomic_load(&c->key);
            if (k == 0 || k == MAP_TOMB) {
                atomic_store(&c->val, val);
                atomic_store_explicit(&c->key, (uintptr_t)ptr, memory_order_release);
                s = c;
            }
        }
    } else {
        atomic_store(&s->val, val);
    }
    pthread_mutex_unlock(&R.lock);
    return s;
}

static void map_drop(struct map_slot *m, const void *ptr)
{
    pthread_mutex_lock(&R.lock);
    struct map_slot *s = map_find(m, ptr);
    if (s)
        atomic_store(&s->key, MAP_TOMB);
    pthread_mutex_unlock(&R.lock);
}

/* ================================================================== verbs: names */
static void jb_other(struct jbuf *b, unsigned v)
{
    char t[24];
    snprintf(t, sizeof t, "other:%u", v);
    jb_str(b, t, strlen(t));
}

static void jb_name(struct jbuf *b, const char *const *names, size_t count, unsigned v)
{
    if (v < count && names[v])
        jb_str(b, names[v], strlen(names[v]));
    else
        jb_other(b, v);
}

static const char *const QP_TYPES[] = {[IBV_QPT_RC] = "RC", [IBV_QPT_UC] = "UC",
                                       [IBV_QPT_UD] = "UD"};
static const char *const QP_STATES[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
static const char *const SEND_OPS[] = {
    [IBV_WR_RDMA_WRITE] = "RDMA_WRITE", [IBV_WR_RDMA_WRITE_WITH_IMM] = "RDMA_WRITE_WITH_IMM",
    [IBV_WR_SEND] = "SEND", [IBV_WR_SEND_WITH_IMM] = "SEND_WITH_IMM",
    [IBV_WR_RDMA_READ] = "RDMA_READ", [IBV_WR_ATOMIC_CMP_AND_SWP] = "ATOMIC_CMP_AND_SWP",
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = "ATOMIC_FETCH_AND_ADD"};
static const char *const WC_OPS[] = {
    [IBV_WC_SEND] = "SEND", [IBV_WC_RDMA_WRITE] = "RDMA_WRITE",
    [IBV_WC_RDMA_READ] = "RDMA_READ", [IBV_WC_COMP_SWAP] = "COMP_SWAP",
    [IBV_WC_FETCH_ADD] = "FETCH_ADD", [IBV_WC_BIND_MW] = "BIND_MW",
    [IBV_WC_LOCAL_INV] = "LOCAL_INV"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void jb_wc_opcode(struct jbuf *b, unsigned op)
{
    if (op == IBV_WC_RECV)
        jb_lit(b, "\"RECV\"");
    else if (op == IBV_WC_RECV_RDMA_WITH_IMM)
        jb_lit(b, "\"RECV_RDMA_WITH_IMM\"");
    else
        jb_name(b, WC_OPS, COUNT(WC_OPS), op);
}

static void jb_sges(struct jbuf *b, const struct ibv_sge *sg, int n)
{
    jb_key(b, "sge");
    jb_raw(b, "[", 1);
    for (int i = 0; i < n; i++) {
        jb_raw(b, i ? ",[" : "[", i ? 2 : 1);
        jb_u64(b, sg[i].addr);
        jb_raw(b, ",", 1);
        jb_u64(b, sg[i].length);
        jb_raw(b, ",", 1);
        jb_u64(b, sg[i].lkey);
        jb_raw(b, "]", 1);
    }
    jb_raw(b, "]", 1);
}

/* ================================================================== verbs: the swapped ops */
static struct ctx_slot *ctx_find(const struct ibv_context *ctx)
{
    for (size_t i = 0; i < MAX_CTX; i++)
        if (atomic_load_explicit(&R.ctx[i].ctx, memory_order_acquire) == ctx)
            return &R.ctx[i];
    return NULL;
}

/* ------------------------------------------------------------- the hot events' text */
/* A send list's work requests as a JSON array (every one signaled on a sig_all QP). */
static void send_wrs_json(struct jbuf *w, const struct ibv_send_wr *wr, int sig_all)
{
    jb_raw(w, "[", 1);
    for (const struct ibv_send_wr *x = wr; x; x = x->next) {
        jb_raw(w, x == wr ? "{" : ",{", x == wr ? 1 : 2);
        jb_lit(w, "\"wr_id\":");
        jb_u64(w, x->wr_id);
        jb_key(w, "opcode");
        jb_name(w, SEND_OPS, COUNT(SEND_OPS), (unsigned)x->opcode);
        jb_kuint(w, "flags", x->send_flags);
        jb_key(w, "signaled");
        jb_lit(w, sig_all || (x->send_flags & IBV_SEND_SIGNALED) ? "true" : "false");
        jb_key(w, "imm");
        if (x->opcode == IBV_WR_SEND_WITH_IMM || x->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
            jb_u64(w, ntohl(x->imm_data));
        else
            jb_lit(w, "null");
        jb_sges(w, x->sg_list, x->num_sge);
        int rdma = x->opcode == IBV_WR_RDMA_WRITE || x->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
                   x->opcode == IBV_WR_RDMA_READ;
        int atomic = x->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                     x->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
        jb_key(w, "remote_addr");
        if (rdma || atomic)
            jb_u64(w, rdma ? x->wr.rdma.remote_addr : x->wr.atomic.remote_addr);
        else
            jb_lit(w, "null");
        jb_key(w, "rkey");
        if (rdma || atomic)
            jb_u64(w, rdma ? x->wr.rdma.rkey : x->wr.atomic.rkey);
        else
            jb_lit(w, "null");
        jb_raw(w, "}", 1);
    }
    jb_raw(w, "]", 1);
}

/* A receive list's work requests as a JSON array. */
static void recv_wrs_json(struct jbuf *w, const struct ibv_recv_wr *wr)
{
    jb_raw(w, "[", 1);
    for (const struct ibv_recv_wr *x = wr; x; x = x->next) {
        jb_raw(w, x == wr ? "{" : ",{", x == wr ? 1 : 2);
        jb_lit(w, "\"wr_id\":");
        jb_u64(w, x->wr_id);
        jb_sges(w, x->sg_list, x->num_sge);
        jb_raw(w, "}", 1);
    }
    jb_raw(w, "]", 1);
}

/* A post's body: its queue pair, what the provider returned, the index of the work request it
 * refused (or null) and the work requests, already written into `w` (freed here). */
static void post_body(struct jbuf *b, uint32_t qp_num, int rc, long at, struct jbuf *w)
{
    jb_init(b);
    jb_kuint(b, "qp_num", qp_num);
    jb_kint(b, "rc", rc);
    jb_key(b, "bad");
    if (at >= 0)
        jb_i64(b, at);
    else
        jb_lit(b, "null");
    jb_key(b, "wrs");
    if (!w->failed)
        jb_raw(b, w->p + HEAD, w->len - HEAD);
    else
        b->failed = 1;
    free(w->p);
}

/* A poll's body: its CQ, what it asked for and got, the empty polls before it, the
 * completions. */
static void poll_body(struct jbuf *b, uintptr_t cq, int num, int rc, uint64_t empty,
                      const struct ibv_wc *wc)
{
    jb_init(b);
    jb_kuint(b, "cq", cq);
    jb_kint(b, "max", num);
    jb_kint(b, "rc", rc);
    jb_kuint(b, "empty_before", empty);
    jb_key(b, "wcs");
    jb_raw(b, "[", 1);
    for (int i = 0; i < rc; i++) {
        const struct ibv_wc *x = &wc[i];
        jb_raw(b, i ? ",{" : "{", i ? 2 : 1);
        jb_lit(b, "\"wr_id\":");
        jb_u64(b, x->wr_id);
        jb_kint(b, "status", x->status);
        jb_key(b, "opcode");
        jb_wc_opcode(b, (unsigned)x->opcode);
        jb_kuint(b, "byte_len", x->byte_len);
        jb_kuint(b, "qp_num", x->qp_num);
        jb_key(b, "imm");
        if (x->wc_flags & IBV_WC_WITH_IMM)
            jb_u64(b, ntohl(x->imm_data));
        else
            jb_lit(b, "null");
        jb_kuint(b, "wc_flags", x->wc_flags);
        jb_raw(b, "}", 1);
    }
    jb_raw(b, "]", 1);
}

/* ------------------------------------------------------------- the hot events, queued */
enum pend_kind { PEND_SEND, PEND_RECV, PEND_POLL };

/* A post or a poll as it was: copies of its work requests (their SGE lists too) or of its
 * completions, laid out after the record in one allocation. */
struct pend {
    struct pend *next;
    enum pend_kind kind;
    uint64_t t;
    pid_t tid;
    uint32_t qp_num;            /* a post's */
    int rc;
    long at;
    int sig_all;
    uintptr_t cq;               /* a poll's */
    int max;
    uint64_t empty;
    union {
        struct ibv_send_wr *send;
        struct ibv_recv_wr *recv;
        struct ibv_wc *wc;
    } u;
};

static size_t sge_count(int n)
{
    return n > 0 ? (size_t)n : 0;
}

/* NAME(wr): a work-request list of WR_T copied, its SGE lists with it, into a queued event of
 * KIND (NULL: out of memory). The send and receive lists differ only in their type. */
#define DEFINE_COPY(NAME, WR_T, KIND, FIELD)                                                   \
    static struct pend *NAME(const WR_T *wr)                                                   \
    {                                                                                          \
        size_t n = 0, sges = 0;                                                                \
        for (const WR_T *x = wr; x; x = x->next, n++)                                          \
            sges += x->sg_list ? sge_count(x->num_sge) : 0;                                    \
        struct pend *p = malloc(sizeof *p + n * sizeof(WR_T) + sges * sizeof(struct ibv_sge)); \
        if (p == NULL)                                                                         \
            return NULL;                                                                       \
        WR_T *w = (WR_T *)(p + 1);                                                             \
        struct ibv_sge *g = (struct ibv_sge *)(w + n);                                         \
        size_t i = 0;                                                                          \
        for (const WR_T *x = wr; x; x = x->next, i++) {                                        \
            w[i] = *x;                                                                         \
            w[i].next = i + 1 < n ? &w[i + 1] : NULL;                                          \
            if (x->sg_list) {                                                                  \
                memcpy(g, x->sg_list, sge_count(x->num_sge) * sizeof *g);                      \
                w[i].sg_list = g;                                                              \
                g += sge_count(x->num_sge);                                                    \
            }                                                                                  \
        }                                                                                      \
        p->kind = KIND;                                                                        \
        p->u.FIELD = n ? w : NULL;                                                             \
        return p;                                                                              \
    }

DEFINE_COPY(copy_send, struct ibv_send_wr, PEND_SEND, send)
DEFINE_COPY(copy_recv, struct ibv_recv_wr, PEND_RECV, recv)

/* A queued event's line (R.lock held); frees p. */
static void pend_emit_locked(struct pend *p)
{
    struct jbuf w, b;
    if (p->kind == PEND_POLL) {
        poll_body(&b, p->cq, p->max, p->rc, p->empty, p->u.wc);
        emit_locked("poll_cq", &b, p->t, p->tid);
    } else {
        jb_init(&w);
        if (p->kind == PEND_SEND)
            send_wrs_json(&w, p->u.send, p->sig_all);
        else
            recv_wrs_json(&w, p->u.recv);
        post_body(&b, p->qp_num, p->rc, p->at, &w);
        emit_locked(p->kind == PEND_SEND ? "post_send" : "post_recv", &b, p->t, p->tid);
    }
    free(p);
}

/* Every queued event's line, oldest first (R.lock held). */
static void drain_locked(void)
{
    struct pend *p = R.pend;
    R.pend = NULL;
    R.pend_tail = &R.pend;
    atomic_store(&R.pend_n, 0);
    while (p) {
        struct pend *next = p->next;
        pend_emit_locked(p);
        p = next;
    }
}

/* A hot event queued, its time taken now: in the order of every other event, as emit would
 * have written it. Turned into text at once when the queue is long or a batch is due. */
static void pend_queue(struct pend *p)
{
    p->next = NULL;
    p->tid = current_tid();
    pthread_mutex_lock(&R.lock);
    if (R.fd < 0 || R.ended) {
        pthread_mutex_unlock(&R.lock);
        free(p);
        return;
    }
    p->t = now_ns();
    *R.pend_tail = p;
    R.pend_tail = &p->next;
    unsigned n = atomic_fetch_add(&R.pend_n, 1) + 1;
    if (n >= PEND_MAX || p->t - R.out_at >= FLUSH_NS)
        drain_locked();         /* emit_locked writes the batch when it is due */
    pthread_mutex_unlock(&R.lock);
}

/* The program waits (an empty poll): the queued events turned into text, unless another
 * thread holds the lock. */
static void pend_idle(void)
{
    if (atomic_load_explicit(&R.pend_n, memory_order_relaxed) == 0)
        return;
    if (pthread_mutex_trylock(&R.lock) != 0)
        return;
    drain_locked();
    pthread_mutex_unlock(&R.lock);
}

/* A swapped op on a context the recorder no longer knows (used after ibv_close_device). */
static int lost_context(const char *call)
{
    unsupported(call, "the context was closed or is unknown to the recorder; not passed on");
    return EINVAL;
}

/* post_send's line, queued (its work requests copied before the provider sees them). */
static int rec_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    struct ctx_slot *s = ctx_find(qp->context);
    if (s == NULL)
        return lost_context("ibv_post_send");
    if (!recording())
        return s->post_send(qp, wr, bad_wr);
    struct map_slot *q = map_find(R.qps, qp);
    struct pend *p = copy_send(wr);
    struct ibv_send_wr *bad = NULL;
    int rc = s->post_send(qp, wr, &bad);
    int e = errno;
    if (bad_wr && (rc != 0 || bad != NULL))
        *bad_wr = bad;
    long at = -1, i = 0;
    for (struct ibv_send_wr *x = wr; x && bad; x = x->next, i++)
        if (x == bad) {
            at = i;
            break;
        }
    if (p) {
        p->qp_num = qp->qp_num;
        p->rc = rc;
        p->at = at;
        p->sig_all = q && atomic_load(&q->val) == 2;
        pend_queue(p);
    } else {
        unsupported("ibv_post_send", "out of memory copying the work requests");
    }
    errno = e;
    return rc;
}

/* post_recv's line, queued (its work requests copied before the provider sees them). */
static int rec_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    struct ctx_slot *s = ctx_find(qp->context);
    if (s == NULL)
        return lost_context("ibv_post_recv");
    if (!recording())
        return s->post_recv(qp, wr, bad_wr);
    struct pend *p = copy_recv(wr);
    struct ibv_recv_wr *bad = NULL;
    int rc = s->post_recv(qp, wr, &bad);
    int e = errno;
    if (bad_wr && (rc != 0 || bad != NULL))
        *bad_wr = bad;
    long at = -1, i = 0;
    for (struct ibv_recv_wr *x = wr; x && bad; x = x->next, i++)
        if (x == bad) {
            at = i;
            break;
        }
    if (p) {
        p->qp_num = qp->qp_num;
        p->rc = rc;
        p->at = at;
        pend_queue(p);
    } else {
        unsupported("ibv_post_recv", "out of memory copying the work requests");
    }
    errno = e;
    return rc;
}

/* An empty poll is only counted (per CQ), and is when the queued events become text; a poll
 * that returned anything (or failed) is queued with the empty polls before it. */
static int rec_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    struct ctx_slot *s = ctx_find(cq->context);
    if (s == NULL)
        return lost_context("ibv_poll_cq");
    int rc = s->poll_cq(cq, num, wc);
    if (!recording())
        return rc;
    int e = errno;
    struct map_slot *c = map_find(R.cqs, cq);
    if (c == NULL)
        c = map_put(R.cqs, cq, 0);
    if (rc == 0) {
        if (c)
            atomic_fetch_add_explicit(&c->val, 1, memory_order_relaxed);
        pend_idle();
        errno = e;
        return rc;
    }
    uint64_t empty = c ? atomic_exchange(&c->val, 0) : 0;
    size_t got = rc > 0 ? (size_t)rc : 0;
    struct pend *p = malloc(sizeof *p + got * sizeof *wc);
    if (p) {
        p->kind = PEND_POLL;
        p->u.wc = (struct ibv_wc *)(p + 1);
        memcpy(p->u.wc, wc, got * sizeof *wc);
        p->cq = (uintptr_t)cq;
        p->max = num;
        p->rc = rc;
        p->empty = empty;
        pend_queue(p);
    } else {
        unsupported("ibv_poll_cq", "out of memory copying the completions");
    }
    errno = e;
    return rc;
}

static int rec_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                             struct ibv_recv_wr **bad_wr)
{
    struct ctx_slot *s = ctx_find(srq->context);
    if (s == NULL)
        return lost_context("ibv_post_srq_recv");
    unsupported("ibv_post_srq_recv", "receives posted to a shared receive queue are not "
                                     "recorded");
    return s->post_srq_recv(srq, wr, bad_wr);
}

static int rec_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
    struct ctx_slot *s = ctx_find(qp->context);
    if (s == NULL)
        return lost_context("ibv_bind_mw");
    unsupported("ibv_bind_mw", "memory window binds (and the rkeys they make) are not "
                               "recorded");
    return s->bind_mw(qp, mw, bind);
}

static struct ibv_qp *rec_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
    struct ctx_slot *s = ctx_find(ctx);
    if (s == NULL) {
        lost_context("ibv_create_qp_ex");
        errno = EINVAL;
        return NULL;
    }
    unsupported("ibv_create_qp_ex", "extended queue pair creation is not recorded: no "
                                    "create_qp line, and ibv_wr_* posts bypass the recorder");
    return s->create_qp_ex(ctx, a);
}

static struct ibv_cq_ex *rec_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
    struct ctx_slot *s = ctx_find(ctx);
    if (s == NULL) {
        lost_context("ibv_create_cq_ex");
        errno = EINVAL;
        return NULL;
    }
    unsupported("ibv_create_cq_ex", "extended completion queue creation is not recorded: no "
                                    "create_cq line, and ibv_start_poll/ibv_next_poll bypass "
                                    "the recorder");
    return s->create_cq_ex(ctx, a);
}

/* Points ctx's post, poll and extended-creation ops at the recording wrappers; the originals
 * go into a free slot (none free: the context is written as unsupported and left alone). */
static void swap_ops(struct ibv_context *ctx)
{
    pthread_mutex_lock(&R.lock);
    struct ctx_slot *s = NULL;
    for (size_t i = 0; i < MAX_CTX && s == NULL; i++)
        if (atomic_load(&R.ctx[i].ctx) == NULL || atomic_load(&R.ctx[i].ctx) == ctx)
            s = &R.ctx[i];
    if (s && atomic_load(&s->ctx) == ctx) {     /* already swapped (a reused address) */
        pthread_mutex_unlock(&R.lock);
        return;
    }
    if (s) {
        s->post_send = ctx->ops.post_send;
        s->post_recv = ctx->ops.post_recv;
        s->poll_cq = ctx->ops.poll_cq;
        s->post_srq_recv = ctx->ops.post_srq_recv;
        s->bind_mw = ctx->ops.bind_mw;
        struct verbs_context *v = verbs_get_ctx_op(ctx, create_qp_ex);
        s->create_qp_ex = v ? v->create_qp_ex : NULL;
        v = verbs_get_ctx_op(ctx, create_cq_ex);
        s->create_cq_ex = v ? v->create_cq_ex : NULL;
        atomic_store_explicit(&s->ctx, ctx, memory_order_release);
        ctx->ops.post_send = rec_post_send;
        ctx->ops.post_recv = rec_post_recv;
        ctx->ops.poll_cq = rec_poll_cq;
        if (s->post_srq_recv)
            ctx->ops.post_srq_recv = rec_post_srq_recv;
        if (s->bind_mw)
            ctx->ops.bind_mw = rec_bind_mw;
        if (s->create_qp_ex)
            verbs_get_ctx(ctx)->create_qp_ex = rec_create_qp_ex;
        if (s->create_cq_ex)
            verbs_get_ctx(ctx)->create_cq_ex = rec_create_cq_ex;
    }
    pthread_mutex_unlock(&R.lock);
    if (s == NULL) {
        char d[96];
        snprintf(d, sizeof d, "more than %d contexts open: this one's posts and polls are "
                              "not recorded", MAX_CTX);
        unsupported("ibv_open_device", d);
    }
}

/* ================================================================== verbs: exported calls */
EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    tl_depth++;
    struct ibv_context *ctx = real()->open_device(device);
    tl_depth--;
    int e = errno;
    if (ctx && recording() && tl_depth == 0) {
        swap_ops(ctx);
        struct jbuf b;
        jb_init(&b);
        jb_kuint(&b, "ctx", (uintptr_t)ctx);
        jb_kstr(&b, "device", ctx->device ? ctx->device->name : "?");
        emit("open_device", &b);
    }
    errno = e;
    return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
    int rc = real()->close_device(ctx);
    if (rc == 0) {
        pthread_mutex_lock(&R.lock);
        struct ctx_slot *s = ctx_find(ctx);
        if (s)
            atomic_store(&s->ctx, NULL);
        pthread_mutex_unlock(&R.lock);
    }
    return rc;
}

static void reg_mr_line(void *addr, size_t length, unsigned access, struct ibv_mr *mr, int err)
{
    struct jbuf b;
    jb_init(&b);
    jb_kuint(&b, "addr", (uintptr_t)addr);
    jb_kuint(&b, "length", length);
    jb_kuint(&b, "access", access);
    if (mr) {
        jb_kuint(&b, "lkey", mr->lkey);
        jb_kuint(&b, "rkey", mr->rkey);
    } else {
        jb_kint(&b, "errno", err);
    }
    emit("reg_mr", &b);
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    tl_depth++;
    struct ibv_mr *mr = real()->reg_mr(pd, addr, length, access);
    int e = errno;
    if (--tl_depth == 0 && recording())
        reg_mr_line(addr, length, (unsigned)access, mr, e);
    errno = e;
    return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                                      uint64_t iova, int access)
{
    tl_depth++;
    struct ibv_mr *mr = real()->reg_mr_iova(pd, addr, length, iova, access);
    int e = errno;
    if (--tl_depth == 0 && recording())
        reg_mr_line(addr, length, (unsigned)access, mr, e);
    errno = e;
    return mr;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access)
{
    tl_depth++;
    struct ibv_mr *mr = real()->reg_mr_iova2(pd, addr, length, iova, access);
    int e = errno;
    if (--tl_depth == 0 && recording())
        reg_mr_line(addr, length, access, mr, e);
    errno = e;
    return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    uint32_t lkey = mr ? mr->lkey : 0;
    tl_depth++;
    int rc = real()->dereg_mr(mr);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        struct jbuf b;
        jb_init(&b);
        jb_kuint(&b, "lkey", lkey);
        jb_kint(&b, "rc", rc);
        emit("dereg_mr", &b);
    }
    errno = e;
    return rc;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector)
{
    tl_depth++;
    struct ibv_cq *cq = real()->create_cq(ctx, cqe, cq_context, channel, comp_vector);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        if (cq)
            map_put(R.cqs, cq, 0);
        struct jbuf b;
        jb_init(&b);
        if (cq)
            jb_kuint(&b, "cq", (uintptr_t)cq);
        jb_kint(&b, "cqe", cqe);
        if (cq)
            jb_kint(&b, "actual", cq->cqe);
        else
            jb_kint(&b, "errno", e);
        emit("create_cq", &b);
    }
    errno = e;
    return cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    tl_depth++;
    int rc = real()->destroy_cq(cq);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        if (rc == 0)
            map_drop(R.cqs, cq);
        struct jbuf b;
        jb_init(&b);
        jb_kuint(&b, "cq", (uintptr_t)cq);
        jb_kint(&b, "rc", rc);
        emit("destroy_cq", &b);
    }
    errno = e;
    return rc;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    tl_depth++;
    struct ibv_qp *qp = real()->create_qp(pd, a);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        if (qp)
            map_put(R.qps, qp, a->sq_sig_all ? 2 : 1);
        struct jbuf b;
        jb_init(&b);
        if (qp) {
            jb_kuint(&b, "qp", (uintptr_t)qp);
            jb_kuint(&b, "qp_num", qp->qp_num);
        }
        jb_key(&b, "qp_type");
        jb_name(&b, QP_TYPES, COUNT(QP_TYPES), (unsigned)a->qp_type);
        jb_kuint(&b, "send_cq", (uintptr_t)a->send_cq);
        jb_kuint(&b, "recv_cq", (uintptr_t)a->recv_cq);
        jb_kuint(&b, "max_send_wr", a->cap.max_send_wr);
        jb_kuint(&b, "max_recv_wr", a->cap.max_recv_wr);
        jb_kuint(&b, "max_send_sge", a->cap.max_send_sge);
        jb_kuint(&b, "max_recv_sge", a->cap.max_recv_sge);
        jb_kuint(&b, "max_inline_data", a->cap.max_inline_data);
        jb_kint(&b, "sq_sig_all", a->sq_sig_all);
        if (qp == NULL)
            jb_kint(&b, "errno", e);
        emit("create_qp", &b);
    }
    errno = e;
    return qp;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    tl_depth++;
    int rc = real()->modify_qp(qp, attr, mask);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        struct jbuf b;
        jb_init(&b);
        jb_kuint(&b, "qp_num", qp->qp_num);
        jb_kint(&b, "mask", mask);
        jb_key(&b, "state");
        if (mask & IBV_QP_STATE)
            jb_name(&b, QP_STATES, COUNT(QP_STATES), (unsigned)attr->qp_state);
        else
            jb_lit(&b, "null");
        jb_key(&b, "dest_qp_num");
        if (mask & IBV_QP_DEST_QPN)
            jb_u64(&b, attr->dest_qp_num);
        else
            jb_lit(&b, "null");
        jb_kint(&b, "rc", rc);
        emit("modify_qp", &b);
    }
    errno = e;
    return rc;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    uint32_t num = qp ? qp->qp_num : 0;
    tl_depth++;
    int rc = real()->destroy_qp(qp);
    int e = errno;
    if (--tl_depth == 0 && recording()) {
        if (rc == 0)
            map_drop(R.qps, qp);
        struct jbuf b;
        jb_init(&b);
        jb_kuint(&b, "qp_num", num);
        jb_kint(&b, "rc", rc);
        emit("destroy_qp", &b);
    }
    errno = e;
    return rc;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                        size_t length, int access)
{
    if (tl_depth == 0)
        unsupported("ibv_rereg_mr", "a registration changed in place is not recorded: its "
                                    "new address, length and keys are unknown to a reader");
    return real()->rereg_mr(mr, flags, pd, addr, length, access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                        uint64_t iova, int fd, int access)
{
    if (tl_depth == 0)
        unsupported("ibv_reg_dmabuf_mr", "dmabuf registrations are not recorded");
    return real()->reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    if (tl_depth == 0)
        unsupported("ibv_qp_to_qp_ex", "work requests posted through ibv_qp_ex (ibv_wr_*) "
                                       "bypass the recorder");
    return real()->qp_to_qp_ex(qp);
}

/* ================================================================== dlopen of libibverbs */
/* A program that dlopens libibverbs and dlsyms from the handle would reach libibverbs'
 * definitions directly: it gets a handle to this library instead (loaded already, as a
 * preload), where dlsym finds the wrappers first and the rest in its dependencies. */
EXPORT void *dlopen(const char *name, int flags)
{
    void *h = real()->dlopen(name, flags);
    if (h == NULL || name == NULL || strstr(name, "libibverbs") == NULL)
        return h;
    Dl_info self;
    if (dladdr((void *)&recorder_start, &self) == 0 || self.dli_fname == NULL)
        return h;
    void *mine = real()->dlopen(self.dli_fname, flags);
    return mine ? mine : h;
}
