"""zero_fill: a buffer the host allocates zeroed, whose zeros no one can see because the first launch after it
writes every element before anything reads one (analysis/zero_fills.py, analysis/coverage.py), is allocated
empty instead: the zero fill is a full write of the buffer that the kernel's own writes make dead.

    out = torch.zeros_like(x)             ->   out = torch.empty_like(x)
    out = torch.zeros((M, N), dtype=d)    ->   out = torch.empty((M, N), dtype=d)
    out = x.new_zeros(n)                  ->   out = x.new_empty(n)
    out = torch.full((n,), 0, dtype=d)    ->   out = torch.empty((n,), dtype=d)
    out = torch.empty(n).zero_()          ->   out = torch.empty(n)
    out.zero_()  (after an empty one)     ->   (the line goes)

Shape, dtype, device and layout arguments stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.zero_fills import (
    ZEROED_METHODS,
    ZEROED_TORCH,
    ZeroFill,
    zero_fills,
)
from kernelband.proposers.rewriter.edits import Edit, Found, Variant, carried, without


def _emptied(fill: ZeroFill) -> Edit:
    if fill.kind == "chain":
        return lambda call: call.func.value
    if fill.kind == "statement":
        return lambda statement: cst.RemovalSentinel.REMOVE

    def edit(call: cst.Call) -> cst.Call:
        attr = call.func.attr.value
        new = {**ZEROED_TORCH, **ZEROED_METHODS}[attr]
        args = list(call.args)
        if attr in ("full", "full_like", "new_full"):  # the fill value goes with the fill
            keyed = [i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "fill_value"]
            args = without(args, set(keyed) if keyed else {[i for i, a in enumerate(args) if a.keyword is None][1]})
        return call.with_changes(func=call.func.with_changes(attr=cst.Name(new)), args=args)
    return edit


def zero_fill(ms: ModuleSource) -> Found:
    fills = zero_fills(ms)
    if not fills:
        return Found([], ["no buffer allocated zeroed on the host (torch.zeros, zeros_like, new_zeros, full with 0, "
                          ".zero_())"])
    variants, reasons = [], []
    for fill in fills:
        if fill.refusal is not None:
            reasons.append(f"{fill.where}: {fill.refusal}")
            continue
        kernel = fill.site.kernel.name
        variants.append(Variant(
            "zero_fill", f"{fill.where} allocated empty: {kernel} writes every element of it ({fill.param}) "
            f"before anything reads one", frozenset({fill.hf.name}),
            ((fill.edit, _emptied(fill)),)))
    return Found(variants, reasons)


def dropping_fills(rewrite: Callable[[ModuleSource], Found]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, each of its variants with the host's dead zero fills dropped too, wherever they are dead in the
    module the variant makes (checked there, as on any module).

    Why: a dead zero fill is a full write of the buffer, a cost that no tile, config or launch of the kernel
    takes away. Drawn as an arm of its own, the drop lands on whichever branch the search picks, rarely the one
    that holds the best tiles. Only where the parent has a fill to drop: most modules allocate nothing zeroed,
    and looking again would parse every variant's module once more."""
    follow = carried(rewrite, zero_fill, lambda rationale: rationale.split(":")[0],
                     lambda ms: len(zero_fills(ms)))

    def carrying(ms: ModuleSource) -> Found:
        return follow(ms) if zero_fill(ms).variants else rewrite(ms)
    carrying.plain = follow.plain
    return carrying
