"""A TritonBench task's starting kernel as a GPU harness, for the timing diagnostics (timing_clocks.py,
timing_placement.py): the module is written to a real file (Triton compiles only kernels that live in one)
and wrapped the way a worker wraps it."""

from __future__ import annotations

from pathlib import Path


def starting_harness(name: str, folder: Path):
    """(the harness, its search shapes from smallest to largest)."""
    from kernelband.tasks import tritonbench as tb
    from kernelband.worker import harness

    task = tb.load(name)
    path = folder / f"kb_diag_{name}.py"
    path.write_text(task.module_source)
    h = harness.for_task(task.wire(), harness.import_file(path.stem, str(path)), task.module_source, "gpu")
    search = sorted((s for s in h.describe("gpu")["shapes"] if not s["held_out"]), key=lambda s: s["nbytes"])
    return h, search
