"""Task harnesses, as seen from inside a worker.

A harness knows a task's shapes, builds the inputs of one shape and calls the
module under test on them. Two kinds:

* `PyFileHarness`: the project's own task format (the part of a task file
  below the `kernelband task` marker).
* `TritonBenchHarness`: a TritonBench-G performance script and the instance's
  own test code.

Both build inputs under a seed given by the evaluator, so the reference worker
and the candidate worker build the same inputs without exchanging them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import sys
import types
from typing import Any

import torch

from kernelband.worker import tb_compat


def _label(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def tensors_in(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    if isinstance(obj, torch.nn.Module):
        return list(obj.parameters()) + list(obj.buffers())
    return []


def _describe_inputs(inputs) -> str:
    parts = []
    for t in tensors_in(inputs):
        dtype = str(t.dtype).replace("torch.", "")
        parts.append(f"{dtype}[{'x'.join(str(s) for s in t.shape)}]")
    return " ".join(parts) or "no tensors"


def nbytes(inputs) -> int:
    """The bytes of the tensors in `inputs` (any nesting)."""
    return sum(t.numel() * t.element_size() for t in tensors_in(inputs))


# PyTorch's caching allocator packs tensors of up to 1 MiB into shared 2 MiB segments, so that fresh copies of
# a small input lie in the same physical page; an allocation over 2 MiB gets a segment (and pages) of its own.
OWN_PAGES = (2 << 20) + 512


def _span(t: torch.Tensor) -> int:
    """Elements from a tensor's first to its last, by its strides (0 for an empty one)."""
    return 0 if t.numel() == 0 else 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))


def own_pages_bytes(inputs) -> int:
    """What `in_own_pages(inputs)` allocates."""
    return sum(max(_span(t) * t.element_size(), OWN_PAGES) for t in tensors_in(inputs))


def in_own_pages(obj):
    """`obj` (any nesting of lists, tuples and dicts) with each tensor in it copied, strides kept, into an
    allocation of its own of over 2 MiB: other physical pages than the original's. A tensor that cannot be
    copied so (overlapping strides, as from `expand`) stays as it is."""
    if isinstance(obj, torch.Tensor):
        room = max(_span(obj), -(-OWN_PAGES // obj.element_size()))
        try:
            with torch.no_grad():
                copy = torch.empty(room, dtype=obj.dtype, device=obj.device).as_strided(obj.shape, obj.stride())
                copy.copy_(obj)
        except RuntimeError:
            return obj
        return copy.requires_grad_(obj.requires_grad)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(in_own_pages(x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(in_own_pages(x) for x in obj)
    if isinstance(obj, dict):
        return {k: in_own_pages(v) for k, v in obj.items()}
    return obj


class Harness:
    entry: str
    atol: float = 1e-3
    rtol: float = 1e-1
    allow_torch_only: bool = False
    has_reference: bool = False
    has_tests: bool = False

    def describe(self, mode: str) -> dict:
        raise NotImplementedError

    def make_inputs(self, index: int, device: str) -> Any:
        raise NotImplementedError

    def call(self, inputs) -> Any:
        raise NotImplementedError

    def reference(self, inputs) -> Any:
        raise NotImplementedError

    @property
    def torch_reference(self):
        """The task's reference in torch, called as `call` is (on `make_inputs`'s inputs), for the baselines
        timed beside a candidate (worker/baselines.py); None where the task has none."""
        return None

    def run_tests(self) -> Any:
        raise NotImplementedError


def _exec_module(name: str, source: str, filename: str, extra: dict | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    if extra:
        module.__dict__.update(extra)
    sys.modules[name] = module
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)
    return module


def import_file(module_name: str, path: str) -> types.ModuleType:
    """Import the Python file at `path` as `module_name` (Triton compiles only kernels that live in a file)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def for_task(task: dict, module: types.ModuleType, module_source: str, mode: str) -> Harness:
    """The harness of a task (as `Task.wire()` sends it) around the imported module under test."""
    if task["kind"] != "tritonbench":
        return PyFileHarness(task["harness_source"], task["harness_file"], module, task.get("data_dir") or None)
    perf = task["harness_source"]
    if mode == "interpreter":  # smaller fixed sizes, so that the CPU gets through them
        for old, new in task.get("interpreter_fixes", []):
            perf = perf.replace(old, new)
    return TritonBenchHarness(task["name"], perf, task.get("tests_source"), module,
                              task.get("extra_loop_values", []), module_source)


# The paper evaluates every kernel on at least 10 shapes.
MIN_SEARCH_SHAPES = 10


class PyFileHarness(Harness):
    """The harness part of a KernelBand task file."""

    def __init__(self, harness_source: str, harness_file: str, module: types.ModuleType,
                 data_dir: str | None = None):
        self.module = module
        # TASK_DATA: where this worker reads the files beside the task (a captured task's kept tensors)
        self.ns = _exec_module("kernelband_task_harness", harness_source, harness_file,
                               extra={"TASK_DATA": data_dir}).__dict__
        missing = [n for n in ("ENTRY", "SHAPES", "make_inputs") if n not in self.ns]
        if missing:
            raise ValueError(f"the task definition lacks {', '.join(missing)}")
        self.entry = self.ns["ENTRY"]
        self.atol = float(self.ns.get("ATOL", 1e-3))
        self.rtol = float(self.ns.get("RTOL", 1e-1))
        self.allow_torch_only = bool(self.ns.get("ALLOW_TORCH_ONLY", False))
        self.triton_share_min = float(self.ns.get("TRITON_SHARE", 0.5))
        self.has_reference = callable(self.ns.get("reference"))
        self._search = [dict(s) for s in self.ns["SHAPES"]]
        self._held_out = [dict(s) for s in self.ns.get("HELD_OUT", [])]
        if len(self._search) < MIN_SEARCH_SHAPES:
            raise ValueError(f"SHAPES lists {len(self._search)} search shapes; a task needs at least "
                             f"{MIN_SEARCH_SHAPES}")
        if not self._held_out:
            raise ValueError("HELD_OUT lists no shapes; a task needs at least one held-out shape")
        self._interp = self.ns.get("INTERPRETER_SHAPES")
        self._interp_held_out = self.ns.get("INTERPRETER_HELD_OUT")

    def _lists(self, mode: str) -> tuple[list[dict], list[dict]]:
        search, held = self._search, self._held_out
        if mode == "interpreter":
            if self._interp is not None:
                search = [dict(s) for s in self._interp]
            if self._interp_held_out is not None:
                held = [dict(s) for s in self._interp_held_out]
        return search, held

    def describe(self, mode: str) -> dict:
        search, held = self._lists(mode)
        self._params = search + held
        shapes = []
        for i, params in enumerate(self._params):
            bytes_fn, flops_fn = self.ns.get("bytes_moved"), self.ns.get("flops")
            with torch.device("meta"):
                inputs = self.ns["make_inputs"](device="meta", **params)
            called = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)  # as `call` passes them
            shapes.append({
                "index": i, "label": _label(params), "held_out": i >= len(search), "added": False,
                "inputs": _describe_inputs(inputs), "nbytes": nbytes(inputs),
                "args": [list(a.shape) if isinstance(a, torch.Tensor) else None for a in called],
                "bytes": float(bytes_fn(**params)) if bytes_fn else None,
                "flops": float(flops_fn(**params)) if flops_fn else None,
            })
        return {"entry": self.entry, "atol": self.atol, "rtol": self.rtol,
                "allow_torch_only": self.allow_torch_only, "triton_share_min": self.triton_share_min,
                "has_tests": False,
                "interpreter_shapes_given": self._interp is not None, "shapes": shapes}

    def make_inputs(self, index: int, device: str):
        inputs = self.ns["make_inputs"](device=device, **self._params[index])
        return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)

    def call(self, inputs):
        return getattr(self.module, self.entry)(*inputs)

    def reference(self, inputs):
        return self.ns["reference"](*inputs)

    @property
    def torch_reference(self):
        """`baseline()` where the task has one: what a user would run in torch instead, where the reference is
        written for accuracy (a matmul in float32, say), not as a user would; else the reference."""
        baseline = self.ns.get("baseline")
        if callable(baseline):
            return lambda inputs: baseline(*inputs)
        return self.reference if self.has_reference else None


class _LoopRange:
    """Replaces `range` in a performance script: extra or fractional loop values."""

    def __init__(self):
        self.mode = "search"
        self.extra: list[float] = []
        self.first_call = True

    def __call__(self, *args):
        if not self.first_call or len(args) < 2 or not all(isinstance(a, int) for a in args):
            return tb_compat._builtin_range(*args)
        self.first_call = False
        start, stop = args[0], args[1]
        base = list(tb_compat._builtin_range(*args))
        if self.mode == "search":
            return base + [v if float(v).is_integer() and v >= stop else tb_compat.LoopIndex(v)
                           for v in self.extra]
        # held-out: between the script's own values, never equal to one of them.
        last = base[-1] if base else start
        mid = base[len(base) // 2] if base else start
        values = sorted({start + 0.25, mid + 0.25, last - 0.75})
        return [tb_compat.LoopIndex(v) for v in values if v >= start - 0.5]


class TritonBenchHarness(Harness):
    """A TritonBench-G task: its performance script and its instance tests."""

    def __init__(self, name: str, perf_source: str, tests_source: str | None, module: types.ModuleType,
                 extra_loop_values: list[float], module_source: str):
        self.name = name
        self.module = module
        self.module_source = module_source
        self.tests_source = tests_source
        self.has_tests = bool(tests_source and tests_source.strip())
        self.atol, self.rtol = 1e-3, 1e-1
        package = types.ModuleType("TritonBench_v1")
        package.__path__ = []
        sys.modules["TritonBench_v1"] = package
        sys.modules[f"TritonBench_v1.{name}"] = module
        setattr(package, name, module)
        compat = types.ModuleType("performance_utils")
        compat.Performance_Metrics = tb_compat.Performance_Metrics
        compat.do_bench_config = tb_compat.do_bench_config
        sys.modules["performance_utils"] = compat
        self.range = _LoopRange()
        self.range.extra = list(extra_loop_values)
        perf = _exec_module("kernelband_tb_perf", perf_source, f"<tritonbench:{name}_perf.py>",
                            extra={"range": self.range, "__name__": "kernelband_tb_perf"})
        self.metrics = perf.performance_metrics()
        self.entry = self._entry_name(perf_source)
        self._counts = (0, 0)

    @staticmethod
    def _entry_name(perf_source: str) -> str:
        for line in perf_source.splitlines():
            if line.startswith("from TritonBench_v1.") and " import " in line:
                return line.split(" import ", 1)[1].split("#")[0].split(",")[0].strip()
        return "call_op"

    def _build(self, mode: str, wanted: int | None, device) -> list:
        self.range.mode = mode
        self.range.first_call = True
        return self.metrics.build(wanted, device)

    def describe(self, mode: str) -> dict:
        shapes = []
        search = self._build("search", None, "meta")
        has_loop = not self.range.first_call
        n_orig = len(self._build_plain_count()) if self.range.extra else len(search)
        # A script without a `range` loop has no shapes between its own: no held-out shapes.
        held = self._build("held_out", None, "meta") if has_loop else []
        seen = set()
        for group, entries in (("search", search), ("held_out", held)):
            for j, entry in enumerate(entries):
                label = _describe_inputs(entry)
                if group == "held_out" and label in seen:
                    continue
                seen.add(label)
                try:
                    nbytes_moved = float(self.metrics.get_gbps(entry, 1000.0)) * 1e9
                except Exception:
                    nbytes_moved = None
                try:
                    nflops = float(self.metrics.get_tflops(entry, 1000.0)) * 1e12
                except Exception:
                    nflops = None
                shapes.append({"index": len(shapes), "group": group, "position": j, "label": label,
                               "held_out": group == "held_out", "added": group == "search" and j >= n_orig,
                               "inputs": label, "nbytes": nbytes(entry),
                               "bytes": nbytes_moved or None, "flops": nflops or None})
        self._shapes = shapes
        return {"entry": self.entry, "atol": self.atol, "rtol": self.rtol, "allow_torch_only": False,
                "has_tests": self.has_tests, "interpreter_shapes_given": False, "shapes": shapes}

    def _build_plain_count(self) -> list:
        saved = self.range.extra
        self.range.extra = []
        try:
            return self._build("search", None, "meta")
        finally:
            self.range.extra = saved

    def make_inputs(self, index: int, device: str):
        shape = self._shapes[index]
        entries = self._build(shape["group"], shape["position"], device)
        entry = entries[shape["position"]]
        if any(t.is_meta for t in tensors_in(entry)):
            # The script shares tensors between entries: build them all for real.
            entry = self._build(shape["group"], None, device)[shape["position"]]
        return self.metrics.to_cuda(entry)

    def call(self, inputs):
        return self.metrics.call_op(inputs)

    @property
    def torch_reference(self):
        """A reference of KernelBand's own where the task's meaning is plain (tasks/tritonbench_references.py):
        it never judges correctness here, which stays the starting kernel's."""
        from kernelband.tasks.tritonbench_references import REFERENCES
        return REFERENCES.get(self.name)

    def run_tests(self):
        """Run the instance's own test code against this worker's module."""
        namespace = dict(self.module.__dict__)
        namespace["__name__"] = "kernelband_tb_tests"
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(self.tests_source, f"<tritonbench:{self.name} tests>", "exec"), namespace)
        for key in ("result_gold", "results", "result"):
            if key in namespace:
                return namespace[key]
        return None


def finite_or_none(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return x

