"""The launch-option rewrites: set num_warps or num_stages at a kernel launch, scaling a value the host
computes at run time instead of overwriting it."""


from __future__ import annotations

import math
from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, int_value
from kernelband.proposers.rewriter.edits import (
    Found,
    Move,
    Variant,
    set_kwarg,
)

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
DEFAULT_WARPS, DEFAULT_STAGES = 4, 3  # Triton's defaults on NVIDIA GPUs


def touches(launch: Launch) -> frozenset[str]:
    return frozenset({launch.scope.top or launch.kernel.name})

# -- launch options ------------------------------------------------------------------------------------------
def option_value(launch: Launch, name: str, default: int) -> tuple[int | None, cst.Call]:
    """The value a launch gives an option (None: computed at run time), and the call to edit."""
    arg = launch.kwarg(name)
    if arg is None:
        return default, launch.call
    if isinstance(arg.value, cst.Integer):
        return int_value(arg.value), launch.call
    if isinstance(arg.value, cst.Name):
        return int_value(launch.scope.value(arg.value.value)), launch.call
    return None, launch.call


def _nearest(choices: tuple[int, ...], current: int | None) -> list[int]:
    """Choices by distance (in powers of two) from the current value, larger first; all when unknown."""
    centre = current or DEFAULT_WARPS
    ordered = sorted(choices, key=lambda v: (abs(math.log2(v) - math.log2(centre)), v < centre))
    return [v for v in ordered if v != current]


def _launch_option(ms: ModuleSource, name: str, default: int, choices: tuple[int, ...],
                   wanted: Callable[[Kernel], str], scale_computed: bool = False) -> Found:
    """Variants of a launch option: each choice near the current value, or, with `scale_computed`, a value
    the launch computes at run time scaled (`_scaled_warps`) rather than overwritten."""
    variants, reasons = [], []
    for launch in ms.launches:
        kernel = launch.kernel
        if kernel.autotune is not None:
            reasons.append(f"{kernel.name} is autotuned: its configs set {name}")
            continue
        if why := wanted(kernel):
            reasons.append(why)
            continue
        current, call = option_value(launch, name, default)
        if current is None and scale_computed:
            variants.extend(_scaled_warps(launch, call, choices))
            continue
        shown = current if current is not None else code(launch.kwarg(name).value)
        for value in _nearest(choices, current):
            variants.append(Variant(name, f"{name} {shown} -> {value} at the {launch.where}", touches(launch),
                                    ((call, set_kwarg(name, str(value))),),
                                    move=_step(name, current, value, launch)))
    return Found(variants, reasons)


def _step(name: str, current: int | None, value: int, launch: Launch) -> Move | None:
    """The coordinate-descent step from `current` to `value`: x2 and /2 for num_warps, +1 and -1 for num_stages
    (Inductor's neighbours)."""
    if current is None:
        return None
    steps = {current * 2: "x2", current / 2: "/2"} if name == "num_warps" else {current + 1: "+1", current - 1: "-1"}
    step = steps.get(value)
    return Move(f"{name} at the {launch.where}", step) if step else None


# A num_warps computed at run time is the kernel author's scaling with the block (softmax_triton1 and
# square_matrix: 4, 8 or 16 as the row grows; geglu_tanh_triton: from a helper). Overwriting it with a constant
# throws that scaling away: in bench 2 (H200), softmax_triton1's `num_warps -> 1` put its widest rows on one warp
# and did not compile in 180 s. So the rewrite scales the computed value, within the choices' range.
WARP_SCALINGS = (("min({hi}, {w} * 2)", "doubled"), ("max({lo}, {w} // 2)", "halved"),
                 ("min({hi}, {w} * 4)", "times 4"))


def _scaled_warps(launch: Launch, call: cst.Call, choices: tuple[int, ...]) -> list[Variant]:
    given = launch.kwarg("num_warps").value
    shown = code(given)
    w = shown if isinstance(given, cst.Name) else f"({shown})"
    out = []
    for template, said in WARP_SCALINGS:
        expr = template.format(w=w, lo=min(choices), hi=max(choices))
        step = {"doubled": "x2", "halved": "/2"}.get(said)
        out.append(Variant("num_warps", f"num_warps {shown} -> {expr} (the computed value {said}) at the "
                           f"{launch.where}", touches(launch), ((call, set_kwarg("num_warps", expr)),),
                           move=Move(f"num_warps at the {launch.where}", step) if step else None))
    return out


def num_warps(ms: ModuleSource) -> Found:
    return _launch_option(ms, "num_warps", DEFAULT_WARPS, WARPS, lambda kernel: "", scale_computed=True)


def num_stages(ms: ModuleSource) -> Found:
    def wanted(kernel: Kernel) -> str:
        return "" if kernel.pipelinable else f"{kernel.name} has no loop that loads: nothing to pipeline"
    return _launch_option(ms, "num_stages", DEFAULT_STAGES, STAGES, wanted)
