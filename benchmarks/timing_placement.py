"""Does a kernel's time depend on where its buffers lie in GPU memory? (GPU machine)

    python3 benchmarks/timing_placement.py --tasks matrix_transpose,destindex_copy_kv2 --placements 6

For each task's largest and median search shape, in one process: the inputs are made `--placements`
times (the same values each time, from the same seed), each set at new addresses (earlier sets kept
alive, or freed first with --free), and each set is timed `--repeats` times with do_bench (L2 flushed,
median). The spread *within* a placement is measurement noise; the spread *between* placements, of the
same kernel on the same values, is what moving the buffers does. Run it in two processes to see whether
a process's placement sticks. One JSON line per shape, by the median of each call's iterations and by their
mean.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from _task_harness import starting_harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="matrix_transpose,destindex_copy_kv2,dequantize_rowwise")
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--free", action="store_true", help="free each set (and empty the cache) before the next")
    args = parser.parse_args()

    import torch
    import triton

    from kernelband.worker.harness import tensors_in

    folder = Path(tempfile.mkdtemp(prefix="kb-place-"))
    for name in args.tasks.split(","):
        h, search = starting_harness(name, folder)
        for shape in dict.fromkeys([search[-1]["index"], search[len(search) // 2]["index"]]):
            kept, per_placement, means, addresses = [], [], [], []
            for _ in range(args.placements):
                torch.manual_seed(0)
                inputs = h.make_inputs(shape, "cuda")
                addresses.append(hex(min(t.data_ptr() for t in tensors_in(inputs))))
                runs = [triton.testing.do_bench(lambda h=h, i=inputs: h.call(i), warmup=25, rep=100, return_mode="all")
                        for _ in range(args.repeats)]
                per_placement.append([statistics.median(r) for r in runs])
                means.append([statistics.fmean(r) for r in runs])
                if args.free:
                    del inputs
                    torch.cuda.empty_cache()
                else:
                    kept.append(inputs)
            medians = [statistics.median(t) for t in per_placement]
            mean_ms = [statistics.fmean(m) for m in means]
            within = statistics.median(max(t) / min(t) for t in per_placement)
            print(json.dumps({"task": name, "shape": h._shapes[shape]["label"], "free": args.free,
                              "ms_per_placement": [round(m, 5) for m in medians],
                              "between_max_over_min": round(max(medians) / min(medians), 3),
                              "within_max_over_min_median": round(within, 3),
                              # the same by the mean of the iterations (run AM: cosine_compute's 2^27 shape
                              # spread less by the mean than by the median)
                              "mean_ms_per_placement": [round(m, 5) for m in mean_ms],
                              "mean_between_max_over_min": round(max(mean_ms) / min(mean_ms), 3),
                              "lowest_address": addresses}),
                  flush=True)
            del kept
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
