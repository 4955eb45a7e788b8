"""The wavepe_lm model built the way fairseq-train builds it: parse the command line, set up the task, build."""

from __future__ import annotations

import pytest

from wavepe.integrations.fairseq import user_dir

from .conftest import require_fairseq

require_fairseq()
import torch  # noqa: E402
from fairseq import options, tasks  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.modules import SinusoidalPositionalEmbedding  # noqa: E402

from wavepe.integrations.fairseq.attention import WavepeSelfAttention  # noqa: E402
from wavepe.integrations.fairseq.model import UNBOUNDED_POSITIONS, WavepeDecoder  # noqa: E402

SMALL = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
         "--decoder-attention-heads", "2", "--tokens-per-sample", "16", "--dropout", "0"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dict")
    (d / "dict.txt").write_text("".join(f"w{i} {100 - i}\n" for i in range(40)))
    return d


def parse(data_dir, *argv, arch="wavepe_lm"):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [str(data_dir), "--task", "language_modeling", "--user-dir",
                                                user_dir(), "--arch", arch, "--cpu", *argv])


def build(data_dir, *argv, arch="wavepe_lm"):
    """Build from the parsed Namespace (fairseq fills the dataclass defaults); the hydra
    config path of fairseq-train is tested once below, it costs seconds per call."""
    args = parse(data_dir, *argv, arch=arch)
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task.build_model(args).double().eval(), task


POS_ENC_ARGS = {
    "wavelet": ["--pos-enc", "wavelet"],
    "wavelet_grid": ["--pos-enc", "wavelet", "--wavelet-grid", "2x8", "--wavelet-family", "morlet"],
    "rope": ["--pos-enc", "rope", "--rope-theta", "16", "--rope-inference-theta", "64", "--rope-fraction", "0.5"],
    "alibi": ["--pos-enc", "alibi"],
    "sinusoidal": ["--pos-enc", "sinusoidal"],
    "nope": ["--pos-enc", "nope"],
}


@pytest.mark.parametrize("name", sorted(POS_ENC_ARGS))
def test_build_and_incremental_decoding(data_dir, name):
    model, task = build(data_dir, *SMALL, *POS_ENC_ARGS[name])
    dec = model.decoder
    assert isinstance(dec, WavepeDecoder)
    assert all(isinstance(layer.self_attn, WavepeSelfAttention) for layer in dec.layers)
    assert dec.layers[0].self_attn.spec.pos_enc == POS_ENC_ARGS[name][1]
    if name == "sinusoidal":
        assert isinstance(dec.embed_positions, SinusoidalPositionalEmbedding)
        assert model.max_positions() == dec.embed_positions.max_positions
    else:
        assert dec.embed_positions is None
        assert model.max_positions() == UNBOUNDED_POSITIONS
    assert not any("embed_positions" in k for k, _ in model.named_parameters())

    # a longer sequence than --tokens-per-sample, scored at once and token by token
    tokens = torch.randint(4, len(task.dictionary), (2, 37))
    full, _ = model(tokens)
    state: dict = {}
    steps = [model.decoder(tokens[:, : t + 1], incremental_state=state)[0] for t in range(tokens.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)

    # fairseq's criterion path: a training step lowers nothing to NaN and reaches every parameter
    model.train()
    loss = model.get_normalized_probs(model(tokens), log_probs=True).mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["wavelet", "rope", "alibi", "sinusoidal"])
def test_beam_search_scores_equal_full_forward(data_dir, name):
    """fairseq's sequence generator (incremental cache, reordered across beams) against a full forward."""
    from fairseq.sequence_generator import SequenceGenerator

    model, task = build(data_dir, *SMALL, *POS_ENC_ARGS[name])
    dictionary = task.target_dictionary
    generator = SequenceGenerator([model], dictionary, beam_size=3, max_len_b=14, min_len=8)
    prefix = torch.randint(4, len(dictionary), (2, 5))
    sample = {"net_input": {"src_tokens": prefix, "src_lengths": torch.tensor([5, 5])}}
    hypos = task.inference_step(generator, [model], sample)
    bos = dictionary.eos()  # the language-modeling task conditions generation on eos as bos
    for row, beams in enumerate(hypos):
        assert len(beams) == 3
        assert all(torch.equal(h["tokens"][:5], prefix[row]) for h in beams)
        for hyp in beams:
            tokens = hyp["tokens"]
            inputs = torch.cat([torch.tensor([bos]), tokens[:-1]])[None]
            lprobs = model.get_normalized_probs(model(inputs), log_probs=True)[0]
            want = lprobs.gather(-1, tokens[:, None])[:, 0]
            # fairseq's log-softmax runs in float32 on both paths
            torch.testing.assert_close(hyp["positional_scores"].double(), want.double(), rtol=1e-6, atol=1e-6)


def test_options_live_in_the_model_config(data_dir):
    """fairseq-train's path: Namespace -> hydra config (saved in checkpoints) -> model."""
    args = parse(data_dir, *SMALL, *POS_ENC_ARGS["rope"])
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.model.pos_enc == "rope"
    assert (cfg.model.rope_theta, cfg.model.rope_inference_theta, cfg.model.rope_fraction) == (16.0, 64.0, 0.5)
    assert cfg.model.wavelet_grid is None and cfg.model.wavelet_family == "ricker"
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    spec = model.decoder.layers[1].self_attn.spec
    assert (spec.rope.theta, spec.rope_inference.theta, spec.rope.rotary_fraction) == (16.0, 64.0, 0.5)


def test_wiki103_architecture_shape(data_dir):
    args = parse(data_dir, arch="wavepe_lm_wiki103")
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads) == (16, 1024, 8)
    assert args.adaptive_input and args.tie_adaptive_weights and args.adaptive_softmax_cutoff == "20000,60000"
    assert args.decoder_normalize_before
    # shrunk to test size, it builds with adaptive input/softmax and the head dim 128 grid of the paper
    model, _ = build(data_dir, "--decoder-layers", "1", "--decoder-ffn-embed-dim", "8", "--adaptive-input-cutoff",
                     "10,20", "--adaptive-softmax-cutoff", "10,20", arch="wavepe_lm_wiki103")
    spec = model.decoder.layers[0].self_attn.spec
    assert spec.head_dim == 128 and spec.wavelet.scales.max() == 128.0 and spec.wavelet.shifts.max() == 15.0


@pytest.mark.parametrize("argv, match", [
    (["--pos-enc", "wavelet", "--rope-theta", "512"], r"--rope-theta=512.0 only applies to --pos-enc rope"),
    (["--pos-enc", "wavelet", "--wavelet-grid", "3x3"], r"3 scales x 3 shifts = 9 dimensions but the head dim .* 16"),
    (["--pos-enc", "rope", "--rope-fraction", "2"], r"--rope-fraction must be in \[0, 1\], got 2.0"),
    (["--pos-enc", "alibi", "--decoder-learned-pos"], r"--decoder-learned-pos conflicts with --pos-enc alibi"),
    (["--pos-enc", "sinusoidal", "--no-token-positional-embeddings"], r"conflicts with --pos-enc sinusoidal"),
    (["--pos-enc", "nope", "--decoder-attention-heads", "3"], r"--decoder-embed-dim=32 is not divisible by "
                                                              r"--decoder-attention-heads=3"),
])
def test_bad_options_fail_at_build(data_dir, argv, match):
    with pytest.raises(ValueError, match=match):
        build(data_dir, *SMALL, *argv)


def test_unknown_pos_enc_is_an_argparse_error(data_dir, capsys):
    with pytest.raises(SystemExit):
        parse(data_dir, *SMALL, "--pos-enc", "relative")
    assert "--pos-enc: invalid choice: 'relative'" in capsys.readouterr().err
