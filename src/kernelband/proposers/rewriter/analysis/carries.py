"""What a loop over blocks of B may carry out of it, where one block of any B >= n replaces its blocks: a value
that is the same whatever the number of blocks that made it.

That is a reduction over the row, and only one:

* a sum, max or min (`loops`' Carried.kind) whose update combines in nothing else the loop carries (`acc +=
  x * scale` with `scale *= 0.5` a block is a sum of other terms for each number of blocks); a tl.dot
  accumulator is such a sum;
* or the running max and its rescaled sums of an online softmax (`reductions`' Online fact): the rescaling
  makes their result after any number of blocks the one block's.

A value held lane by lane along B (a block's lanes each summing their own columns) is one where the lanes
start at the reduction's neutral value (0 for a sum; one constant for a max or a min, which repeats it
harmlessly) and code after the loop reads it only reduced over B by the same reduction: one block of another
extent splits the row's columns over other lanes, which only that reduction of all lanes does not see.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.loops import Carried, Loop
from kernelband.proposers.rewriter.analysis.padding import Padding
from kernelband.proposers.rewriter.analysis.peeled import entering
from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.syntax import assigned, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    is_call,
    marker_arg,
    method_name,
    tl_name,
)

OPS = ("sum", "max", "min")
FILLS = ("zeros", "full")


class Carries:
    """Why a value a loop over blocks of `param` carries may not leave it ("" where it may)."""

    def __init__(self, values: KernelValues, shapes: Shapes, padding: Padding, param: str,
                 online: set[tuple[int, str]]) -> None:
        self.values, self.shapes, self.padding, self.param, self.online = values, shapes, padding, param, online
        self.kernel = values.kernel

    def why(self, loop: Loop, carried: Carried, read: ast.expr) -> str:
        """Why `carried` may not leave `loop` to be read in the expression `read` (canonical)."""
        name, label = carried.name, f"{self.kernel.name}'s {carried.name}"
        if (id(loop.node), name) in self.online:
            return ""
        if carried.kind not in OPS:
            return (f"{label} carries a value from one block to the next that is not a sum, max or min over the row: "
                    "one block computes something else")
        other = self._combined(loop, name)
        if other:
            return (f"{label} combines in {other}, which its loop also carries from block to block: one block "
                    "computes something else")
        if carried.shape is not None and self.param not in carried.shape:
            return ""
        start = self._start(loop, name)
        if start is None or (carried.kind == "sum" and start != 0):
            want = "0" if carried.kind == "sum" else "one constant"
            return (f"{label} starts its lanes along {self.param} from values other than {want}: one block of another "
                    f"extent has another number of them")
        if not self._reduced(read, name, carried.kind):
            return (f"{label} holds a {carried.kind} per lane along {self.param} that is read after its loop other "
                    f"than as a tl.{carried.kind} over {self.param}: one block of another extent holds other lanes")
        return ""

    def _combined(self, loop: Loop, name: str) -> str:
        """Another value the loop carries (not a pointer's fixed advance) that the updates of `name` read."""
        running = {c for c, v in loop.carried.items() if v.kind != "increment" and c != name}
        parents = self.kernel.ms.parents
        for small in subnodes(loop.node.body, cst.Assign) + subnodes(loop.node.body, cst.AugAssign):
            if name not in assigned(small):
                continue
            parts = [self.values.expand(small.value)]
            node = parents.get(id(small))
            while node is not None and node is not loop.node:  # the branches it is made in
                if isinstance(node, cst.If):
                    parts.append(self.values.expand(node.test))
                node = parents.get(id(node))
            for part in parts:
                for sub in ast.walk(part):
                    if is_call(sub, "__var") and marker_arg(sub) in running:
                        return marker_arg(sub)
        return ""

    def _start(self, loop: Loop, name: str) -> float | None:
        """The one constant every lane of `name` starts the loop from; None where it is not one."""
        start = entering(self.values, loop.node, name, self.padding.empty)  # past the loops that run no block
        base = start
        while base is not None and method_name(base) == "to":
            base = base.func.value
        if base is None or not (tl_name(base) in FILLS or isinstance(base, ast.Constant | ast.UnaryOp)):
            return None
        value = self.padding.of(start)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    def _reduced(self, read: ast.expr, name: str, op: str) -> bool:
        """Whether every read of `name` in `read` is the operand of a tl.<op> over B."""
        inside = set()
        for node in ast.walk(read):
            if isinstance(node, ast.Call) and (tl_name(node) == op and node.args or method_name(node) == op):
                operand = node.args[0] if tl_name(node) else node.func.value
                if is_call(operand, "__var") and marker_arg(operand) == name and self._over_b(node, operand):
                    inside.add(id(operand))
        return all(id(n) in inside for n in ast.walk(read) if is_call(n, "__var") and marker_arg(n) == name)

    def _over_b(self, node: ast.Call, operand: ast.expr) -> bool:
        position = 1 if tl_name(node) else 0
        axis = next((k.value for k in node.keywords if k.arg == "axis"),
                    node.args[position] if len(node.args) > position else ast.Constant(None))
        shape = self.shapes.of(operand)
        if not isinstance(axis, ast.Constant):
            return False
        if axis.value is None:
            return True  # all lanes
        if shape is None or not isinstance(axis.value, int) or not -len(shape) <= axis.value < len(shape):
            return False
        return shape[axis.value] == self.param
