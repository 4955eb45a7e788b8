// relbias_op.cpp: torch.ops.wavepe.rel_bias and rel_bias_backward on the CPU.
//
//   rel_bias(q (..., M, d), table (R, d), r_lo, q_offset, k_len, causal, clamp) -> (..., M, k_len)
//   rel_bias_backward(grad (..., M, N), q, table, r_lo, q_offset, causal, clamp, output_mask)
//       -> (dq like q, dtable like table); a masked-out gradient is an empty (0,) tensor.
//
// q may be a strided view: its batch dimensions are described by at most two
// strided levels (e.g. a (B, L, H, d).transpose(1, 2) view has B and H), the
// outer one handled here by shifting base pointers, the inner one by the
// core's batch stride; anything else is copied once.  Work is split into
// units of whole row blocks and handed to threads in a zigzag order (first,
// last, second, second-to-last, ...) so that causal triangles, whose rows
// cost more the later they come, spread evenly.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "torch_common.h"

extern "C" {
#include "../core/relbias.h"
}

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

// Last dimension contiguous (a length-1 one may have any stride).
at::Tensor rows_contiguous(const at::Tensor& t) {
    return (t.size(-1) <= 1 || t.stride(-1) == 1) ? t : t.contiguous();
}

constexpr int64_t kUnitRows = 48;  // 8 blocks of 6 rows: one group of the AVX2 forward


// The (batch * M) query rows in units of work: kUnitRows rows of one matrix
// (whole blocks, starting at multiples of kUnitRows), or, when matrices are
// shorter than that (decoding), kUnitRows consecutive rows across matrices so
// that the core can gather the same row of several matrices into one block.
struct RowUnits {
    int64_t batch, m, per_g, count;
    RowUnits(int64_t batch_, int64_t m_) : batch(batch_), m(m_) {
        per_g = m >= kUnitRows ? (m + kUnitRows - 1) / kUnitRows : 0;
        count = per_g ? batch * per_g : (batch * m + kUnitRows - 1) / kUnitRows;
    }
    void range(int64_t unit, int64_t* begin, int64_t* end) const {
        if (per_g) {
            const int64_t g = unit / per_g, mb = (unit % per_g) * kUnitRows;
            *begin = g * m + mb;
            *end = g * m + std::min(mb + kUnitRows, m);
        } else {
            *begin = unit * kUnitRows;
            *end = std::min(*begin + kUnitRows, batch * m);
        }
    }
};

// Call f(unit) for the units [0, units) in parallel, zigzag order.
template <class F>
void parallel_zigzag(int64_t units, F&& f) {
    at::parallel_for(0, units, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) f(k % 2 == 0 ? k / 2 : units - 1 - k / 2);
    });
}

void check_inputs(const at::Tensor& q, const at::Tensor& table, const char* op) {
    wavepe::check_cpu(q, "q");
    wavepe::check_cpu(table, "table");
    wavepe::check_float(q, "q");
    wavepe::check_relbias_shapes(q, table, op);
}

// The sizes and settings shared by the forward and the backward; the caller sets the pointers.
wavepe_relbias_args base_args(int64_t batch, int64_t m, int64_t n, int64_t d, const at::Tensor& table, int64_t r_lo,
                              int64_t q_offset, bool causal, bool clamp) {
    wavepe_relbias_args a{};
    a.batch = batch;
    a.m = m;
    a.n = n;
    a.d = d;
    a.rows = table.size(0);
    a.r_lo = r_lo;
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    a.clamp = clamp ? 1 : 0;
    return a;
}

// Scratch of the AVX2 kernels, filled in parallel over the table's chunks.
at::Tensor prepare_workspace(wavepe_isa isa, wavepe_relbias_args& a, unsigned kernels, bool f32) {
    const int64_t bytes = f32 ? wavepe_relbias_f32_workspace_bytes(isa, &a, kernels)
                              : wavepe_relbias_f64_workspace_bytes(isa, &a, kernels);
    TORCH_CHECK(bytes >= 0, "rel_bias: ", wavepe_status_str(static_cast<int>(bytes)));
    if (bytes == 0) return at::Tensor();
    at::Tensor ws = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
    a.workspace = ws.data_ptr();
    const int64_t chunks = f32 ? wavepe_relbias_f32_chunks(isa, &a) : wavepe_relbias_f64_chunks(isa, &a);
    at::parallel_for(0, chunks, 16, [&](int64_t b, int64_t e) {
        if (f32) wavepe_relbias_f32_prepare(isa, &a, kernels, b, e);
        else wavepe_relbias_f64_prepare(isa, &a, kernels, b, e);
    });
    return ws;
}

at::Tensor rel_bias_cpu(const at::Tensor& q_in, const at::Tensor& table_in, int64_t r_lo, int64_t q_offset,
                        int64_t k_len, bool causal, bool clamp) {
    check_inputs(q_in, table_in, "rel_bias");
    TORCH_CHECK_VALUE(k_len >= 0, "rel_bias: k_len must be >= 0, got ", k_len);
    TORCH_CHECK_VALUE(!clamp || table_in.size(0) >= 1, "rel_bias: table must have at least one row with clamp=True");
    at::Tensor q = rows_contiguous(q_in);
    std::optional<BatchLevels> lv = batch_levels(q);
    if (!lv) {
        q = q.contiguous();
        lv = batch_levels(q);
    }
    const at::Tensor table = table_in.contiguous();
    const int64_t m = q.size(-2), d = q.size(-1);
    std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end());
    shape.back() = k_len;
    const int64_t elem = q.element_size();
    const int64_t out_dims[3] = {lv->outer * lv->inner, m, k_len};  // batch product fits: q exists
    wavepe::check_status(wavepe_checked_numel(3, out_dims, elem, nullptr), "rel_bias (batch * M * k_len)");
    at::Tensor out = wavepe::empty_output(shape, q.options());
    if (out.numel() == 0) return out;

    wavepe_relbias_args a = base_args(lv->inner, m, k_len, d, table, r_lo, q_offset, causal, clamp);
    a.q = q.data_ptr();
    a.q_stride_g = lv->stride_inner;
    a.q_stride_m = q.stride(-2);
    a.table = table.data_ptr();
    a.bias = out.data_ptr();
    a.bias_stride_g = m * k_len;
    a.bias_stride_m = k_len;
    wavepe::check_status(wavepe_relbias_validate(&a, WAVEPE_RELBIAS_FORWARD, elem), "rel_bias");

    const wavepe_isa isa = wavepe::active_isa();
    const bool f32 = q.scalar_type() == at::kFloat;
    const at::Tensor ws = prepare_workspace(isa, a, WAVEPE_RELBIAS_FORWARD, f32);
    const char* q_base = static_cast<const char*>(a.q);
    char* out_base = static_cast<char*>(a.bias);
    const RowUnits units(lv->inner, m);
    parallel_zigzag(lv->outer * units.count, [&](int64_t unit) {
        const int64_t o = unit / units.count;
        wavepe_relbias_args ao = a;
        ao.q = q_base + o * lv->stride_outer * elem;
        ao.bias = out_base + o * lv->inner * m * k_len * elem;
        int64_t begin, end;
        units.range(unit % units.count, &begin, &end);
        if (f32) wavepe_relbias_f32(isa, &ao, begin, end);
        else wavepe_relbias_f64(isa, &ao, begin, end);
    });
    return out;
}

// A (..., M, C) tensor with one strided batch level (copied if it needs more).
at::Tensor one_level(const at::Tensor& t, BatchLevels* lv) {
    at::Tensor r = rows_contiguous(t);
    std::optional<BatchLevels> l = batch_levels(r);
    if (!l || l->outer != 1) {
        r = r.contiguous();
        l = batch_levels(r);
    }
    *lv = *l;
    return r;
}

std::tuple<at::Tensor, at::Tensor> rel_bias_backward_cpu(const at::Tensor& grad_in, const at::Tensor& q_in,
                                                          const at::Tensor& table_in, int64_t r_lo,
                                                          int64_t q_offset, bool causal, bool clamp,
                                                          std::array<bool, 2> output_mask) {
    check_inputs(q_in, table_in, "rel_bias_backward");
    wavepe::check_cpu(grad_in, "grad");
    wavepe::check_same_dtype(grad_in, "grad", q_in, "q");
    TORCH_CHECK_VALUE(grad_in.dim() == q_in.dim() && grad_in.sizes().slice(0, q_in.dim() - 1) ==
                                                         q_in.sizes().slice(0, q_in.dim() - 1),
                      "rel_bias_backward: grad must be (..., M, N) with q's leading shape ",
                      q_in.sizes().slice(0, q_in.dim() - 1), ", got ", grad_in.sizes());
    TORCH_CHECK_VALUE(!clamp || table_in.size(0) >= 1,
                      "rel_bias_backward: table must have at least one row with clamp=True");
    const bool want_dq = output_mask[0], want_dt = output_mask[1];
    const at::Tensor table = table_in.contiguous();
    at::Tensor dq = want_dq ? at::empty(q_in.sizes(), q_in.options()) : at::empty({0}, q_in.options());
    at::Tensor dt = want_dt ? at::empty(table.sizes(), table.options()) : at::empty({0}, table.options());
    if (!want_dq && !want_dt) return {dq, dt};

    BatchLevels glv, qlv;
    const at::Tensor grad = one_level(grad_in, &glv);
    const at::Tensor q = want_dt ? one_level(q_in, &qlv) : q_in;
    const int64_t m = q_in.size(-2), d = q_in.size(-1), n = grad.size(-1), elem = q_in.element_size();
    const int64_t batch = glv.inner;  // grad is one level: its batch product
    const int64_t dims[3] = {batch, m, n};
    wavepe::check_status(wavepe_checked_numel(3, dims, elem, nullptr), "rel_bias_backward (batch * M * N)");

    wavepe_relbias_args a = base_args(batch, m, n, d, table, r_lo, q_offset, causal, clamp);
    a.table = table.data_ptr();
    a.grad = grad.data_ptr();
    a.grad_stride_g = glv.stride_inner;
    a.grad_stride_m = grad.stride(-2);
    unsigned kernels = 0;
    if (want_dq) {
        kernels |= WAVEPE_RELBIAS_GRAD_Q;
        a.dq = dq.data_ptr();
        a.dq_stride_g = m * d;
        a.dq_stride_m = d;
    }
    if (want_dt) {
        kernels |= WAVEPE_RELBIAS_GRAD_TABLE;
        a.q = q.data_ptr();
        a.q_stride_g = qlv.stride_inner;
        a.q_stride_m = q.stride(-2);
        a.dtable = dt.data_ptr();
    }
    wavepe::check_status(wavepe_relbias_validate(&a, kernels, elem), "rel_bias_backward");

    const wavepe_isa isa = wavepe::active_isa();
    const bool f32 = q_in.scalar_type() == at::kFloat;
    if (want_dq && dq.numel() > 0) {
        const at::Tensor ws = prepare_workspace(isa, a, WAVEPE_RELBIAS_GRAD_Q, f32);
        const RowUnits units(batch, m);
        parallel_zigzag(units.count, [&](int64_t unit) {
            int64_t begin, end;
            units.range(unit, &begin, &end);
            if (f32) wavepe_relbias_grad_q_f32(isa, &a, begin, end);
            else wavepe_relbias_grad_q_f64(isa, &a, begin, end);
        });
    }
    if (want_dt && dt.numel() > 0) {
        // a few units per thread: each unit walks all of q once, so not too many
        const int64_t rows = a.rows, threads = at::get_num_threads();
        const int64_t unit_rows = std::max<int64_t>(6, (rows / (4 * threads) + 5) / 6 * 6);
        const int64_t units = (rows + unit_rows - 1) / unit_rows;
        parallel_zigzag(units, [&](int64_t unit) {
            const int64_t begin = unit * unit_rows, end = std::min(begin + unit_rows, rows);
            if (f32) wavepe_relbias_grad_table_f32(isa, &a, begin, end);
            else wavepe_relbias_grad_table_f64(isa, &a, begin, end);
        });
    }
    return {dq, dt};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def("rel_bias(Tensor q, Tensor table, SymInt r_lo, SymInt q_offset, SymInt k_len, bool causal, bool clamp) "
          "-> Tensor");
    m.def("rel_bias_backward(Tensor grad, Tensor q, Tensor table, SymInt r_lo, SymInt q_offset, bool causal, "
          "bool clamp, bool[2] output_mask) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(wavepe, CPU, m) {
    m.impl("rel_bias", &rel_bias_cpu);
    m.impl("rel_bias_backward", &rel_bias_backward_cpu);
}
