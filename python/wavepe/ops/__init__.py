"""PyTorch API of wavepe: custom ops under ``torch.ops.wavepe`` with fake
kernels (``torch.compile``) and autograd, and typed Python wrappers.

Importing this module imports torch and loads the compiled extension.
"""

from __future__ import annotations

from . import _vmap  # noqa: F401  (the ops' batching rules for torch.func.vmap)
from ._raw import raw_ops
from .alibi import alibi_bias
from .attention import default_wavelet_config, wavelet_attention
from .relbias import rel_bias, wavelet_bias, wavelet_table
from .rope import rope, rope_inv_freq

__all__ = [
    "alibi_bias",
    "rel_bias",
    "wavelet_bias",
    "wavelet_table",
    "rope",
    "rope_inv_freq",
    "wavelet_attention",
    "default_wavelet_config",
    "raw_ops",
]
