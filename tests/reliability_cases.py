"""The reliability suite's cases: the public API tried as a demanding user would.

Each case is a function that must return normally: it checks what a user is
owed (a clear exception naming the argument and the value, or the right
answer), not merely that nothing crashed.  tests/test_reliability.py runs
every case in a child process of its own, so a crash (a segfault, an abort)
is a failure of that case, never a lost run.  Classes: bad types, NaN/inf,
extreme sizes and offsets, odd strides, threads and thread counts, half
precision, empty shapes, strict flags, wavelet grids, overflow messages, the
Hugging Face shim, and the inputs that were once answered silently (the raw
gufuncs' invalid parameters, a config changed after construction).
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

import wavepe
import wavepe.ops as wo
import wavepe.ufuncs as wu
from wavepe import RopeConfig, WaveletConfig

from . import reference as ref
from .cuda_emu import settings_in_order


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    run: Callable[[], None]
    isa: str = ""  # run with WAVEPE_ISA=isa ("" = the CPU's best)


CASES: dict[str, Case] = {}
# the instruction sets this CPU runs, best first (the kernels must agree on all of them)
ISAS = list(reversed(wavepe.supported_isas()))


def case(kind: str, *, every_isa: bool = False):
    """Register fn as a case (with every_isa: once per instruction set this CPU runs)."""
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        name = fn.__name__
        if every_isa:
            for isa in ISAS:
                CASES[f"{name}[{isa}]"] = Case(f"{name}[{isa}]", kind, fn, isa)
        else:
            CASES[name] = Case(name, kind, fn)
        return fn
    return register


def raises(exc: type[BaseException], words: str, fn: Callable[[], object]) -> None:
    """fn raises exc whose message contains words (the argument and its value)."""
    try:
        fn()
    except exc as e:
        assert words in str(e), f"{exc.__name__} without {words!r}: {e}"
        return
    raise AssertionError(f"no {exc.__name__} (expected one mentioning {words!r})")


def qkv(b=1, h=2, h_kv=1, m=7, n=9, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, m, d, generator=g, dtype=dtype), torch.randn(b, h_kv, n, d, generator=g, dtype=dtype),
            torch.randn(b, h_kv, n, d, generator=g, dtype=dtype))


def oracle_attention(q, k, v, **kw):
    kpm = kw.pop("key_padding_mask", None)
    return ref.attention_with_grads(q.double().numpy(), k.double().numpy(), v.double().numpy(),
                                    np.zeros(q.shape), kw.pop("scale", q.shape[-1] ** -0.5), kw.pop("q_offset"),
                                    kw.pop("causal", True), kw.pop("pos_enc", "nope"),
                                    key_padding_mask=None if kpm is None else kpm.numpy(), **kw)["out"]


# ---- bad types --------------------------------------------------------------------------------

@case("types")
def attention_with_numpy_inputs():
    q = np.zeros((1, 1, 2, 4))
    raises(TypeError, "q must be a torch.Tensor, got ndarray", lambda: wo.wavelet_attention(q, q, q))


@case("types")
def rel_bias_with_an_integer_tensor():
    raises(TypeError, "torch.int64", lambda: wo.rel_bias(torch.zeros(2, 3, 4, dtype=torch.int64), torch.zeros(5, 4), 0))


@case("types")
def rope_with_float_positions():
    raises(TypeError, "positions must be an int", lambda: wo.rope(torch.zeros(1, 1, 3, 4), None, 1.5, RopeConfig()))


@case("types")
def raw_op_with_a_string_for_a_tensor():
    raises(RuntimeError, "Expected a value of type 'Tensor'",
           lambda: torch.ops.wavepe.rel_bias("q", torch.zeros(5, 4), 3, 0, 0, True, False))


@case("types")
def numpy_rel_bias_with_object_arrays():
    raises(TypeError, "q must be a float16, float32 or float64 array, got dtype object",
           lambda: wu.rel_bias(np.array([[None, 1]], dtype=object), np.zeros((3, 2)), 0))


@case("types")
def config_with_string_scales():
    raises(TypeError, "scales must be a sequence of real numbers", lambda: WaveletConfig(scales="abc", shifts=[0.0]))


@case("types")
def mixed_devices_and_dtypes():
    q = torch.zeros(1, 1, 2, 4)
    raises(TypeError, "must have the same dtype", lambda: wo.wavelet_attention(q, q.double(), q))
    raises(ValueError, "must be on the same device", lambda: wo.rel_bias(q[0], torch.zeros(3, 4, device="meta"), 0))


# ---- strict flags ----------------------------------------------------------------------------------

@case("flags")
def causal_none_and_strings():
    q, k, v = qkv()
    for value in (None, "false", 1, 0.0):
        raises(TypeError, f"causal must be a bool (True or False), got {value!r}",
               lambda: wo.wavelet_attention(q, k, v, causal=value))
    raises(TypeError, "clamp must be a bool", lambda: wu.rel_bias(np.zeros((2, 4)), np.zeros((3, 4)), 0, clamp="no"))
    raises(TypeError, "causal must be a bool", lambda: wo.raw_ops.rel_bias(q[0, 0], q[0, 0], 3, 0, 0, None, False))
    np.testing.assert_array_equal(wu.alibi_bias(2, 3, causal=np.True_), wu.alibi_bias(2, 3, causal=True))


# ---- the last inputs once answered silently (NaN, or a stale spectrum): each is now an exception ---

@case("silent")
def raw_rel_bias_gufunc_with_clamp_and_an_empty_table():
    out = np.zeros((3, 5))
    raises(ValueError, "clamp=True needs a table with at least one row, got 0 rows",
           lambda: wu.rel_bias_gufunc(np.ones((3, 4)), np.ones((0, 4)), *settings_in_order(
               "relbias.h", "WAVEPE_RELBIAS_SETTINGS", causal=True, clamp=True), out=out))


@case("silent")
def raw_rope_gufunc_with_an_unknown_mode():
    x, inv = np.ones((2, 3, 8)), np.ones(4)
    raises(ValueError, "mode=7 is not one of 0..3", lambda: wu.rope_gufunc(x, np.arange(3), inv, 1.0, 7))
    raises(ValueError, "mode=-1 is not one of 0..3",
           lambda: wu.rope_gufunc(x, np.arange(3), inv, 1.0, np.array([0, -1])))


@case("silent")
def rope_config_theta_set_after_construction():
    cfg = RopeConfig(theta=500.0)
    spectrum = cfg.inv_freq(8)

    def assign():
        cfg.theta = float("nan")
    raises(AttributeError, "cannot set field 'theta'", assign)
    np.testing.assert_array_equal(cfg.inv_freq(8), spectrum)


# ---- NaN / inf ------------------------------------------------------------------------------------

@case("nan")
def non_finite_configuration_values_are_refused():
    raises(ValueError, "scales contains NaN at index 1", lambda: WaveletConfig(scales=[1.0, np.nan], shifts=[0, 0]))
    raises(ValueError, "shifts contains an infinite value", lambda: WaveletConfig(scales=[1.0], shifts=[np.inf]))
    raises(ValueError, "scale must be > 0 and finite", lambda: wo.rope_inv_freq(torch.zeros(1, 1, 2, 4), None, 0,
                                                                                torch.ones(2), scale=float("nan")))
    raises(ValueError, "inv_freq must be finite", lambda: wo.rope_inv_freq(torch.zeros(1, 1, 2, 4), None, 0,
                                                                            torch.tensor([1.0, np.inf])))


@case("nan")
def non_finite_alibi_slopes_are_refused_everywhere():
    slopes = torch.tensor([0.5, float("nan")])
    raises(ValueError, "slopes must be finite", lambda: wo.alibi_bias(slopes, 4))
    raises(ValueError, "slopes must be finite", lambda: wu.alibi_bias(slopes.numpy(), 4))
    q, k, v = qkv()
    raises(ValueError, "alibi_slopes must be finite", lambda: wo.wavelet_attention(q, k, v, pos_enc="alibi",
                                                                                   alibi_slopes=slopes))


@case("nan", every_isa=True)
def nan_in_an_unmasked_query_row_propagates_to_that_row():
    q, k, v = qkv(m=6, n=6)
    q[0, 1, 2, 5] = float("nan")
    out = wo.wavelet_attention(q, k, v, pos_enc="nope")
    assert torch.isnan(out[0, 1, 2]).all(), "the row of the NaN query"
    rest = torch.ones_like(out, dtype=torch.bool)
    rest[0, 1, 2] = False
    assert torch.isfinite(out[rest]).all(), "other rows stay finite"


@case("nan", every_isa=True)
def nan_in_masked_values_never_reaches_the_output():
    q, k, v = qkv(m=8, n=8)
    v[0, 0, 4, 7] = float("nan")  # key 4, hidden from queries 0..3 by the causal mask
    out = wo.wavelet_attention(q, k, v, pos_enc="nope", causal=True)
    assert torch.isfinite(out[:, :, :4]).all()
    v2 = qkv(m=8, n=8)[2]
    v2[:, :, 5] = float("nan")
    kpm = torch.zeros(1, 8, dtype=torch.bool)
    kpm[:, 5] = True
    out = wo.wavelet_attention(q, k, v2, pos_enc="nope", causal=False, key_padding_mask=kpm)
    assert torch.isfinite(out).all()


@case("nan", every_isa=True)
def inf_and_huge_inputs_do_not_crash_any_kernel():
    q, k, v = qkv(m=9, n=9)
    for bad in (float("inf"), -float("inf"), 1e300, float("nan")):
        x = q.clone()
        x[0, 0, 3, 1] = bad
        assert wo.wavelet_attention(x, k, v).shape == q.shape
        assert wo.rel_bias(x[0], torch.randn(5, 8, dtype=torch.float64), -2).shape == (2, 9, 9)
        assert wo.rope(x, k, 0, RopeConfig())[0].shape == q.shape
        assert wu.wavelet_bias(x[0].numpy(), WaveletConfig.grid(8)).shape == (2, 9, 9)


# ---- extreme sizes and offsets ------------------------------------------------------------------------

@case("sizes")
def products_that_overflow_are_named():
    raises(OverflowError, "(heads, q_len, k_len) = (8, 1099511627776, 1099511627776)",
           lambda: wu.alibi_bias(8, 2**40, 2**40))
    raises(OverflowError, "rel_bias: a 1048576 x", lambda: wu.rel_bias(np.zeros((2**20, 1), np.float32),
                                                                         np.zeros((3, 1), np.float32), 0, k_len=2**45))


@case("sizes")
def positions_at_and_beyond_the_limit():
    lim = 2**60
    q = torch.randn(1, 3, 4)
    t = torch.randn(2, 4)
    assert wo.rel_bias(q, t, -lim, k_len=0, q_offset=lim).shape == (1, 3, 0)
    raises(OverflowError, f"q_offset={lim + 1}", lambda: wo.rel_bias(q, t, 0, q_offset=lim + 1))
    raises(OverflowError, "q_offset=9223372036854775806", lambda: wo.alibi_bias(2, 3, q_offset=2**63 - 2))
    raises(OverflowError, "offset=9223372036854775805", lambda: wu.sinusoidal_table(4, 8, offset=2**63 - 3))
    raises(ValueError, "r_lo=4611686018427387904", lambda: torch.ops.wavepe.rel_bias(q, t, 3, 2**62, 0, True, False))
    raises(ValueError, "q_offset=-4611686018427387904",
           lambda: torch.ops.wavepe.attention_fwd(*qkv(), None, None, None, None, 0.5, -2**62, True, 0, False, False))


@case("sizes", every_isa=True)
def far_offsets_match_the_oracle():
    q, k, v = qkv(m=3, n=40)
    off = 2**40
    cfg = WaveletConfig.grid(8, n_scales=2)
    out = wo.wavelet_attention(q, k, v, cfg, q_offset=off, causal=False)
    r = np.arange(off - 39, off + 3)
    table = ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r)
    want = oracle_attention(q, k, v, q_offset=off, causal=False, pos_enc="relative", table=table, r_lo=int(r[0]))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-10)


@case("sizes")
def decoding_one_query_over_many_keys():
    q, k, v = qkv(m=1, n=5000, d=16, h=4, h_kv=2)
    out = wo.wavelet_attention(q, k, v)
    cfg = wo.default_wavelet_config(16)
    r = np.arange(0, 5000)
    table = ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r)
    want = oracle_attention(q, k, v, q_offset=4999, pos_enc="relative", table=table, r_lo=0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-9)


# ---- odd strides --------------------------------------------------------------------------------------

@case("strides", every_isa=True)
def transposed_flipped_and_expanded_inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 11, 3, 16, generator=g, dtype=torch.float64)
    q = x.transpose(1, 2)                        # (B, H, L, d) view of (B, L, H, d)
    flipped = q.flip(2)                           # negative row stride (torch copies; wrappers see a tensor)
    expanded = q[:, :1].expand(2, 3, 11, 16)     # a stride-0 head dimension
    for t in (q, flipped, expanded):
        c = t.contiguous()
        torch.testing.assert_close(wo.wavelet_bias(t, WaveletConfig.grid(16)), wo.wavelet_bias(c, WaveletConfig.grid(16)))
        torch.testing.assert_close(wo.wavelet_attention(t, t, t), wo.wavelet_attention(c, c, c))
        for a, b in zip(wo.rope(t, t, 3, RopeConfig()), wo.rope(c, c, 3, RopeConfig())):
            torch.testing.assert_close(a, b)
    strided_d = torch.randn(2, 3, 11, 32, dtype=torch.float64)[..., ::2]  # head dimension not contiguous
    torch.testing.assert_close(wo.wavelet_attention(strided_d, strided_d, strided_d),
                               wo.wavelet_attention(strided_d.contiguous(), strided_d.contiguous(),
                                                    strided_d.contiguous()))


@case("strides")
def numpy_strided_and_broadcast_inputs():
    q = np.random.default_rng(4).standard_normal((3, 12, 8))
    t = np.random.default_rng(5).standard_normal((6, 8))
    want = wu.rel_bias(np.ascontiguousarray(q[:, ::-1]), t, -3)
    np.testing.assert_allclose(wu.rel_bias(q[:, ::-1], t, -3), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wu.rel_bias(np.asfortranarray(q), t, -3), wu.rel_bias(q, t, -3), rtol=1e-12, atol=1e-12)


# ---- threads ---------------------------------------------------------------------------------------------

@case("threads")
def results_do_not_depend_on_thread_counts_or_concurrency():
    q, k, v = qkv(b=2, h=4, h_kv=2, m=200, n=200, d=32, dtype=torch.float32)
    q.requires_grad_()
    runs = []
    for threads in (1, 2, 3):
        torch.set_num_threads(threads)
        out = wo.wavelet_attention(q, k, v)
        (g,) = torch.autograd.grad(out.sum(), q)
        runs.append((out.detach(), g, wo.rel_bias(q.detach()[0], torch.randn(300, 32, generator=torch.Generator()
                                                                               .manual_seed(1)), -150)))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b), "bitwise equal across thread counts"
    results = [None] * 4

    def work(i):
        results[i] = wo.wavelet_attention(q.detach(), k, v)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(r, runs[0][0]) for r in results), "concurrent calls agree"


@case("threads")
def numpy_ufuncs_release_the_gil_and_agree():
    q = np.random.default_rng(6).standard_normal((4, 300, 16))
    cfg = WaveletConfig.grid(16)
    want = wu.wavelet_bias(q, cfg)
    out = [None] * 3

    def work(i):
        out[i] = wu.wavelet_bias(q, cfg)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in out:
        np.testing.assert_array_equal(o, want)


# ---- half precision -----------------------------------------------------------------------------------

@case("half", every_isa=True)
def bf16_and_fp16_compute_in_float32():
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = (t.to(dtype) for t in qkv(m=20, n=20, d=16, dtype=torch.float32))
        out = wo.wavelet_attention(q, k, v)
        assert out.dtype == dtype
        want = wo.wavelet_attention(q.float(), k.float(), v.float())
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
        b = wo.wavelet_bias(q[0], WaveletConfig.grid(16))
        assert b.dtype == dtype and torch.isfinite(b).all()
        r = wo.rope(q, k, 0, RopeConfig())[0]
        assert r.dtype == dtype


# ---- empty shapes ----------------------------------------------------------------------------------------

@case("empty", every_isa=True)
def empty_shapes_give_empty_results_and_gradients():
    for b, h, m, n in [(0, 2, 3, 4), (1, 0, 3, 4), (1, 2, 0, 4), (1, 2, 3, 0)]:
        q = torch.randn(b, h, m, 8, dtype=torch.float64, requires_grad=True)
        k = torch.randn(b, max(h, 1) if h else 0, n, 8, dtype=torch.float64, requires_grad=True)
        if h == 0:
            continue  # no heads: H_kv = 0 is refused (tested below)
        v = torch.randn_like(k, requires_grad=True)
        out = wo.wavelet_attention(q, k, v)
        assert out.shape == (b, h, m, 8)
        if n == 0 and m:
            assert (out == 0).all(), "a query that sees no key outputs 0"
        out.sum().backward()
        assert q.grad.shape == q.shape and torch.isfinite(q.grad).all()
    raises(ValueError, "H_kv=0", lambda: wo.wavelet_attention(torch.zeros(1, 0, 2, 8), torch.zeros(1, 0, 2, 8),
                                                               torch.zeros(1, 0, 2, 8)))
    assert wo.rel_bias(torch.zeros(0, 3, 4), torch.zeros(0, 4), 0).shape == (0, 3, 3)
    assert wu.alibi_bias(2, 0, 5).shape == (2, 0, 5)
    assert wo.rope(torch.zeros(2, 3, 0, 8), None, 0, RopeConfig())[0].shape == (2, 3, 0, 8)


# ---- wavelet grids ---------------------------------------------------------------------------------------

@case("grids")
def the_papers_ablation_grids_run():
    q, k, v = qkv(m=64, n=64, d=128, dtype=torch.float32)
    for n_scales in (16, 32, 128, 1):
        cfg = WaveletConfig.grid(128, n_scales=n_scales)
        out = wo.wavelet_attention(q, k, v, cfg)
        assert torch.isfinite(out).all()
        rows = sum(w.table.shape[0] for w in cfg._cache.values() if hasattr(w, "table"))
        assert rows <= 4 * 128, f"{n_scales} scales: {rows} table rows for 64 x 64"
    raises(ValueError, "base=1e+30 with n_scales=16", lambda: WaveletConfig.grid(16, n_scales=16, base=1e30))


@case("grids")
def scales_up_to_a_million_and_normalized_grids():
    cfg = WaveletConfig(scales=np.geomspace(1.0, 1e6, 8), shifts=np.arange(8.0), normalize=True)
    q = np.random.default_rng(7).standard_normal((40, 8))
    r = np.arange(0, 40)
    table = ref.wavelet_table(cfg.family, cfg.scales, cfg.shifts, r, normalize=True)
    np.testing.assert_allclose(wu.wavelet_bias(q, cfg), ref.rel_bias(q, table, 0, 40, 0, True, False),
                               rtol=1e-10, atol=1e-12)


# ---- Hugging Face shim -----------------------------------------------------------------------------------

@case("hf")
def patched_llama_with_padding_and_generation():
    transformers = __import__("transformers")
    import wavepe

    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 50, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    for pos_enc in ("wavelet", "alibi", "nope", "rope"):
        with wavepe.patch_llama(model, pos_enc):
            logits = model(ids, attention_mask=mask).logits
            assert torch.isfinite(logits).all() and logits.shape == (2, 10, 50)
            out = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
            assert out.shape == (2, 13)
    raises(ValueError, "pos_enc must be one of", lambda: wavepe.patch_llama(model, "xpos"))


def crash_canary() -> None:
    """Not a case: the runner's own check that a crashing child is reported as a crash."""
    os.kill(os.getpid(), __import__("signal").SIGSEGV)


CANARY = Case("crash_canary", "canary", crash_canary)


def check_case_names() -> None:
    """Every name is a valid pytest id (used by the runner's parametrisation)."""
    for name in CASES:
        assert re.fullmatch(r"[a-z0-9_]+(\[(scalar|avx2|avx512|avx512bf16|amx|neon)\])?", name), name


def run_in_child(name: str, conn) -> None:
    """Run one case (in a forked child of the runner) and send ("passed" | "failed", traceback) back."""
    case = CANARY if name == CANARY.name else CASES[name]
    if case.isa:
        os.environ["WAVEPE_ISA"] = case.isa
    try:
        case.run()
        conn.send(("passed", ""))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent as text
        conn.send(("failed", traceback.format_exc()))
