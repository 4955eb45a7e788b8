"""GPU mode of bench_attention.py (``--device cuda``): the speed targets of the CUDA kernels.

bf16, B=1, H=32, d=128, causal, the paper's default wavelet grid (timed in
alternation with the references, CUDA-synchronised, medians):

  * fused forward at L=8192 <= 1.7x SDPA's flash backend without bias
    (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``, ``is_causal=True``);
  * >= 2x faster than FlexAttention (compiled) with a ``score_mod`` reading a
    precomputed rel-shift bias (the bias is computed once, outside the timing);
  * RoPE on q and k >= 70 % of the device's memory bandwidth, measured as the
    bandwidth of a device-to-device ``copy_`` of the same number of bytes.

Also reported: forward+backward against flash, the fused kernel without bias,
and decoding one token against N cached keys (split-KV) against flash.
Results go to benchmarks/results/bench_attention_cuda.json.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import wavepe.ops as wo
from wavepe import RopeConfig, WaveletConfig
from wavepe.ops.attention import plain_attention
from wavepe.ops.relbias import plain_rel_bias

from _harness import compare, flex_with_bias, print_table, write_json

B, H, D = 1, 32, 128
DTYPE = torch.bfloat16
DEV = "cuda"


def _flash(q, k, v, causal=True):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _inputs(L: int, grad: bool = False):
    g = torch.Generator(device=DEV).manual_seed(L)
    return [torch.randn(B, H, L, D, device=DEV, dtype=DTYPE, generator=g).requires_grad_(grad) for _ in range(4)]


def _check_fused_against_eager(cfg) -> None:
    """Do not time garbage: the fused kernel against bias + SDPA in fp32 on a small case."""
    q, k, v, _ = _inputs(512)
    got = wo.wavelet_attention(q, k, v, cfg).float()
    table, r_lo = wo.wavelet_table(cfg, torch.float32, DEV)
    scale = 1.0 / math.sqrt(D)
    bias = plain_rel_bias(q.float(), table, r_lo=r_lo, q_offset=0, k_len=512, causal=True, clamp=False) * scale
    want = plain_attention(q.float(), k.float(), v.float(), bias, causal=True, scale=scale, q_offset=0,
                           bias_scaled=True)
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)


def bench_lengths(lengths, cfg, quick: bool) -> list[dict]:
    rows = []
    scale = 1.0 / math.sqrt(D)
    table, r_lo = wo.wavelet_table(cfg, DTYPE, DEV)
    for L in lengths:
        q, k, v, go = _inputs(L)
        fns = {
            "flash": lambda: _flash(q, k, v),
            "fused": lambda: wo.wavelet_attention(q, k, v, cfg),
            "fused_none": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
        }
        with torch.no_grad():
            bias = plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=L, causal=True, clamp=False)
            bias = (bias * scale).contiguous()
            try:
                fns["flex_bias"] = flex_with_bias(q, k, v, bias)
                fns["flex_bias"]()  # compile outside the timing
            except Exception as exc:  # noqa: BLE001 - report, do not abort the other figures
                print(f"FlexAttention unavailable at L={L}: {exc}")
                fns.pop("flex_bias", None)
            fwd = compare(fns, repeat=5 if quick else 20, warmup=2)
        del bias
        qg, kg, vg, _ = _inputs(L, grad=True)

        def step(fn):
            def run():
                out = fn(qg, kg, vg)
                return torch.autograd.grad(out, (qg, kg, vg), go)
            return run

        bwd = compare({"flash": step(_flash), "fused": step(lambda a, b, c: wo.wavelet_attention(a, b, c, cfg))},
                      repeat=3 if quick else 10, warmup=1)
        for name, t in fwd.items():
            rows.append({"L": L, "method": name, "fwd_ms": t * 1e3, "fwd_vs_flash": t / fwd["flash"],
                         "fwd_bwd_ms": bwd[name] * 1e3 if name in bwd else None,
                         "fwd_bwd_vs_flash": bwd[name] / bwd["flash"] if name in bwd else None})
        print(f"L={L} done", flush=True)
    return rows


def bench_decode(n_keys: int, cfg, quick: bool) -> list[dict]:
    g = torch.Generator(device=DEV).manual_seed(n_keys)
    q = torch.randn(B, H, 1, D, device=DEV, dtype=DTYPE, generator=g)
    k, v = (torch.randn(B, H, n_keys, D, device=DEV, dtype=DTYPE, generator=g) for _ in range(2))
    fns = {"flash": lambda: _flash(q, k, v, causal=False), "fused": lambda: wo.wavelet_attention(q, k, v, cfg),
           "fused_none": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope")}
    with torch.no_grad():
        t = compare(fns, repeat=10 if quick else 50, warmup=3)
    return [{"N": n_keys, "method": n, "ms": t[n] * 1e3, "vs_flash": t[n] / t["flash"]} for n in fns]


def bench_rope(L: int, quick: bool) -> dict:
    g = torch.Generator(device=DEV).manual_seed(1)
    q = torch.randn(B, H, L, D, device=DEV, dtype=DTYPE, generator=g)
    k = torch.randn(B, H, L, D, device=DEV, dtype=DTYPE, generator=g)
    cfg = RopeConfig()
    src = torch.randn(2 * q.numel(), device=DEV, dtype=DTYPE, generator=g)
    dst = torch.empty_like(src)
    with torch.no_grad():
        t = compare({"rope": lambda: wo.rope(q, k, 0, cfg), "copy": lambda: dst.copy_(src)},
                    repeat=10 if quick else 50, warmup=3)
    moved = 2 * 2 * q.numel() * q.element_size()  # q and k, read and written
    rope_gbs, copy_gbs = moved / t["rope"] / 1e9, moved / t["copy"] / 1e9
    return {"L": L, "rope_ms": t["rope"] * 1e3, "copy_ms": t["copy"] * 1e3, "rope_GBps": rope_gbs,
            "copy_GBps": copy_gbs, "fraction_of_copy": rope_gbs / copy_gbs}


def run(quick: bool = False, lengths=None, decode_keys=None) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    cfg = WaveletConfig.grid(D)
    _check_fused_against_eager(cfg)
    lengths = lengths or ([1024, 2048] if quick else [2048, 8192])
    n_dec = decode_keys or (4096 if quick else 32768)
    rows = bench_lengths(lengths, cfg, quick)
    dec = bench_decode(n_dec, cfg, quick)
    rope = bench_rope(2048 if quick else 8192, quick)

    def f(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    gpu = torch.cuda.get_device_name()
    print_table(f"attention on {gpu}, bf16 B={B} H={H} d={D} causal",
                ["L", "method", "fwd ms", "fwd / flash", "fwd+bwd ms", "fwd+bwd / flash"],
                [[r["L"], r["method"], f(r["fwd_ms"], ".2f"), f(r["fwd_vs_flash"]), f(r["fwd_bwd_ms"], ".2f"),
                  f(r["fwd_bwd_vs_flash"])] for r in rows])
    print_table(f"decoding one token against N={n_dec} keys", ["method", "ms", "/ flash"],
                [[r["method"], f(r["ms"], ".3f"), f(r["vs_flash"])] for r in dec])
    print_table(f"RoPE on q and k, bf16 B={B} H={H} L={rope['L']} d={D}",
                ["rope ms", "copy ms", "rope GB/s", "copy GB/s", "rope / copy"],
                [[f(rope["rope_ms"], ".3f"), f(rope["copy_ms"], ".3f"), f(rope["rope_GBps"], ".0f"),
                  f(rope["copy_GBps"], ".0f"), f(rope["fraction_of_copy"])]])

    def get(L, method, key):
        return next((r[key] for r in rows if r["L"] == L and r["method"] == method), None)

    targets = []

    def target(name, value, limit, smaller=True):
        met = None if value is None else (value <= limit if smaller else value >= limit)
        targets.append({"target": name, "value": value, "limit": limit, "met": met})

    L_t = 8192 if 8192 in lengths else lengths[-1]
    target(f"L={L_t} fused fwd / flash fwd (no bias)", get(L_t, "fused", "fwd_vs_flash"), 1.7)
    flex, fused = get(L_t, "flex_bias", "fwd_ms"), get(L_t, "fused", "fwd_ms")
    target(f"L={L_t} flex+bias fwd / fused fwd", None if flex is None or fused is None else flex / fused, 2.0,
           smaller=False)
    target("RoPE bandwidth / copy bandwidth", rope["fraction_of_copy"], 0.7, smaller=False)
    print_table("targets", ["target", "value", "limit", "met"],
                [[t["target"], f(t["value"]), t["limit"], t["met"]] for t in targets])
    write_json("bench_attention_cuda" + ("_quick" if quick else ""),
               {"shape": {"B": B, "H": H, "d": D, "dtype": "bfloat16", "causal": True}, "gpu": gpu, "rows": rows,
                "decode": dec, "rope": rope, "targets": targets})
