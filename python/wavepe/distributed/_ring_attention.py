"""Ring attention over the fused kernels: its forward, its backward and their messages (the custom ops
``wavepe::ring_attention`` and ``wavepe::ring_attention_backward`` that run them, and their autograd, are in
``_context_parallel.py``).

Forward (rank r, P ranks): keys/values travel around the ring; at step s the
rank computes its queries against chunk (r − s) mod P with
``torch.ops.wavepe.attention_fwd`` (one call per tile, with the tile's
``q_offset``) and merges the partial (out, lse) by log-sum-exp:

    lse = log Σ_j exp(lse_j),   out = Σ_j exp(lse_j − lse) · out_j

The next chunk's messages are posted before the current chunk is computed,
so communication overlaps compute.

Non-finite scores (docs/DEVELOPING.md, "Non-finite values"): a tile row whose
visible scores are all -inf weighs zero in the whole row's softmax, where
the single-process kernel would give it NaN (0/0).  The tiles are computed
with ``mark_neg_inf=True``, so the kernel marks such rows itself (out = 0,
lse = +inf, a code nothing else produces: csrc/core/attention.h); they enter
the merge as (0, -inf), like a row that sees no key, and are remembered: a
row that no tile gave a finite lse ends NaN, as the single-process kernel
(and the float64 oracle) gives it.  A NaN or +inf score in any tile keeps
its row NaN through the log-sum-exp.  All of it is tensor operations: no
host sync per tile.  The backward needs nothing more: its tiles see the
global lse, as the single-process kernel's keys do.

Packed sequences (``cu_seqlens``, the global document boundaries): each
tile passes them shifted by its first key's global position, in the keys'
coordinate the kernels take (csrc/core/attention.h); where the boundaries
are on the host (a CPU run), tiles whose queries' documents hold none of
the tile's keys are not computed.

Backward (FlashAttention-2 style): each tile's ``attention_bwd`` gets the
*global* out and lse, so its softmax probabilities, and D = rowsum(dO ∘ O),
are the full attention's; dq accumulates locally, and the gradient of each
chunk's keys/values accumulates as it follows the chunk around the ring and
then returns to the chunk's owner.  The keys' messages for the next step are
posted before the current tile; the incoming gradient is awaited only after
it, so the accumulator's transfer hides behind the tile's compute too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ..ops._extension import ops
from ._layout import Segment
from ._schedule import Tile, tiles

# Message tags: several tensors go to the same peer in one batch (gloo matches by tag;
# NCCL by order, which is the same on both sides).
_TAG_K, _TAG_V, _TAG_MASK, _TAG_DK, _TAG_DV, _TAG_HOME_DK, _TAG_HOME_DV = range(7)


class _Ring:
    """A process group seen as a ring: point-to-point messages to group ranks."""

    def __init__(self, group: dist.ProcessGroup, rank: int, world: int) -> None:
        self.group, self.rank, self.world = group, rank, world
        self.next, self.prev = (rank + 1) % world, (rank - 1) % world

    def post(self, sends: list[tuple[torch.Tensor, int, int]],
             recvs: list[tuple[torch.Tensor, int, int]]) -> list[Any]:
        """Start one batch of (tensor, group peer, tag) sends and receives; returns the works to wait on."""
        p2p = [dist.P2POp(dist.isend, t, group=self.group, group_peer=peer, tag=tag) for t, peer, tag in sends]
        p2p += [dist.P2POp(dist.irecv, t, group=self.group, group_peer=peer, tag=tag) for t, peer, tag in recvs]
        return dist.batch_isend_irecv(p2p) if p2p else []


def _wait(works: list[Any]) -> None:
    """Wait for a batch and forget it: works keep their tensors alive, and the ring's memory is a few chunks."""
    for w in works:
        w.wait()
    works.clear()


@dataclass
class RingPlan:
    """Everything a call needs besides tensors: the ring, the schedule and the kernel settings."""

    ring: _Ring
    segs: tuple[tuple[Segment, ...], ...]  # per group rank
    last: tuple[int, ...]                  # per chunk: hops to the last rank that needs it
    causal: bool
    scale: float
    r_lo: int
    clamp: bool
    support: tuple[int, int] | None
    acc_dtype: torch.dtype                 # partial results are merged and summed in this
    window: int = 0                        # sliding window (0: none): distances are global, the kernels' rule
    softcap: float = 0.0                   # logit soft-cap (0: none)
    # packed sequences: the global document boundaries of each batch row, when they are on the host (else
    # None: every tile is computed, the kernels skip the keys outside the queries' documents)
    docs: tuple[tuple[int, ...], ...] | None = None
    _tiles: dict[int, tuple[Tile, ...]] = field(default_factory=dict)

    def tiles(self, chunk: int) -> tuple[Tile, ...]:
        hit = self._tiles.get(chunk)
        if hit is None:
            hit = tiles(self.segs[self.ring.rank], self.segs[chunk], self.causal, self.support, self.window)
            if self.docs is not None:
                hit = tuple(t for t in hit if _shares_a_document(self.docs, t, self.causal))
            self._tiles[chunk] = hit
        return hit

    def holds(self, step: int) -> bool:
        """Whether this rank holds a chunk at ``step`` (chunks stop after their last user)."""
        return step < self.ring.world and step <= self.last[(self.ring.rank - step) % self.ring.world]


def _shares_a_document(docs: tuple[tuple[int, ...], ...], t: Tile, causal: bool) -> bool:
    """Whether some query of tile ``t`` sees some of its keys under the boundaries ``docs`` (per batch row)."""
    q_lo, q_hi = t.q.start, t.q.start + t.q.length      # global positions [lo, hi)
    k_lo, k_hi = t.k.start, t.k.start + t.k.length
    for cu in docs:
        for lo, hi in zip(cu, cu[1:]):
            ql, qh, kl, kh = max(lo, q_lo), min(hi, q_hi), max(lo, k_lo), min(hi, k_hi)
            if ql < qh and kl < kh and (not causal or qh - 1 >= kl):  # the document's last query sees its first key
                return True
    return False


class _Boundaries:
    """The global boundaries (int32, on the device) shifted into each tile's keys' coordinate, made once per start."""

    def __init__(self, cu: torch.Tensor | None) -> None:
        self.cu, self._shifted = cu, {}

    def at(self, key_start: int) -> torch.Tensor | None:
        if self.cu is None:
            return None
        hit = self._shifted.get(key_start)
        if hit is None:
            hit = self._shifted[key_start] = self.cu - key_start
        return hit


def _kv_messages(plan: RingPlan, step: int, held: tuple[torch.Tensor | None, ...]
                 ) -> tuple[list[Any], tuple[torch.Tensor | None, ...]]:
    """Post the transfer of the keys/values for ``step + 1``: send what this rank holds forward, receive
    what the previous rank holds.  Returns (works, the buffers that will hold step + 1's chunk)."""
    ring = plan.ring
    sends, recvs = [], []
    if plan.holds(step) and _forwards(plan, step):
        sends = [(t, ring.next, tag) for t, tag in zip(held, (_TAG_K, _TAG_V, _TAG_MASK)) if t is not None]
    incoming: tuple[torch.Tensor | None, ...] = (None, None, None)
    if plan.holds(step + 1):
        incoming = tuple(None if t is None else torch.empty_like(t) for t in held)
        recvs = [(t, ring.prev, tag) for t, tag in zip(incoming, (_TAG_K, _TAG_V, _TAG_MASK)) if t is not None]
    return ring.post(sends, recvs), incoming


def _forwards(plan: RingPlan, step: int) -> bool:
    """Whether the chunk held at ``step`` goes on to the next rank."""
    r, p = plan.ring.rank, plan.ring.world
    return step + 1 < p and step + 1 <= plan.last[(r - step) % p]


def _rows(x: torch.Tensor, seg: Segment) -> torch.Tensor:
    """The positions of ``seg`` in a (B, H, C, ...) tensor (a view)."""
    return x.narrow(2, seg.local, seg.length)


def _mask_rows(mask: torch.Tensor | None, seg: Segment) -> torch.Tensor | None:
    """The key padding mask of ``seg`` as the kernels take it (it travels as uint8)."""
    return None if mask is None else mask.narrow(1, seg.local, seg.length).view(torch.bool)


def _merge(out: torch.Tensor, lse: torch.Tensor, o: torch.Tensor, l: torch.Tensor) -> None:
    """Fold a partial (o, l) into the running (out, lse) in place; rows that saw no key stay (0, -inf).

    ``o`` is a fresh kernel output and is scaled in place (no temporary of its size)."""
    new = torch.logaddexp(lse, l)
    base = new.masked_fill(torch.isneginf(new), 0.0)
    w = torch.exp(l - base).unsqueeze(-1)
    if o.dtype == out.dtype:
        o.mul_(w)
    else:  # a half-precision kernel output (CUDA): widen it first
        o = o.to(out.dtype).mul_(w)
    out.mul_(torch.exp(lse - base).unsqueeze(-1)).add_(o)
    lse.copy_(new)


def _add_rows(acc: torch.Tensor | None, seg: Segment, value: torch.Tensor, like: torch.Tensor,
              dtype: torch.dtype) -> torch.Tensor:
    """``acc[:, :, seg] += value``, allocating ``acc`` (zeros shaped like ``like``) on first use.

    A value that covers every row, in the accumulation dtype, becomes the
    accumulator itself: it is a fresh kernel output, and one tile per chunk
    is the common case (contiguous layout), so no zero-filled buffer is made."""
    if acc is None:
        if seg.local == 0 and seg.length == like.shape[2] and value.dtype == dtype:
            return value
        acc = torch.zeros(like.shape, dtype=dtype, device=like.device)
    _rows(acc, seg).add_(value)
    return acc


def ring_forward(plan: RingPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor | None,
                 slopes: torch.Tensor | None, mask: torch.Tensor | None, cu: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of this rank's queries against the whole sequence, in the accumulation dtype.

    ``cu``: the global document boundaries (int32, (B, n_docs + 1) or (n_docs + 1,)), or None."""
    ring = plan.ring
    adt = plan.acc_dtype  # the kernels read q, k, v in their own dtype (bf16/fp16 too)
    out = torch.zeros(q.shape, dtype=adt, device=q.device)
    lse = torch.full(q.shape[:3], float("-inf"), dtype=adt, device=q.device)
    neg_inf_only = torch.zeros(lse.shape, dtype=torch.bool, device=lse.device)  # some tile: all -inf
    bounds = _Boundaries(cu)
    held: tuple[torch.Tensor | None, ...] = (k.contiguous(), v.contiguous(), mask)
    for step in range(ring.world):
        works, incoming = _kv_messages(plan, step, held)
        if plan.holds(step):
            chunk = (ring.rank - step) % ring.world
            kc, vc, kpm = held
            for t in plan.tiles(chunk):
                o, l = ops.attention_fwd(q=_rows(q, t.q), k=_rows(kc, t.k), v=_rows(vc, t.k),
                                         table=table if t.biased else None, r_lo=plan.r_lo, clamp=plan.clamp,
                                         slopes=slopes, key_padding_mask=_mask_rows(kpm, t.k),
                                         scale=plan.scale, q_offset=t.q_offset, causal=t.causal,
                                         cu_seqlens=bounds.at(t.k.start), mark_neg_inf=True, window=plan.window,
                                         softcap=plan.softcap)
                # rows whose visible scores are all -inf: out = 0, lse = +inf (the kernel's code), a zero-weight
                # partial merged like a row that sees no key
                marked = torch.isposinf(l)
                _rows(neg_inf_only, t.q).logical_or_(marked)
                _merge(_rows(out, t.q), _rows(lse, t.q), o, l.masked_fill_(marked, float("-inf")))
        _wait(works)
        held = incoming
    # all -inf wherever they saw a key: NaN (0/0), as over the whole sequence
    nan_rows = neg_inf_only.logical_and_(torch.isneginf(lse))
    out.masked_fill_(nan_rows.unsqueeze(-1), float("nan"))
    lse.masked_fill_(nan_rows, float("nan"))
    return out, lse


def ring_backward(plan: RingPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor | None,
                  slopes: torch.Tensor | None, mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor,
                  grad_out: torch.Tensor | None, grad_lse: torch.Tensor | None, table_grad: bool, slopes_grad: bool,
                  cu: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(dq, dk, dv, dtable, dslopes) of this rank's chunk, in the accumulation dtype.

    dk/dv of this rank's keys sum every rank's queries' contributions; dtable
    and dslopes are this rank's share (the tiles it computed), to be summed over
    the group like any replicated parameter's gradient.
    """
    ring = plan.ring
    adt = plan.acc_dtype
    oc = out.to(q.dtype)  # the merged output (accumulation dtype) as the kernels read it
    go = torch.zeros_like(oc) if grad_out is None else grad_out.to(q.dtype)
    gl = None if grad_lse is None else grad_lse.to(lse.dtype)
    dq: torch.Tensor | None = None
    dtable = torch.zeros(table.shape, dtype=adt, device=q.device) if table_grad and table is not None else None
    dslopes = torch.zeros(slopes.shape, dtype=adt, device=q.device) if slopes_grad and slopes is not None else None
    bounds = _Boundaries(cu)
    held: tuple[torch.Tensor | None, ...] = (k.contiguous(), v.contiguous(), mask)
    acc_works: list[Any] = []          # the previous step's accumulator batch (its sends and receives)
    acc_in: tuple[torch.Tensor, torch.Tensor] | None = None
    home: tuple[torch.Tensor, torch.Tensor] | None = None
    kv_shape = k.shape
    for step in range(ring.world):
        kv_works, incoming = _kv_messages(plan, step, held)
        sends, recvs = [], []
        if plan.holds(step):
            chunk = (ring.rank - step) % ring.world
            kc, vc, kpm = held
            dk = dv = None
            for t in plan.tiles(chunk):
                tq, tk = t.q, t.k
                g_dq, g_dk, g_dv, g_dt, g_ds = ops.attention_bwd(
                    grad_out=_rows(go, tq), grad_lse=None if gl is None else _rows(gl, tq), q=_rows(q, tq),
                    k=_rows(kc, tk), v=_rows(vc, tk), out=_rows(oc, tq), lse=_rows(lse, tq),
                    table=table if t.biased else None, r_lo=plan.r_lo, clamp=plan.clamp, slopes=slopes,
                    key_padding_mask=_mask_rows(kpm, tk), scale=plan.scale, q_offset=t.q_offset, causal=t.causal,
                    table_grad=dtable is not None and t.biased, slopes_grad=dslopes is not None,
                    cu_seqlens=bounds.at(tk.start), mark_neg_inf=True, window=plan.window, softcap=plan.softcap)
                dq = _add_rows(dq, tq, g_dq, q, adt)
                dk = _add_rows(dk, tk, g_dk, k, adt)
                dv = _add_rows(dv, tk, g_dv, k, adt)
                if dtable is not None and t.biased:
                    dtable.add_(g_dt)
                if dslopes is not None:
                    dslopes.add_(g_ds)
            _wait(acc_works)  # the accumulator of this chunk from the previous rank (posted a step ago)
            if acc_in is not None:  # it carries on in the received buffers
                if dk is not None and dv is not None:
                    acc_in[0].add_(dk)
                    acc_in[1].add_(dv)
                dk, dv = acc_in
            elif dk is None or dv is None:  # a rank that only passes the chunk on (no tile of it is visible)
                dk = torch.zeros(kv_shape, dtype=adt, device=q.device)
                dv = torch.zeros(kv_shape, dtype=adt, device=q.device)
            if _forwards(plan, step):
                sends = [(dk, ring.next, _TAG_DK), (dv, ring.next, _TAG_DV)]
            elif step > 0:  # the last rank to need this chunk: its gradient goes home
                sends = [(dk, chunk, _TAG_HOME_DK), (dv, chunk, _TAG_HOME_DV)]
            else:
                home = (dk, dv)
            del dk, dv
        else:
            _wait(acc_works)
        acc_in = None
        if plan.holds(step + 1):
            acc_in = (torch.empty(kv_shape, dtype=adt, device=q.device),
                      torch.empty(kv_shape, dtype=adt, device=q.device))
            recvs += [(acc_in[0], ring.prev, _TAG_DK), (acc_in[1], ring.prev, _TAG_DV)]
        last_own = plan.last[ring.rank]
        if step == last_own and step > 0:
            home = (torch.empty(kv_shape, dtype=adt, device=q.device),
                    torch.empty(kv_shape, dtype=adt, device=q.device))
            owner_last = (ring.rank + last_own) % ring.world
            recvs += [(home[0], owner_last, _TAG_HOME_DK), (home[1], owner_last, _TAG_HOME_DV)]
        acc_works = ring.post(sends, recvs)
        del sends  # the works keep what is in flight; nothing else holds it
        _wait(kv_works)
        held = incoming
        del incoming
    _wait(acc_works)
    assert home is not None
    if dq is None:
        dq = torch.zeros(q.shape, dtype=adt, device=q.device)
    return dq, home[0], home[1], dtable, dslopes
