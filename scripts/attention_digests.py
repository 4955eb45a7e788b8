"""Digests of the CPU attention's outputs and gradients, to show that a restructuring changed no bit.

    python scripts/attention_digests.py --write BEFORE.json      on the tree before the change
    python scripts/attention_digests.py --check BEFORE.json      on the tree after it: lists every case
                                                                 whose digest moved (exit 1), else exit 0

Issue 66 asks the CPU attention to be restructured with outputs and gradients **bit-identical** on every
ISA the machine runs.  Each case here is one call of ``wavepe.ops.wavelet_attention`` forward and
backward -- a shape (GQA, decoding, head dims 32/64/128, query offsets), a dtype (float32, float64,
bf16, fp16), an encoding (nope, wavelet, ALiBi, a learned relative table), optionally a window,
soft-capping or packed documents -- under one forced ISA (``WAVEPE_ISA``, each of
``wavepe.supported_isas()``: the emulated AMX tiles included on CPUs without them).  Its digest is the
SHA-256 of the bytes of out, lse, dq, dk, dv and the table's or slopes' gradient.  Digests hold on the
machine (and CPU kind) that wrote them: compare a tree with another on one machine, not machines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterator

import torch

import wavepe
import wavepe.ops as wo

# (name, B, H, H_kv, M, N, d, q_offset or None for N - M): prefill, GQA, decoding, odd sizes
SHAPES = [
    ("gqa", 1, 4, 2, 77, 77, 64, None),
    ("decode", 2, 4, 1, 1, 300, 128, None),
    ("offset", 1, 2, 2, 130, 200, 32, 40),
]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bf16": torch.bfloat16, "fp16": torch.float16}
ENCODINGS = ("nope", "wavelet", "alibi", "relative")
# extra settings, each on the first shape only: (name, wavelet_attention keyword arguments)
EXTRAS = [("window", {"window": 24}), ("softcap", {"softcap": 2.5}), ("noncausal", {"causal": False})]


def _inputs(b, h, h_kv, m, n, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, hh, length, d, generator=g, dtype=torch.float64).to(dtype)
               for hh, length in ((h, m), (h_kv, n), (h_kv, n)))
    go = torch.randn(b, h, m, d, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v, go


def _encoding_kwargs(pos_enc: str, d: int, h: int, dtype) -> tuple[dict, list[torch.Tensor]]:
    """(keyword arguments, the parameters whose gradients are digested)."""
    g = torch.Generator().manual_seed(7)
    if pos_enc == "wavelet":
        return {"config": wavepe.WaveletConfig.grid(d)}, []
    if pos_enc == "alibi":
        slopes = (torch.rand(h, generator=g, dtype=torch.float64) * 0.5).to(dtype).requires_grad_()
        return {"alibi_slopes": slopes}, [slopes]
    if pos_enc == "relative":
        table = torch.randn(41, d, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        return {"rel_table": (table, -20), "clamp": True}, [table]
    return {}, []


def cases() -> Iterator[tuple[str, dict]]:
    """(case id, what to run) for every case but the ISA."""
    for dname in DTYPES:
        for shape in SHAPES:
            for pos_enc in ENCODINGS:
                yield f"{shape[0]}/{dname}/{pos_enc}", {"shape": shape, "dtype": dname, "pos_enc": pos_enc, "extra": {}}
        for extra_name, extra in EXTRAS:
            for pos_enc in ("nope", "wavelet"):
                yield (f"{SHAPES[0][0]}/{dname}/{pos_enc}/{extra_name}",
                       {"shape": SHAPES[0], "dtype": dname, "pos_enc": pos_enc, "extra": extra})
        # packed documents (B = 1): lengths 30, 0, 47
        yield (f"packed/{dname}/wavelet", {"shape": ("packed", 1, 4, 2, 77, 77, 64, None), "dtype": dname,
                                           "pos_enc": "wavelet", "extra": {"cu_seqlens": [0, 30, 30, 77]}})


def digest(spec: dict) -> str:
    _, b, h, h_kv, m, n, d, off = spec["shape"]
    dtype = DTYPES[spec["dtype"]]
    q, k, v, go = _inputs(b, h, h_kv, m, n, d, dtype, seed=m * 1000 + n + d)
    kwargs, params = _encoding_kwargs(spec["pos_enc"], d, h, dtype)
    extra = dict(spec["extra"])
    if "cu_seqlens" in extra:
        extra["cu_seqlens"] = torch.tensor(extra["cu_seqlens"], dtype=torch.int64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse = wo.wavelet_attention(*leaves, pos_enc=spec["pos_enc"], q_offset=off, return_lse=True, **kwargs, **extra)
    grads = torch.autograd.grad((out * go).sum(), leaves + params)
    h256 = hashlib.sha256()
    for t in (out, lse, *grads):
        t = t.detach().contiguous()
        h256.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h256.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h256.hexdigest()


def all_digests(isas: list[str] | None = None, limit: int | None = None) -> dict[str, str]:
    """{"<isa>/<case id>": digest} for every case under every ISA (or the first ``limit`` cases)."""
    out = {}
    before = os.environ.get("WAVEPE_ISA")
    try:
        for isa in isas or list(wavepe.supported_isas()):
            os.environ["WAVEPE_ISA"] = isa
            for i, (cid, spec) in enumerate(cases()):
                if limit is not None and i >= limit:
                    break
                out[f"{isa}/{cid}"] = digest(spec)
    finally:
        if before is None:
            os.environ.pop("WAVEPE_ISA", None)
        else:
            os.environ["WAVEPE_ISA"] = before
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--write", metavar="FILE", help="write the digests of this tree to FILE (JSON)")
    which.add_argument("--check", metavar="FILE", help="compare this tree's digests with FILE's")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # results do not depend on it (units are thread-independent); the time does
    try:
        got = all_digests()
    finally:
        torch.set_num_threads(threads)
    machine = {"cpu_isa": wavepe.cpu_isa(), "isas": list(wavepe.supported_isas()), "torch": torch.__version__}
    if args.write:
        with open(args.write, "w") as f:
            json.dump({"machine": machine, "digests": got}, f, indent=1, sort_keys=True)
        print(f"{len(got)} digests ({', '.join(machine['isas'])}) written to {args.write}")
        return 0
    with open(args.check) as f:
        saved = json.load(f)
    if saved["machine"]["isas"] != machine["isas"]:
        print(f"written with ISAs {saved['machine']['isas']}, this machine runs {machine['isas']}: compare on one "
              "machine", file=sys.stderr)
        return 2
    want = saved["digests"]
    moved = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    for k in moved:
        print(f"moved: {k}")
    print(f"{len(got) - len(moved)} of {len(got)} cases bit-identical, {len(moved)} moved")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
