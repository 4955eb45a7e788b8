"""Every overflow / range error names the argument and shows its value: NumPy, torch wrappers, raw ops.

Positions and distances stay within +-2^60 everywhere (the C core's
WAVEPE_POSITION_LIMIT, wavepe._validate.POSITION_LIMIT); products of sizes
within what int64 / ptrdiff_t address.  The wrappers raise OverflowError, the
raw ops ValueError (c10 has no OverflowError), with the same sentence.
"""

from __future__ import annotations

import re

import pytest

import wavepe.ufuncs as wu
from wavepe import WaveletConfig

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402

Q = torch.randn(2, 5, 8)
T = torch.randn(4, 8)
QN, TN = Q.numpy(), T.numpy()
QKV = [torch.randn(1, 2, 5, 8) for _ in range(3)]
INV = torch.ones(4, dtype=torch.float64)
BIG = 2**62


@pytest.mark.parametrize("call,exc,words", [
    # the reliability pass's findings
    (lambda: wu.alibi_bias(2, 3, q_offset=2**63 - 2), OverflowError, "q_offset=9223372036854775806"),
    (lambda: wo.alibi_bias(2, 3, q_offset=2**63 - 2), OverflowError, "q_offset=9223372036854775806"),
    (lambda: wu.sinusoidal_table(4, 8, offset=2**63 - 3), OverflowError, "offset=9223372036854775805"),
    (lambda: wu.alibi_bias(8, 2**40, 2**40), OverflowError,
     "(heads, q_len, k_len) = (8, 1099511627776, 1099511627776)"),
    (lambda: wo.alibi_bias(2, 2**31, 2**31), ValueError, "(heads, q_len, k_len) = (2, 2147483648, 2147483648)"),
    # NumPy
    (lambda: wu.rel_bias(QN, TN, 2**61), OverflowError, "rel_bias: r_lo=2305843009213693952"),
    (lambda: wu.rel_bias(QN, TN, 0, q_offset=-(2**61)), OverflowError, "rel_bias: q_offset=-2305843009213693952"),
    (lambda: wu.wavelet_bias(QN, WaveletConfig.grid(8), k_len=2**61), OverflowError, "k_len=2305843009213693952"),
    (lambda: wu.rope(QN, 2**63 - 2, __import__("wavepe").RopeConfig()), OverflowError,
     "positions: offset 9223372036854775806 + length 5"),
    # torch wrappers
    (lambda: wo.rel_bias(Q, T, 0, q_offset=2**61), OverflowError, "rel_bias: q_offset=2305843009213693952"),
    (lambda: wo.rel_bias(Q, T, -(2**61)), OverflowError, "rel_bias: r_lo=-2305843009213693952"),
    (lambda: wo.wavelet_bias(Q, WaveletConfig.grid(8), q_offset=2**61), OverflowError,
     "wavelet_bias: q_offset=2305843009213693952"),
    (lambda: wo.wavelet_attention(*QKV, q_offset=2**61), OverflowError, "q_offset=2305843009213693952"),
    (lambda: wo.wavelet_attention(*QKV, pos_enc="relative", rel_table=(T, -(2**61))), OverflowError,
     "rel_table[1] (r_lo)=-2305843009213693952"),
    (lambda: wo.rope_inv_freq(QKV[0], None, 2**63 - 2, INV), OverflowError,
     "positions: offset 9223372036854775806 + length 5"),
    # raw ops: the C rules' sentence
    (lambda: torch.ops.wavepe.rel_bias(Q, T, 3, BIG, 0, True, False), ValueError,
     "rel_bias: r_lo=4611686018427387904 is beyond the supported range of positions"),
    (lambda: torch.ops.wavepe.rel_bias(Q, T, 3, 0, -BIG, True, False), ValueError, "q_offset=-4611686018427387904"),
    (lambda: torch.ops.wavepe.rel_bias(Q, T, BIG, 0, 0, True, False), ValueError, "k_len=4611686018427387904"),
    (lambda: torch.ops.wavepe.rel_bias_backward(torch.ones(2, 5, 3), Q, T, [True, True], 0, BIG, True, False),
     ValueError, "q_offset=4611686018427387904"),
    (lambda: torch.ops.wavepe.alibi_bias(torch.ones(2), 3, 3, BIG, True), ValueError,
     "alibi_bias: q_offset=4611686018427387904"),
    (lambda: torch.ops.wavepe.attention_fwd(*QKV, None, None, None, None, 0.5, BIG, True, 0, False, False), ValueError,
     "wavelet_attention: q_offset=4611686018427387904"),
    (lambda: torch.ops.wavepe.attention_fwd(*QKV, T, None, None, None, 0.5, 0, True, -BIG, False, False), ValueError,
     "r_lo=-4611686018427387904"),
    (lambda: torch.ops.wavepe.rope(QKV[0], None, None, INV, 2**63 - 2, 4, "half", 1.0, False), ValueError,
     "rope: positions: offset=9223372036854775806 + length 5 overflows int64"),
    (lambda: wo.raw_ops.rel_bias(Q, T, 3, BIG, 0, True, False), ValueError, "r_lo=4611686018427387904"),
])
def test_range_errors_name_the_argument_and_value(call, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        call()


def test_the_limit_is_the_same_everywhere():
    from wavepe._validate import POSITION_LIMIT

    lim = POSITION_LIMIT
    assert lim == 2**60
    # at the limit: accepted by the wrappers and by the raw ops alike (an empty result: nothing is computed)
    assert wo.rel_bias(Q, T, -lim, k_len=0, q_offset=lim).shape == (2, 5, 0)
    assert torch.ops.wavepe.rel_bias(Q, T, 0, -lim, lim, True, False).shape == (2, 5, 0)
    assert wu.rel_bias(QN, TN, -lim, k_len=0, q_offset=lim).shape == (2, 5, 0)
    # one past it: refused by all three
    for call in (lambda: wo.rel_bias(Q, T, 0, k_len=0, q_offset=lim + 1),
                 lambda: wu.rel_bias(QN, TN, 0, k_len=0, q_offset=lim + 1)):
        with pytest.raises(OverflowError, match=f"q_offset={lim + 1}"):
            call()
    with pytest.raises(ValueError, match=f"q_offset={lim + 1}"):
        torch.ops.wavepe.rel_bias(Q, T, 0, 0, lim + 1, True, False)
