"""Strict flags: every public function and the raw ops take bool (or numpy.bool_) flags only.

Truthiness would turn ``causal=None`` into non-causal attention (future tokens
visible) and ``causal="false"`` into causal: a TypeError naming the argument
and showing the value is the only answer (wavepe._validate.check_flag).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import wavepe.ufuncs as wu
from wavepe import RopeConfig, WaveletConfig
from wavepe.integrations.fairseq.options import PositionSpec

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe.nn import PositionalAttention  # noqa: E402

BAD = ["false", "True", None, 1, 0, 0.0, 1.0, [True], torch.tensor(True)]

Q = torch.randn(2, 5, 8)
T = torch.randn(4, 8)
QN, TN = Q.numpy(), T.numpy()
QKV = [torch.randn(1, 2, 5, 8) for _ in range(3)]
CFG = WaveletConfig.grid(8)

CALLS = {
    # (callable taking the flag's value, the flag's name)
    "ufuncs.alibi_bias causal": (lambda v: wu.alibi_bias(2, 3, causal=v), "causal"),
    "ufuncs.rel_bias causal": (lambda v: wu.rel_bias(QN, TN, 0, causal=v), "causal"),
    "ufuncs.rel_bias clamp": (lambda v: wu.rel_bias(QN, TN, 0, clamp=v), "clamp"),
    "ufuncs.wavelet_bias causal": (lambda v: wu.wavelet_bias(QN, CFG, causal=v), "causal"),
    "ufuncs.rope inverse": (lambda v: wu.rope(QN, 0, RopeConfig(), inverse=v), "inverse"),
    "ufuncs.rope_inv_freq inverse": (lambda v: wu.rope_inv_freq(QN, 0, np.ones(4), inverse=v), "inverse"),
    "ops.alibi_bias causal": (lambda v: wo.alibi_bias(2, 3, causal=v), "causal"),
    "ops.rel_bias causal": (lambda v: wo.rel_bias(Q, T, 0, causal=v), "causal"),
    "ops.rel_bias clamp": (lambda v: wo.rel_bias(Q, T, 0, clamp=v), "clamp"),
    "ops.wavelet_bias causal": (lambda v: wo.wavelet_bias(Q, CFG, causal=v), "causal"),
    "ops.wavelet_attention causal": (lambda v: wo.wavelet_attention(*QKV, causal=v), "causal"),
    "ops.wavelet_attention clamp": (lambda v: wo.wavelet_attention(*QKV, pos_enc="relative", rel_table=(T, 0),
                                                                   clamp=v), "clamp"),
    "WaveletConfig normalize": (lambda v: WaveletConfig(scales=[1.0], shifts=[0.0], normalize=v), "normalize"),
    "WaveletConfig.grid normalize": (lambda v: WaveletConfig.grid(8, normalize=v), "normalize"),
    "RopeConfig scaling truncate": (lambda v: RopeConfig(scaling={"type": "yarn", "factor": 4.0,
                                                                  "original_max_position_embeddings": 512,
                                                                  "truncate": v}).inv_freq(8),
                                    "scaling['truncate']"),
    "PositionalAttention bias": (lambda v: PositionalAttention(16, 2, bias=v), "bias"),
    "raw rel_bias causal": (lambda v: wo.raw_ops.rel_bias(Q, T, 5, 0, 0, v, False), "causal"),
    "raw rel_bias clamp (keyword)": (lambda v: wo.raw_ops.rel_bias(Q, T, 5, 0, 0, True, clamp=v), "clamp"),
    "raw rel_bias_backward output_mask": (lambda v: wo.raw_ops.rel_bias_backward(torch.ones(2, 5, 5), Q, T,
                                                                                 [True, v], 0, 0, True, False),
                                          "output_mask[1]"),
    "raw attention_fwd causal": (lambda v: wo.raw_ops.attention_fwd(*QKV, None, None, None, None, 0.5, 0, v, 0, False,
                                                                    False),
                                 "causal"),
    "raw rope inverse": (lambda v: wo.raw_ops.rope(QKV[0], None, None, torch.ones(4, dtype=torch.float64), 0, 4,
                                                   "half", 1.0, v), "inverse"),
    "raw alibi_bias causal": (lambda v: wo.raw_ops.alibi_bias(torch.ones(2), 3, 3, 0, v), "causal"),
}


@pytest.mark.parametrize("key", sorted(CALLS))
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_flags_that_are_not_bools_raise_naming_the_argument(key, value):
    call, name = CALLS[key]
    if value is None and name == "scaling['truncate']":
        pytest.skip("None is truncate's documented default (True), as in Hugging Face's configs")
    with pytest.raises(TypeError, match=re.escape(name) + " must be a bool .*got "):
        call(value)


@pytest.mark.parametrize("key", sorted(CALLS))
def test_bools_and_numpy_bools_are_flags(key):
    call, _ = CALLS[key]
    a = call(True)
    b = call(np.bool_(True))
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    call(False)
    call(np.False_)


def test_causal_none_is_not_silently_non_causal():
    # the failure the strict flags prevent: None used to run non-causal attention
    with pytest.raises(TypeError, match="causal must be a bool"):
        wo.wavelet_attention(*QKV, causal=None)
    with pytest.raises(TypeError, match="clamp must be a bool"):
        wu.rel_bias(QN, TN, 0, clamp="no")


def test_fairseq_option_flags():
    with pytest.raises(TypeError, match="--wavelet-normalize must be a bool"):
        PositionSpec.from_args({"pos_enc": "wavelet", "wavelet_normalize": "yes"}, 16)
    assert PositionSpec.from_args({"pos_enc": "wavelet", "wavelet_normalize": None}, 16).wavelet.normalize is False
