"""Packed sequences (``cu_seqlens``) in the fused attention: a packed row is each document alone.

Every kernel variant (``isa`` fixture) against the float64 oracle of tests/reference.py run
on each document by itself: outputs, lse and the gradients (q, k, v, a learned table, ALiBi
slopes), every pos_enc, causal and not, GQA, several rows with their own boundaries, empty
and one-token documents; garbage in another document changes nothing; the checks, opcheck,
torch.compile and the plain-PyTorch path.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import reference as ref

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe.ops.attention import _plain_attention  # noqa: E402

from .test_attention import learned_table, oracle_table, wavelet_config  # noqa: E402

POS_ENCS = ["wavelet", "relative", "alibi", "nope"]
# documents per row: an empty one, one token, some longer than a tile (128 keys, 192 query rows)
LENGTHS = [[5, 0, 37, 1, 230, 13, 90], [180, 1, 0, 7, 188, 0, 0]]  # trailing empty: padding of cu


def boundaries(lengths: list[int]) -> list[int]:
    return [0, *np.cumsum(lengths).tolist()]


def packed_inputs(b: int, h: int, h_kv: int, t: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h_kv, t, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h_kv, t, d, generator=g, dtype=torch.float64)
    return q, k, v


def bias_kwargs(pos_enc: str, d: int, h: int, t: int, clamp: bool = False):
    """(kwargs for wavelet_attention, kwargs for the oracle of one document of length <= t)."""
    if pos_enc == "wavelet":
        cfg = wavelet_config(d)
        table, r_lo = oracle_table(cfg, t, t, 0)
        return {"config": cfg}, {"table": table, "r_lo": r_lo}
    if pos_enc == "relative":
        table, r_lo = learned_table(d)
        return ({"rel_table": (table.clone().requires_grad_(), r_lo), "clamp": clamp},
                {"table": table.numpy(), "r_lo": r_lo, "clamp": clamp})
    if pos_enc == "alibi":
        slopes = torch.tensor(ref.alibi_slopes(h), dtype=torch.float64)
        return {"alibi_slopes": slopes.clone().requires_grad_()}, {"slopes": slopes.numpy()}
    return {}, {}


def oracle_doc(q, k, v, go, causal, pos_enc, okw, q_offset=0):
    """Forward and gradients of one document alone, float64 (tests/reference.py)."""
    pe = "none" if pos_enc == "nope" else pos_enc
    return ref.attention_with_grads(q.numpy(), k.numpy(), v.numpy(), go.numpy(), 1 / np.sqrt(q.shape[-1]),
                                    q_offset, causal, pe, **okw)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("causal", [True, False])
def test_packed_rows_equal_each_document_alone(isa, pos_enc, causal):
    b, h, h_kv, d = 2, 4, 2, 16
    t = sum(LENGTHS[0])
    assert sum(LENGTHS[1]) == t
    q, k, v = packed_inputs(b, h, h_kv, t, d, seed=3)
    cu = torch.tensor([boundaries(x) for x in LENGTHS], dtype=torch.int64)
    kw, okw = bias_kwargs(pos_enc, d, h, t, clamp=pos_enc == "relative")
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse = wo.wavelet_attention(*leaves, pos_enc=pos_enc, causal=causal, cu_seqlens=cu, return_lse=True, **kw)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=out.dtype)  # the same for every ISA
    params = [kw["rel_table"][0]] if pos_enc == "relative" else [kw["alibi_slopes"]] if pos_enc == "alibi" else []
    grads = torch.autograd.grad(out, leaves + params, go)
    dparam_want = 0.0
    for row in range(b):
        bounds = boundaries(LENGTHS[row])
        for s, e in zip(bounds[:-1], bounds[1:]):
            if e == s:
                continue
            sl = (slice(row, row + 1), slice(None), slice(s, e))
            want = oracle_doc(q[sl], k[sl], v[sl], go[sl], causal, pos_enc, okw)
            np.testing.assert_allclose(out[sl].detach().numpy(), want["out"], rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(lse[sl].detach().numpy(), want["lse"], rtol=1e-9, atol=1e-9)
            for got, name in zip(grads[:3], ("dq", "dk", "dv")):
                np.testing.assert_allclose(got[sl].numpy(), want[name], rtol=1e-9, atol=1e-9, err_msg=name)
            if params:
                dparam_want = dparam_want + (want["dtable"] if pos_enc == "relative" else want["dslopes"])
    if params:  # the table / slopes gradient sums every document's share
        np.testing.assert_allclose(grads[3].numpy(), dparam_want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("causal", [True, False])
def test_garbage_in_another_document_changes_nothing(isa, causal):
    """The non-finite contract: keys (and queries) of another document are masked by selection."""
    h, h_kv, d = 2, 1, 16
    lengths = [150, 70, 200]
    cu = torch.tensor(boundaries(lengths), dtype=torch.int32)
    q, k, v = packed_inputs(1, h, h_kv, sum(lengths), d, seed=5)
    cfg = wavelet_config(d)

    def run(q, k, v):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = wo.wavelet_attention(*leaves, config=cfg, causal=causal, cu_seqlens=cu)
        grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
        return out.detach(), grads

    clean = run(q, k, v)
    bad = [x.clone() for x in (q, k, v)]
    for x in bad:  # documents 0 and 2 hold NaN and inf; document 1 is [150, 220)
        x[..., 3:9, :] = float("nan")
        x[..., 220:, :5] = float("inf")
    dirty = run(*bad)
    sl = (slice(None), slice(None), slice(150, 220))
    torch.testing.assert_close(dirty[0][sl], clean[0][sl], rtol=0, atol=0)
    for got, want in zip(dirty[1], clean[1]):
        torch.testing.assert_close(got[sl], want[sl], rtol=0, atol=0)


@pytest.mark.parametrize("m", [1, 3, 120])
def test_queries_of_a_packed_cache(isa, m):
    """q_offset + M <= N: a chunk of queries (decoding, chunked prefill) against a packed row."""
    h, h_kv, d = 4, 2, 16
    lengths = [100, 260, 64]
    n = sum(lengths)
    cu = torch.tensor(boundaries(lengths), dtype=torch.int32)
    q, k, v = packed_inputs(1, h, h_kv, n, d, seed=7)
    off = n - m - 30 if m < 100 else 140
    qc = q[:, :, off:off + m]
    kw, okw = bias_kwargs("wavelet", d, h, n)
    out = wo.wavelet_attention(qc, k, v, q_offset=off, cu_seqlens=cu, **kw)
    for i in range(m):
        pos = off + i
        doc = max(j for j in range(len(lengths)) if cu[j] <= pos)
        s, e = int(cu[doc]), int(cu[doc + 1])
        want = oracle_doc(qc[:, :, i:i + 1], k[:, :, s:e], v[:, :, s:e], torch.zeros(1, h, 1, d), True, "wavelet",
                          okw, q_offset=pos - s)
        np.testing.assert_allclose(out[:, :, i:i + 1].numpy(), want["out"], rtol=1e-9, atol=1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(0, 90), min_size=1, max_size=6), causal=st.booleans(),
       pos_enc=st.sampled_from(POS_ENCS), f64=st.booleans(), rep=st.sampled_from([1, 3]))
def test_random_documents_equal_running_them_one_by_one(lengths, causal, pos_enc, f64, rep):
    t = sum(lengths)
    if t == 0:
        return
    dtype = torch.float64 if f64 else torch.float32
    q, k, v = (x.to(dtype) for x in packed_inputs(1, 2 * rep, 2, t, 8, seed=t))
    cu = torch.tensor(boundaries(lengths), dtype=torch.int64)
    kw = {"rel_table": (learned_table(8, dtype)[0], -7)} if pos_enc == "relative" else {}
    out = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, cu_seqlens=cu, **kw)
    tol = 1e-12 if f64 else 1e-5
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if e > s:
            alone = wo.wavelet_attention(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], pos_enc=pos_enc, causal=causal,
                                         **kw)
            torch.testing.assert_close(out[:, :, s:e], alone, rtol=tol, atol=tol)


def test_plain_pytorch_path_agrees():
    """The path of devices without a kernel (a (B, 1, M, N) document mask) gives the kernel's result."""
    h, d = 2, 8
    lengths = [30, 0, 1, 50]
    cu = torch.tensor(boundaries(lengths), dtype=torch.int32)
    q, k, v = packed_inputs(1, h, 1, sum(lengths), d, seed=9)
    table, r_lo = learned_table(d)
    for causal in (True, False):
        want = wo.wavelet_attention(q, k, v, pos_enc="relative", rel_table=(table, r_lo), causal=causal,
                                    cu_seqlens=cu)
        got = _plain_attention(q, k, v, table, r_lo, False, None, None, 1 / np.sqrt(d), 0, causal, cu)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_a_tile_of_a_longer_packed_row(isa, causal):
    """The ops take boundaries past their keys (documents that continue beyond them): a tile of a longer
    packed row -- keys [ks, ke), queries [qs, qe) -- passes the row's boundaries shifted by ks."""
    h, d = 2, 8
    lengths = [40, 0, 90, 1, 70]
    cu = torch.tensor(boundaries(lengths), dtype=torch.int32)
    q, k, v = packed_inputs(1, h, 1, sum(lengths), d, seed=13)
    table, r_lo = learned_table(d)
    for (qs, qe), (ks, ke) in (((100, 201), (20, 110)), ((0, 60), (35, 150)), ((130, 201), (130, 201))):
        shifted = cu - ks
        args = dict(table=table, r_lo=r_lo, clamp=False, slopes=None, key_padding_mask=None, scale=0.4,
                    q_offset=qs - ks, causal=causal, mark_neg_inf=False)
        qt, kt, vt = q[:, :, qs:qe], k[:, :, ks:ke], v[:, :, ks:ke]
        out, lse = torch.ops.wavepe.attention_fwd(q=qt, k=kt, v=vt, cu_seqlens=shifted, **args)
        want, want_lse = _plain_attention(qt, kt, vt, table, r_lo, False, None, None, 0.4, qs - ks, causal,
                                          shifted, return_lse=True)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)
        if qs == 100:  # queries 130 .. 200: documents with no key in the tile
            assert torch.isneginf(lse[..., 30:]).all() and not torch.isneginf(lse[..., :30]).any()


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_tiles_of_a_packed_row_sum_to_its_gradients(isa, causal, packed):
    """The backward of tiles of a packed row (the global out and lse, boundaries shifted by each tile's first
    key; queries outside the tile's keys, documents past them) sums to the whole row's: what
    wavepe.distributed's ring does.  A key block's query range must come from the documents as they are, not
    clamped to the tile's keys.  Unpacked too: non-causal tiles whose queries all precede their keys
    (q_offset <= -M) see every key."""
    h, d = 2, 8
    lengths = [40, 0, 90, 1, 70]
    cu = torch.tensor(boundaries(lengths), dtype=torch.int32) if packed else None
    t = sum(lengths)
    q, k, v = packed_inputs(1, h, 1, t, d, seed=17)
    table, r_lo = learned_table(d)
    args = dict(table=table, r_lo=r_lo, clamp=False, slopes=None, key_padding_mask=None, scale=0.4, causal=causal,
                mark_neg_inf=False, table_grad=True, slopes_grad=False)
    out, lse = torch.ops.wavepe.attention_fwd(q=q, k=k, v=v, cu_seqlens=cu, q_offset=0,
                                              **{n: args[n] for n in ("table", "r_lo", "clamp", "slopes",
                                                                      "key_padding_mask", "scale", "causal",
                                                                      "mark_neg_inf")})
    g = torch.Generator().manual_seed(3)
    go = torch.randn(out.shape, generator=g, dtype=out.dtype)
    gl = torch.randn(lse.shape, generator=g, dtype=lse.dtype)
    want = torch.ops.wavepe.attention_bwd(grad_out=go, grad_lse=gl, q=q, k=k, v=v, out=out, lse=lse, q_offset=0,
                                          cu_seqlens=cu, **args)
    got = [torch.zeros_like(x) for x in want[:4]]
    cuts = [0, 37, 101, 150, t]
    for qs, qe in zip(cuts, cuts[1:]):
        for ks, ke in zip(cuts, cuts[1:]):
            part = torch.ops.wavepe.attention_bwd(
                grad_out=go[:, :, qs:qe], grad_lse=gl[:, :, qs:qe], q=q[:, :, qs:qe], k=k[:, :, ks:ke],
                v=v[:, :, ks:ke], out=out[:, :, qs:qe], lse=lse[:, :, qs:qe], q_offset=qs - ks,
                cu_seqlens=None if cu is None else cu - ks,
                **args)
            got[0][:, :, qs:qe] += part[0]
            got[1][:, :, ks:ke] += part[1]
            got[2][:, :, ks:ke] += part[2]
            got[3] += part[3]
    for name, a, e in zip(("dq", "dk", "dv", "dtable"), got, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=lambda s: f"{name}: {s}")


def test_opcheck_and_compile():
    q, k, v = packed_inputs(1, 4, 2, 40, 8, seed=11)
    table, r_lo = learned_table(8)
    cu = torch.tensor([0, 10, 10, 33, 40], dtype=torch.int32)
    args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), table.requires_grad_(), None, None, cu,
            0.3, 0, True, r_lo, False, False)
    torch.library.opcheck(torch.ops.wavepe.attention_fwd, args)
    out, lse = torch.ops.wavepe.attention_fwd(*args)
    bargs = (torch.randn_like(out), torch.randn_like(lse), q.detach(), k.detach(), v.detach(), out.detach(),
             lse.detach(), table.detach(), None, None, cu, True, False, 0.3, 0, True, r_lo, False, False)
    torch.library.opcheck(torch.ops.wavepe.attention_bwd, bargs)

    @torch.compile(fullgraph=True, backend="eager")
    def f(q, k, v, cu):
        return wo.wavelet_attention(q, k, v, cu_seqlens=cu) * 2

    x = [t.detach().float() for t in (q, k, v)]
    torch.testing.assert_close(f(*x, cu), wo.wavelet_attention(*x, cu_seqlens=cu) * 2)


def _call(cu, m=12, n=12, q_offset=None, b=1):
    q, k, v = packed_inputs(b, 2, 2, n, 8)
    return wo.wavelet_attention(q[:, :, :m], k, v, cu_seqlens=cu, q_offset=q_offset)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: _call(torch.tensor([0.0, 12.0])), TypeError, r"cu_seqlens must be an int32 or int64 tensor"),
        (lambda: _call(torch.tensor([[0, 12]]), b=2), ValueError, r"cu_seqlens must be \(n_docs \+ 1,\).*B=2"),
        (lambda: _call(torch.tensor([12])), ValueError, r"at least 2 boundaries, got shape \(1,\)"),
        (lambda: _call(torch.tensor([0, 5, 3, 12])), ValueError,
         r"cu_seqlens of batch row 0 must not decrease, got cu_seqlens\[2\]=3 after 5"),
        (lambda: _call(torch.tensor([1, 12])), ValueError, r"must start at 0 and end at k_len=12, got 1 \.\.\. 12"),
        (lambda: _call(torch.tensor([0, 5, 11])), ValueError, r"end at k_len=12, got 0 \.\.\. 11"),
        (lambda: _call(torch.tensor([0, 12]), m=4, q_offset=10), ValueError,
         r"q_offset \+ q_len = 10 \+ 4 > k_len = 12"),
        (lambda: torch.ops.wavepe.attention_fwd(*packed_inputs(1, 2, 2, 6, 8), None, None, None,
                                                torch.tensor([0, 7, 6]), 0.3, 0, True, 0, False, False), ValueError,
         r"must not decrease"),
        (lambda: torch.ops.wavepe.attention_fwd(*packed_inputs(1, 2, 2, 6, 8), None, None, None,
                                                torch.tensor([0.0, 6.0]), 0.3, 0, True, 0, False, False), ValueError,
         r"cu_seqlens must be an int32 or int64 tensor, got torch.float32"),
    ],
)
def test_bad_boundaries_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
