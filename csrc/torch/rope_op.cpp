// rope_op.cpp: torch.ops.wavepe.rope on the CPU.
//
//   rope(Tensor q, Tensor? k, Tensor? positions, SymInt offset, Tensor inv_freq,
//        SymInt rotary_pairs, str layout, float scale, bool inverse) -> (Tensor, Tensor)
//
// q (B, Hq, L, d) and k (B, Hk, L, d) are rotated in one pass that computes
// cos/sin once per (position, pair) for all heads (csrc/core/rope.h).  Any
// strides are read in place as long as the d elements of a head vector are
// contiguous (otherwise that input is copied once); the outputs are new,
// contiguous (B, H, L, d) tensors.  Without k the second output is an empty
// (B, 0, L, d) tensor, so the schema needs no optional return.
// positions: None (positions offset .. offset + L - 1), or int64 (L,) or
// (B, L) / (1, L), with offset 0.  inverse = the backward (rotation by -angle).
#include <ATen/ops/empty.h>

#include <cmath>
#include <optional>
#include <string_view>
#include <tuple>

#include "torch_common.h"

extern "C" {
#include "../core/rope.h"
}

namespace {

int parse_layout(std::string_view layout) {
    if (layout == "half") return WAVEPE_ROPE_HALF;
    if (layout == "interleaved") return WAVEPE_ROPE_INTERLEAVED;
    TORCH_CHECK_VALUE(false, "layout must be 'half' or 'interleaved', got '", std::string(layout), "'");
    return -1;
}

// The tensor to read: itself when its last dimension is contiguous.
at::Tensor with_unit_last_stride(const at::Tensor& t) {
    return (t.size(3) <= 1 || t.stride(3) == 1) ? t : t.contiguous();
}

void fill_tensor_args(wavepe_rope_tensor& dst, const at::Tensor& in, const at::Tensor& out) {
    dst.heads = in.size(1);
    dst.in = in.data_ptr();
    dst.in_stride_b = in.stride(0), dst.in_stride_h = in.stride(1), dst.in_stride_l = in.stride(2);
    dst.out = out.data_ptr();
    dst.out_stride_b = out.stride(0), dst.out_stride_h = out.stride(1), dst.out_stride_l = out.stride(2);
}

std::tuple<at::Tensor, at::Tensor> rope_cpu(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                            const std::optional<at::Tensor>& positions, int64_t offset,
                                            const at::Tensor& inv_freq, int64_t rotary_pairs,
                                            c10::string_view layout, double scale, bool inverse) {
    wavepe::check_cpu(q, "q");
    wavepe::check_float(q, "q");
    wavepe::check_dim(q, 4, "q");
    const int64_t B = q.size(0), L = q.size(2), d = q.size(3);
    TORCH_CHECK_VALUE(d % 2 == 0, "head_dim (q.shape[-1]) must be even for RoPE, got ", d);
    if (k.has_value()) {
        wavepe::check_cpu(*k, "k");
        wavepe::check_same_dtype(q, "q", *k, "k");
        wavepe::check_dim(*k, 4, "k");
        TORCH_CHECK_VALUE(k->size(0) == B && k->size(2) == L && k->size(3) == d,
                          "k must be (B, H_k, L, d) with q's B, L and d: q ", q.sizes(), ", k ", k->sizes());
    }
    wavepe::check_cpu(inv_freq, "inv_freq");
    TORCH_CHECK_TYPE(inv_freq.scalar_type() == at::kDouble, "inv_freq must be float64 (angles are formed in float64), got ",
                     inv_freq.scalar_type());
    wavepe::check_dim(inv_freq, 1, "inv_freq");
    TORCH_CHECK_VALUE(inv_freq.size(0) == d / 2, "inv_freq must have head_dim/2 = ", d / 2, " entries, got ",
                      inv_freq.size(0));
    TORCH_CHECK_VALUE(rotary_pairs >= 0 && rotary_pairs <= d / 2, "rotary_pairs must be in [0, head_dim/2 = ", d / 2,
                      "], got ", rotary_pairs);
    TORCH_CHECK_VALUE(std::isfinite(scale), "scale must be finite, got ", scale);
    const int layout_code = parse_layout(std::string_view(layout.data(), layout.size()));

    const at::Tensor inv = inv_freq.contiguous();
    const double* inv_data = inv.data_ptr<double>();
    for (int64_t i = 0; i < rotary_pairs; ++i)
        TORCH_CHECK_VALUE(std::isfinite(inv_data[i]), "inv_freq must be finite, got inv_freq[", i, "] = ", inv_data[i]);

    wavepe_rope_args a{};
    a.batch = B, a.len = L, a.head_dim = d;
    a.inv_freq = inv_data, a.rotary_pairs = rotary_pairs, a.layout = layout_code;
    a.inverse = inverse ? 1 : 0, a.scale = scale, a.offset = offset;
    at::Tensor pos;
    if (positions.has_value()) {
        pos = *positions;
        wavepe::check_cpu(pos, "positions");
        TORCH_CHECK_TYPE(pos.scalar_type() == at::kLong, "positions must be an int64 tensor, got ", pos.scalar_type());
        TORCH_CHECK_VALUE(offset == 0, "offset must be 0 when positions is a tensor, got ", offset);
        const bool ok = (pos.dim() == 1 && pos.size(0) == L) ||
                        (pos.dim() == 2 && pos.size(1) == L && (pos.size(0) == B || pos.size(0) == 1));
        TORCH_CHECK_VALUE(ok, "positions must have shape (", L, ",), (", B, ", ", L, ") or (1, ", L, "), got ",
                          pos.sizes());
        a.positions = pos.data_ptr<int64_t>();
        if (pos.dim() == 1) {
            a.pos_stride_b = 0, a.pos_stride_l = pos.stride(0);
        } else {
            a.pos_stride_b = pos.size(0) == 1 ? 0 : pos.stride(0), a.pos_stride_l = pos.stride(1);
        }
    }

    const at::Tensor q_in = with_unit_last_stride(q);
    at::Tensor q_out = wavepe::empty_output(q.sizes(), q.options());
    fill_tensor_args(a.q, q_in, q_out);
    at::Tensor k_in, k_out;
    if (k.has_value()) {
        k_in = with_unit_last_stride(*k);
        k_out = wavepe::empty_output(k->sizes(), k->options());
        fill_tensor_args(a.k, k_in, k_out);
    } else {
        k_out = at::empty({B, 0, L, d}, q.options());
        a.k.heads = 0;
    }
    wavepe::check_status(wavepe_rope_validate(&a), "rope");

    const wavepe_isa isa = wavepe::active_isa();
    const bool f32 = q.scalar_type() == at::kFloat;
    const int64_t row_elems = WAVEPE_ROPE_POS_BLOCK * (a.q.heads + a.k.heads) * d;
    at::parallel_for(0, wavepe_rope_rows(&a), wavepe::grain_rows(row_elems), [&](int64_t b, int64_t e) {
        if (f32) wavepe_rope_f32(isa, &a, b, e);
        else wavepe_rope_f64(isa, &a, b, e);
    });
    return {q_out, k_out};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def(
        "rope(Tensor q, Tensor? k, Tensor? positions, SymInt offset, Tensor inv_freq, SymInt rotary_pairs, "
        "str layout, float scale, bool inverse) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(wavepe, CPU, m) { m.impl("rope", &rope_cpu); }
