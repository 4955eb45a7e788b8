/* relbias.c: the scalar reference kernels, dispatch, and the plan that
 * callers run (the rules themselves are in relbias.h).
 *
 * The scalar kernels are the readable definition: one key at a time, its
 * distance looked up (or clamped, or skipped), a plain dot product over d.
 * bfloat16 / float16 elements are widened to float32, summed in float32 and
 * each output rounded once to its type (half.h).
 */
#include "relbias.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "half.h"
#include "isa_dispatch.h"
#include "scratch.h"

/* ---- scalar reference ---------------------------------------------------
 * table_row(): the table row key n of a query at p reads, or -1 for a key
 * that contributes nothing (causal-masked, or outside an unclamped table). */

static inline int64_t table_row(const wavepe_relbias_args *a, int64_t p, int64_t n) {
    const int64_t r = p - n;
    if (a->causal && r < 0) return -1;
    int64_t t = r - a->r_lo;
    if (t < 0 || t >= a->rows) {
        if (!a->clamp) return -1;
        t = t < 0 ? 0 : a->rows - 1;
    }
    return t;
}

/* One template per storage type S, computed in T (S itself, or float for
 * bfloat16 / float16: TO_T widens an element, TO_S rounds one, half.h).  Every
 * output element is a sum formed in T and stored once; the gradients form
 * their sums RELBIAS_JB head dimensions at a time (an accumulator of T on the
 * stack), adding the same terms in the same order as one pass over d would. */
#define RELBIAS_JB 64
#define RELBIAS_SAME(x) (x)

#define RELBIAS_SCALAR(S, T, SUFFIX, TO_T, TO_S)                                                 \
    void wavepe_relbias_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end) { \
        const S *table = (const S *)a->table;                                                    \
        for (int64_t row = begin; row < end; ++row) {                                            \
            const int64_t g = row / a->m, m = row % a->m, p = a->q_offset + m;                   \
            const S *q = (const S *)a->q + g * a->q_stride_g + m * a->q_stride_m;                \
            S *out = (S *)a->bias + g * a->bias_stride_g + m * a->bias_stride_m;                 \
            for (int64_t n = 0; n < a->n; ++n) {                                                 \
                const int64_t t = table_row(a, p, n);                                            \
                T acc = 0;                                                                       \
                if (t >= 0)                                                                      \
                    for (int64_t j = 0; j < a->d; ++j) acc += TO_T(q[j]) * TO_T(table[t * a->d + j]); \
                out[n] = TO_S(acc);                                                              \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    void wavepe_relbias_grad_q_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin,    \
                                                 int64_t end) {                                  \
        const S *table = (const S *)a->table;                                                    \
        for (int64_t row = begin; row < end; ++row) {                                            \
            const int64_t g = row / a->m, m = row % a->m, p = a->q_offset + m;                   \
            const S *grad = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;    \
            S *dq = (S *)a->dq + g * a->dq_stride_g + m * a->dq_stride_m;                        \
            for (int64_t j0 = 0; j0 < a->d; j0 += RELBIAS_JB) {                                  \
                const int64_t jn = a->d - j0 < RELBIAS_JB ? a->d - j0 : RELBIAS_JB;              \
                T acc[RELBIAS_JB] = {0};                                                         \
                for (int64_t n = 0; n < a->n; ++n) {                                             \
                    const int64_t t = table_row(a, p, n);                                        \
                    if (t < 0) continue;                                                         \
                    const T gn = TO_T(grad[n]);                                                  \
                    for (int64_t j = 0; j < jn; ++j) acc[j] += gn * TO_T(table[t * a->d + j0 + j]); \
                }                                                                                \
                for (int64_t j = 0; j < jn; ++j) dq[j0 + j] = TO_S(acc[j]);                      \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    void wavepe_relbias_grad_table_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin, \
                                                     int64_t end) {                              \
        S *dtable = (S *)a->dtable;                                                              \
        for (int64_t t = begin; t < end; ++t)                                                    \
            for (int64_t j0 = 0; j0 < a->d; j0 += RELBIAS_JB) {                                  \
                const int64_t jn = a->d - j0 < RELBIAS_JB ? a->d - j0 : RELBIAS_JB;              \
                T acc[RELBIAS_JB] = {0};                                                         \
                for (int64_t g = 0; g < a->batch; ++g)                                           \
                    for (int64_t m = 0; m < a->m; ++m) {                                         \
                        const int64_t p = a->q_offset + m;                                       \
                        const S *grad = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m; \
                        const S *q = (const S *)a->q + g * a->q_stride_g + m * a->q_stride_m + j0; \
                        /* the keys whose lookup lands on row t: the one at distance r_lo + t, */ \
                        /* plus, clamped, every key beyond the table's edge at t = 0 / rows-1 */ \
                        const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, p);       \
                        const int64_t n_exact = p - a->r_lo - t;                                 \
                        T sum = 0;                                                               \
                        if (n_exact >= s.n_tab_begin && n_exact < s.n_tab_end) sum += TO_T(grad[n_exact]); \
                        if (a->clamp && t == 0)                                                  \
                            for (int64_t n = s.n_tab_end; n < s.n_zero_begin; ++n) sum += TO_T(grad[n]); \
                        if (a->clamp && t == a->rows - 1)                                        \
                            for (int64_t n = 0; n < s.n_tab_begin; ++n) sum += TO_T(grad[n]);    \
                        for (int64_t j = 0; j < jn; ++j) acc[j] += sum * TO_T(q[j]);             \
                    }                                                                            \
                for (int64_t j = 0; j < jn; ++j) dtable[t * a->d + j0 + j] = TO_S(acc[j]);       \
            }                                                                                    \
    }

RELBIAS_SCALAR(float, float, f32, RELBIAS_SAME, RELBIAS_SAME)
RELBIAS_SCALAR(double, double, f64, RELBIAS_SAME, RELBIAS_SAME)
RELBIAS_SCALAR(uint16_t, float, bf16, wp_bf16_to_f32, wp_f32_to_bf16)
RELBIAS_SCALAR(uint16_t, float, f16, wp_f16_to_f32, wp_f32_to_f16)

/* ---- dispatch --------------------------------------------------------------
 * The vector variants need the workspace prepared for the same ISA; without
 * one (or for an ISA this build does not have) the scalar reference runs.
 * Every kernel runs in the kernels' floating-point environment (fpenv.h). */

#define RELBIAS_PICK(isa, has_ws, name, args) WAVEPE_ISA_CALL((has_ws) ? (isa) : WAVEPE_ISA_SCALAR, name, args)

#define RELBIAS_DISPATCH(SUFFIX)                                                                 \
    int64_t wavepe_relbias_##SUFFIX##_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, \
                                                      unsigned kernels) {                        \
        switch (isa) {                                                                           \
        WAVEPE_ISA_CASES(wavepe_relbias_##SUFFIX, _workspace_bytes, (a, kernels), return)        \
        default: break;                                                                          \
        }                                                                                        \
        (void)a;                                                                                 \
        (void)kernels;                                                                           \
        return 0;                                                                                \
    }                                                                                            \
    int64_t wavepe_relbias_##SUFFIX##_chunks(wavepe_isa isa, const wavepe_relbias_args *a) {     \
        switch (isa) {                                                                           \
        WAVEPE_ISA_CASES(wavepe_relbias_##SUFFIX, _chunks, (a), return)                          \
        default: break;                                                                          \
        }                                                                                        \
        (void)a;                                                                                 \
        return 0;                                                                                \
    }                                                                                            \
    void wavepe_relbias_##SUFFIX##_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels, \
                                           int64_t begin, int64_t end) {                         \
        (void)kernels, (void)begin, (void)end;                                                   \
        if (a->workspace == NULL) return;                                                        \
        switch (isa) {                                                                           \
        WAVEPE_ISA_CASES(wavepe_relbias_##SUFFIX, _prepare, (a, kernels, begin, end), )          \
        default: break;                                                                          \
        }                                                                                        \
    }                                                                                            \
    void wavepe_relbias_##SUFFIX(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end) { \
        RELBIAS_PICK(isa, a->workspace != NULL, wavepe_relbias_##SUFFIX, (a, begin, end));      \
    }                                                                                            \
    void wavepe_relbias_grad_q_##SUFFIX(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, \
                                        int64_t end) {                                           \
        RELBIAS_PICK(isa, a->workspace != NULL, wavepe_relbias_grad_q_##SUFFIX, (a, begin, end)); \
    }                                                                                            \
    void wavepe_relbias_grad_table_##SUFFIX(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, \
                                            int64_t end) {                                       \
        /* dT reads no workspace: only the ISA decides */                                        \
        RELBIAS_PICK(isa, 1, wavepe_relbias_grad_table_##SUFFIX, (a, begin, end));              \
    }

RELBIAS_DISPATCH(f32)
RELBIAS_DISPATCH(f64)
RELBIAS_DISPATCH(bf16)
RELBIAS_DISPATCH(f16)

/* ---- plans ------------------------------------------------------------------
 * The layer every caller uses: it runs the workspace protocol above and cuts
 * the row spaces into units, so that no binding knows the kernels' blocking.
 *
 * Query-row units are RELBIAS_UNIT_ROWS rows of one matrix (whole register
 * blocks of every kernel: 8 blocks of the AVX2 forward's 6 rows; also a
 * multiple of 8 and 16), or, when matrices are shorter than that (decoding),
 * RELBIAS_UNIT_ROWS consecutive rows across matrices, so that a kernel can
 * gather the same row of several matrices into one block.  Units are handed
 * out in zigzag order (first, last, second, second-to-last, ...): a causal
 * triangle's rows cost more the later they come, and a thread pool that
 * splits the unit range into contiguous pieces then gets even shares.
 * Table-gradient units are a few runs of table rows per thread: each walks
 * all of q once, so fewer is better.
 *
 * Phases: 0 prepares the workspace (chunks of the table); 1 runs the forward,
 * or dq; 2 runs dT (threads own disjoint table rows, so results do not depend
 * on the split). */

#define RELBIAS_UNIT_ROWS 48
#define RELBIAS_DT_UNIT_ROWS 6

/* Call PREFIX<type>SUFFIX args, <type> the element type `dtype` names (f32, f64, bf16, f16);
 * RET is `x =` to keep the result, or empty. */
#define RELBIAS_BY_DTYPE(dtype, RET, PREFIX, SUFFIX, args)                                       \
    do {                                                                                         \
        switch (dtype) {                                                                         \
        case WAVEPE_F64: RET PREFIX##f64##SUFFIX args; break;                                    \
        case WAVEPE_BF16: RET PREFIX##bf16##SUFFIX args; break;                                  \
        case WAVEPE_F16: RET PREFIX##f16##SUFFIX args; break;                                    \
        default: RET PREFIX##f32##SUFFIX args; break;                                            \
        }                                                                                        \
    } while (0)

struct wavepe_relbias_plan {
    wavepe_relbias_args a; /* the caller's arguments, workspace set */
    wavepe_isa isa;
    unsigned kernels;
    int64_t chunks;          /* phase 0 units */
    int64_t outer;           /* >= 1 */
    int64_t per_g, row_units; /* query-row units per outer group (per_g = 0: units span matrices) */
    int64_t dt_unit_rows, dt_units;
};

static int64_t zigzag(int64_t k, int64_t units) { return k % 2 == 0 ? k / 2 : units - 1 - k / 2; }

/* Rows [*begin, *end) of the (G * M) row space in query-row unit u. */
static void unit_rows(const wavepe_relbias_plan *p, int64_t u, int64_t *begin, int64_t *end) {
    const int64_t m = p->a.m;
    if (p->per_g) {
        const int64_t g = u / p->per_g, mb = (u % p->per_g) * RELBIAS_UNIT_ROWS;
        *begin = g * m + mb;
        *end = g * m + (mb + RELBIAS_UNIT_ROWS < m ? mb + RELBIAS_UNIT_ROWS : m);
    } else {
        const int64_t rows = p->a.batch * m;
        *begin = u * RELBIAS_UNIT_ROWS;
        *end = *begin + RELBIAS_UNIT_ROWS < rows ? *begin + RELBIAS_UNIT_ROWS : rows;
    }
}

void wavepe_relbias_plan_free(wavepe_relbias_plan *p) {
    if (p == NULL) return;
    wavepe_scratch_free(p->a.workspace);
    free(p);
}

int wavepe_relbias_plan_create(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels, int64_t threads,
                               wavepe_relbias_plan **out, wavepe_error *err) {
    *out = NULL;
    int status = wavepe_relbias_validate(a, kernels, err);
    if (status != WAVEPE_OK) return status;
    if (a->dtype != WAVEPE_F32 && a->dtype != WAVEPE_F64 && a->dtype != WAVEPE_BF16 && a->dtype != WAVEPE_F16)
        return wavepe_fail(err, WAVEPE_E_INVALID, "the CPU kernels take float32, float64, bfloat16 or float16, got %s",
                           wavepe_dtype_name(a->dtype));
    wavepe_relbias_plan *p = calloc(1, sizeof *p);
    if (p == NULL) return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for a rel_bias plan");
    p->a = *a;
    p->a.workspace = NULL;
    p->isa = isa;
    p->kernels = kernels;
    p->outer = a->outer > 1 ? a->outer : 1;
    const int64_t rows_total = a->batch * a->m;
    const int bias_work = a->n > 0 && rows_total > 0;
    p->per_g = a->m >= RELBIAS_UNIT_ROWS ? (a->m + RELBIAS_UNIT_ROWS - 1) / RELBIAS_UNIT_ROWS : 0;
    p->row_units = p->per_g ? a->batch * p->per_g : (rows_total + RELBIAS_UNIT_ROWS - 1) / RELBIAS_UNIT_ROWS;
    if (!bias_work && (kernels & WAVEPE_RELBIAS_FORWARD)) p->row_units = 0;
    if ((kernels & WAVEPE_RELBIAS_GRAD_Q) && (rows_total == 0 || a->d == 0)) p->row_units = 0;
    if ((kernels & WAVEPE_RELBIAS_GRAD_TABLE) && a->rows > 0 && a->d > 0) {
        const int64_t t = threads > 0 ? threads : 1;
        int64_t per = (a->rows / (4 * t) + RELBIAS_DT_UNIT_ROWS - 1) / RELBIAS_DT_UNIT_ROWS * RELBIAS_DT_UNIT_ROWS;
        if (per < RELBIAS_DT_UNIT_ROWS) per = RELBIAS_DT_UNIT_ROWS;
        p->dt_unit_rows = per;
        p->dt_units = (a->rows + per - 1) / per;
    }
    /* the workspace, for the kernels that read one (none when there is nothing to compute) */
    const unsigned ws_kernels = kernels & (p->row_units > 0 ? ~0u : (unsigned)WAVEPE_RELBIAS_GRAD_TABLE);
    int64_t bytes = 0;
    if (ws_kernels != 0)
        RELBIAS_BY_DTYPE(a->dtype, bytes =, wavepe_relbias_, _workspace_bytes, (isa, &p->a, ws_kernels));
    if (bytes < 0) {
        wavepe_relbias_plan_free(p);
        return wavepe_fail(err, (int)bytes, "the rel_bias workspace (table rows %lld x head_dim %lld) is too large",
                           (long long)a->rows, (long long)a->d);
    }
    if (bytes > 0) {
        p->a.workspace = wavepe_scratch_alloc((size_t)bytes);
        if (p->a.workspace == NULL) {
            wavepe_relbias_plan_free(p);
            return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for the rel_bias workspace (%lld bytes)",
                               (long long)bytes);
        }
        RELBIAS_BY_DTYPE(a->dtype, p->chunks =, wavepe_relbias_, _chunks, (isa, &p->a));
    }
    *out = p;
    return WAVEPE_OK;
}

int64_t wavepe_relbias_units(const wavepe_relbias_plan *p, int phase) {
    const int fwd = (p->kernels & WAVEPE_RELBIAS_FORWARD) != 0;
    switch (phase) {
    case 0: return p->chunks;
    case 1:
        if (fwd) return p->outer * p->row_units;
        return (p->kernels & WAVEPE_RELBIAS_GRAD_Q) ? p->row_units : 0;
    case 2: return fwd ? 0 : p->dt_units;
    }
    return 0;
}

int64_t wavepe_relbias_grain(const wavepe_relbias_plan *p, int phase) {
    (void)p;
    return phase == 0 ? 16 : 1;
}

int wavepe_relbias_run(wavepe_relbias_plan *p, int phase, int64_t begin, int64_t end) {
    const wavepe_relbias_args *a = &p->a;
    const int64_t units = wavepe_relbias_units(p, phase);
    if (end > units) end = units;
    if (begin >= end) return WAVEPE_OK;
    if (phase == 0) {
        RELBIAS_BY_DTYPE(a->dtype, , wavepe_relbias_, _prepare, (p->isa, a, p->kernels, begin, end));
        return WAVEPE_OK;
    }
    const int64_t esize = wavepe_dtype_size(a->dtype);
    for (int64_t k = begin; k < end; ++k) {
        const int64_t u = zigzag(k, units);
        int64_t r0, r1;
        if (phase == 2) {
            r0 = u * p->dt_unit_rows;
            r1 = r0 + p->dt_unit_rows < a->rows ? r0 + p->dt_unit_rows : a->rows;
            RELBIAS_BY_DTYPE(a->dtype, , wavepe_relbias_grad_table_, , (p->isa, a, r0, r1));
            continue;
        }
        if (!(p->kernels & WAVEPE_RELBIAS_FORWARD)) {
            unit_rows(p, u, &r0, &r1);
            RELBIAS_BY_DTYPE(a->dtype, , wavepe_relbias_grad_q_, , (p->isa, a, r0, r1));
            continue;
        }
        /* forward: outer group o, shifted base pointers */
        const int64_t o = u / p->row_units;
        wavepe_relbias_args ao = *a;
        ao.q = (const char *)a->q + o * a->q_stride_o * esize;
        ao.bias = (char *)a->bias + o * a->bias_stride_o * esize;
        unit_rows(p, u % p->row_units, &r0, &r1);
        RELBIAS_BY_DTYPE(a->dtype, , wavepe_relbias_, , (p->isa, &ao, r0, r1));
    }
    return WAVEPE_OK;
}
