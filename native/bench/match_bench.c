/* bench_match: tag-matching cost per message of several matchers, side by side in one run.
 *
 * Each scenario is a round of N messages on one communicator (message i: source i % 8, tag i,
 * payload i + 1) and N receives, each naming one message, posted before or after the
 * messages arrive, in the messages' order or reversed; some rounds first post wildcard
 * receives that never match. A round is timed from its first call to its last completion and
 * every receive's payload is checked; the figure is the median over rounds, in ns per message.
 *
 * Output: one JSON object, {"rows": [{"scenario", "n", "<matcher>_ns", ...}]}.
 * Usage: bench_match [--min-messages M] [--scenario NAME] */

#include "match_bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SOURCES 8
/* the never-matching wildcards name tag N, which no message of the round carries */

enum order { IN_ORDER, REVERSED };
enum phase { POSTED_FIRST, UNEXPECTED_FIRST };

struct scenario {
    const char *name;
    int n;
    enum phase phase;
    enum order order;
    int masked;                /* receives are ANY_SOURCE */
    int wildcards;             /* never-matching ANY_SOURCE receives posted first */
};

static const struct scenario SCENARIOS[] = {
    {"posted-full-inorder", 16, POSTED_FIRST, IN_ORDER, 0, 0},
    {"posted-full-inorder", 256, POSTED_FIRST, IN_ORDER, 0, 0},
    {"posted-full-inorder", 4096, POSTED_FIRST, IN_ORDER, 0, 0},
    {"posted-full-inorder", 16384, POSTED_FIRST, IN_ORDER, 0, 0},
    {"posted-full-reversed", 16, POSTED_FIRST, REVERSED, 0, 0},
    {"posted-full-reversed", 256, POSTED_FIRST, REVERSED, 0, 0},
    {"posted-full-reversed", 4096, POSTED_FIRST, REVERSED, 0, 0},
    {"posted-full-reversed", 16384, POSTED_FIRST, REVERSED, 0, 0},
    {"unexpected-full-inorder", 256, UNEXPECTED_FIRST, IN_ORDER, 0, 0},
    {"unexpected-full-inorder", 4096, UNEXPECTED_FIRST, IN_ORDER, 0, 0},
    {"unexpected-full-reversed", 256, UNEXPECTED_FIRST, REVERSED, 0, 0},
    {"unexpected-full-reversed", 4096, UNEXPECTED_FIRST, REVERSED, 0, 0},
    {"unexpected-masked-inorder", 256, UNEXPECTED_FIRST, IN_ORDER, 1, 0},
    {"unexpected-masked-inorder", 4096, UNEXPECTED_FIRST, IN_ORDER, 1, 0},
    {"unexpected-masked-reversed", 256, UNEXPECTED_FIRST, REVERSED, 1, 0},
    {"unexpected-masked-reversed", 4096, UNEXPECTED_FIRST, REVERSED, 1, 0},
    {"wildcards-0", 4096, POSTED_FIRST, IN_ORDER, 0, 0},
    {"wildcards-1", 4096, POSTED_FIRST, IN_ORDER, 0, 1},
    {"wildcards-16", 4096, POSTED_FIRST, IN_ORDER, 0, 16},
    {"wildcards-256", 4096, POSTED_FIRST, IN_ORDER, 0, 256},
};

static const struct matcher *const MATCHERS[] = {
#ifdef BENCH_WITH_VERBSPEC
    &bench_verbspec,
#endif
#ifdef BENCH_WITH_UCX
    &bench_ucx,
#endif
    &bench_listwalk,
};
#define NMATCHERS (sizeof MATCHERS / sizeof MATCHERS[0])

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int message_index(const struct scenario *s, int k)
{
    return s->order == REVERSED ? s->n - 1 - k : k;
}

/* one round; *ns is its time; -1 with err on a failed call or a wrong payload */
static int round_once(const struct matcher *m, void *ctx, const struct scenario *s,
                      int64_t *dst, int64_t *never, double *ns, char *err, size_t len)
{
    double t0;
    int rc = 0;

    memset(dst, 0, (size_t)s->n * sizeof *dst);
    t0 = now_ns();
    for (int w = 0; w < s->wildcards && rc == 0; w++)
        rc = m->recv(ctx, BENCH_ANY, s->n, &never[w], err, len);
    if (s->phase == POSTED_FIRST) {
        for (int i = 0; i < s->n && rc == 0; i++)
            rc = m->recv(ctx, s->masked ? BENCH_ANY : i % SOURCES, i, &dst[i], err, len);
        for (int k = 0; k < s->n && rc == 0; k++) {
            int i = message_index(s, k);
            rc = m->send(ctx, i % SOURCES, i, i + 1, err, len);
        }
    } else {
        for (int i = 0; i < s->n && rc == 0; i++)
            rc = m->send(ctx, i % SOURCES, i, i + 1, err, len);
        for (int k = 0; k < s->n && rc == 0; k++) {
            int i = message_index(s, k);
            rc = m->recv(ctx, s->masked ? BENCH_ANY : i % SOURCES, i, &dst[i], err, len);
        }
    }
    if (rc == 0)
        rc = m->wait(ctx, (size_t)s->n, err, len);
    *ns = now_ns() - t0;
    m->reset(ctx);
    for (int i = 0; i < s->n && rc == 0; i++) {
        if (dst[i] != i + 1) {
            snprintf(err, len, "%s, %s n=%d: receive %d got payload %lld, expected %d", m->name,
                     s->name, s->n, i, (long long)dst[i], i + 1);
            rc = -1;
        }
    }
    for (int w = 0; w < s->wildcards && rc == 0; w++) {
        if (never[w] != 0) {
            snprintf(err, len, "%s, %s: a never-matching wildcard matched", m->name, s->name);
            rc = -1;
        }
    }
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int measure(const struct matcher *m, void *ctx, const struct scenario *s,
                   long min_messages, double *ns_per_msg, char *err, size_t len)
{
    int rounds = (int)((min_messages + s->n - 1) / s->n);
    int64_t *dst = malloc((size_t)s->n * sizeof *dst);
    int64_t never[256] = {0};
    double *t = NULL;
    double warm;
    int rc = -1;

    if (rounds < 5)
        rounds = 5;
    t = malloc((size_t)rounds * sizeof *t);
    if (dst == NULL || t == NULL) {
        snprintf(err, len, "out of memory");
        goto out;
    }
    if (round_once(m, ctx, s, dst, never, &warm, err, len) != 0)
        goto out;
    for (int r = 0; r < rounds; r++)
        if (round_once(m, ctx, s, dst, never, &t[r], err, len) != 0)
            goto out;
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    *ns_per_msg = t[rounds / 2] / s->n;
    rc = 0;
out:
    free(dst);
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    long min_messages = 1000000;
    const char *only = NULL;
    void *ctx[NMATCHERS];
    char err[512];
    int first = 1, status = 0;

    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--min-messages") == 0 && a + 1 < argc) {
            min_messages = strtol(argv[++a], NULL, 10);
        } else if (strcmp(argv[a], "--scenario") == 0 && a + 1 < argc) {
            only = argv[++a];
        } else {
            fprintf(stderr, "bench_match: unknown argument %s\n", argv[a]);
            return 3;
        }
    }
    if (min_messages < 1) {
        fprintf(stderr, "bench_match: --min-messages must be at least 1\n");
        return 3;
    }
    for (size_t k = 0; k < NMATCHERS; k++) {
        if ((ctx[k] = MATCHERS[k]->open(err, sizeof err)) == NULL) {
            fprintf(stderr, "bench_match: %s: %s\n", MATCHERS[k]->name, err);
            while (k-- > 0)
                MATCHERS[k]->close(ctx[k]);
            return 4;
        }
    }
    printf("{\"rows\": [");
    for (size_t i = 0; i < sizeof SCENARIOS / sizeof SCENARIOS[0] && status == 0; i++) {
        const struct scenario *s = &SCENARIOS[i];

        if (only != NULL && strcmp(only, s->name) != 0)
            continue;
        printf("%s\n  {\"scenario\": \"%s\", \"n\": %d", first ? "" : ",", s->name, s->n);
        first = 0;
        for (size_t k = 0; k < NMATCHERS; k++) {
            double ns;

            if (measure(MATCHERS[k], ctx[k], s, min_messages, &ns, err, sizeof err) != 0) {
                fprintf(stderr, "bench_match: %s\n", err);
                status = 1;
                break;
            }
            printf(", \"%s_ns\": %.1f", MATCHERS[k]->name, ns);
        }
        printf("}");
        fflush(stdout);
    }
    printf("\n]}\n");
    for (size_t k = 0; k < NMATCHERS; k++)
        MATCHERS[k]->close(ctx[k]);
    return status;
}
