"""The CUDA kernels, run on the CPU by the emulator, against the float64 oracles.

No GPU is needed: ``tests/cuda_emu.py`` compiles ``csrc/cuda/*.cu`` as C++
against ``csrc/cuda/emu/cuda_emu.h`` (every CUDA thread a fiber, barriers,
shuffles and ``mma.sync`` emulated with the PTX fragment layouts) and calls the
very ``extern "C"`` launchers the torch bindings call.  Every dtype (fp32,
fp64, bf16, fp16 -- the bf16/fp16 paths go through the tensor-core code) and
every feature is compared with the oracles; buffers carry guard bytes and
outputs start as NaN, so out-of-bounds writes and unwritten outputs fail.
What this cannot show (timing, the hardware's own scheduling and memory
model) is listed in docs/CUDA.md and checked by tests/test_cuda.py on a GPU.
"""

from __future__ import annotations

import ctypes as C
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import cuda_emu as E
from . import reference as ref

DTYPES = [E.F32, E.F64, E.BF16, E.F16]
DTYPE_IDS = {E.F32: "f32", E.F64: "f64", E.BF16: "bf16", E.F16: "f16"}
# unit roundoff of each storage type: inputs are rounded to it, outputs once more
UNIT = {E.F32: 2.0**-24, E.F64: 2.0**-53, E.BF16: 2.0**-8, E.F16: 2.0**-11}
ACC_UNIT = {E.F32: 2.0**-24, E.F64: 2.0**-53, E.BF16: 2.0**-24, E.F16: 2.0**-24}


KERNEL_PREFIX = "void wavepe_cuda::(anonymous namespace)::"
CUDA_TYPES = {E.F32: "float", E.F64: "double", E.BF16: "__nv_bfloat16", E.F16: "__half"}


def kernels_launched_by(monkeypatch, tmp_path, run) -> set[str]:
    """The kernel instances (names without KERNEL_PREFIX) that run() launches: WAVEPE_EMU_KERNEL_LOG on a file of its
    own (the emulator names each instance once a file), its lines added to the log the process was given, if any
    (scripts/emu_kernel_coverage.py's)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log, outer = tmp_path / "kernels", os.environ.get("WAVEPE_EMU_KERNEL_LOG")
    with monkeypatch.context() as m:
        m.setenv("WAVEPE_EMU_KERNEL_LOG", str(log))
        run()
    if not log.exists():
        return set()
    if outer:
        with open(outer, "a") as f:
            f.write(log.read_text())
    return {k.removeprefix(KERNEL_PREFIX) for k in E.launched_kernels(str(log))}


def alternating(cases, both=()):
    """(case, dtype) runs of a table of tensor-core cases: each case in bf16 or fp16, the two alternating -- the
    tensor-core kernels' code is one for both but for Traits<T> (the conversions, the mma's input type), so the product
    of the cases with both dtypes ran every feature's code twice --, and the cases in `both` in each.  Every kernel
    instance that product launched, its dtype among its template arguments, these runs launch too (docs/DEVELOPING.md,
    "Where the test time goes": WAVEPE_EMU_KERNEL_LOG before and after)."""
    cases = list(cases)
    return [pytest.param(c, t, id=f"{c}-{DTYPE_IDS[t]}") for i, c in enumerate(cases)
            for t in ((E.BF16, E.F16) if c in both else ((E.BF16, E.F16)[i % 2],))]


@pytest.fixture(scope="module")
def lib():
    try:
        return E.lib()
    except E.NoCompiler as exc:  # pragma: no cover - a build that fails fails the tests
        pytest.skip(f"CUDA emulator not buildable: {exc}")


# ---- the ctypes mirror of the argument structs -------------------------------------------------

def test_struct_mirror_matches_the_compiler(lib):
    """Every field of every ctypes struct handed to the launchers sits where the compiler put it
    (offset and size, read from the emulator library's layout table), every C field is mirrored and
    nothing else is, and the struct sizes agree: a drift names struct and field."""
    layout = E.compiler_layout()
    assert {cls.c_name for cls in E.MIRROR_CLASSES} == set(layout)
    problems = [p for cls in E.MIRROR_CLASSES for p in E.layout_drift(cls, layout)]
    assert not problems, "\n".join(problems)
    # the table is the compiler's: its fields tile the struct (sorted by offset, no overlap, each
    # gap shorter than the next field's alignment, tail padding shorter than the struct's)
    for struct, fields in layout.items():
        size, align = fields[""][1:]
        end = 0
        for name, (off, sz, al) in sorted(((f, v) for f, v in fields.items() if f), key=lambda fv: fv[1][0]):
            assert end <= off < end + al, f"{struct}.{name}: at {off}, the previous field ends at {end}"
            end = off + sz
        assert end <= size < end + align, f"{struct}: sizeof {size}, the last field ends at {end}"


def test_struct_mirror_check_names_a_moved_field(lib):
    """The check above can fail: a mirror with two fields swapped, one missing, one extra and one
    retyped is reported field by field."""
    layout = E.compiler_layout()
    f = list(E.AlibiArgs._fields_)
    f[1], f[2] = f[2], f[1]  # heads <-> m: same size, told apart by their offsets
    moved = type("AlibiArgs", (C.Structure,), {"_fields_": f, "c_name": "wavepe_alibi_args"})
    assert E.layout_drift(moved, layout) == [
        "wavepe_alibi_args.heads: (offset, size) (8, 8) in C, (16, 8) in the ctypes mirror AlibiArgs",
        "wavepe_alibi_args.m: (offset, size) (16, 8) in C, (8, 8) in the ctypes mirror AlibiArgs"]
    f = [x for x in E.RelBiasArgs._fields_ if x[0] != "workspace"] + [("spare", C.c_int64)]
    f = [(n, C.c_int64 if n == "clamp" else t) for n, t in f]
    broken = type("RelBiasArgs", (C.Structure,), {"_fields_": f, "c_name": "wavepe_relbias_args"})
    problems = E.layout_drift(broken, layout)
    assert any(p.startswith("wavepe_relbias_args.clamp: (offset, size)") for p in problems), problems
    assert any(p.startswith("wavepe_relbias_args.workspace: in C") and "missing" in p for p in problems), problems
    assert any(p.startswith("wavepe_relbias_args.spare: in the ctypes mirror") for p in problems), problems


def test_struct_reader_refuses_what_it_cannot_read(tmp_path, monkeypatch):
    """The mirror is derived from the headers: a declaration the reader does not understand is an
    error, not a field silently left out."""
    (tmp_path / "csrc" / "core").mkdir(parents=True)
    (tmp_path / "csrc" / "core" / "x.h").write_text(
        "typedef struct s { int a; /* note */ int64_t b[3], *c; unsigned bits : 3; } s;\n")
    monkeypatch.setattr(E, "ROOT", str(tmp_path))
    with pytest.raises(ValueError, match="bits : 3"):
        E.c_fields("s", "x.h")
    (tmp_path / "csrc" / "core" / "x.h").write_text("typedef struct s { int a; // note\n int64_t b[3], *c; } s;\n")
    assert E.c_fields("s", "x.h") == [("a", "int", False, 0), ("b", "int64_t", False, 3), ("c", "int64_t", True, 0)]


def tol(dtype: int, terms: int, inner_rounding: bool = False) -> float:
    """Absolute error bound relative to the result's scale: output rounding, plus
    fp accumulation over `terms` products (sqrt growth), plus (bf16/fp16
    tensor-core paths) operands rounded to the input type inside the kernel."""
    t = 4 * UNIT[dtype] + 8 * ACC_UNIT[dtype] * np.sqrt(max(terms, 1))
    if inner_rounding:
        t += 4 * UNIT[dtype] * np.sqrt(max(terms, 1))
    return t


def assert_close(got, want, dtype, terms, what, inner=False):
    scale = 1.0 + np.abs(want).max(initial=0.0)
    err = np.abs(got - want).max(initial=0.0)
    assert np.isfinite(got).all() or not np.isfinite(want).all(), f"{what}: non-finite values"
    assert err <= tol(dtype, terms, inner) * scale, f"{what}: max error {err:.3e} > {tol(dtype, terms, inner) * scale:.3e}"


def put(x: np.ndarray, dtype: int | None) -> E.Buf:
    s = E.storage(x, dtype) if dtype is not None else np.ascontiguousarray(x)
    return E.Buf(s.shape, s.dtype, fill=s)


# ---- ALiBi ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("m,n,off,causal", [(33, 50, 17, True), (1, 4097, 4096, False), (5, 9, -3, True), (0, 3, 0, True)])
def test_alibi_matches_oracle(lib, dtype, m, n, off, causal):
    slopes = np.array([0.5, 0.125, 3.0])
    sb = put(slopes, dtype)
    ob = E.Buf((3, m, n), E.np_dtype(dtype))
    a = E.AlibiArgs(dtype=dtype, heads=3, m=m, n=n, q_offset=off, causal=int(causal), slopes=sb.ptr, out=ob.ptr,
                    out_stride_h=m * n, out_stride_m=n)
    assert lib.wavepe_cuda_alibi_check(C.byref(a), None) == 0
    E.check(lib.wavepe_cuda_alibi(C.byref(a), None))
    ob.check_guards()
    want = ref.alibi_bias(E.rounded(slopes, dtype), m, n, off, causal)
    assert_close(E.values(ob.arr, dtype), want, dtype, 1, "alibi")


def test_alibi_large_positions_round_like_the_cpu_core(lib):
    off = 2**24 + 5
    sb = put(np.array([1.0]), E.F32)
    ob = E.Buf((1, 2, 20), np.float32)
    a = E.AlibiArgs(dtype=E.F32, heads=1, m=2, n=20, q_offset=off, causal=0, slopes=sb.ptr, out=ob.ptr,
                    out_stride_h=40, out_stride_m=20)
    E.check(lib.wavepe_cuda_alibi(C.byref(a), None))
    want = -np.abs((off + np.arange(2)[:, None] - np.arange(20)[None, :]).astype(np.float32))
    np.testing.assert_array_equal(ob.arr[0], want)


# ---- RoPE -------------------------------------------------------------------------------

def rope_call(lib, dtype, xs, pos, inv_freq, layout, pairs, scale, inverse, *, offset=None, in_place=False,
              row_pad=0, misalign=False):
    """Run the launcher on the tensors xs (list of (B, H, L, d) float64) and return the outputs (float64)."""
    B, _, L, d = xs[0].shape
    a = E.RopeArgs(dtype=dtype, batch=B, len=L, head_dim=d, rotary_pairs=pairs, layout=layout, inverse=int(inverse),
                   scale=scale)
    keep = []
    if offset is None:
        pb = put(pos.astype(np.int64), None)
        keep.append(pb)
        a.positions = pb.ptr
        a.pos_stride_b = 0 if pos.ndim == 1 else L
        a.pos_stride_l = 1
    else:
        a.offset = offset
    ib = put(inv_freq, None)
    keep.append(ib)
    a.inv_freq = ib.ptr
    outs = []
    for i, x in enumerate(xs):
        H = x.shape[1]
        rs = d + row_pad  # row stride in elements (padding rows makes a strided view)
        shift = 1 if misalign else 0
        s = E.storage(x, dtype)
        big = np.zeros((B, H, L, rs), s.dtype)
        big[..., :d] = s
        xb = E.Buf((big.size + shift,), s.dtype)
        xb.arr[:] = 0
        xb.arr[shift:] = big.ravel()
        ob = xb if in_place else E.Buf((big.size + shift,), s.dtype)
        keep += [xb, ob]
        t = a.q if i == 0 else a.k
        t.heads = H
        esz = s.dtype.itemsize
        t.in_ = xb.ptr + shift * esz
        t.out = ob.ptr + shift * esz
        t.in_stride_b = t.out_stride_b = H * L * rs
        t.in_stride_h = t.out_stride_h = L * rs
        t.in_stride_l = t.out_stride_l = rs
        outs.append(ob)
    assert lib.wavepe_cuda_rope_check(C.byref(a), None) == 0
    E.check(lib.wavepe_cuda_rope(C.byref(a), None))
    for b in keep:
        b.check_guards()
    res = []
    for x, ob in zip(xs, outs):
        B, H, L, d = x.shape
        rs = d + row_pad
        shift = 1 if misalign else 0
        flat = ob.arr[shift:shift + B * H * L * rs].reshape(B, H, L, rs)
        if row_pad and not in_place:  # the padding columns must be untouched (NaN-filled)
            pad = flat[..., d:]
            assert (pad.view(np.uint8) == 0xFF).all(), "rope wrote into the row padding"
        res.append(E.values(flat[..., :d], dtype))
    return res


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), layout=st.sampled_from([0, 1]), B=st.integers(1, 2), H1=st.integers(1, 3),
       H2=st.integers(0, 2), L=st.integers(0, 9), half=st.sampled_from([1, 3, 4, 5, 8, 17, 32]),
       frac=st.floats(0, 1), scale=st.sampled_from([1.0, 1.3]), inverse=st.booleans(),
       per_batch=st.booleans(), use_offset=st.booleans(), row_pad=st.sampled_from([0, 3, 8]),
       misalign=st.booleans(), in_place=st.booleans(), seed=st.integers(0, 2**31))
def test_rope_matches_oracle(lib, dtype, layout, B, H1, H2, L, half, frac, scale, inverse, per_batch, use_offset,
                             row_pad, misalign, in_place, seed):
    rng = np.random.default_rng(seed)
    d = 2 * half
    pairs = int(round(frac * half))
    xs = [rng.standard_normal((B, H1, L, d))] + ([rng.standard_normal((B, H2, L, d))] if H2 else [])
    inv = 10000.0 ** (-2.0 * np.arange(half) / d)
    offset = int(rng.integers(-50, 10**6)) if use_offset else None
    pos = None
    if offset is None:
        pos = rng.integers(-1000, 2**40, size=(B, L) if per_batch else (L,))
    got = rope_call(lib, dtype, xs, pos, inv, layout, pairs, scale, inverse, offset=offset, row_pad=row_pad,
                    misalign=misalign, in_place=in_place)
    full_pos = (np.arange(L) + offset) if offset is not None else pos
    full_pos = full_pos[:, None, :] if full_pos.ndim == 2 else full_pos  # (B, L) -> broadcast over heads
    for x, g in zip(xs, got):
        want = ref.rope(E.rounded(x, dtype), full_pos, inv, ("half", "interleaved")[layout], pairs, scale, inverse)
        assert_close(g, want, dtype, 2, "rope")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("layout", [0, 1], ids=["half", "interleaved"])
@pytest.mark.parametrize("vec", [True, False], ids=["16-byte", "unaligned"])
def test_rope_every_instance_matches_oracle(lib, monkeypatch, tmp_path, dtype, layout, vec):
    # each rope_kernel instance (dtype, 16-byte vectors or not, layout), checked to be the one that ran: the
    # random-shape test above reaches them by chance only (4 of the 16 in none of four runs of it, 2026-12-01)
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((2, 3, 9, 64)), rng.standard_normal((2, 1, 9, 64))]
    inv = 10000.0 ** (-2.0 * np.arange(32) / 64)
    pos = rng.integers(-1000, 2**40, size=(9,))
    got = []
    launched = kernels_launched_by(monkeypatch, tmp_path, lambda: got.extend(
        rope_call(lib, dtype, xs, pos, inv, layout, 24, 1.3, False, misalign=not vec)))
    assert launched == {f"rope_kernel<{CUDA_TYPES[dtype]}, {str(vec).lower()}, {str(bool(layout)).lower()}>"
                        "(wavepe_cuda::(anonymous namespace)::RopeParams)"}
    for x, g in zip(xs, got):
        want = ref.rope(E.rounded(x, dtype), pos, inv, ("half", "interleaved")[layout], 24, 1.3, False)
        assert_close(g, want, dtype, 2, "rope")


def test_rope_large_angles_use_float64(lib):
    # pos * inv_freq near 2^40: a float32 angle would be off by whole turns
    x = np.ones((1, 1, 3, 4))
    pos = np.array([2**40 + 1, 2**40 + 7, 3 * 2**38], dtype=np.int64)
    inv = np.array([1.0, 0.3])
    got = rope_call(lib, E.F32, [x], pos, inv, 0, 2, 1.0, False)[0]
    np.testing.assert_allclose(got, ref.rope(x, pos, inv, "half", 2, 1.0, False), atol=1e-6)


# ---- relative-table bias ------------------------------------------------------------------

def relbias_call(lib, dtype, q, T, r_lo, N, off, causal, clamp, g=None, want_dtable=True, row_pad=0):
    B, M, d = q.shape
    R = T.shape[0]
    rs = d + row_pad
    qpad = np.zeros((B, M, rs))
    qpad[..., :d] = q
    qb, tb = put(qpad, dtype), put(T, dtype)
    ob = E.Buf((B, M, N), E.np_dtype(dtype))
    a = E.RelBiasArgs(dtype=dtype, batch=B, m=M, n=N, d=d, rows=R, r_lo=r_lo, q_offset=off, causal=int(causal),
                      clamp=int(clamp), q=qb.ptr, q_stride_g=M * rs, q_stride_m=rs, table=tb.ptr,
                      bias=ob.ptr, bias_stride_g=M * N, bias_stride_m=N)
    assert lib.wavepe_cuda_relbias_check(C.byref(a), E.FORWARD, None) == 0
    E.check(lib.wavepe_cuda_relbias_fwd(C.byref(a), None))
    res = {"bias": E.values(ob.arr, dtype)}
    keep = [qb, tb, ob]
    if g is not None:
        gb = put(g, dtype)
        dqb = E.Buf((B, M, d), E.np_dtype(dtype))
        dtb = E.Buf((R, d), E.np_dtype(dtype)) if want_dtable else None
        a.grad, a.grad_stride_g, a.grad_stride_m = gb.ptr, M * N, N
        a.dq, a.dq_stride_g, a.dq_stride_m = dqb.ptr, M * d, d
        a.dtable = dtb.ptr if dtb else None
        kernels = E.GRAD_Q | (E.GRAD_TABLE if dtb else 0)
        ws = lib.wavepe_cuda_relbias_bwd_workspace_bytes(C.byref(a), kernels)
        wb = E.Buf((max(ws, 1),), np.uint8)
        assert lib.wavepe_cuda_relbias_check(C.byref(a), kernels, None) == 0
        E.check(lib.wavepe_cuda_relbias_bwd(C.byref(a), kernels, wb.ptr, ws, None))
        res["dq"] = E.values(dqb.arr, dtype)
        if dtb:
            res["dtable"] = E.values(dtb.arr, dtype)
        keep += [gb, dqb, wb] + ([dtb] if dtb else [])
    for b in keep:
        b.check_guards()
    return res


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), B=st.integers(1, 2), M=st.integers(0, 80), N=st.integers(0, 140),
       d=st.sampled_from([1, 3, 8, 12, 33, 40]), R=st.integers(1, 90), r_lo=st.integers(-20, 40),
       off=st.integers(-30, 150), causal=st.booleans(), clamp=st.booleans(), row_pad=st.sampled_from([0, 5]),
       seed=st.integers(0, 2**31))
def test_relbias_forward_backward_match_oracle(lib, dtype, B, M, N, d, R, r_lo, off, causal, clamp, row_pad, seed):
    rng = np.random.default_rng(seed)
    q, T, g = rng.standard_normal((B, M, d)), rng.standard_normal((R, d)), rng.standard_normal((B, M, N))
    got = relbias_call(lib, dtype, q, T, r_lo, N, off, causal, clamp, g=g, row_pad=row_pad)
    qr, Tr, gr = E.rounded(q, dtype), E.rounded(T, dtype), E.rounded(g, dtype)
    assert_close(got["bias"], ref.rel_bias(qr, Tr, r_lo, N, off, causal, clamp), dtype, d, "bias")
    dq, dT = ref.rel_bias_grads(gr, qr, Tr, r_lo, off, causal, clamp)
    assert_close(got["dq"], dq, dtype, N, "dq")
    assert_close(got["dtable"], dT, dtype, B * M * N if clamp else B * M, "dtable")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_relbias_every_instance_matches_oracle(lib, monkeypatch, tmp_path, dtype):
    # each dtype's relbias kernels, forward and backward, checked to be the ones that ran: fp64's and fp16's forward
    # and three dtypes' backward kernels ran in no other deterministic test, only where the random-shape test above
    # drew them (2026-12-01)
    rng = np.random.default_rng(12)
    B, M, N, d, R, r_lo, off = 2, 40, 70, 12, 30, -5, 30
    q, T, g = rng.standard_normal((B, M, d)), rng.standard_normal((R, d)), rng.standard_normal((B, M, N))
    got = {}
    launched = kernels_launched_by(monkeypatch, tmp_path, lambda: got.update(
        relbias_call(lib, dtype, q, T, r_lo, N, off, True, False, g=g)))
    t = CUDA_TYPES[dtype]
    assert launched == {f"relbias_{k}_kernel<{t}>(wavepe_cuda::(anonymous namespace)::RelBiasParams)"
                        for k in ("fwd", "dq", "dtable", "dtable_fold")}, launched
    qr, Tr, gr = E.rounded(q, dtype), E.rounded(T, dtype), E.rounded(g, dtype)
    assert_close(got["bias"], ref.rel_bias(qr, Tr, r_lo, N, off, True, False), dtype, d, "bias")
    dq, dT = ref.rel_bias_grads(gr, qr, Tr, r_lo, off, True, False)
    assert_close(got["dq"], dq, dtype, N, "dq")
    assert_close(got["dtable"], dT, dtype, B * M, "dtable")


def test_relbias_skips_work_outside_the_table(lib):
    # a window far from the table: all zeros (and no NaN from the unread inputs)
    q = np.full((1, 70, 4), np.nan)
    T = np.ones((3, 4))
    got = relbias_call(lib, E.F32, q, T, 1000, 70, 0, True, False)["bias"]
    assert (got == 0).all()


@pytest.mark.parametrize("dtype", [E.F32, E.BF16], ids=DTYPE_IDS.get)
def test_relbias_outer_batch_level_and_strided_output(lib, dtype):
    # the forward reads q as (outer, batch) strided levels -- a (B, L, H, d).transpose(1, 2) view -- and
    # writes a strided bias: the struct the CPU plan takes, as is
    rng = np.random.default_rng(5)
    B, H, M, N, d, R = 2, 3, 37, 45, 16, 25
    x = rng.standard_normal((B, M, H, d))  # (B, L, H, d)
    T = rng.standard_normal((R, d))
    xb, tb = put(x, dtype), put(T, dtype)
    pad = 3
    ob = E.Buf((B, H, M, N + pad), E.np_dtype(dtype))
    a = E.RelBiasArgs(dtype=dtype, outer=B, batch=H, m=M, n=N, d=d, rows=R, r_lo=-5, q_offset=8, causal=1,
                      q=xb.ptr, q_stride_o=M * H * d, q_stride_g=d, q_stride_m=H * d, table=tb.ptr,
                      bias=ob.ptr, bias_stride_o=H * M * (N + pad), bias_stride_g=M * (N + pad), bias_stride_m=N + pad)
    assert lib.wavepe_cuda_relbias_check(C.byref(a), E.FORWARD, None) == 0
    E.check(lib.wavepe_cuda_relbias_fwd(C.byref(a), None))
    for b in (xb, tb, ob):
        b.check_guards()
    q = E.rounded(x, dtype).transpose(0, 2, 1, 3)  # (B, H, M, d)
    want = ref.rel_bias(q, E.rounded(T, dtype), -5, N, 8, True, False)
    got = E.values(ob.arr, dtype)
    assert_close(got[..., :N], want, dtype, d, "bias")
    assert (ob.arr[..., N:].view(np.uint8) == 0xFF).all(), "the row padding was written"


# ---- attention ----------------------------------------------------------------------------

class Attn:
    """One attention problem: inputs, launcher args, buffers."""

    def __init__(self, lib, dtype, B, H, Hk, M, N, d, off, causal, pe, R=0, r_lo=0, clamp=False, kpm=False,
                 seed=0, splits=1, scale=None, row_pad=0, inputs=None, cu=None, window=0, softcap=0.0):
        rng = np.random.default_rng(seed)
        self.lib, self.dtype = lib, dtype
        self.shape = (B, H, Hk, M, N, d)
        self.q = rng.standard_normal((B, H, M, d))
        self.k = rng.standard_normal((B, Hk, N, d))
        self.v = rng.standard_normal((B, Hk, N, d))
        self.go = rng.standard_normal((B, H, M, d))
        self.table = rng.standard_normal((R, d)) * 0.5 if pe == 1 else None
        self.slopes = np.array(ref.alibi_slopes(H)) if pe == 2 else None
        if isinstance(kpm, np.ndarray):  # a given mask
            self.kpm = kpm.astype(bool)
        else:
            self.kpm = (rng.random((B, N)) < 0.25) if kpm else None
        kpm = self.kpm is not None
        for name, x in (inputs or {}).items():  # given q, k, v, go (float64, any values)
            setattr(self, name, np.array(x, np.float64))
        self.scale = 1 / np.sqrt(max(d, 1)) if scale is None else scale
        self.off, self.causal, self.pe, self.r_lo, self.clamp = off, causal, pe, r_lo, clamp
        self.window, self.softcap = window, softcap
        acc = np.float64 if dtype == E.F64 else np.float32
        a = E.AttentionArgs(dtype=dtype, batch=B, heads=H, kv_heads=Hk, m=M, n=N, d=d, q_offset=off,
                            causal=int(causal), scale=self.scale, window=window, softcap=softcap)
        self.splits = splits
        self.bufs = []

        def padded(x, name):  # rows padded to d + row_pad: strided views
            p = np.zeros(x.shape[:-1] + (d + row_pad,))
            p[..., :d] = x
            b = put(p, dtype)
            self.bufs.append(b)
            s = p.shape
            setattr(a, name, b.ptr)
            return E.I64x3(s[1] * s[2] * s[3], s[2] * s[3], s[3])

        a.q_strides = padded(self.q, "q")
        a.k_strides = padded(self.k, "k")
        a.v_strides = padded(self.v, "v")
        a.dout_strides = padded(self.go, "dout")
        if pe == 1:
            tb = put(self.table, dtype)
            self.bufs.append(tb)
            a.table, a.table_rows, a.r_lo, a.clamp = tb.ptr, R, r_lo, int(clamp)
        if pe == 2:
            sb = put(self.slopes.astype(acc), None)
            self.bufs.append(sb)
            a.slopes = sb.ptr
        if kpm:
            kb = put(self.kpm.astype(np.uint8), None)
            self.bufs.append(kb)
            a.key_padding_mask, a.kpm_stride = kb.ptr, N
        # packed sequences: (B, cu_len) document boundaries, read by the kernels in "device" memory
        self.cu = None if cu is None else np.array(cu, np.int32).reshape(B, -1)
        if self.cu is not None:
            cb = put(self.cu, None)
            self.bufs.append(cb)
            a.cu_seqlens, a.cu_len, a.cu_stride = cb.ptr, self.cu.shape[1], self.cu.shape[1]
        self.out = E.Buf((B, H, M, d), E.np_dtype(dtype))
        self.lse = E.Buf((B, H, M), acc)
        a.out, a.out_strides = self.out.ptr, E.I64x3(H * M * d, M * d, d)
        a.lse = self.lse.ptr
        self.a = a

    def forward(self):
        a = self.a
        assert self.lib.wavepe_cuda_attention_check(C.byref(a), 0, self.splits, None) == 0
        ws = self.lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(a), self.splits)
        wb = E.Buf((max(ws, 1),), np.uint8)
        E.check(self.lib.wavepe_cuda_attention_fwd(C.byref(a), self.splits, wb.ptr, ws, None))
        for b in self.bufs + [self.out, self.lse, wb]:
            b.check_guards()
        return E.values(self.out.arr, self.dtype), np.asarray(self.lse.arr, np.float64)

    def backward(self, want_dtable, want_dslopes=False, grad_lse=False):
        B, H, Hk, M, N, d = self.shape
        a = self.a
        extra = []
        if grad_lse:
            self.grad_lse = np.random.default_rng(99).standard_normal((B, H, M))
            gl = put(self.grad_lse.astype(np.float64 if self.dtype == E.F64 else np.float32), None)
            a.dlse = gl.ptr
            extra.append(gl)
        dsb = None
        if want_dslopes:
            dsb = E.Buf((H,), np.float64 if self.dtype == E.F64 else np.float32)
            a.dslopes = dsb.ptr
            extra.append(dsb)
        self.dq = E.Buf((B, H, M, d), E.np_dtype(self.dtype))
        self.dk = E.Buf((B, Hk, N, d), E.np_dtype(self.dtype))
        self.dv = E.Buf((B, Hk, N, d), E.np_dtype(self.dtype))
        a.dq, a.dk, a.dv = self.dq.ptr, self.dk.ptr, self.dv.ptr
        dtb = E.Buf(self.table.shape, E.np_dtype(self.dtype)) if want_dtable else None
        a.dtable = dtb.ptr if dtb else None
        assert self.lib.wavepe_cuda_attention_check(C.byref(a), 1, 1, None) == 0
        ws = self.lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(a))
        wb = E.Buf((max(ws, 1),), np.uint8)
        E.check(self.lib.wavepe_cuda_attention_bwd(C.byref(a), wb.ptr, ws, None))
        for b in self.bufs + [self.dq, self.dk, self.dv, wb] + ([dtb] if dtb else []) + extra:
            b.check_guards()
        grads = {n: E.values(b.arr, self.dtype) for n, b in (("dq", self.dq), ("dk", self.dk), ("dv", self.dv))}
        if dtb:
            grads["dtable"] = E.values(dtb.arr, self.dtype)
        if dsb:
            grads["dslopes"] = np.asarray(dsb.arr, np.float64)
        return grads

    def documents(self):
        """(batch row, first key, end key, first query row, end query row) of every document
        holding a query (every row one document without cu_seqlens)."""
        B, H, Hk, M, N, d = self.shape
        for b in range(B):
            cu = [0, N] if self.cu is None else self.cu[b].tolist()
            for s, e in zip(cu[:-1], cu[1:]):
                m0, m1 = max(s, self.off) - self.off, min(e, self.off + M) - self.off
                if s < e and m0 < m1:
                    yield b, s, e, m0, m1

    def oracle(self, grad_lse=None, grads=True):
        """The float64 answers: out and lse, and the gradients unless grads=False (a packed problem's always)."""
        r = lambda x: None if x is None else E.rounded(x, self.dtype)  # noqa: E731
        slopes = self.slopes if self.slopes is None or self.dtype == E.F64 else self.slopes.astype(np.float32)
        if self.cu is not None:
            return self.packed_oracle(r, slopes, grad_lse)
        go = r(self.go) if grads else None
        return ref.attention_with_grads(r(self.q), r(self.k), r(self.v), go, self.scale, self.off,
                                        self.causal, ("none", "relative", "alibi")[self.pe], table=r(self.table),
                                        r_lo=self.r_lo, clamp=self.clamp, slopes=slopes,
                                        key_padding_mask=self.kpm, grad_lse=grad_lse, window=self.window,
                                        softcap=self.softcap)

    def packed_oracle(self, r, slopes, grad_lse):
        """The float64 oracle of a packed problem: each document run alone (its queries against its
        keys, distances as in the packed row), assembled; keys of documents without a query get
        zero gradients."""
        B, H, Hk, M, N, d = self.shape
        q, k, v, go, table = r(self.q), r(self.k), r(self.v), r(self.go), r(self.table)
        res = dict(out=np.zeros((B, H, M, d)), lse=np.full((B, H, M), -np.inf), dq=np.zeros((B, H, M, d)),
                   dk=np.zeros((B, Hk, N, d)), dv=np.zeros((B, Hk, N, d)))
        if self.pe == 1:
            res["dtable"] = np.zeros(self.table.shape)
        if self.pe == 2:
            res["dslopes"], res["dslopes_mag"] = np.zeros(H), np.zeros(H)
        for b, s, e, m0, m1 in self.documents():
            rows, keys = (slice(b, b + 1), slice(None), slice(m0, m1)), (slice(b, b + 1), slice(None), slice(s, e))
            w = ref.attention_with_grads(q[rows], k[keys], v[keys], go[rows], self.scale, self.off + m0 - s,
                                         self.causal, ("none", "relative", "alibi")[self.pe], table=table,
                                         r_lo=self.r_lo, clamp=self.clamp, slopes=slopes,
                                         key_padding_mask=None if self.kpm is None else self.kpm[b:b + 1, s:e],
                                         grad_lse=None if grad_lse is None else grad_lse[rows],
                                         window=self.window, softcap=self.softcap)
            for name in ("out", "lse", "dq"):
                res[name][rows] = w[name]
            for name in ("dk", "dv"):
                res[name][keys] = w[name]
            for name in ("dtable", "dslopes", "dslopes_mag"):
                if name in res:
                    res[name] += w[name]
        return res


def check_attention(lib, dtype, *, backward=True, want_dtable=None, want_dslopes=None, grad_lse=False, **kw):
    prob = Attn(lib, dtype, **kw)
    out, lse = prob.forward()
    B, H, Hk, M, N, d = prob.shape
    gl = np.random.default_rng(99).standard_normal((B, H, M)) if grad_lse else None
    if gl is not None and dtype != E.F64:
        gl = gl.astype(np.float32).astype(np.float64)
    want = prob.oracle(gl, grads=backward)
    B, H, Hk, M, N, d = prob.shape
    inner = dtype in (E.BF16, E.F16)
    assert_close(out, want["out"], dtype, N, "out", inner)
    fin = np.isfinite(want["lse"])
    assert (np.isfinite(lse) == fin).all(), "lse: -inf rows differ"
    assert (out[~fin] == 0).all(), "rows without keys must be 0"
    assert_close(lse[fin], want["lse"][fin], dtype if dtype == E.F64 else E.F32, d, "lse")
    if backward:
        if want_dtable is None:
            want_dtable = prob.pe == 1
        if want_dslopes is None:
            want_dslopes = prob.pe == 2
        grads = prob.backward(want_dtable, want_dslopes=want_dslopes, grad_lse=grad_lse)
        prob.grads, prob.want = grads, want  # (for a test's further checks)
        group = H // Hk
        # each dS term carries two d-long dot products, dP = dO . v and delta = dO . O, which cancel where P
        # is 1 (a row with one key): 2 d counts beside the terms each gradient sums (hypothesis found
        # M = N = 1, d = 30 above bounds counting d once (dk, fp64) or not at all (dtable, fp32))
        for name, terms in (("dq", 2 * N * d), ("dk", 2 * M * d * group), ("dv", M * group)):
            assert_close(grads[name], want[name], dtype, terms, name, inner)
        if want_dtable:
            assert_close(grads["dtable"], want["dtable"], dtype, 2 * B * H * M * N * d, "dtable", inner)
        if want_dslopes:
            # dS |r| summed over B M N terms: bounded by the magnitude of the parts of dS
            err = np.abs(grads["dslopes"] - want["dslopes"])
            bound = tol(dtype, d + B * M * N, inner) * (want["dslopes_mag"] + 1e-30)
            assert (err <= bound).all(), f"dslopes: error {err.max():.3e}, bound {bound.min():.3e}"
    return prob


CASES = [
    # (B, H, Hk, M, N, d, off, causal, pe, R, r_lo, clamp, kpm, splits)
    dict(B=1, H=2, Hk=1, M=20, N=20, d=16, off=0, causal=True, pe=0),
    dict(B=1, H=2, Hk=2, M=70, N=90, d=24, off=20, causal=True, pe=1, R=40, r_lo=0),
    dict(B=2, H=2, Hk=1, M=33, N=50, d=40, off=17, causal=False, pe=2, kpm=True),
    dict(B=1, H=2, Hk=1, M=40, N=45, d=12, off=5, causal=False, pe=1, R=7, r_lo=-3, clamp=True),
    dict(B=1, H=1, Hk=1, M=1, N=130, d=32, off=129, causal=True, pe=1, R=30, r_lo=0, splits=3),
    dict(B=1, H=4, Hk=2, M=3, N=50, d=8, off=-10, causal=True, pe=0, kpm=True),       # rows with no key
    dict(B=1, H=1, Hk=1, M=0, N=7, d=8, off=0, causal=True, pe=1, R=3),               # no queries
    dict(B=1, H=2, Hk=1, M=5, N=0, d=8, off=0, causal=False, pe=0),                  # no keys
    dict(B=1, H=1, Hk=1, M=17, N=17, d=72, off=0, causal=True, pe=1, R=20, r_lo=1),  # DMAX 128 bucket
    dict(B=1, H=1, Hk=1, M=18, N=21, d=136, off=3, causal=True, pe=1, R=9, r_lo=0, kpm=True),  # DMAX 256
    dict(B=1, H=3, Hk=1, M=9, N=66, d=20, off=57, causal=True, pe=2, splits=4),      # GQA decode, ALiBi
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_attention_matches_oracle(lib, dtype, case):
    kw = dict(CASES[case])
    if dtype == E.F64 and kw["d"] > 128:
        pytest.skip("float64 takes head_dim <= 128 (asserted in test_attention_float64_head_dim_limit)")
    check_attention(lib, dtype, seed=case, **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), B=st.integers(1, 2), Hk=st.integers(1, 2), group=st.integers(1, 2),
       M=st.integers(0, 40), N=st.integers(0, 70), d=st.sampled_from([4, 10, 16, 30]), off=st.integers(-5, 80),
       causal=st.booleans(), pe=st.integers(0, 2), R=st.integers(1, 50), r_lo=st.integers(-10, 20),
       clamp=st.booleans(), kpm=st.booleans(), splits=st.integers(1, 3), row_pad=st.sampled_from([0, 8]),
       grad_lse=st.booleans(), seed=st.integers(0, 2**31))
def test_attention_random_shapes(lib, dtype, B, Hk, group, M, N, d, off, causal, pe, R, r_lo, clamp, kpm, splits,
                                 row_pad, grad_lse, seed):
    check_attention(lib, dtype, B=B, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, R=R,
                    r_lo=r_lo, clamp=clamp, kpm=kpm, splits=splits, seed=seed, row_pad=row_pad, grad_lse=grad_lse)


# ---- packed sequences (cu_seqlens) ---------------------------------------------------------

PACKED = [
    # an empty document, a length-1 one, documents across tile boundaries; queries = the whole row
    dict(B=1, H=2, Hk=1, M=70, N=70, d=16, off=0, causal=True, pe=1, R=60, r_lo=-20,
         cu=[[0, 5, 5, 6, 30, 70]]),
    # B=2 with different boundaries per row, GQA, ALiBi, padding, queries = the row's tail
    dict(B=2, H=4, Hk=2, M=50, N=90, d=24, off=40, causal=False, pe=2, kpm=True,
         cu=[[0, 17, 17, 60, 61, 90], [0, 1, 40, 41, 41, 90]]),
    dict(B=2, H=2, Hk=1, M=64, N=64, d=12, off=0, causal=False, pe=0, cu=[[0, 33, 34, 64], [0, 10, 50, 64]]),
    dict(B=2, H=2, Hk=2, M=45, N=45, d=20, off=0, causal=False, pe=1, R=9, r_lo=-4, clamp=True,
         cu=[[0, 1, 2, 45], [0, 44, 44, 45]]),
    # decoding inside the last document, split-KV: most splits see no key of it
    dict(B=1, H=1, Hk=1, M=1, N=130, d=32, off=100, causal=True, pe=1, R=30, r_lo=0, splits=3,
         cu=[[0, 64, 99, 130]]),
    dict(B=1, H=3, Hk=1, M=9, N=66, d=20, off=57, causal=True, pe=2, splits=4, cu=[[0, 20, 58, 58, 66]]),
    dict(B=2, H=2, Hk=1, M=40, N=40, d=8, off=0, causal=True, pe=0, kpm=True, cu=[[0, 40, 40], [0, 3, 40]]),
    dict(B=1, H=1, Hk=1, M=37, N=37, d=72, off=0, causal=True, pe=1, R=20, r_lo=1, cu=[[0, 16, 17, 37]]),  # DMAX 128
    dict(B=1, H=1, Hk=1, M=40, N=40, d=136, off=0, causal=True, pe=1, R=24, r_lo=-8, kpm=True,
         cu=[[0, 1, 21, 40]]),  # DMAX 256
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", range(len(PACKED)))
def test_packed_attention_equals_each_document_alone(lib, dtype, case):
    """A packed row (cu_seqlens): outputs, lse and every gradient equal each document run alone
    (the float64 oracle per document, distances as in the packed row), on every dtype."""
    kw = dict(PACKED[case])
    if dtype == E.F64 and kw["d"] > 128:
        pytest.skip("float64 takes head_dim <= 128")
    check_attention(lib, dtype, seed=100 + case, grad_lse=case % 2 == 0, **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), B=st.integers(1, 2), Hk=st.integers(1, 2), group=st.integers(1, 2),
       N=st.integers(1, 80), cuts=st.integers(0, 5), data=st.data(), d=st.sampled_from([4, 10, 16, 30]),
       causal=st.booleans(), pe=st.integers(0, 2), R=st.integers(1, 50), r_lo=st.integers(-30, 10),
       clamp=st.booleans(), kpm=st.booleans(), splits=st.integers(1, 3), row_pad=st.sampled_from([0, 8]),
       seed=st.integers(0, 2**31))
def test_packed_attention_random_documents(lib, dtype, B, Hk, group, N, cuts, data, d, causal, pe, R, r_lo, clamp,
                                           kpm, splits, row_pad, seed):
    cu = [[0] + sorted(data.draw(st.lists(st.integers(0, N), min_size=cuts, max_size=cuts))) + [N]
          for _ in range(B)]
    M = data.draw(st.integers(1, N))
    off = data.draw(st.integers(0, N - M))
    check_attention(lib, dtype, B=B, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, R=R,
                    r_lo=r_lo, clamp=clamp, kpm=kpm, splits=splits, seed=seed, row_pad=row_pad, cu=cu,
                    grad_lse=seed % 2 == 1)


def test_packed_float64_equals_documents_run_alone_by_the_kernels(lib):
    """float64: the kernels on a packed row against the kernels on each document alone
    (its own q_offset, keys and padding), to 1e-9."""
    kw = dict(dtype=E.F64, H=4, Hk=2, d=24, causal=True, pe=1, R=50, r_lo=-25)
    cu = [[0, 1, 1, 30, 47, 90], [0, 45, 46, 46, 89, 90]]
    kpm = np.random.default_rng(3).random((2, 90)) < 0.2
    packed = Attn(lib, B=2, M=60, N=90, off=30, kpm=kpm, cu=cu, seed=9, **kw)
    out, lse = packed.forward()
    grads = packed.backward(want_dtable=True)
    dtable = np.zeros_like(grads["dtable"])
    for b, s, e, m0, m1 in packed.documents():
        rows, keys = (slice(b, b + 1), slice(None), slice(m0, m1)), (slice(b, b + 1), slice(None), slice(s, e))
        alone = Attn(lib, B=1, M=m1 - m0, N=e - s, off=packed.off + m0 - s, kpm=kpm[b:b + 1, s:e], seed=9,
                     inputs=dict(q=packed.q[rows], k=packed.k[keys], v=packed.v[keys], go=packed.go[rows],
                                 table=packed.table), **kw)
        o1, l1 = alone.forward()
        g1 = alone.backward(want_dtable=True)
        np.testing.assert_allclose(out[rows], o1, rtol=0, atol=1e-9)
        np.testing.assert_allclose(lse[rows], l1, rtol=0, atol=1e-9)
        np.testing.assert_allclose(grads["dq"][rows], g1["dq"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(grads["dk"][keys], g1["dk"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(grads["dv"][keys], g1["dv"], rtol=0, atol=1e-9)
        dtable += g1["dtable"]
    np.testing.assert_allclose(grads["dtable"], dtable, rtol=0, atol=1e-9)
    # keys of row 0's documents before the first query (position 30): no query sees them
    assert (grads["dk"][0, :, :30] == 0).all() and (grads["dv"][0, :, :30] == 0).all()


# ---- sliding windows and logit soft-caps ------------------------------------------------------
# window: a query sees the keys at |pos_q - n| < window (with causal Mistral's pos_q - window < n <= pos_q);
# softcap: each score s becomes softcap tanh(s / softcap) before the mask, dS gets 1 - tanh^2.  Against
# the float64 oracle, every dtype; the tiles (forward BN 16 .. 64, backward B 16 .. 64 by dtype and head
# dim) put the windows below, inside and across them.

WINDOWED = [
    # causal, a window narrower than every tile, a table: a band of a few diagonals per tile
    dict(B=1, H=2, Hk=1, M=70, N=70, d=16, off=0, causal=True, pe=1, R=40, r_lo=0, window=5),
    # causal, a window wider than the tiles: tiles wholly inside it (no mask), tiles before it skipped
    dict(B=1, H=2, Hk=2, M=150, N=160, d=24, off=10, causal=True, pe=0, window=70),
    # not causal (|r| < window: two edges), ALiBi, padding
    dict(B=2, H=2, Hk=1, M=60, N=90, d=12, off=20, causal=False, pe=2, kpm=True, window=9),
    # window 1: causal sees itself only; not causal the key at its own position only (none past N)
    dict(B=1, H=2, Hk=1, M=40, N=35, d=8, off=0, causal=True, pe=1, R=9, r_lo=-4, window=1),
    dict(B=1, H=1, Hk=1, M=40, N=35, d=8, off=-3, causal=False, pe=2, window=1),
    # decoding: a long cache and a short window, split-KV over the window's keys
    dict(B=1, H=1, Hk=1, M=1, N=700, d=32, off=699, causal=True, pe=1, R=60, r_lo=0, window=40, splits=8),
    dict(B=2, H=4, Hk=1, M=3, N=500, d=20, off=497, causal=True, pe=2, kpm=True, window=100, splits=6),  # GQA
    # GQA; queries before the keys and past them whose window holds none; a clamped table
    dict(B=1, H=4, Hk=2, M=50, N=40, d=10, off=-15, causal=False, pe=1, R=7, r_lo=-3, clamp=True, window=12),
    # a window wider than the sequence: the plain masks
    dict(B=1, H=2, Hk=1, M=33, N=45, d=16, off=12, causal=True, pe=1, R=50, r_lo=-10, window=2**60),
    # the DMAX 128 and 256 buckets
    dict(B=1, H=1, Hk=1, M=50, N=50, d=72, off=0, causal=True, pe=1, R=30, r_lo=0, window=17),
    dict(B=1, H=1, Hk=1, M=40, N=44, d=136, off=4, causal=False, pe=0, kpm=True, window=20),
]

SOFTCAPPED = [
    # scale 1: scores of size ~sqrt(d) against caps of a few units, well into tanh's bend
    dict(B=1, H=2, Hk=1, M=70, N=70, d=16, off=0, causal=True, pe=1, R=40, r_lo=-5, scale=1.0, softcap=3.0),
    dict(B=2, H=2, Hk=1, M=33, N=50, d=24, off=17, causal=False, pe=2, kpm=True, scale=0.5, softcap=2.0),
    dict(B=1, H=4, Hk=2, M=40, N=45, d=12, off=5, causal=True, pe=0, softcap=0.7),  # GQA
    dict(B=1, H=1, Hk=1, M=1, N=300, d=32, off=299, causal=True, pe=1, R=80, r_lo=0, softcap=5.0, splits=4),
    dict(B=1, H=2, Hk=1, M=64, N=80, d=20, off=16, causal=True, pe=2, softcap=1.5, window=24, scale=0.8),
    dict(B=1, H=1, Hk=1, M=37, N=37, d=72, off=0, causal=False, pe=1, R=9, r_lo=-4, clamp=True, softcap=2.5),
    dict(B=1, H=1, Hk=1, M=40, N=40, d=136, off=0, causal=True, pe=1, R=24, r_lo=-8, kpm=True, softcap=4.0,
         scale=0.3),
]

PACKED_WINDOWED = [
    dict(B=1, H=2, Hk=1, M=70, N=70, d=16, off=0, causal=True, pe=1, R=60, r_lo=-20, cu=[[0, 5, 5, 6, 30, 70]],
         window=8),
    dict(B=2, H=4, Hk=2, M=50, N=90, d=24, off=40, causal=False, pe=2, kpm=True, window=11, softcap=2.0,
         cu=[[0, 17, 17, 60, 61, 90], [0, 1, 40, 41, 41, 90]]),
    dict(B=1, H=3, Hk=1, M=9, N=66, d=20, off=57, causal=True, pe=2, splits=4, cu=[[0, 20, 58, 58, 66]], window=5),
    # documents that continue past the keys (a tile of a longer packed row): queries at positions >= N
    # see the keys of their document, and the dK/dV kernel counts them
    dict(B=1, H=1, Hk=1, M=40, N=50, d=8, off=30, causal=True, pe=0, cu=[[0, 20, 100]]),
    dict(B=1, H=2, Hk=1, M=40, N=50, d=8, off=30, causal=False, pe=1, R=40, r_lo=-20, cu=[[0, 20, 100]], window=15),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", range(len(WINDOWED)))
def test_attention_window_matches_oracle(lib, dtype, case):
    kw = dict(WINDOWED[case])
    if dtype == E.F64 and kw["d"] > 128:
        pytest.skip("float64 takes head_dim <= 128")
    check_attention(lib, dtype, seed=200 + case, grad_lse=case % 2 == 1, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", range(len(SOFTCAPPED)))
def test_attention_softcap_matches_oracle(lib, dtype, case):
    kw = dict(SOFTCAPPED[case])
    if dtype == E.F64 and kw["d"] > 128:
        pytest.skip("float64 takes head_dim <= 128")
    prob = check_attention(lib, dtype, seed=300 + case, grad_lse=case % 2 == 0, **kw)
    # the cap bends the scores: the result differs from the uncapped one by far more than the tolerance
    if case == 0 and dtype == E.F64:
        plain = prob.oracle()
        assert np.abs(plain["out"] - ref.attention_with_grads(
            *(E.rounded(x, dtype) for x in (prob.q, prob.k, prob.v, prob.go)), prob.scale, prob.off, prob.causal,
            "relative", table=prob.table, r_lo=prob.r_lo)["out"]).max() > 1e-2


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", range(len(PACKED_WINDOWED)))
def test_packed_attention_with_window_equals_each_document_alone(lib, dtype, case):
    check_attention(lib, dtype, seed=400 + case, grad_lse=case % 2 == 1, **PACKED_WINDOWED[case])


@pytest.mark.parametrize("dtype", [E.F32, E.BF16, E.F64], ids=DTYPE_IDS.get)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "both_sides"])
@pytest.mark.parametrize("window", [1, 2, 3, 16, 17, 18, 33, 34, 65, 66])
def test_window_edges_at_tile_boundaries(lib, dtype, causal, window):
    """Windows at and one or two past each tile size (16, 32, 64; q_offset 0): a diagonal of tiles whose
    nearest distance is window - 1 (one visible distance: the table gradient's diagonals, the dK/dV
    kernel's query blocks, the forward's first key block) next to one whose nearest is window (none)."""
    check_attention(lib, dtype, B=1, H=2, Hk=1, M=100, N=110, d=8, off=0, causal=causal, pe=1, R=70,
                    r_lo=-35, window=window, seed=window)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("off,window,causal", [
    (699, 61, True),    # first visible key 639: the last key of a block of 16, 32 and 64
    (699, 60, True),    # first visible key 640: the first of a block
    (640, 30, True),    # last visible key 640 (the query's own): the first of a block
    (600, 41, False),   # last visible key 640 (600 + 41 - 1): the first of a block; first 560
    (600, 40, False),   # last visible key 639
])
def test_decode_window_edges_on_key_blocks(lib, dtype, off, window, causal):
    """Split-KV decoding over the keys some query can see: windows whose first or last visible key is
    the first or last key of a block (blocks of 16, 32 and 64 keys)."""
    check_attention(lib, dtype, B=1, H=2, Hk=1, M=1, N=700, d=16, off=off, causal=causal, pe=2, window=window,
                    splits=5, seed=off + window)


def test_window_wider_than_every_distance_changes_no_bit(lib):
    # the same row ranges as without a window, so the same work in the same order
    kw = dict(B=2, H=2, Hk=1, M=45, N=60, d=16, off=10, causal=False, pe=1, R=30, r_lo=-12, kpm=True, seed=8)
    runs = []
    for window in (0, 60 + 45 + 10, 2**60):
        prob = Attn(lib, E.BF16, window=window, **kw)
        runs.append(prob.forward() + tuple(prob.backward(True).values()))
    for other in runs[1:]:
        for x, y in zip(runs[0], other):
            assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("order", ["reverse", "random"])
def test_window_softcap_results_do_not_depend_on_thread_order(lib, monkeypatch, order):
    # the windowed, capped paths (q staged after the row ranges, the dK/dV kernel's fused step) keep
    # their barriers: fibers in another order give the same bits
    kw = dict(B=1, H=2, Hk=1, M=70, N=80, d=24, off=10, causal=True, pe=1, R=60, r_lo=-2, seed=12, window=20,
              softcap=1.5)
    runs = []
    for o in (None, order):
        if o:
            monkeypatch.setenv("WAVEPE_EMU_ORDER", o)
        prob = Attn(lib, E.BF16, **kw)
        runs.append(prob.forward() + tuple(prob.backward(True).values()))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def test_split_kv_divides_only_the_visible_keys(lib):
    """Decoding with a window: the split count and the workspace count the key blocks of the window, not
    of the cache (bf16, d = 128: the tensor-core loop's blocks of 64 keys; the emulated device has 4 SMs)."""
    def problem(window, N=4096):
        return Attn(lib, E.BF16, B=1, H=1, Hk=1, M=1, N=N, d=128, off=N - 1, causal=True, pe=0, window=window)

    def workspace_rows(prob, splits):  # splits x B H M rows of d float partials, lse, seen flags
        ws = lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(prob.a), splits)
        if ws == 0:
            return 1
        per = lambda x: (x + 255) // 256 * 256  # noqa: E731
        got = [s for s in range(1, 65) if per(s * 128 * 4) + per(s * 4) + per(s) == ws]
        assert len(got) == 1
        return got[0]

    assert lib.wavepe_cuda_attention_num_splits(C.byref(problem(0).a)) == 8  # 64 blocks: 2 CTAs per SM
    assert workspace_rows(problem(0), 64) == 64
    # window 100: keys 3996 .. 4095, blocks 62 and 63: one pass
    assert lib.wavepe_cuda_attention_num_splits(C.byref(problem(100).a)) == 1
    assert workspace_rows(problem(100), 64) == 2
    # window 1000: keys 3096 .. 4095, blocks 48 .. 63
    assert lib.wavepe_cuda_attention_num_splits(C.byref(problem(1000).a)) == 8
    assert workspace_rows(problem(1000), 64) == 16
    # and the split pass over them equals the single pass
    kw = dict(B=1, H=2, Hk=1, M=2, N=1500, d=24, off=1498, causal=True, pe=1, R=200, r_lo=0, window=300, seed=6)
    one = Attn(lib, E.F32, splits=1, **kw).forward()
    many = Attn(lib, E.F32, splits=7, **kw).forward()
    np.testing.assert_allclose(many[0], one[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(many[1], one[1], rtol=1e-6, atol=1e-6)


# the split-KV combine (attn_combine_kernel): more splits than a warp has lanes (a lane reads two or three of them),
# the partials by 16-byte loads (4 fp32 or 2 fp64) and by columns (a head dim not a multiple of 4), padded keys (a
# split may see none: its workspace rows, NaN-filled here, must stay unread)
COMBINE_CASES = [
    (dict(B=1, H=4, Hk=1, M=1, N=2600, d=128, off=2599, causal=True, pe=1, R=60, r_lo=0, splits=41), E.BF16),
    (dict(B=1, H=2, Hk=2, M=3, N=1500, d=33, off=1497, causal=True, pe=2, kpm=True, splits=47), E.F32),
    (dict(B=1, H=2, Hk=1, M=2, N=1200, d=30, off=1198, causal=True, pe=0, splits=38), E.F64),
]


@pytest.mark.parametrize("case", range(len(COMBINE_CASES)))
def test_split_kv_combine_over_more_splits_than_lanes_matches_oracle(lib, case):
    kw, dtype = COMBINE_CASES[case]
    prob = check_attention(lib, dtype, backward=False, seed=70 + case, **kw)
    rows = kw["B"] * kw["H"] * kw["M"]  # the workspace holds every split's rows: as many splits as asked
    acc = 8 if dtype == E.F64 else 4
    ws = lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(prob.a), kw["splits"])
    assert ws >= kw["splits"] * rows * kw["d"] * acc, ws


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), B=st.integers(1, 2), Hk=st.integers(1, 2), group=st.integers(1, 2),
       M=st.integers(0, 40), N=st.integers(0, 90), d=st.sampled_from([4, 10, 16, 30]), off=st.integers(-20, 100),
       causal=st.booleans(), pe=st.integers(0, 2), R=st.integers(1, 50), r_lo=st.integers(-20, 20),
       clamp=st.booleans(), kpm=st.booleans(), splits=st.integers(1, 4),
       window=st.one_of(st.integers(1, 40), st.sampled_from([0, 16, 17, 32, 33, 64, 65])),
       softcap=st.sampled_from([0.0, 0.5, 2.0, 8.0]), grad_lse=st.booleans(), seed=st.integers(0, 2**31))
def test_attention_window_softcap_random_shapes(lib, dtype, B, Hk, group, M, N, d, off, causal, pe, R, r_lo, clamp,
                                                kpm, splits, window, softcap, grad_lse, seed):
    # (scores of size ~1 at the default scale: caps of 0.5 and 2 bend them)
    check_attention(lib, dtype, B=B, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, R=R,
                    r_lo=r_lo, clamp=clamp, kpm=kpm, splits=splits, seed=seed, grad_lse=grad_lse, window=window,
                    softcap=softcap)


# ---- the tensor-core forward of the models' head dims ------------------------------------------
# attn_fwd_tc_kernel (csrc/cuda/attention.cu: bf16/fp16, head_dim 64 or 128, 16-byte rows): whole and
# partial blocks, the causal diagonal, offsets, GQA, padding, ALiBi, soft-cap, windows, documents,
# split-KV decoding, rows that see no key, and the relative table: a band narrower than the sequence
# (interior blocks on one side or both), a table meeting every block, clamped edges.
TC_CASES = [
    dict(B=1, H=2, Hk=1, M=130, N=130, d=128, off=0, causal=True, pe=0),
    dict(B=1, H=2, Hk=2, M=64, N=256, d=64, off=192, causal=True, pe=0),  # every tile interior but the last
    dict(B=1, H=1, Hk=1, M=70, N=200, d=64, off=130, causal=True, pe=2, kpm=True),
    dict(B=1, H=2, Hk=1, M=64, N=320, d=128, off=256, causal=True, pe=2),  # ALiBi on interior blocks
    dict(B=1, H=3, Hk=1, M=130, N=400, d=64, off=100, causal=False, pe=2, splits=2),  # on both sides of the queries
    dict(B=2, H=2, Hk=1, M=65, N=129, d=128, off=0, causal=False, pe=0, softcap=1.5),
    dict(B=1, H=2, Hk=1, M=100, N=160, d=64, off=60, causal=True, pe=2, window=70, softcap=3.0),
    dict(B=1, H=3, Hk=1, M=1, N=300, d=128, off=299, causal=True, pe=0, splits=3),
    dict(B=1, H=2, Hk=1, M=3, N=50, d=64, off=-10, causal=True, pe=0, kpm=True),
    dict(B=2, H=2, Hk=1, M=96, N=96, d=64, off=0, causal=True, pe=0, cu=[[0, 40, 41, 96], [0, 70, 70, 96]]),
    dict(B=1, H=2, Hk=1, M=64, N=320, d=128, off=256, causal=True, pe=1, R=90, r_lo=0),  # band: the last 2 blocks
    dict(B=1, H=2, Hk=2, M=130, N=300, d=64, off=100, causal=False, pe=1, R=100, r_lo=-50),  # interior both sides
    dict(B=1, H=1, Hk=1, M=64, N=400, d=64, off=0, causal=False, pe=1, R=40, r_lo=-20),  # interior after the band
    dict(B=1, H=1, Hk=1, M=70, N=140, d=128, off=40, causal=True, pe=1, R=9, r_lo=-3, clamp=True, kpm=True),
    dict(B=1, H=2, Hk=1, M=100, N=200, d=64, off=100, causal=True, pe=1, R=150, r_lo=20, window=120, softcap=2.0),
    dict(B=1, H=3, Hk=1, M=1, N=400, d=128, off=399, causal=True, pe=1, R=130, r_lo=0, splits=4),
    # soft-capped interior blocks: in the band (the last 2 blocks) and not; without a bias at d = 64
    dict(B=1, H=2, Hk=1, M=64, N=320, d=128, off=256, causal=True, pe=1, R=90, r_lo=0, softcap=2.0),
    dict(B=1, H=2, Hk=1, M=128, N=256, d=64, off=0, causal=False, pe=0, softcap=3.0),
    # head_dim 256 (Q's fragments read from the Q tile at each step, 32 keys a block): interior blocks with and
    # without the table's band, ALiBi, a soft-cap with a window, split-KV decoding
    dict(B=1, H=2, Hk=1, M=70, N=200, d=256, off=130, causal=True, pe=0),
    dict(B=1, H=2, Hk=1, M=64, N=260, d=256, off=196, causal=True, pe=1, R=70, r_lo=0),
    dict(B=1, H=2, Hk=1, M=64, N=160, d=256, off=96, causal=True, pe=2, kpm=True),
    dict(B=1, H=2, Hk=1, M=80, N=150, d=256, off=40, causal=True, pe=1, R=60, r_lo=-10, window=50, softcap=2.0),
    dict(B=1, H=2, Hk=1, M=1, N=300, d=256, off=299, causal=True, pe=1, R=90, r_lo=0, splits=3),
    # 32 rows a warp (attn_fwd_tc_wide_kernel: head_dim 128, no table, more than 64 queries; cases 0 and 5 above too):
    # interior blocks for every row of a 128-row CTA, a last CTA whose second warps and m-tiles have no rows, ALiBi
    # and soft-capped interior blocks, a window, padding, documents, split-KV, GQA, non-causal
    dict(B=1, H=2, Hk=1, M=256, N=512, d=128, off=256, causal=True, pe=0),
    dict(B=1, H=2, Hk=2, M=150, N=400, d=128, off=250, causal=True, pe=2),
    dict(B=1, H=4, Hk=2, M=200, N=330, d=128, off=130, causal=True, pe=0, softcap=2.0, splits=2),
    dict(B=1, H=2, Hk=1, M=140, N=300, d=128, off=160, causal=True, pe=2, window=90, kpm=True),
    dict(B=2, H=2, Hk=1, M=160, N=160, d=128, off=0, causal=True, pe=0, cu=[[0, 70, 71, 160], [0, 130, 130, 160]]),
    dict(B=1, H=2, Hk=1, M=96, N=300, d=128, off=20, causal=False, pe=2, softcap=1.0),
    dict(B=1, H=2, Hk=1, M=140, N=400, d=128, off=260, causal=True, pe=0),  # interior blocks in a last CTA of 12 rows
    # ... at head_dim 64 (blocks of 64 keys; cases 2, 4, 6, 9 and 17 above too): interior blocks, ALiBi's
    dict(B=1, H=2, Hk=1, M=256, N=512, d=64, off=256, causal=True, pe=2),
    # 16 rows a warp without a table, 64 queries or fewer: ALiBi's and soft-capped interior blocks
    dict(B=1, H=2, Hk=1, M=64, N=320, d=64, off=256, causal=True, pe=2),
    dict(B=1, H=2, Hk=1, M=64, N=256, d=128, off=192, causal=True, pe=0, softcap=2.0),
    # with a table and more than 64 queries (cases 11, 13, 14 too; 16 rows a warp): the band's blocks and those
    # beyond it, soft-capped ones, both sides of the queries with GQA and split-KV
    dict(B=1, H=2, Hk=1, M=256, N=512, d=128, off=256, causal=True, pe=1, R=150, r_lo=0),
    dict(B=1, H=2, Hk=1, M=200, N=400, d=128, off=200, causal=True, pe=1, R=120, r_lo=0, softcap=2.0),
    dict(B=1, H=4, Hk=2, M=150, N=300, d=64, off=0, causal=False, pe=1, R=200, r_lo=-100, splits=2),
    # decoding with a table, GQA heads packed (all rows at one position), the band over many blocks at head_dim 128:
    # its window a ring, the previous block's window products reused; split-KV; a clamped table (every block a band
    # block)
    dict(B=1, H=4, Hk=2, M=1, N=700, d=128, off=699, causal=True, pe=1, R=400, r_lo=0, splits=2),
    dict(B=1, H=4, Hk=2, M=1, N=700, d=128, off=699, causal=True, pe=1, R=40, r_lo=0, clamp=True),
]


def fwd_kernel(lib, prob):
    lib.wavepe_cuda_attention_fwd_kernel.restype = C.c_char_p
    return lib.wavepe_cuda_attention_fwd_kernel(C.byref(prob.a)).decode()


@pytest.mark.parametrize("case,dtype", alternating(range(len(TC_CASES))))
def test_tensor_core_forward_matches_oracle(lib, dtype, case):
    kw = dict(TC_CASES[case])
    prob = Attn(lib, dtype, seed=300 + case, **kw)
    d, table = kw["d"], kw["pe"] == 1
    wide = d <= 128 and not table and kw["M"] > 64
    kernel = fwd_kernel(lib, prob)
    assert kernel.startswith("tensor-core")  # (the decoding cases pack their GQA heads)
    assert (kernel == "tensor-core, 32 rows a warp") == wide
    # TcFwdTiles: a Q tile of 64 rows and K, V tiles of bn keys (128 at d = 64, 64 at 128, 32 at 256; the wide
    # instance: 128 rows, 64 keys at d = 64, 32 at 128), rows of d + 8 elements; with a table its window's 64 + bn rows
    # (its bias reaches the scores by shuffles: no scratch); bn key flags, a row range a query row.  Q's fragments in
    # registers (16 rows a warp, d <= 128) without a table: Q's tile in V's
    bm, bn = (128, 64 if d == 64 else 32) if wide else (64, {64: 128, 128: 64, 256: 32}[d])
    q_in_v = not wide and d <= 128 and not table
    rows = (0 if q_in_v else bm) + 2 * bn + (64 + bn if table else 0)
    want = rows * (d + 8) * 2 + bn + bm * 16
    assert lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a)) == want
    check_attention(lib, dtype, backward=False, seed=300 + case, **kw)


def test_kernel_log_names_each_instance_launched(lib, monkeypatch, tmp_path):
    # WAVEPE_EMU_KERNEL_LOG (the tool that tells which kernel instances a set of tests runs): a forward of 64 keys at
    # head dim 64 in fp16 and one in bf16 at 128, then the first again -- each instance named once, template
    # arguments and all; a second file names again what ran before it
    kw = dict(B=1, H=1, Hk=1, M=16, N=64, off=48, causal=True, pe=0)

    def run():
        for dtype, d in [(E.F16, 64), (E.BF16, 128), (E.F16, 64)]:
            check_attention(lib, dtype, backward=False, d=d, seed=1, **kw)

    want = {"attn_fwd_tc_kernel<__half, 64, false>(wavepe_cuda::AttnParams)",
            "attn_fwd_tc_kernel<__nv_bfloat16, 128, false>(wavepe_cuda::AttnParams)"}
    assert kernels_launched_by(monkeypatch, tmp_path / "a", run) == want
    assert len((tmp_path / "a" / "kernels").read_text().split()) == 2
    assert kernels_launched_by(monkeypatch, tmp_path / "b", run) == want
    assert {KERNEL_PREFIX + k for k in want} < E.compiled_kernels()


@pytest.mark.parametrize("case,dtype", alternating(c for c, kw in enumerate(TC_CASES)
                                                     if kw["d"] <= 128 and kw["pe"] != 1 and kw["M"] > 64))
def test_tensor_core_forward_16_rows_a_warp_matches_oracle(lib, monkeypatch, dtype, case):
    # WAVEPE_CUDA_WIDE=0 (the benchmark's A/B) keeps the wide instance's calls on attn_fwd_tc_kernel's 16 rows a warp
    monkeypatch.setenv("WAVEPE_CUDA_WIDE", "0")
    kw = dict(TC_CASES[case])
    assert fwd_kernel(lib, Attn(lib, dtype, seed=300 + case, **kw)) == "tensor-core"
    check_attention(lib, dtype, backward=False, seed=300 + case, **kw)


def test_tensor_core_forward_rows_a_warp_by_the_sm(lib, monkeypatch):
    # wide_holds_sm: a table-free call of more than 64 queries runs the wide instance where an SM holds as many of its
    # CTAs as of the 16-row one's -- on an A100's or H100's SM two of either; on a 100 KiB SM (sm_86 / sm_89 / sm_120)
    # at head_dim 128 one wide (54,304 bytes) and two 16-row (35,904: Q's tile in V's), so the 16-row one; at 64 two
    # of either (38,976; 38,016).  The checker's SM_100KIB_SHAPE states the CTA taken there; the oracle on it.
    ck = kernel_checks()
    kw = dict(B=1, H=2, Hk=1, M=150, N=170, off=20, causal=True, pe=2, window=90, kpm=True)
    devices = {"A100": {}, "H100": H100_SM, "RTX 4090": SM_99_KIB}
    for dev, env in devices.items():
        with mock.patch.dict(os.environ, env):
            for d in (64, 128):
                prob = Attn(lib, E.BF16, d=d, **kw)
                wide = dev != "RTX 4090" or d == 64
                assert fwd_kernel(lib, prob) == ("tensor-core, 32 rows a warp" if wide else "tensor-core"), (dev, d)
                smem = lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a))
                if dev == "RTX 4090":
                    kernel = "attn_fwd_tc_wide_kernel" if wide else "attn_fwd_tc_kernel"
                    assert ck.SM_100KIB_SHAPE[(kernel, f"{d}, false")] == (128, smem)
                    assert ck.occupancy(255, 128, smem, "sm_86") == (2, 8)
    assert ck.occupancy(255, 128, ck.CTA_SHAPE[("attn_fwd_tc_wide_kernel", "128, false")][1], "sm_86") == (1, 4)
    # a table keeps the 16-row instance everywhere (the band split aside); the calls the wide one never takes stay
    on_99_kib(monkeypatch)
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=128, **dict(kw, pe=1, R=30, window=0))) == "tensor-core"
    for dtype, seed in ((E.BF16, 41), (E.F16, 42)):
        check_attention(lib, dtype, backward=False, seed=seed, d=128, **kw)
    # WAVEPE_CUDA_WIDE=1 (the benchmark's A/B there) takes the wide instance all the same, the band split's first
    # partial too -- one CTA an SM as the table's: the split from kBandSplitKeysWide keys a row beyond the band
    monkeypatch.setenv("WAVEPE_CUDA_WIDE", "1")
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=128, **kw)) == "tensor-core, 32 rows a warp"
    assert fwd_kernel(lib, Attn(lib, E.BF16, **WIDE_BAND_SPLIT_CASES[0][0])) == "tensor-core"
    prob = Attn(lib, E.BF16, **WIDE_LONG_CASE)
    assert fwd_kernel(lib, prob) == "tensor-core, band split"
    launches(lib)
    prob.forward()
    assert launches(lib)[:3] == WIDE_BAND_SPLIT_LAUNCHES[128][0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([E.BF16, E.F16]), d=st.sampled_from([64, 128]), Hk=st.integers(1, 2),
       group=st.integers(1, 2), M=st.integers(65, 300), N=st.integers(1, 400), off=st.integers(-50, 300),
       causal=st.booleans(), pe=st.sampled_from([0, 2]), kpm=st.booleans(), splits=st.integers(1, 3),
       window=st.sampled_from([0, 0, 1, 40, 130]), softcap=st.sampled_from([0.0, 0.0, 2.0]), seed=st.integers(0, 2**31))
def test_tensor_core_forward_wide_random_shapes(lib, dtype, d, Hk, group, M, N, off, causal, pe, kpm, splits, window,
                                                softcap, seed):
    # the wide instance (32 rows a warp) on shapes drawn at random: partial last CTAs with interior blocks, windows
    # and offsets that leave rows without keys, padding, soft-caps, ALiBi, split-KV -- against the float64 oracle
    kw = dict(B=1, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, kpm=kpm, splits=splits,
              window=window, softcap=softcap, seed=seed)
    assert fwd_kernel(lib, Attn(lib, dtype, **kw)) == "tensor-core, 32 rows a warp"
    check_attention(lib, dtype, backward=False, **kw)


# the tensor-core dK/dV (bf16/fp16, head_dim 64 / 128, no table): a CTA of 64 keys walks the query blocks
# of each head of its group (32 rows at d = 128, 64 at 64), the masked ones first, then the interior
# ones (every query sees every key) without masks
TC_BWD_CASES = [
    dict(B=1, H=2, Hk=1, M=130, N=130, d=128, off=0, causal=True, pe=0),  # diagonal, interior, partial blocks
    dict(B=1, H=2, Hk=2, M=256, N=192, d=64, off=0, causal=False, pe=0, grad_lse=True),  # all interior
    dict(B=1, H=4, Hk=2, M=200, N=260, d=128, off=60, causal=True, pe=2),  # ALiBi on interior blocks, GQA
    dict(B=1, H=3, Hk=1, M=160, N=300, d=64, off=140, causal=False, pe=2),  # keys on both sides of the queries
    dict(B=2, H=2, Hk=1, M=129, N=129, d=128, off=0, causal=False, pe=0, softcap=1.5),  # soft-cap, interior and masked blocks
    dict(B=1, H=2, Hk=1, M=150, N=190, d=64, off=40, causal=True, pe=2, window=70, softcap=3.0),
    dict(B=1, H=2, Hk=1, M=160, N=260, d=128, off=100, causal=True, pe=0, window=100),  # interior between the edges
    dict(B=1, H=2, Hk=1, M=40, N=120, d=64, off=-30, causal=True, pe=0, kpm=True),  # rows without keys, padding
    dict(B=2, H=2, Hk=1, M=160, N=160, d=64, off=0, causal=True, pe=0, cu=[[0, 70, 71, 160], [0, 100, 100, 160]]),
    dict(B=1, H=2, Hk=1, M=96, N=200, d=128, off=104, causal=True, pe=0, row_pad=8),  # strided rows on 16 bytes
    dict(B=1, H=4, Hk=2, M=128, N=192, d=64, off=64, causal=True, pe=0, softcap=3.0),  # soft-capped interior
    # the relative table: masked blocks with its bias, the band's interior blocks, interior blocks beyond it
    # (and the learned table's dT: attn_bwd_dtable_tc_kernel, tiles of 64 on the band's diagonals, masked
    # and interior, column slices at 128)
    dict(B=1, H=2, Hk=1, M=260, N=260, d=128, off=0, causal=True, pe=1, R=90, r_lo=0),
    dict(B=1, H=4, Hk=2, M=300, N=300, d=64, off=0, causal=True, pe=1, R=100, r_lo=-40, softcap=2.0),
    dict(B=1, H=2, Hk=1, M=200, N=260, d=128, off=60, causal=False, pe=1, R=11, r_lo=-5, clamp=True),  # all band
    dict(B=1, H=2, Hk=1, M=160, N=260, d=64, off=100, causal=True, pe=1, R=150, r_lo=0, window=100, kpm=True),
    dict(B=1, H=2, Hk=1, M=96, N=200, d=128, off=104, causal=True, pe=1, R=70, r_lo=2, row_pad=8, softcap=2.5),
    # without causality the band's both edges fall among interior blocks (past and future distances)
    dict(B=1, H=2, Hk=1, M=256, N=320, d=64, off=0, causal=False, pe=1, R=40, r_lo=100),
    dict(B=1, H=2, Hk=1, M=256, N=320, d=128, off=0, causal=False, pe=1, R=50, r_lo=-150),
    # one tile diagonal: the dT kernel's CTAs take a head each (groups of heads, their slots folded in order)
    dict(B=1, H=4, Hk=2, M=40, N=40, d=64, off=0, causal=True, pe=1, R=30, r_lo=0),
    # the wide dQ (attn_bwd_dq_tc_wide_kernel, 32 rows a warp: no table nor ALiBi, more than 64 queries; cases 0, 1,
    # 4, 6, 8, 9 and 10 too): interior blocks -- both m-tiles' products at once -- in a last CTA of 12 rows (its
    # warps 1-3 and warp 0's second m-tile without rows), in two whole CTAs at head_dim 128, GQA with padding and a
    # soft-cap, a window at head_dim 64
    dict(B=1, H=2, Hk=1, M=140, N=400, d=128, off=260, causal=True, pe=0),
    dict(B=1, H=2, Hk=1, M=256, N=512, d=128, off=256, causal=True, pe=0),
    dict(B=1, H=4, Hk=2, M=200, N=330, d=128, off=130, causal=True, pe=0, softcap=2.0, kpm=True),
    dict(B=1, H=2, Hk=1, M=256, N=512, d=64, off=256, causal=True, pe=0, window=90),
    # the wide dK/dV (attn_bwd_dkdv_tc_wide_kernel, 32 keys a warp in 8, blocks of 64 queries: no table, more than 64
    # queries; every case above at head_dim 64 / 128 without a table and M > 64 too): rows without keys and padded keys
    # (masked blocks only), ALiBi's masked blocks with padding and GQA, ALiBi with a soft-cap (every block masked: its
    # soft-cap instance)
    dict(B=1, H=2, Hk=1, M=100, N=300, d=128, off=-30, causal=True, pe=0, kpm=True),
    dict(B=2, H=4, Hk=2, M=130, N=250, d=64, off=120, causal=True, pe=2, kpm=True),
    dict(B=1, H=2, Hk=1, M=100, N=200, d=128, off=100, causal=True, pe=2, softcap=2.0),
]


def wide_dq(kw, h100=True, dslopes=True):
    """Does the backward of these arguments run the wide dQ (wide_dq in attention_bwd.cu)?  At head_dim 128 only
    where two of its CTAs share an SM: an H100's (H100_SM), not the emulator's default A100's; with ALiBi where d
    loss / d slope is not asked (dslopes) and no soft-cap."""
    bias_ok = kw["pe"] == 0 or (kw["pe"] == 2 and not dslopes and not kw.get("softcap"))
    return kw["d"] in (64, 128) and bias_ok and kw["M"] > 64 and (kw["d"] == 64 or h100)


def assert_grads_normwise(prob, dtype, names=("dk", "dv", "dq")):
    """The named gradients of a checked problem (check_attention) within 1.5 units of the input type of the
    oracle's, norm-wise (test_tensor_core_backward_matches_oracle says why: a scale off by 1 % fails it)."""
    for name in names:
        got, want = prob.grads[name], prob.want[name]
        rel = np.linalg.norm(got - want) / (np.linalg.norm(want) + 1e-300)
        assert rel <= 1.5 * UNIT[dtype], f"{name}: relative error {rel / UNIT[dtype]:.2f} units of the input type"


def bwd_kernel_of(kw, h100=True, dslopes=True):
    return "tensor-core, dQ 32 rows a warp" if wide_dq(kw, h100, dslopes) else "tensor-core"


def wide_dkdv(kw, h100=True):
    """Does the backward of these arguments run the wide dK/dV (wide_dkdv in attention_bwd.cu)?  At head_dim 128 only
    where its 175 KiB fit: an H100's SM (H100_SM), not the emulator's default A100's; at 64 (111 KiB) both."""
    return kw["d"] in (64, 128) and kw["pe"] != 1 and kw["M"] > 64 and (kw["d"] == 64 or h100)


def dkdv_kernel(lib, prob):
    lib.wavepe_cuda_attention_bwd_dkdv_kernel.restype = C.c_char_p
    return lib.wavepe_cuda_attention_bwd_dkdv_kernel(C.byref(prob.a)).decode()


def dkdv_kernel_of(kw, h100=True):
    return "tensor-core, 32 keys a warp" if wide_dkdv(kw, h100) else "tensor-core"


def bwd_kernel(lib, prob, dslopes=None):
    """The backward's kernels for the problem's arguments, d loss / d slope asked as dslopes says (by default as
    Attn.backward's callers here ask it: with ALiBi)."""
    lib.wavepe_cuda_attention_bwd_kernel.restype = C.c_char_p
    a = type(prob.a).from_buffer_copy(prob.a)
    if prob.pe == 2 if dslopes is None else dslopes:
        a.dslopes = a.q  # (only its presence is read)
    return lib.wavepe_cuda_attention_bwd_kernel(C.byref(a)).decode()


def dtable_kernel(lib, prob):
    """The kernel of a learned table's dT for the problem's arguments (dtable set by its backward)."""
    lib.wavepe_cuda_attention_bwd_dtable_kernel.restype = C.c_char_p
    return lib.wavepe_cuda_attention_bwd_dtable_kernel(C.byref(prob.a)).decode()


@pytest.mark.parametrize("case,dtype", alternating(range(len(TC_BWD_CASES)), both=(15,)))  # (15: dT, soft-cap, 128)
def test_tensor_core_backward_matches_oracle(lib, monkeypatch, dtype, case):
    for k, v in H100_SM.items():  # (the wide dQ at head_dim 128 too)
        monkeypatch.setenv(k, v)
    kw = dict(TC_BWD_CASES[case])
    grad_lse = kw.pop("grad_lse", False)
    prob = Attn(lib, dtype, seed=500 + case, **kw)
    assert bwd_kernel(lib, prob) == bwd_kernel_of(kw)
    assert dkdv_kernel(lib, prob) == dkdv_kernel_of(kw)
    prob = check_attention(lib, dtype, seed=500 + case, grad_lse=grad_lse, **kw)
    # check_attention's element bounds grow with sqrt(terms) x the largest value: at these sizes they would
    # let a 1 % error in the scale through.  Norm-wise, rounding P and dS to the input type (the only
    # rounding inside beside the fp32 sums) leaves the gradients within one unit of the input type:
    # measured at most 0.68 units on these cases; a scale off by 1 % gives 2.5 (bf16) / 20 (fp16).  The
    # learned table's dT too (its own kernel).
    names = ("dk", "dv", "dq")
    if kw["pe"] == 1:
        assert dtable_kernel(lib, prob) == "tensor-core"
        names += ("dtable",)
    assert_grads_normwise(prob, dtype, names)
    if kw["pe"] == 2:  # d loss / d slope (sums with cancellation): measured <= 1.6 units of the largest; 1 % more
        # in the interior loop's sum gives 3.3 (bf16) / 19 (fp16) on case 2
        got, want = prob.grads["dslopes"], prob.want["dslopes"]
        rel = np.abs(got - want).max() / np.abs(want).max()
        assert rel <= 2.5 * UNIT[dtype], f"dslopes: error {rel / UNIT[dtype]:.2f} units of the largest"


@pytest.mark.parametrize("case,dtype", alternating([0, 1, 3, 4, 10]))
def test_tensor_core_16_row_kernels_match_oracle(lib, monkeypatch, dtype, case):
    # WAVEPE_CUDA_WIDE=0 (the benchmark's A/B) keeps the wide dQ's and dK/dV's calls on attn_bwd_dq_tc_kernel's 16
    # rows a warp and attn_bwd_dkdv_tc_kernel's 16 keys: their plain and soft-capped interior blocks at both head
    # dims, masked ones, more than 64 queries, the dK/dV's ALiBi loop at 64 (case 3; the dQ's: cases 2, 3, 5; at
    # head_dim 128 the random shapes below on the emulator's A100 too)
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("WAVEPE_CUDA_WIDE", "0")
    kw = dict(TC_BWD_CASES[case])
    assert wide_dq(kw) or wide_dkdv(kw)
    grad_lse = kw.pop("grad_lse", False)
    prob = Attn(lib, dtype, seed=500 + case, **kw)
    assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == ("tensor-core", "tensor-core")
    prob = check_attention(lib, dtype, seed=500 + case, grad_lse=grad_lse, **kw)
    assert_grads_normwise(prob, dtype)


# ALiBi's calls with fixed slopes (d loss / d slope not asked: the models' buffers) and no soft-cap: the wide dQ's
# ALiBi instance (attn_bwd_dq_tc_wide_alibi_kernel) -- GQA at 128, keys on both sides at 64, two batch rows with a
# window, padding and a partial last CTA at 128, the causal diagonal at 64 (its masked loop: no prefix blocks)
WIDE_ALIBI_DQ_CASES = [
    TC_BWD_CASES[2],
    TC_BWD_CASES[3],
    dict(B=2, H=2, Hk=1, M=150, N=270, d=128, off=120, causal=True, pe=2, window=100, kpm=True),
    dict(B=1, H=2, Hk=2, M=130, N=130, d=64, off=0, causal=True, pe=2),
]


@pytest.mark.parametrize("case,dtype", alternating(range(len(WIDE_ALIBI_DQ_CASES)), both=(0,)))  # (0: each dtype at 128)
def test_wide_dq_with_alibi_matches_oracle(lib, monkeypatch, dtype, case):
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    kw = dict(WIDE_ALIBI_DQ_CASES[case])
    prob = Attn(lib, dtype, seed=720 + case, **kw)
    assert bwd_kernel(lib, prob, dslopes=False) == "tensor-core, dQ 32 rows a warp"
    prob = check_attention(lib, dtype, seed=720 + case, want_dslopes=False, **kw)
    assert_grads_normwise(prob, dtype)


@pytest.mark.parametrize("case", [11, 13, 15, 17])
def test_tensor_core_table_dkdv_of_sm_120_matches_oracle(lib, monkeypatch, case):
    # the table's dK/dV instance at head_dim 128 takes its query blocks 16 columns a chunk on sm_120 (registers:
    # attn_bwd_dkdv_tc_kernel; on sm_100 too until its bias left shared memory, 2026-11-29), 32 elsewhere; the
    # emulator runs the variant of the compute capability it emulates: 12 (causal, clamped, padded rows, both sides
    # of the band)
    for k, v in dict(H100_SM, WAVEPE_EMU_CC_MAJOR="12").items():
        monkeypatch.setenv(k, v)
    kw = dict(TC_BWD_CASES[case])
    assert kw["d"] == 128 and kw["pe"] == 1
    prob = Attn(lib, E.BF16, seed=700 + case, **kw)
    assert dkdv_kernel(lib, prob) == "tensor-core"
    prob = check_attention(lib, E.BF16, seed=700 + case, want_dtable=False, **kw)
    assert_grads_normwise(prob, E.BF16)


@pytest.mark.parametrize("dtype,case", [(E.BF16, 2), (E.BF16, 4), (E.BF16, 20), (E.F16, 20), (E.BF16, 21),
                                        (E.BF16, 23)], ids=lambda v: DTYPE_IDS.get(v, str(v)))
def test_wide_dkdv_of_sm_100_matches_oracle(lib, monkeypatch, dtype, case):
    # the wide dK/dV computes S^T and dP^T one m-tile of 16 keys a pass at head dim 128 on sm_100 (registers:
    # attn_bwd_dkdv_tc_wide_kernel's PMT), both at once elsewhere; the emulator runs the variant of the compute
    # capability it emulates: a B200-like 10 (ALiBi's masked and interior blocks with GQA, a soft-cap, interior
    # blocks in both types, a soft-cap with padded keys and GQA, padded keys and rows without keys)
    for k, v in dict(H100_SM, WAVEPE_EMU_CC_MAJOR="10").items():
        monkeypatch.setenv(k, v)
    kw = dict(TC_BWD_CASES[case])
    prob = Attn(lib, dtype, seed=740 + case, **kw)
    assert dkdv_kernel(lib, prob) == "tensor-core, 32 keys a warp"
    prob = check_attention(lib, dtype, seed=740 + case, **kw)
    assert_grads_normwise(prob, dtype)


def test_wide_dq_at_head_dim_128_only_where_two_ctas_share_an_sm(lib, monkeypatch):
    # 107,600 bytes a CTA at head_dim 128: an A100's SM (164 KiB, the emulator's default) holds one -- 4 warps, which
    # would lose to the 16-row instance's 8 --, an H100's two; at head_dim 64 (76,944) both hold two
    # (the backward's figure: the larger of the dK/dV's and the dQ's -- at 64 the wide dK/dV's 113,896 on both)
    kw = dict(B=1, H=2, Hk=1, M=130, N=130, off=0, causal=True, pe=0)
    for d, want in ((128, "tensor-core"), (64, "tensor-core, dQ 32 rows a warp")):
        prob = Attn(lib, E.BF16, d=d, **kw)
        assert bwd_kernel(lib, prob) == want, d
        assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == (71312 if d == 128 else 113896)
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    prob = Attn(lib, E.BF16, d=128, **kw)
    assert bwd_kernel(lib, prob) == "tensor-core, dQ 32 rows a warp"
    assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == 179432
    # with ALiBi too (fixed slopes: attn_bwd_dq_tc_wide_alibi_kernel); not when d loss / d slope is asked (with its
    # sums the loop spilled at head_dim 128), nor with ALiBi and a soft-cap, nor for 64 queries or fewer
    for d in (64, 128):
        prob = Attn(lib, E.BF16, d=d, **dict(kw, pe=2))
        assert bwd_kernel(lib, prob, dslopes=False) == "tensor-core, dQ 32 rows a warp", d
    for change, dslopes in ((dict(pe=2), True), (dict(pe=2, softcap=2.0), False), (dict(M=64, off=66), False)):
        prob = Attn(lib, E.BF16, d=128, **dict(kw, **change))
        assert bwd_kernel(lib, prob, dslopes=dslopes) == "tensor-core", change


def test_wide_dkdv_only_where_its_tiles_fit_and_it_was_built(lib, monkeypatch):
    # attn_bwd_dkdv_tc_wide_kernel: 179,432 bytes at head_dim 128 (an H100's 227 KiB hold it, an A100's 163 do not),
    # 113,896 at 64 (both); at 128 not on compute capability 12 (built there as a stub: ptxas spilled; its 99 KiB would
    # not hold the tiles at either head dim); never with a table, for 64 queries or fewer, nor with WAVEPE_CUDA_WIDE=0
    kw = dict(B=1, H=2, Hk=1, M=130, N=130, off=0, causal=True, pe=0)
    devices = {"A100": {}, "H100": H100_SM, "B200": dict(H100_SM, WAVEPE_EMU_CC_MAJOR="10"),
               "RTX 5090": dict(WAVEPE_EMU_SMEM_PER_SM=str(100 * 1024), WAVEPE_EMU_SMEM_OPTIN=str(99 * 1024),
                                WAVEPE_EMU_CC_MAJOR="12")}
    want = {("A100", 64): True, ("A100", 128): False, ("H100", 64): True, ("H100", 128): True, ("B200", 64): True,
            ("B200", 128): True, ("RTX 5090", 64): False, ("RTX 5090", 128): False}
    for dev, env in devices.items():
        with mock.patch.dict(os.environ, env):
            for d in (64, 128):
                got = dkdv_kernel(lib, Attn(lib, E.BF16, d=d, **kw))
                assert got == ("tensor-core, 32 keys a warp" if want[(dev, d)] else "tensor-core"), (dev, d)
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    for change in (dict(pe=1, R=40), dict(M=64, off=66), dict(d=256), dict(dtype=E.F32)):
        c = dict(kw, d=128)
        c.update(change)
        dtype = c.pop("dtype", E.BF16)
        assert dkdv_kernel(lib, Attn(lib, dtype, **c)) in ("tensor-core", "general"), change
    monkeypatch.setenv("WAVEPE_CUDA_WIDE", "0")
    assert dkdv_kernel(lib, Attn(lib, E.BF16, d=128, **kw)) == "tensor-core"


def test_wide_dkdv_stores_p_and_ds_without_bank_conflicts():
    # The wide dK/dV's P^T and dS^T stores (the emulator counts ldmatrix's wavefronts, not plain stores): lane (g, t)
    # of warp w writes the 4-byte pair (rows 32 (w % 4) + 16 mt + g + 8 hp, columns 32 (w / 4) + 8 nt + 2 t) of a
    # tile of rows PLD = 72 elements (2 bytes each) -- each warp-wide store hits 32 distinct banks; with rows of 64
    # (no padding) it would be 8-way conflicted
    def degree(pld):
        worst = 0
        for w in range(8):
            for mt in range(2):
                for nt in range(4):
                    for hp in range(2):
                        banks = [((32 * (w % 4) + 16 * mt + g + 8 * hp) * pld + 32 * (w // 4) + 8 * nt + 2 * t) // 2 % 32
                                 for g in range(8) for t in range(4)]
                        worst = max(worst, max(banks.count(b) for b in set(banks)))
        return worst
    assert degree(72) == 1 and degree(64) == 8


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([E.BF16, E.F16]), d=st.sampled_from([64, 128]), Hk=st.integers(1, 2),
       group=st.integers(1, 2), M=st.integers(65, 270), N=st.integers(1, 300), off=st.integers(-50, 200),
       causal=st.booleans(), kpm=st.booleans(), window=st.sampled_from([0, 0, 1, 40, 130]),
       softcap=st.sampled_from([0.0, 0.0, 2.0]), grad_lse=st.booleans(), seed=st.integers(0, 2**31))
def test_tensor_core_dq_wide_random_shapes(lib, dtype, d, Hk, group, M, N, off, causal, kpm, window, softcap,
                                           grad_lse, seed):
    # the wide dQ (32 rows a warp) on shapes drawn at random: partial last CTAs, rows without keys, padding,
    # windows, soft-caps, GQA -- against the float64 oracle
    kw = dict(B=1, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=0, kpm=kpm, window=window,
              softcap=softcap, seed=seed)
    with mock.patch.dict(os.environ, H100_SM):
        assert bwd_kernel(lib, Attn(lib, dtype, **kw)) == "tensor-core, dQ 32 rows a warp"
        check_attention(lib, dtype, grad_lse=grad_lse, **kw)


# head_dim 256: the tensor-core dQ (blocks of 16 keys, S's and dP's steps unrolled by 4) and dK/dV (query blocks of
# 16 rows, two CTAs a key block, each holding one column slice of dK and dV): masked, band and interior blocks,
# ALiBi's slope gradient from the tensor-core dQ's slots, soft-cap with a window, padding, documents, GQA
TC_BWD256_CASES = [
    dict(B=1, H=2, Hk=1, M=100, N=130, d=256, off=30, causal=True, pe=0),
    dict(B=1, H=2, Hk=1, M=80, N=150, d=256, off=70, causal=True, pe=1, R=60, r_lo=0),  # band, then beyond it
    dict(B=1, H=4, Hk=2, M=70, N=110, d=256, off=40, causal=True, pe=2, grad_lse=True),
    dict(B=1, H=2, Hk=1, M=90, N=120, d=256, off=30, causal=True, pe=1, R=40, r_lo=-10, window=40, softcap=2.0),
    dict(B=2, H=2, Hk=1, M=80, N=80, d=256, off=0, causal=True, pe=0, kpm=True, cu=[[0, 30, 31, 80], [0, 50, 50, 80]]),
]


@pytest.mark.parametrize("case,dtype", alternating(range(len(TC_BWD256_CASES))))
def test_tensor_core_backward_at_head_dim_256_matches_oracle(lib, dtype, case):
    kw = dict(TC_BWD256_CASES[case])
    grad_lse = kw.pop("grad_lse", False)
    assert bwd_kernel(lib, Attn(lib, dtype, seed=700 + case, **kw)) == "tensor-core"
    prob = check_attention(lib, dtype, seed=700 + case, grad_lse=grad_lse, **kw)
    # norm-wise, as test_tensor_core_backward_matches_oracle (a scale off by 1 % fails it)
    for name in ("dk", "dv", "dq"):
        got, want = prob.grads[name], prob.want[name]
        rel = np.linalg.norm(got - want) / (np.linalg.norm(want) + 1e-300)
        assert rel <= 1.5 * UNIT[dtype], f"{name}: relative error {rel / UNIT[dtype]:.2f} units of the input type"


# decoding one query with GQA: the group's heads are one CTA's rows (K/V read once a kv head)
PACKED_DECODE = [
    dict(B=2, H=8, Hk=2, M=1, N=700, d=128, off=699, causal=True, pe=0),
    dict(B=1, H=8, Hk=2, M=1, N=700, d=64, off=699, causal=True, pe=0, splits=5, kpm=True),
    dict(B=1, H=6, Hk=2, M=1, N=500, d=128, off=520, causal=True, pe=1, R=300, r_lo=0, splits=3),  # the band
    dict(B=1, H=4, Hk=1, M=1, N=400, d=64, off=390, causal=False, pe=1, R=50, r_lo=-20, window=150, softcap=3.0),
    dict(B=1, H=4, Hk=2, M=1, N=300, d=128, off=250, causal=True, pe=1, R=9, r_lo=-3, clamp=True, splits=2),
    dict(B=2, H=4, Hk=1, M=1, N=200, d=64, off=150, causal=True, pe=0, cu=[[0, 100, 160, 200], [0, 20, 151, 200]]),
    dict(B=1, H=64, Hk=1, M=1, N=200, d=64, off=199, causal=True, pe=1, R=120, r_lo=0),  # a group of 64: 4 warps
    dict(B=1, H=8, Hk=2, M=1, N=300, d=256, off=320, causal=True, pe=1, R=150, r_lo=0, splits=2),  # head_dim 256
]


@pytest.mark.parametrize("case,dtype", alternating(range(len(PACKED_DECODE))))
def test_tensor_core_decoding_packs_gqa_heads(lib, dtype, case):
    kw = dict(PACKED_DECODE[case])
    prob = Attn(lib, dtype, seed=400 + case, **kw)
    assert fwd_kernel(lib, prob) == "tensor-core, GQA heads packed"
    check_attention(lib, dtype, backward=False, seed=400 + case, **kw)


# the dT's tiles at head_dim 128 with K in two halves: rows of 136 bf16 -- Q, dO and V 64, the window 128, K 32 --
# and the query rows' key ranges
TC_DTABLE_KSPLIT_BYTES = (3 * 64 + 128 + 32) * 136 * 2 + 2 * 64 * 8


def test_tensor_core_backward_with_a_table_needs_its_shared_memory(lib, monkeypatch):
    # the dT's table instance takes 103 KiB at head_dim 128: on a 99 KiB device (sm_86 / sm_89 / sm_120) the dT
    # runs its instance with K in two halves (94.5 KiB since 2026-11-30; before, the general kernel), correctly --
    # also with a soft-cap, in masked and interior tiles --, the dK/dV its table instance (95.1 KiB since
    # 2026-11-29, the bias's G^T in registers: add_transposed_bias; 107.5 KiB before, and an instance with one
    # buffer of Q and dO there), the dQ
    # its table instance (94.6 KiB since 2026-11-29, its H in registers: skewed_ds_products; before, the general
    # kernel); at head_dim 64 (99 KiB or less) the tensor-core ones all do
    kw = dict(B=1, H=2, Hk=1, M=100, N=140, off=40, causal=True, pe=1, R=60, r_lo=0, seed=8)
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    assert bwd_kernel(lib, Attn(lib, E.BF16, d=128, **kw)) == "tensor-core"
    assert dkdv_kernel(lib, Attn(lib, E.BF16, d=128, **kw)) == "tensor-core"
    assert dkdv_kernel(lib, Attn(lib, E.BF16, d=64, **kw)) == "tensor-core"
    assert dkdv_kernel(lib, Attn(lib, E.BF16, d=128, **dict(kw, pe=0))) == "tensor-core"  # no table: 70 KiB
    prob = check_attention(lib, E.BF16, d=128, **kw)
    assert dtable_kernel(lib, prob) == "tensor-core, K in two halves"  # (at head_dim 64, 72 KiB: the whole tiles)
    for dtype, change in ((E.F16, dict(softcap=3.0)),
                          (E.BF16, dict(M=200, N=200, off=0, causal=False, R=300, r_lo=-150))):  # interior tiles
        assert dtable_kernel(lib, check_attention(lib, dtype, d=128, **dict(kw, **change))) == \
            "tensor-core, K in two halves"
    # its launch asks 94.5 KiB (every device from sm_80 on grants 99: the halves always fit), the checker's CTA_SHAPE
    # figure; the device's grant decides, at the whole tiles' bytes
    prob.forward()
    launches(lib)
    prob.backward(True)
    assert TC_DTABLE_KSPLIT_BYTES in launches(lib) and TC_DTABLE_KSPLIT_BYTES <= 99 * 1024
    shape = kernel_checks().CTA_SHAPE
    for cap in ("false", "true"):
        assert shape[("attn_bwd_dtable_tc_ksplit_kernel", f"128, {cap}")] == (128, TC_DTABLE_KSPLIT_BYTES)
    for optin, want in ((shape[("attn_bwd_dtable_tc_kernel", "128, false")][1] - 1, "tensor-core, K in two halves"),
                        (shape[("attn_bwd_dtable_tc_kernel", "128, true")][1], "tensor-core")):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(optin))
        assert dtable_kernel(lib, prob) == want, optin
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    prob = Attn(lib, E.BF16, d=64, **kw)
    prob.a.dtable = prob.a.table
    assert dtable_kernel(lib, prob) == "tensor-core"
    assert bwd_kernel(lib, Attn(lib, E.BF16, d=64, **kw)) == "tensor-core"
    assert bwd_kernel(lib, Attn(lib, E.BF16, d=128, **dict(kw, pe=0))) == "tensor-core"  # no table: 70 KiB
    # head_dim 256: the dQ's and dK/dV's 100 KiB (144,672 / 145,040 bytes with a table) only where the device grants
    # them
    for optin, pe, want in ((99 * 1024, 0, "tensor-core"), (163 * 1024, 1, "tensor-core"),
                            (145040, 1, "tensor-core"),
                            (145039, 1, "tensor-core dQ, general dK/dV"), (144672, 1, "tensor-core dQ, general dK/dV"),
                            (144671, 1, "general"), (147 * 1024, 0, "tensor-core")):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(optin))
        assert bwd_kernel(lib, Attn(lib, E.BF16, d=256, **dict(kw, pe=pe))) == want, (optin, pe)
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    check_attention(lib, E.BF16, d=256, **kw)


# head_dim 256 without a table on a 99 KiB device (sm_86 / sm_89 / sm_120): the tensor-core dQ with V in one
# buffer (attn_bwd_dq_tc_vone_kernel, 93,984 bytes where the two buffers take 102,432), the dK/dV with dO in one
# (attn_bwd_dkdv_tc_gone_kernel, 94,352 where two take 102,800).  Causal with GQA and a partial last CTA; ALiBi with
# its slopes' gradient and key padding; a soft-cap without causality; a window.
DQ_VONE_CASES = [
    (dict(B=1, H=4, Hk=2, M=130, N=200, d=256, off=70, causal=True, pe=0), E.BF16, False),
    (dict(B=2, H=2, Hk=1, M=64, N=150, d=256, off=90, causal=True, pe=2, kpm=True), E.F16, True),
    (dict(B=1, H=2, Hk=2, M=100, N=120, d=256, off=0, causal=False, pe=0, softcap=2.0), E.BF16, False),
    (dict(B=1, H=2, Hk=1, M=96, N=300, d=256, off=200, causal=True, pe=0, window=90), E.F16, False),
]
DQ_VONE_BYTES, DKDV_GONE_BYTES = 93984, 94352


@pytest.mark.parametrize("case", range(len(DQ_VONE_CASES)))
def test_tensor_core_backward_with_one_buffer_matches_oracle(lib, monkeypatch, case):
    kw, dtype, dslopes = DQ_VONE_CASES[case]
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    prob = Attn(lib, dtype, seed=530 + case, **kw)
    assert bwd_kernel(lib, prob) == dkdv_kernel(lib, prob) == "tensor-core"
    launches(lib)
    prob = check_attention(lib, dtype, seed=530 + case, want_dslopes=dslopes, **kw)
    got = launches(lib)
    assert DQ_VONE_BYTES in got and DKDV_GONE_BYTES in got, got
    assert_grads_normwise(prob, dtype)


def test_tensor_core_backward_with_one_buffer_only_where_it_applies(lib, monkeypatch):
    kw = dict(DQ_VONE_CASES[0][0])
    shape = kernel_checks().CTA_SHAPE
    assert shape[("attn_bwd_dq_tc_vone_kernel", "256")] == (128, DQ_VONE_BYTES)
    assert shape[("attn_bwd_dkdv_tc_gone_kernel", "256")] == (128, DKDV_GONE_BYTES)
    assert max(DQ_VONE_BYTES, DKDV_GONE_BYTES) <= 99 * 1024
    # where the two buffers fit (the grant's edges: 102,432 bytes for the dQ, 102,800 for the dK/dV), the whole
    # kernels, each pass apart; with a table (its window), the general ones
    dq_full, kv_full = shape[("attn_bwd_dq_tc_kernel", "256, false")][1], shape[("attn_bwd_dkdv_tc_kernel", "256, false")][1]
    for optin, want in ((kv_full, {dq_full, kv_full}), (kv_full - 1, {dq_full, DKDV_GONE_BYTES}),
                        (dq_full - 1, {DQ_VONE_BYTES, DKDV_GONE_BYTES})):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(optin))
        prob = Attn(lib, E.BF16, **kw)
        assert bwd_kernel(lib, prob) == "tensor-core"
        prob.forward()
        launches(lib)
        prob.backward(False)
        got = set(launches(lib)) & {dq_full, kv_full, DQ_VONE_BYTES, DKDV_GONE_BYTES}
        assert got == want, (optin, got)
    assert bwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, pe=1))) == "general"
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    prob = Attn(lib, E.BF16, **kw)
    assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) <= 99 * 1024
    for change in (dict(d=128), dict(row_pad=4)):
        assert bwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, **change))) in ("tensor-core", "general"), change


# head_dim 64 without a table on a 100 KiB SM of sm_86 / sm_89: the dK/dV with dO in one buffer and a block's 64
# queries in one chunk (attn_bwd_dkdv_tc_gone_kernel<64>, 48,272 bytes: two CTAs an SM, where the two buffers' 57,488
# hold one; the wide dK/dV's 113,896 do not fit; a stub on sm_120), and (sm_120 too) the dQ with V in one buffer and a
# block's 64 keys in one chunk (attn_bwd_dq_tc_vone_kernel<64>, 47,232 bytes: two CTAs, where the two buffers' 56,448
# and the wide dQ's 76,944 hold one).  Causal with GQA and a partial last CTA (more than 64 queries: the call the wide
# ones take elsewhere); ALiBi with its slopes' gradient and key padding; a soft-cap without causality; a window.
DKDV_GONE64_CASES = [
    (dict(B=1, H=4, Hk=2, M=150, N=200, d=64, off=50, causal=True, pe=0), E.BF16, False),
    (dict(B=2, H=2, Hk=1, M=64, N=150, d=64, off=90, causal=True, pe=2, kpm=True), E.F16, True),
    (dict(B=1, H=2, Hk=2, M=100, N=130, d=64, off=0, causal=False, pe=0, softcap=2.0), E.BF16, False),
    (dict(B=1, H=2, Hk=1, M=96, N=300, d=64, off=200, causal=True, pe=0, window=90), E.F16, False),
]
DKDV_GONE64_BYTES, DQ_VONE64_BYTES = 48272, 47232


@pytest.mark.parametrize("case", range(len(DKDV_GONE64_CASES)))
def test_backward_with_one_buffer_at_head_dim_64_on_a_100_kib_sm_matches_oracle(lib, monkeypatch, case):
    kw, dtype, dslopes = DKDV_GONE64_CASES[case]
    on_99_kib(monkeypatch)
    prob = Attn(lib, dtype, seed=560 + case, **kw)
    assert dkdv_kernel(lib, prob) == bwd_kernel(lib, prob) == "tensor-core"
    launches(lib)
    prob = check_attention(lib, dtype, seed=560 + case, want_dslopes=dslopes, **kw)
    got = launches(lib)
    assert DKDV_GONE64_BYTES in got and DQ_VONE64_BYTES in got, got
    assert_grads_normwise(prob, dtype)


def test_backward_with_one_buffer_at_head_dim_64_only_where_it_applies(lib, monkeypatch):
    # where an SM holds one CTA of the two buffers and two of one: the 100 KiB SMs (the dK/dV's below compute
    # capability 10); not an A100's or H100's SM (the two buffers; the wide instances for more than 64 queries), nor
    # with a table (its window: the table instances)
    ck = kernel_checks()
    for name, one in (("attn_bwd_dkdv_tc_gone_kernel", DKDV_GONE64_BYTES), ("attn_bwd_dq_tc_vone_kernel", DQ_VONE64_BYTES)):
        assert ck.CTA_SHAPE[(name, "64")] == ck.SM_100KIB_SHAPE[(name, "64")] == (128, one)
        assert ck.occupancy(255, 128, one, "sm_86") == (2, 8)
    kv_whole = ck.CTA_SHAPE[("attn_bwd_dkdv_tc_kernel", "64, false")][1]
    dq_whole = ck.CTA_SHAPE[("attn_bwd_dq_tc_kernel", "64, false")][1]
    dq_wide = ck.CTA_SHAPE[("attn_bwd_dq_tc_wide_kernel", "64, false")][1]
    kv_wide = ck.CTA_SHAPE[("attn_bwd_dkdv_tc_wide_kernel", "64, 1")][1]
    for whole in (kv_whole, dq_whole, dq_wide):
        assert ck.occupancy(255, 128, whole, "sm_86") == (1, 4), whole
    # (compute capability 12 -- an RTX 50xx's 100 KiB SM -- keeps the dK/dV's two buffers: its instance is a stub on
    # sm_120)
    for m, dq_else in ((64, dq_whole), (150, dq_wide)):
        kw = dict(B=1, H=2, Hk=1, M=m, N=130 + m, d=64, off=66, causal=True, pe=0)
        for env, want in (({}, {kv_whole, dq_else}), (H100_SM, {kv_whole, dq_else}),
                          (SM_99_KIB, {DKDV_GONE64_BYTES, DQ_VONE64_BYTES}),
                          (dict(SM_99_KIB, WAVEPE_EMU_CC_MAJOR="12"), {kv_whole, DQ_VONE64_BYTES})):
            if m > 64 and env in ({}, H100_SM):
                want = {kv_wide, dq_wide}
            with mock.patch.dict(os.environ, env):
                prob = Attn(lib, E.BF16, **kw)
                launches(lib)
                prob.forward()
                prob.backward(False)
                got = set(launches(lib)) & {kv_whole, dq_whole, dq_wide, kv_wide, DKDV_GONE64_BYTES, DQ_VONE64_BYTES}
                assert got == want, (m, env, got)
                assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) >= max(want)
    on_99_kib(monkeypatch)
    prob = Attn(lib, E.BF16, **dict(kw, pe=1, R=30))
    launches(lib)
    prob.forward()
    prob.backward(False)
    got = launches(lib)
    assert DKDV_GONE64_BYTES not in got and ck.CTA_SHAPE[("attn_bwd_dkdv_tc_kernel", "64, true")][1] in got, got
    assert DQ_VONE64_BYTES not in got and ck.CTA_SHAPE[("attn_bwd_dq_tc_kernel", "64, true")][1] in got, got


def test_tensor_core_forward_with_a_table_at_head_dim_256_needs_its_shared_memory(lib, monkeypatch):
    # 116.5 KiB a CTA: on a 99 KiB device (sm_86 / sm_89 / sm_120) such calls run the general kernel, correctly (with
    # 512 keys a row or more beyond the table's band, but for those: test_band_split_onto_the_general_kernel_*);
    # without a table (67 KiB), and at head_dim 128 with one (86 KiB), the tensor-core kernel still does
    kw = dict(B=1, H=2, Hk=1, M=70, N=140, off=40, causal=True, R=60, r_lo=0, seed=9)
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=256, pe=1, **kw)) == "general"
    check_attention(lib, E.BF16, backward=False, d=256, pe=1, **kw)
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=256, pe=0, **kw)) == "tensor-core"
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=128, pe=1, **kw)) == "tensor-core"
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(163 * 1024))  # an A100
    assert fwd_kernel(lib, Attn(lib, E.BF16, d=256, pe=1, **kw)) == "tensor-core"


# head_dim 256 with a table on a 99 KiB device (sm_86 / sm_89 / sm_120), where the tensor-core forward's CTA fits
# without the table's window only: the band split runs the interior blocks beyond the band on it, the masked and the
# band's blocks on the general kernel (band_split_on_general and attn_fwd_band_kernel in csrc/cuda/attention.cu) --
# from 512 keys a query row beyond the band.  Causal (blocks before the band); a partial last tensor-core CTA (rows
# 64-99: no interior there, the general kernel takes them whole) with GQA and a soft-cap; without causality (blocks
# on both sides of the band); two batch rows, a table starting past distance 0.
GENERAL_BAND_SPLIT_CASES = [
    dict(B=1, H=1, Hk=1, M=64, N=1400, d=256, off=1336, causal=True, pe=1, R=40, r_lo=0),
    dict(B=1, H=2, Hk=1, M=100, N=1500, d=256, off=1400, causal=True, pe=1, R=50, r_lo=-10, softcap=2.0),
    dict(B=1, H=1, Hk=1, M=64, N=1600, d=256, off=800, causal=False, pe=1, R=60, r_lo=-30),
    dict(B=2, H=1, Hk=1, M=96, N=1300, d=256, off=1204, causal=True, pe=1, R=20, r_lo=5),
]
SM_99_KIB = dict(WAVEPE_EMU_SMEM_OPTIN=str(99 * 1024), WAVEPE_EMU_SMEM_PER_SM=str(100 * 1024), WAVEPE_EMU_SMS="1")
GENERAL_SPLIT = "band split: tensor-core beyond the band, general"  # (fwd_kernel's, bwd_kernel's, dkdv_kernel's name)


def on_99_kib(monkeypatch):
    """The emulated device an sm_86 / sm_89 / sm_120: 99 KiB a CTA (one SM: SM_99_KIB)."""
    for name, value in SM_99_KIB.items():
        monkeypatch.setenv(name, value)
GENERAL_BAND_SPLIT_RUNS = [(0, E.BF16), (0, E.F16), (1, E.BF16), (2, E.F16), (3, E.BF16)]


@pytest.mark.parametrize("case,dtype", GENERAL_BAND_SPLIT_RUNS,
                         ids=[f"{c}-{DTYPE_IDS[t]}" for c, t in GENERAL_BAND_SPLIT_RUNS])
def test_band_split_onto_the_general_kernel_matches_oracle(lib, monkeypatch, case, dtype):
    kw = dict(GENERAL_BAND_SPLIT_CASES[case])
    on_99_kib(monkeypatch)
    prob = Attn(lib, dtype, seed=510 + case, **kw)
    assert lib.wavepe_cuda_attention_num_splits(C.byref(prob.a)) == 1
    assert fwd_kernel(lib, prob) == GENERAL_SPLIT
    assert_band_split_workspace(lib, prob)
    general = lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a))
    launches(lib)
    check_attention(lib, dtype, backward=False, seed=510 + case, **kw)
    got = launches(lib)
    # the tensor-core partial without the window, the general one (its K / V double-buffered where they fit), the
    # combine
    assert got[0] == BAND_SPLIT_LAUNCHES[0] and got[1] >= general and got[1] <= 99 * 1024 and got[2] == 0, got


# (WAVEPE_CUDA_BAND_SPLIT=1: the split wherever some block lies beyond the band, on rows of 450-550 keys, a third of
# the length its threshold had the test draw -- the threshold is
# test_band_split_onto_the_general_kernel_only_where_it_applies's; whole 64-row groups here always hold such blocks)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from([E.BF16, E.F16]), B=st.integers(1, 2), group=st.integers(1, 2),
       M=st.sampled_from([64, 100, 128, 150, 192]), N=st.integers(450, 550), causal=st.booleans(),
       R=st.integers(1, 120), r_lo=st.integers(-60, 40), window=st.sampled_from([0, 0, 350]),
       softcap=st.sampled_from([0.0, 0.0, 2.5]), data=st.data())
def test_band_split_onto_the_general_kernel_random_shapes(lib, monkeypatch, dtype, B, group, M, N, causal, R, r_lo,
                                                           window, softcap, data):
    on_99_kib(monkeypatch)
    monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", "1")
    off = data.draw(st.integers(N - M - 100, N - M) if causal else st.integers(0, N), label="off")
    kw = dict(B=B, H=group, Hk=1, M=M, N=N, d=256, off=off, causal=causal, pe=1, R=R, r_lo=r_lo, window=window,
              softcap=softcap, seed=data.draw(st.integers(0, 2**31), label="seed"))
    split = fwd_kernel(lib, Attn(lib, dtype, **kw)) == GENERAL_SPLIT
    assert split or M % 64, kw
    # the backward's band split onto the general kernels (bwd_band_split_on_general): where the forward's is, by the
    # same rule (band_split_pays_general)
    assert bwd_kernel(lib, Attn(lib, dtype, **kw)) == (GENERAL_SPLIT if split else "general"), kw
    check_attention(lib, dtype, **kw)


# ... and the backward's (bwd_band_split_on_general in csrc/cuda/attention_bwd.cu): where the tensor-core dQ and dK/dV
# fit without the table's window only (their one-buffer instances on such a device), each pass runs the interior blocks
# beyond the band on the table-free tensor-core instance, leaving fp32 sums, and the masked and the band's blocks on
# the general kernel, which steps over the first's blocks (the tensor-core CTAs': the dQ's 64 rows, the
# dK/dV's 64 keys) and adds the sums before its stores.
@pytest.mark.parametrize("case,dtype", GENERAL_BAND_SPLIT_RUNS,
                         ids=[f"{c}-{DTYPE_IDS[t]}" for c, t in GENERAL_BAND_SPLIT_RUNS])
def test_backward_band_split_onto_the_general_kernels_matches_oracle(lib, monkeypatch, case, dtype):
    kw = dict(GENERAL_BAND_SPLIT_CASES[case])
    on_99_kib(monkeypatch)
    prob = Attn(lib, dtype, seed=540 + case, **kw)
    split = GENERAL_SPLIT
    assert bwd_kernel(lib, prob) == dkdv_kernel(lib, prob) == split
    prob.forward()
    launches(lib)
    prob = check_attention(lib, dtype, seed=540 + case, **kw)
    got = launches(lib)
    # (the workspace: the first partials' fp32 sums of dQ, dK and dV besides the rest)
    B, H, Hk, M, N, d = prob.shape
    assert lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(prob.a)) >= 4 * d * (B * H * M + 2 * B * Hk * N)
    assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == DKDV_GONE_BYTES
    # (the forward's three, the backward's: delta, the dK/dV's two partials, the dQ's, the dT's and its fold)
    general = got[got.index(DKDV_GONE_BYTES) + 1]
    assert got[got.index(DKDV_GONE_BYTES):got.index(DQ_VONE_BYTES) + 2] == [DKDV_GONE_BYTES, general, DQ_VONE_BYTES,
                                                                            general], got
    assert_grads_normwise(prob, dtype)


def test_backward_band_split_onto_the_general_kernels_only_where_it_applies(lib, monkeypatch):
    kw = dict(GENERAL_BAND_SPLIT_CASES[0])
    on_99_kib(monkeypatch)
    split = GENERAL_SPLIT
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == split
    # not with documents, key padding, a clamped table, too few keys beyond the band, a head dim no padded call takes
    # (32: padded_head_dim), fp32, rows off 16 bytes, or a workspace over 1 GiB; a head dim padded to 256 (192) does
    assert bwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, d=192))) == split
    for change in (dict(cu=[[0, 100, 1400]]), dict(kpm=True), dict(clamp=True), dict(R=1000),
                   dict(N=600, off=536), dict(d=32), dict(row_pad=4)):
        assert bwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, **change))) == "general", change
    assert bwd_kernel(lib, Attn(lib, E.F32, **kw)) == "general"
    big = Attn(lib, E.BF16, **kw)
    big.a.batch = (1 << 30) // (4 * 256 * (64 + 2 * 1400)) + 1
    assert bwd_kernel(lib, big) == "general"
    # where the table's instances fit (an A100's 163 KiB), the tensor-core backward; where the table-free ones fit
    # with two buffers (the dK/dV's 102,800 bytes), the first partials on them -- run on rows of 700 keys, half the
    # case's, split under WAVEPE_CUDA_BAND_SPLIT=1 (the threshold is the case's, above)
    monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", "1")
    kw = dict(kw, N=700, off=636)
    shape = kernel_checks().CTA_SHAPE
    dq_full, kv_full = shape[("attn_bwd_dq_tc_kernel", "256, false")][1], shape[("attn_bwd_dkdv_tc_kernel", "256, false")][1]
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(163 * 1024))
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) in ("tensor-core", "tensor-core, band split")
    for optin, want in ((kv_full, {dq_full, kv_full}), (dq_full, {dq_full, DKDV_GONE_BYTES})):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(optin))
        prob = Attn(lib, E.BF16, **kw)
        assert bwd_kernel(lib, prob) == split, optin
        prob.forward()
        launches(lib)
        prob.backward(False)
        got = set(launches(lib)) & {dq_full, kv_full, DQ_VONE_BYTES, DKDV_GONE_BYTES}
        assert got == want, (optin, got)
    check_attention(lib, E.BF16, **kw)  # (the last: two buffers for the dQ's first partial, one for the dK/dV's)
    # a missing barrier or a shared buffer read before its copy shows in another thread order
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    kw = dict(GENERAL_BAND_SPLIT_CASES[1], N=700, off=600, seed=29)
    runs = []
    for order in (None, "serial"):
        if order:
            monkeypatch.setenv("WAVEPE_EMU_ORDER", order)
        prob = Attn(lib, E.F16, **kw)
        prob.forward()
        runs.append(prob.backward(False))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def test_band_split_onto_the_general_kernel_only_where_it_applies(lib, monkeypatch):
    kw = dict(GENERAL_BAND_SPLIT_CASES[0])
    on_99_kib(monkeypatch)
    split = GENERAL_SPLIT
    assert fwd_kernel(lib, Attn(lib, E.BF16, **kw)) == split
    # not with split-KV asked, documents, key padding, a clamped table, too few keys beyond the band (512 a row on
    # average), a head dim no padded call takes (32), fp32, rows off 16 bytes, or a workspace over 1 GiB; a head dim
    # padded to 256 (192) does
    prob = Attn(lib, E.BF16, splits=2, **kw)
    launches(lib)
    prob.forward()
    assert launches(lib) == [lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a)), 0]  # general split-KV
    assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, d=192))) == split
    for change in (dict(cu=[[0, 100, 1400]]), dict(kpm=True), dict(clamp=True), dict(R=1000),
                   dict(N=600, off=536), dict(d=32), dict(row_pad=4)):
        assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, **change))) == "general", change
    assert fwd_kernel(lib, Attn(lib, E.F32, **kw)) == "general"
    assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, pe=0))) == "tensor-core"  # no table: 67 KiB
    big = Attn(lib, E.BF16, **kw)
    big.a.batch = (1 << 30) // (2 * (4 * 256 + 5) * 64) + 1
    assert fwd_kernel(lib, big) == "general"
    # where the window fits (an A100's 163 KiB; the grant's edge), the tensor-core kernel whole
    for optin, want in ((163 * 1024, "tensor-core"), (BAND_SPLIT_LAUNCHES[1], "tensor-core"),
                        (BAND_SPLIT_LAUNCHES[1] - 1, split)):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(optin))
        assert fwd_kernel(lib, Attn(lib, E.BF16, **kw)) == want, optin
    # a missing barrier or a shared buffer read before its copy shows in another thread order
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    kw = dict(GENERAL_BAND_SPLIT_CASES[1], seed=23)
    want = Attn(lib, E.F16, **kw).forward()
    monkeypatch.setenv("WAVEPE_EMU_ORDER", "serial")
    for x, y in zip(want, Attn(lib, E.F16, **kw).forward()):
        np.testing.assert_array_equal(x, y)


# head_dim 256 with a table: the band split (csrc/cuda/attention.cu, band_split).  The table's window keeps the
# tensor-core forward's CTA to one an SM; the interior blocks beyond the table's band run in a launch without it
# (two an SM), the masked and the band's blocks in a second, their partials combined as split-KV's -- where the
# blocks beyond the band are over 3,072 keys a query row (kBandSplitKeys).  Causal with blocks before the band
# (and the backward after it); a partial last query block, GQA and a soft-cap; without causality blocks on both
# sides of the band; a table starting past distance 0 (the causal diagonal beyond it).
BAND_SPLIT_CASES = [
    dict(B=1, H=1, Hk=1, M=64, N=3300, d=256, off=3236, causal=True, pe=1, R=40, r_lo=0),
    dict(B=1, H=2, Hk=1, M=70, N=6600, d=256, off=6530, causal=True, pe=1, R=50, r_lo=-10, softcap=2.0),
    dict(B=1, H=1, Hk=1, M=64, N=3400, d=256, off=1700, causal=False, pe=1, R=60, r_lo=-30),
    dict(B=2, H=1, Hk=1, M=64, N=3300, d=256, off=3236, causal=True, pe=1, R=20, r_lo=5),
]
# its launches' shared memory: the partial beyond the band (67 KiB: two CTAs an SM), the other (116.5 KiB), the combine
BAND_SPLIT_LAUNCHES = [68640, 119328, 0]


def launches(lib):
    """The dynamic shared memory of each emulated launch since the last call."""
    return [int(x) for x in lib.wavepe_emu_launch_log().decode().split()]


FWD_SPLIT_RUNS = [(0, E.BF16), (0, E.F16), (1, E.BF16), (2, E.F16), (3, E.BF16)]


def assert_band_split_workspace(lib, prob):
    """The forward's workspace of one split (num_splits 1) holds the band split's two partials of every row at head
    dim 256: O (fp32), lse and a seen flag."""
    B, H, _, M, _, d = prob.shape
    rows = B * H * M
    up = lambda x: -(-x // 256) * 256  # noqa: E731
    assert d == 256 and lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(prob.a), 1) == up(
        2 * rows * d * 4) + up(2 * rows * 4) + up(2 * rows)


@pytest.mark.parametrize("case,dtype", FWD_SPLIT_RUNS, ids=[f"{c}-{DTYPE_IDS[t]}" for c, t in FWD_SPLIT_RUNS])
def test_tensor_core_forward_band_split_matches_oracle(lib, monkeypatch, dtype, case):
    kw = dict(BAND_SPLIT_CASES[case])
    monkeypatch.setenv("WAVEPE_EMU_SMS", "1")  # (no split-KV picked: the grid fills the device)
    prob = Attn(lib, dtype, seed=450 + case, **kw)
    assert lib.wavepe_cuda_attention_num_splits(C.byref(prob.a)) == 1
    assert fwd_kernel(lib, prob) == "tensor-core, band split"
    assert_band_split_workspace(lib, prob)
    launches(lib)
    check_attention(lib, dtype, backward=False, seed=450 + case, **kw)  # (the backward after it: below)
    assert launches(lib)[:3] == BAND_SPLIT_LAUNCHES


# an H100 / H200 SM (228 KiB): where the backward's table-free dK/dV and dQ (100 KiB) fit two an SM, an A100's
# (164 KiB) one
H100_SM = dict(WAVEPE_EMU_SMEM_PER_SM=str(228 * 1024), WAVEPE_EMU_SMEM_OPTIN=str(227 * 1024), WAVEPE_EMU_CC_MAJOR="9")
A100_SM = dict(WAVEPE_EMU_SMEM_PER_SM=str(164 * 1024), WAVEPE_EMU_SMEM_OPTIN=str(163 * 1024), WAVEPE_EMU_CC_MAJOR="8")
# the backward's launches: the dK/dV's table-free instance then the table's, the dQ's alike
BAND_SPLIT_BWD_LAUNCHES = [102800, 145040, 102432, 144672]
# causal (and its dT), GQA with a soft-cap, without causality
BAND_SPLIT_BWD_CASES = [
    (BAND_SPLIT_CASES[0], E.BF16),
    (dict(B=1, H=2, Hk=1, M=64, N=3300, d=256, off=3236, causal=True, pe=1, R=50, r_lo=-10, softcap=2.0), E.F16),
    (BAND_SPLIT_CASES[2], E.BF16),
]


@pytest.mark.parametrize("case", range(len(BAND_SPLIT_BWD_CASES)))
def test_tensor_core_backward_band_split_matches_oracle(lib, monkeypatch, case):
    kw, dtype = dict(BAND_SPLIT_BWD_CASES[case][0]), BAND_SPLIT_BWD_CASES[case][1]
    for name, value in dict(H100_SM, WAVEPE_EMU_SMS="1").items():
        monkeypatch.setenv(name, value)
    prob = Attn(lib, dtype, seed=470 + case, **kw)
    assert bwd_kernel(lib, prob) == "tensor-core, band split"
    launches(lib)
    prob = check_attention(lib, dtype, seed=470 + case, want_dtable=case == 0, **kw)
    got = launches(lib)
    assert any(got[i:i + 4] == BAND_SPLIT_BWD_LAUNCHES for i in range(len(got))), got
    assert_grads_normwise(prob, dtype)


# head_dim 64 and 128 with a table: the band split onto the wide instances (band_split_blocks in
# csrc/cuda/attention_tile.cuh).  The window costs no occupancy there but keeps a call off the wide (32 rows a
# warp) forward and dQ, whose loops move fewer shared-memory bytes an HMMA: the interior blocks beyond the band run
# on them, the masked and the band's on the 16-row table instances (64-row CTAs, the forward's key blocks twice the
# wide one's), both dividing the blocks by 128-row groups; the dK/dV alike by 128-key groups (dkdv_band_split_blocks
# in csrc/cuda/attention_bwd.cu: the wide dK/dV, then the 16-key table instance).  Causal with a partial last group
# (and a partial last 16-row CTA), GQA with a soft-cap at 64, without causality (blocks on both sides of the band),
# two batch rows with a window (blocks the 64-key CTAs see whole at both of its edges, the 128-key groups not).  Each
# dtype at each head dim (the wide dQ's band instance at 128 in fp16 ran in no test before case 2 was fp16).
WIDE_BAND_SPLIT_CASES = [
    (dict(B=1, H=1, Hk=1, M=130, N=6600, d=128, off=6470, causal=True, pe=1, R=40, r_lo=0), E.BF16),
    (dict(B=1, H=2, Hk=1, M=200, N=6600, d=64, off=6400, causal=True, pe=1, R=50, r_lo=-10, softcap=2.0), E.F16),
    (dict(B=1, H=1, Hk=1, M=128, N=6800, d=128, off=3400, causal=False, pe=1, R=60, r_lo=-30), E.F16),
    (dict(B=2, H=1, Hk=1, M=128, N=6000, d=64, off=5850, causal=True, window=5000, pe=1, R=30, r_lo=0), E.BF16),
]
# 128 queries at 16,772 .. 16,899: over kBandSplitKeysWide (16,384) keys a row beyond the band, where the forward splits
# at 128 on an H100's SM too (its first partial buys no second CTA there)
WIDE_LONG_CASE = dict(B=1, H=1, Hk=1, M=128, N=16900, d=128, off=16772, causal=True, pe=1, R=40, r_lo=0)
# the launches' shared memory: the forward's wide partial (no window), the 16-row one (the window), the combine;
# the backward's wide dK/dV, the 16-key table dK/dV, the wide dQ, the 16-row table dQ
WIDE_BAND_SPLIT_LAUNCHES = {128: ([54304, 88128, 0], [179432, 97424, 107600, 96832]),
                            64: ([38976, 74880, 0], [113896, 75920, 76944, 74880])}


@pytest.mark.parametrize("case", range(len(WIDE_BAND_SPLIT_CASES)))
def test_band_split_onto_the_wide_instances_matches_oracle(lib, monkeypatch, case):
    kw, dtype = dict(WIDE_BAND_SPLIT_CASES[case][0]), WIDE_BAND_SPLIT_CASES[case][1]
    for name, value in dict(H100_SM, WAVEPE_EMU_SMS="1").items():
        monkeypatch.setenv(name, value)
    prob = Attn(lib, dtype, seed=490 + case, **kw)
    assert lib.wavepe_cuda_attention_num_splits(C.byref(prob.a)) == 1
    # on an H100's SM the forward's split buys no second CTA: ~6,500 keys a row beyond the band are under
    # kBandSplitKeysWide, one launch (the table instance); the backward splits
    assert fwd_kernel(lib, prob) == "tensor-core"
    assert bwd_kernel(lib, prob) == dkdv_kernel(lib, prob) == "tensor-core, band split"
    launches(lib)
    prob = check_attention(lib, dtype, seed=490 + case, **kw)
    got = launches(lib)
    fwd, bwd = WIDE_BAND_SPLIT_LAUNCHES[kw["d"]]
    assert got[0] == fwd[1], got
    assert any(got[i:i + 4] == bwd for i in range(len(got))), got
    assert_grads_normwise(prob, dtype)
    if kw["d"] == 128:  # an A100's SM holds one table CTA at 128, three wide ones: the forward splits there
        for name, value in A100_SM.items():
            monkeypatch.setenv(name, value)
        assert fwd_kernel(lib, Attn(lib, dtype, **kw)) == "tensor-core, band split"
        check_attention(lib, dtype, backward=False, seed=500 + case, **kw)
        assert launches(lib)[:3] == fwd


@pytest.mark.parametrize("case", [c for c, (kw, _) in enumerate(WIDE_BAND_SPLIT_CASES) if kw["d"] == 64])
def test_backward_band_split_at_head_dim_64_on_a_100_kib_sm_matches_oracle(lib, monkeypatch, case):
    # on a 100 KiB SM (sm_86 / sm_89 / sm_120) at head_dim 64 the dQ's first partial runs V's one buffer (47,232 bytes:
    # two CTAs an SM, where one wide CTA of 76,944 fits), over the same 128-row groups' blocks as the wide one
    # (band_split_blocks), the second the 16-row table instance; the dK/dV runs once (the wide one does not fit)
    kw, dtype = dict(WIDE_BAND_SPLIT_CASES[case][0]), WIDE_BAND_SPLIT_CASES[case][1]
    on_99_kib(monkeypatch)
    prob = Attn(lib, dtype, seed=600 + case, **kw)
    assert bwd_kernel(lib, prob) == "tensor-core, band split" and dkdv_kernel(lib, prob) == "tensor-core"
    assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == 75920
    launches(lib)
    prob = check_attention(lib, dtype, seed=600 + case, **kw)
    got = launches(lib)
    assert any(got[i:i + 3] == [75920, DQ_VONE64_BYTES, 74880] for i in range(len(got))), got
    assert_grads_normwise(prob, dtype)


@pytest.mark.parametrize("case", range(len(WIDE_BAND_SPLIT_CASES)))
def test_forward_band_split_on_a_100_kib_sm_matches_oracle(lib, monkeypatch, case):
    # on a 100 KiB SM (sm_86 / sm_89 / sm_120) at head_dim 128 the forward's first partial runs the 16-row instance
    # without the window (35,904 bytes, Q in V's tile: two CTAs an SM, where one wide CTA of 54,304 fits), over the
    # same 128-row groups' blocks as the wide one (band_split_blocks); at 64 the wide one still (two of either)
    kw, dtype = dict(WIDE_BAND_SPLIT_CASES[case][0]), WIDE_BAND_SPLIT_CASES[case][1]
    on_99_kib(monkeypatch)
    prob = Attn(lib, dtype, seed=520 + case, **kw)
    assert lib.wavepe_cuda_attention_num_splits(C.byref(prob.a)) == 1
    assert fwd_kernel(lib, prob) == "tensor-core, band split"
    launches(lib)
    check_attention(lib, dtype, backward=False, seed=520 + case, **kw)
    assert launches(lib)[:3] == ([35904, 88128, 0] if kw["d"] == 128 else WIDE_BAND_SPLIT_LAUNCHES[64][0])
    if case == 0:  # the same output in another thread order
        want = Attn(lib, E.F16, **dict(kw, seed=23)).forward()
        monkeypatch.setenv("WAVEPE_EMU_ORDER", "serial")
        for x, y in zip(want, Attn(lib, E.F16, **dict(kw, seed=23)).forward()):
            np.testing.assert_array_equal(x, y)


# (rows of 1,000-1,300 keys: too short for band_split_pays's 3,072 beyond the band, which the test checks, then split
# by WAVEPE_CUDA_BAND_SPLIT=1 wherever some block lies beyond the band -- whole 128-row groups here always hold such
# blocks; the rows drawn before it, to reach the threshold, were ~5x as long)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from([E.BF16, E.F16]), group=st.integers(1, 2), M=st.sampled_from([128, 256, 300, 384]),
       N=st.integers(1000, 1300), causal=st.booleans(), R=st.integers(1, 80), r_lo=st.integers(-40, 20),
       window=st.sampled_from([0, 0, 700]), softcap=st.sampled_from([0.0, 0.0, 2.5]), data=st.data())
def test_forward_band_split_on_a_100_kib_sm_random_shapes(lib, monkeypatch, dtype, group, M, N, causal, R, r_lo,
                                                         window, softcap, data):
    # the first partial on the 16-row instance without the window, the second on the table one, both over the same
    # 128-row groups' blocks: partial last groups and CTAs, offsets, windows, soft-caps, GQA -- against the oracle
    on_99_kib(monkeypatch)
    off = data.draw(st.integers(N - M - 150, N - M) if causal else st.integers(0, N), label="off")
    kw = dict(B=1, H=group, Hk=1, M=M, N=N, d=128, off=off, causal=causal, pe=1, R=R, r_lo=r_lo, window=window,
              softcap=softcap, seed=data.draw(st.integers(0, 2**31), label="seed"))
    prob = Attn(lib, dtype, **kw)
    monkeypatch.delenv("WAVEPE_CUDA_BAND_SPLIT", raising=False)  # (the last example's)
    assert fwd_kernel(lib, prob) == "tensor-core", kw
    monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", "1")
    split = fwd_kernel(lib, prob) == "tensor-core, band split"
    assert split or M % 128, kw
    launches(lib)
    check_attention(lib, dtype, backward=False, **kw)
    if split:
        assert launches(lib)[:3] == [35904, 88128, 0]


def test_band_split_onto_the_wide_instances_only_where_it_applies(lib, monkeypatch):
    kw = dict(WIDE_BAND_SPLIT_CASES[0][0])
    for name, value in dict(H100_SM, WAVEPE_EMU_SMS="1").items():
        monkeypatch.setenv(name, value)
    # not for 64 queries or fewer (no wide instance), nor where too few keys lie beyond the band
    for change in (dict(M=64, off=6536), dict(N=3000, off=2870), dict(R=3000)):
        prob = Attn(lib, E.BF16, **dict(kw, **change))
        assert (fwd_kernel(lib, prob), bwd_kernel(lib, prob)) == ("tensor-core", "tensor-core"), change
    # the dK/dV splits where the wide dK/dV may run (at 128 below compute capability 12: on a B200-like 10 too), its
    # sums (dK's and dV's rows, fp32) in the workspace; where it may not, the dQ splits alone (a compute capability
    # 12 with an H100's shared memory: no such device, but the path is the one a smaller dK/dV budget would take)
    prob = Attn(lib, E.BF16, **kw)
    args = type(prob.a).from_buffer_copy(prob.a)
    args.dq = args.dk = args.dv = args.q  # (the workspace's size reads no gradient)
    split_ws = lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(args))
    monkeypatch.setenv("WAVEPE_EMU_CC_MAJOR", "10")
    assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == ("tensor-core, band split",) * 2
    assert lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(args)) == split_ws
    monkeypatch.setenv("WAVEPE_EMU_CC_MAJOR", "12")
    assert (bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == ("tensor-core, band split", "tensor-core")
    assert split_ws - lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(args)) == 2 * kw["N"] * 128 * 4 > 0
    monkeypatch.setenv("WAVEPE_EMU_CC_MAJOR", "9")
    # an A100's SM (164 KiB) holds one wide dQ CTA at 128: the backward runs unsplit, the forward splits
    monkeypatch.setenv("WAVEPE_EMU_SMEM_PER_SM", str(164 * 1024))
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(163 * 1024))
    prob = Attn(lib, E.BF16, **kw)
    assert (fwd_kernel(lib, prob), bwd_kernel(lib, prob)) == ("tensor-core, band split", "tensor-core")
    prob = Attn(lib, E.BF16, **dict(kw, d=64))  # (at 64 two table CTAs fit: the forward's split from the longer rows)
    assert (fwd_kernel(lib, prob), bwd_kernel(lib, prob), dkdv_kernel(lib, prob)) == (
        "tensor-core", "tensor-core, band split", "tensor-core, band split")
    assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(WIDE_LONG_CASE, d=64))) == "tensor-core, band split"
    # an H100's SM: the forward splits from kBandSplitKeysWide keys a row beyond the band (~16,700 here; with 512 keys
    # fewer, ~16,200 counted by whole blocks, not)
    for name, value in H100_SM.items():
        monkeypatch.setenv(name, value)
    assert fwd_kernel(lib, Attn(lib, E.BF16, **WIDE_LONG_CASE)) == "tensor-core, band split"
    short = dict(WIDE_LONG_CASE, N=WIDE_LONG_CASE["N"] - 512, off=WIDE_LONG_CASE["off"] - 512)
    assert fwd_kernel(lib, Attn(lib, E.BF16, **short)) == "tensor-core"
    for name, value in A100_SM.items():
        monkeypatch.setenv(name, value)
    # WAVEPE_CUDA_WIDE=0 keeps the 16-row instances, unsplit; the same output in another thread order
    monkeypatch.setenv("WAVEPE_CUDA_WIDE", "0")
    prob = Attn(lib, E.BF16, **kw)
    assert (fwd_kernel(lib, prob), bwd_kernel(lib, prob)) == ("tensor-core", "tensor-core")
    monkeypatch.delenv("WAVEPE_CUDA_WIDE")
    want = Attn(lib, E.F16, **dict(kw, seed=22)).forward()
    monkeypatch.setenv("WAVEPE_EMU_ORDER", "serial")
    for x, y in zip(want, Attn(lib, E.F16, **dict(kw, seed=22)).forward()):
        np.testing.assert_array_equal(x, y)


def test_tensor_core_forward_band_split_only_where_it_pays(lib, monkeypatch):
    kw = dict(BAND_SPLIT_CASES[0])
    monkeypatch.setenv("WAVEPE_EMU_SMS", "1")
    assert fwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core, band split"
    # not with split-KV asked, documents, key padding, a clamped table (every block meets it), a band over a
    # third or more of the blocks (a wider table, a window), fewer keys beyond the band, another head dim, a device that holds two CTAs with
    # the window (or not two without it), or a workspace over 1 GiB (B H M rows of 2 x (4 d + 5) bytes)
    prob = Attn(lib, E.BF16, splits=2, **kw)
    launches(lib)  # (the log since the last call: another test's launches)
    prob.forward()
    assert launches(lib) == [119328, 0]  # split-KV's two splits in one launch, their combine
    for change in (dict(cu=[[0, 100, 3300]]), dict(kpm=True), dict(clamp=True), dict(R=1500), dict(window=60),
                   dict(N=3000, off=2936), dict(d=128)):
        assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, **change))) == "tensor-core", change
    big = Attn(lib, E.BF16, **kw)
    big.a.batch = (1 << 30) // (2 * (4 * 256 + 5) * 64) + 1
    assert fwd_kernel(lib, big) == "tensor-core"
    for switch, want in (("0", "tensor-core"), ("1", "tensor-core, band split")):  # WAVEPE_CUDA_BAND_SPLIT's A/B
        monkeypatch.setenv("WAVEPE_CUDA_BAND_SPLIT", switch)
        assert fwd_kernel(lib, Attn(lib, E.BF16, **kw)) == want, switch
    assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, N=3000, off=2936))) == "tensor-core, band split"
    assert fwd_kernel(lib, Attn(lib, E.BF16, **dict(kw, clamp=True))) == "tensor-core"  # (the switch never the rest)
    monkeypatch.delenv("WAVEPE_CUDA_BAND_SPLIT")
    for per_sm in (2 * (119328 + 1024), 2 * (68640 + 1024) - 1):
        monkeypatch.setenv("WAVEPE_EMU_SMEM_PER_SM", str(per_sm))
        assert fwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core", per_sm
    # a missing barrier or a shared buffer read before its copy shows in another thread order
    monkeypatch.delenv("WAVEPE_EMU_SMEM_PER_SM")
    want = Attn(lib, E.F16, **dict(kw, seed=21)).forward()
    monkeypatch.setenv("WAVEPE_EMU_ORDER", "serial")
    for x, y in zip(want, Attn(lib, E.F16, **dict(kw, seed=21)).forward()):
        np.testing.assert_array_equal(x, y)


def test_tensor_core_forward_is_taken_only_where_it_applies(lib):
    # another head dim (fewer than 64 queries: not padded, test_padded_head_dims_only_where_they_apply), rows not on
    # 16 bytes, fp32: the general kernel
    for dtype, kw in ((E.F16, dict(d=96, pe=0, M=40)), (E.BF16, dict(d=64, pe=0, row_pad=4)),
                      (E.BF16, dict(d=192, pe=2, M=40)), (E.F32, dict(d=256, pe=0))):
        prob = Attn(lib, dtype, **dict(dict(B=1, H=1, Hk=1, M=70, N=70, off=0, causal=True), **kw))
        assert fwd_kernel(lib, prob) == "general", kw
    prob = Attn(lib, E.F16, B=1, H=1, Hk=1, M=70, N=70, d=64, off=0, causal=True, pe=0, row_pad=8)
    assert fwd_kernel(lib, prob) == "tensor-core, 32 rows a warp"  # strided rows on 16 bytes (more than 64 queries)
    # heads packed only decoding one query with a group, and not with ALiBi (a slope per head)
    for kw, want in ((dict(H=4, Hk=4, M=1, pe=0), "tensor-core"), (dict(H=4, Hk=2, M=2, pe=0), "tensor-core"),
                     (dict(H=4, Hk=2, M=1, pe=2), "tensor-core"), (dict(H=4, Hk=2, M=1, pe=1, R=9), "tensor-core, GQA heads packed")):
        prob = Attn(lib, E.BF16, B=1, N=70, d=64, off=69, causal=True, **kw)
        assert fwd_kernel(lib, prob) == want, kw


# ---- head dims without a tensor-core instance: the call on zero-padded copies (attention.cu, "Padded head dims") ----
PADDED_CASES = [
    # Phi-3-mini's 96 with a learned table (its dT), causal, GQA
    dict(B=1, H=4, Hk=2, M=130, N=150, d=96, off=20, causal=True, pe=1, R=60, r_lo=0),
    # Phi-2's 80: ALiBi (its slopes' gradient), keys on both sides of the queries, padding, rows off 16 bytes (the
    # copies are dense: the tensor-core kernels take them), more than 64 queries (the wide instances)
    dict(B=2, H=2, Hk=2, M=70, N=90, d=80, off=20, causal=False, pe=2, kpm=True, row_pad=4),
    # 40 -> 64: a soft-cap and a window
    dict(B=1, H=2, Hk=1, M=64, N=100, d=40, off=36, causal=True, pe=0, softcap=2.0, window=50),
    # 112 with packed documents
    dict(B=2, H=2, Hk=1, M=100, N=100, d=112, off=0, causal=True, pe=0, cu=[[0, 40, 100], [0, 99, 100]]),
    # 136 and 200 -> 256, with a table; lse's gradient
    dict(B=1, H=1, Hk=1, M=64, N=90, d=136, off=26, causal=True, pe=1, R=30, r_lo=0, grad_lse=True),
    dict(B=1, H=2, Hk=1, M=70, N=70, d=200, off=0, causal=False, pe=1, R=20, r_lo=-10, clamp=True),
]


def padded_dims(lib, prob):
    """(forward, backward) head dims the call's copies are padded to (0: not padded)."""
    return (lib.wavepe_cuda_attention_fwd_padded_head_dim(C.byref(prob.a)),
            lib.wavepe_cuda_attention_bwd_padded_head_dim(C.byref(prob.a)))


def next_instance(d):
    return 64 if d < 64 else 128 if d < 128 else 256


@pytest.mark.parametrize("case,dtype", alternating(range(len(PADDED_CASES))))
def test_padded_head_dims_match_oracle(lib, dtype, case):
    kw = dict(PADDED_CASES[case])
    grad_lse = kw.pop("grad_lse", False)
    prob = Attn(lib, dtype, seed=800 + case, **kw)
    assert padded_dims(lib, prob) == (next_instance(kw["d"]),) * 2
    assert fwd_kernel(lib, prob).startswith("tensor-core") and bwd_kernel(lib, prob).startswith("tensor-core")
    # the outputs' guard bytes and NaN-filled rows (Attn): nothing written past d columns, nothing left unwritten;
    # the workspace's guards: the copies inside it
    prob = check_attention(lib, dtype, seed=800 + case, grad_lse=grad_lse, **kw)
    assert_grads_normwise(prob, dtype)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([E.BF16, E.F16]), d=st.sampled_from([36, 40, 72, 96, 100, 144, 200]), Hk=st.integers(1, 2),
       group=st.integers(1, 2), M=st.integers(64, 160), N=st.integers(1, 200), off=st.integers(-40, 150),
       causal=st.booleans(), pe=st.integers(0, 2), R=st.integers(1, 80), r_lo=st.integers(-20, 20),
       kpm=st.booleans(), window=st.sampled_from([0, 0, 30]), softcap=st.sampled_from([0.0, 0.0, 2.0]),
       seed=st.integers(0, 2**31))
def test_padded_head_dims_random_shapes(lib, dtype, d, Hk, group, M, N, off, causal, pe, R, r_lo, kpm, window, softcap,
                                        seed):
    # (36 and 100: rows off 16 bytes, the copies element by element; the others in 16-byte chunks)
    kw = dict(B=1, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, R=R, r_lo=r_lo, kpm=kpm,
              window=window, softcap=softcap, seed=seed)
    assert padded_dims(lib, Attn(lib, dtype, **kw)) == (next_instance(d),) * 2
    check_attention(lib, dtype, **kw)


def test_padded_head_dims_only_where_they_apply(lib, monkeypatch):
    base = dict(B=1, H=2, Hk=1, M=64, N=80, off=16, causal=True, pe=0)
    # between 32 and 256, not 64 or 128: to the next instance's (at most twice the products)
    for d in (33, 48, 72, 96, 120, 136, 248, 32, 16, 64, 128, 256):
        want = next_instance(d) if 32 < d < 256 and d not in (64, 128) else 0
        assert padded_dims(lib, Attn(lib, E.BF16, **dict(base, d=d))) == (want, want), d
    # not decoding nor fewer than 64 queries (the copies of K and V would cost what the kernel reads), not fp32 /
    # fp64, not without keys: the general kernels
    for dtype, change in ((E.BF16, dict(M=63)), (E.F16, dict(M=1, off=79)), (E.F32, {}), (E.F64, {}),
                          (E.BF16, dict(N=0))):
        prob = Attn(lib, dtype, **dict(base, d=96, **change))
        assert padded_dims(lib, prob) == (0, 0) and fwd_kernel(lib, prob) == "general", change
    # the workspace: the copies (q, k, v, the table, out; the backward's also dO, dq, dk, dv, dT), rows of 128, each
    # on 256 bytes, then the padded call's own -- and its kernels' shared memory
    prob, inner = (Attn(lib, E.BF16, **dict(base, d=d, pe=1, R=30)) for d in (96, 128))
    up = lambda x: -(-x // 256) * 256  # noqa: E731
    q, kv, t = up(2 * 64 * 128 * 2), up(80 * 128 * 2), up(30 * 128 * 2)
    assert lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(prob.a), 1) == 2 * q + 2 * kv + t + \
        lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(inner.a), 1)
    for x in (prob, inner):
        x.a.dq = x.a.dk = x.a.dv = x.a.dtable = x.a.q  # (only their presence is read)
    assert lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(prob.a)) == 4 * q + 4 * kv + 2 * t + \
        lib.wavepe_cuda_attention_bwd_workspace_bytes(C.byref(inner.a))
    for fn in (lib.wavepe_cuda_attention_fwd_smem_bytes, lib.wavepe_cuda_attention_bwd_smem_bytes):
        assert fn(C.byref(prob.a)) == fn(C.byref(inner.a)) > 0
    # WAVEPE_CUDA_PAD=0 (the benchmark's A/B; no copies' workspace): the general kernels, unpadded
    monkeypatch.setenv("WAVEPE_CUDA_PAD", "0")
    assert padded_dims(lib, prob) == (0, 0) and fwd_kernel(lib, prob) == bwd_kernel(lib, prob) == "general"
    check_attention(lib, E.BF16, **dict(base, d=96, pe=1, R=30))


def kernel_checks():
    """.ci/check_cuda_kernels.py as a module: its occupancy model's CTA shapes, checked against the launchers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_cuda_kernels", os.path.join(E.ROOT, ".ci", "check_cuda_kernels.py"))
    ck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ck)
    return ck


def test_occupancy_model_reads_the_launchers_shared_memory(lib):
    # .ci/check_cuda_kernels.py's CTA_SHAPE states the tensor-core forward's CTA; the launcher agrees
    ck = kernel_checks()
    for d in (64, 128, 256):
        threads, smem = ck.CTA_SHAPE[("attn_fwd_tc_kernel", f"{d}, false")]
        assert ck.CTA_SHAPE[("attn_fwd_tc_kernel", f"{d}, true")] == (threads, smem)
        got = []
        for pe in (0, 2, 1):  # the most with a table
            prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=64, N=70, d=d, off=0, causal=True, pe=pe, R=9)
            assert fwd_kernel(lib, prob) == "tensor-core" and threads == 128
            got.append(lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a)))
        assert max(got) == got[-1] == smem
        if d <= 128:  # more than 64 queries without a table: the wide instance's CTA (128 rows, blocks of 64 / 32 keys)
            bn = 64 if d == 64 else 32
            assert ck.CTA_SHAPE[("attn_fwd_tc_wide_kernel", f"{d}, true")] == ck.CTA_SHAPE[
                ("attn_fwd_tc_wide_kernel", f"{d}, false")]  # (the band split's partial: the same tiles)
            assert ck.CTA_SHAPE[("attn_fwd_tc_wide_kernel", f"{d}, false")] == (128, wide := (128 + 2 * bn) * (d + 8) * 2 + bn
                                                                             + 128 * 16)
            for pe in (0, 2):
                prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=70, N=70, d=d, off=0, causal=True, pe=pe)
                assert fwd_kernel(lib, prob) == "tensor-core, 32 rows a warp"
                assert lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a)) == wide
            assert ck.occupancy(255, 128, wide, "sm_90") == (2, 8)  # registers-bound, as the 16-row instance
        # WARPS_TARGET_BY_SHAPE: at head_dim 256 a table's window leaves one CTA an SM; without one, two fit
        if d == 256:
            assert ck.SM_LIMITS["sm_90"]["smem"] // (smem + 1024) == 1 and 2 * (got[0] + 1024) <= 228 * 1024
            # the dK/dV and dQ: two CTAs an SM without a table, one with
            for pe, table in ((0, "false"), (1, "true")):
                (t_kv, kv), (t_q, q) = (ck.CTA_SHAPE[(k, f"256, {table}")]
                                        for k in ("attn_bwd_dkdv_tc_kernel", "attn_bwd_dq_tc_kernel"))
                prob = Attn(lib, E.F16, B=1, H=1, Hk=1, M=70, N=70, d=d, off=0, causal=True, pe=pe, R=9)
                assert bwd_kernel(lib, prob) == "tensor-core" and t_kv == t_q == 128
                assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == max(kv, q)
                for x in (kv, q):
                    assert ck.SM_LIMITS["sm_90"]["smem"] // (x + 1024) == (2 if table == "false" else 1)
            continue
        # the tensor-core dK/dV and dQ, kernels of their own with a table; the backward's figure the larger of
        # their CTAs
        for pes, table in (((0, 2), "false"), ((1,), "true")):
            (t_kv, kv), (t_q, q) = (ck.CTA_SHAPE[(k, f"{d}, {table}")]
                                    for k in ("attn_bwd_dkdv_tc_kernel", "attn_bwd_dq_tc_kernel"))
            for pe in pes:  # (64 queries: the 16-row dQ)
                prob = Attn(lib, E.F16, B=1, H=1, Hk=1, M=64, N=70, d=d, off=0, causal=True, pe=pe, R=9)
                assert bwd_kernel(lib, prob) == "tensor-core" and t_kv == t_q == 128
                assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == max(kv, q)
            # the dQ layout: Q and dO of 64 rows, two buffers of K and V of 32 keys (64 at d = 64), rows of d + 8
            # elements; two key masks, 64 row ranges; with a table its window (64 + bn rows) -- no scratch: the
            # window's bias reaches S, and dS dQ through the window, by shuffles (until 2026-11-29 each warp's H,
            # 16 x (bn + 24) elements, was one)
            bn = 64 if d == 64 else 32
            extra = (64 + bn) * (d + 8) * 2 if table == "true" else 0
            assert q == (2 * 64 + 4 * bn) * (d + 8) * 2 + 2 * bn + 64 * 16 + extra
            # two CTAs on an H100 / H200 (228 KiB an SM, 1 KiB reserved a CTA)
            assert 2 * (max(kv, q) + 1024) <= 228 * 1024
            if table == "false":
                # the wide dQ (more than 64 queries; at head_dim 128 on an H100): Q and dO of 128 rows, the same K
                # and V buffers, key masks; 128 row ranges, K's and V's first rows, each row's lse and D
                threads, wq = ck.CTA_SHAPE[("attn_bwd_dq_tc_wide_kernel", f"{d}, false")]
                assert ck.CTA_SHAPE[("attn_bwd_dq_tc_wide_kernel", f"{d}, true")] == (threads, wq)
                assert threads == 128 and wq == (2 * 128 + 4 * bn) * (d + 8) * 2 + 2 * bn + 128 * 16 + 16 + 128 * 8
                # the wide dK/dV (the same calls): 8 warps, K and V of 128 keys, Q and dO of 64 rows in two buffers,
                # P^T and dS^T (128 x 72 elements), each row's lse and D (two buffers), 128 key masks and row ranges,
                # the order (20 ints) and the CTA's three indices -- one CTA an SM, 8 warps, by its registers
                wide_kv = 2 * 128 * (d + 8) * 2 + 4 * 64 * (d + 8) * 2 + 2 * 128 * 72 * 2 + 4 * 64 * 4 + 128 + 128 * 16 + 80 + 24
                for kind in (1, 2, 3):
                    assert ck.CTA_SHAPE[("attn_bwd_dkdv_tc_wide_kernel", f"{d}, {kind}")] == (256, wide_kv)
                with mock.patch.dict(os.environ, H100_SM):
                    prob = Attn(lib, E.F16, B=1, H=1, Hk=1, M=70, N=70, d=d, off=0, causal=True, pe=0)
                    assert bwd_kernel(lib, prob) == "tensor-core, dQ 32 rows a warp"
                    assert dkdv_kernel(lib, prob) == "tensor-core, 32 keys a warp"
                    assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == max(wide_kv, wq)
                assert 2 * (wq + 1024) <= 228 * 1024 and ck.occupancy(255, 128, wq, "sm_90") == (2, 8)
                assert ck.occupancy(255, 256, wide_kv, "sm_90") == (1, 8)
        # a learned table's dT (attn_bwd_dtable_tc_kernel): Q, dO, K, V of 64 rows and the window's 128 (rows of
        # d + 8 elements; the key mask in the window's last row), H (64 x 136 elements: in dO's place at 128, rows
        # alike), 64 row ranges: two CTAs an SM at both head dims (three by shared memory at 64)
        prob = Attn(lib, E.F16, B=1, H=1, Hk=1, M=70, N=70, d=d, off=0, causal=True, pe=1, R=9)
        prob.a.dtable = prob.a.table  # (asked, not written: the figures only)
        assert dtable_kernel(lib, prob) == "tensor-core"
        for cap in ("false", "true"):
            assert ck.CTA_SHAPE[("attn_bwd_dtable_tc_kernel", f"{d}, {cap}")] == (128, dt := (
                6 * 64 * (d + 8) * 2 + (0 if d == 128 else 64 * 136 * 2) + 64 * 16))
        assert lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a)) == max(dt, kv, q)
        assert ck.SM_LIMITS["sm_90"]["smem"] // (dt + 1024) == (2 if d == 128 else 3)  # (the registers: 2)


def test_tensor_core_forward_reads_shared_memory_without_bank_conflicts(lib):
    # the emulator counts, for every ldmatrix (Q, K, V and the table window's fragments), the distinct
    # words one bank serves in each 8-row wavefront: 1 everywhere, on every path of the kernel
    lib.wavepe_emu_ldmatrix_bank_conflicts()  # reset
    for d in (64, 128, 256):
        for pe in (0, 1, 2):
            prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=130, N=300, d=d, off=170, causal=True, pe=pe, R=100, kpm=pe == 2)
            # (d = 64, 128 without a table: the wide instance, 32 rows a warp -- its K and V fragments for two m-tiles)
            assert fwd_kernel(lib, prob) == ("tensor-core, 32 rows a warp" if d <= 128 and pe != 1 else "tensor-core")
            prob.forward()
            assert lib.wavepe_emu_ldmatrix_bank_conflicts() == 1, (d, pe)
            # the tensor-core dK/dV and dQ (K, V, Q, dO by ldmatrix, .trans too; with the table its window -- the
            # dQ's skewed dS is built in registers since 2026-11-29), masked, band and interior blocks; with the
            # table its learned gradient's dT
            # kernel too (at d = 64, 128: H^T by ldmatrix.trans); without a table nor ALiBi the wide dQ, without a
            # table the wide dK/dV (P^T's and dS^T's fragments; on an H100's SM at d = 128)
            # (ALiBi's with fixed slopes: its own wide dQ)
            with mock.patch.dict(os.environ, H100_SM):
                assert bwd_kernel(lib, prob, dslopes=False) == bwd_kernel_of(dict(d=d, pe=0 if pe == 2 else pe, M=130))
                assert dkdv_kernel(lib, prob) == dkdv_kernel_of(dict(d=d, pe=pe, M=130))
                prob.backward(pe == 1)
            assert lib.wavepe_emu_ldmatrix_bank_conflicts() == 1, (d, pe, "backward")
    # (unpadded rows, LD = d, give 8 at d = 64 and 128: every row of a matrix in the same 4 banks)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_tensor_core_forward_band_blocks_reuse_window_products(lib, d):
    # The model's HMMA count of a band block (docs/CUDA.md), counted by the emulator (a warp's mma.sync once): Q K^T
    # and P V 64 each a warp, the window's G = Q T_win^T of the block's two halves 6 + 4 pairs of 8-column tiles x
    # d / 16 steps at d = 128 (the pair both halves read computed once; at 64, 5 + 4 pairs: 72; at 256, blocks of 32
    # keys: 96) -- and at 128, from a band loop's second block on, 16 fewer: the pair the previous block's second
    # half computed (window_products's PREV).  And its copies (cp.async's bytes): Q once, K and V a block, the window's
    # 64 + bn rows for the first block and, at 128 and 256, only bn for the others (the ring: the previous window's
    # first 64 rows are the next's last; at 64 whole windows).  One 64-row CTA, every block of keys interior and in
    # the band (a clamped table).
    lib.wavepe_emu_mma_count.restype = C.c_longlong
    lib.wavepe_emu_cp_async_bytes.restype = C.c_longlong
    bn, g_first, g_next = {128: (64, 80, 64), 64: (128, 72, 72), 256: (32, 96, 96)}[d]
    t_next = bn if d != 64 else 64 + bn
    for blocks in (1, 2, 5):
        prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=64, N=blocks * bn, d=d, off=0, causal=False, pe=1, R=8, clamp=True)
        assert fwd_kernel(lib, prob) == "tensor-core"
        lib.wavepe_emu_mma_count(), lib.wavepe_emu_cp_async_bytes()  # reset
        prob.forward()
        assert lib.wavepe_emu_mma_count() == 4 * (128 * blocks + g_first + g_next * (blocks - 1)), (d, blocks)
        rows = 64 + 2 * bn * blocks + 64 + bn + t_next * (blocks - 1)
        assert lib.wavepe_emu_cp_async_bytes() == rows * d * 2, (d, blocks)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([E.BF16, E.F16]), Hk=st.integers(1, 2), group=st.integers(1, 2),
       M=st.integers(1, 140), N=st.integers(1, 200), d=st.sampled_from([64, 128, 128, 256]), off=st.integers(-20, 150),
       causal=st.booleans(), pe=st.sampled_from([0, 1, 2]), R=st.integers(1, 160), r_lo=st.integers(-80, 40),
       clamp=st.booleans(), kpm=st.booleans(), splits=st.integers(1, 3), window=st.sampled_from([0, 0, 33, 90]),
       softcap=st.sampled_from([0.0, 0.0, 2.5]), seed=st.integers(0, 2**31))
def test_tensor_core_forward_random_shapes(lib, dtype, Hk, group, M, N, d, off, causal, pe, R, r_lo, clamp, kpm,
                                           splits, window, softcap, seed):
    check_attention(lib, dtype, backward=False, B=1, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal,
                    pe=pe, R=R, r_lo=r_lo, clamp=clamp, kpm=kpm, splits=splits, window=window, softcap=softcap,
                    seed=seed)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([E.BF16, E.F16]), Hk=st.integers(1, 2), group=st.integers(1, 3),
       M=st.integers(1, 150), N=st.integers(1, 200), d=st.sampled_from([64, 128, 128, 256]), off=st.integers(-20, 150),
       causal=st.booleans(), pe=st.sampled_from([0, 1, 2]), R=st.integers(1, 160), r_lo=st.integers(-80, 40),
       clamp=st.booleans(), kpm=st.booleans(), window=st.sampled_from([0, 0, 40, 90]),
       softcap=st.sampled_from([0.0, 0.0, 2.5]), grad_lse=st.booleans(), dslopes=st.booleans(),
       seed=st.integers(0, 2**31))
def test_tensor_core_backward_random_shapes(lib, dtype, Hk, group, M, N, d, off, causal, pe, R, r_lo, clamp, kpm,
                                            window, softcap, grad_lse, dslopes, seed):
    # (dslopes: ALiBi's d loss / d slope asked, or its slopes fixed -- the wide dQ's ALiBi instance at 64)
    kw = dict(B=1, H=Hk * group, Hk=Hk, M=M, N=N, d=d, off=off, causal=causal, pe=pe, R=R, r_lo=r_lo, clamp=clamp,
              kpm=kpm, window=window, softcap=softcap, seed=seed)
    dslopes = pe == 2 and dslopes
    assert bwd_kernel(lib, Attn(lib, dtype, **kw), dslopes) == bwd_kernel_of(kw, h100=False, dslopes=dslopes)
    check_attention(lib, dtype, grad_lse=grad_lse, want_dslopes=dslopes, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_attention_gradient_of_lse(lib, dtype):
    check_attention(lib, dtype, B=1, H=2, Hk=1, M=30, N=40, d=16, off=10, causal=True, pe=1, R=20, r_lo=0,
                    grad_lse=True, seed=4)


def test_attention_split_kv_equals_unsplit(lib):
    # the ordered combine of the decoding path against the single pass
    kw = dict(B=1, H=2, Hk=1, M=1, N=300, d=32, off=299, causal=True, pe=1, R=120, r_lo=0, seed=5)
    one = Attn(lib, E.F32, splits=1, **kw).forward()
    many = Attn(lib, E.F32, splits=5, **kw).forward()
    np.testing.assert_allclose(many[0], one[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(many[1], one[1], rtol=1e-6, atol=1e-6)


def test_attention_num_splits_heuristic(lib):
    prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=1, N=4096, d=64, off=4095, causal=True, pe=0)
    # the emulated device has 4 SMs: one CTA gets split to occupy them
    assert lib.wavepe_cuda_attention_num_splits(C.byref(prob.a)) > 1
    big = Attn(lib, E.BF16, B=1, H=8, Hk=8, M=64, N=64, d=64, off=0, causal=True, pe=0)
    assert lib.wavepe_cuda_attention_num_splits(C.byref(big.a)) == 1


@pytest.mark.parametrize("order", ["reverse", "random"])
def test_results_do_not_depend_on_thread_order(lib, monkeypatch, order):
    # a missing barrier shows up as a difference when the fibers run in another order
    kw = dict(B=1, H=2, Hk=1, M=40, N=70, d=24, off=30, causal=True, pe=1, R=60, r_lo=-2, seed=11)
    base = Attn(lib, E.BF16, **kw)
    fwd0 = base.forward()
    bwd0 = base.backward(True)
    monkeypatch.setenv("WAVEPE_EMU_ORDER", order)
    other = Attn(lib, E.BF16, **kw)
    fwd1 = other.forward()
    bwd1 = other.backward(True)
    for x, y in zip(fwd0, fwd1):
        np.testing.assert_array_equal(x, y)
    for k in bwd0:
        np.testing.assert_array_equal(bwd0[k], bwd1[k])


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("pe", [2, 1])
def test_tensor_core_forward_does_not_depend_on_thread_order(lib, monkeypatch, order, pe):
    # attn_fwd_tc_kernel's single K, V (and window) buffers are refilled between barriers, each warp's
    # bias scratch between __syncwarps: a missing one shows here
    kw = dict(B=1, H=2, Hk=1, M=70, N=200, d=64, off=130, causal=True, pe=pe, R=80, r_lo=0, kpm=True, window=100,
              seed=12)
    base = Attn(lib, E.F16, **kw)
    assert fwd_kernel(lib, base) == ("tensor-core" if pe == 1 else "tensor-core, 32 rows a warp")
    want = base.forward()
    monkeypatch.setenv("WAVEPE_EMU_ORDER", order)
    for x, y in zip(want, Attn(lib, E.F16, **kw).forward()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("extra", [dict(pe=0, softcap=2.0), dict(pe=2, kpm=True, window=100)])
def test_tensor_core_forward_wide_does_not_depend_on_thread_order(lib, monkeypatch, order, extra):
    # the wide instance (32 rows a warp): its interior blocks and its masked ones (each m-tile in turn once V has
    # landed, the next K copied after both) between barriers of their own
    kw = dict(B=1, H=2, Hk=1, M=150, N=300, d=128, off=150, causal=True, seed=15, **extra)
    base = Attn(lib, E.BF16, **kw)
    assert fwd_kernel(lib, base) == "tensor-core, 32 rows a warp"
    want = base.forward()
    monkeypatch.setenv("WAVEPE_EMU_ORDER", order)
    for x, y in zip(want, Attn(lib, E.BF16, **kw).forward()):
        np.testing.assert_array_equal(x, y)


def assert_backward_order_free(lib, monkeypatch, order, kw, dtable=False, dslopes=False):
    """The bf16 backward of the call `kw` gives the same bits with the warps run in `order` (WAVEPE_EMU_ORDER:
    serial between block barriers, or random) as in the emulator's default order."""
    base = Attn(lib, E.BF16, **kw)
    base.forward()
    want = base.backward(dtable, want_dslopes=dslopes)
    monkeypatch.setenv("WAVEPE_EMU_ORDER", order)
    other = Attn(lib, E.BF16, **kw)
    other.forward()
    got = other.backward(dtable, want_dslopes=dslopes)
    for name in want:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("extra", [dict(softcap=2.0), dict(kpm=True, window=100)])
def test_tensor_core_dq_wide_does_not_depend_on_thread_order(lib, monkeypatch, order, extra):
    # the wide dQ (32 rows a warp, an H100's SM): the row statistics and K's and V's first rows staged by some
    # threads for all, the blocks' two buffers refilled a block ahead, its masked blocks an m-tile at a time
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    kw = dict(B=1, H=2, Hk=1, M=150, N=300, d=128, off=150, causal=True, pe=0, seed=16, **extra)
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core, dQ 32 rows a warp"
    assert_backward_order_free(lib, monkeypatch, order, kw)


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("extra", [dict(pe=2, H=4, Hk=2, kpm=True, window=100), dict(pe=0, softcap=2.0)])
def test_tensor_core_dkdv_wide_does_not_depend_on_thread_order(lib, monkeypatch, order, extra):
    # the wide dK/dV (32 keys a warp in 8, an H100's SM): P^T and dS^T written by the warps of a key group's two query
    # halves and read by its dV and dK warps after a barrier, rewritten the next block after the next one; Q, dO and
    # the rows' statistics a block ahead in two buffers (GQA: the heads in turn)
    for k, v in H100_SM.items():
        monkeypatch.setenv(k, v)
    kw = dict(B=1, H=2, Hk=1, M=150, N=300, d=128, off=150, causal=True, seed=17)
    kw.update(extra)
    assert dkdv_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core, 32 keys a warp"
    assert_backward_order_free(lib, monkeypatch, order, kw, dslopes=kw["pe"] == 2)


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("pe", [2, 1])
def test_tensor_core_dkdv_does_not_depend_on_thread_order(lib, monkeypatch, order, pe):
    # attn_bwd_dkdv_tc_kernel refills one of its two Q / dO / lse / D buffers while the other is read, one
    # barrier a block: a copy into the buffer in use, or a missing barrier, shows here (GQA: the heads in turn);
    # with a table both kernels refill their one window buffer after a barrier, and the learned table's dT kernel
    # refills its tiles and H each tile between barriers (masked and interior tiles, two column slices)
    kw = dict(B=1, H=4, Hk=2, M=200, N=200, d=128, off=0, causal=True, pe=pe, kpm=pe == 2, window=150, seed=14, R=80)
    base = Attn(lib, E.BF16, **kw)
    assert bwd_kernel(lib, base) == "tensor-core"
    if pe == 1:
        base.a.dtable = base.a.table  # (any non-NULL: the dT pass)
        assert dtable_kernel(lib, base) == "tensor-core"
    assert_backward_order_free(lib, monkeypatch, order, kw, dtable=pe == 1, dslopes=pe == 2)


@pytest.mark.parametrize("order", ["serial", "random"])
def test_tensor_core_backward_at_head_dim_256_does_not_depend_on_thread_order(lib, monkeypatch, order):
    # head_dim 256 with a table: the dQ's window (80 rows) refilled after the barrier that ends a block's reads, the
    # dK/dV's a ring refilled a query block ahead; a copy over rows still read shows here
    kw = dict(B=1, H=2, Hk=1, M=80, N=200, d=256, off=120, causal=True, pe=1, R=100, r_lo=0, seed=23)
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core"
    assert_backward_order_free(lib, monkeypatch, order, kw)


@pytest.mark.parametrize("order", ["serial", "random"])
@pytest.mark.parametrize("d", [256, 64])
def test_tensor_core_backward_with_one_buffer_does_not_depend_on_thread_order(lib, monkeypatch, order, d):
    # on a 99 KiB device the backward at head_dim 256 (no table) -- at 64 on its 100 KiB SM -- stages the dQ's next V,
    # the dK/dV's next dO, once every warp is done with the block before's, after a second barrier: a missing barrier
    # or a read before the copy landed shows here (masked and interior blocks, GQA, ALiBi's learned slopes)
    on_99_kib(monkeypatch)
    kw = dict(B=1, H=4, Hk=2, M=130, N=200, d=d, off=70, causal=True, pe=2, seed=29)
    assert bwd_kernel(lib, Attn(lib, E.BF16, **kw)) == "tensor-core"
    launches(lib)
    assert_backward_order_free(lib, monkeypatch, order, kw, dslopes=True)
    got = launches(lib)
    assert {DQ_VONE_BYTES, DKDV_GONE_BYTES} <= set(got) if d == 256 else {DQ_VONE64_BYTES, DKDV_GONE64_BYTES} <= set(got)


@pytest.mark.parametrize("order", ["serial", "random"])
def test_tensor_core_dtable_in_halves_does_not_depend_on_thread_order(lib, monkeypatch, order):
    # on a 99 KiB device the dT at head_dim 128 copies K's last 32 rows into V's first 32 once every warp has read
    # those, and reads them after the copies land: a missing barrier or wait shows here (masked and interior
    # tiles, GQA, two column slices)
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    kw = dict(B=1, H=4, Hk=2, M=200, N=200, d=128, off=0, causal=True, pe=1, window=150, seed=19, R=80)
    base = Attn(lib, E.BF16, **kw)
    base.a.dtable = base.a.table  # (any non-NULL: the dT pass)
    assert dtable_kernel(lib, base) == "tensor-core, K in two halves"
    assert_backward_order_free(lib, monkeypatch, order, kw, dtable=True)


def test_tensor_core_dkdv_with_a_table_fits_a_99_kib_device(lib, monkeypatch):
    # .ci/check_cuda_kernels.py's CTA_SHAPE for the dK/dV's table instance at head_dim 128 (its occupancy model) is
    # what its launch asks, within the 99 KiB of sm_86 / sm_89 / sm_120 (since 2026-11-29: the bias's G^T in
    # registers, no G in shared memory; before, 107.5 KiB and an instance with one buffer of Q and dO there)
    ck = kernel_checks()
    threads, smem = ck.CTA_SHAPE[("attn_bwd_dkdv_tc_kernel", "128, true")]
    assert threads == 128 and smem <= 99 * 1024
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    prob = Attn(lib, E.BF16, B=1, H=2, Hk=1, M=70, N=90, d=128, off=20, causal=True, pe=1, R=40, seed=17)
    assert dkdv_kernel(lib, prob) == "tensor-core"
    prob.forward()
    launches(lib)
    prob.backward(False)
    assert smem in launches(lib)


@pytest.mark.parametrize("case", range(3))
def test_tensor_core_dkdv_with_a_table_on_a_99_kib_device_matches_oracle(lib, monkeypatch, case):
    # the same instance against the float64 oracle: causal GQA with a soft-cap (its band's soft-capped loop), not
    # causal with padding, two batch rows with documents and a clamped table
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    kw = [dict(B=1, H=4, Hk=2, M=150, N=260, off=110, causal=True, pe=1, R=90, r_lo=-20, softcap=3.0),
          dict(B=1, H=2, Hk=2, M=96, N=180, off=40, causal=False, pe=1, R=70, r_lo=-35, kpm=True),
          dict(B=2, H=2, Hk=1, M=120, N=120, off=0, causal=True, pe=1, R=40, r_lo=0, clamp=True,
               cu=[[0, 37, 38, 90, 120], [0, 64, 65, 120, 120]])][case]
    dtype = (E.BF16, E.F16, E.BF16)[case]
    assert dkdv_kernel(lib, Attn(lib, dtype, d=128, seed=500 + case, **kw)) == "tensor-core"
    prob = check_attention(lib, dtype, d=128, seed=500 + case, **kw)
    assert_grads_normwise(prob, dtype)


def test_backward_is_deterministic(lib):
    kw = dict(B=2, H=2, Hk=1, M=50, N=50, d=16, off=0, causal=True, pe=1, R=30, r_lo=0, seed=3)
    runs = []
    for _ in range(2):
        prob = Attn(lib, E.F32, **kw)
        prob.forward()
        runs.append(prob.backward(True))
    for k in runs[0]:
        assert runs[0][k].tobytes() == runs[1][k].tobytes()


def test_shared_memory_limit_is_reported(lib, monkeypatch):
    # a device granting less shared memory than the head-dim-256 tiles need
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(64 * 1024))
    prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=4, N=4, d=200, off=0, causal=True, pe=1, R=4)
    ws = lib.wavepe_cuda_attention_fwd_workspace_bytes(C.byref(prob.a), 1)
    assert lib.wavepe_cuda_attention_fwd(C.byref(prob.a), 1, None, ws, None) == 1  # cudaErrorInvalidValue


# ---- argument checks --------------------------------------------------------------------------

WAVEPE_E_NEGATIVE_SIZE, WAVEPE_E_OVERFLOW, WAVEPE_E_INVALID, WAVEPE_E_NULL = -1, -2, -3, -4


@pytest.mark.parametrize("change,status,words", [
    (dict(m=-1), WAVEPE_E_NEGATIVE_SIZE, "q_len must be >= 0, got -1"),
    (dict(kv_heads=3), WAVEPE_E_INVALID, "multiple of k's heads H_kv=3"),   # heads 4 not a multiple
    (dict(kv_heads=0), WAVEPE_E_INVALID, "H_kv=0"),
    (dict(d=257), WAVEPE_E_INVALID, "head_dim must be <= 256"),
    (dict(dtype=7), WAVEPE_E_INVALID, "dtype=7"),
    (dict(scale=0.0), WAVEPE_E_INVALID, "scale must be finite and > 0, got 0"),
    (dict(scale=float("nan")), WAVEPE_E_INVALID, "scale"),
    (dict(splits=0), WAVEPE_E_INVALID, "num_splits must be >= 1"),
    (dict(q=None), WAVEPE_E_NULL, "q, out and lse"),
    (dict(lse=None), WAVEPE_E_NULL, "lse"),
    (dict(q_strides=(0, 0, 2**62)), WAVEPE_E_OVERFLOW, "q: a (1, 4, 3, 8) view"),
    (dict(n=2**62), WAVEPE_E_OVERFLOW, "k_len=4611686018427387904"),
    (dict(q_offset=2**62), WAVEPE_E_OVERFLOW, "q_offset=4611686018427387904"),
])
def test_attention_rejects_bad_arguments(lib, change, status, words):
    prob = Attn(lib, E.F32, B=1, H=4, Hk=2, M=3, N=5, d=8, off=2, causal=True, pe=0)
    splits = change.pop("splits", 1)
    for k, v in change.items():
        setattr(prob.a, k, E.I64x3(*v) if k.endswith("strides") else v)
    got, message = E.why(lib.wavepe_cuda_attention_check, C.byref(prob.a), 0, splits)
    assert got == status and words in message, message
    assert lib.wavepe_cuda_attention_fwd(C.byref(prob.a), splits, None, 0, None) == 1


def test_attention_float64_head_dim_limit(lib):
    prob = Attn(lib, E.F64, B=1, H=1, Hk=1, M=2, N=2, d=129, off=0, causal=True, pe=0)
    got, message = E.why(lib.wavepe_cuda_attention_check, C.byref(prob.a), 0, 1)
    assert got == WAVEPE_E_INVALID and "head_dim must be <= 128 for float64 on CUDA, got 129" in message


def test_attention_backward_rejects_dtable_without_table(lib):
    prob = Attn(lib, E.F32, B=1, H=1, Hk=1, M=2, N=2, d=8, off=0, causal=True, pe=0)
    prob.forward()
    grads = [E.Buf((1, 1, 2, 8), np.float32) for _ in range(3)]
    prob.a.dq, prob.a.dk, prob.a.dv = (b.ptr for b in grads)
    assert lib.wavepe_cuda_attention_check(C.byref(prob.a), 1, 1, None) == 0
    dummy = E.Buf((4, 8), np.float32)
    prob.a.dtable = dummy.ptr
    assert lib.wavepe_cuda_attention_check(C.byref(prob.a), 1, 1, None) == WAVEPE_E_INVALID


def test_relbias_rejects_bad_arguments(lib):
    a = E.RelBiasArgs(dtype=E.F32, batch=1, m=2, n=3, d=4, rows=0, clamp=1)
    got, message = E.why(lib.wavepe_cuda_relbias_check, C.byref(a), E.FORWARD)
    assert got == WAVEPE_E_INVALID and "clamp=True needs a table with at least one row" in message
    a = E.RelBiasArgs(dtype=E.F32, batch=2**40, m=2**20, n=2**20, d=1, rows=1)
    got, message = E.why(lib.wavepe_cuda_relbias_check, C.byref(a), E.FORWARD)
    assert got == WAVEPE_E_OVERFLOW and "the bias (outer, batch, M, k_len)" in message
    a = E.RelBiasArgs(dtype=E.F32, batch=1, m=2, n=3, d=4, rows=1, q_offset=-2**61)
    got, message = E.why(lib.wavepe_cuda_relbias_check, C.byref(a), E.FORWARD)
    assert got == WAVEPE_E_OVERFLOW and "q_offset=-2305843009213693952" in message
    a = E.RelBiasArgs(dtype=E.F32, batch=1, m=2, n=3, d=4, rows=1, q_stride_g=8, q_stride_m=4)
    assert lib.wavepe_cuda_relbias_check(C.byref(a), E.FORWARD, None) == WAVEPE_E_NULL
    assert lib.wavepe_cuda_relbias_fwd(C.byref(a), None) == 1
    # the forward and the backward are separate launches
    assert lib.wavepe_cuda_relbias_check(C.byref(a), E.FORWARD | E.GRAD_Q, None) == WAVEPE_E_INVALID


def test_rope_rejects_bad_arguments(lib):
    base = dict(dtype=E.F32, batch=1, len=2, head_dim=4, rotary_pairs=2, scale=1.0)
    for change, status, words in [
            (dict(head_dim=5), WAVEPE_E_INVALID, "head_dim must be even"),
            (dict(rotary_pairs=3), WAVEPE_E_INVALID, "rotary_pairs must be in [0, head_dim/2 = 2], got 3"),
            (dict(scale=float("nan")), WAVEPE_E_INVALID, "scale must be finite"),
            (dict(scale=float("inf")), WAVEPE_E_INVALID, "scale must be finite"),
            (dict(layout=2), WAVEPE_E_INVALID, "layout=2"), (dict(len=-1), WAVEPE_E_NEGATIVE_SIZE, "length must be >= 0, got -1"),
            (dict(offset=2**63 - 1), WAVEPE_E_OVERFLOW, "offset=9223372036854775807")]:
        a = E.RopeArgs(**{**base, **change})
        a.q.heads = 1
        a.q.in_stride_b = a.q.in_stride_h = a.q.out_stride_b = a.q.out_stride_h = 8
        a.q.in_stride_l = a.q.out_stride_l = 4
        a.q.in_ = a.q.out = 64  # never dereferenced: validation fails first
        a.inv_freq = 64
        got, message = E.why(lib.wavepe_cuda_rope_check, C.byref(a))
        assert got == status and words in message, (change, message)
        assert lib.wavepe_cuda_rope(C.byref(a), None) == 1


def test_emulator_enforces_the_shared_memory_limit(lib, monkeypatch):
    # sanity of the checker itself: above 48 KiB a launch needs the opt-in, and
    # the opt-in cannot exceed the device's limit
    prob = Attn(lib, E.BF16, B=1, H=1, Hk=1, M=4, N=4, d=128, off=0, causal=True, pe=1, R=4)
    need = lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a))
    assert need > 48 * 1024
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(need - 16))
    assert lib.wavepe_cuda_attention_fwd(C.byref(prob.a), 1, None, 0, None) != 0
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(need))
    assert lib.wavepe_cuda_attention_fwd(C.byref(prob.a), 1, None, 0, None) == 0


# The emulator's own checks, each breached by a kernel of csrc/cuda/emu/selftest.cpp (its Case numbers): the
# launch fails and its message names the breach.  Case 0 keeps every rule: its shuffles and its mma (through an
# ldmatrix of the copied matrix) give the values the fragment layouts say -- the warp's exchanges, done once for
# the warp by its last lane (warp_collective), against a product written out here.
SELFTEST_BREACHES = {
    1: "wait at different warp barriers",  # a warp's lanes at two shuffles
    2: "wait at different warp barriers",  # half at a __syncwarp, half at a shuffle
    3: "reached by some lanes while others exited",
    4: "wait at different __syncthreads",
    5: "shared-memory race: ldmatrix of words warp 0's cp.async landed in since the last __syncthreads",
}


@pytest.mark.parametrize("which", [0, *SELFTEST_BREACHES])
def test_emulator_catches_each_breach_of_its_rules(lib, which):
    rows, cols = np.mgrid[0:8, 0:8]
    m = (rows + cols / 8).astype(np.float32)  # exact in bf16
    matrix = E.to_bf16_bits(m)
    out = np.full(64 + 128 + 3, np.nan, np.float32)
    err = lib.wavepe_emu_selftest(which, matrix.ctypes.data, out.ctypes.data)
    message = lib.wavepe_emu_last_message().decode()
    if which:
        assert err != 0 and SELFTEST_BREACHES[which] in message, (err, message)
        return
    assert err == 0, message
    assert np.array_equal(out[:64], np.arange(64) ^ 1)  # __shfl_xor_sync(v, 1) of v = threadIdx.x
    # A = [[M, M], [M, M]] (16 x 16) and B = [M^T; M^T] (16 x 8) from the fragments, C = A B + 1
    a = np.block([[m, m], [m, m]]).astype(np.float64)
    c = a @ np.vstack([m.T, m.T]).astype(np.float64) + 1
    lane = np.arange(32)[:, None]
    i = np.arange(4)[None, :]
    want = c[lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2]
    assert np.array_equal(out[64:192].reshape(32, 4), want)
    # __byte_perm (PTX prmt): byte n of the result is byte (s >> 4 n) & 7 of y:x -- cub's PRMT example, and the
    # two selectors skewed_ds_products joins 16-bit halves with (x's high and y's low; x's low and y's high)
    assert [hex(v) for v in out[192:].view(np.uint32)] == ["0x7050301", "0x44441111", "0x33332222"]


@pytest.mark.parametrize("which,degree", [(0, 1), (6, 4), (7, 2)])
def test_emulator_counts_ldmatrix_bank_conflicts(lib, which, degree):
    # the most distinct words one bank serves in an ldmatrix's 8-row wavefront (what the bank-conflict tests read):
    # rows 16 bytes apart 1; four distinct rows, each given twice, 128 bytes apart 4 (the 16-byte aligned rows' way);
    # rows 40 bytes apart 2 (any rows' way: word by word)
    matrix = E.to_bf16_bits(np.ones((8, 8), np.float32))
    out = np.full(64 + 128 + 3, np.nan, np.float32)
    lib.wavepe_emu_ldmatrix_bank_conflicts()  # reset
    assert lib.wavepe_emu_selftest(which, matrix.ctypes.data, out.ctypes.data) == 0, lib.wavepe_emu_last_message()
    assert lib.wavepe_emu_ldmatrix_bank_conflicts() == degree


if os.environ.get("WAVEPE_EMU_ORDER"):  # pragma: no cover
    pytest.skip("run without WAVEPE_EMU_ORDER (the tests set it themselves)", allow_module_level=True)


@pytest.mark.parametrize("dtype,dmax", [(E.BF16, 256), (E.F16, 256), (E.F32, 128)])
def test_tiles_fit_every_gpu_from_sm80(lib, dtype, dmax, monkeypatch):
    # 99 KiB of shared memory per CTA (sm_86 / sm_89) is the smallest budget of
    # the GPUs the sm_80 binary runs on; bf16/fp16 (and fp32 up to d = 128) fit -- on such a GPU the
    # tensor-core dK/dV and dT with a table at d = 128 (107.5 / 103 KiB) give way to the general kernels
    monkeypatch.setenv("WAVEPE_EMU_SMEM_OPTIN", str(99 * 1024))
    for d in range(8, dmax + 1, 8):
        for pe in (0, 1, 2):
            prob = Attn(lib, dtype, B=1, H=1, Hk=1, M=2, N=2, d=d, off=0, causal=True, pe=pe, R=4)
            if pe == 1:
                prob.a.dtable = 1  # any non-NULL: the dT pass stages the window too
            fwd = lib.wavepe_cuda_attention_fwd_smem_bytes(C.byref(prob.a))
            bwd = lib.wavepe_cuda_attention_bwd_smem_bytes(C.byref(prob.a))
            assert 0 < fwd <= 99 * 1024 and 0 < bwd <= 99 * 1024, (d, pe, fwd, bwd)


def test_grid_stride_loops_and_single_head_group(lib, monkeypatch):
    # one emulated SM: grids are capped below the work, so the grid-stride loops
    # of rel-bias and ALiBi run several tiles per CTA, and RoPE uses one head group
    monkeypatch.setenv("WAVEPE_EMU_SMS", "1")
    rng = np.random.default_rng(3)
    q, T, g = rng.standard_normal((3, 330, 8)), rng.standard_normal((40, 8)), rng.standard_normal((3, 330, 330))
    got = relbias_call(lib, E.F32, q, T, 0, 330, 0, True, False, g=g)
    assert_close(got["bias"], ref.rel_bias(q.astype(np.float32), T.astype(np.float32), 0, 330, 0, True, False),
                 E.F32, 8, "bias")
    dq, dT = ref.rel_bias_grads(E.rounded(g, E.F32), E.rounded(q, E.F32), E.rounded(T, E.F32), 0, 0, True, False)
    assert_close(got["dq"], dq, E.F32, 330, "dq")
    assert_close(got["dtable"], dT, E.F32, 3 * 330, "dtable")
    slopes = np.array([0.5, 0.25, 0.125])
    sb = put(slopes, E.F32)
    ob = E.Buf((3, 70, 90), np.float32)
    a = E.AlibiArgs(dtype=E.F32, heads=3, m=70, n=90, q_offset=20, causal=1, slopes=sb.ptr, out=ob.ptr,
                    out_stride_h=70 * 90, out_stride_m=90)
    E.check(lib.wavepe_cuda_alibi(C.byref(a), None))
    np.testing.assert_array_equal(ob.arr, ref.alibi_bias(slopes, 70, 90, 20, True).astype(np.float32))
    x = rng.standard_normal((1, 3, 512, 64))
    inv = 10000.0 ** (-2.0 * np.arange(32) / 64)
    got = rope_call(lib, E.BF16, [x], np.arange(512), inv, 0, 32, 1.0, False)[0]
    assert_close(got, ref.rope(E.rounded(x, E.BF16), np.arange(512), inv, "half", 32), E.BF16, 2, "rope")
