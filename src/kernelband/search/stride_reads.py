"""A tensor's strides read once per launch: `a.stride(0), a.stride(1)` passed to a kernel become one
`a_strides = a.stride()` before the launch and `a_strides[0], a_strides[1]` in it.

A matmul's launch passes six strides, each `x.stride(i)` a call into torch of about 120 ns; `x.stride()` reads them
all in one (about 60 ns) and indexing the tuple costs next to nothing, so six reads cost a third of what they did.
The strides are not the shape's (a transposed view has others), so they are read on every call, not cached.

A tensor's reads are gathered where a launch passes two or more of its strides, the tensor is a name the
statement that holds the launch does not assign, and, where that statement is an `if` (a pinned launch and its
fallback), every branch launches with one of its strides at least: `x.stride()` then runs only where a stride of
`x` was read before. The statement is one of the launching function's own, not inside a loop's body or a nested
function.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import contains, fresh_name, loads, subnodes
from kernelband.search.module_edits import Replace

MIN_READS = 2  # a launch's reads of one tensor's strides that one `stride()` is worth


def _stride_read(node: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """(tensor, index) for `x.stride(i)` with `i` a number."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "stride"
            and isinstance(node.func.value, cst.Name) and len(node.args) == 1 and node.args[0].keyword is None
            and not node.args[0].star):
        return None
    index = node.args[0].value
    number = isinstance(index, cst.Integer) or (isinstance(index, cst.UnaryOperation)
                                                and isinstance(index.expression, cst.Integer))
    return (node.func.value.value, index) if number else None


def _reads(launch: Launch) -> list[tuple[cst.Call, str, cst.BaseExpression]]:
    """The stride reads a launch passes as arguments: (the call, the tensor, the index)."""
    found = []
    for arg in launch.call.args:
        read = _stride_read(arg.value)
        if read is not None:
            found.append((arg.value, *read))
    return found


def _branches(statement: cst.BaseStatement) -> list[cst.CSTNode] | None:
    """The parts of a statement one of which runs: the statement itself, or an `if`'s branches (None where an `if`
    has no `else`: no branch may run)."""
    if isinstance(statement, cst.SimpleStatementLine):
        return [statement]
    if not isinstance(statement, cst.If):
        return None
    branches, rest = [statement.body], statement.orelse
    while isinstance(rest, cst.If):
        branches.append(rest.body)
        rest = rest.orelse
    if rest is None:
        return None
    branches.append(rest.body)
    return branches


def _assigned(node: cst.CSTNode) -> set[str]:
    """The names a statement binds anywhere in it."""
    names = set()
    for target in subnodes(node, cst.AssignTarget) + subnodes(node, cst.AnnAssign) + subnodes(node, cst.AugAssign):
        names |= {n.value for n in subnodes(target.target, cst.Name)}
    for target in subnodes(node, cst.NamedExpr) + subnodes(node, cst.For) + subnodes(node, cst.CompFor):
        names |= {n.value for n in subnodes(target.target, cst.Name)}
    return names


def gather_strides(source: str, launches_of) -> tuple[str, list[str]]:
    """The module with each tensor's stride reads at a launch gathered (see the module's docstring), and per
    function changed "f: a.stride(), b.stride() read once"; `launches_of(ms, scope)` gives a function's launches."""
    ms = ModuleSource(source)
    replace: dict[int, cst.CSTNode | list[cst.BaseStatement]] = {}
    summaries = []
    for scope in ms.scopes:
        fn = scope.node
        if not (isinstance(fn, cst.FunctionDef) and fn in ms.module.body and isinstance(fn.body, cst.IndentedBlock)):
            continue
        launches = launches_of(ms, scope)
        taken = set(scope.assigns) | set(scope.params) | {n.value for n in loads(fn)} | set(ms.module_scope.assigns)
        gathered = []
        for statement in fn.body.body:
            branches = _branches(statement)
            mine = [launch for launch in launches if contains(statement, {id(launch.call)})]
            if branches is None or not mine:
                continue
            bound = _assigned(statement)
            every = None  # the tensors every branch reads a stride of
            worth = set()  # the tensors a launch reads MIN_READS strides of
            for branch in branches:
                reads = [read for launch in mine if contains(branch, {id(launch.call)}) for read in _reads(launch)]
                every = {t for _, t, _ in reads} if every is None else every & {t for _, t, _ in reads}
            for launch in mine:
                counts = Counter(t for _, t, _ in _reads(launch))
                worth |= {t for t, n in counts.items() if n >= MIN_READS}
            order = dict.fromkeys(t for launch in mine for _, t, _ in _reads(launch))
            tensors = [t for t in order if t in worth and t in (every or set()) and t not in bound]
            if not tensors:
                continue
            names = {t: fresh_name(f"{t}_strides", taken) for t in tensors}
            for launch in mine:
                for call, tensor, index in _reads(launch):
                    if tensor in names:
                        replace[id(call)] = cst.Subscript(cst.Name(names[tensor]),
                                                          [cst.SubscriptElement(cst.Index(index))])
            lines = [cst.parse_statement(f"{names[t]} = {t}.stride()\n") for t in tensors]
            lines[0] = lines[0].with_changes(leading_lines=statement.leading_lines)
            replace[id(statement)] = lines
            gathered += [f"{t}.stride()" for t in tensors]
        if gathered:
            summaries.append(f"{fn.name.value}: {', '.join(gathered)} read once")
    if not replace:
        return source, []
    return ms.module.visit(_Before(replace)).code, summaries


class _Before(Replace):
    """Replace, where a statement mapped to a list gets those statements before it, its own nodes replaced."""

    def on_leave(self, original_node, updated_node):
        new = self.replace.get(id(original_node))
        if isinstance(new, list):
            return cst.FlattenSentinel([*new, updated_node.with_changes(leading_lines=[])])
        return super().on_leave(original_node, updated_node)
