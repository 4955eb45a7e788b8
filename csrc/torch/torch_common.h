// torch_common.h: what every op binding (csrc/torch/<family>_op.cpp) shares.
//
// A binding is one function body per op, registered for every device that
// has kernels (CPU always, CUDA when built with it): it checks what the C
// core cannot see (tensors' devices, dtypes, dimensions, shapes across
// tensors), lays tensors out as the core wants them (last dimension
// contiguous, other strides passed through), fills the family's argument
// struct once, validates it with the family's one rule set
// (csrc/core/<family>.h), and hands it to wavepe::launch (launch.h), the only
// device-specific step.  Argument errors raise ValueError / TypeError in
// Python (TORCH_CHECK_VALUE / TORCH_CHECK_TYPE) and name the argument.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux >= 5.14; older kernels answer EINVAL, which is ignored
#endif
#endif

extern "C" {
#include "../core/checked.h"
#include "../core/dtype.h"
#include "../core/isa.h"
}

namespace wavepe {

// Raise ValueError "what: <the core's sentence naming the argument>" when a core validator fails.
inline void check_status(int status, const wavepe_error& err, const char* what) {
    TORCH_CHECK_VALUE(status == WAVEPE_OK, what, ": ", err.message[0] ? err.message : wavepe_status_str(status));
}

// The same for a validator run before the outputs exist: every rule but the data pointers (the
// validators check NULL last, so WAVEPE_E_NULL means everything else passed).
inline void check_sizes(int status, const wavepe_error& err, const char* what) {
    if (status != WAVEPE_E_NULL) check_status(status, err, what);
}

// The ISA this call's kernels use; a WAVEPE_ISA naming an ISA this CPU cannot
// run (or an unknown one) is a ValueError saying so.
inline wavepe_isa active_isa() {
    wavepe_isa isa;
    char message[256];
    TORCH_CHECK_VALUE(wavepe_active_isa_checked(&isa, message, sizeof(message)) == WAVEPE_OK, message);
    return isa;
}

// The element types a device's kernels take: float32 / float64 everywhere, and bfloat16 / float16 on
// CUDA (the Python wrappers upcast half types for the CPU kernels).
inline wavepe_dtype dtype_of(const at::Tensor& t, const char* name) {
    switch (t.scalar_type()) {
    case at::kFloat: return WAVEPE_F32;
    case at::kDouble: return WAVEPE_F64;
    case at::kBFloat16:
    case at::kHalf:
        if (t.device().is_cuda()) return t.scalar_type() == at::kHalf ? WAVEPE_F16 : WAVEPE_BF16;
        break;
    default: break;
    }
    TORCH_CHECK_TYPE(false, name, " must be float32 or float64",
                     t.device().is_cuda() ? ", bfloat16 or float16 on CUDA" : " (the Python wrappers upcast bf16/fp16)",
                     ", got ", t.scalar_type(), " on ", t.device());
    return WAVEPE_F32;
}

// The accumulator dtype of data like t (slopes, lse and their gradients travel in it).
inline at::ScalarType acc_dtype(const at::Tensor& t) {
    return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

inline void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
    TORCH_CHECK_VALUE(t.device() == like.device(), name, " and ", like_name, " must be on the same device, got ",
                      t.device(), " and ", like.device());
}

inline void check_same_dtype(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
    TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), an, " and ", bn, " must share a dtype, got ",
                     a.scalar_type(), " and ", b.scalar_type());
}

// Same device and dtype as `like`.
inline void check_like(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
    check_same_device(t, name, like, like_name);
    check_same_dtype(like, like_name, t, name);
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* name) {
    TORCH_CHECK_VALUE(t.dim() == dim, name, " must have ", dim, " dimensions, got shape ", t.sizes());
}

// The layout the core reads: last dimension contiguous (a length-1 one may have any stride).
inline at::Tensor last_dim_contiguous(const at::Tensor& t) {
    return (t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1) ? t : t.contiguous();
}

// A fresh output that a kernel is about to write in full.  Large CPU tensors come from a new
// mmap on every call, and faulting their pages in one write at a time dominates memory-bound ops
// (~85% of RoPE's time at (1, 32, 4096, 128)).  MADV_POPULATE_WRITE (Linux >= 5.14) maps them in
// one call per thread chunk instead; elsewhere, or if it fails, the pages fault in as before.
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
    at::Tensor t = at::empty(sizes, options);
#if defined(__linux__)
    constexpr uintptr_t page = 4096;
    const size_t bytes = t.nbytes();
    if (t.device().is_cpu() && bytes >= (size_t{16} << 20)) {
        const uintptr_t begin = (reinterpret_cast<uintptr_t>(t.data_ptr()) + page - 1) & ~(page - 1);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(t.data_ptr()) + bytes) & ~(page - 1);
        const int64_t chunk = int64_t{4} << 20;
        const int64_t n = static_cast<int64_t>((end - begin + chunk - 1) / chunk);
        at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
            const uintptr_t lo = begin + static_cast<uintptr_t>(b * chunk);
            const uintptr_t hi = std::min<uintptr_t>(end, begin + static_cast<uintptr_t>(e * chunk));
            (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
        });
    }
#endif
    return t;
}

}  // namespace wavepe
