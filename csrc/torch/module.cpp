// module.cpp: the extension module wavepe._C and the `wavepe` operator library.
//
// Importing wavepe._C loads this shared object, whose static initialisers
// register the operators; each op's schema and CPU kernel live in their own
// file (alibi_op.cpp, rel_bias_op.cpp, ...) as TORCH_LIBRARY_FRAGMENTs.
// Fake (meta) kernels and autograd are registered in Python (wavepe/ops).
#include <Python.h>

#include "torch_common.h"

extern "C" {
#include "../core/isa.h"
}

namespace {

std::string active_isa() { return wavepe_isa_name(wavepe_active_isa()); }

}  // namespace

TORCH_LIBRARY(wavepe, m) {
    m.def("active_isa() -> str", &active_isa);
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
