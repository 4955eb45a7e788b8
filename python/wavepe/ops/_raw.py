"""``wavepe.ops.raw_ops``: the compiled ops with strict argument types.

``torch.ops.wavepe.<op>`` converts a bool argument by truthiness in its
Python argument parser (``None`` becomes False, ``1`` True), which would run
non-causal attention for ``causal=None``.  ``raw_ops.<op>`` checks every
``bool`` / ``bool[]`` argument of the op's schema with the same helper as the
public functions (:func:`wavepe._validate.check_flag`) and then calls the op
itself (autograd, fake kernels and every device as usual).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .._validate import check_flag


def _strict(name: str) -> Callable[..., Any]:
    packet = getattr(torch.ops.wavepe, name)
    schema = packet.default._schema
    flags = [(i, a.name, str(a.type)) for i, a in enumerate(schema.arguments) if str(a.type) in ("bool", "List[bool]")]

    def check(arg: str, kind: str, value: Any) -> None:
        if kind == "bool":
            check_flag(arg, value)
        elif isinstance(value, (list, tuple)):  # bool[N]
            for j, v in enumerate(value):
                check_flag(f"{arg}[{j}]", v)
        else:
            raise TypeError(f"{arg} must be a list of bools, got {value!r} of type {type(value).__name__}")

    def call(*args: Any, **kwargs: Any) -> Any:
        for i, arg, kind in flags:
            if i < len(args):
                check(arg, kind, args[i])
            elif arg in kwargs:
                check(arg, kind, kwargs[arg])
        return packet(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.ops.wavepe.{name} with strict flags.\n\n{schema}"
    call.default = packet.default  # the OpOverload itself, for opcheck and friends
    return call


class RawOps:
    """Attribute access like ``torch.ops.wavepe``: ``raw_ops.rel_bias(q, table, r_lo, ...)``."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        fn = _strict(name)
        setattr(self, name, fn)  # once per op
        return fn

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(torch.ops.wavepe) if not n.startswith("_")})


raw_ops = RawOps()
