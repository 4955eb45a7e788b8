/* test_tiles.c: the tile products (tiles.h): the emulation against the instructions' documented semantics
 * written out product by product in double and rounded where they round, bf16 and float16, with
 * denormal, NaN and infinite inputs, strided operands, accumulate or not, several tiles each way; the
 * instructions' walk over tiles (tile_loop.h) on emulated tile registers against the plain emulation, every
 * kind of edge; the instructions against the emulation where this CPU has them (else it says so); the mode
 * rules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../half.h"
#include "../tiles.h"
#include "harness.h"

/* The semantics as the documentation states them, without the emulation's code: each product of two half
 * values (denormals read as zero) is exact, added to the float32 accumulator one at a time, rounded to
 * nearest even, a denormal result flushed to zero. */
static float oracle_in(int type, uint16_t h) {
    if ((h & (type == WAVEPE_TILE_BF16 ? 0x7F80u : 0x7C00u)) == 0) return 0.0f;
    return type == WAVEPE_TILE_BF16 ? wp_bf16_to_f32(h) : wp_f16_to_f32(h);
}

static float oracle_add(float c, float x, float y) {
    const double exact = (double)x * (double)y; /* exact: two 11-bit significands */
    const float r = (float)((double)c + exact);  /* one rounding: |c + exact| fits double exactly here */
    return fabsf(r) < 0x1p-126f ? r * 0.0f : r;
}

static void check_type(int type, unsigned long long seed) {
    enum { M = 48, N = 80, K2 = 32, LDA = 70, LDB = 90, LDC = 85 }; /* 3 x 5 tiles, 2 K steps, strides past them */
    enum { SS = 16 * K2 + 24 };                                       /* B strip after strip, a gap between */
    static uint16_t a[M * LDA];
    static uint32_t b[K2 * LDB], bs[N / 16 * SS];
    static float c0[M * LDC], got[M * LDC], want[M * LDC];
    for (int i = 0; i < M * LDA; ++i) {
        const double x = test_uniform(&seed, -2, 2);
        a[i] = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16((float)x) : wp_f32_to_f16((float)x);
    }
    for (int i = 0; i < K2 * LDB; ++i) {
        const float x = (float)test_uniform(&seed, -2, 2), y = (float)test_uniform(&seed, -2, 2);
        const uint16_t hx = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x);
        const uint16_t hy = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(y) : wp_f32_to_f16(y);
        b[i] = (uint32_t)hx | (uint32_t)hy << 16;
    }
    /* planted: a denormal input (read as zero), a NaN, an infinity, a denormal accumulator */
    a[3 * LDA + 5] = 0x0001;                                                  /* denormal */
    a[40 * LDA + 7] = type == WAVEPE_TILE_BF16 ? 0x7FC0 : 0x7E00;             /* NaN: row 40 NaN */
    b[9 * LDB + 17] = (uint32_t)(type == WAVEPE_TILE_BF16 ? 0x7F80u : 0x7C00u); /* inf: column 17 */
    for (int i = 0; i < M * LDC; ++i) c0[i] = (float)test_uniform(&seed, -1, 1);
    c0[2 * LDC + 3] = 0x1p-130f;
    memset(bs, 0xFF, sizeof bs); /* NaN pairs in the gaps: read, they would show */
    for (int k = 0; k < K2; ++k)
        for (int n = 0; n < N; ++n) bs[n / 16 * SS + k * 16 + n % 16] = b[k * LDB + n];
    for (int run = 0; run < 4; ++run) {
        /* B row-major (ldbs 16) or strip after strip (ldb 16): the same matrix, the same bits */
        const int acc = run % 2, strips = run / 2;
        const uint32_t *bb = strips ? bs : b;
        const int64_t ldb = strips ? 16 : LDB, ldbs = strips ? SS : 16;
        memcpy(got, c0, sizeof got);
        memcpy(want, c0, sizeof want);
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
                float c = acc ? want[m * LDC + n] : 0.0f;
                if (fabsf(c) < 0x1p-126f) c *= 0.0f;
                for (int k = 0; k < K2; ++k) {
                    c = oracle_add(c, oracle_in(type, a[m * LDA + 2 * k]), oracle_in(type, (uint16_t)(b[k * LDB + n] & 0xFFFF)));
                    c = oracle_add(c, oracle_in(type, a[m * LDA + 2 * k + 1]), oracle_in(type, (uint16_t)(b[k * LDB + n] >> 16)));
                }
                want[m * LDC + n] = c;
            }
        wavepe_tile_gemm_emulated(type, M, N, K2, a, LDA, bb, ldb, ldbs, got, LDC, acc);
        int same = 1;
        for (int i = 0; i < M * LDC; ++i)
            same &= (isnan(got[i]) && isnan(want[i])) || memcmp(&got[i], &want[i], sizeof(float)) == 0;
        CHECK(same);
        int nan_row = 1;
        for (int n = 0; n < N; ++n) nan_row &= isnan(got[40 * LDC + n]);
        CHECK(nan_row);
        /* the hardware's walk (tile_loop.h) on emulated tile registers: the same bits */
        float walk[M * LDC];
        memcpy(walk, c0, sizeof walk);
        wavepe_tile_gemm_loop_emulated(type, M, N, K2, a, LDA, bb, ldb, ldbs, walk, LDC, acc);
        same = 1;
        for (int i = 0; i < M * LDC; ++i)
            same &= (isnan(walk[i]) && isnan(got[i])) || memcmp(&walk[i], &got[i], sizeof(float)) == 0;
        CHECK(same);
        /* the dispatcher (the instructions where this CPU has them) agrees with the emulation */
        float via[M * LDC];
        memcpy(via, c0, sizeof via);
        wavepe_tile_gemm(type, M, N, K2, a, LDA, bb, ldb, ldbs, via, LDC, acc);
        same = 1;
        for (int i = 0; i < M * LDC; ++i)
            same &= (isnan(via[i]) && isnan(got[i])) || via[i] == got[i] ||
                    fabsf(via[i] - got[i]) <= 1e-5f * (1.0f + fabsf(got[i]));
        CHECK(same);
    }
}

/* tile_loop.h's walk over every kind of edge (one or two tiles of C each way in its last block, one to six
 * K steps -- so that a walk splitting the rows by K finds them split --, accumulate or not, strides past the
 * operands), on emulated tile registers against the plain emulation, bit for bit; operands allocated to the
 * last element the walk may read or write, so that a sanitizer build catches an access past them -- the
 * accesses the instructions make too. */
static void check_walk(int type, unsigned long long seed) {
    static const int64_t ms[] = {16, 32, 48, 80}, ns[] = {16, 32, 48, 112}, ks[] = {16, 32, 48, 96};
    for (int im = 0; im < 4; ++im)
        for (int in = 0; in < 4; ++in)
            for (int ik = 0; ik < 4; ++ik)
                for (int run = 0; run < 4; ++run) {
                    /* B row-major, or strip after strip (a gap between strips) */
                    const int acc = run % 2, strips = run / 2;
                    const int64_t M = ms[im], N = ns[in], K2 = ks[ik];
                    const int64_t lda = 2 * K2 + 8 * ik, ldc = N + 3 * im + acc;
                    const int64_t ldb = strips ? 16 : N + 4 * in, ldbs = strips ? 16 * K2 + 4 * in : 16;
                    const size_t na = (size_t)((M - 1) * lda + 2 * K2),
                                 nb = (size_t)((K2 - 1) * ldb + (N - 16) / 16 * ldbs + 16),
                                 nc = (size_t)((M - 1) * ldc + N);
                    uint16_t *a = malloc(na * sizeof *a);
                    uint32_t *b = malloc(nb * sizeof *b);
                    float *want = malloc(nc * sizeof *want), *got = malloc(nc * sizeof *got);
                    if (!a || !b || !want || !got) {
                        CHECK(0);
                        return;
                    }
                    for (size_t i = 0; i < na; ++i) {
                        const float x = (float)test_uniform(&seed, -2, 2);
                        a[i] = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x);
                    }
                    for (size_t i = 0; i < nb; ++i) {
                        const float x = (float)test_uniform(&seed, -2, 2), y = (float)test_uniform(&seed, -2, 2);
                        b[i] = (uint32_t)(type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x)) |
                               (uint32_t)(type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(y) : wp_f32_to_f16(y)) << 16;
                    }
                    for (size_t i = 0; i < nc; ++i) want[i] = got[i] = (float)test_uniform(&seed, -1, 1);
                    wavepe_tile_gemm_emulated(type, M, N, K2, a, lda, b, ldb, ldbs, want, ldc, acc);
                    wavepe_tile_gemm_loop_emulated(type, M, N, K2, a, lda, b, ldb, ldbs, got, ldc, acc);
                    CHECK(memcmp(want, got, nc * sizeof *got) == 0);
                    free(a), free(b), free(want), free(got);
                }
}

void test_tiles(void) {
    check_type(WAVEPE_TILE_BF16, 2024);
    check_type(WAVEPE_TILE_F16, 2025);
    check_walk(WAVEPE_TILE_BF16, 2026);
    check_walk(WAVEPE_TILE_F16, 2027);
    /* the modes: emulated everywhere without the instructions; with them, bf16 on the instructions and
     * float16 only where AMX-FP16 is there too (else the vector kernels) */
    const char *why = NULL;
    const int hw = wavepe_tiles_hardware(&why);
    CHECK(hw || wavepe_tiles_mode(WAVEPE_TILE_BF16) == WAVEPE_TILES_EMULATED);
    CHECK(!hw || wavepe_tiles_mode(WAVEPE_TILE_BF16) == WAVEPE_TILES_HARDWARE);
    CHECK(!hw || wavepe_tiles_mode(WAVEPE_TILE_F16) != WAVEPE_TILES_EMULATED);
    printf("  tiles: %s\n", hw ? "AMX instructions (compared with the emulation)"
                               : why != NULL ? why : "no AMX on this CPU: the emulation only");
}
