"""Do short kernels' timings follow the SM clock? (GPU machine; diagnostic)

    python3 benchmarks/timing_clocks.py --tasks dequantize_rowwise,matrix_transpose --calls 6

For each task's smallest and largest search shape, `--calls` do_bench calls (L2 flushed, median of
100 ms) while a thread samples the SM clock through NVML every millisecond, first as is, then with a
20 ms matrix-product burst right before each call. One JSON line per shape and mode: each call's
median time and mean SM clock.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _task_harness import starting_harness


class SmClock:
    def __init__(self, index: int = 0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlInit_v2()
        self.handle = ctypes.c_void_p()
        self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle))

    def mhz(self) -> int:
        value = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(value))  # NVML_CLOCK_SM
        return value.value


def sampled(clock: SmClock, fn):
    samples, stop = [], threading.Event()

    def loop():
        while not stop.is_set():
            samples.append(clock.mhz())
            time.sleep(0.001)
    t = threading.Thread(target=loop)
    t.start()
    try:
        value = fn()
    finally:
        stop.set()
        t.join()
    return value, statistics.mean(samples) if samples else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="matrix_transpose,destindex_copy_kv2,dequantize_rowwise,add_value")
    parser.add_argument("--calls", type=int, default=6)
    args = parser.parse_args()

    import torch
    import triton


    clock = SmClock()
    folder = Path(tempfile.mkdtemp(prefix="kb-clock-"))
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)

    def burst(ms: float = 20.0):
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            a @ a
            torch.cuda.synchronize()

    for name in args.tasks.split(","):
        h, search = starting_harness(name, folder)
        for shape in dict.fromkeys([search[0]["index"], search[-1]["index"]]):
            torch.manual_seed(0)
            inputs = h.make_inputs(shape, "cuda")
            for mode in ("plain", "burst"):
                calls = []
                for _ in range(args.calls):
                    if mode == "burst":
                        burst()
                    ms, mhz = sampled(clock, lambda h=h, i=inputs: triton.testing.do_bench(
                        lambda: h.call(i), warmup=25, rep=100, return_mode="median"))
                    calls.append((round(ms, 5), round(mhz or 0)))
                print(json.dumps({"task": name, "shape": h._shapes[shape]["label"], "mode": mode,
                                  "calls_ms_mhz": calls}), flush=True)
            del inputs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
