"""Fused attention with bf16 / fp16 tensors on the CPU, read and written natively.

The kernels widen each tile of q, k, v (and dout) to float32 in registers,
compute exactly what the float32 kernels compute, and round each output once.
So, per ISA (``isa`` fixture):
- out, lse, dq, dk, dv, dtable equal the float32 kernels' results on the
  widened inputs rounded once to the half type (bit for bit: the same float32
  arithmetic, the same round-to-nearest-even as torch's ``.to``), the
  backward given the saved output as it was stored (rounded, as
  FlashAttention's backward reads it);
- against the float64 oracle of the half inputs, each output is within the
  float32 tolerance plus half an ulp of the half type, relative;
- no float32 copy of a tensor is made on the way (dispatch log).
Except bf16 under the avx512bf16 ISA (CPUs with AVX512_BF16): its q . k, q . T and backward dO . V^T are
vdpbf16ps dot products of the stored bf16 pairs (exact products, float32 sums in another order, the scale
applied to the sum), and its forward P V rounds the softmax weights to bf16 first (as GPU kernels do: an
output moves by at most 2^-8 max|v|, tests/tolerances.py), so its results equal the float32 kernels' within
float32 rounding plus that, not bit for bit (``_same``), and meet the float64 oracle with the same tolerance
(``test_bf16_dot_scores_against_float64_oracle``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import reference as ref
from .conftest import ISAS, forced_isa
from .tolerances import grad_atol, pv_atol

torch = pytest.importorskip("torch")
from .dispatch_log import DispatchLog  # noqa: E402  (needs torch)
import wavepe.ops as wo  # noqa: E402

HALF = [torch.bfloat16, torch.float16]
# half an ulp, relative, of round-to-nearest in the type (8 and 11 significant bits)
HALF_ULP = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}

SHAPES = [
    # b, h, h_kv, m, n, d, q_offset (None: KV-cache convention)
    (1, 2, 2, 64, 64, 32, None),
    (2, 4, 2, 77, 300, 40, None),    # GQA, tiles not full, d not a multiple of the vector width x 2
    (1, 1, 1, 250, 250, 17, None),   # d odd: every tail of the widening loads
    (1, 8, 2, 1, 1024, 64, None),    # decoding, 4 query rows per kv head (split-N, wide groups)
    (1, 2, 2, 1, 900, 24, None),     # decoding, one row per kv head (narrow kernels)
    (1, 2, 1, 2, 777, 72, 900),      # narrow, two rows, keys after the queries (not causal)
    (1, 1, 1, 40, 120, 128, -10),    # first queries see no key
]


def _bit_exact(isa, dtype):
    """Whether the half kernels of ``isa`` compute exactly what the float32 kernels compute (all but avx512bf16's
    bf16 dot products and the amx ISA's tile products, which sum exact products in another order)."""
    return not ((isa == "avx512bf16" and dtype == torch.bfloat16) or isa == "amx")


def _same(isa, dtype, actual, expected, msg=None, v=None):
    """actual (a half result) == expected (the float32 kernels' result rounded to the half type) bit for bit where
    _bit_exact, else within float32 rounding and then two roundings to the half type (one ulp apart at most:
    2 half-ulps relative), plus P's rounding for an attention output (v: the values it was made of; pv_atol)."""
    exact = _bit_exact(isa, dtype)
    rtol = 0 if exact else (2 * HALF_ULP[dtype] if actual.dtype == dtype else 1e-5)
    atol = 0 if exact else 1e-5 + (0 if v is None else pv_atol(dtype, v))
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=msg)


def _inputs(b, h, h_kv, m, n, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, m, d, generator=g).to(dtype)
    k = torch.randn(b, h_kv, n, d, generator=g).to(dtype)
    v = torch.randn(b, h_kv, n, d, generator=g).to(dtype)
    dout = torch.randn(b, h, m, d, generator=g).to(dtype)
    return q, k, v, dout


def _bias(pos_enc, d, h, dtype, seed=5):
    """Keyword arguments for wavelet_attention: a learned table in the half type (the kernels take the table in
    q's dtype), ALiBi slopes, or none."""
    if pos_enc == "relative":
        g = torch.Generator().manual_seed(seed)
        return {"rel_table": ((torch.randn(31, d, generator=g) * 0.5).to(dtype), -9)}
    if pos_enc == "alibi":
        return {"alibi_slopes": torch.tensor(ref.alibi_slopes(h), dtype=torch.float32)}
    return {}


def _raw(q, k, v, dout, kw, causal, off, mask, out_saved=None, lse_saved=None, cu_seqlens=None):
    """attention_fwd, then attention_bwd from the saved (out, lse) given (the half run's, widened, for the float32
    run: the backward reads the saved output, as FlashAttention's does, so that is what both must share)."""
    b, h, m, d = q.shape
    n = k.shape[2]
    table, r_lo = kw.get("rel_table", (None, 0))
    if table is not None:
        table = table.to(q.dtype)
    slopes = kw.get("alibi_slopes")
    args = dict(table=table, r_lo=r_lo, clamp=False, slopes=slopes, key_padding_mask=mask, scale=d**-0.5,
                q_offset=n - m if off is None else off, causal=causal, cu_seqlens=cu_seqlens, mark_neg_inf=False)
    out, lse = torch.ops.wavepe.attention_fwd(q, k, v, **args)
    o = out if out_saved is None else out_saved.to(q.dtype)
    ls = lse if lse_saved is None else lse_saved
    grads = torch.ops.wavepe.attention_bwd(dout, None, q, k, v, o, ls, **args, table_grad=table is not None,
                                           slopes_grad=False)
    return out, lse, [grads[0], grads[1], grads[2]] + ([grads[3]] if table is not None else [])


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("pos_enc", ["relative", "alibi", "nope"])
@pytest.mark.parametrize("causal", [True, False])
def test_half_equals_float32_rounded_once(isa, dtype, pos_enc, causal):
    for i, (b, h, h_kv, m, n, d, off) in enumerate(SHAPES):
        q, k, v, dout = _inputs(b, h, h_kv, m, n, d, dtype, seed=100 + i)
        kw = _bias(pos_enc, d, h, dtype)
        mask = None
        if i % 2:
            mask = torch.zeros(b, n, dtype=torch.bool)
            mask[:, 2:9] = True
        out, lse, g = _raw(q, k, v, dout, kw, causal, off, mask)
        out32, lse32, g32 = _raw(q.float(), k.float(), v.float(), dout.float(), kw, causal, off, mask,
                                 out_saved=out, lse_saved=lse)
        what = f"{dtype} {pos_enc} causal={causal} shape {SHAPES[i]}"
        assert out.dtype == dtype and lse.dtype == torch.float32, what
        _same(isa, dtype, out, out32.to(dtype), msg=lambda s: f"out {what}: {s}", v=v)
        _same(isa, dtype, lse, lse32, msg=lambda s: f"lse {what}: {s}")
        for name, a, e in zip(["dq", "dk", "dv", "dtable"], g, g32):
            assert a.dtype == dtype, name
            if _bit_exact(isa, dtype):
                torch.testing.assert_close(a, e.to(dtype), rtol=0, atol=0, msg=lambda s: f"{name} {what}: {s}")
            else:  # gradients sum over up to N terms: the oracle test's gradient tolerance, relative to their scale
                scale = max(1.0, e.abs().max().item())
                torch.testing.assert_close(a.float(), e, rtol=2 * HALF_ULP[dtype],
                                               atol=2e-4 * scale + grad_atol(dtype, scale),
                                           msg=lambda s: f"{name} {what}: {s}")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(HALF), b=st.integers(1, 2), h_kv=st.integers(1, 2), rep=st.integers(1, 4),
       m=st.integers(0, 40), n=st.one_of(st.integers(0, 200), st.integers(500, 2000)),
       d=st.one_of(st.integers(1, 40), st.sampled_from([64, 72, 128])),
       off=st.one_of(st.none(), st.integers(-50, 300)), pos_enc=st.sampled_from(["relative", "alibi", "nope"]),
       causal=st.booleans(), padded=st.booleans(), docs=st.integers(0, 4), seed=st.integers(0, 2**16))
def test_random_shapes_equal_float32_rounded_once(dtype, b, h_kv, rep, m, n, d, off, pos_enc, causal, padded, docs,
                                                  seed):
    # test_half_equals_float32_rounded_once on random shapes, every ISA of this CPU: tails of every width
    # (d from 1), the decoding kernels (m <= 16; narrow ones for <= 4 rows per kv head; keys split in chunks
    # of >= 512 beyond that) and the tiled ones, offsets that leave queries without keys, padding, GQA;
    # forward and backward; docs > 0: packed documents (cu_seqlens, random boundaries per batch row)
    h = h_kv * rep
    q, k, v, dout = _inputs(b, h, h_kv, m, n, d, dtype, seed=seed)
    kw = _bias(pos_enc, d, h, dtype, seed=seed)
    mask = (torch.arange(n)[None, :] % 5 == (torch.arange(b)[:, None] + 1)) if padded else None
    cu = None
    if docs and 0 < m <= n and (off is None or 0 <= off <= n - m):
        gen = torch.Generator().manual_seed(seed)
        inner = torch.sort(torch.randint(0, n + 1, (b, docs - 1), generator=gen), dim=1).values
        cu = torch.cat([torch.zeros(b, 1, dtype=torch.long), inner, torch.full((b, 1), n)], dim=1).to(torch.int32)
    for isa in ISAS:
        with forced_isa(isa):
            out, lse, g = _raw(q, k, v, dout, kw, causal, off, mask, cu_seqlens=cu)
            out32, lse32, g32 = _raw(q.float(), k.float(), v.float(), dout.float(), kw, causal, off, mask,
                                     out_saved=out, lse_saved=lse, cu_seqlens=cu)
            assert out.dtype == dtype and all(a.dtype == dtype for a in g), isa
            _same(isa, dtype, out, out32.to(dtype), msg=lambda s: f"out {isa}: {s}", v=v if v.numel() else None)
            _same(isa, dtype, lse, lse32, msg=lambda s: f"lse {isa}: {s}")
            for name, a, e in zip(["dq", "dk", "dv", "dtable"], g, g32):
                if _bit_exact(isa, dtype):
                    torch.testing.assert_close(a, e.to(dtype), rtol=0, atol=0, msg=lambda s: f"{name} {isa}: {s}")
                else:  # avx512bf16's bf16 dot products: test_half_equals_float32_rounded_once's bound
                    scale = max(1.0, e.abs().max().item()) if e.numel() else 1.0
                    torch.testing.assert_close(a.float(), e, rtol=2 * HALF_ULP[dtype],
                                               atol=2e-4 * scale + grad_atol(dtype, scale),
                                               msg=lambda s: f"{name} {isa}: {s}")


def _public(q, k, v, dout, kw, pos_enc, causal, off):
    """out and the gradients (q, k, v, table) through wavelet_attention and autograd."""
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    extra = []
    if "rel_table" in kw:
        t = kw["rel_table"][0].clone().requires_grad_()
        kw = {"rel_table": (t, kw["rel_table"][1])}
        extra = [t]
    out = wo.wavelet_attention(*leaves, pos_enc=pos_enc, causal=causal, q_offset=off, **kw)
    return out, list(torch.autograd.grad(out, leaves + extra, dout))


def _oracle_grads(q, k, v, dout, out_saved, table, r_lo, slopes, causal, off):
    """float64 autograd through the materialised formula (tests/test_attention.py's torch twin of the oracle),
    for a backward that reads the saved output as stored (rounded to the half type, as FlashAttention's does):
    it forms D = rowsum(dout * out_saved) where the formula has the exact output, which moves dS by
    -P * (D_saved - D): the gradient of -(D_saved - D) * lse.  So the reference is autograd of (out, lse) with
    grad_outputs (dout, D - D_saved); everything else is the formula in float64."""
    from .test_attention import torch_oracle

    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    kw = {}
    if table is not None:
        kw = {"table": table.detach().double().requires_grad_(), "r_lo": r_lo}
    if slopes is not None:
        kw = {"slopes": slopes.double()}
    out, lse = torch_oracle(*leaves, causal=causal, q_offset=off, return_lse=True, **kw)
    d_exact = (dout.double() * out.detach()).sum(-1)
    d_saved = (dout.double() * out_saved.detach().double()).sum(-1)
    wrt = leaves + ([kw["table"]] if table is not None else [])
    return out, torch.autograd.grad((out, lse), wrt, (dout.double(), d_exact - d_saved))


def _check_against_oracle(dtype, pos_enc, seed):
    """out and the gradients of the first four SHAPES (causal) against the float64 oracle: out within e32 + u |x|
    (u half an ulp of the type) + P's rounding where the kernels round it (pv_atol), gradients within u relative
    + 10 e32 of their scale."""
    for i, (b, h, h_kv, m, n, d, off) in enumerate(SHAPES[:4]):
        q, k, v, dout = _inputs(b, h, h_kv, m, n, d, dtype, seed=seed + i)
        kw = _bias(pos_enc, d, h, dtype)
        o = n - m if off is None else off
        out, g = _public(q, k, v, dout, kw, pos_enc, True, off)
        table, r_lo = kw.get("rel_table", (None, 0))
        want, wg = _oracle_grads(q, k, v, dout, out, table, r_lo, kw.get("alibi_slopes"), True, o)
        u, e32 = HALF_ULP[dtype], 2e-5 * math.sqrt(d / 64)
        torch.testing.assert_close(out.double(), want, rtol=u, atol=e32 + pv_atol(dtype, v),
                                   msg=lambda s: f"out {dtype} {pos_enc} {SHAPES[i]}: {s}")
        for name, a, e in zip(["dq", "dk", "dv", "dtable"], g, wg):
            scale = max(1.0, e.abs().max().item())
            torch.testing.assert_close(a.double(), e, rtol=u, atol=10 * e32 * scale + grad_atol(dtype, scale),
                                       msg=lambda s: f"{name} {dtype} {pos_enc} {SHAPES[i]}: {s}")


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("pos_enc", ["relative", "alibi", "nope"])
def test_half_against_float64_oracle(isa, dtype, pos_enc):
    # float32 arithmetic on the half inputs (exact in float64), rounded once: |err| <= e32 + u |x| with u half an
    # ulp of the type and e32 the float32 kernels' own tolerance (tests/test_attention.py: 2e-5 at d = 64 for
    # the forward, 10x that for gradients, which sum over up to N terms), relative to the gradient's scale
    _check_against_oracle(dtype, pos_enc, seed=200)


@pytest.mark.parametrize("dtype", HALF)
def test_wavelet_half_uses_the_table_rounded_to_the_type(isa, dtype):
    # the default wavelet table is built in q's dtype (as on CUDA): the result is the float32 kernel's with that
    # table, rounded once
    q, k, v, _ = _inputs(1, 4, 2, 90, 200, 64, dtype, seed=7)
    out = wo.wavelet_attention(q, k, v)
    from wavepe.ops.attention import position_bias

    table, r_lo, _ = position_bias(q, "wavelet", dtype, 90, 200, 110, True, config=None, rel_table=None,
                                   alibi_slopes=None, clamp=False)
    assert table.dtype == dtype
    want = wo.wavelet_attention(q.float(), k.float(), v.float(), pos_enc="relative",
                                rel_table=(table.float(), r_lo))
    _same(isa, dtype, out, want.to(dtype), v=v)


def test_half_packed_documents_and_strided_inputs(isa):
    # cu_seqlens and q read through transposed strides (a (B, L, H, d) projection) in bf16
    dtype = torch.bfloat16
    b, h, n, d = 1, 4, 260, 32
    g = torch.Generator().manual_seed(3)
    q = torch.randn(b, n, h, d, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(b, 2, n, d, generator=g).to(dtype)
    v = torch.randn(b, 2, n, d, generator=g).to(dtype)
    cu = torch.tensor([0, 17, 17, 90, 91, 260], dtype=torch.int32)
    out = wo.wavelet_attention(q, k, v, pos_enc="alibi", cu_seqlens=cu)
    want = wo.wavelet_attention(q.float(), k.float(), v.float(), pos_enc="alibi", cu_seqlens=cu)
    _same(isa, dtype, out, want.to(dtype), v=v)


@pytest.mark.parametrize("dtype", HALF)
def test_half_attention_makes_no_float32_copy(dtype):
    # the public wrapper hands the half tensors to the kernel as they are: the only ops it dispatches are
    # wavepe's (no _to_copy / copy_ to float32 before or after), forward and backward
    q, k, v, dout = _inputs(1, 4, 2, 33, 80, 64, dtype, seed=1)
    with DispatchLog() as log:
        out = wo.wavelet_attention(q, k, v, pos_enc="nope")
    assert [c[0] for c in log.calls] == ["wavepe.attention_fwd.default"], log.calls
    assert log.calls[0][1] == [dtype, torch.float32]  # out, lse (the accumulator type)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = wo.wavelet_attention(*leaves, pos_enc="nope")
    with DispatchLog() as log:
        torch.autograd.grad(out, leaves, dout)
    kernels = [c for c in log.calls if c[0].startswith("wavepe.")]
    assert [c[0] for c in kernels] == ["wavepe.attention_bwd.default"], log.calls
    assert not any("copy" in c[0] and torch.float32 in c[1] for c in log.calls), log.calls


def test_half_non_finite_inputs_stay_in_their_rows(isa):
    # a NaN in one query row of bf16 input: that row's output is NaN, the others equal the float32 result
    q, k, v, _ = _inputs(1, 2, 2, 50, 50, 16, torch.bfloat16, seed=11)
    q[0, 0, 7, 3] = float("nan")
    out = wo.wavelet_attention(q, k, v, pos_enc="nope")
    assert torch.isnan(out[0, 0, 7]).all()
    want = wo.wavelet_attention(q.float(), k.float(), v.float(), pos_enc="nope").to(torch.bfloat16)
    rows = torch.ones(50, dtype=torch.bool)
    rows[7] = False
    _same(isa, torch.bfloat16, out[0, 0, rows], want[0, 0, rows], v=v)
    _same(isa, torch.bfloat16, out[0, 1], want[0, 1], v=v)
    assert not torch.isnan(out[0, 0, rows]).any() and not torch.isnan(out[0, 1]).any()


@pytest.mark.parametrize("pos_enc", ["relative", "alibi", "nope"])
def test_bf16_dot_scores_against_float64_oracle(isa, pos_enc):
    # avx512bf16 and amx (AVX512_BF16 CPUs only; skipped elsewhere: on other CPUs `make ctest-simde` runs these kernels
    # through SIMDe): the bf16 scores are sums of exact bf16 products, |error| <= (d + 3) 2^-24 scale
    # sum_c |q_c k_c| (d rounded additions) against the float32 path's (d + 2) 2^-24 ..., so the float32
    # kernels' tolerance holds, and P V from P rounded to bf16 adds at most 2^-8 max|v| to out (pv_atol):
    # out within e32 + half an ulp relative + that, gradients within 10 e32 of their scale
    # (test_half_against_float64_oracle; the backward recomputes P in float32)
    if isa not in ("avx512bf16", "amx"):
        pytest.skip("the vdpbf16ps kernels run on the avx512bf16 and amx ISAs only (a CPU with AVX512_BF16)")
    _check_against_oracle(torch.bfloat16, pos_enc, seed=300)  # tiled (d odd among them), split-N decoding
