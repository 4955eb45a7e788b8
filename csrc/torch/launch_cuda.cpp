// launch_cuda.cpp: wavepe::launch_cuda for every family -- the CUDA end of
// the op bindings (built only with CUDA; see launch.h).
//
// The struct arrives filled and validated by the op's body; what is left is
// what only this device knows: its limits (head_dim, grid, shared memory:
// wavepe_cuda_<family>_check says which, in words), a device guard, the
// current stream, and workspaces from the caching allocator.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "launch.h"
#include "torch_common.h"

#include "../cuda/wavepe_cuda.h"

namespace wavepe {
namespace {

// Raise with the CUDA runtime's message when a launch failed.
void check_launch(cudaError_t err, const char* what) {
    TORCH_CHECK(err == cudaSuccess, what, ": CUDA error: ", cudaGetErrorString(err),
                err == cudaErrorInvalidValue ? " (arguments rejected by the launcher, or a tile configuration that "
                                               "needs more shared memory than this GPU grants)"
                                             : "");
}

// Scratch memory on the device (caching allocator), or an undefined tensor for 0 bytes.
at::Tensor workspace(size_t bytes, const at::Device& device) {
    if (bytes == 0) return at::Tensor();
    return at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().device(device).dtype(at::kByte));
}

void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// A readable error when the tiles need more shared memory than this GPU grants.
void check_smem(size_t bytes, const char* what) {
    int dev = 0, optin = 0;
    C10_CUDA_CHECK(cudaGetDevice(&dev));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    TORCH_CHECK(bytes <= static_cast<size_t>(optin), what, ": this configuration needs ", bytes,
                " bytes of shared memory per block and this GPU grants ", optin,
                " (bf16/fp16 need at most 99 KiB; use them, or a smaller head_dim, on this GPU)");
}

}  // namespace

void launch_cuda(const wavepe_relbias_args& a, unsigned kernels, const at::Device& device, const char* what) {
    const c10::cuda::CUDAGuard guard(device);
    wavepe_error err{};
    check_status(wavepe_cuda_relbias_check(&a, kernels, &err), err, what);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (kernels & WAVEPE_RELBIAS_FORWARD) {
        check_launch(wavepe_cuda_relbias_fwd(&a, stream), what);
        return;
    }
    const size_t bytes = wavepe_cuda_relbias_bwd_workspace_bytes(&a, kernels);
    const at::Tensor ws = workspace(bytes, device);
    check_launch(wavepe_cuda_relbias_bwd(&a, kernels, data_or_null(ws), bytes, stream), what);
}

void launch_cuda(const wavepe_alibi_args& a, const at::Device& device, const char* what) {
    const c10::cuda::CUDAGuard guard(device);
    wavepe_error err{};
    check_status(wavepe_cuda_alibi_check(&a, &err), err, what);
    check_launch(wavepe_cuda_alibi(&a, c10::cuda::getCurrentCUDAStream()), what);
}

void launch_cuda(const wavepe_rope_args& a, const at::Device& device, const char* what) {
    const c10::cuda::CUDAGuard guard(device);
    wavepe_error err{};
    check_status(wavepe_cuda_rope_check(&a, &err), err, what);
    check_launch(wavepe_cuda_rope(&a, c10::cuda::getCurrentCUDAStream()), what);
}

void launch_cuda(const wavepe_attention_args& a, bool backward, const at::Device& device, const char* what) {
    const c10::cuda::CUDAGuard guard(device);
    const int64_t splits = backward ? 1 : wavepe_cuda_attention_num_splits(&a);
    wavepe_error err{};
    check_status(wavepe_cuda_attention_check(&a, backward ? 1 : 0, splits, &err), err, what);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (backward) {
        check_smem(wavepe_cuda_attention_bwd_smem_bytes(&a), what);
        const size_t bytes = wavepe_cuda_attention_bwd_workspace_bytes(&a);
        const at::Tensor ws = workspace(bytes, device);
        check_launch(wavepe_cuda_attention_bwd(&a, data_or_null(ws), bytes, stream), what);
        return;
    }
    if (a.batch * a.heads * a.m == 0) return;  // nothing to write (out and lse are empty)
    check_smem(wavepe_cuda_attention_fwd_smem_bytes(&a), what);
    const size_t bytes = wavepe_cuda_attention_fwd_workspace_bytes(&a, splits);
    const at::Tensor ws = workspace(bytes, device);
    check_launch(wavepe_cuda_attention_fwd(&a, splits, data_or_null(ws), bytes, stream), what);
}

}  // namespace wavepe
