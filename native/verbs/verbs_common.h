/* What the programs of native/verbs/ share besides the device: the clock, the payload pattern
 * both ranks check word by word, argument numbers, and JSON text for the traces. */
#ifndef VS_VERBS_COMMON_H
#define VS_VERBS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Seconds on the monotonic clock. */
double vc_now_s(void);

/* The pattern of `key`: 8-byte words from a mixed seed, each the last plus a constant. fill
 * writes its first n bytes (whole words); first_bad gives the byte offset of the first word
 * that differs, or -1. */
uint64_t vc_mix64(uint64_t x);
void vc_fill(uint8_t *p, size_t n, uint64_t key);
long long vc_first_bad(const uint8_t *p, size_t n, uint64_t key);

/* v as n little-endian bytes at p. */
void vc_put_le(uint8_t *p, uint64_t v, int n);

/* Option `name`'s value `text` as an integer in lo..hi; on anything else -1, with
 * "PROG: NAME: expected an integer in LO..HI, got 'TEXT'" and `usage` on stderr. */
int vc_number(const char *prog, const char *usage, const char *name, const char *text,
              uint64_t lo, uint64_t hi, uint64_t *out);

/* s as a JSON string, quotes and escapes included. */
void vc_json_text(FILE *f, const char *s);

/* The options every program takes: its rank and device, where it meets its peer, how long it
 * waits for the TCP connection and on it, its output. */
typedef struct {
    int rank;                       /* -1 until given */
    const char *device;
    int gid_index;
    unsigned ib_port;
    const char *listen_port;        /* rank 0 listens on this port ... */
    const char *peer;               /* ... which rank 1 connects to as HOST:PORT */
    int side_timeout_ms, connect_timeout_ms;
    int json;                       /* --json: the outcome as one JSON object */
    const char *trace;              /* --trace FILE: the device trace */
} vc_endpoint;

vc_endpoint vc_endpoint_defaults(void);
/* The option at argv[*i]: --json, --help (usage on stdout, exit 0) and the endpoint's options
 * are taken here (0); any other option that has a value is the program's (1: *a the option,
 * *v its value, *i moved onto the value); -1 on an error (said on stderr, with `usage`). */
int vc_option(const char *prog, const char *usage, int argc, char **argv, int *i,
              const char **a, const char **v, vc_endpoint *ep);
/* After the last option: -1 (said on stderr) unless the rank, the device and exactly one of
 * --listen and --peer were given. */
int vc_endpoint_check(const char *prog, const char *usage, const vc_endpoint *ep);

#endif
