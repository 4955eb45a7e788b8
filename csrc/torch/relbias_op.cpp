// relbias_op.cpp: torch.ops.wavepe.rel_bias and rel_bias_backward, every device.
//
//   rel_bias(q (..., M, d), table (R, d), k_len, <settings>) -> (..., M, k_len)
//   rel_bias_backward(grad (..., M, N), q, table, output_mask, <settings>)
//       -> (dq like q, dtable like table); a masked-out gradient is an empty (0,) tensor.
// <settings>: WAVEPE_RELBIAS_SETTINGS (csrc/core/relbias.h) -- r_lo, q_offset, causal, clamp --
// in the schema, the parameters and the struct fill by op_settings.h.
//
// One body per op for CPU and CUDA: it fills wavepe_relbias_args
// (csrc/core/relbias.h) once, validates it, and wavepe::launch runs it on the
// tensors' device.  q, table and grad: float32, float64, bfloat16 or float16 on
// every device (half types read and written as they are, summed in float32).  q may be a strided view: its batch dimensions are
// described by at most two strided levels (e.g. a (B, L, H, d).transpose(1, 2)
// view has B and H), which the forward reads in place; anything else is
// copied once.  The backward takes one level (copied if needed).
#include <optional>
#include <utility>
#include <vector>

#include "launch.h"
#include "op_settings.h"

namespace {

using wavepe::Shape;
using wavepe::Tensor;

// The batch dimensions of a (..., R, C) tensor as outer x inner strided levels.
struct BatchLevels {
    int64_t outer = 1, inner = 1;
    int64_t stride_outer = 0, stride_inner = 0;
};

std::optional<BatchLevels> batch_levels(const Tensor& t) {
    std::vector<std::pair<int64_t, int64_t>> merged;  // (size, stride), innermost first
    for (int64_t i = t.dim() - 3; i >= 0; --i) {
        const int64_t size = t.size(i), stride = t.stride(i);
        if (size == 1) continue;
        if (!merged.empty() && stride == merged.back().first * merged.back().second) {
            merged.back().first *= size;  // contiguous with the level inside: one level
            continue;
        }
        merged.emplace_back(size, stride);
    }
    if (merged.size() > 2) return std::nullopt;
    BatchLevels lv;
    if (!merged.empty()) lv.inner = merged[0].first, lv.stride_inner = merged[0].second;
    if (merged.size() == 2) lv.outer = merged[1].first, lv.stride_outer = merged[1].second;
    return lv;
}

// t with its last dimension contiguous and at most `levels` strided batch levels (copied if it has more).
Tensor with_levels(const Tensor& t, int levels, BatchLevels* lv) {
    Tensor r = wavepe::last_dim_contiguous(t);
    std::optional<BatchLevels> l = batch_levels(r);
    if (!l || (levels == 1 && l->outer != 1)) {
        r = torch::stable::contiguous(r);
        l = batch_levels(r);
    }
    *lv = *l;
    return r;
}

// Devices, dtypes and shapes of q (..., M, d) and table (R, d).
void check_inputs(const Tensor& q, const Tensor& table, const char* op) {
    wavepe::dtype_of(q, "q", /*half_on_cpu=*/true);  // bf16 / fp16 read natively everywhere
    wavepe::check_like(table, "table", q, "q");
    WAVEPE_CHECK_VALUE(q.dim() >= 2, op, ": q must be (..., M, d), got shape ", wavepe::shape(q));
    wavepe::check_dim(table, 2, "table");
    WAVEPE_CHECK_VALUE(table.size(1) == q.size(-1), op, ": table.shape[1]=", table.size(1),
                      " does not match q.shape[-1]=", q.size(-1), " (head_dim)");
}

// The sizes shared by the forward and the backward (the settings are filled by the caller).
void set_sizes(wavepe_relbias_args& a, const Tensor& q, int64_t n, const Tensor& table) {
    a.dtype = wavepe::dtype_of(q, "q", /*half_on_cpu=*/true);
    a.m = q.size(-2);
    a.n = n;
    a.d = q.size(-1);
    a.rows = table.size(0);
}

Tensor rel_bias(const Tensor& q_in, const Tensor& table_in,
                int64_t k_len WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    check_inputs(q_in, table_in, "rel_bias");
    BatchLevels lv;
    const Tensor q = with_levels(q_in, 2, &lv);
    const Tensor table = wavepe::contiguous(table_in);
    wavepe_relbias_args a = wavepe_relbias_args_defaults();
    WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_FILL)
    set_sizes(a, q, k_len, table);
    a.outer = lv.outer;
    a.batch = lv.inner;
    wavepe_error err{};
    wavepe::check_status(wavepe_relbias_validate(&a, 0, &err), err, "rel_bias");  // sizes and positions
    std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end());
    shape.back() = k_len;
    Tensor out = wavepe::empty_output(shape, q, "rel_bias", "the bias (..., q_len, k_len)");
    a.q = q.data_ptr();
    a.q_stride_o = lv.stride_outer;
    a.q_stride_g = lv.stride_inner;
    a.q_stride_m = q.stride(-2);
    a.table = table.data_ptr();
    a.bias = out.data_ptr();
    a.bias_stride_o = lv.inner * a.m * k_len;
    a.bias_stride_g = a.m * k_len;
    a.bias_stride_m = k_len;
    wavepe::check_status(wavepe_relbias_validate(&a, WAVEPE_RELBIAS_FORWARD, &err), err, "rel_bias");
    wavepe::launch(a, WAVEPE_RELBIAS_FORWARD, q, "rel_bias");
    return out;
}

std::tuple<Tensor, Tensor> rel_bias_backward(const Tensor& grad_in, const Tensor& q_in, const Tensor& table_in,
                                             std::vector<bool> output_mask
                                                 WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    check_inputs(q_in, table_in, "rel_bias_backward");
    wavepe::check_like(grad_in, "grad", q_in, "q");
    const size_t lead = static_cast<size_t>(q_in.dim() - 1);
    WAVEPE_CHECK_VALUE(grad_in.dim() == q_in.dim() &&
                           wavepe::same_sizes(grad_in.sizes().slice(0, lead), q_in.sizes().slice(0, lead)),
                       "rel_bias_backward: grad must be (..., M, N) with q's leading shape ",
                       Shape(q_in.sizes().slice(0, lead)), ", got ", wavepe::shape(grad_in));
    WAVEPE_CHECK_VALUE(output_mask.size() == 2, "rel_bias_backward: output_mask must hold 2 flags, got ",
                       output_mask.size());
    const bool want_dq = output_mask[0], want_dt = output_mask[1];
    const Tensor table = wavepe::contiguous(table_in);
    BatchLevels glv, qlv;
    const Tensor grad = with_levels(grad_in, 1, &glv);
    const Tensor q = want_dt ? with_levels(q_in, 1, &qlv) : q_in;
    wavepe_relbias_args a = wavepe_relbias_args_defaults();
    WAVEPE_RELBIAS_SETTINGS(WAVEPE_OP_SETTING_FILL)
    set_sizes(a, q_in, grad.size(-1), table);
    a.batch = glv.inner;  // grad is one level: its batch product
    wavepe_error err{};
    wavepe::check_status(wavepe_relbias_validate(&a, 0, &err), err, "rel_bias_backward");  // sizes and positions
    const std::vector<int64_t> none{0};  // a masked-out gradient: an empty (0,) tensor
    Tensor dq = wavepe::empty(want_dq ? q_in.sizes() : wavepe::IntArrayRef(none), q_in, "rel_bias backward", "dq (..., q_len, head_dim)");
    Tensor dt = wavepe::empty(want_dt ? table.sizes() : wavepe::IntArrayRef(none), table, "rel_bias backward", "dtable (table rows, head_dim)");
    if (!want_dq && !want_dt) return {dq, dt};
    a.table = table.data_ptr();
    a.grad = grad.data_ptr();
    a.grad_stride_g = glv.stride_inner;
    a.grad_stride_m = grad.stride(-2);
    unsigned kernels = 0;
    if (want_dq) {
        kernels |= WAVEPE_RELBIAS_GRAD_Q;
        a.dq = dq.data_ptr();
        a.dq_stride_g = a.m * a.d;
        a.dq_stride_m = a.d;
    }
    if (want_dt) {
        kernels |= WAVEPE_RELBIAS_GRAD_TABLE;
        a.q = q.data_ptr();
        a.q_stride_g = qlv.stride_inner;
        a.q_stride_m = q.stride(-2);
        a.dtable = dt.data_ptr();
    }
    wavepe::check_status(wavepe_relbias_validate(&a, kernels, &err), err, "rel_bias_backward");
    wavepe::launch(a, kernels, q_in, "rel_bias_backward");
    return {dq, dt};
}

void register_relbias(torch::stable::detail::StableLibrary& m) {
    m.impl("rel_bias", TORCH_BOX(&rel_bias));
    m.impl("rel_bias_backward", TORCH_BOX(&rel_bias_backward));
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def((std::string("rel_bias(Tensor q, Tensor table, SymInt k_len") WAVEPE_RELBIAS_SETTINGS(WAVEPE_SCHEMA_SETTING) +
           ") -> Tensor").c_str());
    m.def((std::string("rel_bias_backward(Tensor grad, Tensor q, Tensor table, bool[2] output_mask")
               WAVEPE_RELBIAS_SETTINGS(WAVEPE_SCHEMA_SETTING) + ") -> (Tensor, Tensor)").c_str());
}

WAVEPE_REGISTER_ALL_DEVICES(register_relbias)
