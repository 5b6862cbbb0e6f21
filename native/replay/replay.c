/* The replay script reader and canonical text (replay.h). */
#include "replay.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ fields */
static int grow(rp_fields *f, size_t more)
{
    if (f->nomem)
        return -1;
    if (f->len + more + 1 <= f->cap)
        return 0;
    size_t cap = f->cap ? f->cap : 256;
    while (cap < f->len + more + 1)
        cap *= 2;
    char *text = realloc(f->text, cap);
    if (text == NULL) {
        f->nomem = 1;
        return -1;
    }
    f->text = text;
    f->cap = cap;
    return 0;
}

void rp_fields_clear(rp_fields *f)
{
    f->len = 0;
    f->n = 0;
}

void rp_fields_free(rp_fields *f)
{
    free(f->text);
    f->text = NULL;
    f->len = f->cap = f->n = 0;
}

void rp_putf(rp_fields *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || grow(f, (size_t)need) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(f->text + f->len, (size_t)need + 1, fmt, ap);
    va_end(ap);
    f->len += (size_t)need;
}

void rp_field_begin(rp_fields *f, const char *prefix, const char *name)
{
    rp_putf(f, "%s%s=", prefix, name);
}

void rp_put_text(rp_fields *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p < 0x20 || *p == 0x7f)
            rp_putf(f, "\\x%02x", *p);
        else
            rp_putf(f, "%c", *p);
    }
}

void rp_field_end(rp_fields *f)
{
    if (grow(f, 1) != 0)
        return;
    f->text[f->len++] = '\0';
    f->n++;
}

void rp_text_field(rp_fields *f, const char *prefix, const char *name, const char *s)
{
    rp_field_begin(f, prefix, name);
    rp_put_text(f, s);
    rp_field_end(f);
}

/* ------------------------------------------------------------------ the script */
int rp_fail(rp_script *s, const char *fmt, ...)
{
    int at = snprintf(s->err, sizeof s->err, "%s line %zu: ", s->path, s->line_no);
    if (at < 0 || (size_t)at >= sizeof s->err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err + at, sizeof s->err - (size_t)at, fmt, ap);
    va_end(ap);
    return -1;
}

int rp_open(rp_script *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    if (strcmp(path, "-") == 0) {
        s->in = stdin;
        s->path = "(stdin)";
        return 0;
    }
    s->in = fopen(path, "r");
    if (s->in == NULL) {
        snprintf(s->err, sizeof s->err, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void rp_close(rp_script *s)
{
    if (s->in != NULL && s->in != stdin)
        fclose(s->in);
    free(s->line);
    free(s->tok);
    free(s->want);
    memset(s, 0, sizeof *s);
}

static int push(rp_script *s, char ***arr, size_t *n, size_t *cap, char *item)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **grown = realloc(*arr, c * sizeof **arr);
        if (grown == NULL) {
            snprintf(s->err, sizeof s->err, "out of memory");
            return -1;
        }
        *arr = grown;
        *cap = c;
    }
    (*arr)[(*n)++] = item;
    return 0;
}

int rp_next(rp_script *s)
{
    errno = 0;
    ssize_t got = getline(&s->line, &s->line_cap, s->in);
    if (got < 0) {
        if (errno != 0 || ferror(s->in)) {
            snprintf(s->err, sizeof s->err, "%s: read error after line %zu: %s", s->path,
                     s->line_no, strerror(errno));
            return -1;
        }
        return 0;
    }
    s->line_no++;
    if ((size_t)got != strlen(s->line))
        return rp_fail(s, "a NUL byte in the line");
    if (got > 0 && s->line[got - 1] == '\n')
        s->line[--got] = '\0';
    s->ntok = s->nwant = 0;
    char *tab = strchr(s->line, '\t');
    char *rest = NULL;
    if (tab != NULL) {
        *tab = '\0';
        rest = tab + 1;
    }
    for (char *p = s->line; *p;) {
        if (*p == ' ')
            return rp_fail(s, "two spaces in a row, or a space at the start");
        char *end = strchr(p, ' ');
        if (push(s, &s->tok, &s->ntok, &s->tok_cap, p) != 0)
            return -1;
        if (end == NULL)
            break;
        *end = '\0';
        p = end + 1;
        if (*p == '\0')
            return rp_fail(s, "a space at the end of the call");
    }
    if (s->ntok == 0)
        return rp_fail(s, "an empty line");
    while (rest != NULL) {
        char *end = strchr(rest, '\t');
        if (end != NULL)
            *end = '\0';
        if (strchr(rest, '=') == NULL)
            return rp_fail(s, "expected field %zu is not NAME=VALUE: '%s'", s->nwant + 1,
                           rest);
        if (push(s, &s->want, &s->nwant, &s->want_cap, rest) != 0)
            return -1;
        rest = end != NULL ? end + 1 : NULL;
    }
    return 1;
}

int rp_expect_args(rp_script *s, size_t first, size_t n, const char *call)
{
    if (s->ntok - first != n)
        return rp_fail(s, "%s takes %zu argument%s, the line gives %zu", call, n,
                       n == 1 ? "" : "s", s->ntok - first);
    return 0;
}

int rp_u64(rp_script *s, const char *text, const char *what, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*text < '0' || *text > '9' || *end != '\0' || errno == ERANGE)
        return rp_fail(s, "%s: expected an unsigned 64-bit integer, found '%s'", what, text);
    *out = v;
    return 0;
}

int rp_i64(rp_script *s, const char *text, const char *what, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *text == ' ' || *end != '\0' || errno == ERANGE)
        return rp_fail(s, "%s: expected a signed 64-bit integer, found '%s'", what, text);
    *out = v;
    return 0;
}

int rp_header(rp_script *s, const char *engine, const char *const *names, size_t n,
              uint64_t *values)
{
    int r = rp_next(s);
    if (r == 0)
        snprintf(s->err, sizeof s->err, "%s: empty script: expected 'verbspec-replay %s'",
                 s->path, engine);
    if (r <= 0)
        return -1;
    if (s->ntok != 2 || strcmp(s->tok[0], "verbspec-replay") != 0 || s->nwant != 0)
        return rp_fail(s, "expected 'verbspec-replay %s'", engine);
    if (strcmp(s->tok[1], engine) != 0)
        return rp_fail(s, "a script for the %s engine, not %s", s->tok[1], engine);
    r = rp_next(s);
    if (r <= 0)
        return r < 0 ? -1 : rp_fail(s, "expected the config line after the header");
    if (strcmp(s->tok[0], "config") != 0 || s->nwant != 0)
        return rp_fail(s, "expected 'config NAME=VALUE ...', found '%s'", s->tok[0]);
    uint64_t seen = 0;
    for (size_t t = 1; t < s->ntok; t++) {
        char *eq = strchr(s->tok[t], '=');
        if (eq == NULL)
            return rp_fail(s, "config item '%s' is not NAME=VALUE", s->tok[t]);
        *eq = '\0';
        size_t i = 0;
        while (i < n && strcmp(names[i], s->tok[t]) != 0)
            i++;
        if (i == n)
            return rp_fail(s, "unknown config name '%s'", s->tok[t]);
        if (seen & (UINT64_C(1) << i))
            return rp_fail(s, "config name '%s' given twice", names[i]);
        seen |= UINT64_C(1) << i;
        if (rp_u64(s, eq + 1, names[i], &values[i]) != 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!(seen & (UINT64_C(1) << i)))
            return rp_fail(s, "config is missing '%s'", names[i]);
    return 0;
}

/* ------------------------------------------------------------------ comparing */
static void show(FILE *out, const char *field, size_t name_len)
{
    if (field == NULL)
        fputs("(no such field)", out);
    else
        fputs(field + name_len + 1, out);
}

int rp_compare(const rp_script *s, const rp_fields *got, FILE *out)
{
    const char *g = got->text;
    size_t n = s->nwant > got->n ? s->nwant : got->n;
    for (size_t i = 0; i < n; i++, g = g != NULL ? g + strlen(g) + 1 : NULL) {
        const char *w = i < s->nwant ? s->want[i] : NULL;
        if (i >= got->n)
            g = NULL;
        if (w != NULL && g != NULL && strcmp(w, g) == 0)
            continue;
        const char *named = w != NULL ? w : g;
        size_t name_len = (size_t)(strchr(named, '=') - named);
        fprintf(out, "step %s %s: ", s->tok[0], s->tok[1]);
        if (w != NULL && g != NULL && strncmp(w, g, name_len + 1) != 0) {
            fprintf(out, "fields differ: expected %s, got %s\n", w, g);
            return 1;
        }
        fprintf(out, "%.*s: expected ", (int)name_len, named);
        show(out, w, name_len);
        fputs(", got ", out);
        show(out, g, name_len);
        fputc('\n', out);
        return 1;
    }
    return 0;
}

void rp_refused(const rp_script *s, const char *why, FILE *out)
{
    fprintf(out, "step %s %s: the step: expected taken, got refused: %s\n", s->tok[0],
            s->tok[1], why);
}

int rp_report(const rp_script *s, int code, size_t steps)
{
    if (code == RP_AGREED)
        printf("agreed on %zu steps\n", steps);
    else if (code == RP_MALFORMED)
        fprintf(stderr, "%s\n", s->err);
    else if (code == RP_NOMEM)
        fprintf(stderr, "out of memory\n");
    return code;
}
