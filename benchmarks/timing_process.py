"""What moves a µs kernel's time from one worker process to the next? (GPU machine)

    for p in 1 2 3 4; do python3 benchmarks/timing_process.py --tasks l2_norm_triton1,geglu_tanh_triton; done

The repeat part (eval_throughput.py) found that on tasks whose every shape runs in a few µs the candidate's
time moves by 1-2 % from one evaluation to the next, the same way on all its shapes, while each shape's own
noise would give 0.2-0.5 %: something each new worker process brings. In one process this times the task's
starting kernel over all its search shapes the way a worker does (`kernelband.worker.timing.bench` with the
`default` preset: the GPU-ahead wait, the L2 flushed, the median), `--levels` times for each factor, and
prints the summed time of each level:
- `same`: nothing changes (the process's own noise);
- `inputs`: new inputs at new addresses, the earlier ones kept alive;
- `module`: the module imported again from another file, so its kernels load at new code addresses;
- `flush`: do_bench's L2-flush buffer at a new address;
- `pages`: the inputs copied into new physical pages: each tensor into an allocation of over 2 MiB of its
  own (PyTorch's large pool: its own cudaMalloc), where `inputs` leaves small tensors in the same 2 MiB
  segment of the caching allocator, hence the same physical page. (Run AI found none of the first four
  moved l2_norm_triton1 as separate processes do, run AJ that `pages` does not either.)
- `outputs`: before each level, one call's outputs per shape kept alive and 640 KiB more of the caching
  allocator's small pool held (three to a 2 MiB segment), so the timed calls' outputs land at other
  addresses and, every few levels, in another segment;
- `ring`: each call's output kept alive for 8 calls more, so that successive calls write to 9 places (a
  cure, if the outputs' placement sets the time: compare its totals between processes with `same`'s);
- `stream`: the timing on a new CUDA stream (torch's stream pool, round robin over the driver's hardware
  queues, CUDA_DEVICE_MAX_CONNECTIONS of them), the flush and the GPU-ahead wait on it too.
A factor whose levels spread as much as separate processes do is the cause. One JSON line per task and
factor; run it in several processes and compare the `same` totals between them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import tempfile
from pathlib import Path

from _task_harness import starting_harness

from kernelband.worker.harness import in_own_pages

PRESET = {"warmup": 10, "rep": 100, "unit": "iters", "max_ms": 40.0, "ahead_us": 150.0}


def total_ms(h, inputs: dict, ring: int = 0) -> float:
    """The summed median over the shapes; `ring`: each call's output kept alive for that many calls more, so
    that successive calls write to `ring + 1` places."""
    from kernelband.worker import timing
    from kernelband.worker.guards import TamperGuard

    guard = TamperGuard()  # what a worker passes: its `original` do_bench
    kept = collections.deque(maxlen=max(ring, 1))

    def call(i):
        out = h.call(i)
        if ring:
            kept.append(out)
        return out

    return sum(statistics.median(timing.bench(lambda i=i: call(i), PRESET, True, guard)[0])
               for i in inputs.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="l2_norm_triton1,geglu_tanh_triton,square_matrix,triton_softmax")
    parser.add_argument("--levels", type=int, default=5)
    parser.add_argument("--factors", default="same,inputs,module,flush,pages,outputs,ring,stream")
    args = parser.parse_args()

    import torch
    import triton

    driver = triton.runtime.driver.active
    folder = Path(tempfile.mkdtemp(prefix="kb-process-"))
    kept = []
    for name in args.tasks.split(","):
        h, search = starting_harness(name, folder)
        shapes = [s["index"] for s in search]

        def fresh_inputs(h=h, shapes=shapes):
            torch.manual_seed(0)
            return {i: h.make_inputs(i, "cuda") for i in shapes}

        inputs = fresh_inputs()
        total_ms(h, inputs)  # compile and warm every shape
        for factor in args.factors.split(","):
            totals = []
            for level in range(args.levels):
                hh, ii = h, inputs
                if factor == "inputs" and level:
                    ii = fresh_inputs()
                    kept.append(ii)
                elif factor == "pages" and level:
                    ii = {i: in_own_pages(x) for i, x in fresh_inputs().items()}  # harness.in_own_pages
                    kept.append(ii)
                elif factor == "module" and level:
                    (folder / f"m{level}").mkdir(exist_ok=True)
                    hh, _ = starting_harness(name, folder / f"m{level}")
                    total_ms(hh, ii)  # compile and load, untimed
                elif factor == "flush" and level:
                    pad = torch.empty(level * 7 * 2**20 + 4096 * level, dtype=torch.int8, device="cuda")
                    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
                    kept.append((pad, cache))
                    driver.get_empty_cache_for_benchmark = lambda cache=cache: cache
                if factor == "outputs" and level:  # the last outputs' blocks held, and 640 KiB more
                    kept.append(([h.call(i) for i in ii.values()], torch.empty(640 * 1024, dtype=torch.int8,
                                                                            device="cuda")))
                stream = torch.cuda.Stream() if factor == "stream" and level else None
                if stream is not None:
                    kept.append(stream)
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    totals.append(total_ms(hh, ii, ring=8 if factor == "ring" else 0))
                if factor == "flush":
                    vars(driver).pop("get_empty_cache_for_benchmark", None)
            mean = statistics.fmean(totals)
            print(json.dumps({"task": name, "factor": factor, "shapes": len(shapes),
                              "totals_us": [round(t * 1000, 3) for t in totals],
                              "cv": round(statistics.stdev(totals) / mean, 5),
                              "max_over_min": round(max(totals) / min(totals), 4)}), flush=True)


if __name__ == "__main__":
    main()
