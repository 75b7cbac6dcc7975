"""Timing inside a worker: `triton.testing.do_bench` with the L2 cache flushed.

do_bench takes its warm-up and repetitions in milliseconds. A preset counted in
iterations (the paper's: 100 warm-up, 1000 timed) is turned into milliseconds
from a short estimate made the way do_bench makes its own (five runs, each
after an L2 flush), so do_bench runs about that many iterations.
`max_ms` caps one measurement, so a slow kernel cannot take minutes.

`ahead_us` keeps the GPU ahead of the CPU: each L2 flush is followed by a GPU wait of
that many µs (`torch.cuda._sleep`), before do_bench records the start event.
Without it a kernel of a few µs is timed while the GPU waits for the Python that
launches it: on an idle H100 the same kernel on the same inputs measured 4 µs in
one do_bench call and 50 µs in the next (benchmarks/timing_clocks.py), which made
the runtime-weighted speedup of a kernel against itself swing from 0.7 to 1.6 on
tasks with many small shapes. Large kernels were unaffected (0.2 % between calls).
The wait is not timed; the estimate that turns iterations into milliseconds runs
with it, as do_bench's own estimate does, so the counts stay what the preset says.
"""

from __future__ import annotations

import contextlib
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


def bench(fn, preset: dict, gpu: bool, guard) -> tuple[list[float], int]:
    """Per-iteration times in milliseconds, and how many GPU waits were queued (see `gpu_ahead`)."""
    if not gpu:
        # Interpreter timings measure Python, not a GPU: one run is all they are worth.
        times = []
        for _ in range(int(preset.get("interpreter_rep", 1))):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000.0)
        return times, 0
    do_bench = guard.original("triton.testing:do_bench")
    warmup, rep = float(preset["warmup"]), float(preset["rep"])
    with gpu_ahead(float(preset.get("ahead_us") or 0.0)) as waits:
        if preset.get("unit", "iters") == "iters":
            est = _estimate_ms(fn)
            warmup, rep = warmup * est, rep * est
        max_ms = preset.get("max_ms")
        if max_ms:
            warmup, rep = min(warmup, max_ms / 4), min(rep, max_ms)
        times = do_bench(fn, warmup=warmup, rep=rep, return_mode="all")
    return [float(t) for t in times], len(waits)


@contextlib.contextmanager
def gpu_ahead(us: float, driver=None, sleep=None):
    """Within the block, the active Triton driver's `clear_cache` (do_bench's L2 flush before each timed
    call) also queues a GPU wait of `us` microseconds (cycles at 2 GHz; a slower clock waits longer).
    Yields the list of waits queued, so a caller can tell a Triton whose do_bench flushes some other way."""
    waits: list[int] = []
    if us <= 0:
        yield waits
        return
    if driver is None:
        import triton
        driver = triton.runtime.driver.active
    if sleep is None:
        import torch
        sleep = torch.cuda._sleep
    flush, own = driver.clear_cache, vars(driver).get("clear_cache")
    cycles = int(us * 2000)

    def clear_cache(cache):
        flush(cache)
        sleep(cycles)
        waits.append(cycles)

    driver.clear_cache = clear_cache  # on the instance: the class's method is left alone
    try:
        yield waits
    finally:
        if own is None:
            del driver.clear_cache
        else:
            driver.clear_cache = own
