/* The amx ISA's bf16 fused attention with its tile products counted but not run: what the rest of the
 * kernel (softmax, masks, packing, rounding, reductions) costs on the CPU at hand, next to the avx512bf16
 * variant doing everything.  On a CPU without AMX the tiles run emulated (slowly), so the amx variant's
 * own time says nothing there; this split says how far its vector work alone is from a target.
 *
 * Linked with -Wl,--wrap=wavepe_tile_gemm by benchmarks/bench_tile_overhead.py, which builds the core
 * with the package's flags (python/wavepe/_build/recipe.py) and prints the table.
 *
 *   tile_overhead L H d bias backward reps   ->   one line per variant: "<isa> <best ms> <tile flop>"
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "harness.h"
#include "half.h"
#include "isa.h"

static double tile_flop;

void __wrap_wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                             const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);
void __wrap_wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                             const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate) {
    (void)type, (void)A, (void)lda, (void)B, (void)ldb, (void)ldbs;
    tile_flop += 4.0 * (double)M * (double)N * (double)K2;
    if (!accumulate) /* the tile stores of C: what the hardware would write */
        for (int64_t i = 0; i < M; ++i) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s L H d bias(0|1) backward(0|1) reps\n", argv[0]);
        return 2;
    }
    const int64_t L = atoll(argv[1]), H = atoll(argv[2]), d = atoll(argv[3]), R = 2 * L;
    const int bias = atoi(argv[4]), backward = atoi(argv[5]), reps = atoi(argv[6]);
    const int64_t n = H * L * d;
    srand(1);
    uint16_t *q = random_bf16(n, 1), *k = random_bf16(n, 1), *v = random_bf16(n, 1), *dout = random_bf16(n, 1);
    uint16_t *table = random_bf16(R * d, 0.02f), *out = random_bf16(n, 0);
    uint16_t *dq = random_bf16(n, 0), *dk = random_bf16(n, 0), *dv = random_bf16(n, 0);
    float *lse = calloc((size_t)(H * L), sizeof(float));
    const wavepe_isa isas[2] = {WAVEPE_ISA_AVX512BF16, WAVEPE_ISA_AMX};
    for (int which = 0; which < 2; ++which) {
        wavepe_attention_args a = harness_causal_bf16(H, L, d, q, k, v, out, lse);
        if (bias) a.table = table, a.table_rows = R, a.r_lo = -L; /* every column nonzero: the dense case */
        double best = INFINITY, flop = 0;
        for (int rep = 0; rep < reps; ++rep) {
            wavepe_attention_plan *p;
            double t0 = harness_now();
            if (wavepe_attention_fwd_plan(isas[which], &a, &p, NULL) != WAVEPE_OK || run_plan(p) != WAVEPE_OK) return 1;
            wavepe_attention_plan_free(p);
            if (backward) {
                wavepe_attention_args g = a;
                g.dout = dout, g.dq = dq, g.dk = dk, g.dv = dv;
                tile_flop = 0;
                t0 = harness_now();
                if (wavepe_attention_bwd_plan(isas[which], &g, &p, NULL) != WAVEPE_OK || run_plan(p) != WAVEPE_OK) return 1;
                wavepe_attention_plan_free(p);
            }
            const double t = harness_now() - t0;
            best = t < best ? t : best;
            flop = tile_flop;
            tile_flop = 0;
        }
        printf("%s %.4f %.6g\n", wavepe_isa_name(isas[which]), 1e3 * best, flop);
    }
    return 0;
}
