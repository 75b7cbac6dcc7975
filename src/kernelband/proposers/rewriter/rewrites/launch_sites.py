"""Where a fused launch goes in the host function: at the second launch's place, the first launch's line removed.
What ran between the two then runs before the first kernel, so it must be certain to be the same there: plain
assignments to names (none into an element or an attribute: `x[0] = 5` would change what the first kernel
reads) and `if` tests whose calls only read sizes or allocate, reading nothing the first kernel writes, and
rebinding no buffer either launch passes. A value the first launch reads that is rebound in between (`grid`,
`BK`) is kept in a new local where the first launch stood:

    q_kernel[grid](q, q_int8, BLKQ, ...)        grid_1 = grid
    grid = ((L + BLKK - 1) // BLKK, B)          grid = ((L + BLKK - 1) // BLKK, B)
    k_kernel[grid](k, k_int8, BLKK, ...)        fused[...](... the first launch's values from grid_1 ...)

Where the second launch sits under `if` statements that the first does not (a sequence on one branch), the
first launch moves into the branch with the fused one, and a copy of it, as it was, starts every other branch:

    inter[grid](q, k, g, A)                     if K <= 256:
    if K <= 256:                                    inter[grid_1](q, k, g, A)
        intra[grid](q, k, g, A)                     intra[grid](q, k, g, A)
    else:                                       else:
        split[grid](q, k, g, A_intra)               fused[...](...)
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.host_flow import Order
from kernelband.proposers.rewriter.analysis.syntax import (
    assigned,
    code,
    fresh_name,
    loads,
    names_only,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Edit
from kernelband.proposers.rewriter.rewrites.launch_reading import NotCertain, pure, reads_data


class Moved:
    """The first launch of a pair taken to the second one's place (the module docstring)."""

    def __init__(self, host: HostFunction, a: Site, b: Site, order: Order, used: set[str]) -> None:
        self.host, self.a, self.b, self.order = host, a, b, order
        ms = host.ms
        written = {w for w in a.writes if w is not None}
        buffers = {p.root for p in a.passed.values() if p.root is not None}  # b's are evaluated where it is
        rebound: set[str] = set()
        for statement in order.between:
            if not (isinstance(statement, cst.SimpleStatementLine) and all(
                    isinstance(s, cst.Assign | cst.AnnAssign) for s in statement.body)) or not pure(statement):
                raise NotCertain(f"between the {a.where} and the {b.where} comes `{code(statement).strip()}`")
            targets = [t.target for s in statement.body for t in (s.targets if isinstance(s, cst.Assign) else [s])]
            if not all(names_only(t) for t in targets):
                raise NotCertain(f"between the {a.where} and the {b.where}, `{code(statement).strip()}` writes into "
                                 "a buffer or an object: the first kernel would read it changed")
            if reads_data(ms, statement, written):
                raise NotCertain(f"`{code(statement).strip()}` between the launches reads what {a.kernel.name} "
                                 "writes")
            rebound |= assigned(statement)
        for test in order.tests:
            if not pure(test) or subnodes(test, cst.NamedExpr):
                raise NotCertain(f"`{code(test).strip()}` between the launches may have effects")
            if reads_data(ms, test, written):
                raise NotCertain(f"`{code(test).strip()}` between the launches reads what {a.kernel.name} writes")
        if rebound & buffers:
            raise NotCertain(f"{', '.join(sorted(rebound & buffers))} is bound again between the {a.where} and "
                             f"the {b.where}: one name would be two tensors")
        launch = a.launch
        if launch.unmapped is not None:
            raise NotCertain(f"{launch.unmapped} ({a.where})")
        for arg in launch.call.args:
            if not pure(arg.value):
                raise NotCertain(f"the {a.where} calls something that may have effects in its arguments")
        self.rebound = rebound
        self.snapshots: list[tuple[str, str]] = []  # (new local, the code it keeps), where the first launch stood
        self.args: dict[int, cst.BaseExpression] = {}
        for arg in launch.call.args:
            if {n.value for n in loads(arg.value)} & rebound:
                self.args[id(arg)] = self._snapshot(code(arg.value).strip(), used)
            else:
                self.args[id(arg)] = arg.value
        self.used = used
        self._values: dict[str, cst.BaseExpression | None] = {}
        self._dims: list[cst.BaseExpression] | None = None

    def _snapshot(self, text: str, used: set[str]) -> cst.Name:
        base = text if text.isidentifier() else "value"
        name = fresh_name(base, used)
        self.snapshots.append((name, text))
        return cst.Name(name)

    def arg(self, param: str) -> cst.BaseExpression | None:
        """What the moved launch passes for a parameter of its kernel (its value where it stood)."""
        launch = self.a.launch
        arg = launch.arg(param)
        if arg is not None:
            return self.args[id(arg)]
        if param not in self._values:  # an element of a starred argument or a value of a `**dict`, read once
            value = launch.value(param)
            if value is not None and {n.value for n in loads(value)} & self.rebound:
                value = self._snapshot(code(value).strip(), self.used)
            self._values[param] = value
        return self._values[param]

    def dims(self) -> list[cst.BaseExpression]:
        """The first launch's grid, one expression per dimension, with its values where it stood."""
        if self._dims is not None:
            return self._dims
        dims, why = self.host.grid(self.a)
        if dims is None:
            raise NotCertain(why)
        out = []
        for dim in dims:
            node = cst.parse_expression(dim)
            out.append(self._snapshot(dim, self.used) if {n.value for n in loads(node)} & self.rebound else node)
        self._dims = out
        return out

    def call(self) -> cst.Call:
        """The first launch's call, grid and arguments with the values they had where it stood."""
        return self._copy().body[0].value

    def _copy(self) -> cst.SimpleStatementLine:
        """The first launch's line, with the values it had where it stood."""
        a = self.a
        launch = a.launch
        grid = launch.subscript
        names = {n.value for g in launch.grid for n in loads(g)}
        for name in list(names):
            value = self.host.reaching(name, a)
            if value is not None:
                names |= {n.value for n in loads(value)}
        if names & self.rebound:
            grid = grid.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Tuple(
                [cst.Element(d) for d in self.dims()])))])
        args = [arg.with_changes(value=self.args[id(arg)]) for arg in launch.call.args]
        call = launch.call.with_changes(func=grid, args=args)
        return a.statement.with_changes(body=[cst.Expr(call)], leading_lines=[])

    def edits(self, fused: cst.Call, guard: str | None = None) -> list[tuple[cst.CSTNode, Edit]]:
        """The first launch's line out (or the values it keeps in), the fused launch at the second's place, and
        the first launch as it was at the start of every branch the second is not on. With a guard, the fused
        launch runs where the host condition holds, the two launches as they were otherwise."""
        a, b = self.a, self.b
        copy = self._copy() if self.order.branches or guard else None
        second: Edit = lambda node, call=fused: node.with_changes(body=[cst.Expr(call)])  # noqa: E731
        if guard is not None:
            def second(node, call=fused, copy=copy):
                return cst.If(test=cst.parse_expression(guard), body=cst.IndentedBlock(body=[
                    node.with_changes(body=[cst.Expr(call)], leading_lines=[])]), orelse=cst.Else(
                    body=cst.IndentedBlock(body=[copy, node.with_changes(leading_lines=[])])),
                    leading_lines=node.leading_lines)
        kept = [cst.parse_statement(f"{name} = {text}\n") for name, text in self.snapshots]
        if kept:
            kept[0] = kept[0].with_changes(leading_lines=a.statement.leading_lines)
            first: Edit = lambda node, kept=kept: cst.FlattenSentinel(kept)  # noqa: E731
        else:
            first = lambda node: cst.RemovalSentinel.REMOVE  # noqa: E731
        edits: list[tuple[cst.CSTNode, Edit]] = [
            (a.statement, first),
            (b.statement, second)]
        for step in self.order.branches:
            edits.append((step.owner, _other_branch(step.part, copy)))
        return edits


def _other_branch(part: str, copy: cst.SimpleStatementLine) -> Edit:
    """An `if` with the copy first in the branch the second launch is not on (an `else:` made where none is)."""
    def edit(node: cst.If) -> cst.If:
        if part == "orelse":
            return node.with_changes(body=node.body.with_changes(body=[copy, *node.body.body]))
        if node.orelse is None:
            return node.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=[copy])))
        if isinstance(node.orelse, cst.If):
            return node.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=[copy, node.orelse])))
        return node.with_changes(orelse=node.orelse.with_changes(body=node.orelse.body.with_changes(
            body=[copy, *node.orelse.body.body])))
    return edit
