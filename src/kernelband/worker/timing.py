"""Timing inside a worker: `triton.testing.do_bench` with the L2 cache flushed.

do_bench takes its warm-up and repetitions in milliseconds. A preset counted in
iterations (the paper's: 100 warm-up, 1000 timed) is turned into milliseconds
from a short estimate made the way do_bench makes its own (five runs, each
after an L2 flush), so do_bench runs about that many iterations.
`max_ms` caps one measurement, so a slow kernel cannot take minutes.
"""

from __future__ import annotations

import time


def _estimate_ms(fn) -> float:
    import torch
    import triton

    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(5):
        driver.clear_cache(cache)
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end) / 5, 1e-3)


def bench(fn, preset: dict, gpu: bool, guard) -> list[float]:
    """Per-iteration times in milliseconds."""
    if not gpu:
        # Interpreter timings measure Python, not a GPU: one run is all they are worth.
        times = []
        for _ in range(int(preset.get("interpreter_rep", 1))):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000.0)
        return times
    do_bench = guard.original("triton.testing:do_bench")
    warmup, rep = float(preset["warmup"]), float(preset["rep"])
    if preset.get("unit", "iters") == "iters":
        est = _estimate_ms(fn)
        warmup, rep = warmup * est, rep * est
    max_ms = preset.get("max_ms")
    if max_ms:
        warmup, rep = min(warmup, max_ms / 4), min(rep, max_ms)
    times = do_bench(fn, warmup=warmup, rep=rep, return_mode="all")
    return [float(t) for t in times]
