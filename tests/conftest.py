"""Shared fixtures: one interpreter-mode evaluator for the whole session (workers are warm)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("KERNELBAND_MODE", "interpreter")
# pytest-xdist's workers get COLUMNS=80 as from a terminal; the CLI tests read what a pipe gets (cli/app.py's
# PIPE_WIDTH), however the suite is run.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): two workers, as many as CI's cores, where each test mostly computes on
    one core and waits on its worker processes for the rest; none where GPU tests are selected (`-m gpu`),
    which time kernels on the one GPU that two workers would share. PYTEST_XDIST_AUTO_NUM_WORKERS overrides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    expression = config.option.markexpr or ""
    if "gpu" in expression and "not gpu" not in expression:
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 if cpus > 1 else 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """The Ray cluster tests first: they run on one xdist worker one after another (one cluster at a time), the
    longest stretch of the suite, which the other worker's tests then fill beside instead of after."""
    items.sort(key=lambda item: item.get_closest_marker("ray") is None)


@pytest.fixture(scope="session")
def evaluator():
    from kernelband.evaluation.evaluator import Evaluator, Limits

    # A secret in the parent's environment: no worker may see it.
    os.environ["OPENAI_API_KEY"] = "sk-kernelband-test-secret"
    os.environ["GITHUB_TOKEN"] = "ghp-kernelband-test-secret"
    ev = Evaluator(mode="interpreter", warm=2, limits=Limits(load_s=60, run_s=15, time_s=60),
                   memory_limit=3 << 30)
    yield ev
    ev.close()


@pytest.fixture(scope="session")
def vector_add():
    from kernelband.tasks import load_task

    return load_task("examples:vector_add")
