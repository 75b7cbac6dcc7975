"""The `tl.dot` calls of a kernel: the loads its A and B operands come from (through casts and scales), their
tile shapes, and whether the kernel is a plain GEMM there: an (M, K) tile of A times a (K, N) tile of B,
accumulated over a loop that steps by the K tile, into an (M, N) accumulator, with the M and N tiles each
scaling a program coordinate. The dimensions are the constexprs that size them, found from the tiles' shapes,
not from the names."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import Access
from kernelband.proposers.rewriter.analysis.loops import Loop, Loops
from kernelband.proposers.rewriter.analysis.roles import Roles
from kernelband.proposers.rewriter.analysis.syntax import assigned, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import same, tl_name


@dataclass(eq=False)
class Dot:
    call: cst.Call = field(repr=False)
    a: Access | None
    b: Access | None
    m: str | None  # the constexprs sizing the M, N and K dimensions
    n: str | None
    k: str | None
    loop: Loop | None  # the innermost loop around it
    accumulator: str | None  # the name the loop sums it into
    why: str  # "" for a plain GEMM, else the fact that is missing

    @property
    def plain(self) -> bool:
        return not self.why

    @property
    def axes(self) -> dict[str, str]:
        return {"M": self.m, "N": self.n, "K": self.k}


class Dots:
    def __init__(self, roles: Roles, loops: Loops, callees: list[Dots] | None = None) -> None:
        self.roles, self.loops = roles, loops
        self.callees = callees or []
        self.values, self.shapes, self.accesses = roles.values, roles.shapes, roles.accesses
        self.kernel = roles.kernel

    @cached_property
    def all(self) -> list[Dot]:
        """Its own tl.dot calls, then those in the helpers it calls (read in its terms)."""
        own = [self._dot(c) for c in subnodes(self.kernel.node.body, cst.Call) if self.kernel.is_tl(c.func, "dot")]
        return own + [d for callee in self.callees for d in callee.all]

    def own(self, dot: Dot) -> bool:
        """Whether the call is in this kernel's own body (not in a helper it calls)."""
        return any(c is dot.call for c in subnodes(self.kernel.node.body, cst.Call))

    @property
    def plain(self) -> list[Dot]:
        return [d for d in self.all if d.plain]

    @property
    def gemm(self) -> Dot | None:
        """The kernel's one product, where all its tl.dot work is a plain GEMM: every tl.dot an A tile times a B
        tile summed over the same K loop into one accumulator (an unrolled pair of dots into the same sum
        counts as one); None otherwise."""
        dots = self.all
        if not dots or not all(d.plain for d in dots):
            return None
        if len({(d.m, d.n, d.k, d.accumulator, id(d.loop.node)) for d in dots}) != 1:
            return None
        return dots[0]

    def _operand(self, node: ast.expr) -> Access | None:
        loads = [n for n in ast.walk(node) if tl_name(n) == "load"]
        if len(loads) != 1 or not loads[0].args:
            return None
        return next((a for a in self.accesses.loads if same(a.address, loads[0].args[0])), None)

    def _dot(self, call: cst.Call) -> Dot:
        positional = [a.value for a in call.args if a.keyword is None]
        a_node = positional[0] if positional else None
        b_node = positional[1] if len(positional) > 1 else None
        if a_node is None or b_node is None:
            return Dot(call, None, None, None, None, None, None, None, "its operands are not positional")
        a_value, b_value = self.values.expand(a_node), self.values.expand(b_node)
        a, b = self._operand(a_value), self._operand(b_value)
        a_shape, b_shape = self.shapes.of(a_value), self.shapes.of(b_value)
        loop = next((lp for lp in reversed(self.loops.all) if _inside(lp.node, call)), None)
        m = a_shape[0] if a_shape and len(a_shape) == 2 else None
        k = a_shape[1] if a_shape and len(a_shape) == 2 else None
        n = b_shape[1] if b_shape and len(b_shape) == 2 else None
        accumulator = self._accumulator(loop, call)
        dot = Dot(call, a, b, m, n, k, loop, accumulator, "")
        dot.why = self._why(dot, a_shape, b_shape)
        return dot

    def _accumulator(self, loop: Loop | None, call: cst.Call) -> str | None:
        if loop is None:
            return None
        me = ast.dump(self.values.expand(call).args[0])
        for name, value in loop.carried.items():
            if value.kind == "sum" and value.term is not None and tl_name(value.term) == "dot" \
                    and value.term.args and ast.dump(value.term.args[0]) == me:
                return name
        return None

    def _read_in_loop(self, dot: Dot) -> bool:
        """Whether the loop body reads the accumulator other than to add to it."""
        name = dot.accumulator
        for statement in dot.loop.node.body.body:
            if name in assigned(statement):  # its update
                continue
            if _reads(statement, name):
                return True
        return False

    def _why(self, dot: Dot, a_shape, b_shape) -> str:
        name = self.kernel.name
        roles = self.roles
        if a_shape is None or b_shape is None or len(a_shape) != 2 or len(b_shape) != 2:
            return f"{name}'s tl.dot operands are not 2-D tiles of known shape"
        if a_shape[1] != b_shape[0]:
            return f"{name}'s tl.dot operands do not share their inner dimension"
        constexprs = set(self.values.constexpr_names)
        for axis, dim in (("M", dot.m), ("N", dot.n), ("K", dot.k)):
            if dim not in constexprs:
                return f"{name}'s {axis} tile ({dim}) is not sized by a constexpr parameter"
        if dot.loop is None or dot.accumulator is None:
            return f"{name}'s tl.dot is not summed over a loop"
        if self._read_in_loop(dot):
            return f"{name} reads the sum of its tl.dot inside the loop (a running value, not a sum over K)"
        if dot.k not in dot.loop.block:
            return f"the loop around {name}'s tl.dot does not step by its K tile ({dot.k})"
        for axis, dim in (("M", dot.m), ("N", dot.n)):
            role = roles.get(dim)
            if role is None or not role.tiles:
                return f"{name}'s {axis} tile ({dim}) scales no program id"
        if dot.m == dot.n or dot.m == dot.k or dot.n == dot.k:
            return f"one constexpr sizes two of {name}'s M, N and K tiles"
        return ""


def _reads(statement: cst.CSTNode, name: str) -> bool:
    return any(n.value == name for n in loads(statement))


def _inside(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in subnodes(root, type(node)))
