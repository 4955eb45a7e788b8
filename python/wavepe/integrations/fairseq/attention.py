"""Causal self-attention for fairseq decoders that runs through wavepe's ops.

A drop-in for fairseq's ``MultiheadAttention`` in decoder self-attention: the
same parameters (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), the same
(T, B, C) calling convention and the same incremental-decoding buffer
(``prev_key`` / ``prev_value`` of shape (B, H, S, d), reordered by the inherited
``reorder_incremental_state`` during beam search), so fairseq's decoder layer,
``fairseq-eval-lm`` and ``fairseq-generate`` use it unchanged.

The attention itself is :func:`wavepe.ops.wavelet_attention` (fused: nothing of
size T×T is allocated by this module; fairseq's own T×T future mask is never
built, see :class:`wavepe.integrations.fairseq.model.WavepeDecoder`).  RoPE
rotates q and k with :func:`wavepe.ops.rope` before the cache, at absolute
positions ``past … past+T-1``.  Attention dropout (fairseq's
``--attention-dropout``, 0.1 in the WikiText-103 recipe) acts on the softmax
probabilities, which a fused kernel never holds: while it is active (training
with p > 0) the scores are formed explicitly from wavepe's bias ops
(``wavelet_bias`` / ``alibi_bias``) like fairseq's own attention does; at
evaluation the fused path runs.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..._requires import require

require("fairseq", "wavepe's fairseq plugin")

import torch  # noqa: E402
from fairseq.modules.multihead_attention import MultiheadAttention  # noqa: E402
from torch import Tensor  # noqa: E402

import wavepe.ops as wops  # noqa: E402

from .options import PositionSpec


class WavepeSelfAttention(MultiheadAttention):
    """Causal multi-head self-attention with a wavepe position encoding.

    Args:
        embed_dim: model width C; heads of ``head_dim = C / num_heads``.
        num_heads: H.
        spec: the validated position encoding (:class:`PositionSpec`).
        dropout: attention-probability dropout (fairseq's ``--attention-dropout``).
        bias, q_noise, qn_block_size: as fairseq's ``MultiheadAttention``.

    forward(query (T, B, C), ...) -> ((T, B, C), None)
    """

    def __init__(self, embed_dim: int, num_heads: int, spec: PositionSpec, *, dropout: float = 0.0,
                 bias: bool = True, q_noise: float = 0.0, qn_block_size: int = 8) -> None:
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, self_attention=True,
                         q_noise=q_noise, qn_block_size=qn_block_size)
        if not isinstance(spec, PositionSpec):
            raise TypeError(f"spec must be a PositionSpec, got {type(spec).__name__}")
        if spec.head_dim != self.head_dim:
            raise ValueError(f"spec.head_dim={spec.head_dim} does not match embed_dim/num_heads={self.head_dim}")
        self.spec = spec

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, pos_enc={self.spec.pos_enc!r}"

    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Causal self-attention of ``query`` (T, B, C); returns ((T, B, C), None).

        ``key``/``value`` must be ``query`` itself or None (self-attention);
        ``key_padding_mask`` (B, T) marks padded keys (True / nonzero);
        ``attn_mask`` must be None: causality is built in (the decoder passes
        no future mask).  Attention weights are never returned.
        """
        if static_kv or before_softmax:
            raise ValueError("WavepeSelfAttention is causal self-attention: static_kv and before_softmax "
                             "are not supported")
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError("WavepeSelfAttention is self-attention: key and value must be the query tensor")
        if attn_mask is not None:
            raise ValueError("WavepeSelfAttention is always causal and takes no attn_mask; got one of shape "
                             f"{tuple(attn_mask.shape)}")
        if query.dim() != 3 or query.size(2) != self.embed_dim:
            raise ValueError(f"query must be (T, B, {self.embed_dim}), got {tuple(query.shape)}")
        tgt_len, bsz, _ = query.shape
        heads, head_dim = self.num_heads, self.head_dim

        def split(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return x.view(tgt_len, bsz, heads, head_dim).permute(1, 2, 0, 3)

        q, k, v = split(self.q_proj(query)), split(self.k_proj(query)), split(self.v_proj(query))

        saved: Optional[Dict[str, Optional[Tensor]]] = None
        past = 0
        if incremental_state is not None:
            saved = self._get_input_buffer(incremental_state)
            prev_key = saved.get("prev_key")
            if prev_key is not None:
                past = prev_key.size(2)

        rope_cfg = self.spec.rope_for(self.training)
        if rope_cfg is not None:
            q, k = wops.rope(q, k, past, rope_cfg)
            assert k is not None

        if incremental_state is not None:
            assert saved is not None
            if past:
                prev_value = saved["prev_value"]
                assert saved["prev_key"] is not None and prev_value is not None
                k = torch.cat([saved["prev_key"], k], dim=2)
                v = torch.cat([prev_value, v], dim=2)
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved.get("prev_key_padding_mask"),
                batch_size=bsz,
                src_len=k.size(2),
                static_kv=False,
            )
            saved["prev_key"] = k.contiguous()
            saved["prev_value"] = v.contiguous()
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)

        src_len = k.size(2)
        padding: Optional[Tensor] = None
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise ValueError(f"key_padding_mask must be (B, S) = ({bsz}, {src_len}), "
                                 f"got {tuple(key_padding_mask.shape)}")
            padding = key_padding_mask.to(device=q.device, dtype=torch.bool)
            if not bool(padding.any()):
                padding = None

        q_offset = src_len - tgt_len
        p_drop = self.dropout_module.p
        if p_drop > 0 and (self.training or self.dropout_module.apply_during_inference):
            out = self._attention_with_dropout(q, k, v, padding, q_offset)
        else:
            out = wops.wavelet_attention(q, k, v, self.spec.wavelet, pos_enc=self.spec.kernel_pos_enc,
                                         causal=True, q_offset=q_offset, key_padding_mask=padding,
                                         window=self.spec.window, softcap=self.spec.softcap)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
        return self.out_proj(out), None

    def _attention_with_dropout(self, q: Tensor, k: Tensor, v: Tensor, padding: Optional[Tensor],
                                q_offset: int) -> Tensor:
        """Scores formed explicitly (B, H, T, S) so that dropout can act on the probabilities.

        Same scores as the fused kernel: ``scale·(q·k + bias)`` for wavelets,
        ``scale·q·k + bias`` for ALiBi, ``scale·q·k`` otherwise; then the
        soft-cap and the sliding window, as there.
        """
        tgt_len, src_len = q.size(2), k.size(2)
        scale = self.head_dim ** -0.5
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.spec.pos_enc == "wavelet":
            scores = scores + wops.wavelet_bias(q, self.spec.wavelet, k_len=src_len, q_offset=q_offset, causal=True)
        scores = scores * scale
        if self.spec.pos_enc == "alibi":
            scores = scores + wops.alibi_bias(self.num_heads, tgt_len, src_len, q_offset=q_offset, causal=True,
                                              dtype=scores.dtype, device=scores.device)
        if self.spec.softcap:
            scores = self.spec.softcap * torch.tanh(scores / self.spec.softcap)
        rows = torch.arange(tgt_len, device=q.device)[:, None] + q_offset
        cols = torch.arange(src_len, device=q.device)[None, :]
        masked = (cols > rows)[None, None]
        if self.spec.window:
            masked = masked | (cols <= rows - self.spec.window)[None, None]
        if padding is not None:
            masked = masked | padding[:, None, None, :]
        scores = scores.masked_fill(masked, float("-inf"))
        # a query whose keys are all masked (only possible with padding) attends to nothing: output 0
        empty = masked.all(dim=-1, keepdim=True)
        # softmax in at least float32, as fairseq does for half-precision scores
        soft_dtype = torch.promote_types(scores.dtype, torch.float32)
        probs = torch.softmax(scores.to(soft_dtype).masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
        probs = self.dropout_module(probs.to(v.dtype))
        return torch.matmul(probs, v)
