/* simd_neon.h: wavepe's vector vocabulary on AArch64 Advanced SIMD (NEON).
 *
 * The same names and semantics as simd_avx2.h (read that file first) and
 * simd_x86.h, with 128-bit vectors: 4 float / 2 double lanes, lane masks as
 * all-ones / zero integer lanes (uint32x4_t / uint64x2_t).  NEON is part of
 * the AArch64 base architecture: no compiler flags are needed.
 *
 * Where NEON's rules differ from the x86 ones the kernels were written
 * against, this file reproduces the x86 result:
 *   - min / max: FMIN / FMAX return NaN when either operand is NaN (FMINNM /
 *     FMAXNM the number); x86 returns the second operand.  Clamps such as
 *     min(max(x, lo), hi) rely on that, so both are a compare and a select.
 *   - rounding to integers is to nearest even (FRINTN, FCVTNS), as the x86
 *     kernels' _MM_FROUND_TO_NEAREST_INT and the default MXCSR.
 *   - there are no masked loads or stores: the *_n variants copy n lanes
 *     through a register-sized buffer, so that lanes past n are never read.
 *   - ACLE has no non-temporal store intrinsic: vf32_stream is a plain store,
 *     and the fence after streamed stores has nothing to order.
 */
#ifndef WAVEPE_SIMD_NEON_H
#define WAVEPE_SIMD_NEON_H

#if defined(WAVEPE_SIMD_AVX2_H) || defined(WAVEPE_SIMD_AVX512_H)
#error "the vocabulary headers define the same names: include one per translation unit"
#endif

#include <arm_neon.h>
#include <stdint.h>

#define WP_SIMD_NAME neon /* suffix of the functions a template exports */
#define WP_VL_F32 4
#define WP_VL_F64 2
#define WP_TB_F32 4 /* vf32_transpose: 4 x 4 floats */
#define WP_TB_F64 2

typedef float32x4_t vf32;
typedef uint32x4_t mf32;
typedef int32x4_t vi32;
typedef float64x2_t vf64;
typedef uint64x2_t mf64;
typedef int64x2_t vi64;

/* An asm statement, not __builtin_prefetch: see simd_x86.h (GCC deleted the
 * calls of a function holding only prefetches). */
static inline void wp_prefetch(const void *p) { __asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)p)); }
static inline void wp_stream_fence(void) {}

/* ==== float32 ============================================================ */

static inline vf32 vf32_loadu(const float *p) { return vld1q_f32(p); }
static inline vf32 vf32_load(const float *p) { return vld1q_f32(p); }
static inline void vf32_storeu(float *p, vf32 v) { vst1q_f32(p, v); }
static inline void vf32_store(float *p, vf32 v) { vst1q_f32(p, v); }
static inline void vf32_stream(float *p, vf32 v) { vst1q_f32(p, v); }
static inline vf32 vf32_set1(float x) { return vdupq_n_f32(x); }
static inline vf32 vf32_zero(void) { return vdupq_n_f32(0.0f); }
static inline vf32 vf32_bcast(const float *p) { return vld1q_dup_f32(p); }
static inline vf32 vf32_iota(void) {
    static const float iota[4] = {0, 1, 2, 3};
    return vld1q_f32(iota);
}

/* Half types in memory, float32 in registers (4 elements, 8 bytes; half.h's rounding):
 * bfloat16 by 16-bit shifts, round to nearest even with NaN -> 0x7FC0 as torch;
 * float16 by fcvtl / fcvtn (round to nearest even by FPCR.RMode; FZ16 does not apply to conversions). */
static inline vf32 vf32_loadu_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
/* The bf16 of each lane in its high 16 bits (low bits: garbage): + 0x7FFF + lsb, NaN -> 0x7FC0. */
static inline uint32x4_t wp_neon_bf16_high(vf32 v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFF)), lsb);
    return vbslq_u32(vceqq_f32(v, v), r, vdupq_n_u32(0x7FC00000u));
}
static inline void vf32_storeu_bf16(uint16_t *p, vf32 v) { vst1_u16(p, vshrn_n_u32(wp_neon_bf16_high(v), 16)); }
/* 2 * 4 elements, lo's first */
static inline void vf32_storeu2_bf16(uint16_t *p, vf32 lo, vf32 hi) {
    vf32_storeu_bf16(p, lo);
    vf32_storeu_bf16(p + 4, hi);
}
/* 2 * 4 bf16 at p split by parity (simd_avx2.h's vf32_loadu_bf16_pairs):
 * *even gets elements 0, 2, 4, 6, *odd 1, 3, 5, 7, widened. */
static inline void vf32_loadu_bf16_pairs(const uint16_t *p, vf32 *even, vf32 *odd) {
    const uint32x4_t w = vreinterpretq_u32_u16(vld1q_u16(p));
    *even = vreinterpretq_f32_u32(vshlq_n_u32(w, 16));
    *odd = vreinterpretq_f32_u32(vandq_u32(w, vdupq_n_u32(0xFFFF0000u)));
}
/* The inverse of vf32_loadu_bf16_pairs: even[i] to p[2i], odd[i] to p[2i + 1],
 * each rounded as vf32_storeu_bf16 (vsri puts even's high half under odd's). */
static inline void vf32_storeu_bf16_pairs(uint16_t *p, vf32 even, vf32 odd) {
    vst1q_u16(p, vreinterpretq_u16_u32(vsriq_n_u32(wp_neon_bf16_high(odd), wp_neon_bf16_high(even), 16)));
}
static inline vf32 vf32_loadu_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
/* One half element widened into every lane (a GEMM tile's broadcast operand). */
static inline vf32 vf32_bcast_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vdupq_n_u32((uint32_t)*p << 16)); }
static inline vf32 vf32_bcast_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(*p))); }
static inline void vf32_storeu_f16(uint16_t *p, vf32 v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }

/* Lanes [0, n) of p (n clamped to [0, 4]), zero elsewhere; lanes past n are
 * never read, so p + n may end a mapping. */
static inline vf32 vf32_loadu_n(const float *p, int64_t n) {
    if (n >= 4) return vld1q_f32(p);
    float b[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) b[i] = p[i];
    return vld1q_f32(b);
}
static inline void vf32_storeu_n(float *p, vf32 v, int64_t n) {
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float b[4];
    vst1q_f32(b, v);
    for (int64_t i = 0; i < n; ++i) p[i] = b[i];
}

static inline vf32 vf32_add(vf32 a, vf32 b) { return vaddq_f32(a, b); }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return vsubq_f32(a, b); }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return vmulq_f32(a, b); }
static inline vf32 vf32_div(vf32 a, vf32 b) { return vdivq_f32(a, b); }
/* min / max return b where either operand is NaN (x86 semantics, see above) */
static inline vf32 vf32_min(vf32 a, vf32 b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
static inline vf32 vf32_max(vf32 a, vf32 b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline vf32 vf32_fmadd(vf32 a, vf32 b, vf32 c) { return vfmaq_f32(c, a, b); }            /* a b + c */
static inline vf32 vf32_fmsub(vf32 a, vf32 b, vf32 c) { return vfmaq_f32(vnegq_f32(c), a, b); } /* a b - c */
static inline vf32 vf32_fnmadd(vf32 a, vf32 b, vf32 c) { return vfmsq_f32(c, a, b); }           /* c - a b */
static inline vf32 vf32_xor(vf32 a, vf32 b) {
    return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static inline vf32 vf32_and(vf32 a, vf32 b) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static inline vf32 vf32_or(vf32 a, vf32 b) {
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static inline vf32 vf32_abs(vf32 a) { return vabsq_f32(a); }
static inline vf32 vf32_round(vf32 a) { return vrndnq_f32(a); }
static inline vf32 vf32_floor(vf32 a) { return vrndmq_f32(a); }

static inline mf32 vf32_cmplt(vf32 a, vf32 b) { return vcltq_f32(a, b); }
static inline mf32 vf32_cmple(vf32 a, vf32 b) { return vcleq_f32(a, b); }
static inline mf32 vf32_cmpgt(vf32 a, vf32 b) { return vcgtq_f32(a, b); }
static inline mf32 vf32_cmpge(vf32 a, vf32 b) { return vcgeq_f32(a, b); }
static inline mf32 vf32_cmpeq(vf32 a, vf32 b) { return vceqq_f32(a, b); }
/* a != b or either is NaN */
static inline mf32 vf32_cmpneq(vf32 a, vf32 b) { return vmvnq_u32(vceqq_f32(a, b)); }
static inline mf32 vf32_isnan(vf32 a) { return vmvnq_u32(vceqq_f32(a, a)); }
/* b where m is set, a elsewhere */
static inline vf32 vf32_blend(mf32 m, vf32 a, vf32 b) { return vbslq_f32(m, b, a); }
static inline mf32 mf32_first(int64_t n) {
    static const int32_t lanes[4] = {0, 1, 2, 3};
    const int32_t k = n < 0 ? 0 : (n > 4 ? 4 : (int32_t)n);
    return vcltq_s32(vld1q_s32(lanes), vdupq_n_s32(k));
}
static inline mf32 mf32_and(mf32 a, mf32 b) { return vandq_u32(a, b); }
static inline mf32 mf32_or(mf32 a, mf32 b) { return vorrq_u32(a, b); }
static inline mf32 mf32_andnot(mf32 a, mf32 b) { return vbicq_u32(b, a); } /* ~a & b */
/* bit i = lane i (x86's movemask) */
static inline unsigned mf32_bits(mf32 m) {
    static const uint32_t weight[4] = {1, 2, 4, 8};
    return (unsigned)vaddvq_u32(vandq_u32(m, vld1q_u32(weight)));
}

/* pairwise: (v0 + v1) + (v2 + v3) */
static inline float vf32_hsum(vf32 v) { return vaddvq_f32(v); }
/* the same tree as simd_avx2.h's, with x86 max: halves, then pairs */
static inline float vf32_hmax(vf32 v) {
    const vf32 x = vf32_max(v, vextq_f32(v, v, 2));
    return vgetq_lane_f32(vf32_max(x, vextq_f32(x, x, 1)), 0);
}
/* lane i of the result = the sum of the lanes of a[i], i < 4 */
static inline vf32 vf32_reduce_lanes(const vf32 *a) {
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}
/* lanes in reverse order */
static inline vf32 vf32_reverse(vf32 v) {
    const vf32 r = vrev64q_f32(v); /* (v1, v0, v3, v2) */
    return vextq_f32(r, r, 2);
}
/* (v1, v0, v3, v2) */
static inline vf32 vf32_swap_pairs(vf32 v) { return vrev64q_f32(v); }
/* (a0, b0, a1, b1) / (a2, b2, a3, b3) */
static inline vf32 vf32_interleave_lo(vf32 a, vf32 b) { return vzip1q_f32(a, b); }
static inline vf32 vf32_interleave_hi(vf32 a, vf32 b) { return vzip2q_f32(a, b); }

/* dst[r * ldd + i] = src[i * ks + r] for a 4 x 4 block */
static inline void vf32_transpose(const float *src, int64_t ks, float *dst, int64_t ldd) {
    const vf32 r0 = vld1q_f32(src), r1 = vld1q_f32(src + ks);
    const vf32 r2 = vld1q_f32(src + 2 * ks), r3 = vld1q_f32(src + 3 * ks);
    /* 32-bit pairs, then 64-bit halves */
    const vf32 t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1); /* (r00 r10 r02 r12), (r01 r11 r03 r13) */
    const vf32 t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
    const float64x2_t d0 = vreinterpretq_f64_f32(t0), d1 = vreinterpretq_f64_f32(t1);
    const float64x2_t d2 = vreinterpretq_f64_f32(t2), d3 = vreinterpretq_f64_f32(t3);
    vst1q_f32(dst, vreinterpretq_f32_f64(vzip1q_f64(d0, d2)));
    vst1q_f32(dst + ldd, vreinterpretq_f32_f64(vzip1q_f64(d1, d3)));
    vst1q_f32(dst + 2 * ldd, vreinterpretq_f32_f64(vzip2q_f64(d0, d2)));
    vst1q_f32(dst + 3 * ldd, vreinterpretq_f32_f64(vzip2q_f64(d1, d3)));
}

/* integer lanes */
static inline vi32 vf32_cvt_i32(vf32 a) { return vcvtnq_s32_f32(a); } /* round to nearest even */
static inline vi32 vf32_as_i32(vf32 a) { return vreinterpretq_s32_f32(a); }
static inline vf32 vi32_as_f32(vi32 a) { return vreinterpretq_f32_s32(a); }
static inline vi32 vi32_set1(int32_t x) { return vdupq_n_s32(x); }
static inline vi32 vi32_add(vi32 a, vi32 b) { return vaddq_s32(a, b); }
static inline vi32 vi32_sub(vi32 a, vi32 b) { return vsubq_s32(a, b); }
static inline vi32 vi32_and(vi32 a, vi32 b) { return vandq_s32(a, b); }
/* lanes where a != 0, as a float lane mask (integer test: immune to FZ) */
static inline mf32 vi32_nonzero(vi32 a) { return vtstq_s32(a, a); }
#define vi32_slli(a, n) vshlq_n_s32((a), (n))
#define vi32_srai(a, n) vshrq_n_s32((a), (n))

/* ==== float64 ============================================================ */

static inline vf64 vf64_loadu(const double *p) { return vld1q_f64(p); }
static inline vf64 vf64_load(const double *p) { return vld1q_f64(p); }
static inline void vf64_storeu(double *p, vf64 v) { vst1q_f64(p, v); }
static inline void vf64_store(double *p, vf64 v) { vst1q_f64(p, v); }
static inline void vf64_stream(double *p, vf64 v) { vst1q_f64(p, v); }
static inline vf64 vf64_set1(double x) { return vdupq_n_f64(x); }
static inline vf64 vf64_zero(void) { return vdupq_n_f64(0.0); }
static inline vf64 vf64_bcast(const double *p) { return vld1q_dup_f64(p); }
static inline vf64 vf64_iota(void) {
    static const double iota[2] = {0, 1};
    return vld1q_f64(iota);
}

static inline vf64 vf64_loadu_n(const double *p, int64_t n) {
    if (n >= 2) return vld1q_f64(p);
    return n == 1 ? vsetq_lane_f64(p[0], vdupq_n_f64(0.0), 0) : vdupq_n_f64(0.0);
}
static inline void vf64_storeu_n(double *p, vf64 v, int64_t n) {
    if (n >= 2) vst1q_f64(p, v);
    else if (n == 1) p[0] = vgetq_lane_f64(v, 0);
}

static inline vf64 vf64_add(vf64 a, vf64 b) { return vaddq_f64(a, b); }
static inline vf64 vf64_sub(vf64 a, vf64 b) { return vsubq_f64(a, b); }
static inline vf64 vf64_mul(vf64 a, vf64 b) { return vmulq_f64(a, b); }
static inline vf64 vf64_div(vf64 a, vf64 b) { return vdivq_f64(a, b); }
static inline vf64 vf64_min(vf64 a, vf64 b) { return vbslq_f64(vcltq_f64(a, b), a, b); }
static inline vf64 vf64_max(vf64 a, vf64 b) { return vbslq_f64(vcgtq_f64(a, b), a, b); }
static inline vf64 vf64_fmadd(vf64 a, vf64 b, vf64 c) { return vfmaq_f64(c, a, b); }
static inline vf64 vf64_fmsub(vf64 a, vf64 b, vf64 c) { return vfmaq_f64(vnegq_f64(c), a, b); }
static inline vf64 vf64_fnmadd(vf64 a, vf64 b, vf64 c) { return vfmsq_f64(c, a, b); }
static inline vf64 vf64_xor(vf64 a, vf64 b) {
    return vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(a), vreinterpretq_u64_f64(b)));
}
static inline vf64 vf64_and(vf64 a, vf64 b) {
    return vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(a), vreinterpretq_u64_f64(b)));
}
static inline vf64 vf64_or(vf64 a, vf64 b) {
    return vreinterpretq_f64_u64(vorrq_u64(vreinterpretq_u64_f64(a), vreinterpretq_u64_f64(b)));
}
static inline vf64 vf64_abs(vf64 a) { return vabsq_f64(a); }
static inline vf64 vf64_round(vf64 a) { return vrndnq_f64(a); }
static inline vf64 vf64_floor(vf64 a) { return vrndmq_f64(a); }

static inline mf64 vf64_cmplt(vf64 a, vf64 b) { return vcltq_f64(a, b); }
static inline mf64 vf64_cmple(vf64 a, vf64 b) { return vcleq_f64(a, b); }
static inline mf64 vf64_cmpgt(vf64 a, vf64 b) { return vcgtq_f64(a, b); }
static inline mf64 vf64_cmpge(vf64 a, vf64 b) { return vcgeq_f64(a, b); }
static inline mf64 vf64_cmpeq(vf64 a, vf64 b) { return vceqq_f64(a, b); }
static inline mf64 vf64_cmpneq(vf64 a, vf64 b) {
    return vreinterpretq_u64_u32(vmvnq_u32(vreinterpretq_u32_u64(vceqq_f64(a, b))));
}
static inline mf64 vf64_isnan(vf64 a) { return vf64_cmpneq(a, a); }
static inline vf64 vf64_blend(mf64 m, vf64 a, vf64 b) { return vbslq_f64(m, b, a); }
static inline mf64 mf64_first(int64_t n) {
    static const int64_t lanes[2] = {0, 1};
    const int64_t k = n < 0 ? 0 : (n > 2 ? 2 : n);
    return vcltq_s64(vld1q_s64(lanes), vdupq_n_s64(k));
}
static inline mf64 mf64_and(mf64 a, mf64 b) { return vandq_u64(a, b); }
static inline mf64 mf64_or(mf64 a, mf64 b) { return vorrq_u64(a, b); }
static inline mf64 mf64_andnot(mf64 a, mf64 b) { return vbicq_u64(b, a); }
static inline unsigned mf64_bits(mf64 m) {
    return (unsigned)((vgetq_lane_u64(m, 0) >> 63) | ((vgetq_lane_u64(m, 1) >> 63) << 1));
}

static inline double vf64_hsum(vf64 v) { return vaddvq_f64(v); }
static inline double vf64_hmax(vf64 v) { return vgetq_lane_f64(vf64_max(v, vextq_f64(v, v, 1)), 0); }
static inline vf64 vf64_reduce_lanes(const vf64 *a) { return vpaddq_f64(a[0], a[1]); }
static inline vf64 vf64_reverse(vf64 v) { return vextq_f64(v, v, 1); }
static inline vf64 vf64_swap_pairs(vf64 v) { return vextq_f64(v, v, 1); }
static inline vf64 vf64_interleave_lo(vf64 a, vf64 b) { return vzip1q_f64(a, b); }
static inline vf64 vf64_interleave_hi(vf64 a, vf64 b) { return vzip2q_f64(a, b); }

static inline void vf64_transpose(const double *src, int64_t ks, double *dst, int64_t ldd) {
    const vf64 r0 = vld1q_f64(src), r1 = vld1q_f64(src + ks);
    vst1q_f64(dst, vzip1q_f64(r0, r1));
    vst1q_f64(dst + ldd, vzip2q_f64(r0, r1));
}

static inline vi64 vf64_as_i64(vf64 a) { return vreinterpretq_s64_f64(a); }
static inline vf64 vi64_as_f64(vi64 a) { return vreinterpretq_f64_s64(a); }
static inline vi64 vi64_set1(int64_t x) { return vdupq_n_s64(x); }
static inline vi64 vi64_add(vi64 a, vi64 b) { return vaddq_s64(a, b); }
static inline vi64 vi64_sub(vi64 a, vi64 b) { return vsubq_s64(a, b); }
static inline vi64 vi64_and(vi64 a, vi64 b) { return vandq_s64(a, b); }
static inline mf64 vi64_nonzero(vi64 a) { return vtstq_s64(a, a); }
#define vi64_slli(a, n) vshlq_n_s64((a), (n))
/* Integer-valued double lanes (|v| < 2^51) to int64 lanes: exact, as the x86
 * magic-number conversion. */
static inline vi64 vf64_int_to_i64(vf64 v) { return vcvtnq_s64_f64(v); }

/* ==== between the two ==================================================== */

/* Float lanes of two double vectors, lo's lanes first (each rounded once). */
static inline vf32 vf32_from_f64x2(vf64 lo, vf64 hi) { return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi); }
/* Int32 lanes of two vectors of integer-valued doubles, lo's lanes first. */
static inline vi32 vi32_from_f64x2(vf64 lo, vf64 hi) {
    return vcombine_s32(vmovn_s64(vcvtnq_s64_f64(lo)), vmovn_s64(vcvtnq_s64_f64(hi)));
}

#endif
