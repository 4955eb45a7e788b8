"""Configurations of the position encodings: wavelets, RoPE and ALiBi.

These objects are plain Python with validated fields; the kernels receive
what they build (a relative table, an ``inv_freq`` spectrum, ALiBi slopes).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from ._validate import check_choice, check_int, check_real

WAVELET_FAMILIES: tuple[str, ...] = ("ricker", "gaussian", "morlet", "haar")
ROPE_LAYOUTS: tuple[str, ...] = ("half", "interleaved")


def _as_vector(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a sequence of real numbers, got {value!r}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one entry per head dimension), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN at index {int(np.flatnonzero(np.isnan(arr))[0])}")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains an infinite value at index {int(np.flatnonzero(np.isinf(arr))[0])}")
    arr.setflags(write=False)
    return arr


class WaveletConfig:
    """Per-dimension wavelets of the wavelet relative position encoding.

    Head dimension ``j`` carries ``psi((r - shifts[j]) / scales[j])`` at relative
    distance ``r = pos_q - pos_k``; the score gets ``q . p`` added.

    Args:
        family: one of ``"ricker"`` (default), ``"gaussian"``, ``"morlet"``, ``"haar"``.
        scales: (d,) scale ``a_j > 0`` of each head dimension.
        shifts: (d,) shift ``b_j`` of each head dimension.
        normalize: multiply column ``j`` by ``1/sqrt(a_j)`` (eq. 1 of the paper);
            the default follows eq. 8 (no amplitude change).
        support_tol: treat ``|psi| <= support_tol * max|psi|`` beyond the support
            bound as zero (default 0: exact, only values that are zero in the
            table's dtype are skipped).

    Use :meth:`grid` for the paper's scale x shift grids.
    """

    __slots__ = ("family", "scales", "shifts", "normalize", "support_tol", "_cache", "_lock")

    def __init__(
        self,
        family: str = "ricker",
        scales: Sequence[float] | np.ndarray | None = None,
        shifts: Sequence[float] | np.ndarray | None = None,
        normalize: bool = False,
        support_tol: float = 0.0,
    ) -> None:
        self.family = check_choice("family", family, WAVELET_FAMILIES)
        if scales is None or shifts is None:
            raise TypeError("scales and shifts are required (one per head dimension); "
                            "use WaveletConfig.grid(head_dim) for the paper's grid")
        self.scales = _as_vector("scales", scales)
        self.shifts = _as_vector("shifts", shifts)
        if self.scales.shape != self.shifts.shape:
            raise ValueError(f"scales and shifts must have the same length, got {self.scales.size} "
                             f"and {self.shifts.size}")
        bad = np.flatnonzero(~(self.scales > 0))
        if bad.size:
            raise ValueError(f"scales must be > 0, got scales[{int(bad[0])}]={float(self.scales[bad[0]])!r}")
        if not isinstance(normalize, (bool, np.bool_)):
            raise TypeError(f"normalize must be a bool, got {normalize!r}")
        self.normalize = bool(normalize)
        self.support_tol = check_real("support_tol", support_tol)
        if not 0.0 <= self.support_tol < 1.0:
            raise ValueError(f"support_tol must be in [0, 1), got {self.support_tol}")
        self._cache: dict[Any, Any] = {}
        self._lock = threading.Lock()

    # ---- construction -----------------------------------------------------

    @classmethod
    def grid(
        cls,
        head_dim: int,
        n_scales: int = 8,
        family: str = "ricker",
        *,
        n_shifts: int | None = None,
        base: float = 2.0,
        normalize: bool = False,
        support_tol: float = 0.0,
    ) -> "WaveletConfig":
        """The paper's grid: scales ``base**0 .. base**(n_scales-1)`` x shifts ``0 .. n_shifts-1``.

        Dimension ``j = s * n_shifts + b`` (scale-major).  ``n_shifts`` defaults to
        ``head_dim // n_scales``; for head_dim = 128 this is the paper's best,
        {2^0..2^7} x {0..15}.  Ablation grids (16x8, 32x4, 128x1, 1x128, 4x32, ...)
        are other ``n_scales``.
        """
        head_dim = check_int("head_dim", head_dim, min_value=1)
        n_scales = check_int("n_scales", n_scales, min_value=1)
        if n_shifts is None:
            if head_dim % n_scales != 0:
                raise ValueError(f"head_dim={head_dim} is not divisible by the grid's n_scales={n_scales}")
            n_shifts = head_dim // n_scales
        n_shifts = check_int("n_shifts", n_shifts, min_value=1)
        if n_scales * n_shifts != head_dim:
            raise ValueError(f"n_scales * n_shifts = {n_scales} * {n_shifts} != head_dim={head_dim}")
        base = check_real("base", base, positive=True)
        scales = np.repeat(base ** np.arange(n_scales, dtype=np.float64), n_shifts)
        shifts = np.tile(np.arange(n_shifts, dtype=np.float64), n_scales)
        return cls(family, scales, shifts, normalize=normalize, support_tol=support_tol)

    # ---- identity -----------------------------------------------------------

    @property
    def head_dim(self) -> int:
        """d, the number of head dimensions (one wavelet each)."""
        return int(self.scales.size)

    def _key(self) -> tuple:
        return (self.family, self.scales.tobytes(), self.shifts.tobytes(), self.normalize, self.support_tol)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WaveletConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"WaveletConfig(family={self.family!r}, head_dim={self.head_dim}, "
                f"scales=[{self.scales.min():g}..{self.scales.max():g}], "
                f"shifts=[{self.shifts.min():g}..{self.shifts.max():g}], normalize={self.normalize}, "
                f"support_tol={self.support_tol})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for model configs and checkpoints); inverse of :meth:`from_dict`."""
        return {"family": self.family, "scales": self.scales.tolist(), "shifts": self.shifts.tolist(),
                "normalize": self.normalize, "support_tol": self.support_tol}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WaveletConfig":
        return cls(d.get("family", "ricker"), d["scales"], d["shifts"], normalize=d.get("normalize", False),
                   support_tol=d.get("support_tol", 0.0))

    # ---- support and table --------------------------------------------------

    def support_t(self, dtype: Any = np.float32) -> tuple[float, float]:
        """[t_lo, t_hi]: outside it |psi| is below half the smallest normal of ``dtype`` (so the
        kernels, which flush subnormals, give exactly 0), or below the tolerance."""
        from . import _ufuncs

        double = np.dtype(dtype) == np.float64
        return _ufuncs.wavelet_support_t(WAVELET_FAMILIES.index(self.family), double, self.support_tol)

    def table(self, dtype: Any = np.float32) -> tuple[np.ndarray, int]:
        """The relative table and its first row's distance: ``(T, r_lo)``.

        ``T[i, j] = psi((r - shifts[j]) / scales[j])`` (times ``1/sqrt(scales[j])``
        with normalize) for ``r = r_lo + i``, shape (R, d), read-only, computed
        in ``dtype`` (float32 or float64) with wavepe's own ufuncs.  Every
        distance outside ``[r_lo, r_lo + R)`` has an all-zero row, and the first
        and last rows are not all zero, so kernels skip everything outside.
        Cached per dtype.
        """
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"dtype must be float32 or float64, got {dt}")
        key = ("table", dt.str)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        result = self._build_table(dt)
        with self._lock:
            self._cache[key] = result
        return result

    def _build_table(self, dt: np.dtype) -> tuple[np.ndarray, int]:
        from . import ufuncs

        t_lo, t_hi = self.support_t(dt)
        a, b = self.scales, self.shifts
        r_first = int(math.floor(float(np.min(b + a * t_lo)))) - 1
        r_last = int(math.ceil(float(np.max(b + a * t_hi)))) + 1
        r = np.arange(r_first, r_last + 1, dtype=np.float64)
        t = (r[:, None] - b[None, :]) / a[None, :]
        psi = getattr(ufuncs, self.family)
        table = psi(t.astype(dt))
        # beyond the support bound the table is zero, whatever the tolerance
        table[(t < t_lo) | (t > t_hi)] = 0
        if self.normalize:
            table *= (1.0 / np.sqrt(a)).astype(dt)[None, :]
        # no table holds a subnormal (they cost a microcode assist per FMA on Intel
        # cores; the kernels flush them anyway): values below the smallest normal are 0
        table[np.abs(table) < np.finfo(dt).tiny] = 0
        nonzero_rows = np.flatnonzero(np.any(table != 0, axis=1))
        if nonzero_rows.size == 0:  # cannot happen for valid configs; keep one zero row
            table, r_lo = np.zeros((1, self.head_dim), dt), 0
        else:
            table = np.ascontiguousarray(table[nonzero_rows[0]: nonzero_rows[-1] + 1])
            r_lo = r_first + int(nonzero_rows[0])
        table.setflags(write=False)
        return table, r_lo

    def support(self, dtype: Any = np.float32) -> tuple[int, int]:
        """(r_min, r_max): the relative distances whose table row is not all zero."""
        table, r_lo = self.table(dtype)
        return r_lo, r_lo + table.shape[0] - 1


class RopeConfig:
    """Rotary position embedding with a configurable spectrum.

    Args:
        theta: base θ of ``inv_freq_i = θ^(-2i/d)`` (10^4 as in RoFormer/Llama 2,
            5e5 as Llama 3, or L_train as the base-expansion paper recommends
            for training; raise it only at inference).
        rotary_fraction: p-RoPE fraction r in [0, 1]: rotate only the
            ``ceil(r * d/2)`` highest-frequency pairs (r = 0 is NoPE).
        layout: ``"half"`` pairs (i, i + d/2) as Hugging Face's ``rotate_half``;
            ``"interleaved"`` pairs (2i, 2i+1) as RoFormer.
        scaling: None, or a mapping with ``"type"`` in ``"linear"``, ``"ntk"``,
            ``"yarn"``, ``"llama3"`` and that type's parameters (see
            :meth:`inv_freq`).
    """

    __slots__ = ("theta", "rotary_fraction", "layout", "scaling")

    def __init__(self, theta: float = 10000.0, rotary_fraction: float = 1.0, layout: str = "half",
                 scaling: Mapping[str, Any] | None = None) -> None:
        self.theta = check_real("theta", theta, positive=True)
        if self.theta <= 1.0:
            raise ValueError(f"theta must be > 1 (the spectrum decays as theta^(-2i/d)), got {self.theta}")
        self.rotary_fraction = check_real("rotary_fraction", rotary_fraction)
        if not 0.0 <= self.rotary_fraction <= 1.0:
            raise ValueError(f"rotary_fraction must be in [0, 1], got {self.rotary_fraction}")
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        if scaling is not None and not isinstance(scaling, Mapping):
            raise TypeError(f"scaling must be None or a mapping with a 'type' key, got {scaling!r}")
        self.scaling = dict(scaling) if scaling is not None else None
        if self.scaling is not None:
            from ._rope_scaling import validate_scaling

            validate_scaling(self.scaling)

    def _key(self) -> tuple:
        sc = tuple(sorted(self.scaling.items())) if self.scaling else None
        return (self.theta, self.rotary_fraction, self.layout, sc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RopeConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"RopeConfig(theta={self.theta:g}, rotary_fraction={self.rotary_fraction:g}, "
                f"layout={self.layout!r}, scaling={self.scaling!r})")

    def with_theta(self, theta: float) -> "RopeConfig":
        """The same configuration at another base, e.g. a larger θ at inference."""
        return RopeConfig(theta, self.rotary_fraction, self.layout, self.scaling)

    def to_dict(self) -> dict[str, Any]:
        return {"theta": self.theta, "rotary_fraction": self.rotary_fraction, "layout": self.layout,
                "scaling": self.scaling}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RopeConfig":
        return cls(d.get("theta", 10000.0), d.get("rotary_fraction", 1.0), d.get("layout", "half"),
                   d.get("scaling"))

    def check_head_dim(self, head_dim: int) -> int:
        head_dim = check_int("head_dim", head_dim, min_value=2)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE (pairs of dimensions), got {head_dim}")
        return head_dim

    def rotary_pairs(self, head_dim: int) -> int:
        """How many pairs rotate: ``ceil(rotary_fraction * head_dim / 2)``."""
        half = self.check_head_dim(head_dim) // 2
        # round away float noise before ceil so that 0.75 * 64 gives 48, not 49
        return min(half, int(math.ceil(round(self.rotary_fraction * half, 9))))

    def inv_freq(self, head_dim: int) -> np.ndarray:
        """(head_dim/2,) float64 angular frequencies, highest first, scaling applied."""
        half = self.check_head_dim(head_dim) // 2
        inv = self.theta ** (-np.arange(0, half, dtype=np.float64) * 2.0 / head_dim)
        if self.scaling is not None:
            from ._rope_scaling import apply_scaling

            inv = apply_scaling(inv, self.scaling, head_dim=head_dim, theta=self.theta)
        return inv

    @property
    def attention_factor(self) -> float:
        """Multiplier of cos and sin (YaRN's attention scaling; 1 otherwise)."""
        if self.scaling is None:
            return 1.0
        from ._rope_scaling import attention_factor

        return attention_factor(self.scaling)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's per-head slopes, float64 (num_heads,).

    Geometric ``2^(-8(h+1)/H)`` for H a power of two; otherwise the standard
    interpolation: the slopes of the closest smaller power of two, then every
    other slope of twice that power.
    """
    num_heads = check_int("num_heads", num_heads, min_value=1)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return np.array(power_of_two(num_heads), dtype=np.float64)
    closest = 1 << (num_heads.bit_length() - 1)
    extra = power_of_two(2 * closest)[0::2][: num_heads - closest]
    return np.array(power_of_two(closest) + extra, dtype=np.float64)
