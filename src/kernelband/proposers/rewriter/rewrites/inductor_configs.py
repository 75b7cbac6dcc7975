"""inductor_configs: a row or element-wise kernel autotuned over the configs TorchInductor tries for its own
kernels of that kind (torch/_inductor/runtime/triton_heuristics.py), in place of the autotune rewrite's
one-step grid around the launch's values.

* element-wise (one tiled block, 1-D, no reduction): `pointwise` for 1-D size hints, XBLOCK = bs with 256
  elements a warp and bs / 2 with 64, for bs = 256, 512, 1024 (Inductor picks bs from the element count, which
  only the run knows), and the XBLOCK 256/512 configs of its max-autotune list; num_stages = 1;
* element-wise over 2-D tiles (two block sizes, each a program's tile): `pointwise` for 2-D size hints,
  (XBLOCK, YBLOCK) = (32, 32), (64, 64), (256, 16), (16, 256), (1024, 1), (1, 1024), XBLOCK the axis whose
  arange lies along the tile's last dimension, num_warps one per 256 elements within [1, 8]; num_stages = 1;
* row (one looped block, one row a program): `triton_config_reduction` at XBLOCK = 1, RBLOCK from 128 to
  2,048 (its contiguous config) with num_warps = RBLOCK / 128 within [2, 16], and 4,096 and 8,192 for rows
  that the persistent configs would keep whole; num_stages = 1.

The block size must be free (`configs.free_blocks`) and used only where the set's meaning holds: as a
tl.arange extent, and as the program's stride (element-wise) or a loop's step and an accumulator's shape
(row). A loop over a row covers it at any step; masked blocks cover the same elements at any size.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, dotted, integer_cast_operand, subnodes
from kernelband.proposers.rewriter.rewrites.configs import (
    REDUCTIONS,
    Config,
    ConfigSet,
    arange_extents,
    broadcasts,
    free_blocks,
    warps_for,
)

POINTWISE_XBLOCKS = ((1024, 4), (512, 8), (512, 2), (256, 4), (256, 1), (128, 2), (256, 8), (512, 4))
REDUCTION_RBLOCKS = (1024, 2048, 512, 256, 4096, 8192, 128)
POINTWISE_2D_BLOCKS = ((32, 32), (64, 64), (256, 16), (16, 256), (1024, 1), (1, 1024))


def pointwise(param: str) -> list[Config]:
    return [({param: x}, warps, 1) for x, warps in POINTWISE_XBLOCKS]


def pointwise_2d(x: str, y: str) -> list[Config]:
    """Inductor's 2-D pointwise configs, (XBLOCK, YBLOCK) with XBLOCK the contiguous axis, num_warps one per 256
    elements within [1, 8]."""
    return [({x: bx, y: by}, warps_for(bx * by, 256, 1, 8), 1) for bx, by in POINTWISE_2D_BLOCKS]


def reduction(param: str) -> list[Config]:
    configs = [({param: r}, warps_for(r, 128, 2, 16), 1) for r in REDUCTION_RBLOCKS]
    return [*configs[:2], ({param: 2048}, 8, 1), *configs[2:]]  # 2,048 with register-intensive's 8 warps too


def _uses(ms: ModuleSource, kernel: Kernel, param: str) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """(parent, grandparent) of each read of `param` in the kernel's body."""
    found = []
    for name in subnodes(kernel.node.body, cst.Name):
        if name.value == param:
            parent = ms.parents.get(id(name))
            found.append((parent, ms.parents.get(id(parent))))
    return found


def _extent(kernel: Kernel, parent: cst.CSTNode, grand: cst.CSTNode) -> bool:
    return isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and kernel.is_tl(grand.func, "arange") \
        and grand.args[-1] is parent


def _hint(kernel: Kernel, parent: cst.CSTNode, grand: cst.CSTNode) -> bool:
    """The value of `tl.multiple_of(x, P)` / `tl.max_contiguous(x, P)` (contiguity_hints): it follows the tile."""
    return isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and len(grand.args) == 2 \
        and grand.args[1] is parent and (kernel.is_tl(grand.func, "multiple_of") or kernel.is_tl(grand.func,
                                                                                                 "max_contiguous"))


def _stride(kernel: Kernel, parent: cst.CSTNode) -> bool:
    """`pid * P` (either order), where the other factor is the program id or derived from it, or either cast to a
    wider integer."""
    if not (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply)):
        return False
    other = parent.right if isinstance(parent.left, cst.Name) and parent.left.value in facts_of(kernel).tile_sizes \
        else parent.left
    other = integer_cast_operand(other, kernel.tl) or other  # `tl.program_id(0).to(tl.int64) * P`: the same stride
    return kernel.program_axis(other) is not None or (isinstance(other, cst.Name) and other.value in kernel.pid_names)


def _step(ms: ModuleSource, kernel: Kernel, parent: cst.CSTNode, grand: cst.CSTNode) -> bool:
    """The step of `for i in range(start, end, P)` (or tl.range)."""
    if not (isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and len(grand.args) == 3
            and grand.args[2] is parent and parent.keyword is None):
        return False
    if dotted(grand.func) != "range" and not kernel.is_tl(grand.func, "range"):
        return False
    loop = ms.parents.get(id(grand))
    return isinstance(loop, cst.For) and loop.iter is grand


def _shape(ms: ModuleSource, kernel: Kernel, parent: cst.CSTNode, grand: cst.CSTNode) -> bool:
    """An element of the shape list of `tl.zeros([P], ...)` / `tl.full([P], ...)`."""
    if not (isinstance(parent, cst.Element) and isinstance(grand, cst.List | cst.Tuple) and len(grand.elements) == 1):
        return False
    arg = ms.parents.get(id(grand))
    call = ms.parents.get(id(arg))
    return isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and call.args[0] is arg \
        and (kernel.is_tl(call.func, "zeros") or kernel.is_tl(call.func, "full"))


def row_block_only(ms: ModuleSource, kernel: Kernel, param: str) -> bool:
    """Whether `param` is read only as a loop's step, a tl.arange extent and an accumulator's shape."""
    return all(_extent(kernel, *u) or _step(ms, kernel, *u) or _shape(ms, kernel, *u) or _hint(kernel, *u)
               for u in _uses(ms, kernel, param))


def choose(ms: ModuleSource, kernel: Kernel) -> list[ConfigSet] | str:
    if kernel.uses_dot:
        return f"{kernel.name} tiles a tl.dot: matmul_configs tunes it"
    facts = facts_of(kernel)
    if len(facts.tile_sizes) == 2:
        return _tiled_2d(ms, kernel)
    if len(facts.tile_sizes) != 1:
        return f"{kernel.name} has {len(facts.tile_sizes)} constexprs that size its tiles, not one"
    if why := free_blocks(kernel):
        return why
    [param] = facts.tile_sizes
    if arange_extents(kernel) != {param} or broadcasts(kernel):
        return f"{kernel.name}'s tiles are not 1-D blocks of {param}"
    uses = _uses(ms, kernel, param)
    if param in facts.tiled:
        if any(kernel.calls(name) for name in REDUCTIONS) or subnodes(kernel.node.body, cst.For):
            return f"{kernel.name} reduces or loops inside its block: not element-wise"
        if all(_extent(kernel, *u) or _stride(kernel, u[0]) or _hint(kernel, *u) for u in uses):
            return [ConfigSet("Inductor's pointwise configs", pointwise(param))]
        return f"{kernel.name} reads {param} other than as its arange extent and program stride"
    if param in facts.looped:
        if row_block_only(ms, kernel, param):
            return [ConfigSet("Inductor's reduction configs", reduction(param))]
        return f"{kernel.name} reads {param} other than as a loop step, arange extent and accumulator shape"
    return f"{kernel.name}'s {param} neither scales the program id nor steps a loop"


def _tiled_2d(ms: ModuleSource, kernel: Kernel) -> list[ConfigSet] | str:
    """Inductor's 2-D pointwise configs for an element-wise kernel tiled by two block sizes, each the extent of
    a tl.arange and the stride of a program id, nothing else: no loop, no reduction, every access masked. The
    contiguous axis (XBLOCK) is the one whose arange lies along the tile's last dimension (`[None, :]`)."""
    facts = facts_of(kernel)
    params = [p.name for p in kernel.params if p.name in facts.tile_sizes]
    if why := free_blocks(kernel):
        return why
    if not all(p in facts.tiled for p in params):
        return f"{kernel.name} has 2 constexprs that size its tiles, not both a program's tile"
    if any(kernel.calls(name) for name in REDUCTIONS) or subnodes(kernel.node.body, cst.For):
        return f"{kernel.name} reduces or loops inside its 2-D tile: not element-wise"
    if arange_extents(kernel) != set(params):
        return f"{kernel.name}'s tl.arange extents are not its two tile sizes"
    for param in params:
        if not all(_extent(kernel, *u) or _stride(kernel, u[0]) or _hint(kernel, *u)
                   for u in _uses(ms, kernel, param)):
            return f"{kernel.name} reads {param} other than as its arange extent and program stride"
    last = [p for p in params if _along_last(ms, kernel, p)]
    x = last[0] if len(last) == 1 else params[1]
    y = params[0] if x == params[1] else params[1]
    return [ConfigSet("Inductor's 2-D pointwise configs", pointwise_2d(x, y))]


def _along_last(ms: ModuleSource, kernel: Kernel, param: str) -> bool:
    """Whether every `tl.arange(0, param)` is broadcast along the last of two dimensions (`[None, :]`)."""
    found = False
    for call in kernel.calls("arange"):
        if code(call.args[-1].value) != param:
            continue
        sub = ms.parents.get(id(call))
        if not (isinstance(sub, cst.Subscript) and sub.value is call and len(sub.slice) == 2
                and isinstance(sub.slice[0].slice, cst.Index) and code(sub.slice[0].slice.value) == "None"):
            return False
        found = True
    return found
