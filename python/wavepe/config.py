"""Configurations of the position encodings: wavelets, RoPE and ALiBi.

These objects are plain Python with validated fields, immutable once built
(assigning a field raises ``AttributeError`` naming it: derived values such as
a RoPE spectrum or a cached table can never disagree with the fields); the
kernels receive what they build (a relative table, an ``inv_freq`` spectrum,
ALiBi slopes).  The table values come from ``_wavelet_rows`` (the compiled
extension), never from ``wavepe.ufuncs``, which takes these configs.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import types
import weakref
from typing import Any, Mapping, NoReturn, Sequence

import numpy as np

from ._validate import check_choice, check_flag, check_int, check_real
from ._wavelet_rows import WAVELET_FAMILIES, support_t, wavelet_rows

ROPE_LAYOUTS: tuple[str, ...] = ("half", "interleaved")

#: Relative distances stay within +-2^60 (the C core's position limit): tables never extend beyond.
_DISTANCE_LIMIT = 2**60
#: A table of the whole support (``table()`` without a range) at most this many elements; larger
#: supports (large scales: the paper's 32 x 4 and 128 x 1 grids) are tabulated per call, over the
#: distances the call can use.
_WHOLE_TABLE_ELEMENTS = 2**26

class _LiveConfigs:
    """The live configs by their table key (torch.compile graphs name a config's table by this
    string).  Equal configs share a key and any of them serves a lookup, so the entry stays
    while one is alive, whichever was made first or dropped first."""

    def __init__(self) -> None:
        # by id, not in a WeakSet: equal configs compare equal, and a set would keep only one of them
        self._sets: "dict[str, weakref.WeakValueDictionary[int, WaveletConfig]]" = {}
        self._lock = threading.Lock()

    def add(self, key: str, config: "WaveletConfig") -> None:
        with self._lock:
            if len(self._sets) > 64:  # forget keys whose configs are all gone
                self._sets = {k: s for k, s in self._sets.items() if len(s)}
            self._sets.setdefault(key, weakref.WeakValueDictionary())[id(config)] = config

    def get(self, key: str) -> "WaveletConfig | None":
        with self._lock:
            live = self._sets.get(key)
            return next(iter(live.values()), None) if live else None


_BY_TABLE_KEY = _LiveConfigs()


def config_for_table_key(key: str) -> "WaveletConfig | None":
    """A live :class:`WaveletConfig` whose :attr:`~WaveletConfig.table_key` is ``key`` (equal configs
    share a key; any of them serves), or None when none is alive."""
    return _BY_TABLE_KEY.get(key)


def _frozen(config: object, name: str) -> NoReturn:
    cls = type(config).__name__
    raise AttributeError(f"{cls} is immutable: cannot set field {name!r} (make a new config: "
                         f"config.replace({name}=...))")


class _ImmutableConfig:
    """What the configs share: no assignment after __init__ (_frozen names the field), copies and
    pickles through the dict form (the lock and the caches are not state), replace()."""

    __slots__ = ()  # the configs list their own

    def __setattr__(self, name: str, value: Any) -> None:
        _frozen(self, name)

    def __delattr__(self, name: str) -> None:
        _frozen(self, name)

    def __reduce__(self) -> tuple:
        return (type(self).from_dict, (self.to_dict(),))  # type: ignore[attr-defined]

    def _replace(self, changes: Mapping[str, Any]) -> Any:
        return type(self).from_dict(_replaced(self.to_dict(), changes, type(self).__name__))  # type: ignore[attr-defined]


# Fields are set once, in __init__, through this; every later assignment raises (_frozen).
_set = object.__setattr__


class _Window:
    """A cached table (a NumPy array here; a tensor in ops._tables' subclass): ``table`` (read-only)
    holds distances ``r_lo .. r_lo + rows - 1`` and is exact for every distance in ``[lo, hi]``
    (rows of that window outside the array are all zero)."""

    __slots__ = ("table", "r_lo", "lo", "hi")

    def __init__(self, table: np.ndarray, r_lo: int, lo: int, hi: int) -> None:
        self.table, self.r_lo, self.lo, self.hi = table, r_lo, lo, hi

    def covers(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and hi <= self.hi

    def rows_for(self, lo: int, hi: int) -> tuple[np.ndarray, int]:
        """The rows of distances [lo, hi] (a view; fewer where the window's edge rows are zero)."""
        first = max(lo, self.r_lo)
        last = min(hi, self.r_lo + self.table.shape[0] - 1)
        if first > last:
            return self._rows(0, 0), lo
        if first == self.r_lo and last == self.r_lo + self.table.shape[0] - 1:
            return self.table, first  # all of it: the cached object itself
        return self._rows(first - self.r_lo, last - first + 1), first

    def _rows(self, start: int, count: int) -> Any:
        return self.table[start:start + count]


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


class WaveletConfig(_ImmutableConfig):
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

    __slots__ = ("family", "scales", "shifts", "normalize", "support_tol", "_cache", "_lock", "_support_rows",
                 "_table_key", "__weakref__")

    def __init__(
        self,
        family: str = "ricker",
        scales: Sequence[float] | np.ndarray | None = None,
        shifts: Sequence[float] | np.ndarray | None = None,
        normalize: bool = False,
        support_tol: float = 0.0,
    ) -> None:
        _set(self, "family", check_choice("family", family, WAVELET_FAMILIES))
        if scales is None or shifts is None:
            raise TypeError("scales and shifts are required (one per head dimension); "
                            "use WaveletConfig.grid(head_dim) for the paper's grid")
        _set(self, "scales", _as_vector("scales", scales))
        _set(self, "shifts", _as_vector("shifts", shifts))
        if self.scales.shape != self.shifts.shape:
            raise ValueError(f"scales and shifts must have the same length, got {self.scales.size} "
                             f"and {self.shifts.size}")
        bad = np.flatnonzero(~(self.scales > 0))
        if bad.size:
            raise ValueError(f"scales must be > 0, got scales[{int(bad[0])}]={float(self.scales[bad[0]])!r}")
        _set(self, "normalize", check_flag("normalize", normalize))
        _set(self, "support_tol", check_real("support_tol", support_tol))
        if not 0.0 <= self.support_tol < 1.0:
            raise ValueError(f"support_tol must be in [0, 1), got {self.support_tol}")
        # the tables built so far (by ("table", dtype) here, ("torch", dtype, device) in ops._tables)
        _set(self, "_cache", {})
        _set(self, "_lock", threading.Lock())
        # the distances whose rows may be nonzero, per table dtype; every bound finite (else the
        # scale or shift that overflows is named)
        _set(self, "_support_rows",
             {np.dtype(dt).name: self._support_bounds(np.dtype(dt)) for dt in (np.float32, np.float64)})
        _set(self, "_table_key", hashlib.sha1(repr(self._key()).encode()).hexdigest())
        _BY_TABLE_KEY.add(self._table_key, self)

    def replace(self, **changes: Any) -> "WaveletConfig":
        """A new config with the fields in ``changes`` (``family``, ``scales``, ``shifts``,
        ``normalize``, ``support_tol``) replaced, validated as by the constructor."""
        return self._replace(changes)

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
        try:
            largest = base ** float(n_scales - 1)
        except OverflowError:
            largest = math.inf
        if not math.isfinite(largest):
            raise ValueError(f"base={base!r} with n_scales={n_scales} gives scales up to base**{n_scales - 1}, "
                             "which overflows float64")
        scales = np.repeat(base ** np.arange(n_scales, dtype=np.float64), n_shifts)
        shifts = np.tile(np.arange(n_shifts, dtype=np.float64), n_scales)
        return cls(family, scales, shifts, normalize=normalize, support_tol=support_tol)

    # ---- identity -----------------------------------------------------------

    @property
    def head_dim(self) -> int:
        """d, the number of head dimensions (one wavelet each)."""
        return int(self.scales.size)

    @property
    def table_key(self) -> str:
        """The string that names this config's table inside ``torch.compile`` graphs (a hash of the
        fields: equal configs share it); :func:`config_for_table_key` finds a live config by it."""
        return self._table_key

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
        return support_t(self.family, np.dtype(dtype), self.support_tol)

    def _support_bounds(self, dt: np.dtype) -> tuple[int, int]:
        """[lo, hi]: every distance outside has an all-zero row in dtype (a bound, not trimmed)."""
        t_lo, t_hi = self.support_t(dt)
        a, b = self.scales, self.shifts
        with np.errstate(over="ignore", invalid="ignore"):
            ends = (b + a * t_lo, b + a * t_hi)
        for end in ends:
            bad = np.flatnonzero(~np.isfinite(end))
            if bad.size:
                j = int(bad[0])
                culprit = "scales" if not math.isfinite(float(a[j]) * max(abs(t_lo), abs(t_hi))) else "shifts"
                value = a[j] if culprit == "scales" else b[j]
                raise ValueError(f"{culprit}[{j}]={float(value)!r}: the wavelet's support (shifts[{j}] + scales[{j}] * t "
                                 f"for |t| <= {t_hi:.3g}) overflows float64")
        lo = math.floor(float(np.min(ends[0]))) - 1
        hi = math.ceil(float(np.max(ends[1]))) + 1
        return max(lo, -_DISTANCE_LIMIT), min(hi, _DISTANCE_LIMIT)

    def support_rows(self, dtype: Any = np.float32) -> tuple[int, int]:
        """[lo, hi]: the distances whose table rows may be nonzero (outside, every row is zero),
        clipped to the supported distances (+-2^60).  Cheap: from the support bound, no table."""
        return self._support_rows[np.dtype(dtype).name]

    def table(self, dtype: Any = np.float32, r_min: int | None = None,
              r_max: int | None = None) -> tuple[np.ndarray, int]:
        """The relative table and its first row's distance: ``(T, r_lo)``.

        ``T[i, j] = psi((r - shifts[j]) / scales[j])`` (times ``1/sqrt(scales[j])``
        with normalize) for ``r = r_lo + i``, shape (R, d), read-only, computed
        in ``dtype`` (float32 or float64) with wavepe's own ufuncs.

        Without a range it covers the whole support: every distance outside
        ``[r_lo, r_lo + R)`` has an all-zero row, and the first and last rows
        are not all zero, so kernels skip everything outside.  Supports larger
        than 2^26 elements (large scales: the 32 x 4 and 128 x 1 grids of the
        paper) have no such table: pass the distances a call can use,
        ``[r_min, r_max]`` (``pos_q - pos_k`` over its queries and keys; the
        ops do this), and get the rows of those distances that can be nonzero
        -- memory proportional to the sequence length, not to the support.

        Cached per dtype: one window of distances, grown on demand (by half
        its length beyond a request that leaves it, so growing sequences cost
        amortised O(1) rebuilds) and rebuilt elsewhere for a request far
        from it.
        """
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"dtype must be float32 or float64, got {dt}")
        sup_lo, sup_hi = self.support_rows(dt)
        if r_min is None and r_max is None:
            elements = (sup_hi - sup_lo + 1) * self.head_dim
            if elements > _WHOLE_TABLE_ELEMENTS:
                raise ValueError(f"this config's support spans {sup_hi - sup_lo + 1} distances ({elements} table "
                                 f"elements): tabulate the distances a call uses, "
                                 f"config.table(dtype, r_min, r_max) (wavepe's ops do)")
            lo, hi = sup_lo, sup_hi
        else:
            if r_min is None or r_max is None:
                raise TypeError("give both r_min and r_max (the distances a call uses), or neither")
            lo, hi = max(int(r_min), sup_lo), min(int(r_max), sup_hi)
            if lo > hi:
                return np.zeros((0, self.head_dim), dt), int(r_min)
        return self._window(dt, lo, hi).rows_for(lo, hi)

    def _window(self, dt: np.dtype, lo: int, hi: int) -> _Window:
        """The cached window of ``dt`` covering [lo, hi] (within the support), built or grown if needed."""
        key = ("table", dt.str)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached.covers(lo, hi):
            return cached
        sup_lo, sup_hi = self.support_rows(dt)
        new_lo, new_hi = lo, hi
        if cached is not None:
            hull_lo, hull_hi = min(lo, cached.lo), max(hi, cached.hi)
            if hull_hi - hull_lo <= 2 * ((hi - lo) + (cached.hi - cached.lo) + 2):  # near: grow it
                new_lo, new_hi = hull_lo, hull_hi
        # room to grow: half the window's length beyond each side a request pushed
        room = (new_hi - new_lo + 1) // 2
        if cached is None or new_lo < cached.lo:
            new_lo -= room
        if cached is None or new_hi > cached.hi:
            new_hi += room
        window = self._build_window(dt, max(new_lo, sup_lo), min(new_hi, sup_hi))
        with self._lock:
            self._cache[key] = window
        return window

    def _build_window(self, dt: np.dtype, lo: int, hi: int) -> _Window:
        """Rows of distances lo .. hi (within the support), trimmed of all-zero rows at both ends."""
        table = wavelet_rows(self.family, self.scales, self.shifts, self.normalize, self.support_tol, dt, lo, hi)
        nonzero = np.flatnonzero(np.any(table, axis=1))
        if nonzero.size == 0:
            table, r_lo = table[:0], lo
        else:
            table = np.ascontiguousarray(table[nonzero[0]: nonzero[-1] + 1])
            r_lo = lo + int(nonzero[0])
        table.setflags(write=False)
        return _Window(table, r_lo, lo, hi)

    def support(self, dtype: Any = np.float32) -> tuple[int, int]:
        """(r_min, r_max): the relative distances whose table row is not all zero
        (exact where the whole support tabulates, :meth:`support_rows` -- a bound -- otherwise)."""
        try:
            table, r_lo = self.table(dtype)
        except ValueError:
            return self.support_rows(dtype)
        return r_lo, r_lo + table.shape[0] - 1


def _replaced(fields: dict[str, Any], changes: Mapping[str, Any], cls: str) -> dict[str, Any]:
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise TypeError(f"{cls}.replace: unknown field(s) {unknown}; the fields are {sorted(fields)}")
    return {**fields, **changes}


def _plain(x: Any) -> Any:
    """A NumPy scalar (a flag given as numpy.bool_, say) as the Python value, for JSON."""
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


class RopeConfig(_ImmutableConfig):
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

    __slots__ = ("theta", "rotary_fraction", "layout", "scaling", "_spec")

    def __init__(self, theta: float = 10000.0, rotary_fraction: float = 1.0, layout: str = "half",
                 scaling: Mapping[str, Any] | None = None) -> None:
        _set(self, "theta", check_real("theta", theta, positive=True))
        if self.theta <= 1.0:
            raise ValueError(f"theta must be > 1 (the spectrum decays as theta^(-2i/d)), got {self.theta}")
        _set(self, "rotary_fraction", check_real("rotary_fraction", rotary_fraction))
        if not 0.0 <= self.rotary_fraction <= 1.0:
            raise ValueError(f"rotary_fraction must be in [0, 1], got {self.rotary_fraction}")
        _set(self, "layout", check_choice("layout", layout, ROPE_LAYOUTS))
        if scaling is not None and not isinstance(scaling, Mapping):
            raise TypeError(f"scaling must be None or a mapping with a 'type' key, got {scaling!r}")
        if scaling is not None:
            from ._rope_scaling import validate_scaling

            scaling = dict(scaling)
            validate_scaling(scaling)
            scaling = types.MappingProxyType(scaling)  # read-only: the spectrum follows it
        _set(self, "scaling", scaling)
        # The configuration as a string that rebuilds it (RopeConfig.from_spec): what
        # torch.compile sees of a config (strings are constants to dynamo on every torch
        # wavepe supports; a RopeConfig object is not on torch 2.11: issue 20).
        _set(self, "_spec", json.dumps(self.to_dict(), sort_keys=True, default=_plain))  # numpy scalars as Python's

    def replace(self, **changes: Any) -> "RopeConfig":
        """A new config with the fields in ``changes`` (``theta``, ``rotary_fraction``, ``layout``,
        ``scaling``) replaced, validated as by the constructor."""
        return self._replace(changes)

    @classmethod
    def from_spec(cls, spec: str) -> "RopeConfig":
        """The configuration whose ``_spec`` string is ``spec``."""
        return cls(**json.loads(spec))

    def _key(self) -> tuple:
        sc = tuple(sorted(self.scaling.items())) if self.scaling else None
        return (self.theta, self.rotary_fraction, self.layout, sc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RopeConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        scaling = dict(self.scaling) if self.scaling is not None else None
        return (f"RopeConfig(theta={self.theta:g}, rotary_fraction={self.rotary_fraction:g}, "
                f"layout={self.layout!r}, scaling={scaling!r})")

    def with_theta(self, theta: float) -> "RopeConfig":
        """The same configuration at another base, e.g. a larger θ at inference."""
        return RopeConfig(theta, self.rotary_fraction, self.layout, self.scaling)

    def to_dict(self) -> dict[str, Any]:
        return {"theta": self.theta, "rotary_fraction": self.rotary_fraction, "layout": self.layout,
                "scaling": dict(self.scaling) if self.scaling is not None else None}

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
