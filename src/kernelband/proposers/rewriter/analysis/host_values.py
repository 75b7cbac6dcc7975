"""Host values a rewrite may evaluate once more, before or beside a launch, and get the same: the facts a host
guard (`if 0 < n <= 16384:`), a hoisted local or a value read twice rely on."""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.syntax import dotted

PURE = ("int", "len", "min", "max", "abs", "triton.cdiv", "triton.next_power_of_2")  # host functions of values


def plain(node: cst.BaseExpression) -> bool:
    """A name, an attribute of one, or one indexed by an integer (`n`, `self.n`, `x.shape[1]`): reading it
    twice reads the same value."""
    if isinstance(node, cst.Subscript):
        return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, cst.Integer) and plain(node.value)
    return dotted(node) is not None


def rereadable(node: cst.BaseExpression) -> bool:
    """Arithmetic of plain values, constants, their items and slices (`x.shape[-2:][0]`,
    `configs[dtype]["BLOCK_K"]`) and a tensor's sizes (`x.stride(0)`, `x.size(1)`, `x.numel()`): evaluating it
    again gives the same value."""
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString) or plain(node):
        return True
    if isinstance(node, cst.Subscript):
        return rereadable(node.value) and all(
            isinstance(e.slice, cst.Index) and rereadable(e.slice.value) or isinstance(e.slice, cst.Slice) and all(
                part is None or rereadable(part) for part in (e.slice.lower, e.slice.upper, e.slice.step))
            for e in node.slice)
    if isinstance(node, cst.Call) and all(a.keyword is None and not a.star and rereadable(a.value) for a in node.args):
        if isinstance(node.func, cst.Attribute) and plain(node.func.value):
            return node.func.attr.value in ("stride", "size", "numel", "dim") or dotted(node.func) in PURE
        return dotted(node.func) in PURE
    if isinstance(node, cst.BinaryOperation):
        return rereadable(node.left) and rereadable(node.right)
    if isinstance(node, cst.UnaryOperation):
        return rereadable(node.expression)
    return False
