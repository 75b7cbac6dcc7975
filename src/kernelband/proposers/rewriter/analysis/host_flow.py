"""The control flow of a host function around its launches: where each statement sits (the blocks of `if`,
loops, `with` and `try` that hold it), how two launches follow each other, the value a name has where a launch
reads it, and a launch's grid as host code:

    inter[grid](q, k, g, A)              inter, then intra: a sequence (through `if K <= 256`)
    if K <= 256:                         inter, then split: a sequence too (through its `else`)
        intra[grid](q, k, g, A)          intra and split: alternatives (two branches: no run makes both)
    else:
        split[grid](q, k, g, A_intra)
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Launch
from kernelband.proposers.rewriter.analysis.syntax import Scope, assigned, code, dotted, loads, subnodes


@dataclass(frozen=True, eq=False)
class Step:
    """A statement's place in one block: the function or compound statement that holds the block, which of its
    blocks (`body`, `orelse`, `handler0`, `else`, `finally`), the block's statements, and its index there."""

    owner: cst.CSTNode
    part: str
    block: tuple[cst.BaseStatement, ...]
    index: int

    @property
    def statement(self) -> cst.BaseStatement:
        return self.block[self.index]


Path = tuple[Step, ...]  # from the function's body to a statement


@dataclass(frozen=True)
class Order:
    """How two launches of one function follow each other. A sequence: the first one's line is in a block that
    holds, further on, the second one or a chain of `if` statements (entered through `branches`) that leads to
    it; `between` is every statement run between the two, `tests` the conditions evaluated on the way."""

    kind: str  # "sequence", "alternative" (no run makes both) or "apart" (a loop, a `with` or a `try` between)
    why: str = ""
    between: tuple[cst.BaseStatement, ...] = ()
    branches: tuple[Step, ...] = ()  # each `if` entered, with the part taken
    tests: tuple[cst.BaseExpression, ...] = ()


def _parts(statement: cst.BaseCompoundStatement) -> list[tuple[str, tuple]]:
    """The blocks of a compound statement that run where it stands (not the bodies of nested functions)."""
    if isinstance(statement, cst.If):
        parts = [("body", tuple(statement.body.body))]
        if isinstance(statement.orelse, cst.If):
            parts.append(("orelse", (statement.orelse,)))
        elif statement.orelse is not None:
            parts.append(("orelse", tuple(statement.orelse.body.body)))
        return parts
    if isinstance(statement, cst.For | cst.While):
        parts = [("body", tuple(statement.body.body))]
        if statement.orelse is not None:
            parts.append(("orelse", tuple(statement.orelse.body.body)))
        return parts
    if isinstance(statement, cst.With):
        return [("body", tuple(statement.body.body))]
    if isinstance(statement, cst.Try):
        parts = [("body", tuple(statement.body.body))]
        parts += [(f"handler{i}", tuple(h.body.body)) for i, h in enumerate(statement.handlers)]
        if statement.orelse is not None:
            parts.append(("else", tuple(statement.orelse.body.body)))
        if statement.finalbody is not None:
            parts.append(("finally", tuple(statement.finalbody.body.body)))
        return parts
    return []


def header(node: cst.CSTNode) -> str:
    """The first line of a compound statement, for a reason: `if K <= 256`, `with torch.cuda.device(d)`."""
    if isinstance(node, cst.If):
        return f"if {code(node.test).strip()}"
    if isinstance(node, cst.While):
        return f"while {code(node.test).strip()}"
    if isinstance(node, cst.For):
        return f"for {code(node.target).strip()} in {code(node.iter).strip()}"
    if isinstance(node, cst.With):
        return "with " + ", ".join(code(item.item).strip() for item in node.items)
    if isinstance(node, cst.Try):
        return "try"
    return type(node).__name__.lower()


def paths(scope: Scope) -> dict[int, Path]:
    """The path of every statement of a function, by the statement's id."""
    found: dict[int, Path] = {}

    def walk(owner: cst.CSTNode, part: str, block: tuple, prefix: Path) -> None:
        for index, statement in enumerate(block):
            step = Step(owner, part, block, index)
            found[id(statement)] = prefix + (step,)
            if isinstance(statement, cst.BaseCompoundStatement) and not isinstance(
                    statement, cst.FunctionDef | cst.ClassDef):
                for name, body in _parts(statement):
                    walk(statement, name, body, prefix + (step,))

    node = scope.node
    walk(node, "body", tuple(node.body.body), ())
    return found


def order(pa: Path, pb: Path, a: str, b: str) -> Order:
    """How the statement at path `pb` follows the one at `pa` (which comes first in the source); `a` and `b`
    name them in reasons."""
    k = 0
    while k < min(len(pa), len(pb)) and pa[k].owner is pb[k].owner and pa[k].part == pb[k].part \
            and pa[k].index == pb[k].index:
        k += 1
    if k == len(pa) or k == len(pb):
        return Order("apart", f"the {a} and the {b} are one statement")
    sa, sb = pa[k], pb[k]
    if sa.part != sb.part:
        if isinstance(sa.owner, cst.If):
            return Order("alternative", f"the {a} and the {b} are in two branches of `{header(sa.owner)}`: no run "
                                        "makes both")
        if isinstance(sa.owner, cst.Try):
            return Order("alternative", f"the {b} runs where the {a} raised (`try`): no run makes both")
        return Order("apart", f"the {a} and the {b} are in two parts of `{header(sa.owner)}`")
    if len(pa) > k + 1:
        return Order("apart", f"the {a} runs inside `{header(sa.statement)}`, which the {b} is not in")
    between = list(sa.block[sa.index + 1:sb.index])
    branches, tests = [], []
    for step in pb[k + 1:]:
        if not isinstance(step.owner, cst.If):
            kind = "a loop" if isinstance(step.owner, cst.For | cst.While) else f"`{header(step.owner)}`"
            return Order("apart", f"the {b} runs inside {kind}, which the {a} is not in")
        branches.append(step)
        tests.append(step.owner.test)
        between.extend(step.block[:step.index])
    return Order("sequence", "", tuple(between), tuple(branches), tuple(tests))


def next_pairs(orders: dict[tuple[int, int], Order], count: int) -> list[tuple[int, int]]:
    """(i, j) for each statement j that can run next after i: a sequence with no other of the `count` between
    them on that run."""
    return [(i, j) for (i, j), o in orders.items() if o.kind == "sequence" and not any(
        orders[i, m].kind == "sequence" and orders[m, j].kind == "sequence" for m in range(i + 1, j))]


def reaching(name: str, path: Path) -> cst.BaseExpression | None:
    """The value of `name` at a statement: its last assignment before it on the way there, where that is one
    plain `name = value` line; None where a compound statement or a parameter gives it."""
    for step in reversed(path):
        for statement in reversed(step.block[:step.index]):
            if name not in assigned(statement):
                continue
            smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
            small = next(s for s in reversed(smalls) if name in assigned(s))
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                return small.value
            return None
    return None


def grid(launch: Launch, path: Path) -> tuple[list[str] | None, str]:
    """The grid of a launch as the host code of each dimension, evaluated where the launch is (a tuple, a name
    bound to one, or `lambda meta: ...` reading only constexprs the launch passes); else None and why."""
    dims = launch.grid
    if len(dims) != 1 or isinstance(launch.subscript.slice[0].comma, cst.Comma):  # kernel[a, b], kernel[n,]
        return [code(g).strip() for g in dims], ""
    node = dims[0]
    if isinstance(node, cst.Name):
        node = reaching(node.value, path)
    if isinstance(node, cst.Lambda):
        return _meta_grid(launch, node)
    if isinstance(node, cst.Tuple | cst.List):
        return [code(e.value).strip() for e in node.elements], ""
    return None, f"the grid of the {launch.where} is not a value known where it launches"


def _meta_grid(launch: Launch, node: cst.Lambda) -> tuple[list[str] | None, str]:
    kernel = launch.kernel
    if len(node.params.params) != 1 or not isinstance(node.body, cst.Tuple | cst.List):
        return None, f"the grid of the {launch.where} is not a tuple known where it launches"
    meta, body = node.params.params[0].name.value, node.body
    values: dict[int, str] = {}
    for sub in subnodes(body, cst.Subscript):
        if dotted(sub.value) != meta:
            continue
        key = sub.slice[0].slice.value if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) \
            else None
        given = launch.value(key.evaluated_value) if isinstance(key, cst.SimpleString) else None
        if given is None or kernel.autotune is not None or kernel.heuristics:
            return None, f"the grid of the {launch.where} depends on block sizes its launch does not pass"
        values[id(sub)] = f"({code(given).strip()})"
    if sum(1 for n in loads(body) if n.value == meta) != len(values):
        return None, f"the grid of the {launch.where} reads its meta argument other than by key"
    return [code(e.value.visit(_Replace(values))).strip() for e in body.elements], ""


class _Replace(cst.CSTTransformer):
    def __init__(self, values: dict[int, str]) -> None:
        super().__init__()
        self.values = values

    def on_leave(self, original_node, updated_node):
        if id(original_node) in self.values:
            return cst.parse_expression(self.values[id(original_node)])
        return updated_node
