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

#include <cstdint>
#include <string>

extern "C" {
#include "../core/checked.h"
#include "../core/isa.h"
}

namespace wavepe {

// Raise ValueError naming the operation when a core validator fails.
inline void check_status(int status, const char* what) {
    TORCH_CHECK_VALUE(status == WAVEPE_OK, what, ": ", wavepe_status_str(status));
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

// Rows per task: aim for ~64k output elements per chunk so tiny problems run
// on one thread and large ones spread evenly.
inline int64_t grain_rows(int64_t row_elems) {
    const int64_t target = 1 << 16;
    return row_elems >= target ? 1 : target / (row_elems > 0 ? row_elems : 1);
}

}  // namespace wavepe
