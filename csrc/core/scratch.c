/* The kernels' large scratch, kept between calls (scratch.h says why). */
#include "scratch.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "checked.h"

/* Under AddressSanitizer a pooled block is poisoned until it is handed out again: a use after
 * wavepe_scratch_free still shows, as it would with the block freed. */
#if defined(__SANITIZE_ADDRESS__)
#define SCRATCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SCRATCH_ASAN 1
#endif
#endif
#if defined(SCRATCH_ASAN)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* A block is one aligned allocation: a 64-byte header holding its usable size, then the caller's part. */
#define HEADER 64

static void *pooled[WAVEPE_SCRATCH_SLOTS]; /* callers' pointers; NULL: a free slot */
static size_t pooled_total;
static atomic_flag lock = ATOMIC_FLAG_INIT; /* held for a scan of the slots: nanoseconds, once a thread a call */

static size_t usable(const void *p) { return *(const size_t *)(const void *)((const unsigned char *)p - HEADER); }

/* Tries for the lock at most LOCK_TRIES times (a scan of 32 slots takes nanoseconds, so many threads
 * contending wait a microsecond or so): past that the caller does without the pool -- a new block, or
 * the block freed.  So no thread can wait on it for ever: not one whose holder was descheduled on an
 * oversubscribed machine, nor a child process forked while another thread of its parent held it (the
 * child's copy of the lock is never released: there every call goes past the pool). */
#define LOCK_TRIES 4096

static int lock_pool(void) {
    for (int i = 0; i < LOCK_TRIES; ++i)
        if (!atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) return 1;
    return 0;
}

static void unlock_pool(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

void wavepe_scratch_hold_lock(int hold) {
    if (hold) (void)atomic_flag_test_and_set_explicit(&lock, memory_order_acquire);
    else unlock_pool();
}

static void *new_block(size_t bytes) {
    if (bytes > SIZE_MAX - HEADER) return NULL;
    unsigned char *raw = wavepe_aligned_alloc(bytes + HEADER);
    if (raw == NULL) return NULL;
    *(size_t *)(void *)raw = bytes;
    return raw + HEADER;
}

void *wavepe_scratch_alloc(size_t bytes) {
    if (!lock_pool()) return new_block(bytes);
    int best = -1; /* the smallest block that fits and is not more than twice the request */
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS; ++i) {
        const size_t u = pooled[i] != NULL ? usable(pooled[i]) : 0;
        if (pooled[i] != NULL && u >= bytes && u / 2 <= bytes && (best < 0 || u < usable(pooled[best]))) best = i;
    }
    void *p = NULL;
    if (best >= 0) {
        p = pooled[best];
        pooled[best] = NULL;
        pooled_total -= usable(p);
    }
    unlock_pool();
    if (p != NULL) {
        UNPOISON(p, usable(p));
        return p;
    }
    return new_block(bytes);
}

void wavepe_scratch_free(void *p) {
    if (p == NULL) return;
    const size_t size = usable(p);
    int keep = 0;
    POISON(p, size); /* before it is in the pool: from there another thread may take it */
    if (lock_pool()) {
        int slot = -1;
        for (int i = 0; i < WAVEPE_SCRATCH_SLOTS && slot < 0; ++i)
            if (pooled[i] == NULL) slot = i;
        keep = slot >= 0 && size <= WAVEPE_SCRATCH_BYTES - pooled_total;
        if (keep) {
            pooled[slot] = p;
            pooled_total += size;
        }
        unlock_pool();
    }
    if (keep) return;
    UNPOISON(p, size);
    wavepe_aligned_free((unsigned char *)p - HEADER);
}

void wavepe_scratch_release(void) {
    void *drop[WAVEPE_SCRATCH_SLOTS];
    if (!lock_pool()) return;
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS; ++i) drop[i] = pooled[i], pooled[i] = NULL;
    pooled_total = 0;
    unlock_pool();
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS; ++i)
        if (drop[i] != NULL) {
            UNPOISON(drop[i], usable(drop[i]));
            wavepe_aligned_free((unsigned char *)drop[i] - HEADER);
        }
}

size_t wavepe_scratch_pooled(size_t *bytes) {
    size_t n = 0;
    if (bytes != NULL) *bytes = 0;
    if (!lock_pool()) return 0;
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS; ++i) n += pooled[i] != NULL;
    if (bytes != NULL) *bytes = pooled_total;
    unlock_pool();
    return n;
}
