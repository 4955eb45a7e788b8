/* alibi_avx2.c: ALiBi rows, 8 floats / 4 doubles at a time.
 *
 * A row is an arithmetic sequence, -slope * (pos - j); the vector holds the
 * distances for 8 consecutive j and steps by 8.  Distances are exact in the
 * output type for |pos - j| < 2^24 (float32), beyond that the product is
 * rounded exactly as the scalar loop rounds (the int64 distance is converted
 * first, then multiplied), because both convert the same integer.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "alibi.h"

void wavepe_alibi_f32_avx2(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    const float *slopes = (const float *)a->slopes;
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t h = row / a->m, i = row % a->m;
        float *out = (float *)a->out + h * a->out_stride_h + i * a->out_stride_m;
        const int64_t pos = a->q_offset + i;
        const float neg_slope = -slopes[h];
        const __m256 vslope = _mm256_set1_ps(neg_slope);
        /* j in [0, n): distance pos - j.  Vectorise the part where the distance
         * is exact in float32 and keeps one sign; the rest (rare) is scalar. */
        int64_t j = 0;
        const int64_t sign_end = pos + 1 < a->n ? (pos + 1 > 0 ? pos + 1 : 0) : a->n; /* j <= pos */
        if (pos - 0 < (1 << 24) && pos - a->n > -(1 << 24)) {
            for (; j + 8 <= sign_end; j += 8) {
                const __m256 dist = _mm256_sub_ps(_mm256_set1_ps((float)(pos - j)), lane);
                _mm256_storeu_ps(out + j, _mm256_mul_ps(vslope, dist));
            }
        }
        for (; j < sign_end; ++j) out[j] = neg_slope * (float)(pos - j);
        if (a->causal) {
            const __m256 zero = _mm256_setzero_ps();
            for (; j + 8 <= a->n; j += 8) _mm256_storeu_ps(out + j, zero);
            for (; j < a->n; ++j) out[j] = 0.0f;
        } else {
            if (pos - a->n > -(1 << 24)) {
                for (; j + 8 <= a->n; j += 8) {
                    const __m256 dist = _mm256_add_ps(_mm256_set1_ps((float)(j - pos)), lane);
                    _mm256_storeu_ps(out + j, _mm256_mul_ps(vslope, dist));
                }
            }
            for (; j < a->n; ++j) out[j] = neg_slope * (float)(j - pos);
        }
    }
}

void wavepe_alibi_f64_avx2(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    const double *slopes = (const double *)a->slopes;
    const __m256d lane = _mm256_setr_pd(0, 1, 2, 3);
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t h = row / a->m, i = row % a->m;
        double *out = (double *)a->out + h * a->out_stride_h + i * a->out_stride_m;
        const int64_t pos = a->q_offset + i;
        const double neg_slope = -slopes[h];
        const __m256d vslope = _mm256_set1_pd(neg_slope);
        int64_t j = 0;
        const int64_t sign_end = pos + 1 < a->n ? (pos + 1 > 0 ? pos + 1 : 0) : a->n;
        const int64_t exact = (int64_t)1 << 53;
        if (pos < exact && pos - a->n > -exact) {
            for (; j + 4 <= sign_end; j += 4) {
                const __m256d dist = _mm256_sub_pd(_mm256_set1_pd((double)(pos - j)), lane);
                _mm256_storeu_pd(out + j, _mm256_mul_pd(vslope, dist));
            }
        }
        for (; j < sign_end; ++j) out[j] = neg_slope * (double)(pos - j);
        if (a->causal) {
            const __m256d zero = _mm256_setzero_pd();
            for (; j + 4 <= a->n; j += 4) _mm256_storeu_pd(out + j, zero);
            for (; j < a->n; ++j) out[j] = 0.0;
        } else {
            if (pos - a->n > -exact) {
                for (; j + 4 <= a->n; j += 4) {
                    const __m256d dist = _mm256_add_pd(_mm256_set1_pd((double)(j - pos)), lane);
                    _mm256_storeu_pd(out + j, _mm256_mul_pd(vslope, dist));
                }
            }
            for (; j < a->n; ++j) out[j] = neg_slope * (double)(j - pos);
        }
    }
}
#else
typedef int wavepe_alibi_avx2_unused;
#endif
