"""The role of each constexpr of a kernel, found by data flow, whatever its name:

* it sizes a tile: it is a `tl.arange` extent, a `tl.zeros`/`tl.full` shape or a block pointer's block_shape;
* it tiles a program coordinate: an offset multiplies it by a value of `tl.program_id(a)` (`pid_m * BLOCK_M`),
  directly ("0"), as the quotient or remainder of a 1-D program id split (`pid // n` is "0/div", `pid % n` is
  "0/mod"), or otherwise ("0/other", a grouped order);
* it steps a loop: the loop advances by it (`range(0, K, BLOCK_K)`, offsets `k * BLOCK_K` in
  `range(tl.cdiv(K, BLOCK_K))`, `ptrs += BLOCK_K * stride`);
* it covers a whole dimension: it sizes a tile that neither tiles a program coordinate nor steps a loop, so one
  block holds all of it (`BLOCK = next_power_of_2(n_cols)`).

A tile size is free (any power of two computes the same) where every access along its dimension is bounded (a
mask that compares its offsets, a block pointer's boundary check, a descriptor, or offsets wrapped `% n` on a
load) and nothing's result depends on its extent (a reshape, a scan, a sort). `unbounded` lists the accesses
that are not; a rewrite may still change such a size behind a divisibility check on the host.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import Access, Accesses
from kernelband.proposers.rewriter.analysis.block_reads import readable
from kernelband.proposers.rewriter.analysis.loops import Loop, Loops
from kernelband.proposers.rewriter.analysis.shapes import SCANS, Shapes
from kernelband.proposers.rewriter.analysis.syntax import subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    factors,
    is_call,
    method_name,
    pid_axes,
    tl_name,
)

SHAPE_DEPENDENT = SCANS | {"reshape", "view", "broadcast_to", "join", "split", "interleave", "cat", "histogram",
                           "gather", "permute", "trans"}
# tl calls whose result keeps each element's lane along every dimension (a transpose moves a dimension, it does
# not mix two): not shape-dependent for a tile of any extent, so they leave a tile size free.
LANE_KEEPING = frozenset({"trans", "permute", "broadcast_to"})


@dataclass(eq=False)
class Role:
    param: str
    sizes: bool = False
    tiles: frozenset[str] = frozenset()
    steps: tuple[Loop, ...] = ()
    unbounded: tuple[Access, ...] = ()
    shaped: tuple[str, ...] = ()  # the tl calls whose results depend on its extent
    other: tuple[str, ...] = ()  # uses as a value beyond tiling (a comparison, `P // 2`, ...): the code of each

    @property
    def tiled(self) -> bool:
        return bool(self.tiles)

    @property
    def axes(self) -> frozenset[int]:
        """The program-id axes its tiles are known to follow (a `tl.program_id(axis=A)` with A a constexpr
        leaves its axis unknown, and out)."""
        return frozenset(int(a) for a in (c.split("/")[0] for c in self.tiles) if a.isdigit())

    @property
    def looped(self) -> bool:
        return bool(self.steps) and not self.tiles

    @property
    def whole(self) -> bool:
        return self.sizes and not self.tiles and not self.steps

    @property
    def free(self) -> bool:
        return self.sizes and not self.unbounded and not self.shaped

    @property
    def only_tiles(self) -> bool:
        """It is read only as a tile's size: extents, shapes, offsets, steps, tile counts and hints."""
        return not self.other

    def why_not_free(self) -> str:
        if not self.sizes:
            return f"{self.param} sizes no tile"
        if self.unbounded:
            what = self.unbounded[0]
            return f"a {what.kind} along {self.param} is not bounded by a mask or a boundary check"
        if self.shaped:
            return f"tl.{self.shaped[0]}'s result depends on the extent of {self.param}"
        if self.other:
            return f"{self.param} is also read as a value (`{self.other[0]}`), not only as a tile's size"
        return ""


def coordinate(other: ast.AST, axis: int) -> str:
    """How a factor reads program id `axis`: "a", "a/div", "a/mod" or "a/other"."""
    node = other
    while tl_name(node) in ("multiple_of", "max_contiguous") or method_name(node) == "to":
        node = node.args[0] if tl_name(node) else node.func.value
    if is_call(node, "__pid"):
        return f"{axis}"
    if isinstance(node, ast.BinOp) and is_call(node.left, "__pid"):
        if isinstance(node.op, ast.FloorDiv):
            return f"{axis}/div"
        if isinstance(node.op, ast.Mod):
            return f"{axis}/mod"
    return f"{axis}/other"


class Roles:
    def __init__(self, values: KernelValues, shapes: Shapes, loops: Loops, accesses: Accesses,
                 callees: list[Roles] | None = None) -> None:
        self.values, self.shapes, self.loops, self.accesses = values, shapes, loops, accesses
        self.kernel = values.kernel
        self.callees = callees or []  # the roles in the helpers it calls, in its own terms

    @cached_property
    def expressions(self) -> list[ast.expr]:
        """The canonical form of every expression the kernel evaluates: assigned values, call arguments, loop
        headers and tests."""
        out = []
        body = self.kernel.node.body
        for node in subnodes(body, cst.Assign) + subnodes(body, cst.AugAssign) + subnodes(body, cst.AnnAssign):
            if node.value is not None:
                out.append(self.values.expand(node.value))
        for node in subnodes(body, cst.Expr):
            out.append(self.values.expand(node.value))
        for node in subnodes(body, cst.For):
            out.append(self.values.expand(node.iter))
        for node in subnodes(body, cst.If) + subnodes(body, cst.While):
            out.append(self.values.expand(node.test))
        for callee in self.callees:
            out.extend(callee.expressions)
        return out

    @cached_property
    def constexprs(self) -> list[str]:
        return list(self.values.constexpr_names)

    @cached_property
    def all(self) -> dict[str, Role]:
        roles = {name: Role(name) for name in self.constexprs}
        sizes, tiles, shaped = self._walk(set(roles), self._own_expressions())
        other = self._other_uses(set(roles), self._own_expressions())
        for name, role in roles.items():
            role.sizes = name in sizes
            role.tiles = frozenset(tiles.get(name, ()))
            role.steps = tuple(self.loops.stepping(name))
            role.shaped = tuple(sorted(shaped.get(name, ())))
            role.other = tuple(dict.fromkeys(other.get(name, ())))
            role.unbounded = tuple(a for a in self.accesses.all if name in self._unbounded_dims(a))
        for callee in self.callees:  # what a helper does with a constexpr it is passed, it does for the kernel
            for name, role in roles.items():
                theirs = callee.all.get(name)
                if theirs is not None:
                    role.sizes |= theirs.sizes
                    role.tiles |= theirs.tiles
                    role.steps += theirs.steps
                    role.unbounded += theirs.unbounded
                    role.shaped = tuple(sorted(set(role.shaped) | set(theirs.shaped)))
                    role.other = tuple(dict.fromkeys(role.other + theirs.other))
        return roles

    @cached_property
    def fixed_tiles(self) -> dict[int, frozenset[str]]:
        """The program coordinates (as `Role.tiles` has them) each tile the source fixes at an integer scales: an
        integer (`KernelValues.integer`) that sizes a tile, `tl.arange(0, 64)` or a shape, multiplying a value
        of a program id, `pid_m * 64`. A tile of an integer is a tile as a constexpr's is; only its spelling
        differs."""
        integer = self.values.integer
        sizes = {n for e in self.expressions for node in ast.walk(e) for x in self._extents(node)
                 if (n := integer(x)) is not None}
        found: dict[int, set[str]] = {}
        for expression in self.expressions:
            for node in ast.walk(expression):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                    parts = factors(node)
                    for size in {integer(f) for f in parts} & sizes:
                        for other in parts:
                            for axis in pid_axes(other):
                                found.setdefault(size, set()).add(coordinate(other, axis))
        return {size: frozenset(coordinates) for size, coordinates in found.items()}

    def __getitem__(self, name: str) -> Role:
        return self.all[name]

    def get(self, name: str) -> Role | None:
        return self.all.get(name)

    @property
    def tile_sizes(self) -> list[str]:
        """The constexprs that size a tile, in parameter order: what block-size rewrites may change."""
        return [name for name, role in self.all.items() if role.sizes]

    def _own_expressions(self) -> list[ast.expr]:
        theirs = {id(e) for callee in self.callees for e in callee.expressions}
        return [e for e in self.expressions if id(e) not in theirs]

    def _walk(self, names: set[str], expressions: list[ast.expr]) -> tuple[set[str], dict, dict]:
        sizes: set[str] = set()
        tiles: dict[str, set[str]] = {}
        shaped: dict[str, set[str]] = {}
        for expression in expressions:
            for node in ast.walk(expression):
                extents = self._extents(node)
                sizes |= {n for e in extents for n in _names(e)} & names
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                    parts = factors(node)
                    mine = [f.id for f in parts if isinstance(f, ast.Name) and f.id in names]
                    for name in mine:
                        for other in parts:
                            for axis in pid_axes(other):
                                tiles.setdefault(name, set()).add(coordinate(other, axis))
                name = tl_name(node) or method_name(node)
                if name in SHAPE_DEPENDENT - LANE_KEEPING and (node.args or method_name(node)):
                    shape = self.shapes.of(node.args[0] if tl_name(node) else node.func.value)
                    dims = list(shape or ())
                    if name in SCANS and dims:  # a scan depends on the extent of the axis it runs along
                        axis = next((k.value for k in node.keywords if k.arg == "axis"),
                                    node.args[1] if tl_name(node) and len(node.args) > 1 else ast.Constant(0))
                        if isinstance(axis, ast.Constant) and isinstance(axis.value, int) \
                                and -len(dims) <= axis.value < len(dims):
                            dims = [dims[axis.value]]
                    for dim in dims:
                        if dim in names:
                            shaped.setdefault(dim, set()).add(name)
        return sizes, tiles, shaped

    @staticmethod
    def _extents(node: ast.AST) -> list[ast.AST]:
        if is_call(node, "__arange") and len(node.args) == 2:
            return [node.args[1]]
        name = tl_name(node)
        if name in ("zeros", "full"):
            shape = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "shape"), None)
            return list(shape.elts) if isinstance(shape, ast.Tuple | ast.List) else [shape] if shape else []
        if name in ("make_block_ptr", "make_tensor_descriptor"):
            shape = next((k.value for k in node.keywords if k.arg == "block_shape"), None)
            if shape is None and len(node.args) > (4 if name == "make_block_ptr" else 3):
                shape = node.args[4 if name == "make_block_ptr" else 3]
            return list(shape.elts) if isinstance(shape, ast.Tuple | ast.List) else []
        return []

    def _other_uses(self, names: set[str], expressions: list[ast.expr]) -> dict[str, list[str]]:
        """For each name, the code of the expressions that read it other than as a tile's size: not a tl.arange
        extent, a shape, a factor of a product (an offset, a step, a stride), a range's step, a tile count
        (`tl.cdiv(n, P)`, `(n + P - 1) // P`), a hint's value, the end of a tile (`pid * P + P`), or an argument
        of a helper (whose own uses are read in the helper)."""
        found: dict[str, list[str]] = {}
        for expression in expressions:
            parents: dict[int, ast.AST] = {}
            for node in ast.walk(expression):
                for child in ast.iter_child_nodes(node):
                    parents[id(child)] = node
            for node in ast.walk(expression):
                if isinstance(node, ast.Name) and node.id in names and not self._tile_use(node, parents):
                    parent = parents.get(id(node), node)
                    found.setdefault(node.id, []).append(readable(parent)[:60])
        return found

    def _tile_use(self, node: ast.Name, parents: dict[int, ast.AST]) -> bool:
        parent = parents.get(id(node))
        if parent is None:
            return False
        name = tl_name(parent)
        if is_call(parent, "__arange") or name in ("zeros", "full", "cdiv", "multiple_of", "max_contiguous",
                                                      "max_constancy", "make_block_ptr", "make_tensor_descriptor",
                                                      "advance", "static_range", "range"):
            return True
        if isinstance(parent, ast.Tuple | ast.List | ast.keyword):
            return True  # a shape, a block's offsets, an advance's step
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range":
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in self.values.helpers:
            return True  # a helper's argument: read where the helper uses it
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.FloorDiv) and parent.right is node:
            return True  # a tile count
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add | ast.Sub):
            grand = parents.get(id(parent))
            while isinstance(grand, ast.BinOp) and isinstance(grand.op, ast.Add | ast.Sub):
                grand = parents.get(id(grand))
            if isinstance(grand, ast.BinOp) and isinstance(grand.op, ast.FloorDiv) \
                    and ast.unparse(grand.right) == node.id:
                return True  # the `+ P - 1` of a ceiling division
            other = parent.right if parent.left is node else parent.left
            return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and node.id in
                       {f.id for f in factors(n) if isinstance(f, ast.Name)} for n in ast.walk(other))  # a tile's end
        return False

    def _unbounded_dims(self, access: Access) -> set[str]:
        """The constexprs sizing a dimension of the access that nothing bounds."""
        if access.bounded and access.form != "pointer":
            return set()
        constexprs = set(self.constexprs)
        if access.form == "block_ptr":
            return set(access.shape or ()) & constexprs
        if access.address is None:
            return set()
        dims = set(access.shape or ()) | self._aranges(access.address)
        dims &= constexprs
        bounded: set[str] = set()
        if access.mask is not None:
            for node in self._followed(access.mask):
                if isinstance(node, ast.Compare):
                    bounded |= self._aranges(node)
        if not access.store:  # offsets wrapped `% n` or clamped `tl.where(offs < n, offs, 0)` stay within n
            for node in self._followed(access.address):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                    bounded |= self._aranges(node.left)
                elif tl_name(node) == "where" and node.args and isinstance(node.args[0], ast.Compare):
                    bounded |= self._aranges(node.args[0])
        return dims - bounded

    def _followed(self, node: ast.AST, depth: int = 0) -> list[ast.AST]:
        """Every node of a canonical form and of the first value of each carried local it reads."""
        out = []
        for sub in ast.walk(node):
            out.append(sub)
            if is_call(sub, "__var") and depth < 4:
                definition = self.values.definition(sub.args[0].value)
                if definition is not None:
                    out.extend(self._followed(definition, depth + 1))
        return out

    def _aranges(self, node: ast.AST) -> set[str]:
        return {ast.unparse(a.args[1]) for a in self._followed(node) if is_call(a, "__arange") and len(a.args) == 2}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


__all__ = ["LANE_KEEPING", "Role", "Roles", "coordinate", "field"]
