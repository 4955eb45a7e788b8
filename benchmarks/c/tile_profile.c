/* The amx ISA's bf16 fused attention, its tile products timed and counted by call site: for each place
 * in the kernels that calls wavepe_tile_gemm, the calls, the 16 x 16 tiles of C they write (each one a
 * zero or load, then a store: a "block switch"), the tile products (tdpbf16ps) and the time spent in them.
 * On an AMX CPU the time is the instructions'; elsewhere the products run emulated (tiles.h) and only
 * the counts mean anything.
 *
 * Linked with -Wl,--wrap=wavepe_tile_gemm by benchmarks/bench_tile_profile.py, which builds the core with
 * the package's flags, names the call sites (addr2line) and prints the table.
 *
 *   tile_profile L H d table(none|wavelet|dense) backward reps
 *     ->  "tiles hardware|emulated", "kernel_ms <best>", then per call site
 *         "site <offset in the executable> <calls> <C tiles> <products> <ns>" (the last rep's)
 *
 * The wavelet table is the paper's default grid (ricker; scales 2^0 .. 2^7 by rows of d / 8 shifts),
 * zero past the family's float32 support, as wavepe's tables are. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "harness.h"
#include "half.h"
#include "isa.h"
#include "tiles.h"
#include "wavelet.h"

enum { MAX_SITES = 64 };
static struct {
    const void *at;
    double calls, ctiles, products, ns;
} sites[MAX_SITES];
static int nsites;

void __real_wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                             const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);
void __wrap_wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                             const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate);
void __wrap_wavepe_tile_gemm(int type, int64_t M, int64_t N, int64_t K2, const uint16_t *A, int64_t lda,
                             const uint32_t *B, int64_t ldb, int64_t ldbs, float *C, int64_t ldc, int accumulate) {
    const void *at = __builtin_return_address(0);
    const double t0 = 1e9 * harness_now();
    __real_wavepe_tile_gemm(type, M, N, K2, A, lda, B, ldb, ldbs, C, ldc, accumulate);
    const double t = 1e9 * harness_now() - t0;
    int s = 0;
    while (s < nsites && sites[s].at != at) ++s;
    if (s == nsites) {
        if (nsites == MAX_SITES) return;
        sites[nsites++].at = at;
    }
    const double ct = (double)(M / 16) * (double)(N / 16);
    sites[s].calls += 1, sites[s].ctiles += ct, sites[s].products += ct * (double)(K2 / 16), sites[s].ns += t;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s L H d none|wavelet|dense backward(0|1) reps\n", argv[0]);
        return 2;
    }
    const int64_t L = atoll(argv[1]), H = atoll(argv[2]), d = atoll(argv[3]);
    const char *bias = argv[4];
    const int backward = atoi(argv[5]), reps = atoi(argv[6]);
    const int64_t n = H * L * d;
    srand(1);
    uint16_t *q = random_bf16(n, 1), *k = random_bf16(n, 1), *v = random_bf16(n, 1), *dout = random_bf16(n, 1);
    uint16_t *out = random_bf16(n, 0), *dq = random_bf16(n, 0), *dk = random_bf16(n, 0), *dv = random_bf16(n, 0);
    float *lse = calloc((size_t)(H * L), sizeof(float));
    wavepe_attention_args a = harness_causal_bf16(H, L, d, q, k, v, out, lse);
    if (strcmp(bias, "dense") == 0) { /* every column of every distance nonzero */
        a.table = random_bf16(2 * L * d, 0.02f), a.table_rows = 2 * L, a.r_lo = -L;
    } else if (strcmp(bias, "wavelet") == 0) { /* distances 0 .. L-1, the default grid */
        double t_lo, t_hi;
        if (wavepe_wavelet_support_t(WAVEPE_WAVELET_RICKER, 0, 0.0, &t_lo, &t_hi) != 0) return 1;
        uint16_t *t = random_bf16(L * d, 0);
        const int64_t shifts = d / 8 > 0 ? d / 8 : 1;
        for (int64_t r = 0; r < L; ++r)
            for (int64_t j = 0; j < d; ++j) {
                const double scale = ldexp(1.0, (int)(j / shifts)), x = ((double)r - (double)(j % shifts)) / scale;
                t[r * d + j] = x < t_lo || x > t_hi ? 0 : wp_f32_to_bf16((float)wavepe_psi_f64(WAVEPE_WAVELET_RICKER, x));
            }
        a.table = t, a.table_rows = L, a.r_lo = 0;
    } else if (strcmp(bias, "none") != 0) {
        fprintf(stderr, "bias: none, wavelet or dense, got %s\n", bias);
        return 2;
    }
    double best = INFINITY;
    for (int rep = 0; rep < reps; ++rep) { /* the sites' sums: the last rep's measured part */
        wavepe_attention_plan *p;
        if (backward) { /* the forward first (its lse), then the backward measured */
            if (wavepe_attention_fwd_plan(WAVEPE_ISA_AMX, &a, &p, NULL) != WAVEPE_OK || run_plan(p) != WAVEPE_OK) return 1;
            wavepe_attention_plan_free(p);
        }
        for (int s = 0; s < nsites; ++s) sites[s].calls = sites[s].ctiles = sites[s].products = sites[s].ns = 0;
        const double t0 = 1e9 * harness_now();
        if (!backward) {
            if (wavepe_attention_fwd_plan(WAVEPE_ISA_AMX, &a, &p, NULL) != WAVEPE_OK || run_plan(p) != WAVEPE_OK) return 1;
        } else {
            wavepe_attention_args g = a;
            g.dout = dout, g.dq = dq, g.dk = dk, g.dv = dv;
            if (wavepe_attention_bwd_plan(WAVEPE_ISA_AMX, &g, &p, NULL) != WAVEPE_OK || run_plan(p) != WAVEPE_OK) return 1;
        }
        wavepe_attention_plan_free(p);
        const double t = 1e9 * harness_now() - t0;
        best = t < best ? t : best;
    }
    printf("tiles %s\n", wavepe_tiles_mode(WAVEPE_TILE_BF16) == WAVEPE_TILES_HARDWARE ? "hardware" : "emulated");
    printf("kernel_ms %.4f\n", best / 1e6);
    for (int s = 0; s < nsites; ++s) {
        Dl_info info;
        const uintptr_t base = dladdr(sites[s].at, &info) && info.dli_fbase != NULL ? (uintptr_t)info.dli_fbase : 0;
        printf("site %#lx %.0f %.0f %.0f %.0f\n", (unsigned long)((uintptr_t)sites[s].at - base), sites[s].calls,
               sites[s].ctiles, sites[s].products, sites[s].ns);
    }
    return 0;
}
