"""Does a patched Llama train as fast as the unpatched one?  Forward + backward step time.

    python benchmarks/bench_hf.py [--quick] [--repeat N] [--modes wavelet,rope,alibi,nope] [--threads T]

Shape: a small real Llama, 4 layers, hidden 512, 8 heads (head_dim 64), 8 KV heads,
intermediate 1408, batch 1, L = 2048 (--quick: L = 256), fp32, random weights.
Reference: the unpatched model with attn_implementation="sdpa" and its RoPE.
Candidates: the same model after wavepe.patch_llama(model, mode).
Two cases: the causal LM with a 32000-token vocabulary (what a training step costs)
and the decoder alone (LlamaModel, loss = mean of the last hidden state), where
attention is a larger share of the time.

Target (whichever CPU runs it): "wavelet" step time <= 1.1x the reference (issue 12).
Prints a table and writes benchmarks/results/bench_hf.json (bench_hf_quick.json).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import compare, print_table, write_json  # noqa: E402

TARGET = 1.1


def build(case: str, length: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=max(4096, length),
                         tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = (LlamaForCausalLM if case == "causal LM" else LlamaModel)(config).train()
    return model


def step_fn(model, ids):
    def step() -> None:
        if hasattr(model, "lm_head"):
            loss = model(ids, labels=ids, use_cache=False).loss
        else:
            loss = model(ids, use_cache=False).last_hidden_state.float().pow(2).mean()
        loss.backward()
        for p in model.parameters():
            p.grad = None

    return step


def run_case(case: str, length: int, modes: list[str], repeat: int) -> list[list]:
    import copy

    import torch

    import wavepe
    from wavepe.integrations import hf

    base = build(case, length)
    ids = torch.randint(0, 32000, (1, length), generator=torch.Generator().manual_seed(1))
    fns = {"reference (sdpa + RoPE)": step_fn(base, ids)}
    models = {}
    for mode in modes:
        m = copy.deepcopy(base)
        wavepe.patch_llama(m, mode)
        models[mode] = m
        fns[f"wavepe {mode}"] = step_fn(m, ids)
    times = compare(fns, repeat=repeat, warmup=1)
    ref = times["reference (sdpa + RoPE)"]
    rows = [[case, length, "reference (sdpa + RoPE)", ref * 1e3, 1.0, "", ""]]
    path = _attention_path()
    for mode in modes:
        t = times[f"wavepe {mode}"]
        ratio = t / ref
        target = f"<= {TARGET}" if mode == "wavelet" else ""
        met = ("yes" if ratio <= TARGET else "no") if mode == "wavelet" else ""
        rows.append([case, length, f"wavepe {mode} ({path})", t * 1e3, ratio, target, met])
    for m in models.values():
        hf.unpatch(m)
    return rows


def _attention_path() -> str:
    """Which implementation wavelet_attention runs on: compiled kernel or the plain-PyTorch fallback."""
    import torch

    from wavepe import ops  # noqa: F401  (loads the extension and registers torch.ops.wavepe)

    fused = [name for name in dir(torch.ops.wavepe) if "attention" in name]
    return f"fused kernel {fused[0]}" if fused else "bias + SDPA fallback"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="L = 256, for smoke tests")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--modes", default="wavelet,rope,alibi,nope")
    parser.add_argument("--cases", default="causal LM,decoder only")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    length = 256 if args.quick else 2048
    modes = [m for m in args.modes.split(",") if m]
    rows = []
    for case in args.cases.split(","):
        rows += run_case(case, length, modes, args.repeat)
    header = ["case", "L", "model", "step (ms)", "ratio", "target", "met"]
    table = print_table("bench_hf: forward + backward step, fp32, batch 1, 4 layers, hidden 512, 8 heads x 64",
                        header, rows)
    write_json("bench_hf" + ("_quick" if args.quick else ""),
               {"header": header, "rows": rows, "table": table, "attention_path": _attention_path()})


if __name__ == "__main__":
    main()
