/* alibi_simd.h: ALiBi rows on vectors, written once (simd_type.h) and
 * instantiated per ISA by alibi_<isa>.c (avx2, avx512, neon) for float, double,
 * bfloat16 and float16 (half types: slopes widened, rows computed in float32,
 * each element rounded once as it is stored, simd_type.h).
 *
 * A row is an arithmetic sequence, -slope * (pos - j); the vector holds the
 * distances for VL consecutive j and steps by VL.  Distances are exact in the
 * element type for |pos - j| < 2^24 (float) / 2^53 (double); beyond that the
 * product is rounded exactly as the scalar loop rounds it (the int64 distance
 * is converted first, then multiplied), because both convert the same integer.
 */
#include "simd_type.h"
#include "alibi.h"

void FN(wavepe_alibi)(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    const S *slopes = (const S *)a->slopes;
    const VT lane = V(iota)();
    const int64_t exact = (int64_t)1 << (sizeof(T) == 4 ? 24 : 53);
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t h = row / a->m, i = row % a->m;
        S *out = (S *)a->out + h * a->out_stride_h + i * a->out_stride_m;
        const int64_t pos = a->q_offset + i;
        const T neg_slope = -S_TO_T(slopes[h]);
        const VT vslope = V(set1)(neg_slope);
        /* j in [0, n): distance pos - j.  Vectorise the part where the distance
         * is exact in T and keeps one sign; the rest (rare) is scalar. */
        int64_t j = 0;
        const int64_t sign_end = pos + 1 < a->n ? (pos + 1 > 0 ? pos + 1 : 0) : a->n; /* j <= pos */
        if (pos < exact && pos - a->n > -exact) {
            for (; j + VL <= sign_end; j += VL) {
                const VT dist = V(sub)(V(set1)((T)(pos - j)), lane);
                S_STOREU(out + j, V(mul)(vslope, dist));
            }
        }
        for (; j < sign_end; ++j) out[j] = T_TO_S(neg_slope * (T)(pos - j));
        if (a->causal) {
            const VT zero = V(zero)();
            for (; j + VL <= a->n; j += VL) S_STOREU(out + j, zero);
            for (; j < a->n; ++j) out[j] = T_TO_S((T)0);
        } else {
            if (pos - a->n > -exact) {
                for (; j + VL <= a->n; j += VL) {
                    const VT dist = V(add)(V(set1)((T)(j - pos)), lane);
                    S_STOREU(out + j, V(mul)(vslope, dist));
                }
            }
            for (; j < a->n; ++j) out[j] = T_TO_S(neg_slope * (T)(j - pos));
        }
    }
}

#include "simd_type_end.h"
