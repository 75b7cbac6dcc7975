"""grouped_ordering: a kernel whose programs each compute one tile of a 2-D tiling visits the tiles in groups of
GROUP_M rows (an L2 swizzle: consecutive programs share columns of B while they sweep a few rows of A).

The rewrite permutes program ids, nothing else. Where the kernel splits one program id into a row and a
column (`pid // n` and `pid % n`, n the number of column tiles, `roles`' "a/div" and "a/mod"), the program id
is replaced everywhere it is read by

    pid' = row(pid) * n + col(pid)       (the tutorial's grouped row and column of pid, for pid < m * n)

with m = tl.num_programs(a) // n, so that `pid' // n` and `pid' % n` are the grouped row and column. Where two
program ids tile the rows and the columns (program_id(a) and program_id(b)), both are replaced by the grouped
coordinates of their linear index. Either map is a permutation of the programs that exist (an id past m * n,
in a grid with more programs than tiles, keeps its own), and each program computes from its id alone, so the
same tiles are computed, in another order. Refused where that is not certain: a kernel whose programs meet
through atomics (their order may matter), whose helpers read the program id themselves, whose tile rows are
not one program coordinate, or that visits its tiles in another order already.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import fresh_name, subnodes
from kernelband.proposers.rewriter.analysis.values import is_call, marker_arg, names_in
from kernelband.proposers.rewriter.edits import Found, Variant, statements

GROUP_SIZES = (8, 4, 16)

GROUPED = """\
# Grouped ordering (L2 swizzle): {group} consecutive row tiles share each sweep over the column tiles.
{setup}{group} = {size}
{in_group} = {group} * {n}
{group_id} = {linear} // {in_group}
{first} = {group_id} * {group}
{group_size} = {tl}.maximum({tl}.minimum({m} - {first}, {group}), 1)
{row} = {first} + ({linear} % {in_group}) % {group_size}
{col} = ({linear} % {in_group}) // {group_size}
"""


def _split(kernel: Kernel) -> tuple[int, ast.expr] | str:
    """(axis, n) where the kernel splits program id `axis` into `pid // n` and `pid % n`."""
    facts = facts_of(kernel)
    divisors: dict[str, list[ast.expr]] = {"div": [], "mod": []}
    for expression in facts.roles.expressions:
        for node in ast.walk(expression):
            if isinstance(node, ast.BinOp) and is_call(node.left, "__pid") \
                    and isinstance(node.op, ast.FloorDiv | ast.Mod):
                divisors["div" if isinstance(node.op, ast.FloorDiv) else "mod"].append((marker_arg(node.left),
                                                                                        node.right))
    pairs = {(a, ast.dump(x)): x for a, x in divisors["div"]}
    for axis, divisor in divisors["mod"]:
        if (axis, ast.dump(divisor)) in pairs:
            return axis, divisor
    return f"{kernel.name} does not split a program id into a row and a column of tiles"


def _plan(ms: ModuleSource, kernel: Kernel) -> dict | str:
    facts = facts_of(kernel)
    coordinates = {c for p in facts.tile_sizes for c in facts.roles[p].tiles}
    coordinates |= {c for fixed in facts.roles.fixed_tiles.values() for c in fixed}  # `pid_m * 64`
    if any(c.endswith("/other") for c in coordinates):
        return f"{kernel.name} maps its program ids to tiles by more than a split: its order is its own already"
    if kernel.atomics:
        return f"{kernel.name}'s programs meet through atomics: the order they run in may matter"
    for helper in facts.values.helpers.values():
        if helper.name.value in {n.value for n in subnodes(kernel.node.body, cst.Name)} and any(
                kernel.is_tl(c.func, "program_id") for c in subnodes(helper, cst.Call)):
            return f"{helper.name.value}, which {kernel.name} calls, reads the program id itself"
    axes = [kernel.program_axis(c) for c in kernel.calls("program_id")]
    if None in axes:
        return f"{kernel.name} reads a program id whose axis is not a number"
    split = {c.split("/")[0] for c in coordinates if c.endswith("/div") or c.endswith("/mod")}
    direct = sorted({int(c) for c in coordinates if "/" not in c})
    if split:
        found = _split(kernel)
        if isinstance(found, str):
            return found
        axis, divisor = found
        if names_in(divisor) - {p.name for p in kernel.params} - {"tl"} or any(
                is_call(n, m) for n in ast.walk(divisor) for m in ("__var", "__loop", "__arange", "__pid")):
            return f"the number of column tiles {kernel.name} splits its program id by is not known at its start"
        return {"kind": "split", "axis": axis, "n": ast.unparse(divisor)}
    if len(direct) >= 2:
        return {"kind": "grid", "axes": direct[:2]}
    return f"{kernel.name}'s tiles are not a 2-D tiling of its program ids"


class _Replace(cst.CSTTransformer):
    """tl.program_id(axis) replaced by a name, for the axes in `names`."""

    def __init__(self, kernel: Kernel, names: dict[int, str]) -> None:
        super().__init__()
        self.kernel, self.names = kernel, names

    def leave_Call(self, original_node, updated_node):
        axis = self.kernel.program_axis(original_node)
        if self.kernel.is_tl(original_node.func, "program_id") and axis in self.names:
            return cst.Name(self.names[axis])
        return updated_node


def _rewritten(kernel: Kernel, plan: dict, size: int) -> cst.FunctionDef:
    used = set(kernel.names)
    names = {k: fresh_name(v, used) for k, v in (
        ("group", "GROUP_M"), ("in_group", "num_pid_in_group"), ("group_id", "group_id"), ("first", "first_pid_m"),
        ("group_size", "group_size_m"), ("m", "num_pid_m"), ("n", "num_pid_n"), ("row", "pid_m"),
        ("col", "pid_n"), ("linear", "pid"))}
    tl = kernel.tl_name
    if plan["kind"] == "split":
        a = plan["axis"]
        setup = (f"{names['linear']} = {tl}.program_id({a})\n{names['n']} = {plan['n']}\n"
                 f"{names['m']} = {tl}.num_programs({a}) // {names['n']}\n")
        new = fresh_name("grouped_pid", used)
        tail = (f"{new} = {tl}.where({names['linear']} < {names['m']} * {names['n']}, "
                f"{names['row']} * {names['n']} + {names['col']}, {names['linear']})\n")
        replace = {a: new}
    else:
        a, b = plan["axes"]
        setup = (f"{names['m']} = {tl}.num_programs({a})\n{names['n']} = {tl}.num_programs({b})\n"
                 f"{names['linear']} = {tl}.program_id({b}) * {names['m']} + {tl}.program_id({a})\n")
        tail = ""
        replace = {a: names["row"], b: names["col"]}
    text = GROUPED.format(setup=setup, size=size, tl=tl, **names) + tail
    body = kernel.node.body.visit(_Replace(kernel, replace))
    prologue = statements(text)
    statements_ = list(body.body)
    at = 1 if statements_ and isinstance(statements_[0], cst.SimpleStatementLine) and isinstance(
        statements_[0].body[0], cst.Expr) and isinstance(statements_[0].body[0].value, cst.SimpleString) else 0
    return kernel.node.with_changes(body=body.with_changes(body=[*statements_[:at], *prologue,
                                                                 *statements_[at:]]))


def grouped_ordering(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        if not ms.launches_of(kernel):
            continue  # a helper: its caller is rewritten
        plan = _plan(ms, kernel)
        if isinstance(plan, str):
            reasons.append(plan)
            continue
        for size in GROUP_SIZES:
            new = _rewritten(kernel, plan, size)
            variants.append(Variant("grouped_ordering", f"grouped program order in {kernel.name}: GROUP_M = {size} "
                                    "row tiles per column sweep", frozenset({kernel.name}),
                                    ((kernel.node, lambda node, new=new: new),)))
    return Found(variants, reasons)
