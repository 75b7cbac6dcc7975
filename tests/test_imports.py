"""The package has no import cycle: every import of every module under src/kernelband (those inside functions
too) is read with `ast`, and the module graph must be acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "kernelband"

# evaluation/ncu.py and evaluation/pool.py import each other inside functions; that pair is being split apart
# on another branch, and this skip goes when it lands.
SKIPPED = {frozenset({"kernelband.evaluation.ncu", "kernelband.evaluation.pool"})}


def modules(src: Path = SRC) -> dict[str, Path]:
    """Module name -> file; a package is named by its own name (its __init__)."""
    found = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the package that `module` imports, anywhere in its file. `import a.b.c` depends on
    a.b.c; `from a.b import c` on a.b.c where c is a module, else on a.b."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            origin = _resolve(module, is_package, node.level, node.module) if node.level else node.module
            names = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                     for alias in node.names]
        else:
            continue
        out.update(name for name in names if name in known and name != module)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path a -> ... -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_through(graph, set(c)) for c in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to itself, for the failure message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def graph_of(src: Path = SRC) -> dict[str, set[str]]:
    known = modules(src)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    for pair in SKIPPED:
        a, b = sorted(pair)
        graph.get(a, set()).discard(b)
        graph.get(b, set()).discard(a)
    return graph


def test_the_package_has_no_import_cycle():
    found = cycles(graph_of())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle_through_functions_and_relative_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")  # a package importing its module: fine
    (pkg / "sub" / "a.py").write_text("import kernelband.sub.b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..sub.c import thing\n")
    (pkg / "sub" / "c.py").write_text("def g():\n    from kernelband.sub import a\n")
    (pkg / "d.py").write_text("from kernelband.sub import a\n")
    assert cycles(graph_of(tmp_path)) == [["kernelband.sub.a", "kernelband.sub.b", "kernelband.sub.c",
                                           "kernelband.sub.a"]]
    (pkg / "sub" / "c.py").write_text("thing = 1\n")
    assert cycles(graph_of(tmp_path)) == []
    (pkg / "sub" / "a.py").write_text("from kernelband.sub import x\n")  # a name of the package's __init__
    assert cycles(graph_of(tmp_path)) == [["kernelband.sub", "kernelband.sub.a", "kernelband.sub"]]
