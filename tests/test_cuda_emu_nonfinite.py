"""NaN / inf semantics of the CUDA attention kernels, run on the CPU emulator.

The contract is the CPU kernels' (docs/DEVELOPING.md, "Non-finite values"):
NaN/inf in an input a row uses propagates to that row as the float64 oracle
(tests/reference.py) propagates it; a masked key -- padded, after the query
with causal=True, past every query -- never contributes, whatever it holds;
a row whose visible scores are all -inf is NaN with NaN lse; a row that sees
no key is 0 with lse -inf.  On the GPU the hazard is the products: a masked
key's P is 0, and 0 * inf or 0 * NaN in a tensor-core (or FMA) product would
reach the row anyway, so these tests plant such values in every kind of
masked position, on every dtype (bf16/fp16 through the mma.sync code), with
and without split-KV.

What the emulator cannot show: the GPU's own flush-to-zero of subnormals
(-ftz=true); tests/test_cuda.py checks that on a GPU.
"""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import cuda_emu as E
from . import reference as ref
from .test_cuda_emu import DTYPE_IDS, DTYPES, Attn, lib, tol  # noqa: F401  (lib: the module's fixture)

BAD = [float("nan"), float("inf"), float("-inf"), 1e30]


def oracle_forward(prob: Attn) -> np.ndarray:
    r = lambda x: None if x is None else E.rounded(x, prob.dtype)  # noqa: E731
    slopes = None
    if prob.slopes is not None:
        slopes = prob.slopes if prob.dtype == E.F64 else prob.slopes.astype(np.float32)
    return ref.attention(r(prob.q), r(prob.k), r(prob.v), table=r(prob.table), r_lo=prob.r_lo, clamp=prob.clamp,
                         slopes=slopes, causal=prob.causal, scale=prob.scale, q_offset=prob.off,
                         key_padding_mask=prob.kpm)


def assert_same_nonfinite(got, want, dtype, terms, what):
    """NaN where the oracle is NaN, the same infinities, finite values within tol."""
    bad = np.argwhere(np.isnan(got) != np.isnan(want))
    assert bad.size == 0, f"{what}: NaN at {bad[:5].tolist()} differs from the oracle"
    inf = np.isinf(want)
    assert (got[inf] == want[inf]).all(), f"{what}: infinities differ from the oracle"
    fin = np.isfinite(want)
    assert np.isfinite(got[fin]).all(), f"{what}: non-finite where the oracle is finite"
    scale = 1.0 + np.abs(want[fin]).max(initial=0.0)
    err = np.abs(got[fin] - want[fin]).max(initial=0.0)
    inner = dtype in (E.BF16, E.F16)
    bound = tol(dtype, terms, inner) * scale
    assert err <= bound, f"{what}: max error {err:.3e} > {bound:.3e}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), pe=st.integers(0, 2), m=st.integers(1, 40),
       extra=st.integers(0, 40), causal=st.booleans(), bad=st.sampled_from(BAD), padded=st.booleans(),
       splits=st.integers(1, 3), where=st.sampled_from(["q", "k", "v"]))
def test_forward_planted_values_match_oracle(lib, data, dtype, pe, m, extra, causal, bad, padded, splits, where):
    b, h, hk = 1, 2, 1
    d = data.draw(st.sampled_from([16, 64]))  # 64: bf16/fp16 run attn_fwd_tc_kernel
    n = m + extra
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    kpm = np.zeros((b, n), bool)
    if padded:
        kpm[0, data.draw(st.lists(st.integers(0, n - 1), max_size=4))] = True
    q, k, v = rng.standard_normal((b, h, m, d)), rng.standard_normal((b, hk, n, d)), rng.standard_normal((b, hk, n, d))
    t = {"q": q, "k": k, "v": v}[where]
    t[0, data.draw(st.integers(0, t.shape[1] - 1)), data.draw(st.integers(0, t.shape[2] - 1)),
      data.draw(st.integers(0, d - 1))] = bad
    prob = Attn(lib, dtype, B=b, H=h, Hk=hk, M=m, N=n, d=d, off=n - m, causal=causal, pe=pe, R=2 * n + 1, r_lo=-n,
                kpm=kpm if padded else False, seed=seed, splits=splits, inputs={"q": q, "k": k, "v": v})
    out, lse = prob.forward()
    assert_same_nonfinite(out, oracle_forward(prob), dtype, n, f"out ({where} = {bad})")
    # lse depends on the scores only: NaN exactly for the rows a planted q/k makes NaN
    # (an all -inf row included); a planted v leaves it alone
    want_nan = np.isnan(oracle_forward(prob)).any(axis=-1) if where != "v" else np.zeros_like(lse, bool)
    assert (np.isnan(lse) == want_nan).all(), "lse: NaN rows differ from the oracle's"


def _dirty_vs_clean(lib, dtype, garbage_at, bad, want_dtable=None, **kw):
    """Forward + backward with keys `garbage_at` (bool (B, N)) zero, then holding `bad` (a table's gradient too,
    unless want_dtable is False)."""
    base = Attn(lib, dtype, **kw)
    runs = []
    for fill in (0.0, bad):
        k, v = base.k.copy(), base.v.copy()
        k[np.broadcast_to(garbage_at[:, None, :], k.shape[:3])] = fill
        v[np.broadcast_to(garbage_at[:, None, :], v.shape[:3])] = fill
        prob = Attn(lib, dtype, **kw, inputs={"k": k, "v": v})
        out, lse = prob.forward()
        grads = prob.backward(want_dtable=prob.pe == 1 and want_dtable is not False, want_dslopes=prob.pe == 2)
        runs.append(dict(out=out, lse=lse, **grads))
    return runs


def _assert_garbage_never_reached(lib, dtype, garbage, bad, what, **kw):
    """Garbage (bad) in the keys marked ``garbage`` (B, N): every output and gradient equals the clean run's,
    bit for bit, finite (lse aside), and those keys' dk, dv are 0."""
    clean, dirty = _dirty_vs_clean(lib, dtype, garbage, bad, **kw)
    for name in clean:
        assert np.isfinite(dirty[name]).all() or name == "lse", f"{name} is not finite"
        assert np.array_equal(dirty[name], clean[name]), f"{name} depends on {what}"
    sel = np.broadcast_to(garbage[:, None, :, None], dirty["dk"].shape)
    assert (dirty["dk"][sel] == 0).all() and (dirty["dv"][sel] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("pe,bad", [(0, float("nan")), (1, float("inf")), (2, float("-inf")), (1, float("nan"))])
def test_masked_keys_never_reach_outputs_or_gradients(lib, dtype, pe, bad):
    """Padded keys and keys after every query (unused KV-cache slots) hold garbage:
    every output and gradient equals the one with those keys zeroed, bit for bit,
    and their own dK, dV are 0."""
    b, h, hk, m, n, d = 2, 4, 2, 20, 120, 24
    kpm = np.zeros((b, n), bool)
    kpm[:, [3, 45, 61]] = True
    garbage = kpm.copy()
    garbage[:, 80:] = True  # queries at 60..79
    kw = dict(B=b, H=h, Hk=hk, M=m, N=n, d=d, off=60, causal=True, pe=pe, R=90, r_lo=-5, kpm=kpm, seed=7)
    _assert_garbage_never_reached(lib, dtype, garbage, bad, "masked keys", **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("splits", [1, 2])
def test_causal_band_garbage_reaches_only_rows_that_see_it(lib, dtype, bad, splits):
    """A key seen by later queries only (the causal band of a tile) holding inf/NaN:
    the rows before it -- same tile, same warp -- are the clean ones, in the output,
    lse and dQ (up to rounding: that warp sums the tile key by key instead of on the
    tensor cores); rows that see it follow the oracle."""
    m = n = 40
    key = 21  # inside the first warp's 16-row group of its tile on every dtype
    garbage = np.zeros((1, n), bool)
    garbage[0, key] = True
    kw = dict(B=1, H=2, Hk=1, M=m, N=n, d=16, off=0, causal=True, pe=1, R=60, r_lo=-10, seed=11, splits=splits)
    clean, dirty = _dirty_vs_clean(lib, dtype, garbage, bad, **kw)
    for name, terms in (("out", n), ("dq", n * 16), ("lse", 16)):
        assert_same_nonfinite(dirty[name][:, :, :key], clean[name][:, :, :key], dtype if name != "lse" else E.F32,
                              terms, f"{name}: rows before the key")
    k = Attn(lib, dtype, **kw).k.copy()
    v = Attn(lib, dtype, **kw).v.copy()
    k[0, :, key] = bad
    v[0, :, key] = bad
    prob = Attn(lib, dtype, **kw, inputs={"k": k, "v": v})
    assert_same_nonfinite(prob.forward()[0], oracle_forward(prob), dtype, n, "out")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("pe,splits", [(0, 1), (2, 2), (1, 1), (1, 2)])
def test_tensor_core_forward_keeps_garbage_where_it_belongs(lib, dtype, bad, pe, splits):
    """attn_fwd_tc_kernel (head_dim 64, with a table: its band's blocks, the rest interior; without one the wide
    instance, 32 rows a warp): padded keys and keys after every query holding
    garbage change no bit of out and lse; a key in the causal band of a 64-key block (seen by the
    later rows of its warp only) leaves the rows before it as they were (up to rounding: that warp
    sums the block key by key) and the rows that see it follow the oracle."""
    _forward_garbage(lib, dtype, bad, pe, splits, 64, "tensor-core" if pe == 1 else "tensor-core, 32 rows a warp")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe,splits", [(float("nan"), 0, 1), (float("inf"), 1, 2)])
def test_tensor_core_forward_at_head_dim_256_keeps_garbage_where_it_belongs(lib, dtype, bad, pe, splits):
    """The same at head_dim 256 (blocks of 32 keys, Q's fragments from the Q tile)."""
    _forward_garbage(lib, dtype, bad, pe, splits, 256)


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe,splits", [(float("nan"), 0, 1), (float("inf"), 2, 2)])
def test_tensor_core_forward_wide_keeps_garbage_where_it_belongs(lib, dtype, bad, pe, splits):
    """The same for the wide instance (head_dim 128 without a table: 32 rows a warp, its masked blocks an m-tile at
    a time; key 110 in warp 0's second m-tile)."""
    _forward_garbage(lib, dtype, bad, pe, splits, 128, "tensor-core, 32 rows a warp")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe,splits", [(float("nan"), 1, 1), (float("inf"), 0, 2)])
def test_padded_head_dims_keep_garbage_where_it_belongs(lib, dtype, bad, pe, splits):
    """A head dim without a tensor-core instance (96: the call on copies zero-padded to 128, docs/CUDA.md "Padded
    head dims"): garbage in the masked keys changes no bit of out and lse, in the causal band it reaches the rows that
    see it as the oracle says -- forward (with a table the 16-row instance, without one the wide) and backward."""
    _forward_garbage(lib, dtype, bad, pe, splits, 96, "tensor-core" if pe == 1 else "tensor-core, 32 rows a warp")
    kpm = np.zeros((1, 260), bool)
    kpm[:, [3, 70, 130, 200]] = True
    garbage = kpm.copy()
    garbage[:, 250:] = True
    kw = dict(B=1, H=2, Hk=1, M=100, N=260, d=96, off=150, causal=True, pe=pe, kpm=kpm, seed=17, R=90)
    assert lib.wavepe_cuda_attention_bwd_padded_head_dim(C.byref(Attn(lib, dtype, **kw).a)) == 128
    _assert_garbage_never_reached(lib, dtype, garbage, bad, "masked keys", **kw)


def _band_split_case(d, device="H100"):
    """The band split's first case at head_dim 256 (the 16-row kernel's two instances; on a 99 KiB device, the
    tensor-core kernel's and the general one's) or 128 (onto the wide instances: 130 queries, a partial last group),
    with the table's distances 0 .. 39 -- its rows cut to 700 keys (1,200 at 128), which the split takes under
    WAVEPE_CUDA_BAND_SPLIT=1 (the caller's: the thresholds asked 2-5x as many, and the oracle cases have them)."""
    from .test_cuda_emu import BAND_SPLIT_CASES, GENERAL_BAND_SPLIT_CASES, WIDE_BAND_SPLIT_CASES

    case = dict(GENERAL_BAND_SPLIT_CASES[0] if device == "99 KiB" else
                BAND_SPLIT_CASES[0] if d == 256 else WIDE_BAND_SPLIT_CASES[0][0])
    keys = 700 if d == 256 else 1200
    return dict(case, N=keys, off=case["off"] - (case["N"] - keys))


@pytest.mark.parametrize("d,device", [(256, "H100"), (128, "A100"), (256, "99 KiB")])
def test_tensor_core_forward_band_split_keeps_garbage_where_it_belongs(lib, monkeypatch, d, device):
    """The band split (a table's call: two partials, combined): NaN and inf in a key beyond the band (the first
    partial's), in the band and on the causal diagonal (the second's) reach the rows that see them as the oracle
    says, and leave the rows before a key as they were; scores of -inf on every key beyond the band (the first
    partial all -inf) leave the rows finite; on every key, NaN (0/0, as in one pass)."""
    from .test_cuda_emu import A100_SM, GENERAL_SPLIT, H100_SM, SM_99_KIB, fwd_kernel

    # (at 128 an A100's SM: one table CTA, three wide ones -- the split onto the wide instance, which an H100's SM
    # takes from kBandSplitKeysWide keys a row without the switch)
    sm = {"H100": H100_SM, "A100": A100_SM}.get(device)
    for name, value in (dict(sm, WAVEPE_EMU_SMS="1") if sm else SM_99_KIB).items():
        monkeypatch.setenv(name, value)  # (no split-KV picked)
    monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", "1")  # (_band_split_case's rows)
    kw = dict(_band_split_case(d, device), seed=17)
    n, off = kw["N"], kw["off"]
    dtype = E.F16
    base = Attn(lib, dtype, **kw)
    assert fwd_kernel(lib, base) == ("tensor-core, band split" if sm else GENERAL_SPLIT)
    clean_out, _ = base.forward()
    for bad, key in ((float("nan"), 5), (float("inf"), 5), (float("nan"), off - 16), (float("inf"), off + 34)):
        k, v = base.k.copy(), base.v.copy()
        k[0, :, key] = bad
        v[0, :, key] = bad
        prob = Attn(lib, dtype, **kw, inputs={"k": k, "v": v})
        out, _ = prob.forward()
        assert_same_nonfinite(out, oracle_forward(prob), dtype, n, f"out ({bad} at key {key})")
        before = max(key - off, 0)
        assert_same_nonfinite(out[:, :, :before], clean_out[:, :, :before], dtype, n, "out: rows before the key")
    q, k = base.q.copy(), base.k.copy()
    q[..., 0] = np.abs(q[..., 0]) + 0.5
    k[0, :, : off - 64 - 40, 0] = -np.inf  # q . k = -inf on keys beyond the band
    prob = Attn(lib, dtype, **kw, inputs={"q": q, "k": k})
    out, lse = prob.forward()
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert_same_nonfinite(out, oracle_forward(prob), dtype, n, "out (-inf scores beyond the band)")
    k[0, :, :, 0] = -np.inf
    out, lse = Attn(lib, dtype, **kw, inputs={"q": q, "k": k}).forward()
    assert np.isnan(out).all() and np.isnan(lse).all()


@pytest.mark.parametrize("d,device", [(256, "H100"), (128, "H100"), (256, "99 KiB")])
def test_tensor_core_backward_band_split_keeps_garbage_where_it_belongs(lib, monkeypatch, d, device):
    """The backward's band split (the table-free dQ and dK/dV -- at 128 the wide ones -- over the blocks beyond the
    band, then the table's -- on a 99 KiB device at 256 the general kernels --, adding their sums): NaN in a key
    beyond the band (the first launches') reaches every row's dq through the sums the second launches add, and dq,
    dk, dv hold NaN where one pass leaves them (at 128: WAVEPE_CUDA_WIDE=0, unsplit).  (Garbage on the band and the
    diagonal takes the table's instances as without the split: the tests above.)"""
    from .test_cuda_emu import GENERAL_SPLIT, H100_SM, SM_99_KIB, bwd_kernel, dkdv_kernel

    for name, value in (dict(H100_SM, WAVEPE_EMU_SMS="1") if device == "H100" else SM_99_KIB).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", "1")  # (_band_split_case's rows)
    kw = dict(_band_split_case(d, device), seed=23)  # key 5 beyond the band of every row
    split = "tensor-core, band split" if device == "H100" else GENERAL_SPLIT
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == dkdv_kernel(lib, Attn(lib, E.BF16, **kw)) == split
    at = np.arange(kw["N"])[None, :] == 5
    clean, dirty = _dirty_vs_clean(lib, E.BF16, at, float("nan"), want_dtable=False, **kw)
    assert np.isfinite(clean["dq"]).all() and np.isnan(dirty["dq"]).any(axis=-1).all()
    assert np.isnan(dirty["out"]).any(axis=-1).all()
    if d == 128:
        monkeypatch.setenv("WAVEPE_CUDA_WIDE", "0")
        assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core"
        _, one_pass = _dirty_vs_clean(lib, E.BF16, at, float("nan"), want_dtable=False, **kw)
        for name in ("dq", "dk", "dv"):
            assert np.array_equal(np.isnan(dirty[name]), np.isnan(one_pass[name])), name


def _forward_garbage(lib, dtype, bad, pe, splits, d, kernel="tensor-core"):
    from .test_cuda_emu import fwd_kernel

    m, n, key = 70, 150, 110  # queries at 80..149: key 110 is in warp 1's rows of the first block
    kpm = np.zeros((1, n), bool)
    kpm[0, [3, 70, 100]] = True
    kw = dict(B=1, H=2, Hk=1, M=m, N=n, d=d, off=80, causal=True, pe=pe, kpm=kpm, seed=13, splits=splits, R=60, r_lo=0)
    base = Attn(lib, dtype, **kw)
    assert fwd_kernel(lib, base) == kernel
    runs = {}
    for name, at in (("clean", None), ("masked", kpm[0]), ("band", np.arange(n) == key)):
        k, v = base.k.copy(), base.v.copy()
        if at is not None:
            k[0, :, at] = bad
            v[0, :, at] = bad
        runs[name] = Attn(lib, dtype, **kw, inputs={"k": k, "v": v})
        runs[name].result = runs[name].forward()
    for got, want in zip(runs["masked"].result, runs["clean"].result):
        assert np.array_equal(got, want) and np.isfinite(got).all(), "masked keys reached the outputs"
    before = key - 80  # query rows before the key
    for i, (name, terms) in enumerate((("out", n), ("lse", d))):
        assert_same_nonfinite(runs["band"].result[i][:, :, :before], runs["clean"].result[i][:, :, :before],
                              dtype if name == "out" else E.F32, terms, f"{name}: rows before the key")
    assert_same_nonfinite(runs["band"].result[0], oracle_forward(runs["band"]), dtype, n, "out")


# each device and head dim with each bias once, in bf16 or fp16 alternating: both dtypes on every device (the reason:
# tests/test_cuda_emu.py, alternating)
DKDV_GARBAGE = [(d, device, pe, bad) for d, device in [(64, "A100"), (64, "16 keys"), (128, "H100"), (256, "99 KiB")]
                for pe, bad in [(0, float("nan")), (1, float("nan")), (2, float("inf"))]]
DKDV_GARBAGE_RUNS = [pytest.param(*run, dtype, id="-".join(map(str, run + (DTYPE_IDS[dtype],))))
                     for i, run in enumerate(DKDV_GARBAGE) for dtype in [(E.BF16, E.F16)[i % 2]]]


@pytest.mark.parametrize("d,device,pe,bad,dtype", DKDV_GARBAGE_RUNS)
def test_tensor_core_dkdv_keeps_masked_garbage_out(lib, monkeypatch, dtype, pe, bad, d, device):
    """attn_bwd_dkdv_tc_kernel and (no table) the wide attn_bwd_dkdv_tc_wide_kernel (head_dim 64 on the emulator's
    A100, 128 on an H100's SM; WAVEPE_CUDA_WIDE=0 the 16-key kernel; masked and interior query blocks) -- and at
    head_dim 256 on a 99 KiB device, without a table the one-buffer instances (dO's, V's): padded keys and keys after
    every query holding garbage change no bit of any output or gradient, and their dk, dv are 0."""
    from .test_cuda_emu import H100_SM, bwd_kernel, bwd_kernel_of, dkdv_kernel, dkdv_kernel_of

    env = {"H100": H100_SM, "16 keys": {"WAVEPE_CUDA_WIDE": "0"}, "99 KiB": {"WAVEPE_EMU_SMEM_OPTIN": str(99 * 1024)}}
    for k, v in env.get(device, {}).items():
        monkeypatch.setenv(k, v)
    b, m, n = 1, 100, 260  # queries at 160..259: key blocks 0-1 interior for every query block
    kpm = np.zeros((b, n), bool)
    kpm[:, [3, 70, 130, 200]] = True
    garbage = kpm.copy()
    garbage[:, 250:] = True
    kw = dict(B=b, H=2, Hk=1, M=m, N=n, d=d, off=n - m - 10, causal=True, pe=pe, kpm=kpm, seed=17, R=90)
    prob = Attn(lib, dtype, **kw)
    if device == "16 keys" or (device == "99 KiB" and pe != 1):
        assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == ("tensor-core", "tensor-core")
    elif device == "99 KiB":  # (a table: the window past 99 KiB)
        assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == ("general", "general")
    else:  # (pe 0: the wide dQ)
        h100 = device == "H100"
        assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == (bwd_kernel_of(kw, h100), dkdv_kernel_of(kw, h100))
    _assert_garbage_never_reached(lib, dtype, garbage, bad, "masked keys", **kw)


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe", [(float("nan"), 2), (float("inf"), 2), (float("inf"), 1)])
def test_tensor_core_dq_keeps_band_garbage_to_rows_that_see_it(lib, dtype, bad, pe):
    """attn_bwd_dq_tc_kernel: a key in the causal band of a block (seen by the later rows of its warp only)
    holding inf/NaN leaves dq of the rows before it as it was (up to rounding: that warp sums the block key
    by key); the rows that see it are non-finite."""
    _dq_band_garbage(lib, dtype, bad, pe, 64, "tensor-core")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,d", [(float("nan"), 128), (float("inf"), 64)])
def test_tensor_core_dq_wide_keeps_band_garbage_to_rows_that_see_it(lib, monkeypatch, dtype, bad, d):
    """The same for the wide dQ (no table nor ALiBi: 32 rows a warp, its masked blocks an m-tile at a time; key 110
    in warp 0's second m-tile, an H100's SM for head_dim 128)."""
    from .test_cuda_emu import H100_SM

    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    _dq_band_garbage(lib, dtype, bad, 0, d, "tensor-core, dQ 32 rows a warp")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe", [(float("nan"), 2), (float("inf"), 1)])
def test_tensor_core_dq_at_head_dim_256_keeps_band_garbage_to_rows_that_see_it(lib, dtype, bad, pe):
    """The same at head_dim 256 (blocks of 16 keys)."""
    _dq_band_garbage(lib, dtype, bad, pe, 256, "tensor-core")


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("bad,pe", [(float("nan"), 2), (float("inf"), 0)])
def test_tensor_core_dq_with_v_in_one_buffer_keeps_band_garbage_to_rows_that_see_it(lib, monkeypatch, dtype, bad, pe):
    """The same on a 99 KiB device, where the dQ at head_dim 256 (no table) holds V in one buffer."""
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    _dq_band_garbage(lib, dtype, bad, pe, 256, "tensor-core")


def _dq_band_garbage(lib, dtype, bad, pe, d, kernel):
    from .test_cuda_emu import bwd_kernel

    m, n, key = 70, 150, 110  # queries at 80..149: key 110 in warp 1's rows of the first query block
    garbage = np.arange(n)[None, :] == key
    kw = dict(B=1, H=2, Hk=1, M=m, N=n, d=d, off=80, causal=True, pe=pe, R=60, seed=19)
    assert bwd_kernel(lib, Attn(lib, dtype, **kw)) == kernel
    clean, dirty = _dirty_vs_clean(lib, dtype, garbage, bad, **kw)
    before = key - 80
    assert_same_nonfinite(dirty["dq"][:, :, :before], clean["dq"][:, :, :before], dtype, 2 * n * d, "dq: rows before the key")
    assert np.isnan(dirty["dq"][:, :, before:]).any() or np.isinf(dirty["dq"][:, :, before:]).any()


@pytest.mark.parametrize("dtype", [E.BF16, E.F16], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("m", [64, 128])
def test_tensor_core_dkdv_zero_weight_rows_contribute_nothing(lib, dtype, m):
    """attn_bwd_dkdv_tc_kernel's interior blocks (and, for 128 queries, attn_bwd_dkdv_tc_wide_kernel's) apply no
    mask, but a row coded lse +inf (mark_neg_inf: every score -inf) still contributes nothing to dK and dV: 0, not
    exp(-inf + inf) = NaN."""
    from .test_cuda_emu import bwd_kernel, dkdv_kernel

    n, d = 128, 64  # non-causal: every query block interior for every key block
    rng = np.random.default_rng(21)
    q = rng.standard_normal((1, 1, m, d))
    k = rng.standard_normal((1, 1, n, d))
    q[..., 0] = np.abs(q[..., 0]) + 0.5
    k[..., 0] = -np.inf  # every score -inf
    prob = Attn(lib, dtype, B=1, H=1, Hk=1, M=m, N=n, d=d, off=0, causal=False, pe=0, inputs={"q": q, "k": k})
    assert bwd_kernel(lib, prob) == ("tensor-core" if m == 64 else "tensor-core, dQ 32 rows a warp")
    assert dkdv_kernel(lib, prob) == ("tensor-core" if m == 64 else "tensor-core, 32 keys a warp")
    prob.a.mark_neg_inf = 1
    _, lse = prob.forward()
    assert (lse == np.inf).all()
    prob.backward(False)
    assert (E.values(prob.dk.arr, dtype) == 0).all() and (E.values(prob.dv.arr, dtype) == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("splits", [1, 3])
def test_rows_whose_visible_scores_are_all_minus_inf_are_nan(lib, dtype, splits):
    m = n = 30
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 1, m, 8))
    k = rng.standard_normal((1, 1, n, 8))
    q[..., 0] = np.abs(q[..., 0]) + 0.5  # q . k = -inf for every query against key 0
    k[0, 0, 0, 0] = -np.inf
    prob = Attn(lib, dtype, B=1, H=1, Hk=1, M=m, N=n, d=8, off=0, causal=True, pe=0, splits=splits,
                inputs={"q": q, "k": k})
    out, lse = prob.forward()
    assert np.isnan(out[0, 0, 0]).all() and np.isnan(lse[0, 0, 0]), "row 0 sees only key 0: 0/0"
    assert np.isfinite(out[0, 0, 1:]).all() and np.isfinite(lse[0, 0, 1:]).all()
    assert_same_nonfinite(out, oracle_forward(prob), dtype, n, "out")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("splits", [1, 3])
def test_mark_neg_inf_codes_rows_whose_scores_are_all_minus_inf(lib, dtype, splits):
    """mark_neg_inf (wavepe.distributed's ring): the all -inf row is out 0, lse +inf, in one pass and through the
    split combine; every other row as without the flag; the backward takes the row as contributing nothing."""
    m = n = 30
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 1, m, 8))
    k = rng.standard_normal((1, 1, n, 8))
    q[..., 0] = np.abs(q[..., 0]) + 0.5  # q . k = -inf for every query against key 0
    k[0, 0, 0, 0] = -np.inf
    kw = dict(B=1, H=1, Hk=1, M=m, N=n, d=8, off=0, causal=True, pe=0, splits=splits, inputs={"q": q, "k": k})
    plain_out, plain_lse = Attn(lib, dtype, **kw).forward()
    prob = Attn(lib, dtype, **kw)
    prob.a.mark_neg_inf = 1
    out, lse = prob.forward()
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0] == np.inf
    np.testing.assert_array_equal(out[0, 0, 1:], plain_out[0, 0, 1:])
    np.testing.assert_array_equal(lse[0, 0, 1:], plain_lse[0, 0, 1:])
    plain = Attn(lib, dtype, **kw)
    plain.forward()
    plain.backward(False)
    prob.backward(False)
    dq, want = E.values(prob.dq.arr, dtype), E.values(plain.dq.arr, dtype)
    # the marked row contributes nothing: dq 0 (but in column 0, where key 0's -inf meets dS = 0: NaN, as the
    # formula's 0 * -inf and every row seeing key 0), the other rows' dq as without the flag; dv finite (the
    # unmarked NaN row made key 0's dv NaN)
    assert (dq[0, 0, 0, 1:] == 0).all()
    np.testing.assert_array_equal(dq[0, 0, 1:], want[0, 0, 1:])
    assert np.isfinite(E.values(prob.dv.arr, dtype)).all() and np.isnan(E.values(plain.dv.arr, dtype)).any()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_decode_split_with_only_minus_inf_scores_is_not_nan(lib, dtype):
    """Split-KV: one split's keys all score -inf, another's do not: the row is finite
    (the -inf keys weigh 0), and it is NaN only when every split is so."""
    n, d = 200, 8
    rng = np.random.default_rng(6)
    q = np.abs(rng.standard_normal((1, 1, 1, d))) + 0.5
    k = rng.standard_normal((1, 1, n, d))
    k[0, 0, :120, 0] = -np.inf
    kw = dict(B=1, H=1, Hk=1, M=1, N=n, d=d, off=n - 1, causal=True, pe=0, splits=4)
    prob = Attn(lib, dtype, **kw, inputs={"q": q, "k": k})
    out, lse = prob.forward()
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert_same_nonfinite(out, oracle_forward(prob), dtype, n, "out")
    k[0, 0, :, 0] = -np.inf
    out, lse = Attn(lib, dtype, **kw, inputs={"q": q, "k": k}).forward()
    assert np.isnan(out).all() and np.isnan(lse).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("pe", [0, 1, 2])
def test_nan_query_row_is_nan_in_output_and_gradient(lib, dtype, pe):
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 2, 12, 32))
    q[0, 1, 2, 5] = np.nan
    prob = Attn(lib, dtype, B=1, H=2, Hk=2, M=12, N=12, d=32, off=0, causal=False, pe=pe, R=30, r_lo=-15,
                inputs={"q": q})
    out, lse = prob.forward()
    assert np.isnan(out[0, 1, 2]).all() and np.isnan(lse[0, 1, 2])
    rows = np.ones((2, 12), bool)
    rows[1, 2] = False
    assert np.isfinite(out[0][rows]).all() and np.isfinite(lse[0][rows]).all()
    g = prob.backward(want_dtable=False)
    assert np.isnan(g["dq"][0, 1, 2]).all(), "a NaN is never hidden in the gradient"


# ---- packed sequences (cu_seqlens) ---------------------------------------------------------

def packed_oracle_forward(prob: Attn) -> np.ndarray:
    """The forward oracle of a packed problem: each document's queries against its keys alone."""
    r = lambda x: None if x is None else E.rounded(x, prob.dtype)  # noqa: E731
    slopes = None
    if prob.slopes is not None:
        slopes = prob.slopes if prob.dtype == E.F64 else prob.slopes.astype(np.float32)
    B, H, Hk, M, N, d = prob.shape
    q, k, v = r(prob.q), r(prob.k), r(prob.v)
    out = np.zeros((B, H, M, d))
    for b, s, e, m0, m1 in prob.documents():
        out[b:b + 1, :, m0:m1] = ref.attention(
            q[b:b + 1, :, m0:m1], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], table=r(prob.table), r_lo=prob.r_lo,
            clamp=prob.clamp, slopes=slopes, causal=prob.causal, scale=prob.scale, q_offset=prob.off + m0 - s,
            key_padding_mask=None if prob.kpm is None else prob.kpm[b:b + 1, s:e])
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("pe,bad", [(0, float("nan")), (1, float("inf")), (2, float("-inf")), (1, float("nan"))])
def test_packed_documents_without_queries_never_reach_outputs_or_gradients(lib, dtype, pe, bad):
    """Keys of documents before the first query (a packed row's earlier documents, e.g. a
    KV cache) hold garbage: every output and gradient equals the one with them zeroed, bit for
    bit, and their own dK, dV are 0."""
    b, h, hk, m, n, d = 2, 4, 2, 40, 90, 24
    cu = [[0, 20, 45, 48, 90], [0, 1, 30, 30, 90]]  # queries at 50..89
    garbage = np.zeros((b, n), bool)
    garbage[0, :48] = True
    garbage[1, :30] = True
    kpm = np.zeros((b, n), bool)
    kpm[:, [3, 55, 61]] = True
    kw = dict(B=b, H=h, Hk=hk, M=m, N=n, d=d, off=50, causal=True, pe=pe, R=90, r_lo=-5, kpm=kpm, seed=7, cu=cu)
    _assert_garbage_never_reached(lib, dtype, garbage, bad, "keys of other documents", **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("pe,bad,causal", [(0, float("nan"), True), (1, float("inf"), False),
                                           (2, float("-inf"), True), (1, float("nan"), False)])
@pytest.mark.parametrize("splits", [1, 2])
def test_packed_garbage_reaches_only_its_own_document(lib, dtype, pe, bad, causal, splits):
    """inf/NaN in keys of one document, its neighbours sharing tiles and warps with it: the
    other documents' rows (output, lse, dQ) are the clean ones up to rounding (a warp whose rows
    straddle the boundary sums the tile key by key), the other documents' keys' dK, dV are the
    clean ones bit for bit, and every row follows the per-document oracle."""
    m = n = 70
    cu = [[0, 23, 23, 24, 50, 70], [0, 40, 41, 70, 70, 70]]
    garbage = np.zeros((2, n), bool)
    garbage[0, [30, 49]] = True  # document [24, 50) of row 0
    garbage[1, [0, 39]] = True   # document [0, 40) of row 1
    doc = np.zeros((2, n), bool)  # the positions of those documents
    doc[0, 24:50] = True
    doc[1, 0:40] = True
    kw = dict(B=2, H=2, Hk=1, M=m, N=n, d=16, off=0, causal=causal, pe=pe, R=150, r_lo=-75, seed=12, cu=cu,
              splits=splits)
    clean, dirty = _dirty_vs_clean(lib, dtype, garbage, bad, **kw)
    other = ~doc
    for name, terms in (("out", n), ("dq", n * 16), ("lse", 16)):
        c, g = clean[name], dirty[name]
        sel = np.broadcast_to(other[:, None, :] if c.ndim == 3 else other[:, None, :, None], c.shape)
        assert_same_nonfinite(g[sel], c[sel], dtype if name != "lse" else E.F32, terms, f"{name}: other documents")
    for name in ("dk", "dv"):
        sel = np.broadcast_to(other[:, None, :, None], clean[name].shape)
        assert np.array_equal(dirty[name][sel], clean[name][sel]), f"{name}: other documents' keys"
    k, v = Attn(lib, dtype, **kw).k.copy(), Attn(lib, dtype, **kw).v.copy()
    k[np.broadcast_to(garbage[:, None, :], k.shape[:3])] = bad
    v[np.broadcast_to(garbage[:, None, :], v.shape[:3])] = bad
    prob = Attn(lib, dtype, **kw, inputs={"k": k, "v": v})
    assert_same_nonfinite(prob.forward()[0], packed_oracle_forward(prob), dtype, n, "out")
