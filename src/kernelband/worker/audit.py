"""What a candidate's call returned and who did its work, checked inside the worker.

Three holes a kernel written to look fast could use, and what closes each:

* A lazy output. A `torch.Tensor` subclass computes its values in `__torch_function__` the first time the
  worker touches it (to write it for the parent), after the timed call. `output_problem` runs right after the
  call, before anything touches the output: it accepts only objects whose `type()` is exactly `torch.Tensor`
  (the class as it was before the candidate was imported: `type()` reads the object's real class, which
  neither `__torch_function__` nor a `__class__` property can change), strided and materialized, in exact
  tuples, lists and dicts. Its own tensor reads run with torch functions disabled, so no mode or subclass of
  the candidate's runs either. Interpreter hooks (`sys.setprofile`, `sys.settrace`, audit hooks) would run
  the candidate's code after the call without any object of its own being touched: `block_interpreter_hooks`
  replaces their setters before the candidate is imported, and a call of them is reported here.
* Work outside the timed region. `call_kernels` profiles one call with CUPTI between two marker kernels,
  where the timing's events start and end: a kernel of the call's that begins before the first marker ends
  or ends after the last one starts ran on another stream, unjoined, outside the time the events measure.
* Torch doing the work. `call_kernels` also splits the call's GPU kernel time between the module's Triton
  kernels and everything else. The Triton interpreter runs kernels on the CPU, so there `TorchWork` counts
  elements instead: those Triton's stores write against those torch's compute ops produce.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

# The classes as they are before the candidate is imported: a module that rebinds `torch.Tensor` to a
# subclass of its own does not change what counts as plain.
_TENSOR = torch.Tensor
_STRIDED = torch.strided
_RETURN_TYPES = frozenset(v for v in vars(torch.return_types).values()
                          if isinstance(v, type) and issubclass(v, tuple))
_SCALARS = (type(None), bool, int, float, str)


# -- the outputs ---------------------------------------------------------------------------------------
def output_problem(obj, devices: tuple[str, ...], modes_before: int = 0) -> str:
    """'' when `obj` holds only plain, materialized tensors on one of `devices` (and plain values), else what
    is wrong with it, in one line. `modes_before`: the torch function modes active before the call; one more
    after it is the candidate's, left to run on whatever touches the output."""
    tried = hooks_tried()
    if tried:
        return (f"the candidate set an interpreter hook ({', '.join(tried)}), which would run its code after "
                "the call returns")
    if _function_modes() > modes_before:
        return "the candidate left a torch function mode active, which would run on whatever touches the output"
    if _dispatch_modes():
        return "the candidate left a torch dispatch mode active, which would run on whatever touches the output"
    try:
        with torch._C.DisableTorchFunction():
            return _visit(obj, "the output", devices, 0)
    except Exception as exc:  # noqa: BLE001 - an output that cannot even be inspected is not plain
        return f"the output cannot be inspected ({type(exc).__name__}: {str(exc)[:120]})"


def _name(kind: type) -> str:
    module = type.__getattribute__(kind, "__module__")
    qual = type.__getattribute__(kind, "__qualname__")
    return f"{module}.{qual}" if module != "builtins" else qual


def _visit(obj, where: str, devices: tuple[str, ...], depth: int) -> str:
    kind = type(obj)
    if kind is _TENSOR:
        return _tensor_problem(obj, where, devices)
    if depth > 8:
        return f"{where} nests containers more than 8 deep"
    if kind in (tuple, list) or kind in _RETURN_TYPES:
        for i, item in enumerate(tuple.__iter__(obj) if kind is not list else list.__iter__(obj)):
            problem = _visit(item, f"{where}[{i}]", devices, depth + 1)
            if problem:
                return problem
        return ""
    if kind is dict:
        for key, item in dict.items(obj):
            if type(key) not in (str, int):
                return f"{where} has a key of type {_name(type(key))}"
            problem = _visit(item, f"{where}[{key!r}]", devices, depth + 1)
            if problem:
                return problem
        return ""
    if kind in _SCALARS:
        return ""
    return f"{where} is a {_name(kind)}, not a torch.Tensor"


# Read through torch's C base class: the worker's CPU shim (and a module) may replace `torch.Tensor.device`.
_BASE = torch._C.TensorBase


def _tensor_problem(t: torch.Tensor, where: str, devices: tuple[str, ...]) -> str:
    layout = _BASE.layout.__get__(t)
    if _BASE.is_nested.__get__(t) or layout is not _STRIDED:
        return f"{where} is a {layout} tensor, not a strided one"
    device = _BASE.device.__get__(t).type
    if device not in devices:
        return f"{where} is on {device}, not on {' or '.join(devices)}"
    functional = getattr(torch, "_is_functional_tensor", None)
    if functional is not None and functional(t):
        return f"{where} is a functional tensor wrapper"
    if _BASE.numel(t) == 0:
        return ""
    storage = _BASE.untyped_storage(t)
    span = 1 + sum((n - 1) * s for n, s in zip(_BASE.size(t), _BASE.stride(t)))
    if storage.data_ptr() == 0 or storage.nbytes() < (_BASE.storage_offset(t) + span) * _BASE.element_size(t):
        return f"{where} has no memory of its own behind it (storage not materialized)"
    return ""


def snapshot(obj):
    """`obj` with every tensor in it cloned (the exact containers `output_problem` accepts, rebuilt): the values
    the call returned, which the worker writes for the parent, whatever changes the tensors afterwards."""
    kind = type(obj)
    if kind is _TENSOR:
        with torch._C.DisableTorchFunction():
            return obj.detach().clone()
    if kind is list:
        return [snapshot(x) for x in list.__iter__(obj)]
    if kind is tuple or kind in _RETURN_TYPES:
        return tuple(snapshot(x) for x in tuple.__iter__(obj))
    if kind is dict:
        return {k: snapshot(v) for k, v in dict.items(obj)}
    return obj


def _function_modes() -> int:
    length = getattr(torch._C, "_len_torch_function_stack", None)
    return int(length()) if length is not None else 0


def _dispatch_modes() -> int:
    try:
        from torch.utils._python_dispatch import _len_torch_dispatch_stack
    except ImportError:
        return 0
    return int(_len_torch_dispatch_stack())


def function_modes() -> int:
    """The torch function modes active now (the CPU shim's in interpreter mode)."""
    return _function_modes()


# -- interpreter hooks ---------------------------------------------------------------------------------
_TRIED: list[str] = []
_HOOK_SETTERS = (("sys", "setprofile"), ("sys", "settrace"), ("sys", "addaudithook"), ("threading", "setprofile"),
                 ("threading", "settrace"), ("threading", "setprofile_all_threads"),
                 ("threading", "settrace_all_threads"))


def block_interpreter_hooks() -> None:
    """Replace the setters of Python's profile, trace and audit hooks with ones that install nothing and
    remember the call: a hook of the candidate's would run its code whenever the worker calls a function
    after the entry returned (writing the output, say), with no object of the candidate's touched. Clearing
    a hook (None) is allowed. Installed after the worker's own audit hook (the sandbox's)."""
    owners = {"sys": sys, "threading": threading}
    for owner_name, name in _HOOK_SETTERS:
        owner = owners[owner_name]
        if hasattr(owner, name):
            setattr(owner, name, _refuser(f"{owner_name}.{name}"))
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        monitoring.register_callback = _refuser("sys.monitoring.register_callback", argument=2)


def _refuser(name: str, argument: int = 0):
    def refuse(*args, **kwargs):
        if len(args) > argument and args[argument] is not None and name not in _TRIED:
            _TRIED.append(name)

    refuse.__name__ = name.rsplit(".", 1)[1]
    return refuse


def hooks_tried() -> list[str]:
    return list(_TRIED)


# -- the interpreter's count of who computes ------------------------------------------------------------
# Functions that allocate, reshape, view, copy or describe a tensor: they move or make room for data but
# compute nothing, and honest wrappers call them around their kernels.
_NOT_COMPUTE = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "tensor", "as_tensor", "from_numpy",
    "arange", "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "expand",
    "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "select", "as_strided", "__getitem__",
    "split", "chunk", "unbind", "movedim", "swapaxes", "clone", "copy_", "to", "cuda", "cpu", "detach",
    "fill_", "zero_", "stride", "size", "dim", "numel", "data_ptr", "is_contiguous", "element_size", "__get__",
    "__set__", "__len__", "__setitem__", "requires_grad_", "type", "float", "half", "bfloat16", "double", "int",
    "long", "bool", "storage_offset", "untyped_storage", "__format__", "__repr__", "item", "tolist", "cdiv",
    "__index__", "__int__", "__float__", "__bool__", "is_floating_point", "get_device", "__hash__", "storage",
    "broadcast_to", "empty_cache", "synchronize", "manual_seed", "set_",
})


def _fname(func) -> str:
    return getattr(func, "__name__", "") or type(func).__name__


class TorchWork(TorchFunctionMode):
    """Counts, around one call in the Triton interpreter, the elements torch's compute ops produce (by op) and
    the elements the call's Triton kernels store (`triton`, through the interpreter's store hook), leaving out
    what runs inside a Triton launch (the interpreter's own argument copies)."""

    def __init__(self) -> None:
        super().__init__()
        self.torch_elements: Counter = Counter()
        self.triton = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if _INSIDE_LAUNCH[0] == 0 and _fname(func) not in _NOT_COMPUTE:
            produced = sum(t.numel() for t in _tensors(out))
            if produced:
                self.torch_elements[_fname(func)] += produced
        return out

    def __enter__(self):
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return super().__exit__(*exc)

    def share(self) -> float | None:
        """Triton's part of the elements written, or None when neither wrote any."""
        total = self.triton + sum(self.torch_elements.values())
        return self.triton / total if total else None

    def summary(self) -> dict:
        """The count as the worker's `features` reply carries it ("work"; evaluation/work.py reads it)."""
        top = self.torch_elements.most_common(1)
        other = sum(self.torch_elements.values())
        total = self.triton + other
        return {"by": "elements", "triton_share": self.share(), "triton_work": self.triton, "other_work": other,
                "top_other": top[0][0] if top else "",
                "top_other_share": top[0][1] / total if top and total else 0.0, "past_end": []}


def _tensors(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    return []


_ACTIVE: list[TorchWork] = []
_INSIDE_LAUNCH = [0]


class inside_launch:
    """Around a Triton launch (the worker's launch hook): torch calls in it are the launcher's."""

    def __enter__(self):
        _INSIDE_LAUNCH[0] += 1

    def __exit__(self, *exc):
        _INSIDE_LAUNCH[0] -= 1
        return False


def count_interpreter_stores() -> None:
    """Count the elements each interpreted Triton store and atomic writes, into the active `TorchWork`."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return

    def counting(name: str, elements):
        original = getattr(InterpreterBuilder, name, None)
        if original is None:
            return

        def wrapped(self, *args, **kwargs):
            if _ACTIVE:
                try:
                    _ACTIVE[-1].triton += int(elements(*args, **kwargs))
                except Exception:  # noqa: BLE001, S110 - a count is not worth failing a kernel for
                    pass
            return original(self, *args, **kwargs)

        setattr(InterpreterBuilder, name, wrapped)

    counting("create_masked_store", lambda ptrs, value, mask, *a, **k: mask.data.sum())
    counting("create_atomic_rmw", lambda op, ptr, val, mask, *a, **k: mask.data.sum())
    counting("create_atomic_store", lambda ptr, val, mask, *a, **k: mask.data.sum())
    counting("create_atomic_cas", lambda ptr, *a, **k: ptr.data.size)
    counting("create_descriptor_store", lambda desc, value, *a, **k: value.data.size)


# -- the GPU's record of a call's kernels ----------------------------------------------------------------
MARKER = "spin_kernel"  # torch.cuda._sleep's kernel, as CUPTI names it: the end of the timed region
# Activities that move or set memory without computing: neither Triton's work nor torch's
_MOVES = ("Memcpy", "Memset", "memcpy", "memset", "direct_copy_kernel", "FillFunctor", "fill_kernel")


def triton_names(module) -> set[str]:
    """The names of the module's `@triton.jit` functions (autotuned or heuristics-wrapped ones too)."""
    names = set()
    for value in list(vars(module).values()):
        inner = value
        for _ in range(4):  # Autotuner -> Heuristics -> JITFunction
            fn = getattr(inner, "fn", None)
            if fn is None or fn is inner:
                break
            inner = fn
        if inner is not value or type(value).__name__ in ("JITFunction", "InterpretedFunction"):
            name = getattr(inner, "__name__", None)
            if isinstance(name, str):
                names.add(name)
    return names


def split_kernels(activities: list[tuple[str, float, float, int]], triton: set[str]) -> dict:
    """From CUPTI's activities `(name, start µs, end µs, launch order)` of one call between two marker kernels
    (`call_kernels`): Triton's share of the kernel time ("triton_share", None without kernels), Triton's and
    the rest's kernel time in µs ("triton_work", "other_work"), the kernel that took most of the rest
    ("top_other", "top_other_share"), and the kernels that ran outside the timed region ("past_end"): begun
    before the first marker ended or ended after the last one started. The markers are told by their launch
    order (the first launch and the last), not by their name alone: the call may launch such kernels too."""
    spins = [a for a in activities if MARKER in a[0]]
    first = min(activities, key=lambda a: a[3], default=None)
    before = first if first is not None and MARKER in first[0] else None
    after = max(spins, key=lambda a: a[3]) if spins and max(spins, key=lambda a: a[3]) is not before else None
    begin = before[2] if before is not None else float("-inf")
    end = after[1] if after is not None else float("inf")
    calls = [a for a in activities if a is not before and a is not after]
    past = sorted({a[0] for a in calls if a[1] < begin - 0.5 or a[2] > end + 0.5})
    kernels = [a for a in calls if not any(m in a[0] for m in _MOVES)]
    by_name: Counter = Counter()
    for name, start, stop, _ in kernels:
        by_name[name] += max(stop - start, 0.0)
    total = sum(by_name.values())
    ours = sum(t for name, t in by_name.items() if _is_triton(name, triton))
    others = Counter({n: t for n, t in by_name.items() if not _is_triton(n, triton)})
    top = others.most_common(1)
    return {"triton_share": ours / total if total > 0 else None, "triton_work": ours, "other_work": total - ours,
            "top_other": top[0][0][:160] if top else "", "top_other_share": top[0][1] / total if top else 0.0,
            "past_end": past[:5], "marker": after is not None}


def _is_triton(kernel: str, triton: set[str]) -> bool:
    return kernel in triton or kernel.split("(")[0].strip() in triton


def read_kernels(prof) -> list[tuple[str, float, float, int]]:
    """The GPU activities of a torch.profiler session: (name, start µs, end µs, launch order by CUPTI's
    correlation id), from kineto's raw record (as worker/timing.py reads it for the span timer)."""
    from torch.autograd import DeviceType

    gpu = [e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.CUDA]
    base = min((e.start_ns() for e in gpu), default=0)
    return [(e.name(), (e.start_ns() - base) / 1000.0, (e.end_ns() - base) / 1000.0, int(e.correlation_id()))
            for e in gpu]


# The GPU wait queued before the profiled call: the CPU enqueues the whole call behind it, as in the timing
# (worker/timing.py, `gpu_ahead`), so kernels the call leaves on another stream are still running when the
# region's end comes. 2 ms at 2 GHz, the timing's longest wait.
AHEAD_CYCLES = 4_000_000


def gpu_work(fn, profile, module, launches: list) -> dict:
    """The GPU's record of one more call of `fn` (`call_kernels`) as the worker's `features` reply carries it
    ("work"), the Triton kernels named by the module's @triton.jit functions and the kernels `launches` (the
    launch log's records) name. A profiler that cannot run says so in "error"."""
    names = triton_names(module) | {launch.kernel for launch in launches}
    try:
        return {"by": "kernel_time", **call_kernels(fn, profile, names)}
    except Exception as exc:  # noqa: BLE001 - no CUPTI: nothing measured, and the parent notes why
        return {"by": "kernel_time", "triton_share": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def call_kernels(fn, profile, triton: set[str]) -> dict:
    """Run `fn` once under `profile` (torch.profiler's, as the worker's guard kept it) with CUDA activities,
    between two marker kernels, and split the kernels (`split_kernels`).

    The first marker is a GPU wait on the current stream, as the timing queues before each call. The last
    waits for the current stream, where the timing records its end event, and runs on a stream of the
    highest priority: kernels left running on another stream hold the SMs, and a marker of ordinary priority
    would start only once they ended (seen on an H100). This is a check once per evaluation rather than a
    device-wide synchronize in every timed call, which would add the synchronize's host round trip to every
    honest single-stream kernel's time."""
    from torch.profiler import ProfilerActivity

    marker = torch.cuda.Stream(priority=-100)  # clamped to the highest priority the device has
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(AHEAD_CYCLES)
        fn()
        marker.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(marker):
            torch.cuda._sleep(100)
        torch.cuda.synchronize()
    return split_kernels(read_kernels(prof), triton)
