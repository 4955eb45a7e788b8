/* wavepe_cuda.h: plain C launchers of wavepe's CUDA kernels (no torch).
 *
 * Every launcher takes the family's own argument struct -- the one the CPU
 * core takes (csrc/core/<family>.h: wavepe_relbias_args, wavepe_rope_args,
 * wavepe_alibi_args, wavepe_attention_args), with raw device pointers, its
 * `dtype` tag and element strides -- and a cudaStream_t, and returns a
 * cudaError_t: cudaErrorInvalidValue when the arguments fail the family's
 * rules or this device's limits (wavepe_cuda_<family>_check says which, in
 * words), otherwise the launch status.  Inputs of dtype F32, BF16 and F16 are
 * read natively and accumulated in float32; F64 inputs accumulate in float64.
 * Nothing here allocates: where a kernel needs scratch memory the caller
 * passes a workspace of the size the *_workspace_bytes function reports.
 *
 * Semantics, layouts and rules are the structs' (the headers above and
 * docs/DEVELOPING.md): queries sit at positions q_offset .. q_offset+M-1,
 * keys at 0 .. N-1, the relative distance is r = pos_q - pos_k, causal masks
 * pos_k > pos_q.  The last dimension of every tensor is contiguous; the other
 * strides are int64 elements and may be anything the rules accept.
 */
#ifndef WAVEPE_CUDA_H
#define WAVEPE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "../core/alibi.h"
#include "../core/attention.h"
#include "../core/checked.h"
#include "../core/relbias.h"
#include "../core/rope.h"

#ifdef WAVEPE_CUDA_EMU
#include "emu/cuda_emu_api.h" /* the CPU emulator used by the tests */
#else
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head dimension the CUDA attention takes (float64: 128). */
#define WAVEPE_CUDA_MAX_HEAD_DIM 256
#define WAVEPE_CUDA_MAX_HEAD_DIM_F64 128

/* ---- the device (device.cu) ----------------------------------------------------
 * Does this library hold code the current GPU runs (its SASS, or PTX the driver
 * compiles)?  WAVEPE_OK, else a sentence naming the GPU's compute capability and
 * what to do; `built_for` names the build's archs in it (the recipe's
 * describe_archs text, e.g. "sm_80 sm_90 +PTX compute_90"). */
int wavepe_cuda_device_check(const char *built_for, wavepe_error *err);

/* ---- relative-table bias (relbias.h) --------------------------------------
 * Forward: kernels = WAVEPE_RELBIAS_FORWARD (the outer batch level included).
 * Backward: kernels = GRAD_Q and / or GRAD_TABLE; dT is deterministic (no
 * atomics): per-distance accumulators in the workspace, folded in order. */
int wavepe_cuda_relbias_check(const wavepe_relbias_args *a, unsigned kernels, wavepe_error *err);
cudaError_t wavepe_cuda_relbias_fwd(const wavepe_relbias_args *a, cudaStream_t stream);
/* Bytes of workspace the backward needs (0 without GRAD_TABLE). */
size_t wavepe_cuda_relbias_bwd_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels);
cudaError_t wavepe_cuda_relbias_bwd(const wavepe_relbias_args *a, unsigned kernels, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

/* ---- ALiBi bias (alibi.h) ------------------------------------------------------
 * The distance is converted to the accumulator type before the product, like
 * the CPU core. */
int wavepe_cuda_alibi_check(const wavepe_alibi_args *a, wavepe_error *err);
cudaError_t wavepe_cuda_alibi(const wavepe_alibi_args *a, cudaStream_t stream);

/* ---- RoPE (rope.h) ----------------------------------------------------------------
 * cos/sin formed in float64 once per (position, pair) and shared by every
 * head of q and k.  inv_freq is read on the device: its finiteness is the
 * caller's check (the torch binding's). */
int wavepe_cuda_rope_check(const wavepe_rope_args *a, wavepe_error *err);
cudaError_t wavepe_cuda_rope(const wavepe_rope_args *a, cudaStream_t stream);

/* ---- fused attention (attention.h) --------------------------------------------
 * The bias is chosen by which of table / slopes is set.  Forward: num_splits
 * key-range splits (1 = none; > 1 = split-KV with an ordered combine, the
 * decoding path; wavepe_cuda_attention_num_splits picks it for the current
 * device; with 1 a head_dim-256 call with a table may still run the band split,
 * two partials: wavepe_cuda_attention_fwd_workspace_bytes counts them).  Backward: FlashAttention-2 recompute from lse; deterministic (no
 * atomics: one CTA owns each output block and reduces in a fixed order).
 * check: the family's rules, then this device's limits (head_dim <= 256,
 * float64 <= 128; the grid). */
int wavepe_cuda_attention_check(const wavepe_attention_args *a, int backward, int64_t num_splits, wavepe_error *err);
/* Dynamic shared memory per CTA the call needs (the largest of its kernels), to
 * compare with the device's cudaDevAttrMaxSharedMemoryPerBlockOptin. */
size_t wavepe_cuda_attention_fwd_smem_bytes(const wavepe_attention_args *a);
size_t wavepe_cuda_attention_bwd_smem_bytes(const wavepe_attention_args *a);
/* The forward kernel a call runs: "tensor-core" (bf16/fp16, head_dim 64, 128 or 256, rows on 16 bytes,
 * its shared memory within the device's: the FlashAttention-2 loop), "tensor-core, 32 rows a warp" (its wide
 * instance: head_dim 64 or 128 without a table, more than 64 queries), "tensor-core, GQA heads packed" (the
 * same decoding one query with a GQA group's heads as one CTA's rows, K/V read once a kv head; not with
 * ALiBi), "tensor-core, band split" (a table's long call: the blocks beyond the table's band -- at head_dim 64 and
 * 128 on the wide instance -- and the others as two launches, their partials combined as split-KV's; the workspace
 * of num_splits 1 holds them), "band split: tensor-core beyond the band, general" (the same at head_dim 256 on a
 * device whose shared memory holds the tensor-core CTA without the table's window only, 99 KiB: the others on the
 * general kernel) or "general" (every other call); NULL for NULL. */
const char *wavepe_cuda_attention_fwd_kernel(const wavepe_attention_args *a);
/* The backward's dK/dV and dQ kernels a call runs: "tensor-core" (bf16/fp16, head_dim 64, 128 or 256, rows
 * of q, k, v and dO (and the table's) on 16 bytes, their shared memory within the device's:
 * FlashAttention-2's loops), "tensor-core, dQ 32 rows a warp" (the same with the wide dQ: head_dim 64 or 128
 * without a table -- with ALiBi only its fixed slopes (dslopes NULL) and no soft-cap --, more than 64 queries,
 * two of its CTAs an SM), "tensor-core, band split" (a table's
 * long call: each kernel as two launches, the blocks beyond the table's band without its window -- at head_dim 64
 * and 128 on the wide instances; the dK/dV runs once where the wide one does not fit --, then the others; the
 * workspace holds the first ones' sums), "band split: tensor-core beyond the band, general" (the same at head_dim
 * 256 on a device holding the tensor-core CTAs without the table's window only -- sm_86 / sm_89 / sm_120 --, the
 * second launches on the general kernels), "tensor-core dQ, general dK/dV" or "tensor-core dK/dV,
 * general dQ" (a device granting the one's shared memory and not the other's) or "general"; NULL for NULL. */
const char *wavepe_cuda_attention_bwd_kernel(const wavepe_attention_args *a);
/* The backward's dK/dV kernel alone: "tensor-core, 32 keys a warp" (the wide instance: head_dim 64 or 128 without
 * a table, more than 64 queries, its shared memory within the device's: 180 KiB at 128), "tensor-core, band split"
 * (a table's long call: the blocks beyond its band first -- at head_dim 64 and 128 on the wide instance --, the
 * others on the 16-key table instance), "band split: tensor-core beyond the band, general" (as the backward's),
 * "tensor-core" (16 keys a warp) or "general"; NULL for NULL. */
const char *wavepe_cuda_attention_bwd_dkdv_kernel(const wavepe_attention_args *a);
/* The kernel that computes a learned table's gradient dtable: "tensor-core" (bf16/fp16, head_dim 64 or 128,
 * rows on 16 bytes, its shared memory within the device's: 103 KiB at 128), "tensor-core, K in two halves"
 * (head_dim 128 on a device granting 94.5 KiB but not 103: sm_86, sm_89, sm_120), "general", or "none" (no
 * dtable asked); NULL for NULL. */
const char *wavepe_cuda_attention_bwd_dtable_kernel(const wavepe_attention_args *a);
/* The head dim a call runs at: a bf16/fp16 call whose head dim has no tensor-core instance (between 32 and 256,
 * not 64 or 128: Phi-2's 80, Phi-3-mini's 96), with at least 64 queries, runs its kernels on dense copies of its rows
 * zero-padded to 64, 128 or 256 in the workspace (the *_workspace_bytes count them) where the tensor-core kernels
 * take that call -- the copies' head dim; 0 where the call runs as it is.  The *_kernel and *_smem_bytes
 * functions report the padded call's kernels. */
int64_t wavepe_cuda_attention_fwd_padded_head_dim(const wavepe_attention_args *a);
int64_t wavepe_cuda_attention_bwd_padded_head_dim(const wavepe_attention_args *a);
/* Splits the forward should use on the current device (>= 1). */
int64_t wavepe_cuda_attention_num_splits(const wavepe_attention_args *a);
size_t wavepe_cuda_attention_fwd_workspace_bytes(const wavepe_attention_args *a, int64_t num_splits);
cudaError_t wavepe_cuda_attention_fwd(const wavepe_attention_args *a, int64_t num_splits, void *workspace,
                                      size_t workspace_bytes, cudaStream_t stream);
size_t wavepe_cuda_attention_bwd_workspace_bytes(const wavepe_attention_args *a);
cudaError_t wavepe_cuda_attention_bwd(const wavepe_attention_args *a, void *workspace, size_t workspace_bytes,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
