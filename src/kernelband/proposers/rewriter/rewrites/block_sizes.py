"""The block-size rewrites: scale a block-size constexpr with the grid that follows it (block_size), or give
each thread more elements (vector_width)."""


from __future__ import annotations

from kernelband.proposers.rewriter.analysis import knobs as knobs_mod
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.knobs import Knob
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.edits import (
    Found,
    Move,
    Variant,
    replace_with,
    set_int,
    set_kwarg,
)
from kernelband.proposers.rewriter.rewrites.launch_options import (
    DEFAULT_WARPS,
    option_value,
    touches,
)


# -- block sizes --------------------------------------------------------------------------------------------
def _scaled(knob: Knob, factor: float, rewrite: str, why: str = "") -> Variant | None:
    if knob.value is None or knob.kind == "shared":
        return _scaled_at_runtime(knob, factor, rewrite, why)
    new = int(knob.value * factor)
    if new * 1.0 != knob.value * factor or not knob.allows(new):
        return None
    edits = tuple((node, set_int(new - 1 if id(node) in knob.less_one else new)) for node in knob.nodes)
    if knob.kind == "literal":
        what = f"{knob.label} {knob.value} -> {new} at the {knob.where}"
    else:
        home = knob.launches[0].scope.name if knob.kind != "module" else "module"
        what = f"{knob.name} {knob.value} -> {new} ({knob.kind} in {home}: {knob.label} of the {knob.where})"
    return Variant(rewrite, why + what, knob.touches, edits, move=_move(knob, factor, rewrite))


def _move(knob: Knob, factor: float, rewrite: str) -> Move | None:
    if rewrite != "block_size" or factor not in (2, 0.5):
        return None
    return Move(f"{knob.label} at the {knob.where}", "x2" if factor == 2 else "/2")


def _scaled_at_runtime(knob: Knob, factor: float, rewrite: str, why: str) -> Variant | None:
    if factor not in (2, 0.5) or (knob.value is not None and not knob.allows(int(knob.value * factor))):
        return None
    op = "* 2" if factor == 2 else "// 2"
    edits = tuple((node, replace_with(f"{knob.name} {op}", parenthesize=id(node) in knob.grid_nodes))
                  for node in knob.nodes)
    what = f"{knob.label} {knob.name} -> {knob.name} {op} at the {knob.where}"
    return Variant(rewrite, why + what, knob.touches, edits, move=_move(knob, factor, rewrite))


def block_size(ms: ModuleSource) -> Found:
    knobs, reasons = knobs_mod.find(ms)
    variants = [v for knob in knobs for f in (2, 0.5, 4, 0.25) if (v := _scaled(knob, f, "block_size"))]
    return Found(variants, reasons)


def vector_width(ms: ModuleSource) -> Found:
    """Elements per thread = BLOCK / (32 * num_warps): grow it for wider (vectorised) loads and stores."""
    knobs, reasons = knobs_mod.find(ms)
    variants = []
    for knob in knobs:
        if knob.kernel.uses_dot:
            reasons.append(f"{knob.kernel.name} tiles a tl.dot: its block sizes are not a vector width")
            continue
        variants.extend(v for f in (2, 4) if (v := _scaled(knob, f, "vector_width", "more elements per thread: ")))
    for launch in ms.launches:
        if launch.kernel.uses_dot or launch.kernel.autotune is not None or not _blocked(launch.kernel):
            continue
        current, where = option_value(launch, "num_warps", DEFAULT_WARPS)
        if current is not None and current > 1:
            variants.append(Variant("vector_width", f"more elements per thread: num_warps {current} -> "
                                    f"{current // 2} at the {launch.where}", touches(launch),
                                    ((where, set_kwarg("num_warps", str(current // 2))),)))
    return Found(variants, reasons)


def _blocked(kernel: Kernel) -> bool:
    facts = facts_of(kernel)
    return bool(facts.tiled or facts.looped)
