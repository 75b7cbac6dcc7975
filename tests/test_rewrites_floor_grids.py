"""A grid or a K loop that counts whole tiles only (`(M // 64, N // 64)`, `range(0, K // BLOCK_K)`): its tiles
cover the size exactly where they divide it, masked or not. matmul_configs reads such a grid as the tiling of M
and N and autotunes it with the configs pruned to the tiles that divide the sizes; block_size, which would scale
the tile unpruned, says why it leaves it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.gemm_users import FLOOR_GRID, FLOOR_META_MASKED  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def made(source: str, rewrite: str) -> tuple[list[str], tuple[str, ...]]:
    found = options(source, (rewrite,))
    return [v.apply(found.module) for v in found.variants], found.reasons


def pruned(variant: str, sizes: dict[str, int]) -> list[dict]:
    """The tiles of the configs the variant's own prune function keeps for `sizes`, each config as Triton
    hands it (an object with `kwargs`)."""
    head = variant[:variant.index("@triton.autotune")]
    space: dict = {}
    exec(compile(head, "<variant>", "exec"), space)  # noqa: S102 - the rewriter's own output, the prune function
    prune = next(v for k, v in space.items() if k.endswith("_tiles_divide"))
    tiles = [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k} for m in (32, 64, 128) for n in (32, 64, 128)
             for k in (32, 64)]
    return [c.kwargs for c in prune([SimpleNamespace(kwargs=t) for t in tiles], sizes)]


def test_matmul_configs_turns_a_floor_grid_into_a_meta_grid_with_the_configs_pruned_to_divisors():
    variants, reasons = made(FLOOR_GRID, "matmul_configs")
    assert variants, reasons
    tutorial = variants[0]
    assert 'grid = lambda meta: (M // meta["BLOCK_M"], N // meta["BLOCK_N"])' in tutorial
    kept = pruned(tutorial, {"M": 192, "N": 96, "K": 64})
    assert kept and all(192 % c["BLOCK_M"] == 0 and 96 % c["BLOCK_N"] == 0 and 64 % c["BLOCK_K"] == 0 for c in kept)
    assert {c["BLOCK_M"] for c in kept} == {32, 64} and {c["BLOCK_N"] for c in kept} == {32}


def test_a_masked_kernel_whose_grid_and_loop_count_whole_tiles_is_pruned_too():
    variants, reasons = made(FLOOR_META_MASKED, "matmul_configs")
    assert variants, reasons
    kept = pruned(variants[0], {"M": 192, "N": 128, "K": 96})
    # the loads are masked, yet a 128-row tile would leave rows 128-191 undone and a 64 K block the last 32 of K
    assert kept and all(c["BLOCK_M"] != 128 and c["BLOCK_K"] == 32 for c in kept)


def test_block_size_leaves_a_floor_grids_tile_and_says_why():
    variants, reasons = made(FLOOR_GRID, "block_size")
    assert not any("BLOCK_M=128" in v or "M // 128" in v for v in variants)
    assert any("counts the whole tiles of BLOCK_M = 64 only" in r for r in reasons), reasons
