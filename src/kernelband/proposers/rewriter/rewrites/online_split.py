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
    split = min(BLOCK // (chunk * (4 if x.device.type == "cuda" else 1)),
                triton.next_power_of_2(-(-2 * sms // rows))) if rows < sms else 1
    if split > 1:
        parts = torch.empty((<statistics>, rows * split), device=x.device, dtype=torch.float32)
        <kernel>_partials[(*grid, split)](..., parts[0], ..., CHUNK=chunk, SPLIT=split)
        <kernel>_combine[(*grid, split)](..., parts[0], ..., CHUNK=chunk, SPLIT=split)
    elif <the chunked twin's test>: ...

Two programs per SM at least, each segment at least MIN_RUN chunks on a GPU (one in the interpreter): a
shorter segment saves less than the second launch costs (a row of 8,192 floats split in two took twice the
starting kernel's time on an H200). SPLIT and CHUNK are powers of two, as the block is, so the segments tile it; split_rows (split_loops.py) takes these stages, and the host's choice with the
programs a SM it aims at, for rows whose statistics are sums. Trailing grid axes of one program are left out,
the split's axis taking the first of them. On the CPU (the Triton interpreter) the SM count is CPU_SMS, small, so that small
shapes take this path. Every program of a row computes the same statistics, so scalars stored from them are
stored alike by each (the same value at the same address). Where a statistic is a tile (a block of rows), the
launch's grid is not a tuple of one or two axes, or the row block sits in a loop, this path is not offered.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, launch_statement
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, int_value, subnodes
from kernelband.proposers.rewriter.edits import statements
from kernelband.proposers.rewriter.rewrites.online_launch import (
    CHUNK,
    CPU_CHUNK,
    LONG,
    device_tensor,
    long_branch,
    prepared,
    relaunched,
    twin_def,
    with_params,
)
from kernelband.proposers.rewriter.rewrites.online_passes import rescaled
from kernelband.proposers.rewriter.rewrites.online_rows import Plan, Twin

MIN_RUN = 4  # chunks or blocks a program's segment takes at least on a GPU: a shorter one saves less than a launch
CPU_SMS = 8  # the interpreter's "SM count": small, so that a few rows (the tasks' interpreter shapes) split


ATOMICS = tuple(f"atomic_{op}" for op in ("add", "max", "min", "xchg", "cas", "and", "or", "xor"))


def split_edits(ms: ModuleSource, plan: Plan, twin: str, chunk: str, fill=lambda launch: 2, chain: int = 1,
                build=None, long: int = LONG) -> list | str:
    """The launches' and the stage kernels' edits, or why rows cannot be split here (`fill(launch)`: the
    programs a SM that the split aims at, two by default; `chain` stages of partials, whose bodies and the
    twin `build(plan, names, parts, axis, chunk, twin)` gives, a chain of sums's (row_chain.py); one by
    default, the twin's statistics; rows not split and longer than `long` on a GPU take the twin)."""
    kernel = plan.kernel
    name = kernel.name
    if plan.region is not kernel.node.body:
        return f"{name}'s row block sits in a loop (its partials would need the loop's iteration)"
    if any(stat.shape for stat in plan.stats):
        return f"{name}'s statistics are tiles (a block of rows), not one value per program"
    axis = split_axis(ms, kernel, [leaf.node for leaf in plan.leaves])
    if isinstance(axis, str):
        return axis
    used = set(kernel.names) | {n for s in ms.scopes for n in s.assigns} | set(ms.kernels) | {twin, chunk}
    names = stage_names(kernel, used, chain)
    keys = ("partials", *(f"partials_{i}" for i in range(2, chain + 1)), "combine")
    parts = {id(stat.call): fresh_name(f"{stat.run}_part", used) for stat in plan.stats}

    def prepare(launch, line, gpu, local):
        before, given, call = prepared(ms, launch, plan, line.body[0].value)
        host = f"{local['chunk']} = {CHUNK} if {gpu} else {CPU_CHUNK}\n"
        cap = f"{given} // ({local['chunk']} * ({MIN_RUN} if {gpu} else 1))"
        return Launching(before, call, host, cap, {chunk: local["chunk"]},
                         long_branch(line, call, given, twin, chunk, gpu, long))
    edits = [(launch_statement(ms, launch), split_launch(ms, launch, names, list(parts.values()), used, fill(launch),
                                                         prepare, ("chunk",), keys))
             for launch in ms.launches_of(kernel)]
    bodies, made = (build or _bodies)(plan, names, parts, axis, chunk, twin)
    stages = [stage_def(kernel, names[stage], body, list(parts.values()), {names["split"]: 2, chunk: CHUNK})
              for stage, body in zip(keys, bodies, strict=True)]
    edits.append((kernel.node, lambda node: cst.FlattenSentinel([node, made, *stages])))
    return edits


def _bodies(plan: Plan, names: dict[str, str], parts: dict[int, str], axis: int, chunk: str,
            twin: str) -> tuple[list[list[cst.BaseStatement]], cst.FunctionDef]:
    """The two stages' bodies (the twin's statistics over the program's segment, then what reads them) and the
    twin."""
    tl = plan.kernel.tl_name
    twin_ = Twin(plan, chunk, segment_span(plan, names))
    first = [*header(tl, names, axis), *twin_.prologue(), *twin_.starts(), *twin_.statistics(),
             *partials_stored(tl, names, parts, plan.stats)]
    second = [*header(tl, names, axis), *twin_.prologue(), *_combined(plan, names, parts), *twin_.after(),
              *twin_.stores()]
    return [first, second], twin_def(plan, twin, chunk)


def segment_span(plan: Plan, names: dict[str, str]) -> tuple[str, str]:
    """The chunk starts of the program's segment of the row block, as (first, end) code."""
    segment = f"({plan.size} // {names['split']})"
    return f"{names['sid']} * {segment}", f"({names['sid']} + 1) * {segment}"


def partials_stored(tl: str, names: dict[str, str], parts: dict[int, str], stats: list) -> list[cst.BaseStatement]:
    """The program's partial statistics, stored at its row's and segment's place."""
    return statements("".join(f"{tl}.store({parts[id(s.call)]} + {names['lin']} * {names['split']} + "
                              f"{names['sid']}, {s.run})\n" for s in stats))


def split_axis(ms: ModuleSource, kernel: Kernel, nodes: list[cst.CSTNode]) -> int | str:
    """The number of axes (1 or 2) of every launch's grid, to which the split adds one; or why a launch cannot
    take the split (`nodes`: the statements that each program of a row runs again)."""
    name = kernel.name
    if any(any(kernel.is_tl(c.func, op) for op in ATOMICS) for node in nodes for c in subnodes(node, cst.Call)):
        return f"{name} updates memory atomically (each program of a row would add its share again)"
    if "triton" not in ms.imported or "torch" not in ms.imported:
        return "the module does not import torch and triton"
    axes = set()
    for launch in ms.launches_of(kernel):
        elements = grid_of(launch)
        if isinstance(elements, str):
            return elements
        axes.add(len(elements[0]))
        if device_tensor(ms, launch) is None:
            return f"the {launch.where} passes no tensor that says its device"
        if launch_statement(ms, launch) is None:
            return f"the {launch.where} is not a statement of its own"
    if len(axes) != 1 or any(len(c.args) == 1 and int_value(c.args[0].value) == max(axes)
                             for c in kernel.calls("program_id") + kernel.calls("num_programs")):
        return f"{name}'s launches differ in their grid's axes"
    return axes.pop()


def grid_of(launch: Launch) -> tuple[list[cst.BaseExpression], str] | str:
    """(the grid's axes, code of the grid as a tuple or sequence at the launch), or why it is not known there: a
    lambda or `def grid(meta)` that reads no meta counts as its body."""
    grid = launch.grid_value
    if launch.meta_grid is not None:
        meta, body = launch.meta_grid
        if any(n.value == meta for n in subnodes(body, cst.Name)) or not isinstance(body, cst.BaseExpression):
            return f"the grid of the {launch.where} is computed from the autotuner's config, not known before it"
        grid, text = [body], code(body)
    else:
        text = code(launch.grid[0]) if not launch.tupled else f"({', '.join(code(g) for g in launch.grid)},)"
    single = len(grid) == 1 and not launch.tupled  # one value that is the grid, not `kernel[n,]`
    elements = list(grid[0].elements if single and isinstance(grid[0], cst.Tuple) else grid)
    if single and not isinstance(grid[0], cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in elements):
        return f"the grid of the {launch.where} does not have one or two axes known at the launch"
    values = [e.value if isinstance(e, cst.Element) else e for e in elements]
    ones = 0  # trailing axes of one program: left out, the split's axis takes the first of them
    while len(values) - ones > 1 and int_value(values[-1 - ones]) == 1:
        ones += 1
    if ones:
        elements = elements[:len(elements) - ones]
        text = f"({', '.join(code(v) for v in values[:len(elements)])},)"
    if not 1 <= len(elements) <= 2:
        return f"the grid of the {launch.where} does not have one or two axes known at the launch"
    return elements, text


def stage_names(kernel: Kernel, used: set[str], chain: int = 1) -> dict[str, str]:
    """Fresh names of the stage kernels (a chain of `chain` stages of partials, "partials", "partials_2", ...,
    then "combine"), SPLIT, and the header's split and row indices."""
    name = kernel.name
    middle = tuple((f"partials_{i}", f"{name}_partials_{i}") for i in range(2, chain + 1))
    return {k: fresh_name(v, used) for k, v in (("partials", f"{name}_partials"), *middle,
                                                ("combine", f"{name}_combine"), ("split", "SPLIT"),
                                                ("sid", "split_id"), ("lin", "row_id"))}


def header(tl: str, names: dict[str, str], axis: int) -> list[cst.BaseStatement]:
    """The stage kernels' first statements: the program's segment of its row, and the row's index over the
    original grid."""
    return statements(f"{names['sid']} = {tl}.program_id({axis})\n{names['lin']} = {tl}.program_id(0)"
                      + (f" + {tl}.program_id(1) * {tl}.num_programs(0)" if axis == 2 else "") + "\n")


def stage_def(kernel: Kernel, name: str, body: list, pointers: list[str], params: dict[str, int]) -> cst.FunctionDef:
    """The kernel under another name with this body, the partials' pointers and these constexprs added."""
    node = kernel.node.with_changes(name=cst.Name(name), body=kernel.node.body.with_changes(body=body))
    return node.with_changes(params=with_params(_with_pointers(node, pointers), kernel.tl_name, **params))


def partial_offsets(tl: str, names: dict[str, str]) -> str:
    """The addresses of a row's SPLIT partials, in the order of its segments."""
    return f"{names['lin']} * {names['split']} + {tl}.arange(0, {names['split']})"


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
    offsets = partial_offsets(tl, names)
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


@dataclass
class Launching:
    """What a split's launch keeps of the original one: statements before it, the call the stages copy (grid
    and arguments), host lines and the cap on SPLIT in code, the keywords both stages take, and the branch
    taken where the rows are not split."""

    before: list[cst.BaseStatement]
    call: cst.Call
    host: str
    cap: str
    keywords: dict[str, str]
    orelse: cst.BaseStatement


def split_launch(ms: ModuleSource, launch: Launch, names: dict[str, str], pointers: list[str], used: set[str],
                 fill: int, prepare, more: tuple[str, ...] = (), stages: tuple[str, ...] = ("partials", "combine")):
    """The edit of a launch statement that runs the stages (`stages`: keys of `names`, in launch order) where the
    rows are too few for `fill` programs a SM (on SPLIT = the power of two at or above fill * SMs / rows, at
    most the cap), else `prepare`'s branch: `prepare(launch, line, gpu, local)` gives the Launching (`local`:
    fresh host names, `more` among them)."""
    tensor = device_tensor(ms, launch)
    gpu = f'{tensor}.device.type == "cuda"'
    local = {k: fresh_name(k, used) for k in ("grid", "rows", "sms", "split", "parts", *more)}
    want = local["sms"] if fill == 2 else f"{fill // 2} * {local['sms']}"

    def edit(line: cst.SimpleStatementLine) -> cst.FlattenSentinel:
        made = prepare(launch, line, gpu, local)
        host = statements(
            f"{local['grid']} = tuple({grid_of(launch)[1]})\n"
            f"{local['rows']} = {local['grid']}[0] * ({local['grid']}[1] if len({local['grid']}) > 1 else 1)\n"
            f"{local['sms']} = torch.cuda.get_device_properties({tensor}.device).multi_processor_count if {gpu} "
            f"else {CPU_SMS}\n"
            f"{made.host}"
            f"{local['split']} = min({made.cap}, triton.next_power_of_2(-(-{fill} * {local['sms']} // "
            f"{local['rows']}))) if {local['rows']} < {want} else 1\n")
        keywords = {p: f"{local['parts']}[{i}]" for i, p in enumerate(pointers)}
        keywords.update({**made.keywords, names["split"]: local["split"]})
        launched = []
        for stage in stages:
            staged = relaunched(made.call, names[stage], **keywords)
            staged = staged.with_changes(func=staged.func.with_changes(slice=[cst.SubscriptElement(cst.Index(
                cst.parse_expression(f"(*{local['grid']}, {local['split']})")))]))
            launched.append(line.with_changes(body=[cst.Expr(staged)], leading_lines=[]))
        allocate = statements(f"{local['parts']} = torch.empty(({len(pointers)}, {local['rows']} * "
                              f"{local['split']}), device={tensor}.device, dtype=torch.float32)\n")
        branch = cst.parse_statement(f"if {local['split']} > 1:\n    pass\n")
        branch = branch.with_changes(body=branch.body.with_changes(body=[*allocate, *launched]), orelse=made.orelse)
        out = [*made.before, *host, branch]
        out[0] = out[0].with_changes(leading_lines=line.leading_lines)
        return cst.FlattenSentinel(out)
    return edit
