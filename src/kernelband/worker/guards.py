"""In-worker watchers: Triton launch records and tamper detection.

Both are installed by the worker before any untrusted code is imported. They
run in the same process as the candidate, so they detect what a kernel written
to look fast would plausibly do (replace a timer or a comparison function,
skip Triton altogether); they are not a defence against code that sets out to
disable them, which is why correctness is never decided in this process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Launch:
    kernel: str
    grid: list[int]
    constexprs: dict[str, int]
    num_warps: int | None = None
    num_stages: int | None = None
    n_regs: int | None = None
    n_spills: int | None = None
    shared: int | None = None


@dataclass
class LaunchLog:
    count: int = 0
    recent: list[Launch] = field(default_factory=list)
    enabled: bool = True

    def reset(self) -> None:
        self.count = 0
        self.recent.clear()


LOG = LaunchLog()


def launch_grid(grid, kwargs: dict, arg_names: list[str], args: tuple) -> list[int]:
    """A launch's grid as numbers: a grid function called with the launch's arguments by name ([] if it fails)."""
    try:
        if callable(grid):
            meta = dict(zip(arg_names, args))
            meta.update(kwargs)
            grid = grid(meta)
        return [int(g) for g in grid]
    except Exception:
        return []


def _describe(fn, args, kwargs, grid, kernel) -> Launch:
    arg_names = list(getattr(fn, "arg_names", []) or [])
    constexprs = {}
    bound = dict(zip(arg_names, args))
    bound.update(kwargs)
    for name, value in bound.items():
        if isinstance(value, int) and not isinstance(value, bool) and name.upper() == name and "BLOCK" in name:
            constexprs[name] = value
    inner = getattr(fn, "fn", fn)
    launch = Launch(kernel=getattr(inner, "__name__", "kernel"), grid=launch_grid(grid, kwargs, arg_names, args),
                    constexprs=constexprs)
    launch.num_warps = kwargs.get("num_warps")
    launch.num_stages = kwargs.get("num_stages")
    if kernel is not None:
        meta = getattr(kernel, "metadata", None)
        if meta is not None:
            launch.num_warps = getattr(meta, "num_warps", launch.num_warps)
            launch.num_stages = getattr(meta, "num_stages", launch.num_stages)
            launch.shared = getattr(meta, "shared", None)
        try:
            init = getattr(kernel, "_init_handles", None)
            if init is not None:
                init()
            launch.n_regs = getattr(kernel, "n_regs", None)
            launch.n_spills = getattr(kernel, "n_spills", None)
        except Exception:
            pass
    return launch


ORIGINAL_RUN: dict = {}


class unhooked:
    """Timing runs without the launch hooks: their Python overhead would be timed too."""

    def __enter__(self):
        self._hooked = {cls: cls.run for cls in ORIGINAL_RUN}
        for cls, run in ORIGINAL_RUN.items():
            cls.run = run

    def __exit__(self, *exc):
        for cls, run in self._hooked.items():
            cls.run = run
        return False


def install_launch_hooks() -> None:
    """Count every Triton launch (compiled or interpreted) and keep the last few."""
    classes = []
    from triton.runtime.jit import JITFunction
    classes.append(JITFunction)
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except ImportError:
        pass

    from kernelband.worker.audit import inside_launch

    for cls in classes:
        original = cls.run
        ORIGINAL_RUN[cls] = original

        def run(self, *args, grid, warmup, _original=original, **kwargs):
            with inside_launch():  # the launcher's own torch calls are not the call's torch work
                kernel = _original(self, *args, grid=grid, warmup=warmup, **kwargs)
            if not warmup and LOG.enabled:
                LOG.count += 1
                if len(LOG.recent) < 64:
                    try:
                        LOG.recent.append(_describe(self, args, kwargs, grid, kernel))
                    except Exception:
                        pass
            return kernel

        cls.run = run


def _resolve(path: str):
    import importlib
    module_name, _, attr_path = path.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


# What a kernel that wants to look fast or correct would replace.
WATCHED = [
    "torch:allclose",
    "torch:isclose",
    "torch:equal",
    "torch.testing:assert_close",
    "torch.cuda:Event",
    "torch.cuda:synchronize",
    "torch.cuda:current_stream",
    "time:perf_counter",
    "time:perf_counter_ns",
    "time:time",
    "time:monotonic",
    "triton.testing:do_bench",
    "triton.runtime.jit:JITFunction.run",
]
_OPTIONAL = ["torch.cuda:Event.elapsed_time", "torch.cuda:Event.record", "torch.profiler:profile"]
# do_bench's L2 flush before each timed call goes through the active Triton driver: a module that
# replaced it (or the driver) would be timed with a warm cache.
_DRIVER_METHODS = ("clear_cache", "get_empty_cache_for_benchmark")


def _active_driver():
    try:
        import triton
        return triton.runtime.driver.active
    except Exception:  # noqa: BLE001 - the interpreter has no GPU driver, and do_bench is not used there
        return None


class TamperGuard:
    """Remembers the watched objects; `changed()` lists those replaced since."""

    def __init__(self, driver=None) -> None:
        self._pristine: dict[str, object] = {}
        for path in WATCHED + _OPTIONAL:
            try:
                self._pristine[path] = _resolve(path)
            except Exception:
                continue
        self._driver = driver if driver is not None else _active_driver()
        self._own_driver = driver is None
        self._driver_methods = {n: getattr(type(self._driver), n, None) for n in _DRIVER_METHODS}
        self._threads = set(threading.enumerate())

    def _driver_changes(self) -> list[str]:
        if self._driver is None:
            return []
        if self._own_driver and _active_driver() is not self._driver:
            return ["triton.runtime.driver.active"]
        return [f"triton driver:{name}" for name, method in self._driver_methods.items()
                if getattr(type(self._driver), name, None) is not method or name in vars(self._driver)]

    def original(self, path: str):
        return self._pristine[path]

    def changed(self) -> list[str]:
        out = []
        for path, obj in self._pristine.items():
            try:
                now = _resolve(path)
            except Exception:
                out.append(path)
                continue
            if now is not obj:
                out.append(path)
        return out + self._driver_changes()

    def new_threads(self) -> list[str]:
        return [t.name for t in threading.enumerate() if t not in self._threads and t.is_alive()]

    def accept_current_threads(self) -> None:
        self._threads = set(threading.enumerate())


def perf_counter() -> float:
    return time.perf_counter()
