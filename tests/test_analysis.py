"""wavepe.analysis: x*, j*, measured band, p-RoPE — against independent computations."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from wavepe import analysis
from wavepe.config import RopeConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------
# x*: V(x) written here from the formula, its derivative expanded differently
# from the library's, the root found by SciPy's brentq (the independent finder).


def v_ref(x: float) -> float:
    return 0.5 + math.sin(2 * x) / (4 * x) - (math.sin(x) / x) ** 2


def v_prime_ref(x: float) -> float:
    # d/dx of 1/2 + sin(2x)/(4x) - sin(x)^2/x^2, expanded term by term
    return math.cos(2 * x) / (2 * x) - 5 * math.sin(2 * x) / (4 * x * x) + 2 * math.sin(x) ** 2 / x ** 3


@functools.lru_cache(maxsize=None)
def x_star_ref() -> float:
    grid = np.arange(0.05, 20.0, 0.01)
    signs = np.sign([v_prime_ref(x) for x in grid])
    first = int(np.flatnonzero((signs[:-1] > 0) & (signs[1:] < 0))[0])
    return brentq(v_prime_ref, grid[first], grid[first + 1], xtol=1e-14, rtol=1e-15, maxiter=200)


def test_x_star_matches_brentq_to_1e_9():
    assert analysis.x_star() == pytest.approx(x_star_ref(), abs=1e-9)


def test_x_star_is_the_first_positive_maximum_of_v():
    xs = analysis.x_star()
    assert 3.0 < xs < 4.0
    # V increases on (0, x*) and x* is a local maximum
    grid = np.linspace(0.01, xs - 1e-3, 400)
    assert np.all(np.diff([v_ref(x) for x in grid]) > 0)
    for h in (1e-3, 1e-2, 1e-1):
        assert v_ref(xs) > v_ref(xs - h) and v_ref(xs) > v_ref(xs + h)


def test_variance_of_cos_is_the_variance_of_cos_over_the_training_range():
    # V(x) = Var[cos(w t)], t uniform on [0, L], x = w L: check by quadrature
    for x in (0.3, 1.0, analysis.x_star(), 7.5):
        t = (np.arange(200000) + 0.5) / 200000
        c = np.cos(x * t)
        assert analysis.variance_of_cos(x) == pytest.approx(c.var(), abs=1e-8)
        assert analysis.variance_of_cos(x) == pytest.approx(v_ref(x), rel=1e-12)


def test_variance_of_cos_and_derivative_to_full_precision():
    # 50-digit references from mpmath (the closed forms cancel near 0: the
    # library switches to a series there, this checks both sides of the switch)
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50

    def v_mp(x):
        x = mpmath.mpf(x)
        return mpmath.mpf(1) / 2 + mpmath.sin(2 * x) / (4 * x) - (mpmath.sin(x) / x) ** 2

    for x in (1e-8, 1e-5, 1e-3, 0.01, 0.3, 0.999, 1.0, 1.001, 2.0, analysis.x_star(), 9.0, 40.0):
        assert analysis.variance_of_cos(x) == pytest.approx(float(v_mp(x)), rel=1e-12, abs=1e-300)
        # the closed form (x >= 1) rounds O(1/x) terms: absolute error ~ 1e-16 (V'(x*) = 0 exactly)
        assert analysis.variance_of_cos_derivative(x) == pytest.approx(float(mpmath.diff(v_mp, x)), rel=1e-10,
                                                                       abs=1e-15 if x >= 1 else 1e-300)
    assert analysis.variance_of_cos(0.0) == 0.0 and analysis.variance_of_cos_derivative(0.0) == 0.0
    for x in (0.5, 2.0, 3.5, 9.0):
        assert analysis.variance_of_cos_derivative(x) == pytest.approx(v_prime_ref(x), rel=1e-9)


# ---------------------------------------------------------------------------
# j*: the formula with x* from brentq


def j_star_ref(theta: float, train_len: float, head_dim: int) -> int:
    return int(round((head_dim / 2) * math.log(train_len / x_star_ref()) / math.log(theta)))


@pytest.mark.parametrize("theta, train_len, head_dim, expected", [
    (1e4, 128, 32, 6),      # the experiment's RoPE θ=10^4
    (128, 128, 32, 12),     # the experiment's RoPE θ=L_train
    (1e4, 4096, 128, 49),   # Llama-2-like
    (5e5, 8192, 128, 38),   # Llama-3-like
    (1e4, 2048, 64, 22),
])
def test_band_dimension_known_values(theta, train_len, head_dim, expected):
    assert j_star_ref(theta, train_len, head_dim) == expected
    assert analysis.band_dimension(theta, train_len, head_dim) == expected


@settings(max_examples=200, deadline=None)
@given(theta=st.floats(1.5, 1e7), train_len=st.integers(1, 100000), half=st.integers(1, 256))
def test_band_dimension_random(theta, train_len, half):
    exact = half * math.log(train_len / x_star_ref()) / math.log(theta)
    if abs(exact - math.floor(exact) - 0.5) < 1e-9:
        return  # a tie at .5 rounds either way depending on the last bit
    assert analysis.band_dimension(theta, train_len, 2 * half) == j_star_ref(theta, train_len, 2 * half)


def test_theta_for_band_inverts_band_dimension():
    for train_len, d in ((128, 32), (4096, 128), (1000, 64)):
        for j in range(1, d // 2):
            theta = analysis.theta_for_band(train_len, d, j)
            assert analysis.band_dimension(theta, train_len, d) == j
            assert (d / 2) * math.log(train_len / x_star_ref()) / math.log(theta) == pytest.approx(j, rel=1e-12)


def test_recommended_theta_is_the_training_length():
    assert analysis.recommended_theta(128) == 128.0
    assert analysis.recommended_theta(4096) == 4096.0


@pytest.mark.parametrize("call, match", [
    (lambda: analysis.band_dimension(1.0, 128, 32), "theta"),
    (lambda: analysis.band_dimension(0.5, 128, 32), "theta"),
    (lambda: analysis.band_dimension(float("nan"), 128, 32), "theta"),
    (lambda: analysis.band_dimension(1e4, -5, 32), "train_len"),
    (lambda: analysis.band_dimension(1e4, 128, 33), "head_dim"),
    (lambda: analysis.band_dimension(1e4, 128, 0), "head_dim"),
    (lambda: analysis.theta_for_band(2, 32, 3), "train_len"),
    (lambda: analysis.recommended_theta(1), "train_len"),
    (lambda: analysis.pair_norms(np.zeros((3, 5))), "even"),
    (lambda: analysis.pair_norms(np.zeros((3, 4)), layout="odd"), "layout"),
    (lambda: analysis.measure_band(np.zeros((2, 3, 4))), "shape"),
    (lambda: analysis.measure_band(np.zeros((1, 0, 2, 4, 8))), "no positions"),
])
def test_bad_arguments_raise_clear_errors(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ---------------------------------------------------------------------------
# measured band


def test_pair_norms_layouts():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) - 7.0
    half = analysis.pair_norms(x, "half")
    inter = analysis.pair_norms(x, "interleaved")
    for idx in np.ndindex(2, 3):
        v = x[idx]
        np.testing.assert_allclose(half[idx], [math.hypot(v[0], v[2]), math.hypot(v[1], v[3])])
        np.testing.assert_allclose(inter[idx], [math.hypot(v[0], v[1]), math.hypot(v[2], v[3])])
    np.testing.assert_allclose(analysis.pair_norms(torch.from_numpy(x)), half)


def _queries_with_bands(bands: np.ndarray, batch: int, length: int, d: int, seed: int = 0) -> np.ndarray:
    """(layers, B, H, L, d) whose dominant pair (layout half) is bands[layer, head] at most positions."""
    rng = np.random.default_rng(seed)
    layers, heads = bands.shape
    x = rng.normal(size=(layers, batch, heads, length, d)) * 0.1
    for layer in range(layers):
        for h in range(heads):
            j = bands[layer, h]
            x[layer, :, h, :, j] += 3.0
            x[layer, :, h, :, j + d // 2] -= 3.0
    return x


def test_measure_band_synthetic():
    bands = np.array([[1, 5, 7], [0, 2, 3]])
    x = _queries_with_bands(bands, batch=2, length=40, d=16)
    # a few positions where another pair wins do not change the most frequent
    x[0, 0, 0, :5, :] = 0
    x[0, 0, 0, :5, 6] = 10.0
    m = analysis.measure_band(x)
    np.testing.assert_array_equal(m.per_head, bands)
    assert m.i_band == pytest.approx(bands.mean())
    assert m.fraction == pytest.approx(bands.mean() / 8)
    assert m.mean_norms.shape == (2, 3, 40, 8)
    # 4-D input is one layer
    m1 = analysis.measure_band(x[1])
    np.testing.assert_array_equal(m1.per_head, bands[1:])


def test_measure_band_tie_takes_the_lower_pair():
    x = np.zeros((1, 1, 1, 4, 4))
    x[..., :2, 1] = 1.0  # pair 1 wins at positions 0, 1
    x[..., 2:, 0] = 1.0  # pair 0 wins at positions 2, 3
    assert analysis.measure_band(x).per_head[0, 0] == 0


def _tiny_llama(bands: np.ndarray, head_dim: int = 16, seed: int = 0):
    transformers = pytest.importorskip("transformers")
    layers, heads = bands.shape
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, num_attention_heads=heads, num_key_value_heads=1,
                                   head_dim=head_dim, intermediate_size=64, num_hidden_layers=layers,
                                   max_position_embeddings=4096)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    # the band by construction: each head's query has only its band pair's two rows
    for layer, block in enumerate(model.model.layers):
        w = torch.zeros_like(block.self_attn.q_proj.weight)
        g = torch.Generator().manual_seed(layer)
        for h in range(heads):
            j = int(bands[layer, h])
            for row in (h * head_dim + j, h * head_dim + j + head_dim // 2):
                w[row] = torch.randn(w.shape[1], generator=g)
        with torch.no_grad():
            block.self_attn.q_proj.weight.copy_(w)
    return model


def test_hf_llama_band_known_by_construction():
    bands = np.array([[3, 5], [2, 6], [7, 0]])
    model = _tiny_llama(bands)
    ids = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(1))
    q = analysis.capture_projections(model, ids, "q")
    assert q.shape == (3, 2, 2, 48, 16)
    m = analysis.measure_model_band(model, ids)
    np.testing.assert_array_equal(m.per_head, bands)
    assert m.i_band == pytest.approx(bands.mean())
    k = analysis.capture_projections(model, ids, "k")
    assert k.shape == (3, 2, 1, 48, 16)  # one key/value head (GQA)


def test_hf_llama_hooks_see_the_rotated_pair_norms():
    # the hook reads q before RoPE; pair norms equal those after HF's own rotation
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = _tiny_llama(np.array([[1, 4]]))
    torch.manual_seed(3)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ids = torch.randint(0, 256, (1, 64))
    q = analysis.capture_projections(model, ids)[0]  # (B, H, L, d)
    pos = torch.arange(64)[None]
    cos, sin = model.model.rotary_emb(q, pos)
    q_rot, _ = apply_rotary_pos_emb(q, q, cos, sin)
    np.testing.assert_allclose(analysis.pair_norms(q_rot), analysis.pair_norms(q), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(q_rot, q, atol=1e-3)
    assert transformers is not None


def _tiny_rope_lm(theta: float = 100.0, layers: int = 2, heads: int = 2, head_dim: int = 16):
    from wavepe.experiments.model import LMConfig, TinyLM

    torch.manual_seed(0)
    return TinyLM(LMConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=heads, head_dim=head_dim,
                           intermediate_size=64, pos_enc="rope", rope_theta=theta)).eval()


def test_tinylm_band_known_by_construction_and_rotation_invariance():
    import wavepe.ops

    bands = np.array([[4, 1], [6, 2]])
    model = _tiny_rope_lm()
    for layer, attn in enumerate(model.attention_modules()):
        w = torch.zeros_like(attn.q_proj.weight)
        for h in range(2):
            for row in (h * 16 + bands[layer, h], h * 16 + bands[layer, h] + 8):
                w[row] = torch.randn(w.shape[1])
        with torch.no_grad():
            attn.q_proj.weight.copy_(w)
    ids = torch.randint(0, 256, (2, 50))
    m = analysis.measure_model_band(model, ids)
    np.testing.assert_array_equal(m.per_head, bands)
    q = analysis.capture_projections(model, ids)[1]
    q_rot, _ = wavepe.ops.rope(q, None, 0, RopeConfig(100.0))
    np.testing.assert_allclose(analysis.pair_norms(q_rot), analysis.pair_norms(q), rtol=1e-5, atol=1e-6)


def test_capture_needs_projections_and_config():
    with pytest.raises(TypeError, match="num_attention_heads"):
        analysis.capture_projections(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))
    model = _tiny_rope_lm()
    with pytest.raises(ValueError, match="which"):
        analysis.capture_projections(model, torch.zeros(1, 4, dtype=torch.long), "v")


# ---------------------------------------------------------------------------
# p-RoPE without retraining


def test_p_rope_on_tinylm_equals_a_model_built_with_that_fraction():
    model = _tiny_rope_lm()
    ids = torch.randint(0, 256, (2, 40))
    base = model(ids)
    reference = _tiny_rope_lm()
    reference.set_rope(RopeConfig(100.0, rotary_fraction=0.5))
    with analysis.p_rope(model, 0.5) as kept:
        assert kept == 4
        torch.testing.assert_close(model(ids), reference(ids))
        assert not torch.allclose(model(ids), base)
    torch.testing.assert_close(model(ids), base)  # restored
    assert all(a.rope_config.rotary_fraction == 1.0 for a in model.attention_modules())


def _shift_invariant(call) -> bool:
    return bool(torch.allclose(call(0), call(100), atol=1e-4))


def test_p_rope_on_hf_llama_zero_fraction_is_nope():
    model = _tiny_llama(np.array([[1, 4]]))
    torch.manual_seed(5)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    ids = torch.randint(0, 256, (1, 24))

    def logits(offset: int) -> torch.Tensor:
        return model(ids, position_ids=torch.arange(offset, offset + 24)[None]).logits

    # full RoPE depends on relative positions only: a shift changes nothing ...
    assert _shift_invariant(logits)
    base = logits(0)
    inv = model.model.rotary_emb.inv_freq.clone()
    with analysis.p_rope(model, 0.0) as kept:
        assert kept == 0
        assert torch.count_nonzero(model.model.rotary_emb.inv_freq) == 0
        nope = logits(0)
    with analysis.p_rope(model, 0.5) as kept:
        assert kept == 4
        assert torch.count_nonzero(model.model.rotary_emb.inv_freq[4:]) == 0
        torch.testing.assert_close(model.model.rotary_emb.inv_freq[:4], inv[:4])
        half = logits(0)
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, inv)  # restored
    torch.testing.assert_close(logits(0), base)
    assert not torch.allclose(nope, base, atol=1e-4) and not torch.allclose(half, base, atol=1e-4)
    # ... and with no rotation the model is NoPE: causal, position-free, so each
    # query sees the same keys whatever the positions are; compare against a
    # copy with all frequencies zeroed by hand
    with torch.no_grad():
        model.model.rotary_emb.inv_freq.zero_()
    torch.testing.assert_close(logits(37), nope)
    model.model.rotary_emb.inv_freq.copy_(inv)


def test_p_rope_needs_rope():
    from wavepe.experiments.model import LMConfig, TinyLM

    model = TinyLM(LMConfig(hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=64,
                            pos_enc="wavelet"))
    with pytest.raises(ValueError, match="no RoPE"):
        with analysis.p_rope(model, 0.5):
            pass
    with pytest.raises(ValueError, match="fraction"):
        with analysis.p_rope(_tiny_rope_lm(), 1.5):
            pass


def test_p_rope_sweep():
    from wavepe.experiments.evaluate import perplexity

    model = _tiny_rope_lm()
    tokens = np.frombuffer(b"def f(x):\n    return x + 1\n" * 40, dtype=np.uint8)
    sweep = analysis.p_rope_sweep(model, tokens, [16, 32], fractions=(1.0, 0.5, 0.0), max_tokens=256)
    assert list(sweep) == [1.0, 0.5, 0.0] and all(list(r) == [16, 32] for r in sweep.values())
    assert all(math.isfinite(v) and v > 1 for r in sweep.values() for v in r.values())
    assert sweep[1.0][32] == pytest.approx(perplexity(model, tokens, 32, max_tokens=256).perplexity, rel=1e-6)
    assert sweep[0.0][32] != pytest.approx(sweep[1.0][32], rel=1e-6)
