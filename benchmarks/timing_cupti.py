"""Is a µs kernel's per-process offset in the kernel or in its launch? (GPU machine)

    for p in 1 2 3 4 5; do python3 benchmarks/timing_cupti.py --tasks l2_norm_triton1; done

l2_norm_triton1's summed time moves 1-5 % from one process to the next and holds to 0.1-0.3 % within one
(benchmarks/timing_process.py; BENCHMARKS.md, runs AI and AJ). The evaluator times with CUDA events around
the call, which include the GPU front end's work to start the kernel. This measures, in one process and on
the same calls, both the event time (`kernelband.worker.timing.bench`, the `default` preset's way) and the
kernel's own execution as CUPTI records it (torch.profiler's device events: start to end of the kernel on
the GPU), each call after an L2 flush and the GPU-ahead wait. If the offset shows in the events' sum and
not in CUPTI's, it lies in the launch. One JSON line per task: both sums, per kernel name for CUPTI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from _task_harness import starting_harness

from kernelband.worker import timing

PRESET = {"warmup": 10, "rep": 100, "unit": "iters", "max_ms": 40.0, "ahead_us": 150.0}
OURS = ("fill", "zero", timing.SPIN_KERNEL)  # the flush's and the wait's kernels, left out of CUPTI's sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="l2_norm_triton1")
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()

    import torch
    import triton
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from kernelband.worker.guards import TamperGuard

    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    guard = TamperGuard()
    folder = Path(tempfile.mkdtemp(prefix="kb-cupti-"))
    for name in args.tasks.split(","):
        h, search = starting_harness(name, folder)
        torch.manual_seed(0)
        inputs = {s["index"]: h.make_inputs(s["index"], "cuda") for s in search}
        events_us, kernel_us = 0.0, defaultdict(float)
        for x in inputs.values():
            h.call(x)
            events_us += 1000 * statistics.median(timing.bench(lambda x=x, h=h: h.call(x), PRESET, True, guard)[0])
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    driver.clear_cache(cache)
                    torch.cuda._sleep(300_000)  # the GPU-ahead wait
                    h.call(x)
                torch.cuda.synchronize()
            durations = defaultdict(list)
            for e in prof.events():
                if e.device_type == DeviceType.CUDA and not any(k in e.name.lower() for k in OURS):
                    durations[e.name].append(e.time_range.elapsed_us())
            for kernel, ds in durations.items():
                kernel_us[kernel] += statistics.median(ds)
        print(json.dumps({"task": name, "shapes": len(inputs), "events_us": round(events_us, 3),
                          "cupti_us": round(sum(kernel_us.values()), 3),
                          "cupti_by_kernel_us": {k[:60]: round(v, 3) for k, v in kernel_us.items()}}), flush=True)


if __name__ == "__main__":
    main()
