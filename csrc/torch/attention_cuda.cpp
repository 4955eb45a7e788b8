// attention_cuda.cpp: torch.ops.wavepe.attention_fwd / attention_bwd on CUDA
// (schemas in attention_op.cpp; kernels in csrc/cuda/attention*.cu).
//
// pos_enc is given by which optional is present: a table (wavelet / relative
// bias), ALiBi slopes, or neither.  q, k, v, table keep their dtype (bf16 and
// fp16 are native here); slopes, lse and the lse gradient travel as the
// accumulator type (float32, float64 for float64 inputs), whatever dtype the
// caller gave them, and dslopes is returned in the slopes' dtype.  Forward
// picks split-KV for decoding-sized problems; workspaces come from the
// caching allocator; everything runs on the current stream.
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "cuda_common.h"

namespace {

struct Prepared {
    at::Tensor q, k, v, table, slopes, kpm;
    at::ScalarType acc;
};

void set3(int64_t& s0, int64_t& s1, int64_t& s2, const at::Tensor& t) {
    s0 = t.stride(0), s1 = t.stride(1), s2 = t.stride(2);
}

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& table,
                 const std::optional<at::Tensor>& slopes, const std::optional<at::Tensor>& kpm,
                 wavepe_cuda_attention_args& a, int64_t r_lo, bool clamp, double scale, int64_t q_offset,
                 bool causal) {
    wavepe::check_cuda(q, "q", q, "q");
    wavepe::check_cuda(k, "k", q, "q");
    wavepe::check_cuda(v, "v", q, "q");
    const wavepe_cuda_dtype dtype = wavepe::cuda_dtype(q, "q");
    wavepe::check_attention_inputs(q, k, v, scale, table.has_value(), slopes.has_value());
    const int64_t dmax = dtype == WAVEPE_CUDA_F64 ? WAVEPE_CUDA_MAX_HEAD_DIM_F64 : WAVEPE_CUDA_MAX_HEAD_DIM;
    TORCH_CHECK_VALUE(q.size(3) <= dmax, "head_dim must be <= ", dmax, " for ", q.scalar_type(),
                      " on CUDA, got ", q.size(3));
    Prepared p;
    p.acc = dtype == WAVEPE_CUDA_F64 ? at::kDouble : at::kFloat;
    p.q = wavepe::last_dim_contiguous(q);
    p.k = wavepe::last_dim_contiguous(k);
    p.v = wavepe::last_dim_contiguous(v);
    a = wavepe_cuda_attention_args{};
    a.dtype = dtype;
    a.batch = q.size(0);
    a.heads = q.size(1);
    a.kv_heads = k.size(1);
    a.m = q.size(2);
    a.n = k.size(2);
    a.d = q.size(3);
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    a.scale = scale;
    a.num_splits = 1;
    a.q = p.q.data_ptr();
    a.k = p.k.data_ptr();
    a.v = p.v.data_ptr();
    set3(a.q_stride_b, a.q_stride_h, a.q_stride_m, p.q);
    set3(a.k_stride_b, a.k_stride_h, a.k_stride_n, p.k);
    set3(a.v_stride_b, a.v_stride_h, a.v_stride_n, p.v);
    a.pos_enc = WAVEPE_CUDA_PE_NONE;
    if (table.has_value()) {
        wavepe::check_cuda(*table, "table", q, "q");
        wavepe::check_attention_table(q, *table, clamp);
        p.table = wavepe::last_dim_contiguous(*table);
        a.pos_enc = WAVEPE_CUDA_PE_TABLE;
        a.table = p.table.data_ptr();
        a.table_rows = p.table.size(0);
        a.table_stride_r = p.table.stride(0);
        a.r_lo = r_lo;
        a.clamp = clamp ? 1 : 0;
    }
    if (slopes.has_value()) {
        wavepe::check_cuda(*slopes, "alibi_slopes", q, "q");
        wavepe::cuda_dtype(*slopes, "alibi_slopes");
        wavepe::check_dim(*slopes, 1, "alibi_slopes");
        TORCH_CHECK_VALUE(slopes->size(0) == a.heads, "alibi_slopes must have one slope per head (", a.heads,
                          "), got ", slopes->size(0));
        p.slopes = slopes->to(p.acc).contiguous();
        a.pos_enc = WAVEPE_CUDA_PE_ALIBI;
        a.alibi_slopes = p.slopes.data_ptr();
    }
    if (kpm.has_value()) {
        wavepe::check_cuda(*kpm, "key_padding_mask", q, "q");
        TORCH_CHECK_TYPE(kpm->scalar_type() == at::kBool, "key_padding_mask must be a bool tensor, got ",
                         kpm->scalar_type());
        TORCH_CHECK_VALUE(kpm->dim() == 2 && kpm->size(0) == a.batch && kpm->size(1) == a.n,
                          "key_padding_mask must be (B, N) = (", a.batch, ", ", a.n, "), got ", kpm->sizes());
        p.kpm = wavepe::last_dim_contiguous(*kpm);
        a.key_padding_mask = reinterpret_cast<const uint8_t*>(p.kpm.data_ptr<bool>());
        a.kpm_stride_b = p.kpm.stride(0);
    }
    return p;
}

// A readable error when the tiles need more shared memory than this GPU grants.
void check_smem(size_t bytes, const char* what) {
    int dev = 0, optin = 0;
    C10_CUDA_CHECK(cudaGetDevice(&dev));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    TORCH_CHECK(bytes <= static_cast<size_t>(optin), what, ": this configuration needs ", bytes,
                " bytes of shared memory per block and this GPU grants ", optin,
                " (bf16/fp16 need at most 99 KiB; use them, or a smaller head_dim, on this GPU)");
}

std::tuple<at::Tensor, at::Tensor> attention_fwd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      const std::optional<at::Tensor>& table, int64_t r_lo,
                                                      bool clamp, const std::optional<at::Tensor>& slopes,
                                                      const std::optional<at::Tensor>& key_padding_mask, double scale,
                                                      int64_t q_offset, bool causal) {
    const c10::cuda::CUDAGuard guard(q.device());
    wavepe_cuda_attention_args a;
    Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    at::Tensor out = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor lse = at::empty({a.batch, a.heads, a.m}, q.options().dtype(p.acc));
    a.out = out.data_ptr();
    set3(a.o_stride_b, a.o_stride_h, a.o_stride_m, out);
    a.lse = lse.data_ptr();
    wavepe::check_status(wavepe_cuda_attention_validate(&a, 0), "wavelet_attention");
    if (out.numel() == 0 && lse.numel() == 0) return {out, lse};
    a.num_splits = wavepe_cuda_attention_num_splits(&a);
    check_smem(wavepe_cuda_attention_fwd_smem_bytes(&a), "wavelet_attention");
    const at::Tensor ws = wavepe::workspace(wavepe_cuda_attention_fwd_workspace_bytes(&a), q);
    wavepe::check_launch(wavepe_cuda_attention_fwd(&a, ws.numel() ? ws.data_ptr() : nullptr,
                                                   static_cast<size_t>(ws.numel()), c10::cuda::getCurrentCUDAStream()),
                         "wavelet_attention");
    return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_bwd_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& table,
    int64_t r_lo, bool clamp, const std::optional<at::Tensor>& slopes,
    const std::optional<at::Tensor>& key_padding_mask, double scale, int64_t q_offset, bool causal, bool table_grad,
    bool slopes_grad) {
    const c10::cuda::CUDAGuard guard(q.device());
    wavepe_cuda_attention_args a;
    Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    const auto check_like_q = [&](const at::Tensor& t, const char* name) {
        wavepe::check_cuda(t, name, q, "q");
        wavepe::check_same_dtype(q, "q", t, name);
        TORCH_CHECK_VALUE(t.sizes() == q.sizes(), name, " must have q's shape ", q.sizes(), ", got ", t.sizes());
    };
    check_like_q(grad_out, "grad_out");
    check_like_q(out, "out");
    const std::vector<int64_t> lse_shape{a.batch, a.heads, a.m};
    wavepe::check_cuda(lse, "lse", q, "q");
    TORCH_CHECK_VALUE(lse.sizes() == lse_shape, "lse must be (B, H, M), got ", lse.sizes());
    const at::Tensor go = wavepe::last_dim_contiguous(grad_out), o = wavepe::last_dim_contiguous(out);
    const at::Tensor l = lse.to(p.acc).contiguous();
    at::Tensor gl;
    if (grad_lse.has_value()) {
        wavepe::check_cuda(*grad_lse, "grad_lse", q, "q");
        TORCH_CHECK_VALUE(grad_lse->sizes() == lse_shape, "grad_lse must be (B, H, M), got ", grad_lse->sizes());
        gl = grad_lse->to(p.acc).contiguous();
        a.grad_lse = gl.data_ptr();
    }
    a.out = const_cast<void*>(o.data_ptr());
    set3(a.o_stride_b, a.o_stride_h, a.o_stride_m, o);
    a.lse = const_cast<void*>(l.data_ptr());
    a.grad_out = go.data_ptr();
    set3(a.go_stride_b, a.go_stride_h, a.go_stride_m, go);
    at::Tensor dq = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor dk = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dv = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dtable = at::empty({0}, q.options()), dslopes_acc, dslopes = at::empty({0}, q.options());
    a.dq = dq.data_ptr();
    a.dk = dk.data_ptr();
    a.dv = dv.data_ptr();
    if (table_grad && table.has_value()) {
        dtable = at::empty({a.table_rows, a.d}, q.options());
        a.dtable = dtable.data_ptr();
    }
    if (slopes_grad && slopes.has_value()) {
        dslopes_acc = at::empty({a.heads}, q.options().dtype(p.acc));
        a.dslopes = dslopes_acc.data_ptr();
    }
    wavepe::check_status(wavepe_cuda_attention_validate(&a, 1), "wavelet_attention backward");
    check_smem(wavepe_cuda_attention_bwd_smem_bytes(&a), "wavelet_attention backward");
    const at::Tensor ws = wavepe::workspace(wavepe_cuda_attention_bwd_workspace_bytes(&a), q);
    wavepe::check_launch(wavepe_cuda_attention_bwd(&a, ws.numel() ? ws.data_ptr() : nullptr,
                                                   static_cast<size_t>(ws.numel()), c10::cuda::getCurrentCUDAStream()),
                         "wavelet_attention backward");
    if (dslopes_acc.defined()) dslopes = dslopes_acc.to(slopes->scalar_type());
    return {dq, dk, dv, dtable, dslopes};
}

}  // namespace

TORCH_LIBRARY_IMPL(wavepe, CUDA, m) {
    m.impl("attention_fwd", &attention_fwd_cuda);
    m.impl("attention_bwd", &attention_bwd_cuda);
}
