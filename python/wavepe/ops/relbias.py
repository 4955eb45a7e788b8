"""Relative-table bias: ``wavelet_bias`` and the general ``rel_bias``.

    bias[..., m, n] = Σ_j q[..., m, j] · T[pos_q(m) - n - r_lo, j]

(docs/DEVELOPING.md, "Relative-table bias").
"""

from __future__ import annotations

import torch

from .._validate import check_int, resolve_positions
from ..config import WaveletConfig
from . import eager
from ._checks import check_fits, check_same, check_tensor, compute_dtype


def wavelet_table(config: WaveletConfig, dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, int]:
    """``config.table()`` as a tensor on ``device``, cached on the config per (dtype, device)."""
    device = torch.device(device)
    key = ("torch", str(dtype), str(device))
    with config._lock:
        hit = config._cache.get(key)
    if hit is not None:
        return hit
    np_dtype = "float64" if dtype == torch.float64 else "float32"
    table_np, r_lo = config.table(np_dtype)
    table = torch.from_numpy(table_np.copy()).to(device=device, dtype=dtype)
    with config._lock:
        config._cache[key] = (table, r_lo)
    return table, r_lo


def rel_bias(
    q: torch.Tensor,
    table: torch.Tensor,
    r_lo: int,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
    clamp: bool = False,
) -> torch.Tensor:
    """Bias from any relative table; differentiable in ``q`` and ``table``.

    Args:
        q: (..., M, d) queries.
        table: (R, d) rows for distances ``r_lo … r_lo + R - 1``.
        r_lo: distance of the table's first row.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) entries whose key is after the query.
        clamp: distances outside the table use its edge rows (Shaw et al.)
            instead of zero.

    Returns:
        (..., M, N) bias, dtype of ``q``.
    """
    check_tensor("q", q, min_dim=2)
    check_tensor("table", table, dim=2)
    check_same("q", q, "table", table)
    if table.shape[1] != q.shape[-1]:
        raise ValueError(f"table.shape[1]={table.shape[1]} does not match q.shape[-1]={q.shape[-1]} (head_dim)")
    if clamp and table.shape[0] == 0:
        raise ValueError("table must have at least one row with clamp=True")
    r_lo = check_int("r_lo", r_lo)
    m = q.shape[-2]
    n, off = resolve_positions("q", m, k_len, q_offset)
    check_fits("rel_bias", (*q.shape[:-1], n), q.element_size())
    cdt = compute_dtype(q)
    out = eager.rel_bias(q.to(cdt), table.to(cdt), r_lo, n, off, bool(causal), bool(clamp))
    return out.to(q.dtype)


def wavelet_bias(
    q: torch.Tensor,
    config: WaveletConfig,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """Wavelet position bias ``q_m · p_{m,n}``; differentiable in ``q``.

    Args:
        q: (..., M, d) queries, d = ``config.head_dim``.
        config: the per-dimension wavelets.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) entries whose key is after the query.

    Returns:
        (..., M, N) bias (not yet multiplied by the attention scale).
    """
    if not isinstance(config, WaveletConfig):
        raise TypeError(f"config must be a WaveletConfig, got {type(config).__name__}")
    check_tensor("q", q, min_dim=2)
    if q.shape[-1] != config.head_dim:
        raise ValueError(f"q.shape[-1]={q.shape[-1]} does not match config.head_dim={config.head_dim}")
    table, r_lo = wavelet_table(config, compute_dtype(q), q.device)
    return rel_bias(q, table, r_lo, k_len=k_len, q_offset=q_offset, causal=causal)
