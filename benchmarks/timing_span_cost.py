"""What the span timer costs a measurement, and where (GPU machine):

    python3 benchmarks/timing_span_cost.py --tasks l2_norm_triton1 --n 10

Times `kernelband.worker.timing.bench` on each search shape of the starting kernel, the `default` preset's
way, with the events (`span` off), with spans read from the profiler's raw record (`_activities`, the way the
evaluator reads them), and with spans read through `prof.events()` (torch builds its event tree first), and
the same with 32 copies of the inputs (Preset.placements). First, what starting the profiler costs a fresh
process, and the same again (`timing.warm_profiler`). Then one JSON line per task: the median seconds of one
measurement per way, over `n` rounds of the shapes, and the spans' sums, so the two readings can be compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _task_harness import starting_harness

from kernelband.worker import timing
from kernelband.worker.harness import in_own_pages

PRESET = {"warmup": 10, "rep": 100, "unit": "iters", "max_ms": 40.0, "ahead_us": 150.0}


def _tree_activities(prof):
    from torch.autograd import DeviceType

    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == DeviceType.CUDA]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="l2_norm_triton1")
    parser.add_argument("--n", type=int, default=10)
    args = parser.parse_args()

    import itertools

    import torch

    from kernelband.worker.guards import TamperGuard

    # a fresh process's first profiler session, which the worker's start now pays (`warm_profiler`), and a second
    print(json.dumps({"warm_profiler_s": [round(timing.warm_profiler(), 4), round(timing.warm_profiler(), 4)]}),
          flush=True)
    guard = TamperGuard()
    folder = Path(tempfile.mkdtemp(prefix="kb-spancost-"))
    raw_reader = timing._activities
    for name in args.tasks.split(","):
        h, search = starting_harness(name, folder)
        torch.manual_seed(0)
        inputs = [h.make_inputs(s["index"], "cuda") for s in search]
        ways = {"events": (False, raw_reader, 1), "span_raw": (True, raw_reader, 1),
                "span_tree": (True, _tree_activities, 1), "span_raw_copies32": (True, raw_reader, 32)}
        secs = {w: [] for w in ways}
        sums = {w: [] for w in ways}
        for _ in range(args.n):
            for way, (span, reader, copies) in ways.items():
                timing._activities = reader
                total = 0.0
                for x in inputs:
                    t0 = time.perf_counter()
                    turn = itertools.cycle([x] if copies == 1 else [in_own_pages(x) for _ in range(copies)])
                    times, _, info = timing.bench(lambda h=h, turn=turn: h.call(next(turn)), PRESET, True, guard, span)
                    secs[way].append(time.perf_counter() - t0)
                    total += statistics.median(times)
                sums[way].append(total * 1000)
        timing._activities = raw_reader
        print(json.dumps({"task": name, "shapes": len(inputs),
                          "seconds_per_measurement": {w: round(statistics.median(v), 4) for w, v in secs.items()},
                          "sum_us_median": {w: round(statistics.median(v), 3) for w, v in sums.items()},
                          "sum_us_range": {w: [round(min(v), 3), round(max(v), 3)] for w, v in sums.items()}}),
              flush=True)


if __name__ == "__main__":
    main()
