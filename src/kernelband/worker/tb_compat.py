"""A base class compatible with TritonBench's `performance_utils` module.

TritonBench-G performance scripts subclass `Performance_Metrics` and fill
`self.input_tensors` in `get_input_tensors()`. This class keeps their
interface (`get_input_tensors`, `to_cuda`, `call_op`, `get_gbps`,
`get_tflops`, `get_runtime`, `run_benchmark`) and adds what the evaluator
needs: building the inputs of one shape without building all of them.

Building one shape: the script's loop runs with PyTorch's default device set
to `meta` (no memory, no time) for every entry but the one wanted, which is
built on the target device directly. `input_tensors` counts the entries as
they are appended, which is how the class knows which one is being built.
"""

from __future__ import annotations

import builtins
import json
import math

import torch

_builtin_range = builtins.range


class do_bench_config:  # noqa: N801 - the name the scripts import
    def __init__(self, warm_up=25, repetition=100, grad_to_none=None, quantiles=(0.5, 0.8, 0.2),
                 return_mode="median"):
        self.warm_up = warm_up
        self.repetition = repetition
        self.grad_to_none = grad_to_none
        self.quantiles = list(quantiles) if quantiles else None
        self.return_mode = return_mode


class LoopIndex(int):
    """A loop index that stands for a fractional exponent or multiplier.

    `2 ** LoopIndex(12.5)` is round(2 ** 12.5) and `128 * LoopIndex(6.5)` is 832:
    this is how shapes between the script's own are made (extra and held-out
    shapes) without editing the script.
    """

    def __new__(cls, exact: float):
        obj = super().__new__(cls, math.floor(exact))
        obj.exact = float(exact)
        return obj

    def __rpow__(self, base):
        return int(round(base ** self.exact))

    def __rmul__(self, other):
        if isinstance(other, (int, float)):
            return int(round(other * self.exact))
        return NotImplemented

    __mul__ = __rmul__

    def __repr__(self) -> str:
        return f"LoopIndex({self.exact})"


class _Builder:
    """Decides, entry by entry, on which device the script's tensors are made."""

    def __init__(self, wanted: int | None, device: str | torch.device):
        self.wanted = wanted
        self.device = device
        self.count = 0

    def device_for_next(self):
        if self.wanted is None or self.count == self.wanted:
            return self.device
        return "meta"

    def appended(self) -> None:
        self.count += 1
        torch.set_default_device(self.device_for_next())


class _EntryList(list):
    def __init__(self, items, builder: _Builder | None):
        super().__init__(items)
        self._builder = builder

    def append(self, item) -> None:
        super().append(item)
        if self._builder is not None:
            self._builder.appended()


class Performance_Metrics:  # noqa: N801 - the name the scripts import
    def __init__(self, op_name, dtype=None, is_backward=False, **kwargs):
        self.op_name = op_name
        self.dtype = dtype
        self.is_backward = is_backward
        self.kwargs = kwargs
        self._builder: _Builder | None = None
        self._entries = _EntryList([], None)
        self.do_bench_config = do_bench_config()

    @property
    def input_tensors(self):
        return self._entries

    @input_tensors.setter
    def input_tensors(self, value):
        self._entries = _EntryList(value, getattr(self, "_builder", None))

    def build(self, wanted: int | None, device) -> list:
        """Run `get_input_tensors` so that only entry `wanted` is real (all if None)."""
        previous, cuda = torch.get_default_device(), torch.Tensor.cuda
        self._builder = _Builder(wanted, device)
        self.input_tensors = []
        torch.set_default_device(self._builder.device_for_next())
        # an entry built on meta stays there when the script moves it itself (fast_rms_layernorm's module makes
        # its weight with `torch.ones(n).cuda()`): a meta tensor has no data to copy
        torch.Tensor.cuda = lambda t, *args, **kwargs: t if t.is_meta else cuda(t, *args, **kwargs)
        try:
            self.get_input_tensors()
        finally:
            torch.set_default_device(previous)
            torch.Tensor.cuda = cuda
            self._builder = None
        # The script's list is not kept: a worker lives on between requests, and a shape's tensors
        # (every shape's, where the script shares tensors between entries) would stay on the GPU.
        entries, self._entries = list(self._entries), _EntryList([], None)
        return entries

    # The interface the scripts override.
    def get_input_tensors(self):
        raise NotImplementedError

    def to_cuda(self, input_tensor):
        raise NotImplementedError

    def call_op(self, input_tensor):
        raise NotImplementedError

    def get_gbps(self, input_tensor, runtime):
        raise NotImplementedError

    def get_tflops(self, input_tensor, runtime):
        raise NotImplementedError

    def get_do_bench_config(self, warmup=None, rep=None):
        self.do_bench_config = do_bench_config(warm_up=warmup if warmup is not None else 25,
                                               repetition=rep if rep is not None else 100)

    def get_runtime(self, op) -> float:
        import triton

        cfg = self.do_bench_config
        ms = triton.testing.do_bench(op, warmup=cfg.warm_up, rep=cfg.repetition,
                                     quantiles=cfg.quantiles, return_mode=cfg.return_mode)
        return ms[0] if isinstance(ms, (list, tuple)) else ms

    def run_benchmark(self):
        results = []
        self.get_input_tensors()
        for input_tensor_ in self.input_tensors:
            input_tensor = self.to_cuda(input_tensor_)
            ms = self.get_runtime(lambda t=input_tensor: self.call_op(t))
            results.append({"input_size": [str(getattr(t, "shape", t)) for t in _tensors(input_tensor)],
                            "ms": ms, "GB/s": self.get_gbps(input_tensor, ms),
                            "TFLOPS": self.get_tflops(input_tensor, ms)})
            print(json.dumps(results[-1]))
        return results


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    return []
