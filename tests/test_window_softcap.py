"""Sliding windows and logit soft-capping in the fused attention (wavelet_attention(window=, softcap=)).

Forward and gradients against the float64 oracle (tests/reference.py: every score materialised, the window
as a mask |r| >= window, the cap as softcap * tanh(s / softcap) with its 1 - tanh^2 in every gradient) on
every kernel variant (``isa``), combined with causality, GQA, padding, packed documents, q_offset,
decoding and every position encoding; hypothesis over shapes; opcheck, gradcheck, torch.compile; the
plain-PyTorch path; errors naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import reference as ref
from .test_attention import POS_ENCS, case_kwargs, make_inputs, tol

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe.ops.attention import _plain_attention  # noqa: E402

# b, h, h_kv, m, n, d, q_offset (None: the last keys), window, softcap
SHAPES = [
    (1, 2, 1, 300, 300, 32, None, 37, 0.0),     # training: many key blocks outside every row's window
    (1, 4, 2, 500, 500, 64, None, 128, 0.0),    # several forward query blocks, GQA
    (2, 2, 2, 100, 300, 16, 200, 50, 0.0),      # queries in the middle of the keys
    (1, 4, 2, 1, 2000, 32, None, 64, 0.0),      # decoding: only the window's chunks are run
    (1, 8, 2, 3, 1500, 16, None, 200, 0.0),     # decoding several tokens, 12 rows per kv head
    (1, 2, 2, 64, 64, 16, None, 0, 2.0),        # soft-cap only
    (1, 2, 1, 200, 400, 32, 200, 0, 0.7),       # a cap that bites hard
    (1, 4, 2, 333, 333, 64, None, 100, 1.5),    # both
    (1, 2, 1, 1, 700, 16, None, 40, 1.0),       # decoding with both
    (1, 1, 1, 50, 80, 8, -10, 1, 0.0),          # a window of one: each query sees itself
]


def _run(isa, pos_enc, causal, shape, dtype=torch.float64, mask=None, cu=None):
    b, h, h_kv, m, n, d, off, window, cap = shape
    q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=m + n + window)
    o = n - m if off is None else off
    kw, okw = case_kwargs(pos_enc, d, h, dtype, m, n, o)
    got = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, q_offset=off, window=window, softcap=cap,
                               key_padding_mask=mask, cu_seqlens=cu, **kw)
    return q, k, v, o, kw, okw, got


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("causal", [True, False])
def test_forward_matches_oracle(isa, pos_enc, causal):
    for shape in SHAPES:
        for dtype in (torch.float32, torch.float64):
            q, k, v, o, kw, okw, got = _run(isa, pos_enc, causal, shape, dtype)
            want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal,
                                 q_offset=o, window=shape[7], softcap=shape[8], **okw)
            rtol, atol = tol(dtype, shape[5])
            np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol, atol=atol,
                                       err_msg=f"{pos_enc} causal={causal} {shape} {dtype}")


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_gradients_match_oracle(isa, pos_enc):
    for shape in [(1, 4, 2, 150, 300, 16, 150, 40, 0.0), (1, 2, 1, 100, 100, 16, None, 0, 1.2),
                  (2, 2, 2, 90, 90, 8, None, 25, 0.9), (1, 4, 2, 2, 400, 16, None, 50, 1.1)]:
        for causal in (True, False):
            b, h, h_kv, m, n, d, off, window, cap = shape
            q, k, v = make_inputs(b, h, h_kv, m, n, d, torch.float64, seed=m * 3 + window)
            o = n - m if off is None else off
            kw, okw = case_kwargs(pos_enc, d, h, torch.float64, m, n, o)
            leaves = [q.requires_grad_(), k.requires_grad_(), v.requires_grad_()]
            extra = {"relative": lambda: [kw["rel_table"][0].requires_grad_()],
                     "alibi": lambda: [kw["alibi_slopes"].requires_grad_()]}.get(pos_enc, lambda: [])()
            out, lse = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, q_offset=off, window=window,
                                            softcap=cap, return_lse=True, **kw)
            g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
            gl = torch.randn(lse.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
            seen = torch.isfinite(lse)
            grads = torch.autograd.grad((out * g).sum() + (lse.where(seen, 0) * gl).sum(), leaves + extra)
            ref_kw = {"relative": "relative", "wavelet": "wavelet"}.get(pos_enc, pos_enc)
            want = ref.attention_with_grads(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), g.numpy(),
                                            d ** -0.5, o, causal, ref_kw if ref_kw != "nope" else "none",
                                            grad_lse=np.where(seen.numpy(), gl.numpy(), 0.0), window=window,
                                            softcap=cap, **okw)
            np.testing.assert_allclose(out.detach().numpy(), want["out"], rtol=1e-10, atol=1e-10)
            names = ["dq", "dk", "dv"] + {"relative": ["dtable"], "alibi": ["dslopes"]}.get(pos_enc, [])
            for name, got in zip(names, grads):
                np.testing.assert_allclose(got.numpy(), want[name], rtol=1e-9, atol=1e-9,
                                           err_msg=f"{name} {pos_enc} causal={causal} {shape}")


def test_window_with_padding_and_documents(isa):
    b, h, n, d = 2, 2, 257, 16
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, :30] = True
    mask[1, 200:] = True
    cu = torch.tensor([[0, 40, 40, 150, 257], [0, 1, 100, 256, 257]])
    for pos_enc in POS_ENCS:
        for kpm, docs in ((mask, None), (None, cu), (mask, cu)):
            shape = (b, h, h, n, n, d, None, 45, 1.3)
            q, k, v, o, kw, okw, got = _run(isa, pos_enc, True, shape, torch.float64, kpm, docs)
            # the oracle: the documents as a key mask per query (the bias counts distances inside them)
            want = np.zeros(q.shape)
            for bi in range(b):
                for lo, hi in (zip(cu[bi, :-1].tolist(), cu[bi, 1:].tolist()) if docs is not None else [(0, n)]):
                    if hi <= lo:
                        continue
                    okw2 = case_kwargs(pos_enc, d, h, torch.float64, hi - lo, hi - lo, 0)[1]
                    want[bi:bi + 1, :, lo:hi] = ref.attention(
                        q[bi:bi + 1, :, lo:hi].numpy(), k[bi:bi + 1, :, lo:hi].numpy(), v[bi:bi + 1, :, lo:hi].numpy(),
                        q_offset=0, window=45, softcap=1.3,
                        key_padding_mask=None if kpm is None else kpm[bi:bi + 1, lo:hi].numpy(), **okw2)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10, err_msg=pos_enc)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 2), h_kv=st.integers(1, 2), rep=st.integers(1, 3), m=st.integers(0, 40),
       n=st.integers(0, 300), d=st.integers(1, 40), off=st.one_of(st.none(), st.integers(-50, 400)),
       pos_enc=st.sampled_from(POS_ENCS), causal=st.booleans(), window=st.integers(0, 120),
       cap=st.sampled_from([0.0, 0.5, 3.0, 50.0]), f64=st.booleans())
def test_random_shapes_against_oracle(b, h_kv, rep, m, n, d, off, pos_enc, causal, window, cap, f64):
    dtype = torch.float64 if f64 else torch.float32
    h = h_kv * rep
    q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=d + 7 * n + window)
    o = n - m if off is None else off
    kw, okw = case_kwargs(pos_enc, d, h, dtype, m, n, o)
    got = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, q_offset=off, window=window, softcap=cap,
                               **kw)
    want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal, q_offset=o,
                         window=window, softcap=cap, **okw)
    rtol, atol = tol(dtype, max(d, 64))
    if pos_enc == "alibi" and dtype == torch.float32 and m and n:  # as in test_attention's random shapes
        pos = o + np.arange(m)
        nearest = np.where(pos > n - 1, pos - (n - 1), np.where(pos < 0, -pos, 0)).max()
        atol += 8 * np.finfo(np.float32).eps * float(np.max(okw["slopes"])) * nearest * float(v.abs().max())
    np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol, atol=atol)


def test_half_types_against_the_oracle_of_their_inputs(isa):
    for dtype in (torch.bfloat16, torch.float16):
        for shape in [(1, 4, 2, 300, 300, 64, None, 64, 0.0), (1, 2, 1, 100, 300, 32, 200, 0, 1.5),
                      (1, 4, 2, 1, 900, 32, None, 100, 2.0)]:
            q, k, v, o, kw, okw, got = _run(isa, "wavelet", True, shape, dtype)
            assert got.dtype == dtype
            t = okw["table"]
            want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), table=t, r_lo=okw["r_lo"],
                                 q_offset=o, window=shape[7], softcap=shape[8])
            # float32 arithmetic on the half inputs, one rounding of out (and P rounded for P V under avx512bf16)
            np.testing.assert_allclose(got.double().numpy(), want, rtol=2e-2, atol=2e-2, err_msg=str(dtype))


def test_half_gradients_against_the_oracle_of_their_inputs(isa):
    """bf16 / fp16 gradients with windows and caps (the amx ISA's bf16 backward accumulates on tiles with P and dS
    rounded to bf16: tests/tolerances.py) against the float64 oracle of the half inputs."""
    for dtype in (torch.bfloat16, torch.float16):
        for shape in [(1, 4, 2, 300, 300, 64, None, 64, 0.0), (1, 2, 1, 100, 300, 32, 200, 0, 1.5),
                      (1, 4, 2, 200, 200, 32, None, 100, 2.0)]:
            b, h, h_kv, m, n, d, off, window, cap = shape
            q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=m + window)
            o = n - m if off is None else off
            kw, okw = case_kwargs("wavelet", d, h, dtype, m, n, o)
            g = torch.randn(b, h, m, d, generator=torch.Generator().manual_seed(5)).to(dtype)
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            out = wo.wavelet_attention(*leaves, pos_enc="wavelet", q_offset=off, window=window, softcap=cap, **kw)
            got = torch.autograd.grad((out * g).sum(), leaves)
            want = ref.attention_with_grads(q.double().numpy(), k.double().numpy(), v.double().numpy(),
                                            g.double().numpy(), d ** -0.5, o, True, "wavelet", window=window,
                                            softcap=cap, **okw)
            for name, a in zip(["dq", "dk", "dv"], got):
                e = want[name]
                scale = max(1.0, float(np.abs(e).max()))
                np.testing.assert_allclose(a.double().numpy(), e, rtol=2.0**-6, atol=2.0**-6 * scale,
                                           err_msg=f"{name} {dtype} {shape}")


def test_plain_path_matches_oracle():
    # the plain-PyTorch formulation (devices without a kernel; the benchmarks' baseline)
    q, k, v = make_inputs(1, 4, 2, 60, 90, 16, seed=3)
    for window, cap, causal in ((20, 0.0, True), (0, 1.5, True), (15, 0.8, False)):
        for return_lse in (False, True):
            got = _plain_attention(q, k, v, None, 0, False, torch.tensor(ref.alibi_slopes(4)), None, 0.25, 30, causal,
                                   window=window, softcap=cap, return_lse=return_lse)
            want = ref.attention(q.numpy(), k.numpy(), v.numpy(), slopes=ref.alibi_slopes(4), causal=causal, scale=0.25,
                                 q_offset=30, window=window, softcap=cap)
            np.testing.assert_allclose((got[0] if return_lse else got).numpy(), want, rtol=1e-10, atol=1e-10)


def test_no_window_and_no_cap_are_the_plain_op():
    q, k, v = make_inputs(1, 2, 2, 50, 50, 16, seed=8)
    base = wo.wavelet_attention(q, k, v)
    for window, cap in ((None, None), (0, 0.0), (50, None), (10**6, None)):  # a window wider than every distance
        assert torch.equal(wo.wavelet_attention(q, k, v, window=window, softcap=cap), base)


def test_gradcheck_and_opcheck():
    q, k, v = make_inputs(1, 2, 1, 9, 12, 4, seed=2)
    t = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    torch.autograd.gradcheck(lambda q, k, v, t: wo.wavelet_attention(
        q, k, v, pos_enc="relative", rel_table=(t, -3), window=4, softcap=0.8, q_offset=3), (*leaves, t))
    args = (q.detach(), k.detach(), v.detach(), t.detach(), None, None, None)
    torch.library.opcheck(torch.ops.wavepe.attention_fwd.default, args,
                          dict(scale=0.5, q_offset=3, causal=True, r_lo=-3, window=4, softcap=0.8))


def test_compiled_equals_eager():
    q, k, v = make_inputs(1, 4, 2, 40, 40, 16, torch.float32, seed=5)

    def f(q, k, v):
        return wo.wavelet_attention(q, k, v, window=9, softcap=2.0)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(got, f(q, k, v), rtol=0, atol=0)


def test_bad_arguments_name_themselves():
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, seed=1)
    for bad in (-1, 2**61):
        with pytest.raises(ValueError, match=rf"^window .*got {bad}$"):
            wo.wavelet_attention(q, k, v, window=bad)
    with pytest.raises(TypeError, match="window"):
        wo.wavelet_attention(q, k, v, window=2.5)
    for bad, says in ((-1.0, "got -1.0"), (float("inf"), "finite, got inf"), (float("nan"), "NaN")):
        with pytest.raises(ValueError, match=rf"^softcap .*{says}"):
            wo.wavelet_attention(q, k, v, softcap=bad)
    # the raw op checks them too (the core's rule)
    with pytest.raises(ValueError, match="window must be in"):
        torch.ops.wavepe.attention_fwd(q, k, v, None, None, None, None, window=-2)
    with pytest.raises(ValueError, match="softcap must be finite"):
        torch.ops.wavepe.attention_fwd(q, k, v, None, None, None, None, softcap=float("nan"))
