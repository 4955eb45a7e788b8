"""Are the Foundation ops fast?  Ratios against references measured in one run.

    python benchmarks/bench_ops.py [--quick] [--only rope_clone|rel_bias_dtype] [--dtype bfloat16]

Targets (fp32, this 2-core CPU):
  * wavelet_bias, B=1 H=8 L=2048 d=128 causal: <= 1.2x torch.matmul(q, k^T),
    and >= 2x faster than a plain-PyTorch rel-shift (Q T^T then skew);
  * rope on q and k, B=1 H=32 L=4096 d=128: >= 4x faster than eager
    q*cos + rotate_half(q)*sin, and >= 60% of a memcpy-equivalent copy's bandwidth;
  * rope_clone: rope on q and k (1, H, 4096, 128), H = 8 and 32, float32 / bfloat16 / float16
    (--dtype picks one): <= 1.3x q.clone() + k.clone() (issue 29);
  * rel_bias_dtype: wavelet_bias forward, B=1 H=8 L=2048 d=128 causal, bfloat16 / float16
    (--dtype picks one) read natively, against the float32 upcast the wrappers used to do
    (q.float(), computed, cast back) and against float32 itself (for information).
Prints a table and writes benchmarks/results/bench_ops.<isa>.json (--only OP: bench_ops_OP.<isa>.json,
--threads T adds _Tthread: bench_ops_rope_clone_1thread.<isa>.json).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from _harness import compare, print_table, write_json  # noqa: E402


def bench_wavelet_bias(quick: bool) -> dict:
    """wavelet_bias, fp32, B=1 H=8 L=2048 d=128 causal, the paper's default grid.

    Forward against torch.matmul(q, k^T) of the same shape (the cost of the
    attention scores themselves; target <= 1.2x its time) and against the
    plain-PyTorch rel-shift wavepe.ops.relbias.plain_rel_bias (target >= 2x faster);
    forward+backward against eager for information, for the wavelet table
    (grad of q) and for a learned clipped table (grads of q and the table).
    """
    import torch

    import wavepe
    import wavepe.ops as wo
    from wavepe.ops.relbias import plain_rel_bias

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
        "eager": lambda: plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=length, causal=True, clamp=False),
    }, repeat=repeat)

    qg = q.clone().requires_grad_()
    grad = torch.randn(b, h, length, length, generator=gen)
    learned = (0.02 * torch.randn(257, d, generator=gen)).requires_grad_()  # Shaw et al. clipped at +-128

    def ours_fb():
        torch.autograd.grad(wo.wavelet_bias(qg, cfg), qg, grad)

    def eager_fb():
        torch.autograd.grad(plain_rel_bias(qg, table, r_lo=r_lo, q_offset=0, k_len=length, causal=True, clamp=False),
                            qg, grad)

    def ours_learned():
        torch.autograd.grad(wo.rel_bias(qg, learned, -128, clamp=True), (qg, learned), grad)

    def eager_learned():
        torch.autograd.grad(plain_rel_bias(qg, learned, r_lo=-128, q_offset=0, k_len=length, causal=True, clamp=True),
                            (qg, learned), grad)

    fb = compare({"ours": ours_fb, "eager": eager_fb}, repeat=max(2, repeat - 2))
    fb_learned = compare({"ours": ours_learned, "eager": eager_learned}, repeat=max(2, repeat - 2))

    ms = {k: v * 1e3 for k, v in fwd.items()}
    vs_mm = ms["ours"] / ms["matmul"]
    speedup = ms["eager"] / ms["ours"]
    rows = [
        [f"wavelet_bias fwd, {shape}", ms["ours"], "torch.matmul(q, k^T)", ms["matmul"], vs_mm,
         "time <= 1.2x", bool(vs_mm <= 1.2)],
        [f"wavelet_bias fwd, {shape}", ms["ours"], "eager rel-shift", ms["eager"], speedup,
         "speedup >= 2x", bool(speedup >= 2.0)],
        [f"wavelet_bias fwd+bwd (dq), {shape}", fb["ours"] * 1e3, "eager rel-shift", fb["eager"] * 1e3,
         fb["eager"] / fb["ours"], "speedup (info)", "-"],
        [f"rel_bias learned R=257 clamp fwd+bwd (dq, dT), {shape}", fb_learned["ours"] * 1e3, "eager rel-shift",
         fb_learned["eager"] * 1e3, fb_learned["eager"] / fb_learned["ours"], "speedup (info)", "-"],
    ]
    return {"rows": rows, "shape": {"B": b, "H": h, "L": length, "d": d}, "threads": torch.get_num_threads()}


def _rotate_half(x):
    # Hugging Face's rotate_half (transformers.models.llama.modeling_llama)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _hf_apply_rotary_pos_emb(q, k, cos, sin):
    # Hugging Face's apply_rotary_pos_emb with unsqueeze_dim=1, written out
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)


def bench_rope(quick: bool) -> dict:
    """fp32 q and k (B, H, L, d), theta 1e4, positions 0..L-1: wavepe vs Hugging Face's
    eager formulation (cos/sin precomputed as LlamaRotaryEmbedding makes them) and vs a
    plain copy of the same bytes (torch.empty_like + copy_ of q and k)."""
    import wavepe.ops as wo
    from wavepe import RopeConfig

    b, h, length, d = (1, 8, 512, 128) if quick else (1, 32, 4096, 128)
    torch.manual_seed(0)
    q = torch.randn(b, h, length, d)
    k = torch.randn(b, h, length, d)
    inv_freq = torch.from_numpy(RopeConfig(theta=1e4).inv_freq(d))
    # cos/sin exactly as LlamaRotaryEmbedding.forward builds them (float32 angles), outside the timing
    positions = torch.arange(length)[None, :]
    freqs = positions[..., None].float() * inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def ours():
        return wo.rope_inv_freq(q, k, 0, inv_freq)

    def hf():
        return _hf_apply_rotary_pos_emb(q, k, cos, sin)

    def copy():
        return torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)

    q_buf, k_buf = torch.empty_like(q), torch.empty_like(k)

    def copy_warm():  # into reused buffers: no page faults, the memory system's own bandwidth
        return q_buf.copy_(q), k_buf.copy_(k)

    # same answer first (HF's float32 angles are off by ~pos * 2^-24 rad)
    (q_ours, k_ours), (q_hf, k_hf) = ours(), hf()
    tol = 8 * length * 2.0**-24 * float(q.abs().max())
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=tol)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=tol)
    del q_ours, k_ours, q_hf, k_hf

    t = compare({"wavepe": ours, "hf_eager": hf, "copy": copy, "copy_warm": copy_warm}, repeat=5 if quick else 15,
                warmup=2)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()  # read q, k and write both outputs
    gbps = {name: moved / sec / 1e9 for name, sec in t.items()}
    case = f"fp32 q,k ({b},{h},{length},{d}) half, theta=1e4"
    speedup = t["hf_eager"] / t["wavepe"]
    bw_ratio = t["copy"] / t["wavepe"]
    rows = [
        [case, t["wavepe"] * 1e3, "HF eager q*cos+rotate_half(q)*sin", t["hf_eager"] * 1e3, speedup, ">= 4x",
         speedup >= 4.0],
        [case, t["wavepe"] * 1e3, "copy_ of q and k (same bytes)", t["copy"] * 1e3, bw_ratio,
         ">= 0.6 (copy/ours)", bw_ratio >= 0.6],
        [case, t["wavepe"] * 1e3, "copy_ into reused buffers (no page faults)", t["copy_warm"] * 1e3,
         t["copy_warm"] / t["wavepe"], "(info)", "-"],
    ]
    print(f"rope: wavepe {gbps['wavepe']:.1f} GB/s, copy {gbps['copy']:.1f} GB/s (into reused buffers "
          f"{gbps['copy_warm']:.1f}), HF eager {gbps['hf_eager']:.1f} GB/s "
          f"(bytes read + written: {moved / 2**20:.0f} MiB per call)")
    return {"rows": rows, "seconds": t, "gb_per_s": gbps, "bytes_moved": moved,
            "shape": [b, h, length, d], "threads": torch.get_num_threads()}


ROPE_DTYPES = ("float32", "bfloat16", "float16")


def bench_rope_clone(quick: bool, dtypes: tuple[str, ...] = ROPE_DTYPES) -> dict:
    """wavepe.ops.rope on q and k (1, H, 4096, 128), H = 8 and 32, float32 / bfloat16 / float16,
    against q.clone() and k.clone(): the same bytes read and written into new tensors (the
    same allocation and first-touch page faults).  Target (issue 29): <= 1.3x clone for every
    dtype; half types are read and written natively (no float32 copy).  Timed in alternation,
    medians."""
    import wavepe.ops as wo
    from wavepe import RopeConfig

    cfg = RopeConfig(theta=1e4)
    length, d = (512, 128) if quick else (4096, 128)
    rows, seconds = [], {}
    for h in (8, 32):
        for name in dtypes:
            dtype = getattr(torch, name)
            gen = torch.Generator().manual_seed(0)
            q = torch.randn(1, h, length, d, generator=gen).to(dtype)
            k = torch.randn(1, h, length, d, generator=gen).to(dtype)
            t = compare({"rope": lambda: wo.rope(q, k, 0, cfg), "clone": lambda: (q.clone(), k.clone())},
                        repeat=5 if quick else 15, warmup=2)
            ratio = t["rope"] / t["clone"]
            case = f"{name} q,k (1,{h},{length},{d})"
            seconds[case] = t
            rows.append([case, t["rope"] * 1e3, "clone() of q and k", t["clone"] * 1e3, ratio, "<= 1.3x", ratio <= 1.3])
            print(f"rope {case}: {t['rope'] * 1e3:.2f} ms, clone {t['clone'] * 1e3:.2f} ms, ratio {ratio:.2f}",
                  flush=True)
    return {"rows": rows, "seconds": seconds, "threads": torch.get_num_threads()}


def bench_rel_bias_dtype(quick: bool, dtypes: tuple[str, ...] = ROPE_DTYPES) -> dict:
    """wavelet_bias forward, B=1 H=8 L=2048 d=128 causal, per dtype: the half types read and
    written natively against the float32 upcast (q.float() -> float32 bias -> .to(dtype), what
    the wrapper did before issue 29) and against float32 inputs.  Timed in alternation, medians."""
    import wavepe
    import wavepe.ops as wo

    b, h, length, d = (1, 8, 256, 128) if quick else (1, 8, 2048, 128)
    cfg = wavepe.WaveletConfig.grid(d)
    rows, seconds = [], {}
    for name in dtypes:
        dtype = getattr(torch, name)
        q = torch.randn(b, h, length, d, generator=torch.Generator().manual_seed(0)).to(dtype)
        q32 = q.float()
        cases = {"native": lambda: wo.wavelet_bias(q, cfg), "float32": lambda: wo.wavelet_bias(q32, cfg)}
        if dtype != torch.float32:
            cases["upcast"] = lambda: wo.wavelet_bias(q.float(), cfg).to(dtype)
        t = compare(cases, repeat=5 if quick else 9, warmup=1)
        case = f"wavelet_bias fwd {name} B={b} H={h} L={length} d={d} causal"
        seconds[case] = t
        if "upcast" in t:
            rows.append([case, t["native"] * 1e3, "float32 upcast + cast back", t["upcast"] * 1e3,
                         t["upcast"] / t["native"], "speedup (info)", "-"])
        rows.append([case, t["native"] * 1e3, "float32 inputs", t["float32"] * 1e3, t["float32"] / t["native"],
                     "speedup (info)", "-"])
        print(f"{case}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in t.items()), flush=True)
    return {"rows": rows, "seconds": seconds, "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small shapes, for smoke tests")
    parser.add_argument("--only", choices=["wavelet_bias", "rope", "rope_clone", "rel_bias_dtype"],
                        help="run one op's benchmark")
    parser.add_argument("--dtype", choices=[*ROPE_DTYPES, "all"], default="all",
                        help="rope_clone, rel_bias_dtype: the dtype(s) of q (and k) (default all three)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads before timing (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {}
    dtypes = ROPE_DTYPES if args.dtype == "all" else (args.dtype,)
    benches = (("wavelet_bias", bench_wavelet_bias), ("rope", bench_rope),
               ("rope_clone", lambda quick: bench_rope_clone(quick, dtypes)),
               ("rel_bias_dtype", lambda quick: bench_rel_bias_dtype(quick, dtypes)))
    for name, bench in benches:
        if args.only not in (None, name):
            continue
        try:
            results[name] = bench(args.quick)
        except NotImplementedError:  # an op whose kernels have not landed yet
            print(f"{name}: not implemented yet, skipped")
    rows = []
    for name, r in results.items():
        for row in r["rows"]:
            rows.append([name, *row])
    print_table("bench_ops", ["op", "case", "time (ms)", "reference", "ref time (ms)", "ratio", "target", "met"], rows)
    write_json("bench_ops" + ("_quick" if args.quick else "") + (f"_{args.only}" if args.only else "")
               + (f"_{args.threads}thread" if args.threads else ""), results)


if __name__ == "__main__":
    main()
