"""Rows too few to fill the GPU, each split over SPLIT programs, as a two-stage reduction of the chunked twin
(online_rows.py):

    stage 1  <kernel>_partials[(*grid, SPLIT)]: program (row, j) walks the j-th of SPLIT equal segments of the
             row block and stores its partial statistics (max, min, sum; a sum taken against its own max);
    stage 2  <kernel>_combine[(*grid, SPLIT)]: each program combines its row's SPLIT partials (a sum rescaled
             from each partial's max to the row's), then runs what reads the statistics and stores its
             segment along the row.

The launch chooses it on the host, from the launch's own grid and the GPU's SM count:

    grid = tuple(<the launch's grid>)
    rows = grid[0] * (grid[1] if len(grid) > 1 else 1)
    sms = <the device's SM count> if x.device.type == "cuda" else CPU_SMS
    chunk = 4096 if x.device.type == "cuda" else 16
    split = min(BLOCK // chunk, triton.next_power_of_2(-(-2 * sms // rows))) if rows < sms else 1
    if split > 1:
        parts = torch.empty((<statistics>, rows * split), device=x.device, dtype=torch.float32)
        <kernel>_partials[(*grid, split)](..., parts[0], ..., CHUNK=chunk, SPLIT=split)
        <kernel>_combine[(*grid, split)](..., parts[0], ..., CHUNK=chunk, SPLIT=split)
    elif <the chunked twin's test>: ...

Two programs per SM at least, each segment at least one chunk (SPLIT and CHUNK are powers of two, as the block
is, so the segments tile it). On the CPU (the Triton interpreter) the SM count is CPU_SMS, small, so that small
shapes take this path. Every program of a row computes the same statistics, so scalars stored from them are
stored alike by each (the same value at the same address). Where a statistic is a tile (a block of rows), the
launch's grid is not a tuple of one or two axes, or the row block sits in a loop, this path is not offered.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, subnodes
from kernelband.proposers.rewriter.edits import statements
from kernelband.proposers.rewriter.rewrites.online_launch import (
    CHUNK,
    CPU_CHUNK,
    device_tensor,
    launch_statement,
    long_branch,
    prepared,
    relaunched,
    twin_def,
    with_params,
)
from kernelband.proposers.rewriter.rewrites.online_passes import rescaled
from kernelband.proposers.rewriter.rewrites.online_rows import Plan, Twin

CPU_SMS = 8  # the interpreter's "SM count": small, so that a few rows (the tasks' interpreter shapes) split


def split_edits(ms: ModuleSource, plan: Plan, twin: str, chunk: str) -> list | str:
    """The launches' and the stage kernels' edits, or why rows cannot be split here."""
    kernel, block, tl = plan.kernel, plan.block, plan.kernel.tl_name
    name = kernel.name
    if plan.region is not kernel.node.body:
        return f"{name}'s row block sits in a loop (its partials would need the loop's iteration)"
    if any(stat.shape for stat in plan.stats):
        return f"{name}'s statistics are tiles (a block of rows), not one value per program"
    if any(any(kernel.is_tl(c.func, f"atomic_{op}") for op in ("add", "max", "min", "xchg", "cas", "and", "or", "xor")
               for c in subnodes(leaf.node, cst.Call)) for leaf in plan.leaves):
        return f"{name} updates memory atomically (each program of a row would add its share again)"
    if "triton" not in ms.imported or "torch" not in ms.imported:
        return "the module does not import torch and triton"
    axes = set()
    for launch in ms.launches_of(kernel):
        grid = launch.grid_value
        elements = grid[0].elements if len(grid) == 1 and isinstance(grid[0], cst.Tuple) else grid
        if launch.meta_grid is not None:
            return f"the grid of the {launch.where} is computed from the autotuner's config, not known before it"
        if len(grid) == 1 and not isinstance(grid[0], cst.Tuple) \
                or not 1 <= len(elements) <= 2 or any(isinstance(e, cst.StarredElement) for e in elements):
            return f"the grid of the {launch.where} does not have one or two axes known at the launch"
        axes.add(len(elements))
        if device_tensor(ms, launch) is None:
            return f"the {launch.where} passes no tensor that says its device"
    if len(axes) != 1 or any(kernel.program_axis(c) == max(axes) for c in kernel.calls("program_id")):
        return f"{name}'s launches differ in their grid's axes"
    axis = axes.pop()
    used = set(kernel.names) | {n for s in ms.scopes for n in s.assigns} | set(ms.kernels) | {twin, chunk}
    names = {k: fresh_name(v, used) for k, v in (("partials", f"{name}_partials"), ("combine", f"{name}_combine"),
                                                  ("split", "SPLIT"), ("sid", "split_id"), ("lin", "row_id"))}
    parts = {id(stat.call): fresh_name(f"{stat.run}_part", used) for stat in plan.stats}
    edits = [(launch_statement(ms, launch), _launch_edit(ms, launch, plan, twin, chunk, names, parts, used))
             for launch in ms.launches_of(kernel)]
    header = statements(f"{names['sid']} = {tl}.program_id({axis})\n{names['lin']} = {tl}.program_id(0)"
                        + (f" + {tl}.program_id(1) * {tl}.num_programs(0)" if axis == 2 else "") + "\n")
    segment = f"({block} // {names['split']})"
    twin_ = Twin(plan, chunk, (f"{names['sid']} * {segment}", f"({names['sid']} + 1) * {segment}"))
    stored = statements("".join(f"{tl}.store({parts[id(s.call)]} + {names['lin']} * {names['split']} + "
                                f"{names['sid']}, {s.run})\n" for s in plan.stats))
    first = [*header, *twin_.prologue(), *twin_.starts(), *twin_.statistics(), *stored]
    second = [*header, *twin_.prologue(), *_combined(plan, names, parts), *twin_.after(), *twin_.stores()]
    params = {names["split"]: 2, chunk: CHUNK}
    stages = []
    for stage, body in (("partials", first), ("combine", second)):
        node = kernel.node.with_changes(name=cst.Name(names[stage]), body=kernel.node.body.with_changes(body=body))
        node = node.with_changes(params=with_params(_with_pointers(node, list(parts.values())), tl, **params))
        stages.append(node)
    made = twin_def(plan, twin, chunk)
    edits.append((kernel.node, lambda node: cst.FlattenSentinel([node, made, *stages])))
    return edits


def _with_pointers(node: cst.FunctionDef, pointers: list[str]) -> cst.FunctionDef:
    """The kernel with pointer parameters added last (None by default, so that they may follow defaults)."""
    params = list(node.params.params)
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    added = [cst.Param(cst.Name(p), default=cst.Name("None"), comma=comma, equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))) for p in pointers]
    if params:
        added[-1] = added[-1].with_changes(comma=params[-1].comma)
        params[-1] = params[-1].with_changes(comma=comma)
    return node.with_changes(params=node.params.with_changes(params=[*params, *added]))


def _combined(plan: Plan, names: dict[str, str], parts: dict[int, str]) -> list[cst.BaseStatement]:
    """The row's statistics from its SPLIT partials: maxima and minima first (a sum is rescaled to its max)."""
    tl = plan.kernel.tl_name
    offsets = f"{names['lin']} * {names['split']} + {tl}.arange(0, {names['split']})"
    lines = []
    for stat in sorted(plan.stats, key=lambda s: s.op == "sum"):
        partial = f"{tl}.load({parts[id(stat.call)]} + {offsets})"
        if stat.op in ("max", "min"):
            lines.append(f"{stat.run} = {tl}.{stat.op}({partial}, 0)")
        elif stat.against is None:
            lines.append(f"{stat.run} = {tl}.sum({partial}, 0)")
        else:
            top = stat.against
            sums, maxima = f"{stat.run}_parts", f"{stat.run}_maxima"
            lines += [f"{sums} = {partial}", f"{maxima} = {tl}.load({parts[id(top.call)]} + {offsets})",
                      f"{stat.run} = {tl}.sum({rescaled(tl, sums, maxima, top.run, stat.exponent)}, 0)"]
    return statements("".join(f"{line}\n" for line in lines))


def _launch_edit(ms: ModuleSource, launch, plan: Plan, twin: str, chunk: str, names: dict[str, str],
                 parts: dict[int, str], used: set[str]):
    tensor = device_tensor(ms, launch)
    gpu = f'{tensor}.device.type == "cuda"'
    local = {k: fresh_name(k, used) for k in ("grid", "rows", "sms", "chunk", "split", "parts")}

    def edit(line: cst.SimpleStatementLine) -> cst.FlattenSentinel:
        before, size, call = prepared(ms, launch, plan.block, line.body[0].value)
        grid = code(launch.grid[0]) if len(launch.grid) == 1 else f"({', '.join(code(g) for g in launch.grid)},)"
        host = statements(
            f"{local['grid']} = tuple({grid})\n"
            f"{local['rows']} = {local['grid']}[0] * ({local['grid']}[1] if len({local['grid']}) > 1 else 1)\n"
            f"{local['sms']} = torch.cuda.get_device_properties({tensor}.device).multi_processor_count if {gpu} "
            f"else {CPU_SMS}\n"
            f"{local['chunk']} = {CHUNK} if {gpu} else {CPU_CHUNK}\n"
            f"{local['split']} = min({size} // {local['chunk']}, triton.next_power_of_2(-(-2 * {local['sms']} // "
            f"{local['rows']}))) if {local['rows']} < {local['sms']} else 1\n")
        keywords = {p: f"{local['parts']}[{i}]" for i, p in enumerate(parts.values())}
        keywords.update({chunk: local["chunk"], names["split"]: local["split"]})
        stages = []
        for stage in ("partials", "combine"):
            staged = relaunched(call, names[stage], **keywords)
            staged = staged.with_changes(func=staged.func.with_changes(slice=[cst.SubscriptElement(cst.Index(
                cst.parse_expression(f"(*{local['grid']}, {local['split']})")))]))
            stages.append(line.with_changes(body=[cst.Expr(staged)], leading_lines=[]))
        allocate = statements(f"{local['parts']} = torch.empty(({len(parts)}, {local['rows']} * {local['split']}), "
                              f"device={tensor}.device, dtype=torch.float32)\n")
        branch = cst.parse_statement(f"if {local['split']} > 1:\n    pass\n")
        branch = branch.with_changes(body=branch.body.with_changes(body=[*allocate, *stages]),
                                     orelse=long_branch(line, call, size, twin, chunk, gpu))
        out = [*before, *host, branch]
        out[0] = out[0].with_changes(leading_lines=line.leading_lines)
        return cst.FlattenSentinel(out)
    return edit
