"""matmul_configs: a tl.dot kernel autotuned over a matmul config list, in place of the autotune rewrite's
one-step grid around the starting tile. Two variants, one list each:

* Triton's matmul tutorial (03-matrix-multiplication.py, `get_cuda_autotune_config`, fp16 configs);
* TorchInductor's mm configs (torch/_inductor/kernel/mm_common.py, `mm_kernel_configs`), the 8 of them
  with tiles of at least 64 x 64, which fit the large shapes that the 32 x 32 starting tiles waste.

(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) as the sources write them. The kernel must be a plain GEMM
(`analysis.dots`: the constexprs sizing its M, N and K tiles are read from the tiles' shapes, M and N scaling a
program id, K stepping the loop that sums the product), and every load and store bounded
(`configs.free_blocks`): then any tile covers the same product.
A GROUP_M swizzle the kernel has stays as the launch sets it; `grouped_ordering` adds one.
"""

from __future__ import annotations

from kernelband.proposers.rewriter.analysis.extents import unbounded_extents
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.rewrites.configs import ConfigSet

TUTORIAL = ((128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
            (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2))
INDUCTOR = ((64, 64, 64, 3, 8), (64, 128, 32, 3, 4), (64, 128, 64, 3, 4), (128, 64, 32, 3, 4),
            (128, 128, 32, 2, 8), (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8))


def dot_axes(kernel: Kernel) -> dict[str, str] | str:
    """The constexpr sizing each of M, N and K ({"M": "BLOCK_M", ...}) of a kernel that is a plain GEMM
    (`analysis.dots`) whose tiles may take any size (module doc); or the fact that is missing. split_k and
    persistent_tiles start from the same kernels."""
    dots = facts_of(kernel).dots
    if not dots.all:
        return f"{kernel.name} has no tl.dot, nor calls a helper that has one"
    plain = dots.plain
    if not plain:
        return dots.all[0].why
    if len({(d.m, d.n, d.k) for d in plain}) != 1:
        return f"{kernel.name} has tl.dot calls over different tiles"
    return plain[0].axes


def free_axes(ms: ModuleSource, kernel: Kernel) -> tuple[dict[str, str], tuple[tuple[str, str], ...]] | str:
    """The GEMM's axes, and the (tile, size) pairs whose divisibility a config needs where its accesses are not
    masked (`extents`); or the fact that keeps any tile from being certain to compute the same."""
    axes = dot_axes(kernel)
    if isinstance(axes, str):
        return axes
    shaped = [role for role in facts_of(kernel).roles.all.values() if role.shaped and role.param in axes.values()]
    if shaped:
        return shaped[0].why_not_free()
    divides = unbounded_extents(ms, kernel, list(axes.values()))
    if isinstance(divides, str):
        return divides
    return axes, tuple(divides)


def choose(ms: ModuleSource, kernel: Kernel) -> list[ConfigSet] | str:
    found = free_axes(ms, kernel)
    if isinstance(found, str):
        return found
    axes, divides = found
    m, n, k = axes["M"], axes["N"], axes["K"]
    return [ConfigSet(label, [({m: bm, n: bn, k: bk}, warps, stages) for bm, bn, bk, stages, warps in table], divides)
            for label, table in (("Triton's matmul tutorial configs", TUTORIAL), ("Inductor's mm configs", INDUCTOR))]
