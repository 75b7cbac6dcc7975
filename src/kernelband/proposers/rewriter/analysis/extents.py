"""The size each tile constexpr tiles, where the kernel's loads and stores along that tile are not masked: a
parameter of the kernel, which a host-side check reads to know that a tile divides it, or an integer the source
fixes, which a tile is known to divide or not before anything runs.

* A tile that a loop steps by tiles the loop's extent: `for k in range(0, K, BLOCK_K)`,
  `for k in range(0, tl.cdiv(K, BLOCK_K))` and `for k in range(K // BLOCK_K)` (whole blocks only) tile K.
* A tile that scales a program id tiles what the kernel counts its tiles over (`tl.cdiv(N, BLOCK_N)`, N a
  parameter) or what the launch's grid divides by it (`triton.cdiv(M, BLOCK_M)` beside `M` passed as the
  parameter M). A grid that counts whole tiles only (`M // BLOCK_M`) tiles M too: its tiles cover M exactly
  where the tile divides M, which is what the check asks.

The size is a constant where its value is an integer whatever the launch passes (`KernelValues.integer`): a
literal inline, a local bound once to one (`M, N, K = 4096, 4096, 4096`), a module-level constant, or, in
the grid, a literal or a name the host binds once to one. Then the accesses along a tile T of size C are in
bounds exactly for the T that divide C: the blocks cover [0, C) and end at C.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis import grids
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, tile_divisions
from kernelband.proposers.rewriter.analysis.syntax import code, int_value
from kernelband.proposers.rewriter.analysis.values import names_in, tl_name


def _counted(kernel: Kernel, param: str) -> set[str | int]:
    """Parameters X, or integers, the kernel divides into tiles of `param`: `tl.cdiv(X, param)`."""
    values = facts_of(kernel).values
    found: set[str | int] = set()
    for expression in facts_of(kernel).roles.expressions:
        for node in ast.walk(expression):
            if tl_name(node) == "cdiv" and len(node.args) == 2 and ast.unparse(node.args[1]) == param:
                if isinstance(node.args[0], ast.Name) and kernel.param(node.args[0].id) is not None:
                    found.add(node.args[0].id)
                elif (constant := values.integer(node.args[0])) is not None:
                    found.add(constant)
    return found


def _host_integer(ms: ModuleSource, launch: Launch, node: cst.BaseExpression) -> int | None:
    """The integer a grid's numerator is: a literal, or a name the host binds once to one (in the launch's
    function or the module; a parameter's default is not its value: a caller may pass another)."""
    value = int_value(node)
    if value is None and isinstance(node, cst.Name):
        kind, given = ms.name_value(launch.scope, node.value)
        value = int_value(given) if kind != "default" else None
    return value


def _divided(ms: ModuleSource, launch: Launch, division, passed: dict[str, str]) -> set[str | int]:
    """What a grid's ceiling division divides: the integer it is, else the parameters passed its value."""
    constant = _host_integer(ms, launch, division.numerator)
    if constant is not None:
        return {constant}
    return {passed[t] for t in grids.numerator_codes(launch, division) if t in passed}


def _gridded(ms: ModuleSource, kernel: Kernel, param: str) -> tuple[set[str | int], bool]:
    """Parameters whose argument every launch's grid divides by the value it passes as `param`, or the
    integer every launch's grid divides so; and whether a grid counts the whole tiles only (`M // BLOCK_M`)."""
    found: set[str | int] | None = None
    whole = False
    for launch in ms.launches_of(kernel):
        passed = {code(launch.call.args[i].value).strip(): p for p, i in launch.args.items()
                  if kernel.param(p) is not None and not kernel.param(p).constexpr}
        here: set[str | int] = set()
        if launch.meta_grid is not None:
            meta, body = launch.meta_grid
            mine = [d for d in tile_divisions(body, subscripts=True)
                    if code(d.divisor).strip() in (f'{meta}["{param}"]', f"{meta}['{param}']")]
        else:
            arg = launch.arg(param)
            value = int_value(arg.value) if arg is not None else None
            divisions = [d for d in launch.tile_divisions()
                         if (value is not None and int_value(d.divisor) == value)
                         or (arg is not None and isinstance(arg.value, cst.Name) and isinstance(d.divisor, cst.Name)
                             and d.divisor.value == arg.value.value)]
            owned = grids.owners(ms, launch, divisions, facts_of(kernel).tile_sizes)
            mine = [d for d in divisions if owned[id(d)] == [param]]
        for division in mine:
            here |= _divided(ms, launch, division, passed)
            whole |= division.floor
        found = here if found is None else found & here
    return found or set(), whole


def _whole_blocks(loop, param: str) -> ast.expr | None:
    """X where the loop counts the whole blocks of `param` in X from 0 (`range(K // BLOCK_K)`): its blocks cover X
    exactly where the tile divides X."""
    end = loop.end
    if loop.form == "range" and isinstance(end, ast.BinOp) and isinstance(end.op, ast.FloorDiv) \
            and ast.unparse(end.right) == param and ast.unparse(loop.start) == "0" and ast.unparse(loop.step) == "1":
        return end.left
    return None


def extent(ms: ModuleSource, kernel: Kernel, param: str) -> str | int | None:
    """The parameter naming the size `param` tiles, or the integer it is; None where neither is certain."""
    facts = facts_of(kernel)
    role = facts.roles.get(param)
    if role is None:
        return None
    candidates: set[str | int] = set()
    for loop in role.steps:
        end = _whole_blocks(loop, param) or loop.end
        # a constant end is the size only where the loop counts up to it from 0 (`range(K, 0, -BK)` ends at 0)
        constant = facts.values.integer(end) if facts.values.integer(loop.start) == 0 else None
        if isinstance(end, ast.Name) and kernel.param(end.id) is not None:
            candidates.add(end.id)
        elif constant is not None:
            candidates.add(constant)
        elif end is not None and names_in(end) - {"tl"}:
            return None
    if role.tiles:
        candidates |= _counted(kernel, param) | _gridded(ms, kernel, param)[0]
    return candidates.pop() if len(candidates) == 1 else None


def counts_whole_tiles(ms: ModuleSource, kernel: Kernel, param: str) -> bool:
    """Whether a grid or a loop counts only the whole tiles of `param` in its size (`M // BLOCK_M`,
    `range(K // BLOCK_K)`): the tiles then cover the size exactly where they divide it, masked or not."""
    role = facts_of(kernel).roles.get(param)
    if role is None:
        return False
    return any(_whole_blocks(loop, param) is not None for loop in role.steps) \
        or (bool(role.tiles) and _gridded(ms, kernel, param)[1])


def unbounded_extents(ms: ModuleSource, kernel: Kernel, params: list[str]) -> list[tuple[str, str | int]] | str:
    """(tile, size) for each of `params` that a config's tile must divide: along which a load or store is not
    masked, or whose whole tiles alone a grid or a loop counts (`counts_whole_tiles`); the size a parameter or an
    integer. Or why a size is neither (then no check can say the tile divides it)."""
    roles = facts_of(kernel).roles
    pairs = []
    for param in params:
        whole = counts_whole_tiles(ms, kernel, param)
        if not roles[param].unbounded and not whole:
            continue
        size = extent(ms, kernel, param)
        if size is None:
            if not roles[param].unbounded:
                return (f"{kernel.name} counts the whole tiles of {param} only, and the size {param} tiles is "
                        "neither a constant nor a parameter a check could read")
            access = roles[param].unbounded[0]
            return (f"a {access.kind} along {param} in {kernel.name} is not masked, and the size {param} tiles is "
                    "neither a constant nor a parameter a check could read")
        pairs.append((param, size))
    return pairs
