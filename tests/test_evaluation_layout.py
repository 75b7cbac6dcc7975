"""The evaluation package's shape: modules of one job, no import cycles, the Evaluator protocol kept."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kernelband" / "evaluation"


def _imports(path: Path) -> set[str]:
    """The kernelband.evaluation modules `path` imports anywhere (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernelband.evaluation"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if (PACKAGE / f"{alias.name}.py").exists() and node.module == "kernelband.evaluation"
                          else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kernelband.evaluation")}
    return {m.rsplit(".", 1)[-1] for m in found} - {"evaluation"}


def test_no_two_evaluation_modules_import_each_other_even_in_a_loop():
    graph = {p.stem: _imports(p) - {p.stem} for p in PACKAGE.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cyclic = sorted(m for m in graph if reaches(m, m, {m}))
    assert not cyclic, {m: sorted(graph[m]) for m in cyclic}


def test_every_evaluation_module_is_under_600_lines():
    long = {p.name: n for p in PACKAGE.glob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_the_evaluator_satisfies_its_protocol():
    from kernelband.evaluation import base
    from kernelband.evaluation.evaluator import Evaluator

    with Evaluator(mode="interpreter", warm=0) as ev:
        assert isinstance(ev, base.Evaluator)
    assert not isinstance(object(), base.Evaluator)
