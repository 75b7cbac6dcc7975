"""Which reads of memory stand for one value. Two `tl.load`s of one canonical form (values.py: the same pointer,
mask and `other`, and none of the names they read reassigned between them, whatever the names) read the same
values unless memory may change between them: a store or atomic anywhere between the first and the last of
them may write what they read (two pointer parameters may be one buffer), so then they are not one value.
Positions are the calls' order in the source, a call before its arguments: a load in a store's arguments counts
as after the store, which can only keep apart reads that are one.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import WRITES
from kernelband.proposers.rewriter.analysis.syntax import subnodes
from kernelband.proposers.rewriter.analysis.values import KernelValues, tl_name


class Reloads:
    """The loads of one kernel whose repeated reads a write may separate."""

    def __init__(self, values: KernelValues, key: Callable[[ast.AST], str]) -> None:
        """`key`: what its readers compare canonical forms by (reductions: the normal form, ctx aside)."""
        self.values, self.key = values, key
        self.kernel = values.kernel

    @cached_property
    def _calls(self) -> list[cst.Call]:
        return subnodes(self.kernel.node.body, cst.Call)

    @cached_property
    def _order(self) -> tuple[dict[str, list[int]], list[int]]:
        """(each load form's positions in the kernel, in source order; the positions of the writes)."""
        loads: dict[str, list[int]] = {}
        writes: list[int] = []
        for at, node in enumerate(self._calls):
            if self.kernel.is_tl(node.func, "load"):
                loads.setdefault(self.key(self.values.expand(node)), []).append(at)
            elif any(self.kernel.is_tl(node.func, w) for w in WRITES):
                writes.append(at)
        return loads, writes

    def separated(self, node: ast.AST) -> bool:
        """Whether a canonical form reads a load that the kernel makes more than once with a write between: its
        reads are then not one value."""
        loads, writes = self._order
        for sub in ast.walk(node):
            if tl_name(sub) != "load":
                continue
            at = loads.get(self.key(sub), [])
            if len(at) > 1 and any(min(at) < w < max(at) for w in writes):
                return True
        return False

    def written_between(self, first: cst.CSTNode, last: cst.CSTNode) -> bool:
        """Whether a write may run between the first load in `first` and the last load in `last` (two passes
        over a row: what the second reads may not be what the first read)."""
        _, writes = self._order
        inside = {id(c) for c in subnodes(first, cst.Call)}, {id(c) for c in subnodes(last, cst.Call)}
        at = [[i for i, c in enumerate(self._calls) if id(c) in ids and self.kernel.is_tl(c.func, "load")]
              for ids in inside]
        return bool(at[0] and at[1]) and any(min(at[0]) < w < max(at[1]) for w in writes)
