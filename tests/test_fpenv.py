"""The kernels flush subnormals for their own duration only (fpenv.h): the caller's
floating-point state is the same after every op, on the calling thread and on the
worker threads the op ran on.

No portable Python API reads MXCSR, so the state is observed through arithmetic:
with flush-to-zero / denormals-are-zero off, ``tiny/4 * 1`` is a subnormal; with
them on (``torch.set_flush_denormal(True)``), it is 0.  A large element-wise torch
multiply runs on every thread of torch's pool, so it sees the state of the workers
that wavepe's ops used too.  (The C test csrc/core/tests/test_fpenv.c checks the
MXCSR word itself, flags included.)
"""

from __future__ import annotations

import numpy as np
import pytest

from wavepe import RopeConfig, WaveletConfig

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
import wavepe.ufuncs as wu  # noqa: E402

TINY = np.finfo(np.float32).tiny
N_PARALLEL = 1 << 20  # large enough for torch to split an element-wise op over its threads


def _flushes() -> tuple[bool, bool]:
    """(does this thread flush, does any torch worker flush) subnormal results."""
    here = np.float32(TINY / 4) * np.float32(1.0)  # NumPy: computed on this thread
    sub = torch.full((N_PARALLEL,), TINY / 4, dtype=torch.float32)
    there = torch.mul(sub, 1.0)
    return bool(here == 0), bool((there == 0).any())


def _run_every_op() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 160, 32, generator=g) for _ in range(3))
    q.requires_grad_(True)
    for pos_enc in ("wavelet", "alibi", "nope"):
        out = wo.wavelet_attention(q, k, v, pos_enc=pos_enc)
        out.sum().backward()
    wo.wavelet_attention(q[:, :, -1:].detach(), k, v, q_offset=159)  # decoding path
    wo.wavelet_bias(q.detach(), WaveletConfig.grid(32))
    wo.rope(q.detach(), k, 0, RopeConfig())
    wu.ricker(np.linspace(-20, 20, 4096, dtype=np.float32))
    wu.rel_bias(q.detach()[0].numpy(), *WaveletConfig.grid(32).table(np.float32), k_len=160)


@pytest.mark.parametrize("threads", [1, 2])
def test_ops_leave_the_callers_fp_state_as_it_was(isa, threads):
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _flushes() == (False, False), "precondition: subnormals are kept before any wavepe op"
        _run_every_op()
        assert _flushes() == (False, False), "a wavepe op left flush-to-zero / DAZ on"
        # ... and a caller that wants flushing keeps it
        assert torch.set_flush_denormal(True)
        try:
            _run_every_op()
            here, there = _flushes()
            assert here and there, "a wavepe op turned the caller's flush-to-zero off"
        finally:
            torch.set_flush_denormal(False)
    finally:
        torch.set_num_threads(old_threads)
