"""Length-extrapolation evaluation of any causal LM.

``model`` is a torch module (or any callable) mapping token ids (B, L) int64
to logits (B, L, V), or to an object with ``.logits`` (Hugging Face models).

Two ways to score a stream at a context length L:

* ``"nonoverlap"`` — cut the stream into consecutive windows of L tokens and
  score every token: the perplexity of a model reading L-token documents
  (positions 0 … L-1 weigh equally).
* ``"sliding"`` — windows of L tokens advancing by ``stride`` (default L/4);
  each window scores only its last ``stride`` tokens (the first window scores
  all), so every scored token after the first window has at least L - stride
  tokens of context.  This isolates the positions beyond the training length
  that extrapolation is about, at ``L / stride`` times the cost.

Both score the same first ``max_tokens`` target tokens of the stream at every
length, so perplexities are comparable across lengths and models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..._validate import check_choice, check_int
from ..analysis import P_ROPE_FRACTIONS, p_rope

MODES = ("nonoverlap", "sliding")


@dataclass
class PerplexityResult:
    """Perplexity of one model at one context length.

    Attributes:
        perplexity: exp(mean negative log-likelihood), in the model's tokens.
        nll: mean negative log-likelihood (nats per token).
        tokens: how many tokens were scored.
        length, mode, stride: how they were scored.
        nll_by_position: (L,) mean NLL of the scored tokens at each window
            position ("nonoverlap" only; empty for "sliding").
    """

    perplexity: float
    nll: float
    tokens: int
    length: int
    mode: str
    stride: int
    nll_by_position: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, Any]:
        return {"perplexity": self.perplexity, "nll": self.nll, "tokens": self.tokens, "length": self.length,
                "mode": self.mode, "stride": self.stride}


def _logits(model: Callable[..., Any], ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    logits = getattr(out, "logits", out)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[:2] != ids.shape:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model must return logits (B, L, V) for ids {tuple(ids.shape)}, got {shape}")
    return logits


def _as_stream(tokens: Any) -> torch.Tensor:
    # a copy: streams may be read-only NumPy views (np.frombuffer), which torch cannot wrap
    t = tokens.detach().cpu() if isinstance(tokens, torch.Tensor) else torch.tensor(np.asarray(tokens))
    if t.dim() != 1:
        raise ValueError(f"tokens must be a 1-D stream of token ids, got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids, got {t.dtype}")
    return t.to(torch.int64)


def window_plan(n_tokens: int, length: int, mode: str, stride: int, max_tokens: int) -> list[tuple[int, int]]:
    """The windows as (start, first scored index within the window).

    Window w covers stream[start : start + length] as input and is scored on
    targets stream[start + s + 1 : start + length + 1] for s = its first scored
    index.  Windows never run past the stream.
    """
    plan: list[tuple[int, int]] = []
    if mode == "nonoverlap":
        count = min(max(1, max_tokens // length), (n_tokens - 1) // length)
        plan = [(w * length, 0) for w in range(count)]
    else:
        start, scored = 0, 0
        while start + length + 1 <= n_tokens and scored < max_tokens:
            first = 0 if start == 0 else length - stride
            plan.append((start, first))
            scored += length - first
            start += stride
    return plan


@torch.no_grad()
def perplexity(
    model: Callable[..., Any],
    tokens: Any,
    length: int,
    *,
    mode: str = "nonoverlap",
    stride: int | None = None,
    max_tokens: int = 16384,
    batch_tokens: int = 8192,
    progress: bool = False,
    desc: str | None = None,
) -> PerplexityResult:
    """Perplexity of ``model`` on the token stream ``tokens`` at context ``length``.

    Args:
        model: ids (B, L) -> logits (B, L, V) (or an output with ``.logits``).
        tokens: 1-D token ids (NumPy or torch).
        length: context length L (window size).
        mode: "nonoverlap" or "sliding" (see the module doc).
        stride: sliding step (default L // 4; at least 1).
        max_tokens: how many tokens to score (the first ones of the stream).
        batch_tokens: windows per forward pass = max(1, batch_tokens // L).
    """
    length = check_int("length", length, min_value=1)
    mode = check_choice("mode", mode, MODES)
    max_tokens = check_int("max_tokens", max_tokens, min_value=1)
    batch_tokens = check_int("batch_tokens", batch_tokens, min_value=1)
    stride = max(1, length // 4) if stride is None else check_int("stride", stride, min_value=1)
    if stride > length:
        raise ValueError(f"stride must be <= length={length}, got {stride}")
    stream = _as_stream(tokens)
    if stream.numel() < length + 1:
        raise ValueError(f"the token stream has {stream.numel()} tokens; length={length} needs at least {length + 1}")
    plan = window_plan(stream.numel(), length, mode, stride, max_tokens)
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()  # type: ignore[union-attr]
    device = _model_device(model)
    per_batch = max(1, batch_tokens // length)
    total_nll, total_count = 0.0, 0
    pos_sum = torch.zeros(length, dtype=torch.float64)
    pos_count = torch.zeros(length, dtype=torch.float64)
    batches = range(0, len(plan), per_batch)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=desc or f"{mode} L={length}", leave=False, unit="batch")
    try:
        for b0 in batches:
            chunk = plan[b0: b0 + per_batch]
            idx = torch.tensor([s for s, _ in chunk])[:, None] + torch.arange(length + 1)[None, :]
            windows = stream[idx]
            logits = _logits(model, windows[:, :-1].to(device))
            if logits.dtype in (torch.float16, torch.bfloat16):
                logits = logits.float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:].to(device),
                                                    reduction="none").double().cpu()  # (B, L)
            first = torch.tensor([f for _, f in chunk])[:, None]
            scored = torch.arange(length)[None, :] >= first
            total_nll += float(nll[scored].sum())
            total_count += int(scored.sum())
            pos_sum += (nll * scored).sum(0)
            pos_count += scored.sum(0)
    finally:
        if was_training:
            model.train()  # type: ignore[union-attr]
    mean = total_nll / total_count
    by_pos = (pos_sum / pos_count.clamp_min(1)).numpy() if mode == "nonoverlap" else np.zeros(0)
    return PerplexityResult(math.exp(mean), mean, total_count, length, mode,
                            stride if mode == "sliding" else length, by_pos)


def _model_device(model: Any) -> torch.device:
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return p.device
    return torch.device("cpu")


def evaluate_lengths(
    model: Callable[..., Any],
    tokens: Any,
    lengths: Sequence[int],
    *,
    modes: Sequence[str] = MODES,
    max_tokens: int = 16384,
    sliding_max_tokens: int | None = None,
    stride_fraction: float = 0.25,
    progress: bool = False,
    desc: str = "",
) -> dict[str, dict[int, PerplexityResult]]:
    """:func:`perplexity` at every length and mode: ``{mode: {length: result}}``.

    The sliding stride is ``max(1, round(stride_fraction·L))``; the sliding mode
    scores ``sliding_max_tokens`` tokens (default ``max_tokens``).
    """
    out: dict[str, dict[int, PerplexityResult]] = {}
    for mode in modes:
        check_choice("mode", mode, MODES)
        res: dict[int, PerplexityResult] = {}
        for n in lengths:
            n = check_int("length", n, min_value=1)
            budget = max_tokens if mode == "nonoverlap" or sliding_max_tokens is None else sliding_max_tokens
            stride = max(1, round(stride_fraction * n))
            res[n] = perplexity(model, tokens, n, mode=mode, stride=stride, max_tokens=budget, progress=progress,
                                desc=f"{desc} {mode} L={n}".strip())
        out[mode] = res
    return out


def p_rope_sweep(
    model: Any,
    tokens: Any,
    lengths: Sequence[int],
    fractions: Sequence[float] = P_ROPE_FRACTIONS,
    *,
    max_tokens: int = 16384,
    progress: bool = False,
) -> dict[float, dict[int, float]]:
    """Perplexity (non-overlapping windows) for each p-RoPE fraction and length.

    Returns ``{fraction: {length: perplexity}}``.  ``tokens`` is a 1-D array
    of token ids in the model's vocabulary.
    """
    out: dict[float, dict[int, float]] = {}
    for frac in fractions:
        with p_rope(model, frac):
            out[float(frac)] = {int(n): perplexity(model, tokens, int(n), max_tokens=max_tokens,
                                                   progress=progress).perplexity for n in lengths}
    return out
