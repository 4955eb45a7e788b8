/* wavelet_avx2.c: the mother wavelets on AVX2+FMA vectors (8 floats / 4 doubles).
 *
 * Same results as wavelet.c up to a few ulp: t^2 is split exactly into hi + lo
 * with an FMA, so the envelope exp(-t^2/2) = exp(-hi/2) * (1 - lo/2) keeps full
 * relative accuracy even where t^2 / 2 is near 100 and one rounding of t^2
 * would cost 1e-5 relative error.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "vecmath_avx2.h"
#include "wavelet.h"

/* ---- float32 ---------------------------------------------------------- */

static inline __m256 haar_ps(__m256 t) {
    const __m256 zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 in_first = _mm256_and_ps(_mm256_cmp_ps(t, zero, _CMP_GE_OQ),
                                          _mm256_cmp_ps(t, half, _CMP_LT_OQ));
    const __m256 in_second = _mm256_and_ps(_mm256_cmp_ps(t, half, _CMP_GE_OQ),
                                           _mm256_cmp_ps(t, one, _CMP_LT_OQ));
    __m256 y = _mm256_or_ps(_mm256_and_ps(in_first, one),
                            _mm256_and_ps(in_second, _mm256_set1_ps(-1.0f)));
    return _mm256_blendv_ps(y, t, _mm256_cmp_ps(t, t, _CMP_UNORD_Q)); /* NaN stays NaN */
}

static inline __m256 psi_ps(wavepe_wavelet w, __m256 t) {
    if (w == WAVEPE_WAVELET_HAAR) return haar_ps(t);
    /* Beyond |t| = 16 the envelope is 0 in float32 for every family; clamping
     * keeps t^2 finite so that the polynomial factor never meets inf * 0. */
    const __m256 lim = _mm256_set1_ps(16.0f); /* t^2/2 = 128: exp clamps to 0 */
    const __m256 nan_mask = _mm256_cmp_ps(t, t, _CMP_UNORD_Q);
    const __m256 outside = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), t), lim, _CMP_GT_OQ);
    const __m256 tc = _mm256_min_ps(_mm256_max_ps(t, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
    const __m256 t2 = _mm256_mul_ps(tc, tc);
    const __m256 t2_lo = _mm256_fmsub_ps(tc, tc, t2); /* tc*tc - t2, exactly */
    __m256 factor;
    switch (w) {
    case WAVEPE_WAVELET_RICKER:
        /* 1 - t^2 with the low part of t^2 kept: (1 - hi) - lo */
        factor = _mm256_sub_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), t2), t2_lo);
        break;
    case WAVEPE_WAVELET_GAUSSIAN:
        factor = _mm256_sub_ps(_mm256_setzero_ps(), tc);
        break;
    default: { /* morlet: cos(5t) with 5t split exactly into hi + lo */
        const __m256 five = _mm256_set1_ps(5.0f);
        const __m256 a = _mm256_mul_ps(five, tc);
        const __m256 a_lo = _mm256_fmsub_ps(five, tc, a);
        /* cos(a + lo) ~= cos(a) - lo sin(a); |lo| <= 2^-24 |a|, and
         * sin(a) = cos(a - pi/2). */
        const __m256 c = wp_cos_ps(a);
        const __m256 s = wp_cos_ps(_mm256_sub_ps(a, _mm256_set1_ps(1.57079632679489662f)));
        factor = _mm256_fnmadd_ps(a_lo, s, c);
        break;
    }
    }
    /* factor * exp(-t^2/2) with exp(-(hi + lo)/2) = exp(-hi/2) (1 - lo/2); the
     * factor enters before the final scaling so subnormal results survive. */
    factor = _mm256_fnmadd_ps(_mm256_mul_ps(factor, t2_lo), _mm256_set1_ps(0.5f), factor);
    __m256 y = wp_mul_exp_ps(factor, _mm256_mul_ps(t2, _mm256_set1_ps(-0.5f)));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), outside);
    return _mm256_blendv_ps(y, t, nan_mask);
}

void wavepe_wavelet_f32_avx2(wavepe_wavelet w, int64_t n, const float *x, int64_t sx, float *y,
                             int64_t sy) {
    int64_t i = 0;
    if (sx == 1 && sy == 1) {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, psi_ps(w, _mm256_loadu_ps(x + i)));
    } else {
        float in[8], out[8];
        for (; i + 8 <= n; i += 8) {
            for (int k = 0; k < 8; ++k) in[k] = x[(i + k) * sx];
            _mm256_storeu_ps(out, psi_ps(w, _mm256_loadu_ps(in)));
            for (int k = 0; k < 8; ++k) y[(i + k) * sy] = out[k];
        }
    }
    if (i < n) { /* tail through the same vector code, so every element agrees */
        float in[8] = {0}, out[8];
        const int64_t rest = n - i;
        for (int64_t k = 0; k < rest; ++k) in[k] = x[(i + k) * sx];
        _mm256_storeu_ps(out, psi_ps(w, _mm256_loadu_ps(in)));
        for (int64_t k = 0; k < rest; ++k) y[(i + k) * sy] = out[k];
    }
}

/* ---- float64 ---------------------------------------------------------- */

static inline __m256d haar_pd(__m256d t) {
    const __m256d zero = _mm256_setzero_pd(), half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0);
    const __m256d in_first = _mm256_and_pd(_mm256_cmp_pd(t, zero, _CMP_GE_OQ),
                                           _mm256_cmp_pd(t, half, _CMP_LT_OQ));
    const __m256d in_second = _mm256_and_pd(_mm256_cmp_pd(t, half, _CMP_GE_OQ),
                                            _mm256_cmp_pd(t, one, _CMP_LT_OQ));
    __m256d y = _mm256_or_pd(_mm256_and_pd(in_first, one),
                             _mm256_and_pd(in_second, _mm256_set1_pd(-1.0)));
    return _mm256_blendv_pd(y, t, _mm256_cmp_pd(t, t, _CMP_UNORD_Q));
}

static inline __m256d psi_pd(wavepe_wavelet w, __m256d t) {
    if (w == WAVEPE_WAVELET_HAAR) return haar_pd(t);
    const __m256d lim = _mm256_set1_pd(40.0); /* exp(-800) is 0 in double */
    const __m256d nan_mask = _mm256_cmp_pd(t, t, _CMP_UNORD_Q);
    const __m256d outside = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), t), lim, _CMP_GT_OQ);
    const __m256d tc = _mm256_min_pd(_mm256_max_pd(t, _mm256_sub_pd(_mm256_setzero_pd(), lim)), lim);
    const __m256d t2 = _mm256_mul_pd(tc, tc);
    const __m256d t2_lo = _mm256_fmsub_pd(tc, tc, t2);
    __m256d factor;
    switch (w) {
    case WAVEPE_WAVELET_RICKER:
        factor = _mm256_sub_pd(_mm256_sub_pd(_mm256_set1_pd(1.0), t2), t2_lo);
        break;
    case WAVEPE_WAVELET_GAUSSIAN:
        factor = _mm256_sub_pd(_mm256_setzero_pd(), tc);
        break;
    default: {
        const __m256d five = _mm256_set1_pd(5.0);
        const __m256d a = _mm256_mul_pd(five, tc);
        const __m256d a_lo = _mm256_fmsub_pd(five, tc, a);
        const __m256d c = wp_cos_pd(a);
        const __m256d s = wp_cos_pd(_mm256_sub_pd(a, _mm256_set1_pd(1.57079632679489661923)));
        factor = _mm256_fnmadd_pd(a_lo, s, c);
        break;
    }
    }
    factor = _mm256_fnmadd_pd(_mm256_mul_pd(factor, t2_lo), _mm256_set1_pd(0.5), factor);
    __m256d y = wp_mul_exp_pd(factor, _mm256_mul_pd(t2, _mm256_set1_pd(-0.5)));
    y = _mm256_blendv_pd(y, _mm256_setzero_pd(), outside);
    return _mm256_blendv_pd(y, t, nan_mask);
}

void wavepe_wavelet_f64_avx2(wavepe_wavelet w, int64_t n, const double *x, int64_t sx, double *y,
                             int64_t sy) {
    int64_t i = 0;
    if (sx == 1 && sy == 1) {
        for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, psi_pd(w, _mm256_loadu_pd(x + i)));
    } else {
        double in[4], out[4];
        for (; i + 4 <= n; i += 4) {
            for (int k = 0; k < 4; ++k) in[k] = x[(i + k) * sx];
            _mm256_storeu_pd(out, psi_pd(w, _mm256_loadu_pd(in)));
            for (int k = 0; k < 4; ++k) y[(i + k) * sy] = out[k];
        }
    }
    if (i < n) {
        double in[4] = {0}, out[4];
        const int64_t rest = n - i;
        for (int64_t k = 0; k < rest; ++k) in[k] = x[(i + k) * sx];
        _mm256_storeu_pd(out, psi_pd(w, _mm256_loadu_pd(in)));
        for (int64_t k = 0; k < rest; ++k) y[(i + k) * sy] = out[k];
    }
}
#else
/* Not x86-64: nothing to build; the dispatcher never names these. */
typedef int wavepe_wavelet_avx2_unused;
#endif
