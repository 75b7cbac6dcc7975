"""single_pass: a row kernel that walks its row in blocks (`for start in range(0, n, BLOCK)`, one pass or
several) gets a twin in which each such loop is its body, run once at start = 0, and the launch calls the
twin with BLOCK = triton.next_power_of_2(n) where a row fits one block (0 < n <= MAX_ROW), the original
kernel otherwise:

    if 0 < n_cols <= 16384:
        softmax_kernel_single_pass[(rows,)](..., n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols),
                                            num_warps=min(16, max(4, triton.next_power_of_2(n_cols) // 256)))
    else:
        softmax_kernel[(rows,)](..., n_cols, BLOCK_SIZE=128, num_warps=1)

With BLOCK >= n > 0, `range(0, n, BLOCK)` has exactly one step, start = 0: the twin computes what the
original does, step for step. Its passes read the same row at the same offsets, with the same masks, and
no store in between; in one basic block the compiler can keep the first read and reuse it (Triton's
common-subexpression pass merges identical loads), where the loop form reads the row once a pass.

num_warps follows the block as in Triton's fused-softmax tutorial (4 up to 1,024 elements, then one warp
more per 256, up to 16): the launch's own num_warps suited its small block, not a whole row.

Refused, as not certain: a block size read other than as those loops' step, a tl.arange extent and an
accumulator's shape (`inductor_configs.row_block_only`); an access whose mask does not bound it
(`configs.free_blocks`); a loop whose start is not 0, whose end is not one parameter of the kernel, or
whose body breaks, continues or returns; a launch that is not a statement of its own, that passes the row
length as anything but a name, an attribute or an item (`x.shape[1]`), or whose grid reads the block size.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, dotted, fresh_name, int_value, subnodes
from kernelband.proposers.rewriter.edits import Found, Variant, set_kwarg
from kernelband.proposers.rewriter.rewrites.configs import arange_extents, broadcasts, free_blocks
from kernelband.proposers.rewriter.rewrites.inductor_configs import row_block_only

MAX_ROW = 16384  # elements a row may have for the single-pass kernel: 32 per thread of 16 warps
WARPS = "min(16, max(4, {block} // 256))"


def _row_loops(kernel: Kernel, param: str) -> tuple[list[cst.For], str] | str:
    """The loops stepping by `param` and the parameter each runs to; or why the kernel does not qualify."""
    loops, ends = [], set()
    for loop in subnodes(kernel.node.body, cst.For):
        if not any(isinstance(n, cst.Name) and n.value == param for n in subnodes(loop.iter, cst.Name)):
            continue
        it = loop.iter
        if not (isinstance(it, cst.Call) and dotted(it.func) == "range" and len(it.args) == 3
                and all(a.keyword is None and not a.star for a in it.args) and int_value(it.args[0].value) == 0
                and isinstance(it.args[1].value, cst.Name) and kernel.param(it.args[1].value.value) is not None
                and isinstance(loop.target, cst.Name) and loop.orelse is None):
            return f"{kernel.name} has a loop over {param} that is not `for i in range(0, n, {param})`"
        if subnodes(loop.body, cst.Break) or subnodes(loop.body, cst.Continue) or subnodes(loop.body, cst.Return):
            return f"{kernel.name} leaves a loop over {param} early"
        loops.append(loop)
        ends.add(it.args[1].value.value)
    if not loops:
        return f"{kernel.name} has no loop stepping by {param}"
    if len(ends) > 1:
        return f"{kernel.name}'s loops over {param} run to different ends ({', '.join(sorted(ends))})"
    return loops, ends.pop()


class _Unrolled(cst.CSTTransformer):
    """The kernel renamed, each row loop replaced by `start = 0` and its body."""

    def __init__(self, loops: list[cst.For], name: str) -> None:
        super().__init__()
        self.loops, self.name = {id(loop) for loop in loops}, name

    def leave_For(self, original_node, updated_node):
        if id(original_node) not in self.loops:
            return updated_node
        start = cst.parse_statement(f"{updated_node.target.value} = 0\n").with_changes(
            leading_lines=updated_node.leading_lines)
        return cst.FlattenSentinel([start, *updated_node.body.body])

    def leave_FunctionDef(self, original_node, updated_node):
        return updated_node.with_changes(name=cst.Name(self.name))


def plain(node: cst.BaseExpression) -> bool:
    """A name, an attribute of one, or one indexed by an integer (`n`, `self.n`, `x.shape[1]`): reading it
    twice reads the same value."""
    if isinstance(node, cst.Subscript):
        return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, cst.Integer) and plain(node.value)
    return dotted(node) is not None


def _launch_edit(ms: ModuleSource, launch: Launch, param: str, end: str, twin: str) -> tuple | str:
    """(the launch's statement, its edit into the branch), or why it cannot be branched."""
    statement = ms.parents.get(id(ms.parents.get(id(launch.call))))
    if not (isinstance(ms.parents.get(id(launch.call)), cst.Expr) and isinstance(statement, cst.SimpleStatementLine)
            and len(statement.body) == 1 and launch.scope.name != "<module>"):
        return f"the {launch.where} is not a statement of its own in a function"
    block, length = launch.arg(param), launch.arg(end)
    if block is None or length is None or block.star or length.star:
        return f"the {launch.where} does not pass {param} and {end} by name or position"
    if not plain(length.value):
        return f"the {launch.where} passes {end} as an expression (the branch would evaluate it again)"
    if param in launch.meta_use[0] or any(n.value == param for g in launch.grid for n in subnodes(g, cst.Name)):
        return f"the grid of the {launch.where} reads {param}"
    n = code(length.value)
    size = f"triton.next_power_of_2({n})"
    index = launch.args[param]

    def edit(line: cst.SimpleStatementLine) -> cst.If:
        call = line.body[0].value
        args = list(call.args)
        args[index] = args[index].with_changes(value=cst.parse_expression(size))
        single = call.with_changes(func=call.func.with_changes(value=cst.Name(twin)), args=args)
        single = set_kwarg("num_warps", WARPS.format(block=size))(single)
        branch = cst.parse_statement(f"if 0 < {n} <= {MAX_ROW}:\n    pass\nelse:\n    pass\n")
        return branch.with_changes(
            leading_lines=line.leading_lines,
            body=branch.body.with_changes(body=[line.with_changes(body=[cst.Expr(single)], leading_lines=[])]),
            orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(
                body=[line.with_changes(leading_lines=[])])))
    return statement, edit


def single_pass(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    if "triton" not in ms.imported:
        return Found([], ["the module does not `import triton`"])
    for kernel in ms.kernels.values():
        why = _why_not(ms, kernel)
        if isinstance(why, str):
            reasons.append(why)
            continue
        param, loops, end = why
        twin = fresh_name(f"{kernel.name}_single_pass", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
        edits: list = []
        for launch in ms.launches_of(kernel):
            found = _launch_edit(ms, launch, param, end, twin)
            if isinstance(found, str):
                reasons.append(found)
                break
            edits.append(found)
        else:
            copy = kernel.node.visit(_Unrolled(loops, twin))
            edits.append((kernel.node, lambda node, copy=copy: cst.FlattenSentinel([node, copy])))
            touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
            variants.append(Variant("single_pass", f"{kernel.name}'s {len(loops)} loop(s) over {end} as one block "
                                    f"of triton.next_power_of_2({end}) where 0 < {end} <= {MAX_ROW} "
                                    f"({twin}), the loops otherwise", touched, tuple(edits)))
    return Found(variants, reasons)


def _why_not(ms: ModuleSource, kernel: Kernel) -> tuple[str, list[cst.For], str] | str:
    if kernel.autotune is not None or kernel.heuristics:
        return f"{kernel.name} is autotuned or has heuristics: its launch does not set its block size"
    if not ms.launches_of(kernel):
        return f"{kernel.name} is never launched as kernel[grid](...)"
    facts = facts_of(kernel)
    if kernel.uses_dot or len(facts.tile_sizes) != 1 or facts.tiled:
        return f"{kernel.name} is not a row kernel with one block size that steps a loop"
    [param] = facts.tile_sizes
    if param not in facts.looped or not row_block_only(ms, kernel, param):
        return f"{kernel.name} reads {param} other than as a loop step, arange extent and accumulator shape"
    if why := free_blocks(kernel):
        return why
    if arange_extents(kernel) != {param} or broadcasts(kernel):
        return f"{kernel.name}'s tiles are not 1-D blocks of {param}"
    found = _row_loops(kernel, param)
    if isinstance(found, str):
        return found
    loops, end = found
    return param, loops, end
