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
one do_bench call and 50 µs in the next (BENCHMARKS.md, the timing probes), which made
the runtime-weighted speedup of a kernel against itself swing from 0.7 to 1.6 on
tasks with many small shapes. Large kernels were unaffected (0.2 % between calls).
The wait is not timed; the estimate that turns iterations into milliseconds runs
with it, as do_bench's own estimate does, so the counts stay what the preset says.

The wait must outlast the CPU's work to enqueue one call: a call that launches several
kernels with Python in between (a torch reduction, then a Triton kernel) takes 100 µs or
more, more still on a busy host. `ahead_for` measures that host time first and lengthens
the wait to three times it (capped at 2 ms). A call that waits for the GPU itself
(`.item()`, a synchronisation) cannot be kept ahead of: it is reported (`host_sync`), and
its times include the CPU's.

Events time more than the kernel. After the flush and the wait, a kernel of a few µs spends most of its
event time being started: on an H200, l2_norm_triton1's 11 one-block kernels summed to 49-52 µs by events
and to 17.3 µs by CUPTI's record of the kernels' execution, and across 9 processes the events' sum moved
by 1.8 % (CV) while CUPTI's held to 0.2 % (BENCHMARKS.md, timing repeatability). The per-process part lies in the
launch. So `span` (Preset.timer, for shapes the parent finds short) runs the same do_bench under
torch.profiler and gives each timed call's span on the GPU instead: from its first kernel's start to its
last kernel's end, as CUPTI records them, less the launch gaps between its kernels. The GPU starts a
queued kernel 1 or 2 µs after the one before ends, and which of the two holds for a whole measurement
and flips between measurements: add_rmsnorm's two kernels at 2048 x 768 on an H200 ran 4.2 and 3.0 µs
every time, with 1.0 or 2.0 µs between them (benchmarks/span_gaps.py), so its span moved by 11 % from one
round to the next. A gap over LAUNCH_GAP_US stays in: the host in between (a synchronisation, a copy, work
on the CPU) is part of what the call costs. What a launch costs the program is the wall time per call
(`call_time`), not the device time.
"""

from __future__ import annotations

import contextlib
import statistics
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


def tune_with(driver, do_bench, warmup: float, rep: float, ahead_us: float = 0.0, sleep=None) -> None:
    """Autotuners that bring no benchmark of their own time each config with do_bench(warmup, rep) (ms)
    instead of Triton's 25 and 100, and with the GPU-ahead wait of `ahead_us` after each flush (`gpu_ahead`),
    as the timing itself does: without it a config of a few µs is timed on the Python that launches it, and
    the config chosen is a draw (geglu_tanh_triton's autotuned forward kernel came out
    at 0.20x in one process and 1.0x in the next). Triton's Autotuner asks the active driver for its
    benchmarker (`driver.active.get_benchmarker()`) when it first tunes, so the worker sets it on the driver
    instance (the class's method is left alone) before the module is imported."""

    def bench(fn, **kwargs):
        with gpu_ahead(ahead_us, driver=driver, sleep=sleep):
            return do_bench(fn, warmup=warmup, rep=rep, **kwargs)

    driver.get_benchmarker = lambda: bench


# The GPU waits queued before the host-time probes of a call. The first is short: a call that enqueues
# (nearly all) is decided in 3 waits of 0.5 ms; what a probe decides does not depend on its wait, only whether
# the call kept up with it (the probes were 0.22 s of a candidate's 1.65 s timing with 2 ms first).
PROBES_US = (500.0, 8000.0, 32000.0)
MAX_AHEAD_US = 2000.0


def ahead_for(fn, base_us: float, sleep=None, synchronize=None, clock=time.perf_counter) -> tuple[float, bool]:
    """The GPU-ahead wait `fn` needs (µs), and whether `fn` waits for the GPU itself.

    Probes, each three times: a GPU wait queued, then `fn()` timed on the host. A call that only enqueues
    returns in its launch time whatever the wait; a call that synchronises returns only once the wait is
    over. So while the host time reaches the wait, the next probe queues a longer one; a call that keeps
    up with the longest synchronises. Otherwise the wait becomes three times the call's host time plus
    50 µs (at least `base_us`, at most MAX_AHEAD_US)."""
    if sleep is None or synchronize is None:
        import torch
        sleep, synchronize = sleep or torch.cuda._sleep, synchronize or torch.cuda.synchronize
    for probe_us in PROBES_US:
        host_us = []
        for _ in range(3):
            synchronize()
            sleep(int(probe_us * 2000))
            t0 = clock()
            fn()
            host_us.append((clock() - t0) * 1e6)
        synchronize()
        host = statistics.median(host_us)
        if host < 0.8 * probe_us:
            return min(max(base_us, 3.0 * host + 50.0), MAX_AHEAD_US), False
    return base_us, True


SPIN_KERNEL = "spin_kernel"  # the GPU-ahead wait's kernel (torch.cuda._sleep), as CUPTI names it
# The longest idle gap between two activities of one call that a span leaves out (µs): the GPU starting the next
# queued kernel takes 1-2 µs; a gap with the host in between (a synchronisation, then a launch) takes longer.
LAUNCH_GAP_US = 3.0


def busy_us(group: list[tuple[str, float, float]]) -> float:
    """A call's span (µs) from its first activity's start to its last one's end, less the idle gaps of up to
    LAUNCH_GAP_US between them; activities that overlap (other streams) count once."""
    acts = sorted(group, key=lambda a: a[1])
    total, end = 0.0, acts[0][1]
    for _, start, stop in acts:
        if start > end and start - end > LAUNCH_GAP_US:
            total += start - end  # the host in between: part of the call
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total


def call_spans(activities: list[tuple[str, float, float]], calls: int, waits: int) -> tuple[list[float], str]:
    """Each of do_bench's last `calls` timed calls' span on the GPU (ms, `busy_us`), from CUPTI's device
    activities `(name, start_us, end_us)`: the calls are what follows each GPU-ahead wait's kernel, up to the
    activity before the next one (the next call's L2 flush). Returns ([], why) when the activities cannot be read so:
    as many wait kernels as waits queued, and a kernel in every call, or nothing is trusted."""
    acts = sorted(activities, key=lambda a: a[1])
    marks = [i for i, a in enumerate(acts) if SPIN_KERNEL in a[0]]
    if len(marks) != waits:
        return [], f"{len(marks)} wait kernels for {waits} waits queued"
    if len(marks) < calls:
        return [], f"{len(marks)} waits for {calls} timed calls"
    timed, spans = marks[-calls:], []
    for k, m in enumerate(timed):
        end = timed[k + 1] - 1 if k + 1 < calls else len(acts)  # up to the next call's flush
        group = acts[m + 1:end]
        if not group:
            return [], "a timed call with no GPU activity"
        spans.append(busy_us(group) / 1000.0)
    return spans, ""


def _activities(prof) -> list[tuple[str, float, float]]:
    """The GPU's activities (name, start µs, end µs) from the profiler's raw record (kineto's events), or,
    on a torch without that, from `prof.events()`, which first builds an event tree of everything (0.05 s
    more a measurement on an H200)."""
    from torch.autograd import DeviceType

    raw = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if raw is not None:
        gpu = [e for e in raw.events() if e.device_type() == DeviceType.CUDA]
        # ns since the epoch, about 1.8e18: subtracted as integers first, since a float of that size in µs
        # keeps only quarters of a µs (every span came out a multiple of 0.25 µs so)
        base = min((e.start_ns() for e in gpu), default=0)
        return [(e.name(), (e.start_ns() - base) / 1000.0, (e.end_ns() - base) / 1000.0) for e in gpu]
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == DeviceType.CUDA]


def _timed_spans(do_bench, fn, warmup: float, rep: float, guard, waits: list) -> tuple[list[float], dict]:
    """do_bench under torch.profiler: the calls' spans (`call_spans`) and {"timer": "span"}; or do_bench's
    event times and {"timer": "events", "span_error": why} where CUPTI's record cannot be read."""
    before = len(waits)
    try:
        from torch.profiler import ProfilerActivity
        with guard.original("torch.profiler:profile")(activities=[ProfilerActivity.CUDA]) as prof:
            times = do_bench(fn, warmup=warmup, rep=rep, return_mode="all")
    except Exception as exc:  # noqa: BLE001 - no CUPTI here: the events time it (a failing call fails again)
        why = f"the profiler failed: {type(exc).__name__}: {str(exc)[:200]}"
        return do_bench(fn, warmup=warmup, rep=rep, return_mode="all"), {"timer": "events", "span_error": why}
    spans, why = call_spans(_activities(prof), len(times), len(waits) - before)
    if spans:
        return spans, {"timer": "span"}
    return times, {"timer": "events", "span_error": why}


def warm_profiler() -> float:
    """Start CUPTI in this process (an empty profiler session): seconds taken, 4.8-5.5 s on the GPU machine
    (BENCHMARKS.md, timing repeatability), which a process's first profiled do_bench otherwise pays inside the GPU's
    exclusive hold. The worker does it when a candidate of a task timed by spans loads (`op_load`). Nothing is
    raised: where the profiler cannot run, the span timer says so itself."""
    t0 = time.perf_counter()
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:  # no GPU work: it runs off the GPU lock
            torch.cuda.synchronize()
        _activities(prof)  # and the reading of its record
    except Exception:  # noqa: BLE001, S110 - no CUPTI: the span timer falls back to events and says why
        pass
    return time.perf_counter() - t0


# The per-call wall time (`call_time`): rounds of back-to-back calls, each round about CALL_ROUND_MS long (at
# least one call, at most MAX_CALLS) and all of them together about CALL_BUDGET_MS (at least one round, at most
# CALL_ROUNDS); the median round's time per call. A few hundred calls of a µs kernel a round: the host's time per
# call is what moves, and it is steady over that many; the budget keeps it a small part of a shape's timing.
CALL_ROUND_MS = 5.0
CALL_BUDGET_MS = 20.0
CALL_ROUNDS = 3
MAX_CALLS = 300


def call_time(fn, gpu: bool, interpreter_calls: int = 1, synchronize=None, clock=time.perf_counter) -> dict:
    """What an eager program pays per call of `fn`, host and device: back-to-back calls with no flush and no
    GPU-ahead wait, synchronised once per round, the round's wall time over its calls. Where the GPU's work per
    call is small, this is the host's time to launch (argument handling, allocations, the launches' Python),
    which the device time (`bench`, the GPU kept ahead) never shows. {"call_ms": the median round's ms per call,
    "calls": calls per round, "rounds": rounds}. On the interpreter the calls run on the CPU one after another:
    `interpreter_calls` of them in one round."""
    if not gpu:
        return _call_rounds(fn, max(1, interpreter_calls), 1, lambda: None, clock)
    if synchronize is None:
        import torch
        synchronize = torch.cuda.synchronize
    synchronize()
    t0 = clock()
    fn()
    synchronize()
    once_ms = max((clock() - t0) * 1000.0, 1e-4)  # a first estimate, its synchronisation included
    calls = int(min(MAX_CALLS, max(1, CALL_ROUND_MS // once_ms)))
    rounds = int(min(CALL_ROUNDS, max(1, CALL_BUDGET_MS // (calls * once_ms))))
    return _call_rounds(fn, calls, rounds, synchronize, clock)


def _call_rounds(fn, calls: int, rounds: int, synchronize, clock) -> dict:
    per_call = [back_to_back(fn, calls, synchronize, clock) for _ in range(rounds)]
    return {"call_ms": statistics.median(per_call), "calls": calls, "rounds": rounds}


def back_to_back(fn, calls: int, synchronize, clock=time.perf_counter) -> float:
    """One round: `calls` calls of `fn` one after another, synchronised before and after; ms per call."""
    synchronize()
    t0 = clock()
    for _ in range(calls):
        fn()
    synchronize()
    return (clock() - t0) * 1000.0 / calls


def bench(fn, preset: dict, gpu: bool, guard, span: bool = False) -> tuple[list[float], int, dict]:
    """Per-iteration times in milliseconds, how many GPU waits were queued (see `gpu_ahead`), and
    {"ahead_us", "host_sync"} (see `ahead_for`) with "phases": seconds spent probing the host time
    ("probe") and in the estimate and do_bench ("bench"). `span`: do_bench under torch.profiler, and the
    times are the calls' spans on the GPU (`call_spans`), "timer" says which ("span" or "events") and
    "span_error" why not."""
    if not gpu:
        # Interpreter timings measure Python, not a GPU: one run is all they are worth.
        times = []
        for _ in range(int(preset.get("interpreter_rep", 1))):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000.0)
        return times, 0, {"phases": {"bench": sum(times) / 1000.0}}
    do_bench = guard.original("triton.testing:do_bench")
    warmup, rep = float(preset["warmup"]), float(preset["rep"])
    ahead, info = float(preset.get("ahead_us") or 0.0), {}
    t0 = time.perf_counter()
    if ahead > 0:
        ahead, sync = ahead_for(fn, ahead)
        info = {"ahead_us": ahead, "host_sync": sync}
    t1 = time.perf_counter()
    with gpu_ahead(ahead) as waits:
        if preset.get("unit", "iters") == "iters":
            est = _estimate_ms(fn)
            warmup, rep = warmup * est, rep * est
        max_ms = preset.get("max_ms")
        if max_ms:
            warmup, rep = min(warmup, max_ms / 4), min(rep, max_ms)
        if span:
            times, read = _timed_spans(do_bench, fn, warmup, rep, guard, waits)
            info.update(read)
        else:
            times = do_bench(fn, warmup=warmup, rep=rep, return_mode="all")
    info["phases"] = {"probe": t1 - t0, "bench": time.perf_counter() - t1}
    return [float(t) for t in times], len(waits), info


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
