"""One candidate evaluated the way TritonBench, GEAK-eval and the KernelBand release do it.

A fresh Python process: import torch and Triton, import the candidate module, run the
instance's test code in the same process, then build every input of the performance script
on the CPU, move it to the GPU and time it with do_bench(warmup=100 ms, rep=1000 ms).
Used by eval_throughput.py for the side-by-side figure; the candidate is the task's own
starting kernel.
"""

from __future__ import annotations

import sys
import tempfile
import time
import types
from pathlib import Path

t_start = time.perf_counter()
import torch  # noqa: E402
import triton  # noqa: E402

from kernelband.tasks import load_task  # noqa: E402
from kernelband.worker import tb_compat  # noqa: E402


def main(name: str) -> None:
    task = load_task(f"tritonbench:{name}")
    root = Path(tempfile.mkdtemp())
    (root / "TritonBench_v1").mkdir()
    (root / "TritonBench_v1" / "__init__.py").write_text("")
    (root / "TritonBench_v1" / f"{name}.py").write_text(task.module_source)
    sys.path.insert(0, str(root))
    compat = types.ModuleType("performance_utils")
    compat.Performance_Metrics = tb_compat.Performance_Metrics
    compat.do_bench_config = tb_compat.do_bench_config
    sys.modules["performance_utils"] = compat
    module = __import__(f"TritonBench_v1.{name}", fromlist=["*"])
    namespace = dict(module.__dict__)
    exec(compile(task.tests_source or "", "tests", "exec"), namespace)  # correctness, in-process
    perf_ns: dict = {"__name__": "perf", "__file__": str(root / "perf" / f"{name}_perf.py")}
    exec(compile(task.harness_source, "perf", "exec"), perf_ns)
    pm = perf_ns["performance_metrics"]()
    pm.get_input_tensors()
    pm.get_do_bench_config(warmup=100, rep=1000)
    times = []
    for entry in pm.input_tensors:
        inputs = pm.to_cuda(entry)
        times.append(triton.testing.do_bench(lambda inputs=inputs: pm.call_op(inputs), warmup=100, rep=1000))
    torch.cuda.synchronize()
    print(f"{len(times)} shapes timed in {time.perf_counter() - t_start:.1f}s (process lifetime)")


if __name__ == "__main__":
    main(sys.argv[1])
