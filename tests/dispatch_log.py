"""A log of the aten / wavepe ops a block dispatches, for the tests that a half-precision call makes no float32 copy.

    with DispatchLog() as log:
        wo.rope(q, k, pos, cfg)
    log.calls  # [(op name, [dtype of each tensor it returned]), ...] in dispatch order
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DispatchLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[torch.dtype]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        self.calls.append((str(func), [t.dtype for t in flat if isinstance(t, torch.Tensor)]))
        return out
