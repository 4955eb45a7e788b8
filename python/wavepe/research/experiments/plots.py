"""Figures of the experiment and the band analysis (matplotlib, Agg, no pyplot state).

Every function writes one PNG and returns its path.  Figures are built on
``matplotlib.figure.Figure`` directly, so nothing touches the user's pyplot
backend or global figure list.
"""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import numpy as np

MODE_TITLES = {"nonoverlap": "non-overlapping windows", "sliding": "sliding window (last L/4 scored)"}


def _figure(width: float, height: float):  # -> Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _log_axes(ax, lengths: Sequence[int], train_len: int) -> None:
    """Log-log axes with the evaluated lengths as x ticks and plain numbers on y."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(lengths))
    ax.set_xticklabels([f"{n}\n({n / train_len:g}×)" for n in lengths], fontsize=8)
    ax.xaxis.set_minor_formatter(NullFormatter())
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="both", labelsize=7)


def _save(fig, path: str | os.PathLike[str]) -> str:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    return path


def plot_perplexity(table: Mapping[str, Mapping[str, Mapping[int, float]]], path: str | os.PathLike[str],
                    train_len: int, title: str = "") -> str:
    """Perplexity vs evaluation length, one line per encoding, one panel per mode.

    ``table[label][mode][length] = perplexity``.
    """
    modes = [m for m in MODE_TITLES if any(m in row for row in table.values())]
    fig = _figure(5.2 * max(1, len(modes)), 4.2)
    axes = fig.subplots(1, max(1, len(modes)), squeeze=False)[0]
    markers = "osD^v<>ph*"
    all_lengths = sorted({n for row in table.values() for res in row.values() for n in res})
    for ax, mode in zip(axes, modes):
        for i, (label, row) in enumerate(table.items()):
            if mode not in row:
                continue
            lengths = sorted(row[mode])
            ppl = [row[mode][n] for n in lengths]
            ax.plot(lengths, ppl, marker=markers[i % len(markers)], label=label,
                    linestyle="--" if "→" in label else "-")
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
        _log_axes(ax, all_lengths, train_len)
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("perplexity (bytes)")
        ax.set_title(MODE_TITLES.get(mode, mode), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_attention_heatmaps(maps: Mapping[str, np.ndarray], path: str | os.PathLike[str], train_len: int,
                            title: str = "") -> str:
    """Attention weights (queries × keys, log10 colour scale) of one head per encoding.

    ``maps[label]`` is (L, L) softmax weights; lines mark the training length.
    """
    n = len(maps)
    cols = min(3, max(1, n))
    rows = max(1, math.ceil(n / cols))
    fig = _figure(3.6 * cols, 3.4 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    image = None
    for ax, (label, probs) in zip(axes, maps.items()):
        p = np.asarray(probs, dtype=np.float64)
        with np.errstate(divide="ignore"):
            logp = np.log10(np.maximum(p, 1e-30))
        logp[np.triu(np.ones_like(p, dtype=bool), 1)] = np.nan
        image = ax.imshow(logp, cmap="viridis", vmin=-6, vmax=0, interpolation="nearest", aspect="equal")
        ax.axhline(train_len - 0.5, color="white", linewidth=0.6, linestyle="--")
        ax.axvline(train_len - 0.5, color="white", linewidth=0.6, linestyle="--")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[n:]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes[:n].tolist(), shrink=0.8, label="log10 attention weight")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_loss_by_position(curves: Mapping[str, np.ndarray], path: str | os.PathLike[str], train_len: int,
                          title: str = "", smooth: int | None = None) -> str:
    """Mean NLL at each position of the window, per encoding.

    Top: the loss (moving average over ``smooth`` positions, default L/32).
    Bottom: each encoding minus the mean of all encodings at that position —
    the text's own difficulty, common to all models, cancels there, so what is
    left is how each model's loss moves with position.
    """
    valid = {k: np.asarray(v, dtype=np.float64) for k, v in curves.items() if np.asarray(v).size}
    fig = _figure(6.5, 6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    if valid:
        length = min(c.size for c in valid.values())
        k = max(1, min(smooth or max(4, length // 32), length))
        kernel = np.ones(k) / k
        smoothed = {label: np.convolve(c[:length], kernel, mode="valid") for label, c in valid.items()}
        mean = np.mean(list(smoothed.values()), axis=0)
        x = np.arange(length - k + 1) + (k - 1) / 2
        for label, c in smoothed.items():
            style = dict(linestyle="--" if "→" in label else "-", linewidth=1.2)
            top.plot(x, c, label=label, **style)
            bottom.plot(x, c - mean, label=label, **style)
    for ax in (top, bottom):
        ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
        ax.grid(True, alpha=0.3)
    top.set_ylabel("loss (nats/byte)")
    bottom.set_ylabel("minus the mean of all encodings")
    bottom.set_xlabel("position in the window")
    if valid:
        top.legend(fontsize=8)
    if title:
        top.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_band_heatmap(mean_norms: np.ndarray, path: str | os.PathLike[str], *, i_band: float | None = None,
                      j_star: float | None = None, per_head: np.ndarray | None = None, title: str = "",
                      max_panels: int = 32) -> str:
    """‖q_i‖₂ heatmaps: rotation pairs (rows) × positions (columns).

    ``mean_norms`` (layers, heads, L, d/2) (or (heads, L, d/2), or (L, d/2)).
    One panel per (layer, head) with that head's band (``per_head``
    (layers, heads)) marked, when there are at most ``max_panels`` heads in
    all; otherwise one panel per layer, averaged over its heads, marked with
    the heads' mean band.  ``j_star`` (the predicted band) is drawn on every panel.
    """
    m = np.asarray(mean_norms, dtype=np.float64)
    while m.ndim < 4:
        m = m[None]
    if m.ndim != 4:
        raise ValueError(f"mean_norms must be (layers, heads, L, d/2), got shape {np.shape(mean_norms)}")
    layers, heads = m.shape[:2]
    bands = None if per_head is None else np.asarray(per_head, dtype=np.float64).reshape(layers, heads)
    if layers * heads <= max_panels:
        panels = [(m[i, h], None if bands is None else bands[i, h], f"layer {i}, head {h}")
                  for i in range(layers) for h in range(heads)]
        cols = heads if heads > 1 else min(4, layers)
    else:
        step = max(1, math.ceil(layers / max_panels))
        panels = [(m[i].mean(axis=0), None if bands is None else float(bands[i].mean()), f"layer {i} (mean of heads)")
                  for i in range(0, layers, step)]
        cols = min(8, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = _figure(3.3 * cols, 2.6 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for i, (norms, band, label) in enumerate(panels):
        ax = axes[i]
        image = ax.imshow(norms.T, aspect="auto", origin="lower", cmap="magma", interpolation="nearest")
        if band is not None:
            ax.axhline(band, color="cyan", linewidth=1.2, label="measured band")
        if j_star is not None:
            ax.axhline(j_star, color="lime", linewidth=1.2, linestyle="--", label="predicted j*")
        ax.set_title(label, fontsize=8)
        ax.set_xlabel("position", fontsize=7)
        ax.set_ylabel("rotation pair i", fontsize=7)
        ax.tick_params(labelsize=6)
        fig.colorbar(image, ax=ax, shrink=0.8).ax.tick_params(labelsize=6)
        if i == 0 and (band is not None or j_star is not None):
            ax.legend(fontsize=6, loc="upper right")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    suptitle = title
    if i_band is not None:
        suptitle = (suptitle + "  " if suptitle else "") + f"i_band = {i_band:.2f}"
    if j_star is not None:
        suptitle += f", predicted j* = {j_star:g}"
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return _save(fig, path)


def plot_p_rope_sweep(sweep: Mapping[float, Mapping[int, float]], path: str | os.PathLike[str], train_len: int,
                      title: str = "") -> str:
    """Perplexity vs length for each p-RoPE fraction r."""
    fig = _figure(5.5, 4.0)
    ax = fig.subplots()
    for frac, row in sweep.items():
        lengths = sorted(row)
        ax.plot(lengths, [row[n] for n in lengths], marker="o", label=f"r = {frac:g}")
    ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
    _log_axes(ax, sorted({n for row in sweep.values() for n in row}), train_len)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_passkey_heatmaps(grids: Mapping[str, np.ndarray], lengths: Sequence[int], depths: Sequence[float],
                          path: str | os.PathLike[str], train_len: int, *, trials: int | None = None,
                          chance: float | None = None, title: str = "") -> str:
    """Passkey accuracy, one panel per encoding, in the needle-in-a-haystack layout.

    ``grids[label]`` is (len(lengths), len(depths)) exact-match accuracy in [0, 1].
    Columns are context lengths, rows are the needle's depth (0 % = start of
    the context, at the top); every cell is annotated with its accuracy in %.
    """
    from matplotlib.colors import LinearSegmentedColormap

    n = len(grids)
    cols = min(3, max(1, n))
    rows = max(1, math.ceil(n / cols))
    fig = _figure(3.3 * cols + 0.8, 3.4 * rows + 0.3)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    cmap = LinearSegmentedColormap.from_list("passkey", ["#d7301f", "#fdcc8a", "#31a354"])
    image = None
    annotate = len(lengths) * len(depths) <= 120
    for ax, (label, acc) in zip(axes, grids.items()):
        a = np.asarray(acc, dtype=np.float64)
        if a.shape != (len(lengths), len(depths)):
            raise ValueError(f"grid {label!r} has shape {a.shape}; expected ({len(lengths)}, {len(depths)})")
        image = ax.imshow(a.T, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(lengths)))
        ax.set_xticklabels([f"{m}\n({m / train_len:g}×)" for m in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)))
        ax.set_yticklabels([f"{100 * d:g}%" for d in depths], fontsize=7)
        if annotate:
            for i in range(len(lengths)):
                for j in range(len(depths)):
                    ax.text(i, j, f"{100 * a[i, j]:.0f}", ha="center", va="center", fontsize=6)
        ax.set_title(f"{label}  (mean {100 * a.mean():.0f}%)", fontsize=9)
        ax.set_xlabel("context length (tokens)", fontsize=8)
        ax.set_ylabel("needle depth", fontsize=8)
    for ax in axes[n:]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes[:n].tolist(), shrink=0.8, label="exact-match accuracy")
    notes = []
    if trials is not None:
        notes.append(f"{trials} trials per cell")
    if chance is not None:
        notes.append(f"chance {chance:.0e}")
    # two lines: one panel is narrower than the title and the notes side by side
    heading = "\n".join(t for t in (title, "; ".join(notes)) if t)
    if heading:
        fig.suptitle(heading, fontsize=9)
    return _save(fig, path)


def plot_passkey_by_distance(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | os.PathLike[str],
                             train_len: int, title: str = "") -> str:
    """Passkey accuracy against the key's distance from the question, one line per encoding.

    ``curves[label] = (distances, accuracies)`` (any order; drawn sorted by
    distance).  The dotted line marks the training length: a model whose
    receptive field ends there drops to zero right of it.
    """
    fig = _figure(6.0, 4.0)
    ax = fig.subplots()
    markers = "osD^v<>ph*"
    for i, (label, (dist, acc)) in enumerate(curves.items()):
        d = np.asarray(dist, dtype=np.float64)
        a = np.asarray(acc, dtype=np.float64)
        order = np.argsort(d, kind="stable")
        ax.plot(d[order], a[order], marker=markers[i % len(markers)], markersize=3, linewidth=1, label=label,
                linestyle="--" if "→" in label else "-")
    ax.axvline(train_len, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("symlog", linthresh=max(1, train_len // 8), base=2)
    ax.set_xlabel("distance from the key to the question (tokens)")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)
