/* wavepe_cuda.h: plain C launchers of wavepe's CUDA kernels (no torch).
 *
 * Every launcher takes raw device pointers, int64 sizes and element strides
 * in an args struct, a dtype tag and a cudaStream_t, and returns a
 * cudaError_t: cudaErrorInvalidValue when the arguments fail validation
 * (call the matching *_validate first for a wavepe_status that says why),
 * otherwise the launch status.  Inputs of dtype F32, BF16 and F16 are read
 * natively and accumulated in float32; F64 inputs accumulate in float64.
 * Nothing here allocates: where a kernel needs scratch memory the caller
 * passes a workspace of the size the *_workspace_bytes function reports.
 *
 * Layout conventions: the last dimension of every tensor is contiguous
 * (stride 1); the other strides are in elements and may be anything (they
 * are int64, so views of huge tensors are fine).  Outputs written by the
 * launchers are dense in the layout their comment gives.
 *
 * Semantics are those of docs/DEVELOPING.md ("API contracts"): queries sit at
 * positions q_offset .. q_offset+M-1, keys at 0 .. N-1, the relative distance
 * is r = pos_q - pos_k, causal masks pos_k > pos_q.
 */
#ifndef WAVEPE_CUDA_H
#define WAVEPE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef WAVEPE_CUDA_EMU
#include "emu/cuda_emu_api.h" /* the CPU emulator used by the tests */
#else
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of the tensors a launcher reads and writes. */
typedef enum wavepe_cuda_dtype {
    WAVEPE_CUDA_F32 = 0,
    WAVEPE_CUDA_F64 = 1,
    WAVEPE_CUDA_BF16 = 2,
    WAVEPE_CUDA_F16 = 3
} wavepe_cuda_dtype;

/* Largest head dimension the CUDA kernels take (float64: 128). */
#define WAVEPE_CUDA_MAX_HEAD_DIM 256
#define WAVEPE_CUDA_MAX_HEAD_DIM_F64 128

/* ---- relative-table bias ------------------------------------------------
 *
 *   bias[b, m, n] = sum_j q[b, m, j] * T[r(m, n) - r_lo, j]
 *
 * q (batch, m, d), T (rows, d).  Rows outside [0, rows) are zero, or the edge
 * row with clamp.  Causal entries (pos_k > pos_q) are 0.  Backward:
 * dq[b, m] = sum_n dB[b, m, n] T[row(m, n)],
 * dT[row]  = sum_{b, (m, n) -> row} dB[b, m, n] q[b, m]   (deterministic). */
typedef struct wavepe_cuda_relbias_args {
    wavepe_cuda_dtype dtype; /* of q, table, bias, grad, dq, dtable */
    int64_t batch, m, n, d, rows;
    int64_t r_lo, q_offset;
    int causal, clamp;
    const void *q;        /* (batch, m, d), strides q_stride_b, q_stride_m */
    int64_t q_stride_b, q_stride_m;
    const void *table;    /* (rows, d), row stride table_stride_r */
    int64_t table_stride_r;
    void *bias;           /* forward output (batch, m, n), dense */
    const void *grad;     /* backward input dB (batch, m, n), strides grad_stride_b, grad_stride_m */
    int64_t grad_stride_b, grad_stride_m;
    void *dq;             /* backward output (batch, m, d), dense; NULL to skip */
    void *dtable;         /* backward output (rows, d), dense; NULL to skip */
} wavepe_cuda_relbias_args;

int wavepe_cuda_relbias_validate(const wavepe_cuda_relbias_args *a, int backward);
cudaError_t wavepe_cuda_relbias_fwd(const wavepe_cuda_relbias_args *a, cudaStream_t stream);
/* Bytes of workspace the backward needs (0 without dtable). */
size_t wavepe_cuda_relbias_bwd_workspace_bytes(const wavepe_cuda_relbias_args *a);
cudaError_t wavepe_cuda_relbias_bwd(const wavepe_cuda_relbias_args *a, void *workspace, size_t workspace_bytes,
                                    cudaStream_t stream);

/* ---- ALiBi bias -------------------------------------------------------------
 *
 * bias[h, i, j] = -slope[h] * (pos_q(i) - j) (causal: 0 for j > pos_q(i)),
 * -slope[h] * |pos_q(i) - j| when not causal; the distance is converted to the
 * accumulator type before the product, like the CPU core. */
typedef struct wavepe_cuda_alibi_args {
    wavepe_cuda_dtype dtype; /* of slopes and out */
    int64_t heads, m, n, q_offset;
    int causal;
    const void *slopes; /* (heads,) */
    void *out;          /* (heads, m, n), dense */
} wavepe_cuda_alibi_args;

int wavepe_cuda_alibi_validate(const wavepe_cuda_alibi_args *a);
cudaError_t wavepe_cuda_alibi(const wavepe_cuda_alibi_args *a, cudaStream_t stream);

/* ---- RoPE -----------------------------------------------------------------
 *
 * Pair i (i < d/2) is (x[i], x[i + d/2]) in layout HALF and (x[2i], x[2i+1])
 * in layout INTERLEAVED; angle = pos * inv_freq[i] formed and turned into
 * cos/sin in float64 (once per position and pair, shared by every head).
 * Pairs i < rotary_pairs become (a cos - b sin, b cos + a sin) * scale, the
 * others a * scale, b * scale (scale finite, any sign).  inverse = 1 rotates
 * by -angle (the backward).
 * Up to two tensors (q and k, with their own head counts) in one launch. */
typedef enum wavepe_cuda_rope_layout { WAVEPE_CUDA_ROPE_HALF = 0, WAVEPE_CUDA_ROPE_INTERLEAVED = 1 } wavepe_cuda_rope_layout;

typedef struct wavepe_cuda_rope_tensor {
    int64_t heads;
    const void *x;  /* (batch, heads, len, d), strides below */
    int64_t x_stride_b, x_stride_h, x_stride_l;
    void *out;      /* (batch, heads, len, d), strides below (may equal x: in place) */
    int64_t out_stride_b, out_stride_h, out_stride_l;
} wavepe_cuda_rope_tensor;

typedef struct wavepe_cuda_rope_args {
    wavepe_cuda_dtype dtype;
    int64_t batch, len, d;
    int64_t rotary_pairs;
    int layout;             /* wavepe_cuda_rope_layout */
    int inverse;
    double scale;
    const int64_t *positions; /* (batch, len) with stride pos_stride_b (0: one (len,) row), or NULL */
    int64_t pos_stride_b;
    int64_t pos_offset;       /* positions = pos_offset + l when positions is NULL */
    const double *inv_freq;   /* (d/2,) float64 */
    int ntensors;             /* 1 or 2 */
    wavepe_cuda_rope_tensor t[2];
} wavepe_cuda_rope_args;

int wavepe_cuda_rope_validate(const wavepe_cuda_rope_args *a);
cudaError_t wavepe_cuda_rope(const wavepe_cuda_rope_args *a, cudaStream_t stream);

/* ---- fused attention ------------------------------------------------------
 *
 *   s[m, n] = scale * (q_m . k_n + q_m . T[r(m, n) - r_lo])   (pos_enc TABLE: wavelet / relative)
 *   s[m, n] = scale * q_m . k_n - slope_h * dist(m, n)         (pos_enc ALIBI)
 *   s[m, n] = scale * q_m . k_n                                (pos_enc NONE)
 *   out = softmax_n(s + masks) v,  lse[m] = log sum_n exp(s[m, n])
 *
 * dist = pos_q - pos_k (causal) or |pos_q - pos_k|.  Masks: causal, key
 * padding (nonzero = ignore), keys >= N.  A row with every key masked gives
 * out = 0 and lse = -inf.  q (batch, heads, m, d); k, v (batch, kv_heads, n, d)
 * with heads a multiple of kv_heads (GQA: head h reads kv head
 * h / (heads / kv_heads)).  Backward (FlashAttention-2 recompute from lse):
 * dq, dk, dv and, for a learned table, dT, for ALiBi the slopes' gradient,
 * with an optional gradient of lse; deterministic (no atomics: one CTA owns
 * each output block and reduces in a fixed order). */
typedef enum wavepe_cuda_pos_enc {
    WAVEPE_CUDA_PE_NONE = 0,
    WAVEPE_CUDA_PE_TABLE = 1,
    WAVEPE_CUDA_PE_ALIBI = 2
} wavepe_cuda_pos_enc;

typedef struct wavepe_cuda_attention_args {
    wavepe_cuda_dtype dtype; /* of q, k, v, table, out, grads */
    int64_t batch, heads, kv_heads, m, n, d;
    int64_t q_offset;
    int causal;
    double scale;
    int pos_enc;             /* wavepe_cuda_pos_enc */
    const void *table;       /* TABLE: (table_rows, d), row stride table_stride_r, dtype */
    int64_t table_rows, table_stride_r, r_lo;
    int clamp;
    const void *alibi_slopes; /* ALIBI: (heads,) float32 (float64 for F64), dense */
    const uint8_t *key_padding_mask; /* (batch, n) bytes, nonzero = ignore; stride kpm_stride_b; or NULL */
    int64_t kpm_stride_b;
    const void *q; int64_t q_stride_b, q_stride_h, q_stride_m;
    const void *k; int64_t k_stride_b, k_stride_h, k_stride_n;
    const void *v; int64_t v_stride_b, v_stride_h, v_stride_n;
    /* forward output, backward input: out (batch, heads, m, d) with strides o_stride_*,
     * lse (batch, heads, m) dense float32 (float64 for F64) */
    void *out; int64_t o_stride_b, o_stride_h, o_stride_m;
    void *lse;
    /* forward: key-range splits (1 = none; >1 = split-KV with an ordered
     * combine, the decoding path); set it with wavepe_cuda_attention_num_splits */
    int64_t num_splits;
    /* backward only */
    const void *grad_out; int64_t go_stride_b, go_stride_h, go_stride_m;
    void *dq;     /* (batch, heads, m, d) dense */
    void *dk;     /* (batch, kv_heads, n, d) dense */
    void *dv;     /* (batch, kv_heads, n, d) dense */
    void *dtable; /* (table_rows, d) dense, or NULL (fixed table, e.g. wavelets) */
    /* gradient of the lse output (batch, heads, m), dense float32 (float64 for
     * F64), or NULL: lse is then not used downstream */
    const void *grad_lse;
    /* ALIBI: d loss / d slope (heads,) float32 (float64 for F64), or NULL */
    void *dslopes;
} wavepe_cuda_attention_args;

int wavepe_cuda_attention_validate(const wavepe_cuda_attention_args *a, int backward);
/* Dynamic shared memory per CTA the call needs (the largest of its kernels), to
 * compare with the device's cudaDevAttrMaxSharedMemoryPerBlockOptin. */
size_t wavepe_cuda_attention_fwd_smem_bytes(const wavepe_cuda_attention_args *a);
size_t wavepe_cuda_attention_bwd_smem_bytes(const wavepe_cuda_attention_args *a);
/* Splits the forward should use on the current device (>= 1). */
int64_t wavepe_cuda_attention_num_splits(const wavepe_cuda_attention_args *a);
size_t wavepe_cuda_attention_fwd_workspace_bytes(const wavepe_cuda_attention_args *a);
cudaError_t wavepe_cuda_attention_fwd(const wavepe_cuda_attention_args *a, void *workspace, size_t workspace_bytes,
                                      cudaStream_t stream);
size_t wavepe_cuda_attention_bwd_workspace_bytes(const wavepe_cuda_attention_args *a);
cudaError_t wavepe_cuda_attention_bwd(const wavepe_cuda_attention_args *a, void *workspace, size_t workspace_bytes,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
