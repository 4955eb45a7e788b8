#!/usr/bin/env python3
"""What ptxas and the SASS of the shipped library say about the CUDA kernels, checked without a GPU.

    python3 .ci/check_cuda_kernels.py LIBRARY OBJECT_DIR ARCH...

Called by .ci/build_wheel.sh with the torch ops library inside the wheel, the folder its CUDA objects
were compiled into (``<source>.cu.o.log`` holds nvcc's output for ``<source>.cu.o``, with ptxas's
``-v`` report: the recipe compiles with -Xptxas -v) and the archs it was built for.  The checks:

* the library holds SASS (an ELF) for every arch and the PTX of recipe.shipped_ptx (``cuobjdump --list-elf``
  / ``--list-ptx``): GPUs with no SASS here (newer than the toolkit knows, sm_110) compile it at load time;

* every kernel of every source has 0 bytes of spill stores and loads, and the
  kernels of the main sources (attention forward and split-KV decoding,
  backward, relative bias: NO_LOCAL_MEMORY) no stack frame either, on every
  arch.  A spill in a tile kernel costs far more than the register it saves;
  the register budget is the kernel's __launch_bounds__ and tile sizes.
  (rope.cu's 40-byte frame is libdevice's double sincos keeping its
  argument reduction for huge angles in local memory, on the slow path only);
* the tensor-core kernels (the bf16/fp16 instances of the attention forward,
  which also serves split-KV decoding, and of the backward's dK/dV, dQ and dT
  kernels) hold HMMA instructions in the library's SASS on every arch, so a refactor
  that silently falls back to FMA fails here.  An sm_90a variant (wgmma)
  would have to hold HGMMA: TENSOR_CORE_RULES names the instruction per arch.

* the performance model's instruction mix (docs/CUDA.md, "The static model"): for every tensor-core
  kernel, the main loop -- the natural loop of its SASS control-flow graph that holds the most HMMA --
  and how many other instructions it holds per tensor-core instruction (a static count: every path of
  the loop body once).  An HMMA m16n8k16 keeps its scheduler's tensor pipe ~8 cycles, so a loop can
  stay tensor-bound only with a handful of other instructions per HMMA: FlashAttention-2's forward has
  about two; the targets (issue 64, sm_90) are <= 4 for the forward and <= 6 for the backward.  Today's
  kernels are far from them; MIX_CEILING holds each kernel's measured mix as a ceiling, so that a change
  which makes a main loop heavier fails here, and a kernel that reaches its target lowers its line.

* the model's shared-memory term: the bytes the main loop moves through shared memory per tensor-core
  instruction (ldmatrix, the lanes' loads and stores, cp.async's writes: smem_bytes), against the 256 an sm_90
  SM serves per HMMA at the tensor rate; SMEM_CEILING holds each tensor-core kernel's figure as a ceiling, and
  OTHER_LOOP_SMEM_CEILING the loops beside the main one where a table's band runs (the band's, the masked blocks').

The fp32/fp64 kernels use FMA by design (no TF32), and the relative-bias,
RoPE and ALiBi kernels are memory-bound element-wise loops: they are held to
the spill rule only.

Exit status 1 with one line per failure naming kernel and arch; a table of
registers, spills, stack and tensor-core instruction counts is printed either
way; exit status 3 when cuobjdump is missing.  Standard library only; needs c++filt and cuobjdump + nvdisasm (from the
CUDA toolkit, or the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

# kernels (demangled name, up to the template arguments) whose bf16/fp16 instances must use tensor cores
TENSOR_CORE_KERNELS = ("attn_fwd_kernel", "attn_fwd_band_kernel", "attn_fwd_tc_kernel", "attn_fwd_tc_wide_kernel",
                       "attn_bwd_dkdv_kernel", "attn_bwd_dkdv_tc_kernel", "attn_bwd_dkdv_tc_gone_kernel",
                       "attn_bwd_dkdv_tc_wide_kernel",
                       "attn_bwd_dq_kernel", "attn_bwd_dq_tc_kernel", "attn_bwd_dq_tc_vone_kernel",
                       "attn_bwd_dq_tc_wide_kernel", "attn_bwd_dq_tc_wide_alibi_kernel", "attn_bwd_dtable_kernel",
                       "attn_bwd_dtable_tc_kernel", "attn_bwd_dtable_tc_ksplit_kernel")
TENSOR_CORE_TYPES = ("__nv_bfloat16", "__half")
# sources whose kernels may not use local memory at all
NO_LOCAL_MEMORY = ("attention.cu", "attention_bwd.cu", "attention_bwd_dkdv_tc.cu", "relbias.cu")
# Known exceptions to the spill / local-memory rules, each with its reason.  An exception is (kernel, first template
# argument, arch); one that no longer applies fails the check, so that this list only shrinks.  None is left: the
# last, the fp64 general forward on sm_120 (head dim 128: 8 bytes with CUDA 13.0, 40-48 before split_key_blocks),
# went on 2026-11-30, when its cp.async flags became the kernel's locals (attn_fwd_cta) -- ptxas allocates it
# without spills since.
SPILL_EXEMPT: set[tuple[str, str, str]] = set()
# Instances compiled as stubs the host never launches (kernel, head dim, arch), each with its reason: they must hold
# no tensor-core instruction (one that does -- the instance built after all -- fails the check, so that this list only
# shrinks).  The wide dK/dV at head dim 128 spilled 12-68 bytes on sm_120 (CUDA 13.0, 2026-11-29); there the 16-key
# instance runs (wide_dkdv asks the device's compute capability; sm_120's 99 KiB would not hold it anyway).  (On
# sm_100 it is built since 2026-11-29, its phase 1 one m-tile a pass: no spill.)
# The dK/dV with dO in one buffer at head dim 64 spilled 16 bytes on sm_100 and 4-20 on sm_120 (CUDA 13.0,
# 2026-11-30): it runs on sm_86 / sm_89 (sm_80's SASS) only -- use_tc_dkdv_gone asks the compute capability; an sm_100
# SM holds three CTAs of the two-buffer instance, sm_120's one.
NOT_BUILT = {
    ("attn_bwd_dkdv_tc_wide_kernel", "128", "sm_120"),
    ("attn_bwd_dkdv_tc_gone_kernel", "64", "sm_100"), ("attn_bwd_dkdv_tc_gone_kernel", "64", "sm_120"),
}
# the SASS instruction a tensor-core kernel must hold, per arch (an sm_90a build would name HGMMA)
TENSOR_CORE_RULES = {"sm_80": "HMMA", "sm_90": "HMMA", "sm_90a": "HGMMA", "sm_100": "HMMA", "sm_120": "HMMA"}

# The main loops' mix (other instructions per tensor-core instruction, static) on sm_90: the issue's targets,
# and the ceilings: measured on the shipped SASS (CUDA 13.0.88, 2026-11-27) plus 0.5 (room for the compiler's
# scheduling, not for a heavier loop), by kernel and the template arguments after the type (head dim, tiles).
MIX_ARCH = "sm_90"
MIX_TARGET = {"attn_fwd_kernel": 4.0, "attn_fwd_band_kernel": 4.0, "attn_fwd_tc_kernel": 4.0, "attn_fwd_tc_wide_kernel": 4.0,
              "attn_bwd_dkdv_kernel": 6.0, "attn_bwd_dkdv_tc_kernel": 6.0, "attn_bwd_dkdv_tc_gone_kernel": 6.0,
              "attn_bwd_dkdv_tc_wide_kernel": 6.0,
              "attn_bwd_dq_kernel": 6.0,
              "attn_bwd_dq_tc_kernel": 6.0, "attn_bwd_dq_tc_vone_kernel": 6.0, "attn_bwd_dq_tc_wide_kernel": 6.0, "attn_bwd_dq_tc_wide_alibi_kernel": 6.0,
              "attn_bwd_dtable_kernel": 6.0,
              "attn_bwd_dtable_tc_kernel": 6.0, "attn_bwd_dtable_tc_ksplit_kernel": 6.0}
MIX_CEILING = {
    # the tensor-core forward meets its target: its ceilings are min(measured + 0.5, target)
    # (template arguments: head dim, then whether a GQA group's heads are packed as rows: decoding)
    ("attn_fwd_tc_kernel", "128, false"): 3.5, ("attn_fwd_tc_kernel", "128, true"): 3.5,
    ("attn_fwd_tc_kernel", "64, false"): 4.0, ("attn_fwd_tc_kernel", "64, true"): 4.0,
    # head dim 256: Q K^T's 16 steps unrolled by 4 (fully unrolled, ptxas spilled on sm_80), a loop inside the
    # main loop that the static count takes once: 4.8 static, 3.5 executed (576 instructions a block for 128 HMMA)
    ("attn_fwd_tc_kernel", "256, false"): 5.3, ("attn_fwd_tc_kernel", "256, true"): 5.3,
    # the wide instance (32 rows a warp, blocks of 32 keys: head_dim 128 without a table): 3.3 -- the online
    # softmax's O rescale (128 accumulators a lane) every 32 keys, against 64 at 16 rows a warp
    # (template arguments: head dim, then whether it runs the band split's first partial -- a table's call's
    # interior blocks beyond the band: band_split -- whose loop also steps over the band, [ib, bb) then [be, ie))
    ("attn_fwd_tc_wide_kernel", "128, false"): 3.8, ("attn_fwd_tc_wide_kernel", "128, true"): 4.0,
    # (head dim 64: blocks of 64 keys, 3.8 -- a block's softmax and O rescale over 128 HMMA as at 128, Q's
    # fragments read for 8 HMMA each, not 4; its ceiling the target; the band split's partial 4.2, its ceiling
    # measured + 0.5 -- a call's blocks beyond the band, which the 16-row instance ran at 4.0 and 333 bytes)
    ("attn_fwd_tc_wide_kernel", "64, false"): 4.0, ("attn_fwd_tc_wide_kernel", "64, true"): 4.7,
    # the tensor-core dK/dV and dQ too (head dim, then whether the call has a relative table: a kernel of its
    # own, so that the others keep their registers)
    ("attn_bwd_dkdv_tc_kernel", "128, false"): 3.7, ("attn_bwd_dkdv_tc_kernel", "64, false"): 4.4,
    ("attn_bwd_dkdv_tc_kernel", "128, true"): 3.65, ("attn_bwd_dkdv_tc_kernel", "64, true"): 4.4,
    # the wide dK/dV (32 keys a warp in 8: head dim, then the kind of its interior blocks -- 1 plain, 2 ALiBi, 3
    # soft-capped --, an instance each: registers): a block's S^T, dP^T (128 HMMA a warp at 128), their P^T and dS^T
    # stored, dV or dK (128), two barriers
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 1"): 2.7, ("attn_bwd_dkdv_tc_wide_kernel", "128, 2"): 3.05,
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 3"): 3.8, ("attn_bwd_dkdv_tc_wide_kernel", "64, 1"): 4.3,
    ("attn_bwd_dkdv_tc_wide_kernel", "64, 2"): 4.95, ("attn_bwd_dkdv_tc_wide_kernel", "64, 3"): 6.5,
    ("attn_bwd_dq_tc_kernel", "128, false"): 2.75, ("attn_bwd_dq_tc_kernel", "64, false"): 3.6,
    ("attn_bwd_dq_tc_kernel", "128, true"): 3.1, ("attn_bwd_dq_tc_kernel", "64, true"): 3.65,
    # the wide dQ (32 rows a warp, no table): S's and dP's 16-column steps a loop unrolled by 2 inside the main loop,
    # counted once -- executed 2.2 other instructions per HMMA at head dim 128 (192 HMMA a block of 32 keys), 3.4 at
    # 64 (the same over 64 keys, the row statistics read a chunk of 32)
    # (head dim, then the band split's first partial, as the wide forward's: 3.55 and 4.7)
    ("attn_bwd_dq_tc_wide_kernel", "128, false"): 3.9, ("attn_bwd_dq_tc_wide_kernel", "64, false"): 5.2,
    ("attn_bwd_dq_tc_wide_kernel", "128, true"): 4.05, ("attn_bwd_dq_tc_wide_kernel", "64, true"): 5.2,
    # its ALiBi instance (fixed slopes, no soft-cap; 2026-11-29): the distances' |.| and the slope's FFMA a score; at
    # 128 S's and dP's 16-column steps a loop of one (unrolled by 2, ptxas spilled): static, 80 of its 96 HMMA
    ("attn_bwd_dq_tc_wide_alibi_kernel", "128"): 5.5, ("attn_bwd_dq_tc_wide_alibi_kernel", "64"): 6.0,
    # (head dim 256: S's and dP's 16 steps a loop unrolled by 4, counted once, as the forward's at 256; executed,
    # dQ's main loop issues 2.9 other instructions per HMMA, dK/dV's 4.05 -- its CTAs recompute S and dP for each
    # of the two column slices of dK and dV)
    ("attn_bwd_dq_tc_kernel", "256, false"): 4.1, ("attn_bwd_dq_tc_kernel", "256, true"): 4.0,
    # its instance with V in one buffer (99 KiB devices, no table; sm_90 never runs it): a second barrier a block
    # and V's copies apart from K's
    ("attn_bwd_dq_tc_vone_kernel", "256"): 4.3,
    # ... at head dim 64 (100 KiB SMs, no table; sm_90 never runs it): a block's 64 keys in one chunk, 3.4 statically
    # where the two-buffer instance's two chunks of 32 take 3.2 (2026-11-30)
    ("attn_bwd_dq_tc_vone_kernel", "64"): 3.9,
    ("attn_bwd_dkdv_tc_kernel", "256, false"): 6.45, ("attn_bwd_dkdv_tc_kernel", "256, true"): 6.45,
    # its instance with dO in one buffer (99 KiB devices, no table; sm_90 never runs it): a second barrier a block
    # and dO's copies apart from Q's (from the address its first stage found: DoutRows) -- 19 instructions more a
    # block, ~4.25 executed where the two buffers' take 4.05 (6.3 statically; 7.3, 67 more, deriving it twice)
    ("attn_bwd_dkdv_tc_gone_kernel", "256"): 6.8,
    # ... at head dim 64 (100 KiB SMs of sm_86 / sm_89, no table; sm_90 never runs it): a block's 64 queries in one
    # chunk, 3.9 statically where the two-buffer instance's two chunks take 3.9 (2026-11-30)
    ("attn_bwd_dkdv_tc_gone_kernel", "64"): 4.4,
    # the learned table's dT on the tensor cores (head dim, then whether the call has a soft-cap: an instance
    # each): the interior tiles' loop, a tile's dS recomputed (S, the window's bias, dP: 224 HMMA at 128) and
    # dT_win += H^T Q (64), per tile also the copies, the row ranges and three barriers; the soft-cap adds a
    # tanh per score (5.6 at 128), at head dim 64 the same per-tile work over 176 HMMA (8.3 capped)
    ("attn_bwd_dtable_tc_kernel", "128, false"): 4.6, ("attn_bwd_dtable_tc_kernel", "128, true"): 6.0,
    ("attn_bwd_dtable_tc_kernel", "64, false"): 6.0, ("attn_bwd_dtable_tc_kernel", "64, true"): 8.8,
    # its instance with K in two halves (99 KiB devices; sm_90 never runs it): a barrier and K's second copy more a
    # tile
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): 4.6, ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): 6.1,
    ("attn_fwd_kernel", "256, 32, 32"): 27.5, ("attn_fwd_kernel", "128, 64, 32"): 33.3,
    # (the general forward's band split partial at head dim 256 -- the masked and the band's blocks of a table's call
    # where the tensor-core CTA fits without the window only, 99 KiB devices: K / V single-buffered there)
    ("attn_fwd_band_kernel", ""): 27.8,
    ("attn_fwd_kernel", "64, 64, 64"): 60.3,
    ("attn_bwd_dkdv_kernel", "256, 16, 2"): 12.8, ("attn_bwd_dkdv_kernel", "128, 32, 1"): 15.7,
    ("attn_bwd_dkdv_kernel", "64, 64, 1"): 29.9,
    # (at 256 also the band split's second partial on 99 KiB devices: 15.4 statically since its step over the first
    # partial's blocks, 17.0 before -- ptxas shaped the loop anew, the same work a block)
    ("attn_bwd_dq_kernel", "256, 16, 1"): 15.9, ("attn_bwd_dq_kernel", "128, 32, 1"): 19.6,
    ("attn_bwd_dq_kernel", "64, 64, 1"): 34.7,
    ("attn_bwd_dtable_kernel", "256, 16, 2, false"): 17.0, ("attn_bwd_dtable_kernel", "256, 16, 2, true"): 18.2,
    ("attn_bwd_dtable_kernel", "128, 32, 1, false"): 18.8, ("attn_bwd_dtable_kernel", "128, 32, 1, true"): 21.2,
    ("attn_bwd_dtable_kernel", "64, 64, 1, false"): 26.6, ("attn_bwd_dtable_kernel", "64, 64, 1, true"): 33.9,
}

# The shared-memory term of the model (docs/CUDA.md): an sm_90 SM's shared memory serves 128 bytes a cycle, and
# its 4 schedulers issue at most an HMMA m16n8k16 each every ~8 cycles (the mix's assumption): 0.5 an SM a cycle.
# A loop whose instructions move more than 128 * 8 / 4 = 256 bytes of shared memory per HMMA (ldmatrix's
# fragments, the lanes' loads and stores, cp.async's writes: smem_bytes, every lane counted) is bound by shared
# memory, at most 256 / its bytes of the tensor rate; FlashAttention-2's forward at head dim 128 (4 warps of 32
# rows: each K and V fragment feeds two HMMA, Q read by ldmatrix) moves ~190 by the same count.  The main loops'
# bytes per HMMA (static: every instruction of the loop body once, as the mix), measured on the shipped SASS (CUDA
# 13.0, 2026-11-28; bf16 and fp16 alike) + 2 %, are ceilings: a change that moves more bytes fails here.
SMEM_BYTES_A_CYCLE = {"sm_90": 128}
HMMA_CYCLES, SCHEDULERS = 8, 4
SMEM_CEILING = {
    # a warp of 16 query rows: every K and V fragment (256 bytes an HMMA) feeds one HMMA; cp.async's K and V
    # 64 more (a 64-row CTA)
    ("attn_fwd_tc_kernel", "128, false"): 333, ("attn_fwd_tc_kernel", "128, true"): 333,
    ("attn_fwd_tc_kernel", "64, false"): 333, ("attn_fwd_tc_kernel", "64, true"): 333,
    ("attn_fwd_tc_kernel", "256, false"): 407, ("attn_fwd_tc_kernel", "256, true"): 407,
    # the wide instance (32 rows a warp): K and V fragments each feed two HMMA, Q's read at each step -- K 128,
    # Q 128 an HMMA of Q K^T, V 128 of P V, the 128-row CTA's copies 32: 230, under the line
    ("attn_fwd_tc_wide_kernel", "128, false"): 235, ("attn_fwd_tc_wide_kernel", "128, true"): 235,
    # (head dim 64, blocks of 64 keys: Q 64 an HMMA of Q K^T, K 128, V 128, the copies 32: 198)
    ("attn_fwd_tc_wide_kernel", "64, false"): 202, ("attn_fwd_tc_wide_kernel", "64, true"): 202,
    ("attn_bwd_dkdv_tc_kernel", "128, false"): 387, ("attn_bwd_dkdv_tc_kernel", "128, true"): 387,
    ("attn_bwd_dkdv_tc_kernel", "64, false"): 371, ("attn_bwd_dkdv_tc_kernel", "64, true"): 371,
    ("attn_bwd_dkdv_tc_kernel", "256, false"): 487, ("attn_bwd_dkdv_tc_kernel", "256, true"): 487,
    ("attn_bwd_dkdv_tc_gone_kernel", "256"): 495, ("attn_bwd_dkdv_tc_gone_kernel", "64"): 375,
    # the wide dK/dV (32 keys x 32 queries a warp for S^T and dP^T: K 128, Q 128 an HMMA, V and dO the same; 32 keys x
    # D for dV += P^T dO, dK += dS^T Q: P^T's fragments 64, dO's 128 at 128 -- 192 at 64; the P^T, dS^T stores, the
    # copies, the rows' statistics): 256 at 128, at the line; 303 at 64
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 1"): 261, ("attn_bwd_dkdv_tc_wide_kernel", "128, 2"): 263,
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 3"): 261, ("attn_bwd_dkdv_tc_wide_kernel", "64, 1"): 309,
    ("attn_bwd_dkdv_tc_wide_kernel", "64, 2"): 315, ("attn_bwd_dkdv_tc_wide_kernel", "64, 3"): 309,
    ("attn_bwd_dq_tc_kernel", "128, false"): 396, ("attn_bwd_dq_tc_kernel", "128, true"): 396,
    ("attn_bwd_dq_tc_kernel", "64, false"): 396, ("attn_bwd_dq_tc_kernel", "64, true"): 396,
    ("attn_bwd_dq_tc_kernel", "256, false"): 444, ("attn_bwd_dq_tc_kernel", "256, true"): 444,
    ("attn_bwd_dq_tc_vone_kernel", "256"): 452, ("attn_bwd_dq_tc_vone_kernel", "64"): 358,
    # the wide dQ (32 rows a warp): each K and V fragment of S and dP feeds two HMMA (K 128, Q 128 an HMMA of S, V
    # and dO the same of dP: 256), each K fragment of dQ += dS K two (128), the copies ~21: 233 (static) under the
    # line, by a margin of 10 %
    ("attn_bwd_dq_tc_wide_kernel", "128, false"): 238, ("attn_bwd_dq_tc_wide_kernel", "64, false"): 252,
    ("attn_bwd_dq_tc_wide_kernel", "128, true"): 238, ("attn_bwd_dq_tc_wide_kernel", "64, true"): 252,
    ("attn_bwd_dq_tc_wide_alibi_kernel", "128"): 235, ("attn_bwd_dq_tc_wide_alibi_kernel", "64"): 252,
    ("attn_bwd_dtable_tc_kernel", "128, false"): 377, ("attn_bwd_dtable_tc_kernel", "128, true"): 377,
    ("attn_bwd_dtable_tc_kernel", "64, false"): 344, ("attn_bwd_dtable_tc_kernel", "64, true"): 344,
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): 379, ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): 379,
}


def smem_per_hmma(r: dict) -> float | None:
    """Bytes of shared memory the main loop moves per tensor-core instruction (None: no tensor-core loop)."""
    return r.get("loop_smem", 0) / r["loop_tc"] if r.get("loop_tc") else None


def smem_bound(bytes_per_hmma: float, arch: str = MIX_ARCH) -> float:
    """The fraction of the tensor rate shared memory lets a loop moving ``bytes_per_hmma`` reach (<= 1)."""
    return min(1.0, SMEM_BYTES_A_CYCLE[arch] * HMMA_CYCLES / SCHEDULERS / bytes_per_hmma)


# The occupancy model (docs/CUDA.md): for the kernels whose CTA shape is fixed at compile time, the
# threads and dynamic shared memory of one CTA (the launcher's figures; tests/test_cuda_emu.py checks
# them against wavepe_cuda_attention_fwd_smem_bytes), from which, with ptxas's registers, the CTAs and
# warps an SM holds on MIX_ARCH, and the warps each must reach (FlashAttention-2's forward runs 8).
# sm_90 (H100/H200): 65,536 registers per SM, allocated per warp in units of 256 (8 per thread); 228 KiB
# of shared memory per SM, of which each CTA also takes 1 KiB reserved; at most 64 warps and 32 CTAs.
# The 100 KiB SMs of the consumer and workstation GPUs (RTX 30xx/40xx/50xx, A10, L4, L40S: sm_86, sm_89, sm_120):
# the same registers, 100 KiB of shared memory, at most 48 warps and 16 CTAs (sm_86; more CTAs on the others).
SM_LIMITS = {"sm_90": {"regs": 65536, "smem": 228 * 1024, "cta_reserved": 1024, "warps": 64, "ctas": 32},
             "sm_86": {"regs": 65536, "smem": 100 * 1024, "cta_reserved": 1024, "warps": 48, "ctas": 16}}
CTA_SHAPE = {  # (kernel, template arguments after the type): (threads, the most dynamic shared memory: a table)
    ("attn_fwd_tc_wide_kernel", "128, false"): (128, 54304), ("attn_fwd_tc_wide_kernel", "64, false"): (128, 38976),
    ("attn_fwd_tc_wide_kernel", "128, true"): (128, 54304), ("attn_fwd_tc_wide_kernel", "64, true"): (128, 38976),
    ("attn_fwd_tc_kernel", "128, false"): (128, 88128), ("attn_fwd_tc_kernel", "128, true"): (128, 88128),
    ("attn_fwd_tc_kernel", "64, false"): (128, 74880), ("attn_fwd_tc_kernel", "64, true"): (128, 74880),
    ("attn_fwd_tc_kernel", "256, false"): (128, 119328), ("attn_fwd_tc_kernel", "256, true"): (128, 119328),
    ("attn_bwd_dkdv_tc_kernel", "128, false"): (128, 71312), ("attn_bwd_dkdv_tc_kernel", "64, false"): (128, 57488),
    ("attn_bwd_dkdv_tc_kernel", "128, true"): (128, 97424), ("attn_bwd_dkdv_tc_kernel", "64, true"): (128, 75920),
    ("attn_bwd_dq_tc_kernel", "128, false"): (128, 70720), ("attn_bwd_dq_tc_kernel", "64, false"): (128, 56448),
    ("attn_bwd_dq_tc_kernel", "128, true"): (128, 96832), ("attn_bwd_dq_tc_kernel", "64, true"): (128, 74880),
    ("attn_bwd_dq_tc_kernel", "256, false"): (128, 102432), ("attn_bwd_dq_tc_kernel", "256, true"): (128, 144672),
    ("attn_bwd_dq_tc_wide_kernel", "128, false"): (128, 107600), ("attn_bwd_dq_tc_wide_kernel", "64, false"): (128, 76944),
    ("attn_bwd_dq_tc_wide_kernel", "128, true"): (128, 107600), ("attn_bwd_dq_tc_wide_kernel", "64, true"): (128, 76944),
    ("attn_bwd_dq_tc_wide_alibi_kernel", "128"): (128, 107600), ("attn_bwd_dq_tc_wide_alibi_kernel", "64"): (128, 76944),
    ("attn_bwd_dkdv_tc_kernel", "256, false"): (128, 102800), ("attn_bwd_dkdv_tc_kernel", "256, true"): (128, 145040),
    **{("attn_bwd_dkdv_tc_wide_kernel", f"{d}, {k}"): (256, 179432 if d == 128 else 113896) for d in (64, 128)
       for k in (1, 2, 3)},
    ("attn_bwd_dtable_tc_kernel", "128, false"): (128, 105472), ("attn_bwd_dtable_tc_kernel", "128, true"): (128, 105472),
    ("attn_bwd_dtable_tc_kernel", "64, false"): (128, 73728), ("attn_bwd_dtable_tc_kernel", "64, true"): (128, 73728),
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): (128, 96768),
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): (128, 96768),
    ("attn_bwd_dq_tc_vone_kernel", "256"): (128, 93984), ("attn_bwd_dkdv_tc_gone_kernel", "256"): (128, 94352),
    ("attn_bwd_dkdv_tc_gone_kernel", "64"): (128, 48272), ("attn_bwd_dq_tc_vone_kernel", "64"): (128, 47232),
}
WARPS_TARGET = {"attn_fwd_tc_kernel": 8, "attn_fwd_tc_wide_kernel": 8, "attn_bwd_dkdv_tc_kernel": 8,
                "attn_bwd_dkdv_tc_wide_kernel": 8, "attn_bwd_dq_tc_kernel": 8,
                "attn_bwd_dq_tc_wide_kernel": 8, "attn_bwd_dq_tc_wide_alibi_kernel": 8, "attn_bwd_dtable_tc_kernel": 8,
                "attn_bwd_dtable_tc_ksplit_kernel": 8, "attn_bwd_dq_tc_vone_kernel": 8, "attn_bwd_dkdv_tc_gone_kernel": 8}
# Where a CTA_SHAPE line's figure (the most shared memory: a table's) is held to fewer warps, and why: at head dim
# 256 the forward's table window (96 rows of 528 bytes) takes the CTA to 116.5 KiB, one an SM (4 warps); without a
# table (67 KiB) two fit, 8 warps (tests/test_cuda_emu.py checks both figures against the launcher's) -- as do the
# blocks beyond a table's band, which the band split launches without the window (attention.cu, band_split); the dQ's and
# dK/dV's table instances at 256 (the window's 80 rows beside the tiles: 141.3 / 141.6 KiB) one, their others two (the
# backward's band split, bwd_band_split in attention_bwd.cu, runs the blocks beyond the band on those).
# (The learned table's dT reaches two at both head dims: 103 KiB at 128, H in dO's place.)
# On the 100 KiB SMs, the table-free forward's CTA the launcher takes there (attention.cu, wide_holds_sm: the wide
# one where an SM holds as many of it as of the 16-row one) and the backward's at head dim 64 (attention_bwd.cu,
# use_tc_dkdv_gone / use_tc_dq_vone: dO / V in one buffer), held to 8 warps with the registers of the SASS those GPUs
# run: sm_80's (sm_86 and sm_89 run it) and sm_120's.  (With a table, or the backward at 128, their CTAs hold one an
# SM there: docs/CUDA.md, "Occupancy".)
SM_100KIB_SHAPE = {("attn_fwd_tc_kernel", "128, false"): (128, 35904), ("attn_fwd_tc_wide_kernel", "64, false"): (128, 38976),
                   ("attn_bwd_dkdv_tc_gone_kernel", "64"): (128, 48272), ("attn_bwd_dq_tc_vone_kernel", "64"): (128, 47232)}
SM_100KIB_ARCHS = ("sm_80", "sm_120")
WARPS_TARGET_BY_SHAPE = {("attn_fwd_tc_kernel", "256, false"): 4, ("attn_fwd_tc_kernel", "256, true"): 4,
                         ("attn_bwd_dq_tc_kernel", "256, true"): 4, ("attn_bwd_dkdv_tc_kernel", "256, true"): 4}


def occupancy(regs: int, threads: int, smem: int, arch: str) -> tuple[int, int]:
    """(CTAs, warps) per SM of a kernel using `regs` registers a thread, `threads` a CTA and `smem` bytes of
    shared memory, by the registers, the shared memory and the SM's warp and CTA limits."""
    lim = SM_LIMITS[arch]
    warps = -(-threads // 32)
    per_warp = -(-regs // 8) * 8 * 32
    by_regs = (lim["regs"] // per_warp) // warps if per_warp else lim["ctas"]
    by_smem = lim["smem"] // (smem + lim["cta_reserved"])
    ctas = min(by_regs, by_smem, lim["warps"] // warps, lim["ctas"])
    return ctas, ctas * warps


# A kernel's other outermost loops holding tensor-core instructions (tensor_loops), lightest first, each
# with its ceiling: measured (sm_90, CUDA 13) + 0.5.  attn_fwd_tc_kernel: the interior blocks in the
# table's band (the bias on the tensor cores; about 1.9k / 64 blocks a query block with the default
# wavelet grid), the interior blocks with ALiBi (not in the packed decoding instances: ALiBi is never
# packed), the soft-capped interior blocks without and with the table's bias, then the blocks with
# masks or padding (the causal diagonal: O(1) a query block), beside the main loop's O(L / 64) unmasked
# blocks without bias.
# (2026-11-28: the masked loops' P V / dS K take only the 16-key steps up to the last key some row of the warp
# sees, and check only those steps' band rows for inf/NaN -- on the causal diagonal warp w of 4 skips 3 - w of 4 steps and
# reads <= 15 rows, not up to 63: executed, less; the static count, every path once, up to 0.4 more: the
# ceilings of the masked loops that passed theirs moved with it, to measured + 0.5)
# The copies' loops of each tensor-core kernel on sm_90 (copy_cost: instructions per 16-byte cp.async, each loop's
# body once, summed over the kernel's loops that copy), a ceiling at measured + 2 % (2026-11-29, CUDA 13.0): a copy
# moved to a heavier loader -- the general load_tile_async costs 57-72 instructions a chunk, load_tile_rows_async
# 36-51, load_window_async 21-34 -- or a copy loop added fails CI.  The mix cannot see them (an inner loop counts
# once, whatever it runs): a band block's window at head_dim 128 by the general loader cost as many instructions as
# its products and softmax.
COPY_COST_CEILING = {
    ("attn_bwd_dkdv_tc_kernel", "128, false"): 308, ("attn_bwd_dkdv_tc_kernel", "128, true"): 502,
    ("attn_bwd_dkdv_tc_kernel", "256, false"): 308, ("attn_bwd_dkdv_tc_kernel", "256, true"): 502,
    ("attn_bwd_dkdv_tc_gone_kernel", "256"): 301, ("attn_bwd_dkdv_tc_gone_kernel", "64"): 298,
    ("attn_bwd_dkdv_tc_kernel", "64, false"): 324, ("attn_bwd_dkdv_tc_kernel", "64, true"): 502,
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 1"): 286, ("attn_bwd_dkdv_tc_wide_kernel", "128, 2"): 286,
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 3"): 288, ("attn_bwd_dkdv_tc_wide_kernel", "64, 1"): 288,
    ("attn_bwd_dkdv_tc_wide_kernel", "64, 2"): 288, ("attn_bwd_dkdv_tc_wide_kernel", "64, 3"): 286,
    ("attn_bwd_dq_tc_kernel", "128, false"): 375, ("attn_bwd_dq_tc_kernel", "128, true"): 556,
    ("attn_bwd_dq_tc_kernel", "256, false"): 385, ("attn_bwd_dq_tc_kernel", "256, true"): 516,
    ("attn_bwd_dq_tc_vone_kernel", "256"): 369, ("attn_bwd_dq_tc_vone_kernel", "64"): 369,
    ("attn_bwd_dq_tc_kernel", "64, false"): 373, ("attn_bwd_dq_tc_kernel", "64, true"): 559,
    ("attn_bwd_dq_tc_wide_alibi_kernel", "128"): 335, ("attn_bwd_dq_tc_wide_alibi_kernel", "64"): 333,
    ("attn_bwd_dq_tc_wide_kernel", "128, false"): 333, ("attn_bwd_dq_tc_wide_kernel", "128, true"): 108,
    ("attn_bwd_dq_tc_wide_kernel", "64, false"): 455, ("attn_bwd_dq_tc_wide_kernel", "64, true"): 108,
    ("attn_bwd_dtable_tc_kernel", "128, false"): 242, ("attn_bwd_dtable_tc_kernel", "128, true"): 242,
    ("attn_bwd_dtable_tc_kernel", "64, false"): 245, ("attn_bwd_dtable_tc_kernel", "64, true"): 245,
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): 290, ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): 290,
    ("attn_fwd_tc_kernel", "128, false"): 352, ("attn_fwd_tc_kernel", "128, true"): 348,
    ("attn_fwd_tc_kernel", "256, false"): 357, ("attn_fwd_tc_kernel", "256, true"): 351,
    ("attn_fwd_tc_kernel", "64, false"): 295, ("attn_fwd_tc_kernel", "64, true"): 290,
    ("attn_fwd_tc_wide_kernel", "128, false"): 206, ("attn_fwd_tc_wide_kernel", "128, true"): 80,
    ("attn_fwd_tc_wide_kernel", "64, false"): 208, ("attn_fwd_tc_wide_kernel", "64, true"): 81,
}

OTHER_LOOP_CEILING = {
    # (2026-11-29: a block's two halves of the window's G share a pair of 8-column tiles, computed once -- the
    # band's, soft-capped band's and masked loops hold fewer HMMA and fewer other instructions, their ratio a
    # little higher: the masked loops' ceilings moved to measured + 0.5; 18.0 / 30.5 / 26.9 before; later that day at
    # head dim 128 the band loop's blocks take a pair from the previous block too -- 16 HMMA fewer executed, but
    # statically both paths count: 3.63 where it was 3.48, 4.87 soft-capped, under the ceilings; then the band loop's
    # window a ring -- half a window copied a block from the second on, by a copy loop of its own beside the whole
    # window's, both counted once, and the ring's row arithmetic: the band 4.08, soft-capped 5.32, now heavier than
    # ALiBi's loop (3.87), whose ceiling comes first: each at measured + 0.5)
    ("attn_fwd_tc_kernel", "128, false"): (4.4, 4.6, 5.55, 5.85, 19.4),
    # (the packed heads' masked loop: since 2026-11-29 the bias by shuffles, and the window pair no score of one
    # position reads -- its rows all at one position -- no longer computed: 3,911 instructions for 192 HMMA where
    # it was 4,046 for 208, a higher ratio for less work; at measured + 0.5)
    ("attn_fwd_tc_kernel", "128, true"): (3.95, 5.15, 5.55, 19.9),
    ("attn_fwd_tc_kernel", "64, false"): (5.05, 6.0, 8.0, 8.45, 31.95),
    ("attn_fwd_tc_kernel", "64, true"): (5.1, 7.65, 8.45, 31.95),
    # (head dim 256: static counts, each Q K^T / window loop of 4 steps inside taken once: see MIX_CEILING; since
    # 2026-11-29 the band loop's window a ring there too -- 32 of its 96 rows copied a block from the second on, by a
    # copy loop of its own beside the whole window's, both counted once: the band 8.49, soft-capped 9.74, packed
    # 8.26 / 7.01, past their ceilings of before (7.6, 9.3, 7.7, 6.9), now at measured + 0.5; executed, 16 fewer
    # 16-byte copies a thread a band block, ~25 instructions each)
    ("attn_fwd_tc_kernel", "256, false"): (6.1, 6.9, 9.0, 10.25, 28.85),
    ("attn_fwd_tc_kernel", "256, true"): (6.5, 7.55, 8.8, 28.9),
    # the wide instance: ALiBi's interior blocks, the soft-capped ones, the masked ones (their loop holds two paths,
    # each counted once: the prefix blocks' -- the causal diagonal: both m-tiles as an interior block, the keys
    # past a row's last -inf by selection -- and the others', each m-tile's S, masks, softmax and P V in turn: the
    # code twice; 42.4 / 46.4 before the prefix blocks); the band split's partial, the soft-capped ones
    ("attn_fwd_tc_wide_kernel", "128, false"): (4.75, 5.8, 20.7), ("attn_fwd_tc_wide_kernel", "64, false"): (6.0, 8.3, 24.85),
    ("attn_fwd_tc_wide_kernel", "128, true"): (6.1,), ("attn_fwd_tc_wide_kernel", "64, true"): (8.7,),
    # attn_bwd_dkdv_tc_kernel without a table: the interior query blocks with ALiBi, the soft-capped ones,
    # then the masked ones (the causal diagonal, window and document edges, padding: O(1) a key block),
    # beside the main loop's O(L / BM) interior blocks without bias
    ("attn_bwd_dkdv_tc_kernel", "128, false"): (3.8, 4.8, 13.8),
    ("attn_bwd_dkdv_tc_kernel", "64, false"): (5.05, 6.65, 22.05),
    # with a table (lightest first): the band's blocks (G = Q T_win^T on the tensor cores: about 1.9k / BM
    # query blocks a key block with the default wavelet grid), the soft-capped ones in and beyond the band,
    # then the masked ones with the bias where their window meets the table
    # (at head dim 128 one chunk of 32 query columns a block on sm_90, as the table-free instance's; two of 16 on
    # sm_100 / sm_120, for registers; 2026-11-29, before: 6.0, 7.4, 8.5, 20.9 with the 16-column chunks)
    # (later that day the window a ring: the next query block's window copied BM rows, not BM + BN -- a copy loop of
    # its own beside the whole window's, both counted once, and the ring's row arithmetic in G's jobs: the band,
    # soft-capped band and masked loops 0.6-0.7 (128, 64) and 1.8-3.1 (256) heavier statically, each at measured +
    # 0.5; executed, 8 / 4 / 16 fewer 16-byte copies a thread a band block at 128 / 64 / 256, ~25 instructions each)
    # (later still, 2026-11-29: each warp its own G^T = T_w Q^T in registers, skewed into S^T by shuffles --
    # add_transposed_bias --, where the CTA's G went through shared memory: its products a loop not unrolled at 128,
    # unrolled by 2 at 64 -- fully, ptxas spilled --, which the static count takes once: the band loops 5.8 / 6.9
    # at 128 statically, 4.9 / 5.6 executed (1,137 instructions a band block for 192 HMMA, where G's 995 took 168 at
    # 4.9); at 64 6.5 / 8.3, 5.7 executed (1,287 for 192, G's 1,239 for 168 at 6.4); the masked loops lighter)
    ("attn_bwd_dkdv_tc_kernel", "128, true"): (4.75, 6.35, 7.4, 16.15),
    ("attn_bwd_dkdv_tc_kernel", "64, true"): (6.6, 7.05, 8.85, 21.4),
    # (head dim 256: static counts, S's and dP's loops of 4 steps inside taken once)
    ("attn_bwd_dkdv_tc_kernel", "256, false"): (7.35, 8.0, 22.35),
    ("attn_bwd_dkdv_tc_gone_kernel", "256"): (8.65, 9.4, 22.95),
    ("attn_bwd_dkdv_tc_gone_kernel", "64"): (5.0, 6.6, 22.9),
    ("attn_bwd_dkdv_tc_kernel", "256, true"): (8.0, 9.65, 10.8, 23.5),
    # the wide dK/dV: its masked blocks (each whole: dkdv_probs' selection; soft-capped in the soft-cap's instance)
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 1"): (6.3,), ("attn_bwd_dkdv_tc_wide_kernel", "128, 2"): (6.3,),
    ("attn_bwd_dkdv_tc_wide_kernel", "128, 3"): (8.6,), ("attn_bwd_dkdv_tc_wide_kernel", "64, 1"): (11.65,),
    ("attn_bwd_dkdv_tc_wide_kernel", "64, 2"): (11.65,), ("attn_bwd_dkdv_tc_wide_kernel", "64, 3"): (16.1,),
    # attn_bwd_dq_tc_kernel: the same for the key blocks of a query block (with a table: the band's blocks,
    # which also take dQ += H T_win, before the soft-capped ones)
    ("attn_bwd_dq_tc_kernel", "128, false"): (3.3, 4.85, 25.5), ("attn_bwd_dq_tc_kernel", "64, false"): (4.75, 8.0, 44.6),
    # (2026-11-29: the band's window a ring at head dim 64 / 128 -- a third / half of it copied a block from the
    # second on, by a copy loop of its own beside the whole window's, both counted once, and the ring's row
    # arithmetic: the band loops 3.03 -> 3.65 / 4.3 -> 5.05, soft-capped 4.16 -> 4.76 / 6.63 -> 7.38; executed,
    # ~8 / ~4 fewer 16-byte copies a thread a block, ~25 instructions each: measured + 0.5)
    # (later still: dS reaches dQ through the window by shuffles, H's A fragments built in registers -- shuffles,
    # selections and byte permutations where stores, a zeroing and ldmatrix were: the band loop at 128 985
    # instructions where it was 914, 4.13; at 64 1,211 where 1,094, 5.58 (its loops' order changed: the soft-capped
    # band now after the soft-capped beyond it); the band's loops at measured + 0.5, fewer bytes an HMMA below)
    ("attn_bwd_dq_tc_kernel", "128, true"): (4.65, 4.95, 5.75, 16.05),
    ("attn_bwd_dq_tc_kernel", "64, true"): (6.1, 7.9, 8.0, 27.55),
    ("attn_bwd_dq_tc_kernel", "256, false"): (4.8, 6.3, 41.8),
    ("attn_bwd_dq_tc_vone_kernel", "256"): (4.9, 6.4, 41.5), ("attn_bwd_dq_tc_vone_kernel", "64"): (4.8, 8.2, 39.8),
    ("attn_bwd_dq_tc_kernel", "256, true"): (4.35, 5.2, 6.2, 19.1),
    # the wide dQ (never ALiBi): the soft-capped interior blocks, (at head dim 64) the prefix blocks -- the causal
    # diagonal, both m-tiles as an interior block with dS past a row's last key 0 --, the masked ones (each m-tile in
    # turn: the code twice, counted statically; 43.0 at 64 before the prefix blocks); the band split's partial, the
    # soft-capped ones
    ("attn_bwd_dq_tc_wide_kernel", "128, false"): (8.3, 24.0),
    ("attn_bwd_dq_tc_wide_kernel", "64, false"): (11.6, 16.5, 38.8),
    ("attn_bwd_dq_tc_wide_kernel", "128, true"): (8.4,), ("attn_bwd_dq_tc_wide_kernel", "64, true"): (11.65,),
    # its ALiBi instance: the masked blocks (no prefix blocks at 64)
    ("attn_bwd_dq_tc_wide_alibi_kernel", "128"): (21.6,), ("attn_bwd_dq_tc_wide_alibi_kernel", "64"): (38.6,),
    # attn_bwd_dtable_tc_kernel: the masked tiles of a diagonal (its first and last, the causal diagonal's, the
    # window's and documents' edges, padding), through scores_log2_impl and dscores_of; at 128 each warp also
    # zeroes its rows of H a tile (H in dO's place: 2 CTAs an SM), +0.5
    ("attn_bwd_dtable_tc_kernel", "128, false"): (9.3,), ("attn_bwd_dtable_tc_kernel", "128, true"): (13.1,),
    ("attn_bwd_dtable_tc_kernel", "64, false"): (13.3,), ("attn_bwd_dtable_tc_kernel", "64, true"): (19.7,),
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): (9.3,), ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): (13.3,),
}

# The bytes of shared memory per HMMA of the loops beside the main one (OTHER_LOOP_CEILING's loops, in its order),
# where a table's band runs: the band's loops add the window's bias G = Q T_win^T to the scores by shuffles
# (window_bias_add, 2026-11-29), where they stored it skewed into a scratch and read it back -- the forward's band
# loop at head dim 128 moved 377 bytes an HMMA, now 316; the dQ's 454, now 385; the dT's 405, now 369 (d = 64: 397
# -> 305, 502 -> 401, 395 -> 337; 256: 497 -> 438, 426 -> 402).  Measured on the shipped sm_90 SASS + 2 %: a change
# that moves more bytes in one of them fails here.
OTHER_LOOP_SMEM_CEILING = {
    ("attn_fwd_tc_kernel", "128, false"): (333, 323, 333, 323, 332),
    ("attn_fwd_tc_kernel", "128, true"): (324, 324, 333, 338),
    ("attn_fwd_tc_kernel", "256, false"): (407, 407, 447, 447, 518),
    ("attn_fwd_tc_kernel", "256, true"): (407, 441, 441, 518),
    ("attn_fwd_tc_kernel", "64, false"): (312, 333, 312, 333, 330),
    ("attn_fwd_tc_kernel", "64, true"): (314, 314, 333, 333),
    # (the dQ's: since 2026-11-29, later, dS reaches dQ through the window in registers too -- skewed_ds_products,
    # where H was stored skewed into a scratch and ldmatrix'd back: the band loop 385 -> 353 bytes an HMMA at head
    # dim 128, 401 -> 357 at 64, 402 -> 362 at 256)
    ("attn_bwd_dq_tc_kernel", "128, true"): (360, 396, 360, 421),
    # (the dK/dV's: since 2026-11-29, later, each warp's G^T in registers -- add_transposed_bias --, where the CTA's G
    # went through shared memory, 2-way bank-conflicted stores: the band loop 426 -> 394 bytes an HMMA statically at
    # head dim 128, 391 executed for 454 (d = 64: 402 for 469); the first loop, the soft-capped blocks beyond the
    # band, as before)
    ("attn_bwd_dkdv_tc_kernel", "128, true"): (387, 403, 403, 457),
    ("attn_bwd_dkdv_tc_kernel", "256, true"): (487, 496, 496, 596),
    ("attn_bwd_dkdv_tc_kernel", "64, true"): (371, 414, 414, 474),
    ("attn_bwd_dq_tc_kernel", "256, true"): (370, 370, 444, 498),
    ("attn_bwd_dq_tc_kernel", "64, true"): (365, 396, 365, 450),
    ("attn_bwd_dtable_tc_kernel", "128, false"): (369,), ("attn_bwd_dtable_tc_kernel", "128, true"): (369,),
    ("attn_bwd_dtable_tc_kernel", "64, false"): (354,), ("attn_bwd_dtable_tc_kernel", "64, true"): (354,),
    ("attn_bwd_dtable_tc_ksplit_kernel", "128, false"): (369,), ("attn_bwd_dtable_tc_ksplit_kernel", "128, true"): (369,),
}

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout.split("\n")
    short = [re.sub(r"^void |wavepe_cuda::(\(anonymous namespace\)::)?", "", s).replace("(AttnParams)", "")
             .replace("(RelBiasParams)", "").replace("(RopeParams)", "") for s in out]
    return dict(zip(names, short))


def parse_ptxas(text: str) -> list[dict]:
    """One record per (kernel, arch) of a ptxas -v report."""
    parts = ENTRY.split(text)
    rows = []
    for i in range(1, len(parts), 3):
        name, arch, body = parts[i], parts[i + 1], parts[i + 2]
        frame, regs, smem = FRAME.search(body), REGS.search(body), SMEM.search(body)
        if frame is None or regs is None:
            raise SystemExit(f"check_cuda_kernels: cannot read ptxas's report for {name} ({arch})")
        stack, spill_st, spill_ld = (int(x) for x in frame.groups())
        rows.append({"mangled": name, "arch": arch, "regs": int(regs.group(1)), "stack": stack,
                     "spill_st": spill_st, "spill_ld": spill_ld, "smem": int(smem.group(1)) if smem else 0})
    return rows


SASS_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
SASS_BRA = re.compile(r"^(@!?U?P[T0-9]+\s+)?BRA(?:\.[A-Z.]+)?\s+(0x[0-9a-f]+)")
SASS_END = re.compile(r"^(@!?U?P[T0-9]+\s+)?(EXIT|RET|BRX|JMX)\b")
TENSOR_OP = re.compile(r"\bH(?:G)?MMA\b")
COPY_OP = re.compile(r"\bLDGSTS\b")


# shared-memory accesses of a warp-wide instruction: ldmatrix (LDSM: 8 rows of 16 bytes a matrix, .2 / .4
# matrices), the lanes' loads and stores (LDS / STS: 4 bytes, or .U8/.S8, .U16/.S16, .64, .128 a lane) and the
# cp.async copies' writes into shared memory (LDGSTS: the same sizes a lane)
SMEM_OP = re.compile(r"^(?:@!?U?P[T0-9]+\s+)?(LDSM|LDS|STS|LDGSTS)((?:\.[A-Z0-9]+)*)\s")
SMEM_LANE_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def smem_bytes(instruction: str) -> int:
    """Bytes of shared memory a warp-wide SASS instruction reads or writes, every lane active (0: none)."""
    m = SMEM_OP.match(instruction + " ")
    if m is None:
        return 0
    op, mods = m.group(1), m.group(2).split(".")[1:]
    if op == "LDSM":
        return 128 * (int(mods[-1]) if mods and mods[-1] in ("2", "4") else 1)
    return 32 * next((SMEM_LANE_BYTES[x] for x in reversed(mods) if x in SMEM_LANE_BYTES), 4)


def tensor_loops(body: str) -> list[tuple[int, int]]:
    """(instructions, tensor-core instructions) of each outermost natural loop of a kernel's SASS that holds
    HMMA/HGMMA, each instruction of the loop body counted once (loop_stats without the bytes)."""
    return [(size, tensor) for size, tensor, _ in loop_stats(body)]


def natural_loops(body: str) -> tuple[list[tuple[int, str]], list[tuple[int, int]], dict[int, set[int]]]:
    """(instructions, basic blocks as [start, end) spans of them, loops: header block -> its blocks) of a
    kernel's SASS.  Blocks end at branches and exits; a back edge is a branch to an address at or before its
    own; a loop is a header plus every block that reaches one of the header's back edges without passing the
    header."""
    ins = [(int(a, 16), t.strip()) for a, t in SASS_INS.findall(body)]
    index = {a: i for i, (a, _) in enumerate(ins)}
    leaders = {0}
    for i, (_, t) in enumerate(ins):
        bra = SASS_BRA.match(t)
        if bra and int(bra.group(2), 16) in index:
            leaders.add(index[int(bra.group(2), 16)])
        if (bra or SASS_END.match(t)) and i + 1 < len(ins):
            leaders.add(i + 1)
    starts = sorted(leaders)
    spans = [(b, starts[k + 1] if k + 1 < len(starts) else len(ins)) for k, b in enumerate(starts)]
    block_at = {b: k for k, (b, _) in enumerate(spans)}
    preds: list[set[int]] = [set() for _ in spans]
    back_edges = []
    for k, (_, e) in enumerate(spans):
        t = ins[e - 1][1]
        bra, end = SASS_BRA.match(t), SASS_END.match(t)
        if bra and int(bra.group(2), 16) in index:
            target = block_at[index[int(bra.group(2), 16)]]
            preds[target].add(k)
            if target <= k:
                back_edges.append((k, target))
        if not ((bra and not bra.group(1)) or (end and not end.group(1))) and k + 1 < len(spans):
            preds[k + 1].add(k)
    loops: dict[int, set[int]] = {}
    for tail, head in back_edges:
        loop, todo = loops.setdefault(head, {head}), [tail]
        loop.add(tail)
        while todo:
            x = todo.pop()
            if x != head:
                for p in preds[x] - loop:
                    loop.add(p)
                    todo.append(p)
    return ins, spans, loops


def loop_stats(body: str) -> list[tuple[int, int, int]]:
    """(instructions, tensor-core instructions, bytes of shared memory accessed: smem_bytes) of each outermost
    natural loop (natural_loops; one inside no other) of a kernel's SASS that holds HMMA/HGMMA, each instruction
    of the loop body counted once, lightest first (other instructions per tensor-core instruction)."""
    ins, spans, loops = natural_loops(body)
    out = []
    for head, loop in loops.items():
        if any(other > loop for h, other in loops.items() if h != head):
            continue  # nested in another loop
        size = sum(spans[x][1] - spans[x][0] for x in loop)
        tensor = sum(1 for x in loop for i in range(*spans[x]) if TENSOR_OP.search(ins[i][1]))
        if tensor:
            out.append((size, tensor, sum(smem_bytes(ins[i][1]) for x in loop for i in range(*spans[x]))))
    return sorted(out, key=lambda st: ((st[0] - st[1]) / st[1], st[0]))


def copy_cost(body: str) -> float:
    """The copies' loops of a kernel (natural_loops, nested ones too, holding cp.async -- LDGSTS -- and no
    tensor-core instruction: a thread's 16-byte chunks of a tile in turn): their instructions per copy, each
    loop's body once, summed over the loops.  Inner loops, which the mix counts once however often they run: a
    band block's table window at head_dim 128 is 16 chunks a thread, and copied by a general loader (57-66
    instructions a chunk) it cost as many instructions as the block's products and softmax, unseen by the mix
    (docs/CUDA.md, "The copies' loops")."""
    ins, spans, loops = natural_loops(body)
    total = 0.0
    for loop in loops.values():
        text = [ins[i][1] for x in loop for i in range(*spans[x])]
        copies = sum(1 for t in text if COPY_OP.search(t))
        if copies and not any(TENSOR_OP.search(t) for t in text):
            total += len(text) / copies
    return total


def main_loop_mix(body: str) -> tuple[int, int] | None:
    """(instructions, tensor-core instructions) of a kernel's main loop: of its outermost loops holding
    tensor-core instructions (tensor_loops), the one with the fewest other instructions per tensor-core
    instruction -- a kernel that takes its unmasked key blocks in a loop of their own (attn_fwd_tc_kernel)
    spends nearly all its blocks there, the others (a diagonal, a band) O(1) a query block; a kernel with
    one such loop is that loop.  None when no loop holds one."""
    loops = tensor_loops(body)
    return loops[0] if loops else None


def sass_counts(lib: str, cuobjdump: str, archs: list[str]) -> dict[tuple[str, str], dict[str, int]]:
    """Per (mangled kernel name, arch), how many HMMA / HGMMA instructions the library's SASS holds, and
    the main loop's instructions and tensor-core instructions (main_loop_mix; 0, 0 without one).  The library's
    ELF images extracted (``cuobjdump -xelf all``: a cubin per arch and source file), then one process per arch
    (``archs``: sm_XX), as many at once as there are cores, disassembling its cubins with ``nvdisasm -c``: ~16 s
    for attention_bwd.cu's sm_90 cubin, where ``cuobjdump -sass`` took ~22 s to print it with the instructions'
    encodings, four times the text (an arch's was ~280 MB: ~35 s of cuobjdump and ~15 s more to read)."""
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(lib)], cwd=tmp, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"check_cuda_kernels: cuobjdump -xelf all {lib} failed:\n{res.stderr[-2000:]}")
        cubins: dict[str, list[str]] = {}
        for f in sorted(os.listdir(tmp)):
            m = re.search(r"\.(sm_\w+)\.cubin$", f)
            if m:
                cubins.setdefault(m.group(1), []).append(os.path.join(tmp, f))
        nvdisasm = os.path.join(os.path.dirname(cuobjdump), "nvdisasm")
        nvdisasm = nvdisasm if os.access(nvdisasm, os.X_OK) else "nvdisasm"
        jobs = [(nvdisasm, a, cubins.get(a, [])) for a in archs]
        with ProcessPoolExecutor(max(1, min(len(archs), os.cpu_count() or 1))) as pool:
            parts = list(pool.map(_arch_sass_counts, jobs))
    return {key: c for part in parts for key, c in part.items()}


# nvdisasm -c: a kernel's section, its instructions ("/*addr*/ text ;"), and the labels of branch targets
# (".L_x_N:" before the instruction they name; "$__internal_N_...:" its local functions), which the operands
# name as `(label)
NVDISASM_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)", re.M)
NVDISASM_LINE = re.compile(r"^\s*(?:/\*([0-9a-f]{4,})\*/\s+([^;]*);|([.$\w]+):)\s*$", re.M)
NVDISASM_TARGET = re.compile(r"`\(([^)]+)\)")


def nvdisasm_functions(text: str) -> list[tuple[str, str]]:
    """(mangled kernel name, its SASS as "/*addr*/ text ;" lines with branch targets as addresses -- 0x..., as
    cuobjdump -sass prints them, which natural_loops reads) of nvdisasm -c's output."""
    parts = NVDISASM_SECTION.split(text)
    out = []
    for i in range(1, len(parts), 2):
        ins, labels, pending = [], {}, []
        for addr, t, label in NVDISASM_LINE.findall(parts[i + 1]):
            if label:
                pending.append(label)
                continue
            for lb in pending:
                labels[lb] = addr
            pending = []
            ins.append((addr, t.strip()))
        end = f"{int(ins[-1][0], 16) + 16:04x}" if ins else "0000"
        labels.update((lb, end) for lb in pending)  # (after the last instruction: the section's end)
        body = "\n".join(f"/*{a}*/ " + NVDISASM_TARGET.sub(lambda m: f"0x{int(labels.get(m.group(1), '0'), 16):x}"
                                                             if m.group(1) in labels else m.group(0), t) + " ;"
                         for a, t in ins)
        out.append((parts[i], body))
    return out


def _arch_sass_counts(job: tuple[str, str, list[str]]) -> dict[tuple[str, str], dict[str, int]]:
    nvdisasm, arch, cubins = job
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for cubin in cubins:
        res = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"check_cuda_kernels: nvdisasm -c {cubin} ({arch}) failed:\n{res.stderr[-2000:]}")
        for name, body in nvdisasm_functions(res.stdout):
            # the mnemonic after its blank (the address comment's or a predicate's) and before its modifiers or
            # operands: str.count, where a word-bounded regex took ~3.5 s an arch (the same counts on the 4 archs)
            c = {op: body.count(f" {op}.") + body.count(f" {op} ") for op in ("HMMA", "HGMMA")}
            loops = loop_stats(body) if c["HMMA"] or c["HGMMA"] else []
            c["loop_ins"], c["loop_tc"], c["loop_smem"] = loops[0] if loops else (0, 0, 0)
            # (instructions, tensor-core instructions, bytes of shared memory), lightest first
            c["other_loops"] = list(loops[1:])
            c["copy_cost"] = copy_cost(body) if loops and arch == MIX_ARCH else 0.0  # (the model's arch)
            counts[(name, arch)] = c
    return counts


def embedded(lib: str, cuobjdump: str, what: str) -> set[str]:
    """The archs of the ELF (what='elf': sm_XX) or PTX (what='ptx': compute_XX) images inside ``lib``."""
    res = subprocess.run([cuobjdump, f"--list-{what}", lib], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"check_cuda_kernels: cuobjdump --list-{what} {lib} failed:\n{res.stderr[-2000:]}")
    return set(re.findall(r"\.((?:sm|compute)_\d+a?)\.", res.stdout))


def kernel_parts(name: str) -> tuple[str, list[str]]:
    """(kernel, template arguments) of a demangled name: "attn_fwd_kernel<float, 128, 32, 32>" ->
    ("attn_fwd_kernel", ["float", "128", "32", "32"])."""
    base = name.split("<", 1)[0].split()[-1]
    targs = [a.strip() for a in name.split("<", 1)[1].rsplit(">", 1)[0].split(",")] if "<" in name else []
    return base, targs


def is_stub(r: dict, name: str) -> bool:
    """Is this build an instance listed in NOT_BUILT (a stub the host never launches)?"""
    base, targs = kernel_parts(name)
    return (base, targs[1] if len(targs) > 1 else "", r["arch"]) in NOT_BUILT


def exemption(r: dict, name: str) -> tuple[str, str, str]:
    base, targs = kernel_parts(name)
    return (base, targs[0] if targs else "", r["arch"])


def mix_of(r: dict) -> float | None:
    """Other instructions per tensor-core instruction in the main loop (None: no tensor-core loop)."""
    return (r["loop_ins"] - r["loop_tc"]) / r["loop_tc"] if r.get("loop_tc") else None


def mix_key(name: str) -> tuple[str, str] | None:
    """(kernel, template arguments after the type) of a tensor-core instance the model covers, else None."""
    base, targs = kernel_parts(name)
    if base not in MIX_TARGET or not targs or targs[0] not in TENSOR_CORE_TYPES:
        return None
    return base, ", ".join(targs[1:])


def failures_of(r: dict, name: str) -> list[str]:
    """The rules a kernel build breaks (r: a parse_ptxas record with src, HMMA, HGMMA; name demangled)."""
    where = f"{name} ({r['src']}, {r['arch']})"
    out = []
    if exemption(r, name) in SPILL_EXEMPT:
        pass  # reported in the table; checked to still apply by main()
    elif r["spill_st"] or r["spill_ld"]:
        out.append(f"{where}: spills registers ({r['spill_st']} bytes stored, {r['spill_ld']} loaded; "
                   f"{r['regs']} registers): shrink its tiles or raise its register budget")
    if r["stack"] and r["src"] in NO_LOCAL_MEMORY and exemption(r, name) not in SPILL_EXEMPT:
        out.append(f"{where}: uses {r['stack']} bytes of local memory (stack frame): an array indexed at "
                   "run time, a spill or a call")
    base, targs = kernel_parts(name)
    stub = is_stub(r, name)
    if stub and (r["HMMA"] or r["HGMMA"]):
        out.append(f"{where}: listed in NOT_BUILT but holds tensor-core instructions: remove it from the list")
    if base in TENSOR_CORE_KERNELS and targs and targs[0] in TENSOR_CORE_TYPES and not stub:
        op = TENSOR_CORE_RULES.get(r["arch"])
        if op and r[op] == 0:
            out.append(f"{where}: no {op} instruction in its SASS: the products no longer run on tensor cores")
    key = mix_key(name)
    if key and r["arch"] == MIX_ARCH and (r["HMMA"] or r["HGMMA"]):  # (none at all: the rule above)
        mix, ceiling = mix_of(r), MIX_CEILING.get(key)
        if mix is None:
            out.append(f"{where}: no main loop holding tensor-core instructions found in its SASS")
        elif ceiling is None:
            out.append(f"{where}: main loop {mix:.1f} other instructions per tensor-core instruction, and no "
                       f"ceiling in MIX_CEILING for {key}: add its line (target {MIX_TARGET[key[0]]})")
        elif mix > ceiling:
            out.append(f"{where}: main loop {mix:.1f} other instructions per tensor-core instruction, above its "
                       f"ceiling {ceiling} (target {MIX_TARGET[key[0]]}): the loop grew heavier")
    smem = smem_per_hmma(r) if key and r["arch"] == MIX_ARCH else None
    if smem is not None and "_tc_" in key[0] and r["HMMA"]:  # (the tensor-core ones: every name with _tc_)
        ceiling = SMEM_CEILING.get(key)
        if ceiling is None:
            out.append(f"{where}: main loop moves {smem:.0f} bytes of shared memory per tensor-core instruction, and no "
                       f"ceiling in SMEM_CEILING for {key}: add its line")
        elif smem > ceiling:
            out.append(f"{where}: main loop moves {smem:.0f} bytes of shared memory per tensor-core instruction, above "
                       f"its ceiling {ceiling} (SMEM_CEILING; tensor-bound at <= "
                       f"{SMEM_BYTES_A_CYCLE[MIX_ARCH] * HMMA_CYCLES // SCHEDULERS}): the loop reads more")
    if key and r["arch"] == MIX_ARCH and (r.get("other_loops") or key in OTHER_LOOP_CEILING):
        mixes = [(lp[0] - lp[1]) / lp[1] for lp in r.get("other_loops", [])]
        ceilings = OTHER_LOOP_CEILING.get(key)
        if ceilings is None or len(ceilings) != len(mixes):
            out.append(f"{where}: {len(mixes)} more loop(s) holding tensor-core instructions "
                       f"({', '.join(f'{m:.1f}' for m in mixes)} other instructions per one), OTHER_LOOP_CEILING "
                       f"lists {0 if ceilings is None else len(ceilings)} for {key}: one ceiling per loop")
        else:
            for m, c in zip(mixes, ceilings):
                if m > c:
                    out.append(f"{where}: a loop beside the main one has {m:.1f} other instructions per tensor-core "
                               f"instruction, above its ceiling {c} (OTHER_LOOP_CEILING): it grew heavier")
            smem_ceilings = OTHER_LOOP_SMEM_CEILING.get(key)
            if smem_ceilings is not None and len(smem_ceilings) != len(mixes):
                out.append(f"{where}: OTHER_LOOP_SMEM_CEILING lists {len(smem_ceilings)} loops for {key}, the SASS "
                           f"{len(mixes)}: one ceiling per loop, in OTHER_LOOP_CEILING's order")
            elif smem_ceilings is not None:
                for lp, c in zip(r["other_loops"], smem_ceilings):
                    if len(lp) > 2 and lp[2] / lp[1] > c:
                        out.append(f"{where}: a loop beside the main one moves {lp[2] / lp[1]:.0f} bytes of shared memory "
                                   f"per tensor-core instruction, above its ceiling {c} (OTHER_LOOP_SMEM_CEILING): "
                                   "it reads more")
    if key and r["arch"] == MIX_ARCH and "_tc_" in key[0]:
        ceiling = COPY_COST_CEILING.get(key)
        if ceiling is None:
            out.append(f"{where}: its copy loops cost {r.get('copy_cost', 0.0):.0f} instructions per 16-byte copy "
                       f"(summed), and no ceiling in COPY_COST_CEILING for {key}: add its line")
        elif r.get("copy_cost", 0.0) > ceiling:
            out.append(f"{where}: its copy loops cost {r['copy_cost']:.0f} instructions per 16-byte copy (summed over "
                       f"them), above its ceiling {ceiling} (COPY_COST_CEILING): a copy moved to a heavier loader")
    if key in CTA_SHAPE and r["arch"] == MIX_ARCH:
        ctas, warps = occupancy(r["regs"], *CTA_SHAPE[key], r["arch"])
        target = WARPS_TARGET_BY_SHAPE.get(key, WARPS_TARGET[key[0]])
        if warps < target:
            out.append(f"{where}: {ctas} CTAs, {warps} warps per SM ({r['regs']} registers, {CTA_SHAPE[key][1]} bytes "
                       f"of shared memory): below the {target} warps its loop needs to hide latency")
    if key in SM_100KIB_SHAPE and r["arch"] in SM_100KIB_ARCHS and not stub:
        ctas, warps = occupancy(r["regs"], *SM_100KIB_SHAPE[key], "sm_86")
        if warps < 8:
            out.append(f"{where}: on a 100 KiB SM {ctas} CTAs, {warps} warps ({r['regs']} registers, "
                       f"{SM_100KIB_SHAPE[key][1]} bytes of shared memory): below the 8 warps its loop needs")
    return out


def build_recipe():
    """python/wavepe/_build/recipe.py, the build's own rules (standalone: imports nothing of the package)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "wavepe", "_build", "recipe.py")
    spec = importlib.util.spec_from_file_location("wavepe_build_recipe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def find_cuobjdump() -> str | None:
    """cuobjdump with an nvdisasm beside it or on PATH (sass_counts disassembles the extracted cubins with it)."""
    cands = [shutil.which("cuobjdump")]
    nvcc = shutil.which(os.environ.get("NVCC", "nvcc"))
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump"))
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            cands.append(os.path.join(home, "bin", "cuobjdump"))
    # the nvidia-cuda-cuobjdump / -nvdisasm wheels (requirements-dev.txt) in the project's .venv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cands += sorted(glob.glob(os.path.join(root, ".venv", "lib", "python3*", "site-packages", "nvidia", "cu*", "bin",
                                           "cuobjdump")))
    for c in cands:
        if c and os.access(c, os.X_OK):
            here = os.path.join(os.path.dirname(c), "nvdisasm")
            if os.access(here, os.X_OK) or shutil.which("nvdisasm"):
                return c
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: check_cuda_kernels.py LIBRARY OBJECT_DIR ARCH...", file=sys.stderr)
        return 2
    lib, obj_dir, archs = argv[1], argv[2], [a.strip() for a in argv[3:]]
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        print("check_cuda_kernels: cuobjdump + nvdisasm not found (CUDA toolkit, or `pip install "
              "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`): the SASS cannot be checked", file=sys.stderr)
        return 3
    os.environ["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", "")  # its nvdisasm
    failures = []
    elf, ptx = embedded(lib, cuobjdump, "elf"), embedded(lib, cuobjdump, "ptx")
    failures += [f"{os.path.basename(lib)} holds no SASS for sm_{a}" for a in archs if f"sm_{a}" not in elf]
    # the PTX the build ships (for GPUs newer than the toolkit, and sm_110): each source's, for its code levels
    recipe = build_recipe()
    for v in recipe.shipped_ptx(archs, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc")):
        if f"sm_{v}" not in ptx and f"compute_{v}" not in ptx:  # cuobjdump names PTX files .sm_XX.ptx
            failures.append(f"{os.path.basename(lib)} holds no PTX for compute_{v} (recipe.shipped_ptx)")
    print(f"{os.path.basename(lib)}: SASS {' '.join(sorted(elf, key=lambda a: int(a.split('_')[1].rstrip('a'))))}; "
          f"PTX {' '.join(sorted(ptx))}")
    reports = sorted(glob.glob(os.path.join(obj_dir, "*.cu.o.log")))
    if not reports:
        print(f"check_cuda_kernels: no ptxas reports (*.cu.o.log) in {obj_dir}", file=sys.stderr)
        return 1
    counts = sass_counts(lib, cuobjdump, sorted(elf))
    rows = []
    for rep in reports:
        with open(rep) as f:
            recs = parse_ptxas(f.read())
        if not recs:
            print(f"check_cuda_kernels: {rep} lists no kernel (was it compiled with -Xptxas -v?)", file=sys.stderr)
            return 1
        src = os.path.basename(rep).split(".cu.")[0] + ".cu"
        for r in recs:
            r["src"] = src
            if (r["mangled"], r["arch"]) not in counts:
                failures.append(f"{r['mangled']} ({src}, {r['arch']}): compiled but not in the library's SASS")
            r.update(counts.get((r["mangled"], r["arch"]), {"HMMA": 0, "HGMMA": 0, "loop_ins": 0, "loop_tc": 0}))
            rows.append(r)
    names = demangle(sorted({r["mangled"] for r in rows}))
    print(f"{'arch':6} {'regs':>4} {'spill st/ld':>11} {'stack':>5} {'smem':>5} {'HMMA':>5} {'HGMMA':>5} {'mix':>5} "
          f"{'B/mma':>5}  kernel   (mix: other instructions per tensor-core instruction in the main loop; B/mma: "
          "its bytes of shared memory per one)")
    for r in sorted(rows, key=lambda r: (r["src"], names[r["mangled"]], int(r["arch"][3:].rstrip("a")))):
        mix, smem = mix_of(r), smem_per_hmma(r)
        print(f"{r['arch']:6} {r['regs']:4d} {r['spill_st']:5d}/{r['spill_ld']:<5d} {r['stack']:5d} {r['smem']:5d} "
              f"{r['HMMA']:5d} {r['HGMMA']:5d} {'' if mix is None else f'{mix:.1f}':>5} "
              f"{'' if smem is None else f'{smem:.0f}':>5}  {r['src']}: {names[r['mangled']]}")
    covered = sorted((names[r["mangled"]], mix_of(r)) for r in rows if r["arch"] == MIX_ARCH and mix_key(names[r["mangled"]]))
    if covered:
        met = [n for n, m in covered if m is not None and m <= MIX_TARGET[mix_key(n)[0]]]
        print(f"\nthe static model on {MIX_ARCH} (docs/CUDA.md): {len(met)} of {len(covered)} tensor-core kernels meet their "
              f"main-loop target (forward <= {MIX_TARGET['attn_fwd_kernel']}, backward <= {MIX_TARGET['attn_bwd_dq_kernel']} "
              "other instructions per HMMA); each is held to its ceiling (MIX_CEILING)")
    bound = sorted((names[r["mangled"]], smem_per_hmma(r)) for r in rows
                   if r["arch"] == MIX_ARCH and mix_key(names[r["mangled"]]) in SMEM_CEILING and smem_per_hmma(r))
    if bound:
        print(f"shared memory on {MIX_ARCH} ({SMEM_BYTES_A_CYCLE[MIX_ARCH]} bytes a cycle an SM, an HMMA every "
              f"{HMMA_CYCLES} cycles a scheduler): of {len(bound)} tensor-core main loops "
              f"{sum(1 for _, b in bound if smem_bound(b) >= 1)} are tensor-bound; the others reach at most "
              + ", ".join(f"{n} {smem_bound(b):.0%}" for n, b in bound if smem_bound(b) < 1 and "__half" not in n)
              + " of the tensor rate (fp16 as bf16)")
    for r in rows:
        key = mix_key(names[r["mangled"]])
        if key in SM_100KIB_SHAPE and r["arch"] in SM_100KIB_ARCHS and not is_stub(r, names[r["mangled"]]):
            ctas, warps = occupancy(r["regs"], *SM_100KIB_SHAPE[key], "sm_86")
            print(f"occupancy on a 100 KiB SM ({r['arch']}'s SASS): {names[r['mangled']]}, no table: {r['regs']} "
                  f"registers, {SM_100KIB_SHAPE[key][1]} bytes of shared memory -> {ctas} CTAs, {warps} warps per SM "
                  "(target >= 8)")
        if key in CTA_SHAPE and r["arch"] == MIX_ARCH:
            ctas, warps = occupancy(r["regs"], *CTA_SHAPE[key], r["arch"])
            print(f"occupancy on {r['arch']}: {names[r['mangled']]}: {r['regs']} registers, {CTA_SHAPE[key][1]} bytes of "
                  f"shared memory -> {ctas} CTAs, {warps} warps per SM "
                  f"(target >= {WARPS_TARGET_BY_SHAPE.get(key, WARPS_TARGET[key[0]])})")
    present = {mix_key(names[r["mangled"]]) for r in rows if r["arch"] == MIX_ARCH}
    if any(r["arch"] == MIX_ARCH for r in rows):
        failures += [f"{key}: listed in CTA_SHAPE but not built for {MIX_ARCH}: remove its line"
                     for key in sorted(CTA_SHAPE) if key not in present]
        failures += [f"{key}: listed in SMEM_CEILING but not built for {MIX_ARCH}: remove its line"
                     for key in sorted(SMEM_CEILING) if key not in present]
    if any(r["arch"] == MIX_ARCH for r in rows):
        failures += [f"{key}: listed in MIX_CEILING but not built for {MIX_ARCH}: remove its line"
                     for key in sorted(MIX_CEILING) if key not in present]
    failures += [f for r in rows for f in failures_of(r, names[r["mangled"]])]
    spilling = {exemption(r, names[r["mangled"]]) for r in rows if r["spill_st"] or r["spill_ld"] or r["stack"]}
    for ex in sorted(SPILL_EXEMPT):
        if ex[2].split("_")[1] in archs and ex not in spilling:
            failures.append(f"{ex}: listed in SPILL_EXEMPT but no longer spills: remove it from the list")
    known = sorted(ex for ex in SPILL_EXEMPT if ex in spilling)
    if known:
        print(f"known exceptions (SPILL_EXEMPT, fp32/fp64 FMA attention on the newest archs): {known}")
    if failures:
        print("\nCUDA kernel checks failed:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"\n{len(rows)} kernel builds: no spills ({len(known)} known exceptions above), no local memory in "
          f"{', '.join(NO_LOCAL_MEMORY)}; "
          "tensor-core kernels hold "
          + "/".join(sorted({TENSOR_CORE_RULES[r['arch']] for r in rows if r['arch'] in TENSOR_CORE_RULES})))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
