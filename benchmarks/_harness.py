"""Shared timing, table and JSON helpers of the benchmark scripts.

Targets are ratios measured in one run: the candidate and its reference are
timed in alternation (ABAB...) so that drift in machine load hits both, and
each figure is the median of the repeats.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from typing import Any, Callable, Sequence

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    from wavepe._platform import cpu_model

    info: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    try:
        import wavepe

        info["wavepe_isa"] = wavepe.active_isa()
        info["cpu_isa"] = wavepe.cpu_isa()
    except Exception:  # pragma: no cover
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:  # pragma: no cover
        pass
    return info


def _sync() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:  # pragma: no cover
        pass


def time_once(fn: Callable[[], Any]) -> float:
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - t0


def compare_samples(fns: dict[str, Callable[[], Any]], *, repeat: int = 7, warmup: int = 1,
                    min_seconds: float = 0.0) -> dict[str, list[float]]:
    """Seconds of each function, timed in alternation: one sample of each per round, in round order."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    t_start = time.perf_counter()
    i = 0
    while i < repeat or time.perf_counter() - t_start < min_seconds:
        for name, fn in fns.items():
            samples[name].append(time_once(fn))
        i += 1
    return samples


def compare(fns: dict[str, Callable[[], Any]], *, repeat: int = 7, warmup: int = 1,
            min_seconds: float = 0.0) -> dict[str, float]:
    """Median seconds of each function, timed in alternation."""
    samples = compare_samples(fns, repeat=repeat, warmup=warmup, min_seconds=min_seconds)
    return {k: statistics.median(v) for k, v in samples.items()}


def paired_ratio(samples: dict[str, list[float]], name: str, ref: str) -> float:
    """The median over rounds of name's time / ref's in the same round (compare_samples): on a host whose
    speed changes between rounds (a busy neighbour), each ratio compares two calls made moments apart,
    where the ratio of the two medians may take them from different rounds."""
    return statistics.median(a / b for a, b in zip(samples[name], samples[ref]))


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    m = machine()
    where = (f"{m.get('cpu')}, wavepe ISA {m.get('wavepe_isa')} (CPU supports {m.get('cpu_isa')}), "
             f"{m.get('torch_threads', '?')} torch threads, torch {m.get('torch', '-')}")
    lines = [f"### {title}", "", where, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    text = "\n".join(lines)
    print(text)
    print()
    return text


def flex_attention_with_bias(bias, device) -> Callable[..., Any]:
    """FlexAttention (compiled, static shapes) reading a precomputed (B, H, L, L) bias in its ``score_mod``, with a
    causal block mask: ``(q, k, v) -> out`` for inputs of the bias's length, differentiable in q, k, v.  The first
    call compiles."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    L = bias.shape[-1]
    block_mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, L, L, device=device)
    flex = torch.compile(flex_attention, dynamic=False)

    def score_mod(score, b, h, qi, ki):
        return score + bias[b, h, qi, ki]

    return lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask)


def flex_attention_with_qt(table, r_lo: int, scale: float, L: int, device) -> Callable[..., Any]:
    """FlexAttention (compiled, static shapes) with the wavelet / relative bias the way a user without wavepe writes it:
    P = scale * q T^T, (B, H, L, R) for a table of R rows from distance ``r_lo`` (B H L R values, not L^2), and a
    ``score_mod`` adding P[b, h, i, i - j - r_lo] (zero outside the table), under a causal block mask:
    ``(q, k, v) -> out`` for inputs of length ``L``, differentiable in q (through P too), k and v -- the bias's cost
    and its gradient inside the call, as in the fused kernel.  The first call compiles."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block_mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, L, L, device=device)
    rows = table.shape[0]
    t_scaled = (table * scale).transpose(0, 1).contiguous()  # (d, R)

    def attend(q, k, v):
        p = q @ t_scaled.to(q.dtype)

        def score_mod(score, b, h, qi, ki):
            r = qi - ki - r_lo
            inside = (r >= 0) & (r < rows)
            return score + torch.where(inside, p[b, h, qi, r.clamp(0, rows - 1)], 0.0)

        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

    return torch.compile(attend, dynamic=False)


def flex_with_bias(q, k, v, bias) -> Callable[[], Any]:
    """flex_attention_with_bias on these q, k, v: the peer of the fused kernel's bias on any device.  Call it
    once outside the timing: that call compiles."""
    fn = flex_attention_with_bias(bias, q.device)
    return lambda: fn(q, k, v)


def write_json(name: str, payload: dict[str, Any]) -> str:
    """Write ``benchmarks/results/<name>.<isa>.json`` with date and machine added.

    One file per ISA that ran (``avx2``, ``avx512``, ``scalar``; none for the CUDA
    benchmark, whose JSON names the GPU), so the latest run on each CPU family is kept side by side, as the
    tables of docs/benchmarks.md are.
    """
    os.makedirs(RESULTS_DIR, exist_ok=True)
    info = machine()
    payload = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "machine": info, **payload}
    family = "" if "cuda" in name else "." + str(info.get("wavepe_isa", "unknown"))  # GPU runs name the GPU inside
    path = os.path.join(RESULTS_DIR, f"{name}{family}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")
    return path


# ---- memory: the process's resident set (Linux /proc) -------------------------------------------------------

def rss_kib(key: str = "VmRSS:") -> int:
    """A line of /proc/self/status in KiB: "VmRSS:" (now) or "VmHWM:" (the peak since the last reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def reset_peak_rss() -> bool:
    """Restart the peak RSS (VmHWM) from the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
