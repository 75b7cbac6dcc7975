"""A host function's calls of the module's launching functions written out in its body, for launch_fusion: a
residual add launched by `add(x, r)` and an RMSNorm launched by `rmsnorm(h, w)`, each a function of its own
that a third calls one after the other, are two launches in one body once the two calls are inlined, which is
where launch_fusion reads a producer and its consumer.

A call is inlined where it is a statement's value (`h = add(x, r)`, `add(x, r)`, `return rmsnorm(h, w)`), an
element of a tuple that is (`return rmsnorm(h, w), h`) or an argument of such a call (`rmsnorm(add(x, r), w)`):
the calls go first, in the order Python makes them, each value into a name of its own, where all the statement
evaluates besides is names and constants, which no call can change. The function
called is a module-level function that launches a kernel, with no decorator, no *args, **kwargs or
keyword-only parameters, no nested function or class, no `global`, `nonlocal` or `yield`, and its one `return`
(if any) its body's last statement. Its locals take names the caller does not use, its parameters read the
caller's arguments, and what it reads of the module is not a name the caller binds. Python binds a call's
arguments before the body runs and the body's last statement returns, so the caller computes the same.
`wrapping(rewrite)` runs a rewrite on the module as written and, where it makes nothing, on the module with
the calls inlined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    Scope,
    assigned,
    docstring,
    dotted,
    fresh_name,
    loads,
    plain_signature,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Edit, Found, Respelled, respelling
from kernelband.proposers.rewriter.rewrites.inline_helpers import Renamed, bindings

SIMPLE = (cst.Name, cst.Integer, cst.Float, cst.SimpleString)  # evaluated with no effect, read where passed


def _inlinable(function: cst.FunctionDef) -> bool:
    body = [s for s in function.body.body if not docstring(s)]
    returns = subnodes(function.body, cst.Return)
    if function.decorators or not plain_signature(function.params) or not body:
        return False
    if subnodes(function.body, cst.FunctionDef) or subnodes(function.body, cst.ClassDef) \
            or subnodes(function.body, cst.Global) or subnodes(function.body, cst.Nonlocal) \
            or subnodes(function.body, cst.Yield) or subnodes(function.body, cst.Await):
        return False
    if any(p.default is not None and not isinstance(p.default, SIMPLE) for p in function.params.params):
        return False  # a default is evaluated once, where the function is defined: only a constant reads the same
    if function.name.value in {n.value for n in loads(function.body)}:
        return False  # recursive
    if not returns:
        return True
    last = body[-1]
    return len(returns) == 1 and isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 \
        and last.body[0] is returns[0]


@dataclass(frozen=True, eq=False)
class _Wrapper:
    """A launching function that can be written out where called, with what inlining it reads, found once."""

    node: cst.FunctionDef
    written: frozenset[str]  # the names its body binds
    lambdas: frozenset[str]  # its lambdas' parameters
    free: frozenset[str]  # the names it reads and does not bind: the module's (and builtins)
    returned: str | None  # the name its last statement returns, where it returns a name

    @staticmethod
    def of(function: cst.FunctionDef) -> _Wrapper:
        written = frozenset(assigned(function.body))
        lambdas = frozenset(p.name.value for lam in subnodes(function.body, cst.Lambda) for p in lam.params.params)
        params = {p.name.value for p in function.params.params}
        last = function.body.body[-1]
        value = last.body[0].value if isinstance(last, cst.SimpleStatementLine) \
            and isinstance(last.body[0], cst.Return) else None
        return _Wrapper(function, written, lambdas,
                        frozenset({n.value for n in loads(function.body)} - written - params - lambdas),
                        value.value if isinstance(value, cst.Name) else None)


def _launching(ms: ModuleSource) -> dict[str, _Wrapper]:
    """The module-level functions that launch a kernel themselves and can be written out where called."""
    tops = {lc.scope.node.name.value for lc in ms.launches
            if isinstance(lc.scope.node, cst.FunctionDef) and lc.scope.top == lc.scope.node.name.value}
    return {s.name.value: _Wrapper.of(s) for s in ms.module.body
            if isinstance(s, cst.FunctionDef) and s.name.value in tops and _inlinable(s)}


class _Caller:
    """One host function and what it binds, for the calls inlined in it."""

    def __init__(self, ms: ModuleSource, scope: Scope, read: set[str]) -> None:
        """`read`: the module's names the functions inlined read, which no local written here may shadow."""
        self.scope = scope
        self.bound = set(scope.assigns) | set(scope.params)
        self.used = self.bound | read | set(ms.module_scope.assigns) | set(ms.kernels) \
            | {n.value for n in subnodes(scope.node, cst.Name)}

    def inlined(self, wrapper: _Wrapper, call: cst.Call, target: str | None = None
                ) -> tuple[list[cst.BaseStatement], cst.BaseExpression | None] | None:
        """The statements that run the call's body here, and the value it returns (None: it returns none).
        `target`: the name the caller binds the value to, which the local the function returns takes
        (`h = add(x, r)` with `return out`: the buffer is `h` from its allocation on, so no `h = out` stands
        between the launch that writes it and the one that reads it); an argument that reads it is bound to a
        local of its own first (`x = add(x, r)`)."""
        bound = bindings(wrapper.node.params, call)
        if bound is None or wrapper.free & self.bound:
            return None  # an argument missing, or the caller's own name would stand for the module's
        written = wrapper.written
        mapping_first = {wrapper.returned: cst.Name(target)} if target is not None \
            and wrapper.returned in written - set(bound) else {}
        mapping: dict[str, cst.BaseExpression] = {}
        head: list[cst.BaseStatement] = []
        for name, value in bound.items():
            if name not in written and isinstance(value, SIMPLE) \
                    and not (mapping_first and target in {n.value for n in loads(value)}):
                mapping[name] = value
            else:
                local = fresh_name(name, self.used)
                mapping[name] = cst.Name(local)
                head.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(local))], value)]))
        mapping.update(mapping_first)
        for name in sorted(written - set(bound) - set(mapping_first)):
            mapping[name] = cst.Name(fresh_name(name, self.used))
        if wrapper.lambdas & set(mapping):
            return None  # a lambda's parameter shares a name with a local: the renaming would reach it
        body = [s.visit(Renamed(mapping)) for s in wrapper.node.body.body if not docstring(s)]
        value = None
        if isinstance(body[-1], cst.SimpleStatementLine) and isinstance(body[-1].body[0], cst.Return):
            value = body.pop().body[0].value
        return [*head, *body], value


def _calls(node: cst.BaseExpression, wrappers: dict[str, _Wrapper]) -> list[cst.Call] | None:
    """The wrapper calls an expression makes, in the order Python makes them (arguments first), where all it
    evaluates besides is names and constants; else None."""
    if isinstance(node, SIMPLE):
        return []
    if isinstance(node, cst.Tuple):
        parts = [_calls(e.value, wrappers) if not isinstance(e, cst.StarredElement) else None
                 for e in node.elements]
    elif isinstance(node, cst.Call) and dotted(node.func) in wrappers and isinstance(node.func, cst.Name):
        parts = [_calls(a.value, wrappers) if not a.star else None for a in node.args] + [[node]]
    else:
        return None
    return None if any(p is None for p in parts) else [c for p in parts for c in p]


def _parts(statement: cst.BaseStatement, wrappers: dict[str, _Wrapper]):
    """The statement's small statement and the wrapper calls its value makes, or None where it is of no form
    read here (module doc)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 or isinstance(small, cst.Expr | cst.Return)):
        return None
    calls = _calls(small.value, wrappers) if small.value is not None else None
    return (small, calls) if calls else None


def _rewritten(caller: _Caller, statement: cst.SimpleStatementLine, small, calls: list[cst.Call],
               wrappers: dict[str, _Wrapper]) -> list[cst.BaseStatement] | None:
    out: list[cst.BaseStatement] = []
    values: dict[int, cst.BaseExpression] = {}

    def resolved(node: cst.BaseExpression) -> cst.BaseExpression:
        """The expression with each call made so far replaced by its value."""
        if id(node) in values:
            return values[id(node)]
        if isinstance(node, cst.Call):
            return node.with_changes(args=[a.with_changes(value=resolved(a.value)) for a in node.args])
        if isinstance(node, cst.Tuple):
            return node.with_changes(elements=[e.with_changes(value=resolved(e.value)) for e in node.elements])
        return node

    target = small.targets[0].target if isinstance(small, cst.Assign) else None
    for call in calls:
        whole_value = small.value is call
        made = caller.inlined(wrappers[dotted(call.func)], resolved(call),
                              target.value if whole_value and isinstance(target, cst.Name) else None)
        if made is None:
            return None
        lines, value = made
        out += lines
        if value is None and not (whole_value and isinstance(small, cst.Expr)):
            return None  # a call that returns nothing, its value used
        if not whole_value and not isinstance(value, SIMPLE):  # an argument or a tuple's element: in call order
            name = fresh_name("ret", caller.used)
            out.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)]))
            value = cst.Name(name)
        values[id(call)] = value
    whole = resolved(small.value)
    if isinstance(small, cst.Expr):
        if whole is not None and not isinstance(whole, SIMPLE):
            out.append(statement.with_changes(body=[small.with_changes(value=whole)]))
    elif not (isinstance(target, cst.Name) and isinstance(whole, cst.Name) and whole.value == target.value):
        out.append(statement.with_changes(body=[small.with_changes(value=whole)]))  # not `h = h`
    if out:
        out[0] = out[0].with_changes(leading_lines=statement.leading_lines)
    return out


def _function_of(ms: ModuleSource, node: cst.CSTNode) -> cst.CSTNode | None:
    while (node := ms.parents.get(id(node))) is not None:
        if isinstance(node, cst.FunctionDef | cst.Lambda | cst.ClassDef):
            return node
    return None


def inline(ms: ModuleSource) -> Respelled | None:
    """The module with each host function's calls of launching functions inlined (one level), where that
    puts two launches or more in one function; None where no function has such calls."""
    wrappers = _launching(ms)
    if not wrappers:
        return None
    own = {id(lc.scope) for lc in ms.launches}
    read = set().union(*(w.free for w in wrappers.values()))
    edits: list[tuple[cst.CSTNode, Edit]] = []
    said: list[str] = []
    touched: set[str] = set()
    for scope in ms.scopes[1:]:
        if not isinstance(scope.node, cst.FunctionDef):
            continue
        caller = _Caller(ms, scope, read)
        found = []
        for block in subnodes(scope.node.body, cst.IndentedBlock):
            if _function_of(ms, block) is not scope.node:
                continue  # a nested function's block: its own scope
            for statement in block.body:
                parts = _parts(statement, wrappers)
                if parts is not None and all(dotted(c.func) != scope.node.name.value for c in parts[1]):
                    found.append((statement, *parts))
        launches = sum(len(parts) for _, _, parts in found) + (id(scope) in own)
        if not found or launches < 2:
            continue
        names = []
        for statement, small, calls in found:
            new = _rewritten(caller, statement, small, calls, wrappers)
            if new is not None:
                edits.append((statement, lambda _, new=new: cst.FlattenSentinel(new)))
                names += [dotted(c.func) for c in calls]
        if names:
            said.append(f"{', '.join(dict.fromkeys(names))} inlined in {scope.name}")
            touched.add(scope.top or scope.name)
    if not edits:
        return None
    return Respelled.written(ms, edits, "; ".join(said), frozenset(touched))


def wrapping(rewrite: Callable[[ModuleSource], Found]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, and where it makes no variant of a module, its variants of the module `inline` writes."""
    return respelling(rewrite, inline)
