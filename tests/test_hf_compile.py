"""torch.compile of patched models: no graph breaks, no recompiles per decode step (counted by torch._dynamo).

Dynamo only (``backend="eager"``): what is checked is the tracing -- every
wavepe check, mask, hook and op in the graph, positions read from tensors --
not code generation, which is torch's business and slow on a shared CPU.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import wavepe  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from transformers import CompileConfig  # noqa: E402

from .hf_models import FAMILIES, POS_ENCS, ids_for, left_pad, tiny  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # tests/conftest.py

# every encoding on Llama; on the other families the two seams: a relative bias (wavelet) and RoPE
CASES = [("llama", p) for p in POS_ENCS] + [(f, p) for f in FAMILIES if f != "llama" for p in ("wavelet", "rope")]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _breaks() -> int:
    return sum(counters["graph_break"].values())


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("family,pos_enc", CASES)
def test_fullgraph_forward_with_padding(family, pos_enc):
    # fullgraph=True raises on any graph break; the counters say so too
    model = tiny(family)
    ids, mask, pos = left_pad(ids_for(2, 12), [0, 3])
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        want = model(ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        got = compiled(ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    assert _breaks() == 0 and _graphs() == 1
    assert (got - want)[mask.bool()].abs().max() <= 1e-5


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_fullgraph_decoder_layer(pos_enc):
    from transformers.masking_utils import create_causal_mask

    model = tiny()
    ids, mask, pos = left_pad(ids_for(2, 10), [0, 4])
    layer = model.model.layers[0]
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        hidden = model.model.embed_tokens(ids)
        causal = create_causal_mask(config=model.config, inputs_embeds=hidden, attention_mask=mask,
                                    past_key_values=None, position_ids=pos)
        cos_sin = model.model.rotary_emb(hidden, position_ids=pos)
        kw = dict(attention_mask=causal, position_embeddings=cos_sin, position_ids=pos)
        want = layer(hidden, **kw)
        got = torch.compile(layer, backend="eager", fullgraph=True)(hidden, **kw)
    assert _breaks() == 0 and _graphs() == 1
    assert (got - want)[mask.bool()].abs().max() <= 1e-5


class _CallsOf:
    """A dynamo backend that runs the graph as traced and keeps the names of the functions it calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, gm, example_inputs):
        self.calls += [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]
        return gm.forward


def _training_batch(packed: bool) -> dict:
    """DataCollatorWithFlattening's row of five documents (position_ids restart, no mask), or two plain rows."""
    from transformers import DataCollatorWithFlattening

    if not packed:
        ids = ids_for(2, 12)
        return dict(input_ids=ids, labels=ids)
    docs = [ids_for(1, n, seed=n)[0].tolist() for n in (7, 1, 12, 20, 2)]
    return DataCollatorWithFlattening()([{"input_ids": d} for d in docs])


@pytest.mark.parametrize("family,pos_enc,packed,impl", [
    ("llama", "wavelet", True, None), ("llama", "alibi", True, None), ("llama", "rope", True, None),
    ("llama", "wavelet", False, None), ("mistral", "wavelet", True, None), ("mistral", "wavelet", False, None),
    ("gemma3", "wavelet", True, None), ("gemma2", "wavelet", True, None), ("gemma2", "wavelet", True, "wavepe")])
def test_compiled_training_step_runs_the_fused_kernel(family, pos_enc, packed, impl):
    """A compiled forward with no attention mask and no cache (training), where transformers always wraps the
    causal rule in its packed-sequence function (packed rows or not): the relative encodings on "wavepe" run the
    fused kernel, with the documents and the sliding windows (Mistral, Gemma 3: 6 keys, narrower than the
    documents), no softmax traced; every call gives the eager call's logits and gradients -- also RoPE on stock
    sdpa and Gemma 2 on its default eager implementation (the dense path), which call the mask functions wavepe
    installs."""
    model = tiny(family).train()
    if impl is not None:
        model.set_attn_implementation(impl)
    batch = _training_batch(packed)
    params = [p for p in model.parameters() if p.requires_grad]
    backend = _CallsOf()
    with wavepe.patch(model, pos_enc):
        want = model(**batch, use_cache=False)
        want_grads = torch.autograd.grad(want.loss, params)
        got = torch.compile(model, backend=backend, fullgraph=True)(**batch, use_cache=False)
        grads = torch.autograd.grad(got.loss, params)
        impl = model.config._attn_implementation
    assert _breaks() == 0
    fused = any("wavepe.attention_fwd" in c for c in backend.calls)
    dense = any("softmax" in c for c in backend.calls)
    if impl == "wavepe":
        assert fused and not dense, sorted(set(backend.calls))
    assert (got.logits - want.logits).abs().max() <= 1e-5
    for g, w in zip(grads, want_grads):
        assert (g - w).abs().max() <= 1e-5


def _compiled_generate_graphs(model, ids, kw) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Two compiled static-cache generates from a fresh dynamo: both outputs, graphs after the first."""
    config = CompileConfig(fullgraph=True, backend="eager", mode=None)
    config._compile_all_devices = True  # compile on the CPU too
    torch._dynamo.reset()
    counters.clear()
    first = model.generate(ids, compile_config=config, **kw)
    graphs = _graphs()
    second = model.generate(ids, compile_config=config, **kw)
    return first, second, graphs


@pytest.mark.parametrize("family,pos_enc", [("llama", p) for p in POS_ENCS] + [("gemma2", "wavelet"),
                                                                                ("gemma3", "alibi")])
def test_static_cache_generate_compiles_like_the_stock_model(family, pos_enc):
    # generate's own compile of the decode step: the graphs of the stock model (Llama 1; Gemma 2 and 3 have a
    # second, transformers' own, for the sliding layers' cache filling up), reused by every later step and
    # by a second generate
    model = tiny(family)
    ids, mask, _ = left_pad(ids_for(2, 8), [0, 3])
    kw = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, cache_implementation="static")
    with torch.no_grad():
        _, _, stock_graphs = _compiled_generate_graphs(model, ids, kw)
        with wavepe.patch(model, pos_enc):
            want = model.generate(ids, **kw)
            first, second, graphs = _compiled_generate_graphs(model, ids, kw)
    assert stock_graphs == (1 if family == "llama" else 2)
    assert _breaks() == 0 and graphs == stock_graphs and _graphs() == graphs, dict(counters["stats"])
    assert torch.equal(first, want) and torch.equal(second, want)


@pytest.mark.parametrize("pos_enc", ["wavelet", "rope"])
def test_dynamic_shapes_decode_does_not_recompile_per_step(pos_enc):
    # a dynamic cache grows by one key per step: symbolic lengths, the fused kernel's offset N - M symbolic
    model = tiny()
    ids = ids_for(1, 8)
    with torch.no_grad(), wavepe.patch(model, pos_enc):
        compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=True)
        out = compiled(ids, use_cache=True)
        want = model(ids, use_cache=True)
        tokens = [out.logits[:, -1:].argmax(-1)]
        cache, ref_cache = out.past_key_values, want.past_key_values
        for _ in range(6):
            out = compiled(tokens[-1], past_key_values=cache, use_cache=True)
            ref = model(tokens[-1], past_key_values=ref_cache, use_cache=True)
            assert (out.logits - ref.logits).abs().max() <= 1e-5
            cache, ref_cache = out.past_key_values, ref.past_key_values
            tokens.append(out.logits[:, -1:].argmax(-1))
    assert _breaks() == 0 and _graphs() == 2  # the prefill (M = 8) and the decode step (M = 1, specialised)
