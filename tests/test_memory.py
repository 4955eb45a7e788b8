"""A result too large to allocate is a MemoryError naming the op, the result, its shape, its bytes and the
argument that made it large -- raised before allocating (issue 45, item 3).

Through the stable ABI torch's own out-of-memory error reached users as ``torch_call_dispatcher("aten::empty",
...) API call failed``.  The sizes below fit in 64 bits (the C core's overflow checks do not fire) but in no
machine's memory (terabytes), so the test holds on any CPU; were the check gone, the allocation would fail
with torch's opaque message (or be killed), and the message assertions fail.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import wavepe  # noqa: E402
import wavepe.ops as wo  # noqa: E402

# a query of 2^36 rows that occupies 64 bytes (stride 0): results shaped like it are 4 TiB
HUGE_L = 2**36


def _huge_q() -> torch.Tensor:
    return torch.randn(1, 1, 1, 16).expand(1, 1, HUGE_L, 16)


CASES = {
    "wavelet_bias": (lambda: wo.wavelet_bias(torch.randn(1, 4, 8, 16), wavepe.WaveletConfig.grid(16), k_len=2**40),
                     "rel_bias", "(1, 4, 8, 1099511627776)", "k_len=1099511627776"),
    "rel_bias": (lambda: wo.rel_bias(torch.randn(1, 4, 8, 16), torch.randn(33, 16), -16, k_len=2**40),
                 "rel_bias", "(1, 4, 8, 1099511627776)", "k_len=1099511627776"),
    "alibi_bias": (lambda: wo.alibi_bias(8, 2**20, 2**21),
                   "alibi_bias", "(8, 1048576, 2097152)", "k_len=2097152"),
    "wavelet_attention": (lambda: wo.wavelet_attention(_huge_q(), torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16),
                                                       wavepe.WaveletConfig.grid(16), causal=False),
                          "wavelet_attention", f"(1, 1, {HUGE_L}, 16)", f"q_len={HUGE_L}"),
    "rope": (lambda: wo.rope(_huge_q(), None, 0, wavepe.RopeConfig(theta=10000.0)),
             "rope", f"(1, 1, {HUGE_L}, 16)", f"L={HUGE_L}"),
}


@pytest.mark.parametrize("op", list(CASES))
def test_a_result_too_large_is_a_memory_error_naming_it(op):
    call, name, shape, argument = CASES[op]
    with pytest.raises(MemoryError) as info:
        call()
    text = str(info.value)
    assert text.startswith(f"{name}: "), text
    assert f"of shape {shape}" in text, text
    assert argument in text, text  # the argument that made it large
    assert re.search(r"\d+(\.\d+)? [KMGTPE]iB", text), text  # the bytes, in words
    assert "torch.float32" in text and "memory" in text, text
    assert "API call failed" not in text, text


def test_the_process_is_still_usable_after_the_refusal():
    with pytest.raises(MemoryError):
        wo.alibi_bias(8, 2**20, 2**21)
    small = wo.alibi_bias(8, 4, 4)
    assert small.shape == (8, 4, 4) and torch.isfinite(small).all()
