"""Settings of a patched attention: ``pos_enc`` and its configuration, and how they are chosen.

Stored in a model's config as ``config.wavepe = {"pos_enc", "wavelet", "rope"}`` (JSON).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..config import RopeConfig, WaveletConfig
from ..pos_enc import canonical_pos_enc

#: the encodings the shim runs (wavepe.pos_enc is the vocabulary)
POS_ENCS: tuple[str, ...] = ("wavelet", "rope", "alibi", "nope")
CONFIG_KEY = "wavepe"


class PosEncSettings:
    """What a patched attention does: ``pos_enc`` and its configuration.

    ``wavelet`` is set exactly for "wavelet"; ``rope`` is a RopeConfig for "rope" with
    another spectrum, or None for the model's own (its ``inv_freq`` and attention scaling).
    """

    __slots__ = ("pos_enc", "wavelet", "rope")

    def __init__(self, pos_enc: str, wavelet: WaveletConfig | None = None, rope: RopeConfig | None = None) -> None:
        self.pos_enc = pos_enc = canonical_pos_enc(pos_enc, POS_ENCS)
        if wavelet is not None and pos_enc != "wavelet":
            raise ValueError(f"wavelet= applies to pos_enc='wavelet' only, got pos_enc={pos_enc!r}")
        if rope is not None and pos_enc != "rope":
            raise ValueError(f"rope= applies to pos_enc='rope' only, got pos_enc={pos_enc!r}")
        self.wavelet = wavelet
        self.rope = rope

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form stored as ``config.wavepe``; inverse of :meth:`from_dict`."""
        return {"pos_enc": self.pos_enc,
                "wavelet": self.wavelet.to_dict() if self.wavelet is not None else None,
                "rope": self.rope.to_dict() if self.rope is not None else None}

    @classmethod
    def from_dict(cls, d: Any, where: str = "config.wavepe") -> "PosEncSettings":
        if not isinstance(d, Mapping):
            raise TypeError(f"{where} must be a dict with 'pos_enc', 'wavelet', 'rope', got {d!r}")
        unknown = sorted(set(d) - {"pos_enc", "wavelet", "rope"})
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; expected 'pos_enc', 'wavelet', 'rope'")
        pos_enc = canonical_pos_enc(d.get("pos_enc"), POS_ENCS, name=f"{where}['pos_enc']")
        wavelet = _as_wavelet(d.get("wavelet"), f"{where}['wavelet']")
        rope = _as_rope(d.get("rope"), f"{where}['rope']")
        return cls(pos_enc, wavelet, rope)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PosEncSettings) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.pos_enc, self.wavelet, self.rope))

    def __repr__(self) -> str:
        return f"PosEncSettings(pos_enc={self.pos_enc!r}, wavelet={self.wavelet!r}, rope={self.rope!r})"

    # configs hold locks and caches: copies go through the dict form
    def __reduce__(self) -> tuple:
        return (PosEncSettings.from_dict, (self.to_dict(),))


def _as_wavelet(value: Any, name: str) -> WaveletConfig | None:
    if value is None or isinstance(value, WaveletConfig):
        return value
    if isinstance(value, Mapping):
        return WaveletConfig.from_dict(value)
    raise TypeError(f"{name} must be a WaveletConfig, its to_dict() form or None, got {type(value).__name__}")


def _as_rope(value: Any, name: str) -> RopeConfig | None:
    if value is None or isinstance(value, RopeConfig):
        return value
    if isinstance(value, Mapping):
        return RopeConfig.from_dict(value)
    raise TypeError(f"{name} must be a RopeConfig, its to_dict() form or None, got {type(value).__name__}")


def choose_settings(pos_enc: str | None, wavelet: Any, rope: Any, stored: Any) -> PosEncSettings:
    """Explicit arguments first, then the settings stored in the config, then "wavelet" on the default grid."""
    wavelet = _as_wavelet(wavelet, "wavelet")
    rope = _as_rope(rope, "rope")
    saved = PosEncSettings.from_dict(stored) if stored is not None else None
    if pos_enc is None:
        if wavelet is not None and rope is not None:
            raise ValueError("pass either wavelet= or rope=, not both (they belong to different pos_enc)")
        if wavelet is not None:
            pos_enc = "wavelet"
        elif rope is not None:
            pos_enc = "rope"
        else:
            pos_enc = saved.pos_enc if saved is not None else "wavelet"
    pos_enc = canonical_pos_enc(pos_enc, POS_ENCS)
    if saved is not None and saved.pos_enc == pos_enc:
        wavelet = wavelet if wavelet is not None else saved.wavelet
        rope = rope if rope is not None else saved.rope
    return PosEncSettings(pos_enc, wavelet, rope)


def for_head_dim(settings: PosEncSettings, head_dim: int) -> PosEncSettings:
    """Fill in the default wavelet grid and check the configurations against the model's head_dim."""
    if settings.pos_enc == "wavelet":
        wavelet = settings.wavelet
        if wavelet is None:
            if head_dim % 8:
                raise ValueError(f"pos_enc='wavelet': the default grid has 8 scales and needs head_dim divisible by 8, "
                                 f"got head_dim={head_dim}; pass wavelet=WaveletConfig.grid({head_dim}, n_scales=...) "
                                 "or WaveletConfig(scales=..., shifts=...)")
            wavelet = WaveletConfig.grid(head_dim)
        elif wavelet.head_dim != head_dim:
            raise ValueError(f"wavelet.head_dim={wavelet.head_dim} does not match the model's head_dim={head_dim}")
        return PosEncSettings("wavelet", wavelet)
    if settings.pos_enc == "rope" and head_dim % 2:
        raise ValueError(f"pos_enc='rope' needs an even head_dim (pairs of dimensions), got head_dim={head_dim}")
    return settings
