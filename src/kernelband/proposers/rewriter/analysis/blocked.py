"""Rows walked in blocks: for a constexpr B of a kernel, the loops that walk [0, n) in blocks of B, and whether
one block of any B >= n computes what they compute, so that those loops can run once with B = n's next power
of two. Each loop may take any of the forms `loops` reads (`range(0, n, B)`, `range(tl.cdiv(n, B))` with
offsets `i * B`, `tl.range`, `while s < n: ... s += B`), carry scalar or vector values, be one of several
passes over the same row, or sit inside a 2-D tile (a block of rows, the loop over the columns).

One block of B >= n computes what the loops compute where B is free to take any value and the loops cover
[0, n) exactly:

* every loop stepping by B starts at 0 (a backward walk read as the forward walk over its blocks: `walks`), runs
  to the same n, and runs to its end (no break, continue or return);
  or, read under one block (`tl.cdiv(n, B) == 1`: `peeled`), runs no block at all (an unmasked main loop
  before a masked tail), and then the twin leaves it out and no check reads it;
  n is a value of the kernel's parameters, which the launch can compute, or differs by program under a bound
  the launch can compute (`min(C, seqlen - pid * C)`: `RowBlock.bound`);
* B is read only as a block's extent: a tl.arange extent, a tile's shape, the loops' step and the block
  offsets (`i * B`), a pointer's or lane vector's advance by a block a step (`p += B * stride`), a hint; and a
  block's offset only as the offset of its lanes (`start + tl.arange(0, B)`) (`block_reads`);
* B tiles no program coordinate, and nothing's result depends on B's extent (a reshape, a scan, a sort);
* every load and store along B sits in those loops;
* what leaves a loop is a value it carries from block to block as a reduction over the row (`carries`: a sum,
  a max, a min, a tl.dot accumulator, an online softmax's running max and sums), never one block's value, a
  pointer's position after the last block or any other running value (`scale *= 0.5`), and no load or store
  inside it reads a carried value;
* the lanes past n change nothing (`padding`): every load and store along B is masked past n, and the lanes
  past n are neutral in every reduction over B and in every tl.dot that sums over B. Where that is not shown
  (`RowBlock.padded` says why), one block of B == n, which has no lanes past n, still computes what the loops
  do: the launch takes the one block only where n is a power of two.

Each refusal names the fact that is missing.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.accesses import Access, Accesses
from kernelband.proposers.rewriter.analysis.block_reads import BlockReads, readable
from kernelband.proposers.rewriter.analysis.carries import Carries
from kernelband.proposers.rewriter.analysis.dots import Dots
from kernelband.proposers.rewriter.analysis.loops import Loop, Loops
from kernelband.proposers.rewriter.analysis.padding import (
    UNIFORM,
    Padding,
    Place,
)
from kernelband.proposers.rewriter.analysis.peeled import Peeled, peeled
from kernelband.proposers.rewriter.analysis.reductions import Reductions
from kernelband.proposers.rewriter.analysis.roles import Roles
from kernelband.proposers.rewriter.analysis.shapes import REDUCTIONS, Shapes
from kernelband.proposers.rewriter.analysis.syntax import arg_of, assigned, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    call,
    is_call,
    marker_arg,
    method_name,
    names_in,
    same,
    tl_name,
    var,
)
from kernelband.proposers.rewriter.analysis.walks import Walk, forward, not_a_row

ATOMICS = ("add", "max", "min", "xchg", "cas", "and", "or", "xor")
HOST_CALLS = {"cdiv": "triton.cdiv", "minimum": "min", "maximum": "max"}


@dataclass(eq=False)
class RowBlock:
    """A constexpr B whose loops walk [0, end) in blocks that one block of B >= end can replace."""

    param: str
    loops: tuple[Loop, ...]
    end: ast.expr  # n, canonical: a value of the kernel's parameters
    dot: bool  # B sizes a tl.dot operand (at least 16 there)
    others: tuple[str, ...]  # the other dimensions of the tiles B sizes (constexprs or numbers)
    padded: str = ""  # why lanes past n would change the result ("" where they change nothing): one block of
    # B == n, which has no such lanes, computes what the loops do, where n is a power of two
    bound: ast.expr | None = None  # what the launch reads for n: n, or where n differs by program (`min(C,
    # seqlen - pid * C)`) a value of the parameters it never exceeds (C)
    empty: tuple[Loop, ...] = ()  # the loops that run no block where one block covers the row: the twin drops them

    @property
    def host_end(self) -> str:
        """The bound of n as host code, in the kernel's parameter names (`triton.cdiv(N, SPLIT_N)`)."""
        return ast.unparse(_Host().visit(copy.deepcopy(self.bound if self.bound is not None else self.end)))


class RowBlocks:
    """For each constexpr of a kernel that a loop steps by, its RowBlock or why one block is not certain."""

    def __init__(self, values: KernelValues, shapes: Shapes, loops: Loops, accesses: Accesses, roles: Roles,
                 dots: Dots, reductions: Reductions) -> None:
        self.values, self.shapes, self.loops, self.accesses, self.roles, self.dots, self.reductions = (
            values, shapes, loops, accesses, roles, dots, reductions)
        self.kernel = values.kernel
        self._found: dict[str, RowBlock | str] = {}

    @cached_property
    def params(self) -> list[str]:
        """The constexprs that a loop steps by and that size a tile, in parameter order."""
        stepping = {p for loop in self.loops.all for p in loop.block}
        return [p for p in self.roles.tile_sizes if p in stepping]

    def of(self, param: str) -> RowBlock | str:
        if param not in self._found:
            self._found[param] = _Check(self, param).run()
        return self._found[param]

    # -- where each expression sits ---------------------------------------------------------------------------
    @cached_property
    def sites(self) -> list[tuple[cst.CSTNode, cst.CSTNode, Loop | None]]:
        """(expression, its statement, the innermost loop around it) for every expression the kernel evaluates."""
        found = []
        for statement in subnodes(self.kernel.node.body, cst.SimpleStatementLine):
            for small in statement.body:
                value = getattr(small, "value", None)
                if isinstance(value, cst.BaseExpression):
                    found.append((value, small, self.enclosing(small)))
        for node in subnodes(self.kernel.node.body, cst.For):
            found.append((node.iter, node, self.enclosing(node)))
        for node in subnodes(self.kernel.node.body, cst.If) + subnodes(self.kernel.node.body, cst.While):
            found.append((node.test, node, self.enclosing(node)))
        return found

    @cached_property
    def inlined(self) -> set[int]:
        """The assignments of names that every read sees through (never read as a carried or branch-set value):
        what they compute is checked where it is read."""
        expressions = [self.values.expand(e) for e, _, _ in self.sites]
        opaque = {marker_arg(n) for e in expressions for n in ast.walk(e) if is_call(n, "__var")}
        found = set()
        for statement in subnodes(self.kernel.node.body, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign | cst.AnnAssign) and not (assigned(small) & opaque):
                    found.add(id(small))
        return found

    @cached_property
    def _loop_ids(self) -> dict[int, Loop]:
        return {id(loop.node): loop for loop in self.loops.all}

    def enclosing(self, node: cst.CSTNode) -> Loop | None:
        """The innermost loop whose body holds the node."""
        parents = self.kernel.ms.parents
        parent = parents.get(id(node))
        while parent is not None and parent is not self.kernel.node:
            loop = self._loop_ids.get(id(parent))
            if loop is not None and node is loop.node.body:
                return loop
            node, parent = parent, parents.get(id(parent))
        return None

    @cached_property
    def order(self) -> dict[int, int]:
        """Each node's place in the kernel's source order."""
        return {id(n): i for i, n in enumerate(subnodes(self.kernel.node.body, cst.CSTNode))}


class _Check:
    """The checks of one constexpr, in the order of the module docstring."""

    def __init__(self, blocks: RowBlocks, param: str) -> None:
        self.blocks, self.param = blocks, param
        self.kernel = blocks.kernel
        self.values, self.shapes = blocks.values, blocks.shapes
        self.stepping = self.loops = blocks.loops.stepping(param)
        self.peeled = Peeled()
        self.walks: dict[int, Walk] = {}
        self.sites, self.accesses = blocks.sites, blocks.accesses.all
        self.hidden: set[int] = set()  # the nodes of the loops that run no block

    def _peel(self) -> None:
        """The loops that run no block under one block leave the loops, the sites and the accesses: the twin
        has none of them."""
        self.peeled = peeled(self.loops, self.param)
        if not self.peeled.empty:
            return
        hidden = {id(n) for loop in self.peeled.empty for n in subnodes(loop.node, cst.CSTNode)}
        self.loops = [loop for loop in self.loops if id(loop.node) not in hidden]
        self.sites = [site for site in self.sites if id(site[1]) not in hidden]
        self.accesses = [access for access in self.accesses if id(access.call) not in hidden]
        self.hidden = hidden

    def run(self) -> RowBlock | str:
        name, param = self.kernel.name, self.param
        role = self.blocks.roles[param]
        if role.tiles:
            return f"{name}'s {param} also tiles program coordinates (a program id scales it)"
        if role.shaped:  # a lane-keeping call (`analysis.roles.LANE_KEEPING`) leaves it free
            return f"tl.{role.shaped[0]}'s result depends on the extent of {param}"
        for loop in self.loops:  # a backward walk read as the forward walk over the same blocks
            walk = forward(loop, name, param)
            if isinstance(walk, str):
                return walk
            self.walks[id(loop.node)] = walk
        self.loops = [self.walks[id(loop.node)].loop for loop in self.loops]
        self._peel()
        why = self._loops()
        if why:
            return why
        self.end = self.loops[0].end
        self.offsets = {id(loop.node): _offset(loop, param) for loop in self.loops}
        order = self.blocks.order
        spans = {}
        for loop in self.loops:
            places = [order[id(n)] for n in subnodes(loop.node, cst.CSTNode) if id(n) in order]
            spans[id(loop.node)] = (min(places), max(places))
        self.padding = Padding(self.values, self.shapes, param, self.loops, self.end, self.offsets, spans,
                               frozenset(id(loop.node) for loop in self.peeled.empty))
        online = {(id(o.loop.node), n) for o in self.blocks.reductions.online for n in (o.max, *o.sums)}
        self.carries = Carries(self.values, self.shapes, self.padding, param, online)
        for check in (self._uses, self._agree, self._carried, self._escapes, self._placed):
            why = check()
            if why:
                return why
        padded = self._masked() or self._reductions()
        bound = _upper_bound(self.end, self.kernel)
        if padded and bound is not self.end:
            return f"{name}'s row length ({readable(self.end)}) differs by program, and {padded}"
        return RowBlock(param, tuple(self.loops), self.end, self._sizes_dot(), self._others(), padded, bound,
                        self.peeled.empty)

    # -- the loops -----------------------------------------------------------------------------------------
    def _loops(self) -> str:
        name, param = self.kernel.name, self.param
        ids = {id(loop) for loop in self.stepping}
        for loop in self.stepping:
            outer = loop.parent
            while outer is not None:
                if id(outer) in ids:
                    return f"a loop of {name} over blocks of {param} runs inside another"
                outer = outer.parent
        for loop in self.loops:
            if loop.exits:
                return f"a loop of {name} over blocks of {param} leaves early (break, continue or return)"
            if loop.form == "other" or loop.end is None or loop.start is None:
                return f"a loop of {name} steps by {param} over a range the analysis cannot read"
            if loop.form == "cdiv":
                walk = self.walks[id(loop.node)]
                divisor = (walk.count if walk.backward else self.values.expand(_range_args(loop)[-1])).args[1]
                if not same(divisor, ast.Name(param, ast.Load())):
                    return f"a loop of {name} counts blocks of {readable(divisor)}, not of {param}"
            elif not same(loop.step, ast.Name(param, ast.Load())):
                return not_a_row(name, param, loop)
            if id(loop) not in self.peeled.from_zero and not same(loop.start, ast.Constant(0)):
                return (f"a loop of {name} over blocks of {param} walks from {readable(loop.start)}, not from the "
                        "row's start: one block of the whole row covers other lanes than it does")
        ends = list(dict.fromkeys(readable(loop.end) for loop in self.loops))
        if len(ends) > 1:
            return f"{name}'s loops over blocks of {param} run to different ends ({', '.join(ends)})"
        if _upper_bound(self.loops[0].end, self.kernel) is None:
            return (f"the extent of {name}'s loop over blocks of {param} ({ends[0]}) is not a value the launch can "
                    "read (a kernel parameter or a value of them)")
        return ""

    def _skipped(self) -> set[int]:
        """The loop headers and block advances, where B and the block's offset are read as such."""
        skip = set()
        for loop in self.loops:
            skip.add(id(loop.node))
            for statement in loop.body:
                if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                    written = assigned(statement)
                    if loop.form == "while" and loop.var in written or any(
                            loop.carried.get(w) is not None and loop.carried[w].kind == "increment" for w in written):
                        skip.add(id(statement.body[0]))
        return skip

    # -- B and the block offsets, read as a block's extent and offset alone -------------------------------
    def _uses(self) -> str:
        skip = self._skipped() | self.blocks.inlined
        reads = BlockReads(self.kernel.name, self.param, self.loops, self.padding)
        for expression, statement, _ in self.sites:
            if id(statement) in skip:
                continue
            why = reads.why(self.values.expand(expression))
            if why:
                return why
        return ""

    def _agree(self) -> str:
        """Why B and another extent must be equal for the kernel to compile ("" where they need not): a value
        sized by B meets one sized by another extent in one dimension (`o = tl.zeros([BM])`, `o += tl.sum(p,
        axis=0)` with p of (BM, BN): a kernel launched with BM == BN)."""
        seen = set()
        for expression, statement, _ in self.sites:
            tree = self.values.expand(expression)
            if isinstance(statement, cst.AugAssign) and isinstance(statement.target, cst.Name):
                current = self.values.env_at(statement).get(statement.target.value, var(statement.target.value))
                tree = ast.BinOp(current, ast.Add(), tree)  # `o += x` combines o and x as `o + x` does
            for node in ast.walk(tree):
                if isinstance(node, ast.BinOp):
                    pairs = [(node.left, node.right)]
                elif isinstance(node, ast.Compare):
                    pairs = [(node.left, c) for c in node.comparators]
                elif tl_name(node) in ("where", "maximum", "minimum") and len(node.args) >= 2:
                    pairs = [(a, b) for a in node.args for b in node.args if a is not b]
                else:
                    continue
                for a, b in pairs:
                    memo = (ast.dump(a), ast.dump(b))
                    if memo in seen:
                        continue
                    seen.add(memo)
                    other = self._other_extent(self.shapes.of(a), self.shapes.of(b))
                    if other:
                        return (f"{self.kernel.name} combines a tile along {self.param} with one along {other} in one "
                                f"dimension: it runs only where {self.param} == {other}")
        return ""

    def _other_extent(self, a: tuple | None, b: tuple | None) -> str:
        if a is None or b is None:
            return ""
        for x, y in zip(reversed(a), reversed(b)):
            if x != y and "1" not in (x, y) and self.param in (x, y):
                return y if x == self.param else x
        return ""

    # -- what the loops carry, and what leaves them ---------------------------------------------------------
    def _carried(self) -> str:
        name, param = self.kernel.name, self.param
        for loop in self.loops:
            for carried in loop.carried.values():
                if carried.kind == "increment" and param not in names_in(carried.term or ast.Constant(0)):
                    return (f"{carried.name} counts {name}'s blocks of {param} (it advances by "
                            f"{readable(carried.term)} a block)")
        for access, loop in self.accesses_in_loops():
            running = self._running(access, loop)
            if running:
                return f"a {access.kind} inside {name}'s loop over blocks of {param} reads {running}, which the " \
                       "loop carries from block to block"
        return ""

    def accesses_in_loops(self) -> list[tuple[Access, Loop]]:
        found = []
        for access in self.accesses:
            loop = self._b_loop(access.loop)
            if loop is not None:
                found.append((access, loop))
        return found

    def _running(self, access: Access, loop: Loop) -> str:
        running = {c for c, v in loop.carried.items() if v.kind != "increment"}
        parts = [self.values.expand(a.value) for a in access.call.args]
        for part in parts:
            for node in ast.walk(part):
                if is_call(node, "__var") and marker_arg(node) in running:
                    return marker_arg(node)
        return ""

    def _escapes(self) -> str:
        name, order = self.kernel.name, self.blocks.order
        for loop in self.loops:
            inside = {id(n) for n in subnodes(loop.node, cst.CSTNode)}
            last = max(order[i] for i in inside if i in order)
            written = assigned(loop.node.body) | ({loop.var} if loop.var else set())
            outermost = loop
            while outermost.parent is not None:
                outermost = outermost.parent
            around = {id(n) for n in subnodes(outermost.node, cst.CSTNode)} if outermost is not loop else set()
            for expression, statement, _ in self.sites:
                if id(statement) in inside or not (order.get(id(statement), -1) > last or id(statement) in around):
                    continue
                for read in sorted({n.value for n in loads(expression)} & written):
                    if not self._reaches(statement, read, last):
                        continue
                    carried = loop.carried.get(read)
                    if carried is None or read == loop.var:
                        return f"{read} after {name}'s loop over blocks of {self.param} holds its last block's value"
                    if carried.kind == "increment":
                        return f"{read} after {name}'s loop over blocks of {self.param} holds its position after " \
                               "the last block"
                    why = self.carries.why(loop, carried, self.values.expand(expression))
                    if why:
                        return why
        return ""

    def _reaches(self, statement: cst.CSTNode, name: str, after: int) -> bool:
        """Whether the value a loop leaves in `name` may reach a statement after it: nothing assigns the name on
        the way, neither before the statement nor before the outermost later loop around it that assigns it."""
        if not same(self.values.env_at(statement).get(name, var(name)), var(name)):  # unset: read as __var
            return False
        order, parents = self.blocks.order, self.kernel.ms.parents
        outer = None
        node = parents.get(id(statement))
        while node is not None and node is not self.kernel.node:
            if isinstance(node, cst.For | cst.While) and order.get(id(node), -1) > after \
                    and name in assigned(node.body) | (assigned(node.target) if isinstance(node, cst.For) else set()):
                outer = node
            node = parents.get(id(node))
        return outer is None or same(self.values.env_at(outer).get(name, var(name)), var(name))

    # -- loads, stores and reductions along B -------------------------------------------------------------
    def _b_loop(self, loop: Loop | None) -> Loop | None:
        mine = {id(b.node): b for b in self.loops}  # a backward loop's forward reading stands for it
        while loop is not None and id(loop.node) not in mine:
            loop = loop.parent
        return None if loop is None else mine[id(loop.node)]

    def _along(self, shape) -> bool:
        return shape is None or self.param in shape

    def _along_b(self, access: Access) -> bool:
        return self._along(access.shape) and (access.shape is not None or access.address is None
                                              or self.padding.lanes(access.address))

    def _placed(self) -> str:
        """Why a load or store along B is not one the loops' blocks walk ("" where every one is)."""
        name, param = self.kernel.name, self.param
        for access in filter(self._along_b, self.accesses):
            if self._b_loop(access.loop) is None:
                return f"a {access.kind} along {param} lies outside {name}'s loops over its blocks"
            if access.form == "descriptor":
                return f"a {access.kind} along {param} goes through a tensor descriptor, whose offsets the analysis " \
                       "does not follow"
        for atomic in self._atomics():
            if self._b_loop(self.blocks.enclosing(atomic)) is None:
                return f"an atomic along {param} lies outside {name}'s loops over its blocks"
        helpers = self.values.helpers
        for expression, _, _ in self.sites:  # a helper that loops or branches is not read into its caller
            for node in ast.walk(self.values.expand(expression)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers \
                        and any(self.padding.lanes(a) for a in node.args):
                    return f"{name} passes values along {param} to {node.func.id}, whose loads and stores the " \
                           "analysis does not read"
        return ""

    def _atomics(self) -> list[cst.Call]:
        found = []
        for atomic in subnodes(self.kernel.node.body, cst.Call):
            if id(atomic) not in self.hidden and any(self.kernel.is_tl(atomic.func, f"atomic_{op}") for op in ATOMICS):
                pointer = arg_of(atomic, 0, "pointer")
                if pointer is not None and self.padding.lanes(self.values.expand(pointer)):
                    found.append(atomic)
        return found

    def _masked(self) -> str:
        """Why a load or store along B may touch a lane past n ("" where a mask or a boundary check stops
        each)."""
        param = self.param
        for access in filter(self._along_b, self.accesses):
            if access.form == "block_ptr":
                if not self.padding.block_bounded(self.values.expand(access.call)):
                    return f"a {access.kind} along {param} through a block pointer is not bounded at the row's end"
                continue
            if access.mask is None:
                return f"a {access.kind} along {param} is not bounded by a mask"
            if self.padding.of(access.mask, (access.loop, self.blocks.order.get(id(access.call), 0))) is not False:
                return f"a {access.kind} along {param} is not bounded by a mask at the row's end " \
                       f"({readable(self.end)})"
        for atomic in self._atomics():
            mask = arg_of(atomic, 2, "mask")
            place = (self.blocks.enclosing(atomic), self.blocks.order.get(id(atomic), 0))
            if mask is None or self.padding.of(self.values.expand(mask), place) is not False:
                return f"an atomic along {param} is not bounded by a mask at the row's end"
        return ""

    def _reductions(self) -> str:
        seen = set()
        for expression, statement, loop in self.sites:
            inside = (loop, self.blocks.order.get(id(statement), 0))
            tree = self.values.expand(expression)
            for node in ast.walk(tree):
                name = tl_name(node) or method_name(node)
                if name not in REDUCTIONS and name != "dot":
                    continue
                memo = (ast.dump(node), id(loop), inside[1])
                if memo in seen:
                    continue
                seen.add(memo)
                why = self._dot_sum(node, inside) if name == "dot" else self._reduction(name, node, inside)
                if why:
                    return f"{self.kernel.name}: {why}"
        return ""

    def _reduction(self, name: str, node: ast.Call, inside: Place) -> str:
        operand = node.args[0] if tl_name(node) and node.args else node.func.value if not tl_name(node) else None
        if operand is None:
            return ""
        position = 1 if tl_name(node) else 0
        axis = next((k.value for k in node.keywords if k.arg == "axis"),
                    node.args[position] if len(node.args) > position else ast.Constant(None))
        shape = self.shapes.of(operand)
        if shape is not None:
            if isinstance(axis, ast.Constant) and isinstance(axis.value, int) and -len(shape) <= axis.value < len(shape):
                if shape[axis.value] != self.param:
                    return ""
            elif self.param not in shape:
                return ""
        return self.padding.neutral(name, operand, inside)

    def _sizes_dot(self) -> bool:
        """Whether B sizes a tl.dot operand, or a tl.dot whose operands' shapes are not known sits in a loop
        over B (either way a block of B keeps tl.dot's minimum of 16)."""
        for dot in self.blocks.dots.all:
            tiles = (dot.m, dot.n, dot.k)
            if self.param in {t.param for t in tiles if t is not None} or (None in tiles
                                                                          and self._b_loop(dot.loop) is not None):
                return True
        return False

    def _dot_sum(self, node: ast.Call, inside: Place) -> str:
        """Why the lanes past the end change a tl.dot that sums over B ("" where they do not)."""
        if len(node.args) < 2:
            return ""
        a, b = self.shapes.of(node.args[0]), self.shapes.of(node.args[1])
        summed = (a is None or b is None) or (len(a) == 2 and a[1] == self.param) or (len(b) == 2 and b[0] == self.param)
        if not summed:
            return ""
        pads = [self.padding.of(x, inside) for x in node.args[:2]]
        if all(p is UNIFORM for p in pads) or any(p == 0 and p is not False for p in pads):
            return ""
        return f"the lanes past the end of tl.dot's operands along {self.param} are not zero on either side"

    def _others(self) -> tuple[str, ...]:
        """The dimensions beside B of the tiles B sizes."""
        dims: dict[str, None] = {}
        for access in self.accesses:
            if access.shape is not None and self.param in access.shape:
                dims.update((d, None) for d in access.shape if d not in (self.param, "1"))
        for expression, _, _ in self.sites:
            for node in ast.walk(self.values.expand(expression)):
                if tl_name(node) in ("zeros", "full"):
                    shape = self.shapes.of(node)
                    if shape is not None and self.param in shape:
                        dims.update((d, None) for d in shape if d not in (self.param, "1"))
        return tuple(dims)


def _range_args(loop: Loop) -> list[cst.BaseExpression]:
    return [a.value for a in loop.node.iter.args if a.keyword is None and not a.star]


def _offset(loop: Loop, param: str) -> ast.expr:
    """The canonical offset of a loop's block: `start`, `i * B` or the while loop's variable."""
    if loop.form == "range":
        return call("__loop", ast.Constant(loop.var))
    if loop.form == "cdiv":
        return ast.BinOp(call("__loop", ast.Constant(loop.var)), ast.Mult(), ast.Name(param, ast.Load()))
    return var(loop.var)


def _upper_bound(end: ast.expr, kernel) -> ast.expr | None:
    """`end` where the launch can compute it, else the first argument of a `min(...)` it can (the row's
    length may differ by program, never past that); None where neither."""
    if _host_readable(end, kernel):
        return end
    if (tl_name(end) == "minimum" or isinstance(end, ast.Call) and isinstance(end.func, ast.Name)
            and end.func.id == "min"):
        return next((a for a in end.args if _host_readable(a, kernel)), None)
    return None


def _host_readable(node: ast.AST, kernel) -> bool:
    """Whether a canonical value is arithmetic of the kernel's parameters and numbers alone."""
    attributes = {id(a.value) for a in ast.walk(node) if isinstance(a, ast.Attribute)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if id(sub) not in attributes and kernel.param(sub.id) is None and sub.id not in ("min", "max"):
                return False
        elif isinstance(sub, ast.Call):
            if not (tl_name(sub) in HOST_CALLS or (isinstance(sub.func, ast.Name) and sub.func.id in ("min", "max"))):
                return False
        elif isinstance(sub, ast.Attribute):
            if not (isinstance(sub.value, ast.Name) and sub.value.id == "tl"):
                return False
        elif not isinstance(sub, ast.expr_context | ast.operator | ast.unaryop | ast.BinOp | ast.UnaryOp
                            | ast.Constant):
            return False
    return True


class _Host(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = tl_name(node)
        if name in HOST_CALLS:
            return ast.Call(pyast.parse(HOST_CALLS[name], mode="eval").body, node.args, node.keywords)
        return node
