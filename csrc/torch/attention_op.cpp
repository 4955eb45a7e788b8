// attention_op.cpp: torch.ops.wavepe.attention_fwd / attention_bwd, every device.
//
// One body per op for CPU and CUDA: check what the core cannot see (devices,
// dtypes, shapes across tensors), fill wavepe_attention_args
// (csrc/core/attention.h) once, validate it, and wavepe::launch runs it (the
// CPU plan's phases over the thread pool, or the CUDA launchers).  The bias
// is given by which optional is present: a table (wavelet / relative bias),
// ALiBi slopes, or neither.  Packed sequences: cu_seqlens (document
// boundaries, int32 on the device, converted there from int64: no host
// sync).  q, k, v, table keep their dtype (bf16 / fp16 on every device, read
// natively and accumulated in float32); slopes, lse and the lse gradient travel
// as the accumulator type (float32, float64 for float64 inputs), whatever
// dtype the caller gave them, and dslopes is returned in the slopes' dtype.
// attention_fwd's mark_neg_inf: rows whose visible scores are all -inf come
// back as out = 0, lse = +inf instead of NaN (attention.h); attention_bwd
// takes such rows as contributing nothing, flag or not.
//
// Schemas: the op's tensors, then the family's settings (WAVEPE_ATTENTION_SETTINGS in
// csrc/core/attention.h: scale, q_offset, causal, r_lo, clamp, mark_neg_inf), generated with
// the bodies' parameters and the struct fill by op_settings.h.
#include <optional>
#include <tuple>
#include <vector>

#include "launch.h"
#include "op_settings.h"

namespace {

using wavepe::Tensor;

void strides3(int64_t dst[3], const Tensor& t) {
    for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

// The tensors the struct points into (kept alive for the call).
struct Prepared {
    Tensor q, k, v, table, slopes, kpm, cu;
};

Prepared prepare(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& table,
                 const std::optional<Tensor>& slopes, const std::optional<Tensor>& kpm,
                 const std::optional<Tensor>& cu_seqlens, wavepe_attention_args& a) {
    // a: the settings filled, every other field zero
    a.dtype = wavepe::dtype_of(q, "q", /*half_on_cpu=*/true);  // bf16 / fp16 read natively everywhere
    wavepe::check_like(k, "k", q, "q");
    wavepe::check_like(v, "v", q, "q");
    wavepe::check_dim(q, 4, "q");
    wavepe::check_dim(k, 4, "k");
    wavepe::check_dim(v, 4, "v");
    WAVEPE_CHECK_VALUE(wavepe::same_sizes(k.sizes(), v.sizes()), "k and v must have the same shape, got ",
                       wavepe::shape(k), " and ", wavepe::shape(v));
    WAVEPE_CHECK_VALUE(k.size(0) == q.size(0) && k.size(3) == q.size(3), "k must be (B, H_kv, N, d) with q's B=",
                       q.size(0), " and d=", q.size(3), ", got ", wavepe::shape(k));
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
    a.q = p.q.data_ptr();
    a.k = p.k.data_ptr();
    a.v = p.v.data_ptr();
    strides3(a.q_strides, p.q);
    strides3(a.k_strides, p.k);
    strides3(a.v_strides, p.v);
    if (table.has_value()) {
        wavepe::check_like(*table, "table", q, "q");
        wavepe::check_dim(*table, 2, "table");
        WAVEPE_CHECK_VALUE(table->size(1) == q.size(3), "table.shape[1]=", table->size(1),
                           " does not match q.shape[-1]=", q.size(3), " (head_dim)");
        p.table = wavepe::contiguous(*table);
        a.table = p.table.data_ptr();
        a.table_rows = p.table.size(0);
    } else {
        a.r_lo = 0;  // the table's settings mean nothing without a table
        a.clamp = 0;
    }
    if (slopes.has_value()) {
        wavepe::check_same_device(*slopes, "alibi_slopes", q, "q");
        WAVEPE_CHECK_VALUE(wavepe::is_floating(slopes->scalar_type()),
                           "alibi_slopes must be a floating-point tensor, got ", wavepe::dtype_name(slopes->scalar_type()));
        wavepe::check_dim(*slopes, 1, "alibi_slopes");
        WAVEPE_CHECK_VALUE(slopes->size(0) == a.heads, "alibi_slopes must have one slope per head (", a.heads,
                           "), got ", slopes->size(0));
        p.slopes = wavepe::contiguous(wavepe::to_dtype(*slopes, wavepe::acc_dtype(q)));
        a.slopes = p.slopes.data_ptr();
    }
    if (kpm.has_value()) {
        wavepe::check_same_device(*kpm, "key_padding_mask", q, "q");
        WAVEPE_CHECK_VALUE(kpm->scalar_type() == wavepe::ScalarType::Bool, "key_padding_mask must be a bool tensor, got ",
                           wavepe::dtype_name(kpm->scalar_type()));
        WAVEPE_CHECK_VALUE(kpm->dim() == 2 && kpm->size(0) == a.batch && kpm->size(1) == a.n,
                           "key_padding_mask must be (B, N) = (", a.batch, ", ", a.n, "), got ", wavepe::shape(*kpm));
        p.kpm = wavepe::last_dim_contiguous(*kpm);
        a.key_padding_mask = static_cast<const uint8_t*>(p.kpm.data_ptr());  // torch's bool is one byte, 0 or 1
        a.kpm_stride = p.kpm.stride(0);
    }
    if (cu_seqlens.has_value()) {
        // (n_docs + 1,) for one packed row, or (B, n_docs + 1); int32 or int64, kept on the device
        // (converted there: no host sync), the values checked by the CPU plans
        const Tensor& cu = *cu_seqlens;
        wavepe::check_same_device(cu, "cu_seqlens", q, "q");
        const auto st = cu.scalar_type();
        WAVEPE_CHECK_VALUE(st == wavepe::ScalarType::Int || st == wavepe::ScalarType::Long,
                           "cu_seqlens must be an int32 or int64 tensor, got ", wavepe::dtype_name(st));
        WAVEPE_CHECK_VALUE((cu.dim() == 1 && a.batch == 1) || (cu.dim() == 2 && cu.size(0) == a.batch),
                           "cu_seqlens must be (n_docs + 1,) for B=1 or (B, n_docs + 1) with B=", a.batch, ", got ",
                           wavepe::shape(cu));
        WAVEPE_CHECK_VALUE(cu.size(cu.dim() - 1) >= 2, "cu_seqlens must hold at least 2 boundaries (0 and N), got ",
                           wavepe::shape(cu));
        WAVEPE_CHECK_VALUE(a.n <= INT32_MAX, "cu_seqlens needs k_len <= 2^31 - 1, got ", a.n);
        p.cu = wavepe::contiguous(wavepe::to_dtype(cu, wavepe::ScalarType::Int));
        a.cu_seqlens = static_cast<const int32_t*>(p.cu.data_ptr());
        a.cu_len = cu.size(cu.dim() - 1);
        a.cu_stride = a.cu_len;
    }
    return p;
}

std::tuple<Tensor, Tensor> attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const std::optional<Tensor>& table, const std::optional<Tensor>& slopes,
                                         const std::optional<Tensor>& key_padding_mask,
                                         const std::optional<Tensor>& cu_seqlens
                                             WAVEPE_ATTENTION_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    wavepe_attention_args a = wavepe_attention_args_defaults();
    WAVEPE_ATTENTION_SETTINGS(WAVEPE_OP_SETTING_FILL)
    const Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, cu_seqlens, a);
    wavepe_error err{};
    wavepe::check_sizes(wavepe_attention_validate(&a, 0, &err), err, "wavelet_attention");
    Tensor out = wavepe::empty({a.batch, a.heads, a.m, a.d}, q, "wavelet_attention", "out (B, H, q_len, head_dim)");
    Tensor lse = wavepe::empty({a.batch, a.heads, a.m}, q, "wavelet_attention", "lse (B, H, q_len)", wavepe::acc_dtype(q));
    a.out = out.data_ptr();
    a.lse = lse.data_ptr();
    strides3(a.out_strides, out);
    wavepe::check_status(wavepe_attention_validate(&a, 0, &err), err, "wavelet_attention");
    wavepe::launch(a, false, q, "wavelet_attention");
    return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> attention_bwd(
    const Tensor& grad_out, const std::optional<Tensor>& grad_lse, const Tensor& q, const Tensor& k,
    const Tensor& v, const Tensor& out, const Tensor& lse, const std::optional<Tensor>& table,
    const std::optional<Tensor>& slopes, const std::optional<Tensor>& key_padding_mask,
    const std::optional<Tensor>& cu_seqlens, bool table_grad, bool slopes_grad
        WAVEPE_ATTENTION_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    wavepe_attention_args a = wavepe_attention_args_defaults();
    WAVEPE_ATTENTION_SETTINGS(WAVEPE_OP_SETTING_FILL)
    const Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, cu_seqlens, a);
    const auto check_like_q = [&](const Tensor& t, const char* name) {
        wavepe::check_like(t, name, q, "q");
        WAVEPE_CHECK_VALUE(wavepe::same_sizes(t.sizes(), q.sizes()), name, " must have q's shape ", wavepe::shape(q),
                           ", got ", wavepe::shape(t));
    };
    check_like_q(grad_out, "grad_out");
    check_like_q(out, "out");
    const std::vector<int64_t> lse_shape{a.batch, a.heads, a.m};
    const wavepe::ScalarType acc = wavepe::acc_dtype(q);
    wavepe::check_same_device(lse, "lse", q, "q");
    WAVEPE_CHECK_VALUE(wavepe::same_sizes(lse.sizes(), lse_shape), "lse must be (B, H, M), got ", wavepe::shape(lse));
    const Tensor go = wavepe::last_dim_contiguous(grad_out), o = wavepe::last_dim_contiguous(out);
    const Tensor l = wavepe::contiguous(wavepe::to_dtype(lse, acc));
    Tensor gl;
    if (grad_lse.has_value()) {
        wavepe::check_same_device(*grad_lse, "grad_lse", q, "q");
        WAVEPE_CHECK_VALUE(wavepe::same_sizes(grad_lse->sizes(), lse_shape), "grad_lse must be (B, H, M), got ",
                           wavepe::shape(*grad_lse));
        gl = wavepe::contiguous(wavepe::to_dtype(*grad_lse, acc));
        a.dlse = gl.data_ptr();
    }
    a.out = const_cast<void*>(o.data_ptr());
    strides3(a.out_strides, o);
    a.lse = const_cast<void*>(l.data_ptr());
    a.dout = go.data_ptr();
    strides3(a.dout_strides, go);
    wavepe_error err{};
    constexpr const char* kBwd = "wavelet_attention backward";
    wavepe::check_sizes(wavepe_attention_validate(&a, 1, &err), err, kBwd);
    Tensor dq = wavepe::empty({a.batch, a.heads, a.m, a.d}, q, kBwd, "dq (B, H, q_len, head_dim)");
    Tensor dk = wavepe::empty({a.batch, a.kv_heads, a.n, a.d}, q, kBwd, "dk (B, H_kv, k_len, head_dim)");
    Tensor dv = wavepe::empty({a.batch, a.kv_heads, a.n, a.d}, q, kBwd, "dv (B, H_kv, k_len, head_dim)");
    Tensor dtable = wavepe::empty({0}, q, kBwd, "dtable"), dslopes_acc, dslopes = wavepe::empty({0}, q, kBwd, "dslopes");
    a.dq = dq.data_ptr();
    a.dk = dk.data_ptr();
    a.dv = dv.data_ptr();
    if (table_grad && a.table != nullptr) {
        dtable = wavepe::empty({a.table_rows, a.d}, q, kBwd, "dtable (table rows, head_dim)");
        a.dtable = dtable.data_ptr();
    }
    if (slopes_grad && a.slopes != nullptr) {
        dslopes_acc = wavepe::empty({a.heads}, q, kBwd, "dslopes (H,)", acc);
        a.dslopes = dslopes_acc.data_ptr();
    }
    wavepe::check_status(wavepe_attention_validate(&a, 1, &err), err, kBwd);
    wavepe::launch(a, true, q, kBwd);
    if (dslopes_acc.defined()) dslopes = wavepe::to_dtype(dslopes_acc, slopes->scalar_type());
    return {dq, dk, dv, dtable, dslopes};
}

void register_attention(torch::stable::detail::StableLibrary& m) {
    m.impl("attention_fwd", TORCH_BOX(&attention_fwd));
    m.impl("attention_bwd", TORCH_BOX(&attention_bwd));
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def((std::string("attention_fwd(Tensor q, Tensor k, Tensor v, Tensor? table, Tensor? slopes, "
                       "Tensor? key_padding_mask, Tensor? cu_seqlens")
               WAVEPE_ATTENTION_SETTINGS(WAVEPE_SCHEMA_SETTING) + ") -> (Tensor, Tensor)").c_str());
    m.def((std::string("attention_bwd(Tensor grad_out, Tensor? grad_lse, Tensor q, Tensor k, Tensor v, Tensor out, "
                       "Tensor lse, Tensor? table, Tensor? slopes, Tensor? key_padding_mask, Tensor? cu_seqlens, "
                       "bool table_grad, bool slopes_grad")
               WAVEPE_ATTENTION_SETTINGS(WAVEPE_SCHEMA_SETTING) + ") -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
              .c_str());
}

WAVEPE_REGISTER_ALL_DEVICES(register_attention)
