/* relbias_avx2.c: the relative-table bias as register-blocked GEMMs (AVX2+FMA).
 *
 * The kernels are written once in relbias_avx2_impl.h and instantiated here
 * for float32 (8 lanes, tiles of 6 rows x 16 distances) and float64 (4 lanes,
 * 6 x 8).  See that file for the algorithms.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <stdint.h>

#include "checked.h"
#include "relbias.h"

/* ---- float32 ---------------------------------------------------------------- */
#define RB_T float
#define RB_V __m256
#define RB_LANES 8
#define RB_SUF(name) name##_f32_avx2
#define RB_LOAD(p) _mm256_loadu_ps(p)
#define RB_STORE(p, v) _mm256_storeu_ps((p), (v))
#define RB_STREAM(p, v) _mm256_stream_ps((p), (v)) /* p 32-byte aligned */
#define RB_BCAST(p) _mm256_broadcast_ss(p)
#define RB_SET1(x) _mm256_set1_ps(x)
#define RB_ZERO() _mm256_setzero_ps()
#define RB_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define RB_ADD(a, b) _mm256_add_ps((a), (b))
#define RB_REV(v) _mm256_permutevar8x32_ps((v), _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0))
#define RB_NONZERO_MASK(v) _mm256_movemask_ps(_mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_NEQ_UQ))
/* lanes i < k set, for masked loads/stores of a partial tile (0 <= k <= 8) */
#define RB_MASK(k) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define RB_MASKLOAD(p, m) _mm256_maskload_ps((p), (m))
#define RB_MASKSTORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
static inline float rb_hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define RB_HSUM(v) rb_hsum_f32(v)
#include "relbias_avx2_impl.h"
#undef RB_T
#undef RB_V
#undef RB_LANES
#undef RB_SUF
#undef RB_LOAD
#undef RB_STORE
#undef RB_STREAM
#undef RB_BCAST
#undef RB_SET1
#undef RB_ZERO
#undef RB_FMA
#undef RB_ADD
#undef RB_REV
#undef RB_NONZERO_MASK
#undef RB_MASK
#undef RB_MASKLOAD
#undef RB_MASKSTORE
#undef RB_HSUM

/* ---- float64 ---------------------------------------------------------------- */
#define RB_T double
#define RB_V __m256d
#define RB_LANES 4
#define RB_SUF(name) name##_f64_avx2
#define RB_LOAD(p) _mm256_loadu_pd(p)
#define RB_STORE(p, v) _mm256_storeu_pd((p), (v))
#define RB_STREAM(p, v) _mm256_stream_pd((p), (v))
#define RB_BCAST(p) _mm256_broadcast_sd(p)
#define RB_SET1(x) _mm256_set1_pd(x)
#define RB_ZERO() _mm256_setzero_pd()
#define RB_FMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define RB_ADD(a, b) _mm256_add_pd((a), (b))
#define RB_REV(v) _mm256_permute4x64_pd((v), 0x1B)
#define RB_NONZERO_MASK(v) _mm256_movemask_pd(_mm256_cmp_pd((v), _mm256_setzero_pd(), _CMP_NEQ_UQ))
#define RB_MASK(k) _mm256_cmpgt_epi64(_mm256_set1_epi64x((long long)(k)), _mm256_setr_epi64x(0, 1, 2, 3))
#define RB_MASKLOAD(p, m) _mm256_maskload_pd((p), (m))
#define RB_MASKSTORE(p, m, v) _mm256_maskstore_pd((p), (m), (v))
static inline double rb_hsum_f64(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}
#define RB_HSUM(v) rb_hsum_f64(v)
#include "relbias_avx2_impl.h"

#else
typedef int wavepe_relbias_avx2_unused;
#endif
