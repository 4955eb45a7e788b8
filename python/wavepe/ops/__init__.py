"""PyTorch API of wavepe: custom ops under ``torch.ops.wavepe`` with fake
kernels (``torch.compile``) and autograd, and typed Python wrappers.

Importing this module imports torch and loads the compiled extension.
"""

from __future__ import annotations

from ._extension import ops as raw_ops
from .alibi import alibi_bias

__all__ = ["alibi_bias", "raw_ops"]
