/* The textbook matcher as a bench_match baseline: a posted-receive list and an unexpected-
 * message list, each walked from its head for the first entry that matches. */

#include "match_bench.h"

#include <stdlib.h>

struct entry {
    int src, tag;              /* a receive's src may be BENCH_ANY */
    int64_t value;             /* an unexpected message's payload */
    int64_t *dst;              /* a posted receive's buffer */
    struct entry *next;
};

struct list {
    struct entry *head, **tail;
};

struct listwalk {
    struct list posted, unexpected;
    struct entry *free;        /* entries are recycled: no allocation once warm */
    size_t completed;
};

static void list_init(struct list *l)
{
    l->head = NULL;
    l->tail = &l->head;
}

static void *lw_open(char *err, size_t len)
{
    struct listwalk *w = calloc(1, sizeof *w);

    if (w == NULL) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    list_init(&w->posted);
    list_init(&w->unexpected);
    return w;
}

static struct entry *take(struct listwalk *w)
{
    struct entry *e = w->free;

    if (e != NULL)
        w->free = e->next;
    else
        e = malloc(sizeof *e);
    return e;
}

static void append(struct list *l, struct entry *e)
{
    e->next = NULL;
    *l->tail = e;
    l->tail = &e->next;
}

/* unlink the entry that *link points at */
static struct entry *unlink_at(struct list *l, struct entry **link)
{
    struct entry *e = *link;

    *link = e->next;
    if (l->tail == &e->next)
        l->tail = link;
    return e;
}

static int lw_recv(void *ctx, int src, int tag, int64_t *dst, char *err, size_t len)
{
    struct listwalk *w = ctx;
    struct entry *e;

    for (struct entry **p = &w->unexpected.head; *p != NULL; p = &(*p)->next) {
        if ((*p)->tag == tag && (src == BENCH_ANY || (*p)->src == src)) {
            e = unlink_at(&w->unexpected, p);
            *dst = e->value;
            e->next = w->free;
            w->free = e;
            w->completed++;
            return 0;
        }
    }
    if ((e = take(w)) == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    e->src = src;
    e->tag = tag;
    e->dst = dst;
    append(&w->posted, e);
    return 0;
}

static int lw_send(void *ctx, int src, int tag, int64_t value, char *err, size_t len)
{
    struct listwalk *w = ctx;
    struct entry *e;

    for (struct entry **p = &w->posted.head; *p != NULL; p = &(*p)->next) {
        if ((*p)->tag == tag && ((*p)->src == BENCH_ANY || (*p)->src == src)) {
            e = unlink_at(&w->posted, p);
            *e->dst = value;
            e->next = w->free;
            w->free = e;
            w->completed++;
            return 0;
        }
    }
    if ((e = take(w)) == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    e->src = src;
    e->tag = tag;
    e->value = value;
    append(&w->unexpected, e);
    return 0;
}

static int lw_wait(void *ctx, size_t expected, char *err, size_t len)
{
    struct listwalk *w = ctx;

    if (w->completed < expected) {
        snprintf(err, len, "list walk: %zu of %zu receives completed", w->completed, expected);
        return -1;
    }
    return 0;
}

static void release(struct listwalk *w, struct list *l)
{
    while (l->head != NULL) {
        struct entry *e = unlink_at(l, &l->head);
        e->next = w->free;
        w->free = e;
    }
}

static void lw_reset(void *ctx)
{
    struct listwalk *w = ctx;

    release(w, &w->posted);
    release(w, &w->unexpected);
    w->completed = 0;
}

static void lw_close(void *ctx)
{
    struct listwalk *w = ctx;

    lw_reset(w);
    while (w->free != NULL) {
        struct entry *e = w->free;
        w->free = e->next;
        free(e);
    }
    free(w);
}

const struct matcher bench_listwalk = {
    "listwalk", lw_open, lw_recv, lw_send, lw_wait, lw_reset, lw_close,
};
