/* What the programs of native/verbs/ share besides the device (verbs_common.h). */
#include "verbs_common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double vc_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

uint64_t vc_mix64(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

void vc_fill(uint8_t *p, size_t n, uint64_t key)
{
    uint64_t w = vc_mix64(key);
    for (size_t i = 0; i + 8 <= n; i += 8, w += UINT64_C(0x9E3779B97F4A7C15))
        memcpy(p + i, &w, 8);
}

long long vc_first_bad(const uint8_t *p, size_t n, uint64_t key)
{
    uint64_t w = vc_mix64(key), got;
    for (size_t i = 0; i + 8 <= n; i += 8, w += UINT64_C(0x9E3779B97F4A7C15)) {
        memcpy(&got, p + i, 8);
        if (got != w)
            return (long long)i;
    }
    return -1;
}

void vc_put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int vc_number(const char *prog, const char *usage, const char *name, const char *text,
              uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || !*text || text[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'\n%s",
                prog, name, lo, hi, text, usage);
        return -1;
    }
    *out = v;
    return 0;
}

void vc_json_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

vc_endpoint vc_endpoint_defaults(void)
{
    return (vc_endpoint){.rank = -1, .ib_port = 1, .side_timeout_ms = 30000,
                         .connect_timeout_ms = 60000};
}

/* 1: option a (value v) is the endpoint's and taken; 0: it is not; -1: a bad value. */
static int endpoint_option(const char *prog, const char *usage, const char *a, const char *v,
                           vc_endpoint *ep)
{
    uint64_t n;
    if (strcmp(a, "--device") == 0) {
        ep->device = v;
    } else if (strcmp(a, "--trace") == 0) {
        ep->trace = v;
    } else if (strcmp(a, "--listen") == 0) {
        if (vc_number(prog, usage, a, v, 1, 65535, &n))
            return -1;
        ep->listen_port = v;
    } else if (strcmp(a, "--peer") == 0) {
        const char *colon = strrchr(v, ':');
        if (colon == NULL || colon == v || colon - v >= 255) {
            fprintf(stderr, "%s: --peer: expected HOST:PORT, got '%s'\n%s", prog, v, usage);
            return -1;
        }
        if (vc_number(prog, usage, a, colon + 1, 1, 65535, &n))
            return -1;
        ep->peer = v;
    } else {
        static const struct { const char *name; uint64_t lo, hi; } ints[] = {
            {"--rank", 0, 1}, {"--gid-index", 0, 255}, {"--ib-port", 1, 255},
            {"--side-timeout-ms", 1, 600000}, {"--connect-timeout-ms", 1, 600000}};
        size_t k = 0;
        while (k < sizeof ints / sizeof ints[0] && strcmp(a, ints[k].name) != 0)
            k++;
        if (k == sizeof ints / sizeof ints[0])
            return 0;
        if (vc_number(prog, usage, a, v, ints[k].lo, ints[k].hi, &n))
            return -1;
        if (k == 0)
            ep->rank = (int)n;
        else if (k == 1)
            ep->gid_index = (int)n;
        else if (k == 2)
            ep->ib_port = (unsigned)n;
        else if (k == 3)
            ep->side_timeout_ms = (int)n;
        else
            ep->connect_timeout_ms = (int)n;
    }
    return 1;
}

int vc_option(const char *prog, const char *usage, int argc, char **argv, int *i,
              const char **a, const char **v, vc_endpoint *ep)
{
    *a = argv[*i];
    if (strcmp(*a, "--json") == 0) {
        ep->json = 1;
        return 0;
    }
    if (strcmp(*a, "--help") == 0) {
        fputs(usage, stdout);
        exit(0);
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s: %s\n%s", prog, *a,
                strncmp(*a, "--", 2) ? "unexpected argument" : "needs a value", usage);
        return -1;
    }
    *v = argv[++*i];
    int got = endpoint_option(prog, usage, *a, *v, ep);
    return got < 0 ? -1 : !got;
}

int vc_endpoint_check(const char *prog, const char *usage, const vc_endpoint *ep)
{
    const char *missing = ep->rank < 0 ? "--rank" : ep->device == NULL ? "--device" : NULL;
    if (missing) {
        fprintf(stderr, "%s: %s is required\n%s", prog, missing, usage);
        return -1;
    }
    if (!ep->listen_port == !ep->peer) {
        fprintf(stderr, "%s: give exactly one of --listen PORT and --peer HOST:PORT\n%s", prog,
                usage);
        return -1;
    }
    return 0;
}
