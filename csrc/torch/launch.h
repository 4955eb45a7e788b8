// launch.h: the device-specific end of every op binding.
//
// A binding (<family>_op.cpp) fills its family's argument struct once and
// validates it; wavepe::launch runs it on the device of its tensors: on the
// CPU the core's plan (csrc/core/<family>.h) over torch's thread pool
// (torch::stable::parallel_for, launch.cpp), on CUDA the family's launcher on the current stream with
// workspaces from the caching allocator (launch_cuda.cpp, built only with
// CUDA).  Nothing here knows an op's arguments beyond the struct, so adding
// an argument to an op never touches these files.  `like` is any tensor of the
// op: where the struct's pointers live (its device), and what workspaces are
// allocated beside.
#pragma once

#include "torch_common.h"

extern "C" {
#include "../core/alibi.h"
#include "../core/attention.h"
#include "../core/relbias.h"
#include "../core/rope.h"
}

namespace wavepe {

// `what` names the op in error messages.
void launch(const wavepe_relbias_args& a, unsigned kernels, const Tensor& like, const char* what);
void launch(const wavepe_alibi_args& a, const Tensor& like, const char* what);
void launch(const wavepe_rope_args& a, const Tensor& like, const char* what);
void launch(const wavepe_attention_args& a, bool backward, const Tensor& like, const char* what);

// The CUDA end (launch_cuda.cpp; without CUDA kernels built, they raise).
void launch_cuda(const wavepe_relbias_args& a, unsigned kernels, const Tensor& like, const char* what);
void launch_cuda(const wavepe_alibi_args& a, const Tensor& like, const char* what);
void launch_cuda(const wavepe_rope_args& a, const Tensor& like, const char* what);
void launch_cuda(const wavepe_attention_args& a, bool backward, const Tensor& like, const char* what);

}  // namespace wavepe

// Register an op family's boxed kernels for every device that has kernels (the same bodies; only
// wavepe::launch differs): WAVEPE_REGISTER_ALL_DEVICES(register_fn) with
// void register_fn(torch::stable::detail::StableLibrary&).
#if WAVEPE_WITH_CUDA
#define WAVEPE_REGISTER_ALL_DEVICES(fn)          \
    STABLE_TORCH_LIBRARY_IMPL(wavepe, CPU, m) { fn(m); } \
    STABLE_TORCH_LIBRARY_IMPL(wavepe, CUDA, m) { fn(m); }
#else
#define WAVEPE_REGISTER_ALL_DEVICES(fn) \
    STABLE_TORCH_LIBRARY_IMPL(wavepe, CPU, m) { fn(m); }
#endif
