"""Argument checks shared by the NumPy and PyTorch front ends.

Every check raises an exception that names the argument and shows the value,
so that bad input fails loudly at the boundary instead of deep in a kernel.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any, Iterable

INT64_MAX = 2**63 - 1
#: Positions, distances and their counts stay within +-2^60 (WAVEPE_POSITION_LIMIT of the C core), so
#: that any sum of a few of them is exact in int64.
POSITION_LIMIT = 2**60


def _is_symbolic_int(value: Any) -> bool:
    # torch.SymInt under torch.compile with dynamic shapes: not checkable by
    # value here; the op's schema and fake kernel take over.
    return type(value).__name__ == "SymInt"


def _tracing() -> bool:
    torch = sys.modules.get("torch")  # this module serves the NumPy front end too: never import torch here
    return torch is not None and torch.compiler.is_compiling()


def check_int(name: str, value: Any, *, min_value: int | None = None) -> int:
    """An integer (bool excluded) within int64 and at least ``min_value``."""
    if type(value) is int:  # the common case, without the ABC checks (a few us a call on a decoding step)
        v = value
    elif _is_symbolic_int(value):
        return value
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
    else:
        v = int(value)
    if not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise OverflowError(f"{name}={v} does not fit in int64")
    if min_value is not None and v < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {v}")
    return v


def check_real(name: str, value: Any, *, positive: bool = False, finite: bool = True) -> float:
    """A real number, finite (and > 0 with positive=True).

    While torch.compile traces, the value passes unchecked: with dynamic shapes
    dynamo traces Python floats (a model's attention scaling) as symbolic
    values, testing which would break the graph; the ops' C rules check their
    float arguments (e.g. the attention's scale: finite and > 0) at run time.
    """
    if _tracing():
        return value
    if type(value) is float:  # the common case, without the ABC checks
        v = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    else:
        v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if finite and math.isinf(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    return v


def check_flag(name: str, value: Any) -> bool:
    """A flag: ``bool`` (or ``numpy.bool_``) only, never truthiness -- ``"false"``
    is not False, ``None`` is not False, ``1`` is not True.  TypeError names
    the argument and shows the value."""
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)  # numpy.bool_ (numpy >= 2 names its type "bool")
    raise TypeError(f"{name} must be a bool (True or False), got {value!r} of type {type(value).__name__}")


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_product_fits(name: str, dims: Iterable[int], itemsize: int) -> None:
    """The product of ``dims`` times ``itemsize`` must be addressable (int64)."""
    total = itemsize
    for d in dims:
        total *= int(d)
    if total > INT64_MAX:
        raise OverflowError(f"{name}: a {' x '.join(str(int(d)) for d in dims)} result of "
                            f"{itemsize}-byte elements does not fit in memory addressing")


def check_position(name: str, value: Any, what: str = "") -> Any:
    """A position, a distance or a count of them within +-2^60 (else OverflowError naming it).

    Plain comparisons only: traceable by torch.compile, symbolic sizes included."""
    if value > POSITION_LIMIT or value < -POSITION_LIMIT:
        raise OverflowError(f"{what}{name}={value} is beyond the supported range of positions (|{name}| <= 2**60)")
    return value


def resolve_positions(name_q: str, m: int, k_len: int | None, q_offset: int | None, what: str = "") -> tuple[int, int]:
    """Defaults of the KV-cache convention: N = M, queries are the last M positions; every one of
    q_len, k_len and q_offset within +-2^60 (OverflowError naming it; ``what`` prefixes the message)."""
    n = m if k_len is None else check_int("k_len", k_len, min_value=0)
    off = n - m if q_offset is None else check_int("q_offset", q_offset)
    check_position("q_len", m, what)
    check_position("k_len", n, what)
    check_position("q_offset", off, what)
    return n, off
