/* tiles_amx.c: wavepe_tile_gemm on Intel AMX (tiles.h), compiled with the AMX flags (-mamx-tile
 * -mamx-bf16: the recipe's rule for the amx ISA's files, python/wavepe/_build/recipe.py).  It runs only after
 * tiles.c's detection: the CPU has the tiles, Linux granted their state and the self-check agreed.
 *
 * Eight tile registers, each configured 16 rows x 64 bytes: tmm0-3 accumulate a 2 x 2 block of C
 * (32 x 32 float32), tmm4-5 hold two 16-row slices of A (16 x 32 half elements), tmm6-7 two 16-column
 * slices of B (16 pair rows x 16 columns).  The configuration is per thread and neither caller- nor
 * callee-saved: the first call on a thread loads it, later calls find it loaded (a thread-local flag),
 * and wavepe_tiles_release_amx (the kernels' end, tiles.h) gives the tiles back.  GCC's AMX intrinsics header
 * (before GCC 13) declares no memory operand for tileloadd / tilestored / ldtilecfg, so compiler
 * barriers keep the stores of the operands before the loads, and the loads of C after the stores.
 * tdpfp16ps (AMX-FP16, Granite Rapids) has no intrinsic in GCC 12: it is spelled in bytes, with its
 * fixed registers. */
#include "tiles.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#include <string.h>

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) tile_config;

#define TILE_BARRIER() __asm__ volatile("" ::: "memory")

/* tdpfp16ps tmm(c), tmm(a), tmm(b): VEX.128.F2.0F38.W0 5C /r, ModRM 11 c a, vvvv = ~b */
#define TDPFP16PS_(c, a, b) __asm__ volatile(".byte 0xc4, 0xe2, %c0, 0x5c, %c1" ::"i"(((~(b) & 15) << 3) | 3), \
                                             "i"(0xc0 | ((c) << 3) | (a)))

static _Thread_local int configured; /* this thread's tiles hold tile_config */

void wavepe_tiles_release_amx(void) {
    if (configured) {
        _tile_release();
        configured = 0;
    }
}

int wavepe_tile_gemm_amx(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                         int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (!configured) {
        tile_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette_id = 1;
        for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
        TILE_BARRIER();
        _tile_loadconfig(&cfg);
        configured = 1;
    }
    const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4; /* strides in bytes */
    for (int64_t m = 0; m < M; m += 32) {
        const int two_m = m + 16 < M;
        for (int64_t n = 0; n < N; n += 32) {
            const int two_n = n + 16 < N;
            float *c = C + m * ldc + n;
            TILE_BARRIER();
            if (accumulate) {
                _tile_loadd(0, c, sc);
                if (two_n) _tile_loadd(1, c + 16, sc);
                if (two_m) _tile_loadd(2, c + 16 * ldc, sc);
                if (two_m && two_n) _tile_loadd(3, c + 16 * ldc + 16, sc);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t k = 0; k < K2; k += WAVEPE_TILE_K2) {
                const uint16_t *a = A + m * lda + 2 * k;
                const uint32_t *b = B + k * ldb + n;
                _tile_loadd(4, a, sa);
                if (two_m) _tile_loadd(5, a + 16 * lda, sa);
                _tile_loadd(6, b, sb);
                if (two_n) _tile_loadd(7, b + 16, sb);
                if (type == WAVEPE_TILE_BF16) {
                    _tile_dpbf16ps(0, 4, 6);
                    if (two_n) _tile_dpbf16ps(1, 4, 7);
                    if (two_m) _tile_dpbf16ps(2, 5, 6);
                    if (two_m && two_n) _tile_dpbf16ps(3, 5, 7);
                } else {
                    TDPFP16PS_(0, 4, 6);
                    if (two_n) TDPFP16PS_(1, 4, 7);
                    if (two_m) TDPFP16PS_(2, 5, 6);
                    if (two_m && two_n) TDPFP16PS_(3, 5, 7);
                }
            }
            _tile_stored(0, c, sc);
            if (two_n) _tile_stored(1, c + 16, sc);
            if (two_m) _tile_stored(2, c + 16 * ldc, sc);
            if (two_m && two_n) _tile_stored(3, c + 16 * ldc + 16, sc);
            TILE_BARRIER();
        }
    }
    return 1;
}
#else
int wavepe_tile_gemm_amx(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                         int64_t ldb, float *C, int64_t ldc, int accumulate) {
    (void)type, (void)M, (void)N, (void)K2, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)accumulate;
    return 0; /* no AMX code in this build (SIMDe, or a compiler without -mamx-tile): tiles.c emulates */
}
void wavepe_tiles_release_amx(void) {}
#endif
