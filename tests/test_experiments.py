"""wavepe.experiments: corpora, model, training, evaluation, the extrapolation runner."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wavepe.experiments import corpus as corpus_mod
from wavepe.experiments.evaluate import evaluate_lengths, perplexity, window_plan
from wavepe.experiments.extrapolate import (ExtrapolationConfig, evaluation_stream, parse_encoding,
                                            run_extrapolation)
from wavepe.experiments.model import LMConfig, TinyLM, load_model, save_model
from wavepe.experiments.train import TrainConfig, train_lm
from wavepe.nn import PositionalAttention

ENCS = ("wavelet", "rope", "alibi", "nope")


pytestmark = [pytest.mark.installation, pytest.mark.usefixtures("one_torch_thread")]  # (pyproject.toml)


def tiny_cfg(pos_enc: str = "wavelet", **kw) -> LMConfig:
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, head_dim=16, intermediate_size=64,
                pos_enc=pos_enc, rope_theta=100.0, wavelet_n_scales=4)
    base.update(kw)
    return LMConfig(**base)


def png_ok(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000


# ---------------------------------------------------------------------------
# corpora


def _fake_stdlib(root) -> None:
    for rel in ["a.py", "pkg/b.py", "pkg/c.py", "test/skip.py", "site-packages/x/y.py", "pkg/tests/t.py",
                "notes.txt"] + [f"m{i}.py" for i in range(60)]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"# {rel}\nx = {len(rel)}\n".encode())


def test_stdlib_files_skip_tests_and_site_packages(tmp_path):
    _fake_stdlib(tmp_path)
    rels = [p.relative_to(tmp_path).as_posix() for p in corpus_mod.stdlib_files(tmp_path)]
    assert rels == sorted(rels)
    assert "a.py" in rels and "pkg/b.py" in rels
    assert not any(r.startswith(("test/", "site-packages/")) or "/tests/" in r or r.endswith(".txt") for r in rels)


def test_stdlib_corpus_split_is_deterministic_and_disjoint(tmp_path):
    _fake_stdlib(tmp_path)
    c1, c2 = corpus_mod.stdlib_corpus(tmp_path), corpus_mod.stdlib_corpus(tmp_path)
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(c1.split(s), c2.split(s))
        assert c1.split(s).dtype == np.uint8
    # each file lands in exactly the split its path hashes to
    texts = {s: c1.split(s).tobytes() for s in ("train", "valid", "test")}
    for p in corpus_mod.stdlib_files(tmp_path):
        rel = p.relative_to(tmp_path).as_posix()
        homes = [s for s, t in texts.items() if p.read_bytes() in t]
        assert homes == [corpus_mod.stdlib_split_of(rel)]
    assert sum(c1.info["files"].values()) == len(corpus_mod.stdlib_files(tmp_path))


def test_stdlib_split_proportions_on_the_real_library():
    files = corpus_mod.stdlib_files()
    assert len(files) > 100
    base = corpus_mod.sysconfig.get_paths()["stdlib"]
    splits = [corpus_mod.stdlib_split_of(os.path.relpath(p, base).replace(os.sep, "/")) for p in files]
    frac = {s: splits.count(s) / len(splits) for s in ("train", "valid", "test")}
    assert 0.8 < frac["train"] < 0.97 and 0.01 < frac["valid"] < 0.12 and 0.01 < frac["test"] < 0.12


def test_text_dir_corpus(tmp_path):
    for s in ("train", "valid", "test"):
        (tmp_path / f"{s}.txt").write_bytes(f"{s} text\n".encode() * 3)
    c = corpus_mod.text_dir_corpus(tmp_path)
    assert c.train.tobytes() == b"train text\n" * 3
    assert corpus_mod.load_corpus(tmp_path).test.tobytes() == b"test text\n" * 3
    os.remove(tmp_path / "valid.txt")
    with pytest.raises(FileNotFoundError, match="valid.txt"):
        corpus_mod.text_dir_corpus(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        corpus_mod.text_dir_corpus(tmp_path / "nope")


def test_split_text_file_contiguous_blocks_at_line_ends(tmp_path):
    lines = [f"line {i:04d} " + "x" * (i % 7) + "\n" for i in range(1000)]
    path = tmp_path / "all.txt"
    path.write_text("".join(lines))
    c = corpus_mod.split_text_file(path)
    joined = c.train.tobytes() + c.valid.tobytes() + c.test.tobytes()
    assert joined == path.read_bytes()
    for s in ("train", "valid"):
        assert c.split(s).tobytes().endswith(b"\n")
    total = len(joined)
    assert abs(c.train.size / total - 0.8) < 0.01 and abs(c.valid.size / total - 0.1) < 0.01
    assert corpus_mod.load_corpus(path).valid.tobytes() == c.valid.tobytes()
    with pytest.raises(ValueError, match="fractions"):
        corpus_mod.split_text_file(path, (0.5, 0.5))
    (tmp_path / "tiny.txt").write_text("ab")
    with pytest.raises(ValueError, match="too small"):
        corpus_mod.split_text_file(tmp_path / "tiny.txt")
    with pytest.raises(ValueError, match="split"):
        c.split("dev")


# ---------------------------------------------------------------------------
# evaluation


@settings(max_examples=150, deadline=None)
@given(n=st.integers(2, 400), length=st.integers(1, 64), frac=st.integers(1, 8), budget=st.integers(1, 500))
def test_window_plan_scores_each_target_once_with_enough_context(n, length, frac, budget):
    if n < length + 1:
        return
    stride = max(1, length * frac // 8)
    for mode in ("nonoverlap", "sliding"):
        plan = window_plan(n, length, mode, stride, budget)
        assert plan
        targets = []
        for start, first in plan:
            assert start + length + 1 <= n
            for pos in range(first, length):
                targets.append(start + pos + 1)
                if mode == "sliding" and start > 0:
                    assert pos >= length - stride  # context of at least length - stride tokens
        assert len(targets) == len(set(targets))
        assert targets == list(range(1, len(targets) + 1))  # the first targets of the stream, in order
        if mode == "nonoverlap":
            assert len(targets) == length * min(max(1, budget // length), (n - 1) // length)


class BigramModel(torch.nn.Module):
    """logits depend on the current token only: the NLL of each target is context-free."""

    def __init__(self, vocab: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g, dtype=torch.float64))

    def forward(self, ids):
        return self.table[ids]


def _bigram_nll(model: BigramModel, stream: np.ndarray, targets: range) -> float:
    logp = torch.log_softmax(model.table.detach(), -1).numpy()
    return float(np.mean([-logp[stream[t - 1], stream[t]] for t in targets]))


@pytest.mark.parametrize("mode", ["nonoverlap", "sliding"])
@pytest.mark.parametrize("length", [1, 7, 32])
def test_perplexity_against_direct_computation(mode, length):
    rng = np.random.default_rng(1)
    stream = rng.integers(0, 16, size=500)
    model = BigramModel()
    res = perplexity(model, stream, length, mode=mode, max_tokens=200, batch_tokens=40)
    expected = _bigram_nll(model, stream, range(1, res.tokens + 1))
    assert res.nll == pytest.approx(expected, rel=1e-12)
    assert res.perplexity == pytest.approx(math.exp(expected), rel=1e-12)
    assert res.tokens >= min(200, 500 - length - 1) - length


def test_perplexity_uniform_model_and_hf_style_output():
    class Uniform(torch.nn.Module):
        def forward(self, ids):
            return type("Out", (), {"logits": torch.zeros(*ids.shape, 50)})()

    r = perplexity(Uniform(), torch.arange(300) % 50, 20, max_tokens=100)
    assert r.perplexity == pytest.approx(50.0, rel=1e-6)  # float32 log-softmax
    assert r.nll_by_position.shape == (20,)


def test_perplexity_bad_arguments():
    model = BigramModel()
    stream = np.arange(100) % 16
    with pytest.raises(ValueError, match="length=200"):
        perplexity(model, stream, 200)
    with pytest.raises(ValueError, match="mode"):
        perplexity(model, stream, 10, mode="strided")
    with pytest.raises(ValueError, match="stride"):
        perplexity(model, stream, 10, mode="sliding", stride=11)
    with pytest.raises(ValueError, match="1-D"):
        perplexity(model, stream.reshape(10, 10), 5)
    with pytest.raises(TypeError, match="integer"):
        perplexity(model, stream.astype(np.float32), 5)
    with pytest.raises(ValueError, match="logits"):
        perplexity(lambda ids: ids.float(), stream, 5)


# ---------------------------------------------------------------------------
# model


@pytest.mark.parametrize("pos_enc", ENCS)
def test_tinylm_is_causal(pos_enc):
    torch.manual_seed(0)
    model = TinyLM(tiny_cfg(pos_enc)).eval()
    ids = torch.randint(0, 256, (2, 40))
    changed = ids.clone()
    changed[:, 25:] = torch.randint(0, 256, (2, 15))
    a, b = model(ids), model(changed)
    assert a.shape == (2, 40, 256)
    torch.testing.assert_close(a[:, :25], b[:, :25])
    assert not torch.allclose(a[:, 25:], b[:, 25:])


@pytest.mark.parametrize("pos_enc", ENCS)
def test_tinylm_depends_on_relative_positions_only(pos_enc):
    # every encoding here is relative (or none): shifting all positions changes nothing
    torch.manual_seed(0)
    model = TinyLM(tiny_cfg(pos_enc)).eval()
    ids = torch.randint(0, 256, (1, 30))
    torch.testing.assert_close(model(ids, position_offset=0), model(ids, position_offset=77), atol=2e-5, rtol=1e-4)


def test_tinylm_variants_share_initial_weights():
    states = []
    for pos_enc in ENCS:
        torch.manual_seed(3)
        states.append(TinyLM(tiny_cfg(pos_enc)).state_dict())
    for s in states[1:]:
        assert s.keys() == states[0].keys()
        for k in s:
            torch.testing.assert_close(s[k], states[0][k])


@pytest.mark.parametrize("pos_enc", ENCS)
def test_attention_probs_reproduce_forward(pos_enc):
    torch.manual_seed(0)
    attn = PositionalAttention(32, 2, pos_enc, head_dim=16,
                               wavelet_config=tiny_cfg().wavelet_config() if pos_enc == "wavelet" else None)
    x = torch.randn(2, 24, 32)
    probs = attn.attention_probs(x)
    assert probs.shape == (2, 2, 24, 24)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 24))
    assert torch.all(probs.triu(1) == 0)
    _, _, v = attn._qkv(x, 0)
    manual = attn.o_proj((probs @ v).transpose(1, 2).reshape(2, 24, 32))
    torch.testing.assert_close(attn(x), manual, atol=1e-5, rtol=1e-4)


def test_positional_attention_bad_arguments():
    with pytest.raises(ValueError, match="pos_enc"):
        PositionalAttention(32, 2, "sinusoid")
    with pytest.raises(ValueError, match="divisible"):
        PositionalAttention(30, 4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        PositionalAttention(32, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="head_dim"):
        PositionalAttention(32, 2, "wavelet", wavelet_config=tiny_cfg().wavelet_config().grid(8))
    with pytest.raises(ValueError, match="hidden_size=32"):
        PositionalAttention(32, 2)(torch.zeros(1, 4, 16))
    with pytest.raises(ValueError, match="ids"):
        TinyLM(tiny_cfg())(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="pos_enc"):
        tiny_cfg("learned")
    with pytest.raises(ValueError, match="RoPE"):
        TinyLM(tiny_cfg("alibi")).set_rope(tiny_cfg("rope").rope_config())


def test_save_and_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = TinyLM(tiny_cfg("rope")).eval()
    path = str(tmp_path / "m.pt")
    save_model(model, path)
    loaded = load_model(path)
    assert loaded.config == model.config
    ids = torch.randint(0, 256, (1, 12))
    torch.testing.assert_close(loaded(ids), model(ids))
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a wavepe TinyLM checkpoint"):
        load_model(str(tmp_path / "other.pt"))


# ---------------------------------------------------------------------------
# training


def test_train_lm_learns_and_is_deterministic():
    stream = np.frombuffer(b"abcdefgh" * 400, dtype=np.uint8)
    cfg = TrainConfig(steps=40, batch_size=4, train_len=16, warmup=5, lr=3e-3)
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyLM(tiny_cfg("rope"))
        losses.append(train_lm(model, stream, cfg)["loss"])
    assert losses[0] == losses[1]
    assert np.mean(losses[0][-5:]) < 0.5 * losses[0][0]
    assert not model.training
    with pytest.raises(ValueError, match="train_len"):
        train_lm(model, stream[:10], cfg)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_train_lm_mixed_precision_learns_with_float32_parameters(dtype):
    """Autocast training (fp16 through a GradScaler) learns what float32 learns; parameters and the
    optimizer state stay float32."""
    stream = np.frombuffer(b"abcdefgh" * 400, dtype=np.uint8)
    cfg = TrainConfig(steps=40, batch_size=4, train_len=16, warmup=5, lr=3e-3)
    torch.manual_seed(0)
    model = TinyLM(tiny_cfg("wavelet"))
    losses = train_lm(model, stream, cfg, dtype=dtype)["loss"]
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-5:]) < 0.5 * losses[0]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="dtype must be one of float32, bf16, fp16, got 'float64'"):
        train_lm(model, stream, cfg, dtype="float64")


def test_train_config_schedule_and_validation():
    cfg = TrainConfig(steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1)
    assert cfg.lr_at(0) == pytest.approx(0.1) and cfg.lr_at(9) == pytest.approx(1.0)
    assert cfg.lr_at(99) == pytest.approx(0.1, abs=1e-3)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=-1.0)


# ---------------------------------------------------------------------------
# the runner


def test_parse_encoding():
    assert parse_encoding("rope-ltrain", 64).theta == 64.0
    assert parse_encoding("rope", 64).theta == 1e4
    assert parse_encoding("rope:5e5", 64).label == "RoPE θ=500000"
    assert parse_encoding("NoPE", 64).pos_enc == "nope"
    for bad, match in (("sinusoid", "unknown encoding"), ("rope:abc", "number"), ("rope:1", "> 1")):
        with pytest.raises(ValueError, match=match):
            parse_encoding(bad, 64)


def test_extrapolation_config_validation():
    with pytest.raises(ValueError, match="more than once"):
        ExtrapolationConfig(encodings=("rope", "rope"))
    with pytest.raises(ValueError, match="unknown encoding"):
        ExtrapolationConfig(encodings=("rope", "xyz"))
    with pytest.raises(ValueError, match="inference θ"):
        ExtrapolationConfig(infer_thetas=("big",))
    with pytest.raises(ValueError, match="factor"):
        ExtrapolationConfig(factors=(1, 0))


def test_evaluation_stream_spreads_chunks_over_the_split():
    tokens = np.arange(10000) % 251
    s = evaluation_stream(tokens, 1000, pieces=10)
    assert s.size == 1000
    chunks = s.reshape(10, 100)
    starts = [int(np.flatnonzero(tokens == c[0])[0]) for c in chunks[:1]]
    assert starts == [0]
    np.testing.assert_array_equal(chunks[-1], tokens[-100:])  # the last chunk ends the split
    for c in chunks:  # each chunk is contiguous text of the split
        assert np.all(np.diff(c) % 251 == 1)
    np.testing.assert_array_equal(evaluation_stream(tokens[:50], 100), tokens[:50])


def test_run_extrapolation_tiny(tmp_path):
    stream = np.frombuffer(("def f(x):\n    return x * 2\n\n" * 300).encode(), dtype=np.uint8)
    corpus = corpus_mod.Corpus("tiny", stream, stream[:2000], stream[:3000])
    cfg = ExtrapolationConfig(out=str(tmp_path / "run"), encodings=("wavelet", "rope-ltrain", "alibi"),
                              infer_thetas=("len", 1000.0), factors=(1, 2), model=tiny_cfg(),
                              train=TrainConfig(steps=4, batch_size=2, train_len=16, warmup=1),
                              eval_tokens=64, sliding_tokens=32)
    res = run_extrapolation(cfg, progress=False, corpus=corpus, log=lambda s: None)
    out = tmp_path / "run"
    for name in ("perplexity.png", "attention_2x.png", "loss_by_position.png"):
        assert png_ok(str(out / name)), name
    with open(out / "results.json", encoding="utf-8") as f:
        saved = json.load(f)
    labels = ["wavelet", "RoPE θ=16", "RoPE θ=16 → θ=L (inference)", "RoPE θ=16 → θ=1000 (inference)", "ALiBi"]
    assert list(saved["rows"]) == labels
    for label in labels:
        for mode in ("nonoverlap", "sliding"):
            assert set(saved["rows"][label][mode]) == {"16", "32"}
            assert all(math.isfinite(r["perplexity"]) for r in saved["rows"][label][mode].values())
    # θ = L at 1× is the training θ: the same numbers
    assert saved["rows"][labels[2]]["nonoverlap"]["16"]["perplexity"] == pytest.approx(
        saved["rows"][labels[1]]["nonoverlap"]["16"]["perplexity"], rel=1e-9)
    from wavepe.analysis import band_dimension

    assert saved["models"]["rope-ltrain"]["band"]["j_star"] == band_dimension(16.0, 16, 16)
    assert "| wavelet |" in (out / "results.md").read_text(encoding="utf-8")
    assert saved["machine"]["cpu_count"] >= 1 and saved["corpus"]["name"] == "tiny"
    model = load_model(saved["models"]["alibi"]["checkpoint"])
    assert model.config.pos_enc == "alibi"
    assert res["rows"].keys() == saved["rows"].keys()
    # the evaluation library reuses on a loaded model: same numbers
    stream = evaluation_stream(corpus.test, 64 + 2 * 32 + 1)
    again = evaluate_lengths(load_model(saved["models"]["wavelet"]["checkpoint"]), stream, [32],
                             modes=("nonoverlap",), max_tokens=64)
    assert again["nonoverlap"][32].perplexity == pytest.approx(
        saved["rows"]["wavelet"]["nonoverlap"]["32"]["perplexity"], rel=1e-6)


def test_run_extrapolation_rejects_short_corpus(tmp_path):
    stream = np.frombuffer(b"x" * 40, dtype=np.uint8)
    corpus = corpus_mod.Corpus("short", stream, stream, stream)
    cfg = ExtrapolationConfig(out=str(tmp_path), encodings=("nope",), factors=(1, 4), model=tiny_cfg(),
                              train=TrainConfig(steps=1, batch_size=1, train_len=16))
    with pytest.raises(ValueError, match="needs at least 65"):
        run_extrapolation(cfg, progress=False, corpus=corpus, log=lambda s: None)


def test_band_and_sweep_figures(tmp_path):
    from wavepe.experiments import plots

    rng = np.random.default_rng(0)
    few = plots.plot_band_heatmap(rng.random((2, 3, 20, 8)), tmp_path / "few.png", i_band=3.5, j_star=4,
                                  per_head=rng.integers(0, 8, (2, 3)), title="t")
    many = plots.plot_band_heatmap(rng.random((6, 2, 20, 8)), tmp_path / "many.png", i_band=3.5,
                                   per_head=rng.integers(0, 8, (6, 2)), max_panels=4)  # per layer, every 2nd
    sweep = plots.plot_p_rope_sweep({1.0: {16: 5.0, 32: 6.0}, 0.5: {16: 5.5, 32: 5.7}}, tmp_path / "s.png", 16)
    for path in (few, many, sweep):
        assert png_ok(path)
    with pytest.raises(ValueError, match="mean_norms"):
        plots.plot_band_heatmap(np.zeros((1, 1, 1, 2, 3)), tmp_path / "bad.png")
