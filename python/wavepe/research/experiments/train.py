"""Training loop of the extrapolation experiment: random crops, AdamW, cosine schedule."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..._validate import check_int, check_real
from . import precision


@dataclass
class TrainConfig:
    """How a model is trained.

    Each step draws ``batch_size`` crops of ``train_len + 1`` bytes at uniform
    random offsets of the training stream (a seeded generator: every model of
    one experiment sees the same crops in the same order).  AdamW with linear
    warm-up over ``warmup`` steps, then cosine decay to ``min_lr_ratio·lr``.
    """

    steps: int = 500
    batch_size: int = 16
    train_len: int = 128
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("steps", self.steps, min_value=1)
        check_int("batch_size", self.batch_size, min_value=1)
        check_int("train_len", self.train_len, min_value=2)
        check_real("lr", self.lr, positive=True)
        check_int("warmup", self.warmup, min_value=0)
        check_int("seed", self.seed)

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_lm(model: torch.nn.Module, tokens: np.ndarray, cfg: TrainConfig, *, progress: bool = False,
             desc: str = "train",
             batches: Callable[[torch.Generator, int], Any] | None = None,
             stop: Callable[[int, torch.nn.Module], bool] | None = None,
             dtype: str = "float32") -> dict[str, Any]:
    """Train ``model`` (ids (B, L) -> logits (B, L, V)) on the byte stream ``tokens``.

    The model trains on the device of its parameters (batches are drawn on
    the CPU, so every device sees the same ones, and moved there).
    ``dtype`` (:data:`~wavepe.research.experiments.precision.DTYPES`):
    "float32", or "bf16" / "fp16" for mixed precision: the forward pass and
    the loss under ``torch.autocast``, parameters and optimizer state as they
    are (float32), fp16 with a ``GradScaler``.

    ``batches(generator, batch_size)``, if given, draws each step's batch
    (B, train_len + 1) instead of the random crops of ``tokens`` (e.g. a
    :class:`~wavepe.experiments.retrieval.PasskeyMixture`); it must draw from the
    generator only, so that the same seed gives the same batches.  It may
    return ``(batch, weights)`` with weights (B, train_len) >= 0 on the
    targets: the optimised loss is then the weighted mean of the token losses
    (the history still records the plain mean, comparable across runs).

    ``stop(steps_done, model)``, if given, is called after every step (the
    model in eval mode during the call); returning True ends training there,
    before ``cfg.steps`` (the schedule stays the one of ``cfg.steps``).

    Returns the history: per-step loss (nats/token), seconds, tokens seen,
    steps run.
    """
    stream = torch.tensor(np.asarray(tokens), dtype=torch.int64)  # a copy (read-only views are fine)
    if stream.numel() < cfg.train_len + 2:
        raise ValueError(f"training stream has {stream.numel()} tokens; train_len={cfg.train_len} needs more")
    precision.check_dtype_name(dtype)
    device = next(model.parameters()).device
    scaler = precision.grad_scaler(device, dtype)
    gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    offsets_hi = stream.numel() - cfg.train_len - 1
    window = torch.arange(cfg.train_len + 1)
    losses: list[float] = []
    model.train()
    steps = range(cfg.steps)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(steps, desc=desc, unit="step", leave=False)
        steps = bar
    t0 = time.perf_counter()
    for step in steps:
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(step)
        weights = None
        if batches is None:
            starts = torch.randint(0, offsets_hi + 1, (cfg.batch_size,), generator=gen)
            batch = stream[starts[:, None] + window[None, :]]
        else:
            batch = batches(gen, cfg.batch_size)
            if isinstance(batch, tuple):
                batch, weights = batch
            if tuple(batch.shape) != (cfg.batch_size, cfg.train_len + 1):
                raise ValueError(f"batches returned shape {tuple(batch.shape)}; expected "
                                 f"({cfg.batch_size}, train_len + 1 = {cfg.train_len + 1})")
            if weights is not None and tuple(weights.shape) != (cfg.batch_size, cfg.train_len):
                raise ValueError(f"batches returned weights of shape {tuple(weights.shape)}; expected "
                                 f"({cfg.batch_size}, train_len = {cfg.train_len})")
        batch = batch.to(device)
        with precision.autocast(device, dtype):
            logits = model(batch[:, :-1])
            # cross_entropy is on autocast's float32 list: the loss is float32 whatever the logits are
            token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")
        loss = token_loss.mean()
        if weights is not None:
            weights = weights.to(device)
        objective = loss if weights is None else (token_loss * weights).sum() / weights.sum().clamp_min(1e-12)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            objective.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
        else:
            scaler.scale(objective).backward()
            if cfg.grad_clip > 0:
                scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(opt)  # skipped when the scaled gradients overflowed; update() then lowers the scale
            scaler.update()
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(f"{desc}: loss became {value} at step {step}")
        losses.append(value)
        if bar is not None and step % 10 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
        if stop is not None:
            model.eval()
            done = stop(step + 1, model)
            model.train()
            if done:
                break
    model.eval()
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    return {"loss": losses, "seconds": seconds, "tokens": len(losses) * cfg.batch_size * cfg.train_len,
            "steps": len(losses), "final_loss": float(np.mean(losses[-max(1, min(50, len(losses) // 10)):]))}
