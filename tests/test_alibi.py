"""ALiBi bias and the sinusoidal table: NumPy and PyTorch front ends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wavepe.ufuncs as wu

from . import reference as ref

torch = pytest.importorskip("torch")
from .dispatch_log import DispatchLog  # noqa: E402  (needs torch)
import wavepe.ops as wo  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 6), m=st.integers(0, 20), n=st.integers(0, 40), off=st.integers(-10, 40),
       causal=st.booleans(), f64=st.booleans())
def test_numpy_against_oracle(h, m, n, off, causal, f64):
    dtype = np.float64 if f64 else np.float32
    got = wu.alibi_bias(h, m, n, q_offset=off, causal=causal, dtype=dtype)
    assert got.shape == (h, m, n) and got.dtype == dtype
    want = ref.alibi_bias(ref.alibi_slopes(h), m, n, off, causal)
    np.testing.assert_allclose(got, want, rtol=1e-6 if not f64 else 1e-15)


@pytest.mark.parametrize("causal", [True, False])
def test_both_isas_and_torch(isa, causal):
    slopes = np.array([0.5, 0.125, 3.0])
    for m, n, off in [(33, 50, 17), (1, 4097, 4096), (16, 16, 0), (5, 9, -3)]:
        want = ref.alibi_bias(slopes, m, n, off, causal)
        np.testing.assert_allclose(wu.alibi_bias(slopes, m, n, q_offset=off, causal=causal), want, rtol=1e-15)
        t = wo.alibi_bias(torch.tensor(slopes, dtype=torch.float32), m, n, q_offset=off, causal=causal)
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)


def test_large_positions_stay_exact(isa):
    # past 2^24 float32 cannot hold every distance; both paths must round alike
    off = 2**24 + 5
    got = wu.alibi_bias(np.array([1.0], np.float32), 2, 20, q_offset=off, causal=False)
    want = -np.abs(np.float32(1.0) * (off + np.arange(2)[:, None] - np.arange(20)[None, :]).astype(np.float32))
    np.testing.assert_array_equal(got[0], want)


def test_defaults_follow_kv_cache_convention():
    b = wu.alibi_bias(2, 3, 7)
    np.testing.assert_allclose(b, ref.alibi_bias(ref.alibi_slopes(2), 3, 7, 4, True))


def test_torch_opcheck_and_gradcheck():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64, requires_grad=True)
    for causal in (True, False):
        torch.library.opcheck(torch.ops.wavepe.alibi_bias, (slopes, 5, 7, 2, causal))
        assert torch.autograd.gradcheck(lambda s: wo.alibi_bias(s, 5, 7, q_offset=2, causal=causal), (slopes,))


def test_torch_half_inputs_compute_in_fp32():
    s = torch.tensor([0.5, 0.25], dtype=torch.bfloat16)
    out = wo.alibi_bias(s, 4, 4)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), wo.alibi_bias(s.float(), 4, 4).bfloat16().float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
def test_half_against_oracle_every_isa(isa, dtype, causal):
    # bf16 / fp16 slopes and bias read and written natively on the CPU, every ISA.  Each entry is
    # -slope * distance in float32 (the distance exact below 2^24), rounded once to the half type:
    # |got - exact| <= ulp_half(|exact|) / 2 + 2^-24 |exact| (one float32 rounding first), and
    # bit for bit the float32 kernel's entry rounded; fp16 overflows to inf past 65504.
    bits = {torch.bfloat16: 8, torch.float16: 11}[dtype]
    slopes = torch.tensor([0.5, 0.125, 3.0, 2.0**-8]).to(dtype)
    for m, n, off in [(33, 50, 17), (1, 4097, 4096), (16, 16, 0), (5, 9, -3), (3, 40, 30000)]:
        got = wo.alibi_bias(slopes, m, n, q_offset=off, causal=causal)
        assert got.dtype == dtype
        assert torch.equal(got, wo.alibi_bias(slopes.float(), m, n, q_offset=off, causal=causal).to(dtype))
        want = ref.alibi_bias(slopes.double().numpy(), m, n, off, causal)
        g = got.double().numpy()
        finite = np.abs(want) < (65504 if dtype == torch.float16 else np.inf)
        _, e = np.frexp(np.abs(want))
        tol = 0.5 * np.ldexp(1.0, e - bits) + 2.0**-24 * np.abs(want)
        assert np.all(np.abs(g - want)[finite] <= tol[finite])
        assert np.all(np.isinf(g[~finite]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_makes_no_float32_copy(dtype):
    # the wrapper hands half slopes to the kernel as they are: no copy to float32 before or after
    # (the slopes' finiteness check runs isfinite / all on them), the op's output is the half type
    slopes = torch.tensor([0.5, 0.25]).to(dtype)
    with DispatchLog() as log:
        out = wo.alibi_bias(slopes, 7, 9)
    assert not [c for c in log.calls if "copy" in c[0]], log.calls
    assert [c for c in log.calls if c[0].startswith("wavepe.")] == [("wavepe.alibi_bias.default", [dtype])], log.calls
    assert out.dtype == dtype


def test_torch_compile_fullgraph():
    slopes = torch.tensor([0.5, 0.25])

    @torch.compile(fullgraph=True, backend="eager")
    def f(s):
        return wo.alibi_bias(s, 6, 6) * 2

    torch.testing.assert_close(f(slopes), wo.alibi_bias(slopes, 6, 6) * 2)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: wu.alibi_bias(0, 3), ValueError, "num_heads must be >= 1"),
        (lambda: wu.alibi_bias(2, -1), ValueError, "q_len must be >= 0"),
        (lambda: wu.alibi_bias(2, 3, k_len=-2), ValueError, "k_len must be >= 0"),
        (lambda: wu.alibi_bias(np.ones((2, 2)), 3), ValueError, r"slopes must be one-dimensional"),
        (lambda: wu.alibi_bias(np.array([1, 2]), 3), TypeError, "slopes must be a float32 or float64"),
        (lambda: wu.alibi_bias(np.array([np.nan]), 3), ValueError, "slopes must be finite"),
        (lambda: wu.alibi_bias(2, 3, q_offset=1.5), TypeError, "q_offset must be an integer"),
        (lambda: wu.alibi_bias(2**20, 2**20, 2**20), OverflowError, "alibi_bias"),
        (lambda: wo.alibi_bias(torch.ones(2, 2), 3), ValueError, "slopes must be one-dimensional"),
        (lambda: wo.alibi_bias(torch.ones(2, dtype=torch.int64), 3), TypeError, "slopes must be a floating-point"),
        (lambda: wo.alibi_bias(2, 2**31, 2**31), ValueError, "overflow"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sinusoidal_table(dtype):
    for length, dim, off in [(17, 8, 0), (5, 7, 100), (0, 4, 0), (3, 1, -2)]:
        got = wu.sinusoidal_table(length, dim, offset=off, dtype=dtype)
        assert got.shape == (length, dim) and got.dtype == dtype
        np.testing.assert_allclose(got, ref.sinusoidal_table(length, dim, off), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="base must be > 0"):
        wu.sinusoidal_table(4, 4, base=0.0)
    with pytest.raises(ValueError, match="dim must be >= 1"):
        wu.sinusoidal_table(4, 0)
