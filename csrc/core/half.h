/* half.h: bfloat16 and IEEE float16 <-> float32, one element at a time.
 *
 * The scalar kernels and the vector kernels' scalar tails store half types
 * through these, the vector vocabularies (simd_avx2.h, simd_avx512.h,
 * simd_neon.h: vf32_loadu_bf16 / vf32_storeu_f16 ...) convert whole vectors,
 * and both round the same way, so a kernel's result does not depend on where
 * an element falls:
 *
 *   widening   exact (every bf16 and fp16 value is a float32; an fp16
 *              subnormal is a normal float32; a signalling fp16 NaN is quieted, as F16C does);
 *   narrowing  round to nearest, ties to even, once.  bfloat16 as torch
 *              rounds it (c10::round_to_nearest_even): any NaN becomes 0x7FC0.
 *              float16 as F16C's vcvtps2ph / AArch64's fcvt do: overflow to
 *              infinity, fp16 subnormals produced exactly (not flushed), a NaN
 *              quieted with its payload's upper bits kept.
 *
 * Integer arithmetic (and, in wp_f16_to_f32, one exact float multiply with a normal result):
 * the result does not depend on the floating-point environment (the kernels run with
 * flush-to-zero, fpenv.h).  Storage is the
 * raw 16 bits (uint16_t), as torch's at::BFloat16 / at::Half hold them.
 */
#ifndef WAVEPE_HALF_H
#define WAVEPE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t wp_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float wp_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float wp_bf16_to_f32(uint16_t h) { return wp_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t wp_f32_to_bf16(float f) {
    const uint32_t u = wp_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u; /* NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* Without a branch: the three cases as masks (all ones or zero), not ?: -- GCC leaves a select chain
 * as branches, which rows mixing zeros and normals (a wavelet table's) mispredict.  The one float
 * operation is exact and its result normal (an fp16 subnormal's m * 2^-24 >= 2^-24), so flush-to-zero
 * and the rounding mode cannot change it. */
static inline float wp_f16_to_f32(uint16_t h) {
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    const uint32_t is_small = 0u - (uint32_t)(e == 0), is_special = 0u - (uint32_t)(e == 0x1Fu);
    const uint32_t normal = ((uint32_t)(h & 0x7FFFu) << 13) + (112u << 23);    /* exponent rebiased by 127 - 15 */
    const uint32_t special = 0x7F800000u | (m << 13) | ((0u - (uint32_t)(m != 0)) & 0x400000u); /* NaN quieted */
    const uint32_t small = wp_f32_bits((float)(int32_t)m * 0x1p-24f);          /* zero or subnormal */
    const uint32_t bits = (small & is_small) | (special & is_special) | (normal & ~(is_small | is_special));
    return wp_f32_from_bits(bits | (uint32_t)(h & 0x8000u) << 16);
}

static inline uint16_t wp_f32_to_f16(float f) {
    const uint32_t u = wp_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t ax = u & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu)); /* NaN, quieted */
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 (max 65504 + half an ulp): inf */
    if (ax >= 0x38800000u) {                                  /* normal: >= 2^-14 */
        const uint32_t r = ax - 0x38000000u;                  /* exponent rebiased by 127 - 15 */
        return (uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
    }
    if (ax <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (2^-25 is a tie, zero is even) */
    /* subnormal result, units of 2^-24: f = m * 2^(e - 150) with e in [102, 112] */
    const uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126u - e;
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    return (uint16_t)(sign | (q + (rem > halfway || (rem == halfway && (q & 1u)))));
}

#endif
