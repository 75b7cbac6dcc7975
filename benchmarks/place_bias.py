"""Whether where a kernel's input and output lie sets its time: the softmax example's kernel, per (input copy,
output buffer) pair.

Run BB's self-evaluation found softmax's reference side slower than its candidate side, the same kernel, on
four shapes in every one of ten processes (2048 x 4096: 1.5-4.4 %), while the timing cycles the inputs over
copies in pages of their own and each call's output comes from the caching allocator, the same block call
after call. This times the kernel alone, as the span timer does (L2 flush, a GPU wait, the call, under
torch.profiler, CUPTI's record of the kernel), on `--copies` inputs and as many outputs, each in an allocation
of its own of over 2 MiB, every pair in turn: if the time follows the output (or the input), a side whose
output happens to lie in a slow place is slow in every measurement, and only cycling that side over places
averages it out. `--ring` also times the calls cycling over all the pairs, as a timing that cycled both would.

    python benchmarks/place_bias.py --shapes 2048x4096,4096x512,1823x781,512x16384,8192x1024
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics

import torch
import triton
from torch.autograd import DeviceType

# the example's file alone: the package's imports are not needed for this
_spec = importlib.util.spec_from_file_location(
    "softmax_example", pathlib.Path(__file__).parents[1] / "src/kernelband/tasks/examples/softmax.py")
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

OWN_PAGES = 2 * 2**20 + 4096  # over a 2 MiB page: a tensor this size or larger has pages of its own


def own(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` in an allocation of its own of over 2 MiB."""
    room = max(t.numel(), -(-OWN_PAGES // t.element_size()))
    copy = torch.empty(room, dtype=t.dtype, device=t.device)[:t.numel()].view(t.shape)
    copy.copy_(t)
    return copy


def spans_us(calls: list, wait_us: float) -> list[float]:
    """Each call's kernel time (µs) as CUPTI records it, each call after an L2 flush and a GPU wait."""
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for fn in calls:
            cache.zero_()
            torch.cuda._sleep(int(wait_us * 2000))
            fn()
        torch.cuda.synchronize()
    gpu = [e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.CUDA]
    found = [(e.end_ns() - e.start_ns()) / 1e3 for e in gpu if "softmax_kernel" in e.name()]
    if len(found) != len(calls):
        raise SystemExit(f"{len(found)} softmax_kernel records for {len(calls)} calls; kernels seen: "
                         f"{sorted({e.name() for e in gpu})[:8]}")
    return found


def time_shape(rows: int, cols: int, args: argparse.Namespace) -> dict:
    torch.manual_seed(0)
    (x,) = ex.make_inputs("cuda", rows, cols)
    ins = [own(x) for _ in range(args.copies)]
    outs = [own(torch.empty_like(x)) for _ in range(args.copies)]

    def call(i: int, j: int):
        xi, oj = ins[i], outs[j]
        return lambda: ex.softmax_kernel[(rows,)](oj, xi, xi.stride(0), oj.stride(0), cols, BLOCK_SIZE=128,
                                                  num_warps=1)

    for i in range(args.copies):
        call(i, i)()
    torch.cuda.synchronize()
    pairs = [(i, j) for i in range(args.copies) for j in range(args.copies)]
    grid = {p: [] for p in pairs}
    ring = []
    for _ in range(args.repeats):
        for p in pairs:  # each pair its own measurement, in turn, so drift falls on all alike
            grid[p].append(statistics.median(spans_us([call(*p)] * args.calls, args.wait_us)))
        if args.ring:
            cycle = [call(*pairs[k % len(pairs)]) for k in range(args.calls)]
            ring.append(statistics.fmean(spans_us(cycle, args.wait_us)))
    cell = {p: statistics.median(v) for p, v in grid.items()}
    by_out = [statistics.fmean(cell[i, j] for i in range(args.copies)) for j in range(args.copies)]
    by_in = [statistics.fmean(cell[i, j] for j in range(args.copies)) for i in range(args.copies)]
    repeat_spread = statistics.median((max(v) - min(v)) / min(v) for v in grid.values())
    return {"shape": f"{rows}x{cols}", "by_output_us": [round(t, 3) for t in by_out],
            "by_input_us": [round(t, 3) for t in by_in],
            "output_spread": round((max(by_out) - min(by_out)) / min(by_out), 4),
            "input_spread": round((max(by_in) - min(by_in)) / min(by_in), 4),
            "repeat_spread": round(repeat_spread, 4),
            "ring_us": [round(t, 3) for t in ring],
            "input_addresses": [t.data_ptr() for t in ins], "output_addresses": [t.data_ptr() for t in outs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="2048x4096,4096x512,1823x781,512x16384,8192x1024")
    ap.add_argument("--copies", type=int, default=4, help="inputs and outputs, each in pages of its own")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each pair")
    ap.add_argument("--calls", type=int, default=50, help="calls a measurement")
    ap.add_argument("--wait-us", type=float, default=150.0)
    ap.add_argument("--ring", action="store_true", help="also time calls cycling over all the pairs")
    args = ap.parse_args()
    try:
        shapes = [tuple(map(int, text.split("x"))) for text in args.shapes.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes) or min(args.copies, args.repeats, args.calls) < 1:
        ap.exit(2, f"error: --shapes is ROWSxCOLS[,ROWSxCOLS...] of positive integers (got {args.shapes!r}), and "
                   "--copies, --repeats and --calls at least 1\n")
    for rows, cols in shapes:
        row = time_shape(rows, cols, args)
        print(json.dumps({**row, "device": torch.cuda.get_device_name()}), flush=True)


if __name__ == "__main__":
    main()
