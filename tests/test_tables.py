"""Any wavelet grid in bounded memory: tables cover the distances a call forms, not the whole support.

The paper's ablation grids for d = 128 (16 x 8, 32 x 4, 128 x 1, 1 x 128), normalize=True and scales
up to 1e6 run with memory proportional to the sequence length (the 32 x 4 grid's support alone is
~6.4e10 distances, the 128 x 1 grid's ~5e39); the cached window grows on demand; under torch.compile
the table is a graph node sized by the (symbolic) lengths -- no recompile per length.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import wavepe.ufuncs as wu
from wavepe import WaveletConfig

from . import reference as ref

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402
import wavepe.ops as wo  # noqa: E402
from wavepe.ops import _tables  # noqa: E402

GRIDS = {
    "16x8": dict(n_scales=16),
    "32x4": dict(n_scales=32),
    "128x1": dict(n_scales=128),
    "1x128": dict(n_scales=1),
    "8x16 normalized": dict(n_scales=8, normalize=True),
}


def oracle_bias(q: np.ndarray, cfg: WaveletConfig, n: int, off: int, causal: bool) -> np.ndarray:
    m = q.shape[-2]
    r = np.arange(off - (n - 1), off + m)
    table = ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r, cfg.normalize)
    return ref.rel_bias(q, table, int(r[0]), n, off, causal, False)


def cached_rows(cfg: WaveletConfig) -> int:
    return sum(w.table.shape[0] for w in cfg._cache.values() if hasattr(w, "table"))


@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_the_papers_grids_run_in_memory_proportional_to_the_length(grid):
    cfg = WaveletConfig.grid(128, **GRIDS[grid])
    g = np.random.default_rng(0)
    m, n, off = 96, 300, 204
    q = g.standard_normal((2, m, 128))
    for causal in (True, False):
        want = oracle_bias(q, cfg, n, off, causal)
        got = wu.wavelet_bias(q, cfg, k_len=n, q_offset=off, causal=causal)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        got_t = wo.wavelet_bias(torch.from_numpy(q), cfg, k_len=n, q_offset=off, causal=causal)
        np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-10, atol=1e-10)
    # every table ever built for these calls: within a few times the distances they form (M + N)
    assert cached_rows(cfg) <= 4 * (m + n), cached_rows(cfg)


@pytest.mark.parametrize("grid", ["32x4", "128x1"])
def test_fused_attention_with_huge_supports(grid):
    cfg = WaveletConfig.grid(128, **GRIDS[grid])
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 50, 128, generator=g, dtype=torch.float64) for _ in range(3))
    out = wo.wavelet_attention(q, k, v, cfg)
    r = np.arange(-49, 50)
    table = ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r, cfg.normalize)
    want = ref.attention_with_grads(q.numpy(), k.numpy(), v.numpy(), np.zeros(q.shape), 128**-0.5, 0, True, "relative",
                                    table=table, r_lo=-49)["out"]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-10)
    assert cached_rows(cfg) <= 4 * 100


def test_large_scales_work_and_memory_follows_the_length():
    # scales up to 1e6 (support ~1.5e7 distances, 1.9e9 table elements): the tables follow the calls
    cfg = WaveletConfig(scales=np.geomspace(1.0, 1e6, 64), shifts=np.zeros(64))
    peaks = {}
    for length in (256, 1024):
        q = np.random.default_rng(2).standard_normal((length, 64)).astype(np.float32)
        cfg._cache.clear()
        tracemalloc.start()
        wu.wavelet_bias(q, cfg)
        peaks[length] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out_bytes = {length: length * length * 4 for length in peaks}
    for length, peak in peaks.items():  # the output, its table (a few L x 64 rows) and small change
        assert peak < 3 * out_bytes[length] + 64 * 4 * 8 * length + (4 << 20), (length, peak)


def test_far_away_queries_build_only_the_rows_they_use():
    # queries at 2^40 over 8 keys: 8 + M distances near 2^40, not a table from 0 to 2^40
    cfg = WaveletConfig.grid(32, n_scales=32)  # d = 32: scales up to 2^31, support ~3e10
    q = torch.randn(1, 4, 32, dtype=torch.float64)
    out = wo.wavelet_bias(q, cfg, k_len=8, q_offset=2**40)
    want = oracle_bias(q.numpy(), cfg, 8, 2**40, True)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    assert cached_rows(cfg) <= 4 * 12


def test_windows_grow_geometrically_while_decoding(monkeypatch):
    cfg = WaveletConfig.grid(32, n_scales=16)  # support ~1e6 distances: never tabulated whole
    builds = []
    original = WaveletConfig._build_window
    monkeypatch.setattr(WaveletConfig, "_build_window",
                        lambda self, dt, lo, hi: builds.append((lo, hi)) or original(self, dt, lo, hi))
    for n in range(1, 3000, 7):  # one query at the end of a growing cache: distances 0 .. n-1
        table, r_lo = cfg.table(np.float32, 0, n - 1)
        assert (r_lo, table.shape[0]) == (0, n)  # every distance 0 .. n-1 has a nonzero row in this grid
    assert len(builds) <= 2 + math.ceil(math.log(3000, 1.5)), builds  # amortised O(1) rebuilds
    assert all(hi - lo + 1 <= 3 * 3000 for lo, hi in builds)


def test_default_grid_first_call_builds_no_more_than_the_support():
    cfg = WaveletConfig.grid(128)
    lo, hi = cfg.support_rows(np.float32)
    q = torch.randn(1, 2, 64, 128)
    wo.wavelet_bias(q, cfg)
    assert cached_rows(cfg) <= 2 * (hi - lo + 1)
    # the window's rows are the whole-support table's rows for the same distances
    table, r_lo = cfg.table(np.float32, -63, 63)
    whole, whole_lo = WaveletConfig.grid(128).table(np.float32)
    np.testing.assert_array_equal(table, whole[r_lo - whole_lo: r_lo - whole_lo + table.shape[0]])


@pytest.mark.parametrize("head_dim", [8, 64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_traced_default_grid_support_is_the_configs(head_dim, dtype):
    key, lo, hi = _tables._table_info(None, head_dim, dtype)
    assert (lo, hi) == wo.default_wavelet_config(head_dim).support_rows(
        np.float64 if dtype == torch.float64 else np.float32)
    assert key == f"default:{head_dim}"


def test_whole_support_tables_are_refused_with_the_way_out():
    cfg = WaveletConfig.grid(128, n_scales=32)
    with pytest.raises(ValueError, match=r"support spans \d+ distances .* config.table\(dtype, r_min, r_max\)"):
        cfg.table()
    lo, hi = cfg.support_rows()
    assert lo < -2**34 and hi > 2**34  # a bound, cheap, no table


@pytest.mark.parametrize("call,match", [
    (lambda: WaveletConfig(scales=[1.0, 1e308], shifts=[0.0, 0.0]), r"scales\[1\]=1e\+308"),
    (lambda: WaveletConfig(scales=[1.0, float("inf")], shifts=[0.0, 0.0]), r"scales contains an infinite value"),
    (lambda: WaveletConfig(scales=[1.0], shifts=[float("nan")]), r"shifts contains NaN"),
    (lambda: WaveletConfig.grid(16, n_scales=16, base=1e30), r"base=1e\+30 with n_scales=16"),
])
def test_configs_that_overflow_are_rejected_at_construction(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_reliability_pass_configs_now_work():
    # each failed with MemoryError / "Maximum allowed size exceeded" naming nothing
    for cfg in (WaveletConfig(scales=[1e300] * 8, shifts=list(range(8))), WaveletConfig.grid(16, base=100.0),
                WaveletConfig(scales=[1.0] * 8, shifts=[0, 1e18] + [0] * 6)):
        q = torch.randn(1, 40, cfg.head_dim, dtype=torch.float64)
        got = wo.wavelet_bias(q, cfg)
        np.testing.assert_allclose(got.numpy(), oracle_bias(q.numpy(), cfg, 40, 0, True), rtol=1e-10, atol=1e-12)


def test_compiled_calls_do_not_recompile_per_length():
    cfg = WaveletConfig.grid(16, n_scales=4)

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def f(q, k, v):
        return wo.wavelet_bias(q[0], cfg), wo.wavelet_attention(q, k, v)

    torch._dynamo.reset()
    q = torch.randn(1, 2, 9, 16)
    f(q, q, q)  # compiles once, with symbolic lengths
    with torch._dynamo.config.patch(error_on_recompile=True):
        for length in (13, 40, 77):
            x = torch.randn(1, 2, length, 16)
            bias, out = f(x, x, x)
            torch.testing.assert_close(bias, wo.wavelet_bias(x[0], cfg))
            torch.testing.assert_close(out, wo.wavelet_attention(x, x, x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["ricker", "gaussian", "morlet", "haar"])
def test_torch_tables_hold_no_subnormal_in_any_dtype(dtype, family):
    """The tables the kernels read (CUDA reads bf16/fp16 ones natively): a value below the
    dtype's smallest normal is 0, never a subnormal (float16's normal range is far narrower
    than the float32 table it is cast from)."""
    cfg = WaveletConfig.grid(64, family=family)
    lo, hi = cfg.support_rows(np.float64 if dtype == torch.float64 else np.float32)
    table, _ = _tables.wavelet_table(cfg, dtype, "cpu", lo, hi)
    a = table.abs()
    tiny = torch.finfo(dtype).tiny
    assert not ((a > 0) & (a < tiny)).any(), f"{int(((a > 0) & (a < tiny)).sum())} subnormal entries"
    assert (a > 0).any()


def test_an_equal_config_dropped_first_leaves_the_live_one_usable():
    """Equal configs share a table key; the registry that torch.compile graphs read
    through must keep serving it while any of them is alive."""
    import gc

    import torch

    import wavepe.ops as wo
    from wavepe.ops._tables import _config_of

    a = WaveletConfig.grid(32)
    b = WaveletConfig.grid(32)
    assert a == b and a.table_key == b.table_key
    del b
    gc.collect()
    # a live config of that key (earlier tests may keep another equal one alive, e.g. the default grid of 32)
    assert _config_of(a.table_key) == a
    q = torch.randn(1, 1, 8, 32)
    assert torch.isfinite(wo.wavelet_attention(q, q, q, config=a)).all()
    c = WaveletConfig.grid(32)
    del a
    gc.collect()
    assert _config_of(c.table_key) == c
