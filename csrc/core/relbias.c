/* relbias.c: validation, the scalar reference kernels, and dispatch.
 *
 * The scalar kernels are the readable definition: one key at a time, its
 * distance looked up (or clamped, or skipped), a plain dot product over d.
 */
#include "relbias.h"

#include <stddef.h>

#include "checked.h"
#include "fpenv.h"

#define RELBIAS_POS_LIMIT ((int64_t)1 << 61)

/* Largest element offset reached by a (G, M, inner) view with strides
 * (sg, sm, 1) fits in ptrdiff_t bytes.  Only called for non-empty views. */
static int check_reach(int64_t g, int64_t m, int64_t inner, int64_t sg, int64_t sm, int64_t elem) {
    int64_t a, b, total;
    if (sg == INT64_MIN || sm == INT64_MIN) return WAVEPE_E_OVERFLOW;
    const int64_t asg = sg < 0 ? -sg : sg, asm_ = sm < 0 ? -sm : sm;
    if (wavepe_mul_overflow(g - 1, asg, &a) || wavepe_mul_overflow(m - 1, asm_, &b)) return WAVEPE_E_OVERFLOW;
    if (wavepe_add_overflow(a, b, &total) || wavepe_add_overflow(total, inner, &total)) return WAVEPE_E_OVERFLOW;
    if (wavepe_mul_overflow(total, elem, &total) || (uint64_t)total > (uint64_t)PTRDIFF_MAX)
        return WAVEPE_E_OVERFLOW;
    return WAVEPE_OK;
}

int wavepe_relbias_validate(const wavepe_relbias_args *a, unsigned kernels, int64_t elem_size) {
    if (elem_size != 4 && elem_size != 8) return WAVEPE_E_INVALID;
    if (a->batch < 0 || a->m < 0 || a->n < 0 || a->d < 0 || a->rows < 0) return WAVEPE_E_NEGATIVE_SIZE;
    if (a->m > RELBIAS_POS_LIMIT || a->n > RELBIAS_POS_LIMIT || a->rows > RELBIAS_POS_LIMIT ||
        a->q_offset > RELBIAS_POS_LIMIT || a->q_offset < -RELBIAS_POS_LIMIT || a->r_lo > RELBIAS_POS_LIMIT ||
        a->r_lo < -RELBIAS_POS_LIMIT)
        return WAVEPE_E_OVERFLOW;
    int64_t n_bias, n_q, n_table;
    const int64_t bias_dims[3] = {a->batch, a->m, a->n};
    const int64_t q_dims[3] = {a->batch, a->m, a->d};
    const int64_t table_dims[2] = {a->rows, a->d};
    int status = wavepe_checked_numel(3, bias_dims, elem_size, &n_bias);
    if (status == WAVEPE_OK) status = wavepe_checked_numel(3, q_dims, elem_size, &n_q);
    if (status == WAVEPE_OK) status = wavepe_checked_numel(2, table_dims, elem_size, &n_table);
    if (status != WAVEPE_OK) return status;
    if (a->clamp && a->rows == 0) return WAVEPE_E_INVALID;

    const int fwd = (kernels & WAVEPE_RELBIAS_FORWARD) != 0;
    const int gq = (kernels & WAVEPE_RELBIAS_GRAD_Q) != 0;
    const int gt = (kernels & WAVEPE_RELBIAS_GRAD_TABLE) != 0;
    if (n_q > 0 && (fwd || gt)) {
        if (a->q == NULL) return WAVEPE_E_NULL;
        if ((status = check_reach(a->batch, a->m, a->d, a->q_stride_g, a->q_stride_m, elem_size))) return status;
    }
    if (n_table > 0 && (fwd || gq) && a->table == NULL) return WAVEPE_E_NULL;
    if (n_bias > 0 && fwd) {
        if (a->bias == NULL) return WAVEPE_E_NULL;
        if ((status = check_reach(a->batch, a->m, a->n, a->bias_stride_g, a->bias_stride_m, elem_size)))
            return status;
    }
    if (n_bias > 0 && (gq || gt)) {
        if (a->grad == NULL) return WAVEPE_E_NULL;
        if ((status = check_reach(a->batch, a->m, a->n, a->grad_stride_g, a->grad_stride_m, elem_size)))
            return status;
    }
    if (n_q > 0 && gq) {
        if (a->dq == NULL) return WAVEPE_E_NULL;
        if ((status = check_reach(a->batch, a->m, a->d, a->dq_stride_g, a->dq_stride_m, elem_size))) return status;
    }
    if (n_table > 0 && gt && a->dtable == NULL) return WAVEPE_E_NULL;
    return WAVEPE_OK;
}

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

#define RELBIAS_SCALAR(T, SUFFIX)                                                                \
    void wavepe_relbias_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end) { \
        const T *table = (const T *)a->table;                                                    \
        for (int64_t row = begin; row < end; ++row) {                                            \
            const int64_t g = row / a->m, m = row % a->m, p = a->q_offset + m;                   \
            const T *q = (const T *)a->q + g * a->q_stride_g + m * a->q_stride_m;                \
            T *out = (T *)a->bias + g * a->bias_stride_g + m * a->bias_stride_m;                 \
            for (int64_t n = 0; n < a->n; ++n) {                                                 \
                const int64_t t = table_row(a, p, n);                                            \
                T acc = 0;                                                                       \
                if (t >= 0)                                                                      \
                    for (int64_t j = 0; j < a->d; ++j) acc += q[j] * table[t * a->d + j];        \
                out[n] = acc;                                                                    \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    void wavepe_relbias_grad_q_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin,    \
                                                 int64_t end) {                                  \
        const T *table = (const T *)a->table;                                                    \
        for (int64_t row = begin; row < end; ++row) {                                            \
            const int64_t g = row / a->m, m = row % a->m, p = a->q_offset + m;                   \
            const T *grad = (const T *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;    \
            T *dq = (T *)a->dq + g * a->dq_stride_g + m * a->dq_stride_m;                        \
            for (int64_t j = 0; j < a->d; ++j) dq[j] = 0;                                        \
            for (int64_t n = 0; n < a->n; ++n) {                                                 \
                const int64_t t = table_row(a, p, n);                                            \
                if (t < 0) continue;                                                             \
                for (int64_t j = 0; j < a->d; ++j) dq[j] += grad[n] * table[t * a->d + j];       \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    void wavepe_relbias_grad_table_##SUFFIX##_scalar(const wavepe_relbias_args *a, int64_t begin, \
                                                     int64_t end) {                              \
        T *dtable = (T *)a->dtable;                                                              \
        for (int64_t t = begin; t < end; ++t) {                                                  \
            T *dt = dtable + t * a->d;                                                           \
            for (int64_t j = 0; j < a->d; ++j) dt[j] = 0;                                        \
            for (int64_t g = 0; g < a->batch; ++g)                                               \
                for (int64_t m = 0; m < a->m; ++m) {                                             \
                    const int64_t p = a->q_offset + m;                                           \
                    const T *grad = (const T *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m; \
                    const T *q = (const T *)a->q + g * a->q_stride_g + m * a->q_stride_m;        \
                    /* the keys whose lookup lands on row t: the one at distance r_lo + t, */    \
                    /* plus, clamped, every key beyond the table's edge at t = 0 / rows-1 */     \
                    const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, p);           \
                    const int64_t n_exact = p - a->r_lo - t;                                     \
                    T sum = 0;                                                                   \
                    if (n_exact >= s.n_tab_begin && n_exact < s.n_tab_end) sum += grad[n_exact]; \
                    if (a->clamp && t == 0)                                                      \
                        for (int64_t n = s.n_tab_end; n < s.n_zero_begin; ++n) sum += grad[n];   \
                    if (a->clamp && t == a->rows - 1)                                            \
                        for (int64_t n = 0; n < s.n_tab_begin; ++n) sum += grad[n];              \
                    for (int64_t j = 0; j < a->d; ++j) dt[j] += sum * q[j];                      \
                }                                                                                \
        }                                                                                        \
    }

RELBIAS_SCALAR(float, f32)
RELBIAS_SCALAR(double, f64)

/* ---- dispatch --------------------------------------------------------------
 * The vector variants need the workspace prepared for the same ISA; without
 * one (or on a build without them) the scalar reference runs.  Every kernel
 * runs in the kernels' floating-point environment (fpenv.h). */

#if defined(__x86_64__) || defined(_M_X64)
#define RELBIAS_PICK(isa, has_ws, name, args)                                                    \
    do {                                                                                         \
        const wavepe_fpenv env_ = wavepe_fpenv_enter();                                          \
        if ((isa) == WAVEPE_ISA_AVX512 && (has_ws)) name##_avx512 args;                          \
        else if ((isa) == WAVEPE_ISA_AVX2 && (has_ws)) name##_avx2 args;                         \
        else name##_scalar args;                                                                 \
        wavepe_fpenv_leave(env_);                                                                \
    } while (0)
#define RELBIAS_WS(isa, name, args, none)                                                        \
    ((isa) == WAVEPE_ISA_AVX512 ? name##_avx512##args : (isa) == WAVEPE_ISA_AVX2 ? name##_avx2##args : (none))
#else
#define RELBIAS_PICK(isa, has_ws, name, args)                                                    \
    do {                                                                                         \
        const wavepe_fpenv env_ = wavepe_fpenv_enter();                                          \
        (void)(isa);                                                                             \
        name##_scalar args;                                                                      \
        wavepe_fpenv_leave(env_);                                                                \
    } while (0)
#define RELBIAS_WS(isa, name, args, none) ((void)(isa), (none))
#endif

#define RELBIAS_DISPATCH(SUFFIX)                                                                 \
    int64_t wavepe_relbias_##SUFFIX##_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, \
                                                      unsigned kernels) {                        \
        (void)a;                                                                                 \
        (void)kernels;                                                                           \
        return RELBIAS_WS(isa, wavepe_relbias_##SUFFIX, _workspace_bytes(a, kernels), (int64_t)0); \
    }                                                                                            \
    int64_t wavepe_relbias_##SUFFIX##_chunks(wavepe_isa isa, const wavepe_relbias_args *a) {     \
        (void)a;                                                                                 \
        return RELBIAS_WS(isa, wavepe_relbias_##SUFFIX, _chunks(a), (int64_t)0);                 \
    }                                                                                            \
    void wavepe_relbias_##SUFFIX##_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels, \
                                           int64_t begin, int64_t end) {                         \
        (void)a, (void)kernels, (void)begin, (void)end;                                          \
        if (a->workspace == NULL) return;                                                        \
        RELBIAS_WS(isa, wavepe_relbias_##SUFFIX, _prepare(a, kernels, begin, end), (void)0);     \
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
