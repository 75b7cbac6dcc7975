"""KernelBand: make Triton kernels faster, and prove it.

The library API:

    import kernelband
    task = kernelband.load_task("examples:vector_add")
    result = kernelband.evaluate(task, "my_kernel.py")        # an EvalResult
    summary = kernelband.optimize(task, policy="kernelband")   # the search's Summary

The names load lazily (module `__getattr__`), so `import kernelband` stays cheap and the sandboxed
workers, which import `kernelband.worker`, never import the search or the evaluator.
"""

from __future__ import annotations

import importlib
from importlib import metadata

try:
    __version__ = metadata.version("kernelband")
except metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
    __version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {"load_task": "kernelband.tasks", "evaluate": "kernelband.api", "optimize": "kernelband.api"}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelband' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
