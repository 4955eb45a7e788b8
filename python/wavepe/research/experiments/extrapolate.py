"""The main job: train short, test long.

Trains one small byte-level LM per position encoding (same seed, same data
order, same initial weights: only the encoding differs), evaluates perplexity
at multiples of the training length with non-overlapping and sliding windows,
measures the RoPE models' frequency band, and writes JSON, a Markdown table
and PNG figures.  :func:`run_extrapolation` is what ``wavepe extrapolate`` runs.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..._platform import cpu_model
from ..._validate import check_int, check_real
from .corpus import Corpus, load_corpus
from .evaluate import MODES, PerplexityResult, evaluate_lengths, perplexity
from . import precision
from .model import LMConfig, TinyLM, save_model
from .train import TrainConfig, train_lm

DEFAULT_ENCODINGS: tuple[str, ...] = ("wavelet", "rope", "rope-ltrain", "alibi", "nope")
ENCODING_HELP = ("wavelet (the paper's default grid), rope (θ=10^4), rope-ltrain (θ = train length), "
                 "rope:THETA (any θ), alibi, nope")


@dataclass(frozen=True)
class EncodingSpec:
    """One trained variant: its key on the command line, its label, its model config fields."""

    key: str
    label: str
    pos_enc: str
    theta: float | None = None


def parse_encoding(name: str, train_len: int) -> EncodingSpec:
    """``wavelet``, ``rope``, ``rope-ltrain``, ``rope:THETA``, ``alibi`` or ``nope``."""
    if not isinstance(name, str):
        raise TypeError(f"encoding must be a string, got {name!r}")
    key = name.strip().lower()
    if key == "wavelet":
        return EncodingSpec(key, "wavelet", "wavelet")
    if key == "alibi":
        return EncodingSpec(key, "ALiBi", "alibi")
    if key == "nope":
        return EncodingSpec(key, "NoPE", "nope")
    if key == "rope":
        return EncodingSpec(key, "RoPE θ=10000", "rope", 10000.0)
    if key == "rope-ltrain":
        return EncodingSpec(key, f"RoPE θ={train_len}", "rope", float(train_len))
    if key.startswith("rope:"):
        try:
            theta = float(key[5:])
        except ValueError:
            raise ValueError(f"encoding {name!r}: θ after 'rope:' must be a number, e.g. rope:500000") from None
        if not (math.isfinite(theta) and theta > 1):
            raise ValueError(f"encoding {name!r}: θ must be a finite number > 1")
        return EncodingSpec(f"rope:{theta:g}", f"RoPE θ={theta:g}", "rope", theta)
    raise ValueError(f"unknown encoding {name!r}; choose from {ENCODING_HELP}")


def parse_infer_theta(value: str | float) -> str | float:
    """``"len"`` (θ = evaluation length) or a number > 1 (a fixed inference θ)."""
    if isinstance(value, str):
        if value.strip().lower() == "len":
            return "len"
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"inference θ must be 'len' or a number > 1, got {value!r}") from None
    v = check_real("infer_theta", value, positive=True)
    if v <= 1:
        raise ValueError(f"inference θ must be > 1, got {v}")
    return v


@dataclass
class JobConfig:
    """The knobs every ``wavepe extrapolate`` task shares (written into ``results.json``).

    The corpus (``data``, None = the embedded one), the output folder, the
    encodings (one model each, the same seed and batches), the lengths
    (``factors`` × ``train.train_len``), the model and training settings.
    ``infer_thetas`` adds, for the RoPE model trained at θ = L_train
    (``rope-ltrain``), rows evaluated at a larger θ without retraining:
    ``"len"`` sets θ to the evaluation length (the lowest pair then turns by
    about as much over the evaluated context as it did in training), a number
    sets that θ at every length.

    ``device`` ("cpu", "cuda" or "auto": CUDA when available) is where the
    models train and are evaluated; ``dtype`` ("float32", "bf16", "fp16") is
    the training precision (:mod:`~wavepe.research.experiments.precision`:
    autocast, parameters float32).  Evaluation always runs in float32, so
    perplexities of models trained in different precisions compare directly.
    """

    data: str | None = None
    out: str = "runs/extrapolate"
    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    infer_thetas: tuple[str | float, ...] = ("len",)
    factors: tuple[int, ...] = (1, 2, 4, 8)
    model: LMConfig = field(default_factory=LMConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    threads: int | None = None
    save_models: bool = True
    device: str = "cpu"
    dtype: str = "float32"

    #: the precision of every evaluation (perplexity, passkey probes, heatmaps, band measurement)
    EVAL_DTYPE = "float32"

    def __post_init__(self) -> None:
        precision.check_device_name(self.device)
        precision.check_dtype_name(self.dtype)
        if not self.encodings:
            raise ValueError("encodings must name at least one encoding")
        keys = [s.key for s in self.specs]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"encodings lists {', '.join(sorted(dup))} more than once")
        self.infer_thetas = tuple(parse_infer_theta(v) for v in self.infer_thetas)
        if not self.factors:
            raise ValueError("factors must list at least one multiple of the training length")
        for f in self.factors:
            check_int("factor", f, min_value=1)
        if self.threads is not None:
            check_int("threads", self.threads, min_value=1)

    @property
    def specs(self) -> list[EncodingSpec]:
        return [parse_encoding(e, self.train.train_len) for e in self.encodings]

    @property
    def lengths(self) -> list[int]:
        return [self.train.train_len * f for f in self.factors]

    def start(self, corpus: Corpus | None) -> Corpus:
        """What every task does first: the device (ValueError if ``device="cuda"`` has no GPU), threads,
        the output folder, the corpus (``data`` unless given)."""
        self.torch_device()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        os.makedirs(self.out, exist_ok=True)
        return load_corpus(self.data) if corpus is None else corpus

    def torch_device(self) -> torch.device:
        """``device`` resolved ("auto" -> cuda or cpu)."""
        return precision.resolve_device(self.device)

    def run_info(self) -> dict[str, Any]:
        """What runs: device and its name, training and evaluation dtypes, ISA (results.json's "run")."""
        return precision.describe(self.torch_device(), self.dtype, self.EVAL_DTYPE)

    def new_model(self, spec: EncodingSpec) -> TinyLM:
        """One encoding's untrained model on the device: seeded (on the CPU, then moved), so that every
        variant, on every device, starts from the same weights."""
        mcfg = dataclasses.replace(self.model, pos_enc=spec.pos_enc,
                                   rope_theta=spec.theta if spec.theta is not None else self.model.rope_theta)
        torch.manual_seed(self.seed)
        return TinyLM(mcfg).to(self.torch_device())

    def save_checkpoint(self, model: TinyLM, spec: EncodingSpec, meta: dict[str, Any]) -> str | None:
        """``out/models/<encoding>.pt`` (None when ``save_models`` is off); ``meta`` goes into the file."""
        if not self.save_models:
            return None
        os.makedirs(os.path.join(self.out, "models"), exist_ok=True)
        path = os.path.join(self.out, "models", spec.key.replace(":", "_") + ".pt")
        save_model(model, path, meta={"train_len": self.train.train_len, "encoding": spec.key, "seed": self.seed,
                                      **meta})
        return path

    def write_results(self, results: dict[str, Any], t_start: float) -> None:
        """``out/results.json``, with the seconds since ``t_start`` (rewritten after every model)."""
        results["seconds"] = time.perf_counter() - t_start
        with open(os.path.join(self.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("model", "train")}
        d["model"] = self.model.to_dict()
        d["train"] = self.train.to_dict()
        for name, value in d.items():
            if isinstance(value, tuple):
                d[name] = list(value)
        return d


@dataclass
class ExtrapolationConfig(JobConfig):
    """Everything a perplexity run depends on: :class:`JobConfig` and the evaluation's windows.

    ``eval_tokens`` are scored in non-overlapping windows and
    ``sliding_tokens`` in a sliding window of stride ``stride_fraction`` × L;
    ``heatmap_layer``/``heatmap_head`` pick the attention map drawn at 2× L.
    """

    eval_tokens: int = 16384
    sliding_tokens: int = 8192
    stride_fraction: float = 0.25
    heatmap_layer: int = -1
    heatmap_head: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("eval_tokens", self.eval_tokens, min_value=1)
        check_int("sliding_tokens", self.sliding_tokens, min_value=1)
        if not 0 < self.stride_fraction <= 1:
            raise ValueError(f"stride_fraction must be in (0, 1], got {self.stride_fraction}")
        layers, heads = self.model.num_hidden_layers, self.model.num_attention_heads
        if not -layers <= check_int("heatmap_layer", self.heatmap_layer) < layers:
            raise ValueError(f"heatmap_layer must be in [{-layers}, {layers - 1}] for {layers} layers, "
                             f"got {self.heatmap_layer}")
        if not 0 <= check_int("heatmap_head", self.heatmap_head) < heads:
            raise ValueError(f"heatmap_head must be in [0, {heads - 1}] for {heads} heads, got {self.heatmap_head}")


def quick_config(**overrides: Any) -> ExtrapolationConfig:
    """The ``--quick`` preset (CI smoke run, < 2 minutes): a smaller model, fewer steps and tokens."""
    model = LMConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=32, intermediate_size=256)
    train = TrainConfig(steps=200, batch_size=8, train_len=64, warmup=20)
    base: dict[str, Any] = dict(model=model, train=train, factors=(1, 2, 4), eval_tokens=2048, sliding_tokens=1024)
    base.update(overrides)
    return ExtrapolationConfig(**base)


def machine_info() -> dict[str, Any]:
    return {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def _theta_at(infer: str | float, length: int) -> float:
    return float(length) if infer == "len" else float(infer)


def _infer_label(spec: EncodingSpec, infer: str | float) -> str:
    return f"{spec.label} → θ={'L' if infer == 'len' else format(infer, 'g')} (inference)"


def evaluation_stream(tokens: np.ndarray, length: int, pieces: int = 16) -> np.ndarray:
    """``length`` tokens made of ``pieces`` equal chunks spread evenly over ``tokens``.

    Scoring the first bytes of a split would measure its first few files only;
    chunks from everywhere in the split make the estimate representative,
    and every model and length still scores the same tokens.
    """
    if tokens.size <= length:
        return tokens
    pieces = max(1, min(pieces, length))
    bounds = np.linspace(0, length, pieces + 1).astype(np.int64)
    starts = np.linspace(0, tokens.size - (bounds[1:] - bounds[:-1]).max(), pieces).astype(np.int64)
    return np.concatenate([tokens[s: s + (b1 - b0)] for s, b0, b1 in zip(starts, bounds[:-1], bounds[1:])])


def _heatmap_window(tokens: np.ndarray, length: int) -> torch.Tensor:
    """A fixed test window: the ``length`` bytes starting at the middle of the stream."""
    start = max(0, min(tokens.size // 2, tokens.size - length))
    return torch.tensor(np.asarray(tokens[start: start + length]), dtype=torch.int64)[None]


def format_table(rows: dict[str, dict[str, dict[int, float]]], mode: str, lengths: Sequence[int],
                 train_len: int) -> str:
    """Markdown table of perplexities: one row per encoding, one column per length."""
    head = "| encoding | " + " | ".join(f"{n // train_len}× ({n})" for n in lengths) + " |"
    sep = "|---|" + "---:|" * len(lengths)
    lines = [head, sep]
    for label, row in rows.items():
        if mode in row:
            lines.append(f"| {label} | " + " | ".join(f"{row[mode][n]:.3f}" if n in row[mode] else "–"
                                                      for n in lengths) + " |")
    return "\n".join(lines)


def make_figures(results: dict[str, Any], out: str, heatmaps: dict[str, np.ndarray]) -> dict[str, str]:
    """perplexity.png, attention_2x.png and loss_by_position.png from a results dict."""
    from . import plots

    cfg = results["config"]
    train_len = cfg["train"]["train_len"]
    lengths = results["lengths"]
    table = {label: {mode: {int(n): r["perplexity"] for n, r in row[mode].items()} for mode in MODES if mode in row}
             for label, row in results["rows"].items()}
    curves = {label: np.asarray(row["nll_by_position"]) for label, row in results["rows"].items()
              if "nll_by_position" in row}
    title = f"{results['corpus']['name']}, trained at L={train_len}"
    return {
        "perplexity": plots.plot_perplexity(table, os.path.join(out, "perplexity.png"), train_len, title),
        "attention_2x": plots.plot_attention_heatmaps(
            heatmaps, os.path.join(out, "attention_2x.png"), train_len,
            f"attention at 2× the training length (layer {cfg['heatmap_layer']}, head {cfg['heatmap_head']})"),
        "loss_by_position": plots.plot_loss_by_position(
            curves, os.path.join(out, "loss_by_position.png"), train_len,
            f"{title}: loss by position, windows of {max(lengths)}"),
    }


def read_results(out: str, task: str) -> dict[str, Any]:
    """``out/results.json`` of a finished ``--task task`` run (for ``--replot``), refused for another task."""
    path = os.path.join(out, "results.json")
    if not os.path.isfile(path):
        option = "" if task == "perplexity" else f"--task {task} "
        raise FileNotFoundError(f"{path!r} does not exist: run `wavepe extrapolate {option}--out {out}` first")
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    found = results.get("task", "perplexity")
    if found != task:
        raise ValueError(f"{path!r} is not from a {task} run (task {found!r}): replot it with --task {found}")
    return results


def replot(out: str) -> dict[str, str]:
    """Redraw the figures of a finished run from ``out/results.json`` and ``out/attention_2x.npz``."""
    results = read_results(out, "perplexity")
    heatmaps: dict[str, np.ndarray] = {}
    npz = os.path.join(out, "attention_2x.npz")
    if os.path.isfile(npz):
        with np.load(npz) as z:
            heatmaps = {str(label): z[f"map{i}"] for i, label in enumerate(z["labels"])}
    return make_figures(results, out, heatmaps)


def run_extrapolation(cfg: ExtrapolationConfig, *, progress: bool = True, corpus: Corpus | None = None,
                      log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train every encoding of ``cfg``, evaluate, write ``cfg.out``; return the results dict.

    Files written to ``cfg.out``: ``results.json`` (everything, rewritten after
    each model), ``results.md`` (the tables), ``perplexity.png``,
    ``attention_2x.png`` (and its maps in ``attention_2x.npz``),
    ``loss_by_position.png``, ``models/<encoding>.pt``.

    Perplexities are measured on :func:`evaluation_stream` of the test split.
    """
    from ..analysis import band_dimension, measure_model_band

    t_start = time.perf_counter()
    corpus = cfg.start(corpus)
    train_len = cfg.train.train_len
    lengths = cfg.lengths
    need = max(lengths) + 1
    for split in ("train", "test"):
        if corpus.split(split).size < need:
            raise ValueError(f"corpus {corpus.name!r}: the {split} split has {corpus.split(split).size} bytes; "
                             f"evaluating at length {max(lengths)} needs at least {need}")
    test = evaluation_stream(corpus.test, max(cfg.eval_tokens, cfg.sliding_tokens) + 2 * max(lengths) + 1)
    log(f"corpus {corpus.name}: " + ", ".join(f"{s} {corpus.split(s).size:,} bytes" for s in ("train", "valid",
                                                                                                "test")))
    run = cfg.run_info()
    log(precision.describe_line(run))
    results: dict[str, Any] = {"config": cfg.to_dict(), "corpus": corpus.describe(), "machine": machine_info(),
                               "run": run, "lengths": lengths, "rows": {}, "models": {}}
    table: dict[str, dict[str, dict[int, float]]] = {}
    heatmaps: dict[str, np.ndarray] = {}
    heat_ids = _heatmap_window(corpus.test, 2 * train_len).to(cfg.torch_device())

    def record(label: str, evals: dict[str, dict[int, PerplexityResult]]) -> None:
        row = table.setdefault(label, {})
        stored = results["rows"].setdefault(label, {})
        for mode, res in evals.items():
            row.setdefault(mode, {}).update({n: r.perplexity for n, r in res.items()})
            stored.setdefault(mode, {}).update({str(n): r.to_dict() for n, r in res.items()})
            if mode == "nonoverlap" and max(lengths) in res:
                curve = res[max(lengths)].nll_by_position
                stored["nll_by_position"] = [round(float(v), 5) for v in curve]

    def heatmap(model: TinyLM) -> np.ndarray:
        probs = model.attention_probs(heat_ids, layer=cfg.heatmap_layer)
        return probs[0, cfg.heatmap_head].float().cpu().numpy()

    for spec in cfg.specs:
        t0 = time.perf_counter()
        model = cfg.new_model(spec)
        tcfg = dataclasses.replace(cfg.train, seed=cfg.seed)
        history = train_lm(model, corpus.train, tcfg, progress=progress, desc=f"train {spec.key}", dtype=cfg.dtype)
        t_train = time.perf_counter() - t0
        info: dict[str, Any] = {"label": spec.label, "parameters": model.num_parameters(),
                                "train_seconds": t_train, "final_train_loss": history["final_loss"],
                                "train_loss": history["loss"][:: max(1, len(history["loss"]) // 200)]}
        path = cfg.save_checkpoint(model, spec, {"corpus": corpus.name, "steps": tcfg.steps})
        if path is not None:
            info["checkpoint"] = path
        evals = evaluate_lengths(model, test, lengths, modes=MODES, max_tokens=cfg.eval_tokens,
                                 sliding_max_tokens=cfg.sliding_tokens, stride_fraction=cfg.stride_fraction,
                                 progress=progress, desc=spec.key)
        record(spec.label, evals)
        heatmaps[spec.label] = heatmap(model)
        if spec.pos_enc == "rope":
            assert spec.theta is not None
            band = measure_model_band(model, heat_ids[:, :train_len], layout=model.config.rope_layout)
            info["band"] = {**band.to_dict(), "j_star": band_dimension(spec.theta, train_len, model.config.head_dim)}
        if spec.key == "rope-ltrain":
            base = model.config.rope_config()
            for infer in cfg.infer_thetas:
                label = _infer_label(spec, infer)
                inf_evals: dict[str, dict[int, PerplexityResult]] = {m: {} for m in MODES}
                try:
                    for n in lengths:
                        model.set_rope(base.with_theta(_theta_at(infer, n)))
                        for mode in MODES:
                            budget = cfg.eval_tokens if mode == "nonoverlap" else cfg.sliding_tokens
                            inf_evals[mode][n] = perplexity(
                                model, test, n, mode=mode, stride=max(1, round(cfg.stride_fraction * n)),
                                max_tokens=budget, progress=progress, desc=f"{spec.key} θ_inf {mode} L={n}")
                    model.set_rope(base.with_theta(_theta_at(infer, 2 * train_len)))
                    heatmaps[label] = heatmap(model)
                finally:
                    model.set_rope(base)
                record(label, inf_evals)
        info["seconds"] = time.perf_counter() - t0
        results["models"][spec.key] = info
        log(f"{spec.label}: trained {t_train:.0f} s (loss {history['final_loss']:.3f}), "
            f"evaluated {info['seconds'] - t_train:.0f} s; perplexity "
            + " ".join(f"{n}:{table[spec.label]['nonoverlap'][n]:.2f}" for n in lengths))
        cfg.write_results(results, t_start)

    np.savez_compressed(os.path.join(cfg.out, "attention_2x.npz"), labels=np.array(list(heatmaps)),
                        **{f"map{i}": m for i, m in enumerate(heatmaps.values())})
    results["figures"] = make_figures(results, cfg.out, heatmaps)
    md = [f"Perplexity (bytes) on the {corpus.name} test split; trained at L={train_len}.", "",
          precision.describe_line(run), "",
          "Non-overlapping windows:", "", format_table(table, "nonoverlap", lengths, train_len), "",
          f"Sliding window (stride L·{cfg.stride_fraction:g}, last stride scored):", "",
          format_table(table, "sliding", lengths, train_len), ""]
    results["markdown"] = "\n".join(md)
    with open(os.path.join(cfg.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(results["markdown"])
    cfg.write_results(results, t_start)
    return results
