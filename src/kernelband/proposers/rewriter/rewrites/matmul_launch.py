"""What split_k and persistent_tiles share: the checks on a tl.dot kernel and on its launches, and the host
code around a launch that runs a twin of the kernel where the twin pays and the original launch otherwise.

Both need the launch's shape, which only the running host code knows (the sizes come from the tensors), so
the choice is made there, from the launch's own grid and the GPU's SM count:

    grid = tuple(<the launch's grid>)
    tiles = grid[0] * (grid[1] if len(grid) > 1 else 1)
    sms = torch.cuda.get_device_properties(c.device).multi_processor_count if c.device.type == "cuda" else 4
    if <the twin pays for these tiles and SMs>:
        <the twin's launch(es)>
    else:
        <the original launch, unchanged>

On the CPU (the Triton interpreter) the "SM count" is CPU_SMS, small so that small shapes take the twin's path.

A kernel qualifies when it is a plain GEMM (`matmul_configs.dot_axes`; a tile the source fixes at an integer is
read as it is, neither twin changes a tile's size) and, for the twin's meaning to
be certain: it is not autotuned (its launch sets every block size), unless the rewrite handles a grid of the
autotuner's config (`autotuned`, `site(meta=True)`), its parameters have no defaults (the twin
adds some), it reads the program id on axes 0 and 1 only (or on axis 2 too, for a twin that keeps each
program's id there, `third`; never the grid's extent on axis 2), it has no atomics, no early return but guards (`if C:
return` in its body, a program with no tile to compute leaving: a twin keeps them, a persistent one skips the
tile instead) and exactly one tl.store, through one pointer parameter that nothing loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.dots import Tile
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_values import plain
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    fresh_name,
    int_value,
    is_guard,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.edits import (
    Edit,
    appended,
    defaults_by_keyword,
    keyword_arg,
    statements,
    with_params,
)
from kernelband.proposers.rewriter.rewrites.matmul_configs import dot_axes

CPU_SMS = 4

HOST = """\
{grid} = tuple({grid_code})
{tiles} = {grid}[0] * ({grid}[1] if len({grid}) > 1 else 1)
{sms} = torch.cuda.get_device_properties({out}.device).multi_processor_count if {out}.device.type == "cuda" else {cpu}
"""


@dataclass
class DotKernel:
    kernel: Kernel
    axes: dict[str, Tile]  # "M", "N", "K" -> the tile: a block-size parameter, or an integer the source fixes
    out: str  # the pointer parameter of its one tl.store
    store: cst.Call
    third: bool = False  # it reads tl.program_id on axis 2 (a batch, say): a twin gives each program the same id


def dot_kernel(ms: ModuleSource, kernel: Kernel, autotuned: bool = False, third: bool = False) -> DotKernel | str:
    """The kernel with its block sizes and output; or why a twin of it is not certain to mean the same.
    `autotuned`: a twin that handles a launch whose autotuner sets the block sizes is fine. `third`: a twin
    that keeps the program id of axis 2 for each program (it does not read the grid's extent there) is fine."""
    axes = dot_axes(kernel)
    if isinstance(axes, str):
        return axes
    if (kernel.autotune is not None and not autotuned) or kernel.heuristics:
        return f"{kernel.name} is autotuned or has heuristics: its launch does not set its block sizes"
    if "torch" not in ms.imported or "triton" not in ms.imported:
        return "the module does not `import torch` and `import triton`"
    params = kernel.node.params
    if params.kwonly_params or params.posonly_params \
            or params.star_arg not in (cst.MaybeSentinel.DEFAULT, None) or params.star_kwarg:
        return f"{kernel.name} has stars, keyword-only or positional-only parameters"
    if not defaults_by_keyword(params, [launch.call for launch in ms.launches_of(kernel)]):
        return f"a launch of {kernel.name} passes a parameter that has a default by position"
    ids_read = {int_value(c.args[0].value) if len(c.args) == 1 else None for c in kernel.calls("program_id")}
    extents_read = {int_value(c.args[0].value) if len(c.args) == 1 else None for c in kernel.calls("num_programs")}
    if not third and not (ids_read | extents_read) <= {0, 1}:
        return f"{kernel.name} reads the program id on an axis not certain to be 0 or 1"
    if not (ids_read | extents_read) <= {0, 1, 2}:
        return f"{kernel.name} reads the program id on an axis not certain to be 0, 1 or 2"
    if 2 in extents_read:  # a twin that shares or walks axis 2 launches another extent there
        return f"{kernel.name} reads the grid's extent on axis 2 (tl.num_programs(2))"
    guards = [s for s in kernel.node.body.body if is_guard(s)]
    if kernel.atomics or len(subnodes(kernel.node.body, cst.Return)) != len(guards):
        return f"{kernel.name} has atomics or a return other than a guard (`if C: return` in its body)"
    accesses = facts_of(kernel).accesses
    if len(accesses.stores) != 1:
        return f"{kernel.name} stores {len(accesses.stores)} times, not once"
    [store] = accesses.stores
    if len(store.bases) != 1:
        return f"{kernel.name}'s store does not write through one pointer parameter"
    [out] = store.bases
    if any(out in load.bases for load in accesses.loads):
        return f"{kernel.name} reads and writes {out}"
    if not ms.launches_of(kernel):
        return f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that call it)"
    return DotKernel(kernel, axes, out, store.call, 2 in ids_read)


@dataclass
class Site:
    """A launch that host code can branch around."""

    launch: Launch
    line: cst.SimpleStatementLine  # the launch's statement
    grid: str  # the grid as an expression of a tuple (or of a function of meta, where `meta`)
    out: str  # the tensor the launch passes for the kernel's output
    meta: bool = False


def site(ms: ModuleSource, dk: DotKernel, launch: Launch, meta: bool = False, third: bool = False) -> Site | str:
    """The launch, if host code can branch around it; `meta`: a grid that is a lambda of meta is fine; `third`: a
    3-D grid is fine."""
    parent = ms.parents.get(id(launch.call))
    line = ms.parents.get(id(parent))
    if not (isinstance(parent, cst.Expr) and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
            and launch.scope.name != "<module>"):
        return f"the {launch.where} is not a statement of its own in a function"
    grid = launch.grid
    evaluated = None
    if launch.meta_grid is not None and not meta:
        # The launch sets the constexprs the grid reads: the host evaluates the grid function on them.
        keys, plain_use = launch.meta_use
        passed = {key: launch.arg(key) for key in keys}
        mapping = [a for a in launch.call.args if a.star == "**"]  # `**config.kwargs`: the constexprs it holds
        if not plain_use or any(a is not None and a.star for a in passed.values()) or (
                any(a is None for a in passed.values()) and len(mapping) != 1):
            return f"the grid of the {launch.where} reads constexprs the launch does not pass"
        values = ", ".join([f"**{code(a.value)}" for a in mapping] + [
            f'"{key}": {code(a.value)}' for key, a in sorted(passed.items()) if a is not None])
        evaluated = f"({code(grid[0])})({{{values}}})"
    if not third and (len(grid) > 2 or (len(grid) == 1 and isinstance(grid[0], cst.Tuple)
                                        and len(grid[0].elements) > 2)):
        return f"the {launch.where} has a 3-D grid"
    if launch.meta_grid is None and any(isinstance(g, cst.Lambda) or isinstance(g, cst.Tuple) and any(
            isinstance(e, cst.StarredElement) for e in g.elements) for g in grid):
        return f"the grid of the {launch.where} is not a plain tuple"
    named = [a for a in launch.call.args if a.star != "**"]
    if any(a.star for a in named) or len(launch.args) != len(named) or len(named) + 1 < len(launch.call.args):
        return f"the {launch.where} passes arguments the kernel's parameters do not name"
    out = launch.arg(dk.out)
    if out is None or not plain(out.value):
        return f"the {launch.where} does not pass {dk.out} as a name"
    grid_code = code(grid[0]) if len(grid) == 1 else "(" + ", ".join(code(g) for g in grid) + ",)"
    if evaluated is not None:
        return Site(launch, line, evaluated, code(out.value), False)
    return Site(launch, line, grid_code, code(out.value), launch.meta_grid is not None)


def host_names(launch: Launch, *bases: str) -> dict[str, str]:
    used = set(launch.scope.assigns) | set(launch.scope.params)
    used |= {n.value for n in subnodes(launch.scope.node, cst.Name)}
    return {base: fresh_name(f"_{base}", used) for base in bases}


def host_setup(site: Site, names: dict[str, str]) -> str:
    return HOST.format(grid=names["grid"], tiles=names["tiles"], sms=names["sms"], grid_code=site.grid,
                       out=site.out, cpu=CPU_SMS)


def twin_call(site: Site, twin: str, grid: str, extra: dict[str, str]) -> str:
    """The code of the launch's call with the twin kernel, grid `grid` and the keyword arguments `extra` added."""
    call = site.launch.call
    args = list(call.args)
    for name, value in extra.items():
        args = appended(args, keyword_arg(name, cst.parse_expression(value)))
    call = call.with_changes(func=cst.parse_expression(f"{twin}[{grid}]"), args=args)
    return code(call)


def branched(statement: cst.SimpleStatementLine, setup: str, condition: str | None, twin_calls: list[str],
             otherwise: str | None = None) -> tuple[cst.CSTNode, Edit]:
    """The edit that puts `setup`, then `if condition: <twin calls> else: <otherwise>`, in place of the launch's
    statement (`otherwise`: the launch as it was, where not given; with no condition: `setup` and the twin calls)."""
    if condition is None:
        text = setup + "".join(f"{call}\n" for call in twin_calls)
    else:
        body = "".join(f"    {line}\n" for call in twin_calls for line in call.splitlines())
        original = otherwise if otherwise is not None else code(statement.with_changes(leading_lines=[])).rstrip("\n")
        text = setup + f"if {condition}:\n{body}else:\n" + "".join(f"    {line}\n" for line in original.splitlines())
    block = statements(text)

    def edit(node: cst.SimpleStatementLine) -> cst.FlattenSentinel:
        head = block[0].with_changes(leading_lines=[*node.leading_lines, *block[0].leading_lines])
        return cst.FlattenSentinel([head, *block[1:]])
    return statement, edit


def with_twin(kernel: Kernel, twin: cst.FunctionDef) -> tuple[cst.CSTNode, Edit]:
    """The edit that puts the twin kernel after the original."""
    return kernel.node, lambda node: cst.FlattenSentinel([node, twin])


def new_params(kernel: Kernel, names: list[tuple[str, bool]]) -> tuple[cst.FunctionDef, dict[str, str]]:
    """The kernel's def with parameters added (name, constexpr) after those without a default, each under a
    name it does not use; and those names. The launches pass them by keyword."""
    used = set(kernel.names)
    fresh = {name: fresh_name(name, used) for name, _ in names}
    tl = kernel.tl_name
    new = [cst.Param(cst.Name(fresh[name]),
                     annotation=cst.Annotation(cst.parse_expression(f"{tl}.constexpr")) if constexpr else None)
           for name, constexpr in names]
    return kernel.node.with_changes(params=with_params(kernel.node.params, new)), fresh


class Renamed(cst.CSTTransformer):
    """Reads of one name replaced by reads of another (assignment targets, attributes and keywords kept)."""

    def __init__(self, root: cst.CSTNode, old: str, new: str) -> None:
        super().__init__()
        self.reads = {id(n) for n in loads(root) if n.value == old}
        self.new = new

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.new) if id(original_node) in self.reads else updated_node


def renamed(node: cst.CSTNode, old: str, new: str) -> cst.CSTNode:
    return node.visit(Renamed(node, old, new))
