/* test_relbias.c: relative-table bias forward / dq / dT, scalar vs AVX2 vs a
 * naive loop in double, float32 / float64 and bfloat16 / float16 storage, odd
 * head dims, empty sizes, negative offsets, clamping, strided rows, sparse
 * tables (support skipping), splits into ranges, and validation errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checked.h"
#include "../half.h"
#include "../relbias.h"
#include "harness.h"

typedef struct {
    int64_t g, m, n, d, rows, r_lo, q_offset;
    int causal, clamp;
    int sparse; /* table with zero rows / zero column bands, like a wavelet table */
    int64_t pad; /* extra elements between rows of q, bias, grad, dq */
} rb_case;

/* The naive definition in double: for every (g, m, n) find the table row. */
static int64_t naive_row(const rb_case *c, int64_t p, int64_t n) {
    const int64_t r = p - n;
    if (c->causal && r < 0) return -1;
    int64_t t = r - c->r_lo;
    if (t < 0 || t >= c->rows) {
        if (!c->clamp) return -1;
        t = t < 0 ? 0 : c->rows - 1;
    }
    return t;
}

static double table_value(const rb_case *c, unsigned long long *state, int64_t t, int64_t j) {
    const double v = test_uniform(state, -1.0, 1.0);
    if (!c->sparse) return v;
    /* zero rows in blocks, and only a band of columns alive that narrows with |t - rows/2| */
    if ((t / 11) % 4 == 2) return 0.0;
    const int64_t dist = llabs(t - c->rows / 2);
    const int64_t first = c->d * dist / (c->rows + 1);
    return j >= first ? v : 0.0;
}

/* Run every phase of a plan, each unit range split unevenly in two. */
static void run_plan_any(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels) {
    wavepe_relbias_plan *plan = NULL;
    wavepe_error err = {{0}};
    CHECK(wavepe_relbias_plan_create(isa, a, kernels, 3, &plan, &err) == WAVEPE_OK);
    if (plan == NULL) {
        fprintf(stderr, "plan: %s\n", err.message);
        return;
    }
    CHECK(wavepe_relbias_units(plan, 3) == 0);
    for (int phase = 0; phase < 3; ++phase) {
        const int64_t units = wavepe_relbias_units(plan, phase), cut = units / 3;
        CHECK(wavepe_relbias_grain(plan, phase) >= 1);
        CHECK(wavepe_relbias_run(plan, phase, cut, units) == WAVEPE_OK);
        CHECK(wavepe_relbias_run(plan, phase, 0, cut) == WAVEPE_OK);
    }
    wavepe_relbias_plan_free(plan);
}
#define run_plan_f32 run_plan_any
#define run_plan_f64 run_plan_any

/* Element type T, suffix S, epsilon EPS: run every kernel of one case. */
#define RB_TEST_DTYPE(T, S, EPS)                                                                 \
    static void run_case_##S(const rb_case *c) {                                                 \
        unsigned long long state = 0x9E3779B97F4A7C15ULL ^ (unsigned long long)(c->m * 131 + c->d); \
        const int64_t qs_m = c->d + c->pad, qs_g = c->m * qs_m + c->pad;                         \
        const int64_t bs_m = c->n + c->pad, bs_g = c->m * bs_m + 3 * c->pad;                     \
        const int64_t nq = c->g * qs_g + 1, nb = c->g * bs_g + 1, nt = c->rows * c->d + 1;       \
        T *q = calloc(nq, sizeof(T)), *tab = calloc(nt, sizeof(T)), *grad = calloc(nb, sizeof(T)); \
        double *want_b = calloc(nb, sizeof(double)), *bound_b = calloc(nb, sizeof(double));     \
        double *want_q = calloc(nq, sizeof(double)), *bound_q = calloc(nq, sizeof(double));     \
        double *want_t = calloc(nt, sizeof(double)), *bound_t = calloc(nt, sizeof(double));     \
        for (int64_t i = 0; i < nq; ++i) q[i] = (T)test_uniform(&state, -1.0, 1.0);              \
        for (int64_t i = 0; i < nb; ++i) grad[i] = (T)test_uniform(&state, -1.0, 1.0);           \
        for (int64_t t = 0; t < c->rows; ++t)                                                    \
            for (int64_t j = 0; j < c->d; ++j) tab[t * c->d + j] = (T)table_value(c, &state, t, j); \
        for (int64_t g = 0; g < c->g; ++g)                                                       \
            for (int64_t m = 0; m < c->m; ++m)                                                   \
                for (int64_t n = 0; n < c->n; ++n) {                                             \
                    const int64_t t = naive_row(c, c->q_offset + m, n);                          \
                    if (t < 0) continue;                                                         \
                    const T *qr = q + g * qs_g + m * qs_m, *tr = tab + t * c->d;                 \
                    const int64_t bi = g * bs_g + m * bs_m + n;                                  \
                    for (int64_t j = 0; j < c->d; ++j) {                                         \
                        want_b[bi] += (double)qr[j] * tr[j];                                     \
                        bound_b[bi] += fabs((double)qr[j] * tr[j]);                              \
                        want_q[g * qs_g + m * qs_m + j] += (double)grad[bi] * tr[j];             \
                        bound_q[g * qs_g + m * qs_m + j] += fabs((double)grad[bi] * tr[j]);      \
                        want_t[t * c->d + j] += (double)grad[bi] * qr[j];                        \
                        bound_t[t * c->d + j] += fabs((double)grad[bi] * qr[j]);                 \
                    }                                                                            \
                }                                                                                \
        const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};                        \
        T *ref_b = NULL, *ref_q = NULL, *ref_t = NULL;                                           \
        for (int v = 0; v < 2; ++v) {                                                            \
            const wavepe_isa isa = isas[v];                                                      \
            T *bias = malloc(nb * sizeof(T)), *dq = malloc(nq * sizeof(T)), *dt = malloc(nt * sizeof(T)); \
            for (int64_t i = 0; i < nb; ++i) bias[i] = (T)-777; /* padding must stay untouched */ \
            for (int64_t i = 0; i < nq; ++i) dq[i] = (T)-777;                                    \
            for (int64_t i = 0; i < nt; ++i) dt[i] = (T)-777;                                    \
            wavepe_relbias_args a;                                                               \
            a = wavepe_relbias_args_defaults();                                                  \
            a.dtype = sizeof(T) == 8 ? WAVEPE_F64 : WAVEPE_F32;                                  \
            a.batch = c->g; a.m = c->m; a.n = c->n; a.d = c->d; a.rows = c->rows;                \
            a.r_lo = c->r_lo; a.q_offset = c->q_offset; a.causal = c->causal; a.clamp = c->clamp; \
            a.q = q; a.q_stride_g = qs_g; a.q_stride_m = qs_m; a.table = tab;                    \
            a.bias = bias; a.bias_stride_g = bs_g; a.bias_stride_m = bs_m;                       \
            a.grad = grad; a.grad_stride_g = bs_g; a.grad_stride_m = bs_m;                       \
            a.dq = dq; a.dq_stride_g = qs_g; a.dq_stride_m = qs_m; a.dtable = dt;                \
            const unsigned all = WAVEPE_RELBIAS_FORWARD | WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE; \
            CHECK(wavepe_relbias_validate(&a, all, NULL) == WAVEPE_OK);                          \
            const int64_t bytes = wavepe_relbias_##S##_workspace_bytes(isa, &a, all);            \
            CHECK(bytes >= 0);                                                                   \
            a.workspace = bytes > 0 ? malloc(bytes) : NULL;                                      \
            const int64_t chunks = wavepe_relbias_##S##_chunks(isa, &a);                         \
            wavepe_relbias_##S##_prepare(isa, &a, all, 0, chunks / 2);                           \
            wavepe_relbias_##S##_prepare(isa, &a, all, chunks / 2, chunks);                      \
            /* uneven splits of the row spaces: results must not depend on them */             \
            const int64_t rows_q = c->g * c->m, cut1 = rows_q / 3, cut2 = rows_q / 3 + 7 < rows_q ? rows_q / 3 + 7 : rows_q; \
            wavepe_relbias_##S(isa, &a, 0, cut1);                                                \
            wavepe_relbias_##S(isa, &a, cut1, cut2);                                             \
            wavepe_relbias_##S(isa, &a, cut2, rows_q);                                           \
            wavepe_relbias_grad_q_##S(isa, &a, 0, cut2);                                         \
            wavepe_relbias_grad_q_##S(isa, &a, cut2, rows_q);                                    \
            const int64_t tcut = c->rows / 2 + 1 < c->rows ? c->rows / 2 + 1 : c->rows;          \
            wavepe_relbias_grad_table_##S(isa, &a, 0, tcut);                                     \
            wavepe_relbias_grad_table_##S(isa, &a, tcut, c->rows);                               \
            const double tol = (double)(c->d + c->n + 4) * (EPS);                                \
            for (int64_t g = 0; g < c->g; ++g)                                                   \
                for (int64_t m = 0; m < c->m; ++m) {                                             \
                    for (int64_t n = 0; n < c->n; ++n) {                                         \
                        const int64_t i = g * bs_g + m * bs_m + n;                               \
                        CHECK_CLOSE(bias[i], want_b[i], 0, tol * bound_b[i] + 1e-300);           \
                    }                                                                            \
                    for (int64_t j = 0; j < c->d; ++j) {                                         \
                        const int64_t i = g * qs_g + m * qs_m + j;                               \
                        CHECK_CLOSE(dq[i], want_q[i], 0, tol * bound_q[i] + 1e-300);             \
                    }                                                                            \
                }                                                                                \
            for (int64_t i = 0; i < c->rows * c->d; ++i)                                         \
                CHECK_CLOSE(dt[i], want_t[i], 0, (double)(c->g * c->m + 4) * (EPS) * bound_t[i] + 1e-300); \
            /* padding between rows untouched */                                                 \
            for (int64_t g = 0; g < c->g; ++g)                                                   \
                for (int64_t m = 0; m < c->m; ++m) {                                             \
                    for (int64_t k = c->n; k < bs_m; ++k) CHECK(bias[g * bs_g + m * bs_m + k] == (T)-777); \
                    for (int64_t k = c->d; k < qs_m; ++k) CHECK(dq[g * qs_g + m * qs_m + k] == (T)-777); \
                }                                                                                \
            if (v == 0) {                                                                        \
                ref_b = bias; ref_q = dq; ref_t = dt;                                            \
            } else {                                                                             \
                /* the same ISA run again with one range each: bitwise equal to the split run */ \
                T *b2 = malloc(nb * sizeof(T)), *q2 = malloc(nq * sizeof(T)), *t2 = malloc(nt * sizeof(T)); \
                memcpy(b2, bias, nb * sizeof(T));                                                \
                memcpy(q2, dq, nq * sizeof(T));                                                  \
                memcpy(t2, dt, nt * sizeof(T));                                                  \
                a.bias = b2; a.dq = q2; a.dtable = t2;                                           \
                wavepe_relbias_##S(isa, &a, 0, rows_q);                                          \
                wavepe_relbias_grad_q_##S(isa, &a, 0, rows_q);                                   \
                wavepe_relbias_grad_table_##S(isa, &a, 0, c->rows);                              \
                CHECK(memcmp(b2, bias, nb * sizeof(T)) == 0);                                    \
                CHECK(memcmp(q2, dq, nq * sizeof(T)) == 0);                                      \
                CHECK(memcmp(t2, dt, nt * sizeof(T)) == 0);                                      \
                /* the plan (what callers use): bitwise the kernels' results, for any split, */  \
                /* and the batch given as an outer level reads the same matrices */             \
                free(a.workspace);                                                               \
                a.workspace = NULL; /* the plan owns its own */                                  \
                for (int outer = 0; outer < 2; ++outer) {                                        \
                    wavepe_relbias_args f = a;                                                   \
                    memcpy(b2, bias, nb * sizeof(T));                                            \
                    for (int64_t g = 0; g < c->g; ++g)                                           \
                        for (int64_t m = 0; m < c->m; ++m)                                       \
                            for (int64_t k = 0; k < c->n; ++k) b2[g * bs_g + m * bs_m + k] = (T)-1; \
                    f.bias = b2;                                                                 \
                    if (outer) {                                                                 \
                        f.outer = c->g, f.batch = 1;                                             \
                        f.q_stride_o = qs_g, f.bias_stride_o = bs_g;                             \
                    }                                                                            \
                    run_plan_##S(isa, &f, WAVEPE_RELBIAS_FORWARD);                               \
                    CHECK(memcmp(b2, bias, nb * sizeof(T)) == 0);                                \
                }                                                                                \
                memcpy(q2, dq, nq * sizeof(T));                                                  \
                for (int64_t i = 0; i < c->rows * c->d; ++i) t2[i] = (T)-1;                      \
                for (int64_t g = 0; g < c->g; ++g)                                               \
                    for (int64_t m = 0; m < c->m; ++m)                                           \
                        for (int64_t k = 0; k < c->d; ++k) q2[g * qs_g + m * qs_m + k] = (T)-1;  \
                a.bias = bias; a.dq = q2; a.dtable = t2;                                         \
                run_plan_##S(isa, &a, WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE);        \
                CHECK(memcmp(q2, dq, nq * sizeof(T)) == 0);                                      \
                CHECK(memcmp(t2, dt, nt * sizeof(T)) == 0);                                      \
                free(b2); free(q2); free(t2);                                                    \
                free(bias); free(dq); free(dt);                                                  \
            }                                                                                    \
            free(a.workspace);                                                                   \
        }                                                                                        \
        free(ref_b); free(ref_q); free(ref_t);                                                   \
        free(q); free(tab); free(grad);                                                          \
        free(want_b); free(bound_b); free(want_q); free(bound_q); free(want_t); free(bound_t);   \
    }

RB_TEST_DTYPE(float, f32, 1.2e-7)
RB_TEST_DTYPE(double, f64, 2.3e-16)

/* ---- bfloat16 / float16 storage ---------------------------------------------------
 * The kernels widen the (exact) half inputs, sum in float32 and round every
 * output element once, so against the exact sum
 *   |got - exact| <= ulp_half(|exact| + e32) / 2 + e32,
 * e32 the float32 sum's error: (terms + 4) float32 unit roundoffs of the sum
 * of |products| (the float32 test's bound), plus 2^-120 for products that
 * flush to zero.  And as the sums are the float32 kernel's, on the same ISA
 * each output is bit for bit that kernel's result on the widened inputs,
 * rounded by half.h. */

static double half_ulp(int dtype, double x) {
    int e;
    (void)frexp(x, &e); /* x = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
    if (dtype == WAVEPE_BF16) return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
    return ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
}

static uint16_t half_of(int dtype, float x) { return dtype == WAVEPE_BF16 ? wp_f32_to_bf16(x) : wp_f32_to_f16(x); }
static float half_value(int dtype, uint16_t h) { return dtype == WAVEPE_BF16 ? wp_bf16_to_f32(h) : wp_f16_to_f32(h); }

static void half_kernels(int dtype, wavepe_isa isa, wavepe_relbias_args *a, int64_t rows_q, int64_t rows_t) {
    const unsigned all = WAVEPE_RELBIAS_FORWARD | WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE;
    const int bf = dtype == WAVEPE_BF16, f32 = dtype == WAVEPE_F32;
    const int64_t bytes = f32 ? wavepe_relbias_f32_workspace_bytes(isa, a, all)
                          : bf ? wavepe_relbias_bf16_workspace_bytes(isa, a, all)
                               : wavepe_relbias_f16_workspace_bytes(isa, a, all);
    CHECK(bytes >= 0);
    a->workspace = bytes > 0 ? malloc((size_t)bytes) : NULL;
    const int64_t chunks = f32 ? wavepe_relbias_f32_chunks(isa, a)
                           : bf ? wavepe_relbias_bf16_chunks(isa, a) : wavepe_relbias_f16_chunks(isa, a);
    const int64_t cq = rows_q / 3, ct = rows_t / 2; /* uneven splits */
    if (f32) {
        wavepe_relbias_f32_prepare(isa, a, all, 0, chunks);
        wavepe_relbias_f32(isa, a, 0, cq), wavepe_relbias_f32(isa, a, cq, rows_q);
        wavepe_relbias_grad_q_f32(isa, a, 0, cq), wavepe_relbias_grad_q_f32(isa, a, cq, rows_q);
        wavepe_relbias_grad_table_f32(isa, a, 0, ct), wavepe_relbias_grad_table_f32(isa, a, ct, rows_t);
    } else if (bf) {
        wavepe_relbias_bf16_prepare(isa, a, all, 0, chunks);
        wavepe_relbias_bf16(isa, a, 0, cq), wavepe_relbias_bf16(isa, a, cq, rows_q);
        wavepe_relbias_grad_q_bf16(isa, a, 0, cq), wavepe_relbias_grad_q_bf16(isa, a, cq, rows_q);
        wavepe_relbias_grad_table_bf16(isa, a, 0, ct), wavepe_relbias_grad_table_bf16(isa, a, ct, rows_t);
    } else {
        wavepe_relbias_f16_prepare(isa, a, all, 0, chunks);
        wavepe_relbias_f16(isa, a, 0, cq), wavepe_relbias_f16(isa, a, cq, rows_q);
        wavepe_relbias_grad_q_f16(isa, a, 0, cq), wavepe_relbias_grad_q_f16(isa, a, cq, rows_q);
        wavepe_relbias_grad_table_f16(isa, a, 0, ct), wavepe_relbias_grad_table_f16(isa, a, ct, rows_t);
    }
    free(a->workspace);
    a->workspace = NULL;
}

/* One case with half storage; values scaled by `scale` (small: fp16 subnormal outputs). */
static void run_case_half(const rb_case *c, int dtype, double scale) {
    unsigned long long state = 0x2545F4914F6CDD1DULL ^ (unsigned long long)(c->m * 7 + c->n);
    const int64_t qs_m = c->d + c->pad, qs_g = c->m * qs_m + c->pad;
    const int64_t bs_m = c->n + c->pad, bs_g = c->m * bs_m + 3 * c->pad;
    const int64_t nq = c->g * qs_g + 1, nb = c->g * bs_g + 1, nt = c->rows * c->d + 1;
    uint16_t *q = calloc(nq, 2), *tab = calloc(nt, 2), *grad = calloc(nb, 2);
    float *qf = calloc(nq, 4), *tabf = calloc(nt, 4), *gradf = calloc(nb, 4);
    double *want_b = calloc(nb, 8), *bound_b = calloc(nb, 8), *want_q = calloc(nq, 8), *bound_q = calloc(nq, 8);
    double *want_t = calloc(nt, 8), *bound_t = calloc(nt, 8);
    for (int64_t i = 0; i < nq; ++i) q[i] = half_of(dtype, (float)(scale * test_uniform(&state, -1.0, 1.0)));
    for (int64_t i = 0; i < nb; ++i) grad[i] = half_of(dtype, (float)(scale * test_uniform(&state, -1.0, 1.0)));
    for (int64_t t = 0; t < c->rows; ++t)
        for (int64_t j = 0; j < c->d; ++j) tab[t * c->d + j] = half_of(dtype, (float)(scale * table_value(c, &state, t, j)));
    for (int64_t i = 0; i < nq; ++i) qf[i] = half_value(dtype, q[i]);
    for (int64_t i = 0; i < nb; ++i) gradf[i] = half_value(dtype, grad[i]);
    for (int64_t i = 0; i < nt; ++i) tabf[i] = half_value(dtype, tab[i]);
    for (int64_t g = 0; g < c->g; ++g)
        for (int64_t m = 0; m < c->m; ++m)
            for (int64_t n = 0; n < c->n; ++n) {
                const int64_t t = naive_row(c, c->q_offset + m, n);
                if (t < 0) continue;
                const float *qr = qf + g * qs_g + m * qs_m, *tr = tabf + t * c->d;
                const int64_t bi = g * bs_g + m * bs_m + n;
                for (int64_t j = 0; j < c->d; ++j) {
                    want_b[bi] += (double)qr[j] * tr[j], bound_b[bi] += fabs((double)qr[j] * tr[j]);
                    want_q[g * qs_g + m * qs_m + j] += (double)gradf[bi] * tr[j];
                    bound_q[g * qs_g + m * qs_m + j] += fabs((double)gradf[bi] * tr[j]);
                    want_t[t * c->d + j] += (double)gradf[bi] * qr[j];
                    bound_t[t * c->d + j] += fabs((double)gradf[bi] * qr[j]);
                }
            }
    const wavepe_isa isas[2] = {WAVEPE_ISA_SCALAR, wavepe_test_isa};
    const int64_t rows_q = c->g * c->m;
    for (int v = 0; v < 2; ++v) {
        uint16_t *bias = malloc(nb * 2), *dq = malloc(nq * 2), *dt = malloc(nt * 2);
        float *bias32 = malloc(nb * 4), *dq32 = malloc(nq * 4), *dt32 = malloc(nt * 4);
        for (int64_t i = 0; i < nb; ++i) bias[i] = 0xABCD; /* padding must stay untouched */
        for (int64_t i = 0; i < nq; ++i) dq[i] = 0xABCD;
        for (int64_t i = 0; i < nt; ++i) dt[i] = 0xABCD;
        wavepe_relbias_args a;
        a = wavepe_relbias_args_defaults();
        a.dtype = dtype;
        a.batch = c->g, a.m = c->m, a.n = c->n, a.d = c->d, a.rows = c->rows;
        a.r_lo = c->r_lo, a.q_offset = c->q_offset, a.causal = c->causal, a.clamp = c->clamp;
        a.q = q, a.q_stride_g = qs_g, a.q_stride_m = qs_m, a.table = tab;
        a.bias = bias, a.bias_stride_g = bs_g, a.bias_stride_m = bs_m;
        a.grad = grad, a.grad_stride_g = bs_g, a.grad_stride_m = bs_m;
        a.dq = dq, a.dq_stride_g = qs_g, a.dq_stride_m = qs_m, a.dtable = dt;
        CHECK(wavepe_relbias_validate(&a, 7, NULL) == WAVEPE_OK);
        half_kernels(dtype, isas[v], &a, rows_q, c->rows);
        /* the float32 kernels of the same ISA on the widened inputs */
        wavepe_relbias_args b = a;
        b.dtype = WAVEPE_F32, b.q = qf, b.table = tabf, b.grad = gradf, b.bias = bias32, b.dq = dq32, b.dtable = dt32;
        half_kernels(WAVEPE_F32, isas[v], &b, rows_q, c->rows);
        const double e = 1.2e-7;
        int bad = 0;
#define RB_HALF_CHECK(got, want, bound, terms, got32)                                                     \
    do {                                                                                                   \
        const double e32_ = (double)(terms) * e * (bound) + 0x1p-120;                                      \
        const double w_ = (want), g_ = half_value(dtype, got);                                             \
        const int ok_ = fabs(g_ - w_) <= 0.5 * half_ulp(dtype, fabs(w_) + e32_) + e32_ &&                  \
                        (got) == half_of(dtype, got32);                                                    \
        if (!ok_ && bad++ < 3)                                                                             \
            fprintf(stderr, "%s %s: got %g (float32 kernel %g), want %g\n", wavepe_dtype_name(dtype),     \
                    wavepe_isa_name(isas[v]), g_, (double)(got32), w_);                                    \
        CHECK(ok_);                                                                                        \
    } while (0)
        for (int64_t g = 0; g < c->g; ++g)
            for (int64_t m = 0; m < c->m; ++m) {
                for (int64_t n = 0; n < c->n; ++n) {
                    const int64_t i = g * bs_g + m * bs_m + n;
                    RB_HALF_CHECK(bias[i], want_b[i], bound_b[i], c->d + c->n + 4, bias32[i]);
                }
                for (int64_t j = 0; j < c->d; ++j) {
                    const int64_t i = g * qs_g + m * qs_m + j;
                    RB_HALF_CHECK(dq[i], want_q[i], bound_q[i], c->d + c->n + 4, dq32[i]);
                }
                for (int64_t k = c->n; k < bs_m; ++k) CHECK(bias[g * bs_g + m * bs_m + k] == 0xABCD);
                for (int64_t k = c->d; k < qs_m; ++k) CHECK(dq[g * qs_g + m * qs_m + k] == 0xABCD);
            }
        for (int64_t i = 0; i < c->rows * c->d; ++i) RB_HALF_CHECK(dt[i], want_t[i], bound_t[i], c->g * c->m + 4, dt32[i]);
#undef RB_HALF_CHECK
        /* the plan: bitwise the kernels' results */
        uint16_t *b2 = malloc(nb * 2), *q2 = malloc(nq * 2), *t2 = malloc(nt * 2);
        memcpy(b2, bias, nb * 2), memcpy(q2, dq, nq * 2);
        for (int64_t g = 0; g < c->g; ++g)
            for (int64_t m = 0; m < c->m; ++m) {
                for (int64_t k = 0; k < c->n; ++k) b2[g * bs_g + m * bs_m + k] = 0xFFFF;
                for (int64_t k = 0; k < c->d; ++k) q2[g * qs_g + m * qs_m + k] = 0xFFFF;
            }
        for (int64_t i = 0; i < nt; ++i) t2[i] = i < c->rows * c->d ? 0xFFFF : dt[i];
        a.bias = b2, a.dq = q2, a.dtable = t2;
        run_plan_any(isas[v], &a, WAVEPE_RELBIAS_FORWARD);
        run_plan_any(isas[v], &a, WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE);
        CHECK(memcmp(b2, bias, nb * 2) == 0);
        CHECK(memcmp(q2, dq, nq * 2) == 0);
        CHECK(memcmp(t2, dt, nt * 2) == 0);
        free(b2), free(q2), free(t2);
        free(bias), free(dq), free(dt), free(bias32), free(dq32), free(dt32);
    }
    free(q), free(tab), free(grad), free(qf), free(tabf), free(gradf);
    free(want_b), free(bound_b), free(want_q), free(bound_q), free(want_t), free(bound_t);
}

static void test_validation(void) {
    float buf[64];
    wavepe_relbias_args a;
    a = wavepe_relbias_args_defaults();
    a.dtype = WAVEPE_F32;
    a.batch = 2; a.m = 3; a.n = 4; a.d = 5; a.rows = 6; a.r_lo = -2;
    a.q = buf; a.q_stride_g = 15; a.q_stride_m = 5; a.table = buf;
    a.bias = buf; a.bias_stride_g = 12; a.bias_stride_m = 4;
    const unsigned fwd = WAVEPE_RELBIAS_FORWARD;
    wavepe_error err = {{0}};
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_OK);
    a.dtype = 7;
    CHECK(wavepe_relbias_validate(&a, fwd, &err) == WAVEPE_E_INVALID && strstr(err.message, "dtype=7") != NULL);
    a.dtype = WAVEPE_F32;
    a.m = -1;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    a.m = 3;
    a.d = -5;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_NEGATIVE_SIZE);
    a.d = 5;
    a.bias = NULL;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_NULL);
    CHECK(wavepe_relbias_validate(&a, WAVEPE_RELBIAS_GRAD_TABLE, NULL) == WAVEPE_E_NULL); /* grad, dtable */
    a.bias = buf;
    a.table = NULL;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_NULL);
    a.table = buf;
    a.clamp = 1;
    a.rows = 0;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_INVALID);
    a.clamp = 0;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_OK); /* empty table: all zero */
    a.rows = 6;
    a.n = (int64_t)1 << 40;
    a.batch = (int64_t)1 << 30;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_OVERFLOW);
    a.batch = 2;
    a.n = 4;
    a.q_offset = INT64_MAX - 1;
    CHECK(wavepe_relbias_validate(&a, fwd, &err) == WAVEPE_E_OVERFLOW);
    CHECK(strstr(err.message, "q_offset=9223372036854775806") != NULL);
    a.q_offset = ((int64_t)1 << 60) + 1; /* the limit is 2^60 */
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_OVERFLOW);
    a.q_offset = (int64_t)1 << 60;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_OK);
    a.q_offset = 0;
    a.r_lo = INT64_MIN;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_OVERFLOW);
    a.r_lo = 0;
    a.bias_stride_g = INT64_MAX / 2; /* rows far apart: the addresses overflow */
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_OVERFLOW);
    a.bias_stride_g = -12; /* negative strides are fine while they fit */
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_OK);
    a.bias_stride_g = INT64_MIN;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_E_OVERFLOW);
    a.bias_stride_g = 12;
    /* empty problems need no data at all */
    wavepe_relbias_args e;
    e = wavepe_relbias_args_defaults();
    e.batch = 3; e.m = 0; e.n = 5; e.d = 4; e.rows = 0;
    e.dtype = WAVEPE_F64;
    CHECK(wavepe_relbias_validate(&e, 7, NULL) == WAVEPE_OK);
    wavepe_relbias_f64(wavepe_test_isa, &e, 0, 0);
    run_plan_any(wavepe_test_isa, &e, WAVEPE_RELBIAS_FORWARD);
    run_plan_any(wavepe_test_isa, &e, WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE);
    /* the outer batch level is for the forward only */
    a.outer = 2;
    CHECK(wavepe_relbias_validate(&a, fwd, NULL) == WAVEPE_OK);
    CHECK(wavepe_relbias_validate(&a, WAVEPE_RELBIAS_GRAD_Q, &err) == WAVEPE_E_INVALID);
    a.outer = 0;
}

void test_relbias(void) {
    static const rb_case cases[] = {
        /* g  m   n   d  rows r_lo off causal clamp sparse pad */
        {1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0},
        {2, 7, 9, 7, 5, 0, 2, 1, 0, 0, 3},
        {3, 13, 17, 13, 40, -20, 4, 0, 0, 1, 1},
        {1, 33, 33, 33, 70, -35, 0, 1, 0, 1, 0},
        {2, 20, 45, 16, 9, -4, 25, 1, 1, 0, 2},
        {1, 19, 30, 17, 3, 2, -6, 0, 1, 0, 0},   /* negative offset, clamp, r_lo > 0 */
        {2, 12, 12, 8, 1, 0, 0, 0, 1, 0, 1},     /* one-row table, clamp: everything uses it */
        {1, 25, 10, 24, 64, -30, 40, 1, 0, 1, 0}, /* offset larger than N */
        {1, 8, 50, 32, 30, 100, 0, 1, 0, 0, 0},  /* table beyond every distance */
        {2, 0, 9, 7, 5, 0, 0, 1, 0, 0, 1},       /* M = 0 */
        {2, 5, 0, 7, 5, 0, 0, 1, 1, 0, 0},       /* N = 0 */
        {1, 5, 6, 0, 4, 0, 0, 0, 0, 0, 0},       /* d = 0 */
        {1, 9, 11, 5, 0, 0, 0, 0, 0, 0, 0},      /* empty table */
        {1, 70, 70, 40, 140, -70, 0, 0, 0, 1, 5},
        {2, 64, 80, 35, 100, -3, 16, 1, 1, 1, 0},
        {13, 1, 40, 19, 50, -25, 39, 1, 0, 1, 1},  /* decoding: one query per matrix */
        {11, 4, 30, 9, 20, -5, 26, 0, 1, 0, 0},    /* a few queries per matrix */
        {9, 5, 23, 16, 30, -10, 18, 1, 1, 1, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        run_case_f32(&cases[i]);
        run_case_f64(&cases[i]);
        run_case_half(&cases[i], WAVEPE_BF16, 1.0);
        run_case_half(&cases[i], WAVEPE_F16, 1.0);
    }
    /* fp16 results in its subnormal range (|bias| < 2^-14 ~ 6.1e-5) */
    run_case_half(&cases[3], WAVEPE_F16, 1e-3);
    run_case_half(&cases[14], WAVEPE_F16, 1e-3);
    test_validation();
}
