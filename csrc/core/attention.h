/* attention.h: fused attention with a position bias, flash-style (one pass over
 * the keys with an online softmax; no M x N matrix is ever stored).
 *
 *   s[m, n] = scale * (q_m . k_n + q_m . T[r])     relative table (wavelet, learned)
 *   s[m, n] = scale * q_m . k_n - slope_h * |r|    ALiBi
 *   s[m, n] = scale * q_m . k_n                    none (RoPE'd q/k, NoPE)
 *   s[m, n] = softcap * tanh(s[m, n] / softcap)     with a logit soft-cap (Gemma 2), any of the above
 *   out_m   = sum_n softmax_n(s[m, :]) v_n,        lse_m = log sum_n exp s[m, n]
 *
 * with r = pos_q(m) - n, pos_q(m) = q_offset + m, keys at 0 .. N-1.  Masked
 * (never computed): causal keys n > pos_q(m), keys outside a sliding window
 * (window > 0: |r| >= window, Mistral's rule pos_q - window < n <= pos_q
 * when causal), keys whose key_padding_mask byte is nonzero, and -- packed
 * sequences -- keys outside the query's document (wavepe_attention_keys).  A query whose every key is masked gets
 * out = 0 and lse = -inf; one whose visible keys all score -inf gets NaN
 * (0/0), or out = 0 and lse = +inf with mark_neg_inf.
 *
 * Packed sequences (cu_seqlens): a batch row holds several documents one
 * after the other, non-decreasing boundaries cu[0] <= cu[1] <= ... <=
 * cu[cu_len-1] in the keys' coordinate (flash-attn's cu_seqlens are the case
 * cu[0] = 0, cu[cu_len-1] = N; empty documents allowed).  The query at
 * position pos_q(m) belongs to the document [cu[i], cu[i+1]) that holds it
 * and sees only that document's keys that exist (0 <= n < N); a query outside
 * [cu[0], cu[cu_len-1]) sees none.  Boundaries past the keys describe
 * documents that continue beyond them: a tile of a longer packed row
 * (wavepe.distributed) passes the row's boundaries shifted by its first key.
 * Distances inside a document are the packed row's, so the bias is that of
 * each document alone.  T covers distances [r_lo, r_lo + R): outside, a row is zero
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
 * This header is the family's contract for every device: the parameters
 * (wavepe_attention_args, filled once by a binding) and their rules
 * (wavepe_attention_validate, called by the CPU plans and the CUDA launchers
 * alike).  Element type: `dtype` (the CPU runs F32 / F64).  The slopes, lse,
 * dlse and dslopes travel in the accumulator type (float64 for F64, float32
 * otherwise); q, k, v, table, out and their gradients in `dtype`.
 *
 * Use on the CPU: build a plan (validates, packs the table, allocates the
 * shared buffers), run its phases over their unit ranges -- from any number
 * of threads, ranges that cover each unit once, in any order; results do not
 * depend on the split -- then free it.
 *
 *   forward:   wavepe_attention_fwd_plan   -> phase 0 units, phase 1 units
 *   backward:  wavepe_attention_bwd_plan   -> phase 0 units, phase 1 units
 *
 * Phase 1 must start after every unit of phase 0 finished.  A phase whose
 * unit count is 0 is skipped (every phase from 2 on has 0 units).  The isa
 * argument picks the scalar reference or the vector kernels (which fall back
 * to scalar on non-x86 builds).
 */
#ifndef WAVEPE_ATTENTION_H
#define WAVEPE_ATTENTION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "isa.h"
#include "settings.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define WAVEPE_HOST_DEVICE __host__ __device__
#else
#define WAVEPE_HOST_DEVICE
#endif

/* The settings (settings.h), in the one argument order of every layer:
 *   scale         multiplies q . k (and the table's term); > 0, finite
 *   q_offset      position of query 0
 *   causal        mask keys after the query
 *   r_lo, clamp   the table's first distance and its edge rule (with a table; ignored without)
 *   mark_neg_inf  forward: a row whose visible keys all score -inf gets out = 0, lse = +inf (zero
 *                 weight, for a caller that merges partial results: wavepe.distributed) instead of
 *                 NaN; 0: NaN, the formula's 0/0.  +inf arises no other way: lse = max + log(sum)
 *                 with 1 <= sum <= N, so a finite max gives a finite lse (log N is far below half an
 *                 ulp of any float that could overflow), and a +inf score makes the sum
 *                 exp(inf - inf) = NaN.  The backward takes such a row as contributing nothing (zero
 *                 dq; nothing to dk, dv, dtable, dslopes), like a row that sees no key (lse = -inf),
 *                 flag or not.
 *   window        sliding window: a query sees only the keys at distances |r| < window (causal: the
 *                 window - 1 keys before it and itself, as Mistral and Hugging Face's masks define
 *                 it); 0: no window.  0 <= window <= 2^60
 *   softcap       logit soft-cap (Gemma 2's attn_logit_softcapping): each score s, scaled and with
 *                 its bias, becomes softcap * tanh(s / softcap) before the mask and the softmax; its
 *                 gradient is multiplied by 1 - tanh^2.  0: none.  >= 0, finite */
#define WAVEPE_ATTENTION_SETTINGS(X) \
    X(REAL, scale, 1.0)              \
    X(INT, q_offset, 0)              \
    X(BOOL, causal, 0)               \
    X(INT, r_lo, 0)                  \
    X(BOOL, clamp, 0)                \
    X(BOOL, mark_neg_inf, 0)         \
    X(INT, window, 0)                \
    X(REAL, softcap, 0.0)

typedef struct wavepe_attention_args {
    int dtype;                      /* wavepe_dtype of q, k, v, table, out, dout, dq, dk, dv, dtable */
    int64_t batch, heads, kv_heads; /* B, H, Hkv */
    int64_t m, n, d;                /* queries, keys, head dim */
    WAVEPE_ATTENTION_SETTINGS(WAVEPE_SETTING_FIELD)

    const void *q, *k, *v;
    int64_t q_strides[3], k_strides[3], v_strides[3]; /* batch, head, row (elements) */

    /* position bias: at most one of table / slopes */
    const void *table;        /* (table_rows, d) dense, or NULL */
    int64_t table_rows;
    const void *slopes;       /* (H,) ALiBi slopes (accumulator type), or NULL */
    const uint8_t *key_padding_mask; /* (B, N), nonzero = ignore key; or NULL */
    int64_t kpm_stride;              /* elements between batches */
    const int32_t *cu_seqlens;       /* (B, cu_len) document boundaries per batch row, or NULL: one document */
    int64_t cu_len, cu_stride;       /* boundaries per row (>= 2), elements between batches */

    /* forward: outputs.  backward: inputs (the forward's results). */
    void *out;
    int64_t out_strides[3];
    void *lse; /* (B, H, M) dense, accumulator type */

    /* backward only */
    const void *dout;
    int64_t dout_strides[3];
    const void *dlse;         /* (B, H, M) dense gradient of lse (accumulator type), or NULL (zero) */
    void *dq, *dk, *dv;       /* dense; fully written by the backward */
    void *dtable;             /* (table_rows, d) dense, or NULL: no table gradient */
    void *dslopes;            /* (H,) accumulator type, or NULL: no slope gradient */
} wavepe_attention_args;

/* Every field 0 / NULL but the settings, which take their defaults. */
static inline wavepe_attention_args wavepe_attention_args_defaults(void) {
    wavepe_attention_args a;
    memset(&a, 0, sizeof a);
    WAVEPE_ATTENTION_SETTINGS(WAVEPE_SETTING_DEFAULT)
    return a;
}

/* ---- which keys a query sees ----------------------------------------------------
 * Keys [*lo, *hi) of batch row b for the query at position pos (= q_offset + m):
 * its document's keys (every key without cu_seqlens), cut after pos when
 * causal and to the distances |pos - n| < window with a window; *lo >= *hi: none.  Key padding is applied on top.  The one
 * definition for every device; boundaries outside [0, N] (not checked on a
 * GPU, where reading them would cost a host sync) are clamped, so a bad
 * cu_seqlens can mask wrongly but never read out of bounds. */
/* The document [*lo, *hi) of batch row b that holds position pos, in the
 * keys' coordinate and not clamped to the keys (it may extend past them);
 * *lo == *hi: pos is outside every document.  Needs cu_seqlens. */
WAVEPE_HOST_DEVICE static inline void wavepe_attention_document(const wavepe_attention_args *a, int64_t b,
                                                                int64_t pos, int64_t *lo, int64_t *hi) {
    /* the last boundary i <= cu_len - 2 with cu[i] <= pos (binary search) */
    const int32_t *cu = a->cu_seqlens + b * a->cu_stride;
    int64_t i = 0, j = a->cu_len - 2;
    while (i < j) {
        const int64_t mid = i + (j - i + 1) / 2;
        if ((int64_t)cu[mid] <= pos) i = mid;
        else j = mid - 1;
    }
    *lo = cu[i];
    *hi = cu[i + 1];
    if (pos < *lo || pos >= *hi) *hi = *lo; /* outside every document */
}

WAVEPE_HOST_DEVICE static inline void wavepe_attention_keys(const wavepe_attention_args *a, int64_t b, int64_t pos,
                                                            int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = a->n;
    if (a->cu_seqlens != NULL) {
        wavepe_attention_document(a, b, pos, &l, &h);
        l = l < 0 ? 0 : (l > a->n ? a->n : l);
        h = h < l ? l : (h > a->n ? a->n : h);
    }
    if (a->causal && pos + 1 < h) h = pos + 1 < l ? l : pos + 1;
    if (a->window > 0) { /* |pos| and window <= 2^60: no overflow */
        const int64_t first = pos - a->window + 1, end = pos + a->window;
        if (first > l) l = first > h ? h : first;
        if (!a->causal && end < h) h = end < l ? l : end;
    }
    *lo = l;
    *hi = h;
}

/* The positions of the queries that can see key n, [*lo, *hi) (before documents and padding): from n
 * (causal) and within the window.  What a kernel iterating over keys (a backward's dK, dV) bounds its
 * queries with: the inverse of wavepe_attention_keys' causal and window rules. */
WAVEPE_HOST_DEVICE static inline void wavepe_attention_queries_of_key(const wavepe_attention_args *a, int64_t n,
                                                                      int64_t *lo, int64_t *hi) {
    int64_t l = a->causal ? n : INT64_MIN, h = INT64_MAX;
    if (a->window > 0) {
        if (n - a->window + 1 > l) l = n - a->window + 1;
        h = n + a->window;
    }
    *lo = l;
    *hi = h;
}

/* ---- the rules ------------------------------------------------------------------
 * Sizes, strides, pointers and values sane, for the forward (backward = 0)
 * or the backward: WAVEPE_OK, or a status with *err (may be NULL) naming the
 * argument and its value. */
static inline int wavepe_attention_validate(const wavepe_attention_args *a, int backward, wavepe_error *err) {
    const int64_t elem = wavepe_dtype_size(a->dtype);
    if (elem == 0) return wavepe_fail(err, WAVEPE_E_INVALID, "dtype=%d is not an element type", a->dtype);
    const int64_t acc = wavepe_dtype_size(wavepe_dtype_acc(a->dtype));
    const int64_t sizes[7] = {a->batch, a->heads, a->kv_heads, a->m, a->n, a->d, a->table_rows};
    static const char *const names[7] = {"batch", "heads", "kv_heads", "q_len", "k_len", "head_dim", "table rows"};
    for (int i = 0; i < 7; ++i)
        if (sizes[i] < 0)
            return wavepe_fail(err, WAVEPE_E_NEGATIVE_SIZE, "%s must be >= 0, got %lld", names[i], (long long)sizes[i]);
    if (a->d < 1) return wavepe_fail(err, WAVEPE_E_INVALID, "head_dim must be >= 1, got %lld", (long long)a->d);
    if (a->kv_heads < 1 || a->heads % a->kv_heads != 0)
        return wavepe_fail(err, WAVEPE_E_INVALID, "q's heads H=%lld must be a multiple of k's heads H_kv=%lld",
                           (long long)a->heads, (long long)a->kv_heads);
    if (!(a->scale > 0.0) || isinf(a->scale))
        return wavepe_fail(err, WAVEPE_E_INVALID, "scale must be finite and > 0, got %g", a->scale);
    if (!(a->softcap >= 0.0) || isinf(a->softcap))
        return wavepe_fail(err, WAVEPE_E_INVALID, "softcap must be finite and >= 0 (0: none), got %g", a->softcap);
    if (a->window < 0 || a->window > WAVEPE_POSITION_LIMIT)
        return wavepe_fail(err, WAVEPE_E_INVALID, "window must be in [0, 2^60] (0: none), got %lld",
                           (long long)a->window);
    if (a->table != NULL && a->slopes != NULL)
        return wavepe_fail(err, WAVEPE_E_INVALID, "give a table or ALiBi slopes, not both");
    if (a->table != NULL && a->clamp && a->table_rows == 0)
        return wavepe_fail(err, WAVEPE_E_INVALID, "clamp=True needs a table with at least one row, got 0 rows");
    int status;
    if ((status = wavepe_check_position(err, "q_offset", a->q_offset)) ||
        (status = wavepe_check_position(err, "q_len", a->m)) || (status = wavepe_check_position(err, "k_len", a->n)))
        return status;
    if (a->table != NULL && ((status = wavepe_check_position(err, "r_lo", a->r_lo)) ||
                             (status = wavepe_check_position(err, "table rows", a->table_rows))))
        return status;
    const int64_t qd[4] = {a->batch, a->heads, a->m, a->d};
    const int64_t kd[4] = {a->batch, a->kv_heads, a->n, a->d};
    const int64_t td[2] = {a->table_rows, a->d};
    const int64_t pd[2] = {a->batch, a->n};
    const int64_t ld[3] = {a->batch, a->heads, a->m};
    const int64_t qs[4] = {a->q_strides[0], a->q_strides[1], a->q_strides[2], 1};
    const int64_t ks[4] = {a->k_strides[0], a->k_strides[1], a->k_strides[2], 1};
    const int64_t vs[4] = {a->v_strides[0], a->v_strides[1], a->v_strides[2], 1};
    const int64_t os[4] = {a->out_strides[0], a->out_strides[1], a->out_strides[2], 1};
    const int64_t ps[2] = {a->kpm_stride, 1};
    if ((status = wavepe_check_view(err, "q", 4, qd, qs, elem)) || (status = wavepe_check_view(err, "k", 4, kd, ks, elem)) ||
        (status = wavepe_check_view(err, "v", 4, kd, vs, elem)) ||
        (status = wavepe_check_view(err, "out", 4, qd, os, elem)) ||
        (status = wavepe_check_numel(err, "table (rows, head_dim)", 2, td, elem)) ||
        (status = wavepe_check_numel(err, "lse (batch, heads, M)", 3, ld, acc)))
        return status;
    if (a->key_padding_mask != NULL && (status = wavepe_check_view(err, "key_padding_mask", 2, pd, ps, 1)))
        return status;
    if (a->cu_seqlens != NULL) {
        if (a->cu_len < 2)
            return wavepe_fail(err, WAVEPE_E_INVALID, "cu_seqlens must hold at least 2 boundaries (0 and N), got %lld",
                               (long long)a->cu_len);
        const int64_t cd[2] = {a->batch, a->cu_len}, cs[2] = {a->cu_stride, 1};
        if ((status = wavepe_check_view(err, "cu_seqlens", 2, cd, cs, 4))) return status;
    }
    if (backward) {
        const int64_t gs[4] = {a->dout_strides[0], a->dout_strides[1], a->dout_strides[2], 1};
        if ((status = wavepe_check_view(err, "grad_out", 4, qd, gs, elem))) return status;
    }
    const int any_q = a->batch > 0 && a->heads > 0 && a->m > 0;
    const int any_k = a->batch > 0 && a->kv_heads > 0 && a->n > 0;
    if (any_q && (a->q == NULL || a->out == NULL || a->lse == NULL))
        return wavepe_fail(err, WAVEPE_E_NULL, "q, out and lse must not be NULL");
    if (any_q && any_k && (a->k == NULL || a->v == NULL))
        return wavepe_fail(err, WAVEPE_E_NULL, "k and v must not be NULL");
    if (backward) {
        if (any_q && (a->dout == NULL || a->dq == NULL))
            return wavepe_fail(err, WAVEPE_E_NULL, "grad_out and dq must not be NULL");
        if (any_k && (a->dk == NULL || a->dv == NULL)) return wavepe_fail(err, WAVEPE_E_NULL, "dk and dv must not be NULL");
        if (a->dtable != NULL && a->table == NULL)
            return wavepe_fail(err, WAVEPE_E_INVALID, "a table gradient needs a table");
        if (a->dslopes != NULL && a->slopes == NULL)
            return wavepe_fail(err, WAVEPE_E_INVALID, "a slopes gradient needs ALiBi slopes");
    }
    return WAVEPE_OK;
}

/* The boundaries' values (host memory: the CPU plans call it; a GPU kernel
 * reads them as they are): non-decreasing per batch row. */
int wavepe_attention_check_cu_seqlens(const wavepe_attention_args *a, wavepe_error *err);

/* ---- plans (CPU) -------------------------------------------------------------- */
typedef struct wavepe_attention_plan wavepe_attention_plan;

/* Build a plan over *a (copied; the pointed-to data must outlive the plan),
 * float32 or float64 by a->dtype.  Returns a status; *plan is NULL on error
 * and *err (may be NULL) says why. */
int wavepe_attention_fwd_plan(wavepe_isa isa, const wavepe_attention_args *a, wavepe_attention_plan **plan,
                              wavepe_error *err);
int wavepe_attention_bwd_plan(wavepe_isa isa, const wavepe_attention_args *a, wavepe_attention_plan **plan,
                              wavepe_error *err);

/* Number of independent units of a phase (0 or 1). */
int64_t wavepe_attention_units(const wavepe_attention_plan *plan, int phase);

/* Run units [begin, end) of a phase; returns a status (WAVEPE_E_NOMEM when
 * per-thread scratch cannot be allocated).  Thread-safe across disjoint
 * ranges.  The tiled forward's phase 0 (plan kind 1) may run more: a call done
 * with its range goes on with the units no call has begun, the last first (a
 * thread pool's static split shares out its end), so a later call may find its
 * range done; each unit still runs once, and its result is the same whichever
 * call runs it. */
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
