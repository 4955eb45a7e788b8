"""The amx variant's vector work: its bf16 fused attention with the tile products counted but not run.

    python benchmarks/bench_tile_overhead.py [--length 2048] [--heads 2] [--dim 128] [--repeat 5]

On Intel AMX CPUs the tile products (Q K^T, the bias windows, P V and the backward's products) are
cheap; what bounds the amx variant is everything around them: the online softmax, masks, packing
operands into tile layouts, rounding P and dS, reductions.  That part runs on the vector units of any
AVX512_BF16 CPU, so it can be measured where no AMX exists -- which is where this script is for: it
builds the C core with the package's flags (``python/wavepe/_build/recipe.py``) and
``benchmarks/c/tile_overhead.c``, whose stand-in for ``wavepe_tile_gemm`` only counts the products'
FLOPs and writes C, and times one thread, causal, bf16, with a dense table bias or none, forward and
forward+backward's backward:

  vector      the avx512bf16 variant, every product on the vector units (what the CPU runs without AMX)
  amx-rest    the amx variant minus its tile products (the part that does not shrink with AMX)
  tile est.   the tile FLOPs at 1024 FLOP/cycle and --tile-ghz (AMX-BF16's peak: an estimate, not a
              measurement)

Prints a table and writes benchmarks/results/bench_tile_overhead.<isa>.json.  Needs gcc or clang and
an x86-64 CPU with AVX512_BF16 (the amx variant's vector code).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from _harness import print_table, write_json  # noqa: E402
from _core_harness import build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tile-ghz", type=float, default=2.0, help="clock for the tile FLOP estimate")
    args = ap.parse_args()
    import wavepe

    if wavepe.cpu_isa() not in ("avx512bf16", "amx"):
        print(f"this CPU runs {wavepe.cpu_isa()}: the amx variant's vector code needs AVX512_BF16; nothing measured")
        return
    exe = build("tile_overhead.c", os.path.join(ROOT, "build", "bench_tile_overhead"))
    rows, records = [], []
    for bias in (0, 1):
        for backward in (0, 1):
            cmd = [exe, str(args.length), str(args.heads), str(args.dim), str(bias), str(backward), str(args.repeat)]
            lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
            got = {lines[i]: (float(lines[i + 1]), float(lines[i + 2])) for i in range(0, len(lines), 3)}
            vector_ms, (rest_ms, flop) = got["avx512bf16"][0], got["amx"]
            tile_ms = flop / (1024 * args.tile_ghz * 1e9) * 1e3
            what = ("table" if bias else "nope") + (" backward" if backward else " forward")
            rows.append([what, f"{vector_ms:.1f}", f"{rest_ms:.1f}", f"{tile_ms:.1f}", f"{rest_ms / vector_ms:.2f}"])
            records.append({"case": what, "vector_ms": vector_ms, "amx_rest_ms": rest_ms, "tile_gflop": flop / 1e9,
                            "tile_est_ms": tile_ms})
    title = (f"amx variant without its tile products, bf16 causal, L={args.length} H={args.heads} d={args.dim}, "
             f"one thread (best of {args.repeat})")
    print_table(title, ["case", "vector ms", "amx-rest ms", f"tile est. ms ({args.tile_ghz} GHz)", "rest / vector"],
                rows)
    write_json("bench_tile_overhead", {"length": args.length, "heads": args.heads, "dim": args.dim,
                                       "tile_ghz": args.tile_ghz, "rows": records})


if __name__ == "__main__":
    main()
