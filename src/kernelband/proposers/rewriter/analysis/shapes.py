"""The tile shape of each value of a kernel, in terms of what sizes it: `tl.arange(0, BLOCK_M)` is (BLOCK_M,),
`offs_m[:, None] * s + offs_k[None, :]` is (BLOCK_M, BLOCK_K), a `tl.dot` of (M, K) and (K, N) tiles is (M, N),
`tl.sum(x, axis=1)` drops the second dimension, a program id or a parameter is a scalar, (). A dimension is the
code of its extent (a constexpr's name or a number); "1" is a broadcast dimension. None: not known.
"""

from __future__ import annotations

import ast
from functools import cached_property

from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    is_call,
    marker_arg,
    method_name,
    tl_name,
)

Shape = tuple[str, ...]

ELEMENTWISE_TL = frozenset({
    "where", "maximum", "minimum", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "sigmoid",
    "sin", "cos", "erf", "floor", "ceil", "fma", "fdiv", "div_rn", "clamp", "multiple_of", "max_contiguous",
    "max_constancy", "cast", "softmax", "umulhi", "tanh", "log1p", "expm1", "cdiv", "randn", "rand", "randint",
    "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or",
    "atomic_xor", "libdevice", "fast_expf", "fast_dividef", "zeros_like", "full_like", "erfinv", "pow",
})
REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "prod"})
SCANS = frozenset({"cumsum", "cumprod", "associative_scan", "sort", "flip"})
BUILTINS = frozenset({"min", "max", "abs", "int", "float"})
HINTS = frozenset({"multiple_of", "max_contiguous", "max_constancy"})


def broadcast(*shapes: Shape | None) -> Shape | None:
    known = [s for s in shapes if s is not None]
    if len(known) != len(shapes):
        return None
    rank = max((len(s) for s in known), default=0)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in known if len(s) - rank + i >= 0]
        real = [d for d in dims if d != "1"]
        out.append(real[0] if real else "1")
    return tuple(out)


def dims_of(node: ast.AST) -> Shape | None:
    """The dimensions of a shape argument: `(BLOCK_M, BLOCK_N)`, `[BLOCK]`."""
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(ast.unparse(e) for e in node.elts)
    if isinstance(node, ast.Name | ast.Constant):
        return (ast.unparse(node),)
    return None


def _axis(node: ast.Call, position: int) -> int | None | str:
    """The reduction axis argument: an int, None (all), or "?" where not a literal."""
    value = node.args[position] if len(node.args) > position else next(
        (k.value for k in node.keywords if k.arg == "axis"), ast.Constant(None))
    if isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, int)):
        return value.value
    return "?"


class Shapes:
    """Shape inference over one kernel's canonical forms."""

    def __init__(self, values: KernelValues) -> None:
        self.values = values
        self.kernel = values.kernel
        self._names: dict[str, Shape | None] = {}

    def of_name(self, name: str) -> Shape | None:
        if name not in self._names:
            self._names[name] = None  # a cycle is unknown
            definition = self.values.definition(name)
            self._names[name] = self.of(definition) if definition is not None else (
                () if self.values.is_param(name) else None)
        return self._names[name]

    @cached_property
    def params(self) -> set[str]:
        return self.values.param_names

    def of(self, node: ast.AST) -> Shape | None:  # noqa: C901 - one case per kind of expression
        if isinstance(node, ast.Constant):
            return ()
        if isinstance(node, ast.Name):
            return () if node.id in self.params or node.id not in self.kernel.scope.assigns else self.of_name(node.id)
        if is_call(node, "__pid") or is_call(node, "__nprog") or is_call(node, "__loop"):
            return ()
        if is_call(node, "__var"):
            return self.of_name(marker_arg(node))
        if is_call(node, "__arange"):
            start, end = node.args
            extent = ast.unparse(end) if isinstance(start, ast.Constant) and start.value == 0 else \
                ast.unparse(ast.BinOp(end, ast.Sub(), start))
            return (extent,)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.BinOp):
            return broadcast(self.of(node.left), self.of(node.right))
        if isinstance(node, ast.UnaryOp):
            return self.of(node.operand)
        if isinstance(node, ast.Compare):
            return broadcast(self.of(node.left), *[self.of(c) for c in node.comparators])
        if isinstance(node, ast.BoolOp):
            return broadcast(*[self.of(v) for v in node.values])
        if isinstance(node, ast.IfExp):
            return broadcast(self.of(node.body), self.of(node.orelse))
        if isinstance(node, ast.Attribute):  # `x.T` is tl.trans(x): its dimensions reversed
            if node.attr != "T":
                return ()
            inner = self.of(node.value)
            return tuple(reversed(inner)) if inner is not None else None
        name = tl_name(node)
        if name is not None:
            return self._tl(name, node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS:
            return broadcast(*[self.of(a) for a in node.args])
        method = method_name(node)
        if method == "load" and tl_name(node.func.value) in ("make_tensor_descriptor",
                                                              "_experimental_make_tensor_descriptor"):
            made = node.func.value  # a tensor descriptor's load: one block of its block_shape
            shape = next((k.value for k in made.keywords if k.arg == "block_shape"),
                         made.args[3] if len(made.args) > 3 else None)
            return dims_of(shape) if shape is not None else None
        if method in ("to", "cast"):
            return self.of(node.func.value)
        if method == "trans" or method == "permute":
            inner = self.of(node.func.value)
            return tuple(reversed(inner)) if inner is not None else None
        return None

    def _subscript(self, node: ast.Subscript) -> Shape | None:
        inner = self.of(node.value)
        if inner is None:
            return None
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out, dims = [], list(inner)
        for part in parts:
            if isinstance(part, ast.Constant) and part.value is None:
                out.append("1")
            elif isinstance(part, ast.Slice) and part.lower is None and part.upper is None:
                if not dims:
                    return None
                out.append(dims.pop(0))
            else:
                return None
        return tuple(out + dims)

    def _tl(self, name: str, node: ast.Call) -> Shape | None:  # noqa: C901
        args = node.args
        keywords = {k.arg: k.value for k in node.keywords}
        if name in ("load",):
            pointer = args[0] if args else keywords.get("pointer")
            return self.pointer_shape(pointer) if pointer is not None else None
        if name in ("zeros", "full", "empty"):
            shape = args[0] if args else keywords.get("shape")
            return dims_of(shape) if shape is not None else None
        if name in ("make_block_ptr",):
            return ()  # a block pointer is a scalar handle; what it loads has its block_shape
        if name in ("advance", "make_tensor_descriptor"):
            return ()
        if name in REDUCTIONS:
            inner = self.of(args[0]) if args else None
            axis = _axis(node, 1)
            if inner is None or axis == "?":
                return None
            keep = keywords.get("keep_dims", keywords.get("keepdims"))
            kept = isinstance(keep, ast.Constant) and keep.value is True  # the reduced dimension stays, of 1
            if axis is None:
                return tuple("1" for _ in inner) if kept else ()
            if not -len(inner) <= axis < len(inner):
                return None
            if kept:
                return tuple("1" if i == axis % len(inner) else d for i, d in enumerate(inner))
            return tuple(d for i, d in enumerate(inner) if i != axis % len(inner))
        if name in SCANS:
            return self.of(args[0]) if args else None
        if name == "dot" or name == "dot_scaled":
            a, b = (self.of(x) for x in args[:2]) if len(args) >= 2 else (None, None)
            if a is None or b is None or len(a) != 2 or len(b) != 2:
                return None
            return (a[0], b[1])
        if name in ("trans", "permute"):
            inner = self.of(args[0]) if args else None
            return tuple(reversed(inner)) if inner is not None else None
        if name in ("reshape", "view", "broadcast_to"):
            shape = args[1] if len(args) > 1 else keywords.get("shape")
            return dims_of(shape) if shape is not None else None
        if name == "expand_dims":
            inner = self.of(args[0]) if args else None
            axis = _axis(node, 1)
            if inner is None or not isinstance(axis, int):
                return None
            dims = list(inner)
            dims.insert(axis if axis >= 0 else len(dims) + 1 + axis, "1")
            return tuple(dims)
        if name in ELEMENTWISE_TL or name in HINTS:
            return broadcast(*[self.of(a) for a in args])
        if name in ("float32", "float16", "bfloat16", "int32", "int64"):
            return ()
        return None

    def pointer_shape(self, pointer: ast.AST) -> Shape | None:
        """What a load or store through this pointer holds: a block pointer's block_shape, else the pointer
        tile's own shape."""
        made = self.block_pointer(pointer)
        if made is not None:
            shape = next((k.value for k in made.keywords if k.arg == "block_shape"),
                         made.args[4] if len(made.args) > 4 else None)
            return dims_of(shape) if shape is not None else None
        return self.of(pointer)

    def block_pointer(self, pointer: ast.AST) -> ast.Call | None:
        """The `tl.make_block_ptr(...)` a pointer is (through tl.advance and a carried local's first value)."""
        seen = 0
        while seen < 8:
            seen += 1
            if tl_name(pointer) == "make_block_ptr":
                return pointer
            if tl_name(pointer) == "advance" and pointer.args:
                pointer = pointer.args[0]
                continue
            if is_call(pointer, "__var"):
                pointer = self.values.definition(marker_arg(pointer))
                if pointer is None:
                    return None
                continue
            return None
        return None
