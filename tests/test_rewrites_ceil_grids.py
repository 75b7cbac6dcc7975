"""A grid whose ceiling divisions write the divisor less one as its value (`(M + 31) // 32`): a tile size is a
knob there, the rewrites that change it change that value with it (`(M + 63) // 64`), and one that autotunes
it reads `meta["BLOCK_M"] - 1`; with the same outputs in the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings import Spelling  # noqa: E402
from respellings.check import same_outputs  # noqa: E402
from respellings.gemm import CEIL_BY_HAND, INPUTS  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def made(source: str, rewrite: str) -> list[tuple[str, str]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants]


def test_block_size_scales_the_divisor_and_the_divisor_less_one_together():
    by_rationale = dict(made(CEIL_BY_HAND, "block_size"))
    doubled = by_rationale["BLOCK_M 32 -> 64 at the matmul_kernel launch in matmul"]
    assert "grid = (((M + 63) // 64) * ((N + 31) // 32),)" in doubled and "BLOCK_M=64" in doubled
    halved = by_rationale["BLOCK_N 32 -> 16 at the matmul_kernel launch in matmul"]
    assert "grid = (((M + 31) // 32) * ((N + 15) // 16),)" in halved and "BLOCK_N=16" in halved


def test_matmul_configs_reads_the_divisor_less_one_from_meta():
    [(_, tutorial), _] = made(CEIL_BY_HAND, "matmul_configs")
    assert ('grid = lambda meta: (((M + (meta["BLOCK_M"] - 1)) // meta["BLOCK_M"]) * '
            '((N + (meta["BLOCK_N"] - 1)) // meta["BLOCK_N"]),)') in tutorial


def test_a_numerator_other_than_the_divisor_less_one_is_no_ceiling_division():
    """`(M + 15) // 32` counts fewer tiles than cdiv(M, 32): the grid does not follow BLOCK_M, which stays."""
    short = CEIL_BY_HAND.replace("((M + 31) // 32)", "((M + 15) // 32)")
    rationales = [r for r, _ in made(short, "block_size")]
    assert rationales and not any(r.startswith("BLOCK_M ") for r in rationales)


@pytest.mark.slow
def test_every_block_size_variant_gives_the_originals_outputs_in_the_interpreter():
    variants = [new for _, new in made(CEIL_BY_HAND, "block_size")]
    assert len(variants) >= 4
    same_outputs(Spelling("gemm", "ceil_by_hand", CEIL_BY_HAND, "matmul", INPUTS, ()), variants)
