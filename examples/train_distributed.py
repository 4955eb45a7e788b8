"""Train across devices with torchrun: data parallel (DDP, FSDP2) or context parallel.

    torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --mode ddp
    torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --mode fsdp
    torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --mode context

ddp / fsdp: a small Hugging Face Llama with wavepe's wavelet encoding
(``wavepe.patch_llama``), wrapped in DDP or FSDP2's ``fully_shard``; each rank
trains on its share of every batch.  Nothing wavepe-specific is needed: wavepe's
ops are ordinary autograd ops.

context: every rank holds a slice of each *sequence* (the zigzag layout) and
the experiments' TinyLM attends across ranks with
``wavepe.distributed.ContextParallel``; DDP over the same ranks averages the
parameters' gradients, which makes them the gradients of the whole sequence.

Bytes of the embedded corpus (the Python standard library's sources) are the
tokens.  CPU processes talk over gloo; with CUDA each process takes one GPU and
NCCL.  Prints the loss (rank 0) and each rank's peak memory (GPU memory, or
the process's peak RSS on the CPU, mostly torch itself at these sizes).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import wavepe
import wavepe.distributed as wd
from wavepe.research.experiments.corpus import load_corpus
from wavepe.research.experiments.model import LMConfig, TinyLM


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("ddp", "fsdp", "context"), default="ddp")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=None,
                   help="sequences per step, over all ranks (default 8; 4 for --mode context)")
    p.add_argument("--length", type=int, default=None,
                   help="tokens per sequence (default 128; 512 for --mode context, split over the ranks)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args()


def llama(device: torch.device) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    model = LlamaForCausalLM(config)
    wavepe.patch_llama(model, "wavelet")
    return model.to(device)


def batches(tokens: np.ndarray, args: argparse.Namespace, length: int):
    """(batch, length + 1) windows of the stream, the same on every rank (a shared seed)."""
    stream = torch.from_numpy(tokens.astype(np.int64))
    gen = torch.Generator().manual_seed(args.seed)
    window = torch.arange(length + 1)
    for _ in range(args.steps):
        starts = torch.randint(0, stream.numel() - length - 1, (args.batch,), generator=gen)
        yield stream[starts[:, None] + window[None, :]]


def main() -> None:
    args = parse_args()
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend)
    device = torch.device(args.device)
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    keep: list[torch.Tensor] = []  # the tensors of the last collectives: see shutdown()
    summary = train(args, device, keep)
    if dist.get_rank() == 0:
        print(summary, flush=True)
    shutdown(keep)


def train(args: argparse.Namespace, device: torch.device, keep: list[torch.Tensor]) -> str:
    """Train; returns the summary line.  The models and their DDP/FSDP wrappers end with this call."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    length = args.length or (512 if args.mode == "context" else 128)
    args.batch = args.batch or (4 if args.mode == "context" else 8)

    if args.mode == "context":
        model = TinyLM(LMConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=32,
                                intermediate_size=256, pos_enc="wavelet")).to(device)
        for attn in model.attention_modules():  # attend over the whole sequence, across the ranks
            attn.context_parallel = wd.ContextParallel(layout="zigzag")
        trained = DDP(model)
    else:
        if args.batch % world:
            raise SystemExit(f"--batch {args.batch} must be divisible by the {world} ranks")
        model = llama(device)
        if args.mode == "ddp":
            trained = DDP(model)
        else:
            from torch.distributed.fsdp import fully_shard

            for layer in model.model.layers:
                fully_shard(layer)
            trained = fully_shard(model)
    opt = torch.optim.AdamW(trained.parameters(), lr=args.lr)

    tokens = load_corpus(None).train
    losses = []
    t0 = time.perf_counter()
    for step, batch in enumerate(batches(tokens, args, length)):
        batch = batch.to(device)
        if args.mode == "context":
            # this rank's positions of every sequence; the loss is the mean over its tokens
            inputs = wd.shard_sequence(batch[:, :-1], dim=1, layout="zigzag")
            targets = wd.shard_sequence(batch[:, 1:], dim=1, layout="zigzag")
            logits = trained(inputs)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        else:
            rows = batch[rank::world]  # this rank's sequences
            loss = trained(rows, labels=rows).loss
        loss.backward()  # DDP / FSDP average the gradients over the ranks
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {losses[-1]:.3f}", flush=True)
    seconds = time.perf_counter() - t0

    peak = torch.tensor([float(torch.cuda.max_memory_allocated(device) if args.device == "cuda"
                               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)], device=device)
    peaks = [torch.empty_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    keep += [mean, peak, *peaks]
    per_rank = length // world if args.mode == "context" else length
    what = (f"{args.batch} sequences x {length} tokens, {per_rank} per rank" if args.mode == "context"
            else f"{args.batch // world} of {args.batch} sequences x {length} tokens per rank")
    return (f"{args.mode}: {world} ranks ({dist.get_backend()}), {what}; {args.steps} steps in {seconds:.1f} s; "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; peak memory per rank "
            + ", ".join(f"{p.item() / 2**20:.0f} MiB" for p in peaks))


def shutdown(keep: list[torch.Tensor]) -> None:
    """Destroy the process group without torch's deadlock at exit (torch issue #56297).

    Destroying a gloo group joins its worker threads while holding the GIL, and a
    worker that frees a finished collective whose tensors' Python objects are gone
    needs the GIL.  So: the wrappers holding the group go first (only
    torch.distributed holds it then); the last collectives' tensors (``keep``) stay
    referenced; the workers get a moment without the GIL to free everything older;
    then the group is destroyed.
    """
    gc.collect()
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()
    keep.clear()


if __name__ == "__main__":
    main()
