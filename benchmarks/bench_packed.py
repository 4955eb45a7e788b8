"""Packed sequences vs padding: the same documents, two batch layouts.  Ratios measured in one run.

    python benchmarks/bench_packed.py [--quick] [--row 16384] [--rows 1] [--heads 8] [--dim 128]
                                      [--device cpu|cuda]

Documents of realistic, varied lengths (log-uniform 64 .. 4096 tokens, a fixed seed) fill ``--rows``
rows of ``--row`` tokens.  The same documents then run through the fused wavelet attention
(``wavepe.ops.wavelet_attention``, causal, float32, the paper's default grid) laid out two ways:

  packed   one (1, H, T, d) tensor per row, documents one after the other, ``cu_seqlens``
  padded   one (n_docs, H, L_max, d) batch, each document right-padded to the longest, key_padding_mask

Forward and forward+backward (gradients of q, k, v) times, per real token, and the peak memory of
each call (growth of the process's peak RSS; on CUDA, torch's peak allocation), timed in
alternation.  Target: packed >= 1.5x faster per token than padded, memory O(total tokens).
Prints a table and writes benchmarks/results/bench_packed.<isa>.json (bench_packed_cuda.json on a GPU).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and __name__ == "__main__":
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # freed buffers go back to the OS: RSS tracks live memory
    os.execv(sys.executable, [sys.executable] + sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import wavepe.ops as wo  # noqa: E402
from _harness import compare, print_table, reset_peak_rss, rss_kib, write_json  # noqa: E402


def document_lengths(row: int, rows: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    """Rows of documents, log-uniform lengths in [lo, hi], each row filled up to ``row`` tokens
    (its last document cut to fit)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rows):
        lengths, used = [], 0
        while used < row:
            n = int(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand((), generator=g).item()))
            n = min(n, row - used)
            lengths.append(n)
            used += n
        out.append(lengths)
    return out


def peak_of(fn, device: str) -> float:
    """MiB the call adds at its peak (CPU: peak RSS growth; CUDA: torch's peak allocation growth)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    if not reset_peak_rss():
        return float("nan")
    base = rss_kib()
    fn()
    return (rss_kib("VmHWM:") - base) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="rows of 4096 tokens, documents of 32 .. 1024, 3 repeats")
    ap.add_argument("--row", type=int, default=16384)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    row, lo, hi, repeat = (4096, 32, 1024, 3) if args.quick else (args.row, 64, 4096, 5)
    h, d, dev = args.heads, args.dim, args.device
    rows = document_lengths(row, args.rows, lo, hi)
    docs = [n for r in rows for n in r]
    total, lmax = sum(docs), max(docs)
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    # packed: one tensor per row; padded: one batch of every document, right-padded
    packed = [(rand(1, h, row, d), rand(1, h, row, d), rand(1, h, row, d),
               torch.tensor([0, *torch.tensor(r).cumsum(0).tolist()], dtype=torch.int32, device=dev))
              for r in rows]
    pq, pk, pv = (torch.zeros(len(docs), h, lmax, d, device=dev) for _ in range(3))
    kpm = torch.ones(len(docs), lmax, dtype=torch.bool, device=dev)
    i = 0
    for (q, k, v, cu), r in zip(packed, rows):
        for j, n in enumerate(r):
            s = int(cu[j])
            pq[i, :, :n], pk[i, :, :n], pv[i, :, :n] = q[0, :, s:s + n], k[0, :, s:s + n], v[0, :, s:s + n]
            kpm[i, :n] = False
            i += 1

    def fwd_packed():
        return [wo.wavelet_attention(q, k, v, cu_seqlens=cu) for q, k, v, cu in packed]

    def fwd_padded():
        return wo.wavelet_attention(pq, pk, pv, key_padding_mask=kpm)

    leaves_p = [[x.clone().requires_grad_() for x in (q, k, v)] + [cu] for q, k, v, cu in packed]
    leaves_b = [x.clone().requires_grad_() for x in (pq, pk, pv)]

    def train_packed():
        for q, k, v, cu in leaves_p:
            out = wo.wavelet_attention(q, k, v, cu_seqlens=cu)
            torch.autograd.grad(out, (q, k, v), torch.ones_like(out))

    def train_padded():
        q, k, v = leaves_b
        out = wo.wavelet_attention(q, k, v, key_padding_mask=kpm)
        torch.autograd.grad(out, (q, k, v), torch.ones_like(out))

    # the packed rows equal the padded batch on the real tokens (a check, not a timing)
    want, got = fwd_padded(), fwd_packed()
    i, err = 0, 0.0
    for (q, k, v, cu), r, out in zip(packed, rows, got):
        for j, n in enumerate(r):
            s = int(cu[j])
            err = max(err, float((out[0, :, s:s + n] - want[i, :, :n]).abs().max()))
            i += 1
    assert err <= 1e-4, f"packed and padded results differ by {err}"

    fwd = compare({"packed": fwd_packed, "padded": fwd_padded}, repeat=repeat)
    train = compare({"packed": train_packed, "padded": train_padded}, repeat=repeat)
    mem = {"packed": peak_of(train_packed, dev), "padded": peak_of(train_padded, dev)}
    tokens = {"packed": args.rows * row, "padded": len(docs) * lmax}
    table = []
    for name in ("packed", "padded"):
        table.append([name, total, tokens[name], fwd[name] * 1e3, train[name] * 1e3,
                      train[name] / total * 1e6, mem[name]])
    where = "GPU " + torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    print(f"{len(docs)} documents ({lo} .. {hi} tokens, longest {lmax}), {total} tokens in {args.rows} row(s) of "
          f"{row}; H={h}, d={d}, causal wavelet, float32, {where}")
    print_table("Packed (cu_seqlens) vs padded (key_padding_mask), the same documents",
                ["layout", "real tokens", "tokens computed", "fwd ms", "fwd+bwd ms", "fwd+bwd us/token",
                 "peak MiB (fwd+bwd)"], table)
    ratios = {"fwd": fwd["padded"] / fwd["packed"], "fwd_bwd": train["padded"] / train["packed"],
              "memory": mem["padded"] / mem["packed"] if mem["packed"] > 0 else float("nan")}
    print(f"packed is {ratios['fwd']:.2f}x faster forward, {ratios['fwd_bwd']:.2f}x forward+backward, "
          f"{ratios['memory']:.2f}x less peak memory (target >= 1.5x faster per token)")
    write_json("bench_packed_cuda" if dev == "cuda" else "bench_packed",
               {"args": vars(args), "documents": rows, "total_tokens": total, "longest": lmax,
                "seconds": {"fwd": fwd, "fwd_bwd": train}, "peak_mib": mem, "ratios_padded_over_packed": ratios,
                "max_abs_difference": err})


if __name__ == "__main__":
    main()
