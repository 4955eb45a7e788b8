"""Which devices run the compiled ops: the dispatcher decides, the wrappers only ask.

Every public wrapper calls ``torch.ops.wavepe.<op>`` for tensors on a device
whose dispatch key has a kernel for that op: the CPU, CUDA when wavepe was
built with its CUDA kernels, ``meta`` (the fake kernels registered in
:mod:`wavepe.ops`: shape inference and ``torch.compile``), and any key another
library or the user registers (e.g. a ``PrivateUse1`` backend).  Only a
device with no kernel at all takes the family's plain-PyTorch formulation
(``plain_<op>`` in its module), with one warning per op and device type.
"""

from __future__ import annotations

import warnings

import torch


@torch.compiler.assume_constant_result
def _kernel_registered(op: str, device_type: str) -> bool:
    # Eagerly a lookup per call (kernels may be registered at any time); under
    # torch.compile a constant of the graph.  Its arguments are strings, which
    # dynamo treats as constants on every torch wavepe supports.
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except (RuntimeError, ValueError):  # a device type torch does not know
        return False
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"wavepe::{op}", key))


#: the device types whose kernels wavepe's own library registers: once found, they stay for the process
#: (the lookup costs ~8 us, a tenth of a small decoding step); other keys' kernels may come and go
_OWN_KERNELS = ("cpu", "cuda", "meta")
_found: set[tuple[str, str]] = set()


def has_kernel(op: str, device: torch.device) -> bool:
    """Does ``torch.ops.wavepe.<op>`` have a kernel for ``device``'s dispatch key?"""
    key = (op, device.type)
    # Under torch.compile the memo is neither read nor written: dynamo would guard on the set's contents, and
    # a traced call made before the first eager one (a fresh process compiling first) would be compiled again
    # -- the whole graph -- as soon as an eager call had added the key.
    if torch.compiler.is_compiling():
        return _kernel_registered(op, device.type)
    if key in _found:
        return True
    found = _kernel_registered(op, device.type)
    if found and device.type in _OWN_KERNELS:
        _found.add(key)
    return found


_warned: set[tuple[str, str]] = set()


def warn_fallback(op: str, device: torch.device, what: str) -> None:
    """Say once per (op, device type) that the plain-PyTorch path ``what`` runs instead of a kernel."""
    key = (op, device.type)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"wavepe: no compiled {op} kernel for device {device.type!r}; using {what}", RuntimeWarning,
                  stacklevel=4)
