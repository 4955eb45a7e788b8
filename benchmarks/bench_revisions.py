"""Is the working tree's attention faster than another revision's?  Both built alike, timed in alternated processes.

    python benchmarks/bench_revisions.py --base REV|DIR [--dtype bf16] [--isa amx] [--pos-enc wavelet|nope]
        [--length 4096] [--heads 8] [--backward | --decode] [--threads 2] [--rounds 3] [--repeat 7]

A kernel change is judged against the code before it on the same machine, but a shared machine's speed
moves between processes by more than most changes do (on a lent Xeon host SDPA bf16 alone took 46-71 ms
from one process to the next at the shape below).  So the two are timed the way docs/benchmarks.md's
before/after tables were: both sources exported into ``build/revisions/`` -- REV (any git revision) with
``git archive``, the working tree as it is (tracked and untracked files git does not ignore; a file is
rewritten only when it changed, so that its build stays incremental) -- each built in place the same way
(``setup.py build_ext --inplace``, the CPU kernels only: WAVEPE_BUILD_CUDA=0), then ``--rounds`` rounds of
one process per source, base first, alternated.  Each process times the fused attention
(``wavepe.ops.wavelet_attention``, B=1, d=128, causal, the paper's default grid or ``pos_enc="nope"``;
forward, or forward+backward with ``--backward``, or with ``--decode`` one decoding step: one query row a head
against the L keys, DECODE_CALLS calls a sample, ms per call) and SDPA in the same dtype (causal; over all the
keys for a decoding step), alternated
(_harness.compare), on ``--threads`` threads pinned to as many physical cores where ``taskset`` exists.

Where there is no git repository (a copy of the tree without .git, as a lent machine may get), --base
names a directory holding the other source tree (e.g. made beforehand with ``git archive REV | tar -x -C
DIR``) and the tree is built where it is.

Printed: one row per process (its fused median, its SDPA median, their ratio: the steadier figure where
the machine's speed moves) and the medians over the rounds, with tree / base for both figures.  Writes
benchmarks/results/bench_revisions.<isa>.json.  WAVEPE_ISA (``--isa``) picks the kernel variant in both.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REVISIONS = os.path.join(ROOT, "build", "revisions")
DTYPES = ("float32", "bf16", "fp16")
D = 128
DECODE_CALLS = 50  # calls a sample with --decode (ms printed per call)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout


def export_revision(rev: str) -> tuple[str, str]:
    """REV's files in build/revisions/<sha> (exported once), or REV itself where it is a directory holding a
    source tree; returns (directory, short sha or the directory's name)."""
    if os.path.isfile(os.path.join(rev, "setup.py")):
        return os.path.abspath(rev), os.path.basename(os.path.abspath(rev))
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"--base {rev!r}: neither a source tree (a directory with setup.py) nor a commit of a git "
                         f"repository at {ROOT}") from None
    dest = os.path.join(REVISIONS, sha[:12])
    if not os.path.isfile(os.path.join(dest, "setup.py")):
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", sha], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest, sha[:12]


def export_tree() -> str:
    """The working tree's files (tracked, and untracked ones git does not ignore) in build/revisions/tree:
    a file copied only when its content changed (mtimes kept: the in-place build stays incremental), and
    files no longer in the tree removed from the copy's sources."""
    dest = os.path.join(REVISIONS, "tree")
    try:
        listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    except (OSError, subprocess.CalledProcessError):
        return ROOT  # no repository: the tree is built where it is
    names = [n for n in listed.split("\0") if n]
    wanted = set()
    for name in names:
        src, dst = os.path.join(ROOT, name), os.path.join(dest, name)
        if not os.path.isfile(src):  # deleted in the tree, still in the index
            continue
        wanted.add(os.path.normpath(dst))
        if os.path.isfile(dst) and filecmp.cmp(src, dst, shallow=False):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    for sub in ("csrc", "python"):  # a source deleted from the tree must not stay compiled into the copy
        for dirpath, _, files in os.walk(os.path.join(dest, sub)):
            for f in files:
                path = os.path.normpath(os.path.join(dirpath, f))
                if path not in wanted and f.endswith((".c", ".h", ".cpp", ".cu", ".cuh", ".py")):
                    os.remove(path)
    return dest


def build(src: str) -> None:
    """The package built in place in src, CPU kernels only; the build's output goes to
    src/build/bench_revisions.log."""
    env = dict(os.environ, WAVEPE_BUILD_CUDA="0", WAVEPE_WERROR="0")
    env.setdefault("WAVEPE_BUILD_JOBS", str(os.cpu_count() or 2))
    path = os.path.join(src, "build", "bench_revisions.log")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as log:
        rc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=src, env=env, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"building {src} failed (exit {rc}): see {path}")


def physical_cores(n: int) -> list[int]:
    """The first CPU of each of the first n physical cores (lscpu), or [] where that is unknown."""
    try:
        out = subprocess.run(["lscpu", "-p=CPU,CORE,SOCKET"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    first: dict[tuple[str, str], int] = {}
    for line in out.splitlines():
        if line and not line.startswith("#"):
            cpu, core, socket = line.split(",")[:3]
            first.setdefault((socket, core), int(cpu))
    cpus = sorted(first.values())
    return cpus[:n] if len(cpus) >= n else []


def worker(args: argparse.Namespace) -> None:
    """One process's timings, as one JSON line on stdout."""
    import torch
    import torch.nn.functional as F

    import wavepe
    import wavepe.ops as wo
    from _harness import compare

    torch.set_num_threads(args.threads)
    dtype = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    g = torch.Generator().manual_seed(args.length)
    q, k, v, go = (torch.randn(1, args.heads, args.length, D, generator=g).to(dtype) for _ in range(4))
    if args.decode:  # the last position's query (q_offset = L - 1: it sees every key)
        q, go = q[:, :, -1:].contiguous(), go[:, :, -1:].contiguous()
    cfg = wavepe.WaveletConfig.grid(D)

    def fused(q, k, v):
        return wo.wavelet_attention(q, k, v, cfg) if args.pos_enc == "wavelet" else \
            wo.wavelet_attention(q, k, v, pos_enc="nope")

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=not args.decode)

    # a decoding step is ~0.1 ms: one call a sample times the thread pool's wake-up as much as the kernel
    # (single calls moved by 30 % between processes of one build); DECODE_CALLS calls a sample
    inner = DECODE_CALLS if args.decode else 1

    def timed(fn):
        if not args.backward:
            return lambda: [fn(q, k, v) for _ in range(inner)]
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        return lambda: torch.autograd.grad(fn(qg, kg, vg), (qg, kg, vg), go)

    with torch.set_grad_enabled(args.backward):
        t = compare({"fused": timed(fused), "sdpa": timed(sdpa)}, repeat=args.repeat)
    print(json.dumps({"wavepe": os.path.dirname(wavepe.__file__), "isa": wavepe.active_isa(),
                      "tiles": wavepe.tiles(), "fused_ms": t["fused"] * 1e3 / inner,
                      "sdpa_ms": t["sdpa"] * 1e3 / inner}))


def run_process(src: str, args: argparse.Namespace, cpus: list[int]) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(src, "python"))
    if args.isa:
        env["WAVEPE_ISA"] = args.isa
    cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + [a for a in sys.argv[1:] if a != "--worker"]
    if cpus and shutil.which("taskset"):
        cmd = ["taskset", "-c", ",".join(map(str, cpus))] + cmd
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=HERE).stdout
    got = json.loads(out.strip().splitlines()[-1])
    if os.path.realpath(got["wavepe"]) != os.path.realpath(os.path.join(src, "python", "wavepe")):
        raise SystemExit(f"the process for {src} imported wavepe from {got['wavepe']}")
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="what to compare against: a git revision (e.g. HEAD, main~2, a sha) or a "
                    "directory holding the other source tree")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--isa", default="", help="WAVEPE_ISA in both builds (default: the CPU's default)")
    ap.add_argument("--pos-enc", choices=("wavelet", "nope"), default="wavelet")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--backward", action="store_true", help="time forward+backward (gradients of q, k, v)")
    ap.add_argument("--decode", action="store_true", help="time one decoding step (one query row a head)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        sys.path.insert(0, HERE)
        return worker(args)
    if not args.base:
        ap.error("--base REV is required")
    if args.decode and args.backward:
        ap.error("--decode times a forward step: not with --backward")
    for name, value in (("--length", args.length), ("--heads", args.heads), ("--threads", args.threads),
                        ("--rounds", args.rounds), ("--repeat", args.repeat)):
        if value < 1:
            ap.error(f"{name} must be >= 1, got {value}")
    base, sha = export_revision(args.base)
    tree = export_tree()
    print(f"building {args.base} ({sha}) in {base} and the working tree in {tree} ...", flush=True)
    build(base)
    build(tree)
    cpus = physical_cores(args.threads)
    runs: dict[str, list[dict]] = {"base": [], "tree": []}
    rows = []
    for r in range(args.rounds):
        for name, src in (("base", base), ("tree", tree)):
            got = run_process(src, args, cpus)
            runs[name].append(got)
            rows.append([f"{r + 1}", name, got["isa"], f"{got['fused_ms']:.2f}", f"{got['sdpa_ms']:.2f}",
                         f"{got['fused_ms'] / got['sdpa_ms']:.3f}"])
            print(" | ".join(rows[-1]), flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(g[key] if key != "ratio" else g["fused_ms"] / g["sdpa_ms"] for g in runs[name])

    for name in ("base", "tree"):
        rows.append(["median", name, runs[name][0]["isa"], f"{med(name, 'fused_ms'):.2f}", f"{med(name, 'sdpa_ms'):.2f}",
                     f"{med(name, 'ratio'):.3f}"])
    rows.append(["tree / base", "", "", f"{med('tree', 'fused_ms') / med('base', 'fused_ms'):.3f}",
                 f"{med('tree', 'sdpa_ms') / med('base', 'sdpa_ms'):.3f}",
                 f"{med('tree', 'ratio') / med('base', 'ratio'):.3f}"])
    sys.path.insert(0, HERE)
    if args.isa:  # the JSON's name and machine record: the variant and threads the processes ran
        os.environ["WAVEPE_ISA"] = args.isa
    import torch

    torch.set_num_threads(args.threads)
    from _harness import print_table, write_json

    mode = "forward+backward" if args.backward else "decoding step (M=1)" if args.decode else "forward"
    what = (f"{args.dtype} {args.pos_enc} {mode}, B=1 H={args.heads} "
            f"L={args.length} d={D} causal, {args.threads} thread(s){' (cores ' + str(cpus) + ')' if cpus else ''}")
    print_table(f"the working tree against {args.base} ({sha}): {what}; medians of {args.repeat}, alternated",
                ["round", "source", "isa", "fused ms", "SDPA ms", "fused / SDPA"], rows)
    write_json("bench_revisions", {"base": args.base, "base_sha": sha, "dtype": args.dtype, "pos_enc": args.pos_enc,
                                   "backward": args.backward, "decode": args.decode, "length": args.length, "heads": args.heads,
                                   "threads": args.threads, "cpus": cpus, "tiles": runs["tree"][0]["tiles"],
                                   "runs": runs})


if __name__ == "__main__":
    main()
