/* Allocation failure on demand, for tests: linked into a test build of an engine with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc, so that the engine's
 * allocations come here. Disarmed, each one goes to the C library. Armed with
 * vs_fault_alloc_after(n), the next n succeed and the one after fails (NULL, errno ENOMEM),
 * once; vs_fault_alloc_left() is then -1, or still >= 0 where fewer allocations came.
 *
 * Not an engine: the countdown is process state, as the allocator it stands in for is. The
 * installed modules never link this file. */
#include <errno.h>
#include <stddef.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);

void vs_fault_alloc_after(long n);
long vs_fault_alloc_left(void);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);

static long left = -1;      /* allocations to let through before the failure; -1: disarmed */

void vs_fault_alloc_after(long n) { left = n < 0 ? -1 : n; }

long vs_fault_alloc_left(void) { return left; }

/* Whether this allocation is the one to fail. */
static int fails(void)
{
    if (left < 0)
        return 0;
    if (left-- > 0)
        return 0;
    errno = ENOMEM;
    return 1;
}

void *__wrap_malloc(size_t size) { return fails() ? NULL : __real_malloc(size); }

void *__wrap_calloc(size_t n, size_t size) { return fails() ? NULL : __real_calloc(n, size); }

void *__wrap_realloc(void *p, size_t size) { return fails() ? NULL : __real_realloc(p, size); }

void *__wrap_aligned_alloc(size_t align, size_t size)
{
    return fails() ? NULL : __real_aligned_alloc(align, size);
}
