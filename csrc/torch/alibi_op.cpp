// alibi_op.cpp: torch.ops.wavepe.alibi_bias on the CPU.
#include "torch_common.h"

extern "C" {
#include "../core/alibi.h"
}

namespace {

at::Tensor alibi_bias_cpu(const at::Tensor& slopes, int64_t q_len, int64_t k_len, int64_t q_offset,
                          bool causal) {
    wavepe::check_cpu(slopes, "slopes");
    wavepe::check_float(slopes, "slopes");
    wavepe::check_dim(slopes, 1, "slopes");
    TORCH_CHECK_VALUE(q_len >= 0, "q_len must be >= 0, got ", q_len);
    TORCH_CHECK_VALUE(k_len >= 0, "k_len must be >= 0, got ", k_len);
    const at::Tensor s = slopes.contiguous();
    const int64_t heads = s.size(0);

    wavepe_alibi_args a{};
    a.heads = heads;
    a.m = q_len;
    a.n = k_len;
    a.q_offset = q_offset;
    a.causal = causal ? 1 : 0;
    const int64_t elem = s.element_size();
    const int64_t dims[3] = {heads, q_len, k_len};
    wavepe::check_status(wavepe_checked_numel(3, dims, elem, nullptr), "alibi_bias (heads * q_len * k_len)");

    at::Tensor out = at::empty({heads, q_len, k_len}, s.options());
    a.slopes = s.data_ptr();
    a.out = out.data_ptr();
    a.out_stride_h = q_len * k_len;
    a.out_stride_m = k_len;
    wavepe::check_status(wavepe_alibi_validate(&a), "alibi_bias");

    const wavepe_isa isa = wavepe::active_isa();
    const bool f32 = s.scalar_type() == at::kFloat;
    at::parallel_for(0, heads * q_len, wavepe::grain_rows(k_len), [&](int64_t b, int64_t e) {
        if (f32) wavepe_alibi_f32(isa, &a, b, e);
        else wavepe_alibi_f64(isa, &a, b, e);
    });
    return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(wavepe, m) {
    m.def("alibi_bias(Tensor slopes, SymInt q_len, SymInt k_len, SymInt q_offset, bool causal) -> Tensor");
}

TORCH_LIBRARY_IMPL(wavepe, CPU, m) { m.impl("alibi_bias", &alibi_bias_cpu); }
