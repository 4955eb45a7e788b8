"""RoPE spectra beyond plain θ: linear, NTK, dynamic NTK, YaRN and Llama-3 scaling.

Each scaling maps the base spectrum ``inv_freq_i = θ^(-2i/d)`` (float64,
i < d/2) to the scaled one; YaRN also sets an attention factor (the kernels'
``scale``).  The formulas follow Hugging Face's ``ROPE_INIT_FUNCTIONS``
(transformers.modeling_rope_utils) with ``partial_rotary_factor = 1`` (the
spectrum always covers the full head_dim; wavepe's p-RoPE then rotates its
first pairs), computed in float64 instead of float32.

``scaling`` is a mapping with ``"type"`` (or Hugging Face's ``"rope_type"``):

=========  ====================================================================
linear     ``factor``: inv_freq / factor (position interpolation).
ntk        ``factor``: static NTK-aware base change θ' = θ · factor^(d/(d-2)).
dynamic    ``factor``, ``original_max_position_embeddings``, ``seq_len``: the
           dynamic-NTK base for an explicit sequence length,
           θ' = θ · (factor·s/L0 - (factor-1))^(d/(d-2)), s = max(seq_len, L0).
           Hugging Face recomputes it as the sequence grows; here the length
           is a parameter, so build the config for the length you run.
yarn       ``factor``, ``original_max_position_embeddings``; optional
           ``beta_fast`` (32), ``beta_slow`` (1), ``truncate`` (True),
           ``attention_factor`` (default 0.1·ln(factor) + 1, or from
           ``mscale`` / ``mscale_all_dim`` as DeepSeek does).
llama3     ``factor``, ``low_freq_factor``, ``high_freq_factor``,
           ``original_max_position_embeddings`` (Llama 3.1: 8, 1, 4, 8192).
=========  ====================================================================

Optional keys may be given as None (meaning the default), as in Hugging Face configs.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ._validate import check_choice, check_flag, check_int, check_real

SCALING_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")

# Required and optional parameters of each type (besides "type" / "rope_type").
_REQUIRED: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings", "seq_len"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "linear": (),
    "ntk": (),
    "dynamic": (),
    "yarn": ("beta_fast", "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim"),
    "llama3": (),
}


def scaling_type(scaling: Mapping[str, Any]) -> str:
    """The scaling's type, from ``"type"`` or Hugging Face's ``"rope_type"``."""
    kind = scaling.get("type", scaling.get("rope_type"))
    if "type" in scaling and "rope_type" in scaling and scaling["type"] != scaling["rope_type"]:
        raise ValueError(f"scaling['type']={scaling['type']!r} and scaling['rope_type']={scaling['rope_type']!r} "
                         "disagree")
    return check_choice("scaling['type']", kind, SCALING_TYPES)


def _real(scaling: Mapping[str, Any], key: str, *, positive: bool = True, default: float | None = None) -> float:
    value = scaling.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"scaling['{key}'] is required for scaling type {scaling_type(scaling)!r}")
        return default
    return check_real(f"scaling['{key}']", value, positive=positive)


def _int(scaling: Mapping[str, Any], key: str) -> int:
    value = scaling.get(key)
    if value is None:
        raise ValueError(f"scaling['{key}'] is required for scaling type {scaling_type(scaling)!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int(f"scaling['{key}']", value, min_value=1)


def validate_scaling(scaling: Mapping[str, Any]) -> None:
    """Raise a ValueError / TypeError naming the offending ``scaling[...]`` entry."""
    kind = scaling_type(scaling)
    allowed = {"type", "rope_type", *_REQUIRED[kind], *_OPTIONAL[kind]}
    unknown = sorted(str(k) for k in scaling if k not in allowed)
    if unknown:
        raise ValueError(f"scaling has unknown key(s) {unknown} for type {kind!r}; allowed: "
                         f"{sorted(allowed - {'type', 'rope_type'})}")
    for key in _REQUIRED[kind]:
        if scaling.get(key) is None:
            raise ValueError(f"scaling['{key}'] is required for scaling type {kind!r}")
    _real(scaling, "factor")
    if kind == "dynamic":
        _int(scaling, "original_max_position_embeddings")
        _int(scaling, "seq_len")
    elif kind == "yarn":
        _int(scaling, "original_max_position_embeddings")
        beta_fast = _real(scaling, "beta_fast", default=32.0)
        beta_slow = _real(scaling, "beta_slow", default=1.0)
        if not beta_fast > beta_slow:
            raise ValueError(f"scaling['beta_fast'] must be > scaling['beta_slow'], got {beta_fast} and {beta_slow}")
        truncate = scaling.get("truncate")
        if truncate is not None:
            check_flag("scaling['truncate']", truncate)
        if scaling.get("attention_factor") is not None:
            _real(scaling, "attention_factor")
        for key in ("mscale", "mscale_all_dim"):
            if scaling.get(key) is not None:
                v = check_real(f"scaling['{key}']", scaling[key])
                if v < 0:
                    raise ValueError(f"scaling['{key}'] must be >= 0, got {v}")
        af = attention_factor(scaling)
        if not (af > 0 and math.isfinite(af)):
            raise ValueError(f"the YaRN attention factor from scaling['mscale'] / scaling['mscale_all_dim'] must be "
                             f"positive and finite, got {af}")
    elif kind == "llama3":
        _int(scaling, "original_max_position_embeddings")
        low = _real(scaling, "low_freq_factor")
        high = _real(scaling, "high_freq_factor")
        if not high > low:
            raise ValueError(f"scaling['high_freq_factor'] must be > scaling['low_freq_factor'], got {high} and {low}")


def _base_change(theta: float, head_dim: int, ratio: float) -> float:
    """NTK-aware base θ · ratio^(d/(d-2)); a head of 2 dimensions has one pair, whose
    frequency θ^0 = 1 no base changes, so its base stays."""
    if head_dim <= 2:
        return theta
    return theta * ratio ** (head_dim / (head_dim - 2))


def apply_scaling(inv_freq: np.ndarray, scaling: Mapping[str, Any], *, head_dim: int, theta: float) -> np.ndarray:
    """The scaled (head_dim/2,) float64 spectrum; ``inv_freq`` is the base θ^(-2i/d)."""
    kind = scaling_type(scaling)
    factor = float(scaling["factor"])
    exponents = np.arange(0, head_dim // 2, dtype=np.float64) * 2.0 / head_dim
    if kind == "linear":
        return inv_freq / factor
    if kind == "ntk":
        return _base_change(theta, head_dim, factor) ** -exponents
    if kind == "dynamic":
        original = _int(scaling, "original_max_position_embeddings")
        seq_len = max(_int(scaling, "seq_len"), original)
        return _base_change(theta, head_dim, factor * seq_len / original - (factor - 1.0)) ** -exponents
    if kind == "yarn":
        return _yarn(inv_freq, scaling, head_dim, theta)
    return _llama3(inv_freq, scaling)


def _yarn(inv_freq: np.ndarray, scaling: Mapping[str, Any], head_dim: int, theta: float) -> np.ndarray:
    # Peng et al. 2023 ("YaRN"), as Hugging Face computes it: pairs that turn
    # more than beta_fast times over the original context keep their
    # frequency, pairs that turn fewer than beta_slow times are interpolated
    # (divided by factor), with a linear ramp between.
    factor = float(scaling["factor"])
    original = _int(scaling, "original_max_position_embeddings")
    beta_fast = _real(scaling, "beta_fast", default=32.0)
    beta_slow = _real(scaling, "beta_slow", default=1.0)
    truncate = scaling.get("truncate")
    truncate = True if truncate is None else check_flag("scaling['truncate']", truncate)

    def correction_dim(rotations: float) -> float:
        return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # as Hugging Face: avoid a zero-width ramp
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolate (original frequency), 0: interpolate
    return (inv_freq / factor) * (1.0 - keep) + inv_freq * keep


def _llama3(inv_freq: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    # Llama 3.1: wavelengths longer than original/low_freq_factor are divided
    # by factor, shorter than original/high_freq_factor kept, smooth between.
    factor = float(scaling["factor"])
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    original = _int(scaling, "original_max_position_embeddings")
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < original / high) & ~(wavelen > original / low)
    return np.where(medium, smoothed, scaled)


def attention_factor(scaling: Mapping[str, Any]) -> float:
    """Multiplier of the rotated q and k: YaRN's ``attention_factor`` (1 for the other types)."""
    if scaling_type(scaling) != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if m and m_all:
        return mscale(factor, float(m)) / mscale(factor, float(m_all))
    return mscale(factor)
