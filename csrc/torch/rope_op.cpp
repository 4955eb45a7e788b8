// rope_op.cpp: torch.ops.wavepe.rope, every device.
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
// inv_freq: float64 (d/2,) on q's device.  One body for CPU and CUDA; the
// struct (wavepe_rope_args) is filled once and wavepe::launch runs it.
#include <ATen/ops/isfinite.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/nonzero.h>

#include <array>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>

#include "launch.h"
#include "torch_common.h"

namespace {

int parse_layout(std::string_view layout) {
    if (layout == "half") return WAVEPE_ROPE_HALF;
    if (layout == "interleaved") return WAVEPE_ROPE_INTERLEAVED;
    TORCH_CHECK_VALUE(false, "layout must be 'half' or 'interleaved', got '", std::string(layout), "'");
    return -1;
}

// inv_freq[:pairs] finite?  The values are data, so the core's rules cannot see them on a device:
// on the CPU a loop, elsewhere one device sync, remembered per (tensor, version counter, pairs) so
// that a model's inv_freq buffer is checked once and an in-place change is checked again.
void check_inv_freq_finite(const at::Tensor& inv, int64_t pairs) {
    if (pairs == 0) return;
    if (inv.device().is_cpu()) {
        const double* v = inv.data_ptr<double>();
        for (int64_t i = 0; i < pairs; ++i)
            TORCH_CHECK_VALUE(std::isfinite(v[i]), "inv_freq must be finite, got inv_freq[", i, "] = ", v[i]);
        return;
    }
    struct Seen {
        const void* impl = nullptr;
        const void* data = nullptr;
        int64_t version = 0;
        int64_t pairs = -1;
    };
    static std::mutex mutex;
    static std::array<Seen, 16> seen;
    static size_t next = 0;
    const Seen key{inv.unsafeGetTensorImpl(), inv.data_ptr(), inv._version(), pairs};
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (const Seen& s : seen)
            if (s.impl == key.impl && s.data == key.data && s.version == key.version && s.pairs >= pairs) return;
    }
    const at::Tensor head = inv.slice(0, 0, pairs);
    const at::Tensor bad = at::logical_not(at::isfinite(head));
    if (bad.any().item<bool>()) {
        const int64_t i = at::nonzero(bad)[0][0].item<int64_t>();
        TORCH_CHECK_VALUE(false, "inv_freq must be finite, got inv_freq[", i, "] = ", head[i].item<double>());
    }
    std::lock_guard<std::mutex> lock(mutex);
    seen[next] = key;
    next = (next + 1) % seen.size();
}

void fill_tensor(wavepe_rope_tensor& dst, const at::Tensor& in, const at::Tensor& out) {
    dst.heads = in.size(1);
    dst.in = in.data_ptr();
    dst.in_stride_b = in.stride(0), dst.in_stride_h = in.stride(1), dst.in_stride_l = in.stride(2);
    dst.out = out.data_ptr();
    dst.out_stride_b = out.stride(0), dst.out_stride_h = out.stride(1), dst.out_stride_l = out.stride(2);
}

std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                        const std::optional<at::Tensor>& positions, int64_t offset,
                                        const at::Tensor& inv_freq, int64_t rotary_pairs, c10::string_view layout,
                                        double scale, bool inverse) {
    wavepe_rope_args a{};
    a.dtype = wavepe::dtype_of(q, "q");
    wavepe::check_dim(q, 4, "q");
    const int64_t B = q.size(0), L = q.size(2), d = q.size(3);
    if (k.has_value()) {
        wavepe::check_like(*k, "k", q, "q");
        wavepe::check_dim(*k, 4, "k");
        TORCH_CHECK_VALUE(k->size(0) == B && k->size(2) == L && k->size(3) == d,
                          "k must be (B, H_k, L, d) with q's B, L and d: q ", q.sizes(), ", k ", k->sizes());
    }
    wavepe::check_same_device(inv_freq, "inv_freq", q, "q");
    TORCH_CHECK_TYPE(inv_freq.scalar_type() == at::kDouble,
                     "inv_freq must be float64 (angles are formed in float64), got ", inv_freq.scalar_type());
    wavepe::check_dim(inv_freq, 1, "inv_freq");
    TORCH_CHECK_VALUE(inv_freq.size(0) == d / 2, "inv_freq must have head_dim/2 = ", d / 2, " entries, got ",
                      inv_freq.size(0));
    a.batch = B, a.len = L, a.head_dim = d;
    a.rotary_pairs = rotary_pairs;
    a.layout = parse_layout(std::string_view(layout.data(), layout.size()));
    a.inverse = inverse ? 1 : 0;
    a.scale = scale;
    a.offset = offset;
    at::Tensor pos;
    if (positions.has_value()) {
        pos = *positions;
        wavepe::check_same_device(pos, "positions", q, "q");
        TORCH_CHECK_TYPE(pos.scalar_type() == at::kLong, "positions must be an int64 tensor, got ", pos.scalar_type());
        TORCH_CHECK_VALUE(offset == 0, "offset must be 0 when positions is a tensor, got ", offset);
        const bool ok = (pos.dim() == 1 && pos.size(0) == L) ||
                        (pos.dim() == 2 && pos.size(1) == L && (pos.size(0) == B || pos.size(0) == 1));
        TORCH_CHECK_VALUE(ok, "positions must have shape (", L, ",), (", B, ", ", L, ") or (1, ", L, "), got ",
                          pos.sizes());
        a.positions = pos.data_ptr<int64_t>();
        a.pos_stride_b = (pos.dim() == 1 || pos.size(0) == 1) ? 0 : pos.stride(0);
        a.pos_stride_l = pos.stride(-1);
    }
    wavepe_error err{};
    wavepe::check_sizes(wavepe_rope_validate(&a, &err), err, "rope");  // every rule but the data pointers
    const at::Tensor inv = inv_freq.contiguous();
    check_inv_freq_finite(inv, rotary_pairs);
    a.inv_freq = inv.data_ptr<double>();

    const at::Tensor q_in = wavepe::last_dim_contiguous(q);
    at::Tensor q_out = wavepe::empty_output(q.sizes(), q.options());
    fill_tensor(a.q, q_in, q_out);
    at::Tensor k_in, k_out;
    if (k.has_value()) {
        k_in = wavepe::last_dim_contiguous(*k);
        k_out = wavepe::empty_output(k->sizes(), k->options());
        fill_tensor(a.k, k_in, k_out);
    } else {
        k_out = at::empty({B, 0, L, d}, q.options());
    }
    wavepe::check_status(wavepe_rope_validate(&a, &err), err, "rope");
    wavepe::launch(a, q.device(), "rope");
    return {q_out, k_out};
}

void register_rope(torch::Library& m) { m.impl("rope", &rope); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def(
        "rope(Tensor q, Tensor? k, Tensor? positions, SymInt offset, Tensor inv_freq, SymInt rotary_pairs, "
        "str layout, float scale, bool inverse) -> (Tensor, Tensor)");
}

WAVEPE_REGISTER_ALL_DEVICES(register_rope)
