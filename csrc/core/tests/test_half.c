/* test_half.c: the widenings of half types, which exist in two forms: half.h's element conversions
 * (the scalar kernels, the vector kernels' tails) and a vector ISA's own (S_LOADU: F16C, AVX-512,
 * NEON), which attention_simd.h's attn_widen applies to the table rows pack_table widens on every
 * decoding call.  Every one of the 65536 bit patterns of float16 and of bfloat16 widens to the same
 * float32 bits both ways, under the floating-point environment the kernels run in (fpenv.h:
 * flush-to-zero, denormals-are-zero) and without it; and wp_f16_to_f32 is the value the float16 bits
 * say (normals, subnormals, zeros, inf, NaN quieted). */
#include <math.h>
#include <stdint.h>

#include "../attention_internal.h"
#include "../fpenv.h"
#include "../half.h"
#include "harness.h"

/* The float16 value of h from its fields, in double. */
static double f16_value(uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1F) return m ? NAN : sign * INFINITY;
    return sign * (e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25));
}

static void check_f16_values(void) {
    int bad = 0;
    for (int i = 0; i < 65536; ++i) {
        const float one = wp_f16_to_f32((uint16_t)i);
        const double want = f16_value((uint16_t)i);
        if (isnan(want)) bad += !isnan(one) || !(wp_f32_bits(one) & 0x400000u); /* quiet */
        else bad += (double)one != want || !signbit(one) != !signbit(want);
    }
    CHECK(bad == 0);
}

/* The vector ISA's widening of all 65536 patterns (an odd count, so that the scalar tail runs too)
 * against the element form. */
static void check_isa_widening(int dtype) {
    static uint16_t src[65536 + 3];
    static float rows[65536 + 3];
    const attn_widen_fn widen = attn_table_widen(wavepe_test_isa, dtype);
    CHECK(widen != NULL);
    if (widen == NULL) return;
    for (int i = 0; i < 65536 + 3; ++i) src[i] = (uint16_t)(i * 40503u); /* every pattern, scattered */
    widen(src, rows, 65536 + 3);
    int bad = 0;
    for (int i = 0; i < 65536 + 3; ++i) {
        const float one = dtype == WAVEPE_BF16 ? wp_bf16_to_f32(src[i]) : wp_f16_to_f32(src[i]);
        bad += wp_f32_bits(one) != wp_f32_bits(rows[i]);
    }
    CHECK(bad == 0);
}

static void check_all(void) {
    check_f16_values();
    if (wavepe_test_isa == WAVEPE_ISA_SCALAR) return;
    check_isa_widening(WAVEPE_BF16);
    check_isa_widening(WAVEPE_F16);
}

void test_half(void) {
    check_all();
    const wavepe_fpenv env = wavepe_fpenv_enter();
    check_all();
    wavepe_fpenv_leave(env);
}
