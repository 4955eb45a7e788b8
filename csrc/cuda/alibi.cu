// alibi.cu: the ALiBi bias tensor on the GPU (the fused attention computes
// ALiBi in its tiles and never needs this; it serves wavepe.ops.alibi_bias on
// CUDA tensors).  A grid-stride loop over the (heads * m * n) outputs, each
// thread writing consecutive keys of a row: a pure store stream.
#include "common.cuh"

namespace wavepe_cuda {
namespace {

constexpr int kAlibiThreads = 256;

template <class T>
__global__ void __launch_bounds__(kAlibiThreads) alibi_kernel(wavepe_alibi_args a) {
    using A = acc_t<T>;
    const T *slopes = static_cast<const T *>(a.slopes);
    T *out = static_cast<T *>(a.out);
    const int64_t total = a.heads * a.m * a.n;
    for (int64_t idx = int64_t(blockIdx.x) * kAlibiThreads + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * kAlibiThreads) {
        const int64_t j = idx % a.n, row = idx / a.n, i = row % a.m, h = row / a.m;
        const int64_t dist = a.q_offset + i - j;
        const A neg_slope = -to_acc(slopes[h]);
        A v;
        if (a.causal) v = dist >= 0 ? neg_slope * A(dist) : A(0);
        else v = neg_slope * A(dist >= 0 ? dist : -dist);
        out[h * a.out_stride_h + i * a.out_stride_m + j] = from_acc<T>(v);
    }
}

}  // namespace
}  // namespace wavepe_cuda

using namespace wavepe_cuda;

extern "C" int wavepe_cuda_alibi_check(const wavepe_alibi_args *a, wavepe_error *err) {
    if (a == nullptr) return wavepe_fail(err, WAVEPE_E_NULL, "no arguments");
    return wavepe_alibi_validate(a, err);
}

extern "C" cudaError_t wavepe_cuda_alibi(const wavepe_alibi_args *a, cudaStream_t stream) {
    if (wavepe_cuda_alibi_check(a, nullptr) != WAVEPE_OK) return cudaErrorInvalidValue;
    const int64_t total = a->heads * a->m * a->n;
    if (total == 0) return cudaSuccess;
    int64_t blocks = ceil_div(total, kAlibiThreads);
    const int64_t cap = int64_t(device_sm_count()) * 32;
    if (blocks > cap) blocks = cap;
    return dispatch_dtype(a->dtype, [&](auto tag) {
        return launch(alibi_kernel<decltype(tag)>, dim3(unsigned(blocks)), dim3(kAlibiThreads), 0, stream, *a);
    });
}
