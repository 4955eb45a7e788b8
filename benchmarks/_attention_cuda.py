"""GPU mode of bench_attention.py (``--device cuda``): the speed targets of the CUDA kernels (issue 64).

bf16, B=1, H=32, d=128, causal, the paper's default wavelet grid, L = 4096 and 16384 (timed in
alternation with the references, CUDA-synchronised, medians), against SDPA's flash backend
(FlashAttention-2) without bias, and beside SDPA's cuDNN backend and FlexAttention (compiled) with the same
bias -- as a user without wavepe writes it (the issue's peer, "flex + q.T^T": P = q T^T, (B, H, L, R), computed in
the call and gathered by the ``score_mod``, its gradient into q included), and reading the whole (B, H, L, L) bias
precomputed outside the call ("flex + LxL bias": no gradient into q through it, L^2 values, a lower bound):

  * wavepe nope forward <= 1.15x flash, forward+backward <= 1.3x;
  * wavepe wavelet forward <= 2x flash at L=4096, <= 1.5x at 16384; forward+backward <= 1.7x at 16384;
  * >= 2x faster than FlexAttention with the same bias, forward and forward+backward;
  * decoding one token (GQA 32/8 heads) <= 1.5x flash at 32k and 128k keys;
  * RoPE on q and k >= 70 % of the bandwidth of a device-to-device ``copy_`` of the same bytes (each call timed
    alone, and queued: calls launched back to back, the host's overhead overlapping the kernels).

Also timed: the nope forward and forward+backward on 16 query rows (keys) a warp (WAVEPE_CUDA_WIDE=0:
attn_fwd_tc_kernel, attn_bwd_dkdv_tc_kernel, attn_bwd_dq_tc_kernel) against the wide instances plain calls run (32 a
warp: attn_fwd_tc_wide_kernel, attn_bwd_dkdv_tc_wide_kernel, attn_bwd_dq_tc_wide_kernel) -- the A/B of the static
model's shared-memory term; on a GPU of 100 KiB an SM (sm_86 / sm_89 / sm_120), whose plain forward at head_dim 128
runs the 16-row instance (two CTAs an SM where one wide CTA fits), the nope forward on the wide one forced
(WAVEPE_CUDA_WIDE=1) -- the A/B of that choice; the wavelet call in one launch a
kernel (one document: at L=16384 the plain call takes the band split, its blocks beyond the band on the wide
instances -- their A/B); ALiBi, the wavelet bias with a 1024-token window and with soft-capping (cap 30), a learned relative
table of the wavelet table's rows (pos_enc="relative", its gradient asked: the backward adds the dT pass on the
band's diagonals, attn_bwd_dtable_tc_kernel); and at head_dim
256 (Gemma 2's shape: 16 query / 8 key-value heads, L=4096, its soft-cap 50) flash, nope and the wavelet bias
with and without the cap, forward and forward+backward (no target; the tensor-core kernels at 256: the
dK/dV's two column slices recompute S and dP), and at L=16384 the wavelet with the band split against the same
call in one launch a kernel, forward and forward+backward; at head_dim 96 (Phi-3-mini's: no tensor-core instance)
nope and the wavelet on zero-padded copies and, WAVEPE_CUDA_PAD=0, on the general kernels, beside flash.  TFLOP/s
count a causal forward as 2 B H L^2 d (two products over half the square) and forward+backward as 3.5x
that, whatever the method skips; decoding's GB/s count the keys and values read once.  Results go to
benchmarks/results/bench_attention_cuda.json.
"""

from __future__ import annotations

import math
import os
import time
from unittest import mock

import torch
import torch.nn.functional as F

import wavepe.ops as wo
from wavepe import RopeConfig, WaveletConfig
from wavepe.ops.attention import plain_attention
from wavepe.ops.relbias import plain_rel_bias

from _harness import compare, flex_attention_with_bias, flex_attention_with_qt, print_table, write_json

B, H, D = 1, 32, 128
H_KV = 8  # decoding: GQA, 4 query heads per key/value head
DTYPE = torch.bfloat16
DEV = "cuda"
WINDOW, SOFTCAP = 1024, 30.0
FLEX_QT = "flex + q.T^T"  # the FlexAttention peer (_harness.flex_attention_with_qt)
FLEX_LL = "flex + LxL bias"  # FlexAttention reading the bias precomputed, L x L (_harness.flex_attention_with_bias)


def _sdpa(backend: str):
    """SDPA restricted to one backend (FLASH_ATTENTION, CUDNN_ATTENTION): (q, k, v, causal) -> out."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(q, k, v, causal=True):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return run


_flash = _sdpa("FLASH_ATTENTION")


def _inputs(L: int, grad: bool = False):
    g = torch.Generator(device=DEV).manual_seed(L)
    return [torch.randn(B, H, L, D, device=DEV, dtype=DTYPE, generator=g).requires_grad_(grad) for _ in range(4)]


def _available(fns: dict, args) -> dict:
    """The methods that run here (one call each, outside the timing: compiles happen there); the others are
    reported and left out."""
    ok = {}
    for name, fn in fns.items():
        try:
            fn(*args)
            ok[name] = fn
        except Exception as exc:  # noqa: BLE001 - a backend this GPU or torch lacks: report, do not abort
            print(f"{name} unavailable: {type(exc).__name__}: {str(exc)[:200]}")
    return ok


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


def _with_wide(setting: str, fn):
    """fn called with WAVEPE_CUDA_WIDE=setting.  "0": table-free calls at head_dim 64 / 128 on the 16-row (16-key)
    instances (a step's backward too when fn is the whole step); "1": table-free forwards there on the wide instance
    (32 rows a warp) also where an SM holds fewer of its CTAs than of the 16-row one's (the 100 KiB SMs at 128:
    wide_holds_sm in csrc/cuda/attention.cu) -- the A/B of that choice."""
    def run(*args):
        with mock.patch.dict(os.environ, {"WAVEPE_CUDA_WIDE": setting}):
            return fn(*args)
    return run


def _small_sm() -> bool:
    """Is the device's shared memory an SM at most 100 KiB (sm_86 / sm_89 / sm_120), where the forward's choice of
    instance differs (unknown to this torch: no)?"""
    if DEV != "cuda":  # (the CPU's smoke run: the method runs there too, WAVEPE_CUDA_WIDE read by no kernel)
        return True
    per_sm = getattr(torch.cuda.get_device_properties(DEV), "shared_memory_per_multiprocessor", None)
    return per_sm is not None and per_sm <= 100 * 1024


NOPE_16 = "nope, 16 rows a warp"
NOPE_WIDE = "nope, 32 rows a warp (forced)"
WAVELET_ONE = "wavelet, one launch"


def _methods(cfg) -> dict:
    """The timed methods: (q, k, v) -> out."""
    return {
        "flash": _flash,
        "cudnn": _sdpa("CUDNN_ATTENTION"),
        "nope": lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="nope"),
        NOPE_16: _with_wide("0", lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="nope")),
        "alibi": lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="alibi"),
        "wavelet": lambda q, k, v: wo.wavelet_attention(q, k, v, cfg),
        f"wavelet window {WINDOW}": lambda q, k, v: wo.wavelet_attention(q, k, v, cfg, window=WINDOW),
        f"wavelet softcap {SOFTCAP:g}": lambda q, k, v: wo.wavelet_attention(q, k, v, cfg, softcap=SOFTCAP),
        **({NOPE_WIDE: _with_wide("1", lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="nope"))}
           if _small_sm() else {}),
    }


def bench_lengths(lengths, cfg, quick: bool) -> list[dict]:
    rows = []
    scale = 1.0 / math.sqrt(D)
    table, r_lo = wo.wavelet_table(cfg, DTYPE, DEV)
    for L in lengths:
        q, k, v, go = _inputs(L)
        qg, kg, vg, _ = _inputs(L, grad=True)
        fns = dict(_methods(cfg))
        rel = table.detach().clone().requires_grad_(True)  # a learned table of the wavelet's rows
        fns["relative (learned)"] = lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="relative",
                                                                         rel_table=(rel, r_lo))
        # the same wavelet call in one launch a kernel (one document: documents never take the band split) -- at
        # L=16384 the plain call runs the blocks beyond the band on the wide instances (band_split_pays)
        one_doc = torch.tensor([0, L], device=DEV, dtype=torch.int32)
        fns[WAVELET_ONE] = lambda q, k, v: wo.wavelet_attention(q, k, v, cfg, cu_seqlens=one_doc)
        with torch.no_grad():
            bias = plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=L, causal=True, clamp=False)
            bias = (bias * scale).contiguous()
        try:  # FlexAttention: compiled at its first call
            # the peer: P = q T^T (B, H, L, R) computed in the call, the score_mod gathering it (the same
            # bias, its gradient into q included) -- checked against the fused call once, so no wrong peer is timed
            fns[FLEX_QT] = flex_attention_with_qt(table, r_lo, scale, L, DEV)
            with torch.no_grad():
                torch.testing.assert_close(fns[FLEX_QT](q, k, v).float(), wo.wavelet_attention(q, k, v, cfg).float(),
                                           atol=3e-2, rtol=3e-2)
            # and reading the whole (B, H, L, L) bias precomputed outside the call (no gradient into q through it;
            # L^2 values: 17 GB at L=16384) -- a lower bound for any bias FlexAttention is given
            fns[FLEX_LL] = flex_attention_with_bias(bias, DEV)
        except Exception as exc:  # noqa: BLE001
            print(f"FlexAttention unavailable at L={L}: {type(exc).__name__}: {str(exc)[:300]}")
        with torch.no_grad():
            fwd_fns = _available(fns, (q, k, v))
            fwd = compare({n: (lambda fn=fn: fn(q, k, v)) for n, fn in fwd_fns.items()},
                          repeat=5 if quick else 20, warmup=2)

        def step(fn, extra=()):
            def run():
                return torch.autograd.grad(fn(qg, kg, vg), (qg, kg, vg) + extra, go)
            return run

        bwd_fns = {n: fn for n, fn in fwd_fns.items()
                   if n in ("flash", "cudnn", "nope", NOPE_16, "wavelet", WAVELET_ONE, FLEX_QT, FLEX_LL,
                            "relative (learned)")}
        bwd_fns = _available({n: _with_wide("0", step(fn)) if n == NOPE_16 else
                              step(fn, (rel,) if n == "relative (learned)" else ()) for n, fn in bwd_fns.items()}, ())
        bwd = compare(bwd_fns, repeat=3 if quick else 10, warmup=1)
        del bias
        flops = 2.0 * B * H * L * L * D
        for name, t in fwd.items():
            rows.append({"L": L, "method": name, "fwd_ms": t * 1e3, "fwd_vs_flash": t / fwd["flash"] if "flash" in fwd else None,
                         "fwd_tflops": flops / t / 1e12,
                         "fwd_bwd_ms": bwd[name] * 1e3 if name in bwd else None,
                         "fwd_bwd_vs_flash": bwd[name] / bwd["flash"] if name in bwd and "flash" in bwd else None,
                         "fwd_bwd_tflops": 3.5 * flops / bwd[name] / 1e12 if name in bwd else None})
        print(f"L={L} done", flush=True)
    return rows


def bench_decode(n_keys: int, cfg, quick: bool) -> list[dict]:
    """One query token at the end of n_keys cached keys, GQA (H query heads, H_KV key/value heads)."""
    g = torch.Generator(device=DEV).manual_seed(n_keys)
    q = torch.randn(B, H, 1, D, device=DEV, dtype=DTYPE, generator=g)
    k, v = (torch.randn(B, H_KV, n_keys, D, device=DEV, dtype=DTYPE, generator=g) for _ in range(2))
    fns = {"flash": lambda: _flash(q, k, v, causal=False), "nope": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
           "wavelet": lambda: wo.wavelet_attention(q, k, v, cfg)}
    with torch.no_grad():
        fns = _available({n: (lambda fn=fn: fn()) for n, fn in fns.items()}, ())
        t = compare(fns, repeat=10 if quick else 50, warmup=3)
    moved = 2 * k.numel() * k.element_size()  # keys and values, read once
    return [{"N": n_keys, "method": n, "ms": t[n] * 1e3, "vs_flash": t[n] / t["flash"] if "flash" in t else None,
             "GBps": moved / t[n] / 1e9} for n in fns]


def _gemma_inputs(L: int, seed: int):
    """Gemma 2's head shape: d=256, GQA 16/8 heads; q, k, v (asking for gradients) and dO, bf16."""
    h, h_kv, d = 16, 8, 256
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(B, h, L, d, device=DEV, dtype=DTYPE, generator=g, requires_grad=True)
    k, v = (torch.randn(B, h_kv, L, d, device=DEV, dtype=DTYPE, generator=g, requires_grad=True) for _ in range(2))
    return q, k, v, torch.randn(B, h, L, d, device=DEV, dtype=DTYPE, generator=g)


def _fwd_and_fwd_bwd(fns: dict, q, k, v, go, ref: str, repeats: tuple[int, int]) -> list[dict]:
    """Each method's forward and forward+backward (CUDA-synchronised medians, in alternation), and its ratios to
    method ``ref`` (keys fwd_vs_<ref>, fwd_bwd_vs_<ref>); TFLOP/s count a causal forward as 2 B H L^2 d."""
    with torch.no_grad():
        fwd_fns = _available(fns, ())
        fwd = compare(fwd_fns, repeat=repeats[0], warmup=2)
    bwd_fns = _available({n: (lambda fn=fn: torch.autograd.grad(fn(), (q, k, v), go)) for n, fn in fwd_fns.items()}, ())
    bwd = compare(bwd_fns, repeat=repeats[1], warmup=1)
    _, h, L, d = q.shape
    flops = 2.0 * B * h * L * L * d
    return [{"L": L, "d": d, "method": n, "fwd_ms": t * 1e3, f"fwd_vs_{ref}": t / fwd[ref] if ref in fwd else None,
             "fwd_tflops": flops / t / 1e12, "fwd_bwd_ms": bwd[n] * 1e3 if n in bwd else None,
             f"fwd_bwd_vs_{ref}": bwd[n] / bwd[ref] if n in bwd and ref in bwd else None} for n, t in fwd.items()]


def bench_head256(L: int, quick: bool) -> list[dict]:
    """Gemma 2's head shape: d=256, GQA 16/8 heads, causal, its soft-cap 50 (flash has no soft-cap)."""
    cap, cfg = 50.0, WaveletConfig.grid(256)
    q, k, v, go = _gemma_inputs(L, L + 256)
    fns = {"flash": lambda: _flash(q, k, v), "nope": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
           "wavelet": lambda: wo.wavelet_attention(q, k, v, cfg),
           f"wavelet softcap {cap:g}": lambda: wo.wavelet_attention(q, k, v, cfg, softcap=cap)}
    return _fwd_and_fwd_bwd(fns, q, k, v, go, "flash", (5, 3) if quick else (20, 10))


def bench_band_split(L: int, quick: bool) -> list[dict]:
    """Gemma 2's head shape at a length where the wavelet's kernels take the band split (head_dim 256 with a
    table: the blocks beyond the band in launches of two CTAs an SM, band_split_pays in csrc/cuda/attention.cu),
    beside the same call in one launch a kernel (cu_seqlens [0, L]: one document, the same result; documents never
    take the split), nope and flash; forward and forward+backward."""
    cfg = WaveletConfig.grid(256)
    q, k, v, go = _gemma_inputs(L, L + 257)
    one_doc = torch.tensor([0, L], device=DEV, dtype=torch.int32)
    fns = {"flash": lambda: _flash(q, k, v), "nope": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
           "wavelet (band split)": lambda: wo.wavelet_attention(q, k, v, cfg),
           "wavelet, one launch": lambda: wo.wavelet_attention(q, k, v, cfg, cu_seqlens=one_doc)}
    return _fwd_and_fwd_bwd(fns, q, k, v, go, "nope", (3, 2) if quick else (10, 5))


def _unpadded(fn):
    """fn called with WAVEPE_CUDA_PAD=0: a head dim without a tensor-core instance on the general kernels (its
    backward too: fn is the whole step), not on zero-padded copies."""
    def run(*args):
        with mock.patch.dict(os.environ, {"WAVEPE_CUDA_PAD": "0"}):
            return fn(*args)
    return run


def bench_padded(L: int, quick: bool) -> list[dict]:
    """Phi-3-mini's head shape: d=96 (no tensor-core instance: the kernels of 128 on zero-padded copies), 32 heads,
    causal; nope and the wavelet bias, padded and not (WAVEPE_CUDA_PAD=0: the general kernels), beside flash."""
    h, d = 32, 96
    g = torch.Generator(device=DEV).manual_seed(L + 96)
    q, k, v = (torch.randn(B, h, L, d, device=DEV, dtype=DTYPE, generator=g, requires_grad=True) for _ in range(3))
    go = torch.randn(B, h, L, d, device=DEV, dtype=DTYPE, generator=g)
    cfg = WaveletConfig.grid(d)
    fns = {"flash": lambda: _flash(q, k, v), "nope": lambda: wo.wavelet_attention(q, k, v, pos_enc="nope"),
           "nope, unpadded": _unpadded(lambda: wo.wavelet_attention(q, k, v, pos_enc="nope")),
           "wavelet": lambda: wo.wavelet_attention(q, k, v, cfg),
           "wavelet, unpadded": _unpadded(lambda: wo.wavelet_attention(q, k, v, cfg))}
    return _fwd_and_fwd_bwd(fns, q, k, v, go, "flash", (5, 3) if quick else (20, 10))


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
        # and queued: n calls back to back between two events, as a model's launches run (the host's ~40-70 us a
        # call -- Python, the op's dispatch -- overlapping the kernels; a call timed alone waits for it)
        q_t = {name: _queued(fn, 10 if quick else 50) for name, fn in
               (("rope", lambda: wo.rope(q, k, 0, cfg)), ("copy", lambda: dst.copy_(src)))}
    moved = 2 * 2 * q.numel() * q.element_size()  # q and k, read and written
    rope_gbs, copy_gbs = moved / t["rope"] / 1e9, moved / t["copy"] / 1e9
    rope_q, copy_q = moved / q_t["rope"] / 1e9, moved / q_t["copy"] / 1e9
    return {"L": L, "rope_ms": t["rope"] * 1e3, "copy_ms": t["copy"] * 1e3, "rope_GBps": rope_gbs,
            "copy_GBps": copy_gbs, "fraction_of_copy": rope_gbs / copy_gbs,
            "rope_queued_ms": q_t["rope"] * 1e3, "copy_queued_ms": q_t["copy"] * 1e3, "rope_queued_GBps": rope_q,
            "copy_queued_GBps": copy_q, "fraction_of_copy_queued": rope_q / copy_q}


def _queued(fn, n: int) -> float:
    """Seconds a call of ``fn`` over ``n`` calls launched back to back (CUDA events around them; on the CPU the
    wall clock)."""
    for _ in range(3):
        fn()
    if DEV != "cuda":
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def run(quick: bool = False, lengths=None, decode_keys=None, device: str = "cuda") -> None:
    """The tables and targets; ``device="cpu"`` runs the same code on the CPU (a smoke run of this script:
    the flash and cuDNN backends are left out there, nothing is a measurement)."""
    global DEV
    DEV = device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    cfg = WaveletConfig.grid(D)
    _check_fused_against_eager(cfg)
    lengths = lengths or ([1024, 2048] if quick else [4096, 16384])
    decode_keys = decode_keys or ([4096] if quick else [32768, 131072])
    rows = bench_lengths(lengths, cfg, quick)
    dec = [r for n in decode_keys for r in bench_decode(n, cfg, quick)]
    h256 = bench_head256(1024 if quick else 4096, quick)
    split256 = bench_band_split(2048 if quick else 16384, quick)
    padded = bench_padded(1024 if quick else 4096, quick)
    rope = bench_rope(2048 if quick else 8192, quick)

    def f(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke run)"
    print_table(f"attention on {gpu}, bf16 B={B} H={H} d={D} causal",
                ["L", "method", "fwd ms", "fwd / flash", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd / flash",
                 "fwd+bwd TFLOP/s"],
                [[r["L"], r["method"], f(r["fwd_ms"], ".2f"), f(r["fwd_vs_flash"]), f(r["fwd_tflops"], ".0f"),
                  f(r["fwd_bwd_ms"], ".2f"), f(r["fwd_bwd_vs_flash"]), f(r["fwd_bwd_tflops"], ".0f")] for r in rows])
    print_table(f"decoding one token, GQA {H}/{H_KV} heads, d={D}", ["keys", "method", "ms", "/ flash", "GB/s"],
                [[r["N"], r["method"], f(r["ms"], ".3f"), f(r["vs_flash"]), f(r["GBps"], ".0f")] for r in dec])
    print_table(f"head_dim 256 (Gemma 2's shape), bf16 B={B} H=16/8 L={h256[0]['L']} causal",
                ["method", "fwd ms", "fwd / flash", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd / flash"],
                [[r["method"], f(r["fwd_ms"], ".2f"), f(r["fwd_vs_flash"]), f(r["fwd_tflops"], ".0f"),
                  f(r["fwd_bwd_ms"], ".2f"), f(r["fwd_bwd_vs_flash"])] for r in h256])
    print_table(f"head_dim 256 at L={split256[0]['L']}: the band split against one launch, bf16 B={B} H=16/8 causal",
                ["method", "fwd ms", "fwd / nope", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd / nope"],
                [[r["method"], f(r["fwd_ms"], ".2f"), f(r["fwd_vs_nope"]), f(r["fwd_tflops"], ".0f"),
                  f(r["fwd_bwd_ms"], ".2f"), f(r["fwd_bwd_vs_nope"])] for r in split256])
    print_table(f"head_dim 96 (Phi-3-mini's shape: zero-padded to 128, or not), bf16 B={B} H=32 L={padded[0]['L']} causal",
                ["method", "fwd ms", "fwd / flash", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd / flash"],
                [[r["method"], f(r["fwd_ms"], ".2f"), f(r["fwd_vs_flash"]), f(r["fwd_tflops"], ".0f"),
                  f(r["fwd_bwd_ms"], ".2f"), f(r["fwd_bwd_vs_flash"])] for r in padded])
    print_table(f"RoPE on q and k, bf16 B={B} H={H} L={rope['L']} d={D}",
                ["rope ms", "copy ms", "rope GB/s", "copy GB/s", "rope / copy"],
                [[f(rope["rope_ms"], ".3f"), f(rope["copy_ms"], ".3f"), f(rope["rope_GBps"], ".0f"),
                  f(rope["copy_GBps"], ".0f"), f(rope["fraction_of_copy"])],
                 [f(rope["rope_queued_ms"], ".3f") + " (queued)", f(rope["copy_queued_ms"], ".3f") + " (queued)",
                  f(rope["rope_queued_GBps"], ".0f"), f(rope["copy_queued_GBps"], ".0f"),
                  f(rope["fraction_of_copy_queued"])]])

    def get(L, method, key):
        return next((r[key] for r in rows if r["L"] == L and r["method"] == method), None)

    def over(a, b):
        return None if a is None or b is None else a / b

    targets = []

    def target(name, value, limit, smaller=True):
        met = None if value is None else (value <= limit if smaller else value >= limit)
        targets.append({"target": name, "value": value, "limit": limit, "met": met})

    short, long_ = lengths[0], lengths[-1]  # the 4096 and 16384
    for L in lengths:
        target(f"L={L} nope fwd / flash", get(L, "nope", "fwd_vs_flash"), 1.15)
        target(f"L={L} nope fwd+bwd / flash", get(L, "nope", "fwd_bwd_vs_flash"), 1.3)
        target(f"L={L} {FLEX_QT} fwd / wavelet fwd", over(get(L, FLEX_QT, "fwd_ms"), get(L, "wavelet", "fwd_ms")),
               2.0, smaller=False)
        target(f"L={L} {FLEX_QT} fwd+bwd / wavelet fwd+bwd",
               over(get(L, FLEX_QT, "fwd_bwd_ms"), get(L, "wavelet", "fwd_bwd_ms")), 2.0, smaller=False)
    target(f"L={short} wavelet fwd / flash", get(short, "wavelet", "fwd_vs_flash"), 2.0)
    target(f"L={long_} wavelet fwd / flash", get(long_, "wavelet", "fwd_vs_flash"), 1.5)
    target(f"L={long_} wavelet fwd+bwd / flash", get(long_, "wavelet", "fwd_bwd_vs_flash"), 1.7)
    for n in decode_keys:
        target(f"decode N={n} wavelet / flash", next((r["vs_flash"] for r in dec if r["N"] == n and
                                                      r["method"] == "wavelet"), None), 1.5)
    target("RoPE bandwidth / copy bandwidth", rope["fraction_of_copy"], 0.7, smaller=False)
    target("RoPE bandwidth / copy bandwidth, queued", rope["fraction_of_copy_queued"], 0.7, smaller=False)
    print_table("targets (issue 64)", ["target", "value", "limit", "met"],
                [[t["target"], f(t["value"]), t["limit"], t["met"]] for t in targets])
    write_json("bench_attention_cuda" + ("_quick" if quick else "") + ("" if device == "cuda" else "_cpu_smoke"),
               {"shape": {"B": B, "H": H, "H_kv_decode": H_KV, "d": D, "dtype": "bfloat16", "causal": True},
                "gpu": gpu, "rows": rows, "decode": dec, "head_dim_256": h256, "band_split_256": split256, "head_dim_96": padded, "rope": rope,
                "targets": targets})
