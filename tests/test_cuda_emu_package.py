"""The emulated CUDA kernels beside wavepe's package: its CPU ops give the same results, and the build recipe's
rule for a GPU the build holds no code for is the one the device check applies.

These need wavepe installed (``make build``); the emulator's other tests (``tests/test_cuda_emu.py``,
``tests/test_cuda_emu_nonfinite.py``) need only the emulator library, NumPy and the oracles -- CI runs those
beside the wheel's build, before wavepe is installed (``.ci/run``).
"""

from __future__ import annotations

import numpy as np
import pytest

from . import cuda_emu as E
from .test_cuda_emu import lib, relbias_call, rope_call  # noqa: F401  (lib: the module's fixture)


# ---- agreement with the CPU kernels ---------------------------------------------------------

def test_emulated_cuda_and_cpu_kernels_agree(lib):
    torch = pytest.importorskip("torch")
    import wavepe.ops as wo

    rng = np.random.default_rng(7)
    # rel-bias forward and backward, fp32
    q, T, g = rng.standard_normal((2, 40, 24)), rng.standard_normal((30, 24)), rng.standard_normal((2, 40, 55))
    got = relbias_call(lib, E.F32, q, T, -4, 55, 15, True, False, g=g)
    qt = torch.tensor(q, dtype=torch.float32, requires_grad=True)
    tt = torch.tensor(T, dtype=torch.float32, requires_grad=True)
    cpu = wo.rel_bias(qt, tt, -4, k_len=55, q_offset=15)
    cpu.backward(torch.tensor(g, dtype=torch.float32))
    np.testing.assert_allclose(got["bias"], cpu.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dq"], qt.grad.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got["dtable"], tt.grad.numpy(), rtol=1e-5, atol=1e-4)
    # RoPE, fp32, interleaved p-RoPE with a scale
    x = rng.standard_normal((2, 3, 9, 16))
    inv = 10000.0 ** (-2.0 * np.arange(8) / 16)
    pos = rng.integers(0, 10**5, size=(2, 9))
    emu = rope_call(lib, E.F32, [x], pos, inv, 1, 5, 1.25, False)[0]
    cpu_q, _ = wo.rope_inv_freq(torch.tensor(x, dtype=torch.float32), None, torch.tensor(pos), torch.tensor(inv),
                                layout="interleaved", rotary_pairs=5, scale=1.25)
    np.testing.assert_allclose(emu, cpu_q.numpy(), rtol=1e-6, atol=1e-6)


# ---- the device: does the build hold code the GPU runs (device.cu) -----------------------------------------------


@pytest.mark.parametrize("archs", ["80;90;100;120", "90"])
def test_a_gpu_without_code_in_the_build_is_told_why_before_any_launch(lib, monkeypatch, archs):
    """wavepe_cuda_device_check, which launch_cuda.cpp asks once per device: the driver's answer emulated by the
    recipe's rule (recipe.image_for), the sentence names the compute capability and what to do."""
    from wavepe._build import recipe

    built = recipe.describe_archs(archs.split(";"))
    for cc in (70, 75, *recipe.GPU_CCS):  # a V100, a T4, and every GPU from 8.0 on (sm_110 too, run or not here)
        gpu = recipe.GPU_CCS.get(cc, cc)
        runs = recipe.image_for(archs.split(";"), cc) is not None
        monkeypatch.setenv("WAVEPE_EMU_CC_MAJOR", str(cc // 10))
        monkeypatch.setenv("WAVEPE_EMU_CC_MINOR", str(cc % 10))
        monkeypatch.setenv("WAVEPE_EMU_NO_IMAGE", "0" if runs else "1")
        status, msg = E.why(lib.wavepe_cuda_device_check, built.encode())
        assert (status == 0) == runs, (gpu, msg)
        if runs:
            continue
        assert f"compute capability {cc // 10}.{cc % 10}" in msg and len(msg) < 255, (gpu, msg)  # not truncated
        if cc < 80:
            assert "need 8.0 or newer" in msg and "on the CPU" in msg, msg
        else:  # the build's archs and the one to build for
            assert f"it holds {built}; " in msg and f"WAVEPE_CUDA_ARCHS={cc}" in msg, msg
