// rope_cuda.cpp: torch.ops.wavepe.rope on CUDA (schema in rope_op.cpp; kernel in csrc/cuda/rope.cu).
//
// Same contract as the CPU op: new contiguous (B, H, L, d) outputs (an empty
// (B, 0, L, d) second output without k), any input strides with a contiguous
// last dimension (else one copy), positions None / (L,) / (B, L) / (1, L).
// inv_freq must be a float64 tensor on q's device.  Like the CPU op, a
// non-finite inv_freq[i < rotary_pairs] raises ValueError; the check needs a
// device sync, so the tensors found finite are remembered (by identity and
// version counter: a model's inv_freq buffer is checked once, an in-place
// change is checked again).
#include <ATen/ops/isfinite.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/nonzero.h>

#include <array>
#include <cmath>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>

#include "cuda_common.h"

namespace {

int parse_layout(std::string_view layout) {
    if (layout == "half") return WAVEPE_CUDA_ROPE_HALF;
    if (layout == "interleaved") return WAVEPE_CUDA_ROPE_INTERLEAVED;
    TORCH_CHECK_VALUE(false, "layout must be 'half' or 'interleaved', got '", std::string(layout), "'");
    return -1;
}

// inv_freq[:pairs] finite?  Checked on the device once per (tensor, version, pairs).
void check_inv_freq_finite(const at::Tensor& inv, int64_t pairs) {
    struct Seen {
        const void* impl = nullptr;
        const void* data = nullptr;
        int64_t version = 0;
        int64_t pairs = -1;
    };
    static std::mutex mutex;
    static std::array<Seen, 16> seen;
    static size_t next = 0;
    if (pairs == 0) return;
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

void fill_tensor(wavepe_cuda_rope_tensor& dst, const at::Tensor& in, const at::Tensor& out) {
    dst.heads = in.size(1);
    dst.x = in.data_ptr();
    dst.x_stride_b = in.stride(0), dst.x_stride_h = in.stride(1), dst.x_stride_l = in.stride(2);
    dst.out = out.data_ptr();
    dst.out_stride_b = out.stride(0), dst.out_stride_h = out.stride(1), dst.out_stride_l = out.stride(2);
}

std::tuple<at::Tensor, at::Tensor> rope_cuda(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                             const std::optional<at::Tensor>& positions, int64_t offset,
                                             const at::Tensor& inv_freq, int64_t rotary_pairs,
                                             c10::string_view layout, double scale, bool inverse) {
    wavepe::check_cuda(q, "q", q, "q");
    wavepe::check_dim(q, 4, "q");
    const wavepe_cuda_dtype dtype = wavepe::cuda_dtype(q, "q");
    const int64_t B = q.size(0), L = q.size(2), d = q.size(3);
    TORCH_CHECK_VALUE(d % 2 == 0, "head_dim (q.shape[-1]) must be even for RoPE, got ", d);
    if (k.has_value()) {
        wavepe::check_cuda(*k, "k", q, "q");
        wavepe::check_same_dtype(q, "q", *k, "k");
        wavepe::check_dim(*k, 4, "k");
        TORCH_CHECK_VALUE(k->size(0) == B && k->size(2) == L && k->size(3) == d,
                          "k must be (B, H_k, L, d) with q's B, L and d: q ", q.sizes(), ", k ", k->sizes());
    }
    wavepe::check_cuda(inv_freq, "inv_freq", q, "q");
    TORCH_CHECK_TYPE(inv_freq.scalar_type() == at::kDouble,
                     "inv_freq must be float64 (angles are formed in float64), got ", inv_freq.scalar_type());
    wavepe::check_dim(inv_freq, 1, "inv_freq");
    TORCH_CHECK_VALUE(inv_freq.size(0) == d / 2, "inv_freq must have head_dim/2 = ", d / 2, " entries, got ",
                      inv_freq.size(0));
    TORCH_CHECK_VALUE(rotary_pairs >= 0 && rotary_pairs <= d / 2, "rotary_pairs must be in [0, head_dim/2 = ", d / 2,
                      "], got ", rotary_pairs);
    TORCH_CHECK_VALUE(std::isfinite(scale), "scale must be finite, got ", scale);
    const int layout_code = parse_layout(std::string_view(layout.data(), layout.size()));
    const c10::cuda::CUDAGuard guard(q.device());

    wavepe_cuda_rope_args a{};
    a.dtype = dtype;
    a.batch = B, a.len = L, a.d = d;
    a.rotary_pairs = rotary_pairs;
    a.layout = layout_code;
    a.inverse = inverse ? 1 : 0;
    a.scale = scale;
    a.pos_offset = offset;
    const at::Tensor inv = inv_freq.contiguous();
    check_inv_freq_finite(inv, rotary_pairs);
    a.inv_freq = inv.data_ptr<double>();
    at::Tensor pos;
    if (positions.has_value()) {
        pos = *positions;
        wavepe::check_cuda(pos, "positions", q, "q");
        TORCH_CHECK_TYPE(pos.scalar_type() == at::kLong, "positions must be an int64 tensor, got ", pos.scalar_type());
        TORCH_CHECK_VALUE(offset == 0, "offset must be 0 when positions is a tensor, got ", offset);
        const bool ok = (pos.dim() == 1 && pos.size(0) == L) ||
                        (pos.dim() == 2 && pos.size(1) == L && (pos.size(0) == B || pos.size(0) == 1));
        TORCH_CHECK_VALUE(ok, "positions must have shape (", L, ",), (", B, ", ", L, ") or (1, ", L, "), got ",
                          pos.sizes());
        pos = wavepe::last_dim_contiguous(pos);
        a.positions = pos.data_ptr<int64_t>();
        a.pos_stride_b = (pos.dim() == 1 || pos.size(0) == 1) ? 0 : pos.stride(0);
    }
    const at::Tensor q_in = wavepe::last_dim_contiguous(q);
    at::Tensor q_out = at::empty(q.sizes(), q.options());
    fill_tensor(a.t[0], q_in, q_out);
    a.ntensors = 1;
    at::Tensor k_in, k_out;
    if (k.has_value()) {
        k_in = wavepe::last_dim_contiguous(*k);
        k_out = at::empty(k->sizes(), k->options());
        fill_tensor(a.t[1], k_in, k_out);
        a.ntensors = 2;
    } else {
        k_out = at::empty({B, 0, L, d}, q.options());
    }
    wavepe::check_status(wavepe_cuda_rope_validate(&a), "rope");
    wavepe::check_launch(wavepe_cuda_rope(&a, c10::cuda::getCurrentCUDAStream()), "rope");
    return {q_out, k_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(wavepe, CUDA, m) { m.impl("rope", &rope_cuda); }
