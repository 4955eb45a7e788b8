"""Stock fairseq's command-line tools with the plugin: preprocess, train, reload, eval-lm at 2x the length.

Runs the console scripts of the environment running the tests (the Python 3.10
environment of ``scripts/setup_fairseq_env.sh``; ``make test-fairseq``).  The
text is the Python standard library's sources (present on every machine).
Each configuration trains ~30 updates of a tiny model on the CPU, checks the
loss falls and the options are in the checkpoint, then evaluates the
checkpoint with ``fairseq-eval-lm`` at the training length and at twice it,
with and without ``--context-window``, and checks every validation token was
scored (fairseq silently drops blocks longer than the model's max_positions).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

import pytest

from .conftest import RESULTS, require_fairseq

require_fairseq()
import torch  # noqa: E402

BIN = os.path.dirname(sys.executable)
TRAIN_LEN = 64
UPDATES = 30

# The models are tiny: one OpenMP thread is as fast as several, and on a loaded
# machine spinning OpenMP threads make PyTorch orders of magnitude slower.
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONWARNINGS": "ignore"}

TINY = ["--decoder-layers", "2", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim", "128",
        "--decoder-attention-heads", "4"]
CONFIGS = {
    # name: (training options, expected option values in the checkpoint's cfg.model)
    "wavelet": (["--arch", "wavepe_lm", "--pos-enc", "wavelet", "--wavelet-grid", "4x4", *TINY],
                {"pos_enc": "wavelet", "wavelet_grid": "4x4", "wavelet_family": "ricker"}),
    "rope": (["--arch", "wavepe_lm", "--pos-enc", "rope", "--rope-theta", str(TRAIN_LEN), *TINY],
             {"pos_enc": "rope", "rope_theta": float(TRAIN_LEN), "rope_inference_theta": None}),
    # the WikiText-103 architecture shrunk to test size: adaptive input/softmax, attention dropout 0.1
    "alibi_wiki103": (["--arch", "wavepe_lm_wiki103", "--pos-enc", "alibi", *TINY, "--decoder-input-dim", "64",
                       "--decoder-output-dim", "64", "--adaptive-input-cutoff", "500,1000",
                       "--adaptive-softmax-cutoff", "500,1000", "--criterion", "adaptive_loss",
                       "--ddp-backend", "legacy_ddp"],
                      {"pos_enc": "alibi", "_name": "wavepe_lm_wiki103", "attention_dropout": 0.1}),
}


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    assert os.path.exists(path), f"{path} is missing: is this the environment of scripts/setup_fairseq_env.sh?"
    return path


def run(*argv: str, expect_ok: bool = True) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=ENV, timeout=900)
    proc.seconds = time.perf_counter() - t0  # type: ignore[attr-defined]
    if expect_ok and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise AssertionError(f"{os.path.basename(argv[0])} failed ({proc.returncode}):\n{tail}")
    return proc


@pytest.fixture(scope="module")
def user_dir() -> str:
    out = run(tool("wavepe"), "fairseq-user-dir").stdout.strip()
    assert os.path.isdir(out) and out.endswith("wavepe_fairseq")
    return out


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    from wavepe.integrations.fairseq.corpus import write_stdlib_corpus

    root = tmp_path_factory.mktemp("fairseq")
    text = write_stdlib_corpus(str(root / "text"), train_lines=20000, valid_lines=1500)
    proc = run(tool("fairseq-preprocess"), "--only-source", "--trainpref", text["train"], "--validpref",
               text["valid"], "--destdir", str(root / "data-bin"), "--nwordssrc", "2000", "--workers", "1")
    m = re.search(r"valid\.txt: (\d+) sents, (\d+) tokens", proc.stdout + proc.stderr)
    assert m, proc.stdout + proc.stderr
    RESULTS.append(f"fairseq-preprocess: {proc.seconds:.0f} s; valid: {int(m.group(2))} tokens")
    return root / "data-bin", int(m.group(2))


def train(data, user_dir: str, save_dir, options: list[str]) -> subprocess.CompletedProcess:
    return run(tool("fairseq-train"), str(data), "--task", "language_modeling", "--user-dir", user_dir,
               "--tokens-per-sample", str(TRAIN_LEN), "--batch-size", "8", "--optimizer", "adam", "--lr", "0.002",
               "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-update", str(UPDATES),
               "--log-format", "json", "--log-interval", "5", "--save-dir", str(save_dir),
               "--no-epoch-checkpoints", "--max-valid-steps", "5", "--cpu", "--num-workers", "0", "--seed", "1",
               *options)


def eval_lm(data, user_dir: str, checkpoint, tokens_per_sample: int, *extra: str) -> tuple[float, float, int, float]:
    proc = run(tool("fairseq-eval-lm"), str(data), "--path", str(checkpoint), "--user-dir", user_dir,
               "--gen-subset", "valid", "--tokens-per-sample", str(tokens_per_sample), "--batch-size", "4",
               "--cpu", "--num-workers", "0", *extra)
    log = proc.stdout + proc.stderr
    loss = re.search(r"Loss \(base 2\): ([\d.naif-]+), Perplexity: ([\d.naif-]+)", log)
    count = re.search(r"Evaluated ([\d,]+) tokens", log)
    assert loss and count, log[-3000:]
    return float(loss.group(1)), float(loss.group(2)), int(count.group(1).replace(",", "")), proc.seconds



@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_reload_and_eval_longer(name, data_bin, user_dir, tmp_path):
    data, valid_tokens = data_bin
    options, saved = CONFIGS[name]
    proc = train(data, user_dir, tmp_path / "ckpt", options)
    log = proc.stdout + proc.stderr
    inner = [json.loads(m) for m in re.findall(r"\| train_inner \| (\{.*\})", log)]
    losses = [float(rec["loss"]) for rec in inner]
    assert [int(rec["num_updates"]) for rec in inner] == list(range(5, UPDATES + 1, 5)), log[-3000:]
    assert losses[-1] < losses[0] - 1.0, f"{name}: the training loss did not fall: {losses}"
    valid = re.search(r"\| valid \| (\{.*\})", log)
    assert valid and math.isfinite(float(json.loads(valid.group(1))["valid_loss"]))

    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    state = torch.load(checkpoint, map_location="cpu")  # as fairseq loads it (weights_only in torch >= 2.6)
    model_cfg = state["cfg"]["model"]
    for key, value in saved.items():
        assert model_cfg[key] == value, (key, model_cfg[key])

    runs = {"1x": eval_lm(data, user_dir, checkpoint, TRAIN_LEN),
            "2x": eval_lm(data, user_dir, checkpoint, 2 * TRAIN_LEN),
            "2x ctx": eval_lm(data, user_dir, checkpoint, 2 * TRAIN_LEN, "--context-window", str(TRAIN_LEN))}
    if name == "rope":  # a larger base only at inference (the base-expansion recipe)
        runs["2x theta=4L"] = eval_lm(data, user_dir, checkpoint, 2 * TRAIN_LEN, "--model-overrides",
                                      f"{{'rope_inference_theta': {4.0 * TRAIN_LEN}}}")
    for label, (loss, ppl, count, _) in runs.items():
        assert math.isfinite(loss) and math.isfinite(ppl), (label, loss, ppl)
        assert count == valid_tokens, f"{label}: scored {count} of {valid_tokens} validation tokens"
    if name == "rope":
        assert runs["2x theta=4L"][1] != runs["2x"][1]  # the override reached the attention

    RESULTS.append(f"{name}: train {UPDATES} updates in {proc.seconds:.0f} s, loss (base 2) "
                   + " -> ".join(f"{x:.2f}" for x in losses)
                   + f"; valid {float(json.loads(valid.group(1))['valid_loss']):.2f}")
    RESULTS.append(f"{name}: eval-lm ppl (train length {TRAIN_LEN}): "
                   + ", ".join(f"{label} {ppl:.2f}" for label, (_, ppl, _, _) in runs.items())
                   + f"  [{valid_tokens} tokens each, {sum(r[3] for r in runs.values()):.0f} s]")


@pytest.mark.slow
def test_bad_option_fails_loudly_on_the_command_line(data_bin, user_dir, tmp_path):
    proc = run(tool("fairseq-train"), str(data_bin[0]), "--task", "language_modeling", "--user-dir", user_dir,
               "--arch", "wavepe_lm", "--pos-enc", "wavelet", "--rope-theta", "64", *TINY, "--max-update", "1", "--batch-size", "8",
               "--save-dir", str(tmp_path), "--cpu", expect_ok=False)
    assert proc.returncode != 0
    assert "ValueError: --rope-theta=64.0 only applies to --pos-enc rope, but --pos-enc is wavelet" in proc.stderr
