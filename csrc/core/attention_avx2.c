/* attention_avx2.c: the tiled AVX2+FMA fused attention, float32 and float64.
 *
 * The kernels are written once in attention_avx2_tmpl.h over an element type;
 * this file supplies, per type, the vector operations it uses and includes
 * it: float32 with 8-lane vectors (micro-tile 6 x 16), float64 with 4-lane
 * vectors (micro-tile 6 x 8).  exp is vecmath_avx2.h's (a few ulp).
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_internal.h"
#include "checked.h"
#include "vecmath_avx2.h"

/* ---- float32 helpers ------------------------------------------------------- */

static inline float hsum_ps(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static inline float hmax_ps(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* exp(x) for the softmax, where x = score - running max <= 0 (up to
 * rounding): wp_exp_ps's range reduction and polynomial (a few ulp), without
 * its overflow and subnormal handling.  Results below 2^-126 flush to 0,
 * -inf gives 0, NaN stays NaN (the clamps keep NaN: max/min return their
 * second operand when it is NaN). */
static inline __m256 exp_softmax_ps(__m256 x) {
    const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-88.0f), _mm256_min_ps(_mm256_set1_ps(88.0f), x));
    __m256 n;
    const __m256 p = wp_exp_reduced_ps(xc, &n);
    /* 2^n for n in [-127, 127]; n = -127 gives the bits of +0.0 */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* out[c*16 + lane] = src[lane*ks + c] for 16 rows (lanes) and d columns:
 * 8 x 8 register transposes, scalar for the last d % 8 columns. */
static void transpose_strip_f32(float *restrict out, const float *src, int64_t ks, int64_t d) {
    int64_t c0 = 0;
    for (; c0 + 8 <= d; c0 += 8) {
        for (int half = 0; half < 2; ++half) {
            const float *s = src + half * 8 * ks + c0;
            const __m256 r0 = _mm256_loadu_ps(s + 0 * ks), r1 = _mm256_loadu_ps(s + 1 * ks);
            const __m256 r2 = _mm256_loadu_ps(s + 2 * ks), r3 = _mm256_loadu_ps(s + 3 * ks);
            const __m256 r4 = _mm256_loadu_ps(s + 4 * ks), r5 = _mm256_loadu_ps(s + 5 * ks);
            const __m256 r6 = _mm256_loadu_ps(s + 6 * ks), r7 = _mm256_loadu_ps(s + 7 * ks);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
            const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
            const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
            const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
            const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
            float *o = out + c0 * 16 + half * 8;
            _mm256_storeu_ps(o + 0 * 16, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(o + 1 * 16, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(o + 2 * 16, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(o + 3 * 16, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(o + 4 * 16, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(o + 5 * 16, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(o + 6 * 16, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(o + 7 * 16, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
    }
    for (; c0 < d; ++c0)
        for (int lane = 0; lane < 16; ++lane) out[c0 * 16 + lane] = src[lane * ks + c0];
}

/* Lane i of the result = sum of the lanes of a[i], i < 8. */
static inline __m256 reduce_lanes_ps(const __m256 *a) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

/* ---- float64 helpers ------------------------------------------------------- */

static inline double hsum_pd(__m256d v) {
    __m128d x = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    x = _mm_add_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}

static inline double hmax_pd(__m256d v) {
    __m128d x = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    x = _mm_max_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}

/* Lane i of the result = sum of the lanes of a[i], i < 4. */
static inline __m256d reduce_lanes_pd(const __m256d *a) {
    const __m256d h01 = _mm256_hadd_pd(a[0], a[1]), h23 = _mm256_hadd_pd(a[2], a[3]);
    return _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
}

/* out[c*8 + lane] = src[lane*ks + c] for 8 rows and d columns (4 x 4 blocks). */
static void transpose_strip_f64(double *restrict out, const double *src, int64_t ks, int64_t d) {
    int64_t c0 = 0;
    for (; c0 + 4 <= d; c0 += 4) {
        for (int half = 0; half < 2; ++half) {
            const double *s = src + half * 4 * ks + c0;
            const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ks);
            const __m256d r2 = _mm256_loadu_pd(s + 2 * ks), r3 = _mm256_loadu_pd(s + 3 * ks);
            const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
            const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            double *o = out + c0 * 8 + half * 4;
            _mm256_storeu_pd(o + 0 * 8, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd(o + 1 * 8, _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd(o + 2 * 8, _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd(o + 3 * 8, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
    }
    for (; c0 < d; ++c0)
        for (int lane = 0; lane < 8; ++lane) out[c0 * 8 + lane] = src[lane * ks + c0];
}

/* ---- float32 instantiation ------------------------------------------------------------ */

#define T float
#define VT __m256
#define VL 8
#define NR ATTN_NR_F32
#define ATTN_FBM ATTN_FBM_F32
#define ATTN_FBN ATTN_FBN_F32
#define ATTN_BBM ATTN_BBM_F32
#define ATTN_BBN ATTN_BBN_F32
#define FN(name) name##_f32
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_SET1 _mm256_set1_ps
#define V_BCAST _mm256_broadcast_ss
#define V_FMA _mm256_fmadd_ps
#define V_MUL _mm256_mul_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MAX _mm256_max_ps
#define V_ZERO _mm256_setzero_ps
#define V_MASKLOAD(p, m) _mm256_maskload_ps((p), (m))
#define V_IMASK(n) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define V_EXP exp_softmax_ps
#define V_CMPLT(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define V_BLEND(a, b, m) _mm256_blendv_ps((a), (b), (m))
#define V_ABS(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (x))
#define V_LANES _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7)
#define V_HSUM hsum_ps
#define V_HMAX hmax_ps
#define V_REDUCE_LANES reduce_lanes_ps
#include "attention_avx2_tmpl.h"
#undef T
#undef VT
#undef VL
#undef NR
#undef ATTN_FBM
#undef ATTN_FBN
#undef ATTN_BBM
#undef ATTN_BBN
#undef FN
#undef V_LOADU
#undef V_STOREU
#undef V_SET1
#undef V_BCAST
#undef V_FMA
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_ZERO
#undef V_MASKLOAD
#undef V_IMASK
#undef V_EXP
#undef V_CMPLT
#undef V_BLEND
#undef V_ABS
#undef V_LANES
#undef V_HSUM
#undef V_HMAX
#undef V_REDUCE_LANES

/* ---- float64 instantiation ------------------------------------------------------------ */

#define T double
#define VT __m256d
#define VL 4
#define NR ATTN_NR_F64
#define ATTN_FBM ATTN_FBM_F64
#define ATTN_FBN ATTN_FBN_F64
#define ATTN_BBM ATTN_BBM_F64
#define ATTN_BBN ATTN_BBN_F64
#define FN(name) name##_f64
#define V_LOADU _mm256_loadu_pd
#define V_STOREU _mm256_storeu_pd
#define V_SET1 _mm256_set1_pd
#define V_BCAST _mm256_broadcast_sd
#define V_FMA _mm256_fmadd_pd
#define V_MUL _mm256_mul_pd
#define V_ADD _mm256_add_pd
#define V_SUB _mm256_sub_pd
#define V_MAX _mm256_max_pd
#define V_ZERO _mm256_setzero_pd
#define V_MASKLOAD(p, m) _mm256_maskload_pd((p), (m))
#define V_IMASK(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)(n)), _mm256_setr_epi64x(0, 1, 2, 3))
#define V_EXP wp_exp_pd
#define V_CMPLT(a, b) _mm256_cmp_pd((a), (b), _CMP_LT_OQ)
#define V_BLEND(a, b, m) _mm256_blendv_pd((a), (b), (m))
#define V_ABS(x) _mm256_andnot_pd(_mm256_set1_pd(-0.0), (x))
#define V_LANES _mm256_setr_pd(0, 1, 2, 3)
#define V_HSUM hsum_pd
#define V_HMAX hmax_pd
#define V_REDUCE_LANES reduce_lanes_pd
#include "attention_avx2_tmpl.h"

#else
typedef int wavepe_attention_avx2_unused;
#endif
