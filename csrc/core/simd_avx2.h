/* simd_avx2.h: wavepe's vector vocabulary on AVX2 + FMA (x86-64-v3).
 *
 * Every vectorised kernel of the core is written once against this
 * vocabulary (this file lists the operations and their contracts; simd_x86.h
 * adds transposes, prefetch and the store fence) and compiled once per ISA: a
 * file `<family>_avx2.c` includes this header, `<family>_avx512.c`
 * simd_avx512.h, `<family>_neon.c` simd_neon.h, and each then includes the
 * same kernel template.  The headers define the same names with the same
 * semantics; only the vector width (and the representation of lane masks)
 * differs:
 *
 *   vf32 / vf64   float / double lanes   (8 / 4 here)
 *   mf32 / mf64   a mask of those lanes  (a vector of all-ones / zero lanes here)
 *   vi32 / vi64   integer lanes of the same width as vf32 / vf64
 *
 * Include only from translation units compiled with -mavx2 -mfma.
 */
#ifndef WAVEPE_SIMD_AVX2_H
#define WAVEPE_SIMD_AVX2_H

#if defined(WAVEPE_SIMD_AVX512_H)
#error "simd_avx2.h and simd_avx512.h define the same names: include one per translation unit"
#endif

#include <immintrin.h>
#include <stdint.h>

#define WP_SIMD_NAME avx2 /* suffix of the functions a template exports */
#define WP_VL_F32 8
#define WP_VL_F64 4

#include "simd_x86.h" /* transposes, prefetch, store fence */

typedef __m256 vf32;
typedef __m256 mf32;
typedef __m256i vi32;
typedef __m256d vf64;
typedef __m256d mf64;
typedef __m256i vi64;

/* ==== float32 ============================================================ */

static inline vf32 vf32_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline vf32 vf32_load(const float *p) { return _mm256_load_ps(p); }
static inline void vf32_storeu(float *p, vf32 v) { _mm256_storeu_ps(p, v); }
static inline void vf32_store(float *p, vf32 v) { _mm256_store_ps(p, v); }
static inline void vf32_stream(float *p, vf32 v) { _mm256_stream_ps(p, v); }
static inline vf32 vf32_set1(float x) { return _mm256_set1_ps(x); }
static inline vf32 vf32_zero(void) { return _mm256_setzero_ps(); }
static inline vf32 vf32_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline vf32 vf32_iota(void) { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }

static inline __m256i wp_avx2_first_i32(int64_t n) {
    const int k = n < 0 ? 0 : (n > 8 ? 8 : (int)n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Lanes [0, n) of p (n clamped to [0, 8]), zero elsewhere; lanes past n are
 * never read, so p + n may end a mapping. */
static inline vf32 vf32_loadu_n(const float *p, int64_t n) { return _mm256_maskload_ps(p, wp_avx2_first_i32(n)); }
static inline void vf32_storeu_n(float *p, vf32 v, int64_t n) { _mm256_maskstore_ps(p, wp_avx2_first_i32(n), v); }

/* Half types in memory, float32 in registers (8 elements, 16 bytes; half.h's rounding):
 * bfloat16 by 16-bit shifts, round to nearest even with NaN -> 0x7FC0 as torch;
 * float16 by F16C (vcvtph2ps / vcvtps2ph, round to nearest even). */
static inline vf32 vf32_loadu_bf16(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* The bf16 of each lane in its high 16 bits (low bits: garbage): + 0x7FFF + lsb (round to nearest even),
 * written as + 0x8000 - (lsb == 0); NaN -> 0x7FC0. */
static inline __m256i wp_avx2_bf16_high(vf32 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb_clear = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x10000)), _mm256_setzero_si256());
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x8000)), lsb_clear);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
static inline __m256i wp_avx2_bf16_bits(vf32 v) { /* the same, in the low 16 bits (high bits zero) */
    return _mm256_srli_epi32(wp_avx2_bf16_high(v), 16);
}
static inline void vf32_storeu_bf16(uint16_t *p, vf32 v) {
    const __m256i r = wp_avx2_bf16_bits(v);
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
/* 16 elements, lo's 8 first: one pack, one permute, one 32-byte store */
static inline void vf32_storeu2_bf16(uint16_t *p, vf32 lo, vf32 hi) {
    const __m256i r = _mm256_packus_epi32(wp_avx2_bf16_bits(lo), wp_avx2_bf16_bits(hi)); /* lo0-3 hi0-3 lo4-7 hi4-7 */
    _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(r, 0xD8));
}
/* 2 * 8 bf16 at p split by parity, for kernels whose elements come in pairs
 * (a rotation's (a, b)) or whose order is theirs to choose: *even gets
 * elements 0, 2, .., 14 and *odd 1, 3, .., 15, widened.  One load and two
 * bit operations: element 2i is the low half of 32-bit lane i, 2i + 1 its
 * high half, already where a float32's bf16 bits belong. */
static inline void vf32_loadu_bf16_pairs(const uint16_t *p, vf32 *even, vf32 *odd) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}
/* The inverse of vf32_loadu_bf16_pairs: even[i] to p[2i], odd[i] to p[2i + 1],
 * each rounded as vf32_storeu_bf16 (one shift, one blend, one store). */
static inline void vf32_storeu_bf16_pairs(uint16_t *p, vf32 even, vf32 odd) {
    const __m256i e = wp_avx2_bf16_bits(even), o = wp_avx2_bf16_high(odd);
    _mm256_storeu_si256((__m256i *)p, _mm256_blend_epi16(e, o, 0xAA));
}
static inline vf32 vf32_loadu_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* One half element widened into every lane (a GEMM tile's broadcast operand). */
static inline vf32 vf32_bcast_bf16(const uint16_t *p) { return _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)*p << 16))); }
static inline vf32 vf32_bcast_f16(const uint16_t *p) { return _mm256_set1_ps(_cvtsh_ss(*p)); }
static inline void vf32_storeu_f16(uint16_t *p, vf32 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline vf32 vf32_add(vf32 a, vf32 b) { return _mm256_add_ps(a, b); }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return _mm256_sub_ps(a, b); }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return _mm256_mul_ps(a, b); }
static inline vf32 vf32_div(vf32 a, vf32 b) { return _mm256_div_ps(a, b); }
/* min / max return b where either operand is NaN (x86 semantics) */
static inline vf32 vf32_min(vf32 a, vf32 b) { return _mm256_min_ps(a, b); }
static inline vf32 vf32_max(vf32 a, vf32 b) { return _mm256_max_ps(a, b); }
static inline vf32 vf32_fmadd(vf32 a, vf32 b, vf32 c) { return _mm256_fmadd_ps(a, b, c); }   /* a b + c */
static inline vf32 vf32_fmsub(vf32 a, vf32 b, vf32 c) { return _mm256_fmsub_ps(a, b, c); }   /* a b - c */
static inline vf32 vf32_fnmadd(vf32 a, vf32 b, vf32 c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a b */
static inline vf32 vf32_xor(vf32 a, vf32 b) { return _mm256_xor_ps(a, b); }
static inline vf32 vf32_and(vf32 a, vf32 b) { return _mm256_and_ps(a, b); }
static inline vf32 vf32_or(vf32 a, vf32 b) { return _mm256_or_ps(a, b); }
static inline vf32 vf32_abs(vf32 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf32 vf32_round(vf32 a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf32 vf32_floor(vf32 a) { return _mm256_floor_ps(a); }

static inline mf32 vf32_cmplt(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline mf32 vf32_cmple(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline mf32 vf32_cmpgt(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline mf32 vf32_cmpge(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline mf32 vf32_cmpeq(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
/* a != b or either is NaN */
static inline mf32 vf32_cmpneq(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
static inline mf32 vf32_isnan(vf32 a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
/* b where m is set, a elsewhere */
static inline vf32 vf32_blend(mf32 m, vf32 a, vf32 b) { return _mm256_blendv_ps(a, b, m); }
static inline mf32 mf32_first(int64_t n) { return _mm256_castsi256_ps(wp_avx2_first_i32(n)); }
static inline mf32 mf32_and(mf32 a, mf32 b) { return _mm256_and_ps(a, b); }
static inline mf32 mf32_or(mf32 a, mf32 b) { return _mm256_or_ps(a, b); }
static inline mf32 mf32_andnot(mf32 a, mf32 b) { return _mm256_andnot_ps(a, b); } /* ~a & b */
static inline unsigned mf32_bits(mf32 m) { return (unsigned)_mm256_movemask_ps(m); }

static inline float vf32_hsum(vf32 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
static inline float vf32_hmax(vf32 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
/* lane i of the result = the sum of the lanes of a[i], i < 8 */
static inline vf32 vf32_reduce_lanes(const vf32 *a) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}
/* lanes in reverse order */
static inline vf32 vf32_reverse(vf32 v) {
    return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
}
/* (v1, v0, v3, v2, ...) */
static inline vf32 vf32_swap_pairs(vf32 v) { return _mm256_permute_ps(v, 0xB1); }
/* (a0, b0, a1, b1, ...) over the first / second half of the lanes */
static inline vf32 vf32_interleave_lo(vf32 a, vf32 b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x20);
}
static inline vf32 vf32_interleave_hi(vf32 a, vf32 b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x31);
}

/* integer lanes */
static inline vi32 vf32_cvt_i32(vf32 a) { return _mm256_cvtps_epi32(a); } /* round to nearest */
static inline vi32 vf32_as_i32(vf32 a) { return _mm256_castps_si256(a); }
static inline vf32 vi32_as_f32(vi32 a) { return _mm256_castsi256_ps(a); }
static inline vi32 vi32_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi32 vi32_add(vi32 a, vi32 b) { return _mm256_add_epi32(a, b); }
static inline vi32 vi32_sub(vi32 a, vi32 b) { return _mm256_sub_epi32(a, b); }
static inline vi32 vi32_and(vi32 a, vi32 b) { return _mm256_and_si256(a, b); }
/* lanes where a != 0, as a float lane mask (integer compare: immune to DAZ) */
static inline mf32 vi32_nonzero(vi32 a) {
    return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(a, _mm256_setzero_si256()), _mm256_set1_epi32(-1)));
}
#define vi32_slli(a, n) _mm256_slli_epi32((a), (n))
#define vi32_srai(a, n) _mm256_srai_epi32((a), (n))

/* ==== float64 ============================================================ */

static inline vf64 vf64_loadu(const double *p) { return _mm256_loadu_pd(p); }
static inline vf64 vf64_load(const double *p) { return _mm256_load_pd(p); }
static inline void vf64_storeu(double *p, vf64 v) { _mm256_storeu_pd(p, v); }
static inline void vf64_store(double *p, vf64 v) { _mm256_store_pd(p, v); }
static inline void vf64_stream(double *p, vf64 v) { _mm256_stream_pd(p, v); }
static inline vf64 vf64_set1(double x) { return _mm256_set1_pd(x); }
static inline vf64 vf64_zero(void) { return _mm256_setzero_pd(); }
static inline vf64 vf64_bcast(const double *p) { return _mm256_broadcast_sd(p); }
static inline vf64 vf64_iota(void) { return _mm256_setr_pd(0, 1, 2, 3); }

static inline __m256i wp_avx2_first_i64(int64_t n) {
    const long long k = n < 0 ? 0 : (n > 4 ? 4 : n);
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3));
}
static inline vf64 vf64_loadu_n(const double *p, int64_t n) { return _mm256_maskload_pd(p, wp_avx2_first_i64(n)); }
static inline void vf64_storeu_n(double *p, vf64 v, int64_t n) { _mm256_maskstore_pd(p, wp_avx2_first_i64(n), v); }

static inline vf64 vf64_add(vf64 a, vf64 b) { return _mm256_add_pd(a, b); }
static inline vf64 vf64_sub(vf64 a, vf64 b) { return _mm256_sub_pd(a, b); }
static inline vf64 vf64_mul(vf64 a, vf64 b) { return _mm256_mul_pd(a, b); }
static inline vf64 vf64_div(vf64 a, vf64 b) { return _mm256_div_pd(a, b); }
static inline vf64 vf64_min(vf64 a, vf64 b) { return _mm256_min_pd(a, b); }
static inline vf64 vf64_max(vf64 a, vf64 b) { return _mm256_max_pd(a, b); }
static inline vf64 vf64_fmadd(vf64 a, vf64 b, vf64 c) { return _mm256_fmadd_pd(a, b, c); }
static inline vf64 vf64_fmsub(vf64 a, vf64 b, vf64 c) { return _mm256_fmsub_pd(a, b, c); }
static inline vf64 vf64_fnmadd(vf64 a, vf64 b, vf64 c) { return _mm256_fnmadd_pd(a, b, c); }
static inline vf64 vf64_xor(vf64 a, vf64 b) { return _mm256_xor_pd(a, b); }
static inline vf64 vf64_and(vf64 a, vf64 b) { return _mm256_and_pd(a, b); }
static inline vf64 vf64_or(vf64 a, vf64 b) { return _mm256_or_pd(a, b); }
static inline vf64 vf64_abs(vf64 a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
static inline vf64 vf64_round(vf64 a) { return _mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf64 vf64_floor(vf64 a) { return _mm256_floor_pd(a); }

static inline mf64 vf64_cmplt(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
static inline mf64 vf64_cmple(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_LE_OQ); }
static inline mf64 vf64_cmpgt(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
static inline mf64 vf64_cmpge(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
static inline mf64 vf64_cmpeq(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
static inline mf64 vf64_cmpneq(vf64 a, vf64 b) { return _mm256_cmp_pd(a, b, _CMP_NEQ_UQ); }
static inline mf64 vf64_isnan(vf64 a) { return _mm256_cmp_pd(a, a, _CMP_UNORD_Q); }
static inline vf64 vf64_blend(mf64 m, vf64 a, vf64 b) { return _mm256_blendv_pd(a, b, m); }
static inline mf64 mf64_first(int64_t n) { return _mm256_castsi256_pd(wp_avx2_first_i64(n)); }
static inline mf64 mf64_and(mf64 a, mf64 b) { return _mm256_and_pd(a, b); }
static inline mf64 mf64_or(mf64 a, mf64 b) { return _mm256_or_pd(a, b); }
static inline mf64 mf64_andnot(mf64 a, mf64 b) { return _mm256_andnot_pd(a, b); }
static inline unsigned mf64_bits(mf64 m) { return (unsigned)_mm256_movemask_pd(m); }

static inline double vf64_hsum(vf64 v) {
    __m128d x = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    x = _mm_add_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}
static inline double vf64_hmax(vf64 v) {
    __m128d x = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    x = _mm_max_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}
static inline vf64 vf64_reduce_lanes(const vf64 *a) {
    const __m256d h01 = _mm256_hadd_pd(a[0], a[1]), h23 = _mm256_hadd_pd(a[2], a[3]);
    return _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
}
static inline vf64 vf64_reverse(vf64 v) { return _mm256_permute4x64_pd(v, 0x1B); }
static inline vf64 vf64_swap_pairs(vf64 v) { return _mm256_permute_pd(v, 0x5); }
static inline vf64 vf64_interleave_lo(vf64 a, vf64 b) {
    return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x20);
}
static inline vf64 vf64_interleave_hi(vf64 a, vf64 b) {
    return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x31);
}

static inline vi64 vf64_as_i64(vf64 a) { return _mm256_castpd_si256(a); }
static inline vf64 vi64_as_f64(vi64 a) { return _mm256_castsi256_pd(a); }
static inline vi64 vi64_set1(int64_t x) { return _mm256_set1_epi64x((long long)x); }
static inline vi64 vi64_add(vi64 a, vi64 b) { return _mm256_add_epi64(a, b); }
static inline vi64 vi64_sub(vi64 a, vi64 b) { return _mm256_sub_epi64(a, b); }
static inline vi64 vi64_and(vi64 a, vi64 b) { return _mm256_and_si256(a, b); }
static inline mf64 vi64_nonzero(vi64 a) {
    return _mm256_castsi256_pd(_mm256_xor_si256(_mm256_cmpeq_epi64(a, _mm256_setzero_si256()), _mm256_set1_epi64x(-1)));
}
#define vi64_slli(a, n) _mm256_slli_epi64((a), (n))
/* Integer-valued double lanes (|v| < 2^51) to int64 lanes. */
static inline vi64 vf64_int_to_i64(vf64 v) {
    const __m256d magic = _mm256_set1_pd(6755399441055744.0); /* 2^52 + 2^51 */
    return _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(v, magic)), _mm256_castpd_si256(magic));
}

/* ==== between the two ==================================================== */

/* Float lanes of two double vectors, lo's lanes first (each rounded once). */
static inline vf32 vf32_from_f64x2(vf64 lo, vf64 hi) {
    return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}
/* Int32 lanes of two vectors of integer-valued doubles, lo's lanes first. */
static inline vi32 vi32_from_f64x2(vf64 lo, vf64 hi) {
    return _mm256_set_m128i(_mm256_cvtpd_epi32(hi), _mm256_cvtpd_epi32(lo));
}

#endif
