"""Attention of the Hugging Face shim: masks in wavepe's form, fused or dense.

Hugging Face builds one attention mask per layer type and forward
(``masking_utils``) and hands it to every layer.  What that mask looks like
depends on the model's attention implementation; for ``"wavepe"`` it is made by
:func:`wavepe_mask` here, in the smallest form that says everything:

* ``None``: plain causal attention, no padding, the queries are the last M keys;
* a bool tensor (B, 1, 1, N), True = attend: causal attention of the last M
  keys plus a key padding mask (left or right padding).  Only
  :func:`wavepe_mask` makes it for M > 1, so it cannot be mistaken for a
  bidirectional mask;
* anything that has no such form (packed sequences, sliding windows that
  bite, custom mask functions, static caches, whose queries are not the last
  keys): Hugging Face's dense mask as an additive float mask (B, 1, M, N)
  (0 = attend, -inf = not), never mistaken for the compact form when M == 1.

:func:`attend` runs the compact forms through :func:`wavepe.ops.wavelet_attention`
(``key_padding_mask`` (B, N), no M x N tensor) and everything else through
:func:`dense_attention`, which also carries what the fused kernel does not:
dropout, attention-logit softcapping (Gemma 2) and the attention
probabilities (``output_attentions``, the ``eager`` implementation).

Relative distances are distances between key indices: with a compact mask
the first query is key ``N - M``; with a dense mask each query's index is the
last key its causal mask lets it see (itself), read from the mask as a tensor
(no host sync, nothing specialised under torch.compile), which also holds for
static caches, whose keys fill a preallocated buffer in order, and for
sliding-window caches, whose kept keys stay in order.  Index distances equal
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
    or Hugging Face's dense (B, 1, M, N) mask, additive float32, when the pattern has no compact form.
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
    # Every other pattern: Hugging Face's dense mask, as an additive float mask, so that a (B, 1, 1, N) one
    # (M == 1, e.g. decoding into a static cache, whose query is not the last key) is never read as the compact form.
    keep = sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                     allow_is_causal_skip=False, local_size=local_size, device=device, **kwargs)
    return torch.zeros(keep.shape, dtype=torch.float32, device=keep.device).masked_fill(~keep, float("-inf"))


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


def resolve_mask(mask: Any, b: int, h: int, m: int, n: int, sliding_window: int | None, causal: bool,
                 device: torch.device) -> _Plan:
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
        off = n - 1 if m == 1 else 0
        if not causal:
            return _Plan(off)
        if sliding_window is not None and n > sliding_window:
            return _Plan(off, dense_mask=_causal_keep(m, n, off, device, sliding_window))
        return _Plan(off)
    off = n - m
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

def query_indices(plan: _Plan, m: int, n: int, device: torch.device) -> torch.Tensor:
    """(B|1, M) int64: the index among the keys of each query.

    A compact plan: ``q_offset + m``.  A dense mask: the last key each query
    sees (under a causal mask, itself), as a tensor; a query that sees no key
    (a pad row, whose output is 0) gets ``N - M + m``.
    """
    default = torch.arange(m, device=device) + plan.q_offset
    mask = plan.dense_mask
    if mask is None:
        return default[None]
    keep = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > torch.finfo(mask.dtype).min / 2  # (B|1, M|1, N)
    keep = keep.expand(keep.shape[0], m, n)
    last = torch.where(keep, torch.arange(n, device=device), -1).amax(dim=-1)
    return torch.where(last >= 0, last, default)


def _wavelet_bias_at(q: torch.Tensor, rel: torch.Tensor, wavelet: WaveletConfig) -> torch.Tensor:
    """bias[b, h, m, n] = q[b, h, m] · T[rel[b, m, n]] for causal distances rel (B|1, M, N) >= 0 (else 0).

    The table covers the distances 0 … N-1 a causal call can form (within the
    wavelets' support); one GEMM q·Tᵀ (B, H, M, rows) and a gather: no M x N x d tensor.
    """
    from ..ops._tables import call_table

    b, h, m, d = q.shape
    n = rel.shape[-1]
    table, r_lo, rows = call_table(wavelet, d, q.dtype, q.device, 1, n, n - 1, True)
    if not torch.compiler.is_compiling() and rows == 0:
        return q.new_zeros((b, h, m, n))
    g = q @ table.transpose(0, 1)
    idx = rel - r_lo
    inside = (idx >= 0) & (idx < rows)
    idx = idx.clamp(0, rows - 1)[:, None].expand(b, h, m, n)
    return torch.gather(g, -1, idx).masked_fill(~inside[:, None], 0.0)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    positions: torch.Tensor, *, pos_enc: str, wavelet: WaveletConfig | None, scale: float,
                    softcap: float | None = None, dropout: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with every score spelled out: the encoding's bias, softcapping, the mask, dropout.

    q (B, H, M, d), k/v (B, H_kv, N, d); ``mask`` bool (True = attend) or float
    additive, broadcastable to (B, H, M, N), or None (every key);
    ``positions`` (B|1, M): each query's index among the keys (:func:`query_indices`).
    Scores::

        s = scale * (q·k + q·T[r])    wavelet   (r = positions[m] - n)
        s = scale * q·k - slope_h * r  alibi
        s = scale * q·k                rope (q, k rotated) / nope
        s = softcap * tanh(s / softcap)  when softcap is set (Gemma 2)

    A query that sees no key gets 0 (not NaN).  Returns the output (B, H, M, d)
    and the attention probabilities (B, H, M, N), both in q's dtype (computed in
    float32 for half types).  Builds M x N tensors per head, never M x N x d.
    """
    from ..config import alibi_slopes

    b, h, m, _ = q.shape
    n = k.shape[2]
    cdt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    if kc.shape[1] != h:  # grouped-query attention: each K/V head serves h / h_kv query heads
        kc = kc.repeat_interleave(h // kc.shape[1], dim=1)
        vc = vc.repeat_interleave(h // vc.shape[1], dim=1)
    scores = (qc @ kc.transpose(-1, -2)) * scale
    if pos_enc in ("wavelet", "alibi"):
        rel = positions[:, :, None] - torch.arange(n, device=q.device)  # (B|1, M, N)
        if pos_enc == "wavelet":
            scores = scores + scale * _wavelet_bias_at(qc, rel, wavelet)
        else:
            slopes = torch.as_tensor(alibi_slopes(h), dtype=cdt, device=q.device)
            scores = scores - slopes[:, None, None] * rel.clamp_min(0)[:, None].to(cdt)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(cdt)
    seen = ~torch.isneginf(scores).all(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1).masked_fill(~seen, 0.0)
    if dropout > 0.0:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=True)
    return (probs @ vc).to(q.dtype), probs.to(q.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, *, pos_enc: str,
           wavelet: WaveletConfig | None, scale: float, dropout: float = 0.0, sliding_window: int | None = None,
           softcap: float | None = None, causal: bool = True, weights: bool = False,
           position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, _Plan]:
    """Attention of one layer: q (B, H, M, d), k/v (B, H_kv, N, d) -> ((B, M, H, d), probabilities, plan).

    ``pos_enc``: the shim's name ("wavelet", "alibi", "rope" (q, k already rotated), "nope").
    The fused kernel runs for compact masks without dropout, softcapping or
    ``weights``; otherwise :func:`dense_attention`.  The probabilities
    (B, H, M, N) are returned when ``weights`` (else None).  ``position_ids``
    (B|1, M), when given, are checked to advance by one per unpadded token
    (:func:`check_positions_follow_indices`) on the fused path.
    """
    from .. import ops

    b, h, m, _ = q.shape
    n = k.shape[2]
    plan = resolve_mask(mask, b, h, m, n, sliding_window, causal, q.device)
    kind = scores_pos_enc(pos_enc)  # what the scores add once q and k are (or are not) rotated
    fused = plan.fused and dropout == 0.0 and softcap is None and not weights
    if position_ids is not None and fused and m > 1:
        check_positions_follow_indices(position_ids, plan, m, pos_enc)
    if m == 0 or n == 0:  # nothing to attend to: 0, like a query whose keys are all masked
        return q.new_zeros((b, m, h, v.shape[-1])), (q.new_zeros((b, h, m, n)) if weights else None), plan
    if fused:
        out = ops.wavelet_attention(q, k, v, wavelet if kind == "wavelet" else None, pos_enc=kind, causal=causal,
                                    scale=scale, q_offset=plan.q_offset, key_padding_mask=plan.key_padding_mask)
        return out.transpose(1, 2), None, plan
    dense = plan.dense_mask
    if dense is None and (causal or plan.key_padding_mask is not None):
        # a compact plan on the dense path: spell the mask out
        dense = _causal_keep(m, n, plan.q_offset, q.device)[None] if causal else \
            torch.ones((1, m, n), dtype=torch.bool, device=q.device)
        if plan.key_padding_mask is not None:
            dense = dense & ~plan.key_padding_mask[:, None, :]
        dense = dense[:, None]
    out, probs = dense_attention(q, k, v, dense, query_indices(plan, m, n, q.device), pos_enc=kind, wavelet=wavelet,
                                 scale=scale, softcap=softcap, dropout=dropout)
    return out.transpose(1, 2), (probs if weights else None), plan


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
