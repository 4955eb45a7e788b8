"""Scale-out (wavepe.distributed, DDP, FSDP) on CPU processes over gloo on 127.0.0.1.

Context-parallel attention on groups of 4, 3 (global ranks 1-3: group ranks are
not global ranks) and 2 processes, every pos_enc, causal or not, both layouts,
GQA / MQA / MHA, key padding, return_lse and bf16: outputs and gradients equal
the single-process fused attention over the whole sequence (float64: 1e-9).
TinyLM trained under context parallelism + DDP, and a wavepe-patched HF Llama
under DDP and FSDP2, give the gradients of one process on the whole batch.
The schedule (tiles skipped by the causal mask or outside the table's support,
hops) is checked without processes.

Processes are spawned once per world size (starting one costs seconds);
each scenario's result or traceback comes back as a file
(tests/distributed_workers.py).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from . import distributed_workers as dw

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import wavepe.ops as wo  # noqa: E402
from wavepe.ops import _routing  # noqa: E402
import wavepe.distributed as wd  # noqa: E402
from wavepe.distributed._layout import segments  # noqa: E402
from wavepe.distributed._schedule import UNBOUNDED, last_hops, tiles  # noqa: E402

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CP_GROUPS = {"world": 4, "ranks123": 3, "ranks02": 2}
CP_SCENARIOS = ["cp_world", "cp_ranks123", "cp_ranks02", "disagreeing_chunks", "odd_zigzag_chunk",
                "layout_roundtrip", "tinylm_context_parallel"]
PACKED_SCENARIOS = ["cp_packed_world", "cp_packed_ranks123", "packed_bad_arguments", "packed_module"]


def load(out_dir: str, name: str, rank: int = 0):
    err = os.path.join(out_dir, f"{name}.rank{rank}.err")
    if os.path.exists(err):
        with open(err) as f:
            pytest.fail(f"scenario {name} failed on rank {rank}:\n{f.read()}")
    path = os.path.join(out_dir, f"{name}.rank{rank}.pt")
    if not os.path.exists(path):
        others = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, f"{name}.*")))
        pytest.fail(f"scenario {name} left no result for rank {rank} (found {others})")
    return torch.load(path, weights_only=False)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> str:
    # one start of four processes for every four-rank scenario (a start costs seconds): the packed ones too
    out = str(tmp_path_factory.mktemp("four_ranks"))
    dw.run(4, CP_SCENARIOS + PACKED_SCENARIOS, out)
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("two_ranks"))
    dw.run(2, ["ddp_llama", "fsdp_llama", "cp_neg_inf_chunk", "ring_without_host_sync"], out)
    return out


@pytest.fixture(scope="module")
def packed_ranks(four_ranks) -> str:
    return four_ranks  # the packed scenarios run with the other four-rank ones


# ---- context-parallel attention against one process -------------------------------------------------

def reference(case: dw.Case, length: int) -> dict:
    """Outputs and gradients of wavelet_attention over the whole sequence, for the case's loss.

    bf16 cases: the float32 computation on the bf16 inputs (what the kernels do
    inside), with the loss's upstream gradient as the bf16 output receives it.
    """
    x = dw.cp_inputs(case, length)
    half = case.dtype == torch.bfloat16
    cast = (lambda t: t.float()) if half else (lambda t: t)
    leaves = [cast(x[n]).detach().requires_grad_() for n in ("q", "k", "v")]
    kwargs = dict(x["kwargs"])
    param = None
    if x["param"] is not None:
        p = x["param"][0] if case.pos_enc == "relative" else x["param"]
        param = cast(p).detach().requires_grad_()
        kwargs = dw.with_param(kwargs, case.pos_enc, (param, x["param"][1]) if case.pos_enc == "relative" else param)
    if case.masked:
        kwargs["key_padding_mask"] = x["key_padding_mask"]
    result = wo.wavelet_attention(*leaves, return_lse=case.lse, **kwargs)
    out, lse = result if case.lse else (result, None)
    grad_out = x["grad_out"].to(case.dtype).double() if half else x["grad_out"]
    loss = dw.loss_of(out, lse, grad_out, x["grad_lse"])
    grads = torch.autograd.grad(loss, leaves + ([param] if param is not None else []))
    ref = {"out": out.detach(), "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    if lse is not None:
        ref["lse"] = lse.detach()
    if param is not None:
        ref["dparam"] = grads[3]
    return ref


@pytest.mark.parametrize("group", list(CP_GROUPS))
@pytest.mark.parametrize("case_name", list(dw.cp_cases()))
def test_context_parallel_equals_single_process(four_ranks, group, case_name):
    case = dw.cp_cases()[case_name]
    got = load(four_ranks, f"cp_{group}")[case_name] if group != "ranks123" else load(
        four_ranks, "cp_ranks123", rank=1)[case_name]  # group rank 0 of [1, 2, 3] is global rank 1
    want = reference(case, case.chunk * CP_GROUPS[group])
    compare(case, got, want, CP_GROUPS[group])
    if case.masked:
        assert bool(torch.isneginf(want["lse"]).any())  # some queries see no key at all: covered


@pytest.mark.parametrize("case_name", list(dw.NEG_INF_CASES))
def test_scores_all_neg_inf_in_one_chunk_only(two_ranks, case_name, monkeypatch):
    # docs/DEVELOPING.md, "Non-finite values": a row is NaN when its visible scores are -inf over the whole
    # sequence, not when one rank's chunk of keys gives only -inf; a +inf score stays NaN
    pos_enc, causal = dw.NEG_INF_CASES[case_name]
    x = dw.neg_inf_inputs(pos_enc, causal)
    leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v")]
    # the reference kernel: the SIMD backward kernels give NaN dv to keys that a NaN row's tile holds but
    # the row does not see (keys 6 and 7 here; a core issue, not the ring's)
    monkeypatch.setenv("WAVEPE_ISA", "scalar")
    out, lse = wo.wavelet_attention(*leaves, return_lse=True, **x["kwargs"])
    grads = torch.autograd.grad(dw.loss_of(out, lse, x["grad_out"], x["grad_lse"]), leaves)
    monkeypatch.undo()
    want = dict(zip(("out", "lse", "dq", "dk", "dv"), (out.detach(), lse.detach(), *grads)))
    # the single-process answer has the rows the case is about
    chunk = x["q"].shape[2] // 2
    assert bool(torch.isfinite(want["out"][0, :, chunk:]).all())           # -inf in chunk 0, finite in chunk 1
    assert bool(torch.isnan(want["out"][1, :, -1]).all())                  # +inf against chunk 0
    if causal:
        assert bool(torch.isnan(want["out"][0, :, :chunk]).all())          # -inf wherever they look
        assert bool(torch.isnan(want["lse"][0, :, :chunk]).all())
        assert bool(torch.isfinite(want["dv"][0, :, chunk:]).all())        # seen by finite rows only
    for rank in range(2):
        got = load(two_ranks, "cp_neg_inf_chunk", rank)[case_name]
        for name, e in want.items():
            torch.testing.assert_close(got[name], e, rtol=1e-9, atol=1e-9, equal_nan=True,
                                       msg=lambda s: f"{name}: {s}")


def compare(case: dw.Case, got: dict, want: dict, ranks: int) -> None:
    assert got["out_dtype"] == case.dtype and got["grad_dtype"] == case.dtype
    if "kernel_dtypes" in got:  # the kernels read the inputs' dtype: no float32 copy of bf16 tensors
        assert got["kernel_dtypes"] == ({case.dtype} if case.chunk else set())  # empty chunks: no call
    assert set(got) - {"out_dtype", "grad_dtype", "kernel_dtypes"} == set(want)
    for name, e in want.items():
        a = got[name]
        assert a.shape == e.shape, name
        if case.dtype == torch.float64:
            torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9, msg=lambda s: f"{name}: {s}")
        else:
            # within bf16 rounding (2^-9 relative) of the float32 answer, plus float32 summation order; and
            # the ring's kernels read bf16 and round each tile's result (out, dq, dk, dv, the table's
            # gradient: up to 2 tiles per rank's chunk, zigzag) to bf16 before the float32 sums (as on
            # CUDA); lse stays float32
            err = (a.double() - e.double()).abs()
            scale = e.double().abs().max()
            tiles = 0 if name == "lse" else 2 * ranks
            bound = 2.0 ** -8 * e.double().abs() + (1e-4 + tiles * 2.0 ** -9) * scale
            assert bool((err <= bound).all()), f"{name}: max error {err.max().item():.3g}"


@pytest.mark.parametrize("group", ["world", "ranks123"])
@pytest.mark.parametrize("case_name", list(dw.packed_cases()))
def test_packed_context_parallel_equals_single_process(packed_ranks, group, case_name):
    # global cu_seqlens, documents across chunks (and ranks, zigzag halves), empty and one-position
    # documents: outputs and gradients of the single-process wavelet_attention(..., cu_seqlens=cu)
    case = dw.packed_cases()[case_name]
    got = load(packed_ranks, f"cp_packed_{group}", rank=1 if group == "ranks123" else 0)[case_name]
    want = reference(case, case.chunk * CP_GROUPS[group])
    for how in ("skip", "all"):  # tiles across documents skipped (boundaries on the host) or all computed
        compare(case, got[how], want, CP_GROUPS[group])


def test_packed_tiles_skipped_exactly_when_no_query_sees_a_key():
    from wavepe.distributed._ring_attention import _shares_a_document

    for world, layout, causal in ((4, "contiguous", True), (4, "zigzag", True), (3, "zigzag", False),
                                  (4, "contiguous", False)):
        chunk = 6
        length = world * chunk
        docs = tuple(tuple(r) for r in dw.packed_cu(2, length).tolist())
        segs = [segments(r, world, chunk, layout) for r in range(world)]
        skipped = 0
        for r in range(world):
            for c in range(world):
                for t in tiles(segs[r], segs[c], causal, None):
                    sees = any(lo <= i < hi and lo <= j < hi and (not causal or i >= j)
                               for cu in docs for lo, hi in zip(cu, cu[1:])
                               for i in range(t.q.start, t.q.start + t.q.length)
                               for j in range(t.k.start, t.k.start + t.k.length))
                    assert _shares_a_document(docs, t, causal) == sees
                    skipped += not sees
        assert skipped > 0 or not causal or layout == "zigzag", (world, layout, causal)


@pytest.mark.parametrize("pos_enc", ["rope", "wavelet"])
def test_packed_module_under_context_parallelism_equals_one_process(packed_ranks, pos_enc):
    # PositionalAttention(cu_seqlens=...) with ContextParallel(zigzag): RoPE at each chunk's positions inside
    # its documents, attention inside the documents across ranks
    attn, x, cu = dw.packed_module(pos_enc)
    x.requires_grad_()
    out = attn(x, cu_seqlens=cu)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    for rank in range(4):
        got = load(packed_ranks, "packed_module", rank)[pos_enc]
        torch.testing.assert_close(got["out"], out.detach(), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(got["dx"], gx, rtol=1e-9, atol=1e-12)


def test_packed_arguments_are_checked(packed_ranks):
    for rank in range(4):
        msg = load(packed_ranks, "packed_bad_arguments", rank)
        assert "must start at 0 and end at k_len=16" in msg["local_end"], msg
        assert msg["float"].startswith("TypeError") and "int32 or int64" in msg["float"]
        assert "cu_seqlens must be (n_docs + 1,) for B=1" in msg["shape"]
        assert "disagree on cu_seqlens values" in msg["disagree"], msg
        assert "must not decrease" in msg["decreasing"], msg


def test_ring_makes_no_host_sync_per_tile(two_ranks):
    # the ring's forward and backward ran with bool() / item() / tolist() / nonzero ... refused, on tiles
    # whose rows are all -inf (the kernel's mark_neg_inf code, merged by tensor ops) and on packed documents
    for rank in range(2):
        got = load(two_ranks, "ring_without_host_sync", rank)
        assert "torch.Tensor.__bool__ called" in got["guard"]
        x = dw.neg_inf_inputs("relative", True)
        for packed in (False, True):
            kwargs = dict(x["kwargs"])
            if packed:
                kwargs["cu_seqlens"] = dw.packed_cu(2, x["q"].shape[2])
            leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v")]
            out, lse = wo.wavelet_attention(*leaves, return_lse=True, **kwargs)
            grads = torch.autograd.grad(dw.loss_of(out, lse, x["grad_out"], x["grad_lse"]), leaves)
            want = dict(zip(("out", "lse", "dq", "dk", "dv"), (out.detach(), lse.detach(), *grads)))
            # the case has the rows it is about: zero-weight tiles of finite rows, rows NaN as a whole
            assert bool(torch.isfinite(want["out"][0, :, 6:]).all()) and bool(torch.isnan(want["lse"]).any())
            for name, e in want.items():
                torch.testing.assert_close(got["packed" if packed else "plain"][name], e, rtol=1e-9, atol=1e-9,
                                           equal_nan=True, msg=lambda s: f"{name}: {s}")


def test_ranks_that_disagree_all_raise(four_ranks):
    for rank in range(4):
        msg = load(four_ranks, "disagreeing_chunks", rank)
        assert "disagree on local length" in msg and "rank 0: 4" in msg and "rank 3: 6" in msg, msg


def test_zigzag_needs_an_even_chunk(four_ranks):
    assert "even chunk length" in load(four_ranks, "odd_zigzag_chunk")


def test_layouts_cover_the_sequence_once(four_ranks):
    for layout in wd.LAYOUTS:
        positions = [load(four_ranks, "layout_roundtrip", r)[layout] for r in range(4)]
        assert sorted(torch.cat([p["positions"] for p in positions]).tolist()) == list(range(32))
        for p in positions:
            assert torch.equal(p["gathered"], torch.arange(32).view(1, 32, 1).expand(2, 32, 3))
            assert torch.equal(p["sharded"], p["positions"])
    zig = [load(four_ranks, "layout_roundtrip", r)["zigzag"]["positions"].tolist() for r in range(4)]
    assert zig[0] == [0, 1, 2, 3, 28, 29, 30, 31] and zig[3] == [12, 13, 14, 15, 16, 17, 18, 19]


@pytest.mark.parametrize("pos_enc", ["wavelet", "rope", "alibi"])
def test_tinylm_context_parallel_with_ddp_equals_one_process(four_ranks, pos_enc):
    got = [load(four_ranks, "tinylm_context_parallel", r)[pos_enc] for r in range(4)]
    model = dw.tinylm(pos_enc)
    inputs, targets = dw.tinylm_batch(8 * 4)
    dw.tinylm_loss(model, inputs, targets).backward()
    for name, p in model.named_parameters():
        for r in range(4):
            torch.testing.assert_close(got[r][name], p.grad, rtol=1e-9, atol=1e-12, msg=lambda s: f"{name}: {s}")


def test_not_initialized_and_devices_without_kernel_are_refused(monkeypatch):
    q = torch.randn(1, 2, 8, 8)
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match="init_process_group"):
            wd.context_parallel_attention(q, q, q)
    # the dispatcher decides (ops/_routing.py): a device whose key has no attention_fwd kernel is refused
    # (the ring merges the fused kernel's tiles; there is no plain-PyTorch ring)
    registered = _routing._kernel_registered
    monkeypatch.setattr(_routing, "_found", set())  # kernels remembered so far
    monkeypatch.setattr(_routing, "_kernel_registered",
                        lambda op, device_type: device_type != "meta" and registered(op, device_type))
    m = torch.empty(1, 2, 8, 8, device="meta")
    with pytest.raises(NotImplementedError, match="'meta'"):
        wd.context_parallel_attention(m, m, m)
    monkeypatch.undo()
    with pytest.raises(TypeError, match="causal must be a bool"):
        wd.context_parallel_attention(q, q, q, causal=1)
    with pytest.warns(DeprecationWarning, match="old spelling of 'nope'"), \
            pytest.raises(RuntimeError, match="init_process_group"):
        wd.context_parallel_attention(q, q, q, pos_enc="none")
    with pytest.raises(ValueError, match="layout must be one of"):
        wd.context_parallel_attention(q, q, q, layout="ring")
    with pytest.raises(ValueError, match="multiple of k's heads"):
        wd.context_parallel_attention(q, q[:, :1].expand(1, 3, 8, 8).contiguous(), q[:, :1].expand(1, 3, 8, 8))


# ---- the schedule -----------------------------------------------------------------------------------

def visible_area(q_segs, k_segs, causal: bool, window: int = 0) -> int:
    total = 0
    for qs in q_segs:
        for ks in k_segs:
            for i in range(qs.length):
                for j in range(ks.length):
                    r = qs.start + i - (ks.start + j)
                    total += ((not causal) or r >= 0) and (not window or abs(r) < window)
    return total


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [0, 1, 4, 7])
def test_tiles_cover_exactly_the_visible_scores(world, layout, causal, window):
    # each tile's flags agree with brute force over its scores; skipped tiles have none visible
    chunk = 6
    segs = [segments(r, world, chunk, layout) for r in range(world)]
    for r in range(world):
        for c in range(world):
            ts = tiles(segs[r], segs[c], causal, None, window)
            assert sum(visible_area((t.q,), (t.k,), causal, window) for t in ts) == \
                visible_area(segs[r], segs[c], causal, window)
            for t in ts:
                area = visible_area((t.q,), (t.k,), causal, window)
                assert area > 0
                if not window:
                    assert t.causal == (area < t.q.length * t.k.length)
                assert t.q_offset == t.q.start - t.k.start


def test_zigzag_balances_causal_work_and_contiguous_does_not():
    world, chunk = 4, 8
    for layout, balanced in (("zigzag", True), ("contiguous", False)):
        segs = [segments(r, world, chunk, layout) for r in range(world)]
        work = [sum(visible_area(segs[r], segs[c], True) for c in range(world)) for r in range(world)]
        assert (len(set(work)) == 1) == balanced, (layout, work)


def test_chunks_travel_only_as_far_as_needed():
    assert last_hops(4, "contiguous", True) == (3, 2, 1, 0)  # chunk c is needed by ranks c … 3
    assert last_hops(4, "contiguous", False) == (3, 3, 3, 3)
    assert last_hops(4, "zigzag", True) == (3, 3, 3, 3)
    assert last_hops(1, "zigzag", True) == (0,)


def test_tiles_outside_the_support_take_the_no_bias_path():
    segs = [segments(r, 4, 10, "contiguous") for r in range(4)]
    support = dw.small_support_config().support("float64")
    assert support[1] < 20  # chunk pairs two apart have distances 11 … 29 (causal) — partly inside
    near = tiles(segs[1], segs[0], True, support)
    far = tiles(segs[3], segs[0], True, support)  # distances 21 … 39
    assert [t.biased for t in near] == [True] and [t.biased for t in far] == [False]
    assert all(t.biased for t in tiles(segs[3], segs[0], True, UNBOUNDED))  # a clamped table never skips
    assert not any(t.biased for t in tiles(segs[0], segs[3], False, support))  # distances -39 … -21
    # the cases above run this geometry: the far tiles' zero bias is checked against one process
    assert dw.cp_cases()["wavelet-causal-contiguous"].chunk == 10


# ---- data parallelism -------------------------------------------------------------------------------

def one_process_llama_grads() -> dict:
    model = dw.llama()
    ids = dw.llama_batch(2)
    model(ids, labels=ids).loss.backward()  # the mean over both ranks' rows (equal token counts)
    return {n: p.grad for n, p in model.named_parameters()}


def test_ddp_llama_equals_one_process_on_the_whole_batch(two_ranks):
    want = one_process_llama_grads()
    for rank in range(2):
        got = load(two_ranks, "ddp_llama", rank)
        assert set(got) == set(want)
        for name, e in want.items():
            torch.testing.assert_close(got[name], e, rtol=1e-9, atol=1e-12, msg=lambda s: f"{name}: {s}")


def test_fsdp2_llama_equals_one_process_on_the_whole_batch(two_ranks):
    want = one_process_llama_grads()
    for rank in range(2):
        got = load(two_ranks, "fsdp_llama", rank)
        assert got["sharded"]
        for name, e in want.items():
            torch.testing.assert_close(got["grads"][name], e, rtol=1e-9, atol=1e-12,
                                       msg=lambda s: f"{name}: {s}")


# ---- the torchrun commands of docs/distributed.md (examples/train_distributed.py) ---------------------

def documented_torchrun_commands() -> list[str]:
    with open(os.path.join(ROOT, "docs", "distributed.md"), encoding="utf-8") as f:
        text = f.read()
    return [line.strip() for line in text.splitlines() if line.strip().startswith("torchrun ")]


def test_docs_show_both_kinds_of_parallelism():
    modes = [shlex.split(c)[shlex.split(c).index("--mode") + 1] for c in documented_torchrun_commands()]
    assert modes == ["ddp", "context"]


@pytest.mark.slow
@pytest.mark.parametrize("command", documented_torchrun_commands())
def test_documented_torchrun_command_trains(command):
    # exactly the documented command, with torchrun taken from this interpreter's torch
    argv = shlex.split(command)
    assert argv[0] == "torchrun"
    argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    summary = [line for line in proc.stdout.splitlines() if "2 ranks (gloo)" in line]
    assert len(summary) == 1, proc.stdout
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", summary[0]).groups())
    assert last < 0.8 * first, summary[0]  # it trains
