/* test_alibi.c: ALiBi rows scalar vs AVX2 vs the formula (float32, and
 * bfloat16 / float16 storage), and validation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../alibi.h"
#include "../checked.h"
#include "../half.h"
#include "harness.h"

static wavepe_alibi_args alibi_args(int dtype, int64_t heads, int64_t m, int64_t n, int64_t q_offset, int causal,
                                    const void *slopes, void *out, int64_t stride_h, int64_t stride_m) {
    wavepe_alibi_args a = wavepe_alibi_args_defaults();
    a.dtype = dtype, a.heads = heads, a.m = m, a.n = n, a.q_offset = q_offset, a.causal = causal;
    a.slopes = slopes, a.out = out, a.out_stride_h = stride_h, a.out_stride_m = stride_m;
    return a;
}

/* bfloat16 / float16 slopes and output: each entry is -slope * distance in
 * float32 (the distance is exact below 2^24), rounded once to the half type:
 * bit for bit half.h's rounding of the float32 kernel's entry on the same ISA,
 * and within half an ulp of the half type plus one float32 rounding of the
 * exact value.  Offsets up to 2^20 put distances where fp16 overflows to inf. */
static void check_half(int dtype) {
    const float slopes32[3] = {0.5f, 0.0625f, 3.0f};
    const int64_t H = 3, M = 9, N = 45;
    uint16_t slopes[3], *out = malloc(sizeof(uint16_t) * H * M * N);
    float *ref = malloc(sizeof(float) * H * M * N);
    for (int h = 0; h < 3; ++h) slopes[h] = dtype == WAVEPE_BF16 ? wp_f32_to_bf16(slopes32[h]) : wp_f32_to_f16(slopes32[h]);
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    const int64_t offsets[4] = {-7, 20, 40000, (int64_t)1 << 20};
    for (int causal = 0; causal < 2; ++causal)
        for (int o = 0; o < 4; ++o)
            for (int v = 0; v < 2; ++v) {
                const int64_t off = offsets[o];
                wavepe_alibi_args args = alibi_args(dtype, H, M, N, off, causal, slopes, out, M * N, N);
                CHECK(wavepe_alibi_validate(&args, NULL) == WAVEPE_OK);
                if (dtype == WAVEPE_BF16) wavepe_alibi_bf16(isas[v], &args, 0, H * M);
                else wavepe_alibi_f16(isas[v], &args, 0, H * M);
                wavepe_alibi_args a32 = {WAVEPE_F32, H, M, N, off, causal, slopes32, ref, M * N, N};
                wavepe_alibi_f32(isas[v], &a32, 0, H * M);
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < M; ++i)
                        for (int64_t j = 0; j < N; ++j) {
                            const int64_t k = (h * M + i) * N + j, d = off + i - j;
                            const uint16_t got = out[k];
                            const float r = ref[k];
                            CHECK(got == (dtype == WAVEPE_BF16 ? wp_f32_to_bf16(r) : wp_f32_to_f16(r)));
                            const double want = causal ? (d >= 0 ? -(double)slopes32[h] * d : 0.0)
                                                       : -(double)slopes32[h] * llabs(d);
                            const double g = dtype == WAVEPE_BF16 ? wp_bf16_to_f32(got) : wp_f16_to_f32(got);
                            if (dtype == WAVEPE_F16 && fabs(want) >= 65520.0) {
                                CHECK(isinf(g) && (g < 0) == (want < 0));
                                continue;
                            }
                            const double ulp = ldexp(1.0, ilogb(want == 0 ? 1.0 : want) - (dtype == WAVEPE_BF16 ? 7 : 10));
                            CHECK_CLOSE(g, want, 0, 0.5 * ulp * (1 + 0x1p-23) + fabs(want) * 0x1p-24);
                        }
            }
    free(out);
    free(ref);
}

void test_alibi(void) {
    const float slopes[3] = {0.5f, 0.0625f, 2.0f};
    const int64_t H = 3, M = 13, N = 37;
    float *a = malloc(sizeof(float) * H * M * N), *b = malloc(sizeof(float) * H * M * N);
    for (int causal = 0; causal < 2; ++causal) {
        for (int64_t off = -5; off < 30; off += 7) {
            wavepe_alibi_args args = alibi_args(WAVEPE_F32, H, M, N, off, causal, slopes, a, M * N, N);
            CHECK(wavepe_alibi_validate(&args, NULL) == WAVEPE_OK);
            wavepe_alibi_f32(WAVEPE_ISA_SCALAR, &args, 0, H * M);
            args.out = b;
            wavepe_alibi_f32(wavepe_test_isa, &args, 0, H * M);
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < M; ++i)
                    for (int64_t j = 0; j < N; ++j) {
                        const int64_t d = off + i - j;
                        const double want = causal ? (d >= 0 ? -slopes[h] * d : 0.0) : -slopes[h] * llabs(d);
                        CHECK_CLOSE(a[(h * M + i) * N + j], want, 1e-7, 0);
                        CHECK(a[(h * M + i) * N + j] == b[(h * M + i) * N + j]);
                    }
        }
    }
    wavepe_alibi_args bad = alibi_args(WAVEPE_F32, (int64_t)1 << 40, (int64_t)1 << 40, 2, 0, 1, slopes, a, 0, 0);
    wavepe_error err = {{0}};
    CHECK(wavepe_alibi_validate(&bad, &err) == WAVEPE_E_OVERFLOW);
    CHECK(strstr(err.message, "q_len=1099511627776") == NULL); /* within 2^60: the product overflows */
    CHECK(strstr(err.message, "heads, q_len, k_len") != NULL);
    bad.heads = -1;
    CHECK(wavepe_alibi_validate(&bad, &err) == WAVEPE_E_NEGATIVE_SIZE && strstr(err.message, "heads must be >= 0, got -1") != NULL);
    bad.heads = 1, bad.m = 1, bad.q_offset = INT64_MAX - 1; /* a position beyond 2^60, named */
    CHECK(wavepe_alibi_validate(&bad, &err) == WAVEPE_E_OVERFLOW && strstr(err.message, "q_offset=") != NULL);
    free(a);
    free(b);
    check_half(WAVEPE_BF16);
    check_half(WAVEPE_F16);
    double pe[6 * 5];
    CHECK(wavepe_sinusoidal_f64(6, 5, 3, 10000.0, pe, NULL) == WAVEPE_OK);
    CHECK_CLOSE(pe[0], sin(3.0), 1e-15, 0);
    CHECK_CLOSE(pe[1], cos(3.0), 1e-15, 0);
    CHECK(wavepe_sinusoidal_f64(6, 5, 3, -1.0, pe, NULL) == WAVEPE_E_INVALID);
    CHECK(wavepe_sinusoidal_f64(6, 5, INT64_MAX - 3, 10000.0, pe, &err) == WAVEPE_E_OVERFLOW);
    CHECK(strstr(err.message, "offset=9223372036854775804") != NULL);
}
