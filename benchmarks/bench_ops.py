"""Are the Foundation ops fast?  Ratios against references measured in one run.

    python benchmarks/bench_ops.py [--quick]

Targets (fp32, this 2-core CPU):
  * wavelet_bias, B=1 H=8 L=2048 d=128 causal: <= 1.5x torch.matmul(q, k^T),
    and >= 2x faster than a plain-PyTorch rel-shift (Q T^T then skew);
  * rope on q and k, B=1 H=32 L=4096 d=128: >= 4x faster than eager
    q*cos + rotate_half(q)*sin, and >= 60% of a memcpy-equivalent copy's bandwidth.
Prints a table and writes benchmarks/results/bench_ops.json.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import print_table, write_json  # noqa: E402


def bench_wavelet_bias(quick: bool) -> dict:
    """wavelet_bias, fp32, B=1 H=8 L=2048 d=128 causal, the paper's default grid.

    Forward against torch.matmul(q, k^T) of the same shape (the cost of the
    attention scores themselves; target <= 1.5x its time) and against the
    plain-PyTorch rel-shift wavepe.ops.eager.rel_bias (target >= 2x faster);
    forward+backward against eager for information, for the wavelet table
    (grad of q) and for a learned clipped table (grads of q and the table).
    """
    import torch

    import wavepe
    import wavepe.ops as wo
    from wavepe.ops import eager

    from _harness import compare

    b, h, length, d = (1, 8, 256, 128) if quick else (1, 8, 2048, 128)
    repeat = 3 if quick else 5
    shape = f"fp32 B={b} H={h} L={length} d={d} causal"
    cfg = wavepe.WaveletConfig.grid(d)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, length, d, generator=gen)
    k = torch.randn(b, h, length, d, generator=gen)
    table, r_lo = wo.wavelet_table(cfg, torch.float32, "cpu")

    fwd = compare({
        "ours": lambda: wo.wavelet_bias(q, cfg),
        "matmul": lambda: torch.matmul(q, k.transpose(-1, -2)),
        "eager": lambda: eager.rel_bias(q, table, r_lo, length, 0, True, False),
    }, repeat=repeat)

    qg = q.clone().requires_grad_()
    grad = torch.randn(b, h, length, length, generator=gen)
    learned = (0.02 * torch.randn(257, d, generator=gen)).requires_grad_()  # Shaw et al. clipped at +-128

    def ours_fb():
        torch.autograd.grad(wo.wavelet_bias(qg, cfg), qg, grad)

    def eager_fb():
        torch.autograd.grad(eager.rel_bias(qg, table, r_lo, length, 0, True, False), qg, grad)

    def ours_learned():
        torch.autograd.grad(wo.rel_bias(qg, learned, -128, clamp=True), (qg, learned), grad)

    def eager_learned():
        torch.autograd.grad(eager.rel_bias(qg, learned, -128, length, 0, True, True), (qg, learned), grad)

    fb = compare({"ours": ours_fb, "eager": eager_fb}, repeat=max(2, repeat - 2))
    fb_learned = compare({"ours": ours_learned, "eager": eager_learned}, repeat=max(2, repeat - 2))

    ms = {k: v * 1e3 for k, v in fwd.items()}
    vs_mm = ms["ours"] / ms["matmul"]
    speedup = ms["eager"] / ms["ours"]
    rows = [
        [f"wavelet_bias fwd, {shape}", ms["ours"], "torch.matmul(q, k^T)", ms["matmul"], vs_mm,
         "time <= 1.5x", bool(vs_mm <= 1.5)],
        [f"wavelet_bias fwd, {shape}", ms["ours"], "eager rel-shift", ms["eager"], speedup,
         "speedup >= 2x", bool(speedup >= 2.0)],
        [f"wavelet_bias fwd+bwd (dq), {shape}", fb["ours"] * 1e3, "eager rel-shift", fb["eager"] * 1e3,
         fb["eager"] / fb["ours"], "speedup (info)", "-"],
        [f"rel_bias learned R=257 clamp fwd+bwd (dq, dT), {shape}", fb_learned["ours"] * 1e3, "eager rel-shift",
         fb_learned["eager"] * 1e3, fb_learned["eager"] / fb_learned["ours"], "speedup (info)", "-"],
    ]
    return {"rows": rows, "shape": {"B": b, "H": h, "L": length, "d": d}, "threads": torch.get_num_threads()}


def bench_rope(quick: bool) -> dict:
    raise NotImplementedError  # filled in with the RoPE kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small shapes, for smoke tests")
    args = parser.parse_args()
    results = {}
    for name, bench in (("wavelet_bias", bench_wavelet_bias), ("rope", bench_rope)):
        try:
            results[name] = bench(args.quick)
        except NotImplementedError:  # an op whose kernels have not landed yet
            print(f"{name}: not implemented yet, skipped")
    rows = []
    for name, r in results.items():
        for row in r["rows"]:
            rows.append([name, *row])
    print_table("bench_ops", ["op", "case", "time (ms)", "reference", "ref time (ms)", "ratio", "target", "met"], rows)
    write_json("bench_ops" + ("_quick" if args.quick else ""), results)


if __name__ == "__main__":
    main()
