"""Does a patched model train and decode as fast as the stock one?  Every family, every pos_enc.

    python benchmarks/bench_hf.py [--quick] [--families llama,gemma2,...] [--modes wavelet,rope,alibi,nope]
                                  [--length L] [--new-tokens T] [--compiled] [--compile-backend inductor]
                                  [--repeat N] [--threads T] [--device cpu|cuda] [--dtype float32|bf16]
                                  [--hidden N]

Shape (per family, random weights; --dtype, default fp32 on the CPU, bf16 on a GPU: weights,
inputs and the training step all in that dtype): 4 layers, hidden 512 (--hidden),
8 query heads x 64 over 4 KV heads, intermediate 1408 (2.75x the hidden size), vocabulary 32000, the family's own
features (Gemma 2: softcapping 50 and 4096-token windows on every other layer; Gemma 3:
q/k norm, 1024-token windows; Phi-3: fused qkv; ...).  --quick: 2 layers, L = 128.
Reference: the stock model (transformers' default attention, its RoPE), in the same run.
Candidates: the same weights after wavepe.patch(model, mode).

Rows:
* train: one forward + backward step of the causal LM, batch 1, L = 1024 (--length);
* prefill: one forward pass over the L/4-token prompt that fills the dynamic cache (logits of the last
  position only, as generate computes them);
* decode: greedy generation of T = 32 tokens (--new-tokens) after an L/4-token prompt, per
  token, prefill subtracted (dynamic cache);
* compiled decode (--compiled): the same with a static cache and generate's own compile
  (CompileConfig(backend=--compile-backend, fullgraph=True)), compile excluded.

--windowed: the sliding-window and soft-capping cases of issue 47 at L = 4096 (--length): Mistral with
sliding_window=512 on every layer and Gemma 2 (softcap 50, 4096-token windows on every other layer, its
default eager attention) -- the train step's time, and its peak memory: the growth of the peak RSS over
one step, each model in a fresh process (--families and --modes narrow it as usual, default modes
wavelet and rope; decode rows are not run).  Targets: a patched train step <= 1.0x the stock one in time
and in peak memory, for the modes that run wavepe's attention (all but "rope", which keeps the model's).

Target (issue 21): rope mode within 1.1x the stock model in every row (it is the stock
attention plus, with rope=RopeConfig, wavepe's cos/sin).  Relative modes are reported.
Prints a table with the CPU / GPU, ISA and threads, and writes
benchmarks/results/bench_hf.<isa>.json (bench_hf_quick.<isa>.json, or --out NAME: NAME.<isa>.json);
a dtype other than the device's default is named in the file: bench_hf_bf16.<isa>.json on the CPU; a GPU's run
writes bench_hf_cuda.json (the GPU and the host inside).
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import compare, print_table, reset_peak_rss, rss_kib, write_json  # noqa: E402

TARGET = 1.1
WINDOWED_TARGET = 1.0
# --windowed: what each family's config adds on top of FEATURES (a window that bites at L = 4096)
WINDOWED = {"mistral": {"sliding_window": 512}}

# what each family's benchmark config adds (its defining features at this size)
FEATURES = {
    "qwen3": {"head_dim": 64},
    "gemma2": {"head_dim": 64, "query_pre_attn_scalar": 64, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "sliding_window": 4096},
    "gemma3": {"head_dim": 64, "query_pre_attn_scalar": 64, "sliding_window": 1024},
}


HIDDEN = 512  # --hidden: heads of 64, half as many KV heads, intermediate 2.75x


def shape_text() -> str:
    return f"hidden {HIDDEN}, {HIDDEN // 64} heads x 64 over {HIDDEN // 128} KV heads"


def build(family: str, layers: int, device, dtype):
    import torch
    import transformers

    from wavepe.integrations import hf

    fam = next(f for f in hf.FAMILIES if f.name == family)
    config = getattr(transformers, fam.config)(
        vocab_size=32000, hidden_size=HIDDEN, intermediate_size=HIDDEN * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=HIDDEN // 64, num_key_value_heads=HIDDEN // 128, max_position_embeddings=8192,
        tie_word_embeddings=False, pad_token_id=0,
        eos_token_id=None, **FEATURES.get(family, {}))
    torch.manual_seed(0)
    return getattr(transformers, fam.causal_lm)(config).to(device=device, dtype=dtype)


def train_step(model, ids):
    def step() -> None:
        model.train()
        model(ids, labels=ids, use_cache=False).loss.backward()
        for p in model.parameters():
            p.grad = None

    return step


def decode_times(models: dict, prompt, new_tokens: int, repeat: int,
                 **generate_kw) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per generated token of each model, the prefill's time subtracted; and the prefill's seconds.

    Generations (and prefills) of the models are timed in alternation (medians), after a
    warm-up generation each (which compiles, when asked).
    """
    import torch

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **generate_kw)
    with torch.no_grad():
        for m in models.values():
            m.eval()
        gen = compare({n: functools.partial(m.generate, prompt, **kw) for n, m in models.items()}, repeat=repeat,
                      warmup=1)
        # logits of the last position only, as generate's prefill computes them (the full (L/4, vocab) logits
        # cost more than generate's whole prefill in bf16 on the CPU, and the difference went negative)
        pre = compare({n: functools.partial(m, prompt, use_cache=True, logits_to_keep=1) for n, m in models.items()},
                      repeat=repeat, warmup=1)
    return {n: max(gen[n] - pre[n], 0.0) / new_tokens for n in models}, pre


def train_peak_mib(family: str, mode: str, length: int, dtype_name: str) -> float:
    """Peak RSS growth (MiB) over one train step of ``mode`` ("stock" or a pos_enc), measured in a fresh process
    (a process's peak includes everything before it: the model alone, its first step alone)."""
    import subprocess

    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_train-memory", family, mode, str(length),
                          dtype_name], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _train_memory_child(family: str, mode: str, length: int, dtype_name: str) -> None:
    import torch

    import wavepe

    FEATURES.setdefault(family, {}).update(WINDOWED.get(family, {}))
    dtype = {"float32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    model = build(family, 4, torch.device("cpu"), dtype)
    if mode != "stock":
        wavepe.patch(model, mode)
    ids = torch.randint(1, 32000, (1, length), generator=torch.Generator().manual_seed(1))
    step = train_step(model, ids)
    step()  # the first step allocates what every step reuses (gradient buffers are freed each step)
    reset_peak_rss()
    before = rss_kib("VmRSS:")
    step()
    print((rss_kib("VmHWM:") - before) / 1024)


def run_windowed(family: str, modes: list[str], args, device, dtype, dtype_name: str) -> list[list]:
    """--windowed: the train step of a family with its window / softcap, time and peak memory."""
    import torch

    import wavepe

    FEATURES.setdefault(family, {}).update(WINDOWED.get(family, {}))
    stock = build(family, 4, device, dtype)
    models = {"stock": stock}
    for mode in modes:
        models[mode] = copy.deepcopy(stock)
        wavepe.patch(models[mode], mode)
    ids = torch.randint(1, 32000, (1, args.length), generator=torch.Generator().manual_seed(1))
    times = compare({name: train_step(m, ids) for name, m in models.items()}, repeat=args.repeat, warmup=1)
    del models
    mem = {name: train_peak_mib(family, name, args.length, dtype_name) for name in ["stock", *modes]}
    case = f"train L={args.length} " + ", ".join(f"{k}={v}" for k, v in FEATURES.get(family, {}).items()
                                                   if k in ("sliding_window", "attn_logit_softcapping"))
    rows = [[family, case, "stock", times["stock"] * 1e3, 1.0, mem["stock"], 1.0, "", ""]]
    for mode in modes:
        t, m = times[mode] / times["stock"], mem[mode] / mem["stock"]
        # "rope" keeps the model's own attention (a stock path plus wavepe's rotary hook): reported, no target
        fused = mode != "rope"
        met = ("yes" if t <= WINDOWED_TARGET and m <= WINDOWED_TARGET else "no") if fused else ""
        rows.append([family, case, f"wavepe {mode}", times[mode] * 1e3, t, mem[mode], m,
                     f"<= {WINDOWED_TARGET} (both)" if fused else "", met])
    return rows


def run_family(family: str, modes: list[str], args, device, dtype) -> list[list]:
    import torch
    from transformers import CompileConfig

    import wavepe

    layers = 2 if args.quick else 4
    stock = build(family, layers, device, dtype)
    models = {"stock": stock}
    for mode in modes:
        models[mode] = copy.deepcopy(stock)
        wavepe.patch(models[mode], mode)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 32000, (1, args.length), generator=g).to(device)
    prompt = ids[:, : max(args.length // 4, 8)]
    rows = []

    def add(case: str, times: dict[str, float], unit: float) -> None:
        ref = times["stock"]
        rows.append([family, case, "stock", ref * unit, 1.0, "", ""])
        for mode in modes:
            ratio = times[mode] / ref if ref > 0 else float("nan")
            target = f"<= {TARGET}" if mode == "rope" else ""
            met = ("yes" if ratio <= TARGET else "no") if mode == "rope" else ""
            impl = models[mode].config._attn_implementation
            rows.append([family, case, f"wavepe {mode} ({impl})", times[mode] * unit, ratio, target, met])

    times = compare({name: train_step(m, ids) for name, m in models.items()}, repeat=args.repeat, warmup=1)
    add(f"train L={args.length}", times, 1e3)
    times, prefill = decode_times(models, prompt, args.new_tokens, 2 * args.repeat + 1)
    add(f"prefill ({prompt.shape[1]})", prefill, 1e3)
    add(f"decode ({prompt.shape[1]}+{args.new_tokens})", times, 1e3)
    if args.compiled:
        config = CompileConfig(fullgraph=True, backend=args.compile_backend, mode=None)
        config._compile_all_devices = True  # generate compiles on GPUs only unless told
        torch._dynamo.reset()
        # every model instance compiles its own decode graphs: room for all of them (the default limit is 8)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * len(models))
        times, _ = decode_times(models, prompt, args.new_tokens, 2 * args.repeat + 1,
                                cache_implementation="static", compile_config=config)
        add(f"compiled decode ({args.compile_backend})", times, 1e3)
    return rows


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--_train-memory":  # a child of train_peak_mib
        _train_memory_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 layers, L = 128, 8 new tokens: a smoke test")
    parser.add_argument("--families", default="llama,mistral,qwen2,qwen3,gemma2,gemma3,phi3,olmo2")
    parser.add_argument("--modes", default="wavelet,rope,alibi,nope")
    parser.add_argument("--length", type=int, default=0, help="training length L (default 1024; --quick 128)")
    parser.add_argument("--new-tokens", type=int, default=0, help="decoded tokens (default 32; --quick 8)")
    parser.add_argument("--compiled", action="store_true", help="add the compiled static-cache decode rows")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=512,
                        help="hidden size, a multiple of 128 (heads of 64, half as many KV heads; issue 64's: 2048)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", choices=("float32", "bf16"), default=None,
                        help="weights, inputs and training step (default float32 on the CPU, bf16 on a GPU)")
    parser.add_argument("--out", default="", help="results file name (default bench_hf, bench_hf_quick)")
    parser.add_argument("--windowed", action="store_true",
                        help="issue 47's cases: Mistral (window 512) and Gemma 2 train steps at L=4096, time and "
                             "peak memory")
    args = parser.parse_args()
    import torch

    global HIDDEN
    if args.hidden <= 0 or args.hidden % 128:
        parser.error(f"--hidden must be a positive multiple of 128, got {args.hidden}")
    HIDDEN = args.hidden
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    default = "bf16" if device.type == "cuda" else "float32"
    dtype_name = args.dtype or default
    dtype = {"float32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    args.length = args.length or (128 if args.quick else 4096 if args.windowed else 1024)
    args.new_tokens = args.new_tokens or (8 if args.quick else 32)
    modes = [m for m in args.modes.split(",") if m]
    if args.windowed:
        if device.type != "cpu":
            parser.error("--windowed measures the CPU (peak RSS)")
        families = args.families if "--families" in " ".join(sys.argv) else "mistral,gemma2"
        if "--modes" not in " ".join(sys.argv):
            modes = ["wavelet", "rope"]
        rows = []
        for family in [f for f in families.split(",") if f]:
            rows += run_windowed(family, modes, args, device, dtype, dtype_name)
        header = ["family", "case", "model", "train step ms", "ratio", "peak MiB (step)", "ratio", "target", "met"]
        table = print_table(f"bench_hf --windowed: {dtype_name} on cpu, batch 1, 4 layers, {shape_text()}", header,
                            rows)
        write_json(args.out or "bench_hf_windowed" + ("" if dtype_name == default else f"_{dtype_name}"),
                   {"dtype": dtype_name, "device": "cpu", "length": args.length, "header": header, "rows": rows,
                    "table": table})
        return
    rows = []
    for family in [f for f in args.families.split(",") if f]:
        rows += run_family(family, modes, args, device, dtype)
    header = ["family", "case", "model", "time (ms, per token for decode)", "ratio", "target", "met"]
    where = f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type
    title = (f"bench_hf: {dtype_name} on {where}, batch 1, "
             f"{2 if args.quick else 4} layers, {shape_text()}")
    table = print_table(title, header, rows)
    # (a GPU's run: bench_hf_cuda.json, the GPU named inside -- not the host CPU's ISA, whose file is the CPU's run)
    name = ("bench_hf" + ("_cuda" if device.type == "cuda" else "") + ("" if dtype_name == default else f"_{dtype_name}")
            + ("_quick" if args.quick else ""))
    write_json(args.out or name, {"dtype": dtype_name, "device": str(device), "header": header, "rows": rows,
                                  "table": table})


if __name__ == "__main__":
    main()
