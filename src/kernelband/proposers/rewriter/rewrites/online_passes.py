"""A max pass followed by an exp-sum pass over the same row (`reductions.Softmax`, form "two_pass") as one
pass that keeps the running max and rescales the sum as the max grows:

    for start in range(0, n, BLOCK):            for start in range(0, n, BLOCK):
        x = LOAD                                    m_prev = m
        m = tl.maximum(m, tl.max(x, 0))             x = LOAD
    s = 0.0                              ->         m = tl.maximum(m, tl.max(x, 0))
    for start in range(0, n, BLOCK):                y = LOAD
        y = LOAD                                    s = rescaled(s, m_prev, m) + tl.sum(tl.exp(y - m), 0)
        s += tl.sum(tl.exp(y - m), 0)

The sum pass's statements run in the max pass's iteration, after it, with the max read as it stands after
that iteration; `rescaled(s, old, new)` multiplies the sum by exp(scale * (old - new)). Where both running
values are tiles of the same shape (a lane per element, reduced after the loop), each lane keeps its own max
and sum, and after the loop the lanes are rescaled to the row's max. Any loop form (for, while, range over
cdiv) and spelling: the passes are found by meaning, and the merge needs only that they walk the same
iterations, that the sum pass carries nothing else, and that what runs between the passes does not tie them.

`rescaled` keeps what a lane or row that has seen only masked elements (-inf) gives: its sum is dropped (0)
when its max first becomes finite, and a row that is -inf throughout sums exp(-inf - -inf) = NaN as before.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.iterations import index_alias, same_blocks
from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.reductions import Exponent, Softmax, normal, source_of
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, dotted, fresh_name, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import tl_name
from kernelband.proposers.rewriter.edits import Variant, statements

NEG_INF = 'float("-inf")'


def rescaled(tl: str, total: str, old: str, new: str, exponent: Exponent) -> str:
    """A sum taken against max `old`, taken against max `new` instead (exponent's base and scale)."""
    scale = exponent.scale
    if isinstance(scale, ast.Constant) and scale.value == 1:
        factor = f"{tl}.{exponent.base}({old} - {new})"
    else:
        factor = f"{tl}.{exponent.base}(({old} - {new}) * ({source_of(scale, tl)}))"
    return f"{tl}.where({old} == {new}, {total}, {tl}.where({old} == {NEG_INF}, 0.0, {total} * {factor}))"


def scale_code(exponent: Exponent, tl: str) -> str | None:
    """The exponent's scale as code; None where it reads something code cannot name."""
    return "1" if isinstance(exponent.scale, ast.Constant) and exponent.scale.value == 1 else \
        source_of(exponent.scale, tl)


def _names(*nodes: cst.CSTNode) -> set[str]:
    return {n.value for n in loads(*nodes)}


def _free(statements_: list[cst.CSTNode]) -> set[str]:
    """Names the statements read before they assign them."""
    free, bound = set(), set()
    for statement in statements_:
        reads = _names(statement)
        if isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, cst.AugAssign) for s in statement.body):
            reads |= assigned(statement)
        free |= reads - bound
        bound |= assigned(statement)
    return free


def _step(loop: Loop) -> cst.CSTNode | None:
    """A while loop's last statement, `var += step` (None for a for loop)."""
    if not isinstance(loop.node, cst.While):
        return None
    last = loop.body[-1]
    return last if loop.var in assigned(last) else None


class _Replace(cst.CSTTransformer):
    """Reads of the max (by name or inline) as reads of `name`."""

    def __init__(self, kernel: Kernel, value: ast.AST, name: str) -> None:
        self.values, self.want, self.name = facts_of(kernel).values, ast.unparse(normal(value)), name

    def _is_max(self, node: cst.BaseExpression) -> bool:
        try:
            return ast.unparse(normal(self.values.expand(node))) == self.want
        except SyntaxError:
            return False

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return cst.Name(self.name) if self._is_max(original_node) else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return cst.Name(self.name) if self._is_max(original_node) else updated_node

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return True


def merge(kernel: Kernel, entry: Softmax) -> Variant | str:
    """The variant that makes the two passes one, or the fact that stands in the way."""
    name, ms = kernel.name, kernel.ms
    first, second, top, total = entry.max.loop, entry.sum.loop, entry.max, entry.sum
    block = ms.parents.get(id(first.node))
    if block is not ms.parents.get(id(second.node)) or not isinstance(block, cst.IndentedBlock):
        return f"{name}'s max pass and sum pass are not in one block of statements"
    body = list(block.body)
    i, j = body.index(first.node), body.index(second.node)
    values = facts_of(kernel).values
    if first.exits or second.exits or first.node.orelse is not None or second.node.orelse is not None:
        return f"{name}'s max pass or sum pass leaves its loop early"
    same_walk = (first.form == second.form or {first.form, second.form} == {"range", "while"}) and all(
        a is not None and b is not None and ast.unparse(a) == ast.unparse(b)
        for a, b in ((first.start, second.start), (first.end, second.end), (first.step, second.step)))
    if first.form == "cdiv" and second.form == "cdiv":
        same_walk = ast.unparse(values.expand(first.node.iter)) == ast.unparse(values.expand(second.node.iter))
    mixed = not same_walk and same_blocks(first, second)  # one counts offsets, the other block indices
    if not (same_walk or mixed) or first.var is None or second.var is None or mixed and first.var == second.var:
        return f"{name}'s max pass and sum pass do not walk the same iterations"
    if any(c.kind not in ("increment",) and c.name != total.name for c in second.carried.values()):
        return f"{name}'s sum pass carries more than its sum"
    sum_body = [s for s in second.body if s is not _step(second)]
    if any(subnodes(s, cst.If) or subnodes(s, cst.For) or subnodes(s, cst.While) for s in sum_body) or any(
            kernel.is_tl(c.func, "store") or (dotted(c.func) or "").rpartition(".")[2].startswith("atomic_")
            for s in sum_body for c in subnodes(s, cst.Call)):
        return f"{name}'s sum pass does more than sum (a branch, a loop or a store)"
    start = values.env_at(second.node).get(total.name)
    if start is None or not _zero(start):
        return f"{name}'s sum {total.name} does not start from 0 before its pass"
    first_step = _step(first)
    if isinstance(first.node, cst.While) and first_step is None or isinstance(second.node, cst.While) \
            and _step(second) is None:
        return f"{name}'s while loop does not end by stepping its variable"
    between = body[i + 1:j]
    if not all(isinstance(s, cst.SimpleStatementLine) for s in between):
        return f"{name} branches or loops between its max pass and its sum pass"
    # Pointers both passes advance alike, set back between them to where the max pass started them: one advance
    # after the merged body serves both, and the setting back is left out.
    pointers, restated, advances = _shared_pointers(kernel, first, second, between)
    between = [s for s in between if s not in restated]
    sum_body = [s for s in sum_body if s not in advances[1]]
    # What runs between: before the merged loop unless it reads what the max pass computes.
    made = assigned(*first.body) | {first.var, *first.carried}
    early, late = [], []
    for statement in between:
        (late if _names(statement) & made else early).append(statement)
        if late and late[-1] is statement:
            made |= assigned(statement)
    late_names = assigned(*late)
    loop_var = {second.var} if isinstance(second.node, cst.While) else set()
    if assigned(*early) - loop_var & (_names(*first.body, first.node) | assigned(*first.body)):
        return f"{name} sets, between the passes, a value its max pass reads"
    if _names(*late) & assigned(*second.body) - {total.name}:
        return f"{name} reads, between the passes, a value its sum pass sets"
    tl = kernel.tl_name
    used = set(kernel.names)
    lanes = top.lanes and total.lanes and facts_of(kernel).shapes.of_name(top.name) == \
        facts_of(kernel).shapes.of_name(total.name)
    exponent = entry.exponent
    if scale_code(exponent, tl) is None:
        return f"{name}'s exponent scale is computed in the kernel"
    prev = fresh_name(f"{top.name}_prev", used)
    head, tail, after = [], [], []
    if lanes or not top.lanes:  # the running max itself: each lane's (lanes) or the row's (one value)
        current = top.name
        head = statements(f"{prev} = {top.name}\n")
        if lanes:  # after the loop, each lane's sum against the row's max (by the name a statement gives it)
            row_max = next((n for n in _names_of(kernel, late, top.value)), source_of(top.value, tl))
            after = statements(f"{total.name} = {rescaled(tl, total.name, top.name, row_max, exponent)}\n")
    else:  # lanes of maxima, a sum of one value per row: the row's max so far, once per iteration
        current = fresh_name(f"{top.name}_row", used)
        row_max = source_of(top.value, tl)
        if row_max is None:
            return f"{name}'s row max is computed where code cannot name it"
        head = statements(f"{prev} = {current}\n")
        tail = statements(f"{current} = {row_max}\n")
        early = early + statements(f"{current} = {row_max}\n")
    free = _free(sum_body) - {second.var} - pointers
    if free & (assigned(*first.body) | late_names) - {top.name} and not all(
            _reads_only_max(kernel, s, top.value, free & (assigned(*first.body) | late_names)) for s in sum_body):
        return f"{name}'s sum pass reads a value of its max pass other than the max"
    replace = _Replace(kernel, top.value, current)
    merged_sum = []
    for statement in sum_body:
        if total.name in assigned(statement):
            term = _term(statement, total.name)
            if term is None:
                return f"{name}'s sum pass does not add to its sum"
            term = term.visit(replace)
            merged_sum += statements(f"{total.name} = {rescaled(tl, total.name, prev, current, exponent)} + "
                                     f"({code(term)})\n")
        else:
            merged_sum.append(statement.visit(replace))
    alias = statements(index_alias(first, second) if mixed else f"{second.var} = {first.var}\n") \
        if second.var != first.var else []
    first_body = [s for s in first.body if s is not first_step and s not in advances[0]]
    new_body = [*head, *first_body, *tail, *alias, *merged_sum, *advances[0],
                *([first_step] if first_step is not None else [])]
    merged = first.node.with_changes(body=first.node.body.with_changes(body=new_body))
    later = body[j + 1:]
    if not _later_reads_ok(later, assigned(*sum_body) - {total.name} | ({second.var} if alias else set())):
        return f"{name} reads, after the passes, a value its sum pass leaves behind"
    result = [*body[:i], *early, merged, *late, *after, *later]
    edit = (block, lambda node, result=result: node.with_changes(body=result))
    kind = "lane by lane" if lanes else "per row"
    return Variant("online_softmax", f"{name}'s max pass and exp-sum pass over its row as one pass with a running max "
                   f"({top.name}) and a rescaled sum ({total.name}), {kind}", frozenset({name}), (edit,))


def _shared_pointers(kernel: Kernel, first: Loop, second: Loop, between: list[cst.CSTNode]) -> tuple:
    """(names, statements between the passes that set them back, (each pass's statements that advance them)) for
    the values both passes advance by the same fixed step at the end of their bodies (`ptrs += BLOCK`), where
    every statement between the passes that sets one sets it to the value it had as the max pass began: in
    each iteration the sum pass reads them as the max pass does."""
    values = facts_of(kernel).values
    names, restated, advances = set(), [], ([], [])
    for name, carried in sorted(second.carried.items()):
        mine = first.carried.get(name)
        if carried.kind != "increment" or mine is None or mine.kind != "increment" \
                or ast.dump(normal(carried.term)) != ast.dump(normal(mine.term)):
            continue
        steps = [_advance(loop, name) for loop in (first, second)]
        sets = [s for s in between if name in assigned(s)]
        start = values.env_at(first.node).get(name)
        if None in steps or start is None or not sets or not all(
                _sets_to(values, s, name, start) for s in sets) or _names(*between) & {name}:
            continue
        names.add(name)
        restated += sets
        advances[0].append(steps[0])
        advances[1].append(steps[1])
    return names, restated, advances


def _advance(loop: Loop, name: str) -> cst.CSTNode | None:
    """The statement `name += step` of a loop's body, where no statement after it but the loop's own step and
    other such advances reads or sets name."""
    body = [s for s in loop.body if s is not _step(loop)]
    found = [i for i, s in enumerate(body) if name in assigned(s)]
    if len(found) != 1 or not (isinstance(body[found[0]], cst.SimpleStatementLine) and len(body[found[0]].body) == 1
                               and isinstance(body[found[0]].body[0], cst.AugAssign)
                               and isinstance(body[found[0]].body[0].operator, cst.AddAssign)):
        return None
    return None if name in _names(*body[found[0] + 1:]) else body[found[0]]


def _sets_to(values, statement: cst.CSTNode, name: str, start: ast.AST) -> bool:
    """Whether a statement is `name = E` alone, E the value `start` (canonical)."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1
            and dotted(statement.body[0].targets[0].target) == name):
        return False
    return ast.dump(normal(values.expand(statement.body[0].value))) == ast.dump(normal(start))


def _names_of(kernel: Kernel, lines: list[cst.CSTNode], value: ast.AST) -> list[str]:
    """Names that these statements assign this value to (`m = tl.max(acc, axis=0)`)."""
    values, want = facts_of(kernel).values, ast.unparse(normal(value))
    return [small.targets[0].target.value for line in lines for small in line.body
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
            and ast.unparse(normal(values.expand(small.value))) == want]


def _zero(value: ast.AST) -> bool:
    """0, 0.0, tl.zeros(...), tl.full(shape, 0, ...)."""
    if isinstance(value, ast.Constant):
        return value.value == 0
    name = tl_name(value)
    if name == "zeros":
        return True
    fill = value.args[1] if name == "full" and len(value.args) > 1 else next(
        (k.value for k in getattr(value, "keywords", []) if k.arg == "value"), None) if name == "full" else None
    return fill is not None and _zero(fill)


def _term(statement: cst.CSTNode, total: str) -> cst.BaseExpression | None:
    """What a statement adds to the sum: `s += T`, `s = s + T`, `s = T + s`."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    small = statement.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
        return small.value
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.BinaryOperation) \
            and isinstance(small.value.operator, cst.Add):
        left, right = small.value.left, small.value.right
        if dotted(left) == total and total not in _names(right):
            return right
        if dotted(right) == total and total not in _names(left):
            return left
    return None


def _reads_only_max(kernel: Kernel, statement: cst.CSTNode, value: ast.AST, names: set[str]) -> bool:
    """Every read of `names` in the statement is a read of the max."""
    values = facts_of(kernel).values
    want = ast.unparse(normal(value))
    return all(ast.unparse(normal(values.expand(n))) == want for n in loads(statement) if n.value in names)


def _later_reads_ok(rest: list[cst.CSTNode], names: set[str]) -> bool:
    """Whether the statements after the passes read `names` only after assigning them (a later loop that sets
    them first): the merged pass leaves other values in them."""
    pending = set(names)
    for statement in rest:
        if isinstance(statement, cst.For | cst.While):
            header = statement.iter if isinstance(statement, cst.For) else statement.test
            target = {n.value for n in subnodes(statement.target, cst.Name)} if isinstance(statement, cst.For) else set()
            if _names(header) & pending or _free(list(statement.body.body)) - target & pending:  # the target is set first
                return False
        elif _names(statement) & pending:
            return False
        pending -= assigned(statement)
    return True
