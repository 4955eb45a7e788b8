"""The CUDA kernels on a GPU (every test is marked ``cuda`` and skipped without one).

Same oracles as the CPU tests (tests/reference.py, float64), CPU-vs-CUDA
agreement, ``torch.library.opcheck`` on CUDA tensors, ``gradcheck`` in float64
on CUDA, bitwise determinism of the backward passes, and bf16/fp16 inputs
computed natively.  tests/test_cuda_emu.py runs the same kernels on the CPU
emulator; this file is what checks the hardware itself.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from . import reference as ref

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe import WaveletConfig  # noqa: E402

# WAVEPE_TEST_CUDA_ON_CPU=1 runs this file on the CPU kernels instead: a dry run
# that checks the tests themselves (shapes, oracles, tolerances) on a machine
# without a GPU.  Registration checks are skipped then.
ON_CPU = os.environ.get("WAVEPE_TEST_CUDA_ON_CPU") == "1"
DEV = "cpu" if ON_CPU else "cuda"
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not ON_CPU and not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
UNIT = {torch.float32: 2.0**-24, torch.float64: 2.0**-53, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def tol(dtype, terms):
    """Output rounding + operands rounded to the input type + fp32/fp64 accumulation over `terms`."""
    acc = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    inner = 0.0 if dtype in (torch.float32, torch.float64) else 4 * UNIT[dtype] * np.sqrt(terms)
    return 4 * UNIT[dtype] + 8 * acc * np.sqrt(max(terms, 1)) + inner


def close(got, want, dtype, terms, what):
    got = got.detach().double().cpu().numpy()
    scale = 1.0 + np.abs(want).max(initial=0.0)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= tol(dtype, terms) * scale, f"{what}: max error {err:.3e} (tolerance {tol(dtype, terms) * scale:.3e})"


def raw_op_dtype(dtype):
    """The raw ops take bf16/fp16 natively on CUDA and on the CPU: nothing to skip in a dry run."""


def rounded(t):
    return t.detach().double().cpu().numpy()


@pytest.mark.parametrize("op", ["rel_bias", "rel_bias_backward", "alibi_bias", "rope", "attention_fwd",
                                "attention_bwd"])
def test_cuda_kernels_are_registered(op):
    # a build without the CUDA kernels would silently use the eager fallback
    if ON_CPU:
        pytest.skip("dry run on the CPU")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"wavepe::{op}", "CUDA")


# ---- relative-table bias --------------------------------------------------------------

RELBIAS_CASES = [
    # batch, M, N, d, rows, r_lo, q_offset, causal, clamp
    ((2, 3), 70, 70, 13, 40, -20, 0, False, False),
    ((4,), 25, 140, 64, 12, 0, 115, True, False),
    ((), 129, 30, 33, 5, 3, -6, True, True),
    ((2,), 1, 300, 128, 64, -30, 299, True, False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", RELBIAS_CASES)
def test_rel_bias_forward_backward(dtype, case):
    batch, m, n, d, rows, r_lo, off, causal, clamp = case
    g = torch.Generator().manual_seed(0)
    q = torch.randn(*batch, m, d, generator=g).to(DEV, dtype).requires_grad_()
    table = torch.randn(rows, d, generator=g).to(DEV, dtype).requires_grad_()
    out = wo.rel_bias(q, table, r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
    assert out.dtype == dtype and out.device.type == DEV
    qn, tn = rounded(q), rounded(table)
    close(out, ref.rel_bias(qn, tn, r_lo, n, off, causal, clamp), dtype, d, "bias")
    grad = torch.randn(out.shape, generator=g).to(DEV, dtype)
    dq, dt = torch.autograd.grad(out, (q, table), grad)
    want_dq, want_dt = ref.rel_bias_grads(rounded(grad), qn, tn, r_lo, off, causal, clamp)
    close(dq, want_dq, dtype, n, "dq")
    close(dt, want_dt, dtype, int(np.prod(batch)) * m * n, "dtable")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rel_bias_cpu_and_cuda_agree(dtype):
    q = torch.randn(3, 50, 24, dtype=dtype)
    table = torch.randn(30, 24, dtype=dtype)
    for causal, clamp in [(True, False), (False, True)]:
        cpu = wo.rel_bias(q, table, -5, k_len=60, q_offset=10, causal=causal, clamp=clamp)
        gpu = wo.rel_bias(q.to(DEV), table.to(DEV), -5, k_len=60, q_offset=10, causal=causal, clamp=clamp)
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-5)


def test_rel_bias_gradcheck_float64_on_cuda():
    q = torch.randn(2, 7, 5, dtype=torch.float64, device=DEV, requires_grad=True)
    table = torch.randn(6, 5, dtype=torch.float64, device=DEV, requires_grad=True)
    for causal, clamp in [(True, False), (False, True)]:
        def f(q, t):
            return wo.rel_bias(q, t, -2, k_len=9, q_offset=3, causal=causal, clamp=clamp)
        assert torch.autograd.gradcheck(f, (q, table))
        assert torch.autograd.gradgradcheck(f, (q, table))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rel_bias_opcheck_on_cuda(dtype):
    raw_op_dtype(dtype)
    q = torch.randn(2, 9, 8, device=DEV, dtype=dtype, requires_grad=True)
    table = torch.randn(5, 8, device=DEV, dtype=dtype, requires_grad=True)
    grad = torch.randn(2, 9, 11, device=DEV, dtype=dtype)
    for causal, clamp in [(True, False), (False, True)]:
        torch.library.opcheck(torch.ops.wavepe.rel_bias.default, (q, table, 11, -2, 3, causal, clamp))
        torch.library.opcheck(torch.ops.wavepe.rel_bias_backward.default,
                              (grad, q.detach(), table.detach(), [True, True], -2, 3, causal, clamp))


def test_rel_bias_backward_is_deterministic():
    q = torch.randn(4, 300, 64, device=DEV, requires_grad=True)
    table = torch.randn(200, 64, device=DEV, requires_grad=True)
    grad = torch.randn(4, 300, 300, device=DEV)
    runs = []
    for _ in range(2):
        out = wo.rel_bias(q, table, 0, causal=True)
        runs.append(torch.autograd.grad(out, (q, table), grad))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_rel_bias_strided_and_half_inputs_stay_native():
    cfg = WaveletConfig.grid(64)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 40, 4, 64, generator=g).to(DEV, torch.bfloat16)
    q = x.transpose(1, 2)  # (2, 4, 40, 64), not contiguous
    out = wo.wavelet_bias(q, cfg)
    assert out.dtype == torch.bfloat16
    table, r_lo = cfg.table(np.float32)
    table = rounded(torch.from_numpy(np.array(table)).to(torch.bfloat16))  # the kernel reads the bf16 table
    # tolerance from bf16 rounding (inputs, products on the way, the output), not a guess
    close(out, ref.rel_bias(rounded(q), table, r_lo, 40, 0, True, False), torch.bfloat16, 64, "bf16 bias")


def test_rel_bias_compile_on_cuda():
    cfg = WaveletConfig.grid(32)

    @torch.compile(fullgraph=True)
    def f(q):
        return wo.wavelet_bias(q, cfg) * 2

    q = torch.randn(2, 33, 32, device=DEV)
    torch.testing.assert_close(f(q), wo.wavelet_bias(q, cfg) * 2)


def test_rel_bias_rejects_mixed_devices():
    if ON_CPU:
        pytest.skip("needs two devices")
    with pytest.raises(ValueError, match="same device"):
        wo.rel_bias(torch.randn(2, 3, 4, device=DEV), torch.randn(5, 4), 0)


# ---- ALiBi ---------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_on_cuda(causal):
    slopes = torch.tensor([0.5, 0.125, 3.0])
    for m, n, off in [(33, 50, 17), (1, 4097, 4096), (5, 9, -3)]:
        got = wo.alibi_bias(slopes.to(DEV), m, n, q_offset=off, causal=causal)
        assert got.device.type == DEV
        torch.testing.assert_close(got.cpu(), wo.alibi_bias(slopes, m, n, q_offset=off, causal=causal),
                                   rtol=0, atol=0)


def test_alibi_bias_opcheck_and_gradcheck_on_cuda():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64, device=DEV, requires_grad=True)
    for causal in (True, False):
        torch.library.opcheck(torch.ops.wavepe.alibi_bias, (slopes, 5, 7, 2, causal))
        assert torch.autograd.gradcheck(lambda s: wo.alibi_bias(s, 5, 7, q_offset=2, causal=causal), (slopes,))


# ---- RoPE ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fraction", [1.0, 0.25])
def test_rope_on_cuda(dtype, layout, fraction):
    from wavepe import RopeConfig

    cfg = RopeConfig(theta=500000.0, rotary_fraction=fraction, layout=layout)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 37, 64, generator=g).to(DEV, dtype)
    k = torch.randn(2, 2, 37, 64, generator=g).to(DEV, dtype)
    inv = cfg.inv_freq(64)
    pairs = cfg.rotary_pairs(64)
    for positions in (5, torch.arange(100, 137, device=DEV), torch.randint(0, 10**6, (2, 37), device=DEV)):
        qr, kr = wo.rope(q, k, positions, cfg)
        assert qr.dtype == dtype and kr.dtype == dtype and qr.device.type == DEV
        pos = (np.arange(37) + positions) if isinstance(positions, int) else positions.cpu().numpy()
        pos = pos[:, None, :] if pos.ndim == 2 else pos  # (B, L) -> broadcast over heads
        for x, y in ((q, qr), (k, kr)):
            close(y, ref.rope(rounded(x), pos, inv, layout, pairs, cfg.attention_factor, False), dtype, 2, "rope")


def test_rope_cpu_and_cuda_agree_and_opcheck():
    from wavepe import RopeConfig

    cfg = RopeConfig()
    q = torch.randn(1, 3, 20, 32)
    k = torch.randn(1, 1, 20, 32)
    cpu = wo.rope(q, k, 7, cfg)
    gpu = wo.rope(q.to(DEV), k.to(DEV), 7, cfg)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-6)
    inv = torch.from_numpy(cfg.inv_freq(32)).to(DEV)
    for dtype in (torch.float32,) + (() if ON_CPU else (torch.bfloat16,)):
        args = (q.to(DEV, dtype), k.to(DEV, dtype), None, inv, 3, 16, "half", 1.0, False)
        torch.library.opcheck(torch.ops.wavepe.rope.default, args)


def test_rope_gradcheck_float64_on_cuda():
    from wavepe import RopeConfig

    cfg = RopeConfig(rotary_fraction=0.5, layout="interleaved")
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64, device=DEV, requires_grad=True)
    k = torch.randn(1, 1, 5, 8, dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: wo.rope(a, b, 3, cfg), (q, k))


# ---- fused attention ----------------------------------------------------------------------

ATTN_CASES = [
    # B, H, Hk, M, N, d, pos_enc, causal, q_offset (None = N - M), padding
    (2, 4, 2, 70, 70, 64, "wavelet", True, None, False),
    (1, 4, 4, 33, 90, 128, "relative", True, None, True),
    (2, 2, 1, 48, 48, 40, "alibi", False, 0, True),
    (1, 4, 1, 1, 700, 128, "wavelet", True, None, False),   # decoding: split-KV
    (1, 2, 2, 40, 40, 200, "nope", True, None, False),        # head_dim bucket 256
    # bf16/fp16 at d = 64 / 128 (256: below) run attn_fwd_tc_kernel: interior blocks, the wavelet's band, the diagonal (and
    # the tensor-core backward's table instances: the band's blocks, those beyond it, the masked ones)
    (1, 4, 2, 256, 1024, 128, "wavelet", True, None, False),
    (1, 2, 1, 200, 600, 64, "nope", True, None, False),
    # ... and the tensor-core backward without a table: masked and interior blocks, GQA heads in turn, ALiBi (its
    # forward the wide instance, attn_fwd_tc_wide_kernel: 32 rows a warp, a last CTA of 32 rows -- on a 100 KiB SM the
    # 16-row one, Q in V's tile (wide_holds_sm); on an H100-class SM
    # its dK/dV the wide one, attn_bwd_dkdv_tc_wide_kernel: 32 keys a warp, ALiBi's instance -- the case above, d = 64,
    # the plain one; its dQ, the slopes fixed, attn_bwd_dq_tc_wide_alibi_kernel)
    (1, 4, 2, 160, 400, 128, "alibi", True, None, False),
    # ... and the tensor-core forward at d = 256 (Gemma's): Q fragments from shared memory, 32 keys a block
    (1, 4, 2, 150, 300, 256, "wavelet", True, None, False),
    # ... and a learned table's dT on the tensor cores (d = 128: two column slices; masked and interior tiles)
    (1, 2, 1, 300, 300, 128, "relative", True, None, False),
    # ... and the band split onto the wide instances (bf16/fp16, d = 128; the backward's on an H100-class SM): the
    # blocks beyond the wavelet's band (~1,750 keys) on attn_fwd_tc_wide_kernel / attn_bwd_dq_tc_wide_kernel /
    # attn_bwd_dkdv_tc_wide_kernel (the forward's on a 100 KiB SM: the 16-row instance without the window), the others
    # on the 16-row (16-key) table instances; a partial last group of 128 rows
    (1, 2, 1, 200, 6000, 128, "wavelet", True, None, False),
    # ... and head dims without a tensor-core instance (Phi-3-mini's 96 with the wavelet, Phi-2's 80 with ALiBi and
    # padding, a learned table at 192): bf16/fp16 on copies zero-padded to 128 / 256 (docs/CUDA.md, "Padded head dims")
    (1, 4, 2, 130, 300, 96, "wavelet", True, None, False),
    (1, 2, 1, 100, 200, 80, "alibi", False, 0, True),
    (1, 2, 2, 80, 160, 192, "relative", True, None, False),
]


def attention_case(case, dtype, grad=True, window=0, softcap=0.0):
    """q, k, v, the wrapper's keywords (window / softcap: none at 0), the table, r_lo and ALiBi's slopes of a case."""
    Bn, H, Hk, M, N, d, pe, causal, off, padding = case
    g = torch.Generator().manual_seed(M * N + d)
    q = torch.randn(Bn, H, M, d, generator=g).to(DEV, dtype).requires_grad_(grad)
    k = torch.randn(Bn, Hk, N, d, generator=g).to(DEV, dtype).requires_grad_(grad)
    v = torch.randn(Bn, Hk, N, d, generator=g).to(DEV, dtype).requires_grad_(grad)
    kw = dict(pos_enc=pe, causal=causal, q_offset=off)
    if window:
        kw["window"] = window
    if softcap:
        kw["softcap"] = softcap
    table = r_lo = slopes = None
    if pe == "wavelet":
        cfg = WaveletConfig.grid(d, n_scales=8 if d % 8 == 0 else 1)
        kw["config"] = cfg
        table, r_lo = wo.wavelet_table(cfg, dtype, DEV)
    elif pe == "relative":
        r_lo = -5
        table = (torch.randn(60, d, generator=g) * 0.5).to(DEV, dtype).requires_grad_(grad)
        kw["rel_table"] = (table, r_lo)
    elif pe == "alibi":
        slopes = torch.tensor(ref.alibi_slopes(H), dtype=torch.float32, device=DEV)
        kw["alibi_slopes"] = slopes
    if padding:
        kpm = torch.rand(Bn, N, generator=g) < 0.2
        kw["key_padding_mask"] = kpm.to(DEV)
    return q, k, v, kw, table, r_lo, slopes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ATTN_CASES, ids=lambda c: f"{c[6]}-M{c[3]}-N{c[4]}-d{c[5]}")
def test_attention_on_cuda_against_oracle(dtype, case):
    if dtype == torch.float64 and case[5] > 128:
        if ON_CPU:
            pytest.skip("dry run: the limit is the CUDA kernels'")
        # the routed path reaches the CUDA op, whose launch checks this device's limits
        with pytest.raises(ValueError, match=f"head_dim must be <= 128 for float64 on CUDA, got {case[5]}"):
            q, k, v, kw, *_ = attention_case(case, dtype)
            wo.wavelet_attention(q, k, v, **kw)
        return
    attention_against_oracle(case, dtype)


def attention_against_oracle(case, dtype, window=0, softcap=0.0):
    """The fused attention's output and gradients (and a learned table's) against the float64 oracle."""
    q, k, v, kw, table, r_lo, slopes = attention_case(case, dtype, window=window, softcap=softcap)
    out = wo.wavelet_attention(q, k, v, **kw)
    assert out.dtype == dtype and out.device.type == DEV
    Bn, H, Hk, M, N, d, pe, causal, off, padding = case
    off = N - M if off is None else off
    go = torch.randn_like(out)
    inputs = [q, k, v] + ([table] if pe == "relative" else [])
    grads = torch.autograd.grad(out, inputs, go)
    kpm = kw.get("key_padding_mask")
    want = ref.attention_with_grads(rounded(q), rounded(k), rounded(v), rounded(go), 1 / math.sqrt(d), off, causal,
                                    "relative" if pe == "wavelet" else pe,
                                    table=None if table is None else rounded(table), r_lo=r_lo or 0,
                                    slopes=None if slopes is None else slopes.cpu().numpy(),
                                    key_padding_mask=None if kpm is None else kpm.cpu().numpy(),
                                    window=window, softcap=softcap)
    close(out, want["out"], dtype, N, "out")
    for name, got, terms in (("dq", grads[0], N * d), ("dk", grads[1], M * d * H // Hk), ("dv", grads[2], M * H // Hk)):
        close(got, want[name], dtype, terms, name)
    if pe == "relative":
        close(grads[3], want["dtable"], dtype, Bn * H * M * N, "dtable")


# The sliding window and the soft-cap (Mistral's, Gemma 2's), on the emulator until now (docs/CUDA.md, "Unverified on
# hardware"): the window's edge blocks in the masked loops, a soft-capped call's instances of each kernel (forward, dQ,
# dK/dV -- the wide ones at 64 and 128 on an H100-class SM), tanhf and its derivative on hardware.  A cap of 2 bends
# most scores of unit-variance inputs (tanh(s / 2) near its linear part would leave the cap's derivative untested).
WINDOW_CAP_CASES = [
    # case (as ATTN_CASES), window, softcap
    ((1, 4, 2, 300, 300, 128, "wavelet", True, None, False), 100, 0.0),    # the table's band and the window's edge
    ((1, 4, 2, 300, 300, 128, "nope", True, None, False), 0, 2.0),         # the wide instances, soft-capped
    ((1, 2, 1, 200, 500, 64, "alibi", False, 0, True), 64, 2.0),           # both sides of each query, padding
    ((1, 2, 2, 150, 300, 256, "wavelet", True, None, False), 128, 2.0),    # head_dim 256
    ((1, 2, 1, 256, 256, 64, "relative", True, None, False), 96, 2.0),     # a learned table's dT, soft-capped
    ((1, 4, 1, 1, 3000, 128, "wavelet", True, None, False), 1024, 0.0),    # decoding: split-KV over the window's keys
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", WINDOW_CAP_CASES, ids=lambda c: f"{c[0][6]}-M{c[0][3]}-d{c[0][5]}-w{c[1]}-cap{c[2]:g}")
def test_windowed_and_soft_capped_attention_on_cuda_against_oracle(dtype, case):
    (case, window, softcap) = case
    if dtype == torch.float64 and case[5] > 128:
        pytest.skip("float64 takes head_dim <= 128 on CUDA (test_attention_on_cuda_against_oracle checks the error)")
    attention_against_oracle(case, dtype, window=window, softcap=softcap)


@pytest.mark.parametrize("pe", ["wavelet", "relative", "alibi", "nope"])
def test_attention_cpu_and_cuda_agree(pe):
    case = (1, 4, 2, 50, 60, 32, pe, True, None, True)
    q, k, v, kw, *_ = attention_case(case, torch.float32, grad=False)
    gpu = wo.wavelet_attention(q, k, v, **kw)
    kw_cpu = {key: (val.cpu() if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}
    if "rel_table" in kw:
        kw_cpu["rel_table"] = (kw["rel_table"][0].cpu(), kw["rel_table"][1])
    cpu = wo.wavelet_attention(q.cpu(), k.cpu(), v.cpu(), **kw_cpu)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=2e-5, atol=2e-5)


def test_attention_gradcheck_float64_on_cuda():
    for pe in ("relative", "alibi", "nope"):
        q, k, v, kw, table, *_ = attention_case((1, 2, 1, 6, 9, 8, pe, True, None, False), torch.float64)

        def f(q, k, v, *t):
            kw2 = dict(kw)
            if t:
                kw2["rel_table"] = (t[0], kw["rel_table"][1])
            return wo.wavelet_attention(q, k, v, **kw2)

        args = (q, k, v) + ((table,) if pe == "relative" else ())
        assert torch.autograd.gradcheck(f, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_opcheck_on_cuda(dtype):
    raw_op_dtype(dtype)
    q = torch.randn(1, 2, 9, 16, device=DEV, dtype=dtype)
    k = torch.randn(1, 1, 12, 16, device=DEV, dtype=dtype)
    v = torch.randn(1, 1, 12, 16, device=DEV, dtype=dtype)
    table = torch.randn(7, 16, device=DEV, dtype=dtype)
    kpm = torch.zeros(1, 12, dtype=torch.bool, device=DEV)
    kpm[0, 3] = True
    args = (q, k, v, table, None, kpm, None, 0.25, 3, True, -2, False, False)
    torch.library.opcheck(torch.ops.wavepe.attention_fwd.default, args)
    out, lse = torch.ops.wavepe.attention_fwd(*args)
    assert lse.dtype == torch.float32  # the accumulator type, as the fake kernel says (tests/test_routing.py)
    go = torch.randn_like(out)
    torch.library.opcheck(torch.ops.wavepe.attention_bwd.default,
                          (go, None, q, k, v, out, lse, table, None, kpm, None, True, False, 0.25, 3, True, -2, False,
                           False))


def test_attention_backward_is_deterministic():
    q, k, v, kw, table, *_ = attention_case((2, 8, 2, 300, 300, 64, "relative", True, None, False), torch.bfloat16)
    go = torch.randn(q.shape, device=DEV, dtype=q.dtype)
    runs = []
    for _ in range(2):
        out = wo.wavelet_attention(q, k, v, **kw)
        runs.append(torch.autograd.grad(out, (q, k, v, table), go))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_rope_rejects_non_finite_inv_freq():
    q = torch.randn(1, 2, 4, 8, device=DEV)
    inv = torch.tensor([1.0, 0.5, float("nan"), 0.1], dtype=torch.float64, device=DEV)
    with pytest.raises(ValueError, match=r"inv_freq must be finite"):
        wo.rope_inv_freq(q, None, 0, inv)
    wo.rope_inv_freq(q, None, 0, inv, rotary_pairs=2)  # the NaN pair is not rotated
    inv[2] = 0.25  # in place: checked again
    wo.rope_inv_freq(q, None, 0, inv)
    inv[3] = float("inf")
    with pytest.raises(ValueError, match=r"inv_freq must be finite"):
        wo.rope_inv_freq(q, None, 0, inv)
    # a float32 buffer (a model's), converted per call: checked as given, again after an in-place change
    inv32 = torch.tensor([1.0, 0.5, 0.25, 0.1], device=DEV)
    wo.rope_inv_freq(q, None, 0, inv32)
    inv32[0] = float("nan")
    with pytest.raises(ValueError, match=r"inv_freq\[0\] = nan"):
        wo.rope_inv_freq(q, None, 0, inv32)
    # new tensors, which the caching allocator tends to place at a freed one's address
    for bad in range(3):
        fresh = torch.tensor([1.0, 0.5, 0.25, 0.1], dtype=torch.float64, device=DEV)
        wo.rope_inv_freq(q, None, 0, fresh)
        del fresh
        fresh = torch.tensor([1.0, 0.5, 0.25, 0.1], dtype=torch.float64, device=DEV)
        fresh[bad] = float("-inf")
        with pytest.raises(ValueError, match=rf"inv_freq\[{bad}\] = -inf"):
            wo.rope_inv_freq(q, None, 0, fresh)
        del fresh


# ---- subnormals and masked garbage on the device (the emulator cannot show -ftz) ---------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("pe", ["wavelet", "alibi", "nope"])
def test_subnormal_inputs_read_as_zero_on_cuda(dtype, pe):
    """Built with -ftz=true (python/wavepe/_build/recipe.py): a query of subnormals scores
    exactly like a zero query, as on the CPU under FTZ/DAZ (fp16 keeps its subnormals, which
    are ordinary values of its range, and fp64 is not flushed on GPUs)."""
    tiny = torch.finfo(dtype).tiny
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=g).to(DEV, dtype) for _ in range(3))
    kw = {"alibi_slopes": torch.tensor(ref.alibi_slopes(2), dtype=torch.float32, device=DEV)} if pe == "alibi" else {}
    got = wo.wavelet_attention(q * (tiny / 8), k, v, pos_enc=pe, **kw)
    want = wo.wavelet_attention(torch.zeros_like(q), k, v, pos_enc=pe, **kw)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_masked_keys_never_reach_outputs_or_gradients_on_cuda(dtype, bad):
    """Padded keys and unused cache slots after every query hold garbage: outputs and
    gradients equal those of the same call with the keys zeroed, bit for bit."""
    b, h, hk, m, n, d = 2, 4, 2, 37, 300, 64
    g = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(b, hh, ll, d, generator=g).to(DEV, dtype)
                     for hh, ll in ((h, m), (hk, n), (hk, n), (h, m)))
    kpm = torch.zeros(b, n, dtype=torch.bool)
    kpm[:, [3, 90, 151]] = True
    garbage = kpm.clone()
    garbage[:, 187:] = True  # queries at 150..186
    garbage = garbage.to(DEV)[:, None, :, None]
    cfg = WaveletConfig.grid(d)

    def run(kk, vv):
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, kk, vv))
        out = wo.wavelet_attention(qq, kk, vv, config=cfg, q_offset=150, key_padding_mask=kpm.to(DEV))
        (out.float() * dout.float()).sum().backward()
        return out.detach(), qq.grad, kk.grad, vv.grad

    clean = run(k.masked_fill(garbage, 0.0), v.masked_fill(garbage, 0.0))
    dirty = run(k.masked_fill(garbage, bad), v.masked_fill(garbage, bad))
    for name, c, x in zip(["out", "dq", "dk", "dv"], clean, dirty):
        assert torch.isfinite(x).all(), f"{name} is not finite"
        torch.testing.assert_close(x, c, rtol=0, atol=0, msg=f"{name} depends on masked keys")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_packed_attention_equals_each_document_alone(dtype, causal):
    """cu_seqlens on the GPU: each document of a packed row is the document alone (both run by the kernel),
    gradients included; int64 boundaries converted on the device."""
    g = torch.Generator().manual_seed(5)
    lengths = [70, 0, 1, 300, 45]
    t = sum(lengths)
    q, k, v = (torch.randn(1, h, t, 64, generator=g, dtype=torch.float64).to(DEV, dtype) for h in (4, 2, 2))
    cu = torch.tensor([0, *np.cumsum(lengths).tolist()], device=DEV)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = wo.wavelet_attention(*leaves, causal=causal, cu_seqlens=cu)
    go = torch.randn(out.shape, generator=g, dtype=torch.float64).to(DEV, dtype)
    grads = torch.autograd.grad(out, leaves, go)
    err = 4 * tol(dtype, t)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if e == s:
            continue
        part = [x[:, :, s:e].detach().clone().requires_grad_() for x in (q, k, v)]
        alone = wo.wavelet_attention(*part, causal=causal)
        want = torch.autograd.grad(alone, part, go[:, :, s:e])
        torch.testing.assert_close(out[:, :, s:e], alone, rtol=err, atol=err)
        for got, w in zip(grads, want):
            torch.testing.assert_close(got[:, :, s:e], w, rtol=8 * err, atol=8 * err)
