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

Refused, as not certain (beyond `matmul_launch.dot_kernel`): a kernel that assigns one of its parameters (the
next tile of the same program would start from the changed value).
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.edits import Found, Variant
from kernelband.proposers.rewriter.matmul_launch import (
    branched,
    dot_kernel,
    host_names,
    host_setup,
    new_params,
    site,
    twin_call,
    with_twin,
)
from kernelband.proposers.rewriter.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.syntax import assigned, fresh_name, int_value


class _TileIds(cst.CSTTransformer):
    """tl.program_id / tl.num_programs on axes 0 and 1 replaced by the tile's coordinates and the grid's extents."""

    def __init__(self, kernel: Kernel, tile: str, g0: str, g1: str) -> None:
        super().__init__()
        self.kernel = kernel
        self.ids = {0: f"({tile} % {g0})", 1: f"({tile} // {g0})"}
        self.extents = {0: g0, 1: g1}

    def leave_Call(self, original_node, updated_node):
        for fname, table in (("program_id", self.ids), ("num_programs", self.extents)):
            if self.kernel.is_tl(original_node.func, fname) and len(original_node.args) == 1:
                return cst.parse_expression(table[int_value(original_node.args[0].value)])
        return updated_node


def _twin(kernel: Kernel, name: str) -> tuple[cst.FunctionDef, dict[str, str]]:
    node, p = new_params(kernel, [("G0", False), ("G1", False), ("NUM_PROGS", True)])
    tile = fresh_name("tile", set(kernel.names) | set(p.values()))
    tl = kernel.tl_name
    body = kernel.node.body.visit(_TileIds(kernel, tile, p["G0"], p["G1"]))
    loop = cst.parse_statement(f"for {tile} in range({tl}.program_id(axis=0), {p['G0']} * {p['G1']}, "
                               f"{p['NUM_PROGS']}):\n    pass\n")
    loop = loop.with_changes(body=loop.body.with_changes(body=body.body), leading_lines=[cst.EmptyLine(
        comment=cst.Comment(f"# Persistent tiles: {p['NUM_PROGS']} programs, each taking every "
                            f"{p['NUM_PROGS']}-th tile of the original grid"))])
    return node.with_changes(name=cst.Name(name), body=node.body.with_changes(body=[loop])), p


def persistent_tiles(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        dk = dot_kernel(ms, kernel)
        if isinstance(dk, str):
            reasons.append(dk)
            continue
        if changed := sorted(assigned(kernel.node.body) & {p.name for p in kernel.params}):
            reasons.append(f"{kernel.name} assigns its parameter {changed[0]}: the next tile would start from "
                           "the changed value")
            continue
        sites = [site(ms, dk, launch) for launch in ms.launches_of(kernel)]
        if why := next((s for s in sites if isinstance(s, str)), None):
            reasons.append(why)
            continue
        twin = fresh_name(f"{kernel.name}_persistent", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
        node, p = _twin(kernel, twin)
        edits = [with_twin(kernel, node)]
        for each in sites:
            names = host_names(each.launch, "grid", "tiles", "sms")
            grid, tiles, sms = names["grid"], names["tiles"], names["sms"]
            call = twin_call(each, twin, f"({sms},)", {p["G0"]: f"{grid}[0]", p["G1"]: f"{tiles} // {grid}[0]",
                                                        p["NUM_PROGS"]: sms})
            edits.append(branched(each, host_setup(each, names), f"len({grid}) <= 2 and {tiles} > {sms}", [call]))
        touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
        variants.append(Variant("persistent_tiles", f"{kernel.name} on one program per SM, each looping over the "
                                f"tiles of the original grid ({twin}), where there are more tiles than SMs",
                                touched, tuple(edits)))
    return Found(variants, reasons)
