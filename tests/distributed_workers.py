"""Processes for the torch.distributed tests (tests/test_distributed.py): gloo on 127.0.0.1.

:func:`run` spawns ``world`` processes once and runs a list of named
scenarios in each (starting a process costs seconds; a scenario costs
milliseconds).  A scenario is ``fn(rank, world, groups) -> result | None``;
what a process returns is saved as ``<dir>/<scenario>.rank<r>.pt``, an
exception as ``<dir>/<scenario>.rank<r>.err`` (its traceback), so the parent
test reports each scenario separately.  The parent computes the
single-process references itself, from the same inputs (:func:`cp_inputs`).
"""

from __future__ import annotations

import datetime
import gc
import os
import socket
import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

# ---- launching ----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world: int, scenarios: list[str], out_dir: str, timeout: float = 600.0) -> None:
    """Run ``scenarios`` in ``world`` fresh processes; raise if a process dies or the run times out."""
    import torch.multiprocessing as mp

    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned processes (2 shared cores)
    ctx = mp.start_processes(_main, args=(world, free_port(), scenarios, out_dir), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            raise TimeoutError(f"distributed scenarios did not finish within {timeout:.0f} s: {scenarios}")


def _main(rank: int, world: int, port: int, scenarios: list[str], out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        groups = _groups(world)
        for name in scenarios:
            try:
                result = SCENARIOS[name](rank, world, groups)
                torch.save(result, os.path.join(out_dir, f"{name}.rank{rank}.pt"))
            except Exception:
                with open(os.path.join(out_dir, f"{name}.rank{rank}.err"), "w") as f:
                    f.write(traceback.format_exc())
    finally:
        # Destroying a gloo group joins its workers with the GIL held, while a worker freeing a finished
        # collective whose tensors' Python objects are gone needs the GIL (a torch deadlock, #56297): the
        # scenarios' objects go first, and the workers get a moment without the GIL before the group goes.
        gc.collect()
        dist.barrier()
        time.sleep(0.2)
        dist.destroy_process_group()


def _groups(world: int) -> dict[str, Any]:
    """The groups the context-parallel scenarios run on; every process creates every group (collective)."""
    groups: dict[str, Any] = {"world": None}
    if world == 4:
        groups["ranks123"] = dist.new_group([1, 2, 3])  # group ranks 0, 1, 2 are global ranks 1, 2, 3
        groups["ranks02"] = dist.new_group([0, 2])
    return groups


GROUP_MEMBERS = {"world": None, "ranks123": [1, 2, 3], "ranks02": [0, 2]}

# ---- context-parallel cases -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    pos_enc: str
    causal: bool
    layout: str
    b: int = 2
    h: int = 6
    h_kv: int = 2          # GQA, 3 query heads per kv head
    chunk: int = 10        # positions per rank
    d: int = 8
    dtype: torch.dtype = torch.float64
    masked: bool = False   # a key padding mask
    lse: bool = False      # return_lse, with a gradient through it
    clamp: bool = False
    packed: bool = False   # cu_seqlens: documents (packed_cu) across the ranks' chunks
    extra: dict = field(default_factory=dict, hash=False, compare=False)  # more keyword arguments (window, softcap)


def small_support_config():
    """Wavelets whose table spans only ±13 distances: far chunk pairs take the no-bias path."""
    from wavepe import WaveletConfig

    return WaveletConfig("ricker", [1, 1, 2, 2, 1, 2, 1, 2], [0, 1, 0, 1, 2, 3, 4, 5], support_tol=1e-6)


def cp_cases() -> dict[str, Case]:
    cases = {}
    for pos_enc in ("wavelet", "relative", "alibi", "nope"):
        for causal in (True, False):
            for layout in ("contiguous", "zigzag"):
                cases[f"{pos_enc}-{'causal' if causal else 'full'}-{layout}"] = Case(pos_enc, causal, layout)
    cases["relative-clamp-masked-lse-mha"] = Case("relative", True, "zigzag", h=4, h_kv=4, masked=True, lse=True,
                                                  clamp=True)
    cases["alibi-masked-lse-mqa"] = Case("alibi", False, "contiguous", h=3, h_kv=1, masked=True, lse=True)
    cases["wavelet-bf16"] = Case("wavelet", True, "zigzag", h=3, h_kv=1, chunk=8, d=16, dtype=torch.bfloat16)
    cases["nope-bf16-full"] = Case("nope", False, "contiguous", dtype=torch.bfloat16)
    # shapes: one position per rank, empty chunks, odd chunk and head sizes, chunks across the kernel's tiles
    cases["nope-one-position-per-rank"] = Case("nope", True, "contiguous", chunk=1, d=4)
    cases["wavelet-empty-chunks"] = Case("wavelet", True, "zigzag", chunk=0)
    cases["relative-clamp-odd-shapes"] = Case("relative", True, "contiguous", h=5, h_kv=5, chunk=7, d=5, clamp=True)
    cases["alibi-chunks-across-tiles"] = Case("alibi", True, "zigzag", b=1, h=2, h_kv=1, chunk=200, d=32)
    # sliding windows (chunk pairs wholly outside them skipped) and soft-caps
    cases["wavelet-window-zigzag"] = Case("wavelet", True, "zigzag", extra={"window": 7})
    cases["relative-window-softcap-full"] = Case("relative", False, "contiguous", masked=True, lse=True,
                                                 extra={"window": 12, "softcap": 1.5})
    cases["alibi-softcap"] = Case("alibi", True, "contiguous", extra={"softcap": 0.8})
    cases["nope-window-one-chunk"] = Case("nope", True, "contiguous", extra={"window": 10})
    return cases


def packed_cases() -> dict[str, Case]:
    """Packed sequences (global cu_seqlens): every pos_enc, causal or not, both layouts; B = 1 (1-D cu_seqlens)
    and B = 2 (one row of boundaries each), GQA, key padding, return_lse, bf16."""
    cases = {}
    for pos_enc in ("wavelet", "relative", "alibi", "nope"):
        for causal in (True, False):
            for layout in ("contiguous", "zigzag"):
                b = 1 if (pos_enc in ("wavelet", "alibi")) == causal else 2
                cases[f"packed-{pos_enc}-{'causal' if causal else 'full'}-{layout}-b{b}"] = Case(
                    pos_enc, causal, layout, b=b, packed=True, lse=layout == "zigzag")
    cases["packed-relative-clamp-masked-lse"] = Case("relative", True, "zigzag", h=4, h_kv=4, masked=True, lse=True,
                                                     clamp=True, packed=True)
    cases["packed-alibi-masked-full-mqa"] = Case("alibi", False, "contiguous", h=3, h_kv=1, masked=True, lse=True,
                                                 packed=True)
    cases["packed-wavelet-bf16"] = Case("wavelet", True, "zigzag", h=3, h_kv=1, chunk=8, d=16,
                                        dtype=torch.bfloat16, packed=True)
    return cases


def packed_cu(b: int, length: int) -> torch.Tensor:
    """Global document boundaries for ``b`` rows of ``length`` positions: documents spanning several chunks,
    empty ones and one-position ones; int64 (n_docs + 1,) for b = 1, int32 (b, n_docs + 1) otherwise."""
    rows = [[0, 3, 3, length // 2 - 3, length // 2 - 2, length],
            [0, 1, length * 5 // 8, length * 5 // 8, length - 1, length]][:b]
    return torch.tensor(rows[0], dtype=torch.int64) if b == 1 else torch.tensor(rows, dtype=torch.int32)


def cp_inputs(case: Case, length: int) -> dict[str, Any]:
    """The whole-sequence inputs of a case (float64 draws, then cast), the same in every process."""
    key = f"{case.pos_enc} {case.causal} {case.layout} {case.h} {case.masked} {length}"
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()))  # not hash(): salted per process

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale)

    x = {
        "q": draw(case.b, case.h, length, case.d).to(case.dtype),
        "k": draw(case.b, case.h_kv, length, case.d).to(case.dtype),
        "v": draw(case.b, case.h_kv, length, case.d).to(case.dtype),
        "grad_out": draw(case.b, case.h, length, case.d),
        "grad_lse": draw(case.b, case.h, length),
        "kwargs": {"pos_enc": case.pos_enc, "causal": case.causal, **case.extra},
        "param": None,
    }
    if case.pos_enc == "wavelet":
        x["kwargs"]["config"] = small_support_config() if case.d == 8 else None
    elif case.pos_enc == "relative":
        x["param"] = (draw(9, case.d, scale=0.5).to(case.dtype), -3)  # distances -3 … 5
        x["kwargs"]["clamp"] = case.clamp
    elif case.pos_enc == "alibi":
        x["param"] = torch.linspace(0.1, 0.9, case.h, dtype=torch.float64).to(case.dtype)
    if case.masked:
        mask = torch.rand(case.b, length, generator=g) < 0.3
        # batch row 0: its first queries (causal) or all its queries see no key at all (lse -inf)
        mask[0, : length // 2 + 1 if case.causal else length] = True
        x["key_padding_mask"] = mask
    if case.packed:
        x["kwargs"]["cu_seqlens"] = packed_cu(case.b, length)
    return x


def with_param(kwargs: dict, pos_enc: str, param: Any) -> dict:
    kwargs = dict(kwargs)
    if pos_enc == "relative":
        kwargs["rel_table"] = param
    elif pos_enc == "alibi":
        kwargs["alibi_slopes"] = param
    return kwargs


def loss_of(out: torch.Tensor, lse: torch.Tensor | None, grad_out: torch.Tensor,
            grad_lse: torch.Tensor) -> torch.Tensor:
    loss = (out.double() * grad_out).sum()
    if lse is not None:
        loss = loss + (lse.double().masked_fill(torch.isinf(lse), 0.0) * grad_lse).sum()
    return loss


class _KernelDtypes:
    """Records the dtype of q in every attention_fwd / attention_bwd call the ring makes."""

    def __enter__(self) -> "_KernelDtypes":
        from wavepe.distributed import _ring_attention

        self.dtypes: set[torch.dtype] = set()
        self.saved = _ring_attention.ops
        outer = self

        class Recording:
            def __getattr__(self, name: str) -> Any:
                op = getattr(outer.saved, name)

                def call(**kw: Any) -> Any:
                    outer.dtypes.add(kw["q"].dtype)
                    return op(**kw)
                return call
        _ring_attention.ops = Recording()
        return self

    def __exit__(self, *exc: object) -> None:
        from wavepe.distributed import _ring_attention

        _ring_attention.ops = self.saved


def _cp_case(case: Case, rank: int, groups: dict[str, Any], group_name: str) -> dict[str, Any] | None:
    import wavepe.distributed as wd

    members = GROUP_MEMBERS[group_name]
    if members is not None and rank not in members:
        return None
    group = groups[group_name]
    world = dist.get_world_size(group)
    x = cp_inputs(case, case.chunk * world)
    shard = lambda t, dim=2: wd.shard_sequence(t, dim, layout=case.layout, group=group)  # noqa: E731
    leaves = [shard(x[n]).detach().requires_grad_() for n in ("q", "k", "v")]
    param = None
    kwargs = dict(x["kwargs"])
    if x["param"] is not None:
        p = x["param"][0] if case.pos_enc == "relative" else x["param"]
        param = p.clone().requires_grad_()
        kwargs = with_param(kwargs, case.pos_enc, (param, x["param"][1]) if case.pos_enc == "relative" else param)
    if case.masked:
        kwargs["key_padding_mask"] = shard(x["key_padding_mask"], 1)
    with _KernelDtypes() as seen:  # the q dtypes the ring hands its kernels
        result = wd.context_parallel_attention(*leaves, layout=case.layout, group=group, return_lse=case.lse,
                                               **kwargs)
        out, lse = result if case.lse else (result, None)
        loss = loss_of(out, lse, shard(x["grad_out"]), shard(x["grad_lse"]))
        grads = torch.autograd.grad(loss, leaves + ([param] if param is not None else []))
    gather = lambda t: wd.gather_sequence(t.detach(), layout=case.layout, group=group)  # noqa: E731
    res = {"out": gather(out), "dq": gather(grads[0]), "dk": gather(grads[1]), "dv": gather(grads[2]),
           "out_dtype": out.dtype, "grad_dtype": grads[0].dtype, "kernel_dtypes": seen.dtypes}
    if lse is not None:
        res["lse"] = gather(lse)
    if param is not None:
        share = grads[3].clone()
        dist.all_reduce(share, group=group)  # each rank holds its share of a replicated parameter's gradient
        res["dparam"] = share
    return res if dist.get_rank(group) == 0 else None


def _cp_packed(group_name: str) -> Callable:
    """packed_cases() on a group: with the tiles the host-side boundaries let the ring skip ("skip"), and with
    every tile computed ("all", as with boundaries on a GPU)."""
    def scenario(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any] | None:
        from wavepe.distributed import _ring_attention

        res: dict[str, Any] = {}
        for name, case in packed_cases().items():
            res[name] = {"skip": _cp_case(case, rank, groups, group_name)}
        keep = _ring_attention._shares_a_document
        _ring_attention._shares_a_document = lambda docs, t, causal: True
        try:
            for name, case in packed_cases().items():
                res[name]["all"] = _cp_case(case, rank, groups, group_name)
        finally:
            _ring_attention._shares_a_document = keep
        return res
    return scenario


class HostSync(RuntimeError):
    pass


def _no_host_sync(fn: Callable) -> Callable:
    """``fn`` with every way Python reads a tensor's values on the host refused (a GPU stall: bool(), item(),
    tolist(), int(), float(), nonzero, numpy) while it runs."""
    def refuse(name):
        def method(*args, **kwargs):
            raise HostSync(f"torch.Tensor.{name} called")
        return method

    def wrapped(*args, **kwargs):
        names = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "nonzero", "numpy")
        saved = {n: getattr(torch.Tensor, n) for n in names}
        saved_nonzero = torch.nonzero
        for n in names:
            setattr(torch.Tensor, n, refuse(n))
        torch.nonzero = refuse("nonzero (torch.nonzero)")
        try:
            return fn(*args, **kwargs)
        finally:
            for n, m in saved.items():
                setattr(torch.Tensor, n, m)
            torch.nonzero = saved_nonzero
    return wrapped


def _ring_without_host_sync(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any]:
    """The ring's forward and backward with host reads refused (a per-tile sync would raise), on inputs
    with zero-weight tiles (neg_inf_inputs) and packed documents; the results, gathered, for comparison."""
    import wavepe.distributed as wd
    from wavepe.distributed import _ring_attention

    saved = _ring_attention.ring_forward, _ring_attention.ring_backward
    _ring_attention.ring_forward = _no_host_sync(saved[0])
    _ring_attention.ring_backward = _no_host_sync(saved[1])
    res = {}
    try:
        for packed in (False, True):
            x = neg_inf_inputs("relative", True, world)
            kwargs = dict(x["kwargs"])
            if packed:
                kwargs["cu_seqlens"] = packed_cu(2, x["q"].shape[2])
            leaves = [wd.shard_sequence(x[n], 2).detach().requires_grad_() for n in ("q", "k", "v")]
            out, lse = wd.context_parallel_attention(*leaves, return_lse=True, **kwargs)
            loss = loss_of(out, lse, wd.shard_sequence(x["grad_out"], 2), wd.shard_sequence(x["grad_lse"], 2))
            grads = torch.autograd.grad(loss, leaves)
            res["packed" if packed else "plain"] = {
                n: wd.gather_sequence(t.detach()) for n, t in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads))}
        # the guard is live: a host read inside the ring raises
        try:
            _no_host_sync(lambda: bool(torch.ones(1)))()
            res["guard"] = "no error"
        except HostSync as e:
            res["guard"] = str(e)
    finally:
        _ring_attention.ring_forward, _ring_attention.ring_backward = saved
    return res


def _packed_bad_arguments(rank: int, world: int, groups: dict[str, Any]) -> dict[str, str]:
    """cu_seqlens checked like wavelet_attention's (the global length L), and compared across the ranks."""
    import wavepe.distributed as wd

    c = 4
    q = torch.randn(1, 2, c, 8, dtype=torch.float64)
    length = c * world
    bad = {"local_end": torch.tensor([0, 2, c]), "float": torch.tensor([0.0, length]),
           "shape": torch.tensor([[0, length], [0, length]]),
           "disagree": torch.tensor([0, 1 + (rank == 1), length]),
           "decreasing": torch.tensor([0, 5, 3, length])}
    out = {}
    for name, cu in bad.items():
        try:
            wd.context_parallel_attention(q, q, q, pos_enc="nope", cu_seqlens=cu)
            out[name] = "no error"
        except (ValueError, TypeError) as e:
            out[name] = f"{type(e).__name__}: {e}"
    return out


def packed_module(pos_enc: str):
    """A float64 PositionalAttention, its input (1, 8 * 4, 32) and the global boundaries, the same everywhere."""
    from wavepe.nn import PositionalAttention

    torch.manual_seed(3)
    attn = PositionalAttention(32, 4, pos_enc, num_kv_heads=2).double()
    x = torch.randn(1, 32, 32, dtype=torch.float64)
    return attn, x, packed_cu(1, 32)


def _packed_module(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any]:
    """PositionalAttention(cu_seqlens=global boundaries) under context parallelism (zigzag): the output and
    the input's gradient, gathered."""
    import wavepe.distributed as wd

    res = {}
    for pos_enc in ("rope", "wavelet"):
        attn, x, cu = packed_module(pos_enc)
        attn.context_parallel = wd.ContextParallel(layout="zigzag")
        xs = wd.shard_sequence(x, 1, layout="zigzag").requires_grad_()
        out = attn(xs, cu_seqlens=cu)
        (gx,) = torch.autograd.grad(out.square().sum(), xs)
        res[pos_enc] = {"out": wd.gather_sequence(out.detach(), 1, layout="zigzag"),
                        "dx": wd.gather_sequence(gx, 1, layout="zigzag")}
    return res


def _cp_scenario(group_name: str) -> Callable:
    def scenario(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any] | None:
        return {name: _cp_case(case, rank, groups, group_name) for name, case in cp_cases().items()}
    return scenario


def _disagreeing_chunks(rank: int, world: int, groups: dict[str, Any]) -> str:
    """Rank 0 passes a shorter chunk: every rank must raise the same ValueError (no hang)."""
    import wavepe.distributed as wd

    c = 4 if rank == 0 else 6
    q = torch.randn(1, 2, c, 8, dtype=torch.float64)
    try:
        wd.context_parallel_attention(q, q, q, pos_enc="nope")
    except ValueError as e:
        return str(e)
    return "no error"


def _odd_zigzag_chunk(rank: int, world: int, groups: dict[str, Any]) -> str:
    import wavepe.distributed as wd

    q = torch.randn(1, 2, 5, 8)
    try:
        wd.context_parallel_attention(q, q, q, layout="zigzag")
    except ValueError as e:
        return str(e)
    return "no error"


def _layout_roundtrip(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any]:
    """Each layout's positions, a sharded position ramp and the gathered (B, L, 3) sequence."""
    import wavepe.distributed as wd

    out = {}
    length = 8 * world
    ramp = torch.arange(length).view(1, length, 1).expand(2, length, 3)
    for layout in wd.LAYOUTS:
        local = wd.shard_sequence(ramp, 1, layout=layout)
        out[layout] = {"positions": wd.local_positions(length, layout=layout), "sharded": local[0, :, 0].clone(),
                       "gathered": wd.gather_sequence(local, 1, layout=layout)}
    return out


# ---- non-finite scores across chunks -------------------------------------------------------------------

NEG_INF_CASES = {"nope-causal": ("nope", True), "alibi-causal": ("alibi", True),
                 "relative-causal": ("relative", True), "wavelet-full": ("wavelet", False)}


def neg_inf_inputs(pos_enc: str, causal: bool, world: int = 2, chunk: int = 6) -> dict[str, Any]:
    """Scores that are -inf over rank 0's whole chunk of keys only (contiguous layout).

    Every key of chunk 0 has k[..., 0] = -inf and every query q[..., 0] > 0, so
    each query's scores against chunk 0 are -inf and against the other chunks
    finite.  Causal: rank 0's queries see chunk 0 only (all -inf everywhere:
    NaN), the others' rows are finite.  Batch row 1's last query has
    q[..., 0] < 0 (+inf against chunk 0: NaN, which must stay NaN); the last,
    so that no key is hidden from it by the causal mask (the SIMD backward
    kernels let a NaN row's dv reach keys of its tile that it does not see).
    """
    g = torch.Generator().manual_seed(zlib.crc32(f"neg-inf {pos_enc} {causal}".encode()))
    length = world * chunk
    q = torch.randn(2, 2, length, 8, generator=g, dtype=torch.float64)
    q[..., 0] = q[..., 0].abs() + 0.5
    q[1, :, length - 1, 0] = -1.0
    k = torch.randn(2, 1, length, 8, generator=g, dtype=torch.float64)
    k[:, :, :chunk, 0] = float("-inf")
    x = {"q": q, "k": k, "v": torch.randn(2, 1, length, 8, generator=g, dtype=torch.float64),
         "grad_out": torch.randn(2, 2, length, 8, generator=g, dtype=torch.float64),
         "grad_lse": torch.randn(2, 2, length, generator=g, dtype=torch.float64),
         "kwargs": {"pos_enc": pos_enc, "causal": causal}}
    if pos_enc == "relative":
        x["kwargs"]["rel_table"] = (torch.randn(9, 8, generator=g, dtype=torch.float64) * 0.5, -3)
    elif pos_enc == "wavelet":
        x["kwargs"]["config"] = small_support_config()
    return x


def _cp_neg_inf_chunk(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any]:
    """Context-parallel (out, lse) and gradients for :func:`neg_inf_inputs`, gathered on every rank."""
    import wavepe.distributed as wd

    res = {}
    for name, (pos_enc, causal) in NEG_INF_CASES.items():
        x = neg_inf_inputs(pos_enc, causal, world)
        leaves = [wd.shard_sequence(x[n], 2).detach().requires_grad_() for n in ("q", "k", "v")]
        out, lse = wd.context_parallel_attention(*leaves, return_lse=True, **x["kwargs"])
        loss = loss_of(out, lse, wd.shard_sequence(x["grad_out"], 2), wd.shard_sequence(x["grad_lse"], 2))
        grads = torch.autograd.grad(loss, leaves)
        res[name] = {n: wd.gather_sequence(t.detach()) for n, t in
                     zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads))}
    return res


# ---- models -----------------------------------------------------------------------------------------


def tinylm(pos_enc: str, seed: int = 0):
    """A 2-layer byte-level TinyLM (float64) of the experiments, hidden 32, 2 heads."""
    from wavepe.research.experiments.model import LMConfig, TinyLM

    torch.manual_seed(seed)
    return TinyLM(LMConfig(pos_enc=pos_enc, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64)).double()


def tinylm_batch(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 256, (2, length + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def tinylm_loss(model, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _tinylm_context_parallel(rank: int, world: int, groups: dict[str, Any]) -> dict[str, Any]:
    """TinyLM with context-parallel attention (zigzag) under DDP over the same ranks: one step's gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import wavepe.distributed as wd

    out = {}
    for pos_enc in ("wavelet", "rope", "alibi"):
        model = tinylm(pos_enc)
        for attn in model.attention_modules():
            attn.context_parallel = wd.ContextParallel(layout="zigzag")
        ddp = DDP(model)
        inputs, targets = tinylm_batch(8 * world)
        shard = lambda t: wd.shard_sequence(t, 1, layout="zigzag")  # noqa: E731
        loss = tinylm_loss(ddp, shard(inputs), shard(targets))  # the mean over this rank's tokens
        loss.backward()  # DDP averages: the gradient of the mean over all tokens
        out[pos_enc] = {n: p.grad.clone() for n, p in model.named_parameters()}
    return out


def llama(seed: int = 0):
    """The tiny Llama of tests/test_hf.py (GQA 4 heads over 2), float64, patched with the wavelet encoding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import wavepe

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      initializer_range=0.15, pad_token_id=0, bos_token_id=1, eos_token_id=None,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).double()
    wavepe.patch_llama(model, "wavelet")
    return model


def llama_batch(world: int) -> torch.Tensor:
    return torch.randint(0, 100, (2 * world, 24), generator=torch.Generator().manual_seed(3))


def _ddp_llama(rank: int, world: int, groups: dict[str, Any]) -> dict[str, torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = llama()
    ddp = DDP(model)
    ids = llama_batch(world)[2 * rank: 2 * rank + 2]  # this rank's rows of the batch
    ddp(ids, labels=ids).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def _fsdp_llama(rank: int, world: int, groups: dict[str, Any]) -> dict[str, torch.Tensor]:
    from torch.distributed.fsdp import fully_shard

    model = llama()
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ids = llama_batch(world)[2 * rank: 2 * rank + 2]
    model(ids, labels=ids).loss.backward()
    # FSDP2 shards every parameter (DTensor) and reduce-scatters the averaged gradients
    sharded = all(type(p).__name__ == "DTensor" for p in model.parameters())
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    return {"sharded": sharded, "grads": grads}


SCENARIOS: dict[str, Callable[[int, int, dict[str, Any]], Any]] = {
    "cp_world": _cp_scenario("world"),
    "cp_ranks123": _cp_scenario("ranks123"),
    "cp_ranks02": _cp_scenario("ranks02"),
    "disagreeing_chunks": _disagreeing_chunks,
    "odd_zigzag_chunk": _odd_zigzag_chunk,
    "layout_roundtrip": _layout_roundtrip,
    "cp_neg_inf_chunk": _cp_neg_inf_chunk,
    "cp_packed_world": _cp_packed("world"),
    "cp_packed_ranks123": _cp_packed("ranks123"),
    "ring_without_host_sync": _ring_without_host_sync,
    "packed_bad_arguments": _packed_bad_arguments,
    "packed_module": _packed_module,
    "tinylm_context_parallel": _tinylm_context_parallel,
    "ddp_llama": _ddp_llama,
    "fsdp_llama": _fsdp_llama,
}
