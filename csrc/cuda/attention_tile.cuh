// attention_tile.cuh: the tile machinery shared by the fused attention
// kernels (attention.cu: forward and split-KV decoding; attention_bwd.cu).
//
// A CTA has WARPS warps; warp w owns 16 rows of the current tile.  Tiles of
// q, k, v (and the relative-table window) are staged in shared memory, rows
// padded by 16 bytes so that the fragment loads of the 8 row groups of a warp
// hit different banks.  Two warp-level products cover every matmul of the
// forward and backward passes:
//
//   warp_abt  acc (16 x NT*8) += A (16 x K) . B^T,  A and B row-major in smem
//             (S = Q K^T, G = Q T_win^T, S^T = K Q^T, dP = dO V^T, ...);
//   warp_rb   acc (16 x DT*8) += P (16 x K) . B,    P in registers in the
//             C-fragment layout (the softmax probabilities, dS, ...), B
//             row-major [K][cols] in smem (P V, dS K, dS^T Q, H T_win, ...).
//
// bf16/fp16 use mma.sync m16n8k16 (fp32 accumulate; P is rounded to the
// input type for the second product, as in FlashAttention-2); fp32/fp64 use
// FMA on the same C-fragment ownership (shuffles broadcast P within a quad).
//
// The relative-table bias of a tile (rows m0.., keys n0..) needs table rows
// base - (BN - 1) .. base + BM - 1, base = q_offset + m0 - n0 - r_lo (the
// "window", BM + BN - 1 rows).  Warp w computes G = Q_w T_win[16w ..]^T
// (16 x (BN + 16)) with warp_abt and reads the skew
// bias[r][c] = G[r][r - c + BN - 1] back through shared memory.
#pragma once

#include <stdlib.h>

#include "common.cuh"

namespace wavepe_cuda {

// ---- parameters --------------------------------------------------------------------------
// Which bias the tiles add: set from which of table / slopes the arguments carry.
enum AttnBias { WAVEPE_CUDA_PE_NONE = 0, WAVEPE_CUDA_PE_TABLE = 1, WAVEPE_CUDA_PE_ALIBI = 2 };

struct AttnParams {
    int64_t batch, heads, kv_heads, group, m, n, d, d_pad;
    int64_t q_offset;
    int causal, pos_enc, clamp;
    double scale;
    const void *table;
    int64_t table_rows, table_sr, r_lo;
    const void *slopes;
    const uint8_t *kpm;
    int64_t kpm_sb;
    const void *q, *k, *v, *out, *go;
    int64_t q_sb, q_sh, q_sm, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, o_sb, o_sh, o_sm, go_sb, go_sh, go_sm;
    void *out_w, *lse;
    // 16-byte vector loads allowed (rows aligned, d a multiple of the vector)
    int vec_q, vec_k, vec_v, vec_t, vec_o, vec_go;
    // forward: K/V (and the table window: async_t) double-buffered with cp.async
    // (16-byte rows, and the second buffers fit the device's shared memory)
    int async_kv, async_t;
    // forward: split-KV
    int64_t num_splits, blocks_per_split;
    void *work_o, *work_lse;
    // backward
    void *dq, *dk, *dv, *dtable, *delta, *dt_part;
    const void *grad_lse;
    void *dslopes, *slope_part;
    int64_t n_diag, dt_groups, bh_per_group;
};

// Parameters of wavepe_attention_args, shared by forward and backward (attention.cu).
AttnParams attention_params(const wavepe_attention_args *a);

// Head-dimension bucket: the register tiles are sized for DMAX columns.
inline int dmax_bucket(int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

// Tile shapes per element type and head-dimension bucket (DMAX = 64, 128, 256).
// Shared memory: every bf16/fp16 configuration, and fp32 up to head_dim 128,
// stays under the 99 KiB that sm_86/sm_89 GPUs grant a CTA (A100: 163 KiB,
// H100: 227 KiB), so one binary serves every GPU from sm_80 on; fp64 (kept for
// gradcheck) may need more.  wavepe_cuda_attention_{fwd,bwd}_smem_bytes report
// the exact figure of a call.
template <class T, int DMAX>
struct FwdCfg {
    static constexpr bool tc = Traits<T>::kTensorCore;
    static constexpr bool f64 = sizeof(T) == 8;
    static constexpr int BM = tc ? (DMAX <= 128 ? 64 : 32) : f64 ? (DMAX <= 64 ? 32 : 16) : (DMAX <= 64 ? 64 : DMAX <= 128 ? 32 : 16);
    static constexpr int BN = tc ? (DMAX <= 64 ? 64 : 32) : f64 ? 16 : (DMAX <= 64 ? 32 : DMAX <= 128 ? 32 : 16);
};
// The backward needs square tiles (the dT pass walks tile diagonals).
template <class T, int DMAX>
struct BwdCfg {
    static constexpr bool tc = Traits<T>::kTensorCore;
    static constexpr bool f64 = sizeof(T) == 8;
    static constexpr int B = tc ? (DMAX <= 64 ? 64 : DMAX <= 128 ? 32 : 16) : f64 ? 16 : (DMAX <= 64 ? 32 : 16);
};

// Shared-memory carve-up, identical on host (sizing) and device (pointers).
struct SmemPlan {
    static constexpr int kMaxRegions = 12;
    size_t off[kMaxRegions];
    size_t total;
    int n;
    __host__ __device__ SmemPlan() : total(0), n(0) {}
    // returns the index of a region of `bytes`, 16-byte aligned
    __host__ __device__ int add(size_t bytes) {
        if (n == kMaxRegions) {  // a layout with more regions than planned: a bug, stop loudly
#ifdef __CUDA_ARCH__
            __trap();
#else
            abort();
#endif
        }
        total = (total + 15) & ~size_t(15);
        off[n] = total;
        total += bytes;
        return n++;
    }
};

template <class T>
__host__ __device__ inline int tile_ld(int64_t d_pad) {
    return int(d_pad) + int(16 / sizeof(T));
}
// Row stride of a G / H scratch row (BN + 16 accumulators, padded).
template <class A>
__host__ __device__ constexpr int g_ld(int bn) {
    return bn + 16 + int(16 / sizeof(A));
}

// ---- tile loads ---------------------------------------------------------------------------
// dst[r][c] for r < nrows, c < d_pad: row r of the source (row(r) == nullptr:
// a zero row), zero for c >= d.  vec: 16-byte copies (host checked alignment).
template <class T, class RowFn>
WAVEPE_DEVICE void load_tile(T *dst, int ld, int nrows, int64_t d, int64_t d_pad, bool vec, RowFn row) {
    const int tid = threadIdx.x, nthr = blockDim.x;
    if (vec) {
        constexpr int V = 16 / int(sizeof(T));
        const int cpr = int(d_pad) / V;
        for (int i = tid; i < nrows * cpr; i += nthr) {
            const int r = i / cpr, c = (i % cpr) * V;
            const T *s = row(r);
            if (s != nullptr && c < d) {
                copy16(dst + r * ld + c, s + c);
            } else {
#pragma unroll
                for (int v = 0; v < V; ++v) dst[r * ld + c + v] = zero_value<T>();
            }
        }
    } else {
        const int cols = int(d_pad);
        for (int i = tid; i < nrows * cols; i += nthr) {
            const int r = i / cols, c = i % cols;
            const T *s = row(r);
            dst[r * ld + c] = (s != nullptr && c < d) ? s[c] : zero_value<T>();
        }
    }
}

// load_tile with cp.async (16-byte rows, the caller checked alignment): the
// copies land at the caller's cp_async_wait; zero rows and padding are plain
// stores (visible after the next __syncthreads like the copies).
template <class T, class RowFn>
WAVEPE_DEVICE void load_tile_async(T *dst, int ld, int nrows, int64_t d, int64_t d_pad, RowFn row) {
    constexpr int V = 16 / int(sizeof(T));
    const int tid = threadIdx.x, nthr = blockDim.x;
    const int cpr = int(d_pad) / V;
    for (int i = tid; i < nrows * cpr; i += nthr) {
        const int r = i / cpr, c = (i % cpr) * V;
        const T *s = row(r);
        if (s != nullptr && c < d) {
            cp_async16(dst + r * ld + c, s + c, true);
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) dst[r * ld + c + v] = zero_value<T>();
        }
    }
}

// Table row (before scaling) for window index w of a tile with base row `base`; nullptr = zero row.
template <class T>
WAVEPE_DEVICE const T *window_row_ptr(const AttnParams &p, int64_t base, int bn, int w) {
    int64_t t = base - (bn - 1) + w;
    if (p.clamp) {
        t = t < 0 ? 0 : (t >= p.table_rows ? p.table_rows - 1 : t);
    } else if (t < 0 || t >= p.table_rows) {
        return nullptr;
    }
    return static_cast<const T *>(p.table) + t * p.table_sr;
}

// Does any table row of the window rows [lo, hi] exist (clamp: always)?
WAVEPE_DEVICE bool table_rows_hit(const AttnParams &p, int64_t lo, int64_t hi) {
    return p.clamp ? p.table_rows > 0 : (hi >= 0 && lo < p.table_rows);
}

// ---- warp products ----------------------------------------------------------------------------
// acc[nt] (16 x 8 C fragments) += A (16 x 16 ksteps) . B^T, B rows nt*8 .. nt*8+7.
template <class T, int NT>
WAVEPE_DEVICE void warp_abt(acc_t<T> (&acc)[NT][4], const T *a_tile, int lda, const T *b_tile, int ldb, int ksteps) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if constexpr (Traits<T>::kTensorCore) {
        for (int ks = 0; ks < ksteps; ++ks) {
            const int k0 = ks * 16 + 2 * t;
            const uint32_t a[4] = {ld32(a_tile + g * lda + k0), ld32(a_tile + (g + 8) * lda + k0),
                                   ld32(a_tile + g * lda + k0 + 8), ld32(a_tile + (g + 8) * lda + k0 + 8)};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const T *brow = b_tile + (nt * 8 + g) * ldb + k0;
                const uint32_t b[2] = {ld32(brow), ld32(brow + 8)};
                mma16816<T>(acc[nt], a, b);
            }
        }
    } else {
        using A = acc_t<T>;
        const int kmax = 16 * ksteps;
        for (int k = 0; k < kmax; ++k) {
            const A a0 = to_acc(a_tile[g * lda + k]), a1 = to_acc(a_tile[(g + 8) * lda + k]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const A b0 = to_acc(b_tile[(nt * 8 + 2 * t) * ldb + k]);
                const A b1 = to_acc(b_tile[(nt * 8 + 2 * t + 1) * ldb + k]);
                acc[nt][0] += a0 * b0;
                acc[nt][1] += a0 * b1;
                acc[nt][2] += a1 * b0;
                acc[nt][3] += a1 * b1;
            }
        }
    }
}

// acc[dt] (16 x 8, columns dt*8..) += P (16 x 8 KT8, C fragments) . B[k][dt*8 ..], dt < dt_active.
// B's rows must start on 16 bytes (ldmatrix): tiles from this file's layouts do.
// The fp32/fp64 path stages P in the warp's scratch (16 rows, ld_scratch()
// accumulators each) and walks k at run time: cheap to compile, one shared
// load of P per (row, k) for 2 DT FMAs.
template <class T, int KT8, int DT>
WAVEPE_DEVICE void warp_rb(acc_t<T> (&acc)[DT][4], const acc_t<T> (&p)[KT8][4], const T *b_tile, int ldb,
                           int dt_active, acc_t<T> *scratch) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if constexpr (Traits<T>::kTensorCore) {
        static_assert(KT8 % 2 == 0, "tensor-core products take k in steps of 16");
        (void)scratch;
#pragma unroll
        for (int kk = 0; kk < KT8 / 2; ++kk) {
            const uint32_t a[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                                   pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                   pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
            // B fragments by ldmatrix.trans: lane l points at row kk*16 + l % 16 of
            // the tile, columns dt*8 (lanes 0-15) and (dt+1)*8 (lanes 16-31)
            const T *brow = b_tile + (kk * 16 + (lane & 15)) * ldb;
#pragma unroll
            for (int dt = 0; dt < DT; dt += 2) {
                if (dt + 1 < dt_active) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, brow + (dt + (lane >> 4)) * 8);
                    mma16816<T>(acc[dt], a, b);
                    mma16816<T>(acc[dt + 1], a, b + 2);
                } else if (dt < dt_active) {
                    uint32_t b[2];
                    ldmatrix_x2_trans(b, brow + dt * 8);
                    mma16816<T>(acc[dt], a, b);
                }
            }
        }
    } else {
        using A = acc_t<T>;
        constexpr int ldp = 8 * KT8 + 1;
        __syncwarp();  // the scratch's previous contents are consumed
#pragma unroll
        for (int kk = 0; kk < KT8; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) scratch[(g + 8 * (i / 2)) * ldp + kk * 8 + 2 * t + (i % 2)] = p[kk][i];
        __syncwarp();
        for (int k = 0; k < 8 * KT8; ++k) {
            const A p_lo = scratch[g * ldp + k], p_hi = scratch[(g + 8) * ldp + k];
            const T *brow = b_tile + k * ldb + 2 * t;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                if (dt < dt_active) {
                    const A b0 = to_acc(brow[dt * 8]), b1 = to_acc(brow[dt * 8 + 1]);
                    acc[dt][0] += p_lo * b0;
                    acc[dt][1] += p_lo * b1;
                    acc[dt][2] += p_hi * b0;
                    acc[dt][3] += p_hi * b1;
                }
            }
        }
    }
}

// Accumulators of the per-warp P scratch of warp_rb's fp32/fp64 path (K <= bn + 16).
template <class T>
__host__ __device__ constexpr size_t rb_scratch_elems(int bn) {
    return Traits<T>::kTensorCore ? 0 : size_t(16) * size_t(8 * ((bn + 16) / 8) + 1);
}

// Row (0..15) and column of C-fragment element i of n-tile nt for this lane.
WAVEPE_DEVICE int frag_row(int i) { return ((threadIdx.x & 31) >> 2) + 8 * (i / 2); }
WAVEPE_DEVICE int frag_col(int nt, int i) { return nt * 8 + 2 * (threadIdx.x & 3) + (i % 2); }

template <class A, int NT>
WAVEPE_DEVICE void zero_frags(A (&x)[NT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) x[nt][i] = A(0);
}

// G (16 x (BN + 16)) of warp rows against window rows 16w .. 16w + BN + 15,
// stored to the warp's scratch gw[r * gld + c].
template <class T, int BN>
WAVEPE_DEVICE void warp_window_products(acc_t<T> *gw, int gld, const T *q_rows, const T *t_rows, int ld, int ksteps) {
    using A = acc_t<T>;
    constexpr int GT = (BN + 16) / 8;
    A gacc[GT][4];
    zero_frags(gacc);
    warp_abt<T, GT>(gacc, q_rows, ld, t_rows, ld, ksteps);
#pragma unroll
    for (int nt = 0; nt < GT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) gw[frag_row(i) * gld + frag_col(nt, i)] = gacc[nt][i];
}

// s[r][c] += G[r][r - c + BN - 1] (the skew of the warp's window products).
template <class A, int NT, int BN>
WAVEPE_DEVICE void add_skewed_bias(A (&s)[NT][4], const A *gw, int gld) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = frag_row(i), c = frag_col(nt, i);
            s[nt][i] += gw[r * gld + r - c + BN - 1];
        }
}

// Scores of a warp's 16 query rows (global row m_row0 + r) against keys
// n0 + c, in the log2 domain with every mask applied (-inf).
template <class A, int NT>
WAVEPE_DEVICE void scores_log2(A (&s)[NT][4], const AttnParams &p, int64_t m_row0, int64_t n0, const uint8_t *kmask,
                               A scale, A slope) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = frag_row(i), c = frag_col(nt, i);
            const int64_t m = m_row0 + r, n = n0 + c, pos_q = p.q_offset + m;
            const bool masked = m >= p.m || kmask[c] || (p.causal && n > pos_q);
            A x = s[nt][i] * scale;
            if (p.pos_enc == WAVEPE_CUDA_PE_ALIBI) {
                const int64_t dist = pos_q - n;
                x -= slope * A(dist < 0 ? -dist : dist);
            }
            s[nt][i] = masked ? neg_inf<A>() : x * A(kLog2e);
        }
}

// kmask[c] = 1 when key n0 + c is absent (>= N) or padded out.
WAVEPE_DEVICE void load_key_mask(uint8_t *kmask, int bn, const AttnParams &p, int64_t b, int64_t n0) {
    for (int c = threadIdx.x; c < bn; c += blockDim.x) {
        const int64_t n = n0 + c;
        kmask[c] = (n >= p.n || (p.kpm != nullptr && p.kpm[b * p.kpm_sb + n] != 0)) ? 1 : 0;
    }
}

template <class T>
WAVEPE_DEVICE acc_t<T> head_slope(const AttnParams &p, int64_t h) {
    if (p.pos_enc != WAVEPE_CUDA_PE_ALIBI) return acc_t<T>(0);
    return static_cast<const acc_t<T> *>(p.slopes)[h];
}

}  // namespace wavepe_cuda
