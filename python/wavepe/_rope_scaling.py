"""RoPE spectra beyond plain θ: linear, NTK, YaRN and Llama-3 scaling.

Each takes the base spectrum ``inv_freq_i = θ^(-2i/d)`` (float64) and returns
the scaled one.  Only "linear" is implemented so far; the others raise
NotImplementedError until they land.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ._validate import check_choice, check_real

SCALING_TYPES = ("linear",)


def validate_scaling(scaling: Mapping[str, Any]) -> None:
    kind = check_choice("scaling['type']", scaling.get("type"), SCALING_TYPES)
    if kind == "linear":
        check_real("scaling['factor']", scaling.get("factor"), positive=True)


def apply_scaling(inv_freq: np.ndarray, scaling: Mapping[str, Any], *, head_dim: int, theta: float) -> np.ndarray:
    kind = scaling["type"]
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    raise NotImplementedError(kind)


def attention_factor(scaling: Mapping[str, Any]) -> float:
    return 1.0
