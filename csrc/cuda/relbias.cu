// relbias.cu: the relative-table bias on the GPU, forward and backward.
//
// Forward: a CTA computes a 64 x 64 tile of bias[b] = "Q T^T then skew"
// without materialising the skew: the tile needs table rows
// base - 63 .. base + 63 (base = q_offset + m0 - n0 - r_lo), a 127-row window
// staged in shared memory with the 64 query rows, chunk by chunk over d.  A
// thread owns a 4 x 4 block of outputs, whose 16 (m, n) pairs touch only 7
// window rows (m - n takes 7 values), so each step of the d loop is 4 + 7
// shared loads for 16 FMAs.  Tiles entirely in the causal future, or whose
// window misses the table (clamp off: the wavelet case, trimmed to its
// support), are written as zeros without touching q or T.
//
// Backward, deterministic (no atomics):
//   dq  a CTA owns (b, 64 query rows, 64 dims) and loops over the key tiles
//       the forward did not skip: dq[m] += sum_n dB[m, n] T[window(m - n)];
//   dT  a CTA owns (64 distances, 64 dims) and loops over b and the query
//       rows that reach its distances: W[r] = sum_{b,m} dB[b, m, m+q_off-r] q[b, m]
//       (a GEMM on the diagonals of dB), into a float workspace over the
//       distances that occur; a last kernel folds W into dT in a fixed order
//       (clamp: every distance below / above the table into its edge row)
//       and rounds to the table's dtype.
#include "common.cuh"

namespace wavepe_cuda {
namespace {

constexpr int kTile = 64;     // outputs per side of a CTA tile
constexpr int kChunk = 32;    // d columns staged per step (forward)
constexpr int kThreads = 256; // 16 x 16 threads, 4 x 4 outputs each
constexpr int kWin = 2 * kTile - 1;

struct RelBiasParams {
    int64_t batch, m, n, d, rows, r_lo, q_offset;
    int causal, clamp;
    int64_t inner;           // forward: matrix b is group b / inner, matrix b % inner of the group
    const void *q;
    int64_t q_so, q_sb, q_sm;
    const void *table;
    int64_t t_sr;
    void *bias;
    int64_t b_so, b_sb, b_sm;
    const void *grad;
    int64_t g_sb, g_sm;
    void *dq;
    int64_t dq_sb, dq_sm;
    void *dtable;
    void *work;          // dT workspace: (dist_hi - dist_lo + 1, d) accumulators
    int64_t dist_lo, dist_hi;
};

// Table row for window index w of a tile whose base row is `base`, or -1 for a zero row.
WAVEPE_DEVICE int64_t window_row(int64_t base, int w, const RelBiasParams &p) {
    int64_t t = base - (kTile - 1) + w;
    if (p.clamp) return t < 0 ? 0 : (t >= p.rows ? p.rows - 1 : t);
    return (t < 0 || t >= p.rows) ? -1 : t;
}

// Does the window of a tile with base row `base` touch the table at all?
WAVEPE_DEVICE bool window_hits_table(int64_t base, const RelBiasParams &p) {
    if (p.clamp) return p.rows > 0;
    return base + (kTile - 1) >= 0 && base - (kTile - 1) < p.rows;
}

// (kThreads, 1): with the thread count alone ptxas aimed at 64 registers on sm_90 and spilled
template <class T>
__global__ void __launch_bounds__(kThreads, 1) relbias_fwd_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    WAVEPE_SHARED_BASE(smem);
    A(*Qs)[kChunk + 1] = reinterpret_cast<A(*)[kChunk + 1]>(smem);
    A(*Ts)[kChunk + 1] = reinterpret_cast<A(*)[kChunk + 1]>(smem + sizeof(A) * kTile * (kChunk + 1));
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t mt = ceil_div(p.m, kTile), nt = ceil_div(p.n, kTile);
    const int64_t ntiles = p.batch * mt * nt;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t b = tile / (mt * nt), m0 = (tile / nt) % mt * kTile, n0 = tile % nt * kTile;
        const int64_t go = b / p.inner, gi = b % p.inner;  // (outer group, matrix in the group)
        const T *q = static_cast<const T *>(p.q) + go * p.q_so + gi * p.q_sb;
        const T *table = static_cast<const T *>(p.table);
        T *bias = static_cast<T *>(p.bias) + go * p.b_so + gi * p.b_sb;
        const int64_t base = p.q_offset + m0 - n0 - p.r_lo;
        const bool future = p.causal && n0 > p.q_offset + m0 + (kTile - 1);
        const bool work = !future && window_hits_table(base, p) && p.d > 0;
        A acc[4][4] = {};
        if (work) {
            for (int64_t c0 = 0; c0 < p.d; c0 += kChunk) {
                for (int i = tid; i < kTile * kChunk; i += kThreads) {
                    const int r = i / kChunk, c = i % kChunk;
                    const int64_t m = m0 + r, col = c0 + c;
                    Qs[r][c] = (m < p.m && col < p.d) ? to_acc(q[m * p.q_sm + col]) : A(0);
                }
                for (int i = tid; i < (kWin + 1) * kChunk; i += kThreads) {
                    const int w = i / kChunk, c = i % kChunk;
                    const int64_t t = window_row(base, w, p), col = c0 + c;
                    Ts[w][c] = (t >= 0 && col < p.d) ? to_acc(table[t * p.t_sr + col]) : A(0);
                }
                __syncthreads();
                // w = (4 ty + i) - (4 tx + j) + 63 = 4 (ty - tx) + 60 + (i - j + 3)
                const int w0 = 4 * (ty - tx) + 60;
                for (int c = 0; c < kChunk; ++c) {
                    A qv[4], tv[7];
#pragma unroll
                    for (int i = 0; i < 4; ++i) qv[i] = Qs[4 * ty + i][c];
#pragma unroll
                    for (int u = 0; u < 7; ++u) tv[u] = Ts[w0 + u][c];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] += qv[i] * tv[i - j + 3];
                }
                __syncthreads();
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t m = m0 + 4 * ty + i;
            if (m >= p.m) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t n = n0 + 4 * tx + j;
                if (n >= p.n) continue;
                const bool masked = p.causal && n > p.q_offset + m;
                bias[m * p.b_sm + n] = from_acc<T>(masked ? A(0) : acc[i][j]);
            }
        }
    }
}

// dq: CTA = (b, 64 query rows, 64 dims); thread = 4 rows x 4 dims.
template <class T>
__global__ void __launch_bounds__(kThreads) relbias_dq_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    WAVEPE_SHARED_BASE(smem);
    A(*Gs)[kTile + 1] = reinterpret_cast<A(*)[kTile + 1]>(smem);
    A(*Ts)[kTile + 1] = reinterpret_cast<A(*)[kTile + 1]>(smem + sizeof(A) * kTile * (kTile + 1));
    const T *grad = static_cast<const T *>(p.grad);
    const T *table = static_cast<const T *>(p.table);
    T *dq = static_cast<T *>(p.dq);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t mt = ceil_div(p.m, kTile), ct = ceil_div(p.d, kTile), nt = ceil_div(p.n, kTile);
    const int64_t ntiles = p.batch * mt * ct;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t b = tile / (mt * ct), m0 = (tile / ct) % mt * kTile, c0 = tile % ct * kTile;
        A acc[4][4] = {};
        for (int64_t j = 0; j < nt; ++j) {
            const int64_t n0 = j * kTile;
            if (p.causal && n0 > p.q_offset + m0 + (kTile - 1)) break;  // later tiles are all future
            const int64_t base = p.q_offset + m0 - n0 - p.r_lo;
            if (!window_hits_table(base, p)) continue;
            for (int i = tid; i < kTile * kTile; i += kThreads) {
                const int r = i / kTile, c = i % kTile;
                const int64_t m = m0 + r, n = n0 + c;
                const bool ok = m < p.m && n < p.n && !(p.causal && n > p.q_offset + m);
                Gs[r][c] = ok ? to_acc(grad[b * p.g_sb + m * p.g_sm + n]) : A(0);
            }
            for (int i = tid; i < (kWin + 1) * kTile; i += kThreads) {
                const int w = i / kTile, c = i % kTile;
                const int64_t t = window_row(base, w, p), col = c0 + c;
                Ts[w][c] = (t >= 0 && col < p.d) ? to_acc(table[t * p.t_sr + col]) : A(0);
            }
            __syncthreads();
            for (int n = 0; n < kTile; ++n) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const A g = Gs[4 * ty + i][n];
                    const int w = 4 * ty + i - n + (kTile - 1);
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj) acc[i][jj] += g * Ts[w][4 * tx + jj];
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t m = m0 + 4 * ty + i;
            if (m >= p.m) continue;
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int64_t col = c0 + 4 * tx + jj;
                if (col < p.d) dq[b * p.dq_sb + m * p.dq_sm + col] = from_acc<T>(acc[i][jj]);
            }
        }
    }
}

// W[r - dist_lo, :] = sum_b sum_m dB[b, m, q_offset + m - r] q[b, m, :]
// CTA = (64 distances, 64 dims); thread = 4 distances x 4 dims.
template <class T>
__global__ void __launch_bounds__(kThreads) relbias_dtable_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    WAVEPE_SHARED_BASE(smem);
    A(*Ds)[kTile + 1] = reinterpret_cast<A(*)[kTile + 1]>(smem);  // [m][r]
    A(*Qs)[kTile + 1] = reinterpret_cast<A(*)[kTile + 1]>(smem + sizeof(A) * kTile * (kTile + 1));  // [m][dim]
    const T *grad = static_cast<const T *>(p.grad);
    const T *q = static_cast<const T *>(p.q);
    A *work = static_cast<A *>(p.work);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t ndist = p.dist_hi - p.dist_lo + 1;
    const int64_t rt = ceil_div(ndist, kTile), ct = ceil_div(p.d, kTile);
    for (int64_t tile = blockIdx.x; tile < rt * ct; tile += gridDim.x) {
        const int64_t r0 = p.dist_lo + tile / ct * kTile, c0 = tile % ct * kTile;
        // query rows whose keys n = q_offset + m - r fall in [0, N) for some r in the chunk
        int64_t m_lo = r0 - p.q_offset, m_hi = r0 + (kTile - 1) - p.q_offset + p.n - 1;
        if (m_lo < 0) m_lo = 0;
        if (m_hi > p.m - 1) m_hi = p.m - 1;
        A acc[4][4] = {};
        for (int64_t b = 0; b < p.batch; ++b) {
            for (int64_t m0 = m_lo; m0 <= m_hi; m0 += kTile) {
                for (int i = tid; i < kTile * kTile; i += kThreads) {
                    const int mm = i / kTile, rr = i % kTile;
                    const int64_t m = m0 + mm, r = r0 + rr, n = p.q_offset + m - r;
                    const bool ok = m <= m_hi && r <= p.dist_hi && n >= 0 && n < p.n;
                    Ds[mm][rr] = ok ? to_acc(grad[b * p.g_sb + m * p.g_sm + n]) : A(0);
                }
                for (int i = tid; i < kTile * kTile; i += kThreads) {
                    const int mm = i / kTile, c = i % kTile;
                    const int64_t m = m0 + mm, col = c0 + c;
                    Qs[mm][c] = (m <= m_hi && col < p.d) ? to_acc(q[b * p.q_sb + m * p.q_sm + col]) : A(0);
                }
                __syncthreads();
                for (int mm = 0; mm < kTile; ++mm) {
                    A dv[4], qv[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) dv[i] = Ds[mm][4 * ty + i];
#pragma unroll
                    for (int j = 0; j < 4; ++j) qv[j] = Qs[mm][4 * tx + j];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[i][j] += dv[i] * qv[j];
                }
                __syncthreads();
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t r = r0 + 4 * ty + i;
            if (r > p.dist_hi) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t col = c0 + 4 * tx + j;
                if (col < p.d) work[(r - p.dist_lo) * p.d + col] = acc[i][j];
            }
        }
    }
}

// dT[t, :] = sum of W over the distances that map to row t, in increasing distance.
template <class T>
__global__ void __launch_bounds__(kThreads) relbias_dtable_fold_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    const A *work = static_cast<const A *>(p.work);
    T *dtable = static_cast<T *>(p.dtable);
    const int64_t total = p.rows * p.d;
    for (int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total; idx += int64_t(gridDim.x) * kThreads) {
        const int64_t t = idx / p.d, col = idx % p.d;
        int64_t lo = p.r_lo + t, hi = p.r_lo + t;
        if (p.clamp && t == 0) lo = INT64_MIN;
        if (p.clamp && t == p.rows - 1) hi = INT64_MAX;
        if (lo < p.dist_lo) lo = p.dist_lo;
        if (hi > p.dist_hi) hi = p.dist_hi;
        A sum = 0;
        for (int64_t r = lo; r <= hi; ++r) sum += work[(r - p.dist_lo) * p.d + col];
        dtable[idx] = from_acc<T>(sum);
    }
}

RelBiasParams make_params(const wavepe_relbias_args *a) {
    RelBiasParams p{};
    const int64_t outer = a->outer > 1 ? a->outer : 1;
    p.batch = outer * a->batch;  // every matrix of every outer group
    p.inner = a->batch > 0 ? a->batch : 1;
    p.m = a->m;
    p.n = a->n;
    p.d = a->d;
    p.rows = a->rows;
    p.r_lo = a->r_lo;
    p.q_offset = a->q_offset;
    p.causal = a->causal != 0;
    p.clamp = a->clamp != 0;
    p.q = a->q;
    p.q_so = a->q_stride_o;
    p.q_sb = a->q_stride_g;
    p.q_sm = a->q_stride_m;
    p.table = a->table;
    p.t_sr = a->d;  // dense
    p.bias = a->bias;
    p.b_so = a->bias_stride_o;
    p.b_sb = a->bias_stride_g;
    p.b_sm = a->bias_stride_m;
    p.grad = a->grad;
    p.g_sb = a->grad_stride_g;
    p.g_sm = a->grad_stride_m;
    p.dq = a->dq;
    p.dq_sb = a->dq_stride_g;
    p.dq_sm = a->dq_stride_m;
    p.dtable = a->dtable;
    // distances that occur: q_offset - (N - 1) .. q_offset + M - 1, causal >= 0,
    // without clamp only those inside the table
    p.dist_lo = a->q_offset - (a->n - 1);
    p.dist_hi = a->q_offset + a->m - 1;
    if (p.causal && p.dist_lo < 0) p.dist_lo = 0;
    if (!p.clamp) {
        if (p.dist_lo < a->r_lo) p.dist_lo = a->r_lo;
        if (p.dist_hi > a->r_lo + a->rows - 1) p.dist_hi = a->r_lo + a->rows - 1;
    }
    if (a->m == 0 || a->n == 0 || p.batch == 0) p.dist_hi = p.dist_lo - 1;  // nothing occurs
    return p;
}

unsigned grid_for(int64_t tiles) {
    const int64_t cap = int64_t(device_sm_count()) * 64;
    return unsigned(tiles < 1 ? 1 : (tiles < cap ? tiles : cap));
}

constexpr size_t smem_fwd(size_t acc) { return acc * (kTile + kWin + 1) * (kChunk + 1); }
constexpr size_t smem_bwd(size_t acc) { return acc * (kTile + kWin + 1) * (kTile + 1); }

template <class T>
cudaError_t launch_fwd(const wavepe_relbias_args *a, cudaStream_t stream) {
    const RelBiasParams p = make_params(a);
    const int64_t tiles = p.batch * ceil_div(p.m, kTile) * ceil_div(p.n, kTile);
    if (tiles == 0) return cudaSuccess;
    const size_t smem = smem_fwd(sizeof(acc_t<T>));
    cudaError_t err = allow_dynamic_smem(relbias_fwd_kernel<T>, smem);
    if (err != cudaSuccess) return err;
    return launch(relbias_fwd_kernel<T>, dim3(grid_for(tiles)), dim3(kThreads), smem, stream, p);
}

template <class T>
cudaError_t launch_bwd(const wavepe_relbias_args *a, unsigned kernels, void *work, size_t work_bytes,
                       cudaStream_t stream) {
    RelBiasParams p = make_params(a);
    p.work = work;
    cudaError_t err = cudaSuccess;
    const size_t smem = smem_bwd(sizeof(acc_t<T>));
    if ((kernels & WAVEPE_RELBIAS_GRAD_Q) && p.batch * p.m * p.d > 0) {
        const int64_t tiles = p.batch * ceil_div(p.m, kTile) * ceil_div(p.d, kTile);
        err = allow_dynamic_smem(relbias_dq_kernel<T>, smem);
        if (err == cudaSuccess)
            err = launch(relbias_dq_kernel<T>, dim3(grid_for(tiles)), dim3(kThreads), smem, stream, p);
        if (err != cudaSuccess) return err;
    }
    if ((kernels & WAVEPE_RELBIAS_GRAD_TABLE) && p.rows * p.d > 0) {
        const int64_t ndist = p.dist_hi - p.dist_lo + 1;
        if (ndist > 0) {
            if (work == nullptr || work_bytes < size_t(ndist) * size_t(p.d) * sizeof(acc_t<T>))
                return cudaErrorInvalidValue;
            const int64_t tiles = ceil_div(ndist, kTile) * ceil_div(p.d, kTile);
            err = allow_dynamic_smem(relbias_dtable_kernel<T>, smem);
            if (err == cudaSuccess)
                err = launch(relbias_dtable_kernel<T>, dim3(grid_for(tiles)), dim3(kThreads), smem, stream, p);
            if (err != cudaSuccess) return err;
        }
        err = launch(relbias_dtable_fold_kernel<T>, dim3(grid_for(ceil_div(p.rows * p.d, kThreads))), dim3(kThreads),
                     0, stream, p);
    }
    return err;
}

}  // namespace
}  // namespace wavepe_cuda

using namespace wavepe_cuda;

extern "C" int wavepe_cuda_relbias_check(const wavepe_relbias_args *a, unsigned kernels, wavepe_error *err) {
    if (a == nullptr) return wavepe_fail(err, WAVEPE_E_NULL, "no arguments");
    const bool fwd = (kernels & WAVEPE_RELBIAS_FORWARD) != 0;
    if (fwd && kernels != WAVEPE_RELBIAS_FORWARD)
        return wavepe_fail(err, WAVEPE_E_INVALID, "kernels=%u: the forward and the backward are separate launches", kernels);
    return wavepe_relbias_validate(a, kernels, err);
}

extern "C" cudaError_t wavepe_cuda_relbias_fwd(const wavepe_relbias_args *a, cudaStream_t stream) {
    if (wavepe_cuda_relbias_check(a, WAVEPE_RELBIAS_FORWARD, nullptr) != WAVEPE_OK) return cudaErrorInvalidValue;
    return dispatch_dtype(a->dtype, [&](auto tag) { return launch_fwd<decltype(tag)>(a, stream); });
}

extern "C" size_t wavepe_cuda_relbias_bwd_workspace_bytes(const wavepe_relbias_args *a, unsigned kernels) {
    if (a == nullptr || !(kernels & WAVEPE_RELBIAS_GRAD_TABLE) || wavepe_cuda_relbias_check(a, kernels, nullptr) != WAVEPE_OK)
        return 0;
    const RelBiasParams p = make_params(a);
    const int64_t ndist = p.dist_hi - p.dist_lo + 1;
    if (ndist <= 0) return 0;
    const size_t acc = a->dtype == WAVEPE_F64 ? 8 : 4;
    return size_t(ndist) * size_t(a->d) * acc;
}

extern "C" cudaError_t wavepe_cuda_relbias_bwd(const wavepe_relbias_args *a, unsigned kernels, void *workspace,
                                               size_t workspace_bytes, cudaStream_t stream) {
    if (wavepe_cuda_relbias_check(a, kernels, nullptr) != WAVEPE_OK || (kernels & WAVEPE_RELBIAS_FORWARD))
        return cudaErrorInvalidValue;
    return dispatch_dtype(a->dtype, [&](auto tag) {
        return launch_bwd<decltype(tag)>(a, kernels, workspace, workspace_bytes, stream);
    });
}
