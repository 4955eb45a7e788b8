"""Batching rules of the ops (``torch.func.vmap``): a vmapped dimension folds into the ops' own batch dimension.

Every op computes many independent problems at once -- the attention and RoPE over (B, ...), the relative
bias over any leading dimensions of q, ALiBi over its heads -- so ``vmap`` of an op is the op on a batch
V times larger: one kernel call, at full speed, instead of torch's per-example fallback (V calls, and a
warning).  What cannot fold runs once per example and is stacked, which is what vmap means:

* a *shared* input that is itself vmapped (a relative table, ALiBi slopes or a RoPE spectrum per example:
  the kernels take one for the whole batch);
* a gradient the backward sums over the batch (the table's, the slopes') while other inputs are vmapped:
  each example needs its own sum.

Rules receive the op's arguments positionally, in schema order (wavepe's callers pass them so, and the
dispatcher normalises keywords), and ``in_dims`` aligned with them; trailing arguments equal to their
defaults may be left out (the dispatcher drops them).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ._extension import schema_names

Tensor = torch.Tensor


def _at0(x: Tensor, dim: int | None, size: int) -> Tensor:
    """x with its vmapped dimension first (an unbatched x expanded to ``size`` examples, no copy)."""
    if dim is None:
        return x.unsqueeze(0).expand(size, *x.shape)
    return x.movedim(dim, 0)


def _fold(x: Tensor, dim: int | None, size: int) -> Tensor:
    """(V, B, ...) -> (V * B, ...): the examples folded into the op's batch dimension."""
    x = _at0(x, dim, size)
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _unfold(x: Tensor, size: int) -> Tensor:
    return x.reshape(size, x.shape[0] // size, *x.shape[1:])


def _per_example(op: Callable[..., Any], size: int, in_dims: tuple, args: tuple) -> tuple[Any, Any]:
    """The op once per example, results stacked along dimension 0."""
    results = []
    for i in range(size):
        one = [a.select(d, i) if d is not None and isinstance(a, Tensor) else a for a, d in zip(args, in_dims)]
        results.append(op(*one))
    if isinstance(results[0], Tensor):
        return torch.stack(results), 0
    return tuple(torch.stack([r[j] for r in results]) for j in range(len(results[0]))), (0,) * len(results[0])


def _batched(in_dims: tuple, names: tuple[str, ...], which: tuple[str, ...]) -> bool:
    dims = dict(zip(names, in_dims))
    return any(dims.get(n) is not None for n in which)


# ---- the fused attention: q, k, v, out, grad_out (B, H, L, d), lse (B, H, M), masks (B, N) fold into B -----

_FWD, _BWD = schema_names("attention_fwd"), schema_names("attention_bwd")
_PER_BATCH = ("grad_out", "grad_lse", "q", "k", "v", "out", "lse", "key_padding_mask")


def _fold_cu(cu: Tensor | None, dim: int | None, size: int, batch: int) -> Tensor | None:
    """Packed boundaries, (n + 1,) for B = 1 or (B, n + 1), as (V * B, n + 1) rows."""
    if cu is None:
        return None
    if dim is None:
        rows = cu.reshape(-1, cu.shape[-1])
        return rows.unsqueeze(0).expand(size, batch, cu.shape[-1]).reshape(size * batch, cu.shape[-1])
    cu = cu.movedim(dim, 0)
    return cu.reshape(size * batch, cu.shape[-1])


def _attention_rule(op, names: tuple[str, ...], reduced: tuple[str, ...]):
    """The rule of attention_fwd / attention_bwd: per-batch tensors folded, per-batch outputs unfolded; the
    outputs that are not per batch (the backward's dtable, dslopes) are never asked for when it folds."""

    def rule(info, in_dims, *args):
        a, dims, size = dict(zip(names, args)), dict(zip(names, in_dims)), info.batch_size
        if _batched(in_dims, names, ("table", "slopes")) or any(a.get(flag) for flag in reduced):
            return _per_example(op, size, in_dims, args)
        batch = _at0(a["q"], dims["q"], size).shape[1]
        folded = []
        for n, x in zip(names, args):
            if n in _PER_BATCH and isinstance(x, Tensor):
                x = _fold(x, dims[n], size)
            elif n == "cu_seqlens":
                x = _fold_cu(x, dims[n], size, batch)
            folded.append(x)
        outs = op(*folded)
        return tuple(_unfold(o, size) if i < 3 else o for i, o in enumerate(outs)), \
            tuple(0 if i < 3 else None for i in range(len(outs)))

    return rule


_attention_fwd_rule = _attention_rule(torch.ops.wavepe.attention_fwd.default, _FWD, ())
_attention_bwd_rule = _attention_rule(torch.ops.wavepe.attention_bwd.default, _BWD, ("table_grad", "slopes_grad"))


# ---- the relative bias: q (..., M, d) and grad (..., M, N) take any leading dimensions ---------------------

_REL, _REL_BWD = schema_names("rel_bias"), schema_names("rel_bias_backward")


def _rel_bias_rule(info, in_dims, *args):
    op = torch.ops.wavepe.rel_bias.default
    if _batched(in_dims, _REL, ("table",)):
        return _per_example(op, info.batch_size, in_dims, args)
    q, *rest = args
    return op(_at0(q, in_dims[0], info.batch_size), *rest), 0


def _rel_bias_backward_rule(info, in_dims, *args):
    op = torch.ops.wavepe.rel_bias_backward.default
    a = dict(zip(_REL_BWD, args))
    if _batched(in_dims, _REL_BWD, ("table",)) or a["output_mask"][1]:
        return _per_example(op, info.batch_size, in_dims, args)
    size = info.batch_size
    grad, q = _at0(a["grad"], in_dims[0], size), _at0(a["q"], in_dims[1], size)
    dq, dt = op(grad, q, *args[2:])
    return (dq, dt), (0 if a["output_mask"][0] else None, None)


# ---- RoPE: q, k (B, H, L, d) and positions (B, L) fold into B; (L,) positions are shared --------------------

_ROPE = schema_names("rope")


def _rope_rule(info, in_dims, *args):
    op = torch.ops.wavepe.rope.default
    if _batched(in_dims, _ROPE, ("inv_freq",)):
        return _per_example(op, info.batch_size, in_dims, args)
    a, dims, size = dict(zip(_ROPE, args)), dict(zip(_ROPE, in_dims)), info.batch_size
    q = _at0(a["q"], dims["q"], size)
    batch = q.shape[1]
    k = a["k"]
    k_out_empty = k is None
    k = None if k is None else _fold(k, dims["k"], size)
    pos = a["positions"]
    if pos is not None and (dims["positions"] is not None or (pos.dim() == 2 and pos.shape[0] == batch != 1)):
        # positions of their own per example or per batch row: one row per folded row
        pos = _at0(pos, dims["positions"], size)
        pos = pos.reshape(size, -1, pos.shape[-1]).expand(size, batch, pos.shape[-1]).reshape(size * batch, -1)
    a.update(q=q.reshape(size * batch, *q.shape[2:]), k=k, positions=pos)
    q_out, k_out = op(*(a[n] for n in _ROPE[:len(args)]))
    q_out = _unfold(q_out, size)
    if k_out_empty:  # (B, 0, L, d): the shape of "no k" stays one per example
        return (q_out, k_out[:batch]), (0, None)
    return (q_out, _unfold(k_out, size)), (0, 0)


# ---- ALiBi: slopes (H,) per example fold into the heads ------------------------------------------------------

def _alibi_rule(info, in_dims, slopes, *rest):
    op = torch.ops.wavepe.alibi_bias.default
    size = info.batch_size
    s = _at0(slopes, in_dims[0], size)
    out = op(s.reshape(-1), *rest)
    return out.reshape(size, s.shape[1], *out.shape[1:]), 0


for _op, _rule in (("attention_fwd", _attention_fwd_rule), ("attention_bwd", _attention_bwd_rule),
                   ("rel_bias", _rel_bias_rule), ("rel_bias_backward", _rel_bias_backward_rule),
                   ("rope", _rope_rule), ("alibi_bias", _alibi_rule)):
    torch.library.register_vmap(f"wavepe::{_op}", _rule)
