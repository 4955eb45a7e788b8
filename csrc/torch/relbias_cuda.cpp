// relbias_cuda.cpp: torch.ops.wavepe.rel_bias and rel_bias_backward on CUDA
// (the schemas live in relbias_op.cpp; kernels in csrc/cuda/relbias.cu).
#include "cuda_common.h"

namespace {

void check_inputs(const at::Tensor& q, const at::Tensor& table, const char* op) {
    wavepe::check_cuda(q, "q", q, "q");
    wavepe::check_cuda(table, "table", q, "q");
    wavepe::cuda_dtype(q, "q");
    wavepe::check_relbias_shapes(q, table, op);
}

wavepe_cuda_relbias_args make_args(const at::Tensor& q3, const at::Tensor& table, int64_t n, int64_t r_lo,
                                   int64_t q_offset, bool causal, bool clamp) {
    wavepe_cuda_relbias_args a{};
    a.dtype = wavepe::cuda_dtype(q3, "q");
    a.batch = q3.size(0);
    a.m = q3.size(1);
    a.n = n;
    a.d = q3.size(2);
    a.rows = table.size(0);
    a.r_lo = r_lo;
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    a.clamp = clamp ? 1 : 0;
    a.q = q3.data_ptr();
    a.q_stride_b = q3.stride(0);
    a.q_stride_m = q3.stride(1);
    a.table = table.data_ptr();
    a.table_stride_r = table.stride(0);
    return a;
}

at::Tensor rel_bias_cuda(const at::Tensor& q_in, const at::Tensor& table_in, int64_t r_lo, int64_t q_offset,
                         int64_t k_len, bool causal, bool clamp) {
    check_inputs(q_in, table_in, "rel_bias");
    TORCH_CHECK_VALUE(k_len >= 0, "rel_bias: k_len must be >= 0, got ", k_len);
    TORCH_CHECK_VALUE(!clamp || table_in.size(0) >= 1, "rel_bias: table must have at least one row with clamp=True");
    const c10::cuda::CUDAGuard guard(q_in.device());
    const at::Tensor q3 = wavepe::as_batched_rows(q_in);
    const at::Tensor table = wavepe::last_dim_contiguous(table_in);
    std::vector<int64_t> shape(q_in.sizes().begin(), q_in.sizes().end());
    shape.back() = k_len;
    const int64_t out_dims[3] = {q3.size(0), q3.size(1), k_len};
    wavepe::check_status(wavepe_checked_numel(3, out_dims, q_in.element_size(), nullptr),
                         "rel_bias (batch * M * k_len)");
    at::Tensor out = at::empty(shape, q_in.options());
    wavepe_cuda_relbias_args a = make_args(q3, table, k_len, r_lo, q_offset, causal, clamp);
    a.bias = out.data_ptr();
    wavepe::check_status(wavepe_cuda_relbias_validate(&a, 0), "rel_bias");
    if (out.numel() == 0) return out;
    wavepe::check_launch(wavepe_cuda_relbias_fwd(&a, c10::cuda::getCurrentCUDAStream()), "rel_bias");
    return out;
}

std::tuple<at::Tensor, at::Tensor> rel_bias_backward_cuda(const at::Tensor& grad_in, const at::Tensor& q_in,
                                                           const at::Tensor& table_in, int64_t r_lo,
                                                           int64_t q_offset, bool causal, bool clamp,
                                                           std::array<bool, 2> output_mask) {
    check_inputs(q_in, table_in, "rel_bias_backward");
    wavepe::check_cuda(grad_in, "grad", q_in, "q");
    wavepe::check_same_dtype(grad_in, "grad", q_in, "q");
    TORCH_CHECK_VALUE(grad_in.dim() == q_in.dim() && grad_in.sizes().slice(0, q_in.dim() - 1) ==
                                                         q_in.sizes().slice(0, q_in.dim() - 1),
                      "rel_bias_backward: grad must be (..., M, N) with q's leading shape ",
                      q_in.sizes().slice(0, q_in.dim() - 1), ", got ", grad_in.sizes());
    TORCH_CHECK_VALUE(!clamp || table_in.size(0) >= 1,
                      "rel_bias_backward: table must have at least one row with clamp=True");
    const c10::cuda::CUDAGuard guard(q_in.device());
    const bool want_dq = output_mask[0], want_dt = output_mask[1];
    at::Tensor dq = want_dq ? at::empty(q_in.sizes(), q_in.options())
                            : at::empty({0}, q_in.options());
    at::Tensor dt = want_dt ? at::empty(table_in.sizes(), table_in.options())
                            : at::empty({0}, table_in.options());
    if (!want_dq && !want_dt) return {dq, dt};
    const at::Tensor q3 = wavepe::as_batched_rows(q_in);
    const at::Tensor g3 = wavepe::as_batched_rows(grad_in);
    const at::Tensor table = wavepe::last_dim_contiguous(table_in);
    wavepe_cuda_relbias_args a = make_args(q3, table, g3.size(2), r_lo, q_offset, causal, clamp);
    a.grad = g3.data_ptr();
    a.grad_stride_b = g3.stride(0);
    a.grad_stride_m = g3.stride(1);
    a.dq = want_dq ? dq.data_ptr() : nullptr;
    a.dtable = want_dt ? dt.data_ptr() : nullptr;
    wavepe::check_status(wavepe_cuda_relbias_validate(&a, 1), "rel_bias_backward");
    if ((!want_dq || dq.numel() == 0) && (!want_dt || dt.numel() == 0)) return {dq, dt};
    const at::Tensor ws = wavepe::workspace(wavepe_cuda_relbias_bwd_workspace_bytes(&a), q_in);
    wavepe::check_launch(wavepe_cuda_relbias_bwd(&a, ws.numel() ? ws.data_ptr() : nullptr,
                                                 static_cast<size_t>(ws.numel()), c10::cuda::getCurrentCUDAStream()),
                         "rel_bias_backward");
    return {dq, dt};
}

}  // namespace

TORCH_LIBRARY_IMPL(wavepe, CUDA, m) {
    m.impl("rel_bias", &rel_bias_cuda);
    m.impl("rel_bias_backward", &rel_bias_backward_cuda);
}
