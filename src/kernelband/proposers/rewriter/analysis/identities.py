"""A value combined once with its reduction's identity is that value: a running max started at -inf and
combined with one tile, `tl.maximum(tl.full([B], -inf, tl.float32), x)`, is the tile x; likewise a min started
at +inf (`tl.minimum(tl.full([B], inf, ...), x)`) and a sum started at zero (`tl.zeros([B], ...) + x`, which
`acc = tl.zeros(...); acc += x` is once its names are followed), in either operand order.

A blocked loop over a row that one block holds leaves exactly these forms behind (each loop run once), and
people write them by hand; read as the tile itself, the reductions over them are the one-block reductions they
compute. Only a combination that keeps the tile's shape is dropped (`tl.zeros([B]) + s` of a scalar s is a
tile of B copies, not s). The dtype the combination promotes to is not kept: a float widened holds the same
values, and the readers of these forms recognise computations by them, keeping the kernel's own statements
(and so its dtypes) when they rewrite it.
"""

from __future__ import annotations

import ast
import math

from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.values import tl_name

COMBINE = {"maximum": -math.inf, "minimum": math.inf}  # tl.NAME(identity, x) -> the identity's value


def constant(node: ast.AST) -> float | None:
    """The number a canonical form is for certain: a literal, `float("-inf")`, `-math.inf`, `-float("inf")`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = constant(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" \
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        try:
            return float(node.args[0].value)
        except ValueError:
            return None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math" \
            and node.attr == "inf":
        return math.inf
    return None


def filled(node: ast.AST) -> float | None:
    """The one value every element of `tl.zeros(shape, ...)` or `tl.full(shape, value, ...)` holds."""
    name = tl_name(node)
    if name == "zeros":
        return 0.0
    if name == "full":
        keywords = {k.arg: k.value for k in node.keywords}
        value = node.args[1] if len(node.args) > 1 else keywords.get("value")
        return None if value is None else constant(value)
    return None


class Identities(ast.NodeTransformer):
    """Rewrites a canonical form so that each value combined once with its reduction's identity, the tile's
    shape kept, reads as the value itself (module docstring)."""

    def __init__(self, shapes: Shapes) -> None:
        self.shapes = shapes

    def _same_shape(self, whole: ast.AST, part: ast.AST) -> bool:
        mine, theirs = self.shapes.of(whole), self.shapes.of(part)
        return mine is not None and mine == theirs

    def _other(self, whole: ast.AST, a: ast.AST, b: ast.AST, identity: float) -> ast.AST | None:
        """The operand that is not the identity, where the other one is and dropping it keeps the shape."""
        for fill, value in ((a, b), (b, a)):
            if filled(fill) == identity and self._same_shape(whole, value):
                return value
        return None

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = tl_name(node)
        if name in COMBINE and len(node.args) == 2 and not node.keywords:
            other = self._other(node, node.args[0], node.args[1], COMBINE[name])
            if other is not None:
                return other
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            other = self._other(node, node.left, node.right, 0.0)
            if other is not None:
                return other
        return node


def plain(node: ast.AST, shapes: Shapes) -> ast.AST:
    """A canonical form (owned by the caller: it is rewritten in place) with identity combinations dropped."""
    return Identities(shapes).visit(node)


IDENTITY = {"max": -math.inf, "min": math.inf, "sum": 0.0}


def unmasked(node: ast.AST, op: str) -> tuple[ast.AST, ast.AST]:
    """(c, v) for `tl.where(c, v, identity)`, a value masked to the identity of the reduction `op` where c is
    false (`tl.where(mask, tl.exp(x - m), 0.0)` in a sum): reduced, it is v's reduction over the lanes where c
    holds; (True, node) for any other value."""
    if tl_name(node) == "where" and len(node.args) == 3 and not node.keywords \
            and constant(node.args[2]) == IDENTITY[op]:
        return node.args[0], node.args[1]
    return ast.Constant(True), node
