/* test_scratch.c: the scratch pool (scratch.h) -- blocks reused for requests they fit (at most twice
 * their size), its slot and byte limits, release; that an attention call's scratch goes back to it; and
 * that a lock nobody releases (a child forked while its parent's other thread held it) is gone past. */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../attention.h"
#include "../scratch.h"
#include "harness.h"

void test_scratch(void);

/* A float32 causal forward (one head, 64 x 16) on the CPU's best ISA; returns its status, and whether
 * its output came out finite. */
static int attention_call(int *finite) {
    enum { L = 64, D = 16 };
    static float q[L * D], out[L * D], lse[L], table[2 * L * D];
    for (int i = 0; i < L * D; ++i) q[i] = (float)((i * 37) % 11) / 11.0f - 0.5f, out[i] = NAN;
    for (int i = 0; i < 2 * L * D; ++i) table[i] = (float)((i * 13) % 7) / 70.0f;
    wavepe_attention_args a = wavepe_attention_args_defaults();
    a.dtype = WAVEPE_F32;
    a.batch = 1, a.heads = 1, a.kv_heads = 1, a.m = L, a.n = L, a.d = D, a.causal = 1, a.scale = 0.25;
    a.q = q, a.k = q, a.v = q, a.out = out, a.lse = lse;
    a.table = table, a.table_rows = 2 * L, a.r_lo = -L;
    const int64_t strides[3] = {L * D, L * D, D};
    memcpy(a.q_strides, strides, sizeof strides), memcpy(a.k_strides, strides, sizeof strides);
    memcpy(a.v_strides, strides, sizeof strides), memcpy(a.out_strides, strides, sizeof strides);
    wavepe_attention_plan *p = NULL;
    int status = wavepe_attention_fwd_plan(wavepe_cpu_isa(), &a, &p, NULL);
    if (status != WAVEPE_OK) return status;
    for (int phase = 0; phase < 2 && status == WAVEPE_OK; ++phase)
        status = wavepe_attention_run(p, phase, 0, wavepe_attention_units(p, phase));
    wavepe_attention_plan_free(p);
    *finite = 1;
    for (int i = 0; i < L * D; ++i) *finite &= isfinite(out[i]) != 0;
    return status;
}

/* The vector kernels' plan and thread scratch come from the pool and go back to it. */
static void attention_returns_scratch(void) {
    wavepe_scratch_release();
    for (int call = 0; call < 2; ++call) {
        int finite = 0;
        CHECK(attention_call(&finite) == WAVEPE_OK && finite);
        /* the table's packed forms and the work block at least; the second call takes them again */
        CHECK(wavepe_scratch_pooled(NULL) >= 2);
    }
    wavepe_scratch_release();
}

/* The pool's lock held and never released: calls go past the pool, in this process and in a child
 * forked meanwhile (which an unbounded spin would hang: the child is killed after 60 s). */
static void lock_never_released(void) {
    wavepe_scratch_release();
    wavepe_scratch_hold_lock(1);
    unsigned char *a = wavepe_scratch_alloc(1000);
    CHECK(a != NULL && (uintptr_t)a % 64 == 0);
    if (a != NULL) memset(a, 3, 1000);
    wavepe_scratch_free(a); /* freed, not pooled */
    wavepe_scratch_release();
    int finite = 0;
    CHECK(attention_call(&finite) == WAVEPE_OK && finite);
    fflush(NULL);
    const pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(60);
        int ok = 1;
        for (int call = 0; call < 3; ++call) ok &= attention_call(&finite) == WAVEPE_OK && finite;
        _exit(ok ? 0 : 1);
    }
    wavepe_scratch_hold_lock(0);
    CHECK(wavepe_scratch_pooled(NULL) == 0); /* nothing went into the pool while it was held */
    if (child > 0) {
        int st = 0;
        CHECK(waitpid(child, &st, 0) == child);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

void test_scratch(void) {
    wavepe_scratch_release();
    size_t bytes = 1;
    CHECK(wavepe_scratch_pooled(&bytes) == 0 && bytes == 0);

    /* reused for a request it fits, aligned, usable to its whole size */
    unsigned char *a = wavepe_scratch_alloc(1000);
    CHECK(a != NULL && (uintptr_t)a % 64 == 0);
    memset(a, 1, 1000);
    wavepe_scratch_free(a);
    CHECK(wavepe_scratch_pooled(&bytes) == 1 && bytes == 1000);
    unsigned char *b = wavepe_scratch_alloc(900);
    CHECK(b == a);
    memset(b, 2, 1000);
    CHECK(wavepe_scratch_pooled(NULL) == 0);
    /* not for a larger request, nor for one under half its size */
    wavepe_scratch_free(b);
    unsigned char *c = wavepe_scratch_alloc(1001), *e = wavepe_scratch_alloc(499);
    CHECK(c != a && e != a && c != NULL && e != NULL);
    CHECK(wavepe_scratch_pooled(NULL) == 1);
    /* the smallest block that fits */
    wavepe_scratch_free(c);
    wavepe_scratch_free(e);
    CHECK(wavepe_scratch_pooled(&bytes) == 3 && bytes == 1000 + 1001 + 499);
    CHECK(wavepe_scratch_alloc(990) == a);
    CHECK(wavepe_scratch_alloc(990) == c);
    wavepe_scratch_free(a);
    wavepe_scratch_free(c);
    wavepe_scratch_release();
    CHECK(wavepe_scratch_pooled(&bytes) == 0 && bytes == 0);

    /* at most WAVEPE_SCRATCH_SLOTS blocks: the rest freed */
    void *many[WAVEPE_SCRATCH_SLOTS + 3];
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS + 3; ++i) many[i] = wavepe_scratch_alloc(64);
    for (int i = 0; i < WAVEPE_SCRATCH_SLOTS + 3; ++i) wavepe_scratch_free(many[i]);
    CHECK(wavepe_scratch_pooled(NULL) == WAVEPE_SCRATCH_SLOTS);
    wavepe_scratch_release();
    /* at most WAVEPE_SCRATCH_BYTES in all */
    void *big = wavepe_scratch_alloc(WAVEPE_SCRATCH_BYTES / 2 + 1), *big2 = wavepe_scratch_alloc(WAVEPE_SCRATCH_BYTES / 2 + 1);
    CHECK(big != NULL && big2 != NULL);
    wavepe_scratch_free(big);
    wavepe_scratch_free(big2);
    CHECK(wavepe_scratch_pooled(&bytes) == 1 && bytes == WAVEPE_SCRATCH_BYTES / 2 + 1);
    wavepe_scratch_release();
    wavepe_scratch_free(NULL);
    CHECK(wavepe_scratch_pooled(NULL) == 0);
    if (wavepe_cpu_isa() != WAVEPE_ISA_SCALAR) attention_returns_scratch(); /* the vector kernels' scratch */
    lock_never_released();
}
