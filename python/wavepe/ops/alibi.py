"""ALiBi bias as a torch custom op: ``torch.ops.wavepe.alibi_bias``.

The wrapper calls the op on every device whose dispatch key has a kernel
(:mod:`wavepe.ops._routing`); a device without one gets the plain-PyTorch
formula :func:`plain_alibi_bias` below, with a warning.
"""

from __future__ import annotations

import torch

from .._validate import check_flag, check_int, resolve_positions
from ..config import alibi_slopes as _alibi_slopes
from . import _routing
from ._checks import check_finite, compute_dtype
from ._extension import float_compute_dtype, named, ops, register_autograd, register_fake, schema_names

_ALIBI = schema_names("alibi_bias")


@register_fake("alibi_bias")
def _alibi_bias_fake(slopes, q_len, k_len, **_):
    return slopes.new_empty((slopes.shape[0], q_len, k_len))


def _alibi_bias_setup(ctx, inputs, output):
    ctx.kw = named(_ALIBI, inputs)
    del ctx.kw["slopes"]  # the rest: plain_alibi_bias's keywords


def _alibi_bias_backward(ctx, grad):
    # d bias / d slope_h = -(pos_q - pos_k) (or -|.|): the bias of slope 1; the bias itself is M x N.
    unit = torch.ones(1, dtype=grad.dtype, device=grad.device)
    return (grad * plain_alibi_bias(unit, **ctx.kw)).sum(dim=(-2, -1)), *(None,) * (len(_ALIBI) - 1)


register_autograd("alibi_bias", _alibi_bias_backward, setup_context=_alibi_bias_setup)


def alibi_bias(
    slopes_or_heads: int | torch.Tensor,
    q_len: int,
    k_len: int | None = None,
    *,
    q_offset: int | None = None,
    causal: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ALiBi bias of shape (H, q_len, k_len); differentiable in the slopes.

    ``bias[h, i, j] = -slope[h] * (pos_q(i) - j)``, ``pos_q(i) = q_offset + i``;
    ``causal=True`` leaves 0 above the diagonal (``j > pos_q(i)``),
    ``causal=False`` uses ``-slope[h] * |pos_q(i) - j|``.

    Args:
        slopes_or_heads: H (standard geometric slopes) or an (H,) tensor of slopes.
        q_len: M queries; k_len: N keys (default M).
        q_offset: position of the first query (default N - M).
        dtype, device: of the slopes built from a head count.
    """
    if isinstance(slopes_or_heads, torch.Tensor):
        slopes = slopes_or_heads
        if slopes.dim() != 1:
            raise ValueError(f"slopes must be one-dimensional (H,), got shape {tuple(slopes.shape)}")
    else:
        heads = check_int("slopes_or_heads", slopes_or_heads, min_value=1)
        slopes = torch.as_tensor(_alibi_slopes(heads), dtype=dtype, device=device)
    float_compute_dtype(slopes, "slopes")  # a floating-point tensor
    check_finite("slopes", slopes)
    causal = check_flag("causal", causal)
    m = check_int("q_len", q_len, min_value=0)
    n, off = resolve_positions("q", m, k_len, q_offset, "alibi_bias: ")
    if _routing.has_kernel("alibi_bias", slopes.device):
        # the CPU and CUDA kernels take every dtype as it is (bf16 / fp16: slopes widened, each entry
        # computed in float32 and rounded once): no upcast copy there
        compute = compute_dtype(slopes, half_on_cpu=True)
        out = ops.alibi_bias(slopes=slopes if compute == slopes.dtype else slopes.to(compute), q_len=m, k_len=n,
                             q_offset=off, causal=causal)
    else:
        _routing.warn_fallback("alibi_bias", slopes.device, "the plain-PyTorch formula")
        out = plain_alibi_bias(slopes.to(compute_dtype(slopes)), q_len=m, k_len=n, q_offset=off, causal=causal)
    return out if out.dtype == slopes.dtype else out.to(slopes.dtype)


# ---- the plain-PyTorch formulation (devices without a kernel; the benchmarks' baseline) -------------


def plain_alibi_bias(slopes: torch.Tensor, *, q_len: int, k_len: int, q_offset: int, causal: bool) -> torch.Tensor:
    """bias[h, i, j] = -slope_h · (pos_q(i) - j) (|·| when not causal; 0 above the diagonal when causal)."""
    pos_q = torch.arange(q_len, device=slopes.device, dtype=slopes.dtype) + q_offset
    pos_k = torch.arange(k_len, device=slopes.device, dtype=slopes.dtype)
    dist = pos_q.unsqueeze(1) - pos_k.unsqueeze(0)
    dist = dist.clamp_min(0) if causal else dist.abs()
    return -slopes.reshape(-1, 1, 1) * dist
