/* rope_avx2.c: RoPE on AVX2+FMA vectors (8 floats / 4 doubles).
 *
 * Same rows and tables as the scalar kernels (rope_rows.h).  Per row:
 *   1. the cos/sin table of its positions: angles pos * inv_freq in double,
 *      a vector sincos (vecmath_avx2.h; libm beyond its argument range),
 *      times scale, sin negated for the inverse;
 *   2. a sequential sweep over every head of q and k: two loads, two FMAs and
 *      two stores per vector, so the op runs at memory speed.
 * In layout INTERLEAVED the table holds one entry per element,
 * c = (cos, cos), s = (-sin, +sin) per pair, so that
 * y = x * c + swap_adjacent(x) * s is one shuffle and one FMA per vector.
 * Every output element is a*c - round(b*s) or b*c + round(a*s) with one fused
 * rounding, in the vector body and in the scalar tails alike.
 * The kernel is written once in rope_avx2_tmpl.h; this file supplies the
 * vector operations of float32 (8 lanes) and float64 (4 lanes).
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "rope.h"
#include "rope_rows.h"
#include "vecmath_avx2.h"

#define BLOCK WAVEPE_ROPE_POS_BLOCK
#define CHUNK WAVEPE_ROPE_PAIR_CHUNK

/* ---- large inputs ----------------------------------------------------- */

/* Inputs this large stream from memory; each head's run of block rows starts
 * on fresh pages, so the next head's row is prefetched while the current one
 * is rotated (below).  Stores stay ordinary: non-temporal stores were ~10%
 * faster into reused output memory, but 10-20% slower into freshly mapped
 * pages (the kernel zeroes them through the cache, and a streaming store
 * then evicts those dirty lines: two writes per line), which is what a large
 * torch.empty from glibc's allocator hands out on every call. */
#define LARGE_MIN_BYTES ((int64_t)32 << 20)

static int is_large(const wavepe_rope_args *a, int64_t elem) {
    const double bytes = (double)a->batch * (double)(a->q.heads + a->k.heads) * (double)a->len *
                         (double)a->head_dim * (double)elem;
    return bytes >= (double)LARGE_MIN_BYTES;
}

/* The head vector (b, h + 1, l), or the first k head after the last q head:
 * prefetched while (b, h, l) is rotated, so that each head's run of block
 * rows (a new pair of pages) starts warm instead of waiting for the hardware
 * prefetcher to pick the new stream up (up to ~10% in A/B runs into reused
 * output memory; within the noise into fresh pages). */
static inline void prefetch_next_head(const wavepe_rope_args *a, int t, int64_t b, int64_t h, int64_t l,
                                      int64_t elem) {
    const wavepe_rope_tensor *ten = t == 0 ? &a->q : &a->k;
    const char *next;
    if (h + 1 < ten->heads) next = (const char *)ten->in + rope_in_at(ten, b, h + 1, l) * elem;
    else if (t == 0 && a->k.heads > 0) next = (const char *)a->k.in + rope_in_at(&a->k, b, 0, l) * elem;
    else return;
    for (int64_t off = 0; off < a->head_dim * elem; off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
}

/* ---- float32: 8 lanes, angles in double, sin/cos rounded to float --------- */

/* sin and cos of 8 double angles as floats; libm for lanes out of range. */
static inline void sincos8_f32(__m256d ang_lo, __m256d ang_hi, __m256 *s, __m256 *c) {
    const __m256d lim = _mm256_set1_pd(WP_SINCOS_MAX_ARG), abs_mask = _mm256_set1_pd(-0.0);
    const int big = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(abs_mask, ang_lo), lim, _CMP_NLT_UQ)) |
                    _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(abs_mask, ang_hi), lim, _CMP_NLT_UQ));
    if (!big) {
        wp_sincos_pd_to_ps(ang_lo, ang_hi, s, c);
        return;
    }
    _Alignas(32) double ang[8];
    _Alignas(32) float sv[8], cv[8];
    _mm256_store_pd(ang, ang_lo);
    _mm256_store_pd(ang + 4, ang_hi);
    for (int i = 0; i < 8; ++i) {
        sv[i] = (float)sin(ang[i]);
        cv[i] = (float)cos(ang[i]);
    }
    *s = _mm256_load_ps(sv);
    *c = _mm256_load_ps(cv);
}

#define T float
#define VT __m256
#define VL 8
#define FN(name) name##_f32
#define KERNEL wavepe_rope_f32_avx2
#define V_SET1 _mm256_set1_ps
#define V_PAIR_SIGN _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f)
#define V_SINCOS(pos, f, s, c) \
    sincos8_f32(_mm256_mul_pd((pos), _mm256_loadu_pd(f)), _mm256_mul_pd((pos), _mm256_loadu_pd((f) + 4)), (s), (c))
#define V_MUL _mm256_mul_ps
#define V_XOR _mm256_xor_ps
#define V_STORE _mm256_store_ps
#define V_LOAD _mm256_load_ps
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_FMADD _mm256_fmadd_ps
#define V_FMSUB _mm256_fmsub_ps
#define V_UNPACKLO _mm256_unpacklo_ps
#define V_UNPACKHI _mm256_unpackhi_ps
#define V_PERMUTE2F128 _mm256_permute2f128_ps
#define V_SWAP_PAIRS(v) _mm256_permute_ps((v), 0xB1)
#define S_FMA fmaf
#include "rope_avx2_tmpl.h"
#undef T
#undef VT
#undef VL
#undef FN
#undef KERNEL
#undef V_SET1
#undef V_PAIR_SIGN
#undef V_SINCOS
#undef V_MUL
#undef V_XOR
#undef V_STORE
#undef V_LOAD
#undef V_LOADU
#undef V_STOREU
#undef V_FMADD
#undef V_FMSUB
#undef V_UNPACKLO
#undef V_UNPACKHI
#undef V_PERMUTE2F128
#undef V_SWAP_PAIRS
#undef S_FMA

/* ---- float64: 4 lanes ----------------------------------------------------- */

static inline void sincos4_f64(__m256d ang, __m256d *s, __m256d *c) {
    const __m256d big = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), ang),
                                      _mm256_set1_pd(WP_SINCOS_MAX_ARG), _CMP_NLT_UQ);
    if (!_mm256_movemask_pd(big)) {
        wp_sincos_pd(ang, s, c);
        return;
    }
    _Alignas(32) double av[4], sv[4], cv[4];
    _mm256_store_pd(av, ang);
    for (int i = 0; i < 4; ++i) {
        sv[i] = sin(av[i]);
        cv[i] = cos(av[i]);
    }
    *s = _mm256_load_pd(sv);
    *c = _mm256_load_pd(cv);
}

#define T double
#define VT __m256d
#define VL 4
#define FN(name) name##_f64
#define KERNEL wavepe_rope_f64_avx2
#define V_SET1 _mm256_set1_pd
#define V_PAIR_SIGN _mm256_setr_pd(-0.0, 0.0, -0.0, 0.0)
#define V_SINCOS(pos, f, s, c) sincos4_f64(_mm256_mul_pd((pos), _mm256_loadu_pd(f)), (s), (c))
#define V_MUL _mm256_mul_pd
#define V_XOR _mm256_xor_pd
#define V_STORE _mm256_store_pd
#define V_LOAD _mm256_load_pd
#define V_LOADU _mm256_loadu_pd
#define V_STOREU _mm256_storeu_pd
#define V_FMADD _mm256_fmadd_pd
#define V_FMSUB _mm256_fmsub_pd
#define V_UNPACKLO _mm256_unpacklo_pd
#define V_UNPACKHI _mm256_unpackhi_pd
#define V_PERMUTE2F128 _mm256_permute2f128_pd
#define V_SWAP_PAIRS(v) _mm256_permute_pd((v), 0x5)
#define S_FMA fma
#include "rope_avx2_tmpl.h"
#undef T
#undef VT
#undef VL
#undef FN
#undef KERNEL
#undef V_SET1
#undef V_PAIR_SIGN
#undef V_SINCOS
#undef V_MUL
#undef V_XOR
#undef V_STORE
#undef V_LOAD
#undef V_LOADU
#undef V_STOREU
#undef V_FMADD
#undef V_FMSUB
#undef V_UNPACKLO
#undef V_UNPACKHI
#undef V_PERMUTE2F128
#undef V_SWAP_PAIRS
#undef S_FMA
#else
typedef int wavepe_rope_avx2_unused;
#endif
