"""Tensor argument checks of the torch front end (messages name the argument)."""

from __future__ import annotations

import math

import torch

from .._validate import INT64_MAX

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def check_tensor(name: str, t: object, *, min_dim: int | None = None, dim: int | None = None,
                 floating: bool = True) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(t.shape)}")
    if min_dim is not None and t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(t.shape)}")
    if floating and t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating-point tensor (float32, float64, bfloat16, float16), got {t.dtype}")
    return t


def check_same(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor, *, dtype: bool = True) -> None:
    if a.device != b.device:
        raise ValueError(f"{name_a} and {name_b} must be on the same device, got {a.device} and {b.device}")
    if dtype and a.dtype != b.dtype:
        raise TypeError(f"{name_a} and {name_b} must have the same dtype, got {a.dtype} and {b.dtype}")


def check_fits(name: str, shape: tuple[int, ...], itemsize: int) -> None:
    total = math.prod(int(s) for s in shape) * itemsize
    if total > INT64_MAX:
        raise OverflowError(f"{name}: a result of shape {tuple(shape)} ({itemsize}-byte elements) does not fit "
                            "in memory addressing")


def compute_dtype(t: torch.Tensor, half_on_cpu: bool = False) -> torch.dtype:
    """The dtype the kernels take for input ``t``.

    The CUDA kernels read bf16/fp16 natively and accumulate in float32, and so
    do the CPU kernels of every family (RoPE, the relative bias, ALiBi, the
    fused attention).  Plain, this says float32 for half types anywhere but
    CUDA: what the eager fallbacks (plain PyTorch) compute in.
    ``half_on_cpu``: half types stay as they are on the CPU too (the relative
    bias and ALiBi pass it, like ``wavepe::dtype_of`` in
    csrc/torch/torch_common.h), while other devices (a backend's own kernels,
    meta) get float32.  RoPE's and the attention's wrappers pass half types
    through on every device with a kernel and use this for the fallback only.
    """
    if t.dtype in (torch.float16, torch.bfloat16) and t.device.type != "cuda" and \
            not (half_on_cpu and t.device.type == "cpu"):
        return torch.float32
    return t.dtype


def values(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding t's values: t itself, or under torch.func transforms (vmap, grad) the plain
    tensor inside the wrappers -- all examples of a vmap at once -- which a check may read (a wrapped
    tensor refuses a data-dependent branch)."""
    while torch._C._functorch.is_functorch_wrapped_tensor(t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def check_finite(name: str, t: torch.Tensor) -> None:
    """Values that must be finite (slopes, ...): ValueError naming them.  Skipped where values do not
    exist (meta / fake tensors) or would make torch.compile branch on data."""
    if t.device.type == "meta" or torch.compiler.is_compiling():
        return
    from torch._subclasses.fake_tensor import is_fake

    t = values(t)
    if not is_fake(t) and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite, got {t.tolist()}")


def cacheable(t: torch.Tensor) -> bool:
    """May a tensor built for a cache (tables, spectra, slopes) outlive this call?

    Not when it was made under a FakeTensorMode (shape propagation, export):
    such a tensor belongs to that mode and would poison the next one; nor
    while torch.compile traces (the graph holds it as a constant).
    """
    if torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import is_fake

    return not is_fake(t)
