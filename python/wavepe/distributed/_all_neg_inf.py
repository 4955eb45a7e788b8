"""Which of a tile's NaN rows are "every visible score was -inf", for the ring's merge.

The fused kernel follows the non-finite contract (docs/DEVELOPING.md,
"Non-finite values"): a query whose visible scores are all -inf gets NaN
(0/0), lse NaN.  Over a whole sequence that is right, but a tile sees only
part of the keys: a row that is all -inf in one chunk and finite in another
is finite in the single-process result, since -inf scores weigh zero.  The
ring must therefore tell such a tile row (a zero-weight partial) from a NaN
that is really there (a NaN score, or +inf: inf - inf), which also gives NaN
lse.  The kernel's output cannot say which; the scores can, so this module
recomputes the scores of the tile's NaN rows only (an exceptional path: rows
with non-finite inputs), in blocks of bounded size, in the kernels' compute
dtype, with the same bias, causal cut and key padding as the kernel call.
"""

from __future__ import annotations

import torch

# elements of one block's temporaries (R rows x N keys x d): bounded whatever the sizes
_BLOCK_ELEMENTS = 1 << 22


def all_neg_inf_rows(l: torch.Tensor, *, q: torch.Tensor, k: torch.Tensor, table: torch.Tensor | None, r_lo: int,
                     clamp: bool, slopes: torch.Tensor | None, mask: torch.Tensor | None, scale: float,
                     q_offset: int, causal: bool) -> torch.Tensor | None:
    """Of one kernel call's rows, those whose visible scores are all -inf (bool like ``l``), or None if none.

    ``l`` (B, H, M) is the call's lse; ``q`` (B, H, M, d), ``k`` (B, H_kv, N, d)
    and the rest are the call's arguments, by the names of ``attention_fwd``'s
    schema (``table`` None when the call had none).  Only rows with NaN lse are examined: the others are not all -inf.
    """
    nan_rows = torch.isnan(l).nonzero()  # (R, 3): b, h, m
    if nan_rows.shape[0] == 0:
        return None
    n, d = k.shape[2], k.shape[3]
    group = q.shape[1] // k.shape[1]
    rows = 0 if table is None else table.shape[0]
    block = max(1, _BLOCK_ELEMENTS // max(n * d, rows, 1))
    keys = torch.arange(n, device=q.device)
    found = []
    for part in nan_rows.split(block):
        b, h, m = part.unbind(1)
        qs = q[b, h, m]                                   # (R, d)
        s = torch.einsum("rd,rnd->rn", qs, k[b, h // group])  # q . k, (R, N)
        dist = (q_offset + m)[:, None] - keys[None, :]    # r = pos_q - pos_k, (R, N)
        if table is not None and rows:
            idx = dist - r_lo
            inside = (idx >= 0) & (idx < rows)
            qt = qs @ table.transpose(0, 1)               # q . T[r] for every row of T, (R, rows)
            bias = qt.gather(1, idx.clamp(0, rows - 1))
            # outside the table: edge rows with clamp, else exactly 0 (never 0 * q: q may be NaN)
            s = s + (bias if clamp else torch.where(inside, bias, torch.zeros((), dtype=s.dtype, device=s.device)))
        s = s * scale
        if slopes is not None:
            s = s - slopes[h][:, None] * dist.abs().to(s.dtype)
        visible = torch.ones_like(s, dtype=torch.bool)
        if causal:
            visible &= dist >= 0
        if mask is not None:
            visible &= ~mask[b]
        neg_inf = (torch.isneginf(s) | ~visible).all(dim=1) & visible.any(dim=1)
        found.append(part[neg_inf])
    hits = torch.cat(found)
    if hits.shape[0] == 0:
        return None
    out = torch.zeros(l.shape, dtype=torch.bool, device=l.device)
    out[hits[:, 0], hits[:, 1], hits[:, 2]] = True
    return out
