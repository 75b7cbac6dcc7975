"""Source edits for the rewriter: a `Variant` is a set of node replacements on one parsed module, applied
with libcst so that everything it does not touch keeps its text, comments and formatting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import loads, make_scope

Edit = Callable[[cst.CSTNode], cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel]
NO_SPACE = cst.SimpleWhitespace("")


class Move(NamedTuple):
    """A one-parameter step, as Inductor's coordinate descent takes them: `field` names the block size or launch
    option and where the launch sets it, `step` is "x2", "/2" (block sizes, num_warps), "+1" or "-1"
    (num_stages). A field keeps its name from a parent to its children, so a search can walk it."""

    field: str
    step: str

    @property
    def key(self) -> str:
        return f"{self.field} {self.step}"


@dataclass(frozen=True, eq=False)
class Variant:
    """One concrete rewrite of a module."""

    rewrite: str  # the name of the rewrite that made it
    rationale: str  # what changes, in one line
    touches: frozenset[str]  # the module-level functions and kernels it changes
    edits: tuple[tuple[cst.CSTNode, Edit], ...]
    cleanup: tuple[str, frozenset[str]] | None = None  # (function, locals to drop once nothing reads them)
    move: Move | None = None  # the one-parameter step it is, if it is one

    def apply(self, source: ModuleSource) -> str:
        new = source.module.visit(_Apply(self.edits, source.ancestors(node for node, _ in self.edits)))
        if self.cleanup is not None:
            new = new.visit(_DropDeadLocals(*self.cleanup))
        return new.code


@dataclass(frozen=True, eq=False)
class Composed(Variant):
    """A variant whose text is written already: one rewrite's variant with a follow-up rewrite of the module it
    makes (`rewrites.divisibility_hints.aligned`), which reads that module, not the one the edits were found on."""

    text: str = ""

    def apply(self, source: ModuleSource) -> str:
        return self.text


@dataclass
class Found:
    """What one rewrite makes of a module: its variants, and why there are not more."""

    variants: list[Variant]
    reasons: list[str]


def carried(rewrite: Callable[[ModuleSource], Found], follow: Callable[[ModuleSource], Found],
            short: Callable[[str], str], rounds: Callable[[ModuleSource], int]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, each of its variants followed by `follow` wherever it applies to the module the variant makes:
    `follow`'s first variant, then its first on the module that one makes, up to `rounds(module)` times (each
    round's edits are found on the module the last one made). `short` cuts a follow-up's rationale to the clause
    that joins the variant's. `.plain` is the rewrite alone, for a reader of its own text."""
    def carrying(ms: ModuleSource) -> Found:
        found = rewrite(ms)
        return Found([followed(ms, variant, follow, short, rounds(ms)) for variant in found.variants], found.reasons)
    carrying.plain = getattr(rewrite, "plain", rewrite)
    return carrying


@dataclass(frozen=True, eq=False)
class Respelled:
    """The module written another way that computes the same (literal tiles as constexprs, helper calls
    inlined), for the rewrites that read only that way."""

    ms: ModuleSource
    why: str  # what was written otherwise, for a variant's rationale
    touches: frozenset[str]

    @staticmethod
    def written(ms: ModuleSource, edits: Sequence[tuple[cst.CSTNode, Edit]], why: str,
                touches: frozenset[str]) -> Respelled | None:
        """The module with the edits applied, parsed again; None where it does not parse."""
        try:
            return Respelled(ModuleSource(Variant("respell", why, touches, tuple(edits)).apply(ms)), why, touches)
        except cst.ParserSyntaxError:
            return None


def respelling(rewrite: Callable[[ModuleSource], Found],
               respell: Callable[[ModuleSource], Respelled | str | None]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, and where it makes no variant of a module, its variants of the module `respell` writes, each
    including the respelling (its reasons then those of the respelled module). `respell` may say instead why
    it cannot write the module otherwise: that joins the rewrite's reasons."""
    def run(ms: ModuleSource) -> Found:
        found = rewrite(ms)
        if found.variants:
            return found
        other = respell(ms)
        if not isinstance(other, Respelled):
            return Found(found.variants, [*found.reasons, other]) if other else found
        again = rewrite(other.ms)
        if not again.variants:
            return found
        return Found([Composed(v.rewrite, f"{other.why}; {v.rationale}", v.touches | other.touches, (),
                               move=v.move, text=v.apply(other.ms)) for v in again.variants], again.reasons)
    run.plain = getattr(rewrite, "plain", rewrite)
    return run


def followed(ms: ModuleSource, variant: Variant, follow: Callable[[ModuleSource], Found],
             short: Callable[[str], str], rounds: int) -> Variant:
    text, stated = variant.apply(ms), []
    for _ in range(rounds):
        try:
            made = ModuleSource(text)
        except cst.ParserSyntaxError:
            break
        found = follow(made)
        if not found.variants:
            break
        text = found.variants[0].apply(made)
        stated.append(found.variants[0])
    if not stated:
        return variant
    rationale = "; ".join(short(step.rationale) for step in stated)
    return Composed(variant.rewrite, f"{variant.rationale}; and {rationale}",
                    variant.touches.union(*(step.touches for step in stated)), (), move=variant.move, text=text)


class _Apply(cst.CSTTransformer):
    def __init__(self, edits: Sequence[tuple[cst.CSTNode, Edit]], paths: set[int]) -> None:
        super().__init__()
        self.paths = paths  # the edited nodes and their ancestors: the rest of the tree is left as it is
        self.edits: dict[int, list[Edit]] = {}
        for node, edit in edits:
            self.edits.setdefault(id(node), []).append(edit)

    def on_visit(self, node) -> bool:
        return id(node) in self.paths

    def on_leave(self, original_node, updated_node):
        for edit in self.edits.get(id(original_node), ()):
            updated_node = edit(updated_node)
        return updated_node


class _DropDeadLocals(cst.CSTTransformer):
    """Removes `name = value` lines of one function once nothing in it reads `name` any more."""

    def __init__(self, function: str, names: frozenset[str]) -> None:
        super().__init__()
        self.function, self.names = function, names

    def leave_FunctionDef(self, original_node, updated_node):
        if updated_node.name.value != self.function:
            return updated_node
        body = list(updated_node.body.body)
        while (index := self._dead(updated_node.with_changes(body=updated_node.body.with_changes(body=body)),
                                   body)) is not None:
            del body[index]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def _dead(self, function: cst.FunctionDef, body: list) -> int | None:
        read = {n.value for n in loads(*body)}
        assigns = make_scope(function, None).assigns
        for index, statement in enumerate(body):
            target = _assigned_name(statement)
            if target in self.names and target not in read and len(assigns.get(target, [])) == 1:
                return index
        return None


def _assigned_name(statement: cst.CSTNode) -> str | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        assign = statement.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target,
                                                                                       cst.Name):
            return assign.targets[0].target.value
    return None


# -- building blocks ----------------------------------------------------------------------------------------
def set_int(value: int) -> Edit:
    return lambda node: node.with_changes(value=str(value))


def replace_with(expression: str, parenthesize: bool = False) -> Edit:
    new = cst.parse_expression(f"({expression})" if parenthesize else expression)
    return lambda node: new


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=NO_SPACE, whitespace_after=NO_SPACE))


def appended(items: Sequence, new) -> list:
    """`items` + [new], with the separators of a one-per-line list (and a trailing comma) kept as they were."""
    items = list(items)
    if not items:
        return [new]
    last = items[-1]
    if len(items) >= 2 and isinstance(items[-2].comma, cst.Comma):
        separator = items[-2].comma
    else:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new = new.with_changes(comma=last.comma)
    if isinstance(last, cst.Arg):  # the space before ")" follows the last argument
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
        last = last.with_changes(whitespace_after_arg=NO_SPACE)
    return [*items[:-1], last.with_changes(comma=separator), new]


def with_params(params: cst.Parameters, new: Sequence[cst.Param]) -> cst.Parameters:
    """`params` with `new` after the last parameter without a default, before those with one (a constexpr
    `BLOCK: tl.constexpr = 128`, or the bits divisibility_hints adds), which Python keeps last. Valid where
    every launch passes the defaulted ones by keyword or not at all (`defaults_by_keyword`)."""
    items = list(params.params)
    cut = next((i for i, p in enumerate(items) if p.default is not None), len(items))
    head, tail = items[:cut], items[cut:]
    for param in new:
        head = appended(head, param)
    if head and tail and not isinstance(head[-1].comma, cst.Comma):
        head[-1] = head[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return params.with_changes(params=[*head, *tail])


def defaults_by_keyword(params: cst.Parameters, calls: Sequence[cst.Call]) -> bool:
    """Whether no call passes a parameter that has a default by position: parameters added before those
    (`with_params`) then bind what they bound before."""
    required = sum(p.default is None for p in params.params)
    if required == len(params.params):
        return True
    return all(not any(a.star == "*" for a in call.args)  # `*args`: how many it passes is unknown
               and sum(a.keyword is None and not a.star for a in call.args) <= required for call in calls)


def without(items: Sequence, indices: set[int]) -> list:
    """`items` less those at `indices`; a removed last item hands its trailing comma (and the space before
    the closing bracket) to the new last."""
    kept = [item for i, item in enumerate(items) if i not in indices]
    if kept and len(items) - 1 in indices:
        end = {"comma": items[-1].comma}
        if isinstance(items[-1], cst.Arg):
            end["whitespace_after_arg"] = items[-1].whitespace_after_arg
        kept[-1] = kept[-1].with_changes(**end)
    return kept


def set_kwarg(name: str, value: str) -> Edit:
    """Set a keyword argument of a call, adding it when absent."""
    def edit(call: cst.Call) -> cst.Call:
        args = list(call.args)
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == name:
                args[i] = arg.with_changes(value=cst.parse_expression(value))
                return call.with_changes(args=args)
        return call.with_changes(args=appended(args, keyword_arg(name, cst.parse_expression(value))))
    return edit


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, cst.Name | cst.Integer | cst.Subscript | cst.Call | cst.Attribute) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def statements(text: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(text).body)
