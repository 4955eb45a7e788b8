"""Configs: the paper's grid, validation of every field, round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wavepe import RopeConfig, WaveletConfig, alibi_slopes

from . import reference as ref


def test_default_grid_is_papers_best():
    cfg = WaveletConfig.grid(128)
    assert cfg.head_dim == 128 and cfg.family == "ricker"
    assert sorted(set(cfg.scales)) == [2.0 ** s for s in range(8)]
    assert sorted(set(cfg.shifts)) == list(range(16))
    # scale-major: j = s * n_shifts + b
    for j in (0, 15, 16, 127):
        assert cfg.scales[j] == 2.0 ** (j // 16) and cfg.shifts[j] == j % 16


@pytest.mark.parametrize("n_scales,n_shifts", [(16, 8), (32, 4), (128, 1), (1, 128), (4, 32), (8, 16)])
def test_ablation_grids(n_scales, n_shifts):
    cfg = WaveletConfig.grid(128, n_scales=n_scales)
    assert len(set(cfg.scales)) == n_scales and len(set(cfg.shifts)) == n_shifts


def test_grid_errors():
    with pytest.raises(ValueError, match="head_dim=100 is not divisible.*n_scales=8"):
        WaveletConfig.grid(100)
    with pytest.raises(ValueError, match="head_dim"):
        WaveletConfig.grid(0)
    with pytest.raises(TypeError, match="head_dim"):
        WaveletConfig.grid(12.5)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(scales=[1.0, 0.0], shifts=[0, 1]), ValueError, r"scales must be > 0.*scales\[1\]=0.0"),
        (dict(scales=[1.0, -2.0], shifts=[0, 1]), ValueError, r"scales\[1\]=-2.0"),
        (dict(scales=[1.0, float("nan")], shifts=[0, 1]), ValueError, "scales contains NaN"),
        (dict(scales=[1.0, 2.0], shifts=[0, float("inf")]), ValueError, "shifts contains an infinite"),
        (dict(scales=[1.0, 2.0], shifts=[0.0]), ValueError, "same length"),
        (dict(scales=[], shifts=[]), ValueError, "scales must not be empty"),
        (dict(scales=[[1.0]], shifts=[[0.0]]), ValueError, "one-dimensional"),
        (dict(scales=[1.0], shifts=[0.0], family="mexh"), ValueError, "family must be one of"),
        (dict(scales=[1.0], shifts=[0.0], support_tol=1.5), ValueError, "support_tol"),
        (dict(scales=[1.0], shifts=[0.0], support_tol=float("nan")), ValueError, "support_tol must not be NaN"),
        (dict(scales=["a"], shifts=[0.0]), TypeError, "scales must be a sequence"),
        (dict(scales=[1.0], shifts=[0.0], normalize="yes"), TypeError, "normalize"),
    ],
)
def test_wavelet_config_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        WaveletConfig(**kwargs)


def test_wavelet_config_round_trip_and_equality():
    cfg = WaveletConfig.grid(64, n_scales=4, family="morlet", normalize=True)
    again = WaveletConfig.from_dict(cfg.to_dict())
    assert again == cfg and hash(again) == hash(cfg)
    assert again != WaveletConfig.grid(64, n_scales=4)


def test_arrays_are_read_only():
    cfg = WaveletConfig.grid(16, n_scales=4)
    with pytest.raises(ValueError):
        cfg.scales[0] = 5.0


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(theta=0.0), ValueError, "theta must be > 0"),
        (dict(theta=-5.0), ValueError, "theta must be > 0"),
        (dict(theta=float("nan")), ValueError, "theta must not be NaN"),
        (dict(theta=float("inf")), ValueError, "theta must be finite"),
        (dict(theta=1.0), ValueError, "theta must be > 1"),
        (dict(rotary_fraction=1.5), ValueError, "rotary_fraction"),
        (dict(rotary_fraction=float("nan")), ValueError, "rotary_fraction must not be NaN"),
        (dict(layout="neox"), ValueError, "layout must be one of"),
        (dict(scaling=4.0), TypeError, "scaling"),
        (dict(scaling={"type": "bogus"}), ValueError, r"scaling\['type'\]"),
        (dict(theta="10000"), TypeError, "theta must be a real number"),
    ],
)
def test_rope_config_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        RopeConfig(**kwargs)


def test_rope_inv_freq_and_pairs():
    cfg = RopeConfig(theta=10000.0)
    inv = cfg.inv_freq(128)
    assert inv.dtype == np.float64 and inv.shape == (64,)
    np.testing.assert_allclose(inv, 10000.0 ** (-np.arange(0, 128, 2) / 128), rtol=1e-15)
    assert RopeConfig(rotary_fraction=0.75).rotary_pairs(128) == 48
    assert RopeConfig(rotary_fraction=0.0).rotary_pairs(128) == 0
    assert RopeConfig(rotary_fraction=0.1).rotary_pairs(64) == math.ceil(0.1 * 32)
    with pytest.raises(ValueError, match="head_dim must be even"):
        cfg.inv_freq(63)
    assert cfg.with_theta(5e5).theta == 5e5
    assert RopeConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("h", [1, 2, 3, 5, 6, 8, 12, 16, 24, 32])
def test_alibi_slopes(h):
    np.testing.assert_allclose(alibi_slopes(h), ref.alibi_slopes(h), rtol=1e-15)
    if h == 8:
        np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])


# ---- immutability: a changed field would leave the derived spectrum / tables stale ---------------

WAVELET_FIELDS = {"family": "haar", "scales": np.ones(16), "shifts": np.zeros(16), "normalize": True,
                  "support_tol": 0.5, "_cache": {}, "_table_key": "x"}
ROPE_FIELDS = {"theta": math.nan, "rotary_fraction": 0.5, "layout": "interleaved",
               "scaling": {"type": "linear", "factor": 2.0}, "_spec": "{}"}


@pytest.mark.parametrize("field,value", WAVELET_FIELDS.items())
def test_wavelet_config_fields_cannot_be_assigned(field, value):
    cfg = WaveletConfig.grid(16)
    before = cfg.table()[0].copy()
    with pytest.raises(AttributeError, match=f"WaveletConfig is immutable: cannot set field '{field}'"):
        setattr(cfg, field, value)
    with pytest.raises(AttributeError, match=f"cannot set field '{field}'"):
        delattr(cfg, field)
    assert cfg == WaveletConfig.grid(16)
    np.testing.assert_array_equal(cfg.table()[0], before)


@pytest.mark.parametrize("field,value", ROPE_FIELDS.items())
def test_rope_config_fields_cannot_be_assigned(field, value):
    cfg = RopeConfig(theta=500.0)
    with pytest.raises(AttributeError, match=f"RopeConfig is immutable: cannot set field '{field}'"):
        setattr(cfg, field, value)
    assert cfg.theta == 500.0 and cfg == RopeConfig(theta=500.0)


def test_rope_scaling_is_read_only():
    cfg = RopeConfig(scaling={"type": "linear", "factor": 2.0})
    with pytest.raises(TypeError):
        cfg.scaling["factor"] = 8.0
    assert cfg.scaling == {"type": "linear", "factor": 2.0} and cfg.to_dict()["scaling"] == {"type": "linear",
                                                                                               "factor": 2.0}


def test_replace_makes_a_validated_copy():
    cfg = RopeConfig(theta=500.0, rotary_fraction=0.5)
    assert cfg.replace(theta=2048.0) == RopeConfig(theta=2048.0, rotary_fraction=0.5)
    with pytest.raises(ValueError, match="theta"):
        cfg.replace(theta=math.nan)
    with pytest.raises(TypeError, match="unknown field"):
        cfg.replace(thetaa=1.0)
    w = WaveletConfig.grid(16)
    assert w.replace(normalize=True) == WaveletConfig.grid(16, normalize=True)
    assert w == WaveletConfig.grid(16)


def test_copies_and_pickles_are_equal_configs():
    import copy
    import pickle

    for cfg in (WaveletConfig.grid(16, family="morlet", normalize=True),
                RopeConfig(theta=2048.0, scaling={"type": "linear", "factor": 2.0})):
        for other in (copy.copy(cfg), copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg))):
            assert other == cfg and other is not cfg
