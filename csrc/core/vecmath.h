/* vecmath.h: exp, tanh, cos and sincos on vectors, written once in the vocabulary
 * of simd_avx2.h / simd_avx512.h / simd_neon.h (include one of those first).
 *
 * Range reduction is Cody-Waite with split constants; the polynomials are
 * truncated Taylor series whose degree makes the truncation error far below
 * half an ulp on the reduced interval, so results are within a few ulp of the
 * correctly rounded value.  The same operations run on every ISA, so the AVX2,
 * AVX-512 and NEON kernels give the same bits for the same inputs (tests
 * compare each against the float64 oracle, not against each other).
 *
 * Subnormal results: the kernels run with flush-to-zero and denormals-are-
 * zero (fpenv.h), so a result below the normal range comes out as 0 there.
 */
#ifndef WAVEPE_VECMATH_H
#define WAVEPE_VECMATH_H

#if !defined(WP_SIMD_NAME)
#error "include a vocabulary header (simd_avx2.h, simd_avx512.h, simd_neon.h) before vecmath.h"
#endif

#include <math.h>
#include <stddef.h>

#define WP_LOG2E 1.44269504088896341 /* log2(e): the exponentials' reduction, the base-2 softmax weights */

/* ---- float32 ---------------------------------------------------------- */

/* 2^k for integer lanes k in [-126, 127]. */
static inline vf32 vf32_pow2i(vi32 k) { return vi32_as_f32(vi32_slli(vi32_add(k, vi32_set1(127)), 23)); }

/* e^x = p * 2^n for lanes x already clamped to a finite range: n = round(x /
 * ln 2) is returned through n_out and p = e^r, r = x - n ln 2. */
static inline vf32 vf32_exp_reduced(vf32 xc, vf32 *n_out) {
    const vf32 n = vf32_round(vf32_mul(xc, vf32_set1((float)WP_LOG2E)));
    /* ln 2 split so that n * hi is exact for |n| < 2^9. */
    vf32 r = vf32_fnmadd(n, vf32_set1(0.693359375f), xc);
    r = vf32_fnmadd(n, vf32_set1(-2.12194440e-4f), r);
    /* e^r on |r| <= 0.35: Taylor to degree 7 (truncation < 6e-9). */
    vf32 p = vf32_set1(1.0f / 5040.0f);
    p = vf32_fmadd(p, r, vf32_set1(1.0f / 720.0f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f / 120.0f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f / 24.0f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f / 6.0f));
    p = vf32_fmadd(p, r, vf32_set1(0.5f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f));
    *n_out = n;
    return p;
}

/* f * exp(x).  The factor multiplies the polynomial before 2^n is applied (in
 * two halves), so a representable product comes out right although exp(x)
 * alone would overflow or underflow.  x <= -128 gives (signed) 0, x >= 88.8
 * gives f * inf, NaN stays NaN. */
static inline vf32 vf32_mul_exp(vf32 f, vf32 x) {
    const vf32 hi_lim = vf32_set1(88.8f), lo_lim = vf32_set1(-128.0f);
    const mf32 nan_mask = vf32_isnan(x);
    const mf32 over = vf32_cmpge(x, hi_lim);
    const mf32 under = vf32_cmple(x, lo_lim);
    const vf32 xc = vf32_min(vf32_max(x, lo_lim), hi_lim);
    vf32 n;
    const vf32 p = vf32_exp_reduced(xc, &n);
    const vi32 ni = vf32_cvt_i32(n); /* n in [-185, 129]: halves stay >= -93 */
    const vi32 n1 = vi32_srai(ni, 1);
    const vi32 n2 = vi32_sub(ni, n1);
    vf32 y = vf32_mul(vf32_mul(vf32_mul(f, p), vf32_pow2i(n1)), vf32_pow2i(n2));
    y = vf32_blend(over, y, vf32_mul(f, vf32_set1(__builtin_inff())));
    y = vf32_blend(under, y, vf32_mul(f, vf32_zero()));
    return vf32_blend(nan_mask, y, x);
}

static inline vf32 vf32_exp(vf32 x) { return vf32_mul_exp(vf32_set1(1.0f), x); }

/* exp(x) for a softmax, where x = score - running max <= 0 (up to rounding):
 * the same reduction and polynomial, without the overflow and underflow
 * handling.  Results below 2^-126 are 0, -inf gives 0, NaN stays NaN (the
 * clamps keep NaN: max/min return their second operand when it is NaN). */
static inline vf32 vf32_exp_softmax(vf32 x) {
    const vf32 xc = vf32_max(vf32_set1(-88.0f), vf32_min(vf32_set1(88.0f), x));
    vf32 n;
    const vf32 p = vf32_exp_reduced(xc, &n);
    /* 2^n for n in [-127, 127]; n = -127 gives the bits of +0.0 */
    return vf32_mul(p, vi32_as_f32(vi32_slli(vi32_add(vf32_cvt_i32(n), vi32_set1(127)), 23)));
}

#ifndef WP_HAS_VF32_SCALEF
/* p * 2^n for integral n in [-127, 127] (n = -127 gives +0.0) */
static inline vf32 vf32_scalef(vf32 p, vf32 n) { return vf32_mul(p, vf32_pow2i(vf32_cvt_i32(n))); }
#endif

/* 2^x for softmax weights rounded to bf16 or float16 right after (the tiles' P), x <= 0 or NaN: x =
 * n + r with n = floor(x), 2^r (r in [0, 1)) by a degree-4 polynomial with p(0) = 1 exactly
 * (coefficients fitted minimax for the relative error on [0, 1], by reweighted least squares: the error
 * is below 3.2e-6 -- far below those types' half ulp (2^-9, 2^-12) and below what the row sums need),
 * 2^n by scalef; the caller folds the scale by log2(e) and the subtraction of the row maximum into the
 * one multiply-add that makes x.  With AVX-512's vreduceps and vscalefps (both take floor(x) themselves,
 * and give 0 for x = -inf) six vector operations; elsewhere x is clamped to -127 first, whose 2^n is 0.
 * x <= -127 gives 0 (or a subnormal, flushed to 0 in the kernels), -inf gives 0, NaN stays NaN
 * (vf32_max returns its second operand when it is NaN). */
static inline vf32 vf32_exp2_weights16(vf32 x) {
#if defined(WP_HAS_VF32_SCALEF) && defined(WP_HAS_VF32_FRAC)
    const vf32 n = x, r = vf32_frac(x);
#else
    const vf32 n = vf32_floor(vf32_max(vf32_set1(-127.0f), x));
    const vf32 r = vf32_sub(vf32_max(vf32_set1(-127.0f), x), n);
#endif
    vf32 p = vf32_set1(0.013426684774458408f);
    p = vf32_fmadd(p, r, vf32_set1(0.052242472767829895f));
    p = vf32_fmadd(p, r, vf32_set1(0.241280198097229f));
    p = vf32_fmadd(p, r, vf32_set1(0.6930448412895203f));
    p = vf32_fmadd(p, r, vf32_set1(1.0f));
    return vf32_scalef(p, n);
}

/* tanh(x) (the attention's logit soft-cap): |x| < 0.3 by the odd Taylor polynomial to x^11
 * (truncation below 1e-9 relative there); elsewhere (1 - e) / (1 + e), e = exp(-2|x|) in [0, 0.55]
 * -- no overflow, +-1 for large |x| --, within a few ulp (1 - e >= 0.45 loses at most a bit), the sign
 * put back; NaN stays NaN. */
static inline vf32 vf32_tanh(vf32 x) {
    const vf32 one = vf32_set1(1.0f), a = vf32_abs(x), x2 = vf32_mul(x, x);
    const vf32 e = vf32_exp_softmax(vf32_mul(vf32_set1(-2.0f), a));
    const vf32 wide = vf32_xor(vf32_div(vf32_sub(one, e), vf32_add(one, e)), vf32_and(x, vf32_set1(-0.0f)));
    vf32 q = vf32_set1(-1382.0f / 155925.0f);
    q = vf32_fmadd(q, x2, vf32_set1(62.0f / 2835.0f));
    q = vf32_fmadd(q, x2, vf32_set1(-17.0f / 315.0f));
    q = vf32_fmadd(q, x2, vf32_set1(2.0f / 15.0f));
    q = vf32_fmadd(q, x2, vf32_set1(-1.0f / 3.0f));
    const vf32 small = vf32_fmadd(vf32_mul(q, x2), x, x);
    return vf32_blend(vf32_cmplt(a, vf32_set1(0.3f)), wide, small);
}

/* sin r and cos r for a reduced argument |r| <= pi/4 (up to ~0.8 stays below
 * 3e-9 truncation): sin r = r (1 - r^2/3! + ... + r^8/9!), cos r = 1 - r^2/2!
 * + ... + r^10/10!. */
static inline void vf32_sincos_poly(vf32 r, vf32 *sin_out, vf32 *cos_out) {
    const vf32 r2 = vf32_mul(r, r);
    vf32 s = vf32_set1(1.0f / 362880.0f);
    s = vf32_fmadd(s, r2, vf32_set1(-1.0f / 5040.0f));
    s = vf32_fmadd(s, r2, vf32_set1(1.0f / 120.0f));
    s = vf32_fmadd(s, r2, vf32_set1(-1.0f / 6.0f));
    s = vf32_fmadd(vf32_mul(s, r2), r, r);
    vf32 c = vf32_set1(-1.0f / 3628800.0f);
    c = vf32_fmadd(c, r2, vf32_set1(1.0f / 40320.0f));
    c = vf32_fmadd(c, r2, vf32_set1(-1.0f / 720.0f));
    c = vf32_fmadd(c, r2, vf32_set1(1.0f / 24.0f));
    c = vf32_fmadd(c, r2, vf32_set1(-0.5f));
    c = vf32_fmadd(c, r2, vf32_set1(1.0f));
    *sin_out = s;
    *cos_out = c;
}

/* (sin, cos) of n pi/2 + r from (s, c) = (sin r, cos r) and the quadrant's
 * integer lanes q: (s, c), (c, -s), (-s, -c), (-c, s) for q mod 4 = 0..3. */
static inline void vf32_sincos_quadrant(vf32 s, vf32 c, vi32 q, vf32 *sin_out, vf32 *cos_out) {
    const mf32 swap = vi32_nonzero(vi32_and(q, vi32_set1(1)));
    const vi32 sign_bit = vi32_set1((int32_t)0x80000000u);
    const vi32 sin_neg = vi32_and(vi32_slli(q, 30), sign_bit);
    const vi32 cos_neg = vi32_and(vi32_slli(vi32_add(q, vi32_set1(1)), 30), sign_bit);
    if (sin_out) *sin_out = vf32_xor(vf32_blend(swap, s, c), vi32_as_f32(sin_neg));
    if (cos_out) *cos_out = vf32_xor(vf32_blend(swap, c, s), vi32_as_f32(cos_neg));
}

/* cos(x) for |x| <= 2^15 (callers clamp; larger inputs lose accuracy but stay
 * finite). */
static inline vf32 vf32_cos(vf32 x) {
    const vf32 n = vf32_round(vf32_mul(x, vf32_set1(0.636619772367581343f)));
    /* pi/2 in three parts; n * part1 is exact for |n| < 2^16. */
    vf32 r = vf32_fnmadd(n, vf32_set1(1.5703125f), x);
    r = vf32_fnmadd(n, vf32_set1(4.837512969970703125e-4f), r);
    r = vf32_fnmadd(n, vf32_set1(7.54978995489188216e-8f), r);
    vf32 s, c, out;
    vf32_sincos_poly(r, &s, &c);
    vf32_sincos_quadrant(s, c, vf32_cvt_i32(n), NULL, &out);
    return out;
}

/* ---- float64 ---------------------------------------------------------- */

/* 2^k for integer-valued k in [-1022, 1023]. */
static inline vf64 vf64_pow2(vf64 k) {
    return vi64_as_f64(vi64_slli(vi64_add(vf64_int_to_i64(k), vi64_set1(1023)), 52));
}

/* f * exp(x), the factor applied before 2^n as in vf32_mul_exp.  x <= -800
 * gives (signed) 0, x >= 709.8 gives f * inf. */
static inline vf64 vf64_mul_exp(vf64 f, vf64 x) {
    const vf64 hi_lim = vf64_set1(709.8), lo_lim = vf64_set1(-800.0);
    const mf64 nan_mask = vf64_isnan(x);
    const mf64 over = vf64_cmpge(x, hi_lim);
    const mf64 under = vf64_cmple(x, lo_lim);
    const vf64 xc = vf64_min(vf64_max(x, lo_lim), hi_lim);
    const vf64 n = vf64_round(vf64_mul(xc, vf64_set1(WP_LOG2E)));
    /* ln 2 split: hi has 32 significant bits so n * hi is exact for |n| < 2^20. */
    vf64 r = vf64_fnmadd(n, vf64_set1(6.93147180369123816490e-01), xc);
    r = vf64_fnmadd(n, vf64_set1(1.90821492927058770002e-10), r);
    /* e^r on |r| <= 0.35: Taylor to degree 13 (truncation < 5e-18). */
    static const double inv_fact[14] = {1.0,           1.0,
                                        1.0 / 2,       1.0 / 6,
                                        1.0 / 24,      1.0 / 120,
                                        1.0 / 720,     1.0 / 5040,
                                        1.0 / 40320,   1.0 / 362880,
                                        1.0 / 3628800, 1.0 / 39916800,
                                        1.0 / 479001600, 1.0 / 6227020800.0};
    vf64 p = vf64_set1(inv_fact[13]);
    for (int i = 12; i >= 0; --i) p = vf64_fmadd(p, r, vf64_set1(inv_fact[i]));
    const vf64 n1 = vf64_floor(vf64_mul(n, vf64_set1(0.5)));
    const vf64 n2 = vf64_sub(n, n1);
    vf64 y = vf64_mul(vf64_mul(vf64_mul(f, p), vf64_pow2(n1)), vf64_pow2(n2));
    y = vf64_blend(over, y, vf64_mul(f, vf64_set1(__builtin_inf())));
    y = vf64_blend(under, y, vf64_mul(f, vf64_zero()));
    return vf64_blend(nan_mask, y, x);
}

static inline vf64 vf64_exp(vf64 x) { return vf64_mul_exp(vf64_set1(1.0), x); }

/* exp for a softmax (x <= 0): float64 keeps the full exp (its polynomial is
 * cheap next to the float64 products around it). */
static inline vf64 vf64_exp_softmax(vf64 x) { return vf64_exp(x); }

/* tanh(x) lane by lane with the C library's (float64 is the accurate variant; a soft-capped float64
 * attention is no speed target). */
static inline vf64 vf64_tanh(vf64 x) {
    double lanes[WP_VL_F64];
    vf64_storeu(lanes, x);
    for (int i = 0; i < WP_VL_F64; ++i) lanes[i] = tanh(lanes[i]);
    return vf64_loadu(lanes);
}

/* (sin, cos) of n pi/2 + r from (sin r, cos r) and the quadrant q (int64 lanes). */
static inline void vf64_sincos_quadrant(vf64 s, vf64 c, vi64 q, vf64 *sin_out, vf64 *cos_out) {
    const mf64 swap = vi64_nonzero(vi64_and(q, vi64_set1(1)));
    const vi64 sign_bit = vi64_set1((int64_t)0x8000000000000000ull);
    const vi64 sin_neg = vi64_and(vi64_slli(q, 62), sign_bit);
    const vi64 cos_neg = vi64_and(vi64_slli(vi64_add(q, vi64_set1(1)), 62), sign_bit);
    if (sin_out) *sin_out = vf64_xor(vf64_blend(swap, s, c), vi64_as_f64(sin_neg));
    if (cos_out) *cos_out = vf64_xor(vf64_blend(swap, c, s), vi64_as_f64(cos_neg));
}

/* cos(x) for |x| <= 2^20 (callers clamp). */
static inline vf64 vf64_cos(vf64 x) {
    const vf64 n = vf64_round(vf64_mul(x, vf64_set1(0.63661977236758134308)));
    /* pi/2 = p1 + p1t, p1 with 33 significant bits: n * p1 is exact for
     * |n| < 2^20 and the fused multiply-add rounds the tail step once. */
    vf64 r = vf64_fnmadd(n, vf64_set1(1.57079632673412561417e+00), x);
    r = vf64_fnmadd(n, vf64_set1(6.07710050650619224932e-11), r);
    const vf64 r2 = vf64_mul(r, r);
    /* Taylor on |r| <= pi/4: sin to r^17, cos to r^18 (truncation < 1e-18). */
    vf64 s = vf64_set1(1.0 / 355687428096000.0); /* 1/17! */
    s = vf64_fmadd(s, r2, vf64_set1(-1.0 / 1307674368000.0));
    s = vf64_fmadd(s, r2, vf64_set1(1.0 / 6227020800.0));
    s = vf64_fmadd(s, r2, vf64_set1(-1.0 / 39916800.0));
    s = vf64_fmadd(s, r2, vf64_set1(1.0 / 362880.0));
    s = vf64_fmadd(s, r2, vf64_set1(-1.0 / 5040.0));
    s = vf64_fmadd(s, r2, vf64_set1(1.0 / 120.0));
    s = vf64_fmadd(s, r2, vf64_set1(-1.0 / 6.0));
    s = vf64_fmadd(vf64_mul(s, r2), r, r);
    vf64 c = vf64_set1(1.0 / 6402373705728000.0); /* 1/18! */
    c = vf64_fmadd(c, r2, vf64_set1(-1.0 / 20922789888000.0));
    c = vf64_fmadd(c, r2, vf64_set1(1.0 / 87178291200.0));
    c = vf64_fmadd(c, r2, vf64_set1(-1.0 / 479001600.0));
    c = vf64_fmadd(c, r2, vf64_set1(1.0 / 3628800.0));
    c = vf64_fmadd(c, r2, vf64_set1(-1.0 / 40320.0));
    c = vf64_fmadd(c, r2, vf64_set1(1.0 / 720.0));
    c = vf64_fmadd(c, r2, vf64_set1(-1.0 / 24.0));
    c = vf64_fmadd(c, r2, vf64_set1(0.5));
    c = vf64_fnmadd(c, r2, vf64_set1(1.0));
    vf64 out;
    vf64_sincos_quadrant(s, c, vf64_int_to_i64(n), NULL, &out);
    return out;
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
static inline vf64 vf64_reduce_pio2(vf64 x, vf64 *tail, vf64 *quadrant) {
    const vf64 n = vf64_round(vf64_mul(x, vf64_set1(0.63661977236758134308)));
    const vf64 p2 = vf64_set1(6.123233995736766e-17);                     /* 0x1.1a62633145c07p-54 */
    const vf64 r1 = vf64_fnmadd(n, vf64_set1(1.5707963267948966), x);     /* exact; 0x1.921fb54442d18p+0 */
    const vf64 w = vf64_mul(n, p2);
    const vf64 w_err = vf64_fmsub(n, p2, w); /* n * P2 = w + w_err exactly */
    const vf64 r = vf64_sub(r1, w);
    /* two-sum: r1 - w = r + sum_err exactly, whatever the magnitudes */
    const vf64 bb = vf64_sub(r, r1);
    const vf64 sum_err = vf64_sub(vf64_sub(r1, vf64_sub(r, bb)), vf64_add(w, bb));
    *tail = vf64_fnmadd(n, vf64_set1(-1.4973849048591698e-33), /* -0x1.f1976b7ed8fbcp-110 */
                        vf64_sub(sum_err, w_err));
    /* n mod 4, exact for |n| < 2^51: n - 4 floor(n / 4) */
    *quadrant = vf64_fnmadd(vf64_floor(vf64_mul(n, vf64_set1(0.25))), vf64_set1(4.0), n);
    return r;
}

/* sin(x) and cos(x) for |x| < WP_SINCOS_MAX_ARG, within about 1 ulp
 * (measured < 1 ulp against long double on 3e7 arguments).  Taylor series on
 * the reduced argument r + t (sin to r^17, cos to r^18; truncation below
 * 1e-19 on |r| <= 0.8), with the tail t and the rounding of 1 - r^2/2
 * carried separately (fdlibm's kernel trick) so that only the final addition
 * rounds at full weight. */
static inline void vf64_sincos(vf64 x, vf64 *sin_out, vf64 *cos_out) {
    vf64 t, quadrant;
    const vf64 r = vf64_reduce_pio2(x, &t, &quadrant);
    const vf64 z = vf64_mul(r, r);
    /* sin(r + t) = r + r z P(z) + t (1 - z/2) */
    vf64 ps = vf64_set1(1.0 / 355687428096000.0); /* 1/17! */
    ps = vf64_fmadd(ps, z, vf64_set1(-1.0 / 1307674368000.0));
    ps = vf64_fmadd(ps, z, vf64_set1(1.0 / 6227020800.0));
    ps = vf64_fmadd(ps, z, vf64_set1(-1.0 / 39916800.0));
    ps = vf64_fmadd(ps, z, vf64_set1(1.0 / 362880.0));
    ps = vf64_fmadd(ps, z, vf64_set1(-1.0 / 5040.0));
    ps = vf64_fmadd(ps, z, vf64_set1(1.0 / 120.0));
    ps = vf64_fmadd(ps, z, vf64_set1(-1.0 / 6.0));
    const vf64 half_z = vf64_mul(z, vf64_set1(0.5));
    const vf64 s = vf64_add(r, vf64_fmadd(vf64_mul(r, z), ps, vf64_fnmadd(half_z, t, t)));
    /* cos(r + t) = w + [((1 - w) - z/2) - z_err/2 - r t + z^2 Q(z)],  w = 1 - z/2 rounded */
    vf64 qc = vf64_set1(-1.0 / 6402373705728000.0); /* -1/18! */
    qc = vf64_fmadd(qc, z, vf64_set1(1.0 / 20922789888000.0));
    qc = vf64_fmadd(qc, z, vf64_set1(-1.0 / 87178291200.0));
    qc = vf64_fmadd(qc, z, vf64_set1(1.0 / 479001600.0));
    qc = vf64_fmadd(qc, z, vf64_set1(-1.0 / 3628800.0));
    qc = vf64_fmadd(qc, z, vf64_set1(1.0 / 40320.0));
    qc = vf64_fmadd(qc, z, vf64_set1(-1.0 / 720.0));
    qc = vf64_fmadd(qc, z, vf64_set1(1.0 / 24.0));
    const vf64 one = vf64_set1(1.0);
    const vf64 z_err = vf64_fmsub(r, r, z); /* r^2 = z + z_err exactly */
    const vf64 w = vf64_sub(one, half_z);
    vf64 tail = vf64_sub(vf64_sub(one, w), half_z); /* exact: minus w's rounding */
    tail = vf64_fnmadd(vf64_set1(0.5), z_err, tail);
    tail = vf64_fnmadd(r, t, tail);
    tail = vf64_fmadd(vf64_mul(z, z), qc, tail);
    const vf64 c = vf64_add(w, tail);
    vf64_sincos_quadrant(s, c, vf64_int_to_i64(quadrant), sin_out, cos_out);
}

/* sin(x) and cos(x) rounded to float for 2 * WP_VL_F64 double lanes (lo's
 * lanes first), |x| < WP_SINCOS_MAX_ARG.  The reduction is done in double, the
 * polynomial in float (sin to r^9, cos to r^10: truncation below 3e-9 on
 * |r| <= 0.8): within about 1 ulp of float. */
static inline void vf32_sincos_from_f64(vf64 x_lo, vf64 x_hi, vf32 *sin_out, vf32 *cos_out) {
    vf64 q_lo, q_hi, t_lo, t_hi;
    const vf64 red_lo = vf64_reduce_pio2(x_lo, &t_lo, &q_lo);
    const vf64 red_hi = vf64_reduce_pio2(x_hi, &t_hi, &q_hi);
    const vf32 r = vf32_from_f64x2(vf64_add(red_lo, t_lo), vf64_add(red_hi, t_hi));
    vf32 s, c;
    vf32_sincos_poly(r, &s, &c);
    vf32_sincos_quadrant(s, c, vi32_from_f64x2(q_lo, q_hi), sin_out, cos_out);
}

#endif
