"""One pos_enc vocabulary (wavepe/pos_enc.py) across the ops, nn, TinyLM, Hugging Face and fairseq."""

from __future__ import annotations

import warnings

import pytest

import wavepe.pos_enc as pe
from wavepe.integrations.fairseq.options import POS_ENCS as FAIRSEQ_POS_ENCS
from wavepe.integrations.fairseq.options import PositionSpec

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe.integrations._hf_settings import POS_ENCS as HF_POS_ENCS  # noqa: E402
from wavepe.integrations._hf_settings import PosEncSettings  # noqa: E402
from wavepe.nn import POS_ENCS as NN_POS_ENCS  # noqa: E402
from wavepe.nn import PositionalAttention  # noqa: E402
from wavepe.ops.attention import POS_ENCS as OPS_POS_ENCS  # noqa: E402


def test_every_layer_speaks_the_one_vocabulary():
    for layer in (OPS_POS_ENCS, NN_POS_ENCS, HF_POS_ENCS, FAIRSEQ_POS_ENCS):
        assert set(layer) <= set(pe.POS_ENCS), layer
        assert "nope" in layer and "none" not in layer
    assert {pe.scores_pos_enc(name) for name in pe.POS_ENCS} == {"wavelet", "relative", "alibi", "nope"}
    assert pe.scores_pos_enc("rope") == pe.scores_pos_enc("sinusoidal") == "nope"


def test_old_spelling_reads_with_a_deprecation_warning_everywhere():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = wo.wavelet_attention(q, k, v, pos_enc="nope")
    with pytest.warns(DeprecationWarning, match=r"pos_enc='none' is the old spelling of 'nope'"):
        got = wo.wavelet_attention(q, k, v, pos_enc="none")
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.warns(DeprecationWarning, match="old spelling"):
        assert PositionalAttention(16, 2, "none").pos_enc == "nope"
    with pytest.warns(DeprecationWarning, match=r"config.wavepe\['pos_enc'\]='none'"):
        assert PosEncSettings.from_dict({"pos_enc": "none"}).pos_enc == "nope"
    with pytest.warns(DeprecationWarning, match="--pos-enc='none'"):
        assert PositionSpec.from_args({"pos_enc": "none"}, 16).pos_enc == "nope"


def test_tinylm_checkpoints_written_with_the_old_spelling_still_load(tmp_path):
    from wavepe.experiments.model import LMConfig, TinyLM, load_model, save_model

    cfg = LMConfig(vocab_size=11, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                   intermediate_size=32, pos_enc="nope")
    model = TinyLM(cfg)
    path = str(tmp_path / "old.pt")
    save_model(model, path)
    blob = torch.load(path, weights_only=True)
    blob["config"]["pos_enc"] = "none"  # as checkpoints written before the vocabulary was one
    torch.save(blob, path)
    with pytest.warns(DeprecationWarning, match="old spelling"):
        loaded = load_model(path)
    assert loaded.config.pos_enc == "nope"
    x = torch.randint(0, 11, (1, 6))
    torch.testing.assert_close(loaded(x), model.eval()(x))


@pytest.mark.parametrize("call,match", [
    (lambda: wo.wavelet_attention(*[torch.zeros(1, 1, 2, 4)] * 3, pos_enc="rope"),
     r"pos_enc must be one of .*; got 'rope': RoPE rotates q and k before attention -- apply wavepe.ops.rope"),
    (lambda: wo.wavelet_attention(*[torch.zeros(1, 1, 2, 4)] * 3, pos_enc="sinusoidal"),
     r"pos_enc must be one of 'wavelet', 'relative', 'alibi', 'nope'; got 'sinusoidal'"),
    (lambda: PositionalAttention(16, 2, "relative"), r"pos_enc must be one of 'wavelet', 'rope', 'alibi', 'nope'"),
    (lambda: PositionSpec.from_args({"pos_enc": "xpos"}, 16), r"--pos-enc must be one of .*'xpos'"),
])
def test_names_outside_a_layer_raise_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("pos_enc", ["wavelet", "rope", "alibi", "nope"])
def test_positional_attention_packed_equals_each_document_alone(pos_enc):
    # PositionalAttention(cu_seqlens=...): a packed batch of documents (empty and one-token ones too) gives each
    # document's output, and gradient, as if it were alone: RoPE's positions restart at every boundary
    torch.manual_seed(0)
    attn = PositionalAttention(32, 4, pos_enc, num_kv_heads=2).double()
    lengths = [[5, 0, 9, 1, 7], [1, 12, 0, 3, 6]]
    cus = [torch.tensor([0, *torch.tensor(ls).cumsum(0).tolist()]) for ls in lengths]
    x = torch.randn(2, 22, 32, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 22, 32, dtype=torch.float64)
    for b, cu in ((0, cus[0]), (None, torch.stack(cus).to(torch.int32))):
        xs = x if b is None else x[b:b + 1]
        out = attn(xs, cu_seqlens=cu)
        (gx,) = torch.autograd.grad((out * (w if b is None else w[b:b + 1])).sum(), x)
        for row in range(2) if b is None else [b]:
            r = row if b is None else 0
            bounds = cus[row].tolist()
            for s, e in zip(bounds, bounds[1:]):
                if s == e:
                    continue
                alone_x = x[row:row + 1, s:e].detach().requires_grad_()
                alone = attn(alone_x)
                (ga,) = torch.autograd.grad((alone * w[row:row + 1, s:e]).sum(), alone_x)
                torch.testing.assert_close(out[r:r + 1, s:e], alone, rtol=1e-10, atol=1e-12)
                torch.testing.assert_close(gx[row:row + 1, s:e], ga, rtol=1e-10, atol=1e-12)


def test_document_positions_restart_at_each_boundary():
    from wavepe.nn import document_positions

    cu = torch.tensor([0, 3, 3, 4, 8], dtype=torch.int32)
    assert document_positions(cu, torch.arange(8)).tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    assert document_positions(cu, torch.tensor([7, 2, 3])).tolist() == [3, 2, 0]  # a chunk's global positions
    two = torch.stack([cu, torch.tensor([0, 0, 5, 5, 8], dtype=torch.int32)])
    assert document_positions(two, torch.arange(8)).tolist() == [[0, 1, 2, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 0, 1, 2]]
    with pytest.raises(ValueError, match="at least 2 boundaries"):
        document_positions(cu[:1], torch.arange(8))


@pytest.mark.parametrize("pos_enc", ["wavelet", "rope", "alibi", "nope"])
def test_positional_attention_window_and_softcap_equal_its_probabilities(pos_enc):
    # forward (the fused kernel with window and softcap) == attention_probs (dense, spelled out) @ v
    torch.manual_seed(0)
    attn = PositionalAttention(32, 4, pos_enc, num_kv_heads=2, window=5, softcap=1.5).double()
    assert "window=5" in repr(attn) and "softcap=1.5" in repr(attn)
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    probs = attn.attention_probs(x)
    assert bool((probs.tril(-5) == 0).all()) and bool((probs.triu(1) == 0).all())
    _, _, v = attn._qkv(x, 0)
    heads = (probs @ v.repeat_interleave(2, dim=1)).transpose(1, 2).reshape(2, 30, 32)
    torch.testing.assert_close(attn(x), attn.o_proj(heads), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="window"):
        PositionalAttention(32, 4, pos_enc, window=-3)
    with pytest.raises(ValueError, match="softcap"):
        PositionalAttention(32, 4, pos_enc, softcap=float("nan"))
