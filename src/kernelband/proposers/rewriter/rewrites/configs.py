"""What the fixed autotune config sets (`inductor_configs`, `matmul_configs`) share: the shape of a config
and of a chooser, and the checks that a kernel's block sizes are free to take any of a set's values.

A config set replaces a block size by values far from the launch's (16 -> 1024, 32 -> 256), where the
one-step grid of the autotune rewrite moves it by x2 or /2. So a set is offered only where any value gives
the same results: every tl.load and tl.store is masked (a tile past the end reads and writes nothing), and
nothing reshapes, scans or sorts a tile (their results depend on its extent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, contains, int_value, loads, subnodes

Config = tuple[dict[str, int], int, int | None]  # block values, num_warps, num_stages (None: Triton's default)


@dataclass(frozen=True)
class ConfigSet:
    """A fixed list of configs for one kernel. `divides`: (tile, size) pairs of a kernel whose accesses along the
    tile are not masked: a config is used only where its tile divides the size (the autotuner prunes the
    others; the launch's own config stays where none does)."""

    label: str
    configs: list[Config]
    divides: tuple[tuple[str, str], ...] = ()


# The sets a chooser offers for one kernel; or why it offers none.
Chooser = Callable[[ModuleSource, Kernel], list[ConfigSet] | str]

SHAPE_CALLS = ("reshape", "view", "broadcast_to", "expand_dims", "trans", "permute", "join", "split",
               "interleave", "cat", "histogram", "cumsum", "cumprod", "associative_scan", "sort", "flip", "gather")
REDUCTIONS = ("sum", "max", "min", "reduce", "argmax", "argmin", "xor_sum")


def masked(call: cst.Call, store: bool) -> bool:
    """Whether a tl.load(pointer, mask, ...) / tl.store(pointer, value, mask, ...) call has a mask (or a
    block pointer's boundary check)."""
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    positional = len([a for a in call.args if a.keyword is None])
    return positional >= (3 if store else 2) or bool({"mask", "boundary_check"} & keywords)


def tile_names(kernel: Kernel) -> set[str]:
    """The block-size constexprs and the locals whose value follows from one or from a tl.arange (loop
    variables stepping by one included): what may differ from one tile size to another."""
    aranges = {id(c) for c in kernel.calls("arange")}
    tainted = set(facts_of(kernel).tile_sizes)

    def follows(node: cst.CSTNode) -> bool:
        return contains(node, aranges) or any(n.value in tainted for n in loads(node))

    loops = subnodes(kernel.node.body, cst.For)
    changed = True
    while changed:
        before = len(tainted)
        for name, values in kernel.scope.assigns.items():
            if name not in tainted and any(v is not None and follows(v) for v in values):
                tainted.add(name)
        for loop in loops:
            if follows(loop.iter):
                tainted |= {n.value for n in subnodes(loop.target, cst.Name)}
        changed = len(tainted) > before
    return tainted


def free_blocks(kernel: Kernel) -> str:
    """Why the kernel's block sizes are not free to take any value ("" when they are). An access without a
    mask is fine where its address does not follow the tile (one scalar a row, say)."""
    tile = tile_names(kernel)
    aranges = {id(c) for c in kernel.calls("arange")}
    unmasked = [c for c in kernel.loads if not masked(c, False)] + [c for c in kernel.stores if not masked(c, True)]
    unmasked = [c for c in unmasked if contains(c.args[0].value, aranges)
                or any(n.value in tile for n in loads(c.args[0].value))]
    if unmasked:
        return (f"{kernel.name} has {len(unmasked)} unmasked tl.load/tl.store: a larger tile would reach past the "
                "end of its tensors")
    if shaped := sorted({name for name in SHAPE_CALLS if kernel.calls(name)}):
        return f"{kernel.name} calls tl.{shaped[0]}, whose result depends on the tile's extent"
    return ""


def arange_extents(kernel: Kernel) -> set[str] | None:
    """The code of each distinct `tl.arange(0, X)` extent; None for an arange that does not start at 0."""
    extents = set()
    for call in kernel.calls("arange"):
        if len(call.args) != 2 or int_value(call.args[0].value) != 0:
            return None
        extents.add(code(call.args[1].value))
    return extents


def broadcasts(kernel: Kernel) -> bool:
    """Whether the kernel indexes with None (`x[:, None]`): its tiles have more than one dimension."""
    return any(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
               and e.slice.value.value == "None"
               for sub in subnodes(kernel.node.body, cst.Subscript) for e in sub.slice)


def warps_for(elements: int, per_warp: int, low: int, high: int) -> int:
    """Inductor's num_warps for a tile: elements / per_warp, a power of two within [low, high]."""
    warps = max(low, min(high, elements // per_warp))
    return 1 << (warps.bit_length() - 1)
