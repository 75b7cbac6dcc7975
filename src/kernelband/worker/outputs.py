"""Flatten what a module returned into named tensors and plain values.

Tensors go to a raw tensor file (`kernelband.tensorfile`), straight from the
device they are on; everything else travels as JSON. The parent rebuilds
nothing: it compares entry by entry, by path.
"""

from __future__ import annotations

import torch

from kernelband.tensorfile import DTYPES

# dtypes the tensor file stores as they are; others travel as raw bytes.
_NATIVE = set(DTYPES.values())


def flatten(obj, path: str = "") -> tuple[list[dict], dict[str, torch.Tensor]]:
    entries: list[dict] = []
    tensors: dict[str, torch.Tensor] = {}

    def visit(value, where: str) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach()
            entry = {"path": where, "kind": "tensor", "dtype": str(t.dtype).replace("torch.", ""),
                     "shape": list(t.shape)}
            t = t.contiguous()  # stays on its device: the tensor file copies it once, straight from there
            if t.is_complex():
                t = torch.view_as_real(t).contiguous()
                entry["stored_as"] = "real_pairs"
            elif t.dtype not in _NATIVE:
                t = t.view(torch.uint8) if t.element_size() == 1 else t.reshape(-1).view(torch.uint8)
                entry["stored_as"] = "bytes"
            tensors[where] = t
            entries.append(entry)
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{where}[{i}]")
        elif value is None or isinstance(value, (bool, int, float, str)):
            entries.append({"path": where, "kind": "value", "value": value})
        else:
            entries.append({"path": where, "kind": "opaque", "value": type(value).__name__})

    visit(obj, path)
    return entries, tensors
