"""contiguity_hints: an offset vector `M + tl.arange(0, P)`, where M is certain to be a multiple of P, gets the
hints of Triton's matmul tutorial:

    offs = pid * BLOCK + tl.arange(0, BLOCK)
 -> offs = tl.max_contiguous(tl.multiple_of(pid * BLOCK + tl.arange(0, BLOCK), BLOCK), BLOCK)

In Triton's axis analysis a tensor's divisibility is that of the first element of each run of `contiguity`
consecutive values: here one run of P values, M, M + 1, ..., M + P - 1, whose first is a multiple of P. Both
claims hold for any launch, so the hints never change a result (the interpreter ignores them); on the GPU they
let the compiler vectorise loads and stores through offsets whose arithmetic it cannot follow.

M is a multiple of P only where that is certain from the code:
* `S * P` or `P * S`, S an integer scalar: built from tl.program_id, tl.num_programs, the kernel's parameters
  (scalars: a launch passes no tensor but as a pointer), integer literals and locals built the same way, by
  `+ - * // %`, tl.cdiv, min and max, and casts to 32- or 64-bit integers (`tl.program_id(0).to(tl.int64)`). A
  product of integers wraps modulo 2^32 or 2^64 and stays a multiple of the power of two P (tl.arange's extent is
  one);
* a local every assignment of which is such a product;
* the target of `for s in range(A, n, T)` (or tl.range), bound nowhere else, A 0 or such a product and T P or
  one: a loop over blocks, or a grid-stride loop `range(pid * P, n, tl.num_programs(0) * P)`.
The arange may be broadcast (`M + tl.arange(0, P)[None, :]`, Inductor's 2-D tiles): the hints go on the vector
and the broadcast after them.
The hints are not added where the offsets wrap (`(M + tl.arange(0, P)) % N`, as the tutorial does): a run
that wraps is not contiguous.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    dotted,
    int_value,
    integer_cast_operand,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Found, Variant

SCALAR_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)
SCALAR_CALLS = ("program_id", "num_programs", "cdiv", "minimum", "maximum")


def _scalar(kernel: Kernel, node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> bool:
    """Whether `node` is certain to be an integer scalar (module doc), not a tensor."""
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.Name):
        values = kernel.scope.assigns.get(node.value, [])
        if kernel.param(node.value) is not None and not values:
            return True  # a parameter the kernel never rebinds
        return bool(values) and node.value not in seen and all(
            v is not None and _scalar(kernel, v, seen | {node.value}) for v in values)
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, SCALAR_OPS) and _scalar(kernel, node.left, seen) \
            and _scalar(kernel, node.right, seen)
    if isinstance(node, cst.UnaryOperation):
        return isinstance(node.operator, cst.Minus) and _scalar(kernel, node.expression, seen)
    cast = integer_cast_operand(node, kernel.tl)
    if cast is not None:
        return _scalar(kernel, cast, seen)
    if isinstance(node, cst.Call):
        known = any(kernel.is_tl(node.func, name) for name in SCALAR_CALLS) or dotted(node.func) in ("min", "max") \
            or (dotted(node.func) or "").endswith(".cdiv")
        return known and all(a.keyword is None or a.keyword.value == "axis" for a in node.args) \
            and all(not a.star and _scalar(kernel, a.value, seen) for a in node.args)
    return False


def _same(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    return code(a) == code(b)


def _product(kernel: Kernel, node: cst.BaseExpression, extent: cst.BaseExpression) -> bool:
    """`S * P` or `P * S` with S an integer scalar and P the arange's extent."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
        return False
    return (_same(node.right, extent) and _scalar(kernel, node.left)) \
        or (_same(node.left, extent) and _scalar(kernel, node.right))


def _stepped_by(kernel: Kernel, name: str, extent: cst.BaseExpression) -> bool:
    """Whether every binding of `name` is the target of `for name in range(A, n, T)` (or tl.range), A 0 or a
    multiple of P and T P or a multiple of it: a grid-stride loop `range(pid * P, n, num_programs * P)` too."""
    loops = [loop for loop in subnodes(kernel.node.body, cst.For)
             if isinstance(loop.target, cst.Name) and loop.target.value == name]
    if not loops or len(loops) != len(kernel.scope.assigns.get(name, [])):
        return False
    for loop in loops:
        it = loop.iter
        if not (isinstance(it, cst.Call) and (dotted(it.func) == "range" or kernel.is_tl(it.func, "range"))
                and len(it.args) == 3 and all(a.keyword is None and not a.star for a in it.args)):
            return False
        start, step = it.args[0].value, it.args[2].value
        if not ((int_value(start) == 0 or _product(kernel, start, extent))
                and (_same(step, extent) or _product(kernel, step, extent))):
            return False
    return True


def _multiple(kernel: Kernel, node: cst.BaseExpression, extent: cst.BaseExpression) -> bool:
    """Whether `node` is certain to be a multiple of the arange's extent P."""
    if _product(kernel, node, extent):
        return True
    if isinstance(node, cst.Name) and kernel.param(node.value) is None:
        values = kernel.scope.assigns.get(node.value, [])
        if values and all(v is not None and _product(kernel, v, extent) for v in values):
            return True
        return _stepped_by(kernel, node.value, extent)
    return False


def _arange_extent(kernel: Kernel, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """P for `tl.arange(0, P)` where P is a block-size constexpr or an integer literal."""
    if not (isinstance(node, cst.Call) and kernel.is_tl(node.func, "arange") and len(node.args) == 2
            and all(a.keyword is None and not a.star for a in node.args) and int_value(node.args[0].value) == 0):
        return None
    extent = node.args[1].value
    if isinstance(extent, cst.Name) and extent.value in facts_of(kernel).tile_sizes or int_value(extent) is not None:
        return extent
    return None


def _broadcast(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str]:
    """(`tl.arange(0, P)`, "[None, :]") for `tl.arange(0, P)[None, :]`, a vector broadcast to a row or a column
    (its values unchanged, only where they lie); (node, "") for anything else."""
    if isinstance(node, cst.Subscript) and all(
            isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"
            or isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None
            and e.slice.step is None for e in node.slice):
        return node.value, code(node)[len(code(node.value)):]
    return node, ""


def _hintable(kernel: Kernel, value: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """(P, the broadcast after it) where `value` is `M + tl.arange(0, P)` (either order) with M a multiple of P,
    the arange broadcast or not (`M + tl.arange(0, P)[None, :]` is `(M + tl.arange(0, P))[None, :]`, M a scalar)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return None
    for arange, start in ((value.right, value.left), (value.left, value.right)):
        arange, broadcast = _broadcast(arange)
        extent = _arange_extent(kernel, arange)
        if extent is not None and _multiple(kernel, start, extent) and (not broadcast or _scalar(kernel, start)):
            return extent, broadcast
    return None


def _hinted(tl: str, extent: str, broadcast: str):
    def edit(node: cst.BaseExpression) -> cst.BaseExpression:
        vector = code(node)
        if broadcast:  # the hints on the vector, then its broadcast: `M + tl.arange(0, P)[None, :]`
            left, right = (node.left, node.right)
            arange = right if code(right).endswith(broadcast) else left
            start = left if arange is right else right
            vector = f"{code(start)} + {code(arange)[:-len(broadcast)]}"
        return cst.parse_expression(f"{tl}.max_contiguous({tl}.multiple_of({vector}, {extent}), {extent}){broadcast}")
    return edit


def contiguity_hints(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        edits, names = [], []
        for assign in subnodes(kernel.node.body, cst.Assign):
            if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
                continue
            found = _hintable(kernel, assign.value)
            if found is not None:
                extent, broadcast = found
                edits.append((assign.value, _hinted(kernel.tl_name, code(extent), broadcast)))
                names.append(assign.targets[0].target.value)
        if not edits:
            reasons.append(f"{kernel.name} has no offsets `M + tl.arange(0, P)` whose start M is certain to be a multiple of P")
            continue
        variants.append(Variant("contiguity_hints", f"tl.max_contiguous(tl.multiple_of(..., P), P) on "
                                f"{', '.join(dict.fromkeys(names))} in {kernel.name}: P consecutive offsets from "
                                "a multiple of P", frozenset({kernel.name}), tuple(edits)))
    return Found(variants, reasons)
