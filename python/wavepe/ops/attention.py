"""Attention with a position bias: ``wavelet_attention`` (docs/DEVELOPING.md, "Fused attention")."""

from __future__ import annotations

import math

import torch

from .._validate import check_choice, check_int, check_real
from ..config import WaveletConfig
from . import eager
from ._checks import check_same, check_tensor, compute_dtype
from .alibi import alibi_bias
from .relbias import rel_bias, wavelet_table

POS_ENCS = ("wavelet", "relative", "alibi", "none")
_default_configs: dict[int, WaveletConfig] = {}


def default_wavelet_config(head_dim: int) -> WaveletConfig:
    """The paper's grid for ``head_dim`` (8 scales), shared per head_dim."""
    cfg = _default_configs.get(head_dim)
    if cfg is None:
        cfg = _default_configs.setdefault(head_dim, WaveletConfig.grid(head_dim))
    return cfg


def wavelet_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: WaveletConfig | None = None,
    *,
    pos_enc: str = "wavelet",
    causal: bool = True,
    scale: float | None = None,
    q_offset: int | None = None,
    alibi_slopes: torch.Tensor | None = None,
    rel_table: tuple[torch.Tensor, int] | None = None,
    clamp: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention with a position encoding in the scores.

    Args:
        q: (B, H, M, d); k, v: (B, H_kv, N, d), H a multiple of H_kv (GQA).
        config: wavelets for ``pos_enc="wavelet"`` (default: the paper's grid for d).
        pos_enc: "wavelet", "relative" (``rel_table=(T, r_lo)``, T learnable),
            "alibi" (``alibi_slopes`` (H,), default standard slopes) or "none"
            (RoPE'd q/k, NoPE).
        causal: mask keys after the query.  scale: default 1/sqrt(d).
        q_offset: first query's position (default N - M).
        key_padding_mask: (B, N) bool, True = ignore that key.

    Returns:
        (B, H, M, d), dtype of q.
    """
    check_tensor("q", q, dim=4)
    check_tensor("k", k, dim=4)
    check_tensor("v", v, dim=4)
    check_same("q", q, "k", k)
    check_same("q", q, "v", v)
    b, h, m, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k must be (B, H_kv, N, d) with q's B={b} and d={d}, got {tuple(k.shape)}")
    h_kv = k.shape[1]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"q's heads H={h} must be a multiple of k's heads H_kv={h_kv}")
    n = k.shape[2]
    pos_enc = check_choice("pos_enc", pos_enc, POS_ENCS)
    scale = 1.0 / math.sqrt(d) if scale is None else check_real("scale", scale, positive=True)
    off = n - m if q_offset is None else check_int("q_offset", q_offset)
    if key_padding_mask is not None:
        check_tensor("key_padding_mask", key_padding_mask, dim=2, floating=False)
        if key_padding_mask.dtype != torch.bool:
            raise TypeError(f"key_padding_mask must be a bool tensor, got {key_padding_mask.dtype}")
        if tuple(key_padding_mask.shape) != (b, n):
            raise ValueError(f"key_padding_mask must be (B, N) = ({b}, {n}), got {tuple(key_padding_mask.shape)}")
        check_same("q", q, "key_padding_mask", key_padding_mask, dtype=False)
    cdt = compute_dtype(q)
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    bias = None
    bias_scaled = False
    if pos_enc == "wavelet":
        cfg = default_wavelet_config(d) if config is None else config
        if not isinstance(cfg, WaveletConfig):
            raise TypeError(f"config must be a WaveletConfig or None, got {type(cfg).__name__}")
        if cfg.head_dim != d:
            raise ValueError(f"config.head_dim={cfg.head_dim} does not match q.shape[-1]={d}")
        table, r_lo = wavelet_table(cfg, cdt, q.device)
        bias = rel_bias(qc, table, r_lo, k_len=n, q_offset=off, causal=causal)
    elif pos_enc == "relative":
        if rel_table is None or not isinstance(rel_table, tuple) or len(rel_table) != 2:
            raise ValueError("pos_enc='relative' needs rel_table=(table, r_lo)")
        table, r_lo = rel_table
        bias = rel_bias(qc, table.to(cdt), r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
    elif pos_enc == "alibi":
        if alibi_slopes is None:
            slopes = h
        else:
            check_tensor("alibi_slopes", alibi_slopes, dim=1)
            if alibi_slopes.shape[0] != h:
                raise ValueError(f"alibi_slopes must have one slope per head ({h}), got {alibi_slopes.shape[0]}")
            slopes = alibi_slopes.to(device=q.device, dtype=cdt)
        bias = alibi_bias(slopes, m, n, q_offset=off, causal=causal, dtype=cdt, device=q.device)
        bias_scaled = True
    out = eager.attention(qc, kc, vc, bias, causal=causal, scale=scale, q_offset=off, bias_scaled=bias_scaled,
                          key_padding_mask=key_padding_mask)
    return out.to(q.dtype)
