"""The ``wavepe`` command: help, smoke runs at tiny sizes, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import wavepe
from wavepe.cli import main

# a --quick run shrunk further so that the test takes seconds: the CLI's own wiring is what is tested
TINY = ["--steps", "3", "--train-len", "16", "--factors", "1", "2", "--eval-tokens", "64", "--sliding-tokens", "32",
        "--hidden", "32", "--head-dim", "16", "--wavelet-scales", "4", "--layers", "1", "--no-progress"]


# the passkey task at the same tiny size: 2-digit keys so that examples fit in 16 tokens
TINY_PASSKEY = ["--task", "passkey", "--steps", "3", "--train-len", "16", "--factors", "1", "2", "--hidden", "32",
                "--head-dim", "16", "--wavelet-scales", "4", "--layers", "1", "--key-digits", "2", "--trials", "3",
                "--depths", "0", "1", "--no-progress"]

pytestmark = [pytest.mark.installation, pytest.mark.usefixtures("one_torch_thread")]  # (pyproject.toml)


def png_ok(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


@pytest.mark.parametrize("argv", [[], ["info"], ["fairseq-user-dir"], ["extrapolate"], ["band"]])
def test_help_on_every_subcommand(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: wavepe")
    if argv == ["extrapolate"]:
        assert "--quick" in out and "--data" in out and "--train-len" in out
    if argv == ["band"]:
        assert "--hf-model" in out and "--sweep" in out


def test_python_dash_m_and_console_script():
    r = subprocess.run([sys.executable, "-m", "wavepe", "band", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "usage: wavepe band" in r.stdout
    script = Path(sys.executable).parent / "wavepe"
    if not script.exists():
        pytest.skip("console script not installed next to this interpreter")
    r = subprocess.run([str(script), "info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("wavepe ")


def test_info_says_where_the_ops_came_from(capsys):
    """`wavepe info` for real: the torch ops are available (the research CLI once imported them from
    the wrong package and always said "unavailable"), with their origin, target torch, ISA and CUDA."""
    import wavepe
    from wavepe.ops import _extension

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"wavepe {wavepe.__version__} (")
    assert f"cpu isa: {wavepe.cpu_isa()}  active: {wavepe.active_isa()}  amx tiles: {wavepe.tiles()}" in lines
    assert f"torch ops: {_extension.ORIGIN}" in lines, out
    assert "unavailable" not in out
    info = _extension.build_info()
    assert f"the ops target torch >= {info['torch_target']} (ABI-stable)" in out
    if info["cuda_runtime"]:
        assert f"cuda kernels: {info['cuda_archs']}" in out
    else:
        assert "cuda kernels: none in this build" in out


def test_info_says_what_of_the_build_the_gpu_runs():
    from wavepe.research.cli import _gpu_line

    built = "sm_80 sm_90 sm_100 sm_120 +PTX compute_100 compute_120"
    assert _gpu_line(built, "NVIDIA H200", (9, 0)) == "NVIDIA H200 (sm_90): runs sm_90"
    assert _gpu_line(built, "NVIDIA L4", (8, 9)) == "NVIDIA L4 (sm_89): runs sm_80"
    assert _gpu_line(built, "NVIDIA Thor", (11, 0)) == "NVIDIA Thor (sm_110): runs compute_100's PTX, compiled at the first op"
    assert _gpu_line("sm_80 sm_90 sm_100 sm_120 +PTX compute_120", "NVIDIA Thor", (11, 0)).endswith("runs none of these kernels")
    assert _gpu_line(built, "Tesla T4", (7, 5)) == "Tesla T4 (sm_75): runs none of these kernels"
    assert _gpu_line("sm_90 +PTX compute_90", "NVIDIA A100", (8, 0)) == "NVIDIA A100 (sm_80): runs none of these kernels"


def test_extrapolate_quick_smoke(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["extrapolate", "--quick", "--out", str(out), *TINY]) == 0
    text = capsys.readouterr().out
    assert "Non-overlapping windows" in text and "| wavelet |" in text and "| NoPE |" in text
    assert "RoPE θ=16 → θ=L (inference)" in text
    assert "measured band" in text
    for name in ("perplexity.png", "attention_2x.png", "loss_by_position.png"):
        assert png_ok(out / name), name
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["config"]["train"]["train_len"] == 16 and res["config"]["factors"] == [1, 2]
    assert res["corpus"]["name"] == "stdlib"
    assert sorted(os.listdir(out / "models")) == ["alibi.pt", "nope.pt", "rope-ltrain.pt", "rope.pt", "wavelet.pt"]
    assert len(res["rows"]["wavelet"]["nll_by_position"]) == 32
    # the figures redraw from the saved results alone
    for name in ("perplexity.png", "attention_2x.png", "loss_by_position.png"):
        os.remove(out / name)
    assert main(["extrapolate", "--replot", "--out", str(out)]) == 0
    for name in ("perplexity.png", "attention_2x.png", "loss_by_position.png"):
        assert png_ok(out / name), name


def test_extrapolate_passkey_quick_smoke(tmp_path, capsys):
    out = tmp_path / "pk"
    assert main(["extrapolate", "--quick", "--out", str(out), *TINY_PASSKEY]) == 0
    text = capsys.readouterr().out
    assert "Mean accuracy over depths" in text and "chance 1e-02" in text
    # 3 steps teach nothing: every row is flagged, with the steps it trained
    assert "| wavelet (not learned at 1×) | 3 |" in text and "| NoPE (not learned at 1×) | 3 |" in text
    assert "| RoPE θ=16 → θ=L (inference) (not learned at 1×) | 3 |" in text
    for name in ("passkey.png", "passkey_distance.png"):
        assert png_ok(out / name), name
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["task"] == "passkey" and res["lengths"] == [16, 32] and res["depths"] == [0.0, 1.0]
    assert res["trials"] == 3 and res["chance"] == 0.01 and res["key_digits"] == 2
    assert res["config"]["format"] == {"needle": " ~{key}. ", "question": " ~"}
    assert set(res["rows"]) == {"wavelet", "RoPE θ=10000", "RoPE θ=16", "RoPE θ=16 → θ=L (inference)", "ALiBi",
                                "NoPE"}
    for row in res["rows"].values():
        acc, hits = np.array(row["accuracy"]), np.array(row["correct"])
        assert acc.shape == hits.shape == (2, 2) and row["trials"] == 3
        np.testing.assert_allclose(acc, hits / 3)
        assert np.array(row["distance"]).shape == (2, 2) and np.array(row["digit_accuracy"]).shape == (2, 2)
        assert row["steps"] == 3 and row["learned"] is False
        assert row["distance"][0][1] == 5  # depth 1: key "ab", ". ", " ~": 5 tokens from "a" to the question's "~"
    assert sorted(os.listdir(out / "models")) == ["alibi.pt", "nope.pt", "rope-ltrain.pt", "rope.pt", "wavelet.pt"]
    assert (out / "results.md").read_text(encoding="utf-8").startswith("Passkey retrieval on the stdlib")
    for name in ("passkey.png", "passkey_distance.png"):
        os.remove(out / name)
    assert main(["extrapolate", "--task", "passkey", "--replot", "--out", str(out)]) == 0
    for name in ("passkey.png", "passkey_distance.png"):
        assert png_ok(out / name), name
    # a passkey run's results are refused by the perplexity replot, and the other way round, with the reason
    capsys.readouterr()
    assert main(["extrapolate", "--replot", "--out", str(out)]) == 2
    assert "is not from a perplexity run (task 'passkey'): replot it with --task passkey" in capsys.readouterr().err
    (out / "results.json").write_text(json.dumps({"config": {}}), encoding="utf-8")
    assert main(["extrapolate", "--task", "passkey", "--replot", "--out", str(out)]) == 2
    assert "is not from a passkey run" in capsys.readouterr().err


def test_band_prediction_only(tmp_path, capsys):
    assert main(["band", "--train-len", "128", "--head-dim", "32", "--theta", "10000", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "x* = 3.65721" in text
    assert "| 10000 | 6 |" in text and "| 128 (recommended: θ = L_train) | 12 |" in text
    rep = json.loads((tmp_path / "band.json").read_text(encoding="utf-8"))
    assert [p["j_star"] for p in rep["predicted"]] == [6, 12]
    assert rep["recommended_theta"] == 128.0


def test_band_on_a_wavepe_checkpoint_with_sweep(tmp_path, capsys):
    from wavepe.experiments.model import LMConfig, TinyLM, save_model

    torch.manual_seed(0)
    ckpt = tmp_path / "m.pt"
    save_model(TinyLM(LMConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, head_dim=16,
                               intermediate_size=64, pos_enc="rope", rope_theta=16.0)), str(ckpt),
               meta={"train_len": 16})
    out = tmp_path / "band"
    argv = ["band", "--model", str(ckpt), "--sweep", "--factors", "1", "2", "--fractions", "1",
            "0.5", "--max-tokens", "64", "--windows", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "measured band" in text and "p-RoPE sweep" in text and "| 0.5 |" in text
    assert "train length L = 16 (the checkpoint)" in text
    assert png_ok(out / "band_heatmap.png") and png_ok(out / "p_rope_sweep.png")
    rep = json.loads((out / "band.json").read_text(encoding="utf-8"))
    assert rep["model_theta"] == 16.0 and 0 <= rep["measured"]["i_band"] < 8
    assert set(rep["p_rope_sweep"]) == {"1.0", "0.5"}


def test_band_on_a_hugging_face_llama_directory(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   head_dim=16, intermediate_size=64, num_hidden_layers=2,
                                   max_position_embeddings=256)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "llama")
    out = tmp_path / "band"
    argv = ["band", "--hf-model", str(tmp_path / "llama"), "--tokenizer", "bytes", "--train-len", "16", "--length",
            "32", "--sweep", "--factors", "1", "--fractions", "1", "0", "--max-tokens", "32", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "predicted j* for the model's θ = 10000" in text
    assert png_ok(out / "band_heatmap.png")
    rep = json.loads((out / "band.json").read_text(encoding="utf-8"))
    assert len(rep["measured"]["per_head"]) == 2 and len(rep["measured"]["per_head"][0]) == 2
    # no tokenizer saved: auto must say so and point at --tokenizer bytes
    assert main(argv[:3] + argv[5:]) == 2
    assert "--tokenizer bytes" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["extrapolate", "--encodings", "foo"], "unknown encoding 'foo'"),
    (["extrapolate", "--encodings", ","], "comma-separated"),
    (["extrapolate", "--factors", "0"], "--factors must be >= 1, got 0"),
    (["extrapolate", "--train-len", "abc"], "--train-len must be an integer, got 'abc'"),
    (["extrapolate", "--data", "/nonexistent/wikitext"], "'/nonexistent/wikitext' does not exist"),
    (["extrapolate", "--infer-theta", "big"], "inference θ must be 'len' or a number > 1, got 'big'"),
    (["extrapolate", "--head-dim", "12"], "--head-dim 12 is not divisible by --wavelet-scales 8"),
    (["extrapolate", "--head-dim", "7", "--encodings", "rope"], "--head-dim must be even"),
    (["extrapolate", "--lr", "-1"], "lr must be > 0, got -1.0"),
    (["extrapolate", "--encodings", "rope,rope"], "more than once"),
    (["extrapolate", "--replot", "--out", "/nonexistent/run"], "--replot: '/nonexistent/run/results.json' does not"),
    (["extrapolate", "--task", "passkey", "--depths", "1.5"], "--depths must be in [0, 1]"),
    (["extrapolate", "--task", "passkey", "--depths", "deep"], "--depths must be numbers in [0, 1], got 'deep'"),
    (["extrapolate", "--task", "passkey", "--trials", "0"], "--trials must be >= 1, got 0"),
    (["extrapolate", "--task", "passkey", "--key-digits", "x"], "--key-digits must be an integer, got 'x'"),
    (["extrapolate", "--task", "passkey", "--passkey-fraction", "0"], "passkey_fraction must be in (0, 1], got 0.0"),
    (["extrapolate", "--task", "passkey", "--answer-weight", "-2"], "answer_weight must be > 0, got -2.0"),
    (["extrapolate", "--task", "passkey", "--eval-tokens", "100"], "--eval-tokens belongs to --task perplexity"),
    (["extrapolate", "--trials", "30"], "--trials belongs to --task passkey, not --task perplexity"),
    (["extrapolate", "--task", "passkey", "--check-every", "-1"], "check_every must be >= 0, got -1"),
    (["extrapolate", "--task", "passkey", "--stop-accuracy", "0"], "stop_accuracy must be in (0, 1], got 0.0"),
    (["extrapolate", "--task", "passkey", "--train-len", "8"], "train_len 8 is too short for passkey examples"),
    (["extrapolate", "--task", "retrieval"], "invalid choice: 'retrieval'"),
    (["extrapolate", "--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
    (["extrapolate", "--dtype", "bfloat16"], "argument --dtype: invalid choice: 'bfloat16'"),
    (["extrapolate", "--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
    (["extrapolate", "--task", "passkey", "--replot", "--out", "/nonexistent/run"],
     "--replot: '/nonexistent/run/results.json' does not exist"),
    (["band", "--theta", "0.5"], "θ must be a finite number > 1, got '0.5'"),
    (["band", "--theta", "nan"], "θ must be a finite number > 1, got 'nan'"),
    (["band", "--sweep"], "--sweep needs a model"),
    (["band", "--head-dim", "7"], "--head-dim must be even and >= 2, got 7"),
    (["band", "--fractions", "1.5"], "fraction must be in [0, 1], got '1.5'"),
    (["band", "--model", "/nonexistent.pt"], "'/nonexistent.pt' does not exist"),
    (["band", "--which", "v"], "invalid choice: 'v'"),
])
def test_bad_arguments_give_clear_messages(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects it while parsing
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_files_give_clear_messages(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.txt").write_text("x" * 100)
    assert main(["extrapolate", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "o"), *TINY]) == 2
    assert "lacks valid.txt, test.txt" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert main(["band", "--model", str(tmp_path / "junk.pt")]) == 2
    assert "cannot load a wavepe checkpoint" in capsys.readouterr().err
    assert main(["band", "--model", str(tmp_path / "junk.pt"), "--hf-model", "x"]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "small.txt").write_text("line\n" * 30)
    assert main(["extrapolate", "--data", str(tmp_path / "small.txt"), "--out", str(tmp_path / "o"), *TINY]) == 2
    assert "needs at least 33" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# missing packages: one line naming what to install, before any work


def _without(monkeypatch, *modules: str) -> None:
    from wavepe import _requires

    real = _requires.installed
    monkeypatch.setattr(_requires, "installed", lambda name: name not in modules and real(name))


@pytest.mark.parametrize("argv, missing, message", [
    (["extrapolate", "--quick"], "matplotlib", "wavepe extrapolate (its figures) needs matplotlib, which is not "
                                               "installed: pip install 'matplotlib>=3.7'"),
    (["extrapolate", "--quick"], "tqdm", "wavepe extrapolate (its progress bars) needs tqdm"),
    (["band", "--hf-model", "some/llama"], "transformers", "wavepe band --hf-model needs transformers, which is not "
                                                           "installed: pip install 'wavepe[hf]'"),
])
def test_a_missing_package_is_one_line_naming_what_to_install(argv, missing, message, monkeypatch, tmp_path,
                                                               capsys):
    _without(monkeypatch, missing)
    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"wavepe {argv[0]}: error: ")
    assert not out.exists()  # nothing was started


def test_fairseq_user_dir_without_fairseq_prints_the_path_and_names_the_extra(monkeypatch, capsys):
    from wavepe.integrations.fairseq import user_dir

    _without(monkeypatch, "fairseq")
    assert main(["fairseq-user-dir"]) == 0  # `--user-dir "$(wavepe fairseq-user-dir)"` keeps working
    captured = capsys.readouterr()
    assert captured.out.strip() == user_dir()
    assert captured.err.strip() == ("wavepe fairseq-user-dir: note: the fairseq plugin needs fairseq, which is not "
                                    "installed: pip install 'wavepe[fairseq]' (fairseq 0.12.2 runs on Python <= 3.10; "
                                    "wavepe's scripts/setup_fairseq_env.sh builds such an environment)")


def test_extrapolate_without_progress_does_not_need_tqdm(monkeypatch, tmp_path, capsys):
    _without(monkeypatch, "tqdm")
    assert main(["extrapolate", "--quick", "--out", str(tmp_path / "run"), *TINY, "--encodings", "nope",
                 "--no-save-models"]) == 0


HIDE_MODULE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == {name!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
"""


@pytest.mark.parametrize("code, module, message", [
    ("import wavepe.integrations.hf", "transformers",
     "wavepe.integrations.hf (wavepe.patch_llama) needs transformers, which is not installed: pip install 'wavepe[hf]'"),
    ("import wavepe; wavepe.patch_llama", "transformers", "pip install 'wavepe[hf]'"),
    ("import wavepe.integrations.fairseq.model", "fairseq",
     "wavepe's fairseq plugin needs fairseq, which is not installed: pip install 'wavepe[fairseq]'"),
])
def test_integrations_without_their_extra_raise_one_line(code, module, message):
    r = subprocess.run([sys.executable, "-c", HIDE_MODULE.format(name=module) + code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("wavepe._requires.MissingDependency: ") and message in last


# ---- --device / --dtype -------------------------------------------------------------------------------------


def test_extrapolate_bf16_on_the_cpu_reports_what_ran(tmp_path, capsys):
    """A tiny mixed-precision run finishes, and results.json, results.md and the terminal say what ran."""
    from wavepe._platform import cpu_model

    out = tmp_path / "bf16"
    assert main(["extrapolate", "--quick", "--out", str(out), *TINY, "--encodings", "wavelet,rope",
                 "--dtype", "bf16", "--device", "cpu", "--no-save-models"]) == 0
    text = capsys.readouterr().out
    line = (f"Ran on cpu ({cpu_model()}), wavepe CPU ISA {wavepe.active_isa()}; training bf16 autocast "
            "(parameters and optimizer state float32); evaluation float32.")
    assert line in text
    assert line in (out / "results.md").read_text(encoding="utf-8")
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["config"]["dtype"] == "bf16" and res["config"]["device"] == "cpu"
    assert res["run"] == {"device": "cpu", "device_name": cpu_model(), "train_dtype": "bf16", "autocast": True,
                          "parameters_dtype": "float32", "grad_scaler": False, "eval_dtype": "float32",
                          "isa": wavepe.active_isa()}
    for row in res["rows"].values():
        assert all(np.isfinite(r["perplexity"]) for r in row["nonoverlap"].values())


def test_extrapolate_passkey_fp16_on_the_cpu(tmp_path, capsys):
    """fp16 runs on the CPU too (autocast + GradScaler, both supported by torch's CPU backend)."""
    out = tmp_path / "fp16"
    assert main(["extrapolate", "--quick", "--out", str(out), *TINY_PASSKEY, "--encodings", "wavelet",
                 "--dtype", "fp16", "--device", "auto", "--no-save-models"]) == 0
    text = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert res["run"]["train_dtype"] == "fp16" and res["run"]["grad_scaler"] is True
    assert res["run"]["device"].startswith(device) and res["config"]["device"] == "auto"
    assert "training fp16 autocast (parameters and optimizer state float32, GradScaler)" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_extrapolate_device_cuda_without_cuda_is_one_clear_error(tmp_path, capsys):
    out = tmp_path / "cuda"
    for tiny in (TINY, TINY_PASSKEY):
        assert main(["extrapolate", "--device", "cuda", "--out", str(out), *tiny]) == 2
        err = capsys.readouterr().err
        assert err.startswith("wavepe extrapolate: error: --device cuda: CUDA is not available (")
        assert "use --device cpu" in err and "Traceback" not in err
    assert not out.exists()  # refused before any work


def test_cli_choices_match_the_library():
    from wavepe.research import cli
    from wavepe.research.experiments import precision

    assert cli._DTYPES == tuple(precision.DTYPES) and cli._DEVICES == precision.DEVICES


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pos_enc", ["wavelet", "rope"])
def test_wavepe_ops_receive_the_autocast_dtype(dtype, pos_enc, monkeypatch):
    """Autocast does not reach custom ops: the model itself hands them q, k, v in the autocast dtype."""
    import wavepe.ops
    from wavepe.research.experiments.model import LMConfig, TinyLM

    seen: list[tuple[str, torch.dtype, ...]] = []
    real_attention, real_rope = wavepe.ops.wavelet_attention, wavepe.ops.rope

    def attention(q, k, v, *args, **kwargs):
        seen.append(("attention", q.dtype, k.dtype, v.dtype))
        return real_attention(q, k, v, *args, **kwargs)

    def rope(q, k, *args, **kwargs):
        seen.append(("rope", q.dtype, k.dtype))
        return real_rope(q, k, *args, **kwargs)

    monkeypatch.setattr(wavepe.ops, "wavelet_attention", attention)
    monkeypatch.setattr(wavepe.ops, "rope", rope)
    torch.manual_seed(0)
    model = TinyLM(LMConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, head_dim=16,
                            intermediate_size=64, wavelet_n_scales=4, pos_enc=pos_enc))
    ids = torch.randint(0, 256, (2, 12))
    with torch.autocast("cpu", dtype=dtype):
        logits = model(ids)
    logits.float().sum().backward()  # the ops' backward runs in that dtype too
    assert seen and all(set(entry[1:]) == {dtype} for entry in seen), seen
    assert ("rope" in {e[0] for e in seen}) == (pos_enc == "rope")
    assert model.layers[0].self_attn.q_proj.weight.grad.dtype == torch.float32
    seen.clear()
    model(ids)  # no autocast: float32 as before
    assert all(set(entry[1:]) == {torch.float32} for entry in seen), seen
