"""Loops that walk a row backwards, read as the forward walk over the same blocks.

`range(a, b, -s)` takes a, a - s, ... down to the last value above b. Where a - b is a multiple of s (read from
the sums: `tl.cdiv(n, B) * B - B` down to `-B`, `tl.cdiv(n, B) - 1` down to `-1`), those are exactly the values
of `range(b + s, a + s, s)`: the same blocks, visited last to first. A reduction over them (a sum, a max, a tl.dot
accumulator) does not depend on the order in which it sees its blocks, and every value a loop carries other than
such a reduction is checked as it is in a forward walk (`blocked`, `carries`); so the forward walk is what the
analyses of a row read, with its direction kept as a fact (`Walk.backward`).

A backward loop whose values are not such a set is refused with what it walks instead: down to a value other
than the row's start (part of a row), or a variable that counts what is left of the row (`range(n, 0, -B)`), not
a block's offset; so is a forward loop that steps by other than the block (`not_a_row`).
"""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter

from kernelband.proposers.rewriter.analysis.block_reads import readable
from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.values import same, tl_name

Linear = Counter  # the dump of each term -> its integer coefficient ("" the constant)


def _negated(step: ast.expr | None) -> ast.expr | None:
    """s where the step is -s (a negative literal or a negated value), else None."""
    if isinstance(step, ast.Constant) and type(step.value) is int and step.value < 0:
        return ast.Constant(-step.value)
    if isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub):
        return step.operand
    return None


def _linear(node: ast.expr, sign: int = 1, into: Linear | None = None, terms: dict | None = None) -> Linear:
    """The sum as integer multiples of its terms (each term any other value, kept whole)."""
    into = Counter() if into is None else into
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        _linear(node.left, sign, into, terms)
        _linear(node.right, sign if isinstance(node.op, ast.Add) else -sign, into, terms)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _linear(node.operand, -sign, into, terms)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        into[""] += sign * node.value
    else:
        key = ast.dump(node)
        into[key] += sign
        if terms is not None:
            terms[key] = node
    return into


def _sum(a: ast.expr, b: ast.expr) -> ast.expr:
    """a + b with terms that cancel left out (`tl.cdiv(n, B) * B - B` + `B` is `tl.cdiv(n, B) * B`)."""
    terms: dict = {}
    total = _linear(a, 1, None, terms)
    _linear(b, 1, total, terms)
    out: ast.expr | None = None
    for key, count in total.items():
        if count == 0 or key == "":
            continue
        term = terms[key] if abs(count) == 1 else ast.BinOp(ast.Constant(abs(count)), ast.Mult(), terms[key])
        if out is None:
            out = term if count > 0 else ast.UnaryOp(ast.USub(), term)
        else:
            out = ast.BinOp(out, ast.Add() if count > 0 else ast.Sub(), term)
    constant = total[""]
    if out is None:
        return ast.Constant(constant)
    if constant:
        out = ast.BinOp(out, ast.Add() if constant > 0 else ast.Sub(), ast.Constant(abs(constant)))
    return out


def _multiple(node: ast.expr, step: ast.expr) -> ast.expr | None:
    """m where the value is m * step (`tl.cdiv(n, B) * B` -> tl.cdiv(n, B)), else None."""
    if isinstance(step, ast.Constant) and step.value == 1:
        return node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        if ast.dump(node.right) == ast.dump(step):
            return node.left
        if ast.dump(node.left) == ast.dump(step):
            return node.right
    return None


@dataclasses.dataclass(frozen=True)
class Walk:
    loop: Loop  # the loop read forward: its start, end, step and form those of the forward walk
    backward: bool  # the source visits the blocks last to first
    count: ast.expr | None = None  # a backward walk over block indices: its count (`tl.cdiv(n, B)`)


def forward(loop: Loop, kernel: str, param: str) -> Walk | str:
    """The loop read as the forward walk over its blocks, or why a backward loop is no walk over a row."""
    s = _negated(loop.step) if loop.form == "range" else None
    if s is None:
        return Walk(loop, False)
    a, b = loop.start, loop.end
    first, past = _sum(b, s), _sum(a, s)  # range(b + s, a + s, s), where a - b is a multiple of s
    if not (isinstance(first, ast.Constant) and first.value == 0):
        if ast.dump(first) == ast.dump(s):  # down to 0: the variable is n - offset
            return (f"a loop of {kernel} counts down from {readable(a)} by {readable(s)}: its variable is what is "
                    f"left of the row, not a block's offset")
        return (f"a loop of {kernel} over blocks of {param} walks backwards down to {readable(first)}, not to 0 "
                f"(part of a row)")
    count = _multiple(past, s)
    if count is None:
        return (f"a loop of {kernel} walks blocks of {readable(s)} backwards from {readable(a)}, not from a "
                f"multiple of {readable(s)} less one block")
    if isinstance(s, ast.Constant) and s.value == 1:
        if tl_name(count) == "cdiv" and len(count.args) == 2:  # block indices: range(tl.cdiv(n, B)) backwards
            return Walk(dataclasses.replace(loop, start=ast.Constant(0), end=count.args[0], step=ast.Constant(1),
                                            form="cdiv"), True, count)
        return Walk(dataclasses.replace(loop, start=ast.Constant(0), end=past, step=s), True)
    # offsets 0, s, ..., (m - 1) * s: those of range(0, n, s) where m is tl.cdiv(n, s)
    end = count.args[0] if tl_name(count) == "cdiv" and len(count.args) == 2 \
        and ast.dump(count.args[1]) == ast.dump(s) else past
    return Walk(dataclasses.replace(loop, start=ast.Constant(0), end=end, step=s), True)


def not_a_row(name: str, param: str, loop: Loop) -> str:
    """Why a loop that steps by other than B walks something else than a row in blocks of B: a count of blocks by
    their index, rounded down or fixed apart from B, or a stride of its own."""
    block = ast.Name(param, ast.Load())
    if not same(loop.step, ast.Constant(1)):
        return (f"a loop of {name} steps by {readable(loop.step)} over {readable(loop.end)}, not by {param}: it does "
                f"not walk a row in blocks of {param}")
    end = loop.end
    if isinstance(end, ast.BinOp) and isinstance(end.op, ast.FloorDiv) and same(end.right, block):
        return (f"a loop of {name} walks the {readable(end)} whole blocks of {param} in {readable(end.left)}, "
                f"rounded down: a block wider than {readable(end.left)} would walk none of it")
    return (f"a loop of {name} walks {readable(end)} blocks, a count the kernel is given apart from {param}: one "
            "block as wide as the row would need that count changed with it")
