"""wavepe: wavelet relative position encoding and θ-configurable RoPE.

C kernels (scalar reference, AVX2 and AVX-512 on x86-64, NEON on AArch64; CUDA where built) exposed as
NumPy ufuncs (:mod:`wavepe.ufuncs`) and PyTorch custom ops with autograd
(:mod:`wavepe.ops`), and :func:`wavepe.patch` (also ``patch_llama``) for Hugging Face models.
Importing ``wavepe`` does not import torch or transformers.
"""

from __future__ import annotations

from typing import Any

from . import _moved
from .config import WAVELET_FAMILIES, ROPE_LAYOUTS, RopeConfig, WaveletConfig, alibi_slopes

_moved.install()  # wavepe.analysis / .experiments / .cli: the research modules under their old names

__version__ = "0.1.0"

__all__ = [
    "WaveletConfig",
    "RopeConfig",
    "alibi_slopes",
    "WAVELET_FAMILIES",
    "ROPE_LAYOUTS",
    "cpu_isa",
    "supported_isas",
    "active_isa",
    "tiles",
    "__version__",
]


def cpu_isa() -> str:
    """The instruction set wavepe's kernels default to on this CPU (and OS): 'amx' (AVX-512 with AVX512_BF16
    and Intel's AMX tiles, where the tiles work), 'avx512bf16' (AVX-512 with AVX512_BF16; on AMD CPUs),
    'avx512' (also Intel's choice over avx512bf16: measured faster there), 'avx2' (x86-64), 'neon'
    (AArch64) or 'scalar'."""
    from . import _ufuncs

    return _ufuncs.cpu_isa()


def supported_isas() -> tuple[str, ...]:
    """Every instruction set this machine runs wavepe's kernels with ('scalar' first, in the order of the core's
    table): the values ``WAVEPE_ISA`` accepts here.  'amx' is among them wherever 'avx512bf16' is: on a CPU
    without AMX its tiles are emulated (slowly, for the tests; :func:`tiles`), and it is never the default."""
    from . import _ufuncs

    return _ufuncs.supported_isas()


def tiles() -> str:
    """How the 'amx' kernels' tile products run here: 'hardware (AMX instructions)', or 'emulated (why)'."""
    from . import _ufuncs

    return _ufuncs.tiles()


def active_isa() -> str:
    """The instruction set kernels use now: :func:`cpu_isa`, or
    ``WAVEPE_ISA=scalar|avx2|avx512|avx512bf16|amx|neon``.

    Raises ValueError when ``WAVEPE_ISA`` names an instruction set this CPU cannot run
    (every operation raises the same error).  ``WAVEPE_FORCE_SCALAR=1`` (older spelling)
    forces 'scalar'.
    """
    from . import _ufuncs

    return _ufuncs.active_isa()


def __getattr__(name: str) -> Any:
    # Heavy or optional parts load on first use (torch, transformers).
    if name in ("ops", "ufuncs", "analysis", "experiments", "cli", "research"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in ("patch", "patch_llama"):  # imports torch and transformers on first use
        from .integrations import hf

        return getattr(hf, name)
    raise AttributeError(f"module 'wavepe' has no attribute {name!r}")
