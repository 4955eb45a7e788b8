// arch_tuning.cuh: the tile products' choices that differ by compute capability, for the sources whose kernels make
// them (attention.cu, attention_bwd_dkdv_tc.cu).  Not in attention_tile.cuh: a source that includes only that one
// has the same device code on every arch, and the build runs nvcc's front end for it at the toolchain's levels only,
// sm_120's SASS from compute_100's PTX (python/wavepe/_build/recipe.py: code_levels).
#pragma once

namespace wavepe_cuda {

// How far qk_products_rows' loop over the head dim's KS 16-column steps is unrolled: by 4 at most on sm_100 (fully
// unrolled, ptxas hoisted fragments' loads ahead of their products there and spilled loop invariants), fully on
// sm_80, sm_90 and sm_120 (no spills, no inner loop).
template <int KS>
constexpr int qk_unroll() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200
    return KS < 4 ? KS : 4;
#else
    return KS;
#endif
}

}  // namespace wavepe_cuda
