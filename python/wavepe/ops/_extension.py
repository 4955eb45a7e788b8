"""Loading of the compiled operator library ``wavepe._C``.

``torch`` is imported first: its shared libraries must be loaded before the
extension that links against them.
"""

from __future__ import annotations

import torch  # noqa: F401  (loads libtorch for the extension)

try:
    from .. import _C  # noqa: F401  (registers torch.ops.wavepe.*)
except ImportError as exc:  # pragma: no cover - depends on how wavepe was built
    raise ImportError(
        "wavepe's PyTorch operators are not built (wavepe._C is missing or was built against "
        f"another torch: {exc}). Install torch first, then rebuild wavepe against it with "
        "`pip install --no-build-isolation .` (or `make build` in a checkout)."
    ) from exc

ops = torch.ops.wavepe


def float_compute_dtype(t: torch.Tensor, name: str) -> torch.dtype:
    """The dtype a kernel computes in for input ``t``: fp32 for half types."""
    if t.dtype in (torch.float32, torch.float64):
        return t.dtype
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    raise TypeError(f"{name} must be a floating-point tensor (float32, float64, bfloat16, float16), got {t.dtype}")
