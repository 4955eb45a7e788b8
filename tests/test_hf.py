"""Hugging Face shim on tiny Llama models built locally: formulas, padding, caches, mechanics, errors.

Every family: tests/test_hf_families.py; torch.compile: tests/test_hf_compile.py.
"""

from __future__ import annotations

import copy
import gc
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from .hf_models import POS_ENCS, ids_for, left_pad, reference_logits, tiny  # noqa: E402

import wavepe  # noqa: E402
from wavepe import RopeConfig, WaveletConfig  # noqa: E402
from wavepe.integrations import hf  # noqa: E402
from wavepe.integrations import _hf_attention as hf_attn  # noqa: E402
from wavepe.integrations import _hf_settings as hf_settings  # noqa: E402

from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: E402

@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a loaded machine spinning threads cost 10x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- equal to the formulas --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_rope_at_models_theta_reproduces_unpatched_model(family):
    model = tiny(family)
    ids, mask, pos = left_pad(ids_for(3, 24), [0, 5, 11])
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        with wavepe.patch_llama(model, "rope"):
            got = model(ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert (got - want)[real].abs().max() <= 1e-5
    # ... and the test can fail: another theta changes the logits
    with torch.no_grad(), wavepe.patch_llama(model, "rope", rope=RopeConfig(theta=50.0)):
        other = model(ids, attention_mask=mask, position_ids=pos).logits
    assert (other - want)[real].abs().max() > 1e-2


@pytest.mark.parametrize("rope_parameters", [
    {"rope_type": "linear", "factor": 4.0, "rope_theta": 5000.0},
    {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "original_max_position_embeddings": 64},
    {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
])
def test_rope_uses_the_checkpoints_rope_scaling(rope_parameters):
    model = tiny(rope_parameters=rope_parameters)
    ids = ids_for(2, 40)
    with torch.no_grad():
        want = model(ids).logits
        with wavepe.patch_llama(model, "rope"):
            got = model(ids).logits
    assert (got - want).abs().max() <= 1e-5


def test_wavelet_equals_formula_reference(isa):
    model = tiny()
    ids = ids_for(2, 24)
    with torch.no_grad(), wavepe.patch_llama(model, "wavelet") as handle:
        got = model(ids).logits.double().numpy()
    cfg = handle.settings.wavelet
    assert cfg == WaveletConfig.grid(16)  # default grid from the head dim
    for b in range(2):
        want = reference_logits(model, ids[b].numpy(), "wavelet", wavelet=("ricker", cfg.scales, cfg.shifts))
        np.testing.assert_allclose(got[b], want, rtol=1e-4, atol=2e-5)
    nope = reference_logits(model, ids[0].numpy(), "nope")
    assert np.abs(got[0] - nope).max() > 1e-2  # the encoding matters at these weights


@pytest.mark.parametrize("family", ["qwen2", "mistral", "qwen3", "olmo2"])
def test_other_families_equal_formula_reference(family, isa):
    model = tiny(family)  # Qwen2: q/k/v biases; Qwen3: q/k norm per head; OLMo-2: over the projection, post-norms
    ids = ids_for(1, 20)
    cfg = WaveletConfig.grid(16, n_scales=4, family="morlet")
    with torch.no_grad(), wavepe.patch_llama(model, "wavelet", wavelet=cfg):
        got = model(ids).logits[0].double().numpy()
    want = reference_logits(model, ids[0].numpy(), "wavelet", wavelet=("morlet", cfg.scales, cfg.shifts))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def test_head_dim_not_multiple_of_8_with_explicit_grid(isa):
    model = tiny(hidden_size=48, num_attention_heads=4, num_key_value_heads=4)  # head_dim 12
    cfg = WaveletConfig.grid(12, n_scales=4, family="gaussian")
    ids = ids_for(1, 17)
    with torch.no_grad(), wavepe.patch_llama(model, wavelet=cfg):
        got = model(ids).logits[0].double().numpy()
    want = reference_logits(model, ids[0].numpy(), "wavelet", wavelet=("gaussian", cfg.scales, cfg.shifts))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("encoding", ["alibi", "nope"])
def test_alibi_and_nope_equal_formula_reference(encoding, isa):
    model = tiny()
    ids = ids_for(1, 24)
    with torch.no_grad(), wavepe.patch_llama(model, encoding):
        got = model(ids).logits[0].double().numpy()
    np.testing.assert_allclose(got, reference_logits(model, ids[0].numpy(), encoding), rtol=1e-4, atol=2e-5)


def test_rope_config_theta_and_p_rope_equal_formula_reference(isa):
    model = tiny()
    ids = ids_for(1, 24)
    cfg = RopeConfig(theta=64.0, rotary_fraction=0.5)  # θ = L_train, half of the pairs rotate
    with torch.no_grad(), wavepe.patch_llama(model, rope=cfg) as handle:
        got = model(ids).logits[0].double().numpy()
    assert handle.settings.pos_enc == "rope"
    want = reference_logits(model, ids[0].numpy(), "rope", theta=64.0, rotary_pairs=cfg.rotary_pairs(16))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


# ---- padding, caches, generate ----------------------------------------------------------------------------------

# left padding against rows alone, every family: tests/test_hf_families.py

@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_generate_matches_full_forward(pos_enc):
    model = tiny()
    ids, mask, _ = left_pad(ids_for(2, 12), [0, 4])
    with torch.no_grad(), wavepe.patch_llama(model, pos_enc):
        out = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        seq = out.sequences
        full_mask = torch.cat([mask, torch.ones(2, 8, dtype=mask.dtype)], dim=1)
        pos = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 0)
        full = model(seq, attention_mask=full_mask, position_ids=pos).logits
    steps = torch.stack(out.logits, dim=1)  # (B, 8, V): logits that chose tokens 12..19
    assert (steps - full[:, 11:-1]).abs().max() <= 1e-4


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_chunked_prefill_and_decoding_match_full_forward(pos_enc):
    model = tiny()
    ids, mask, pos = left_pad(ids_for(2, 21), [0, 6])
    with torch.no_grad(), wavepe.patch_llama(model, pos_enc):
        full = model(ids, attention_mask=mask, position_ids=pos).logits
        pieces, cache = [], None
        for lo, hi in [(0, 9), (9, 14), (14, 15), (15, 21)]:  # M > 1 with a cache: the compact causal form
            o = model(ids[:, lo:hi], attention_mask=mask[:, :hi], position_ids=pos[:, lo:hi], past_key_values=cache,
                      use_cache=True)
            cache = o.past_key_values
            pieces.append(o.logits)
    inc = torch.cat(pieces, dim=1)
    real = mask.bool()
    assert (inc - full)[real].abs().max() <= 1e-4


@pytest.mark.parametrize("pos_enc", ["wavelet", "alibi"])
def test_static_cache_generation_equals_dynamic(pos_enc):
    model = tiny()
    ids, mask, _ = left_pad(ids_for(2, 10), [0, 3])
    with torch.no_grad(), wavepe.patch_llama(model, pos_enc):
        dyn = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        sta = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True, cache_implementation="static")
    assert torch.equal(dyn.sequences, sta.sequences)
    assert (torch.stack(dyn.logits) - torch.stack(sta.logits)).abs().max() <= 1e-4


@settings(max_examples=10, deadline=None)
@given(length=st.integers(1, 14), pads=st.lists(st.integers(0, 13), min_size=1, max_size=3),
       pos_enc=st.sampled_from(POS_ENCS), gqa=st.booleans())
def test_batches_with_random_padding_equal_rows_alone(length, pads, pos_enc, gqa):
    model = _HYPOTHESIS_MODELS[gqa]
    pads = [min(p, length - 1) for p in pads]
    raw = ids_for(len(pads), length, seed=length)
    ids, mask, pos = left_pad(raw, pads)
    with torch.no_grad(), wavepe.patch_llama(model, pos_enc):
        batch = model(ids, attention_mask=mask, position_ids=pos).logits
        for b, p in enumerate(pads):
            alone = model(raw[b:b + 1, p:]).logits[0]
            assert (batch[b, p:] - alone).abs().max() <= 1e-5


_HYPOTHESIS_MODELS = {True: tiny(), False: tiny(num_key_value_heads=4, seed=3)}


def test_the_installed_mask_factories_make_transformers_own_rules():
    # importing the shim replaces two masking_utils factories (so that wavepe_mask can read their functions under
    # torch.compile): what they make is transformers' function, value for value, for every other implementation too
    from transformers import masking_utils as mu

    hf.register()  # idempotent: still one layer over transformers' own
    docs = torch.tensor([[0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1, 1]])
    pos = torch.tensor([[0, 1, 0, 1, 2, 0, 1], [0, 1, 2, 3, 0, 1, 2]])
    window = mu.sliding_window_causal_mask_function
    packed = mu.packed_sequence_compatibility_function
    assert not hasattr(window.__wrapped__, "__wrapped__") and not hasattr(packed.__wrapped__, "__wrapped__")
    made = [(window(3), window.__wrapped__(3)),
            (packed(mu.causal_mask_function, pos, docs), packed.__wrapped__(mu.causal_mask_function, pos, docs)),
            (packed(window(2), pos, docs), packed.__wrapped__(window.__wrapped__(2), pos, docs))]
    b, q, kv = torch.arange(2)[:, None, None], torch.arange(7)[None, :, None], torch.arange(7)[None, None, :]
    for rule, theirs in made:
        assert isinstance(rule, (hf_attn.SlidingWindowCausal, hf_attn.PackedSequences))
        assert torch.equal(rule(b, 0, q, kv), theirs(b, 0, q, kv))
    assert made[1][0].documents is docs and made[2][0].mask_function.sliding_window == 2


def test_packed_sequences_stay_separate():
    # training-style packing: positions restart, no mask, no cache -> Hugging Face's packed-sequence mask
    # function, read by wavepe_mask as document indices
    model = tiny()
    ids = ids_for(1, 20)
    pos = torch.cat([torch.arange(8), torch.arange(12)])[None]
    with torch.no_grad(), wavepe.patch_llama(model, "wavelet"):
        packed = model(ids, position_ids=pos, use_cache=False).logits[0]
        first = model(ids[:, :8]).logits[0]
        second = model(ids[:, 8:]).logits[0]
    assert (packed[:8] - first).abs().max() <= 1e-5
    assert (packed[8:] - second).abs().max() <= 1e-5


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_other_attention_implementations_after_patching(impl, pos_enc):
    # rope/nope: any implementation does the rest; wavelet/alibi: eager adds the bias densely, sdpa cannot
    model = tiny()
    ids, mask, pos = left_pad(ids_for(2, 16), [0, 5])
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        model.set_attn_implementation(impl)
        if pos_enc in ("wavelet", "alibi") and impl == "sdpa":
            with pytest.raises(ValueError, match=f"attn_implementation='sdpa' cannot add the pos_enc='{pos_enc}'"):
                model(ids, attention_mask=mask, position_ids=pos)
            return
        got = model(ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert (got - want)[real].abs().max() <= 1e-5


def test_attn_implementation_wavepe_on_an_unpatched_model():
    # transformers applies its own RoPE and calls wavepe's attention backend
    model = tiny()
    ids, mask, pos = left_pad(ids_for(2, 16), [0, 7])
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        model.set_attn_implementation("wavepe")
        got = model(ids, attention_mask=mask, position_ids=pos).logits
    assert (got - want)[mask.bool()].abs().max() <= 1e-5


# ---- training ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_training_steps_reduce_the_loss(pos_enc):
    model = tiny(initializer_range=0.05)
    ids, mask, pos = left_pad(ids_for(4, 24), [0, 0, 5, 9])
    labels = ids.masked_fill(mask == 0, -100)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    with wavepe.patch_llama(model, pos_enc):
        for _ in range(5):
            loss = model(ids, attention_mask=mask, position_ids=pos, labels=labels).loss
            loss.backward()
            grad = model.model.layers[0].self_attn.q_proj.weight.grad
            assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses


def test_attention_dropout_trains_through_the_dense_path():
    model = tiny(attention_dropout=0.3)
    ids = ids_for(2, 16)
    with wavepe.patch_llama(model, "wavelet"):
        model.train()
        torch.manual_seed(0)
        a = model(ids, labels=ids).loss
        a.backward()
        torch.manual_seed(1)
        b = model(ids, labels=ids).loss
        assert torch.isfinite(a) and a.item() != b.item()  # dropout is applied
        model.eval()
        with torch.no_grad():
            assert torch.equal(model(ids).logits, model(ids).logits)


def test_gradcheck_through_a_patched_attention_layer():
    # the attention module alone (transformers' RMSNorm computes in float32, the attention in float64)
    model = tiny(hidden_size=16, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1,
                 num_hidden_layers=1).double()
    _, mask, pos = left_pad(ids_for(2, 5), [0, 2])
    keep = mask.bool()[:, None, None, :]
    causal = torch.arange(5)[None, :] <= torch.arange(5)[:, None]
    additive = torch.zeros(2, 1, 5, 5, dtype=torch.float64).masked_fill(~(causal & keep), -1e30)
    attn = model.model.layers[0].self_attn
    for pos_enc in POS_ENCS:
        wavelet = WaveletConfig.grid(8, n_scales=4) if pos_enc == "wavelet" else None
        with wavepe.patch_llama(model, pos_enc, wavelet=wavelet):
            for attention_mask in (keep, additive):  # compact (fused path) and float (dense fallback)
                def f(x):
                    cos_sin = model.model.rotary_emb(x, position_ids=pos)  # through the patch's hook
                    out, _ = attn(x, position_embeddings=cos_sin, attention_mask=attention_mask, position_ids=pos)
                    return out * mask[..., None]  # pad rows attend to nothing: 0 by definition

                x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
                assert torch.autograd.gradcheck(f, (x,), fast_mode=True)


# ---- patching mechanics -----------------------------------------------------------------------------------------

def test_patch_and_remove_round_trip_exactly():
    gc.collect()  # models that earlier tests patched and dropped are finalized
    original_forward = LlamaAttention.__dict__["forward"]
    original_eager = modeling_llama.eager_attention_forward
    assert not hasattr(original_eager, "__wavepe_dispatcher__"), "a patched model leaked from another test"
    model = tiny()
    ids = ids_for(2, 16)
    config_before = model.config.to_dict()
    impl_before = model.config._attn_implementation
    with torch.no_grad():
        before = model(ids).logits
        handle = wavepe.patch_llama(model, "wavelet")
        assert handle.active and hf.get_patch(model) is handle
        assert model.config.wavepe["pos_enc"] == "wavelet"
        assert model.config._attn_implementation == "wavepe"
        assert modeling_llama.eager_attention_forward.__wavepe_dispatcher__  # eager adds the bias while patched
        patched = model(ids).logits
        handle.remove()
        handle.remove()  # idempotent
        after = model(ids).logits
    assert not handle.active and hf.get_patch(model) is None
    assert (patched - before).abs().max() > 1e-2
    assert torch.equal(after, before)
    assert model.config.to_dict() == config_before and not hasattr(model.config, "wavepe")
    assert model.config._attn_implementation == impl_before
    assert LlamaAttention.__dict__["forward"] is original_forward  # never replaced
    assert modeling_llama.eager_attention_forward is original_eager
    assert not hasattr(modeling_llama.apply_rotary_pos_emb, "__wavepe_dispatcher__")
    assert not model.model.rotary_emb._forward_hooks
    assert "forward" not in model.model.rotary_emb.__dict__  # the identity forward went with the hook
    assert all("_wavepe" not in m.__dict__ for m in model.modules())


def test_repatching_replaces_the_previous_patch():
    model = tiny()
    ids = ids_for(1, 12)
    with torch.no_grad():
        before = model(ids).logits
        first = wavepe.patch_llama(model, "alibi")
        alibi = model(ids).logits
        second = wavepe.patch_llama(model, "nope")
        assert not first.active and model.config.wavepe["pos_enc"] == "nope"
        assert (model(ids).logits - alibi).abs().max() > 1e-3
        second.remove()
        assert torch.equal(model(ids).logits, before)


def test_class_patch_covers_from_pretrained(tmp_path):
    original_init = LlamaForCausalLM.__dict__["__init__"]
    source = tiny()
    source.save_pretrained(tmp_path)
    ids = ids_for(1, 12)
    with torch.no_grad():
        plain = source(ids).logits
        with wavepe.patch_llama(source, "alibi"):
            want = source(ids).logits
    handle = wavepe.patch_llama(LlamaForCausalLM, "alibi")
    try:
        loaded = LlamaForCausalLM.from_pretrained(tmp_path).eval()
        assert hf.get_patch(loaded) is not None and loaded.config._attn_implementation == "wavepe"
        with torch.no_grad():
            assert torch.equal(loaded(ids).logits, want)
    finally:
        handle.remove()
    assert LlamaForCausalLM.__dict__["__init__"] is original_init
    assert hf.get_patch(loaded) is None  # instances made under the class patch are restored too
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, plain)
        assert torch.equal(LlamaForCausalLM.from_pretrained(tmp_path).eval()(ids).logits, plain)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_save_pretrained_then_patch_from_config_restores_the_model(pos_enc, tmp_path):
    model = tiny()
    extra = {"wavelet": WaveletConfig.grid(16, n_scales=4, family="morlet")} if pos_enc == "wavelet" else \
        {"rope": RopeConfig(theta=128.0, rotary_fraction=0.75)} if pos_enc == "rope" else {}
    ids = ids_for(2, 14)
    with wavepe.patch_llama(model, pos_enc, **extra) as saved:
        with torch.no_grad():
            want = model(ids).logits
        model.save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.wavepe == saved.settings.to_dict()
    with wavepe.patch_llama(loaded) as handle:  # settings from config.wavepe
        assert handle.settings == saved.settings
        with torch.no_grad():
            assert torch.equal(loaded(ids).logits, want)


def test_deepcopy_and_pickle_of_a_patched_model_stay_patched():
    model = tiny()
    ids = ids_for(1, 12)
    handle = wavepe.patch_llama(model, "wavelet")
    with torch.no_grad():
        want = model(ids).logits
        twin = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        handle.remove()
        assert torch.equal(twin(ids).logits, want)
        assert torch.equal(loaded(ids).logits, want)
        hf.unpatch(loaded)
        hf.unpatch(twin)
        assert torch.equal(twin(ids).logits, model(ids).logits)
    assert not hasattr(modeling_llama.eager_attention_forward, "__wavepe_dispatcher__")


@pytest.mark.parametrize("pos_enc", ["wavelet", "alibi", "nope"])
def test_identity_rotation_is_skipped_not_computed(pos_enc, monkeypatch):
    # wavelet / alibi / nope hand every layer cos = 1, sin = 0: while patched, the family's apply_rotary_pos_emb
    # returns q and k as they are (no rotate_half), with the logits of computing q * 1 + rotate_half(q) * 0
    gc.collect()
    original = modeling_llama.apply_rotary_pos_emb
    assert not hasattr(original, "__wavepe_dispatcher__"), "a patched model leaked from another test"
    model = tiny()
    ids = ids_for(2, 16)
    handle = wavepe.patch_llama(model, pos_enc)
    assert modeling_llama.apply_rotary_pos_emb.__wavepe_dispatcher__
    calls = []
    real_rotate = modeling_llama.rotate_half
    monkeypatch.setattr(modeling_llama, "rotate_half", lambda x: calls.append(1) or real_rotate(x))
    with torch.no_grad():
        skipped = model(ids).logits
        assert not calls
        with monkeypatch.context() as m:  # the same model computing the identity rotation
            m.setattr(modeling_llama, "apply_rotary_pos_emb", original)
            computed = model(ids).logits
        assert calls
    assert torch.equal(skipped, computed)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    cos, sin = torch.ones(1, 3, 8), torch.zeros(1, 3, 8)
    assert modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)[0] is not q  # an unmarked cos: the original
    # nor are the model's angles computed: the rotary module hands out (1, 0) shaped as its own (cos, sin)
    rotary = model.model.rotary_emb
    x, positions = torch.randn(2, 5, 32, dtype=torch.float64), torch.arange(5).expand(2, 5)
    with torch.no_grad():
        own = type(rotary).forward(rotary, x, positions)
        cos, sin = rotary(x, positions)
    assert cos.shape == own[0].shape and cos.dtype == own[0].dtype and sin.shape == own[1].shape
    assert torch.equal(cos, torch.ones_like(own[0])) and torch.equal(sin, torch.zeros_like(own[1]))
    handle.remove()
    assert modeling_llama.apply_rotary_pos_emb is original


def test_lazy_reexport_and_registration():
    assert wavepe.patch_llama is hf.patch_llama
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert "wavepe" in ALL_ATTENTION_FUNCTIONS.valid_keys() and "wavepe" in ALL_MASK_ATTENTION_FUNCTIONS


def test_compact_masks_never_materialise_m_by_n():
    from transformers.masking_utils import causal_mask_function

    keep = torch.ones(2, 40, dtype=torch.bool)
    keep[1, :7] = False
    got = hf_attn.wavepe_mask(2, 40, 40, 0, 0, causal_mask_function, keep)
    assert got.shape == (2, 1, 1, 40) and torch.equal(got[:, 0, 0], keep)
    assert hf_attn.wavepe_mask(2, 40, 40, 0, 0, causal_mask_function, torch.ones(2, 40, dtype=torch.bool)) is None
    assert hf_attn.wavepe_mask(2, 1, 41, 40, 0, causal_mask_function, None) is None
    assert hf_attn.wavepe_mask(2, 5, 45, 40, 0, causal_mask_function, None).shape == (2, 1, 1, 45)


@pytest.mark.parametrize("m,n", [(0, 0), (0, 5), (1, 1), (1, 9), (3, 9)])
def test_attend_edge_lengths_against_dense(m, n):
    torch.manual_seed(0)
    q = torch.randn(2, 4, m, 16, dtype=torch.float64)
    k = torch.randn(2, 2, n, 16, dtype=torch.float64)
    v = torch.randn(2, 2, n, 16, dtype=torch.float64)
    keep = torch.ones(2, n, dtype=torch.bool)
    if n > 2:
        keep[1, :2] = False
    cfg = WaveletConfig.grid(16)
    mask = keep[:, None, None, :] if m else None
    fused, _, plan = hf_attn.attend(q, k, v, mask, pos_enc="wavelet", wavelet=cfg, scale=0.25)
    assert plan.fused and fused.shape == (2, m, 4, 16)
    if n == 0:
        return  # no keys: nothing to compare (and 0 queries give an empty output above)
    causal = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
    positions = (n - m + torch.arange(m))[None]
    dense, probs = hf_attn.dense_attention(q, k, v, (causal[None] & keep[:, None, :])[:, None],
                                           positions[:, :, None] - torch.arange(n),
                                           pos_enc="wavelet", wavelet=cfg, scale=0.25)
    assert torch.allclose(fused, dense.transpose(1, 2), atol=1e-12)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 4, m, dtype=torch.float64))


# ---- errors -----------------------------------------------------------------------------------------------------

def test_unsupported_models_are_refused():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=32))
    with pytest.raises(TypeError, match="LlamaAttention.*GPT2LMHeadModel has GPT2Attention"):
        wavepe.patch_llama(gpt2)
    with pytest.raises(TypeError, match="GPT2LMHeadModel.*modeling_gpt2"):
        wavepe.patch_llama(GPT2LMHeadModel)
    with pytest.raises(TypeError, match="transformers model class"):
        wavepe.patch_llama(dict)
    with pytest.raises(TypeError, match="got str"):
        wavepe.patch_llama("meta-llama/Llama-2-7b-hf")


def test_bad_settings_are_refused():
    model = tiny()
    with pytest.raises(ValueError, match="pos_enc must be one of .*'xpos'"):
        wavepe.patch_llama(model, "xpos")
    with pytest.raises(ValueError, match="wavelet= applies to pos_enc='wavelet' only"):
        wavepe.patch_llama(model, "rope", wavelet=WaveletConfig.grid(16))
    with pytest.raises(ValueError, match="rope= applies to pos_enc='rope' only"):
        wavepe.patch_llama(model, "alibi", rope=RopeConfig())
    with pytest.raises(ValueError, match=r"wavelet.head_dim=8 does not match the model's head_dim=16"):
        wavepe.patch_llama(model, wavelet=WaveletConfig.grid(8))
    with pytest.raises(TypeError, match="rope must be a RopeConfig"):
        wavepe.patch_llama(model, "rope", rope=500000.0)
    model.config.wavepe = {"pos_enc": "bogus"}
    with pytest.raises(ValueError, match=r"config.wavepe\['pos_enc'\]"):
        wavepe.patch_llama(model)
    assert hf.get_patch(model) is None and model.config._attn_implementation == "sdpa"


def test_head_dims_the_encoding_cannot_use():
    model = tiny(hidden_size=48, num_attention_heads=4, num_key_value_heads=4)  # head_dim 12
    with pytest.raises(ValueError, match="divisible by 8.*head_dim=12"):
        wavepe.patch_llama(model, "wavelet")
    wavepe.patch_llama(model, "wavelet", wavelet=WaveletConfig.grid(12, n_scales=3)).remove()  # explicit grid: fine
    # transformers itself refuses odd head dims with RoPE, so check the shim's own guard directly
    with pytest.raises(ValueError, match="even head_dim.*head_dim=9"):
        hf_settings.for_head_dim(hf.PosEncSettings("rope"), 9)
    assert hf_settings.for_head_dim(hf.PosEncSettings("nope"), 9).pos_enc == "nope"


def test_positions_that_do_not_follow_indices():
    model = tiny()
    ids = ids_for(1, 10)
    gappy = (torch.arange(10) * 2)[None]
    with wavepe.patch_llama(model, "wavelet"), torch.no_grad():
        # no padding: Hugging Face's packed-sequence rule -- a position that does not follow the one before
        # starts a new sequence (masking_utils.find_packed_sequence_indices): here every token alone
        out = model(ids, position_ids=gappy).logits[0]
        assert (out[3] - model(ids[:, 3:4]).logits[0, 0]).abs().max() <= 1e-5
        # with padding such positions mean nothing to a relative encoding: refused, naming them
        mask = torch.ones(1, 11, dtype=torch.long)
        mask[0, 0] = 0
        padded = torch.cat([torch.zeros(1, 1, dtype=ids.dtype), ids], dim=1)
        with pytest.raises(ValueError, match=r"position_ids of batch row 0 .*\[1, 0, 2, 4"):
            model(padded, attention_mask=mask, position_ids=torch.cat([torch.ones(1, 1, dtype=torch.long), gappy], 1))
    with wavepe.patch_llama(model, "rope"), torch.no_grad():
        model(ids, position_ids=gappy)  # RoPE takes any positions


def test_unpatched_model_with_wavelet_config_refuses_the_backend(tmp_path):
    model = tiny()
    wavepe.patch_llama(model, "wavelet")
    model.save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path, attn_implementation="wavepe")
    with pytest.raises(RuntimeError, match="pos_enc='wavelet'.*call wavepe.patch"):
        loaded(ids_for(1, 4))


@pytest.mark.slow
def test_torch_compile_smoke():
    model = tiny(num_hidden_layers=1)
    ids = ids_for(2, 12)
    with torch.no_grad(), wavepe.patch_llama(model, "wavelet"):
        want = model(ids, use_cache=False).logits
        got = torch.compile(model, backend="eager")(ids, use_cache=False).logits  # dynamo tracing, no codegen
    assert (got - want).abs().max() <= 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_cuda_matches_cpu(pos_enc):
    model = tiny()
    ids, mask, pos = left_pad(ids_for(2, 24), [0, 6])
    with torch.no_grad(), wavepe.patch_llama(model, pos_enc):
        want = model(ids, attention_mask=mask, position_ids=pos).logits
        model.cuda()
        got = model(ids.cuda(), attention_mask=mask.cuda(), position_ids=pos.cuda()).logits.cpu()
        out = model.generate(ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=4, do_sample=False,
                             pad_token_id=0)
    assert (got - want)[mask.bool()].abs().max() <= 1e-4
    assert out.shape == (2, 28)
