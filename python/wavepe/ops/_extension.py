"""Loading of the compiled operator library (registers ``torch.ops.wavepe.*``).

The library (``wavepe/libwavepe_ops.so``) holds no Python and calls torch only through its
ABI-stable C shim (``docs/install.md``): one binary serves every CPython and every torch >= 2.10.
``torch`` is imported first: the library resolves its shim against the torch already loaded.

Which library:

1. the one inside the package (a prebuilt wheel, or built at install time when torch was
   importable then), if its record (``libwavepe_ops.json``) says it targets a torch no newer than
   the running one;
2. otherwise one compiled for the running torch at first use and cached
   (:mod:`wavepe._build.jit`: a one-line message, about a minute, once).  ``WAVEPE_JIT=0`` forbids
   compiling at import: an ImportError then says what to do instead.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from typing import Any, Callable

from .._requires import require

require("torch", "wavepe.ops")
import torch  # noqa: E402

from .._build import recipe  # noqa: E402

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _target(record: dict[str, Any]) -> tuple[int, int]:
    return recipe.torch_version_tuple(str(record.get("torch_target", "")))


def _packaged_build() -> tuple[str | None, dict[str, Any], str | None]:
    """(path, record, why not): the library inside the package, if it serves the running torch."""
    path = os.path.join(PACKAGE_DIR, recipe.TORCH_LIBRARY_FILE)
    if not os.path.exists(path):
        return None, {}, None
    try:
        with open(os.path.join(PACKAGE_DIR, recipe.TORCH_RECORD_FILE), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None, {}, "the packaged torch ops have no record of what they are"
    if record.get("abi") != "stable" or record.get("machine") not in (None, recipe.machine()):
        return None, {}, f"the packaged torch ops are not for this machine ({record})"
    running = recipe.torch_version_tuple(torch.__version__)
    if running < _target(record):
        return None, {}, (f"the packaged torch ops need torch >= {record.get('torch_target')}, "
                          f"this is {torch.__version__}")
    return path, record, None


def _load() -> tuple[str, str, dict[str, Any]]:
    """Load the library; returns (where it came from, its path, its record) for ``wavepe info``."""
    too_old = recipe.torch_too_old(str(torch.__version__))
    if too_old:
        raise ImportError(too_old)
    path, record, why = _packaged_build()
    if path is not None:
        try:
            torch.ops.load_library(path)
            how = "built in place" if record.get("package") == "in-place build" else "from the wheel"
            return (f"{how} ({path})", path, record)
        except OSError as exc:
            why = f"the packaged torch ops do not load ({exc.__cause__ or exc})"
    if not recipe.env_flag("WAVEPE_JIT", True):
        raise ImportError(
            f"wavepe's PyTorch ops are not built for this installation (torch {torch.__version__}"
            + (f"; {why}" if why else "")
            + "), and WAVEPE_JIT=0 forbids compiling them now: unset it, install a prebuilt wheel, or rebuild "
            "wavepe with `pip install --no-build-isolation .` (`make build` in a checkout)")
    from .._build import jit

    try:
        path = jit.compiled_torch_ops(why)
    except jit.JitBuildError as exc:
        raise ImportError(str(exc)) from None
    record = jit.load(path)
    return (f"compiled at first use ({os.path.dirname(path)})", path, record)


ORIGIN, LIBRARY, RECORD = _load()


def _positional_caller(name: str) -> Callable[..., Any]:
    """A function with the parameters of ``torch.ops.wavepe.<name>``'s schema (its names, order and
    defaults) that calls the op's default overload with them in schema order -- or, under a torch.func
    transform, the op's :func:`register_autograd` Function (which those transforms can differentiate)."""
    overload = getattr(torch.ops.wavepe, name).default
    env: dict[str, Any] = {"_op": overload, "_active": func_transform_active, "_functions": _FUNCTORCH, "_name": name}
    params, passed = [], []
    for i, a in enumerate(overload._schema.arguments):
        if a.has_default_value():
            env[f"_default{i}"] = a.default_value
        params.append(f"{a.name}=_default{i}" if a.has_default_value() else a.name)
        passed.append(f"{a.name}={a.name}" if a.kwarg_only else a.name)
    positional = ", ".join(a.name for a in overload._schema.arguments)
    exec(f"def {name}({', '.join(params)}):\n"  # noqa: S102
         f"    if _active() and _name in _functions:\n"
         f"        return _functions[_name].apply({positional})\n"
         f"    return _op({', '.join(passed)})\n", env)
    fn = env[name]
    fn.__qualname__ = f"ops.{name}"
    fn.__doc__ = f"torch.ops.wavepe.{name}.default with its arguments in schema order: {overload._schema}"
    return fn


def func_transform_active() -> bool:
    """Whether a torch.func transform (grad, vmap, jacrev, ...) is active -- never while torch.compile traces."""
    return not torch.compiler.is_compiling() and torch._C._functorch.peek_interpreter_stack() is not None


# op name -> the autograd.Function torch.func transforms call instead of the op (register_autograd)
_FUNCTORCH: dict[str, type] = {}


def register_autograd(op: str, backward: Callable[..., Any], setup_context: Callable[..., Any]) -> None:
    """``torch.library.register_autograd`` of ``wavepe::<op>`` -- and the same derivative as an
    ``autograd.Function`` for torch.func's transforms.

    torch.library's autograd serves torch.autograd, torch.compile and torch.export, but the Function it
    generates has no ``setup_context`` of its own, which torch.func.grad / vjp / jacrev require.  Under
    such a transform the op's Python caller (``ops.<op>``) calls this Function instead: its forward is
    the op (below autograd, vmapped by the op's batching rules in ``_vmap.py``), its ``setup_context`` and
    ``backward`` the very functions given here.  Forward mode (jvp, jacfwd) has no formula: a clear
    error says so.
    """
    torch.library.register_autograd(f"wavepe::{op}", backward, setup_context=setup_context)
    overload = getattr(torch.ops.wavepe, op).default

    def forward(*args: Any) -> Any:
        return overload(*args)

    def jvp(ctx: Any, *tangents: Any) -> Any:
        raise NotImplementedError(
            f"wavepe::{op} has no forward-mode derivative (torch.func.jvp, jacfwd, torch.autograd.forward_ad): "
            "use reverse mode (torch.autograd, torch.func.grad, vjp, jacrev)")

    _FUNCTORCH[op] = type(f"wavepe_{op}_Function", (torch.autograd.Function,), {
        "generate_vmap_rule": True,
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
        "jvp": staticmethod(jvp),
    })


def _library_ops() -> tuple[str, ...]:
    """The names of the ops the loaded library registered under ``wavepe::`` (the schemas torch holds),
    the Python-defined ``wavepe::wavelet_table`` (ops/_tables.py) excepted: it is called as a function."""
    names = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("wavepe::")}
    names.discard("wavelet_table")
    return tuple(sorted(names))


class _Ops:
    """``torch.ops.wavepe`` as wavepe's Python calls it: ``ops.<op>(name=value, ...)``, every argument by
    its schema name (tests/test_op_arguments.py checks the calls), reaches the op's default overload with
    the arguments in schema order.  Keywords given to the op itself are matched against the schema by the
    dispatcher's argument parser, ~5 us a call (a tenth of a one-token decoding step of a small model);
    Python binds a plain function's keywords in well under one.  Each function is made from the schema
    here, when the library has loaded, so the schema stays the one description of the arguments -- and
    not on first use: a first call inside ``torch.compile`` would make dynamo trace the schema walk,
    which it cannot (issue 45)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        for name in names:
            setattr(self, name, _positional_caller(name))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"the wavepe ops library ({LIBRARY}) has no op {name!r}")


ops = _Ops(_library_ops())


_NO_CONTEXT = contextlib.nullcontext()


def autograd_context(*inputs: Any) -> contextlib.AbstractContextManager[Any]:
    """The context a raw-op call runs in: below the autograd layer when no tensor among ``inputs`` needs a
    gradient (no grad mode, or none requires it), else as it is.

    torch.library's autograd layer of a custom op is Python (~15 us a call, more than a one-token
    decoding step of a small model spends in the kernel); with nothing to record it only redispatches
    below itself, which this does directly.  While torch.compile traces, the compiler sees the op as
    it is."""
    if torch.compiler.is_compiling():
        return _NO_CONTEXT
    if torch.is_grad_enabled():
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return _NO_CONTEXT
    return torch._C._AutoDispatchBelowAutograd()


# The op schemas (csrc/torch/<family>_op.cpp) are the one description of each op's arguments: Python
# calls the ops by keyword, with these names, and reads what autograd hands back by name too.
def schema_names(op: str) -> tuple[str, ...]:
    """The argument names of ``torch.ops.wavepe.<op>``, in schema order."""
    return tuple(a.name for a in getattr(torch.ops.wavepe, op).default._schema.arguments)


def schema_tensors(op: str) -> tuple[str, ...]:
    """The names of the (optional) Tensor arguments of ``torch.ops.wavepe.<op>``, in schema order."""
    return tuple(a.name for a in getattr(torch.ops.wavepe, op).default._schema.arguments
                 if str(a.type) in ("Tensor", "Optional[Tensor]"))


def named(names: tuple[str, ...], inputs: tuple[Any, ...]) -> dict[str, Any]:
    """An op's positional ``inputs`` (as ``setup_context`` receives them) by their schema ``names``."""
    if len(names) != len(inputs):
        raise TypeError(f"expected the {len(names)} arguments {names}, got {len(inputs)}")
    return dict(zip(names, inputs))


def register_fake(op: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn`` becomes the fake kernel (shapes only) of ``torch.ops.wavepe.<op>``.

    ``fn`` takes the arguments it needs by schema name and ``**_`` for the rest (an op's settings,
    which rarely change a shape); the kernel registered -- and returned -- takes the schema's
    arguments in the schema's order (its signature is the schema's), so an argument added to the
    schema reaches it without a change here.
    """
    signature = inspect.Signature([
        inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          default=a.default_value if a.has_default_value() else inspect.Parameter.empty)
        for a in getattr(torch.ops.wavepe, op).default._schema.arguments])

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        def fake(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return fn(**bound.arguments)

        fake.__name__, fake.__qualname__, fake.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        fake.__signature__ = signature  # type: ignore[attr-defined]
        torch.library.register_fake(f"wavepe::{op}")(fake)
        return fake

    return register


def build_info() -> dict[str, Any]:
    """What the loaded library is: where it came from, the torch it targets, its CUDA kernels."""
    info = json.loads(ops.build_info())
    return {"origin": ORIGIN, "library": LIBRARY, **info}


def float_compute_dtype(t: torch.Tensor, name: str) -> torch.dtype:
    """The dtype a kernel computes in for input ``t``: fp32 for half types."""
    if t.dtype in (torch.float32, torch.float64):
        return t.dtype
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    raise TypeError(f"{name} must be a floating-point tensor (float32, float64, bfloat16, float16), got {t.dtype}")
