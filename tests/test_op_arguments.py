"""The op schemas are the one description of each op's arguments.

The schemas (``torch.ops.wavepe.<op>.default._schema``, defined in
``csrc/torch/<family>_op.cpp``) give each argument its name and place.  Here
the Python layers are checked against them: every Python call into a raw op
passes its arguments by schema name (no positional arguments, so no order to
get wrong), the fake kernels take the schema's arguments in the schema's order,
and the plain-PyTorch formulations (``plain_<op>`` in each family's module) take the arguments they
share with an op in that op's order, by the same names.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib

import pytest
import torch

import wavepe.ops  # noqa: F401  (loads the library: registers torch.ops.wavepe.*)

# the modules (wavepe.ops.rope and wavepe.ops.alibi_bias are also the public functions' names)
relbias_mod, alibi_mod, rope_mod, attention_mod = (
    importlib.import_module(f"wavepe.ops.{m}") for m in ("relbias", "alibi", "rope", "attention"))

PACKAGE = pathlib.Path(wavepe.__file__).resolve().parent
OPS = ("rel_bias", "rel_bias_backward", "alibi_bias", "rope", "attention_fwd", "attention_bwd")


def schema(op: str) -> list[str]:
    return [a.name for a in getattr(torch.ops.wavepe, op).default._schema.arguments]


def required(op: str) -> set[str]:
    """What wavepe's own calls must name: every argument, defaults included (a setting's schema default
    keeps other callers working when it is added; our callers must pass it on deliberately)."""
    return set(schema(op))


# ---- keyword calls into the raw ops ------------------------------------------------------------


def _raw_op_names(tree: ast.Module) -> set[str]:
    """Names a module binds to ``torch.ops.wavepe`` (``from ._extension import ops [as x]``,
    ``x = torch.ops.wavepe``) or to ``raw_ops``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in ("_extension", "_raw"):
            names |= {a.asname or a.name for a in node.names if a.name in ("ops", "raw_ops")}
        elif isinstance(node, ast.Assign) and ast.unparse(node.value) == "torch.ops.wavepe":
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def raw_op_calls_by_position(source: str, where: str, seen: list[str] | None = None) -> list[str]:
    """Every call into a raw op in ``source`` that is not made by schema name: positional
    arguments, an unknown keyword, or (with no ``**`` spread) a missing one, defaults included.  Each call examined
    is appended to ``seen``."""
    tree = ast.parse(source)
    bound = _raw_op_names(tree)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in OPS):
            continue
        owner = ast.unparse(node.func.value)
        if owner not in bound and owner not in ("torch.ops.wavepe", "wavepe.ops.raw_ops"):
            continue
        op, at = node.func.attr, f"{where}:{node.lineno}"
        if seen is not None:
            seen.append(f"{at} {op}")
        names = schema(op)
        if node.args:
            problems.append(f"{at}: {op} called with {len(node.args)} positional argument(s); pass them by name")
        given = {k.arg for k in node.keywords if k.arg is not None}
        spread = any(k.arg is None for k in node.keywords)
        if given - set(names):
            problems.append(f"{at}: {op} has no argument(s) {sorted(given - set(names))} (schema: {names})")
        if not spread and not node.args and required(op) - given:
            problems.append(f"{at}: {op} called without {sorted(required(op) - given)}")
    return problems


def test_python_calls_raw_ops_by_keyword():
    problems, seen = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        problems += raw_op_calls_by_position(path.read_text(), str(path.relative_to(PACKAGE.parent)), seen)
    assert not problems, "\n".join(problems)
    # the calls of ops/{relbias,alibi,rope,attention}.py and distributed/ were found (and so checked)
    for op in OPS:
        assert any(s.endswith(" " + op) for s in seen), (op, seen)
    assert any("distributed" in s for s in seen), seen


def test_the_keyword_check_can_fail():
    src = ("from ._extension import ops as o\n"
           "o.rel_bias(q, t, 0, 0, 5, True, False)\n"
           "o.rel_bias(q=q, table=t, r_lo=0, q_offset=0, k_len=5, causal=True, clmap=False)\n"
           "o.rel_bias(q=q, table=t, **kw)\n"
           "import torch\ntorch.ops.wavepe.attention_fwd(q, k, v, q_offset=0)\n")
    problems = raw_op_calls_by_position(src, "x.py")
    assert problems[0] == "x.py:2: rel_bias called with 7 positional argument(s); pass them by name"
    assert problems[1] == f"x.py:3: rel_bias has no argument(s) ['clmap'] (schema: {schema('rel_bias')})"
    assert problems[2].startswith("x.py:3: rel_bias called without [") and "'clamp'" in problems[2]
    assert problems[3].startswith("x.py:6: attention_fwd called with 3 positional")
    assert len(problems) == 4  # line 4: by name, the rest spread


def test_raw_ops_accept_keywords_in_any_order():
    q, table = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    want = torch.ops.wavepe.rel_bias(q, table, 4, -2, 1, True, False)
    got = torch.ops.wavepe.rel_bias(clamp=False, causal=True, k_len=4, q_offset=1, r_lo=-2, table=table, q=q)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- the settings lists of the C headers are the schemas' tails --------------------------------

# op -> (header, its settings list): every op of a family ends with the family's settings
SETTINGS = {
    "rel_bias": ("relbias.h", "WAVEPE_RELBIAS_SETTINGS"),
    "rel_bias_backward": ("relbias.h", "WAVEPE_RELBIAS_SETTINGS"),
    "alibi_bias": ("alibi.h", "WAVEPE_ALIBI_SETTINGS"),
    "attention_fwd": ("attention.h", "WAVEPE_ATTENTION_SETTINGS"),
    "attention_bwd": ("attention.h", "WAVEPE_ATTENTION_SETTINGS"),
    "rope": ("rope.h", "WAVEPE_ROPE_SETTINGS"),
}
_SCHEMA_TYPE = {"INT": "int", "BOOL": "bool", "REAL": "float", "LAYOUT": "str"}  # SymInt reads as int
_LAYOUTS = ("half", "interleaved")  # rope.h's wavepe_rope_layout, as the schema spells it


@pytest.mark.parametrize("op", list(SETTINGS))
def test_schema_ends_with_the_c_settings_list(op):
    """csrc/torch/op_settings.h generates the schemas' settings from the header's list: names, order, kinds."""
    from .cuda_emu import c_settings

    header, name = SETTINGS[op]
    want = [(n, _SCHEMA_TYPE[t]) for n, t, _ in c_settings(header)[name]]
    args = getattr(torch.ops.wavepe, op).default._schema.arguments
    tail = args[len(args) - len(want):]
    assert [(a.name, str(a.type)) for a in tail] == want
    assert [a.default_value for a in tail] == [_LAYOUTS[int(d)] if k == "LAYOUT" else d  # 0 == False
                                               for _, k, d in c_settings(header)[name]]


def test_gufunc_operands_are_the_c_settings_list():
    """The gufunc's scalar operands are generated from the same list: one per setting, typed by its kind."""
    import numpy as np

    from wavepe.ufuncs import rel_bias_gufunc

    from .cuda_emu import c_settings

    entries = c_settings("relbias.h")["WAVEPE_RELBIAS_SETTINGS"]
    assert rel_bias_gufunc.nin == 2 + len(entries)
    kind = {"INT": np.int64, "BOOL": np.bool_, "REAL": np.float64}
    for loop in rel_bias_gufunc.types:
        assert [np.dtype(c) for c in loop[2:2 + len(entries)]] == [np.dtype(kind[t]) for _, t, _ in entries], loop
    assert rel_bias_gufunc.signature == "(m,d),(r,d)" + ",()" * len(entries) + "->(m,n)"


# ---- one argument order: fake kernels and plain formulations follow the schemas ----------------

FAKES = {
    "rel_bias": relbias_mod._rel_bias_fake,
    "rel_bias_backward": relbias_mod._rel_bias_backward_fake,
    "alibi_bias": alibi_mod._alibi_bias_fake,
    "rope": rope_mod._rope_fake,
    "attention_fwd": attention_mod._attention_fwd_fake,
    "attention_bwd": attention_mod._attention_bwd_fake,
}


@pytest.mark.parametrize("op", OPS)
def test_fake_kernel_takes_the_schema_arguments(op):
    assert list(inspect.signature(FAKES[op]).parameters) == schema(op)


# plain-PyTorch function -> (the op it formulates, its own arguments that the op does not have)
EAGER = {
    relbias_mod.plain_rel_bias: ("rel_bias", set()),
    alibi_mod.plain_alibi_bias: ("alibi_bias", set()),
    rope_mod.plain_rope: ("rope", {"x"}),  # one tensor at a time (the op's q or k), positions as a tensor
}


@pytest.mark.parametrize("fn", list(EAGER), ids=lambda f: f.__name__)
def test_eager_follows_the_schema_order(fn):
    op, own = EAGER[fn]
    params = [p for p in inspect.signature(fn).parameters if p not in own]
    names = schema(op)
    assert set(params) <= set(names), f"{fn.__name__}: {sorted(set(params) - set(names))} not in {names}"
    assert params == [n for n in names if n in params], f"{fn.__name__}{params}: not in the order of {names}"
    if not own:
        assert params == names


def test_eager_rel_bias_agrees_with_the_op_by_name():
    q, table = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    kw = dict(r_lo=-2, q_offset=3, k_len=5, causal=True, clamp=False)  # q_offset != k_len: an order swap shows
    torch.testing.assert_close(relbias_mod.plain_rel_bias(q, table, **kw), torch.ops.wavepe.rel_bias(q=q, table=table, **kw),
                               rtol=1e-12, atol=1e-12)


def test_gufunc_takes_the_schema_order():
    """The NumPy gufunc takes the op's arguments in schema order, less ``k_len`` (the out array's
    last dimension): as its docstring says and as it computes (r_lo != q_offset, so a swap shows)."""
    import numpy as np

    from wavepe.ufuncs import rel_bias_gufunc

    from .cuda_emu import settings_in_order

    names = [n for n in schema("rel_bias") if n != "k_len"]
    assert rel_bias_gufunc.__doc__.splitlines()[2] == f"rel_bias({', '.join(names)}, /, *, out) -> out"
    q, table = np.random.default_rng(0).standard_normal((3, 4)), np.random.default_rng(1).standard_normal((6, 4))
    kw = dict(r_lo=-2, q_offset=3, causal=True, clamp=False)
    out = np.empty((3, 5))
    rel_bias_gufunc(q, table, *settings_in_order("relbias.h", "WAVEPE_RELBIAS_SETTINGS", **kw), out=out)
    want = torch.ops.wavepe.rel_bias(q=torch.from_numpy(q), table=torch.from_numpy(table), k_len=5, **kw)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-12, atol=1e-12)


def test_schemas_quoted_in_docs_are_the_schemas():
    """Wherever docs/ or a module quotes ``torch.ops.wavepe.<op>(...)`` with its types, the arguments are the
    op's schema's (a reordered or renamed argument shows up here, not in a user's call)."""
    import re

    root = pathlib.Path(__file__).resolve().parent.parent  # the checkout (PACKAGE may be an installed wheel)
    quoted = re.compile(r"torch\.ops\.wavepe\.(\w+)\((Tensor\b.*?)\)\s*->", re.S)
    seen = 0
    for path in sorted([*root.joinpath("docs").glob("*.md"), root / "README.md", *PACKAGE.rglob("*.py")]):
        for m in quoted.finditer(path.read_text()):
            schema = str(getattr(torch.ops.wavepe, m.group(1)).default._schema)
            schema_args = schema.split("(", 1)[1].rsplit(") ->", 1)[0]
            assert " ".join(m.group(2).split()) == schema_args, f"{path.name}: {m.group(1)}"
            seen += 1
    assert seen >= 6, seen
