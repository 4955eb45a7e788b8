"""PyTorch modules over wavepe's ops.

:class:`PositionalAttention` is causal multi-head self-attention whose position
encoding is one argument: ``"wavelet"``, ``"rope"``, ``"alibi"`` or ``"nope"``
(the names of :mod:`wavepe.pos_enc`).  Everything goes through the public ops (:func:`wavepe.ops.rope`,
:func:`wavepe.ops.wavelet_attention`), so it runs on the compiled kernels
wherever they exist.  The projections are named ``q_proj``/``k_proj``/
``v_proj``/``o_proj`` as in Hugging Face Llama, so the band analysis
(:mod:`wavepe.analysis`) reads both kinds of model the same way.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ._validate import check_flag, check_int
from .config import RopeConfig, WaveletConfig
from .pos_enc import canonical_pos_enc, scores_pos_enc

POS_ENCS: tuple[str, ...] = ("wavelet", "rope", "alibi", "nope")


def document_positions(cu_seqlens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Each position's offset inside its document (int64, (L,) for 1-D boundaries, else (B, L)).

    ``positions`` (L,) are positions of a packed row; ``cu_seqlens`` its
    document boundaries (n_docs + 1,) or (B, n_docs + 1), non-decreasing.
    On the device, no host sync: the document of position p starts at the
    last boundary <= p.
    """
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dim() not in (1, 2) or cu_seqlens.shape[-1] < 2:
        raise ValueError("cu_seqlens must be (n_docs + 1,) or (B, n_docs + 1) with at least 2 boundaries, got "
                         f"shape {tuple(cu_seqlens.shape)}")
    cu = cu_seqlens.to(device=positions.device, dtype=torch.int64)
    pos = positions.to(torch.int64)
    if cu.dim() == 2:
        pos = pos.expand(cu.shape[0], pos.shape[0]).contiguous()
    # index of the document holding p: the number of boundaries cu[1:] <= p (empty documents skipped)
    doc = torch.searchsorted(cu[..., 1:].contiguous(), pos, right=True).clamp_(max=cu.shape[-1] - 2)
    return pos - cu.gather(-1, doc)


@torch.compiler.assume_constant_result
def _autocast_available(device_type: str) -> bool:
    """Whether torch has autocast for a device type: a constant, so torch.compile takes it from one eager call
    while tracing (torch 2.10-2.11's Dynamo refuses to trace torch.amp.is_autocast_available itself)."""
    return torch.amp.is_autocast_available(device_type)


class PositionalAttention(nn.Module):
    """Causal multi-head self-attention with a wavepe position encoding.

    Args:
        hidden_size: model width D.
        num_heads: H query heads; ``head_dim`` defaults to D / H.
        pos_enc: "wavelet" (the paper's relative wavelets, ``wavelet_config``,
            default ``WaveletConfig.grid(head_dim)``), "rope" (``rope_config``,
            default θ = 10^4, layout "half"), "alibi" (standard slopes) or
            "nope" (NoPE; "none" is its old spelling).
        num_kv_heads: H_kv key/value heads (GQA), a divisor of H; default H.
        bias: whether the projections have biases.
        window: sliding window (Mistral's rule: a token sees the ``window - 1``
            tokens before it and itself); None: the whole causal past.  The
            fused kernel skips what lies outside it: cost grows with L * window.
        softcap: attention-logit soft-cap c (Gemma 2): scores become
            ``c * tanh(s / c)``; None: none.

    ``rope_config`` is a plain attribute: assign ``attn.rope_config =
    cfg.with_theta(4096)`` to evaluate at another θ (or another p-RoPE
    fraction) without retraining.  So is ``context_parallel``: assign a
    :class:`wavepe.distributed.ContextParallel` and the module takes this
    rank's chunk of a sequence split over a process group (its positions from
    the group's layout) and attends over the whole sequence.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        pos_enc: str = "wavelet",
        *,
        head_dim: int | None = None,
        num_kv_heads: int | None = None,
        wavelet_config: WaveletConfig | None = None,
        rope_config: RopeConfig | None = None,
        bias: bool = False,
        window: int | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        from .ops.attention import check_softcap, check_window

        hidden_size = check_int("hidden_size", hidden_size, min_value=1)
        bias = check_flag("bias", bias)
        self.window: int | None = check_window(window) or None
        self.softcap: float | None = check_softcap(softcap) or None
        num_heads = check_int("num_heads", num_heads, min_value=1)
        if head_dim is None:
            if hidden_size % num_heads:
                raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; "
                                 "pass head_dim")
            head_dim = hidden_size // num_heads
        head_dim = check_int("head_dim", head_dim, min_value=1)
        num_kv_heads = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads, min_value=1)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
        self.pos_enc = canonical_pos_enc(pos_enc, POS_ENCS)
        self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim = (
            hidden_size, num_heads, num_kv_heads, head_dim)
        self.wavelet_config: WaveletConfig | None = None
        self.rope_config: RopeConfig | None = None
        self.context_parallel: Any = None  # a wavepe.distributed.ContextParallel, or None
        if self.pos_enc == "wavelet":
            if wavelet_config is None:
                wavelet_config = WaveletConfig.grid(head_dim)
            if not isinstance(wavelet_config, WaveletConfig):
                raise TypeError(f"wavelet_config must be a WaveletConfig, got {type(wavelet_config).__name__}")
            if wavelet_config.head_dim != head_dim:
                raise ValueError(f"wavelet_config.head_dim={wavelet_config.head_dim} does not match "
                                 f"head_dim={head_dim}")
            self.wavelet_config = wavelet_config
        elif self.pos_enc == "rope":
            rope_config = RopeConfig() if rope_config is None else rope_config
            if not isinstance(rope_config, RopeConfig):
                raise TypeError(f"rope_config must be a RopeConfig, got {type(rope_config).__name__}")
            rope_config.check_head_dim(head_dim)
            self.rope_config = rope_config
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=bias)

    def extra_repr(self) -> str:
        enc = {"wavelet": self.wavelet_config, "rope": self.rope_config}.get(self.pos_enc)
        return (f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, pos_enc={self.pos_enc!r}" + (f", {enc!r}" if enc is not None else "")
                + (f", window={self.window}" if self.window else "") + (f", softcap={self.softcap}" if self.softcap else "")
                + (f", {self.context_parallel!r}" if self.context_parallel is not None else ""))

    def _qkv(self, x: torch.Tensor, position_offset: int | torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.hidden_size:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be (B, L, hidden_size={self.hidden_size}), got {shape}")
        b, length, _ = x.shape
        q = self.q_proj(x).view(b, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        device_type = q.device.type
        if _autocast_available(device_type) and torch.is_autocast_enabled(device_type):  # meta: none
            # autocast covers torch's ops, not wavepe's custom ops: these receive q, k, v as they are, so
            # put all three in the autocast dtype (nn.Linear already does, unless a hook or subclass changed it)
            dtype = torch.get_autocast_dtype(device_type)
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        if self.pos_enc == "rope":
            from .ops import rope

            assert self.rope_config is not None
            q, k = rope(q, k, position_offset, self.rope_config)
        return q, k, v

    def forward(self, x: torch.Tensor, position_offset: int = 0, *,
                cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) at positions ``position_offset … position_offset+L-1`` -> (B, L, D).

        With ``context_parallel`` set, x is this rank's chunk (B, L/P, D) and
        the positions are its global ones (plus ``position_offset``).

        ``cu_seqlens``: packed documents (padding-free batches; flash-attn's
        boundaries ``0 = cu[0] <= ... <= cu[-1] = L``, int32/int64,
        (n_docs + 1,) for B = 1 or (B, n_docs + 1); with ``context_parallel``,
        the global boundaries of the whole sequence).  Each document is
        attended as if alone: its tokens see only its own, and positions
        (RoPE's, the wavelets' and ALiBi's distances) restart at 0 (plus
        ``position_offset``) at each document, computed on the device (no
        host sync).
        """
        from .ops import wavelet_attention

        kind = scores_pos_enc(self.pos_enc)
        cp = self.context_parallel
        offset = check_int("position_offset", position_offset)
        if cp is None:
            positions: int | torch.Tensor = offset
            if cu_seqlens is not None and self.pos_enc == "rope":
                positions = document_positions(cu_seqlens, torch.arange(x.shape[1], device=x.device)) + offset
            q, k, v = self._qkv(x, positions)
            out = wavelet_attention(q, k, v, self.wavelet_config, pos_enc=kind, causal=True, cu_seqlens=cu_seqlens,
                                    window=self.window, softcap=self.softcap)
        else:
            positions = cp.positions(x.shape[1], x.device)
            if cu_seqlens is not None:
                positions = document_positions(cu_seqlens, positions)
            q, k, v = self._qkv(x, positions + offset)
            out = cp.attention(q, k, v, self.wavelet_config, pos_enc=kind, causal=True, cu_seqlens=cu_seqlens,
                               window=self.window, softcap=self.softcap)
        b, _, length, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, length, self.num_heads * self.head_dim))

    @torch.no_grad()
    def attention_probs(self, x: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        """The softmax attention weights (B, H, L, L) of :meth:`forward`, for plots.

        Materialises L×L per head (analysis only; :meth:`forward` does not).
        """
        if self.context_parallel is not None:
            raise ValueError("attention_probs needs the whole sequence on one process; set context_parallel=None")
        from .ops import alibi_bias, wavelet_bias

        q, k, _ = self._qkv(x, position_offset)
        rep = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        length = q.shape[2]
        scale = 1.0 / math.sqrt(self.head_dim)
        scores = q @ k.transpose(-1, -2)
        if self.pos_enc == "wavelet":
            scores = scores + wavelet_bias(q, self.wavelet_config, causal=True)
        scores = scores * scale
        if self.pos_enc == "alibi":
            scores = scores + alibi_bias(self.num_heads, length, dtype=scores.dtype, device=scores.device)
        if self.softcap:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        hidden = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        if self.window:
            hidden |= torch.ones(length, length, dtype=torch.bool, device=x.device).tril(-self.window)
        return scores.masked_fill(hidden, float("-inf")).softmax(dim=-1)
