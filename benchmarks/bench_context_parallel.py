"""Context parallelism on one machine: P processes x 1 thread against 1 process x P threads, one run.

    python benchmarks/bench_context_parallel.py [--quick] [--length 8192] [--ranks 2] [--repeat 3]
                                                [--dtype float32|bfloat16|float16]

fp32 (or --dtype), B=1, H=8, d=128, causal, the default wavelet grid (support ±1.9k
distances); one forward+backward (gradients of q, k, v) of attention over L
positions by

  single          wavepe.ops.wavelet_attention, one process with P threads
  cp contiguous   wavepe.distributed.context_parallel_attention, P gloo processes
                  x 1 thread on 127.0.0.1, rank r holding positions r·L/P …
  cp zigzag       the same with the load-balanced layout (halves r and 2P−1−r)

timed in alternation (the ranks block on a pipe while the single process
runs; a context-parallel step is timed between barriers, so it is the slowest
rank's).  Also recorded:

  * each rank's CPU time (one thread each): its share of the work, the load
    balance of the layout (wall time cannot show it: a rank with little work
    waits in the ring for its gradients to come home);
  * CPU time of a step (all threads of all processes): on a shared machine the
    steadier figure;
  * bytes each rank sends per step, counted at the point-to-point calls, forward
    and backward, against the schedule's count;
  * memory of each process (RSS, MALLOC_MMAP_THRESHOLD_ set so that freed
    buffers leave): "kept" = growth from before the inputs to after the forward
    (the inputs and what the forward saves for the backward: what a layer holds
    until its backward), "peak" = growth of the peak RSS over inputs + forward +
    backward.  Expected: kept ≈ 1/P of the single process's; the peak adds the
    ring's buffers in flight (a few chunks, freed after the call).

Prints a table and writes benchmarks/results/bench_context_parallel.<isa>.json (other dtypes: the
dtype's name after "bench_context_parallel_").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and __name__ == "__main__":
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    os.execv(sys.executable, [sys.executable] + sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from _harness import print_table, reset_peak_rss, rss_kib, write_json  # noqa: E402

B, H, D = 1, 8, 128
MIB = 1 << 20
LAYOUTS = ("contiguous", "zigzag")


# ---- memory (as in bench_attention.py) ------------------------------------------------------------------

def memory_of_a_step(make_inputs, forward) -> dict[str, float | None]:
    """RSS growth (MiB) from before the inputs to after the forward, and of the peak over forward + backward."""
    if not reset_peak_rss():
        return {"kept_mib": None, "peak_mib": None}
    before = rss_kib("VmRSS:")
    q, k, v, go = make_inputs()
    out = forward(q, k, v)
    kept = rss_kib("VmRSS:") - before
    torch.autograd.grad(out, (q, k, v), go)
    peak = rss_kib("VmHWM:") - before
    return {"kept_mib": kept / 1024, "peak_mib": peak / 1024}


def inputs(length: int, seed: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, length, D, generator=g).to(dtype).requires_grad_() for _ in range(3))
    return q, k, v, torch.randn(B, H, length, D, generator=g).to(dtype)


# ---- the ranks ----------------------------------------------------------------------------------------------

def rank_main(rank: int, world: int, port: int, length: int, dtype_name: str, conn) -> None:
    """One context-parallel process: measure memory once, then run timed steps on command."""
    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    import wavepe.distributed as wd
    from wavepe.distributed import _ring_attention

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    chunk = length // world
    sent = {"bytes": 0}
    post = _ring_attention._Ring.post

    def counting_post(self, sends, recvs):  # count what this rank sends
        sent["bytes"] += sum(t.numel() * t.element_size() for t, _, _ in sends)
        return post(self, sends, recvs)

    _ring_attention._Ring.post = counting_post

    def forward(layout):
        return lambda q, k, v: wd.context_parallel_attention(q, k, v, layout=layout)

    for layout in LAYOUTS:  # first calls set up caches, thread pools and connections: not the step's memory
        q, k, v, go = inputs(64, 0, dtype)
        torch.autograd.grad(forward(layout)(q, k, v), (q, k, v), go)
    memory = memory_of_a_step(lambda: inputs(chunk, 100 + rank, dtype), forward("zigzag"))
    conn.send(memory)
    q, k, v, go = inputs(chunk, 100 + rank, dtype)
    while True:
        layout = conn.recv()
        if layout is None:
            break
        dist.barrier()
        sent["bytes"] = 0
        c0, t0 = time.process_time(), time.perf_counter()
        out = forward(layout)(q, k, v)
        fwd_bytes = sent["bytes"]
        torch.autograd.grad(out, (q, k, v), go)
        dist.barrier()
        conn.send({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                   "sent_fwd": fwd_bytes, "sent_bwd": sent["bytes"] - fwd_bytes})
    # gloo's group destructor joins its workers with the GIL held while a worker freeing a finished
    # collective may need it (a torch deadlock, #56297): a barrier, then a moment without the GIL
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


def expected_sends(world: int, length: int, layout: str, elem: int) -> tuple[int, int]:
    """The most bytes a rank sends per step by the schedule (forward, backward).

    Forward: a K/V pair per hop (``elem`` bytes an element); backward: the same
    hops again, plus the dK/dV accumulator (fp32) after each chunk it computed,
    onward or home."""
    from wavepe.distributed._schedule import last_hops

    elems = 2 * B * H * (length // world) * D
    last = last_hops(world, layout, True)
    fwd, bwd = [], []
    for r in range(world):
        chunks = [(s, last[(r - s) % world]) for s in range(world)]
        kv = sum(1 for s, hops in chunks if s + 1 <= hops)
        grads = sum(1 for s, hops in chunks if s <= hops and not s == hops == 0)
        fwd.append(kv * elems * elem)
        bwd.append(kv * elems * elem + grads * elems * 4)
    return max(fwd), max(bwd)


# ---- main -------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="L=1024, one repeat: a smoke test")
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="of q, k, v (the ring sends them in it; dK/dV travel in float32)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    length, repeat, world = (1024, 1, args.ranks) if args.quick else (args.length, args.repeat, args.ranks)
    if length % (2 * world):
        raise SystemExit(f"--length {length} must be divisible by 2 x --ranks ({2 * world})")

    import wavepe.ops as wo

    torch.set_num_threads(world)
    q, k, v, go = inputs(64, 0, dtype)  # a first call sets up caches and thread pools: not the step's memory
    torch.autograd.grad(wo.wavelet_attention(q, k, v), (q, k, v), go)
    single_memory = memory_of_a_step(lambda: inputs(length, 1, dtype), lambda q, k, v: wo.wavelet_attention(q, k, v))

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    os.environ["OMP_NUM_THREADS"] = "1"
    for r in range(world):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=rank_main, args=(r, world, port, length, args.dtype, child), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    rank_memory = [conn.recv() for conn in pipes]

    q, k, v, go = inputs(length, 1, dtype)

    def single():
        c0, t0 = time.process_time(), time.perf_counter()
        torch.autograd.grad(wo.wavelet_attention(q, k, v), (q, k, v), go)
        return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}

    def cp(layout):
        def run():
            for conn in pipes:
                conn.send(layout)
            per_rank = [conn.recv() for conn in pipes]
            return {"seconds": max(x["seconds"] for x in per_rank), "cpu": sum(x["cpu"] for x in per_rank),
                    "sent_fwd": [x["sent_fwd"] for x in per_rank], "sent_bwd": [x["sent_bwd"] for x in per_rank],
                    "rank_cpu": [x["cpu"] for x in per_rank]}
        return run

    methods = {"single": single, **{f"cp {layout}": cp(layout) for layout in LAYOUTS}}
    samples: dict[str, list[dict]] = {name: [] for name in methods}
    for i in range(1 + repeat):  # the first round warms up (thread pools, gloo connections)
        for name, fn in methods.items():
            result = fn()
            if i > 0:
                samples[name].append(result)
    for conn in pipes:
        conn.send(None)
    for p in procs:
        p.join(timeout=60)

    med = {n: {key: statistics.median(s[key] for s in v) for key in ("seconds", "cpu")} for n, v in samples.items()}
    base = med["single"]
    rows, records = [], []
    for name in methods:
        last = samples[name][-1]
        is_cp = name != "single"
        layout = name.split()[-1] if is_cp else None
        mem = rank_memory if is_cp else [single_memory]
        sent_fwd = max(last["sent_fwd"]) / MIB if is_cp else 0.0
        sent_bwd = max(last["sent_bwd"]) / MIB if is_cp else 0.0
        exp_fwd, exp_bwd = expected_sends(world, length, layout, dtype.itemsize) if is_cp else (0, 0)
        rec = {"method": name, "processes": world if is_cp else 1, "threads_each": 1 if is_cp else world,
               "seconds": med[name]["seconds"], "cpu_seconds": med[name]["cpu"],
               "vs_single": med[name]["seconds"] / base["seconds"], "cpu_vs_single": med[name]["cpu"] / base["cpu"],
               "all_seconds": [s["seconds"] for s in samples[name]],
               "sent_mib_per_rank_fwd": sent_fwd, "sent_mib_per_rank_bwd": sent_bwd,
               "expected_mib_fwd": exp_fwd / MIB, "expected_mib_bwd": exp_bwd / MIB,
               "kept_mib": [m["kept_mib"] for m in mem], "peak_mib": [m["peak_mib"] for m in mem]}
        if is_cp:  # medians over the repeats of each rank's CPU time: its share of the work
            rec["rank_cpu_seconds"] = [statistics.median(x["rank_cpu"][r] for x in samples[name])
                                       for r in range(world)]
        records.append(rec)
        fmt_mem = lambda xs: " / ".join("–" if x is None else f"{x:.0f}" for x in xs)  # noqa: E731
        busy = " / ".join(f"{x:.3g}" for x in rec["rank_cpu_seconds"]) if is_cp else "–"
        rows.append([name, f"{rec['processes']} x {rec['threads_each']}", rec["seconds"], busy, rec["vs_single"],
                     rec["cpu_vs_single"], f"{sent_fwd:.0f} / {sent_bwd:.0f}" if is_cp else "–",
                     fmt_mem(rec["kept_mib"]), fmt_mem(rec["peak_mib"])])
    print_table(f"causal wavelet attention fwd+bwd, {args.dtype} B={B} H={H} L={length} d={D}: "
                f"{world} ranks x 1 thread vs 1 process x {world} threads",
                ["method", "processes x threads", "s", "CPU s per rank", "vs single", "CPU vs single", "sent/rank MiB (fwd / bwd)",
                 "kept MiB (per process)", "peak MiB (per process)"], rows)
    spread = {n: (max(r["all_seconds"]) / min(r["all_seconds"]) - 1) for n, r in zip(methods, records)}
    print("spread of the timed repeats (max/min - 1): "
          + ", ".join(f"{n} {100 * s:.0f}%" for n, s in spread.items()))
    single_kept = single_memory["kept_mib"]
    if single_kept:
        kept_ratio = max(rank_memory, key=lambda m: m["kept_mib"] or 0)["kept_mib"] / single_kept
        print(f"kept memory per rank / single process: {kept_ratio:.2f} (1/P = {1 / world:.2f})")
    write_json("bench_context_parallel" + ("" if args.dtype == "float32" else f"_{args.dtype}")
               + ("" if world == 2 else f"_{world}ranks") + ("_quick" if args.quick else ""),
               {"length": length, "ranks": world, "repeat": repeat, "B": B, "H": H, "d": D, "causal": True,
                "dtype": args.dtype,
                "pos_enc": "wavelet", "results": records, "spread": spread})


if __name__ == "__main__":
    main()
