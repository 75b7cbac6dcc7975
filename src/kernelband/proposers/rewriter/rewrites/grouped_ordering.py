"""The grouped_ordering rewrite: visit the tiles of a 2-D tiled launch in groups of GROUP_M rows (an L2
swizzle)."""


from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import fresh_name, subnodes
from kernelband.proposers.rewriter.edits import (
    Found,
    Variant,
    statements,
)

GROUP_SIZES = (8, 4, 16)


# -- grouped ordering ----------------------------------------------------------------------------------------
GROUPED = """\
# Grouped ordering (L2 swizzle): {group} consecutive row tiles share each sweep over the column tiles.
{group} = {size}
{setup}{in_group} = {group} * {n}
{group_id} = {pid} // {in_group}
{first} = {group_id} * {group}
{group_size} = tl.minimum({m} - {first}, {group})
{a} = {first} + ({pid} % {in_group}) % {group_size}
{b} = ({pid} % {in_group}) // {group_size}
"""


def _tiled_pids(kernel: Kernel) -> set[str]:
    """Names that multiply a block-size constexpr: `pid_m * BLOCK_M`."""
    found = set()
    for op in subnodes(kernel.node.body, cst.BinaryOperation):
        if isinstance(op.operator, cst.Multiply):
            pair = (op.left, op.right)
            if any(isinstance(x, cst.Name) and x.value in facts_of(kernel).tile_sizes for x in pair):
                found |= {x.value for x in pair if isinstance(x, cst.Name)}
    return found


def _assignments(kernel: Kernel) -> list[tuple[cst.SimpleStatementLine, str, cst.BaseExpression]]:
    found = []
    for statement in kernel.node.body.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            assign = statement.body[0]
            if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                    and isinstance(assign.targets[0].target, cst.Name)):
                found.append((statement, assign.targets[0].target.value, assign.value))
    return found


def _pid_split(kernel: Kernel) -> dict | None:
    """`a = pid // n; b = pid % n` (1-D launch) or `a = program_id(0); b = program_id(1)` (2-D)."""
    tiled = _tiled_pids(kernel)
    lines = [x for x in _assignments(kernel) if x[1] in tiled]
    for sa, a, va in lines:
        for sb, b, vb in lines:
            if a == b:
                continue
            if kernel.program_axis(va) == 0 and kernel.program_axis(vb) == 1:
                return {"a": a, "b": b, "lines": (sa, sb), "pid": None, "n": None}
            if (isinstance(va, cst.BinaryOperation) and isinstance(va.operator, cst.FloorDivide)
                    and isinstance(vb, cst.BinaryOperation) and isinstance(vb.operator, cst.Modulo)
                    and all(isinstance(x, cst.Name) for x in (va.left, va.right, vb.left, vb.right))
                    and va.left.value == vb.left.value and va.right.value == vb.right.value
                    and va.left.value in kernel.pid_names):
                return {"a": a, "b": b, "lines": (sa, sb), "pid": va.left.value, "n": va.right.value}
    return None


def _grouped_text(kernel: Kernel, split: dict, size: int) -> str:
    used = set(kernel.names)
    names = {k: fresh_name(v, used) for k, v in (("group", "GROUP_M"), ("in_group", "num_pid_in_group"),
                                                 ("group_id", "group_id"), ("first", "first_pid_m"),
                                                 ("group_size", "group_size_m"), ("m", "num_pid_m"))}
    tl = kernel.tl_name
    if split["pid"] is None:
        n, pid = fresh_name("num_pid_n", used), fresh_name("pid", used)
        setup = (f"{names['m']} = {tl}.num_programs(axis=0)\n{n} = {tl}.num_programs(axis=1)\n"
                 f"{pid} = {tl}.program_id(axis=1) * {names['m']} + {tl}.program_id(axis=0)\n")
    else:
        n, pid = split["n"], split["pid"]
        setup = f"{names['m']} = {tl}.num_programs(axis=0) // {n}\n"
    text = GROUPED.format(size=size, setup=setup, n=n, pid=pid, a=split["a"], b=split["b"], **names)
    return text.replace("tl.minimum", f"{tl}.minimum")


def grouped_ordering(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        split = _pid_split(kernel)
        if split is None:
            reasons.append(f"{kernel.name} has no 2-D tile split (pid // n, pid % n or program_id(0), (1)) "
                           "feeding its block offsets")
            continue
        if any("GROUP" in name.upper() for name in kernel.names):
            reasons.append(f"{kernel.name} groups its programs already")
            continue
        first, second = split["lines"]
        for size in GROUP_SIZES:
            block = statements(_grouped_text(kernel, split, size))

            def replace(node, block=block):  # the comments above the replaced line stay above the new ones
                head = block[0].with_changes(leading_lines=[*node.leading_lines, *block[0].leading_lines])
                return cst.FlattenSentinel([head, *block[1:]])
            edits = ((first, replace), (second, lambda _node: cst.RemoveFromParent()))
            variants.append(Variant("grouped_ordering", f"grouped program order in {kernel.name}: GROUP_M = {size} "
                                    f"row tiles per column sweep ({split['a']}, {split['b']})",
                                    frozenset({kernel.name}), edits))
    return Found(variants, reasons)
