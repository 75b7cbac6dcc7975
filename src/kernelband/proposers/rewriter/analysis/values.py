"""What an expression of a kernel computes, whatever it is called: the kernel's body is run symbolically, in
order, so that each name read anywhere stands for the value that reaches it (the last assignment before it,
`x = x + 1` and `offs = tl.where(offs < n, offs, 0)` included), each call of a straight-line `@triton.jit`
helper for what it returns, and what a kernel reads is written in one canonical form:

    tl.program_id(0), tl.program_id(axis=0), language.program_id(0)  ->  __pid(0)
    tl.num_programs(1)                                                ->  __nprog(1)
    tl.arange(0, BLOCK)                                               ->  __arange(0, BLOCK)
    a value carried by a loop, or set differently by two branches     ->  __var('acc')
    the variable of a counted loop                                    ->  __loop('k')
    any other triton.language call                                    ->  tl.NAME(...)

Parameters keep their names. Two expressions with the same canonical form compute the same value in the same
program (and, inside one loop iteration, the same iteration). `var_init` keeps the value a carried name had
when its loop began (an accumulator's `tl.zeros(...)`). Everything else of the analysis (roles, loops,
accesses, reductions, dots) is read from these forms, never from how the source spells them.
"""

from __future__ import annotations

import ast
import copy
import operator
from functools import cached_property

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, dotted, restated

MAX_DEPTH = 8  # nested helper calls inlined
INTEGER_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.FloorDiv: operator.floordiv}


def parse_expression(node: cst.BaseExpression) -> ast.expr:
    """A libcst expression as a Python ast expression (parenthesized: it may span lines)."""
    return pyast.parse(f"({code(node).strip()})", mode="eval").body


def call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name), list(args), [])


def var(name: str) -> ast.Call:
    return call("__var", ast.Constant(name))


def is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def tl_name(node: ast.AST) -> str | None:
    """NAME of a canonical `tl.NAME(...)` call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
            and node.func.value.id == "tl":
        return node.func.attr
    return None


def method_name(node: ast.AST) -> str | None:
    """NAME of a method call `x.NAME(...)` on a value (`x.to(tl.float32)`), not a tl call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and tl_name(node) is None:
        return node.func.attr
    return None


def same(a: ast.AST | None, b: ast.AST | None) -> bool:
    if a is None or b is None:
        return a is b
    return ast.dump(a) == ast.dump(b)


def add_terms(node: ast.AST) -> list[ast.AST]:
    """The terms of a sum, parentheses and order aside: `a + (b + c)` -> [a, b, c]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return add_terms(node.left) + add_terms(node.right)
    return [node]


def factors(node: ast.AST) -> list[ast.AST]:
    """The factors of a product: `a * (b * c)` -> [a, b, c]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return factors(node.left) + factors(node.right)
    return [node]


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def reads(node: ast.AST, marker: str) -> list[ast.Call]:
    """The `marker(...)` calls in a canonical form (`__pid`, `__arange`, `__loop`, `__var`)."""
    return [n for n in ast.walk(node) if is_call(n, marker)]


def marker_arg(node: ast.Call) -> object:
    return node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None


def pid_axes(node: ast.AST) -> set[int]:
    return {marker_arg(c) for c in reads(node, "__pid")}


def loop_vars(node: ast.AST) -> set[str]:
    return {marker_arg(c) for c in reads(node, "__loop")}


def carried(node: ast.AST) -> set[str]:
    return {marker_arg(c) for c in reads(node, "__var")}


Env = dict[str, ast.expr]


class _Canon(ast.NodeTransformer):
    def __init__(self, values: KernelValues, env: Env, depth: int) -> None:
        self.values, self.env, self.depth = values, env, depth

    def visit_Call(self, node: ast.Call) -> ast.AST:
        values = self.values
        func = ast.unparse(node.func)
        base, _, attr = func.rpartition(".")
        if base.endswith(".math") and base[:-len(".math")] in values.tl_aliases:
            base = base[:-len(".math")]  # tl.math.exp2 is tl.exp2
        if base in values.tl_aliases:
            args = [self.visit(a) for a in node.args]
            keywords = {k.arg: self.visit(k.value) for k in node.keywords if k.arg}
            if attr in ("program_id", "num_programs"):
                axis = args[0] if args else keywords.get("axis", ast.Constant(0))
                return call("__pid" if attr == "program_id" else "__nprog", axis)
            if attr == "arange":
                start = args[0] if args else keywords.get("start")
                end = args[1] if len(args) > 1 else keywords.get("end")
                return call("__arange", start, end)
            return ast.Call(ast.Attribute(ast.Name("tl"), attr), args,
                            [ast.keyword(k, v) for k, v in sorted(keywords.items())])
        helper = values.helpers.get(func)
        if helper is not None and self.depth < MAX_DEPTH:
            expanded = values.inline(helper, [self.visit(a) for a in node.args],
                                     {k.arg: self.visit(k.value) for k in node.keywords if k.arg}, self.depth + 1)
            if expanded is not None:
                return expanded
        return self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        operand = node.operand
        if isinstance(node.op, ast.USub) and isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            return ast.Constant(-operand.value)  # `-1` is one literal, as an axis (`axis=-1`) or a step
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        """`x - (x // n) * n` is the remainder `x % n` (under floor and truncating division alike), however it
        is spelled: `pid - pid_m * n` with `pid_m = pid // n`."""
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Sub) and isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Mult):
            for quotient, divisor in ((node.right.left, node.right.right), (node.right.right, node.right.left)):
                if isinstance(quotient, ast.BinOp) and isinstance(quotient.op, ast.FloorDiv) \
                        and ast.dump(quotient.left) == ast.dump(node.left) \
                        and ast.dump(quotient.right) == ast.dump(divisor):
                    return ast.BinOp(node.left, ast.Mod(), divisor)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env:
            return copy.deepcopy(self.env[node.id])
        if node.id in self.values.locals:
            return var(node.id)  # read where no assignment reaches it for certain
        return node


class KernelValues:
    """The canonical forms of one kernel's expressions (module docstring)."""

    def __init__(self, ms: ModuleSource, kernel: Kernel, bound: Env | None = None,
                 caller: Kernel | None = None, choices: dict[int, int] | None = None) -> None:
        """`bound`: a helper's parameters as its caller passes them, in the caller's canonical forms (`caller`):
        then every fact of the helper reads in the caller's terms. `choices`: one specialization of the
        compile-time branches (id of an `if` -> 0 for its body, 1 for its else)."""
        self.ms, self.kernel = ms, kernel
        self.choices = choices or {}
        self.caller = caller
        owner = caller or kernel
        self.param_names = {p.name for p in owner.params}
        self.constexpr_names = [p.name for p in owner.params if p.constexpr]
        self.own_constexprs = {p.name for p in kernel.params if p.constexpr}
        self.tl_aliases = set(kernel.tl) | {"triton.language"}
        self.locals = set(kernel.scope.assigns) - set(kernel.scope.params)
        self.var_init: Env = {}
        self._env_at: dict[int, Env] = {}
        self._final: Env = {}
        self._block(list(kernel.node.body.body), dict(bound or {}))

    def is_param(self, name: str) -> bool:
        return name in self.param_names

    def bind(self, helper: cst.FunctionDef, call: cst.Call) -> Env | None:
        """The helper's parameters as this call passes them (defaults for those it does not), canonical."""
        params = [p for p in (*helper.params.posonly_params, *helper.params.params)]
        env: Env = {}
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) > len(params):
            return None
        for param, arg in zip(params, positional):
            env[param.name.value] = self.expand(arg.value)
        for arg in call.args:
            if arg.keyword is not None:
                env[arg.keyword.value] = self.expand(arg.value)
        for param in params:
            if param.name.value not in env and param.default is not None:
                env[param.name.value] = parse_expression(param.default)
        return env if {p.name.value for p in params} <= set(env) else None

    @cached_property
    def helpers(self) -> dict[str, cst.FunctionDef]:
        """The module's other `@triton.jit` functions: the helpers a kernel may call."""
        return {k.name: k.node for k in self.ms.kernels.values() if k is not self.kernel}

    # -- the symbolic run ------------------------------------------------------------------------------------
    def _canon(self, node: cst.BaseExpression, env: Env, depth: int = 0) -> ast.expr:
        return _Canon(self, env, depth).visit(parse_expression(node))

    def _block(self, statements: list, env: Env) -> Env:
        for statement in statements:
            self._env_at[id(statement)] = dict(env)
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    self._env_at[id(small)] = dict(env)
                    self._small(small, env)
            elif isinstance(statement, cst.For | cst.While):
                self._loop(statement, env)
            elif isinstance(statement, cst.If):
                if restated(statement, self.own_constexprs) is None:  # a restatement leaves the value as it was
                    self._if(statement, env)
            elif isinstance(statement, cst.With):
                self._block(list(statement.body.body), env)
            elif isinstance(statement, cst.BaseSmallStatement):  # the body of a one-line `if x: y = z`
                self._env_at[id(statement)] = dict(env)
                self._small(statement, env)
        return env

    def _small(self, small: cst.CSTNode, env: Env) -> None:
        if isinstance(small, cst.Assign):
            value = self._canon(small.value, env)
            for target in small.targets:
                self._bind(target.target, value if len(small.targets) == 1 else None, env)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self._bind(small.target, self._canon(small.value, env), env)
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            name = small.target.value
            current = env.get(name, ast.Name(name) if name not in self.locals else var(name))
            op = {cst.AddAssign: ast.Add, cst.SubtractAssign: ast.Sub, cst.MultiplyAssign: ast.Mult,
                  cst.DivideAssign: ast.Div, cst.FloorDivideAssign: ast.FloorDiv}.get(type(small.operator))
            env[name] = ast.BinOp(current, op(), self._canon(small.value, env)) if op else var(name)

    def _bind(self, target: cst.BaseExpression, value: ast.expr | None, env: Env) -> None:
        if isinstance(target, cst.Name):
            env[target.value] = value if value is not None else var(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            elements = value.elts if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elements) \
                else [None] * len(target.elements)
            for element, part in zip(target.elements, elements):
                self._bind(element.value, part, env)

    def _loop(self, node: cst.For | cst.While, env: Env) -> None:
        inside = assigned(node.body)
        if isinstance(node, cst.For):
            self._env_at[id(node.iter)] = dict(env)
            inside |= assigned(node.target)
        else:
            self._env_at[id(node.test)] = dict(env)
        for name in inside:
            if name not in self.var_init and name in env and not same(env[name], var(name)):
                self.var_init[name] = env[name]
        inner = dict(env)
        for name in inside:
            inner[name] = var(name)
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            inner[node.target.value] = call("__loop", ast.Constant(node.target.value))
        if isinstance(node, cst.While):
            self._env_at[id(node.test)] = dict(inner)
        self._block(list(node.body.body), inner)
        for name in inside:
            env[name] = var(name)

    def _if(self, node: cst.If, env: Env) -> None:
        self._env_at[id(node.test)] = dict(env)
        choice = self.choices.get(id(node))
        if choice is not None:  # a test Triton decides at compile time: only the branch taken runs
            if choice == 0:
                self._block(list(node.body.body), env)
            elif isinstance(node.orelse, cst.If):
                self._if(node.orelse, env)
            elif node.orelse is not None:
                self._block(list(node.orelse.body.body), env)
            return
        branches = [self._block(list(node.body.body), dict(env))]
        orelse = node.orelse
        if orelse is None:
            branches.append(dict(env))
        elif isinstance(orelse, cst.If):
            other = dict(env)
            self._if(orelse, other)
            branches.append(other)
        else:
            branches.append(self._block(list(orelse.body.body), dict(env)))
        names = set().union(*branches) - set()
        for name in names:
            versions = [b.get(name) for b in branches]
            if all(v is not None for v in versions) and all(same(v, versions[0]) for v in versions):
                env[name] = versions[0]
            elif any(v is not None for v in versions):
                if name not in self.var_init and name in env and not same(env[name], var(name)):
                    self.var_init[name] = env[name]  # (an enclosing loop's own placeholder is no value)
                env[name] = var(name)

    # -- reading it --------------------------------------------------------------------------------------------
    def env_at(self, node: cst.CSTNode) -> Env:
        """The values that reach a node: those before the innermost statement (or loop header) holding it."""
        key = id(node)
        parents = self.ms.parents
        while key not in self._env_at:
            parent = parents.get(key)
            if parent is None:
                return {}
            key = id(parent)
        return self._env_at[key]

    def expand(self, node: cst.BaseExpression) -> ast.expr:
        return self._canon(node, self.env_at(node))

    def read_at(self, node: cst.BaseExpression, statement: cst.CSTNode) -> ast.expr:
        """The canonical form of `node` (not necessarily in the tree) read where `statement` runs."""
        return self._canon(node, self.env_at(statement))

    def text(self, node: cst.BaseExpression) -> str:
        return ast.unparse(self.expand(node))

    def initial(self, name: str) -> ast.expr | None:
        """The value a carried or branch-set name had before the loop or branch that made it a __var."""
        return self.var_init.get(name)

    def definition(self, name: str) -> ast.expr | None:
        """A value a __var stands for at some point: its value before the loop or branch, else its first
        assignment's."""
        if name in self.var_init:
            return self.var_init[name]
        first = next((v for v in self.kernel.scope.assigns.get(name, []) if v is not None), None)
        return self.expand(first) if first is not None else None

    def integer(self, node: ast.expr | None, depth: int = 0) -> int | None:
        """The integer a canonical form is certain to be, whatever the launch passes: a literal (inline or bound
        to a local once, which the canonical form holds already), a module-level name assigned one once
        (`K = 64`, `K: tl.constexpr = 64`, `K = tl.constexpr(64)`), or +, -, *, // of those; None otherwise. A
        parameter is not one, even with a default: a launch may pass another value."""
        if node is None or depth > MAX_DEPTH:
            return None
        if isinstance(node, ast.Constant):
            return node.value if type(node.value) is int else None
        if isinstance(node, ast.Name) and not self.is_param(node.id) and node.id not in self.locals:
            value = self.ms.module_scope.value(node.id)
            if isinstance(value, cst.Call) and (dotted(value.func) or "").rpartition(".")[2] == "constexpr" \
                    and len(value.args) == 1:
                value = value.args[0].value
            return self.integer(parse_expression(value), depth + 1) if value is not None else None
        if isinstance(node, ast.BinOp) and type(node.op) in INTEGER_OPS:
            left, right = self.integer(node.left, depth + 1), self.integer(node.right, depth + 1)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
                return None
            return INTEGER_OPS[type(node.op)](left, right)
        return None

    def inline(self, helper: cst.FunctionDef, args: list[ast.expr], kwargs: Env, depth: int) -> ast.expr | None:
        """What a straight-line helper returns for these arguments; None for a helper with loops, branches or
        more than one return."""
        params = [p.name.value for p in (*helper.params.posonly_params, *helper.params.params)]
        env: Env = dict(zip(params, args))
        env.update({k: v for k, v in kwargs.items() if k in params})
        for p in (*helper.params.posonly_params, *helper.params.params):
            if p.name.value not in env and p.default is not None:
                env[p.name.value] = parse_expression(p.default)
        if set(env) != set(params):
            return None
        result = None
        for statement in helper.body.body:
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                return None
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                self._bind(small.targets[0].target, self._canon(small.value, env, depth), env)
            elif isinstance(small, cst.Return) and small.value is not None and result is None:
                result = self._canon(small.value, env, depth)
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString):
                continue  # a docstring
            else:
                return None
        return result


def call_name(node: cst.Call) -> str:
    return (dotted(node.func) or "").rpartition(".")[2]
