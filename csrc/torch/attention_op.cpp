// attention_op.cpp: torch.ops.wavepe.attention_fwd / attention_bwd, every device.
//
// One body per op for CPU and CUDA: check what the core cannot see (devices,
// dtypes, shapes across tensors), fill wavepe_attention_args
// (csrc/core/attention.h) once, validate it, and wavepe::launch runs it (the
// CPU plan's phases over the thread pool, or the CUDA launchers).  The bias
// is given by which optional is present: a table (wavelet / relative bias),
// ALiBi slopes, or neither.  q, k, v, table keep their dtype (bf16 / fp16
// only where the device's kernels take them: CUDA); slopes, lse and the lse
// gradient travel as the accumulator type (float32, float64 for float64
// inputs), whatever dtype the caller gave them, and dslopes is returned in
// the slopes' dtype.
#include <optional>
#include <tuple>
#include <vector>

#include "launch.h"
#include "torch_common.h"

namespace {

void strides3(int64_t dst[3], const at::Tensor& t) {
    for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

// The tensors the struct points into (kept alive for the call).
struct Prepared {
    at::Tensor q, k, v, table, slopes, kpm;
};

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& table,
                 const std::optional<at::Tensor>& slopes, const std::optional<at::Tensor>& kpm, wavepe_attention_args& a,
                 int64_t r_lo, bool clamp, double scale, int64_t q_offset, bool causal) {
    a = wavepe_attention_args{};
    a.dtype = wavepe::dtype_of(q, "q");
    wavepe::check_like(k, "k", q, "q");
    wavepe::check_like(v, "v", q, "q");
    wavepe::check_dim(q, 4, "q");
    wavepe::check_dim(k, 4, "k");
    wavepe::check_dim(v, 4, "v");
    TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "k and v must have the same shape, got ", k.sizes(), " and ", v.sizes());
    TORCH_CHECK_VALUE(k.size(0) == q.size(0) && k.size(3) == q.size(3), "k must be (B, H_kv, N, d) with q's B=",
                      q.size(0), " and d=", q.size(3), ", got ", k.sizes());
    Prepared p;
    p.q = wavepe::last_dim_contiguous(q);
    p.k = wavepe::last_dim_contiguous(k);
    p.v = wavepe::last_dim_contiguous(v);
    a.batch = q.size(0);
    a.heads = q.size(1);
    a.kv_heads = k.size(1);
    a.m = q.size(2);
    a.n = k.size(2);
    a.d = q.size(3);
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    a.scale = scale;
    a.q = p.q.data_ptr();
    a.k = p.k.data_ptr();
    a.v = p.v.data_ptr();
    strides3(a.q_strides, p.q);
    strides3(a.k_strides, p.k);
    strides3(a.v_strides, p.v);
    if (table.has_value()) {
        wavepe::check_like(*table, "table", q, "q");
        wavepe::check_dim(*table, 2, "table");
        TORCH_CHECK_VALUE(table->size(1) == q.size(3), "table.shape[1]=", table->size(1),
                          " does not match q.shape[-1]=", q.size(3), " (head_dim)");
        p.table = table->contiguous();
        a.table = p.table.data_ptr();
        a.table_rows = p.table.size(0);
        a.r_lo = r_lo;
        a.clamp = clamp ? 1 : 0;
    }
    if (slopes.has_value()) {
        wavepe::check_same_device(*slopes, "alibi_slopes", q, "q");
        TORCH_CHECK_TYPE(at::isFloatingType(slopes->scalar_type()), "alibi_slopes must be a floating-point tensor, got ",
                         slopes->scalar_type());
        wavepe::check_dim(*slopes, 1, "alibi_slopes");
        TORCH_CHECK_VALUE(slopes->size(0) == a.heads, "alibi_slopes must have one slope per head (", a.heads, "), got ",
                          slopes->size(0));
        p.slopes = slopes->to(wavepe::acc_dtype(q)).contiguous();
        a.slopes = p.slopes.data_ptr();
    }
    if (kpm.has_value()) {
        wavepe::check_same_device(*kpm, "key_padding_mask", q, "q");
        TORCH_CHECK_TYPE(kpm->scalar_type() == at::kBool, "key_padding_mask must be a bool tensor, got ",
                         kpm->scalar_type());
        TORCH_CHECK_VALUE(kpm->dim() == 2 && kpm->size(0) == a.batch && kpm->size(1) == a.n,
                          "key_padding_mask must be (B, N) = (", a.batch, ", ", a.n, "), got ", kpm->sizes());
        p.kpm = wavepe::last_dim_contiguous(*kpm);
        a.key_padding_mask = reinterpret_cast<const uint8_t*>(p.kpm.data_ptr<bool>());
        a.kpm_stride = p.kpm.stride(0);
    }
    return p;
}

std::tuple<at::Tensor, at::Tensor> attention_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 const std::optional<at::Tensor>& table, int64_t r_lo, bool clamp,
                                                 const std::optional<at::Tensor>& slopes,
                                                 const std::optional<at::Tensor>& key_padding_mask, double scale,
                                                 int64_t q_offset, bool causal) {
    wavepe_attention_args a;
    const Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    wavepe_error err{};
    wavepe::check_sizes(wavepe_attention_validate(&a, 0, &err), err, "wavelet_attention");
    at::Tensor out = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor lse = at::empty({a.batch, a.heads, a.m}, q.options().dtype(wavepe::acc_dtype(q)));
    a.out = out.data_ptr();
    a.lse = lse.data_ptr();
    strides3(a.out_strides, out);
    wavepe::check_status(wavepe_attention_validate(&a, 0, &err), err, "wavelet_attention");
    wavepe::launch(a, false, q.device(), "wavelet_attention");
    return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_bwd(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& table,
    int64_t r_lo, bool clamp, const std::optional<at::Tensor>& slopes,
    const std::optional<at::Tensor>& key_padding_mask, double scale, int64_t q_offset, bool causal, bool table_grad,
    bool slopes_grad) {
    wavepe_attention_args a;
    const Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    const auto check_like_q = [&](const at::Tensor& t, const char* name) {
        wavepe::check_like(t, name, q, "q");
        TORCH_CHECK_VALUE(t.sizes() == q.sizes(), name, " must have q's shape ", q.sizes(), ", got ", t.sizes());
    };
    check_like_q(grad_out, "grad_out");
    check_like_q(out, "out");
    const std::vector<int64_t> lse_shape{a.batch, a.heads, a.m};
    const at::ScalarType acc = wavepe::acc_dtype(q);
    wavepe::check_same_device(lse, "lse", q, "q");
    TORCH_CHECK_VALUE(lse.sizes() == lse_shape, "lse must be (B, H, M), got ", lse.sizes());
    const at::Tensor go = wavepe::last_dim_contiguous(grad_out), o = wavepe::last_dim_contiguous(out);
    const at::Tensor l = lse.to(acc).contiguous();
    at::Tensor gl;
    if (grad_lse.has_value()) {
        wavepe::check_same_device(*grad_lse, "grad_lse", q, "q");
        TORCH_CHECK_VALUE(grad_lse->sizes() == lse_shape, "grad_lse must be (B, H, M), got ", grad_lse->sizes());
        gl = grad_lse->to(acc).contiguous();
        a.dlse = gl.data_ptr();
    }
    a.out = const_cast<void*>(o.data_ptr());
    strides3(a.out_strides, o);
    a.lse = const_cast<void*>(l.data_ptr());
    a.dout = go.data_ptr();
    strides3(a.dout_strides, go);
    wavepe_error err{};
    wavepe::check_sizes(wavepe_attention_validate(&a, 1, &err), err, "wavelet_attention backward");
    at::Tensor dq = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor dk = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dv = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dtable = at::empty({0}, q.options()), dslopes_acc, dslopes = at::empty({0}, q.options());
    a.dq = dq.data_ptr();
    a.dk = dk.data_ptr();
    a.dv = dv.data_ptr();
    if (table_grad && a.table != nullptr) {
        dtable = at::empty({a.table_rows, a.d}, q.options());
        a.dtable = dtable.data_ptr();
    }
    if (slopes_grad && a.slopes != nullptr) {
        dslopes_acc = at::empty({a.heads}, q.options().dtype(acc));
        a.dslopes = dslopes_acc.data_ptr();
    }
    wavepe::check_status(wavepe_attention_validate(&a, 1, &err), err, "wavelet_attention backward");
    wavepe::launch(a, true, q.device(), "wavelet_attention backward");
    if (dslopes_acc.defined()) dslopes = dslopes_acc.to(slopes->scalar_type());
    return {dq, dk, dv, dtable, dslopes};
}

void register_attention(torch::Library& m) {
    m.impl("attention_fwd", &attention_fwd);
    m.impl("attention_bwd", &attention_bwd);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def(
        "attention_fwd(Tensor q, Tensor k, Tensor v, Tensor? table, SymInt r_lo, bool clamp, Tensor? slopes, "
        "Tensor? key_padding_mask, float scale, SymInt q_offset, bool causal) -> (Tensor, Tensor)");
    m.def(
        "attention_bwd(Tensor grad_out, Tensor? grad_lse, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "Tensor? table, SymInt r_lo, bool clamp, Tensor? slopes, Tensor? key_padding_mask, float scale, "
        "SymInt q_offset, bool causal, bool table_grad, bool slopes_grad) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

WAVEPE_REGISTER_ALL_DEVICES(register_attention)
