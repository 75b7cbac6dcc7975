"""Edits of a parsed module that the hand-back's rewrites share (pinning.py, launch_cache.py, dispatch.py): nodes
replaced by identity, parts of an expression by the names of values that compute them, an import added where the module lacks it, and top-level statements put before another."""

from __future__ import annotations

import ast

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.syntax import code, dotted


def expression_key(node: cst.BaseExpression) -> str:
    """What an expression computes, spacing and parentheses aside."""
    return ast.dump(pyast.parse(f"({code(node)})", mode="eval"))


class Named(cst.CSTTransformer):
    """An expression with each part that computes what a named value does (`names`: expression_key -> name)
    replaced by that name."""

    def __init__(self, names: dict[str, str]):
        super().__init__()
        self.names = names

    def on_leave(self, original_node, updated_node):
        if isinstance(original_node, cst.Attribute):  # `x.n`: its attribute is no value of its own
            updated_node = updated_node.with_changes(attr=original_node.attr)
        if not isinstance(original_node, cst.BaseExpression):
            return updated_node
        try:
            name = self.names.get(expression_key(original_node))
        except SyntaxError:  # a part that is no expression on its own
            return updated_node
        return cst.Name(name) if name is not None else updated_node


class Replace(cst.CSTTransformer):
    """Puts, in place of each node whose id is a key of `replace`, the node (or the statements) it maps to; a
    statement mapped to a list becomes those statements."""

    def __init__(self, replace: dict[int, cst.CSTNode | list[cst.BaseStatement]]):
        super().__init__()
        self.replace = replace

    def on_leave(self, original_node, updated_node):
        new = self.replace.get(id(original_node))
        if new is None:
            return updated_node
        if isinstance(new, list):
            return cst.FlattenSentinel(new) if new else cst.RemovalSentinel.REMOVE
        return new


class Unparenthesize(cst.CSTTransformer):
    """Drops the parentheses around a bare name or number (`32768 // (block)`), which say nothing."""

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(lpar=[], rpar=[])

    def leave_Integer(self, original_node, updated_node):
        return updated_node.with_changes(lpar=[], rpar=[])


def imports(module: cst.Module, name: str) -> bool:
    """The module binds `name` by a plain `import name`."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import) and any(
                        dotted(a.name) == name and a.asname is None for a in small.names):
                    return True
    return False


def with_import(module: cst.Module, name: str) -> cst.Module:
    """The module with `import name` before its first import (after its docstring) where it has none."""
    if imports(module, name):
        return module
    body = list(module.body)
    at = next((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
               and any(isinstance(x, cst.Import | cst.ImportFrom) for x in s.body)), None)
    line = cst.parse_statement(f"import {name}\n")
    if at is None:  # no import at all: after the docstring, if any
        at = 1 if body and _docstring(body[0]) else 0
        line = line.with_changes(leading_lines=[cst.EmptyLine()] if at else [])
    else:
        line = line.with_changes(leading_lines=body[at].leading_lines)
        body[at] = body[at].with_changes(leading_lines=[])
    body.insert(at, line)
    return module.with_changes(body=body)


def _docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.SimpleString))


def spaced(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Top-level definitions as they stand between others: two blank lines before each."""
    return [s.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for s in statements]


def shape_tuple(node: cst.BaseExpression) -> bool:
    """`x.shape`, `x.size()`, `x.stride()`: every integer of an input's shape or strides, to unpack."""
    if isinstance(node, cst.Attribute):
        return node.attr.value == "shape" and isinstance(node.value, cst.Name)
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not node.args
            and node.func.attr.value in ("size", "stride") and isinstance(node.func.value, cst.Name))
