"""Rotary position embedding on q and k in one call (docs/DEVELOPING.md, "RoPE")."""

from __future__ import annotations

import numbers

import torch

from .._validate import check_choice, check_int, check_real
from ..config import ROPE_LAYOUTS, RopeConfig
from . import eager
from ._checks import check_same, check_tensor, compute_dtype


def _check_positions(positions: int | torch.Tensor, batch: int, length: int, device: torch.device) -> torch.Tensor:
    if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
        start = check_int("positions", positions)
        return torch.arange(start, start + length, dtype=torch.int64, device=device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an int offset or an int64 tensor, got {type(positions).__name__}")
    if positions.dtype != torch.int64:
        raise TypeError(f"positions must be an int64 tensor, got {positions.dtype}")
    if positions.device != device:
        raise ValueError(f"positions must be on {device} like q, got {positions.device}")
    if positions.dim() == 1:
        if positions.shape[0] != length:
            raise ValueError(f"positions has shape {tuple(positions.shape)}; expected ({length},) or ({batch}, {length})")
    elif positions.dim() == 2:
        if positions.shape[1] != length or positions.shape[0] not in (1, batch):
            raise ValueError(f"positions has shape {tuple(positions.shape)}; expected ({length},) or ({batch}, {length})")
    else:
        raise ValueError(f"positions must have shape (L,) or (B, L), got {tuple(positions.shape)}")
    return positions


def _check_qk(q: torch.Tensor, k: torch.Tensor | None) -> None:
    check_tensor("q", q, dim=4)
    if k is not None:
        check_tensor("k", k, dim=4)
        check_same("q", q, "k", k)
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] or k.shape[3] != q.shape[3]:
            raise ValueError(f"k must be (B, H_kv, L, d) with q's B, L and d: q {tuple(q.shape)}, k {tuple(k.shape)}")


def rope_inv_freq(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: int | torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    layout: str = "half",
    rotary_pairs: int | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RoPE with an explicit spectrum ``inv_freq`` (d/2,), e.g. a model's own buffer.

    Args:
        q: (B, Hq, L, d); k: (B, Hk, L, d) or None.
        positions: int offset (positions ``offset … offset+L-1``) or int64 (L,) / (B, L).
        inv_freq: (d/2,) angular frequencies, highest first; angles are pos·inv_freq in float64.
        layout: "half" (Hugging Face rotate_half) or "interleaved".
        rotary_pairs: rotate only pairs i < rotary_pairs (default all d/2).
        scale: multiplies the result (YaRN attention factor).

    Returns:
        (q_rot, k_rot) with the input shapes and dtypes (k_rot None when k is None).
    """
    _check_qk(q, k)
    d = q.shape[-1]
    if d % 2:
        raise ValueError(f"head_dim (q.shape[-1]) must be even for RoPE, got {d}")
    check_tensor("inv_freq", inv_freq, dim=1)
    if inv_freq.shape[0] != d // 2:
        raise ValueError(f"inv_freq must have head_dim/2 = {d // 2} entries, got {inv_freq.shape[0]}")
    if not torch.isfinite(inv_freq).all():
        raise ValueError("inv_freq must be finite")
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    pairs = d // 2 if rotary_pairs is None else check_int("rotary_pairs", rotary_pairs, min_value=0)
    if pairs > d // 2:
        raise ValueError(f"rotary_pairs must be <= head_dim/2 = {d // 2}, got {pairs}")
    scale = check_real("scale", scale, positive=True)
    pos = _check_positions(positions, q.shape[0], q.shape[2], q.device)
    cdt = compute_dtype(q)
    inv = inv_freq.to(device=q.device, dtype=torch.float64)
    q_rot = eager.rope(q.to(cdt), pos, inv, layout, pairs, scale).to(q.dtype)
    k_rot = None if k is None else eager.rope(k.to(cdt), pos, inv, layout, pairs, scale).to(k.dtype)
    return q_rot, k_rot


def rope(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: int | torch.Tensor,
    config: RopeConfig,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RoPE on q and k with the spectrum, p-RoPE fraction and layout of ``config``.

    Args:
        q: (B, Hq, L, d); k: (B, Hk, L, d) or None.
        positions: int offset or int64 tensor (L,) / (B, L).
        config: :class:`wavepe.RopeConfig` (θ, rotary_fraction, layout, scaling).

    Returns:
        (q_rot, k_rot), same shapes and dtypes.
    """
    if not isinstance(config, RopeConfig):
        raise TypeError(f"config must be a RopeConfig, got {type(config).__name__}")
    check_tensor("q", q, dim=4)
    d = q.shape[-1]
    inv = torch.from_numpy(config.inv_freq(d)).to(q.device)
    return rope_inv_freq(q, k, positions, inv, layout=config.layout, rotary_pairs=config.rotary_pairs(d),
                         scale=config.attention_factor)
