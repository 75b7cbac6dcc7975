"""The loads and stores of a kernel, however they address memory:

    tl.load(x_ptr + offs, mask=offs < n, other=0.0)          pointer arithmetic, bounded by its mask
    tl.load(block_ptr, boundary_check=(0, 1))                a block pointer (tl.make_block_ptr / tl.advance)
    desc.load([off_m, off_k])                                a tensor descriptor (TMA on Hopper): always bounded

For each: the pointer parameters it reaches (its bases), its mask, whether every element it touches is within
its tensor (a mask, a boundary check on every dimension of a block pointer, or a descriptor), its tile shape,
and the innermost loop it sits in.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.loops import Loop, Loops
from kernelband.proposers.rewriter.analysis.shapes import Shape, Shapes
from kernelband.proposers.rewriter.analysis.syntax import arg_of, dotted, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    add_terms,
    is_call,
    marker_arg,
    tl_name,
)

# The calls of triton.language that write memory: what may change a value a load read before them
WRITES = ("store", *(f"atomic_{op}" for op in ("add", "max", "min", "xchg", "cas", "and", "or", "xor")))


@dataclass(eq=False)
class Access:
    call: cst.Call = field(repr=False)
    store: bool
    form: str  # "pointer", "block_ptr" or "descriptor"
    address: ast.expr | None  # canonical: the pointer, the block pointer, or the descriptor's offsets
    bases: frozenset[str]  # the pointer parameters it reaches
    mask: ast.expr | None
    bounded: bool
    shape: Shape | None
    loop: Loop | None

    @property
    def kind(self) -> str:
        return "store" if self.store else "load"


class Accesses:
    def __init__(self, values: KernelValues, shapes: Shapes, loops: Loops) -> None:
        self.values, self.shapes, self.loops = values, shapes, loops
        self.kernel = values.kernel

    @cached_property
    def all(self) -> list[Access]:
        found = []
        enclosing = self._enclosing()
        for call in subnodes(self.kernel.node.body, cst.Call):
            access = self._access(call, enclosing.get(id(call)))
            if access is not None:
                found.append(access)
        return found

    @cached_property
    def atomics(self) -> list[tuple[cst.Call, frozenset[str]]]:
        """Each tl.atomic_* call and the pointer parameters it updates."""
        found = []
        for call in subnodes(self.kernel.node.body, cst.Call):
            name = (dotted(call.func) or "").rpartition(".")[2]
            if name.startswith("atomic_") and any(self.kernel.is_tl(call.func, name) for _ in [0]):
                pointer = arg_of(call, 0, "pointer")
                found.append((call, self._bases(pointer) if pointer is not None else frozenset()))
        return found

    @property
    def loads(self) -> list[Access]:
        return [a for a in self.all if not a.store]

    @property
    def stores(self) -> list[Access]:
        return [a for a in self.all if a.store]

    def of(self, call: cst.Call) -> Access | None:
        return next((a for a in self.all if a.call is call), None)

    def _enclosing(self) -> dict[int, Loop]:
        """The innermost loop around each call."""
        found: dict[int, Loop] = {}
        for loop in self.loops.all:  # outermost first: inner loops overwrite
            for call in subnodes(loop.node.body, cst.Call):
                found[id(call)] = loop
        return found

    def _access(self, call: cst.Call, loop: Loop | None) -> Access | None:
        kernel = self.kernel
        if kernel.is_tl(call.func, "load") or kernel.is_tl(call.func, "store"):
            store = kernel.is_tl(call.func, "store")
            pointer = arg_of(call, 0, "pointer")
            if pointer is None:
                return None
            address = self.values.expand(pointer)
            mask = arg_of(call, 2 if store else 1, "mask")
            block = self.shapes.block_pointer(address)
            if block is not None:
                check = arg_of(call, 3 if store else 3, "boundary_check")
                rank = len(self.shapes.pointer_shape(address) or ())
                bounded = check is not None and self._checks_all(check, rank)
                bases = self._bases(next((k.value for k in block.keywords if k.arg == "base"),
                                         block.args[0] if block.args else None))
                return Access(call, store, "block_ptr", address, bases, None, bounded,
                              self.shapes.pointer_shape(address), loop)
            mask_form = self.values.expand(mask) if mask is not None else None
            return Access(call, store, "pointer", address, self._bases(address), mask_form, mask is not None,
                          self.shapes.of(address), loop)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("load", "store") \
                and self._descriptor(call.func.value):
            store = call.func.attr.value == "store"
            offsets = arg_of(call, 0, "offsets")
            made = self._descriptor(call.func.value)
            bases = self._bases(made.args[0]) if isinstance(made, ast.Call) and made.args else frozenset()
            shape = None
            if isinstance(made, ast.Call):
                block = next((k.value for k in made.keywords if k.arg == "block_shape"),
                             made.args[3] if len(made.args) > 3 else None)
                shape = tuple(ast.unparse(e) for e in block.elts) if isinstance(block, ast.Tuple | ast.List) \
                    else None
            return Access(call, store, "descriptor", self.values.expand(offsets) if offsets is not None else None,
                          bases, None, True, shape, loop)
        return None

    def _descriptor(self, node: cst.BaseExpression) -> ast.Call | bool | None:
        """The `tl.make_tensor_descriptor(...)` a value is; True for a descriptor parameter (made on the host)."""
        name = dotted(node)
        if name is None:
            return None
        expanded = self.values.expand(node)
        if tl_name(expanded) in ("make_tensor_descriptor", "_experimental_make_tensor_descriptor"):
            return expanded
        param = self.kernel.param(name)
        if param is not None and any(
                isinstance(c.func, cst.Attribute) and dotted(c.func.value) == name and c.func.attr.value == "load"
                for c in subnodes(self.kernel.node.body, cst.Call)) and not self._pointer_like(name):
            return True
        return None

    def _pointer_like(self, name: str) -> bool:
        return any(name in self._bases(self.values.expand(arg_of(c, 0, "pointer")))
                   for c in subnodes(self.kernel.node.body, cst.Call)
                   if (self.kernel.is_tl(c.func, "load") or self.kernel.is_tl(c.func, "store"))
                   and arg_of(c, 0, "pointer") is not None)

    @staticmethod
    def _checks_all(check: cst.BaseExpression, rank: int) -> bool:
        if isinstance(check, cst.Tuple | cst.List):
            axes = {e.value.evaluated_value for e in check.elements if isinstance(e.value, cst.Integer)}
            return axes >= set(range(rank))
        return isinstance(check, cst.Integer) and rank == 1 and check.evaluated_value == 0

    def bases_of(self, address: ast.AST | cst.CSTNode | None) -> frozenset[str]:
        """The pointer parameters among the terms of an address (through block pointers and carried locals): what
        an atomic or a helper handed a pointer reaches, as much as a load or a store."""
        return self._bases(address)

    def _bases(self, address: ast.AST | cst.CSTNode | None) -> frozenset[str]:
        """The pointer parameters among the terms of an address (through block pointers and carried locals)."""
        if address is None:
            return frozenset()
        if isinstance(address, cst.CSTNode):
            address = self.values.expand(address)
        found: set[str] = set()
        pending, seen = [address], 0
        while pending and seen < 32:
            seen += 1
            node = pending.pop()
            block = self.shapes.block_pointer(node) if not isinstance(node, ast.Name) else None
            if block is not None:
                base = next((k.value for k in block.keywords if k.arg == "base"), block.args[0] if block.args else None)
                if base is not None:
                    pending.append(base)
                continue
            for term in add_terms(node):
                if isinstance(term, ast.Name) and self.values.is_param(term.id):
                    found.add(term.id)
                elif is_call(term, "__var"):
                    definition = self.values.definition(marker_arg(term))
                    pending.extend([definition] if definition is not None else [])
                elif tl_name(term) in ("multiple_of", "max_contiguous", "advance") and term.args:
                    pending.append(term.args[0])
                elif isinstance(term, ast.Subscript):
                    pending.append(term.value)
                elif isinstance(term, ast.BinOp) and isinstance(term.op, ast.Sub):
                    pending.append(term.left)  # `p + offs - n`: a pointer less an offset
        return frozenset(found)
