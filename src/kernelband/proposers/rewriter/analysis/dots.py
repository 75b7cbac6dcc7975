"""The `tl.dot` calls of a kernel: the loads its A and B operands come from (through casts and scales), their
tile shapes, and whether the kernel is a plain GEMM there: an (M, K) tile of A times a (K, N) tile of B,
accumulated over a loop that steps by the K tile, into an (M, N) accumulator, with the M and N tiles each
scaling a program coordinate. Each dimension is a `Tile`: the constexpr that sizes it, or the integer the source
fixes it at (`tl.arange(0, 64)`, a local `BLOCK: tl.constexpr = 64`, a module constant), found from the tiles'
shapes, not from the names. A fixed tile is as much a tile of M, N or K as a constexpr's: a rewrite that reads
it (a split of the K loop, a loop over the tiles) reads either; one that changes its size has no parameter to
change, and keeps it."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.accesses import Access
from kernelband.proposers.rewriter.analysis.loops import Loop, Loops
from kernelband.proposers.rewriter.analysis.roles import Roles
from kernelband.proposers.rewriter.analysis.syntax import assigned, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import KernelValues, same, tl_name


@dataclass(frozen=True)
class Tile:
    """The extent of one of a GEMM's M, N and K tiles: the constexpr parameter that sizes it, or the integer the
    source fixes it at (`KernelValues.integer`)."""

    code: str  # as the tile's shape spells it, in the kernel's canonical forms
    param: str | None = None  # the constexpr parameter sizing it
    size: int | None = None  # the integer it is fixed at, where no parameter sizes it

    @property
    def fixed(self) -> bool:
        return self.param is None and self.size is not None

    @property
    def known(self) -> bool:
        return self.param is not None or self.size is not None

    @property
    def text(self) -> str:
        """The tile's extent as code that reads the same in the kernel and on the host."""
        return self.param if self.param is not None else str(self.size)

    def spells(self, values: KernelValues, node: ast.expr | None) -> bool:
        """Whether a canonical form is this tile's extent: the parameter's name, or an integer equal to it."""
        if node is None:
            return False
        if self.param is not None:
            return ast.unparse(node) == self.param
        return self.size is not None and values.integer(node) == self.size


def tile_of(values: KernelValues, dim: str | None) -> Tile | None:
    """The tile a shape's dimension is: a constexpr parameter's, or a fixed integer's (else neither)."""
    if dim is None:
        return None
    if dim in values.constexpr_names:
        return Tile(dim, param=dim)
    try:
        node = pyast.parse(dim, mode="eval").body
    except SyntaxError:
        return Tile(dim)
    return Tile(dim, size=values.integer(node))


@dataclass(eq=False)
class Dot:
    call: cst.Call = field(repr=False)
    a: Access | None
    b: Access | None
    m: Tile | None  # the tiles of the M, N and K dimensions
    n: Tile | None
    k: Tile | None
    loop: Loop | None  # the innermost loop around it
    accumulator: str | None  # the name the loop sums it into
    why: str  # "" for a plain GEMM, else the fact that is missing

    @property
    def plain(self) -> bool:
        return not self.why

    @property
    def axes(self) -> dict[str, Tile]:
        return {"M": self.m, "N": self.n, "K": self.k}

    @property
    def square(self) -> bool:
        """One constexpr sizes both its M and N tiles."""
        return self.m is not None and self.m.param is not None and self.n is not None and self.m.param == self.n.param


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
        m = tile_of(self.values, a_shape[0]) if a_shape and len(a_shape) == 2 else None
        k = tile_of(self.values, a_shape[1]) if a_shape and len(a_shape) == 2 else None
        n = tile_of(self.values, b_shape[1]) if b_shape and len(b_shape) == 2 else None
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
        if a_shape is None or b_shape is None or len(a_shape) != 2 or len(b_shape) != 2:
            return f"{name}'s tl.dot operands are not 2-D tiles of known shape"
        if a_shape[1] != b_shape[0]:
            return f"{name}'s tl.dot operands do not share their inner dimension"
        for axis, tile in (("M", dot.m), ("N", dot.n), ("K", dot.k)):
            if not tile.known:
                return (f"{name}'s {axis} tile ({tile.code}) is neither a constexpr parameter nor an integer the "
                        "source fixes")
        if dot.loop is None or dot.accumulator is None:
            return f"{name}'s tl.dot is not summed over a loop"
        if self._read_in_loop(dot):
            return f"{name} reads the sum of its tl.dot inside the loop (a running value, not a sum over K)"
        if not self._steps(dot.loop, dot.k):
            return f"the loop around {name}'s tl.dot does not step by its K tile ({dot.k.code})"
        for axis, tile in (("M", dot.m), ("N", dot.n)):
            if not self._tiles_pid(tile):
                return f"{name}'s {axis} tile ({tile.code}) scales no program id"
        # one constexpr may size both M and N (a square tile, `BLOCK` for both), never K as well: K's tile is
        # a loop step, and a split or a config of K must leave the output tile as it is
        if dot.k.param is not None and dot.k.param in (dot.m.param, dot.n.param):
            return f"one constexpr sizes {name}'s K tile and its {'M' if dot.k.param == dot.m.param else 'N'} tile"
        return ""

    @staticmethod
    def _steps(loop: Loop, tile: Tile) -> bool:
        """Whether the loop advances by the tile: its constexpr, or the integer the source fixes it at, is among
        what the loop steps by (`Loop.block`, `Loop.fixed`)."""
        return tile.param in loop.block if tile.param is not None else tile.size in loop.fixed

    def _tiles_pid(self, tile: Tile) -> bool:
        """Whether the tile scales a program coordinate: its constexpr's role says so, or the integer's
        (`Roles.fixed_tiles`: a product of a program id and the integer, `pid_m * 64`)."""
        if tile.param is not None:
            role = self.roles.get(tile.param)
            return role is not None and bool(role.tiles)
        return bool(self.roles.fixed_tiles.get(tile.size))

def _reads(statement: cst.CSTNode, name: str) -> bool:
    return any(n.value == name for n in loads(statement))


def _inside(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in subnodes(root, type(node)))
