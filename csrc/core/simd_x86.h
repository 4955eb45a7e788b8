/* simd_x86.h: the part of the vector vocabulary that simd_avx2.h and
 * simd_avx512.h share (include through one of them, after its intrinsics
 * header): register transposes on 256-bit AVX registers, which every x86
 * vector ISA of the core has, the prefetch hint and the store fence.
 *
 *   WP_TB_F32 / WP_TB_F64       the side of the square block vf32_transpose /
 *                               vf64_transpose turn (8 floats, 4 doubles here)
 *   vf32_transpose(src, ks, dst, ldd)
 *                               dst[r * ldd + i] = src[i * ks + r], r, i < WP_TB_F32
 *   wp_prefetch(p)              hint: the cache line at p is read soon
 *   wp_stream_fence()           the stores of vf32_stream / vf64_stream are
 *                               ordered before any later store (sfence: they
 *                               are weakly ordered on x86)
 */
#ifndef WAVEPE_SIMD_X86_H
#define WAVEPE_SIMD_X86_H

#include <stdint.h>

#define WP_TB_F32 8
#define WP_TB_F64 4

static inline void vf32_transpose(const float *src, int64_t ks, float *dst, int64_t ldd) {
    const __m256 r0 = _mm256_loadu_ps(src + 0 * ks), r1 = _mm256_loadu_ps(src + 1 * ks);
    const __m256 r2 = _mm256_loadu_ps(src + 2 * ks), r3 = _mm256_loadu_ps(src + 3 * ks);
    const __m256 r4 = _mm256_loadu_ps(src + 4 * ks), r5 = _mm256_loadu_ps(src + 5 * ks);
    const __m256 r6 = _mm256_loadu_ps(src + 6 * ks), r7 = _mm256_loadu_ps(src + 7 * ks);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

static inline void vf64_transpose(const double *src, int64_t ks, double *dst, int64_t ldd) {
    const __m256d r0 = _mm256_loadu_pd(src), r1 = _mm256_loadu_pd(src + ks);
    const __m256d r2 = _mm256_loadu_pd(src + 2 * ks), r3 = _mm256_loadu_pd(src + 3 * ks);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    _mm256_storeu_pd(dst + 0 * ldd, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(dst + 1 * ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(dst + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(dst + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
}

/* An asm statement, not _mm_prefetch: to GCC a prefetch builtin has no side
 * effect, so a function holding only prefetches was judged const and every
 * call of it deleted (GCC 12 -O2, ipa-pure-const: the decoding kernels'
 * prefetches never reached the binary).  A volatile asm stays. */
#if defined(__x86_64__) || defined(__i386__)
static inline void wp_prefetch(const void *p) { __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p)); }
#else
static inline void wp_prefetch(const void *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }
#endif
static inline void wp_stream_fence(void) { _mm_sfence(); }

#endif
