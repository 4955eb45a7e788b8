"""Are the torch ops on torch's ABI-stable API as fast as the ones they replaced?

    python benchmarks/bench_stable_abi.py --baseline TREE [--quick] [--repeat N] [--threads T]

TREE is a checkout of wavepe from before the port (e.g. ``git worktree add /tmp/wavepe-base c6c9951``),
built in place (``python setup.py build_ext --inplace`` with this environment's python): its ops are
the ATen-API ``wavepe._C``.  Both versions run in worker processes of their own (one process cannot
register two ``wavepe`` libraries), fed the same cases in alternation (A B A B ...), each call timed
in its worker; each figure is the median.  Cases: the rows of bench_attention.py that matter for the
bindings (fused wavelet attention forward, forward + backward, split-KV decode, RoPE, the relative
bias, ALiBi) and bench_hf.py's Llama (wavelet) train step and decode.

Target (issue 26): every ratio new / old within 1 +- 0.05.  Prints a table with the CPU, ISA and
threads, and writes benchmarks/results/bench_stable_abi.<isa>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import print_table, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 0.05

# The worker: builds every case once, then times the one named on each stdin line (seconds on stdout).
WORKER = r'''
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
quick = sys.argv[2] == "1"
import wavepe, wavepe.ops as wo
from wavepe.ops import _extension
g = torch.Generator().manual_seed(0)
L = 512 if quick else 2048
cfg = wavepe.WaveletConfig.grid(128)
q = torch.randn(1, 8, L, 128, generator=g); k = torch.randn(1, 8, L, 128, generator=g); v = torch.randn(1, 8, L, 128, generator=g)
qg = q.clone().requires_grad_(); kg = k.clone().requires_grad_(); vg = v.clone().requires_grad_()
N = 4096 if quick else 32768
qd = torch.randn(1, 32, 1, 128, generator=g); kd = torch.randn(1, 8, N, 128, generator=g); vd = torch.randn(1, 8, N, 128, generator=g)
rq = torch.randn(1, 8, 4096, 128, generator=g); rk = torch.randn(1, 8, 4096, 128, generator=g)
rc = wavepe.RopeConfig(theta=1e4)
bq = torch.randn(1, 8, 1024, 128, generator=g)

def fwdbwd():
    out = wo.wavelet_attention(qg, kg, vg, cfg)
    out.sum().backward()
    qg.grad = kg.grad = vg.grad = None

from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
lcfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=2 if quick else 4,
                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192,
                   tie_word_embeddings=False, pad_token_id=0, eos_token_id=None)
llama = LlamaForCausalLM(lcfg)
wavepe.patch(llama, "wavelet")
ids = torch.randint(1, 32000, (1, 256 if quick else 1024), generator=g)
prompt = ids[:, :64 if quick else 256]

def train():
    llama.train()
    llama(ids, labels=ids, use_cache=False).loss.backward()
    for p in llama.parameters():
        p.grad = None

def decode():
    llama.eval()
    with torch.no_grad():
        llama.generate(prompt, max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)

cases = {
    "attention fwd": lambda: wo.wavelet_attention(q, k, v, cfg),
    "attention fwd+bwd": fwdbwd,
    "decode (split-KV)": lambda: wo.wavelet_attention(qd, kd, vd, cfg, q_offset=N - 1),
    "rope q+k": lambda: wo.rope(rq, rk, 0, rc),
    "wavelet_bias": lambda: wo.wavelet_bias(bq, cfg),
    "alibi_bias": lambda: wo.alibi_bias(8, 1024, 1024),
    "hf llama train step": train,
    "hf llama decode 16 tokens": decode,
}
for fn in cases.values():
    fn()
print(json.dumps({"origin": _extension.ORIGIN, "cases": list(cases)}), flush=True)
for line in sys.stdin:
    fn = cases[line.strip()]
    t0 = time.perf_counter(); fn(); print(time.perf_counter() - t0, flush=True)
'''


def start(tree: str, threads: int, quick: bool) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "python")}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(threads), "1" if quick else "0"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
    head = json.loads(proc.stdout.readline())
    return proc, head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="a wavepe tree from before the port, built in place")
    parser.add_argument("--quick", action="store_true", help="smaller shapes (L=512, 4096 keys, 2 layers)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    old, old_head = start(os.path.abspath(args.baseline), args.threads, args.quick)
    new, new_head = start(ROOT, args.threads, args.quick)
    print(f"baseline ops: {old_head['origin']}\ncurrent ops:  {new_head['origin']}")
    rows = []
    for case in new_head["cases"]:
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeat):
            for name, proc in (("old", old), ("new", new)):
                proc.stdin.write(case + "\n")
                proc.stdin.flush()
                times[name].append(float(proc.stdout.readline()))
        t_old, t_new = statistics.median(times["old"]), statistics.median(times["new"])
        ratio = t_new / t_old
        rows.append([case, t_old * 1e3, t_new * 1e3, ratio, f"1 +- {TARGET}", "yes" if abs(ratio - 1) <= TARGET else "no"])
    for proc in (old, new):
        proc.stdin.close()
        proc.wait()
    header = ["case", "ATen-API ops (ms)", "stable-ABI ops (ms)", "ratio new/old", "target", "met"]
    title = ("bench_stable_abi: the ops on torch's stable ABI vs the ATen-API build they replaced, fp32, "
             + ("quick shapes" if args.quick else "B=1 H=8 d=128 L=2048; decode 32/8 heads x 32768 keys; HF Llama 4 layers"))
    table = print_table(title, header, rows)
    write_json("bench_stable_abi" + ("_quick" if args.quick else ""), {"header": header, "rows": rows, "table": table,
                                                                       "baseline": old_head["origin"]})


if __name__ == "__main__":
    main()
