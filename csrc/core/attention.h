/* attention.h: fused attention with a position bias, flash-style (DESIGN.md §2).
 *
 *   s[m, n] = scale * (q_m . k_n + q_m . T[r])     relative table (wavelet, learned)
 *   s[m, n] = scale * q_m . k_n - slope_h * |r|    ALiBi
 *   s[m, n] = scale * q_m . k_n                    none (RoPE'd q/k, NoPE)
 *   out_m   = sum_n softmax_n(s[m, :]) v_n,        lse_m = log sum_n exp s[m, n]
 *
 * with r = pos_q(m) - n, pos_q(m) = q_offset + m, keys at 0 .. N-1.  Masked
 * (never computed): causal keys n > pos_q(m), and keys whose key_padding_mask
 * byte is nonzero.  A query whose every key is masked gets out = 0 and
 * lse = -inf.  T covers distances [r_lo, r_lo + R): outside, a row is zero
 * (clamp = 0, the wavelet case) or the nearest edge row (clamp = 1, Shaw et
 * al.'s clipped learned table).
 *
 * Nothing of size M x N is ever allocated: the forward keeps one tile of
 * scores per thread and saves the log-sum-exp; the backward recomputes the
 * tiles from it (FlashAttention-2).
 *
 * Shapes: q (B, H, M, d); k, v (B, Hkv, N, d) with H a multiple of Hkv
 * (query head h reads kv head h / (H / Hkv)); out, dout (B, H, M, d);
 * lse (B, H, M).  Strides are in elements for (batch, head, row); the last
 * dimension is contiguous.  dq, dk, dv are dense with the shapes of q, k, v;
 * dtable (R, d) dense; dslopes (H,).
 *
 * Use: build a plan (validates, packs the table, allocates the shared
 * buffers), run its phases over their unit ranges -- from any number of
 * threads, each unit exactly once, in any order; results do not depend on
 * the split -- then free it.
 *
 *   forward:   wavepe_attention_fwd_plan   -> phase 0 units, phase 1 units
 *   backward:  wavepe_attention_bwd_plan   -> phase 0 units, phase 1 units
 *
 * Phase 1 must start after every unit of phase 0 finished.  A phase whose
 * unit count is 0 is skipped.  Element type (float32 / float64) is chosen at
 * plan creation; the isa argument picks the scalar reference or the vector
 * kernels (which fall back to scalar on non-x86 builds).
 */
#ifndef WAVEPE_ATTENTION_H
#define WAVEPE_ATTENTION_H

#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wavepe_attention_args {
    int64_t batch, heads, kv_heads; /* B, H, Hkv */
    int64_t m, n, d;                /* queries, keys, head dim */
    int64_t q_offset;               /* position of query 0 */
    int causal;
    double scale;                   /* > 0, finite */

    const void *q, *k, *v;
    int64_t q_strides[3], k_strides[3], v_strides[3]; /* batch, head, row (elements) */

    /* position bias: at most one of table / slopes */
    const void *table;        /* (table_rows, d) dense, or NULL */
    int64_t table_rows, r_lo;
    int clamp;
    const void *slopes;       /* (H,) ALiBi slopes, or NULL */
    const uint8_t *key_padding_mask; /* (B, N), nonzero = ignore key; or NULL */
    int64_t kpm_stride;              /* elements between batches */

    /* forward: outputs.  backward: inputs (the forward's results). */
    void *out;
    int64_t out_strides[3];
    void *lse; /* (B, H, M) dense */

    /* backward only */
    const void *dout;
    int64_t dout_strides[3];
    const void *dlse;         /* (B, H, M) dense gradient of lse, or NULL (zero) */
    void *dq, *dk, *dv;       /* dense; fully written by the backward */
    void *dtable;             /* (table_rows, d) dense, or NULL: no table gradient */
    void *dslopes;            /* (H,), or NULL: no slope gradient */
} wavepe_attention_args;

typedef struct wavepe_attention_plan wavepe_attention_plan;

/* Sizes, strides, pointers and values sane (for the forward when backward = 0,
 * else for the backward): WAVEPE_OK or an error status. */
int wavepe_attention_validate(const wavepe_attention_args *a, int backward);

/* Build a plan over *a (copied; the pointed-to data must outlive the plan).
 * double_precision selects float64 data.  Returns a status; *plan is NULL on
 * error. */
int wavepe_attention_fwd_plan(wavepe_isa isa, int double_precision, const wavepe_attention_args *a,
                              wavepe_attention_plan **plan);
int wavepe_attention_bwd_plan(wavepe_isa isa, int double_precision, const wavepe_attention_args *a,
                              wavepe_attention_plan **plan);

/* Number of independent units of a phase (0 or 1). */
int64_t wavepe_attention_units(const wavepe_attention_plan *plan, int phase);

/* Run units [begin, end) of a phase; returns a status (WAVEPE_E_NOMEM when
 * per-thread scratch cannot be allocated).  Thread-safe across disjoint
 * ranges. */
int wavepe_attention_run(wavepe_attention_plan *plan, int phase, int64_t begin, int64_t end);

/* Suggested minimum units per task for a thread pool (coarse work first). */
int64_t wavepe_attention_grain(const wavepe_attention_plan *plan, int phase);

void wavepe_attention_plan_free(wavepe_attention_plan *plan);

/* Which forward algorithm a plan uses: 0 scalar rows, 1 tiled, 2 split-N
 * decoding (for tests and benchmarks). */
int wavepe_attention_plan_kind(const wavepe_attention_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
