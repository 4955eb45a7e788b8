"""Frequency-band analysis of RoPE (docs/research.md, "Frequency-band analysis").

Prediction from θ and the training length alone:

* ``V(x) = 1/2 + sin(2x)/(4x) - (sin x / x)^2`` is the variance of ``cos(ω t)``
  over positions t uniform in [0, L_train] with ``x = ω·L_train``: how fully a
  rotation pair of frequency ω sweeps its circle during training.
  :func:`x_star` is its first positive maximiser, found numerically.
* :func:`band_dimension` — the pair whose frequency puts it at x*:
  ``j* = round((d/2)·log_θ(L_train / x*))``.

Measurement on a model (Hugging Face Llama or any model with ``q_proj`` /
``k_proj`` linears and a config with ``num_attention_heads`` / ``head_dim``,
such as :class:`wavepe.experiments.TinyLM`):

* :func:`capture_projections` reads the queries (or keys) through forward hooks
  on the projections.  A rotation preserves the length of each pair, so
  ``‖q_i‖₂`` is the same before and after RoPE: no need to know how (or by
  which implementation, wavepe's shim or not) the model applies RoPE.
* :func:`measure_band` — per head and position the pair with the largest
  ``‖q_i‖₂``; the most frequent pair over positions per head; averaged over
  heads and layers: ``i_band`` and ``i_band / (d/2)``.
* :func:`p_rope` — RoPE kept on the top fraction r of pairs (highest
  frequencies) of a trained model, without retraining; its perplexity sweep
  is :func:`wavepe.research.experiments.evaluate.p_rope_sweep` (evaluation
  belongs to the experiments, which use this module -- not the other way).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from .._validate import check_choice, check_int, check_real
from ..config import ROPE_LAYOUTS

__all__ = [
    "variance_of_cos",
    "variance_of_cos_derivative",
    "x_star",
    "band_dimension",
    "recommended_theta",
    "theta_for_band",
    "pair_norms",
    "BandMeasurement",
    "measure_band",
    "capture_projections",
    "measure_model_band",
    "p_rope",
    "P_ROPE_FRACTIONS",
]

P_ROPE_FRACTIONS: tuple[float, ...] = (1.0, 0.9, 0.75, 0.5, 0.25)


# ---------------------------------------------------------------------------
# Prediction: V(x), x*, j*


def _series(x: float, derivative: bool) -> float:
    """V (or V') from V(x) = Σ_{k≥2} (-1)^k (k-1) (2x)^(2k) / (2k+2)!, for |x| < 1.

    The closed forms subtract O(1/x) terms to get O(x^4) (O(x^3) for V'): near 0
    they lose every digit, the series loses none.  Terms shrink by ≥ 4x²/((2k+3)(2k+4)).
    """
    total = 0.0
    k = 2
    while True:
        if derivative:
            term = (-1) ** k * (k - 1) * 2 * k * 4.0 ** k * x ** (2 * k - 1) / math.factorial(2 * k + 2)
        else:
            term = (-1) ** k * (k - 1) * (2.0 * x) ** (2 * k) / math.factorial(2 * k + 2)
        total += term
        if abs(term) <= 1e-18 * abs(total) or term == 0.0:
            return total
        k += 1


def variance_of_cos(x: float) -> float:
    """V(x) = 1/2 + sin(2x)/(4x) - (sin x / x)^2, with V(0) = 0 (its limit)."""
    x = check_real("x", x)
    if abs(x) < 1.0:
        return _series(x, derivative=False)
    s = math.sin(x) / x
    return 0.5 + math.sin(2.0 * x) / (4.0 * x) - s * s


def variance_of_cos_derivative(x: float) -> float:
    """V'(x) = (2x cos 2x - sin 2x)/(4x^2) - 2 (sin x / x)(x cos x - sin x)/x^2."""
    x = check_real("x", x)
    if abs(x) < 1.0:
        return _series(x, derivative=True)
    s = math.sin(x) / x
    return ((2.0 * x * math.cos(2.0 * x) - math.sin(2.0 * x)) / (4.0 * x * x)
            - 2.0 * s * (x * math.cos(x) - math.sin(x)) / (x * x))


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of f in [lo, hi] with f(lo) > 0 > f(hi), to the last representable bit.

    Plain bisection: each step halves the bracket, so it ends when the midpoint
    is no longer strictly inside (adjacent doubles) — about 50 steps here.
    """
    f_lo, f_hi = f(lo), f(hi)
    if not (f_lo > 0 > f_hi):
        raise ValueError(f"root not bracketed: f({lo})={f_lo}, f({hi})={f_hi}")
    while True:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        f_mid = f(mid)
        if f_mid == 0.0:
            return mid
        if f_mid > 0:
            lo = mid
        else:
            hi = mid
    return lo if abs(f(lo)) <= abs(f(hi)) else hi


_X_STAR: float | None = None


def x_star() -> float:
    """The first positive maximiser of V(x), found numerically (≈ 3.657).

    V rises from V(0) = 0; scan V' on a grid of step 1/64 until it turns
    negative (the first sign change from + to - is the first maximum), then
    bisect V' = 0 on that bracket to full double precision.
    """
    global _X_STAR
    if _X_STAR is None:
        step = 1.0 / 64.0
        lo = step
        if not variance_of_cos_derivative(lo) > 0:
            raise AssertionError("V must increase near 0")
        hi = lo + step
        while variance_of_cos_derivative(hi) > 0:
            lo, hi = hi, hi + step
            if hi > 100.0:  # V' does change sign below 5; guard against a broken V'
                raise AssertionError("no maximum of V found below x = 100")
        _X_STAR = _bisect(variance_of_cos_derivative, lo, hi)
    return _X_STAR


def band_dimension(theta: float, train_len: float, head_dim: int) -> int:
    """Predicted band pair ``j* = round((d/2)·log_θ(L_train / x*))``.

    Pair j rotates at ω_j = θ^(-2j/d); j* is the pair with ω_j·L_train = x*,
    rounded to the nearest pair.  The value is not clipped: j* < 0 means every
    pair rotates past x* during training (θ or L_train tiny), j* ≥ d/2 that
    none does (the band lies below the lowest frequency).
    """
    theta = check_real("theta", theta, positive=True)
    if theta <= 1.0:
        raise ValueError(f"theta must be > 1, got {theta}")
    train_len = check_real("train_len", train_len, positive=True)
    head_dim = check_int("head_dim", head_dim, min_value=2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (pairs of dimensions), got {head_dim}")
    return int(round((head_dim / 2) * math.log(train_len / x_star()) / math.log(theta)))


def recommended_theta(train_len: float) -> float:
    """θ to train with for a training length: ``θ = L_train``.

    Why: the base-expansion analysis shows that a large training θ leaves the
    low-frequency pairs almost still during training (their V(x) ≈ 0), so
    positions past L_train rotate them into angles never seen; θ = L_train is
    the smallest base for which even the lowest pair turns by about
    L_train^(2/d) rad (≈ 1.4 rad for L=128, d=32) — the band j* then sits near
    the top of the spectrum, ``(d/2)(1 - ln x*/ln L_train)``.  Raise θ only at
    inference (e.g. θ = the evaluation length), never for training.
    """
    train_len = check_real("train_len", train_len, positive=True)
    if train_len <= 1.0:
        raise ValueError(f"train_len must be > 1, got {train_len}")
    return float(train_len)


def theta_for_band(train_len: float, head_dim: int, pair: float) -> float:
    """The θ that puts the predicted band exactly at ``pair`` (inverse of j*, unrounded).

    ``θ = (L_train / x*)^(d / (2·pair))``, for 0 < pair; e.g. ``pair = d/2 - 1``
    puts the band on the lowest-frequency pair.
    """
    train_len = check_real("train_len", train_len, positive=True)
    head_dim = check_int("head_dim", head_dim, min_value=2)
    pair = check_real("pair", pair, positive=True)
    ratio = train_len / x_star()
    if ratio <= 1.0:
        raise ValueError(f"train_len={train_len} must exceed x*={x_star():.4f} for a band to exist")
    return float(ratio ** (head_dim / (2.0 * pair)))


# ---------------------------------------------------------------------------
# Measurement


def pair_norms(x: Any, layout: str = "half") -> np.ndarray:
    """‖x_i‖₂ of every rotation pair: (..., d) -> (..., d/2), float64 NumPy.

    ``layout`` "half" pairs (i, i + d/2) (Hugging Face Llama, wavepe's default),
    "interleaved" pairs (2i, 2i + 1).
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    arr = _to_numpy(x)
    d = arr.shape[-1] if arr.ndim else 0
    if arr.ndim == 0 or d < 2 or d % 2:
        raise ValueError(f"x must have an even last dimension (head_dim), got shape {arr.shape}")
    if layout == "half":
        a, b = arr[..., : d // 2], arr[..., d // 2:]
    else:
        a, b = arr[..., 0::2], arr[..., 1::2]
    return np.sqrt(a * a + b * b)


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


@dataclass
class BandMeasurement:
    """Measured frequency band of a model.

    Attributes:
        i_band: the band pair averaged over heads and layers.
        fraction: ``i_band / (d/2)``.
        per_head: (layers, heads) the most frequent band pair of each head.
        mean_norms: (layers, heads, positions, d/2) ‖q_i‖₂ averaged over the batch.
        head_dim: d.
    """

    i_band: float
    fraction: float
    per_head: np.ndarray
    mean_norms: np.ndarray
    head_dim: int

    def to_dict(self) -> dict[str, Any]:
        return {"i_band": self.i_band, "fraction": self.fraction, "per_head": self.per_head.tolist(),
                "head_dim": self.head_dim}


def measure_band(x: Any, layout: str = "half") -> BandMeasurement:
    """Band of queries (or keys) ``x`` of shape (layers, B, H, L, d) or (B, H, L, d).

    For each head and position (and batch row) the pair with the largest
    ‖x_i‖₂; per head the most frequent such pair (ties: the lower index);
    ``i_band`` is their mean over heads and layers.
    """
    arr = _to_numpy(x)
    if arr.ndim == 4:
        arr = arr[None]
    if arr.ndim != 5:
        raise ValueError(f"x must be (layers, B, H, L, d) or (B, H, L, d), got shape {arr.shape}")
    layers, batch, heads, length, d = arr.shape
    if batch * length == 0 or heads == 0 or layers == 0:
        raise ValueError(f"x has no positions to measure: shape {arr.shape}")
    norms = pair_norms(arr, layout)  # (layers, B, H, L, d/2)
    winners = norms.argmax(axis=-1)  # (layers, B, H, L)
    half = d // 2
    per_head = np.empty((layers, heads), dtype=np.int64)
    for layer in range(layers):
        for h in range(heads):
            per_head[layer, h] = int(np.bincount(winners[layer, :, h].ravel(), minlength=half).argmax())
    i_band = float(per_head.mean())
    return BandMeasurement(i_band, i_band / half, per_head, norms.mean(axis=1), d)


def _attention_shape(model: Any) -> tuple[int, int, int]:
    cfg = getattr(model, "config", None)
    heads = getattr(cfg, "num_attention_heads", None)
    if cfg is None or heads is None:
        raise TypeError("model must have a config with num_attention_heads (Hugging Face Llama, wavepe's TinyLM)")
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return int(heads), int(kv), int(head_dim)


def capture_projections(model: Any, ids: Any, which: str = "q") -> Any:
    """Queries (``which="q"``) or keys (``"k"``) of every layer: (layers, B, H, L, d).

    Reads the outputs of the modules named ``*.q_proj`` / ``*.k_proj`` through
    forward hooks during one forward pass on ``ids`` (B, L); values are
    before RoPE, which does not change pair norms.
    """
    import torch

    which = check_choice("which", which, ("q", "k"))
    heads, kv_heads, head_dim = _attention_shape(model)
    n_heads = heads if which == "q" else kv_heads
    suffix = f"{which}_proj"
    targets = [(name, mod) for name, mod in model.named_modules() if name.split(".")[-1] == suffix]
    if not targets:
        raise ValueError(f"model has no modules named '*.{suffix}' to read the {which} projections from")
    captured: list[torch.Tensor] = []

    def hook(_mod: Any, _inp: Any, out: torch.Tensor) -> None:
        b, length, _ = out.shape
        captured.append(out.detach().view(b, length, n_heads, head_dim).transpose(1, 2).float())

    handles = [mod.register_forward_hook(hook) for _, mod in targets]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    if len(captured) != len(targets):
        raise RuntimeError(f"expected {len(targets)} {suffix} calls in one forward pass, saw {len(captured)}")
    return torch.stack(captured)


def measure_model_band(model: Any, ids: Any, which: str = "q", layout: str = "half") -> BandMeasurement:
    """:func:`measure_band` of a model's queries (or keys) on ``ids`` (B, L)."""
    return measure_band(capture_projections(model, ids, which), layout)


# ---------------------------------------------------------------------------
# p-RoPE without retraining


@contextlib.contextmanager
def p_rope(model: Any, fraction: float) -> Iterator[int]:
    """Within the block, ``model`` rotates only the top ``fraction`` of its pairs.

    Keeps the ``ceil(fraction·d/2)`` highest-frequency pairs (the lowest
    indices) and leaves the rest unrotated, then restores the model.  Works on
    modules with a ``rope_config`` attribute (:class:`wavepe.nn.PositionalAttention`,
    so TinyLM) and on rotary modules with an ``inv_freq`` buffer (Hugging Face:
    pairs beyond the kept ones get frequency 0, i.e. angle 0, no rotation).
    Yields the number of rotating pairs.
    """
    import torch

    from ..config import RopeConfig

    fraction = check_real("fraction", fraction)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    restore: list[Callable[[], None]] = []
    kept = None
    try:
        for mod in model.modules():
            cfg = getattr(mod, "rope_config", None)
            if isinstance(cfg, RopeConfig):
                new = RopeConfig(cfg.theta, fraction, cfg.layout, cfg.scaling)
                kept = new.rotary_pairs(mod.head_dim)
                mod.rope_config = new
                restore.append(lambda mod=mod, cfg=cfg: setattr(mod, "rope_config", cfg))
            inv = getattr(mod, "inv_freq", None)
            if isinstance(inv, torch.Tensor) and inv.dim() == 1:
                half = inv.shape[0]
                kept = min(half, int(math.ceil(round(fraction * half, 9))))
                saved = inv.detach().clone()
                with torch.no_grad():
                    inv[kept:] = 0.0
                restore.append(lambda inv=inv, saved=saved: inv.data.copy_(saved))
        if kept is None:
            raise ValueError("model has no RoPE to restrict: no module with a RopeConfig `rope_config` "
                             "or an `inv_freq` buffer")
        yield kept
    finally:
        for undo in reversed(restore):
            undo()
