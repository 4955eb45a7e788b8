"""A small decoder-only language model whose only variable is the position encoding.

Byte-level (vocabulary 256), pre-LayerNorm blocks, GELU MLP, tied input and
output embeddings, no dropout.  Attention is :class:`wavepe.nn.PositionalAttention`
(so the public ops, compiled where available).  There are no learned position
parameters in any variant, so models built from the same seed start from the
same weights and differ only in how attention sees positions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..._validate import check_int, check_real
from ...config import RopeConfig, WaveletConfig
from ...nn import POS_ENCS, PositionalAttention
from ...pos_enc import canonical_pos_enc


@dataclass
class LMConfig:
    """Shape and position encoding of :class:`TinyLM`.

    Field names follow Hugging Face's (``num_attention_heads``, ``head_dim``, …)
    so that :mod:`wavepe.analysis` reads both kinds of model the same way.

    ``wavelet_n_scales``: the wavelet grid is ``WaveletConfig.grid(head_dim,
    n_scales)`` — scales 2^0 … 2^(n_scales-1) × shifts 0 … head_dim/n_scales-1.
    The default 8 is the paper's rule; with head_dim 32 that is 8 scales ×
    4 shifts, the largest scale (128) matching the default training length.
    """

    vocab_size: int = 256
    hidden_size: int = 128
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    head_dim: int = 32
    intermediate_size: int = 512
    pos_enc: str = "wavelet"
    rope_theta: float = 10000.0
    rope_layout: str = "half"
    wavelet_n_scales: int = 8
    wavelet_family: str = "ricker"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                     "intermediate_size", "wavelet_n_scales"):
            check_int(name, getattr(self, name), min_value=1)
        # old checkpoints may say "none" (read as "nope", with a DeprecationWarning)
        self.pos_enc = canonical_pos_enc(self.pos_enc, POS_ENCS, stacklevel=4)
        check_real("rope_theta", self.rope_theta, positive=True)

    @property
    def num_key_value_heads(self) -> int:
        return self.num_attention_heads

    def wavelet_config(self) -> WaveletConfig:
        return WaveletConfig.grid(self.head_dim, self.wavelet_n_scales, self.wavelet_family)

    def rope_config(self) -> RopeConfig:
        return RopeConfig(self.rope_theta, layout=self.rope_layout)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LMConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.hidden_size)
        self.self_attn = PositionalAttention(
            cfg.hidden_size, cfg.num_attention_heads, cfg.pos_enc, head_dim=cfg.head_dim,
            wavelet_config=cfg.wavelet_config() if cfg.pos_enc == "wavelet" else None,
            rope_config=cfg.rope_config() if cfg.pos_enc == "rope" else None)
        self.ln_mlp = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.intermediate_size), nn.GELU(),
                                 nn.Linear(cfg.intermediate_size, cfg.hidden_size))

    def forward(self, x: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        x = x + self.self_attn(self.ln_attn(x), position_offset)
        return x + self.mlp(self.ln_mlp(x))


class TinyLM(nn.Module):
    """Decoder-only LM: ``forward(ids (B, L) int64) -> logits (B, L, vocab)``."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.config = cfg
        self.meta: dict[str, Any] = {}
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.ln_f = nn.LayerNorm(cfg.hidden_size)
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2's scheme: N(0, 0.02), residual output projections shrunk by
        # 1/sqrt(2·layers) so that the residual stream's variance does not grow with depth.
        residual_std = 0.02 / math.sqrt(2 * self.config.num_hidden_layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = residual_std if name.endswith(("o_proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.int64:
            desc = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must be an int64 tensor (B, L), got {desc}")
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, position_offset)
        return self.ln_f(x) @ self.embed.weight.t()

    def attention_modules(self) -> list[PositionalAttention]:
        return [layer.self_attn for layer in self.layers]

    def set_rope(self, rope_config: RopeConfig) -> None:
        """Use ``rope_config`` (another θ, p-RoPE fraction, …) in every layer from now on."""
        if self.config.pos_enc != "rope":
            raise ValueError(f"set_rope needs a RoPE model, this one has pos_enc={self.config.pos_enc!r}")
        for attn in self.attention_modules():
            attn.rope_config = rope_config

    @torch.no_grad()
    def attention_probs(self, ids: torch.Tensor, layer: int = -1) -> torch.Tensor:
        """Softmax attention weights (B, H, L, L) of one layer (analysis only: L×L)."""
        x = self.embed(ids)
        layers = list(self.layers)
        target = range(len(layers))[layer]
        for i, block in enumerate(layers):
            if i == target:
                return block.self_attn.attention_probs(block.ln_attn(x))
            x = block(x)
        raise AssertionError("unreachable")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save_model(model: TinyLM, path: str, meta: dict[str, Any] | None = None) -> None:
    """Checkpoint: config, weights and ``meta`` (e.g. the training length) in one file.

    Plain tensors and JSON-like values only, so ``torch.load(weights_only=True)`` reads it.
    """
    torch.save({"format": "wavepe.TinyLM/1", "config": model.config.to_dict(), "state_dict": model.state_dict(),
                "meta": dict(meta or {})}, path)


def load_model(path: str, map_location: str = "cpu") -> TinyLM:
    """A :func:`save_model` checkpoint, in eval mode; its ``meta`` dict is ``model.meta``."""
    blob = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(blob, dict) or blob.get("format") != "wavepe.TinyLM/1":
        raise ValueError(f"{path} is not a wavepe TinyLM checkpoint (written by `wavepe extrapolate`)")
    model = TinyLM(LMConfig.from_dict(blob["config"]))
    model.load_state_dict(blob["state_dict"])
    model.meta = dict(blob.get("meta", {}))
    return model.eval()
