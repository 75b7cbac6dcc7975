"""The loops of a kernel: what each steps over and by how much, and what it carries from one iteration to the
next, in any of the forms a kernel may take:

    for start in range(0, n, BLOCK):                 start 0, end n, block BLOCK
    for i in range(tl.cdiv(n, BLOCK)):               start 0, end n, block BLOCK (offsets i * BLOCK)
    for i in tl.range(0, n, BLOCK, num_stages=3):    as range
    start = 0                                         start 0, end n, block BLOCK
    while start < n:
        ...
        start += BLOCK

A carried value is a name the body assigns and reads before assigning it (or that code after the loop reads):
a running maximum (`m = tl.maximum(m, ...)`), a running sum (`acc += ...`, `acc = acc + tl.dot(a, b)`,
`acc = tl.dot(a, b, acc)`), a fixed increment (`ptrs += BLOCK * stride`, loop-invariant), or anything else.
Its shape says whether it is a scalar or a tile.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.syntax import arg_of, assigned, code, dotted, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    add_terms,
    carried,
    factors,
    is_call,
    loop_vars,
    marker_arg,
    names_in,
    same,
    tl_name,
)

RANGES = ("range", "static_range")


@dataclass(eq=False)
class Carried:
    name: str
    kind: str  # "max", "min", "sum", "increment", "other"
    update: ast.expr | None  # the canonical value it is assigned (one assignment), else None
    term: ast.expr | None  # for max/min/sum/increment: what is combined into it each iteration
    shape: tuple[str, ...] | None  # () a scalar; None unknown


@dataclass(eq=False)
class Loop:
    node: cst.For | cst.While = field(repr=False)
    var: str | None
    start: ast.expr | None  # canonical forms; None where not known
    end: ast.expr | None
    step: ast.expr | None  # how the variable advances each iteration
    block: frozenset[str]  # constexprs the loop advances by (its step, `i * BLOCK` offsets, `p += BLOCK * s`)
    form: str  # "range", "cdiv" (range over block indices), "while", "other"
    exits: bool  # break, continue or return in the body
    parent: Loop | None
    carried: dict[str, Carried] = field(default_factory=dict)
    fixed: frozenset[int] = frozenset()  # integers the source fixes that it advances by, in the places of `block`

    @property
    def body(self) -> list[cst.BaseStatement]:
        return list(self.node.body.body)

    @property
    def top_level(self) -> bool:
        return self.parent is None


class Loops:
    """Every loop of one kernel, outermost first, and the facts above about each."""

    def __init__(self, values: KernelValues, shapes: Shapes) -> None:
        self.values, self.shapes = values, shapes
        self.kernel = values.kernel

    @cached_property
    def all(self) -> list[Loop]:
        found: list[Loop] = []
        self._walk(self.kernel.node.body.body, None, found)
        return found

    def of(self, node: cst.CSTNode) -> Loop | None:
        return next((loop for loop in self.all if loop.node is node), None)

    def stepping(self, param: str) -> list[Loop]:
        return [loop for loop in self.all if param in loop.block]

    def _walk(self, body, parent: Loop | None, found: list[Loop]) -> None:
        for index, statement in enumerate(body):
            if isinstance(statement, cst.For | cst.While):
                loop = self._loop(statement, parent, body[:index])
                found.append(loop)
                self._walk(statement.body.body, loop, found)
            elif isinstance(statement, cst.If):
                self._walk(statement.body.body, parent, found)
                orelse = statement.orelse
                while orelse is not None:
                    self._walk(orelse.body.body, parent, found)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
            elif isinstance(statement, cst.With):
                self._walk(statement.body.body, parent, found)

    def _loop(self, node: cst.For | cst.While, parent: Loop | None, before: list) -> Loop:
        expand = self.values.expand
        exits = bool(subnodes(node.body, cst.Break) or subnodes(node.body, cst.Continue)
                     or subnodes(node.body, cst.Return))
        var = start = end = step = None
        form = "other"
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and isinstance(node.iter, cst.Call) \
                and (dotted(node.iter.func) == "range" or self.kernel.is_tl(node.iter.func, "range")
                     or self.kernel.is_tl(node.iter.func, "static_range")):
            var = node.target.value
            args = [a.value for a in node.iter.args if a.keyword is None and not a.star]
            if 1 <= len(args) <= 3:
                start = expand(args[0]) if len(args) > 1 else ast.Constant(0)
                end = expand(args[-1] if len(args) == 1 else args[1])
                step = expand(args[2]) if len(args) == 3 else ast.Constant(1)
                form = "range"
                if same(step, ast.Constant(1)) and tl_name(end) == "cdiv" and len(end.args) == 2 \
                        and same(start, ast.Constant(0)):
                    form, end = "cdiv", end.args[0]
        elif isinstance(node, cst.While):
            var, start, end, step = self._while(node, before)
            form = "while" if var is not None else "other"
        loop = Loop(node, var, start, end, step, frozenset(), form, exits, parent)
        advances = self._block(loop)
        loop.block = frozenset(n for n in advances if isinstance(n, str))
        loop.fixed = frozenset(n for n in advances if isinstance(n, int))
        loop.carried = self._carried(loop)
        return loop

    def _while(self, node: cst.While, before: list) -> tuple:
        """(variable, start, end, step) of `while v < end:` whose body ends `v += step`."""
        test = node.test
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.LessThan) and isinstance(test.left, cst.Name)):
            return None, None, None, None
        var = test.left.value
        steps = [step for s in node.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                 for step in [_added(s.body[0], var)] if step is not None]
        if len(steps) != 1 or sum(var in assigned(s) for s in node.body.body) != 1:
            return None, None, None, None
        inits = [s for s in before if var in assigned(s)]
        init = None
        if inits and isinstance(inits[-1], cst.SimpleStatementLine) and isinstance(inits[-1].body[0], cst.Assign):
            init = self.values.expand(inits[-1].body[0].value)
        return var, init, self.values.expand(test.comparisons[0].comparator), self.values.expand(steps[0])

    def _block(self, loop: Loop) -> set[str | int]:
        """What the loop advances by: the constexprs, and the integers the source fixes (`KernelValues.integer`:
        a literal, a local bound once, a module constant), in its step, the divisor of its count, a product with
        its variable, or a factor of a pointer's increment."""
        constexprs = set(self.values.constexpr_names)

        def sizes(node: ast.expr, whole: bool = False) -> set[str | int]:
            found: set[str | int] = names_in(node) & constexprs if whole else (
                {node.id} & constexprs if isinstance(node, ast.Name) else set())
            integer = self.values.integer(node)
            return found | ({integer} if integer is not None else set())

        found: set[str | int] = set()
        if loop.step is not None:
            found |= sizes(loop.step, whole=True)
        if loop.form == "cdiv":
            found |= sizes(self.values.expand(loop.node.iter.args[-1].value).args[1], whole=True)
        if loop.var is not None and loop.form in ("range", "cdiv"):
            marker = f"__loop('{loop.var}')"
            for node in self._body_expressions(loop):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult):
                        parts = factors(sub)
                        if any(ast.unparse(f) == marker for f in parts):
                            found |= {n for f in parts for n in sizes(f)}
        for carried_value in self._increments(loop):
            for term in add_terms(carried_value):
                found |= {n for f in factors(term) for n in sizes(f)}
        return found

    def _body_expressions(self, loop: Loop) -> list[ast.expr]:
        out = []
        for statement in loop.node.body.body:
            for small in subnodes(statement, cst.Assign) + subnodes(statement, cst.AugAssign):
                out.append(self.values.expand(small.value))
            for c in subnodes(statement, cst.Call):
                if self.kernel.is_tl(c.func, "load") or self.kernel.is_tl(c.func, "store"):
                    out.extend(self.values.expand(a.value) for a in c.args)
        return out

    def _increments(self, loop: Loop) -> list[ast.expr]:
        """The loop-invariant increments of names the body advances (`p += E`, `p = p + E`, `p = tl.advance(p,
        (0, E))`)."""
        out = []
        inside = assigned(loop.node.body) | ({loop.var} if loop.var else set())
        for statement in loop.node.body.body:
            if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
                continue
            small = statement.body[0]
            term = None
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
                term = small.value
            elif isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = dotted(small.targets[0].target), small.value
                if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) \
                        and dotted(value.left) == target:
                    term = value.right
                elif isinstance(value, cst.Call) and self.kernel.is_tl(value.func, "advance") \
                        and value.args and dotted(value.args[0].value) == target:
                    term = arg_of(value, 1, "offsets")
            if term is not None and not ({n.value for n in loads(term)} & inside):
                out.append(self.values.expand(term))
        return out

    def _carried(self, loop: Loop) -> dict[str, Carried]:
        body = loop.node.body
        inside = assigned(body)
        found: dict[str, Carried] = {}
        for name in sorted(inside - ({loop.var} if loop.var else set())):
            if not self._read_before_written(loop, name):
                continue
            found[name] = self._kind(loop, name)
        return found

    def _read_before_written(self, loop: Loop, name: str) -> bool:
        return _first_use(loop.node.body.body, name)[0]

    def _taken(self, statements: list) -> list:
        """The statements that run in this specialization: a compile-time branch (`values.choices`) gives way to
        the statements of the arm it takes."""
        found = []
        for statement in statements:
            choice = self.values.choices.get(id(statement)) if isinstance(statement, cst.If) else None
            if choice is None:
                found.append(statement)
            elif choice == 0:
                found += self._taken(list(statement.body.body))
            elif isinstance(statement.orelse, cst.If):
                found += self._taken([statement.orelse])
            elif statement.orelse is not None:
                found += self._taken(list(statement.orelse.body.body))
        return found

    def _kind(self, loop: Loop, name: str) -> Carried:
        writes = [s for s in self._taken(list(loop.node.body.body)) if name in assigned(s)]
        shape = self.shapes.of_name(name)
        if len(writes) == 1 and isinstance(writes[0], cst.If):  # a sum that some branches add to
            adds = [a for a in subnodes(writes[0], cst.AugAssign) if dotted(a.target) == name]
            if adds and len(adds) == len([a for a in subnodes(writes[0], cst.CSTNode) if isinstance(
                    a, cst.Assign | cst.AugAssign | cst.AnnAssign) and name in assigned(a)]) \
                    and all(isinstance(a.operator, cst.AddAssign) for a in adds):
                terms = [self.values.expand(a.value) for a in adds]
                if all(self._sum_or_increment(loop, t) == "sum" for t in terms):
                    return Carried(name, "sum", None, terms[0] if len(terms) == 1 else None, shape)
        if len(writes) != 1 or not (isinstance(writes[0], cst.SimpleStatementLine) and len(writes[0].body) == 1):
            return Carried(name, "other", None, None, shape)
        small = writes[0].body[0]
        me = f"__var('{name}')"
        if isinstance(small, cst.AugAssign):
            term = self.values.expand(small.value)
            if isinstance(small.operator, cst.AddAssign):
                return Carried(name, self._sum_or_increment(loop, term), None, term, shape)
            return Carried(name, "other", None, None, shape)
        if not isinstance(small, cst.Assign):
            return Carried(name, "other", None, None, shape)
        update = self.values.expand(small.value)
        kind, term = "other", None
        if isinstance(update, ast.BinOp) and isinstance(update.op, ast.Add):
            terms = add_terms(update)
            mine = [t for t in terms if ast.unparse(t) == me]
            if len(mine) == 1:
                rest = [t for t in terms if t is not mine[0]]
                term = rest[0] if len(rest) == 1 else ast.BinOp(rest[0], ast.Add(), rest[1])
                for extra in rest[2:]:
                    term = ast.BinOp(term, ast.Add(), extra)
                kind = self._sum_or_increment(loop, term)
        elif (picked := extremum(update)) is not None:
            args = [ast.unparse(a) for a in picked[1]]
            if args.count(me) == 1:
                term = picked[1][1 - args.index(me)]
                kind = "max" if picked[0] == "maximum" else "min"
        elif tl_name(update) == "dot":
            acc = update.args[2] if len(update.args) > 2 else next(
                (k.value for k in update.keywords if k.arg == "acc"), None)
            if acc is not None and ast.unparse(acc) == me:
                kind, term = "sum", ast.Call(update.func, update.args[:2], [])
        elif tl_name(update) == "advance" and update.args and ast.unparse(update.args[0]) == me:
            offsets = update.args[1] if len(update.args) > 1 else next(
                (k.value for k in update.keywords if k.arg == "offsets"), None)
            kind, term = ("increment", offsets) if offsets is not None else ("other", None)
        if term is not None and me in ast.unparse(term):
            kind = "other"
        return Carried(name, kind, update, term, shape)

    def _sum_or_increment(self, loop: Loop, term: ast.expr) -> str:
        if carried(term) or loop_vars(term) or any(is_call(n, "__var") for n in ast.walk(term)):
            return "sum"
        if any(tl_name(n) == "load" for n in ast.walk(term)):
            return "sum"
        return "increment"


def _added(small: cst.BaseSmallStatement, var: str) -> cst.BaseExpression | None:
    """E of `var += E`, `var = var + E` or `var = E + var` (E not reading var): one step of a counted loop."""
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and dotted(small.target) == var:
        return small.value
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted(small.targets[0].target) == var
            and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Add)):
        return None
    left, right = small.value.left, small.value.right
    for mine, step in ((left, right), (right, left)):
        if dotted(mine) == var and var not in {n.value for n in loads(step)}:
            return step
    return None


def extremum(node: ast.expr) -> tuple[str, list[ast.expr]] | None:
    """("maximum" or "minimum", its two operands) for tl.maximum(a, b) and tl.minimum(a, b), and for a select
    that picks the larger or the smaller of two values: tl.where(a > b, a, b) is max(a, b), as is
    tl.where(b < a, a, b); tl.where(a < b, a, b) is min(a, b)."""
    if tl_name(node) in ("maximum", "minimum") and len(node.args) == 2:
        return tl_name(node), list(node.args)
    if tl_name(node) != "where" or len(node.args) != 3 or node.keywords:
        return None
    test, a, b = node.args
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Gt | ast.GtE | ast.Lt | ast.LtE)):
        return None
    left, right, first, second = (ast.dump(n) for n in (test.left, test.comparators[0], a, b))
    if (left, right) not in ((first, second), (second, first)) or first == second:
        return None
    larger = isinstance(test.ops[0], ast.Gt | ast.GtE) == (left == first)  # the test holds where a is the larger
    return ("maximum" if larger else "minimum"), [a, b]


def _first_use(statements: list, name: str) -> tuple[bool, bool]:
    """(whether the statements may read `name` before they assign it, whether they assign it on every path)."""
    for statement in statements:
        if isinstance(statement, cst.If):
            branches, node = [], statement
            while isinstance(node, cst.If):
                if name in {n.value for n in loads(node.test)}:
                    return True, False
                branches.append(node.body.body)
                node = node.orelse
            if node is not None:
                branches.append(node.body.body)
            found = [_first_use(branch, name) for branch in branches]
            if any(read for read, _ in found):
                return True, False
            if node is not None and all(assigns for _, assigns in found):
                return False, True
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                reads = {n.value for n in loads(small)}
                writes = assigned(small)
                if isinstance(small, cst.AugAssign):
                    reads |= writes
                if name in reads:
                    return True, False
                if name in writes:
                    return False, True
        elif name in {n.value for n in loads(statement)}:
            return True, False
    return False, False


def loop_index(loop: Loop) -> str | None:
    """The variable name of a counted loop, as the canonical forms write it."""
    return f"__loop('{loop.var}')" if loop.var is not None and loop.form in ("range", "cdiv") else None


def marker_names(node: ast.AST, marker: str) -> set:
    return {marker_arg(n) for n in ast.walk(node) if is_call(n, marker)}


__all__ = ["Carried", "Loop", "Loops", "loop_index", "code"]


def carried_increment(loop: Loop, name: str) -> tuple[str, str] | None:
    """("add", E) for `name += E` / `name = name + E`, ("advance", OFFSETS) for `name = tl.advance(name, OFFSETS)`:
    the code of one step of a carried increment, as the loop body writes it."""
    for statement in loop.node.body.body:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        small = statement.body[0]
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
                and dotted(small.target) == name:
            return "add", code(small.value)
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted(small.targets[0].target) == name:
            value = small.value
            if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) \
                    and dotted(value.left) == name:
                return "add", code(value.right)
            if isinstance(value, cst.Call) and (dotted(value.func) or "").endswith("advance") and value.args:
                offsets = arg_of(value, 1, "offsets")
                # a split scales each offset by the steps it skips: they must be written out, one per axis
                return ("advance", code(offsets)) if isinstance(offsets, cst.Tuple | cst.List) else None
    return None
