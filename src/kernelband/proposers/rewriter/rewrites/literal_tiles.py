"""A kernel's literal tiles as constexpr parameters, for the rewrites that tune a tile's size.

`offs = pid * 1024 + tl.arange(0, 1024)` gives block_size, inductor_configs, autotune and matmul_configs no
parameter to set: they read constexprs. `lift` writes the module with each fixed tile (`analysis/fixed_tiles.py`)
as a constexpr parameter of its kernel, every launch passing the literal's value: the same computation. The
grid's own literal (`triton.cdiv(n, 1024)`) stays, and the rewrites read it as the grid that follows the tile,
as they do where the launch passes `BLOCK_SIZE=1024`. `lifting(rewrite)` runs a rewrite on the module as written
and, where it makes nothing there, on the lifted module, each variant then carrying the lift. Whether a size may
change is each rewrite's own analysis of the lifted kernel; the lift only gives it a name to read.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis.fixed_tiles import FixedTile, fixed_tiles
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import fresh_name, plain_signature
from kernelband.proposers.rewriter.edits import (
    Edit,
    Found,
    Respelled,
    appended,
    defaults_by_keyword,
    keyword_arg,
    respelling,
    with_params,
)


def _names(kernel: Kernel, tiles: list[FixedTile]) -> list[str]:
    """A GEMM's tiles by the axes they size (BLOCK_M, BLOCK_MN, BLOCK_K); any other kernel's BLOCK_SIZE, or
    BLOCK_SIZE_0, BLOCK_SIZE_1, ... for several. Each a name the kernel does not use."""
    used = set(kernel.names) | {p.name for p in kernel.params}
    if all(t.axes for t in tiles):
        return [fresh_name(f"BLOCK_{t.axes}", used) for t in tiles]
    if len(tiles) == 1:
        return [fresh_name("BLOCK_SIZE", used)]
    return [fresh_name(f"BLOCK_SIZE_{i}", used) for i in range(len(tiles))]


def _kernel_edits(ms: ModuleSource, kernel: Kernel) -> tuple[list[tuple[cst.CSTNode, Edit]], str] | str | None:
    launches = ms.launches_of(kernel)
    if not launches or kernel.autotune is not None or kernel.heuristics or any(lc.unmapped for lc in launches):
        return None  # the launches (or an autotuner's configs) would have to set the parameter too
    if not plain_signature(kernel.node.params) or not defaults_by_keyword(kernel.node.params,
                                                                          [lc.call for lc in launches]):
        return None
    tiles, why = fixed_tiles(kernel)
    if not tiles:
        return why or None
    names = _names(kernel, tiles)
    tl = kernel.tl_name
    params = [cst.Param(cst.Name(name), annotation=cst.Annotation(cst.parse_expression(f"{tl}.constexpr")))
              for name in names]
    edits: list[tuple[cst.CSTNode, Edit]] = [
        (kernel.node, lambda node: node.with_changes(params=with_params(node.params, params)))]
    for tile, name in zip(tiles, names):
        edits += [(node, lambda _, name=name: cst.Name(name)) for node in tile.nodes]
    for launch in launches:
        new = [keyword_arg(name, cst.Integer(str(tile.value))) for tile, name in zip(tiles, names)]

        def add(call: cst.Call, new=new) -> cst.Call:
            args = list(call.args)
            for arg in new:
                args = appended(args, arg)
            return call.with_changes(args=args)
        edits.append((launch.call, add))
    said = ", ".join(f"{name}={tile.value}" for tile, name in zip(tiles, names))
    return edits, f"{kernel.name}'s literal tiles as constexprs ({said})"


def lift(ms: ModuleSource) -> Respelled | str | None:
    """The module with every launched kernel's fixed tiles as constexpr parameters; else why a kernel's literal
    tile cannot be read as one, or None where no kernel has a literal tile (or none launched here and not
    autotuned, with launches the analysis can map)."""
    edits, said, touched, why = [], [], set(), None
    for kernel in ms.kernels.values():
        found = _kernel_edits(ms, kernel)
        if not isinstance(found, tuple):
            why = why or found
            continue
        edits += found[0]
        said.append(found[1])
        touched |= {kernel.name} | {lc.scope.top or kernel.name for lc in ms.launches_of(kernel)}
    if not edits:
        return why
    return Respelled.written(ms, edits, "; ".join(said), frozenset(touched))


def lifting(rewrite: Callable[[ModuleSource], Found]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, and where it makes no variant of a module, its variants of the module `lift` writes."""
    return respelling(rewrite, lift)
