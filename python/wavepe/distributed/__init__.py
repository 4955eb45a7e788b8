"""Scale-out: attention over a sequence split across processes (context parallelism).

:func:`context_parallel_attention` is :func:`wavepe.ops.wavelet_attention`
for a sequence whose positions are spread over the ranks of a
``torch.distributed`` process group (ring attention over the fused kernels,
every position encoding, exact gradients).  :func:`shard_sequence`,
:func:`gather_sequence` and :func:`local_positions` move between the whole
sequence and a rank's chunk in either layout ("contiguous", "zigzag");
:class:`ContextParallel` makes :class:`wavepe.nn.PositionalAttention` (and so
the experiments' ``TinyLM``) run on a rank's chunk.

Data parallelism needs nothing from wavepe: wavepe's ops are ordinary autograd
ops, so DDP and FSDP wrap models that use them (docs/distributed.md).
"""

from __future__ import annotations

from ._context_parallel import POS_ENCS, ContextParallel, context_parallel_attention
from ._layout import LAYOUTS, gather_sequence, local_positions, shard_sequence

__all__ = ["context_parallel_attention", "ContextParallel", "shard_sequence", "gather_sequence", "local_positions", "LAYOUTS",
           "POS_ENCS"]
