"""The one analysis of a module that every rewrite reads: `kernel_facts(ms, kernel)` computes, once per parsed
module and kernel, the canonical values, shapes, loops, accesses, the integer parameters their offsets and
masks read (alignment), constexpr roles, tl.dot operands, reductions and the row block they reduce (each its
own module here), and keeps them for the next rewrite that asks. Like libcst's metadata providers: facts are
derived once, and transforms only read them."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import Accesses
from kernelband.proposers.rewriter.analysis.alignment import Alignment
from kernelband.proposers.rewriter.analysis.blocked import RowBlocks
from kernelband.proposers.rewriter.analysis.dots import Dots
from kernelband.proposers.rewriter.analysis.loops import Loops
from kernelband.proposers.rewriter.analysis.reductions import Reductions
from kernelband.proposers.rewriter.analysis.roles import Roles
from kernelband.proposers.rewriter.analysis.row_extent import RowExtents
from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import dotted, subnodes
from kernelband.proposers.rewriter.analysis.values import KernelValues

MAX_CALL_DEPTH = 3


class KernelFacts:
    """Every fact about one kernel (each computed on first use). A helper's facts at one of its call sites
    (`callees`) read in the calling kernel's terms: its parameters bound to what the caller passes."""

    def __init__(self, ms: ModuleSource, kernel: Kernel, bound: dict | None = None, caller: Kernel | None = None,
                 depth: int = 0) -> None:
        self.ms, self.kernel = ms, kernel
        self.bound, self.caller, self.depth = bound, caller, depth

    @cached_property
    def values(self) -> KernelValues:
        return KernelValues(self.ms, self.kernel, self.bound, self.caller)

    @cached_property
    def callees(self) -> list[KernelFacts]:
        """The facts of each helper this kernel calls that does not read as one expression (it loops or
        branches), at that call."""
        return self._helpers(lambda helper: not _straight_line(helper))

    @cached_property
    def memory_callees(self) -> list[KernelFacts]:
        """The facts of each straight-line helper that loads or stores, at its call: the canonical forms inline
        what it returns, but its accesses are its own (`acc += _products(w_row, x_ptr, k, K, lanes)`)."""
        return self._helpers(lambda helper: _straight_line(helper) and _touches_memory(helper))

    def _helpers(self, wanted) -> list[KernelFacts]:
        found: list[KernelFacts] = []
        if self.depth >= MAX_CALL_DEPTH:
            return found
        for call in subnodes(self.kernel.node.body, cst.Call):
            helper = self.ms.kernels.get(dotted(call.func) or "")
            if helper is None or helper is self.kernel or not wanted(helper):
                continue
            bound = self.values.bind(helper.node, call)
            if bound is not None:
                found.append(KernelFacts(self.ms, helper, bound, self.caller or self.kernel, self.depth + 1))
        return found

    @cached_property
    def shapes(self) -> Shapes:
        return Shapes(self.values)

    @cached_property
    def loops(self) -> Loops:
        return Loops(self.values, self.shapes)

    @cached_property
    def accesses(self) -> Accesses:
        return Accesses(self.values, self.shapes, self.loops)

    @cached_property
    def alignment(self) -> Alignment:
        return Alignment(self.values, self.loops, self.accesses,
                         [c.alignment for c in (*self.callees, *self.memory_callees)])

    @cached_property
    def roles(self) -> Roles:
        return Roles(self.values, self.shapes, self.loops, self.accesses, [c.roles for c in self.callees])

    @cached_property
    def dots(self) -> Dots:
        return Dots(self.roles, self.loops, [c.dots for c in self.callees])

    @cached_property
    def blocked(self) -> RowBlocks:
        return RowBlocks(self.values, self.shapes, self.loops, self.accesses, self.roles, self.dots,
                         self.reductions)

    @cached_property
    def reductions(self) -> Reductions:
        return Reductions(self.values, self.shapes, self.loops)

    @cached_property
    def row_extents(self) -> RowExtents:
        return RowExtents(self.values, self.shapes, self.roles)

    # -- what the block-size rewrites read ----------------------------------------------------------------------
    @property
    def tile_sizes(self) -> list[str]:
        """The constexprs that size a tile, in parameter order."""
        return self.roles.tile_sizes

    @property
    def tiled(self) -> set[str]:
        """Tile sizes that scale a program id: the grid must follow them."""
        return {p for p in self.tile_sizes if self.roles[p].tiles}

    @property
    def looped(self) -> set[str]:
        """Tile sizes that a loop steps by (and that scale no program id): any value covers the same range."""
        return {p for p in self.tile_sizes if self.roles[p].steps and not self.roles[p].tiles}


def _straight_line(helper: Kernel) -> bool:
    """A helper that canonical forms inline: assignments and one return, nothing else."""
    return all(isinstance(s, cst.SimpleStatementLine) for s in helper.node.body.body)


def _touches_memory(helper: Kernel) -> bool:
    return any(helper.is_tl(c.func, op) for c in subnodes(helper.node.body, cst.Call) for op in ("load", "store"))


def kernel_facts(ms: ModuleSource, kernel: Kernel) -> KernelFacts:
    cache = ms.cache.setdefault("kernel_facts", {})
    if kernel.name not in cache:
        cache[kernel.name] = KernelFacts(ms, kernel)
    return cache[kernel.name]


def facts_of(kernel: Kernel) -> KernelFacts:
    """The facts of a kernel of a parsed module."""
    return kernel_facts(kernel.ms, kernel)
