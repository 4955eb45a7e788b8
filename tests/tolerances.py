"""Tolerances that depend on which kernels ran, said once for the tests that compare half-precision attention.

avx512bf16's bf16 forward (CPUs with AVX512_BF16) rounds each softmax weight p in [0, 1] to bf16 (relative
error <= 2^-8) before P V, as GPU kernels do: out = sum_j p_j v_j / l moves by at most
2^-8 sum_j p_j |v_j| / l <= 2^-8 max|v| from the float32 computation (csrc/core/attention_engine_pairs.h).  The amx
ISA's tile forward does the same in bf16, and in fp16 (relative error <= 2^-11, P scaled so that no weight
above 2^-28 is flushed).  Every other kernel computes P V in float32.

The amx ISA's bf16 backward also rounds P and dS to bf16 for its accumulating products (dV = P^T dO,
dK = dS^T Q, dQ = dS K and a table's dQ and dT on tiles): each term is off by at most 2^-8 of itself, a
gradient by at most 2^-8 of the sum of its terms' magnitudes, which on these tests' random inputs stays
within 2^-7 of the gradient's largest element (grad_atol).
"""

from __future__ import annotations

import wavepe

def pv_rounding(dtype) -> float:
    """P's relative rounding error where it is rounded: 2^-8 (bf16), 2^-11 (float16)."""
    import torch

    return 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11


def rounds_p(dtype) -> bool:
    """Whether attention on ``dtype`` tensors rounds P to it with the kernels active now (``WAVEPE_ISA``)."""
    import torch

    isa = wavepe.active_isa()
    return (dtype == torch.bfloat16 and isa in ("avx512bf16", "amx")) or (dtype == torch.float16 and isa == "amx")


def pv_atol(dtype, v) -> float:
    """The absolute error P's rounding may add to an attention output made from the values ``v``: 0 unless
    :func:`rounds_p`."""
    return pv_rounding(dtype) * float(v.detach().float().abs().max()) if rounds_p(dtype) else 0.0


def rounds_ds(dtype) -> bool:
    """Whether the backward on ``dtype`` tensors rounds P and dS to it with the kernels active now."""
    import torch

    return dtype == torch.bfloat16 and wavepe.active_isa() == "amx"


def grad_atol(dtype, scale: float) -> float:
    """The absolute error P's and dS's rounding may add to a gradient whose largest element is ``scale``: 0
    unless :func:`rounds_ds`."""
    return 2.0**-7 * scale if rounds_ds(dtype) else 0.0
