"""Inputs of a captured task: what the harness of a task that `kernelband capture` wrote calls in
`make_inputs`. It runs in the evaluator's workers, so it imports torch alone.

A task lists its arguments as templates: `T` for a tensor, `V` for an integer that is one of the task's size
variables, `Scaled` for an integer that grows with one, `Same` for an argument that is an earlier one again;
any other value is passed as it is. A tensor's dims are numbers, the names of size variables or whole multiples of them ("2*rows"). A seen case's
tensors carry their exact strides and, where the capture kept them, their values: the file `<case>.pt` beside
the task (`TASK_DATA`, which KernelBand copies where the worker may read it). Other tensors are drawn under the
evaluator's seed: integers within the captured range, floats with the captured mean and spread.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported where a tensor is built, not here: KernelBand's own process reads the templates and sizes
# (capture's plan and writer) and needs no torch.


@dataclass(frozen=True)
class V:
    """An integer argument that is the size variable `name`, or a multiple of one: "2*rows"."""
    name: str


@dataclass(frozen=True)
class Scaled:
    """An integer argument seen as `value` where the size variable `name` was `base`: it grows with it."""
    value: int
    name: str
    base: int


@dataclass(frozen=True)
class Same:
    """The very same tensor as argument `index`."""
    index: int


@dataclass(frozen=True)
class T:
    dtype: str
    shape: tuple
    stride: tuple | None = None  # exact strides (a seen case); else dense in `order`
    order: tuple | None = None  # dims from the slowest-varying to the fastest (None: row-major)
    expanded: tuple = ()  # dims of stride 0 (broadcast)
    low: float | None = None  # integers: the range values are drawn from
    high: float | None = None
    mean: float = 0.0  # floats: the mean and spread they are drawn with
    std: float = 1.0
    saved: int | None = None  # where its values are in the case's file (the captured argument's index)


def size_of(dim, sizes: dict) -> int:
    """A dim: a number, a size variable's name, or a whole multiple of one ("2*rows")."""
    if not isinstance(dim, str):
        return int(dim)
    factor, _, name = dim.rpartition("*")
    return int(factor or 1) * int(sizes[name])


def _dims(shape: tuple, sizes: dict) -> list[int]:
    return [size_of(d, sizes) for d in shape]


def _span(shape: list[int], stride: tuple) -> int:
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _dense_stride(t: T, shape: list[int]) -> tuple:
    order = list(t.order) if t.order is not None else list(range(len(shape)))
    stride = [0] * len(shape)
    step = 1
    for d in reversed(order):
        if d in t.expanded:
            continue
        stride[d] = step
        step *= max(shape[d], 1)
    return tuple(stride)


def _draw(t: T, n: int, device) -> torch.Tensor:
    import torch

    dtype = getattr(torch, t.dtype)
    if dtype.is_floating_point or dtype.is_complex:
        values = torch.randn(n, device=device, dtype=torch.float32) * t.std + t.mean
        return values.to(dtype)
    low = 0 if t.low is None else math.ceil(t.low)
    high = 1 if t.high is None else math.floor(t.high)
    values = torch.randint(low, max(high, low) + 1, (n,), device=device, dtype=torch.int64)
    return values.to(dtype)


def tensor(t: T, sizes: dict, device, saved: torch.Tensor | None = None) -> torch.Tensor:
    shape = _dims(t.shape, sizes)
    stride = t.stride if t.stride is not None else _dense_stride(t, shape)
    n = _span(shape, stride)
    if saved is not None and str(device) != "meta":
        flat = saved.to(device)
    else:
        flat = _draw(t, n, device)
    return flat.as_strided(shape, stride)


def build(args: list, sizes: dict, device, data_dir: str | None = None, case: str | None = None) -> tuple:
    """The arguments for one shape: `sizes` gives the size variables; `case` names a seen case whose kept
    tensors lie in `data_dir` (not read for the "meta" device, which builds no values)."""
    kept = {}
    if case is not None and str(device) != "meta" and any(isinstance(a, T) and a.saved is not None for a in args):
        import torch

        path = os.path.join(data_dir or "", f"{case}.pt")
        if not data_dir or not os.path.exists(path):
            raise FileNotFoundError(f"the kept values of case {case} are missing ({path}): keep the task's "
                                    "<task>.data/ folder beside its file")
        kept = torch.load(path, map_location="cpu", weights_only=True)
    out: list = []
    for a in args:
        if isinstance(a, T):
            out.append(tensor(a, sizes, device, kept.get(a.saved) if a.saved is not None else None))
        elif isinstance(a, V):
            out.append(size_of(a.name, sizes))
        elif isinstance(a, Scaled):
            out.append(max(1, math.ceil(a.value * sizes[a.name] / a.base)))
        elif isinstance(a, Same):
            out.append(out[a.index])
        else:
            out.append(a)
    return tuple(out)
