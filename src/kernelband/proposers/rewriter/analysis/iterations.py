"""The elements each iteration of a loop over a row reaches, whatever the loop counts: two loops that walk the
same row in the same blocks read the same elements in the same iteration, whether one counts element offsets
and the other block indices:

    for off in range(0, n, BLOCK):         off          the iteration's offset
    start = 0                              start        the same offset
    while start < n: ... start += BLOCK
    for i in range(tl.cdiv(n, BLOCK)):     i * BLOCK    the same offset again

`iteration` writes a value of one iteration with the loop's variable as that offset (`__iteration`), so that
values of such loops compare equal; `same_blocks` says whether two loops of different counts walk the same
blocks, and `index_alias` gives the one's variable from the other's.
"""

from __future__ import annotations

import ast
import copy

from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.values import is_call, marker_arg

ITERATION = "__iteration"


def _block(loop: Loop) -> str | None:
    """The one constexpr a loop over block indices (range over cdiv) advances its offsets by."""
    return next(iter(loop.block)) if loop.form == "cdiv" and len(loop.block) == 1 else None


def iteration(node: ast.AST, loop: Loop) -> ast.AST:
    """A value of one iteration of a loop, its variable written as the iteration's offset whatever the loop
    calls it: a block index i of a loop over blocks of B as `__iteration // B`, and (`__iteration // B) * B` as
    the offset itself."""
    block = _block(loop)

    class _Mark(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.AST:
            self.generic_visit(call)
            if (is_call(call, "__loop") or is_call(call, "__var") and loop.form == "while") \
                    and marker_arg(call) == loop.var:
                mark = ast.Name(ITERATION)
                return mark if block is None else ast.BinOp(mark, ast.FloorDiv(), ast.Name(block))
            return call

        def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
            self.generic_visit(node)
            if block is not None and isinstance(node.op, ast.Mult):
                for index, factor in ((node.left, node.right), (node.right, node.left)):
                    if ast.unparse(factor) == block and ast.unparse(index) == f"{ITERATION} // {block}":
                        return ast.Name(ITERATION)
            return node

    return _Mark().visit(copy.deepcopy(node))


def _offsets(loop: Loop) -> str | None:
    """The block a loop's variable counts offsets in: from 0 by the constexpr (range or while)."""
    if loop.form not in ("range", "while") or loop.start is None or loop.step is None:
        return None
    starts = isinstance(loop.start, ast.Constant) and loop.start.value == 0
    return ast.unparse(loop.step) if starts and ast.unparse(loop.step) in loop.block else None


def same_blocks(a: Loop, b: Loop) -> bool:
    """Whether one loop counts offsets and the other block indices over the same blocks of the same row: from
    0 to the same end in blocks of one constexpr."""
    for offsets, indices in ((a, b), (b, a)):
        block = _offsets(offsets)
        if block is not None and block == _block(indices) and offsets.end is not None and indices.end is not None \
                and ast.unparse(offsets.end) == ast.unparse(indices.end) and indices.start is not None \
                and isinstance(indices.start, ast.Constant) and indices.start.value == 0:
            return True
    return False


def index_alias(first: Loop, second: Loop) -> str:
    """Code that sets the second loop's variable from the first's where `same_blocks`: its offset or index."""
    if _offsets(first) is not None:
        return f"{second.var} = {first.var} // {_offsets(first)}\n"
    return f"{second.var} = {first.var} * {_block(first)}\n"
