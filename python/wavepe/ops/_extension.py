"""Loading of the compiled operator library ``wavepe._C`` (registers ``torch.ops.wavepe.*``).

``torch`` is imported first: its shared libraries must be loaded before the extension that links
against them.

Which ``wavepe._C``:

1. the one built at install time (setup.py builds it when torch is importable at build time), if
   its record (``wavepe/_C.build.json``) says it was built for the running torch — a module built
   for another torch is never loaded, since it may load and then crash;
2. otherwise one compiled for the running torch at first use and cached
   (:mod:`wavepe._build.jit`: a one-line message, about a minute, once per torch version).
   ``WAVEPE_JIT=0`` forbids compiling at import: an ImportError then says what to do instead.
"""

from __future__ import annotations

import importlib.util
import json
import os

from .._requires import require

require("torch", "wavepe.ops")
import torch  # noqa: E402

from .._build import recipe  # noqa: E402

RECORD = "_C.build.json"  # written by setup.py beside the wavepe._C it builds


def _packaged_build() -> tuple[bool, str | None]:
    """(use it, why not): whether the wavepe._C built at install time is for the running torch."""
    spec = importlib.util.find_spec("wavepe._C")
    if spec is None or not spec.origin:
        return False, None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), RECORD), encoding="utf-8") as f:
            built_for = json.load(f).get("torch")
    except (OSError, ValueError):
        return False, "the wavepe._C built at install time has no record of its torch"
    if built_for != torch.__version__:
        return False, f"the wavepe._C built at install time is for torch {built_for}"
    return True, None


def _load() -> str:
    """Import wavepe._C; returns where it came from (for ``wavepe info``)."""
    use_packaged, why = _packaged_build()
    if use_packaged:
        try:
            from .. import _C  # noqa: F401

            return "built at install time"
        except ImportError as exc:
            why = f"the wavepe._C built at install time does not load ({exc})"
    if not recipe.env_flag("WAVEPE_JIT", True):
        raise ImportError(
            f"wavepe's PyTorch ops are not built for torch {torch.__version__}"
            + (f" ({why})" if why else "")
            + ", and WAVEPE_JIT=0 forbids compiling them now: unset it, or rebuild wavepe against this torch "
            "with `pip install --no-build-isolation .` (`make build` in a checkout)")
    from .._build import jit

    try:
        path = jit.compiled_torch_ops(why)
    except jit.JitBuildError as exc:
        raise ImportError(str(exc)) from None
    jit.load(path)
    return f"compiled at first use ({os.path.dirname(path)})"


ORIGIN = _load()
ops = torch.ops.wavepe


def float_compute_dtype(t: torch.Tensor, name: str) -> torch.dtype:
    """The dtype a kernel computes in for input ``t``: fp32 for half types."""
    if t.dtype in (torch.float32, torch.float64):
        return t.dtype
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    raise TypeError(f"{name} must be a floating-point tensor (float32, float64, bfloat16, float16), got {t.dtype}")
