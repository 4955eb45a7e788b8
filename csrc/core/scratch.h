/* scratch.h: the kernels' large scratch, kept between calls.
 *
 * A fused attention call allocates megabytes per thread at long lengths (its work block, the tiles'
 * block, the packed key/value cache) and its plan the table's packed forms; freed at the call's end,
 * glibc hands blocks that large back to the OS, and the next call -- the next layer, the next step --
 * faults every page in again, zeroed by the kernel: the amx variant at L = 4096, d = 128 took ~800 page
 * faults per thread per call, 4-5 % of its vector time (AVX2 EPYC, the amx code on AVX2 vectors).  Blocks
 * freed here wait in a small process-wide pool (at most WAVEPE_SCRATCH_SLOTS blocks, WAVEPE_SCRATCH_BYTES
 * in all) for the next request they fit (at most twice its size: a large block stays for a large
 * request); what the pool has no room for is freed.  Thread-safe: a spin lock held for a scan of the
 * slots, tried a bounded number of times -- a call that cannot have it soon goes past the pool (a new
 * block; the block freed), so that a process forked while another thread held the lock is not stuck.
 *
 * Contents are not cleared: a block comes back as its last user left it, as memory from malloc may, and
 * callers clear what they read before writing.  Under AddressSanitizer a pooled block is poisoned until it
 * is handed out again, so that a use after free still shows.
 */
#ifndef WAVEPE_SCRATCH_H
#define WAVEPE_SCRATCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WAVEPE_SCRATCH_SLOTS 32
#define WAVEPE_SCRATCH_BYTES ((size_t)64 << 20)

/* At least `bytes` of 64-byte aligned memory (the smallest pooled block that fits, else a new one);
 * NULL when out of memory.  Free with wavepe_scratch_free only. */
void *wavepe_scratch_alloc(size_t bytes);

/* Back to the pool (or, where it has no room, freed).  NULL is ignored. */
void wavepe_scratch_free(void *p);

/* Free every pooled block (tests; a program that wants the memory back).  Does nothing where the pool's
 * lock cannot be had. */
void wavepe_scratch_release(void);

/* How many blocks the pool holds now, and their bytes (tests); 0 and 0 where the lock cannot be had. */
size_t wavepe_scratch_pooled(size_t *bytes);

/* Tests: take the pool's lock and keep it (hold != 0), or release it -- as a child forked while another
 * thread held it finds it. */
void wavepe_scratch_hold_lock(int hold);

#ifdef __cplusplus
}
#endif

#endif
