"""The integer parameters of a kernel whose alignment its loads and stores depend on:

    tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :], mask=k + offs_k[None, :] < K)

reads `stride_am` in its offsets (it scales them) and `K` as a bound of its mask (compared with offsets). On a
GPU, Triton's axis analysis moves 16 bytes at a time only where it knows each run of contiguous offsets starts at
a multiple of the vector (the row starts `offs_m * stride_am`) and that a mask is constant over the run (the
bound `K` a multiple of it); an integer argument is known to be a multiple of 16 only where its value is one.

A parameter counts for the offsets where the path from the address down to it passes only through `+`, `-` and
`*` (and a broadcast `x[:, None]`, a cast `.to(...)`, a hint, a carried local's first value and what its loops
add to it): that is what sets the offsets' alignment. One under `//`, `%`, tl.cdiv, a min or max, or a loaded
value does not. It counts for a mask where it is such a term of one side of a comparison whose other side holds
offsets (a tl.arange). A block pointer's strides and offsets count as offsets, its shape as bounds. Pointer
parameters (the bases of any access or atomic) and constexprs are not counted. Read from the canonical forms
(`values`), in the kernel's terms, through the helpers it calls (`callees`).
"""

from __future__ import annotations

import ast
from functools import cached_property

from kernelband.proposers.rewriter.analysis.accesses import Access, Accesses
from kernelband.proposers.rewriter.analysis.loops import Loops
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    is_call,
    marker_arg,
    method_name,
    tl_name,
)

LINEAR = (ast.Add, ast.Sub, ast.Mult)
SAME_OFFSETS = ("multiple_of", "max_contiguous", "broadcast_to", "expand_dims", "reshape", "view")
ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class Alignment:
    """`offsets` and `bounds`: each counted parameter and the accesses it reaches that way (module doc)."""

    def __init__(self, values: KernelValues, loops: Loops, accesses: Accesses,
                 callees: list[Alignment] | None = None) -> None:
        self.values, self.loops, self.accesses = values, loops, accesses
        self.callees = callees or []

    @cached_property
    def pointers(self) -> frozenset[str]:
        """The parameters any access or atomic (here or in a helper) takes as its base."""
        found = {b for a in self.accesses.all for b in a.bases} | {b for _, bases in self.accesses.atomics
                                                                   for b in bases}
        return frozenset(found.union(*(c.pointers for c in self.callees)))

    @cached_property
    def offsets(self) -> dict[str, list[Access]]:
        return self._reaching(self._offset_terms, "offsets")

    @cached_property
    def bounds(self) -> dict[str, list[Access]]:
        return self._reaching(self._bound_terms, "bounds")

    @property
    def params(self) -> list[str]:
        """The integer parameters the offsets or masks read, in parameter order."""
        owner = self.values.caller or self.values.kernel
        counted = (set(self.offsets) | set(self.bounds)) - self.pointers - set(self.values.constexpr_names)
        return [p.name for p in owner.params if p.name in counted]

    def _reaching(self, terms, fact: str) -> dict[str, list[Access]]:
        """Each parameter among the `terms` of an access, with those accesses, here and in the helpers."""
        found: dict[str, list[Access]] = {}
        for access in self.accesses.all:
            for name in terms(access):
                found.setdefault(name, []).append(access)
        for callee in self.callees:
            for name, accesses in getattr(callee, fact).items():
                found.setdefault(name, []).extend(accesses)
        return found

    # -- reading the canonical forms ------------------------------------------------------------------------
    def _offset_terms(self, access: Access) -> set[str]:
        if access.address is None or access.form == "descriptor":
            return set()
        if access.form == "block_ptr":
            block = self.accesses.shapes.block_pointer(access.address)
            return set() if block is None else self._linear(_block_arg(block, "strides", 2)) | self._linear(
                _block_arg(block, "offsets", 3))
        return self._linear(access.address)

    def _bound_terms(self, access: Access) -> set[str]:
        if access.form == "block_ptr":
            block = self.accesses.shapes.block_pointer(access.address) if access.bounded else None
            return set() if block is None else self._linear(_block_arg(block, "shape", 1))
        found: set[str] = set()
        for node in self._walk(access.mask):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ORDERS):
                left, right = node.left, node.comparators[0]
                for side, other in ((left, right), (right, left)):
                    if self._has_offsets(side) and not self._has_offsets(other):
                        found |= self._linear(other)
        return found

    def _linear(self, node: ast.AST | None, seen: frozenset[str] = frozenset()) -> set[str]:
        """The parameters a value scales or shifts: reached from it through + - * alone (module doc)."""
        if isinstance(node, ast.Name):
            return {node.id} if self.values.is_param(node.id) else set()
        if isinstance(node, ast.BinOp) and isinstance(node.op, LINEAR):
            return self._linear(node.left, seen) | self._linear(node.right, seen)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self._linear(node.operand, seen)
        if isinstance(node, ast.Subscript):
            return self._linear(node.value, seen)
        if isinstance(node, ast.Tuple | ast.List):
            return set().union(*(self._linear(e, seen) for e in node.elts))
        if method_name(node) == "to":
            return self._linear(node.func.value, seen)
        if tl_name(node) in SAME_OFFSETS and node.args:
            return self._linear(node.args[0], seen)
        if is_call(node, "__var") and marker_arg(node) not in seen:
            name = marker_arg(node)
            return set().union(*(self._linear(v, seen | {name}) for v in self._carried_values(name)))
        return set()

    def _carried_values(self, name: str) -> list[ast.expr]:
        """What a carried or branch-set local holds: its first value, and what each loop adds to it or sets."""
        found = [self.values.definition(name)]
        for loop in self.loops.all:
            carried = loop.carried.get(name)
            if carried is not None:
                found += [carried.term, carried.update]
        return [v for v in found if v is not None]

    def _walk(self, node: ast.AST | None, seen: frozenset[str] = frozenset()) -> list[ast.AST]:
        """Every node of a canonical form and of the values of the carried locals it reads, but what a tl.load
        reads from: a loaded value compared with a bound (`tl.load(p + offs) > t`) is data, not offsets."""
        if node is None:
            return []
        found = [node]
        if tl_name(node) == "load":
            return found
        if is_call(node, "__var") and marker_arg(node) not in seen:
            for value in self._carried_values(marker_arg(node)):
                found += self._walk(value, seen | {marker_arg(node)})
        for child in ast.iter_child_nodes(node):
            found += self._walk(child, seen)
        return found

    def _has_offsets(self, node: ast.AST) -> bool:
        return any(is_call(n, "__arange") for n in self._walk(node))


def _block_arg(block: ast.Call, keyword: str, index: int) -> ast.expr | None:
    """An argument of a canonical `tl.make_block_ptr(base, shape, strides, offsets, block_shape, order)`."""
    given = next((k.value for k in block.keywords if k.arg == keyword), None)
    return given if given is not None else block.args[index] if len(block.args) > index else None
