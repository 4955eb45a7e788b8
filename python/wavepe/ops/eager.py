"""Plain-PyTorch implementations of every wavepe op.

They follow the same contracts as the compiled ops (docs/DEVELOPING.md) and
differentiate through ordinary autograd.  Uses:

* the benchmarks' baselines: :func:`rel_bias` is Transformer-XL's rel-shift
  (Q·Tᵀ over the needed distance window, then a diagonal gather), and
  :func:`attention` is bias + ``scaled_dot_product_attention`` with a float
  mask — exactly what a user would write without wavepe;
* the fallback on devices for which no kernel is compiled (with a warning).

They materialise M×N tensors (never M×N×d), so they are not the fast path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rel_bias(q: torch.Tensor, table: torch.Tensor, r_lo: int, k_len: int, q_offset: int,
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


def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, layout: str, rotary_pairs: int,
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


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, *, causal: bool,
              scale: float, q_offset: int, bias_scaled: bool,
              key_padding_mask: torch.Tensor | None = None,
              return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale·q·kᵀ + mask + bias) v with SDPA and a float mask.

    q (B, H, M, d); k, v (B, Hkv, N, d); bias broadcastable to (B, H, M, N)
    or None.  ``bias_scaled=False`` multiplies the bias by ``scale`` first (the
    wavelet convention s = scale·(q·k + q·p)); ALiBi's bias is added as is.
    ``return_lse`` also returns the scores' log-sum-exp (B, H, M), -inf for a
    query that sees no key; SDPA does not expose it, so the scores are formed
    explicitly then.
    """
    b, h, m, _ = q.shape
    n = k.shape[-2]
    if k.shape[1] != h:
        rep = h // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    mask = torch.zeros((m, n), dtype=q.dtype, device=q.device)
    if causal:
        future = torch.arange(n, device=q.device)[None, :] > (q_offset + torch.arange(m, device=q.device))[:, None]
        mask = mask.masked_fill(future, float("-inf"))
    mask = mask.expand(b, h, m, n)
    if key_padding_mask is not None:
        mask = mask.masked_fill(key_padding_mask[:, None, None, :].to(torch.bool), float("-inf"))
    if bias is not None:
        mask = mask + (bias if bias_scaled else bias * scale)
    # rows with every key masked produce NaN in softmax; define them as 0 output
    all_masked = torch.isinf(mask).all(dim=-1, keepdim=True) & (mask < 0).all(dim=-1, keepdim=True)
    if return_lse:
        s = torch.matmul(q, k.transpose(-1, -2)) * scale + mask.masked_fill(all_masked, 0.0)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        out = torch.matmul(torch.exp(s - lse), v).masked_fill(all_masked, 0.0)
        return out, lse.masked_fill(all_masked, float("-inf")).squeeze(-1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.masked_fill(all_masked, 0.0), scale=scale)
    return out.masked_fill(all_masked, 0.0)
