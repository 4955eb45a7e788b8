/* tiles.h: the matrix products of the amx ISA, behind one small interface with two implementations.
 *
 * Intel AMX (Sapphire, Emerald, Granite Rapids) holds 8 tile registers of up to 16 rows x 64 bytes;
 * tdpbf16ps (AMX-BF16) and tdpfp16ps (AMX-FP16, Granite Rapids) add to a 16 x 16 float32 tile C the
 * products of a 16 x 32 tile A of bf16 / float16 elements and a 32 x 16 tile B stored as pairs of
 * its rows ("VNNI": B[k2][n] holds rows 2 k2 and 2 k2 + 1 of column n in one 32-bit element).
 *
 *   wavepe_tile_gemm   C (+)= A . B  for M x N blocks of 16 x 16 tiles and K2 pairs of K
 *
 * walks the tiles of C one way (tile_loop.h: 2 x 2 accumulator tiles, A and B tiles loaded straight from the
 * caller's strided operands), with either the AMX instructions (tiles_amx.c) or a portable emulation of
 * them (tiles.c) as its tile operations.  The emulation follows the documented semantics: each product
 * of two half elements is exact in float32 (8- or 11-bit significands), added to the float32
 * accumulator one product at a time, the pair's first element first, rounding to nearest even; denormal
 * inputs read as zero and denormal results are flushed to zero.  Which one runs is decided once per
 * process (wavepe_tiles_mode): the instructions where the CPU has them, the OS grants them (arch_prctl
 * ARCH_REQ_XCOMP_PERM) and a start-up self-check agrees with the plain emulation below; the emulated
 * tile operations otherwise, so the amx ISA's kernels run -- slowly, for the tests, through the same
 * walk as the hardware's -- on every CPU that runs avx512bf16, where it is never the default (isa.c).
 *
 * Operands: A row-major half elements, lda elements between rows, 2 * K2 columns; B uint32 pairs, N
 * columns in strips of 16: pair k of column n at B[k * ldb + n / 16 * ldbs + n % 16] -- row-major with
 * ldbs = 16, or strip after strip with ldb = 16 (each strip's tiles then whole 1 KiB blocks, one after
 * another along K: a tile load reads 16 consecutive cache lines, where a row-major B of 256 or more
 * columns spread them a KiB or more apart -- S's products ran 15.5 against 13.0 ns a product in a
 * microbenchmark on an Emerald Rapids, P V's 14 against 11.4-13); C float32, ldc elements between rows.
 * M and N are multiples of 16, K2 of 16 (32 half elements); pad operands with zeros.
 */
#ifndef WAVEPE_TILES_H
#define WAVEPE_TILES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { WAVEPE_TILE_BF16 = 0, WAVEPE_TILE_F16 = 1 };
/* How a tile type's products run: none (no tiles for it: the caller's vector path), the AMX
 * instructions, or their emulation. */
enum { WAVEPE_TILES_NONE = 0, WAVEPE_TILES_HARDWARE = 1, WAVEPE_TILES_EMULATED = 2 };

#define WAVEPE_TILE_ROWS 16 /* rows of A and C tiles, columns of B and C tiles */
#define WAVEPE_TILE_K2 16   /* pairs of K per tile (32 half elements = 64 bytes) */

/* Where pair k of column n of a B operand lies (ldb, ldbs as wavepe_tile_gemm takes them): the layout
 * stated once, for the walk, the emulation and the code that packs operands. */
static inline int64_t wavepe_tile_b_index(int64_t k, int64_t n, int64_t ldb, int64_t ldbs) {
    return k * ldb + n / WAVEPE_TILE_ROWS * ldbs + n % WAVEPE_TILE_ROWS;
}

/* C[m][n] = (accumulate ? C[m][n] : 0) + sum_k A[m][k] B[k][n], m < M, n < N, k < 2 K2. */
void wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                      int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);

/* Give the calling thread's tile state back (tilerelease) where its products loaded the tile
 * configuration: wavepe_tile_gemm leaves it loaded between calls (ldtilecfg cost a twentieth of the
 * products' time when loaded per call), so a kernel calls this when it finishes.  A no-op otherwise. */
void wavepe_tiles_release(void);

/* The emulation, whatever the CPU, as a plain product (the reference: tests and the self-check compare the
 * others with it). */
void wavepe_tile_gemm_emulated(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                               const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);

/* tile_loop.h's walk on emulated tile registers: what wavepe_tile_gemm runs without the instructions;
 * equal to wavepe_tile_gemm_emulated bit for bit, and reading and writing exactly what the instructions'
 * walk reads and writes (so a sanitizer checks the hardware's accesses too).  Returns 1. */
int wavepe_tile_gemm_loop_emulated(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                                   const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);

/* WAVEPE_TILES_HARDWARE, _EMULATED or _NONE for a tile type: hardware where usable; where the CPU has
 * AMX but not this type (AMX-FP16 before Granite Rapids), none (the vector kernels are faster than
 * an emulation); emulated on CPUs without AMX.  Decided once (thread-safe, idempotent). */
int wavepe_tiles_mode(int type);

/* Whether this CPU's AMX tiles (AMX-TILE and AMX-BF16) are usable: cpuid, XCR0, the OS permission and
 * the self-check; *why (may be NULL) gets a sentence when they are present but refused. */
int wavepe_tiles_hardware(const char **why);

#if defined(__x86_64__) || defined(_M_X64)
/* tiles_amx.c: the instructions (0 when this build has no AMX code: a SIMDe test build). */
int wavepe_tile_gemm_amx(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                         int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);
void wavepe_tiles_release_amx(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
