"""NaN / inf semantics of the fused attention and the relative bias, on every ISA.

The contract (docs/DEVELOPING.md, "Non-finite values"):

* a NaN or inf in an input a query actually uses propagates to that query's
  output, as the float64 oracle (tests/reference.py) computes it;
* a masked position -- a key after the query with causal=True, a padded key
  (key_padding_mask) -- never contributes, whatever it holds: NaN, inf, 1e30;
* a query that sees no key outputs 0 with finite gradients;
* subnormal inputs read as zero (the kernels flush them; fpenv.h).

Values are planted at random masked and unmasked positions (hypothesis) and the
result compared with the oracle NaN for NaN, value for value.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wavepe import WaveletConfig

from . import reference as ref
from .tolerances import pv_atol

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
import wavepe.ufuncs as wu  # noqa: E402


BAD = [float("nan"), float("inf"), float("-inf"), 1e30]


def _oracle_kwargs(pos_enc, d, h, m, n, off):
    if pos_enc == "wavelet":
        cfg = WaveletConfig.grid(d)
        r = np.arange(off - (n - 1), off + m)
        return {"config": cfg}, {"table": ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r), "r_lo": r[0]}
    if pos_enc == "alibi":
        slopes = ref.alibi_slopes(h)
        return {"alibi_slopes": torch.tensor(slopes)}, {"slopes": slopes}
    return {}, {}


def _assert_same(got, want, rtol, atol):
    got = np.asarray(got, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (
        f"NaN at {np.argwhere(np.isnan(got) != np.isnan(want))[:5].tolist()} differs from the oracle")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), pos_enc=st.sampled_from(["wavelet", "alibi", "none"]),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
       m=st.integers(1, 30), extra=st.integers(0, 40), bad=st.sampled_from(BAD), padded=st.booleans())
def test_forward_planted_values_match_oracle(isa, data, pos_enc, dtype, m, extra, bad, padded):
    b, h, h_kv, d = 1, 2, 1, 16
    n = m + extra
    off = n - m
    half = dtype in (torch.bfloat16, torch.float16)
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    q, k, v = (torch.randn(b, hh, ll, d, generator=g, dtype=torch.float64) for hh, ll in ((h, m), (h_kv, n), (h_kv, n)))
    kpm = torch.zeros(b, n, dtype=torch.bool)
    if padded:
        kpm[0, data.draw(st.lists(st.integers(0, n - 1), max_size=4))] = True
    # plant: in k or v at any key (masked for some rows, or padded), or in q (an unmasked input)
    where = data.draw(st.sampled_from(["k", "v", "q"]))
    t = {"q": q, "k": k, "v": v}[where]
    pos = data.draw(st.integers(0, t.shape[2] - 1))
    col = data.draw(st.integers(0, d - 1))
    t[0, data.draw(st.integers(0, t.shape[1] - 1)), pos, col] = bad
    kw, okw = _oracle_kwargs(pos_enc, d, h, m, n, off)
    if half:  # the oracle of what the half kernels read: the inputs and the wavelet table rounded to the type
        q, k, v = (x.to(dtype).double() for x in (q, k, v))
        if "table" in okw:
            okw["table"] = torch.from_numpy(okw["table"]).to(dtype).double().numpy()
    want = ref.attention(q.numpy(), k.numpy(), v.numpy(), key_padding_mask=kpm.numpy() if padded else None, **okw)
    got = wo.wavelet_attention(q.to(dtype), k.to(dtype), v.to(dtype), pos_enc=pos_enc,
                               key_padding_mask=kpm if padded else None,
                               **{kk: (vv.to(dtype) if torch.is_tensor(vv) and not half else vv)
                                  for kk, vv in kw.items()})
    # float32 arithmetic (+ half an ulp of the half type's final rounding, + P's rounding where the kernels
    # round it: pv_atol of the finite values)
    rtol = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 2e-5 + 2.0**-8, torch.float16: 2e-5 + 2.0**-11}
    atol = 2e-5 + pv_atol(dtype, v[torch.isfinite(v)]) if dtype != torch.float64 else 1e-10
    _assert_same(got.double().numpy(), want, rtol[dtype], atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [17, 250])
def test_rows_whose_scores_are_all_neg_inf_are_nan_for_any_row_count(isa, dtype, m):
    """An infinite key that every row sees, the only key the first rows see: a row whose q meets it with a
    negative sign has every score -inf (NaN out, as 0/0 in the formula), the others +inf (NaN too).  M not a
    multiple of 16 nor of 6: the tiles' P V once wrote its padding rows over the row sums there, and turned
    the -0.0 that marks "every score -inf" into +0.0 (a finite 0 row)."""
    b, h, d = 1, 2, 16
    g = torch.Generator().manual_seed(m)
    q, k, v = (torch.randn(b, h, m, d, generator=g, dtype=torch.float64) for _ in range(3))
    k[:, :, 0, 0] = float("inf")
    q[:, :, 0, 0] = -1.0  # row 0 sees key 0 only: its one score is -inf
    want = ref.attention(q.to(dtype).double().numpy(), k.to(dtype).double().numpy(), v.to(dtype).double().numpy(),
                         causal=True)
    got = wo.wavelet_attention(q.to(dtype), k.to(dtype), v.to(dtype), pos_enc="nope").double().numpy()
    assert np.isnan(want[0, :, 0]).all()
    _assert_same(got, want, 2e-5 + 2.0**-8, 2e-5 + pv_atol(dtype, v))


@pytest.mark.parametrize("pos_enc", ["wavelet", "alibi", "none"])
@pytest.mark.parametrize("bad", BAD)
def test_masked_keys_never_reach_outputs_or_gradients(isa, pos_enc, bad):
    """Keys no query may see -- padding, and unused KV-cache slots after every query
    (filled by torch.empty in practice) -- hold garbage: every output and gradient is
    the one of the same call with those keys zeroed, and their own gradients are 0."""
    b, h, h_kv, m, n, d = 2, 4, 2, 37, 300, 32
    off = 150  # queries at 150..186: keys 187..299 are after every query
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(b, hh, ll, d, generator=g, dtype=torch.float64) for hh, ll in ((h, m), (h_kv, n), (h_kv, n)))
    kpm = torch.zeros(b, n, dtype=torch.bool)
    kpm[:, [3, 90, 151]] = True
    garbage = torch.zeros(b, n, dtype=torch.bool)
    garbage[:, 187:] = True
    garbage |= kpm
    kw, _ = _oracle_kwargs(pos_enc, d, h, m, n, off)
    dout = torch.randn(b, h, m, d, generator=g, dtype=torch.float64)

    def run(kk, vv):
        qq = q.clone().requires_grad_()
        kk = kk.clone().requires_grad_()
        vv = vv.clone().requires_grad_()
        out = wo.wavelet_attention(qq, kk, vv, pos_enc=pos_enc, q_offset=off, key_padding_mask=kpm, **kw)
        (out * dout).sum().backward()
        return out.detach(), qq.grad, kk.grad, vv.grad

    clean = run(k.masked_fill(garbage[:, None, :, None], 0.0), v.masked_fill(garbage[:, None, :, None], 0.0))
    dirty = run(k.masked_fill(garbage[:, None, :, None], bad), v.masked_fill(garbage[:, None, :, None], bad))
    for name, c, x in zip(["out", "dq", "dk", "dv"], clean, dirty):
        assert torch.isfinite(x).all(), f"{name} is not finite"
        torch.testing.assert_close(x, c, rtol=0, atol=0, msg=f"{name} depends on masked keys")
    assert (dirty[2].masked_select(garbage[:, None, :, None]) == 0).all()
    assert (dirty[3].masked_select(garbage[:, None, :, None]) == 0).all()


@pytest.mark.parametrize("pos_enc", ["wavelet", "nope"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_huge_finite_scores_match_oracle(isa, pos_enc, dtype):
    """Finite scores far past exp's range (a query 10^4 or 10^28 times the others) give the oracle's one-hot
    rows, not NaN: the tiles' softmax folded the scale and log2(e) into an a u + b whose roundings move it by
    ~2^-23 |max score| (amx, at scores of 1e20: NaN rows).  300 keys: a second key block meets those rows with
    a running maximum (the one-pass weights); dV checks the backward's P, recomputed the same way."""
    b, h, m, d = 1, 2, 300, 64
    g = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(b, h, m, d, generator=g, dtype=torch.float64) for _ in range(4))
    big = 1e28 if dtype == torch.bfloat16 else (1e4 if dtype == torch.float16 else 1e20)
    q[0, 0, 5] *= 1e4  # scores ~1e5: past the exact path's 2^10
    q[0, 0, 100] *= 30  # large, inside it
    q[0, 1, 280] *= big
    if dtype != torch.float16:
        q[0, 1, 17] *= big
    q, k, v = (x.to(dtype).double() for x in (q, k, v))  # what the kernels read
    kw, okw = _oracle_kwargs(pos_enc if pos_enc == "wavelet" else "none", d, h, m, m, 0)
    if "table" in okw:
        okw["table"] = torch.from_numpy(okw["table"]).to(dtype).double().numpy()
    res = ref.attention_with_grads(q.numpy(), k.numpy(), v.numpy(), dout.numpy(), 1 / np.sqrt(d), 0, True,
                                   "wavelet" if pos_enc == "wavelet" else "none", table=okw.get("table"),
                                   r_lo=okw.get("r_lo", 0))
    want, want_lse, want_dv = res["out"], res["lse"], res["dv"]
    qt, kt, vt = (x.to(dtype).requires_grad_() for x in (q, k, v))
    out, lse = wo.wavelet_attention(qt, kt, vt, pos_enc=pos_enc, return_lse=True, **kw)
    rtol = {torch.float32: 2e-5, torch.bfloat16: 2e-5 + 2.0**-8, torch.float16: 2e-5 + 2.0**-11}[dtype]
    atol = 2e-5 + pv_atol(dtype, v)
    _assert_same(out.double().detach().numpy(), want, rtol, atol)
    np.testing.assert_allclose(lse.double().detach().numpy(), want_lse, rtol=1e-5, atol=1e-4)
    if isa == "amx" and dtype == torch.bfloat16:
        # the backward's P from the same tile products as the forward's scores, bit for bit (elsewhere the
        # vector kernels recompute them in another order: at scores of 1e10 float32's ulp is 1e3, and
        # exp(s - lse) is not bounded by 1: docs/DEVELOPING.md, "Non-finite values")
        out.backward(dout.to(dtype))
        for x in (qt, kt, vt):
            assert torch.isfinite(x.grad).all()
        scale = float(np.abs(want_dv).max())
        np.testing.assert_allclose(vt.grad.double().numpy(), want_dv, rtol=0, atol=2.0**-6 * scale)


@pytest.mark.parametrize("pos_enc", ["wavelet", "alibi", "none"])
def test_nan_query_row_is_nan_on_every_isa(isa, pos_enc):
    q, k, v = (torch.randn(1, 2, 12, 32, dtype=torch.float64) for _ in range(3))
    q[0, 1, 2, 5] = float("nan")
    q = q.requires_grad_()
    out = wo.wavelet_attention(q, k, v, pos_enc=pos_enc)
    assert torch.isnan(out[0, 1, 2]).all()
    assert torch.isfinite(out[0, 0]).all() and torch.isfinite(out[0, 1, [0, 1, 3, 4]]).all()
    out[0, 1, 2].sum().backward()
    assert torch.isnan(q.grad[0, 1, 2]).all()  # a NaN is never hidden in the gradient either


def test_fully_masked_rows_are_zero_with_finite_gradients(isa):
    q, k, v = (torch.randn(1, 1, 8, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = wo.wavelet_attention(q, k, v, q_offset=-4)  # queries at -4..3: the first four see no key
    assert (out[0, 0, :4] == 0).all()
    out.sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("f64", [False, True])
def test_subnormal_inputs_read_as_zero(isa, f64):
    dtype = torch.float64 if f64 else torch.float32
    tiny = torch.finfo(dtype).tiny
    q, k, v = (torch.randn(1, 2, 40, 32, dtype=dtype) for _ in range(3))
    got = wo.wavelet_attention(q * (tiny / 8), k, v)  # every q element subnormal
    want = wo.wavelet_attention(torch.zeros_like(q), k, v)  # a zero query: the mean of the values seen
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    mean = v.double().cumsum(2) / torch.arange(1, 41, dtype=torch.float64)[:, None]
    torch.testing.assert_close(want.double(), mean.expand_as(want), rtol=1e-5 if not f64 else 1e-12, atol=1e-6)
    assert not ((want != 0) & (want.abs() < tiny)).any()


def test_relbias_nan_query_matches_oracle_on_every_isa(isa):
    cfg = WaveletConfig.grid(32)
    table, r_lo = cfg.table(np.float64)
    q = np.random.default_rng(0).standard_normal((2, 40, 32))
    q[1, 7, 3] = np.nan
    q[0, 11, 30] = np.inf
    got = wu.rel_bias(q, table, r_lo, k_len=300, q_offset=260)
    want = ref.rel_bias(q, table, r_lo, 300, 260, True, False)
    _assert_same(got, want, 1e-12, 1e-12)



@pytest.mark.parametrize("pos_enc", ["wavelet", "relative", "alibi", "nope"])
@pytest.mark.parametrize("where", ["q", "dout"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_nan_row_reaches_only_the_keys_it_sees(isa, pos_enc, where, dtype):
    """A NaN in one query row (or in its output gradient) makes the gradients of the
    keys that row sees NaN and leaves every other gradient as if the row did not
    exist (its q and dO zero, which makes its P dO and dS q terms vanish): in the
    tiles' products the row meets masked keys with P = dS = 0, and 0 * NaN must not
    happen.  Several key and query blocks, padding, GQA."""
    b, h, h_kv, m, n, d, i = 1, 2, 1, 300, 300, 32, 150
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(b, hh, m, d, generator=g).to(dtype) for hh in (h, h_kv, h_kv))
    dout = torch.randn(b, h, m, d, generator=g).to(dtype)
    kpm = torch.zeros(b, n, dtype=torch.bool)
    kpm[0, [7, 120, 200]] = True
    kw = {}
    if pos_enc == "relative":
        kw["rel_table"] = (torch.randn(41, d, generator=g).to(dtype).requires_grad_(), -20)
    elif pos_enc == "alibi":
        kw["alibi_slopes"] = torch.tensor(ref.alibi_slopes(h), dtype=torch.float64 if dtype == torch.float64 else
                                          torch.float32)

    def grads(qq, dd):
        qq, kk, vv = (x.clone().requires_grad_() for x in (qq, k, v))
        if "rel_table" in kw:
            kw["rel_table"][0].grad = None
        pe = "relative" if pos_enc == "relative" else pos_enc
        out = wo.wavelet_attention(qq, kk, vv, pos_enc=pe, key_padding_mask=kpm, **kw)
        (out * dd).sum().backward()
        dt = kw["rel_table"][0].grad.clone() if "rel_table" in kw else None
        return qq.grad, kk.grad, vv.grad, dt

    q_bad, d_bad, q_gone, d_gone = q.clone(), dout.clone(), q.clone(), dout.clone()
    (q_bad if where == "q" else d_bad)[0, 0, i, 3] = float("nan")
    q_gone[0, 0, i] = 0.0
    d_gone[0, 0, i] = 0.0
    dq, dk, dv, dt = grads(q_bad, d_bad)
    dq0, dk0, dv0, dt0 = grads(q_gone, d_gone)
    seen = torch.zeros(n, dtype=torch.bool)
    seen[: i + 1] = True
    seen &= ~kpm[0]
    # bf16: the two runs' float32 sums may differ in their last bits (the NaN row's terms are added apart),
    # which can move a rounding to bf16 by one ulp
    tol = {torch.float64: {"rtol": 1e-12, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5},
           torch.bfloat16: {"rtol": 2.0**-7, "atol": 1e-5}}[dtype]
    others = torch.ones(m, dtype=torch.bool)
    others[i] = False
    torch.testing.assert_close(dq[0, 0, others], dq0[0, 0, others], **tol)
    torch.testing.assert_close(dq[0, 1], dq0[0, 1], **tol)
    assert torch.isnan(dq[0, 0, i]).any()
    for name, x, x0 in (("dk", dk, dk0), ("dv", dv, dv0)):
        torch.testing.assert_close(x[0, 0, ~seen], x0[0, 0, ~seen], **tol, msg=f"{name} of keys the NaN row does not see")
        assert torch.isnan(x[0, 0, seen]).any(-1).all(), f"{name}: a key the NaN row sees hides the NaN"
    if dt is not None:  # table rows of the distances the row forms with keys it sees: NaN; the others exact
        rows = torch.zeros(dt.shape[0], dtype=torch.bool)
        r = i - torch.arange(n)[seen] + 20
        rows[r[(r >= 0) & (r < dt.shape[0])]] = True
        torch.testing.assert_close(dt[~rows], dt0[~rows], **tol)
        assert torch.isnan(dt[rows]).any(-1).all()


def _fwd(q, k, v, q_offset, causal, mark, pos_enc="none", mask=None):
    h, d = q.shape[1], q.shape[3]
    table = slopes = None
    if pos_enc == "relative":
        table = torch.linspace(-1, 1, 7 * d, dtype=q.dtype).reshape(7, d)
    elif pos_enc == "alibi":
        slopes = torch.linspace(0.2, 0.8, h, dtype=q.dtype)
    kw = dict(table=table, r_lo=-3, clamp=pos_enc == "relative", slopes=slopes, key_padding_mask=mask, scale=0.5,
              q_offset=q_offset, causal=causal, cu_seqlens=None, mark_neg_inf=mark)
    return (*torch.ops.wavepe.attention_fwd(q=q, k=k, v=v, **kw), kw)


@pytest.mark.parametrize("pos_enc", ["none", "relative", "alibi"])
@pytest.mark.parametrize("f64", [False, True])
def test_mark_neg_inf_codes_rows_whose_scores_are_all_neg_inf(isa, pos_enc, f64):
    # attention_fwd(mark_neg_inf=True): a row whose visible scores are all -inf gets out = 0, lse = +inf
    # instead of NaN; every other row is bit for bit the same (NaN for a +inf score, -inf for no key).
    # Causal, keys 0 .. 5 score -inf: queries 0 .. 5 see only those (marked), the later ones finite ones too.
    dt = torch.float64 if f64 else torch.float32
    g = torch.Generator().manual_seed(1)
    b, h, n, d = 2, 2, 40, 8
    q = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64).abs() + 0.5).to(dt)
    k = torch.randn(b, 1, n, d, generator=g, dtype=torch.float64).to(dt)
    v = torch.randn(b, 1, n, d, generator=g, dtype=torch.float64).to(dt)
    k[:, :, :6, 0] = float("-inf")
    q[1, 1, 3, 0] = -1.0                   # +inf against keys 0 .. 5: NaN, marked or not
    if pos_enc != "relative":              # (inf * a table's entry is not -inf)
        q[0, 0, 2, 0] = float("inf")       # inf * -inf = -inf: marked (and an inf q row in the backward)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, :1] = True                     # batch 1's query 0 sees no key: lse -inf
    out0, lse0, _ = _fwd(q, k, v, 0, True, False, pos_enc, mask)
    out1, lse1, kw = _fwd(q, k, v, 0, True, True, pos_enc, mask)
    marked = torch.zeros(b, h, n, dtype=torch.bool)
    marked[:, :, :6] = True
    marked[1, 1, 3] = False
    marked[1, :, 0] = False
    assert torch.isnan(lse0[marked]).all() and torch.isnan(out0[marked]).all()
    assert torch.isposinf(lse1[marked]).all() and (out1[marked] == 0).all()
    assert torch.isnan(lse1[1, 1, 3]) and torch.isneginf(lse1[1, :, 0]).all() and (out1[1, :, 0] == 0).all()
    torch.testing.assert_close(out1[~marked], out0[~marked], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(lse1[~marked], lse0[~marked], rtol=0, atol=0, equal_nan=True)
    assert torch.isposinf(lse1).sum() == marked.sum()

    # the backward takes a +inf lse as a row that contributes nothing: the gradients of the other rows alone
    live = [(0, 0), (0, 1), (1, 0)]        # (batch, head) with no NaN row; rows 6 .. of each
    go = torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dt)
    grads = torch.ops.wavepe.attention_bwd(grad_out=go, grad_lse=None, q=q, k=k, v=v, out=out1, lse=lse1,
                                           table_grad=kw["table"] is not None, slopes_grad=kw["slopes"] is not None,
                                           **kw)
    # dq of a marked row is 0 (column 0 aside: the vector kernels' block product adds 0 * k, and k[..., 0] is -inf
    # there, as for every row of a block holding such keys)
    assert (grads[0][marked][:, 1:] == 0).all()
    if isa == "scalar":
        assert (grads[0][marked] == 0).all()
    for bi, hi in live:
        sl = (slice(bi, bi + 1), slice(hi, hi + 1))
        kwp = dict(kw, q_offset=6, key_padding_mask=None if mask is None else mask[bi:bi + 1])
        if kwp["slopes"] is not None:
            kwp["slopes"] = kw["slopes"][hi:hi + 1]
        qs, gos = q[sl][:, :, 6:], go[sl][:, :, 6:]
        o, l = torch.ops.wavepe.attention_fwd(q=qs, k=k[bi:bi + 1], v=v[bi:bi + 1], **kwp)
        want = torch.ops.wavepe.attention_bwd(grad_out=gos, grad_lse=None, q=qs, k=k[bi:bi + 1], v=v[bi:bi + 1],
                                              out=o, lse=l, table_grad=False, slopes_grad=False, **kwp)
        tol = dict(rtol=1e-10, atol=1e-12) if f64 else dict(rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(grads[0][sl][:, :, 6:], want[0], equal_nan=True, **tol)  # 0 * -inf keys
    # keys: batch 0 has no NaN row, so its dk / dv are those of its live rows (both heads)
    qs, gos = q[:1, :, 6:], go[:1, :, 6:]
    kwp = dict(kw, q_offset=6, key_padding_mask=mask[:1])
    o, l = torch.ops.wavepe.attention_fwd(q=qs, k=k[:1], v=v[:1], **kwp)
    want = torch.ops.wavepe.attention_bwd(grad_out=gos, grad_lse=None, q=qs, k=k[:1], v=v[:1], out=o, lse=l,
                                          table_grad=False, slopes_grad=False, **kwp)
    tol = dict(rtol=1e-10, atol=1e-12) if f64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(grads[1][:1], want[1], equal_nan=True, **tol)
    torch.testing.assert_close(grads[2][:1], want[2], equal_nan=True, **tol)


@pytest.mark.parametrize("f64", [False, True])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_mark_neg_inf_on_the_split_keys_path(isa, f64, m):
    # few queries, many keys (the vector kernels split the keys and combine the chunks): batch 0's keys all
    # score -inf (marked), batch 1's only in the first chunks (finite: those chunks weigh zero)
    dt = torch.float64 if f64 else torch.float32
    g = torch.Generator().manual_seed(2)
    n, d = 1500, 16
    q = (torch.randn(2, 4, m, d, generator=g, dtype=torch.float64).abs() + 0.5).to(dt)
    k = torch.randn(2, 2, n, d, generator=g, dtype=torch.float64).to(dt)
    v = torch.randn(2, 2, n, d, generator=g, dtype=torch.float64).to(dt)
    k[0, :, :, 3] = float("-inf")
    k[1, :, : n // 2, 3] = float("-inf")
    for causal in (True, False):
        out0, lse0, _ = _fwd(q, k, v, n - m, causal, False)
        out1, lse1, _ = _fwd(q, k, v, n - m, causal, True)
        assert torch.isnan(lse0[0]).all() and torch.isposinf(lse1[0]).all() and (out1[0] == 0).all()
        assert torch.isfinite(lse1[1]).all()
        torch.testing.assert_close(out1[1], out0[1], rtol=0, atol=0)
        torch.testing.assert_close(lse1[1], lse0[1], rtol=0, atol=0)
