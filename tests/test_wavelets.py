"""The wavelet ufuncs, their support and the relative tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pywt
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import wavepe
import wavepe.ufuncs as wu
from wavepe import WaveletConfig

from . import reference as ref
from .conftest import ISAS

FAMILIES = ["ricker", "gaussian", "morlet", "haar"]
TOL = {np.float32: dict(rtol=3e-6, atol=1e-37), np.float64: dict(rtol=1e-13, atol=1e-300)}


def assert_psi_close(got, t, family, dtype, want=None):
    """|got - psi(t)| within an error model of the formula in ``dtype``.

    Each step's rounding is relative to the size of its operands, not of the
    result: near the zeros of (1 - t^2) or cos(5t) the result is small while
    the error is eps * t^2 (or eps * |5t|) times the envelope, and exp(-t^2/2)
    inherits the argument's absolute error eps * t^2 / 2 as a relative one.
    The kernels flush subnormals (docs/DEVELOPING.md): no output is subnormal, and a
    value the formula puts below the smallest normal may come out as 0, so the absolute
    tolerance is the smallest normal number (not the smallest subnormal).
    """
    got = np.asarray(got)
    tiny = np.finfo(dtype).tiny  # smallest normal
    t = np.asarray(t, np.float64)
    t = np.where(np.abs(t) < tiny, np.copysign(0.0, t), t)  # subnormal inputs read as (signed) zero
    want = ref.psi(family, t) if want is None else want
    eps = np.finfo(dtype).eps
    assert not np.any((got != 0) & (np.abs(got) < tiny)), f"{family}: subnormal outputs {got[(got != 0) & (np.abs(got) < tiny)][:5]}"
    env = np.exp(-t * t / 2)
    scale = env * (1 + t * t) * (1 + np.abs(5 * t)) * (1 + t * t / 2)
    tol = 4 * eps * (np.abs(want) + scale) + tiny
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = ~(err <= tol) & ~(np.isnan(want) & np.isnan(got))
    assert not bad.any(), f"{family} {np.dtype(dtype)}: t={t[bad][:5]} got={got[bad][:5]} want={want[bad][:5]}"


def test_real_ufuncs():
    for fam in FAMILIES:
        uf = getattr(wu, fam)
        assert isinstance(uf, np.ufunc)
        assert uf.nin == 1 and uf.nout == 1
        assert set(uf.types) == {"f->f", "d->d"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_oracle_dense(isa, family, dtype):
    # dense grid through the main lobe, the tails and the underflow edge
    t = np.concatenate([np.linspace(-40, 40, 20001), np.linspace(-1.5, 1.5, 3001),
                        [0.0, -0.0, 0.5, 1.0, np.nextafter(0.5, 0), np.nextafter(1.0, 0)]]).astype(dtype)
    got = getattr(wu, family)(t)
    assert got.dtype == dtype
    assert_psi_close(got, t, family, dtype)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(isa, family, dtype):
    t = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 1e300 if dtype == np.float64 else 3e38], dtype=dtype)
    got = getattr(wu, family)(t)
    assert got[0] == 0 and got[1] == 0 and got[3] == 0 and got[4] == 0 and got[5] == 0
    assert np.isnan(got[2])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("vector_isa", ISAS[1:] or [pytest.param("none", marks=pytest.mark.skip("no vector ISA"))])
def test_scalar_and_vector_agree(family, vector_isa, monkeypatch):
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        t = (rng.standard_normal(10007) * 6).astype(dtype)
        monkeypatch.setenv("WAVEPE_ISA", "scalar")
        scalar = getattr(wu, family)(t)
        monkeypatch.setenv("WAVEPE_ISA", vector_isa)
        vector = getattr(wu, family)(t)
        assert_psi_close(vector, t, family, dtype, want=scalar.astype(np.float64))


@settings(max_examples=60, deadline=None)
@given(
    x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=9),
                 elements=st.floats(-50, 50, allow_nan=False)),
    family=st.sampled_from(FAMILIES),
    f32=st.booleans(),
)
def test_broadcasting_strides_out_dtype(x, family, f32):
    uf = getattr(wu, family)
    if f32:
        got = uf(x, dtype=np.float32)  # dtype= selects the float32 loop
        assert got.dtype == np.float32
        assert_psi_close(got, x.astype(np.float32), family, np.float32)
    # non-contiguous views, broadcasting against a column, out=
    view = x[..., ::-1]
    out = np.empty_like(view)
    res = uf(view, out=out)
    assert res is out
    assert_psi_close(out, view, family, np.float64)
    col = np.array([[0.0], [1.0]])
    assert uf(col + x.reshape(-1)).shape == (2, x.size)


def test_integer_input_casts_to_float64():
    got = wu.ricker(np.arange(-3, 4))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref.psi("ricker", np.arange(-3, 4)))


# PyWavelets tabulates psi on its own grid; its continuous wavelets differ from
# ours only by constant factors, after one change of variable:
#   mexh(t) = 2/(sqrt(3) pi^(1/4)) * ricker(t)
#   morl(t) = morlet(t) exactly
#   gaus1(t) = C * d/dt exp(-t^2) = C' * gaussian(sqrt(2) t)   (pywt's Gaussian is exp(-t^2))
# The factor is fitted, then must be constant over the whole tabulated range.
@pytest.mark.parametrize("family,pywt_name,stretch", [("ricker", "mexh", 1.0), ("gaussian", "gaus1", math.sqrt(2)),
                                                      ("morlet", "morl", 1.0)])
def test_shape_matches_pywavelets(family, pywt_name, stretch):
    psi_pywt, t = pywt.ContinuousWavelet(pywt_name).wavefun(level=12)
    ours = getattr(wu, family)(stretch * t)
    mask = np.abs(ours) > 1e-3
    ratio = psi_pywt[mask] / ours[mask]
    assert np.ptp(ratio) < 1e-9 * np.abs(ratio).max(), f"{pywt_name}/{family} is not a constant multiple"
    expected = {"ricker": 2 / (math.sqrt(3) * math.pi ** 0.25), "morlet": 1.0}.get(family)
    if expected is not None:
        assert ratio[0] == pytest.approx(expected, rel=1e-9)


def test_haar_matches_pywavelets():
    # pywt's Haar wavelet function on [0, 1): +1 then -1
    _, psi_h, x = pywt.Wavelet("haar").wavefun(level=10)
    inside = (x > 1e-9) & (x < 1 - 1e-9) & (np.abs(x - 0.5) > 1e-9)
    np.testing.assert_array_equal(np.sign(psi_h[inside]), wu.haar(x[inside]))


# ---- support ---------------------------------------------------------------

@pytest.mark.parametrize("family", ["ricker", "gaussian", "morlet"])
def test_support_is_numerical_and_exact(isa, family):
    cfg = WaveletConfig(family, [1.0], [0.0])
    lo32, hi32 = cfg.support_t(np.float32)
    lo64, hi64 = cfg.support_t(np.float64)
    assert lo32 == -hi32 and lo64 == -hi64
    assert 13.0 < hi32 < 15.0  # |psi| < half the smallest normal float32 beyond ~13.3-13.7
    assert 36.0 < hi64 < 40.0  # float64 reaches it much later
    # psi is exactly zero beyond the bound, and not just below it
    beyond = np.linspace(hi32 * (1 + 1e-6), 60, 5000).astype(np.float32)
    assert not np.any(getattr(wu, family)(beyond))
    assert not np.any(getattr(wu, family)(-beyond))
    inside = np.linspace(hi32 * 0.98, hi32 * 0.999, 50).astype(np.float32)
    assert np.any(getattr(wu, family)(inside))  # the bound is tight, not generous


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subnormal_inputs_read_as_zero(isa, family, dtype):
    sub = np.finfo(dtype).smallest_subnormal
    t = np.array([sub, -sub, 1000 * sub, np.finfo(dtype).tiny / 2, 0.0], dtype=dtype)
    got = getattr(wu, family)(t)
    np.testing.assert_array_equal(got, np.full(5, got[-1]))  # every one is psi(0)


def test_support_tolerance_shrinks_and_bounds():
    exact = WaveletConfig("ricker", [1.0], [0.0]).support_t()[1]
    loose = WaveletConfig("ricker", [1.0], [0.0], support_tol=1e-3).support_t()[1]
    assert loose < exact
    t = np.linspace(loose, 20, 1000)
    assert np.all(np.abs(ref.psi("ricker", t)) <= 1e-3 * 1.0 + 1e-15)


def test_haar_support():
    assert WaveletConfig("haar", [4.0], [3.0]).support() == (3, 6)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_table_against_oracle_and_trimmed(family, dtype):
    cfg = WaveletConfig.grid(32, n_scales=4, family=family)
    table, r_lo = cfg.table(dtype)
    assert table.dtype == dtype and table.shape[1] == 32 and not table.flags.writeable
    r = np.arange(r_lo, r_lo + table.shape[0])
    want = ref.wavelet_table(family, cfg.scales, cfg.shifts, r)
    t = (r[:, None] - cfg.shifts) / cfg.scales
    assert_psi_close(table, t.astype(dtype), family, dtype, want=want)
    assert np.any(table[0]) and np.any(table[-1])
    # every distance outside the table is zero by the formula, evaluated in dtype
    outside = np.concatenate([np.arange(r_lo - 200, r_lo), np.arange(r[-1] + 1, r[-1] + 201)])
    t = ((outside[:, None] - cfg.shifts) / cfg.scales).astype(dtype)
    assert not np.any(getattr(wu, family)(t))


def test_table_normalize():
    cfg = WaveletConfig.grid(16, n_scales=4, normalize=True)
    table, r_lo = cfg.table(np.float64)
    r = np.arange(r_lo, r_lo + table.shape[0])
    np.testing.assert_allclose(table, ref.wavelet_table("ricker", cfg.scales, cfg.shifts, r, normalize=True),
                               rtol=1e-13, atol=1e-300)


def test_table_is_cached():
    cfg = WaveletConfig.grid(64)
    assert cfg.table()[0] is cfg.table()[0]
