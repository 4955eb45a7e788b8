"""The serial part of a fused attention call with the wavelet bias: building (and freeing) its plan.

    python benchmarks/bench_plan.py [--shapes 256x64,1024x64,4096x128] [--heads 8] [--repeat 21]
        [--base DIR]

Before a call's threads start, the C core builds a plan: the call's window of the table (the distances
its queries and keys form) widened, each strip's nonzero column range found, and the layouts the kernels
read packed (the vector kernels' transposed strips; on the amx ISA the tiles' pairs, and the backward's).
That work is serial, once per call -- per layer, per step -- and does not shrink with threads.  This
script builds the C core with the package's flags and ``benchmarks/c/plan_time.c``, writes the table of
the default wavelet grid that ``wavepe.ops.wavelet_attention`` would pass (causal, queries = keys = L),
and times, for float32 and bf16 on the ISA the package runs here (``WAVEPE_ISA`` picks another): the
forward's and the backward's plan (build + free), medians, against their run on one thread (B=1, H
heads, causal), and a call's minor page faults (fresh scratch pages the OS zeroes; scratch.h keeps freed
blocks for the next call).  On T threads the plan's share of a call is about T times the share printed.

``--base DIR`` (a source tree, e.g. ``git archive REV | tar -x -C DIR``) builds that tree's core with the
same harness too and prints its plan times beside this tree's: before/after, in one run.

Prints a table and writes benchmarks/results/bench_plan.<isa>.json.  Needs gcc or clang and the package
built (for the table).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from _harness import print_table, write_json  # noqa: E402
from _core_harness import build  # noqa: E402


def shapes(text: str) -> list[tuple[int, int]]:
    """'256x64,4096x128' -> [(256, 64), (4096, 128)]: (L, d) pairs."""
    try:
        return [(int(a), int(b)) for a, b in (s.split("x") for s in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shapes must be LxD[,LxD...], got {text!r}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=shapes, default=shapes("256x64,1024x64,4096x128"))
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--base", help="another source tree whose plan times to print beside this tree's")
    args = ap.parse_args()
    import torch
    from wavepe.ops._tables import call_table

    exes = {"tree": build("plan_time.c", os.path.join(ROOT, "build", "bench_plan"), wrap_tiles=False)}
    if args.base:
        exes["base"] = build("plan_time.c", os.path.join(ROOT, "build", "bench_plan_base"), source=args.base,
                              wrap_tiles=False)
    rows, records = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for L, d in args.shapes:
            for name, dtype in (("float32", torch.float32), ("bf16", torch.bfloat16)):
                table, r_lo, nrows = call_table(None, d, dtype, torch.device("cpu"), L, L, 0, True, whole_window=True)
                path = os.path.join(tmp, f"table_{L}_{d}_{name}.bin")
                table.contiguous().view(torch.int16 if name == "bf16" else torch.int32).numpy().tofile(path)
                got = {}
                for which, exe in exes.items():
                    cmd = [exe, name, str(L), str(args.heads), str(d), path, str(r_lo), str(args.repeat)]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
                    got[which] = (out[0], *map(float, out[1:]))
                isa, fwd_plan, bwd_plan, fwd_run, bwd_run, fwd_faults, bwd_faults = got["tree"]
                rec = {"L": L, "d": d, "heads": args.heads, "dtype": name, "isa": isa, "table_rows": nrows,
                       "fwd_plan_us": fwd_plan, "bwd_plan_us": bwd_plan, "fwd_run_us": fwd_run, "bwd_run_us": bwd_run,
                       "fwd_page_faults": fwd_faults, "bwd_page_faults": bwd_faults}
                row = [f"{L} x {d}", name, isa]
                if "base" in got:
                    base = got["base"]
                    rec.update(base_fwd_plan_us=base[1], base_bwd_plan_us=base[2], base_fwd_run_us=base[3],
                               base_bwd_run_us=base[4], base_fwd_page_faults=base[5], base_bwd_page_faults=base[6])
                    row += [base[1], fwd_plan, base[2], bwd_plan, f"{base[5]:.0f} / {base[6]:.0f}"]
                else:
                    row += [fwd_plan, bwd_plan]
                row += [f"{fwd_faults:.0f} / {bwd_faults:.0f}", fwd_run / 1e3, 100 * fwd_plan / fwd_run,
                        100 * bwd_plan / bwd_run]
                rows.append(row)
                records.append(rec)
    plans = (["fwd plan us, base", "fwd plan us", "bwd plan us, base", "bwd plan us", "page faults fwd / bwd, base"]
             if args.base else ["fwd plan us", "bwd plan us"])
    print_table(f"Plan (serial) vs run (one thread), wavelet bias, causal, B=1 H={args.heads}",
                ["L x d", "dtype", "isa", *plans, "page faults fwd / bwd", "fwd run ms", "fwd plan % of run",
                 "bwd plan % of run"], rows)
    write_json("bench_plan", {"heads": args.heads, "repeat": args.repeat, "base": args.base, "results": records})


if __name__ == "__main__":
    main()
