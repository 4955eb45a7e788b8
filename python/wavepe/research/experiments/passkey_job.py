"""``wavepe extrapolate --task passkey``: long-range retrieval beyond the training length.

The same models, encodings and knobs as the perplexity task
(:mod:`wavepe.research.experiments.extrapolate`), trained at L_train on the corpus
mixed with passkey examples that fit in L_train
(:class:`~wavepe.research.experiments.retrieval.PasskeyMixture`), then probed with
:func:`~wavepe.research.experiments.retrieval.passkey` at multiples of L_train with the
key at depths 0 … 1 of the context.  Writes ``results.json`` (accuracy per
encoding × length × depth with trial counts), ``results.md`` (the tables),
``passkey.png`` (one needle-in-a-haystack heatmap per encoding),
``passkey_distance.png`` (accuracy against the key's distance) and the
checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..._validate import check_int, check_real
from . import precision
from .corpus import Corpus
from .extrapolate import JobConfig, _infer_label, _theta_at, machine_info, read_results
from .model import LMConfig, TinyLM
from .retrieval import DEFAULT_DEPTHS, PasskeyFormat, PasskeyMixture, PasskeyResult, haystack, min_length, passkey
from .train import TrainConfig, train_lm

# Removed from the filler (training rows and evaluation): the digits and the
# marker of the default format occur only in the needle and the answer, so a
# miss at a long context means the model did not read that far — not that a
# number elsewhere in the text looked like the key (the standard library is
# full of them) or that a stray '~' (one per ~30 kB) marked something else.
FILLER_REMOVED = "0123456789~"
# the early-stopping probe at the training length (valid split)
CHECK_DEPTHS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
CHECK_TRIALS = 8
# below this accuracy at 1x, a row's longer lengths say nothing about extrapolation
LEARNED = 0.5


@dataclass
class PasskeyJobConfig(JobConfig):
    """Everything a passkey run depends on: :class:`JobConfig` and the task's own knobs.

    ``passkey_fraction`` of the training rows are passkey examples of
    exactly ``train_len + 1`` tokens (the rest are plain corpus crops); the
    ``key_digits`` answer tokens of those rows weigh ``answer_weight`` times
    a text token in the loss.  Evaluation: ``trials`` examples per
    (length, depth) cell, filler from the test split.

    Training stops early once retrieval is learned at the training length:
    every ``check_every`` steps the model is probed at L_train on the valid
    split (``CHECK_DEPTHS`` × ``CHECK_TRIALS`` examples, other keys than the
    test's); at ``stop_accuracy`` or more it stops, else it runs all
    ``train.steps`` (the cap; the schedule is the cap's).  ``check_every=0``
    trains every model for exactly ``train.steps``.
    """

    out: str = "runs/passkey"
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=1500))
    depths: tuple[float, ...] = DEFAULT_DEPTHS
    trials: int = 20
    key_digits: int = 5
    passkey_fraction: float = 1.0
    answer_weight: float = 50.0
    check_every: int = 100
    stop_accuracy: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("check_every", self.check_every, min_value=0)
        if not 0.0 < check_real("stop_accuracy", self.stop_accuracy) <= 1.0:
            raise ValueError(f"stop_accuracy must be in (0, 1], got {self.stop_accuracy}")
        if not self.depths:
            raise ValueError("depths must list at least one depth in [0, 1]")
        for d in self.depths:
            if not 0.0 <= check_real("depth", d) <= 1.0:
                raise ValueError(f"depths must lie in [0, 1] (0 = start of the context, 1 = just before the "
                                 f"question), got {d!r}")
        check_int("trials", self.trials, min_value=1)
        check_int("key_digits", self.key_digits, min_value=1)
        if not 0.0 < check_real("passkey_fraction", self.passkey_fraction) <= 1.0:
            raise ValueError(f"passkey_fraction must be in (0, 1], got {self.passkey_fraction}")
        check_real("answer_weight", self.answer_weight, positive=True)
        shortest = min_length(self.key_digits, self.format)
        if self.train.train_len + 1 < shortest:
            raise ValueError(f"train_len {self.train.train_len} is too short for passkey examples with a "
                             f"{self.key_digits}-digit key: they need at least {shortest} tokens "
                             f"(train_len >= {shortest - 1})")

    @property
    def format(self) -> PasskeyFormat:
        return PasskeyFormat()

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "format": self.format.to_dict()}


def passkey_quick_config(**overrides: Any) -> PasskeyJobConfig:
    """The ``--quick`` preset (smoke runs, about a minute): the perplexity task's quick model and length."""
    model = LMConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=32, intermediate_size=256)
    train = TrainConfig(steps=200, batch_size=8, train_len=64, warmup=20)
    base: dict[str, Any] = dict(model=model, train=train, factors=(1, 2, 4), depths=(0.0, 0.5, 1.0), trials=20)
    base.update(overrides)
    return PasskeyJobConfig(**base)


def merge_results(parts: Sequence[PasskeyResult]) -> PasskeyResult:
    """Results of separate :func:`passkey` calls (one length each, same depths) as one grid."""
    first = parts[0]
    return PasskeyResult(
        [n for p in parts for n in p.lengths], list(first.depths), first.trials, first.key_digits,
        np.concatenate([p.correct for p in parts]), np.concatenate([p.digit_correct for p in parts]),
        np.concatenate([p.distance for p in parts]), first.method, dict(first.format))


def format_summary(rows: dict[str, dict[str, Any]], lengths: Sequence[int], train_len: int) -> str:
    """Markdown: mean exact-match accuracy over depths, one row per encoding, one column per length."""
    head = "| encoding | steps | " + " | ".join(f"{n // train_len}× ({n})" for n in lengths) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(lengths)]
    for label, row in rows.items():
        cells = []
        for n in lengths:
            i = row["lengths"].index(n)
            hits, total = sum(row["correct"][i]), row["trials"] * len(row["depths"])
            cells.append(f"{100 * hits / total:.0f}%")
        flag = " (not learned at 1×)" if row.get("learned") is False else ""
        lines.append(f"| {label}{flag} | {row.get('steps', '–')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_grid(row: dict[str, Any], train_len: int) -> str:
    """Markdown: one encoding's accuracy (%) by length (rows) and depth (columns)."""
    depths = row["depths"]
    lines = ["| length | " + " | ".join(f"{100 * d:g}%" for d in depths) + " |",
             "|---|" + "---:|" * len(depths)]
    for n, acc in zip(row["lengths"], row["accuracy"]):
        lines.append(f"| {n // train_len}× ({n}) | " + " | ".join(f"{100 * a:.0f}" for a in acc) + " |")
    return "\n".join(lines)


def make_figures(results: dict[str, Any], out: str) -> dict[str, str]:
    """passkey.png and passkey_distance.png from a results dict."""
    from . import plots

    train_len = results["config"]["train"]["train_len"]
    rows = results["rows"]
    grids = {label: np.asarray(row["accuracy"]) for label, row in rows.items()}
    lengths, depths = results["lengths"], results["depths"]
    curves = {label: (np.asarray(row["distance"]).ravel(), np.asarray(row["accuracy"]).ravel())
              for label, row in rows.items()}
    title = f"passkey retrieval, {results['corpus']['name']}, trained at L={train_len}"
    return {
        "passkey": plots.plot_passkey_heatmaps(grids, lengths, depths, os.path.join(out, "passkey.png"), train_len,
                                               trials=results["trials"], chance=results["chance"], title=title),
        "passkey_distance": plots.plot_passkey_by_distance(curves, os.path.join(out, "passkey_distance.png"),
                                                           train_len, title),
    }


def replot(out: str) -> dict[str, str]:
    """Redraw the figures of a finished passkey run from ``out/results.json``."""
    return make_figures(read_results(out, "passkey"), out)


def markdown(results: dict[str, Any]) -> str:
    """The tables of a results dict (terminal and results.md)."""
    train_len = results["config"]["train"]["train_len"]
    cfg = results["config"]
    stopping = (f"up to {cfg['train']['steps']} steps, stopping at the first check (every {cfg['check_every']}) "
                f"with >= {100 * cfg['stop_accuracy']:.0f}% at L={train_len} on the valid split"
                if cfg.get("check_every") else f"{cfg['train']['steps']} steps")
    text = [f"Passkey retrieval on the {results['corpus']['name']} test split; trained at L={train_len} "
            f"({stopping}; {cfg['passkey_fraction']:g} of the rows passkey examples). "
            f"Exact match of a {cfg['key_digits']}-digit key under greedy decoding, {results['trials']} trials per "
            f"cell, {len(results['depths'])} depths; chance {results['chance']:.0e}.", "",
            *([precision.describe_line(results["run"]), ""] if "run" in results else []),
            f"Mean accuracy over depths (rows below {100 * LEARNED:.0f}% at 1× did not learn the task, so their "
            "longer lengths say nothing about extrapolation):", "",
            format_summary(results["rows"], results["lengths"], train_len), ""]
    for label, row in results["rows"].items():
        text += [f"{label} — accuracy (%) by length and depth (0% = key at the start of the context):", "",
                 format_grid(row, train_len), ""]
    return "\n".join(text)


def run_passkey(cfg: PasskeyJobConfig, *, progress: bool = True, corpus: Corpus | None = None,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train every encoding of ``cfg`` on the passkey mixture, probe retrieval, write ``cfg.out``."""
    t_start = time.perf_counter()
    corpus = cfg.start(corpus)
    train_len = cfg.train.train_len
    lengths = cfg.lengths
    fmt = cfg.format
    filler = haystack(corpus.test, FILLER_REMOVED)
    check_filler = haystack(corpus.valid, FILLER_REMOVED)
    need = max(lengths) - min_length(cfg.key_digits, fmt)
    if corpus.train.size < train_len + 2:
        raise ValueError(f"corpus {corpus.name!r}: the train split has {corpus.train.size} bytes; train_len "
                         f"{train_len} needs at least {train_len + 2}")
    if filler.size < need:
        raise ValueError(f"corpus {corpus.name!r}: the test split has {filler.size} bytes of filler; evaluating at "
                         f"length {max(lengths)} needs at least {need}")
    if cfg.check_every and check_filler.size < train_len:
        raise ValueError(f"corpus {corpus.name!r}: the valid split has {check_filler.size} bytes of filler; the "
                         f"early-stopping probe at length {train_len} needs at least {train_len} (or check_every=0)")
    log(f"corpus {corpus.name}: " + ", ".join(f"{s} {corpus.split(s).size:,} bytes" for s in ("train", "valid",
                                                                                                "test")))
    mixture = PasskeyMixture(corpus.train, train_len, cfg.passkey_fraction, key_digits=cfg.key_digits,
                             answer_weight=cfg.answer_weight, filler=haystack(corpus.train, FILLER_REMOVED), fmt=fmt)
    run = cfg.run_info()
    log(precision.describe_line(run))
    results: dict[str, Any] = {
        "task": "passkey", "config": cfg.to_dict(), "corpus": corpus.describe(), "machine": machine_info(), "run": run,
        "lengths": lengths, "depths": list(cfg.depths), "trials": cfg.trials, "key_digits": cfg.key_digits,
        "chance": 10.0 ** -cfg.key_digits, "filler": f"test split without the bytes {FILLER_REMOVED!r} ({filler.size:,} bytes)",
        "training_mixture": {**mixture.describe(), "filler": f"train split without the bytes {FILLER_REMOVED!r}"},
        "scoring": "exact match of the key under greedy decoding (one teacher-forced pass, module doc of "
                   "wavepe.research.experiments.retrieval)",
        "rows": {}, "models": {}}

    def probe(model: TinyLM, ns: Sequence[int], desc: str) -> PasskeyResult:
        return passkey(model, filler, ns, cfg.depths, trials=cfg.trials, key_digits=cfg.key_digits, seed=cfg.seed,
                       fmt=fmt, progress=progress, desc=desc)

    for spec in cfg.specs:
        t0 = time.perf_counter()
        model = cfg.new_model(spec)
        tcfg = dataclasses.replace(cfg.train, seed=cfg.seed)
        checks: list[tuple[int, float]] = []

        def learned(steps_done: int, model: torch.nn.Module) -> bool:
            if not cfg.check_every or steps_done % cfg.check_every:
                return False
            r = passkey(model, check_filler, [train_len], CHECK_DEPTHS, trials=CHECK_TRIALS,
                        key_digits=cfg.key_digits, seed=cfg.seed + 1, fmt=fmt)
            checks.append((steps_done, float(r.accuracy.mean())))
            return checks[-1][1] >= cfg.stop_accuracy

        history = train_lm(model, corpus.train, tcfg, progress=progress, desc=f"train {spec.key}", batches=mixture,
                           stop=learned, dtype=cfg.dtype)
        t_train = time.perf_counter() - t0
        info: dict[str, Any] = {"label": spec.label, "parameters": model.num_parameters(), "train_seconds": t_train,
                                "steps": history["steps"], "checks": checks,
                                "final_train_loss": history["final_loss"],
                                "train_loss": history["loss"][:: max(1, len(history["loss"]) // 200)]}
        path = cfg.save_checkpoint(model, spec, {"corpus": corpus.name, "steps": history["steps"],
                                                 "task": "passkey"})
        if path is not None:
            info["checkpoint"] = path
        res = probe(model, lengths, f"passkey {spec.key}")

        def row(r: PasskeyResult) -> dict[str, Any]:
            at_train_len = r.accuracy_at(train_len) if train_len in r.lengths else None
            return {**r.to_dict(), "steps": history["steps"],
                    "learned": None if at_train_len is None else bool(at_train_len >= LEARNED)}

        results["rows"][spec.label] = row(res)
        if spec.key == "rope-ltrain":
            base = model.config.rope_config()
            for infer in cfg.infer_thetas:
                parts = []
                try:
                    for n in lengths:
                        model.set_rope(base.with_theta(_theta_at(infer, n)))
                        parts.append(probe(model, [n], f"passkey {spec.key} θ_inf L={n}"))
                finally:
                    model.set_rope(base)
                results["rows"][_infer_label(spec, infer)] = row(merge_results(parts))
        info["seconds"] = time.perf_counter() - t0
        results["models"][spec.key] = info
        log(f"{spec.label}: trained {history['steps']} steps in {t_train:.0f} s (loss {history['final_loss']:.3f}), probed "
            f"{info['seconds'] - t_train:.0f} s; accuracy " + " ".join(f"{n}:{100 * res.accuracy_at(n):.0f}%"
                                                                       for n in lengths))
        cfg.write_results(results, t_start)

    results["figures"] = make_figures(results, cfg.out)
    results["markdown"] = markdown(results)
    with open(os.path.join(cfg.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(results["markdown"])
    cfg.write_results(results, t_start)
    return results
