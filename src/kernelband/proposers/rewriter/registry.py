"""The rewriter's built-in source transformations, by name. Each takes a parsed module and returns every
variant it can make of it, in a fixed order, with the reasons it cannot do more. Where one makes nothing of a
module as written, some read it re-spelled: literal tiles as constexprs (literal_tiles.py), helper calls written
out (inline_helpers.py).

    block_size        scale a block-size constexpr (x2, /2, x4, /4) with the grid that follows it
    vector_width      more elements per thread: a larger 1-D block for the same warps, or fewer warps
    num_warps         set num_warps at a launch
    num_stages        set num_stages at a launch of a kernel whose loop loads data
    autotune          wrap a kernel in @triton.autotune over block sizes, num_warps and num_stages
                      (or add a config to a kernel that is autotuned already)
    cache_hints       eviction_policy / cache_modifier on tl.load and tl.store
    grouped_ordering  visit the tiles of a 2-D tiled launch in groups of GROUP_M rows (L2 swizzle)
    coarsen           each program does the work of C consecutive programs, one after another (coarsen.py)
    rows              each program does the work of R consecutive programs side by side (rows.py)
    fused_absmax      the host's `x.abs().max()` (two passes over x) as one: the infinity norm
    inductor_configs  autotune a row or element-wise kernel over Inductor's configs (inductor_configs.py)
    matmul_configs    autotune a tl.dot kernel over the matmul tutorial's and Inductor's configs (matmul_configs.py);
                      it, split_k and persistent_tiles carry divisibility_hints where they apply
    single_pass       a row that fits one block read in one pass, the blocked loops kept for longer rows
                      (single_pass.py)
    online_softmax    a max pass and an exp-sum pass over a row as one, with a running max; a row held in one
                      block walked in chunks for long rows, its statistics online (online_softmax.py)
    split_rows        rows whose statistics are sums (RMSNorm, an L2 norm, a row sum, LayerNorm's mean then variance),
                      too few for the SMs, split over several programs a row: a stage of partial sums per loop of
                      sums, combined in a fixed order (split_rows.py)
    data_masks        loads and stores masked by a value the kernel loaded, masked by their bounds only with the data
                      term applied by tl.where, so that they vectorise (analysis/data_masks.py, data_masks.py)
    contiguity_hints  tl.max_contiguous / tl.multiple_of on `M + tl.arange(0, P)` where M is a multiple of P
                      (contiguity_hints.py)
    split_k           a tl.dot kernel's K loop split over a third grid axis where its M x N tiles leave SMs idle,
                      the float32 partials summed in order (split_k.py)
    persistent_tiles  a tl.dot kernel on one program per SM, each looping over the tiles (persistent_tiles.py)
    divisibility_hints  a twin that knows which integer parameters of its offsets and masks are multiples of 8,
                      launched where they are (divisibility_hints.py)
    launch_fusion     two launches that run one after the other as one (analysis/buffers.py): the second reading
                      what the same program of the first wrote, kept in registers; an element-wise kernel over a
                      flattened tensor computed where the next reads its output; a two-stage reduction whose last
                      program combines; independent launches as one grid (launch_fusion.py and its launch_*.py)
    zero_fill         a buffer the host allocates zeroed (torch.zeros, zeros_like, new_zeros, .zero_()) that the first
                      launch after it writes whole before anything reads it, allocated empty (analysis/coverage.py);
                      every other rewrite's variants drop such fills too
"""

from __future__ import annotations

from collections.abc import Callable

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.edits import Found
from kernelband.proposers.rewriter.rewrites import inductor_configs, matmul_configs
from kernelband.proposers.rewriter.rewrites.autotune import autotune, config_sets
from kernelband.proposers.rewriter.rewrites.block_sizes import block_size, vector_width
from kernelband.proposers.rewriter.rewrites.cache_hints import cache_hints
from kernelband.proposers.rewriter.rewrites.coarsen import coarsen
from kernelband.proposers.rewriter.rewrites.contiguity_hints import contiguity_hints
from kernelband.proposers.rewriter.rewrites.data_masks import data_masks
from kernelband.proposers.rewriter.rewrites.divisibility_hints import aligned, divisibility_hints
from kernelband.proposers.rewriter.rewrites.fused_absmax import fused_absmax
from kernelband.proposers.rewriter.rewrites.grouped_ordering import grouped_ordering
from kernelband.proposers.rewriter.rewrites.inline_helpers import inlining
from kernelband.proposers.rewriter.rewrites.inline_wrappers import wrapping
from kernelband.proposers.rewriter.rewrites.launch_fusion import launch_fusion
from kernelband.proposers.rewriter.rewrites.launch_options import num_stages, num_warps
from kernelband.proposers.rewriter.rewrites.literal_tiles import lifting
from kernelband.proposers.rewriter.rewrites.online_softmax import online_softmax
from kernelband.proposers.rewriter.rewrites.persistent_tiles import persistent_tiles
from kernelband.proposers.rewriter.rewrites.rows import rows
from kernelband.proposers.rewriter.rewrites.single_pass import single_pass
from kernelband.proposers.rewriter.rewrites.split_k import split_k
from kernelband.proposers.rewriter.rewrites.split_rows import split_rows
from kernelband.proposers.rewriter.rewrites.zero_fill import dropping_fills, zero_fill

REWRITES: dict[str, Callable[[ModuleSource], Found]] = {
    # the rewrites that set a tile's size read literal tiles (`tl.arange(0, 1024)`) as constexprs where the
    # module as written gives them none (rewrites/literal_tiles.py)
    "block_size": lifting(block_size),
    "vector_width": lifting(vector_width),
    "num_warps": num_warps,
    "num_stages": num_stages,
    "autotune": lifting(autotune),
    "cache_hints": cache_hints,
    "grouped_ordering": grouped_ordering,
    "coarsen": coarsen,
    "rows": rows,
    "fused_absmax": fused_absmax,
    "inductor_configs": lifting(config_sets("inductor_configs", inductor_configs.choose)),
    # the tl.dot tile rewrites carry the divisibility hints: their tiles pay only with 16-byte loads
    "matmul_configs": aligned(lifting(config_sets("matmul_configs", matmul_configs.choose, floors=True))),
    # the rewrites that merge or split a kernel's loops read them where helper calls are written out
    # (rewrites/inline_helpers.py) where the module as written gives them none
    "single_pass": inlining(single_pass),
    "online_softmax": inlining(online_softmax),
    "split_rows": inlining(split_rows),
    "contiguity_hints": contiguity_hints,
    "data_masks": data_masks,
    "split_k": aligned(split_k),
    "persistent_tiles": aligned(persistent_tiles),
    "divisibility_hints": divisibility_hints,
    # launch_fusion reads two launches in one body: where each is in a function of its own that a third calls,
    # it reads them with the calls written out (rewrites/inline_wrappers.py)
    "launch_fusion": wrapping(launch_fusion),
    "zero_fill": zero_fill,
}
# every other rewrite drops the host's dead zero fills too (rewrites/zero_fill.py, `dropping_fills`)
REWRITES = {name: rewrite if name == "zero_fill" else dropping_fills(rewrite) for name, rewrite in REWRITES.items()}
# Rewrites in no built-in strategy, until a GPU run shows they help: a strategies file can add them (README).
STRATEGY_FILE_ONLY: frozenset[str] = frozenset()
