"""The work and the messages of ring attention, decided from the layout alone.

Every rank computes the same schedule, so sends and receives match without
any negotiation.  Rank c's keys/values ("chunk c") travel forward around the
ring: at step s rank r holds chunk (r − s) mod P.  A (query rank, chunk) pair
is made of *tiles*, one fused-kernel call per (query segment, key segment):

* a tile the causal mask removes entirely is not computed;
* a tile that the mask does not cut is computed without it (every query sees
  every key), one that it cuts with it;
* a tile whose distances all fall outside the relative table's support (the
  wavelets', or a learned table's rows) is computed without the table: its
  bias is zero there.

A chunk stops travelling after the last rank that needs it (with a causal
contiguous layout, chunk c is needed by ranks c … P−1 only).  In the backward
the gradient of chunk c's keys/values follows the same path, accumulating
each visited rank's share, and then goes back to rank c directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ._layout import Segment, segments

# Distance bounds standing for "unbounded" (a clamped table extends its edge rows forever).
UNBOUNDED = (-(2**62), 2**62)


@dataclass(frozen=True)
class Tile:
    """One kernel call: the queries of segment ``q`` against the keys of segment ``k``."""

    q: Segment
    k: Segment
    q_offset: int   # first query's position relative to the first key's
    causal: bool    # the causal mask cuts through the tile
    biased: bool    # some visible distance has a nonzero table row


def tiles(q_segs: tuple[Segment, ...], k_segs: tuple[Segment, ...], causal: bool,
          support: tuple[int, int] | None, window: int = 0) -> tuple[Tile, ...]:
    """The tiles of queries ``q_segs`` against keys ``k_segs``.

    ``support`` is the (lowest, highest) distance r = pos_q − pos_k whose table
    row is nonzero, or None without a table.  With a sliding ``window``, a tile
    whose visible distances are all >= window in magnitude is not computed.
    """
    out = []
    for qs in q_segs:
        for ks in k_segs:
            if qs.length == 0 or ks.length == 0:
                continue
            r_min = qs.start - (ks.start + ks.length - 1)
            r_max = qs.start + qs.length - 1 - ks.start
            if causal and r_max < 0:
                continue  # every key is after every query
            cut = causal and r_min < 0
            lo = max(r_min, 0) if causal else r_min
            if window and min(abs(lo), abs(r_max)) >= window and (lo > 0 or r_max < 0):
                continue  # every visible pair lies outside the window
            biased = support is not None and max(lo, support[0]) <= min(r_max, support[1])
            out.append(Tile(qs, ks, qs.start - ks.start, cut, biased))
    return tuple(out)


@lru_cache(maxsize=64)
def last_hops(world: int, layout: str, causal: bool) -> tuple[int, ...]:
    """For each chunk c, the number of hops t such that rank c + t is the last one that needs it.

    Which (query rank, chunk) pairs have any visible key depends on the
    layout's order of segments only, not on the chunk length (2 stands for any).
    """
    segs = [segments(r, world, 2, layout) for r in range(world)]
    last = []
    for c in range(world):
        hops = 0
        for t in range(1, world):
            if tiles(segs[(c + t) % world], segs[c], causal, None):
                hops = t
        last.append(hops)
    return tuple(last)
