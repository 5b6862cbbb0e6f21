/* bench_match: one interface for the matchers it times side by side. A matcher receives the
 * receiver's view of MPI traffic on one communicator: receives posted (a source or
 * BENCH_ANY, a tag) and messages arriving (a source, a tag, an 8-byte payload that the
 * matching receive stores in *dst). Every call returns 0, or -1 with a message in err. */

#ifndef VERBSPEC_MATCH_BENCH_H
#define VERBSPEC_MATCH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_ANY (-1)

struct matcher {
    const char *name;
    void *(*open)(char *err, size_t len);
    int (*recv)(void *ctx, int src, int tag, int64_t *dst, char *err, size_t len);
    int (*send)(void *ctx, int src, int tag, int64_t value, char *err, size_t len);
    /* until `expected` receives have completed since the last reset */
    int (*wait)(void *ctx, size_t expected, char *err, size_t len);
    /* cancel what is still posted, forget what is unexpected: ready for the next round */
    void (*reset)(void *ctx);
    void (*close)(void *ctx);
};

extern const struct matcher bench_listwalk;
extern const struct matcher bench_ucx;
extern const struct matcher bench_verbspec;

#endif
