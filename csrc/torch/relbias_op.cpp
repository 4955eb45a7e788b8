// relbias_op.cpp: torch.ops.wavepe.rel_bias and rel_bias_backward, every device.
//
//   rel_bias(q (..., M, d), table (R, d), r_lo, q_offset, k_len, causal, clamp) -> (..., M, k_len)
//   rel_bias_backward(grad (..., M, N), q, table, r_lo, q_offset, causal, clamp, output_mask)
//       -> (dq like q, dtable like table); a masked-out gradient is an empty (0,) tensor.
//
// One body per op for CPU and CUDA: it fills wavepe_relbias_args
// (csrc/core/relbias.h) once, validates it, and wavepe::launch runs it on the
// tensors' device.  q may be a strided view: its batch dimensions are
// described by at most two strided levels (e.g. a (B, L, H, d).transpose(1, 2)
// view has B and H), which the forward reads in place; anything else is
// copied once.  The backward takes one level (copied if needed).
#include <optional>
#include <utility>
#include <vector>

#include "launch.h"
#include "torch_common.h"

namespace {

// The batch dimensions of a (..., R, C) tensor as outer x inner strided levels.
struct BatchLevels {
    int64_t outer = 1, inner = 1;
    int64_t stride_outer = 0, stride_inner = 0;
};

std::optional<BatchLevels> batch_levels(const at::Tensor& t) {
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
at::Tensor with_levels(const at::Tensor& t, int levels, BatchLevels* lv) {
    at::Tensor r = wavepe::last_dim_contiguous(t);
    std::optional<BatchLevels> l = batch_levels(r);
    if (!l || (levels == 1 && l->outer != 1)) {
        r = r.contiguous();
        l = batch_levels(r);
    }
    *lv = *l;
    return r;
}

// Devices, dtypes and shapes of q (..., M, d) and table (R, d).
void check_inputs(const at::Tensor& q, const at::Tensor& table, const char* op) {
    wavepe::dtype_of(q, "q");
    wavepe::check_like(table, "table", q, "q");
    TORCH_CHECK_VALUE(q.dim() >= 2, op, ": q must be (..., M, d), got shape ", q.sizes());
    wavepe::check_dim(table, 2, "table");
    TORCH_CHECK_VALUE(table.size(1) == q.size(-1), op, ": table.shape[1]=", table.size(1),
                      " does not match q.shape[-1]=", q.size(-1), " (head_dim)");
}

// The sizes and settings shared by the forward and the backward; the caller sets the tensors.
wavepe_relbias_args base_args(const at::Tensor& q, int64_t n, const at::Tensor& table, int64_t r_lo, int64_t q_offset,
                              bool causal, bool clamp) {
    wavepe_relbias_args a{};
    a.dtype = wavepe::dtype_of(q, "q");
    a.m = q.size(-2);
    a.n = n;
    a.d = q.size(-1);
    a.rows = table.size(0);
    a.r_lo = r_lo;
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    a.clamp = clamp ? 1 : 0;
    return a;
}

at::Tensor rel_bias(const at::Tensor& q_in, const at::Tensor& table_in, int64_t r_lo, int64_t q_offset, int64_t k_len,
                    bool causal, bool clamp) {
    check_inputs(q_in, table_in, "rel_bias");
    BatchLevels lv;
    const at::Tensor q = with_levels(q_in, 2, &lv);
    const at::Tensor table = table_in.contiguous();
    wavepe_relbias_args a = base_args(q, k_len, table, r_lo, q_offset, causal, clamp);
    a.outer = lv.outer;
    a.batch = lv.inner;
    wavepe_error err{};
    wavepe::check_status(wavepe_relbias_validate(&a, 0, &err), err, "rel_bias");  // sizes and positions
    std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end());
    shape.back() = k_len;
    at::Tensor out = wavepe::empty_output(shape, q.options());
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
    wavepe::launch(a, WAVEPE_RELBIAS_FORWARD, q.device(), "rel_bias");
    return out;
}

std::tuple<at::Tensor, at::Tensor> rel_bias_backward(const at::Tensor& grad_in, const at::Tensor& q_in,
                                                     const at::Tensor& table_in, int64_t r_lo, int64_t q_offset,
                                                     bool causal, bool clamp, std::array<bool, 2> output_mask) {
    check_inputs(q_in, table_in, "rel_bias_backward");
    wavepe::check_like(grad_in, "grad", q_in, "q");
    TORCH_CHECK_VALUE(grad_in.dim() == q_in.dim() && grad_in.sizes().slice(0, q_in.dim() - 1) ==
                                                         q_in.sizes().slice(0, q_in.dim() - 1),
                      "rel_bias_backward: grad must be (..., M, N) with q's leading shape ",
                      q_in.sizes().slice(0, q_in.dim() - 1), ", got ", grad_in.sizes());
    const bool want_dq = output_mask[0], want_dt = output_mask[1];
    const at::Tensor table = table_in.contiguous();
    BatchLevels glv, qlv;
    const at::Tensor grad = with_levels(grad_in, 1, &glv);
    const at::Tensor q = want_dt ? with_levels(q_in, 1, &qlv) : q_in;
    wavepe_relbias_args a = base_args(q_in, grad.size(-1), table, r_lo, q_offset, causal, clamp);
    a.batch = glv.inner;  // grad is one level: its batch product
    wavepe_error err{};
    wavepe::check_status(wavepe_relbias_validate(&a, 0, &err), err, "rel_bias_backward");  // sizes and positions
    at::Tensor dq = want_dq ? at::empty(q_in.sizes(), q_in.options()) : at::empty({0}, q_in.options());
    at::Tensor dt = want_dt ? at::empty(table.sizes(), table.options()) : at::empty({0}, table.options());
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
    wavepe::launch(a, kernels, q_in.device(), "rel_bias_backward");
    return {dq, dt};
}

void register_relbias(torch::Library& m) {
    m.impl("rel_bias", &rel_bias);
    m.impl("rel_bias_backward", &rel_bias_backward);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def("rel_bias(Tensor q, Tensor table, SymInt r_lo, SymInt q_offset, SymInt k_len, bool causal, bool clamp) "
          "-> Tensor");
    m.def("rel_bias_backward(Tensor grad, Tensor q, Tensor table, SymInt r_lo, SymInt q_offset, bool causal, "
          "bool clamp, bool[2] output_mask) -> (Tensor, Tensor)");
}

WAVEPE_REGISTER_ALL_DEVICES(register_relbias)
