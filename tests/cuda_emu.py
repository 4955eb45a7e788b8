"""The CUDA kernels on the CPU: build and call the emulator library.

``csrc/cuda/*.cu`` compiled as C++ with ``-DWAVEPE_CUDA_EMU`` (see
``csrc/cuda/emu/cuda_emu.h``) gives a shared library exporting the very
``extern "C"`` launchers of ``csrc/cuda/wavepe_cuda.h``, running each CUDA
thread as a fiber.  This module builds it once per source hash (under
``build/cuda_emu/``), mirrors the families' argument structs (the ones the
CPU core takes too, ``csrc/core/<family>.h``) with ctypes, and
manages "device" buffers: NumPy memory with guard bytes on both sides
(checked after every launch, so an out-of-bounds write fails the test) and
outputs pre-filled with NaN bytes (so an element the kernel forgot stays NaN).
"""

from __future__ import annotations

import ctypes as C
import glob
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX_FLAGS = ["-std=c++17", "-O1", "-g0", "-fPIC", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
             "-DWAVEPE_CUDA_EMU", "-I" + os.path.join(ROOT, "csrc")]

F32, F64, BF16, F16 = 0, 1, 2, 3
GUARD = 256
GUARD_BYTE = 0x5A


def _sources() -> tuple[list[str], list[str]]:
    cu = sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cu")))
    cpp = [os.path.join(ROOT, "csrc", "cuda", "emu", "cuda_emu.cpp")]
    return cu, cpp


def build() -> str:
    """Path of the emulator library, compiled if the sources changed."""
    cu, cpp = _sources()
    c_src = [os.path.join(ROOT, "csrc", "core", "checked.c")]
    deps = cu + cpp + c_src + sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cuh"))) + sorted(
        glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.h"))) + sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "emu", "*.h"))) + sorted(
        glob.glob(os.path.join(ROOT, "csrc", "core", "*.h")))
    h = hashlib.sha256(" ".join(CXX_FLAGS).encode())
    for p in deps:
        h.update(p.encode())
        with open(p, "rb") as f:
            h.update(f.read())
    out_dir = os.path.join(ROOT, "build", "cuda_emu", h.hexdigest()[:16])
    lib = os.path.join(out_dir, "libwavepe_cuda_emu.so")
    if os.path.exists(lib):
        return lib
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"the CUDA emulator needs a C++17 compiler ({cxx} not found)")
    tmp = out_dir + ".tmp%d" % os.getpid()
    os.makedirs(tmp, exist_ok=True)

    def compile_one(src: str) -> str:
        obj = os.path.join(tmp, os.path.basename(src) + ".o")
        if src.endswith(".c"):
            cmd = [os.environ.get("CC", "gcc"), "-std=c11", "-O1", "-fPIC", "-c", src, "-o", obj]
        else:
            cmd = [cxx, *CXX_FLAGS, "-x", "c++", "-c", src, "-o", obj]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"emulator build failed: {' '.join(cmd)}\n{res.stderr[-6000:]}")
        return obj

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        objs = list(pool.map(compile_one, cu + cpp + c_src))
    res = subprocess.run([cxx, "-shared", "-o", os.path.join(tmp, "libwavepe_cuda_emu.so"), *objs],
                         capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"emulator link failed:\n{res.stderr[-4000:]}")
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    try:
        os.rename(tmp, out_dir)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return lib


# ---- argument structs (mirror csrc/core/<family>.h) ----------------------------

i64, cint, dbl, ptr = C.c_int64, C.c_int, C.c_double, C.c_void_p
I64x3 = i64 * 3
FORWARD, GRAD_Q, GRAD_TABLE = 1, 2, 4  # wavepe_relbias kernels


class RelBiasArgs(C.Structure):
    _fields_ = [("dtype", cint), ("batch", i64), ("m", i64), ("n", i64), ("d", i64), ("rows", i64),
                ("r_lo", i64), ("q_offset", i64), ("causal", cint), ("clamp", cint),
                ("q", ptr), ("q_stride_g", i64), ("q_stride_m", i64), ("table", ptr),
                ("bias", ptr), ("bias_stride_g", i64), ("bias_stride_m", i64),
                ("grad", ptr), ("grad_stride_g", i64), ("grad_stride_m", i64),
                ("dq", ptr), ("dq_stride_g", i64), ("dq_stride_m", i64), ("dtable", ptr),
                ("outer", i64), ("q_stride_o", i64), ("bias_stride_o", i64), ("workspace", ptr)]


class AlibiArgs(C.Structure):
    _fields_ = [("dtype", cint), ("heads", i64), ("m", i64), ("n", i64), ("q_offset", i64), ("causal", cint),
                ("slopes", ptr), ("out", ptr), ("out_stride_h", i64), ("out_stride_m", i64)]


class RopeTensor(C.Structure):
    _fields_ = [("heads", i64), ("in_", ptr), ("in_stride_b", i64), ("in_stride_h", i64), ("in_stride_l", i64),
                ("out", ptr), ("out_stride_b", i64), ("out_stride_h", i64), ("out_stride_l", i64)]


class RopeArgs(C.Structure):
    _fields_ = [("dtype", cint), ("batch", i64), ("len", i64), ("head_dim", i64), ("q", RopeTensor),
                ("k", RopeTensor), ("inv_freq", ptr), ("rotary_pairs", i64), ("layout", cint), ("inverse", cint),
                ("scale", dbl), ("positions", ptr), ("pos_stride_b", i64), ("pos_stride_l", i64), ("offset", i64)]


class AttentionArgs(C.Structure):
    _fields_ = [("dtype", cint), ("batch", i64), ("heads", i64), ("kv_heads", i64), ("m", i64), ("n", i64),
                ("d", i64), ("q_offset", i64), ("causal", cint), ("scale", dbl),
                ("q", ptr), ("k", ptr), ("v", ptr), ("q_strides", I64x3), ("k_strides", I64x3), ("v_strides", I64x3),
                ("table", ptr), ("table_rows", i64), ("r_lo", i64), ("clamp", cint), ("slopes", ptr),
                ("key_padding_mask", ptr), ("kpm_stride", i64), ("out", ptr), ("out_strides", I64x3), ("lse", ptr),
                ("dout", ptr), ("dout_strides", I64x3), ("dlse", ptr), ("dq", ptr), ("dk", ptr), ("dv", ptr),
                ("dtable", ptr), ("dslopes", ptr)]


_lib = None


def lib() -> C.CDLL:
    global _lib
    if _lib is None:
        L = C.CDLL(build())
        sz = C.c_size_t
        for name, argt, rest in [
            ("wavepe_cuda_alibi_check", [C.POINTER(AlibiArgs), ptr], cint),
            ("wavepe_cuda_alibi", [C.POINTER(AlibiArgs), ptr], cint),
            ("wavepe_cuda_rope_check", [C.POINTER(RopeArgs), ptr], cint),
            ("wavepe_cuda_rope", [C.POINTER(RopeArgs), ptr], cint),
            ("wavepe_cuda_relbias_check", [C.POINTER(RelBiasArgs), C.c_uint, ptr], cint),
            ("wavepe_cuda_relbias_fwd", [C.POINTER(RelBiasArgs), ptr], cint),
            ("wavepe_cuda_relbias_bwd_workspace_bytes", [C.POINTER(RelBiasArgs), C.c_uint], sz),
            ("wavepe_cuda_relbias_bwd", [C.POINTER(RelBiasArgs), C.c_uint, ptr, sz, ptr], cint),
            ("wavepe_cuda_attention_check", [C.POINTER(AttentionArgs), cint, i64, ptr], cint),
            ("wavepe_cuda_attention_num_splits", [C.POINTER(AttentionArgs)], i64),
            ("wavepe_cuda_attention_fwd_smem_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_bwd_smem_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_fwd_workspace_bytes", [C.POINTER(AttentionArgs), i64], sz),
            ("wavepe_cuda_attention_fwd", [C.POINTER(AttentionArgs), i64, ptr, sz, ptr], cint),
            ("wavepe_cuda_attention_bwd_workspace_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_bwd", [C.POINTER(AttentionArgs), ptr, sz, ptr], cint),
            ("wavepe_emu_last_message", [], C.c_char_p),
        ]:
            fn = getattr(L, name)  # every launcher of wavepe_cuda.h must be exported
            fn.argtypes = argt
            fn.restype = rest
        _lib = L
    return _lib


class Error(C.Structure):
    """wavepe_error: the validator's sentence."""
    _fields_ = [("message", C.c_char * 256)]


def why(fn, *args) -> tuple[int, str]:
    """(status, message) of a wavepe_cuda_*_check call (its last argument is the wavepe_error)."""
    err = Error()
    status = fn(*args, C.byref(err))
    return status, err.message.decode()


def check(err: int) -> None:
    if err != 0:
        msg = lib().wavepe_emu_last_message().decode()
        raise RuntimeError(f"launch failed with cudaError {err}: {msg}")


# ---- dtypes ---------------------------------------------------------------------------

def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def storage(x: np.ndarray, dtype: int) -> np.ndarray:
    """x (float64) as the kernel's storage array."""
    if dtype == F32:
        return np.ascontiguousarray(x, np.float32)
    if dtype == F64:
        return np.ascontiguousarray(x, np.float64)
    if dtype == F16:
        return np.ascontiguousarray(x, np.float16)
    return to_bf16_bits(np.asarray(x, np.float32))


def values(x: np.ndarray, dtype: int) -> np.ndarray:
    """Storage array -> float64 values."""
    if dtype == BF16:
        return from_bf16_bits(x).astype(np.float64)
    return np.asarray(x, np.float64)


def rounded(x: np.ndarray, dtype: int) -> np.ndarray:
    """x rounded to the dtype, as float64 (what the kernel actually reads)."""
    return values(storage(x, dtype), dtype)


def np_dtype(dtype: int):
    return {F32: np.float32, F64: np.float64, F16: np.float16, BF16: np.uint16}[dtype]


# ---- guarded buffers ---------------------------------------------------------------------

class Buf:
    """A NumPy array inside a byte buffer with guard bytes on both sides."""

    def __init__(self, shape, np_dt, fill: np.ndarray | None = None, nan_fill: bool = True):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(np_dt)
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.raw = np.full(nbytes + 2 * GUARD + 64, GUARD_BYTE, dtype=np.uint8)
        # 64-byte aligned data start, like a GPU allocation
        base = self.raw.ctypes.data
        self.off = GUARD + ((-(base + GUARD)) % 64)
        self.nbytes = nbytes
        self.arr = self.raw[self.off:self.off + nbytes].view(self.dtype).reshape(self.shape)
        if fill is not None:
            self.arr[...] = fill
        elif nan_fill:
            self.raw[self.off:self.off + nbytes] = 0xFF

    @property
    def ptr(self) -> int:
        return self.raw.ctypes.data + self.off

    def check_guards(self, name: str = "buffer") -> None:
        before = self.raw[:self.off]
        after = self.raw[self.off + self.nbytes:]
        if (before != GUARD_BYTE).any() or (after != GUARD_BYTE).any():
            raise AssertionError(f"{name}: the kernel wrote outside the buffer")


def nullable(buf: Buf | None) -> int | None:
    return None if buf is None else buf.ptr
