// rope.cu: rotary position embedding on the GPU (forward and its inverse).
//
// One thread owns PPT consecutive rotation pairs of one (batch, position) —
// 16 bytes of each half-row, or 16 contiguous bytes in layout interleaved —
// and loops over the heads of its head group, two at a time, in both tensors
// (q and k): the angle pos * inv_freq[i] is formed in float64 and turned into
// cos/sin once, in float64, then reused for every head, so the loop is pure
// loads, a few FMAs and stores.  Rows move in 16-byte vector accesses when
// they are aligned, element by element otherwise.  A warp covers consecutive
// pairs of a row, so the accesses of a head are coalesced; loading two heads
// before storing either keeps two loads per thread in flight.  When
// batch * len is too small to fill the GPU (decoding), heads are split into
// groups over gridDim.y (cos/sin are then recomputed per group, which is cheap).
#include "common.cuh"

namespace wavepe_cuda {
namespace {

constexpr int kRopeThreads = 128;

struct RopeParams {
    wavepe_rope_args a;  // the caller's arguments (core/rope.h), read as they are; k.heads = 0: no k
    // derived by launch_rope
    int64_t half, chunks, heads_per_group;
};

// The tensor of q's heads (0) or k's (1).
WAVEPE_DEVICE const wavepe_rope_tensor &rope_tensor(const RopeParams &p, int which) { return which ? p.a.k : p.a.q; }

// Loads/stores of N consecutive elements: vectorised when VEC (the host
// checked alignment), element-wise otherwise.
template <bool VEC, class T, int N>
WAVEPE_DEVICE void load_n(T (&v)[N], const T *p) {
    constexpr int bytes = N * int(sizeof(T));
    if constexpr (VEC && bytes % 16 == 0) {
#pragma unroll
        for (int i = 0; i < bytes / 16; ++i) copy16(reinterpret_cast<char *>(v) + 16 * i, reinterpret_cast<const char *>(p) + 16 * i);
    } else if constexpr (VEC && bytes == 8) {
        copy8(v, p);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = p[i];
    }
}
template <bool VEC, class T, int N>
WAVEPE_DEVICE void store_n(T *p, const T (&v)[N]) {
    constexpr int bytes = N * int(sizeof(T));
    if constexpr (VEC && bytes % 16 == 0) {
#pragma unroll
        for (int i = 0; i < bytes / 16; ++i) copy16(reinterpret_cast<char *>(p) + 16 * i, reinterpret_cast<const char *>(v) + 16 * i);
    } else if constexpr (VEC && bytes == 8) {
        copy8(p, v);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) p[i] = v[i];
    }
}

// Pairs per thread: one 16-byte access per half-row (layout half) or per
// row segment (interleaved: PPT pairs are 2 PPT contiguous elements).
template <class T, bool INTERLEAVED>
constexpr int pairs_per_thread() {
    return (INTERLEAVED ? 8 : 16) / int(sizeof(T));
}

// The thread's PPT pairs (a, b) of one head row, and their rotation back.
template <class T, bool VEC, bool INTERLEAVED, int PPT>
struct RopeRow {
    T a[PPT], b[PPT];

    WAVEPE_DEVICE void load(const T *x, int64_t i0, int64_t half, bool full) {
        if (INTERLEAVED) {
            T v[2 * PPT];
            if (VEC && full) {
                load_n<VEC>(v, x + 2 * i0);
            } else {
#pragma unroll
                for (int k = 0; k < 2 * PPT; ++k) v[k] = i0 + k / 2 < half ? x[2 * i0 + k] : zero_value<T>();
            }
#pragma unroll
            for (int k = 0; k < PPT; ++k) {
                a[k] = v[2 * k];
                b[k] = v[2 * k + 1];
            }
        } else if (VEC && full) {
            load_n<VEC>(a, x + i0);
            load_n<VEC>(b, x + half + i0);
        } else {
#pragma unroll
            for (int k = 0; k < PPT; ++k) {
                a[k] = i0 + k < half ? x[i0 + k] : zero_value<T>();
                b[k] = i0 + k < half ? x[half + i0 + k] : zero_value<T>();
            }
        }
    }

    // (a cos - b sin, b cos + a sin) with scale folded into cos/sin; pass-through
    // pairs are exactly x * scale (no 0 * inf = NaN from the sine term)
    template <class A>
    WAVEPE_DEVICE void rotate(const A (&c)[PPT], const A (&s)[PPT], const bool (&rot)[PPT], A scale) {
#pragma unroll
        for (int k = 0; k < PPT; ++k) {
            const A av = to_acc(a[k]), bv = to_acc(b[k]);
            a[k] = from_acc<T>(rot[k] ? av * c[k] - bv * s[k] : av * scale);
            b[k] = from_acc<T>(rot[k] ? bv * c[k] + av * s[k] : bv * scale);
        }
    }

    WAVEPE_DEVICE void store(T *o, int64_t i0, int64_t half, bool full) const {
        if (INTERLEAVED) {
            T v[2 * PPT];
#pragma unroll
            for (int k = 0; k < PPT; ++k) {
                v[2 * k] = a[k];
                v[2 * k + 1] = b[k];
            }
            if (VEC && full) {
                store_n<VEC>(o + 2 * i0, v);
            } else {
#pragma unroll
                for (int k = 0; k < 2 * PPT; ++k)
                    if (i0 + k / 2 < half) o[2 * i0 + k] = v[k];
            }
        } else if (VEC && full) {
            store_n<VEC>(o + i0, a);
            store_n<VEC>(o + half + i0, b);
        } else {
#pragma unroll
            for (int k = 0; k < PPT; ++k) {
                if (i0 + k < half) {
                    o[i0 + k] = a[k];
                    o[half + i0 + k] = b[k];
                }
            }
        }
    }
};

template <class T, bool VEC, bool INTERLEAVED>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(RopeParams p) {
    using A = acc_t<T>;
    constexpr int PPT = pairs_per_thread<T, INTERLEAVED>();
    const int64_t idx = int64_t(blockIdx.x) * kRopeThreads + threadIdx.x;
    const int64_t total = p.a.batch * p.a.len * p.chunks;
    if (idx >= total) return;  // no barriers in this kernel
    const int64_t chunk = idx % p.chunks;
    const int64_t bl = idx / p.chunks;
    const int64_t l = bl % p.a.len, b = bl / p.a.len;
    const int64_t i0 = chunk * PPT;  // first pair

    // cos/sin (times scale; -angle for the inverse) of the thread's pairs
    const int64_t pos = p.a.positions ? p.a.positions[b * p.a.pos_stride_b + l * p.a.pos_stride_l] : p.a.offset + l;
    A c[PPT], s[PPT];
    bool rot[PPT];
#pragma unroll
    for (int k = 0; k < PPT; ++k) {
        const int64_t i = i0 + k;
        rot[k] = i < p.a.rotary_pairs;
        double sn = 0.0, cs = 1.0;
        if (rot[k]) sincos(double(pos) * p.a.inv_freq[i], &sn, &cs);
        c[k] = A(cs * p.a.scale);
        s[k] = A((p.a.inverse ? -sn : sn) * p.a.scale);
    }
    const A scale = A(p.a.scale);
    const bool full = i0 + PPT <= p.half;

    // Two heads per step, both loaded before either is stored: twice the loads
    // in flight (the outputs never overlap another head's inputs).
    const int64_t total_heads = p.a.q.heads + p.a.k.heads;
    const int64_t h_begin = int64_t(blockIdx.y) * p.heads_per_group;
    const int64_t h_end = h_begin + p.heads_per_group < total_heads ? h_begin + p.heads_per_group : total_heads;
    auto row_ptrs = [&](int64_t hh, const T *&x, T *&o) {
        const int which = hh < p.a.q.heads ? 0 : 1;
        const wavepe_rope_tensor &t = rope_tensor(p, which);
        const int64_t h = which == 0 ? hh : hh - p.a.q.heads;
        x = static_cast<const T *>(t.in) + b * t.in_stride_b + h * t.in_stride_h + l * t.in_stride_l;
        o = static_cast<T *>(t.out) + b * t.out_stride_b + h * t.out_stride_h + l * t.out_stride_l;
    };
    for (int64_t hh = h_begin; hh < h_end; hh += 2) {
        const bool second = hh + 1 < h_end;
        const T *x0, *x1 = nullptr;
        T *o0, *o1 = nullptr;
        row_ptrs(hh, x0, o0);
        if (second) row_ptrs(hh + 1, x1, o1);
        RopeRow<T, VEC, INTERLEAVED, PPT> r0, r1;
        r0.load(x0, i0, p.half, full);
        if (second) r1.load(x1, i0, p.half, full);
        r0.rotate(c, s, rot, scale);
        r0.store(o0, i0, p.half, full);
        if (second) {
            r1.rotate(c, s, rot, scale);
            r1.store(o1, i0, p.half, full);
        }
    }
}

// Every row start of the tensor (and each half-row in layout HALF) on a
// `bytes` boundary, so that the vector accesses are aligned.
bool rows_aligned(const void *base, int64_t sb, int64_t sh, int64_t sl, int64_t elem, int64_t half, int layout,
                  size_t bytes) {
    if (!aligned_to(base, bytes)) return false;
    const int64_t strides[3] = {sb, sh, sl};
    for (int64_t s : strides)
        if ((s * elem) % int64_t(bytes) != 0) return false;
    if (layout == WAVEPE_ROPE_HALF && (half * elem) % int64_t(bytes) != 0) return false;
    return true;
}

template <class T>
cudaError_t launch_rope(const wavepe_rope_args *a, cudaStream_t stream) {
    const bool inter = a->layout == WAVEPE_ROPE_INTERLEAVED;
    const int PPT = inter ? pairs_per_thread<T, true>() : pairs_per_thread<T, false>();
    RopeParams p{};
    p.a = *a;
    p.half = a->head_dim / 2;
    p.chunks = ceil_div(p.half, PPT);
    const int64_t total_heads = a->q.heads + a->k.heads;
    const int64_t threads = p.a.batch * p.a.len * p.chunks;
    if (threads == 0 || total_heads == 0) return cudaSuccess;

    // head groups: enough threads in flight to cover the GPU (~2048 per SM)
    const int64_t want = int64_t(device_sm_count()) * 2048;
    int64_t groups = threads >= want ? 1 : ceil_div(want, threads);
    if (groups > total_heads) groups = total_heads;
    if (groups > 65535) groups = 65535;
    p.heads_per_group = ceil_div(total_heads, groups);
    groups = ceil_div(total_heads, p.heads_per_group);

    const int64_t elem = int64_t(sizeof(T));
    const size_t align = 16;  // every vector access is 16 bytes
    bool vec = p.half % PPT == 0;
    for (int i = 0; i < 2 && vec; ++i) {
        const wavepe_rope_tensor &t = i ? p.a.k : p.a.q;
        if (t.heads == 0) continue;
        vec = rows_aligned(t.in, t.in_stride_b, t.in_stride_h, t.in_stride_l, elem, p.half, a->layout, align) &&
              rows_aligned(t.out, t.out_stride_b, t.out_stride_h, t.out_stride_l, elem, p.half, a->layout, align);
    }
    const dim3 grid(unsigned(ceil_div(threads, kRopeThreads)), unsigned(groups));
    if (vec && inter) return launch(rope_kernel<T, true, true>, grid, dim3(kRopeThreads), 0, stream, p);
    if (vec) return launch(rope_kernel<T, true, false>, grid, dim3(kRopeThreads), 0, stream, p);
    if (inter) return launch(rope_kernel<T, false, true>, grid, dim3(kRopeThreads), 0, stream, p);
    return launch(rope_kernel<T, false, false>, grid, dim3(kRopeThreads), 0, stream, p);
}

}  // namespace
}  // namespace wavepe_cuda

using namespace wavepe_cuda;

extern "C" int wavepe_cuda_rope_check(const wavepe_rope_args *a, wavepe_error *err) {
    if (a == nullptr) return wavepe_fail(err, WAVEPE_E_NULL, "no arguments");
    const int status = wavepe_rope_validate(a, err);
    if (status != WAVEPE_OK) return status;
    // this launcher's own limit: the grid's x dimension (batch * len * pairs / 128 threads)
    int64_t grid_threads = 0;
    if (wavepe_mul_overflow(a->batch, a->len, &grid_threads) ||
        wavepe_mul_overflow(grid_threads, a->head_dim / 2 + 1, &grid_threads) ||
        grid_threads / kRopeThreads >= INT32_MAX)
        return wavepe_fail(err, WAVEPE_E_OVERFLOW, "batch=%lld x length=%lld positions exceed the CUDA grid",
                           (long long)a->batch, (long long)a->len);
    return WAVEPE_OK;
}

extern "C" cudaError_t wavepe_cuda_rope(const wavepe_rope_args *a, cudaStream_t stream) {
    if (wavepe_cuda_rope_check(a, nullptr) != WAVEPE_OK) return cudaErrorInvalidValue;
    return dispatch_dtype(a->dtype, [&](auto tag) { return launch_rope<decltype(tag)>(a, stream); });
}
