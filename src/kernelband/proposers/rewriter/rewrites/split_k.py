"""split_k: a tl.dot kernel whose output has few tiles and whose K loop is long gets a twin that splits the K
loop over a third grid axis, for shapes with a small M or N where the M x N tiles alone leave most SMs idle.

The twin runs twice. First, SPLIT_K programs per tile (program_id(2) = s) each run the iterations
[s * per, (s + 1) * per) of the original K loop, with the loop's pointer increments applied `s * per` times
before it starts, and store their float32 partial tile into a workspace, laid out as the output is (the
same addresses, from a workspace base) once per split. Then, with REDUCE, one program per tile sums the
SPLIT_K partials in the order s = 0, 1, ... into the accumulator and runs the kernel's own epilogue on it:
the same casts, the same masks, the same store. The launch picks SPLIT_K from its grid and the SM count:

    SPLIT_K = min(16, SMs // tiles, cdiv(K, 4 * BLOCK_K))      (1 where len(grid) > 2)

each split keeping at least 4 BLOCK_K steps, and launches the original kernel, unchanged, when SPLIT_K is 1.
On a kernel autotuned already (after `matmul_configs`) the twin keeps the autotuner, and the split is chosen
before the autotuner picks a config, from the largest tiles and the smallest BLOCK_K among its configs; any
config the autotuner then picks for either launch computes the same sums (the workspace follows the output's
layout, not the tiles).

Why a workspace reduced in a second launch, not tl.atomic_add into a zeroed float32 buffer, and not the host's
`ws.sum(0).to(dtype)`: float32 atomics add in whatever order the programs finish, so the rounding of C changes
from run to run; the workspace is summed in a fixed order, so the same inputs give the same outputs. The only
difference from the original is float32 rounding of the partial sums (one rounding of up to SPLIT_K
partials, each the original's sum over its part of K), far inside a float16 output's tolerance. Reducing in
the kernel, rather than on the host, keeps the epilogue exactly: the stored value and its mask, and any
element-wise work between the loop and the store, apply to the full sum, and a masked-off element of the
output is left as it was (a host copy would overwrite it).

Refused, as not certain (beyond `matmul_launch.dot_kernel`): a kernel with any loop but one K loop
`for k in range(0, K, BLOCK_K)` at the top of its body, K a parameter; a loop body that is not plain
assignments: the accumulator's `acc = tl.dot(a, b, acc)` / `acc += tl.dot(a, b)`, increments `p += E` where E
reads nothing the loop assigns, and values assigned before they are read and not computed from the accumulator
(a split holds only its part of it); an accumulator not started as float32 zeros; a name the loop assigns read
after it (but the accumulator), or the accumulator assigned after it; the output pointer read before the loop;
an autotuned kernel whose grid is not a lambda of its block sizes alone.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    arg_of,
    assigned,
    code,
    dotted,
    fresh_name,
    int_value,
    loads,
    subnodes,
)
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
from kernelband.proposers.rewriter.rewrites.single_pass import plain

MAX_SPLIT = 16
MIN_STEPS = 4  # BLOCK_K steps each split keeps at least

SPLIT = ("{split} = max(1, min({max_split}, {sms} // max(1, {tiles}), triton.cdiv({k}, {min_steps} * {block_k}))) "
         "if len({grid}) <= 2 else 1\n")
WORKSPACE = ("torch.empty(({split}, {out}.untyped_storage().nbytes() // {out}.element_size()), "
             "device={out}.device, dtype=torch.float32)")


def _assign(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression, bool] | None:
    """(target, value, augmented) of `name = value` / `name += value`."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    node = statement.body[0]
    if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
        return node.targets[0].target.value, node.value, False
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
            and isinstance(node.target, cst.Name):
        return node.target.value, node.value, True
    return None


def _names(*nodes: cst.CSTNode) -> set[str]:
    return {n.value for n in loads(*nodes)}


def _accumulates(dk: DotKernel, target: str, value: cst.BaseExpression, augmented: bool) -> bool:
    """`acc = tl.dot(a, b, acc)`, `acc = tl.dot(a, b, acc=acc)`, `acc += tl.dot(a, b)`, `acc = acc + tl.dot(a, b)`."""
    kernel = dk.kernel

    def dot(node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and kernel.is_tl(node.func, "dot")

    if augmented or (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)
                     and isinstance(value.left, cst.Name) and value.left.value == target):
        term = value if augmented else value.right
        return dot(term) and target not in _names(term)
    if not dot(value):
        return False
    positional = [a for a in value.args if a.keyword is None]
    acc = [a for a in value.args if a.keyword is not None and a.keyword.value == "acc"]
    given = positional[2:3] or acc
    others = [a for a in value.args if a not in given]
    return len(given) == 1 and dotted(given[0].value) == target and target not in _names(*[a.value for a in others])


def _loop(dk: DotKernel) -> dict | str:
    """The K loop and what its twin needs; or why the kernel does not qualify."""
    kernel, block_k = dk.kernel, dk.axes["K"]
    body = list(kernel.node.body.body)
    loops = [loop for loop in body if isinstance(loop, cst.For)]
    if len(loops) != 1 or len(subnodes(kernel.node.body, cst.For)) != 1 or subnodes(kernel.node.body, cst.While):
        return f"{kernel.name} has a loop other than one K loop at the top of its body"
    [loop] = loops
    it = loop.iter
    if not (isinstance(it, cst.Call) and dotted(it.func) == "range" and len(it.args) == 3
            and all(a.keyword is None and not a.star for a in it.args) and int_value(it.args[0].value) == 0
            and isinstance(it.args[1].value, cst.Name) and kernel.param(it.args[1].value.value) is not None
            and not kernel.param(it.args[1].value.value).constexpr
            and dotted(it.args[2].value) == block_k and isinstance(loop.target, cst.Name) and loop.orelse is None):
        return f"{kernel.name}'s K loop is not `for k in range(0, K, {block_k})` with K a parameter"
    end, target = it.args[1].value.value, loop.target.value
    at = body.index(loop)
    before, after = body[:at], body[at + 1:]
    lines = [_assign(s) for s in loop.body.body]
    if any(x is None for x in lines):
        return f"{kernel.name}'s K loop body is not plain assignments"
    accs = [t for t, v, aug in lines if _accumulates(dk, t, v, aug)]
    if len(accs) != 1:
        return f"{kernel.name}'s K loop does not accumulate one tl.dot"
    [acc] = accs
    in_loop = {t for t, _, _ in lines}
    steps = []
    for name in dict.fromkeys(t for t, _, _ in lines if t != acc):
        at = [i for i, (t, _, _) in enumerate(lines) if t == name]
        _, value, augmented = lines[at[0]]
        increment = value if augmented else value.right if (
            isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)
            and dotted(value.left) == name) else None
        if increment is not None:
            if len(at) != 1 or _names(increment) & (in_loop | {target}):
                return f"{kernel.name}'s K loop carries {name} other than by a fixed increment"
            steps.append((name, increment))
        elif any(name in _names(v) for _, v, _ in lines[:at[0] + 1]):
            return f"{kernel.name}'s K loop reads {name} before it assigns it"
    if sum(t == acc for t, _, _ in lines) != 1:
        return f"{kernel.name}'s K loop assigns {acc} more than once"
    if any(acc in _names(v) for t, v, _ in lines if t != acc):
        return f"{kernel.name}'s K loop reads {acc} other than to accumulate into it (each split holds part of it)"
    init = [s for s in before if acc in assigned(s)]
    zeros = _assign(init[0]) if len(init) == 1 else None
    if not (zeros and isinstance(zeros[1], cst.Call) and kernel.is_tl(zeros[1].func, "zeros") and not zeros[2]
            and any(dotted(a.value) in (f"{t}.float32" for t in kernel.tl) for a in zeros[1].args)):
        return f"{kernel.name}'s accumulator {acc} does not start as float32 zeros before the K loop"
    if _names(*after) & (in_loop - {acc} | {target}) or acc in assigned(*after):
        return f"{kernel.name} reads what its K loop leaves (other than {acc}) after the loop, or changes {acc}"
    if dk.out in _names(*before, loop):
        return f"{kernel.name} reads {dk.out} before its K loop ends"
    store = next((s for s in after if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                  and isinstance(s.body[0], cst.Expr) and s.body[0].value is dk.store), None)
    if store is None:
        return f"{kernel.name}'s tl.store is not a statement of its own after the K loop"
    return {"loop": loop, "before": before, "after": after, "store": store, "acc": acc, "end": end, "steps": steps}


def _twin(dk: DotKernel, found: dict, name: str) -> tuple[cst.FunctionDef, dict[str, str]]:
    kernel = dk.kernel
    tl = kernel.tl_name
    node, p = new_params(kernel, [("ws_ptr", False), ("ws_span", False), ("SPLIT_K", True), ("REDUCE", True)])
    used = set(kernel.names) | set(p.values())
    local = {n: fresh_name(n, used) for n in ("pid_k", "k_per_split", "k_start", "ws_tile", "split")}
    ws, span, acc, store_line = p["ws_ptr"], p["ws_span"], found["acc"], found["store"]
    after = found["after"]
    # The epilogue against the workspace: the output's addresses and mask, from the workspace's base.
    ws_after = [renamed(s, dk.out, ws) for s in after]
    address = code(renamed(kernel.address(dk.store), dk.out, ws))
    mask = arg_of(dk.store, 2, "mask")
    masked = "" if mask is None else f", mask={code(renamed(mask, dk.out, ws))}"
    at = after.index(store_line)
    reduce = [*ws_after[:at], *ws_after[at + 1:]] + [cst.parse_statement(s) for s in (
        f"{local['ws_tile']} = {address}\n",
        f"for {local['split']} in range(0, {p['SPLIT_K']}):\n"
        f"    {acc} += {tl}.load({local['ws_tile']}{masked}{', other=0.0' if masked else ''})\n"
        f"    {local['ws_tile']} += {span}\n")] + after
    k_block = dk.axes["K"]
    loop = found["loop"]
    start = local["k_start"]
    loop = loop.with_changes(iter=cst.parse_expression(
        f"range({start}, {tl}.minimum({found['end']}, {start} + {local['k_per_split']}), {k_block})"))
    partial = [cst.parse_statement(s) for s in (
        f"{local['pid_k']} = {tl}.program_id(axis=2)\n",
        f"{local['k_per_split']} = {tl}.cdiv({tl}.cdiv({found['end']}, {k_block}), {p['SPLIT_K']}) * {k_block}\n",
        f"{start} = {local['pid_k']} * {local['k_per_split']}\n")]
    partial += [cst.parse_statement(f"{name} += ({start} // {k_block}).to({tl}.int64) * ({code(step)})\n")
                for name, step in found["steps"]]
    partial_store = cst.parse_statement(
        f"{tl}.store(({address}) + {local['pid_k']}.to({tl}.int64) * {span}, {acc}{masked})\n")
    partial += [loop, *ws_after[:at], partial_store, *ws_after[at + 1:]]
    branch = cst.parse_statement(f"if {p['REDUCE']}:\n    pass\nelse:\n    pass\n")
    branch = branch.with_changes(body=branch.body.with_changes(body=reduce),
                                 orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(body=partial)))
    comment = cst.EmptyLine(comment=cst.Comment(
        f"# split-K: program_id(2) sums its share of K into a float32 workspace; then, with {p['REDUCE']}, "
        "each tile sums the shares in order"))
    branch = branch.with_changes(leading_lines=[comment])
    node = node.with_changes(name=cst.Name(name),
                             body=node.body.with_changes(body=[*found["before"], branch]))
    return node, p


def _host(each: Site, twin: str, p: dict[str, str], k: str, block: str | None) -> tuple[str, str, list[str]]:
    """(setup, condition, twin calls) at one launch. An autotuned kernel's launch (`block` None) counts its
    tiles at the config with the largest ones and its K steps at the smallest BLOCK_K, among the autotuner's
    configs: the split is chosen before the autotuner picks one, and must be the same for both launches."""
    names = host_names(each.launch, "grid", "tiles", "sms", "split_k", "ws", "config")
    grid, tiles, split, config = names["grid"], names["tiles"], names["split_k"], names["config"]
    setup = host_setup(each, names)
    if each.meta:
        setup = "".join(line + "\n" for line in setup.splitlines() if not line.startswith(f"{tiles} ="))
        setup = setup.replace(f"{grid} = tuple({each.grid})", f"{grid} = {each.grid}")
        meta = f"{config}.kwargs"
        count = f"{grid}({meta})[0] * ({grid}({meta})[1] if len({grid}({meta})) > 1 else 1)"
        setup += f"{tiles} = min({count} for {config} in {twin}.configs)\n"
        block = f'min({meta}["{p["BLOCK_K"]}"] for {config} in {twin}.configs)'
        partial = f"lambda meta: tuple({grid}(meta)) + (1,) * (2 - len({grid}(meta))) + ({split},)"
    else:
        partial = f"{grid} + (1,) * (2 - len({grid})) + ({split},)"
    setup += SPLIT.format(split=split, max_split=MAX_SPLIT, sms=names["sms"], tiles=tiles, k=k,
                          min_steps=MIN_STEPS, block_k=block, grid=grid)
    if each.meta:
        setup = setup.replace(f" if len({grid}) <= 2 else 1\n", "\n")
    extra = {p["ws_ptr"]: f"{names['ws']}[0, {each.out}.storage_offset():]", p["ws_span"]: f"{names['ws']}.shape[1]",
             p["SPLIT_K"]: split}
    calls = [f"{names['ws']} = {WORKSPACE.format(split=split, out=each.out)}",
             twin_call(each, twin, partial, {**extra, p["REDUCE"]: "False"}),
             twin_call(each, twin, grid, {**extra, p["REDUCE"]: "True"})]
    return setup, f"{split} > 1", calls


def split_k(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        dk = dot_kernel(ms, kernel, autotuned=True)
        found = dk if isinstance(dk, str) else _loop(dk)
        if isinstance(found, str):
            reasons.append(found)
            continue
        tuned = kernel.autotune is not None
        sites = [site(ms, dk, launch, meta=tuned) for launch in ms.launches_of(kernel)]
        if why := next((s for s in sites if isinstance(s, str)), None):
            reasons.append(why)
            continue
        if tuned and not all(s.meta and s.launch.meta_use[0] <= set(dk.axes.values()) and s.launch.meta_use[1]
                             for s in sites):
            reasons.append(f"the grid of a launch of {kernel.name} is not a function of its block sizes alone")
            continue
        args = []
        for each in sites:
            k, block = each.launch.arg(found["end"]), each.launch.arg(dk.axes["K"])
            if k is None or not plain(k.value) and int_value(k.value) is None or (block is None) != tuned \
                    or block is not None and not plain(block.value) and int_value(block.value) is None:
                break
            args.append((code(k.value), None if block is None else code(block.value)))
        else:
            twin = fresh_name(f"{kernel.name}_split_k", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
            node, p = _twin(dk, found, twin)
            p["BLOCK_K"] = dk.axes["K"]
            edits = [with_twin(kernel, node)]
            edits += [branched(each, *_host(each, twin, p, k, block)) for each, (k, block) in zip(sites, args)]
            touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
            variants.append(Variant("split_k", f"{kernel.name}'s K loop split over a third grid axis into up to "
                                    f"{MAX_SPLIT} float32 partial tiles, summed in order ({twin}), where the M x N "
                                    "tiles leave SMs idle", touched, tuple(edits)))
            continue
        reasons.append(f"a launch of {kernel.name} does not pass {found['end']} and {dk.axes['K']} as names or "
                       "numbers")
    return Found(variants, reasons)
