"""The libcst helpers the rewriter reads source with: node text, dotted names, fresh names, integer literals,
the names an expression loads, and the scopes (module or function) that assign them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband import pyast

CDIV_NAMES = ("cdiv",)  # triton.cdiv, tl.cdiv, cdiv
EMPTY = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    return EMPTY.code_for_node(node)


def dotted(node: cst.CSTNode) -> str | None:
    """`triton.language.load` for that attribute chain; None for anything but names and attributes."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def fresh_name(base: str, used: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first not in `used` (which it joins)."""
    name, i = base, 1
    while name in used:
        name, i = f"{base}_{i}", i + 1
    used.add(name)
    return name


def int_value(node: cst.CSTNode | None) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.evaluated_value)
        except ValueError:
            return None
    return None


def arg_of(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    """The argument a call passes as `keyword`, or as its positional argument `index` (`tl.store(p, v, mask)`:
    mask is 2)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[index].value if index < len(positional) else None


# Integer types of 32 bits or more: a cast to one keeps a multiple of a tile (at most 2^31) a multiple of it
INTEGER_DTYPES = ("int32", "int64", "uint32", "uint64")


def integer_cast_operand(node: cst.BaseExpression, tl_names: set[str] | frozenset[str]) -> cst.BaseExpression | None:
    """X where `node` is X cast to an integer type of 32 bits or more (`X.to(tl.int64)`, `tl.cast(X, tl.int64)`):
    where X is an integer, a program id or a multiple of a tile, so is the cast."""
    if not isinstance(node, cst.Call) or any(a.star for a in node.args):
        return None

    def integer(dtype: cst.BaseExpression | None) -> bool:
        base, _, attr = (dotted(dtype) or "" if dtype is not None else "").rpartition(".")
        return attr in INTEGER_DTYPES and (base in tl_names or base == "triton.language")

    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
        return node.func.value if integer(arg_of(node, 0, "dtype")) else None
    base, _, attr = (dotted(node.func) or "").rpartition(".")
    if attr == "cast" and (base in tl_names or base == "triton.language"):
        value = arg_of(node, 0, "input")
        return value if value is not None and integer(arg_of(node, 1, "dtype")) else None
    return None


# Positional arguments of triton.Config after its kwargs dict, in Triton's order.
CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def literal_config(node: cst.BaseExpression) -> tuple[dict, dict] | None:
    """A literal `triton.Config({...}, num_warps=.., num_stages=..)` as (its kwargs, its launch options by
    name); None for anything that is not a Config call whose arguments are all literals."""
    if not (isinstance(node, cst.Call) and (dotted(node.func) or "").endswith("Config") and node.args):
        return None
    try:
        kwargs = pyast.literal_eval(code(node.args[0].value))
        given = dict(zip(CONFIG_OPTIONS, [pyast.literal_eval(code(a.value)) for a in node.args[1:]
                                          if a.keyword is None]))
        given.update({a.keyword.value: pyast.literal_eval(code(a.value)) for a in node.args[1:] if a.keyword})
    except (ValueError, SyntaxError):
        return None
    return (kwargs, given) if isinstance(kwargs, dict) else None


# -- name loads -------------------------------------------------------------------------------------------
class _Loads(cst.CSTVisitor):
    """Names read in a subtree: not attribute names, keyword names, parameter names or assignment targets."""

    def __init__(self) -> None:
        self.names: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        self._target(node.target)
        return False

    def _target(self, target: cst.BaseExpression) -> None:
        """A target binds its names; what else it holds (`x[i] = ...`, `a.b = ...`) is read."""
        if isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._target(element.value)
        elif not isinstance(target, cst.Name):
            walk(target, self)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        if node.value is not None:
            walk(node.value, self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        walk(node.params, self)
        walk(node.body, self)
        return False

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False


def loads(*nodes: cst.CSTNode | None) -> list[cst.Name]:
    visitor = _Loads()
    for node in nodes:
        if node is not None:
            walk(node, visitor)
    return visitor.names


def contains(node: cst.CSTNode, wanted: set[int]) -> bool:
    """Whether the subtree holds one of the nodes whose ids are in `wanted`."""
    found = False

    class _Find(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if id(n) in wanted:
                found = True
            return not found

    walk(node, _Find())
    return found


# The trees walked last, each in pre-order with every node's span in it: the analyses ask for the nodes of one
# kind under a kernel, a loop or a statement many times over, and a libcst walk costs far more than a slice.
_TREES: OrderedDict[int, tuple[list[cst.CSTNode], dict[int, tuple[int, int]]]] = OrderedDict()
_TREES_KEPT = 16
_TREES_LOCK = threading.Lock()  # the coverage tool and the search run the rewriter from several threads


def _preorder(root: cst.CSTNode) -> tuple[list[cst.CSTNode], dict[int, tuple[int, int]]]:
    nodes: list[cst.CSTNode] = []
    spans: dict[int, tuple[int, int]] = {}
    starts: dict[int, int] = {}

    class _Order(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            starts[id(n)] = len(nodes)
            nodes.append(n)
            return True

        def on_leave(self, n: cst.CSTNode) -> None:
            spans[id(n)] = (starts[id(n)], len(nodes))

    root.visit(_Order())
    return nodes, spans


def _cached(node: cst.CSTNode) -> tuple[list[cst.CSTNode], dict[int, tuple[int, int]]]:
    """The cached pre-order of a tree that holds the node (made, with the node as its root, if none does)."""
    with _TREES_LOCK:
        for key, (nodes, spans) in reversed(_TREES.items()):
            span = spans.get(id(node))
            if span is not None and nodes[span[0]] is node:  # the cached trees hold their nodes: no id reused
                _TREES.move_to_end(key)
                return nodes, spans
    nodes, spans = _preorder(node)
    with _TREES_LOCK:
        _TREES[id(node)] = (nodes, spans)
        while len(_TREES) > _TREES_KEPT:
            _TREES.popitem(last=False)
    return nodes, spans


def subnodes(node: cst.CSTNode, kind: type) -> list:
    """The nodes of a kind in a subtree, the node itself included, in the order a visitor meets them."""
    nodes, spans = _cached(node)
    start, end = spans[id(node)]
    return [n for n in nodes[start:end] if isinstance(n, kind)]


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a visitor that only reads: the same calls in the same order, over the cached
    pre-order. libcst's own walk rebuilds every node it passes, which costs the analyses most of their time."""
    nodes, spans = _cached(node)
    index, end = spans[id(node)]
    open_: list[tuple[int, cst.CSTNode]] = []  # the nodes visited and not yet left, with where each ends
    while index < end:
        while open_ and open_[-1][0] <= index:
            visitor.on_leave(open_.pop()[1])
        current = nodes[index]
        start, stop = spans[id(current)]
        open_.append((stop, current))
        index = start + 1 if visitor.on_visit(current) else stop
    while open_:
        visitor.on_leave(open_.pop()[1])


# -- scopes -----------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Scope:
    """A function (or the module) with what is assigned in it: the values a name may take."""

    node: cst.FunctionDef | cst.Module
    top: str | None  # the module-level function (or class) it belongs to; None for the module
    assigns: dict[str, list[cst.BaseExpression | None]] = field(default_factory=dict)  # None: opaque
    params: dict[str, cst.Param] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"

    def value(self, name: str) -> cst.BaseExpression | None:
        """The value of a name assigned exactly once (and not a parameter)."""
        values = self.assigns.get(name, [])
        return values[0] if len(values) == 1 and name not in self.params else None

    @cached_property
    def _body_loads(self) -> list[cst.Name]:
        if isinstance(self.node, cst.FunctionDef):
            return loads(self.node.body)
        return loads(*[s for s in self.node.body if not isinstance(s, cst.FunctionDef | cst.ClassDef)])

    def body_loads(self) -> list[cst.Name]:
        """The names the scope's own code reads (a function's nested functions included)."""
        return self._body_loads


class _Assigns(cst.CSTVisitor):
    """Assignments of one scope, not of the functions nested in it."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _add(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            self.scope.assigns.setdefault(target.value, []).append(value)
        elif isinstance(target, cst.Tuple | cst.List):
            values = value.elements if isinstance(value, cst.Tuple | cst.List) \
                and len(value.elements) == len(target.elements) else None
            for index, element in enumerate(target.elements):  # `a, b = 32, 64` gives each its value
                self._add(element.value, values[index].value if values is not None else None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._add(target.target, node.value if len(node.targets) == 1 else None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._add(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target, None)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target, None)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._add(node.name, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._add(node.target, None)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.scope.assigns.setdefault(node.name.value, []).append(None)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def assigned(*nodes: cst.CSTNode) -> set[str]:
    """The names these statements bind (assignments, augmented ones, loop targets, `as` and `:=`)."""
    scope = Scope(cst.Module(body=[]), None)
    visitor = _Assigns(scope)
    for node in nodes:
        walk(node, visitor)
    return set(scope.assigns)


def restated(statement: cst.CSTNode, constexprs: set[str]) -> str | None:
    """The name `p` of `if FLAG & BIT: p = p // D * D` (FLAG a constexpr, BIT and D integers), else None.

    Such a statement changes no value where the launch sets the bit only for values that are multiples of D,
    as the host code of divisibility_hints does, and tells Triton's axis analysis that p is one. The symbolic
    run reads p after it as p (`values`), so the facts every other rewrite reads hold on a hinted kernel."""
    if not (isinstance(statement, cst.If) and statement.orelse is None
            and isinstance(test := statement.test, cst.BinaryOperation) and isinstance(test.operator, cst.BitAnd)
            and isinstance(test.left, cst.Name) and test.left.value in constexprs
            and isinstance(test.right, cst.Integer) and isinstance(statement.body, cst.IndentedBlock)
            and len(statement.body.body) == 1 and isinstance(line := statement.body.body[0], cst.SimpleStatementLine)
            and len(line.body) == 1 and isinstance(assign := line.body[0], cst.Assign) and len(assign.targets) == 1
            and isinstance(target := assign.targets[0].target, cst.Name)):
        return None
    value = assign.value
    if (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)
            and isinstance(inner := value.left, cst.BinaryOperation) and isinstance(inner.operator, cst.FloorDivide)
            and isinstance(inner.left, cst.Name) and inner.left.value == target.value
            and isinstance(inner.right, cst.Integer) and isinstance(value.right, cst.Integer)
            and inner.right.value == value.right.value):
        return target.value
    return None


def is_guard(statement: cst.CSTNode) -> bool:
    """`if C: return` with nothing else in the branch and no else: a program with nothing to do (a tile past
    the matrix) leaves, so what follows runs only where C is false."""
    if not isinstance(statement, cst.If) or statement.orelse is not None:
        return False
    body = statement.body.body
    if isinstance(statement.body, cst.IndentedBlock):
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            return False
        body = body[0].body
    return len(body) == 1 and isinstance(body[0], cst.Return) and body[0].value is None


def docstring(statement: cst.CSTNode) -> bool:
    """Whether a statement is a string alone on its line (a function's docstring where it comes first)."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], cst.Expr) \
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)


def plain_signature(params: cst.Parameters) -> bool:
    """No *args, **kwargs or keyword-only parameters: every parameter binds by position or by its name."""
    return not params.kwonly_params and not isinstance(params.star_arg, cst.Param) and params.star_kwarg is None


def names_only(target: cst.BaseExpression) -> bool:
    """Whether an assignment target binds names and nothing else (`a`, `a, *b`), not an element or an attribute
    of an object (`x[0]`, `f.h`): only then does the assignment leave every object as it was."""
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, cst.Tuple | cst.List):
        return all(names_only(e.value) for e in target.elements)  # a starred element's value is its target
    return False


def make_scope(node: cst.FunctionDef | cst.Module, top: str | None) -> Scope:
    scope = Scope(node, top)
    visitor = _Assigns(scope)
    if isinstance(node, cst.FunctionDef):
        for param in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
            scope.params[param.name.value] = param
        walk(node.body, visitor)
    else:
        for statement in node.body:
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                visitor._add(statement.name, None)
            else:
                walk(statement, visitor)
    return scope
