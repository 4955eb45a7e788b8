"""Passkey retrieval (wavepe.experiments.retrieval): the probe's geometry, scoring and interfaces.

A hand-written retriever with a known receptive field checks the grid cell by
cell; a Hugging Face Llama patched by wavepe checks that any causal LM works and
that the one-pass scoring is greedy decoding's (against ``model.generate``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from wavepe.experiments import PasskeyFormat, PasskeyMixture, haystack, passkey
from wavepe.experiments.retrieval import _pieces, build_example, byte_tokenizer, min_length, wilson_interval
from wavepe.experiments.train import TrainConfig, train_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FILLER = np.frombuffer(b"The quick brown fox jumps over the lazy dog 0123 times. " * 200, dtype=np.uint8)


class WindowRetriever(torch.nn.Module):
    """A causal 'LM' that reads the key exactly when it lies within ``window`` tokens.

    Logits at position p: if p is the question's marker or one of the answer tokens after
    it (offset o), and the needle's marker sits at most ``window`` tokens before the question's, the
    token at needle marker + 1 + o gets logit 10; otherwise logit 10 goes to '0' (a key-
    independent guess, right with probability 10^-digits).  Causal: position p reads ids[: p + 1].
    """

    def __init__(self, window: int, marker: int = ord("~")) -> None:
        super().__init__()
        self.window, self.marker = window, marker
        self.calls: list[tuple[int, int]] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.append(tuple(ids.shape))
        b, n = ids.shape
        logits = torch.zeros(b, n, 256)
        logits[:, :, ord("0")] = 10.0
        for r in range(b):
            marks = (ids[r] == self.marker).nonzero().flatten().tolist()
            if len(marks) < 2:
                continue
            needle, question = marks[0], marks[-1]
            if question - needle > self.window:
                continue
            for p in range(question, n):
                if needle + 1 + (p - question) < question:
                    logits[r, p] = 0.0
                    logits[r, p, ids[r, needle + 1 + (p - question)]] = 10.0
        return logits


def test_example_layout_and_depths():
    pieces = _pieces(PasskeyFormat(), byte_tokenizer)
    key = [ord(c) for c in "48213"]
    n = 60
    fill_len = n - min_length(5)
    assert min_length(5) == len(" ~. ") + len(" ~") + 10
    for depth, want_before in ((0.0, 0), (0.5, round(0.5 * fill_len)), (1.0, fill_len)):
        ex, key_pos = build_example(FILLER, key, depth, pieces, n)
        text = bytes(ex.tolist()).decode()
        assert len(ex) == n and text.endswith(" ~48213")
        assert text.startswith(FILLER[:want_before].tobytes().decode() + " ~48213. ")
        assert key_pos == want_before + 2 and text[key_pos: key_pos + 5] == "48213"
        # the filler is one contiguous piece, cut where the needle goes in
        assert text.replace(" ~48213. ", "", 1)[:-len(" ~48213")] == FILLER[:fill_len].tobytes().decode()
    with pytest.raises(ValueError, match="length 15 is too short for the passkey format: it needs at least 16"):
        build_example(FILLER, key, 0.5, pieces, 15)


@pytest.mark.parametrize("method", ["one_pass", "generate"])
def test_accuracy_grid_is_the_receptive_field_of_a_known_retriever(method):
    lengths, depths = [40, 80, 160], [0.0, 0.25, 0.5, 0.75, 1.0]
    model = WindowRetriever(window=70)
    res = passkey(model, FILLER, lengths, depths, trials=6, key_digits=4, method=method)
    assert res.correct.shape == (3, 5, 6) and res.digit_correct.shape == (3, 5, 6, 4)
    # the distance from the key to the question's marker, cell by cell
    for i, n in enumerate(lengths):
        fill = n - min_length(4)
        for j, d in enumerate(depths):
            key_pos = round(d * fill) + 2
            assert res.distance[i, j] == (n - 4 - 1) - key_pos
    reads = (res.distance + 1) <= 70  # the needle's marker sits one token before the key
    np.testing.assert_array_equal(res.accuracy, reads.astype(float))
    assert res.accuracy[0].all() and not res.accuracy[2, 0] and res.accuracy[2, -1]
    # every answer token is right where the retriever reads; only a key starting with 0 is guessed where it does not
    assert res.digit_correct[reads].all()
    assert res.chance == 1e-4


def test_one_pass_is_one_forward_per_batch_and_generate_one_per_token():
    one, gen = WindowRetriever(100), WindowRetriever(100)
    passkey(one, FILLER, [64], [0.0, 1.0], trials=5, key_digits=3, batch_tokens=64 * 5)
    passkey(gen, FILLER, [64], [0.0, 1.0], trials=5, key_digits=3, method="generate", batch_tokens=64 * 5)
    assert one.calls == [(5, 64)] * 2
    assert gen.calls == [(5, 64), (5, 61), (5, 62), (5, 63)] * 2


def test_trials_are_seeded_and_shared_across_depths():
    seen: list[torch.Tensor] = []

    def spy(ids: torch.Tensor) -> torch.Tensor:
        seen.append(ids.clone())
        return torch.zeros(*ids.shape, 256)

    passkey(spy, FILLER, [50], [0.0, 1.0], trials=4, key_digits=5, seed=3)
    a, b = seen
    assert torch.equal(a[:, -5:], b[:, -5:])           # the same keys at both depths
    assert len({bytes(r[-5:].tolist()) for r in a}) == 4  # and different keys across trials
    seen.clear()
    passkey(spy, FILLER, [50], [0.0, 1.0], trials=4, key_digits=5, seed=3)
    assert torch.equal(seen[0], a)
    seen.clear()
    passkey(spy, FILLER, [50], [0.0], trials=4, key_digits=5, seed=4)
    assert not torch.equal(seen[0], a)


def test_wilson_interval():
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and 0.83 < lo < 0.84
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0.16 < hi < 0.17


# ---- training rows ------------------------------------------------------------------------------------------------

def test_mixture_rows_weights_and_determinism():
    tokens = np.frombuffer(b"abcdefghij klmnop\n" * 500, dtype=np.uint8)
    mix = PasskeyMixture(tokens, 48, 0.5, key_digits=3, answer_weight=7.0)
    batch, weights = mix(torch.Generator().manual_seed(1), 64)
    again, _ = mix(torch.Generator().manual_seed(1), 64)
    assert torch.equal(batch, again) and batch.shape == (64, 49) and weights.shape == (64, 48)
    rows = [bytes(r.tolist()).decode() for r in batch]
    is_pk = np.array(["~" in r for r in rows])
    assert 16 < is_pk.sum() < 48
    for r, text, w in zip(batch, rows, weights):
        if "~" in text:
            needle_key = text.split("~")[1][:3]
            assert text.endswith(" ~" + needle_key) and needle_key.isdigit() and text.count("~") == 2
            assert torch.equal(w[-3:], torch.full((3,), 7.0)) and (w[:-3] == 1).all()
        else:
            assert (w == 1).all()
    full, _ = PasskeyMixture(tokens, 48, 1.0, key_digits=3)(torch.Generator().manual_seed(2), 8)
    assert all(bytes(r.tolist()).count(b"~") == 2 for r in full)


def test_haystack_filler_keeps_digits_and_markers_out_of_passkey_rows():
    tokens = np.frombuffer(b"x = 10 ~ 20; y = [3, 4]  # text with digits\n" * 200, dtype=np.uint8)
    clean = haystack(tokens)
    assert not np.isin(clean, np.frombuffer(b"0123456789~", dtype=np.uint8)).any()
    assert bytes(clean[:20].tolist()) == b"x =   ; y = [, ]  # "
    mix = PasskeyMixture(tokens, 40, 0.5, key_digits=3, filler=clean)
    batch, _ = mix(torch.Generator().manual_seed(0), 32)
    rows = [bytes(r.tolist()) for r in batch]
    pk = [r for r in rows if r.count(b"~") == 2]
    plain = [r for r in rows if r not in pk]
    assert pk and plain
    for r in pk:  # the key's two copies are the only digits of a passkey row
        assert sum(ch in b"0123456789" for ch in r) == 6
    assert any(ch in b"0123456789" for r in plain for ch in r)  # plain rows are the corpus as it is


def test_train_lm_uses_the_mixture_and_its_weights():
    from wavepe.experiments import LMConfig, TinyLM

    tokens = np.frombuffer(b"some text to train on, over and over.\n" * 300, dtype=np.uint8)
    cfg = TrainConfig(steps=2, batch_size=4, train_len=32, warmup=1)
    torch.manual_seed(0)
    model = TinyLM(LMConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, head_dim=16,
                            intermediate_size=64, wavelet_n_scales=4))
    hist = train_lm(model, tokens, cfg, batches=PasskeyMixture(tokens, 32, 1.0, key_digits=2))
    assert len(hist["loss"]) == 2 and np.isfinite(hist["loss"]).all()
    calls = []

    def stop(steps_done, m):
        calls.append((steps_done, m.training))
        return steps_done == 2

    hist = train_lm(model, tokens, dataclasses.replace(cfg, steps=5), stop=stop)
    assert hist["steps"] == 2 and len(hist["loss"]) == 2 and calls == [(1, False), (2, False)]
    with pytest.raises(ValueError, match=r"batches returned shape \(4, 10\); expected \(4, train_len \+ 1 = 33\)"):
        train_lm(model, tokens, cfg, batches=lambda g, b: torch.zeros(b, 10, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"weights of shape \(4, 33\)"):
        train_lm(model, tokens, cfg, batches=lambda g, b: (torch.zeros(b, 33, dtype=torch.int64), torch.ones(b, 33)))


# ---- any causal LM: a Hugging Face Llama patched by wavepe -------------------------------------------------------

def _tiny_llama(vocab: int = 256, seed: int = 0):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   max_position_embeddings=64)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # larger weights than the default init: peaked, input-dependent predictions
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("pos_enc", ["wavelet", "alibi"])
def test_on_a_patched_hugging_face_llama_one_pass_is_greedy_decoding(pos_enc):
    import wavepe

    model = _tiny_llama()
    with wavepe.patch_llama(model, pos_enc):
        one = passkey(model, FILLER, [32, 96], [0.0, 1.0], trials=3, key_digits=2)
        gen = passkey(model, FILLER, [32, 96], [0.0, 1.0], trials=3, key_digits=2, method="generate")
        np.testing.assert_array_equal(one.correct, gen.correct)
        np.testing.assert_array_equal(one.digit_correct, gen.digit_correct)
        assert one.accuracy.shape == (2, 2) and one.chance == 0.01
        # the answer is read where Hugging Face's own greedy generate writes it
        pieces = _pieces(PasskeyFormat(), byte_tokenizer)
        ex, _ = build_example(FILLER, [ord("4"), ord("7")], 0.5, pieces, 96)
        prompt = torch.from_numpy(ex[:-2])[None]
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=2, do_sample=False,
                             pad_token_id=0)[0, -2:]
        logits = model(torch.from_numpy(ex)[None]).logits[0]
        assert int(logits[93].argmax()) == int(out[0])
        if int(out[0]) == ord("4"):
            assert int(logits[94].argmax()) == int(out[1])


def test_small_vocabulary_through_a_tokenizer():
    chars = " ~.0123456789abc"

    def tok(text: str) -> list[int]:
        return [chars.index(c) for c in text]

    model = _tiny_llama(vocab=len(chars))
    filler = np.array(tok("abc cab bca " * 40))
    res = passkey(model, filler, [40], [0.0, 1.0], trials=2, key_digits=3, tokenizer=tok)
    assert res.correct.shape == (1, 2, 2)
    with pytest.raises(ValueError, match="token id 126 but the model's vocabulary has 16 entries"):
        passkey(model, filler, [40], [0.5], trials=1, key_digits=3)


def test_bad_arguments_are_named():
    model = WindowRetriever(10)
    with pytest.raises(ValueError, match=r"depths must lie in \[0, 1\].*got 1.5"):
        passkey(model, FILLER, [64], [0.0, 1.5])
    with pytest.raises(ValueError, match="length 10 is too short for the passkey format: it needs at least 16"):
        passkey(model, FILLER, [10])
    with pytest.raises(ValueError, match="the filler stream has 30 tokens; length 100 needs at least 84"):
        passkey(model, FILLER[:30], [100])
    with pytest.raises(ValueError, match="method must be one of 'one_pass', 'generate'; got 'beam'"):
        passkey(model, FILLER, [64], method="beam")
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        passkey(model, FILLER, [64], trials=0)
    with pytest.raises(TypeError, match="lengths must be a sequence of context lengths"):
        passkey(model, FILLER, 64)
    with pytest.raises(ValueError, match="containing '{key}' exactly once"):
        PasskeyFormat(needle="no key here")
    with pytest.raises(ValueError, match="model must return logits"):
        passkey(lambda ids: torch.zeros(3), FILLER, [64])
    with pytest.raises(ValueError, match="passkey_fraction must be in"):
        PasskeyMixture(FILLER, 64, 1.5)
    with pytest.raises(ValueError, match="train_len 12 is too short for passkey examples"):
        PasskeyMixture(FILLER, 12, 0.5)
