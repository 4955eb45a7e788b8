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
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/sysinfo.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux >= 5.14; older kernels answer EINVAL, which is ignored
#endif
#endif

// The CUDA archs the build holds, as the recipe describes them (describe_archs: "sm_80 sm_90 +PTX compute_90"):
// build_info's and the device check's text; the recipe defines it where the CUDA kernels are compiled.
#ifndef WAVEPE_CUDA_ARCHS_TEXT
#define WAVEPE_CUDA_ARCHS_TEXT ""
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

// Memory that cannot be had: MemoryError in Python, with this message (pybind11, which raises what the op
// threw, turns a std::bad_alloc into MemoryError(what())).
class MemoryError : public std::bad_alloc {
  public:
    explicit MemoryError(std::string message) : message_(std::move(message)) {}
    const char* what() const noexcept override { return message_.c_str(); }

  private:
    std::string message_;
};
[[noreturn]] inline void fail_memory(const std::string& message) { throw MemoryError(message); }

#define WAVEPE_CHECK_VALUE(cond, ...) \
    do {                              \
        if (!(cond)) ::wavepe::fail_value(::wavepe::str(__VA_ARGS__)); \
    } while (0)

// Raise ValueError "what: <the core's sentence naming the argument>" when a core validator fails
// (MemoryError when a plan could not allocate its scratch memory).
inline void check_status(int status, const wavepe_error& err, const char* what) {
    if (status == WAVEPE_OK) return;
    const std::string message = str(what, ": ", err.message[0] ? err.message : wavepe_status_str(status));
    if (status == WAVEPE_E_NOMEM) fail_memory(message + " (the kernels' scratch memory)");
    fail_value(message);
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

inline int64_t element_size(ScalarType t) {
    switch (t) {
    case ScalarType::Double:
    case ScalarType::Long: return 8;
    case ScalarType::Float:
    case ScalarType::Int: return 4;
    case ScalarType::BFloat16:
    case ScalarType::Half: return 2;
    default: return 1;
    }
}

// Bytes as people read them: 16.0 TiB.
inline std::string human_bytes(double bytes) {
    static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 6) bytes /= 1024.0, ++u;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(u == 0 ? 0 : 1);
    os << bytes << ' ' << units[u];
    return os.str();
}

// This machine's memory, RAM and swap (0 where unknown): no CPU tensor larger than it can exist.
inline uint64_t host_memory() {
#if defined(__linux__)
    struct sysinfo si;
    if (sysinfo(&si) == 0) return (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
#endif
    return 0;
}

// "k_len=1099511627776": the dimension of `sizes` that the names in `dims` ("(..., q_len, k_len)", matched from
// the right; "..." stands for the leading dimensions) give its largest value.
inline std::string largest_dimension(IntArrayRef sizes, const char* dims) {
    std::vector<std::string> names;
    std::string d(dims), name;
    for (char c : d) {
        if (c == '(' || c == ')' || c == ' ') continue;
        if (c == ',') names.push_back(name), name.clear();
        else name += c;
    }
    if (!name.empty()) names.push_back(name);
    size_t best = 0;
    for (size_t i = 1; i < sizes.size(); ++i)
        if (sizes[i] > sizes[best]) best = i;
    const size_t from_right = sizes.size() - 1 - best;
    std::string which = "dimension " + std::to_string(best);
    if (from_right < names.size() && names[names.size() - 1 - from_right] != "...")
        which = names[names.size() - 1 - from_right];
    return str(which, "=", sizes.empty() ? 0 : sizes[best]);
}

// A new uninitialised tensor of `sizes` with like's device and `dtype` (like's when not given) for op `op`:
// `result` names it with its dimensions as the API names them ("the bias (..., q_len, k_len)").  A result
// larger than this machine's memory raises MemoryError naming it, its shape, its bytes and its largest
// dimension before anything is allocated; an allocation the device refuses raises the same with the
// device's words (through the stable ABI torch would say only that "aten::empty" failed).  The sizes are
// the core validator's (no product overflows int64).
inline Tensor empty(IntArrayRef sizes, const Tensor& like, const char* op, const char* result,
                    std::optional<ScalarType> dtype = std::nullopt) {
    const ScalarType type = dtype.value_or(like.scalar_type());
    double bytes = static_cast<double>(element_size(type));
    for (int64_t s : sizes) bytes *= static_cast<double>(s);
    const auto describe = [&] {
        const char* dims = std::strchr(result, '(');
        return str(result, " of shape ", Shape(sizes), " in ", dtype_name(type), ", ", human_bytes(bytes),
                   dims != nullptr ? str(" (", largest_dimension(sizes, dims), ")") : std::string());
    };
    if (like.is_cpu()) {
        const uint64_t memory = host_memory();
        if (memory > 0 && bytes > static_cast<double>(memory))
            fail_memory(str(op, ": ", describe(), ", is more than this machine's memory (",
                            human_bytes(static_cast<double>(memory)), " of RAM and swap)"));
    }
    try {
        return torch::stable::empty(sizes, type, std::nullopt, like.device());
    } catch (const std::exception& e) {
        fail_memory(str(op, ": cannot allocate ", describe(), ", on ", device_name(like), " (", e.what(), ")"));
    }
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
inline Tensor empty_output(IntArrayRef sizes, const Tensor& like, const char* op, const char* result) {
    Tensor t = empty(sizes, like, op, result);
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
