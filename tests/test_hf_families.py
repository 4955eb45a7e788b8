"""wavepe.patch on every supported family (tiny configs): the tests a transformers maintainer asks for.

rope mode against the stock model (Hugging Face's own code) in train and eval
mode with left and right padding; relative modes against themselves where the
answer is known (rows alone vs padded batches, the fused kernel vs the dense
path, incremental vs full forwards) and, for Llama-layout families, against the
float64 formulas (tests/test_hf.py); generation (greedy, beam, sampling,
assisted, static cache, batched vs one by one); sliding windows past the
window; output_attentions; gradient checkpointing; save/load through
safetensors with the settings in config.json.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import wavepe  # noqa: E402
from wavepe import RopeConfig  # noqa: E402

from .hf_models import FAMILIES, POS_ENCS, RELATIVE, SLIDING, ids_for, left_pad, right_pad, tiny  # noqa: E402

ALL = list(FAMILIES)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _real_max(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a - b)[mask.bool()].abs().max())


# ---- rope mode is the stock model -------------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [left_pad, right_pad])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("family", ALL)
def test_rope_mode_equals_the_stock_model(family, train, pad):
    model = tiny(family)
    model.train(train)  # dropout is 0 in these configs: train mode changes only the code paths
    ids, mask, pos = pad(ids_for(3, 20), [0, 4, 9])
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        with wavepe.patch(model, "rope"):
            got = model(ids, attention_mask=mask, position_ids=pos).logits
    assert _real_max(got, want, mask) <= 1e-5


@pytest.mark.parametrize("family", [f for f in ALL if f != "gemma3"])
def test_rope_config_through_wavepes_kernel_equals_the_stock_spectrum(family):
    # RopeConfig at the model's own theta: cos/sin from wavepe's RoPE kernel (float64 angles) vs the model's
    model = tiny(family)
    ids, mask, pos = left_pad(ids_for(2, 24), [0, 7])
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        with wavepe.patch(model, rope=RopeConfig(theta=10000.0)):
            got = model(ids, attention_mask=mask, position_ids=pos).logits
        with wavepe.patch(model, rope=RopeConfig(theta=50.0)):  # ... and the test can fail
            other = model(ids, attention_mask=mask, position_ids=pos).logits
    assert _real_max(got, want, mask) <= 1e-5
    assert _real_max(other, want, mask) > 1e-2


def test_gemma3_rope_config_replaces_both_layer_types_bases():
    model = tiny("gemma3", rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                                            "full_attention": {"rope_type": "default", "rope_theta": 500.0}})
    ids = ids_for(2, 20)
    with torch.no_grad():
        want = model(ids).logits
        with wavepe.patch(model, rope=RopeConfig(theta=500.0)):
            assert (model(ids).logits - want).abs().max() <= 1e-5


# ---- relative modes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("family", ALL)
def test_padded_batch_equals_rows_alone(family, pos_enc, left):
    model = tiny(family)
    raw = ids_for(3, 18)
    pads = [0, 3, 17]  # the last row: one real token
    ids, mask, pos = (left_pad if left else right_pad)(raw, pads)
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        batch = model(ids, attention_mask=mask, position_ids=pos).logits
        for b, p in enumerate(pads):
            real = slice(p, None) if left else slice(0, 18 - p)
            alone = model(raw[b:b + 1, real]).logits[0]
            assert (batch[b, real] - alone).abs().max() <= 1e-5, b


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("family", ALL)
def test_wavepe_and_eager_agree_and_eager_returns_probabilities(family, pos_enc):
    # the fused kernel ("wavepe") against the dense path that spells every score out ("eager")
    model = tiny(family)
    ids, mask, pos = left_pad(ids_for(2, 16), [0, 5])
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        model.set_attn_implementation("wavepe")
        fused = model(ids, attention_mask=mask, position_ids=pos, output_attentions=True)
        model.set_attn_implementation("eager")
        dense = model(ids, attention_mask=mask, position_ids=pos, output_attentions=True)
    assert _real_max(fused.logits, dense.logits, mask) <= 1e-5
    assert len(fused.attentions) == len(dense.attentions) == 2
    real = mask.bool()[:, None, :, None]
    for a, b in zip(fused.attentions, dense.attentions):
        assert a.shape == b.shape == (2, 4, 16, 16)
        assert ((a - b).abs() * real).max() <= 1e-5
        assert torch.allclose(a.sum(-1)[real[..., 0].expand(2, 4, 16)], torch.tensor(1.0), atol=1e-5)
        assert (a.triu(1) == 0).all()  # causal


@pytest.mark.parametrize("pos_enc", RELATIVE)
def test_output_attentions_carry_the_bias(pos_enc):
    model = tiny()
    ids = ids_for(1, 12)
    with torch.no_grad():
        with wavepe.patch(model, "nope"):
            model.set_attn_implementation("eager")  # rope/nope keep transformers' backends (sdpa has no weights)
            plain = model(ids, output_attentions=True).attentions[0]
            model.set_attn_implementation("sdpa")
        with wavepe.patch(model, pos_enc):
            biased = model(ids, output_attentions=True).attentions[0]
    assert (biased - plain).abs().max() > 1e-2


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("family", list(SLIDING))
def test_sliding_window_past_the_window(family, pos_enc):
    # a window (6) shorter than the sequence: dense masks, trimmed caches, incremental == full
    model = tiny(family, **SLIDING[family])
    ids = ids_for(1, 16)
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        full = model(ids).logits
        out = model(ids[:, :9], use_cache=True)
        pieces, cache = [out.logits], out.past_key_values
        for t in range(9, 16):
            o = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            pieces.append(o.logits)
            cache = o.past_key_values
    assert (torch.cat(pieces, dim=1) - full).abs().max() <= 1e-4
    if pos_enc == "rope":
        with torch.no_grad():
            assert (model(ids).logits - full).abs().max() <= 1e-5  # unpatched: the same window


# ---- generation -------------------------------------------------------------------------------------------------

def _greedy(model, ids, mask, **kw):
    return model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, **kw)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("family", ALL)
def test_batched_greedy_static_and_dynamic_equal_one_by_one(family, pos_enc):
    model = tiny(family)
    raw = ids_for(2, 10)
    ids, mask, _ = left_pad(raw, [0, 4])
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        batched = _greedy(model, ids, mask)
        static = _greedy(model, ids, mask, cache_implementation="static")
        for b, p in enumerate([0, 4]):
            alone = _greedy(model, raw[b:b + 1, p:], torch.ones(1, 10 - p, dtype=torch.long))
            assert torch.equal(batched[b, 10:], alone[0, 10 - p:]), b
    assert torch.equal(batched, static)


@pytest.mark.parametrize("family", ALL)
def test_rope_mode_beam_and_sampling_equal_the_stock_model(family):
    model = tiny(family)
    ids, mask, _ = left_pad(ids_for(2, 8), [0, 3])
    with torch.no_grad():
        def runs():
            beam = _greedy(model, ids, mask, num_beams=3)
            torch.manual_seed(7)
            sample = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=True, top_k=20,
                                    pad_token_id=0)
            return beam, sample
        want = runs()
        with wavepe.patch(model, "rope"):
            got = runs()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("pos_enc", RELATIVE)
def test_beam_sampling_and_assisted_generation_run_consistently(pos_enc):
    model = tiny()
    assistant = tiny(seed=5)
    ids, mask, _ = left_pad(ids_for(1, 8), [0])
    with torch.no_grad(), wavepe.patch(model, pos_enc), wavepe.patch(assistant, pos_enc):
        greedy = _greedy(model, ids, mask)
        beam = _greedy(model, ids, mask, num_beams=3)
        torch.manual_seed(3)
        sample = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=True, pad_token_id=0)
        assisted = _greedy(model, ids, mask, assistant_model=assistant)
    assert beam.shape == sample.shape == (1, 14)
    assert torch.equal(assisted, greedy)  # the assistant only proposes: verification keeps greedy's tokens


@pytest.mark.parametrize("pos_enc", RELATIVE)
def test_generate_returns_attentions(pos_enc):
    model = tiny()
    ids = ids_for(1, 6)
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0, output_attentions=True,
                             return_dict_in_generate=True)
    assert len(out.attentions) == 3
    assert [tuple(a.shape) for a in out.attentions[0]] == [(1, 4, 6, 6)] * 2
    assert [tuple(a.shape) for a in out.attentions[2]] == [(1, 4, 1, 8)] * 2


# ---- training, checkpoints --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pos_enc", ["wavelet", "rope"])
@pytest.mark.parametrize("family", ALL)
def test_gradient_checkpointing_gives_the_same_gradients(family, pos_enc):
    ids, mask, pos = left_pad(ids_for(2, 12), [0, 3])
    labels = ids.masked_fill(mask == 0, -100)
    grads = []
    for checkpointing in (False, True):
        model = tiny(family, initializer_range=0.05).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        with wavepe.patch(model, pos_enc):
            model(ids, attention_mask=mask, position_ids=pos, labels=labels).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0 and (grads[0] - grads[1]).abs().max() <= 1e-5


@pytest.mark.parametrize("family", ALL)
def test_save_load_through_safetensors_keeps_the_settings(family, tmp_path):
    model = tiny(family)
    ids = ids_for(2, 12)
    with wavepe.patch(model, "wavelet") as saved, torch.no_grad():
        want = model(ids).logits
        model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert json.loads((tmp_path / "config.json").read_text())["wavepe"] == saved.settings.to_dict()
    loaded = type(model).from_pretrained(tmp_path).eval()
    with wavepe.patch(loaded) as handle, torch.no_grad():
        assert handle.settings == saved.settings
        assert torch.equal(loaded(ids).logits, want)


# ---- what the patch refuses, by name ----------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_bidirectional_attention_is_refused_for_relative_encodings(family):
    model = tiny(family, use_bidirectional_attention=True)
    with pytest.raises(ValueError, match="use_bidirectional_attention=True"):
        wavepe.patch(model, "wavelet")
    wavepe.patch(model, "rope").remove()  # no bias: fine


def test_multimodal_gemma3_is_refused_for_relative_encodings():
    import transformers as tf

    text = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, sliding_window=6)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    model = tf.Gemma3ForConditionalGeneration(tf.Gemma3Config(text_config=text, vision_config=vision,
                                                              mm_tokens_per_image=4, image_token_index=299,
                                                              boi_token_index=297, eoi_token_index=298))
    with pytest.raises(ValueError, match="vision tower.*patch the text model alone"):
        wavepe.patch(model, "alibi")
    wavepe.patch(model, "nope").remove()
    wavepe.patch(model.model.language_model, "alibi").remove()


@pytest.mark.parametrize("impl", ["flex_attention"])
def test_backends_without_a_bias_are_refused_at_patch_time(impl):
    model = tiny()
    model.config._attn_implementation_internal = impl
    with pytest.raises(ValueError, match=f"attn_implementation='{impl}' cannot add the pos_enc='alibi'"):
        wavepe.patch(model, "alibi")
    wavepe.patch(model, "nope").remove()  # no bias: kept
    assert model.config._attn_implementation == impl


def test_interleaved_rope_layout_is_refused():
    with pytest.raises(ValueError, match="layout='interleaved'.*rotate_half"):
        wavepe.patch(tiny(), rope=RopeConfig(layout="interleaved"))


# ---- the backend a user asks for --------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_requested_backend_is_kept_where_it_can_carry_the_encoding(pos_enc, impl):
    from transformers import LlamaForCausalLM

    cfg = tiny().config
    model = LlamaForCausalLM._from_config(cfg, attn_implementation=impl)
    with wavepe.patch(model, pos_enc):
        got = model.config._attn_implementation
    relative = pos_enc in RELATIVE
    assert got == ("wavepe" if relative and impl == "sdpa" else impl)
    assert model.config._attn_implementation == impl
    # re-patching starts from the user's implementation, not from the one an earlier patch chose
    wavepe.patch(model, "wavelet")
    with wavepe.patch(model, pos_enc):
        assert model.config._attn_implementation == got
    assert model.config._attn_implementation == impl


# ---- packed sequences and padding with holes ----------------------------------------------------------------------

def _wide(family: str) -> torch.nn.Module:
    """The family's tiny model in float64, sliding windows wider than the test rows (documents alone and packed
    rows then see the same keys)."""
    over = {"sliding_window": 64} if "sliding_window" in FAMILIES[family][2] else {}
    return tiny(family, **over).double()


@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize("pos_enc", RELATIVE)
@pytest.mark.parametrize("family", ALL)
def test_padding_free_batches_equal_documents_alone(family, pos_enc, use_cache, monkeypatch):
    """DataCollatorWithFlattening's rows (position_ids restart, no mask): logits and gradients equal to each
    document alone, through the fused kernel (cu_seqlens) in every family (Gemma 2's softcapping and its
    default eager implementation included).  With use_cache=False Hugging Face's mask marks the packing;
    with a cache object it does not, and the backend reads the restarts from position_ids."""
    from transformers import DataCollatorWithFlattening

    from wavepe.integrations import _hf_attention as hf_attn

    model = _wide(family).train()
    docs = [ids_for(1, n, seed=n)[0].tolist() for n in (7, 1, 12, 20, 2)]
    batch = DataCollatorWithFlattening()([{"input_ids": d} for d in docs])
    dense_calls = []
    dense = hf_attn.dense_attention
    monkeypatch.setattr(hf_attn, "dense_attention", lambda *a, **k: (dense_calls.append(1), dense(*a, **k))[1])
    with wavepe.patch(model, pos_enc):
        out = model(**batch, use_cache=use_cache)
        params = [p for p in model.parameters() if p.requires_grad]
        packed_grads = torch.autograd.grad(out.loss, params)
        assert not dense_calls
        total = sum(len(d) - 1 for d in docs)
        want = [torch.zeros_like(p) for p in params]
        start = 0
        for d in docs:
            ids = torch.tensor([d])
            alone = model(ids, labels=ids if len(d) > 1 else None)
            assert (out.logits[0, start:start + len(d)] - alone.logits[0]).abs().max() <= 1e-9
            if len(d) > 1:
                for w, g in zip(want, torch.autograd.grad(alone.loss * (len(d) - 1) / total, params)):
                    w += g
            start += len(d)
    # transformers' loss runs in float32 (ForCausalLMLoss upcasts the logits to float32, not float64): the stock
    # model's packed and one-by-one gradients differ by ~1e-8 too
    for got, w in zip(packed_grads, want):
        assert (got - w).abs().max() <= 1e-7


@pytest.mark.parametrize("pos_enc", RELATIVE)
@pytest.mark.parametrize("family", ALL)
def test_padding_with_holes_measures_position_differences(family, pos_enc):
    """A mask with pads between real tokens (transformers' own test_generate_from_random_inputs_embeds makes
    one): the bias counts real tokens, as position_ids do -- the row equals the row without its pads, in the
    forward and in generation."""
    model = _wide(family)
    ids = ids_for(2, 9)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 2] = mask[0, 5] = 0
    mask[1, 0] = 0
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        got = model(ids, attention_mask=mask, position_ids=pos).logits
        for r in range(2):
            real = mask[r].bool()
            assert (got[r, real] - model(ids[r:r + 1, real]).logits[0]).abs().max() <= 1e-9
        holed = model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=4, do_sample=False)
        compact = model.generate(ids[:1, mask[0].bool()], max_new_tokens=4, do_sample=False)
    assert holed[0, -4:].tolist() == compact[0, -4:].tolist()


@pytest.mark.parametrize("pos_enc", RELATIVE)
@pytest.mark.parametrize("family", list(SLIDING))
def test_sliding_windows_and_softcapping_run_fused(family, pos_enc, monkeypatch, caplog):
    """Windows that bite (6 keys of 16), Gemma 2's softcapping and its default eager implementation: the fused
    kernel, no M x N scores, equal to the dense path (which output_attentions=True takes, and which the tests
    above hold to Hugging Face's masks); the dense path says why in one debug line (logger ``wavepe``)."""
    import logging

    from wavepe.integrations import _hf_attention as hf_attn

    model = tiny(family, **SLIDING[family]).double()
    ids, mask, pos = left_pad(ids_for(2, 16), [0, 3])
    dense_calls = []
    dense = hf_attn.dense_attention
    monkeypatch.setattr(hf_attn, "dense_attention", lambda *a, **k: (dense_calls.append(1), dense(*a, **k))[1])
    monkeypatch.setattr(hf_attn, "_LOGGED", set())  # (once per reason and process)
    caplog.set_level(logging.DEBUG, logger="wavepe")
    dense_lines = lambda: [r.getMessage() for r in caplog.records if "the dense path" in r.getMessage()]  # noqa: E731
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        fused = model(ids, attention_mask=mask, position_ids=pos).logits
        assert not dense_calls and not dense_lines()
        out = model(ids, attention_mask=mask, position_ids=pos, output_attentions=True)
        assert dense_calls and out.attentions is not None and len(out.attentions) == model.config.num_hidden_layers
        assert len(dense_lines()) == 1 and "output_attentions" in dense_lines()[0], dense_lines()
    keep = mask.bool()
    assert (fused - out.logits)[keep].abs().max() <= 1e-9
