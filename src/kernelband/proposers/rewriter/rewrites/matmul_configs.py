"""matmul_configs: a tl.dot kernel autotuned over a matmul config list, in place of the autotune rewrite's
one-step grid around the starting tile. Two variants, one list each:

* Triton's matmul tutorial (03-matrix-multiplication.py, `get_cuda_autotune_config`, fp16 configs);
* TorchInductor's mm configs (torch/_inductor/kernel/mm_common.py, `mm_kernel_configs`), the 8 of them
  with tiles of at least 64 x 64, which fit the large shapes that the 32 x 32 starting tiles waste.

(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) as the sources write them. The kernel must be a plain GEMM
(`analysis.dots`: the constexprs sizing its M, N and K tiles are read from the tiles' shapes, M and N scaling a
program id, K stepping the loop that sums the product), with its accesses along each tile bounded, or each tile
checked to divide the size it tiles (`extents`: the autotuner prunes the configs whose tiles do not), or, where
that size is an integer of the source, known to divide it (the configs whose tiles do not are left out, and a
set none of whose configs is left with them): then any tile covers the same product. A tile the source fixes
(`tl.arange(0, 32)`) has no parameter to set: it keeps its size, and the configs set the others. A GROUP_M
swizzle the kernel has stays as the launch sets it; `grouped_ordering` adds one.

Any other tl.dot kernel (attention, say) gets the tiles of Triton's fused-attention tutorial on its free tiles:
a tile that scales a program id takes the tutorial's BLOCK_M values, one that a loop steps by its BLOCK_N
values. A tile is free when every access along it is bounded, nothing's result depends on its extent, and the
kernel reads it only as a tile's size (`roles`); a config keeps the order the launch's values have between two
tiles (BLOCK_M >= BLOCK_N stays so, equal tiles stay equal), which the kernel may rely on. A tile whose accesses
are not masked along a size the source fixes is free for the tutorial's values that divide it, and stays as the
launch sets it where none does.
"""

from __future__ import annotations

from kernelband.proposers.rewriter.analysis import knobs
from kernelband.proposers.rewriter.analysis.dots import Tile
from kernelband.proposers.rewriter.analysis.extents import unbounded_extents
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.rewrites.configs import ConfigSet

# (a tile that scales a program id, a tile a loop steps by, num_stages, num_warps): 06-fused-attention.py's tiles
ATTENTION = ((128, 64, 3, 8), (128, 32, 3, 4), (64, 64, 3, 4), (64, 32, 3, 4), (128, 128, 2, 8), (64, 64, 4, 4),
             (128, 64, 4, 8), (32, 32, 3, 4), (128, 128, 3, 8), (64, 64, 2, 4))
MAX_ATTENTION_CONFIGS = 8
TUTORIAL = ((128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
            (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2))
INDUCTOR = ((64, 64, 64, 3, 8), (64, 128, 32, 3, 4), (64, 128, 64, 3, 4), (128, 64, 32, 3, 4),
            (128, 128, 32, 2, 8), (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8))


def dot_axes(kernel: Kernel) -> dict[str, Tile] | str:
    """The tile of each of M, N and K ({"M": Tile("BLOCK_M", ...), ...}: a constexpr or an integer the source
    fixes) of a kernel that is a plain GEMM (`analysis.dots`); or the fact that is missing. split_k and
    persistent_tiles start from the same kernels."""
    dots = facts_of(kernel).dots
    if not dots.all:
        return f"{kernel.name} has no tl.dot, nor calls a helper that has one"
    # a square product (one constexpr for M and N, as an attention's Q @ K^T over BT x BT) counts where it is
    # the kernel's only kind: beside another product it is that kernel's side computation, not its GEMM
    plain = [d for d in dots.plain if not d.square] or dots.plain
    if not plain:
        return dots.all[0].why
    if len({(d.m, d.n, d.k) for d in plain}) != 1:
        return f"{kernel.name} has tl.dot calls over different tiles"
    return plain[0].axes


def free_axes(ms: ModuleSource, kernel: Kernel) -> tuple[dict[str, str], tuple[tuple[str, str | int], ...]] | str:
    """The constexpr sizing each of the GEMM's axes that a config can set (a tile the source fixes has none: it
    keeps its size, and the configs set the others), and the (tile, size) pairs whose divisibility a config needs
    where its accesses are not masked (`extents`: the size a parameter, or an integer); or the fact that keeps
    any tile from being certain to compute the same."""
    tiles = dot_axes(kernel)
    if isinstance(tiles, str):
        return tiles
    axes = {axis: tile.param for axis, tile in tiles.items() if tile.param is not None}
    if not axes:
        return (f"{kernel.name}'s M, N and K tiles are all fixed by the source "
                f"({', '.join(t.text for t in tiles.values())}): no config has a tile to set")
    shaped = [role for role in facts_of(kernel).roles.all.values() if role.shaped and role.param in axes.values()]
    if shaped:
        return shaped[0].why_not_free()
    divides = unbounded_extents(ms, kernel, list(axes.values()))
    if isinstance(divides, str):
        return divides
    return axes, tuple(divides)


def fitting(label: str, configs: list, divides: tuple[tuple[str, str | int], ...]) -> ConfigSet | str:
    """The set of the configs whose tiles divide the sizes that are integers (a config whose tile does not
    would reach past them), checked on the host against those that are parameters; or why none is left."""
    fixed = [(tile, size) for tile, size in divides if isinstance(size, int)]
    kept = [c for c in configs if all(size > 0 and size % c[0][tile] == 0 for tile, size in fixed if tile in c[0])]
    if not kept:  # the sizes no config's tile divides, else all: no config divides them all at once
        sizes = ", ".join(f"{tile} of {size}" for tile, size in [
            (tile, size) for tile, size in fixed if not any(size % c[0][tile] == 0 for c in configs)] or fixed)
        return (f"no config of {label} has tiles that divide the sizes the kernel fixes ({sizes}) along its "
                "unmasked accesses")
    return ConfigSet(label, kept, tuple((tile, size) for tile, size in divides if isinstance(size, str)))


def _order(a: int | str | None, b: int | str | None) -> int:
    """-1, 0 or 1 between two launch values; 0 where not known (two names, or a name and a number): equal
    tiles keep every relation a kernel may rely on (each divides the other)."""
    if isinstance(a, int) and isinstance(b, int):
        return (a > b) - (a < b)
    return 0


def _launched(ms: ModuleSource, kernel: Kernel) -> dict[str, int | str]:
    """What the launch sets each tile to: a number, or the name of the value it passes (the same name for two
    tiles means equal tiles); for an autotuned kernel, its first config's values."""
    if kernel.autotune is not None:
        found = _existing(kernel)
        return dict(found[0][0]) if found else {}
    return {k.params[0]: k.value if k.value is not None else k.name
            for k in knobs.find(ms)[0] if k.kernel is kernel and len(k.params) == 1}


def _existing(kernel: Kernel) -> list | None:
    from kernelband.proposers.rewriter.rewrites.autotune import existing_configs

    found = existing_configs(kernel)
    return found[1] if found is not None else None


def free_tiles(ms: ModuleSource, kernel: Kernel) -> ConfigSet | str:
    """The fused-attention tutorial's tiles on a tl.dot kernel's free tiles (module doc), or why none is free."""
    facts = facts_of(kernel)
    if not facts.dots.all:
        return f"{kernel.name} has no tl.dot, nor calls a helper that has one"
    launched = _launched(ms, kernel)
    free, why = [], ""
    for param in facts.tile_sizes:
        role = facts.roles[param]
        if not (role.tiles or role.steps):
            continue
        reason = role.why_not_free()
        if reason and role.unbounded and not role.shaped and not role.other:
            divides = unbounded_extents(ms, kernel, [param])
            reason = divides if isinstance(divides, str) else ""
            sizes = [size for _, size in divides if isinstance(size, int)] if not reason else []
            if sizes and not any(sizes[0] % (t if role.tiles else s) == 0 for t, s, _, _ in ATTENTION):
                # the launch's value stays, and the other tiles tune
                reason = (f"no tile of the fused-attention tutorial divides the {sizes[0]} {param} tiles, along "
                          f"which {kernel.name} does not mask")
        if reason or launched.get(param) is None:
            why = why or reason or f"the launch of {kernel.name} does not set {param} where it can be changed"
            continue
        free.append(param)
    if not free:
        return why or f"{kernel.name} has no tile that scales a program id or steps a loop"
    divides = unbounded_extents(ms, kernel, free)
    if isinstance(divides, str):
        return divides
    configs = []
    for tiled, stepped, stages, warps in ATTENTION:
        values = {p: tiled if facts.roles[p].tiles else stepped for p in free}
        if all(_order(values[p], values[q]) == _order(launched[p], launched[q]) for p in free for q in free):
            configs.append((values, warps, stages))
    if not configs:
        return f"no tile of the fused-attention tutorial keeps the order of {kernel.name}'s launch values"
    fits = fitting("Triton's fused-attention tutorial tiles", configs, tuple(divides))
    if isinstance(fits, str):
        return fits
    return ConfigSet(fits.label, fits.configs[:MAX_ATTENTION_CONFIGS], fits.divides)


def _configs(axes: dict[str, str], table: tuple) -> list:
    """A table's configs on the tiles a config can set; where the source fixes a tile, two rows that differ only
    there are one config, and where one constexpr sizes both M and N (a square tile), only the rows with equal M
    and N tiles are configs."""
    configs = []
    for *tiles, stages, warps in table:
        values: dict[str, int] = {}
        if all(values.setdefault(axes[axis], value) == value for axis, value in zip("MNK", tiles) if axis in axes):
            config = (values, warps, stages)
            if config not in configs:
                configs.append(config)
    return configs


def choose(ms: ModuleSource, kernel: Kernel) -> list[ConfigSet] | str:
    found = free_axes(ms, kernel)
    if isinstance(found, str):
        other = free_tiles(ms, kernel) if not any(d.plain for d in facts_of(kernel).dots.all) else found
        return [other] if isinstance(other, ConfigSet) else other
    axes, divides = found
    tables = (("Triton's matmul tutorial configs", TUTORIAL), ("Inductor's mm configs", INDUCTOR))
    sets = [fitting(label, _configs(axes, table), divides) for label, table in tables]
    kept = [s for s in sets if isinstance(s, ConfigSet)]
    return kept or sets[0]
