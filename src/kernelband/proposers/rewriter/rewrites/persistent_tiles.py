"""persistent_tiles: a tl.dot kernel launched over more tiles than the GPU has SMs gets a twin that runs on a
fixed grid of one program per SM, each looping over the tiles `for tile in range(pid, tiles, NUM_PROGS)`, as in
Triton's persistent matmul tutorial (09-persistent-matmul.py): one launch's programs stay resident and take
the next tile as they finish, rather than waves of programs each starting, setting up and ending once.

The twin's body is the original's, inside that loop, with the program id replaced by the tile's:
`tl.program_id(0)` by `tile % G0` and `tl.program_id(1)` by `tile // G0` (the original grid is (G0, G1), its
programs numbered with axis 0 fastest), and `tl.num_programs(0)`, `(1)` by G0 and G1. Each tile then computes
exactly what the program of that id did, from the same inputs; only which program runs it, and when, changes.
The launch keeps the original where its grid has no more tiles than SMs (one tile a program either way):

    if len(grid) <= 2 and tiles > SMs:
        kernel_persistent[(SMs,)](..., G0=grid[0], G1=tiles // grid[0], NUM_PROGS=SMs)
    else:
        kernel[grid](...)

A kernel that reads `tl.program_id(2)` (a batch on axis 2) loops over the tiles of all three axes, numbered
axis 0 fastest: `tile % G0`, `tile // G0 % G1`, `tile // (G0 * G1)` (refused where its grid is the autotuner's).

An autotuned kernel (after `matmul_configs`) has a grid of the config the autotuner picks, `lambda meta: ...`:
its twin keeps the autotuner and computes G0 and G1 itself, from the lambda's tuple with `meta["X"]` read as
its constexpr X, each name as the parameter the launch passes that name for, and cdiv as tl.cdiv; the launch's
grid becomes `lambda meta: (min(SMs, tiles(meta)),)`, always the twin (a grid of at most SMs tiles gives one
tile a program, as the original does).

A parameter the kernel assigns (`GROUP_M = min(..., GROUP_M)`) becomes a local of each tile, set from the value
passed at the tile's start, so the next tile of the same program starts where the original program did.
A guard (`if pid_m * BLOCK_M >= M: return`) skips its tile, `if C: pass` with the rest of the tile as its else:
a return would end the program and leave its later tiles undone.
Refused, as not certain (beyond `matmul_launch.dot_kernel`): a grid lambda that reads anything else
(a name the launch does not pass, a call but cdiv) or uses meta other than as meta["NAME"]; launches with
different kinds of grid.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    assigned,
    code,
    dotted,
    fresh_name,
    int_value,
    is_guard,
)
from kernelband.proposers.rewriter.edits import Found, Variant
from kernelband.proposers.rewriter.rewrites.launch_reading import Rename
from kernelband.proposers.rewriter.rewrites.matmul_launch import (
    branched,
    dot_kernel,
    host_names,
    host_setup,
    new_params,
    site,
    twin_call,
    with_twin,
)


class _TileIds(cst.CSTTransformer):
    """tl.program_id / tl.num_programs on axes 0 and 1 replaced by the tile's coordinates and the grid's extents."""

    def __init__(self, kernel: Kernel, tile: str, g0: str, g1: str, g2: str | None = None) -> None:
        super().__init__()
        self.kernel = kernel
        self.ids = {0: f"({tile} % {g0})", 1: f"({tile} // {g0})"}
        if g2 is not None:  # a grid of three axes, numbered axis 0 fastest, then axis 1
            self.ids.update({1: f"({tile} // {g0} % {g1})", 2: f"({tile} // ({g0} * {g1}))"})
        self.extents = {0: g0, 1: g1}

    def leave_Call(self, original_node, updated_node):
        for fname, table in (("program_id", self.ids), ("num_programs", self.extents)):
            if self.kernel.is_tl(original_node.func, fname) and len(original_node.args) == 1:
                return cst.parse_expression(table[int_value(original_node.args[0].value)])
        return updated_node


OPERATORS = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//"}


def _in_kernel(node: cst.BaseExpression, meta: str, passed: dict[str, str], kernel: Kernel) -> str | None:
    """A grid extent of the host's `lambda meta: ...` as the kernel computes it: `meta["X"]` as the constexpr X,
    what the launch passes as the parameter it passes it for, cdiv as tl.cdiv; None where a part has no
    such meaning (any other call, a name the launch does not pass)."""
    def inner(n: cst.BaseExpression) -> str | None:
        return _in_kernel(n, meta, passed, kernel)

    text = code(node)
    if text in passed:
        return passed[text]
    if isinstance(node, cst.Integer):
        return text
    if isinstance(node, cst.Subscript) and dotted(node.value) == meta and len(node.slice) == 1 \
            and isinstance(node.slice[0].slice, cst.Index) and isinstance(node.slice[0].slice.value, cst.SimpleString):
        key = node.slice[0].slice.value.evaluated_value
        param = kernel.param(key)
        return key if param is not None and param.constexpr else None
    if isinstance(node, cst.BinaryOperation) and type(node.operator) in OPERATORS:
        left, right = inner(node.left), inner(node.right)
        return f"({left} {OPERATORS[type(node.operator)]} {right})" if left and right else None
    if isinstance(node, cst.Call) and (dotted(node.func) or "").rpartition(".")[2] == "cdiv" and len(node.args) == 2 \
            and all(a.keyword is None and not a.star for a in node.args):
        left, right = inner(node.args[0].value), inner(node.args[1].value)
        return f"{kernel.tl_name}.cdiv({left}, {right})" if left and right else None
    return None


def _kernel_grid(launch: Launch) -> list[str] | str:
    """The extents of a `lambda meta: (...)` grid as kernel expressions; or why they have none."""
    meta, body = launch.meta_grid
    if not launch.meta_use[1]:
        return f"the grid of the {launch.where} uses meta other than as meta[\"NAME\"]"
    if not (isinstance(body, cst.Tuple) and 1 <= len(body.elements) <= 2
            and all(isinstance(e, cst.Element) for e in body.elements)):
        return f"the grid of the {launch.where} is not a tuple of one or two extents"
    passed = {}
    for param, index in launch.args.items():
        arg = launch.call.args[index]
        if launch.kernel.param(param) is not None and not launch.kernel.param(param).constexpr:
            passed.setdefault(code(arg.value), param)
    extents = [_in_kernel(e.value, meta, passed, launch.kernel) for e in body.elements]
    if None in extents:
        return f"the grid of the {launch.where} reads what the kernel is not passed, or calls other than cdiv"
    return extents


def _skipping(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements of one tile, each guard (`if C: return`) made to skip the rest of the tile, not to leave
    the loop over tiles: `if C: pass` with the statements after it as its else."""
    at = next((i for i, s in enumerate(body) if is_guard(s)), None)
    if at is None:
        return body
    guard = body[at]
    skip = cst.parse_statement(f"if {code(guard.test)}:\n    pass\nelse:\n    pass\n")
    skip = skip.with_changes(leading_lines=guard.leading_lines, orelse=skip.orelse.with_changes(
        body=skip.orelse.body.with_changes(body=_skipping(body[at + 1:]) or skip.orelse.body.body)))
    return [*body[:at], skip]


def _twin(kernel: Kernel, name: str, extents: list[str] | None,
          third: bool = False) -> tuple[cst.FunctionDef, dict[str, str]]:
    """The persistent twin; the grid's extents are parameters G0 and G1 (and G2 where the kernel reads axis 2,
    `third`), or with `extents` (the kernel's own expressions for them) locals."""
    grid = [("G0", False), ("G1", False), ("G2", False)] if third else [("G0", False), ("G1", False)]
    node, p = new_params(kernel, [*grid, ("NUM_PROGS", True)] if extents is None else [("NUM_PROGS", True)])
    used = set(kernel.names) | set(p.values())
    tile = fresh_name("tile", used)
    tl = kernel.tl_name
    setup = []
    if extents is not None:
        p["G0"], p["G1"] = fresh_name("grid_0", used), fresh_name("grid_1", used)
        setup = [cst.parse_statement(f"{p['G0']} = {extents[0]}\n"),
                 cst.parse_statement(f"{p['G1']} = {extents[1] if len(extents) > 1 else 1}\n")]
    body = kernel.node.body.visit(_TileIds(kernel, tile, p["G0"], p["G1"], p.get("G2")))
    # A parameter the kernel assigns is a local of each tile's, starting from the value passed.
    changed = sorted(assigned(kernel.node.body) & {q.name for q in kernel.params})
    copies = {name: fresh_name(f"{name}_tile", used) for name in changed}
    body = body.visit(Rename(copies))
    starts = [cst.parse_statement(f"{copy} = {name}\n") for name, copy in copies.items()]
    count = f"{p['G0']} * {p['G1']}" + (f" * {p['G2']}" if "G2" in p else "")
    loop = cst.parse_statement(f"for {tile} in range({tl}.program_id(axis=0), {count}, "
                               f"{p['NUM_PROGS']}):\n    pass\n")
    loop = loop.with_changes(body=loop.body.with_changes(body=[*starts, *_skipping(list(body.body))]),
                             leading_lines=[cst.EmptyLine(
        comment=cst.Comment(f"# Persistent tiles: {p['NUM_PROGS']} programs, each taking every "
                            f"{p['NUM_PROGS']}-th tile of the original grid"))])
    return node.with_changes(name=cst.Name(name), body=node.body.with_changes(body=[*setup, loop])), p


def persistent_tiles(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        dk = dot_kernel(ms, kernel, autotuned=True, third=True)
        if isinstance(dk, str):
            reasons.append(dk)
            continue
        sites = [site(ms, dk, launch, meta=kernel.autotune is not None, third=dk.third)
                 for launch in ms.launches_of(kernel)]
        extents = [_kernel_grid(s.launch) if not isinstance(s, str) and s.meta else None for s in sites]
        if dk.third and any(e is not None for e in extents):
            reasons.append(f"{kernel.name} reads the program id on axis 2 and its grid is the autotuner's: its "
                           "twin does not count a third axis of a grid of meta")
            continue
        if why := next((s for s in [*sites, *extents] if isinstance(s, str)), None):
            reasons.append(why)
            continue
        if len({repr(e) for e in extents}) != 1:
            reasons.append(f"the launches of {kernel.name} do not all have a tuple grid, or the same grid of meta")
            continue
        twin = fresh_name(f"{kernel.name}_persistent", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
        node, p = _twin(kernel, twin, extents[0], dk.third)
        edits = [with_twin(kernel, node)]
        for each in sites:
            names = host_names(each.launch, "grid", "tiles", "sms")
            grid, tiles, sms = names["grid"], names["tiles"], names["sms"]
            if each.meta:  # the tiles follow the config the autotuner picks: the grid is a function of it
                setup = host_setup(each, names).replace(f"{grid} = tuple({each.grid})", f"{grid} = {each.grid}")
                setup = "".join(line + "\n" for line in setup.splitlines() if not line.startswith(f"{tiles} ="))
                count = f"{grid}(meta)[0] * ({grid}(meta)[1] if len({grid}(meta)) > 1 else 1)"
                call = twin_call(each, twin, f"lambda meta: (min({sms}, {count}),)", {p["NUM_PROGS"]: sms})
                edits.append(branched(each.line, setup, None, [call]))
                continue
            if dk.third:  # the tiles of all three axes, axis 2's extent 1 where the grid has two
                setup = host_setup(each, names) + f"{tiles} = {tiles} * ({grid}[2] if len({grid}) > 2 else 1)\n"
                extra = {p["G0"]: f"{grid}[0]", p["G1"]: f"({grid}[1] if len({grid}) > 1 else 1)",
                         p["G2"]: f"({grid}[2] if len({grid}) > 2 else 1)", p["NUM_PROGS"]: sms}
                call = twin_call(each, twin, f"({sms},)", extra)
                edits.append(branched(each.line, setup, f"{tiles} > {sms}", [call]))
                continue
            call = twin_call(each, twin, f"({sms},)", {p["G0"]: f"{grid}[0]", p["G1"]: f"{tiles} // {grid}[0]",
                                                        p["NUM_PROGS"]: sms})
            edits.append(branched(each.line, host_setup(each, names), f"len({grid}) <= 2 and {tiles} > {sms}", [call]))
        touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
        variants.append(Variant("persistent_tiles", f"{kernel.name} on one program per SM, each looping over the "
                                f"tiles of the original grid ({twin}), where there are more tiles than SMs",
                                touched, tuple(edits)))
    return Found(variants, reasons)
