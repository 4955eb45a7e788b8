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
import fcntl
import glob
import hashlib
import keyword
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# -O2: the emulated kernels' tests take 12 % less CPU than at -O1 (235 s against 268 s for both emulator files on a
# 2-core Zen 5; its build at -O2: 28 s of CPU); -O3 trips GCC's -Wmaybe-uninitialized on rope.cu's rows.
CXX_FLAGS = ["-std=c++17", "-O2", "-g0", "-fPIC", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
             "-DWAVEPE_CUDA_EMU", "-I" + os.path.join(ROOT, "csrc")]
# -Bsymbolic: the kernels' calls into the emulator (lane_id, warp_slot, mma_m16n8k16, ...) bound inside the library,
# not through the PLT (~3 % of the emulator's time)
LINK_FLAGS = ["-shared", "-Wl,-Bsymbolic"]

F32, F64, BF16, F16 = 0, 1, 2, 3
GUARD = 256
GUARD_BYTE = 0x5A


def _sources() -> tuple[list[str], list[str]]:
    cu = sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cu")))
    cpp = [os.path.join(ROOT, "csrc", "cuda", "emu", name) for name in ("cuda_emu.cpp", "selftest.cpp")]
    return cu, cpp


class NoCompiler(RuntimeError):
    """No C++17 compiler here: the emulator's tests skip.  A build that fails is an error, never a skip."""


def build() -> str:
    """Path of the emulator library, compiled if the sources changed."""
    cu, cpp = _sources()
    c_src = [os.path.join(ROOT, "csrc", "core", "checked.c")]
    deps = cu + cpp + c_src + sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cuh"))) + sorted(
        glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.h"))) + sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "emu", "*.h"))) + sorted(
        glob.glob(os.path.join(ROOT, "csrc", "core", "*.h")))
    h = hashlib.sha256(" ".join(CXX_FLAGS + LINK_FLAGS).encode())
    h.update(layout_source().encode())  # the layout table depends on the headers' structs and on its generator
    for p in deps:
        h.update(p.encode())
        with open(p, "rb") as f:
            h.update(f.read())
    out_dir = os.path.join(ROOT, "build", "cuda_emu", h.hexdigest()[:16])
    lib = os.path.join(out_dir, "libwavepe_cuda_emu.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    # one process builds, the others wait for its library: pytest-xdist's workers start the emulator's two test files
    # together, and each compiled the whole library at once (~40 s of both cores, twice)
    with open(out_dir + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(lib):
            _compile(out_dir, cu + cpp + c_src)
    return lib


def _compile(out_dir: str, sources: list[str]) -> None:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise NoCompiler(f"the CUDA emulator needs a C++17 compiler ({cxx} not found)")
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

    layout_cpp = os.path.join(tmp, "layout.cpp")
    with open(layout_cpp, "w") as f:
        f.write(layout_source())
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        objs = list(pool.map(compile_one, sources + [layout_cpp]))
    res = subprocess.run([cxx, *LINK_FLAGS, "-o", os.path.join(tmp, "libwavepe_cuda_emu.so"), *objs],
                         capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"emulator link failed:\n{res.stderr[-4000:]}")
    shutil.rmtree(out_dir, ignore_errors=True)  # a folder left without its library (deleted by hand)
    os.rename(tmp, out_dir)


# ---- argument structs (derived from csrc/core/<family>.h) ------------------------
# The ctypes classes are not written by hand: they are built from the C struct definitions read
# out of the headers (a strict reader: a declaration it cannot read is an error, never skipped),
# so a field inserted, removed, retyped or moved in C moves here too.  What ctypes then lays out
# is compared with what the compiler laid out -- the emulator library exports offsetof/sizeof of
# every field it was built with (layout_source() below, wavepe_emu_layout) -- by
# tests/test_cuda_emu.py::test_struct_mirror_matches_the_compiler.

i64, cint, dbl, ptr = C.c_int64, C.c_int, C.c_double, C.c_void_p
I64x3 = i64 * 3
FORWARD, GRAD_Q, GRAD_TABLE = 1, 2, 4  # wavepe_relbias kernels

# (Python class name, C struct name, header under csrc/core): every struct handed to the emulator.
MIRRORED = [
    ("Error", "wavepe_error", "checked.h"),
    ("RelBiasArgs", "wavepe_relbias_args", "relbias.h"),
    ("AlibiArgs", "wavepe_alibi_args", "alibi.h"),
    ("RopeTensor", "wavepe_rope_tensor", "rope.h"),
    ("RopeArgs", "wavepe_rope_args", "rope.h"),
    ("AttentionArgs", "wavepe_attention_args", "attention.h"),
]
_SCALARS = {"int": C.c_int, "unsigned": C.c_uint, "int64_t": C.c_int64, "uint8_t": C.c_uint8,
            "double": C.c_double, "float": C.c_float, "char": C.c_char}
_DECL = re.compile(r"^(?:const\s+)?(?P<type>[A-Za-z_]\w*)\s+(?P<rest>[^;]+)$")
_DECLARATOR = re.compile(r"^(?P<star>\*?)\s*(?:const\s+)?(?P<name>[A-Za-z_]\w*)\s*(?:\[(?P<n>\d+)\])?$")


# A family's settings list (csrc/core/settings.h): `#define WAVEPE_<F>_SETTINGS(X) X(KIND, name, default) ...`,
# expanded in the struct by `WAVEPE_<F>_SETTINGS(WAVEPE_SETTING_FIELD)`.
_SETTING_TYPES = {"INT": "int64_t", "BOOL": "int", "REAL": "double", "LAYOUT": "int"}  # LAYOUT: rope.h's
_SETTINGS_DEF = re.compile(r"#define\s+(?P<list>WAVEPE_\w+_SETTINGS)\(X\)(?P<body>(?:[^\n]*\\\n)*[^\n]*)")
_SETTING = re.compile(r"X\(\s*(?P<kind>[A-Z]+)\s*,\s*(?P<name>\w+)\s*,\s*(?P<default>[^()]+?)\s*\)")


def c_settings(header: str) -> dict[str, list[tuple[str, str, float]]]:
    """The settings lists of csrc/core/<header>: {list macro: [(name, kind, default), ...]}."""
    with open(os.path.join(ROOT, "csrc", "core", header)) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    lists = {}
    for m in _SETTINGS_DEF.finditer(text):
        body = m.group("body").replace("\\\n", " ")
        entries = [(x.group("name"), x.group("kind"), float(x.group("default")))
                   for x in _SETTING.finditer(body)]
        if not entries or len(entries) != body.count("X("):
            raise ValueError(f"csrc/core/{header}: cannot read the settings list {m.group('list')}")
        lists[m.group("list")] = entries
    return lists


def settings_in_order(header: str, name: str, **given) -> list:
    """The values of settings list `name` of csrc/core/<header> in its order (a gufunc's scalar operands):
    those given by name, the C defaults for the rest (as Python int, bool or float by kind)."""
    entries = c_settings(header)[name]
    unknown = set(given) - {n for n, _, _ in entries}
    if unknown:
        raise TypeError(f"{name} has no setting(s) {sorted(unknown)}")
    kind = {"INT": int, "BOOL": bool, "REAL": float}
    return [given[n] if n in given else kind[k](d) for n, k, d in entries]


def c_fields(struct: str, header: str) -> list[tuple[str, str, bool, int]]:
    """The fields of `typedef struct <struct> {...} <struct>;` in csrc/core/<header>, in order:
    (name, C type, is a pointer, array length or 0), a settings list expanded in place.  Raises on
    anything it cannot read."""
    with open(os.path.join(ROOT, "csrc", "core", header)) as f:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", f.read(), flags=re.S)
    for name, entries in c_settings(header).items():
        fields = " ".join(f"{_SETTING_TYPES[k]} {n};" for n, k, _ in entries)
        text = text.replace(f"{name}(WAVEPE_SETTING_FIELD)", fields)
    m = re.search(r"typedef\s+struct\s+%s\s*\{(?P<body>[^{}]*)\}\s*%s\s*;" % (struct, struct), text)
    if m is None:
        raise ValueError(f"csrc/core/{header}: no 'typedef struct {struct} {{...}} {struct};' to read")
    fields = []
    for decl in (d.strip() for d in m.group("body").split(";")):
        if not decl:
            continue
        dm = _DECL.match(" ".join(decl.split()))
        if dm is None or dm.group("type") == "struct":
            raise ValueError(f"{struct}: cannot read the declaration '{decl}'")
        for one in dm.group("rest").split(","):
            fm = _DECLARATOR.match(one.strip())
            if fm is None:
                raise ValueError(f"{struct}: cannot read the declarator '{one.strip()}' of '{decl}'")
            fields.append((fm.group("name"), dm.group("type"), bool(fm.group("star")), int(fm.group("n") or 0)))
    return fields


def _py_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name  # rope's `in` is a Python keyword


def _mirror(cls_name: str, struct: str, header: str, known: dict) -> type:
    fields = []
    for name, ctype, pointer, n in c_fields(struct, header):
        if pointer:
            t = C.c_void_p
        elif ctype in _SCALARS:
            t = _SCALARS[ctype]
        elif ctype in known:
            t = known[ctype]
        else:
            raise ValueError(f"{struct}.{name}: no ctypes type for the C type '{ctype}'")
        fields.append((_py_name(name), t * n if n else t))
    # the settings' defaults (wavepe_<family>_args_defaults in C) for fields a caller does not give
    defaults = {n: d for entries in c_settings(header).values() for n, _, d in entries
                if n in {f[0] for f in fields}}

    def __init__(self, *args, **kwargs):
        C.Structure.__init__(self, *args, **{**{n: type(getattr(self, n))(d) for n, d in defaults.items()
                                               if n not in kwargs}, **kwargs})

    return type(cls_name, (C.Structure,), {"_fields_": fields, "c_name": struct, "__init__": __init__,
                                           "__doc__": f"{struct} of csrc/core/{header}, read from the header"})


_known: dict = {}
for _cls, _struct, _header in MIRRORED:
    _known[_struct] = globals()[_cls] = _mirror(_cls, _struct, _header, _known)
MIRROR_CLASSES = [_known[s] for _, s, _ in MIRRORED]


def layout_source() -> str:
    """C++ source of the emulator library's layout table: offsetof / sizeof / alignof of every field
    of every mirrored struct as the compiler lays it out, and one row per struct (field "") with its
    size and alignment.  Generated from the same reading of the headers as the ctypes classes; a
    field the reader invented would not compile."""
    rows = []
    for _, struct, header in MIRRORED:
        rows.append(f'    {{"{struct}", "", 0, sizeof({struct}), alignof({struct})}},')
        for name, *_ in c_fields(struct, header):
            rows.append(f'    {{"{struct}", "{name}", offsetof({struct}, {name}), sizeof((({struct} *)0)->{name}), '
                        f'alignof(decltype((({struct} *)0)->{name}))}},')
    includes = "".join(f'#include "core/{h}"\n' for h in sorted({h for _, _, h in MIRRORED}))
    return ("// generated by tests/cuda_emu.py (layout_source): the struct layouts the emulator was built with\n"
            "#include <cstddef>\n#include <cstdint>\n" + includes +
            "extern \"C\" {\n"
            "struct wavepe_emu_layout_row { const char *c_struct, *field; size_t offset, size, align; };\n"
            "extern const wavepe_emu_layout_row wavepe_emu_layout[] = {\n" + "\n".join(rows) +
            "\n    {nullptr, nullptr, 0, 0, 0}\n};\n}\n")


class LayoutRow(C.Structure):
    _fields_ = [("c_struct", C.c_char_p), ("field", C.c_char_p), ("offset", C.c_size_t), ("size", C.c_size_t),
                ("align", C.c_size_t)]


def compiler_layout() -> dict[str, dict[str, tuple[int, int, int]]]:
    """{C struct: {field ("" for the struct itself): (offset, size, align)}}, fields in C order,
    as exported by the emulator library."""
    rows = (LayoutRow * 4096).in_dll(lib(), "wavepe_emu_layout")
    out: dict = {}
    for r in rows:
        if r.c_struct is None:
            break
        out.setdefault(r.c_struct.decode(), {})[r.field.decode()] = (r.offset, r.size, r.align)
    return out


def layout_drift(cls: type, layout: dict) -> list[str]:
    """Where the ctypes class `cls` (mirroring layout[cls.c_name]) differs from the compiler's
    layout: one sentence per difference naming struct and field; [] when none."""
    struct = cls.c_name
    if struct not in layout:
        return [f"{struct}: not in the emulator library's layout table"]
    c = layout[struct]
    problems = []
    if C.sizeof(cls) != c[""][1]:
        problems.append(f"{struct}: sizeof is {c[''][1]} in C, {C.sizeof(cls)} in the ctypes mirror {cls.__name__}")
    py = {}
    for name, _ in cls._fields_:
        d = getattr(cls, name)
        py[name.rstrip("_") if keyword.iskeyword(name.rstrip("_")) else name] = (d.offset, d.size)
    c_order = [f for f in c if f]
    for f in c_order:
        if f not in py:
            problems.append(f"{struct}.{f}: in C (offset {c[f][0]}), missing from the ctypes mirror {cls.__name__}")
        elif py[f] != c[f][:2]:
            problems.append(f"{struct}.{f}: (offset, size) {c[f][:2]} in C, {py[f]} in the ctypes mirror "
                            f"{cls.__name__}")
    for f in py:
        if f not in c:
            problems.append(f"{struct}.{f}: in the ctypes mirror {cls.__name__} (offset {py[f][0]}), not in C")
    if not problems and list(py) != c_order:
        problems.append(f"{struct}: field order {c_order} in C, {list(py)} in the ctypes mirror")
    return problems


_lib = None


def lib() -> C.CDLL:
    global _lib
    if _lib is None:
        L = C.CDLL(build())
        sz = C.c_size_t
        for name, argt, rest in [
            ("wavepe_cuda_device_check", [C.c_char_p, ptr], cint),
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
            ("wavepe_cuda_attention_fwd_padded_head_dim", [C.POINTER(AttentionArgs)], i64),
            ("wavepe_cuda_attention_bwd_padded_head_dim", [C.POINTER(AttentionArgs)], i64),
            ("wavepe_cuda_attention_fwd_smem_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_bwd_smem_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_fwd_workspace_bytes", [C.POINTER(AttentionArgs), i64], sz),
            ("wavepe_cuda_attention_fwd", [C.POINTER(AttentionArgs), i64, ptr, sz, ptr], cint),
            ("wavepe_cuda_attention_bwd_workspace_bytes", [C.POINTER(AttentionArgs)], sz),
            ("wavepe_cuda_attention_bwd", [C.POINTER(AttentionArgs), ptr, sz, ptr], cint),
            ("wavepe_emu_last_message", [], C.c_char_p),
            ("wavepe_emu_selftest", [cint, ptr, ptr], cint),
            ("wavepe_emu_launch_log", [], C.c_char_p),
        ]:
            fn = getattr(L, name)  # every launcher of wavepe_cuda.h must be exported
            fn.argtypes = argt
            fn.restype = rest
        _lib = L
    return _lib


def _kernel_symbols() -> dict[int, str]:
    """The emulator library's kernels by offset: its functions named *_kernel in wavepe_cuda (`nm -C`: the kernels are
    local symbols, which dladdr, and so the emulator itself, cannot name)."""
    listing = subprocess.run(["nm", "-C", "--defined-only", build()], capture_output=True, text=True, check=True)
    found = {}
    for line in listing.stdout.splitlines():
        offset, kind, name = (line.split(" ", 2) + ["", ""])[:3]
        if kind in ("t", "T") and re.match(r"void wavepe_cuda::.*_kernel(<.*>)?\(", name):
            found[int(offset, 16)] = name
    return found


def compiled_kernels() -> set[str]:
    """Every kernel instance in the emulator library (demangled, template arguments and all)."""
    return set(_kernel_symbols().values())


def launched_kernels(log_path: str) -> set[str]:
    """The kernel instances that processes run with WAVEPE_EMU_KERNEL_LOG=log_path launched (the emulator writes each
    one's offset in its library)."""
    names = _kernel_symbols()
    with open(log_path) as f:
        return {names.get(int(x, 16), f"<no kernel at {x}>") for x in f.read().split()}


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
