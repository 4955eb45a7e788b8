// device.cu: does this library hold code the current GPU runs?  Asked once per device before the first launch there
// (csrc/torch/launch_cuda.cpp), so that a GPU the build does not cover -- a T4 or V100 (below compute capability 8.0:
// the kernels need bf16 mma.sync and cp.async), or one whose major the build has neither SASS nor PTX for -- gets a
// sentence naming its compute capability and what to do, not the launch's "no kernel image is available".
//
// The probe is a kernel of this file, which is compiled at every code level, as the sources whose code differs most by
// arch are (python/wavepe/_build/recipe.py: PROBE_SOURCE; one fatbin a source): theirs are the fewest images of the
// library -- the others hold every arch's SASS too and the PTX of an older arch (compute_100's for compute_120's), which
// every GPU newer than it runs -- so a GPU that finds an image here finds one for every kernel.  Asking for its
// attributes makes the driver pick an image -- SASS of the device's major at or below its minor, else the newest PTX
// at or below its compute capability, compiled then (recipe.image_for states the rule the build is planned by).
#include "common.cuh"

namespace wavepe_cuda {
namespace {
__global__ void image_probe_kernel() {}
}  // namespace
}  // namespace wavepe_cuda

// (each message within wavepe_error's 256 bytes with the longest arch list the recipe writes by default)
extern "C" int wavepe_cuda_device_check(const char *built_for, wavepe_error *err) {
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess)
        return wavepe_fail(err, WAVEPE_E_INVALID, "the GPU cannot be asked its compute capability (CUDA error: %s)",
                           cudaGetErrorString(e));
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, wavepe_cuda::image_probe_kernel);
    if (e == cudaSuccess) return WAVEPE_OK;
    (void)cudaGetLastError();  // the probe's error is answered here, not left for the next launch to report
    const char *built = built_for != nullptr && built_for[0] != '\0' ? built_for : "unknown archs";
    if (major < 8)
        return wavepe_fail(err, WAVEPE_E_INVALID,
                           "this GPU (compute capability %d.%d) cannot run wavepe's CUDA kernels: they need 8.0 or "
                           "newer (bf16 mma.sync, cp.async: A100, RTX 30xx, L4, H100 and later); use wavepe on the CPU "
                           "here", major, minor);
    if (e != cudaErrorNoKernelImageForDevice && e != cudaErrorInvalidDeviceFunction)  // e.g. its PTX failed to compile
        return wavepe_fail(err, WAVEPE_E_INVALID, "this GPU (compute capability %d.%d) cannot load wavepe's CUDA code "
                           "(built for %s): CUDA error: %s", major, minor, built, cudaGetErrorString(e));
    return wavepe_fail(err, WAVEPE_E_INVALID,
                       "no CUDA code in this library runs on this GPU (compute capability %d.%d): it holds %s; build "
                       "wavepe from source with WAVEPE_CUDA_ARCHS=%d%d (docs/install.md)", major, minor, built, major,
                       minor);
}
