"""Where a two-launch call's span moves between measurements: each kernel's time and the gap between them.

The self-evaluation found add_rmsnorm's spans bimodal per measurement (8.3 or 9.2 µs at 2048 x 768, the same
process, the same inputs). This times the example as the span timer does (L2 flush, a GPU wait, the call,
under torch.profiler), measurement after measurement, and prints per measurement the median of each part:
the add kernel, the gap, the RMSNorm kernel, the span. `--fixed` also times it with `h` and `out` allocated
once, outside the call, to tell the caching allocator's placement from the launch path.

    python benchmarks/span_gaps.py --measurements 12
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics

import torch
import triton
from torch.autograd import DeviceType

# the example's file alone: the package's imports (libcst) are not needed on the GPU machine for this
_spec = importlib.util.spec_from_file_location(
    "add_rmsnorm", pathlib.Path(__file__).parents[1] / "src/kernelband/tasks/examples/add_rmsnorm.py")
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)


def measure(fn, calls: int, wait_us: float) -> list[tuple[float, float, float]]:
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            cache.zero_()
            torch.cuda._sleep(int(wait_us * 2000))
            fn()
        torch.cuda.synchronize()
    gpu = sorted((e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.CUDA),
                 key=lambda e: e.start_ns())
    marks = [i for i, e in enumerate(gpu) if "spin_kernel" in e.name()]
    parts = []
    for k, m in enumerate(marks):
        end = marks[k + 1] - 1 if k + 1 < len(marks) else len(gpu)
        group = [e for e in gpu[m + 1:end] if "fill" not in e.name().lower()]
        if len(group) != 2:
            continue
        a, b = group
        parts.append(((a.end_ns() - a.start_ns()) / 1e3, (b.start_ns() - a.end_ns()) / 1e3,
                      (b.end_ns() - b.start_ns()) / 1e3))
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", type=int, default=12)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--wait-us", type=float, default=300.0)
    ap.add_argument("--shapes", default="2048x768,1999x1000,4096x1024")
    args = ap.parse_args()
    for text in args.shapes.split(","):
        rows, cols = map(int, text.split("x"))
        time_shape(rows, cols, args)


def time_shape(rows: int, cols: int, args: argparse.Namespace) -> None:
    x, y, w = ex.make_inputs("cuda", rows, cols)
    h, out = torch.empty_like(x), torch.empty_like(x)
    block = triton.next_power_of_2(cols)

    def fixed():
        ex.add_kernel[(rows,)](x, y, h, cols, BLOCK_SIZE=block, num_warps=4)
        ex.rmsnorm_kernel[(rows,)](out, h, w, cols, 1e-6, BLOCK_SIZE=block, num_warps=4)

    for name, fn in (("entry", lambda: ex.add_rmsnorm(x, y, w)), ("fixed", fixed)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        for i in range(args.measurements):
            parts = measure(fn, args.calls, args.wait_us)
            k1, gap, k2 = (statistics.median(p[j] for p in parts) for j in range(3))
            span = statistics.median(p[0] + p[1] + p[2] for p in parts)
            print(f"{rows}x{cols} {name} m{i:02d} n={len(parts)} add {k1:.2f} gap {gap:.2f} "
                  f"rms {k2:.2f} span {span:.2f} us", flush=True)

if __name__ == "__main__":
    main()
