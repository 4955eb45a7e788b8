/* test_half.c: half.h's conversions where one has two forms.  wp_f16_to_f32_n (the branch-free
 * widening of float16 rows) gives every one of the 65536 float16 values the bits wp_f16_to_f32
 * gives it, under the floating-point environment the kernels run in (fpenv.h: flush-to-zero) and
 * without it; and wp_f16_to_f32 is the value the bits say (normals, subnormals, zeros, inf, NaN). */
#include <math.h>
#include <stdint.h>
#include <string.h>

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

static void check_all_f16(void) {
    static uint16_t src[65536];
    static float rows[65536];
    for (int i = 0; i < 65536; ++i) src[i] = (uint16_t)i;
    wp_f16_to_f32_n(src, rows, 65536);
    int bad_rows = 0, bad_values = 0;
    for (int i = 0; i < 65536; ++i) {
        const float one = wp_f16_to_f32(src[i]);
        bad_rows += wp_f32_bits(one) != wp_f32_bits(rows[i]);
        const double want = f16_value(src[i]);
        if (isnan(want)) bad_values += !isnan(one) || !(wp_f32_bits(one) & 0x400000u); /* quiet */
        else bad_values += (double)one != want || !signbit(one) != !signbit(want);
    }
    CHECK(bad_rows == 0);
    CHECK(bad_values == 0);
}

void test_half(void) {
    check_all_f16();
    const wavepe_fpenv env = wavepe_fpenv_enter();
    check_all_f16();
    wavepe_fpenv_leave(env);
}
