"""Correctness, decided in the trusted parent.

Outputs arrive as a list of entries (path, kind, dtype, shape, value) and a
raw tensor file (`kernelband.tensorfile`); the parent loads both sides and
compares them with `torch.allclose`, the paper's rule
|cand - ref| <= atol + rtol * |ref|.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from kernelband import tensorfile


@dataclass
class Outputs:
    entries: list[dict]
    tensors: dict[str, torch.Tensor]

    @classmethod
    def load(cls, reply: dict, remove: bool = True, device: str = "cpu") -> Outputs:
        """The tensors go straight to `device`: on a GPU machine the parent compares on the GPU."""
        path = reply.get("file")
        tensors = {}
        if path:
            tensors = tensorfile.read(path, reply.get("layout") or {}, device=device)
            if remove:
                try:
                    os.remove(path)
                except OSError:
                    pass
        return cls(list(reply.get("entries", [])), tensors)

    def to(self, device: str) -> Outputs:
        """The same outputs on `device` (themselves where they are there already)."""
        if all(str(t.device) == device for t in self.tensors.values()):
            return self
        return Outputs(self.entries, {k: t.to(device) for k, t in self.tensors.items()})

    def nbytes(self, prefix: str = "result") -> int:
        return sum(t.numel() * t.element_size() for k, t in self.tensors.items() if k.startswith(prefix))


@dataclass
class Mismatch:
    outcome: str  # "wrong_output" | "suspicious"
    check: str  # which rule: "allclose", "structure", "dtype", "shape", "nan", "zeros", ...
    path: str
    detail: str
    max_abs: float | None = None
    max_rel: float | None = None


def _errors(cand: torch.Tensor, ref: torch.Tensor, atol: float) -> tuple[float, float]:
    c, r = cand.double(), ref.double()
    finite = torch.isfinite(c) & torch.isfinite(r)
    if not bool(finite.any()):
        return math.nan, math.nan
    diff = (c - r).abs()[finite]
    rabs = r.abs()[finite]
    max_abs = float(diff.max())
    big = rabs > atol
    max_rel = float((diff[big] / rabs[big]).max()) if bool(big.any()) else 0.0
    return max_abs, max_rel


def compare(ref: Outputs, cand: Outputs, atol: float, rtol: float, prefix: str = "",
            ignore: frozenset[str] | set[str] = frozenset()) -> Mismatch | None:
    """None when `cand` matches `ref`; else the first mismatch. Outputs whose path is in `ignore` are left out."""
    ref_entries = {e["path"]: e for e in ref.entries if e["path"].startswith(prefix) and e["path"] not in ignore}
    cand_entries = {e["path"]: e for e in cand.entries if e["path"].startswith(prefix) and e["path"] not in ignore}
    if set(ref_entries) != set(cand_entries):  # a dict's key order carries no meaning
        missing = [p for p in ref_entries if p not in cand_entries]
        extra = [p for p in cand_entries if p not in ref_entries]
        return Mismatch("wrong_output", "structure", (missing or extra or [""])[0],
                        f"outputs differ in structure (missing {missing[:3]}, unexpected {extra[:3]})")
    for path, re_ in ref_entries.items():
        ce = cand_entries[path]
        if re_["kind"] != ce["kind"]:
            return Mismatch("wrong_output", "structure", path, f"{path}: {ce['kind']} where the reference has "
                            f"a {re_['kind']}")
        if re_["kind"] == "value":
            rv, cv = re_.get("value"), ce.get("value")
            if isinstance(rv, (int, float)) and isinstance(cv, (int, float)) and not isinstance(rv, bool):
                if not math.isclose(cv, rv, rel_tol=rtol, abs_tol=atol) and not (math.isnan(rv) and math.isnan(cv)):
                    return Mismatch("wrong_output", "allclose", path, f"{path}: {cv!r} where the reference has {rv!r}",
                                    abs(cv - rv), abs(cv - rv) / abs(rv) if rv else math.inf)
            elif rv != cv:
                return Mismatch("wrong_output", "value", path, f"{path}: {cv!r} where the reference has {rv!r}")
            continue
        if re_["kind"] == "opaque":
            if re_.get("value") != ce.get("value"):
                return Mismatch("wrong_output", "structure", path, f"{path}: a {ce.get('value')} where the "
                                f"reference returns a {re_.get('value')}")
            continue
        if re_["dtype"] != ce["dtype"]:
            return Mismatch("wrong_output", "dtype", path, f"{path}: dtype {ce['dtype']}, the reference's is "
                            f"{re_['dtype']}")
        if re_["shape"] != ce["shape"]:
            return Mismatch("wrong_output", "shape", path, f"{path}: shape {ce['shape']}, the reference's is "
                            f"{re_['shape']}")
        r, c = ref.tensors.get(path), cand.tensors.get(path)
        if r is None or c is None or r.shape != c.shape or r.dtype != c.dtype:
            return Mismatch("wrong_output", "structure", path, f"{path}: tensor data missing or malformed")
        if re_.get("stored_as") == "bytes" or r.dtype == torch.bool:
            if not torch.equal(r, c):
                return Mismatch("wrong_output", "equal", path, f"{path}: differs from the reference")
            continue
        if r.is_floating_point() and not bool(torch.isfinite(c).all()):
            for name, bad in (("nan", torch.isnan), ("inf", torch.isinf)):
                if bool(bad(c).any()) and not bool(bad(r).any()):
                    n = int(bad(c).sum())
                    return Mismatch("suspicious", name, path, f"{path}: {n} {name.upper()} values where the "
                                    "reference has none")
        if c.numel() and not bool(c.any()) and bool(r.any()):
            return Mismatch("suspicious", "zeros", path, f"{path}: all zeros where the reference is not")
        if not r.is_floating_point():
            # Indices, counts and quantized values: tolerances would let 1000 pass for 1001.
            if not torch.equal(r, c):
                max_abs = float((c.double() - r.double()).abs().max())
                return Mismatch("wrong_output", "equal", path, f"{path}: integer values differ from the "
                                f"reference (max abs error {max_abs:.3g})", max_abs)
            continue
        if not torch.allclose(c, r, atol=atol, rtol=rtol, equal_nan=True):
            max_abs, max_rel = _errors(c, r, atol)
            return Mismatch("wrong_output", "allclose", path,
                            f"{path}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g} "
                            f"(atol={atol:g}, rtol={rtol:g})", max_abs, max_rel)
    return None


def mismatched_paths(a: Outputs, b: Outputs, atol: float, rtol: float) -> list[str]:
    """Every output path on which two runs disagree (a difference in structure ends the search)."""
    found: set[str] = set()
    while (m := compare(a, b, atol, rtol, ignore=found)) is not None and m.check != "structure":
        found.add(m.path)
    return sorted(found)
