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
from ._wavelet_rows import float16_ready
from ._validate import (check_choice, check_flag, check_int, check_position, check_product_fits, check_real,
                        resolve_positions)
from .config import ROPE_LAYOUTS, RopeConfig, WaveletConfig
from .config import alibi_slopes as _alibi_slopes

ricker: np.ufunc = _ufuncs.ricker
gaussian: np.ufunc = _ufuncs.gaussian
morlet: np.ufunc = _ufuncs.morlet
haar: np.ufunc = _ufuncs.haar

__all__ = ["ricker", "gaussian", "morlet", "haar", "alibi_bias", "sinusoidal_table", "rel_bias", "wavelet_bias",
           "rope", "rope_inv_freq", "rope_gufunc"]

#: The relative-table bias gufunc ``(m,d),(r,d),(),(),(),()->(m,n)``; ``out=`` is
#: required (it carries n).  Values the kernel cannot take (``clamp=True`` with an empty
#: table, positions beyond +-2^60) raise ValueError.  :func:`rel_bias` is the friendly front end.
rel_bias_gufunc: np.ufunc = _ufuncs.rel_bias

#: The RoPE gufunc ``(l,d),(l),(p),(),()->(l,d)``: x, int64 positions, float64
#: inv_freq of the p = rotary_pairs pairs that rotate, scale, mode (bit 0
#: interleaved, bit 1 inverse).  A mode outside 0..3, a non-finite scale or inv_freq raise
#: ValueError; :func:`rope` / :func:`rope_inv_freq` are the front ends that check everything.
rope_gufunc: np.ufunc = _ufuncs.rope


def _float_dtype(name: str, arr: np.ndarray, *, native_half: bool = False) -> np.dtype:
    """The dtype a gufunc runs ``arr`` in: float32 / float64 as they are; float16 as it is where the
    gufunc has a float16 loop (``native_half``), else computed in float32."""
    if arr.dtype in (np.float32, np.float64):
        return arr.dtype
    if arr.dtype == np.float16:
        return arr.dtype if native_half else np.dtype(np.float32)
    kinds = "float16, float32 or float64" if native_half else "float32 or float64"
    raise TypeError(f"{name} must be a {kinds} array, got dtype {arr.dtype}")


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
    n, off = resolve_positions("q", m, k_len, q_offset, "alibi_bias: ")
    return _ufuncs.alibi_bias(np.ascontiguousarray(slopes), m, n, off, check_flag("causal", causal))


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
        q: (..., M, d) float16 / float32 / float64 (float16 read and written as it
            is, each bias summed in float32 and rounded once).
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
    cdt = _float_dtype("q", q, native_half=True)
    _float_dtype("table", table, native_half=True)
    if table.dtype != q.dtype:
        raise TypeError(f"q and table must have the same dtype, got {q.dtype} and {table.dtype}")
    if table.shape[1] != q.shape[-1]:
        raise ValueError(f"table.shape[1]={table.shape[1]} does not match q.shape[-1]={q.shape[-1]} (head_dim)")
    if clamp and table.shape[0] == 0:
        raise ValueError("table must have at least one row with clamp=True")
    return _rel_bias(q, table.astype(cdt, copy=False), check_int("r_lo", r_lo), k_len, q_offset,
                     check_flag("causal", causal), check_flag("clamp", clamp))


def _rel_bias(q: np.ndarray, table: np.ndarray, r_lo: int, k_len: int | None, q_offset: int | None,
              causal: bool, clamp: bool) -> np.ndarray:
    """rel_bias after the array checks; ``table`` is already in the compute dtype."""
    m = q.shape[-2]
    n, off = resolve_positions("q", m, k_len, q_offset, "rel_bias: ")
    check_position("r_lo", r_lo, "rel_bias: ")
    check_product_fits("rel_bias", (*q.shape[:-1], n), q.dtype.itemsize)
    cdt = table.dtype
    out = np.empty((*q.shape[:-1], n), dtype=cdt)
    _ufuncs.active_isa()  # a WAVEPE_ISA this CPU cannot run is a ValueError, not a silent fallback
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
    ``config.table()`` over the distances the call forms, trimmed to the
    wavelets' support (distances outside it cost nothing; any grid, however
    large its scales, in memory proportional to the lengths).  Not yet
    multiplied by the attention scale.

    Args:
        q: (..., M, d) float16 / float32 / float64 (float16 read and written as it is, the
            float32 table rounded to float16, each bias summed in float32 and rounded once: the
            bits of :func:`wavepe.ops.wavelet_bias`), d = ``config.head_dim``.
        config: the per-dimension wavelets.
        k_len: N keys (default M); q_offset: first query's position (default N - M).
        causal: zero (and skip) keys after the query.
    """
    if not isinstance(config, WaveletConfig):
        raise TypeError(f"config must be a WaveletConfig, got {type(config).__name__}")
    q = np.asarray(q)
    if q.ndim < 2:
        raise ValueError(f"q must be (..., M, d) with at least 2 dimensions, got shape {q.shape}")
    cdt = _float_dtype("q", q, native_half=True)
    if q.shape[-1] != config.head_dim:
        raise ValueError(f"q.shape[-1]={q.shape[-1]} does not match config.head_dim={config.head_dim}")
    causal = check_flag("causal", causal)
    m = q.shape[-2]
    n, off = resolve_positions("q", m, k_len, q_offset, "wavelet_bias: ")
    # the rows of the distances this call forms (bounded by its lengths, not by the support)
    lo, hi = (max(off - (n - 1), 0) if causal else off - (n - 1)), off + m - 1
    if m == 0 or n == 0 or lo > hi:
        table, r_lo = np.zeros((0, config.head_dim), cdt), 0
    else:
        table, r_lo = config.table(np.float64 if cdt == np.float64 else np.float32, lo, hi)
        if cdt == np.float16:  # as wavepe.ops takes it: the float32 table rounded, no float16 subnormal
            table = float16_ready(table.copy()).astype(np.float16)
    return _rel_bias(q, table, r_lo, k_len, q_offset, causal, False)


def _rope_positions(positions: Any, loop_shape: tuple[int, ...], length: int) -> np.ndarray:
    """positions as an int64 array broadcastable to ``loop_shape + (length,)``."""
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, (bool, np.bool_)):
        start = check_int("positions", int(positions))
        if start + length - 1 > 2**63 - 1:
            raise OverflowError(f"positions: offset {start} + length {length} overflows int64")
        return np.arange(start, start + length, dtype=np.int64)
    pos = np.asarray(positions)
    if pos.dtype == np.bool_ or not np.issubdtype(pos.dtype, np.integer):
        raise TypeError(f"positions must be an int offset or an integer array, got dtype {pos.dtype}")
    if pos.dtype == np.uint64 and pos.size and int(pos.max()) > 2**63 - 1:
        raise OverflowError("positions: a value does not fit in int64")
    want = (*loop_shape, length)
    try:
        ok = pos.ndim >= 1 and np.broadcast_shapes(pos.shape, want) == want
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"positions must be broadcastable to x.shape[:-1] = {want} (length {length} last), "
                         f"got shape {pos.shape}")
    return pos.astype(np.int64, copy=False)


def rope_inv_freq(
    x: Any,
    positions: Any,
    inv_freq: Any,
    *,
    layout: str = "half",
    rotary_pairs: int | None = None,
    scale: float = 1.0,
    inverse: bool = False,
) -> np.ndarray:
    """Rotary position embedding of ``x`` (..., L, d) with an explicit spectrum.

    Pair i is ``(x[i], x[i + d/2])`` (layout "half", Hugging Face ``rotate_half``)
    or ``(x[2i], x[2i+1])`` ("interleaved"); it becomes
    ``(a cos - b sin, b cos + a sin) * scale`` with angle ``pos * inv_freq[i]``
    formed in float64.  Pairs ``i >= rotary_pairs`` pass through (times scale).
    ``inverse=True`` rotates by -angle (the adjoint: the inverse when scale = 1).

    Args:
        x: (..., L, d) float32, float64 or float16 (float16 read and written as it
            is, computed in float32 and rounded once), d even.
        positions: int offset (positions ``offset … offset+L-1``) or an integer
            array broadcastable to ``x.shape[:-1]``, e.g. (L,) or (B, 1, L) for x (B, H, L, d).
        inv_freq: (d/2,) angular frequencies, highest first.
        layout: "half" or "interleaved".  rotary_pairs: default d/2.
        scale: multiplies the result (YaRN attention factor).

    Returns:
        (..., L, d) array of x's dtype.  A real gufunc (:data:`rope_gufunc`) does
        the work with the GIL released; cos/sin are computed once per position
        for all the heads that share it.
    """
    arr = np.asarray(x)
    if arr.ndim < 2:
        raise ValueError(f"x must have shape (..., L, d), got shape {arr.shape}")
    dt = arr.dtype if arr.dtype == np.float16 else _float_dtype("x", arr)  # the gufunc reads float16 natively
    length, d = arr.shape[-2], arr.shape[-1]
    if d % 2 or d == 0:
        raise ValueError(f"head_dim (x.shape[-1]) must be even and >= 2 for RoPE, got {d}")
    inv = np.asarray(inv_freq)
    if inv.ndim != 1 or inv.shape[0] != d // 2:
        raise ValueError(f"inv_freq must have shape (head_dim/2,) = ({d // 2},), got {inv.shape}")
    if not np.issubdtype(inv.dtype, np.floating) and not np.issubdtype(inv.dtype, np.integer):
        raise TypeError(f"inv_freq must be a real array, got dtype {inv.dtype}")
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    pairs = d // 2 if rotary_pairs is None else check_int("rotary_pairs", rotary_pairs, min_value=0)
    if pairs > d // 2:
        raise ValueError(f"rotary_pairs must be <= head_dim/2 = {d // 2}, got {pairs}")
    inv = np.ascontiguousarray(inv[:pairs], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(inv))
    if bad.size:
        raise ValueError(f"inv_freq must be finite, got inv_freq[{int(bad[0])}] = {float(inv[bad[0]])!r}")
    scale = check_real("scale", scale, positive=True)
    inverse = check_flag("inverse", inverse)
    pos = _rope_positions(positions, arr.shape[:-2], length)
    mode = (1 if layout == "interleaved" else 0) | (2 if inverse else 0)
    work = arr.astype(dt, copy=False)
    if work.strides[-1] != work.itemsize:  # the kernels read head vectors contiguously
        work = np.ascontiguousarray(work)
    _ufuncs.active_isa()  # a WAVEPE_ISA this CPU cannot run is a ValueError, not a silent fallback
    out = rope_gufunc(work, pos, inv, np.float64(scale), np.int64(mode))
    return out if out.dtype == arr.dtype else out.astype(arr.dtype)


def rope(x: Any, positions: Any, config: RopeConfig, *, inverse: bool = False) -> np.ndarray:
    """Rotary position embedding of ``x`` (..., L, d) as configured by a :class:`wavepe.RopeConfig`.

    The spectrum (θ and scaling), p-RoPE fraction, layout and YaRN attention
    factor come from ``config``; see :func:`rope_inv_freq` for the arguments.
    """
    if not isinstance(config, RopeConfig):
        raise TypeError(f"config must be a RopeConfig, got {type(config).__name__}")
    arr = np.asarray(x)
    if arr.ndim < 2:
        raise ValueError(f"x must have shape (..., L, d), got shape {arr.shape}")
    d = config.check_head_dim(arr.shape[-1])
    inverse = check_flag("inverse", inverse)
    return rope_inv_freq(arr, positions, config.inv_freq(d), layout=config.layout,
                         rotary_pairs=config.rotary_pairs(d), scale=config.attention_factor, inverse=inverse)
