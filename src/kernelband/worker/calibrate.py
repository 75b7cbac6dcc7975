"""Measure a GPU's peak copy bandwidth, dense matmul throughput and launch floor (run inside a worker)."""

from __future__ import annotations

import traceback

import triton


@triton.jit
def _empty_kernel(x_ptr):
    pass


def measure(do_bench) -> dict:
    import torch

    name = torch.cuda.get_device_name(0)
    best_bw = 0.0
    for n_bytes in (256 << 20, 1 << 30):
        x = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda").uniform_()
        y = torch.empty_like(x)
        ms = do_bench(lambda x=x, y=y: y.copy_(x), warmup=25, rep=200, return_mode="median")
        best_bw = max(best_bw, 2 * n_bytes / (ms * 1e-3) / 1e9)  # bytes read + bytes written
        del x, y
    flops = {}
    n = 8192
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = do_bench(lambda a=a, b=b: a @ b, warmup=25, rep=200, return_mode="median")
        flops[label] = 2 * n**3 / (ms * 1e-3) / 1e12
        del a, b
    torch.cuda.empty_cache()
    return {"device": name, "bw_gbps": best_bw, "tflops": max(flops.values()), "tflops_by_dtype": flops,
            "torch": torch.__version__}


def run(request: dict, guard, gpu: bool) -> dict:
    """A `calibrate` request: the peaks (unless `floor_only`) and, with `preset`, the launch floor's times; a
    floor that cannot be timed is "floor_error", and the peaks stand without it (a floor of 0)."""
    reply = {}
    if not request.get("floor_only"):
        reply["peaks"] = measure(guard.original("triton.testing:do_bench"))
    if request.get("preset"):
        try:
            reply["floor"] = floor_times(request["preset"], guard, gpu)
        except Exception:  # noqa: BLE001
            reply["floor_error"] = traceback.format_exc()[-500:]
    return reply


def floor_times(preset: dict, guard, gpu: bool = True) -> dict:
    """An empty Triton kernel's per-call times (ms) under `preset`, through the worker's own timing code
    (`timing.bench`) as a small shape's candidate is timed: by events, and by the calls' spans (the timer of
    the short shapes of short tasks, Preset.timer). The parent summarises them with the preset's statistic
    (sol.floor_from). "span" is empty, with "span_error", where CUPTI's record cannot be read."""
    import torch

    from kernelband.worker.timing import bench

    x = torch.empty(1, device="cuda" if gpu else "cpu")

    def fn():
        _empty_kernel[(1,)](x)

    fn()  # compiled outside the timing
    events, _, _ = bench(fn, preset, gpu, guard, span=False)
    if not gpu:  # the interpreter has no spans
        return {"events": events, "span": [], "span_error": "no GPU"}
    spans, _, info = bench(fn, preset, gpu, guard, span=True)
    read = info.get("timer") == "span"
    return {"events": events, "span": spans if read else [], "span_error": "" if read else info.get("span_error", "")}
