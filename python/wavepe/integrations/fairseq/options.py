"""The plugin's command-line options, turned into validated wavepe configs.

Pure Python (NumPy only): no fairseq, no torch, so the option logic is tested
in any environment.  fairseq stores the raw option values in the checkpoint
(``cfg.model``); :meth:`PositionSpec.from_args` rebuilds the same configs from
them, so ``fairseq-eval-lm`` gets exactly the model that was trained.

Options (``--name`` on the command line, ``name`` with underscores in the
checkpoint and in ``--model-overrides``):

``--pos-enc``
    ``wavelet`` (default), ``rope``, ``alibi``, ``sinusoidal`` (fairseq's
    absolute sinusoidal embedding) or ``nope``.
``--wavelet-family``
    ``ricker`` (default), ``gaussian``, ``morlet`` or ``haar``.
``--wavelet-grid S`` or ``SxB``
    S scales 2^0 … 2^(S-1) times B shifts 0 … B-1 with S·B = head dim
    (default S = 8, B = head_dim / 8: the paper's grid for head dim 128).
``--wavelet-scales a1,a2,…`` / ``--wavelet-shifts b1,b2,…``
    explicit scale / shift values of the grid (scale-major: dimension
    ``j = s·B + b`` carries scale ``a_s`` and shift ``b_b``); a list fixes the
    count of its axis, the other count is head_dim divided by it.
``--wavelet-normalize``
    multiply each wavelet by 1/sqrt(a) (eq. 1 of the paper; default eq. 8).
``--rope-theta``
    RoPE base θ (default 10000; the base-expansion paper trains with θ = L_train).
``--rope-inference-theta``
    θ used whenever the model is not training (validation, ``fairseq-eval-lm``);
    default: ``--rope-theta``.
``--rope-fraction``
    p-RoPE: rotate only the ceil(r·d/2) highest-frequency pairs (default 1).
``--attention-window W``
    sliding window (every encoding): a token sees the W - 1 tokens before it
    and itself (Mistral's rule); the fused kernel skips the rest, so cost grows
    with L·W.  Default: the whole causal past.
``--attention-softcap C``
    attention-logit soft-cap (Gemma 2): scores become C·tanh(s / C).

Options that belong to another ``--pos-enc`` than the one chosen are errors,
not silently ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validate import check_flag
from ...config import WAVELET_FAMILIES, RopeConfig, WaveletConfig
from ...pos_enc import canonical_pos_enc, scores_pos_enc

#: the encodings of --pos-enc (wavepe.pos_enc is the vocabulary)
POS_ENCS: tuple[str, ...] = ("wavelet", "rope", "alibi", "sinusoidal", "nope")
DEFAULT_WAVELET_SCALES = 8
DEFAULT_ROPE_THETA = 10000.0
ROPE_LAYOUT = "half"

#: options that only mean something for one --pos-enc (attribute name -> pos-enc)
_OWNED_OPTIONS: dict[str, str] = {
    "wavelet_grid": "wavelet",
    "wavelet_scales": "wavelet",
    "wavelet_shifts": "wavelet",
    "rope_theta": "rope",
    "rope_inference_theta": "rope",
    "rope_fraction": "rope",
}


def flag(attr: str) -> str:
    """The command-line spelling of a config attribute: ``rope_theta`` -> ``--rope-theta``."""
    return "--" + attr.replace("_", "-")


def _get(args: Any, attr: str, default: Any = None) -> Any:
    """Read an option from an argparse Namespace, an omegaconf DictConfig or a dict."""
    if isinstance(args, dict):
        return args.get(attr, default)
    return getattr(args, attr, default)


def parse_value_list(attr: str, text: Any) -> np.ndarray:
    """``"1,2,4"`` (or a sequence of numbers) -> float64 array; errors name the option."""
    if isinstance(text, str):
        parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"{flag(attr)} must be a comma-separated list of numbers, got {text!r}") from None
    elif isinstance(text, (list, tuple)):
        values = [float(v) for v in text]
    else:
        raise TypeError(f"{flag(attr)} must be a comma-separated list of numbers, got {text!r}")
    if not values:
        raise ValueError(f"{flag(attr)} must list at least one value, got {text!r}")
    arr = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{flag(attr)} must be finite, got {text!r} (entry {int(bad[0])})")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{flag(attr)} lists a value twice: {text!r}")
    return arr


def parse_grid(text: Any) -> tuple[int, int | None]:
    """``"8"`` -> (8, None); ``"8x16"`` -> (8, 16)."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise TypeError(f"--wavelet-grid must be 'S' or 'SxB' (e.g. 8 or 8x16), got {text!r}")
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX*]\s*(\d+)\s*)?", text)
    if m is None:
        raise ValueError(f"--wavelet-grid must be 'S' or 'SxB' (e.g. 8 or 8x16), got {text!r}")
    n_scales = int(m.group(1))
    n_shifts = int(m.group(2)) if m.group(2) is not None else None
    if n_scales < 1 or (n_shifts is not None and n_shifts < 1):
        raise ValueError(f"--wavelet-grid sizes must be >= 1, got {text!r}")
    return n_scales, n_shifts


def _axis_count(name: str, known: int | None, other: int | None, head_dim: int) -> int | None:
    """The count of one grid axis given the other's, or None when neither is known."""
    if known is not None:
        return known
    if other is None:
        return None
    if head_dim % other:
        raise ValueError(f"head dim {head_dim} is not divisible by the {other} wavelet "
                         f"{'shifts' if name == 'scales' else 'scales'}; the grid needs S*B = head dim")
    return head_dim // other


def wavelet_config(head_dim: int, *, family: str = "ricker", grid: Any = None, scales: Any = None,
                   shifts: Any = None, normalize: bool = False) -> WaveletConfig:
    """The wavelet configuration the options describe, for one attention head of ``head_dim``.

    Dimension ``j = s * B + b`` carries scale ``scale_values[s]`` and shift
    ``shift_values[b]`` (scale-major, as :meth:`WaveletConfig.grid`).
    """
    if family not in WAVELET_FAMILIES:
        raise ValueError(f"--wavelet-family must be one of {', '.join(WAVELET_FAMILIES)}; got {family!r}")
    grid_s, grid_b = parse_grid(grid) if grid is not None else (None, None)
    scale_values = parse_value_list("wavelet_scales", scales) if scales is not None else None
    shift_values = parse_value_list("wavelet_shifts", shifts) if shifts is not None else None
    if scale_values is not None and np.any(scale_values <= 0):
        raise ValueError(f"--wavelet-scales must all be > 0, got {scales!r}")
    if scale_values is not None and grid_s is not None and grid_s != scale_values.size:
        raise ValueError(f"--wavelet-grid={grid!r} has {grid_s} scales but --wavelet-scales lists "
                         f"{scale_values.size}: {scales!r}")
    if shift_values is not None and grid_b is not None and grid_b != shift_values.size:
        raise ValueError(f"--wavelet-grid={grid!r} has {grid_b} shifts but --wavelet-shifts lists "
                         f"{shift_values.size}: {shifts!r}")
    n_s = grid_s if grid_s is not None else (scale_values.size if scale_values is not None else None)
    n_b = grid_b if grid_b is not None else (shift_values.size if shift_values is not None else None)
    if n_s is None and n_b is None:
        n_s = DEFAULT_WAVELET_SCALES
        if head_dim % n_s:
            raise ValueError(f"head dim {head_dim} (decoder embed dim / attention heads) is not divisible by the "
                             f"default {n_s} wavelet scales; choose a grid with --wavelet-grid SxB, S*B = {head_dim}")
    n_s = _axis_count("scales", n_s, n_b, head_dim)
    n_b = _axis_count("shifts", n_b, n_s, head_dim)
    assert n_s is not None and n_b is not None
    if n_s * n_b != head_dim:
        raise ValueError(f"the wavelet grid has {n_s} scales x {n_b} shifts = {n_s * n_b} dimensions but the "
                         f"head dim (decoder embed dim / attention heads) is {head_dim}")
    if scale_values is None:
        scale_values = 2.0 ** np.arange(n_s, dtype=np.float64)
    if shift_values is None:
        shift_values = np.arange(n_b, dtype=np.float64)
    return WaveletConfig(family, np.repeat(scale_values, n_b), np.tile(shift_values, n_s),
                         normalize=check_flag("--wavelet-normalize", normalize))


def rope_config(theta: Any, fraction: Any, *, attr: str = "rope_theta") -> RopeConfig:
    """A :class:`RopeConfig` whose errors name the command-line option."""
    theta = DEFAULT_ROPE_THETA if theta is None else theta
    fraction = 1.0 if fraction is None else fraction
    for name, value in ((attr, theta), ("rope_fraction", fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
            raise ValueError(f"{flag(name)} must be a number, got {value!r}")
    if not float(theta) > 1.0 or math.isinf(float(theta)):
        raise ValueError(f"{flag(attr)} must be a finite number > 1, got {theta!r}")
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"--rope-fraction must be in [0, 1], got {fraction!r}")
    return RopeConfig(float(theta), float(fraction), layout=ROPE_LAYOUT)


def attention_limits(window: Any, softcap: Any) -> tuple[int | None, float | None]:
    """(--attention-window, --attention-softcap) checked: an int >= 1 and a finite number > 0, or None."""
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or int(window) < 1:
            raise ValueError(f"--attention-window must be an integer >= 1, got {window!r}")
        window = int(window)
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not 0 < float(softcap) < math.inf:
            raise ValueError(f"--attention-softcap must be a finite number > 0, got {softcap!r}")
        softcap = float(softcap)
    return window, softcap


@dataclass(frozen=True)
class PositionSpec:
    """What the attention layers need to know about the position encoding.

    ``wavelet`` is set for ``pos_enc="wavelet"``; ``rope`` (training) and
    ``rope_inference`` (whenever the model is not training) for ``"rope"``.
    """

    pos_enc: str
    head_dim: int
    wavelet: WaveletConfig | None = None
    rope: RopeConfig | None = None
    rope_inference: RopeConfig | None = None
    window: int | None = None      # --attention-window
    softcap: float | None = None   # --attention-softcap

    @property
    def kernel_pos_enc(self) -> str:
        """The ``pos_enc`` of :func:`wavepe.ops.wavelet_attention` for this encoding."""
        return scores_pos_enc(self.pos_enc)

    @property
    def absolute_embeddings(self) -> bool:
        """Whether the decoder keeps fairseq's (sinusoidal) absolute position embeddings."""
        return self.pos_enc == "sinusoidal"

    def rope_for(self, training: bool) -> RopeConfig | None:
        return self.rope if training else self.rope_inference

    @classmethod
    def from_args(cls, args: Any, head_dim: int) -> "PositionSpec":
        """Validate the options in ``args`` (Namespace, DictConfig or dict) for heads of ``head_dim``.

        Raises ValueError naming the option and showing its value.
        """
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
            raise ValueError(f"head dim must be a positive integer, got {head_dim!r}")
        pos_enc = _get(args, "pos_enc", "wavelet")
        pos_enc = "wavelet" if pos_enc is None else str(pos_enc)
        pos_enc = canonical_pos_enc(pos_enc, POS_ENCS, name="--pos-enc")
        for attr, owner in _OWNED_OPTIONS.items():
            value = _get(args, attr)
            if value is not None and owner != pos_enc:
                raise ValueError(f"{flag(attr)}={value!r} only applies to --pos-enc {owner}, "
                                 f"but --pos-enc is {pos_enc}")
        window, softcap = attention_limits(_get(args, "attention_window"), _get(args, "attention_softcap"))
        limits = {"window": window, "softcap": softcap}
        normalize = _get(args, "wavelet_normalize", None)
        normalize = False if normalize is None else check_flag("--wavelet-normalize", normalize)
        if normalize and pos_enc != "wavelet":
            raise ValueError(f"--wavelet-normalize only applies to --pos-enc wavelet, but --pos-enc is {pos_enc}")
        if pos_enc == "wavelet":
            family = _get(args, "wavelet_family", "ricker") or "ricker"
            cfg = wavelet_config(head_dim, family=str(family), grid=_get(args, "wavelet_grid"),
                                 scales=_get(args, "wavelet_scales"), shifts=_get(args, "wavelet_shifts"),
                                 normalize=normalize)
            return cls(pos_enc, head_dim, wavelet=cfg, **limits)
        if pos_enc == "rope":
            if head_dim % 2:
                raise ValueError(f"--pos-enc rope needs an even head dim (decoder embed dim / attention heads), "
                                 f"got {head_dim}")
            theta = _get(args, "rope_theta")
            fraction = _get(args, "rope_fraction")
            train = rope_config(theta, fraction)
            inference_theta = _get(args, "rope_inference_theta")
            infer = train if inference_theta is None else rope_config(inference_theta, fraction,
                                                                      attr="rope_inference_theta")
            return cls(pos_enc, head_dim, rope=train, rope_inference=infer, **limits)
        return cls(pos_enc, head_dim, **limits)
