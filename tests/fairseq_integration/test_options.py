"""The fairseq plugin's option parsing (no fairseq needed: runs in every environment)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wavepe
from wavepe.cli import main as cli_main
from wavepe.integrations.fairseq import user_dir
from wavepe.integrations.fairseq.options import POS_ENCS, PositionSpec, parse_grid, parse_value_list, wavelet_config


def ns(**kw) -> argparse.Namespace:
    return argparse.Namespace(**kw)


def test_user_dir_is_a_uniquely_named_package():
    path = user_dir()
    # fairseq imports the user dir by its basename: it must not shadow fairseq itself
    assert os.path.basename(path) == "wavepe_fairseq"
    assert os.path.isfile(os.path.join(path, "__init__.py"))
    # and its parent, which fairseq puts on sys.path, holds nothing else importable
    assert sorted(e for e in os.listdir(os.path.dirname(path)) if not e.startswith("__")) == ["wavepe_fairseq"]


def test_cli_prints_user_dir(capsys):
    assert cli_main(["fairseq-user-dir"]) == 0
    assert capsys.readouterr().out.strip() == user_dir()
    out = subprocess.run([sys.executable, "-m", "wavepe", "fairseq-user-dir"], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == user_dir()


def test_import_does_not_pull_fairseq_or_torch():
    code = ("import sys, wavepe.integrations.fairseq as f, wavepe.integrations.fairseq.options; f.user_dir(); "
            "print('fairseq' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_default_is_the_papers_grid():
    spec = PositionSpec.from_args(ns(), 128)
    assert spec.pos_enc == "wavelet" and spec.kernel_pos_enc == "wavelet"
    assert spec.wavelet == wavepe.WaveletConfig.grid(128)  # {2^0..2^7} x {0..15}
    assert spec.rope is None and not spec.absolute_embeddings


@pytest.mark.parametrize("grid, n_scales", [("16x8", 16), ("32", 32), ("128x1", 128), ("1x128", 1), ("4 x 32", 4)])
def test_ablation_grids(grid, n_scales):
    cfg = PositionSpec.from_args(ns(pos_enc="wavelet", wavelet_grid=grid), 128).wavelet
    assert cfg == wavepe.WaveletConfig.grid(128, n_scales)


def test_explicit_values_scale_major():
    cfg = wavelet_config(6, family="morlet", scales="1, 3", shifts="0,2,5", normalize=True)
    np.testing.assert_array_equal(cfg.scales, [1, 1, 1, 3, 3, 3])
    np.testing.assert_array_equal(cfg.shifts, [0, 2, 5, 0, 2, 5])
    assert cfg.family == "morlet" and cfg.normalize
    # one list fixes its axis, the other count follows from the head dim
    only_scales = wavelet_config(8, scales="1,2")
    np.testing.assert_array_equal(only_scales.shifts, [0, 1, 2, 3] * 2)
    only_shifts = wavelet_config(8, shifts="0,4")
    np.testing.assert_array_equal(only_shifts.scales, [1, 1, 2, 2, 4, 4, 8, 8])
    with_grid = wavelet_config(4, grid="2x2", scales="3,5")
    np.testing.assert_array_equal(with_grid.scales, [3, 3, 5, 5])


@settings(max_examples=60, deadline=None)
@given(n_s=st.integers(1, 12), n_b=st.integers(1, 12), explicit=st.booleans())
def test_any_grid_shape(n_s, n_b, explicit):
    d = n_s * n_b
    if explicit:
        scales = ",".join(str(1.5 ** i) for i in range(n_s))
        cfg = wavelet_config(d, scales=scales, shifts=",".join(str(-i) for i in range(n_b)))
        want_a = np.repeat(1.5 ** np.arange(n_s), n_b)
        want_b = np.tile(-np.arange(n_b, dtype=float), n_s)
    else:
        cfg = wavelet_config(d, grid=f"{n_s}x{n_b}")
        want_a, want_b = np.repeat(2.0 ** np.arange(n_s), n_b), np.tile(np.arange(n_b, dtype=float), n_s)
    assert cfg.head_dim == d
    np.testing.assert_allclose(cfg.scales, want_a, rtol=1e-15)
    np.testing.assert_array_equal(cfg.shifts, want_b)


def test_rope_options():
    spec = PositionSpec.from_args(ns(pos_enc="rope", rope_theta=512.0, rope_fraction=0.25), 64)
    assert spec.kernel_pos_enc == "nope"
    assert spec.rope == wavepe.RopeConfig(512.0, 0.25)
    assert spec.rope_for(training=True) is spec.rope
    assert spec.rope_for(training=False) == spec.rope  # no inference theta: the same spectrum
    spec = PositionSpec.from_args(ns(pos_enc="rope", rope_theta=512.0, rope_inference_theta=4096.0), 64)
    assert spec.rope_for(training=True).theta == 512.0
    assert spec.rope_for(training=False).theta == 4096.0
    assert PositionSpec.from_args(ns(pos_enc="rope"), 8).rope == wavepe.RopeConfig(10000.0, 1.0)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_each_encoding_and_dict_input(pos_enc):
    spec = PositionSpec.from_args({"pos_enc": pos_enc}, 16)
    assert spec.pos_enc == pos_enc
    assert spec.absolute_embeddings == (pos_enc == "sinusoidal")
    assert spec.kernel_pos_enc == {"wavelet": "wavelet", "alibi": "alibi"}.get(pos_enc, "nope")
    assert (spec.wavelet is not None) == (pos_enc == "wavelet")
    assert (spec.rope is not None) == (pos_enc == "rope")


@pytest.mark.parametrize("kwargs, head_dim, match", [
    (dict(pos_enc="relative"), 16, r"--pos-enc must be one of .*'relative'"),
    (dict(pos_enc="wavelet", wavelet_grid="3"), 16, r"not divisible by the 3 wavelet scales"),
    (dict(pos_enc="wavelet", wavelet_grid="4x5"), 16, r"4 scales x 5 shifts = 20 .* head dim .* 16"),
    (dict(pos_enc="wavelet", wavelet_grid="8x"), 16, r"--wavelet-grid must be 'S' or 'SxB'.*'8x'"),
    (dict(pos_enc="wavelet", wavelet_grid="0x16"), 16, r"--wavelet-grid sizes must be >= 1"),
    (dict(pos_enc="wavelet", wavelet_scales="1,two"), 16, r"--wavelet-scales must be a comma-separated .*'1,two'"),
    (dict(pos_enc="wavelet", wavelet_scales="1,0"), 16, r"--wavelet-scales must all be > 0, got '1,0'"),
    (dict(pos_enc="wavelet", wavelet_scales="1,nan"), 16, r"--wavelet-scales must be finite"),
    (dict(pos_enc="wavelet", wavelet_shifts="0,1,1,2"), 16, r"--wavelet-shifts lists a value twice"),
    (dict(pos_enc="wavelet", wavelet_shifts=""), 16, r"--wavelet-shifts must list at least one value"),
    (dict(pos_enc="wavelet", wavelet_grid="8x2", wavelet_scales="1,2"), 16, r"has 8 scales but --wavelet-scales lists 2"),
    (dict(pos_enc="wavelet", wavelet_grid="8x2", wavelet_shifts="0,1,2"), 16, r"has 2 shifts but --wavelet-shifts"),
    (dict(pos_enc="wavelet", wavelet_family="mexican"), 16, r"--wavelet-family must be one of"),
    (dict(pos_enc="wavelet"), 12, r"not divisible by the default 8 wavelet scales"),
    (dict(pos_enc="rope", rope_theta=1.0), 16, r"--rope-theta must be a finite number > 1, got 1.0"),
    (dict(pos_enc="rope", rope_theta=float("inf")), 16, r"--rope-theta must be a finite number > 1"),
    (dict(pos_enc="rope", rope_theta=float("nan")), 16, r"--rope-theta must be a number, got nan"),
    (dict(pos_enc="rope", rope_inference_theta=-5.0), 16, r"--rope-inference-theta must be a finite number > 1"),
    (dict(pos_enc="rope", rope_fraction=1.5), 16, r"--rope-fraction must be in \[0, 1\], got 1.5"),
    (dict(pos_enc="rope"), 7, r"--pos-enc rope needs an even head dim .* got 7"),
    (dict(pos_enc="wavelet", rope_theta=512.0), 16, r"--rope-theta=512.0 only applies to --pos-enc rope"),
    (dict(pos_enc="alibi", wavelet_grid="8"), 16, r"--wavelet-grid='8' only applies to --pos-enc wavelet"),
    (dict(pos_enc="nope", wavelet_normalize=True), 16, r"--wavelet-normalize only applies to --pos-enc wavelet"),
    (dict(pos_enc="rope", rope_inference_theta=None, rope_fraction=None, wavelet_shifts="0"), 16,
     r"--wavelet-shifts='0' only applies"),
    (dict(attention_window=0), 16, r"--attention-window must be an integer >= 1, got 0"),
    (dict(attention_window=2.5), 16, r"--attention-window must be an integer >= 1, got 2.5"),
    (dict(attention_softcap=-1.0), 16, r"--attention-softcap must be a finite number > 0, got -1.0"),
    (dict(attention_softcap=float("inf")), 16, r"--attention-softcap must be a finite number > 0"),
])
def test_bad_options_name_the_option(kwargs, head_dim, match):
    with pytest.raises(ValueError, match=match):
        PositionSpec.from_args(ns(**kwargs), head_dim)


def test_bad_head_dim_and_types():
    with pytest.raises(ValueError, match="head dim must be a positive integer, got 0"):
        PositionSpec.from_args(ns(), 0)
    with pytest.raises(TypeError, match="--wavelet-grid must be 'S' or 'SxB'"):
        parse_grid(8.0)
    with pytest.raises(TypeError, match="--wavelet-scales must be a comma-separated list"):
        parse_value_list("wavelet_scales", 3.0)
    assert parse_grid(8) == (8, None) and parse_grid("8X16") == (8, 16)
    np.testing.assert_array_equal(parse_value_list("wavelet_shifts", [0, 1.5]), [0.0, 1.5])


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_window_and_softcap_for_every_encoding(pos_enc):
    spec = PositionSpec.from_args(ns(pos_enc=pos_enc, attention_window=512, attention_softcap=30), 16)
    assert (spec.window, spec.softcap) == (512, 30.0)
    plain = PositionSpec.from_args(ns(pos_enc=pos_enc), 16)
    assert (plain.window, plain.softcap) == (None, None)
