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
 * Row spaces (callers own threading):
 *   forward and dq:  the flattened (G * M) query rows, row = g * M + m;
 *   dT:              the table rows t = 0 .. rows-1;
 *   prepare:         the table's chunks, 0 .. wavepe_relbias_chunks().
 *
 * Layout: q, bias / grad and dq have arbitrary element strides for g and m;
 * their last dimension (d or N) is contiguous.  The table and dT are dense
 * (rows, d).  Positions and distances (q_offset, r_lo, M, N, rows) must stay
 * within +-2^61 so that every derived position fits in int64.
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
 * NULL workspace where it needs one runs the scalar reference instead.
 */
#ifndef WAVEPE_RELBIAS_H
#define WAVEPE_RELBIAS_H

#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wavepe_relbias_args {
    int64_t batch, m, n, d;     /* G, M, N, head dim d */
    int64_t rows, r_lo;         /* table (rows, d) holds distances r_lo .. r_lo + rows - 1 */
    int64_t q_offset;           /* position of query row 0 (keys sit at 0 .. N-1) */
    int causal, clamp;

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

    void *workspace;            /* see "Workspace" above; NULL for the scalar ISA */
} wavepe_relbias_args;

/* Which kernels an operation runs (bit flags): they decide what validation
 * requires and what the workspace must hold. */
enum {
    WAVEPE_RELBIAS_FORWARD = 1,
    WAVEPE_RELBIAS_GRAD_Q = 2,
    WAVEPE_RELBIAS_GRAD_TABLE = 4
};

/* Sizes, strides and pointers sane for the given kernels: WAVEPE_OK or an
 * error (negative size, overflowing products or offsets, positions beyond
 * +-2^61, clamp with an empty table, NULL data where elements exist). */
int wavepe_relbias_validate(const wavepe_relbias_args *a, unsigned kernels, int64_t elem_size);

/* Scratch bytes the kernels of `kernels` need on `isa` (0: none), or a
 * negative wavepe_status when the size overflows. */
int64_t wavepe_relbias_f32_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f64_workspace_bytes(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels);

/* Number of table chunks the prepare step runs over (0 when nothing to do). */
int64_t wavepe_relbias_f32_chunks(wavepe_isa isa, const wavepe_relbias_args *a);
int64_t wavepe_relbias_f64_chunks(wavepe_isa isa, const wavepe_relbias_args *a);

/* Fill the workspace for chunks [begin, end) (only chunks this call reads). */
void wavepe_relbias_f32_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);
void wavepe_relbias_f64_prepare(wavepe_isa isa, const wavepe_relbias_args *a, unsigned kernels,
                                int64_t begin, int64_t end);

/* Forward: bias rows [begin, end) of the (G * M) row space. */
void wavepe_relbias_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
/* Backward, dq rows [begin, end) of the (G * M) row space. */
void wavepe_relbias_grad_q_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
/* Backward, dT rows [begin, end) of the table. */
void wavepe_relbias_grad_table_f32(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f64(wavepe_isa isa, const wavepe_relbias_args *a, int64_t begin, int64_t end);

/* The variants behind the dispatch (the vector ones exist on x86-64 only). */
void wavepe_relbias_f32_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f64_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f32_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f64_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f32_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f64_scalar(const wavepe_relbias_args *a, int64_t begin, int64_t end);

int64_t wavepe_relbias_f32_avx2_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f64_avx2_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f32_avx2_chunks(const wavepe_relbias_args *a);
int64_t wavepe_relbias_f64_avx2_chunks(const wavepe_relbias_args *a);
void wavepe_relbias_f32_avx2_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, int64_t end);
void wavepe_relbias_f64_avx2_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, int64_t end);
void wavepe_relbias_f32_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f64_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f32_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f64_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f32_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f64_avx2(const wavepe_relbias_args *a, int64_t begin, int64_t end);
int64_t wavepe_relbias_f32_avx512_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f64_avx512_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels);
int64_t wavepe_relbias_f32_avx512_chunks(const wavepe_relbias_args *a);
int64_t wavepe_relbias_f64_avx512_chunks(const wavepe_relbias_args *a);
void wavepe_relbias_f32_avx512_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, int64_t end);
void wavepe_relbias_f64_avx512_prepare(const wavepe_relbias_args *a, unsigned kernels, int64_t begin, int64_t end);
void wavepe_relbias_f32_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_f64_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f32_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_q_f64_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f32_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);
void wavepe_relbias_grad_table_f64_avx512(const wavepe_relbias_args *a, int64_t begin, int64_t end);

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
