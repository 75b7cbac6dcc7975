"""The library API: `kernelband.__version__`, `load_task`, `evaluate` and `optimize`, loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kernelband
from kernelband.errors import UserError


def test_importing_kernelband_loads_neither_the_search_nor_torch():
    code = ("import sys, kernelband; kernelband.__version__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy') "
            "or m.startswith(('kernelband.search', 'kernelband.evaluation', 'kernelband.api'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_version_is_the_package_version_and_the_cli_prints_it():
    assert kernelband.__version__.count(".") >= 2
    done = subprocess.run([sys.executable, "-m", "kernelband", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout == f"kernelband {kernelband.__version__}\n", done.stderr


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kernelband.nope  # noqa: B018


@pytest.mark.slow
def test_load_task_and_evaluate_a_candidate_given_as_source(tmp_path):
    task = kernelband.load_task("examples:vector_add")
    assert task.ref == "examples:vector_add"
    path = tmp_path / "candidate.py"
    path.write_text(task.module_source)
    result = kernelband.evaluate(task, path, seed=0, interpreter=True, use_ncu=False)
    assert result.ok and result.task == "examples:vector_add" and result.speedup
    broken = task.module_source.replace("+", "-")
    assert not kernelband.evaluate("examples:vector_add", broken, seed=0, interpreter=True, use_ncu=False).ok
    with pytest.raises(UserError, match="unknown --shapes"):
        kernelband.evaluate(task, shapes="some")


@pytest.mark.slow
def test_optimize_runs_a_search_into_the_database_and_returns_its_summary(tmp_path):
    db = tmp_path / "runs.db"
    summary = kernelband.optimize("examples:vector_add", policy="random", proposer="rewrite", iterations=1,
                                  finalists=1, db=db, interpreter=True, use_ncu=False)
    assert summary.task == "examples:vector_add" and summary.policy == "random" and summary.iterations == 1
    from kernelband.store import Store

    store = Store(db)
    assert [r.id for r in store.runs()] == [summary.run_id]
    store.close()
    with pytest.raises(UserError, match="must be at least 1"):
        kernelband.optimize("examples:vector_add", iterations=0, db=db)
