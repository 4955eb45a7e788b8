// module.cpp: the `wavepe` operator library (torch.ops.wavepe.*).
//
// The shared library holds no Python: wavepe.ops loads it with
// torch.ops.load_library, and its static initialisers register the
// operators through torch's stable C shim; each op's schema and kernel live in
// their own file (alibi_op.cpp, relbias_op.cpp, ...) as
// STABLE_TORCH_LIBRARY_FRAGMENTs.  Fake (meta) kernels and autograd are
// registered in Python (wavepe/ops).  So one binary serves every CPython and
// every torch >= its target (TORCH_TARGET_VERSION, set by the build recipe).
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "torch_common.h"

#if WAVEPE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wavepe {

const char* dtype_name(ScalarType t) {
    switch (t) {
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Double: return "torch.float64";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Int: return "torch.int32";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Bool: return "torch.bool";
    default: return "a non-floating dtype";
    }
}

std::string device_name(const Tensor& t) {
    if (t.is_cpu()) return "cpu";
    if (t.is_cuda()) return str("cuda:", t.get_device_index());
    return str("device type ", static_cast<int>(t.device().type()));
}

}  // namespace wavepe

namespace {

std::string active_isa() { return wavepe_isa_name(wavepe::active_isa()); }

// How many distinct threads torch's thread pool used over n unit-cost items: proves that the ops
// really run in parallel (and on torch's pool, whose size torch.set_num_threads sets).
int64_t parallel_threads(int64_t n) {
    std::mutex mutex;
    std::set<std::thread::id> seen;
    wavepe::parallel_for(n, 1, [&](int64_t b, int64_t e) {
        // each item takes a moment, so that one thread cannot take every chunk before the others start
        for (int64_t i = b; i < e; ++i) std::this_thread::sleep_for(std::chrono::microseconds(200));
        std::lock_guard<std::mutex> lock(mutex);
        seen.insert(std::this_thread::get_id());
    });
    return static_cast<int64_t>(seen.size());
}

// What this binary is, for `wavepe info` (JSON): the torch it targets, and its CUDA part.
std::string build_info() {
    const int major = TORCH_TARGET_VERSION >> 56, minor = (TORCH_TARGET_VERSION >> 48) & 0xff;
#if WAVEPE_WITH_CUDA
    return wavepe::str("{\"torch_target\": \"", major, ".", minor, "\", \"cuda_runtime\": ", CUDART_VERSION,
                       ", \"cuda_archs\": \"", WAVEPE_CUDA_ARCHS_TEXT, "\"}");
#else
    return wavepe::str("{\"torch_target\": \"", major, ".", minor, "\", \"cuda_runtime\": null, \"cuda_archs\": \"\"}");
#endif
}

}  // namespace

STABLE_TORCH_LIBRARY(wavepe, m) {
    m.def("active_isa() -> str");
    m.def("parallel_threads(int n) -> int");
    m.def("build_info() -> str");
}

// The utilities run on the CPU whatever the tensors of the process (they take none): CompositeExplicitAutograd
// serves every dispatch key.
STABLE_TORCH_LIBRARY_IMPL(wavepe, CompositeExplicitAutograd, m) {
    m.impl("active_isa", TORCH_BOX(&active_isa));
    m.impl("parallel_threads", TORCH_BOX(&parallel_threads));
    m.impl("build_info", TORCH_BOX(&build_info));
}
