"""Plain-PyTorch implementations of every wavepe op.

They follow the same contracts as the compiled ops (docs/DEVELOPING.md) and
differentiate through ordinary autograd.  Uses:

* the benchmarks' baselines: :func:`rel_bias` is Transformer-XL's rel-shift
  (Q·Tᵀ over the needed distance window, then a diagonal gather), and
  :func:`attention` is bias + ``scaled_dot_product_attention`` with a float
  mask — exactly what a user would write without wavepe;
* the fallback on devices for which no kernel is compiled (with a warning);
* :func:`attention` is wavepe's one dense attention: also what the Hugging
  Face shim runs for masks that have no compact form and for dropout.

They materialise M×N tensors (never M×N×d), so they are not the fast path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rel_bias(q: torch.Tensor, table: torch.Tensor, *, k_len: int, r_lo: int, q_offset: int,
             causal: bool, clamp: bool) -> torch.Tensor:
    """bias[..., m, n] = q[..., m, :] · T[pos_q(m) - n - r_lo] by rel-shift. (..., M, d) -> (..., M, N)."""
    m, d = q.shape[-2], q.shape[-1]
    n = k_len
    rows = table.shape[0]
    # distances needed: q_offset - (n - 1) ... q_offset + m - 1, i.e. m + n - 1 of them
    r = torch.arange(q_offset - (n - 1), q_offset + m, device=q.device)
    idx = r - r_lo
    inside = (idx >= 0) & (idx < rows)
    window = table[idx.clamp(0, max(rows - 1, 0))] if rows else table.new_zeros((r.numel(), d))
    if not clamp:
        window = window * inside[:, None].to(window.dtype)
    g = q @ window.transpose(0, 1)  # (..., M, M + N - 1): the extra GEMM of rel-shift
    # bias[m, n] = g[m, (q_offset + m - n) - (q_offset - n + 1 ... )] = g[m, m - n + n_last]
    col = torch.arange(m, device=q.device)[:, None] - torch.arange(n, device=q.device)[None, :] + (n - 1)
    bias = torch.gather(g, -1, col.expand(*g.shape[:-2], m, n))
    if causal:
        future = (torch.arange(n, device=q.device)[None, :] > (q_offset + torch.arange(m, device=q.device))[:, None])
        bias = bias.masked_fill(future, 0.0)
    return bias


def rope(x: torch.Tensor, *, positions: torch.Tensor, inv_freq: torch.Tensor, rotary_pairs: int, layout: str,
         scale: float = 1.0) -> torch.Tensor:
    """Rotate pairs of x (B, H, L, d) by positions (L,) or (B, L) x inv_freq (d/2,), float64 angles."""
    d = x.shape[-1]
    half = d // 2
    pos = positions.to(torch.float64)
    if pos.dim() == 1:
        pos = pos[None, :]
    angle = pos[:, None, :, None] * inv_freq.to(device=x.device, dtype=torch.float64)[:rotary_pairs]  # (B,1,L,P)
    cos = (torch.cos(angle) * scale).to(x.dtype)
    sin = (torch.sin(angle) * scale).to(x.dtype)
    out = x * scale if scale != 1.0 else x.clone()
    p = rotary_pairs
    if layout == "half":
        a, b = x[..., :p], x[..., half: half + p]
        out[..., :p] = a * cos - b * sin
        out[..., half: half + p] = b * cos + a * sin
    else:
        a, b = x[..., 0: 2 * p: 2], x[..., 1: 2 * p: 2]
        out[..., 0: 2 * p: 2] = a * cos - b * sin
        out[..., 1: 2 * p: 2] = b * cos + a * sin
    return out


def alibi_bias(slopes: torch.Tensor, *, q_len: int, k_len: int, q_offset: int, causal: bool) -> torch.Tensor:
    """bias[h, i, j] = -slope_h · (pos_q(i) - j) (|·| when not causal; 0 above the diagonal when causal)."""
    pos_q = torch.arange(q_len, device=slopes.device, dtype=slopes.dtype) + q_offset
    pos_k = torch.arange(k_len, device=slopes.device, dtype=slopes.dtype)
    dist = pos_q.unsqueeze(1) - pos_k.unsqueeze(0)
    dist = dist.clamp_min(0) if causal else dist.abs()
    return -slopes.reshape(-1, 1, 1) * dist


def document_mask(cu_seqlens: torch.Tensor, m: int, n: int, q_offset: int, causal: bool) -> torch.Tensor:
    """(B, 1, M, N) bool, True = attend: packed documents (boundaries ``cu_seqlens``, (n_docs + 1,) or
    (B, n_docs + 1), in the keys' coordinate) -- a query at q_offset + i sees the keys of its own document (up
    to itself when causal); a position outside [cu[0], cu[-1]) is in no document (csrc/core/attention.h)."""
    cu = cu_seqlens.reshape(-1, cu_seqlens.shape[-1]).to(torch.int64)
    pos_k = torch.arange(n, device=cu.device)
    pos_q = q_offset + torch.arange(m, device=cu.device)

    def doc(pos: torch.Tensor) -> torch.Tensor:
        """Document index of positions (B, L): the last boundary <= it (a later empty document wins, as in
        the kernels); -1 outside every document."""
        i = torch.searchsorted(cu[:, :-1].contiguous(), pos.contiguous(), right=True)
        return torch.where((pos >= cu[:, :1]) & (pos < cu[:, -1:]), i, -1)

    doc_k = doc(pos_k.expand(cu.shape[0], n))
    doc_q = doc(pos_q.expand(cu.shape[0], m))
    keep = (doc_q[:, :, None] == doc_k[:, None, :]) & (doc_q[:, :, None] >= 0)
    if causal:
        keep = keep & (pos_k[None, None, :] <= pos_q[None, :, None])
    return keep[:, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None, *, causal: bool,
              scale: float, q_offset: int, bias_scaled: bool = False,
              key_padding_mask: torch.Tensor | None = None, mask: torch.Tensor | None = None,
              dropout: float = 0.0, return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale·q·kᵀ + bias + masks) v with SDPA and an explicit float mask: wavepe's dense attention.

    q (B, H, M, d); k, v (B, Hkv, N, d) with H a multiple of Hkv (GQA); ``bias``
    broadcastable to (B, H, M, N) or None.  ``bias_scaled=False`` multiplies
    the bias by ``scale`` first (the wavelet convention s = scale·(q·k + q·p));
    ALiBi's bias is added as is.  Which keys a query sees: ``mask`` when given
    (bool, True = attend, or float additive; broadcastable to (B, H, M, N)),
    else the causal rule at ``q_offset`` (queries at q_offset … q_offset+M-1,
    keys at 0 … N-1) when ``causal``; and never the keys of
    ``key_padding_mask`` (B, N), True = ignore.  A query that sees no key gets
    0 (not NaN).  ``dropout`` is SDPA's ``dropout_p``.  Returns (B, H, M, d);
    with ``return_lse`` (no dropout), ``(out, lse)``: lse (B, H, M) the scores'
    log-sum-exp, -inf for a query that sees no key -- SDPA does not expose it,
    so the scores are formed explicitly then.
    """
    b, h, m, _ = q.shape
    n = k.shape[-2]
    device = q.device
    keep = None  # (.., M, N) bool: True = the key counts
    additive = None
    if mask is not None and mask.dtype == torch.bool:
        keep = mask
    elif mask is not None:
        additive = mask.to(q.dtype)
    elif causal:
        keep = torch.arange(n, device=device)[None, :] <= (q_offset + torch.arange(m, device=device))[:, None]
    if key_padding_mask is not None:
        pad_keep = ~key_padding_mask.to(torch.bool)[:, None, None, :]
        keep = pad_keep if keep is None else keep & pad_keep
    if bias is not None:
        scaled = bias if bias_scaled else bias * scale
        additive = scaled if additive is None else additive + scaled
    if keep is not None:
        base = additive if additive is not None else torch.zeros((), dtype=q.dtype, device=device)
        additive = torch.where(keep, base, torch.tensor(float("-inf"), dtype=q.dtype, device=device))
    if additive is not None and additive.dim() < 4:
        additive = additive.reshape((1,) * (4 - additive.dim()) + tuple(additive.shape))
    # a query with every key masked makes SDPA's softmax NaN: define it as 0 output
    seen = None
    if additive is not None:
        seen = ~torch.isneginf(additive).all(dim=-1, keepdim=True)
        additive = additive.masked_fill(~seen, 0.0)
    if return_lse:
        if dropout:
            raise ValueError(f"return_lse=True needs dropout=0, got dropout={dropout}")
        return _attention_with_lse(q, k, v, additive, seen, scale)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, dropout_p=dropout, scale=scale,
                                         enable_gqa=k.shape[1] != h)
    return out if seen is None else out.masked_fill(~seen, 0.0)


def _attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, additive: torch.Tensor | None,
                        seen: torch.Tensor | None, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention`'s (out, lse) from explicit scores (``additive``, ``seen`` as it prepared them)."""
    rep = q.shape[1] // k.shape[1]
    if rep != 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if additive is not None:
        s = s + additive
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    out = torch.matmul(torch.exp(s - lse), v)
    if seen is not None:
        out = out.masked_fill(~seen, 0.0)
        lse = lse.masked_fill(~seen, float("-inf"))
    return out, lse.squeeze(-1)
