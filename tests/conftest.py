"""Shared fixtures: one interpreter-mode evaluator for the whole session (workers are warm)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("KERNELBAND_MODE", "interpreter")


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
