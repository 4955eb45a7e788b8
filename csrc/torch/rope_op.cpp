// rope_op.cpp: torch.ops.wavepe.rope, every device.
//
//   rope(Tensor q, Tensor? k, Tensor? positions, Tensor inv_freq, <settings>) -> (Tensor, Tensor)
// <settings>: WAVEPE_ROPE_SETTINGS (csrc/core/rope.h) -- offset, rotary_pairs, layout, scale,
// inverse -- in the schema, the parameters, the unboxing and the struct fill by op_settings.h;
// the kind LAYOUT (a str in the schema) is converted here.
//
// q (B, Hq, L, d) and k (B, Hk, L, d) are rotated in one pass that computes
// cos/sin once per (position, pair) for all heads (csrc/core/rope.h).  Any
// strides are read in place as long as the d elements of a head vector are
// contiguous (otherwise that input is copied once); the outputs are new,
// contiguous (B, H, L, d) tensors.  Without k the second output is an empty
// (B, 0, L, d) tensor, so the schema needs no optional return.
// positions: None (positions offset .. offset + L - 1), or int64 (L,) or
// (B, L) / (1, L), with offset 0.  inverse = the backward (rotation by -angle).
// inv_freq: float64 (d/2,) on q's device.  q and k: float32, float64, bfloat16 or float16 on every
// device (half types are read and written as they are, computed in float32).  One body for CPU and CUDA; the
// struct (wavepe_rope_args) is filled once and wavepe::launch runs it.
#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "launch.h"
#include "op_settings.h"

// The kind LAYOUT of WAVEPE_ROPE_SETTINGS (csrc/core/rope.h): "half" / "interleaved" in the schema.
namespace wavepe {
using op_setting_LAYOUT = std::string;

inline const char* layout_name(int layout) { return layout == WAVEPE_ROPE_INTERLEAVED ? "interleaved" : "half"; }

inline std::string schema_setting_LAYOUT(const char* name, int def) {
    return std::string(", str ") + name + "=\"" + layout_name(def) + "\"";
}

inline int setting_value_LAYOUT(const std::string& layout) {
    if (layout == "half") return WAVEPE_ROPE_HALF;
    if (layout == "interleaved") return WAVEPE_ROPE_INTERLEAVED;
    fail_value(str("layout must be 'half' or 'interleaved', got '", layout, "'"));
}

// torch's stable unboxing of a str (2.10 to 2.13) copies it into a std::string it never frees, a leak on
// every call: here the handle is read and freed.
inline std::string unbox_setting_LAYOUT(StableIValue v) {
    StringHandle handle = torch::stable::detail::to<StringHandle>(v);
    size_t length = 0;
    const char* data = nullptr;
    const bool ok = torch_string_length(handle, &length) == TORCH_SUCCESS &&
                    torch_string_c_str(handle, &data) == TORCH_SUCCESS;
    std::string layout;
    if (ok) layout.assign(data, length);
    torch_delete_string(handle);
    if (!ok) fail_runtime("rope: cannot read the layout argument");
    return layout;
}
}  // namespace wavepe

namespace {

using wavepe::Tensor;

// inv_freq[:pairs] finite?  The values are data, so the core's rules cannot see them on a device:
// on the CPU a loop, elsewhere one copy to the host (a sync), remembered per (data, pairs) so that a
// model's inv_freq buffer is checked once.  (The stable API has no version counter: an in-place
// change of an already checked CUDA buffer, or a new tensor at its address, is not checked again here;
// wavepe.ops.rope_inv_freq checks device values per tensor and version before the op, in Python.)
void check_finite(const double* v, int64_t pairs) {
    for (int64_t i = 0; i < pairs; ++i)
        WAVEPE_CHECK_VALUE(std::isfinite(v[i]), "inv_freq must be finite, got inv_freq[", i, "] = ", v[i]);
}

void check_inv_freq_finite(const Tensor& inv, int64_t pairs) {
    if (pairs == 0) return;
    if (inv.is_cpu()) return check_finite(static_cast<const double*>(inv.data_ptr()), pairs);
    struct Seen {
        const void* data = nullptr;
        int32_t device = -1;
        int64_t pairs = -1;
    };
    static std::mutex mutex;
    static std::array<Seen, 16> seen;
    static size_t next = 0;
    const Seen key{inv.data_ptr(), inv.get_device_index(), pairs};
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (const Seen& s : seen)
            if (s.data == key.data && s.device == key.device && s.pairs >= pairs) return;
    }
    Tensor head = inv;
    head = torch::stable::narrow(head, 0, 0, pairs);
    const Tensor host = wavepe::contiguous(torch::stable::to(head, torch::stable::Device(torch::headeronly::DeviceType::CPU)));
    check_finite(static_cast<const double*>(host.data_ptr()), pairs);
    std::lock_guard<std::mutex> lock(mutex);
    seen[next] = key;
    next = (next + 1) % seen.size();
}

void fill_tensor(wavepe_rope_tensor& dst, const Tensor& in, const Tensor& out) {
    dst.heads = in.size(1);
    dst.in = in.data_ptr();
    dst.in_stride_b = in.stride(0), dst.in_stride_h = in.stride(1), dst.in_stride_l = in.stride(2);
    dst.out = out.data_ptr();
    dst.out_stride_b = out.stride(0), dst.out_stride_h = out.stride(1), dst.out_stride_l = out.stride(2);
}

std::tuple<Tensor, Tensor> rope(const Tensor& q, const std::optional<Tensor>& k,
                                const std::optional<Tensor>& positions,
                                const Tensor& inv_freq WAVEPE_ROPE_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    wavepe_rope_args a = wavepe_rope_args_defaults();
    WAVEPE_ROPE_SETTINGS(WAVEPE_OP_SETTING_FILL)
    a.dtype = wavepe::dtype_of(q, "q", /*half_on_cpu=*/true);  // bf16 / fp16 read natively everywhere
    wavepe::check_dim(q, 4, "q");
    const int64_t B = q.size(0), L = q.size(2), d = q.size(3);
    if (k.has_value()) {
        wavepe::check_like(*k, "k", q, "q");
        wavepe::check_dim(*k, 4, "k");
        WAVEPE_CHECK_VALUE(k->size(0) == B && k->size(2) == L && k->size(3) == d,
                           "k must be (B, H_k, L, d) with q's B, L and d: q ", wavepe::shape(q), ", k ",
                           wavepe::shape(*k));
    }
    wavepe::check_same_device(inv_freq, "inv_freq", q, "q");
    WAVEPE_CHECK_VALUE(inv_freq.scalar_type() == wavepe::ScalarType::Double,
                       "inv_freq must be float64 (angles are formed in float64), got ",
                       wavepe::dtype_name(inv_freq.scalar_type()));
    wavepe::check_dim(inv_freq, 1, "inv_freq");
    WAVEPE_CHECK_VALUE(inv_freq.size(0) == d / 2, "inv_freq must have head_dim/2 = ", d / 2, " entries, got ",
                       inv_freq.size(0));
    a.batch = B, a.len = L, a.head_dim = d;
    Tensor pos;
    if (positions.has_value()) {
        pos = *positions;
        wavepe::check_same_device(pos, "positions", q, "q");
        WAVEPE_CHECK_VALUE(pos.scalar_type() == wavepe::ScalarType::Long, "positions must be an int64 tensor, got ",
                           wavepe::dtype_name(pos.scalar_type()));
        WAVEPE_CHECK_VALUE(offset == 0, "offset must be 0 when positions is a tensor, got ", offset);
        const bool ok = (pos.dim() == 1 && pos.size(0) == L) ||
                        (pos.dim() == 2 && pos.size(1) == L && (pos.size(0) == B || pos.size(0) == 1));
        WAVEPE_CHECK_VALUE(ok, "positions must have shape (", L, ",), (", B, ", ", L, ") or (1, ", L, "), got ",
                           wavepe::shape(pos));
        a.positions = static_cast<const int64_t*>(pos.data_ptr());
        a.pos_stride_b = (pos.dim() == 1 || pos.size(0) == 1) ? 0 : pos.stride(0);
        a.pos_stride_l = pos.stride(-1);
    }
    wavepe_error err{};
    wavepe::check_sizes(wavepe_rope_validate(&a, &err), err, "rope");  // every rule but the data pointers
    const Tensor inv = wavepe::contiguous(inv_freq);
    check_inv_freq_finite(inv, rotary_pairs);
    a.inv_freq = static_cast<const double*>(inv.data_ptr());

    // Plain torch.empty outputs, not empty_output's MADV_POPULATE_WRITE: measured here (EPYC,
    // AVX2, 2 threads, A/B by process) populating 16-64 MiB outputs was up to 3x slower on
    // freshly mapped memory than the kernel's own first-touch faults (H=8 fp32: 24 vs 8 ms; H=32
    // bf16: 46 vs 38 ms), and within the noise on reused memory, where perf shows ~10% of the
    // call walking pages already present.
    const Tensor q_in = wavepe::last_dim_contiguous(q);
    Tensor q_out = wavepe::empty(q.sizes(), q, "rope", "the rotated q (B, H, L, head_dim)");
    fill_tensor(a.q, q_in, q_out);
    Tensor k_in, k_out;
    if (k.has_value()) {
        k_in = wavepe::last_dim_contiguous(*k);
        k_out = wavepe::empty(k->sizes(), *k, "rope", "the rotated k (B, H_kv, L, head_dim)");
        fill_tensor(a.k, k_in, k_out);
    } else {
        k_out = wavepe::empty({B, 0, L, d}, q, "rope", "the rotated k (B, 0, L, head_dim)");
    }
    wavepe::check_status(wavepe_rope_validate(&a, &err), err, "rope");
    wavepe::launch(a, q, "rope");
    return {q_out, k_out};
}

// The boxed kernel, written out because of its str setting (unbox_setting_LAYOUT above frees it): the
// four tensors, then the settings in the list's order.
void rope_boxed(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    using torch::stable::detail::to;
    constexpr uint64_t n_args = 4 WAVEPE_ROPE_SETTINGS(WAVEPE_OP_SETTING_COUNT);
    WAVEPE_CHECK_VALUE(num_args == n_args && num_outputs == 2, "rope: schema mismatch (", num_args, " args, ",
                       num_outputs, " outputs)");
    uint64_t next = 4;
    WAVEPE_ROPE_SETTINGS(WAVEPE_OP_SETTING_UNBOX)
    auto result = rope(to<Tensor>(stack[0]), to<std::optional<Tensor>>(stack[1]), to<std::optional<Tensor>>(stack[2]),
                       to<Tensor>(stack[3]) WAVEPE_ROPE_SETTINGS(WAVEPE_OP_SETTING_PASS));
    stack[0] = torch::stable::detail::from(std::get<0>(result));
    stack[1] = torch::stable::detail::from(std::get<1>(result));
}

void register_rope(torch::stable::detail::StableLibrary& m) { m.impl("rope", &rope_boxed); }

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def((std::string("rope(Tensor q, Tensor? k, Tensor? positions, Tensor inv_freq")
               WAVEPE_ROPE_SETTINGS(WAVEPE_SCHEMA_SETTING) + ") -> (Tensor, Tensor)").c_str());
}

WAVEPE_REGISTER_ALL_DEVICES(register_rope)
