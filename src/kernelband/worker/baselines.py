"""The task's torch reference timed in its worker: as written (torch eager) and through torch.compile.

Each is timed by `timing.bench`, the code that times the reference and the candidates, under the same
preset, on the same copies of the shape's inputs (`shape_timing.placements`) and with the timer the shape's
reference got (events or spans). torch.compile gets a fresh compilation per shape (`torch._dynamo.reset`,
static shapes): the same compiled function across shapes would recompile up to dynamo's cache limit and then
fall back to eager without a word. Its compilation and max-autotune's own benchmarks run before the timing,
on the first copy of the inputs. A failure of either is its reason string, never the worker's failure.
"""

from __future__ import annotations

import itertools
import time

from kernelband.worker.guards import unhooked
from kernelband.worker.timing import bench

COMPILE_MODE = "max-autotune-no-cudagraphs"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _timed(fn, copies: list, preset: dict, gpu: bool, guard, span: bool) -> tuple[list[float], str]:
    turn = itertools.cycle(copies)
    with unhooked():
        times, _, info = bench(lambda: fn(next(turn)), preset, gpu, guard, span)
    return times, info.get("timer", "events")


def time_baselines(fn, copies: list, request: dict, gpu: bool, guard) -> dict:
    """The reply to `baselines`: {"ok", "eager": times or None, "eager_error", "compiled": times or None,
    "compiled_error", "compile_s", "timers"}, per-call times (ms) as `op_time` gives them and an error saying why
    a side was not timed; or `crashed` where a failure left the CUDA context unusable (the worker exits)."""
    reply = _measure(fn, copies, request, gpu, guard)
    errors = [e for e in (reply["eager_error"], reply["compiled_error"]) if e]
    if gpu and errors:
        import torch
        try:
            torch.cuda.synchronize()  # a CUDA fault is sticky: every call after it raises
        except Exception as exc:  # noqa: BLE001
            return {"ok": False, "outcome": "crashed", "error": f"{errors[0]}; then {_first_line(exc)}"}
    return {"ok": True, **reply}


def _measure(fn, copies: list, request: dict, gpu: bool, guard) -> dict:
    reply = {"eager": None, "eager_error": "", "compiled": None, "compiled_error": "", "compile_s": None,
             "timers": {}}
    if fn is None:
        reply["eager_error"] = reply["compiled_error"] = "the task has no torch reference"
        return reply
    preset, span = request["preset"], bool(request.get("span"))
    try:
        fn(copies[0])  # its first call (caches, lazy initialisation) outside the timing, as the module's
        reply["eager"], reply["timers"]["eager"] = _timed(fn, copies, preset, gpu, guard, span)
    except Exception as exc:  # noqa: BLE001 - a reference that fails here fails the correctness runs too
        reply["eager_error"] = f"the reference failed: {_first_line(exc)}"
    if not request.get("compile", True):
        reply["compiled_error"] = "torch.compile not asked for"
        return reply
    try:
        import torch
        import torch._dynamo
        import torch._inductor.config as inductor_config

        # compiled in this process: no pool of compile processes beside a sandboxed worker that is kept
        inductor_config.compile_threads = 1
        torch._dynamo.reset()
        compiled = torch.compile(fn, mode=COMPILE_MODE, dynamic=False)
        t0 = time.perf_counter()
        with unhooked():
            compiled(copies[0])
            if gpu:
                torch.cuda.synchronize()
        reply["compile_s"] = time.perf_counter() - t0
        reply["compiled"], reply["timers"]["compiled"] = _timed(compiled, copies, preset, gpu, guard, span)
    except Exception as exc:  # noqa: BLE001 - noted, never fatal
        reply["compiled_error"] = f"torch.compile failed: {_first_line(exc)}"
    return reply

