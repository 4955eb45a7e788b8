/* tiles.c: the tile products' emulation, the detection of AMX tiles and the choice between the two
 * (tiles.h).  No AMX instruction here: those are in tiles_amx.c (compiled with -mamx-*, like the amx
 * ISA's kernel files, which call wavepe_tile_gemm). */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* syscall() under -std=c11 */
#endif
#include "tiles.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "half.h"
#include "xcr0.h"

/* ---- the emulation ------------------------------------------------------------------------------ */

/* A half element as the tile instructions read it: exactly, a denormal as zero. */
static inline float tile_in(int type, uint16_t h) {
    if ((h & (type == WAVEPE_TILE_BF16 ? 0x7F80u : 0x7C00u)) == 0) return 0.0f; /* zero or denormal */
    return type == WAVEPE_TILE_BF16 ? wp_bf16_to_f32(h) : wp_f16_to_f32(h);
}

/* A denormal float32 flushed to a zero of its sign: branch-free, so the loops over a row vectorize. */
static inline float tile_flush(float r) { return fabsf(r) < 0x1p-126f ? r * 0.0f : r; }

/* c + x * y rounded once (the product of two half elements is exact in float32, so a fused
 * multiply-add rounds the same), a denormal result flushed to zero. */
static inline float tile_acc(float c, float x, float y) { return tile_flush(c + x * y); }

void wavepe_tile_gemm_emulated(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                               const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate) {
    enum { NB = 32, KB = 64 }; /* columns x pairs at a time: B's pairs widened once for every row of A */
    float bw[2 * KB * NB], acc[NB];
    for (int64_t n0 = 0; n0 < N; n0 += NB) {
        const int64_t nn = N - n0 < NB ? N - n0 : NB;
        for (int64_t k0 = 0; k0 < K2 || k0 == 0; k0 += KB) {
            const int64_t kk = K2 - k0 < KB ? K2 - k0 : KB, first = k0 == 0;
            for (int64_t k = 0; k < kk; ++k)
                for (int64_t n = 0; n < nn; ++n) {
                    const int64_t col = n0 + n; /* in its 16-column strip */
                    const uint32_t pair = B[wavepe_tile_b_index(k0 + k, col, ldb, ldbs)];
                    bw[(2 * k) * NB + n] = tile_in(type, (uint16_t)(pair & 0xFFFFu));
                    bw[(2 * k + 1) * NB + n] = tile_in(type, (uint16_t)(pair >> 16));
                }
            for (int64_t m = 0; m < M; ++m) {
                for (int64_t n = 0; n < nn; ++n) {
                    const float c = !first || accumulate ? C[m * ldc + n0 + n] : 0.0f;
                    acc[n] = tile_flush(c); /* the accumulator's denormals too */
                }
                for (int64_t k = 0; k < 2 * kk; ++k) { /* the pair's first element, then its second */
                    const float a = tile_in(type, A[m * lda + 2 * k0 + k]);
                    const float *b = bw + k * NB;
                    for (int64_t n = 0; n < nn; ++n) acc[n] = tile_acc(acc[n], a, b[n]);
                }
                for (int64_t n = 0; n < nn; ++n) C[m * ldc + n0 + n] = acc[n];
            }
            if (K2 == 0) break;
        }
    }
}

/* ---- tile_loop.h's walk on emulated tile registers -------------------------------------------------- */

/* A thread's eight tile registers, each 16 rows x 64 bytes (the configuration tiles_amx.c loads). */
typedef struct {
    uint32_t row[16][16];
} emu_tile;
static _Thread_local emu_tile emu[8];

static void emu_load(emu_tile *t, const void *p, int64_t stride) {
    for (int i = 0; i < 16; ++i) memcpy(t->row[i], (const unsigned char *)p + i * stride, 64);
}

static void emu_store(const emu_tile *t, void *p, int64_t stride) {
    for (int i = 0; i < 16; ++i) memcpy((unsigned char *)p + i * stride, t->row[i], 64);
}

/* c += a . b for 16 x 16 float32 c, 16 x 32 half a, 16 pair rows x 16 columns b: what the emulation above
 * does for one tile (the accumulator's denormals read as zero, each product added in turn, the pair's
 * first element first), so a walk of these equals it bit for bit. */
static void emu_dp(int type, emu_tile *c, const emu_tile *a, const emu_tile *b) {
    float bw[32][16];
    for (int k2 = 0; k2 < 16; ++k2)
        for (int n = 0; n < 16; ++n) {
            bw[2 * k2][n] = tile_in(type, (uint16_t)(b->row[k2][n] & 0xFFFFu));
            bw[2 * k2 + 1][n] = tile_in(type, (uint16_t)(b->row[k2][n] >> 16));
        }
    for (int m = 0; m < 16; ++m) {
        float acc[16];
        memcpy(acc, c->row[m], sizeof acc);
        for (int n = 0; n < 16; ++n) acc[n] = tile_flush(acc[n]);
        const uint16_t *ar = (const uint16_t *)a->row[m];
        for (int k = 0; k < 32; ++k) {
            const float x = tile_in(type, ar[k]);
            for (int n = 0; n < 16; ++n) acc[n] = tile_acc(acc[n], x, bw[k][n]);
        }
        memcpy(c->row[m], acc, sizeof acc);
    }
}

#define TILE_LOOP_FN wavepe_tile_gemm_loop_emulated
#define TL_CONFIGURE() ((void)0)
#define TL_ZERO(t) memset(&emu[t], 0, sizeof(emu_tile))
#define TL_LOAD(t, p, s) emu_load(&emu[t], p, s)
#define TL_STORE(t, p, s) emu_store(&emu[t], p, s)
#define TL_DPBF16(c, a, b) emu_dp(WAVEPE_TILE_BF16, &emu[c], &emu[a], &emu[b])
#define TL_DPFP16(c, a, b) emu_dp(WAVEPE_TILE_F16, &emu[c], &emu[a], &emu[b])
#define TL_BARRIER() ((void)0)
#include "tile_loop.h"

/* ---- detection ---------------------------------------------------------------------------------- */

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(WAVEPE_SIMDE_AVX512)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define ARCH_REQ_XCOMP_PERM 0x1023 /* arch_prctl: request a feature's state (0x1022 only reads it) */
#define XFEATURE_XTILEDATA 18

/* The CPU's AMX: bit 0 AMX-TILE + AMX-BF16 with the OS saving the tile state (XCR0 17, 18), bit 1
 * AMX-FP16 too. */
static int cpu_amx(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return 0; /* OSXSAVE: xgetbv */
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned max_sub = eax;
    if (!((edx >> 24) & 1) || !((edx >> 22) & 1)) return 0; /* AMX-TILE, AMX-BF16 */
    if ((wavepe_xcr0() & (3ull << 17)) != (3ull << 17)) return 0;
    int fp16 = 0;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) fp16 = (eax >> 21) & 1;
    return 1 | (fp16 << 1);
}

/* One product of each type with the instructions and the emulation, on values whose every partial sum
 * is exact in float32 (small multiples of 1/8): equal, whatever the order of the additions. */
static int self_check(int type) {
    static uint16_t a[32 * 32];
    static uint32_t b[16 * 32];
    float want[32 * 32], got[32 * 32];
    for (int i = 0; i < 32; ++i)
        for (int k = 0; k < 32; ++k) {
            const float x = (float)((i * 7 + k * 3) % 11 - 5) / 8.0f;
            a[i * 32 + k] = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x);
        }
    for (int k2 = 0; k2 < 16; ++k2)
        for (int n = 0; n < 32; ++n) {
            const float x = (float)((k2 * 5 + n) % 9 - 4) / 8.0f, y = (float)((k2 + 3 * n) % 7 - 3) / 4.0f;
            const uint16_t hx = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x);
            const uint16_t hy = type == WAVEPE_TILE_BF16 ? wp_f32_to_bf16(y) : wp_f32_to_f16(y);
            b[k2 * 32 + n] = (uint32_t)hx | (uint32_t)hy << 16;
        }
    for (int i = 0; i < 32 * 32; ++i) want[i] = got[i] = (float)(i % 5) - 2.0f;
    wavepe_tile_gemm_emulated(type, 32, 32, 16, a, 32, b, 32, 16, want, 32, 1);
    const int ran = wavepe_tile_gemm_amx(type, 32, 32, 16, a, 32, b, 32, 16, got, 32, 1);
    wavepe_tiles_release_amx();
    return ran && memcmp(want, got, sizeof want) == 0;
}

/* bit 0: AMX-BF16 usable, bit 1: AMX-FP16 usable; -1 not decided yet.  why: the refusal. */
static volatile int hardware = -1;
static const char *volatile refusal = NULL;

static int decide(void) {
    const int cpu = cpu_amx();
    if (!cpu) return 0;
#if defined(__linux__)
    /* a tile instruction before this request kills the process (SIGILL): Linux >= 5.16 */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        refusal = "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
        return 0;
    }
#else
    refusal = "wavepe requests the tile state from Linux only";
    return 0;
#endif
    if (!self_check(WAVEPE_TILE_BF16)) {
        refusal = "a tdpbf16ps product differed from its emulation (or this build has no AMX code)";
        return 0;
    }
    return 1 | ((cpu & 2) && self_check(WAVEPE_TILE_F16) ? 2 : 0);
}

static int hardware_bits(void) {
    if (hardware < 0) {
        const int bits = decide();
        if (bits == 0 && refusal != NULL && cpu_amx())
            fprintf(stderr, "wavepe: this CPU has AMX tiles, but %s; the vector kernels run instead\n", refusal);
        hardware = bits;
    }
    return hardware;
}
#else
static int hardware_bits(void) { return 0; }
static const char *const refusal = NULL;
#endif

int wavepe_tiles_hardware(const char **why) {
    const int bits = hardware_bits();
    if (why != NULL) *why = bits ? NULL : refusal;
    return bits & 1;
}

int wavepe_tiles_mode(int type) {
    const int bits = hardware_bits();
    if (bits == 0) return WAVEPE_TILES_EMULATED;
    return (bits >> (type == WAVEPE_TILE_F16 ? 1 : 0)) & 1 ? WAVEPE_TILES_HARDWARE : WAVEPE_TILES_NONE;
}

void wavepe_tiles_release(void) {
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(WAVEPE_SIMDE_AVX512)
    wavepe_tiles_release_amx();
#endif
}

void wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda, const uint32_t *B,
                      int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate) {
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(WAVEPE_SIMDE_AVX512)
    if (wavepe_tiles_mode(type) == WAVEPE_TILES_HARDWARE &&
        wavepe_tile_gemm_amx(type, M, N, K2, A, lda, B, ldb, ldbs, C, ldc, accumulate))
        return;
#endif
    wavepe_tile_gemm_loop_emulated(type, M, N, K2, A, lda, B, ldb, ldbs, C, ldc, accumulate);
}
