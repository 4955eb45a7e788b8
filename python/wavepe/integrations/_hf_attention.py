"""Attention of the Hugging Face shim: masks in wavepe's form, fused or dense.

Hugging Face builds one attention mask per forward (``masking_utils``) and
hands it to every layer.  What that mask looks like depends on the model's
attention implementation; for ``"wavepe"`` it is made by :func:`wavepe_mask`
here, in the smallest form that says everything:

* ``None``: plain causal attention, no padding (queries are the last M keys,
  or M == 1, or the cache was empty: the meaning Hugging Face's SDPA path
  gives ``None``);
* a bool tensor (B, 1, 1, N), True = attend: causal attention of the last M
  positions plus a key padding mask (left or right padding).  For M == 1 this
  is exactly the mask Hugging Face's own SDPA path builds; for M > 1 only
  :func:`wavepe_mask` makes it, so it cannot be mistaken for a
  bidirectional mask;
* anything that has no such form (packed sequences, sliding windows that
  bite, custom ``or``/``and`` mask functions, static caches under
  ``torch.compile``): Hugging Face's dense bool mask (B, 1, M, N).

:func:`attend` turns the compact forms into ``key_padding_mask`` (B, N) for
:func:`wavepe.ops.wavelet_attention` (no M x N tensor is built on that path)
and falls back to bias + SDPA with the dense mask otherwise.  Dense masks that
the ``sdpa``/``eager`` mask functions built for a causal + padding pattern are
recognised and sent to the fused path as well (outside ``torch.compile``).

Relative distances are distances between key indices: ``r = (q_offset + m) - n``
where ``q_offset`` is the index of the first query among the N keys.  They equal
the distances of ``position_ids`` whenever positions advance by one per token,
which holds for default positions, left/right padding (pads are masked) and
packed sequences (documents are masked from each other).
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import WaveletConfig
from ..pos_enc import scores_pos_enc


def _compiling() -> bool:
    return torch.compiler.is_compiling()


# ---- mask function registered as AttentionMaskInterface["wavepe"] -----------------------------------------------

def wavepe_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: torch.Tensor | None = None,
    allow_is_causal_skip: bool = True,
    local_size: int | None = None,
    device: torch.device | str = "cpu",
    **kwargs: Any,
) -> torch.Tensor | None:
    """Hugging Face mask interface for ``attn_implementation="wavepe"`` (see the module docstring).

    Returns None, a (B, 1, 1, N) bool key mask (True = attend) for causal + padding,
    or Hugging Face's dense (B, 1, M, N) bool mask when the pattern has no compact form.
    """
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask, sdpa_mask

    if mask_function is None:
        mask_function = causal_mask_function
    queries_last = (isinstance(q_offset, int) and isinstance(kv_offset, int) and kv_offset == 0
                    and q_offset == kv_length - q_length)
    # The unmodified causal function, or an unmodified sliding window (Hugging Face only allows the
    # is_causal skip when no overlay, packing or custom function was added) too wide to bite.
    plain = mask_function is causal_mask_function or (
        local_size is not None and allow_is_causal_skip and not kwargs.get("use_vmap", False)
        and kv_length <= local_size)
    if plain and queries_last:
        keep = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        no_lower_right_needed = q_length == 1 or q_length == kv_length
        if keep is None:
            if no_lower_right_needed:
                return None
            return torch.ones((batch_size, 1, 1, kv_length), dtype=torch.bool, device=device)
        keep = keep[:, :kv_length].to(device=device, dtype=torch.bool)
        if no_lower_right_needed and not _compiling() and bool(keep.all()):
            return None
        return keep[:, None, None, :]
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                     allow_is_causal_skip=allow_is_causal_skip, local_size=local_size, device=device, **kwargs)


# ---- mask resolution ---------------------------------------------------------------------------------------------

class _Plan:
    """How to run one attention call: fused with (q_offset, key_padding_mask) or dense with a mask."""

    __slots__ = ("q_offset", "key_padding_mask", "dense_mask")

    def __init__(self, q_offset: int, key_padding_mask: torch.Tensor | None = None,
                 dense_mask: torch.Tensor | None = None) -> None:
        self.q_offset = q_offset
        self.key_padding_mask = key_padding_mask  # (B, N) bool, True = ignore; fused path
        self.dense_mask = dense_mask  # (B|1, 1|H, M, N) bool keep or float additive; dense path

    @property
    def fused(self) -> bool:
        return self.dense_mask is None


def _causal_keep(m: int, n: int, q_offset: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    """(M, N) bool: key n visible to query m (n <= q_offset + m, and within the sliding window)."""
    pos_q = torch.arange(m, device=device)[:, None] + q_offset
    pos_k = torch.arange(n, device=device)[None, :]
    keep = pos_k <= pos_q
    if window is not None:
        keep &= pos_k > pos_q - window
    return keep


def resolve_mask(mask: Any, b: int, h: int, m: int, n: int, q_offset: int | None, sliding_window: int | None,
                 causal: bool, device: torch.device) -> _Plan:
    """Read a Hugging Face attention mask; see the module docstring for the forms."""
    if mask is not None and not isinstance(mask, torch.Tensor):
        raise TypeError(f"attention_mask must be None or a torch.Tensor for wavepe attention, got "
                        f"{type(mask).__name__} (set attn_implementation='wavepe', 'sdpa' or 'eager')")
    if isinstance(mask, torch.Tensor):
        if mask.dim() != 4 or mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h) \
                or mask.shape[2] not in (1, m) or mask.shape[3] != n:
            raise ValueError(f"attention_mask must be a 4-D mask broadcastable to (B, H, M, N) = ({b}, {h}, {m}, {n}), "
                             f"got shape {tuple(mask.shape)}")
    if mask is None:
        # Hugging Face's meaning of None: lower-right causal for one query, upper-left otherwise
        off = q_offset if q_offset is not None else (n - 1 if m == 1 else 0)
        if not causal:
            return _Plan(off)
        if sliding_window is not None and n > sliding_window:
            return _Plan(off, dense_mask=_causal_keep(m, n, off, device, sliding_window))
        return _Plan(off)
    off = q_offset if q_offset is not None else n - m
    if mask.dtype == torch.bool and mask.shape[1] == 1 and causal:
        if mask.shape[2] == 1 and (m == 1 or sliding_window is None or n <= sliding_window):
            keep = mask[:, 0, 0, :].expand(b, n)
            return _Plan(off, key_padding_mask=~keep)
        if mask.shape[2] == m and m > 1 and not _compiling():
            # a dense mask built by the sdpa/eager mask functions: fused if it is causal + key padding
            keep = mask[:, 0, -1, :]
            if torch.equal(mask[:, 0], _causal_keep(m, n, off, mask.device)[None] & keep[:, None, :]):
                return _Plan(off, key_padding_mask=~keep.expand(b, n))
    return _Plan(off, dense_mask=mask)


# ---- the attention itself --------------------------------------------------------------------------------------

def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, pos_enc: str,
                    wavelet: WaveletConfig | None, scale: float, dropout: float, q_offset: int,
                    causal: bool) -> torch.Tensor:
    """The fallback for masks without a compact form and for dropout: wavepe's dense attention
    (:func:`wavepe.ops.eager.attention`) with the encoding's bias at every (m, n).

    q (B, H, M, d), k/v (B, H_kv, N, d); ``mask`` bool (True = attend) or float additive,
    broadcastable to (B, H, M, N), or None (plain causal at ``q_offset``).  ``pos_enc`` is an
    attention-level name: "wavelet", "alibi" or "nope".  Returns (B, H, M, d).
    Builds M x N tensors (never M x N x d).
    """
    from .. import ops
    from ..ops import eager

    h, m, n = q.shape[1], q.shape[2], k.shape[2]
    cdt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    # the bias at every (m, n): the mask alone decides which entries count
    bias = None
    if pos_enc == "wavelet":
        bias = ops.wavelet_bias(qc, wavelet, k_len=n, q_offset=q_offset, causal=False)
    elif pos_enc == "alibi":
        bias = ops.alibi_bias(h, m, n, q_offset=q_offset, causal=False, dtype=cdt, device=q.device)
    out = eager.attention(qc, kc, vc, bias, causal=causal, scale=scale, q_offset=q_offset,
                          bias_scaled=pos_enc == "alibi", mask=mask, dropout=dropout)
    return out.to(q.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, *, pos_enc: str,
           wavelet: WaveletConfig | None, scale: float, dropout: float = 0.0, q_offset: int | None = None,
           sliding_window: int | None = None, causal: bool = True,
           position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, _Plan]:
    """Attention of one layer: q (B, H, M, d), k/v (B, H_kv, N, d) -> (B, M, H, d) and the plan it ran.

    ``pos_enc``: the shim's name ("wavelet", "alibi", "rope" (q, k already rotated), "nope").
    ``q_offset``: index of the first query among the keys when known (from the cache), else inferred
    from the mask as Hugging Face does.  ``position_ids`` (B|1, M), when given, are checked to
    advance by one per unpadded token (:func:`check_positions_follow_indices`) on the fused path.
    """
    from .. import ops

    b, h, m, _ = q.shape
    n = k.shape[2]
    plan = resolve_mask(mask, b, h, m, n, q_offset, sliding_window, causal, q.device)
    if position_ids is not None and plan.fused and m > 1:
        check_positions_follow_indices(position_ids, plan, m, pos_enc)
    kind = scores_pos_enc(pos_enc)  # what the scores add once q and k are (or are not) rotated
    if m == 0 or n == 0:  # nothing to attend to: 0, like a query whose keys are all masked
        return q.new_zeros((b, m, h, v.shape[-1])), plan
    if plan.fused and dropout == 0.0:
        out = ops.wavelet_attention(q, k, v, wavelet if kind == "wavelet" else None, pos_enc=kind, causal=causal,
                                    scale=scale, q_offset=plan.q_offset, key_padding_mask=plan.key_padding_mask)
    else:
        dense = plan.dense_mask
        if dense is None and plan.key_padding_mask is not None:
            # dropout with a compact mask: spell it out (the fused kernel has no dropout)
            dense = (_causal_keep(m, n, plan.q_offset, q.device)[None] if causal else True) \
                & ~plan.key_padding_mask[:, None, :]
            dense = dense[:, None]
        out = dense_attention(q, k, v, dense, pos_enc=kind, wavelet=wavelet, scale=scale, dropout=dropout,
                              q_offset=plan.q_offset, causal=causal)
    return out.transpose(1, 2), plan


def check_positions_follow_indices(position_ids: torch.Tensor, plan: _Plan, m: int, pos_enc: str) -> None:
    """Relative encodings measure index distances: the unpadded tokens' positions must advance by one.

    ``position_ids`` (B|1, M).  Raises ValueError naming the first offending batch row.
    Costs one host sync; callers skip it under torch.compile and for dense masks.
    """
    if position_ids.dim() != 2 or position_ids.shape[-1] != m or m < 2:
        return
    delta = position_ids - torch.arange(m, device=position_ids.device)
    if plan.key_padding_mask is not None:
        real = ~plan.key_padding_mask[:, plan.q_offset: plan.q_offset + m]
        delta = delta.expand(real.shape)
        big = torch.iinfo(delta.dtype).max
        hi = delta.masked_fill(~real, -big).amax(dim=-1)
        lo = delta.masked_fill(~real, big).amin(dim=-1)
        bad = (hi != lo) & real.any(dim=-1)
    else:
        bad = delta.amax(dim=-1) != delta.amin(dim=-1)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0])
        shown = position_ids[min(row, position_ids.shape[0] - 1)].tolist()
        text = ", ".join(map(str, shown[:12])) + (", ..." if len(shown) > 12 else "")
        raise ValueError(
            f"position_ids of batch row {row} do not advance by one per (unpadded) token: [{text}]. "
            f"pos_enc={pos_enc!r} measures distances between tokens' indices in the sequence, which equal "
            "position differences for default positions, left/right padding and packed sequences; use "
            "pos_enc='rope' for arbitrary position_ids")
