"""split_k and persistent_tiles on GEMMs whose batch is the program id of grid axis 2, and split_k of a K loop
that counts whole K tiles (`range(0, K // BLOCK_K)`), with the outputs of the original in the interpreter
where the twins run (its 4 "SMs"): a split shares axis 2 with the kernel's own values (SPLIT_K programs a
batch), a persistent program walks the tiles of all three axes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.gemm_users import BMM_PROGRAM_ID_2, LINEAR_GELU  # noqa: E402
from test_rewrites_matmul import interpreted_pair  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def variant(source: str, rewrite: str) -> str:
    found = options(source, (rewrite,))
    assert len(found.variants) == 1, found.reasons
    return found.variants[0].apply(found.module)


BMM = """
variant.{twin} = Recorded(variant.{twin})
for (B, M, N, K), expected in {shapes!r}.items():
    x = torch.randn(B, M, K).half()
    y = (torch.randn(B, K, N) * K**-0.5).half()
    grids.clear()
    got, want = variant.bmm(x, y), original.bmm(x, y)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (B, M, N, K)
    assert [tuple(g) for g in grids] == expected, (grids, expected)
"""


@pytest.mark.slow
def test_split_k_of_a_batch_on_axis_2_gives_the_originals_outputs_in_the_interpreter():
    """Two batches of one 32 x 32 tile and K = 512 take SPLIT_K = 2 (4 "SMs" over 2 tiles): the partial launch
    has 2 x 2 programs on axis 2, the reduction one a batch; three batches of two tiles take the original."""
    new = variant(BMM_PROGRAM_ID_2, "split_k")
    shapes = {(2, 16, 32, 512): [(1, 1, 4), (1, 1, 2)], (1, 16, 20, 512): [(1, 1, 4), (1, 1, 1)],
              (3, 40, 20, 130): []}
    interpreted_pair(BMM_PROGRAM_ID_2, new, BMM.format(twin="bmm_kernel_split_k", shapes=shapes))


@pytest.mark.slow
def test_persistent_tiles_of_a_batch_on_axis_2_gives_the_originals_outputs_in_the_interpreter():
    """Three batches of 2 x 2 tiles (12 tiles) run on 4 programs, each taking every 4th (batch, tile) pair."""
    new = variant(BMM_PROGRAM_ID_2, "persistent_tiles")
    shapes = {(3, 40, 48, 72): [(4,)], (1, 16, 20, 64): []}
    interpreted_pair(BMM_PROGRAM_ID_2, new, BMM.format(twin="bmm_kernel_persistent", shapes=shapes))


def test_a_kernel_reading_the_grids_extent_on_axis_2_stays_refused():
    """tl.num_programs(2) would read SPLIT_K times the batch count in a partial program."""
    line = "    pb = tl.program_id(2)\n"
    assert line in BMM_PROGRAM_ID_2
    source = BMM_PROGRAM_ID_2.replace(line, line + "    pb = pb % tl.num_programs(2)\n")
    for rewrite in ("split_k", "persistent_tiles"):
        found = options(source, (rewrite,))
        assert not found.variants, rewrite
        assert any("axis 2" in reason for reason in found.reasons), found.reasons


@pytest.mark.slow
def test_split_k_of_a_loop_over_whole_k_tiles_gives_the_originals_outputs_in_the_interpreter():
    """One 32 x 32 tile: K = 512 (16 K tiles) takes SPLIT_K = 4; K = 160 (5 K tiles) takes 2, splitting the
    tiles 3 and 2."""
    new = variant(LINEAR_GELU, "split_k")
    shapes = {(16, 32, 512): 4, (20, 8, 160): 2, (64, 64, 96): 1}
    check = f"""
variant.linear_fwd_split_k = Recorded(variant.linear_fwd_split_k)
for (M, N, K), expected in {shapes!r}.items():
    x = torch.randn(M, K).half()
    w = (torch.randn(N, K) * K**-0.5).half()
    bias = torch.randn(N).half()
    grids.clear()
    got, want = variant.linear_gelu(x, w, bias), original.linear_gelu(x, w, bias)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)
    assert [g[-1] for g in grids[:1]] == ([expected] if expected > 1 else []), grids
"""
    interpreted_pair(LINEAR_GELU, new, check)
