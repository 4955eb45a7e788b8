"""Which positions of a sequence each rank holds, and moving tensors between
the whole sequence and the ranks' chunks.

A sequence of length L split over P ranks gives each rank a chunk of C = L/P
positions, stored as one or two *segments* (runs of consecutive positions):

* ``"contiguous"``: rank r holds positions r·C … (r+1)·C − 1.
* ``"zigzag"``: the sequence is cut into 2P halves of C/2; rank r holds half r
  and half 2P−1−r, in that order.  Under a causal mask every rank then has
  the same amount of work (rank r's early half sees few keys, its late half
  many), where the contiguous layout leaves rank 0 one block and rank P−1 P.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .._validate import check_choice, check_int

LAYOUTS: tuple[str, ...] = ("contiguous", "zigzag")


@dataclass(frozen=True)
class Segment:
    """A run of ``length`` consecutive positions from ``start``, stored at ``local`` in the rank's chunk."""

    start: int
    local: int
    length: int


def segments(rank: int, world: int, chunk: int, layout: str) -> tuple[Segment, ...]:
    """The segments of rank ``rank``'s chunk of ``chunk`` positions (layout checked by the caller)."""
    if layout == "contiguous":
        return (Segment(rank * chunk, 0, chunk),)
    half = chunk // 2
    return (Segment(rank * half, 0, half), Segment((2 * world - 1 - rank) * half, half, half))


def _group_geometry(group: dist.ProcessGroup | None) -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialized: call torch.distributed.init_process_group first "
                           "(on one process, use wavepe.ops.wavelet_attention)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this process is not a member of the given group")
    return rank, dist.get_world_size(group)


def _check_split(length: int, world: int, layout: str, what: str) -> int:
    parts = world if layout == "contiguous" else 2 * world
    if length % parts:
        raise ValueError(f"{what}: the sequence length {length} must be divisible by {parts} "
                         f"({'the group size' if layout == 'contiguous' else 'twice the group size, for zigzag'})")
    return length // world


def _check_dim(x: torch.Tensor, dim: int) -> int:
    """``dim`` of tensor ``x``, as a non-negative index."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    dim = check_int("dim", dim)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {tuple(x.shape)}")
    return dim % x.dim()


def local_positions(seq_len: int, *, layout: str = "contiguous", group: dist.ProcessGroup | None = None,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """The global positions (int64, (L/P,)) this rank holds of a sequence of ``seq_len``.

    For RoPE'd q/k under context parallelism: rotate the local chunk by these
    positions (``wavepe.ops.rope(q, k, local_positions(L, layout=...), cfg)``).
    """
    seq_len = check_int("seq_len", seq_len, min_value=0)
    layout = check_choice("layout", layout, LAYOUTS)
    rank, world = _group_geometry(group)
    chunk = _check_split(seq_len, world, layout, "local_positions")
    parts = [torch.arange(s.start, s.start + s.length, device=device) for s in segments(rank, world, chunk, layout)]
    return torch.cat(parts)


def shard_sequence(x: torch.Tensor, dim: int = 2, *, layout: str = "contiguous",
                   group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This rank's chunk of ``x`` along ``dim`` (the sequence dimension; default 2, as in (B, H, L, d)).

    Every rank passes the whole sequence; the result is what
    :func:`context_parallel_attention` expects as this rank's q, k or v (or
    labels, positions, ... of the same tokens).  Differentiable (a slice).
    """
    layout = check_choice("layout", layout, LAYOUTS)
    dim = _check_dim(x, dim)
    rank, world = _group_geometry(group)
    chunk = _check_split(x.shape[dim], world, layout, "shard_sequence")
    parts = [x.narrow(dim, s.start, s.length) for s in segments(rank, world, chunk, layout)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def gather_sequence(x: torch.Tensor, dim: int = 2, *, layout: str = "contiguous",
                    group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The whole sequence from every rank's chunk along ``dim`` (the inverse of :func:`shard_sequence`).

    A collective (every rank of ``group`` calls it with equal shapes); not
    differentiable: for evaluation, logging and tests.
    """
    layout = check_choice("layout", layout, LAYOUTS)
    dim = _check_dim(x, dim)
    rank, world = _group_geometry(group)
    chunk = x.shape[dim]
    if layout == "zigzag" and chunk % 2:
        raise ValueError(f"gather_sequence: a zigzag chunk has two equal halves; got length {chunk}")
    pieces = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(pieces, x.detach().contiguous(), group=group)
    out = x.new_empty((*x.shape[:dim], chunk * world, *x.shape[dim + 1:]))
    for r, piece in enumerate(pieces):
        for s in segments(r, world, chunk, layout):
            out.narrow(dim, s.start, s.length).copy_(piece.narrow(dim, s.local, s.length))
    return out
