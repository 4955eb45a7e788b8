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
    raise NotImplementedError  # filled in with the rel-bias kernels


def bench_rope(quick: bool) -> dict:
    raise NotImplementedError  # filled in with the RoPE kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small shapes, for smoke tests")
    args = parser.parse_args()
    results = {"wavelet_bias": bench_wavelet_bias(args.quick), "rope": bench_rope(args.quick)}
    rows = []
    for name, r in results.items():
        for row in r["rows"]:
            rows.append([name, *row])
    print_table("bench_ops", ["op", "case", "time (ms)", "reference", "ref time (ms)", "ratio", "target", "met"], rows)
    write_json("bench_ops" + ("_quick" if args.quick else ""), results)


if __name__ == "__main__":
    main()
