// launch_cuda.cpp: wavepe::launch_cuda for every family -- the CUDA end of
// the op bindings (built only with CUDA; see launch.h).
//
// The struct arrives filled and validated by the op's body; what is left is
// what only this device knows: its limits (head_dim, grid, shared memory:
// wavepe_cuda_<family>_check says which, in words), the driver's version,
// whether the build holds code for the GPU (wavepe_cuda_device_check), a
// device guard, torch's current stream, and workspaces from the caching
// allocator -- all through torch's stable C shim.  The CUDA runtime is linked
// statically (python/wavepe/_build/recipe.py), so the library loads on a
// machine without a GPU or a driver; the driver is reached at the first CUDA op.
#include <dlfcn.h>
#include <torch/csrc/stable/accelerator.h>

#include <atomic>
#include <mutex>

#include "launch.h"

#include "../cuda/wavepe_cuda.h"

namespace wavepe {
namespace {

// The driver this binary's CUDA runtime (linked statically) needs: CUDA 12.x runs on every driver
// that supports 12.0 (r525) by minor-version compatibility; CUDA 13.x needs r580.
constexpr int kRuntimeMajor = CUDART_VERSION / 1000;
const char* minimum_driver() { return kRuntimeMajor >= 13 ? "580" : kRuntimeMajor == 12 ? "525" : "450"; }

// Once per process: a driver too old for our runtime is a clear error naming the minimum, not a
// crash or an "unknown error" from the first launch.
void check_driver(const char* what) {
    static std::once_flag once;
    static int driver = 0;
    static cudaError_t status = cudaSuccess;
    std::call_once(once, [] { status = cudaDriverGetVersion(&driver); });
    if (status != cudaSuccess || driver == 0)
        fail_runtime(str(what, ": no usable NVIDIA driver (", status != cudaSuccess ? cudaGetErrorString(status)
                                                                                   : "none installed",
                         "); wavepe's CUDA kernels need driver >= ", minimum_driver()));
    if (driver / 1000 < kRuntimeMajor)
        fail_runtime(str(what, ": the NVIDIA driver supports CUDA ", driver / 1000, ".", (driver % 1000) / 10,
                         ", and wavepe's CUDA kernels (CUDA runtime ", kRuntimeMajor, ".", (CUDART_VERSION % 1000) / 10,
                         ") need driver >= ", minimum_driver(), ": update the driver"));
}

// Once per device (the current one): a GPU this build has no code for is an error naming its compute capability and
// what to do, before any launch -- not "no kernel image is available" from the first kernel.
void check_device(int32_t device, const char* what) {
    static std::atomic<bool> checked[64];
    const bool cached = device >= 0 && device < 64;
    if (cached && checked[device].load(std::memory_order_acquire)) return;
    wavepe_error err{};
    if (wavepe_cuda_device_check(WAVEPE_CUDA_ARCHS_TEXT, &err) != WAVEPE_OK)
        fail_runtime(str(what, ": ", err.message));
    if (cached) checked[device].store(true, std::memory_order_release);
}

// The current CUDA stream of torch.  The stable C shim's CUDA half lives in libtorch_cuda.so, which
// a CPU build of torch does not have; the symbol is looked up there at the first CUDA op (by then
// torch has loaded it), so that this library also loads under a CPU torch.
cudaStream_t current_stream(int32_t device, const char* what) {
    using Fn = AOTITorchError (*)(int32_t, void**);
    static Fn fn = [] {
        void* lib = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
        return lib ? reinterpret_cast<Fn>(dlsym(lib, "aoti_torch_get_current_cuda_stream")) : nullptr;
    }();
    if (fn == nullptr) fail_runtime(str(what, ": torch's CUDA library (libtorch_cuda.so) is not loaded"));
    void* stream = nullptr;
    if (fn(device, &stream) != AOTI_TORCH_SUCCESS) fail_runtime(str(what, ": cannot get torch's current CUDA stream"));
    return static_cast<cudaStream_t>(stream);
}

// Raise with the CUDA runtime's message when a CUDA call or a launch failed.
void check_cuda(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    fail_runtime(str(what, ": CUDA error: ", cudaGetErrorString(err),
                     err == cudaErrorInvalidValue ? " (arguments rejected by the launcher, or a tile configuration "
                                                    "that needs more shared memory than this GPU grants)"
                                                  : ""));
}

// What every launch starts with: the driver checked, the device of the tensors current (restored when
// the guard goes), torch's current stream.
struct OnDevice {
    torch::stable::accelerator::DeviceGuard guard;
    cudaStream_t stream;
    OnDevice(const Tensor& like, const char* what)
        : guard((check_driver(what), like.get_device_index())),
          stream((check_device(like.get_device_index(), what), current_stream(like.get_device_index(), what))) {}
};

// Scratch memory on the device (torch's caching allocator), or an undefined tensor for 0 bytes.
Tensor workspace(size_t bytes, const Tensor& like) {
    if (bytes == 0) return Tensor();
    return empty({static_cast<int64_t>(bytes)}, like, "wavepe CUDA kernels", "a workspace (bytes)", ScalarType::Byte);
}

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// A readable error when the tiles need more shared memory than this GPU grants.
void check_smem(size_t bytes, const char* what) {
    int dev = 0, optin = 0;
    check_cuda(cudaGetDevice(&dev), what);
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), what);
    if (bytes > static_cast<size_t>(optin))
        fail_runtime(str(what, ": this configuration needs ", bytes, " bytes of shared memory per block and this GPU "
                         "grants ", optin, " (bf16/fp16 need at most 99 KiB; use them, or a smaller head_dim, on this GPU)"));
}

}  // namespace

void launch_cuda(const wavepe_relbias_args& a, unsigned kernels, const Tensor& like, const char* what) {
    wavepe_error err{};
    check_status(wavepe_cuda_relbias_check(&a, kernels, &err), err, what);
    const OnDevice on(like, what);
    const cudaStream_t stream = on.stream;
    if (kernels & WAVEPE_RELBIAS_FORWARD) {
        check_cuda(wavepe_cuda_relbias_fwd(&a, stream), what);
        return;
    }
    const size_t bytes = wavepe_cuda_relbias_bwd_workspace_bytes(&a, kernels);
    const Tensor ws = workspace(bytes, like);
    check_cuda(wavepe_cuda_relbias_bwd(&a, kernels, data_or_null(ws), bytes, stream), what);
}

void launch_cuda(const wavepe_alibi_args& a, const Tensor& like, const char* what) {
    wavepe_error err{};
    check_status(wavepe_cuda_alibi_check(&a, &err), err, what);
    const OnDevice on(like, what);
    check_cuda(wavepe_cuda_alibi(&a, on.stream), what);
}

void launch_cuda(const wavepe_rope_args& a, const Tensor& like, const char* what) {
    wavepe_error err{};
    check_status(wavepe_cuda_rope_check(&a, &err), err, what);
    const OnDevice on(like, what);
    check_cuda(wavepe_cuda_rope(&a, on.stream), what);
}

void launch_cuda(const wavepe_attention_args& a, bool backward, const Tensor& like, const char* what) {
    const int64_t splits = backward ? 1 : wavepe_cuda_attention_num_splits(&a);
    wavepe_error err{};
    check_status(wavepe_cuda_attention_check(&a, backward ? 1 : 0, splits, &err), err, what);
    const OnDevice on(like, what);
    const cudaStream_t stream = on.stream;
    if (backward) {
        check_smem(wavepe_cuda_attention_bwd_smem_bytes(&a), what);
        const size_t bytes = wavepe_cuda_attention_bwd_workspace_bytes(&a);
        const Tensor ws = workspace(bytes, like);
        check_cuda(wavepe_cuda_attention_bwd(&a, data_or_null(ws), bytes, stream), what);
        return;
    }
    if (a.batch * a.heads * a.m == 0) return;  // nothing to write (out and lse are empty)
    check_smem(wavepe_cuda_attention_fwd_smem_bytes(&a), what);
    const size_t bytes = wavepe_cuda_attention_fwd_workspace_bytes(&a, splits);
    const Tensor ws = workspace(bytes, like);
    check_cuda(wavepe_cuda_attention_fwd(&a, splits, data_or_null(ws), bytes, stream), what);
}

}  // namespace wavepe
