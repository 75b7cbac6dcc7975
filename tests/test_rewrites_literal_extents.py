"""The tile rewrites on a GEMM whose sizes are integers of the source, not parameters (TritonBench-G's
matmul_kernel fixes `M, N, K = 4096, 4096, 4096` in the kernel): its loads and stores are not masked, so a tile is
in bounds exactly where it divides the size it tiles, which is known before anything runs. matmul_configs keeps
the configs whose tiles divide the sizes, split_k splits the constant's K steps, persistent_tiles keeps the tiles;
the same on every spelling of the constant (bound once to a local, inline, a module constant) and with every name
replaced, and the same outputs as the original in the interpreter."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interpreted import run_modules  # noqa: E402
from respellings.renamed import renamed  # noqa: E402
from test_rewrite_correctness import one_config_each  # noqa: E402
from test_rewrites_structural import made, made_plain  # noqa: E402

# The sizes as locals bound once to literals, TritonBench's way; a K loop over block indices.
BOUND = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(c_ptr, a_ptr, b_ptr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    M, N, K = {m}, {n}, {k}
    stride_am = {k}
    stride_bk = {n}
    stride_cm = {n}
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :])
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :])
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = tl.cast(accumulator, tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    tl.store(c_ptr + stride_cm * offs_cm[:, None] + offs_cn[None, :], c)


def matmul(a, b):
    c = torch.empty(({m}, {n}), device=a.device, dtype=torch.float16)
    BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K = 64, 64, 32
    matmul_kernel[triton.cdiv({m}, BLOCK_SIZE_M), triton.cdiv({n}, BLOCK_SIZE_N)](
        c, a, b, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K)
    return c
'''

# The literals inline in the offsets and the loop bound; the grid's sizes locals of the host bound once.
INLINE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gemm(out, x, y, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    rows = tl.program_id(0) * TM + tl.arange(0, TM)
    cols = tl.program_id(1) * TN + tl.arange(0, TN)
    depth = tl.arange(0, TK)
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for step in range(tl.cdiv({k}, TK)):
        xs = tl.load(x + rows[:, None] * {k} + (step * TK + depth)[None, :])
        ys = tl.load(y + (step * TK + depth)[:, None] * {n} + cols[None, :])
        acc += tl.dot(xs, ys)
    tl.store(out + rows[:, None] * {n} + cols[None, :], acc.to(tl.float16))


def matmul(a, b):
    height, width = {m}, {n}
    c = torch.empty((height, width), device=a.device, dtype=torch.float16)
    gemm[(triton.cdiv(height, 64), triton.cdiv(width, 64))](c, a, b, TM=64, TN=64, TK=32)
    return c
'''

# Module constants: constexprs for the kernel (Triton reads no other globals), ints for the host; a K loop
# stepping by the tile.
MODULE = '''
import torch
import triton
import triton.language as tl

DEPTH = tl.constexpr({k})
WIDTH = tl.constexpr({n})
ROWS = {m}
COLS = {n}


@triton.jit
def mm(c_ptr, a_ptr, b_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, DEPTH, BK):
        a = tl.load(a_ptr + rm[:, None] * DEPTH + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * WIDTH + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * WIDTH + rn[None, :], acc.to(tl.float16))


def matmul(a, b):
    c = torch.empty((ROWS, COLS), device=a.device, dtype=torch.float16)
    mm[(triton.cdiv(ROWS, 64), triton.cdiv(COLS, 64))](c, a, b, BM=64, BN=64, BK=32)
    return c
'''

SPELLINGS = {"bound": BOUND, "inline": INLINE, "module": MODULE}
TILES = ("matmul_configs", "split_k", "persistent_tiles")
# M x N of 64 x 128 with the launch's 64 x 64 tiles: 2 tiles on the interpreter's 4 "SMs"; K = 256 in BK = 32
# steps: split_k takes SPLIT_K = min(4 // 2, cdiv(256, 4 * 32)) = 2
SIZES = dict(m=64, n=128, k=256)


def spelled(name: str, **sizes: int) -> str:
    return SPELLINGS[name].format(**{**SIZES, **sizes})


def tiles(source: str) -> list[tuple[int, int, int]]:
    """The (M, N, K) tiles of each config an autotuner holds, in order."""
    return [tuple(int(x) for x in found) for found in re.findall(
        r'triton\.Config\(\{"\w+": (\d+), "\w+": (\d+), "\w+": (\d+)\}', source)]


@pytest.mark.parametrize("name", SPELLINGS)
@pytest.mark.parametrize("rewrite", TILES)
def test_each_tile_rewrite_fires_on_every_spelling_of_the_constants_and_on_it_renamed(name, rewrite):
    source = spelled(name)
    for each in (source, renamed(source, "matmul")):
        found, reasons = made(each, rewrite)
        assert found, f"{rewrite} on {name}: {reasons}"


@pytest.mark.parametrize("name", SPELLINGS)
def test_matmul_configs_keeps_the_configs_whose_tiles_divide_the_constants(name):
    """After the launch's own 64 x 64 x 32: M = 64 leaves out the 128-row tiles, N = 128 the 256-column ones, and
    nothing is checked on the host: the kernel has no size parameter a check could read, and needs none."""
    [(tutorial, first), (inductor, second)], _ = made_plain(spelled(name), "matmul_configs")
    assert tiles(first) == [(64, 64, 32), (64, 128, 32), (64, 32, 32), (32, 64, 32)], tutorial
    assert tiles(second) == [(64, 64, 32), (64, 64, 64), (64, 128, 32), (64, 128, 64)], inductor
    assert "prune_configs_by" not in first + second
    deep = made_plain(spelled(name, k=96), "matmul_configs")[0]  # K = 96: the BK = 64 tiles are left out too
    assert [tiles(new) for _, new in deep] == [[(64, 64, 32), (64, 128, 32), (64, 32, 32), (32, 64, 32)],
                                              [(64, 64, 32), (64, 128, 32)]]


@pytest.mark.parametrize("name", SPELLINGS)
def test_a_constant_no_config_divides_is_refused_with_what_the_kernel_fixes(name):
    """K = 100 and the loads along K not masked: no tutorial or Inductor tile of 32 or 64 ends at 100."""
    tile = {"bound": "BLOCK_SIZE_K", "inline": "TK", "module": "BK"}[name]
    assert made_plain(spelled(name, k=100), "matmul_configs") == ([], (
        f"no config of Triton's matmul tutorial configs has tiles that divide the sizes the kernel fixes ({tile} of "
        "100) along its unmasked accesses",))


def test_a_constant_a_tile_may_not_divide_is_still_refused_where_no_config_fits_it():
    """The rows a 64 x 64 launch tiles are 100: every config's M tile reaches past them."""
    found, reasons = made_plain(spelled("bound", m=100), "matmul_configs")
    assert found == [] and reasons == (
        "no config of Triton's matmul tutorial configs has tiles that divide the sizes the kernel fixes "
        "(BLOCK_SIZE_M of 100) along its unmasked accesses",)


def test_split_k_splits_the_constants_steps():
    [(_, new)], _ = made_plain(spelled("bound"), "split_k")
    assert "k_per_split = tl.cdiv(tl.cdiv(256, BLOCK_SIZE_K), SPLIT_K) * BLOCK_SIZE_K\n" in new
    assert "triton.cdiv(256, 4 * BLOCK_SIZE_K)" in new


@pytest.mark.slow
@pytest.mark.parametrize("name", SPELLINGS)
def test_every_variant_gives_the_originals_outputs_in_the_interpreter(name):
    """Each config of matmul_configs' variants, the split (SPLIT_K = 2) and persistent_tiles' variant (2 tiles, not
    more than the 4 "SMs": the original launch), against the original on the sizes it fixes: other K tiles sum
    in another order, so float16 outputs agree to rounding."""
    source = spelled(name)
    variants = {}
    for rewrite in TILES:
        for index, (_, new) in enumerate(made(source, rewrite)[0]):
            for label, each in one_config_each(new):
                variants[f"{rewrite}{index}{label}"] = each
    assert len(variants) == 4 + 4 + 1 + 1
    modules = {f"kb_v{i}": v for i, v in enumerate(variants.values())}
    check = f"""
import importlib
a = torch.randn({SIZES['m']}, {SIZES['k']}).half()
b = (torch.randn({SIZES['k']}, {SIZES['n']}) * {SIZES['k']} ** -0.5).half()
want = original.matmul(a, b)
class Recorded:
    def __init__(self, kernel, grids):
        self.kernel, self.grids = kernel, grids
    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]
    def __getattr__(self, name):
        return getattr(self.kernel, name)
for name, label in zip({list(modules)!r}, {list(variants)!r}):
    module, grids = importlib.import_module(name), []
    for twin in [n for n in dir(module) if n.endswith(("_split_k", "_persistent"))]:
        setattr(module, twin, Recorded(getattr(module, twin), grids))
    got = module.matmul(a, b)
    assert torch.allclose(got.float(), want.float(), atol=1e-2, rtol=1e-2), (label, (got - want).abs().max())
    if label.startswith("split_k"):  # 2 tiles on 4 "SMs": the K steps in 2 splits, then the sum
        assert grids == [(1, 2, 2), (1, 2)], grids
"""
    run_modules({"kb_original": source, **modules}, "import torch\nimport kb_original as original\n"
                "torch.manual_seed(0)\n" + check)


def test_a_free_tile_along_a_constant_no_tutorial_tile_divides_stays_as_the_launch_sets_it():
    """TritonBench-G's mixed_sparse_attention walks `range(0, max_num_cols, BLOCK_N)` with max_num_cols = 16, its
    column load masked by a flag, not by its offsets: no fused-attention tile of BLOCK_N (32 to 128) divides 16,
    so BLOCK_N keeps the launch's value and BLOCK_M alone tunes, as before the size was known."""
    from kernelband.tasks import load_task
    from kernelband.tasks import tritonbench as tb

    if tb.find() is None:
        pytest.skip("no TritonBench-G data")
    source = load_task("tritonbench:mixed_sparse_attention").module_source
    [(rationale, new)], _ = made_plain(source, "matmul_configs")
    assert "8 configs over BLOCK_M, num_warps, num_stages," in rationale
    assert '("BLOCK_M", "N_CTX")' in new and "BLOCK_N\": " not in new
