"""split_k: a tl.dot kernel whose output has few tiles and whose K loop is long gets a twin that splits the K
loop over a third grid axis, for shapes with a small M or N where the M x N tiles alone leave most SMs idle.

The twin runs twice. First, SPLIT_K programs per tile (program_id(2) = s) each run the iterations
[s * per, (s + 1) * per) of the original K loop, with the loop's pointer increments applied `s * per` times
before it starts, and store their partial tile (float32, or int32 for an int32 accumulator) into a workspace,
laid out as the output is (the
same addresses, from a workspace base) once per split. Then, with REDUCE, one program per tile sums the
SPLIT_K partials in the order s = 0, 1, ... into the accumulator and runs the kernel's own epilogue on it:
the same casts, the same masks, the same store. The launch picks SPLIT_K from its grid and the SM count:

    SPLIT_K = min(16, SMs // tiles, cdiv(K, 4 * BLOCK_K))      (1 where len(grid) > 2)

A kernel that reads `tl.program_id(2)` itself (a batch on axis 2) shares that axis with the splits: the partial
launch has SPLIT_K programs for each of its values, split s of value b at b * SPLIT_K + s, and the twin reads
b back (`pid // SPLIT_K`, the value itself in the reducing launch), so each program sees the id the original's
did; its tiles count axis 2 too, and its grid may have three axes. `tl.num_programs(2)` stays a refusal.
A K loop over whole K tiles, `range(K // BLOCK_K)`, splits its block indices as `range(tl.cdiv(K, BLOCK_K))`
does: the splits together run the same indices, whether or not the K tile divides K.

each split keeping at least 4 BLOCK_K steps, and launches the original kernel, unchanged, when SPLIT_K is 1.
On a kernel autotuned already (after `matmul_configs`) the twin keeps the autotuner, and the split is chosen
before the autotuner picks a config, from the largest tiles and the smallest BLOCK_K among its configs; any
config the autotuner then picks for either launch computes the same sums (the workspace follows the output's
layout, not the tiles). A K tile the source fixes (`tl.arange(0, 32)`, `analysis.dots.Tile`) is split by as a
BLOCK_K is, its integer in the twin and in the launch's choice of the split, under every config.

Why a workspace reduced in a second launch, not tl.atomic_add into a zeroed float32 buffer, and not the host's
`ws.sum(0).to(dtype)`: float32 atomics add in whatever order the programs finish, so the rounding of C changes
from run to run; the workspace is summed in a fixed order, so the same inputs give the same outputs. The only
difference from the original is float32 rounding of the partial sums (one rounding of up to SPLIT_K
partials, each the original's sum over its part of K), far inside a float16 output's tolerance; an int32
accumulator (an int8 GEMM) keeps int32 partials, whose sum is the original's bit for bit (integer addition, even
wrapping, does not depend on the order). Reducing in
the kernel, rather than on the host, keeps the epilogue exactly: the stored value and its mask, and any
element-wise work between the loop and the store, apply to the full sum, and a masked-off element of the
output is left as it was (a host copy would overwrite it).

Refused, as not certain (beyond `matmul_launch.dot_kernel` and the plain-GEMM fact of `analysis.dots`): a K
loop (in any form the loops fact reads: range, a range over block indices, while) inside a branch or another
loop, one that can leave early, one that does not count by one K tile a step from 0 up to a size the launch
passes or an integer the source fixes (`KernelValues.integer`: each split then takes its part of that many steps),
or from that size down to 0 (`range(K, 0, -BLOCK_K)`, what is left of K: a split counts down from what is left
at its first step);
anything but the accumulator carried from step to step other than by a fixed increment (a split could not
start part-way); the accumulator read in the loop other than to accumulate, or not started as float32 or int32
zeros (the dtype written out: a constexpr dtype parameter is not read);
a name the loop assigns read after it (but the accumulator), or a store addressed or masked by what the epilogue
computes from an accumulator it updates in place (a partial program stores the loop's sum and runs only the
statements that address and mask the store; the full sum runs the whole epilogue); the output
read before the loop ends (an address derived from the output pointer before the loop, by an assignment with no
call, from values the loop keeps and read only after it, is no read: the twin computes it after the loop); a store that is not a statement of its own after the loop, or one through a tensor
descriptor (its workspace twin is not built); an autotuned kernel whose grid is not a lambda of its block sizes
alone.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_values import rereadable
from kernelband.proposers.rewriter.analysis.loops import carried_increment
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    arg_of,
    assigned,
    code,
    fresh_name,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.analysis.values import same, tl_name
from kernelband.proposers.rewriter.edits import Found, Variant
from kernelband.proposers.rewriter.rewrites.matmul_launch import (
    DotKernel,
    Site,
    branched,
    dot_kernel,
    host_names,
    host_setup,
    new_params,
    renamed,
    site,
    twin_call,
    with_twin,
)

MAX_SPLIT = 16
MIN_STEPS = 4  # BLOCK_K steps each split keeps at least

SPLIT = ("{split} = max(1, min({max_split}, {sms} // max(1, {tiles}), triton.cdiv({k}, {min_steps} * {block_k}))) "
         "if len({grid}) <= 2 else 1\n")
WORKSPACE = ("torch.empty(({split}, {out}.untyped_storage().nbytes() // {out}.element_size()), "
             "device={out}.device, dtype=torch.{dtype})")


def _descriptor_over(kernel, statement: cst.CSTNode, pointer: str) -> str | None:
    """The name a statement binds to `tl.make_tensor_descriptor(pointer, ...)`, else None."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(assign := statement.body[0], cst.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name) and isinstance(call := assign.value, cst.Call)):
        return None
    made = kernel.is_tl(call.func, "make_tensor_descriptor") or kernel.is_tl(call.func,
                                                                             "_experimental_make_tensor_descriptor")
    first = call.args[0].value if call.args else None
    return assign.targets[0].target.value if made and isinstance(first, cst.Name) and first.value == pointer else None


def _names(*nodes: cst.CSTNode) -> set[str]:
    return {n.value for n in loads(*nodes)}


def _fixed_dtype(kernel, dtype: ast.expr | None) -> ast.expr | None:
    """A dtype given as a constexpr parameter (`ACC_TYPE: tl.constexpr = tl.int32`) is its default where no launch
    passes it and no autotune config or heuristic sets it; any other dtype as written."""
    param = kernel.param(dtype.id) if isinstance(dtype, ast.Name) else None
    if param is None or not param.constexpr or param.default is None:
        return dtype
    if kernel.heuristics or kernel.autotune is not None and dtype.id in code(kernel.autotune) or any(
            launch.arg(dtype.id) is not None for launch in kernel.ms.launches_of(kernel)):
        return dtype
    return pyast.parse(code(param.default).strip(), mode="eval").body


def _zeros_dtype(init: ast.expr | None, kernel=None) -> str | None:
    """The dtype of a value that starts as float32 or int32 zeros (tl.zeros(shape, dtype) or tl.full(shape, 0,
    dtype), the dtype by position or keyword, under whatever name the module gives triton.language); None for any
    other start."""
    if init is None or tl_name(init) not in ("zeros", "full"):
        return None
    named = {k.arg: k.value for k in init.keywords}
    at = 1 if tl_name(init) == "zeros" else 2
    dtype = named.get("dtype", init.args[at] if len(init.args) > at else None)
    if tl_name(init) == "full":
        value = named.get("value", init.args[1] if len(init.args) > 1 else None)
        if not (isinstance(value, ast.Constant) and value.value == 0):
            return None
    dtype = _fixed_dtype(kernel, dtype) if kernel is not None else dtype
    name = ast.unparse(dtype).rpartition(".")[2] if dtype is not None else None
    return name if name in ("float32", "int32") else None


def _loop(dk: DotKernel) -> dict | str:
    """The K loop and what its twin needs, read from the facts (`analysis.loops`, `dots`); or the fact that
    makes a split's meaning uncertain."""
    kernel, block_k = dk.kernel, dk.axes["K"]
    facts = facts_of(kernel)
    dot = next(d for d in facts.dots.plain if d.axes == dk.axes)
    if not facts.dots.own(dot):
        return (f"{kernel.name}'s K loop is in a helper it calls: a split twin would need its own copy of the "
                "helper")
    loop, acc = dot.loop, dot.accumulator
    body = list(kernel.node.body.body)
    if loop.node not in body:
        return f"the loop that sums {kernel.name}'s tl.dot sits inside a branch or another loop"
    if loop.exits:
        return f"{kernel.name}'s K loop can leave early: a split would not know where the others start"
    if loop.form not in ("range", "cdiv", "while"):
        return f"{kernel.name}'s K loop does not count its steps from a start to an end"
    # A loop that counts what is left of K down to 0 (`range(K, 0, -BLOCK_K)`, its masks `rk < k`) runs the
    # same steps as one counting up from 0: its extent is its start.
    down = loop.form == "range" and same(loop.end, ast.Constant(0)) and isinstance(loop.step, ast.UnaryOp) \
        and isinstance(loop.step.op, ast.USub)
    end, start, step = (loop.start, loop.end, loop.step.operand) if down else (loop.end, loop.start, loop.step)
    # `range(K // BLOCK_K)` over block indices counts the whole K tiles: a split takes its run of those indices,
    # whether or not the K tile divides K (a tail the loop leaves is left by every split).
    floor = loop.form == "range" and same(step, ast.Constant(1)) and isinstance(end, ast.BinOp) \
        and isinstance(end.op, ast.FloorDiv) and block_k.spells(facts.values, end.right)
    if floor:
        end = end.left
    if isinstance(end, ast.Name) and kernel.param(end.id) is not None:  # a constexpr K splits as a value does
        end = end.id
    elif (end := facts.values.integer(end)) is None:  # a constant: every split reads its steps off it
        return f"the extent of {kernel.name}'s K loop is neither a constant nor a parameter the launch passes"
    if not same(start, ast.Constant(0)):
        return (f"{kernel.name}'s K loop runs from {ast.unparse(loop.start)} to {ast.unparse(loop.end)}: neither "
                "from 0 up nor down to 0 (a split's share of K would not be a run of its steps)")
    if loop.form != "cdiv" and not floor and not block_k.spells(facts.values, step):
        return f"{kernel.name}'s K loop does not advance by one K tile ({block_k.text}) a step"
    steps = []
    for name, carried in loop.carried.items():
        if name in (acc, loop.var):
            continue
        increment = carried_increment(loop, name) if carried.kind == "increment" else None
        if increment is None:
            return (f"{kernel.name}'s K loop carries {name} from one step to the next other than by a fixed "
                    "increment: a split cannot start part-way")
        steps.append((name, *increment))
    updates = [s for s in loop.node.body.body if acc in assigned(s)]
    if any(acc in _names(s) for s in loop.node.body.body if s not in updates):
        return f"{kernel.name}'s K loop reads {acc} other than to accumulate into it (each split holds part of it)"
    acc_dtype = _zeros_dtype(facts.values.initial(acc), kernel)
    if acc_dtype is None:
        return f"{kernel.name}'s accumulator {acc} does not start as float32 or int32 zeros before the K loop"
    at = body.index(loop.node)
    before, after = _addressing_after(body[:at], loop.node, dk.out), body[at + 1:]
    before, after = before[0], before[1] + after
    if _names(*after) & (assigned(loop.node.body) - {acc}):
        return f"{kernel.name} reads what its K loop leaves (other than {acc}) after the loop"
    # a tensor descriptor made over the output reads nothing: its own loads would
    made = {id(s): d for s in before if (d := _descriptor_over(kernel, s, dk.out)) is not None}
    if ({dk.out} | set(made.values())) & _names(*[s for s in before if id(s) not in made], loop.node):
        return f"{kernel.name} reads {dk.out} before its K loop ends"
    store = next((s for s in after if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                  and isinstance(s.body[0], cst.Expr) and s.body[0].value is dk.store), None)
    if store is None:
        return f"{kernel.name}'s tl.store is not a statement of its own after the K loop"
    if facts.accesses.of(dk.store).form == "descriptor":
        return f"{kernel.name} stores through a tensor descriptor, whose workspace twin is not built here"
    # An epilogue that updates the accumulator in place (`acc = acc + bias`, `acc = tl.maximum(acc, 0)`) runs
    # on the full sum only: a partial program stores the loop's sum, running just the statements that address
    # and mask the store.
    needed = _store_names(dk.store)
    addressing = _slice(after, store, set(needed))
    if acc in needed | _names(*addressing):  # a partial sum would pick other addresses than the full sum
        return f"{kernel.name}'s store addresses or masks with a value computed from {acc}"
    updated = acc in assigned(*after[:after.index(store)])
    return {"loop": loop, "before": before, "after": after, "store": store, "acc": acc, "end": end,
            "steps": steps, "down": down, "floor": floor, "dtype": acc_dtype, "addressing": addressing if updated else None}


def _addressing_after(before: list[cst.CSTNode], loop: cst.CSTNode,
                      out: str) -> tuple[list[cst.CSTNode], list[cst.CSTNode]]:
    """(the statements before the K loop, those of them that only derive an address from the output pointer
    `out`): a derived address (`c_base = c_ptr + batch * stride_cb`) computed before the loop has the value it
    would have after it where nothing it reads changes in between, no call is made and what it binds is read
    only after the loop, so the twin computes it after the loop, from the workspace where it stores there.
    Where one does not qualify, none moves (and the output reads before the loop stay a refusal)."""
    moved: list[cst.CSTNode] = []
    for index, statement in enumerate(before):
        if out not in _names(statement):
            continue
        binds = assigned(statement)
        later = [*before[index + 1:], loop]
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Assign | cst.AnnAssign)) \
                or subnodes(statement, cst.Call) or out in binds or not binds \
                or (_names(statement) | binds) & assigned(*later) \
                or binds & _names(*(s for s in later if out not in _names(s) or s is loop)):
            return before, []
        moved.append(statement)
    return [s for s in before if not any(s is m for m in moved)], moved


def _store_names(store: cst.Call) -> set[str]:
    """The names a store's pointer, mask and boundary check read."""
    parts = [store.args[0].value, arg_of(store, 2, "mask"), arg_of(store, 3, "boundary_check")]
    return set().union(*(_names(p) for p in parts if p is not None))


def _slice(after: list[cst.CSTNode], store: cst.CSTNode, needed: set[str]) -> list[cst.CSTNode]:
    """The statements before the store that compute the names it addresses and masks with."""
    kept = []
    for statement in reversed(after[:after.index(store)]):
        if assigned(statement) & needed:
            kept.append(statement)
            needed |= _names(statement)
    return list(reversed(kept))


def _twin(dk: DotKernel, found: dict, name: str) -> tuple[cst.FunctionDef, dict[str, str]]:
    kernel = dk.kernel
    tl = kernel.tl_name
    node, p = new_params(kernel, [("ws_ptr", False), ("ws_span", False), ("SPLIT_K", True), ("REDUCE", True)])
    used = set(kernel.names) | set(p.values())
    local = {n: fresh_name(n, used) for n in ("pid_k", "k_per_split", "k_start", "ws_base", "split", "k_steps",
                                               "pid_z", "pid_2")}
    ws, span, acc, store_line = p["ws_ptr"], p["ws_span"], found["acc"], found["store"]
    after, loop, k_block = found["after"], found["loop"], dk.axes["K"].text
    store = dk.store
    block_ptr = facts_of(kernel).accesses.of(store).form == "block_ptr"
    pointer = store.args[0].value
    mask = arg_of(store, 2, "mask")
    check = arg_of(store, 3, "boundary_check")
    if block_ptr:
        bounds = f", boundary_check={code(check)}, padding_option='zero'" if check is not None else ""
    else:
        bounds = f", mask={code(mask)}, other=0.0" if mask is not None else ""
    # Each split's partial tile at the output's addresses, from the workspace's base for that split.
    addressing = [renamed(s, dk.out, local["ws_base"]) for s in _slice(after, store_line, _store_names(store))]
    loop_text = (f"for {local['split']} in range(0, {p['SPLIT_K']}):\n"
                 f"    {acc} += {tl}.load({code(renamed(pointer, dk.out, local['ws_base']))}{bounds})\n"
                 f"    {local['ws_base']} += {span}\n")
    summed = cst.parse_statement(loop_text)
    summed = summed.with_changes(body=summed.body.with_changes(body=[*addressing, *summed.body.body]))
    reduce = [cst.parse_statement(f"{local['ws_base']} = {ws}\n"), summed, *after]
    start = local["k_start"]
    end = found["end"]
    if found["down"]:  # what is left of K at the split's first step, down to what is left after its last
        new_loop = loop.node.with_changes(iter=cst.parse_expression(
            f"range({end} - {start}, {tl}.maximum({end} - {start} - {local['k_per_split']}, 0), -{k_block})"))
        head = []
    elif found["floor"]:
        new_loop = loop.node.with_changes(iter=cst.parse_expression(
            f"range({start} // {k_block}, {tl}.minimum({end} // {k_block}, "
            f"({start} + {local['k_per_split']}) // {k_block}))"))
        head = []
    elif loop.form == "range":
        new_loop = loop.node.with_changes(iter=cst.parse_expression(
            f"range({start}, {tl}.minimum({end}, {start} + {local['k_per_split']}), {k_block})"))
        head = []
    elif loop.form == "cdiv":
        new_loop = loop.node.with_changes(iter=cst.parse_expression(
            f"range({start} // {k_block}, {tl}.minimum({tl}.cdiv({end}, {k_block}), "
            f"({start} + {local['k_per_split']}) // {k_block}))"))
        head = []
    else:  # while: the variable starts at the split's start and stops at its end
        test = loop.node.test
        new_loop = loop.node.with_changes(test=test.with_changes(comparisons=[test.comparisons[0].with_changes(
            comparator=cst.parse_expression(f"{tl}.minimum({end}, {start} + {local['k_per_split']})"))]))
        head = [cst.parse_statement(f"{loop.var} = {start}\n")]
    # A kernel that reads axis 2 itself shares it with the splits: SPLIT_K programs a value of its own, split s of
    # value b at b * SPLIT_K + s.
    axis_2 = f"{local['pid_z']} % {p['SPLIT_K']}" if dk.third else f"{tl}.program_id(axis=2)"
    partial = [cst.parse_statement(s) for s in (
        f"{local['pid_k']} = {axis_2}\n",
        f"{local['k_per_split']} = {tl}.cdiv({tl}.cdiv({end}, {k_block}), {p['SPLIT_K']}) * {k_block}\n",
        f"{start} = {local['pid_k']} * {local['k_per_split']}\n",
        f"{local['k_steps']} = ({start} // {k_block}).to({tl}.int64)\n")]
    for carried, kind, step in found["steps"]:
        if kind == "add":
            partial.append(cst.parse_statement(f"{carried} += {local['k_steps']} * ({step})\n"))
        else:
            offsets = cst.parse_expression(step)
            scaled = ", ".join(f"{local['k_steps']} * ({code(e.value)})" for e in offsets.elements) \
                if isinstance(offsets, cst.Tuple | cst.List) else None
            if scaled is None:
                raise ValueError("advance offsets that are not a tuple")
            partial.append(cst.parse_statement(f"{carried} = {tl}.advance({carried}, ({scaled},))\n"))
    partial += [*head, new_loop, cst.parse_statement(f"{local['ws_base']} = {ws} + {local['pid_k']}.to({tl}.int64)"
                                                      f" * {span}\n")]
    at = after.index(store_line)
    partial_store = store_line.with_changes(body=[store_line.body[0].with_changes(value=store.with_changes(
        args=[store.args[0], store.args[1].with_changes(value=cst.Name(acc)), *store.args[2:]]))])
    epilogue = after[:at] if found["addressing"] is None else found["addressing"]
    partial += [renamed(s, dk.out, local["ws_base"]) for s in [*epilogue, partial_store, *after[at + 1:]]]
    branch = cst.parse_statement(f"if {p['REDUCE']}:\n    pass\nelse:\n    pass\n")
    branch = branch.with_changes(body=branch.body.with_changes(body=reduce),
                                 orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(body=partial)))
    comment = cst.EmptyLine(comment=cst.Comment(
        f"# split-K: program_id(2) sums its share of K into a {found['dtype']} workspace; then, with {p['REDUCE']}, "
        "each tile sums the shares in order"))
    branch = branch.with_changes(leading_lines=[comment])
    body = [*found["before"], branch]
    if dk.third:  # every read of axis 2 is of the kernel's own value, the same in the partial and reducing programs
        body = [s.visit(_AxisTwo(kernel, local["pid_2"])) for s in body]
        body = [cst.parse_statement(f"{local['pid_z']} = {tl}.program_id(axis=2)\n"),
                cst.parse_statement(f"if {p['REDUCE']}:\n    {local['pid_2']} = {local['pid_z']}\n"
                                    f"else:\n    {local['pid_2']} = {local['pid_z']} // {p['SPLIT_K']}\n"), *body]
    node = node.with_changes(name=cst.Name(name), body=node.body.with_changes(body=body))
    return node, p


class _AxisTwo(cst.CSTTransformer):
    """tl.program_id on axis 2 replaced by a name."""

    def __init__(self, kernel, name: str) -> None:
        super().__init__()
        self.kernel, self.name = kernel, name

    def leave_Call(self, original_node, updated_node):
        return cst.Name(self.name) if self.kernel.program_axis(original_node) == 2 else updated_node


def _host(each: Site, twin: str, p: dict[str, str], k: str, block: str | None, dtype: str,
          third: bool = False) -> tuple[str, str, list[str]]:
    """(setup, condition, twin calls) at one launch. An autotuned kernel's launch counts its tiles at the config
    with the largest ones and, where its configs set BLOCK_K (`block` None), its K steps at the smallest, among
    the autotuner's configs: the split is chosen before the autotuner picks one, and must be the same for both
    launches."""
    names = host_names(each.launch, "grid", "tiles", "sms", "split_k", "ws", "config")
    grid, tiles, split, config = names["grid"], names["tiles"], names["split_k"], names["config"]
    setup = host_setup(each, names)
    if each.meta:
        setup = "".join(line + "\n" for line in setup.splitlines() if not line.startswith(f"{tiles} ="))
        setup = setup.replace(f"{grid} = tuple({each.grid})", f"{grid} = {each.grid}")
        meta = f"{config}.kwargs"
        count = f"{grid}({meta})[0] * ({grid}({meta})[1] if len({grid}({meta})) > 1 else 1)"
        if third:
            count += f" * ({grid}({meta})[2] if len({grid}({meta})) > 2 else 1)"
        setup += f"{tiles} = min({count} for {config} in {twin}.configs)\n"
        if block is None:
            block = f'min({meta}["{p["BLOCK_K"]}"] for {config} in {twin}.configs)'
        partial = f"lambda meta: tuple({grid}(meta)) + (1,) * (2 - len({grid}(meta))) + ({split},)"
        if third:  # axis 2 holds SPLIT_K programs for each of the kernel's own
            partial = f"lambda meta: (tuple({grid}(meta)) + (1, 1))[:2] + ((tuple({grid}(meta)) + (1, 1, 1))[2] * {split},)"
    else:
        partial = f"{grid} + (1,) * (2 - len({grid})) + ({split},)"
        if third:
            setup += f"{tiles} = {tiles} * ({grid}[2] if len({grid}) > 2 else 1)\n"
            partial = f"({grid} + (1, 1))[:2] + (({grid} + (1, 1, 1))[2] * {split},)"
    setup += SPLIT.format(split=split, max_split=MAX_SPLIT, sms=names["sms"], tiles=tiles, k=k,
                          min_steps=MIN_STEPS, block_k=block, grid=grid)
    if each.meta or third:
        setup = setup.replace(f" if len({grid}) <= 2 else 1\n", "\n")
    extra = {p["ws_ptr"]: f"{names['ws']}[0, {each.out}.storage_offset():]", p["ws_span"]: f"{names['ws']}.shape[1]",
             p["SPLIT_K"]: split}
    calls = [f"{names['ws']} = {WORKSPACE.format(split=split, out=each.out, dtype=dtype)}",
             twin_call(each, twin, partial, {**extra, p["REDUCE"]: "False"}),
             twin_call(each, twin, grid, {**extra, p["REDUCE"]: "True"})]
    return setup, f"{split} > 1", calls


def split_k(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        dk = dot_kernel(ms, kernel, autotuned=True, third=True)
        found = dk if isinstance(dk, str) else _loop(dk)
        if isinstance(found, str):
            reasons.append(found)
            continue
        tuned = kernel.autotune is not None
        sites = [site(ms, dk, launch, meta=tuned, third=dk.third) for launch in ms.launches_of(kernel)]
        if why := next((s for s in sites if isinstance(s, str)), None):
            reasons.append(why)
            continue
        if tuned and not all(s.meta and s.launch.meta_use[0] <= {t.param for t in dk.axes.values()}
                             and s.launch.meta_use[1] for s in sites):
            reasons.append(f"the grid of a launch of {kernel.name} is not a function of its block sizes alone")
            continue
        args = []
        end, block_k = found["end"], dk.axes["K"]
        for each in sites:
            k = cst.Integer(str(end)) if isinstance(end, int) else each.launch.arg(end)
            k = k.value if isinstance(k, cst.Arg) else k
            if k is None or not rereadable(k):
                break
            if block_k.fixed:  # the source's integer, at every launch and under every config
                args.append((code(k), block_k.text))
                continue
            block = each.launch.arg(block_k.param)
            if (block is None) != tuned or block is not None and not rereadable(block.value):
                break
            args.append((code(k), None if block is None else code(block.value)))
        else:
            twin = fresh_name(f"{kernel.name}_split_k", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
            node, p = _twin(dk, found, twin)
            p["BLOCK_K"] = block_k.param
            edits = [with_twin(kernel, node)]
            edits += [branched(each.line, *_host(each, twin, p, k, block, found["dtype"], dk.third))
                      for each, (k, block) in zip(sites, args)]
            touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
            variants.append(Variant("split_k", f"{kernel.name}'s K loop split over a third grid axis into up to "
                                    f"{MAX_SPLIT} {found['dtype']} partial tiles, summed in order ({twin}), where the M x N "
                                    "tiles leave SMs idle", touched, tuple(edits)))
            continue
        reasons.append(f"a launch of {kernel.name} computes {found['end']} or {block_k.text} with a call that may not "
                       "give the same value twice (not a tensor's sizes, int, min, max or cdiv): the host cannot read "
                       "it again to choose the split")
    return Found(variants, reasons)
