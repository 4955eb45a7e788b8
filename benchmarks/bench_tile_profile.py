"""The amx variant's tile products by call site: how many, how deep, and (on AMX) how fast each kind runs.

    python benchmarks/bench_tile_profile.py [--length 2048] [--heads 2] [--dim 128] [--repeat 3]
                                            [--bias none wavelet dense] [--passes forward backward]

Every wavepe_tile_gemm call the bf16 fused attention makes (causal, one thread; no bias, the wavelet
table of the paper's default grid, or a dense table; forward and backward) is counted by the place in
the kernels that makes it (``benchmarks/c/tile_profile.c``, named here by addr2line): its calls, the
16 x 16 tiles of C written (each a zero or load and a store: a block switch), the tile products
(tdpbf16ps) and their depth (products per C tile: K / 32), and, on an AMX CPU, the time spent in
them -- ns per product against AMX-BF16's 16 cycles, so a product site far from it stands out
(Sapphire/Emerald Rapids ran 2 x 2 blocks of 4 steps at ~10 ns a product against ~4.4 ns for
independent products: docs/benchmarks.md).  Each call is timed by its own pair of clock_gettime calls
(tens of ns): a site whose calls last well under a microsecond reads a little slow.  Without AMX the
products run emulated: the counts and depths hold, the times are not printed.

Prints a table per case and writes benchmarks/results/bench_tile_profile.<isa>.json.  Needs gcc or
clang, addr2line (binutils) and an x86-64 CPU; without AVX512_BF16 the amx variant's vector code is
built on SIMDe (the cmeel-simde wheel of requirements-dev.txt), for the counts.
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

from _core_harness import build  # noqa: E402
from _harness import print_table, write_json  # noqa: E402


def site_names(exe: str, offsets: list[str]) -> dict[str, str]:
    """Each call site's innermost function and file (the kernels' static functions are inlined)."""
    names = {}
    for off in offsets:
        res = subprocess.run(["addr2line", "-f", "-i", "-e", exe, off], capture_output=True, text=True).stdout
        func, line = (res.split("\n") + ["?", "?"])[:2]
        names[off] = f"{func} ({os.path.basename(line.split(' ')[0])})"
    return names


def profile(exe: str, args, bias: str, backward: int) -> dict:
    cmd = [exe, str(args.length), str(args.heads), str(args.dim), bias, str(backward), str(args.repeat)]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    mode = lines[0].split()[1]
    kernel_ms = float(lines[1].split()[1])
    sites = []
    for line in lines[2:]:
        _, off, calls, ctiles, products, ns = line.split()
        if int(calls) == 0:  # a site of the forward that a backward's profile ran first
            continue
        sites.append({"offset": off, "calls": int(calls), "c_tiles": int(ctiles), "products": int(products),
                      "ns": float(ns)})
    names = site_names(exe, [s["offset"] for s in sites])
    for s in sites:
        s["site"] = names.get(s["offset"], s["offset"])
    return {"tiles": mode, "kernel_ms": kernel_ms, "sites": sites}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bias", choices=("none", "wavelet", "dense"), nargs="+", default=["none", "wavelet"])
    ap.add_argument("--passes", choices=("forward", "backward"), nargs="+", default=["forward", "backward"])
    args = ap.parse_args()
    import wavepe

    # without AVX512_BF16 the amx variant's vector code runs through SIMDe (as `make ctest-simde` does): counts only
    simde = wavepe.cpu_isa() not in ("avx512bf16", "amx")
    exe = build("tile_profile.c", os.path.join(ROOT, "build", "bench_tile_profile"), simde=simde)
    records = []
    for bias in args.bias:
        for backward in [int(p == "backward") for p in args.passes]:
            got = profile(exe, args, bias, backward)
            hw = got["tiles"] == "hardware"
            what = f"{bias} {'backward' if backward else 'forward'}"
            rows = []
            total_ns = sum(s["ns"] for s in got["sites"])
            for s in sorted(got["sites"], key=lambda s: -s["products"]):
                depth = s["products"] / s["c_tiles"] if s["c_tiles"] else 0.0
                row = [s["site"], s["calls"], s["c_tiles"], s["products"], f"{depth:.2f}"]
                if hw:
                    row += [f"{s['ns'] / 1e6:.2f}", f"{s['ns'] / max(s['products'], 1):.1f}",
                            f"{s['ns'] / max(s['c_tiles'], 1):.1f}"]
                rows.append(row)
            header = ["call site", "calls", "C tiles", "products", "products / C tile"]
            if hw:
                header += ["ms", "ns / product", "ns / C tile"]
            title = (f"{what}: bf16 causal L={args.length} H={args.heads} d={args.dim}, one thread, tiles {got['tiles']}"
                     + (f"; kernel {got['kernel_ms']:.2f} ms, tile products {total_ns / 1e6:.2f} ms" if hw else
                        " (emulated: counts only)"))
            print_table(title, header, rows)
            records.append({"case": what, **got})
    write_json("bench_tile_profile", {"length": args.length, "heads": args.heads, "dim": args.dim, "cases": records})


if __name__ == "__main__":
    main()
