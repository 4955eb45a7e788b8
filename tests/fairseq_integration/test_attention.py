"""WavepeSelfAttention (the plugin's attention module) against a float64 oracle from the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .. import reference as ref
from .conftest import require_fairseq

require_fairseq()
import torch  # noqa: E402

from wavepe.integrations.fairseq.attention import WavepeSelfAttention  # noqa: E402
from wavepe.integrations.fairseq.options import PositionSpec  # noqa: E402

ENCODINGS = {
    "wavelet": {"pos_enc": "wavelet", "wavelet_grid": "4x4"},
    "wavelet_haar_values": {"pos_enc": "wavelet", "wavelet_family": "haar", "wavelet_scales": "1,3",
                            "wavelet_shifts": "0,1,2,5,7,11,13,2.5", "wavelet_normalize": True},
    "rope": {"pos_enc": "rope", "rope_theta": 100.0},
    "rope_partial": {"pos_enc": "rope", "rope_theta": 50.0, "rope_fraction": 0.5, "rope_inference_theta": 400.0},
    "alibi": {"pos_enc": "alibi"},
    "nope": {"pos_enc": "nope"},
}


def make(name: str, embed_dim: int = 48, heads: int = 3, dtype=torch.float64, dropout: float = 0.0):
    spec = PositionSpec.from_args(ENCODINGS[name], embed_dim // heads)
    torch.manual_seed(0)
    mod = WavepeSelfAttention(embed_dim, heads, spec, dropout=dropout).to(dtype)
    with torch.no_grad():  # non-zero biases, so that a missed bias shows
        for lin in (mod.q_proj, mod.k_proj, mod.v_proj, mod.out_proj):
            lin.bias.uniform_(-0.5, 0.5)
    return mod.eval()


def oracle(mod: WavepeSelfAttention, x: torch.Tensor, padding: torch.Tensor | None = None, training: bool = False,
           positions: torch.Tensor | None = None):
    """softmax(scores) v from the formulas, float64; differentiable in x and the weights.

    x (T, B, C); padding (B, T) True = padded key; positions (B, T) absolute
    positions for RoPE (default 0..T-1).  Relative distance r = m - n.
    """
    spec = mod.spec
    t, b, c = x.shape
    h, d = mod.num_heads, mod.head_dim

    def proj(lin):
        y = x.double() @ lin.weight.double().T + lin.bias.double()
        return y.view(t, b, h, d).permute(1, 2, 0, 3)  # (B, H, T, d)

    q, k, v = proj(mod.q_proj), proj(mod.k_proj), proj(mod.v_proj)
    if spec.pos_enc == "rope":
        cfg = spec.rope if training else spec.rope_inference
        pairs = math.ceil(round(cfg.rotary_fraction * d / 2, 9))
        pos = torch.arange(t, dtype=torch.float64).expand(b, t) if positions is None else positions.double()

        def rotate(z):
            out = z.clone()
            for i in range(pairs):
                ang = pos * cfg.theta ** (-2.0 * i / d)  # (B, T)
                cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
                a, bb = z[..., i], z[..., i + d // 2]  # layout "half": pair (i, i + d/2)
                out[..., i] = a * cos - bb * sin
                out[..., i + d // 2] = bb * cos + a * sin
            return out

        q, k = rotate(q), rotate(k)
    scores = torch.einsum("bhmd,bhnd->bhmn", q, k)
    r = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).numpy()  # (T, T) m - n
    if spec.pos_enc == "wavelet":
        w = spec.wavelet
        p = ref.psi(w.family, (r[:, :, None] - w.shifts[None, None, :]) / w.scales[None, None, :])  # (T, T, d)
        if w.normalize:
            p = p / np.sqrt(w.scales)[None, None, :]
        scores = scores + torch.einsum("bhmd,mnd->bhmn", q, torch.from_numpy(p))
    scores = scores / math.sqrt(d)
    if spec.pos_enc == "alibi":
        slopes = torch.from_numpy(ref.alibi_slopes(h))
        scores = scores - slopes[None, :, None, None] * torch.from_numpy(r).double()[None, None]
    masked = torch.from_numpy(r < 0)[None, None]
    if padding is not None:
        masked = masked | padding[:, None, None, :]
    scores = scores.masked_fill(masked, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.permute(2, 0, 1, 3).reshape(t, b, c)
    return out @ mod.out_proj.weight.double().T + mod.out_proj.bias.double()


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_forward_matches_oracle(name, isa):
    mod = make(name)
    x = torch.randn(11, 2, 48, dtype=torch.float64)
    got, weights = mod(x, x, x)
    assert weights is None and got.shape == (11, 2, 48) and got.dtype == torch.float64
    torch.testing.assert_close(got, oracle(mod, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["wavelet", "rope_partial", "alibi"])
def test_float32_within_error_model(name):
    mod = make(name, dtype=torch.float32)
    x = torch.randn(40, 2, 48)
    got, _ = mod(x, x, x)
    assert got.dtype == torch.float32
    # fp32 accumulation over d (projections, q·k, q·p) then softmax: rtol ~ 1e-5·sqrt(d)
    torch.testing.assert_close(got.double(), oracle(mod, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_gradients_match_oracle(name):
    mod = make(name, embed_dim=32, heads=2)
    x = torch.randn(7, 2, 32, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, 2, 32, dtype=torch.float64)
    params = [p for p in mod.parameters()]
    got = torch.autograd.grad((mod(x, x, x)[0] * w).sum(), [x, *params])
    want = torch.autograd.grad((oracle(mod, x) * w).sum(), [x, *params])
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(ENCODINGS)), t=st.integers(1, 13), chunks=st.lists(st.integers(1, 5), min_size=1))
def test_incremental_decoding_equals_full_forward(name, t, chunks):
    """Cached keys/values (and RoPE at the cached offset) give the full causal forward, in any chunking."""
    mod = make(name, embed_dim=32, heads=2)
    x = torch.randn(t, 3, 32, dtype=torch.float64)
    full, _ = mod(x, x, x)
    state: dict = {}
    outs, start, i = [], 0, 0
    while start < t:
        step = chunks[i % len(chunks)]
        piece = x[start: start + step]
        outs.append(mod(piece, piece, piece, incremental_state=state)[0])
        start += step
        i += 1
    torch.testing.assert_close(torch.cat(outs), full, rtol=1e-12, atol=1e-12)
    cached = mod._get_input_buffer(state)
    assert cached["prev_key"].shape == (3, 2, t, 16)
    # beam search reorders the cache along the batch
    mod.reorder_incremental_state(state, torch.tensor([2, 0, 0]))
    assert torch.equal(mod._get_input_buffer(state)["prev_value"][1], mod._get_input_buffer(state)["prev_value"][2])


@pytest.mark.parametrize("name", ["wavelet", "rope", "alibi", "nope"])
def test_padding_right_and_left(name):
    """Padded keys are ignored; relative encodings give the same result wherever the padding sits."""
    mod = make(name, embed_dim=32, heads=2)
    seq = torch.randn(6, 1, 32, dtype=torch.float64)
    alone, _ = mod(seq, seq, seq)
    filler = torch.randn(3, 1, 32, dtype=torch.float64)
    for pad_left in (False, True):
        x = torch.cat([filler, seq] if pad_left else [seq, filler])
        pad = torch.zeros(1, 9, dtype=torch.bool)
        pad[0, :3] = pad_left
        pad[0, 6:] = not pad_left
        got, _ = mod(x, x, x, key_padding_mask=pad)
        real = slice(3, 9) if pad_left else slice(0, 6)
        torch.testing.assert_close(got[real], alone, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[real], oracle(mod, x, pad)[real], rtol=1e-12, atol=1e-12)
        if pad_left:  # a padded query that sees no unpadded key attends to nothing: out_proj(0)
            torch.testing.assert_close(got[:3], mod.out_proj.bias.expand(3, 1, 32), rtol=0, atol=0)
        else:
            torch.testing.assert_close(got, oracle(mod, x, pad), rtol=1e-12, atol=1e-12)
    # fairseq's uint8/float masks are accepted as well as bool
    pad = torch.zeros(1, 9)
    pad[0, 6:] = 1
    torch.testing.assert_close(mod(torch.cat([seq, filler]), None, None, key_padding_mask=pad)[0][:6], alone)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_dropout_path_has_the_same_scores(name):
    """With attention dropout active the scores are formed explicitly; at p = 0 they equal the fused path."""
    mod = make(name, embed_dim=32, heads=2, dropout=0.3)
    x = torch.randn(9, 2, 32, dtype=torch.float64)
    mod.train()
    a, b = mod(x, x, x)[0], mod(x, x, x)[0]
    assert not torch.equal(a, b)  # dropout is on while training
    mod.dropout_module.p = 0.0
    torch.testing.assert_close(mod(x, x, x)[0], oracle(mod, x, training=True), rtol=1e-12, atol=1e-12)
    q = torch.randn(2, 2, 9, 16, dtype=torch.float64)
    k = torch.randn(2, 2, 12, 16, dtype=torch.float64)
    v = torch.randn(2, 2, 12, 16, dtype=torch.float64)
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, :2] = True
    import wavepe.ops as wops

    fused = wops.wavelet_attention(q, k, v, mod.spec.wavelet, pos_enc=mod.spec.kernel_pos_enc, q_offset=3,
                                   key_padding_mask=pad)
    torch.testing.assert_close(mod._attention_with_dropout(q, k, v, pad, 3), fused, rtol=1e-12, atol=1e-12)
    mod.eval()
    mod.dropout_module.p = 0.3
    torch.testing.assert_close(mod(x, x, x)[0], oracle(mod, x), rtol=1e-12, atol=1e-12)  # eval: no dropout


def test_rope_inference_theta_applies_when_not_training():
    mod = make("rope_partial", embed_dim=32, heads=2)
    x = torch.randn(10, 1, 32, dtype=torch.float64)
    evaluated = mod(x, x, x)[0]
    torch.testing.assert_close(evaluated, oracle(mod, x, training=False), rtol=1e-12, atol=1e-12)
    mod.train()
    trained = mod(x, x, x)[0]
    torch.testing.assert_close(trained, oracle(mod, x, training=True), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(trained, evaluated)


def test_bad_calls_fail_loudly():
    mod = make("wavelet", embed_dim=32, heads=2)
    x = torch.randn(4, 1, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="always causal and takes no attn_mask; got one of shape \\(4, 4\\)"):
        mod(x, x, x, attn_mask=torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="static_kv and before_softmax are not supported"):
        mod(x, x, x, static_kv=True)
    with pytest.raises(ValueError, match="key and value must be the query tensor"):
        mod(x, x.clone(), x)
    with pytest.raises(ValueError, match=r"query must be \(T, B, 32\), got \(4, 1, 8\)"):
        y = torch.randn(4, 1, 8, dtype=torch.float64)
        mod(y, y, y)
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, S\) = \(1, 4\), got \(1, 5\)"):
        mod(x, x, x, key_padding_mask=torch.zeros(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="spec.head_dim=4 does not match embed_dim/num_heads=8"):
        WavepeSelfAttention(16, 2, PositionSpec.from_args({"pos_enc": "nope"}, 4))
    with pytest.raises(TypeError, match="spec must be a PositionSpec, got dict"):
        WavepeSelfAttention(16, 2, {"pos_enc": "nope"})
