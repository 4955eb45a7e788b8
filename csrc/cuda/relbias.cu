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
    // The caller's arguments (core/relbias.h), read as they are; the kernels write bias, dq, dtable
    // through it.
    wavepe_relbias_args a;
    // derived by make_params
    int64_t matrices;        // forward: outer groups x a.batch matrices (a.outer 0 reads as 1)
    int64_t inner;           // forward: matrix b is group b / inner, matrix b % inner of the group
    void *work;              // dT workspace: (dist_hi - dist_lo + 1, d) accumulators
    int64_t dist_lo, dist_hi;
};

// Table row for window index w of a tile whose base row is `base`, or -1 for a zero row.
WAVEPE_DEVICE int64_t window_row(int64_t base, int w, const RelBiasParams &p) {
    int64_t t = base - (kTile - 1) + w;
    if (p.a.clamp) return t < 0 ? 0 : (t >= p.a.rows ? p.a.rows - 1 : t);
    return (t < 0 || t >= p.a.rows) ? -1 : t;
}

// Does the window of a tile with base row `base` touch the table at all?
WAVEPE_DEVICE bool window_hits_table(int64_t base, const RelBiasParams &p) {
    if (p.a.clamp) return p.a.rows > 0;
    return base + (kTile - 1) >= 0 && base - (kTile - 1) < p.a.rows;
}

// (kThreads, 1): with the thread count alone ptxas aimed at 64 registers on sm_90 and spilled
template <class T>
__global__ void __launch_bounds__(kThreads, 1) relbias_fwd_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    WAVEPE_SHARED_BASE(smem);
    A(*Qs)[kChunk + 1] = reinterpret_cast<A(*)[kChunk + 1]>(smem);
    A(*Ts)[kChunk + 1] = reinterpret_cast<A(*)[kChunk + 1]>(smem + sizeof(A) * kTile * (kChunk + 1));
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t mt = ceil_div(p.a.m, kTile), nt = ceil_div(p.a.n, kTile);
    const int64_t ntiles = p.matrices * mt * nt;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t b = tile / (mt * nt), m0 = (tile / nt) % mt * kTile, n0 = tile % nt * kTile;
        const int64_t go = b / p.inner, gi = b % p.inner;  // (outer group, matrix in the group)
        const T *q = static_cast<const T *>(p.a.q) + go * p.a.q_stride_o + gi * p.a.q_stride_g;
        const T *table = static_cast<const T *>(p.a.table);
        T *bias = static_cast<T *>(p.a.bias) + go * p.a.bias_stride_o + gi * p.a.bias_stride_g;
        const int64_t base = p.a.q_offset + m0 - n0 - p.a.r_lo;
        const bool future = p.a.causal && n0 > p.a.q_offset + m0 + (kTile - 1);
        const bool work = !future && window_hits_table(base, p) && p.a.d > 0;
        A acc[4][4] = {};
        if (work) {
            for (int64_t c0 = 0; c0 < p.a.d; c0 += kChunk) {
                for (int i = tid; i < kTile * kChunk; i += kThreads) {
                    const int r = i / kChunk, c = i % kChunk;
                    const int64_t m = m0 + r, col = c0 + c;
                    Qs[r][c] = (m < p.a.m && col < p.a.d) ? to_acc(q[m * p.a.q_stride_m + col]) : A(0);
                }
                for (int i = tid; i < (kWin + 1) * kChunk; i += kThreads) {
                    const int w = i / kChunk, c = i % kChunk;
                    const int64_t t = window_row(base, w, p), col = c0 + c;
                    Ts[w][c] = (t >= 0 && col < p.a.d) ? to_acc(table[t * p.a.d + col]) : A(0);
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
            if (m >= p.a.m) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t n = n0 + 4 * tx + j;
                if (n >= p.a.n) continue;
                const bool masked = p.a.causal && n > p.a.q_offset + m;
                bias[m * p.a.bias_stride_m + n] = from_acc<T>(masked ? A(0) : acc[i][j]);
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
    const T *grad = static_cast<const T *>(p.a.grad);
    const T *table = static_cast<const T *>(p.a.table);
    T *dq = static_cast<T *>(p.a.dq);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t mt = ceil_div(p.a.m, kTile), ct = ceil_div(p.a.d, kTile), nt = ceil_div(p.a.n, kTile);
    const int64_t ntiles = p.matrices * mt * ct;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t b = tile / (mt * ct), m0 = (tile / ct) % mt * kTile, c0 = tile % ct * kTile;
        A acc[4][4] = {};
        for (int64_t j = 0; j < nt; ++j) {
            const int64_t n0 = j * kTile;
            if (p.a.causal && n0 > p.a.q_offset + m0 + (kTile - 1)) break;  // later tiles are all future
            const int64_t base = p.a.q_offset + m0 - n0 - p.a.r_lo;
            if (!window_hits_table(base, p)) continue;
            for (int i = tid; i < kTile * kTile; i += kThreads) {
                const int r = i / kTile, c = i % kTile;
                const int64_t m = m0 + r, n = n0 + c;
                const bool ok = m < p.a.m && n < p.a.n && !(p.a.causal && n > p.a.q_offset + m);
                Gs[r][c] = ok ? to_acc(grad[b * p.a.grad_stride_g + m * p.a.grad_stride_m + n]) : A(0);
            }
            for (int i = tid; i < (kWin + 1) * kTile; i += kThreads) {
                const int w = i / kTile, c = i % kTile;
                const int64_t t = window_row(base, w, p), col = c0 + c;
                Ts[w][c] = (t >= 0 && col < p.a.d) ? to_acc(table[t * p.a.d + col]) : A(0);
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
            if (m >= p.a.m) continue;
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int64_t col = c0 + 4 * tx + jj;
                if (col < p.a.d) dq[b * p.a.dq_stride_g + m * p.a.dq_stride_m + col] = from_acc<T>(acc[i][jj]);
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
    const T *grad = static_cast<const T *>(p.a.grad);
    const T *q = static_cast<const T *>(p.a.q);
    A *work = static_cast<A *>(p.work);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t ndist = p.dist_hi - p.dist_lo + 1;
    const int64_t rt = ceil_div(ndist, kTile), ct = ceil_div(p.a.d, kTile);
    for (int64_t tile = blockIdx.x; tile < rt * ct; tile += gridDim.x) {
        const int64_t r0 = p.dist_lo + tile / ct * kTile, c0 = tile % ct * kTile;
        // query rows whose keys n = q_offset + m - r fall in [0, N) for some r in the chunk
        int64_t m_lo = r0 - p.a.q_offset, m_hi = r0 + (kTile - 1) - p.a.q_offset + p.a.n - 1;
        if (m_lo < 0) m_lo = 0;
        if (m_hi > p.a.m - 1) m_hi = p.a.m - 1;
        A acc[4][4] = {};
        for (int64_t b = 0; b < p.matrices; ++b) {
            for (int64_t m0 = m_lo; m0 <= m_hi; m0 += kTile) {
                for (int i = tid; i < kTile * kTile; i += kThreads) {
                    const int mm = i / kTile, rr = i % kTile;
                    const int64_t m = m0 + mm, r = r0 + rr, n = p.a.q_offset + m - r;
                    const bool ok = m <= m_hi && r <= p.dist_hi && n >= 0 && n < p.a.n;
                    Ds[mm][rr] = ok ? to_acc(grad[b * p.a.grad_stride_g + m * p.a.grad_stride_m + n]) : A(0);
                }
                for (int i = tid; i < kTile * kTile; i += kThreads) {
                    const int mm = i / kTile, c = i % kTile;
                    const int64_t m = m0 + mm, col = c0 + c;
                    Qs[mm][c] = (m <= m_hi && col < p.a.d) ? to_acc(q[b * p.a.q_stride_g + m * p.a.q_stride_m + col]) : A(0);
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
                if (col < p.a.d) work[(r - p.dist_lo) * p.a.d + col] = acc[i][j];
            }
        }
    }
}

// dT[t, :] = sum of W over the distances that map to row t, in increasing distance.
template <class T>
__global__ void __launch_bounds__(kThreads) relbias_dtable_fold_kernel(RelBiasParams p) {
    using A = acc_t<T>;
    const A *work = static_cast<const A *>(p.work);
    T *dtable = static_cast<T *>(p.a.dtable);
    const int64_t total = p.a.rows * p.a.d;
    for (int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total; idx += int64_t(gridDim.x) * kThreads) {
        const int64_t t = idx / p.a.d, col = idx % p.a.d;
        int64_t lo = p.a.r_lo + t, hi = p.a.r_lo + t;
        if (p.a.clamp && t == 0) lo = INT64_MIN;
        if (p.a.clamp && t == p.a.rows - 1) hi = INT64_MAX;
        if (lo < p.dist_lo) lo = p.dist_lo;
        if (hi > p.dist_hi) hi = p.dist_hi;
        A sum = 0;
        for (int64_t r = lo; r <= hi; ++r) sum += work[(r - p.dist_lo) * p.a.d + col];
        dtable[idx] = from_acc<T>(sum);
    }
}

RelBiasParams make_params(const wavepe_relbias_args *a) {
    RelBiasParams p{};
    p.a = *a;
    const int64_t outer = a->outer > 1 ? a->outer : 1;
    p.matrices = outer * a->batch;  // every matrix of every outer group
    p.inner = a->batch > 0 ? a->batch : 1;
    // distances that occur: q_offset - (N - 1) .. q_offset + M - 1, causal >= 0,
    // without clamp only those inside the table
    p.dist_lo = a->q_offset - (a->n - 1);
    p.dist_hi = a->q_offset + a->m - 1;
    if (p.a.causal && p.dist_lo < 0) p.dist_lo = 0;
    if (!p.a.clamp) {
        if (p.dist_lo < a->r_lo) p.dist_lo = a->r_lo;
        if (p.dist_hi > a->r_lo + a->rows - 1) p.dist_hi = a->r_lo + a->rows - 1;
    }
    if (a->m == 0 || a->n == 0 || p.matrices == 0) p.dist_hi = p.dist_lo - 1;  // nothing occurs
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
    const int64_t tiles = p.matrices * ceil_div(p.a.m, kTile) * ceil_div(p.a.n, kTile);
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
    if ((kernels & WAVEPE_RELBIAS_GRAD_Q) && p.matrices * p.a.m * p.a.d > 0) {
        const int64_t tiles = p.matrices * ceil_div(p.a.m, kTile) * ceil_div(p.a.d, kTile);
        err = allow_dynamic_smem(relbias_dq_kernel<T>, smem);
        if (err == cudaSuccess)
            err = launch(relbias_dq_kernel<T>, dim3(grid_for(tiles)), dim3(kThreads), smem, stream, p);
        if (err != cudaSuccess) return err;
    }
    if ((kernels & WAVEPE_RELBIAS_GRAD_TABLE) && p.a.rows * p.a.d > 0) {
        const int64_t ndist = p.dist_hi - p.dist_lo + 1;
        if (ndist > 0) {
            if (work == nullptr || work_bytes < size_t(ndist) * size_t(p.a.d) * sizeof(acc_t<T>))
                return cudaErrorInvalidValue;
            const int64_t tiles = ceil_div(ndist, kTile) * ceil_div(p.a.d, kTile);
            err = allow_dynamic_smem(relbias_dtable_kernel<T>, smem);
            if (err == cudaSuccess)
                err = launch(relbias_dtable_kernel<T>, dim3(grid_for(tiles)), dim3(kThreads), smem, stream, p);
            if (err != cudaSuccess) return err;
        }
        err = launch(relbias_dtable_fold_kernel<T>, dim3(grid_for(ceil_div(p.a.rows * p.a.d, kThreads))), dim3(kThreads),
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
