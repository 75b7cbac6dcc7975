"""Each launch's grid as a function of the launch's own values: which ceiling division in the grid counts the
tiles of which constexpr, found from what the kernel does with its program ids, never from names.

A tile constexpr P of the kernel scales program coordinate "a" (`roles`): then dimension a of the grid counts
P's tiles, `cdiv(n, D)` with D the value the launch passes as P (a literal, `BLOCK_M=32` beside
`triton.cdiv(M, 32)`, or the same name). Where two constexprs share one program id (a 1-D grid split into
`pid // num_pid_n` and `pid % num_pid_n`, or a grouped order), each division is matched to the constexpr whose
tiles the kernel counts over the same size: the kernel computes `tl.cdiv(N, BLOCK_N)` with N a parameter, and
the grid's `triton.cdiv(n, 32)` divides what the launch passes as N.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import kernel_facts
from kernelband.proposers.rewriter.analysis.source import CeilDiv, Launch, ModuleSource, ceil_divisions
from kernelband.proposers.rewriter.analysis.syntax import code, int_value, subnodes
from kernelband.proposers.rewriter.analysis.values import is_call, names_in, tl_name


def _grid_dimension(launch: Launch, division: CeilDiv) -> int | None:
    """The grid dimension a division sits in (its element of the grid tuple), None where not one element."""
    grid = launch.grid_value
    elements = grid[0].elements if len(grid) == 1 and isinstance(grid[0], cst.Tuple) else None
    if elements is None and len(grid) > 1:
        elements = [cst.Element(g) for g in grid]
    if elements is None:
        return None
    for index, element in enumerate(elements):
        if any(n is division.divisor for n in subnodes(element.value, type(division.divisor))):
            return index
    return None


def _kernel_counts(ms: ModuleSource, launch: Launch, param: str) -> set[str]:
    """The host code of the sizes whose tiles of `param` the kernel counts: X in `tl.cdiv(X, param)` or
    `(X + param - 1) // param`, X a parameter, given as what the launch passes for it."""
    facts = kernel_facts(ms, launch.kernel)
    found: set[str] = set()
    for expression in facts.roles.expressions:
        for node in ast.walk(expression):
            numerator = None
            if tl_name(node) == "cdiv" and len(node.args) == 2 and ast.unparse(node.args[1]) == param:
                numerator = node.args[0]
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) \
                    and ast.unparse(node.right) == param:
                numerator = node.left
            if numerator is None:
                continue
            constexprs = {p.name for p in launch.kernel.params if p.constexpr}
            for name in names_in(numerator) - constexprs:
                arg = launch.arg(name) if launch.kernel.param(name) is not None else None
                if arg is not None:
                    found.add(code(arg.value).strip())
                    value = launch.scope.value(code(arg.value).strip()) if isinstance(arg.value, cst.Name) else None
                    if value is not None:
                        found.add(code(value).strip())
    return found


def ceil_divisions_in(node: cst.CSTNode, subscripts: bool = False) -> list[CeilDiv]:
    return ceil_divisions(node, subscripts)


def numerator_codes(launch: Launch, division: CeilDiv) -> set[str]:
    return _numerator_codes(launch, division)


def _numerator_codes(launch: Launch, division: CeilDiv) -> set[str]:
    text = code(division.numerator).strip()
    found = {text}
    if isinstance(division.numerator, cst.Name):
        value = launch.scope.value(division.numerator.value)
        if value is not None:
            found.add(code(value).strip())
    return found


def owners(ms: ModuleSource, launch: Launch, divisions: list[CeilDiv], params: list[str]) -> dict[int, list[str]]:
    """For each division (by id), the constexprs among `params` (tiled ones passed the divisor's value) whose
    tiles it counts: by grid dimension where one constexpr alone scales that program id, else by the size the
    kernel counts the constexpr's tiles over."""
    roles = kernel_facts(ms, launch.kernel).roles
    found: dict[int, list[str]] = {}
    for division in divisions:
        dimension = _grid_dimension(launch, division)
        tiling = [p for p in params if roles.get(p) is not None and roles[p].tiles]
        direct = [p for p in tiling if dimension is not None and str(dimension) in roles[p].tiles]
        if len(direct) == 1:  # one constexpr alone scales this program id as it is
            found[id(division)] = direct
            continue
        found[id(division)] = [p for p in tiling
                               if (dimension is None or dimension in roles[p].axes)
                               and _kernel_counts(ms, launch, p) & _numerator_codes(launch, division)]
    # A 1-D split counts one constexpr's tiles in the kernel (`pid % cdiv(N, BLOCK_N)`) and leaves the other's
    # to the quotient: where one division of a grid dimension and one constexpr tiling it are left, they pair.
    by_dimension: dict[int | None, list[CeilDiv]] = {}
    for division in divisions:
        by_dimension.setdefault(_grid_dimension(launch, division), []).append(division)
    for dimension, group in by_dimension.items():
        left = [d for d in group if not found[id(d)]]
        taken = {p for d in group for p in found[id(d)]}
        axes_of = {p: roles[p].axes for p in params
                   if roles.get(p) is not None and roles[p].tiles}
        free = [p for p, axes in axes_of.items() if p not in taken and (dimension is None or dimension in axes)]
        if len(left) == 1 and len(free) == 1 and len(group) > 1:
            found[id(left[0])] = free
    return found


def meta_keys(launch: Launch) -> frozenset[str]:
    return launch.meta_use[0]


def literal_divisors(launch: Launch, value: int) -> list[CeilDiv]:
    return [d for d in launch.ceil_divisions() if int_value(d.divisor) == value]


__all__ = ["owners", "literal_divisors", "meta_keys", "is_call"]
