"""Tensors from a worker to the parent: one raw file per reply, in the worker's directory (`/dev/shm`).

Each tensor's bytes lie at a 64-byte-aligned offset; the layout (offset, byte count, dtype, shape) travels
in the JSON reply. The worker copies each tensor straight from the GPU into the memory-mapped file (one
copy). The parent maps the file and copies each tensor to host memory, with no lock held, then to the GPU
under the comparison's hold of the GPU (two copies; `read(..., device=...)` can also go to the GPU in
one). Outputs of hundreds of MB cost three copies instead of safetensors' five.

The parent trusts nothing in the layout: every dtype must be one of a fixed list and every tensor must lie
inside the file with exactly the bytes its dtype and shape need.
"""

from __future__ import annotations

import math
import os

import torch

ALIGN = 64
# What a worker may store (it converts anything else: complex to real pairs, the rest to raw bytes).
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                 "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64")
    if hasattr(torch, name)
}


class TensorFileError(ValueError):
    """The file or its layout is not what a well-behaved worker writes."""


def write(tensors: dict[str, torch.Tensor], path: str) -> dict[str, dict]:
    """Write `tensors` (on any device) to `path`; returns the layout to send with the reply."""
    layout: dict[str, dict] = {}
    offset = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        layout[name] = {"offset": offset, "nbytes": nbytes, "dtype": str(t.dtype).replace("torch.", ""),
                        "shape": list(t.shape)}
        offset += -(-nbytes // ALIGN) * ALIGN
    with open(path, "wb") as f:
        f.truncate(max(offset, 1))
    buf = torch.from_file(path, shared=True, size=max(offset, 1), dtype=torch.uint8)
    for name, t in tensors.items():
        spec = layout[name]
        if spec["nbytes"]:
            dst = buf[spec["offset"]:spec["offset"] + spec["nbytes"]].view(t.dtype).view(t.shape)
            dst.copy_(t)
    del buf  # unmaps; the data stays in the file
    return layout


def read(path: str, layout: dict, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a worker's file, copied to `device` (the file may be removed afterwards)."""
    if not isinstance(layout, dict):
        raise TensorFileError("the tensor layout is not a mapping")
    size = os.path.getsize(path)
    buf = torch.from_file(path, shared=False, size=size, dtype=torch.uint8) if size else None
    out: dict[str, torch.Tensor] = {}
    for name, spec in layout.items():
        dtype, shape, offset, nbytes = _checked(name, spec, size)
        if nbytes == 0:
            out[name] = torch.empty(shape, dtype=dtype, device=device)
            continue
        view = buf[offset:offset + nbytes].view(dtype).view(shape)
        # A copy now: the worker could still write to the file after its reply.
        out[name] = view.to(device) if device != "cpu" else view.clone()
    return out


def _checked(name: str, spec, size: int) -> tuple[torch.dtype, list[int], int, int]:
    if not isinstance(spec, dict):
        raise TensorFileError(f"{name}: the layout entry is not a mapping")
    dtype = DTYPES.get(spec.get("dtype"))
    shape, offset, nbytes = spec.get("shape"), spec.get("offset"), spec.get("nbytes")
    if dtype is None:
        raise TensorFileError(f"{name}: dtype {spec.get('dtype')!r} is not allowed")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise TensorFileError(f"{name}: bad shape {shape!r}")
    if not (type(offset) is int and type(nbytes) is int and offset >= 0 and offset % ALIGN == 0):
        raise TensorFileError(f"{name}: bad offset {offset!r}")
    if nbytes != math.prod(shape) * dtype.itemsize or offset + nbytes > size:
        raise TensorFileError(f"{name}: {nbytes} bytes at {offset} do not fit the shape or the file")
    return dtype, shape, offset, nbytes
