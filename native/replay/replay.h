/* The replay script reader and the canonical text both replay drivers share.
 *
 * A replay script is plain text, one record per line:
 *
 *   verbspec-replay ENGINE                     the engine the script is for (gate | tag)
 *   config NAME=VALUE ...                      the engine's configuration, every field named
 *   STEP ACTION CALL ARG ...<TAB>FIELD=VALUE<TAB>...
 *
 * A step line names the trace's step number and spec action, then the engine call and its
 * arguments (space separated); after the first tab come the fields the spec expects the call
 * to emit and the views it expects afterwards, in the order the driver formats them. Values
 * are canonical text: integers in decimal, items of a list separated by ',', the parts of an
 * item by ':', an absent value as "none", booleans as 0 and 1, and free text with '\\' and
 * control bytes written as \xHH.
 *
 * Every function that can fail returns 0 on success and -1 on failure with the reason in the
 * script's err (a malformed line) or the fields' nomem flag (out of memory).
 */
#ifndef VS_REPLAY_H
#define VS_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RP_ERR 512

/* Exit codes of a driver. */
#define RP_AGREED 0
#define RP_DIFFERS 1
#define RP_MALFORMED 2
#define RP_NOMEM 3

/* The fields one call produced, as "name=value\0name=value\0...". */
typedef struct {
    char *text;
    size_t len, cap;
    size_t n;
    int nomem;
} rp_fields;

void rp_fields_clear(rp_fields *f);
void rp_fields_free(rp_fields *f);
void rp_field_begin(rp_fields *f, const char *prefix, const char *name);
void rp_putf(rp_fields *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rp_put_text(rp_fields *f, const char *s);      /* escaped free text */
void rp_field_end(rp_fields *f);
/* A whole field of free text. */
void rp_text_field(rp_fields *f, const char *prefix, const char *name, const char *s);

/* A script being read. */
typedef struct {
    FILE *in;
    const char *path;
    size_t line_no;
    char *line;
    size_t line_cap;
    char **tok;                 /* the line's first part, split at spaces */
    size_t ntok, tok_cap;
    char **want;                /* the expected fields */
    size_t nwant, want_cap;
    char err[RP_ERR];
} rp_script;

/* Opens path ("-": standard input). */
int rp_open(rp_script *s, const char *path);
void rp_close(rp_script *s);
/* The run's outcome: the agreed line on stdout, or a malformed script's or out of memory's
 * message on stderr (a difference was printed where it was found); returns code. */
int rp_report(const rp_script *s, int code, size_t steps);
/* Reads the next line and splits it: 1 a line, 0 the end of the script, -1 an error. */
int rp_next(rp_script *s);
/* Records a malformed-line error: "PATH line N: ..."; returns -1. */
int rp_fail(rp_script *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks of the current line. */
int rp_expect_args(rp_script *s, size_t first, size_t n, const char *call);
int rp_u64(rp_script *s, const char *text, const char *what, uint64_t *out);
int rp_i64(rp_script *s, const char *text, const char *what, int64_t *out);
/* Reads the header lines: "verbspec-replay ENGINE" and "config NAME=VALUE ..." holding each
 * of names[0..n) exactly once (values[i] for names[i]). */
int rp_header(rp_script *s, const char *engine, const char *const *names, size_t n,
              uint64_t *values);

/* Compares the expected fields of the current line with got. On the first difference prints
 * "step N ACTION: FIELD: expected X, got Y" to out and returns 1; 0 when they agree. */
int rp_compare(const rp_script *s, const rp_fields *got, FILE *out);
/* Prints that the step's call was refused (a mismatch: the spec took the step). */
void rp_refused(const rp_script *s, const char *why, FILE *out);

#endif
