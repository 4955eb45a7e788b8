"""The numbers of a wavelet table, computed by the compiled extension ``wavepe._ufuncs``.

:class:`wavepe.WaveletConfig` (config.py) validates its fields and caches windows of its table;
the values come from here.  This module imports nothing of wavepe but the extension, so the data
layer (config.py) never imports the NumPy API (ufuncs.py), which takes configs and so sits above it.
"""

from __future__ import annotations

import numpy as np

from . import _ufuncs

#: The mother wavelets, in the order of the C core's family index.
WAVELET_FAMILIES: tuple[str, ...] = ("ricker", "gaussian", "morlet", "haar")

#: Rows tabulated at a time (bounds the float64 temporaries of a large window).
_CHUNK_ROWS = 8192


def support_t(family: str, dtype: np.dtype, support_tol: float) -> tuple[float, float]:
    """[t_lo, t_hi] of ``family`` in ``dtype``: outside it |psi| is below half the smallest normal
    (or below ``support_tol * max|psi|``)."""
    return _ufuncs.wavelet_support_t(WAVELET_FAMILIES.index(family), np.dtype(dtype) == np.float64, support_tol)


def wavelet_rows(family: str, scales: np.ndarray, shifts: np.ndarray, normalize: bool, support_tol: float,
                 dtype: np.dtype, lo: int, hi: int) -> np.ndarray:
    """(hi - lo + 1, d) rows ``psi((r - shifts[j]) / scales[j])`` for r = lo .. hi, in ``dtype``.

    Zero beyond the support bound (whatever the tolerance) and wherever |value| is below the
    smallest normal of ``dtype``: no table holds a subnormal (they cost a microcode assist per FMA
    on Intel cores, and the kernels flush them anyway).  Not trimmed.
    """
    dt = np.dtype(dtype)
    t_lo, t_hi = support_t(family, dt, support_tol)
    psi = getattr(_ufuncs, family)
    norm = (1.0 / np.sqrt(scales)).astype(dt) if normalize else None
    table = np.empty((hi - lo + 1, scales.size), dt)
    for start in range(0, hi - lo + 1, _CHUNK_ROWS):
        r = np.arange(lo + start, min(lo + start + _CHUNK_ROWS, hi + 1), dtype=np.float64)
        t = (r[:, None] - shifts[None, :]) / scales[None, :]
        rows = psi(t.astype(dt))
        rows[(t < t_lo) | (t > t_hi)] = 0
        if norm is not None:
            rows *= norm[None, :]
        rows[np.abs(rows) < np.finfo(dt).tiny] = 0
        table[start: start + rows.shape[0]] = rows
    return table


def float16_ready(values: np.ndarray) -> np.ndarray:
    """``values`` (a float32 table) with every entry below float16's smallest normal set to 0, in
    place: rounded to float16 they would be subnormals, which no table holds (the CUDA fp16
    kernels read the table natively; bfloat16 shares float32's range and needs nothing)."""
    values[np.abs(values) < np.finfo(np.float16).tiny] = 0
    return values
