"""The fused_absmax rewrite: the host's `x.abs().max()` (two passes over x) as one, the infinity norm."""


from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, dotted, subnodes
from kernelband.proposers.rewriter.edits import (
    Found,
    Variant,
    replace_with,
)

# -- fusion (host side) ---------------------------------------------------------------------------------------
# PyTorch's infinity norm is one reduction pass; `x.abs().max()` is two (abs writes a copy, max reads it),
# with the same result in the same dtype (max picks one of the values; NaN propagates in both).
ONE_PASS_ABSMAX = 'torch.linalg.vector_norm({}, float("inf"))'


def _abs_of(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """E for `E.abs()` or `torch.abs(E)`."""
    if not isinstance(node, cst.Call):
        return None
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "abs" and not node.args:
        if dotted(node.func) != "torch.abs":
            return node.func.value
    if dotted(node.func) == "torch.abs" and len(node.args) == 1 and node.args[0].keyword is None:
        return node.args[0].value
    return None


def _absmax_of(call: cst.Call) -> cst.BaseExpression | None:
    """E for `E.abs().max()`, `torch.abs(E).amax()`, `torch.max(E.abs())` and the like, with no other
    argument (a max over one dimension is another thing)."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("max", "amax") and not call.args:
        if dotted(call.func) not in ("torch.max", "torch.amax"):
            return _abs_of(call.func.value)
    if dotted(call.func) in ("torch.max", "torch.amax") and len(call.args) == 1 and call.args[0].keyword is None:
        return _abs_of(call.args[0].value)
    return None


def fused_absmax(ms: ModuleSource) -> Found:
    if "torch" not in ms.imported:
        return Found([], ["the module does not `import torch`"])
    variants = []
    for statement in ms.module.body:
        if not isinstance(statement, cst.FunctionDef) or statement.name.value in ms.kernels:
            continue
        for call in subnodes(statement, cst.Call):
            if (tensor := _absmax_of(call)) is not None:
                variants.append(Variant(
                    "fused_absmax", f"{code(call)} in one pass: {ONE_PASS_ABSMAX.format(code(tensor))} in "
                    f"{statement.name.value}", frozenset({statement.name.value}),
                    ((call, replace_with(ONE_PASS_ABSMAX.format(code(tensor)))),)))
    return Found(variants, [] if variants else ["no `x.abs().max()` on the host to do in one pass"])
