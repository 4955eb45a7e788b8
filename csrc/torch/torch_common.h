// torch_common.h: shared helpers of the PyTorch bindings (csrc/torch/*.cpp).
//
// The bindings stay thin: check what the C core cannot see (device, dtype,
// layout), pick the ISA once per call, and split rows over threads with
// at::parallel_for.  Argument errors raise ValueError / TypeError in Python
// (TORCH_CHECK_VALUE / TORCH_CHECK_TYPE) and name the argument.
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
#include "../core/isa.h"
}

namespace wavepe {

// Raise ValueError naming the operation when a core validator fails.
inline void check_status(int status, const char* what) {
    TORCH_CHECK_VALUE(status == WAVEPE_OK, what, ": ", wavepe_status_str(status));
}

// The ISA this call's kernels use; a WAVEPE_ISA naming an ISA this CPU cannot
// run (or an unknown one) is a ValueError saying so.
inline wavepe_isa active_isa() {
    wavepe_isa isa;
    char message[256];
    TORCH_CHECK_VALUE(wavepe_active_isa_checked(&isa, message, sizeof(message)) == WAVEPE_OK, message);
    return isa;
}

inline void check_cpu(const at::Tensor& t, const char* name) {
    TORCH_CHECK_VALUE(t.device().is_cpu(), name, " must be a CPU tensor here, got device ", t.device());
}

inline void check_float(const at::Tensor& t, const char* name) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, name,
                     " must be float32 or float64 (the Python wrappers upcast bf16/fp16), got ",
                     t.scalar_type());
}

inline void check_same_dtype(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
    TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), an, " and ", bn, " must share a dtype, got ",
                     a.scalar_type(), " and ", b.scalar_type());
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* name) {
    TORCH_CHECK_VALUE(t.dim() == dim, name, " must have ", dim, " dimensions, got shape ", t.sizes());
}

// q (..., M, d) and a relative table (rows, d) of rel_bias / rel_bias_backward, after their
// device and dtype checks (shared by the CPU and CUDA kernels).
inline void check_relbias_shapes(const at::Tensor& q, const at::Tensor& table, const char* op) {
    check_same_dtype(q, "q", table, "table");
    TORCH_CHECK_VALUE(q.dim() >= 2, op, ": q must be (..., M, d), got shape ", q.sizes());
    check_dim(table, 2, "table");
    TORCH_CHECK_VALUE(table.size(1) == q.size(-1), op, ": table.shape[1]=", table.size(1),
                      " does not match q.shape[-1]=", q.size(-1), " (head_dim)");
}

// Shapes, dtypes and settings of attention_fwd / attention_bwd shared by the CPU and
// CUDA kernels: q (B, H, M, d); k, v (B, H_kv, N, d) with H a multiple of H_kv.
inline void check_attention_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                                   bool has_table, bool has_slopes) {
    check_same_dtype(q, "q", k, "k");
    check_same_dtype(q, "q", v, "v");
    check_dim(q, 4, "q");
    check_dim(k, 4, "k");
    check_dim(v, 4, "v");
    TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "k and v must have the same shape, got ", k.sizes(), " and ", v.sizes());
    TORCH_CHECK_VALUE(k.size(0) == q.size(0) && k.size(3) == q.size(3), "k must be (B, H_kv, N, d) with q's B=",
                      q.size(0), " and d=", q.size(3), ", got ", k.sizes());
    TORCH_CHECK_VALUE(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, "q's heads H=", q.size(1),
                      " must be a multiple of k's heads H_kv=", k.size(1));
    TORCH_CHECK_VALUE(q.size(3) >= 1, "head_dim must be >= 1, got q of shape ", q.sizes());
    TORCH_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), "scale must be finite and > 0, got ", scale);
    TORCH_CHECK_VALUE(!(has_table && has_slopes), "give a table or ALiBi slopes, not both");
}

// A relative table of attention_fwd / attention_bwd (rows x head_dim), after its device check.
inline void check_attention_table(const at::Tensor& q, const at::Tensor& table, bool clamp) {
    check_same_dtype(q, "q", table, "table");
    check_dim(table, 2, "table");
    TORCH_CHECK_VALUE(table.size(1) == q.size(3), "table.shape[1]=", table.size(1), " does not match q.shape[-1]=",
                      q.size(3), " (head_dim)");
    TORCH_CHECK_VALUE(!clamp || table.size(0) > 0, "table must have at least one row with clamp=True");
}

// A fresh output that the kernel is about to write in full.  Large CPU tensors come from a new
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

// Rows per task: aim for ~64k output elements per chunk so tiny problems run
// on one thread and large ones spread evenly.
inline int64_t grain_rows(int64_t row_elems) {
    const int64_t target = 1 << 16;
    return row_elems >= target ? 1 : target / (row_elems > 0 ? row_elems : 1);
}

}  // namespace wavepe
