"""What the lanes past a row's end hold, where one block of B >= n covers the row [0, n): the lanes n..B-1 that
a masked load leaves to its `other` value, followed through the kernel's arithmetic. A block of any size
computes the same row only where those lanes change nothing: masked off in every load and store along B,
and neutral in every reduction over B (0 in a sum, -inf in a max, +inf in a min, 0 on one side of a tl.dot).

A lane is past the end where its element index, the loop's offset plus the lane (`start + tl.arange(0, B)`,
`i * B + tl.arange(0, B)`, or a lane vector advanced by B each block), is at least n: a comparison
`index < n` (or `index - c < n`, `n > index`, `index <= n - 1`) is False there, whatever the names.

Values are followed in the canonical forms (`values`), so a value reads the same however it is spelled. Each
value's padding is a Python constant, UNIFORM (the value has no lanes along B: a scalar, a row of another
dimension), or UNKNOWN. Masked lanes without `other` hold zeros: Triton's lowering and its interpreter both
fill them so. A product with a zero is zero (the other factor is taken to be finite, as the original's own
last block takes it).
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Iterable

import libcst as cst

from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.peeled import entering
from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.syntax import assigned, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    call,
    factors,
    is_call,
    marker_arg,
    method_name,
    same,
    tl_name,
    var,
)

UNIFORM = "uniform"  # the value has no lanes along B
Place = tuple[Loop | None, int]  # where a value is read: the innermost loop around it, its place in source order
UNKNOWN = None
HINTS = ("multiple_of", "max_contiguous", "max_constancy")
UNARY = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2, "sqrt": math.sqrt,
         "abs": abs, "rsqrt": lambda x: 1 / math.sqrt(x), "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
         "erf": math.erf, "tanh": math.tanh, "sin": math.sin, "cos": math.cos, "floor": math.floor,
         "ceil": math.ceil, "log1p": math.log1p, "expm1": math.expm1, "sqrt_rn": math.sqrt}
NEUTRAL = {"sum": 0.0, "xor_sum": 0, "max": -math.inf, "argmax": -math.inf, "min": math.inf, "argmin": math.inf,
           "prod": 1.0}


def key(node: ast.AST) -> str:
    """A term's identity, the order of a product's factors and their broadcasts, hints and casts aside."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return "*".join(sorted(ast.dump(plain(f)) for f in factors(node)))
    return ast.dump(plain(node))


def plain(node: ast.AST) -> ast.AST:
    """A value without the broadcasts, hints and casts around it (they keep each element where it is)."""
    while True:
        if isinstance(node, ast.Subscript) and broadcast_subscript(node):
            node = node.value
        elif (tl_name(node) in HINTS or tl_name(node) == "cast") and node.args:
            node = node.args[0]
        elif method_name(node) == "to":
            node = node.func.value
        else:
            return node


def _safe(function, *args):
    try:
        return function(*args)
    except (ValueError, OverflowError, ZeroDivisionError, TypeError):
        return UNKNOWN


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Padding:
    """The padding of a kernel's values along B, for the loops that walk [0, end) by B (`loops`)."""

    def __init__(self, values: KernelValues, shapes: Shapes, param: str, loops: list[Loop], end: ast.expr,
                 offsets: dict[int, ast.expr], spans: dict[int, tuple[int, int]], empty: frozenset[int] = frozenset()
                 ) -> None:
        self.values, self.shapes, self.param, self.loops, self.end = values, shapes, param, loops, end
        self.empty = empty  # ids of the loops that run no block (`peeled`): what they carry passes them unchanged
        self.offsets = offsets  # id(loop.node) -> the canonical offset of its block
        self.spans = spans  # id(loop.node) -> its first and last place in the kernel's source order
        self.lane = key(call("__arange", ast.Constant(0), ast.Name(param, ast.Load())))
        self._memo: dict[tuple, object] = {}
        self._busy: set[tuple] = set()

    # -- the element index of a lane ----------------------------------------------------------------------
    def advanced(self, name: str) -> tuple[Loop, ast.expr] | None:
        """(loop, value before it) of a name one of the loops advances by exactly B a block (a lane vector or
        a block offset walking with the blocks)."""
        for loop in self.loops:
            carried = loop.carried.get(name)
            if carried is not None and carried.kind == "increment" and same(carried.term, ast.Name(self.param, ast.Load())):
                before = entering(self.values, loop.node, name, self.empty)
                if before is not None:
                    return loop, before
        return None

    def terms(self, node: ast.AST, sign: int = 1) -> tuple[Counter, float]:
        """The signed terms of a sum, broadcasts, hints and casts aside, and its constant part."""
        found: Counter = Counter()
        constant = 0.0
        pending = [(node, sign)]
        while pending:
            node, sign = pending.pop()
            if isinstance(node, ast.Constant) and _number(node.value):
                constant += sign * node.value
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
                pending += [(node.left, sign), (node.right, sign if isinstance(node.op, ast.Add) else -sign)]
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                pending.append((node.operand, -sign))
            elif isinstance(node, ast.Subscript) and broadcast_subscript(node):
                pending.append((node.value, sign))
            elif (tl_name(node) in HINTS or tl_name(node) == "cast") and node.args:
                pending.append((node.args[0], sign))
            elif method_name(node) == "to":
                pending.append((node.func.value, sign))
            elif is_call(node, "__var") and (walk := self.advanced(marker_arg(node))) is not None:
                pending += [(walk[1], sign), (self.offsets[id(walk[0].node)], sign)]
            else:
                found[key(node)] += sign
        return Counter({k: v for k, v in found.items() if v}), constant

    def bounds(self, compare: ast.Compare) -> bool:
        """Whether a comparison is False on every lane past the end of one of the loops' blocks."""
        if len(compare.ops) != 1:
            return False
        op, left, right = compare.ops[0], compare.left, compare.comparators[0]
        if isinstance(op, ast.Gt | ast.GtE):
            left, right = right, left
        elif not isinstance(op, ast.Lt | ast.LtE):
            return False
        got = _signed(self.terms(left), self.terms(right))
        for loop in self.loops:
            offset = self.offsets[id(loop.node)]
            want = _signed(_plus(self.terms(offset), (Counter({self.lane: 1}), 0.0)), self.terms(self.end))
            if got[0] == want[0]:
                slack = got[1] - want[1]  # index - end + slack < 0 (or <= 0)
                if slack >= 0 if isinstance(op, ast.Lt | ast.Gt) else slack > 0:
                    return True
        return False

    def lanes(self, node: ast.AST) -> bool:
        """Whether a value may have lanes along B: its shape says so, or, where its shape is not known, a part
        of it does (B itself, a tl.arange of B, a carried value of a shape with B or of no known shape)."""
        memo = ("lanes", ast.dump(node))
        if memo not in self._memo:
            shape = self.shapes.of(node) if isinstance(node, ast.expr) else None
            if shape is not None:
                found = self.param in shape
            elif isinstance(node, ast.Name):
                found = node.id == self.param
            elif is_call(node, "__var"):
                known = self.shapes.of_name(marker_arg(node))
                found = known is None or self.param in known
            else:
                found = any(self.lanes(child) for child in ast.iter_child_nodes(node)
                            if isinstance(child, ast.expr | ast.keyword))
            self._memo[memo] = found
        return self._memo[memo]

    # -- the padding of a value -----------------------------------------------------------------------------
    def of(self, node: ast.AST, where: Place = (None, 0)) -> object:
        """What the lanes past the end hold in `node`, evaluated where `where` (None: outside the loops)."""
        memo = (ast.dump(node), id(where[0]), where[1])
        if memo in self._memo:
            return self._memo[memo]
        if memo in self._busy:
            return UNKNOWN
        self._busy.add(memo)
        try:
            found = self._of(node, where)
        finally:
            self._busy.discard(memo)
        self._memo[memo] = found
        return found

    def _of(self, node: ast.AST, where: Place) -> object:  # noqa: C901 - one case per kind of value
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, int | float | bool) else UNKNOWN
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("float", "int") \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
            return _safe(float, node.args[0].value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):  # -float("inf") is a number
            inner = self.of(node.operand, where)
            if _number(inner):
                return -inner if isinstance(node.op, ast.USub) else inner
        if not self.lanes(node):
            return UNIFORM
        if isinstance(node, ast.Compare):
            if self.bounds(node):
                return False
            sides = [self.of(node.left, where), *(self.of(c, where) for c in node.comparators)]
            return _compare(node.ops, sides)
        if isinstance(node, ast.BoolOp):
            parts = [self.of(v, where) for v in node.values]
            return _logic(isinstance(node.op, ast.And), parts)
        if isinstance(node, ast.BinOp):
            return self._binary(node, where)
        if isinstance(node, ast.UnaryOp):
            operand = self.of(node.operand, where)
            if not isinstance(operand, int | float | bool):
                return UNKNOWN
            return {ast.USub: lambda x: -x, ast.UAdd: lambda x: x, ast.Not: lambda x: not x,
                    ast.Invert: lambda x: ~x if isinstance(x, int) else UNKNOWN}[type(node.op)](operand)
        if isinstance(node, ast.Subscript) and broadcast_subscript(node):
            return self.of(node.value, where)
        if method_name(node) == "to":
            return self.of(node.func.value, where)
        if is_call(node, "__var"):
            return self._carried(marker_arg(node), where)
        name = tl_name(node)
        if name is not None:
            return self._tl(name, node, where)
        return UNKNOWN

    def _binary(self, node: ast.BinOp, where: Place) -> object:
        left, right = self.of(node.left, where), self.of(node.right, where)
        if isinstance(node.op, ast.BitAnd | ast.BitOr):
            return _logic(isinstance(node.op, ast.BitAnd), [left, right])
        if isinstance(node.op, ast.Mult) and any(_number(v) and v == 0 for v in (left, right)):
            return 0.0
        if isinstance(node.op, ast.Add | ast.Sub) and UNIFORM in (left, right):  # a finite value moves no infinity
            known = left if right is UNIFORM else right
            if _number(known) and math.isinf(known):
                return known if left is known or isinstance(node.op, ast.Add) else -known
        if not (_number(left) or isinstance(left, bool)) or not (_number(right) or isinstance(right, bool)):
            return UNKNOWN
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b}
        op = ops.get(type(node.op))
        return _safe(op, left, right) if op else UNKNOWN

    def _tl(self, name: str, node: ast.Call, where: Place) -> object:  # noqa: C901
        args, keywords = node.args, {k.arg: k.value for k in node.keywords}
        if name == "load" and args:
            mask = keywords.get("mask", args[1] if len(args) > 1 else None)
            other = keywords.get("other", args[2] if len(args) > 2 else None)
            if mask is None and self.shapes.block_pointer(args[0]) is not None:
                return self.block_padding(node)
            if mask is None or self.of(mask, where) is not False:
                return UNKNOWN
            return self.of(other, where) if other is not None else 0.0
        if name == "where" and len(args) == 3:
            test = self.of(args[0], where)
            if test is False or test is True:
                return self.of(args[2] if test is False else args[1], where)
            a, b = self.of(args[1], where), self.of(args[2], where)
            return a if _number(a) and _number(b) and (a == b or (math.isnan(a) and math.isnan(b))) else UNKNOWN
        if name in ("maximum", "minimum") and len(args) == 2:
            a, b = self.of(args[0], where), self.of(args[1], where)
            return _safe(max if name == "maximum" else min, a, b) if _number(a) and _number(b) else UNKNOWN
        if name in UNARY and len(args) == 1:
            value = self.of(args[0], where)
            return _safe(UNARY[name], value) if _number(value) else UNKNOWN
        if name in ("zeros", "zeros_like"):
            return 0.0
        if name in ("full", "full_like"):
            value = keywords.get("value", args[1] if len(args) > 1 else None)
            return self.of(value, where) if value is not None else UNKNOWN
        if (name in HINTS or name in ("cast", "trans", "permute", "broadcast_to")) and args:
            return self.of(args[0], where)  # elements keep their lane
        if name == "fma" and len(args) == 3:
            a, b, c = (self.of(x, where) for x in args)
            if (_number(a) and a == 0) or (_number(b) and b == 0):
                return c
            return _safe(lambda x, y, z: x * y + z, a, b, c) if all(map(_number, (a, b, c))) else UNKNOWN
        if name == "dot" and len(args) >= 2:  # B along the rows of a or the columns of b: those rows are a's
            a, b = (self.shapes.of(x) for x in args[:2])
            if a is not None and a[:1] == (self.param,) and self.of(args[0], where) == 0:
                return 0.0
            if b is not None and b[-1:] == (self.param,) and self.of(args[1], where) == 0:
                return 0.0
        return UNKNOWN

    # -- block pointers -----------------------------------------------------------------------------------
    def block_bounded(self, access: ast.Call) -> bool:
        """Whether a tl.load / tl.store through a block pointer touches nothing past the end along B: the
        pointer's dimension of extent B starts at a block's offset (made there, or made at 0 and advanced by B
        a block), its shape there is the end, and the access checks that dimension's boundary."""
        if not access.args:
            return False
        pointer = access.args[0]
        fields = block_fields(self.shapes.block_pointer(pointer))
        if fields is None:
            return False
        dims = [i for i, d in enumerate(fields["block_shape"]) if same(d, ast.Name(self.param, ast.Load()))]
        if len(dims) != 1 or len(fields["shape"]) != len(fields["block_shape"]):
            return False
        [dim] = dims
        check = _keyword(access, "boundary_check", 3)
        checked = {e.value for e in check.elts if isinstance(e, ast.Constant)} if isinstance(
            check, ast.Tuple | ast.List) else {check.value} if isinstance(check, ast.Constant) else set()
        if dim not in checked or self.terms(fields["shape"][dim]) != self.terms(self.end):
            return False
        start = self.terms(fields["offsets"][dim])
        if any(start == self.terms(self.offsets[id(loop.node)]) for loop in self.loops):
            return not is_call(pointer, "__var")  # made at the block's offset, not advanced
        if start != (Counter(), 0.0) or not is_call(pointer, "__var"):
            return False
        for loop in self.loops:  # made at 0, advanced by exactly one block along B
            carried = loop.carried.get(marker_arg(pointer))
            if carried is not None and carried.kind == "increment" and isinstance(carried.term, ast.Tuple | ast.List):
                steps = carried.term.elts
                return len(steps) == len(fields["shape"]) and all(
                    same(s, ast.Name(self.param, ast.Load())) if i == dim else isinstance(s, ast.Constant) and s.value == 0
                    for i, s in enumerate(steps))
        return False

    def block_padding(self, load: ast.Call) -> object:
        if not self.block_bounded(load):
            return UNKNOWN
        option = _keyword(load, "padding_option", 4)
        return math.nan if isinstance(option, ast.Constant) and option.value == "nan" else 0.0

    # -- values carried from block to block ---------------------------------------------------------------
    def loop_of(self, name: str, where: Place) -> tuple[Loop | None, bool]:
        """(the loop whose value of `name` a read at `where` sees, whether the read is inside that loop): the
        innermost loop around the read that carries it, else the last loop before the read that does."""
        mine = [loop for loop in self.loops if name in loop.carried]
        loop = where[0]
        while loop is not None:
            if any(m is loop for m in mine):
                return loop, True
            loop = loop.parent
        before = [m for m in mine if self.spans[id(m.node)][1] < where[1]]
        return (max(before, key=lambda m: self.spans[id(m.node)][1]), False) if before else (None, False)

    def _carried(self, name: str, where: Place) -> object:
        shape = self.shapes.of_name(name)
        if shape is not None and self.param not in shape:
            return UNIFORM
        loop, within = self.loop_of(name, where)
        if loop is not None and within:  # the value the only block starts from
            before = entering(self.values, loop.node, name, self.empty)
            return self.of(before, (loop.parent, self.spans[id(loop.node)][0])) if before is not None else UNKNOWN
        if loop is not None:  # after the one block
            return self._agree(self.finals(loop, name), (loop, self.spans[id(loop.node)][1]))
        values = [v for v in self.values.kernel.scope.assigns.get(name, [])]
        if not values or any(v is None for v in values):
            return UNKNOWN
        return self._agree((self.values.expand(v) for v in values), where)

    def _agree(self, values: Iterable[ast.expr], where: Place) -> object:
        found = [self.of(v, where) for v in values]
        if found and all(_number(f) or isinstance(f, bool) for f in found) and all(f == found[0] for f in found):
            return found[0]
        return UNKNOWN

    def finals(self, loop: Loop, name: str) -> list[ast.expr]:
        """The values `name` may hold at the end of one pass of the loop's body: the last top-level statement
        that assigns it, or every assignment of it where that statement where it is compound."""
        last = next((s for s in reversed(loop.body) if name in assigned(s)), None)
        if last is None:
            return []
        out = []
        for small in subnodes(last, cst.Assign) + subnodes(last, cst.AugAssign) + subnodes(last, cst.AnnAssign):
            if isinstance(small, cst.AugAssign):
                if isinstance(small.target, cst.Name) and small.target.value == name:
                    current = self.values.env_at(small).get(name, var(name))
                    op = {cst.AddAssign: ast.Add, cst.SubtractAssign: ast.Sub, cst.MultiplyAssign: ast.Mult,
                          cst.DivideAssign: ast.Div}.get(type(small.operator))
                    out.append(ast.BinOp(current, op(), self.values.expand(small.value)) if op else var(name))
            elif name in assigned(small) and small.value is not None:
                targets = small.targets if isinstance(small, cst.Assign) else []
                if isinstance(small, cst.AnnAssign) or (len(targets) == 1 and isinstance(targets[0].target, cst.Name)):
                    out.append(self.values.expand(small.value))
                else:
                    out.append(var("?"))  # a tuple target: not followed
        return out

    # -- reductions ---------------------------------------------------------------------------------------
    def neutral(self, reduction: str, operand: ast.AST, where: Place) -> str:
        """Why the lanes past the end change a reduction of `operand` over B ("" where they do not)."""
        value = self.of(operand, where)
        if value is UNIFORM:
            return ""
        if reduction not in NEUTRAL:
            return f"tl.{reduction} combines the lanes past the end by a function the analysis does not know"
        if value is UNKNOWN:
            return f"the lanes past the end of tl.{reduction}'s operand hold values the analysis cannot tell"
        want = NEUTRAL[reduction]
        if _number(value) and (value == want or (reduction in ("max", "argmax") and value == 0
                                                 and self.nonnegative(operand))):
            return ""
        return f"the lanes past the end add {value!r} to a tl.{reduction}"

    def nonnegative(self, node: ast.AST) -> bool:
        name = tl_name(node)
        if name in ("abs", "exp", "exp2", "sqrt", "sqrt_rn", "sigmoid"):
            return True
        if name == "maximum" and len(node.args) == 2:
            return any(self.nonnegative(a) for a in node.args)
        if method_name(node) == "to":
            return self.nonnegative(node.func.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return same(node.left, node.right) or all(self.nonnegative(f) for f in (node.left, node.right))
        return isinstance(node, ast.Constant) and _number(node.value) and node.value >= 0


def block_fields(made: ast.Call | None) -> dict[str, list[ast.expr]] | None:
    """shape, offsets and block_shape of a canonical `tl.make_block_ptr(...)`, each a list of dimensions."""
    if made is None:
        return None
    found = {}
    for index, name in ((1, "shape"), (3, "offsets"), (4, "block_shape")):
        value = _keyword(made, name, index)
        if not isinstance(value, ast.Tuple | ast.List):
            return None
        found[name] = list(value.elts)
    return found


def _keyword(node: ast.Call, name: str, position: int) -> ast.expr | None:
    """A canonical call's argument by keyword, else by position."""
    value = next((k.value for k in node.keywords if k.arg == name), None)
    return value if value is not None or len(node.args) <= position else node.args[position]


def broadcast_subscript(node: ast.Subscript) -> bool:
    """`x[:, None]`, `x[None, :]`: a new axis, elements in place."""
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return all((isinstance(p, ast.Constant) and p.value is None)
               or (isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None) for p in parts)


def _plus(a: tuple[Counter, float], b: tuple[Counter, float]) -> tuple[Counter, float]:
    total = Counter(a[0])
    total.update(b[0])
    return total, a[1] + b[1]


def _signed(a: tuple[Counter, float], b: tuple[Counter, float]) -> tuple[dict, float]:
    """a - b as {term: coefficient} without zeros, and its constant."""
    total = Counter(a[0])
    total.subtract(b[0])
    return {k: v for k, v in total.items() if v}, a[1] - b[1]


def _compare(ops: list[ast.cmpop], sides: list[object]) -> object:
    if not all(_number(s) or isinstance(s, bool) for s in sides):
        return UNKNOWN
    table = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
             ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
    result = True
    for op, a, b in zip(ops, sides, sides[1:]):
        test = table.get(type(op))
        if test is None:
            return UNKNOWN
        result = result and test(a, b)
    return result


def _logic(conjunction: bool, parts: list[object]) -> object:
    decisive = not conjunction  # False decides a conjunction, True a disjunction
    if any(p is decisive for p in parts):
        return decisive
    if all(isinstance(p, bool) for p in parts):
        return all(parts) if conjunction else any(parts)
    return UNKNOWN
