// cuda_common.h: shared helpers of the CUDA registrations (csrc/torch/*_cuda.cpp).
//
// The CUDA bindings mirror the CPU ones: check what the launchers cannot see
// (device, dtype, layout) with messages naming the argument, lay tensors out
// as the launchers want them (last dimension contiguous, other strides
// passed through), validate with the launcher's own validator, and launch on
// the current stream under a device guard.  Unlike the CPU ops, bf16 and fp16
// are native inputs here (the kernels accumulate in fp32).
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "torch_common.h"

#include "../cuda/wavepe_cuda.h"

namespace wavepe {

inline void check_cuda(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
    TORCH_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor here, got device ", t.device());
    TORCH_CHECK_VALUE(t.device() == like.device(), name, " and ", like_name, " must be on the same device, got ",
                      t.device(), " and ", like.device());
}

inline wavepe_cuda_dtype cuda_dtype(const at::Tensor& t, const char* name) {
    switch (t.scalar_type()) {
    case at::kFloat: return WAVEPE_CUDA_F32;
    case at::kDouble: return WAVEPE_CUDA_F64;
    case at::kBFloat16: return WAVEPE_CUDA_BF16;
    case at::kHalf: return WAVEPE_CUDA_F16;
    default: break;
    }
    TORCH_CHECK_TYPE(false, name, " must be float32, float64, bfloat16 or float16 on CUDA, got ", t.scalar_type());
    return WAVEPE_CUDA_F32;
}

// Raise with the CUDA runtime's message when a launch failed.
inline void check_launch(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, what, ": CUDA error: ", cudaGetErrorString(err),
                err == cudaErrorInvalidValue ? " (arguments rejected by the launcher, or a tile configuration that "
                                               "needs more shared memory than this GPU grants)"
                                             : "");
}

// Last dimension contiguous (a length-1 one may have any stride).
inline at::Tensor last_dim_contiguous(const at::Tensor& t) {
    return (t.size(-1) <= 1 || t.stride(-1) == 1) ? t : t.contiguous();
}

// (..., R, C) as (batch, R, C) with the last dimension contiguous: a view when
// the leading dimensions merge, else a copy.
inline at::Tensor as_batched_rows(const at::Tensor& t) {
    int64_t batch = 1;
    for (int64_t i = 0; i + 2 < t.dim(); ++i) batch *= t.size(i);
    return last_dim_contiguous(t.reshape({batch, t.size(-2), t.size(-1)}));
}

// Scratch memory on t's device (caching allocator), or an empty tensor.
inline at::Tensor workspace(size_t bytes, const at::Tensor& t) {
    return at::empty({static_cast<int64_t>(bytes)}, t.options().dtype(at::kByte));
}

}  // namespace wavepe
