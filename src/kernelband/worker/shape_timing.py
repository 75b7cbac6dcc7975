"""One shape timed in the worker: copies of its inputs, the device time per call (`timing.bench`) and, beside it,
the wall time per call that an eager program pays (`timing.call_time`)."""

from __future__ import annotations

import itertools
import time

from kernelband.worker.guards import unhooked
from kernelband.worker.timing import bench, call_time


def placements(harness, index: int, preset: dict, device: str) -> list:
    """The shape's inputs, or as many copies of them (the same values, other addresses) as
    `preset["placements"]` asks and `preset["placement_mib"]` holds. With more than one, each copy's tensors
    lie in allocations of their own (`harness.in_own_pages`): other physical pages, not only other
    addresses in the caching allocator's shared segment."""
    from kernelband.worker.harness import in_own_pages, own_pages_bytes
    first = harness.make_inputs(index, device)
    want = int(preset.get("placements") or 1)
    if want > 1:
        cost = max(own_pages_bytes(first), 1)
        want = min(want, int(float(preset.get("placement_mib", 64.0)) * 2**20 // cost))
    if want <= 1:
        return [first]
    return [in_own_pages(first) for _ in range(want)]


def time_shape(harness, index: int, preset: dict, gpu: bool, guard, span: bool, device: str,
               call: bool = True) -> dict:
    """The reply to `time` (less `tampered`): the device times of the calls ("times", ms), the GPU waits queued,
    how many copies of the inputs the calls cycled through, with `call` the wall time per call of back-to-back
    calls over the same copies ("call_ms", with "calls" per round and "rounds"), and where the seconds went
    ("phases"). Raises what the module raises."""
    t0 = time.perf_counter()
    copies = placements(harness, index, preset, device)
    made = time.perf_counter() - t0
    turn = itertools.cycle(copies)

    def fn():
        return harness.call(next(turn))

    with unhooked():
        times, waits, info = bench(fn, preset, gpu, guard, span)
        t0 = time.perf_counter()
        per_call = call_time(fn, gpu, int(preset.get("interpreter_rep", 1))) if call else {}
    info.setdefault("phases", {}).update(inputs=made, call=time.perf_counter() - t0)
    return {"ok": True, "times": times, "gpu_waits": waits, "placements": len(copies), **info, **per_call}
