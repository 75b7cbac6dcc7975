"""Arguments as the capture sees them, inside the captured program: a cheap key per call, which tells a new
signature from a seen one, and for a new signature only a full description, with the statistics of its tensors
and, within a budget, their values.

Nothing here waits for the device, and a launch pays for copies alone: a new signature's kept tensors are copied
(their statistics are read from the copy), a float tensor that is not kept has the elements its statistics read
copied, and an integer tensor that is not kept has its range reduced. The statistics themselves are computed
once the program has ended (`Keeper.finish`), or when the copies waiting for them pass `PENDING_BYTES`: each kind
of reduction is a kernel the program may never have run, and the first run of a kernel in a process loads it.
Copies and reductions are queued on the program's own stream, in order with its kernels. Nothing is written into
the program's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from kernelband.capture import records

SAMPLE = 1 << 20  # elements a float tensor's statistics are read from (evenly spaced)
INT_CASES = 32  # new signatures of one entry or kernel whose integer tensors are kept
PENDING_BYTES = 64 << 20  # copies of tensors that are not kept, held for their statistics until reduced


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

    def __init__(self, pending_bytes: int = PENDING_BYTES):
        self.pending_bytes = pending_bytes
        # reduced, on the device: a float tensor's (mean, std) as one float64 pair, an integer tensor's (low, high)
        self._stats: list[tuple[records.Tensor, torch.Tensor | tuple, bool]] = []
        # copied at the launch, not reduced yet: a kept tensor's memory (its view is made from its record's shape
        # and strides), or the sample of one that is not kept
        self._pending: list[tuple[records.Tensor, torch.Tensor, bool]] = []
        self._held = 0  # bytes of the pending copies that are not kept tensors
        self._kept: dict[str, dict[int, torch.Tensor]] = {}

    def describe(self, names: list[str], values: list, case_id: str, budget: Budget | None) -> list[records.Arg]:
        """The arguments of a new signature. With a budget, integer tensors (while the budget keeps signatures)
        and float tensors (while it has bytes) are copied, and the statistics of every tensor are prepared."""
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
            nbytes = span(value.shape, value.stride()) * value.element_size()
            keep = keep_ints if not tensor.is_float else nbytes <= budget.float_bytes
            if not keep:
                self._prepare(tensor, value)
                continue
            if tensor.is_float:
                budget.float_bytes -= nbytes
            with torch.no_grad():
                flat = value.as_strided((span(value.shape, value.stride()),), (1,), value.storage_offset())
                flat = flat.clone()
            self._kept.setdefault(case_id, {})[i] = flat
            tensor.saved = True
            # the copy holds the values as they were at the launch: its statistics are the tensor's
            self._pending.append((tensor, flat, True))
        if self._held > self.pending_bytes:
            self._reduce_pending()
        return args

    def _prepare(self, tensor: records.Tensor, value: torch.Tensor) -> None:
        """For a tensor that is not kept: the copy its statistics read, or (an integer tensor) its range."""
        try:
            with torch.no_grad():
                v = _real(value.detach())
                if not tensor.is_float:
                    self._stats.append((tensor, torch.aminmax(_ordered(v)), False))
                    return
                sample = _sample(v)
                # a view of the program's tensor (or of a transient copy) is copied, so the values stay those of
                # the launch and the memory held is only the sample's
                copy = sample.clone()
        except (RuntimeError, TypeError):  # a dtype whose copies or reductions torch lacks: drawn with the defaults
            return
        self._pending.append((tensor, copy, False))
        self._held += copy.numel() * copy.element_size()

    def _reduce_pending(self) -> None:
        """Queue the statistics of the copies waiting for them; a kept tensor's copy stays kept."""
        for tensor, values, kept in self._pending:
            try:
                with torch.no_grad():
                    # a kept tensor's statistics read its whole memory as the tensor's view; a sample is read whole
                    v = _real(values.as_strided(tensor.shape, tensor.stride)) if kept else values
                    if tensor.is_float:
                        self._stats.append((tensor, _moments(_sample(v) if kept else v), True))
                    else:
                        self._stats.append((tensor, torch.aminmax(_ordered(v)), False))
            except (RuntimeError, TypeError):  # a dtype whose reductions torch lacks: drawn with the defaults
                pass
        self._pending.clear()
        self._held = 0

    def finish(self, directory: Path) -> None:
        """Read the statistics back into their records and write each signature's kept tensors to
        `directory/<case id>.pt` ({argument index: the memory its strides span})."""
        self._reduce_pending()
        pairs = [stats if is_float else torch.stack([stats[0].double(), stats[1].double()])
                 for _, stats, is_float in self._stats]
        for (tensor, _, is_float), (a, b) in zip(self._stats, _read(pairs)):
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


def _read(pairs: list[torch.Tensor]) -> list[list[float]]:
    """The pairs' values on the host: one read (one wait) per device, not one per pair."""
    out: list = [None] * len(pairs)
    by_device: dict = {}
    for i, pair in enumerate(pairs):
        by_device.setdefault(pair.device, []).append(i)
    for indices in by_device.values():
        for i, values in zip(indices, torch.stack([pairs[i] for i in indices]).tolist()):
            out[i] = values
    return out


def _real(v: torch.Tensor) -> torch.Tensor:
    """A complex tensor as the real tensor of its parts (a view), whose statistics are those recorded."""
    return torch.view_as_real(v) if v.is_complex() else v


def _ordered(v: torch.Tensor) -> torch.Tensor:
    """A tensor whose range torch can reduce: bools as bytes."""
    return v.to(torch.uint8) if v.dtype == torch.bool else v


def _sample(v: torch.Tensor) -> torch.Tensor:
    """The elements a float tensor's statistics read: all of them up to SAMPLE, else evenly spaced in row-major
    order (a view of `v` where it is contiguous)."""
    if v.numel() <= SAMPLE:
        return v
    return (v if v.is_contiguous() else v.contiguous()).reshape(-1)[:: v.numel() // SAMPLE]


def _moments(sample: torch.Tensor) -> torch.Tensor:
    """The mean and the spread of a sample's finite values, as a float64 pair on its device (NaN where none)."""
    x = sample.float().reshape(-1)
    x = torch.where(torch.isfinite(x), x, torch.nan)
    mean = torch.nanmean(x)
    std = torch.nanmean((x - mean) ** 2).sqrt()
    return torch.stack([mean, std]).double()
