// alibi_op.cpp: torch.ops.wavepe.alibi_bias, every device.
//
//   alibi_bias(slopes (H,), q_len, k_len, <settings>) -> (H, q_len, k_len), slopes' dtype
// <settings>: WAVEPE_ALIBI_SETTINGS (csrc/core/alibi.h) -- q_offset, causal -- by op_settings.h.
//
// One body for CPU and CUDA: it fills wavepe_alibi_args (csrc/core/alibi.h)
// once, validates it, and wavepe::launch runs it on the slopes' device.
#include "launch.h"
#include "op_settings.h"

namespace {

using wavepe::Tensor;

Tensor alibi_bias(const Tensor& slopes_in, int64_t q_len, int64_t k_len WAVEPE_ALIBI_SETTINGS(WAVEPE_OP_SETTING_PARAM)) {
    wavepe_alibi_args a = wavepe_alibi_args_defaults();
    WAVEPE_ALIBI_SETTINGS(WAVEPE_OP_SETTING_FILL)
    a.dtype = wavepe::dtype_of(slopes_in, "slopes", /*half_on_cpu=*/true);  // bf16 / fp16 natively everywhere
    wavepe::check_dim(slopes_in, 1, "slopes");
    const Tensor slopes = wavepe::contiguous(slopes_in);
    a.heads = slopes.size(0);
    a.m = q_len;
    a.n = k_len;
    a.out_stride_h = q_len * k_len;  // dense; checked by the validator before any use
    a.out_stride_m = k_len;
    wavepe_error err{};
    wavepe::check_sizes(wavepe_alibi_validate(&a, &err), err, "alibi_bias");
    Tensor out = wavepe::empty({a.heads, q_len, k_len}, slopes, "alibi_bias", "the bias (heads, q_len, k_len)");
    a.slopes = slopes.data_ptr();
    a.out = out.data_ptr();
    wavepe::check_status(wavepe_alibi_validate(&a, &err), err, "alibi_bias");
    wavepe::launch(a, slopes, "alibi_bias");
    return out;
}

void register_alibi(torch::stable::detail::StableLibrary& m) { m.impl("alibi_bias", TORCH_BOX(&alibi_bias)); }

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def((std::string("alibi_bias(Tensor slopes, SymInt q_len, SymInt k_len") WAVEPE_ALIBI_SETTINGS(WAVEPE_SCHEMA_SETTING) +
           ") -> Tensor").c_str());
}

WAVEPE_REGISTER_ALL_DEVICES(register_alibi)
