"""``context_parallel_attention``: the public entry point, its checks and its settings."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group

from .._validate import check_choice, check_flag, check_int, check_real
from ..config import WaveletConfig
from ..ops import _routing
from ..ops._extension import func_transform_active
from ..ops.attention import (POS_ENCS, _acc_dtype, check_cu_seqlens, check_key_padding_mask, check_qkv, check_softcap,
                             check_window, position_bias)
from ..pos_enc import canonical_pos_enc
from ._layout import LAYOUTS, _group_geometry, local_positions, segments
from . import _ring_attention
from ._ring_attention import RingPlan, _Ring
from ._schedule import UNBOUNDED, last_hops

# The settings every rank must agree on, in the order they are compared (see _check_agreement).
_AGREED = ("batch", "heads", "kv_heads", "local length", "head_dim", "dtype", "pos_enc", "causal", "layout",
           "scale", "table rows", "r_lo", "clamp", "key_padding_mask given", "cu_seqlens boundaries", "window",
           "softcap", "cu_seqlens values (a checksum)")
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class ContextParallel:
    """Where a module's sequence lives: the process group holding it and the layout of its chunks.

    Assign it to :attr:`wavepe.nn.PositionalAttention.context_parallel` (or
    call :meth:`attention` yourself): the module then takes this rank's chunk
    (B, L/P, D) and attends over the whole sequence, RoPE at the chunk's
    global positions.
    """

    group: dist.ProcessGroup | None = None
    layout: str = "contiguous"
    validate: bool = True

    def __post_init__(self) -> None:
        check_choice("layout", self.layout, LAYOUTS)
        check_flag("validate", self.validate)

    def positions(self, local_len: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The global positions (L/P,) of this rank's chunk of ``local_len`` positions."""
        _, world = _group_geometry(self.group)
        return local_positions(check_int("local_len", local_len, min_value=0) * world, layout=self.layout,
                               group=self.group, device=device)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: WaveletConfig | None = None,
                  **kwargs) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """:func:`context_parallel_attention` with this group and layout."""
        return context_parallel_attention(q, k, v, config, group=self.group, layout=self.layout,
                                          validate=self.validate, **kwargs)


def context_parallel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: WaveletConfig | None = None,
    *,
    pos_enc: str = "wavelet",
    causal: bool = True,
    scale: float | None = None,
    alibi_slopes: torch.Tensor | None = None,
    rel_table: tuple[torch.Tensor, int] | None = None,
    clamp: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    window: int | None = None,
    softcap: float | None = None,
    layout: str = "contiguous",
    group: dist.ProcessGroup | None = None,
    return_lse: bool = False,
    validate: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """:func:`wavepe.ops.wavelet_attention` over a sequence split across the ranks of ``group`` (ring attention).

    Each rank passes its chunk of the sequence and gets its chunk of the
    output; the result, and every gradient, equals the single-process fused
    attention over the whole sequence.  Keys/values travel around the ring
    by point-to-point messages (gloo on CPUs, NCCL on GPUs: the same code)
    overlapped with the fused kernel's tiles; no rank holds more than a few
    chunks, and nothing of size L x L or (L/P) x (L/P) is allocated.

    Args:
        q: (B, H, C, d) this rank's queries, C = L/P; k, v: (B, H_kv, C, d),
            H a multiple of H_kv.  With ``layout="contiguous"`` rank r holds
            positions r·C … (r+1)·C − 1; with ``"zigzag"`` (the load-balanced
            layout for causal attention) halves r and 2P−1−r of 2P equal halves.
            :func:`shard_sequence` cuts a whole sequence this way.
        config, pos_enc, causal, scale, alibi_slopes, rel_table, clamp, window,
            softcap: as in :func:`wavepe.ops.wavelet_attention`.  Distances are
            global: r = pos_q − pos_k over the whole sequence (a chunk pair wholly
            outside the window is not computed).
        key_padding_mask: (B, C) bool, True = ignore this rank's key (it
            travels with the keys).
        cu_seqlens: packed sequences: the *global* document boundaries
            ``0 = cu[0] <= ... <= cu[-1] = L`` of the whole sequence (as in
            :func:`wavepe.ops.wavelet_attention`: int32/int64, (n_docs + 1,)
            for B = 1 or (B, n_docs + 1)), the same on every rank; documents
            may span ranks.  A query sees only its document's keys, at
            distances inside it.  Kept on the device (no host sync); on the
            CPU, tiles whose queries' documents hold none of its keys are
            skipped.
        group: the process group holding the sequence (default: the world).
        return_lse: also return the log-sum-exp (B, H, C) over the whole sequence.
        validate: compare shapes and settings across the group first (one
            small all-gather; a host sync on GPUs): mismatches raise a clear
            ``ValueError`` on every rank instead of hanging or corrupting.

    Returns:
        (B, H, C, d) in q's dtype (bf16/fp16 read by the kernels as they are and
        computed in fp32; each chunk pair's result rounded to q's dtype, merged in fp32);
        with ``return_lse``, ``(out, lse)``.

    Gradients: q, k, v get the gradient of the sum of every rank's loss
    (each rank's keys collect the contributions of every rank's queries).
    A learned ``rel_table`` and ``alibi_slopes`` are parameters replicated on
    every rank: like any replicated parameter's, their gradient on a rank is
    that rank's share, and the full gradient is the sum over the group —
    which DDP/FSDP over the group (averaging, like every other parameter)
    or ``dist.all_reduce`` does.
    """
    if func_transform_active():
        raise NotImplementedError(
            "context_parallel_attention does not run under torch.func transforms (vmap, grad, vjp, jacrev, ...): "
            "each call exchanges messages with the other ranks; differentiate it with torch.autograd "
            "(loss.backward(), torch.autograd.grad), and batch examples along B")
    b, h, h_kv, c, n, d = check_qkv(q, k, v)
    if n != c:
        raise ValueError(f"k and v must hold this rank's C={c} positions like q, got {tuple(k.shape)}")
    pos_enc = canonical_pos_enc(pos_enc, POS_ENCS)
    causal, clamp = check_flag("causal", causal), check_flag("clamp", clamp)
    return_lse, validate = check_flag("return_lse", return_lse), check_flag("validate", validate)
    layout = check_choice("layout", layout, LAYOUTS)
    scale = 1.0 / math.sqrt(d) if scale is None else check_real("scale", scale, positive=True)
    device = q.device
    _check_kernel(device)
    rank, world = _group_geometry(group)
    if layout == "zigzag" and c % 2:
        raise ValueError(f"layout='zigzag' needs an even chunk length (two equal halves), got C={c}")
    if world * c >= 2**60:
        raise OverflowError(f"the sequence length {world * c} ({world} ranks x {c}) is beyond the supported range")
    check_key_padding_mask(key_padding_mask, q, "(B, C)", b, c)
    length = world * c
    check_cu_seqlens(cu_seqlens, q, b, length, length, 0)
    if cu_seqlens is not None and length > 2**31 - 1:
        raise ValueError(f"cu_seqlens needs a sequence length <= 2^31 - 1, got {length}")
    window, softcap = check_window(window), check_softcap(softcap)
    # one table for every tile, in q's dtype (the kernels read half types as they are): the distances of the
    # whole sequence (positions 0 .. L-1 for queries and keys)
    table, r_lo, slopes = position_bias(q, pos_enc, q.dtype, length, length, 0, causal, config=config,
                                        rel_table=rel_table, alibi_slopes=alibi_slopes, clamp=clamp)
    group = dist.group.WORLD if group is None else group
    out, lse = _ring_attention_op(q, k, v, table, slopes, key_padding_mask, cu_seqlens, group_name=group.group_name,
                                  layout=layout, pos_enc=POS_ENCS.index(pos_enc), causal=causal, scale=scale,
                                  r_lo=r_lo, clamp=clamp, window=window, softcap=softcap, validate=validate)
    return (out, lse) if return_lse else out


# ---- the op: the ring behind one custom op ------------------------------------------------------------
# The ring posts messages and reads the boundaries on the host (to skip tiles), so its forward and backward are
# custom ops, opaque to torch.compile and torch.export: the graph holds one node per call, run eagerly with
# real tensors (the process group travels by name), and the fake kernel gives the shapes.  Nothing of the
# ring is traced, so a compiled or exported call is the eager one.

_Tensor = torch.Tensor


def _plan(group_name: str, layout: str, causal: bool, scale: float, r_lo: int, clamp: bool, window: int,
          softcap: float, q: _Tensor, table: _Tensor | None, cu: _Tensor | None) -> RingPlan:
    """The ring's plan for a call (the schedule, from the layout; the kernel settings)."""
    group = _resolve_process_group(group_name)
    rank, world = _group_geometry(group)
    c = q.shape[2]
    # the distances whose table row is nonzero (a wavelet table's first and last rows are)
    support: tuple[int, int] | None = None
    if table is not None and table.shape[0]:
        support = UNBOUNDED if clamp else (r_lo, r_lo + table.shape[0] - 1)
    docs = None
    if cu is not None and cu.device.type == "cpu":  # on the host already: the schedule skips tiles across documents
        docs = tuple(tuple(row) for row in cu.reshape(-1, cu.shape[-1]).tolist())
    return RingPlan(ring=_Ring(group, rank, world), segs=tuple(segments(r, world, c, layout) for r in range(world)),
                    last=last_hops(world, layout, causal), causal=causal, scale=scale, r_lo=r_lo, clamp=clamp,
                    support=support, acc_dtype=_acc_dtype(q.dtype), window=window, softcap=softcap, docs=docs)


def _wire(key_padding_mask: _Tensor | None, cu_seqlens: _Tensor | None) -> tuple[_Tensor | None, _Tensor | None]:
    """The mask and the boundaries as the ring carries them: uint8 (the wire type), int32."""
    mask = None if key_padding_mask is None else key_padding_mask.contiguous().view(torch.uint8)
    cu = None if cu_seqlens is None else cu_seqlens.to(torch.int32).contiguous()
    return mask, cu


@torch.library.custom_op("wavepe::ring_attention", mutates_args=())
def _ring_attention_op(q: _Tensor, k: _Tensor, v: _Tensor, table: _Tensor | None, slopes: _Tensor | None,
                       key_padding_mask: _Tensor | None, cu_seqlens: _Tensor | None, *, group_name: str, layout: str,
                       pos_enc: int, causal: bool, scale: float, r_lo: int, clamp: bool, window: int, softcap: float,
                       validate: bool) -> tuple[_Tensor, _Tensor]:
    """(out in q's dtype, lse in the accumulation dtype) of this rank's queries over the whole sequence."""
    mask, cu = _wire(key_padding_mask, cu_seqlens)
    if cu is not None and cu.device.type == "cpu":
        # checked before any message (a kernel's error on one tile would leave the other ranks waiting)
        rows = cu.reshape(-1, cu.shape[-1])
        steps = rows[:, 1:] < rows[:, :-1]
        if bool(steps.any()):
            row, i = (int(x) for x in torch.nonzero(steps)[0])
            raise ValueError(f"cu_seqlens of batch row {row} must not decrease, got cu_seqlens[{i + 1}]="
                             f"{int(rows[row, i + 1])} after {int(rows[row, i])}")
    plan = _plan(group_name, layout, causal, scale, r_lo, clamp, window, softcap, q, table, cu)
    if validate:
        b, h, c, d = q.shape
        _check_agreement(plan.ring.group, plan.ring.world, q.device, [
            b, h, k.shape[1], c, d, _DTYPES.index(q.dtype), pos_enc, int(causal),
            LAYOUTS.index(layout), struct.unpack("<q", struct.pack("<d", scale))[0],
            -1 if table is None else table.shape[0], r_lo, int(clamp), int(mask is not None),
            -1 if cu is None else cu.shape[-1], window, struct.unpack("<q", struct.pack("<d", softcap))[0]],
            _checksum(cu))
    out, lse = _ring_attention.ring_forward(plan, q, k, v, table, slopes, mask, cu)
    return out.to(q.dtype), lse


@_ring_attention_op.register_fake
def _ring_attention_fake(q, k, v, table, slopes, key_padding_mask, cu_seqlens, **_):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=_acc_dtype(q.dtype))


@torch.library.custom_op("wavepe::ring_attention_backward", mutates_args=())
def _ring_attention_backward_op(grad_out: _Tensor | None, grad_lse: _Tensor | None, q: _Tensor, k: _Tensor,
                                v: _Tensor, table: _Tensor | None, slopes: _Tensor | None,
                                key_padding_mask: _Tensor | None, cu_seqlens: _Tensor | None, out: _Tensor,
                                lse: _Tensor, *, group_name: str, layout: str, causal: bool, scale: float, r_lo: int,
                                clamp: bool, window: int, softcap: float, table_grad: bool, slopes_grad: bool
                                ) -> tuple[_Tensor, _Tensor, _Tensor, _Tensor, _Tensor]:
    """(dq, dk, dv, dtable, dslopes) in the inputs' dtypes; dtable / dslopes empty where not asked for.  The
    ring's backward is not itself differentiable (no autograd is registered for this op)."""
    mask, cu = _wire(key_padding_mask, cu_seqlens)
    plan = _plan(group_name, layout, causal, scale, r_lo, clamp, window, softcap, q, table, cu)
    dq, dk, dv, dtable, dslopes = _ring_attention.ring_backward(
        plan, q, k, v, table, slopes, mask, out, lse, grad_out, grad_lse, table_grad=table_grad,
        slopes_grad=slopes_grad, cu=cu)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
            q.new_empty((0,)) if dtable is None else dtable.to(q.dtype),
            lse.new_empty((0,)) if dslopes is None else dslopes.to(lse.dtype))


@_ring_attention_backward_op.register_fake
def _ring_attention_backward_fake(grad_out, grad_lse, q, k, v, table, slopes, key_padding_mask, cu_seqlens, out, lse,
                                  *, table_grad, slopes_grad, **_):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty(table.shape if table_grad and table is not None else (0,)),
            lse.new_empty(slopes.shape if slopes_grad and slopes is not None else (0,)))


_SETTINGS = ("group_name", "layout", "causal", "scale", "r_lo", "clamp", "window", "softcap")


def _ring_setup(ctx, inputs, keyword_only_inputs, output):
    q, k, v, table, slopes, mask, cu = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, table, slopes, mask, cu, out, lse)
    ctx.settings = {n: keyword_only_inputs[n] for n in _SETTINGS}


def _ring_backward(ctx, grad_out, grad_lse):
    q, k, v, table, slopes, mask, cu, out, lse = ctx.saved_tensors
    need = ctx.needs_input_grad
    table_grad, slopes_grad = table is not None and bool(need[3]), slopes is not None and bool(need[4])
    dq, dk, dv, dtable, dslopes = _ring_attention_backward_op(
        grad_out, grad_lse, q, k, v, table, slopes, mask, cu, out, lse, **ctx.settings, table_grad=table_grad,
        slopes_grad=slopes_grad)
    return dq, dk, dv, dtable if table_grad else None, dslopes if slopes_grad else None, None, None


_ring_attention_op.register_autograd(_ring_backward, setup_context=_ring_setup)


def _check_kernel(device: torch.device) -> None:
    # the ring merges the fused kernel's partial (out, lse) tiles: no plain-PyTorch fallback
    if not _routing.has_kernel("attention_fwd", device):
        raise NotImplementedError(
            f"context_parallel_attention needs wavepe's fused attention kernel on device {device.type!r}; it "
            "exists on the CPU, on CUDA when wavepe was built with the CUDA kernels, and on any device whose "
            "dispatch key has a wavepe::attention_fwd kernel")


def _checksum(cu: torch.Tensor | None) -> torch.Tensor:
    """A position-weighted sum of the boundaries (one int64 on their device; 0 without), computed there."""
    if cu is None:
        return torch.zeros(1, dtype=torch.int64)
    flat = cu.reshape(-1).to(torch.int64)
    weights = torch.arange(1, flat.numel() + 1, dtype=torch.int64, device=flat.device)
    return (flat * weights).sum().reshape(1)


def _check_agreement(group: dist.ProcessGroup, world: int, device: torch.device, values: list[int],
                     checksum: torch.Tensor) -> None:
    """All-gather the settings (``values``, then ``checksum``: one int64 computed on a device) and raise the
    same ValueError on every rank if they differ."""
    mine = torch.cat([torch.tensor(values, dtype=torch.int64, device=device), checksum.to(device)])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    table = np.stack([t.cpu().numpy() for t in every])
    for i, name in enumerate(_AGREED):
        col = table[:, i]
        if (col != col[0]).any():
            shown = [_decode(name, int(x)) for x in col]
            raise ValueError(f"context_parallel_attention: the ranks disagree on {name}: "
                             + ", ".join(f"rank {r}: {val}" for r, val in enumerate(shown))
                             + " (every rank passes an equal chunk of the same sequence, with the same settings)")


def _decode(name: str, value: int) -> object:
    """A setting as _check_agreement encoded it, for the error message."""
    if name == "dtype":
        return _DTYPES[value]
    if name == "pos_enc":
        return POS_ENCS[value]
    if name == "layout":
        return LAYOUTS[value]
    if name in ("scale", "softcap"):
        return struct.unpack("<d", struct.pack("<q", value))[0]
    if name in ("causal", "clamp", "key_padding_mask given"):
        return bool(value)
    if name == "cu_seqlens boundaries":
        return "none" if value < 0 else value
    return value
