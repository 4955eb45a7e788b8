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
from ._validate import check_int, check_real, resolve_positions
from .config import alibi_slopes as _alibi_slopes

ricker: np.ufunc = _ufuncs.ricker
gaussian: np.ufunc = _ufuncs.gaussian
morlet: np.ufunc = _ufuncs.morlet
haar: np.ufunc = _ufuncs.haar

__all__ = ["ricker", "gaussian", "morlet", "haar", "alibi_bias", "sinusoidal_table"]


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
