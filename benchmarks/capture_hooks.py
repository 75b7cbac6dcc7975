"""The host cost of `kernelband capture`'s hooks on the compiled-kernel path, per launch, on any machine: a small
program's launches reach the recorder through Triton's own hook objects as a compiled kernel's do (the JIT cache
hook, a LazyDict of launch metadata, the launch enter and exit hooks), without a GPU and without running a kernel.

It reports, apart, the launches whose signature the recorder has seen (the steady cost every launch pays) and
the launches that bring a new entry, kernel or signature (described once each), and for both the torch
operations the hooks issue: on a GPU each one is a launch of its own on the program's stream, so their number
is the GPU host cost this run can count where it cannot time it. A timer that does nothing stands in for CUDA
events (two event records per launch on a GPU, not counted here), so the times are the recorder's own Python.

    python benchmarks/capture_hooks.py                     # 300 steps, 4 launches each, 3 shapes
    python benchmarks/capture_hooks.py --rows 4096 --dim 1024 --out capture_hooks.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode
from triton.compiler.compiler import LazyDict
from triton.runtime.jit import JITFunction, JitFunctionInfo

from kernelband.capture.record import Recorder
from kernelband.errors import run_script


def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    pass


def norm_kernel(x_ptr, w_ptr, out_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    pass


SCALE, NORM = JITFunction(scale_kernel), JITFunction(norm_kernel)
_COMPILED: set[int] = set()


class _Compiled:
    num_warps = 4
    num_stages = 3


def _launch(kernel: JITFunction, grid: tuple, args: dict) -> None:
    """What Triton's JIT does around a compiled kernel's launch, with hooks set; the kernel itself is not run."""
    runtime = triton.knobs.runtime
    if id(kernel) not in _COMPILED:
        _COMPILED.add(id(kernel))
        if runtime.jit_cache_hook is not None:
            runtime.jit_cache_hook(key="key", repr=kernel.fn.__name__,
                                   fn=JitFunctionInfo(__name__, kernel.fn.__name__, kernel), compile={},
                                   is_manual_warmup=False, already_compiled=False)
    metadata = LazyDict({"name": kernel.fn.__name__, "function": None, "stream": 0})
    if kernel.launch_metadata is not None:
        metadata.add(kernel.launch_metadata, (grid, _Compiled, args))
    runtime.launch_enter_hook(metadata)
    runtime.launch_exit_hook(metadata)


# A frame of Triton's to the recorder, as JITFunction.run is on a GPU: the entry is the function above it.
_launch.__code__ = _launch.__code__.replace(co_filename=triton.runtime.jit.__file__)


# -- the program: two entry functions (the task's module is this file) and a method (a wrapped launch) -----------
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    _launch(SCALE, (triton.cdiv(x.numel(), 1024),), dict(x_ptr=x, out_ptr=out, n=x.numel(), factor=factor,
                                                          BLOCK=1024))
    return out


def add_norm(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    s = torch.empty_like(x)
    _launch(SCALE, (triton.cdiv(x.numel(), 1024),), dict(x_ptr=x, out_ptr=s, n=x.numel(), factor=1.0, BLOCK=1024))
    out = torch.empty_like(x)
    _launch(NORM, (x.shape[0],), dict(x_ptr=s, w_ptr=w, out_ptr=out, rows=x.shape[0], cols=x.shape[1], eps=eps,
                                      BLOCK=triton.next_power_of_2(x.shape[1])))
    return out


class Head:
    def __init__(self, dim: int):
        self.w = torch.randn(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _launch(NORM, (x.shape[0],), dict(x_ptr=x, w_ptr=self.w, out_ptr=out, rows=x.shape[0], cols=x.shape[1],
                                          eps=1e-5, BLOCK=triton.next_power_of_2(x.shape[1])))
        return out


class _NoTimer:
    def start(self, targets: list, stream) -> None:
        pass

    def stop(self) -> None:
        pass

    def collect(self, wait: bool) -> None:
        pass

    def capturing(self) -> bool:
        return False


class _Ops(TorchDispatchMode):
    """The torch operations issued while it is on."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _run(steps: int, rows: tuple[int, ...], dim: int, max_bytes: int, ops: _Ops | None) -> tuple[Recorder, list, float]:
    """The program under a recorder: each launch's (seconds in the recorder's hooks, whether it was new, the
    torch ops they issued where `ops` counts them), and the recorder's finishing time."""
    data = Path(tempfile.mkdtemp(prefix="capture-hooks-"))
    recorder = Recorder(data, max_bytes, [p for p in sys.path[1:] if p], [str(Path(__file__).parent)],
                        interpreter=False, timer=_NoTimer())
    _COMPILED.clear()  # as in a new process: each kernel's first launch compiles, and the recorder sees it
    torch.manual_seed(0)
    xs = {r: torch.randn(r, dim) for r in rows}
    w, head = torch.randn(dim), Head(dim)
    runtime = triton.knobs.runtime
    launches: list = []
    here: dict = {}

    # around the recorder's hooks and no one else's: first in the enter chain, last in the exit chain (nothing
    # runs between a launch's enter and exit hooks here)
    def enter(metadata) -> None:
        here.update(hooks=recorder.hooks_s, new=recorder.new_launches)
        if ops is not None:
            here["ops"] = len(ops.names)
            ops.__enter__()

    def leave(metadata) -> None:
        if ops is not None:
            ops.__exit__(None, None, None)
        names = ops.names[here["ops"]:] if ops is not None else []
        launches.append((recorder.hooks_s - here["hooks"], recorder.new_launches != here["new"], names))

    runtime.launch_enter_hook.add(enter)
    runtime.launch_exit_hook.add(leave)
    recorder.install()
    try:
        for step in range(steps):
            x = xs[rows[step % len(rows)]]
            h = add_norm(scale(x, 0.5), x, w, 1e-6)
            head.forward(h)
    finally:
        recorder.uninstall()
        runtime.launch_enter_hook.remove(enter)
        runtime.launch_exit_hook.remove(leave)
    t0 = time.perf_counter()
    recorder.finish()
    return recorder, launches, time.perf_counter() - t0


def measure(steps: int, rows: tuple[int, ...], dim: int, max_bytes: int) -> dict:
    """Times from a run without counting (counting slows each torch op), torch ops from a second run."""
    ops = _Ops()
    with ops:
        torch.ones(1).add(1)  # the dispatch mode's first use imports much of torch: not in a hook's time
    ops.names.clear()
    recorder, launches, finish_s = _run(steps, rows, dim, max_bytes, None)
    _, counted, _ = _run(steps, rows, dim, max_bytes, ops)
    new = [s for s, is_new, _ in launches if is_new]
    seen = [s for s, is_new, _ in launches if not is_new]
    new_ops = [o for _, is_new, o in counted if is_new]
    return {
        "steps": steps, "rows": list(rows), "dim": dim, "max_bytes": max_bytes, "launches": len(launches),
        "hooks_s": recorder.hooks_s, "finish_s": finish_s, "errors": recorder.errors,
        "new_launches": len(new), "new_ms": [1e3 * s for s in new],
        "new_torch_ops": [len(o) for o in new_ops], "new_torch_op_names": sorted({n for o in new_ops for n in o}),
        "seen_launches": len(seen), "seen_us_median": 1e6 * statistics.median(seen),
        "seen_us_mean": 1e6 * statistics.mean(seen),
        "seen_torch_ops": sum(len(o) for _, is_new, o in counted if not is_new),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 32, 48])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    row = measure(args.steps, tuple(args.rows), args.dim, args.max_bytes)
    print(f"{row['launches']} launches: {row['seen_launches']} of a seen signature, "
          f"{row['seen_us_median']:.1f} us each (median; mean {row['seen_us_mean']:.1f}), "
          f"{row['seen_torch_ops']} torch ops in all; {row['new_launches']} new, "
          f"{sum(row['new_ms']):.1f} ms in all ({statistics.mean(row['new_ms']):.2f} ms each), "
          f"{statistics.mean(row['new_torch_ops']):.1f} torch ops each ({', '.join(row['new_torch_op_names'])}); "
          f"hooks {1e3 * row['hooks_s']:.1f} ms, finish {1e3 * row['finish_s']:.1f} ms"
          + (f"; hook errors: {row['errors']}" if row["errors"] else ""))
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    run_script(main)
