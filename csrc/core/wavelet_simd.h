/* wavelet_simd.h: the mother wavelets on vectors, written once (simd_type.h)
 * and instantiated per ISA by wavelet_<isa>.c (avx2, avx512, neon) for float and
 * double.
 *
 * Same results as wavelet.c up to a few ulp: t^2 is split exactly into hi + lo
 * with an FMA, so the envelope exp(-t^2/2) = exp(-hi/2) * (1 - lo/2) keeps full
 * relative accuracy even where t^2 / 2 is near 100 and one rounding of t^2
 * would cost 1e-5 relative error.
 */
#include "simd_type.h"
#include "wavelet.h"

static inline VT FN(haar)(VT t) {
    const VT zero = V(zero)(), half = V(set1)((T)0.5), one = V(set1)((T)1);
    const MT in_first = M(and)(V(cmpge)(t, zero), V(cmplt)(t, half));
    const MT in_second = M(and)(V(cmpge)(t, half), V(cmplt)(t, one));
    VT y = V(blend)(in_first, zero, one);
    y = V(blend)(in_second, y, V(set1)((T)-1));
    return V(blend)(V(isnan)(t), y, t); /* NaN stays NaN */
}

static inline VT FN(psi)(wavepe_wavelet w, VT t) {
    if (w == WAVEPE_WAVELET_HAAR) return FN(haar)(t);
    /* Beyond |t| = 16 (float) / 40 (double) the envelope is 0 in that type for
     * every family; clamping keeps t^2 finite so that the polynomial factor
     * never meets inf * 0. */
    const VT lim = V(set1)((T)(sizeof(T) == 4 ? 16.0 : 40.0));
    const MT nan_mask = V(isnan)(t);
    const MT outside = V(cmpgt)(V(abs)(t), lim);
    const VT tc = V(min)(V(max)(t, V(sub)(V(zero)(), lim)), lim);
    const VT t2 = V(mul)(tc, tc);
    const VT t2_lo = V(fmsub)(tc, tc, t2); /* tc*tc - t2, exactly */
    VT factor;
    switch (w) {
    case WAVEPE_WAVELET_RICKER:
        /* 1 - t^2 with the low part of t^2 kept: (1 - hi) - lo */
        factor = V(sub)(V(sub)(V(set1)((T)1), t2), t2_lo);
        break;
    case WAVEPE_WAVELET_GAUSSIAN:
        factor = V(sub)(V(zero)(), tc);
        break;
    default: { /* morlet: cos(5t) with 5t split exactly into hi + lo */
        const VT five = V(set1)((T)5);
        const VT a = V(mul)(five, tc);
        const VT a_lo = V(fmsub)(five, tc, a);
        /* cos(a + lo) ~= cos(a) - lo sin(a); |lo| <= ulp(a) / 2, and
         * sin(a) = cos(a - pi/2). */
        const VT c = V(cos)(a);
        const VT s = V(cos)(V(sub)(a, V(set1)((T)1.57079632679489661923)));
        factor = V(fnmadd)(a_lo, s, c);
        break;
    }
    }
    /* factor * exp(-t^2/2) with exp(-(hi + lo)/2) = exp(-hi/2) (1 - lo/2); the
     * factor enters before the final scaling (vecmath.h). */
    factor = V(fnmadd)(V(mul)(factor, t2_lo), V(set1)((T)0.5), factor);
    VT y = V(mul_exp)(factor, V(mul)(t2, V(set1)((T)-0.5)));
    y = V(blend)(outside, y, V(zero)());
    return V(blend)(nan_mask, y, t);
}

void FN(wavepe_wavelet)(wavepe_wavelet w, int64_t n, const T *x, int64_t sx, T *y, int64_t sy) {
    int64_t i = 0;
    if (sx == 1 && sy == 1) {
        for (; i + VL <= n; i += VL) V(storeu)(y + i, FN(psi)(w, V(loadu)(x + i)));
    } else {
        T in[VL], out[VL];
        for (; i + VL <= n; i += VL) {
            for (int k = 0; k < VL; ++k) in[k] = x[(i + k) * sx];
            V(storeu)(out, FN(psi)(w, V(loadu)(in)));
            for (int k = 0; k < VL; ++k) y[(i + k) * sy] = out[k];
        }
    }
    if (i < n) { /* tail through the same vector code, so every element agrees */
        T in[VL], out[VL];
        const int64_t rest = n - i;
        for (int64_t k = 0; k < VL; ++k) in[k] = k < rest ? x[(i + k) * sx] : (T)0;
        V(storeu)(out, FN(psi)(w, V(loadu)(in)));
        for (int64_t k = 0; k < rest; ++k) y[(i + k) * sy] = out[k];
    }
}

#include "simd_type_end.h"
