"""Loops split into an unmasked main part and a masked tail (FlagGems' softmax), read under one block: where a
row of n fits one block of B >= n > 0, tl.cdiv(n, B) == 1, so a bound such as `tl.cdiv(n, B) * B - B` (the last
block's start) is 0:

    for start in range(0, tl.cdiv(n, B) * B - B, B):    from 0 to 0: runs no block
        ... tl.load(ptrs)                                 (never runs: its lanes are never read)
    for start in range(tl.cdiv(n, B) * B - B, n, B):    from 0 to n: the one block, at offset 0
        ... tl.load(ptrs, mask=offs < n)

Each loop's start and end are read with tl.cdiv(n, B) replaced by 1 and the sums and products of numbers and
names folded: a loop whose start and end then coincide runs no block and leaves what it carries as it found it;
a loop from 0 to n covers the row. n is the one end among the loops that B does not enter. A loop that B's
values do not fold to either is left as it is, for the checks that refuse it. What a loop that runs no block
carries enters the next loop as it entered it (`entering`).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.syntax import assigned
from kernelband.proposers.rewriter.analysis.values import KernelValues, names_in, same, tl_name

Linear = dict[str, int]  # a sum of terms: each term's dump (or "" for the number) to its coefficient


@dataclass(frozen=True)
class Peeled:
    """Under one block of B >= n > 0: the loops that run no block, and the loops that start at 0."""

    empty: tuple[Loop, ...] = ()
    from_zero: frozenset[int] = frozenset()  # ids of the loops whose start folds to 0


def peeled(loops: list[Loop], param: str) -> Peeled:
    """The loops over blocks of `param` that run no block where one block covers the row, and the loops that
    then start at 0; nothing where no loop runs empty (the loops are read as they are written)."""
    if any(loop.form not in ("range", "while") or loop.start is None or loop.end is None for loop in loops):
        return Peeled()
    ends = {ast.dump(loop.end): loop.end for loop in loops if param not in names_in(loop.end)}
    if len(ends) != 1:
        return Peeled()
    [n] = ends.values()
    empty, from_zero = [], set()
    for loop in loops:
        start, end = _linear(_one_block(loop.start, n, param)), _linear(_one_block(loop.end, n, param))
        if start is None or end is None:
            return Peeled()
        if start == end:
            empty.append(loop)
        elif start == {} and end == _linear(n):
            from_zero.add(id(loop))
        else:
            return Peeled()
    if not empty or not from_zero:
        return Peeled()
    return Peeled(tuple(empty), frozenset(from_zero))


class _OneBlock(ast.NodeTransformer):
    """tl.cdiv(n, B) as 1: B >= n > 0 counts one block."""

    def __init__(self, n: ast.expr, param: str) -> None:
        self.n, self.param = n, param

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if tl_name(node) == "cdiv" and len(node.args) == 2 and same(node.args[0], self.n) \
                and same(node.args[1], ast.Name(self.param, ast.Load())):
            return ast.Constant(1)
        return self.generic_visit(node)


def _one_block(node: ast.expr, n: ast.expr, param: str) -> ast.expr:
    return _OneBlock(n, param).visit(copy.deepcopy(node))


def _linear(node: ast.expr) -> Linear | None:
    """The expression as a sum of integer multiples of terms, zero terms left out; a product of two terms, or a
    term that is not an integer, a name or a call, is one term of its own; None where a number is not an int."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, int) or isinstance(node.value, bool):
            return None
        return {"": node.value} if node.value else {}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _linear(node.operand)
        return None if inner is None else {k: -v for k, v in inner.items()}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _linear(node.left), _linear(node.right)
        if left is None or right is None:
            return None
        sign = 1 if isinstance(node.op, ast.Add) else -1
        out = dict(left)
        for key, value in right.items():
            out[key] = out.get(key, 0) + sign * value
        return {k: v for k, v in out.items() if v}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _linear(node.left), _linear(node.right)
        if left is None or right is None:
            return None
        for number, other in ((left, right), (right, left)):
            if set(number) <= {""}:
                scale = number.get("", 0)
                return {k: v * scale for k, v in other.items() if v * scale}
        return {ast.dump(node): 1}
    return {ast.dump(node): 1}


def entering(values: KernelValues, loop: cst.For | cst.While, name: str, empty: frozenset[int]) -> ast.expr | None:
    """The value `name` holds as the loop starts, where the loops that run no block (ids in `empty`) leave it as
    they found it: before the last earlier statement of the loop's block that assigns it, where that is such a
    loop; as the analysis reads it otherwise."""
    parent = values.kernel.ms.parents.get(id(loop))
    body = list(getattr(parent, "body", ()))
    index = next((i for i, s in enumerate(body) if s is loop), None)
    if not empty or index is None:
        return values.env_at(loop).get(name)
    last = next((s for s in reversed(body[:index]) if name in assigned(s)), None)
    if last is not None and id(last) in empty:
        return entering(values, last, name, empty)
    return values.env_at(loop).get(name)
