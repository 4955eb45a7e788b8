// attention_op.cpp: torch.ops.wavepe.attention_fwd / attention_bwd on the CPU.
//
// Thin: check what the core cannot see (device, dtype, shapes across tensors),
// build the core's plan, run its phases with at::parallel_for.  Units of a
// phase are independent and each is computed the same whatever the split, so
// results are identical run to run and for any number of threads.
#include <ATen/ops/zeros.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "torch_common.h"

extern "C" {
#include "../core/attention.h"
}

namespace {

struct PlanDeleter {
    void operator()(wavepe_attention_plan* p) const { wavepe_attention_plan_free(p); }
};
using PlanPtr = std::unique_ptr<wavepe_attention_plan, PlanDeleter>;

// The core wants the last dimension contiguous; other strides are honoured.
at::Tensor rows_dense(const at::Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous(); }

void strides3(int64_t dst[3], const at::Tensor& t) {
    for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

struct Prepared {
    at::Tensor q, k, v, table, slopes, kpm;
};

Prepared prepare(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& table,
                 const std::optional<at::Tensor>& slopes, const std::optional<at::Tensor>& kpm, wavepe_attention_args& a,
                 int64_t r_lo, bool clamp, double scale, int64_t q_offset, bool causal) {
    wavepe::check_cpu(q, "q");
    wavepe::check_cpu(k, "k");
    wavepe::check_cpu(v, "v");
    wavepe::check_float(q, "q");
    wavepe::check_attention_inputs(q, k, v, scale, table.has_value(), slopes.has_value());
    Prepared p;
    p.q = rows_dense(q);
    p.k = rows_dense(k);
    p.v = rows_dense(v);
    a = wavepe_attention_args{};
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
        wavepe::check_cpu(*table, "table");
        wavepe::check_attention_table(q, *table, clamp);
        p.table = table->contiguous();
        a.table = p.table.data_ptr();
        a.table_rows = p.table.size(0);
        a.r_lo = r_lo;
        a.clamp = clamp ? 1 : 0;
    }
    if (slopes.has_value()) {
        wavepe::check_cpu(*slopes, "alibi_slopes");
        wavepe::check_same_dtype(q, "q", *slopes, "alibi_slopes");
        wavepe::check_dim(*slopes, 1, "alibi_slopes");
        TORCH_CHECK_VALUE(slopes->size(0) == a.heads, "alibi_slopes must have one slope per head (", a.heads,
                          "), got ", slopes->size(0));
        p.slopes = slopes->contiguous();
        a.slopes = p.slopes.data_ptr();
    }
    if (kpm.has_value()) {
        wavepe::check_cpu(*kpm, "key_padding_mask");
        TORCH_CHECK_TYPE(kpm->scalar_type() == at::kBool, "key_padding_mask must be a bool tensor, got ",
                         kpm->scalar_type());
        TORCH_CHECK_VALUE(kpm->dim() == 2 && kpm->size(0) == a.batch && kpm->size(1) == a.n,
                          "key_padding_mask must be (B, N) = (", a.batch, ", ", a.n, "), got ", kpm->sizes());
        p.kpm = kpm->contiguous();
        a.key_padding_mask = reinterpret_cast<const uint8_t*>(p.kpm.data_ptr<bool>());
        a.kpm_stride = a.n;
    }
    return p;
}

// Run both phases of a plan over the intra-op thread pool.
void run_plan(wavepe_attention_plan* plan, const char* what) {
    for (int phase = 0; phase < 2; ++phase) {
        const int64_t units = wavepe_attention_units(plan, phase);
        if (units == 0) continue;
        std::atomic<int> status{WAVEPE_OK};
        at::parallel_for(0, units, wavepe_attention_grain(plan, phase), [&](int64_t b, int64_t e) {
            const int s = wavepe_attention_run(plan, phase, b, e);
            if (s != WAVEPE_OK) status.store(s);
        });
        wavepe::check_status(status.load(), what);
    }
}

std::tuple<at::Tensor, at::Tensor> attention_fwd_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::optional<at::Tensor>& table, int64_t r_lo, bool clamp,
                                                     const std::optional<at::Tensor>& slopes,
                                                     const std::optional<at::Tensor>& key_padding_mask, double scale,
                                                     int64_t q_offset, bool causal) {
    wavepe_attention_args a;
    Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    at::Tensor out = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor lse = at::empty({a.batch, a.heads, a.m}, q.options());
    a.out = out.data_ptr();
    a.lse = lse.data_ptr();
    strides3(a.out_strides, out);
    wavepe_attention_plan* raw = nullptr;
    wavepe::check_status(wavepe_attention_fwd_plan(wavepe::active_isa(), q.scalar_type() == at::kDouble, &a, &raw),
                         "wavelet_attention");
    PlanPtr plan(raw);
    run_plan(plan.get(), "wavelet_attention");
    return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_bwd_cpu(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& table,
    int64_t r_lo, bool clamp, const std::optional<at::Tensor>& slopes,
    const std::optional<at::Tensor>& key_padding_mask, double scale, int64_t q_offset, bool causal, bool table_grad,
    bool slopes_grad) {
    wavepe_attention_args a;
    Prepared p = prepare(q, k, v, table, slopes, key_padding_mask, a, r_lo, clamp, scale, q_offset, causal);
    const auto check_like_q = [&](const at::Tensor& t, const char* name) {
        wavepe::check_cpu(t, name);
        wavepe::check_same_dtype(q, "q", t, name);
        TORCH_CHECK_VALUE(t.sizes() == q.sizes(), name, " must have q's shape ", q.sizes(), ", got ", t.sizes());
    };
    check_like_q(grad_out, "grad_out");
    check_like_q(out, "out");
    const std::vector<int64_t> lse_shape{a.batch, a.heads, a.m};
    wavepe::check_same_dtype(q, "q", lse, "lse");
    TORCH_CHECK_VALUE(lse.sizes() == lse_shape, "lse must be (B, H, M), got ", lse.sizes());
    const at::Tensor go = rows_dense(grad_out), o = rows_dense(out), l = lse.contiguous();
    at::Tensor gl;
    if (grad_lse.has_value()) {
        wavepe::check_same_dtype(q, "q", *grad_lse, "grad_lse");
        TORCH_CHECK_VALUE(grad_lse->sizes() == lse_shape, "grad_lse must be (B, H, M), got ", grad_lse->sizes());
        gl = grad_lse->contiguous();
        a.dlse = gl.data_ptr();
    }
    a.out = const_cast<void*>(o.data_ptr());
    strides3(a.out_strides, o);
    a.lse = const_cast<void*>(l.data_ptr());
    a.dout = go.data_ptr();
    strides3(a.dout_strides, go);
    at::Tensor dq = at::empty({a.batch, a.heads, a.m, a.d}, q.options());
    at::Tensor dk = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dv = at::empty({a.batch, a.kv_heads, a.n, a.d}, q.options());
    at::Tensor dtable = at::empty({0}, q.options()), dslopes = at::empty({0}, q.options());
    a.dq = dq.data_ptr();
    a.dk = dk.data_ptr();
    a.dv = dv.data_ptr();
    if (table_grad && a.table != nullptr) {
        dtable = at::empty({a.table_rows, a.d}, q.options());
        a.dtable = dtable.data_ptr();
    }
    if (slopes_grad && a.slopes != nullptr) {
        dslopes = at::empty({a.heads}, q.options());
        a.dslopes = dslopes.data_ptr();
    }
    wavepe_attention_plan* raw = nullptr;
    wavepe::check_status(wavepe_attention_bwd_plan(wavepe::active_isa(), q.scalar_type() == at::kDouble, &a, &raw),
                         "wavelet_attention backward");
    PlanPtr plan(raw);
    run_plan(plan.get(), "wavelet_attention backward");
    return {dq, dk, dv, dtable, dslopes};
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

TORCH_LIBRARY_IMPL(wavepe, CPU, m) {
    m.impl("attention_fwd", &attention_fwd_cpu);
    m.impl("attention_bwd", &attention_bwd_cpu);
}
