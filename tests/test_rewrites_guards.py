"""split_k and persistent_tiles on a GEMM with guards (`if pid_m * BM >= M: return`), launched on a grid that
rounds up (`M // 32 + 1`), so that some programs have no tile: the split twin keeps the guards (a guarded
tile's partial and reducing programs both leave), and the persistent twin skips a guarded tile and goes on to
the program's next one, where a `return` would leave the rest of its tiles undone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.gemm import GUARDS  # noqa: E402
from test_rewrites_matmul import interpreted_pair, kernel_text  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402

ROUNDED_UP = GUARDS.replace("guarded_mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))]", "guarded_mm[(M // 32 + 1, N // 32 + 1)]")


def variant(source: str, rewrite: str) -> str:
    found = options(source, (rewrite,))
    assert len(found.variants) == 1, found.reasons
    return found.variants[0].apply(found.module)


def test_the_persistent_twin_skips_a_guarded_tile_and_the_split_twin_keeps_the_guards():
    assert "M // 32 + 1" in ROUNDED_UP
    persistent = kernel_text(variant(ROUNDED_UP, "persistent_tiles"), "guarded_mm_persistent")
    assert "return" not in persistent
    assert ("        if pid_m * BM >= M:\n            pass\n        else:\n            if pid_n * BN >= N:\n"
            "                pass\n            else:\n                rm = pid_m * BM") in persistent
    split = kernel_text(variant(ROUNDED_UP, "split_k"), "guarded_mm_split_k")
    assert split.count("        return\n") == 2 and split.index("return") < split.index("if REDUCE:")


def test_a_return_other_than_a_guard_is_refused():
    nested = GUARDS.replace("    if pid_n * BN >= N:\n        return\n",
                            "    if pid_n * BN >= N:\n        acc0 = 0\n        return\n")
    for rewrite in ("split_k", "persistent_tiles"):
        found = options(nested, (rewrite,))
        assert not found.variants and found.reasons == (
            "guarded_mm has atomics or a return other than a guard (`if C: return` in its body)",)


@pytest.mark.slow
def test_persistent_and_split_twins_of_a_guarded_gemm_give_the_originals_outputs_in_the_interpreter():
    """64 x 96 on a (3, 4) grid: 12 tiles on 4 "SMs", 6 of them guarded, the program that takes tile 2 (guarded)
    taking tile 6 (not) after it. 32 x 16 with K = 512 on a (2, 1) grid splits K 2 ways (the partial launch,
    then the reducing one), one tile guarded."""
    persistent, split = variant(ROUNDED_UP, "persistent_tiles"), variant(ROUNDED_UP, "split_k")
    check = """
variant.guarded_mm_{twin} = Recorded(variant.guarded_mm_{twin})
for M, N, K in {shapes}:
    a = torch.randn(M, K).half()
    b = (torch.randn(K, N) * K**-0.5).half()
    grids.clear()
    got, want = variant.matmul(a, b), original.matmul(a, b)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)
    assert grids == {grids!r}, grids
"""
    interpreted_pair(ROUNDED_UP, persistent, check.format(twin="persistent", shapes=[(64, 96, 64)], grids=[(4,)]))
    interpreted_pair(ROUNDED_UP, split, check.format(twin="split_k", shapes=[(32, 16, 512)], grids=[(2, 1, 2), (2, 1)]))
