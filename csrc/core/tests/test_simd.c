/* test_simd.c: the NEON vocabulary (simd_neon.h) against the contract of
 * simd_avx2.h, operation by operation, where it differs from NEON's own rules
 * (min/max with NaN, rounding, fused multiply-subtract, lanes past n).  The
 * kernels' tests cover the vocabularies through the kernels; these catch a
 * wrong operation that today's kernels happen not to expose.  AArch64 needs
 * no flags for NEON, so the test driver includes it directly; the x86
 * vocabularies need their ISA's flags and are covered by the kernel tests. */
#include "harness.h"

#if defined(__aarch64__)
#include <stdlib.h>
#include <string.h>

#include "../simd_neon.h"
#include "../vecmath.h"

static int same_bits32(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

void test_vocabulary(void) {
    const float nan = NAN;
    float out[4];
    /* x86 min / max: the second operand where either is NaN */
    CHECK(vgetq_lane_f32(vf32_max(vf32_set1(nan), vf32_set1(1.0f)), 0) == 1.0f);
    CHECK(isnan(vgetq_lane_f32(vf32_max(vf32_set1(1.0f), vf32_set1(nan)), 0)));
    CHECK(vgetq_lane_f32(vf32_min(vf32_set1(nan), vf32_set1(1.0f)), 0) == 1.0f);
    CHECK(isnan(vgetq_lane_f32(vf32_min(vf32_set1(1.0f), vf32_set1(nan)), 0)));
    CHECK(same_bits32(vgetq_lane_f32(vf32_max(vf32_set1(0.0f), vf32_set1(-0.0f)), 0), -0.0f));
    CHECK(vgetq_lane_f64(vf64_max(vf64_set1((double)nan), vf64_set1(2.0)), 0) == 2.0);
    CHECK(isnan(vgetq_lane_f64(vf64_min(vf64_set1(2.0), vf64_set1((double)nan)), 0)));
    /* horizontal operations, lane order */
    const float x[4] = {1, 5, 2, 3};
    const vf32 v = vf32_loadu(x);
    CHECK(vf32_hsum(v) == 11.0f && vf32_hmax(v) == 5.0f);
    vf32_storeu(out, vf32_reverse(v));
    CHECK(out[0] == 3 && out[1] == 2 && out[2] == 5 && out[3] == 1);
    vf32_storeu(out, vf32_swap_pairs(v));
    CHECK(out[0] == 5 && out[1] == 1 && out[2] == 3 && out[3] == 2);
    vf32_storeu(out, vf32_interleave_hi(v, vf32_iota()));
    CHECK(out[0] == 2 && out[1] == 2 && out[2] == 3 && out[3] == 3);
    CHECK(mf32_bits(vf32_cmpgt(v, vf32_set1(1.5f))) == 0xEu && mf32_bits(mf32_first(3)) == 0x7u);
    CHECK(mf32_bits(vf32_cmpneq(vf32_set1(nan), vf32_set1(nan))) == 0xFu);
    const vf32 rows[4] = {vf32_set1(1), vf32_iota(), v, vf32_set1(-1)};
    vf32_storeu(out, vf32_reduce_lanes(rows));
    CHECK(out[0] == 4 && out[1] == 6 && out[2] == 11 && out[3] == -4);
    /* rounding: to nearest even */
    const float halves[4] = {0.5f, 1.5f, 2.5f, -2.5f};
    vf32_storeu(out, vf32_round(vf32_loadu(halves)));
    CHECK(out[0] == 0 && out[1] == 2 && out[2] == 2 && out[3] == -2);
    int32_t ints[4];
    vst1q_s32(ints, vf32_cvt_i32(vf32_loadu(halves)));
    CHECK(ints[0] == 0 && ints[1] == 2 && ints[2] == 2 && ints[3] == -2);
    /* fused: a a - c keeps the 2^-24 that a rounded product drops */
    const float a = 1.0f + 0x1p-12f, c = 1.0f + 0x1p-11f;
    CHECK(vgetq_lane_f32(vf32_fmsub(vf32_set1(a), vf32_set1(a), vf32_set1(c)), 0) == 0x1p-24f);
    CHECK(vgetq_lane_f32(vf32_fnmadd(vf32_set1(a), vf32_set1(a), vf32_set1(c)), 0) == -0x1p-24f);
    /* lanes past n are neither read (ASan: a 3-float block) nor written */
    float *three = malloc(3 * sizeof(float));
    if (three != NULL) {
        for (int i = 0; i < 3; ++i) three[i] = (float)(i + 7);
        vf32_storeu(out, vf32_loadu_n(three, 3));
        CHECK(out[0] == 7 && out[1] == 8 && out[2] == 9 && out[3] == 0);
        vf32_storeu_n(three, vf32_set1(-1), 2);
        CHECK(three[0] == -1 && three[1] == -1 && three[2] == 9);
        free(three);
    }
    double *one = malloc(sizeof(double));
    if (one != NULL) {
        *one = 4.0;
        CHECK(vgetq_lane_f64(vf64_loadu_n(one, 1), 0) == 4.0 && vgetq_lane_f64(vf64_loadu_n(one, 1), 1) == 0.0);
        vf64_storeu_n(one, vf64_set1(-3.0), 1);
        CHECK(*one == -3.0);
        free(one);
    }
    /* transposes: dst[r][i] = src[i][r] */
    float src[4 * 6], dst[4 * 5];
    for (int i = 0; i < 24; ++i) src[i] = (float)i;
    vf32_transpose(src, 6, dst, 5);
    for (int r = 0; r < 4; ++r)
        for (int i = 0; i < 4; ++i) CHECK(dst[r * 5 + i] == src[i * 6 + r]);
    const double dsrc[2 * 3] = {0, 1, 2, 3, 4, 5};
    double ddst[2 * 3];
    vf64_transpose(dsrc, 3, ddst, 3);
    CHECK(ddst[0] == 0 && ddst[1] == 3 && ddst[3] == 1 && ddst[4] == 4);
    /* bf16 split by parity and back: lanes, round to nearest even, NaN -> 0x7FC0 */
    const uint16_t h8[8] = {0x3F80, 0x4000, 0x4040, 0x4080, 0xBF80, 0x7F80, 0x0000, 0x7FC1};
    vf32 even, odd;
    vf32_loadu_bf16_pairs(h8, &even, &odd);
    vf32_storeu(out, even);
    CHECK(out[0] == 1 && out[1] == 3 && out[2] == -1 && out[3] == 0);
    vf32_storeu(out, odd);
    CHECK(out[0] == 2 && out[1] == 4 && isinf(out[2]) && isnan(out[3]));
    const float ev[4] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, nan, -0.0f}; /* ties: to even */
    const float od[4] = {2.0f, 1.0f + 0x1p-9f, INFINITY, 3.0f};
    uint16_t h8out[8];
    vf32_storeu_bf16_pairs(h8out, vf32_loadu(ev), vf32_loadu(od));
    const uint16_t want[8] = {0x3F80, 0x4000, 0x3F82, 0x3F80, 0x7FC0, 0x7F80, 0x8000, 0x4040};
    CHECK(memcmp(h8out, want, sizeof want) == 0);
    /* double -> float / int32 lanes, lo first */
    const double lo[2] = {1.0, -2.0}, hi[2] = {3.0, 1e300};
    vf32_storeu(out, vf32_from_f64x2(vf64_loadu(lo), vf64_loadu(hi)));
    CHECK(out[0] == 1 && out[1] == -2 && out[2] == 3 && isinf(out[3]));
    const double ilo[2] = {-5.0, 6.0}, ihi[2] = {7.0, -8.0};
    vst1q_s32(ints, vi32_from_f64x2(vf64_loadu(ilo), vf64_loadu(ihi)));
    CHECK(ints[0] == -5 && ints[1] == 6 && ints[2] == 7 && ints[3] == -8);
    CHECK(vgetq_lane_s64(vf64_int_to_i64(vf64_set1(-1234567.0)), 1) == -1234567);
    CHECK(mf64_bits(vf64_isnan(vf64_loadu((const double[2]){1.0, (double)nan}))) == 0x2u);
    double dout[2];
    vf64_storeu(dout, vf64_reverse(vf64_loadu(lo)));
    CHECK(dout[0] == -2.0 && dout[1] == 1.0);
    /* 2^x for the tiles' softmax weights (vecmath.h, written over the vocabulary: its reduction and
     * polynomial checked here, the AVX-512 instantiation through the amx kernels' tests): relative error
     * below 3.2e-6 where the result is normal, exactly 1 at 0, 0 from -127 down and for -inf, NaN kept */
    double worst = 0.0;
    for (int i = 0; i <= 126 * 1000; ++i) {
        const float xs = -(float)i / 1000.0f;
        const double want2 = exp2((double)xs), got2 = vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(xs)), 0);
        const double err = fabs(got2 / want2 - 1.0);
        worst = err > worst ? err : worst;
    }
    CHECK(worst < 3.2e-6);
    CHECK(vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(0.0f)), 0) == 1.0f);
    CHECK(vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(-127.0f)), 0) == 0.0f);
    CHECK(vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(-1000.0f)), 0) == 0.0f);
    CHECK(vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(-INFINITY)), 0) == 0.0f);
    CHECK(isnan(vgetq_lane_f32(vf32_exp2_weights16(vf32_set1(nan)), 0)));
}
#else
void test_vocabulary(void) {}
#endif
