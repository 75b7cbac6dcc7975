"""The row reductions of a kernel, found by what they compute: every max, min and sum over a tile dimension
(`tl.max(x, 1)`) or over the iterations of a loop (a running value, `m = tl.maximum(m, tl.max(x, 0))` or
`acc = tl.maximum(acc, x)` then `tl.max(acc, 0)`), and the exp/exp2 and log chains built on them.

A *softmax reduction* is a max M of a row's values x followed by a sum of exp(c * (g - M)) (or exp2) over the
same row, c free of M and g computed from the same x: `exp(x - m)`, `exp2((x - m) * log2e)`, `exp(x - m + mask)`,
with the max subtracted first or inline.
It comes in three forms:

    one_block   one block holds the row: m = tl.max(x, 1); s = tl.sum(tl.exp(x - m[:, None]), 1)
    two_pass    a loop finds the max, a later loop over the same row sums exp(x - max) (scalar or lane-wise
                running values, for / while / range over cdiv)
    online      one loop keeps a running max and rescales the sum as it grows (flash attention): what the
                other two become; a kernel with it is not a target

`exponent_of` says whether a value is exp/exp2 of an affine function of the max, and with what scale, so that
a rewrite can rescale a sum computed against one max to another: exp(c * (g - m1)) * exp(c * (m1 - m2)).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.identities import plain, unmasked
from kernelband.proposers.rewriter.analysis.iterations import iteration
from kernelband.proposers.rewriter.analysis.loops import Carried, Loop, Loops
from kernelband.proposers.rewriter.analysis.reloads import Reloads
from kernelband.proposers.rewriter.analysis.shapes import Shapes
from kernelband.proposers.rewriter.analysis.syntax import assigned, subnodes
from kernelband.proposers.rewriter.analysis.values import (
    KernelValues,
    is_call,
    marker_arg,
    method_name,
    tl_name,
)

OPS = ("max", "min", "sum")
MAX_TESTS = 6  # compile-time tests whose specializations are read one by one (2**6 readings)
EXPS = ("exp", "exp2")


# -- canonical forms, compared and turned back into code ----------------------------------------------------
class _Normal(ast.NodeTransformer):
    """Reductions with their axis as a keyword (`tl.max(x, 0)` and `tl.max(x, axis=0)` are one value)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if tl_name(node) in OPS and len(node.args) == 2:
            keywords = [k for k in node.keywords if k.arg != "axis"] + [ast.keyword("axis", node.args[1])]
            node.args, node.keywords = node.args[:1], sorted(keywords, key=lambda k: k.arg or "")
        node.keywords = [k for k in node.keywords if not (k.arg in ("keep_dims", "keepdims")
                                                         and isinstance(k.value, ast.Constant) and not k.value.value)]
        return node


def normal(node: ast.AST) -> ast.AST:
    return _Normal().visit(copy.deepcopy(node))


def _keys(node: ast.AST, memo: dict[int, str]) -> str:
    """A key of a canonical form and, in `memo`, of each of its subexpressions, in one walk (parsed and built
    forms differ only in their `ctx` fields, which the key leaves out)."""
    key = memo.get(id(node))
    if key is None:
        parts = []
        for name, value in ast.iter_fields(node):
            if name == "ctx":
                continue
            if isinstance(value, ast.AST):
                parts.append(_keys(value, memo))
            elif isinstance(value, list):
                parts.append("[" + ",".join(_keys(v, memo) if isinstance(v, ast.AST) else repr(v) for v in value) + "]")
            else:
                parts.append(repr(value))
        key = memo[id(node)] = f"{type(node).__name__}({','.join(parts)})"
    return key


def _dump(node: ast.AST) -> str:
    return _keys(node, {})


def holds(node: ast.AST, part: ast.AST) -> bool:
    """Whether `part` is a subexpression of `node` (both normal)."""
    memo: dict[int, str] = {}
    _keys(node, memo)
    return _dump(part) in memo.values()


def exp_base(node: ast.AST) -> str | None:
    """"exp" or "exp2" for tl.exp(a), tl.math.exp2(a), libdevice.exp(a), ...; else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EXPS \
            and len(node.args) == 1 and method_name(node) != "to":
        base = ast.unparse(node.func.value)
        if base == "tl" or base.startswith("tl.") or "libdevice" in base or base.endswith("math"):
            return node.func.attr
    return None


def source_of(node: ast.AST, tl: str) -> str | None:
    """Code that computes a canonical form in the kernel, where its carried values (`__var`) are read by name;
    None where it reads something code cannot name (a value of a branch, an inlined helper's local)."""

    class _Back(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.AST:
            self.generic_visit(call)
            if isinstance(call.func, ast.Name) and call.func.id in ("__var", "__loop"):
                return ast.Name(marker_arg(call))
            if isinstance(call.func, ast.Name) and call.func.id in ("__pid", "__nprog", "__arange"):
                name = {"__pid": "program_id", "__nprog": "num_programs", "__arange": "arange"}[call.func.id]
                return ast.Call(ast.Attribute(ast.Name(tl), name), call.args, [])
            if tl_name(call) is not None:
                call.func = ast.Attribute(ast.Name(tl), call.func.attr)
            return call

    try:
        return ast.unparse(_Back().visit(copy.deepcopy(node)))
    except (AttributeError, TypeError, ValueError):
        return None


# -- affine in the max --------------------------------------------------------------------------------------
def _const(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    return None


def _neg(a: ast.expr) -> ast.expr:
    if _const(a) is not None:
        return ast.Constant(-_const(a))
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
        return a.operand
    return ast.UnaryOp(ast.USub(), a)


def _add(a: ast.expr, b: ast.expr) -> ast.expr:
    if _const(a) is not None and _const(b) is not None:
        return ast.Constant(_const(a) + _const(b))
    if _const(a) == 0:
        return b
    if _const(b) == 0:
        return a
    return ast.BinOp(a, ast.Add(), b)


def _mul(a: ast.expr, b: ast.expr) -> ast.expr:
    if _const(a) is not None and _const(b) is not None:
        return ast.Constant(_const(a) * _const(b))
    for x, y in ((a, b), (b, a)):
        if _const(x) == 0:
            return ast.Constant(0)
        if _const(x) == 1:
            return y
        if _const(x) == -1:
            return _neg(y)
    return ast.BinOp(a, ast.Mult(), b)


def _broadcast(node: ast.AST) -> bool:
    """`x[:, None]`, `x[None, :]`: the same values on another axis."""
    if not isinstance(node, ast.Subscript):
        return False
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return all((isinstance(p, ast.Constant) and p.value is None)
               or (isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None) for p in parts)


def linear(node: ast.AST, m: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(coefficient, rest) with node = coefficient * m + rest, neither reading m; None where node is not affine
    in m. Casts and broadcasts of m count as m."""
    if _dump(node) == _dump(m):
        return ast.Constant(1), ast.Constant(0)
    if not holds(node, m):
        return ast.Constant(0), node
    if _broadcast(node) or method_name(node) == "to" or tl_name(node) == "cast":
        inner = node.value if isinstance(node, ast.Subscript) else (node.args[0] if tl_name(node) else node.func.value)
        found = linear(inner, m)
        return (found[0], node) if found is not None and _const(found[1]) == 0 else found
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        found = linear(node.operand, m)
        return None if found is None else (_neg(found[0]), _neg(found[1]))
    if not isinstance(node, ast.BinOp):
        return None
    if isinstance(node.op, ast.Add | ast.Sub):
        left, right = linear(node.left, m), linear(node.right, m)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Sub):
            right = (_neg(right[0]), _neg(right[1]))
        return _add(left[0], right[0]), _add(left[1], right[1])
    if isinstance(node.op, ast.Mult):
        for inner, factor in ((node.left, node.right), (node.right, node.left)):
            if not holds(factor, m):
                found = linear(inner, m)
                return None if found is None else (_mul(found[0], factor), _mul(found[1], factor))
        return None
    if isinstance(node.op, ast.Div) and not holds(node.right, m):
        found = linear(node.left, m)
        if found is None:
            return None
        return ast.BinOp(found[0], ast.Div(), node.right), ast.BinOp(found[1], ast.Div(), node.right)
    return None


@dataclass(frozen=True)
class Exponent:
    """A value base(scale * (g - m)): base "exp" or "exp2", `scale` canonical (Constant 1 for exp(x - m)),
    `rest` = scale * g. Rescaling a sum from max m1 to m2 multiplies it by base(scale * (m1 - m2))."""

    base: str
    scale: ast.expr
    rest: ast.expr


def exponent_of(node: ast.AST, m: ast.AST) -> Exponent | None:
    """Whether a value (canonical) is exp or exp2 of an affine function of m, falling as m grows, with a scale
    that no row value changes; cast or not."""
    node, m = normal(node), normal(m)
    while method_name(node) == "to" or tl_name(node) == "cast":
        node = node.func.value if method_name(node) == "to" else node.args[0]
    base = exp_base(node)
    if base is None:
        return None
    found = linear(node.args[0], m)
    if found is None or _const(found[0]) == 0 or (_const(found[0]) is not None and _const(found[0]) > 0):
        return None
    scale = _neg(found[0])
    if any(is_call(sub, "__arange") or tl_name(sub) == "load" for sub in ast.walk(scale)):
        return None
    return Exponent(base, scale, found[1])


def paired(max_term: ast.AST, sum_term: ast.AST, m: ast.AST, mine=lambda n: n, theirs=lambda n: n) -> Exponent | None:
    """The exponent of a sum's term exp(c * (g - m)) over the row of a max's term, g holding it, the sum plain or
    masked to 0 by tl.where (`tl.where(mask, tl.exp(x - m), 0.0)`: rescaled as a sum over every lane is) against a
    max over every lane or one masked to -inf by the same mask. `mine` and `theirs` read either iteration's value."""
    whole, summed = (ast.Constant(True), max_term), unmasked(sum_term, "sum")
    for (max_if, top), (sum_if, total) in ((whole, (ast.Constant(True), sum_term)),
                                           (unmasked(max_term, "max"), summed), (whole, summed)):
        exponent = exponent_of(total, m)
        if exponent is not None and (max_if is whole[0] or _dump(mine(max_if)) == _dump(theirs(sum_if))) \
                and holds(theirs(exponent.rest), mine(top)):
            return exponent
    return None


# -- the facts ------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class BlockReduction:
    """`tl.max(x, axis)`, `tl.min`, `tl.sum`: a reduction over a tile dimension."""

    call: cst.Call
    op: str
    operand: ast.expr  # canonical, normal
    value: ast.expr  # the call's canonical form, normal
    dim: str | None  # the extent reduced: a constexpr's name or a number; None unknown
    loop: cst.For | cst.While | None  # the innermost loop around it

    @property
    def loads(self) -> bool:
        return any(tl_name(n) == "load" for n in ast.walk(self.operand))

    @property
    def dot(self) -> bool:
        return any(tl_name(n) == "dot" for n in ast.walk(self.operand))


@dataclass(eq=False)
class Running:
    """A value a loop carries as a max, min or sum over its iterations."""

    loop: Loop
    carried: Carried
    op: str
    lanes: bool  # a tile combined element by element (then reduced after the loop); else one value per row
    term: ast.expr  # what each iteration combines in, normal; for one value per row, the reduction's operand
    value: ast.expr | None  # the whole row's result after the loop, normal (None: the lanes are never reduced)

    @property
    def name(self) -> str:
        return self.carried.name


@dataclass(eq=False)
class Softmax:
    """A max over a row and a sum of exp(scale * (g - max)) over the same row."""

    form: str  # "one_block", "two_pass"
    max: BlockReduction | Running
    sum: BlockReduction | Running
    exponent: Exponent
    log: bool  # the sum's logarithm is taken (logsumexp, log-softmax, cross-entropy)

    @property
    def dim(self) -> str | None:
        return self.max.dim if isinstance(self.max, BlockReduction) else None


@dataclass(eq=False)
class Online:
    """A loop that keeps a running max and multiplies a carried sum by exp(old max - new max)."""

    loop: Loop
    max: str
    sums: tuple[str, ...]


class Found:
    """The reductions of one specialization of a kernel (or of all of them merged)."""

    def __init__(self, values: KernelValues, shapes: Shapes, loops: Loops, dead: frozenset[int] = frozenset()) -> None:
        self.values, self.shapes, self.loops, self.dead = values, shapes, loops, dead
        self.kernel = values.kernel
        self.reloads = Reloads(values, lambda node: _dump(self.plain(node)))

    def plain(self, node: ast.AST) -> ast.AST:
        """The normal form of a one-block value, each value combined once with its identity read as itself."""
        return plain(normal(node), self.shapes)

    def live(self, node: cst.CSTNode) -> bool:
        """Whether the node runs in this specialization (not in a branch its tests leave out)."""
        return not self.dead or not (self.values.ms.ancestors([node]) & self.dead)

    @cached_property
    def block(self) -> list[BlockReduction]:
        enclosing: dict[int, cst.CSTNode] = {}
        for loop in subnodes(self.kernel.node.body, cst.For) + subnodes(self.kernel.node.body, cst.While):
            for call in subnodes(loop.body, cst.Call):  # outer loops first: inner ones overwrite
                enclosing[id(call)] = loop
        found = []
        for call in subnodes(self.kernel.node.body, cst.Call):
            op = next((o for o in OPS if self.kernel.is_tl(call.func, o)), None)
            if op is None or not call.args or call.args[0].keyword is not None or not self.live(call):
                continue
            value = self.plain(self.values.expand(call))
            operand = value.args[0]
            found.append(BlockReduction(call, op, operand, value, self._dim(value), enclosing.get(id(call))))
        return found

    def _dim(self, value: ast.Call) -> str | None:
        shape = self.shapes.of(value.args[0])
        axis = next((k.value for k in value.keywords if k.arg == "axis"), ast.Constant(None))
        if shape is None or not isinstance(axis, ast.Constant):
            return None
        if axis.value is None:
            return shape[0] if len(shape) == 1 else None
        if isinstance(axis.value, int) and -len(shape) <= axis.value < len(shape):
            return shape[axis.value]
        return None

    @cached_property
    def running(self) -> list[Running]:
        found = []
        for loop in self.loops.all:
            if not self.live(loop.node):
                continue
            for carried in loop.carried.values():
                if carried.kind not in OPS or carried.term is None:
                    continue
                term = normal(carried.term)
                lanes = not (tl_name(term) == carried.kind and term.args)
                me = normal(pyast.parse(f"__var({carried.name!r})", mode="eval").body)
                if lanes:
                    later = [b for b in self.block if b.op == carried.kind and _dump(b.operand) == _dump(me)
                             and b.loop is not loop.node]
                    value = later[0].value if later else None
                else:
                    term, value = term.args[0], me
                found.append(Running(loop, carried, carried.kind, lanes, term, value))
        return found

    @cached_property
    def online(self) -> list[Online]:
        """Loops that rescale by exp(m - max(m, ...)) for a value m they carry: the running max of an online
        softmax, whatever the statements that spell it."""
        found = []
        for loop in self.loops.all:
            if not self.live(loop.node):
                continue
            writes = [(w, self.values.expand(w.value)) for w in subnodes(loop.node.body, cst.Assign)
                      + subnodes(loop.node.body, cst.AugAssign) if self.live(w) and _exponentiates(w)]
            for name in sorted(loop.carried):
                rescaling = [w for w, v in writes if _rescales(v, name)]
                if rescaling:
                    sums = {t for w in rescaling for t in assigned(w) if t in loop.carried and t != name}
                    found.append(Online(loop, name, tuple(sorted(sums))))
        return found

    @cached_property
    def softmax(self) -> list[Softmax]:
        return self.one_block + self.two_pass

    @cached_property
    def one_block(self) -> list[Softmax]:
        return self._one_block[0]

    @cached_property
    def separated(self) -> list[tuple[BlockReduction | Running, BlockReduction | Running]]:
        """(max, sum) pairs that would be softmax reductions but for a write between the loads of the row they
        read (reloads.py): the sum may not be over the values the max is of."""
        return self._one_block[1] + self._two_pass[1]

    @cached_property
    def _one_block(self) -> tuple[list[Softmax], list[tuple[BlockReduction, BlockReduction]]]:
        found: list[Softmax] = []
        separated: list[tuple[BlockReduction, BlockReduction]] = []
        in_terms = {id(b.call) for r in self.running for b in self.block
                    if b.loop is r.loop.node and holds(self.plain(r.carried.term), b.value)}
        blocks = [b for b in self.block if id(b.call) not in in_terms]
        for total in (b for b in blocks if b.op == "sum"):
            for top in (b for b in blocks if b.op == "max" and b.loop is total.loop and b.dim == total.dim):
                exponent = paired(top.operand, total.operand, top.value)
                if exponent is not None and top.dim is not None:
                    if self.reloads.separated(top.operand) or self.reloads.separated(exponent.rest):
                        separated.append((top, total))
                        continue
                    found.append(Softmax("one_block", top, total, exponent, self._logged(total.value)))
                    break
        return found, separated

    @cached_property
    def two_pass(self) -> list[Softmax]:
        return self._two_pass[0]

    @cached_property
    def _two_pass(self) -> tuple[list[Softmax], list[tuple[Running, Running]]]:
        found: list[Softmax] = []
        separated: list[tuple[Running, Running]] = []
        order = {id(loop): i for i, loop in enumerate(self.loops.all)}
        for total in (r for r in self.running if r.op == "sum"):
            for top in (r for r in self.running if r.op == "max" and r.value is not None):
                if order[id(top.loop)] >= order[id(total.loop)] or _inside(total.loop, top.loop) \
                        or _inside(top.loop, total.loop):
                    continue
                exponent = paired(top.term, total.term, top.value, lambda n, loop=top.loop: iteration(n, loop),
                                  lambda n, loop=total.loop: iteration(n, loop))
                if exponent is not None:
                    if self.reloads.written_between(top.loop.node, total.loop.node):
                        separated.append((top, total))
                        continue
                    logged = self._logged(total.value) if total.value is not None else False
                    found.append(Softmax("two_pass", top, total, exponent, logged))
                    break
        return found, separated

    def _logged(self, value: ast.AST) -> bool:
        want = _dump(value)
        body = self.kernel.node.body
        expressions = [self.values.expand(n.value) for n in subnodes(body, cst.Assign) + subnodes(body, cst.Expr)
                       if self.live(n)]
        return any(tl_name(node) in ("log", "log2") and any(_dump(sub) == want for sub in ast.walk(node))
                   for expression in expressions for node in ast.walk(self.plain(expression)))


def _exponentiates(statement: cst.CSTNode) -> bool:
    """Whether a statement calls an exponential itself, or reads a name (which may hold one)."""
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value in EXPS for c in subnodes(statement, cst.Call)) \
        or bool(subnodes(statement.value, cst.Name))


def _rescales(value: ast.AST, name: str) -> bool:
    """Whether a value holds exp(m - max(m, ...)) (or exp2, scaled) for the carried m: the factor that moves a
    sum taken against the old running max to the new one."""

    def mine(node: ast.AST) -> int:
        return sum(1 for n in ast.walk(node) if is_call(n, "__var") and marker_arg(n) == name)

    for node in ast.walk(value):
        if exp_base(node) is None or not mine(node.args[0]):
            continue
        grows = [n for n in ast.walk(node.args[0]) if tl_name(n) == "maximum" and any(
            is_call(a, "__var") and marker_arg(a) == name for a in n.args)]
        if grows and mine(node.args[0]) > mine(grows[0]):
            return True
    return False


class Reductions:
    """Every row reduction of one kernel and the softmax reductions among them, in each specialization of its
    compile-time branches (`if LOG:`, `if mask_ptr is not None:`): a value set in such a branch is seen as
    each branch makes it, not merged into an unknown."""

    def __init__(self, values: KernelValues, shapes: Shapes, loops: Loops) -> None:
        self.values, self.shapes, self.loops = values, shapes, loops
        self.kernel = values.kernel
        self.base = Found(values, shapes, loops)

    @property
    def block(self) -> list[BlockReduction]:
        return self.base.block

    @property
    def running(self) -> list[Running]:
        return self.base.running

    @cached_property
    def each(self) -> list[Found]:
        """The reductions of each specialization (the merged reading where there is no static branch, or too
        many)."""
        tests = self._static_tests()
        if not tests or len({t for t, _ in tests}) > MAX_TESTS or not (
                any(b.op == "max" for b in self.base.block) or any(r.op == "max" for r in self.base.running)):
            return [self.base]
        texts = list(dict.fromkeys(t for t, _ in tests))
        found = []
        for bits in range(1 << len(texts)):
            taken = {text: (bits >> i) & 1 for i, text in enumerate(texts)}
            choices = {id(node): taken[text] for text, node in tests}
            dead = frozenset(id(node.orelse if choice == 0 else node.body) for text, node in tests
                             for choice in [choices[id(node)]] if choice == 1 or node.orelse is not None)
            values = KernelValues(self.values.ms, self.kernel, choices=choices)
            shapes = Shapes(values)
            found.append(Found(values, shapes, Loops(values, shapes), dead))
        return found

    def _static_tests(self) -> list[tuple[str, cst.If]]:
        """(canonical test, node) of each `if` whose test Triton decides at compile time: it reads constexpr
        parameters and literals only, or compares a parameter with None."""
        constexprs = {p.name for p in self.kernel.params if p.constexpr}
        params = {p.name for p in self.kernel.params}
        found = []
        for node in subnodes(self.kernel.node.body, cst.If):
            test = self.values.expand(node.test)
            names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
            calls = [n for n in ast.walk(test) if isinstance(n, ast.Call)]
            none_test = isinstance(test, ast.Compare) and len(test.ops) == 1 \
                and isinstance(test.ops[0], ast.Is | ast.IsNot) and isinstance(test.left, ast.Name) \
                and test.left.id in params and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None
            if none_test or (names <= constexprs and not calls):
                found.append((ast.dump(test), node))
        return found

    @cached_property
    def softmax(self) -> list[Softmax]:
        """Every softmax reduction some specialization has (each once, as the first one that has it finds it).
        Loop passes are read per specialization only where some reading has a running max."""
        found, seen = [], set()
        loops = any(r.op == "max" for each in self.each for r in each.running)  # a static branch may set it
        for each in self.each:
            for entry in each.one_block + (each.two_pass if loops or each is self.base else []):
                key = (entry.form, _key(entry.max), _key(entry.sum))
                if key not in seen:
                    seen.add(key)
                    found.append(entry)
        return found

    @cached_property
    def online(self) -> list[Online]:
        """Online loops: the merged reading's, else those of any specialization."""
        if self.base.online:
            return self.base.online
        found, seen = [], set()
        for each in self.each:
            for entry in each.online:
                if (id(entry.loop.node), entry.max) not in seen:
                    seen.add((id(entry.loop.node), entry.max))
                    found.append(entry)
        return found

    @property
    def targets(self) -> list[Softmax]:
        """The softmax reductions an online rewrite may take: none where the kernel is online already."""
        return [] if self.online else self.softmax

    def why_none(self) -> str:
        """The fact that makes the kernel no target."""
        name = self.kernel.name
        if self.online:
            return f"{name} already keeps a running max with a rescaled sum (online form) in a loop"
        maxima = [b for b in self.block if b.op == "max"] + [r for r in self.running if r.op == "max"]
        if not maxima:
            return f"{name} takes no max over a row"
        if any(each.separated for each in self.each):
            return f"{name} reads the row it sums exp(x - max) of again after a store that may write it, so the " \
                   f"sum may not be over the values it takes the max of"
        return f"{name} sums no exp(x - max) over the row it takes a max of"


def _key(reduction: BlockReduction | Running) -> tuple:
    if isinstance(reduction, BlockReduction):
        return ("block", id(reduction.call))
    return ("running", id(reduction.loop.node), reduction.name)


def _inside(inner: Loop, outer: Loop) -> bool:
    loop = inner.parent
    while loop is not None:
        if loop is outer:
            return True
        loop = loop.parent
    return False
