"""Relative-table bias (rel_bias, wavelet_bias): NumPy gufunc and torch ops
against the float64 oracle, on every kernel variant, with gradients,
torch.compile, strided inputs and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wavepe.ufuncs as wu
from wavepe import WaveletConfig

from . import reference as ref
from .conftest import ISAS, forced_isa
from .cuda_emu import settings_in_order

torch = pytest.importorskip("torch")
from .dispatch_log import DispatchLog  # noqa: E402  (needs torch)
import wavepe.ops as wo  # noqa: E402
from wavepe.ops.relbias import plain_rel_bias  # noqa: E402

EPS = {np.float32: np.finfo(np.float32).eps, np.float64: np.finfo(np.float64).eps}
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}


def assert_bias_close(got, want, bound, dtype, terms):
    """Error model of a sum of ``terms`` products in ``dtype``:
    |got - want| <= (terms + 2) eps sum|q_j T_j| (bound), plus underflow slack."""
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    tol = (terms + 2) * EPS[dtype] * bound + 1e-300 + (1e-30 if dtype == np.float32 else 0.0)
    err = np.abs(got - want)
    bad = ~(err <= tol)
    assert not bad.any(), f"max err {err[bad].max()} where tol {tol[bad].min()} ({bad.sum()} entries)"


def oracle(q, table, r_lo, n, off, causal, clamp):
    """(want, bound): the float64 bias and the same sum over |q| |T|."""
    want = ref.rel_bias(q, table, r_lo, n, off, causal, clamp)
    bound = ref.rel_bias(np.abs(np.asarray(q, np.float64)), np.abs(np.asarray(table, np.float64)), r_lo, n, off,
                         causal, clamp)
    return want, bound


def both_front_ends(q, table, r_lo, n, off, causal, clamp):
    """The NumPy gufunc and the torch op on the same data; they run the same core."""
    a = wu.rel_bias(q, table, r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
    b = wo.rel_bias(torch.from_numpy(q), torch.from_numpy(table), r_lo, k_len=n, q_offset=off, causal=causal,
                    clamp=clamp).numpy()
    return a, b


# ---- values ---------------------------------------------------------------------------

CASES = [
    # batch,   M,  N,  d, rows, r_lo, q_offset
    ((2, 3), 17, 17, 13, 40, -20, 0),     # non-causal halves, odd d
    ((4,), 25, 40, 7, 12, 0, 15),         # keys beyond the queries (KV cache)
    ((), 9, 30, 33, 5, 3, -6),            # negative offset, r_lo > 0
    ((2,), 12, 8, 16, 64, -30, 40),       # offset larger than N
    ((1, 2), 1, 1, 1, 1, 0, 0),           # single entries
    ((3,), 20, 20, 24, 30, 100, 0),       # the table is beyond every distance
    ((2,), 31, 50, 40, 200, -100, 19),    # the table covers all distances
    ((13,), 1, 40, 24, 60, -30, 39),      # decoding: one query per matrix
    ((2, 5), 3, 20, 9, 25, -5, 17),       # a few queries per matrix
    ((2,), 5, 6, 0, 4, 0, 0),             # d = 0
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("clamp", [False, True])
def test_against_oracle_every_isa(isa, dtype, causal, clamp):
    rng = np.random.default_rng(7)
    for batch, m, n, d, rows, r_lo, off in CASES:
        q = rng.standard_normal((*batch, m, d)).astype(dtype)
        table = rng.standard_normal((rows, d)).astype(dtype)
        # zero bands like a wavelet table, so that support skipping is exercised
        table[rows // 3: rows // 3 + 4] = 0
        table[: rows // 2, : d // 2] = 0
        want, bound = oracle(q, table, r_lo, n, off, causal, clamp)
        a, b = both_front_ends(q, table, r_lo, n, off, causal, clamp)
        assert a.dtype == dtype and b.dtype == dtype
        assert_bias_close(a, want, bound, dtype, d)
        np.testing.assert_array_equal(a, b)  # same core, same ISA: bit for bit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(st.integers(0, 3), min_size=0, max_size=2),
    m=st.integers(0, 13),
    n=st.integers(0, 15),
    d=st.integers(1, 20),
    rows=st.integers(0, 30),
    r_lo=st.integers(-25, 25),
    off=st.integers(-20, 40),
    causal=st.booleans(),
    clamp=st.booleans(),
    f64=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_shapes(isa, batch, m, n, d, rows, r_lo, off, causal, clamp, f64, seed):
    dtype = np.float64 if f64 else np.float32
    rows = max(rows, 1) if clamp else rows
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, m, d)).astype(dtype)
    table = rng.standard_normal((rows, d)).astype(dtype)
    want, bound = oracle(q, table, r_lo, n, off, causal, clamp)
    a, b = both_front_ends(q, table, r_lo, n, off, causal, clamp)
    assert a.shape == (*batch, m, n)
    assert_bias_close(a, want, bound, dtype, d)
    np.testing.assert_array_equal(a, b)


_GRID_ORACLE: dict = {}


def _grid_oracle(dtype, causal):
    """Inputs and float64 oracle of the default-grid test (shared by both ISAs)."""
    key = (np.dtype(dtype).str, causal)
    if key not in _GRID_ORACLE:
        cfg = WaveletConfig.grid(128)
        m, n, off = 300, 310, 10
        q = np.random.default_rng(3).standard_normal((2, m, 128)).astype(dtype)
        r = np.arange(off - (n - 1), off + m)  # every distance the call needs
        t = (r[:, None] - cfg.shifts[None, :]) / cfg.scales[None, :]
        table64 = ref.wavelet_table("ricker", cfg.scales, cfg.shifts, r)
        envelope = (1 + t * t) * np.exp(-t * t / 2)  # scale of the table's own rounding error
        want, bound = oracle(q, table64, int(r[0]), n, off, causal, False)
        table_err = ref.rel_bias(np.abs(q), envelope, int(r[0]), n, off, causal, False)
        _GRID_ORACLE[key] = (cfg, q, n, off, want, bound, table_err)
    return _GRID_ORACLE[key]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_wavelet_grid(isa, dtype):
    """The paper's grid (d=128: scales 2^0..2^7 x shifts 0..15) at L ~ 300 against
    the oracle's own float64 wavelets: exercises skipping of zero rows and of
    the small-scale columns at large distances."""
    for causal in (True, False):
        cfg, q, n, off, want, bound, table_err = _grid_oracle(dtype, causal)
        got = wu.wavelet_bias(q, cfg, k_len=n, q_offset=off, causal=causal)
        got_t = wo.wavelet_bias(torch.from_numpy(q), cfg, k_len=n, q_offset=off, causal=causal).numpy()
        tol = 130 * EPS[dtype] * bound + 8 * EPS[dtype] * table_err + 1e-30
        assert np.all(np.abs(got - want) <= tol)
        np.testing.assert_array_equal(got, got_t)
        # beyond the support (|r| > ~14.4 * 128 + 15) nothing, and causal zeros above the diagonal
        if causal:
            assert not np.triu(got[0, :, off + 1:], 0).any()


def test_zero_rows_and_columns_cost_nothing_but_change_nothing(isa):
    """Skipping zero chunks / columns gives the same values as a dense table
    holding those zeros explicitly (the scalar path multiplies them)."""
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 70, 40)).astype(np.float32)
    table = np.zeros((90, 40), np.float32)
    table[10:20, 30:] = rng.standard_normal((10, 10))
    table[60:61, :] = rng.standard_normal((1, 40))
    want, bound = oracle(q, table, -45, 70, 0, False, False)
    got = wu.rel_bias(q, table, -45, causal=False)
    assert_bias_close(got, want, bound, np.float32, 40)
    assert np.all(got[:, :, :][want == 0] == 0)


def test_large_output(isa):
    """Outputs past 32 MiB take the streamed-fill path of the AVX2 forward."""
    cfg = WaveletConfig.grid(16)
    q = torch.randn(8, 1024, 16, generator=torch.Generator().manual_seed(8))
    table, r_lo = wo.wavelet_table(cfg, torch.float32, "cpu")
    for causal in (True, False):
        got = wo.wavelet_bias(q, cfg, k_len=1030, q_offset=6, causal=causal)
        want = plain_rel_bias(q.double(), table.double(), r_lo=r_lo, q_offset=6, k_len=1030, causal=causal, clamp=False)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-5)
        if causal:
            assert not torch.triu(got[:, :, 7:], 0).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_large_output(isa, dtype):
    """Half outputs past 32 MiB take the streamed-fill path too (rows of 2054 elements: most
    start off a vector boundary), with nonzero fills (clamped edge rows): bit for bit the
    float32 kernel's bias rounded."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(8, 2048, 16, generator=gen).to(dtype)
    table = torch.randn(9, 16, generator=gen).to(dtype)
    for causal in (True, False):
        got = wo.rel_bias(q, table, -4, k_len=2054, q_offset=6, causal=causal, clamp=True)
        assert got.element_size() * got.numel() >= 32 << 20
        want = wo.rel_bias(q.float(), table.float(), -4, k_len=2054, q_offset=6, causal=causal, clamp=True)
        assert torch.equal(got, want.to(dtype))


# ---- gradients and torch integration -------------------------------------------------

GRAD_CONFIGS = [(True, False), (False, False), (True, True), (False, True)]


@pytest.mark.parametrize("causal,clamp", GRAD_CONFIGS)
def test_gradcheck_q_and_table(isa, causal, clamp):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    table = torch.randn(7, 5, dtype=torch.float64, generator=gen, requires_grad=True)

    def f(q, table):
        return wo.rel_bias(q, table, -2, k_len=9, q_offset=2, causal=causal, clamp=clamp)

    assert torch.autograd.gradcheck(f, (q, table))
    assert torch.autograd.gradgradcheck(f, (q, table))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal,clamp", GRAD_CONFIGS)
def test_backward_against_oracle(isa, dtype, causal, clamp):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 29, 21)).astype(dtype)
    table = rng.standard_normal((23, 21)).astype(dtype)
    table[5:9] = 0
    grad = rng.standard_normal((2, 3, 29, 35)).astype(dtype)
    r_lo, off = -8, 4
    dq, dt = torch.ops.wavepe.rel_bias_backward(torch.from_numpy(grad), torch.from_numpy(q),
                                                torch.from_numpy(table), [True, True], r_lo, off, causal, clamp)
    want_q, want_t = ref.rel_bias_grads(grad, q, table, r_lo, off, causal, clamp)
    bound_q, bound_t = ref.rel_bias_grads(np.abs(grad), np.abs(q), np.abs(table), r_lo, off, causal, clamp)
    assert_bias_close(dq.numpy(), want_q, bound_q, dtype, 35)
    assert_bias_close(dt.numpy(), want_t, bound_t, dtype, 2 * 3 * 29 * 35)
    dq_only, none = torch.ops.wavepe.rel_bias_backward(torch.from_numpy(grad), torch.from_numpy(q),
                                                       torch.from_numpy(table), [True, False], r_lo, off, causal,
                                                       clamp)
    assert none.shape == (0,)
    torch.testing.assert_close(dq_only, dq, rtol=0, atol=0)


def test_results_do_not_depend_on_the_thread_count():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 100, 24, generator=gen, requires_grad=True)
    table = torch.randn(150, 24, generator=gen, requires_grad=True)
    grad = torch.randn(3, 100, 110, generator=gen)
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            q.grad = table.grad = None
            out = wo.rel_bias(q, table, -70, k_len=110, q_offset=10, causal=True, clamp=True)
            out.backward(grad)
            outs.append((out.detach().clone(), q.grad.clone(), table.grad.clone()))
    finally:
        torch.set_num_threads(before)
    for other in outs[1:]:
        for x, y in zip(outs[0], other):
            assert torch.equal(x, y)


def test_opcheck_both_ops():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    table = torch.randn(6, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    grad = torch.randn(2, 5, 8, dtype=torch.float64, generator=gen)
    for causal, clamp in GRAD_CONFIGS:
        torch.library.opcheck(torch.ops.wavepe.rel_bias.default, (q, table, 8, -2, 3, causal, clamp))
        torch.library.opcheck(torch.ops.wavepe.rel_bias_backward.default,
                              (grad, q, table, [True, True], -2, 3, causal, clamp))
    torch.library.opcheck(torch.ops.wavepe.rel_bias_backward.default,
                          (grad, q.detach(), table.detach(), [False, True], -2, 3, True, False))
    torch.library.opcheck(torch.ops.wavepe.rel_bias.default, (q.detach().float(), table.detach().float(), 0, 0, 0,
                                                              True, False))
    # half types are read natively on the CPU
    for dtype in (torch.bfloat16, torch.float16):
        qh, th = q.detach().to(dtype).requires_grad_(), table.detach().to(dtype).requires_grad_()
        torch.library.opcheck(torch.ops.wavepe.rel_bias.default, (qh, th, 8, -2, 3, True, True))
        torch.library.opcheck(torch.ops.wavepe.rel_bias_backward.default,
                              (grad.to(dtype), qh, th, [True, True], -2, 3, False, True))


def test_torch_compile_fullgraph():
    cfg = WaveletConfig.grid(16)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(q):
        return wo.wavelet_bias(q, cfg, k_len=12, q_offset=3) * 2

    q = torch.randn(2, 3, 9, 16, requires_grad=True)
    out = f(q)
    torch.testing.assert_close(out, wo.wavelet_bias(q, cfg, k_len=12, q_offset=3) * 2)
    out.sum().backward()
    q2 = q.detach().clone().requires_grad_()
    (wo.wavelet_bias(q2, cfg, k_len=12, q_offset=3) * 2).sum().backward()
    torch.testing.assert_close(q.grad, q2.grad)


def test_torch_compile_dynamic_shapes():
    cfg = WaveletConfig.grid(16)
    table = torch.randn(9, 16, requires_grad=True)

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def f(q, table):
        return wo.wavelet_bias(q, cfg) + wo.rel_bias(q, table, -4, clamp=True)

    for length in (9, 13):
        q = torch.randn(2, length, 16, requires_grad=True)
        out = f(q, table)
        torch.testing.assert_close(out, wo.wavelet_bias(q, cfg) + wo.rel_bias(q, table, -4, clamp=True))
        out.sum().backward()


@pytest.mark.parametrize("batch", [1, 3])
def test_strided_q(batch):
    """A (B, L, H, d).transpose(1, 2) view (two strided batch levels when B > 1),
    a row-sliced view, a flipped view (negative row stride) and a view whose
    head dimension is strided: the same values and gradients as contiguous q."""
    cfg = WaveletConfig.grid(32)
    gen = torch.Generator().manual_seed(4)
    views = [
        (lambda: torch.randn(batch, 40, 4, 32, generator=gen), lambda x: x.transpose(1, 2)),
        (lambda: torch.randn(batch, 40, 4, 32, generator=gen), lambda x: x.transpose(1, 2)[:, :, ::3]),
        (lambda: torch.randn(batch, 40, 4, 32, generator=gen), lambda x: x.permute(0, 2, 1, 3).flip(-2)),
        (lambda: torch.randn(batch, 4, 32, 40, generator=gen), lambda x: x.transpose(-1, -2)),
    ]
    for make, view in views:
        base = make().requires_grad_()
        v = view(base)
        assert not v.is_contiguous()
        got = wo.wavelet_bias(v, cfg, k_len=45, q_offset=5)
        want = wo.wavelet_bias(v.detach().contiguous(), cfg, k_len=45, q_offset=5)
        assert torch.equal(got, want)
        np.testing.assert_array_equal(wu.wavelet_bias(v.detach().numpy(), cfg, k_len=45, q_offset=5), want.numpy())
        table = torch.randn(30, 32, generator=gen, requires_grad=True)
        out = wo.rel_bias(v, table, -10, k_len=45, q_offset=5, clamp=True)
        g = torch.randn(out.shape, generator=gen)
        dv, dt = torch.autograd.grad(out, (v, table), g)
        qc = v.detach().contiguous().requires_grad_()
        tc = table.detach().clone().requires_grad_()
        dq2, dt2 = torch.autograd.grad(wo.rel_bias(qc, tc, -10, k_len=45, q_offset=5, clamp=True), (qc, tc), g)
        assert torch.equal(dv, dq2)
        torch.testing.assert_close(dt, dt2, rtol=1e-5, atol=1e-4)


def test_half_inputs_compute_in_fp32():
    # wavelet_bias of bf16 q: the table in bf16 (rounded once from float64, as on CUDA), the sums
    # in float32 and each entry rounded once: the float32 kernel's bits on the same inputs, rounded
    from wavepe.ops._tables import call_table

    cfg = WaveletConfig.grid(16)
    q = torch.randn(2, 10, 16).to(torch.bfloat16).requires_grad_()
    out = wo.wavelet_bias(q, cfg)
    assert out.dtype == torch.bfloat16
    table, r_lo, _ = call_table(cfg, 16, torch.bfloat16, q.device, 10, 10, 0, True)
    assert table.dtype == torch.bfloat16
    want = wo.rel_bias(q.detach().float(), table.float(), r_lo, k_len=10, q_offset=0).bfloat16()
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    out.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16
    # NumPy float16: read and written natively too (the gufunc's float16 loop), the same table and
    # bits as torch's (a wide grid at long distances: tiny table entries, no float16 subnormal)
    rng = np.random.default_rng(0)
    for d, kw in ((16, {}), (128, {"k_len": 300, "q_offset": 260})):
        qn = rng.standard_normal((3, 8, d)).astype(np.float16)
        got = wu.wavelet_bias(qn, WaveletConfig.grid(d), **kw)
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, wo.wavelet_bias(torch.from_numpy(qn), WaveletConfig.grid(d), **kw).numpy())


HALF_BITS = {torch.bfloat16: (8, -126), torch.float16: (11, -14)}  # significant bits, smallest normal exponent


def half_ulp(x: np.ndarray, dtype) -> np.ndarray:
    """The spacing of bf16 / fp16 values at magnitude |x| (fp16: subnormal spacing below 2^-14)."""
    bits, emin = HALF_BITS[dtype]
    _, e = np.frexp(np.abs(x))  # |x| = m 2^e, m in [0.5, 1)
    return np.ldexp(1.0, np.maximum(e - 1, emin) - (bits - 1))


def assert_half_close(got, want, bound, dtype, terms):
    """bf16 / fp16 kernels widen the (exact) half inputs, sum in float32 and round each output
    once, so |got - exact| <= ulp_half(|exact| + e32) / 2 + e32, with e32 the float32 sum's
    error, assert_bias_close's (terms + 2) eps32 sum|products| (plus 2^-120 for products
    flushed to zero)."""
    assert got.dtype == dtype
    got = got.detach().double().numpy()
    assert got.shape == want.shape
    e32 = (terms + 2) * EPS[np.float32] * bound + 2.0**-120
    tol = 0.5 * half_ulp(np.abs(want) + e32, dtype) + e32
    err = np.abs(got - want)
    bad = ~(err <= tol)
    assert not bad.any(), f"max err {err[bad].max()} where tol {tol[bad].min()} ({bad.sum()} entries)"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("clamp", [False, True])
def test_half_against_oracle_every_isa(isa, dtype, causal, clamp):
    # bf16 / fp16 read and written natively on the CPU: every ISA, the CASES (strided q through a
    # transposed view), against the float64 oracle on the half values; and the float32 kernel's
    # bits on the widened inputs, rounded once (no second rounding anywhere)
    rng = np.random.default_rng(17)
    for batch, m, n, d, rows, r_lo, off in CASES:
        q = torch.from_numpy(rng.standard_normal((*batch, d, m))).to(dtype).transpose(-1, -2)
        table = torch.from_numpy(rng.standard_normal((rows, d))).to(dtype)
        table[rows // 3: rows // 3 + 4] = 0
        table[: rows // 2, : d // 2] = 0
        want, bound = oracle(q.double().numpy(), table.double().numpy(), r_lo, n, off, causal, clamp)
        got = wo.rel_bias(q, table, r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
        assert_half_close(got, want, bound, dtype, d)
        via32 = wo.rel_bias(q.float(), table.float(), r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
        assert torch.equal(got, via32.to(dtype))
        if dtype == torch.float16:  # NumPy's float16 loop: the same kernels, strided q included
            qn, tn = q.numpy(), table.numpy()
            gn = wu.rel_bias(qn, tn, r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
            assert gn.dtype == np.float16
            np.testing.assert_array_equal(gn, got.numpy())


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(["bfloat16", "float16"]),
    batch=st.lists(st.integers(0, 3), min_size=0, max_size=2),
    m=st.integers(0, 40),
    n=st.integers(0, 60),
    d=st.one_of(st.integers(1, 40), st.sampled_from([64, 128])),
    rows=st.integers(1, 50),
    r_lo=st.integers(-40, 25),
    off=st.integers(-20, 60),
    causal=st.booleans(),
    clamp=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_half_random_shapes_equal_float32_rounded_once(dtype, batch, m, n, d, rows, r_lo, off, causal, clamp, seed):
    # bf16 / fp16 forward and backward on random shapes, every ISA of this CPU: the float32 kernels' bits on the
    # widened inputs, rounded once (tails of every width: d from 1, panels not full, distances off the table)
    dtype = getattr(torch, dtype)
    rng = np.random.default_rng(seed)
    q = torch.from_numpy(rng.standard_normal((*batch, m, d))).to(dtype)
    table = torch.from_numpy(rng.standard_normal((rows, d))).to(dtype)
    grad = torch.from_numpy(rng.standard_normal((*batch, m, n))).to(dtype)
    for isa in ISAS:
        with forced_isa(isa):
            got = wo.rel_bias(q, table, r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
            via32 = wo.rel_bias(q.float(), table.float(), r_lo, k_len=n, q_offset=off, causal=causal, clamp=clamp)
            assert got.dtype == dtype and torch.equal(got, via32.to(dtype)), isa
            dq, dt = torch.ops.wavepe.rel_bias_backward(grad, q, table, [True, True], r_lo, off, causal, clamp)
            dq32, dt32 = torch.ops.wavepe.rel_bias_backward(grad.float(), q.float(), table.float(), [True, True],
                                                            r_lo, off, causal, clamp)
            assert torch.equal(dq, dq32.to(dtype)) and torch.equal(dt, dt32.to(dtype)), isa


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal,clamp", GRAD_CONFIGS)
def test_half_backward_against_oracle(isa, dtype, causal, clamp):
    # dq and dT of half tensors: summed in float32 over every key / query row, rounded once at the end
    rng = np.random.default_rng(6)
    q = torch.from_numpy(rng.standard_normal((2, 3, 29, 21))).to(dtype)
    table = torch.from_numpy(rng.standard_normal((23, 21))).to(dtype)
    table[5:9] = 0
    grad = torch.from_numpy(rng.standard_normal((2, 3, 29, 35))).to(dtype)
    r_lo, off = -8, 4
    dq, dt = torch.ops.wavepe.rel_bias_backward(grad, q, table, [True, True], r_lo, off, causal, clamp)
    g64, q64, t64 = (x.double().numpy() for x in (grad, q, table))
    want_q, want_t = ref.rel_bias_grads(g64, q64, t64, r_lo, off, causal, clamp)
    bound_q, bound_t = ref.rel_bias_grads(np.abs(g64), np.abs(q64), np.abs(t64), r_lo, off, causal, clamp)
    assert_half_close(dq, want_q, bound_q, dtype, 35)
    assert_half_close(dt, want_t, bound_t, dtype, 2 * 3 * 29 * 35)
    dq32, dt32 = torch.ops.wavepe.rel_bias_backward(grad.float(), q.float(), table.float(), [True, True], r_lo, off,
                                                    causal, clamp)
    assert torch.equal(dq, dq32.to(dtype)) and torch.equal(dt, dt32.to(dtype))
    # through autograd: the gradients of the public wrapper are the op's, in the half type
    qa, ta = q.clone().requires_grad_(), table.clone().requires_grad_()
    ga, gt = torch.autograd.grad(wo.rel_bias(qa, ta, r_lo, k_len=35, q_offset=off, causal=causal, clamp=clamp),
                                 (qa, ta), grad)
    assert torch.equal(ga, dq) and torch.equal(gt, dt)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_nan_rows_as_float32(isa, dtype):
    # the non-finite contract of the half kernels is float32's: a NaN / inf query row (forward) or
    # gradient row (dq) reaches every in-table distance, and the results are the float32
    # kernel's on the widened inputs, rounded (NaN where it is NaN)
    cfg = WaveletConfig.grid(32)
    table, r_lo = cfg.table(np.float64)
    table = torch.tensor(table).to(dtype)  # a copy: cfg.table's array is read-only
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 40, 32, generator=gen).to(dtype)
    q[1, 7, 3] = float("nan")
    q[0, 11, 30] = float("inf")
    got = wo.rel_bias(q, table, r_lo, k_len=300, q_offset=260)
    want = wo.rel_bias(q.float(), table.float(), r_lo, k_len=300, q_offset=260).to(dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got[1, 7].isnan().any() and not got[1, 6].isnan().any()
    grad = torch.randn(2, 40, 300, generator=gen).to(dtype)
    grad[0, 5, 250] = float("nan")
    dq, dt = torch.ops.wavepe.rel_bias_backward(grad, q, table, [True, True], r_lo, 260, True, False)
    dq32, dt32 = torch.ops.wavepe.rel_bias_backward(grad.float(), q.float(), table.float(), [True, True], r_lo, 260,
                                                    True, False)
    torch.testing.assert_close(dq, dq32.to(dtype), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(dt, dt32.to(dtype), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_makes_no_float32_copy(dtype):
    # The public wrappers hand half tensors to the kernels as they are: the only ops dispatched
    # are wavepe's own (no _to_copy / copy_ to float32 before or after), forward and backward,
    # and every tensor they return is the half type.
    q = torch.randn(1, 4, 33, 64).to(dtype)
    table = torch.randn(40, 64).to(dtype)
    grad = torch.randn(1, 4, 33, 33).to(dtype)
    cfg = WaveletConfig.grid(64)
    wo.wavelet_bias(q, cfg)  # the wavelet table is built and cached outside the logged calls
    with DispatchLog() as log:
        out = wo.rel_bias(q, table, -5)
        wout = wo.wavelet_bias(q, cfg)
        dq, dt = torch.ops.wavepe.rel_bias_backward(grad, q, table, [True, True], -5, 0, True, False)
    # (wavelet_bias slices its cached table: a view, no copy)
    ops_run = [c[0] for c in log.calls if c[0] != "aten.slice.Tensor"]
    assert ops_run == ["wavepe.rel_bias.default"] * 2 + ["wavepe.rel_bias_backward.default"], log.calls
    assert all(d == dtype for c in log.calls for d in c[1]), log.calls
    assert out.dtype == wout.dtype == dq.dtype == dt.dtype == dtype


def test_defaults_and_eager_baseline_agree():
    cfg = WaveletConfig.grid(64)
    q = torch.randn(2, 33, 64, dtype=torch.float64)
    table, r_lo = wo.wavelet_table(cfg, torch.float64, "cpu")
    got = wo.wavelet_bias(q, cfg)  # N = M, q_offset = 0, causal
    torch.testing.assert_close(got, plain_rel_bias(q, table, r_lo=r_lo, q_offset=0, k_len=33, causal=True, clamp=False),
                               rtol=1e-12, atol=1e-12)
    got = wo.wavelet_bias(q, cfg, k_len=50)  # queries are the last 33 of 50 positions
    want = plain_rel_bias(q, table, r_lo=r_lo, q_offset=17, k_len=50, causal=True, clamp=False)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_device_without_kernel_falls_back_with_a_warning(monkeypatch):
    # a device with no kernel registered (here the CPU, made to look like one) gets the plain-PyTorch
    # rel-shift, with a warning; meta tensors do have a kernel (the fake one): tests/test_routing.py
    from wavepe.ops import _routing

    monkeypatch.setattr(_routing, "_found", set())  # kernels remembered so far
    monkeypatch.setattr(_routing, "_kernel_registered", lambda op, device_type: False)
    monkeypatch.setattr(_routing, "_warned", set())
    q, table = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="no compiled rel_bias kernel for device 'cpu'"):
        out = wo.rel_bias(q, table, -1)
    torch.testing.assert_close(out, plain_rel_bias(q, table, r_lo=-1, q_offset=0, k_len=5, causal=True, clamp=False),
                               rtol=0, atol=0)
    monkeypatch.undo()
    torch.testing.assert_close(wo.rel_bias(q, table, -1), out, rtol=1e-12, atol=1e-12)


# ---- NumPy gufunc ------------------------------------------------------------------------

def test_gufunc_object():
    g = wu.rel_bias_gufunc
    assert isinstance(g, np.ufunc)
    # (its operands, types and signature: generated from the settings list, tests/test_op_arguments.py)
    assert g.signature.startswith("(m,d),(r,d),") and g.signature.endswith("->(m,n)")
    assert {t[0] + t[-1] for t in g.types} == {"ee", "ff", "dd"}  # float16 read natively
    q = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="core dimension"):
        g(q, np.ones((2, 4), np.float32), *_gufunc_settings())  # n comes from out=


def _gufunc_settings(**given):
    """The gufunc's setting operands in the header's order (the C defaults where not given)."""
    return settings_in_order("relbias.h", "WAVEPE_RELBIAS_SETTINGS", **given)


def test_gufunc_broadcasts_tables_and_strided_out():
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 1, 7, 6))
    tables = rng.standard_normal((3, 5, 6))
    out = np.zeros((2, 3, 7, 9 * 2))[..., ::2]  # strided key dimension
    wu.rel_bias_gufunc(q, tables, *_gufunc_settings(r_lo=-2, q_offset=1, causal=False, clamp=True), out=out)
    for i in range(2):
        for j in range(3):
            want = ref.rel_bias(q[i, 0], tables[j], -2, 9, 1, False, True)
            np.testing.assert_allclose(out[i, j], want, rtol=1e-13, atol=1e-13)


def test_gufunc_rejects_bad_positions_loudly():
    q = np.ones((3, 4))
    out = np.zeros((3, 5))
    with pytest.raises(ValueError, match="rel_bias: clamp=True needs a table with at least one row, got 0 rows"):
        wu.rel_bias_gufunc(q, np.ones((0, 4)), *_gufunc_settings(causal=True, clamp=True), out=out)
    with pytest.raises(OverflowError, match=r"rel_bias: r_lo=2305843009213693952 is beyond"):
        wu.rel_bias_gufunc(q, np.ones((2, 4)), *_gufunc_settings(r_lo=2**61, causal=True), out=out)
    tables = np.ones((3, 2, 4))
    tables_out = np.zeros((3, 3, 5))
    with pytest.raises(ValueError, match="clamp=True needs a table"):  # per-iteration parameters: the last one
        wu.rel_bias_gufunc(q, tables[:, :0], *_gufunc_settings(causal=True, clamp=np.array([False, False, True])),
                           out=tables_out)


# ---- errors --------------------------------------------------------------------------------

CFG16 = WaveletConfig.grid(16)
Q = torch.zeros(2, 3, 16)
T = torch.zeros(5, 16)
QN = np.zeros((2, 3, 16), np.float32)
TN = np.zeros((5, 16), np.float32)
HUGE_T = torch.zeros(1, 1, 16).expand(2**20, 2**20, 16)  # a view: nothing allocated
HUGE_N = np.broadcast_to(np.zeros((1, 1, 16), np.float32), (2**20, 2**20, 16))


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: wo.rel_bias(torch.zeros(16), T, 0), ValueError, r"q must have at least 2 dimensions"),
        (lambda: wo.rel_bias(Q, torch.zeros(5, 16, 1), 0), ValueError, r"table must have 2 dimensions"),
        (lambda: wo.rel_bias(Q.int(), T, 0), TypeError, r"q must be a floating-point tensor"),
        (lambda: wo.rel_bias(Q, T.double(), 0), TypeError, r"q and table must have the same dtype"),
        (lambda: wo.rel_bias(Q, T.to("meta"), 0), ValueError, r"q and table must be on the same device"),
        (lambda: wo.rel_bias(Q, torch.zeros(5, 15), 0), ValueError, r"table.shape\[1\]=15 does not match q.shape\[-1\]=16"),
        (lambda: wo.rel_bias(Q, T[:0], 0, clamp=True), ValueError, r"at least one row with clamp=True"),
        (lambda: wo.rel_bias(Q, T, 0.5), TypeError, r"r_lo must be an integer"),
        (lambda: wo.rel_bias(Q, T, 0, k_len=-1), ValueError, r"k_len must be >= 0"),
        (lambda: wo.rel_bias(Q, T, 0, q_offset=2**62), OverflowError, r"rel_bias: q_offset"),
        (lambda: wo.rel_bias(HUGE_T, T, 0, k_len=2**40), OverflowError, r"rel_bias: a result of shape"),
        (lambda: wo.wavelet_bias(torch.zeros(2, 3, 8), CFG16), ValueError,
         r"q.shape\[-1\]=8 does not match config.head_dim=16"),
        (lambda: wo.wavelet_bias(Q, "ricker"), TypeError, r"config must be a WaveletConfig"),
        (lambda: wu.rel_bias(np.zeros(16, np.float32), TN, 0), ValueError, r"q must be \(\.\.\., M, d\)"),
        (lambda: wu.rel_bias(QN, np.zeros((5, 16, 1), np.float32), 0), ValueError, r"table must be \(R, d\)"),
        (lambda: wu.rel_bias(QN.astype(np.int32), TN, 0), TypeError, r"q must be a float16, float32 or float64 array"),
        (lambda: wu.rel_bias(QN, TN.astype(np.float64), 0), TypeError, r"same dtype"),
        (lambda: wu.rel_bias(QN, np.zeros((5, 15), np.float32), 0), ValueError,
         r"table.shape\[1\]=15 does not match q.shape\[-1\]=16"),
        (lambda: wu.rel_bias(QN, TN[:0], 0, clamp=True), ValueError, r"clamp=True"),
        (lambda: wu.rel_bias(HUGE_N, TN, 0, k_len=2**40), OverflowError, r"rel_bias: a 1048576 x"),
        (lambda: wu.rel_bias(QN, TN, -2**62), OverflowError, r"rel_bias: r_lo"),
        (lambda: wu.wavelet_bias(np.zeros((3, 8), np.float32), CFG16), ValueError,
         r"q.shape\[-1\]=8 does not match config.head_dim=16"),
        (lambda: wu.wavelet_bias(QN, CFG16, q_offset="x"), TypeError, r"q_offset must be an integer"),
        # the raw ops check what they are given too (every argument error of the compiled ops is a
        # ValueError: torch's stable ABI carries no TypeError; the typed wrappers above raise TypeError)
        (lambda: torch.ops.wavepe.rel_bias(Q.int(), T.int(), 3, 0, 0, True, False), ValueError, r"q must be float32"),
        (lambda: torch.ops.wavepe.rel_bias(Q, T.double(), 3, 0, 0, True, False), ValueError, r"share a dtype"),
        (lambda: torch.ops.wavepe.rel_bias(Q, torch.zeros(5, 4), 3, 0, 0, True, False), ValueError, r"head_dim"),
        (lambda: torch.ops.wavepe.rel_bias(Q, T, -3, 0, 0, True, False), ValueError, r"k_len must be >= 0"),
        (lambda: torch.ops.wavepe.rel_bias(Q, T, 3, 0, 2**62, True, False), ValueError,
             r"rel_bias: q_offset=4611686018427387904 is beyond the supported range of positions"),
        (lambda: torch.ops.wavepe.rel_bias_backward(torch.zeros(2, 4, 3), Q, T, [True, True], 0, 0, True, False),
         ValueError, r"grad must be"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_the_oracle_is_the_formula_element_by_element():
    # tests/reference.py's rel_bias and rel_bias_grads take a query row's keys at once (_rel_rows); here the formula
    # one (m, n) at a time through _rel_row, on random shapes: leading axes or none, no keys, clamped and causal
    rng = np.random.default_rng(5)
    for trial in range(60):
        lead = [(), (2,), (2, 3)][trial % 3]
        m_len, k_len, d, rows = (int(x) for x in rng.integers((1, 0, 1, 1), (7, 10, 4, 6)))
        r_lo, off = int(rng.integers(-5, 3)), int(rng.integers(-3, 7))
        causal, clamp = bool(trial & 4), bool(trial & 8)
        q, table = rng.standard_normal(lead + (m_len, d)), rng.standard_normal((rows, d))
        grad = rng.standard_normal(lead + (m_len, k_len))
        bias, dq, dt = np.zeros(lead + (m_len, k_len)), np.zeros(q.shape), np.zeros(table.shape)
        for m in range(m_len):
            for n in range(k_len):
                t = ref._rel_row(off + m - n, r_lo, rows, causal, clamp)
                if t is not None:
                    bias[..., m, n] = q[..., m, :] @ table[t]
                    dq[..., m, :] += grad[..., m, n][..., None] * table[t]
                    dt[t] += np.sum(grad[..., m, n][..., None] * q[..., m, :], axis=tuple(range(len(lead))))
        np.testing.assert_allclose(ref.rel_bias(q, table, r_lo, k_len, off, causal, clamp), bias, rtol=0, atol=1e-12)
        got_dq, got_dt = ref.rel_bias_grads(grad, q, table, r_lo, off, causal, clamp)
        np.testing.assert_allclose(got_dq, dq, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got_dt, dt, rtol=0, atol=1e-12)
