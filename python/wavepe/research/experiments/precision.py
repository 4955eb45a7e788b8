"""Where and in which precision ``wavepe extrapolate`` trains: device and autocast dtype.

Mixed precision the usual way: parameters and the optimizer state stay
float32; the forward pass and the loss run under
``torch.autocast(device_type, dtype)``.  bfloat16 has float32's range and
needs no loss scaling; float16 does, so its training steps go through
``torch.amp.GradScaler`` (for the CUDA device and for the CPU alike).
``"float32"`` means no autocast at all.

Autocast rewrites torch's own ops (``nn.Linear`` outputs the autocast dtype),
not custom ops: :class:`wavepe.nn.PositionalAttention` therefore casts q, k, v
to the autocast dtype itself before calling wavepe's rope / attention ops.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch

#: the ``--dtype`` names and the torch dtypes they stand for
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: the ``--device`` names
DEVICES: tuple[str, ...] = ("cpu", "cuda", "auto")


def check_dtype_name(name: str) -> str:
    """``name`` if it is one of :data:`DTYPES`, else ValueError listing them."""
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def check_device_name(name: str) -> str:
    """``name`` if it is one of :data:`DEVICES`, else ValueError listing them."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {name!r}")
    return name


def resolve_device(name: str) -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available, else the CPU) as a torch device.

    ``"cuda"`` without a usable GPU is a ValueError that says why (a CPU-only
    torch build, or no GPU visible) instead of a failure deep inside training.
    """
    check_device_name(name)
    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if name == "auto":
        return torch.device("cpu")
    why = ("this torch build has no CUDA support" if torch.version.cuda is None
           else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
    raise ValueError(f"--device cuda: CUDA is not available ({why}); use --device cpu, or --device auto "
                     "to take a GPU only when there is one")


def autocast(device: torch.device, dtype_name: str) -> ContextManager[Any]:
    """The autocast region of one training forward pass (a no-op for ``"float32"``)."""
    if check_dtype_name(dtype_name) == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[dtype_name])


def grad_scaler(device: torch.device, dtype_name: str) -> torch.amp.GradScaler | None:
    """A loss scaler for float16 training, None for float32 and bfloat16 (which need none)."""
    if check_dtype_name(dtype_name) != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


def device_name(device: torch.device) -> str:
    """The GPU's name for a CUDA device, the CPU model for the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ..._platform import cpu_model

    return cpu_model()


def describe(device: torch.device, dtype_name: str, eval_dtype: str = "float32") -> dict[str, Any]:
    """What ran, for results.json and the Markdown table: device, its name, dtypes, the kernels' ISA."""
    import wavepe

    info: dict[str, Any] = {"device": str(device), "device_name": device_name(device),
                            "train_dtype": dtype_name, "autocast": dtype_name != "float32",
                            "parameters_dtype": "float32", "grad_scaler": dtype_name == "fp16",
                            "eval_dtype": eval_dtype, "isa": wavepe.active_isa()}
    if device.type == "cuda":
        info["cuda_capability"] = "sm_" + "".join(map(str, torch.cuda.get_device_capability(device)))
        info["cuda_runtime"] = torch.version.cuda
    return info


def describe_line(run: dict[str, Any]) -> str:
    """One sentence of :func:`describe`'s dict, for the Markdown results."""
    train = ("float32" if not run["autocast"]
             else f"{run['train_dtype']} autocast (parameters and optimizer state float32"
                  + (", GradScaler" if run["grad_scaler"] else "") + ")")
    where = f"{run['device']} ({run['device_name']})"
    return (f"Ran on {where}, wavepe CPU ISA {run['isa']}; training {train}; evaluation {run['eval_dtype']}.")
