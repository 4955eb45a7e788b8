// Stand-in for the header a CUDA build of PyTorch generates at configure time
// (absent from the CPU wheels).  Used only by .ci/compile_cuda.sh to
// syntax-check csrc/torch/*_cuda.cpp against a CPU torch's headers; real CUDA
// builds of wavepe use the torch installation's own copy.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
