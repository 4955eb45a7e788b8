"""Is the fused attention as cheap as plain attention?  Ratios measured in one run.

    python benchmarks/bench_attention.py [--quick] [--lengths 512 2048 4096 16384] [--budget-gib 6]
    python benchmarks/bench_attention.py --dtype bf16|fp16 [--quick] [--lengths 4096]
    python benchmarks/bench_attention.py --device cuda      # the GPU targets (_attention_cuda.py, bf16)

--dtype float32 (the default): fp32, B=1, H=8, d=128, causal, the paper's default wavelet grid.  For each
length L, the ways to get wavelet-biased attention (timed in alternation):

  (1) naive     the paper-style path: p materialised as (L, L, d), s = q.k + q.p
                (only where it fits)
  (2) relshift  plain PyTorch: rel-shift bias (Q.T^T then skew, wavepe.ops.relbias.plain_rel_bias)
                + SDPA with a float mask (bias, -inf above the diagonal)
  (3) bias_op   wavepe.ops.wavelet_bias + SDPA with the same float mask
  (4) fused     wavepe.ops.wavelet_attention
  (5) sdpa      scaled_dot_product_attention(is_causal=True), no bias: the floor

and ALiBi fused vs SDPA with an ALiBi float mask; then decoding one token
against N = 32768 cached keys, fused vs SDPA on the same single query.
Forward time, forward+backward time (gradients of q, k, v) and peak memory.

  (6) fused_none  wavepe.ops.wavelet_attention(pos_enc="nope"): plain attention
  (7) fused_subnormal  (4) with q, k, v scaled by 1e-39 (subnormal float32)

Targets (whichever CPU runs it; the ISA that ran is printed and recorded):
  * L=4096: fused forward <= 1.15x sdpa; forward+backward <= 1.25x sdpa's;
    fused_none <= 1.0x sdpa; ALiBi fused <= 1.1x sdpa (no bias);
    >= 5x faster than relshift forward+backward;
  * L=16384: fused forward <= 1.05x sdpa; extra peak memory <= 64 MiB (peak
    RSS growth beyond the output tensor);
  * subnormal inputs <= 1.1x the time of normal ones;
  * decoding one token against 32768 keys: <= 1.1x sdpa.

Times are medians of calls alternated in one run (wall clock, what the
targets use); each call's process CPU time (all threads) is recorded too, and
its ratios are printed alongside: on a shared machine they are the steadier
figure.  Peak memory is the growth of the process's peak RSS (VmHWM, reset through
/proc/self/clear_refs) over the call; the script re-executes itself with
MALLOC_MMAP_THRESHOLD_ set so that freed buffers go back to the OS and RSS
tracks live memory.  Prints tables and writes benchmarks/results/bench_attention.<isa>.json.

Every dtype also times decoding with grouped-query attention: 1 query against
N = 32768 cached keys, 32 query heads over 8 key/value heads, d = 128, causal
(the query is the last position: it sees every key), fused (wavelet and
nope) against SDPA with ``enable_gqa=True`` and no mask (what causal means for
the last query).

--window W (e.g. 512): a sliding window (Mistral's rule) at B=1, H=8, d=128, float32, L=4096 and 16384
by default: the fused wavelet and nope attention with ``window=W`` (forward, and forward+backward up to
--backward-max) against SDPA with the same window as a boolean mask, and each length's time against the
shortest's.  Targets (issue 47's): the windowed fused time at L=16384 <= 4.4x its time at L=4096 (linear
in L: 4x the length), and <= 0.5x SDPA with the same window mask at L=16384.  Writes
benchmarks/results/bench_attention_window<W>.<isa>.json.

--dtype bf16 / fp16: q, k, v in that dtype through the public API (whatever
the op does with them inside is part of what is timed: on the CPU the kernels
read them as they are, no float32 copy), at B=1, H=8, d=128, causal, L=4096 by default: the fused
wavelet forward (and forward+backward up to --backward-max) and SDPA in that
dtype, each timed in alternation with the same call in float32, so the table
gives the ratio to SDPA in the same dtype and to float32 from one run; the
forward under every kernel variant the CPU runs (WAVEPE_ISA: avx2, avx512,
avx512bf16, amx where the tiles are the CPU's) beside SDPA and FlexAttention (compiled, its score_mod
reading the same bias precomputed as an (L, L) tensor per head, L <= 8192); then
the GQA decoding in both dtypes.  Targets (issue 29's): the decoding with the
wavelet bias <= 0.6x float32 (both dtypes); bf16 also the L=4096 forward <=
0.6x float32 on an ISA with bf16 dot products (avx512bf16), <= 1.0x elsewhere,
and the forward and the decoding <= 0.5x SDPA in bf16; issue 46's: the default
variant's forward no slower than the fastest variant's (5 %), and where amx runs,
the bf16 forward <= 0.8x SDPA bf16 (wavelet), <= 0.7x (nope), forward + backward
<= 0.6x, and in bf16 FlexAttention's forward >= 2x the default's.  Writes
benchmarks/results/bench_attention_<dtype>.<isa>.json.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and __name__ == "__main__":
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    os.execv(sys.executable, [sys.executable] + sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import wavepe.ops as wo  # noqa: E402
from wavepe import WaveletConfig  # noqa: E402
from wavepe.ops.relbias import plain_rel_bias  # noqa: E402

from _harness import (compare, compare_samples, flex_with_bias, machine, paired_ratio,  # noqa: E402
                      print_table, reset_peak_rss, rss_kib, write_json)

B, H, D = 1, 8, 128
GIB = 1 << 30
MIB = 1 << 20


# ---- memory -----------------------------------------------------------------------

def peak_growth_mib(fn) -> float | None:
    """Peak RSS growth while fn() runs (its result is dropped after), in MiB."""
    if not reset_peak_rss():
        return None
    before = rss_kib("VmRSS:")
    result = fn()
    peak = rss_kib("VmHWM:")
    del result
    return (peak - before) / 1024


# ---- the ways to compute wavelet attention ---------------------------------------------

def naive_attention(q, k, v, table, r_lo, scale):
    """Paper-style: the position vectors p[m, n, :] materialised as (L, L, d)."""
    m, n = q.shape[2], k.shape[2]
    r = (n - m + torch.arange(m))[:, None] - torch.arange(n)[None, :]
    idx = r - r_lo
    inside = (idx >= 0) & (idx < table.shape[0])
    p = table[idx.clamp(0, table.shape[0] - 1)] * inside[..., None].to(table.dtype)  # (L, L, d)
    s = (q @ k.transpose(-1, -2) + torch.einsum("bhmd,mnd->bhmn", q, p)) * scale
    s = s.masked_fill(r < 0, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def masked_sdpa(q, k, v, bias):
    """SDPA with a float mask: the bias plus -inf above the diagonal (what a user writes)."""
    L = q.shape[2]
    future = torch.ones(L, L, dtype=torch.bool).triu_(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(future, float("-inf")))


_SUBNORMAL: dict = {}


def subnormal(*xs):
    """xs scaled by 1e-39 (subnormal in float32), made once per input outside the timed call:
    torch's own multiply into subnormals is slow on Intel cores and is not what is measured."""
    key = tuple(id(x) for x in xs)
    if key not in _SUBNORMAL:
        _SUBNORMAL.clear()
        with torch.no_grad():
            scaled = [(x.detach() * 1e-39).requires_grad_(x.requires_grad) for x in xs]
        _SUBNORMAL[key] = (xs, scaled)  # keeps xs alive so that the ids stay theirs
    return _SUBNORMAL[key][1]


def methods(L: int, budget: int, cfg: WaveletConfig, table, r_lo):
    """name -> (forward fn of (q, k, v), estimated peak bytes of forward+backward)."""
    scale = 1.0 / math.sqrt(D)
    mat = B * H * L * L * 4  # one (B, H, L, L) float32 tensor
    out = {
        "naive": (lambda q, k, v: naive_attention(q, k, v, table, r_lo, scale), L * L * D * 4 * 2 + 8 * mat),
        "relshift": (lambda q, k, v: masked_sdpa(
            q, k, v, plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=L, causal=True, clamp=False) * scale),
                     10 * mat),
        "bias_op": (lambda q, k, v: masked_sdpa(q, k, v, wo.wavelet_bias(q, cfg) * scale), 10 * mat),
        "fused": (lambda q, k, v: wo.wavelet_attention(q, k, v, cfg), 0),
        # every input scaled into the subnormal range: must cost what normal inputs cost
        "fused_subnormal": (lambda q, k, v: wo.wavelet_attention(*subnormal(q, k, v), cfg), 0),
        "fused_none": (lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="nope"), 0),
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), 0),
    }
    return {name: fn for name, (fn, need) in out.items() if need <= budget}


def alibi_methods(L: int, budget: int):
    slopes = torch.tensor(__import__("wavepe").alibi_slopes(H), dtype=torch.float32)
    mat = B * H * L * L * 4
    out = {
        "alibi_mask_sdpa": (lambda q, k, v: masked_sdpa(q, k, v, wo.alibi_bias(slopes, L, L)), 6 * mat),
        "alibi_fused": (lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="alibi", alibi_slopes=slopes), 0),
    }
    return {name: fn for name, (fn, need) in out.items() if need <= budget}


def with_cpu_time(fns: dict, skip: int):
    """Wrap fns to also record the process CPU time of each call (all threads).

    On a shared machine the wall clock counts the time the threads wait for a
    core; CPU time does not, so ratios of CPU time are the steadier figure.
    The first ``skip`` calls of each (the harness's warm-up) are dropped."""
    samples = {n: [] for n in fns}

    def wrap(n, f):
        def run():
            t0 = time.process_time()
            out = f()
            samples[n].append(time.process_time() - t0)
            return out
        return run

    def medians() -> dict:
        return {n: statistics.median(v[skip:] or v) for n, v in samples.items()}

    return {n: wrap(n, f) for n, f in fns.items()}, medians


def inputs(L: int, grad: bool):
    g = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, D, generator=g).requires_grad_(grad) for _ in range(3))
    return q, k, v, torch.randn(B, H, L, D, generator=g)


def fwd_bwd(fn, q, k, v, go):
    def run():
        out = fn(q, k, v)
        return torch.autograd.grad(out, (q, k, v), go)
    return run


def repeats(L: int, quick: bool) -> int:
    if quick:
        return 2
    return 7 if L <= 2048 else (4 if L <= 4096 else 2)


def measure(fns: dict, L: int, quick: bool, backward: bool, skip_backward=lambda n: False) -> tuple[dict, ...]:
    """Each of fns (q, k, v -> out) at length L, alternated: forward times, CPU times and peak growth (MiB), then
    (when `backward`) the same of forward + backward but for the methods skip_backward names."""
    q, k, v, go = inputs(L, False)
    with torch.no_grad():
        runs, cpu_of = with_cpu_time({n: (lambda f=f: f(q, k, v)) for n, f in fns.items()}, skip=1)
        fwd = compare(runs, repeat=repeats(L, quick))
        fwd_cpu = cpu_of()
        fwd_mem = {n: peak_growth_mib(lambda f=f: f(q, k, v)) for n, f in fns.items()}
    bwd, bwd_cpu, bwd_mem = {}, {}, {}
    if backward:
        qg, kg, vg, go = inputs(L, True)
        runs, cpu_of = with_cpu_time({n: fwd_bwd(f, qg, kg, vg, go) for n, f in fns.items() if not skip_backward(n)},
                                     skip=1)
        bwd = compare(runs, repeat=max(2, repeats(L, quick) // 2))
        bwd_cpu = cpu_of()
        bwd_mem = {n: peak_growth_mib(r) for n, r in runs.items()}
    return fwd, fwd_cpu, fwd_mem, bwd, bwd_cpu, bwd_mem


def bench_length(L: int, budget: int, quick: bool, backward_max: int, cfg, table, r_lo) -> list[dict]:
    rows = []
    fns = methods(L, budget, cfg, table, r_lo)
    fns.update(alibi_methods(L, budget))
    fwd, fwd_cpu, fwd_mem, bwd, bwd_cpu, bwd_mem = measure(
        fns, L, quick, L <= backward_max, lambda n: (n == "naive" and L > 1024) or n == "fused_subnormal")
    out_mib = B * H * L * D * 4 / MIB
    for n in fns:
        base = "alibi_mask_sdpa" if n.startswith("alibi") else "sdpa"
        rows.append({
            "L": L, "method": n, "fwd_ms": fwd[n] * 1e3, "fwd_vs_sdpa": fwd[n] / fwd["sdpa"],
            "fwd_cpu_vs_sdpa": fwd_cpu[n] / fwd_cpu["sdpa"],
            "fwd_bwd_ms": bwd[n] * 1e3 if n in bwd else None,
            "fwd_bwd_vs_sdpa": bwd[n] / bwd["sdpa"] if n in bwd else None,
            "fwd_bwd_cpu_vs_sdpa": bwd_cpu[n] / bwd_cpu["sdpa"] if n in bwd_cpu else None,
            "vs_baseline": fwd[n] / fwd[base] if base in fwd else None,
            "fwd_peak_mib": fwd_mem[n], "fwd_extra_beyond_output_mib": None if fwd_mem[n] is None
            else fwd_mem[n] - out_mib,
            "fwd_bwd_peak_mib": bwd_mem.get(n),
        })
    return rows


def bench_decode(N: int, quick: bool) -> list[dict]:
    g = torch.Generator().manual_seed(N)
    q = torch.randn(B, H, 1, D, generator=g)
    k, v = (torch.randn(B, H, N, D, generator=g) for _ in range(2))
    fns = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "fused_wavelet": lambda: wo.wavelet_attention(q, k, v),
        "fused_alibi": lambda: wo.wavelet_attention(q, k, v, pos_enc="alibi"),
        "fused_none": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
    }
    runs, cpu_of = with_cpu_time(fns, skip=2)
    with torch.no_grad():
        t = compare(runs, repeat=5 if quick else 25, warmup=2)
    cpu = cpu_of()
    return [{"N": N, "method": n, "ms": t[n] * 1e3, "vs_sdpa": t[n] / t["sdpa"], "cpu_vs_sdpa": cpu[n] / cpu["sdpa"]}
            for n in fns]


#: the --dtype names
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GQA_HEADS, GQA_KV_HEADS = 32, 8


def _ratios(rows: list[dict], key: str, group: tuple[str, ...]) -> None:
    """Add ``<key>_vs_sdpa`` (same group and dtype) and ``<key>_vs_float32`` (same group and method)."""
    def find(row: dict, **over) -> dict | None:
        want = {**{g: row[g] for g in group}, **over}
        return next((r for r in rows if all(r[g] == want[g] for g in want)), None)

    for r in rows:
        sdpa, f32 = find(r, dtype=r["dtype"], method="sdpa"), find(r, dtype="float32", method=r["method"])
        ok = r[key] is not None
        r[f"{key}_vs_sdpa"] = r[key] / sdpa[key] if ok and sdpa and sdpa[key] else None
        r[f"{key}_vs_float32"] = r[key] / f32[key] if ok and f32 and f32[key] else None


def bench_decode_gqa(N: int, dtypes: list[str], quick: bool) -> list[dict]:
    """One query (the last position) against N cached keys, 32 query / 8 key-value heads, d=128, each
    method in each dtype, all timed in alternation."""
    g = torch.Generator().manual_seed(N + 1)
    q32 = torch.randn(B, GQA_HEADS, 1, D, generator=g)
    k32, v32 = (torch.randn(B, GQA_KV_HEADS, N, D, generator=g) for _ in range(2))
    fns, what = {}, {}
    for name in dtypes:
        q, k, v = (x.to(DTYPES[name]) for x in (q32, k32, v32))
        calls = {
            # causal for the last query = no mask (SDPA's is_causal aligns the diagonal top-left instead)
            "sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            "fused_wavelet": lambda q=q, k=k, v=v: wo.wavelet_attention(q, k, v, causal=True),
            "fused_none": lambda q=q, k=k, v=v: wo.wavelet_attention(q, k, v, pos_enc="nope", causal=True),
        }
        for method, fn in calls.items():
            fns[f"{name} {method}"] = fn
            what[f"{name} {method}"] = (name, method)
    runs, cpu_of = with_cpu_time(fns, skip=2)
    with torch.no_grad():
        t = compare(runs, repeat=5 if quick else 15, warmup=2)
    cpu = cpu_of()
    rows = [{"N": N, "heads": GQA_HEADS, "kv_heads": GQA_KV_HEADS, "dtype": what[n][0], "method": what[n][1],
             "ms": t[n] * 1e3, "cpu_ms": cpu[n] * 1e3} for n in fns]
    _ratios(rows, "ms", ("N",))
    _ratios(rows, "cpu_ms", ("N",))
    return rows


def bench_dtype_length(L: int, dtype: str, quick: bool, backward_max: int, cfg: WaveletConfig) -> list[dict]:
    """Fused wavelet attention and causal SDPA at B=1 H=8 d=128, in ``dtype`` and in float32, alternated."""
    q32, k32, v32, go32 = inputs(L, False)
    dtypes = [dtype, "float32"]
    calls = {"fused": lambda q, k, v: wo.wavelet_attention(q, k, v, cfg),
             "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    fwd_fns, bwd_fns, what = {}, {}, {}
    for name in dtypes:
        q, k, v, go = (x.to(DTYPES[name]) for x in (q32, k32, v32, go32))
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        for method, fn in calls.items():
            key = f"{name} {method}"
            what[key] = (name, method)
            fwd_fns[key] = lambda fn=fn, q=q, k=k, v=v: fn(q, k, v)
            bwd_fns[key] = fwd_bwd(fn, qg, kg, vg, go)
    with torch.no_grad():
        runs, cpu_of = with_cpu_time(fwd_fns, skip=1)
        fwd = compare(runs, repeat=repeats(L, quick))
        fwd_cpu = cpu_of()
    bwd, bwd_cpu = {}, {}
    if L <= backward_max:
        runs, cpu_of = with_cpu_time(bwd_fns, skip=1)
        bwd = compare(runs, repeat=max(2, repeats(L, quick) // 2))
        bwd_cpu = cpu_of()
    rows = [{"L": L, "heads": H, "dtype": what[n][0], "method": what[n][1], "fwd_ms": fwd[n] * 1e3,
             "fwd_cpu_ms": fwd_cpu[n] * 1e3, "fwd_bwd_ms": bwd[n] * 1e3 if n in bwd else None,
             "fwd_bwd_cpu_ms": bwd_cpu[n] * 1e3 if n in bwd_cpu else None} for n in fwd_fns]
    for key in ("fwd_ms", "fwd_cpu_ms", "fwd_bwd_ms", "fwd_bwd_cpu_ms"):
        _ratios(rows, key, ("L",))
    return rows


def timed_variants() -> list[str]:
    """The vector kernel variants this CPU runs natively (amx only with the tile instructions: emulated tiles
    are for the tests), the default last among equals."""
    import wavepe

    return [i for i in wavepe.supported_isas()
            if i != "scalar" and (i != "amx" or wavepe.tiles().startswith("hardware"))]


def bench_variants(L: int, dtype: str, quick: bool, cfg: WaveletConfig) -> list[dict]:
    """The fused wavelet and nope forward in ``dtype`` under every variant the CPU runs, with SDPA in the same
    dtype, alternated (issue 46: the default variant may be slower than none)."""
    q, k, v, _ = (x.to(DTYPES[dtype]) for x in inputs(L, False))
    before = os.environ.get("WAVEPE_ISA")

    def under(isa, fn):
        def run():
            os.environ["WAVEPE_ISA"] = isa
            try:
                return fn()
            finally:
                if before is None:
                    os.environ.pop("WAVEPE_ISA", None)
                else:
                    os.environ["WAVEPE_ISA"] = before
        return run

    fns = {("sdpa", "-"): lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    for isa in timed_variants():
        fns[("wavelet", isa)] = under(isa, lambda: wo.wavelet_attention(q, k, v, cfg))
        fns[("nope", isa)] = under(isa, lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"))
    with torch.no_grad():
        # FlexAttention with the same bias, precomputed outside the timing (issue 46: >= 2x faster in bf16)
        if L <= 8192:  # the dense bias: H L^2 half elements (1 GiB at 8192)
            table, r_lo = wo.wavelet_table(cfg, q.dtype, "cpu")
            bias = (plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=L, causal=True, clamp=False)
                    / math.sqrt(D)).contiguous()
            try:
                fns[("flex_bias", "-")] = flex_with_bias(q, k, v, bias)
                fns[("flex_bias", "-")]()  # compiles
            except Exception as exc:  # noqa: BLE001 - report it, keep the other figures
                print(f"FlexAttention unavailable at L={L}: {exc}")
                fns.pop(("flex_bias", "-"), None)
        # twice the rounds of the other tables: the targets are ratios on a host whose speed drifts
        samples = compare_samples({f"{m} {i}": f for (m, i), f in fns.items()}, repeat=2 * repeats(L, quick))
    t = {name: statistics.median(v) for name, v in samples.items()}
    return [{"L": L, "dtype": dtype, "method": m, "isa": i, "fwd_ms": t[f"{m} {i}"] * 1e3,
             "fwd_vs_sdpa": t[f"{m} {i}"] / t["sdpa -"],
             "fwd_vs_sdpa_paired": paired_ratio(samples, f"{m} {i}", "sdpa -")} for (m, i) in fns]


def print_decode_gqa(rows: list[dict]) -> None:
    n = rows[0]["N"]
    print_table(f"decoding one token against N={n} keys, GQA {GQA_HEADS} query / {GQA_KV_HEADS} kv heads, d={D}, "
                "causal (the last query sees every key)",
                ["dtype", "method", "ms", "/ sdpa (same dtype)", "(cpu)", "/ float32 (same method)", "(cpu)"],
                [[r["dtype"], r["method"], fmt(r["ms"], ".2f"), fmt(r["ms_vs_sdpa"]), fmt(r["cpu_ms_vs_sdpa"]),
                  fmt(r["ms_vs_float32"]), fmt(r["cpu_ms_vs_float32"])] for r in rows])


def add_target(targets: list[dict], name: str, value, limit: float, smaller: bool = True, cpu=None) -> None:
    """One target of a run: met when ``value`` is at most (``smaller``) or at least ``limit``; None: not measured."""
    met = None if value is None else (value <= limit if smaller else value >= limit)
    targets.append({"target": name, "value": value, "cpu_time_value": cpu, "limit": limit, "met": met})


def print_targets(targets: list[dict]) -> None:
    print_table("targets (wall clock; CPU-time ratio alongside)", ["target", "value", "(cpu)", "limit", "met"],
                [[t["target"], fmt(t["value"]), fmt(t["cpu_time_value"]), t["limit"], t["met"]] for t in targets])


def dtype_targets(dtype: str, rows: list[dict], dec: list[dict], isa: str | None) -> list[dict]:
    """Issue 29's targets for a bf16 / fp16 run: decoding <= 0.6x float32 (both dtypes); bf16 also the
    forward at L=4096 <= 0.6x float32 on an ISA with bf16 dot products (avx512bf16), <= 1.0x elsewhere,
    and the forward and the decoding <= 0.5x SDPA in bf16."""
    targets: list[dict] = []
    dw = next(r for r in dec if r["dtype"] == dtype and r["method"] == "fused_wavelet")
    n = dw["N"]
    add_target(targets, f"decode N={n} {dtype} fused wavelet / float32", dw["ms_vs_float32"], 0.6,
               cpu=dw["cpu_ms_vs_float32"])
    if dtype != "bf16":
        return targets
    add_target(targets, f"decode N={n} bf16 fused wavelet / sdpa bf16", dw["ms_vs_sdpa"], 0.5,
               cpu=dw["cpu_ms_vs_sdpa"])
    fused = next((r for r in rows if r["L"] == 4096 and r["dtype"] == dtype and r["method"] == "fused"), None)
    if fused is not None:
        dot = isa in ("avx512bf16", "amx")  # vdpbf16ps or tdpbf16ps
        add_target(targets, f"L=4096 bf16 fused fwd / float32 ({isa}: {'with' if dot else 'no'} bf16 dot products)",
                   fused["fwd_ms_vs_float32"], 0.6 if dot else 1.0, cpu=fused["fwd_cpu_ms_vs_float32"])
        add_target(targets, "L=4096 bf16 fused fwd / sdpa bf16", fused["fwd_ms_vs_sdpa"], 0.5,
                   cpu=fused["fwd_cpu_ms_vs_sdpa"])
    return targets


def variant_targets(dtype: str, rows: list[dict], var: list[dict], isa: str | None) -> list[dict]:
    """Issue 46's targets: where the tiles run (amx), the bf16 forward <= 0.8x SDPA bf16 (wavelet), <= 0.7x (nope),
    forward + backward <= 0.6x; everywhere, the default variant no slower than the fastest (within 5 %)."""
    targets: list[dict] = []
    for L in sorted({r["L"] for r in var}):
        for method in ("wavelet", "nope"):
            got = [r for r in var if r["L"] == L and r["method"] == method]
            if not got:
                continue
            best = min(got, key=lambda r: r["fwd_ms"])
            mine = next((r for r in got if r["isa"] == isa), None)
            if mine is not None:
                add_target(targets, f"L={L} {dtype} {method} fwd: the default ({isa}) / the fastest variant "
                           f"({best['isa']})", mine["fwd_ms"] / best["fwd_ms"], 1.05)
            if isa == "amx" and dtype == "bf16" and mine is not None:
                add_target(targets, f"L={L} bf16 {method} fwd (amx) / sdpa bf16", mine["fwd_vs_sdpa"],
                           0.8 if method == "wavelet" else 0.7)
        flex = next((r for r in var if r["L"] == L and r["method"] == "flex_bias"), None)
        mine = next((r for r in var if r["L"] == L and r["method"] == "wavelet" and r["isa"] == isa), None)
        if flex is not None and mine is not None and dtype == "bf16":
            add_target(targets, f"L={L} bf16 FlexAttention with the bias / wavelet fwd ({isa})",
                       flex["fwd_ms"] / mine["fwd_ms"], 2.0, smaller=False)
    if isa == "amx" and dtype == "bf16":
        fused = next((r for r in rows if r["L"] == 4096 and r["dtype"] == dtype and r["method"] == "fused"), None)
        if fused is not None:
            add_target(targets, "L=4096 bf16 fused fwd+bwd (amx) / sdpa bf16", fused["fwd_bwd_ms_vs_sdpa"], 0.6,
                       cpu=fused["fwd_bwd_cpu_ms_vs_sdpa"])
    return targets


def run_dtype(dtype: str, lengths: list[int], n_dec: int, quick: bool, backward_max: int) -> None:
    """The --dtype bf16 / fp16 run: fused and SDPA in that dtype next to float32, every variant, then GQA
    decoding."""
    cfg = WaveletConfig.grid(D)
    rows, var = [], []
    for L in lengths:
        rows += bench_dtype_length(L, dtype, quick, backward_max, cfg)
        var += bench_variants(L, dtype, quick, cfg)
        print(f"L={L} done", flush=True)
    dec = bench_decode_gqa(n_dec, [dtype, "float32"], quick)
    mach = machine()
    print(f"machine: {mach['cpu']}, wavepe ISA {mach.get('wavepe_isa')}, torch {mach.get('torch')}, "
          f"{torch.get_num_threads()} threads")
    print_table(f"wavelet attention in {dtype} (inputs {dtype} through the public API) next to float32, "
                f"B={B} H={H} d={D} causal",
                ["L", "dtype", "method", "fwd ms", "/ sdpa", "(cpu)", "/ float32", "(cpu)",
                 "fwd+bwd ms", "/ sdpa", "(cpu)", "/ float32", "(cpu)"],
                [[r["L"], r["dtype"], r["method"], fmt(r["fwd_ms"], ".1f"), fmt(r["fwd_ms_vs_sdpa"]),
                  fmt(r["fwd_cpu_ms_vs_sdpa"]), fmt(r["fwd_ms_vs_float32"]), fmt(r["fwd_cpu_ms_vs_float32"]),
                  fmt(r["fwd_bwd_ms"], ".1f"), fmt(r["fwd_bwd_ms_vs_sdpa"]), fmt(r["fwd_bwd_cpu_ms_vs_sdpa"]),
                  fmt(r["fwd_bwd_ms_vs_float32"]), fmt(r["fwd_bwd_cpu_ms_vs_float32"])] for r in rows])
    print_table(f"the forward in {dtype} under every kernel variant this CPU runs (WAVEPE_ISA; the default: "
                f"{mach.get('wavepe_isa')}), B={B} H={H} d={D} causal",
                ["L", "method", "variant", "fwd ms", "/ sdpa (medians)", "/ sdpa (median of the rounds' ratios)"],
                [[r["L"], r["method"], r["isa"], fmt(r["fwd_ms"], ".1f"), fmt(r["fwd_vs_sdpa"]),
                  fmt(r["fwd_vs_sdpa_paired"])] for r in var])
    print_decode_gqa(dec)
    targets = dtype_targets(dtype, rows, dec, mach.get("wavepe_isa"))
    targets += variant_targets(dtype, rows, var, mach.get("wavepe_isa"))
    print_targets(targets)
    write_json(f"bench_attention_{dtype}" + ("_quick" if quick else ""),
               {"shape": {"B": B, "H": H, "d": D, "dtype": dtype, "causal": True},
                "inputs": f"q, k, v in {dtype} through wavepe.ops.wavelet_attention and SDPA: whatever either "
                          "does inside (any conversion included) is in the time",
                "rows": rows, "variants": var, "decode_gqa": dec, "targets": targets})


def window_mask(L: int, window: int) -> torch.Tensor:
    """(L, L) bool, True = attend: causal within the window (what a user passes to SDPA for Mistral)."""
    r = torch.arange(L)[:, None] - torch.arange(L)[None, :]
    return (r >= 0) & (r < window)


def run_window(window: int, lengths: list[int], quick: bool, backward_max: int) -> None:
    """The --window run: windowed fused attention against SDPA with the window as a mask, and against L."""
    cfg = WaveletConfig.grid(D)
    rows = []
    for L in lengths:
        mask = window_mask(L, window)
        fns = {
            "sdpa_window_mask": lambda q, k, v, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            "fused_wavelet_window": lambda q, k, v: wo.wavelet_attention(q, k, v, cfg, window=window),
            "fused_nope_window": lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="nope", window=window),
        }
        fwd, fwd_cpu, mem, bwd, bwd_cpu, bwd_mem = measure(fns, L, quick, L <= backward_max)
        for n in fns:
            rows.append({"L": L, "window": window, "method": n, "fwd_ms": fwd[n] * 1e3,
                         "fwd_vs_sdpa": fwd[n] / fwd["sdpa_window_mask"],
                         "fwd_cpu_vs_sdpa": fwd_cpu[n] / fwd_cpu["sdpa_window_mask"],
                         "fwd_bwd_ms": bwd[n] * 1e3 if n in bwd else None,
                         "fwd_bwd_vs_sdpa": bwd[n] / bwd["sdpa_window_mask"] if n in bwd else None,
                         "fwd_bwd_cpu_vs_sdpa": bwd_cpu[n] / bwd_cpu["sdpa_window_mask"] if n in bwd_cpu else None,
                         "fwd_peak_mib": mem[n], "fwd_bwd_peak_mib": bwd_mem.get(n)})
        print(f"L={L} done", flush=True)
    first = min(lengths)
    for r in rows:
        base = next(x for x in rows if x["L"] == first and x["method"] == r["method"])
        r["fwd_vs_shortest"] = r["fwd_ms"] / base["fwd_ms"]
    mach = machine()
    print(f"machine: {mach['cpu']}, wavepe ISA {mach.get('wavepe_isa')}, torch {mach.get('torch')}, "
          f"{torch.get_num_threads()} threads")
    print_table(f"sliding window {window} (Mistral's rule), fp32 B={B} H={H} d={D} causal, "
                f"{torch.get_num_threads()} threads, wavepe ISA {mach.get('wavepe_isa')}",
                ["L", "method", "fwd ms", "/ sdpa+mask", "(cpu)", f"/ itself at L={first}", "fwd+bwd ms",
                 "/ sdpa+mask", "(cpu)", "fwd peak MiB"],
                [[r["L"], r["method"], fmt(r["fwd_ms"], ".1f"), fmt(r["fwd_vs_sdpa"]), fmt(r["fwd_cpu_vs_sdpa"]),
                  fmt(r["fwd_vs_shortest"]), fmt(r["fwd_bwd_ms"], ".1f"), fmt(r["fwd_bwd_vs_sdpa"]),
                  fmt(r["fwd_bwd_cpu_vs_sdpa"]), fmt(r["fwd_peak_mib"], ".0f")] for r in rows])
    targets: list[dict] = []
    fused = {r["L"]: r for r in rows if r["method"] == "fused_wavelet_window"}
    if 4096 in fused and 16384 in fused:
        add_target(targets, "fused wavelet, window: fwd at L=16384 / at L=4096 (linear: 4)",
                   fused[16384]["fwd_ms"] / fused[4096]["fwd_ms"], 4.4)
    if 16384 in fused:
        add_target(targets, "L=16384 fused wavelet, window: fwd / sdpa with the window mask",
                   fused[16384]["fwd_vs_sdpa"], 0.5, cpu=fused[16384]["fwd_cpu_vs_sdpa"])
    print_targets(targets)
    write_json(f"bench_attention_window{window}" + ("_quick" if quick else ""),
               {"shape": {"B": B, "H": H, "d": D, "dtype": "float32", "causal": True, "window": window},
                "rows": rows, "targets": targets})


def fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small lengths, for smoke tests")
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--decode-keys", type=int, default=None)
    parser.add_argument("--backward-max", type=int, default=16384, help="largest L timed with backward")
    parser.add_argument("--budget-gib", type=float, default=6.0, help="skip methods estimated to need more")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                        help="float32 (the default on the CPU: every method and target), or bf16 / fp16: the fused "
                             "attention and SDPA in that dtype next to float32 (default L=4096)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the GPU targets of _attention_cuda.py (bf16 only)")
    parser.add_argument("--window", type=int, default=0,
                        help="a sliding window W: windowed fused attention against SDPA with the window mask "
                             "(default L=4096 16384)")
    args = parser.parse_args()
    n_dec = args.decode_keys or (4096 if args.quick else 32768)
    if args.device == "cuda":
        if args.dtype not in (None, "bf16"):
            parser.error(f"--dtype {args.dtype}: the GPU mode (--device cuda) measures bf16 only")
        import _attention_cuda

        _attention_cuda.run(args.quick, args.lengths, [args.decode_keys] if args.decode_keys else None)
        return
    dtype = args.dtype or "float32"
    if args.window:
        if dtype != "float32" or args.device != "cpu":
            parser.error("--window measures float32 on the CPU")
        run_window(args.window, args.lengths or ([512, 1024] if args.quick else [4096, 16384]), args.quick,
                   args.backward_max)
        return
    if dtype != "float32":
        run_dtype(dtype, args.lengths or ([512] if args.quick else [4096]), n_dec, args.quick, args.backward_max)
        return
    lengths = args.lengths or ([256, 512] if args.quick else [512, 2048, 4096, 16384])
    budget = int(args.budget_gib * GIB)
    cfg = WaveletConfig.grid(D)
    table, r_lo = wo.wavelet_table(cfg, torch.float32, "cpu")

    rows = []
    for L in lengths:
        rows += bench_length(L, budget, args.quick, args.backward_max, cfg, table, r_lo)
        print(f"L={L} done", flush=True)
    dec = bench_decode(n_dec, args.quick)
    dec_gqa = bench_decode_gqa(n_dec, ["float32"], args.quick)

    mach = machine()
    print(f"machine: {mach['cpu']}, wavepe ISA {mach.get('wavepe_isa')}, torch {mach.get('torch')}, "
          f"{torch.get_num_threads()} threads")
    print_table(f"wavelet / ALiBi attention, fp32 B={B} H={H} d={D} causal, {torch.get_num_threads()} threads, "
                f"wavepe ISA {mach.get('wavepe_isa')}",
                ["L", "method", "fwd ms", "fwd / sdpa", "(cpu)", "fwd+bwd ms", "fwd+bwd / sdpa", "(cpu)",
                 "fwd peak MiB", "fwd+bwd peak MiB"],
                [[r["L"], r["method"], fmt(r["fwd_ms"], ".1f"), fmt(r["fwd_vs_sdpa"]), fmt(r["fwd_cpu_vs_sdpa"]),
                  fmt(r["fwd_bwd_ms"], ".1f"), fmt(r["fwd_bwd_vs_sdpa"]), fmt(r["fwd_bwd_cpu_vs_sdpa"]),
                  fmt(r["fwd_peak_mib"], ".0f"), fmt(r["fwd_bwd_peak_mib"], ".0f")]
                 for r in rows])
    print_table(f"decoding one token against N={n_dec} keys (B={B} H={H} d={D})",
                ["method", "ms", "/ sdpa", "(cpu)"],
                [[r["method"], fmt(r["ms"], ".2f"), fmt(r["vs_sdpa"]), fmt(r["cpu_vs_sdpa"])] for r in dec])
    print_decode_gqa(dec_gqa)

    def get(L, method, key):
        for r in rows:
            if r["L"] == L and r["method"] == method:
                return r[key]
        return None

    targets: list[dict] = []

    def target(name, value, limit, smaller=True, cpu=None):
        add_target(targets, name, value, limit, smaller=smaller, cpu=cpu)

    if 4096 in lengths:
        target("L=4096 fused fwd / sdpa fwd", get(4096, "fused", "fwd_vs_sdpa"), 1.15,
               cpu=get(4096, "fused", "fwd_cpu_vs_sdpa"))
        target("L=4096 fused fwd+bwd / sdpa fwd+bwd", get(4096, "fused", "fwd_bwd_vs_sdpa"), 1.25,
               cpu=get(4096, "fused", "fwd_bwd_cpu_vs_sdpa"))
        target("L=4096 fused none fwd / sdpa fwd", get(4096, "fused_none", "fwd_vs_sdpa"), 1.0,
               cpu=get(4096, "fused_none", "fwd_cpu_vs_sdpa"))
        target("L=4096 fused ALiBi fwd / sdpa fwd (no bias)", get(4096, "alibi_fused", "fwd_vs_sdpa"), 1.1,
               cpu=get(4096, "alibi_fused", "fwd_cpu_vs_sdpa"))
        sub, nrm = get(4096, "fused_subnormal", "fwd_ms"), get(4096, "fused", "fwd_ms")
        target("L=4096 subnormal inputs / normal inputs (fused fwd)",
               None if sub is None or nrm is None else sub / nrm, 1.1)
        rs, fu = get(4096, "relshift", "fwd_bwd_ms"), get(4096, "fused", "fwd_bwd_ms")
        target("L=4096 relshift fwd+bwd / fused fwd+bwd", None if rs is None or fu is None else rs / fu, 5.0,
               smaller=False)
    if 16384 in lengths:
        target("L=16384 fused fwd / sdpa fwd", get(16384, "fused", "fwd_vs_sdpa"), 1.05,
               cpu=get(16384, "fused", "fwd_cpu_vs_sdpa"))
        target("L=16384 fused extra peak MiB (beyond output)", get(16384, "fused", "fwd_extra_beyond_output_mib"),
               64.0)
    fw = next(r for r in dec if r["method"] == "fused_wavelet")
    target(f"decode N={n_dec} fused / sdpa", fw["vs_sdpa"], 1.1, cpu=fw["cpu_vs_sdpa"])
    print_targets(targets)
    write_json("bench_attention" + ("_quick" if args.quick else ""),
               {"shape": {"B": B, "H": H, "d": D, "dtype": "float32", "causal": True}, "rows": rows,
                "decode": dec, "decode_gqa": dec_gqa, "targets": targets})


if __name__ == "__main__":
    main()
