/* The serial part of a fused attention call with a table bias: building its plan (the table packed over the
 * call's distances, the strips' nonzero column ranges, the tiles' pair layouts) and freeing it, against the
 * plan's run on one thread.  A call's threads start only after its plan is built, so on T threads the
 * plan's share of a call's time is about T times the share printed here.
 *
 * Built with the core by benchmarks/bench_plan.py (benchmarks/_core_harness.py), which writes the table.
 *
 *   plan_time DTYPE(float32|bf16) L H d TABLE_FILE R_LO REPS
 *     -> "<isa> <fwd plan us> <bwd plan us> <fwd run us> <bwd run us> <fwd faults> <bwd faults>", medians
 *        over REPS plans (REPS >= 3) and 3 runs (each with its own plan: the backward's reads the forward's
 *        lse); faults: the minor page faults of a call (plan, run, free); the ISA is the
 *        one the package would run (WAVEPE_ISA picks another); TABLE_FILE: the table's rows, raw, in DTYPE
 */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <sys/resource.h>

#include "harness.h"
#include "isa.h"

enum { RUNS = 3 };

static int by_value(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* the process's minor page faults so far (a fresh page of scratch is one) */
static double minor_faults(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_minflt : 0.0;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), by_value);
    return t[n / 2];
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s float32|bf16 L H d TABLE_FILE R_LO REPS\n", argv[0]);
        return 2;
    }
    const int bf16 = strcmp(argv[1], "bf16") == 0;
    const int64_t L = atoll(argv[2]), H = atoll(argv[3]), d = atoll(argv[4]), r_lo = atoll(argv[6]);
    const int reps = atoi(argv[7]) < 3 ? 3 : atoi(argv[7]);
    const size_t es = bf16 ? 2 : 4;
    FILE *f = fopen(argv[5], "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0) return 2;
    const long bytes = ftell(f);
    rewind(f);
    void *table = malloc((size_t)bytes + 1);
    if (bytes <= 0 || table == NULL || fread(table, 1, (size_t)bytes, f) != (size_t)bytes) return 2;
    fclose(f);
    const int64_t n = H * L * d;
    srand(1);
    uint16_t *x[4];
    for (int i = 0; i < 4; ++i) x[i] = random_bf16(n, 1);
    void *q = x[0], *k = x[1], *v = x[2], *dout = x[3];
    float *qf[4];
    if (!bf16) /* the same values in float32 */
        for (int i = 0; i < 4; ++i) {
            qf[i] = malloc(sizeof(float) * (size_t)n);
            if (qf[i] == NULL) return 2;
            for (int64_t e = 0; e < n; ++e) qf[i][e] = wp_bf16_to_f32(x[i][e]);
        }
    if (!bf16) q = qf[0], k = qf[1], v = qf[2], dout = qf[3];
    void *out = calloc((size_t)n, es), *dq = calloc((size_t)n, es), *dk = calloc((size_t)n, es);
    void *dv = calloc((size_t)n, es);
    float *lse = calloc((size_t)(H * L), sizeof(float));
    double *t = malloc(sizeof(double) * (size_t)reps * 4), faults[2][RUNS];
    if (!out || !dq || !dk || !dv || !lse || !t) return 2;
    wavepe_attention_args a = harness_causal_bf16(H, L, d, q, k, v, out, lse);
    if (!bf16) a.dtype = WAVEPE_F32;
    a.table = table, a.table_rows = bytes / (long)es / d, a.r_lo = r_lo;
    const wavepe_isa isa = wavepe_active_isa();
    /* the plans REPS times; the runs (slow: every head) RUNS times, each after its own plan */
    for (int rep = 0; rep < reps + RUNS; ++rep)
        for (int backward = 0; backward < 2; ++backward) {
            const int timing_run = rep >= reps;
            wavepe_attention_args g = a;
            if (backward) g.dout = dout, g.dq = dq, g.dk = dk, g.dv = dv;
            wavepe_attention_plan *p;
            const double f0 = minor_faults(), t0 = harness_now();
            const int st = backward ? wavepe_attention_bwd_plan(isa, &g, &p, NULL) : wavepe_attention_fwd_plan(isa, &g, &p, NULL);
            if (st != WAVEPE_OK) return 1;
            const double t1 = harness_now();
            if (timing_run && run_plan(p) != WAVEPE_OK) return 1;
            const double t2 = harness_now();
            wavepe_attention_plan_free(p);
            if (timing_run) t[(2 * backward + 1) * reps + rep - reps] = t2 - t1, faults[backward][rep - reps] = minor_faults() - f0;
            else t[2 * backward * reps + rep] = (t1 - t0) + (harness_now() - t2);
        }
    printf("%s %.2f %.2f %.2f %.2f %.0f %.0f\n", wavepe_isa_name(isa), 1e6 * median(t, reps),
           1e6 * median(t + 2 * reps, reps), 1e6 * median(t + reps, RUNS), 1e6 * median(t + 3 * reps, RUNS),
           median(faults[0], RUNS), median(faults[1], RUNS));
    return 0;
}
