"""single_pass on passes split into an unmasked main loop and a masked tail (FlagGems' softmax, TritonBench-G's
softmax_optimize): where one block B >= n > 0 covers the row, tl.cdiv(n, B) == 1, so the main loop, up to the
last block's start `tl.cdiv(n, B) * B - B`, runs no block and the tail runs one block at offset 0. The twin drops
each main loop and runs each tail once (analysis/peeled.py)."""

from __future__ import annotations

import ast

import pytest
from interpreted import run_modules
from test_rewrites_structural import made as made_by

from kernelband import pyast

# An online softmax in two passes (running max and sum, then the normalised store), each a main loop over the
# whole blocks and a masked tail; the tail's lanes past the row add 0 to the sum. The last block's start comes
# from a helper, as FlagGems' prev_multiple_of.
MAIN_TAIL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def last_block_start(a, b):
    return tl.cdiv(a, b) * b - b


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, TILE: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * n_cols
    out_ptr += row * n_cols
    m = tl.full([TILE], float("-inf"), tl.float32)
    z = tl.zeros([TILE], tl.float32)
    main = last_block_start(n_cols, TILE)
    for start in range(0, main, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + cols)
        new_m = tl.maximum(m, x)
        z = z * tl.exp(m - new_m) + tl.exp(x - new_m)
        m = new_m
    for start in range(main, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        new_m = tl.maximum(m, x)
        z = z * tl.exp(m - new_m) + tl.where(cols < n_cols, tl.exp(x - new_m), 0.0)
        m = new_m
    top = tl.max(m, 0)
    total = tl.sum(tl.where(m > float("-inf"), z * tl.exp(m - top), 0.0), 0)
    main = last_block_start(n_cols, TILE)
    for start in range(0, main, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + cols)
        tl.store(out_ptr + cols, tl.exp(x - top) / total)
    for start in range(main, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(out_ptr + cols, tl.exp(x - top) / total, mask=cols < n_cols)


def softmax(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], TILE=16)
    return out
'''


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    return made_by(source, "single_pass")


def twin_loops(source: str) -> list:
    """The loops of the twin kernel."""
    tree = pyast.parse(source)
    [twin] = [f for f in tree.body if getattr(f, "name", "") == "softmax_kernel_single_pass"]
    return [n for n in ast.walk(twin) if type(n).__name__ in ("For", "While")]


def test_the_main_loops_run_no_block_and_each_tail_runs_once_at_offset_zero():
    [(rationale, new)], _ = made(MAIN_TAIL)
    assert rationale == ("softmax_kernel's 2 loop(s) over n_cols as one block of triton.next_power_of_2(n_cols) "
                         "(2 loop(s) that run no block there left out) where 0 < n_cols <= 16384 "
                         "(softmax_kernel_single_pass), the loops otherwise")
    assert twin_loops(new) == []
    twin = new[new.index("def softmax_kernel_single_pass"):]
    assert twin.count("    start = 0\n") == 2 and "tl.load(x_ptr + cols)\n" not in twin.partition("\ndef softmax(")[0]
    assert "    if 0 < n_cols <= 16384:\n" not in new  # the launch reads x.shape[1]
    assert "if 0 < x.shape[1] <= 16384:\n        softmax_kernel_single_pass[" in new


TAIL_LOAD = '        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))\n'


@pytest.mark.parametrize("old, new, reason", [
    # the second pass's tail starts where a program id says, not at the last block's start
    ("    for start in range(main, n_cols, TILE):\n        cols = start + tl.arange(0, TILE)\n" + TAIL_LOAD + "        tl.store",
     "    for start in range(tl.program_id(1) * TILE, n_cols, TILE):\n        cols = start + tl.arange(0, TILE)\n"
     + TAIL_LOAD + "        tl.store",
     "softmax_kernel's TILE also tiles program coordinates (a program id scales it)"),
    # the second pass's tail starts half way along the row: one block does not start it at 0
    ("    for start in range(main, n_cols, TILE):\n        cols = start + tl.arange(0, TILE)\n" + TAIL_LOAD + "        tl.store",
     "    for start in range(n_cols // 2, n_cols, TILE):\n        cols = start + tl.arange(0, TILE)\n"
     + TAIL_LOAD + "        tl.store",
     "a loop of softmax_kernel over blocks of TILE walks from tl.cdiv(n_cols, TILE) * TILE - TILE, not from the "
     "row's start: one block of the whole row covers other lanes than it does"),
    # the first pass's tail stops short of the row's end
    ("    for start in range(main, n_cols, TILE):\n        cols = start + tl.arange(0, TILE)\n" + TAIL_LOAD + "        new_m",
     "    for start in range(main, n_cols - 1, TILE):\n        cols = start + tl.arange(0, TILE)\n" + TAIL_LOAD
     + "        new_m",
     "a loop of softmax_kernel over blocks of TILE walks from tl.cdiv(n_cols, TILE) * TILE - TILE, not from the "
     "row's start: one block of the whole row covers other lanes than it does"),
])
def test_a_tail_that_one_block_may_not_cover_keeps_the_refusal(old, new, reason):
    assert old in MAIN_TAIL
    variants, reasons = made(MAIN_TAIL.replace(old, new))
    assert variants == [] and reason in reasons


@pytest.mark.slow
def test_the_twin_gives_the_loops_softmax_on_rows_shorter_than_equal_to_and_longer_than_one_block():
    [(_, variant)], _ = made(MAIN_TAIL)
    run_modules({"kb_original": MAIN_TAIL, "kb_variant": variant}, """
import torch
import kb_original as original, kb_variant as variant
torch.manual_seed(0)
for cols in (10, 16, 100):
    x = torch.randn(3, cols)
    x[1, cols - 1] = 30.0
    want = torch.softmax(x, dim=1)
    assert torch.allclose(original.softmax(x), want, atol=1e-5), cols
    assert torch.allclose(variant.softmax(x), original.softmax(x), atol=1e-5), cols
""")
