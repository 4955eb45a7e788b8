// torch_common.h: what every op binding (csrc/torch/<family>_op.cpp) shares.
//
// The bindings use torch's ABI-stable C++ API only (torch/csrc/stable,
// torch/headeronly; compiled with -DTORCH_TARGET_VERSION for torch 2.10, see
// python/wavepe/_build/recipe.py): the library calls into libtorch through its
// stable C shim, never a libtorch/c10/ATen C++ symbol (CI checks that with
// `nm -D`), so one binary loads in every torch >= 2.10.
//
// A binding is one function body per op, registered for every device that
// has kernels (CPU always, CUDA when built with it): it checks what the C
// core cannot see (tensors' devices, dtypes, dimensions, shapes across
// tensors), lays tensors out as the core wants them (last dimension
// contiguous, other strides passed through), fills the family's argument
// struct once, validates it with the family's one rule set
// (csrc/core/<family>.h), and hands it to wavepe::launch (launch.h), the only
// device-specific step.  Argument errors raise ValueError in Python (a
// std::invalid_argument, which torch translates) and name the argument;
// errors of the device raise RuntimeError.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using IntArrayRef = torch::headeronly::IntHeaderOnlyArrayRef;

// A sentence from its parts (ostream <<).
template <class... Args>
std::string str(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

// Shapes print as Python does: (2, 3, 4).
struct Shape {
    std::vector<int64_t> v;
    explicit Shape(IntArrayRef s) : v(s.begin(), s.end()) {}
};
inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
    os << '(';
    for (size_t i = 0; i < s.v.size(); ++i) os << (i ? ", " : "") << s.v[i];
    return os << (s.v.size() == 1 ? ",)" : ")");
}
inline Shape shape(const Tensor& t) { return Shape(t.sizes()); }

const char* dtype_name(ScalarType t);
std::string device_name(const Tensor& t);

// An argument error: ValueError in Python.
[[noreturn]] inline void fail_value(const std::string& message) { throw std::invalid_argument(message); }
// An error of the device or of a launch: RuntimeError in Python.
[[noreturn]] inline void fail_runtime(const std::string& message) { throw std::runtime_error(message); }

#define WAVEPE_CHECK_VALUE(cond, ...) \
    do {                              \
        if (!(cond)) ::wavepe::fail_value(::wavepe::str(__VA_ARGS__)); \
    } while (0)

// Raise ValueError "what: <the core's sentence naming the argument>" when a core validator fails.
inline void check_status(int status, const wavepe_error& err, const char* what) {
    WAVEPE_CHECK_VALUE(status == WAVEPE_OK, what, ": ", err.message[0] ? err.message : wavepe_status_str(status));
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
    WAVEPE_CHECK_VALUE(wavepe_active_isa_checked(&isa, message, sizeof(message)) == WAVEPE_OK, message);
    return isa;
}

inline bool is_floating(ScalarType t) {
    return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::BFloat16 || t == ScalarType::Half;
}

// The element types a device's kernels take: float32 / float64 everywhere, and bfloat16 / float16 on
// CUDA and, for the families whose CPU kernels read them natively (half_on_cpu: rope, rel_bias,
// alibi_bias, attention), on the CPU
// (elsewhere the Python wrappers upcast half types for the CPU kernels).
inline wavepe_dtype dtype_of(const Tensor& t, const char* name, bool half_on_cpu = false) {
    switch (t.scalar_type()) {
    case ScalarType::Float: return WAVEPE_F32;
    case ScalarType::Double: return WAVEPE_F64;
    case ScalarType::BFloat16:
    case ScalarType::Half:
        if (t.is_cuda() || half_on_cpu) return t.scalar_type() == ScalarType::Half ? WAVEPE_F16 : WAVEPE_BF16;
        break;
    default: break;
    }
    const bool any = t.is_cuda() || half_on_cpu;
    fail_value(str(name, any ? " must be float32, float64, bfloat16 or float16" : " must be float32 or float64",
                   any ? "" : " (the Python wrappers upcast bf16/fp16)", ", got ", dtype_name(t.scalar_type()), " on ",
                   device_name(t)));
}

// The accumulator dtype of data like t (slopes, lse and their gradients travel in it).
inline ScalarType acc_dtype(const Tensor& t) {
    return t.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

inline bool same_device(const Tensor& a, const Tensor& b) {
    return a.device().type() == b.device().type() && (a.is_cpu() || a.get_device_index() == b.get_device_index());
}

inline void check_same_device(const Tensor& t, const char* name, const Tensor& like, const char* like_name) {
    WAVEPE_CHECK_VALUE(same_device(t, like), name, " and ", like_name, " must be on the same device, got ",
                       device_name(t), " and ", device_name(like));
}

inline void check_same_dtype(const Tensor& a, const char* an, const Tensor& b, const char* bn) {
    WAVEPE_CHECK_VALUE(a.scalar_type() == b.scalar_type(), an, " and ", bn, " must share a dtype, got ",
                       dtype_name(a.scalar_type()), " and ", dtype_name(b.scalar_type()));
}

// Same device and dtype as `like`.
inline void check_like(const Tensor& t, const char* name, const Tensor& like, const char* like_name) {
    check_same_device(t, name, like, like_name);
    check_same_dtype(like, like_name, t, name);
}

inline void check_dim(const Tensor& t, int64_t dim, const char* name) {
    WAVEPE_CHECK_VALUE(t.dim() == dim, name, " must have ", dim, " dimensions, got shape ", shape(t));
}

inline bool same_sizes(IntArrayRef a, IntArrayRef b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

inline Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

// The layout the core reads: last dimension contiguous (a length-1 one may have any stride).
inline Tensor last_dim_contiguous(const Tensor& t) {
    return (t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1) ? t : torch::stable::contiguous(t);
}

// t in dtype `dtype` (t itself when it has it already).
inline Tensor to_dtype(const Tensor& t, ScalarType dtype) {
    return t.scalar_type() == dtype ? t : torch::stable::to(t, dtype);
}

// A new uninitialised tensor of `sizes` with like's device and `dtype` (like's when not given).
inline Tensor empty(IntArrayRef sizes, const Tensor& like, std::optional<ScalarType> dtype = std::nullopt) {
    return torch::stable::empty(sizes, dtype.value_or(like.scalar_type()), std::nullopt, like.device());
}

// Runs f(begin, end) over [0, n) on torch's intra-op thread pool (its thread count, its OpenMP
// runtime: this library has none of its own), at least `grain` items per call.
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
    torch::stable::parallel_for(0, n, std::max<int64_t>(grain, 1), f);
}

inline int64_t num_threads() { return static_cast<int64_t>(torch::stable::get_num_threads()); }

// A fresh output that a kernel is about to write in full.  Large CPU tensors come from a new
// mmap on every call, and faulting their pages in one write at a time dominates memory-bound ops
// (~85% of RoPE's time at (1, 32, 4096, 128)).  MADV_POPULATE_WRITE (Linux >= 5.14) maps them in
// one call per thread chunk instead; elsewhere, or if it fails, the pages fault in as before.
inline Tensor empty_output(IntArrayRef sizes, const Tensor& like) {
    Tensor t = empty(sizes, like);
#if defined(__linux__)
    constexpr uintptr_t page = 4096;
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (t.is_cpu() && bytes >= (size_t{16} << 20)) {
        const uintptr_t begin = (reinterpret_cast<uintptr_t>(t.data_ptr()) + page - 1) & ~(page - 1);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(t.data_ptr()) + bytes) & ~(page - 1);
        const int64_t chunk = int64_t{4} << 20;
        const int64_t n = static_cast<int64_t>((end - begin + chunk - 1) / chunk);
        parallel_for(n, 1, [&](int64_t b, int64_t e) {
            const uintptr_t lo = begin + static_cast<uintptr_t>(b * chunk);
            const uintptr_t hi = std::min<uintptr_t>(end, begin + static_cast<uintptr_t>(e * chunk));
            (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
        });
    }
#endif
    return t;
}

}  // namespace wavepe
