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
    // The caller's arguments (core/attention.h), read as they are: sizes, strides, pointers, flags.
    // The kernels write out, lse (forward) and dq, dk, dv, dtable, dslopes (backward) through it.
    wavepe_attention_args a;
    // derived by attention_params and the launchers
    int64_t group, d_pad;  // query heads per kv head; d rounded up to 16
    int pos_enc;           // WAVEPE_CUDA_PE_*: which bias a->table / a->slopes give
    // 16-byte vector loads allowed (rows aligned, d a multiple of the vector)
    int vec_q, vec_k, vec_v, vec_t, vec_o, vec_go;
    // forward: K/V (and the table window: async_t) double-buffered with cp.async
    // (16-byte rows, and the second buffers fit the device's shared memory)
    int async_kv, async_t;
    // forward: split-KV
    int64_t num_splits, blocks_per_split;
    void *work_o, *work_lse, *work_seen;
    // the band split of the tensor-core kernels with a table (band_split_pays in attention.cu): 0 none; else the
    // launch of one of two partials, 1 the interior blocks beyond the table's band (no window staged: the
    // forward's first launch, the backward's table-free dQ and dK/dV instances; at 64 and 128 the wide instances,
    // band_split_blocks, dkdv_band_split_blocks), 2 the others (the band's and the masked blocks).  The backward's
    // first launches leave their fp32 sums in split_dq and split_dkv (dK's then dV's, of B Hkv N rows; null where
    // the dK/dV runs once: bwd_dkdv_band_split), which the second ones add before their stores.
    int band_part;
    void *split_dq, *split_dkv;
    // backward: workspace
    void *delta, *dt_part, *slope_part;
    int64_t n_diag, dt_groups, bh_per_group;
    int64_t dq_rows;  // query rows of a dQ CTA: its warps' d-slope slots (16 rows each)
    // forward: the first key block of split 0 (the keys some query can see start there: visible_keys)
    int64_t kb_first;
    // the rows a query tile's row index ranges over (scores_log2's bound): M; with pack_heads (the
    // tensor-core forward decoding one query, M = 1, GQA): the group's heads are the tile's rows, m_rows =
    // group, each at the query's position
    int64_t m_rows;
    int pack_heads;
    // logit soft-cap (a.softcap > 0) in the kernels' log2 domain: cap_log2 = softcap log2(e) and its
    // inverse; both 0 without a cap
    double cap_log2, icap_log2;
};

// Parameters of wavepe_attention_args, shared by forward and backward (attention.cu).
AttnParams attention_params(const wavepe_attention_args *a);

// May the call run a wide instance (32 query rows a warp, 128 a CTA: attn_fwd_tc_wide_kernel,
// attn_bwd_dq_tc_wide_kernel)?  Head dim 64 or 128 (at 256 O's or dQ's accumulators alone fill the registers),
// more than 64 queries (a 128-row CTA half empty: decoding, packed heads), not WAVEPE_CUDA_WIDE=0
// (wide_rows_allowed).  wide_forward, wide_dq and the band split (band_split, bwd_band_split) add their kernels'
// conditions.
inline bool wide_rows_apply(const AttnParams &p) {
    return (p.a.d == 64 || p.a.d == 128) && p.a.m > 64 && wide_rows_allowed();
}

// Whether a call with a table (head_dim 64, 128 or 256) gains from the band split: the conditions that do not depend on the
// kernels (attention.cu says which and why); each direction adds its kernels' shared memory and workspace.
bool band_split_pays(const AttnParams &p);
// ... where the split's second partial runs on a general kernel (head_dim 256 with a table on a 99 KiB device): from
// fewer keys a row beyond the band, whatever their share of the blocks (attention.cu, kBandSplitKeysGeneral).
bool band_split_pays_general(const AttnParams &p);
// The most workspace a band split takes (the forward's two partials, the backward's fp32 dQ, dK and dV); beyond
// it, the calls run as one launch a kernel.
constexpr size_t kBandSplitWorkspace = size_t(1) << 30;

// Head dims the tensor-core kernels have no instance for (Phi-2's 80, Phi-3-mini's 96, ...): the call run on copies
// of its rows zero-padded to the next one (attention.cu, "Padded head dims").  A PaddedCall is that call: its
// arguments (d the padded head dim; q, k, v, the table, out -- and, backward, dout, dq, dk, dv, dtable -- dense
// copies in the first `bytes` of the workspace, the padded call's own workspace after them); `on` false where the
// call runs as it is.
struct PaddedCall {
    wavepe_attention_args a;
    size_t bytes;
    bool on;
};
// The padded call's arguments for head dim dp (64, 128 or 256) if padded_head_dim allows one, else `on` false;
// workspace nullptr: the sizes only (its pointers are never dereferenced).
PaddedCall padded_call(const wavepe_attention_args *a, bool backward, void *workspace);
// Copy the call's inputs into the padded call's rows (zero beyond d), or its outputs back (their first d columns).
cudaError_t padded_inputs(const wavepe_attention_args *a, const PaddedCall &c, bool backward, cudaStream_t stream);
cudaError_t padded_outputs(const wavepe_attention_args *a, const PaddedCall &c, bool backward, cudaStream_t stream);

// Launch a tensor-core kernel (CTAs of 128 threads, 256 the wide dK/dV's) over ctas CTAs with smem bytes of dynamic
// shared memory, allowed first.
template <class K>
cudaError_t launch_tc(K *kernel, int64_t ctas, size_t smem, cudaStream_t stream, const AttnParams &p,
                      unsigned threads = 128) {
    const cudaError_t err = allow_dynamic_smem(kernel, smem);
    return err != cudaSuccess ? err : launch(kernel, dim3(unsigned(ctas)), dim3(threads), smem, stream, p);
}

// Launch kernel_for(window) over ctas CTAs of 128 threads with smem_for(window) bytes of shared memory: once, the
// window a table's call needs; or, with the band split (p.band_part set by the launcher), its two parts -- the
// table-free instance or layout over the blocks beyond the band, then the table's over the others.
template <class KernelFor, class SmemFor>
cudaError_t launch_band_parts(const AttnParams &p, KernelFor kernel_for, SmemFor smem_for, int64_t ctas,
                              cudaStream_t stream) {
    const bool table = p.pos_enc == WAVEPE_CUDA_PE_TABLE;
    for (int part = p.band_part ? 1 : 0; part <= (p.band_part ? 2 : 0); ++part) {
        AttnParams q = p;
        q.band_part = part;
        const bool window = table && part != 1;
        const cudaError_t err = launch_tc(kernel_for(window), ctas, smem_for(window), stream, q);
        if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
}

// The keys [*lo, *hi) that some query of the call can see by causality and the window (documents and
// padding aside: the kernels' own masks): where split-KV decoding divides its key blocks.
inline void visible_keys(const wavepe_attention_args *a, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = a->n;  // |q_offset|, m, n, window <= 2^60: no overflow below
    if (a->window > 0 && a->q_offset - a->window + 1 > l) l = a->q_offset - a->window + 1;
    if (a->causal && a->q_offset + a->m < h) h = a->q_offset + a->m;
    if (a->window > 0 && !a->causal && a->q_offset + a->m - 1 + a->window < h) h = a->q_offset + a->m - 1 + a->window;
    if (l > a->n) l = a->n;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

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
// Its kernels hold their gradient rows (dK and dV, dQ, dT) in registers;
// where those would not fit beside the recomputed scores (ptxas spilled:
// .ci/check_cuda_kernels.py), a kernel's CTAs each own a slice of DMAX / CS
// columns of them and recompute S, P and dS per slice.
template <class T, int DMAX>
struct BwdCfg {
    static constexpr bool tc = Traits<T>::kTensorCore;
    static constexpr bool f64 = sizeof(T) == 8;
    static constexpr int B = tc ? (DMAX <= 64 ? 64 : DMAX <= 128 ? 32 : 16) : f64 ? 16 : (DMAX <= 64 ? 32 : 16);
    static constexpr int CS_DKDV = f64 ? DMAX / 32 : DMAX <= 128 ? 1 : 2;
    static constexpr int CS_DQ = f64 ? DMAX / 64 : 1;
    static constexpr int CS_DT = f64 ? DMAX / 64 : DMAX <= 128 ? 1 : 2;
};

// Column slice `slice` of CS over the accumulator tiles of a DMAX bucket:
// first column c0, active 8-column tiles (< DMAX / 8 / CS) for head dim d.
template <int DMAX, int CS>
struct ColSlice {
    static constexpr int DT = DMAX / 8 / CS;
    int c0, dt_active;
    WAVEPE_DEVICE ColSlice(int slice, int64_t d) : c0(slice * (DMAX / CS)) {
        const int64_t n = d > c0 ? (d - c0 + 7) / 8 : 0;
        dt_active = n < DT ? int(n) : DT;
    }
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

// Bytes of the tensor-core layout Lay<T, D> for head dim d (64, 128 or 256; bf16 and fp16 alike: 2-byte
// elements), built with args (whether the call has a table): the launchers' and the size queries' figure.
template <template <class, int> class Lay, class... Args>
size_t tc_layout_bytes(int64_t d, Args... args) {
    return d == 64 ? Lay<__half, 64>(args...).plan.total
                   : d == 128 ? Lay<__half, 128>(args...).plan.total : Lay<__half, 256>(args...).plan.total;
}

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

// Rows 0 .. R-1 of a tile (row stride LD) from src + r * stride, every row present, by cp.async in
// 16-byte chunks: consecutive threads take consecutive chunks of a row.  NTHREADS threads.
template <class T, int R, int D, int LD, int NTHREADS>
WAVEPE_DEVICE void load_rows_async(T *dst, const T *src, int64_t stride) {
    constexpr int V = 16 / int(sizeof(T)), CPR = D / V, RSTEP = NTHREADS / CPR;
    static_assert(NTHREADS % CPR == 0 && R % RSTEP == 0, "whole rows per round, whole rounds");
    const int r0 = int(threadIdx.x) / CPR, c = (int(threadIdx.x) % CPR) * V;
    const T *from = src + r0 * stride + c;  // a pointer stepped by RSTEP rows: no 64-bit multiply per chunk
    const int64_t step = RSTEP * stride;
#pragma unroll
    for (int it = 0; it < R / RSTEP; ++it, from += step) cp_async16(dst + (r0 + it * RSTEP) * LD + c, from, true);
}

// Rows 0 .. NROWS - 1 of a tile (row stride LD) of D columns, row r from row(r) (nullptr: a zero row), by cp.async in
// 16-byte chunks, NTHREADS threads (the CTA's: blockDim.x): a thread takes one chunk column of every NTHREADS /
// (D / V)-th row, the row's address computed once a chunk.  The tile kernels' rows tested one by one (masked blocks,
// the table's window): load_tile_async's runtime widths and thread count cost ~45-65 instructions a chunk (its
// division and remainder, 64-bit row products), which a band block's window copy paid 16 times a warp -- as many
// instructions as the block's products.  The caller commits; zero rows are plain stores (after the next barrier).
template <class T, int NROWS, int D, int LD, int NTHREADS, class RowFn>
WAVEPE_DEVICE void load_tile_rows_async(T *dst, RowFn row) {
    constexpr int V = 16 / int(sizeof(T)), CPR = D / V, RSTEP = NTHREADS / CPR;
    static_assert(D % V == 0 && NTHREADS % CPR == 0, "whole rows per round");
    const int r0 = int(threadIdx.x) / CPR, c = (int(threadIdx.x) % CPR) * V;
#pragma unroll 1  // (unrolled, the copies' addresses took registers the tile loops spilled for)
    for (int r = r0; r < NROWS; r += RSTEP) {
        const T *const from = row(r);
        T *const to = dst + r * LD + c;
        if (from != nullptr)
            cp_async16(to, from + c, true);
        else
            zero16(to);
    }
}

// The window of NROWS table rows from row t0 = base - (bn - 1) (window_row_ptr's rows, w = 0 ..) into a tile (row
// stride LD), by cp.async as load_tile_rows_async; the rows outside the table (clamped: its first or last row) found
// by two 32-bit compares a row, a missing one zero-filled by the copy itself (src-size 0: no branch).  WRAP > 0: the
// tile is a ring of WRAP rows and row w goes to tile row (at + w) mod WRAP (at < WRAP, NROWS <= WRAP).
template <class T, int NROWS, int D, int LD, int NTHREADS, int WRAP = 0>
WAVEPE_DEVICE void load_window_async(T *dst, const AttnParams &p, int64_t base, int bn, int at = 0) {
    static_assert(WRAP == 0 || NROWS <= WRAP, "a ring's rows");
    constexpr int V = 16 / int(sizeof(T)), CPR = D / V, RSTEP = NTHREADS / CPR;
    static_assert(D % V == 0 && NTHREADS % CPR == 0, "whole rows per round");
    const int r0 = int(threadIdx.x) / CPR, c = (int(threadIdx.x) % CPR) * V;
    const int64_t t0 = base - (bn - 1), rows = p.a.table_rows;
    // the window rows [lo, hi) are table rows t0 + w, inside the table
    const int lo = int(t0 >= 0 ? 0 : (-t0 < NROWS ? -t0 : NROWS));
    const int hi = int(rows - t0 <= 0 ? 0 : (rows - t0 < NROWS ? rows - t0 : NROWS));
    const T *const table = static_cast<const T *>(p.a.table) + c;
    const T *const first = table, *const last = table + (rows - 1) * D;
    const T *const at_lo = table + (lo < hi ? t0 + lo : 0) * D;  // (row lo's where lo < hi)
    const bool clamp = p.a.clamp;
#pragma unroll 1
    for (int r = r0; r < NROWS; r += RSTEP) {
        const bool inside = r >= lo && r < hi;
        const T *const from = inside ? at_lo + (r - lo) * D : r < lo ? first : last;
        int to = r;
        if constexpr (WRAP > 0) {
            to = at + r;
            to = to >= WRAP ? to - WRAP : to;
        } else {
            (void)at;
        }
        cp_async16(dst + to * LD + c, from, inside || clamp);
    }
}

// Table row (before scaling) for window index w of a tile with base row `base`; nullptr = zero row.
template <class T>
WAVEPE_DEVICE const T *window_row_ptr(const AttnParams &p, int64_t base, int bn, int w) {
    int64_t t = base - (bn - 1) + w;
    if (p.a.clamp) {
        t = t < 0 ? 0 : (t >= p.a.table_rows ? p.a.table_rows - 1 : t);
    } else if (t < 0 || t >= p.a.table_rows) {
        return nullptr;
    }
    return static_cast<const T *>(p.a.table) + t * p.a.d;
}

// The table's band among the interior key blocks [ib, ie) of a CTA's bm query rows from m0, blocks of bn
// keys: [bb, be), the blocks whose window (table rows c - n0 - bn + 1 .. c - n0 + bm - 1, c = q_offset + m0 -
// r_lo) meets the table's rows [0, R): n0 in [c - bn - R + 2, c + bm - 1], blocks
// ceil((c - bn - R + 2) / bn) .. floor((c + bm - 1) / bn); every block with clamped edges.  (The forward's
// and the tensor-core dQ's; the host's count for the forward's band split.)
__host__ __device__ inline void table_band_key_blocks(const AttnParams &p, int64_t m0, int bm, int bn, int64_t ib, int64_t ie,
                                         int64_t &bb, int64_t &be) {
    const int64_t c = p.a.q_offset + m0 - p.a.r_lo;
    bb = p.a.clamp ? ib : floor_div(c - p.a.table_rows + 1, bn);
    be = p.a.clamp ? ie : floor_div(c + bm - 1, bn) + 1;
    bb = bb < ib ? ib : bb > ie ? ie : bb;
    be = be < bb ? bb : be > ie ? ie : be;
}

// Of bm query rows from m0 whose first row sees keys [lo0, hi0) and last [lo1, hi1) (ranges non-decreasing in the
// row): the interior key blocks [ib, ie) -- blocks of bn keys every row sees, below N -- and the table's band among
// them, [bb, be); false when there is no interior.  (The band split's host count, pure_blocks in attention.cu, and
// its partition, band_split_blocks.)
__host__ __device__ inline bool interior_band_blocks(const AttnParams &p, int64_t m0, int bm, int bn, int64_t lo0,
                                                     int64_t hi0, int64_t lo1, int64_t hi1, int64_t &ib, int64_t &ie,
                                                     int64_t &bb, int64_t &be) {
    ib = ceil_div(lo1, bn), ie = (hi0 < p.a.n ? hi0 : p.a.n) / bn;
    if (ie <= ib || hi0 <= lo0 || hi1 <= lo1) return false;
    table_band_key_blocks(p, m0, bm, bn, ib, ie, bb, be);
    return true;
}

// Does any table row of the window rows [lo, hi] exist (clamp: always)?
WAVEPE_DEVICE bool table_rows_hit(const AttnParams &p, int64_t lo, int64_t hi) {
    return p.a.clamp ? p.a.table_rows > 0 : (hi >= 0 && lo < p.a.table_rows);
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

// acc[nt] (16 x 8 C fragments) += A (16 x 16 KS) . B^T on the tensor cores, both operands by ldmatrix
// from tiles with rows LD apart: arow = the lane's address of A's rows (row l % 16, column 8 (l / 16)),
// brow = the lane's of B's (row (l % 8) + 8 (l / 16), column 8 ((l / 8) % 2)); NT even.  A's fragments
// are read once per 16-column step for NT / 2 loads of B's: the A operand costs 1 / NT of the loads.
template <class T, int NT, int KS, int LD>
WAVEPE_DEVICE void warp_abt_ldm(float (&acc)[NT][4], const T *arow, const T *brow) {
    static_assert(NT % 2 == 0, "pairs of 8-column tiles");
    // head_dim 256 (KS 16): unrolled by 4 only, as window_products's steps (ptxas hoisted loads and spilled)
    [[maybe_unused]] constexpr int UNROLL = KS > 8 ? 4 : KS;
#pragma unroll UNROLL
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t af[4];
        ldmatrix_x4(af, arow + 16 * ks);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t bf[4];
            ldmatrix_x4(bf, brow + np * 16 * LD + 16 * ks);
            mma16816<T>(acc[2 * np], af, bf);
            mma16816<T>(acc[2 * np + 1], af, bf + 2);
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
                           int dt_active, acc_t<T> *scratch, int kk_hi = KT8 / 2) {
    // (kk_hi: only the first kk_hi 16-key steps of k, warp_rb_masked's: P is 0 in the others)
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if constexpr (Traits<T>::kTensorCore) {
        static_assert(KT8 % 2 == 0, "tensor-core products take k in steps of 16");
        (void)scratch;
#pragma unroll
        for (int kk = 0; kk < KT8 / 2; ++kk) {
            if (kk >= kk_hi) break;  // (warp-uniform)
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
        for (int k = 0, k_end = 16 * kk_hi < 8 * KT8 ? 16 * kk_hi : 8 * KT8; k < k_end; ++k) {
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

// S (16 x 8 NT) += the warp's Q fragments . K^T, K fragments by ldmatrix from krow (the lane's
// address in the K tile: key row (l % 8) + 8 (l / 16), columns 8 ((l / 8) % 2) ..).  qf: the Q
// fragments in registers (uint32_t[KS][4]) or the lane's address of its Q rows in the Q tile (row
// l % 16, column 8 (l / 16): ldmatrix'd at each step), as window_products takes them
// (the forward's S; the tensor-core dT's).
template <class T, int NT, int KS, int LD>
WAVEPE_DEVICE void qk_step(float (&s)[NT][4], const uint32_t *a, const T *krow, int ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        uint32_t kf[4];
        ldmatrix_x4(kf, krow + np * 16 * LD + ks * 16);
        mma16816<T>(s[2 * np], a, kf);
        mma16816<T>(s[2 * np + 1], a, kf + 2);
    }
}
template <class T, int NT, int KS, int LD, class QF>
WAVEPE_DEVICE void qk_products(float (&s)[NT][4], const QF &qf, const T *krow) {
    if constexpr (std::is_pointer<QF>::value) {
        // unrolled by 4 only: fully unrolled, ptxas hoisted fragments' loads ahead of their products
        // and spilled the head_dim-256 kernel on sm_80 (8 bytes)
#pragma unroll 4
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t af[4];
            ldmatrix_x4(af, qf + 16 * ks);
            qk_step<T, NT, KS, LD>(s, af, krow, ks);
        }
    } else {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) qk_step<T, NT, KS, LD>(s, qf[ks], krow, ks);
    }
}

// A warp of MT m-tiles of 16 rows (the forward's wide instance, 32 rows a warp): S[mt] (16 x 8 NT) += Q[mt] K^T
// with each K fragment ldmatrix'd once for the MT m-tiles -- the K bytes per HMMA a 1 / MT of qk_products' --
// and Q's fragments by ldmatrix at each 16-column step (one load per NT / 2 of K's): qrow = the lane's address of
// the first m-tile's rows in the Q tile (row l % 16, column 8 (l / 16)), m-tile mt 16 mt rows further.
template <class T, int NT, int KS, int LD, int MT, int UNROLL>
WAVEPE_DEVICE void qk_products_rows(float (&s)[MT][NT][4], const T *qrow, const T *krow) {
    // UNROLL: how far the KS 16-column steps are unrolled -- qk_unroll<KS>() (arch_tuning.cuh: by 4 at most on sm_100),
    // or less where the caller's registers need it (the wide dQ's S and dP: 2)
#pragma unroll UNROLL
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(af[mt], qrow + mt * 16 * LD + 16 * ks);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t kf[4];
            ldmatrix_x4(kf, krow + np * 16 * LD + ks * 16);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816<T>(s[mt][2 * np], af[mt], kf);
                mma16816<T>(s[mt][2 * np + 1], af[mt], kf + 2);
            }
        }
    }
}

// P (16 x 8 KT8, C fragments, fp32) as the A fragments of P V's 16-key steps (bf16/fp16 pairs): half the registers,
// so that S's fp32 die before the products (the wide instance's 32 rows a warp).
template <class T, int KT8>
WAVEPE_DEVICE void pack_p_frags(const float (&pf)[KT8][4], uint32_t (&a)[KT8 / 2][4]) {
#pragma unroll
    for (int kk = 0; kk < KT8 / 2; ++kk) {
        a[kk][0] = pack2<T>(pf[2 * kk][0], pf[2 * kk][1]);
        a[kk][1] = pack2<T>(pf[2 * kk][2], pf[2 * kk][3]);
        a[kk][2] = pack2<T>(pf[2 * kk + 1][0], pf[2 * kk + 1][1]);
        a[kk][3] = pack2<T>(pf[2 * kk + 1][2], pf[2 * kk + 1][3]);
    }
}

// O[mt] (16 x 8 DT) += A[mt] B of one 16-row step of B: A's fragments a[mt] (bf16/fp16 pairs), B's by ldmatrix.trans
// from brow (the lane's row of the step: row l % 16 of the tile's 16), each read once for the MT m-tiles.
template <class T, int DT, int MT>
WAVEPE_DEVICE void pv_step(float (&o)[MT][DT][4], const uint32_t (&a)[MT][4], const T *brow) {
    static_assert(DT % 2 == 0, "pairs of 8-column tiles");
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int dt = 0; dt < DT; dt += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, brow + (dt + (lane >> 4)) * 8);  // columns dt 8 (lanes 0-15), (dt + 1) 8 (16-31)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(o[mt][dt], a[mt], b);
            mma16816<T>(o[mt][dt + 1], a[mt], b + 2);
        }
    }
}

// O[mt] (16 x 8 DT) += P[mt] V of MT m-tiles over KK 16-key steps (P packed: pack_p_frags), each V fragment
// (ldmatrix.trans from the tile's rows, ldv apart) read once for the MT m-tiles: warp_rb's tensor-core path.
template <class T, int KK, int DT, int MT>
WAVEPE_DEVICE void pv_products_rows(float (&o)[MT][DT][4], const uint32_t (&pa)[MT][KK][4], const T *v_tile, int ldv) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) a[mt][i] = pa[mt][kk][i];
        pv_step<T, DT, MT>(o, a, v_tile + (kk * 16 + (lane & 15)) * ldv);
    }
}

// The same with A (MT m-tiles of 16 rows, KK 16-column steps) in shared memory: its fragments by ldmatrix at each
// step from arow (the lane's address of the first m-tile's rows: row l % 16, column 8 (l / 16); m-tile mt 16 mt rows
// further, lda apart).  (The wide dK/dV's dV += P^T dO and dK += dS^T Q: P^T and dS^T staged by the warps that
// computed them.)
template <class T, int KK, int DT, int MT>
WAVEPE_DEVICE void ab_products_smem(float (&o)[MT][DT][4], const T *arow, int lda, const T *b_tile, int ldb) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], arow + mt * 16 * lda + 16 * kk);
        pv_step<T, DT, MT>(o, a, b_tile + (kk * 16 + (lane & 15)) * ldb);
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
    // fp64: one 8-column slice at a time, so that G's accumulators (GT x 4
    // doubles) are not live beside O's (DMAX / 2 doubles): 255 registers
    // would not hold both (ptxas spilled; .ci/check_cuda_kernels.py)
    constexpr int CHUNK = sizeof(A) == 8 ? 1 : GT;
#pragma unroll
    for (int c0 = 0; c0 < GT; c0 += CHUNK) {
        A gacc[CHUNK][4];
        zero_frags(gacc);
        warp_abt<T, CHUNK>(gacc, q_rows, ld, t_rows + c0 * 8 * ld, ld, ksteps);
#pragma unroll
        for (int nt = 0; nt < CHUNK; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) gw[frag_row(i) * gld + frag_col(c0 + nt, i)] = gacc[nt][i];
    }
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

// G's pair of 8-column tiles from window rows trow .. trow + 15 (window_products)
template <class T, int KS, int LD, int UNROLL, class QF>
WAVEPE_DEVICE void window_pair_products(float (&g)[2][4], const QF &qf, const T *trow) {
#pragma unroll UNROLL
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t tf[4];
        ldmatrix_x4(tf, trow + ks * 16);
        if constexpr (std::is_pointer<QF>::value) {
            uint32_t af[4];
            ldmatrix_x4(af, qf + 16 * ks);
            mma16816<T>(g[0], af, tf);
            mma16816<T>(g[1], af, tf + 2);
        } else {
            mma16816<T>(g[0], qf[ks], tf);
            mma16816<T>(g[1], qf[ks], tf + 2);
        }
    }
}


// The warp's relative-table bias of key columns [C0, C0 + HC) of a block of BN keys: for the warp's rows r and
// those columns c, q_r . T_win[16w + r - c + BN - 1] (ROW_SHIFT 1; 0, rows all at one position: T_win[BN - 1 - c]),
// from G = Q_w T_win[16w + X0 .. 16w + X0 + HC + 15]^T, X0 = BN - C0 - HC, on the tensor cores (Q fragments in
// registers; the window's fragments by ldmatrix from trow, the lane's address as krow's, in the warp's rows of the
// window tile), two 8-column tiles of G at a time, each pair handed to sink(np, g) in order (np = 0, 1, ..: tiles
// 2 np and 2 np + 1 of G, C fragments): window_bias_add adds them to the scores.
// qf: the warp's Q fragments in registers (uint32_t[KS][4]) or, to spare those registers, the lane's
// address of its Q rows in shared memory (row l % 16, column 8 (l / 16): ldmatrix'd at each step).
// CARRY (the forward's two halves of a block, add_table_bias): the window rows of the first half's first pair of
// tiles, X0 .. X0 + 15, are the second half's last pair's (its X0 is HC lower): 1, the first half keeps that pair's
// G in carry; 2, the second half takes it from there, computing GT / 2 - 1 of its GT / 2 pairs.
// PREV (the band loop's consecutive blocks, add_table_bias): block j + 1's window is block j's moved BN rows on, so
// the first half's last pair of window rows (X0 + HC .. X0 + HC + 15 = BN .. BN + 15) is block j's second half's
// first pair (rows 0 .. 15): with CARRY 2 that pair's G is also stored in the warp's scratch cw (2 x 32 x 4 floats,
// 16 bytes a lane a tile, lanes in turn: conflict-free), and with CARRY 1 the last pair is read from there where
// `prev` (the warp took block j - 1's window: warp-uniform) -- the same products, so the same bits.
// TR: trow, the lane's address in the window's first row, or (the forward's band loop at head_dim 128, its window a
// ring: attn_fwd_tc_cta) a callable giving it in a row r (a multiple of 16) of the window.
template <class T, int BN, int HC, int C0, int KS, int LD, int CARRY, bool PREV = false, class SINK, class QF,
          class TR>
WAVEPE_DEVICE void window_products(const SINK &sink, const QF &qf, const TR &trow, float (&carry)[2][4],
                                   float *cw = nullptr, bool prev = false) {
    constexpr int GT = (HC + 16) / 8, X0 = BN - C0 - HC;
    // head_dim 256 (KS 16): the steps unrolled by 4 only -- fully unrolled, ptxas hoisted a dozen fragments'
    // loads ahead of their products and spilled the tensor-core forward on sm_90
    [[maybe_unused]] constexpr int UNROLL = KS > 8 ? 4 : KS;  // (the emulator's compiler ignores the pragma)
    static_assert(GT % 2 == 0 && X0 >= 0, "pairs of 8-column tiles inside the window");
    static_assert(CARRY != 2 || (C0 == HC && HC % 16 == 0), "the carried pair: the first half's, at the end");
    static_assert(!PREV || (GT / 2 >= 3 && ((CARRY == 1 && C0 == 0) || (CARRY == 2 && X0 == 0))),
                  "the previous block's pair: the first half's last (rows BN ..), the second's first (0 ..)");
    [[maybe_unused]] const int lane = threadIdx.x & 31;
#pragma unroll
    for (int np = 0; np < GT / 2; ++np) {
        float g[2][4];
        if (CARRY == 2 && np == GT / 2 - 1) {
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int i = 0; i < 4; ++i) g[e][i] = carry[e][i];
        } else if (PREV && CARRY == 1 && np == GT / 2 - 1 && prev) {
#pragma unroll
            for (int e = 0; e < 2; ++e) copy16(g[e], cw + 4 * (32 * e + lane));
        } else {
            zero_frags(g);
            const T *rows;
            if constexpr (std::is_pointer<TR>::value)
                rows = trow + (X0 + np * 16) * LD;
            else
                rows = trow(X0 + np * 16);
            window_pair_products<T, KS, LD, UNROLL>(g, qf, rows);
        }
        if constexpr (CARRY == 1) {
            if (np == 0)
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int i = 0; i < 4; ++i) carry[e][i] = g[e][i];
        }
        if constexpr (PREV && CARRY == 2) {
            if (np == 0)
#pragma unroll
                for (int e = 0; e < 2; ++e) copy16(cw + 4 * (32 * e + lane), g[e]);
        }
        sink(np, g);
    }
}

// The skew's exchange within a quad of lanes (window_bias_add; the dQ's H, skewed_ds_products in attention_bwd.cu):
// a tile X of C fragments takes X[r][x] = Y[r][r ROW_SHIFT + W - 1 - x] from Y's tiles (W a multiple of 8, x in X's
// columns).  Element (h, b) of lane (g, t) of X's tile j -- row r = g + 8 h, column x = 8 j + 2 t + b -- is in Y's
// tile n = h ROW_SHIFT + W / 8 - j, or n - 1 where g ROW_SHIFT - 1 - 2 t - b < 0: element 2 h + b' of lane (g, t'),
// b' = (g ROW_SHIFT - 1 - b) & 1, t' = (k_b - t) & 3, k_b = ((g ROW_SHIFT - 1 - b) & 7) >> 1.  t -> t' is its own
// inverse, so each lane of a quad sends one value to one lane and knows which: the element its receiver t' wants.
// (gr: g ROW_SHIFT.)
struct SkewQuad {
    int src[2];    // the lane step b reads: (g, t') of the quad
    bool lower[2]; // the tile its receiver wants: n - 1 (else n)
    bool odd[2];   // and the element: 2 h + 1 (else 2 h)
    WAVEPE_DEVICE explicit SkewQuad(int gr) {
        const int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const int k = ((gr - 1 - b) & 7) >> 1, tr = (k - t) & 3;
            src[b] = (lane & ~3) | tr;
            lower[b] = 2 * tr + b >= gr;  // (ROW_SHIFT 0: always)
            odd[b] = ((gr - 1 - b) & 1) != 0;
        }
    }
    // element 2 h + b of X's tile, from the lane's elements 2 h, 2 h + 1 of Y's tiles n - 1 (lo) and n (hi)
    // (values, not pointers: a pointer chosen at run time puts the arrays in local memory)
    WAVEPE_DEVICE float take(int b, float lo0, float lo1, float hi0, float hi1) const {
        const float v = lower[b] ? (odd[b] ? lo1 : lo0) : (odd[b] ? hi1 : hi0);
        return __shfl_sync(kFullMask, v, src[b]);
    }
};

// window_products's bias added to the scores s[S0 + j] (j < HC / 8: the columns C0 + 8 j ..) in registers, by
// shuffles within each quad of lanes -- no shared memory.  (Until 2026-11-29 the bias went through a scratch of
// the warp's, stored skewed element by element and read back as float2: 2-way bank-conflicted stores -- no row
// stride, order of a lane's elements or XOR swizzle of the rows avoids them while the reads stay float2, searched
// exhaustively --, 3 wavefronts an element against a shuffle's 1.)
// Score element (j, i) takes G's column r ROW_SHIFT + HC - 1 - c: SkewQuad with W = HC, X the scores, Y = G.  A step
// (h, b) of tile j runs once G's tile n has arrived (the pair holding it; the tile n - 1 before it: the pair's
// first, or the previous pair's second, kept).
template <class T, int BN, int HC, int C0, int S0, int KS, int LD, int ROW_SHIFT, int CARRY, bool PREV = false,
          int NT, class QF, class TR>
WAVEPE_DEVICE void window_bias_add(float (&s)[NT][4], const QF &qf, const TR &trow, float (&carry)[2][4],
                                   float *cw = nullptr, bool prev = false) {
    static_assert(S0 + HC / 8 <= NT && HC % 8 == 0, "the scores' tiles of the columns");
    const SkewQuad sq(ROW_SHIFT ? (threadIdx.x & 31) >> 2 : 0);
    float before[4] = {};  // G's tile 2 np - 1
    auto add = [&](int np, const float (&g)[2][4]) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = 2 * np + e;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = h * ROW_SHIFT + HC / 8 - n;
                if (j < 0 || j >= HC / 8) continue;  // (known at compile time once unrolled)
                const float lo0 = e ? g[0][2 * h] : before[2 * h], lo1 = e ? g[0][2 * h + 1] : before[2 * h + 1];
#pragma unroll
                for (int b = 0; b < 2; ++b)
                    s[S0 + j][2 * h + b] += sq.take(b, lo0, lo1, g[e][2 * h], g[e][2 * h + 1]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) before[i] = g[1][i];
    };
    window_products<T, BN, HC, C0, KS, LD, CARRY, PREV>(add, qf, trow, carry, cw, prev);
}
template <class T, int BN, int HC, int C0, int S0, int KS, int LD, int ROW_SHIFT, int NT, class QF, class TR>
WAVEPE_DEVICE void window_bias_add(float (&s)[NT][4], const QF &qf, const TR &trow) {
    float none[2][4] = {};
    window_bias_add<T, BN, HC, C0, S0, KS, LD, ROW_SHIFT, 0>(s, qf, trow, none);
}

// Scores of a warp's 16 query rows (tile row m_row0 + r: query m_row0 + r, or PACKED head m_row0 + r of
// the group; rows >= M, PACKED >= p.m_rows, see no key) against keys
// n0 + c, in the log2 domain with every mask applied: a masked score is
// -inf by selection, whatever q . k gave (NaN included).  Row r sees keys
// [rlo[r], rhi[r]) (load_row_keys: document, causal frontier and window) less the
// padded and absent ones (kmask).  seen[ri] |= the
// lane's row ri (rows g, g + 8) has an unmasked key here (a row whose
// visible scores are all -inf is NaN, one that sees no key is 0).
// The scale and ALiBi slope arrive multiplied by log2(e) (one multiply per score); on a
// tile wholly inside the warp's rows' ranges (past the window's lower edge, before the causal
// frontier) only the key mask is read, without 64-bit index math.  With a soft-cap
// (p.cap_log2 > 0) each score x becomes cap tanh(x / cap) before the mask (log2 domain:
// cap = softcap log2(e), the same function of the natural score).  CAP: 0 no soft-cap, 1 a soft-cap,
// 2 p's, tested per score (a uniform predicate): one loop body, where two instances in one kernel
// spilled the fp32 forward's registers on sm_100.
template <int CAP, class A, int NT, bool PACKED = false>
WAVEPE_DEVICE void scores_log2_impl(A (&s)[NT][4], const AttnParams &p, int64_t m_row0, int64_t n0,
                                    const uint8_t *kmask, const int64_t *rlo, const int64_t *rhi, A scale_log2,
                                    A slope_log2, bool (&seen)[2]) {
    const bool alibi = p.pos_enc == WAVEPE_CUDA_PE_ALIBI;
    const A cap = A(p.cap_log2), icap = A(p.icap_log2);
    const bool capped = CAP == 1 || (CAP == 2 && p.cap_log2 > 0.0);
    // every row sees keys [rlo[15], rhi[0]) (the ranges are non-decreasing in the row)
    const int64_t m_rows = PACKED ? p.m_rows : p.a.m;
    const bool interior = m_row0 + 15 < m_rows && n0 >= rlo[15] && n0 + 8 * NT <= rhi[0];  // warp-uniform
    if (interior && !alibi) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const bool masked = kmask[frag_col(nt, i)] != 0;
                A x = s[nt][i] * scale_log2;
                if (capped) x = cap * tanh_(x * icap);
                s[nt][i] = masked ? neg_inf<A>() : x;
                seen[i / 2] |= !masked;
            }
        return;
    }
    // the lane's rows (g, g + 8: ri = 0, 1) see the tile's columns [first[ri], end[ri]) (none past M):
    // 32-bit, once per tile
    int first[2], end[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
        const int r = frag_row(2 * ri);
        const int64_t lo = rlo[r] - n0, hi = m_row0 + r < m_rows ? rhi[r] - n0 : 0;
        first[ri] = lo < 0 ? 0 : (lo > 8 * NT ? 8 * NT : int(lo));
        end[ri] = hi < 0 ? 0 : (hi > 8 * NT ? 8 * NT : int(hi));
    }
    const int64_t dist0 = p.a.q_offset + m_row0 - n0;  // ALiBi: r = dist0 + row - column
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = frag_row(i), c = frag_col(nt, i);
            const bool masked = kmask[c] || c < first[i / 2] || c >= end[i / 2];
            A x = s[nt][i] * scale_log2;
            if (alibi) {
                const int64_t dist = dist0 + (r - c);
                x -= slope_log2 * A(dist < 0 ? -dist : dist);
            }
            if (capped) x = cap * tanh_(x * icap);  // (a masked lane's may be NaN: selected away)
            s[nt][i] = masked ? neg_inf<A>() : x;
            seen[i / 2] |= !masked;
        }
}

// scores_log2_impl, the soft-cap read from p.
template <bool PACKED = false, class A, int NT>
WAVEPE_DEVICE void scores_log2(A (&s)[NT][4], const AttnParams &p, int64_t m_row0, int64_t n0, const uint8_t *kmask,
                               const int64_t *rlo, const int64_t *rhi, A scale_log2, A slope_log2, bool (&seen)[2]) {
    scores_log2_impl<2, A, NT, PACKED>(s, p, m_row0, n0, kmask, rlo, rhi, scale_log2, slope_log2, seen);
}

// ---- which keys a query sees -------------------------------------------------------------
// Keys [lo, hi) of batch row b for the query at position pos (its document, cut after pos when
// causal and to the window): the shared definition, wavepe_attention_keys (core/attention.h),
// reading cu_seqlens on the device.
WAVEPE_DEVICE void attn_keys(const AttnParams &p, int64_t b, int64_t pos, bool causal, int64_t &lo, int64_t &hi) {
    wavepe_attention_args a = p.a;  // the caller's, with this call's causal flag
    a.causal = causal ? 1 : 0;
    wavepe_attention_keys(&a, b, pos, &lo, &hi);
}

// The band split at head_dim 64 and 128 (band_split and bwd_band_split, in attention.cu and attention_bwd.cu):
// the wide instances (128 query rows a CTA) run its first partial -- the interior blocks beyond the band --, the
// 16-row ones (64 rows; key blocks of gbn keys, as many or twice the wide forward's) its second, the others.  So
// that every (row, key) pair falls in exactly one, both take the interior [ib, ie) and the band [bb, be) of the
// GM-row group holding the CTA's rows (rows past M: the last query's keys, as load_row_keys), in blocks of gbn
// keys, returned in the CTA's own blocks of bn (bn divides gbn); no interior: all four kb_end.  For the CTA's
// rows these are interior blocks too (a group's keys seen by every row are seen by each), within its key blocks
// [kb_begin, kb_end) (from its first row's first key to its last row's last); a 16-row CTA takes the rest of
// those blocks through its masked loop.  (No documents, padding nor clamped tables: band_split_pays.)  The forward's
// first partial on the 100 KiB SMs at 128 runs the 16-row instance (wide_holds_sm): over the same groups' blocks.
// WHOLE: only whole groups have an interior -- the partition of the forward's band split at head_dim 256 on a
// device that holds the tensor-core CTA without the window only (GM 64: that CTA's rows, which take no block of a
// partial last CTA as interior; the general kernel's 32-row CTAs the second partial: band_split_on_general).
template <int GM = 128, bool WHOLE = false>
WAVEPE_DEVICE void band_split_blocks(const AttnParams &p, int64_t b, int64_t m0, int gbn, int bn, int64_t kb_end,
                                     int64_t &ib, int64_t &ie, int64_t &bb, int64_t &be) {
    const int64_t g0 = m0 - m0 % GM, last = g0 + GM - 1 < p.a.m ? g0 + GM - 1 : p.a.m - 1;
    ib = ie = bb = be = kb_end;
    if (WHOLE && g0 + GM > p.a.m) return;
    int64_t lo0, hi0, lo1, hi1;  // the keys of the group's first and last rows
    attn_keys(p, b, p.a.q_offset + g0, p.a.causal != 0, lo0, hi0);
    attn_keys(p, b, p.a.q_offset + last, p.a.causal != 0, lo1, hi1);
    int64_t gib, gie, gbb, gbe;
    if (!interior_band_blocks(p, g0, GM, gbn, lo0, hi0, lo1, hi1, gib, gie, gbb, gbe)) return;
    const int64_t r = gbn / bn;
    ib = gib * r, ie = gie * r, bb = gbb * r, be = gbe * r;
}

// The band split's partial (p.band_part) a CTA of MT m-tiles a warp runs: at head_dim 256 either (the 16-row
// kernels' table-free and table instances); at 64 and 128 the first on the wide instances built for it (BAND: a
// constant, so that the other wide instances -- every table-free call's -- carry none of it), the second on the
// 16-row table instance; 0 none.  (The forward's 16-row CTA reads p.band_part itself: where an SM holds fewer wide CTAs
// than 16-row ones -- the 100 KiB SMs at 128, wide_holds_sm -- it runs the first partial too, without the window.)
template <int D, int MT, bool BAND>
WAVEPE_DEVICE int band_part_of(const AttnParams &p) {
    return D == 256 ? p.band_part : MT > 1 ? (BAND ? 1 : 0) : (p.band_part == 2 ? 2 : 0);
}

// Positions [lo, hi) of the queries that may see key n of batch row b (0 <= n < N):
// wavepe_attention_keys read the other way -- from n on when causal, within the window
// (wavepe_attention_queries_of_key), and in n's document as the boundaries give it, not cut to
// the keys (queries past the last key, in a document that continues beyond the keys, see it).
WAVEPE_DEVICE void key_queries(const AttnParams &p, int64_t b, int64_t n, int64_t &lo, int64_t &hi) {
    wavepe_attention_queries_of_key(&p.a, n, &lo, &hi);
    if (p.a.cu_seqlens != nullptr) {
        int64_t dlo, dhi;
        wavepe_attention_document(&p.a, b, n, &dlo, &dhi);  // dlo == dhi: n is in no document, seen by none
        if (dlo > lo) lo = dlo;
        if (dhi < hi) hi = dhi;
    }
}

// lo[r], hi[r] = the keys query row m0 + r of batch row b sees, r < rows
// (shared memory; a __syncthreads makes them visible).  Rows past M take the
// last query's range, so that the ranges of a tile are non-decreasing in r
// (boundaries are, on valid cu_seqlens): the tile's rows see keys
// [lo[0], hi[rows - 1]) between them, and a warp's 16 rows all see
// [lo[15], hi[0]) (its pointers offset to its rows).
WAVEPE_DEVICE void load_row_keys(int64_t *lo, int64_t *hi, int rows, const AttnParams &p, int64_t b, int64_t m0) {
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        const int64_t m = m0 + r < p.a.m ? m0 + r : p.a.m - 1;
        attn_keys(p, b, p.a.q_offset + m, p.a.causal != 0, lo[r], hi[r]);
    }
}

// ---- non-finite values in masked positions ------------------------------------------------
// Tiles hold zero rows for keys that no row of the CTA sees (padding, keys
// >= N, keys outside every row's range -- other documents, past the CTA's
// causal frontier: key_row_seen), so a product 0 * garbage never happens
// there.  Keys of the band -- seen by some rows of a warp, masked for others
// (the causal band; the keys of the neighbouring document for a warp whose
// rows straddle a boundary) -- stay in the tile; a masked row's P is 0 there,
// and 0 * inf or 0 * NaN in the tensor-core product would reach it.  So when
// a band row of the B operand holds a non-finite value (checked per warp and
// tile: warp_rows_nonfinite), the warp takes warp_rb_visible, which sums each
// row over the keys it sees only (selection, not multiplication).

// Key n of batch b inside [lo, hi) (the keys some row of the CTA sees) and not padded?
WAVEPE_DEVICE bool key_row_seen(const AttnParams &p, int64_t b, int64_t n, int64_t lo, int64_t hi) {
    return n >= lo && n < hi && n < p.a.n && !(p.a.key_padding_mask != nullptr && p.a.key_padding_mask[b * p.a.kpm_stride + n] != 0);
}

WAVEPE_DEVICE bool quad_any(bool v) {
    int x = v ? 1 : 0;
    x |= __shfl_xor_sync(kFullMask, x, 1);
    x |= __shfl_xor_sync(kFullMask, x, 2);
    return x != 0;
}
WAVEPE_DEVICE bool warp_any(bool v) {
    int x = v ? 1 : 0;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x |= __shfl_xor_sync(kFullMask, x, off);
    return x != 0;
}

// Does any of tile rows r_lo .. r_hi (first d columns) hold an inf or NaN?  Warp-collective.
template <class T>
WAVEPE_DEVICE bool warp_rows_nonfinite(const T *tile, int ld, int r_lo, int r_hi, int64_t d) {
    using A = acc_t<T>;
    bool bad = false;
    for (int r = r_lo; r <= r_hi; ++r)
        for (int c = threadIdx.x & 31; c < d; c += 32) {
            const A x = to_acc(tile[r * ld + c]);
            bad |= !(x - x == A(0));  // inf - inf and NaN - NaN are NaN
        }
    return warp_any(bad);
}

// A prefix block (the wide forward's and dQ's: every row of the CTA sees the block's keys from n0 on, up to its own
// last, rhi): the keys [0, lim) of the bn from k0 that a row whose keys end at hi sees (past N none).
WAVEPE_DEVICE int prefix_row_limit(const AttnParams &p, int64_t hi, int64_t k0, int bn) {
    const int64_t end = (hi < p.a.n ? hi : p.a.n) - k0;
    return end <= 0 ? 0 : end >= bn ? bn : int(end);
}
// Do a prefix block's tile rows of the keys some row of the warp does not see -- from the warp's first row's last
// key (warp_hi0) on, those the tile holds (the CTA's, below cta_hi and N) -- hold inf / NaN (0 times them would
// reach that row)?  Warp-collective.
template <class T, int BN>
WAVEPE_DEVICE bool prefix_band_nonfinite(const T *tile, int ld, const AttnParams &p, int64_t n0, int64_t warp_hi0,
                                         int64_t cta_hi) {
    const int first = prefix_row_limit(p, warp_hi0, n0, BN), held = prefix_row_limit(p, cta_hi, n0, BN);
    return first < held && warp_rows_nonfinite(tile, ld, first, held - 1, p.a.d);
}

// acc[dt] += P . B like warp_rb, but row r (lanes' rows g, g + 8: ri = 0, 1)
// sums only the keys first[ri] <= k <= lim[ri] of the tile (the keys it sees): the slow
// path for a tile whose band rows hold a non-finite value.  P is rounded to
// T first on the tensor-core types, as warp_rb's products see it.  The keys
// are walked at run time (P's register picked by selects, not an index into
// local memory) so that the rarely taken path adds no registers to the hot one.
template <class T, int KT8, int DT>
WAVEPE_DEVICE void warp_rb_visible(acc_t<T> (&acc)[DT][4], const acc_t<T> (&p)[KT8][4], const T *b_tile, int ldb,
                                   int dt_active, const int (&first)[2], const int (&lim)[2]) {
    using A = acc_t<T>;
    const int lane = threadIdx.x & 31, t = lane & 3;
#pragma unroll 1
    for (int k = 0; k < 8 * KT8; ++k) {
        const int kt = k / 8, e = k & 1, src = (k & 7) / 2;  // lane (g, src) holds P[.][k] in p[kt][2 ri + e]
        A mine[2] = {A(0), A(0)};
#pragma unroll
        for (int j = 0; j < KT8; ++j)
            if (j == kt) {
                mine[0] = e ? p[j][1] : p[j][0];
                mine[1] = e ? p[j][3] : p[j][2];
            }
        const T *brow = b_tile + k * ldb + 2 * t;
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
            A pv = __shfl_sync(kFullMask, mine[ri], (lane & ~3) | src);
            if constexpr (Traits<T>::kTensorCore) pv = to_acc(from_acc<T>(pv));
            if (k < first[ri] || k > lim[ri]) continue;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                if (dt < dt_active) {
                    acc[dt][2 * ri] += pv * to_acc(brow[dt * 8]);
                    acc[dt][2 * ri + 1] += pv * to_acc(brow[dt * 8 + 1]);
                }
        }
    }
}

// kmask[c] = 1 when key n0 + c is absent (>= N) or padded out.
WAVEPE_DEVICE void load_key_mask(uint8_t *kmask, int bn, const AttnParams &p, int64_t b, int64_t n0) {
    for (int c = threadIdx.x; c < bn; c += blockDim.x) {
        const int64_t n = n0 + c;
        kmask[c] = (n >= p.a.n || (p.a.key_padding_mask != nullptr && p.a.key_padding_mask[b * p.a.kpm_stride + n] != 0)) ? 1 : 0;
    }
}

template <class T>
WAVEPE_DEVICE acc_t<T> head_slope(const AttnParams &p, int64_t h) {
    if (p.pos_enc != WAVEPE_CUDA_PE_ALIBI) return acc_t<T>(0);
    return static_cast<const acc_t<T> *>(p.a.slopes)[h];
}

// acc += P . B, B = tile rows 0 .. 8 KT8 - 1 (keys n0 ..) at columns c0 .., for the warp whose
// rows see keys [rlo[r], rhi[r]) (load_row_keys) in a CTA whose tiles hold keys [cta_lo, cta_hi)
// (the others are zero rows): the tensor-core / FMA product over the 16-key steps up to the last key some
// row of the warp sees (past it every row's P is 0: the warp's causal frontier on the diagonal), unless the
// warp's band among those steps' rows (keys held but not seen by every row of the warp) holds an inf or
// NaN; then warp_rb_visible.
template <class T, int KT8, int DT>
WAVEPE_DEVICE void warp_rb_masked(acc_t<T> (&acc)[DT][4], const acc_t<T> (&pf)[KT8][4], const T *tile, int ld, int c0,
                                  int dt_active, acc_t<T> *scratch, const AttnParams &p, int64_t n0, const int64_t *rlo,
                                  const int64_t *rhi, int64_t cta_lo, int64_t cta_hi) {
    constexpr int BN = 8 * KT8, KK = (KT8 + 1) / 2;
    // the warp's last row sees keys up to w_hi, every row [a_lo, a_hi) (the ranges are non-decreasing in
    // the row); the product takes the first kk_hi 16-key steps, those up to w_hi (warp-uniform)
    const int64_t w_hi = rhi[15] - n0, a_lo = rlo[15] - n0, a_hi = rhi[0] - n0;
    const int kk_hi = w_hi <= 0 ? 0 : w_hi >= BN ? KK : int((w_hi + 15) / 16);
    // of those steps' rows, [t_lo, t_hi) are held (the others zero rows): its band is checked
    const int64_t t_end = (cta_hi < n0 + BN ? cta_hi : n0 + BN) - n0;
    const int64_t t_lo = (cta_lo > n0 ? cta_lo : n0) - n0, t_hi = t_end < 16 * kk_hi ? t_end : 16 * kk_hi;
    bool careful = false;
    if (t_lo < t_hi && (t_lo < a_lo || t_hi > a_hi)) {  // warp-uniform
        const int64_t b1 = t_hi < a_lo ? t_hi : a_lo, b2 = t_lo > a_hi ? t_lo : a_hi;
        if (t_lo < b1) careful = warp_rows_nonfinite(tile, ld, int(t_lo), int(b1 - 1), p.a.d);
        if (!careful && b2 < t_hi) careful = warp_rows_nonfinite(tile, ld, int(b2), int(t_hi - 1), p.a.d);
    }
    if (careful) {
        // the lane's rows see tile keys first[ri] .. lim[ri] (32-bit: clamped to the tile)
        int first[2], lim[2];
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
            const int r = frag_row(2 * ri);
            const int64_t f = rlo[r] - n0, l = rhi[r] - 1 - n0;
            first[ri] = f < 0 ? 0 : (f > BN ? BN : int(f));
            lim[ri] = l < -1 ? -1 : (l > BN - 1 ? BN - 1 : int(l));
        }
        warp_rb_visible<T, KT8, DT>(acc, pf, tile + c0, ld, dt_active, first, lim);
    } else {
        warp_rb<T, KT8, DT>(acc, pf, tile + c0, ld, dt_active, scratch, kk_hi);
    }
}

}  // namespace wavepe_cuda
