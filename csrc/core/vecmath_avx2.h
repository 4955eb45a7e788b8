/* vecmath_avx2.h: exp, cos and sincos on AVX2+FMA vectors, for the *_avx2.c kernels.
 *
 * Include only from files compiled with -mavx2 -mfma.  Range reduction is
 * Cody-Waite with split constants; the polynomials are truncated Taylor
 * series whose degree makes the truncation error far below half an ulp on
 * the reduced interval, so the result is within a few ulp of the correctly
 * rounded value.  Results below the normal range are produced as subnormals
 * (2^n is applied in two halves), matching libm's underflow behaviour up to
 * the last subnormal bit.
 */
#ifndef WAVEPE_VECMATH_AVX2_H
#define WAVEPE_VECMATH_AVX2_H

#include <immintrin.h>

/* ---- float32 ---------------------------------------------------------- */

/* 2^k for integer k in [-126, 127], given as int32 lanes. */
static inline __m256 wp_pow2i_ps(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* e^x = p * 2^n for float32 lanes x already clamped to a finite range:
 * n = round(x / ln 2) is returned through n_out and p = e^r, r = x - n ln 2.
 * Shared by wp_mul_exp_ps and the attention softmax's exp. */
static inline __m256 wp_exp_reduced_ps(__m256 xc, __m256 *n_out) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln 2 split so that n * hi is exact for |n| < 2^9. */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    /* e^r on |r| <= 0.35: Taylor to degree 7 (truncation < 6e-9). */
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    *n_out = n;
    return p;
}

/* f * exp(x) for float32 lanes.  The factor multiplies the polynomial before
 * 2^n is applied (in two halves), so a product that is representable, even as
 * a subnormal, comes out right although exp(x) alone would underflow: with
 * |f| up to 2^23 the result is exact to the last subnormal bit of f * e^x.
 * x <= -128 gives (signed) 0, x >= 88.8 gives f * inf. */
static inline __m256 wp_mul_exp_ps(__m256 f, __m256 x) {
    const __m256 hi_lim = _mm256_set1_ps(88.8f), lo_lim = _mm256_set1_ps(-128.0f);
    const __m256 nan_mask = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 over = _mm256_cmp_ps(x, hi_lim, _CMP_GE_OQ);
    const __m256 under = _mm256_cmp_ps(x, lo_lim, _CMP_LE_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo_lim), hi_lim);
    __m256 n;
    const __m256 p = wp_exp_reduced_ps(xc, &n);
    const __m256i ni = _mm256_cvtps_epi32(n); /* n in [-185, 129]: halves stay >= -93 */
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(f, p), wp_pow2i_ps(n1)), wp_pow2i_ps(n2));
    y = _mm256_blendv_ps(y, _mm256_mul_ps(f, _mm256_set1_ps(__builtin_inff())), over);
    y = _mm256_blendv_ps(y, _mm256_mul_ps(f, _mm256_setzero_ps()), under);
    return _mm256_blendv_ps(y, x, nan_mask);
}

/* exp(x) for float32 lanes. */
static inline __m256 wp_exp_ps(__m256 x) { return wp_mul_exp_ps(_mm256_set1_ps(1.0f), x); }

/* sin r and cos r for float32 lanes of a reduced argument |r| <= pi/4 (up to
 * ~0.8 stays below 3e-9 truncation): sin r = r (1 - r^2/3! + ... + r^8/9!),
 * cos r = 1 - r^2/2! + ... + r^10/10!.  Shared by wp_cos_ps and
 * wp_sincos_pd_to_ps, which differ only in how they reduce. */
static inline void wp_sincos_poly_ps(__m256 r, __m256 *sin_out, __m256 *cos_out) {
    const __m256 r2 = _mm256_mul_ps(r, r);
    __m256 s = _mm256_set1_ps(1.0f / 362880.0f);
    s = _mm256_fmadd_ps(s, r2, _mm256_set1_ps(-1.0f / 5040.0f));
    s = _mm256_fmadd_ps(s, r2, _mm256_set1_ps(1.0f / 120.0f));
    s = _mm256_fmadd_ps(s, r2, _mm256_set1_ps(-1.0f / 6.0f));
    s = _mm256_fmadd_ps(_mm256_mul_ps(s, r2), r, r);
    __m256 c = _mm256_set1_ps(-1.0f / 3628800.0f);
    c = _mm256_fmadd_ps(c, r2, _mm256_set1_ps(1.0f / 40320.0f));
    c = _mm256_fmadd_ps(c, r2, _mm256_set1_ps(-1.0f / 720.0f));
    c = _mm256_fmadd_ps(c, r2, _mm256_set1_ps(1.0f / 24.0f));
    c = _mm256_fmadd_ps(c, r2, _mm256_set1_ps(-0.5f));
    c = _mm256_fmadd_ps(c, r2, _mm256_set1_ps(1.0f));
    *sin_out = s;
    *cos_out = c;
}

/* cos(x) for float32 lanes with |x| <= 2^15 (callers clamp; larger inputs
 * lose accuracy but stay finite). */
static inline __m256 wp_cos_ps(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.636619772367581343f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* pi/2 in three parts; n * part1 is exact for |n| < 2^16. */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.5703125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(4.837512969970703125e-4f), r);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(7.54978995489188216e-8f), r);
    __m256 s, c;
    wp_sincos_poly_ps(r, &s, &c);
    /* cos(n pi/2 + r) = cos r, -sin r, -cos r, sin r for n mod 4 = 0..3 */
    const __m256i q = _mm256_cvtps_epi32(n);
    const __m256i odd = _mm256_slli_epi32(q, 31);                  /* bit 0 -> sign position */
    const __m256 use_sin = _mm256_castsi256_ps(_mm256_srai_epi32(odd, 31));
    __m256 v = _mm256_blendv_ps(c, s, use_sin);
    /* negate when (q + 1) & 2 */
    const __m256i neg = _mm256_slli_epi32(_mm256_add_epi32(q, _mm256_set1_epi32(1)), 30);
    const __m256i sign = _mm256_and_si256(neg, _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
}

/* ---- float64 ---------------------------------------------------------- */

/* Integer-valued double lanes (|v| < 2^51) to int64 lanes. */
static inline __m256i wp_pd_to_epi64(__m256d v) {
    const __m256d magic = _mm256_set1_pd(6755399441055744.0); /* 2^52 + 2^51 */
    return _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(v, magic)),
                            _mm256_castpd_si256(magic));
}

/* 2^k for integer-valued k in [-1022, 1023]. */
static inline __m256d wp_pow2_pd(__m256d k) {
    const __m256i e = _mm256_add_epi64(wp_pd_to_epi64(k), _mm256_set1_epi64x(1023));
    return _mm256_castsi256_pd(_mm256_slli_epi64(e, 52));
}

/* f * exp(x) for float64 lanes, the factor applied before 2^n as in
 * wp_mul_exp_ps.  x <= -800 gives (signed) 0, x >= 709.8 gives f * inf. */
static inline __m256d wp_mul_exp_pd(__m256d f, __m256d x) {
    const __m256d hi_lim = _mm256_set1_pd(709.8), lo_lim = _mm256_set1_pd(-800.0);
    const __m256d nan_mask = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
    const __m256d over = _mm256_cmp_pd(x, hi_lim, _CMP_GE_OQ);
    const __m256d under = _mm256_cmp_pd(x, lo_lim, _CMP_LE_OQ);
    const __m256d xc = _mm256_min_pd(_mm256_max_pd(x, lo_lim), hi_lim);
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(xc, _mm256_set1_pd(1.4426950408889634)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln 2 split: hi has 32 significant bits so n * hi is exact for |n| < 2^20. */
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.93147180369123816490e-01), xc);
    r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.90821492927058770002e-10), r);
    /* e^r on |r| <= 0.35: Taylor to degree 13 (truncation < 5e-18). */
    static const double inv_fact[14] = {1.0,
                                        1.0,
                                        1.0 / 2,
                                        1.0 / 6,
                                        1.0 / 24,
                                        1.0 / 120,
                                        1.0 / 720,
                                        1.0 / 5040,
                                        1.0 / 40320,
                                        1.0 / 362880,
                                        1.0 / 3628800,
                                        1.0 / 39916800,
                                        1.0 / 479001600,
                                        1.0 / 6227020800.0};
    __m256d p = _mm256_set1_pd(inv_fact[13]);
    for (int i = 12; i >= 0; --i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(inv_fact[i]));
    const __m256d n1 = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5)));
    const __m256d n2 = _mm256_sub_pd(n, n1);
    __m256d y = _mm256_mul_pd(_mm256_mul_pd(_mm256_mul_pd(f, p), wp_pow2_pd(n1)), wp_pow2_pd(n2));
    y = _mm256_blendv_pd(y, _mm256_mul_pd(f, _mm256_set1_pd(__builtin_inf())), over);
    y = _mm256_blendv_pd(y, _mm256_mul_pd(f, _mm256_setzero_pd()), under);
    return _mm256_blendv_pd(y, x, nan_mask);
}

/* exp(x) for float64 lanes. */
static inline __m256d wp_exp_pd(__m256d x) { return wp_mul_exp_pd(_mm256_set1_pd(1.0), x); }

/* cos(x) for float64 lanes with |x| <= 2^20 (callers clamp). */
static inline __m256d wp_cos_pd(__m256d x) {
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(0.63661977236758134308)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* pi/2 = p1 + p1t, p1 with 33 significant bits: n * p1 is exact for
     * |n| < 2^20 and the fused multiply-add rounds the tail step once. */
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.57079632673412561417e+00), x);
    r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.07710050650619224932e-11), r);
    const __m256d r2 = _mm256_mul_pd(r, r);
    /* Taylor on |r| <= pi/4: sin to r^17, cos to r^18 (truncation < 1e-18). */
    __m256d s = _mm256_set1_pd(1.0 / 355687428096000.0); /* 1/17! */
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 1307674368000.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 6227020800.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 39916800.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 362880.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 5040.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 120.0));
    s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 6.0));
    s = _mm256_fmadd_pd(_mm256_mul_pd(s, r2), r, r);
    __m256d c = _mm256_set1_pd(1.0 / 6402373705728000.0); /* 1/18! */
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 20922789888000.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 87178291200.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 479001600.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 3628800.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 40320.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 720.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 24.0));
    c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(0.5));
    c = _mm256_fnmadd_pd(c, r2, _mm256_set1_pd(1.0));
    const __m256i q = wp_pd_to_epi64(n);
    const __m256d use_sin = _mm256_castsi256_pd(_mm256_slli_epi64(q, 63));
    __m256d v = _mm256_blendv_pd(c, s, use_sin);
    const __m256i neg = _mm256_slli_epi64(_mm256_add_epi64(q, _mm256_set1_epi64x(1)), 62);
    const __m256i sign = _mm256_and_si256(neg, _mm256_set1_epi64x((long long)0x8000000000000000ull));
    return _mm256_xor_pd(v, _mm256_castsi256_pd(sign));
}

/* ---- sincos of double arguments ------------------------------------------ */

/* Largest |x| the sincos functions below reduce accurately (callers route
 * larger arguments to libm).  The reduction x - n pi/2 uses pi/2 in three
 * doubles, P1 + P2 + P3 (about 160 bits), one FMA each: x - n P1 is exact
 * (both are multiples of 2^-53 and the difference is below 2), and the
 * representation error of pi/2, n * 2^-160 <= 2^-120, stays far below the
 * smallest |x - n pi/2| a double under 2^40 can have (about 2^-60). */
#define WP_SINCOS_MAX_ARG 1099511627776.0 /* 2^40 */

/* x = n pi/2 + (r + tail): r in [-pi/4, pi/4] (a hair more when x * 2/pi
 * rounds across a half-integer), tail the part of the reduced argument below
 * r's last bit (|tail| <~ ulp(r)), and the quadrant n mod 4 as an exact
 * double 0..3.  The n * P2 step is an exact two-product plus two-sum, so
 * r + tail carries about 100 bits of x - n pi/2. */
static inline __m256d wp_reduce_pio2_pd(__m256d x, __m256d *tail, __m256d *quadrant) {
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(0.63661977236758134308)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256d p2 = _mm256_set1_pd(6.123233995736766e-17);                       /* 0x1.1a62633145c07p-54 */
    const __m256d r1 = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.5707963267948966), x); /* exact; 0x1.921fb54442d18p+0 */
    const __m256d w = _mm256_mul_pd(n, p2);
    const __m256d w_err = _mm256_fmsub_pd(n, p2, w); /* n * P2 = w + w_err exactly */
    const __m256d r = _mm256_sub_pd(r1, w);
    /* two-sum: r1 - w = r + sum_err exactly, whatever the magnitudes */
    const __m256d bb = _mm256_sub_pd(r, r1);
    const __m256d sum_err = _mm256_sub_pd(_mm256_sub_pd(r1, _mm256_sub_pd(r, bb)), _mm256_add_pd(w, bb));
    *tail = _mm256_fnmadd_pd(n, _mm256_set1_pd(-1.4973849048591698e-33), /* -0x1.f1976b7ed8fbcp-110 */
                             _mm256_sub_pd(sum_err, w_err));
    /* n mod 4, exact for |n| < 2^51: n - 4 floor(n / 4) */
    *quadrant = _mm256_fnmadd_pd(_mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.25))),
                                 _mm256_set1_pd(4.0), n);
    return r;
}

/* sin(x) and cos(x) for double lanes with |x| < WP_SINCOS_MAX_ARG, within
 * about 1 ulp (measured < 1 ulp against long double on 3e7 arguments).
 * Taylor series on the reduced argument r + t (sin to r^17, cos to r^18;
 * truncation below 1e-19 on |r| <= 0.8), with the tail t and the rounding of
 * 1 - r^2/2 carried separately (fdlibm's kernel trick) so that only the
 * final addition rounds at full weight. */
static inline void wp_sincos_pd(__m256d x, __m256d *sin_out, __m256d *cos_out) {
    __m256d t, quadrant;
    const __m256d r = wp_reduce_pio2_pd(x, &t, &quadrant);
    const __m256d z = _mm256_mul_pd(r, r);
    /* sin(r + t) = r + r z P(z) + t (1 - z/2) */
    __m256d ps = _mm256_set1_pd(1.0 / 355687428096000.0); /* 1/17! */
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(-1.0 / 1307674368000.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(1.0 / 6227020800.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(-1.0 / 39916800.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(1.0 / 362880.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(-1.0 / 5040.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(1.0 / 120.0));
    ps = _mm256_fmadd_pd(ps, z, _mm256_set1_pd(-1.0 / 6.0));
    const __m256d half_z = _mm256_mul_pd(z, _mm256_set1_pd(0.5));
    const __m256d s = _mm256_add_pd(r, _mm256_fmadd_pd(_mm256_mul_pd(r, z), ps, _mm256_fnmadd_pd(half_z, t, t)));
    /* cos(r + t) = w + [((1 - w) - z/2) - z_err/2 - r t + z^2 Q(z)],  w = 1 - z/2 rounded */
    __m256d qc = _mm256_set1_pd(-1.0 / 6402373705728000.0); /* -1/18! */
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(1.0 / 20922789888000.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(-1.0 / 87178291200.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(1.0 / 479001600.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(-1.0 / 3628800.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(1.0 / 40320.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(-1.0 / 720.0));
    qc = _mm256_fmadd_pd(qc, z, _mm256_set1_pd(1.0 / 24.0));
    const __m256d one = _mm256_set1_pd(1.0);
    const __m256d z_err = _mm256_fmsub_pd(r, r, z); /* r^2 = z + z_err exactly */
    const __m256d w = _mm256_sub_pd(one, half_z);
    __m256d tail = _mm256_sub_pd(_mm256_sub_pd(one, w), half_z); /* exact: minus w's rounding */
    tail = _mm256_fnmadd_pd(_mm256_set1_pd(0.5), z_err, tail);
    tail = _mm256_fnmadd_pd(r, t, tail);
    tail = _mm256_fmadd_pd(_mm256_mul_pd(z, z), qc, tail);
    const __m256d c = _mm256_add_pd(w, tail);
    /* x = n pi/2 + r: (sin, cos) = (s, c), (c, -s), (-s, -c), (-c, s) for n mod 4 = 0..3 */
    const __m256i q = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(quadrant));
    const __m256d swap = _mm256_castsi256_pd(_mm256_slli_epi64(q, 63)); /* bit 0 -> sign: blend mask */
    const __m256i sign_bit = _mm256_set1_epi64x((long long)0x8000000000000000ull);
    const __m256i sin_neg = _mm256_and_si256(_mm256_slli_epi64(q, 62), sign_bit);
    const __m256i cos_neg =
        _mm256_and_si256(_mm256_slli_epi64(_mm256_add_epi64(q, _mm256_set1_epi64x(1)), 62), sign_bit);
    *sin_out = _mm256_xor_pd(_mm256_blendv_pd(s, c, swap), _mm256_castsi256_pd(sin_neg));
    *cos_out = _mm256_xor_pd(_mm256_blendv_pd(c, s, swap), _mm256_castsi256_pd(cos_neg));
}

/* sin(x) and cos(x) rounded to float for 8 double lanes (lo = lanes 0..3,
 * hi = 4..7), |x| < WP_SINCOS_MAX_ARG.  The reduction is done in double, the
 * polynomial in float (sin to r^9, cos to r^10: truncation below 3e-9 on
 * |r| <= 0.8): within about 1 ulp of float. */
static inline void wp_sincos_pd_to_ps(__m256d x_lo, __m256d x_hi, __m256 *sin_out, __m256 *cos_out) {
    __m256d q_lo, q_hi, t_lo, t_hi;
    const __m256d red_lo = wp_reduce_pio2_pd(x_lo, &t_lo, &q_lo);
    const __m256d red_hi = wp_reduce_pio2_pd(x_hi, &t_hi, &q_hi);
    const __m256d r_lo = _mm256_add_pd(red_lo, t_lo), r_hi = _mm256_add_pd(red_hi, t_hi);
    const __m256 r = _mm256_set_m128(_mm256_cvtpd_ps(r_hi), _mm256_cvtpd_ps(r_lo));
    const __m256i q = _mm256_set_m128i(_mm256_cvtpd_epi32(q_hi), _mm256_cvtpd_epi32(q_lo));
    __m256 s, c;
    wp_sincos_poly_ps(r, &s, &c);
    const __m256 swap = _mm256_castsi256_ps(_mm256_slli_epi32(q, 31));
    const __m256i sign_bit = _mm256_set1_epi32((int)0x80000000u);
    const __m256i sin_neg = _mm256_and_si256(_mm256_slli_epi32(q, 30), sign_bit);
    const __m256i cos_neg =
        _mm256_and_si256(_mm256_slli_epi32(_mm256_add_epi32(q, _mm256_set1_epi32(1)), 30), sign_bit);
    *sin_out = _mm256_xor_ps(_mm256_blendv_ps(s, c, swap), _mm256_castsi256_ps(sin_neg));
    *cos_out = _mm256_xor_ps(_mm256_blendv_ps(c, s, swap), _mm256_castsi256_ps(cos_neg));
}

#endif
