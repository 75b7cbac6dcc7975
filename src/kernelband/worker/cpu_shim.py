"""Run kernels that hard-code CUDA on the CPU, under the Triton interpreter.

TritonBench kernels write `x.cuda()`, `device='cuda'`, `assert x.is_cuda`
and `torch.cuda.synchronize()`. On a machine without a GPU this module maps
all of that onto the CPU so the same source runs under TRITON_INTERPRET=1.
It is installed only in interpreter mode and only inside a worker.
"""

from __future__ import annotations

import contextlib
import time
import types

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return False


def _map(value):
    if _is_cuda(value):
        return _CPU
    return value


_CUDA0 = torch.device("cuda", 0)


class _CudaToCpu(TorchFunctionMode):
    """Rewrites every `device=cuda` argument (and `.to('cuda')`) to the CPU, and lets tensors say
    they are on `cuda:0` (kernels assert `"cuda" in str(x.device)`)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _map(kwargs["device"])
        if func in (torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros,
                    torch.Tensor.new_ones, torch.Tensor.new_full, torch.Tensor.new_tensor):
            args = tuple(_map(a) for a in args)
        return func(*args, **kwargs)


class _FakeProps:
    name = "Triton interpreter (CPU)"
    multi_processor_count = 8
    total_memory = 16 * 1024**3
    major, minor = 9, 0
    max_shared_memory_per_block_optin = 227 * 1024
    warp_size = 32
    L2_cache_size = 50 * 1024**2
    regs_per_multiprocessor = 65536
    max_threads_per_multi_processor = 2048


class _FakeStream:
    def __init__(self, *args, **kwargs):
        self.cuda_stream = 0

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def record_event(self, event=None):
        return event or _FakeEvent()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _FakeEvent:
    def __init__(self, *args, **kwargs):
        self._t = 0.0

    def record(self, stream=None):
        import time
        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end._t - self._t) * 1000.0


def _interpreter_reads_string_annotations() -> None:
    """`BLOCK: "tl.constexpr"` is a constexpr to Triton's compiler; make the interpreter agree."""
    import inspect

    from triton.runtime import interpreter

    original = interpreter.GridExecutor.__init__

    def init(self, fn, arg_names, grid, *args, **kwargs):
        original(self, fn, arg_names, grid, *args, **kwargs)
        annotations = inspect.get_annotations(fn)
        self.constexprs = [n for n in arg_names if n in self.constexprs or "constexpr" in str(annotations.get(n, ""))]

    interpreter.GridExecutor.__init__ = init


def _autotune_by_wall_clock() -> None:
    """The autotuner times its configs with the GPU driver's benchmarker; in the interpreter there is
    none, so one call of each config is timed by the wall clock (the choice means nothing for speed, but
    autotuned kernels run)."""
    from triton.runtime import autotuner

    def bench(self):
        def run(fn, quantiles=None, **kwargs):
            t = time.perf_counter()
            fn()
            t = time.perf_counter() - t
            return [t, t, t] if quantiles else t
        return run

    autotuner.Autotuner.do_bench = property(bench)


def _interpreter_libdevice() -> None:
    """libdevice's functions are stubs that the GPU compiler resolves; the interpreter runs the stub and gets
    None. Give the common ones a body in `tl` terms, before any module imports them by name."""
    import importlib

    import triton.language as tl

    def unary(name):
        return lambda x: getattr(tl.math, name)(x)  # looked up at call time, when the interpreter has patched tl

    bodies = {name: unary(name) for name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf",
                                               "floor", "ceil")}
    bodies["fabs"] = lambda x: tl.abs(x)
    bodies["tanh"] = lambda x: 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0
    for module_name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, body in bodies.items():
            if hasattr(module, name):
                setattr(module, name, body)


def install() -> None:
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.is_cuda = property(lambda self: True)
    real_device = torch._C.TensorBase.device.__get__
    # CPU tensors say cuda:0; meta tensors (shape enumeration) keep the truth, torch's own
    # Python decompositions read it.
    torch.Tensor.device = property(lambda self: _CUDA0 if real_device(self).type == "cpu" else real_device(self))
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.synchronize = lambda *args, **kwargs: None
    cuda.current_device = lambda: 0
    cuda.device_count = lambda: 1
    cuda.set_device = lambda *args, **kwargs: None
    cuda.device = lambda *args, **kwargs: contextlib.nullcontext()
    cuda.get_device_properties = lambda *args, **kwargs: _FakeProps()
    cuda.get_device_name = lambda *args, **kwargs: _FakeProps.name
    cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
    cuda.Stream = _FakeStream
    cuda.Event = _FakeEvent
    cuda.current_stream = lambda *args, **kwargs: _FakeStream()
    cuda.default_stream = lambda *args, **kwargs: _FakeStream()
    cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()
    cuda.empty_cache = lambda: None
    cuda.manual_seed = lambda seed: None
    cuda.manual_seed_all = lambda seed: None
    cuda.max_memory_allocated = lambda *args, **kwargs: 0
    cuda.reset_peak_memory_stats = lambda *args, **kwargs: None
    if not hasattr(cuda, "amp"):
        cuda.amp = types.SimpleNamespace()
    _interpreter_reads_string_annotations()
    _autotune_by_wall_clock()
    _interpreter_libdevice()
    _CudaToCpu().__enter__()
