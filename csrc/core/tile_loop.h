/* tile_loop.h: wavepe_tile_gemm's walk over tiles (tiles.h), written once against the tile operations
 * its includer defines: the AMX instructions (tiles_amx.c) or their emulation on a thread's emulated tile
 * registers (tiles.c).  So the loop the hardware runs -- its blocking, edges, strides and the order of its
 * operations -- is the loop every CPU's tests run, and a change to it can be checked without AMX.
 *
 * Eight tile registers, each configured 16 rows x 64 bytes: tmm0-3 accumulate a 2 x 2 block of C
 * (32 x 32 float32), tmm4-5 hold two 16-row slices of A (16 x 32 half elements), tmm6-7 two 16-column
 * slices of B (16 pair rows x 16 columns).
 *
 * The includer defines, then includes this file (once):
 *   TILE_LOOP_FN                  the function's name (declared in tiles.h)
 *   TL_CONFIGURE()                this thread's tiles hold that configuration (loaded if they do not)
 *   TL_ZERO(t)                    tile t = 0
 *   TL_LOAD(t, p, s) / TL_STORE   16 rows of 64 bytes from / to p, s bytes apart
 *   TL_DPBF16(c, a, b), TL_DPFP16 tdpbf16ps / tdpfp16ps: tile c += tile a . tile b (constant tile numbers)
 *   TL_BARRIER()                  a compiler barrier where the operations' memory effects are not declared */
#if !defined(TILE_LOOP_FN)
#error "define TILE_LOOP_FN and the TL_* operations before including tile_loop.h"
#endif

int TILE_LOOP_FN(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B, int64_t ldb, int64_t ldbs,
                 float *C, int64_t ldc, int accumulate) {
    TL_CONFIGURE();
    const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4; /* strides in bytes */
    for (int64_t m = 0; m < M; m += 32) {
        const int two_m = m + 16 < M;
        for (int64_t n = 0; n < N; n += 32) {
            const int two_n = n + 16 < N;
            float *c = C + m * ldc + n;
            TL_BARRIER();
            if (accumulate) {
                TL_LOAD(0, c, sc);
                if (two_n) TL_LOAD(1, c + 16, sc);
                if (two_m) TL_LOAD(2, c + 16 * ldc, sc);
                if (two_m && two_n) TL_LOAD(3, c + 16 * ldc + 16, sc);
            } else {
                TL_ZERO(0);
                TL_ZERO(1);
                TL_ZERO(2);
                TL_ZERO(3);
            }
            for (int64_t k = 0; k < K2; k += WAVEPE_TILE_K2) {
                const uint16_t *a = A + m * lda + 2 * k;
                const uint32_t *b = B + wavepe_tile_b_index(k, n, ldb, ldbs);
                TL_LOAD(4, a, sa);
                if (two_m) TL_LOAD(5, a + 16 * lda, sa);
                TL_LOAD(6, b, sb);
                if (two_n) TL_LOAD(7, b + ldbs, sb);
                if (type == WAVEPE_TILE_BF16) {
                    TL_DPBF16(0, 4, 6);
                    if (two_n) TL_DPBF16(1, 4, 7);
                    if (two_m) TL_DPBF16(2, 5, 6);
                    if (two_m && two_n) TL_DPBF16(3, 5, 7);
                } else {
                    TL_DPFP16(0, 4, 6);
                    if (two_n) TL_DPFP16(1, 4, 7);
                    if (two_m) TL_DPFP16(2, 5, 6);
                    if (two_m && two_n) TL_DPFP16(3, 5, 7);
                }
            }
            TL_STORE(0, c, sc);
            if (two_n) TL_STORE(1, c + 16, sc);
            if (two_m) TL_STORE(2, c + 16 * ldc, sc);
            if (two_m && two_n) TL_STORE(3, c + 16 * ldc + 16, sc);
            TL_BARRIER();
        }
    }
    return 1;
}
