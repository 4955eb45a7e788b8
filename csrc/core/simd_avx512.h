/* simd_avx512.h: wavepe's vector vocabulary on AVX-512 (x86-64-v4: F, BW, VL, DQ).
 *
 * The same names and semantics as simd_avx2.h (read that file first), with
 * 16 float / 8 double lanes and lane masks held in opmask registers
 * (__mmask16 / __mmask8).  Include only from translation units compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma.
 *
 * On a CPU without AVX-512, tests build the same translation units against
 * SIMDe (WAVEPE_SIMDE_AVX512, the Makefile's ctest-simde), which implements these intrinsics
 * with AVX2; only intrinsics SIMDe provides are used here.
 *
 * With WAVEPE_AVX512BF16 defined (attention_avx512bf16.c -- the other
 * families run their avx512 kernels on that ISA, isa_table.h --, compiled with
 * -mavx512bf16 in addition) the kernels are named *_avx512bf16 and the
 * vocabulary has the bf16 dot product (WP_HAS_DPBF16, at the end).  With
 * WAVEPE_AMX as well (attention_amx.c: AMX tiles on top of avx512bf16)
 * they are named *_amx and the vocabulary says so (WP_HAS_TILES: the
 * attention's half-type products go through tiles.h).
 */
#ifndef WAVEPE_SIMD_AVX512_H
#define WAVEPE_SIMD_AVX512_H

#if defined(WAVEPE_SIMD_AVX2_H)
#error "simd_avx2.h and simd_avx512.h define the same names: include one per translation unit"
#endif

#ifdef WAVEPE_SIMDE_AVX512
/* test builds on CPUs without AVX-512: SIMDe's portable AVX-512, native names */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#else
#include <immintrin.h>
#endif
#include <stdint.h>

#if defined(WAVEPE_AMX)
#define WAVEPE_AVX512BF16 /* the amx ISA is avx512bf16 with tiles */
#define WP_SIMD_NAME amx
#define WP_HAS_TILES
#elif defined(WAVEPE_AVX512BF16)
#define WP_SIMD_NAME avx512bf16
#else
#define WP_SIMD_NAME avx512
#endif
#define WP_VL_F32 16
#define WP_VL_F64 8

#include "simd_x86.h" /* transposes (on AVX registers), prefetch, store fence */

typedef __m512 vf32;
typedef __mmask16 mf32;
typedef __m512i vi32;
typedef __m512d vf64;
typedef __mmask8 mf64;
typedef __m512i vi64;

/* ==== float32 ============================================================ */

static inline vf32 vf32_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline vf32 vf32_load(const float *p) { return _mm512_load_ps(p); }
static inline void vf32_storeu(float *p, vf32 v) { _mm512_storeu_ps(p, v); }
static inline void vf32_store(float *p, vf32 v) { _mm512_store_ps(p, v); }
#ifdef WAVEPE_SIMDE_AVX512
static inline void vf32_stream(float *p, vf32 v) { _mm512_store_ps(p, v); } /* SIMDe has no non-temporal store */
#else
static inline void vf32_stream(float *p, vf32 v) { _mm512_stream_ps(p, v); }
#endif
static inline vf32 vf32_set1(float x) { return _mm512_set1_ps(x); }
static inline vf32 vf32_zero(void) { return _mm512_setzero_ps(); }
static inline vf32 vf32_bcast(const float *p) { return _mm512_set1_ps(*p); }
static inline vf32 vf32_iota(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

static inline mf32 mf32_first(int64_t n) {
    return n <= 0 ? (mf32)0 : (n >= 16 ? (mf32)0xFFFF : (mf32)((1u << n) - 1u));
}
/* Lanes [0, n) of p (n clamped to [0, 16]), zero elsewhere; masked lanes are
 * never read (no fault past the end of a mapping). */
#ifdef WAVEPE_SIMDE_AVX512
/* SIMDe's masked loads and stores touch every lane's memory: copy lanes instead */
static inline vf32 vf32_loadu_n(const float *p, int64_t n) {
    float b[16] = {0};
    for (int64_t i = 0; i < n && i < 16; ++i) b[i] = p[i];
    return _mm512_loadu_ps(b);
}
static inline void vf32_storeu_n(float *p, vf32 v, int64_t n) {
    float b[16];
    _mm512_storeu_ps(b, v);
    for (int64_t i = 0; i < n && i < 16; ++i) p[i] = b[i];
}
#else
static inline vf32 vf32_loadu_n(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(mf32_first(n), p); }
static inline void vf32_storeu_n(float *p, vf32 v, int64_t n) { _mm512_mask_storeu_ps(p, mf32_first(n), v); }
#endif

/* Half types in memory, float32 in registers (16 elements, 32 bytes; half.h's rounding):
 * bfloat16 by 16-bit shifts, round to nearest even with NaN -> 0x7FC0 as torch;
 * float16 by vcvtph2ps / vcvtps2ph (AVX-512F, round to nearest even). */
static inline vf32 vf32_loadu_bf16(const uint16_t *p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* The bf16 of each lane in its high 16 bits (low bits: garbage): + 0x7FFF + lsb, NaN -> 0x7FC0. */
static inline __m512i wp_avx512_bf16_high(vf32 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 lsb_set = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    const __m512i r0 = _mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF));
    const __m512i r = _mm512_mask_add_epi32(r0, lsb_set, r0, _mm512_set1_epi32(1));
    return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC00000));
}
static inline void vf32_storeu_bf16(uint16_t *p, vf32 v) {
    const __m512i r = _mm512_srli_epi32(wp_avx512_bf16_high(v), 16);
#ifdef WAVEPE_SIMDE_AVX512
    /* SIMDe 0.8.2 has no vpmovdw: pack the two halves on AVX2 (values <= 0xFFFF, packus is exact) */
    const __m256i lo = _mm512_castsi512_si256(r), hi = _mm512_extracti64x4_epi64(r, 1);
    _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
#else
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
#endif
}
/* 2 * 16 elements, lo's first */
static inline void vf32_storeu2_bf16(uint16_t *p, vf32 lo, vf32 hi) {
    vf32_storeu_bf16(p, lo);
    vf32_storeu_bf16(p + 16, hi);
}
/* 2 * 16 bf16 at p split by parity (simd_avx2.h's vf32_loadu_bf16_pairs):
 * *even gets elements 0, 2, .., 30, *odd 1, 3, .., 31, widened. */
static inline void vf32_loadu_bf16_pairs(const uint16_t *p, vf32 *even, vf32 *odd) {
    const __m512i w = _mm512_loadu_si512((const void *)p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xFFFF0000u)));
}
/* The inverse of vf32_loadu_bf16_pairs: even[i] to p[2i], odd[i] to p[2i + 1],
 * each rounded as vf32_storeu_bf16; the halves merged by one ternary logic op. */
static inline void vf32_storeu_bf16_pairs(uint16_t *p, vf32 even, vf32 odd) {
    const __m512i e = _mm512_srli_epi32(wp_avx512_bf16_high(even), 16), o = wp_avx512_bf16_high(odd);
    /* (o & 0xFFFF0000) | e: e's high halves are zero */
    _mm512_storeu_si512((void *)p, _mm512_ternarylogic_epi32(o, _mm512_set1_epi32((int)0xFFFF0000u), e, 0xEA));
}
static inline vf32 vf32_loadu_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
/* One half element widened into every lane (a GEMM tile's broadcast operand; F16C for fp16). */
static inline vf32 vf32_bcast_bf16(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)*p << 16))); }
static inline vf32 vf32_bcast_f16(const uint16_t *p) { return _mm512_set1_ps(_cvtsh_ss(*p)); }
static inline void vf32_storeu_f16(uint16_t *p, vf32 v) {
#ifdef WAVEPE_SIMDE_AVX512
    /* SIMDe 0.8.2 has no 512-bit vcvtps2ph: the two halves through F16C */
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(_mm512_castps512_ps256(v), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128((__m128i *)(p + 8), _mm256_cvtps_ph(_mm512_extractf32x8_ps(v, 1), _MM_FROUND_TO_NEAREST_INT));
#else
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
}

static inline vf32 vf32_add(vf32 a, vf32 b) { return _mm512_add_ps(a, b); }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return _mm512_sub_ps(a, b); }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return _mm512_mul_ps(a, b); }
static inline vf32 vf32_div(vf32 a, vf32 b) { return _mm512_div_ps(a, b); }
static inline vf32 vf32_min(vf32 a, vf32 b) { return _mm512_min_ps(a, b); }
static inline vf32 vf32_max(vf32 a, vf32 b) { return _mm512_max_ps(a, b); }
static inline vf32 vf32_fmadd(vf32 a, vf32 b, vf32 c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf32 vf32_fmsub(vf32 a, vf32 b, vf32 c) { return _mm512_fmsub_ps(a, b, c); }
static inline vf32 vf32_fnmadd(vf32 a, vf32 b, vf32 c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vf32 vf32_xor(vf32 a, vf32 b) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline vf32 vf32_and(vf32 a, vf32 b) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline vf32 vf32_or(vf32 a, vf32 b) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline vf32 vf32_abs(vf32 a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
}
static inline vf32 vf32_round(vf32 a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf32 vf32_floor(vf32 a) { return _mm512_floor_ps(a); }

static inline mf32 vf32_cmplt(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline mf32 vf32_cmple(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline mf32 vf32_cmpgt(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline mf32 vf32_cmpge(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline mf32 vf32_cmpeq(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline mf32 vf32_cmpneq(vf32 a, vf32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
static inline mf32 vf32_isnan(vf32 a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vf32 vf32_blend(mf32 m, vf32 a, vf32 b) { return _mm512_mask_blend_ps(m, a, b); }
static inline mf32 mf32_and(mf32 a, mf32 b) { return (mf32)(a & b); }
static inline mf32 mf32_or(mf32 a, mf32 b) { return (mf32)(a | b); }
static inline mf32 mf32_andnot(mf32 a, mf32 b) { return (mf32)(~a & b); }
static inline unsigned mf32_bits(mf32 m) { return (unsigned)m; }

static inline float vf32_hsum(vf32 v) {
    /* pairwise halves: the same association on every run */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
static inline float vf32_hmax(vf32 v) {
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
/* lane i of the result = the sum of the lanes of a[i], i < 16: each vector
 * folded to 8 lanes, then AVX2's horizontal-add tree on two groups of 8 */
static inline __m256 wp_avx512_reduce8_ps(const __m256 *h) {
    const __m256 h01 = _mm256_hadd_ps(h[0], h[1]), h23 = _mm256_hadd_ps(h[2], h[3]);
    const __m256 h45 = _mm256_hadd_ps(h[4], h[5]), h67 = _mm256_hadd_ps(h[6], h[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}
static inline vf32 vf32_reduce_lanes(const vf32 *a) {
    __m256 h[16];
    for (int i = 0; i < 16; ++i) h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), _mm512_extractf32x8_ps(a[i], 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(wp_avx512_reduce8_ps(h)), wp_avx512_reduce8_ps(h + 8), 1);
}
static inline vf32 vf32_reverse(vf32 v) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), v);
}
static inline vf32 vf32_swap_pairs(vf32 v) { return _mm512_shuffle_ps(v, v, 0xB1); }
static inline vf32 vf32_interleave_lo(vf32 a, vf32 b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), b);
}
static inline vf32 vf32_interleave_hi(vf32 a, vf32 b) {
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
                                  b);
}

static inline vi32 vf32_cvt_i32(vf32 a) { return _mm512_cvtps_epi32(a); }
#ifndef WAVEPE_SIMDE_AVX512
/* p * 2^n for integral n (vecmath.h's generic form spends a convert, a shift and a multiply); the
 * instruction also takes any n: it uses floor(n), and n = -inf gives 0 (SIMDe has neither this nor
 * vreduceps: vecmath.h's generic forms run there) */
#define WP_HAS_VF32_SCALEF 1
static inline vf32 vf32_scalef(vf32 p, vf32 n) { return _mm512_scalef_ps(p, n); }
/* x - floor(x) in [0, 1) in one instruction (vreduceps); +-inf give 0, NaN stays NaN */
#define WP_HAS_VF32_FRAC 1
static inline vf32 vf32_frac(vf32 x) { return _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
#endif
static inline vi32 vf32_as_i32(vf32 a) { return _mm512_castps_si512(a); }
static inline vf32 vi32_as_f32(vi32 a) { return _mm512_castsi512_ps(a); }
static inline vi32 vi32_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi32 vi32_add(vi32 a, vi32 b) { return _mm512_add_epi32(a, b); }
static inline vi32 vi32_sub(vi32 a, vi32 b) { return _mm512_sub_epi32(a, b); }
static inline vi32 vi32_and(vi32 a, vi32 b) { return _mm512_and_si512(a, b); }
static inline mf32 vi32_nonzero(vi32 a) { return _mm512_test_epi32_mask(a, a); }
#define vi32_slli(a, n) _mm512_slli_epi32((a), (n))
#define vi32_srai(a, n) _mm512_srai_epi32((a), (n))

/* ==== float64 ============================================================ */

static inline vf64 vf64_loadu(const double *p) { return _mm512_loadu_pd(p); }
static inline vf64 vf64_load(const double *p) { return _mm512_load_pd(p); }
static inline void vf64_storeu(double *p, vf64 v) { _mm512_storeu_pd(p, v); }
static inline void vf64_store(double *p, vf64 v) { _mm512_store_pd(p, v); }
#ifdef WAVEPE_SIMDE_AVX512
static inline void vf64_stream(double *p, vf64 v) { _mm512_store_pd(p, v); }
#else
static inline void vf64_stream(double *p, vf64 v) { _mm512_stream_pd(p, v); }
#endif
static inline vf64 vf64_set1(double x) { return _mm512_set1_pd(x); }
static inline vf64 vf64_zero(void) { return _mm512_setzero_pd(); }
static inline vf64 vf64_bcast(const double *p) { return _mm512_set1_pd(*p); }
static inline vf64 vf64_iota(void) { return _mm512_setr_pd(0, 1, 2, 3, 4, 5, 6, 7); }

static inline mf64 mf64_first(int64_t n) {
    return n <= 0 ? (mf64)0 : (n >= 8 ? (mf64)0xFF : (mf64)((1u << n) - 1u));
}
#ifdef WAVEPE_SIMDE_AVX512
static inline vf64 vf64_loadu_n(const double *p, int64_t n) {
    double b[8] = {0};
    for (int64_t i = 0; i < n && i < 8; ++i) b[i] = p[i];
    return _mm512_loadu_pd(b);
}
static inline void vf64_storeu_n(double *p, vf64 v, int64_t n) {
    double b[8];
    _mm512_storeu_pd(b, v);
    for (int64_t i = 0; i < n && i < 8; ++i) p[i] = b[i];
}
#else
static inline vf64 vf64_loadu_n(const double *p, int64_t n) { return _mm512_maskz_loadu_pd(mf64_first(n), p); }
static inline void vf64_storeu_n(double *p, vf64 v, int64_t n) { _mm512_mask_storeu_pd(p, mf64_first(n), v); }
#endif

static inline vf64 vf64_add(vf64 a, vf64 b) { return _mm512_add_pd(a, b); }
static inline vf64 vf64_sub(vf64 a, vf64 b) { return _mm512_sub_pd(a, b); }
static inline vf64 vf64_mul(vf64 a, vf64 b) { return _mm512_mul_pd(a, b); }
static inline vf64 vf64_div(vf64 a, vf64 b) { return _mm512_div_pd(a, b); }
static inline vf64 vf64_min(vf64 a, vf64 b) { return _mm512_min_pd(a, b); }
static inline vf64 vf64_max(vf64 a, vf64 b) { return _mm512_max_pd(a, b); }
static inline vf64 vf64_fmadd(vf64 a, vf64 b, vf64 c) { return _mm512_fmadd_pd(a, b, c); }
static inline vf64 vf64_fmsub(vf64 a, vf64 b, vf64 c) { return _mm512_fmsub_pd(a, b, c); }
static inline vf64 vf64_fnmadd(vf64 a, vf64 b, vf64 c) { return _mm512_fnmadd_pd(a, b, c); }
static inline vf64 vf64_xor(vf64 a, vf64 b) {
    return _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
}
static inline vf64 vf64_and(vf64 a, vf64 b) {
    return _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
}
static inline vf64 vf64_or(vf64 a, vf64 b) {
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
}
static inline vf64 vf64_abs(vf64 a) {
    return _mm512_castsi512_pd(
        _mm512_and_si512(_mm512_castpd_si512(a), _mm512_set1_epi64((long long)0x7FFFFFFFFFFFFFFFull)));
}
static inline vf64 vf64_round(vf64 a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf64 vf64_floor(vf64 a) { return _mm512_floor_pd(a); }

static inline mf64 vf64_cmplt(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
static inline mf64 vf64_cmple(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_LE_OQ); }
static inline mf64 vf64_cmpgt(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
static inline mf64 vf64_cmpge(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
static inline mf64 vf64_cmpeq(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
static inline mf64 vf64_cmpneq(vf64 a, vf64 b) { return _mm512_cmp_pd_mask(a, b, _CMP_NEQ_UQ); }
static inline mf64 vf64_isnan(vf64 a) { return _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q); }
static inline vf64 vf64_blend(mf64 m, vf64 a, vf64 b) { return _mm512_mask_blend_pd(m, a, b); }
static inline mf64 mf64_and(mf64 a, mf64 b) { return (mf64)(a & b); }
static inline mf64 mf64_or(mf64 a, mf64 b) { return (mf64)(a | b); }
static inline mf64 mf64_andnot(mf64 a, mf64 b) { return (mf64)(~a & b); }
static inline unsigned mf64_bits(mf64 m) { return (unsigned)m; }

static inline double vf64_hsum(vf64 v) {
    __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
    __m128d x = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    x = _mm_add_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}
static inline double vf64_hmax(vf64 v) {
    __m256d h = _mm256_max_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
    __m128d x = _mm_max_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    x = _mm_max_sd(x, _mm_unpackhi_pd(x, x));
    return _mm_cvtsd_f64(x);
}
static inline __m256d wp_avx512_reduce4_pd(const __m256d *h) {
    const __m256d h01 = _mm256_hadd_pd(h[0], h[1]), h23 = _mm256_hadd_pd(h[2], h[3]);
    return _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
}
static inline vf64 vf64_reduce_lanes(const vf64 *a) {
    __m256d h[8];
    for (int i = 0; i < 8; ++i) h[i] = _mm256_add_pd(_mm512_castpd512_pd256(a[i]), _mm512_extractf64x4_pd(a[i], 1));
    return _mm512_insertf64x4(_mm512_castpd256_pd512(wp_avx512_reduce4_pd(h)), wp_avx512_reduce4_pd(h + 4), 1);
}
static inline vf64 vf64_reverse(vf64 v) { return _mm512_permutexvar_pd(_mm512_setr_epi64(7, 6, 5, 4, 3, 2, 1, 0), v); }
static inline vf64 vf64_swap_pairs(vf64 v) { return _mm512_shuffle_pd(v, v, 0x55); }
static inline vf64 vf64_interleave_lo(vf64 a, vf64 b) {
    return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), b);
}
static inline vf64 vf64_interleave_hi(vf64 a, vf64 b) {
    return _mm512_permutex2var_pd(a, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), b);
}

static inline vi64 vf64_as_i64(vf64 a) { return _mm512_castpd_si512(a); }
static inline vf64 vi64_as_f64(vi64 a) { return _mm512_castsi512_pd(a); }
static inline vi64 vi64_set1(int64_t x) { return _mm512_set1_epi64((long long)x); }
static inline vi64 vi64_add(vi64 a, vi64 b) { return _mm512_add_epi64(a, b); }
static inline vi64 vi64_sub(vi64 a, vi64 b) { return _mm512_sub_epi64(a, b); }
static inline vi64 vi64_and(vi64 a, vi64 b) { return _mm512_and_si512(a, b); }
static inline mf64 vi64_nonzero(vi64 a) { return _mm512_test_epi64_mask(a, a); }
#define vi64_slli(a, n) _mm512_slli_epi64((a), (n))
/* Integer-valued double lanes (|v| < 2^51) to int64 lanes (the same
 * magic-number conversion as simd_avx2.h, so both give identical bits). */
static inline vi64 vf64_int_to_i64(vf64 v) {
    const __m512d magic = _mm512_set1_pd(6755399441055744.0); /* 2^52 + 2^51 */
    return _mm512_sub_epi64(_mm512_castpd_si512(_mm512_add_pd(v, magic)), _mm512_castpd_si512(magic));
}

/* ==== between the two ==================================================== */

#ifdef WAVEPE_SIMDE_AVX512
/* SIMDe lacks _mm512_cvtpd_ps: the four 256-bit halves through AVX */
static inline __m256 wp_avx512_cvtpd_ps(vf64 v) {
    return _mm256_set_m128(_mm256_cvtpd_ps(_mm512_extractf64x4_pd(v, 1)), _mm256_cvtpd_ps(_mm512_castpd512_pd256(v)));
}
#else
static inline __m256 wp_avx512_cvtpd_ps(vf64 v) { return _mm512_cvtpd_ps(v); }
#endif
static inline vf32 vf32_from_f64x2(vf64 lo, vf64 hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(wp_avx512_cvtpd_ps(lo)), wp_avx512_cvtpd_ps(hi), 1);
}
#ifdef WAVEPE_SIMDE_AVX512
static inline __m256i wp_avx512_cvtpd_epi32(vf64 v) {
    return _mm256_set_m128i(_mm256_cvtpd_epi32(_mm512_extractf64x4_pd(v, 1)),
                            _mm256_cvtpd_epi32(_mm512_castpd512_pd256(v)));
}
#else
static inline __m256i wp_avx512_cvtpd_epi32(vf64 v) { return _mm512_cvtpd_epi32(v); }
#endif
static inline vi32 vi32_from_f64x2(vf64 lo, vf64 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(wp_avx512_cvtpd_epi32(lo)), wp_avx512_cvtpd_epi32(hi), 1);
}

/* ==== bfloat16 dot product (AVX512_BF16) ================================= */

#if defined(WAVEPE_AVX512BF16)
#include <string.h>
#define WP_HAS_DPBF16
/* A vi32 of bf16 pairs: lane i holds elements 2i (low 16 bits) and 2i + 1
 * (high 16 bits), stored as they are. */
static inline vi32 vbf16x2_loadu(const uint32_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline vi32 vbf16x2_set1(uint32_t pair) { return _mm512_set1_epi32((int32_t)pair); }
static inline __m512bh wp_avx512_as_bh(vi32 x) {
    __m512bh r; /* a reinterpretation (the two types' casts differ between compilers and SIMDe) */
    memcpy(&r, &x, sizeof r);
    return r;
}
/* acc + a.lo * b.lo + a.hi * b.hi per lane (vdpbf16ps): the products of two
 * bf16 are exact in float32.  Intel's definition adds them to acc one after
 * the other, each addition rounded to nearest even, with denormal inputs read
 * as zero and denormal results flushed to zero whatever MXCSR says (what the
 * kernels' FTZ/DAZ environment gives the float32 arithmetic too); SIMDe's
 * emulation may add them in another order.  Either way: two roundings per
 * step, so results are not bit-identical across implementations. */
static inline vf32 vf32_dpbf16(vf32 acc, vi32 a, vi32 b) {
    return _mm512_dpbf16_ps(acc, wp_avx512_as_bh(a), wp_avx512_as_bh(b));
}
/* lo[c] = the pair (r0[c], r1[c]) for c < VL = 16, hi[c - 16] for 16 <= c < 32: two rows of 32 bf16
 * interleaved, pairs along the rows (P . V's value panels: keys j, j + 1; hi = lo + 16 where the
 * columns are contiguous, the next 16-column strip of a tile operand where they are not).
 * vpunpck{l,h}wd interleave within 128-bit lanes (lo: columns 8i..8i+3 of
 * lane i, hi: 8i+4..8i+7); one two-source qword permute per half puts the
 * columns back in order. */
static inline void vbf16x2_interleave(uint32_t *lo, uint32_t *hi, const uint16_t *r0, const uint16_t *r1) {
    const __m512i a = _mm512_loadu_si512((const void *)r0), b = _mm512_loadu_si512((const void *)r1);
    const __m512i l = _mm512_unpacklo_epi16(a, b), h = _mm512_unpackhi_epi16(a, b);
    _mm512_storeu_si512((void *)lo, _mm512_permutex2var_epi64(l, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), h));
    _mm512_storeu_si512((void *)hi, _mm512_permutex2var_epi64(l, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), h));
}
/* v rounded to bf16 (nearest even) by one vcvtneps2bf16, where vf32_storeu_bf16 spends five instructions on
 * torch's encoding of NaN; for values whose NaN bits nobody reads (the tiles' P: a NaN stays a NaN).
 * Denormals go to zero, as the tiles read them.  SIMDe has no vcvtneps2bf16: vf32_storeu_bf16 there. */
static inline void vf32_storeu_bf16_rne(uint16_t *p, vf32 v) {
#ifdef WAVEPE_SIMDE_AVX512
    vf32_storeu_bf16(p, v);
#else
    const __m256bh h = _mm512_cvtneps_pbh(v);
    memcpy(p, &h, sizeof h);
#endif
}
/* lo and hi rounded as vf32_storeu_bf16_rne, 2 * 16 elements (lo's first) by one vcvtne2ps2bf16: two
 * vcvtneps2bf16 cost a vector operation more (the tiles' P: an Emerald Rapids ran the weights' loop at 7.1
 * against 8.0 cycles a vector). */
static inline void vf32x2_storeu_bf16_rne(uint16_t *p, vf32 lo, vf32 hi) {
#ifdef WAVEPE_SIMDE_AVX512
    vf32_storeu2_bf16(p, lo, hi);
#else
    const __m512bh h = _mm512_cvtne2ps_pbh(hi, lo);
    memcpy(p, &h, sizeof h);
#endif
}
/* Whether none of the 32 half elements at p has its exponent field `expo` all ones (bf16 0x7F80, fp16
 * 0x7C00: inf or NaN). */
static inline int vhalf32_finite(const uint16_t *p, uint16_t expo) {
#ifdef WAVEPE_SIMDE_AVX512 /* SIMDe has no native alias of _mm512_cmpeq_epi16_mask */
    for (int i = 0; i < 32; ++i)
        if ((p[i] & expo) == expo) return 0;
    return 1;
#else
    const __m512i e = _mm512_set1_epi16((short)expo);
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512((const void *)p), e), e) == 0;
#endif
}
#endif

#endif
