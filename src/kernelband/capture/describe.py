"""Arguments as the capture sees them, inside the captured program: a cheap key per call, which tells a new
signature from a seen one, and for a new signature only a full description, with the statistics of its tensors
and, within a budget, their values.

Nothing here waits for the device: statistics and kept copies are queued on the program's own stream, in
order with its kernels, and read back once the program has ended (`Keeper.finish`). Nothing is written into
the program's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from kernelband.capture import records

SAMPLE = 1 << 20  # elements a float tensor's statistics are read from (evenly spaced)
INT_CASES = 32  # new signatures of one entry or kernel whose integer tensors are kept


def key(values) -> tuple:
    """What tells two calls' signatures apart: tensors' dtypes, shapes and strides, integer, bool, string and
    dtype values. Float values do not (a learning rate or an epsilon changes no shape)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append((v.dtype, v.shape, v.stride()))
        elif isinstance(v, bool):
            out.append(("b", v))
        elif isinstance(v, int):
            out.append(v)
        elif isinstance(v, float):
            out.append("f")
        elif v is None or isinstance(v, (str, torch.dtype)):
            out.append(v)
        else:
            out.append(("o", type(v).__name__))
    return tuple(out)


def kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor" if value.layout == torch.strided and not value.is_nested else "other"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if value is None:
        return "none"
    if isinstance(value, str):
        return "str"
    if isinstance(value, torch.dtype):
        return "dtype"
    return "other"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def span(shape, stride) -> int:
    """Elements from a tensor's first to its last, by its strides (0 for an empty one)."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


@dataclass
class Budget:
    """What one entry (or one wrapped kernel) may still keep: float bytes, and signatures whose integer tensors
    are kept."""
    float_bytes: int
    int_cases: int = INT_CASES


class Keeper:
    """The statistics and kept values of every new signature, until the program ends."""

    def __init__(self):
        self._stats: list[tuple[records.Tensor, torch.Tensor, bool]] = []
        self._kept: dict[str, dict[int, torch.Tensor]] = {}

    def describe(self, names: list[str], values: list, case_id: str, budget: Budget | None) -> list[records.Arg]:
        """The arguments of a new signature. With a budget, their statistics are queued and integer tensors
        (while the budget keeps signatures) and float tensors (while it has bytes) are copied."""
        args: list[records.Arg] = []
        keep_ints = budget is not None and budget.int_cases > 0
        if keep_ints:
            budget.int_cases -= 1
        for i, (name, value) in enumerate(zip(names, values)):
            k = kind(value)
            if k != "tensor":
                shown = dtype_name(value) if k == "dtype" else (type(value).__name__ if k == "other" else value)
                args.append(records.Arg(name, k, shown))
                continue
            same = next((j for j, earlier in enumerate(values[:i]) if earlier is value), None)
            tensor = records.Tensor(dtype_name(value.dtype), list(value.shape), list(value.stride()))
            args.append(records.Arg(name, "tensor", tensor=tensor, same_as=same))
            if budget is None or same is not None or value.numel() == 0:
                continue
            self._queue_stats(tensor, value)
            nbytes = span(value.shape, value.stride()) * value.element_size()
            keep = keep_ints if not tensor.is_float else nbytes <= budget.float_bytes
            if keep:
                if tensor.is_float:
                    budget.float_bytes -= nbytes
                with torch.no_grad():
                    flat = value.as_strided((span(value.shape, value.stride()),), (1,), value.storage_offset())
                    self._kept.setdefault(case_id, {})[i] = flat.clone()
                tensor.saved = True
        return args

    def _queue_stats(self, tensor: records.Tensor, value: torch.Tensor) -> None:
        try:
            self._queue(tensor, value)
        except (RuntimeError, TypeError):  # a dtype whose reductions torch lacks: drawn with the defaults
            pass

    def _queue(self, tensor: records.Tensor, value: torch.Tensor) -> None:
        with torch.no_grad():
            v = value.detach()
            if v.is_complex():
                v = torch.view_as_real(v)
            if not tensor.is_float:
                lo, hi = torch.aminmax(v.to(torch.uint8) if v.dtype == torch.bool else v)
                self._stats.append((tensor, torch.stack([lo.double(), hi.double()]), False))
                return
            if v.numel() > SAMPLE:
                v = (v if v.is_contiguous() else v.contiguous()).reshape(-1)[:: v.numel() // SAMPLE]
            x = v.float().reshape(-1)
            x = torch.where(torch.isfinite(x), x, torch.nan)
            mean = torch.nanmean(x)
            std = torch.nanmean((x - mean) ** 2).sqrt()
            self._stats.append((tensor, torch.stack([mean, std]).double(), True))

    def finish(self, directory: Path) -> None:
        """Read the statistics back into their records and write each signature's kept tensors to
        `directory/<case id>.pt` ({argument index: the memory its strides span})."""
        for tensor, stats, is_float in self._stats:
            a, b = stats.tolist()
            if is_float:
                # All values non-finite (an output buffer never written, say): draw standard normals.
                ok = a == a and b == b
                tensor.mean, tensor.std = (a, b) if ok else (0.0, 1.0)
            else:
                tensor.low, tensor.high = a, b
        self._stats.clear()
        directory.mkdir(parents=True, exist_ok=True)
        for case_id, kept in self._kept.items():
            torch.save({i: t.cpu() for i, t in kept.items()}, directory / f"{case_id}.pt")
        self._kept.clear()
