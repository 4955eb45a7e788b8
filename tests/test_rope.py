"""RoPE: C kernels (scalar, AVX2) through torch and NumPy against the float64
oracle, Hugging Face equivalence, autograd, torch.compile, errors, and the
RoPE spectra (linear, NTK, dynamic, YaRN, Llama 3) against Hugging Face's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wavepe.ufuncs as wu
from wavepe import RopeConfig

from . import reference as ref

torch = pytest.importorskip("torch")
from .dispatch_log import DispatchLog  # noqa: E402  (needs torch)
import importlib  # noqa: E402

import wavepe.ops as wo  # noqa: E402

rope_mod = importlib.import_module("wavepe.ops.rope")  # the module (wavepe.ops.rope is the function)

UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float64: 2.0**-53, np.float32: 2.0**-24, np.float64: 2.0**-53}


def assert_rope_close(got, x, want, layout: str, scale: float, dtype, ulps: float = 8.0) -> None:
    """Error model: each output element a*c - b*s carries a few roundings of
    |a| + |b| (sin/cos within 1.5 ulp, the products, the sum, the scale):
    measured below 4 unit roundoffs, checked against 8."""
    got = got.detach().double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    x = x.detach().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)
    bound = ulps * UNIT_ROUNDOFF[dtype] * ref.rope_pair_magnitude(x, layout) * scale + 1e-300
    err = np.abs(got - want)
    assert got.shape == want.shape
    assert np.all(err <= bound), f"max error / bound = {float(np.max(err / bound)):.3g}"


def make_positions(form: str, batch: int, length: int, gen: np.random.Generator, offset: int = 1000):
    """(torch positions, NumPy positions, oracle positions broadcastable to (B, H, L))."""
    if form == "offset":
        return offset, offset, np.arange(offset, offset + length)[None, None, :]
    if form == "L":
        p = gen.integers(-50, 5000, size=length)
        return torch.from_numpy(p), p, p[None, None, :]
    p = gen.integers(-50, 5000, size=(batch, length))
    return torch.from_numpy(p), p[:, None, :], p[:, None, :]


# ---- kernels against the oracle ------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("form", ["offset", "L", "BL"])
@pytest.mark.parametrize("d", [6, 128])
def test_kernels_against_oracle(isa, dtype, layout, fraction, form, d):
    gen = np.random.default_rng(hash((str(dtype), layout, fraction, form, d)) % 2**32)
    B, Hq, Hk, L = 2, 4, 2, 37
    cfg = RopeConfig(theta=500.0, rotary_fraction=fraction, layout=layout)
    pairs = math.ceil(round(fraction * d / 2, 9))
    # The oracle gets the spectrum the kernel got: RopeConfig.inv_freq runs NumPy's array
    # power, whose SIMD path differs from libm by an ulp on some CPUs (AVX-512), and at
    # positions in the thousands one ulp of inv_freq is hundreds of ulps of output.  The
    # spectrum itself is checked against the formula in test_inv_freq_matches_formula.
    inv = cfg.inv_freq(d)
    q = torch.randn(B, Hq, L, d, dtype=dtype)
    k = torch.randn(B, Hk, L, d, dtype=dtype)
    pos_t, pos_np, pos_ref = make_positions(form, B, L, gen)
    q_rot, k_rot = wo.rope(q, k, pos_t, cfg)
    assert q_rot.dtype == dtype and q_rot.shape == q.shape and k_rot.shape == k.shape
    assert_rope_close(q_rot, q, ref.rope(q.numpy(), pos_ref, inv, layout, pairs), layout, 1.0, dtype)
    assert_rope_close(k_rot, k, ref.rope(k.numpy(), pos_ref, inv, layout, pairs), layout, 1.0, dtype)
    # the NumPy gufunc runs the same kernel: the same bits
    np.testing.assert_array_equal(wu.rope(q.numpy(), pos_np, cfg), q_rot.numpy())
    np.testing.assert_array_equal(wu.rope(k.numpy(), pos_np, cfg), k_rot.numpy())


@pytest.mark.parametrize("theta", [10.0, 500.0, 1e4, 5e5, 1e6])
@pytest.mark.parametrize("d", [8, 64, 128, 130])
def test_inv_freq_matches_formula(theta, d):
    # to a few ulp, not bit for bit: NumPy's vector pow and libm's may differ in the last bit
    got = RopeConfig(theta=theta).inv_freq(d)
    want = ref.rope_inv_freq(theta, d)
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_array_max_ulp(got, want, maxulp=4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scale_and_inverse(isa, dtype, layout):
    q = torch.randn(3, 2, 21, 130, dtype=dtype)
    inv = torch.from_numpy(ref.rope_inv_freq(1e4, 130))
    pos = torch.randint(0, 10**6, (3, 21))
    for pairs, scale in [(65, 1.7), (40, 0.5), (0, 2.0)]:
        fwd, none = wo.rope_inv_freq(q, None, pos, inv, layout=layout, rotary_pairs=pairs, scale=scale)
        assert none is None
        want = ref.rope(q.numpy(), pos.numpy()[:, None, :], inv.numpy(), layout, pairs, scale)
        assert_rope_close(fwd, q, want, layout, scale, dtype)
        back = wu.rope_inv_freq(fwd.numpy(), pos.numpy()[:, None, :], inv.numpy(), layout=layout,
                                rotary_pairs=pairs, scale=scale, inverse=True)
        want_back = ref.rope(fwd.numpy(), pos.numpy()[:, None, :], inv.numpy(), layout, pairs, scale, inverse=True)
        assert_rope_close(back, fwd, want_back, layout, scale, dtype)
        # inverse of forward is the identity times scale^2
        assert_rope_close(back, q, q.double().numpy() * scale**2, layout, scale**2, dtype, ulps=48)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_positions_stay_accurate(isa, dtype):
    # angles are formed in float64: at position 1e9 a float32 angle would be off by tens of radians
    q = torch.randn(1, 2, 9, 64, dtype=dtype)
    inv = ref.rope_inv_freq(1e4, 64)
    for offset in (10**6, 10**9, 2**45 + 3):  # the last is past the vector sincos range (libm path)
        q_rot, _ = wo.rope_inv_freq(q, None, offset, torch.from_numpy(inv))
        want = ref.rope(q.numpy(), np.arange(offset, offset + 9)[None, None, :], inv)
        assert_rope_close(q_rot, q, want, "half", 1.0, dtype)


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 3), hq=st.integers(1, 4), hk=st.integers(0, 3), length=st.integers(0, 40),
    half=st.integers(1, 24), form=st.sampled_from(["offset", "L", "BL"]), offset=st.integers(-1000, 10**6),
    layout=st.sampled_from(["half", "interleaved"]), pair_frac=st.floats(0, 1), scale=st.floats(0.25, 4),
    dtype=st.sampled_from(["float64", "float32", "bfloat16", "float16"]), seed=st.integers(0, 2**32 - 1),
)
def test_random_shapes_against_oracle(b, hq, hk, length, half, form, offset, layout, pair_frac, scale, dtype, seed):
    # bf16 / fp16 too: every width of the parity split's and the widening loads' tails, pass-through dims
    gen = np.random.default_rng(seed)
    dtype = getattr(torch, dtype)
    d = 2 * half
    pairs = int(round(pair_frac * half))
    inv = gen.uniform(1e-4, 2.0, size=half)
    q = torch.from_numpy(gen.standard_normal((b, hq, length, d))).to(dtype)
    k = torch.from_numpy(gen.standard_normal((b, hk, length, d))).to(dtype) if hk else None
    pos_t, pos_np, pos_ref = make_positions(form, b, length, gen, offset)
    q_rot, k_rot = wo.rope_inv_freq(q, k, pos_t, torch.from_numpy(inv), layout=layout, rotary_pairs=pairs,
                                    scale=scale)
    check = assert_rope_half_close if dtype in HALF_BITS else assert_rope_close
    check(q_rot, q, ref.rope(q.double().numpy(), pos_ref, inv, layout, pairs, scale), layout, scale, dtype)
    if k is None:
        assert k_rot is None
    else:
        check(k_rot, k, ref.rope(k.double().numpy(), pos_ref, inv, layout, pairs, scale), layout, scale, dtype)
    if dtype != torch.bfloat16:  # the NumPy API (float16 too; NumPy has no bfloat16)
        got_np = wu.rope_inv_freq(q.numpy(), pos_np, inv, layout=layout, rotary_pairs=pairs, scale=scale)
        np.testing.assert_array_equal(got_np, q_rot.numpy())


def test_numpy_broadcasting_and_dtypes():
    gen = np.random.default_rng(3)
    x = gen.standard_normal((2, 3, 11, 8))
    cfg = RopeConfig(theta=100.0, layout="interleaved", rotary_fraction=0.5)
    inv = ref.rope_inv_freq(100.0, 8)
    for pos in (5, np.arange(11), gen.integers(0, 99, (2, 1, 11)), gen.integers(0, 99, (2, 3, 11)),
                gen.integers(0, 99, (2, 3, 11)).astype(np.int32)):
        pos_ref = np.arange(5, 16) if isinstance(pos, int) else pos
        want = ref.rope(x, pos_ref, inv, "interleaved", 2)
        np.testing.assert_allclose(wu.rope(x, pos, cfg), want, rtol=0, atol=1e-14)
    # float16 is read natively (the gufunc's float16 loop) and computed in float32, rounded once:
    # the float32 result rounded to float16; strided views need no copy by the caller
    y16 = wu.rope(x.astype(np.float16), 5, cfg)
    assert y16.dtype == np.float16
    np.testing.assert_array_equal(y16, wu.rope(x.astype(np.float16).astype(np.float32), 5, cfg).astype(np.float16))
    assert "e" in {t[0] for t in wu.rope_gufunc.types}  # a float16 loop, not an upcast
    raw16 = wu.rope_gufunc(x.astype(np.float16)[0, 0], np.arange(5, 16), cfg.inv_freq(8)[:2], 1.0, 1)
    assert raw16.dtype == np.float16
    np.testing.assert_array_equal(raw16, y16[0, 0])
    xt16 = x.astype(np.float16).transpose(0, 2, 1, 3)  # strided over (heads, positions), d contiguous
    np.testing.assert_array_equal(wu.rope(xt16, 5, cfg), wu.rope(np.ascontiguousarray(xt16), 5, cfg))
    xt = gen.standard_normal((2, 11, 3, 8)).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(wu.rope(xt, 5, cfg), wu.rope(np.ascontiguousarray(xt), 5, cfg))
    x_strided_d = gen.standard_normal((3, 11, 16))[..., ::2]
    np.testing.assert_array_equal(wu.rope(x_strided_d, 5, cfg), wu.rope(np.ascontiguousarray(x_strided_d), 5, cfg))


def test_raw_gufunc_paths_and_invalid_values():
    """The gufunc's own loop: strided head vectors, per-iteration parameters,
    and values the core rejects (a ValueError naming the argument and value, never NaN or a crash)."""
    gen = np.random.default_rng(4)
    x = gen.standard_normal((3, 7, 12))
    inv = ref.rope_inv_freq(1e4, 12)
    strided = gen.standard_normal((3, 7, 24))[..., ::2]
    want = ref.rope(strided, np.arange(7), inv, "half", 6)
    np.testing.assert_allclose(wu.rope_gufunc(strided, np.arange(7), inv, 1.0, 0), want, atol=1e-14, rtol=0)
    # a different scale and mode per outer iteration
    got = wu.rope_gufunc(x, np.arange(7), inv[:4], np.array([1.0, 2.0, 0.5]), np.array([0, 1, 3]))
    for i, (scale, layout, inverse) in enumerate([(1.0, "half", False), (2.0, "interleaved", False),
                                                  (0.5, "interleaved", True)]):
        np.testing.assert_allclose(got[i], ref.rope(x[i], np.arange(7), inv, layout, 4, scale, inverse), atol=1e-14)
    with pytest.raises(ValueError, match=r"rope: inv_freq has 7 entries, more than the d/2=6 pairs"):
        wu.rope_gufunc(x, np.arange(7), np.ones(7), 1.0, 0)
    with pytest.raises(ValueError, match=r"rope: mode=9 is not one of 0\.\.3"):
        wu.rope_gufunc(x, np.arange(7), inv, 1.0, np.array([0, 9, 0]))  # unknown mode in row 1
    with pytest.raises(ValueError, match=r"rope: scale=nan must be finite"):
        wu.rope_gufunc(strided, np.arange(7), inv, np.nan, 0)  # the row-by-row path
    with pytest.raises(ValueError, match=r"rope: inv_freq\[2\]=inf must be finite"):
        wu.rope_gufunc(x, np.arange(7), np.array([1.0, 0.5, np.inf]), 1.0, 0)


# ---- Hugging Face ----------------------------------------------------------------

HF_CASES = {
    "default": ({"rope_type": "default", "rope_theta": 10000.0}, None),
    "yarn": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 256},
             {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}),
    "llama3": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
               {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256}),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_half_layout_equals_hugging_face_llama(case, isa):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    rope_parameters, scaling = HF_CASES[case]
    d, hq, hk, B, L = 64, 4, 2, 2, 48
    hf_cfg = LlamaConfig(hidden_size=d * hq, num_attention_heads=hq, num_key_value_heads=hk, head_dim=d,
                         max_position_embeddings=1024, rope_parameters=dict(rope_parameters))
    rotary = LlamaRotaryEmbedding(hf_cfg)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(B, hq, L, d, generator=gen)
    k = torch.randn(B, hk, L, d, generator=gen)
    pos = torch.stack([torch.arange(L), torch.arange(100, 100 + L)])
    cos, sin = rotary(q, pos)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    q_ours, k_ours = wo.rope(q, k, pos, RopeConfig(theta=rope_parameters["rope_theta"], scaling=scaling))
    # Hugging Face forms angles in float32 (error ~ pos * 2^-24 rad); ours are float64
    tol = 4 * (float(pos.max()) + 2) * 2.0**-24
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=tol * float(q.abs().max()))
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=tol * float(k.abs().max()))


def _hf_inv_freq(rope_parameters: dict, head_dim: int, max_pos: int, seq_len=None):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=max_pos, rope_parameters=dict(rope_parameters))
    inv, factor = ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](cfg, "cpu", seq_len=seq_len)
    return inv.double().numpy(), float(factor)


SPECTRA = [
    ("linear", {"factor": 4.0}, {}),
    ("linear", {"factor": 1.5}, {}),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 4096}, {}),
    ("yarn", {"factor": 16.0, "original_max_position_embeddings": 2048, "beta_fast": 16, "beta_slow": 2,
              "truncate": False}, {}),
    ("yarn", {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.707}, {}),
    ("yarn", {"factor": 8.0, "original_max_position_embeddings": 8192, "attention_factor": 1.25}, {}),
    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}, {}),
    ("llama3", {"factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                "original_max_position_embeddings": 2048}, {}),
    ("dynamic", {"factor": 2.0, "original_max_position_embeddings": 2048, "seq_len": 5000}, {}),
    ("dynamic", {"factor": 4.0, "original_max_position_embeddings": 4096, "seq_len": 100}, {}),
]


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("kind,params,_", SPECTRA)
def test_spectra_match_hugging_face(kind, params, _, head_dim, theta):
    cfg = RopeConfig(theta=theta, scaling={"type": kind, **params})
    hf_params = {k: v for k, v in params.items() if k != "seq_len"}
    max_pos = params.get("original_max_position_embeddings", 4096)
    if kind == "dynamic":
        # HF's dynamic NTK reads the training length from max_position_embeddings
        inv_hf, factor_hf = _hf_inv_freq({"rope_type": kind, "rope_theta": theta, "factor": params["factor"]},
                                         head_dim, max_pos, seq_len=params["seq_len"])
    else:
        inv_hf, factor_hf = _hf_inv_freq({"rope_type": kind, "rope_theta": theta, **hf_params}, head_dim,
                                         2 * max_pos)
    # Hugging Face computes in float32
    np.testing.assert_allclose(cfg.inv_freq(head_dim), inv_hf, rtol=1e-6)
    assert cfg.attention_factor == pytest.approx(factor_hf, rel=1e-12)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("alpha", [2.0, 3.0, 8.0])
def test_static_ntk_is_dynamic_ntk_at_its_length(head_dim, alpha):
    # static NTK base theta * alpha^(d/(d-2)) is HF's dynamic NTK at the length where
    # factor * s / L0 - (factor - 1) = alpha
    factor, original = 2.0, 2048
    seq_len = original * (alpha + factor - 1) / factor
    inv_hf, _ = _hf_inv_freq({"rope_type": "dynamic", "rope_theta": 1e4, "factor": factor}, head_dim, original,
                             seq_len=seq_len)
    cfg = RopeConfig(theta=1e4, scaling={"type": "ntk", "factor": alpha})
    np.testing.assert_allclose(cfg.inv_freq(head_dim), inv_hf, rtol=1e-6)
    d = head_dim
    np.testing.assert_allclose(cfg.inv_freq(d), (1e4 * alpha ** (d / (d - 2))) ** (-np.arange(0, d, 2) / d),
                               rtol=1e-14)


@pytest.mark.parametrize(
    "scaling,exc,match",
    [
        ({"type": "linear"}, ValueError, r"scaling\['factor'\] is required"),
        ({"type": "linear", "factor": 0.0}, ValueError, r"scaling\['factor'\] must be > 0"),
        ({"type": "linear", "factor": float("nan")}, ValueError, r"scaling\['factor'\] must not be NaN"),
        ({"type": "linear", "factor": "4"}, TypeError, r"scaling\['factor'\] must be a real number"),
        ({"type": "linear", "factor": 2.0, "fator": 3}, ValueError, r"unknown key\(s\) \['fator'\]"),
        ({"type": "ntk", "factor": -2.0}, ValueError, r"scaling\['factor'\] must be > 0"),
        ({"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}, ValueError,
         r"scaling\['seq_len'\] is required"),
        ({"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048, "seq_len": 0}, ValueError,
         r"scaling\['seq_len'\] must be >= 1"),
        ({"type": "yarn", "factor": 4.0}, ValueError, r"scaling\['original_max_position_embeddings'\] is required"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048.5}, TypeError,
         r"scaling\['original_max_position_embeddings'\] must be an integer"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_fast": 1, "beta_slow": 2},
         ValueError, r"scaling\['beta_fast'\] must be > scaling\['beta_slow'\]"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_slow": -1}, ValueError,
         r"scaling\['beta_slow'\] must be > 0"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "attention_factor": 0.0},
         ValueError, r"scaling\['attention_factor'\] must be > 0"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "truncate": "yes"}, TypeError,
         r"scaling\['truncate'\] must be a bool"),
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mscale": -1.0}, ValueError,
         r"scaling\['mscale'\] must be >= 0"),
        ({"type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
          "original_max_position_embeddings": 8192}, ValueError, r"scaling\['high_freq_factor'\] must be >"),
        ({"type": "llama3", "factor": 8.0, "low_freq_factor": 0.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}, ValueError, r"scaling\['low_freq_factor'\] must be > 0"),
        ({"type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
         ValueError, r"scaling\['low_freq_factor'\] is required"),
        ({"type": "longrope", "factor": 2.0}, ValueError, r"scaling\['type'\] must be one of"),
        ({"type": "linear", "rope_type": "yarn", "factor": 2.0}, ValueError, "disagree"),
    ],
)
def test_scaling_validation(scaling, exc, match):
    with pytest.raises(exc, match=match):
        RopeConfig(scaling=scaling)


def test_scaling_accepts_hugging_face_spelling():
    hf_style = RopeConfig(theta=1e4, scaling={"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 2048, "attention_factor": None,
                                              "beta_fast": None, "beta_slow": None})
    ours = RopeConfig(theta=1e4, scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048})
    np.testing.assert_array_equal(hf_style.inv_freq(64), ours.inv_freq(64))
    assert hf_style.attention_factor == ours.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1)


# ---- autograd, opcheck, compile ----------------------------------------------------

@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradcheck_q_and_k(layout):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 5, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, 1, 5, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    inv = torch.from_numpy(ref.rope_inv_freq(10.0, 6))
    pos = torch.tensor([[0, 3, 1, 7, 2], [5, 5, 9, 100, -4]])

    def f(q, k):
        return wo.rope_inv_freq(q, k, pos, inv, layout=layout, rotary_pairs=2, scale=1.3)

    assert torch.autograd.gradcheck(f, (q, k))
    assert torch.autograd.gradgradcheck(f, (q, k))
    assert torch.autograd.gradcheck(lambda q: wo.rope_inv_freq(q, None, 4, inv, layout=layout)[0], (q,))


def test_backward_is_the_inverse_rotation():
    q = torch.randn(1, 3, 8, 16, requires_grad=True)
    k = torch.randn(1, 1, 8, 16, requires_grad=True)
    cfg = RopeConfig(theta=50.0)
    q_rot, k_rot = wo.rope(q, k, 3, cfg)
    gq, gk = torch.randn_like(q_rot), torch.randn_like(k_rot)
    ((q_rot * gq).sum() + (k_rot * gk).sum()).backward()
    # the same kernel with inverse=True, reached through NumPy: the same bits
    np.testing.assert_array_equal(q.grad.numpy(), wu.rope(gq.numpy(), 3, cfg, inverse=True))
    np.testing.assert_array_equal(k.grad.numpy(), wu.rope(gk.numpy(), 3, cfg, inverse=True))


def test_opcheck():
    inv = torch.from_numpy(ref.rope_inv_freq(1e4, 8))
    q32 = torch.randn(2, 3, 5, 8, requires_grad=True)
    q64 = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    k32 = torch.randn(2, 1, 5, 8, requires_grad=True)
    q_t = torch.randn(2, 5, 3, 8).transpose(1, 2).requires_grad_()  # strided input
    pos_bl = torch.randint(-5, 50, (2, 5))
    for args in [
        (q32, k32, None, inv, 7, 4, "half", 1.0, False),
        (q64, None, None, inv, -3, 2, "interleaved", 1.5, True),
        (q_t, k32, pos_bl[:1], inv, 0, 3, "interleaved", 0.5, True),
        (q32, k32, pos_bl, inv, 0, 0, "half", 1.0, False),
        # half types are read natively on the CPU
        (q32.detach().bfloat16().requires_grad_(), k32.detach().bfloat16().requires_grad_(), None, inv, 7, 4, "half",
         1.0, False),
        (q_t.detach().half().requires_grad_(), None, pos_bl, inv, 0, 3, "interleaved", 0.5, True),
    ]:
        torch.library.opcheck(torch.ops.wavepe.rope, args)


def test_torch_compile_fullgraph_forward_and_backward():
    cfg = RopeConfig(theta=1e4, rotary_fraction=0.5)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def attention_logits(q, k, positions):
        q_rot, k_rot = wo.rope(q, k, positions, cfg)
        return q_rot @ k_rot.transpose(-1, -2)

    q = torch.randn(1, 2, 16, 32, requires_grad=True)
    k = torch.randn(1, 2, 16, 32, requires_grad=True)
    for positions in (5, torch.arange(16) * 2):
        got = attention_logits(q, k, positions)
        q_rot, k_rot = wo.rope(q, k, positions, cfg)
        want = q_rot @ k_rot.transpose(-1, -2)
        torch.testing.assert_close(got, want)
        g_got = torch.autograd.grad(got.sum(), (q, k))
        g_want = torch.autograd.grad(want.sum(), (q, k))
        for a, b in zip(g_got, g_want):
            torch.testing.assert_close(a, b)


def test_torch_compile_changing_offsets_and_lengths():
    # decoding: the offset (and the length) changes every call; automatic
    # dynamic shapes make them symbolic instead of recompiling for each
    cfg = RopeConfig(theta=1e4, layout="interleaved")

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(q, k, offset):
        return wo.rope(q, k, offset, cfg)

    for length, offset in [(3, 7), (3, 8), (5, 1000), (1, 1001), (4, 0)]:
        q, k = torch.randn(2, 4, length, 16), torch.randn(2, 2, length, 16)
        for got, want in zip(step(q, k, offset), wo.rope(q, k, offset, cfg)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_torch_compile_dynamic_shapes_with_inv_freq():
    inv = torch.from_numpy(ref.rope_inv_freq(1e4, 16))

    @torch.compile(fullgraph=True, backend="aot_eager", dynamic=True)
    def step(q, k, positions):
        return wo.rope_inv_freq(q, k, positions, inv, rotary_pairs=6)

    for length, positions in [(3, 7), (5, torch.arange(5) * 3), (2, 11)]:
        q, k = torch.randn(2, 4, length, 16), torch.randn(2, 2, length, 16)
        for got, want in zip(step(q, k, positions), wo.rope_inv_freq(q, k, positions, inv, rotary_pairs=6)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- layouts, dtypes, devices ------------------------------------------------------

def test_non_contiguous_inputs_read_in_place(isa):
    B, L, H, Hk, d = 2, 19, 4, 2, 64
    cfg = RopeConfig(theta=1e4, rotary_fraction=0.75)
    # a fused projection (B, L, H + 2 Hk, d) viewed as (B, H, L, d) without a copy
    qkv = torch.randn(B, L, H + 2 * Hk, d)
    q = qkv[:, :, :H].transpose(1, 2)
    k = qkv[:, :, H:H + Hk].transpose(1, 2)
    pos = torch.arange(2 * L).reshape(1, 2 * L)[:, ::2].expand(B, L)  # stride 0 over batch, 2 over L
    q_rot, k_rot = wo.rope(q, k, pos, cfg)
    q_ref, k_ref = wo.rope(q.contiguous(), k.contiguous(), pos.contiguous(), cfg)
    torch.testing.assert_close(q_rot, q_ref, rtol=0, atol=0)
    torch.testing.assert_close(k_rot, k_ref, rtol=0, atol=0)
    assert q_rot.is_contiguous() and k_rot.is_contiguous()
    # a head dimension that is itself strided is copied once
    wide = torch.randn(B, H, L, 2 * d)[..., ::2]
    torch.testing.assert_close(wo.rope(wide, None, 3, cfg)[0], wo.rope(wide.contiguous(), None, 3, cfg)[0],
                               rtol=0, atol=0)


HALF_BITS = {torch.bfloat16: (8, -126), torch.float16: (11, -14)}  # significant bits, smallest normal exponent


def half_ulp(x: np.ndarray, dtype) -> np.ndarray:
    """The spacing of bf16 / fp16 values at magnitude |x| (fp16: subnormal spacing below 2^-14)."""
    bits, emin = HALF_BITS[dtype]
    _, e = np.frexp(np.abs(x))  # |x| = m 2^e, m in [0.5, 1)
    return np.ldexp(1.0, np.maximum(e - 1, emin) - (bits - 1))


def assert_rope_half_close(got, x, want, layout: str, scale: float, dtype) -> None:
    """bf16 / fp16 kernels compute in float32 and round each output once, so
    |got - exact| <= ulp_half(|exact| + e32) / 2 + e32, with e32 the float32
    computation's error (assert_rope_close's 8 unit roundoffs of |a| + |b|)."""
    assert got.dtype == dtype
    got = got.detach().double().numpy()
    x = x.detach().double().numpy()  # the half inputs, exactly
    e32 = 8 * 2.0**-24 * ref.rope_pair_magnitude(x, layout) * scale + 2.0**-126
    bound = 0.5 * half_ulp(np.abs(want) + e32, dtype) + e32
    err = np.abs(got - want)
    assert got.shape == want.shape
    assert np.all(err <= bound), f"max error / bound = {float(np.max(err / bound)):.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [0.25, 1.0])
@pytest.mark.parametrize("form", ["offset", "L", "BL"])
@pytest.mark.parametrize("d", [6, 128])
def test_half_kernels_against_oracle(isa, dtype, layout, fraction, form, d):
    # bf16 / fp16 read and written natively on the CPU (float32 arithmetic), every ISA, q read
    # through transposed strides (a (B, L, H, d) projection), positions as an int and as tensors
    gen = np.random.default_rng(hash((str(dtype), layout, fraction, form, d)) % 2**32)
    B, Hq, Hk, L = 2, 4, 2, 37
    cfg = RopeConfig(theta=500.0, rotary_fraction=fraction, layout=layout)
    pairs = math.ceil(round(fraction * d / 2, 9))
    inv = cfg.inv_freq(d)
    q = torch.randn(B, L, Hq, d).to(dtype).transpose(1, 2)
    k = torch.randn(B, Hk, L, d).to(dtype)
    pos_t, _, pos_ref = make_positions(form, B, L, gen)
    q_rot, k_rot = wo.rope(q, k, pos_t, cfg)
    assert q_rot.is_contiguous() and q_rot.shape == q.shape and k_rot.shape == k.shape
    assert_rope_half_close(q_rot, q, ref.rope(q.double().numpy(), pos_ref, inv, layout, pairs), layout, 1.0, dtype)
    assert_rope_half_close(k_rot, k, ref.rope(k.double().numpy(), pos_ref, inv, layout, pairs), layout, 1.0, dtype)
    # the same kernel with inverse=True and a scale, through the raw op
    inv_t = torch.from_numpy(inv)
    gq, _ = torch.ops.wavepe.rope(q, None, None, inv_t, 5, pairs, layout, 0.75, True)
    want = ref.rope(q.double().numpy(), np.arange(5, 5 + L)[None, None, :], inv, layout, pairs, 0.75, inverse=True)
    assert_rope_half_close(gq, q, want, layout, 0.75, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_makes_no_float32_copy(dtype):
    # The public wrapper hands the half tensors to the kernel as they are: the only op it
    # dispatches is wavepe::rope itself (no _to_copy / copy_ to float32 before or after), and
    # the kernel's outputs are the half type.
    q = torch.randn(1, 4, 33, 64).to(dtype)
    k = torch.randn(1, 2, 33, 64).to(dtype)
    cfg = RopeConfig(theta=1e4)
    wo.rope(q, k, 3, cfg)  # the spectrum is built and cached outside the logged call
    pos = torch.arange(33)
    with DispatchLog() as log:
        q_rot, k_rot = wo.rope(q, k, pos, cfg)
    assert [c[0] for c in log.calls] == ["wavepe.rope.default"], log.calls
    assert log.calls[0][1] == [dtype, dtype]
    assert q_rot.dtype == dtype and k_rot.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_computes_in_float32(dtype):
    q = torch.randn(1, 2, 7, 16).to(dtype)
    k = torch.randn(1, 1, 7, 16).to(dtype)
    cfg = RopeConfig(theta=1e4)
    q_rot, k_rot = wo.rope(q, k, 11, cfg)
    assert q_rot.dtype == dtype and k_rot.dtype == dtype
    q32, k32 = wo.rope(q.float(), k.float(), 11, cfg)
    torch.testing.assert_close(q_rot, q32.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(k_rot, k32.to(dtype), rtol=0, atol=0)


def test_empty_and_single_position():
    cfg = RopeConfig()
    for shape in [(2, 3, 0, 8), (0, 3, 4, 8), (1, 1, 1, 2)]:
        q = torch.randn(shape)
        q_rot, k_rot = wo.rope(q, q, 0, cfg)
        assert q_rot.shape == shape and k_rot.shape == shape
        want = ref.rope(q.numpy(), np.arange(shape[2])[None, None, :], ref.rope_inv_freq(1e4, 8 if shape[3] == 8 else 2))
        np.testing.assert_allclose(q_rot.numpy(), want, atol=1e-6)
        assert wu.rope(q.numpy(), 0, cfg).shape == shape


def test_meta_tensors_give_shapes():
    q = torch.empty(2, 4, 9, 32, device="meta")
    k = torch.empty(2, 1, 9, 32, device="meta")
    q_rot, k_rot = wo.rope(q, k, 0, RopeConfig())
    assert q_rot.device.type == "meta" and q_rot.shape == q.shape and k_rot.shape == k.shape


def test_eager_fallback_for_devices_without_a_kernel(monkeypatch):
    # what a device without a compiled kernel gets: the plain-PyTorch formulation, with a warning
    from wavepe.ops import _routing

    monkeypatch.setattr(_routing, "_found", set())  # kernels remembered so far
    monkeypatch.setattr(_routing, "_kernel_registered", lambda op, device_type: False)
    monkeypatch.setattr(_routing, "_warned", set())
    q = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    k = torch.randn(1, 1, 6, 8, dtype=torch.float64)
    inv = torch.from_numpy(ref.rope_inv_freq(1e4, 8))
    with pytest.warns(RuntimeWarning, match="no compiled rope kernel for device 'cpu'"):
        q_rot, k_rot = wo.rope_inv_freq(q, k, 2, inv, rotary_pairs=3, scale=1.5)
    want = ref.rope(q.numpy(), np.arange(2, 8)[None, None, :], inv.numpy(), "half", 3, 1.5)
    np.testing.assert_allclose(q_rot.numpy(), want, atol=1e-14)
    with pytest.raises(ValueError, match="inv_freq must be finite"):
        wo.rope_inv_freq(q, k, 2, torch.full((4,), float("nan"), dtype=torch.float64))


# ---- errors --------------------------------------------------------------------

def _q(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


INV8 = torch.from_numpy(ref.rope_inv_freq(1e4, 8))


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: wo.rope(_q(1, 2, 3, 7), None, 0, RopeConfig()), ValueError, "head_dim must be even"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 7), None, 0, INV8), ValueError, r"head_dim \(q.shape\[-1\]\) must be even"),
        (lambda: wo.rope(_q(2, 3, 8), None, 0, RopeConfig()), ValueError, "q must have 4 dimensions"),
        (lambda: wo.rope(_q(1, 2, 3, 8), _q(1, 2, 4, 8), 0, RopeConfig()), ValueError, "k must be"),
        (lambda: wo.rope(_q(1, 2, 3, 8), _q(1, 2, 3, 8, dtype=torch.float64), 0, RopeConfig()), TypeError,
         "same dtype"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, torch.arange(3.0), RopeConfig()), TypeError,
         "positions must be an int64 tensor"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, torch.arange(4), RopeConfig()), ValueError,
         r"positions must have shape \(3,\) or \(1, 3\)"),
        (lambda: wo.rope(_q(2, 2, 3, 8), None, torch.zeros(3, 3, dtype=torch.int64), RopeConfig()), ValueError,
         "positions must have shape"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, torch.arange(3, device="meta"), RopeConfig()), ValueError,
         "positions must be on cpu"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, 2.5, RopeConfig()), TypeError, "positions must be an int offset"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, 2**63 - 2, RopeConfig()), OverflowError, "overflows int64"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, INV8[:3]), ValueError, "inv_freq must have head_dim/2 = 4"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, torch.tensor([1.0, float("nan"), 0.1, 0.01],
                                                                          dtype=torch.float64)),
         ValueError, r"inv_freq must be finite, got inv_freq\[1\] = nan"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, INV8, rotary_pairs=5), ValueError,
         "rotary_pairs must be <= head_dim/2 = 4"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, INV8, layout="neox"), ValueError, "layout must be one of"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, INV8, scale=0.0), ValueError, "scale must be > 0"),
        (lambda: wo.rope_inv_freq(_q(1, 2, 3, 8), None, 0, INV8.clone().requires_grad_()), ValueError,
         "not differentiable in inv_freq"),
        (lambda: wo.rope(_q(1, 2, 3, 8), None, 0, "theta=1e4"), TypeError, "config must be a RopeConfig"),
        (lambda: wo.rope(_q(1, 2, 3, 8, dtype=torch.float64).to(torch.int64), None, 0, RopeConfig()), TypeError,
         "q must be a floating-point tensor"),
        # the raw op checks too (what torch.ops.wavepe.rope callers get)
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, None, INV8.float(), 0, 4, "half", 1.0, False),
         ValueError, "inv_freq must be float64"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, torch.arange(3), INV8, 5, 4, "half", 1.0, False),
         ValueError, "offset must be 0 when positions is a tensor"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, None, INV8, 0, 4, "neox", 1.0, False),
         ValueError, "layout must be 'half' or 'interleaved'"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, None, INV8, 0, 9, "half", 1.0, False),
         ValueError, r"rotary_pairs must be in \[0, head_dim/2 = 4\]"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, None, INV8, 0, 4, "half", float("inf"), False),
         ValueError, "scale must be finite"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8), None, None, INV8, 2**63 - 2, 4, "half", 1.0, False),
         ValueError, "overflow"),
        (lambda: torch.ops.wavepe.rope(_q(1, 2, 3, 8).to(torch.int32), None, None, INV8, 0, 4, "half", 1.0, False),
         ValueError, "q must be float32, float64, bfloat16 or float16"),
        # the fake kernel (torch.compile, meta tensors) applies the same shape rules
        (lambda: torch.ops.wavepe.rope(torch.empty(1, 2, 3, 7, device="meta"), None, None,
                                       torch.empty(3, dtype=torch.float64, device="meta"), 0, 3, "half", 1.0, False),
         ValueError, "head_dim .* must be even"),
        (lambda: torch.ops.wavepe.rope(torch.empty(1, 2, 3, 8, device="meta"), torch.empty(1, 2, 4, 8, device="meta"),
                                       None, torch.empty(4, dtype=torch.float64, device="meta"), 0, 3, "half", 1.0,
                                       False),
         ValueError, "k must be"),
        (lambda: torch.ops.wavepe.rope(torch.empty(1, 2, 3, 8, device="meta"), None, None,
                                       torch.empty(4, dtype=torch.float64, device="meta"), 0, 5, "half", 1.0, False),
         ValueError, r"rotary_pairs must be in \[0, 4\]"),
        # NumPy
        (lambda: wu.rope(np.zeros((3, 7)), 0, RopeConfig()), ValueError, "head_dim must be even"),
        (lambda: wu.rope(np.zeros(8), 0, RopeConfig()), ValueError, r"x must have shape \(..., L, d\)"),
        (lambda: wu.rope(np.zeros((3, 8), np.int64), 0, RopeConfig()), TypeError, "x must be a float32 or float64"),
        (lambda: wu.rope(np.zeros((3, 8)), np.arange(3.0), RopeConfig()), TypeError,
         "positions must be an int offset or an integer array"),
        (lambda: wu.rope(np.zeros((2, 3, 8)), np.zeros((3, 3), np.int64), RopeConfig()), ValueError,
         "positions must be broadcastable"),
        (lambda: wu.rope(np.zeros((3, 8)), np.zeros((2, 3), np.int64), RopeConfig()), ValueError,
         "positions must be broadcastable"),
        (lambda: wu.rope(np.zeros((3, 8)), 0, {"theta": 1e4}), TypeError, "config must be a RopeConfig"),
        (lambda: wu.rope_inv_freq(np.zeros((3, 8)), 0, np.ones(3)), ValueError, r"inv_freq must have shape \(head_dim/2,\)"),
        (lambda: wu.rope_inv_freq(np.zeros((3, 8)), 0, [1.0, np.inf, 1.0, 1.0]), ValueError,
         r"inv_freq must be finite, got inv_freq\[1\] = inf"),
        (lambda: wu.rope_inv_freq(np.zeros((3, 8)), 0, np.ones(4), rotary_pairs=5), ValueError,
         "rotary_pairs must be <= head_dim/2 = 4"),
        (lambda: wu.rope_inv_freq(np.zeros((3, 8)), 0, np.ones(4), inverse=1), TypeError, "inverse must be a bool"),
        (lambda: wu.rope_inv_freq(np.zeros((3, 8)), np.array([2**64 - 1, 0, 0], np.uint64), np.ones(4)),
         OverflowError, "does not fit in int64"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_device_inv_freq_checked_per_tensor_and_version():
    """rope_inv_freq's check of an inv_freq wavepe's CUDA kernel will read (the op remembers a device buffer by
    address only): run here on CPU tensors, the target device named, so that every CPU runs its logic;
    tests/test_cuda.py runs it through the op on a GPU, test_routing.py past it to another backend."""
    from wavepe.ops.rope import _check_inv_freq_for_device as check

    dev = torch.device("cuda")  # only named: the check reads the values on the host either way
    inv = torch.tensor([1.0, 0.5, 0.25, 0.1], dtype=torch.float64)
    check(inv, 4, dev)
    check(inv, 4, dev)  # remembered
    inv[1] = float("nan")  # in place: a new version, checked again
    with pytest.raises(ValueError, match=r"inv_freq must be finite, got inv_freq\[1\] = nan"):
        check(inv, 4, dev)
    check(inv, 1, dev)  # pairs past rotary_pairs are not read
    fresh = torch.tensor([1.0, 0.5, float("-inf"), 0.1])  # a new tensor (float32, as a model's buffer)
    with pytest.raises(ValueError, match=r"inv_freq\[2\] = -inf"):
        check(fresh, 4, dev)
    check(torch.tensor([1.0, 0.5, 0.25, 0.1]), 4, torch.device("cpu"))  # the CPU op checks for itself
    check(fresh, 4, torch.device("cpu"))
    check(fresh, 4, torch.device("privateuseone"))  # another backend's kernel checks (or not) for itself
    with torch.inference_mode():  # no version counter: checked once per tensor
        t = torch.tensor([1.0, 0.5, 0.25, float("inf")])
        with pytest.raises(ValueError, match=r"inv_freq\[3\] = inf"):
            check(t, 4, dev)
        check(t, 3, dev)
    # under vmap the wrapped values are left to the op (no crash here)
    good = torch.tensor([[1.0, 0.5], [0.25, 0.125]])
    torch.testing.assert_close(torch.vmap(lambda row: check(row, 2, dev) or row)(good), good)
