/* tiles_amx.c: wavepe_tile_gemm on Intel AMX (tiles.h), compiled with the AMX flags (-mamx-tile
 * -mamx-bf16: the recipe's rule for the amx ISA's files, python/wavepe/_build/recipe.py).  It runs only after
 * tiles.c's detection: the CPU has the tiles, Linux granted their state and the self-check agreed.
 *
 * The walk over tiles is tile_loop.h's, shared with the emulation (tiles.c); here its operations are the
 * instructions.  The configuration (eight tiles of 16 rows x 64 bytes) is per thread and neither caller-
 * nor callee-saved: the first call on a thread loads it, later calls find it loaded (a thread-local flag),
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

static void configure(void) {
    if (!configured) {
        tile_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette_id = 1;
        for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
        TILE_BARRIER();
        _tile_loadconfig(&cfg);
        configured = 1;
    }
}

#define TILE_LOOP_FN wavepe_tile_gemm_amx
#define TL_CONFIGURE() configure()
#define TL_ZERO(t) _tile_zero(t)
#define TL_LOAD(t, p, s) _tile_loadd(t, p, s)
#define TL_STORE(t, p, s) _tile_stored(t, p, s)
#define TL_DPBF16(c, a, b) _tile_dpbf16ps(c, a, b)
#define TL_DPFP16(c, a, b) TDPFP16PS_(c, a, b)
#define TL_BARRIER() TILE_BARRIER()
#include "tile_loop.h"
#else
int wavepe_tile_gemm_amx(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                         int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate) {
    (void)type, (void)M, (void)N, (void)K2, (void)A, (void)lda, (void)B, (void)ldb, (void)ldbs, (void)C, (void)ldc, (void)accumulate;
    return 0; /* no AMX code in this build (SIMDe, or a compiler without -mamx-tile): tiles.c emulates */
}
void wavepe_tiles_release_amx(void) {}
#endif
