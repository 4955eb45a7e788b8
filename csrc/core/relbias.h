/* relbias.h: the relative-table position bias and its gradients.
 *
 * Forward, for G query matrices of M rows (g = 0 .. G-1, m = 0 .. M-1) and
 * keys n = 0 .. N-1:
 *
 *     bias[g, m, n] = sum_j q[g, m, j] * T[r - r_lo, j],   r = pos_q(m) - n,
 *     pos_q(m) = q_offset + m,
 *
 * with T a (rows, d) table covering the distances [r_lo, r_lo + rows).
 *   causal: entries with n > pos_q(m) (r < 0) are written 0 and never computed.
 *   clamp = 0: distances outside the table contribute 0 and are skipped (the
 *              wavelet case: the table is trimmed to the wavelets' support).
 *   clamp = 1: out-of-range distances use the edge rows T[0] / T[rows-1]
 *              (Shaw et al.'s clipped relative positions); needs rows >= 1.
 *
 * Backward, given grad = dL/dbias (G, M, N):
 *     dq[g, m, :] = sum_n grad[g, m, n] * T[r(m, n)]         (over query rows)
 *     dT[t, :]    = sum_{(g,m,n): r(m,n) -> t} grad[g,m,n] * q[g, m, :]
 * where "r -> t" is the table row the forward used (clamped distances go to
 * the edge rows; causal-masked entries take no part).  dT is computed over
 * ranges of table rows, so threads own disjoint rows: no atomics, and the
 * result does not depend on how the rows are split.
 *
 * This header is the family's contract for every device: the parameters
 * (wavepe_relbias_args, filled once by a binding from its tensors) and their
 * rules (wavepe_relbias_validate, which the CPU plan, the CUDA launchers, the
 * torch binding and the NumPy gufunc all call).  Callers run an operation as
 * a plan (validate, size the units, own the workspace) -> units -> run, like
 * attention.h; the kernels' row spaces, blocking and workspace protocol below
 * are the plan's business, not the callers'.
 *
 * Row spaces of the kernels (the plan owns threading units over them):
 *   forward and dq:  the flattened (G * M) query rows, row = g * M + m;
 *   dT:              the table rows t = 0 .. rows-1;
 *   prepare:         the table's chunks, 0 .. wavepe_relbias_chunks().
 *
 * Layout: q, bias / grad and dq have arbitrary element strides for g and m;
 * their last dimension (d or N) is contiguous.  The table and dT are dense
 * (rows, d).  The forward also takes an outer batch level (`outer` groups of
 * G matrices, strides q_stride_o / bias_stride_o), so that a (B, L, H, d)
 * .transpose(1, 2) view of q is read in place; the kernels see one group at a
 * time.  Positions and distances (q_offset, r_lo, M, N, rows) must stay
 * within +-2^60 (WAVEPE_POSITION_LIMIT) so that every derived position fits
 * in int64.
 *
 * Support skipping (vector kernels): whole runs of table rows that are all zero cost no
 * multiplies, and within a chunk of distances only the columns between the
 * first and last nonzero one are reduced (the default wavelet grid is nonzero
 * only in its large-scale columns at large |r|).  Skipping a zero term
 * changes nothing for finite inputs; a query row (forward) or gradient row
 * (dq) holding NaN or inf is recomputed by the scalar reference, which
 * multiplies every in-table term, so every ISA gives the formula's answer:
 * NaN / inf reach every distance inside the table, never one outside it.
 *
 * Workspace: the vector kernels read a per-operation scratch (the table packed
 * transposed into NR-distance panels, and each chunk's nonzero column range):
 *   1. a.workspace = buffer of wavepe_relbias_<dt>_workspace_bytes(isa, &a, kernels);
 *   2. wavepe_relbias_<dt>_prepare(isa, &a, kernels, c0, c1) over [0, chunks);
 *   3. the range kernels.
 * With 0 bytes (the scalar ISA) steps 1-2 are no-ops.  A kernel that finds a
 * NULL workspace where it needs one runs the scalar reference instead.  The
 * plan (wavepe_relbias_plan_create) runs this protocol for its callers.
 */
#ifndef WAVEPE_RELBIAS_H
#define WAVEPE_RELBIAS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "isa.h"
#include "settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The settings (settings.h), in the one argument order of every layer:
 *   r_lo      the distance the table's row 0 holds: rows hold r_lo .. r_lo + rows - 1
 *   q_offset  position of query row 0 (keys sit at 0 .. N-1)
 *   causal    zero (and skip) the entries whose key is after the query
 *   clamp     distances outside the table read its edge rows instead of 0 (needs rows >= 1) */
#define WAVEPE_RELBIAS_SETTINGS(X) \
    X(INT, r_lo, 0)                \
    X(INT, q_offset, 0)            \
    X(BOOL, causal, 0)             \
    X(BOOL, clamp, 0)

typedef struct wavepe_relbias_args {
    int dtype;                  /* wavepe_dtype of q, table, bias, grad, dq, dtable (F32 / F64 / BF16 / F16) */
    int64_t batch, m, n, d;     /* G, M, N, head dim d */
    int64_t rows;               /* table rows */
    WAVEPE_RELBIAS_SETTINGS(WAVEPE_SETTING_FIELD)

    const void *q;              /* (G, M, d) */
    int64_t q_stride_g, q_stride_m;
    const void *table;          /* (rows, d) dense */

    void *bias;                 /* forward output (G, M, N) */
    int64_t bias_stride_g, bias_stride_m;

    const void *grad;           /* backward input dL/dbias (G, M, N) */
    int64_t grad_stride_g, grad_stride_m;
    void *dq;                   /* backward output (G, M, d) */
    int64_t dq_stride_g, dq_stride_m;
    void *dtable;               /* backward output (rows, d) dense */

    /* forward only: `outer` groups of the G matrices above (0 reads as 1),
     * group o at q + o * q_stride_o and bias + o * bias_stride_o */
    int64_t outer, q_stride_o, bias_stride_o;

    void *workspace;            /* see "Workspace" above; NULL for the scalar ISA; set by the plan */
} wavepe_relbias_args;

/* Every field 0 / NULL but the settings, which take their defaults. */
static inline wavepe_relbias_args wavepe_relbias_args_defaults(void) {
    wavepe_relbias_args a;
    memset(&a, 0, sizeof a);
    WAVEPE_RELBIAS_SETTINGS(WAVEPE_SETTING_DEFAULT)
    return a;
}

/* Which kernels an operation runs (bit flags): they decide what validation
 * requires and what the workspace must hold. */
enum {
    WAVEPE_RELBIAS_FORWARD = 1,
    WAVEPE_RELBIAS_GRAD_Q = 2,
    WAVEPE_RELBIAS_GRAD_TABLE = 4
};

/* ---- the rules ------------------------------------------------------------------
 * Sizes, positions, strides and pointers sane for the given kernels:
 * WAVEPE_OK, or a status with *err (may be NULL) naming the argument and its
 * value: a negative size; products, strides or positions beyond what int64 /
 * ptrdiff_t address or beyond +-2^60; clamp with an empty table; an outer
 * batch level for the backward; NULL data where the operation reads or writes
 * elements (checked last: empty problems need no data at all). */
static inline int wavepe_relbias_validate(const wavepe_relbias_args *a, unsigned kernels, wavepe_error *err) {
    const int64_t elem = wavepe_dtype_size(a->dtype);
    if (elem == 0) return wavepe_fail(err, WAVEPE_E_INVALID, "dtype=%d is not an element type", a->dtype);
    if (kernels & ~7u) return wavepe_fail(err, WAVEPE_E_INVALID, "kernels=%u has unknown bits", kernels);
    const int64_t sizes[6] = {a->batch, a->m, a->n, a->d, a->rows, a->outer};
    static const char *const names[6] = {"batch", "q_len", "k_len", "head_dim", "table rows", "outer batch"};
    for (int i = 0; i < 6; ++i)
        if (sizes[i] < 0)
            return wavepe_fail(err, WAVEPE_E_NEGATIVE_SIZE, "%s must be >= 0, got %lld", names[i], (long long)sizes[i]);
    int status;
    if ((status = wavepe_check_position(err, "q_offset", a->q_offset)) ||
        (status = wavepe_check_position(err, "r_lo", a->r_lo)) || (status = wavepe_check_position(err, "q_len", a->m)) ||
        (status = wavepe_check_position(err, "k_len", a->n)) ||
        (status = wavepe_check_position(err, "table rows", a->rows)))
        return status;
    if (a->clamp && a->rows == 0)
        return wavepe_fail(err, WAVEPE_E_INVALID, "clamp=True needs a table with at least one row, got 0 rows");
    const int backward = (kernels & (WAVEPE_RELBIAS_GRAD_Q | WAVEPE_RELBIAS_GRAD_TABLE)) != 0;
    const int64_t outer = a->outer > 1 ? a->outer : 1;
    if (outer > 1 && backward)
        return wavepe_fail(err, WAVEPE_E_INVALID, "outer batch=%lld: the backward takes one batch level",
                           (long long)outer);
    const int64_t bias_dims[4] = {outer, a->batch, a->m, a->n};
    const int64_t table_dims[2] = {a->rows, a->d};
    int64_t n_bias, n_q, n_table;
    if ((status = wavepe_check_numel(err, "the bias (outer, batch, M, k_len)", 4, bias_dims, elem)) ||
        (status = wavepe_check_numel(err, "table (rows, head_dim)", 2, table_dims, elem)))
        return status;
    const int64_t q_dims[4] = {outer, a->batch, a->m, a->d};
    if ((status = wavepe_check_numel(err, "q (outer, batch, M, head_dim)", 4, q_dims, elem))) return status;
    wavepe_checked_numel(4, bias_dims, elem, &n_bias);
    wavepe_checked_numel(4, q_dims, elem, &n_q);
    wavepe_checked_numel(2, table_dims, elem, &n_table);

    const int fwd = (kernels & WAVEPE_RELBIAS_FORWARD) != 0;
    const int gq = (kernels & WAVEPE_RELBIAS_GRAD_Q) != 0;
    const int gt = (kernels & WAVEPE_RELBIAS_GRAD_TABLE) != 0;
    /* a pointer is needed where the operation reads or writes elements through it: an output with
     * elements is written (zeros where nothing contributes); an input is read only for a term with
     * elements on every side (bias entries x head dims) */
    const int terms = n_bias > 0 && a->d > 0;
    const int need_q = terms && ((fwd && n_table > 0) || (gt && n_table > 0));
    const int need_table = terms && n_table > 0 && ((fwd && n_q > 0) || (gq && n_q > 0));
    const int need_grad = terms && ((gq && n_table > 0) || (gt && n_q > 0));
    const int64_t q_st[4] = {a->q_stride_o, a->q_stride_g, a->q_stride_m, 1};
    const int64_t b_st[4] = {a->bias_stride_o, a->bias_stride_g, a->bias_stride_m, 1};
    if (need_q) {
        if (a->q == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "q is NULL");
        if ((status = wavepe_check_view(err, "q", 4, q_dims, q_st, elem))) return status;
    }
    if (need_table && a->table == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "table is NULL");
    if (n_bias > 0 && fwd) {
        if (a->bias == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "bias is NULL");
        if ((status = wavepe_check_view(err, "bias", 4, bias_dims, b_st, elem))) return status;
    }
    const int64_t g_dims[3] = {a->batch, a->m, a->n}, g_st[3] = {a->grad_stride_g, a->grad_stride_m, 1};
    if (need_grad) {
        if (a->grad == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "grad is NULL");
        if ((status = wavepe_check_view(err, "grad", 3, g_dims, g_st, elem))) return status;
    }
    const int64_t dq_dims[3] = {a->batch, a->m, a->d}, dq_st[3] = {a->dq_stride_g, a->dq_stride_m, 1};
    if (n_q > 0 && gq) {
        if (a->dq == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "dq is NULL");
        if ((status = wavepe_check_view(err, "dq", 3, dq_dims, dq_st, elem))) return status;
    }
    if (n_table > 0 && gt && a->dtable == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "dtable is NULL");
    return WAVEPE_OK;
}

/* ---- plans: what callers use ----------------------------------------------------
 * A plan validates *a (copied: the data must outlive the plan), picks the
 * kernels for `isa` (float32 / float64 / bfloat16 / float16 from a->dtype; the half
 * types are read and written as they are, summed in float32, each output
 * element rounded once), allocates and owns
 * the workspace, and splits the work into units sized for `threads` threads
 * (a hint: results never depend on it).  Run phase 0 (preparing the
 * workspace), then phase 1 (the kernels), each unit exactly once, from any
 * number of threads, in any order; a phase with 0 units is skipped.
 * Returns a status (*plan NULL on error; *err, may be NULL, says why). */
typedef struct wavepe_relbias_plan wavepe_relbias_plan;

int wavepe_relbias_plan_create(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels, int64_t threads,
                               wavepe_relbias_plan **plan, wavepe_error *err);
int64_t wavepe_relbias_units(const wavepe_relbias_plan *plan, int phase);
/* Suggested minimum units per task of a thread pool. */
int64_t wavepe_relbias_grain(const wavepe_relbias_plan *plan, int phase);
/* Run units [begin, end) of a phase; thread-safe across disjoint ranges. */
int wavepe_relbias_run(wavepe_relbias_plan *plan, int phase, int64_t begin, int64_t end);
void wavepe_relbias_plan_free(wavepe_relbias_plan *plan);

/* ---- the kernels behind the plan ------------------------------------------------ */

/* Scratch bytes the kernels of `kernels` need on `isa` (0: none), or a
 * negative wavepe_status when the size overflows. */
int64_t wavepe_relbias_f32_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f64_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_bf16_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f16_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);

/* Number of table chunks the prepare step runs over (0 when nothing to do). */
int64_t wavepe_relbias_f32_chunks(wavepe_isa isa, const wavepe_relbias_args *a);
int64_t wavepe_relbias_f64_chunks(wavepe_isa isa, const wavepe_relbias_args *a);
int64_t wavepe_relbias_bf16_chunks(wavepe_isa isa, const wavepe_relbias_args *a);
int64_t wavepe_relbias_f16_chunks(wavepe_isa isa, const wavepe_relbias_args *a);

/* Fill the workspace for chunks [begin, end) (only chunks this call reads). */
void wavepe_relbias_f32_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);
void wavepe_relbias_f64_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);
void wavepe_relbias_bf16_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);
void wavepe_relbias_f16_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);

/* Forward: bias rows [begin, end) of the (G * M) row space. */
void wavepe_relbias_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_bf16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
/* Backward, dq rows [begin, end) of the (G * M) row space. */
void wavepe_relbias_grad_q_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_bf16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
/* Backward, dT rows [begin, end) of the table. */
void wavepe_relbias_grad_table_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_bf16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f16(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);

/* The variants behind the dispatch: every kernel_isa of isa_table.h
 * (avx512bf16 and amx run avx512's) has the kernels, the vector ones (which
 * exist in builds for their architecture only) also their workspace protocol. */
#define WAVEPE_RELBIAS_KERNELS_(ID, name, arch, l32, l64, bf16, blocks, kernel_isa, ...) \
    void wavepe_relbias_f32_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_f64_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_bf16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_f16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_q_f32_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_q_f64_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_q_bf16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_q_f16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_table_f32_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_table_f64_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_table_bf16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    void wavepe_relbias_grad_table_f16_##kernel_isa(const wavepe_relbias_args *a, int64_t begin, int64_t end); \
    int64_t wavepe_relbias_f32_##kernel_isa##_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels); \
    int64_t wavepe_relbias_f64_##kernel_isa##_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels); \
    int64_t wavepe_relbias_bf16_##kernel_isa##_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels); \
    int64_t wavepe_relbias_f16_##kernel_isa##_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels); \
    int64_t wavepe_relbias_f32_##kernel_isa##_chunks(const wavepe_relbias_args *a); \
    int64_t wavepe_relbias_f64_##kernel_isa##_chunks(const wavepe_relbias_args *a); \
    int64_t wavepe_relbias_bf16_##kernel_isa##_chunks(const wavepe_relbias_args *a); \
    int64_t wavepe_relbias_f16_##kernel_isa##_chunks(const wavepe_relbias_args *a); \
    void wavepe_relbias_f32_##kernel_isa##_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, \
                                             int64_t end); \
    void wavepe_relbias_f64_##kernel_isa##_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, \
                                             int64_t end); \
    void wavepe_relbias_bf16_##kernel_isa##_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, \
                                             int64_t end); \
    void wavepe_relbias_f16_##kernel_isa##_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, \
                                             int64_t end);
WAVEPE_ISA_TABLE(WAVEPE_RELBIAS_KERNELS_, _)
#undef WAVEPE_RELBIAS_KERNELS_

/* ---- geometry shared by every variant --------------------------------------
 * For a query at position p, the keys split into runs by what their distance
 * r = p - n reads.  Keys with n < n_hi_end see r > r_lo + rows - 1 ("beyond
 * the table's far edge"), keys in [n_tab_begin, n_tab_end) read a table row,
 * keys in [n_tab_end, n_lo_end) see r < r_lo, and keys from n_zero_begin on
 * are causal-masked.  All bounds are clipped to [0, N] and ordered:
 *   0 <= n_hi_end = n_tab_begin <= n_tab_end <= n_lo_end = n_zero_begin <= N. */
typedef struct wavepe_relbias_row_split {
    int64_t n_tab_begin, n_tab_end, n_zero_begin;
} wavepe_relbias_row_split;

static inline int64_t wavepe_relbias_clip_(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline wavepe_relbias_row_split wavepe_relbias_split_row(const wavepe_relbias_args *a, int64_t p) {
    wavepe_relbias_row_split s;
    /* causal: keys n <= p only */
    const int64_t n_visible = a->causal ? wavepe_relbias_clip_(p + 1, 0, a->n) : a->n;
    /* r <= r_lo + rows - 1  <=>  n >= p - r_lo - rows + 1;   r >= r_lo  <=>  n <= p - r_lo */
    s.n_tab_begin = wavepe_relbias_clip_(p - a->r_lo - a->rows + 1, 0, n_visible);
    s.n_tab_end = wavepe_relbias_clip_(p - a->r_lo + 1, s.n_tab_begin, n_visible);
    s.n_zero_begin = n_visible;
    return s;
}

#ifdef __cplusplus
}
#endif
#endif
