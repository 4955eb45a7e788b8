"""Fused attention with a position bias (wavepe.ops.wavelet_attention) on the CPU.

Forward against the float64 oracle (tests/reference.py, every score
materialised), gradients against autograd through a torch twin of the oracle,
every kernel variant (``isa`` fixture), opcheck, gradcheck, hypothesis over
shapes and offsets, determinism, errors, and peak memory.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wavepe import WaveletConfig

from . import reference as ref

torch = pytest.importorskip("torch")
import wavepe.ops as wo  # noqa: E402
from wavepe.ops.attention import _plain_attention  # noqa: E402

POS_ENCS = ["wavelet", "relative", "alibi", "nope"]


# ---- inputs and oracles ---------------------------------------------------------

def make_inputs(b, h, h_kv, m, n, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, m, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(b, h_kv, n, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(b, h_kv, n, d, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def wavelet_config(d: int) -> WaveletConfig:
    """The paper's grid when d allows it, else a small custom grid (d not a multiple of 8)."""
    if d % 8 == 0:
        return WaveletConfig.grid(d)
    scales = [2.0 ** (j % 3) for j in range(d)]
    shifts = [float(j // 3) for j in range(d)]
    return WaveletConfig("ricker", scales, shifts)


def oracle_table(cfg: WaveletConfig, m: int, n: int, off: int):
    """The wavelet table straight from the formula over every distance the problem has."""
    r_lo = off - (n - 1)
    r = np.arange(r_lo, off + m)
    return ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r, cfg.normalize), r_lo


def learned_table(d: int, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(23, d, generator=g, dtype=torch.float64).to(dtype) * 0.5, -7


def case_kwargs(pos_enc, d, h, dtype, m, n, off, clamp=False):
    """(kwargs for wavelet_attention, kwargs for the oracle)."""
    if pos_enc == "wavelet":
        cfg = wavelet_config(d)
        t, r_lo = oracle_table(cfg, m, n, off)
        return {"config": cfg}, {"table": t, "r_lo": r_lo}
    if pos_enc == "relative":
        t, r_lo = learned_table(d, dtype)
        return {"rel_table": (t, r_lo), "clamp": clamp}, {"table": t.double().numpy(), "r_lo": r_lo, "clamp": clamp}
    if pos_enc == "alibi":
        slopes = torch.tensor(ref.alibi_slopes(h), dtype=dtype)
        return {"alibi_slopes": slopes}, {"slopes": slopes.double().numpy()}
    return {}, {}


def tol(dtype, d=64):
    # fp32: rounding of d-term dot products and of the exp, relative to O(1) outputs
    return (1e-10, 1e-10) if dtype == torch.float64 else (2e-5 * math.sqrt(d / 64), 2e-5 * math.sqrt(d / 64))


def torch_oracle(q, k, v, *, table=None, r_lo=0, clamp=False, slopes=None, causal=True, scale=None, q_offset=None,
                 key_padding_mask=None, return_lse=False):
    """tests/reference.attention in torch float64, for autograd (same formula, materialised)."""
    b, h, m, d = q.shape
    n = k.shape[2]
    rep = h // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    off = n - m if q_offset is None else q_offset
    r = (off + torch.arange(m))[:, None] - torch.arange(n)[None, :]
    s = q @ k.transpose(-1, -2)
    if table is not None:
        rows = table.shape[0]
        idx = r - r_lo
        inside = (idx >= 0) & (idx < rows)
        if clamp:
            inside = torch.ones_like(inside)
        g = q @ table.transpose(0, 1)
        picked = torch.gather(g, -1, idx.clamp(0, rows - 1).expand(b, h, m, n))
        s = s + torch.where(inside, picked, torch.zeros_like(picked))
    s = s * scale
    if slopes is not None:
        s = s - slopes[None, :, None, None] * r.abs().to(s.dtype)
    masked = torch.zeros((b, 1, m, n), dtype=torch.bool)
    if causal:
        masked = masked | (r < 0)
    if key_padding_mask is not None:
        masked = masked | key_padding_mask[:, None, None, :]
    s = s.masked_fill(masked, float("-inf"))
    empty = masked.all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(empty, 0.0), dim=-1)
    out = (p @ v).masked_fill(empty, 0.0)
    if return_lse:
        return out, torch.logsumexp(s.masked_fill(empty, 0.0), -1).masked_fill(empty.squeeze(-1), float("-inf"))
    return out


# ---- forward against the oracle -------------------------------------------------------

FORWARD_SHAPES = [
    # b, h, h_kv, m, n, d, q_offset (None: KV-cache convention)
    (1, 2, 2, 64, 64, 32, None),
    (1, 4, 2, 7, 200, 64, None),       # GQA, a few queries
    (2, 2, 1, 333, 333, 128, None),    # lengths not multiples of the tiles
    (1, 1, 1, 800, 800, 32, None),     # several forward query blocks on every ISA (AVX-512 f32: 384 rows)
    (1, 2, 2, 1, 1024, 64, None),      # decoding against 1024 keys
    (1, 2, 1, 333, 1024, 32, 500),     # queries in the middle: keys after them masked
    (1, 1, 1, 64, 300, 128, -40),      # first queries see no key
    (1, 1, 1, 20, 50, 256, None),      # wide heads
    (1, 2, 2, 13, 40, 1, None),        # d = 1
]


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("causal", [True, False])
def test_forward_matches_oracle(isa, pos_enc, causal):
    for b, h, h_kv, m, n, d, off in FORWARD_SHAPES:
        for dtype in (torch.float32, torch.float64):
            q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=m + n)
            o = n - m if off is None else off
            kw, okw = case_kwargs(pos_enc, d, h, dtype, m, n, o)
            got = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, q_offset=off, **kw)
            assert got.shape == q.shape and got.dtype == dtype
            want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal,
                                 q_offset=o, **okw)
            rtol, atol = tol(dtype, d)
            np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol, atol=atol,
                                       err_msg=f"{pos_enc} causal={causal} shape={(b, h, h_kv, m, n, d, off)} {dtype}")


@pytest.mark.parametrize("clamp", [False, True])
def test_relative_table_clamp_and_far_offsets(isa, clamp):
    # distances far outside the table: zero rows (clamp=False) or edge rows (clamp=True)
    q, k, v = make_inputs(1, 2, 2, 40, 600, 24, torch.float32, seed=3)
    t, r_lo = learned_table(24, torch.float32)
    for off in (0, 300, 5000, -100):
        got = wo.wavelet_attention(q, k, v, pos_enc="relative", rel_table=(t, r_lo), clamp=clamp, causal=False,
                                   q_offset=off)
        want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), table=t.double().numpy(),
                             r_lo=r_lo, clamp=clamp, causal=False, q_offset=off)
        np.testing.assert_allclose(got.numpy(), want, rtol=3e-5, atol=3e-5)


def test_key_padding_mask(isa):
    b, h, m, n, d = 3, 2, 20, 300, 16
    q, k, v = make_inputs(b, h, h, m, n, d, torch.float32, seed=5)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, :40] = True                      # left padding
    mask[1, 250:] = True                     # right padding
    mask[2, :] = True                        # nothing to attend to: zero output
    for pos_enc in POS_ENCS:
        kw, okw = case_kwargs(pos_enc, d, h, torch.float32, m, n, n - m)
        for m_ in (m, 1):
            qq = q[:, :, :m_]
            kw2, okw2 = case_kwargs(pos_enc, d, h, torch.float32, m_, n, n - m_)
            got = wo.wavelet_attention(qq, k, v, pos_enc=pos_enc, key_padding_mask=mask, **kw2)
            want = ref.attention(qq.double().numpy(), k.double().numpy(), v.double().numpy(),
                                 key_padding_mask=mask.numpy(), **okw2)
            np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=2e-5, err_msg=pos_enc)
            assert torch.equal(got[2], torch.zeros_like(got[2]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 2), h_kv=st.integers(1, 2), rep=st.integers(1, 3), m=st.integers(0, 40),
       n=st.integers(0, 300), d=st.integers(1, 40), off=st.one_of(st.none(), st.integers(-50, 400)),
       pos_enc=st.sampled_from(POS_ENCS), causal=st.booleans(), padded=st.booleans(), f64=st.booleans())
def test_random_shapes_against_oracle(b, h_kv, rep, m, n, d, off, pos_enc, causal, padded, f64):
    dtype = torch.float64 if f64 else torch.float32
    h = h_kv * rep
    q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=d + 7 * n)
    o = n - m if off is None else off
    kw, okw = case_kwargs(pos_enc, d, h, dtype, m, n, o)
    mask = None
    if padded:
        mask = torch.arange(n)[None, :] % 5 == (torch.arange(b)[:, None] + 1)
    got = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, causal=causal, q_offset=off, key_padding_mask=mask, **kw)
    want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal, q_offset=o,
                         key_padding_mask=None if mask is None else mask.numpy(), **okw)
    rtol, atol = tol(dtype, max(d, 64))
    if pos_enc == "alibi" and dtype == torch.float32 and m and n:
        # Every key of a row can sit far away (offsets beyond N): then the largest score is
        # itself ~ -slope * distance, and fp32 scores carry an absolute rounding error of
        # eps32 * that magnitude, exactly as an fp32 SDPA with an additive ALiBi mask does.
        pos = o + np.arange(m)
        nearest = np.where(pos > n - 1, pos - (n - 1), np.where(pos < 0, -pos, 0)).max()
        slope = float(np.max(np.asarray(okw["slopes"])))
        atol += 8 * np.finfo(np.float32).eps * slope * nearest * float(v.abs().max())
    np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol, atol=atol)


def test_results_identical_run_to_run_and_across_thread_counts():
    # forward and backward: units never depend on how the threads split them
    q, k, v = make_inputs(2, 4, 2, 150, 700, 64, torch.float32, seed=11)
    g = torch.randn(2, 4, 150, 64)
    for pos_enc in POS_ENCS:
        kw, _ = case_kwargs(pos_enc, 64, 4, torch.float32, 150, 700, 550)
        extra = []
        if pos_enc == "relative":
            extra = [kw["rel_table"][0].requires_grad_()]
        elif pos_enc == "alibi":
            extra = [kw["alibi_slopes"].requires_grad_()]

        def run():
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            out = wo.wavelet_attention(*leaves, pos_enc=pos_enc, **kw)
            return [out, *torch.autograd.grad(out, leaves + extra, g)]

        threads = torch.get_num_threads()
        try:  # two threads and one, whatever the caller's count (make test's workers run one thread each)
            torch.set_num_threads(2)
            first = run()
            torch.set_num_threads(1)
            single = run()
            torch.set_num_threads(2)
            again = run()
        finally:
            torch.set_num_threads(threads)
        for a, b, c in zip(first, single, again):
            assert torch.equal(a, b) and torch.equal(a, c), pos_enc


def test_noncontiguous_inputs(isa):
    # (B, L, H, d) projections viewed as (B, H, L, d), as Hugging Face models do
    b, h, m, d = 2, 4, 50, 32
    base_q = torch.randn(b, m, h, d)
    base_kv = torch.randn(b, 80, 2, 2 * d)
    q = base_q.transpose(1, 2)
    k = base_kv[..., :d].transpose(1, 2)
    v = base_kv[..., d:].transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous()
    got = wo.wavelet_attention(q, k, v)
    want = wo.wavelet_attention(q.contiguous(), k.contiguous(), v.contiguous())
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_plain_baseline_matches_oracle():
    # the plain-PyTorch path (other devices; benchmark baseline) follows the same contract
    q, k, v = make_inputs(1, 4, 2, 30, 100, 16, seed=4)
    cfg = wavelet_config(16)
    t, r_lo = oracle_table(cfg, 30, 100, 70)
    got = _plain_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), torch.from_numpy(t), r_lo, False,
                           None, None, 0.25, 70, True)
    want = ref.attention(q.numpy(), k.numpy(), v.numpy(), table=t, r_lo=r_lo, q_offset=70, scale=0.25)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_decoding_path_is_used_and_exact(isa):
    # one query against a long cache: the split-N path (AVX2) or the scalar rows
    q, k, v = make_inputs(1, 8, 2, 1, 5000, 64, torch.float32, seed=9)
    for pos_enc in POS_ENCS:
        kw, okw = case_kwargs(pos_enc, 64, 8, torch.float32, 1, 5000, 4999)
        got = wo.wavelet_attention(q, k, v, pos_enc=pos_enc, **kw)
        want = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), q_offset=4999, **okw)
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=2e-5, err_msg=pos_enc)


@pytest.mark.parametrize("clamp", [False, True])
def test_decoding_with_a_table_over_part_of_the_keys(isa, clamp):
    # one query token, 1, 2 and 4 query heads per kv head (the narrow kernels fold the table rows into
    # the keys: q . (k + T)), a table whose distances cover only some of the keys -- its first and last
    # rows inside a key block, the keys before and after it without a row (clamp=False: no bias; True:
    # the edge rows) -- over several key blocks and split-N chunks, and with padded keys
    n, d = 1500, 40
    g = torch.Generator().manual_seed(11)
    for rep in (1, 2, 4):
        q, k, v = make_inputs(1, 2 * rep, 2, 1, n, d, torch.float64, seed=rep)
        for r_lo, rows in ((300, 517), (-20, 61), (1495, 9)):
            t64 = torch.randn(rows, d, generator=g, dtype=torch.float64)
            mask = torch.zeros(1, n, dtype=torch.bool)
            mask[0, 700:705] = True
            for dtype in (torch.float32, torch.float64):
                got = wo.wavelet_attention(q.to(dtype), k.to(dtype), v.to(dtype), pos_enc="relative",
                                           rel_table=(t64.to(dtype), r_lo), clamp=clamp, key_padding_mask=mask)
                want = ref.attention(q.numpy(), k.numpy(), v.numpy(), table=t64.to(dtype).double().numpy(),
                                     r_lo=r_lo, clamp=clamp, q_offset=n - 1, key_padding_mask=mask.numpy())
                rtol, atol = tol(dtype, d)
                np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol, atol=atol,
                                           err_msg=f"rep={rep} r_lo={r_lo} rows={rows} {dtype}")


# ---- gradients ------------------------------------------------------------------------

GRAD_SHAPES = [
    (1, 2, 2, 70, 300, 40, None),
    (2, 4, 2, 5, 120, 24, None),
    (1, 2, 1, 100, 100, 17, 30),
    (1, 1, 1, 1, 700, 64, None),
]


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("causal", [True, False])
def test_gradients_match_autograd_through_oracle(isa, pos_enc, causal):
    for b, h, h_kv, m, n, d, off in GRAD_SHAPES:
        for dtype in (torch.float32, torch.float64):
            q, k, v = make_inputs(b, h, h_kv, m, n, d, dtype, seed=n)
            o = n - m if off is None else off
            kw, okw = case_kwargs(pos_enc, d, h, dtype, m, n, o, clamp=(d % 2 == 1))
            g = torch.randn(b, h, m, d, dtype=torch.float64).to(dtype)
            mask = torch.zeros(b, n, dtype=torch.bool)
            mask[:, 3:9] = True
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            extra = None
            if pos_enc == "relative":
                extra = kw["rel_table"][0].clone().requires_grad_()
                kw["rel_table"] = (extra, kw["rel_table"][1])
            elif pos_enc == "alibi":
                extra = kw["alibi_slopes"].clone().requires_grad_()
                kw["alibi_slopes"] = extra
            out = wo.wavelet_attention(*leaves, pos_enc=pos_enc, causal=causal, q_offset=off, key_padding_mask=mask,
                                       **kw)
            grads = torch.autograd.grad(out, leaves + ([extra] if extra is not None else []), g)

            rleaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
            rkw = {}
            rextra = None
            if pos_enc == "wavelet":
                rkw = {"table": torch.from_numpy(okw["table"]), "r_lo": okw["r_lo"]}
            elif pos_enc == "relative":
                rextra = extra.detach().double().requires_grad_()
                rkw = {"table": rextra, "r_lo": okw["r_lo"], "clamp": okw["clamp"]}
            elif pos_enc == "alibi":
                rextra = extra.detach().double().requires_grad_()
                rkw = {"slopes": rextra}
            rout = torch_oracle(*rleaves, causal=causal, q_offset=o, key_padding_mask=mask, **rkw)
            rgrads = torch.autograd.grad(rout, rleaves + ([rextra] if rextra is not None else []), g.double())
            rtol, atol = tol(dtype, d)
            if dtype == torch.float32:  # sums over up to N (dk, dv) or M*N (table, slopes) terms
                rtol, atol = 10 * rtol, 10 * atol
            for name, a, e in zip(["dq", "dk", "dv", "dextra"], grads, rgrads):
                torch.testing.assert_close(a.double(), e, rtol=rtol, atol=atol * max(1.0, e.abs().max().item()),
                                           msg=lambda s: f"{name} {pos_enc} causal={causal} {dtype}: {s}")


def test_torch_oracle_is_the_numpy_oracle():
    q, k, v = make_inputs(2, 4, 2, 20, 50, 8, seed=8)
    t, r_lo = learned_table(8)
    mask = torch.arange(50)[None, :] < torch.tensor([[3], [0]])
    for kw in ({"table": t, "r_lo": r_lo}, {"table": t, "r_lo": r_lo, "clamp": True},
               {"slopes": torch.tensor(ref.alibi_slopes(4))}, {}):
        nkw = {key: (val.numpy() if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}
        for causal in (True, False):
            a = torch_oracle(q, k, v, causal=causal, q_offset=40, key_padding_mask=mask, **kw)
            e = ref.attention(q.numpy(), k.numpy(), v.numpy(), causal=causal, q_offset=40,
                              key_padding_mask=mask.numpy(), **nkw)
            np.testing.assert_allclose(a.numpy(), e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_gradcheck_float64(isa, pos_enc):
    q, k, v = make_inputs(1, 2, 1, 6, 9, 5, seed=21)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    extra = []
    kw = {}
    if pos_enc == "relative":
        t, r_lo = learned_table(5)
        extra = [t.requires_grad_()]
    elif pos_enc == "alibi":
        extra = [torch.tensor([0.3, 0.7], dtype=torch.float64, requires_grad=True)]
    elif pos_enc == "wavelet":
        kw = {"config": wavelet_config(5)}

    def f(q, k, v, *ex):
        if pos_enc == "relative":
            kw["rel_table"] = (ex[0], -7)
        if pos_enc == "alibi":
            kw["alibi_slopes"] = ex[0]
        return wo.wavelet_attention(q, k, v, pos_enc=pos_enc, q_offset=4, causal=True, **kw)

    assert torch.autograd.gradcheck(f, tuple(leaves + extra))


def test_opcheck():
    q, k, v = make_inputs(1, 4, 2, 9, 13, 8, seed=31)
    t, r_lo = learned_table(8)
    slopes = torch.tensor(ref.alibi_slopes(4))
    mask = torch.zeros(1, 13, dtype=torch.bool)
    mask[0, 2] = True
    for table, slopes_, kpm in ((t, None, mask), (None, slopes, None), (None, None, mask)):
        if True:
            args = (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(),
                    None if table is None else table.requires_grad_(),
                    None if slopes_ is None else slopes_.requires_grad_(), kpm, None, 0.3, 6, True, r_lo, False, False)
            torch.library.opcheck(torch.ops.wavepe.attention_fwd, args)
            out, lse = torch.ops.wavepe.attention_fwd(*args)
            bargs = (torch.randn_like(out), torch.randn_like(lse), q.detach(), k.detach(), v.detach(), out.detach(),
                     lse.detach(), None if table is None else table.detach(),
                     None if slopes_ is None else slopes_.detach(), kpm, None, table is not None,
                     slopes_ is not None, 0.3, 6, True, r_lo, False, False)
            torch.library.opcheck(torch.ops.wavepe.attention_bwd, bargs)


def test_lse_output_and_its_gradient():
    # the op's log-sum-exp is an output too: its gradient flows into q and k
    q, k, v = make_inputs(1, 2, 2, 5, 11, 4, seed=41)
    q.requires_grad_()
    _, lse = torch.ops.wavepe.attention_fwd(q, k, v, None, None, None, None, 0.5, 6, True, 0, False, False)
    r = (6 + torch.arange(5))[:, None] - torch.arange(11)[None, :]
    s = (q @ k.transpose(-1, -2) * 0.5).masked_fill(r < 0, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))
    (gq,) = torch.autograd.grad(lse.sum(), q)
    (eq,) = torch.autograd.grad(torch.logsumexp(s, -1).sum(), q)
    torch.testing.assert_close(gq, eq)


@pytest.mark.parametrize("pos_enc", POS_ENCS)
@pytest.mark.parametrize("causal", [True, False])
def test_return_lse_and_gradients_through_both(pos_enc, causal):
    # (out, lse) against the oracle, and one loss over both outputs differentiated
    # into q, k, v and the learned table / slopes, on the fused and the eager path
    b, h, h_kv, m, n, d, off = 2, 6, 2, 23, 37, 8, -3   # GQA 3:1; the first queries see no key when causal
    q, k, v = make_inputs(b, h, h_kv, m, n, d, seed=51)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, :5] = True
    g = torch.randn(b, h, m, d, dtype=torch.float64)
    gl = torch.randn(b, h, m, dtype=torch.float64)
    kw, okw = case_kwargs(pos_enc, d, h, torch.float64, m, n, off)
    extra = None
    if pos_enc == "relative":
        extra = kw["rel_table"][0].clone().requires_grad_()
        kw["rel_table"] = (extra, kw["rel_table"][1])
        okw = {"table": extra, "r_lo": okw["r_lo"]}
    elif pos_enc == "alibi":
        extra = kw["alibi_slopes"].clone().requires_grad_()
        kw["alibi_slopes"] = extra
        okw = {"slopes": extra}
    elif pos_enc == "wavelet":
        okw = {"table": torch.from_numpy(okw["table"]), "r_lo": okw["r_lo"]}
    leaves = [x.clone().requires_grad_() for x in (q, k, v)] + ([extra] if extra is not None else [])

    def loss(out, lse):
        return (out * g).sum() + (lse.masked_fill(torch.isinf(lse), 0.0) * gl).sum()

    want_out, want_lse = torch_oracle(*leaves[:3], causal=causal, q_offset=off, key_padding_mask=mask,
                                      return_lse=True, **okw)
    want = torch.autograd.grad(loss(want_out, want_lse), leaves)
    assert bool(torch.isinf(want_lse).any()) == causal
    for path in ("fused", "eager"):
        if path == "fused":
            out, lse = wo.wavelet_attention(*leaves[:3], pos_enc=pos_enc, causal=causal, q_offset=off,
                                            key_padding_mask=mask, return_lse=True, **kw)
        else:
            table, r_lo = (okw.get("table"), okw.get("r_lo", 0))
            out, lse = _plain_attention(*leaves[:3], table, r_lo, False, okw.get("slopes"), mask, 1 / math.sqrt(d),
                                        off, causal, return_lse=True)
        assert lse.shape == (b, h, m) and lse.dtype == torch.float64
        torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(lse, want_lse, rtol=1e-10, atol=1e-12)
        got = torch.autograd.grad(loss(out, lse), leaves)
        for name, a, e in zip(["dq", "dk", "dv", "dextra"], got, want):
            torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-10, msg=lambda s: f"{path} {name}: {s}")


def test_return_lse_gradcheck_and_half_inputs():
    q, k, v = make_inputs(1, 2, 1, 5, 7, 4, seed=53)
    leaves = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: wo.wavelet_attention(q, k, v, pos_enc="alibi", q_offset=3, return_lse=True), leaves)
    out, lse = wo.wavelet_attention(*(x.detach().bfloat16() for x in leaves), pos_enc="nope", return_lse=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32   # lse in the accumulator dtype


@pytest.mark.parametrize("pos_enc", POS_ENCS)
def test_torch_compile_fullgraph(pos_enc):
    q, k, v = make_inputs(1, 2, 2, 16, 16, 8, torch.float32)
    t, r_lo = learned_table(8, torch.float32)
    kw = {"rel_table": (t, r_lo)} if pos_enc == "relative" else {}

    @torch.compile(fullgraph=True, backend="eager")
    def f(q, k, v):
        return wo.wavelet_attention(q, k, v, pos_enc=pos_enc, **kw) * 2

    torch.testing.assert_close(f(q, k, v), wo.wavelet_attention(q, k, v, pos_enc=pos_enc, **kw) * 2)


# ---- errors -------------------------------------------------------------------------------

def _qkv(**over):
    q, k, v = make_inputs(1, 4, 2, 5, 7, 8, torch.float32)
    return over.get("q", q), over.get("k", k), over.get("v", v)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: wo.wavelet_attention(*_qkv(q=torch.randn(4, 5, 8))), ValueError, r"q must have 4 dimensions"),
        (lambda: wo.wavelet_attention(*_qkv(k=torch.randn(1, 3, 7, 8))), ValueError, r"k and v must have the same"),
        (lambda: wo.wavelet_attention(*_qkv(k=torch.randn(1, 3, 7, 8), v=torch.randn(1, 3, 7, 8))), ValueError,
         r"multiple of k's heads H_kv=3"),
        (lambda: wo.wavelet_attention(*_qkv(k=torch.randn(1, 2, 7, 6), v=torch.randn(1, 2, 7, 6))), ValueError,
         r"with q's B=1 and d=8"),
        (lambda: wo.wavelet_attention(*_qkv(k=torch.randn(1, 2, 7, 8, dtype=torch.float64))), TypeError,
         r"q and k must have the same dtype"),
        (lambda: wo.wavelet_attention(*_qkv(q=torch.ones(1, 4, 5, 8, dtype=torch.int32))), TypeError,
         r"q must be a floating-point tensor"),
        (lambda: wo.wavelet_attention(*_qkv(), scale=float("nan")), ValueError, r"scale must not be NaN"),
        (lambda: wo.wavelet_attention(*_qkv(), scale=-1.0), ValueError, r"scale must be > 0, got -1.0"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="rope"), ValueError, r"pos_enc must be one of"),
        (lambda: wo.wavelet_attention(*_qkv(), config=WaveletConfig.grid(16)), ValueError,
         r"config.head_dim=16 does not match q.shape\[-1\]=8"),
        (lambda: wo.wavelet_attention(*_qkv(), config="ricker"), TypeError, r"config must be a WaveletConfig"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="relative"), ValueError, r"needs rel_table=\(table, r_lo\)"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="relative", rel_table=(torch.randn(5, 7), 0)), ValueError,
         r"rel_table\[0\].shape\[1\]=7 does not match q.shape\[-1\]=8"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="relative", rel_table=(torch.randn(0, 8), 0), clamp=True),
         ValueError, r"at least one row with clamp=True"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="relative", rel_table=(torch.randn(5, 8), 0.5)), TypeError,
         r"r_lo\) must be an integer, got 0.5"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="alibi", alibi_slopes=torch.ones(3)), ValueError,
         r"one slope per head \(4\), got 3"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="alibi", alibi_slopes=torch.tensor([1.0, float("nan"), 1, 1])),
         ValueError, r"alibi_slopes must be finite, got \[1.0, nan"),
        (lambda: wo.wavelet_attention(*_qkv(), key_padding_mask=torch.zeros(1, 7)), TypeError,
         r"key_padding_mask must be a bool tensor"),
        (lambda: wo.wavelet_attention(*_qkv(), key_padding_mask=torch.zeros(1, 6, dtype=torch.bool)), ValueError,
         r"key_padding_mask must be \(B, N\) = \(1, 7\), got \(1, 6\)"),
        (lambda: wo.wavelet_attention(*_qkv(), q_offset=1.5), TypeError, r"q_offset must be an integer"),
        (lambda: wo.wavelet_attention(*_qkv(), q_offset=2**62), OverflowError, r"q_offset=4611686018427387904"),
        (lambda: wo.wavelet_attention(*_qkv(), pos_enc="relative", rel_table=(torch.randn(5, 8), -2**61)),
         OverflowError, r"r_lo\)=-2305843009213693952"),
        (lambda: wo.wavelet_attention(*_qkv(q=torch.randn(1, 4, 5, 0), k=torch.randn(1, 2, 7, 0),
                                            v=torch.randn(1, 2, 7, 0))), ValueError, r"head_dim must be >= 1"),
        (lambda: torch.ops.wavepe.attention_fwd(*_qkv(), None, None, None, None, 0.0, 0, True, 0, False, False),
         ValueError,
         r"scale must be finite and > 0"),
        (lambda: torch.ops.wavepe.attention_fwd(*_qkv(), torch.ones(3, 8), torch.ones(4), None, None, 1.0, 0,
                                                True, 0, False, False), ValueError, r"not both"),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_empty_shapes():
    for m, n in ((0, 5), (5, 0), (0, 0)):
        q, k, v = make_inputs(1, 2, 1, m, n, 8, torch.float32)
        out = wo.wavelet_attention(q, k, v, q_offset=0)
        assert out.shape == (1, 2, m, 8) and torch.equal(out, torch.zeros_like(out))
        qg = q.clone().requires_grad_()
        wo.wavelet_attention(qg, k, v, q_offset=0).sum().backward()
        assert qg.grad.shape == q.shape


# ---- memory ----------------------------------------------------------------------------------

MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys, torch
    import wavepe.ops as wo

    def peak_kib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    L, d = 8192, 64
    torch.manual_seed(0)
    q = torch.randn(1, 1, L, d, requires_grad=True)
    k = torch.randn(1, 1, L, d, requires_grad=True)
    v = torch.randn(1, 1, L, d, requires_grad=True)
    g = torch.randn(1, 1, L, d)
    # warm every code path (thread pool, tables, allocator) at a small size
    s = slice(0, 512)
    wo.wavelet_attention(q[:, :, s], k[:, :, s], v[:, :, s]).backward(g[:, :, s])
    q.grad = k.grad = v.grad = None
    base = peak_kib()
    out = wo.wavelet_attention(q, k, v)
    fwd = peak_kib()
    out.backward(g)
    bwd = peak_kib()
    print(base, fwd, bwd)
""")


def test_peak_memory_stays_far_below_one_score_matrix():
    """M = N = 8192: one M x N float32 matrix is 256 MiB; growth must stay below 10 % of it."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    res = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, env=env, check=True,
                         timeout=600)
    base, fwd, bwd = (int(x) for x in res.stdout.split())
    limit_kib = 0.10 * 8192 * 8192 * 4 / 1024
    # forward: the output (2 MiB) and per-thread tiles; backward: dq, dk, dv (6 MiB) and tiles
    assert fwd - base < limit_kib, f"forward grew peak RSS by {(fwd - base) / 1024:.1f} MiB"
    assert bwd - base < limit_kib, f"forward+backward grew peak RSS by {(bwd - base) / 1024:.1f} MiB"
