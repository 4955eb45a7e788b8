// module.cpp: the extension module wavepe._C and the `wavepe` operator library.
//
// Importing wavepe._C loads this shared object, whose static initialisers
// register the operators; each op's schema and CPU kernel live in their own
// file (alibi_op.cpp, rel_bias_op.cpp, ...) as TORCH_LIBRARY_FRAGMENTs.
// Fake (meta) kernels and autograd are registered in Python (wavepe/ops).
#include <Python.h>

#include <algorithm>
#include <atomic>

#include "torch_common.h"

extern "C" {
#include "../core/isa.h"
}

namespace {

std::string active_isa() { return wavepe_isa_name(wavepe::active_isa()); }

// How many threads at::parallel_for really used over n unit-cost items: proves that this
// module was compiled with OpenMP (without it parallel_for runs inline on one thread).
int64_t parallel_threads(int64_t n) {
    std::atomic<int64_t> seen{0};
    at::parallel_for(0, n, 1, [&](int64_t, int64_t) {
        const int64_t me = int64_t{1} << std::min(at::get_thread_num(), 63);
        seen.fetch_or(me);
    });
    return __builtin_popcountll(static_cast<unsigned long long>(seen.load()));
}

}  // namespace

TORCH_LIBRARY(wavepe, m) {
    m.def("active_isa() -> str", &active_isa);
    m.def("parallel_threads(int n) -> int", &parallel_threads);
}

extern "C" {
PyMODINIT_FUNC PyInit__C(void) {
    static struct PyModuleDef module_def = {
        PyModuleDef_HEAD_INIT, "wavepe._C",
        "wavepe's PyTorch extension; the operators live under torch.ops.wavepe.", -1, nullptr,
        nullptr, nullptr, nullptr, nullptr,
    };
    return PyModule_Create(&module_def);
}
}
