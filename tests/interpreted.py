"""Runs test code against generated modules in a fresh interpreter-mode process: Triton's interpreter patches
triton.language while a kernel runs, and kernels other tests ran in the test process can leave that state
behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def run_modules(modules: dict[str, str], script: str) -> None:
    """Writes each source as an importable module named by its key, then runs `script` in a fresh process
    with TRITON_INTERPRET=1; fails the test with the script's stderr when it does not exit 0."""
    folder = tempfile.mkdtemp()
    for name, source in modules.items():
        with open(os.path.join(folder, f"{name}.py"), "w") as f:
            f.write(source)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([folder, *sys.path])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def interpreted(source: str, check: str) -> None:
    """Runs `check` (Python with `module` and `torch` in scope) against the source."""
    run_modules({"kb_module": source}, "import torch\nimport kb_module as module\ntorch.manual_seed(0)\n" + check)
