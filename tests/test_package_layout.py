"""The library imports none of the research code, the research code's dependencies run one way, and the
old import paths of the research modules still work."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.installation  # (pyproject.toml: CI runs these against the installed wheel too)
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "wavepe")
RESEARCH = ("wavepe.research", "wavepe.analysis", "wavepe.experiments", "wavepe.cli")


def module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def imports_of(path: str) -> set[str]:
    """Every module a file imports, at any depth of the code (lazy imports too), as absolute names."""
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def python_files(root: str):
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(folder, f)


def is_research(path: str) -> bool:
    rel = os.path.relpath(path, PACKAGE)
    return rel.startswith("research" + os.sep) or rel == "__main__.py"


def test_the_library_imports_no_research_code():
    offenders = {}
    for path in python_files(PACKAGE):
        if is_research(path):
            continue
        bad = sorted(m for m in imports_of(path) if m.startswith(RESEARCH))
        if bad:
            offenders[os.path.relpath(path, PACKAGE)] = bad
    assert not offenders, offenders


def test_research_dependencies_run_one_way():
    # cli -> experiments -> analysis -> library: no module imports one above it (the old loop was
    # analysis -> experiments.evaluate -> ... -> experiments.extrapolate -> analysis)
    rank = {"wavepe.research.analysis": 0, "wavepe.research.experiments": 1, "wavepe.research.cli": 2}

    def level(module: str) -> int | None:
        for prefix, r in rank.items():
            if module == prefix or module.startswith(prefix + "."):
                return r
        return None

    for path in python_files(os.path.join(PACKAGE, "research")):
        own = level(module_name(path))
        for m in imports_of(path):
            other = level(m)
            assert other is None or own is None or other <= own, f"{module_name(path)} imports {m}"


def test_importing_the_library_loads_no_research_module():
    code = ("import sys, wavepe, wavepe.config, wavepe.ufuncs, wavepe.pos_enc, wavepe.ops, wavepe.nn, "
            "wavepe.integrations.hf, wavepe.integrations.fairseq.options\n"
            f"print(sorted(m for m in sys.modules if m.startswith({RESEARCH!r})))")
    pytest.importorskip("transformers")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_old_import_paths_are_the_research_modules():
    pytest.importorskip("torch")
    import wavepe.analysis
    import wavepe.cli
    import wavepe.experiments
    import wavepe.experiments.model
    import wavepe.research.analysis
    import wavepe.research.cli
    import wavepe.research.experiments.evaluate
    import wavepe.research.experiments.model
    from wavepe.experiments import TinyLM, perplexity

    assert wavepe.experiments is wavepe.research.experiments
    assert wavepe.experiments.model is wavepe.research.experiments.model
    assert TinyLM is wavepe.research.experiments.model.TinyLM
    assert perplexity is wavepe.research.experiments.evaluate.perplexity
    assert wavepe.cli is wavepe.research.cli and callable(wavepe.cli.main)
    assert wavepe.analysis.band_dimension is wavepe.research.analysis.band_dimension
    assert wavepe.analysis.p_rope_sweep is wavepe.research.experiments.evaluate.p_rope_sweep
    assert set(wavepe.research.analysis.__all__) <= set(wavepe.analysis.__all__)


def test_old_paths_imported_first_load_each_module_once():
    # a fresh interpreter whose first import is an old path: no second copy of any research module
    code = ("import sys\n"
            "from wavepe.experiments.evaluate import perplexity\n"
            "from wavepe.experiments.model import TinyLM\n"
            "import wavepe.research.experiments.evaluate as ev, wavepe.research.experiments.model as mo\n"
            "assert perplexity is ev.perplexity and TinyLM is mo.TinyLM\n"
            "old = [n for n in sys.modules if n.startswith('wavepe.experiments')]\n"
            "assert old and all(sys.modules[n] is sys.modules['wavepe.research' + n[len('wavepe'):]] for n in old), old\n"
            "print('ok')")
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def module_graph() -> dict[str, set[str]]:
    """wavepe's modules and the wavepe modules each one imports (lazy imports too).

    ``from . import x`` points at the module ``x`` when there is one; an import of a submodule is
    not an edge to its packages (their ``__init__`` runs first, but depends on nothing of it)."""
    files = {module_name(p): p for p in python_files(PACKAGE)}
    modules = set(files) | {"wavepe._ufuncs", "wavepe._C"}  # the compiled extensions import nothing
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = imports_of(path)
        edges = {m for m in found if m in modules}
        # a package named by a `from package import module` line: only the module is imported
        edges -= {m for m in edges if any(other.startswith(m + ".") for other in edges)}
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_data_layer_does_not_import_the_compute_layer():
    graph = module_graph()
    assert "wavepe.ufuncs" not in graph["wavepe.config"] and "wavepe.ops" not in graph["wavepe.config"]
    # config builds its tables through the extension, below it
    assert "wavepe._wavelet_rows" in graph["wavepe.config"]
    assert graph["wavepe._wavelet_rows"] <= {"wavepe._ufuncs"}


def test_no_import_circle_among_the_library_modules():
    assert cycles(module_graph()) == []
