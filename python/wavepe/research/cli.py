"""The ``wavepe`` command (also ``python -m wavepe``).

Subcommands:
  info              version, CPU features, which front ends are built
  fairseq-user-dir  the path to pass to fairseq's --user-dir
  extrapolate       the main job: train short, test long (perplexity at 1×…8× the training length)
  band              RoPE frequency-band analysis: x*, predicted j*, recommended θ; measured band,
                    norm heatmap and p-RoPE sweep of a trained model (wavepe checkpoint or HF Llama)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Sequence

from .._requires import MissingDependency, require


# kept here (not imported from wavepe.experiments) so that --help does not import torch
_ENCODING_HELP = ("wavelet (the paper's default grid), rope (θ=10^4), rope-ltrain (θ = train length), "
                  "rope:THETA (any θ), alibi, nope")


# the values of --device and --dtype (wavepe.research.experiments.precision checks the same; kept here too so that
# --help does not import torch)
_DEVICES = ("cpu", "cuda", "auto")
_DTYPES = ("float32", "bf16", "fp16")


class CliError(Exception):
    """A bad argument or input: printed as ``wavepe <cmd>: error: ...`` with exit status 2."""


def _cmd_info(args: argparse.Namespace) -> int:
    import platform

    import wavepe

    print(f"wavepe {wavepe.__version__} ({os.path.dirname(wavepe.__file__)})")
    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"cpu isa: {wavepe.cpu_isa()}  active: {wavepe.active_isa()}  amx tiles: {wavepe.tiles()}")
    try:
        import torch

        from ..ops import _extension
    except ImportError as exc:
        print(f"torch ops: unavailable ({exc})")
        return 0
    info = _extension.build_info()
    print(f"torch ops: {info['origin']}")
    print(f"  torch {torch.__version__}; the ops target torch >= {info['torch_target']} (ABI-stable)")
    if info["cuda_runtime"]:
        rt = int(info["cuda_runtime"])
        gpu = _gpu_line(info["cuda_archs"]) if torch.cuda.is_available() else "no GPU visible"
        print(f"  cuda kernels: {info['cuda_archs']} (CUDA runtime {rt // 1000}.{rt % 1000 // 10}, static); {gpu}")
    else:
        print("  cuda kernels: none in this build")
    return 0


def _gpu_line(built_for: str, name: str | None = None, cc: tuple[int, int] | None = None) -> str:
    """'NVIDIA H100 (sm_90): runs sm_90' -- the visible GPU and what of the build it runs (recipe.image_for: CUDA's
    rule), or that it runs none (its first op raises, saying why)."""
    import torch

    from .._build import recipe

    name = name if name is not None else torch.cuda.get_device_name()
    major, minor = cc if cc is not None else torch.cuda.get_device_capability()
    sass, _, ptx = built_for.partition("+PTX")
    image = recipe.image_for([t.removeprefix("sm_") for t in sass.split()], major * 10 + minor,
                             [t.removeprefix("compute_") for t in ptx.split()])
    runs = ("runs none of these kernels" if image is None else f"runs {image}" if image.startswith("sm_")
            else f"runs {image}'s PTX, compiled at the first op")
    return f"{name} (sm_{major}{minor}): {runs}"


def _cmd_fairseq_user_dir(args: argparse.Namespace) -> int:
    from .._requires import installed, missing_message
    from ..integrations.fairseq import user_dir

    if not installed("fairseq"):  # the path still goes to stdout: fairseq may run from another environment
        print("wavepe fairseq-user-dir: note: " + missing_message("fairseq", "the fairseq plugin"), file=sys.stderr)

    print(user_dir())
    return 0


def _add_fairseq_user_dir(sub) -> None:
    p = sub.add_parser("fairseq-user-dir", help="print the path to pass to fairseq's --user-dir",
                       description="Print the directory of wavepe's fairseq plugin, for "
                                   "fairseq-train/fairseq-eval-lm --user-dir (models wavepe_lm, wavepe_lm_wiki103).")
    p.set_defaults(func=_cmd_fairseq_user_dir)


# ---------------------------------------------------------------------------
# argument types: each names the option and shows the value on error


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {v}")
        return v

    return parse


def _theta(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"θ must be a number > 1, got {text!r}") from None
    if not (math.isfinite(v) and v > 1):
        raise argparse.ArgumentTypeError(f"θ must be a finite number > 1, got {text!r}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"fraction must be a number in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"fraction must be in [0, 1], got {text!r}")
    return v


def _encodings(text: str) -> tuple[str, ...]:
    require("torch", "wavepe extrapolate")
    from .experiments.extrapolate import parse_encoding

    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"--encodings needs a comma-separated list, got {text!r}")
    for n in names:
        try:
            parse_encoding(n, 128)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def _infer_theta(text: str) -> str | float:
    require("torch", "wavepe extrapolate")
    from .experiments.extrapolate import parse_infer_theta

    try:
        return parse_infer_theta(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _existing_path(text: str) -> str:
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    return text


# ---------------------------------------------------------------------------
# extrapolate


def _depth(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--depths must be numbers in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"--depths must be in [0, 1] (0 = start of the context, 1 = just before "
                                         f"the question), got {text!r}")
    return v


# options of one task only: (attribute, option, task)
_TASK_ONLY = (("eval_tokens", "--eval-tokens", "perplexity"), ("sliding_tokens", "--sliding-tokens", "perplexity"),
              ("depths", "--depths", "passkey"), ("trials", "--trials", "passkey"),
              ("key_digits", "--key-digits", "passkey"), ("passkey_fraction", "--passkey-fraction", "passkey"),
              ("answer_weight", "--answer-weight", "passkey"), ("check_every", "--check-every", "passkey"),
              ("stop_accuracy", "--stop-accuracy", "passkey"))


def _shared_overrides(args: argparse.Namespace, base: Any) -> dict[str, Any]:
    """Model, training and run fields common to both tasks, from the command line over ``base``."""
    import dataclasses

    from .experiments import precision
    from .experiments.train import TrainConfig

    model_over = {k: v for k, v in {"hidden_size": args.hidden, "num_hidden_layers": args.layers,
                                    "num_attention_heads": args.heads, "head_dim": args.head_dim,
                                    "wavelet_n_scales": args.wavelet_scales}.items() if v is not None}
    if "hidden_size" in model_over or "head_dim" in model_over or "num_attention_heads" in model_over:
        hidden = model_over.get("hidden_size", base.model.hidden_size)
        head_dim = model_over.get("head_dim", base.model.head_dim)
        model_over.setdefault("num_attention_heads", max(1, hidden // head_dim))
        model_over.setdefault("intermediate_size", 4 * hidden)
    train_over = {k: v for k, v in {"steps": args.steps, "batch_size": args.batch_size, "train_len": args.train_len,
                                    "lr": args.lr}.items() if v is not None}
    model = dataclasses.replace(base.model, **model_over)
    if model.head_dim % model.wavelet_n_scales and "wavelet" in (args.encodings or base.encodings):
        raise CliError(f"--head-dim {model.head_dim} is not divisible by --wavelet-scales "
                       f"{model.wavelet_n_scales} (the wavelet grid is scales × shifts = head_dim)")
    if model.head_dim % 2:
        raise CliError(f"--head-dim must be even (RoPE rotates pairs), got {model.head_dim}")
    train: TrainConfig = dataclasses.replace(base.train, **train_over)
    try:  # before any work: --device cuda on a machine without a GPU
        precision.resolve_device(args.device)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return dict(data=args.data, out=args.out, model=model, train=train, seed=args.seed, threads=args.threads,
                device=args.device, dtype=args.dtype,
                encodings=args.encodings or base.encodings,
                infer_thetas=tuple(args.infer_theta) if args.infer_theta else base.infer_thetas,
                factors=tuple(args.factors) if args.factors else base.factors,
                save_models=not args.no_save_models)


def _cmd_extrapolate(args: argparse.Namespace) -> int:
    for attr, option, task in _TASK_ONLY:
        if getattr(args, attr) is not None and args.task != task:
            raise CliError(f"{option} belongs to --task {task}, not --task {args.task}")
    if args.out is None:
        args.out = "runs/passkey" if args.task == "passkey" else "runs/extrapolate"
    if args.task == "passkey":
        return _run_passkey(args)
    import dataclasses

    # before any work: the figures come after minutes of training
    require("torch", "wavepe extrapolate")
    require("matplotlib", "wavepe extrapolate (its figures)")
    if not (args.no_progress or args.replot):
        require("tqdm", "wavepe extrapolate (its progress bars)")
    from .experiments.extrapolate import ExtrapolationConfig, quick_config, run_extrapolation

    if args.replot:
        from .experiments.extrapolate import replot

        try:
            figures = replot(args.out)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise CliError(f"--replot: {exc}") from None
        print("wrote " + ", ".join(figures.values()))
        return 0
    base = quick_config() if args.quick else ExtrapolationConfig()
    try:
        cfg = dataclasses.replace(
            base, **_shared_overrides(args, base),
            eval_tokens=args.eval_tokens or base.eval_tokens,
            sliding_tokens=args.sliding_tokens or base.sliding_tokens,
            heatmap_layer=args.heatmap_layer, heatmap_head=args.heatmap_head)
    except (ValueError, TypeError) as exc:
        raise CliError(str(exc)) from None
    try:
        results = run_extrapolation(cfg, progress=not args.no_progress)
    except (FileNotFoundError, ValueError, FloatingPointError) as exc:
        raise CliError(str(exc)) from None
    print()
    print(results["markdown"])
    for key, info in results["models"].items():
        if "band" in info:
            b = info["band"]
            print(f"{info['label']}: measured band i_band = {b['i_band']:.2f} "
                  f"({b['fraction']:.2f} of d/2), predicted j* = {b['j_star']}")
    print(f"wrote {os.path.join(cfg.out, 'results.json')} and figures "
          + ", ".join(os.path.basename(p) for p in results["figures"].values())
          + f" ({results['seconds']:.0f} s)")
    return 0


def _run_passkey(args: argparse.Namespace) -> int:
    import dataclasses

    from .experiments import passkey_job

    if args.replot:
        try:
            figures = passkey_job.replot(args.out)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise CliError(f"--replot: {exc}") from None
        print("wrote " + ", ".join(figures.values()))
        return 0
    base = passkey_job.passkey_quick_config() if args.quick else passkey_job.PasskeyJobConfig()
    task_over = {k: v for k, v in {"trials": args.trials, "key_digits": args.key_digits,
                                   "passkey_fraction": args.passkey_fraction,
                                   "answer_weight": args.answer_weight, "check_every": args.check_every,
                                   "stop_accuracy": args.stop_accuracy}.items() if v is not None}
    if args.depths is not None:
        task_over["depths"] = tuple(args.depths)
    try:
        cfg = dataclasses.replace(base, **_shared_overrides(args, base), **task_over)
    except (ValueError, TypeError) as exc:
        raise CliError(str(exc)) from None
    try:
        results = passkey_job.run_passkey(cfg, progress=not args.no_progress)
    except (FileNotFoundError, ValueError, FloatingPointError) as exc:
        raise CliError(str(exc)) from None
    print()
    print(results["markdown"])
    print(f"wrote {os.path.join(cfg.out, 'results.json')} and figures "
          + ", ".join(os.path.basename(p) for p in results["figures"].values())
          + f" ({results['seconds']:.0f} s)")
    return 0


# ---------------------------------------------------------------------------
# band


def _hf_theta(config: Any) -> float | None:
    theta = getattr(config, "rope_theta", None)
    params = getattr(config, "rope_parameters", None)
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    return float(theta) if theta is not None else None


def _load_model(args: argparse.Namespace) -> tuple[Any, float | None, int, str, str]:
    """(model, θ, head_dim, layout, tokenizer kind) of --model or --hf-model."""
    if args.model:
        from .experiments.model import load_model

        try:
            model = load_model(args.model)
        except Exception as exc:  # torch.load raises many kinds on a non-checkpoint file
            raise CliError(f"--model {args.model!r}: cannot load a wavepe checkpoint ({exc})") from None
        cfg = model.config
        theta = cfg.rope_theta if cfg.pos_enc == "rope" else None
        if cfg.pos_enc != "rope":
            print(f"note: --model uses pos_enc={cfg.pos_enc!r}, not RoPE: its pairs do not rotate, "
                  "the 'band' below is only where the query norm sits")
        return model, theta, cfg.head_dim, cfg.rope_layout, "bytes"
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(args.hf_model).float().eval()
    except Exception as exc:
        raise CliError(f"--hf-model {args.hf_model!r}: cannot load a causal LM ({exc})") from None
    from .analysis import _attention_shape

    try:
        _, _, head_dim = _attention_shape(model)
    except TypeError as exc:
        raise CliError(f"--hf-model {args.hf_model!r}: {exc}") from None
    return model, _hf_theta(model.config), head_dim, "half", args.tokenizer


def _band_tokens(args: argparse.Namespace, tokenizer_kind: str, model: Any) -> Any:
    import numpy as np

    from .experiments.corpus import load_corpus

    try:
        corpus = load_corpus(args.data)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from None
    data = corpus.split(args.split)
    if tokenizer_kind == "bytes":
        vocab = getattr(model.config, "vocab_size", 256)
        if vocab < 256:
            raise CliError(f"--tokenizer bytes needs a vocabulary of at least 256, the model has {vocab}")
        return data
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.hf_model)
    except Exception as exc:
        raise CliError(f"--hf-model {args.hf_model!r} has no tokenizer ({exc}); pass --tokenizer bytes to feed "
                       "raw bytes as token ids") from None
    text = data.tobytes().decode("utf-8", errors="replace")
    return np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)


def _cmd_band(args: argparse.Namespace) -> int:
    from .analysis import (P_ROPE_FRACTIONS, band_dimension, measure_model_band, recommended_theta,
                           theta_for_band, variance_of_cos, x_star)
    from .experiments.evaluate import p_rope_sweep

    if args.model and args.hf_model:
        raise CliError("give --model or --hf-model, not both")
    if args.sweep and not (args.model or args.hf_model):
        raise CliError("--sweep needs a model (--model CHECKPOINT or --hf-model DIR)")
    if args.model or args.hf_model:  # before any work: loading, measuring, then the figures
        require("torch", "wavepe band --model/--hf-model")
        if args.hf_model:
            require("transformers", "wavepe band --hf-model")
        require("matplotlib", "wavepe band (its figures)")
        if args.sweep and not args.no_progress:
            require("tqdm", "wavepe band --sweep (its progress bars)")
    model = None
    model_theta = None
    head_dim = args.head_dim
    layout = "half"
    tok_kind = "bytes"
    train_len_from = "--train-len"
    if args.model or args.hf_model:
        model, model_theta, head_dim, layout, tok_kind = _load_model(args)
        if args.head_dim is not None and args.head_dim != head_dim:
            raise CliError(f"--head-dim {args.head_dim} does not match the model's head_dim {head_dim}")
        if args.train_len is None:
            # the checkpoint knows its training length; for HF, max_position_embeddings is the closest field
            meta_len = getattr(model, "meta", {}).get("train_len")
            hf_len = getattr(model.config, "max_position_embeddings", None) if args.hf_model else None
            if meta_len or hf_len:
                args.train_len = int(meta_len or hf_len)
                train_len_from = "the checkpoint" if meta_len else "max_position_embeddings"
    if args.train_len is None:
        args.train_len, train_len_from = 128, "default"
    xs = x_star()
    report: dict[str, Any] = {"x_star": xs, "V_x_star": variance_of_cos(xs), "train_len": args.train_len}
    print(f"x* = {xs:.12f}   (first maximum of V(x) = 1/2 + sin 2x/(4x) - (sin x/x)^2, V(x*) = "
          f"{variance_of_cos(xs):.6f})")
    head_dim = head_dim or 128
    if head_dim < 2 or head_dim % 2:
        raise CliError(f"--head-dim must be even and >= 2, got {head_dim}")
    thetas = list(args.theta) if args.theta else ([model_theta] if model_theta else [1e4, 5e5])
    rec = recommended_theta(args.train_len)
    if rec not in thetas:
        thetas.append(rec)
    half = head_dim // 2
    print(f"train length L = {args.train_len} ({train_len_from}), head_dim d = {head_dim} ({half} rotation pairs)")
    print("| θ | predicted band j* | j*/(d/2) |")
    print("|---:|---:|---:|")
    report["predicted"] = []
    for th in thetas:
        j = band_dimension(th, args.train_len, head_dim)
        note = " (recommended: θ = L_train)" if th == rec else ""
        print(f"| {th:g}{note} | {j} | {j / half:.3f} |")
        report["predicted"].append({"theta": th, "j_star": j, "fraction": j / half})
    report["recommended_theta"] = rec
    print(f"θ placing the band on the lowest pair (j = {half - 1}): "
          f"{theta_for_band(args.train_len, head_dim, half - 1):.4g}")
    if model is None:
        _write_json(args.out, "band.json", report)
        return 0

    import numpy as np
    import torch

    from .experiments import plots

    tokens = _band_tokens(args, tok_kind, model)
    length = args.length or args.train_len
    if len(tokens) < length:
        raise CliError(f"the {args.split} split has {len(tokens)} tokens; --length {length} needs more")
    n_windows = max(1, min(args.windows, len(tokens) // length))
    starts = np.linspace(0, len(tokens) - length, n_windows).astype(np.int64)
    ids = torch.from_numpy(np.stack([np.asarray(tokens[s: s + length]) for s in starts]).astype(np.int64))
    band = measure_model_band(model, ids, which=args.which, layout=layout)
    report["measured"] = band.to_dict()
    report["model_theta"] = model_theta
    print(f"measured band ({args.which}, {n_windows} windows of {length}): i_band = {band.i_band:.2f}, "
          f"i_band/(d/2) = {band.fraction:.3f}")
    print("per head (rows = layers): " + "; ".join(" ".join(str(int(v)) for v in row) for row in band.per_head))
    j_model = band_dimension(model_theta, args.train_len, head_dim) if model_theta else None
    if j_model is not None:
        print(f"predicted j* for the model's θ = {model_theta:g} and L = {args.train_len}: {j_model}")
    os.makedirs(args.out, exist_ok=True)
    heat = plots.plot_band_heatmap(band.mean_norms, os.path.join(args.out, "band_heatmap.png"), i_band=band.i_band,
                                   j_star=j_model, per_head=band.per_head,
                                   title=f"‖{args.which}_i‖₂ by position and pair")
    print(f"wrote {heat}")
    if args.sweep:
        fractions = tuple(args.fractions) if args.fractions else P_ROPE_FRACTIONS
        lengths = [args.train_len * f for f in args.factors]
        if len(tokens) < max(lengths) + 1:
            raise CliError(f"the {args.split} split has {len(tokens)} tokens; evaluating at {max(lengths)} "
                           "needs more (use smaller --factors)")
        try:
            sweep = p_rope_sweep(model, tokens, lengths, fractions, max_tokens=args.max_tokens,
                                 progress=not args.no_progress)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        print("p-RoPE sweep (perplexity, non-overlapping windows; r = fraction of pairs rotated):")
        print("| r | " + " | ".join(str(n) for n in lengths) + " |")
        print("|---:|" + "---:|" * len(lengths))
        for frac, row in sweep.items():
            print(f"| {frac:g} | " + " | ".join(f"{row[n]:.3f}" for n in lengths) + " |")
        report["p_rope_sweep"] = {str(f): {str(n): v for n, v in row.items()} for f, row in sweep.items()}
        fig = plots.plot_p_rope_sweep(sweep, os.path.join(args.out, "p_rope_sweep.png"), args.train_len,
                                      "perplexity with RoPE on the top r of pairs")
        print(f"wrote {fig}")
    _write_json(args.out, "band.json", report)
    return 0


def _write_json(out: str, name: str, obj: dict[str, Any]) -> None:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
    print(f"wrote {path}")


# ---------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wavepe", description="Wavelet position encoding and configurable RoPE.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("info", help="version, CPU features and which front ends are built",
                       description="Print the version, the kernel ISA in use and whether the torch ops are built.")
    p.set_defaults(func=_cmd_info)
    _add_fairseq_user_dir(sub)

    p = sub.add_parser(
        "extrapolate", help="the main job: train short, test long",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train small byte-level LMs that differ only in position encoding at --train-len, then "
                    "test them at 1×, 2×, 4×, 8× that length. --task perplexity (default): perplexity with "
                    "non-overlapping and sliding windows; writes results.json, results.md, perplexity.png, "
                    "attention_2x.png (one head at 2× the training length per encoding), loss_by_position.png. "
                    "--task passkey: the models are trained on the corpus mixed with passkey examples that fit "
                    "in --train-len, then must retrieve a random key hidden at depths 0…1 of longer contexts "
                    "(exact match under greedy decoding); writes results.json, results.md, passkey.png (one "
                    "accuracy heatmap per encoding, length × depth) and passkey_distance.png. Both write the "
                    "checkpoints (for `wavepe band --model`) to --out. Default data: the Python standard "
                    "library's sources (no download).")
    p.add_argument("--task", choices=("perplexity", "passkey"), default="perplexity",
                   help="what to measure beyond the training length")
    p.add_argument("--data", type=_existing_path, default=None,
                   help="a directory with train.txt, valid.txt, test.txt, or one text file split 80/10/10 in "
                        "contiguous blocks (default: the embedded standard-library corpus)")
    p.add_argument("--out", default=None, help="output directory (default runs/extrapolate, or runs/passkey "
                                               "with --task passkey)")
    p.add_argument("--quick", action="store_true",
                   help="a small, fast preset for smoke tests (< 2 min): 2 layers, width 64, 200 steps, "
                        "train length 64, factors 1 2 4 (passkey: depths 0 0.5 1)")
    p.add_argument("--encodings", type=_encodings, default=None, metavar="LIST",
                   help="comma-separated: " + _ENCODING_HELP + " (default: wavelet,rope,rope-ltrain,alibi,nope)")
    p.add_argument("--infer-theta", type=_infer_theta, action="append", default=None, metavar="THETA",
                   help="inference θ for the θ=L_train RoPE model (repeatable): 'len' = the evaluation length, "
                        "or a number (default: len)")
    p.add_argument("--train-len", type=_positive_int("--train-len"), default=None,
                   help="training length (default 128; 64 with --quick)")
    p.add_argument("--factors", type=_positive_int("--factors"), nargs="+", default=None,
                   help="evaluation lengths as multiples of --train-len (default 1 2 4 8)")
    p.add_argument("--steps", type=_positive_int("--steps"), default=None,
                   help="training steps (default 500; with --task passkey the cap, default 1500)")
    p.add_argument("--batch-size", type=_positive_int("--batch-size"), default=None, help="sequences per step "
                   "(default 16)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 2e-3)")
    p.add_argument("--hidden", type=_positive_int("--hidden"), default=None, help="model width (default 128)")
    p.add_argument("--layers", type=_positive_int("--layers"), default=None, help="layers (default 3)")
    p.add_argument("--heads", type=_positive_int("--heads"), default=None, help="heads (default hidden/head-dim)")
    p.add_argument("--head-dim", type=_positive_int("--head-dim"), default=None, help="head dimension (default 32)")
    p.add_argument("--wavelet-scales", type=_positive_int("--wavelet-scales"), default=None,
                   help="wavelet grid: scales 2^0..2^(n-1) × head_dim/n shifts (default 8)")
    p.add_argument("--eval-tokens", type=_positive_int("--eval-tokens"), default=None,
                   help="perplexity: tokens scored per length, non-overlapping (default 16384)")
    p.add_argument("--sliding-tokens", type=_positive_int("--sliding-tokens"), default=None,
                   help="perplexity: tokens scored per length, sliding window (default 8192)")
    p.add_argument("--heatmap-layer", type=int, default=-1, help="perplexity: layer of the attention heatmaps "
                                                                  "(-1: last)")
    p.add_argument("--heatmap-head", type=int, default=0, help="perplexity: head of the attention heatmaps")
    p.add_argument("--depths", type=_depth, nargs="+", default=None,
                   help="passkey: depths of the key in the context, 0 = start … 1 = just before the question "
                        "(default 0 0.1 … 1)")
    p.add_argument("--trials", type=_positive_int("--trials"), default=None,
                   help="passkey: examples per (length, depth) cell, fixed seeds (default 20)")
    p.add_argument("--key-digits", type=_positive_int("--key-digits"), default=None,
                   help="passkey: digits of the key; chance = 10^-digits (default 5)")
    p.add_argument("--passkey-fraction", type=_fraction, default=None,
                   help="passkey: fraction of the training rows that are passkey examples (default 1: every row is "
                        "corpus text with a needle and a question inserted)")
    p.add_argument("--answer-weight", type=float, default=None,
                   help="passkey: loss weight of the answer tokens of a passkey row, relative to text (default 50)")
    p.add_argument("--check-every", type=int, default=None,
                   help="passkey: probe retrieval at --train-len on the valid split every N steps and stop training "
                        "once it reaches --stop-accuracy; --steps is then the cap (default 100; 0: always train "
                        "--steps steps)")
    p.add_argument("--stop-accuracy", type=_fraction, default=None,
                   help="passkey: accuracy at --train-len that ends training early (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of initial weights and data order")
    p.add_argument("--threads", type=_positive_int("--threads"), default=None, help="torch threads (default: "
                   "torch's)")
    p.add_argument("--device", choices=_DEVICES, default="cpu",
                   help="where the models train and are evaluated: cpu, cuda (an error without a usable GPU), or "
                        "auto (cuda when available, else cpu)")
    p.add_argument("--dtype", choices=_DTYPES, default="float32",
                   help="training precision: float32, or bf16 / fp16 mixed precision (torch.autocast; parameters "
                        "and optimizer state stay float32; fp16 with a GradScaler). Evaluation runs in float32")
    p.add_argument("--no-save-models", action="store_true", help="do not write checkpoints")
    p.add_argument("--replot", action="store_true",
                   help="only redraw the figures of a finished run in --out (from results.json, attention_2x.npz; "
                        "with --task passkey from results.json)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_extrapolate)

    p = sub.add_parser(
        "band", help="RoPE frequency-band analysis (x*, j*, θ; measured band, p-RoPE sweep)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Predict the frequency band of RoPE from θ and the training length (x*, j*, recommended θ). "
                    "With --model (a checkpoint from `wavepe extrapolate`) or --hf-model (a Hugging Face Llama "
                    "directory), also measure the band from the model's queries, write the norm heatmap "
                    "(positions × rotation pairs) and, with --sweep, the p-RoPE sweep (perplexity with RoPE on "
                    "the top r of pairs, no retraining).")
    p.add_argument("--theta", type=_theta, action="append", default=None,
                   help="RoPE base θ (repeatable; default: the model's θ, else 1e4 and 5e5)")
    p.add_argument("--train-len", type=_positive_int("--train-len"), default=None,
                   help="training length L_train (default: the checkpoint's; for --hf-model its "
                        "max_position_embeddings; else 128)")
    p.add_argument("--head-dim", type=_positive_int("--head-dim"), default=None,
                   help="head dimension d (default: the model's, else 128)")
    p.add_argument("--model", type=_existing_path, default=None, help="wavepe checkpoint (.pt) to measure")
    p.add_argument("--hf-model", default=None, help="Hugging Face causal LM (Llama) directory or name to measure")
    p.add_argument("--tokenizer", choices=("auto", "bytes"), default="auto",
                   help="--hf-model text → ids: the model's tokenizer, or raw bytes as ids")
    p.add_argument("--data", type=_existing_path, default=None,
                   help="text to run the model on (as for `extrapolate --data`; default: standard library)")
    p.add_argument("--split", choices=("train", "valid", "test"), default="valid", help="which split of --data")
    p.add_argument("--which", choices=("q", "k"), default="q", help="measure queries or keys")
    p.add_argument("--length", type=_positive_int("--length"), default=None,
                   help="window length for the band measurement (default --train-len)")
    p.add_argument("--windows", type=_positive_int("--windows"), default=8, help="windows for the measurement")
    p.add_argument("--sweep", action="store_true", help="run the p-RoPE sweep")
    p.add_argument("--fractions", type=_fraction, nargs="+", default=None,
                   help="p-RoPE fractions r (default 1 0.9 0.75 0.5 0.25)")
    p.add_argument("--factors", type=_positive_int("--factors"), nargs="+", default=[1, 2, 4, 8],
                   help="sweep lengths as multiples of --train-len")
    p.add_argument("--max-tokens", type=_positive_int("--max-tokens"), default=8192,
                   help="tokens scored per sweep length")
    p.add_argument("--out", default="runs/band", help="output directory (band.json, PNGs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_band)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)  # option types may need torch (MissingDependency)
        return int(args.func(args) or 0)
    except (CliError, MissingDependency) as exc:
        sub = getattr(args, "command", None) or next((a for a in (argv or sys.argv[1:]) if not a.startswith("-")), None)
        print(f"wavepe {sub}: error: {exc}" if sub else f"wavepe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
