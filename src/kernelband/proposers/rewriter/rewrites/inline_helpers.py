"""A kernel's calls of its @triton.jit helpers written out in its body, for the rewrites that merge or split
loops: a softmax whose max pass is one helper and whose exp-sum pass is another has both passes in one body once
the helpers are inlined, which is where online_softmax, split_rows and single_pass read loops.

A call is inlined where it is a statement of its own (`m = _row_max(p, n, BLOCK)`, `a, b = _stats(...)`, or a
bare call) and the helper's body ends in its one `return` (or has none). The helper's locals take names the
kernel does not use; a parameter the helper never assigns reads the caller's argument directly where that is a
name or a number (a constexpr stays a constexpr the analysis can follow), else a local bound to the argument
first. Triton inlines every helper call when it compiles, so the module computes the same. `inlining(rewrite)`
runs a rewrite on the module as written and, where it makes nothing, on the module with the helpers inlined.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    assigned,
    docstring,
    dotted,
    fresh_name,
    plain_signature,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Edit, Found, Respelled, respelling


class Renamed(cst.CSTTransformer):
    """Names replaced by a mapping: reads and assignments alike; attributes and keywords kept."""

    def __init__(self, mapping: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.mapping.get(updated_node.value, updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)


def _inlinable(helper: Kernel) -> bool:
    """One return, the body's last statement (or none), no nested function, no *args or **kwargs."""
    body = helper.node.body.body
    returns = subnodes(helper.node.body, cst.Return)
    if not plain_signature(helper.node.params):
        return False
    if subnodes(helper.node.body, cst.FunctionDef) or subnodes(helper.node.body, cst.Lambda):
        return False
    if not returns:
        return True
    last = body[-1] if body else None
    return len(returns) == 1 and isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 \
        and last.body[0] is returns[0] and returns[0].value is not None


def _call_of(statement: cst.BaseStatement, ms: ModuleSource) -> tuple[cst.Call, Kernel, cst.BaseExpression | None] | None:
    """The helper call a statement is (with what it assigns to), or None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call):
        call, target = small.value, small.targets[0].target
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call, target = small.value, None
    else:
        return None
    helper = ms.kernels.get(dotted(call.func) or "")
    if helper is None or not _inlinable(helper) or any(a.star for a in call.args):
        return None
    return call, helper, target


def bindings(signature: cst.Parameters, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """Each parameter's argument (a default where none is passed); None where the call does not bind them all."""
    params = signature.params
    bound: dict[str, cst.BaseExpression] = {}
    positional = [a.value for a in call.args if a.keyword is None]
    if len(positional) > len(params):
        return None
    for param, value in zip(params, positional):
        bound[param.name.value] = value
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value in bound or arg.keyword.value not in {p.name.value for p in params}:
                return None
            bound[arg.keyword.value] = arg.value
    for param in params:
        if param.name.value not in bound:
            if param.default is None:
                return None
            bound[param.name.value] = param.default
    return bound


def _inlined(helper: Kernel, call: cst.Call, target: cst.BaseExpression | None,
             used: set[str]) -> list[cst.BaseStatement] | None:
    bound = bindings(helper.node.params, call)
    if bound is None:
        return None
    written = assigned(helper.node.body)
    mapping: dict[str, cst.BaseExpression] = {}
    head: list[cst.BaseStatement] = []
    for name, value in bound.items():
        if name not in written and isinstance(value, (cst.Name, cst.Integer, cst.Float)):
            mapping[name] = value
        else:
            local = fresh_name(name, used)
            mapping[name] = cst.Name(local)
            head.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(local))], value)]))
    for name in sorted(written - set(bound)):
        mapping[name] = cst.Name(fresh_name(name, used))
    body = [s.visit(Renamed(mapping)) for s in helper.node.body.body if not docstring(s)]
    if body and isinstance(body[-1], cst.SimpleStatementLine) and isinstance(body[-1].body[0], cst.Return):
        value = body.pop().body[0].value
        if target is not None:
            body.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], value)]))
    elif target is not None:
        return None  # a helper that returns nothing, assigned: leave it to Triton
    return [*head, *body]


def inline(ms: ModuleSource) -> Respelled | None:
    """The module with every kernel's statement-level helper calls inlined (one level: a helper's own calls
    stay); None where no kernel has one."""
    edits: list[tuple[cst.CSTNode, Edit]] = []
    said: list[str] = []
    touched: set[str] = set()
    for kernel in ms.kernels.values():
        if not ms.launches_of(kernel):
            continue  # a helper itself, or a kernel launched elsewhere: nothing here reads its loops
        used = set(kernel.names) | {p.name for p in kernel.params}
        names = []
        for block in subnodes(kernel.node.body, cst.IndentedBlock):
            for statement in block.body:
                found = _call_of(statement, ms)
                new = _inlined(found[1], found[0], found[2], used) if found else None
                if new:
                    edits.append((statement, lambda _, new=new: cst.FlattenSentinel(new)))
                    names.append(found[1].name)
        if names:
            said.append(f"{', '.join(dict.fromkeys(names))} inlined in {kernel.name}")
            touched.add(kernel.name)
    if not edits:
        return None
    return Respelled.written(ms, edits, "; ".join(said), frozenset(touched))


def inlining(rewrite: Callable[[ModuleSource], Found]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, and where it makes no variant of a module, its variants of the module `inline` writes."""
    return respelling(rewrite, inline)
