"""Tiles a kernel fixes by integer literals in its own body: `offs = pid * 1024 + tl.arange(0, 1024)`, a GEMM's
`tl.arange(0, 64)` rows with `range(0, K, 32)` steps and a `tl.zeros((64, 64))` accumulator.

A value is a fixed tile when some `tl.arange(0, v)` in the body has it as its extent, or a block pointer's
`block_shape`, and every integer v in the body sits where a tile's size does: an arange's extent, a block
shape, the offsets `tl.advance` steps by, a factor of a program id (`pid * 1024`) or of a loop's
variable (`k * 32`), a loop's step (`range(0, K, 32)`, `k += 32` in a `while`, `ptrs += 32 * stride` in a loop),
the divisor of a `tl.cdiv`, an element of a `tl.zeros`/`tl.full` shape. Then a constexpr equal to it at every
launch computes the same (`rewrites/literal_tiles.py`), and the rewrites that read the constexpr's roles find
what they find for one written so. An integer v anywhere else (`x * 1024`, a mask `offs < 1024`, a helper's
argument) may mean the same number as something other than a tile, so the value is not lifted.
For a GEMM, the axes each value sizes (`analysis.dots`): one value may size both M and N, and its name says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import code, int_value, subnodes

LOOP_CALLS = ("range", "tl.range", "tl.static_range")
SHAPE_ARGS = {"tl.zeros": ("shape", 0), "tl.full": ("shape", 0), "tl.make_block_ptr": ("block_shape", 4),
              "tl.advance": ("offsets", 1)}


@dataclass(frozen=True, eq=False)
class FixedTile:
    value: int
    nodes: tuple[cst.Integer, ...] = field(repr=False)  # every integer of this value in the kernel's body
    axes: str = ""  # for a GEMM: the axes it sizes ("M", "MN", "K"); "" otherwise


def _call_name(kernel: Kernel, call: cst.Call) -> str | None:
    if isinstance(call.func, cst.Name) and call.func.value == "range":
        return "range"
    for name in ("arange", "range", "static_range", "zeros", "full", "cdiv", "make_block_ptr", "advance"):
        if kernel.is_tl(call.func, name):
            return f"tl.{name}"
    return None


COORD_CALLS = ("program_id", "cdiv", "minimum", "maximum")


def _coordinate(kernel: Kernel, value: cst.BaseExpression, names: set[str]) -> bool:
    """An integer expression of program ids and of names known to be such (`pid // n`, `pid % n`,
    `tl.program_id(0).to(tl.int64)`): no load, no data."""
    calls = subnodes(value, cst.Call)
    if not any(kernel.program_axis(c) is not None for c in calls) and not any(
            n.value in names for n in subnodes(value, cst.Name)):
        return False
    for call in calls:
        method = isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
        if not (method or any(kernel.is_tl(call.func, f) for f in COORD_CALLS)
                or (isinstance(call.func, cst.Name) and call.func.value in ("min", "max"))):
            return False
    return not subnodes(value, cst.Subscript)


def _program_coordinates(kernel: Kernel) -> set[str]:
    """The locals that are integer functions of the program ids alone (each assignment of them one)."""
    names: set[str] = set()
    assigns = kernel.scope.assigns
    changed = True
    while changed:
        changed = False
        for name, values in assigns.items():
            if name not in names and values and all(v is not None and _coordinate(kernel, v, names)
                                                    for v in values):
                names.add(name)
                changed = True
    return names


def _loop_targets(kernel: Kernel) -> set[str]:
    return {n.value for loop in subnodes(kernel.node.body, cst.For) for n in subnodes(loop.target, cst.Name)}


def _in_loop(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.For | cst.While | None:
    while (node := parents.get(id(node))) is not None and not isinstance(node, cst.FunctionDef):
        if isinstance(node, (cst.For, cst.While)):
            return node
    return None


def _place(kernel: Kernel, node: cst.Integer, parents: dict[int, cst.CSTNode], loop_vars: set[str]) -> bool:
    """Whether an integer sits where a tile's size does (module doc); `loop_vars`: the loops' variables and the
    program coordinates."""
    parent = parents.get(id(node))
    if isinstance(parent, cst.Arg) and isinstance(call := parents.get(id(parent)), cst.Call):
        if parent.keyword is not None:
            return False
        name, index = _call_name(kernel, call), call.args.index(parent)
        return (name == "tl.arange" and index == 1 and int_value(call.args[0].value) == 0) \
            or (name in LOOP_CALLS and index == 2) or (name == "tl.cdiv" and index == 1)
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply):
        other = parent.right if parent.left is node else parent.left
        if kernel.program_axis(other) is not None or (isinstance(other, cst.Name) and other.value in loop_vars):
            return True
        # `ptrs += 32 * stride` in a loop: the pointers advance by a tile of a stride
        statement = parents.get(id(parent))
        return isinstance(statement, cst.AugAssign) and statement.value is parent \
            and _in_loop(statement, parents) is not None
    if isinstance(parent, cst.Element) and isinstance(shape := parents.get(id(parent)), (cst.Tuple, cst.List)) \
            and isinstance(arg := parents.get(id(shape)), cst.Arg) \
            and isinstance(call := parents.get(id(arg)), cst.Call):
        # (the tuple argument's keyword, its position) where a tile's size sits: a shape, a block pointer's
        # block_shape, the offsets tl.advance steps a block pointer by
        where = SHAPE_ARGS.get(_call_name(kernel, call) or "")
        return where is not None and (code(arg.keyword) == where[0] if arg.keyword is not None
                                      else call.args.index(arg) == where[1])
    if isinstance(parent, cst.AugAssign) and isinstance(parent.operator, cst.AddAssign):
        loop = _in_loop(parent, parents)  # `k += 32` advancing the variable a while loop tests
        return isinstance(loop, cst.While) and code(parent.target) in {n.value for n in subnodes(loop.test, cst.Name)}
    return False


def fixed_tiles(kernel: Kernel) -> tuple[list[FixedTile], str]:
    """The kernel's fixed tiles, in the order their first integers come in its body, and why an arange's
    extent is not among them ("" where none is left out)."""
    parents, loop_vars = kernel.ms.parents, _loop_targets(kernel) | _program_coordinates(kernel)
    by_value: dict[int, list[cst.Integer]] = {}
    for node in subnodes(kernel.node.body, cst.Integer):
        value = int_value(node)
        if value is not None and value > 1:
            by_value.setdefault(value, []).append(node)
    extents = {int_value(call.args[1].value) for call in kernel.calls("arange")
               if len(call.args) == 2 and int_value(call.args[0].value) == 0}
    extents |= {int_value(e.value) for call in kernel.calls("make_block_ptr") for arg in call.args
                if (code(arg.keyword) == "block_shape" if arg.keyword is not None else call.args.index(arg) == 4)
                and isinstance(arg.value, (cst.Tuple, cst.List)) for e in arg.value.elements}
    axes, tiles, why = _gemm_axes(kernel), [], ""
    for value, nodes in by_value.items():
        if value not in extents:
            continue
        stray = next((n for n in nodes if not _place(kernel, n, parents, loop_vars)), None)
        if stray is None:
            tiles.append(FixedTile(value, tuple(nodes), axes.get(value, "")))
        elif not why:
            why = (f"{kernel.name} uses its tile's size, {value}, also as a value that is not a tile's size "
                   f"({code(_statement(stray, parents)).strip().splitlines()[0][:80]}): which of its uses the tile's "
                   "size sets is not certain")
    return tiles, why


def _statement(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> cst.CSTNode:
    while (parent := parents.get(id(node))) is not None and not isinstance(
            parent, (cst.IndentedBlock, cst.SimpleStatementLine, cst.FunctionDef)):
        node = parent
    return node


def _gemm_axes(kernel: Kernel) -> dict[int, str]:
    """For a tl.dot kernel whose tiles the source fixes, the axes each integer sizes ({64: "MN", 32: "K"})."""
    dots = facts_of(kernel).dots.all
    if not dots or None in (dots[0].m, dots[0].n, dots[0].k):
        return {}
    axes: dict[int, str] = {}
    for axis, tile in dots[0].axes.items():
        if tile.fixed:
            axes[tile.size] = axes.get(tile.size, "") + axis
    return axes
