/* test_tiles.c: the tile products (tiles.h): the emulation against the instructions' documented semantics
 * written out product by product in double and rounded where they round, bf16 and float16, with
 * denormal, NaN and infinite inputs, strided operands, accumulate or not, several tiles each way; the
 * instructions against the emulation where this CPU has them (else it says so); the mode rules. */
#include <math.h>
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
    static uint16_t a[M * LDA];
    static uint32_t b[K2 * LDB];
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
    for (int acc = 0; acc < 2; ++acc) {
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
        wavepe_tile_gemm_emulated(type, M, N, K2, a, LDA, b, LDB, got, LDC, acc);
        int same = 1;
        for (int i = 0; i < M * LDC; ++i)
            same &= (isnan(got[i]) && isnan(want[i])) || memcmp(&got[i], &want[i], sizeof(float)) == 0;
        CHECK(same);
        int nan_row = 1;
        for (int n = 0; n < N; ++n) nan_row &= isnan(got[40 * LDC + n]);
        CHECK(nan_row);
        /* the dispatcher (the instructions where this CPU has them) agrees with the emulation */
        float via[M * LDC];
        memcpy(via, c0, sizeof via);
        wavepe_tile_gemm(type, M, N, K2, a, LDA, b, LDB, via, LDC, acc);
        same = 1;
        for (int i = 0; i < M * LDC; ++i)
            same &= (isnan(via[i]) && isnan(got[i])) || via[i] == got[i] ||
                    fabsf(via[i] - got[i]) <= 1e-5f * (1.0f + fabsf(got[i]));
        CHECK(same);
    }
}

void test_tiles(void) {
    check_type(WAVEPE_TILE_BF16, 2024);
    check_type(WAVEPE_TILE_F16, 2025);
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
