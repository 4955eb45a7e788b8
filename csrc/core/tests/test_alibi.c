/* test_alibi.c: ALiBi rows scalar vs AVX2 vs the formula, and validation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../alibi.h"
#include "../checked.h"
#include "harness.h"

void test_alibi(void) {
    const float slopes[3] = {0.5f, 0.0625f, 2.0f};
    const int64_t H = 3, M = 13, N = 37;
    float *a = malloc(sizeof(float) * H * M * N), *b = malloc(sizeof(float) * H * M * N);
    for (int causal = 0; causal < 2; ++causal) {
        for (int64_t off = -5; off < 30; off += 7) {
            wavepe_alibi_args args = {WAVEPE_F32, H, M, N, off, causal, slopes, a, M * N, N};
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
    wavepe_alibi_args bad = {WAVEPE_F32, (int64_t)1 << 40, (int64_t)1 << 40, 2, 0, 1, slopes, a, 0, 0};
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
    double pe[6 * 5];
    CHECK(wavepe_sinusoidal_f64(6, 5, 3, 10000.0, pe, NULL) == WAVEPE_OK);
    CHECK_CLOSE(pe[0], sin(3.0), 1e-15, 0);
    CHECK_CLOSE(pe[1], cos(3.0), 1e-15, 0);
    CHECK(wavepe_sinusoidal_f64(6, 5, 3, -1.0, pe, NULL) == WAVEPE_E_INVALID);
    CHECK(wavepe_sinusoidal_f64(6, 5, INT64_MAX - 3, 10000.0, pe, &err) == WAVEPE_E_OVERFLOW);
    CHECK(strstr(err.message, "offset=9223372036854775804") != NULL);
}
