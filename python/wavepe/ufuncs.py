"""NumPy API of wavepe.

The wavelet families are real :class:`numpy.ufunc` objects (float32 and
float64 loops, broadcasting, ``out=``, ``dtype=``, GIL released)::

    >>> import numpy as np, wavepe.ufuncs as wu
    >>> wu.ricker(np.array([0.0, 1.0]))
    array([1., 0.])

The functions below take configs (:class:`wavepe.WaveletConfig`, ...) and
call the C core through gufuncs or plain C functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _ufuncs
from ._validate import check_int, check_product_fits, check_real, resolve_positions
from .config import WaveletConfig
from .config import alibi_slopes as _alibi_slopes

ricker: np.ufunc = _ufuncs.ricker
gaussian: np.ufunc = _ufuncs.gaussian
morlet: np.ufunc = _ufuncs.morlet
haar: np.ufunc = _ufuncs.haar

__all__ = ["ricker", "gaussian", "morlet", "haar", "alibi_bias", "sinusoidal_table", "rel_bias", "wavelet_bias"]

#: The relative-table bias gufunc ``(m,d),(r,d),(),(),(),()->(m,n)``; ``out=`` is
#: required (it carries n).  :func:`rel_bias` is the friendly front end.
rel_bias_gufunc: np.ufunc = _ufuncs.rel_bias


def _float_dtype(name: str, arr: np.ndarray) -> np.dtype:
    if arr.dtype in (np.float32, np.float64):
        return arr.dtype
    if arr.dtype == np.float16:
        return np.dtype(np.float32)
    raise TypeError(f"{name} must be a float32 or float64 array, got dtype {arr.dtype}")


def alibi_bias(
    slopes_or_heads: int | Any,
    q_len: int,
    k_len: int | None = None,
    *,
    q_offset: int | None = None,
    causal: bool = True,
    dtype: Any = np.float32,
) -> np.ndarray:
    """ALiBi bias of shape (H, q_len, k_len).

    ``bias[h, i, j] = -slope[h] * (pos_q(i) - j)`` with ``pos_q(i) = q_offset + i``;
    ``causal=True`` leaves 0 where ``j > pos_q(i)``, ``causal=False`` uses
    ``-slope[h] * |pos_q(i) - j|``.

    Args:
        slopes_or_heads: number of heads H (standard slopes) or an (H,) array of slopes.
        q_len: M, number of queries.
        k_len: N, number of keys (default M).
        q_offset: position of the first query (default N - M, the last M positions).
        dtype: float32 or float64 when slopes are given as a head count.
    """
    if isinstance(slopes_or_heads, (int, np.integer)) and not isinstance(slopes_or_heads, bool):
        slopes = _alibi_slopes(int(slopes_or_heads)).astype(dtype)
    else:
        slopes = np.asarray(slopes_or_heads)
        if slopes.ndim != 1:
            raise ValueError(f"slopes must be one-dimensional (H,), got shape {slopes.shape}")
        slopes = slopes.astype(_float_dtype("slopes", slopes), copy=False)
        if not np.all(np.isfinite(slopes)):
            raise ValueError("slopes must be finite")
    m = check_int("q_len", q_len, min_value=0)
    n, off = resolve_positions("q", m, k_len, q_offset)
    return _ufuncs.alibi_bias(np.ascontiguousarray(slopes), m, n, off, bool(causal))


def sinusoidal_table(length: int, dim: int, *, offset: int = 0, base: float = 10000.0,
                     dtype: Any = np.float32) -> np.ndarray:
    """Sinusoidal absolute position table (length, dim) of Vaswani et al.

    ``pe[p, 2i] = sin(pos / base^(2i/dim))``, ``pe[p, 2i+1] = cos(...)`` for
    ``pos = offset + p``; computed in float64 and rounded once.
    """
    length = check_int("length", length, min_value=0)
    dim = check_int("dim", dim, min_value=1)
    offset = check_int("offset", offset)
    base = check_real("base", base, positive=True)
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return _ufuncs.sinusoidal_table(length, dim, offset, base, dt == np.float64)


_POS_LIMIT = 2**61


def rel_bias(
    q: Any,
    table: Any,
    r_lo: int,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
    clamp: bool = False,
) -> np.ndarray:
    """Bias from a relative table, (..., M, d) queries -> (..., M, N).

    ``bias[..., m, n] = q[..., m, :] · table[q_offset + m - n - r_lo]``: keys sit
    at 0 … N-1, queries at ``q_offset`` … ``q_offset + M - 1``.  Distances
    outside the table contribute 0 (``clamp=False``) or use its edge rows
    (``clamp=True``, Shaw et al.); ``causal=True`` zeroes keys after the query.

    Args:
        q: (..., M, d) float32 / float64 (float16 is computed in float32).
        table: (R, d) rows for distances ``r_lo … r_lo + R - 1``, q's dtype.
        r_lo: distance of the table's first row.
        k_len: N keys (default M); q_offset: first query's position (default N - M).

    Returns:
        (..., M, N) array of q's dtype.  Runs the C core (AVX2 where available)
        through the gufunc :data:`rel_bias_gufunc`, with the GIL released.
    """
    q = np.asarray(q)
    table = np.asarray(table)
    if q.ndim < 2:
        raise ValueError(f"q must be (..., M, d) with at least 2 dimensions, got shape {q.shape}")
    if table.ndim != 2:
        raise ValueError(f"table must be (R, d), got shape {table.shape}")
    cdt = _float_dtype("q", q)
    _float_dtype("table", table)
    if table.dtype != q.dtype:
        raise TypeError(f"q and table must have the same dtype, got {q.dtype} and {table.dtype}")
    if table.shape[1] != q.shape[-1]:
        raise ValueError(f"table.shape[1]={table.shape[1]} does not match q.shape[-1]={q.shape[-1]} (head_dim)")
    if clamp and table.shape[0] == 0:
        raise ValueError("table must have at least one row with clamp=True")
    return _rel_bias(q, table.astype(cdt, copy=False), check_int("r_lo", r_lo), k_len, q_offset, causal, clamp)


def _rel_bias(q: np.ndarray, table: np.ndarray, r_lo: int, k_len: int | None, q_offset: int | None,
              causal: bool, clamp: bool) -> np.ndarray:
    """rel_bias after the array checks; ``table`` is already in the compute dtype."""
    m = q.shape[-2]
    n, off = resolve_positions("q", m, k_len, q_offset)
    check_product_fits("rel_bias", (*q.shape[:-1], n), q.dtype.itemsize)
    for name, v in (("q_offset", off), ("r_lo", r_lo), ("k_len", n), ("q_len", m), ("table rows", table.shape[0])):
        if abs(v) > _POS_LIMIT:
            raise OverflowError(f"rel_bias: {name}={v} is beyond the supported range of positions (±2**61)")
    cdt = table.dtype
    out = np.empty((*q.shape[:-1], n), dtype=cdt)
    _ufuncs.rel_bias(q.astype(cdt, copy=False), table, r_lo, off, bool(causal), bool(clamp), out=out)
    return out if q.dtype == cdt else out.astype(q.dtype)


def wavelet_bias(
    q: Any,
    config: WaveletConfig,
    *,
    k_len: int | None = None,
    q_offset: int | None = None,
    causal: bool = True,
) -> np.ndarray:
    """Wavelet position bias ``q_m · p_{m,n}``, (..., M, d) -> (..., M, N).

    ``p_{m,n}[j] = psi((r - shifts[j]) / scales[j])`` at ``r = pos_q(m) - n``, from
    ``config.table()`` (trimmed to the wavelets' support, so distances outside
    it cost nothing).  Not yet multiplied by the attention scale.

    Args:
        q: (..., M, d) float32 / float64 (float16 computed in float32), d = ``config.head_dim``.
        config: the per-dimension wavelets.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) keys after the query.
    """
    if not isinstance(config, WaveletConfig):
        raise TypeError(f"config must be a WaveletConfig, got {type(config).__name__}")
    q = np.asarray(q)
    if q.ndim < 2:
        raise ValueError(f"q must be (..., M, d) with at least 2 dimensions, got shape {q.shape}")
    cdt = _float_dtype("q", q)
    if q.shape[-1] != config.head_dim:
        raise ValueError(f"q.shape[-1]={q.shape[-1]} does not match config.head_dim={config.head_dim}")
    table, r_lo = config.table(cdt)
    return _rel_bias(q, table, r_lo, k_len, q_offset, causal, False)
