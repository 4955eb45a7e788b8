"""The CUDA kernels on a GPU (every test is marked ``cuda`` and skipped without one).

Same oracles as the CPU tests (tests/reference.py, float64), CPU-vs-CUDA
agreement, ``torch.library.opcheck`` on CUDA tensors, ``gradcheck`` in float64
on CUDA, bitwise determinism of the backward passes, and bf16/fp16 inputs
computed natively.  tests/test_cuda_emu.py runs the same kernels on the CPU
emulator; this file is what checks the hardware itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from . import reference as ref

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe import WaveletConfig  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

DEV = "cuda"
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


def rounded(t):
    return t.detach().double().cpu().numpy()


@pytest.mark.parametrize("op", ["rel_bias", "rel_bias_backward", "alibi_bias"])
def test_cuda_kernels_are_registered(op):
    # a build without the CUDA kernels would silently use the eager fallback
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
    assert out.dtype == dtype and out.device.type == "cuda"
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
    q = torch.randn(2, 9, 8, device=DEV, dtype=dtype, requires_grad=True)
    table = torch.randn(5, 8, device=DEV, dtype=dtype, requires_grad=True)
    grad = torch.randn(2, 9, 11, device=DEV, dtype=dtype)
    for causal, clamp in [(True, False), (False, True)]:
        torch.library.opcheck(torch.ops.wavepe.rel_bias.default, (q, table, -2, 3, 11, causal, clamp))
        torch.library.opcheck(torch.ops.wavepe.rel_bias_backward.default,
                              (grad, q.detach(), table.detach(), -2, 3, causal, clamp, [True, True]))


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
    x = torch.randn(2, 40, 4, 64, device=DEV, dtype=torch.bfloat16)
    q = x.transpose(1, 2)  # (2, 4, 40, 64), not contiguous
    out = wo.wavelet_bias(q, cfg)
    assert out.dtype == torch.bfloat16
    ref_out = wo.wavelet_bias(q.float().contiguous(), cfg)
    torch.testing.assert_close(out.float(), ref_out, rtol=2e-2, atol=2e-2)


def test_rel_bias_compile_on_cuda():
    cfg = WaveletConfig.grid(32)

    @torch.compile(fullgraph=True)
    def f(q):
        return wo.wavelet_bias(q, cfg) * 2

    q = torch.randn(2, 33, 32, device=DEV)
    torch.testing.assert_close(f(q), wo.wavelet_bias(q, cfg) * 2)


def test_rel_bias_rejects_mixed_devices():
    with pytest.raises(ValueError, match="same device"):
        wo.rel_bias(torch.randn(2, 3, 4, device=DEV), torch.randn(5, 4), 0)


# ---- ALiBi ---------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_on_cuda(causal):
    slopes = torch.tensor([0.5, 0.125, 3.0])
    for m, n, off in [(33, 50, 17), (1, 4097, 4096), (5, 9, -3)]:
        got = wo.alibi_bias(slopes.to(DEV), m, n, q_offset=off, causal=causal)
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), wo.alibi_bias(slopes, m, n, q_offset=off, causal=causal),
                                   rtol=0, atol=0)


def test_alibi_bias_opcheck_and_gradcheck_on_cuda():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64, device=DEV, requires_grad=True)
    for causal in (True, False):
        torch.library.opcheck(torch.ops.wavepe.alibi_bias, (slopes, 5, 7, 2, causal))
        assert torch.autograd.gradcheck(lambda s: wo.alibi_bias(s, 5, 7, q_offset=2, causal=causal), (slopes,))
