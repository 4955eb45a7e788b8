"""Wavelet tables for the torch ops: the distances a call can use, in bounded memory, eager and compiled.

A call with queries at ``q_offset .. q_offset + M - 1`` and keys at
``0 .. N - 1`` reads distances ``r = pos_q - pos_k`` in
``[q_offset - (N - 1), q_offset + M - 1]`` (``r >= 0`` when causal); rows of
the support outside them are never read.  The table passed to the kernels
covers exactly those (intersected with the support), so memory grows with the
sequence length, not with the wavelets' support -- the paper's 32 x 4 and
128 x 1 grids have supports of 10^10 and 10^39 distances.

* Eagerly, :func:`wavelet_table` returns a view of a window cached on the
  config per (dtype, device), grown on demand (``WaveletConfig.table``).
* Under ``torch.compile`` the table is the output of the op
  ``wavepe::wavelet_table(key, lo, rows, dtype, device)`` -- a graph node
  whose row count is a (possibly symbolic) function of the lengths, so a new
  length neither recompiles nor bakes a constant of the wrong size; its
  kernel reads the same cache (the same numbers as eagerly).  The config
  travels as its table key, a string (torch 2.11's dynamo refuses a
  WaveletConfig where a constant is needed).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._wavelet_rows import float16_ready, support_t
from ..config import WaveletConfig, _Window, config_for_table_key
from ._checks import cacheable

_default_configs: dict[int, WaveletConfig] = {}


def default_wavelet_config(head_dim: int) -> WaveletConfig:
    """The paper's grid for ``head_dim`` (8 scales), shared per head_dim."""
    cfg = _default_configs.get(head_dim)
    if cfg is None:
        cfg = _default_configs.setdefault(head_dim, WaveletConfig.grid(head_dim))
    return cfg


# The support bound of the default grid's family (Ricker, exact) per table dtype: what a traced call
# needs to size the default grid's table without building the config inside the graph.
_RICKER_T_HI = {name: support_t("ricker", np.dtype(name), 0.0)[1] for name in ("float32", "float64")}


def _dtype_name(dtype: torch.dtype) -> str:
    return "float64" if dtype == torch.float64 else "float32"


def _table_info(config: WaveletConfig | None, head_dim: int, dtype: torch.dtype) -> tuple[str, int, int]:
    """(table key, first and last distance whose rows may be nonzero) -- plain Python, traceable.

    ``config=None`` is the default grid of ``head_dim``: scales 2^0 .. 2^7 x
    shifts 0 .. head_dim/8 - 1, whose support is [128 t_lo, head_dim/8 - 1 +
    128 t_hi] (WaveletConfig.support_rows of that grid; tests/test_tables.py
    checks they agree)."""
    name = _dtype_name(dtype)
    if config is not None:
        lo, hi = config._support_rows[name]  # the dict support_rows() reads: no np.dtype() in a traced graph
        return config.table_key, lo, hi
    t_hi = _RICKER_T_HI[name]
    return f"default:{head_dim}", math.floor(-128.0 * t_hi) - 1, math.ceil((head_dim // 8 - 1) + 128.0 * t_hi) + 1


def _config_of(key: str) -> WaveletConfig:
    if key.startswith("default:"):
        return default_wavelet_config(int(key.split(":", 1)[1]))
    config = config_for_table_key(key)
    if config is None:
        raise RuntimeError(f"wavepe::wavelet_table: no live WaveletConfig has table key {key!r}")
    return config


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(np.float64 if dtype == torch.float64 else np.float32)


def wavelet_table(config: WaveletConfig, dtype: torch.dtype, device: torch.device | str,
                  r_min: int | None = None, r_max: int | None = None, *,
                  whole_window: bool = False) -> tuple[torch.Tensor, int]:
    """``config.table(dtype, r_min, r_max)`` as a tensor on ``device``: ``(T, r_lo)``.

    The rows of distances ``[r_min, r_max]`` that can be nonzero (without a
    range, the whole support, if it tabulates); a view of a window cached on
    the config per (dtype, device) and grown on demand.  ``whole_window``:
    the cached window itself, which holds those rows among others (exact
    rows of other distances): for a kernel that reads only the distances its
    call forms, without a view per call.
    """
    if not isinstance(device, torch.device):
        device = torch.device(device)
    if r_min is None and r_max is None:
        table_np, r_lo = config.table(_np_dtype(dtype))  # raises for supports too large to tabulate whole
        lo, hi = r_lo, r_lo + table_np.shape[0] - 1
    else:
        # support_rows without np.dtype(): a decoding step calls this once per layer and token
        sup_lo, sup_hi = config._support_rows[_dtype_name(dtype)]
        lo, hi = max(int(r_min), sup_lo), min(int(r_max), sup_hi)
        if lo > hi:
            return torch.zeros((0, config.head_dim), dtype=dtype, device=device), int(r_min)
    key = ("torch", dtype, device)
    cached = config._cache.get(key)  # one dict read (atomic); the lock orders the writes
    if cached is None or not cached.covers(lo, hi):
        window = config._window(_np_dtype(dtype), lo, hi)  # the NumPy window, grown to cover [lo, hi]
        values = window.table.copy()
        if dtype == torch.float16:
            float16_ready(values)
        table = torch.from_numpy(values).to(device=device, dtype=dtype)
        cached = _TorchWindow(table, window.r_lo, window.lo, window.hi)
        if cacheable(table):
            with config._lock:
                config._cache[key] = cached
    if whole_window:
        return cached.table, cached.r_lo
    return cached.rows_for(lo, hi)


class _TorchWindow(_Window):
    """A window of a torch table (one per dtype and device)."""

    __slots__ = ()

    def _rows(self, start: int, count: int) -> torch.Tensor:
        # narrow, not indexing: an op for every device (indexing a fake CUDA tensor needs CUDA)
        return self.table.narrow(0, start, count)


# ---- the op torch.compile sees ------------------------------------------------------------------

@torch.library.custom_op("wavepe::wavelet_table", mutates_args=())
def _wavelet_table_op(key: str, lo: int, rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rows of distances ``lo .. lo + rows - 1`` of the config with table key ``key`` (zero beyond its support)."""
    config = _config_of(key)
    out = torch.zeros((rows, config.head_dim), dtype=dtype, device=device)
    if rows > 0:
        part, first = wavelet_table(config, dtype, device, lo, lo + rows - 1)
        out.narrow(0, first - lo, part.shape[0]).copy_(part)
    return out


@_wavelet_table_op.register_fake
def _wavelet_table_fake(key, lo, rows, dtype, device):
    return torch.empty((rows, _config_of(key).head_dim), dtype=dtype, device=device)


def _sym_max(a, b):
    """max of two sizes, either of which may be symbolic: torch.sym_max where one is (torch 2.10-2.11's Dynamo
    refuses torch.sym_max of two plain ints, "torch.* op returned non-Tensor": static shapes), max otherwise."""
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else torch.sym_max(a, b)


def _sym_min(a, b):
    """min of two sizes, either of which may be symbolic (as _sym_max)."""
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else torch.sym_min(a, b)


def call_table(config: WaveletConfig | None, head_dim: int, dtype: torch.dtype, device: torch.device, m, n,
               q_offset, causal: bool, *, whole_window: bool = False) -> tuple[torch.Tensor, int, int]:
    """``(table, r_lo, rows)`` for a call: the distances its queries and keys can form, within the support.

    ``config=None`` is the default grid of ``head_dim``.  ``m``, ``n``,
    ``q_offset`` may be symbolic (torch.compile with dynamic shapes): then the
    table is the op's output, sized by them.  ``whole_window`` (eager only):
    the cached window that holds those distances (wavelet_table).
    """
    lo = q_offset - (n - 1)
    hi = q_offset + m - 1
    if torch.compiler.is_compiling():
        key, sup_lo, sup_hi = _table_info(config, head_dim, dtype)
        if causal:
            lo = _sym_max(lo, 0)
        lo = _sym_max(lo, sup_lo)
        hi = _sym_min(hi, sup_hi)
        rows = _sym_max(hi - lo + 1, 0)
        return _wavelet_table_op(key, lo, rows, dtype, device), lo, rows
    if causal:
        lo = max(lo, 0)
    if m == 0 or n == 0 or lo > hi:
        return torch.zeros((0, head_dim), dtype=dtype, device=device), 0, 0
    table, r_lo = wavelet_table(default_wavelet_config(head_dim) if config is None else config, dtype, device,
                                lo, hi, whole_window=whole_window)
    return table, r_lo, int(table.shape[0])
