// alibi_cuda.cpp: torch.ops.wavepe.alibi_bias on CUDA (schema in alibi_op.cpp).
#include "cuda_common.h"

namespace {

at::Tensor alibi_bias_cuda(const at::Tensor& slopes_in, int64_t q_len, int64_t k_len, int64_t q_offset,
                           bool causal) {
    wavepe::check_cuda(slopes_in, "slopes", slopes_in, "slopes");
    wavepe::check_dim(slopes_in, 1, "slopes");
    TORCH_CHECK_VALUE(q_len >= 0, "q_len must be >= 0, got ", q_len);
    TORCH_CHECK_VALUE(k_len >= 0, "k_len must be >= 0, got ", k_len);
    const c10::cuda::CUDAGuard guard(slopes_in.device());
    const at::Tensor slopes = slopes_in.contiguous();
    wavepe_cuda_alibi_args a{};
    a.dtype = wavepe::cuda_dtype(slopes, "slopes");
    a.heads = slopes.size(0);
    a.m = q_len;
    a.n = k_len;
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    const int64_t dims[3] = {a.heads, q_len, k_len};
    wavepe::check_status(wavepe_checked_numel(3, dims, slopes.element_size(), nullptr),
                         "alibi_bias (heads * q_len * k_len)");
    at::Tensor out = at::empty({a.heads, q_len, k_len}, slopes.options());
    a.slopes = slopes.data_ptr();
    a.out = out.data_ptr();
    wavepe::check_status(wavepe_cuda_alibi_validate(&a), "alibi_bias");
    wavepe::check_launch(wavepe_cuda_alibi(&a, c10::cuda::getCurrentCUDAStream()), "alibi_bias");
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(wavepe, CUDA, m) { m.impl("alibi_bias", &alibi_bias_cuda); }
